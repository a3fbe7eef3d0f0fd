//! The driver's HTTP endpoints: `/readyz` and `/livez` on `--health-address`, `/metrics` on `--metrics-address`
//! (one listener serves all three when the addresses are equal). Both flags are off by default.
//!
//! # Readiness and liveness differ on purpose
//!
//! * `GET /readyz`: 200 `ok` while the CSI server serves **and** the host backend answers its health check
//!   ([`HostProbe`]; for csi-proxy `filesystem.PathExists` of the driver's plugin directory, which no csi-proxy
//!   release serves with a child process; natively `GetFileAttributesW`), bounded by [`READINESS_TIMEOUT`];
//!   otherwise 503 with a one-line reason, e.g. `csi-proxy PathExists: \\.\pipe\csi-proxy-filesystem-v1 does not
//!   exist: …`. The result is cached for [`READINESS_CACHE`] and concurrent probes share one check, so probes never
//!   pile up on csi-proxy. A node without csi-proxy thus shows its driver pod not ready (`READY 2/3` and
//!   "Readiness probe failed" events) instead of healthy. [`READINESS_TIMEOUT`] (2 s) stays inside kubelet's
//!   readiness `timeoutSeconds` (the chart's default 5 s; its schema refuses less than 3).
//! * `GET /livez`: 200 `ok` while the CSI server loop runs (also while it drains in-flight RPCs at shutdown), 503
//!   `starting` before it serves (start-up reconciliation, at most `backend::RECONCILE_BUDGET`); never dependent on
//!   the backend: restarting the driver cannot start csi-proxy. For the same reason the CSI `Probe` (what the
//!   livenessprobe sidecar calls) stays ready while the backend is away (see `crate::identity`).
//! * `GET /metrics`: the Prometheus text exposition of [`Metrics`]; each scrape first refreshes the state gauges
//!   from the record store and `wincsi_host_backend_up` from the (cached) backend check.
//!
//! Only `GET` and `HEAD` are served (405 otherwise), other paths are 404, a request header must arrive within
//! [`HEADER_TIMEOUT`] and at most [`MAX_CONNECTIONS`] connections are open at once. Nothing served contains a
//! secret: the reasons are csi-proxy's pipe and method names, the metrics' labels fixed vocabularies.
//!
//! [`Telemetry::start`] binds every listener before spawning anything (a port in use fails start-up), and
//! [`Telemetry::stop`] closes them with the CSI server: no new connections, in-flight requests finish.

use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, info};

use crate::config::{Config, HttpAddress};
use crate::error::{Error, Result};
use crate::host::HostProbe;
use crate::metrics::{self, Metrics};

/// Upper bound on one backend check behind `/readyz` (and `wincsi_host_backend_up`).
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a backend check's result is reused.
pub const READINESS_CACHE: Duration = Duration::from_secs(1);

/// How long a client may take to send a request's header.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections open at once per listener; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 64;

/// How long in-flight HTTP requests may run after [`Telemetry::stop`].
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

const STARTING: u8 = 0;
const SERVING: u8 = 1;
const DRAINING: u8 = 2;

/// Where the CSI server is in its life, as `/livez` and `/readyz` report it.
#[derive(Clone, Debug, Default)]
pub struct ServerState(Arc<AtomicU8>);

impl ServerState {
    /// The CSI listener is bound and the server loop runs.
    pub fn set_serving(&self) {
        self.0.store(SERVING, Ordering::SeqCst);
    }

    /// A shutdown signal came: the server finishes in-flight RPCs and takes no new connections.
    pub fn set_draining(&self) {
        self.0.store(DRAINING, Ordering::SeqCst);
    }

    /// `/livez`: `Ok` while the server loop runs (serving or draining).
    pub fn live(&self) -> Result<(), String> {
        match self.0.load(Ordering::SeqCst) {
            STARTING => Err("starting: the CSI server is not serving yet".to_owned()),
            _ => Ok(()),
        }
    }
}

