//! A driver process of the matrix, as its death must cut it (issue 37's note, item 7).
//!
//! A cell kills the driver by dropping the operation in flight and starting a new `VolumeManager`. That alone is not
//! a process death: work the dead driver spawned (a creating call run to its end on its own task,
//! `lifecycle/creation.rs`; a facade sequence on a blocking thread) would go on issuing host calls and writing its
//! state directory, which a killed process never does — natively such a task mapped a share after the restart and
//! wrote the mapping ledger the new process had already read, which left the mapping behind as "not created by
//! wincsi". So a restart here kills all three things a process holds:
//!
//! * **its Windows view** (native): no call of the dead process reaches the host any more; a call already running
//!   there finishes (`sim::wmi::WindowsView::kill`);
//! * **its csi-proxy connections**: they break as a dead process's pipes do; csi-proxy finishes a call it was
//!   running (the sim runs each call to its end, `SimHost::call_detached`);
//! * **its state directory**: the new process runs over a copy taken at the moment of death, so nothing the dead
//!   process would still write after it is seen.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use proxy_client::{ApiGroup, ProxyClient};
use sim::wmi::WindowsView;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::{Endpoint, Uri};

/// What the death of one driver process cuts.
#[derive(Clone, Default)]
pub(crate) struct Process {
    /// Its Windows view (native backend).
    view: Option<WindowsView>,
    /// Set at its death: its connections to csi-proxy break and no new one opens.
    dead: Arc<AtomicBool>,
}

impl Process {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A csi-proxy client over the sockets in `dir` whose connections die with this process.
    pub(crate) fn client(&self, dir: &Path) -> ProxyClient {
        let (dir, dead) = (dir.to_path_buf(), Arc::clone(&self.dead));
        ProxyClient::with_channel_factory(dir.display().to_string(), move |group: ApiGroup| {
            let (path, dead) = (proxy_client::socket_path(&dir, group), Arc::clone(&dead));
            Endpoint::from_static("http://localhost").connect_with_connector_lazy(
                tower::service_fn(move |_: Uri| {
                    let (path, dead) = (path.clone(), Arc::clone(&dead));
                    async move {
                        if dead.load(Ordering::SeqCst) {
                            return Err(killed());
                        }
                        let io = tokio::net::UnixStream::connect(path).await?;
                        Ok(TokioIo::new(Mortal { io, dead }))
                    }
                }),
            )
        })
    }

    /// The Windows view this process calls the simulated host through.
    pub(crate) fn view(&mut self, view: WindowsView) -> WindowsView {
        self.view = Some(view.clone());
        view
    }

    /// The process dies (module docs); whether it was alive.
    pub(crate) fn kill(&self) -> bool {
        if let Some(view) = &self.view {
            view.kill();
        }
        !self.dead.swap(true, Ordering::SeqCst)
    }
}

fn killed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "the driver process was killed",
    )
}

/// A connection of a process: it breaks once the process is dead.
struct Mortal {
    io: tokio::net::UnixStream,
    dead: Arc<AtomicBool>,
}

impl AsyncRead for Mortal {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.dead.load(Ordering::SeqCst) {
            return Poll::Ready(Err(killed()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Mortal {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.dead.load(Ordering::SeqCst) {
            return Poll::Ready(Err(killed()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A copy of the state directory `from` in a new directory: what the new process finds at the old one's death.
pub(crate) fn snapshot(from: &Path) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        for entry in std::fs::read_dir(from).expect("read the state directory") {
            let entry = entry.expect("state entry");
            let target = to.join(entry.file_name());
            if entry.file_type().expect("file type").is_dir() {
                std::fs::create_dir(&target).expect("copy a state directory");
                copy(&entry.path(), &target);
            } else {
                match std::fs::copy(entry.path(), &target) {
                    // Renamed or removed since it was listed: a write finishing as the process died.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    r => {
                        r.expect("copy a state file");
                    }
                }
            }
        }
    }
    let to = tempfile::tempdir().expect("tmp");
    copy(from, to.path());
    to
}
