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

use std::path::Path;

use hyper_util::rt::TokioIo;
use proxy_client::{ApiGroup, ProxyClient};
use sim::process::DriverProcess;
use sim::wmi::WindowsView;
use tonic::transport::{Endpoint, Uri};

/// What the death of one driver process cuts: the simulated host's model of it (`sim::process`), shared with the unit
/// suites' restart (`testing.rs`).
#[derive(Clone, Default)]
pub(crate) struct Process(DriverProcess);

impl Process {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A csi-proxy client over the sockets in `dir` whose connections die with this process.
    pub(crate) fn client(&self, dir: &Path) -> ProxyClient {
        let (dir, process) = (dir.to_path_buf(), self.0.clone());
        ProxyClient::with_channel_factory(dir.display().to_string(), move |group: ApiGroup| {
            let (path, process) = (proxy_client::socket_path(&dir, group), process.clone());
            Endpoint::from_static("http://localhost").connect_with_connector_lazy(
                tower::service_fn(move |_: Uri| {
                    let (path, process) = (path.clone(), process.clone());
                    async move {
                        process.alive()?;
                        let io = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(TokioIo::new(process.connection(|| io)?))
                    }
                }),
            )
        })
    }

    /// The Windows view this process calls the simulated host through.
    pub(crate) fn view(&mut self, view: WindowsView) -> WindowsView {
        self.0.view(view)
    }

    /// The process dies (module docs); whether it was alive.
    pub(crate) fn kill(&self) -> bool {
        self.0.kill()
    }
}

/// A copy of the state directory `from` in a new directory: what the new process finds at the old one's death.
pub(crate) fn snapshot(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("tmp");
    sim::process::snapshot(from, to.path()).expect("copy the state directory");
    to
}
