//! What a running driver does in the background, besides answering kubelet: one task per driver
//! ([`VolumeManager::run_background`], started after the start-up reconciliation, stopped at shutdown by
//! [`VolumeManager::stop_background`]).
//!
//! # Staging objects left in place during an outage
//!
//! Start-up reconciliation never breaks a path a running pod may use: a staging object that does not work *now*
//! (its file server does not answer, a native mapping is `Reconnecting`) is left as it is ([`Health::Unreachable`]),
//! because kubelet never re-stages a volume it believes mounted — a removed staging link would stay broken after the
//! server returns, and the pods with it. Such volumes are checked again here with the protocol's own check
//! ([`Protocol::check`]: SMB asks `IsSymlink` of the staging link, no host process on any release), first after
//! [`BackgroundSettings::recheck_first`], then at doubling intervals up to [`BackgroundSettings::recheck_max`], each
//! check bounded by [`BackgroundSettings::check_budget`], one volume at a time. A volume leaves the watch when its
//! staging object works again (logged, the pods' paths work again), when its record goes or changes phase (kubelet
//! unstaged or re-staged it: that stage repairs it), or when the driver stops. No lock is held across volumes: each
//! check takes that volume's guard with `try_lock` and skips the volume for this round while an RPC holds it.
//! Meanwhile the volume is counted in `wincsi_state_record_problems{problem="unreachable"}` and each one is logged
//! when found and when it works again.
//!
//! # Volumes kubelet will never unstage
//!
//! The same task scans the records every [`BackgroundSettings::scan_every`] for staged volumes nothing references
//! (`unreferenced.rs`).
//!
//! # What the driver cannot repair by itself
//!
//! A mapping Windows does not reconnect once its server answers again (it would have to be created again with the
//! volume's credentials, which the driver never stores). Such a volume stays reported until its pods are deleted
//! (kubelet unstages it and the next pod's stage maps the share again) or another stage of the share repairs the
//! mapping; the README's troubleshooting says so.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{Health, Protocol, VolumeManager};
use crate::host::Host;
use crate::locks::Deadline;
use crate::state::Phase;

/// How the background work runs (the defaults are the driver's; tests shorten them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackgroundSettings {
    /// The first wait before an unreachable staging object is checked again.
    pub recheck_first: Duration,
    /// The longest wait between two checks of an unreachable staging object (the backoff's cap).
    pub recheck_max: Duration,
    /// The deadline of each background check (and of each release of an unreferenced volume).
    pub check_budget: Duration,
    /// How long a staged volume may go without anything referencing it before it is reported as one kubelet will
    /// never unstage (`--unreferenced-volume-minutes`; `None`: not looked for). See `unreferenced.rs`.
    pub unreferenced_after: Option<Duration>,
    /// How often the volumes are scanned for that.
    pub scan_every: Duration,
    /// Unstage a volume found unreferenced for longer than `unreferenced_after` (`--release-unreferenced-volumes`);
    /// off: only reported.
    pub release_unreferenced: bool,
}

impl Default for BackgroundSettings {
    fn default() -> Self {
        Self {
            recheck_first: Duration::from_secs(5),
            recheck_max: Duration::from_secs(300),
            check_budget: Duration::from_secs(30),
            unreferenced_after: Some(Duration::from_secs(3600)),
            scan_every: Duration::from_secs(300),
            release_unreferenced: false,
        }
    }
}

/// The background work's state, shared by the manager and its task.
#[derive(Debug)]
pub(crate) struct Background {
    pub(super) settings: BackgroundSettings,
    stop: tokio::sync::watch::Sender<bool>,
    /// Volumes whose staging object was left in place while it does not work, and since when.
    unreachable: Mutex<BTreeMap<String, Instant>>,
    /// When this process started: a volume nothing touched since counts as last referenced then.
    pub(super) started: Instant,
    /// When a volume was last referenced: named by an RPC, or found referenced by a scan (`unreferenced.rs`).
    pub(super) activity: Mutex<HashMap<String, Instant>>,
    /// Volumes found unreferenced for longer than the bound, and since when they were last referenced.
    pub(super) stranded: Mutex<BTreeMap<String, Instant>>,
}

