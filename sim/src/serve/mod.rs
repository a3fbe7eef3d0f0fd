//! Serving a [`SimHost`] over the csi-proxy endpoints: one gRPC server per API group, each on its own Unix socket
//! (`<dir>/csi-proxy-<group>-<version>.sock`, any OS with AF_UNIX) or Windows named pipe
//! (`<prefix>csi-proxy-<group>-<version>`), registering only that group's service under its exact name.
//!
//! The endpoints follow the simulated csi-proxy process ([`crate::ProxyStatus`]): when it dies every connection
//! drops and every socket or pipe disappears (clients see "not found"), and they come back when it is restarted.
//!
//! Every connection is read through `grpc_go.rs` (the `:authority` repair and the client's settings; answers over
//! the client's header-list limit reset like csi-proxy's grpc-go server does), and counted per group so a test can
//! silence the ones open now (`silence.rs`).

pub(crate) mod grpc_go;
mod silence;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

pub(crate) use silence::ConnectionLog;

#[cfg(unix)]
use unix::serve_endpoints;
#[cfg(unix)]
pub use unix::serve_unix;
#[cfg(windows)]
use windows::serve_endpoints;
#[cfg(windows)]
pub use windows::serve_pipes;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use proxy_client::ApiGroup;
use proxy_client::proto::{
    disk_v1, filesystem_v1, iscsi_v1alpha2, smb_v1, system_v1alpha1, volume_v1,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tonic::transport::server::Connected;

use crate::error::{Error, Result};
use crate::grpc::{
    DiskService, FilesystemService, IscsiService, SmbService, SystemService, VolumeService,
};
use crate::host::{ProxyStatus, SimHost};

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

/// Makes an endpoint exist again after csi-proxy restarts.
pub(crate) type Rebind<I> = Box<dyn FnMut() -> std::io::Result<I> + Send>;
/// Makes an endpoint disappear when csi-proxy dies (e.g. removes a Unix socket file); resolves once it is gone.
pub(crate) type Unbind = Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// One group's endpoint: its name, the stream bound at start, and how to re-create and remove it.
pub(crate) struct Bound<I> {
    pub(crate) group: ApiGroup,
    pub(crate) endpoint: String,
    pub(crate) incoming: I,
    pub(crate) rebind: Rebind<I>,
    pub(crate) unbind: Unbind,
}

/// Builds a handle from already-bound incoming streams, spawning one supervised server per group. While
/// csi-proxy runs, each group is served; when it dies (or restarts) every connection of the old process drops,
/// the endpoint is removed, and it is re-created when csi-proxy runs again.
pub(crate) fn spawn_all<I, IO, IE>(host: &SimHost, bound: Vec<Bound<I>>) -> ServeHandle
where
    I: Stream<Item = std::result::Result<IO, IE>> + Send + Unpin + 'static,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let (stop, _) = watch::channel(false);
    let mut endpoints = Vec::new();
    let mut tasks = Vec::new();
    for b in bound {
        tracing::debug!(endpoint = %b.endpoint, service = b.group.service_name(), "serving");
        host.set_endpoint_state(&b.endpoint, Some(host.csi_proxy_status().generation));
        endpoints.push(b.endpoint.clone());
        tasks.push(tokio::spawn(supervise(host.clone(), b, stop.subscribe())));
    }
    ServeHandle {
        endpoints,
        stop,
        tasks,
    }
}

fn router(
    group: ApiGroup,
    h: SimHost,
) -> tonic::transport::server::Router<
    tower::layer::util::Stack<grpc_go::HeaderLimitLayer, tower::layer::util::Identity>,
> {
    let mut builder = Server::builder().layer(grpc_go::HeaderLimitLayer);
    match group {
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
        ApiGroup::System => builder.add_service(system_v1alpha1::system_server::SystemServer::new(
            SystemService(h),
        )),
    }
}

