//! [`SimHost`]: the shared, lockable host with its audit log, fault injection, reboot and invariant checks.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::profile::CsiProxyVersion;
use crate::scenario::Scenario;
use crate::state::{DataLossEvent, HostOptions, Spawned, State};

/// Every RPC the simulator serves, by bare method name (unique across the six groups).
pub const RPCS: &[&str] = &[
    // disk v1
    "ListDiskLocations",
    "PartitionDisk",
    "Rescan",
    "ListDiskIDs",
    "GetDiskStats",
    "SetDiskState",
    "GetDiskState",
    // volume v1
    "ListVolumesOnDisk",
    "MountVolume",
    "UnmountVolume",
    "IsVolumeFormatted",
    "FormatVolume",
    "ResizeVolume",
    "GetVolumeStats",
    "GetDiskNumberFromVolumeID",
    "GetVolumeIDFromTargetPath",
    "WriteVolumeCache",
    // filesystem v1
    "PathExists",
    "Mkdir",
    "Rmdir",
    "CreateSymlink",
    "IsSymlink",
    // smb v1
    "NewSmbGlobalMapping",
    "RemoveSmbGlobalMapping",
    // iscsi v1alpha2
    "AddTargetPortal",
    "DiscoverTargetPortal",
    "RemoveTargetPortal",
    "ListTargetPortals",
    "ConnectTarget",
    "DisconnectTarget",
    "GetTargetDisks",
    "SetMutualChapSecret",
    // system v1alpha1
    "GetBIOSSerialNumber",
    "StartService",
    "StopService",
    "GetService",
];

/// Normalises an RPC name: accepts `PartitionDisk` or `/v1.Disk/PartitionDisk`; `*` means every RPC. The Windows
/// view's call names ([`crate::wmi::CALLS`], e.g. `MSFT_Disk.Online`, `CreateDirectoryW`) are accepted as they are.
pub fn normalize_rpc(name: &str) -> Result<String> {
    if let Some(call) = crate::wmi::CALLS
        .iter()
        .find(|c| c.eq_ignore_ascii_case(name))
    {
        return Ok(call.to_string());
    }
    let bare = name.rsplit('/').next().unwrap_or(name);
    if bare == "*" {
        return Ok("*".to_string());
    }
    RPCS.iter()
        .find(|r| r.eq_ignore_ascii_case(bare))
        .map(|r| r.to_string())
        .ok_or_else(|| Error::Scenario(format!("unknown RPC {name:?}")))
}

/// Which face of the host a call comes through: csi-proxy's gRPC services (which fail while the simulated csi-proxy
/// process is dead), or Windows itself (the WMI and Win32 view of [`crate::wmi`], which csi-proxy's state does not
/// affect).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Face {
    /// csi-proxy's RPCs.
    CsiProxy,
    /// WMI and Win32 calls made in-process by a native backend.
    Windows,
}

/// One audited call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    /// Sequence number (1-based, never reused).
    pub seq: u64,
    /// Bare RPC name.
    pub rpc: String,
    /// Request fields; secrets replaced by `<redacted>`.
    pub args: serde_json::Value,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Duration in microseconds (including injected latency and hangs).
    pub duration_us: u64,
    /// `None` on success, else the error message sent to the client.
    pub error: Option<String>,
    /// Whether the outcome was an injected fault.
    pub injected: bool,
    /// Boot number of the host when the call ran.
    pub boot: u64,
    /// The host processes csi-proxy started for the call (PowerShell-era releases; see `state::processes`).
    #[serde(default)]
    pub host_processes: Spawned,
}

/// A fault: fail the `nth` call of `rpc` (counted from when the fault is added; 1 = the next call), and
/// `times - 1` calls after it, with `message` as the gRPC UNKNOWN text.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fault {
    /// RPC name (bare or full path) or `*`.
    pub rpc: String,
    /// Which call fails first (1-based).
    #[serde(default = "one")]
    pub nth: u64,
    /// How many consecutive calls fail.
    #[serde(default = "one")]
    pub times: u64,
    /// Error message returned.
    pub message: String,
}

