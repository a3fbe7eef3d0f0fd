//! Step 6 of a stage: the LUN's one volume, and whether this driver made it — verdicts that do not depend on when
//! Windows shows what.
//!
//! A LUN's partitions and volumes arrive through Plug and Play some time after the disk comes online, and a new
//! partition's volume some time after `PartitionDisk` returns; `Rescan` shows what has arrived and hurries nothing
//! (`sim/README.md`, rows `disk_arrival`, `volume_arrival`, `rescan_cache`). So "no volume now" proves nothing, and
//! a volume that appears after `PartitionDisk` is not by that alone the one it made. Each look is a
//! `ListVolumesOnDisk`, paced (issue 39: each is a host call, a PowerShell process on csi-proxy v1.1.x/v1.2.x): the
//! first right after the onlining; then, after pauses that double from [`Judge::first_poll`] up to 8 s (the settle
//! time's last look on its end), through csi-proxy a `Rescan` and the list, so it shows what arrived meanwhile, and on
//! a backend whose list refreshes the disk ([`HostCapabilities::list_refreshes_disk`], native) the list alone; never a
//! look right after this driver's own `PartitionDisk`, whose volume cannot have arrived yet. With no volume, a
//! backend that reads partition tables ([`HostCapabilities::disk_layout`], native) reads the disk's layout: a disk
//! without a data partition is judged from it, no host-wide `Rescan` needed (issue 30).
//!
//! What csi-proxy can prove (issue 39 item 2), per release, from `pkg/os/volume/api.go` `ListVolumesOnDisk` at each
//! tag: v1.1.3 and v1.2.1 run `(Get-Disk -Number N | Get-Partition | Get-Volume).UniqueId` and return any failure
//! with its output (`utils.RunPowershellCmd`, `CombinedOutput`): on a disk with no partition at all `Get-Partition`
//! writes its not-found record, whose `FullyQualifiedErrorId` (`CmdletizationQuery_NotFound_DiskNumber,Get-Partition`,
//! or `CmdletizationQuery_NotFound,Get-Partition` by association; PowerShell's cmdletization, `ClientSideQuery`) Windows
//! does not translate, where a disk whose partitions have no volume (a foreign layout, a volume still arriving, a lone
//! Microsoft Reserved partition) prints nothing (`[""]`, csi-proxy#144). That record, classified
//! [`HostErrorKind::NoPartition`], is the proof, taken only from a list made after a `Rescan` that followed the
//! onlining (a first look's answer is confirmed by one). Whether a node answers so is unverified (real-node check 34;
//! `check-node` reports it): where it does not, the disk is judged by the settle time as before. v1.3.0
//! (`pkg/cim/volume.go` `ListPartitionsOnDisk`, `IgnoreNotFound`) and master (`pkg/wmi/volume.go`) answer `[]` for
//! both, and no other csi-proxy call tells them apart (`PartitionDisk` is a silent no-op on a partitioned disk), so
//! there the settle time stays.
//!
//! | What the record and the look say | Verdict |
//! | --- | --- |
//! | a volume (exactly one; the one staged before, if any) | that volume; this driver's if a `PartitionDisk` of its own preceded it |
//! | volumes, none of them the one the record names | refused (FailedPrecondition): the LUN was re-partitioned elsewhere |
//! | no volume, the record names the volume staged before | wait for it (never partition) |
//! | no volume, an announced `PartitionDisk` without outcome | a partition in the layout: done, wait for its volume; else wait while the call may still run ([`super::pending`]), then issue it again |
//! | no volume, this driver's `PartitionDisk` returned | wait for its volume, the intent kept (never refused: a late volume of its own looks the same); after the settle time the answer also names a partition Windows has no volume for, and (no layout) `PartitionDisk` is issued again once per settle time |
//! | no volume, layout read (native), or no partition at all (PowerShell-era csi-proxy's proof) | no partition but Microsoft Reserved (or RAW): empty, partition it; a partition of another type: foreign, refused; a basic partition: wait for its volume, after the settle time refused |
//! | no volume, nothing else known (csi-proxy) | empty only once looks spanning the settle time (`--disk-settle-time`) all showed none, the last after a `Rescan`; wait meanwhile |
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
//! Residual risk through csi-proxy v1.3.0 and master, which cannot tell a partition without a volume from none: a
//! foreign partition whose volume arrives later than the settle time makes the disk look empty, and the
//! `PartitionDisk` that follows is a no-op there; the late volume would then be taken for this driver's. The settle
//! time is chosen generous against Windows' arrival times (README, "Data safety"; real-node checks 27 and 28 measure
//! them). The native backend reads the partition table and has no such window; nor has a PowerShell-era csi-proxy
//! whose answer carries the proof (a foreign partition is listed, so it never says "no partition"), and without it
//! the settle time applies. Through csi-proxy nothing reads a RAW disk's sectors: data written without a partition
//! table (a whole-disk file system of another system) looks empty with or without the proof (native refuses it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::pending::{Clock, Destructive, Pending};
use super::stage::{volumes_fresh, write_error};
use super::{IscsiRecord, block_error, put_iscsi, run, same_id};
use crate::error::Error;
use crate::host::{
    Host, HostCapabilities, HostErrorKind, HostOp, HostPath, PartitionInfo, PartitionKind,
};
use crate::lifecycle::{Calls, Context};
use crate::state::Phase;

