//! Generates the tonic/prost code for `proto/mneme/v1`.
//!
//! protoc comes from the `protoc-bin-vendored` crate (a static binary in a
//! crates.io package), so building needs no system package and downloads
//! nothing; set `PROTOC` to use another protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../../../proto";
    let protos = [
        format!("{root}/mneme/v1/common.proto"),
        format!("{root}/mneme/v1/memory.proto"),
        format!("{root}/mneme/v1/surfacing.proto"),
    ];
    let mut config = tonic_prost_build::Config::new();
    if std::env::var_os("PROTOC").is_none() {
        config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    }
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .emit_rerun_if_changed(true)
        .file_descriptor_set_path(out_dir.join("mneme_descriptor.bin"))
        .compile_with_config(config, &protos, &[root.to_owned()])?;
    println!("cargo:rerun-if-changed={root}");
    Ok(())
}
