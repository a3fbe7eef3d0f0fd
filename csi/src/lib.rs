//! Rust bindings for the Container Storage Interface (CSI) spec, package `csi.v1`.
//!
//! The protobuf definition lives in `proto/csi.proto`, written by hand to match the wire format of
//! CSI spec [`SPEC_VERSION`] exactly, and is compiled at build time with `protox` and
//! `tonic-prost-build` (no system `protoc`). [`v1`] holds the prost messages plus the tonic client
//! and server stubs of every service (`identity_client`, `node_server`, ...).
//!
//! Request types that carry a `secrets` map (fields marked `csi_secret` in the proto) have a
//! hand-written [`Debug`](std::fmt::Debug) that prints only the number of secret entries, never
//! keys or values; see [`REDACTED_MESSAGES`].

pub mod codec;
mod redact;

pub use redact::REDACTED_MESSAGES;

/// The CSI spec version whose wire format [`v1`] matches.
pub const SPEC_VERSION: &str = "1.12.0";

/// The encoded `FileDescriptorSet` of `csi.proto` and its imports, custom options included.
///
/// Useful for gRPC reflection and for checking option markings such as `csi_secret`.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/csi_descriptor.bin"));

/// Generated CSI messages and services (protobuf package `csi.v1`).
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    rustdoc::all,
    rust_2018_idioms
)]
pub mod v1 {
    tonic::include_proto!("csi.v1");
}

#[cfg(test)]
mod wire_tests {
    use std::collections::HashMap;

    use prost::Message;
    use prost::bytes::Buf;

    use super::v1;

    /// Returns the (field number, wire type) of every top-level field of an encoded message.
    fn tags(mut buf: &[u8]) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        while buf.has_remaining() {
            let key = prost::encoding::decode_varint(&mut buf).expect("key");
            let (field, wire_type) = ((key >> 3) as u32, key & 7);
            match wire_type {
                0 => {
                    prost::encoding::decode_varint(&mut buf).expect("varint");
                }
                2 => {
                    let len = prost::encoding::decode_varint(&mut buf).expect("len") as usize;
                    buf.advance(len);
                }
                other => panic!("unexpected wire type {other} for field {field}"),
            }
            out.push((field, wire_type));
        }
        out
    }

    fn one(k: &str) -> HashMap<String, String> {
        HashMap::from([(k.to_owned(), "v".to_owned())])
    }

    fn mount_capability() -> v1::VolumeCapability {
        v1::VolumeCapability {
            access_type: Some(v1::volume_capability::AccessType::Mount(
                v1::volume_capability::MountVolume {
                    fs_type: "ntfs".into(),
                    ..Default::default()
                },
            )),
            access_mode: Some(v1::volume_capability::AccessMode {
                mode: v1::volume_capability::access_mode::Mode::MultiNodeMultiWriter as i32,
            }),
        }
    }

    #[test]
    fn node_stage_volume_request_field_numbers() {
        let req = v1::NodeStageVolumeRequest {
            volume_id: "vol".into(),
            publish_context: one("p"),
            staging_target_path: r"C:\stage".into(),
            volume_capability: Some(mount_capability()),
            secrets: one("s"),
            volume_context: one("c"),
        };
        let bytes = req.encode_to_vec();
        // prost encodes fields in field-number order; all of these are length-delimited.
        assert_eq!(
            tags(&bytes),
            [(1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 2)]
        );
        // Field 5 holds the secrets map: decoding an encoding that only has field 5 yields it.
        let only_secrets = v1::NodeStageVolumeRequest {
            secrets: one("s"),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(only_secrets[0], (5 << 3) | 2);
        let back = v1::NodeStageVolumeRequest::decode(bytes.as_slice()).expect("decode");
        assert_eq!(back, req);
    }

    #[test]
    fn node_publish_volume_request_field_numbers() {
        let req = v1::NodePublishVolumeRequest {
            volume_id: "vol".into(),
            publish_context: one("p"),
            staging_target_path: r"C:\stage".into(),
            target_path: r"C:\pod\mount".into(),
            volume_capability: Some(mount_capability()),
            readonly: true,
            secrets: one("s"),
            volume_context: one("c"),
        };
        let bytes = req.encode_to_vec();
        assert_eq!(
            tags(&bytes),
            [
                (1, 2),
                (2, 2),
                (3, 2),
                (4, 2),
                (5, 2),
                (6, 0),
                (7, 2),
                (8, 2)
            ]
        );
        // `readonly` is field 6, varint, value 1.
        let only_readonly = v1::NodePublishVolumeRequest {
            readonly: true,
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(only_readonly, [6 << 3, 1]);
    }

    #[test]
    fn volume_capability_oneof_and_access_mode_numbers() {
        let bytes = mount_capability().encode_to_vec();
        // mount is oneof member 2, access_mode is field 3.
        assert_eq!(tags(&bytes), [(2, 2), (3, 2)]);
        let mode = v1::volume_capability::AccessMode {
            mode: v1::volume_capability::access_mode::Mode::SingleNodeMultiWriter as i32,
        };
        assert_eq!(mode.encode_to_vec(), [1 << 3, 7]);
    }

    #[test]
    fn spec_version_is_recorded() {
        assert_eq!(super::SPEC_VERSION, "1.12.0");
    }
}
