//! NodeStageVolume of an iSCSI LUN (the sequence in the module docs): portals, the target's own spelling, login,
//! disk identity, volume creation only on a disk proven empty, format only of a volume this driver created, mount.

use tracing::{debug, info, warn};

use super::discovery::{discover, lock_portals};
use super::disk::find_disk;
use super::judge::{Judge, Polls, volume_of};
use super::listings::Listings;
use super::multipath;
use super::pending::{Destructive, Pending};
use super::removal;
use super::volume::present;
use super::{
    IscsiRecord, IscsiVolume, Sessions, block_error, chap, iscsi_record, put_iscsi, run, same_id,
    target_users,
};
use crate::error::Error;
use crate::host::{Host, HostError, HostErrorKind, HostOp, HostPath, IscsiAuth, SharedObject};
use crate::lifecycle::{Calls, Context};
use crate::locks::Deadline;
use crate::state::Phase;

/// NodeStageVolume of an iSCSI volume (the lifecycle validated the request and holds the volume guard).
#[allow(clippy::too_many_arguments)]
pub(super) async fn stage<H: Host>(
    cx: Context<'_, H>,
    sessions: &Sessions,
    listings: &Listings,
    judge: &Judge,
    volume_id: &str,
    staging: &HostPath,
    vol: &IscsiVolume,
    d: Deadline,
) -> Result<(), Error> {
    let h = &cx.calls(d);
    let existing = match cx.store().volume(volume_id)? {
        // An unstage's removal of this staging path that may still run would take away what this stage mounts
        // there (`removal.rs`, "The staging path"): waited for first.
        Some(rec) if staging.is(&rec.staging_path) => {
            Some(removal::wait_for_staging_removal(cx, h, judge, rec, staging).await?)
        }
        other => other,
    };
    let prev = match &existing {
        None => None,
        Some(rec) => match rec.details::<IscsiRecord>()? {
            Some(r) if r.same_lun(vol) && staging.is(&rec.staging_path) => Some((rec.phase, r)),
            // A released record (a first stage that never succeeded, rolled back or unstaged) holds nothing on the
            // host for this volume, only the marks of another LUN's partition: the volume now names another LUN (a
            // re-created PersistentVolume), which is staged afresh. That LUN's volume, if it was never formatted, is
            // refused later as someone else's rather than formatted.
            Some(r) if r.released && rec.phase == Phase::Staging => {
                info!(volume_id, iqn = %r.iqn, lun = r.lun, "the volume's released record names another LUN: \
                      replaced");
                None
            }
            _ => {
                return Err(Error::AlreadyExists(format!(
                    "volume {volume_id:?} is already staged at {} from another source or path; unstage it first",
                    rec.staging_path
                )));
            }
        },
    };
    // What the mount point at the staging path names (only asked when this driver may have mounted something there).
    // PowerShell-era csi-proxy answers from the reparse data, so after a reboot it names a volume that is gone.
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
                    // "Already staged" needs proof that the volume is there, not only its name in a mount point.
                    if present(h, &v).await? {
                        debug!(staging = %staging, volume = %v, "already staged: nothing to do");
                        return Ok(());
                    }
                    info!(staging = %staging, volume = %v, "the mount point names a volume that is gone \
                          (session lost): logging in and mounting again");
                }
                mounted = Some(v);
            }
            Err(e) if e.kind.is_uncertain() => return Err(block_error(e, staging)),
            Err(_) => {
                info!(staging = %staging, "the recorded volume is not mounted at the staging path: (re)staging")
            }
        }
    }
    // A first stage: the volume never reached Staged (no record yet, or an earlier attempt's).
    let first = prev
        .as_ref()
        .is_none_or(|(phase, _)| *phase == Phase::Staging);
    let retry = prev.is_some();
    let mut rec = prev
        .map(|(_, r)| r)
        .unwrap_or_else(|| IscsiRecord::new(vol));
    if !first {
        // A stage of this volume succeeded before (records of older versions kept the marks after it).
        rec.retire_marks();
    }
    rec.portals = vol.portals.clone();
    rec.released = false;
    // On a backend without a ledger of its sessions (csi-proxy) the record is the driver's only claim on the session:
    // said in the record before the login, for a node later moved to the native backend (`IscsiRecord::unledgered`).
    rec.unledgered |= h
        .host()
        .made_by_wincsi(SharedObject::IscsiSession(&vol.iqn))
        .is_none();
    let key = rec.target_key();
    let result = async {
        // A logout of the target that may still be running would end the session this stage logs in to or joins
        // (`removal.rs`): waited for first, outside the target's lock.
        removal::wait_for_logouts(cx, h, judge, &key, &mut rec, false).await?;
        // A first stage may join a session this process made to the target (another LUN's): see `Sessions`.
        let mut may_join = first;
        loop {
            // The session is the target's shared object: its lock is held from the portals to the login, and the
            // record that counts this volume as a user of the session is in the store before the lock is released
            // (durable before the first call that may create the session, see `session_steps`), so an unstage of
            // another LUN never logs out a session this stage needs.
            let (portal, claim) = {
                let _target = cx.object_locks().lock(&key).await;
                removal::wait_for_logouts(cx, h, judge, &key, &mut rec, true).await?;
                match sessions.joinable(&key, vol).filter(|_| may_join) {
                    Some(s) => {
                        debug!(iqn = %s.iqn, portal = %s.portal, "joining the target's session");
                        rec.target_iqn = Some(s.iqn.clone());
                        rec.session_portal = Some(s.portal.clone());
                        let claim = cx.store().put_volume(&iscsi_record(
                            cx,
                            volume_id,
                            staging,
                            Phase::Staging,
                            &rec,
                        )?);
                        (s.portal, Some(claim))
                    }
                    None => {
                        let portal =
                            session_steps(cx, h, sessions, volume_id, staging, vol, &mut rec).await?;
                        let iqn = rec.target_iqn.as_deref().unwrap_or(&vol.iqn);
                        sessions.logged_in(&key, vol, iqn, &portal);
                        (portal, None)
                    }
                }
            };
            // A joining stage's record becomes durable outside the target's lock (other LUNs need not wait for it),
            // and only before the first of its own host calls that may create something (`disk_steps`, step 6): its
            // reads of the disks and `SetDiskState(online)` create nothing a retry, rollback or unstage must find,
            // and other stages already see the record in the store. The write goes on meanwhile.
            let joined = claim.is_some();
            // The disk is the LUN's own: other LUNs of the target go on at once. Its lock keeps two volumes that name
            // one LUN from both judging its disk empty, partitioning or formatting it.
            let _lun = cx.object_locks().lock(&rec.lun_key()).await;
            let steps = disk_steps(
                cx,
                h,
                listings,
                judge,
                volume_id,
                staging,
                vol,
                &mut rec,
                &portal,
                claim,
                mounted.clone(),
                retry,
            )
            .await
            .inspect_err(|_| {
                // Whatever failed, kubelet's retry logs in itself rather than trusting the session again (a host
                // that answers for a lost session with an error of its own would otherwise fail every retry).
                if joined {
                    sessions.forget(&key);
                }
            })?;
            match steps {
                Steps::Done => return Ok(()),
                Steps::SessionGone => {
                    info!(iqn = %vol.iqn, "the joined session shows no disk of the target: logging in");
                    sessions.forget(&key);
                    may_join = false;
                }
            }
        }
    }
    .await;
    match result {
        Ok(()) => {
            // From here on the volume holds what pods write: nothing may format it again.
            rec.retire_marks();
            rec.staged_boot = h.host().uptime().map(crate::host::BootStamp::at);
            let login = rec.creating.take();
            put_iscsi(cx, volume_id, staging, Phase::Staged, &rec).await?;
            login.inspect(|c| sessions.1.forget(volume_id, c));
            info!(staging = %staging, iqn = %vol.iqn, lun = vol.lun, volume = ?rec.volume, "iSCSI volume staged");
            Ok(())
        }
        Err(err @ (Error::DeadlineExceeded(_) | Error::Unavailable(_))) => {
            warn!(error = %err, "stage outcome uncertain: keeping the record for kubelet's retry or unstage");
            Err(err)
        }
        // A kept record loses the announcement of a login that answered (`creation.rs`).
        Err(err) if first => {
            let r = roll_back(cx, sessions, judge, h, volume_id, staging, &mut rec, err).await;
            super::creation::retire_answered(cx, sessions, volume_id)
                .await
                .and(r)
        }
        Err(err) => super::creation::retire_answered(cx, sessions, volume_id)
            .await
            .and(Err(err)),
    }
}

