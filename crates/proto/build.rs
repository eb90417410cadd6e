//! Compiles `proto/gatehouse/v1/*.proto` with protox (a protobuf compiler written in Rust, so a
//! fresh machine needs no `protoc`) and generates tonic clients and servers from the result.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    // Canonical, so that the proto files found below sit literally under the include path.
    let include = fs::canonicalize(manifest_dir.join("../../proto"))?;
    let package_dir = include.join("gatehouse/v1");
    println!("cargo:rerun-if-changed={}", package_dir.display());

    let protos = proto_files(&package_dir)?;
    for proto in &protos {
        println!("cargo:rerun-if-changed={}", proto.display());
    }

    let mut compiler = protox::Compiler::new([&include])?;
    // Source info keeps the proto comments: they become rustdoc, and reflection clients
    // (grpcurl describe) show them.
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(&protos)?;

    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("gatehouse_v1_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // A call record is hundreds of bytes and a resync marker is eight: box the record so
        // every event moved through a watch channel is not the size of the largest one.
        .boxed(".gatehouse.v1.ApprovalEvent.event.change")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}

/// Every `.proto` file directly in `dir`, sorted so the build does not depend on directory order.
fn proto_files(dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "proto") {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(format!("no .proto files in {}", dir.display()).into());
    }
    files.sort();
    Ok(files)
}
