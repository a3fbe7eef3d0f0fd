//! Inline ephemeral volumes (`csi.storage.k8s.io/ephemeral: "true"`): NodePublishVolume does the stage work itself.
//!
//! The protocol that serves the volume parses it ([`Protocol::parse_inline`]; SMB only today: an inline volume with
//! iSCSI attributes is refused as such, never parsed as a share) and stages it privately.
//!
//! There is no staging path, so the driver stages into a private directory link under its plugin directory,
//! `<kubelet-root>\plugins\<driver-name>\ephemeral\<sha256(volume_id)>`, and links the target to it. The credentials
//! come from the Secret named by `secretName` in the pod's namespace (`csi.storage.k8s.io/pod.namespace`; a
//! `secretNamespace` naming any other namespace is refused: pod authors must not borrow other namespaces'
//! credentials; kubelet passes, and overwrites, the pod's namespace only when the CSIDriver has `podInfoOnMount: true`,
//! so that setting is what makes this check hold), read from the Kubernetes API through a [`SecretSource`](super::SecretSource) (`crate::ephemeral::KubeSecrets`). NodeUnpublishVolume
//! removes the target link and then undoes the private stage (the mapping is removed when no other volume uses it).

use super::{
    Invalidate, Owner, Protocol, PublishRequest, Secrets, StageAt, StageRequest, VolumeManager,
    context_get, host_error,
};
use crate::error::Error;
use crate::host::{Host, HostPath};
use crate::locks::Deadline;
use crate::state::{Phase, file_key};

/// The private staging directory of an inline ephemeral volume.
pub fn staging_path<H: Host, P: Protocol<H>>(
    mgr: &VolumeManager<H, P>,
    volume_id: &str,
) -> Result<HostPath, Error> {
    let cfg = mgr.config();
    cfg.kubelet_root.plugin_dir(&cfg.driver_name)?.join(
        &format!("ephemeral\\{}", file_key(volume_id)),
        &cfg.kubelet_root,
    )
}

pub(crate) async fn publish<H: Host, P: Protocol<H>>(
    mgr: &VolumeManager<H, P>,
    req: &PublishRequest,
    target: &HostPath,
    d: Deadline,
) -> Result<(), Error> {
    let ctx = &req.volume_context;
    let name = context_get(ctx, "secretName").filter(|s| !s.is_empty());
    let pod_namespace =
        context_get(ctx, "csi.storage.k8s.io/pod.namespace").filter(|s| !s.is_empty());
    let secret_namespace = context_get(ctx, "secretNamespace").filter(|s| !s.is_empty());
    // The pod's author writes these attributes: a Secret of another namespace would hand them credentials they
    // cannot read (a confused deputy), so the Secret must live in the pod's own namespace.
    if let (Some(name), Some(wanted)) = (name, secret_namespace)
        && pod_namespace != Some(wanted)
    {
        return Err(Error::FailedPrecondition(format!(
            "inline volume names Secret {}/{}, which is not in the pod's namespace; rule: inline ephemeral \
             volumes may only use Secrets of their pod's namespace (omit secretNamespace)",
            crate::error::quote_short(wanted),
            crate::error::quote_short(name)
        )));
    }
    let namespace = secret_namespace.or(pod_namespace);
    let secrets = match name {
        None => Secrets::default(),
        Some(name) => {
            let Some(namespace) = namespace else {
                return Err(Error::InvalidArgument(
                    "inline volume names secretName but kubelet passed no csi.storage.k8s.io/pod.namespace; rule: \
                     the CSIDriver object must have podInfoOnMount: true (the chart's does)"
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
    let stage = StageRequest {
        volume_id: req.volume_id.clone(),
        staging_target_path: String::new(),
        capability: req.capability.clone(),
        volume_context: req.volume_context.clone(),
        secrets,
    };
    let vol = mgr.protocol.parse_inline(&stage).ok_or_else(|| {
        Error::InvalidArgument(
            "inline ephemeral volumes are not supported by the protocol these volume attributes select (an iSCSI \
             target has none); use a PersistentVolume"
                .to_owned(),
        )
    })??;
    let _guard = mgr
        .volume_locks()
        .try_lock(&req.volume_id, "NodePublishVolume")?;
    let _stats = Invalidate::around(mgr.stats_cache(), &req.volume_id);
    let staging = staging_path(mgr, &req.volume_id)?;
    mgr.refuse_foreign_path(&req.volume_id, target, Owner::Target)?;
    let access = req
        .capability
        .as_ref()
        .ok_or_else(|| Error::InvalidArgument("volume_capability is required".to_owned()))?
        .access();
    let existing = mgr.check_target(&req.volume_id, target, &staging, &access, req.readonly)?;
    let record = mgr.store().volume(&req.volume_id)?;
    if existing.is_none()
        && let Some(rec) = &record
    {
        mgr.check_second_target(rec, target, &access)?;
    }
    if !record.is_some_and(|r| r.phase == Phase::Staged) {
        let parent = mgr
            .config()
            .kubelet_root
            .plugin_dir(&mgr.config().driver_name)?;
        let dir = parent.join("ephemeral", &mgr.config().kubelet_root)?;
        mgr.context()
            .calls(d)
            .mkdir(&dir)
            .await
            .map_err(|e| host_error(e, &dir))?;
    }
    let at = StageAt {
        volume_id: &req.volume_id,
        staging: &staging,
        ephemeral: true,
    };
    mgr.protocol
        .stage(mgr.stage_context(&access), at, &vol, d)
        .await?;
    mgr.remember_access(&req.volume_id, access.clone()).await?;
    let link = super::publish::Link {
        volume_id: &req.volume_id,
        target,
        staging: &staging,
    };
    mgr.link_target(link, access, req.readonly, None, d).await
}
