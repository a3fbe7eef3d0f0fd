//! Concurrency control: a per-volume operation guard (ABORTED on collision), per-resource async locks (one SMB
//! share root, later one iSCSI target), and the RPC deadline every host call is bounded by. There is no global lock.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;

/// The set of volume ids with an operation in flight.
#[derive(Clone, Debug, Default)]
pub struct VolumeLocks {
    busy: Arc<Mutex<HashSet<String>>>,
}

/// Held while an operation on one volume runs; releases the volume on drop (also when the RPC future is dropped).
#[derive(Debug)]
pub struct VolumeGuard {
    busy: Arc<Mutex<HashSet<String>>>,
    volume_id: String,
}

impl VolumeLocks {
    /// How many volumes have an operation in flight (for tests: the table must drain to empty).
    pub fn len(&self) -> usize {
        self.busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no operation is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Claim `volume_id`, or ABORTED when another operation on it is in flight (the CSI spec's answer; kubelet
    /// retries).
    pub fn try_lock(&self, volume_id: &str, operation: &str) -> Result<VolumeGuard, Error> {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        if !busy.insert(volume_id.to_owned()) {
            return Err(Error::Aborted(format!(
                "volume {volume_id:?} ({operation} refused; retry later)"
            )));
        }
        Ok(VolumeGuard {
            busy: Arc::clone(&self.busy),
            volume_id: volume_id.to_owned(),
        })
    }
}

impl Drop for VolumeGuard {
    fn drop(&mut self) {
        self.busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.volume_id);
    }
}

/// Told how long each acquisition of a [`KeyedLocks`] lock waited, with the lock's key (for metrics).
pub type WaitObserver = Arc<dyn Fn(&str, Duration) + Send + Sync>;

/// Async shared/exclusive locks keyed by a resource name (e.g. a lower-cased `\\server\share`); entries vanish
/// when unused. Exclusive holders change the resource (create, repair or remove it); shared holders only use it, so
/// many of them (e.g. stages of different volumes on one already-mapped share) run at once.
#[derive(Clone, Default)]
pub struct KeyedLocks {
    locks: Arc<Mutex<LockTable>>,
    observer: Option<WaitObserver>,
}

impl std::fmt::Debug for KeyedLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLocks")
            .field("keys", &self.len())
            .field("observed", &self.observer.is_some())
            .finish()
    }
}

type LockTable = HashMap<String, Arc<tokio::sync::RwLock<()>>>;

#[derive(Debug)]
enum Held {
    Shared(#[allow(dead_code)] tokio::sync::OwnedRwLockReadGuard<()>),
    Exclusive(#[allow(dead_code)] tokio::sync::OwnedRwLockWriteGuard<()>),
}

/// Held while one resource is being used (shared) or changed (exclusive).
pub struct KeyedGuard {
    guard: Option<Held>,
    locks: Arc<Mutex<LockTable>>,
    observer: Option<WaitObserver>,
    key: String,
}

impl std::fmt::Debug for KeyedGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedGuard")
            .field("key", &self.key)
            .field("shared", &self.is_shared())
            .finish()
    }
}

impl KeyedLocks {
    /// Locks whose every acquisition (and upgrade) reports its wait to `observer`.
    pub fn with_observer(observer: WaitObserver) -> Self {
        Self {
            locks: Arc::default(),
            observer: Some(observer),
        }
    }

    fn observe(&self, key: &str, since: Instant) {
        if let Some(o) = &self.observer {
            o(key, since.elapsed());
        }
    }