/// After a definite failure of a first stage kubelet will not call NodeUnstage: log out if nobody else uses the
/// target, and keep no record that holds the session. Only the fact that this driver partitioned the disk survives
/// (in a released record, [`IscsiRecord::release`]), so a retry can finish formatting the volume it created. What
/// the judge observed of the LUN's disk belongs to this attempt's arrival of it and is forgotten.
#[allow(clippy::too_many_arguments)]
async fn roll_back<H: Host>(
    cx: Context<'_, H>,
    sessions: &Sessions,
    judge: &Judge,
    h: &Calls<'_, H>,
    volume_id: &str,
    staging: &HostPath,
    rec: &mut IscsiRecord,
    err: Error,
) -> Result<(), Error> {
    let _target = cx.object_locks().lock(&rec.target_key()).await;
    judge.forget_lun(&rec.lun_key());
    if target_users(cx, volume_id, &rec.iqn)? == 0 {
        sessions.forget(&rec.target_key());
        judge.forget_target(&rec.iqn);
        // Announced in the record first (`removal.rs`): kubelet's retry of this stage must not log in while it runs.
        let write = |r: &IscsiRecord| iscsi_record(cx, volume_id, staging, Phase::Staging, r);
        if let Err(e) = removal::logout_announced(cx, h, &judge.clock, rec, &write).await {
            warn!(error = %e, "rollback: logout failed; the session stays until another volume of the target is unstaged");
        }
    }
    // A logout whose outcome is uncertain keeps a (released) record for the stages of the target to wait for.
    if rec.volume_is_ours() || rec.removal.is_some() {
        rec.release();
        put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
    } else {
        cx.store().remove_volume(volume_id).await?;
    }
    Err(err)
}

