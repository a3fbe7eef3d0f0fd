//! Multipath I/O (issue 41 item 1): a volume that names several portals, on the native backend, logs in through every
//! one of them with `IsMultipathEnabled`, so the LUN survives the loss of a portal, as democratic-csi's Windows node
//! does with `Connect-IscsiTarget -IsMultipathEnabled` (its `src/utils/windows.js`) and as its Linux node does with
//! open-iscsi and multipathd.
//!
//! * **MPIO must claim iSCSI disks first.** Sessions of one target through several portals show each LUN once only
//!   when the Microsoft DSM claims iSCSI disks (the Multipath-IO feature, `Enable-MSDSMAutomaticClaim -BusType iSCSI`,
//!   a restart); otherwise each session shows the LUN as a disk of its own, which is the "two disks for one LUN" this
//!   driver refuses (`disk.rs`). So the claim is read before anything is done on the host (`MSFT_MSDSMSupportedHW`
//!   holds `MSFT2005`/`iSCSIBusType_0x9`), and a volume with several portals on a node without it is refused
//!   (FailedPrecondition naming the commands, or one portal for one session).
//! * **A login per portal.** Each portal's session is made unless one through that portal exists; a portal that does
//!   not answer is not a failure while another path logs in (the LUN is reachable; the volume is staged with fewer
//!   paths, logged), an uncertain outcome or a CHAP refusal is. The record names the target and the portals before the
//!   first login (the target's session count), as for one session.
//! * **Each login announced and run to its end**, as the single login is (`creation.rs`, issue 37): before each login
//!   one durable write names it ([`IscsiRecord::creating`]) with the portals whose logins were issued and have not
//!   failed ([`IscsiRecord::session_portals`]); the login runs on its own task. A login through a later portal that
//!   hangs until kubelet gives up is waited for by kubelet's NodeUnstage (UNAVAILABLE, retried) until this process
//!   saw it answer, a session through every such portal shows (`TargetPaths`), the node rebooted, or the bound passed;
//!   the unstage then logs every session of the target out. Cost: one durable write per further portal of a stage
//!   that logs in (and one more when the last portal's login failed).
//! * **The one MPIO disk.** The LUN's disk is found as for one session (target ∩ LUN, page83/serial hints and the
//!   pinned identity): with MPIO claiming, the sessions' disks are one disk; without it, two candidates, refused. Its
//!   paths are then counted through the target's connections (`TargetPaths`: one per session) and logged.
//! * **While any path lives**, the disk and its volume stay: publish readiness, stats and the re-stage's "already
//!   staged" all ask the volume, not the sessions. At unstage the native backend logs every session of the target
//!   out (`host/native/iscsi.rs`).
//!
//! csi-proxy's `ConnectTarget` has no multipath flag (csi-proxy PR #99): through it a volume keeps one session, through
//! the first portal that answers, and the other portals are only added (logged when the volume names several).

use tracing::{info, warn};

use super::{IscsiRecord, IscsiVolume, Sessions, block_error, put_iscsi};
use crate::error::Error;
use crate::host::HostPath;
use crate::host::{Host, HostErrorKind, HostOp, MpioClaim, Portal};
use crate::lifecycle::{Calls, Context};
use crate::state::Phase;

/// Refuse a multipath volume on a node whose MPIO does not claim iSCSI disks (module docs), before any host change.
pub(super) async fn require_claim<H: Host>(
    h: &Calls<'_, H>,
    vol: &IscsiVolume,
) -> Result<(), Error> {
    let claim = h
        .raw(
            HostOp::MultipathClaim,
            &"the node",
            h.host().mpio_claim(h.deadline()),
        )
        .await
        .map_err(|e| block_error(e, &"Multipath I/O"))?;
    let why = match claim {
        MpioClaim::ClaimsIscsi => return Ok(()),
        MpioClaim::NotInstalled => "the Multipath-IO feature is not installed",
        MpioClaim::NotClaimingIscsi => {
            "Multipath I/O is installed but its Microsoft DSM does not claim iSCSI disks (no MSFT2005 / \
             iSCSIBusType_0x9 in Get-MSDSMSupportedHW)"
        }
    };
    let portals: Vec<String> = vol.portals.iter().map(ToString::to_string).collect();
    Err(Error::FailedPrecondition(format!(
        "the volume names {} portals ({}), and logging in to {} through each needs Multipath I/O claiming iSCSI \
         disks, but {why}: without it every session shows the LUN as a disk of its own. On the node, as \
         administrator: Install-WindowsFeature Multipath-IO; Enable-MSDSMAutomaticClaim -BusType iSCSI; restart the \
         node. Or name one portal (targetPortal alone) for a volume with a single session",
        vol.portals.len(),
        portals.join(", "),
        vol.iqn
    )))
}

