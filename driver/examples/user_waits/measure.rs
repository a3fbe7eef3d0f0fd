//! What a user waits for and what the node pays (issue 39 item 1), measured in-process on the simulated host at its
//! default (realistic) arrival, with the driver's default flags, per csi-proxy release and on the native backend.
//!
//! Each cell is one operation as kubelet drives it: `NodeStageVolume` with kubelet's 2-minute deadline, and after a
//! failure the same call again once kubelet's backoff allows it, until the OK. Kubelet's retry, as
//! `kubernetes/kubernetes` does it (`shared/reference/kubelet-csi-paths.md` §2):
//!
//! - the volume manager's reconciler runs every 100 ms (`pkg/kubelet/volumemanager/volume_manager.go`,
//!   `reconcilerLoopSleepPeriod`), and starts the operation again at its first pass that the backoff allows;
//! - the backoff (`pkg/util/goroutinemap/exponentialbackoff/exponential_backoff.go`): 500 ms after the first
//!   failure (`initialDurationBeforeRetry`), doubling after each further one up to 2 min 2 s
//!   (`maxDurationBeforeRetry`), counted from the failure (`lastErrorTime`; `SafeToRetry` refuses while
//!   `time.Since(lastErrorTime) <= durationBeforeRetry`);
//! - every error code is retried so while the pod needs the volume (final and uncertain errors alike; they differ in
//!   what kubelet does when the pod goes), and each attempt carries the CSI client's 2-minute timeout
//!   (`pkg/volume/csi/csi_plugin.go`, `csiTimeout`).
//!
//! The passes are modelled at multiples of 100 ms from the first call, so the retry is at the first pass strictly
//! after `failure + backoff`. Time is tokio's paused clock, on which the simulated host's arrivals run: the wall
//! time is the waits (arrivals, the driver's looks and settle time, kubelet's backoff), deterministic, and
//! excludes what each host call costs on a node (the simulated host answers at once; on csi-proxy v1.1.x/v1.2.x
//! each host process is a PowerShell start, about a second). Host calls and host processes are the simulated
//! host's audit for the whole operation, every attempt included.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sim::inproc::InProcess;
use sim::wmi::WindowsView;
use sim::{HostOptions, Scenario, SimHost};
use tokio::time::Instant;
use wincsi::backend::Manager;
use wincsi::host::KubeletRoot;
use wincsi::host::csi_proxy::CsiProxyHost;
use wincsi::host::native::NativeHost;
use wincsi::host::native::testing::{Tap, TapHooks, Tapped, TestHost};
use wincsi::iscsi::IscsiSettings;
use wincsi::lifecycle::{
    PublishRequest, StageRequest, UnpublishRequest, UnstageRequest, VolumeConfig,
};
use wincsi::locks::Deadline;
use wincsi::smb::Secrets;

/// The csi-proxy releases the simulated host plays (`shared/reference/csi-proxy-versions.md`).
pub(crate) const RELEASES: [&str; 4] = ["v1.1.3", "v1.2.1", "v1.3.0", "master"];

/// kubelet's CSI client timeout per call (`csiTimeout`).
pub(crate) const CSI_TIMEOUT: Duration = Duration::from_secs(120);
/// The volume manager's reconciler period (`reconcilerLoopSleepPeriod`).
pub(crate) const RECONCILER_PERIOD: Duration = Duration::from_millis(100);
/// kubelet's first backoff (`initialDurationBeforeRetry`).
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// kubelet's longest backoff (`maxDurationBeforeRetry`).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(122);
/// More attempts than this is a driver that never succeeds: the measurement fails.
const MAX_ATTEMPTS: u32 = 20;

/// One column: a backend, and for csi-proxy the release the host plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Column {
    /// The csi-proxy backend against the simulated host playing this release.
    CsiProxy(&'static str),
    /// The native backend over the simulated host's Windows view.
    Native,
}

impl Column {
    /// Every release, then native.
    pub(crate) fn all() -> Vec<Column> {
        RELEASES
            .iter()
            .map(|&r| Column::CsiProxy(r))
            .chain([Column::Native])
            .collect()
    }

