//! The death of a driver process, as the simulated host's callers must see it (issue 37: a test's "driver restart"
//! is a process death, not a dropped future).
//!
//! A test that kills its driver and starts a new one over the same host must cut everything the dead process held,
//! or work the dead process had spawned (a creating call run to its end on its own task, a facade sequence on a
//! blocking thread) goes on calling the host and writing the state directory after the restart — which a killed
//! process never does, and which can finish for the new process the work it should have found undone. A
//! [`DriverProcess`] is what such a test gives each driver process it starts:
//!
//! * **its Windows view** (native backend, [`DriverProcess::view`]): at the death no call of the process reaches the
//!   host any more, while a call already running there finishes, as a WMI method whose caller died does
//!   ([`WindowsView::kill`]);
//! * **its csi-proxy connections** ([`DriverProcess::connection`]): they break as a dead process's pipes do (the
//!   next read or write fails; no new one opens), while csi-proxy finishes a call it was running (the simulated
//!   csi-proxy runs each call on a task of its own, [`crate::SimHost::call_detached`]);
//! * **its state directory** ([`snapshot`]): the new process runs over a copy taken at the moment of death, so nothing
//!   the dead process would still write is seen.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::wmi::WindowsView;

/// One driver process of a test: what its death cuts (module docs). Cheap to clone; clones are the same process.
#[derive(Clone, Default)]
pub struct DriverProcess {
    dead: Arc<AtomicBool>,
    views: Arc<Mutex<Vec<WindowsView>>>,
}

impl std::fmt::Debug for DriverProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverProcess")
            .field("dead", &self.is_dead())
            .finish_non_exhaustive()
    }
}

impl DriverProcess {
    /// A live process.
    pub fn new() -> Self {
        Self::default()
    }

    /// `view` as this process's Windows view: it dies with the process.
    pub fn view(&self, view: WindowsView) -> WindowsView {
        self.views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(view.clone());
        view
    }

    /// `Ok` while the process lives; a dead process's error (`ConnectionReset`) once it died: to be asked before it
    /// opens anything.
    pub fn alive(&self) -> io::Result<()> {
        if self.is_dead() {
            return Err(killed());
        }
        Ok(())
    }

    /// A connection this process opens to csi-proxy (`open`): it breaks once the process is dead; a dead process
    /// opens none (`open` is not called).
    pub fn connection<S>(&self, open: impl FnOnce() -> S) -> io::Result<Mortal<S>> {
        self.alive()?;
        Ok(Mortal {
            io: open(),
            dead: Arc::clone(&self.dead),
        })
    }

    /// The flag its death sets (for a caller's own layers that must die with it).
    pub fn death_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.dead)
    }

    /// Whether the process was killed.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// The process dies (module docs); whether it was alive.
    pub fn kill(&self) -> bool {
        for view in self
            .views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
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

/// A connection of a [`DriverProcess`]: its next read or write after the process died fails, as a dead process's
/// pipe does (what the dead process could still have read is never seen by it).
#[derive(Debug)]
pub struct Mortal<S> {
    io: S,
    dead: Arc<AtomicBool>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Mortal<S> {
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

impl<S: AsyncWrite + Unpin> AsyncWrite for Mortal<S> {
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

/// Copies the state directory `from` into the empty directory `to`: what a new process finds at the old one's death
/// (a file renamed or removed while it is copied was a write finishing as the process died, and is skipped).
pub fn snapshot(from: &Path, to: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            std::fs::create_dir(&target)?;
            snapshot(&entry.path(), &target)?;
        } else {
            match std::fs::copy(entry.path(), &target) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                r => {
                    r?;
                }
            }
        }
    }
    Ok(())
}
