//! Admin transport over Unix sockets.

use std::future::Future;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;

use tokio::net::{UnixListener, UnixStream};

use super::server::{BoxRead, BoxWrite};

/// A bound admin Unix socket.
pub(super) struct UnixAdminListener(Arc<UnixListener>);

/// Binds `path`, replacing a stale socket (never another kind of file).
pub(super) fn bind_unix(path: &Path) -> io::Result<UnixAdminListener> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(UnixAdminListener(Arc::new(UnixListener::bind(path)?)))
}

impl UnixAdminListener {
    pub(super) fn accept(
        &self,
    ) -> impl Future<Output = io::Result<(BoxRead, BoxWrite)>> + Send + use<> {
        let l = self.0.clone();
        async move {
            let (s, _) = l.accept().await?;
            let (r, w) = s.into_split();
            Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite))
        }
    }
}

pub(super) async fn connect_unix(path: &Path) -> io::Result<(BoxRead, BoxWrite)> {
    let s = UnixStream::connect(path).await?;
    let (r, w) = s.into_split();
    Ok((Box::new(r), Box::new(w)))
}
