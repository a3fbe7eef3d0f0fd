//! Host-wide disk listings shared by concurrent stages. `ListDiskLocations` and `ListDiskIDs` answer for every disk
//! of the node, so N stages at once would otherwise make N identical calls and decode N answers of N disks each
//! (quadratic host work and memory: 256 LUNs of one target staged together made 512 listings of 256 disks). A stage
//! that asks while such a call is in flight waits for that call's answer instead of making its own — but only for a
//! call that started after the point its answer must not predate (`find_disk`: the moment it asked for the target's
//! disks), so a shared answer is never older than the one the stage would otherwise have asked for itself after that
//! point, and an error of such a call is that stage's answer too. A stage that finds nothing shareable makes the call,
//! and later stages share it.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::host::{DiskIds, DiskLocation, HostError, HostResult};

/// The disk listings of one host (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Listings {
    pub(crate) locations: Coalesced<std::collections::BTreeMap<u32, DiskLocation>>,
    pub(crate) ids: Coalesced<std::collections::BTreeMap<u32, DiskIds>>,
}

/// One kind of read-only host call that concurrent callers share.
#[derive(Debug)]
pub(crate) struct Coalesced<T>(Arc<Mutex<State<T>>>);

#[derive(Debug)]
struct State<T> {
    /// The id of the next call made.
    next: u64,
    current: Option<Flight<T>>,
}

impl<T> Default for State<T> {
    fn default() -> Self {
        Self {
            next: 0,
            current: None,
        }
    }
}

impl<T> Clone for Coalesced<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Default for Coalesced<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

type Answer<T> = Option<Result<Arc<T>, HostError>>;

#[derive(Debug)]
struct Flight<T> {
    id: u64,
    started: Instant,
    answer: watch::Receiver<Answer<T>>,
}

impl<T> Coalesced<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The answer of a call in flight that started at or after `not_before`, or of `call`, made now (later callers
    /// then share it). A caller waiting on a call whose maker went away before the answer (its RPC was dropped) asks
    /// again.
    pub(crate) async fn get<F, Fut>(&self, not_before: Instant, call: F) -> HostResult<Arc<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = HostResult<T>>,
    {
        loop {
            let flight = self.state().current.as_ref().and_then(|f| {
                let pending = f.answer.borrow().is_none();
                (f.started >= not_before && pending).then(|| f.answer.clone())
            });
            let Some(mut rx) = flight else { break };
            let since = Instant::now();
            let answer = rx
                .wait_for(Option::is_some)
                .await
                .map(|answer| answer.clone());
            // Counted with the waits for shared host objects (the benchmark's attribution, the operator's metrics).
            if let Some(m) = crate::metrics::installed() {
                m.observe_lock_wait("disk-listing", since.elapsed().as_secs_f64());
            }
            if let Ok(Some(answer)) = answer {
                return answer;
            }
            // Its maker went away before the answer (its `Done` cleared the flight first): try again.
        }
        let (tx, rx) = watch::channel(None);
        let id = {
            let mut state = self.state();
            let id = state.next;
            state.next = id.wrapping_add(1);
            state.current = Some(Flight {
                id,
                started: Instant::now(),
                answer: rx,
            });
            id
        };
        // Cleared however this call ends (answered, or dropped with its RPC: the waiters then ask again).
        let _done = Done { calls: self, id };
        let answer = call().await.map(Arc::new);
        tx.send_replace(Some(answer.clone()));
        answer
    }
}

/// Clears the current flight when it is this caller's.
struct Done<'a, T> {
    calls: &'a Coalesced<T>,
    id: u64,
}

impl<T> Drop for Done<'_, T> {
    fn drop(&mut self) {
        let mut state = self.calls.state();
        if state.current.as_ref().is_some_and(|f| f.id == self.id) {
            state.current = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostErrorKind, HostOp};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn callers_share_a_call_that_started_after_their_bound_only() {
        let calls = Coalesced::<u32>::default();
        let made = AtomicU32::new(0);
        let call = || async {
            made.fetch_add(1, Ordering::SeqCst);
            Ok(7)
        };
        let before = Instant::now();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let first = calls.get(before, || async {
            made.fetch_add(1, Ordering::SeqCst);
            let _ = wait.await;
            Ok(42)
        });
        tokio::pin!(first);
        assert!(futures::poll!(&mut first).is_pending());
        // In flight: a caller whose bound it meets joins it; one that needs a call started later does not.
        let joiner = calls.get(before, call);
        tokio::pin!(joiner);
        assert!(futures::poll!(&mut joiner).is_pending());
        let later = calls
            .get(Instant::now() + Duration::from_secs(1), call)
            .await
            .expect("later");
        assert_eq!(*later, 7);
        go.send(()).expect("send");
        let (a, b) = (first.await.expect("first"), joiner.await.expect("joiner"));
        assert_eq!((*a, *b), (42, 42));
        assert_eq!(made.load(Ordering::SeqCst), 2, "the joiner made no call");
        // Answered: nothing in flight, the next caller makes its own call.
        assert_eq!(*calls.get(before, call).await.expect("next"), 7);
        assert_eq!(made.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn an_error_is_shared_once_and_a_dropped_maker_hands_over() {
        let calls = Coalesced::<u32>::default();
        let before = Instant::now();
        let made = AtomicU32::new(0);
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let failing = calls.get(before, || async {
            made.fetch_add(1, Ordering::SeqCst);
            let _ = wait.await;
            Err(HostError::new(
                HostOp::ListDiskIDs,
                HostErrorKind::Other,
                "disk 3 cannot be opened",
            ))
        });
        tokio::pin!(failing);
        assert!(futures::poll!(&mut failing).is_pending());
        // Eight callers at once: one call, one error for all (not eight calls in turn).
        let joiners = futures::future::join_all((0..8).map(|_| {
            calls.get(before, || async {
                made.fetch_add(1, Ordering::SeqCst);
                Ok(1)
            })
        }));
        tokio::pin!(joiners);
        assert!(futures::poll!(&mut joiners).is_pending());
        go.send(()).expect("send");
        let (mine, theirs) = tokio::join!(failing, joiners);
        assert!(mine.is_err());
        for r in theirs {
            assert_eq!(r.expect_err("shared").message, "disk 3 cannot be opened");
        }
        assert_eq!(made.load(Ordering::SeqCst), 1);

        // A maker dropped mid-call (its RPC went away): its waiter makes the call itself.
        let (_keep, never) = tokio::sync::oneshot::channel::<()>();
        let maker = calls.get(before, || async {
            let _ = never.await;
            Ok(1)
        });
        let mut maker = Box::pin(maker);
        assert!(futures::poll!(&mut maker).is_pending());
        let waiter = calls.get(before, || async { Ok(2) });
        tokio::pin!(waiter);
        assert!(futures::poll!(&mut waiter).is_pending());
        drop(maker);
        assert_eq!(*waiter.await.expect("waiter"), 2);
        assert!(calls.state().current.is_none(), "nothing left in flight");
    }
}
