//! The crash-and-fault matrix: every host call of the SMB and iSCSI stage, publish, unpublish and unstage sequences,
//! crossed with three faults, each followed by kubelet's retry policy.
//!
//! The cells are not written by hand: a clean run against the simulated host records, per CSI operation, the
//! host calls the driver made (the sim's audit log: csi-proxy RPCs, or with `WINCSI_TEST_HOST_BACKEND=native` the
//! native backend's WMI and Win32 calls), and the matrix is every (workflow, operation, call index,
//! fault) over those recordings, so it grows with the code. A third workflow, an iSCSI volume through two portals
//! grown while published (`hardening_matrix/multipath.rs`), adds a cell at each login and logout and at each step of
//! the expansion. The faults:
//!
//! * **fail** — that call fails once with a csi-proxy-style `UNKNOWN` error text;
//! * **hang** — that call never answers; once it hangs, tokio's clock is paused so virtual time runs past the RPC
//!   deadline (no real sleep), and the operation must end with an error instead of hanging; then csi-proxy finishes
//!   the call late (it ignores cancellation), before kubelet's retry;
//! * **kill** — the driver process dies right after that call returned: the in-flight operation is dropped while
//!   the *next* host call is pending (after the last call of an operation: the operation completed on the host but
//!   kubelet never saw the answer), then a fresh `VolumeManager` (with startup reconciliation) runs over the same
//!   state directory and the same host;
//! * **outlive** (destructive calls only: `PartitionDisk`, `FormatVolume`, `ResizeVolume`, or the native backend's
//!   `MSFT_Disk.Initialize`, `MSFT_Disk.CreatePartition`, `MSFT_Volume.Format`, `MSFT_Partition.Resize`) — the driver
//!   dies *inside* that call, which goes on on the host (csi-proxy and a WMI provider finish a call whose client went
//!   away); the restarted driver's retry while it still runs must fail without issuing that call again; then the call
//!   completes, after the restart, and kubelet's retries go on.
//!
//! The simulated host's arrival is realistic (disks and volumes appear some time after what caused them; `Rescan`
//! hurries nothing), with every delay scaled down to 100 ms and the driver's settle time to 500 ms so the many cells
//! stay fast. A wait looks again and again, and in real time how often varies: only the first call of each step is
//! a cell (a repeated look at the same thing is one step), and a look repeated within a step is faulted only at its
//! first occurrence, whose place does not depend on timing (the unit suite covers every look in paused time).
//!
//! Then kubelet's policy applies: retry the same RPC until it succeeds (bounded), then carry on with the remaining
//! operations. Every cell must converge: the data the pod wrote is on the volume and survives a later re-stage, the
//! host's invariants hold (no data-loss event, no mapping/session/mount/link left), no state record is left, and no
//! volume lock stays held (the first retry after a fault is never ABORTED, and a final extra unstage is OK).

#![cfg(unix)]

mod common;
#[path = "hardening_matrix/multipath.rs"]
mod multipath;
#[path = "hardening_matrix/paths.rs"]
mod paths;
#[path = "hardening_matrix/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::squeeze;
use proxy_client::{ApiGroup, ProxyClient};
use serde_json::json;
use sim::wmi::{TestBackend, WindowsView};
use sim::{HostOptions, Scenario, ServeHandle, SimHost};
use wincsi::Error;
use wincsi::backend::Manager;
use wincsi::host::KubeletRoot;
use wincsi::host::csi_proxy::CsiProxyHost;
use wincsi::host::native::NativeHost;
use wincsi::host::native::testing::TestHost;
use wincsi::lifecycle::{
    AccessType, Capability, PublishRequest, StageRequest, UnpublishRequest, UnstageRequest,
    VolumeConfig,
};
use wincsi::locks::Deadline;
use wincsi::smb::Secrets;

const SMB_PW: &str = "Matrix-Smb-Pw-41!";
const CHAP_SECRET: &str = "Matrix-Chap-77";
const IQN: &str = "iqn.2024-01.io.example:matrix";
/// How often kubelet retries one RPC before the cell is declared non-converging.
const RETRIES: usize = 6;

