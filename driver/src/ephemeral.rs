//! Inline ephemeral volumes (`csi.storage.k8s.io/ephemeral: "true"`): NodePublishVolume does the stage work itself.
//!
//! There is no staging path, so the driver stages into a private directory link under its plugin directory,
//! `<kubelet-root>\plugins\<driver-name>\ephemeral\<sha256(volume_id)>`, and links the target to it. The credentials
//! come from the Secret named by `secretName` in `secretNamespace` (default: the pod's namespace,
//! `csi.storage.k8s.io/pod.namespace`), read from the Kubernetes API through a [`SecretSource`]. NodeUnpublishVolume
//! removes the target link and then undoes the private stage (the mapping is removed when no other volume uses it).

use crate::error::Error;
use crate::host::Host;
use crate::locks::Deadline;
use crate::paths::HostPath;
use crate::smb;
use crate::state::{Phase, file_key};
use crate::volume::{PublishRequest, VolumeManager};

#[cfg(doc)]
use crate::volume::SecretSource;

/// The private staging directory of an inline ephemeral volume.
pub fn staging_path<H: Host>(mgr: &VolumeManager<H>, volume_id: &str) -> Result<HostPath, Error> {
    let cfg = mgr.config();
    cfg.kubelet_root.plugin_dir(&cfg.driver_name)?.join(
        &format!("ephemeral\\{}", file_key(volume_id)),
        &cfg.kubelet_root,
    )
}

pub(crate) async fn publish<H: Host>(
    mgr: &VolumeManager<H>,
    req: &PublishRequest,
    target: &HostPath,
    d: Deadline,
) -> Result<(), Error> {
    let ctx = &req.volume_context;
    let name = smb::context_get(ctx, "secretName").filter(|s| !s.is_empty());
    let namespace = smb::context_get(ctx, "secretNamespace")
        .filter(|s| !s.is_empty())
        .or_else(|| {
            smb::context_get(ctx, "csi.storage.k8s.io/pod.namespace").filter(|s| !s.is_empty())
        });
    let secrets = match name {
        None => smb::Secrets::default(),
        Some(name) => {
            let Some(namespace) = namespace else {
                return Err(Error::InvalidArgument(
                    "inline volume names secretName but neither secretNamespace nor csi.storage.k8s.io/pod.namespace \
                     is set; rule: enable podInfoOnMount on the CSIDriver or set secretNamespace"
                        .to_owned(),
                ));
            };
            let Some(source) = mgr.secret_source() else {
                return Err(Error::FailedPrecondition(
                    "inline ephemeral volumes with secretName need Kubernetes API access, which this driver instance \
                     does not have"
                        .to_owned(),
                ));
            };
            tracing::debug!(namespace, name, "reading the inline volume's Secret");
            d.run("reading the Secret", source.secret(namespace, name))
                .await?
        }
    };
    let vol = smb::parse_volume(ctx, &secrets)?;
    let _guard = mgr
        .volume_locks()
        .try_lock(&req.volume_id, "NodePublishVolume")?;
    let staging = staging_path(mgr, &req.volume_id)?;
    let staged = mgr
        .store()
        .volume(&req.volume_id)?
        .is_some_and(|r| r.phase == Phase::Staged);
    if !staged {
        let parent = mgr
            .config()
            .kubelet_root
            .plugin_dir(&mgr.config().driver_name)?;
        mgr.ensure_dir(&parent.join("ephemeral", &mgr.config().kubelet_root)?, d)
            .await?;
    }
    mgr.stage_smb(&req.volume_id, &staging, &vol, true, d)
        .await?;
    mgr.link_target(&req.volume_id, target, &staging, req.readonly, d)
        .await
}
