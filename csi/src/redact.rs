//! Redacting `Debug` for every CSI request that carries a `secrets` map.
//!
//! `build.rs` turns off the derived `Debug` of each message with a field marked
//! `(csi.v1.csi_secret) = true`; this module supplies the replacement. It prints every other
//! field normally and the secrets only as a count of entries, so neither secret keys nor values
//! can reach a log line through `{:?}`. The tests below decode the real descriptor set and fail
//! if a secret-bearing message is missing here or a field is left out.

use std::fmt;

use crate::v1;

/// Formats a secrets map as `<N redacted>`.
struct Redacted(usize);

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} redacted>", self.0)
    }
}

macro_rules! redacted_debug {
    ($($ty:ident { $($field:ident),* $(,)? })*) => {
        $(
            impl fmt::Debug for v1::$ty {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.debug_struct(stringify!($ty))
                        $(.field(stringify!($field), &self.$field))*
                        .field("secrets", &Redacted(self.secrets.len()))
                        .finish()
                }
            }
        )*

        /// Fully-qualified protobuf names (`csi.v1.X`) of the messages whose `Debug` redacts the
        /// `secrets` map.
        pub const REDACTED_MESSAGES: &[&str] = &[$(concat!("csi.v1.", stringify!($ty))),*];

        /// The fields each redacting `Debug` prints (besides the count of `secrets`).
        #[cfg(test)]
        const PRINTED_FIELDS: &[(&str, &[&str])] = &[
            $((concat!("csi.v1.", stringify!($ty)), &[$(stringify!($field)),*])),*
        ];
    };
}

