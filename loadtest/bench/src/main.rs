//! `mneme-bench`: retrieval-quality benchmarks (work in progress).

fn main() {
    eprintln!("mneme-bench: not implemented yet");
    std::process::exit(2);
}