    /// The table heading.
    pub(crate) fn heading(self) -> String {
        match self {
            Column::CsiProxy(r) => format!("csi-proxy {r}"),
            Column::Native => "native".to_owned(),
        }
    }
}

/// One row: an operation as a user meets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Row {
    /// The first stage of a new (RAW) LUN: login, partition, format, mount.
    IscsiRaw,
    /// The first stage of a LUN that holds an NTFS volume (written by another node).
    IscsiData,
    /// NodeStageVolume of a volume already staged (kubelet restarted, or a second call).
    IscsiRepeated,
    /// The first stage of an SMB share.
    SmbFirst,
    /// After a node reboot: the stage kubelet issues again for the volume of [`Row::IscsiRaw`].
    RebootIscsiRaw,
    /// After a node reboot: the stage of the volume of [`Row::IscsiData`].
    RebootIscsiData,
    /// After a node reboot: the stage of the share of [`Row::SmbFirst`].
    RebootSmb,
}

impl Row {
    /// Every row, in table order.
    pub(crate) const ALL: [Row; 7] = [
        Row::IscsiRaw,
        Row::IscsiData,
        Row::IscsiRepeated,
        Row::SmbFirst,
        Row::RebootIscsiRaw,
        Row::RebootIscsiData,
        Row::RebootSmb,
    ];

    /// The table label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Row::IscsiRaw => "iSCSI first stage, new (RAW) LUN",
            Row::IscsiData => "iSCSI first stage, LUN with data (NTFS)",
            Row::IscsiRepeated => "iSCSI repeated stage",
            Row::SmbFirst => "SMB first stage",
            Row::RebootIscsiRaw => "after a reboot: iSCSI stage, the volume of the new LUN",
            Row::RebootIscsiData => "after a reboot: iSCSI stage, the LUN with data",
            Row::RebootSmb => "after a reboot: SMB stage",
        }
    }
}

/// What one operation cost, kubelet's retries included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cell {
    /// From the first `NodeStageVolume` to the OK kubelet sees (virtual time).
    pub(crate) wall: Duration,
    /// `NodeStageVolume` calls kubelet made (1 = the first succeeded).
    pub(crate) attempts: u32,
    /// The driver's host calls (its host port: csi-proxy RPCs, or the native backend's operations, each what a
    /// csi-proxy RPC does).
    pub(crate) calls: usize,
    /// What the simulated host's audit saw: the csi-proxy RPCs (the same), or the native backend's WMI queries and
    /// methods and Win32 calls.
    pub(crate) host_calls: usize,
    /// Host processes csi-proxy started for them.
    pub(crate) processes: u64,
    /// The calls, in order.
    pub(crate) sequence: Vec<String>,
    /// The error of each failed attempt.
    pub(crate) errors: Vec<String>,
}

/// The measurement of one column: a cell per row.
pub(crate) type Table = BTreeMap<(Column, Row), Cell>;

const IQN_NEW: &str = "iqn.2026-01.io.wincsi:new";
const IQN_DATA: &str = "iqn.2026-01.io.wincsi:data";

/// The node: one SMB share, a new LUN and a LUN with data; `instant`: every arrival at once (the floor).
fn scenario(release: &str, instant: bool) -> Value {
    let mut sc = json!({
        // The default (realistic) arrival: no `arrival` given.
        "host": {"csi_proxy_version": release,
                 "directories": [r"C:\var\lib\kubelet\plugins\b", r"C:\var\lib\kubelet\pods\p"]},
        "smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": "Waits-Pw-0123!", "domain": "CORP"}],
            "shares": [{"name": "data"}]}]},
        // Each LUN behind its own target, so each first stage logs in itself.
        "iscsi": {"portals": [{"address": "10.0.0.5", "targets": [
            // A new LUN: RAW, offline at arrival (the SAN policy decides).
            {"iqn": IQN_NEW, "luns": [{"lun": 0, "size": 1u64 << 30}]},
            // A LUN another node formatted: one GPT basic data partition with an NTFS volume.
            {"iqn": IQN_DATA, "luns": [{"lun": 0, "size": 1u64 << 30, "partition_style": "gpt",
             "partitions": [{"kind": "reserved", "size": 16u64 << 20},
                            {"kind": "basic", "volume": {"filesystem": "NTFS", "files": {"data.txt": "kept"}}}]}]}
        ]}]}
    });
    if instant {
        sc["host"]["behaviour"] = json!({"arrival": {"model": "instant"}});
    }
    sc
}

