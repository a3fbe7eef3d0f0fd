//! Host-wide disk listings shared by concurrent stages. `ListDiskLocations` and `ListDiskIDs` answer for every disk
//! of the node, so N stages at once would otherwise make N identical calls and decode N answers of N disks each
//! (quadratic memory and host work: 256 LUNs of one target staged together made 512 listings of 256 disks). A stage
//! that asks while such a call is in flight waits for that call's answer instead of making its own.
//!
//! A shared answer may have been asked for just before this stage's question, so it is only ever used for what it
//! *shows*: a stage that does not find what it needs in one (its LUN's disk, that disk's identifiers) asks again
//! with `not_before` set, and then waits only for a call that started after it asked (`find_disk`). A positive answer
//! is at most one call older than an answer of its own would be, the window every listing already has before the
//! next call acts on it.

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

/// An answer, and whether it came from a call another caller made.
#[derive(Debug)]
pub(crate) struct Shared<T> {
    pub(crate) answer: Arc<T>,
    pub(crate) joined: bool,
}

impl<T> Coalesced<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The answer of a call in flight that started at or after `not_before` (any call in flight without it), or of
    /// `call`, made now (later callers then share it). A caller that shared a call whose maker went away (its RPC was
    /// dropped), or that failed, asks again: an error is only ever answered by a call made after the question.
    pub(crate) async fn get<F, Fut>(
        &self,
        mut not_before: Option<Instant>,
        call: F,
    ) -> HostResult<Shared<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = HostResult<T>>,
    {
        let asked = Instant::now();
        loop {
            let flight = self.state().current.as_ref().and_then(|f| {
                let fresh = not_before.is_none_or(|at| f.started >= at);
                let pending = f.answer.borrow().is_none();
                (fresh && pending).then(|| f.answer.clone())
            });
            let Some(mut rx) = flight else { break };
            let since = Instant::now();
            let answer = rx
                .wait_for(Option::is_some)
                .await
                .map(|answer| answer.clone().and_then(Result::ok));
            // Counted with the waits for shared host objects (the benchmark's attribution, the operator's metrics).
            if let Some(m) = crate::metrics::installed() {
                m.observe_lock_wait("disk-listing", since.elapsed().as_secs_f64());
            }
            match answer {
                Ok(Some(answer)) => {
                    return Ok(Shared {
                        answer,
                        joined: true,
                    });
                }
                Ok(None) => {
                    not_before = Some(asked);
                    continue;
                }
                Err(_) => {}
            }
            // Its maker went away before the answer: clear it (if still current) and try again.
            let mut state = self.state();
            if state
                .current
                .as_ref()
                .is_some_and(|f| f.answer.same_channel(&rx))
            {
                state.current = None;
            }
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
        answer.map(|answer| Shared {
            answer,
            joined: false,
        })
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

    #[tokio::test]
    async fn callers_during_a_call_share_it_and_later_ones_do_not() {
        let calls = Coalesced::<u32>::default();
        let made = AtomicU32::new(0);
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let call = || async {
            made.fetch_add(1, Ordering::SeqCst);
            Ok(7)
        };
        let first = calls.get(None, || async {
            made.fetch_add(1, Ordering::SeqCst);
            let _ = wait.await;
            Ok(42)
        });
        tokio::pin!(first);
        assert!(futures::poll!(&mut first).is_pending());
        // In flight: a caller without a bound joins it; one that needs a call started after its question does not.
        let joiner = calls.get(None, call);
        tokio::pin!(joiner);
        assert!(futures::poll!(&mut joiner).is_pending());
        let fresh = calls
            .get(
                Some(Instant::now() + std::time::Duration::from_secs(1)),
                call,
            )
            .await
            .expect("fresh");
        assert_eq!((*fresh.answer, fresh.joined), (7, false));
        go.send(()).expect("send");
        let (a, b) = (first.await.expect("first"), joiner.await.expect("joiner"));
        assert_eq!(
            (*a.answer, a.joined, *b.answer, b.joined),
            (42, false, 42, true)
        );
        assert_eq!(made.load(Ordering::SeqCst), 2, "the joiner made no call");
        // Answered: nothing in flight, the next caller makes its own call.
        let next = calls.get(None, call).await.expect("next");
        assert!(!next.joined);
        assert_eq!(made.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn errors_are_not_shared_and_a_dropped_maker_hands_over() {
        let calls = Coalesced::<u32>::default();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let failing = calls.get(None, || async {
            let _ = wait.await;
            Err(HostError::new(
                HostOp::ListDiskIDs,
                HostErrorKind::Other,
                "disk 3 cannot be opened",
            ))
        });
        tokio::pin!(failing);
        assert!(futures::poll!(&mut failing).is_pending());
        let joiner = calls.get(None, || async { Ok(1) });
        tokio::pin!(joiner);
        assert!(futures::poll!(&mut joiner).is_pending());
        go.send(()).expect("send");
        let e = failing.await.expect_err("the maker's own error");
        assert_eq!(e.message, "disk 3 cannot be opened");
        // The joiner saw the failure and made its own call.
        let j = joiner.await.expect("joiner");
        assert_eq!((*j.answer, j.joined), (1, false));

        // A maker dropped mid-call (its RPC went away): its waiter makes the call itself.
        let (_keep, never) = tokio::sync::oneshot::channel::<()>();
        let maker = calls.get(None, || async {
            let _ = never.await;
            Ok(1)
        });
        let mut maker = Box::pin(maker);
        assert!(futures::poll!(&mut maker).is_pending());
        let waiter = calls.get(None, || async { Ok(2) });
        tokio::pin!(waiter);
        assert!(futures::poll!(&mut waiter).is_pending());
        drop(maker);
        let w = waiter.await.expect("waiter");
        assert_eq!((*w.answer, w.joined), (2, false));
        assert!(calls.state().current.is_none(), "nothing left in flight");
    }
}
