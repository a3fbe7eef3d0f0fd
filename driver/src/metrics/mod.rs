//! Prometheus metrics (`--metrics-address`): what the driver counts and how it is exposed as text.
//!
//! One [`Metrics`] per process, made by [`install`] only when `--metrics-address` is given; with the flag unset
//! nothing is installed and every recording site costs one branch ([`installed`] is `None`, the host decorator holds
//! no meter). The registry is process-wide, like the tracing subscriber, because [`crate::rpc::rpc`] is a free
//! function every service method calls.
//!
//! | Metric | Type | Labels | Fed by |
//! | --- | --- | --- | --- |
//! | `wincsi_csi_requests_total` | counter | `method`, `grpc_code` | `rpc::rpc` (every CSI RPC) |
//! | `wincsi_csi_request_duration_seconds` | histogram | `method`, `grpc_code` | `rpc::rpc` |
//! | `wincsi_host_calls_total` | counter | `backend`, `operation`, `outcome` | `host::Metered` (every host call) |
//! | `wincsi_host_call_duration_seconds` | histogram | `backend`, `operation` | `host::Metered` |
//! | `wincsi_volumes_staged` | gauge | `protocol` | the record store, at each scrape ([`StateSource`]; 0 for a protocol without volumes) |
//! | `wincsi_volumes_published` | gauge | `protocol` | the record store, at each scrape (0 likewise) |
//! | `wincsi_state_record_problems` | gauge | `problem` | the record store / lifecycle, at each scrape (`unreachable`: staging objects left in place while their server does not answer, re-checked in the background: `lifecycle/watch.rs`; `unreferenced`: staged volumes no pod references and kubelet no longer asks about, past `--unreferenced-volume-minutes`: `lifecycle/unreferenced.rs`) |
//! | `wincsi_host_backend_up` | gauge | `backend` | the readiness check, at each scrape |
//! | `wincsi_host_capability_up` | gauge | `backend`, `capability` | the native backend's check of the Windows providers (`disks`, `iscsi`, `smb`): 1 present, 0 absent or not yet checked successfully |
//! | `wincsi_state_commit_duration_seconds` | histogram | — | the record store: a change queued → durable on disk |
//! | `wincsi_state_commit_wait_seconds` | histogram | — | the record store: how long a caller waited for its change to be durable (less than the above when it awaited it later) |
//! | `wincsi_state_commit_groups_total` | counter | — | the record store: groups committed (one directory `fsync` each) |
//! | `wincsi_state_commit_changes_total` | counter | — | the record store: changes committed in those groups |
//! | `wincsi_state_dir_flush_refused_total` | counter | — | the record store: directory flushes the file system refused as unavailable there (records rest on their write-through renames; `state/commit.rs`) |
//! | `wincsi_lock_wait_seconds` | histogram | `lock` | the lifecycle: waiting for a shared host object's lock; iSCSI: for a shared disk listing (`disk-listing`) |
//! | `wincsi_csi_proxy_connections_abandoned_total` | counter | `group` | proxy-client: a csi-proxy connection left for a fresh one because nothing came back on it before a call's deadline |
//! | `wincsi_smb_unencrypted_mapping_reuses_total` | counter | — | the native backend: a stage reused an SMB global mapping someone else made without `RequirePrivacy` although `--smb-require-privacy` is on (the share's traffic is not encrypted; alert on it) |
//! | `wincsi_smb_credential_rotations_total` | counter | `outcome` | SMB: a NodePublishVolume (kubelet's republish with `requiresRepublish`) carried other credentials than the volume's mapping was made with (`smb/rotate.rs`): `kept` (the mapping still works: left as it is), `recreated` (it did not: mapped again with the new credentials), `refused` (it did not, and re-creating it was refused, e.g. another volume still reaches the share through it; the RPC's error says why and what to do), `failed` (mapping again failed, e.g. the new credentials are refused too) |
//! | `wincsi_build_info` | gauge (1) | `version`, `csi_spec`, `target`, `profile`, `rustc` | build constants |
//!
//! Label values are fixed vocabularies (RPC and csi-proxy method names, gRPC code names, error kinds, protocol
//! tags), never a volume id, path, share or secret: cardinality stays bounded and nothing sensitive is exported.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::config::build_info;

