//! What happens to a staged LUN after its stage: unstage (unmount, logout of the last user; a first stage that never
//! succeeded keeps its proof that the volume is this driver's), startup reconciliation, publish readiness (the staging
//! path must be the recorded volume's mount point, repaired from the record when the disk is there), stats and their
//! diagnosis, expansion.
//!
//! A mount point whose volume vanished (the session died with a reboot; csi-proxy never makes logins persistent) is
//! read differently per csi-proxy release: the PowerShell era (≤ v1.2.1) answers `GetVolumeIDFromTargetPath` from the
//! mount point's reparse data, so it still names the old volume; v1.3.0+ fail. So a matching id is never taken as
//! proof that the volume is there: `GetVolumeStats` of it must answer too.

use tracing::{debug, info};

use super::judge::{Judge, Polls};
use super::pending::{Destructive, Pending};
use super::{
    IscsiRecord, MIN_RESIZE_GROWTH, Sessions, block_error, details, iscsi_record, run, same_id,
    target_users,
};
use crate::error::Error;
use crate::host::{Host, HostErrorKind, HostOp, HostPath, SharedObject, Since};
use crate::lifecycle::{Calls, Context, ExpandRequest, Health, Usage, VolumeStats};
use crate::locks::Deadline;
use crate::state::{Phase, VolumeRecord};

/// Whether volume `v` is there (its disk visible and online): `GetVolumeStats` answers. `Err` only when the answer is
/// uncertain (deadline, csi-proxy unreachable).
pub(super) async fn present<H: Host>(h: &Calls<'_, H>, v: &str) -> Result<bool, Error> {
    match h
        .raw(
            HostOp::GetVolumeStats,
            &v,
            h.host().volume_stats(v, h.deadline()),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind.is_uncertain() => Err(block_error(e, &v)),
        Err(e) => {
            debug!(volume = %v, error = %e.message, "the volume is not there");
            Ok(false)
        }
    }
}

/// NodeUnstageVolume for an iSCSI record (the caller holds the volume guard): the mount point, then the session when
/// no other record names the target (and, for an adopted record, the target serves no other disk), then the record.
///
/// kubelet also unstages a volume whose stage never succeeded (an uncertain stage, when the pod is deleted). Such a
/// record may hold the only proof that this driver created the disk's volume — the marks of a `PartitionDisk` whose
/// volume was not formatted yet — and an announced call that may still run: like a rollback, the unstage keeps them
/// in a released record (no longer a user of the session), so the next stage of the volume formats the volume it
/// created instead of refusing it as someone else's, and never issues a second destructive call while the first may
/// run. What the judge observed of the LUN's disk ends with the unstage.
pub(super) async fn unstage<H: Host>(
    cx: Context<'_, H>,
    sessions: &Sessions,
    judge: &Judge,
    record: &VolumeRecord,
    staging: &HostPath,
    rec: &IscsiRecord,
    d: Deadline,
) -> Result<(), Error> {
    let volume_id = &record.volume_id;
    let h = &cx.calls(d);
    // A login of an earlier stage that may still run would land after this unstage: UNAVAILABLE until it cannot.
    super::creation::login_settled(h, sessions, record, rec).await?;
    // SINGLE_NODE_READER_ONLY (2), MULTI_NODE_READER_ONLY (3): the disk was left (natively: made) read-only.
    let reader = super::access::staged_reader_only(record);
    // The staging path's removal is announced in the record (`removal.rs`): the facts written from here on carry
    // what is left of it.
    let rec = &mut rec.clone();
    remove_mount(cx, h, judge, record, staging, rec, reader).await?;
    let target = cx.object_locks().lock(&rec.target_key()).await;
    judge.forget_lun(&rec.lun_key());
    let others = target_users(cx, volume_id, &rec.iqn)?;
    // An adopted volume's siblings may have lost their records too: the host must also show no other disk.
    if cx.may_remove_shared(others, &rec.iqn)
        && (!record.adopted || super::adopt::target_serves_only_this_disk(h, rec).await?)
    {
        sessions.forget(&rec.target_key());
        judge.forget_target(&rec.iqn);
        // Announced in the record first: a logout that outlives this call is waited for by the target's stages.
        super::removal::logout_announced(cx, h, &judge.clock, rec, &|r| record.with_details(r))
            .await?;
    } else {
        debug!(iqn = %rec.iqn, others, "session kept: other staged LUNs of the target use it");
    }
    // A first stage that never succeeded keeps its proof that the volume is this driver's (see above).
    let keep = record.phase == Phase::Staging && rec.volume_is_ours();
    // Gone from the store (no longer counted) before the lock is released; durable after it, so other LUNs' stages
    // and unstages need not wait for this write (a crash before it over-counts, which never logs out a session in
    // use).
    let written = if keep {
        let mut kept = rec.clone();
        kept.release();
        // The login it announced is over (waited for above).
        kept.creating = None;
        cx.store().put_volume(&iscsi_record(
            cx,
            volume_id,
            staging,
            Phase::Staging,
            &kept,
        )?)
    } else {
        cx.store().remove_volume(volume_id)
    };
    drop(target);
    written.await?;
    if let Some(c) = &rec.creating {
        sessions.1.forget(volume_id, c);
    }
    if keep {
        info!(staging = %staging, "iSCSI volume unstaged; its record is kept (released): this driver partitioned the \
              LUN and no stage has formatted its volume yet, which the next stage of the volume does");
    } else {
        info!(staging = %staging, "iSCSI volume unstaged");
    }
    Ok(())
}

