//! The composition root: the one place that names a concrete host backend (`--host-backend`) and builds what
//! the CSI services run on — the volume lifecycle over that backend and the backend's liveness probe.
//!
//! Everything below this module is generic over [`Host`] (monomorphised per backend, no dynamic
//! dispatch inside the lifecycle); the services above see only `Arc<dyn Lifecycle>` and `Arc<dyn HostProbe>`. The
//! backends: csi-proxy (`--host-backend csi-proxy`) and native (`--host-backend native`: Win32 + WMI in-process,
//! Windows only; its start-up check refuses a host without the Storage and SMB WMI providers).

use std::path::Path;
use std::sync::Arc;

use proxy_client::{ProxyClient, Transport};
use tracing::{info, warn};

use crate::config::{Config, HostBackend};
use crate::error::Error;
use crate::host::csi_proxy::{CsiProxyHost, CsiProxyProbe};
use crate::host::native::{FailedProbe, NativeHost, NativeProbe, windows_host};
use crate::host::{Host, HostProbe, KubeletRoot, PROBE_TIMEOUT};
use crate::iscsi::Iscsi;
use crate::lifecycle::{Lifecycle, VolumeConfig, VolumeManager};
use crate::locks::Deadline;
use crate::smb::Smb;

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

/// The probe for the configured host backend (`--host-backend`).
pub fn probe(config: &Config) -> Arc<dyn HostProbe> {
    match config.host_backend {
        HostBackend::CsiProxy => Arc::new(CsiProxyProbe::new(
            ProxyClient::new(proxy_transport(config)).with_timeout(PROBE_TIMEOUT),
        )),
        HostBackend::Native => match windows_host() {
            Ok(host) => native_probe(config, host),
            Err(why) => Arc::new(FailedProbe(why)),
        },
    }
}

/// Every protocol this driver serves: iSCSI for volumes that name a target, SMB for every other volume.
pub type Protocols = (Iscsi, Smb);

/// The volume lifecycle over host `H` with every protocol ([`Protocols`]).
pub type Manager<H> = VolumeManager<H, Protocols>;

/// A lifecycle over `host` with every protocol, keeping records in `state_dir`.
pub fn manager<H: Host>(host: H, cfg: VolumeConfig, state_dir: &Path) -> Result<Manager<H>, Error> {
    let protocols = (Iscsi::new(host.capabilities()), Smb);
    VolumeManager::new(host, protocols, cfg, state_dir)
}

/// How long startup reconciliation may take before the driver serves anyway.
pub const RECONCILE_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// Build the lifecycle the flags describe (the `--host-backend`, `--state-dir`, in-cluster Secret access for inline
/// volumes) and run startup reconciliation.
pub async fn lifecycle(config: &Config) -> Result<Arc<dyn Lifecycle>, Error> {
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(&config.kubelet_root.to_string_lossy())?,
        driver_name: config.driver_name.clone(),
    };
    match config.host_backend {
        HostBackend::CsiProxy => {
            let host = CsiProxyHost::new(ProxyClient::new(proxy_transport(config)));
            start(host, cfg, &config.state_dir()).await
        }
        HostBackend::Native => {
            let windows = windows_host().map_err(Error::FailedPrecondition)?;
            native_lifecycle(config, windows).await
        }
    }
}

/// The lifecycle over the native backend on `windows` (on Windows the process's `WinHost`; the in-process e2e node
/// passes the simulated host's Windows view).
pub async fn native_lifecycle(
    config: &Config,
    windows: Arc<dyn winhost::WindowsHost>,
) -> Result<Arc<dyn Lifecycle>, Error> {
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(&config.kubelet_root.to_string_lossy())?,
        driver_name: config.driver_name.clone(),
    };
    let state_dir = config.state_dir();
    std::fs::create_dir_all(&state_dir)
        .map_err(|e| Error::io("creating the state directory", e))?;
    start(NativeHost::new(windows, Some(&state_dir)), cfg, &state_dir).await
}

/// The probe of the native backend on `windows`.
pub fn native_probe(config: &Config, windows: Arc<dyn winhost::WindowsHost>) -> Arc<dyn HostProbe> {
    Arc::new(NativeProbe::new(
        NativeHost::new(windows, None),
        &config.kubelet_root.to_string_lossy(),
    ))
}

/// A lifecycle over `host` (one monomorphised instance per backend), reconciled with the host. A reconciliation
/// failure (e.g. csi-proxy not up yet) is logged, not fatal: stage repairs a broken staging object by itself.
async fn start<H: Host>(
    host: H,
    cfg: VolumeConfig,
    state_dir: &Path,
) -> Result<Arc<dyn Lifecycle>, Error> {
    let mgr = manager(host, cfg, state_dir)?
        .with_secret_source(Arc::new(crate::ephemeral::KubeSecrets::in_cluster()));
    info!(state_dir = %state_dir.display(), "volume lifecycle ready; reconciling with the host");
    if let Err(e) = mgr.reconcile(Deadline::after(RECONCILE_BUDGET)).await {
        warn!(error = %e, "startup reconciliation failed; the next stage of each volume repairs it instead");
    }
    Ok(Arc::new(mgr))
}
