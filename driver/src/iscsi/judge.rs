//! Step 6 of a stage: the LUN's one volume, and whether this driver made it — verdicts that do not depend on when
//! Windows shows what.
//!
//! A LUN's partitions and volumes arrive through Plug and Play some time after the disk comes online, and a new
//! partition's volume some time after `PartitionDisk` returns; `Rescan` shows what has arrived and hurries nothing
//! (`sim/README.md`, rows `disk_arrival`, `volume_arrival`, `rescan_cache`). So "no volume now" proves nothing, and
//! a volume that appears after `PartitionDisk` is not by that alone the one it made. Each look is a
//! `ListVolumesOnDisk`; when it shows none, through csi-proxy a `Rescan` and a second list, while a backend that reads
//! partition tables ([`HostCapabilities::disk_layout`], native) reads the disk's layout and does the `Rescan` and the
//! second list only when the layout shows a data partition (whose volume may still be in the storage cache's lag): a
//! disk without one is judged from its layout, no host-wide `Rescan` needed (issue 30).
//!
//! | What the record and the look say | Verdict |
//! | --- | --- |
//! | a volume (exactly one; the one staged before, if any) | that volume; this driver's if a `PartitionDisk` of its own preceded it |
//! | volumes, none of them the one the record names | refused (FailedPrecondition): the LUN was re-partitioned elsewhere |
//! | no volume, the record names the volume staged before | wait for it (never partition) |
//! | no volume, an announced `PartitionDisk` without outcome | a partition in the layout: done, wait for its volume; else wait while the call may still run ([`super::pending`]), then issue it again |
//! | no volume, this driver's `PartitionDisk` returned | wait for its volume, the intent kept (never refused: a late volume of its own looks the same); after the settle time the answer also names a partition Windows has no volume for, and (no layout) `PartitionDisk` is issued again once per settle time |
//! | no volume, layout read (native) | no partition but Microsoft Reserved (or RAW): empty, partition it; a partition of another type: foreign, refused; a basic partition: wait for its volume, after the settle time refused |
//! | no volume, no layout (csi-proxy) | empty only once looks spanning the settle time (`--disk-settle-time`) all showed none; wait meanwhile |
//!
//! Waiting polls within the RPC's deadline (keeping a reserve to answer) and then answers UNAVAILABLE naming what it
//! waits for; kubelet retries, and the evidence gathered so far (when each wait began, on the monotonic clock) is kept
//! in memory, so a retry goes on from there. A restarted driver starts over: it only waits longer.
//!
//! The evidence belongs to one arrival of the disk (issue 37): a rollback or an unstage of the volume, a logout of the
//! target (every LUN of it), another disk number, or the disk arriving during a stage (it was not among the target's
//! disks at the stage's first look: a new login, after a reboot or a lost session) ends it. Otherwise a first attempt
//! cut short, an unstage and a much later stage would judge the new arrival empty at once from the old "no volume
//! since …" (and format a foreign volume arriving after a no-op `PartitionDisk`), and natively an old "partition
//! without a volume since …" would refuse a late volume on every retry. Forgetting only ever makes a stage wait longer.
//!
//! Through csi-proxy, a disk on which this driver's `PartitionDisk` made a partition that shows no volume across the
//! settle time has the call issued again, at most once per settle time (`Next::PartitionAgain`): a no-op on a
//! partitioned disk (its own partition, or a foreign one Windows makes no volume for), it initialises a LUN cleaned
//! since, as the refusals advise, so the marks of a released record never strand the volume.
//!
//! Residual risk through csi-proxy, which cannot list partitions: a foreign partition whose volume arrives later than
//! the settle time makes the disk look empty, and the `PartitionDisk` that follows is a no-op there; the late volume
//! would then be taken for this driver's. The settle time is chosen generous against Windows' arrival times
//! (README, "Data safety"; real-node checks 27 and 28 measure them); the native backend reads the partition table
//! and has no such window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::pending::{Clock, Destructive, Pending};
use super::stage::{rescanned, volumes_fresh, volumes_on, write_error};
use super::{IscsiRecord, put_iscsi, run, same_id};
use crate::error::Error;
use crate::host::{DiskLayout, Host, HostErrorKind, HostOp, HostPath, PartitionKind};
use crate::lifecycle::{Calls, Context};
use crate::state::Phase;