/// The requests of volume `id`: an SMB share, or LUN 0 of target `iqn`.
fn requests(
    id: &str,
    iqn: Option<&str>,
) -> (
    StageRequest,
    PublishRequest,
    UnpublishRequest,
    UnstageRequest,
) {
    let (ctx, secrets): (BTreeMap<String, String>, Secrets) = match iqn {
        None => (
            [("source".to_owned(), r"\\fs1\data".to_owned())].into(),
            Secrets::new([
                ("username", "bob"),
                ("password", "Waits-Pw-0123!"),
                ("domain", "CORP"),
            ]),
        ),
        Some(iqn) => (
            [
                ("targetPortal".to_owned(), "10.0.0.5".to_owned()),
                ("iqn".to_owned(), iqn.to_owned()),
                ("lun".to_owned(), "0".to_owned()),
            ]
            .into(),
            Secrets::default(),
        ),
    };
    crate::requests::lifecycle(id, ctx, secrets)
}

/// kubelet's backoff after `failures` failed attempts (1 = the first failure).
pub(crate) fn backoff(failures: u32) -> Duration {
    let mut d = FIRST_BACKOFF;
    for _ in 1..failures {
        d = (d * 2).min(MAX_BACKOFF);
    }
    d
}

/// The first reconciler pass strictly after `ready`, passes at `start + k × 100 ms`.
pub(crate) fn next_pass(start: Instant, ready: Instant) -> Instant {
    let since = ready.duration_since(start);
    let period = RECONCILER_PERIOD.as_nanos();
    let k = since.as_nanos() / period + 1;
    start + Duration::from_nanos((k * period) as u64)
}

/// The driver as one process sees it: a manager over the column's backend, on `state` (its `--state-dir`); native
/// behind `tap`, which records its port calls.
fn driver(column: Column, inproc: &InProcess, state: &Path, tap: &Arc<Tap>) -> Manager<TestHost> {
    let host = match column {
        Column::CsiProxy(_) => TestHost::CsiProxy(CsiProxyHost::new(inproc.client())),
        Column::Native => {
            let view = Arc::new(WindowsView::new(inproc.host().clone()));
            TestHost::Native(Tapped::new(
                NativeHost::new(view, Some(state)),
                Arc::clone(tap),
            ))
        }
    };
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    // The driver's defaults (`--disk-settle-time` 15 s).
    wincsi::backend::manager_with(host, cfg, state, IscsiSettings::default()).expect("manager")
}

/// A tap that only records (no fault, no outage, no script).
fn recorder() -> Arc<Tap> {
    Tap::new(TapHooks {
        unreachable: Box::new(|_| false),
        after: Box::new(|_| {}),
    })
}

/// kubelet's `NodeStageVolume` until the OK, with its backoff between attempts.
async fn kubelet_stage(
    sim: &SimHost,
    tap: &Tap,
    mgr: &Manager<TestHost>,
    req: &StageRequest,
) -> Cell {
    sim.clear_audit();
    tap.clear();
    let start = Instant::now();
    let mut cell = Cell::default();
    loop {
        cell.attempts += 1;
        match mgr.stage(req, Deadline::after(CSI_TIMEOUT)).await {
            Ok(()) => break,
            Err(e) => {
                cell.errors.push(format!("{e}"));
                assert!(
                    cell.attempts < MAX_ATTEMPTS,
                    "{} never staged: {:?}",
                    req.volume_id,
                    cell.errors
                );
                let ready = Instant::now() + backoff(cell.attempts);
                tokio::time::sleep_until(next_pass(start, ready)).await;
            }
        }
    }
    cell.wall = start.elapsed();
    let audit = sim.audit(0);
    cell.host_calls = audit.len();
    let port = tap.calls().len();
    cell.calls = if port > 0 { port } else { audit.len() };
    cell.processes = audit.iter().map(|e| e.host_processes.total()).sum();
    cell.sequence = audit.into_iter().map(|e| e.rpc).collect();
    cell
}

