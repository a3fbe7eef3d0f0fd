//! Host calls that may outlive their callers, for any protocol: when such a call, announced in a volume's record
//! before it was issued, can no longer be running.
//!
//! csi-proxy runs a call to its end even when its client has gone (no request context reaches `pkg/os` in any
//! release), a WMI provider finishes a method whose caller died, and the native backend runs its destructive
//! operations to their end. So a call that destroys or removes something — `PartitionDisk`, `FormatVolume`,
//! `ResizeVolume` (`crate::iscsi`'s `pending.rs`), `DisconnectTarget` (`iscsi/removal.rs`), and what an SMB unstage
//! removes — is *announced* (written, durable) by its caller before it is issued, and a later operation that finds
//! the announcement without an outcome must learn whether the call can still be running before it does anything the
//! late call would undo or destroy. [`Outlive`] is what this process knows of each announcement it met, keyed by a
//! string the protocol derives from it; the protocol keeps the announcement itself (its record) and judges the
//! call's outcome on the host (a partition, a file system, a session gone).
//!
//! A call cannot still be running, in this order of proof:
//!
//! 1. **A reboot since**: the announcement carries a [`BootStamp`] (the node's uptime, `Host::uptime`) and the
//!    uptime now is lower. Nothing issued before a reboot survives it.
//! 2. **The backend says so** ([`Host::in_flight`]): the native backend knows its own operations still running in
//!    this process and the WMI methods an earlier process left in flight (`host/native/inflight.rs`); it answers
//!    [`InFlight::Ended`] when none can still change the object, [`InFlight::Running`] while one may. csi-proxy runs
//!    the calls out of sight ([`InFlight::Unknown`]).
//! 3. **The bound**: [`OUTLIVE_BOUND`] (one hour) after the announcement, as a last resort (`host::boot` says why an
//!    hour). The age is never the wall clock's: it is the larger of two lower bounds of the true age — the node's
//!    uptime since the announcement's stamp (exact within one boot, shorter after a reboot the uptime could not
//!    show) and this process's own monotonic time since it first saw the announcement. A clock set forward (or back)
//!    shortens no wait.
//!
//! What each costs: one `Host::in_flight` per look at an unsettled announcement (through csi-proxy not a host call
//! at all; natively an in-memory look, and WMI reads only for a method an earlier process left in flight).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Calls;
use crate::error::Error;
use crate::host::{
    BootStamp, Host, HostError, HostErrorKind, HostObject, HostOp, HostResult, InFlight, Since,
};
use crate::locks::Deadline;

pub use crate::host::OUTLIVE_BOUND;

/// The way back from a wait for an announced call whose end cannot be observed, named in every such answer: nothing
/// from before a reboot can still run (module docs).
pub const WAY_BACK: &str = "a reboot of the node ends the wait at once";

/// Run `call`, a host call that may outlive its caller, to its end on a task of its own: `heard` sees its answer there
/// (this process's bookkeeping of the announcement), whoever still waits; the caller waits until `caller`, then gets
/// DEADLINE_EXCEEDED saying `late` while the call goes on. How every announced call is issued: creating calls
/// (`creation.rs`), SMB removals and iSCSI destructive calls.
pub async fn to_end<T: Send + 'static>(
    op: HostOp,
    caller: Deadline,
    late: &'static str,
    call: impl Future<Output = HostResult<T>> + Send + 'static,
    heard: impl FnOnce(&HostResult<T>) + Send + 'static,
) -> HostResult<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let answer = call.await;
        heard(&answer);
        let _ = tx.send(answer);
    });
    match tokio::time::timeout_at(caller.instant(), rx).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(HostError::new(
            op,
            HostErrorKind::Unavailable,
            "the call's task ended without an answer",
        )),
        Err(_) => Err(HostError::new(op, HostErrorKind::DeadlineExceeded, late)),
    }
}