fn one() -> u64 {
    1
}

#[derive(Debug)]
struct FaultRule {
    fault: Fault,
    seen: u64,
    remaining: u64,
}

#[derive(Debug)]
struct HangRule {
    rpc: String,
    nth: u64,
    seen: u64,
    /// Held after the host work, before the answer (the call landed; its caller hears nothing yet).
    answer: bool,
}

/// Outcome of the invariant checks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InvariantReport {
    /// Every data-loss event (must be empty).
    pub data_loss: Vec<DataLossEvent>,
    /// Mappings, sessions, mount points and links still present (must be empty once every volume is unstaged).
    pub leftovers: Vec<String>,
}

impl InvariantReport {
    /// Whether both checks pass.
    pub fn ok(&self) -> bool {
        self.data_loss.is_empty() && self.leftovers.is_empty()
    }
}

/// The csi-proxy process of the simulated node: a call can kill it (v1.3.0's nil dereference on an IQN miss),
/// which drops every pipe until it is restarted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyStatus {
    /// Whether csi-proxy is serving.
    pub running: bool,
    /// Incremented at every start; connections accepted under an older generation are dropped.
    pub generation: u64,
    /// How many times it died.
    pub crashes: u64,
    /// Why it last died.
    pub last_crash: Option<String>,
}

const AUDIT_CAP: usize = 100_000;

/// What a call hung at the moment of a reboot fails with.
pub(crate) const REBOOT_ABORT: &str = "The pipe has been ended.";

#[derive(Debug, Default)]
struct Control {
    audit: VecDeque<AuditEntry>,
    next_seq: u64,
    faults: Vec<FaultRule>,
    hangs: Vec<HangRule>,
    latency: BTreeMap<String, Duration>,
    counts: BTreeMap<String, u64>,
    /// Host processes started, by RPC.
    processes: BTreeMap<String, Spawned>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    root: PathBuf,
    opts: HostOptions,
    ctl: Mutex<Control>,
    /// (generation, fail): bumped to wake hung calls; `fail` = they return an error (reboot).
    release: watch::Sender<(u64, bool)>,
    /// Number of calls currently hung.
    hung: watch::Sender<u64>,
    /// Number of calls that ever hung (only grows: a wait on it misses no hang that began and ended meanwhile).
    hangs_begun: watch::Sender<u64>,
    /// The csi-proxy process (serving layers watch it to drop and re-create their endpoints).
    proxy: watch::Sender<ProxyStatus>,
    /// Served endpoints: `Some(generation)` while serving for that csi-proxy generation, `None` while gone.
    endpoints: watch::Sender<BTreeMap<String, Option<u64>>>,
    /// The served endpoints' connections (`serve::silence`).
    connections: crate::serve::ConnectionLog,
}

/// The simulated Windows host: cheap to clone (an `Arc` inside), safe to share between the gRPC services, the
/// admin interface and tests.
#[derive(Debug, Clone)]
pub struct SimHost {
    inner: Arc<Inner>,
}

struct HungGuard<'a>(&'a watch::Sender<u64>);