/// The readiness check: the server's state, then the host backend's health check, cached and bounded.
pub struct Readiness {
    probe: Arc<dyn HostProbe>,
    backend: &'static str,
    state: ServerState,
    last: tokio::sync::Mutex<Option<(tokio::time::Instant, Result<(), String>)>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("backend", &self.backend)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Readiness {
    /// Checks backend `backend` (its name in metrics) with `probe`, reporting `state` first.
    pub fn new(probe: Arc<dyn HostProbe>, backend: &'static str, state: ServerState) -> Self {
        Self {
            probe,
            backend,
            state,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// `/readyz`: `Ok` while the server serves and the backend answers; `Err(one-line reason)` otherwise.
    pub async fn ready(&self) -> Result<(), String> {
        match self.state.0.load(Ordering::SeqCst) {
            STARTING => {
                Err("starting: reconciling with the host, the CSI server is not serving yet".into())
            }
            DRAINING => Err("shutting down".into()),
            _ => self.backend().await,
        }
    }

    /// The backend's health check, at most once per [`READINESS_CACHE`] (callers meanwhile share the one result;
    /// a check in flight makes the others wait for it) and bounded by [`READINESS_TIMEOUT`].
    pub async fn backend(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, result)) = last.as_ref()
            && at.elapsed() < READINESS_CACHE
        {
            return result.clone();
        }
        let result = match tokio::time::timeout(READINESS_TIMEOUT, self.probe.check()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(one_line(&reason)),
            Err(_) => Err(format!(
                "{}: the health check did not answer within {} ms",
                self.backend,
                READINESS_TIMEOUT.as_millis()
            )),
        };
        if let Err(reason) = &result {
            debug!(%reason, "host backend not ready");
        }
        *last = Some((tokio::time::Instant::now(), result.clone()));
        result
    }
}

fn one_line(text: &str) -> String {
    text.split(['\r', '\n'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Which paths a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Routes {
    metrics: bool,
    health: bool,
}

impl Routes {
    fn describe(self) -> &'static str {
        match (self.metrics, self.health) {
            (true, true) => "/metrics /readyz /livez",
            (true, false) => "/metrics",
            _ => "/readyz /livez",
        }
    }
}

/// What the handlers share.
#[derive(Debug)]
struct App {
    readiness: Readiness,
    metrics: Option<Arc<Metrics>>,
}

type Body = Full<Bytes>;

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn verdict(result: Result<(), String>) -> Response<Body> {
    match result {
        Ok(()) => text(StatusCode::OK, "ok\n"),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

impl App {
    async fn handle(&self, routes: Routes, req: Request<Incoming>) -> Response<Body> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            resp.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return resp;
        }
        match req.uri().path() {
            "/readyz" if routes.health => verdict(self.readiness.ready().await),
            "/livez" if routes.health => verdict(self.readiness.state.live()),
            "/metrics" if routes.metrics => match &self.metrics {
                Some(m) => self.scrape(m).await,
                None => text(StatusCode::NOT_FOUND, "not found\n"),
            },
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    }

    async fn scrape(&self, m: &Arc<Metrics>) -> Response<Body> {
        m.set_backend_up(
            self.readiness.backend,
            self.readiness.backend().await.is_ok(),
        );
        let m = Arc::clone(m);
        // Refreshing the state gauges reads the record store: off the async workers.
        match tokio::task::spawn_blocking(move || m.scrape()).await {
            Ok(body) => {
                let mut resp = text(StatusCode::OK, body);
                resp.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static(metrics::CONTENT_TYPE),
                );
                resp
            }
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("metrics unavailable: {e}\n"),
            ),
        }
    }
}

/// The HTTP endpoints of one driver process: listeners bound, servers running, and the [`ServerState`] they report.
#[derive(Debug)]
pub struct Telemetry {
    state: ServerState,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    addresses: Vec<SocketAddr>,
}

impl Telemetry {
    /// Binds what `--health-address` and `--metrics-address` ask for (nothing when neither is set), installs the
    /// process's [`Metrics`] with `--metrics-address` (before the lifecycle is built, so its host calls are
    /// measured), and serves. The readiness check uses the configured backend's probe
    /// (`backend::probe_within`). Must be called inside a tokio runtime.
    pub fn start(config: &Config) -> Result<Self> {
        if config.health_address.is_none() && config.metrics_address.is_none() {
            return Ok(Self::idle());
        }
        let probe = crate::backend::probe_within(config, READINESS_TIMEOUT);
        Self::start_with(config, probe)
    }

    /// No listener: both flags unset.
    fn idle() -> Self {
        Self {
            state: ServerState::default(),
            stop: watch::channel(false).0,
            tasks: Vec::new(),
            addresses: Vec::new(),
        }
    }

    /// [`Telemetry::start`] with the backend check `probe`.
    pub fn start_with(config: &Config, probe: Arc<dyn HostProbe>) -> Result<Self> {
        let state = ServerState::default();
        let (stop, _) = watch::channel(false);
        let mut plan: Vec<(HttpAddress, Routes)> = Vec::new();
        if let Some(addr) = config.health_address {
            plan.push((
                addr,
                Routes {
                    metrics: config.metrics_address == Some(addr),
                    health: true,
                },
            ));
        }
        if let Some(addr) = config.metrics_address
            && config.health_address != Some(addr)
        {
            plan.push((
                addr,
                Routes {
                    metrics: true,
                    health: false,
                },
            ));
        }
        // Bind everything before spawning anything: a port in use fails start-up with nothing left running.
        let mut bound = Vec::new();
        for (addr, routes) in plan {
            let listener = bind(addr).map_err(|e| {
                Error::io(
                    if routes.health {
                        "binding --health-address"
                    } else {
                        "binding --metrics-address"
                    },
                    e,
                )
            })?;
            bound.push((listener, routes));
        }
        let metrics = config.metrics_address.map(|_| metrics::install());
        let app = Arc::new(App {
            readiness: Readiness::new(probe, config.host_backend.name(), state.clone()),
            metrics,
        });
        let mut tasks = Vec::new();
        let mut addresses = Vec::new();
        for (listener, routes) in bound {
            let listener = TcpListener::from_std(listener)
                .map_err(|e| Error::io("registering the HTTP listener", e))?;
            let local = listener
                .local_addr()
                .map_err(|e| Error::io("reading the HTTP listener's address", e))?;
            info!(address = %local, paths = routes.describe(), "serving HTTP");
            addresses.push(local);
            tasks.push(tokio::spawn(accept_loop(
                listener,
                Arc::clone(&app),
                routes,
                stop.subscribe(),
            )));
        }
        Ok(Self {
            state,
            stop,
            tasks,
            addresses,
        })
    }

    /// The addresses actually bound (`:0` resolved), health listener first.
    pub fn addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// The CSI listener is bound and the server loop is about to run.
    pub fn set_serving(&self) {
        self.state.set_serving();
    }

    /// `shutdown`, and the server state turned to draining when it completes (readiness goes down first).
    pub fn draining_on<S>(&self, shutdown: S) -> impl Future<Output = ()> + Send + 'static
    where
        S: Future<Output = ()> + Send + 'static,
    {
        let state = self.state.clone();
        async move {
            shutdown.await;
            state.set_draining();
        }
    }

    /// Stops every listener: no new connections, in-flight requests get up to two seconds. (Dropping the
    /// telemetry stops them too, without waiting: the servers see their stop channel close.)
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// `:PORT` binds `[::]` dual-stack (IPv4 too), falling back to `0.0.0.0` where the host has no IPv6.
fn bind(addr: HttpAddress) -> std::io::Result<std::net::TcpListener> {
    match addr {
        HttpAddress::Ip(sa) => bind_one(sa, false),
        HttpAddress::AnyInterface(port) => {
            match bind_one(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)), true) {
                Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => {
                    debug!(error = %e, "no IPv6 listener; listening on IPv4 only");
                    bind_one(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)), false)
                }
                other => other,
            }
        }
    }
}