/// The stamp an announcement made now carries: the node's uptime, when the backend can tell.
pub fn stamp_now<H: Host>(host: &H) -> Option<BootStamp> {
    host.uptime().map(BootStamp::at)
}

/// What this process knows of the announcements it met (module docs), keyed by the protocol's key of each. Shared by
/// a protocol's clones; a restarted driver starts again (and learns again from the boot stamps and the host).
///
/// A caller that meets an announcement whose call runs in this very process ([`Outlive::here`]) can wait for it
/// within its own deadline instead of answering UNAVAILABLE: every change of what is known (a call ended, forgotten,
/// or its task in this process returned) is signalled on a watch channel ([`Outlive::changes`]), so the waiter wakes
/// on the event itself, never by polling.
#[derive(Clone, Debug)]
pub struct Outlive {
    map: Arc<Mutex<HashMap<String, Seen>>>,
    changed: Arc<watch::Sender<u64>>,
    /// How many callers wait in [`Outlive::wait_change`] right now.
    waiting: Arc<watch::Sender<usize>>,
}

impl Default for Outlive {
    fn default() -> Self {
        Self {
            map: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
            waiting: Arc::new(watch::channel(0).0),
        }
    }
}

/// Counts a caller in [`Outlive::wait_change`] until dropped (also when its RPC is cancelled mid-wait).
struct Waiting<'a>(&'a watch::Sender<usize>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[derive(Debug)]
struct Seen {
    /// When this process first saw the announcement (made it, or read it).
    first: Instant,
    /// The age the boot stamps gave, and when.
    aged: Option<(Instant, Duration)>,
    verdict: Verdict,
    /// The call runs on a task of this process right now (its answer will be seen here).
    here: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Nothing proven: the bound decides.
    Open,
    /// It cannot still be running: why.
    Ended(String),
    /// The backend knows it may still run: what.
    Running(String),
}

impl Outlive {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Signal a change of what is known to every waiter ([`Outlive::changes`]).
    fn changed(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver of every later change of what is known (a call ended or forgotten, a task of this process
    /// returned). Take it *before* looking, then wait on `changed()`: a change between the look and the wait is not
    /// missed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Wait for the next change on `changes` (taken before the caller's look), at most until `until`: whether one came.
    pub async fn wait_change(&self, changes: &mut watch::Receiver<u64>, until: Instant) -> bool {
        self.waiting.send_modify(|n| *n += 1);
        let _counted = Waiting(&self.waiting);
        matches!(
            tokio::time::timeout_at(until, changes.changed()).await,
            Ok(Ok(()))
        )
    }

    /// How many callers wait in [`Outlive::wait_change`] (tests wait on it for a caller to have started waiting).
    pub fn waiting(&self) -> watch::Receiver<usize> {
        self.waiting.subscribe()
    }

    /// The call announced as `key` runs on a task of this process from now on, until [`Outlive::left_here`].
    pub fn runs_here(&self, key: &str) {
        self.with(key, |seen| seen.here = true);
    }

    /// The task of this process running the call announced as `key` returned (its verdict says what it proved).
    pub fn left_here(&self, key: &str) {
        if let Some(seen) = self.map().get_mut(key) {
            seen.here = false;
        }
        self.changed();
    }

    /// Whether the call announced as `key` runs on a task of this process right now: its end will be signalled.
    pub fn here(&self, key: &str) -> bool {
        self.map().get(key).is_some_and(|s| s.here)
    }

    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Seen) -> T) -> T {
        let mut map = self.map();
        let seen = map.entry(key.to_owned()).or_insert_with(|| Seen {
            first: Instant::now(),
            aged: None,
            verdict: Verdict::Open,
            here: false,
        });
        f(seen)
    }

    /// Start counting for an announcement this process just made.
    pub fn start(&self, key: &str) {
        self.with(key, |_| ());
    }

    /// Forget an announcement whose outcome is known.
    pub fn done(&self, key: &str) {
        self.map().remove(key);
        self.changed();
    }

