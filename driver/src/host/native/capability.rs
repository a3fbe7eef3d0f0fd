//! The host's capabilities as the start-up check found them, checked again while a check failed for a passing reason
//! (review M5), and what readiness reports meanwhile.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};
use winhost::probe::{Capability, CapabilityState, ProbeReport};
use winhost::{CallContext, WindowsHost};

use super::{HostCapabilities, NativeHost};

/// The first pause before checking a capability again after its start-up check failed (doubling, at most
/// [`CAPABILITY_RECHECK_MAX`]).
pub const CAPABILITY_RECHECK_FIRST: Duration = Duration::from_secs(1);
/// The longest pause between two checks of a capability whose check keeps failing.
pub const CAPABILITY_RECHECK_MAX: Duration = Duration::from_secs(60);
/// How long one check of the Windows WMI providers may take (it connects and reads class definitions, as at
/// start).
pub const CAPABILITY_CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// What the backend can do, from the probe: a capability counts unless the host lacks it for good (one whose probe
/// failed for a passing reason is still the backend's; its calls answer Unavailable until a re-check finds it).
pub(super) fn capabilities_of(report: &ProbeReport) -> HostCapabilities {
    let has = |c| report.state(c) != CapabilityState::Absent;
    HostCapabilities {
        list_smb_mappings: has(Capability::Smb),
        clear_disk_read_only: has(Capability::Disks),
        discovery_chap: has(Capability::Iscsi),
        persistent_logins: has(Capability::Iscsi),
        read_links: true,
        refresh_discovery: has(Capability::Iscsi),
        disk_layout: has(Capability::Disks),
        list_refreshes_disk: has(Capability::Disks),
        list_iscsi_sessions: has(Capability::Iscsi),
        // Whether MPIO is installed and claims iSCSI disks is read when a volume asks for it (`mpio_claim`).
        multipath: has(Capability::Iscsi),
        path_space: true,
        smb_mapping_options: has(Capability::Smb),
    }
}

impl NativeHost {
    /// Check the host's capabilities again while a start-up check failed for a passing reason (WMI restarting at
    /// boot, a timeout), with backoff from [`CAPABILITY_RECHECK_FIRST`] doubling to [`CAPABILITY_RECHECK_MAX`], until
    /// every capability is found present or absent for good. `report` is told each finding (metrics). Meanwhile
    /// the capability's calls answer Unavailable and [`NativeProbe`](super::NativeProbe) (readiness) names it.
    pub async fn recheck_capabilities(self, report: impl Fn(&ProbeReport) + Send) {
        let mut delay = CAPABILITY_RECHECK_FIRST;
        loop {
            let current = self.inner.host.probe_report();
            report(&current);
            let Some(why) = current.failure_message() else {
                if delay > CAPABILITY_RECHECK_FIRST {
                    info!("the Windows WMI providers' check succeeded: {current}");
                }
                return;
            };
            warn!(retry_in_s = delay.as_secs(), "{why}");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(CAPABILITY_RECHECK_MAX);
            let host = Arc::clone(&self.inner.host);
            let checked = tokio::task::spawn_blocking(move || {
                host.reprobe(&CallContext::after(CAPABILITY_CHECK_TIMEOUT))
            })
            .await;
            match checked {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => warn!(error = %e, "checking the Windows WMI providers again failed"),
                Err(e) => warn!(error = %e, "checking the Windows WMI providers again failed"),
            }
        }
    }
}

/// Why the backend cannot serve all it should right now, besides answering: a capability whose start-up check failed
/// for a passing reason (being checked again), or a call lane whose every thread is stuck in a call its caller gave
/// up on. `None` when neither.
pub fn degraded(windows: &dyn WindowsHost) -> Option<String> {
    if let Some(why) = windows.probe_report().failure_message() {
        return Some(why);
    }
    let stuck: Vec<String> = windows
        .lanes()
        .iter()
        .filter(|l| l.exhausted())
        .map(|l| {
            let oldest = l.stuck.iter().max_by_key(|s| s.running_for);
            match oldest {
                Some(s) => format!(
                    "{} (every thread stuck; oldest {} for {}s)",
                    l.name,
                    s.call,
                    s.running_for.as_secs()
                ),
                None => format!("{} (every thread stuck)", l.name),
            }
        })
        .collect();
    (!stuck.is_empty()).then(|| {
        format!(
            "Windows answers no more calls in these lanes: {}; the calls outlived their callers and hold their threads \
             until Windows answers",
            stuck.join(", ")
        )
    })
}
