//! The CSI Identity service: plugin info, capabilities and the liveness `Probe`.
//!
//! # Probe semantics
//!
//! The livenessprobe sidecar restarts the driver container when `Probe` returns an error (or
//! times out). A restart only helps when the *driver process* is broken, so:
//!
//! * the host backend (csi-proxy, or the simulated host) is reachable → `ready: true`;
//! * the backend is missing, down or slow → still `ready: true`, with a warning log. Restarting
//!   the driver cannot start csi-proxy, and a crash-looping driver would also stop the kubelet
//!   from reaching the RPCs that report the real problem: node RPCs fail with `UNAVAILABLE`
//!   while the backend is away, which the kubelet retries;
//! * `Probe` itself never blocks longer than [`PROBE_TIMEOUT`] nor than three quarters of the caller's own
//!   deadline (`grpc-timeout`, which the sidecar sets from its `--probe-timeout`), so a hung backend cannot make the
//!   sidecar restart the driver. The chain, outermost first (the chart keeps it, and refuses values that break it):
//!   kubelet's liveness `timeoutSeconds` (10 s) > the livenessprobe sidecar's `--probe-timeout` (5 s: dial plus
//!   `Probe`, livenessprobe `cmd/livenessprobe/main.go` `checkProbe`) > this bound (0.8 s);
//! * the backend check costs the node nothing: csi-proxy's `PathExists` of the driver's plugin directory (an
//!   `os.Lstat` inside csi-proxy on every release; see `crate::host::csi_proxy::CsiProxyProbe`), natively one
//!   `GetFileAttributesW`. Until issue 29 it was `GetBIOSSerialNumber`, a `wmic` process per call on csi-proxy
//!   v1.1.3 and v1.2.1.
//!
//! So `Probe` fails only when the driver cannot answer at all — exactly when a restart helps.
//!
//! Quarantined state records (a corrupt or unreadable record file, see `crate::state`) are reported the same way:
//! `Probe` stays ready — a restart cannot repair a file, and a crash loop would stop every volume of the node — and
//! logs a warning naming the files whenever the set of quarantined records changes (and once more when it is
//! empty again). The count is `Lifecycle::quarantined_count` for metrics.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use csi::v1::identity_server::Identity;
use csi::v1::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, PluginCapability, ProbeRequest, ProbeResponse,
};
use tonic::{Request, Response, Status};

use crate::config::build_info;
use crate::host::{HostProbe, PROBE_TIMEOUT};
use crate::lifecycle::Lifecycle;
use crate::locks::Deadline;
use crate::rpc::{RpcFields, rpc};

/// The Identity service.
#[derive(Clone)]
pub struct IdentityService {
    name: String,
    manifest: HashMap<String, String>,
    probe: Arc<dyn HostProbe>,
    volumes: Option<Arc<dyn Lifecycle>>,
    /// How many quarantined records the last Probe reported.
    reported: Arc<AtomicUsize>,
}

impl std::fmt::Debug for IdentityService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityService")
            .field("name", &self.name)
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

impl IdentityService {
    /// Creates the service for driver `name`, checking the host backend with `probe`.
    pub fn new(name: impl Into<String>, probe: Arc<dyn HostProbe>) -> Self {
        Self {
            name: name.into(),
            manifest: manifest(),
            probe,
            volumes: None,
            reported: Arc::default(),
        }
    }

    /// Report the quarantined state records of `volumes` in `Probe`.
    pub fn with_volumes(mut self, volumes: Arc<dyn Lifecycle>) -> Self {
        self.volumes = Some(volumes);
        self
    }

    /// Log the quarantined state records when their set changed since the last Probe (the record files are read
    /// again for it, off the runtime).
    async fn report_quarantine(&self) {
        let Some(volumes) = &self.volumes else {
            return;
        };
        let records = match volumes.quarantined().await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the state records again");
                return;
            }
        };
        let before = self.reported.swap(records.len(), Ordering::Relaxed);
        if records.is_empty() {
            if before > 0 {
                tracing::info!("no state record is quarantined any more");
            }
        } else if records.len() != before {
            tracing::warn!(
                count = records.len(),
                records = ?records,
                "state records are quarantined: they are kept but ignored, their volumes fail, and shared SMB \
                 mappings and iSCSI sessions are not removed until each file is fixed or removed (README, \
                 \"State directory\"); still reporting ready, a restart cannot repair them"
            );
        }
    }
    /// Runs the backend check bounded by [`PROBE_TIMEOUT`] (and by three quarters of the caller's `deadline`, so the
    /// answer arrives before it) and logs a warning if it fails.
    async fn probe_backend(&self, deadline: Deadline) {
        let bound = PROBE_TIMEOUT.min(deadline.remaining() * 3 / 4);
        match tokio::time::timeout(bound, self.probe.check()).await {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => tracing::warn!(
                %reason,
                "host backend unreachable; reporting ready because restarting the driver cannot fix it"
            ),
            Err(_) => tracing::warn!(
                timeout_ms = bound.as_millis() as u64,
                "host backend did not answer in time; reporting ready because restarting the driver cannot fix it"
            ),
        }
    }
}

