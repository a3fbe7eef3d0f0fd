//! Windows twin: AF_UNIX (and loopback TCP) through a socket2 + tokio readiness-carrier adapter.
//!
//! tokio/mio have no AF_UNIX on Windows, and std's Windows `UnixListener` is nightly-only. The
//! socket is therefore created, bound, listened on and accepted with socket2, set non-blocking,
//! and handed to tokio as a `TcpStream` that serves purely as an IOCP/AFD readiness carrier:
//! AFD readiness and `recv`/`send` do not depend on the address family. Nothing here calls
//! `peer_addr`, `local_addr` or `set_nodelay` on a carrier, which would fail for AF_UNIX.
//! Accepting uses `async_io(Interest::READABLE, ..)` so a `WouldBlock` from socket2's `accept`
//! re-arms readiness instead of spinning.
//!
//! `tcp://` endpoints use the same adapter with AF_INET: that is what the Wine test exercises,
//! since Wine has no AF_UNIX.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use socket2::{Domain, SockAddr, SockRef, Socket, Type};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::config::Endpoint;
use crate::error::{Error, Result};

/// Pending-connection queue length (Windows caps it at SOMAXCONN anyway).
const BACKLOG: i32 = 128;

#[derive(Debug)]
pub(super) struct Listener {
    /// The listening socket, registered with tokio only for readiness.
    carrier: TcpStream,
    /// AF_UNIX socket file to remove on drop.
    socket_path: Option<PathBuf>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(path) = &self.socket_path {
            // Best effort: the next start removes a stale file anyway.
            let _ = std::fs::remove_file(path);
        }
    }
}

pub(super) fn bind(endpoint: &Endpoint) -> Result<(Listener, Endpoint)> {
    match endpoint {
        Endpoint::Unix(path) => {
            let what = format!("AF_UNIX socket {}", path.display());
            prepare_socket_path(path)?;
            let addr = SockAddr::unix(path)
                .map_err(|e| Error::io(format!("{what}: invalid socket path"), e))?;
            let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(|e| {
                Error::io(
                    format!("creating {what} (AF_UNIX needs Windows 10 1803 or later)"),
                    e,
                )
            })?;
            let carrier = listen(socket, &addr, &what)?;
            Ok((
                Listener {
                    carrier,
                    socket_path: Some(path.clone()),
                },
                endpoint.clone(),
            ))
        }
        Endpoint::Tcp(addr) => {
            let what = format!("TCP {addr}");
            let socket = Socket::new(Domain::for_address(*addr), Type::STREAM, None)
                .map_err(|e| Error::io(format!("creating {what}"), e))?;
            let sock_addr = SockAddr::from(*addr);
            // Read the real port before the socket becomes a carrier.
            socket
                .bind(&sock_addr)
                .map_err(|e| Error::io(format!("binding {what}"), e))?;
            let local = socket
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .ok_or_else(|| Error::Internal(format!("reading the bound address of {what}")))?;
            let carrier = listen_bound(socket, &what)?;
            Ok((
                Listener {
                    carrier,
                    socket_path: None,
                },
                Endpoint::Tcp(local),
            ))
        }
    }
}

fn listen(socket: Socket, addr: &SockAddr, what: &str) -> Result<TcpStream> {
    socket
        .bind(addr)
        .map_err(|e| Error::io(format!("binding {what}"), e))?;
    listen_bound(socket, what)
}

fn listen_bound(socket: Socket, what: &str) -> Result<TcpStream> {
    socket
        .listen(BACKLOG)
        .map_err(|e| Error::io(format!("listening on {what}"), e))?;
    into_carrier(socket).map_err(|e| Error::io(format!("registering {what} with tokio"), e))
}

/// Hands a socket to tokio as a readiness carrier.
fn into_carrier(socket: Socket) -> io::Result<TcpStream> {
    socket.set_nonblocking(true)?;
    TcpStream::from_std(std::net::TcpStream::from(socket))
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
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("inspecting {}", path.display()), e)),
        // AF_UNIX socket files are reparse points; std cannot tell them from files, but a
        // directory is certainly not ours.
        Ok(meta) if meta.is_dir() => Err(Error::io(
            format!("{} exists and is a directory", path.display()),
            io::Error::from(io::ErrorKind::AlreadyExists),
        )),
        Ok(_) => {
            if is_live(path) {
                return Err(Error::io(
                    format!("{} is in use by a running server", path.display()),
                    io::Error::from(io::ErrorKind::AddrInUse),
                ));
            }
            tracing::info!(path = %path.display(), "removing stale socket");
            std::fs::remove_file(path)
                .map_err(|e| Error::io(format!("removing stale socket {}", path.display()), e))
        }
    }
}

/// Whether something accepts connections on the AF_UNIX socket at `path` (blocking connect on
/// a local socket: answers at once).
fn is_live(path: &Path) -> bool {
    let Ok(addr) = SockAddr::unix(path) else {
        return false;
    };
    Socket::new(Domain::UNIX, Type::STREAM, None)
        .and_then(|s| s.connect(&addr))
        .is_ok()
}

impl Listener {
    pub(super) async fn accept(&self) -> io::Result<Stream> {
        let socket = self
            .carrier
            .async_io(Interest::READABLE, || {
                SockRef::from(&self.carrier).accept().map(|(s, _)| s)
            })
            .await?;
        into_carrier(socket).map(Stream)
    }
}

/// An accepted connection; the `TcpStream` is only a readiness carrier.
#[derive(Debug)]
pub(super) struct Stream(TcpStream);

impl Stream {
    pub(super) fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    // TcpStream's shutdown is `shutdown(SD_SEND)`, valid for any stream socket.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }
}