    /// Learn what the boot and the backend say of the call announced as `key` with `stamp` on `object` (module docs,
    /// steps 1 and 2). Errors only when the backend could not answer for an uncertain reason (deadline, unreachable).
    pub async fn learn<H: Host>(
        &self,
        h: &Calls<'_, H>,
        key: &str,
        stamp: Option<BootStamp>,
        object: &HostObject,
    ) -> Result<(), Error> {
        if matches!(self.verdict(key), Verdict::Ended(_)) {
            return Ok(());
        }
        let since = stamp.zip(h.host().uptime()).map(|(s, now)| s.since(now));
        if since == Some(Since::EarlierBoot) {
            info!(object = %object, "an announced call is from an earlier boot of the node: it cannot still run");
            self.end(key, "the node rebooted since it was issued");
            return Ok(());
        }
        let answer = match h
            .raw(
                crate::host::HostOp::InFlight,
                object,
                h.host().in_flight(object, h.deadline()),
            )
            .await
        {
            Ok(a) => a,
            Err(e) if e.kind.is_uncertain() => return Err(super::host_error(e, object)),
            Err(e) => {
                warn!(object = %object, error = %e.message, "the backend could not say whether its calls still run");
                InFlight::Unknown
            }
        };
        self.with(key, |seen| {
            if let Some(Since::Ago(age)) = since {
                seen.aged = Some((Instant::now(), age));
            }
            seen.verdict = match answer {
                InFlight::Ended => Verdict::Ended(format!(
                    "the backend shows none of its calls on {object} still running"
                )),
                InFlight::Running(what) => Verdict::Running(what),
                InFlight::Unknown => Verdict::Open,
            };
        });
        Ok(())
    }

    /// Record that the call announced as `key` cannot still be running (its outcome shows, or it was proven over).
    pub fn end(&self, key: &str, why: &str) {
        debug!(key, why, "an announced call is over");
        self.with(key, |seen| seen.verdict = Verdict::Ended(why.to_owned()));
        self.changed();
    }

    fn verdict(&self, key: &str) -> Verdict {
        self.map()
            .get(key)
            .map_or(Verdict::Open, |s| s.verdict.clone())
    }

    /// The call's age as far as it is known without the wall clock (module docs, step 3).
    pub fn age(&self, key: &str) -> Duration {
        self.with(key, |seen| {
            let process = seen.first.elapsed();
            seen.aged
                .map_or(process, |(at, age)| process.max(age + at.elapsed()))
        })
    }

    /// Whether the call announced as `key` may still be running: not when proven over, yes while the backend says
    /// so, else while younger than [`OUTLIVE_BOUND`].
    pub fn may_run(&self, key: &str) -> bool {
        match self.verdict(key) {
            Verdict::Ended(_) => false,
            Verdict::Running(_) => true,
            Verdict::Open => self.age(key) < OUTLIVE_BOUND,
        }
    }

    /// What the backend said still runs, if it did.
    pub fn running(&self, key: &str) -> Option<String> {
        match self.verdict(key) {
            Verdict::Running(what) => Some(what),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_age_is_the_larger_lower_bound_and_never_the_wall_clock() {
        let o = Outlive::default();
        o.start("a");
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(o.age("a"), Duration::from_secs(30));
        // The boot stamps say it is older than this process has seen: that counts.
        o.with("a", |s| {
            s.aged = Some((Instant::now(), Duration::from_secs(3000)))
        });
        tokio::time::advance(Duration::from_secs(600)).await;
        assert_eq!(o.age("a"), Duration::from_secs(3600));
        assert!(!o.may_run("a"));
        o.with("b", |s| s.verdict = Verdict::Running("Format".into()));
        tokio::time::advance(OUTLIVE_BOUND).await;
        assert!(
            o.may_run("b"),
            "a call the backend sees running is waited for"
        );
        o.end("b", "its outcome shows");
        assert!(!o.may_run("b"));
        o.done("b");
        assert!(o.may_run("b"), "forgotten: open again, counted from now");
    }
}
