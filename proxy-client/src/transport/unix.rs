//! Unix half of the transport: Unix sockets work, named pipes do not exist.

use std::io;
use std::path::Path;

use super::{ConnectError, ConnectFailure};

/// The byte stream a connection runs over.
pub(super) type Stream = tokio::net::UnixStream;

pub(super) async fn connect_unix(path: &Path) -> Result<Stream, ConnectError> {
    tokio::net::UnixStream::connect(path)
        .await
        .map_err(|err| ConnectError {
            endpoint: path.display().to_string(),
            reason: match err.kind() {
                io::ErrorKind::NotFound => ConnectFailure::Missing {
                    hint: "the simulated host (or csi-proxy socket bridge) is not running, \
                           or the socket directory is not mounted into this container",
                },
                io::ErrorKind::ConnectionRefused => {
                    ConnectFailure::Io(err, "a stale socket file: nothing is listening on it")
                }
                _ => ConnectFailure::Io(err, ""),
            },
        })
}

pub(super) async fn connect_pipe(name: &str) -> Result<Stream, ConnectError> {
    Err(ConnectError {
        endpoint: name.to_owned(),
        reason: ConnectFailure::Unsupported(
            "named pipes exist only on Windows; use the Unix-socket transport \
             (--csi-proxy-socket-dir) on this OS",
        ),
    })
}