/// Build information published in `GetPluginInfo`'s manifest.
pub fn manifest() -> HashMap<String, String> {
    HashMap::from([
        ("version".to_owned(), build_info::VERSION.to_owned()),
        ("csi-spec".to_owned(), csi::SPEC_VERSION.to_owned()),
        ("target".to_owned(), build_info::TARGET.to_owned()),
        ("profile".to_owned(), build_info::PROFILE.to_owned()),
        ("rustc".to_owned(), build_info::RUSTC.to_owned()),
    ])
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _request: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        rpc("GetPluginInfo", RpcFields::default(), async {
            Ok(GetPluginInfoResponse {
                name: self.name.clone(),
                vendor_version: build_info::VERSION.to_owned(),
                manifest: self.manifest.clone(),
            })
        })
        .await
    }

    async fn get_plugin_capabilities(
        &self,
        _request: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        rpc("GetPluginCapabilities", RpcFields::default(), async {
            // A node-only plugin: no CONTROLLER_SERVICE, and every node can reach every SMB share
            // or iSCSI portal it is given, so no VOLUME_ACCESSIBILITY_CONSTRAINTS either.
            Ok(GetPluginCapabilitiesResponse {
                capabilities: Vec::<PluginCapability>::new(),
            })
        })
        .await
    }

    async fn probe(
        &self,
        request: Request<ProbeRequest>,
    ) -> Result<Response<ProbeResponse>, Status> {
        let deadline = Deadline::from_metadata(request.metadata());
        rpc("Probe", RpcFields::default(), async {
            self.probe_backend(deadline).await;
            self.report_quarantine().await;
            Ok(ProbeResponse { ready: Some(true) })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::future::BoxFuture;

    use super::*;
    use crate::host::NoHostProbe;

    struct FailingProbe;
    impl HostProbe for FailingProbe {
        fn check(&self) -> BoxFuture<'_, Result<(), String>> {
            Box::pin(async { Err("csi-proxy-system-v1alpha1: pipe not found".to_owned()) })
        }
    }

    struct HangingProbe;
    impl HostProbe for HangingProbe {
        fn check(&self) -> BoxFuture<'_, Result<(), String>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn probe_is_ready_when_backend_is_down() {
        let svc = IdentityService::new("wincsi.csi.io", Arc::new(FailingProbe));
        let resp = svc
            .probe(Request::new(ProbeRequest {}))
            .await
            .expect("probe");
        assert_eq!(resp.into_inner().ready, Some(true));
    }

    #[tokio::test]
    async fn probe_is_bounded_when_backend_hangs() {
        let svc = IdentityService::new("wincsi.csi.io", Arc::new(HangingProbe));
        let resp = svc
            .probe(Request::new(ProbeRequest {}))
            .await
            .expect("probe");
        assert_eq!(resp.into_inner().ready, Some(true));
    }

    #[tokio::test(start_paused = true)]
    async fn probe_answers_before_a_short_caller_deadline() {
        let svc = IdentityService::new("wincsi.csi.io", Arc::new(HangingProbe));
        let start = tokio::time::Instant::now();
        let resp = svc.probe(with_timeout("400m")).await.expect("probe");
        assert_eq!(resp.into_inner().ready, Some(true));
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(300),
            "3/4 of the caller's 400 ms"
        );
        let start = tokio::time::Instant::now();
        svc.probe(with_timeout("5S")).await.expect("probe");
        assert_eq!(
            start.elapsed(),
            PROBE_TIMEOUT,
            "never longer than PROBE_TIMEOUT"
        );
    }

    fn with_timeout(grpc_timeout: &str) -> Request<ProbeRequest> {
        let mut r = Request::new(ProbeRequest {});
        r.metadata_mut()
            .insert("grpc-timeout", grpc_timeout.parse().expect("ascii"));
        r
    }

    /// A writer into a shared buffer, for a thread-local subscriber.
    #[derive(Clone, Default)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn probe_reports_quarantined_records_once_and_stays_ready() {
        let env = crate::testing::Env::new(&serde_json::json!({}));
        let file = env.dir.path().join("volumes").join("torn.json");
        std::fs::create_dir_all(file.parent().expect("dir")).expect("mkdir");
        std::fs::write(&file, b"{\"version\":").expect("write");
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = crate::logging::subscriber(
            crate::config::LogFormat::Plain,
            crate::config::LogLevel::Info,
            move || writer.clone(),
        )
        .expect("subscriber");
        let _default = tracing::subscriber::set_default(sub);
        let svc = IdentityService::new("wincsi.csi.io", Arc::new(NoHostProbe))
            .with_volumes(env.mgr.clone());
        for _ in 0..3 {
            let resp = svc
                .probe(Request::new(ProbeRequest {}))
                .await
                .expect("probe");
            assert_eq!(resp.into_inner().ready, Some(true));
        }
        let text = |b: &Buf| String::from_utf8_lossy(&b.0.lock().expect("lock")).into_owned();
        let log = text(&buf);
        assert_eq!(
            log.matches("state records are quarantined").count(),
            1,
            "{log}"
        );
        assert!(
            log.contains("torn.json") && log.contains("count=1"),
            "{log}"
        );
        assert_eq!(env.mgr.quarantined_count(), 1);
        std::fs::remove_file(&file).expect("rm");
        svc.probe(Request::new(ProbeRequest {}))
            .await
            .expect("probe");
        assert!(text(&buf).contains("no state record is quarantined any more"));
        assert_eq!(env.mgr.quarantined_count(), 0);
    }

    #[tokio::test]
    async fn plugin_info_and_capabilities() {
        let svc = IdentityService::new("example.csi.io", Arc::new(NoHostProbe));
        let info = svc
            .get_plugin_info(Request::new(GetPluginInfoRequest {}))
            .await
            .expect("info")
            .into_inner();
        assert_eq!(info.name, "example.csi.io");
        assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(info.manifest["csi-spec"], "1.12.0");
        let caps = svc
            .get_plugin_capabilities(Request::new(GetPluginCapabilitiesRequest {}))
            .await
            .expect("caps")
            .into_inner();
        assert!(caps.capabilities.is_empty());
    }
}
