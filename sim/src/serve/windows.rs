use proxy_client::{ApiGroup, listen};

use super::{Bound, ServeHandle, spawn_all};
use crate::error::{Error, Result};
use crate::host::SimHost;

/// Serves all six groups on the named pipes `<prefix>csi-proxy-<group>-<version>` (default prefix `\\.\pipe\`).
/// Every pipe exists when this returns; like csi-proxy, it fails if another server owns a name. Must be called
/// inside a tokio runtime.
pub fn serve_pipes(host: SimHost, prefix: &str) -> Result<ServeHandle> {
    let mut bound = Vec::new();
    for group in ApiGroup::ALL {
        let name = proxy_client::pipe_name(prefix, group);
        let incoming = listen::named_pipe(&name).map_err(|source| Error::Serve {
            what: name.clone(),
            source,
        })?;
        let again = name.clone();
        bound.push(Bound {
            group,
            endpoint: name,
            incoming,
            rebind: Box::new(move || listen::named_pipe(&again)),
            // The pipe disappears with its last instance (the listener is dropped, connections are killed).
            unbind: Box::new(|| {}),
        });
    }
    Ok(spawn_all(&host, bound))
}

pub(super) fn serve_endpoints(host: SimHost, endpoints: &super::Endpoints) -> Result<ServeHandle> {
    match endpoints {
        super::Endpoints::NamedPipes(prefix) => serve_pipes(host, prefix),
        super::Endpoints::UnixSockets(_) => Err(super::unsupported("Unix sockets")),
    }
}