/// Take the mount point at `staging` away: flush and unmount a live volume; a mount point whose volume is gone
/// (after a reboot) or an empty directory only needs a non-forced `Rmdir`, which never deletes data.
async fn remove_mount<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    judge: &Judge,
    record: &VolumeRecord,
    staging: &HostPath,
    rec: &mut IscsiRecord,
    reader: bool,
) -> Result<(), Error> {
    let d = h.deadline();
    let v = match h
        .raw(
            HostOp::GetVolumeIDFromTargetPath,
            staging,
            h.host().volume_id_from_target_path(staging, d),
        )
        .await
    {
        Ok(v) => v,
        Err(e) if e.kind.is_uncertain() => return Err(block_error(e, staging)),
        Err(_) => {
            // An empty directory, a mount point nothing can be read from, or nothing (`remove_dir` takes "not found"
            // as done, so no `PathExists` first).
            return super::removal::remove_staging_path(cx, h, &judge.clock, record, staging, rec)
                .await;
        }
    };
    if let Some(want) = &rec.volume
        && !same_id(want, &v)
    {
        return Err(Error::FailedPrecondition(format!(
            "{staging} holds volume {v}, not the recorded {want}; refusing to unmount it"
        )));
    }
    // No `WriteVolumeCache` first: `UnmountVolume` flushes the volume before it removes the mount point on every
    // csi-proxy release (PowerShell era `Write-VolumeCache`, v1.3.0+ `MSFT_Volume.Flush`) and the native backend,
    // and fails, like the flush would, when the volume is gone (after a reboot): "not found" below.
    match h
        .raw(
            HostOp::UnmountVolume,
            staging,
            h.host().unmount_volume(&v, staging, d),
        )
        .await
    {
        Ok(()) => {}
        Err(e) if e.kind == HostErrorKind::NotFound => {
            // Nothing mounted there any more, or the mount point names a volume that is gone (the session went with
            // a reboot; PowerShell-era csi-proxy reads the reparse data): only the mount point is left to remove.
            info!(staging = %staging, volume = %v, error = %e.message, "nothing left to unmount: removing the mount point")
        }
        Err(e) if reader && !e.kind.is_uncertain() => {
            // A volume staged reader-only sits on a read-only disk, and `UnmountVolume` flushes first on every
            // csi-proxy release: a flush the host refuses there (unverified: real-node check 29) must not keep the
            // LUN staged for ever. A read-only volume has nothing to flush; the non-forced `Rmdir` below removes the
            // mount point itself.
            info!(staging = %staging, volume = %v, error = %e.message, "unmounting a read-only volume failed (its \
                  flush): removing the mount point without it")
        }
        Err(e) => return Err(block_error(e, staging)),
    }
    super::removal::remove_staging_path(cx, h, &judge.clock, record, staging, rec).await
}

