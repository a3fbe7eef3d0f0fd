//! The NodeGetVolumeStats cache (`--vol-stats-cache-expire-in-minutes`).
//!
//! kubelet asks every volume of every pod for its stats in the background, once every one to two minutes
//! (`pkg/kubelet/server/stats/volume_stat_calculator.go`: `wait.JitterUntil(calcAndStoreStats, period, 1.0, …)`
//! with `--volume-stats-agg-period`, default 1 minute). An iSCSI volume's answer takes two host calls
//! (`GetVolumeIDFromTargetPath`, `GetVolumeStats`), which on csi-proxy v1.1.3 and v1.2.1 are two `powershell.exe`
//! processes: with 50 LUNs, thousands of processes an hour on a node at rest. The peers cache the answer per volume
//! for `--vol-stats-cache-expire-in-minutes` (csi-driver-smb `pkg/smb/nodeserver.go` `NodeGetVolumeStats`, azuredisk
//! `pkg/azuredisk/azure_common_windows.go` `GetVolumeStats`: 10 minutes, keyed by volume id alone, never
//! invalidated). This one differs where theirs can serve a wrong answer:
//!
//! * **Keyed by volume and path.** An answer is the requested path's (SMB judges the path itself, then the staging
//!   link), so a second pod's target gets its own. The request is checked against the records first (the volume is
//!   staged here, the path is its staging path or one of its publish targets) on every call, hit or miss: an
//!   unstaged volume or an unpublished path is NOT_FOUND at once, never a cached answer.
//! * **Invalidated by every operation that changes a volume**: stage, unstage, publish, unpublish and expand drop
//!   the volume's answers when they start and again when they end (whatever their outcome), so a poll after an
//!   unstage or an expansion computes afresh, and an answer computed while one of them ran is not kept. The
//!   stage's guard is not taken by stats; instead each computation takes a ticket before its host calls, and its
//!   answer is kept only if no invalidation happened since (a counter, [`StatsCache::ticket`]).
//! * **No lock across volumes' work.** The map is sharded by volume and a shard's lock is held only to look up,
//!   insert or remove an entry, never across a host call or an await; two polls of one volume that miss at once
//!   both ask the host (kubelet polls a pod's volumes one after another, so that is rare).
//!
//! Answers are cached whether healthy or abnormal: a volume whose share or session was lost outside the driver keeps
//! its last answer (healthy or not) until the entry expires — the price of not asking the host, and why the default
//! expiry is short (5 minutes; 0 turns the cache off). Errors are never cached.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::VolumeStats;

/// Shards of the map (volumes hash to one each).
const SHARDS: usize = 16;

/// A volume's cached answers, by path key.
#[derive(Debug, Default)]
struct Entry {
    answers: HashMap<String, (Instant, VolumeStats)>,
}

/// What a computation was started under: its answer is kept only if no invalidation came after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(u64);

/// The cache (see the module docs). Off when built with no expiry.
#[derive(Debug)]
pub struct StatsCache {
    expiry: Option<Duration>,
    shards: [Mutex<HashMap<String, Entry>>; SHARDS],
    /// Incremented by every invalidation.
    epoch: AtomicU64,
    /// The epoch of the latest invalidation (of any volume).
    invalidated: AtomicU64,
}

impl Default for StatsCache {
    fn default() -> Self {
        Self::new(None)
    }
}

impl StatsCache {
    /// A cache whose answers expire after `expiry` (`None` or zero: no cache).
    pub fn new(expiry: Option<Duration>) -> Self {
        Self {
            expiry: expiry.filter(|e| !e.is_zero()),
            shards: Default::default(),
            epoch: AtomicU64::new(0),
            invalidated: AtomicU64::new(0),
        }
    }

    /// How long answers are kept (`None`: the cache is off).
    pub fn expiry(&self) -> Option<Duration> {
        self.expiry
    }

    fn shard(&self, volume_id: &str) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        volume_id.hash(&mut h);
        self.shards[(h.finish() as usize) % SHARDS]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached answer for `path_key` of `volume_id`, if fresh.
    pub fn get(&self, volume_id: &str, path_key: &str) -> Option<VolumeStats> {
        let expiry = self.expiry?;
        let mut shard = self.shard(volume_id);
        let entry = shard.get_mut(volume_id)?;
        match entry.answers.get(path_key) {
            Some((at, stats)) if at.elapsed() < expiry => Some(stats.clone()),
            Some(_) => {
                entry.answers.remove(path_key);
                if entry.answers.is_empty() {
                    shard.remove(volume_id);
                }
                None
            }
            None => None,
        }
    }

