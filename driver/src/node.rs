//! The CSI Node service.
//!
//! [`NodeService`] is a thin tonic adapter: it opens the per-RPC span, checks the fields the
//! CSI spec makes REQUIRED (→ `INVALID_ARGUMENT`), and delegates to [`NodeCore`], which holds
//! the behaviour. Stage/unstage/publish/unpublish/stats delegate to the volume lifecycle
//! ([`crate::lifecycle::Lifecycle`]) when one is configured; without one (and for expansion) they
//! return `UNIMPLEMENTED` and no capability for them is advertised.

use std::collections::BTreeMap;
use std::sync::Arc;

use csi::v1::node_server::Node;
use csi::v1::{
    NodeExpandVolumeRequest, NodeExpandVolumeResponse, NodeGetCapabilitiesRequest,
    NodeGetCapabilitiesResponse, NodeGetInfoRequest, NodeGetInfoResponse,
    NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse, NodePublishVolumeRequest,
    NodePublishVolumeResponse, NodeServiceCapability, NodeStageVolumeRequest,
    NodeStageVolumeResponse, NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse,
    NodeUnstageVolumeRequest, NodeUnstageVolumeResponse, Topology,
};
use tonic::{Request, Response, Status};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::lifecycle::Lifecycle;
use crate::locks::Deadline;
use crate::rpc::{RpcFields, rpc};

/// What `NodeGetInfo` reports about this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node id (the Kubernetes node name).
    pub node_id: String,
    /// Maximum volumes on this node; 0 means no limit.
    pub max_volumes_per_node: i64,
    /// Topology segments; empty means no topology is reported.
    pub topology: BTreeMap<String, String>,
}

impl NodeInfo {
    /// The node info configured by flags.
    pub fn from_config(config: &Config) -> Self {
        Self {
            node_id: config.node_id.clone(),
            max_volumes_per_node: config.max_volumes_per_node,
            topology: config.topology_segments(),
        }
    }
}

/// The Node service's behaviour, independent of gRPC plumbing.
#[derive(Debug, Clone)]
pub struct NodeCore {
    info: NodeInfo,
    volumes: Option<Arc<dyn Lifecycle>>,
}

impl NodeCore {
    /// Creates the core for this node.
    pub fn new(info: NodeInfo) -> Self {
        Self {
            info,
            volumes: None,
        }
    }

    /// Serves the volume RPCs with `volumes`.
    pub fn with_volumes(mut self, volumes: Arc<dyn Lifecycle>) -> Self {
        self.volumes = Some(volumes);
        self
    }

    fn volumes(&self, rpc: &'static str) -> Result<&dyn Lifecycle> {
        self.volumes.as_deref().ok_or(Error::Unimplemented(rpc))
    }

    /// Stages a volume (not implemented yet).
    pub async fn stage_volume(
        &self,
        req: &NodeStageVolumeRequest,
        deadline: Deadline,
    ) -> Result<NodeStageVolumeResponse> {
        self.volumes("NodeStageVolume")?
            .stage_volume(req, deadline)
            .await
    }

    /// Unstages a volume (not implemented yet).
    pub async fn unstage_volume(
        &self,
        req: &NodeUnstageVolumeRequest,
        deadline: Deadline,
    ) -> Result<NodeUnstageVolumeResponse> {
        self.volumes("NodeUnstageVolume")?
            .unstage_volume(req, deadline)
            .await
    }

    /// Publishes a volume (not implemented yet).
    pub async fn publish_volume(
        &self,
        req: &NodePublishVolumeRequest,
        deadline: Deadline,
    ) -> Result<NodePublishVolumeResponse> {
        self.volumes("NodePublishVolume")?
            .publish_volume(req, deadline)
            .await
    }

    /// Unpublishes a volume (not implemented yet).
    pub async fn unpublish_volume(
        &self,
        req: &NodeUnpublishVolumeRequest,
        deadline: Deadline,
    ) -> Result<NodeUnpublishVolumeResponse> {
        self.volumes("NodeUnpublishVolume")?
            .unpublish_volume(req, deadline)
            .await
    }

