//! The requests of one volume's lifecycle as kubelet sends them, shared by the bench commands (`backend_bench`,
//! `user_waits`). A folder without `main.rs` is not an example of its own: each command includes this file.

use std::collections::BTreeMap;

use wincsi::lifecycle::{
    AccessType, Capability, PublishRequest, StageRequest, UnpublishRequest, UnstageRequest,
};
use wincsi::smb::Secrets;

/// A mounted volume, single-node writer (the access mode every bench volume uses).
pub(crate) fn cap() -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Mount {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: 1,
    })
}

/// Stage, publish, unpublish and unstage of volume `id` (staging and pod paths under `C:\var\lib\kubelet`).
pub(crate) fn lifecycle(
    id: &str,
    volume_context: BTreeMap<String, String>,
    secrets: Secrets,
) -> (
    StageRequest,
    PublishRequest,
    UnpublishRequest,
    UnstageRequest,
) {
    let staging = format!(r"C:\var\lib\kubelet\plugins\b\{id}");
    let target = format!(r"C:\var\lib\kubelet\pods\p\{id}");
    (
        StageRequest {
            volume_id: id.into(),
            staging_target_path: staging.clone(),
            capability: cap(),
            volume_context,
            secrets,
        },
        PublishRequest {
            volume_id: id.into(),
            staging_target_path: staging.clone(),
            target_path: target.clone(),
            capability: cap(),
            ..Default::default()
        },
        UnpublishRequest {
            volume_id: id.into(),
            target_path: target,
        },
        UnstageRequest {
            volume_id: id.into(),
            staging_target_path: staging,
        },
    )
}