/// Log out of the record's target (the caller holds the target's lock and found no other user). A target without a
/// session (logged out already, or gone with a reboot) is done: v1.3.0+ answer OK, the PowerShell era NotFound.
pub(super) async fn logout<H: Host>(h: &Calls<'_, H>, rec: &IscsiRecord) -> Result<(), Error> {
    let (Some(iqn), Some(p)) = (rec.login_iqn(), rec.logout_portal()) else {
        debug!(iqn = %rec.iqn, "never logged in: nothing to log out");
        return Ok(());
    };
    // What the backend will do with it, so the log says what happened (issue 37 item 15).
    let joined = h.host().made_by_wincsi(SharedObject::IscsiSession(iqn)) == Some(false);
    match h
        .raw(
            HostOp::DisconnectTarget,
            &iqn,
            h.host().disconnect_target(p, iqn, h.deadline()),
        )
        .await
    {
        Ok(()) if joined => {
            info!(iqn = %iqn, "last staged LUN of the target: its session is left in place (someone else made it; \
                  wincsi joined it)");
            Ok(())
        }
        Ok(()) => {
            info!(iqn = %iqn, "last staged LUN of the target: logged out");
            Ok(())
        }
        Err(e) if e.kind == HostErrorKind::NotFound => {
            debug!(iqn = %iqn, "no session to log out");
            Ok(())
        }
        Err(e) => Err(block_error(e, &iqn)),
    }
}

/// Startup reconciliation of a staged iSCSI volume. A mount point is never judged by `IsSymlink` (Go reports mount
/// points differently across versions) and nothing is removed here: when the recorded volume is not mounted and
/// present at the staging path and the node rebooted since the stage (the session died with it), the record is
/// marked for re-stage; the next stage logs in again and repairs the mount point. Without a reboot since (a portal
/// outage keeps the session and takes the disk away until it answers) it is left staged and watched
/// ([`Health::Unreachable`]): marked for re-stage, every publish of it would answer "not staged" for ever.
pub(super) async fn check<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    staging: &HostPath,
    d: Deadline,
) -> Result<Health, Error> {
    let r = details(rec)?;
    let h = &cx.calls(d);
    let healthy = match h
        .raw(
            HostOp::GetVolumeIDFromTargetPath,
            staging,
            h.host().volume_id_from_target_path(staging, d),
        )
        .await
    {
        Ok(v) if r.volume.as_deref().is_none_or(|w| same_id(w, &v)) => present(h, &v).await?,
        Err(e) if e.kind.is_uncertain() => return Err(block_error(e, staging)),
        _ => false,
    };
    if healthy {
        return Ok(Health::Healthy);
    }
    if !rebooted_since_stage(h, &r) {
        // No reboot since the stage (or none that can be told): the session outlives a portal that stops answering,
        // only its disk goes, and the mount point resolves again with the same volume once the portal answers. A
        // running pod's path goes through it and kubelet never re-stages a volume it believes mounted, so the record
        // stays `Staged` (publish works again once the disk is back) and the volume is watched until it is.
        info!(volume_id = %rec.volume_id, staging = %staging, iqn = %r.iqn, "the iSCSI volume is not there now,               without a reboot since its stage (its portal may not answer): left as staged and checked again until               its disk is back");
        return Ok(Health::Unreachable);
    }
    cx.mark_needs_restage(rec).await?;
    info!(volume_id = %rec.volume_id, staging = %staging, iqn = %r.iqn, "iSCSI volume no longer mounted: \
          marked for re-stage");
    Ok(Health::NeedsRestage)
}

/// Whether the node rebooted since the last successful stage of `r` (its `staged_boot`); `false` when that cannot
/// be told (a record of an earlier version, a backend without uptime).
fn rebooted_since_stage<H: Host>(h: &Calls<'_, H>, r: &IscsiRecord) -> bool {
    r.staged_boot
        .zip(h.host().uptime())
        .is_some_and(|(s, now)| s.since(now) == Since::EarlierBoot)
}

