//! The per-call context every facade method takes: the caller's deadline and an optional cancellation token.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::CallError;

/// The deadline (and optional cancellation) of one facade call.
///
/// Implementations must not start work after the deadline or after cancellation ([`CallContext::check`]). What
/// happens to work that has started is up to the implementation and documented there: the Windows implementation
/// returns [`CallError::DeadlineExceeded`] with `started: true` and lets the blocked call finish on its worker thread
/// (a synchronous WMI call cannot be cancelled); see `pool`.
#[derive(Clone, Debug)]
pub struct CallContext {
    deadline: Instant,
    cancel: Option<CancelToken>,
}

impl CallContext {
    /// A context that must finish by `deadline`.
    pub fn new(deadline: Instant) -> Self {
        Self {
            deadline,
            cancel: None,
        }
    }

    /// A context that must finish within `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Self::new(Instant::now() + budget)
    }

    /// The same context, also stopped by `token`.
    pub fn with_cancel(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// The deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left (zero when passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Whether the caller cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    /// The cancellation token, if any.
    pub fn cancel_token(&self) -> Option<&CancelToken> {
        self.cancel.as_ref()
    }

    /// `Ok` while the call may still start: an error (with `started: false`) once cancelled or past the deadline.
    pub fn check(&self) -> Result<(), CallError> {
        if self.is_cancelled() {
            Err(CallError::Cancelled { started: false })
        } else if self.is_expired() {
            Err(CallError::DeadlineExceeded { started: false })
        } else {
            Ok(())
        }
    }
}

type Waker = Arc<dyn Fn() + Send + Sync>;

/// A cancellation flag shared between a caller and the calls it makes. Cloning shares the flag.
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Default)]
struct CancelInner {
    state: Mutex<CancelState>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct CancelState {
    cancelled: bool,
    wakers: Vec<(u64, Waker)>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancel: every call waiting under this token stops waiting. Idempotent.
    pub fn cancel(&self) {
        let wakers = {
            let mut state = self
                .inner
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            state.cancelled = true;
            std::mem::take(&mut state.wakers)
        };
        // Outside the lock: a waker takes the waiter's own lock.
        for (_, wake) in wakers {
            wake();
        }
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .cancelled
    }

    /// Run `wake` when the token is cancelled, until the returned registration is dropped. `None` (and `wake` is not
    /// kept) when the token is already cancelled: the caller checks the flag itself.
    pub(crate) fn register(&self, wake: Waker) -> Option<Registration> {
        let mut state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if state.cancelled {
            return None;
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        state.wakers.push((id, wake));
        Some(Registration {
            token: self.clone(),
            id,
        })
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Keeps a waker registered on a [`CancelToken`]; dropping it unregisters.
pub(crate) struct Registration {
    token: CancelToken,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut state = self
            .token
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state.wakers.retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn check_reports_cancellation_before_expiry() {
        let token = CancelToken::new();
        let ctx = CallContext::after(Duration::from_secs(60)).with_cancel(token.clone());
        assert!(ctx.check().is_ok());
        token.cancel();
        assert_eq!(ctx.check(), Err(CallError::Cancelled { started: false }));

        let past = CallContext::new(Instant::now() - Duration::from_millis(1));
        assert!(past.is_expired());
        assert_eq!(past.remaining(), Duration::ZERO);
        assert_eq!(
            past.check(),
            Err(CallError::DeadlineExceeded { started: false })
        );
    }

    #[test]
    fn wakers_run_once_on_cancel_and_not_after_unregistering() {
        let token = CancelToken::new();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let kept = token.register(Arc::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }));
        let h = hits.clone();
        let dropped = token.register(Arc::new(move || {
            h.fetch_add(100, Ordering::SeqCst);
        }));
        drop(dropped);
        token.cancel();
        token.cancel();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        drop(kept);
        // Already cancelled: nothing is registered and the caller is told so.
        assert!(token.register(Arc::new(|| {})).is_none());
        assert!(format!("{token:?}").contains("cancelled: true"));
    }
}
