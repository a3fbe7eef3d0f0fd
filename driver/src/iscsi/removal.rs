//! The logout of a target's last staged volume, which may outlive its caller (issue 37 item 9).
//!
//! `DisconnectTarget` can finish after the unstage (or a first stage's rollback) that issued it gave up: csi-proxy
//! runs it to its end, and natively the running `MSFT_iSCSITarget.Disconnect` finishes on its thread. A stage of any
//! volume of that target arriving meanwhile would log in with "already logged in" (or join the session), succeed,
//! and then lose its disk when the late logout ends the session. So the logout is treated like a destructive call
//! (`pending.rs`):
//!
//! * **announced** — the volume's record carries it ([`IscsiRecord::removal`], durable) before `DisconnectTarget` is
//!   issued; an answer clears it (the unstage then removes the record, a rollback writes its released record), an
//!   uncertain one keeps it, in the record the unstage keeps for kubelet's retry (a rollback keeps a released record
//!   for it);
//! * **waited for** — a stage of any volume of the target first looks for announced logouts of it in every record
//!   (before it takes the target's lock, polling within its deadline; then once more under the lock, answering
//!   UNAVAILABLE at once). One is over when the node rebooted since, when the backend shows none of its calls on
//!   the target still running (native), when the target shows no disk any more (`GetTargetDisks` empty or not
//!   found: the session is gone), or after the bound; the stage then goes on, and a stage of the announcing volume
//!   clears it from its own record.
//!
//! # The staging path
//!
//! The unstage's non-forced `Rmdir` of the staging path can land late too (csi-proxy's `Rmdir`, natively
//! `RemoveDirectoryW`, finish after their caller went away), and a stage of the volume arriving meanwhile would mount
//! the volume at the staging path again, answer OK, and lose the mount point when the late removal lands. So it is
//! announced the same way ([`IscsiRecord::unmounting`], [`Destructive::RemoveStagingPath`]) and a stage of the volume
//! waits (polling within its deadline, then UNAVAILABLE) until it is over: this process saw it answer, the staging
//! path is gone (`PathExists` false: its outcome), the node rebooted since, or the bound passed. It costs one record
//! write per unstage, and `PathExists` looks in a stage only while an announcement is in the record.
//!
//! What it costs: one record write before each logout (only the target's last volume logs out), a scan of the
//! records at each stage (in memory), and `GetTargetDisks` per look only while an announced logout is unsettled.
//! An unstage that retries after an uncertain logout issues `DisconnectTarget` again: a second logout is harmless.
//! After a driver restart an announcement whose owner never came back (a rollback whose pod was deleted) is judged
//! again: at once after a reboot or natively, through csi-proxy once the session is gone — but should another volume
//! have logged in to the target since, the session is there and the wait lasts until the bound.

use tracing::{debug, info, warn};

use super::IscsiRecord;
use super::judge::{Judge, Polls};
use super::pending::{Clock, Destructive, Pending};
use super::volume::logout;
use crate::error::Error;
use crate::host::{Host, HostErrorKind, HostOp, HostPath};
use crate::lifecycle::{Calls, Context};
use crate::state::VolumeRecord;

/// Log out of `rec`'s target, announcing the logout in the record first (`write` makes the record to store from the
/// iSCSI facts). `rec.removal` is `None` afterwards unless the logout's outcome is uncertain.
pub(super) async fn logout_announced<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    clock: &Clock,
    rec: &mut IscsiRecord,
    write: &(dyn Fn(&IscsiRecord) -> Result<VolumeRecord, Error> + Sync),
) -> Result<(), Error> {
    let Some(iqn) = rec.login_iqn().map(str::to_owned) else {
        // Never logged in: nothing to log out, nothing to announce.
        rec.removal = None;
        return logout(h, rec).await;
    };
    let announced = clock.announce(
        h.host(),
        Pending::now(Destructive::DisconnectTarget).on_target(&iqn),
    );
    rec.removal = Some(announced.clone());
    cx.store().put_volume(&write(rec)?).await?;
    match logout(h, rec).await {
        Ok(()) => {
            clock.done(&announced);
            rec.removal = None;
            Ok(())
        }
        Err(err @ (Error::DeadlineExceeded(_) | Error::Unavailable(_))) => {
            warn!(iqn = %iqn, error = %err, "the logout's outcome is uncertain: it stays announced in the record, \
                  and stages of the target wait for it");
            Err(err)
        }
        Err(err) => {
            clock.done(&announced);
            rec.removal = None;
            cx.store().put_volume(&write(rec)?).await?;
            Err(err)
        }
    }
}

/// Before a stage logs in to (or joins the session of) the target locked by `key`: wait for the logouts of it
/// announced in records (module docs). `locked`: the caller holds the target's lock, so nothing is waited for
/// (UNAVAILABLE at once); else polls within the deadline. A settled announcement in `own` (this volume's record) is
/// cleared there (recorded with its next write).
pub(super) async fn wait_for_logouts<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    judge: &Judge,
    key: &str,
    own: &mut IscsiRecord,
    locked: bool,
) -> Result<(), Error> {
    let mut polls = Polls::outcome(judge);
    loop {
        match unsettled(cx, h, &judge.clock, key).await? {
            None => break,
            Some(why) if locked => {
                return Err(Error::Unavailable(format!("{why}; kubelet will retry")));
            }
            Some(why) => polls.next(h, &why).await?,
        }
    }
    if own
        .removal
        .as_ref()
        .is_some_and(|p| !p.may_run(&judge.clock))
    {
        debug!(iqn = %own.iqn, "this volume's announced logout is over");
        if let Some(p) = own.removal.take() {
            judge.clock.done(&p);
        }
    }
    Ok(())
}

