//! Destructive host calls that may outlive the driver: announced in the volume's record before they are issued,
//! their outcome learned from the host afterwards.
//!
//! csi-proxy runs a call to its end even when its client has gone (no request context reaches `pkg/os` in any
//! release), and a WMI provider finishes a method whose caller died; a driver killed while `FormatVolume` hangs
//! would otherwise, once restarted, format again, let the pod write, and then see the first format wipe it. So every
//! destructive call — `PartitionDisk` (which initialises a RAW disk and creates the partition), `FormatVolume`,
//! `ResizeVolume` — is announced ([`Pending`], written and durable) before it is issued, and its outcome recorded
//! after it answers. A stage or an expansion that finds an announcement without its outcome learns the outcome from
//! the host, polling within the RPC's deadline and answering UNAVAILABLE meanwhile; it never issues a second
//! destructive call while the first may still be running.
//!
//! | Call | Its outcome shows as |
//! | --- | --- |
//! | `PartitionDisk` | a volume on the disk, or (a backend that reads partition tables) a partition other than Microsoft Reserved |
//! | `FormatVolume` | `IsVolumeFormatted` true |
//! | `ResizeVolume` | the volume within 100 MiB of the disk's size (what csi-proxy's skip rule leaves) |
//!
//! A definite failure ends the call (the announcement is cleared, with a record write on that path only); an
//! uncertain one (deadline, csi-proxy unreachable) keeps it.
//!
//! # When the outcome never shows
//!
//! After [`OUTLIVE_BOUND`] (one hour) from the announcement the call is taken to be over and may be issued again. No
//! source bounds these calls: csi-proxy passes no timeout to the PowerShell child or the WMI method, and Windows
//! documents none for `MSFT_Disk.CreatePartition`, `MSFT_Volume.Format` or `MSFT_Partition.Resize`. The bound rests
//! on what the calls do — a GPT table and one partition, a *quick* NTFS format (metadata only, csi-proxy's `Full =
//! false`), an NTFS extension — which take seconds to minutes even on large LUNs (real-node check 28 measures
//! them), and on the call being tied to the disk's device: a node reboot or a lost session ends it. A call still
//! stuck in a provider after an hour that then completes is the residual risk (README, "Data safety"). The age is the
//! longer of the wall-clock time since the announcement and this process's own monotonic time since it first saw it,
//! so a clock set back never shortens the wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// How long after its announcement a destructive call whose outcome never showed is taken to be over (module docs).
pub(crate) const OUTLIVE_BOUND: Duration = Duration::from_secs(3600);

/// Which destructive call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Destructive {
    /// `PartitionDisk` (GPT-initialise a RAW disk, create the partition).
    PartitionDisk,
    /// `FormatVolume`.
    FormatVolume,
    /// `ResizeVolume`.
    ResizeVolume,
}

impl Destructive {
    fn name(self) -> &'static str {
        match self {
            Self::PartitionDisk => "PartitionDisk",
            Self::FormatVolume => "FormatVolume",
            Self::ResizeVolume => "ResizeVolume",
        }
    }
}

/// A destructive call announced in the record before it was issued, its outcome not yet known (module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The call.
    pub call: Destructive,
    /// The disk it was issued on (`PartitionDisk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<u32>,
    /// The volume it was issued on (`FormatVolume`, `ResizeVolume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// `ResizeVolume`: the disk's size when it was issued (the volume reaching it within 100 MiB is its outcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size: Option<u64>,
    /// When it was announced: milliseconds since the Unix epoch (wall clock, so a restarted driver can tell).
    pub announced_unix_ms: u64,
}

impl Pending {
    /// `call`, announced now.
    pub(crate) fn now(call: Destructive) -> Self {
        Self {
            call,
            disk: None,
            volume: None,
            disk_size: None,
            announced_unix_ms: unix_ms(),
        }
    }

    /// On disk `n`.
    pub(crate) fn on_disk(mut self, n: u32) -> Self {
        self.disk = Some(n);
        self
    }

    /// On volume `v`.
    pub(crate) fn on_volume(mut self, v: &str) -> Self {
        self.volume = Some(v.to_owned());
        self
    }

    /// Issued when the disk had `bytes`.
    pub(crate) fn with_disk_size(mut self, bytes: u64) -> Self {
        self.disk_size = Some(bytes);
        self
    }

    /// How long ago it was announced, by the longer of the wall clock and `clock`'s own time since it first saw it.
    pub(crate) fn age(&self, clock: &Clock) -> Duration {
        let wall = Duration::from_millis(unix_ms().saturating_sub(self.announced_unix_ms));
        wall.max(clock.since(self.announced_unix_ms).elapsed())
    }

    /// Whether the call may still be running on the host (younger than [`OUTLIVE_BOUND`]).
    pub(crate) fn may_run(&self, clock: &Clock) -> bool {
        self.age(clock) < OUTLIVE_BOUND
    }

    /// What the stage waits for, for its UNAVAILABLE answer.
    pub(crate) fn waiting(&self, clock: &Clock, on: &str, outcome: &str) -> String {
        format!(
            "{} of {on} was issued {}s ago and has not finished ({outcome} does not show yet); it may still be running \
             on the node (a call runs to its end even after the driver that issued it went away), and a second one \
             could destroy what the first leaves behind: waiting for it (at most {} min from its start)",
            self.call.name(),
            self.age(clock).as_secs(),
            OUTLIVE_BOUND.as_secs() / 60
        )
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This process's monotonic clock for announcements: when it first saw each (by its announcement time). Shared by
/// the protocol's clones; a restarted driver starts it again, so the wall clock then counts alone.
#[derive(Clone, Debug, Default)]
pub(crate) struct Clock(Arc<Mutex<HashMap<u64, Instant>>>);

impl Clock {
    /// Start counting for an announcement this process just made.
    pub(crate) fn start(&self, p: &Pending) {
        let _ = self.since(p.announced_unix_ms);
    }

    fn since(&self, announced: u64) -> Instant {
        let mut m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *m.entry(announced).or_insert_with(Instant::now)
    }

    /// Forget an announcement whose outcome is known.
    pub(crate) fn done(&self, p: &Pending) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&p.announced_unix_ms);
    }
}
