//! `wincsi-sim`: serves a simulated Windows host (csi-proxy v1 API) from a scenario file.
//!
//! Prints one JSON ready line on stdout once every endpoint and the admin interface are bound, e.g.
//! `{"ready":true,"endpoints":[...],"admin":"unix:/tmp/s/admin.sock","root":"/tmp/s/sandbox"}`, then serves
//! until SIGINT/SIGTERM.

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use sim::admin::{AdminAddr, ReadyLine, serve_admin};
use sim::{CsiProxyVersion, Endpoints, HostOptions, Scenario, SimHost};

#[derive(Debug, Parser)]
#[command(
    name = "wincsi-sim",
    version,
    about = "Simulated Windows host serving the csi-proxy gRPC API"
)]
struct Args {
    /// Scenario file (JSON); an empty host when omitted.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// The csi-proxy release to play: v1.1.3, v1.2.1, v1.3.0 or master (default: the scenario's
    /// `host.csi_proxy_version`, else $WINCSI_SIM_CSI_PROXY_VERSION, else v1.1.3, the chart's default).
    #[arg(long, value_name = "VERSION")]
    csi_proxy_version: Option<CsiProxyVersion>,
    /// Serve `<DIR>/csi-proxy-<group>-<version>.sock` (Unix builds).
    #[arg(long, value_name = "DIR")]
    socket_dir: Option<PathBuf>,
    /// Serve the real named pipes instead (Windows builds).
    #[arg(long)]
    pipes: bool,
    /// Named-pipe prefix with `--pipes`.
    #[arg(long, value_name = "P", default_value = r"\\.\pipe\")]
    pipe_prefix: String,
    /// Sandbox directory for the host's drives and storage (default `<socket-dir>/sandbox`, or a temp dir); a
    /// relative path is made absolute at start.
    #[arg(long, value_name = "SANDBOX_DIR")]
    root: Option<PathBuf>,
    /// csi-proxy `-kubelet-path` (overrides the scenario).
    #[arg(long, value_name = "PATH")]
    kubelet_path: Option<String>,
    /// csi-proxy `-working-dir` (repeatable; overrides the scenario's list).
    #[arg(long = "working-dir", value_name = "PATH")]
    working_dirs: Vec<String>,
    /// csi-proxy `-require-privacy` (overrides the scenario).
    #[arg(long, value_name = "BOOL")]
    require_privacy: Option<bool>,
    /// Admin interface address: `unix:PATH` or `tcp:127.0.0.1:PORT` (default `unix:<socket-dir>/admin.sock`,
    /// or `tcp:127.0.0.1:0` with `--pipes`).
    #[arg(long, value_name = "ADDR")]
    admin: Option<String>,
    /// Also serve the host's Windows view (the native backend's facade) at ADDR: `unix:PATH` or
    /// `tcp:127.0.0.1:PORT` (port 0: any; the ready line's `windows` says which), for a test build of
    /// `wincsi-node --host-backend native --test-windows-socket ADDR` (sim/README.md).
    #[arg(long, value_name = "ADDR")]
    windows_socket: Option<String>,
    /// Log level (error, warn, info, debug, trace); logs go to stderr.
    #[arg(long, default_value = "info")]
    log_level: String,
}

fn fail(msg: impl std::fmt::Display) -> ! {
    let _ = writeln!(std::io::stderr(), "wincsi-sim: {msg}");
    std::process::exit(1)
}

fn main() {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|e| fail(format_args!("--log-level: {e}")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(format_args!("cannot start the runtime: {e}")));
    if let Err(e) = rt.block_on(run(args)) {
        fail(e);
    }
}

async fn run(args: Args) -> sim::Result<()> {
    let endpoints = match (&args.socket_dir, args.pipes) {
        (_, true) => Endpoints::NamedPipes(args.pipe_prefix.clone()),
        (Some(dir), false) => Endpoints::UnixSockets(dir.clone()),
        (None, false) => fail("one of --socket-dir DIR or --pipes is required"),
    };
    let scenario = match &args.scenario {
        Some(p) => Scenario::from_file(p)?,
        None => Scenario::default(),
    };
    let root = match (&args.root, &args.socket_dir) {
        (Some(r), _) => r.clone(),
        (None, Some(d)) => d.join("sandbox"),
        (None, None) => std::env::temp_dir().join(format!("wincsi-sim-{}", std::process::id())),
    };
    let opts = HostOptions {
        csi_proxy_version: args.csi_proxy_version,
        kubelet_path: args.kubelet_path.clone(),
        working_dirs: args.working_dirs.clone(),
        require_privacy: args.require_privacy,
        emulate_links: false,
    };
    let host = SimHost::new(&scenario, &root, opts)?;
    let admin_addr: AdminAddr = match (&args.admin, &args.socket_dir, args.pipes) {
        (Some(a), _, _) => a.parse()?,
        (None, Some(d), false) => AdminAddr::Unix(d.join("admin.sock")),
        _ => "tcp:127.0.0.1:0".parse()?,
    };
    let serving = sim::serve(host.clone(), &endpoints)?;
    let admin = serve_admin(host.clone(), &admin_addr).await?;
    let windows = match &args.windows_socket {
        Some(a) => {
            let addr: sim::wmi::remote::Address = a
                .parse()
                .map_err(|e| sim::Error::Admin(format!("--windows-socket {e}")))?;
            let view = sim::wmi::WindowsView::new(host.clone());
            let server = sim::wmi::remote::serve(view, &addr)
                .map_err(|e| sim::Error::Admin(format!("--windows-socket {addr}: {e}")))?;
            Some(server)
        }
        None => None,
    };
    let ready = ReadyLine {
        ready: true,
        endpoints: serving.endpoints().to_vec(),
        admin: admin.addr().to_string(),
        // Absolute (canonical on Unix) even when --root was relative: the sandbox's links are made from it.
        root: host.root().to_path_buf(),
        windows: windows.as_ref().map(|w| w.address().to_string()),
    };
    let line = serde_json::to_string(&ready).map_err(|e| sim::Error::Admin(e.to_string()))?;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
    tracing::info!(admin = %admin.addr(), csi_proxy = %host.csi_proxy_version(), "wincsi-sim ready");
    shutdown_signal().await;
    tracing::info!("shutting down");
    host.release_hangs();
    if let Some(w) = windows {
        w.stop();
    }
    admin.shutdown().await;
    serving.shutdown().await
}

#[cfg(unix)]
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(windows)]
async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
