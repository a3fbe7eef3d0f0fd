//! The simulated host in-process: the six csi-proxy services of a [`SimHost`] served over in-memory connections
//! (tokio duplex streams), for unit tests that drive the real csi-proxy client — and so the driver's real adapter
//! and its error classification — without sockets or pipes.
//!
//! ```no_run
//! # async fn demo(host: sim::SimHost) {
//! let inproc = sim::inproc::InProcess::new(host);
//! let client = inproc.client(); // a proxy_client::ProxyClient
//! assert!(client.filesystem().path_exists(r"C:\var\lib\kubelet").await.unwrap());
//! # }
//! ```
//!
//! Every connection is served by the same gRPC services as `serve_unix` (so the audit log, faults, latency and hangs
//! of [`SimHost`] apply unchanged), behind a small gate that adds what only a transport can do:
//!
//! * [`InProcess::fail_unavailable`]: the `nth` next call of an RPC finds csi-proxy unreachable and fails with gRPC
//!   `UNAVAILABLE` before it reaches the host (so it is not audited: the host never saw it), as when csi-proxy is
//!   stopped or restarting;
//! * [`InProcess::after`]: a script runs on the host's state right after a successful call of an RPC, before the
//!   client sees the answer (host changes no csi-proxy call makes: a LUN's disk that only appears after a `Rescan`,
//!   a disk whose identity changed; see `State`'s scripting methods).
//!
//! Holding a call until released, failing the `nth` call and hanging past a deadline are [`SimHost`]'s own
//! ([`SimHost::hang_nth`], [`SimHost::fail_nth`]).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use proxy_client::proto::{
    disk_v1, filesystem_v1, iscsi_v1alpha2, smb_v1, system_v1alpha1, volume_v1,
};
use proxy_client::{ApiGroup, ProxyClient};
use tonic::body::Body;
use tonic::transport::{Endpoint, Server, Uri};

use crate::error::Result;
use crate::grpc::{
    DiskService, FilesystemService, IscsiService, SmbService, SystemService, VolumeService,
};
use crate::host::{SimHost, normalize_rpc};
use crate::process::DriverProcess;
use crate::state::State;

/// Buffer of one in-memory connection, per direction.
const DUPLEX_BUFFER: usize = 64 * 1024;

/// A [`SimHost`] served in-process. Cheap to clone; clones share the host and the gate.
#[derive(Clone)]
pub struct InProcess {
    host: SimHost,
    gate: Arc<Gate>,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

type Script = Box<dyn FnMut(&mut State) + Send>;

#[derive(Default)]
struct Gate {
    outages: Mutex<Vec<Outage>>,
    scripts: Mutex<Vec<(String, Script)>>,
}

struct Outage {
    rpc: String,
    nth: u64,
    seen: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Gate {
    /// Whether this call of `rpc` fails as unreachable (counts the call against every outage rule).
    fn unreachable(&self, rpc: &str) -> bool {
        let mut outages = lock(&self.outages);
        let mut hit = false;
        for o in outages.iter_mut().filter(|o| o.rpc == rpc || o.rpc == "*") {
            o.seen += 1;
            hit |= o.seen == o.nth;
        }
        outages.retain(|o| o.seen < o.nth);
        hit
    }

    /// Runs the scripts registered for `rpc` on the host's state.
    fn after(&self, rpc: &str, host: &SimHost) {
        let mut scripts = lock(&self.scripts);
        for (_, script) in scripts.iter_mut().filter(|(r, _)| r == rpc || r == "*") {
            host.with_state_mut(|s| script(s));
        }
    }
}

impl InProcess {
    /// Serves `host` in-process (nothing runs until a client connects).
    pub fn new(host: SimHost) -> Self {
        Self {
            host,
            gate: Arc::default(),
        }
    }

    /// The simulated host.
    pub fn host(&self) -> &SimHost {
        &self.host
    }

    /// A new csi-proxy client of this host (its own connections, opened lazily, one per API group). Must be called
    /// inside a tokio runtime.
    pub fn client(&self) -> ProxyClient {
        let this = self.clone();
        ProxyClient::with_channel_factory("in-process", move |group| this.channel(group))
    }

    fn channel(&self, group: ApiGroup) -> tonic::transport::Channel {
        let this = self.clone();
        // The URI is a placeholder: the connector ignores it and opens an in-memory connection instead.
        Endpoint::from_static("http://inproc.invalid").connect_with_connector_lazy(
            tower::service_fn(move |_: Uri| {
                let (client, server) = tokio::io::duplex(DUPLEX_BUFFER);
                this.serve(group, server);
                async move { Ok::<_, Infallible>(TokioIo::new(client)) }
            }),
        )
    }