/// Steps 1–4 (the caller holds the target's lock): portals, the target's own spelling, the mutual CHAP secret and the
/// login; returns the portal of the session.
async fn session_steps<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    sessions: &Sessions,
    volume_id: &str,
    staging: &HostPath,
    vol: &IscsiVolume,
    rec: &mut IscsiRecord,
) -> Result<crate::host::Portal, Error> {
    let d = h.deadline();
    // Several portals: natively a multipath volume, refused before any host change when MPIO does not claim iSCSI
    // disks; through csi-proxy one session (`multipath.rs`).
    if vol.multipath {
        multipath::require_claim(h, vol).await?;
    } else if vol.portals.len() > 1 && !h.host().capabilities().multipath {
        info!(iqn = %vol.iqn, "csi-proxy cannot log in with Multipath I/O (its ConnectTarget has no multipath flag): \
              one session, through the first portal that answers; the other portals are added for later stages");
    }
    // The portals are shared with other stages until the login; a refresh of one takes it alone (`discovery.rs`).
    let mut portal_locks = lock_portals(cx, &vol.portals).await;
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
            Err(e) if e.kind.is_uncertain() => return Err(block_error(e, p)),
            Err(e) => {
                warn!(portal = %p, error = %e.message, "cannot add portal");
                last = Some(block_error(e, p));
            }
        }
    }
    if added.is_empty() {
        return Err(last.unwrap_or_else(|| Error::InvalidArgument("no portal".to_owned())));
    }
    // 2. The target's name as the portal reports it (refreshed when no portal lists it), recorded (below) before any
    //    call names the target.
    let iqn = match rec.target_iqn.clone() {
        Some(iqn) => iqn,
        None => {
            let iqn = discover(cx, h, volume_id, &added, &mut portal_locks, &vol.iqn).await?;
            rec.target_iqn = Some(iqn.clone());
            iqn
        }
    };
    // The record a retry, rollback or unstage needs to find the session (the intent that counts this volume as a user
    // of the target's session, the target's spelling, the portal of the login) is durable before the first call that
    // may create the session: one write, here or under the CHAP lock below.
    rec.session_portal = added.first().cloned();
    // 3. The node-global mutual secret: refused when other volumes rely on another, set before the login. The claim
    //    is written under the lock, so no other volume sets another secret between the claim and the login.
    if let Some(secret) = &vol.mutual_secret {
        let _chap = cx.object_locks().lock(chap::LOCK_KEY).await;
        rec.mutual_chap = Some(chap::claim(cx, volume_id, secret)?);
        put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
        run(
            h,
            HostOp::SetMutualChapSecret,
            &"the initiator",
            h.host().set_mutual_chap_secret(secret, d),
        )
        .await?;
    }
    // 4. Login. A target that already has a session (another LUN of it, or an earlier attempt) is logged in: csi-proxy
    //    v1.3.0+ answer OK, the PowerShell era "already logged in". A multipath volume logs in through every portal.
    if vol.multipath {
        let up = multipath::logins(cx, h, sessions, volume_id, staging, vol, rec, &added).await?;
        return Ok(up[0].clone());
    }
    let joined_before = h.host().made_by_wincsi(SharedObject::IscsiSession(&iqn)) == Some(false);
    let mut session = None;
    for p in &added {
        // The portal this login goes through is on record before it (the store writes nothing when the record already
        // says so: normally only the first portal's, and only without mutual CHAP).
        // The login is announced in the same write and run to its end (`creation.rs`): an unstage waits for it.
        rec.session_portal = Some(p.clone());
        rec.creating = Some(super::creation::announce(h, sessions, volume_id, rec));
        put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
        let login = super::creation::login(h, sessions, volume_id, p, &iqn, vol).await;
        match login {
            Ok(()) => {
                session = Some(p.clone());
                break;
            }
            Err(e) if e.kind == HostErrorKind::AlreadyLoggedIn => {
                debug!(iqn = %iqn, "the target already has a session");
                session = Some(p.clone());
                break;
            }
            Err(e) if e.kind.is_uncertain() || e.kind == HostErrorKind::LogonFailure => {
                return Err(block_error(e, &vol.iqn));
            }
            Err(e) => {
                warn!(portal = %p, error = %e.message, "login through this portal failed");
                last = Some(block_error(e, &vol.iqn));
            }
        }
    }
    let session = session
        .ok_or_else(|| last.unwrap_or_else(|| Error::Internal("no login attempted".to_owned())))?;
    if !joined_before && h.host().made_by_wincsi(SharedObject::IscsiSession(&iqn)) == Some(false) {
        // This login joined a session no ledger knew: the driver's own, if its staging path already mounts the LUN
        // (a record lost with the state directory, issue 37 item 15). Adoption walks the portals: theirs are let go.
        drop(portal_locks);
        super::adopt::own_session_if_proven(cx, h, volume_id, staging, vol, &iqn).await?;
    }
    Ok(session)
}

