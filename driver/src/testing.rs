//! The one model of a Windows host in the driver's unit tests: the simulated host (`sim`), reached through one of
//! the two real backends, chosen by `WINCSI_TEST_HOST_BACKEND` (read once, by `sim::wmi::TestBackend::from_env`):
//!
//! * `csi-proxy` (default): the csi-proxy adapter ([`CsiProxyHost`]) over the simulated csi-proxy served in-process
//!   over in-memory connections, so every unit test also runs the adapter's error classification. The sim's audit
//!   log gives the exact host-call sequences the tests assert; its faults, hangs and scripts give the failure
//!   injection.
//! * `native`: the native backend ([`NativeHost`]) over the simulated host's Windows view (`sim::wmi::WindowsView`,
//!   WMI and Win32 through the `winhost` facade), behind a port-level [`Tap`] that records the host operations (the
//!   same [`Call`]s, so the same sequences are asserted) and injects the tests' faults, holds and outages at the port
//!   (`host::native::testing` explains why); the WMI-level sequences are the native backend's own tests.
//!
//! [`Env`] is a driver (a [`Manager`] over a fresh state directory) on such a host, with kubelet's habits (it creates
//! the parent directories of staging and target paths before calling the driver) and the views the tests assert on.

use std::path::Path;
use std::sync::Arc;

use sim::inproc::InProcess;
use sim::process::DriverProcess;
use sim::wmi::{TestBackend, WindowsView};
use sim::{HostOptions, Scenario, SimHost, State};

use crate::backend::{Manager, manager_with};
use crate::error::Error;
use crate::host::csi_proxy::CsiProxyHost;
use crate::host::native::NativeHost;
use crate::host::native::testing::{Tap, TapHooks, Tapped, TestHost};
use crate::host::{HostOp, KubeletRoot};
use crate::lifecycle::{PublishRequest, SecretSource, StageRequest, VolumeConfig};
use crate::locks::Deadline;

/// One audited host call (paths as the driver sent them; secrets are redacted by the sim).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// `PathExists(path)`.
    PathExists(String),
    /// `Mkdir(path)`.
    Mkdir(String),
    /// `Rmdir(path, force)`.
    Rmdir(String, bool),
    /// `CreateSymlink(link → points_to)`.
    CreateSymlink { link: String, points_to: String },
    /// `IsSymlink(path)`.
    IsSymlink(String),
    /// `NewSmbGlobalMapping(remote, link, principal)`.
    NewSmbGlobalMapping {
        remote: String,
        link: Option<String>,
        principal: Option<String>,
    },
    /// `RemoveSmbGlobalMapping(remote)`.
    RemoveSmbGlobalMapping(String),
    /// Any other call, with its audited arguments.
    Other(HostOp, serde_json::Value),
}

/// The host operation of a csi-proxy RPC name.
fn op_of(rpc: &str) -> HostOp {
    use HostOp::*;
    const ALL: &[HostOp] = &[
        PathExists,
        Mkdir,
        Rmdir,
        CreateSymlink,
        IsSymlink,
        NewSmbGlobalMapping,
        RemoveSmbGlobalMapping,
        ListDiskLocations,
        ListDiskIDs,
        Rescan,
        PartitionDisk,
        GetDiskStats,
        SetDiskState,
        GetDiskState,
        ListVolumesOnDisk,
        MountVolume,
        UnmountVolume,
        IsVolumeFormatted,
        FormatVolume,
        ResizeVolume,
        GetVolumeStats,
        GetVolumeIDFromTargetPath,
        WriteVolumeCache,
        AddTargetPortal,
        DiscoverTargetPortal,
        ConnectTarget,
        DisconnectTarget,
        GetTargetDisks,
        SetMutualChapSecret,
        GetDiskNumberFromVolumeID,
        ListTargetPortals,
        ReadLink,
        RemoveTargetPortal,
        RefreshTargetPortal,
        DiskLayout,
        ListIscsiSessions,
        MultipathClaim,
        TargetPaths,
        PathSpace,
    ];
    ALL.iter()
        .copied()
        .find(|op| op.name() == rpc)
        .unwrap_or_else(|| panic!("the driver has no host operation for RPC {rpc}"))
}

