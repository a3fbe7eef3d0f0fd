//! Creating host calls that may outlive their callers, for any protocol (issue 37, kubelet's "give up and unstage").
//!
//! A stage's call that creates something on the host — an SMB mapping and its staging link (`NewSmbGlobalMapping`),
//! a subDir made through that link (`Mkdir`), an iSCSI login (`ConnectTarget`) — can hang past the RPC's deadline
//! and still land later: csi-proxy runs a call to its end whatever its client does (no request context reaches
//! `pkg/os` in any release), a WMI provider finishes a method whose caller went away, and natively the facade call
//! goes on on its thread. kubelet meanwhile marks the device uncertain and, once the pod is deleted, calls
//! NodeUnstage instead of retrying (`kubelet-csi-paths.md` §1–2). An unstage that answered OK before the late call
//! landed would leave what it made for ever (kubelet never calls again). So, like a destructive call or a removal
//! (`outlive.rs`):
//!
//! * **announced** — the stage writes a [`Creation`] in the volume's record (durable) before each creating call (the
//!   calls of a stage are sequential, so the record names the one that may still run: an SMB subDir stage writes
//!   three); the `Staged` write retires it;
//! * **run to its end** — each creating call runs on its own task with its own bound ([`OUTLIVE_BOUND`]), so this
//!   process learns when it answers; the caller stops waiting at its deadline as before;
//! * **waited for by the unstage** — an unstage that finds an announcement answers UNAVAILABLE (kubelet retries it,
//!   the device staying uncertain) until the calls cannot still run: this process saw every creating call of the
//!   volume answer; the node rebooted since the announcement (its boot stamp); what the call makes shows on the host
//!   (the protocol's look: a link at the staging path, a session of the target); or [`OUTLIVE_BOUND`] passed by an
//!   age no wall clock moves. Then the unstage removes what landed, under the protocol's usual rules for shared
//!   objects (a session or mapping another staged volume uses is never removed).
//!
//! What it costs: one more durable record write per creating call of a stage (an SMB first stage one, three with a
//! subDir; an iSCSI first stage none: the write before its login carries it; a repeated stage of a healthy volume
//! none), a task per creating call, and at an unstage that finds an announcement one look on the host.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tracing::{debug, info};

use super::outlive::{OUTLIVE_BOUND, Outlive, stamp_now, to_end};
use super::{Calls, Context};
use crate::error::Error;
use crate::host::{BootStamp, Host, HostOp, HostResult, Since};
use crate::locks::Deadline;
use crate::state::Details;

/// A stage attempt's creating calls, announced in the volume's record before the first was issued (module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creation {
    /// The creating call last issued under it (`NewSmbGlobalMapping`, `Mkdir`, `ConnectTarget`): the protocol's look
    /// at the host depends on it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub call: String,
    /// What that call creates, where the protocol's look needs it (the subDir's path of a `Mkdir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The node's uptime when it was announced (absent: the backend could not tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootStamp>,
    /// When it was announced (milliseconds since the Unix epoch): tells announcements apart, never ages one.
    pub at_unix_ms: u64,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What this process knows of the creating calls it issued, shared by a protocol's clones; a restarted driver starts
/// again (and learns from the boot stamps, the host and the bound).
#[derive(Clone, Debug, Default)]
pub struct Creations {
    outlive: Outlive,
    inner: Arc<Mutex<Inner>>,
    /// Woken whenever a creating call's task ends: an unstage waiting for it goes on within its deadline.
    ended: Arc<tokio::sync::Notify>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Creating calls of each volume still running in this process (their tasks have not answered).
    running: HashMap<String, usize>,
    /// The latest announcement this process made per volume (its `at_unix_ms`): for it, this process knows every call
    /// issued under it. One per volume (a record holds only its latest), so this stays as small as the records.
    made: HashMap<String, u64>,
    /// Volumes of which a creating call's task ended without the host's answer (it may still run there).
    unanswered: HashSet<String>,
}

/// Whether an announced creation can still run, and if so why (the unstage's UNAVAILABLE message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// It cannot: why.
    Yes(&'static str),
    /// It may: a message for kubelet.
    No(String),
}

impl Creations {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(volume_id: &str, c: &Creation) -> String {
        format!("creation:{volume_id}:{}", c.at_unix_ms)
    }

