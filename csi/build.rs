//! Generates the `csi.v1` bindings from `proto/csi.proto`.
//!
//! protox is a pure-Rust protobuf compiler, so no system `protoc` is needed. Besides the
//! generated code this writes `csi_descriptor.bin` (the encoded `FileDescriptorSet`, custom
//! options included) so tests can check the hand-written redaction list against the
//! `csi_secret` markings in the proto itself.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed=proto/csi.proto");

    let mut compiler = protox::Compiler::new([manifest_dir.join("proto")])?;
    compiler
        .include_imports(true)
        .include_source_info(true)
        .open_file("csi.proto")?;

    // Every message with a field marked `(csi.v1.csi_secret) = true` gets no derived
    // `Debug`; `src/redact.rs` provides a redacting one (a test checks they agree).
    let pool = compiler.descriptor_pool();
    let csi_secret = pool
        .get_extension_by_name("csi.v1.csi_secret")
        .ok_or("csi.proto does not declare csi.v1.csi_secret")?;
    let secret_messages: Vec<String> = pool
        .all_messages()
        .filter(|m| {
            m.fields().any(|f| {
                let opts = f.options();
                opts.has_extension(&csi_secret)
                    && opts.get_extension(&csi_secret).as_bool() == Some(true)
            })
        })
        .map(|m| format!(".{}", m.full_name()))
        .collect();
    if secret_messages.is_empty() {
        return Err("no field in csi.proto is marked csi_secret".into());
    }

    std::fs::write(
        out_dir.join("csi_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .codec_path("crate::codec::SmallBuffers")
        .build_client(true)
        .build_server(true)
        .skip_debug(secret_messages)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
