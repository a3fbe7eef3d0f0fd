//! Windows wiring (also under Wine, which has no AF_UNIX): the simulated host serves the real csi-proxy named
//! pipes under a unique prefix, the driver serves CSI on loopback TCP with a port the OS picks.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use tonic::transport::Channel;

use crate::error::Result;
use crate::process::ProxyWiring;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Named pipes `\\.\pipe\wincsi-e2e-<pid>-<n>\csi-proxy-<group>-<version>`: unique per node, so tests in one
/// process and concurrent test processes never collide (csi-proxy, like the simulator, refuses a taken name).
pub(crate) fn default_wiring(_workdir: &Path) -> ProxyWiring {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    ProxyWiring::NamedPipes(format!(r"\\.\pipe\wincsi-e2e-{}-{n}\", std::process::id()))
}

/// Loopback TCP, port chosen by the OS; the driver's ready line says which.
pub(crate) fn default_csi_endpoint(_workdir: &Path) -> String {
    "tcp://127.0.0.1:0".to_owned()
}

/// A lazily connecting channel to `tcp://addr`, or to `unix://C:\path\csi.sock` as kubelet connects on a real node
/// (AF_UNIX through socket2, the connected socket handed to tokio as a readiness carrier like the driver's listener;
/// Wine has no AF_UNIX, so only a real Windows host exercises this).
pub(crate) fn channel(endpoint: &str) -> Result<Channel> {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        let path = std::path::PathBuf::from(path);
        let ch = tonic::transport::Endpoint::from_static("http://localhost")
            .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move { unix_connect(&path).map(hyper_util::rt::TokioIo::new) }
            }));
        return Ok(ch);
    }
    super::tcp_channel(endpoint)
}

/// Connect an AF_UNIX stream socket (a local connect answers at once) and register it with tokio.
fn unix_connect(path: &Path) -> std::io::Result<tokio::net::TcpStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.connect(&SockAddr::unix(path)?)?;
    socket.set_nonblocking(true)?;
    tokio::net::TcpStream::from_std(std::net::TcpStream::from(socket))
}

/// Nothing to prepare for TCP.
pub(crate) fn prepare_endpoint(_endpoint: &str) -> Result<()> {
    Ok(())
}

/// The in-process driver's endpoint: a loopback port that was free a moment ago (the in-process server reports
/// no bound port, so `:0` would leave us not knowing it).
pub(crate) fn inproc_endpoint(_workdir: &Path) -> Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(crate::error::Error::io("finding a free loopback port"))?;
    let addr = l
        .local_addr()
        .map_err(crate::error::Error::io("finding a free loopback port"))?;
    Ok(format!("tcp://{addr}"))
}