/// Serves one group for as long as the handle lives, following the csi-proxy process's life.
async fn supervise<I, IO, IE>(
    host: SimHost,
    mut b: Bound<I>,
    mut stop: watch::Receiver<bool>,
) -> std::result::Result<(), tonic::transport::Error>
where
    I: Stream<Item = std::result::Result<IO, IE>> + Send + Unpin + 'static,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let mut first = Some(b.incoming);
    let mut proxy = host.watch_csi_proxy();
    loop {
        // Wait for a running csi-proxy (or the end).
        let generation = tokio::select! {
            _ = stop.wait_for(|s| *s) => {
                host.forget_endpoint(&b.endpoint);
                return Ok(());
            }
            p = proxy.wait_for(|p| p.running) => match p {
                Ok(p) => p.generation,
                Err(_) => return Ok(()),
            },
        };
        let incoming = match first.take() {
            Some(i) => i,
            None => match (b.rebind)() {
                Ok(i) => i,
                Err(e) => {
                    tracing::warn!(endpoint = %b.endpoint, error = %e, "cannot re-create the endpoint");
                    tokio::select! {
                        _ = stop.wait_for(|s| *s) => {
                            host.forget_endpoint(&b.endpoint);
                            return Ok(());
                        }
                        _ = proxy.wait_for(|p| p.generation != generation) => continue,
                    }
                }
            },
        };
        host.set_endpoint_state(&b.endpoint, Some(generation));
        let watch = host.watch_csi_proxy();
        let live = Live::new();
        let conns = Arc::clone(&live);
        let (log, group) = (host.clone(), b.group);
        let incoming = incoming.map(move |r| {
            r.map(|io| {
                let serial = log.connection_log().accepted(group);
                KillableIo::new(
                    grpc_go::ClientIo::new(io),
                    watch.clone(),
                    generation,
                    Live::guard(&conns),
                    Silence {
                        host: log.clone(),
                        group,
                        serial,
                    },
                )
            })
        });
        let mut stop2 = stop.clone();
        let mut proxy2 = host.watch_csi_proxy();
        let shutdown = async move {
            tokio::select! {
                _ = stop2.wait_for(|s| *s) => {}
                _ = proxy2.wait_for(|p| !p.running || p.generation != generation) => {}
            }
        };
        let served = router(b.group, host.clone())
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await;
        if *stop.borrow() || served.is_err() {
            host.forget_endpoint(&b.endpoint);
            return served;
        }
        // The endpoint exists while any instance of it does: the old process's connections end as soon as their
        // tasks see it died, and only then is it gone (a client opening it in between would still connect).
        live.drained().await;
        (b.unbind)().await;
        host.set_endpoint_state(&b.endpoint, None);
        tracing::info!(endpoint = %b.endpoint, "endpoint gone with csi-proxy");
    }
}

/// The connections one csi-proxy generation accepted that still exist (their server-side handles keep the endpoint).
struct Live {
    count: AtomicUsize,
    gone: tokio::sync::Notify,
}

impl Live {
    fn new() -> Arc<Live> {
        Arc::new(Live {
            count: AtomicUsize::new(0),
            gone: tokio::sync::Notify::new(),
        })
    }

    fn guard(live: &Arc<Live>) -> LiveGuard {
        live.count.fetch_add(1, Ordering::SeqCst);
        LiveGuard(Arc::clone(live))
    }

    /// Resolves once every connection is dropped.
    async fn drained(&self) {
        loop {
            let notified = self.gone.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Counts one live connection while it exists.
struct LiveGuard(Arc<Live>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        self.0.gone.notify_waiters();
    }
}

/// Which connection this is, to ask whether a test silenced it.
struct Silence {
    host: SimHost,
    group: ApiGroup,
    serial: u64,
}

impl Silence {
    fn now(&self) -> bool {
        self.host
            .connection_log()
            .is_silent(self.group, self.serial)
    }
}

/// A connection that dies with the csi-proxy process that accepted it: once that process is dead (crashed or
/// restarted), every read and write fails as a reset, which drops the connection. A silenced connection reads and
/// drops what arrives and swallows what the server writes.
struct KillableIo<T> {
    inner: T,
    dead: Pin<Box<dyn Future<Output = ()> + Send>>,
    killed: bool,
    silence: Silence,
    // Dropped after `inner` (fields drop in order): the count falls once the handle is closed.
    _live: LiveGuard,
}

impl<T> KillableIo<T> {
    fn new(
        inner: T,
        mut watch: watch::Receiver<ProxyStatus>,
        generation: u64,
        live: LiveGuard,
        silence: Silence,
    ) -> Self {
        let dead = Box::pin(async move {
            let _ = watch
                .wait_for(|p| !p.running || p.generation != generation)
                .await;
        });
        KillableIo {
            inner,
            dead,
            killed: false,
            silence,
            _live: live,
        }
    }

    fn check(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        if !self.killed && self.dead.as_mut().poll(cx).is_ready() {
            self.killed = true;
        }
        if self.killed {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "csi-proxy exited",
            ));
        }
        Ok(())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for KillableIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        if self.silence.now() {
            // Read and drop until nothing more is there (the waker stays registered) or the client closed it.
            let mut scratch = [0u8; 4096];
            loop {
                let mut dropped = ReadBuf::new(&mut scratch);
                match Pin::new(&mut self.inner).poll_read(cx, &mut dropped) {
                    Poll::Ready(Ok(())) if dropped.filled().is_empty() => {
                        return Poll::Ready(Ok(()));
                    }
                    Poll::Ready(Ok(())) => {}
                    other => return other,
                }
            }
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for KillableIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        if self.silence.now() {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        if self.silence.now() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.killed {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for KillableIo<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