/// Every row of `column` (only the new LUN's first stage when `floor`: every arrival at once), on a fresh simulated
/// host and a fresh driver (run on a paused clock).
pub(crate) async fn measure(column: Column, floor: bool, table: &mut Table) {
    let sandbox = tempfile::tempdir().expect("tmp");
    let state = tempfile::tempdir().expect("tmp");
    let release = match column {
        Column::CsiProxy(r) => r,
        // The Windows view does not depend on the release; the host's csi-proxy is not used.
        Column::Native => "v1.3.0",
    };
    let sc = Scenario::from_json(&scenario(release, floor).to_string()).expect("scenario");
    let sim = SimHost::new(&sc, sandbox.path(), HostOptions::default()).expect("sim");
    let inproc = InProcess::new(sim.clone());
    let tap = recorder();
    let mgr = driver(column, &inproc, state.path(), &tap);
    let d = || Deadline::after(CSI_TIMEOUT);
    let (raw, raw_pub, _, _) = requests("raw", Some(IQN_NEW));
    let (data, data_pub, _, _) = requests("data", Some(IQN_DATA));
    let (smb, smb_pub, _, _) = requests("smb", None);
    let stage = |req| kubelet_stage(&sim, &tap, &mgr, req);
    if floor {
        table.insert((column, Row::IscsiRaw), stage(&raw).await);
        return;
    }
    table.insert((column, Row::IscsiRaw), stage(&raw).await);
    table.insert((column, Row::IscsiData), stage(&data).await);
    table.insert((column, Row::IscsiRepeated), stage(&raw).await);
    table.insert((column, Row::SmbFirst), stage(&smb).await);
    for p in [&raw_pub, &data_pub, &smb_pub] {
        mgr.publish(p, d()).await.expect("publish");
    }
    // The node reboots; the driver starts again on its state directory and reconciles, then kubelet stages every
    // volume its pods still use (and publishes them again).
    sim.reboot().expect("reboot");
    drop(mgr);
    let mgr = driver(column, &inproc, state.path(), &tap);
    if let Err(e) = mgr.reconcile(Deadline::after(CSI_TIMEOUT)).await {
        panic!("{column:?}: reconciliation after the reboot: {e}");
    }
    for (row, req) in [
        (Row::RebootIscsiRaw, &raw),
        (Row::RebootIscsiData, &data),
        (Row::RebootSmb, &smb),
    ] {
        table.insert((column, row), kubelet_stage(&sim, &tap, &mgr, req).await);
    }
    for p in [&raw_pub, &data_pub, &smb_pub] {
        mgr.publish(p, d()).await.expect("publish after the reboot");
    }
    let report = sim.invariants();
    assert!(
        report.data_loss.is_empty(),
        "{column:?}: data loss {:?}",
        report.data_loss
    );
}

/// What [`measure_all`] measured: the default arrival, and the floor (every arrival at once).
pub(crate) struct Measured {
    /// Every row and column at the simulated host's default arrival.
    pub(crate) table: Table,
    /// The new LUN's first stage with every arrival at once: what the stage costs without waiting for Windows.
    pub(crate) floor: Table,
}

/// Every column, each on its own paused clock.
pub(crate) fn measure_all() -> Measured {
    let mut table = Table::new();
    let mut floor = Table::new();
    for column in Column::all() {
        for (instant, t) in [(false, &mut table), (true, &mut floor)] {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .expect("runtime");
            rt.block_on(measure(column, instant, t));
        }
    }
    Measured { table, floor }
}

/// Seconds with one decimal.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
