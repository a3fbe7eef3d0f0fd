//! The gRPC server: Identity + Node on the CSI endpoint, one span per RPC, graceful shutdown.
//!
//! [`run`] registers the shutdown signals first (so a SIGTERM right after start-up is never lost
//! to the default handler), binds the endpoint, logs the `serving CSI` ready line and serves
//! until SIGTERM/Ctrl-C (Unix) or Ctrl-C/Ctrl-Break/close/shutdown (Windows). On a signal the
//! listener is closed at once and in-flight RPCs get up to [`DRAIN_TIMEOUT`] to finish.
//!
//! The HTTP health and metrics endpoints ([`crate::observability`]) start before the lifecycle and stop with the
//! server.
//!
//! Every RPC runs inside [`crate::rpc::rpc`] (one span per RPC). The lifecycle and the backend probe are built by
//! [`crate::backend`]; this module only wires services to the listener.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use csi::v1::identity_server::IdentityServer;
use csi::v1::node_server::NodeServer;
use tonic::transport::Server;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::host::HostProbe;
use crate::identity::IdentityService;
use crate::listener::Listener;
use crate::node::{NodeCore, NodeInfo, NodeService};

/// How long in-flight RPCs may run after a shutdown signal before the server stops anyway.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// The services served on the CSI endpoint.
#[derive(Debug, Clone)]
pub struct Services {
    /// Identity service.
    pub identity: IdentityService,
    /// Node service.
    pub node: NodeService,
}

impl Services {
    /// Builds the services from the configuration and a host-backend probe.
    pub fn from_config(config: &Config, probe: Arc<dyn HostProbe>) -> Self {
        Self {
            identity: IdentityService::new(config.driver_name.clone(), probe),
            node: NodeService::new(NodeCore::new(NodeInfo::from_config(config))),
        }
    }
}

/// Serves `services` on `listener` until `shutdown` completes, then lets in-flight RPCs finish
/// (bounded by [`DRAIN_TIMEOUT`]).
pub async fn serve<S>(listener: Listener, services: Services, shutdown: S) -> Result<()>
where
    S: Future<Output = ()> + Send + 'static,
{
    let draining = Arc::new(tokio::sync::Notify::new());
    let signal = {
        let draining = Arc::clone(&draining);
        async move {
            shutdown.await;
            tracing::info!("shutting down: no new connections, finishing in-flight RPCs");
            draining.notify_one();
        }
    };
    let server = Server::builder()
        .add_service(IdentityServer::new(services.identity))
        .add_service(NodeServer::new(services.node))
        .serve_with_incoming_shutdown(listener.into_incoming(), signal);
    tokio::select! {
        result = server => result.map_err(Error::from),
        () = async {
            draining.notified().await;
            tokio::time::sleep(DRAIN_TIMEOUT).await;
        } => {
            tracing::warn!(timeout_s = DRAIN_TIMEOUT.as_secs(), "in-flight RPCs did not finish in time; stopping anyway");
            Ok(())
        }
    }
}

/// Runs the node plugin: signals, bind, ready line, serve until a shutdown signal.
pub async fn run(config: Config, probe: Arc<dyn HostProbe>) -> Result<()> {
    let shutdown = imp::shutdown_signal()?;
    // `--health-address` / `--metrics-address`: bound (and metrics installed) before the lifecycle exists.
    let telemetry = crate::observability::Telemetry::start(&config)?;
    let volumes = crate::backend::lifecycle(&config).await?;
    serve_volumes(config, probe, volumes, telemetry, shutdown).await
}

/// [`run`] over a lifecycle built by the caller (the in-process e2e node gives the native backend a simulated
/// Windows host this way).
pub async fn run_with(
    config: Config,
    probe: Arc<dyn HostProbe>,
    volumes: Arc<dyn crate::lifecycle::Lifecycle>,
) -> Result<()> {
    let shutdown = imp::shutdown_signal()?;
    let telemetry = crate::observability::Telemetry::start(&config)?;
    serve_volumes(config, probe, volumes, telemetry, shutdown).await
}

async fn serve_volumes(
    config: Config,
    probe: Arc<dyn HostProbe>,
    volumes: Arc<dyn crate::lifecycle::Lifecycle>,
    telemetry: crate::observability::Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = Listener::bind(&config.endpoint)?;
    let mut services = Services::from_config(&config, probe);
    services.identity = services.identity.with_volumes(Arc::clone(&volumes));
    let background = Arc::clone(&volumes);
    services.node =
        NodeService::new(NodeCore::new(NodeInfo::from_config(&config)).with_volumes(volumes));
    // Ready before the line that says so (tests and operators read the log line as "serving"); the listener is
    // bound, so connections made meanwhile wait in its backlog.
    telemetry.set_serving();
    tracing::info!(
        endpoint = %listener.local_endpoint(),
        driver = %config.driver_name,
        node_id = %config.node_id,
        version = crate::config::build_info::VERSION,
        "serving CSI"
    );
    // The lifecycle's background work stops with the first shutdown signal, before in-flight RPCs drain.
    let shutdown = telemetry.draining_on(async move {
        shutdown.await;
        background.stop_background();
    });
    serve(listener, services, shutdown).await?;
    telemetry.stop().await;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(unix)]
mod imp {
    use std::future::Future;

    use tokio::signal::unix::{SignalKind, signal};

    use crate::error::{Error, Result};

    /// Registers SIGTERM and SIGINT now; the future completes on the first of them.
    pub(super) fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static> {
        let mut term = signal(SignalKind::terminate())
            .map_err(|e| Error::io("registering the SIGTERM handler", e))?;
        let mut int = signal(SignalKind::interrupt())
            .map_err(|e| Error::io("registering the SIGINT handler", e))?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!(signal = "SIGTERM", "received shutdown signal"),
                _ = int.recv() => tracing::info!(signal = "SIGINT", "received shutdown signal"),
            }
        })
    }
}

#[cfg(windows)]
mod imp {
    use std::future::Future;

    use tokio::signal::windows::{ctrl_break, ctrl_c, ctrl_close, ctrl_shutdown};

    use crate::error::{Error, Result};

    /// Registers the console control handlers now; the future completes on the first event.
    /// Container stop on Windows delivers CTRL_SHUTDOWN_EVENT (or CTRL_CLOSE_EVENT).
    pub(super) fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static> {
        let mut c = ctrl_c().map_err(|e| Error::io("registering the Ctrl-C handler", e))?;
        let mut brk =
            ctrl_break().map_err(|e| Error::io("registering the Ctrl-Break handler", e))?;
        let mut close = ctrl_close().map_err(|e| Error::io("registering the close handler", e))?;
        let mut shutdown =
            ctrl_shutdown().map_err(|e| Error::io("registering the shutdown handler", e))?;
        Ok(async move {
            tokio::select! {
                _ = c.recv() => tracing::info!(signal = "CTRL_C", "received shutdown signal"),
                _ = brk.recv() => tracing::info!(signal = "CTRL_BREAK", "received shutdown signal"),
                _ = close.recv() => tracing::info!(signal = "CTRL_CLOSE", "received shutdown signal"),
                _ = shutdown.recv() => tracing::info!(signal = "CTRL_SHUTDOWN", "received shutdown signal"),
            }
        })
    }
}
