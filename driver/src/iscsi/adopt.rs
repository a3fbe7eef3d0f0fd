//! Adoption of a staged LUN whose state record was lost or wiped ([`Protocol::adopt`](crate::lifecycle::Protocol)):
//! what the host proves about the staging path becomes a record, so the lifecycle can unstage it like any other.
//!
//! The proof, every step a host answer and nothing guessed:
//!
//! 1. `GetVolumeIDFromTargetPath(staging)`: the staging path is a mounted folder of volume *V* (not a mounted
//!    folder: nothing iSCSI to adopt), and `GetVolumeStats(V)` answers (PowerShell-era csi-proxy names a vanished
//!    volume from a dangling mount point's reparse data);
//! 2. `GetDiskNumberFromVolumeID(V)`: *V* lives on disk *N*;
//! 3. `ListTargetPortals` → per portal `DiscoverTargetPortal` → per target (as it spells itself) `GetTargetDisks`:
//!    exactly one target's session serves disk *N* (none: a foreign volume, e.g. a local or another driver's disk, is
//!    not adopted; several: ambiguous, not adopted);
//! 4. `ListDiskLocations`: disk *N*'s LUN (a disk whose location does not parse is not adopted); `ListDiskIDs`, when
//!    it answers, pins page83 and serial.
//!
//! The record names the portal that reported the target, the target's own spelling, the LUN, the disk and the volume;
//! it never claims this driver created the volume (so nothing is ever formatted on its strength) and knows of no mutual
//! CHAP secret. Unstaging it logs out of the target only when no other record names it **and** the target's sessions
//! serve exactly this disk (`GetTargetDisks` = {*N*}): other LUNs of the target may be mounted for volumes whose records
//! were lost too, and csi-proxy v1 cannot say where a volume is mounted, so their session is kept (logged).

use tracing::{debug, info, warn};

use super::discovery::PORTAL_SET_KEY;
use super::volume::present;
use super::{IscsiRecord, block_error, same_name};
use crate::error::Error;
use crate::host::{Host, HostOp, Portal, SharedObject};
use crate::lifecycle::{Calls, Context, Found};
use crate::locks::Deadline;
use crate::state::{Phase, VolumeRecord};

#[cfg(test)]
mod tests;

/// One read-only host call for the proof: `Ok(None)` on a definite failure (the fact cannot be proven: nothing is
/// adopted), `Err` when the answer is uncertain (deadline, backend unreachable: kubelet retries). Not an `async fn`,
/// so that `fut` is boxed at once (see [`Calls::raw`]).
fn fact<H: Host, T: std::fmt::Debug>(
    h: &Calls<'_, H>,
    op: HostOp,
    subject: &(dyn std::fmt::Display + Sync),
    fut: impl std::future::Future<Output = crate::host::HostResult<T>>,
) -> impl std::future::Future<Output = Result<Option<T>, Error>> {
    let call = h.raw(op, subject, fut);
    async move {
        match call.await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind.is_uncertain() => Err(block_error(e, subject)),
            Err(e) => {
                debug!(op = op.name(), subject = %subject, error = %e.message, "no proof for adoption");
                Ok(None)
            }
        }
    }
}

/// The record of an iSCSI volume mounted at `found.staging`, when the host proves it (module docs).
pub(super) async fn adopt<H: Host>(
    cx: Context<'_, H>,
    found: Found<'_>,
    d: Deadline,
) -> Result<Option<VolumeRecord>, Error> {
    let h = &cx.calls(d);
    let staging = found.staging;
    let Some(vid) = fact(
        h,
        HostOp::GetVolumeIDFromTargetPath,
        staging,
        h.host().volume_id_from_target_path(staging, d),
    )
    .await?
    else {
        return Ok(None);
    };
    let vid = vid.trim().to_owned();
    if !present(h, &vid).await? {
        debug!(staging = %staging, volume = %vid, "the mount point names a volume that is not there: not adopted");
        return Ok(None);
    }
    let Some(disk) = fact(
        h,
        HostOp::GetDiskNumberFromVolumeID,
        &vid,
        h.host().disk_number_of_volume(&vid, d),
    )
    .await?
    else {
        return Ok(None);
    };
    // No portal is being removed and re-added (csi-proxy's rediscovery, `discovery.rs`) while the portals are walked.
    let portal_set = cx.object_locks().lock_shared(PORTAL_SET_KEY).await;
    let serving = serving_target(h, disk).await?;
    drop(portal_set);
    let Some((portal, iqn)) = serving else {
        debug!(staging = %staging, disk, "no iSCSI session serves the volume's disk: not adopted");
        return Ok(None);
    };
    let subject = format!("disk {disk}");
    let Some(lun) = fact(
        h,
        HostOp::ListDiskLocations,
        &subject,
        h.host().list_disk_locations(d),
    )
    .await?
    .and_then(|locs| {
        locs.get(&disk)
            .and_then(|l| l.lun.trim().parse::<u32>().ok())
    }) else {
        debug!(staging = %staging, disk, "the disk's LUN cannot be read: not adopted");
        return Ok(None);
    };
    let ids = fact(h, HostOp::ListDiskIDs, &subject, h.host().list_disk_ids(d))
        .await?
        .and_then(|m| m.get(&disk).cloned())
        .unwrap_or_default();
    let pinned = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let rec = IscsiRecord {
        portals: vec![portal.clone()],
        session_portal: Some(portal),
        session_portals: Vec::new(),
        iqn: iqn.clone(),
        target_iqn: Some(iqn.clone()),
        lun,
        disk_number: Some(disk),
        page83: pinned(&ids.page83),
        serial: pinned(&ids.serial),
        volume: Some(vid.clone()),
        partitioning: false,
        partitioned: false,
        mutual_chap: None,
        released: false,
        pending: None,
        removal: None,
        unmounting: None,
        staged_boot: None,
        unledgered: false,
        creating: None,
    };
    info!(staging = %staging, iqn = %iqn, lun, disk, volume = %vid, "iSCSI volume without a record proven from the \
          host: adopting it");
    VolumeRecord::new(
        found.volume_id,
        Phase::Staged,
        staging.as_str(),
        false,
        &rec,
    )
    .map(Some)
}