/// Step 4 of a multipath stage (the caller holds the target's lock, added the portals `added` and recorded the target's
/// name): a login through every portal with `IsMultipathEnabled`, each announced in the record and run to its end as
/// the single login is (`creation.rs`); returns the portals that logged in, first the one the volume's later calls go
/// through.
#[allow(clippy::too_many_arguments)]
pub(super) async fn logins<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    sessions: &Sessions,
    volume_id: &str,
    staging: &HostPath,
    vol: &IscsiVolume,
    rec: &mut IscsiRecord,
    added: &[Portal],
) -> Result<Vec<Portal>, Error> {
    // The target's spelling as the portal reports it, on record before this step.
    let iqn = rec.target_iqn.clone().unwrap_or_else(|| vol.iqn.clone());
    let iqn = iqn.as_str();
    let mut up: Vec<Portal> = Vec::new();
    let mut last = None;
    for (i, p) in added.iter().enumerate() {
        // Durable before this login, in one write (the first login's is the write a single login makes too): the
        // intent that counts this volume as a user of the target's sessions, the portals whose logins were issued
        // and have not failed (what an unstage's look asks a session through, `creation.rs`), and the login's
        // announcement. A login that outlives this stage (its caller gave up) runs to its end, and an unstage waits
        // for it: it would otherwise land after the unstage's logout and leave a session (an MPIO path) nobody counts.
        rec.session_portal = Some(up.first().unwrap_or(p).clone());
        rec.session_portals = up.iter().chain([p]).cloned().collect();
        // The previous portal's login, announced by this loop, answered before this one: what this process kept of
        // its announcement goes once the record no longer holds it.
        let answered = rec.creating.clone().filter(|_| i > 0);
        rec.creating = Some(super::creation::announce(h, sessions, volume_id, rec));
        put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
        if let Some(c) = answered {
            sessions.1.forget(volume_id, &c);
        }
        match super::creation::login(h, sessions, volume_id, p, iqn, vol).await {
            Ok(()) => up.push(p.clone()),
            Err(e) if e.kind == HostErrorKind::AlreadyLoggedIn => up.push(p.clone()),
            Err(e) if e.kind.is_uncertain() || e.kind == HostErrorKind::LogonFailure => {
                return Err(block_error(e, &vol.iqn));
            }
            Err(e) => {
                warn!(portal = %p, error = %e.message, "no path through this portal: the other paths carry the LUN");
                last = Some(block_error(e, &vol.iqn));
            }
        }
    }
    if up.is_empty() {
        return Err(last.unwrap_or_else(|| Error::Internal("no login attempted".to_owned())));
    }
    let written = std::mem::replace(&mut rec.session_portals, up.clone());
    rec.session_portal = up.first().cloned();
    if up.len() < added.len() {
        warn!(
            iqn,
            paths = up.len(),
            portals = added.len(),
            "logged in through fewer portals than the volume names"
        );
    }
    if written != up {
        // The last login failed (its portal does not answer): on record at once, so that a restarted driver's
        // unstage does not wait for a session through it that never comes. One write, on that path only.
        put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
    }
    Ok(up)
}

/// How many of the target's paths show the LUN's disk `disk` (logged; an MPIO disk shows through every session).
pub(super) async fn count_paths<H: Host>(
    h: &Calls<'_, H>,
    iqn: &str,
    disk: u32,
) -> Result<(), Error> {
    let paths = h
        .raw(
            HostOp::TargetPaths,
            &iqn,
            h.host().target_paths(iqn, h.deadline()),
        )
        .await
        .map_err(|e| block_error(e, &iqn))?;
    let through: Vec<String> = paths
        .iter()
        .filter(|p| p.disks.contains(&disk))
        .map(|p| {
            p.portal
                .as_ref()
                .map_or_else(|| "?".to_owned(), ToString::to_string)
        })
        .collect();
    info!(iqn, disk, paths = through.len(), sessions = paths.len(), through = ?through, "the LUN's MPIO disk and its paths");
    Ok(())
}
