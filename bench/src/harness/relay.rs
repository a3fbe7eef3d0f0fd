//! The concurrency floor: what the same number of gRPC exchanges costs on this machine when nothing else is done.
//!
//! A *relay* process serves CSI `NodeStageVolume` / `NodePublishVolume` and answers each after making, one after
//! another on one shared HTTP/2 connection, as many plain calls (`GetPluginInfo`) to an upstream [echo
//! server](super::echo) as the driver makes host calls for that RPC; the echo server (another process) waits the
//! injected host latency before it answers each. The harness brings N volumes up at once against it exactly as it
//! does against the driver (a connection per volume, stage then publish). No state, no locks, no host model: the
//! wall time at N over the wall time of one volume is the ratio any gRPC driver would get here with the harness and
//! the host on the same cores, so it says how much of the driver's ratio is the machine's.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use csi::v1::identity_client::IdentityClient;
use csi::v1::node_server::{Node, NodeServer};
use csi::v1::{
    GetPluginInfoRequest, NodeExpandVolumeRequest, NodeExpandVolumeResponse,
    NodeGetCapabilitiesRequest, NodeGetCapabilitiesResponse, NodeGetInfoRequest,
    NodeGetInfoResponse, NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse,
    NodePublishVolumeRequest, NodePublishVolumeResponse, NodeStageVolumeRequest,
    NodeStageVolumeResponse, NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse,
    NodeUnstageVolumeRequest, NodeUnstageVolumeResponse, VolumeCapability,
};
use futures::future::join_all;
use serde::Serialize;
use tokio::process::Child;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use wincsi_e2e::CsiConn;

use super::echo::{EchoProcess, start_helper};
use super::error::{Error, Result};
use super::sections::CpuMark;
use super::volumes::Protocol;

#[derive(Debug)]
struct Relay {
    upstream: Channel,
    stage_calls: usize,
    publish_calls: usize,
}