    /// A new announcement for a stage attempt of `volume_id` (the caller writes it in the record, durable, before the
    /// first creating call); later than `earlier`, the one the record holds.
    pub fn announce<H: Host>(
        &self,
        host: &H,
        volume_id: &str,
        earlier: Option<&Creation>,
        call: HostOp,
        path: Option<String>,
    ) -> Creation {
        let c = Creation {
            call: call.name().to_owned(),
            path,
            boot: stamp_now(host),
            at_unix_ms: unix_ms().max(earlier.map_or(0, |e| e.at_unix_ms + 1)),
        };
        let key = Self::key(volume_id, &c);
        self.outlive.start(&key);
        let mut inner = self.inner();
        inner.made.insert(volume_id.to_owned(), c.at_unix_ms);
        inner.unanswered.remove(volume_id);
        drop(inner);
        c
    }

    /// Run a creating call of `volume_id` to its end on its own task (module docs); the caller waits until `caller`'s
    /// deadline (then DEADLINE_EXCEEDED, the call going on). `call` gets the host and the call's own deadline.
    pub async fn to_end<H, T, F, Fut>(
        &self,
        host: &H,
        volume_id: &str,
        op: HostOp,
        caller: Deadline,
        call: F,
    ) -> HostResult<T>
    where
        H: Host,
        T: Send + 'static,
        F: FnOnce(H, Deadline) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = HostResult<T>> + Send + 'static,
    {
        *self
            .inner()
            .running
            .entry(volume_id.to_owned())
            .or_default() += 1;
        let this = self.clone();
        let volume = volume_id.to_owned();
        let late = "did not answer before the deadline; it goes on, announced in the volume's record, and an unstage of \
                    the volume waits for it";
        to_end(
            op,
            caller,
            late,
            call(host.clone(), Deadline::after(OUTLIVE_BOUND)),
            move |answer| {
                // An answer ends it. Without one (the backend's own bound on a call passed, csi-proxy went away) it
                // may still run on the host as far as this process knows: the boot, the host's look or the bound
                // decide.
                let mut inner = this.inner();
                if answer.as_ref().is_err_and(|e| e.kind.is_uncertain()) {
                    inner.unanswered.insert(volume.clone());
                }
                if let Some(n) = inner.running.get_mut(&volume) {
                    *n -= 1;
                    if *n == 0 {
                        inner.running.remove(&volume);
                    }
                }
                drop(inner);
                this.ended.notify_waiters();
            },
        )
        .await
    }