    /// Volume statistics (not implemented yet).
    pub async fn volume_stats(
        &self,
        req: &NodeGetVolumeStatsRequest,
        deadline: Deadline,
    ) -> Result<NodeGetVolumeStatsResponse> {
        self.volumes("NodeGetVolumeStats")?
            .volume_stats(req, deadline)
            .await
    }

    /// Volume expansion (iSCSI volumes: grows the partition to the LUN's size).
    pub async fn expand_volume(
        &self,
        req: &NodeExpandVolumeRequest,
        deadline: Deadline,
    ) -> Result<NodeExpandVolumeResponse> {
        self.volumes("NodeExpandVolume")?
            .expand_volume(req, deadline)
            .await
    }

    /// The node capabilities: only what is implemented.
    pub fn capabilities(&self) -> Vec<NodeServiceCapability> {
        self.volumes
            .as_ref()
            .map(|v| v.capabilities())
            .unwrap_or_default()
    }

    /// `NodeGetInfo`'s answer: the configured node info, with the volume limit what the node can take (configured,
    /// and what the host allows: `lifecycle/capacity.rs`; kubelet asks again every
    /// `CSIDriver.spec.nodeAllocatableUpdatePeriodSeconds`, KEP-4876).
    pub async fn info(&self, deadline: Deadline) -> NodeGetInfoResponse {
        let configured = self.info.max_volumes_per_node;
        let max_volumes_per_node = match &self.volumes {
            Some(v) => v
                .volume_limit(configured, deadline)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot compute the node's volume limit: reporting the configured one");
                    configured
                }),
            None => configured,
        };
        NodeGetInfoResponse {
            node_id: self.info.node_id.clone(),
            max_volumes_per_node,
            accessible_topology: (!self.info.topology.is_empty()).then(|| Topology {
                segments: self.info.topology.clone().into_iter().collect(),
            }),
        }
    }
}

/// The tonic Node service: validation and tracing around [`NodeCore`].
#[derive(Debug, Clone)]
pub struct NodeService {
    core: Arc<NodeCore>,
}

impl NodeService {
    /// Wraps a core.
    pub fn new(core: NodeCore) -> Self {
        Self {
            core: Arc::new(core),
        }
    }
}

/// `INVALID_ARGUMENT` if a REQUIRED string field is empty.
fn require(value: &str, field: &str) -> Result<()> {
    if value.is_empty() {
        Err(Error::InvalidArgument(format!("{field} is required")))
    } else {
        Ok(())
    }
}

