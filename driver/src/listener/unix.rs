//! Unix twin: AF_UNIX via tokio's `UnixListener`, TCP via tokio's `TcpListener`.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::config::Endpoint;
use crate::error::{Error, Result};

#[derive(Debug)]
pub(super) enum Listener {
    Unix(SocketFile),
    Tcp(TcpListener),
}

/// A listening AF_UNIX socket that removes its file when dropped.
#[derive(Debug)]
pub(super) struct SocketFile {
    listener: UnixListener,
    path: PathBuf,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        // Best effort: the next start removes a stale file anyway.
        let _ = std::fs::remove_file(&self.path);
    }
}

pub(super) fn bind(endpoint: &Endpoint) -> Result<(Listener, Endpoint)> {
    match endpoint {
        Endpoint::Unix(path) => {
            prepare_socket_path(path)?;
            let listener = UnixListener::bind(path)
                .map_err(|e| Error::io(format!("binding AF_UNIX socket {}", path.display()), e))?;
            Ok((
                Listener::Unix(SocketFile {
                    listener,
                    path: path.clone(),
                }),
                endpoint.clone(),
            ))
        }
        Endpoint::Tcp(addr) => {
            let std = std::net::TcpListener::bind(addr)
                .map_err(|e| Error::io(format!("binding TCP {addr}"), e))?;
            std.set_nonblocking(true)
                .map_err(|e| Error::io(format!("setting TCP {addr} non-blocking"), e))?;
            let local = std
                .local_addr()
                .map_err(|e| Error::io(format!("reading the address of TCP {addr}"), e))?;
            let listener = TcpListener::from_std(std)
                .map_err(|e| Error::io(format!("registering TCP {addr} with tokio"), e))?;
            Ok((Listener::Tcp(listener), Endpoint::Tcp(local)))
        }
    }
}

/// Checks the directory exists and removes a stale socket file at `path`.
fn prepare_socket_path(path: &Path) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| {
            Error::Internal(format!("socket path {} has no directory", path.display()))
        })?;
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(Error::io(
                format!("socket directory {} is not a directory", dir.display()),
                io::Error::from(io::ErrorKind::NotADirectory),
            ));
        }
        Err(e) => {
            return Err(Error::io(
                format!(
                    "socket directory {} does not exist or is not accessible",
                    dir.display()
                ),
                e,
            ));
        }
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("inspecting {}", path.display()), e)),
    };
    if !meta.file_type().is_socket() {
        return Err(Error::io(
            format!(
                "{} exists and is not a socket; refusing to remove it",
                path.display()
            ),
            io::Error::from(io::ErrorKind::AlreadyExists),
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(Error::io(
            format!("{} is in use by a running server", path.display()),
            io::Error::from(io::ErrorKind::AddrInUse),
        ));
    }
    tracing::info!(path = %path.display(), "removing stale socket");
    std::fs::remove_file(path)
        .map_err(|e| Error::io(format!("removing stale socket {}", path.display()), e))
}

impl Listener {
    pub(super) async fn accept(&self) -> io::Result<Stream> {
        match self {
            Self::Unix(s) => s.listener.accept().await.map(|(s, _)| Stream::Unix(s)),
            Self::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
        }
    }
}

#[derive(Debug)]
pub(super) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    pub(super) fn is_write_vectored(&self) -> bool {
        match self {
            Self::Unix(s) => s.is_write_vectored(),
            Self::Tcp(s) => s.is_write_vectored(),
        }
    }
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Unix($s) => {
                let $s = Pin::new($s);
                $e
            }
            Stream::Tcp($s) => {
                let $s = Pin::new($s);
                $e
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write_vectored(cx, bufs))
    }
}