    /// [`InProcess::client`] of the driver process `process`: its connections break when the process dies, and a dead
    /// process opens none ([`crate::process`]); a call the host was running when it died runs to its end there.
    pub fn client_of(&self, process: &DriverProcess) -> ProxyClient {
        let (this, process) = (self.clone(), process.clone());
        ProxyClient::with_channel_factory("in-process", move |group| {
            let (this, process) = (this.clone(), process.clone());
            Endpoint::from_static("http://inproc.invalid").connect_with_connector_lazy(
                tower::service_fn(move |_: Uri| {
                    let connection = process.connection(|| {
                        let (client, server) = tokio::io::duplex(DUPLEX_BUFFER);
                        this.serve(group, server);
                        client
                    });
                    async move { connection.map(TokioIo::new) }
                }),
            )
        })
    }

    /// Serves one connection with `group`'s service, behind the gate.
    fn serve(&self, group: ApiGroup, io: tokio::io::DuplexStream) {
        let h = self.host.clone();
        let mut builder = Server::builder()
            .layer(crate::serve::grpc_go::HeaderLimitLayer)
            .layer(GateLayer {
                gate: Arc::clone(&self.gate),
                host: self.host.clone(),
            });
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
        // Read like a served endpoint's connection (`serve::grpc_go`): the client's settings decide a reset.
        let incoming = tokio_stream::once(Ok::<_, std::io::Error>(
            crate::serve::grpc_go::ClientIo::new(io),
        ));
        tokio::spawn(async move {
            if let Err(e) = router.serve_with_incoming(incoming).await {
                tracing::debug!(error = %e, "in-process connection ended");
            }
        });
    }

    /// The `nth` next call of `rpc` (`*` = of any RPC; 1 = the next one) fails with gRPC `UNAVAILABLE` before it
    /// reaches the host, as when csi-proxy is not running.
    pub fn fail_unavailable(&self, rpc: &str, nth: u64) -> Result<()> {
        let rpc = normalize_rpc(rpc)?;
        if nth == 0 {
            return Err(crate::Error::Scenario("outage nth must be >= 1".into()));
        }
        lock(&self.gate.outages).push(Outage { rpc, nth, seen: 0 });
        Ok(())
    }

    /// Whether this call of `rpc` finds the backend unreachable ([`InProcess::fail_unavailable`]'s rules, counting
    /// the call), for a caller that reaches the host another way (the native backend's test support asks before each
    /// host operation named after the csi-proxy RPC).
    pub fn unreachable_now(&self, rpc: &str) -> bool {
        self.gate.unreachable(rpc)
    }

    /// Run the scripts registered for `rpc` ([`InProcess::after`]) now, as after a successful call of it (the native
    /// backend's test support runs them after each successful host operation named after the csi-proxy RPC).
    pub fn run_after(&self, rpc: &str) {
        self.gate.after(rpc, &self.host);
    }

    /// Run `script` on the host's state after every successful call of `rpc` (`*` = of any RPC), before the client
    /// sees the answer.
    pub fn after(&self, rpc: &str, script: impl FnMut(&mut State) + Send + 'static) -> Result<()> {
        let rpc = normalize_rpc(rpc)?;
        lock(&self.gate.scripts).push((rpc, Box::new(script)));
        Ok(())
    }
}

#[derive(Clone)]
struct GateLayer {
    gate: Arc<Gate>,
    host: SimHost,
}

impl<S> tower::Layer<S> for GateLayer {
    type Service = Gated<S>;