/// After a login that joined a session no ledger knew (the backend counts it as someone else's): when the staging path
/// already mounts this volume's own LUN of the target — this driver staged it before its record was lost with the state
/// directory —, the session is the driver's own and is claimed so, and its unstage logs it out (issue 37 item 15).
/// Otherwise (nothing mounted there, another LUN) it stays someone else's.
pub(super) async fn own_session_if_proven<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    volume_id: &str,
    staging: &crate::host::HostPath,
    vol: &super::IscsiVolume,
    iqn: &str,
) -> Result<(), Error> {
    let found = Found { volume_id, staging };
    let Some(rec) = adopt(cx, found, h.deadline()).await? else {
        return Ok(());
    };
    if !rec
        .details::<IscsiRecord>()?
        .is_some_and(|r| r.same_lun(vol))
    {
        return Ok(());
    }
    h.host()
        .claim(SharedObject::IscsiSessionJoined(iqn), h.deadline())
        .await
        .map_err(|e| block_error(e, &iqn))?;
    info!(iqn, staging = %staging, "the session this stage joined serves the LUN this driver's staging path already \
          mounts (its record was lost): it is the driver's own and is logged out at unstage");
    Ok(())
}

/// The one target (portal, name as the target spells it) whose session serves `disk`; `None` when none does or
/// several do.
async fn serving_target<H: Host>(
    h: &Calls<'_, H>,
    disk: u32,
) -> Result<Option<(Portal, String)>, Error> {
    let d = h.deadline();
    let Some(portals) = fact(
        h,
        HostOp::ListTargetPortals,
        &"the initiator",
        h.host().list_target_portals(d),
    )
    .await?
    else {
        return Ok(None);
    };
    let mut serving: Vec<(Portal, String)> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for p in &portals {
        let Some(iqns) = fact(
            h,
            HostOp::DiscoverTargetPortal,
            p,
            h.host().discover_target_portal(p, d),
        )
        .await?
        else {
            continue;
        };
        for iqn in iqns.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
            // A target reported through several portals is asked once (its disks are its sessions' disks).
            if seen.iter().any(|s| same_name(s, iqn)) {
                continue;
            }
            // A target without a session: empty (csi-proxy v1.3.0+) or an error (PowerShell era): not serving.
            let disks = fact(
                h,
                HostOp::GetTargetDisks,
                &iqn,
                h.host().get_target_disks(p, iqn, d),
            )
            .await?;
            if let Some(disks) = disks {
                seen.push(iqn.to_owned());
                if disks.contains(&disk) {
                    serving.push((p.clone(), iqn.to_owned()));
                }
            }
        }
    }
    if serving.len() > 1 {
        warn!(disk, targets = ?serving.iter().map(|(_, i)| i).collect::<Vec<_>>(), "several iSCSI targets report the \
              disk: not adopted (refusing to guess)");
        return Ok(None);
    }
    Ok(serving.pop())
}

/// Whether an adopted volume's target may be logged out as far as the host can tell: its sessions serve exactly the
/// volume's disk (or nothing: no session left). Anything else keeps the session (logged): another LUN of the target
/// may be mounted for a volume whose record was lost too.
pub(super) async fn target_serves_only_this_disk<H: Host>(
    h: &Calls<'_, H>,
    rec: &IscsiRecord,
) -> Result<bool, Error> {
    let (Some(iqn), Some(portal), Some(disk)) =
        (rec.login_iqn(), rec.logout_portal(), rec.disk_number)
    else {
        return Ok(false);
    };
    let Some(mut disks) = fact(
        h,
        HostOp::GetTargetDisks,
        &iqn,
        h.host().get_target_disks(portal, iqn, h.deadline()),
    )
    .await?
    else {
        warn!(iqn = %iqn, "session kept: the target's disks cannot be listed, so other volumes of it whose records \
              were lost may still use it");
        return Ok(false);
    };
    disks.sort_unstable();
    disks.dedup();
    if disks.iter().all(|n| *n == disk) {
        return Ok(true);
    }
    warn!(iqn = %iqn, disks = ?disks, disk, "session kept: the target serves other disks, which volumes whose records \
          were lost may still use (unstaging them, or a reboot, ends it)");
    Ok(false)
}
