//! Bounded waits for a LUN's disk and its volume to appear after a login or PartitionDisk.

use std::time::{Duration, Instant};

use super::super::Ctx;
use super::super::options::IscsiTarget;
use super::super::report::Outcome;
use crate::host::Host;

/// The disk that carries the LUN, once the login made it appear: `(disk, millis, rescanned)`.
pub(super) async fn wait_for_disk<H: Host>(
    cx: &Ctx<'_, H>,
    t: &IscsiTarget,
    since: Instant,
) -> Result<(Vec<u32>, bool), String> {
    let h = cx.host();
    let mut delay = Duration::from_millis(100);
    let mut rescanned = false;
    loop {
        let disks = h
            .get_target_disks(&t.portal, &t.iqn, cx.d())
            .await
            .map_err(|e| e.to_string())?;
        if !disks.is_empty() {
            let locs = h
                .list_disk_locations(cx.d())
                .await
                .map_err(|e| e.to_string())?;
            let mine: Vec<u32> = disks
                .into_iter()
                .filter(|n| {
                    locs.get(n)
                        .is_some_and(|l| l.lun.trim().parse::<u32>() == Ok(t.lun))
                })
                .collect();
            if !mine.is_empty() {
                return Ok((mine, rescanned));
            }
        }
        if since.elapsed() >= cx.opts().arrival_timeout {
            return Err(format!(
                "no disk of {} with LUN {} appeared within {:?}",
                t.iqn,
                t.lun,
                cx.opts().arrival_timeout
            ));
        }
        if !rescanned && since.elapsed() >= Duration::from_secs(5) {
            rescanned = true;
            let _ = h.rescan(cx.d()).await;
            continue;
        }
        // Waiting for the host's storage stack (not test synchronisation): bounded by --arrival-timeout-secs.
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// The volume on `disk` (the one PartitionDisk made, or the one that comes back after the disk is onlined), once
/// Windows lists it: `(volume, rescanned)`.
pub(super) async fn wait_for_volume<H: Host>(
    cx: &Ctx<'_, H>,
    disk: u32,
    since: Instant,
) -> Result<(String, bool), String> {
    let h = cx.host();
    let mut delay = Duration::from_millis(100);
    let mut rescanned = false;
    loop {
        if let Ok(vols) = h.list_volumes_on_disk(disk, cx.d()).await
            && let Some(v) = vols.into_iter().find(|v| !v.trim().is_empty())
        {
            return Ok((v, rescanned));
        }
        if since.elapsed() >= cx.opts().arrival_timeout {
            return Err(format!(
                "no volume appeared on disk {disk} within {:?}",
                cx.opts().arrival_timeout
            ));
        }
        if !rescanned && since.elapsed() >= Duration::from_secs(5) {
            rescanned = true;
            let _ = h.rescan(cx.d()).await;
            continue;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

pub(super) fn measured(op: &str, value: serde_json::Value, since: Instant) -> Outcome {
    Outcome {
        op: op.to_owned(),
        value: Some(value),
        error: None,
        millis: u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}