/// The `Content-Type` of [`Metrics::encode`]'s output (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Buckets, in seconds, of the short waits inside an RPC (a record's `fsync`, a lock): 100 µs to 10 s.
pub const WAIT_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Latency buckets, in seconds, of the RPC and host-call histograms: from a cached path check (milliseconds) to an iSCSI stage that
/// formats a volume or kubelet's two-minute RPC timeout.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    method: &'static str,
    grpc_code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostCallLabels {
    backend: &'static str,
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLatencyLabels {
    backend: &'static str,
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LockLabels {
    lock: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolLabels {
    protocol: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProblemLabels {
    problem: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapabilityLabels {
    backend: &'static str,
    capability: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS)
}

/// What the durable state holds at one scrape: counts by protocol tag (`smb`, `iscsi`) and by problem.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateSnapshot {
    /// Volumes staged (records in phase `staged`), by protocol.
    pub staged: BTreeMap<String, u64>,
    /// Publish targets, by the protocol of their volume.
    pub published: BTreeMap<String, u64>,
    /// Records with a problem, by problem (`needs_restage`, `unreadable`, `quarantined`, …). A problem the source
    /// knows of is reported even at 0, so a dashboard sees the series before the first problem.
    pub problems: BTreeMap<String, u64>,
}

/// Where the state gauges come from: called at each scrape on a blocking thread (it may read the record store).
/// The composition root (`crate::backend`) implements it over the lifecycle's record store; any closure returning
/// a [`StateSnapshot`] is one.
pub trait StateSource: Send + Sync + 'static {
    /// The counts now.
    fn snapshot(&self) -> StateSnapshot;
}

impl<F> StateSource for F
where
    F: Fn() -> StateSnapshot + Send + Sync + 'static,
{
    fn snapshot(&self) -> StateSnapshot {
        self()
    }
}

/// The driver's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    rpc_requests: Family<RpcLabels, Counter>,
    rpc_duration: HistogramFamily<RpcLabels>,
    host_calls: Family<HostCallLabels, Counter>,
    host_duration: HistogramFamily<HostLatencyLabels>,
    staged: Family<ProtocolLabels, Gauge>,
    published: Family<ProtocolLabels, Gauge>,
    problems: Family<ProblemLabels, Gauge>,
    backend_up: Family<BackendLabels, Gauge>,
    capability_up: Family<CapabilityLabels, Gauge>,
    commit_duration: Histogram,
    commit_wait: Histogram,
    commit_groups: Counter,
    commit_changes: Counter,
    dir_flush_refused: Counter,
    lock_wait: HistogramFamily<LockLabels>,
    abandoned_connections: Family<GroupLabels, Counter>,
    unencrypted_mapping_reuses: Counter,
    credential_rotations: Family<OutcomeLabels, Counter>,
    state: RwLock<Option<Arc<dyn StateSource>>>,
    scrape: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric of the table above registered (and build info set).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let rpc_requests = Family::<RpcLabels, Counter>::default();
        let rpc_duration = HistogramFamily::<RpcLabels>::new_with_constructor(latency_histogram);
        let host_calls = Family::<HostCallLabels, Counter>::default();
        let host_duration =
            HistogramFamily::<HostLatencyLabels>::new_with_constructor(latency_histogram);
        let staged = Family::<ProtocolLabels, Gauge>::default();
        let published = Family::<ProtocolLabels, Gauge>::default();
        let problems = Family::<ProblemLabels, Gauge>::default();
        let backend_up = Family::<BackendLabels, Gauge>::default();
        let capability_up = Family::<CapabilityLabels, Gauge>::default();
        let commit_duration = wait_histogram();
        let commit_wait = wait_histogram();
        let commit_groups = Counter::default();
        let commit_changes = Counter::default();
        let dir_flush_refused = Counter::default();
        let lock_wait = HistogramFamily::<LockLabels>::new_with_constructor(wait_histogram);
        let abandoned_connections = Family::<GroupLabels, Counter>::default();
        let unencrypted_mapping_reuses = Counter::default();
        let credential_rotations = Family::<OutcomeLabels, Counter>::default();
        // prometheus-client appends `_total` to counters and `_info` to info metrics.
        registry.register(
            "wincsi_csi_requests",
            "CSI RPCs handled, by method and gRPC status code",
            rpc_requests.clone(),
        );
        registry.register(
            "wincsi_csi_request_duration_seconds",
            "Time to handle a CSI RPC, by method and gRPC status code",
            rpc_duration.clone(),
        );
        registry.register(
            "wincsi_host_calls",
            "Host calls (csi-proxy RPCs or native operations), by backend, operation and outcome",
            host_calls.clone(),
        );
        registry.register(
            "wincsi_host_call_duration_seconds",
            "Time a host call took, by backend and operation",
            host_duration.clone(),
        );
        registry.register(
            "wincsi_volumes_staged",
            "Volumes staged on this node (durable records in phase staged), by protocol",
            staged.clone(),
        );
        registry.register(
            "wincsi_volumes_published",
            "Publish targets on this node (durable publish records), by the volume's protocol",
            published.clone(),
        );
        registry.register(
            "wincsi_state_record_problems",
            "State records with a problem (needs_restage, unreadable, quarantined; unreachable: a staging object left in \
             place while its server does not answer; unreferenced: a staged volume kubelet will never unstage), by \
             problem",
            problems.clone(),
        );
        registry.register(
            "wincsi_host_backend_up",
            "1 when the host backend answered its health check at this scrape, else 0",
            backend_up.clone(),
        );
        registry.register(
            "wincsi_host_capability_up",
            "1 when the host backend found a capability (disks, iscsi, smb) usable, 0 when the host lacks it or its \
             check failed and is being retried",
            capability_up.clone(),
        );
        registry.register(
            "wincsi_state_commit_duration_seconds",
            "Time from a state record change being queued to it being durable on disk",
            commit_duration.clone(),
        );
        registry.register(
            "wincsi_state_commit_wait_seconds",
            "Time a caller waited for its state record change to be durable (from when it started waiting)",
            commit_wait.clone(),
        );
        registry.register(
            "wincsi_state_commit_groups",
            "Groups of state record changes committed (each with one fsync per directory)",
            commit_groups.clone(),
        );
        registry.register(
            "wincsi_state_commit_changes",
            "State record changes committed (changes / groups = the mean group size)",
            commit_changes.clone(),
        );
        registry.register(
            "wincsi_state_dir_flush_refused",
            "Flushes of the state directory the file system refused as unavailable there (a filter or file system \
             without directory flushes): the records rest on their write-through renames",
            dir_flush_refused.clone(),
        );
        registry.register(
            "wincsi_lock_wait_seconds",
            "Time an operation waited for the lock of a shared host object, by the object's kind (disk-listing: for \
             a disk listing another operation asked for and it shares)",
            lock_wait.clone(),
        );
        registry.register(
            "wincsi_csi_proxy_connections_abandoned",
            "csi-proxy connections left for a fresh one because nothing came back on them before a call's deadline, \
             by API group",
            abandoned_connections.clone(),
        );
        registry.register(
            "wincsi_smb_unencrypted_mapping_reuses",
            "SMB global mappings reused although they do not require encryption (RequirePrivacy false) while \
             --smb-require-privacy is on: someone else made them; the share's traffic is not encrypted",
            unencrypted_mapping_reuses.clone(),
        );
        registry.register(
            "wincsi_smb_credential_rotations",
            "SMB NodePublishVolume calls that carried other credentials than the volume's mapping was made with, by \
             outcome (kept, recreated, refused, failed)",
            credential_rotations.clone(),
        );
        registry.register(
            "wincsi_build",
            "Build information of the running driver",
            Info::new([
                ("version", build_info::VERSION),
                ("csi_spec", csi::SPEC_VERSION),
                ("target", build_info::TARGET),
                ("profile", build_info::PROFILE),
                ("rustc", build_info::RUSTC),
            ]),
        );
        Self {
            registry,
            rpc_requests,
            rpc_duration,
            host_calls,
            host_duration,
            staged,
            published,
            problems,
            backend_up,
            capability_up,
            commit_duration,
            commit_wait,
            commit_groups,
            commit_changes,
            dir_flush_refused,
            lock_wait,
            abandoned_connections,
            unencrypted_mapping_reuses,
            credential_rotations,
            state: RwLock::new(None),
            scrape: Mutex::new(()),
        }
    }

    /// One CSI RPC finished (or was cancelled) with `grpc_code` after `seconds`.
    pub fn observe_rpc(&self, method: &'static str, grpc_code: &'static str, seconds: f64) {
        let labels = RpcLabels { method, grpc_code };
        self.rpc_requests.get_or_create(&labels).inc();
        self.rpc_duration.get_or_create(&labels).observe(seconds);
    }

    /// One host call of `backend` finished with `outcome` (`ok`, an error kind, `cancelled`) after `seconds`.
    pub fn observe_host_call(
        &self,
        backend: &'static str,
        operation: &'static str,
        outcome: &'static str,
        seconds: f64,
    ) {
        self.host_calls
            .get_or_create(&HostCallLabels {
                backend,
                operation,
                outcome,
            })
            .inc();
        self.host_duration
            .get_or_create(&HostLatencyLabels { backend, operation })
            .observe(seconds);
    }

    /// The record store committed a group of `changes` changes.
    pub fn observe_state_group(&self, changes: usize) {
        self.commit_groups.inc();
        self.commit_changes.inc_by(changes as u64);
    }

    /// One state record change became durable `seconds` after it was queued.
    pub fn observe_state_commit(&self, seconds: f64) {
        self.commit_duration.observe(seconds);
    }

    /// The file system refused a flush of the state directory as unavailable there.
    pub fn observe_state_dir_flush_refused(&self) {
        self.dir_flush_refused.inc();
    }

    /// Flushes of the state directory refused so far.
    pub fn state_dir_flush_refused(&self) -> u64 {
        self.dir_flush_refused.get()
    }

    /// A caller waited `seconds` for its state record change to be durable.
    pub fn observe_state_wait(&self, seconds: f64) {
        self.commit_wait.observe(seconds);
    }

    /// An operation waited `seconds` for the lock of a shared host object of kind `lock`.
    pub fn observe_lock_wait(&self, lock: &'static str, seconds: f64) {
        self.lock_wait
            .get_or_create(&LockLabels { lock })
            .observe(seconds);
    }

    /// proxy-client left a connection of csi-proxy API group `group` (`disk`, `smb`, …) for a fresh one.
    pub fn observe_abandoned_connection(&self, group: &'static str) {
        self.abandoned_connections
            .get_or_create(&GroupLabels { group })
            .inc();
    }

    /// The native backend reused an SMB global mapping that does not require encryption although wincsi requires it.
    pub fn observe_unencrypted_mapping_reuse(&self) {
        self.unencrypted_mapping_reuses.inc();
    }

    /// How many such reuses were counted ([`Metrics::observe_unencrypted_mapping_reuse`]).
    pub fn unencrypted_mapping_reuses(&self) -> u64 {
        self.unencrypted_mapping_reuses.get()
    }

    /// A publish carried rotated SMB credentials, with `outcome` (`kept`, `recreated`, `refused`, `failed`).
    pub fn observe_credential_rotation(&self, outcome: &'static str) {
        self.credential_rotations
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// How many rotations with `outcome` were counted ([`Metrics::observe_credential_rotation`]).
    pub fn credential_rotations(&self, outcome: &'static str) -> u64 {
        self.credential_rotations
            .get_or_create(&OutcomeLabels { outcome })
            .get()
    }

    /// Where the state gauges come from from now on (the last source set wins).
    pub fn set_state_source(&self, source: Arc<dyn StateSource>) {
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = Some(source);
    }

    /// Refresh the state gauges from the [`StateSource`] (a no-op without one). Blocking: it may read files.
    pub fn refresh_state(&self) {
        let source = self.state.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(source) = source {
            self.set_state(&source.snapshot());
        }
    }

    /// Set the state gauges to `snap`: series absent from it disappear.
    pub fn set_state(&self, snap: &StateSnapshot) {
        set_family(&self.staged, &snap.staged, |p| ProtocolLabels {
            protocol: p,
        });
        set_family(&self.published, &snap.published, |p| ProtocolLabels {
            protocol: p,
        });
        set_family(&self.problems, &snap.problems, |p| ProblemLabels {
            problem: p,
        });
    }

    /// Whether `backend` found `capability` usable.
    pub fn set_capability_up(&self, backend: &'static str, capability: &'static str, up: bool) {
        self.capability_up
            .get_or_create(&CapabilityLabels {
                backend,
                capability,
            })
            .set(i64::from(up));
    }

    /// Whether `backend` answered its health check.
    pub fn set_backend_up(&self, backend: &'static str, up: bool) {
        self.backend_up
            .get_or_create(&BackendLabels { backend })
            .set(i64::from(up));
    }

    /// What `/metrics` serves: the state gauges refreshed ([`Metrics::refresh_state`]), then [`Metrics::encode`].
    /// Concurrent scrapes take turns, so none sees another's half-refreshed gauges. Blocking.
    pub fn scrape(&self) -> String {
        let _turn = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.refresh_state();
        self.encode()
    }

    /// The Prometheus text exposition (format 0.0.4, [`CONTENT_TYPE`]) of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail; the encoder only propagates the writer's errors.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

fn set_family<L>(family: &Family<L, Gauge>, values: &BTreeMap<String, u64>, label: fn(String) -> L)
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + Send + Sync + std::fmt::Debug + 'static,
{
    family.clear();
    for (key, n) in values {
        family
            .get_or_create(&label(key.clone()))
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
}

static INSTALLED: OnceLock<Arc<Metrics>> = OnceLock::new();

/// The process's metrics, created on first call (`--metrics-address` given). Later calls return the same registry.
pub fn install() -> Arc<Metrics> {
    Arc::clone(INSTALLED.get_or_init(|| Arc::new(Metrics::new())))
}

/// The process's metrics when [`install`] ran, else `None` (metrics off: recording sites do nothing).
pub fn installed() -> Option<&'static Arc<Metrics>> {
    INSTALLED.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn rpc_and_host_calls_are_counted_with_latency() {
        let m = Metrics::new();
        m.observe_rpc("NodeStageVolume", "OK", 0.02);
        m.observe_rpc("NodeStageVolume", "OK", 3.0);
        m.observe_rpc("NodeStageVolume", "Aborted", 0.001);
        m.observe_host_call("csi-proxy", "NewSmbGlobalMapping", "ok", 0.2);
        m.observe_host_call("csi-proxy", "NewSmbGlobalMapping", "logon_failure", 0.3);
        let text = m.encode();
        assert!(
            text.contains(
                "wincsi_csi_requests_total{method=\"NodeStageVolume\",grpc_code=\"OK\"} 2\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "wincsi_csi_requests_total{method=\"NodeStageVolume\",grpc_code=\"Aborted\"} 1\n"
        ));
        assert!(text.contains("# TYPE wincsi_csi_request_duration_seconds histogram\n"));
        // 0.02 and 3.0: one observation at or below 0.025 s, both at or below 5 s.
        assert!(text.contains("wincsi_csi_request_duration_seconds_bucket{le=\"0.025\",method=\"NodeStageVolume\",grpc_code=\"OK\"} 1\n")
            || text.contains("wincsi_csi_request_duration_seconds_bucket{method=\"NodeStageVolume\",grpc_code=\"OK\",le=\"0.025\"} 1\n"), "{text}");
        assert!(text.contains("wincsi_csi_request_duration_seconds_count{method=\"NodeStageVolume\",grpc_code=\"OK\"} 2\n"));
        assert!(text.contains("wincsi_host_calls_total{backend=\"csi-proxy\",operation=\"NewSmbGlobalMapping\",outcome=\"logon_failure\"} 1\n"));
        assert!(text.contains("wincsi_host_call_duration_seconds_count{backend=\"csi-proxy\",operation=\"NewSmbGlobalMapping\"} 2\n"));
    }

    #[test]
    fn build_info_names_this_build() {
        let text = Metrics::new().encode();
        let info = line(&text, "wincsi_build_info{").expect("build info");
        assert!(info.ends_with("} 1"), "{info}");
        for (k, v) in [
            ("version", build_info::VERSION),
            ("csi_spec", "1.12.0"),
            ("target", build_info::TARGET),
        ] {
            assert!(info.contains(&format!("{k}=\"{v}\"")), "{info}");
        }
    }

    #[test]
    fn state_gauges_follow_the_source_and_forget_vanished_series() {
        let m = Metrics::new();
        let snap = StateSnapshot {
            staged: BTreeMap::from([("smb".into(), 2), ("iscsi".into(), 1)]),
            published: BTreeMap::from([("smb".into(), 3)]),
            problems: BTreeMap::from([("needs_restage".into(), 0), ("quarantined".into(), 4)]),
        };
        m.set_state_source(Arc::new(move || snap.clone()));
        m.refresh_state();
        let text = m.encode();
        for want in [
            "wincsi_volumes_staged{protocol=\"smb\"} 2",
            "wincsi_volumes_staged{protocol=\"iscsi\"} 1",
            "wincsi_volumes_published{protocol=\"smb\"} 3",
            "wincsi_state_record_problems{problem=\"needs_restage\"} 0",
            "wincsi_state_record_problems{problem=\"quarantined\"} 4",
        ] {
            assert!(text.lines().any(|l| l == want), "{want}\n{text}");
        }
        m.set_state_source(Arc::new(StateSnapshot::default));
        m.refresh_state();
        let text = m.encode();
        assert!(!text.contains("wincsi_volumes_staged{"), "{text}");
        assert!(!text.contains("quarantined"), "{text}");
    }

    #[test]
    fn backend_up_is_a_zero_or_one_gauge() {
        let m = Metrics::new();
        m.set_backend_up("csi-proxy", false);
        assert!(
            m.encode()
                .lines()
                .any(|l| l == "wincsi_host_backend_up{backend=\"csi-proxy\"} 0")
        );
        m.set_backend_up("csi-proxy", true);
        assert!(
            m.encode()
                .lines()
                .any(|l| l == "wincsi_host_backend_up{backend=\"csi-proxy\"} 1")
        );
    }

    #[test]
    fn unencrypted_mapping_reuses_are_counted() {
        let m = Metrics::new();
        assert!(
            !m.encode()
                .contains("wincsi_smb_unencrypted_mapping_reuses_total 1"),
        );
        m.observe_unencrypted_mapping_reuse();
        let text = m.encode();
        assert!(
            text.lines()
                .any(|l| l == "wincsi_smb_unencrypted_mapping_reuses_total 1"),
            "{text}"
        );
        assert_eq!(m.unencrypted_mapping_reuses(), 1);
    }

    #[test]
    fn install_is_idempotent() {
        let a = install();
        let b = install();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(installed().is_some_and(|m| Arc::ptr_eq(m, &a)));
    }
}
