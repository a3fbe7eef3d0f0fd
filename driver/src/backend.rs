//! The composition root: the one place that names a concrete host backend (`--host-backend`) and builds what
//! the CSI services run on — the volume lifecycle over that backend and the backend's liveness probe.
//!
//! Every backend is wrapped in [`Metered`] (host-call metrics with `--metrics-address`, one branch per call
//! without), and the metrics' state gauges read the lifecycle's record store ([`state_snapshot`]).
//!
//! Everything below this module is generic over [`Host`] (monomorphised per backend, no dynamic
//! dispatch inside the lifecycle); the services above see only `Arc<dyn Lifecycle>` and `Arc<dyn HostProbe>`. The
//! backends: csi-proxy (`--host-backend csi-proxy`) and native (`--host-backend native`: Win32 + WMI in-process,
//! Windows only; its start-up check refuses a host without the Storage and SMB WMI providers).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proxy_client::{ProxyClient, Transport};
use tracing::{info, warn};

use crate::config::{Config, HostBackend};
use crate::error::Error;
use crate::host::csi_proxy::{CsiProxyHost, CsiProxyProbe};
use crate::host::native::{FailedProbe, NativeHost, NativeOptions, NativeProbe, windows_host};
use crate::host::{Host, HostPath, HostProbe, KubeletRoot, Metered, PROBE_TIMEOUT};
use crate::iscsi::{Iscsi, IscsiSettings};
use crate::lifecycle::{BackgroundSettings, Lifecycle, VolumeConfig, VolumeManager};
use crate::locks::Deadline;
use crate::metrics::StateSnapshot;
use crate::smb::Smb;
use crate::state::{Phase, StateStore};

/// How to reach csi-proxy: Unix sockets under `--csi-proxy-socket-dir` if set, else named pipes with
/// `--csi-proxy-pipe-prefix`.
pub fn proxy_transport(config: &Config) -> Transport {
    match &config.csi_proxy_socket_dir {
        Some(dir) => Transport::UnixSockets { dir: dir.clone() },
        None => Transport::NamedPipes {
            prefix: config.csi_proxy_pipe_prefix.clone(),
        },
    }
}

/// The Windows host the native backend runs on: this machine's (`winhost::win32`), or, in a test build with
/// `--test-windows-socket`, a simulated host's Windows view over a socket.
fn windows_host_for(config: &Config) -> Result<Arc<dyn winhost::WindowsHost>, String> {
    #[cfg(feature = "test-windows-socket")]
    if let Some(addr) = &config.test_windows_socket {
        return crate::host::native::remote_windows_host(addr);
    }
    let _ = config;
    windows_host()
}

/// The native backend's options from the flags.
fn native_options(config: &Config) -> NativeOptions {
    NativeOptions {
        smb_require_privacy: config.smb_require_privacy,
        ..NativeOptions::default()
    }
}

/// The probe for the configured host backend (`--host-backend`), as the CSI `Probe` runs it.
pub fn probe(config: &Config) -> Arc<dyn HostProbe> {
    probe_within(config, PROBE_TIMEOUT)
}

/// The configured backend's probe with `timeout` per check (readiness: `observability::READINESS_TIMEOUT`). Both
/// backends' probes read the driver's own plugin directory (`<kubelet-root>\plugins\<driver-name>`) and start no
/// process on the node: csi-proxy's `PathExists` is a Go `os.Lstat` on every release, native's `GetFileAttributesW`
/// a Win32 call.
pub fn probe_within(config: &Config, timeout: Duration) -> Arc<dyn HostProbe> {
    let dir = match probe_path(config) {
        Ok(dir) => dir,
        Err(e) => return Arc::new(FailedProbe(e.to_string())),
    };
    match config.host_backend {
        HostBackend::CsiProxy => Arc::new(CsiProxyProbe::new(
            ProxyClient::new(proxy_transport(config)).with_timeout(timeout),
            dir,
        )),
        HostBackend::Native => match windows_host_for(config) {
            Ok(host) => native_probe_within(config, host, timeout),
            Err(why) => Arc::new(FailedProbe(why)),
        },
    }
}

/// What the probes read: the driver's plugin directory under `--kubelet-root`.
fn probe_path(config: &Config) -> Result<HostPath, Error> {
    KubeletRoot::new(&config.kubelet_root.to_string_lossy())?.plugin_dir(&config.driver_name)
}

/// Every protocol this driver serves: iSCSI for volumes that name a target, SMB for every other volume.
pub type Protocols = (Iscsi, Smb);

/// The volume lifecycle over host `H` with every protocol ([`Protocols`]).
pub type Manager<H> = VolumeManager<H, Protocols>;