/// How the disk steps ended.
enum Steps {
    /// Staged.
    Done,
    /// The joined session shows no disk of the target: it is gone (nothing was done on the host).
    SessionGone,
}

/// Steps 5–8 (the caller holds the LUN's lock, not the target's): the disk, its volume, the file system, the mount.
#[allow(clippy::too_many_arguments)]
async fn disk_steps<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    listings: &Listings,
    judge: &Judge,
    volume_id: &str,
    staging: &HostPath,
    vol: &IscsiVolume,
    rec: &mut IscsiRecord,
    portal: &crate::host::Portal,
    claim: Option<crate::state::Commit>,
    mounted: Option<String>,
    retry: bool,
) -> Result<Steps, Error> {
    // A joined session's stage carries its claim (the record counting it as a user of the session) still on its way
    // to disk.
    let joined = claim.is_some();
    let d = h.deadline();
    let target = format!("{} (LUN {})", vol.iqn, vol.lun);
    let iqn = rec.target_iqn.clone().unwrap_or_else(|| vol.iqn.clone());
    // 5. Which disk (a joined session that shows no disk of the target at all is gone: the caller logs in).
    let Some(found) = find_disk(h, listings, portal, &iqn, vol, rec, joined).await? else {
        return Ok(Steps::SessionGone);
    };
    let (number, ids) = (found.number, found.ids);
    if found.arrived {
        // The disk arrived during this stage: what was observed of it before belongs to an earlier arrival (a
        // logout, a lost session, a reboot) and proves nothing about this one.
        judge.forget_lun(&rec.lun_key());
    }
    rec.disk_number = Some(number);
    if vol.multipath {
        multipath::count_paths(h, &iqn, number).await?;
    }
    if let Some(ids) = &ids {
        rec.page83 = Some(ids.page83.trim().to_owned()).filter(|s| !s.is_empty());
        rec.serial = Some(ids.serial.trim().to_owned()).filter(|s| !s.is_empty());
    }
    // The identity is recorded with the next write: before `PartitionDisk` (the only step that creates something on
    // the disk a retry must judge), else with the `Staged` record. Bringing the disk online creates nothing.
    let disk = format!("disk {number} ({target})");
    // One LUN reached through two targets (no MPIO: two disks with one page83) is one LUN: its identity's lock, taken
    // under the LUN's own, keeps two volumes naming it from judging, partitioning or formatting it at once.
    let _identity = match super::pending::identity_key(rec) {
        Some(key) => Some(cx.object_locks().lock(&key).await),
        None => None,
    };
    // LUNs arrive offline under Windows Server's default SAN policy (OfflineShared).
    if vol.read_only {
        // A reader-only volume: a backend that can (native) also sets the disk read-only — unless another volume
        // staged here writes this LUN, whose disk must stay writable (`access.rs`).
        if shares_lun_with_writer(cx, volume_id, rec)? {
            info!(disk = %disk, "another volume staged on this node writes this LUN: its disk is not made read-only");
            run(
                h,
                HostOp::SetDiskState,
                &disk,
                h.host().set_disk_online(number, true, d),
            )
            .await?;
        } else {
            run(
                h,
                HostOp::SetDiskState,
                &disk,
                h.host().set_disk_online_read_only(number, d),
            )
            .await?;
        }
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
    // The claim is durable before anything below may create something on the host (normally long since: the calls
    // above took it).
    if let Some(claim) = claim {
        claim.await?;
    }
    // 6. The volume: created only on a disk proven empty; a foreign layout is never touched (`judge.rs`).
    let vid = volume_of(
        cx,
        h,
        judge,
        volume_id,
        staging,
        rec,
        number,
        &disk,
        vol.read_only,
    )
    .await?;
    // 7. File system: only a volume this driver created may be formatted, and never while an earlier format may
    //    still be running (`pending.rs`); a reader-only stage formats nothing.
    file_system(
        cx,
        h,
        judge,
        volume_id,
        staging,
        rec,
        &vid,
        &disk,
        vol.read_only,
    )
    .await?;
    // Recorded with the `Staged` record: the mount point is at this volume's own staging path, which a retry or an
    // unstage reads (`GetVolumeIDFromTargetPath`) before it judges the mount.
    rec.volume = Some(vid.clone());
    // 8. Mount at the staging path.
    match mounted {
        Some(v) if same_id(&v, &vid) => {
            // The mount point names this volume, which the login brought back: it resolves again.
            debug!(staging = %staging, "the volume is already mounted at the staging path");
            return Ok(Steps::Done);
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
        Err(e) if e.kind == HostErrorKind::AlreadyExists && retry => {
            // A mount point left dangling by a reboot (its volume vanished with the session): remove the reparse
            // point (non-forced Rmdir never deletes data) and start over.
            info!(staging = %staging, "removing a dangling mount point at the staging path");
            run(h, HostOp::Rmdir, staging, h.host().rmdir(staging, false, d)).await?;
            run(h, HostOp::Mkdir, staging, h.host().mkdir(staging, d)).await?;
        }
        Err(e) => return Err(block_error(e, staging)),
    }
    match h
        .raw(
            HostOp::MountVolume,
            staging,
            h.host().mount_volume(&vid, staging, d),
        )
        .await
    {
        Ok(()) => Ok(Steps::Done),
        Err(e) if e.kind == HostErrorKind::AccessPathInUse => {
            // PowerShell-era csi-proxy refuses to mount again: ask which volume is there.
            let there = run(
                h,
                HostOp::GetVolumeIDFromTargetPath,
                staging,
                h.host().volume_id_from_target_path(staging, d),
            )
            .await?;
            if same_id(&there, &vid) {
                debug!(staging = %staging, "the volume was mounted there already");
                Ok(Steps::Done)
            } else {
                Err(Error::FailedPrecondition(format!(
                    "{staging} has volume {there} mounted, not {vid}; refusing to replace it"
                )))
            }
        }
        Err(e) => Err(block_error(e, staging)),
    }
}

/// Step 7: format the volume when it has no file system and this driver created it in the first stage still in
/// progress (the record's marks, retired once a stage succeeded). A format announced earlier whose outcome is unknown
/// is learned first (`IsVolumeFormatted`), waited for while it may still run, and issued again only once it cannot; a
/// new format is announced (durable) before it is issued.
#[allow(clippy::too_many_arguments)]
async fn file_system<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    judge: &Judge,
    volume_id: &str,
    staging: &HostPath,
    rec: &mut IscsiRecord,
    vid: &str,
    disk: &str,
    read_only: bool,
) -> Result<(), Error> {
    let d = h.deadline();
    let mut polls = Polls::outcome(judge);
    let formatted = loop {
        let answer = run(
            h,
            HostOp::IsVolumeFormatted,
            &vid,
            h.host().is_volume_formatted(vid, d),
        )
        .await;
        let announced = rec
            .pending
            .clone()
            .filter(|p| p.call == Destructive::FormatVolume);
        if let (Ok(false), Some(p)) = (&answer, &announced) {
            judge.clock.learn(h, p).await?;
        }
        match (answer, announced) {
            (Ok(true), announced) => {
                if let Some(p) = announced {
                    // Its outcome: formatted. Recorded with the `Staged` write.
                    judge.clock.done(&p);
                    rec.pending = None;
                }
                break true;
            }
            (Ok(false), Some(p)) if p.may_run(&judge.clock) => {
                polls
                    .next(h, &p.waiting(&judge.clock, vid, "a file system"))
                    .await?;
            }
            (Ok(false), _) => break false,
            (Err(e), _) => return Err(e),
        }
    };
    if formatted {
        return Ok(());
    }
    if read_only {
        return Err(super::access::refuse_write(
            disk,
            &format!("holds volume {vid} without a file system Windows recognises"),
        ));
    }
    if !rec.volume_is_ours() {
        return Err(unrecognised(rec, vid, disk));
    }
    // Nothing destructive while another volume's call on this LUN may still run (`pending.rs`).
    super::pending::wait_for_others(cx, h, &judge.clock, volume_id, rec).await?;
    // The announcement (and what the volume step learned: the "ours" evidence) is durable before the call.
    let announced = judge.clock.announce(
        h.host(),
        Pending::now(Destructive::FormatVolume).on_volume(vid),
    );
    rec.pending = Some(announced.clone());
    put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
    info!(volume = %vid, disk = %disk, "formatting the new volume (NTFS)");
    // Run to its end on its own task: a stage that gave up still learns that it answered (`Clock::to_end`).
    let volume = vid.to_owned();
    match judge
        .clock
        .to_end(
            h,
            &announced,
            HostOp::FormatVolume,
            vid,
            move |host: H, d| async move { host.format_volume(&volume, d).await },
        )
        .await
    {
        // Its outcome is recorded with the `Staged` write.
        Ok(()) => {
            judge.clock.done(&announced);
            rec.pending = None;
            Ok(())
        }
        // It may still run: the announcement stays for the retry to learn its outcome.
        Err(e) if e.kind.is_uncertain() => Err(write_error(e, disk, vid)),
        Err(e) => {
            judge.clock.done(&announced);
            rec.pending = None;
            put_iscsi(cx, volume_id, staging, Phase::Staging, rec).await?;
            Err(write_error(e, disk, vid))
        }
    }
}

/// Whether another volume staged (or being staged) on this node names `rec`'s LUN — the same target and LUN, or the
/// same page83 identity through another target — with a writer access mode.
fn shares_lun_with_writer<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    rec: &IscsiRecord,
) -> Result<bool, Error> {
    let n = cx.count_records::<IscsiRecord>(|r, i| {
        r.volume_id != volume_id
            && !i.released
            && super::pending::same_lun(rec, i)
            && !r
                .access
                .as_ref()
                .is_some_and(|a| super::access::reader_only(a.access_mode))
    })?;
    Ok(n > 0)
}

