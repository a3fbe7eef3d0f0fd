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

use super::{IscsiRecord, IscsiVolume, block_error, put_iscsi};
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
/// name): a login through every portal with `IsMultipathEnabled`, each portal's on record before it; returns the
/// portals that logged in, first the one the volume's later calls go through.
pub(super) async fn logins<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    volume_id: &str,
    staging: &HostPath,
    vol: &IscsiVolume,
    rec: &mut IscsiRecord,
    added: &[Portal],
) -> Result<Vec<Portal>, Error> {
    let d = h.deadline();
    // The target's spelling as the portal reports it, on record before this step.
    let iqn = rec.target_iqn.clone().unwrap_or_else(|| vol.iqn.clone());
    let iqn = iqn.as_str();
    // The intent that counts this volume as a user of the target's sessions, with every portal it logs in through, is
    // durable before the first login (one write).
    rec.session_portal = added.first().cloned();
    rec.session_portals = added.to_vec();
    put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
    let mut up = Vec::new();
    let mut last = None;
    for p in added {
        match h
            .raw(
                HostOp::ConnectTarget,
                &iqn,
                h.host()
                    .connect_target_multipath(p, iqn, &vol.auth, vol.persistent, d),
            )
            .await
        {
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
    if up.len() < added.len() {
        warn!(
            iqn,
            paths = up.len(),
            portals = added.len(),
            "logged in through fewer portals than the volume names"
        );
    }
    rec.session_portal = up.first().cloned();
    rec.session_portals = up.clone();
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