/// A lifecycle over `host` with every protocol, keeping records in `state_dir` (the iSCSI protocol's default
/// settings).
pub fn manager<H: Host>(host: H, cfg: VolumeConfig, state_dir: &Path) -> Result<Manager<H>, Error> {
    manager_with(host, cfg, state_dir, IscsiSettings::default())
}

/// [`manager`] with the iSCSI protocol's `iscsi` settings (`--disk-settle-time`).
pub fn manager_with<H: Host>(
    host: H,
    cfg: VolumeConfig,
    state_dir: &Path,
    iscsi: IscsiSettings,
) -> Result<Manager<H>, Error> {
    let protocols = (
        Iscsi::with_settings(host.capabilities(), iscsi),
        Smb::default(),
    );
    VolumeManager::new(host, protocols, cfg, state_dir)
}

/// The lifecycle's background work from the flags (`--unreferenced-volume-minutes`, `--release-unreferenced-volumes`).
pub fn background_settings(config: &Config) -> BackgroundSettings {
    BackgroundSettings {
        unreferenced_after: config.unreferenced_volume_age(),
        release_unreferenced: config.release_unreferenced_volumes,
        ..BackgroundSettings::default()
    }
}

/// The iSCSI protocol's settings from the flags.
pub fn iscsi_settings(config: &Config) -> IscsiSettings {
    IscsiSettings {
        settle: config.disk_settle_time,
    }
}

/// How long startup reconciliation may take before the driver serves anyway.
pub const RECONCILE_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// Build the lifecycle the flags describe (the `--host-backend`, `--state-dir`, in-cluster Secret access for inline
/// volumes) and run startup reconciliation.
pub async fn lifecycle(config: &Config) -> Result<Arc<dyn Lifecycle>, Error> {
    match config.host_backend {
        HostBackend::CsiProxy => {
            if !config.smb_require_privacy {
                warn!(
                    "--smb-require-privacy=false has no effect with --host-backend csi-proxy: csi-proxy's own \
                     -require-privacy flag decides (v1.2.0 and later; v1.1.x always requires it)"
                );
            }
            let metrics = crate::metrics::installed().cloned();
            let mut client = ProxyClient::new(proxy_transport(config));
            if let Some(m) = metrics.clone() {
                client = client
                    .on_connection_abandoned(move |g| m.observe_abandoned_connection(g.name()));
            }
            let host = CsiProxyHost::new(client);
            start(
                Metered::new(host, HostBackend::CsiProxy.name(), metrics),
                volume_config(config)?,
                &config.state_dir(),
                config,
                |_| {},
            )
            .await
        }
        HostBackend::Native => {
            let windows = windows_host_for(config).map_err(Error::FailedPrecondition)?;
            native_lifecycle(config, windows).await
        }
    }
}

/// The lifecycle's settings from the flags.
fn volume_config(config: &Config) -> Result<VolumeConfig, Error> {
    Ok(VolumeConfig {
        kubelet_root: KubeletRoot::new(&config.kubelet_root.to_string_lossy())?,
        driver_name: config.driver_name.clone(),
    })
}

/// The lifecycle over the native backend on `windows` (on Windows the process's `WinHost`; the in-process e2e node
/// passes the simulated host's Windows view).
pub async fn native_lifecycle(
    config: &Config,
    windows: Arc<dyn winhost::WindowsHost>,
) -> Result<Arc<dyn Lifecycle>, Error> {
    let cfg = volume_config(config)?;
    let state_dir = config.state_dir();
    std::fs::create_dir_all(&state_dir)
        .map_err(|e| Error::io("creating the state directory", e))?;
    let host = NativeHost::with_options(windows, Some(&state_dir), native_options(config));
    let metrics = crate::metrics::installed().cloned();
    // While a capability's start-up check failed for a passing reason, check again (readiness and metrics say so
    // meanwhile); once everything is found present or absent, the task ends.
    tokio::spawn(host.clone().recheck_capabilities(report_capabilities));
    let seeding = host.clone();
    start(
        Metered::new(host, HostBackend::Native.name(), metrics),
        cfg,
        &state_dir,
        config,
        move |store| adopt_recorded_mappings(&seeding, store),
    )
    .await
}

/// `wincsi_host_capability_up` for each capability of the native backend's probe `report`.
fn report_capabilities(report: &winhost::probe::ProbeReport) {
    if let Some(m) = crate::metrics::installed() {
        for c in winhost::probe::Capability::ALL {
            m.set_capability_up(HostBackend::Native.name(), c.name(), report.supports(c));
        }
    }
}

