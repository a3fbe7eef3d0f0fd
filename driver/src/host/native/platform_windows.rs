//! Starting the real Windows facade (`winhost::win32::WinHost`): once per process, with its start-up probe.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use winhost::probe::{Capability, CapabilityState};
use winhost::win32::{WinHost, WinHostConfig};
use winhost::{CallContext, Capabilities, WindowsHost};

/// How long the start-up probe may take (it connects to WMI and reads class definitions; nothing is executed).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The process's Windows facade, started on first use. `Err` (the operator's message) when it cannot start, or when
/// the host has neither the Storage nor the SMB WMI providers for good (a host without them cannot serve any volume;
/// Wine is one: reference §4). A host with only some of them starts, and the missing ones are logged once; one whose
/// check failed for a passing reason (WMI restarting at boot) starts too, and the backend checks again.
pub fn windows_host() -> Result<Arc<dyn WindowsHost>, String> {
    static HOST: OnceLock<Result<Arc<dyn WindowsHost>, String>> = OnceLock::new();
    HOST.get_or_init(|| {
        let host = WinHost::start(WinHostConfig::default(), &CallContext::after(START_TIMEOUT))
            .map_err(|e| format!("the native host backend cannot start: {e}"))?;
        let report = host.probe_report();
        if let Some(missing) = report.missing_message() {
            let absent = |c| report.state(c) == CapabilityState::Absent;
            if absent(Capability::Disks) && absent(Capability::Smb) {
                return Err(format!("--host-backend native: {missing}"));
            }
            tracing::warn!(%missing, "the native host backend runs without part of the Windows storage providers");
        }
        Ok(Arc::new(host) as Arc<dyn WindowsHost>)
    })
    .clone()
}
