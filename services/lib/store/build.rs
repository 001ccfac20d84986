// refinery embeds `migrations/*.sql` at compile time; make cargo rebuild
// this crate when they change.
fn main() {
    println!("cargo:rerun-if-changed=../../../migrations");
}