redacted_debug! {
    CreateVolumeRequest {
        name, capacity_range, volume_capabilities, parameters, volume_content_source,
        accessibility_requirements, mutable_parameters,
    }
    DeleteVolumeRequest { volume_id }
    ControllerPublishVolumeRequest { volume_id, node_id, volume_capability, readonly, volume_context }
    ControllerUnpublishVolumeRequest { volume_id, node_id }
    ValidateVolumeCapabilitiesRequest {
        volume_id, volume_context, volume_capabilities, parameters, mutable_parameters,
    }
    ControllerModifyVolumeRequest { volume_id, mutable_parameters }
    CreateSnapshotRequest { source_volume_id, name, parameters }
    DeleteSnapshotRequest { snapshot_id }
    ListSnapshotsRequest { max_entries, starting_token, source_volume_id, snapshot_id }
    GetSnapshotRequest { snapshot_id }
    ControllerExpandVolumeRequest { volume_id, capacity_range, volume_capability }
    NodeStageVolumeRequest {
        volume_id, publish_context, staging_target_path, volume_capability, volume_context,
    }
    NodePublishVolumeRequest {
        volume_id, publish_context, staging_target_path, target_path, volume_capability,
        readonly, volume_context,
    }
    NodeExpandVolumeRequest {
        volume_id, volume_path, capacity_range, staging_target_path, volume_capability,
    }
    CreateVolumeGroupSnapshotRequest { name, source_volume_ids, parameters }
    DeleteVolumeGroupSnapshotRequest { group_snapshot_id, snapshot_ids }
    GetVolumeGroupSnapshotRequest { group_snapshot_id, snapshot_ids }
    GetMetadataAllocatedRequest { snapshot_id, starting_offset, max_results }
    GetMetadataDeltaRequest { base_snapshot_id, target_snapshot_id, starting_offset, max_results }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    use prost::Message;

    use super::*;

    const SECRET_KEY: &str = "password-key-XYZ";
    const SECRET_VALUE: &str = "hunter2-SECRET-VALUE";

    fn secrets() -> HashMap<String, String> {
        HashMap::from([
            (SECRET_KEY.to_owned(), SECRET_VALUE.to_owned()),
            ("username".to_owned(), "alice-SECRET-USER".to_owned()),
        ])
    }

    /// Builds each type with secrets set and returns (proto name, Debug output).
    macro_rules! debug_of_each {
        ($($ty:ident),* $(,)?) => {
            vec![$(
                (
                    concat!("csi.v1.", stringify!($ty)),
                    format!("{:?}", v1::$ty { secrets: secrets(), ..Default::default() }),
                )
            ),*]
        };
    }

    fn debug_outputs() -> Vec<(&'static str, String)> {
        debug_of_each!(
            CreateVolumeRequest,
            DeleteVolumeRequest,
            ControllerPublishVolumeRequest,
            ControllerUnpublishVolumeRequest,
            ValidateVolumeCapabilitiesRequest,
            ControllerModifyVolumeRequest,
            CreateSnapshotRequest,
            DeleteSnapshotRequest,
            ListSnapshotsRequest,
            GetSnapshotRequest,
            ControllerExpandVolumeRequest,
            NodeStageVolumeRequest,
            NodePublishVolumeRequest,
            NodeExpandVolumeRequest,
            CreateVolumeGroupSnapshotRequest,
            DeleteVolumeGroupSnapshotRequest,
            GetVolumeGroupSnapshotRequest,
            GetMetadataAllocatedRequest,
            GetMetadataDeltaRequest,
        )
    }

    #[test]
    fn debug_never_prints_secret_keys_or_values() {
        let outputs = debug_outputs();
        for (name, out) in &outputs {
            for needle in [SECRET_KEY, SECRET_VALUE, "alice-SECRET-USER", "hunter2"] {
                assert!(
                    !out.contains(needle),
                    "{name} Debug leaks {needle:?}: {out}"
                );
            }
            assert!(out.contains("secrets: <2 redacted>"), "{name}: {out}");
        }
        // The Debug check above covers exactly the redacted list.
        let covered: BTreeSet<_> = outputs.iter().map(|(n, _)| *n).collect();
        let redacted: BTreeSet<_> = REDACTED_MESSAGES.iter().copied().collect();
        assert_eq!(covered, redacted);
    }

    #[test]
    fn redacted_debug_still_shows_non_secret_fields() {
        let req = v1::NodeStageVolumeRequest {
            volume_id: "vol-1".into(),
            staging_target_path: r"C:\var\lib\kubelet\plugins\staging".into(),
            secrets: secrets(),
            ..Default::default()
        };
        let out = format!("{req:?}");
        assert!(out.starts_with("NodeStageVolumeRequest {"), "{out}");
        assert!(out.contains("vol-1"), "{out}");
        assert!(out.contains("staging_target_path"), "{out}");
    }

    // A minimal view of descriptor.proto that keeps the `csi_secret` (1059) field option, which
    // prost_types drops as an unknown extension.
    #[derive(Clone, PartialEq, Message)]
    struct FileDescriptorSet {
        #[prost(message, repeated, tag = "1")]
        file: Vec<FileDescriptorProto>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct FileDescriptorProto {
        #[prost(string, tag = "2")]
        package: String,
        #[prost(message, repeated, tag = "4")]
        message_type: Vec<DescriptorProto>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct DescriptorProto {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(message, repeated, tag = "2")]
        field: Vec<FieldDescriptorProto>,
        #[prost(message, repeated, tag = "3")]
        nested_type: Vec<DescriptorProto>,
        #[prost(message, optional, tag = "7")]
        options: Option<MessageOptions>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct MessageOptions {
        #[prost(bool, tag = "7")]
        map_entry: bool,
    }
    #[derive(Clone, PartialEq, Message)]
    struct FieldDescriptorProto {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(message, optional, tag = "8")]
        options: Option<FieldOptions>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct FieldOptions {
        #[prost(bool, tag = "1059")]
        csi_secret: bool,
    }

    /// (message full name -> (all field names, secret field names)) for package csi.v1.
    fn csi_messages() -> BTreeMap<String, (Vec<String>, Vec<String>)> {
        fn walk(
            prefix: &str,
            msgs: &[DescriptorProto],
            out: &mut BTreeMap<String, (Vec<String>, Vec<String>)>,
        ) {
            for m in msgs {
                if m.options.as_ref().is_some_and(|o| o.map_entry) {
                    continue;
                }
                let name = format!("{prefix}.{}", m.name);
                let all = m.field.iter().map(|f| f.name.clone()).collect();
                let secret = m
                    .field
                    .iter()
                    .filter(|f| f.options.as_ref().is_some_and(|o| o.csi_secret))
                    .map(|f| f.name.clone())
                    .collect();
                out.insert(name.clone(), (all, secret));
                walk(&name, &m.nested_type, out);
            }
        }
        let fds = FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).expect("descriptor set");
        let mut out = BTreeMap::new();
        for file in fds.file.iter().filter(|f| f.package == "csi.v1") {
            walk("csi.v1", &file.message_type, &mut out);
        }
        out
    }

    #[test]
    fn redacted_list_matches_csi_secret_markings() {
        let messages = csi_messages();
        // 94 messages (nested ones included, map entries excluded) in spec v1.12.0.
        assert_eq!(messages.len(), 94, "descriptor set looks truncated");
        assert!(messages.contains_key("csi.v1.VolumeCapability.MountVolume"));
        let marked: BTreeSet<&str> = messages
            .iter()
            .filter(|(_, (_, secret))| !secret.is_empty())
            .map(|(name, _)| name.as_str())
            .collect();
        let redacted: BTreeSet<&str> = REDACTED_MESSAGES.iter().copied().collect();
        assert_eq!(
            marked, redacted,
            "messages with csi_secret fields vs REDACTED_MESSAGES"
        );
        for name in &marked {
            let (_, secret) = &messages[*name];
            assert_eq!(
                secret,
                &["secrets"],
                "{name}: only `secrets` is redacted by Debug"
            );
        }
    }

    #[test]
    fn redacted_debug_prints_every_other_field() {
        let messages = csi_messages();
        for (name, printed) in PRINTED_FIELDS {
            let (all, _) = &messages[*name];
            let expected: BTreeSet<&str> = all
                .iter()
                .map(String::as_str)
                .filter(|f| *f != "secrets")
                .collect();
            let printed: BTreeSet<&str> = printed.iter().copied().collect();
            assert_eq!(
                printed, expected,
                "{name}: fields printed by the redacting Debug"
            );
        }
    }
}
