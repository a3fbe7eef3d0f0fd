//! Admin transport on Windows: no AF_UNIX support in tokio (and none under Wine), so only TCP is available.

use std::future::Future;
use std::io;
use std::path::Path;

use super::server::{BoxRead, BoxWrite};

/// Never constructed: binding a Unix admin socket fails on Windows.
pub(super) struct UnixAdminListener(());

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "Unix admin sockets are not supported on Windows; use tcp:127.0.0.1:0",
    )
}

pub(super) fn bind_unix(_path: &Path) -> io::Result<UnixAdminListener> {
    Err(unsupported())
}

impl UnixAdminListener {
    pub(super) fn accept(
        &self,
    ) -> impl Future<Output = io::Result<(BoxRead, BoxWrite)>> + Send + use<> {
        async { Err(unsupported()) }
    }
}

pub(super) async fn connect_unix(_path: &Path) -> io::Result<(BoxRead, BoxWrite)> {
    Err(unsupported())
}
