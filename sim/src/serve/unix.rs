use std::path::Path;

use proxy_client::{ApiGroup, listen};

use super::{Bound, ServeHandle, spawn_all};
use crate::error::{Error, Result};
use crate::host::SimHost;

/// Serves all six groups on `<dir>/csi-proxy-<group>-<version>.sock` (stale sockets replaced, `dir` created).
/// Every socket is bound when this returns. Must be called inside a tokio runtime.
pub fn serve_unix(host: SimHost, dir: impl AsRef<Path>) -> Result<ServeHandle> {
    let dir = dir.as_ref();
    let mut bound = Vec::new();
    for group in ApiGroup::ALL {
        let path = proxy_client::socket_path(dir, group);
        let incoming = listen::unix_socket(&path).map_err(|source| Error::Serve {
            what: path.display().to_string(),
            source,
        })?;
        let (again, gone) = (path.clone(), path.clone());
        bound.push(Bound {
            group,
            endpoint: path.display().to_string(),
            incoming,
            rebind: Box::new(move || listen::unix_socket(&again)),
            unbind: Box::new(move || {
                let _ = std::fs::remove_file(&gone);
                Box::pin(std::future::ready(()))
            }),
        });
    }
    Ok(spawn_all(&host, bound))
}

pub(super) fn serve_endpoints(host: SimHost, endpoints: &super::Endpoints) -> Result<ServeHandle> {
    match endpoints {
        super::Endpoints::UnixSockets(dir) => serve_unix(host, dir),
        super::Endpoints::NamedPipes(_) => Err(super::unsupported("named pipes")),
    }
}
