//! The native backend's liveness check ([`NativeProbe`]) and the probe of a backend that could not start.

use futures::future::BoxFuture;

use super::{HostOp, HostProbe, NativeHost, degraded, files};
use crate::locks::Deadline;

/// The native backend's liveness check for the Identity service's `Probe` and `/readyz`: `GetFileAttributesW` of
/// the driver's plugin directory, on the backend's blocking pool within the check's deadline. A Win32 call in this
/// process, nothing else: no WMI query (which a WMI provider host process serves, `WmiPrvSE.exe`, started on demand
/// by the WMI service), no child process. What it proves is what readiness needs: the backend's pool runs calls
/// (a pool whose 16 slots are all stuck fails it) and the kubelet root's volume answers. The WMI providers are
/// checked once at start-up (`winhost::probe`); an operation that needs a provider that failed later reports it.
pub struct NativeProbe {
    host: NativeHost,
    path: String,
    timeout: std::time::Duration,
}

impl NativeProbe {
    /// Probes `host` at `path` (the plugin directory), each check within [`crate::host::PROBE_TIMEOUT`].
    pub fn new(host: NativeHost, path: &str) -> Self {
        Self::within(host, path, crate::host::PROBE_TIMEOUT)
    }

    /// Probes `host` at `path`, each check within `timeout` (readiness uses a longer one).
    pub fn within(host: NativeHost, path: &str, timeout: std::time::Duration) -> Self {
        Self {
            host,
            path: path.to_owned(),
            timeout,
        }
    }
}

impl HostProbe for NativeProbe {
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            if let Some(why) = degraded(&**self.host.windows()) {
                return Err(why);
            }
            let d = Deadline::after(self.timeout);
            let path = self.path.clone();
            // Missing is an answer too: the backend and the volume work.
            self.host
                .run(HostOp::PathExists, d, move |o| files::path_exists(o, &path))
                .await
                .map(drop)
                .map_err(|e| e.message)
        })
    }
}

/// A probe for a backend that could not start: always reports why.
pub struct FailedProbe(pub String);

impl HostProbe for FailedProbe {
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { Err(self.0.clone()) })
    }
}
