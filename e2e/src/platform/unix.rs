//! Unix wiring: the simulated host serves csi-proxy on Unix sockets, the driver serves CSI on a Unix socket.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::error::{Error, Result};
use crate::process::ProxyWiring;

/// csi-proxy over Unix sockets in `<workdir>/proxy`.
pub(crate) fn default_wiring(workdir: &Path) -> ProxyWiring {
    ProxyWiring::UnixSockets(workdir.join("proxy"))
}

/// CSI on `<workdir>/plugin/csi.sock`, as the DaemonSet's plugin directory would hold it.
pub(crate) fn default_csi_endpoint(workdir: &Path) -> String {
    format!(
        "unix://{}",
        workdir.join("plugin").join("csi.sock").display()
    )
}

/// A lazily connecting channel to `unix:///path` or `tcp://addr`.
pub(crate) fn channel(endpoint: &str) -> Result<Channel> {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        let path = PathBuf::from(path);
        // The URI is ignored by the connector; tonic needs one for the :authority header.
        let ch = Endpoint::from_static("http://localhost").connect_with_connector_lazy(
            tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    tokio::net::UnixStream::connect(path)
                        .await
                        .map(TokioIo::new)
                }
            }),
        );
        return Ok(ch);
    }
    super::tcp_channel(endpoint)
}

/// Ensures the directory that will hold the CSI socket exists.
pub(crate) fn prepare_endpoint(endpoint: &str) -> Result<()> {
    if let Some(path) = endpoint.strip_prefix("unix://")
        && let Some(parent) = Path::new(path).parent()
    {
        std::fs::create_dir_all(parent)
            .map_err(Error::io(format!("creating {}", parent.display())))?;
    }
    Ok(())
}

/// The in-process driver's endpoint: the same Unix socket path as for a process.
pub(crate) fn inproc_endpoint(workdir: &Path) -> Result<String> {
    Ok(default_csi_endpoint(workdir))
}
