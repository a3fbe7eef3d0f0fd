//! When disks and volumes become visible ([`crate::profile::Arrival`], the host's `behaviour.arrival`).
//!
//! Each pending arrival holds the instant it happens (Plug and Play: a disk's `arrives_at`, a volume's
//! `arrives_at`). The storage cache shows it `cache_lag` later ([`complete`] from [`State::tick`], before every
//! call), or at the first `Rescan` / `UpdateHostStorageCache` (every disk) or `MSFT_Disk.Refresh` (that disk) made
//! once it has happened — never before: a refresh shows what has arrived and hurries nothing.
//!
//! What schedules an arrival: a login (the LUN's disk, then its volumes once the disk is there), a disk coming
//! online (its volumes), `PartitionDisk` / `CreatePartition` (the new volume), a boot's persistent logins (as a
//! login). An offline disk has no volumes to show; its volumes' clocks start again when it comes online.

use std::time::Duration;

use tokio::time::Instant;

use super::State;
use super::disk::Disk;
use crate::profile::Arrival;

/// `now + delay`, or `None` (visible at once) for no delay.
pub(crate) fn due(now: Instant, delay: Duration) -> Option<Instant> {
    (!delay.is_zero()).then(|| now + delay)
}

impl Disk {
    /// A login at `now` brings this LUN's disk: it arrives after its delay, its volumes after theirs from then (an
    /// offline disk shows none until it comes online, which starts their clocks again).
    pub(crate) fn schedule_arrival(&mut self, now: Instant, a: &Arrival) {
        let disk = a.disk(self.arrival_delay_ms);
        self.arrives_at = due(now, disk);
        self.schedule_volumes(now + disk, a);
    }

    /// The disk came online at `now`: its volumes arrive after their delay.
    pub(crate) fn schedule_volumes(&mut self, now: Instant, a: &Arrival) {
        let at = due(now, a.volumes_after_online(self.volume_arrival_delay_ms));
        for v in self.partitions.iter_mut().filter_map(|p| p.volume.as_mut()) {
            v.arrives_at = at;
        }
    }

    /// Whether the disk or any of its volumes is still arriving.
    pub fn arriving(&self) -> bool {
        self.number.is_some()
            && (self.arrives_at.is_some()
                || self
                    .partitions
                    .iter()
                    .filter_map(|p| p.volume.as_ref())
                    .any(|v| v.arrives_at.is_some()))
    }

    /// Forgets every pending arrival (the disk left the host).
    pub(crate) fn clear_arrivals(&mut self) {
        self.arrives_at = None;
        for v in self.partitions.iter_mut().filter_map(|p| p.volume.as_mut()) {
            v.arrives_at = None;
        }
    }
}

/// Makes visible what the storage cache shows at `now`: arrivals that happened at least `lag` ago (a `Rescan` or a
/// `Refresh` passes zero: everything that has happened, nothing that has not). `only`: one disk (`Refresh`). A
/// volume never shows before its disk. Returns whether anything changed.
pub(crate) fn complete(st: &mut State, now: Instant, lag: Duration, only: Option<usize>) -> bool {
    let shown = |t: &Option<Instant>| t.is_some_and(|t| t + lag <= now);
    let mut changed = false;
    for (di, d) in st.disks.iter_mut().enumerate() {
        if only.is_some_and(|o| o != di) {
            continue;
        }
        if shown(&d.arrives_at) {
            d.arrives_at = None;
            changed = true;
        }
        if d.arrives_at.is_some() {
            continue;
        }
        for v in d.partitions.iter_mut().filter_map(|p| p.volume.as_mut()) {
            if shown(&v.arrives_at) {
                v.arrives_at = None;
                changed = true;
            }
        }
    }
    changed
}

/// Every pending arrival at once (a test's or the admin interface's control; no host call does this).
pub(crate) fn force_all(st: &mut State) -> bool {
    let mut changed = false;
    for d in st.disks.iter_mut() {
        changed |= d.arriving();
        d.clear_arrivals();
    }
    changed
}