    /// Run a creating call of `volume_id` in the caller's future, bounded by the caller's deadline as any call (a
    /// single host call that lands by itself once issued: the subDir's `Mkdir`): while it runs an unstage waits for
    /// it; if it ends without the host's answer (its deadline, the RPC dropped), what it makes must show instead.
    pub async fn watched<T>(
        &self,
        volume_id: &str,
        call: impl std::future::Future<Output = HostResult<T>>,
    ) -> HostResult<T> {
        struct Watch<'a> {
            creations: &'a Creations,
            volume_id: &'a str,
            answered: bool,
        }
        impl Drop for Watch<'_> {
            fn drop(&mut self) {
                let mut inner = self.creations.inner();
                if !self.answered {
                    inner.unanswered.insert(self.volume_id.to_owned());
                }
                if let Some(n) = inner.running.get_mut(self.volume_id) {
                    *n -= 1;
                    if *n == 0 {
                        inner.running.remove(self.volume_id);
                    }
                }
                drop(inner);
                self.creations.ended.notify_waiters();
            }
        }
        *self
            .inner()
            .running
            .entry(volume_id.to_owned())
            .or_default() += 1;
        let mut watch = Watch {
            creations: self,
            volume_id,
            answered: false,
        };
        let answer = call.await;
        watch.answered = !answer.as_ref().is_err_and(|e| e.kind.is_uncertain());
        answer
    }

    /// Whether the creation `c` announced in `volume_id`'s record can still run (module docs). `shows` is the
    /// protocol's look at what the calls make (`Ok(true)`: it is there); it is asked when nothing else proved the
    /// calls over, and first of all while a call of this process still runs: a call whose work landed while its answer
    /// does not come (its connection gone silent: the call's task may wait up to [`OUTLIVE_BOUND`] for it) is over
    /// as far as the host goes, and kubelet must not pay a deadline per retry of the unstage until the task ends.
    pub async fn settled<H: Host, F, Fut>(
        &self,
        h: &Calls<'_, H>,
        volume_id: &str,
        c: &Creation,
        what: &str,
        mut shows: F,
    ) -> Result<Settled, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<bool, Error>>,
    {
        let key = Self::key(volume_id, c);
        let mut looked = false;
        loop {
            // A call still running in this process is waited for within the caller's deadline (registered before
            // the look, so an end between the two is not missed).
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let (running, ours) = {
                let inner = self.inner();
                (
                    inner.running.contains_key(volume_id),
                    inner.made.get(volume_id) == Some(&c.at_unix_ms)
                        && !inner.unanswered.contains(volume_id),
                )
            };
            if !running {
                if ours {
                    return Ok(Settled::Yes("this process saw every creating call answer"));
                }
                break;
            }
            if !looked {
                // Once per unstage, raced with the call's end (the look may take the rest of the deadline).
                looked = true;
                tokio::select! {
                    biased;
                    () = ended.as_mut() => continue,
                    there = shows() => if there? {
                        debug!(volume_id, "what a running creating call makes shows on the host: its answer is late");
                        return Ok(Settled::Yes("what it makes shows on the host"));
                    },
                }
            }
            if tokio::time::timeout_at(h.deadline().instant(), ended)
                .await
                .is_err()
            {
                return Ok(Settled::No(self.waiting(&key, what)));
            }
        }
        if let (Some(stamp), Some(now)) = (c.boot, h.host().uptime())
            && stamp.since(now) == Since::EarlierBoot
        {
            info!(
                volume_id,
                "an announced creation is from an earlier boot: it cannot still run"
            );
            return Ok(Settled::Yes("the node rebooted since"));
        }
        if shows().await? {
            debug!(
                volume_id,
                "what an announced creation makes shows on the host"
            );
            return Ok(Settled::Yes("what it makes shows on the host"));
        }
        if !self.outlive.may_run(&key) {
            return Ok(Settled::Yes("its bound passed"));
        }
        Ok(Settled::No(self.waiting(&key, what)))
    }

    fn waiting(&self, key: &str, what: &str) -> String {
        format!(
            "{what}, issued by an earlier NodeStageVolume of this volume {}s ago, has not finished: it may still run on \
             the node (a call goes on after the call that issued it gave up) and would leave what it makes after this \
             unstage; kubelet retries the unstage until it ended (at most {} min from its start, less once the node \
             reboots)",
            self.outlive.age(key).as_secs(),
            OUTLIVE_BOUND.as_secs() / 60
        )
    }

    /// After a stage of `volume_id` failed for good with its record kept (a re-stage, an incomplete rollback): when every
    /// creating call it issued answered, the announcement (`slot` of the record's facts) leaves the record, so that a
    /// restarted driver's unstage does not wait for a call that ended. One record write, on that failure path only.
    pub async fn retire_answered<H: Host, T: Details>(
        &self,
        cx: Context<'_, H>,
        volume_id: &str,
        slot: fn(&mut T) -> &mut Option<Creation>,
    ) -> Result<(), Error> {
        {
            let inner = self.inner();
            if inner.running.contains_key(volume_id) || inner.unanswered.contains(volume_id) {
                return Ok(());
            }
        }
        let Some(rec) = cx.store().volume(volume_id)? else {
            return Ok(());
        };
        let Some(mut facts) = rec.details::<T>()? else {
            return Ok(());
        };
        let Some(c) = slot(&mut facts).take() else {
            return Ok(());
        };
        cx.store().put_volume(&rec.with_details(&facts)?).await?;
        self.forget(volume_id, &c);
        Ok(())
    }

    /// Forget what this process knew of `volume_id`'s announcement `c` (its record is gone or rewritten without it).
    pub fn forget(&self, volume_id: &str, c: &Creation) {
        self.outlive.done(&Self::key(volume_id, c));
        let mut inner = self.inner();
        if inner.made.get(volume_id) == Some(&c.at_unix_ms) {
            inner.made.remove(volume_id);
            inner.unanswered.remove(volume_id);
        }
    }
}
