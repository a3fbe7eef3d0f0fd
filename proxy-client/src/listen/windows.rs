use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::windows::named_pipe::{NamedPipeServer, PipeMode, ServerOptions};

use crate::ApiGroup;

/// Incoming connections on a named pipe; pass to
/// `tonic::transport::Server::serve_with_incoming`.
pub type NamedPipeIncoming = Pin<Box<dyn Stream<Item = io::Result<PipeConnection>> + Send>>;

/// One connected server instance of a named pipe.
#[derive(Debug)]
pub struct PipeConnection(NamedPipeServer);

impl PipeConnection {
    /// The underlying tokio pipe.
    pub fn into_inner(self) -> NamedPipeServer {
        self.0
    }
}

/// Creates the first instance of the named pipe `name` (e.g. `\\.\pipe\csi-proxy-disk-v1`) and
/// returns a stream of connected instances.
///
/// Like csi-proxy (go-winio): byte mode, remote clients rejected, and the first instance is
/// created with `FILE_FLAG_FIRST_PIPE_INSTANCE`, so this fails if another server already owns the
/// name. A fresh instance is created as soon as one is connected, so a next client never finds
/// the pipe missing. The pipe exists when this returns. Must be called inside a tokio runtime.
pub fn named_pipe(name: &str) -> io::Result<NamedPipeIncoming> {
    let first = create(name, true)
        .map_err(|err| io::Error::new(err.kind(), format!("cannot create pipe {name}: {err}")))?;
    let name = name.to_owned();
    let stream = futures::stream::unfold(State::Ready(first), move |state| {
        let name = name.clone();
        async move {
            match state {
                State::Done => None,
                State::Failed(err) => Some((Err(err), State::Done)),
                State::Ready(server) => {
                    let connected = server.connect().await;
                    let next = match create(&name, false) {
                        Ok(server) => State::Ready(server),
                        Err(err) => State::Failed(err),
                    };
                    Some((connected.map(|()| PipeConnection(server)), next))
                }
            }
        }
    });
    Ok(Box::pin(stream))
}

/// [`named_pipe`] at `<prefix>csi-proxy-<group>-<version>`, the name the client's
/// [`crate::Transport::NamedPipes`] opens.
pub fn named_pipe_for_group(prefix: &str, group: ApiGroup) -> io::Result<NamedPipeIncoming> {
    named_pipe(&crate::transport::pipe_name(prefix, group))
}

enum State {
    Ready(NamedPipeServer),
    Failed(io::Error),
    Done,
}

fn create(name: &str, first: bool) -> io::Result<NamedPipeServer> {
    ServerOptions::new()
        .first_pipe_instance(first)
        .reject_remote_clients(true)
        .pipe_mode(PipeMode::Byte)
        .create(name)
}

impl AsyncRead for PipeConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PipeConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for PipeConnection {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}
