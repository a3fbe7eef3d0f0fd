//! Step 2 of a first stage: the target's own name as its portals' discovery lists it, refreshed when it is not there.
//!
//! Windows keeps, per portal, the list of targets its last SendTargets reported (`ReportIScsiTargetsW`, "the targets
//! that the iSCSI initiator service has discovered"; `Update-IscsiTargetPortal` "refreshes cached information about an
//! iSCSI target portal"). `DiscoverTargetPortal` only reads that cache in every csi-proxy release and natively, and
//! adding a portal that is already added does not refresh it in csi-proxy v1.3.0 and master (v1.3.0
//! `pkg/os/iscsi/api.go:23-42`; PowerShell era: unverified). Arrays that create one target per volume
//! (democratic-csi's TrueNAS and zfs-generic iSCSI drivers) add a target to a portal the node already knows for every
//! new PV, so a target no portal lists is not yet proof that it does not exist. Before the stage gives up, the portals
//! are asked to look again, once:
//!
//! * a backend with `HostCapabilities::refresh_discovery` (native: `MSFT_iSCSITargetPortal.Update`) refreshes every
//!   portal of the volume;
//! * csi-proxy has no such RPC; what it offers is `RemoveTargetPortal` then `AddTargetPortal`, which runs SendTargets
//!   anew — and forgets, meanwhile, every target discovered through that portal. So a portal is re-added only when no
//!   record of this node names it as the portal of a session (its unstage, disk lookups and stats go through it), under
//!   the portal's exclusive lock: every first stage holds the shared lock of each of its portals from `AddTargetPortal`
//!   to the login, and writes the record naming its session's portal before
//!   the login, so the check sees every session this driver has or is making. Sessions made outside this driver are
//!   not in the records: before the removal, `GetTargetDisks` of every target the portal lists must find no disks (a
//!   session whose disks have not arrived yet is not seen; one call per listed target, a PowerShell process each
//!   before v1.3.0, bounded by the RPC's deadline: past it nothing is removed). Adoption, which walks every portal
//!   `ListTargetPortals` shows, holds the shared side of one node-wide key that only this re-add takes exclusively;
//! * otherwise (a portal in use, or the refresh failed) the stage answers FAILED_PRECONDITION naming the manual
//!   refresh (`Update-IscsiTargetPortal`), and kubelet's retry finds the target once an operator ran it.
//!
//! Why nothing bolder through csi-proxy (issue 41 item 3): Microsoft's pages of the initiator functions behind its
//! calls (iscsidsc.h: `AddIScsiSendTargetPortal` "adds a static target portal to the list of target portals to which
//! the iSCSI initiator service transmits SendTargets requests", `RemoveIScsiSendTargetPortal` "removes a portal from
//! the list", `RefreshIScsiSendTargetPortal` "transmit[s] a SendTargets request to refresh the list of discovered
//! targets") say neither what adding a portal already on the list does nor what removing one does to the sessions
//! made through it, and csi-proxy exposes no refresh. So re-adding an added portal is not relied on to refresh it
//! (the simulated host's `portal_readd_refreshes` stays unverified: real-node check 25), and a portal is never removed
//! while a session may use it.

use tracing::{info, warn};

use super::{IscsiRecord, block_error, same_name};
use crate::error::Error;
use crate::host::{Host, HostOp, HostResult, Portal};
use crate::lifecycle::{Calls, Context};
use crate::locks::KeyedGuard;

/// The lock of the node's set of portals: exclusive while one is removed and re-added, shared by adoption while it
/// walks every portal (it cannot know in advance which portal it needs). No stage takes it otherwise.
pub(super) const PORTAL_SET_KEY: &str = "iscsi-portal-set";

/// The lock key of a portal: shared by stages that use it, exclusive while it is removed and re-added.
pub(super) fn portal_key(p: &Portal) -> String {
    format!("iscsi-portal:{}:{}", p.address.to_ascii_lowercase(), p.port)
}

fn same_portal(a: &Portal, b: &Portal) -> bool {
    a.port == b.port && a.address.eq_ignore_ascii_case(&b.address)
}

/// The shared locks of `portals` (each key once, in key order).
pub(super) async fn lock_portals<H: Host>(
    cx: Context<'_, H>,
    portals: &[Portal],
) -> Vec<KeyedGuard> {
    let mut keys: Vec<String> = portals.iter().map(portal_key).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        out.push(cx.object_locks().lock_shared(&k).await);
    }
    out
}

/// What the portals' caches say about the target.
enum Look {
    /// Its own spelling.
    Found(String),
    /// Not listed; what they list.
    Missing(Vec<String>),
}

