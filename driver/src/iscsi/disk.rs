//! Which disk is a LUN's? The identity algorithm of the module docs: target ∩ LUN, identity hints, pinned
//! identity, and the bounded wait for a disk that has not appeared yet.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use tracing::{debug, warn};

use super::listings::Listings;
use super::{IscsiRecord, IscsiVolume, block_error, run, same_id};
use crate::error::Error;
use crate::host::{DiskIds, Host, HostErrorKind, HostOp, Portal};
use crate::lifecycle::Calls;

/// The bounded wait for a LUN's disk to appear.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(4);
const MAX_WAIT_ROUNDS: u32 = 4;
/// Time kept in reserve so the RPC can still answer before its deadline.
const ANSWER_RESERVE: Duration = Duration::from_secs(1);

/// The waits between looks for a LUN's disk: 500 ms doubling up to 4 s, at most [`MAX_WAIT_ROUNDS`], and only as
/// many as fit in `remaining` while keeping [`ANSWER_RESERVE`] to answer. Pure, so its bounds are tested without
/// sleeping.
pub(crate) fn backoff_schedule(remaining: Duration) -> Vec<Duration> {
    let mut out = Vec::new();
    let mut used = Duration::ZERO;
    let mut delay = FIRST_BACKOFF;
    while out.len() < MAX_WAIT_ROUNDS as usize && used + delay + ANSWER_RESERVE <= remaining {
        out.push(delay);
        used += delay;
        delay = (delay * 2).min(MAX_BACKOFF);
    }
    out
}

/// The LUN's disk, as [`find_disk`] found it.
pub(super) struct LunDisk {
    /// Its number.
    pub(super) number: u32,
    /// Its identifiers, when they were read.
    pub(super) ids: Option<DiskIds>,
    /// It was not among the target's disks at the stage's first look: it arrived during this stage (a new
    /// arrival: what was observed of the LUN before belongs to an earlier one).
    pub(super) arrived: bool,
}

/// Find THE disk of (target, LUN) after a login through `portal` to `iqn` (the target's own spelling); see the
/// module docs. `None` only for a `joined` session that lists no disk of the target at all (it is gone).
#[allow(clippy::too_many_arguments)]
pub(super) async fn find_disk<H: Host>(
    h: &Calls<'_, H>,
    listings: &Listings,
    portal: &Portal,
    iqn: &str,
    vol: &IscsiVolume,
    rec: &IscsiRecord,
    joined: bool,
) -> Result<Option<LunDisk>, Error> {
    let d = h.deadline();
    let target = format!("{} (LUN {})", vol.iqn, vol.lun);
    let mut waits = backoff_schedule(d.remaining()).into_iter();
    // When this look asked for the target's disks: a shared disk listing must have started after it (see `listings`).
    let mut looked;
    let mut arrived = false;
    let candidates = loop {
        if arrived {
            // A look after a pause: the storage cache lags arrivals, and a `Rescan` shows what has arrived (it
            // hurries nothing, so none right after the first look, when a new login's disk cannot be there yet).
            run(h, HostOp::Rescan, &target, h.host().rescan(d)).await?;
        }
        looked = Instant::now();
        let disks = match h
            .raw(
                HostOp::GetTargetDisks,
                &iqn,
                h.host().get_target_disks(portal, iqn, d),
            )
            .await
        {
            Ok(disks) => disks,
            // PowerShell-era csi-proxy: no connection (yet) to list disks of. Like an empty list: wait for it.
            Err(e) if e.kind == HostErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(block_error(e, &iqn)),
        };
        if !disks.is_empty() {
            let locs = run(
                h,
                HostOp::ListDiskLocations,
                &target,
                listings
                    .locations
                    .get(looked, || h.host().list_disk_locations(d)),
            )
            .await?;
            let mut c: Vec<u32> = disks
                .iter()
                .copied()
                .filter(|n| {
                    locs.get(n)
                        .is_some_and(|l| l.lun.trim().parse::<u32>() == Ok(vol.lun))
                })
                .collect();
            c.sort_unstable();
            c.dedup();
            if !c.is_empty() {
                break c;
            }
        }
        arrived = true;
        let delay = match waits.next() {
            Some(delay) if d.remaining() > delay + ANSWER_RESERVE => delay,
            // A joined session that shows no disk of the target at all, even after the wait (a session just made
            // shows its disks only once they have arrived), is gone: the caller logs in.
            _ if joined && disks.is_empty() => return Ok(None),
            _ => {
                return Err(Error::Unavailable(format!(
                    "logged in to {} through {portal}, but no disk with LUN {} appeared (the target's disks: \
                 {disks:?}); check that the LUN exists and is mapped to this initiator. kubelet will retry",
                    vol.iqn, vol.lun
                )));
            }
        };
        debug!(?delay, "the LUN's disk is not visible yet: waiting");
        tokio::time::sleep(delay).await;
    };
    let need_ids = vol.page83.is_some()
        || vol.serial.is_some()
        || rec.page83.is_some()
        || rec.serial.is_some();
    // Identifiers listed no earlier than the look that found the candidates.
    let ids = match h
        .raw(
            HostOp::ListDiskIDs,
            &target,
            listings.ids.get(looked, || h.host().list_disk_ids(d)),
        )
        .await
    {
        Ok(ids) => Some(ids),
        // An uncertain answer stays uncertain (kubelet retries; the session is kept for that retry).
        Err(e) if e.kind.is_uncertain() => return Err(block_error(e, &target)),
        Err(e) if need_ids => {
            return Err(Error::FailedPrecondition(format!(
                "cannot read disk identifiers to verify {target} ({}); refusing to touch a disk whose identity \
                 cannot be checked",
                e.message
            )));
        }
        Err(e) => {
            warn!(error = %e.message, "ListDiskIDs failed; identity cannot be pinned");
            None
        }
    };
    let (number, ids) = identify(&target, &candidates, ids.as_deref(), vol, rec)?;
    Ok(Some(LunDisk {
        number,
        ids,
        arrived,
    }))
}