fn scenario() -> Scenario {
    Scenario::from_json(
        &json!({
            "smb": {"servers": [
                {"name": "fs1",
                 "accounts": [{"user": "bob", "password": SMB_PW, "domain": "CORP"}],
                 "shares": [{"name": "data", "files": {"base/readme.txt": "keep me"}}]}
            ]},
            "iscsi": {"portals": [
                {"address": "10.0.0.5", "targets": [
                    {"iqn": IQN, "chap": {"mode": "one_way", "username": "node-a", "secret": CHAP_SECRET},
                     "luns": [{"lun": 0, "size": 1u64 << 30, "online": false}]}]}
            ]},
            "host": {"behaviour": {"arrival": common::ARRIVAL}}
        })
        .to_string(),
    )
    .expect("scenario")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workflow {
    Smb,
    Iscsi,
    /// An iSCSI volume through two portals, grown while published (`multipath.rs`).
    Multipath,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Stage,
    Publish,
    Unpublish,
    Unstage,
    /// NodeExpandVolume after the LUN grew (the multipath workflow's).
    Expand,
}

const OPS: [Op; 4] = [Op::Stage, Op::Publish, Op::Unpublish, Op::Unstage];

impl Workflow {
    /// The operations of this workflow, in kubelet's order.
    fn ops(self) -> &'static [Op] {
        match self {
            Workflow::Multipath => &multipath::OPS,
            Workflow::Smb | Workflow::Iscsi => &OPS,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Fail,
    Hang,
    Kill,
    Outlive,
    /// The call lands on the host and its answer is held (kubelet's paths only, `paths.rs`).
    LateAnswer,
}

/// The host calls that destroy data when issued twice or at the wrong time (module docs, **outlive**).
const DESTRUCTIVE: [&str; 7] = [
    "PartitionDisk",
    "FormatVolume",
    "ResizeVolume",
    "MSFT_Disk.Initialize",
    "MSFT_Disk.CreatePartition",
    "MSFT_Volume.Format",
    "MSFT_Partition.Resize",
];

/// The calls a wait repeats (module docs): faulted only at their first occurrence within a step. How often a wait
/// looks depends on timing (a loaded machine looks fewer times), so a later occurrence has no stable place: the
/// native backend's waits for a disk (the target's sessions and their disks) and for a volume (`Refresh`, the
/// partitions' volumes) are looks too. Native's list (`ListVolumesOnDisk`) reads each partition's volumes and, since
/// issue 39, refreshes a disk whose data partition shows none (`MSFT_Disk.Refresh`), so those two recur once per look;
/// the `Refresh` after `Initialize` and `CreatePartition` is therefore no longer faulted on its own.
const LOOKS: [&str; 11] = [
    "GetTargetDisks",
    "Rescan",
    "ListVolumesOnDisk",
    "MSFT_StorageSetting.UpdateHostStorageCache",
    "SELECT MSFT_Disk",
    "SELECT MSFT_Partition",
    "SELECT MSFT_iSCSITarget",
    "ASSOCIATORS MSFT_iSCSITargetToiSCSISession->MSFT_iSCSISession",
    "ASSOCIATORS MSFT_iSCSISessionToDisk->MSFT_Disk",
    "MSFT_Disk.Refresh",
    "ASSOCIATORS MSFT_PartitionToVolume->MSFT_Volume",
];

struct Cell {
    workflow: Workflow,
    op: Op,
    index: usize,
    rpc: String,
    /// 1-based occurrence of `rpc` within the operation.
    nth: u64,
    /// The next RPC of the operation (what is pending when the driver is killed), with its occurrence.
    next: Option<(String, u64)>,
    fault: Fault,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}/{:?}/call {} {} #{}/{:?}",
            self.workflow, self.op, self.index, self.rpc, self.nth, self.fault
        )
    }
}

const ID: &str = "pv-matrix";
const POD: &str = "pod-matrix";

fn staging() -> String {
    format!(r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{ID}\globalmount")
}

fn target() -> String {
    format!(r"C:\var\lib\kubelet\pods\{POD}\volumes\kubernetes.io~csi\pv\mount")
}

fn cap() -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Mount {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: 1,
    })
}

