//! Serving a [`SimHost`] over the csi-proxy endpoints: one gRPC server per API group, each on its own Unix socket
//! (`<dir>/csi-proxy-<group>-<version>.sock`, any OS with AF_UNIX) or Windows named pipe
//! (`<prefix>csi-proxy-<group>-<version>`), registering only that group's service under its exact name.

#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

#[cfg(unix)]
use unix::serve_endpoints;
#[cfg(unix)]
pub use unix::serve_unix;
#[cfg(windows)]
use windows::serve_endpoints;
#[cfg(windows)]
pub use windows::serve_pipes;

use futures::Stream;
use proxy_client::ApiGroup;
use proxy_client::proto::{
    disk_v1, filesystem_v1, iscsi_v1alpha2, smb_v1, system_v1alpha1, volume_v1,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tonic::transport::server::Connected;

use crate::error::{Error, Result};
use crate::grpc::{
    DiskService, FilesystemService, IscsiService, SmbService, SystemService, VolumeService,
};
use crate::host::SimHost;

/// Where to serve the six groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoints {
    /// Unix sockets `<dir>/csi-proxy-<group>-<version>.sock` (not available on Windows builds).
    UnixSockets(std::path::PathBuf),
    /// Named pipes `<prefix>csi-proxy-<group>-<version>` (Windows builds only).
    NamedPipes(String),
}

/// Serves the six groups on `endpoints`; fails with an `Unsupported` error for a transport the platform lacks.
/// Must be called inside a tokio runtime.
pub fn serve(host: SimHost, endpoints: &Endpoints) -> Result<ServeHandle> {
    serve_endpoints(host, endpoints)
}

pub(crate) fn unsupported(what: &str) -> Error {
    Error::Serve {
        what: what.to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "not available on this platform",
        ),
    }
}

/// Running servers for the six groups. Dropping the handle leaves them running until the runtime stops; call
/// [`ServeHandle::shutdown`] for a graceful stop.
#[derive(Debug)]
pub struct ServeHandle {
    endpoints: Vec<String>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<std::result::Result<(), tonic::transport::Error>>>,
}

impl ServeHandle {
    /// The socket paths or pipe names being served, in [`ApiGroup::ALL`] order.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Stops accepting connections, lets in-flight calls finish, and waits for the servers to exit.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        for t in self.tasks {
            match t.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(Error::Admin(format!("gRPC server failed: {e}"))),
                Err(e) => return Err(Error::Admin(format!("gRPC server task failed: {e}"))),
            }
        }
        Ok(())
    }
}

/// Builds a handle from already-bound incoming streams, spawning one server per group.
pub(crate) fn spawn_all<I, IO, IE>(host: &SimHost, bound: Vec<(ApiGroup, String, I)>) -> ServeHandle
where
    I: Stream<Item = std::result::Result<IO, IE>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let (stop, _) = watch::channel(false);
    let mut endpoints = Vec::new();
    let mut tasks = Vec::new();
    for (group, endpoint, incoming) in bound {
        let mut builder = Server::builder();
        let h = host.clone();
        let router = match group {
            ApiGroup::Disk => {
                builder.add_service(disk_v1::disk_server::DiskServer::new(DiskService(h)))
            }
            ApiGroup::Volume => builder.add_service(volume_v1::volume_server::VolumeServer::new(
                VolumeService(h),
            )),
            ApiGroup::Filesystem => builder.add_service(
                filesystem_v1::filesystem_server::FilesystemServer::new(FilesystemService(h)),
            ),
            ApiGroup::Smb => builder.add_service(smb_v1::smb_server::SmbServer::new(SmbService(h))),
            ApiGroup::Iscsi => builder.add_service(iscsi_v1alpha2::iscsi_server::IscsiServer::new(
                IscsiService(h),
            )),
            ApiGroup::System => builder.add_service(
                system_v1alpha1::system_server::SystemServer::new(SystemService(h)),
            ),
        };
        let mut rx = stop.subscribe();
        let shutdown = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        tracing::debug!(%endpoint, service = group.service_name(), "serving");
        endpoints.push(endpoint);
        tasks.push(tokio::spawn(
            router.serve_with_incoming_shutdown(incoming, shutdown),
        ));
    }
    ServeHandle {
        endpoints,
        stop,
        tasks,
    }
}