/// `INVALID_ARGUMENT` if a REQUIRED message field is absent.
fn require_some<T>(value: Option<&T>, field: &str) -> Result<()> {
    value
        .map(|_| ())
        .ok_or_else(|| Error::InvalidArgument(format!("{field} is required")))
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let deadline = Deadline::from_metadata(request.metadata());
        let req = request.into_inner();
        let fields = RpcFields::volume(&req.volume_id).staging(&req.staging_target_path);
        rpc("NodeStageVolume", fields, async {
            require(&req.volume_id, "volume_id")?;
            require(&req.staging_target_path, "staging_target_path")?;
            require_some(req.volume_capability.as_ref(), "volume_capability")?;
            self.core.stage_volume(&req, deadline).await
        })
        .await
    }

    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let deadline = Deadline::from_metadata(request.metadata());
        let req = request.into_inner();
        let fields = RpcFields::volume(&req.volume_id).staging(&req.staging_target_path);
        rpc("NodeUnstageVolume", fields, async {
            require(&req.volume_id, "volume_id")?;
            require(&req.staging_target_path, "staging_target_path")?;
            self.core.unstage_volume(&req, deadline).await
        })
        .await
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let deadline = Deadline::from_metadata(request.metadata());
        let req = request.into_inner();
        let fields = RpcFields::volume(&req.volume_id)
            .staging(&req.staging_target_path)
            .target(&req.target_path);
        rpc("NodePublishVolume", fields, async {
            require(&req.volume_id, "volume_id")?;
            require(&req.target_path, "target_path")?;
            require_some(req.volume_capability.as_ref(), "volume_capability")?;
            self.core.publish_volume(&req, deadline).await
        })
        .await
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let deadline = Deadline::from_metadata(request.metadata());
        let req = request.into_inner();
        let fields = RpcFields::volume(&req.volume_id).target(&req.target_path);
        rpc("NodeUnpublishVolume", fields, async {
            require(&req.volume_id, "volume_id")?;
            require(&req.target_path, "target_path")?;
            self.core.unpublish_volume(&req, deadline).await
        })
        .await
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let deadline = Deadline::from_metadata(request.metadata());
        let req = request.into_inner();
        let fields = RpcFields::volume(&req.volume_id)
            .staging(&req.staging_target_path)
            .target(&req.volume_path);
        rpc("NodeGetVolumeStats", fields, async {
            require(&req.volume_id, "volume_id")?;
            require(&req.volume_path, "volume_path")?;
            self.core.volume_stats(&req, deadline).await
        })
        .await
    }

    async fn node_expand_volume(
        &self,
        request: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        let deadline = Deadline::from_metadata(request.metadata());
        let req = request.into_inner();
        let fields = RpcFields::volume(&req.volume_id)
            .staging(&req.staging_target_path)
            .target(&req.volume_path);
        rpc("NodeExpandVolume", fields, async {
            require(&req.volume_id, "volume_id")?;
            require(&req.volume_path, "volume_path")?;
            self.core.expand_volume(&req, deadline).await
        })
        .await
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        rpc("NodeGetCapabilities", RpcFields::default(), async {
            Ok(NodeGetCapabilitiesResponse {
                capabilities: self.core.capabilities(),
            })
        })
        .await
    }

    async fn node_get_info(
        &self,
        request: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        let deadline = Deadline::from_metadata(request.metadata());
        rpc("NodeGetInfo", RpcFields::default(), async {
            Ok(self.core.info(deadline).await)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tonic::Code;

    use super::*;

    fn service(topology: &[(&str, &str)]) -> NodeService {
        NodeService::new(NodeCore::new(NodeInfo {
            node_id: "win-node-1".into(),
            max_volumes_per_node: 16,
            topology: topology
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }))
    }

    #[tokio::test]
    async fn node_info_with_and_without_topology() {
        let info = service(&[])
            .node_get_info(Request::new(NodeGetInfoRequest {}))
            .await
            .expect("info")
            .into_inner();
        assert_eq!(info.node_id, "win-node-1");
        assert_eq!(info.max_volumes_per_node, 16);
        assert_eq!(info.accessible_topology, None);

        let info = service(&[("topology.kubernetes.io/zone", "z1")])
            .node_get_info(Request::new(NodeGetInfoRequest {}))
            .await
            .expect("info")
            .into_inner();
        assert_eq!(
            info.accessible_topology.expect("topology").segments,
            HashMap::from([("topology.kubernetes.io/zone".to_owned(), "z1".to_owned())])
        );
    }

    #[tokio::test]
    async fn missing_required_fields_are_invalid_argument() {
        let svc = service(&[]);
        let err = svc
            .node_stage_volume(Request::new(NodeStageVolumeRequest::default()))
            .await
            .expect_err("empty request");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("volume_id"), "{}", err.message());

        let err = svc
            .node_publish_volume(Request::new(NodePublishVolumeRequest {
                volume_id: "v".into(),
                ..Default::default()
            }))
            .await
            .expect_err("no target");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("target_path"), "{}", err.message());
    }

    #[tokio::test]
    async fn valid_volume_calls_are_unimplemented_for_now() {
        let svc = service(&[]);
        let err = svc
            .node_unstage_volume(Request::new(NodeUnstageVolumeRequest {
                volume_id: "v".into(),
                staging_target_path: r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\x\globalmount"
                    .into(),
            }))
            .await
            .expect_err("unimplemented");
        assert_eq!(err.code(), Code::Unimplemented);
    }
}
