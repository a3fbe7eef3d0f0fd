//! The bench's storage network and volumes, and kubelet's four calls made one at a time (no retries: a failure
//! is a result to count, not something to paper over).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use csi::v1::volume_capability::access_mode::Mode;
use csi::v1::volume_capability::{AccessMode, AccessType, MountVolume};
use csi::v1::{
    NodePublishVolumeRequest, NodeStageVolumeRequest, NodeUnpublishVolumeRequest,
    NodeUnstageVolumeRequest, VolumeCapability,
};
use serde::Serialize;
use sim::Scenario;
use sim::admin::AdminClient;
use wincsi_e2e::fixtures::{
    CHAP_SECRET, CHAP_USER, ISCSI_PORTAL, LUN_SIZE, SMB_DOMAIN, SMB_PASSWORD, SMB_SERVER,
    SMB_SHARE, SMB_USER,
};
use wincsi_e2e::kubelet::{KUBELET_PATH_ROOT, parent, publish_path, staging_path};
use wincsi_e2e::{CsiConn, DRIVER_NAME, Pod, Volume};

use super::error::{Error, Result};

/// Deadline sent with every CSI call (kubelet uses 2 minutes for stage/publish).
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The storage protocol of a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub(crate) enum Protocol {
    /// An SMB share (every bench volume is on the same share: one shared global mapping).
    Smb,
    /// An iSCSI LUN (one-way CHAP, RAW until first staged): LUN 0 of its own target, or in the concurrency
    /// section one of the LUNs of one target.
    Iscsi,
}

impl Protocol {
    /// Both, in report order.
    pub(crate) const ALL: [Protocol; 2] = [Protocol::Smb, Protocol::Iscsi];

    /// Display name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::Smb => "SMB",
            Protocol::Iscsi => "iSCSI",
        }
    }
}

/// IQN of bench target `i`.
fn iqn(i: usize) -> String {
    format!("iqn.2026-01.test.bench:t{i:04}")
}

/// IQN of wide bench target `j` (many LUNs: the concurrency section's volumes of one target).
fn wide_iqn(j: usize) -> String {
    format!("iqn.2026-01.test.bench:w{j:02}")
}

/// The simulated node: kubelet paths, one SMB server with one share and an account, one iSCSI portal with
/// `targets` one-way-CHAP targets of one RAW LUN each, and `wide` one-way-CHAP targets of `luns` RAW LUNs each.
pub(crate) fn scenario(targets: usize, wide: usize, luns: usize) -> Result<Scenario> {
    let chap =
        serde_json::json!({ "mode": "one_way", "username": CHAP_USER, "secret": CHAP_SECRET });
    let mut targets: Vec<_> = (0..targets)
        .map(|i| {
            serde_json::json!({
                "iqn": iqn(i),
                "chap": chap,
                "luns": [ { "lun": 0, "id": format!("b{i:04}"), "size": LUN_SIZE, "partition_style": "raw" } ]
            })
        })
        .collect();
    targets.extend((0..wide).map(|j| {
        let luns: Vec<_> = (0..luns)
            .map(|k| {
                serde_json::json!({ "lun": k, "id": format!("w{j:02}l{k:03}"), "size": LUN_SIZE, "partition_style": "raw" })
            })
            .collect();
        serde_json::json!({ "iqn": wide_iqn(j), "chap": chap, "luns": luns })
    }));
    let json = serde_json::json!({
        "host": {
            "kubelet_path": r"C:\var\lib\kubelet",
            "require_privacy": true,
            // The driver's own cost is measured, not Windows' arrival times (module `node`: with the driver's
            // settle time at its minimum, a first stage's looks are what the driver does around the host calls).
            "behaviour": { "arrival": { "model": "instant" } },
            "directories": [r"C:\var\lib\kubelet\plugins", r"C:\var\lib\kubelet\pods"],
            "services": [
                { "name": "MSiSCSI", "start_type": "automatic", "status": "running" },
                { "name": "LanmanWorkstation", "start_type": "automatic", "status": "running" }
            ]
        },
        "smb": { "servers": [ {
            "name": SMB_SERVER,
            "accounts": [ { "user": SMB_USER, "password": SMB_PASSWORD, "domain": SMB_DOMAIN } ],
            "shares": [ { "name": SMB_SHARE } ]
        } ] },
        "iscsi": { "portals": [ { "address": ISCSI_PORTAL, "port": 3260, "targets": targets } ] }
    });
    Ok(Scenario::from_json(&json.to_string())?)
}

/// Hands out fresh volumes: a new PV on the share, or the next unused iSCSI target (or LUNs of the next unused wide
/// target).
#[derive(Debug)]
pub(crate) struct Allocator {
    next: AtomicUsize,
    next_target: AtomicUsize,
    targets: usize,
    next_wide: AtomicUsize,
    wide: usize,
    luns: usize,
}

