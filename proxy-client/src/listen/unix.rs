use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use crate::ApiGroup;

/// Incoming connections on a Unix socket; pass to
/// `tonic::transport::Server::serve_with_incoming`.
pub type UnixIncoming = UnixListenerStream;

/// Binds a Unix socket at `path` and returns its incoming-connection stream.
///
/// Creates the parent directory if needed and removes a stale socket file left by a previous run
/// (but refuses to remove anything that is not a socket). The socket is bound when this returns,
/// so clients may connect immediately. Must be called inside a tokio runtime.
pub fn unix_socket(path: impl AsRef<Path>) -> io::Result<UnixIncoming> {
    let path = path.as_ref();
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let listener = UnixListener::bind(path).map_err(|err| {
        io::Error::new(err.kind(), format!("cannot bind {}: {err}", path.display()))
    })?;
    Ok(UnixListenerStream::new(listener))
}

/// [`unix_socket`] at `<dir>/csi-proxy-<group>-<version>.sock`, the path the client's
/// [`crate::Transport::UnixSockets`] connects to.
pub fn unix_socket_for_group(dir: impl AsRef<Path>, group: ApiGroup) -> io::Result<UnixIncoming> {
    unix_socket(crate::transport::socket_path(dir.as_ref(), group))
}
