//! The lifecycle as the CSI Node service sees it: [`Lifecycle`] takes the generated CSI requests and answers CSI
//! responses, object-safe so the service layer needs no host or protocol type; the conversions between the CSI
//! types and the lifecycle's own requests live here too.

use std::collections::BTreeMap;

use super::{
    AccessType, Capability, ExpandRequest, Protocol, PublishRequest, Secrets, StageRequest,
    StatsRequest, UnpublishRequest, UnstageRequest, VolumeManager, VolumeStats,
};
use crate::error::Error;
use crate::host::Host;
use crate::locks::Deadline;

/// A boxed, sendable future of a lifecycle result.
pub type LifecycleFuture<'a, T> =
    std::pin::Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// The volume lifecycle as the Node service sees it: CSI requests in, CSI responses out. Object-safe so the Node
/// service does not need to know the host type.
pub trait Lifecycle: Send + Sync + std::fmt::Debug {
    /// NodeStageVolume.
    fn stage_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeStageVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeStageVolumeResponse>;
    /// NodeUnstageVolume.
    fn unstage_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeUnstageVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeUnstageVolumeResponse>;
    /// NodePublishVolume.
    fn publish_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodePublishVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodePublishVolumeResponse>;
    /// NodeUnpublishVolume.
    fn unpublish_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeUnpublishVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeUnpublishVolumeResponse>;
    /// NodeGetVolumeStats.
    fn volume_stats<'a>(
        &'a self,
        req: &'a csi::v1::NodeGetVolumeStatsRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeGetVolumeStatsResponse>;
    /// NodeExpandVolume (UNIMPLEMENTED unless the lifecycle overrides it).
    fn expand_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeExpandVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeExpandVolumeResponse> {
        let _ = (req, d);
        Box::pin(async { Err(Error::Unimplemented("NodeExpandVolume")) })
    }
    /// The Node capabilities this lifecycle implements.
    fn capabilities(&self) -> Vec<csi::v1::NodeServiceCapability>;
    /// The quarantined state records (`crate::state`: kept but ignored), one `file: reason` line each, as the files
    /// are now (the record files are read again, off the runtime); empty when there are none. Probe reports them.
    fn quarantined(&self) -> LifecycleFuture<'_, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// How many state records are quarantined (a gauge for metrics; from memory, without reading the files again).
    fn quarantined_count(&self) -> usize {
        0
    }
    /// Stop the lifecycle's background work (shutdown).
    fn stop_background(&self) {}
}

/// Convert a CSI capability; a capability without an access type is invalid.
fn capability(cap: Option<&csi::v1::VolumeCapability>) -> Result<Option<Capability>, Error> {
    use csi::v1::volume_capability::AccessType as Csi;
    let Some(cap) = cap else { return Ok(None) };
    let access_type = match &cap.access_type {
        Some(Csi::Mount(m)) => AccessType::Mount {
            fs_type: m.fs_type.clone(),
            mount_flags: m.mount_flags.clone(),
        },
        Some(Csi::Block(_)) => AccessType::Block,
        None => {
            return Err(Error::InvalidArgument(
                "volume_capability.access_type is required (mount or block)".to_owned(),
            ));
        }
    };
    Ok(Some(Capability {
        access_type,
        access_mode: cap.access_mode.map_or(0, |m| m.mode),
    }))
}