/// THE disk of `candidates` (the target's disks at the volume's LUN) that matches the volume's identity hints and
/// the identity pinned in its record, with its identifiers when `ids` were read.
fn identify(
    target: &str,
    candidates: &[u32],
    ids: Option<&BTreeMap<u32, DiskIds>>,
    vol: &IscsiVolume,
    rec: &IscsiRecord,
) -> Result<(u32, Option<DiskIds>), Error> {
    let id_of = |n: u32| ids.and_then(|m| m.get(&n)).cloned().unwrap_or_default();
    let matches = |n: &u32| {
        let i = id_of(*n);
        vol.page83.as_deref().is_none_or(|w| same_id(w, &i.page83))
            && vol.serial.as_deref().is_none_or(|w| same_id(w, &i.serial))
    };
    let chosen: Vec<u32> = candidates.iter().copied().filter(matches).collect();
    if chosen.is_empty() {
        let seen: Vec<String> = candidates
            .iter()
            .map(|n| {
                let i = id_of(*n);
                format!(
                    "disk {n}: page83 {:?}, serial {:?}",
                    i.page83.trim(),
                    i.serial.trim()
                )
            })
            .collect();
        return Err(Error::FailedPrecondition(format!(
            "{target} does not match the volume's identity hints (page83 {:?}, serial {:?}); found {}. Refusing \
             to touch it",
            vol.page83.as_deref().unwrap_or("-"),
            vol.serial.as_deref().unwrap_or("-"),
            seen.join("; ")
        )));
    }
    if chosen.len() > 1 {
        return Err(Error::FailedPrecondition(format!(
            "{target} appears as {} different disks ({chosen:?}): the LUN is reachable over several paths \
             without MPIO, or the target reports the LUN twice. Refusing to guess; configure MPIO or a single \
             portal",
            chosen.len()
        )));
    }
    let n = chosen[0];
    let found = id_of(n);
    for (pinned, now, what) in [
        (&rec.page83, found.page83.trim(), "page83"),
        (&rec.serial, found.serial.trim(), "serial"),
    ] {
        if ids.is_some()
            && let Some(p) = pinned
            && !same_id(p, now)
        {
            return Err(Error::FailedPrecondition(format!(
                "{target} is now disk {n} with {what} {now:?}, but this volume was staged from a disk with \
                 {what} {p:?}; the LUN maps to a different disk: refusing to touch it"
            )));
        }
    }
    debug!(disk = n, page83 = %found.page83.trim(), "disk identified");
    Ok((n, ids.map(|_| found)))
}