/// The first announced logout of `key`'s target that may still be running, as the stage's answer; `None` when none.
async fn unsettled<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    clock: &Clock,
    key: &str,
) -> Result<Option<String>, Error> {
    let announced: Vec<(VolumeRecord, IscsiRecord)> = cx
        .records::<IscsiRecord>()?
        .into_iter()
        .filter(|(_, r)| r.removal.is_some() && r.target_key() == key)
        .collect();
    for (owner, r) in announced {
        let Some(p) = r.removal.as_ref() else {
            continue;
        };
        clock.learn(h, p).await?;
        if !p.may_run(clock) {
            continue;
        }
        let iqn = p.target.as_deref().unwrap_or(&r.iqn);
        if clock.running(p).is_none()
            && let Some(portal) = r.logout_portal()
        {
            // Through csi-proxy only the host's view tells: no disk of the target means no session any more.
            match h
                .raw(
                    HostOp::GetTargetDisks,
                    &iqn,
                    h.host().get_target_disks(portal, iqn, h.deadline()),
                )
                .await
            {
                Ok(disks) if disks.is_empty() => {
                    info!(iqn, volume = %owner.volume_id, "an announced logout of the target is over: it has no session");
                    clock.end(p, "the target has no session any more");
                    continue;
                }
                Err(e) if e.kind == HostErrorKind::NotFound => {
                    clock.end(p, "the target has no session any more");
                    continue;
                }
                Err(e) if e.kind.is_uncertain() => {
                    return Err(super::block_error(e, &iqn));
                }
                _ => {}
            }
        }
        let why = p.waiting(clock, &format!("target {iqn}"), "the end of its session");
        return Ok(Some(format!(
            "{why}. It was issued by the unstage of volume {:?}; a session this stage joined now would be ended by it",
            owner.volume_id
        )));
    }
    Ok(None)
}

/// The unstage's non-forced `Rmdir` of the staging path (a mount point, dangling or not, or an empty directory; never
/// data), announced in `record` first (module docs, "The staging path"); already gone counts as done. `rec` is
/// `record`'s facts: its announcement is `None` afterwards unless the outcome is uncertain (then it stays in the
/// record the unstage keeps for kubelet's retry).
pub(super) async fn remove_staging_path<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    clock: &Clock,
    record: &VolumeRecord,
    staging: &HostPath,
    rec: &mut IscsiRecord,
) -> Result<(), Error> {
    let announced = clock.announce(h.host(), Pending::now(Destructive::RemoveStagingPath));
    rec.unmounting = Some(announced.clone());
    cx.store().put_volume(&record.with_details(rec)?).await?;
    match h
        .raw(
            HostOp::Rmdir,
            staging,
            h.host().rmdir(staging, false, h.deadline()),
        )
        .await
    {
        Ok(()) => {}
        Err(e) if e.kind == HostErrorKind::NotFound => {}
        Err(e) if e.kind.is_uncertain() => {
            warn!(staging = %staging, error = %e.message, "the staging path's removal's outcome is uncertain: it \
                  stays announced in the record, and stages of the volume wait for it");
            return Err(super::block_error(e, staging));
        }
        Err(e) => {
            clock.done(&announced);
            rec.unmounting = None;
            cx.store().put_volume(&record.with_details(rec)?).await?;
            return Err(super::block_error(e, staging));
        }
    }
    clock.done(&announced);
    rec.unmounting = None;
    Ok(())
}

/// Before a stage of the volume whose record `record` (at `staging`) announced its staging path's removal: answer
/// UNAVAILABLE while that `Rmdir` may still run, polling within the deadline (a mount point this stage made would be
/// taken away by it); once it is
/// over, the announcement leaves the record (written at once: a mounted staging path must not make a later stage
/// wait for the bound). Returns the record to go on with.
pub(super) async fn wait_for_staging_removal<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    judge: &Judge,
    record: std::sync::Arc<VolumeRecord>,
    staging: &HostPath,
) -> Result<std::sync::Arc<VolumeRecord>, Error> {
    let Some(mut rec) = record.details::<IscsiRecord>()? else {
        return Ok(record);
    };
    let Some(p) = rec.unmounting.clone() else {
        return Ok(record);
    };
    let mut polls = Polls::outcome(judge);
    loop {
        let over = !p.may_run(&judge.clock)
            || judge.clock.rebooted_since(h.host(), &p)
            || match h.path_exists(staging).await {
                Ok(false) => {
                    judge.clock.end(&p, "the staging path is gone");
                    true
                }
                Ok(true) => false,
                Err(e) if e.kind.is_uncertain() => return Err(super::block_error(e, staging)),
                Err(e) => {
                    debug!(staging = %staging, error = %e.message, "cannot tell whether the staging path is gone");
                    false
                }
            };
        if over {
            break;
        }
        let why = format!(
            "{}. It was issued by the unstage of volume {:?}; a mount point this stage made there now would be \
             removed by it; kubelet will retry",
            p.waiting(
                &judge.clock,
                &format!("the staging path {staging}"),
                "its removal"
            ),
            record.volume_id
        );
        polls.next(h, &why).await?;
    }
    let clock = &judge.clock;
    info!(staging = %staging, "the staging path's announced removal is over");
    clock.done(&p);
    rec.unmounting = None;
    let record = record.with_details(&rec)?;
    cx.store().put_volume(&record).await?;
    Ok(std::sync::Arc::new(record))
}