impl Drop for HungGuard<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving rather than cascade panics.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SimHost {
    /// Builds a host from a scenario, with its sandbox at `root` (created; previous sandbox contents replaced).
    pub fn new(scenario: &Scenario, root: &Path, opts: HostOptions) -> Result<SimHost> {
        let state = State::new(scenario, root, &opts)?;
        // The absolute root State made of it (a relative one would break the sandbox's links).
        let root = state.root().to_path_buf();
        let (release, _) = watch::channel((0, false));
        let (hung, _) = watch::channel(0);
        let (hangs_begun, _) = watch::channel(0);
        let (proxy, _) = watch::channel(ProxyStatus {
            running: true,
            generation: 1,
            crashes: 0,
            last_crash: None,
        });
        let (endpoints, _) = watch::channel(BTreeMap::new());
        Ok(SimHost {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                root,
                opts,
                ctl: Mutex::new(Control {
                    next_seq: 1,
                    ..Control::default()
                }),
                release,
                hung,
                hangs_begun,
                proxy,
                endpoints,
                connections: crate::serve::ConnectionLog::default(),
            }),
        })
    }

    /// Replaces the whole host with a new scenario (same sandbox root and options). Faults and the audit log
    /// are kept.
    pub fn load_scenario(&self, scenario: &Scenario) -> Result<()> {
        {
            let mut st = lock(&self.inner.state);
            *st = State::new(scenario, &self.inner.root, &self.inner.opts)?;
        }
        if !self.csi_proxy_running() {
            self.restart_csi_proxy();
        }
        Ok(())
    }

    /// Runs `f` on the state (read-only inspection).
    pub fn with_state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&lock(&self.inner.state))
    }

    /// Runs `f` on the state mutably, outside the audit log and fault injection (test set-up).
    pub fn with_state_mut<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut lock(&self.inner.state))
    }

    /// The served endpoints' connections.
    pub(crate) fn connection_log(&self) -> &crate::serve::ConnectionLog {
        &self.inner.connections
    }

    /// The sandbox root.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Executes one host call: counts it, applies injected latency / hang / fault, runs `f` under the state
    /// lock (after letting due disk arrivals happen), and records an audit entry. `args` is logged and audited as
    /// is: callers redact secrets first. If `f` kills csi-proxy (see [`ProxyStatus`]) the process is marked dead;
    /// while it is dead every call fails.
    ///
    /// The host work is part of this future: dropping it before `f` ran (a cancelled client) cancels the work.
    /// The gRPC services use [`SimHost::call_detached`] instead, which keeps going like csi-proxy does.
    pub async fn call<T>(
        &self,
        rpc: &'static str,
        args: serde_json::Value,
        f: impl FnOnce(&mut State) -> Result<T>,
    ) -> Result<T> {
        self.call_on(Face::CsiProxy, rpc, args, f, |_| None).await
    }

    /// [`SimHost::call`] through `face`; `answer_error` names a failure carried inside a successful answer (a WMI
    /// method's non-zero `ReturnValue`, a Win32 error) for the audit entry.
    pub(crate) async fn call_on<T>(
        &self,
        face: Face,
        rpc: &'static str,
        args: serde_json::Value,
        f: impl FnOnce(&mut State) -> Result<T>,
        answer_error: impl FnOnce(&T) -> Option<String>,
    ) -> Result<T> {
        let started = Instant::now();
        let started_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        let (fault, latency, hang, hang_answer) = {
            let mut ctl = lock(&self.inner.ctl);
            *ctl.counts.entry(rpc.to_string()).or_default() += 1;
            let mut fault = None;
            for rule in ctl
                .faults
                .iter_mut()
                .filter(|r| r.fault.rpc == rpc || r.fault.rpc == "*")
            {
                rule.seen += 1;
                if fault.is_none() && rule.seen >= rule.fault.nth && rule.remaining > 0 {
                    rule.remaining -= 1;
                    fault = Some(rule.fault.message.clone());
                }
            }
            ctl.faults.retain(|r| r.remaining > 0);
            let (mut hang, mut hang_answer) = (false, false);
            for rule in ctl
                .hangs
                .iter_mut()
                .filter(|r| r.rpc == rpc || r.rpc == "*")
            {
                rule.seen += 1;
                if rule.seen == rule.nth {
                    if rule.answer {
                        hang_answer = true;
                    } else {
                        hang = true;
                    }
                }
            }
            ctl.hangs.retain(|r| r.seen < r.nth);
            let latency = ctl
                .latency
                .get(rpc)
                .or_else(|| ctl.latency.get("*"))
                .copied();
            (fault, latency, hang, hang_answer)
        };
        if let Some(d) = latency {
            tokio::time::sleep(d).await;
        }
        let aborted = hang && self.hold().await;
        let injected = fault.is_some() || aborted;
        let boot = self.with_state(|s| s.boots());
        let mut crash = None;
        let mut spawned = Spawned::default();
        let result = if face == Face::CsiProxy && !self.csi_proxy_running() {
            Err(Error::host("csi-proxy is not running"))
        } else if aborted {
            Err(Error::host(REBOOT_ABORT))
        } else if let Some(msg) = fault {
            Err(Error::Host(msg))
        } else {
            let mut st = lock(&self.inner.state);
            match st.tick(tokio::time::Instant::now()) {
                Ok(()) => {
                    // Only csi-proxy starts processes; the Windows view is the native backend's in-process calls.
                    let plan = (face == Face::CsiProxy).then(|| st.process_plan(rpc, &args));
                    let r = f(&mut st);
                    if let Some(plan) = plan {
                        spawned = plan.settle(r.is_ok(), &st);
                    }
                    crash = st.take_crash();
                    r
                }
                Err(e) => Err(e),
            }
        };
        if let Some(reason) = crash {
            self.crash_csi_proxy(&reason);
        }
        // The work is done (and stays done): a reboot while the answer is held loses the answer only.
        let result = if hang_answer && self.hold().await {
            Err(Error::host(REBOOT_ABORT))
        } else {
            result
        };
        let error = match &result {
            Err(e) => Some(e.to_string()),
            Ok(answer) => answer_error(answer),
        };
        match &error {
            Some(e) => tracing::debug!(rpc, %args, error = %e, injected, "host call failed"),
            None => tracing::debug!(rpc, %args, "host call"),
        }
        let mut ctl = lock(&self.inner.ctl);
        if !spawned.is_zero() {
            ctl.processes
                .entry(rpc.to_string())
                .or_default()
                .add(spawned);
        }
        let seq = ctl.next_seq;
        ctl.next_seq += 1;
        ctl.audit.push_back(AuditEntry {
            seq,
            rpc: rpc.to_string(),
            args,
            started_unix_ms,
            duration_us: started.elapsed().as_micros() as u64,
            error,
            injected,
            boot,
            host_processes: spawned,
        });
        if ctl.audit.len() > AUDIT_CAP {
            ctl.audit.pop_front();
        }
        result
    }

    /// [`SimHost::call`] in a task of its own: like csi-proxy, which ignores its request context, the host work
    /// runs to completion even when the caller goes away (a cancelled or killed client). Must be called inside a
    /// tokio runtime.
    pub async fn call_detached<T, F>(
        &self,
        rpc: &'static str,
        args: serde_json::Value,
        f: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut State) -> Result<T> + Send + 'static,
    {
        let host = self.clone();
        match tokio::spawn(async move { host.call(rpc, args, f).await }).await {
            Ok(r) => r,
            Err(e) => Err(Error::host(format!("host call {rpc} failed: {e}"))),
        }
    }

    // ---- the csi-proxy process ----

    /// The csi-proxy process's state.
    pub fn csi_proxy_status(&self) -> ProxyStatus {
        self.inner.proxy.borrow().clone()
    }

    /// Whether csi-proxy is serving.
    pub fn csi_proxy_running(&self) -> bool {
        self.inner.proxy.borrow().running
    }

    /// Kills csi-proxy (as a panic in a handler does: grpc-go does not recover it): every connection drops and
    /// every endpoint disappears until [`SimHost::restart_csi_proxy`].
    pub fn crash_csi_proxy(&self, reason: &str) {
        tracing::warn!(%reason, "csi-proxy crashed");
        self.inner.proxy.send_modify(|p| {
            p.running = false;
            p.crashes += 1;
            p.last_crash = Some(reason.to_string());
        });
    }

    /// Starts csi-proxy again (or restarts a running one): a new generation; connections of the old one drop.
    pub fn restart_csi_proxy(&self) {
        self.inner.proxy.send_modify(|p| {
            p.running = true;
            p.generation += 1;
        });
    }

    /// Subscribes to the csi-proxy process state (for the serving layers).
    pub fn watch_csi_proxy(&self) -> watch::Receiver<ProxyStatus> {
        self.inner.proxy.subscribe()
    }

    /// Records whether a served endpoint exists (`Some(generation)`) or is gone (`None`); used by the serving
    /// layers so that [`SimHost::wait_endpoints`] needs no sleeping.
    pub fn set_endpoint_state(&self, endpoint: &str, serving: Option<u64>) {
        self.inner.endpoints.send_modify(|m| {
            m.insert(endpoint.to_string(), serving);
        });
    }

    /// Forgets a served endpoint (its server stopped for good).
    pub fn forget_endpoint(&self, endpoint: &str) {
        self.inner.endpoints.send_modify(|m| {
            m.remove(endpoint);
        });
    }

    /// Waits until every served endpoint matches the csi-proxy process: all up for its current generation while
    /// it runs, all gone while it is dead. Returns at once when nothing is served.
    pub async fn wait_endpoints(&self) {
        let mut eps = self.inner.endpoints.subscribe();
        let mut proxy = self.inner.proxy.subscribe();
        loop {
            let p = proxy.borrow_and_update().clone();
            let settled = eps.borrow_and_update().values().all(|s| match s {
                Some(g) => p.running && *g == p.generation,
                None => !p.running,
            });
            if settled {
                return;
            }
            tokio::select! {
                r = eps.changed() => if r.is_err() { return },
                r = proxy.changed() => if r.is_err() { return },
            }
        }
    }

    /// The csi-proxy release being played.
    pub fn csi_proxy_version(&self) -> CsiProxyVersion {
        self.with_state(|s| s.csi_proxy_version())
    }

    /// Plays another csi-proxy release from the next call on (host state is kept; connections stay).
    pub fn set_csi_proxy_version(&self, version: CsiProxyVersion) -> Result<()> {
        self.with_state_mut(|s| s.set_csi_proxy_version(version))
    }

    // ---- audit ----

    /// Audit entries with `seq > since` (0 = all retained entries).
    pub fn audit(&self, since: u64) -> Vec<AuditEntry> {
        lock(&self.inner.ctl)
            .audit
            .iter()
            .filter(|e| e.seq > since)
            .cloned()
            .collect()
    }

    /// Clears the audit log (sequence numbers keep increasing).
    pub fn clear_audit(&self) {
        lock(&self.inner.ctl).audit.clear();
    }

    /// How many times each RPC has been called.
    pub fn call_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.inner.ctl).counts.clone()
    }

    /// The host processes csi-proxy has started so far (PowerShell and `wmic` children of the release played), by
    /// RPC; RPCs that started none are left out. See `state::processes` for what each call starts per release.
    pub fn host_processes(&self) -> BTreeMap<String, Spawned> {
        lock(&self.inner.ctl).processes.clone()
    }

    // ---- faults ----

    /// Adds a fault (see [`Fault`]).
    pub fn inject_fault(&self, mut fault: Fault) -> Result<()> {
        fault.rpc = normalize_rpc(&fault.rpc)?;
        if fault.nth == 0 || fault.times == 0 {
            return Err(Error::Scenario("fault nth and times must be >= 1".into()));
        }
        let remaining = fault.times;
        lock(&self.inner.ctl).faults.push(FaultRule {
            fault,
            seen: 0,
            remaining,
        });
        Ok(())
    }

    /// Shorthand: fail the `nth` next call of `rpc` once with `message`.
    pub fn fail_nth(&self, rpc: &str, nth: u64, message: &str) -> Result<()> {
        self.inject_fault(Fault {
            rpc: rpc.to_string(),
            nth,
            times: 1,
            message: message.to_string(),
        })
    }

    /// Adds latency to every call of `rpc` (`*` = all RPCs; zero removes it).
    pub fn set_latency(&self, rpc: &str, latency: Duration) -> Result<()> {
        let rpc = normalize_rpc(rpc)?;
        let mut ctl = lock(&self.inner.ctl);
        if latency.is_zero() {
            ctl.latency.remove(&rpc);
        } else {
            ctl.latency.insert(rpc, latency);
        }
        Ok(())
    }

    /// Makes the `nth` next call of `rpc` hang until [`SimHost::release_hangs`] (or a reboot, which fails it).
    pub fn hang_nth(&self, rpc: &str, nth: u64) -> Result<()> {
        self.add_hang(rpc, nth, false)
    }

    /// Makes the `nth` next call of `rpc` do its work on the host and then hold its answer until
    /// [`SimHost::release_hangs`] (a reboot meanwhile fails the answer; the work stays done): a call that landed while
    /// its caller hears nothing, as over a connection gone silent (csi-proxy finishes the call; the answer waits).
    pub fn hang_answer_nth(&self, rpc: &str, nth: u64) -> Result<()> {
        self.add_hang(rpc, nth, true)
    }

    fn add_hang(&self, rpc: &str, nth: u64, answer: bool) -> Result<()> {
        let rpc = normalize_rpc(rpc)?;
        if nth == 0 {
            return Err(Error::Scenario("hang nth must be >= 1".into()));
        }
        lock(&self.inner.ctl).hangs.push(HangRule {
            rpc,
            nth,
            seen: 0,
            answer,
        });
        Ok(())
    }

    /// Holds a hung call until [`SimHost::release_hangs`] or a reboot (`true`: the reboot, which fails it).
    async fn hold(&self) -> bool {
        let mut rx = self.inner.release.subscribe();
        rx.borrow_and_update();
        self.inner.hung.send_modify(|n| *n += 1);
        self.inner.hangs_begun.send_modify(|n| *n += 1);
        let _guard = HungGuard(&self.inner.hung);
        rx.changed().await.is_ok() && rx.borrow().1
    }

    /// Lets every hung call proceed normally.
    pub fn release_hangs(&self) {
        self.inner.release.send_modify(|(g, fail)| {
            *g += 1;
            *fail = false;
        });
    }

    /// Number of calls hung right now.
    pub fn hung_calls(&self) -> u64 {
        *self.inner.hung.borrow()
    }

    /// Waits until at least `n` calls are hung (no sleeping: woken by the hang itself).
    pub async fn wait_hung(&self, n: u64) {
        let mut rx = self.inner.hung.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }

    /// Number of calls that have hung so far, released or not.
    pub fn hangs_begun(&self) -> u64 {
        *self.inner.hangs_begun.borrow()
    }

    /// Waits until at least `n` calls have hung so far ([`SimHost::hangs_begun`]). Unlike [`SimHost::wait_hung`]
    /// after [`SimHost::wait_unhung`], it cannot miss a new hang that begins before the old one is seen released
    /// (a watch channel keeps only the latest count: 1 → 0 → 1 can look like 1 throughout).
    pub async fn wait_hangs_begun(&self, n: u64) {
        let mut rx = self.inner.hangs_begun.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }

    /// Waits until no call is hung (e.g. after [`SimHost::release_hangs`], without sleeping).
    pub async fn wait_unhung(&self) {
        let mut rx = self.inner.hung.subscribe();
        let _ = rx.wait_for(|c| *c == 0).await;
    }

    /// Removes all faults, pending hangs and latencies (already hung calls stay hung until released).
    pub fn clear_faults(&self) {
        let mut ctl = lock(&self.inner.ctl);
        ctl.faults.clear();
        ctl.hangs.clear();
        ctl.latency.clear();
    }

    // ---- reboot and invariants ----

    /// Reboots the node (see [`State::reboot`]); calls hung at that moment fail.
    pub fn reboot(&self) -> Result<()> {
        self.inner.release.send_modify(|(g, fail)| {
            *g += 1;
            *fail = true;
        });
        lock(&self.inner.state).reboot()
    }

    /// How long the node has been up ([`State::uptime`], `GetTickCount64`).
    pub fn uptime(&self) -> std::time::Duration {
        self.with_state(State::uptime)
    }

    /// The node's Windows build ([`State::windows_build`], `RtlGetVersion`).
    pub fn windows_build(&self) -> u32 {
        self.with_state(State::windows_build)
    }

    /// Lets every hung call go on with a failure, as a process that died in the middle of its calls sees them: the
    /// caller's sequence ends there (what the call itself would have done on the host is not done).
    pub fn fail_hangs(&self) {
        self.inner.release.send_modify(|(g, fail)| {
            *g += 1;
            *fail = true;
        });
    }

    /// Data-loss events so far.
    pub fn data_loss_events(&self) -> Vec<DataLossEvent> {
        self.with_state(|s| s.data_loss_events().to_vec())
    }

    /// `Ok` when no destructive call ever hit data.
    pub fn check_no_data_loss(&self) -> std::result::Result<(), Vec<DataLossEvent>> {
        let ev = self.data_loss_events();
        if ev.is_empty() { Ok(()) } else { Err(ev) }
    }

    /// `Ok` when no SMB mapping, iSCSI session, mount point or link under the kubelet/working dirs is left.
    pub fn check_nothing_left(&self) -> std::result::Result<(), Vec<String>> {
        let l = self.with_state(State::leftovers);
        if l.is_empty() { Ok(()) } else { Err(l) }
    }

    /// Both checks at once.
    pub fn invariants(&self) -> InvariantReport {
        InvariantReport {
            data_loss: self.data_loss_events(),
            leftovers: self.with_state(State::leftovers),
        }
    }

    /// A JSON snapshot of the whole state (no secrets).
    pub fn snapshot(&self) -> serde_json::Value {
        self.with_state(|s| {
            serde_json::json!({
                "boots": s.boots(),
                "csi_proxy_version": s.csi_proxy_version(),
                "csi_proxy": self.csi_proxy_status(),
                "behaviour": s.behaviour(),
                "root": s.root(),
                "kubelet_path": s.cfg.kubelet_path,
                "working_dirs": s.cfg.working_dirs,
                "require_privacy": s.cfg.require_privacy,
                "bios_serial": s.bios_serial,
                "disks": s.disks(),
                "smb_servers": s.servers,
                "mappings": s.mappings(),
                "portals": s.portals(),
                "sessions": s.sessions(),
                "mutual_chap_secret_set": s.mutual_chap_secret.is_some(),
                "services": s.services,
                "data_loss": s.data_loss_events(),
                "leftovers": s.leftovers(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> (SimHost, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let h = SimHost::new(&Scenario::default(), dir.path(), HostOptions::default()).unwrap();
        (h, dir)
    }

    async fn mkdir(h: &SimHost, p: &str) -> Result<()> {
        let p = p.to_string();
        h.call("Mkdir", serde_json::json!({ "path": p }), move |s| {
            s.mkdir(&p)
        })
        .await
    }

    const P: &str = r"C:\var\lib\kubelet\x";

    #[test]
    fn rpc_names_normalise() {
        assert_eq!(
            normalize_rpc("/v1.Volume/FormatVolume").unwrap(),
            "FormatVolume"
        );
        assert_eq!(normalize_rpc("formatvolume").unwrap(), "FormatVolume");
        assert_eq!(normalize_rpc("*").unwrap(), "*");
        assert!(normalize_rpc("Format").is_err());
        assert_eq!(RPCS.len(), 36);
    }

    #[tokio::test]
    async fn nth_call_fails_times_in_a_row_then_recovers() {
        let (h, _d) = host();
        h.inject_fault(Fault {
            rpc: "Mkdir".into(),
            nth: 2,
            times: 2,
            message: "boom".into(),
        })
        .unwrap();
        mkdir(&h, P).await.unwrap();
        assert_eq!(mkdir(&h, P).await.unwrap_err().to_string(), "boom");
        assert_eq!(mkdir(&h, P).await.unwrap_err().to_string(), "boom");
        mkdir(&h, P).await.unwrap();
        let audit = h.audit(0);
        assert_eq!(audit.len(), 4);
        assert_eq!(audit.iter().filter(|e| e.injected).count(), 2);
        assert_eq!(h.call_counts()["Mkdir"], 4);
        assert!(
            h.inject_fault(Fault {
                rpc: "Mkdir".into(),
                nth: 0,
                times: 1,
                message: String::new()
            })
            .is_err()
        );
    }

    #[tokio::test]
    async fn injected_faults_do_not_touch_state() {
        let (h, _d) = host();
        h.fail_nth("*", 1, "Access is denied.").unwrap();
        assert!(mkdir(&h, P).await.is_err());
        assert!(!h.with_state(|s| s.path_exists(P).unwrap()));
    }

    #[tokio::test]
    async fn audit_since_and_clear() {
        let (h, _d) = host();
        mkdir(&h, P).await.unwrap();
        mkdir(&h, r"C:\outside").await.unwrap_err();
        let all = h.audit(0);
        assert_eq!(
            all[1].error.as_deref(),
            Some(r"path: C:\outside is not within the working directories: [C:\var\lib\kubelet]")
        );
        assert_eq!(h.audit(all[0].seq).len(), 1);
        h.clear_audit();
        assert!(h.audit(0).is_empty());
        mkdir(&h, P).await.unwrap();
        assert_eq!(h.audit(0)[0].seq, 3, "sequence numbers are never reused");
    }

    #[tokio::test]
    async fn latency_is_applied_and_removable() {
        let (h, _d) = host();
        h.set_latency("Mkdir", Duration::from_millis(2)).unwrap();
        mkdir(&h, P).await.unwrap();
        assert!(h.audit(0)[0].duration_us >= 2000);
        h.set_latency("Mkdir", Duration::ZERO).unwrap();
        mkdir(&h, P).await.unwrap();
    }

    #[tokio::test]
    async fn hung_call_waits_for_release() {
        let (h, _d) = host();
        h.hang_nth("Mkdir", 1).unwrap();
        let h2 = h.clone();
        let t = tokio::spawn(async move { mkdir(&h2, P).await });
        h.wait_hung(1).await;
        assert_eq!(h.hung_calls(), 1);
        assert!(
            !h.with_state(|s| s.path_exists(P).unwrap()),
            "the hung call has not run"
        );
        h.release_hangs();
        t.await.unwrap().unwrap();
        assert_eq!(h.hung_calls(), 0);
        assert!(h.with_state(|s| s.path_exists(P).unwrap()));
    }

    #[tokio::test]
    async fn reboot_fails_hung_calls() {
        let (h, _d) = host();
        h.hang_nth("Mkdir", 1).unwrap();
        let h2 = h.clone();
        let t = tokio::spawn(async move { mkdir(&h2, P).await });
        h.wait_hung(1).await;
        h.reboot().unwrap();
        assert_eq!(
            t.await.unwrap().unwrap_err().to_string(),
            "The pipe has been ended."
        );
        assert!(h.audit(0)[0].injected);
        assert_eq!(h.audit(0)[0].boot, 2);
    }

    #[tokio::test]
    async fn dropped_hung_call_is_no_longer_counted() {
        let (h, _d) = host();
        h.hang_nth("Mkdir", 1).unwrap();
        let h2 = h.clone();
        let t = tokio::spawn(async move { mkdir(&h2, P).await });
        h.wait_hung(1).await;
        t.abort();
        let _ = t.await;
        let mut rx = h.inner.hung.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
        assert_eq!(h.hung_calls(), 0);
    }

    #[tokio::test]
    async fn invariants_and_snapshot() {
        let (h, _d) = host();
        assert!(h.invariants().ok());
        assert!(h.check_no_data_loss().is_ok());
        assert!(h.check_nothing_left().is_ok());
        let src = r"C:\var\lib\kubelet\src".to_string();
        let dst = r"C:\var\lib\kubelet\dst".to_string();
        h.call("CreateSymlink", serde_json::Value::Null, move |s| {
            s.create_symlink(&src, &dst)
        })
        .await
        .unwrap();
        let left = h.check_nothing_left().unwrap_err();
        assert_eq!(
            left,
            vec![r"symlink C:\var\lib\kubelet\dst -> C:\var\lib\kubelet\src".to_string()]
        );
        assert_eq!(h.snapshot()["leftovers"].as_array().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn load_scenario_replaces_the_host() {
        let (h, _d) = host();
        mkdir(&h, P).await.unwrap();
        let sc = Scenario::from_json(r#"{"host":{"bios_serial":"X"}}"#).unwrap();
        h.load_scenario(&sc).unwrap();
        assert_eq!(h.with_state(|s| s.bios_serial_number()), "X");
        assert!(
            !h.with_state(|s| s.path_exists(P).unwrap()),
            "the sandbox was reset"
        );
    }
}