fn bind_one(sa: SocketAddr, dual_stack: bool) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(sa), Type::STREAM, Some(Protocol::TCP))?;
    if dual_stack {
        socket.set_only_v6(false)?;
    }
    // As Go's net.Listen and mio do: SO_REUSEADDR on Unix lets a restarted driver bind while old probe connections
    // sit in TIME_WAIT; on Windows it would let another process bind the same port, so it stays off there.
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.bind(&sa.into())?;
    socket.listen(128)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

async fn accept_loop(
    listener: TcpListener,
    app: Arc<App>,
    routes: Routes,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            () = stopped(&mut stop) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if conns.len() < MAX_CONNECTIONS => {
                    conns.spawn(serve_connection(stream, Arc::clone(&app), routes, stop.clone()));
                }
                Ok((stream, peer)) => {
                    debug!(%peer, limit = MAX_CONNECTIONS, "too many HTTP connections; closing a new one");
                    drop(stream);
                }
                Err(e) => {
                    // EMFILE and the like: let descriptors free up instead of spinning.
                    debug!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(STOP_TIMEOUT, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        conns.abort_all();
    }
}

/// Resolves once [`Telemetry::stop`] was called (or the telemetry is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn serve_connection(
    stream: TcpStream,
    app: Arc<App>,
    routes: Routes,
    mut stop: watch::Receiver<bool>,
) {
    let service = service_fn(move |req| {
        let app = Arc::clone(&app);
        async move { Ok::<_, Infallible>(app.handle(routes, req).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                debug!(error = %e, "HTTP connection ended with an error");
            }
        }
        () = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use futures::future::BoxFuture;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A probe that answers `answer` and counts its calls (`None`: never answers).
    struct Scripted {
        answer: Option<Result<(), String>>,
        calls: AtomicUsize,
    }

    impl Scripted {
        fn new(answer: Option<Result<(), String>>) -> Arc<Self> {
            Arc::new(Self {
                answer,
                calls: AtomicUsize::new(0),
            })
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl HostProbe for Scripted {
        fn check(&self) -> BoxFuture<'_, Result<(), String>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match &self.answer {
                    Some(a) => {
                        // Yield once, so concurrent callers really overlap with a check in flight.
                        tokio::task::yield_now().await;
                        a.clone()
                    }
                    None => std::future::pending().await,
                }
            })
        }
    }

    const PIPE_MISSING: &str = "csi-proxy PathExists: \\\\.\\pipe\\csi-proxy-filesystem-v1 does not exist: is csi-proxy running?";

    fn serving(probe: Arc<Scripted>) -> Readiness {
        let state = ServerState::default();
        state.set_serving();
        Readiness::new(probe, "csi-proxy", state)
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_follows_the_server_state_then_the_backend() {
        let probe = Scripted::new(Some(Ok(())));
        let state = ServerState::default();
        let r = Readiness::new(probe.clone(), "csi-proxy", state.clone());
        assert!(
            r.ready()
                .await
                .expect_err("starting")
                .starts_with("starting")
        );
        assert!(state.live().is_err());
        assert_eq!(probe.calls(), 0, "no backend check before serving");
        state.set_serving();
        assert_eq!(r.ready().await, Ok(()));
        assert_eq!(state.live(), Ok(()));
        state.set_draining();
        assert_eq!(r.ready().await, Err("shutting down".into()));
        assert_eq!(state.live(), Ok(()), "draining: the server loop still runs");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_check_is_a_one_line_reason_naming_the_pipe() {
        let probe = Scripted::new(Some(Err(format!("{PIPE_MISSING}\r\n  second line"))));
        let reason = serving(probe).ready().await.expect_err("not ready");
        assert_eq!(reason, format!("{PIPE_MISSING} second line"));
        assert!(reason.contains(r"\\.\pipe\csi-proxy-filesystem-v1"));
    }

    #[tokio::test(start_paused = true)]
    async fn results_are_cached_for_a_second() {
        let probe = Scripted::new(Some(Ok(())));
        let r = serving(probe.clone());
        for _ in 0..5 {
            assert_eq!(r.ready().await, Ok(()));
        }
        assert_eq!(probe.calls(), 1);
        tokio::time::advance(READINESS_CACHE).await;
        assert_eq!(r.ready().await, Ok(()));
        assert_eq!(probe.calls(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_probes_share_one_check() {
        let probe = Scripted::new(Some(Err(PIPE_MISSING.into())));
        let r = Arc::new(serving(probe.clone()));
        let checks: Vec<_> = (0..16)
            .map(|_| {
                let r = Arc::clone(&r);
                tokio::spawn(async move { r.ready().await })
            })
            .collect();
        for c in checks {
            assert_eq!(c.await.expect("join"), Err(PIPE_MISSING.into()));
        }
        assert_eq!(probe.calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_backend_is_not_ready_within_the_bound() {
        let probe = Scripted::new(None);
        let r = serving(probe);
        let start = tokio::time::Instant::now();
        let reason = r.ready().await.expect_err("hung");
        assert!(reason.contains("did not answer within 2000 ms"), "{reason}");
        assert_eq!(start.elapsed(), READINESS_TIMEOUT);
    }

    // ---- over HTTP ----

    fn config(extra: &[&str]) -> Config {
        let mut args = vec![
            "wincsi-node",
            "--endpoint",
            "tcp://127.0.0.1:0",
            "--node-id",
            "n1",
        ];
        args.extend_from_slice(extra);
        Config::try_parse_args(args).expect("config")
    }

    /// One HTTP/1.1 request over a fresh connection: status, headers (lower-case names), body.
    async fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        let mut raw = String::new();
        s.read_to_string(&mut raw).await.expect("read");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a response");
        let status = head[9..12].parse().expect("status");
        (status, head.to_ascii_lowercase(), body.to_owned())
    }

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let (status, _, body) = request(addr, "GET", path).await;
        (status, body)
    }

    /// The metrics registry is process-wide: the tests that assert `wincsi_host_backend_up` (each with its own
    /// probe answer) take turns.
    static BACKEND_GAUGE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    #[tokio::test]
    async fn one_listener_serves_health_and_metrics_when_the_addresses_are_equal() {
        let _gauge = BACKEND_GAUGE.lock().await;
        let cfg = config(&[
            "--health-address",
            "127.0.0.1:0",
            "--metrics-address",
            "127.0.0.1:0",
        ]);
        let t = Telemetry::start_with(&cfg, Scripted::new(Some(Ok(())))).expect("start");
        assert_eq!(t.addresses().len(), 1);
        let addr = t.addresses()[0];
        assert_eq!(get(addr, "/livez").await.0, 503);
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (
                503,
                "starting: reconciling with the host, the CSI server is not serving yet\n"
            )
        );
        t.set_serving();
        assert_eq!(get(addr, "/livez").await, (200, "ok\n".to_owned()));
        assert_eq!(get(addr, "/readyz").await, (200, "ok\n".to_owned()));
        let (status, head, body) = request(addr, "GET", "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            head.contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
        assert!(body.contains("wincsi_build_info{"), "{body}");
        assert!(
            body.lines()
                .any(|l| l == "wincsi_host_backend_up{backend=\"csi-proxy\"} 1"),
            "{body}"
        );
        assert_eq!(get(addr, "/").await.0, 404);
        assert_eq!(get(addr, "/readyz/x").await.0, 404);
        let (status, head, _) = request(addr, "POST", "/readyz").await;
        assert_eq!(status, 405);
        assert!(head.contains("allow: get, head"), "{head}");
        let (status, _, body) = request(addr, "HEAD", "/livez").await;
        assert_eq!((status, body.as_str()), (200, ""));
        t.stop().await;
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }

    #[tokio::test]
    async fn separate_listeners_serve_only_their_paths() {
        let _gauge = BACKEND_GAUGE.lock().await;
        let cfg = config(&[
            "--health-address",
            "127.0.0.1:0",
            "--metrics-address",
            "[::1]:0",
        ]);
        let probe = Scripted::new(Some(Err(PIPE_MISSING.into())));
        let t = match Telemetry::start_with(&cfg, probe) {
            Ok(t) => t,
            // A host without IPv6 loopback: the same check over IPv4 only.
            Err(_) => Telemetry::start_with(
                &config(&[
                    "--health-address",
                    "127.0.0.1:0",
                    "--metrics-address",
                    "127.0.0.2:0",
                ]),
                Scripted::new(Some(Err(PIPE_MISSING.into()))),
            )
            .expect("start"),
        };
        let [health, metrics] = t.addresses() else {
            panic!("two listeners: {:?}", t.addresses())
        };
        t.set_serving();
        assert_eq!(
            get(*health, "/readyz").await,
            (503, format!("{PIPE_MISSING}\n"))
        );
        assert_eq!(
            get(*health, "/livez").await.0,
            200,
            "liveness never follows the backend"
        );
        assert_eq!(get(*health, "/metrics").await.0, 404);
        assert_eq!(get(*metrics, "/readyz").await.0, 404);
        let (status, body) = get(*metrics, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            body.lines()
                .any(|l| l == "wincsi_host_backend_up{backend=\"csi-proxy\"} 0"),
            "{body}"
        );
        t.stop().await;
    }

    #[tokio::test]
    async fn nothing_is_bound_without_the_flags() {
        let t = Telemetry::start(&config(&[])).expect("start");
        assert!(t.addresses().is_empty() && t.tasks.is_empty());
        t.stop().await;
    }

    #[tokio::test]
    async fn dropping_the_telemetry_closes_its_listeners() {
        let cfg = config(&["--health-address", "127.0.0.1:0"]);
        let t = Telemetry::start_with(&cfg, Scripted::new(Some(Ok(())))).expect("start");
        let addr = t.addresses()[0];
        let tasks: Vec<_> = t.tasks.iter().map(|h| h.abort_handle()).collect();
        assert_eq!(get(addr, "/livez").await.0, 503);
        drop(t);
        // The accept loops end on their own (not aborted) once the stop channel closes.
        for task in tasks {
            while !task.is_finished() {
                tokio::task::yield_now().await;
            }
        }
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }

    #[tokio::test]
    async fn a_port_in_use_fails_start_up() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("addr").port();
        let addr = format!("127.0.0.1:{port}");
        let err = Telemetry::start_with(
            &config(&["--health-address", &addr]),
            Scripted::new(Some(Ok(()))),
        )
        .expect_err("in use");
        assert!(err.to_string().contains("--health-address"), "{err}");
    }
}
