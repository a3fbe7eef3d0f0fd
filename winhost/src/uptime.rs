//! How long the node has been up: the boot-relative clock a restarted driver reads to tell whether a call it
//! announced before can still be running (the driver's `host::boot`).
//!
//! * Windows: `GetTickCount64`, "the number of milliseconds that have elapsed since the system was started", not
//!   affected by `GetSystemTimeAdjustment` (learn.microsoft.com, `sysinfoapi.h`, *GetTickCount64 function*): it
//!   counts from the boot, never goes back within one, and a wall clock set forward or back does not move it. A
//!   process-isolated Windows container (the csiProxy mode's image) and a HostProcess container share the host's
//!   kernel, so both read the node's own count (real-node check 38: unverified on a node).
//! * Linux (tests, a Linux build of the driver): the first field of `/proc/uptime`, seconds since boot (proc(5)).
//! * Anything else: unknown (`None`), and the driver keeps its conservative rules.

use std::time::Duration;

/// The node's uptime, or `None` when this platform cannot tell.
pub fn node_uptime() -> Option<Duration> {
    platform::uptime()
}

#[cfg(windows)]
mod platform {
    use std::time::Duration;

    pub(super) fn uptime() -> Option<Duration> {
        Some(Duration::from_millis(crate::win32::tick_count()))
    }
}

#[cfg(target_os = "linux")]
mod platform {
    use std::time::Duration;

    pub(super) fn uptime() -> Option<Duration> {
        super::parse_proc_uptime(&std::fs::read_to_string("/proc/uptime").ok()?)
    }
}

#[cfg(not(any(windows, target_os = "linux")))]
mod platform {
    use std::time::Duration;

    pub(super) fn uptime() -> Option<Duration> {
        None
    }
}

/// `/proc/uptime`'s first field (`"350735.47 234388.90"`), seconds with a fraction.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_proc_uptime(text: &str) -> Option<Duration> {
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_uptime_is_read_from_its_first_field() {
        assert_eq!(
            parse_proc_uptime("350735.47 234388.90\n"),
            Some(Duration::from_millis(350_735_470))
        );
        assert_eq!(parse_proc_uptime(""), None);
        assert_eq!(parse_proc_uptime("-1 2"), None);
        assert_eq!(parse_proc_uptime("up 2"), None);
    }

    #[cfg(any(windows, target_os = "linux"))]
    #[test]
    fn this_platform_tells_its_uptime_and_it_never_goes_back() {
        let a = node_uptime().expect("uptime");
        let b = node_uptime().expect("uptime");
        assert!(b >= a, "{a:?} then {b:?}");
    }
}
