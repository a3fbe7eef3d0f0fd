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

/// A lazily connecting channel to `tcp://addr`.
pub(crate) fn channel(endpoint: &str) -> Result<Channel> {
    super::tcp_channel(endpoint)
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