fn stage_req(w: Workflow) -> StageRequest {
    let (ctx, secrets): (BTreeMap<String, String>, Secrets) = match w {
        Workflow::Smb => (
            [
                ("source", r"\\fs1\data"),
                ("subDir", "${pvc.metadata.name}"),
                ("csi.storage.k8s.io/pvc/name", "claim-1"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            Secrets::new([
                ("username", "bob"),
                ("password", SMB_PW),
                ("domain", "CORP"),
            ]),
        ),
        Workflow::Iscsi | Workflow::Multipath => (
            [
                ("targetPortal", "10.0.0.5:3260"),
                ("iqn", IQN),
                ("lun", "0"),
            ]
            .into_iter()
            .chain((w == Workflow::Multipath).then_some(multipath::PORTALS))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            Secrets::new([
                ("node.session.auth.username", "node-a"),
                ("node.session.auth.password", CHAP_SECRET),
            ]),
        ),
    };
    StageRequest {
        volume_id: ID.into(),
        staging_target_path: staging(),
        capability: cap(),
        volume_context: ctx,
        secrets,
    }
}

fn publish_req(w: Workflow) -> PublishRequest {
    PublishRequest {
        volume_id: ID.into(),
        staging_target_path: staging(),
        target_path: target(),
        capability: cap(),
        volume_context: stage_req(w).volume_context,
        ..Default::default()
    }
}

/// The driver over `backend` — the backend under test (`WINCSI_TEST_HOST_BACKEND`) except after a cell changed the
/// node's mode: csi-proxy through `proxy`, or native through the simulated host's Windows view, whose WMI and Win32
/// calls are then the recorded calls the cells fault.
fn manager(
    sim: &SimHost,
    proxy: &ProxyClient,
    state: &Path,
    backend: TestBackend,
    process: &mut process::Process,
) -> Arc<Manager<TestHost>> {
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    let mut seed = None;
    let host = match backend {
        // The node's uptime is the simulated host's, which restarts at a reboot (as the unit suites' `testing.rs`):
        // the machine's own would hide every simulated reboot from the driver's boot stamps.
        TestBackend::CsiProxy => {
            let sim = sim.clone();
            TestHost::CsiProxy(
                CsiProxyHost::new(proxy.clone()).with_uptime(Arc::new(move || Some(sim.uptime()))),
            )
        }
        TestBackend::Native => {
            let view = process.view(WindowsView::new(sim.clone()));
            let native = NativeHost::new(Arc::new(view), Some(state));
            seed = Some(native.clone());
            TestHost::NativeBare(native)
        }
    };
    let mgr = wincsi::backend::manager_with(host, cfg, state, common::ISCSI).expect("manager");
    // As `wincsi::backend::native_lifecycle` does before reconciliation: the shares the records say this driver
    // mapped are its own, whichever backend mapped them (a node moved from csiProxy to hostProcess mode).
    if let Some(native) = seed {
        native
            .adopt_mappings(wincsi::backend::recorded_shares(mgr.store()))
            .expect("seed the mapping ledger");
        native
            .adopt_sessions(wincsi::backend::recorded_targets(mgr.store()))
            .expect("seed the session ledger");
    }
    Arc::new(mgr)
}

struct Env {
    workflow: Workflow,
    /// The backend the driver runs on now.
    backend: TestBackend,
    sim: SimHost,
    serve: Option<ServeHandle>,
    socks: tempfile::TempDir,
    _sandbox: tempfile::TempDir,
    state: tempfile::TempDir,
    proxy: ProxyClient,
    /// The driver process running now: a restart kills it (`process.rs`).
    process: process::Process,
    mgr: Arc<Manager<TestHost>>,
    /// A connection was silenced: only a csi-proxy restart ends it (and a call run to its end may still wait on it).
    silenced: bool,
}

impl Env {
    async fn new(workflow: Workflow) -> Self {
        let sandbox = tempfile::tempdir().expect("tmp");
        let socks = tempfile::tempdir().expect("tmp");
        let state = tempfile::tempdir().expect("tmp");
        let scenario = match workflow {
            Workflow::Multipath => multipath::scenario(),
            Workflow::Smb | Workflow::Iscsi => scenario(),
        };
        let sim = SimHost::new(&scenario, sandbox.path(), HostOptions::default()).expect("sim");
        // A node up for a day: a reboot shows to the driver's boot stamps (its uptime is lower after it).
        sim.with_state_mut(|s| s.set_uptime(Duration::from_secs(86_400)));
        let serve = sim::serve_unix(sim.clone(), socks.path()).expect("serve");
        let mut process = process::Process::new();
        let proxy = process.client(socks.path());
        let backend = common::backend::backend();
        let mgr = manager(&sim, &proxy, state.path(), backend, &mut process);
        let env = Self {
            workflow,
            backend,
            sim,
            serve: Some(serve),
            socks,
            _sandbox: sandbox,
            state,
            proxy,
            process,
            mgr,
            silenced: false,
        };
        // kubelet creates the parents of the staging and target paths.
        for path in [staging(), target()] {
            let parent = path.rsplit_once('\\').expect("parent").0.to_owned();
            env.proxy
                .filesystem()
                .mkdir(&parent)
                .await
                .expect("kubelet mkdir");
        }
        env.sim.clear_audit();
        env
    }

    /// The driver process was killed (nothing it had in progress reaches the host or its state directory any more:
    /// `process.rs`): a new process, a new client, the state directory as the dead process left it, the same host;
    /// startup reconciliation runs first, as in `wincsi-node`.
    async fn restart(&mut self) {
        self.kill();
        self.process = process::Process::new();
        self.proxy = self.process.client(self.socks.path());
        self.mgr = manager(
            &self.sim,
            &self.proxy,
            self.state.path(),
            self.backend,
            &mut self.process,
        );
        self.mgr
            .reconcile(long())
            .await
            .expect("startup reconciliation");
    }

    /// The driver process dies now (`process.rs`): its host calls, connections and state writes stop; the state
    /// directory is kept as it left it, for [`Env::restart`]. A call it had running goes on on the host. Killing a
    /// dead process changes nothing.
    fn kill(&mut self) {
        if self.process.kill() {
            self.state = process::snapshot(self.state.path());
        }
    }

    /// [`Env::restart`] on `backend`: the node's `mode` changed (csiProxy ↔ hostProcess) over the same state
    /// directory and host.
    async fn restart_as(&mut self, backend: TestBackend) {
        self.backend = backend;
        self.restart().await;
    }

    async fn run(&self, op: Op, d: Deadline) -> Result<(), Error> {
        let w = self.workflow;
        match op {
            Op::Stage => self.mgr.stage(&stage_req(w), d).await,
            Op::Publish => self.mgr.publish(&publish_req(w), d).await,
            Op::Unpublish => {
                self.mgr
                    .unpublish(
                        &UnpublishRequest {
                            volume_id: ID.into(),
                            target_path: target(),
                        },
                        d,
                    )
                    .await
            }
            Op::Unstage => {
                self.mgr
                    .unstage(
                        &UnstageRequest {
                            volume_id: ID.into(),
                            staging_target_path: staging(),
                        },
                        d,
                    )
                    .await
            }
            Op::Expand => multipath::expand(self, d).await,
        }
    }

    /// kubelet's policy: retry the same RPC until it succeeds (bounded). The first retry after a fault must not be
    /// ABORTED: nothing else is in flight, so ABORTED would mean a lock left held.
    async fn retry(&self, op: Op, what: &str) -> usize {
        for attempt in 1..=RETRIES {
            match self.run(op, long()).await {
                Ok(()) => return attempt,
                Err(Error::Aborted(m)) => {
                    panic!("{what}: {op:?} is ABORTED (a volume lock was left held): {m}")
                }
                Err(_) if attempt < RETRIES => {}
                Err(e) => panic!("{what}: {op:?} did not converge after {RETRIES} retries: {e:?}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    fn write(&self, path: &str, text: &str) {
        self.sim
            .with_state(|s| s.write_file(path, text.as_bytes()))
            .expect("write through the published path");
    }

    fn read(&self, path: &str) -> Option<String> {
        self.sim
            .with_state(|s| s.read_file(path).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Let a hung csi-proxy call finish (it ignores cancellation) and wait until it has.
    async fn drain_hangs(&self) {
        self.sim.clear_faults();
        self.sim.release_hangs();
        tokio::time::timeout(Duration::from_secs(30), async {
            while self.sim.hung_calls() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("a released call ends");
    }

    /// NodeStage; when csi-proxy cannot show that an announced call the stage waits for ended and the stage names a
    /// reboot as the way back, the node reboots (the driver restarts with it) and the stage goes on.
    async fn stage_or_way_back(&mut self, what: &str) {
        // After a silenced connection, a removal of the share this process runs may still wait on it (a call run to
        // its end waits up to the outlive bound for an answer that never comes): the stage waits for it until its own
        // deadline, then names the way back. A short deadline keeps that wait out of real time; it changes nothing
        // else.
        let first = if self.silenced {
            Deadline::after(Duration::from_secs(2))
        } else {
            long()
        };
        match self.run(Op::Stage, first).await {
            Ok(()) => return,
            Err(Error::Unavailable(m))
                if self.backend == TestBackend::CsiProxy
                    && m.contains("a reboot of the node ends the wait at once") =>
            {
                self.sim.reboot().expect("reboot");
                self.restart().await;
            }
            // The short deadline may end the stage before it is done (a loaded machine spends it on the earlier
            // steps, and the stage answers "kubelet will retry"): kubelet retries, and so does this.
            Err(Error::Unavailable(_) | Error::DeadlineExceeded(_)) if self.silenced => {}
            Err(e) => panic!("{what}: re-stage failed: {e:?}"),
        }
        self.run(Op::Stage, long()).await.unwrap_or_else(|e| {
            panic!("{what}: re-stage after the way back (a reboot) failed: {e:?}")
        });
    }

    /// The end state of a converged cell.
    async fn check_converged(mut self, what: &str) {
        // No lock held: an extra (idempotent) unstage answers OK, not ABORTED.
        self.run(Op::Unstage, long())
            .await
            .unwrap_or_else(|e| panic!("{what}: a repeated unstage is not OK: {e:?}"));
        let report = self.sim.invariants();
        assert!(report.ok(), "{what}: simulated host invariants: {report:?}");
        assert!(
            self.mgr.store().volumes().expect("list").is_empty(),
            "{what}: volume records left"
        );
        assert!(
            self.mgr.store().publications().expect("list").is_empty(),
            "{what}: publish records left"
        );
        // The data is still on the volume: a fresh stage shows it (nothing was formatted or deleted). Through
        // csi-proxy a removal the driver issued and then lost sight of (killed in it, or the call's connection silent)
        // can never be seen to end: the stage waits for it and names the way back (issue 37: "refuses with a message
        // that names the way back"); taken, it converges.
        self.stage_or_way_back(what).await;
        assert_eq!(
            self.read(&format!(r"{}\hello.txt", staging())).as_deref(),
            Some("from the pod"),
            "{what}: the pod's data is not on the volume any more"
        );
        if self.workflow == Workflow::Smb {
            assert_eq!(
                self.sim
                    .with_state(|s| s.read_share_file("fs1", "data", r"base\readme.txt").ok())
                    .as_deref(),
                Some(&b"keep me"[..]),
                "{what}: existing share data lost"
            );
        }
        self.run(Op::Unstage, long())
            .await
            .unwrap_or_else(|e| panic!("{what}: final unstage failed: {e:?}"));
        let report = self.sim.invariants();
        assert!(report.ok(), "{what}: invariants after re-stage: {report:?}");
        if self.silenced {
            // A silent connection ends only when csi-proxy restarts (measured under Wine, `serve::silence`); a call run
            // to its end (`PartitionDisk`, `FormatVolume`) keeps waiting on it until then, and the graceful shutdown
            // below would wait for it.
            self.sim.restart_csi_proxy();
        }
        if let Some(serve) = self.serve.take() {
            serve.shutdown().await.expect("shutdown");
        }
    }
}

fn long() -> Deadline {
    Deadline::after(Duration::from_secs(120))
}

/// The clean run: every operation succeeds; the RPCs of each, in order.
async fn record(w: Workflow) -> Vec<(Op, Vec<String>)> {
    let env = Env::new(w).await;
    let mut out = Vec::new();
    for &op in w.ops() {
        env.run(op, long())
            .await
            .unwrap_or_else(|e| panic!("clean {w:?} {op:?}: {e:?}"));
        if op == Op::Publish {
            env.write(&format!(r"{}\hello.txt", target()), "from the pod");
        }
        let rpcs = env.sim.audit(0).into_iter().map(|e| e.rpc).collect();
        env.sim.clear_audit();
        out.push((op, rpcs));
    }
    env.check_converged(&format!("clean {w:?}")).await;
    out
}

/// The clean run of `w`, recorded once per test binary (every matrix of this file crosses the same recording).
fn recorded(w: Workflow) -> &'static [(Op, Vec<String>)] {
    static SMB: std::sync::OnceLock<Vec<(Op, Vec<String>)>> = std::sync::OnceLock::new();
    static ISCSI: std::sync::OnceLock<Vec<(Op, Vec<String>)>> = std::sync::OnceLock::new();
    static MULTIPATH: std::sync::OnceLock<Vec<(Op, Vec<String>)>> = std::sync::OnceLock::new();
    let once = match w {
        Workflow::Smb => &SMB,
        Workflow::Iscsi => &ISCSI,
        Workflow::Multipath => &MULTIPATH,
    };
    once.get_or_init(|| runtime().block_on(record(w)))
}

/// 1-based occurrence of `rpcs[i]` within its operation.
fn occurrence(rpcs: &[String], i: usize) -> u64 {
    rpcs[..=i].iter().filter(|r| **r == rpcs[i]).count() as u64
}

/// Whether the place of `rpcs[i]` does not depend on how often a wait looked (module docs).
fn stable(rpcs: &[String], i: usize) -> bool {
    !LOOKS.contains(&rpcs[i].as_str()) || occurrence(rpcs, i) == 1
}

/// The calls of one operation's recording a cell may fault: each that starts a step, at a stable place.
fn faultable(rpcs: &[String]) -> impl Iterator<Item = usize> + '_ {
    (0..rpcs.len()).filter(|&i| {
        squeeze(rpcs[..=i].to_vec()).len() > squeeze(rpcs[..i].to_vec()).len() && stable(rpcs, i)
    })
}

fn cells(w: Workflow, recorded: &[(Op, Vec<String>)]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (op, rpcs) in recorded {
        let occurrence = |i: usize| occurrence(rpcs, i);
        let indices: Vec<usize> = match w {
            Workflow::Multipath => multipath::indices(rpcs),
            Workflow::Smb | Workflow::Iscsi => faultable(rpcs).collect(),
        };
        for index in indices {
            let rpc = &rpcs[index];
            for fault in [Fault::Fail, Fault::Hang, Fault::Kill, Fault::Outlive] {
                let next_stable = index + 1 >= rpcs.len() || stable(rpcs, index + 1);
                if (fault == Fault::Kill && !next_stable)
                    || (fault == Fault::Outlive && !DESTRUCTIVE.contains(&rpc.as_str()))
                {
                    continue;
                }
                if w == Workflow::Multipath && !multipath::covers(*op, rpc, fault) {
                    continue;
                }
                cells.push(Cell {
                    workflow: w,
                    op: *op,
                    index,
                    rpc: rpc.clone(),
                    nth: occurrence(index),
                    next: rpcs
                        .get(index + 1)
                        .map(|r| (r.clone(), occurrence(index + 1))),
                    fault,
                });
            }
        }
    }
    cells
}

async fn run_cell(cell: &Cell) {
    let what = cell.to_string();
    let mut env = Env::new(cell.workflow).await;
    let mut kubelet_retries = 0;
    for &op in cell.workflow.ops() {
        if op == cell.op {
            match cell.fault {
                Fault::Fail => {
                    env.sim
                        .fail_nth(
                            &cell.rpc,
                            cell.nth,
                            &format!("{} failed: injected by the hardening matrix", cell.rpc),
                        )
                        .expect("fault");
                    // The operation may still succeed when the driver tolerates that failure (e.g. a probe).
                    let _ = env.run(op, long()).await;
                    assert!(
                        env.sim.audit(0).iter().any(|e| e.injected),
                        "{what}: the fault was not hit"
                    );
                    env.sim.clear_faults();
                }
                Fault::Hang => {
                    env.sim.hang_nth(&cell.rpc, cell.nth).expect("hang");
                    let attempt = env.run(op, long());
                    tokio::pin!(attempt);
                    tokio::select! {
                        r = &mut attempt => panic!("{what}: finished despite the hang: {r:?}"),
                        () = env.sim.wait_hung(1) => {}
                    }
                    // The call hangs: let virtual time run past the RPC deadline (no real sleep; the runtime
                    // auto-advances while everything waits on the hung call; the native backend's hung facade call
                    // occupies a blocking thread, which holds auto-advance, so the clock is advanced by hand).
                    tokio::time::pause();
                    tokio::time::advance(Duration::from_secs(121)).await;
                    let r = attempt.await;
                    tokio::time::resume();
                    // Any error ends the operation (DEADLINE_EXCEEDED, or e.g. FailedPrecondition when the step was
                    // an identity check that could not complete); kubelet retries every code.
                    assert!(
                        r.is_err(),
                        "{what}: succeeded despite a hung host call: {r:?}"
                    );
                    env.drain_hangs().await;
                }
                Fault::Kill => {
                    match &cell.next {
                        Some((next, nth)) => {
                            env.sim.hang_nth(next, *nth).expect("hang");
                            tokio::select! {
                                r = env.run(op, long()) => panic!("{what}: finished despite the hang: {r:?}"),
                                () = env.sim.wait_hung(1) => {}
                            }
                            // Dead while the next call is pending, which then ends on the host.
                            env.kill();
                            env.drain_hangs().await;
                        }
                        // Killed after the last call: the host did everything, kubelet saw no answer.
                        None => env
                            .run(op, long())
                            .await
                            .unwrap_or_else(|e| panic!("{what}: {e:?}")),
                    }
                    env.restart().await;
                }
                Fault::LateAnswer => unreachable!("a cell of kubelet's other paths only"),
                Fault::Outlive => {
                    env.sim.hang_nth(&cell.rpc, cell.nth).expect("hang");
                    tokio::select! {
                        r = env.run(op, long()) => panic!("{what}: finished despite the hang: {r:?}"),
                        () = env.sim.wait_hung(1) => {}
                    }
                    // Killed inside the call, which goes on on the host; the restarted driver's retry while it runs
                    // (a short deadline: it waits for the call's outcome until then) must fail and issue no second one.
                    env.restart().await;
                    let calls = env.sim.call_counts().get(&cell.rpc).copied();
                    let r = env.run(op, Deadline::after(Duration::from_secs(3))).await;
                    assert!(
                        r.is_err(),
                        "{what}: succeeded while the first call may still run: {r:?}"
                    );
                    assert_eq!(
                        env.sim.call_counts().get(&cell.rpc).copied(),
                        calls,
                        "{what}: issued again while the first may still run"
                    );
                    // The first call completes, after the restart.
                    env.drain_hangs().await;
                }
            }
            kubelet_retries += env.retry(op, &what).await;
        } else {
            kubelet_retries += env.retry(op, &what).await - 1;
        }
        if op == Op::Publish {
            env.write(&format!(r"{}\hello.txt", target()), "from the pod");
        }
    }
    assert!(
        kubelet_retries <= RETRIES * cell.workflow.ops().len(),
        "{what}"
    );
    env.check_converged(&what).await;
}

/// How many cells run at once (`WINCSI_MATRIX_SHARDS`, default 4): a cell mostly waits on the simulated host's
/// real-time arrival, so cells overlap well even on two cores.
fn shards() -> usize {
    std::env::var("WINCSI_MATRIX_SHARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(4)
}

/// A fresh current-thread runtime (each cell thread has its own: a hang cell pauses its runtime's clock).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs `run(i, item)` for every item on [`shards`] threads, each with its own runtime. After a cell fails, no
/// thread starts another; the failure is re-raised once every thread has stopped.
fn in_shards<'s, T: Sync, F: std::future::Future<Output = ()>>(
    items: &'s [T],
    run: impl Fn(usize, &'s T) -> F + Sync,
) {
    let failed = std::sync::atomic::AtomicBool::new(false);
    let n = shards();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let (run, failed) = (&run, &failed);
                scope.spawn(move || {
                    let rt = runtime();
                    for (i, item) in items.iter().enumerate().skip(k).step_by(n) {
                        if failed.load(std::sync::atomic::Ordering::SeqCst) {
                            return;
                        }
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            rt.block_on(run(i, item))
                        }));
                        if let Err(p) = r {
                            failed.store(true, std::sync::atomic::Ordering::SeqCst);
                            std::panic::resume_unwind(p);
                        }
                    }
                })
            })
            .collect();
        let mut first = None;
        for h in handles {
            if let Err(p) = h.join() {
                first.get_or_insert(p);
            }
        }
        if let Some(p) = first {
            std::panic::resume_unwind(p);
        }
    });
}

/// Runs `body` on another thread within a real-time bound (the cells pause tokio's clock, so a tokio timeout would
/// fire early), re-raising its panic.
fn bounded(what: &str, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(600)) {
        Ok(()) => worker.join().expect("matrix thread"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(p) = worker.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(e) => panic!("{what} did not finish within their time bound: {e}"),
    }
}

#[test]
fn every_host_call_crossed_with_fail_hang_and_kill_converges() {
    bounded("the matrix's cells", matrix);
}

fn matrix() {
    let mut all = Vec::new();
    for w in [Workflow::Smb, Workflow::Iscsi, Workflow::Multipath] {
        let recorded = recorded(w);
        for (op, rpcs) in recorded {
            assert!(!rpcs.is_empty(), "{w:?} {op:?} made no host call");
            println!("hardening matrix: {w:?} {op:?}: {}", rpcs.join(" → "));
        }
        all.extend(cells(w, recorded));
    }
    // `WINCSI_MATRIX_CELL=<text>`: only the cells whose name contains it (to look at one).
    let filtered = std::env::var("WINCSI_MATRIX_CELL").ok();
    if let Some(only) = &filtered {
        all.retain(|c| c.to_string().contains(only.as_str()));
    }
    let total = all.len();
    in_shards(&all, |i, cell| async move {
        println!("hardening matrix: cell {}/{total}: {cell}", i + 1);
        run_cell(cell).await
    });
    let outlive = all.iter().filter(|c| c.fault == Fault::Outlive).count();
    println!(
        "hardening matrix: {total} cells (fail/hang/kill × every recorded step, outlive × every destructive call: \
         {outlive}), {total} converged, 0 failed"
    );
    if filtered.is_none() {
        assert!(
            total >= 3 * 20,
            "the recorded sequences shrank: {total} cells"
        );
        // csi-proxy: PartitionDisk, FormatVolume; native: Initialize, CreatePartition, Format.
        assert!(outlive >= 2, "no destructive call was recorded: {outlive}");
    }
}

// ---- A connection that goes silent (issue 29 item 3): its own cells, its own test ----

/// The csi-proxy API group serving `rpc` (the connection a silent-connection cell silences).
fn api_group(rpc: &str) -> ApiGroup {
    match rpc {
        "ListDiskLocations" | "PartitionDisk" | "Rescan" | "ListDiskIDs" | "GetDiskStats"
        | "SetDiskState" | "GetDiskState" => ApiGroup::Disk,
        "ListVolumesOnDisk"
        | "MountVolume"
        | "UnmountVolume"
        | "IsVolumeFormatted"
        | "FormatVolume"
        | "ResizeVolume"
        | "GetVolumeStats"
        | "GetDiskNumberFromVolumeID"
        | "GetVolumeIDFromTargetPath"
        | "WriteVolumeCache" => ApiGroup::Volume,
        "PathExists" | "Mkdir" | "Rmdir" | "CreateSymlink" | "IsSymlink" => ApiGroup::Filesystem,
        "NewSmbGlobalMapping" | "RemoveSmbGlobalMapping" => ApiGroup::Smb,
        "GetBIOSSerialNumber" | "StartService" | "StopService" | "GetService" => ApiGroup::System,
        _ => ApiGroup::Iscsi,
    }
}

/// One cell: the `nth` call of `rpc` in `op` reaches csi-proxy, and from then on nothing comes back on its API group's
/// connection (csi-proxy finishes the call; its answer and everything after it are lost), as the real csi-proxy's
/// pipe instances did after a restart under Wine. Once the RPC's deadline has passed (virtual time), kubelet's next
/// RPC must reach the host over a new connection of that group and converge at once; then the workflow carries on.
async fn run_silent_cell(w: Workflow, op_at: Op, rpc: &str, nth: u64) {
    let what = format!("{w:?}/{op_at:?}/{rpc} #{nth}/silent connection");
    let group = api_group(rpc);
    let mut env = Env::new(w).await;
    for op in OPS {
        if op != op_at {
            env.retry(op, &what).await;
        } else {
            env.sim.hang_nth(rpc, nth).expect("hang");
            env.silenced = true;
            let attempt = env.run(op, long());
            tokio::pin!(attempt);
            tokio::select! {
                r = &mut attempt => panic!("{what}: finished despite the hang: {r:?}"),
                () = env.sim.wait_hung(1) => {}
            }
            let before = env.sim.connections_accepted(group);
            assert!(
                before >= 1,
                "{what}: the call came over no {group} connection"
            );
            env.sim.silence_connections(group);
            // csi-proxy finishes the call (it ignores cancellation); the answer goes nowhere.
            env.drain_hangs().await;
            tokio::time::pause();
            tokio::time::advance(Duration::from_secs(121)).await;
            let r = attempt.await;
            tokio::time::resume();
            assert!(r.is_err(), "{what}: succeeded without an answer: {r:?}");
            // kubelet's next RPC: answered over a new connection (a bound, not a wait: the calls take milliseconds).
            env.run(op, Deadline::after(Duration::from_secs(30)))
                .await
                .unwrap_or_else(|e| {
                    panic!("{what}: kubelet's next {op:?} did not converge after the silent connection: {e:?}")
                });
            assert!(
                env.sim.connections_accepted(group) > before,
                "{what}: no new {group} connection"
            );
        }
        if op == Op::Publish {
            env.write(&format!(r"{}\hello.txt", target()), "from the pod");
        }
    }
    env.check_converged(&what).await;
}

#[test]
fn every_host_call_whose_connection_goes_silent_converges() {
    if common::backend::backend() != sim::wmi::TestBackend::CsiProxy {
        println!(
            "silent connections: csi-proxy's transport only (the native backend has no connection)"
        );
        return;
    }
    bounded("the silent-connection cells", || {
        // Every faultable call (as the matrix: a repeated look's count depends on timing, so only its first is one).
        let mut all = Vec::new();
        for w in [Workflow::Smb, Workflow::Iscsi] {
            for (op, rpcs) in recorded(w) {
                for i in faultable(rpcs) {
                    all.push((w, *op, rpcs[i].clone(), occurrence(rpcs, i)));
                }
            }
        }
        // `WINCSI_MATRIX_CELL=<text>`: only the cells whose name contains it (to look at one).
        let filtered = std::env::var("WINCSI_MATRIX_CELL").ok();
        if let Some(only) = &filtered {
            all.retain(|(w, op, rpc, nth)| {
                format!("{w:?}/{op:?}/{rpc} #{nth}").contains(only.as_str())
            });
        }
        let total = all.len();
        in_shards(&all, |i, (w, op, rpc, nth)| {
            println!(
                "silent connections: cell {}/{total}: {w:?}/{op:?}/{rpc} #{nth}",
                i + 1
            );
            run_silent_cell(*w, *op, rpc, *nth)
        });
        println!("silent connections: {total} cells converged");
        assert!(
            filtered.is_some() || total >= 20,
            "the recorded sequences shrank: {total} cells"
        );
    });
}

/// The reboot-during-an-outage cell (issue 29 item 1): the SMB volume is staged and published with the pod's data on
/// it; the file server goes down; the node reboots (every mapping Disconnected; the driver restarts and reconciles);
/// kubelet's re-stages fail while the server is down; the server comes back (`restart`: the driver restarts once more
/// first). kubelet's retries must converge — the data on the volume, nothing left — like every cell of the matrix.
async fn reboot_during_a_file_server_outage(restart: bool) {
    let what =
        format!("Smb/reboot during a file-server outage/restart before the retry: {restart}");
    let mut env = Env::new(Workflow::Smb).await;
    env.retry(Op::Stage, &what).await;
    env.retry(Op::Publish, &what).await;
    env.write(&format!(r"{}\hello.txt", target()), "from the pod");
    env.sim
        .with_state_mut(|s| s.set_smb_reachable("fs1", false))
        .expect("outage");
    env.sim.reboot().expect("reboot");
    env.restart().await;
    for attempt in 1..=2 {
        let r = env.run(Op::Stage, long()).await;
        assert!(
            matches!(&r, Err(Error::FailedPrecondition(m)) if m.contains("53")),
            "{what}: re-stage {attempt} during the outage: {r:?}"
        );
    }
    env.sim
        .with_state_mut(|s| s.set_smb_reachable("fs1", true))
        .expect("the server is back");
    if restart {
        env.restart().await;
    }
    for op in OPS {
        env.retry(op, &what).await;
        if op == Op::Publish {
            assert_eq!(
                env.read(&format!(r"{}\hello.txt", target())).as_deref(),
                Some("from the pod"),
                "{what}: the pod's data through its path after the re-stage"
            );
        }
    }
    env.check_converged(&what).await;
}

#[tokio::test]
async fn reboot_during_a_file_server_outage_converges() {
    for restart in [false, true] {
        reboot_during_a_file_server_outage(restart).await;
    }
}
