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
//! What the driver cannot repair by itself: a mapping Windows does not reconnect once its server answers again (it
//! would have to be created again with the volume's credentials, which the driver never stores). Such a volume stays
//! reported until its pods are deleted (kubelet unstages it and the next pod's stage maps the share again) or another
//! stage of the share repairs the mapping; the README's troubleshooting says so.

use std::collections::BTreeMap;
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
    /// The deadline of each background check.
    pub check_budget: Duration,
}

impl Default for BackgroundSettings {
    fn default() -> Self {
        Self {
            recheck_first: Duration::from_secs(5),
            recheck_max: Duration::from_secs(300),
            check_budget: Duration::from_secs(30),
        }
    }
}

/// The background work's state, shared by the manager and its task.
#[derive(Debug)]
pub(crate) struct Background {
    settings: BackgroundSettings,
    stop: tokio::sync::watch::Sender<bool>,
    /// Volumes whose staging object was left in place while it does not work, and since when.
    unreachable: Mutex<BTreeMap<String, Instant>>,
}

impl Default for Background {
    fn default() -> Self {
        Self::new(BackgroundSettings::default())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Background {
    pub(crate) fn new(settings: BackgroundSettings) -> Self {
        Self {
            settings,
            stop: tokio::sync::watch::Sender::new(false),
            unreachable: Mutex::new(BTreeMap::new()),
        }
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

    fn stopped(&self) -> bool {
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

    /// The background task (module docs): runs until there is nothing left to do or [`Self::stop_background`].
    pub async fn run_background(self: Arc<Self>) {
        let mut stop = self.background.stop.subscribe();
        let settings = self.background.settings.clone();
        let mut delay = settings.recheck_first;
        loop {
            if self.background.stopped() || self.background.watched().is_empty() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stop.changed() => break,
            }
            tokio::select! {
                _ = self.recheck_unreachable() => {}
                _ = stop.changed() => break,
            }
            delay = (delay * 2).min(settings.recheck_max);
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
