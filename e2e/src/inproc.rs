//! The same node as [`crate::TestNode`], in one process: the simulator and the driver run as tasks of this
//! process's runtime, still talking over real sockets (or named pipes and TCP on Windows). The demo uses it
//! because `cargo run --bin wincsi-demo` builds no other binary; it reads the simulator's audit log directly.
//!
//! [`InProcessNode::start_native`] runs the driver with `--host-backend native`, its Windows facade being the
//! simulated host's Windows view (`sim::wmi::WindowsView`) injected in place of `winhost::win32::WinHost`: the same
//! server, lifecycle, protocols and native backend logic as `wincsi-node --host-backend native` on Windows. What it
//! does not cover (only a Windows node can): the binary's start-up (`WinHost::start`, its COM/WMI probe — the Wine
//! test covers the refusal path), the COM worker threads and every real WMI/Win32 call's encoding and answers, the
//! HostProcess container itself (SYSTEM token, symlink privilege, host paths), and process-level behaviour (signals,
//! a crash of the process; the matrix kills drivers in-process instead).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sim::admin::{AdminAddr, AdminClient, AdminServer, serve_admin};
use sim::wmi::WindowsView;
use sim::{HostOptions, Scenario, ServeHandle, SimHost};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use wincsi::config::Config;

use crate::error::{Error, Result};
use crate::kubelet::{CsiConn, Kubelet};
use crate::process::ProxyWiring;

/// How long the in-process driver may take to answer its first Probe.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A simulated node with the driver running in this process.
#[derive(Debug)]
pub struct InProcessNode {
    host: SimHost,
    admin: AdminClient,
    kubelet: Kubelet,
    endpoint: String,
    serving: Option<ServeHandle>,
    admin_server: Option<AdminServer>,
    driver: JoinHandle<wincsi::Result<()>>,
    _dir: TempDir,
}

impl InProcessNode {
    /// Serves `scenario`'s host, starts the driver (`wincsi::server::run`, exactly what `wincsi-node` runs) and
    /// waits (bounded connect polling) until it answers `Probe`.
    pub async fn start(scenario: &Scenario) -> Result<InProcessNode> {
        Self::start_with(scenario, false).await
    }

    /// [`InProcessNode::start`] with the native backend over the simulated host's Windows view (module docs).
    pub async fn start_native(scenario: &Scenario) -> Result<InProcessNode> {
        Self::start_with(scenario, true).await
    }

    async fn start_with(scenario: &Scenario, native: bool) -> Result<InProcessNode> {
        let dir = tempfile::Builder::new()
            .prefix("wincsi-demo-")
            .tempdir()
            .map_err(Error::io("creating a temporary directory"))?;
        let host = SimHost::new(
            scenario,
            &dir.path().join("sandbox"),
            HostOptions::default(),
        )?;
        let wiring = ProxyWiring::for_this_os(dir.path());
        let (endpoints, admin_addr) = match &wiring {
            ProxyWiring::UnixSockets(d) => (
                sim::Endpoints::UnixSockets(d.clone()),
                AdminAddr::Unix(d.join("admin.sock")),
            ),
            ProxyWiring::NamedPipes(p) => (
                sim::Endpoints::NamedPipes(p.clone()),
                "tcp:127.0.0.1:0".parse()?,
            ),
        };
        let serving = sim::serve(host.clone(), &endpoints)?;
        let admin_server = serve_admin(host.clone(), &admin_addr).await?;
        let admin = AdminClient::connect(admin_server.addr()).await?;

        let endpoint = crate::platform::inproc_endpoint(dir.path())?;
        crate::platform::prepare_endpoint(&endpoint)?;
        let config = driver_config(&endpoint, &wiring, &dir.path().join("state"), native)?;
        let driver = if native {
            let windows = Arc::new(WindowsView::new(host.clone()));
            let probe = wincsi::backend::native_probe(&config, windows.clone());
            let volumes = wincsi::backend::native_lifecycle(&config, windows)
                .await
                .map_err(|e| Error::Check(format!("native lifecycle: {e}")))?;
            tokio::spawn(wincsi::server::run_with(config, probe, volumes))
        } else {
            let probe = wincsi::backend::probe(&config);
            tokio::spawn(wincsi::server::run(config, probe))
        };
        let conn = CsiConn::connect(&endpoint)?;
        wait_until_serving(&conn, &endpoint, &driver).await?;
        let kubelet = Kubelet::new(conn, crate::DRIVER_NAME);
        Ok(InProcessNode {
            host,
            admin,
            kubelet,
            endpoint,
            serving: Some(serving),
            admin_server: Some(admin_server),
            driver,
            _dir: dir,
        })
    }

    /// The simulated host (audit log, state, invariants).
    pub fn host(&self) -> &SimHost {
        &self.host
    }

    /// An admin client of the simulated host (kubelet writes its files through it).
    pub fn admin(&self) -> &AdminClient {
        &self.admin
    }

    /// kubelet.
    pub fn kubelet(&self) -> &Kubelet {
        &self.kubelet
    }

    /// The driver's CSI endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops the driver and the simulator.
    pub async fn shutdown(mut self) {
        self.driver.abort();
        if let Some(a) = self.admin_server.take() {
            a.shutdown().await;
        }
        if let Some(s) = self.serving.take() {
            let _ = s.shutdown().await;
        }
    }
}

fn driver_config(
    endpoint: &str,
    wiring: &ProxyWiring,
    state_dir: &Path,
    native: bool,
) -> Result<Config> {
    let mut args = vec![
        "wincsi-node".to_owned(),
        "--endpoint".to_owned(),
        endpoint.to_owned(),
        "--node-id".to_owned(),
        "win-node-1".to_owned(),
        "--state-dir".to_owned(),
        state_dir.display().to_string(),
    ];
    if native {
        args.extend(["--host-backend".to_owned(), "native".to_owned()]);
    }
    match wiring {
        ProxyWiring::UnixSockets(d) => {
            args.extend(["--csi-proxy-socket-dir".to_owned(), d.display().to_string()])
        }
        ProxyWiring::NamedPipes(p) => {
            args.extend(["--csi-proxy-pipe-prefix".to_owned(), p.clone()])
        }
    }
    Config::try_parse_args(args).map_err(|e| Error::Check(format!("driver flags: {e}")))
}

async fn wait_until_serving(
    conn: &CsiConn,
    endpoint: &str,
    driver: &JoinHandle<wincsi::Result<()>>,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    loop {
        if driver.is_finished() {
            return Err(Error::Endpoint {
                endpoint: endpoint.to_owned(),
                reason: "the driver stopped while starting".into(),
            });
        }
        let mut c = conn.identity();
        if c.probe(csi::v1::ProbeRequest {}).await.is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Endpoint {
                endpoint: endpoint.to_owned(),
                reason: format!("no answer within {START_TIMEOUT:?}"),
            });
        }
        // Bounded connect polling: the in-process server prints no ready line we could wait for.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
