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
use crate::host::native::{FailedProbe, NativeHost, NativeProbe, windows_host};
use crate::host::{Host, HostProbe, KubeletRoot, Metered, PROBE_TIMEOUT};
use crate::iscsi::{Iscsi, IscsiSettings};
use crate::lifecycle::{Lifecycle, VolumeConfig, VolumeManager};
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

/// The probe for the configured host backend (`--host-backend`), as the CSI `Probe` runs it.
pub fn probe(config: &Config) -> Arc<dyn HostProbe> {
    probe_within(config, PROBE_TIMEOUT)
}

/// The configured backend's probe with `timeout` per check (readiness: `observability::READINESS_TIMEOUT`).
pub fn probe_within(config: &Config, timeout: Duration) -> Arc<dyn HostProbe> {
    match config.host_backend {
        HostBackend::CsiProxy => Arc::new(CsiProxyProbe::new(
            ProxyClient::new(proxy_transport(config)).with_timeout(timeout),
        )),
        HostBackend::Native => match windows_host() {
            Ok(host) => native_probe_within(config, host, timeout),
            Err(why) => Arc::new(FailedProbe(why)),
        },
    }
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
            let host = CsiProxyHost::new(ProxyClient::new(proxy_transport(config)));
            let metrics = crate::metrics::installed().cloned();
            start(
                Metered::new(host, HostBackend::CsiProxy.name(), metrics),
                volume_config(config)?,
                &config.state_dir(),
                iscsi_settings(config),
            )
            .await
        }
        HostBackend::Native => {
            let windows = windows_host().map_err(Error::FailedPrecondition)?;
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
    let host = NativeHost::new(windows, Some(&state_dir));
    let metrics = crate::metrics::installed().cloned();
    start(
        Metered::new(host, HostBackend::Native.name(), metrics),
        cfg,
        &state_dir,
        iscsi_settings(config),
    )
    .await
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
    Arc::new(NativeProbe::within(
        NativeHost::new(windows, None),
        &config.kubelet_root.to_string_lossy(),
        timeout,
    ))
}

/// A lifecycle over `host` (one monomorphised instance per backend), reconciled with the host. A reconciliation
/// failure (e.g. csi-proxy not up yet) is logged, not fatal: stage repairs a broken staging object by itself.
async fn start<H: Host>(
    host: H,
    cfg: VolumeConfig,
    state_dir: &Path,
    iscsi: IscsiSettings,
) -> Result<Arc<dyn Lifecycle>, Error> {
    let mgr = Arc::new(
        manager_with(host, cfg, state_dir, iscsi)?
            .with_secret_source(Arc::new(crate::ephemeral::KubeSecrets::in_cluster())),
    );
    if let Some(metrics) = crate::metrics::installed() {
        let m = Arc::clone(&mgr);
        metrics.set_state_source(Arc::new(move || state_snapshot(m.store())));
    }
    info!(state_dir = %state_dir.display(), "volume lifecycle ready; reconciling with the host");
    if let Err(e) = mgr.reconcile(Deadline::after(RECONCILE_BUDGET)).await {
        warn!(error = %e, "startup reconciliation failed; the next stage of each volume repairs it instead");
    }
    Ok(mgr)
}

/// The metrics' view of the record store: staged volumes and publish targets by protocol, and records with a
/// problem (`needs_restage`: reconciliation found the staging object broken; `quarantined`: record files that cannot
/// be read or decoded, kept and skipped by listings; `unreadable`: 1 when the store itself could not be listed).
/// Blocking: it reads every record.
pub fn state_snapshot(store: &StateStore) -> StateSnapshot {
    let mut snap = StateSnapshot::default();
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
        HostBackend::Native => match windows_host() {
            Ok(windows) => {
                let state_dir = config.state_dir();
                let host = NativeHost::new(windows, Some(&state_dir));
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
