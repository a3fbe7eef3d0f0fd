//! Destructive host calls that may outlive the driver: announced in the volume's record before they are issued,
//! their outcome learned from the host afterwards.
//!
//! csi-proxy runs a call to its end even when its client has gone (no request context reaches `pkg/os` in any
//! release), and a WMI provider finishes a method whose caller died; a driver killed while `FormatVolume` hangs
//! would otherwise, once restarted, format again, let the pod write, and then see the first format wipe it. So every
//! destructive call — `PartitionDisk` (which initialises a RAW disk and creates the partition), `FormatVolume`,
//! `ResizeVolume` — is announced ([`Pending`], written and durable) before it is issued, and its outcome recorded
//! after it answers; so is the logout of a target's last volume (`DisconnectTarget`, `removal.rs`), whose late end
//! would take a later stage's session away. A stage or an expansion that finds an announcement without its outcome
//! learns the outcome from the host, polling within the RPC's deadline and answering UNAVAILABLE meanwhile; it never
//! issues a second destructive call while the first may still be running.
//!
//! | Call | Its outcome shows as |
//! | --- | --- |
//! | `PartitionDisk` | a volume on the disk, or (a backend that reads partition tables) a partition other than Microsoft Reserved |
//! | `FormatVolume` | `IsVolumeFormatted` true |
//! | `ResizeVolume` | the volume within 100 MiB of the disk's size (what csi-proxy's skip rule leaves) |
//! | `DisconnectTarget` | `GetTargetDisks` shows no disk of the target (`removal.rs`) |
//!
//! A definite failure ends the call (the announcement is cleared, with a record write on that path only); an
//! uncertain one (deadline, csi-proxy unreachable) keeps it.
//!
//! # When the outcome does not show
//!
//! The call cannot still be running once the node rebooted since its announcement (the boot stamp: the node's uptime
//! is lower now), once the backend shows none of its calls on the object still running (native: its own operations
//! and the WMI methods an earlier process left in flight), or, as the last resort, [`OUTLIVE_BOUND`] (one hour) after
//! it was announced, by an age no wall clock moves (`crate::lifecycle::outlive`). Through csi-proxy only the reboot
//! and the bound apply: it runs the calls out of the driver's sight. A call still stuck in a provider after an hour
//! that then completes is the residual risk (README, "Data safety").

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{IscsiRecord, same_id};
use crate::error::Error;
use crate::host::{BootStamp, Host, HostObject, HostOp, HostResult};
use crate::lifecycle::outlive::{Outlive, stamp_now, to_end};
use crate::lifecycle::{Calls, Context};
use crate::locks::Deadline;

pub(crate) use crate::lifecycle::outlive::OUTLIVE_BOUND;

pub(crate) use crate::lifecycle::outlive::WAY_BACK;

/// Which call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Destructive {
    /// `PartitionDisk` (GPT-initialise a RAW disk, create the partition).
    PartitionDisk,
    /// `FormatVolume`.
    FormatVolume,
    /// `ResizeVolume`.
    ResizeVolume,
    /// `DisconnectTarget` of the target's last staged volume (`removal.rs`).
    DisconnectTarget,
    /// The unstage's non-forced `Rmdir` of the staging path (`removal.rs`): a late one removes the mount point a
    /// later stage of the volume made there.
    RemoveStagingPath,
}

impl Destructive {
    fn name(self) -> &'static str {
        match self {
            Self::PartitionDisk => "PartitionDisk",
            Self::FormatVolume => "FormatVolume",
            Self::ResizeVolume => "ResizeVolume",
            Self::DisconnectTarget => "DisconnectTarget",
            Self::RemoveStagingPath => "Rmdir",
        }
    }
}

/// A call announced in the record before it was issued, its outcome not yet known (module docs).
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
    /// The target it was issued on, as the call named it (`DisconnectTarget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// When it was announced: milliseconds since the Unix epoch (wall clock: for people and as part of its key, never
    /// for a decision).
    pub announced_unix_ms: u64,
    /// The node's uptime when it was announced (absent in records of earlier versions, or when the backend cannot
    /// tell): a lower uptime now proves a reboot since, and the uptime since it is the call's age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootStamp>,
}