/// The default `--disk-settle-time`: how long a disk must show no volume, looked at again and again with `Rescan`s,
/// before csi-proxy's view of it counts as empty.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(15);
/// Time kept in reserve so the RPC can still answer before its deadline.
pub(crate) const ANSWER_RESERVE: Duration = Duration::from_secs(1);
/// The longest pause between two looks for an arrival: the pauses double from [`Judge::first_poll`], so looks are
/// dense while arrivals are likely and sparse after (each look is a host call, a process on PowerShell-era
/// csi-proxy), and the settle time's last look falls on its end.
const MAX_POLL: Duration = Duration::from_secs(8);
/// The longest pause between two looks for the outcome of a call that may still be running.
const MAX_OUTCOME_POLL: Duration = Duration::from_secs(10);

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
    /// 8 s).
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
    /// Its volume ids.
    volumes: Vec<String>,
    /// Its data partitions (other than Microsoft Reserved), when there is no volume and the host showed them: a
    /// backend that reads partition tables, or a PowerShell-era csi-proxy whose listing says the disk has no
    /// partition at all ([`HostErrorKind::NoPartition`], always from a listing made after a `Rescan` that followed
    /// the disk's onlining). `None`: nothing says (csi-proxy's `[]` and `[""]`).
    data: Option<Vec<PartitionInfo>>,
}

/// What to do after a look.
enum Next {
    /// Use this volume.
    Volume(String),
    /// Nothing to decide yet; why (the answer when the RPC cannot wait longer), and when the next verdict is due
    /// (the settle time's end), which the next look does not pass.
    Wait(String, Option<Instant>),
    /// An announced call's outcome does not show yet: [`Next::Wait`], looking less often.
    Outcome(String),
    /// The disk is proven empty: partition it.
    Partition,
    /// This driver's partition shows no volume across the settle time (csi-proxy): `PartitionDisk` again, keeping
    /// what was observed; then wait (why).
    PartitionAgain(String),
}

/// Pauses between looks, within the RPC's deadline.
pub(crate) struct Polls {
    delay: Duration,
    max: Duration,
}

