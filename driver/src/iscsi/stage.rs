//! NodeStageVolume of an iSCSI LUN (the sequence in the module docs): portals, login, disk identity, volume
//! creation only on a disk without volumes, format only of a volume this driver created, mount.

use tracing::{debug, info, warn};

use super::disk::find_disk;
use super::{
    IscsiRecord, IscsiVolume, block_error, put_iscsi, run, same_id, target_users, uncertain,
};
use crate::error::Error;
use crate::host::{Host, HostErrorKind, HostOp, HostPath, IscsiAuth};
use crate::lifecycle::{Calls, Context};
use crate::locks::Deadline;
use crate::state::Phase;

/// NodeStageVolume of an iSCSI volume (the lifecycle validated the request and holds the volume guard).
pub(super) async fn stage<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    staging: &HostPath,
    vol: &IscsiVolume,
    d: Deadline,
) -> Result<(), Error> {
    let h = &cx.calls(d);
    let existing = cx.store().volume(volume_id)?;
    let prev = match &existing {
        None => None,
        Some(rec) => match rec.details::<IscsiRecord>()? {
            Some(r)
                if r.same_lun(vol) && rec.staging_path.eq_ignore_ascii_case(staging.as_str()) =>
            {
                Some((rec.phase, r))
            }
            _ => {
                return Err(Error::AlreadyExists(format!(
                    "volume {volume_id:?} is already staged at {} from another source or path; unstage it first",
                    rec.staging_path
                )));
            }
        },
    };
    // What is mounted at the staging path now (only asked when this driver may have mounted something there).
    let mut mounted = None;
    if let Some((phase, r)) = &prev {
        match h
            .raw(
                HostOp::GetVolumeIDFromTargetPath,
                staging,
                h.host().volume_id_from_target_path(staging, d),
            )
            .await
        {
            Ok(v) => {
                if *phase == Phase::Staged
                    && r.volume.as_deref().is_some_and(|want| same_id(want, &v))
                {
                    debug!(staging = %staging, volume = %v, "already staged: nothing to do");
                    return Ok(());
                }
                mounted = Some(v);
            }
            Err(e) if uncertain(e.kind) => return Err(block_error(e, staging)),
            Err(_) => {
                info!(staging = %staging, "the recorded volume is not mounted at the staging path: (re)staging")
            }
        }
    }
    let fresh = prev.is_none();
    let mut rec = prev
        .map(|(_, r)| r)
        .unwrap_or_else(|| IscsiRecord::new(vol));
    rec.portals = vol.portals.clone();
    // Intent first: from here on the record counts as a user of the target's session.
    put_iscsi(cx, volume_id, staging, Phase::Staging, &rec)?;
    let _target = cx.object_locks().lock(&rec.target_key()).await;
    let result = stage_steps(cx, h, volume_id, staging, vol, &mut rec, mounted, fresh).await;
    match result {
        Ok(()) => {
            put_iscsi(cx, volume_id, staging, Phase::Staged, &rec)?;
            info!(staging = %staging, iqn = %vol.iqn, lun = vol.lun, volume = ?rec.volume, "iSCSI volume staged");
            Ok(())
        }
        Err(err @ (Error::DeadlineExceeded(_) | Error::Unavailable(_))) => {
            warn!(error = %err, "stage outcome uncertain: keeping the record for kubelet's retry or unstage");
            Err(err)
        }
        Err(err) if fresh => {
            // kubelet will not unstage after a definite failure: log out again if nobody else uses the target.
            if rec.session_portal.is_some() && target_users(cx, volume_id, &vol.iqn)? == 0 {
                let p = rec.logout_portal().cloned();
                if let Some(p) = p
                    && let Err(e) = h
                        .raw(
                            HostOp::DisconnectTarget,
                            &p,
                            h.host().disconnect_target(&p, &vol.iqn, d),
                        )
                        .await
                {
                    warn!(error = %e, "rollback: logout failed; keeping the record");
                    return Err(err);
                }
            }
            if rec.partitioned {
                // Keep the fact that the unformatted volume is ours, so a retry can finish formatting it.
                rec.session_portal = None;
                put_iscsi(cx, volume_id, staging, Phase::Staging, &rec)?;
            } else {
                cx.store().remove_volume(volume_id)?;
            }
            Err(err)
        }
        Err(err) => Err(err),
    }
}