/// NodePublishVolume's check before it links a target to the staging path: the staging path is the mount point of
/// the recorded volume, and that volume is there (a link to a mount point whose volume is gone would be a *file* link,
/// useless to the pod; a link to an empty directory would let the pod write into nothing). A staging path that lost
/// its mount point while the volume is there (an unstage that removed the mount point and then failed to log out
/// leaves the record `Staged`) is repaired from the record: mounted again. Anything else is refused with a message.
pub(super) async fn ready<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    staging: &HostPath,
    d: Deadline,
) -> Result<(), Error> {
    let r = details(rec)?;
    let Some(v) = &r.volume else {
        return Ok(());
    };
    let h = &cx.calls(d);
    let rebooted = rebooted_since_stage(h, &r);
    let gone = || {
        if rebooted {
            Error::FailedPrecondition(format!(
                "volume {v} of {} LUN {} is not there any more (the iSCSI session or the disk is gone), so {staging} \
                 does not resolve and a link to it would be unusable; the volume must be staged again (restart the pod)",
                r.iqn, r.lun
            ))
        } else {
            // No reboot since the stage: the session stays through a portal outage and the disk comes back with the
            // volume (`check`); a publish answers again once it has.
            Error::Unavailable(format!(
                "volume {v} of {} LUN {} is not there now (its disk went away without a reboot of the node since the \
                 stage: the portal may not answer, or the disk is arriving again), so {staging} does not resolve; \
                 kubelet will retry. If the disk does not come back, restart the pod to stage the volume again",
                r.iqn, r.lun
            ))
        }
    };
    let mounted = h
        .raw(
            HostOp::GetVolumeIDFromTargetPath,
            staging,
            h.host().volume_id_from_target_path(staging, d),
        )
        .await;
    match mounted {
        Ok(m) if same_id(&m, v) => {
            if present(h, v).await? {
                Ok(())
            } else {
                Err(gone())
            }
        }
        Ok(m) => Err(Error::FailedPrecondition(format!(
            "{staging} holds volume {m}, not the recorded {v} of {} LUN {}; refusing to publish it",
            r.iqn, r.lun
        ))),
        Err(e) if e.kind.is_uncertain() => Err(block_error(e, staging)),
        Err(e) => {
            // Nothing mounted there: the mount point is gone (or never read back). Repair it when the volume is there.
            if !present(h, v).await? {
                return Err(gone());
            }
            info!(staging = %staging, volume = %v, error = %e.message, "the staging path is not the volume's mount \
                  point any more: mounting the recorded volume there again");
            remount(h, staging, v).await
        }
    }
}

/// Mount volume `v` at `staging` again (its own staging path, which holds no mount point of it): a directory or a
/// mount point left there is removed first with a non-forced `Rmdir` (never data).
async fn remount<H: Host>(h: &Calls<'_, H>, staging: &HostPath, v: &str) -> Result<(), Error> {
    let d = h.deadline();
    match h
        .raw(HostOp::Mkdir, staging, h.host().mkdir(staging, d))
        .await
    {
        Ok(()) => {}
        Err(e) if e.kind == HostErrorKind::AlreadyExists => {
            run(h, HostOp::Rmdir, staging, h.host().rmdir(staging, false, d)).await?;
            run(h, HostOp::Mkdir, staging, h.host().mkdir(staging, d)).await?;
        }
        Err(e) => return Err(block_error(e, staging)),
    }
    run(
        h,
        HostOp::MountVolume,
        staging,
        h.host().mount_volume(v, staging, d),
    )
    .await
}

