//! The CSI endpoint listener: one API over platform twins.
//!
//! [`Listener::bind`] binds the `--endpoint` and [`Listener::into_incoming`] turns it into the
//! connection stream tonic's `serve_with_incoming_shutdown` consumes.
//!
//! * `unix.rs`: AF_UNIX through tokio's `UnixListener`; TCP through tokio's `TcpListener`.
//! * `windows.rs`: tokio has no AF_UNIX on Windows, so the socket is created, bound and accepted
//!   with socket2 and handed to tokio as a `TcpStream` used purely as an IOCP/AFD readiness
//!   carrier. `tcp://` endpoints go through the same adapter (AF_INET), which is how the adapter
//!   is tested under Wine (Wine has no AF_UNIX).
//!
//! For socket paths, both twins fail with a clear error if the directory is missing and remove a
//! stale socket file before binding (a socket that still accepts connections is left alone, so
//! a second instance cannot steal a live endpoint). The socket file is removed again when the
//! listener is dropped.
//!
//! Every accepted connection of either twin is read through [`h2_inbound::AuthorityFix`], which repairs the HTTP/2
//! `:authority` that gRPC clients other than Go's send for `unix:` targets (a socket path the HTTP/2 server would
//! reset the stream for), so every conforming gRPC client is served.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use h2_inbound::AuthorityFix;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::Endpoint;
use crate::error::Result;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as imp;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as imp;

/// A bound CSI endpoint.
#[derive(Debug)]
pub struct Listener {
    inner: imp::Listener,
    local: Endpoint,
}

impl Listener {
    /// Binds `endpoint`. Must be called inside a tokio runtime.
    ///
    /// Errors name the path or address and what failed (missing directory, path in use by a
    /// live server, not a socket, permission denied, address family unsupported, ...).
    pub fn bind(endpoint: &Endpoint) -> Result<Self> {
        let (inner, local) = imp::bind(endpoint)?;
        Ok(Self { inner, local })
    }

    /// The endpoint actually bound (`tcp://127.0.0.1:0` resolves to the chosen port).
    pub fn local_endpoint(&self) -> &Endpoint {
        &self.local
    }

    /// Waits for the next connection.
    pub async fn accept(&self) -> io::Result<Connection> {
        self.inner
            .accept()
            .await
            .map(|s| Connection(AuthorityFix::new(s)))
    }

    /// The stream of accepted connections, for `serve_with_incoming_shutdown`.
    ///
    /// Accept errors are logged and yielded (tonic skips them). After an error that is not
    /// about a single aborted connection (e.g. out of file descriptors) the stream pauses
    /// briefly so a persistent condition cannot spin a core.
    pub fn into_incoming(self) -> impl Stream<Item = io::Result<Connection>> + Send + 'static {
        futures::stream::unfold(self, |listener| async move {
            let next = listener.accept().await;
            if let Err(e) = &next {
                tracing::warn!(error = %e, endpoint = %listener.local, "accepting a CSI connection failed");
                if !matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::Interrupted
                ) {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
            Some((next, listener))
        })
    }
}

/// An accepted CSI connection.
#[derive(Debug)]
pub struct Connection(AuthorityFix<imp::Stream>);

/// Connection info exposed to tonic (none: peers are local by construction).
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectionInfo;

impl tonic::transport::server::Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    // Deliberately no peer_addr(): on Windows the stream is a readiness carrier for a socket
    // that may not be AF_INET.
    fn connect_info(&self) -> Self::ConnectInfo {
        ConnectionInfo
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
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

    fn is_write_vectored(&self) -> bool {
        self.0.get_ref().is_write_vectored()
    }
}