/// The shares this node's volume records say the driver mapped (SMB volumes staged, or to be re-staged; and any
/// volume a stage through csi-proxy claimed, whose mapping csi-proxy's unstage would remove whoever made it:
/// `SmbRecord::unledgered`): the mappings are its own whichever backend made them.
pub fn recorded_shares(store: &StateStore) -> Vec<String> {
    let Ok(volumes) = store.volumes() else {
        return Vec::new();
    };
    let mut roots: Vec<String> = volumes
        .iter()
        .filter_map(|r| {
            let d = r.details::<crate::smb::SmbRecord>().ok().flatten()?;
            (matches!(r.phase, Phase::Staged | Phase::NeedsRestage) || d.unledgered).then_some(d)
        })
        .map(|d| d.root)
        .collect();
    roots.sort();
    roots.dedup();
    roots
}

/// The iSCSI targets whose sessions this node's volume records say a stage through csi-proxy logged in to or joined
/// (`IscsiRecord::unledgered`, a record still counting as a user of the session): csi-proxy's unstage of the target's
/// last volume would log them out whoever made them, so the native backend counts them as wincsi's.
pub fn recorded_targets(store: &StateStore) -> Vec<String> {
    let Ok(volumes) = store.volumes() else {
        return Vec::new();
    };
    let mut iqns: Vec<String> = volumes
        .iter()
        .filter_map(|r| r.details::<crate::iscsi::IscsiRecord>().ok().flatten())
        .filter(|d| d.unledgered && !d.released)
        .map(|d| d.iqn)
        .collect();
    iqns.sort();
    iqns.dedup();
    iqns
}

/// Seed the native backend's mapping ledger from the records (review M4: a node moved from `csiProxy` to
/// `hostProcess` mode, or a lost ledger), before reconciliation may need to repair one of them; and its session ledger
/// from the records of stages through csi-proxy ([`recorded_targets`]).
pub(crate) fn adopt_recorded_mappings(host: &NativeHost, store: &StateStore) {
    if let Err(e) = host.adopt_mappings(recorded_shares(store)) {
        warn!(error = %e, "cannot record the SMB mappings the volume records name as wincsi's");
    }
    if let Err(e) = host.adopt_sessions(recorded_targets(store)) {
        warn!(error = %e, "cannot record the iSCSI sessions the volume records name as wincsi's");
    }
}

/// The probe of the native backend on `windows`.
pub fn native_probe(config: &Config, windows: Arc<dyn winhost::WindowsHost>) -> Arc<dyn HostProbe> {
    native_probe_within(config, windows, PROBE_TIMEOUT)
}

/// The probe of the native backend on `windows` with `timeout` per check.
pub fn native_probe_within(
    config: &Config,
    windows: Arc<dyn winhost::WindowsHost>,
    timeout: Duration,
) -> Arc<dyn HostProbe> {
    match probe_path(config) {
        Ok(dir) => Arc::new(NativeProbe::within(
            NativeHost::with_options(windows, None, native_options(config)),
            dir.as_str(),
            timeout,
        )),
        Err(e) => Arc::new(FailedProbe(e.to_string())),
    }
}

/// A lifecycle over `host` (one monomorphised instance per backend), reconciled with the host. A reconciliation
/// failure (e.g. csi-proxy not up yet) is logged, not fatal: stage repairs a broken staging object by itself.
/// `before_reconcile` sees the record store first. The other settings come from `config`'s flags.
async fn start<H: Host>(
    host: H,
    cfg: VolumeConfig,
    state_dir: &Path,
    config: &Config,
    before_reconcile: impl FnOnce(&StateStore),
) -> Result<Arc<dyn Lifecycle>, Error> {
    let mgr = Arc::new(
        manager_with(host, cfg, state_dir, iscsi_settings(config))?
            .with_stats_cache(config.vol_stats_cache_expiry())
            .with_volume_limit(config.volume_limit())
            .with_background(background_settings(config))
            .with_secret_source(Arc::new(crate::ephemeral::KubeSecrets::in_cluster())),
    );
    before_reconcile(mgr.store());
    if let Some(metrics) = crate::metrics::installed() {
        let m = Arc::clone(&mgr);
        metrics.set_state_source(Arc::new(move || {
            let mut snap = state_snapshot(m.store());
            snap.problems
                .insert("unreachable".into(), m.unreachable_volumes().len() as u64);
            snap.problems
                .insert("unreferenced".into(), m.unreferenced_volumes().len() as u64);
            snap
        }));
    }
    info!(
        state_dir = %state_dir.display(),
        vol_stats_cache_s = config.vol_stats_cache_expiry().map_or(0, |d| d.as_secs()),
        "volume lifecycle ready; reconciling with the host"
    );
    if let Err(e) = mgr.reconcile(Deadline::after(RECONCILE_BUDGET)).await {
        warn!(error = %e, "startup reconciliation failed; the next stage of each volume repairs it instead");
    }
    // Staging objects left in place during an outage are checked again until they work, and volumes kubelet will
    // never unstage are looked for (`lifecycle/watch.rs`, `lifecycle/unreferenced.rs`).
    tokio::spawn(Arc::clone(&mgr).run_background());
    Ok(mgr)
}