impl Allocator {
    /// An allocator over `targets` single-LUN iSCSI targets and `wide` targets of `luns` LUNs (as in [`scenario`]).
    pub(crate) fn new(targets: usize, wide: usize, luns: usize) -> Allocator {
        Allocator {
            next: AtomicUsize::new(0),
            next_target: AtomicUsize::new(0),
            targets,
            next_wide: AtomicUsize::new(0),
            wide,
            luns,
        }
    }

    /// A volume never used before in this run (an iSCSI one is LUN 0 of its own target).
    pub(crate) fn fresh(&self, protocol: Protocol) -> Result<BenchVolume> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        match protocol {
            Protocol::Smb => Ok(Self::smb(i)),
            Protocol::Iscsi => {
                let t = self.next_target.fetch_add(1, Ordering::Relaxed);
                if t >= self.targets {
                    return Err(Error::Setup(format!(
                        "the bench scenario has {} iSCSI targets; volume {i} needs more",
                        self.targets
                    )));
                }
                Ok(Self::iscsi(i, &iqn(t), 0))
            }
        }
    }

    /// `n` volumes never used before that share their storage object: PVs on the one share, or LUNs 0..n of one
    /// target nothing has logged in to yet (the first stage logs in, the others use its session).
    pub(crate) fn fresh_group(&self, protocol: Protocol, n: usize) -> Result<Vec<BenchVolume>> {
        match protocol {
            Protocol::Smb => (0..n).map(|_| self.fresh(protocol)).collect(),
            Protocol::Iscsi => {
                let w = self.next_wide.fetch_add(1, Ordering::Relaxed);
                if w >= self.wide || n > self.luns {
                    return Err(Error::Setup(format!(
                        "the bench scenario has {} targets of {} LUNs; a group of {n} LUNs needs another",
                        self.wide, self.luns
                    )));
                }
                Ok((0..n)
                    .map(|k| {
                        let i = self.next.fetch_add(1, Ordering::Relaxed);
                        Self::iscsi(i, &wide_iqn(w), k)
                    })
                    .collect())
            }
        }
    }

    fn smb(i: usize) -> BenchVolume {
        let name = format!("pv-bench-{i:05}");
        let volume = wincsi_e2e::fixtures::smb_volume(&name, "bench", &format!("pvc-{i:05}"), None);
        Self::used_by_a_pod(i, volume)
    }

    fn iscsi(i: usize, iqn: &str, lun: usize) -> BenchVolume {
        let name = format!("pv-bench-{i:05}");
        let mut v = Volume::persistent(
            &name,
            &format!("{iqn}#lun-{lun}"),
            "bench",
            &format!("pvc-{i:05}"),
        )
        .attr("targetPortal", &format!("{ISCSI_PORTAL}:3260"))
        .attr("iqn", iqn)
        .attr("lun", &lun.to_string())
        .attr("sessionCHAPAuth", "true")
        .attr("discoveryCHAPAuth", "false")
        .stage_secret("node.session.auth.username", CHAP_USER)
        .stage_secret("node.session.auth.password", CHAP_SECRET)
        .mode(Mode::SingleNodeWriter);
        v.fs_type = "ntfs".to_owned();
        Self::used_by_a_pod(i, v)
    }

    fn used_by_a_pod(i: usize, volume: Volume) -> BenchVolume {
        let pod = Pod::new("bench", &format!("pod-{i:05}"));
        BenchVolume {
            staging: staging_path(KUBELET_PATH_ROOT, DRIVER_NAME, &volume.handle),
            target: publish_path(KUBELET_PATH_ROOT, &pod.uid, &volume.name),
            volume,
            pod,
        }
    }
}

/// One volume used by one pod, with kubelet's paths for it.
#[derive(Debug, Clone)]
pub(crate) struct BenchVolume {
    /// The PV.
    pub(crate) volume: Volume,
    /// The pod using it.
    pub(crate) pod: Pod,
    /// kubelet's staging path.
    pub(crate) staging: String,
    /// kubelet's publish path.
    pub(crate) target: String,
}

/// The four node RPCs of a lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub(crate) enum Rpc {
    /// `NodeStageVolume`.
    Stage,
    /// `NodePublishVolume`.
    Publish,
    /// `NodeUnpublishVolume`.
    Unpublish,
    /// `NodeUnstageVolume`.
    Unstage,
}

impl Rpc {
    /// The CSI method name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Rpc::Stage => "NodeStageVolume",
            Rpc::Publish => "NodePublishVolume",
            Rpc::Unpublish => "NodeUnpublishVolume",
            Rpc::Unstage => "NodeUnstageVolume",
        }
    }
}

/// A failed CSI call.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CallError {
    /// The CSI method.
    pub(crate) rpc: &'static str,
    /// The volume handle.
    pub(crate) volume: String,
    /// gRPC code and message.
    pub(crate) status: String,
}