/// `DiscoverTargetPortal` through `portals` until one lists `wanted` (names compared as Windows does). An uncertain
/// failure stops the stage; when every portal failed definitely and none listed anything, the last failure.
async fn look<H: Host>(h: &Calls<'_, H>, portals: &[Portal], wanted: &str) -> Result<Look, Error> {
    let mut seen = Vec::new();
    let mut last = None;
    for p in portals {
        match h
            .raw(
                HostOp::DiscoverTargetPortal,
                p,
                h.host().discover_target_portal(p, h.deadline()),
            )
            .await
        {
            Ok(iqns) => {
                if let Some(found) = iqns.iter().find(|i| same_name(i.trim(), wanted)) {
                    if found.trim() != wanted {
                        info!(given = %wanted, reported = %found.trim(), "using the target's own spelling of its name");
                    }
                    return Ok(Look::Found(found.trim().to_owned()));
                }
                seen.extend(iqns);
            }
            Err(e) if e.kind.is_uncertain() => return Err(block_error(e, p)),
            Err(e) => {
                warn!(portal = %p, error = %e.message, "cannot list the portal's targets");
                last = Some(block_error(e, p));
            }
        }
    }
    match last {
        Some(e) if seen.is_empty() => Err(e),
        _ => Ok(Look::Missing(seen)),
    }
}

/// What a refresh did, per portal.
#[derive(Default)]
struct Refreshed {
    /// Asked to rediscover.
    done: Vec<Portal>,
    /// Left alone: whose session uses it (csi-proxy cannot refresh a portal in use).
    in_use: Vec<(Portal, String)>,
    /// The refresh failed (its message).
    failed: Vec<(Portal, String)>,
}

/// The target's own spelling of `wanted` (module docs): the portals' caches, and once more after a refresh when no
/// portal lists it. `guards` are the stage's shared locks of `portals`; they are let go and taken again around a
/// csi-proxy refresh.
pub(super) async fn discover<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    volume_id: &str,
    portals: &[Portal],
    guards: &mut Vec<KeyedGuard>,
    wanted: &str,
) -> Result<String, Error> {
    if let Look::Found(iqn) = look(h, portals, wanted).await? {
        return Ok(iqn);
    }
    info!(target = %wanted, "no portal lists the target: asking for a fresh discovery");
    let refreshed = if h.host().capabilities().refresh_discovery {
        refresh(h, portals).await?
    } else {
        guards.clear();
        let r = readd(cx, h, volume_id, portals).await;
        *guards = lock_portals(cx, portals).await;
        r?
    };
    match look(h, portals, wanted).await? {
        Look::Found(iqn) => Ok(iqn),
        Look::Missing(seen) => Err(not_listed(wanted, portals, &seen, &refreshed)),
    }
}

/// `RefreshTargetPortal` of every portal.
async fn refresh<H: Host>(h: &Calls<'_, H>, portals: &[Portal]) -> Result<Refreshed, Error> {
    let mut r = Refreshed::default();
    for p in portals {
        match h
            .raw(
                HostOp::RefreshTargetPortal,
                p,
                h.host().refresh_target_portal(p, h.deadline()),
            )
            .await
        {
            Ok(()) => r.done.push(p.clone()),
            Err(e) if e.kind.is_uncertain() => return Err(block_error(e, p)),
            Err(e) => {
                warn!(portal = %p, error = %e.message, "the portal's rediscovery failed");
                r.failed.push((p.clone(), e.message));
            }
        }
    }
    Ok(r)
}