/// The metrics' view of the record store: staged volumes and publish targets by protocol, and records with a
/// problem (`needs_restage`: reconciliation found the staging object broken; `quarantined`: record files that cannot
/// be read or decoded, kept and skipped by listings; `unreadable`: 1 when the store itself could not be listed).
/// Every protocol of [`Protocols`] is reported, 0 when it has no volume, so a dashboard and an `== 0` alert see the
/// series before the first volume and after the last. Blocking: it reads every record.
pub fn state_snapshot(store: &StateStore) -> StateSnapshot {
    let mut snap = StateSnapshot::default();
    for protocol in [
        <crate::smb::SmbRecord as crate::state::Details>::PROTOCOL,
        <crate::iscsi::IscsiRecord as crate::state::Details>::PROTOCOL,
    ] {
        snap.staged.insert(protocol.to_owned(), 0);
        snap.published.insert(protocol.to_owned(), 0);
    }
    snap.problems.insert("needs_restage".into(), 0);
    snap.problems.insert("unreadable".into(), 0);
    let (volumes, publications) = match (store.volumes(), store.publications()) {
        (Ok(v), Ok(p)) => (v, p),
        (Err(e), _) | (_, Err(e)) => {
            warn!(error = %e, "metrics: cannot list the state records");
            snap.problems.insert("unreadable".into(), 1);
            return snap;
        }
    };
    // After listing: the listing is what (re)discovers corrupt files.
    snap.problems
        .insert("quarantined".into(), store.quarantined_count() as u64);
    let mut protocol_of = BTreeMap::new();
    for rec in &volumes {
        protocol_of.insert(rec.volume_id.as_str(), rec.protocol.as_str());
        match rec.phase {
            Phase::Staged => *snap.staged.entry(rec.protocol.clone()).or_default() += 1,
            Phase::NeedsRestage => *snap.problems.entry("needs_restage".into()).or_default() += 1,
            Phase::Staging => {}
        }
    }
    for p in &publications {
        let protocol = protocol_of
            .get(p.volume_id.as_str())
            .copied()
            .unwrap_or("unknown");
        *snap.published.entry(protocol.to_owned()).or_default() += 1;
    }
    snap
}

/// What a [`HostJob`] learns about the backend it runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    /// The `--host-backend` value.
    pub kind: HostBackend,
    /// How it is reached, for reports (e.g. `csi-proxy over named pipes \\.\pipe\csi-proxy-*`).
    pub description: String,
}

/// Work generic over the host port that runs on whichever backend the flags select (`wincsi-node check-node`).
/// A new backend is one more arm in [`run_job`], as in [`lifecycle`] and [`probe`].
pub trait HostJob {
    /// What the job produces.
    type Output;
    /// Run on `host`.
    fn run<H: Host>(self, host: H, backend: BackendInfo) -> impl Future<Output = Self::Output>;
    /// The answer when backend `kind` cannot start on this machine (`why`: its own explanation).
    fn unavailable(self, kind: HostBackend, why: String) -> Self::Output;
}

/// Run `job` over the backend `--host-backend` names, reached as the flags say.
pub async fn run_job<J: HostJob>(config: &Config, job: J) -> J::Output {
    match config.host_backend {
        HostBackend::CsiProxy => {
            let transport = proxy_transport(config);
            let description = match &transport {
                Transport::UnixSockets { dir } => format!(
                    "csi-proxy API over Unix sockets {}/csi-proxy-*.sock",
                    dir.display()
                ),
                Transport::NamedPipes { prefix } => {
                    format!("csi-proxy over named pipes {prefix}csi-proxy-*")
                }
            };
            let host = CsiProxyHost::new(ProxyClient::new(transport));
            let info = BackendInfo {
                kind: HostBackend::CsiProxy,
                description,
            };
            job.run(host, info).await
        }
        HostBackend::Native => match windows_host_for(config) {
            Ok(windows) => {
                let state_dir = config.state_dir();
                let host =
                    NativeHost::with_options(windows, Some(&state_dir), native_options(config));
                let info = BackendInfo {
                    kind: HostBackend::Native,
                    description: "native: Win32 and WMI in this process (no csi-proxy)".to_owned(),
                };
                job.run(host, info).await
            }
            Err(why) => job.unavailable(HostBackend::Native, why),
        },
    }
}