    /// Taken before a computation's host calls (see [`StatsCache::put`]).
    pub fn ticket(&self) -> Ticket {
        Ticket(self.epoch.load(Ordering::SeqCst))
    }

    /// Keeps `stats` for `path_key` of `volume_id`, unless an invalidation came after `ticket` (the answer may
    /// describe the volume before an unstage or an expansion).
    pub fn put(&self, volume_id: &str, path_key: &str, ticket: Ticket, stats: &VolumeStats) {
        if self.expiry.is_none() {
            return;
        }
        let mut shard = self.shard(volume_id);
        // Checked under the shard's lock, which `invalidate` takes after raising the counter: an invalidation is
        // either seen here or removes the entry after this insert.
        if ticket.0 < self.invalidated.load(Ordering::SeqCst) {
            return;
        }
        shard
            .entry(volume_id.to_owned())
            .or_default()
            .answers
            .insert(path_key.to_owned(), (Instant::now(), stats.clone()));
    }

    /// Drops every answer of `volume_id`; computations ticketed before this keep nothing.
    pub fn invalidate(&self, volume_id: &str) {
        if self.expiry.is_none() {
            return;
        }
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        self.invalidated.fetch_max(epoch, Ordering::SeqCst);
        self.shard(volume_id).remove(volume_id);
    }

    /// Volumes with cached answers (tests and diagnostics).
    pub fn volumes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .len()
            })
            .sum()
    }
}

/// Invalidates a volume's answers when dropped: held by an operation that changes the volume, so its answers go
/// again at its end whatever the outcome (they went at its start too).
#[derive(Debug)]
pub(super) struct Invalidate<'a> {
    cache: &'a StatsCache,
    volume_id: &'a str,
}

impl<'a> Invalidate<'a> {
    /// Invalidates now and again on drop.
    pub(super) fn around(cache: &'a StatsCache, volume_id: &'a str) -> Self {
        cache.invalidate(volume_id);
        Self { cache, volume_id }
    }
}

impl Drop for Invalidate<'_> {
    fn drop(&mut self) {
        self.cache.invalidate(self.volume_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::Usage;

    fn stats(used: i64) -> VolumeStats {
        VolumeStats {
            usage: Usage {
                total: 100,
                used,
                available: 100 - used,
            },
            abnormal: false,
            message: "fine".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_expire_and_invalidation_is_per_volume() {
        let c = StatsCache::new(Some(Duration::from_secs(60)));
        c.put("a", "p", c.ticket(), &stats(1));
        c.put("b", "p", c.ticket(), &stats(2));
        assert_eq!(c.get("a", "p"), Some(stats(1)));
        assert_eq!(c.get("a", "other"), None, "per path");
        c.invalidate("a");
        assert_eq!(c.get("a", "p"), None);
        assert_eq!(c.get("b", "p"), Some(stats(2)), "b keeps its answer");
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(c.get("b", "p"), Some(stats(2)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(c.get("b", "p"), None, "expired");
        assert_eq!(c.volumes(), 0, "expired entries are removed");
    }

    #[test]
    fn an_answer_computed_across_an_invalidation_is_not_kept() {
        let c = StatsCache::new(Some(Duration::from_secs(60)));
        let before = c.ticket();
        c.invalidate("a");
        c.put("a", "p", before, &stats(1));
        assert_eq!(c.get("a", "p"), None);
        c.put("a", "p", c.ticket(), &stats(1));
        assert_eq!(c.get("a", "p"), Some(stats(1)));
        {
            let _op = Invalidate::around(&c, "a");
            assert_eq!(c.get("a", "p"), None, "gone when the operation starts");
            c.put("a", "p", c.ticket(), &stats(3));
        }
        assert_eq!(
            c.get("a", "p"),
            None,
            "and what was computed during it when it ends"
        );
    }

    #[test]
    fn off_keeps_nothing() {
        for c in [StatsCache::new(None), StatsCache::new(Some(Duration::ZERO))] {
            c.put("a", "p", c.ticket(), &stats(1));
            assert_eq!(c.get("a", "p"), None);
            assert_eq!(c.expiry(), None);
        }
    }
}