    fn layer(&self, inner: S) -> Gated<S> {
        Gated {
            inner,
            gate: Arc::clone(&self.gate),
            host: self.host.clone(),
        }
    }
}

#[derive(Clone)]
struct Gated<S> {
    inner: S,
    gate: Arc<Gate>,
    host: SimHost,
}

impl<S> tower::Service<http::Request<Body>> for Gated<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, std::result::Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let rpc = req.uri().path().rsplit('/').next().unwrap_or_default();
        let rpc = normalize_rpc(rpc).unwrap_or_else(|_| rpc.to_owned());
        if self.gate.unreachable(&rpc) {
            let status = tonic::Status::unavailable(format!(
                "{rpc}: csi-proxy is not reachable (injected outage)"
            ));
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let call = self.inner.call(req);
        let (gate, host) = (Arc::clone(&self.gate), self.host.clone());
        Box::pin(async move {
            let response = call.await?;
            // A failed unary call answers with its status in the headers (trailers-only); a success has none there.
            let failed = response
                .headers()
                .get("grpc-status")
                .is_some_and(|s| s != "0");
            if !failed {
                gate.after(&rpc, &host);
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HostOptions, Scenario};

    fn host() -> (SimHost, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let h = SimHost::new(&Scenario::default(), dir.path(), HostOptions::default()).unwrap();
        (h, dir)
    }

    const P: &str = r"C:\var\lib\kubelet\x";

    #[tokio::test]
    async fn calls_reach_the_host_and_are_audited() {
        let (h, _d) = host();
        let inproc = InProcess::new(h.clone());
        let fs = inproc.client().filesystem();
        fs.mkdir(P).await.unwrap();
        assert!(fs.path_exists(P).await.unwrap());
        let err = fs.mkdir(r"C:\outside").await.unwrap_err();
        assert!(
            err.to_string()
                .contains("is not within the working directories"),
            "{err}"
        );
        let rpcs: Vec<_> = h.audit(0).into_iter().map(|e| e.rpc).collect();
        assert_eq!(rpcs, ["Mkdir", "PathExists", "Mkdir"]);
    }

    #[tokio::test]
    async fn an_outage_fails_one_call_unaudited_and_the_client_reconnects() {
        let (h, _d) = host();
        let inproc = InProcess::new(h.clone());
        inproc.fail_unavailable("Mkdir", 2).unwrap();
        let fs = inproc.client().filesystem();
        fs.mkdir(P).await.unwrap();
        let err = fs.mkdir(P).await.unwrap_err();
        assert_eq!(
            err.kind(),
            proxy_client::ErrorKind::ProxyUnavailable,
            "{err}"
        );
        fs.mkdir(P).await.unwrap();
        assert_eq!(
            h.audit(0).len(),
            2,
            "the failed call never reached the host"
        );
        assert!(inproc.fail_unavailable("Mkdir", 0).is_err());
        assert!(inproc.fail_unavailable("NoSuchRpc", 1).is_err());
    }

    #[tokio::test]
    async fn a_dead_processs_client_reaches_nothing_while_its_running_call_finishes_on_the_host() {
        let (h, _d) = host();
        let inproc = InProcess::new(h.clone());
        let process = DriverProcess::new();
        let fs = inproc.client_of(&process).filesystem();
        fs.mkdir(r"C:\var\lib\kubelet\before").await.unwrap();
        h.hang_nth("Mkdir", 1).unwrap();
        let running = tokio::spawn({
            let fs = fs.clone();
            async move { fs.mkdir(P).await }
        });
        h.wait_hung(1).await;
        assert!(process.kill(), "it was alive");
        assert!(!process.kill(), "killed once");
        h.release_hangs();
        h.wait_unhung().await;
        assert!(
            h.with_state(|s| s.path_exists(P)).unwrap(),
            "csi-proxy ran the call to its end"
        );
        let answer = running.await.unwrap();
        assert!(
            answer.is_err(),
            "the dead process heard the answer: {answer:?}"
        );
        let audited = h.audit(0).len();
        let err = fs.path_exists(P).await.unwrap_err();
        assert_eq!(
            err.kind(),
            proxy_client::ErrorKind::ProxyUnavailable,
            "{err}"
        );
        assert_eq!(
            h.audit(0).len(),
            audited,
            "a dead process's call reached the host"
        );
    }

    #[tokio::test]
    async fn scripts_run_after_successful_calls_only() {
        let (h, _d) = host();
        let inproc = InProcess::new(h.clone());
        let runs = Arc::new(Mutex::new(0));
        let seen = Arc::clone(&runs);
        inproc
            .after("Mkdir", move |s| {
                *lock(&seen) += 1;
                s.mkdir(r"C:\var\lib\kubelet\made-by-script").unwrap();
            })
            .unwrap();
        let fs = inproc.client().filesystem();
        fs.mkdir(P).await.unwrap();
        assert!(fs.mkdir(r"C:\outside").await.is_err());
        assert_eq!(*lock(&runs), 1);
        assert!(
            fs.path_exists(r"C:\var\lib\kubelet\made-by-script")
                .await
                .unwrap(),
            "the script ran before the answer"
        );
    }
}