impl Relay {
    async fn upstream(&self, calls: usize) -> Result<(), Status> {
        let mut client = IdentityClient::new(self.upstream.clone());
        for _ in 0..calls {
            client.get_plugin_info(GetPluginInfoRequest {}).await?;
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Node for Relay {
    async fn node_stage_volume(
        &self,
        _: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        self.upstream(self.stage_calls).await?;
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        _: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        _: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        self.upstream(self.publish_calls).await?;
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        _: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        _: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        Err(Status::unimplemented("relay"))
    }

    async fn node_expand_volume(
        &self,
        _: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        Err(Status::unimplemented("relay"))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        Ok(Response::new(NodeGetCapabilitiesResponse::default()))
    }

    async fn node_get_info(
        &self,
        _: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        Err(Status::unimplemented("relay"))
    }
}

/// `wincsi-bench relay-server --socket PATH --upstream PATH --stage-calls A --publish-calls B`: binds, prints
/// `ready`, serves until killed.
pub(crate) async fn serve(
    socket: &Path,
    upstream: &Path,
    stage_calls: usize,
    publish_calls: usize,
) -> Result<()> {
    let _ = std::fs::remove_file(socket);
    let upstream = CsiConn::connect(&format!("unix://{}", upstream.display()))?.channel();
    let listener = tokio::net::UnixListener::bind(socket)
        .map_err(Error::io(format!("binding {}", socket.display())))?;
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    super::echo::ready_line()?;
    tonic::transport::Server::builder()
        .add_service(NodeServer::new(Relay {
            upstream,
            stage_calls,
            publish_calls,
        }))
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| Error::Setup(format!("relay server: {e}")))
}

/// The relay started from this executable; killed on drop.
#[derive(Debug)]
pub(crate) struct RelayProcess {
    child: Child,
}

impl RelayProcess {
    /// Starts `<this exe> relay-server ...` and waits for its ready line.
    pub(crate) async fn start(
        socket: &Path,
        upstream: &Path,
        stage_calls: usize,
        publish_calls: usize,
    ) -> Result<RelayProcess> {
        let (stage_calls, publish_calls) = (stage_calls.to_string(), publish_calls.to_string());
        let args = [
            "relay-server".as_ref(),
            "--socket".as_ref(),
            socket.as_os_str(),
            "--upstream".as_ref(),
            upstream.as_os_str(),
            "--stage-calls".as_ref(),
            stage_calls.as_ref(),
            "--publish-calls".as_ref(),
            publish_calls.as_ref(),
        ];
        let child = start_helper(&args, "relay").await?;
        Ok(RelayProcess { child })
    }

    /// The relay's pid (for its CPU time).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// One relay volume's requests: shaped like the driver's (a kubelet staging path and target, a mount capability,
/// a few attributes), so the bytes on the wire are of the same size.
#[derive(Debug, Clone)]
pub(crate) struct RelayVolume {
    id: String,
}

impl RelayVolume {
    /// Volume `i`.
    pub(crate) fn new(i: usize) -> Self {
        RelayVolume {
            id: format!("floor-volume-{i:04}"),
        }
    }

    fn staging(&self) -> String {
        format!(
            r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.io\{}\globalmount",
            self.id
        )
    }

    fn context() -> HashMap<String, String> {
        [
            ("source", r"\\fileserver.example.com\share"),
            ("csi.storage.k8s.io/pod.name", "floor-pod"),
            ("csi.storage.k8s.io/pod.namespace", "default"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn capability() -> VolumeCapability {
        use csi::v1::volume_capability::{AccessMode, AccessType, MountVolume, access_mode};
        VolumeCapability {
            access_mode: Some(AccessMode {
                mode: access_mode::Mode::SingleNodeMultiWriter as i32,
            }),
            access_type: Some(AccessType::Mount(MountVolume::default())),
        }
    }

    /// Stage then publish, as [`super::volumes::BenchVolume::up`] does against the driver.
    pub(crate) async fn up(&self, conn: &CsiConn) -> Result<(), Status> {
        let mut node = conn.node();
        node.node_stage_volume(NodeStageVolumeRequest {
            volume_id: self.id.clone(),
            publish_context: HashMap::new(),
            staging_target_path: self.staging(),
            volume_capability: Some(Self::capability()),
            secrets: HashMap::new(),
            volume_context: Self::context(),
        })
        .await?;
        node.node_publish_volume(NodePublishVolumeRequest {
            volume_id: self.id.clone(),
            publish_context: HashMap::new(),
            staging_target_path: self.staging(),
            target_path: format!(
                r"c:\var\lib\kubelet\pods\{}\volumes\kubernetes.io~csi\pv\mount",
                self.id
            ),
            volume_capability: Some(Self::capability()),
            readonly: false,
            secrets: HashMap::new(),
            volume_context: Self::context(),
        })
        .await?;
        Ok(())
    }
}

/// The floor at one level for one protocol's call counts.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FloorRow {
    /// Whose host-call counts the relay made.
    pub(crate) protocol: Protocol,
    /// Volumes at once.
    pub(crate) n: usize,
    /// Upstream calls per stage (the driver's first-time stage) and per publish.
    pub(crate) calls: (usize, usize),
    /// All N up, ms.
    pub(crate) wall_ms: f64,
    /// One volume alone (median of 3), ms.
    pub(crate) single_ms: f64,
    /// `wall_ms / single_ms`.
    pub(crate) ratio: f64,
    /// CPU per volume (ms) of the relay (in the driver's place), the echo server (in the host's) and the harness,
    /// and how busy the machine was.
    pub(crate) cpu_ms: FloorCpu,
}

/// CPU per volume at one floor level.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct FloorCpu {
    /// The relay.
    pub(crate) relay: f64,
    /// The echo server.
    pub(crate) host: f64,
    /// The harness.
    pub(crate) harness: f64,
    /// Busy share of the machine's cores over the level.
    pub(crate) machine_busy: f64,
}

/// Brings `vols` up at once against the relay, a connection each; the wall time.
async fn up_all(socket: &Path, vols: &[RelayVolume]) -> Result<Duration> {
    let endpoint = format!("unix://{}", socket.display());
    let conns: Vec<CsiConn> = vols
        .iter()
        .map(|_| CsiConn::connect(&endpoint))
        .collect::<std::result::Result<_, _>>()?;
    let start = Instant::now();
    let results = join_all(vols.iter().zip(&conns).map(|(v, c)| v.up(c))).await;
    let wall = start.elapsed();
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        return Err(Error::Setup(format!(
            "the concurrency floor's relay failed: {e}"
        )));
    }
    Ok(wall)
}

/// The concurrency floor: for each protocol's (stage, publish) host-call counts, N volumes at once against the relay
/// with `latency` on every upstream call, against one volume alone.
pub(crate) async fn concurrency_floor(
    dir: &Path,
    levels: &[usize],
    latency: Duration,
    calls: &[(Protocol, usize, usize)],
) -> Result<Vec<FloorRow>> {
    let upstream = dir.join("floor-host.sock");
    let host = EchoProcess::start(&upstream, latency).await?;
    let mut rows = Vec::new();
    for &(protocol, stage_calls, publish_calls) in calls {
        let socket = dir.join(format!("floor-relay-{}.sock", protocol.name()));
        let relay = RelayProcess::start(&socket, &upstream, stage_calls, publish_calls).await?;
        let mut singles = Vec::new();
        for _ in 0..3 {
            singles.push(up_all(&socket, &[RelayVolume::new(0)]).await?);
        }
        singles.sort();
        let single = singles[singles.len() / 2];
        for &n in levels {
            let vols: Vec<RelayVolume> = (0..n).map(RelayVolume::new).collect();
            let before = CpuMark::now(relay.pid(), host.pid());
            let wall = up_all(&socket, &vols).await?;
            let cpu = before.per_volume(CpuMark::now(relay.pid(), host.pid()), n);
            rows.push(FloorRow {
                protocol,
                n,
                calls: (stage_calls, publish_calls),
                wall_ms: wall.as_secs_f64() * 1e3,
                single_ms: single.as_secs_f64() * 1e3,
                ratio: wall.as_secs_f64() / single.as_secs_f64(),
                cpu_ms: FloorCpu {
                    relay: cpu.driver,
                    host: cpu.sim,
                    harness: cpu.harness,
                    machine_busy: cpu.machine_busy,
                },
            });
        }
    }
    Ok(rows)
}