impl Polls {
    /// For arrivals (doubling up to 8 s).
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
            max: MAX_OUTCOME_POLL,
        }
    }

    /// Wait before the next look, or `Err(UNAVAILABLE: why)` when the deadline leaves no room for it and an answer.
    pub(crate) async fn next<H: Host>(&mut self, h: &Calls<'_, H>, why: &str) -> Result<(), Error> {
        self.next_by(h, why, None).await
    }

    /// [`Polls::next`], the pause cut short so the next look is not later than `due` (a verdict due then).
    async fn next_by<H: Host>(
        &mut self,
        h: &Calls<'_, H>,
        why: &str,
        due: Option<Instant>,
    ) -> Result<(), Error> {
        let left = due.map(|t| t.saturating_duration_since(Instant::now()));
        let delay = match left {
            Some(left) if !left.is_zero() => self.delay.min(left),
            _ => self.delay,
        };
        if h.deadline().remaining() <= delay + ANSWER_RESERVE {
            return Err(Error::Unavailable(format!("{why}; kubelet will retry")));
        }
        debug!(?delay, why, "waiting before the next look");
        // Waiting for the host's storage stack, bounded by the RPC's deadline (not test synchronisation).
        tokio::time::sleep(delay).await;
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
    let caps = h.host().capabilities();
    let mut polls = Polls::new(judge);
    let mut outcome = Polls::outcome(judge);
    // A PartitionDisk answered in this call: its announcement is cleared in `rec` but not yet durable.
    let mut answered = false;
    // The first look follows the disk's onlining at once; every later one follows a pause.
    let mut fresh = true;
    let found = async {
        loop {
            let look = look(h, number, disk, caps, fresh).await?;
            fresh = false;
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
                    // Its volume arrives some time after the call returns: no look before a pause.
                    polls = Polls::new(judge);
                    polls.next(h, &created(disk)).await?;
                }
                Next::PartitionAgain(why) => {
                    judge.mark_now(&format!("{key}again"));
                    partition(cx, h, judge, None, volume_id, staging, rec, number, disk).await?;
                    answered = true;
                    polls.next(h, &why).await?;
                }
                Next::Wait(why, due) => polls.next_by(h, &why, due).await?,
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

/// Why a stage waits right after its own `PartitionDisk`.
fn created(disk: &str) -> String {
    format!("waiting for the volume of the partition this driver created on {disk} to appear")
}

/// What one `ListVolumesOnDisk` said.
enum Listed {
    /// These volumes.
    Volumes(Vec<String>),
    /// No volume (csi-proxy's `[]`, `[""]` or "not found").
    Nothing,
    /// No volume, because the disk has no partition at all ([`HostErrorKind::NoPartition`]).
    NoPartition,
}

/// `ListVolumesOnDisk`, its answer as [`Listed`].
async fn list<H: Host>(h: &Calls<'_, H>, number: u32, disk: &str) -> Result<Listed, Error> {
    match h
        .raw(
            HostOp::ListVolumesOnDisk,
            &disk,
            h.host().list_volumes_on_disk(number, h.deadline()),
        )
        .await
    {
        Err(e) if e.kind == HostErrorKind::NoPartition => Ok(Listed::NoPartition),
        Err(e) if e.kind == HostErrorKind::NotFound => Ok(Listed::Nothing),
        Err(e) => Err(block_error(e, &disk)),
        Ok(v) => {
            let v: Vec<String> = v
                .into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            Ok(if v.is_empty() {
                Listed::Nothing
            } else {
                Listed::Volumes(v)
            })
        }
    }
}

/// One look, paced so that no call is made that cannot change the verdict (issue 39):
///
/// * `fresh` (right after the stage brought the disk online): `ListVolumesOnDisk` alone — what has arrived by now is
///   listed, and a `Rescan` cannot show volumes that have not arrived yet;
/// * after a pause, through csi-proxy: a `Rescan` first, so the listing shows what arrived meanwhile (Windows'
///   storage cache lags arrivals); a backend whose listing refreshes the disk itself (native) lists alone;
/// * csi-proxy saying the disk has no partition at all (PowerShell era): taken only from a listing made after a
///   `Rescan` that followed the onlining — a fresh look's answer is confirmed by a `Rescan` and a second listing;
/// * no volume on a backend that reads partition tables: the layout (`DiskLayout`); with a data partition, whose
///   volume may still be in the storage cache's lag, a `Rescan` and a second listing only where the listing does not
///   refresh the disk (`Rescan` is host-wide, `UpdateHostStorageCache`: seconds on a node with many disks).
async fn look<H: Host>(
    h: &Calls<'_, H>,
    number: u32,
    disk: &str,
    caps: HostCapabilities,
    fresh: bool,
) -> Result<Look, Error> {
    let rescan = || run(h, HostOp::Rescan, &disk, h.host().rescan(h.deadline()));
    if !fresh && !caps.list_refreshes_disk {
        rescan().await?;
    }
    let mut listed = list(h, number, disk).await?;
    if matches!(listed, Listed::NoPartition) && fresh && !caps.list_refreshes_disk {
        rescan().await?;
        listed = list(h, number, disk).await?;
    }
    match listed {
        Listed::Volumes(volumes) => Ok(Look {
            volumes,
            data: None,
        }),
        Listed::NoPartition => Ok(Look {
            volumes: Vec::new(),
            data: Some(Vec::new()),
        }),
        Listed::Nothing if !caps.disk_layout => Ok(Look {
            volumes: Vec::new(),
            data: None,
        }),
        Listed::Nothing => {
            let layout = run(
                h,
                HostOp::DiskLayout,
                &disk,
                h.host().disk_layout(number, h.deadline()),
            )
            .await?;
            let data: Vec<PartitionInfo> = layout.data_partitions().cloned().collect();
            if !data.is_empty() && !caps.list_refreshes_disk {
                rescan().await?;
                if let Listed::Volumes(volumes) = list(h, number, disk).await? {
                    return Ok(Look {
                        volumes,
                        data: None,
                    });
                }
            }
            // A layout read before a `Rescan` still holds: partitions show at once, only their volumes lag.
            Ok(Look {
                volumes: Vec::new(),
                data: Some(data),
            })
        }
    }
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
        return Ok(Next::Wait(
            format!(
                "waiting for volume {want} of {disk} to appear (the volume this LUN was staged from)"
            ),
            None,
        ));
    }
    let data = look.data.as_deref();
    if partitioning {
        if data.is_some_and(|d| !d.is_empty()) {
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
        return ours_late(judge, key, rec, disk, data);
    }
    match data {
        Some(data) => by_layout(judge, key, disk, data),
        None => {
            let since = judge.since(&format!("{key}empty"));
            let waited = since.elapsed();
            if waited >= judge.settle() {
                info!(disk, waited = ?waited, "no volume across the settle time: the disk is empty");
                return Ok(Next::Partition);
            }
            Ok(Next::Wait(
                format!(
                    "waiting for the partitions of {disk} to appear: it shows no volume (online, with Rescans) for {} \
                     of the {} settle time (--disk-settle-time) before it counts as empty",
                    secs(waited),
                    secs(judge.settle())
                ),
                Some(since + judge.settle()),
            ))
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
    data: Option<&[PartitionInfo]>,
) -> Result<Next, Error> {
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
    let waited = judge.since(&format!("{key}ours")).elapsed();
    // Retryable for as long as it takes (the disk was proven empty before this driver's PartitionDisk, so a volume
    // that appears is its own); past the settle time the answer also names the other explanation.
    let hint = if waited >= judge.settle() && data.is_none() {
        ". If none ever appears, the disk holds a partition Windows makes no volume for (an unknown or foreign layout, \
         e.g. written by another operating system), on which PartitionDisk does nothing: it is not touched; clean the \
         LUN on the storage system or use another LUN"
    } else {
        ""
    };
    let why = format!(
        "waiting for the volume of the partition this driver created on {disk} to appear ({} so far){hint}",
        secs(waited)
    );
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
        return Ok(Next::PartitionAgain(why));
    }
    Ok(Next::Wait(why, None))
}

/// The verdict from a disk's data partitions (a backend that reads its partition table, or csi-proxy saying it has
/// none), for a disk with no volume.
fn by_layout(judge: &Judge, key: &str, disk: &str, data: &[PartitionInfo]) -> Result<Next, Error> {
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
    let since = judge.since(&format!("{key}basic"));
    let waited = since.elapsed();
    let numbers: Vec<String> = data.iter().map(|p| p.number.to_string()).collect();
    if waited < judge.settle() {
        return Ok(Next::Wait(
            format!(
                "waiting for the volume of partition {} of {disk} to appear ({} so far): a disk with a partition is \
                 not empty",
                numbers.join(", "),
                secs(waited)
            ),
            Some(since + judge.settle()),
        ));
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
    rec.pending = Some(announced.clone());
    rec.partitioning = true;
    put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
    // Run to its end on its own task: a stage that gave up still learns that it answered (`Clock::to_end`).
    match judge
        .clock
        .to_end(
            h,
            &announced,
            HostOp::PartitionDisk,
            disk,
            move |host: H, d| async move { host.partition_disk(number, d).await },
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