impl Default for Background {
    fn default() -> Self {
        Self::new(BackgroundSettings::default())
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Background {
    pub(crate) fn new(settings: BackgroundSettings) -> Self {
        Self {
            settings,
            stop: tokio::sync::watch::Sender::new(false),
            unreachable: Mutex::new(BTreeMap::new()),
            started: Instant::now(),
            activity: Mutex::new(HashMap::new()),
            stranded: Mutex::new(BTreeMap::new()),
        }
    }

    /// An RPC named `volume_id`: kubelet still acts on it (the whole cost on the hot path: one map insert).
    pub(crate) fn touched(&self, volume_id: &str) {
        let now = Instant::now();
        lock(&self.activity).insert(volume_id.to_owned(), now);
    }

    /// Watch `volume_id`'s staging object (found not working, left in place).
    pub(crate) fn watch_unreachable(&self, volume_id: &str) {
        lock(&self.unreachable)
            .entry(volume_id.to_owned())
            .or_insert_with(Instant::now);
    }

    fn unwatch(&self, volume_id: &str) -> Option<Instant> {
        lock(&self.unreachable).remove(volume_id)
    }

    fn watched(&self) -> Vec<String> {
        lock(&self.unreachable).keys().cloned().collect()
    }

    pub(super) fn stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

impl<H: Host, P: Protocol<H>> VolumeManager<H, P> {
    /// Run the background work with `settings` (instead of the defaults).
    pub fn with_background(mut self, settings: BackgroundSettings) -> Self {
        self.background = Background::new(settings);
        self
    }

    /// The volumes whose staging object was left in place while it does not work (module docs), being checked again.
    pub fn unreachable_volumes(&self) -> Vec<String> {
        self.background.watched()
    }

    /// Stop the background work (at shutdown): the task ends at its next step, a check in flight is dropped.
    pub fn stop_background(&self) {
        self.background.stop.send_replace(true);
    }

    /// The background task (module docs): re-checks of unreachable staging objects with backoff, and the periodic
    /// scan for volumes kubelet will never unstage (`unreferenced.rs`); runs until there is nothing left to do or
    /// [`Self::stop_background`].
    pub async fn run_background(self: Arc<Self>) {
        let mut stop = self.background.stop.subscribe();
        let settings = self.background.settings.clone();
        let mut delay = settings.recheck_first;
        let start = Instant::now();
        let mut next_recheck = Some(start + delay);
        let mut next_scan = settings
            .unreferenced_after
            .map(|_| start + settings.scan_every);
        loop {
            if self.background.watched().is_empty() {
                next_recheck = None;
            }
            let wake = match (next_recheck, next_scan) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            if self.background.stopped() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                _ = stop.changed() => break,
            }
            let now = Instant::now();
            if next_recheck.is_some_and(|t| t <= now) {
                tokio::select! {
                    _ = self.recheck_unreachable() => {}
                    _ = stop.changed() => break,
                }
                delay = (delay * 2).min(settings.recheck_max);
                next_recheck = Some(Instant::now() + delay);
            }
            if next_scan.is_some_and(|t| t <= now) {
                tokio::select! {
                    _ = self.scan_unreferenced() => {}
                    _ = stop.changed() => break,
                }
                next_scan = Some(Instant::now() + settings.scan_every);
            }
        }
        debug!("background work stopped");
    }

    /// Check every watched volume's staging object once (module docs); the volumes still unreachable afterwards.
    pub async fn recheck_unreachable(&self) -> usize {
        for volume_id in self.background.watched() {
            if self.background.stopped() {
                break;
            }
            self.recheck_one(&volume_id).await;
        }
        self.background.watched().len()
    }

    async fn recheck_one(&self, volume_id: &str) {
        let Ok(_guard) = self.volumes.try_lock(volume_id, "background check") else {
            debug!(volume_id, "busy: checked again next round");
            return;
        };
        let rec = match self.store.volume(volume_id) {
            Ok(Some(rec)) if rec.phase == Phase::Staged => rec,
            Ok(_) => {
                self.background.unwatch(volume_id);
                debug!(
                    volume_id,
                    "unstaged or being staged again: no longer watched"
                );
                return;
            }
            Err(e) => {
                debug!(volume_id, error = %e, "record unreadable: checked again next round");
                return;
            }
        };
        let Ok(staging) = self.cfg.kubelet_root.host_path(&rec.staging_path) else {
            self.background.unwatch(volume_id);
            return;
        };
        let d = Deadline::after(self.background.settings.check_budget);
        match self.protocol.check(self.context(), &rec, &staging, d).await {
            Ok(Health::Unreachable) => {
                debug!(volume_id, staging = %staging, "staging object still does not work")
            }
            Ok(Health::Healthy) => {
                let since = self.background.unwatch(volume_id);
                info!(volume_id, staging = %staging, down_s = since.map_or(0, |s| s.elapsed().as_secs()),
                      "the staging object left in place works again: the pods' paths resolve");
            }
            Ok(Health::NeedsRestage) => {
                self.background.unwatch(volume_id);
                warn!(volume_id, staging = %staging, "the staging object was found broken and marked for re-stage");
            }
            Err(e) => {
                debug!(volume_id, error = %e, "cannot check the staging object: checked again next round")
            }
        }
    }
}
