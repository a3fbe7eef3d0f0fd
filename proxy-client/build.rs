//! Generates the csi-proxy gRPC bindings from `proto/<group>/<version>/api.proto`.
//!
//! Every group is compiled in its own invocation into its own directory under `OUT_DIR`,
//! because disk, volume, filesystem and smb v1 all share `package v1` and prost names its
//! output after the package. protox is a pure-Rust protobuf compiler, so no system `protoc`
//! is needed. Server stubs are only generated with the cargo feature `server`.

use std::path::PathBuf;

/// (module name, proto file relative to `proto/`)
const GROUPS: &[(&str, &str)] = &[
    ("disk_v1", "disk/v1/api.proto"),
    ("volume_v1", "volume/v1/api.proto"),
    ("filesystem_v1", "filesystem/v1/api.proto"),
    ("smb_v1", "smb/v1/api.proto"),
    ("iscsi_v1alpha2", "iscsi/v1alpha2/api.proto"),
    ("system_v1alpha1", "system/v1alpha1/api.proto"),
];

/// Messages that carry secrets: their `Debug` is written by hand (redacting) in `src/proto.rs`.
const SECRET_MESSAGES: &[&str] = &[
    ".v1.NewSmbGlobalMappingRequest",
    ".v1alpha2.ConnectTargetRequest",
    ".v1alpha2.SetMutualChapSecretRequest",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let proto_root = manifest_dir.join("proto");
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();

    println!("cargo:rerun-if-changed=proto");
    for (module, file) in GROUPS {
        println!("cargo:rerun-if-changed=proto/{file}");
        let fds = protox::compile([*file], [&proto_root])?;
        let group_out = out_dir.join(module);
        std::fs::create_dir_all(&group_out)?;
        tonic_prost_build::configure()
            .codec_path("crate::codec::SmallBuffers")
            .build_client(true)
            .build_server(server)
            .build_transport(true)
            .btree_map(".")
            .skip_debug(SECRET_MESSAGES.iter().copied())
            .out_dir(&group_out)
            .compile_fds(fds)?;
    }
    Ok(())
}