fn sorted(map: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

impl TryFrom<&csi::v1::NodeStageVolumeRequest> for StageRequest {
    type Error = Error;
    fn try_from(r: &csi::v1::NodeStageVolumeRequest) -> Result<Self, Error> {
        Ok(Self {
            volume_id: r.volume_id.clone(),
            staging_target_path: r.staging_target_path.clone(),
            capability: capability(r.volume_capability.as_ref())?,
            volume_context: sorted(&r.volume_context),
            secrets: Secrets::new(r.secrets.iter().map(|(k, v)| (k.clone(), v.clone()))),
        })
    }
}

impl TryFrom<&csi::v1::NodePublishVolumeRequest> for PublishRequest {
    type Error = Error;
    fn try_from(r: &csi::v1::NodePublishVolumeRequest) -> Result<Self, Error> {
        Ok(Self {
            volume_id: r.volume_id.clone(),
            staging_target_path: r.staging_target_path.clone(),
            target_path: r.target_path.clone(),
            capability: capability(r.volume_capability.as_ref())?,
            readonly: r.readonly,
            volume_context: sorted(&r.volume_context),
            secrets: Secrets::new(r.secrets.iter().map(|(k, v)| (k.clone(), v.clone()))),
        })
    }
}

impl From<VolumeStats> for csi::v1::NodeGetVolumeStatsResponse {
    fn from(s: VolumeStats) -> Self {
        Self {
            usage: vec![csi::v1::VolumeUsage {
                available: s.usage.available,
                total: s.usage.total,
                used: s.usage.used,
                unit: csi::v1::volume_usage::Unit::Bytes as i32,
            }],
            volume_condition: Some(csi::v1::VolumeCondition {
                abnormal: s.abnormal,
                message: s.message,
            }),
        }
    }
}

/// The Node capabilities the lifecycle implements.
pub fn node_capabilities() -> Vec<csi::v1::NodeServiceCapability> {
    use csi::v1::node_service_capability::rpc::Type;
    use csi::v1::node_service_capability::{Rpc, Type as Cap};
    [
        Type::StageUnstageVolume,
        Type::GetVolumeStats,
        Type::VolumeCondition,
        Type::SingleNodeMultiWriter,
        Type::ExpandVolume,
    ]
    .into_iter()
    .map(|t| csi::v1::NodeServiceCapability {
        r#type: Some(Cap::Rpc(Rpc { r#type: t as i32 })),
    })
    .collect()
}

impl<H: Host, P: Protocol<H>> Lifecycle for VolumeManager<H, P> {
    fn stage_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeStageVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeStageVolumeResponse> {
        Box::pin(async move {
            self.stage(&StageRequest::try_from(req)?, d).await?;
            Ok(csi::v1::NodeStageVolumeResponse {})
        })
    }

    fn unstage_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeUnstageVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeUnstageVolumeResponse> {
        Box::pin(async move {
            let r = UnstageRequest {
                volume_id: req.volume_id.clone(),
                staging_target_path: req.staging_target_path.clone(),
            };
            self.unstage(&r, d).await?;
            Ok(csi::v1::NodeUnstageVolumeResponse {})
        })
    }

    fn publish_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodePublishVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodePublishVolumeResponse> {
        Box::pin(async move {
            self.publish(&PublishRequest::try_from(req)?, d).await?;
            Ok(csi::v1::NodePublishVolumeResponse {})
        })
    }

    fn unpublish_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeUnpublishVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeUnpublishVolumeResponse> {
        Box::pin(async move {
            let r = UnpublishRequest {
                volume_id: req.volume_id.clone(),
                target_path: req.target_path.clone(),
            };
            self.unpublish(&r, d).await?;
            Ok(csi::v1::NodeUnpublishVolumeResponse {})
        })
    }

    fn volume_stats<'a>(
        &'a self,
        req: &'a csi::v1::NodeGetVolumeStatsRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeGetVolumeStatsResponse> {
        Box::pin(async move {
            let r = StatsRequest {
                volume_id: req.volume_id.clone(),
                volume_path: req.volume_path.clone(),
            };
            Ok(self.stats(&r, d).await?.into())
        })
    }

    fn expand_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeExpandVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeExpandVolumeResponse> {
        Box::pin(async move {
            let capacity_bytes = self.expand(&ExpandRequest::from(req), d).await?;
            Ok(csi::v1::NodeExpandVolumeResponse { capacity_bytes })
        })
    }

    fn capabilities(&self) -> Vec<csi::v1::NodeServiceCapability> {
        node_capabilities()
    }

    fn quarantined(&self) -> LifecycleFuture<'_, Vec<String>> {
        Box::pin(async move {
            self.store().refresh().await?;
            Ok(self
                .store()
                .quarantined()
                .into_iter()
                .map(|q| format!("{}: {}", q.file.display(), q.reason))
                .collect())
        })
    }

    fn quarantined_count(&self) -> usize {
        // Listing reads the quarantined files again, so one fixed since lifts here.
        if let Err(e) = self
            .store()
            .volumes()
            .and_then(|_| self.store().publications())
        {
            tracing::warn!(error = %e, "cannot list the state records");
        }
        self.store().quarantined_count()
    }

    fn stop_background(&self) {
        VolumeManager::stop_background(self);
    }
}

impl From<&csi::v1::NodeExpandVolumeRequest> for ExpandRequest {
    fn from(r: &csi::v1::NodeExpandVolumeRequest) -> Self {
        Self {
            volume_id: r.volume_id.clone(),
            volume_path: r.volume_path.clone(),
            required_bytes: r.capacity_range.as_ref().map_or(0, |c| c.required_bytes),
        }
    }
}