impl BenchVolume {
    fn capability(&self) -> VolumeCapability {
        VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume {
                fs_type: self.volume.fs_type.clone(),
                mount_flags: Vec::new(),
                volume_mount_group: String::new(),
            })),
            access_mode: Some(AccessMode {
                mode: self.volume.access_mode as i32,
            }),
        }
    }

    /// kubelet's own files before stage and publish: the parents of the staging and publish paths, with
    /// `vol_data.json` in them (written through the host, as kubelet does on the node).
    pub(crate) async fn prepare(&self, host: &AdminClient) -> Result<()> {
        let stage_data =
            serde_json::json!({"driverName": DRIVER_NAME, "volumeHandle": self.volume.handle});
        host.write_file(
            &format!(r"{}\vol_data.json", parent(&self.staging)),
            &stage_data.to_string(),
        )
        .await?;
        let pub_data = serde_json::json!({"driverName": DRIVER_NAME, "volumeHandle": self.volume.handle, "specVolID": self.volume.name});
        host.write_file(
            &format!(r"{}\vol_data.json", parent(&self.target)),
            &pub_data.to_string(),
        )
        .await?;
        Ok(())
    }

    /// Makes one CSI call and returns how long it took.
    pub(crate) async fn call(&self, conn: &CsiConn, rpc: Rpc) -> Result<Duration, CallError> {
        let hash = |m: &std::collections::BTreeMap<String, String>| -> HashMap<String, String> {
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let mut node = conn.node();
        let start = Instant::now();
        let res = match rpc {
            Rpc::Stage => {
                let mut req = tonic::Request::new(NodeStageVolumeRequest {
                    volume_id: self.volume.handle.clone(),
                    publish_context: HashMap::new(),
                    staging_target_path: self.staging.clone(),
                    volume_capability: Some(self.capability()),
                    secrets: hash(&self.volume.stage_secrets),
                    volume_context: hash(&self.volume.attributes),
                });
                req.set_timeout(CALL_TIMEOUT);
                node.node_stage_volume(req).await.map(drop)
            }
            Rpc::Publish => {
                let mut ctx = self.volume.attributes.clone();
                ctx.extend(self.pod.pod_info(false));
                let mut req = tonic::Request::new(NodePublishVolumeRequest {
                    volume_id: self.volume.handle.clone(),
                    publish_context: HashMap::new(),
                    staging_target_path: self.staging.clone(),
                    target_path: self.target.clone(),
                    volume_capability: Some(self.capability()),
                    readonly: false,
                    secrets: HashMap::new(),
                    volume_context: hash(&ctx),
                });
                req.set_timeout(CALL_TIMEOUT);
                node.node_publish_volume(req).await.map(drop)
            }
            Rpc::Unpublish => {
                let mut req = tonic::Request::new(NodeUnpublishVolumeRequest {
                    volume_id: self.volume.handle.clone(),
                    target_path: self.target.clone(),
                });
                req.set_timeout(CALL_TIMEOUT);
                node.node_unpublish_volume(req).await.map(drop)
            }
            Rpc::Unstage => {
                let mut req = tonic::Request::new(NodeUnstageVolumeRequest {
                    volume_id: self.volume.handle.clone(),
                    staging_target_path: self.staging.clone(),
                });
                req.set_timeout(CALL_TIMEOUT);
                node.node_unstage_volume(req).await.map(drop)
            }
        };
        let elapsed = start.elapsed();
        res.map(|()| elapsed).map_err(|s| CallError {
            rpc: rpc.name(),
            volume: self.volume.handle.clone(),
            status: format!("{:?}: {}", s.code(), s.message()),
        })
    }

    /// NodeGetVolumeStats of the pod's target path, as kubelet's volume stats calculator asks it; whether the volume
    /// was reported healthy.
    pub(crate) async fn stats(&self, conn: &CsiConn) -> Result<bool, CallError> {
        let mut req = tonic::Request::new(csi::v1::NodeGetVolumeStatsRequest {
            volume_id: self.volume.handle.clone(),
            volume_path: self.target.clone(),
            staging_target_path: self.staging.clone(),
        });
        req.set_timeout(CALL_TIMEOUT);
        match conn.node().node_get_volume_stats(req).await {
            Ok(r) => Ok(r.into_inner().volume_condition.is_none_or(|c| !c.abnormal)),
            Err(s) => Err(CallError {
                rpc: "NodeGetVolumeStats",
                volume: self.volume.handle.clone(),
                status: format!("{:?}: {}", s.code(), s.message()),
            }),
        }
    }

    /// Stage then publish (a pod starting); stops at the first failure.
    pub(crate) async fn up(&self, conn: &CsiConn) -> Result<(), CallError> {
        self.call(conn, Rpc::Stage).await?;
        self.call(conn, Rpc::Publish).await?;
        Ok(())
    }

    /// Unpublish then unstage (the pod gone); both are attempted.
    pub(crate) async fn down(&self, conn: &CsiConn) -> Vec<CallError> {
        let mut errs = Vec::new();
        for rpc in [Rpc::Unpublish, Rpc::Unstage] {
            if let Err(e) = self.call(conn, rpc).await {
                errs.push(e);
            }
        }
        errs
    }
}
