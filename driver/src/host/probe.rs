//! The liveness check of the host backend that the Identity service's `Probe` runs (bounded by
//! [`PROBE_TIMEOUT`]); each backend provides one.

use std::time::Duration;

use futures::future::BoxFuture;

/// Upper bound on the host-backend check inside `Probe`.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// Checks whether the host backend answers. Implemented by the csi-proxy client adapter and by
/// test fakes.
pub trait HostProbe: Send + Sync + 'static {
    /// `Ok(())` if the backend answered; `Err(reason)` otherwise (the reason is logged).
    fn check(&self) -> BoxFuture<'_, Result<(), String>>;
}

/// A [`HostProbe`] for when no backend check is available; always reports reachable.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHostProbe;

impl HostProbe for NoHostProbe {
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}
