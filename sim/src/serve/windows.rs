use proxy_client::{ApiGroup, listen};
use tokio::net::windows::named_pipe::ClientOptions;

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
        let (again, gone) = (name.clone(), name.clone());
        bound.push(Bound {
            group,
            endpoint: name,
            incoming,
            rebind: Box::new(move || listen::named_pipe(&again)),
            // The pipe disappears with its last instance: the listener is dropped and connections are killed, but
            // the listening instance's handle closes only once the runtime has seen its cancelled connect complete.
            unbind: Box::new(move || Box::pin(pipe_gone(gone.clone()))),
        });
    }
    Ok(spawn_all(&host, bound))
}

/// Resolves once no instance of the pipe `name` accepts a client.
///
/// Dropping a tokio pipe server with a connect in flight cancels the connect; mio closes the handle only when the
/// cancellation's completion comes back through the runtime, so for a moment the instance still listens (a client
/// opening the name then connects to it). The answer to a probe open says whether an instance is left: not found
/// means gone; an instance that answers or is busy is waited out, one runtime turn at a time (`yield_now` lets the
/// I/O driver deliver completions first). Bounded: a pipe still there after that many turns is reported and left.
async fn pipe_gone(name: String) {
    const ERROR_FILE_NOT_FOUND: i32 = 2;
    const ERROR_PIPE_BUSY: i32 = 231;
    const TURNS: u32 = 10_000;
    for _ in 0..TURNS {
        match ClientOptions::new().open(&name) {
            Err(e) if e.raw_os_error() == Some(ERROR_FILE_NOT_FOUND) => return,
            // Connected to the closing instance (our handle is dropped at once) or every instance busy.
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY) => {}
            Err(e) => {
                tracing::debug!(pipe = %name, error = %e, "probing a pipe that should be gone");
                return;
            }
        }
        tokio::task::yield_now().await;
    }
    tracing::warn!(pipe = %name, turns = TURNS, "a pipe instance outlived csi-proxy");
}

pub(super) fn serve_endpoints(host: SimHost, endpoints: &super::Endpoints) -> Result<ServeHandle> {
    match endpoints {
        super::Endpoints::NamedPipes(prefix) => serve_pipes(host, prefix),
        super::Endpoints::UnixSockets(_) => Err(super::unsupported("Unix sockets")),
    }
}