/// The default `--disk-settle-time`: how long a disk must show no volume, looked at again and again with `Rescan`s,
/// before csi-proxy's view of it counts as empty.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(15);
/// Time kept in reserve so the RPC can still answer before its deadline.
pub(crate) const ANSWER_RESERVE: Duration = Duration::from_secs(1);
/// The longest pause between two looks.
const MAX_POLL: Duration = Duration::from_secs(2);

/// How the iSCSI protocol waits for Windows (the driver's flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IscsiSettings {
    /// `--disk-settle-time`: how long a LUN's disk must show no volume before the csi-proxy backend takes it for
    /// empty, and how long a partition's volume is waited for before it counts as one Windows will not make.
    pub settle: Duration,
}

impl Default for IscsiSettings {
    fn default() -> Self {
        Self {
            settle: DEFAULT_SETTLE,
        }
    }
}

/// The evidence gathered over time, per LUN and disk (in memory, shared by the protocol's clones), and the clock of
/// announced calls.
#[derive(Clone, Debug)]
pub(crate) struct Judge {
    settle: Duration,
    since: Arc<Mutex<HashMap<String, Instant>>>,
    pub(crate) clock: Clock,
}

impl Judge {
    pub(crate) fn new(settings: IscsiSettings) -> Self {
        Self {
            settle: settings.settle,
            since: Arc::default(),
            clock: Clock::default(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.since.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Since when `what` has been observed (now, the first time).
    fn since(&self, what: &str) -> Instant {
        *self
            .map()
            .entry(what.to_owned())
            .or_insert_with(Instant::now)
    }

    /// How long ago `what` was observed, if it was.
    fn elapsed(&self, what: &str) -> Option<Duration> {
        self.map().get(what).map(Instant::elapsed)
    }

    /// `what` is observed now (again).
    fn mark_now(&self, what: &str) {
        self.map().insert(what.to_owned(), Instant::now());
    }

    /// Forget what was observed of `key`'s disk.
    fn forget(&self, key: &str) {
        self.map().retain(|k, _| !k.starts_with(key));
    }

    /// Forget what was observed of the LUN `lun_key`'s disk, whatever its number: the arrival it was observed in
    /// has ended (a rollback, an unstage, the disk arriving anew).
    pub(crate) fn forget_lun(&self, lun_key: &str) {
        self.forget(&format!("{lun_key}#"));
    }

    /// Forget what was observed of every LUN of target `iqn`: its session ended (a logout).
    pub(crate) fn forget_target(&self, iqn: &str) {
        self.forget(&super::target_luns_key(iqn));
    }

    /// Keep of the LUN's observations only those of disk `key` (`<lun key>#disk<number>#`): under another number the
    /// disk was another arrival.
    fn arrival(&self, lun_key: &str, key: &str) {
        let lun = format!("{lun_key}#");
        self.map()
            .retain(|k, _| !k.starts_with(&lun) || k.starts_with(key));
    }

    /// The first pause between looks: an eighth of the settle time, between 25 ms and 500 ms (doubling after, up to
    /// 2 s).
    pub(crate) fn first_poll(&self) -> Duration {
        (self.settle / 8).clamp(Duration::from_millis(25), Duration::from_millis(500))
    }

    /// The settle time.
    pub(crate) fn settle(&self) -> Duration {
        self.settle
    }
}

/// One look at the disk.
struct Look {
    /// Its volume ids (after a `Rescan` when the first list showed none: always through csi-proxy, only with a data
    /// partition in the layout on a backend that reads it).
    volumes: Vec<String>,
    /// Its partition table, when the backend reads it and there is no volume.
    layout: Option<DiskLayout>,
}

/// What to do after a look.
enum Next {
    /// Use this volume.
    Volume(String),
    /// Nothing to decide yet; why (the answer when the RPC cannot wait longer).
    Wait(String),
    /// An announced call's outcome does not show yet: [`Next::Wait`], looking less often.
    Outcome(String),
    /// The disk is proven empty: partition it.
    Partition,
    /// This driver's partition shows no volume across the settle time (csi-proxy): `PartitionDisk` again, keeping
    /// what was observed.
    PartitionAgain,
}

/// Pauses between looks, within the RPC's deadline.
pub(crate) struct Polls {
    delay: Duration,
    max: Duration,
}

impl Polls {
    /// For arrivals (doubling up to 2 s).
    pub(crate) fn new(judge: &Judge) -> Self {
        Self {
            delay: judge.first_poll(),
            max: MAX_POLL,
        }
    }

    /// For the outcome of a call that may still be running, which can take up to an hour (doubling up to 10 s: a
    /// PowerShell-era csi-proxy runs a process per look).
    pub(crate) fn outcome(judge: &Judge) -> Self {
        Self {
            delay: judge.first_poll(),
            max: MAX_POLL * 5,
        }
    }

    /// Wait before the next look, or `Err(UNAVAILABLE: why)` when the deadline leaves no room for it and an answer.
    pub(crate) async fn next<H: Host>(&mut self, h: &Calls<'_, H>, why: &str) -> Result<(), Error> {
        if h.deadline().remaining() <= self.delay + ANSWER_RESERVE {
            return Err(Error::Unavailable(format!("{why}; kubelet will retry")));
        }
        debug!(delay = ?self.delay, why, "waiting before the next look");
        // Waiting for the host's storage stack, bounded by the RPC's deadline (not test synchronisation).
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(self.max);
        Ok(())
    }
}

/// The LUN's one volume (see the module docs): an existing one, or the one `PartitionDisk` makes on a disk proven
/// empty. `rec` gains what was learned (the "ours" evidence, an announcement's outcome); the caller records it with
/// its next write.
#[allow(clippy::too_many_arguments)]
pub(super) async fn volume_of<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    judge: &Judge,
    volume_id: &str,
    staging: &HostPath,
    rec: &mut IscsiRecord,
    number: u32,
    disk: &str,
    read_only: bool,
) -> Result<String, Error> {
    let key = format!("{}#disk{number}#", rec.lun_key());
    judge.arrival(&rec.lun_key(), &key);
    let layouts = h.host().capabilities().disk_layout;
    let mut polls = Polls::new(judge);
    let mut outcome = Polls::outcome(judge);
    // A PartitionDisk answered in this call: its announcement is cleared in `rec` but not yet durable.
    let mut answered = false;
    let found = async {
        loop {
            let look = look(h, number, disk, layouts).await?;
            // What the boot and the backend say of an announced PartitionDisk (`pending.rs`), for `decide`.
            if let Some(p) = rec.pending.as_ref() {
                judge.clock.learn(h, p).await?;
            }
            match decide(judge, &key, rec, disk, &look)? {
                Next::Volume(v) => {
                    judge.forget(&key);
                    return Ok(v);
                }
                // A reader-only stage writes nothing (`access.rs`).
                Next::Partition if read_only => {
                    return Err(super::access::refuse_write(
                        disk,
                        "has no volume (a RAW LUN, or a partition table without a data partition)",
                    ));
                }
                Next::Partition => {
                    // Nothing destructive while another volume's call on this LUN may still run (`pending.rs`).
                    super::pending::wait_for_others(cx, h, &judge.clock, volume_id, rec).await?;
                    partition(
                        cx,
                        h,
                        judge,
                        Some(&key),
                        volume_id,
                        staging,
                        rec,
                        number,
                        disk,
                    )
                    .await?;
                    answered = true;
                    polls = Polls::new(judge);
                }
                Next::PartitionAgain => {
                    judge.mark_now(&format!("{key}again"));
                    partition(cx, h, judge, None, volume_id, staging, rec, number, disk).await?;
                    answered = true;
                }
                Next::Wait(why) => polls.next(h, &why).await?,
                Next::Outcome(why) => outcome.next(h, &why).await?,
            }
        }
    }
    .await;
    if answered && found.is_err() {
        // The stage gives up before its next record write (the new volume is still on its way): the retry must wait
        // for that volume, not for a PartitionDisk that "may still be running" (the durable record's announcement).
        if let Err(e) = put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await {
            warn!(error = %e, "could not record that PartitionDisk answered; a retry waits for it as if it still ran");
        }
    }
    found
}

/// One look: `ListVolumesOnDisk`, and when it shows no volume:
///
/// * csi-proxy (no layout): a `Rescan` and a second list (Windows' storage cache may not show a volume that has
///   arrived);
/// * a backend that reads partition tables (native): the layout first, and a `Rescan` and a second list only when it
///   shows a data partition, whose volume may still be in the storage cache's lag. A layout with none needs no
///   `Rescan` to be judged (native's list already refreshes the disk, and its `PartitionDisk` refreshes, re-checks
///   the partitions and refuses a disk with one, or a RAW disk whose sectors are not blank): `Rescan` is host-wide
///   (`UpdateHostStorageCache`), seconds on a node with many disks (issue 30).
async fn look<H: Host>(
    h: &Calls<'_, H>,
    number: u32,
    disk: &str,
    layouts: bool,
) -> Result<Look, Error> {
    let volumes = volumes_on(h, number, disk).await?;
    if !volumes.is_empty() {
        return Ok(Look {
            volumes,
            layout: None,
        });
    }
    let layout = if layouts {
        let layout = run(
            h,
            HostOp::DiskLayout,
            &disk,
            h.host().disk_layout(number, h.deadline()),
        )
        .await?;
        if layout.data_partitions().next().is_none() {
            return Ok(Look {
                volumes,
                layout: Some(layout),
            });
        }
        Some(layout)
    } else {
        None
    };
    let volumes = rescanned(h, number, disk).await?;
    // A layout read before the `Rescan` still holds: partitions show at once, only their volumes lag.
    let layout = layout.filter(|_| volumes.is_empty());
    Ok(Look { volumes, layout })
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The verdict of one look (the table in the module docs).
fn decide(
    judge: &Judge,
    key: &str,
    rec: &mut IscsiRecord,
    disk: &str,
    look: &Look,
) -> Result<Next, Error> {
    let partitioning = matches!(&rec.pending, Some(p) if p.call == Destructive::PartitionDisk);
    if !look.volumes.is_empty() {
        if let Some(want) = &rec.volume {
            if let Some(v) = look.volumes.iter().find(|v| same_id(v, want)) {
                return Ok(Next::Volume(v.clone()));
            }
            // Never taken for this volume's, let alone for one this driver may format.
            return Err(Error::FailedPrecondition(format!(
                "{disk} shows volume {}, but this volume was staged from volume {want} on it: the LUN was \
                 re-partitioned or replaced on the storage system, or another system wrote it. Refusing to use or \
                 format it. If what the LUN holds now is what this volume should hold, delete the pod so that kubelet \
                 unstages the volume (its record goes); the next stage then takes the LUN as it finds it",
                look.volumes.join(", ")
            )));
        }
        if look.volumes.len() > 1 {
            return Err(Error::FailedPrecondition(format!(
                "{disk} has {} volumes ({}); this driver mounts a LUN with exactly one volume and will not guess",
                look.volumes.len(),
                look.volumes.join(", ")
            )));
        }
        if partitioning || rec.partitioning {
            // The volume of this driver's PartitionDisk (the disk was proven empty before it was announced).
            rec.partitioned = true;
            learned(judge, rec, Destructive::PartitionDisk);
        }
        return Ok(Next::Volume(look.volumes[0].clone()));
    }
    if let Some(want) = &rec.volume {
        return Ok(Next::Wait(format!(
            "waiting for volume {want} of {disk} to appear (the volume this LUN was staged from)"
        )));
    }
    let data: Option<Vec<_>> = look
        .layout
        .as_ref()
        .map(|l| l.data_partitions().cloned().collect());
    if partitioning {
        if data.as_ref().is_some_and(|d| !d.is_empty()) {
            // Its outcome: the partition is there; its volume is waited for as this driver's.
            learned(judge, rec, Destructive::PartitionDisk);
        } else {
            let p = rec
                .pending
                .clone()
                .unwrap_or_else(|| Pending::now(Destructive::PartitionDisk));
            if p.may_run(&judge.clock) {
                return Ok(Next::Outcome(p.waiting(
                    &judge.clock,
                    disk,
                    "a volume or a partition",
                )));
            }
            info!(
                disk,
                "an announced PartitionDisk never showed its outcome and cannot still run: issuing it again"
            );
            return Ok(Next::Partition);
        }
    }
    if rec.partitioning || rec.partitioned {
        return ours_late(judge, key, rec, disk, data.as_deref());
    }
    match &look.layout {
        Some(layout) => by_layout(judge, key, disk, layout),
        None => {
            let waited = judge.since(&format!("{key}empty")).elapsed();
            if waited >= judge.settle() {
                info!(disk, waited = ?waited, "no volume across the settle time: the disk is empty");
                return Ok(Next::Partition);
            }
            Ok(Next::Wait(format!(
                "waiting for the partitions of {disk} to appear: it shows no volume (online, with Rescans) for {} \
                 of the {} settle time (--disk-settle-time) before it counts as empty",
                secs(waited),
                secs(judge.settle())
            )))
        }
    }
}

/// An announcement's outcome is known: cleared (recorded with the caller's next write, or by `volume_of` when a
/// stage gives up after a `PartitionDisk` that answered).
fn learned(judge: &Judge, rec: &mut IscsiRecord, call: Destructive) {
    if let Some(p) = rec.pending.take_if(|p| p.call == call) {
        judge.clock.done(&p);
        debug!(call = ?call, "an announced call's outcome shows on the host");
    }
}

/// This driver's `PartitionDisk` returned (or an older record says it ran) and no volume shows yet.
fn ours_late(
    judge: &Judge,
    key: &str,
    rec: &mut IscsiRecord,
    disk: &str,
    data: Option<&[crate::host::PartitionInfo]>,
) -> Result<Next, Error> {
    let waited = judge.since(&format!("{key}ours")).elapsed();
    if data.is_none()
        && waited >= judge.settle()
        && judge
            .elapsed(&format!("{key}again"))
            .is_none_or(|e| e >= judge.settle())
    {
        // Without a partition table to read (csi-proxy), no volume across the settle time is the proof a first
        // judgement rests on: whatever this driver's `PartitionDisk` made is not there (the LUN was cleaned, or the
        // partition was a foreign one Windows makes no volume for). Issue it again, at most once per settle time: it
        // initialises a RAW disk and does nothing on a partitioned one (this driver's, whose volume is only late,
        // included), so a LUN cleaned as the answer below says is staged without any other step.
        info!(
            disk,
            waited = ?waited,
            "no volume of the partition this driver made: issuing PartitionDisk again (a no-op on a partitioned disk)"
        );
        return Ok(Next::PartitionAgain);
    }
    if data.is_some_and(<[_]>::is_empty) {
        // The partition table shows none: nothing of this driver's is on the disk (its intent was recorded, the
        // call never ran or created nothing). Judge the disk afresh.
        info!(
            disk,
            "the partition this driver meant to create is not there: judging the disk again"
        );
        rec.partitioning = false;
        rec.partitioned = false;
        return Ok(Next::Partition);
    }
    // Retryable for as long as it takes (the disk was proven empty before this driver's PartitionDisk, so a volume
    // that appears is its own); past the settle time the answer also names the other explanation.
    let hint = if waited >= judge.settle() && data.is_none() {
        ". If none ever appears, the disk holds a partition Windows makes no volume for (an unknown or foreign layout, \
         e.g. written by another operating system), on which PartitionDisk does nothing: it is not touched; clean the \
         LUN on the storage system or use another LUN"
    } else {
        ""
    };
    Ok(Next::Wait(format!(
        "waiting for the volume of the partition this driver created on {disk} to appear ({} so far){hint}",
        secs(waited)
    )))
}

/// The verdict from a partition table (a backend that reads it), for a disk with no volume.
fn by_layout(judge: &Judge, key: &str, disk: &str, layout: &DiskLayout) -> Result<Next, Error> {
    let data: Vec<_> = layout.data_partitions().collect();
    if data.is_empty() {
        return Ok(Next::Partition);
    }
    if let Some(p) = data
        .iter()
        .find(|p| matches!(p.kind, PartitionKind::Other(_)))
    {
        let PartitionKind::Other(what) = &p.kind else {
            unreachable!("matched above")
        };
        return Err(Error::FailedPrecondition(format!(
            "{disk} has partition {} ({what}), which Windows makes no volume for: a layout another system wrote. It \
             is not touched; clean the LUN on the storage system or use another LUN",
            p.number
        )));
    }
    let waited = judge.since(&format!("{key}basic")).elapsed();
    let numbers: Vec<String> = data.iter().map(|p| p.number.to_string()).collect();
    if waited < judge.settle() {
        return Ok(Next::Wait(format!(
            "waiting for the volume of partition {} of {disk} to appear ({} so far): a disk with a partition is \
             not empty",
            numbers.join(", "),
            secs(waited)
        )));
    }
    Err(Error::FailedPrecondition(format!(
        "{disk} has partition {} but no volume after {}: a layout Windows does not mount. It is not touched; clean the \
         LUN on the storage system or use another LUN",
        numbers.join(", "),
        secs(waited)
    )))
}

/// Announce `PartitionDisk` (durable before the call), issue it, record what is known of its outcome. `fresh`: the
/// observations of the disk (its key) that start over with it; `None` when it is issued again over this driver's own
/// partition ([`Next::PartitionAgain`]), whose marks stay whatever it answers.
#[allow(clippy::too_many_arguments)]
async fn partition<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    judge: &Judge,
    fresh: Option<&str>,
    volume_id: &str,
    staging: &HostPath,
    rec: &mut IscsiRecord,
    number: u32,
    disk: &str,
) -> Result<(), Error> {
    let announced = judge.clock.announce(
        h.host(),
        Pending::now(Destructive::PartitionDisk).on_disk(number),
    );
    rec.pending = Some(announced);
    rec.partitioning = true;
    put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
    match h
        .raw(
            HostOp::PartitionDisk,
            &disk,
            h.host().partition_disk(number, h.deadline()),
        )
        .await
    {
        Ok(()) => {
            // Over; a partition exists now. Its volume arrives later (waited for as this driver's). The cleared
            // announcement is recorded with the next write (`volume_of` makes one when the stage gives up first).
            learned(judge, rec, Destructive::PartitionDisk);
            if let Some(key) = fresh {
                judge.forget(key);
                let _ = judge.since(&format!("{key}ours"));
            }
            Ok(())
        }
        // It may still run: the announcement stays for the retry to learn its outcome.
        Err(e) if e.kind.is_uncertain() => Err(write_error(e, disk, disk)),
        Err(e) => {
            learned(judge, rec, Destructive::PartitionDisk);
            // A compound call (initialise, create, refresh, online) can fail after the partition exists: the intent
            // stays only when the host shows one (a volume, or a partition in the layout).
            let created = match e.kind {
                HostErrorKind::AlreadyExists => false,
                _ if h.host().capabilities().disk_layout => h
                    .host()
                    .disk_layout(number, h.deadline())
                    .await
                    .is_ok_and(|l| l.data_partitions().next().is_some()),
                _ => volumes_fresh(h, number, disk)
                    .await
                    .is_ok_and(|v| !v.is_empty()),
            };
            rec.partitioning = created || fresh.is_none();
            put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
            if e.kind == HostErrorKind::AlreadyExists {
                return Err(Error::FailedPrecondition(format!(
                    "{disk} now has a partition this driver did not create ({}); refusing to touch it",
                    e.message
                )));
            }
            Err(write_error(e, disk, disk))
        }
    }
}
