//! What the integration tests that run the driver's `VolumeManager` against the in-process simulated host share:
//! one TRACE log capture per test binary, the environment (simulated host served on Unix sockets, the csi-proxy
//! adapter, a state directory), and kubelet's paths.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

pub(crate) mod backend;

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use proxy_client::{ProxyClient, Transport};
use sim::{HostOptions, Scenario, ServeHandle, SimHost};
use wincsi::Error;
use wincsi::backend::Manager;
use wincsi::host::KubeletRoot;
use wincsi::host::csi_proxy::CsiProxyHost;
use wincsi::lifecycle::{StageRequest, UnstageRequest, VolumeConfig};
use wincsi::locks::Deadline;

// ---- log capture (one TRACE subscriber for the whole test binary) ----

#[derive(Clone)]
pub(crate) struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing TRACE subscriber on first use.
pub(crate) fn logs() -> &'static Buf {
    static LOGS: OnceLock<Buf> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Buf(Arc::new(Mutex::new(Vec::new())));
        let writer = buf.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        buf
    })
}

/// Everything logged so far by this test binary.
pub(crate) fn logged_text() -> String {
    String::from_utf8_lossy(&logs().0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
}

// ---- environment ----

pub(crate) struct Env {
    pub(crate) sim: SimHost,
    pub(crate) serve: Option<ServeHandle>,
    pub(crate) socks: tempfile::TempDir,
    pub(crate) _sandbox: tempfile::TempDir,
    pub(crate) state: tempfile::TempDir,
    pub(crate) proxy: ProxyClient,
    pub(crate) mgr: Arc<Manager<CsiProxyHost>>,
}

fn manager(sim: &SimHost, proxy: &ProxyClient, state: &Path) -> Arc<Manager<CsiProxyHost>> {
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    // The node's uptime is the simulated host's, which restarts at a reboot (as the unit suites' and the matrix's):
    // the machine's own would hide every simulated reboot from the driver's boot stamps.
    let sim = sim.clone();
    let host = CsiProxyHost::new(proxy.clone()).with_uptime(Arc::new(move || Some(sim.uptime())));
    Arc::new(wincsi::backend::manager_with(host, cfg, state, ISCSI).expect("manager"))
}

/// The iSCSI settings of the suites' driver: a 500 ms settle time (`--disk-settle-time`), five times the arrival
/// delays of their scenarios ([`ARRIVAL`]) and short, because these suites run in real time.
pub(crate) const ISCSI: wincsi::iscsi::IscsiSettings = wincsi::iscsi::IscsiSettings {
    settle: Duration::from_millis(500),
};

/// The simulated host's arrival in these suites: realistic (every arrival after its delay, `Rescan` hurries nothing),
/// every delay scaled down to 100 ms so that suites running in real time stay fast.
pub(crate) const ARRIVAL: sim::Arrival = sim::Arrival::realistic(100);

impl Env {
    /// The simulated host loaded with `scenario`, served on Unix sockets, and a driver over a fresh state dir.
    pub(crate) async fn with_scenario(scenario: &Scenario) -> Self {
        logs();
        let sandbox = tempfile::tempdir().expect("tmp");
        let socks = tempfile::tempdir().expect("tmp");
        let state = tempfile::tempdir().expect("tmp");
        let sim = SimHost::new(scenario, sandbox.path(), HostOptions::default()).expect("sim");
        let serve = sim::serve_unix(sim.clone(), socks.path()).expect("serve");
        let proxy = ProxyClient::new(Transport::UnixSockets {
            dir: socks.path().to_path_buf(),
        });
        let mgr = manager(&sim, &proxy, state.path());
        Self {
            sim,
            serve: Some(serve),
            socks,
            _sandbox: sandbox,
            state,
            proxy,
            mgr,
        }
    }

    /// A killed and restarted driver: a fresh manager (and client) over the same state dir and host.
    pub(crate) fn restart(&mut self) {
        self.proxy = ProxyClient::new(Transport::UnixSockets {
            dir: self.socks.path().to_path_buf(),
        });
        self.mgr = manager(&self.sim, &self.proxy, self.state.path());
    }

    /// What kubelet does before NodeStage / NodePublish: create the parent directory.
    pub(crate) async fn kubelet_mkdir_parent(&self, path: &str) {
        let parent = path.rsplit_once('\\').expect("parent").0;
        self.proxy
            .filesystem()
            .mkdir(parent)
            .await
            .expect("kubelet mkdir");
    }

    /// NodeStageVolume as kubelet sends it (parent directory first).
    pub(crate) async fn stage(&self, req: &StageRequest) -> Result<(), Error> {
        self.kubelet_mkdir_parent(&req.staging_target_path).await;
        self.mgr.stage(req, d()).await
    }

    /// Stops serving the simulated host.
    pub(crate) async fn shutdown(&mut self) {
        if let Some(serve) = self.serve.take() {
            serve.shutdown().await.expect("shutdown");
        }
    }
}

/// A generous RPC deadline.
pub(crate) fn d() -> Deadline {
    Deadline::after(Duration::from_secs(120))
}

/// kubelet's staging path for a volume (the per-volume directory is named by the id here).
pub(crate) fn staging(id: &str) -> String {
    format!(r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount")
}

/// kubelet's publish path for a pod.
pub(crate) fn target(pod: &str) -> String {
    format!(r"C:\var\lib\kubelet\pods\{pod}\volumes\kubernetes.io~csi\pv\mount")
}

/// NodeUnstageVolume for a volume staged at [`staging`].
pub(crate) fn unstage_req(id: &str) -> UnstageRequest {
    UnstageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
    }
}

/// `calls` with every immediately repeated run of one to four calls kept once: the steps of a sequence. The waits
/// look again and again and how often depends on arrival times, so a sequence is asserted by what it does, not by
/// how many times it looked.
pub(crate) fn squeeze<T: PartialEq>(mut calls: Vec<T>) -> Vec<T> {
    let mut changed = true;
    while changed {
        changed = false;
        for len in 1..=4 {
            let mut i = 0;
            while i + 2 * len <= calls.len() {
                if calls[i..i + len] == calls[i + len..i + 2 * len] {
                    calls.drain(i + len..i + 2 * len);
                    changed = true;
                } else {
                    i += 1;
                }
            }
        }
    }
    calls
}