/// Why volume `vid`, which has no file system Windows recognises, is not formatted, and the way back. Never a
/// volume-context key that lets the driver format it: such a key stays in the PersistentVolume, and through csi-proxy
/// nothing tells a never-formatted volume from an NTFS that a later crash damaged, so a node the pod moves to after
/// that crash would format the pod's data (see the module docs, "What may be initialised or formatted").
fn unrecognised(rec: &IscsiRecord, vid: &str, disk: &str) -> Error {
    if rec.volume.as_deref().is_some_and(|v| same_id(v, vid)) {
        return Error::FailedPrecondition(format!(
            "volume {vid} on {disk} was staged for this volume before, but Windows no longer recognises a file \
             system on it (FileSystemType Unknown): an NTFS damaged by an unclean disconnect, or a locked BitLocker \
             volume. This driver never formats a volume a stage succeeded on: refusing to format it. Repair it on the \
             node (chkdsk {vid} /f; if chkdsk answers that the volume is RAW, recover the data with a recovery tool or \
             from a backup) or unlock it (Unlock-BitLocker, manage-bde -unlock); kubelet's retry then mounts it"
        ));
    }
    Error::FailedPrecondition(format!(
        "volume {vid} on {disk} has no file system Windows recognises, and this driver did not create it in a stage \
         still in progress: it may hold another operating system's data (e.g. ext4), be an NTFS Windows can no longer \
         read (damaged: run chkdsk; BitLocker: unlock it), or be the new volume of a stage on another node that never \
         formatted it: refusing to format it. If it holds nothing you need, make it usable yourself: format it on a \
         node logged in to the target (Format-Volume -Path '{vid}' -FileSystem NTFS), after which a stage mounts \
         it, or clean the LUN (on the storage system, or Clear-Disk on a node), after which a stage initialises it"
    ))
}

