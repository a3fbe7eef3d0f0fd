//! The floor: a trivial CSI Identity server in a separate process on a Unix socket, so one plain gRPC round
//! trip is measured on the same kind of socket, through the same tonic/hyper stack, across the same process
//! boundary as a call to the driver or from the driver to csi-proxy. With a latency, it is the host of the
//! concurrency floor (`super::relay`): each `GetPluginInfo` waits that long before it answers, as the simulator waits
//! the injected latency before each host call.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use csi::v1::identity_server::{Identity, IdentityServer};
use csi::v1::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, ProbeRequest, ProbeResponse,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::{Request, Response, Status};

use super::error::{Error, Result};

/// Upper bound for the floor server to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct Echo {
    latency: Duration,
}

#[tonic::async_trait]
impl Identity for Echo {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        Ok(Response::new(GetPluginInfoResponse {
            name: wincsi_e2e::DRIVER_NAME.to_owned(),
            vendor_version: env!("CARGO_PKG_VERSION").to_owned(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse::default()))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}

/// Tells the process that started this helper that it serves.
pub(crate) fn ready_line() -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(b"ready\n")
        .and_then(|()| out.flush())
        .map_err(Error::io("writing the ready line"))
}

/// `wincsi-bench echo-server --socket PATH [--latency-ms MS]`: binds, prints `ready`, serves until killed.
pub(crate) async fn serve(socket: &Path, latency: Duration) -> Result<()> {
    let _ = std::fs::remove_file(socket);
    let listener = tokio::net::UnixListener::bind(socket)
        .map_err(Error::io(format!("binding {}", socket.display())))?;
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    ready_line()?;
    tonic::transport::Server::builder()
        .add_service(IdentityServer::new(Echo { latency }))
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| Error::Setup(format!("floor server: {e}")))
}

/// The floor server started from this executable; killed on drop.
#[derive(Debug)]
pub(crate) struct EchoProcess {
    child: Child,
}

/// Starts `<this exe> <args>` (a helper process: the floor server, the relay) and waits for its `ready` line; the
/// child is killed on drop.
pub(crate) async fn start_helper(args: &[&std::ffi::OsStr], what: &str) -> Result<Child> {
    let exe = std::env::current_exe().map_err(Error::io("locating wincsi-bench"))?;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(Error::io(format!("starting the {what}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Setup(format!("{what} stdout not piped")))?;
    let mut lines = BufReader::new(stdout).lines();
    match tokio::time::timeout(READY_TIMEOUT, lines.next_line()).await {
        Ok(Ok(Some(l))) if l == "ready" => Ok(child),
        other => Err(Error::Setup(format!(
            "{what} did not become ready: {other:?}"
        ))),
    }
}

impl EchoProcess {
    /// Starts `<this exe> echo-server --socket socket --latency-ms ...` and waits for its ready line.
    pub(crate) async fn start(socket: &Path, latency: Duration) -> Result<EchoProcess> {
        let latency = latency.as_millis().to_string();
        let args = [
            "echo-server".as_ref(),
            "--socket".as_ref(),
            socket.as_os_str(),
            "--latency-ms".as_ref(),
            latency.as_ref(),
        ];
        let child = start_helper(&args, "floor server").await?;
        Ok(EchoProcess { child })
    }

    /// The server's pid (for its CPU time).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}