#[allow(clippy::too_many_arguments)]
async fn stage_steps<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    volume_id: &str,
    staging: &HostPath,
    vol: &IscsiVolume,
    rec: &mut IscsiRecord,
    mounted: Option<String>,
    fresh: bool,
) -> Result<(), Error> {
    let d = h.deadline();
    let target = format!("{} (LUN {})", vol.iqn, vol.lun);
    // 1. Portals (every one, so a later stage can use any of them).
    let mut added = Vec::new();
    let mut last = None;
    for p in &vol.portals {
        let added_portal = match &vol.discovery {
            IscsiAuth::None => {
                h.raw(HostOp::AddTargetPortal, p, h.host().add_target_portal(p, d))
                    .await
            }
            chap => {
                h.raw(
                    HostOp::AddTargetPortal,
                    p,
                    h.host().add_target_portal_with_chap(p, chap, d),
                )
                .await
            }
        };
        match added_portal {
            Ok(()) => added.push(p.clone()),
            Err(e) if uncertain(e.kind) => return Err(block_error(e, p)),
            Err(e) => {
                warn!(portal = %p, error = %e.message, "cannot add portal");
                last = Some(block_error(e, p));
            }
        }
    }
    if added.is_empty() {
        return Err(last.unwrap_or_else(|| Error::InvalidArgument("no portal".to_owned())));
    }
    // 2. Login (the mutual secret is node-global and must be in place first).
    if let Some(secret) = &vol.mutual_secret {
        run(
            h,
            HostOp::SetMutualChapSecret,
            &"the initiator",
            h.host().set_mutual_chap_secret(secret, d),
        )
        .await?;
    }
    let mut session = None;
    for p in &added {
        let login = if vol.persistent {
            h.raw(
                HostOp::ConnectTarget,
                &vol.iqn,
                h.host()
                    .connect_target_persistent(p, &vol.iqn, &vol.auth, d),
            )
            .await
        } else {
            h.raw(
                HostOp::ConnectTarget,
                &vol.iqn,
                h.host().connect_target(p, &vol.iqn, &vol.auth, d),
            )
            .await
        };
        match login {
            Ok(()) => {
                session = Some(p.clone());
                break;
            }
            Err(e) if uncertain(e.kind) || e.kind == HostErrorKind::LogonFailure => {
                return Err(block_error(e, &vol.iqn));
            }
            Err(e) => {
                warn!(portal = %p, error = %e.message, "login through this portal failed");
                last = Some(block_error(e, &vol.iqn));
            }
        }
    }
    let Some(portal) = session else {
        return Err(last.unwrap_or_else(|| Error::Internal("no login attempted".to_owned())));
    };
    rec.session_portal = Some(portal.clone());
    // 3. Which disk.
    let (number, ids) = find_disk(h, &portal, vol, rec).await?;
    rec.disk_number = Some(number);
    if let Some(ids) = &ids {
        rec.page83 = Some(ids.page83.trim().to_owned()).filter(|s| !s.is_empty());
        rec.serial = Some(ids.serial.trim().to_owned()).filter(|s| !s.is_empty());
    }
    // Identity recorded before anything changes on the disk.
    put_iscsi(cx, volume_id, staging, Phase::Staging, rec)?;
    let disk = format!("disk {number} ({target})");
    if vol.read_only {
        run(
            h,
            HostOp::SetDiskState,
            &disk,
            h.host().set_disk_online(number, true, d),
        )
        .await?;
    } else {
        // A backend with `clear_disk_read_only` also clears a read-only flag left by the SAN policy.
        run(
            h,
            HostOp::SetDiskState,
            &disk,
            h.host().set_disk_online_writable(number, d),
        )
        .await?;
    }
    // 4. Volume: create only on a disk without volumes; never touch a foreign layout.
    let mut vols = volumes_on(h, number, &disk).await?;
    if vols.is_empty() {
        rec.partitioned = true;
        put_iscsi(cx, volume_id, staging, Phase::Staging, rec)?;
        run(
            h,
            HostOp::PartitionDisk,
            &disk,
            h.host().partition_disk(number, d),
        )
        .await?;
        vols = volumes_on(h, number, &disk).await?;
        if vols.is_empty() {
            rec.partitioned = false;
            put_iscsi(cx, volume_id, staging, Phase::Staging, rec)?;
            return Err(Error::FailedPrecondition(format!(
                "{disk} has partitions but no volume Windows can use (an unknown or foreign partition layout, \
                 e.g. written by another operating system); refusing to touch it. Clean the LUN on the storage \
                 system or use another LUN"
            )));
        }
    }
    if vols.len() > 1 {
        return Err(Error::FailedPrecondition(format!(
            "{disk} has {} volumes ({}); this driver mounts a LUN with exactly one volume and will not guess",
            vols.len(),
            vols.join(", ")
        )));
    }
    let vid = vols.remove(0);
    if !run(
        h,
        HostOp::IsVolumeFormatted,
        &vid,
        h.host().is_volume_formatted(&vid, d),
    )
    .await?
    {
        if !rec.partitioned {
            return Err(Error::FailedPrecondition(format!(
                "volume {vid} on {disk} has no file system Windows recognises, but this driver did not create \
                 it (it may hold data of another operating system, e.g. ext4); refusing to format it"
            )));
        }
        rec.volume = Some(vid.clone());
        put_iscsi(cx, volume_id, staging, Phase::Staging, rec)?;
        info!(volume = %vid, disk = %disk, "formatting the new volume (NTFS)");
        run(
            h,
            HostOp::FormatVolume,
            &vid,
            h.host().format_volume(&vid, d),
        )
        .await?;
    }
    rec.volume = Some(vid.clone());
    put_iscsi(cx, volume_id, staging, Phase::Staging, rec)?;
    // 5. Mount at the staging path.
    match mounted {
        Some(v) if same_id(&v, &vid) => {
            debug!(staging = %staging, "the volume is already mounted at the staging path");
            return Ok(());
        }
        Some(other) => {
            return Err(Error::FailedPrecondition(format!(
                "{staging} has volume {other} mounted, not {vid}; refusing to replace it"
            )));
        }
        None => {}
    }
    match h
        .raw(HostOp::Mkdir, staging, h.host().mkdir(staging, d))
        .await
    {
        Ok(()) => {}
        Err(e) if e.kind == HostErrorKind::AlreadyExists && !fresh => {
            // A mount point left dangling by a reboot (its volume vanished with the session): remove the reparse
            // point (non-forced Rmdir never deletes data) and start over.
            info!(staging = %staging, "removing a dangling mount point at the staging path");
            run(h, HostOp::Rmdir, staging, h.host().rmdir(staging, false, d)).await?;
            run(h, HostOp::Mkdir, staging, h.host().mkdir(staging, d)).await?;
        }
        Err(e) => return Err(block_error(e, staging)),
    }
    run(
        h,
        HostOp::MountVolume,
        staging,
        h.host().mount_volume(&vid, staging, d),
    )
    .await?;
    Ok(())
}

/// `ListVolumesOnDisk`; "not found" counts as no volume: csi-proxy's PowerShell generation fails with "No
/// MSFT_Partition objects found" on a disk without partitions instead of returning an empty list.
pub(super) async fn volumes_on<H: Host>(
    h: &Calls<'_, H>,
    disk: u32,
    subject: &str,
) -> Result<Vec<String>, Error> {
    match h
        .raw(
            HostOp::ListVolumesOnDisk,
            &subject,
            h.host().list_volumes_on_disk(disk, h.deadline()),
        )
        .await
    {
        Ok(v) => Ok(v),
        Err(e) if e.kind == HostErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(block_error(e, &subject)),
    }
}