impl Pending {
    /// `call`, announced now (stamped by [`Clock::announce`]).
    pub(crate) fn now(call: Destructive) -> Self {
        Self {
            call,
            disk: None,
            volume: None,
            disk_size: None,
            target: None,
            announced_unix_ms: unix_ms(),
            boot: None,
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

    /// On target `iqn`.
    pub(crate) fn on_target(mut self, iqn: &str) -> Self {
        self.target = Some(iqn.to_owned());
        self
    }

    /// This announcement's key in the process's [`Outlive`].
    fn key(&self) -> String {
        format!(
            "{}@{}:{:?}:{:?}:{:?}",
            self.call.name(),
            self.announced_unix_ms,
            self.disk,
            self.volume,
            self.target
        )
    }

    /// The host object the call changes.
    fn object(&self) -> Option<HostObject> {
        match self.call {
            Destructive::PartitionDisk => self.disk.map(HostObject::Disk),
            Destructive::FormatVolume | Destructive::ResizeVolume => {
                self.volume.clone().map(HostObject::Volume)
            }
            Destructive::DisconnectTarget => self.target.clone().map(HostObject::Target),
            // No backend tracks a directory's removal: its outcome (the path gone), the boot and the bound decide.
            Destructive::RemoveStagingPath => None,
        }
    }

    /// Whether the call may still be running on the host (`Outlive::may_run`: not once proven over; then by the
    /// bound). [`Clock::learn`] first, to know what the boot and the backend say.
    pub(crate) fn may_run(&self, clock: &Clock) -> bool {
        clock.0.may_run(&self.key())
    }

    /// What the stage waits for, for its UNAVAILABLE answer.
    pub(crate) fn waiting(&self, clock: &Clock, on: &str, outcome: &str) -> String {
        let key = self.key();
        let still = clock.0.running(&key).map_or_else(
            || {
                format!(
                    "it may still be running on the node (a call runs to its end even after the driver that issued \
                     it went away), and a second one could destroy what the first leaves behind: waiting for it (at \
                     most {} min from its start; {WAY_BACK})",
                    OUTLIVE_BOUND.as_secs() / 60
                )
            },
            |what| {
                format!(
                    "{what}: it may still be running, and a second one could destroy what the first leaves behind: \
                     waiting for it ({WAY_BACK})"
                )
            },
        );
        format!(
            "{} of {on} was issued {}s ago and has not finished ({outcome} does not show yet); {still}",
            self.call.name(),
            clock.0.age(&key).as_secs(),
        )
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether two records name one LUN: the same target and LUN, or the same page83 identity (one LUN exported through
/// two targets shows as two disks with one identity on a node without MPIO).
pub(crate) fn same_lun(a: &IscsiRecord, b: &IscsiRecord) -> bool {
    if a.lun_key() == b.lun_key() {
        return true;
    }
    let id = |r: &IscsiRecord| r.page83.clone().filter(|p| !p.trim().is_empty());
    matches!((id(a), id(b)), (Some(x), Some(y)) if same_id(&x, &y))
}

/// The lock key of a LUN's identity (its page83), when known: one for every target the LUN is reached through.
pub(crate) fn identity_key(rec: &IscsiRecord) -> Option<String> {
    let p = rec
        .page83
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())?;
    Some(format!("iscsi-page83:{}", p.to_ascii_lowercase()))
}

/// Before this volume issues a destructive call on its LUN: a call another volume's record announced on the same
/// LUN ([`same_lun`]) that may still be running makes the stage answer UNAVAILABLE, naming it.
pub(crate) async fn wait_for_others<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    clock: &Clock,
    volume_id: &str,
    rec: &IscsiRecord,
) -> Result<(), Error> {
    let others: Vec<_> = cx
        .records::<IscsiRecord>()?
        .into_iter()
        .filter(|(r, i)| {
            r.volume_id != volume_id
                && i.pending
                    .as_ref()
                    .is_some_and(|p| p.call != Destructive::DisconnectTarget)
                && same_lun(rec, i)
        })
        .collect();
    for (other, i) in others {
        let Some(p) = i.pending.as_ref() else {
            continue;
        };
        clock.learn(h, p).await?;
        if p.may_run(clock) {
            let on = p
                .disk
                .map(|n| format!("disk {n}"))
                .or_else(|| p.volume.clone())
                .unwrap_or_else(|| "its LUN".to_owned());
            return Err(Error::Unavailable(format!(
                "{}. It was announced by volume {:?}, which names the same LUN ({} LUN {}); nothing destructive is                  done to the LUN until it ends; kubelet will retry",
                p.waiting(clock, &on, "its outcome"),
                other.volume_id,
                i.iqn,
                i.lun
            )));
        }
    }
    Ok(())
}

/// This process's knowledge of announcements (`crate::lifecycle::outlive::Outlive`), shared by the protocol's clones.
#[derive(Clone, Debug, Default)]
pub(crate) struct Clock(Outlive);

impl Clock {
    /// `p`, stamped with the node's uptime now and counted from now: the announcement to record before the call.
    pub(crate) fn announce<H: Host>(&self, host: &H, mut p: Pending) -> Pending {
        p.boot = stamp_now(host);
        self.0.start(&p.key());
        p
    }

    /// Learn what the boot and the backend say of `p` (before judging [`Pending::may_run`]).
    pub(crate) async fn learn<H: Host>(&self, h: &Calls<'_, H>, p: &Pending) -> Result<(), Error> {
        match p.object() {
            Some(object) => self.0.learn(h, &p.key(), p.boot, &object).await,
            None => Ok(()),
        }
    }

    /// Whether the node rebooted since `p` was announced (its boot stamp); if so, `p` is ended here. For calls no
    /// backend tracks ([`Clock::learn`] asks the backend only about objects it knows).
    pub(crate) fn rebooted_since<H: Host>(&self, host: &H, p: &Pending) -> bool {
        let rebooted = p
            .boot
            .zip(host.uptime())
            .is_some_and(|(s, now)| s.since(now) == crate::host::Since::EarlierBoot);
        if rebooted {
            self.end(p, "the node rebooted since it was issued");
        }
        rebooted
    }

    /// `p` cannot still be running: `why` (its outcome shows on the host).
    pub(crate) fn end(&self, p: &Pending, why: &str) {
        self.0.end(&p.key(), why);
    }

    /// What the backend said still runs of `p`, if it did.
    pub(crate) fn running(&self, p: &Pending) -> Option<String> {
        self.0.running(&p.key())
    }

    /// Issue the announced call `p` (`op` on `subject`) on its own task, run to its end with its own bound
    /// ([`OUTLIVE_BOUND`]) rather than the caller's deadline. The caller stops waiting at its deadline
    /// (DEADLINE_EXCEEDED: the announcement stays), and this process still hears the call's answer: an answer, a
    /// success or a definite failure, ends the announcement here, so a later stage in this process goes on as soon as
    /// the call answered instead of waiting for the bound when its outcome cannot show (a call that failed, e.g. on a
    /// disk the unstage's logout took away). A restarted driver cannot hear it: then the host, the boot and the bound
    /// decide (module docs).
    pub(crate) async fn to_end<H, F, Fut>(
        &self,
        h: &Calls<'_, H>,
        p: &Pending,
        op: HostOp,
        subject: &str,
        call: F,
    ) -> HostResult<()>
    where
        H: Host,
        F: FnOnce(H, Deadline) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = HostResult<()>> + Send + 'static,
    {
        let key = p.key();
        let outlive = self.0.clone();
        let d = Deadline::outliving(h.deadline(), OUTLIVE_BOUND);
        let late =
            "did not answer before the deadline; it goes on, announced in the volume's record";
        let heard = move |answer: &HostResult<()>| {
            if !answer.as_ref().is_err_and(|e| e.kind.is_uncertain()) {
                outlive.end(&key, "this process saw it answer");
            }
        };
        h.raw(
            op,
            &subject,
            to_end(op, h.deadline(), late, call(h.host().clone(), d), heard),
        )
        .await
    }

    /// Forget an announcement whose outcome is known (and recorded).
    pub(crate) fn done(&self, p: &Pending) {
        self.0.done(&p.key());
    }
}