/// NodeGetVolumeStats for an iSCSI record.
pub(super) async fn stats<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    path: &HostPath,
    d: Deadline,
) -> Result<VolumeStats, Error> {
    let r = &details(rec)?;
    let staging = cx.staging_behind(rec, path)?;
    let h = &cx.calls(d);
    let mounted = h
        .raw(
            HostOp::GetVolumeIDFromTargetPath,
            &staging,
            h.host().volume_id_from_target_path(&staging, d),
        )
        .await;
    let why = match mounted {
        Ok(v)
            if r.volume.as_deref().is_none_or(|w| same_id(w, &v)) && rec.phase == Phase::Staged =>
        {
            match h
                .raw(HostOp::GetVolumeStats, &v, h.host().volume_stats(&v, d))
                .await
            {
                Ok((total, used)) => {
                    let (total, used) = (total as i64, used as i64);
                    return Ok(VolumeStats {
                        usage: Usage {
                            total,
                            used,
                            available: (total - used).max(0),
                        },
                        abnormal: false,
                        message: format!("volume {v} of {} LUN {} is mounted", r.iqn, r.lun),
                    });
                }
                Err(e) if e.kind.is_uncertain() => return Err(block_error(e, &v)),
                // The mount point still names the volume, but it is gone (PowerShell-era csi-proxy).
                Err(_) => diagnose(h, r).await,
            }
        }
        Err(e) if e.kind.is_uncertain() => return Err(block_error(e, &staging)),
        Ok(v) if r.volume.as_deref().is_some_and(|w| !same_id(w, &v)) => {
            format!("{staging} holds volume {v}, not the recorded one")
        }
        _ => diagnose(h, r).await,
    };
    Ok(VolumeStats {
        usage: Usage::default(),
        abnormal: true,
        message: format!("{why}; restart the pod to re-stage the volume"),
    })
}

/// Why a staged volume is not usable, from the target's disks (read-only calls).
async fn diagnose<H: Host>(h: &Calls<'_, H>, r: &IscsiRecord) -> String {
    let d = h.deadline();
    let (Some(iqn), Some(p)) = (r.login_iqn(), r.logout_portal()) else {
        return "the volume is not mounted".to_owned();
    };
    let gone = || {
        format!(
            "the iSCSI session to {} is gone (node rebooted, target unreachable or logged out)",
            r.iqn
        )
    };
    match h
        .raw(
            HostOp::GetTargetDisks,
            &iqn,
            h.host().get_target_disks(p, iqn, d),
        )
        .await
    {
        Ok(disks) if disks.is_empty() => gone(),
        // PowerShell-era csi-proxy: a target without a session has no connection to list.
        Err(e) if e.kind == HostErrorKind::NotFound => gone(),
        Ok(disks) => match r.disk_number.filter(|n| disks.contains(n)) {
            Some(n) => match h
                .raw(HostOp::GetDiskState, &n, h.host().is_disk_online(n, d))
                .await
            {
                Ok(false) => format!("disk {n} ({} LUN {}) is offline", r.iqn, r.lun),
                _ => "the volume is not mounted at the staging path".to_owned(),
            },
            None => format!("the disk of {} LUN {} is no longer visible", r.iqn, r.lun),
        },
        Err(e) => format!(
            "the iSCSI target {} cannot be queried: {}",
            r.iqn, e.message
        ),
    }
}