impl Call {
    fn from_audit(e: &sim::AuditEntry) -> Self {
        Self::from_args(&e.rpc, &e.args)
    }

    fn from_args(rpc: &str, args: &serde_json::Value) -> Self {
        let s = |k: &str| args[k].as_str().unwrap_or_default().to_owned();
        let opt = |k: &str| Some(s(k)).filter(|v| !v.is_empty());
        match rpc {
            "PathExists" => Self::PathExists(s("path")),
            "Mkdir" => Self::Mkdir(s("path")),
            "Rmdir" => Self::Rmdir(s("path"), args["force"].as_bool().unwrap_or_default()),
            "CreateSymlink" => Self::CreateSymlink {
                link: s("target_path"),
                points_to: s("source_path"),
            },
            "IsSymlink" => Self::IsSymlink(s("path")),
            "NewSmbGlobalMapping" => Self::NewSmbGlobalMapping {
                remote: s("remote_path"),
                link: opt("local_path"),
                principal: opt("username"),
            },
            "RemoveSmbGlobalMapping" => Self::RemoveSmbGlobalMapping(s("remote_path")),
            rpc => Self::Other(op_of(rpc), args.clone()),
        }
    }

    /// The operation of this call.
    pub(crate) fn op(&self) -> HostOp {
        match self {
            Self::PathExists(_) => HostOp::PathExists,
            Self::Mkdir(_) => HostOp::Mkdir,
            Self::Rmdir(..) => HostOp::Rmdir,
            Self::CreateSymlink { .. } => HostOp::CreateSymlink,
            Self::IsSymlink(_) => HostOp::IsSymlink,
            Self::NewSmbGlobalMapping { .. } => HostOp::NewSmbGlobalMapping,
            Self::RemoveSmbGlobalMapping(_) => HostOp::RemoveSmbGlobalMapping,
            Self::Other(op, _) => *op,
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Other(op, args) => write!(f, "{op}({args})"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// kubelet's drive-less spelling (`\var\lib\kubelet\…`) on the kubelet root's drive, as the host sees it.
fn on_drive(path: &str) -> String {
    if path.starts_with('\\') && !path.starts_with("\\\\") {
        format!("C:{path}")
    } else {
        path.to_owned()
    }
}

/// A deadline no test reaches.
pub(crate) fn d() -> Deadline {
    Deadline::after(std::time::Duration::from_secs(600))
}

/// The kubelet root every test uses.
pub(crate) const KUBELET: &str = r"C:\var\lib\kubelet";

/// The iSCSI settings of the unit tests' driver: a 2 s settle time, generous against the simulated host's default
/// arrival (volumes 0.5 s after a disk comes online or is partitioned, shown 0.5 s later without a `Rescan`), and
/// short, so the tests' looks stay few (their clock is paused, but every look is a host call).
pub(crate) const ISCSI: crate::iscsi::IscsiSettings = crate::iscsi::IscsiSettings {
    settle: std::time::Duration::from_secs(2),
};

/// A driver on an in-process simulated host.
pub(crate) struct Env {
    pub(crate) sim: SimHost,
    pub(crate) inproc: InProcess,
    pub(crate) mgr: Arc<Manager<TestHost>>,
    /// The driver process running now: a restart kills it (`sim::process`).
    process: DriverProcess,
    /// The state directory of the process running now.
    pub(crate) dir: tempfile::TempDir,
    /// The state directories dead processes left (they may still write there; no live process reads them).
    graves: Vec<tempfile::TempDir>,
    /// The backend under test.
    pub(crate) backend: TestBackend,
    /// The native backend's port tap (shared across restarts, like the sim's audit).
    tap: Arc<Tap>,
    secrets: Option<Arc<dyn SecretSource>>,
    /// `--vol-stats-cache-expire-in-minutes` of the driver (off unless a test turns it on).
    stats_cache: Option<std::time::Duration>,
    /// `--max-volumes-per-node` of the driver (none unless a test sets it).
    volume_limit: Option<u64>,
    /// The lifecycle's background work (the driver's defaults unless a test changes them).
    background: crate::lifecycle::BackgroundSettings,
    _sandbox: tempfile::TempDir,
}

impl Env {
    /// The simulated host loaded with `scenario` (JSON, see `sim/README.md`) and a driver over a fresh state dir, on
    /// the backend `WINCSI_TEST_HOST_BACKEND` names.
    pub(crate) fn new(scenario: &serde_json::Value) -> Self {
        Self::on(TestBackend::from_env_or_panic(), scenario)
    }

    /// [`Env::new`] on `backend` (tests of one backend's behaviour).
    pub(crate) fn on(backend: TestBackend, scenario: &serde_json::Value) -> Self {
        let sandbox = tempfile::tempdir().expect("tmp");
        let dir = tempfile::tempdir().expect("tmp");
        let scenario = Scenario::from_json(&scenario.to_string()).expect("scenario");
        let sim = SimHost::new(&scenario, sandbox.path(), HostOptions::default()).expect("sim");
        let inproc = InProcess::new(sim.clone());
        let (gate, after) = (inproc.clone(), inproc.clone());
        let tap = Tap::new(TapHooks {
            unreachable: Box::new(move |rpc| gate.unreachable_now(rpc)),
            after: Box::new(move |rpc| after.run_after(rpc)),
        });
        let background = crate::lifecycle::BackgroundSettings::default();
        let process = DriverProcess::new();
        let mgr = Self::manager(
            backend,
            &process,
            &inproc,
            &tap,
            dir.path(),
            None,
            None,
            None,
            &background,
        );
        Self {
            sim,
            inproc,
            mgr,
            process,
            dir,
            graves: Vec::new(),
            backend,
            tap,
            secrets: None,
            stats_cache: None,
            volume_limit: None,
            background,
            _sandbox: sandbox,
        }
    }

    // The restartable parts of a test driver, each kept by the environment for the next restart.
    #[allow(clippy::too_many_arguments)]
    fn manager(
        backend: TestBackend,
        process: &DriverProcess,
        inproc: &InProcess,
        tap: &Arc<Tap>,
        dir: &Path,
        secrets: Option<&Arc<dyn SecretSource>>,
        stats_cache: Option<std::time::Duration>,
        volume_limit: Option<u64>,
        background: &crate::lifecycle::BackgroundSettings,
    ) -> Arc<Manager<TestHost>> {
        let cfg = VolumeConfig {
            kubelet_root: KubeletRoot::new(KUBELET).expect("root"),
            driver_name: "wincsi.csi.io".into(),
        };
        let mut seed = None;
        let host = match backend {
            TestBackend::CsiProxy => {
                let sim = inproc.host().clone();
                TestHost::CsiProxy(
                    CsiProxyHost::new(inproc.client_of(process))
                        .with_uptime(Arc::new(move || Some(sim.uptime()))),
                )
            }
            TestBackend::Native => {
                let view = Arc::new(process.view(WindowsView::new(inproc.host().clone())));
                let native = NativeHost::new(view, Some(dir));
                seed = Some(native.clone());
                TestHost::Native(Tapped::of_process(
                    native,
                    Arc::clone(tap),
                    process.death_flag(),
                ))
            }
        };
        let mgr = manager_with(host, cfg, dir, ISCSI)
            .expect("manager")
            .with_stats_cache(stats_cache)
            .with_volume_limit(volume_limit)
            .with_background(background.clone());
        // As `backend::native_lifecycle` does: the shares the records say this driver mapped are its own.
        if let Some(native) = seed {
            crate::backend::adopt_recorded_mappings(&native, mgr.store());
        }
        Arc::new(match secrets {
            Some(s) => mgr.with_secret_source(Arc::clone(s)),
            None => mgr,
        })
    }

    /// Another driver over this host and state directory whose records go through `store` (tests that stop or fail
    /// its commits: `StateStore::open_with_dir_sync_hook`).
    pub(crate) fn manager_with_store(&self, store: crate::state::StateStore) -> Manager<TestHost> {
        let mgr = Self::manager(
            self.backend,
            &self.process,
            &self.inproc,
            &self.tap,
            self.dir.path(),
            None,
            self.stats_cache,
            self.volume_limit,
            &self.background,
        );
        Arc::into_inner(mgr)
            .expect("a new manager")
            .with_store(store)
    }

    /// The same host and state directory, driven by `backend` from now on: a node moved between the chart's modes
    /// (a restarted driver).
    pub(crate) fn switch_backend(&mut self, backend: TestBackend) {
        self.backend = backend;
        self.restart();
    }

    /// Read inline volumes' Secrets from `source` (now and after restarts).
    pub(crate) fn set_secret_source(&mut self, source: Arc<dyn SecretSource>) {
        self.secrets = Some(source);
        self.restart();
    }

    /// A killed and restarted driver: the driver process dies (`sim::process`: nothing it had in progress — a task it
    /// spawned, a call it would make next — reaches the host or the state directory any more; a call the host was
    /// already running finishes there, csi-proxy's and a WMI method's alike), and a new process starts over the same
    /// host and the state directory as the dead one left it (a copy taken at its death).
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.process = DriverProcess::new();
        self.mgr = Self::manager(
            self.backend,
            &self.process,
            &self.inproc,
            &self.tap,
            self.dir.path(),
            self.secrets.as_ref(),
            self.stats_cache,
            self.volume_limit,
            &self.background,
        );
    }

    /// The driver process dies now ([`Env::restart`] starts the next one): its connections break, its Windows view
    /// refuses its calls, and its state directory is kept as it was at the death. Killing a dead process changes
    /// nothing.
    pub(crate) fn kill(&mut self) {
        if self.process.kill() {
            let copy = tempfile::tempdir().expect("tmp");
            sim::process::snapshot(self.dir.path(), copy.path()).expect("the state at the death");
            self.graves.push(std::mem::replace(&mut self.dir, copy));
        }
    }

    /// Restart the driver with `--max-volumes-per-node limit`.
    pub(crate) fn set_volume_limit(&mut self, limit: u64) {
        self.volume_limit = Some(limit);
        self.restart();
    }

    /// Restart the driver with these background settings (`--unreferenced-volume-minutes`, …).
    pub(crate) fn set_background(&mut self, settings: crate::lifecycle::BackgroundSettings) {
        self.background = settings;
        self.restart();
    }

    /// Restart the driver with its NodeGetVolumeStats cache on (`--vol-stats-cache-expire-in-minutes`).
    pub(crate) fn set_stats_cache(&mut self, expiry: std::time::Duration) {
        self.stats_cache = Some(expiry);
        self.restart();
    }

    // ---- kubelet ----

    /// Create a directory and its parents on the host, as kubelet (or an administrator) would: not a driver call.
    pub(crate) fn mkdir(&self, path: &str) {
        let path = on_drive(path);
        self.sim
            .with_state_mut(|s| s.mkdir(&path))
            .unwrap_or_else(|e| panic!("mkdir {path}: {e}"));
    }

    /// What kubelet does before NodeStage / NodePublish: create the parent directory of `path` (where the host
    /// allows it: a path outside the kubelet root is the driver's to refuse).
    pub(crate) fn mkdir_parent(&self, path: &str) {
        if let Some((parent, _)) = on_drive(path).rsplit_once('\\') {
            let _ = self.sim.with_state_mut(|s| s.mkdir(parent));
        }
    }

    /// NodeStageVolume as kubelet sends it (the parent of the staging path exists).
    pub(crate) async fn stage(&self, req: &StageRequest, d: Deadline) -> Result<(), Error> {
        self.mkdir_parent(&req.staging_target_path);
        self.mgr.stage(req, d).await
    }

    /// NodePublishVolume as kubelet sends it (the parent of the target path exists).
    pub(crate) async fn publish(&self, req: &PublishRequest, d: Deadline) -> Result<(), Error> {
        self.mkdir_parent(&req.target_path);
        self.mgr.publish(req, d).await
    }

    /// `csi_proxy` or `native`, by the backend under test (where the backends' documented differences change a
    /// sequence).
    pub(crate) fn per_backend<T>(&self, csi_proxy: T, native: T) -> T {
        match self.backend {
            TestBackend::CsiProxy => csi_proxy,
            TestBackend::Native => native,
        }
    }

    // ---- the audit ----

    /// Every host call since the last [`Env::clear_calls`].
    pub(crate) fn calls(&self) -> Vec<Call> {
        match self.backend {
            TestBackend::CsiProxy => self.sim.audit(0).iter().map(Call::from_audit).collect(),
            TestBackend::Native => self
                .tap
                .calls()
                .iter()
                .map(|c| Call::from_args(c.op.name(), &c.args))
                .collect(),
        }
    }

    /// The operations of [`Env::calls`].
    pub(crate) fn ops(&self) -> Vec<HostOp> {
        self.calls().iter().map(Call::op).collect()
    }

    /// The operations so far, then forget them.
    pub(crate) fn take_ops(&self) -> Vec<HostOp> {
        let ops = self.ops();
        self.clear_calls();
        ops
    }

    /// Forget the recorded calls (the host's state is kept).
    pub(crate) fn clear_calls(&self) {
        self.sim.clear_audit();
        self.tap.clear();
    }

    /// The calls rendered as text (secrets are redacted by the sim).
    pub(crate) fn calls_text(&self) -> String {
        self.calls()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    // ---- failure injection ----

    /// From call number `n + 1` on (counted from now over all operations), the host does not answer, as if the
    /// driver had been killed after `n` host calls; wait for that point with [`Env::hung`].
    pub(crate) fn hang_after(&self, n: usize) {
        match self.backend {
            TestBackend::CsiProxy => self.sim.hang_nth("*", n as u64 + 1).expect("hang"),
            TestBackend::Native => self.tap.hang_nth(None, n as u64 + 1),
        }
    }

    /// Let the `nth` next call of `op` land on the host and hold its answer until [`Env::release`] (as over a
    /// connection gone silent; natively, a facade call whose work is done and whose return is late).
    pub(crate) fn hold_answer_nth(&self, op: HostOp, nth: u64) {
        match self.backend {
            TestBackend::CsiProxy => self.sim.hang_answer_nth(op.name(), nth).expect("hold"),
            TestBackend::Native => self.tap.hang_answer_nth(Some(op), nth),
        }
    }

    /// Hold the `nth` next call of `op` until [`Env::release`].
    pub(crate) fn hold_nth(&self, op: HostOp, nth: u64) {
        match self.backend {
            TestBackend::CsiProxy => self.sim.hang_nth(op.name(), nth).expect("hold"),
            TestBackend::Native => self.tap.hang_nth(Some(op), nth),
        }
    }

    /// Let the held call go on.
    pub(crate) fn release(&self) {
        self.sim.release_hangs();
        self.tap.release();
    }

    /// Resolves once a call is held or hung.
    pub(crate) async fn hung(&self) {
        self.hung_at_least(1).await;
    }

    /// Resolves once at least `n` calls are held or hung.
    pub(crate) async fn hung_at_least(&self, n: u64) {
        match self.backend {
            TestBackend::CsiProxy => self.sim.wait_hung(n).await,
            TestBackend::Native => self.tap.wait_hung(n).await,
        }
    }

    /// How many calls are held or hung right now.
    pub(crate) fn hung_calls(&self) -> u64 {
        match self.backend {
            TestBackend::CsiProxy => self.sim.hung_calls(),
            TestBackend::Native => self.tap.hung_calls(),
        }
    }

    /// Fail the `nth` next call of `op` with csi-proxy's error `text` (native: at the port, classified as csi-proxy's
    /// text would be).
    pub(crate) fn fail_nth(&self, op: HostOp, nth: u64, text: &str) {
        match self.backend {
            TestBackend::CsiProxy => self.sim.fail_nth(op.name(), nth, text).expect("fault"),
            TestBackend::Native => self.tap.fail_nth(Some(op), nth, text),
        }
    }

    /// The `nth` next call of `op` finds csi-proxy unreachable.
    pub(crate) fn unavailable_nth(&self, op: HostOp, nth: u64) {
        self.inproc
            .fail_unavailable(op.name(), nth)
            .expect("outage");
    }

    // ---- views ----

    /// Run `f` on the host's state (inspection).
    pub(crate) fn state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        self.sim.with_state(f)
    }

    /// Change the host's state outside any call (scripting).
    pub(crate) fn script<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.sim.with_state_mut(f)
    }

    /// Whether `path` exists on the host (a dangling link exists too).
    pub(crate) fn exists(&self, path: &str) -> bool {
        self.state(|s| s.path_exists(&on_drive(path)).unwrap_or(false))
    }

    /// Whether `path` resolves on the host, following links.
    pub(crate) fn resolves(&self, path: &str) -> bool {
        self.state(|s| s.path_resolves(&on_drive(path)))
    }

    /// Mappings, sessions, mount points and links the host still has under the kubelet root.
    pub(crate) fn leftovers(&self) -> Vec<String> {
        self.state(State::leftovers)
    }

    /// Destructive calls that hit data.
    pub(crate) fn data_loss(&self) -> Vec<String> {
        self.sim
            .data_loss_events()
            .iter()
            .map(|e| e.detail.clone())
            .collect()
    }

    /// No mapping, session, link or mount point is left on the host, and no record in the driver's store.
    pub(crate) fn assert_clean(&self) {
        assert!(
            self.leftovers().is_empty(),
            "left on the host: {:?}",
            self.leftovers()
        );
        assert!(
            self.data_loss().is_empty(),
            "data loss: {:?}",
            self.data_loss()
        );
        assert!(
            self.mgr.store().volumes().expect("list").is_empty(),
            "leaked volume records"
        );
        assert!(
            self.mgr.store().publications().expect("list").is_empty(),
            "leaked publish records"
        );
    }
}

/// A record store whose directory `fsync`s stop, while [`HeldCommits::armed`], until the test answers on
/// [`HeldCommits::release`] (`Ok`, or an error as a crash or a full disk would give): for tests of the
/// write-before-host-object rule.
pub(crate) struct HeldCommits {
    /// Whether the next directory `fsync`s stop.
    pub(crate) armed: Arc<std::sync::atomic::AtomicBool>,
    /// The directory of each `fsync` that stopped, as it stops.
    pub(crate) reached: tokio::sync::mpsc::UnboundedReceiver<std::path::PathBuf>,
    /// Lets one stopped `fsync` go on with this outcome (dropping it lets every one go on).
    pub(crate) release: std::sync::mpsc::Sender<std::io::Result<()>>,
}

/// A store over `dir` whose commits can be held (see [`HeldCommits`]), armed from the start or not.
pub(crate) fn held_commits(dir: &Path, armed: bool) -> (crate::state::StateStore, HeldCommits) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let armed = Arc::new(AtomicBool::new(armed));
    let (reached_tx, reached) = tokio::sync::mpsc::unbounded_channel();
    let (release, release_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let on = Arc::clone(&armed);
    let store = crate::state::StateStore::open_with_dir_sync_hook(dir, move |d| {
        if !on.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _ = reached_tx.send(d.to_path_buf());
        release_rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv()
            .unwrap_or(Ok(()))
    })
    .expect("store");
    let held = HeldCommits {
        armed,
        reached,
        release,
    };
    (store, held)
}
