//! Platform twins: how the simulated host and the driver are wired together on this OS.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

use tonic::transport::{Channel, Endpoint};

use crate::error::{Error, Result};

/// A lazily connecting channel to `tcp://127.0.0.1:PORT`.
pub(crate) fn tcp_channel(endpoint: &str) -> Result<Channel> {
    let bad = |reason: String| Error::Endpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let addr = endpoint
        .strip_prefix("tcp://")
        .ok_or_else(|| bad("expected unix:// or tcp://".to_owned()))?;
    let ep = Endpoint::from_shared(format!("http://{addr}")).map_err(|e| bad(e.to_string()))?;
    Ok(ep.connect_lazy())
}