/// NodeExpandVolume: grow the volume's partition to the LUN's size and return the new capacity.
///
/// `ResizeVolume` is called only when the LUN has at least [`MIN_RESIZE_GROWTH`] beyond the volume: csi-proxy
/// v1.2.0+ skip smaller growth themselves, and v1.1.x has no skip rule, so a partition a few KiB below its maximum
/// (every new partition is: csi-proxy#195) would reach `Resize-Partition` and fail ("Size Not Supported … less than
/// the minimum of 1MB"). The same rule on every release: growth under 100 MiB (less the partition table and the
/// reserved partition) is not done, and the current capacity is reported.
///
/// `ResizeVolume` is destructive and may outlive the driver (`pending.rs`): it is announced in the record before it
/// is issued and its outcome recorded after (two writes, only when a resize is made); an announced resize without
/// outcome is learned from the volume's size (within 100 MiB of the disk) before another is issued.
pub(super) async fn expand<H: Host>(
    cx: Context<'_, H>,
    judge: &Judge,
    rec: &VolumeRecord,
    path: &HostPath,
    req: &ExpandRequest,
    d: Deadline,
) -> Result<i64, Error> {
    let mut r = details(rec)?;
    let staging = cx.staging_behind(rec, path)?;
    if super::access::staged_reader_only(rec) {
        // A reader-only volume's disk is never written (`access.rs`).
        return Err(Error::FailedPrecondition(format!(
            "volume {:?} is staged reader-only: its disk is kept read-only and never resized; unstage it and stage it              with a writer access mode to expand it",
            rec.volume_id
        )));
    }
    let h = &cx.calls(d);
    let v = run(
        h,
        HostOp::GetVolumeIDFromTargetPath,
        &staging,
        h.host().volume_id_from_target_path(&staging, d),
    )
    .await?;
    if r.volume.as_deref().is_some_and(|w| !same_id(w, &v)) {
        return Err(Error::FailedPrecondition(format!(
            "{staging} holds volume {v}, not the recorded one; refusing to resize it"
        )));
    }
    let Some(n) = r.disk_number else {
        return Err(Error::FailedPrecondition(
            "the volume's disk is not recorded; re-stage it".to_owned(),
        ));
    };
    let disk = format!("disk {n} ({} LUN {})", r.iqn, r.lun);
    run(h, HostOp::Rescan, &disk, h.host().rescan(d)).await?;
    let disk_size = run(h, HostOp::GetDiskStats, &disk, h.host().disk_size(n, d)).await?;
    if req.required_bytes > 0 && disk_size < req.required_bytes as u64 {
        return Err(Error::FailedPrecondition(format!(
            "{disk} is {disk_size} bytes, less than the requested {} bytes: grow the LUN on the storage system \
             first (kubelet retries)",
            req.required_bytes
        )));
    }
    let reached = |total: u64, size: u64| size < total.saturating_add(MIN_RESIZE_GROWTH);
    let mut before = run(h, HostOp::GetVolumeStats, &v, h.host().volume_stats(&v, d))
        .await?
        .0;
    if let Some(p) = r
        .pending
        .clone()
        .filter(|p| p.call == Destructive::ResizeVolume)
    {
        let mut polls = Polls::outcome(judge);
        while !reached(before, p.disk_size.unwrap_or(disk_size)) && {
            judge.clock.learn(h, &p).await?;
            p.may_run(&judge.clock)
        } {
            polls
                .next(h, &p.waiting(&judge.clock, &v, "the new size"))
                .await?;
            before = run(h, HostOp::GetVolumeStats, &v, h.host().volume_stats(&v, d))
                .await?
                .0;
        }
        // Over: it reached its size, or it cannot still be running.
        judge.clock.done(&p);
        r.pending = None;
        cx.store().put_volume(&rec.with_details(&r)?).await?;
    }
    if reached(before, disk_size) {
        info!(
            capacity = before,
            disk_size,
            "volume not resized: the LUN has less than 100 MiB beyond the volume (csi-proxy v1.2+ skip such growth, \
             v1.1.x fails on it); reporting the current capacity"
        );
        return Ok(before as i64);
    }
    let announced = judge.clock.announce(
        h.host(),
        Pending::now(Destructive::ResizeVolume)
            .on_volume(&v)
            .with_disk_size(disk_size),
    );
    r.pending = Some(announced.clone());
    cx.store().put_volume(&rec.with_details(&r)?).await?;
    let resized = h
        .raw(HostOp::ResizeVolume, &v, h.host().resize_volume(&v, 0, d))
        .await;
    match resized {
        // It may still run: the announcement stays for the next expansion to learn its outcome.
        Err(e) if e.kind.is_uncertain() => return Err(block_error(e, &v)),
        result => {
            judge.clock.done(&announced);
            r.pending = None;
            cx.store().put_volume(&rec.with_details(&r)?).await?;
            result.map_err(|e| block_error(e, &v))?;
        }
    }
    let (after, _) = run(h, HostOp::GetVolumeStats, &v, h.host().volume_stats(&v, d)).await?;
    if after == before {
        info!(
            capacity = after,
            disk_size,
            "volume not grown (csi-proxy skipped the resize); reporting the current capacity"
        );
    } else {
        info!(before, after, "volume expanded");
    }
    Ok(after as i64)
}
