//! Time that a reboot ends and a wall clock cannot move: where a moment lies in the node's boots, and what a backend
//! knows of its own calls that may still be running.
//!
//! A call that can outlive its caller (a destructive disk call, a logout: `lifecycle::outlive`) is announced with
//! a [`BootStamp`]: the node's uptime when it was announced (`GetTickCount64`, `winhost::uptime`). Uptime counts
//! from the boot and never goes back within one, and setting the wall clock does not move it, so:
//!
//! * an uptime now **below** the stamp's proves a reboot since: no call from before it can still be running
//!   (sessions, disks and the processes that issued the calls are gone);
//! * otherwise the two may be one boot, and the call's age is the uptime since the stamp — a wall clock set forward
//!   (or back) changes nothing. Should a reboot have happened after all (the new boot has now been up longer than
//!   the old one had been at the announcement), that age is shorter than the truth: the driver waits longer, never
//!   less.
//!
//! Windows offers no documented boot identifier a process-isolated container can read, so the uptime is the boot
//! identity (README, "Data safety"; real-node check 38). csi-proxy has no RPC for it (its `system` group answers the
//! BIOS serial and services only), but the driver's container shares the node's kernel and reads it itself.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long after its start a call that may outlive its caller, whose outcome never showed, is taken to be over: the
/// last resort of every wait for one (`lifecycle::outlive`, the native backend's ledger of methods in flight). No
/// source bounds these calls: csi-proxy passes no timeout to the PowerShell child or the WMI method, and Windows
/// documents none for `MSFT_Disk.CreatePartition`, `MSFT_Volume.Format`, `MSFT_Partition.Resize` or
/// `MSFT_iSCSITarget.Disconnect`; what they do (a GPT table and one partition, a quick NTFS format, an extension, a
/// logout) takes seconds to minutes (real-node check 28).
pub const OUTLIVE_BOUND: Duration = Duration::from_secs(3600);

/// When something happened, in the node's boot-relative time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootStamp {
    /// The node's uptime then, in milliseconds.
    pub uptime_ms: u64,
}

/// How a stamp relates to now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    /// The node rebooted since the stamp (its uptime is lower now).
    EarlierBoot,
    /// Perhaps the same boot: this long ago, by the uptime (at most the true age).
    Ago(Duration),
}

impl BootStamp {
    /// The stamp of uptime `up`.
    pub fn at(up: Duration) -> Self {
        Self {
            uptime_ms: u64::try_from(up.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// How this stamp relates to uptime `now`.
    pub fn since(self, now: Duration) -> Since {
        let now = Self::at(now).uptime_ms;
        if now < self.uptime_ms {
            Since::EarlierBoot
        } else {
            Since::Ago(Duration::from_millis(now - self.uptime_ms))
        }
    }
}

/// A host object a call that may outlive its caller changes ([`crate::host::Host::in_flight`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostObject {
    /// Disk `n` (`PartitionDisk`).
    Disk(u32),
    /// A volume, by its id (`FormatVolume`, `ResizeVolume`).
    Volume(String),
    /// An iSCSI target's sessions, by the target's name (`DisconnectTarget`).
    Target(String),
    /// An SMB share's global mapping, by the share's root `\\server\share` (`RemoveSmbGlobalMapping`).
    Mapping(String),
}

impl HostObject {
    /// The object as a key (volume ids and target names compared as Windows compares them).
    pub fn key(&self) -> String {
        match self {
            Self::Disk(n) => format!("disk:{n}"),
            Self::Volume(v) => format!("volume:{}", v.trim().to_ascii_lowercase()),
            Self::Target(t) => format!("target:{}", crate::host::name_key(t)),
            Self::Mapping(root) => format!("mapping:{}", crate::host::name_key(root)),
        }
    }
}

impl std::fmt::Display for HostObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Disk(n) => write!(f, "disk {n}"),
            Self::Volume(v) => write!(f, "volume {v}"),
            Self::Target(t) => write!(f, "target {t}"),
            Self::Mapping(root) => write!(f, "the SMB global mapping of {root}"),
        }
    }
}

/// What a backend knows of its own calls on an object that may still be running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InFlight {
    /// It cannot tell (csi-proxy runs the calls in its own process, out of the driver's sight): the caller's rules
    /// (outcome, reboot, bound) decide.
    Unknown,
    /// None of its calls on the object can still run (a native backend issued none that has not answered, in this
    /// process or one before it).
    Ended,
    /// One still may: what.
    Running(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_uptime_proves_a_reboot_and_the_age_never_counts_the_wall_clock() {
        let s = BootStamp::at(Duration::from_secs(600));
        assert_eq!(s.since(Duration::from_secs(599)), Since::EarlierBoot);
        assert_eq!(
            s.since(Duration::from_secs(600)),
            Since::Ago(Duration::ZERO)
        );
        assert_eq!(
            s.since(Duration::from_secs(660)),
            Since::Ago(Duration::from_secs(60))
        );
    }

    #[test]
    fn object_keys_compare_as_windows_names() {
        assert_eq!(
            HostObject::Volume(r"\\?\Volume{AB}\".into()).key(),
            HostObject::Volume(r"\\?\volume{ab}\".into()).key()
        );
        assert_eq!(
            HostObject::Target("iqn.2024-01.IO.example:A".into()).key(),
            HostObject::Target("iqn.2024-01.io.example:a".into()).key()
        );
        assert_ne!(HostObject::Disk(1).key(), HostObject::Disk(2).key());
    }
}