/// The disk's volumes; when there seem to be none, once more after a `Rescan` (Windows' storage cache may not show
/// partitions and volumes that are arriving).
pub(super) async fn volumes_fresh<H: Host>(
    h: &Calls<'_, H>,
    disk: u32,
    subject: &str,
) -> Result<Vec<String>, Error> {
    let vols = volumes_on(h, disk, subject).await?;
    if !vols.is_empty() {
        return Ok(vols);
    }
    rescanned(h, disk, subject).await
}

/// The disk's volumes after a `Rescan`.
pub(super) async fn rescanned<H: Host>(
    h: &Calls<'_, H>,
    disk: u32,
    subject: &str,
) -> Result<Vec<String>, Error> {
    run(h, HostOp::Rescan, &subject, h.host().rescan(h.deadline())).await?;
    volumes_on(h, disk, subject).await
}

/// A failed `PartitionDisk` / `FormatVolume`. Besides the uncertain kinds, the one cause the driver can name is a
/// write-protected disk, which csi-proxy cannot clear (it has no call for the read-only flag).
pub(super) fn write_error(e: HostError, disk: &str, subject: &str) -> Error {
    // Not started (an earlier call on the object may still run: native) is as retryable as an uncertain answer.
    if e.kind.is_uncertain() || e.kind == HostErrorKind::InFlight {
        return block_error(e, &subject);
    }
    if e.kind == HostErrorKind::MayHoldData {
        // The backend saw data on the disk (or could not prove it blank) and wrote nothing.
        return Error::FailedPrecondition(format!("refusing to initialise {disk}: {}", e.message));
    }
    // 41010 "The specified partition type is not valid.": csi-proxy v1.3.0 and later pass the GPT basic-data type to
    // `CreatePartition` even on an MBR disk (sim/README.md row `partition_disk_mbr`).
    if e.op == HostOp::PartitionDisk && e.message.contains("41010") {
        return Error::FailedPrecondition(format!(
            "PartitionDisk on {subject} failed: {}. {disk} is MBR-initialised without partitions, and csi-proxy \
             v1.3.0 and later create only GPT partitions (an MBR disk refuses their partition type): make it RAW \
             again (clean the LUN on the storage system, or Clear-Disk on the node), which this driver initialises \
             GPT, or use the native backend; nothing was created",
            e.message
        ));
    }
    Error::FailedPrecondition(format!(
        "{} on {subject} failed: {}. If {disk} is read-only (a write-protected LUN, or the node's SAN policy), \
         csi-proxy cannot clear that: make the LUN writable on the storage system, or clear it on the node \
         (Set-Disk -IsReadOnly $false); nothing was formatted",
        e.op, e.message
    ))
}

/// `ListVolumesOnDisk`, the ids Windows has for the disk. "Not found" (PowerShell-era csi-proxy on a RAW disk:
/// "No MSFT_Partition objects found", [`HostErrorKind::NoPartition`] when its record says so) and empty ids (its
/// `[""]` for a disk whose partitions have no volume) all mean no volume.
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
        Ok(v) => Ok(v
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()),
        Err(e) if matches!(e.kind, HostErrorKind::NotFound | HostErrorKind::NoPartition) => {
            Ok(Vec::new())
        }
        Err(e) => Err(block_error(e, &subject)),
    }
}