    fn entry(&self, key: &str) -> Arc<tokio::sync::RwLock<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        prune(&mut locks);
        Arc::clone(locks.entry(key.to_owned()).or_default())
    }

    /// Wait for the exclusive lock on `key`.
    pub async fn lock(&self, key: &str) -> KeyedGuard {
        let since = Instant::now();
        let guard = self.entry(key).write_owned().await;
        self.observe(key, since);
        KeyedGuard {
            guard: Some(Held::Exclusive(guard)),
            locks: Arc::clone(&self.locks),
            observer: self.observer.clone(),
            key: key.to_owned(),
        }
    }

    /// Wait for the exclusive lock on `key`, or for `until`, whichever comes first: `None` when `until` finished first
    /// (the queued request is withdrawn, and the time waited is still reported). For a waiter whose reason to want
    /// the exclusive side can go away while it queues (another holder did the work it would do).
    pub async fn lock_unless(
        &self,
        key: &str,
        until: impl Future<Output = ()>,
    ) -> Option<KeyedGuard> {
        let since = Instant::now();
        let entry = self.entry(key);
        let guard = tokio::select! {
            biased;
            guard = entry.write_owned() => Some(guard),
            () = until => None,
        };
        self.observe(key, since);
        guard.map(|guard| KeyedGuard {
            guard: Some(Held::Exclusive(guard)),
            locks: Arc::clone(&self.locks),
            observer: self.observer.clone(),
            key: key.to_owned(),
        })
    }

    /// Wait for the shared lock on `key` (waits while an exclusive holder runs; other shared holders do not block).
    pub async fn lock_shared(&self, key: &str) -> KeyedGuard {
        let since = Instant::now();
        let guard = self.entry(key).read_owned().await;
        self.observe(key, since);
        KeyedGuard {
            guard: Some(Held::Shared(guard)),
            locks: Arc::clone(&self.locks),
            observer: self.observer.clone(),
            key: key.to_owned(),
        }
    }

    /// How many keys currently have a lock entry (for tests: entries must not leak).
    pub fn len(&self) -> usize {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        prune(&mut locks);
        locks.len()
    }

    /// Whether no key has a lock entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl KeyedGuard {
    /// Whether this guard holds the shared side.
    pub fn is_shared(&self) -> bool {
        matches!(self.guard, Some(Held::Shared(_)))
    }

    /// Turn an exclusive guard into a shared one at once (no-op when already shared): no other exclusive holder can
    /// come in between, so what the holder made stays as it left it, and waiting shared holders go on.
    pub fn downgrade(&mut self) {
        // A shared guard is put back as it was (taking it out and dropping it released the lock).
        self.guard = match self.guard.take() {
            Some(Held::Exclusive(g)) => Some(Held::Shared(
                tokio::sync::OwnedRwLockWriteGuard::downgrade(g),
            )),
            held => held,
        };
    }

    /// Turn a shared guard into an exclusive one (no-op when already exclusive). The shared side is released
    /// first (two upgraders would otherwise deadlock), so the caller must re-check whatever it read under it.
    pub async fn upgrade(&mut self) {
        if !self.is_shared() {
            return;
        }
        drop(self.guard.take());
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(locks.entry(self.key.clone()).or_default())
        };
        let since = Instant::now();
        self.guard = Some(Held::Exclusive(lock.write_owned().await));
        if let Some(o) = &self.observer {
            o(&self.key, since.elapsed());
        }
    }
}

/// Drop entries only the map holds. A waiter whose RPC is cancelled (deadline, client gone) drops its handle after
/// the holder's guard has already decided the entry was still wanted, so its entry would otherwise stay forever.
fn prune(locks: &mut LockTable) {
    locks.retain(|_, m| Arc::strong_count(m) > 1);
}

impl Drop for KeyedGuard {
    fn drop(&mut self) {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.guard.take());
        // Only the map still holds the lock: nobody holds or waits for it, so the entry can go.
        if locks
            .get(&self.key)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            locks.remove(&self.key);
        }
    }
}

/// The point in time by which an RPC must answer; every host call is bounded by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(Instant, Option<Instant>);

impl Deadline {
    /// The default budget when the caller sent no `grpc-timeout` (kubelet always does; tools may not).
    pub const DEFAULT_BUDGET: Duration = Duration::from_secs(120);

    /// A deadline `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Self(Instant::now() + budget, None)
    }

    /// A deadline `bound` from now for a call that outlives `caller`, the RPC that issued it (a destructive call run
    /// to its end on a task of its own): the call waits for its answer until the bound, and a backend with
    /// connections judges the call's connection at the caller's deadline (csi-proxy: nothing back on it by then
    /// leaves it for a fresh one, `proxy_client::ProxyClient::running_to`), so the caller's retry does not queue
    /// behind a silent connection.
    pub fn outliving(caller: Deadline, bound: Duration) -> Self {
        Self(Instant::now() + bound, Some(caller.0))
    }

    /// The deadline of the RPC this call outlives ([`Deadline::outliving`]).
    pub fn caller(&self) -> Option<Instant> {
        self.1
    }

    /// The deadline from a `grpc-timeout` header value (`<digits><H|M|S|m|u|n>`), or the default budget.
    pub fn from_grpc_timeout(header: Option<&str>) -> Self {
        Self::after(
            header
                .and_then(parse_grpc_timeout)
                .unwrap_or(Self::DEFAULT_BUDGET),
        )
    }

    /// The deadline of a gRPC request, from its `grpc-timeout` metadata (tonic also enforces it by dropping the
    /// handler; this bound makes every host call end in DEADLINE_EXCEEDED rather than a silent drop).
    pub fn from_metadata(metadata: &tonic::metadata::MetadataMap) -> Self {
        Self::from_grpc_timeout(metadata.get("grpc-timeout").and_then(|v| v.to_str().ok()))
    }

    /// The instant.
    pub fn instant(&self) -> Instant {
        self.0
    }

    /// Time left (zero when passed).
    pub fn remaining(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// Run `fut` bounded by this deadline; `what` names the step for the DEADLINE_EXCEEDED message.
    pub async fn run<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout_at(self.0, fut).await {
            Ok(result) => result,
            Err(_) => Err(Error::DeadlineExceeded(format!(
                "{what} did not finish before the request deadline; the operation is safe to retry"
            ))),
        }
    }
}

fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let value = value.trim();
    // The unit is one ASCII letter (splitting inside a multi-byte character would panic), and the gRPC spec allows at
    // most 8 digits (more could overflow the deadline instant).
    if !value.is_ascii() || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_guard_aborts_collisions_and_releases_on_drop() {
        let locks = VolumeLocks::default();
        let g = locks.try_lock("vol-1", "NodeStageVolume").expect("first");
        assert!(matches!(
            locks.try_lock("vol-1", "NodeStageVolume"),
            Err(Error::Aborted(_))
        ));
        let other = locks
            .try_lock("vol-2", "NodeStageVolume")
            .expect("other volume");
        drop(g);
        let _again = locks
            .try_lock("vol-1", "NodeStageVolume")
            .expect("released");
        drop(other);
    }

    #[tokio::test]
    async fn keyed_locks_serialise_and_clean_up() {
        let locks = KeyedLocks::default();
        let g = locks.lock(r"\\srv\share").await;
        let l2 = locks.clone();
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn(async move {
            let _g = l2.lock(r"\\srv\share").await;
            tx.send(()).ok();
        });
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "second locker must wait");
        let _other = locks.lock(r"\\srv\other").await;
        drop(g);
        waiter.await.expect("join");
        assert!(rx.try_recv().is_ok());
        drop(_other);
        assert!(locks.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn keyed_locks_share_and_exclude() {
        let locks = KeyedLocks::default();
        let a = locks.lock_shared(r"\\srv\share").await;
        let b = locks.lock_shared(r"\\srv\share").await;
        assert!(
            a.is_shared() && b.is_shared(),
            "shared holders do not block each other"
        );
        let probe = tokio::time::timeout(Duration::from_secs(60), locks.lock(r"\\srv\share")).await;
        assert!(
            probe.is_err(),
            "the exclusive side waits for shared holders"
        );
        drop(a);
        let mut b = b;
        b.upgrade().await;
        assert!(!b.is_shared());
        let probe =
            tokio::time::timeout(Duration::from_secs(60), locks.lock_shared(r"\\srv\share")).await;
        assert!(
            probe.is_err(),
            "the shared side waits for an exclusive holder"
        );
        drop(b);
        assert!(locks.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn downgrading_a_shared_guard_keeps_it() {
        let locks = KeyedLocks::default();
        let mut a = locks.lock_shared(r"\\srv\share").await;
        a.downgrade();
        assert!(a.is_shared(), "still the shared side");
        let probe = tokio::time::timeout(Duration::from_secs(60), locks.lock(r"\\srv\share")).await;
        assert!(probe.is_err(), "the exclusive side still waits for it");
        drop(a);
        let mut b = locks.lock(r"\\srv\share").await;
        b.downgrade();
        assert!(b.is_shared());
        b.downgrade();
        assert!(b.is_shared());
        let c = locks.lock_shared(r"\\srv\share").await;
        drop((b, c));
        assert!(locks.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn lock_unless_withdraws_when_its_reason_goes() {
        let locks = KeyedLocks::default();
        let mut maker = locks.lock(r"\\srv\share").await;
        let (done, made) = tokio::sync::oneshot::channel::<()>();
        let waiter = locks.lock_unless(r"\\srv\share", async {
            let _ = made.await;
        });
        tokio::pin!(waiter);
        let probe = tokio::time::timeout(Duration::from_secs(60), &mut waiter).await;
        assert!(probe.is_err(), "queued behind the exclusive holder");
        // The holder did the work and keeps the shared side: the queued request is withdrawn, and a shared
        // request made after it is granted at once.
        maker.downgrade();
        done.send(()).expect("send");
        assert!(waiter.await.is_none());
        let shared = locks.lock_shared(r"\\srv\share").await;
        drop((maker, shared));
        // Free and nothing happened: the exclusive side.
        let g = locks
            .lock_unless(r"\\srv\share", std::future::pending())
            .await;
        assert!(g.is_some_and(|g| !g.is_shared()));
        assert!(locks.is_empty());
    }

    #[test]
    fn grpc_timeout_parsing() {
        assert_eq!(parse_grpc_timeout("15S"), Some(Duration::from_secs(15)));
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse_grpc_timeout("7n"), Some(Duration::from_nanos(7)));
        assert_eq!(parse_grpc_timeout("x"), None);
        assert_eq!(parse_grpc_timeout(""), None);
        assert_eq!(parse_grpc_timeout("10s"), None);
    }

    #[tokio::test]
    async fn run_bounds_by_deadline() {
        // Already expired: no waiting, no timing assumption.
        let d = Deadline::after(Duration::ZERO);
        let r: Result<(), Error> = d.run("NewSmbGlobalMapping", std::future::pending()).await;
        assert!(matches!(r, Err(Error::DeadlineExceeded(m)) if m.contains("NewSmbGlobalMapping")));
    }
}