/// csi-proxy: `RemoveTargetPortal` + `AddTargetPortal` of every portal no session of this node uses (none on record,
/// none with disks on the host), each under the portal's exclusive lock (module docs).
async fn readd<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    volume_id: &str,
    portals: &[Portal],
) -> Result<Refreshed, Error> {
    let mut r = Refreshed::default();
    for p in portals {
        let _portal = cx.object_locks().lock(&portal_key(p)).await;
        let mut user = None;
        cx.count_records::<IscsiRecord>(|rec, i| {
            let uses = rec.volume_id != volume_id
                && !i.released
                && i.session_portal.as_ref().is_some_and(|s| same_portal(s, p));
            if uses && user.is_none() {
                user = Some(rec.volume_id.clone());
            }
            uses
        })?;
        if let Some(v) = user {
            info!(portal = %p, volume = %v, "not re-adding the portal: a staged volume's session uses it");
            r.in_use
                .push((p.clone(), format!("the session volume {v:?} uses")));
            continue;
        }
        match unrecorded_session(h, p).await {
            Ok(None) => {}
            Ok(Some(iqn)) => {
                info!(portal = %p, target = %iqn, "not re-adding the portal: another session uses it");
                r.in_use.push((
                    p.clone(),
                    format!("the session of target {iqn}, which this driver did not make,"),
                ));
                continue;
            }
            Err(e) if e.kind.is_uncertain() => return Err(block_error(e, p)),
            Err(e) => {
                warn!(portal = %p, error = %e.message, "cannot tell whether a session uses the portal");
                r.failed.push((p.clone(), e.message));
                continue;
            }
        }
        info!(portal = %p, "re-adding the portal so that Windows discovers its targets again");
        let _set = cx.object_locks().lock(PORTAL_SET_KEY).await;
        let d = h.deadline();
        let removed = h
            .raw(
                HostOp::RemoveTargetPortal,
                p,
                h.host().remove_target_portal(p, d),
            )
            .await;
        if let Err(e) = removed {
            if e.kind.is_uncertain() {
                return Err(block_error(e, p));
            }
            warn!(portal = %p, error = %e.message, "cannot remove the portal");
            r.failed.push((p.clone(), e.message));
            continue;
        }
        match h
            .raw(HostOp::AddTargetPortal, p, h.host().add_target_portal(p, d))
            .await
        {
            Ok(()) => r.done.push(p.clone()),
            Err(e) if e.kind.is_uncertain() => return Err(block_error(e, p)),
            Err(e) => {
                // The portal is gone now: the next stage's first step adds it again.
                warn!(portal = %p, error = %e.message, "cannot add the portal again");
                r.failed.push((p.clone(), e.message));
            }
        }
    }
    Ok(r)
}

/// A target listed by `p` that has disks on this node: a session no record names (another driver, an administrator).
/// `GetTargetDisks` answers disks only for a connected target (otherwise `[]` from v1.3.0, an error before: row
/// `target_disks_unconnected`), so its definite failure counts as no session; a session whose disks have not arrived
/// is not seen. Each name is asked as the portal spells it (csi-proxy v1.3.0 dies on a name it cannot match exactly,
/// reference D9). An error: the portal's list could not be read, or a call's outcome is unknown.
async fn unrecorded_session<H: Host>(h: &Calls<'_, H>, p: &Portal) -> HostResult<Option<String>> {
    let iqns = h
        .raw(
            HostOp::DiscoverTargetPortal,
            p,
            h.host().discover_target_portal(p, h.deadline()),
        )
        .await?;
    for iqn in iqns {
        let iqn = iqn.trim().to_owned();
        match h
            .raw(
                HostOp::GetTargetDisks,
                &iqn,
                h.host().get_target_disks(p, &iqn, h.deadline()),
            )
            .await
        {
            Ok(disks) if !disks.is_empty() => return Ok(Some(iqn)),
            Err(e) if e.kind.is_uncertain() => return Err(e),
            Ok(_) | Err(_) => {}
        }
    }
    Ok(None)
}

fn list(portals: &[Portal]) -> String {
    portals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The FAILED_PRECONDITION of a target no portal lists after the refresh: what was tried, and the manual refresh.
fn not_listed(wanted: &str, portals: &[Portal], seen: &[String], r: &Refreshed) -> Error {
    let mut text = format!(
        "no portal of the volume reports target {wanted} (they report: {})",
        if seen.is_empty() {
            "none".to_owned()
        } else {
            seen.join(", ")
        }
    );
    if !r.done.is_empty() {
        text.push_str(&format!(
            ", even after a fresh discovery through {}",
            list(&r.done)
        ));
    }
    for (p, who) in &r.in_use {
        text.push_str(&format!(
            "; Windows' discovery of {p} was not refreshed: csi-proxy can only remove and re-add a portal, which \
             would drop the targets of {who} through it"
        ));
    }
    for (p, m) in &r.failed {
        text.push_str(&format!("; refreshing the discovery of {p} failed: {m}"));
    }
    let manual = portals
        .iter()
        .map(|p| {
            format!(
                "Update-IscsiTargetPortal -TargetPortalAddress {} -TargetPortalPortNumber {}",
                p.address, p.port
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    text.push_str(&format!(
        ". If the target was created on the storage system after its portal was added on this node, refresh Windows' \
         discovery on the node ({manual}) and the stage is retried; otherwise check iqn, the portals, and that the \
         target allows this initiator"
    ));
    Error::FailedPrecondition(text)
}

#[cfg(test)]
mod tests;
