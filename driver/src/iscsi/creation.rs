//! The iSCSI login of a stage as a creating call that may outlive it (`crate::lifecycle::creation`): `ConnectTarget`
//! run to its end, announced in the record's [`IscsiRecord::creating`] by the write that already precedes it, and
//! what an unstage waits for before it counts the target's users and logs out. What a late login makes shows as the
//! target's disks (`GetTargetDisks` answers some: a session of the target is up), so a restarted driver sees it.

use std::time::Duration;

use tracing::debug;

use super::{IscsiRecord, Sessions, block_error};
use crate::error::Error;
use crate::host::{Host, HostOp, HostResult, Portal};
use crate::lifecycle::creation::{Creation, Settled};
use crate::lifecycle::{Calls, Context};
use crate::state::VolumeRecord;

/// The first pause between two looks at the target's disks (doubling, at most [`LOOK_STEP_MAX`]).
const LOOK_STEP: Duration = Duration::from_millis(500);
const LOOK_STEP_MAX: Duration = Duration::from_secs(4);

/// `ConnectTarget` (persistent when asked) of `iqn` through `portal`, a creating call of `volume_id`'s stage run to its
/// end on its own task.
pub(super) async fn login<H: Host>(
    h: &Calls<'_, H>,
    sessions: &Sessions,
    volume_id: &str,
    portal: &Portal,
    iqn: &str,
    vol: &super::IscsiVolume,
) -> HostResult<()> {
    let (p, i, a, persistent) = (
        portal.clone(),
        iqn.to_owned(),
        vol.auth.clone(),
        vol.persistent,
    );
    h.raw(
        HostOp::ConnectTarget,
        &iqn,
        sessions.1.to_end(
            h.host(),
            volume_id,
            HostOp::ConnectTarget,
            h.deadline(),
            move |host: H, d| async move {
                if persistent {
                    host.connect_target_persistent(&p, &i, &a, d).await
                } else {
                    host.connect_target(&p, &i, &a, d).await
                }
            },
        ),
    )
    .await
}

/// The announcement of a login of `volume_id` (`rec` its facts, written by the caller before the login).
pub(super) fn announce<H: Host>(
    h: &Calls<'_, H>,
    sessions: &Sessions,
    volume_id: &str,
    rec: &IscsiRecord,
) -> Creation {
    let earlier = rec.creating.as_ref();
    sessions
        .1
        .announce(h.host(), volume_id, earlier, HostOp::ConnectTarget, None)
}

/// Before an unstage of `record` (facts `rec`): UNAVAILABLE while a login its stage announced may still run.
pub(super) async fn login_settled<H: Host>(
    h: &Calls<'_, H>,
    sessions: &Sessions,
    record: &VolumeRecord,
    rec: &IscsiRecord,
) -> Result<(), Error> {
    let Some(c) = &rec.creating else {
        return Ok(());
    };
    let iqn = rec.target_iqn.as_deref().unwrap_or(&rec.iqn);
    // The target's disks show a session: looked at until they do, within the unstage's deadline (a disk arrives
    // some time after its login; through csi-proxy v1.3.0+ a target without a session answers no disks too).
    let shows = move || async move {
        let Some(portal) = &rec.session_portal else {
            return Ok(false);
        };
        let mut step = LOOK_STEP;
        loop {
            match h
                .raw(
                    HostOp::GetTargetDisks,
                    &iqn,
                    h.host().get_target_disks(portal, iqn, h.deadline()),
                )
                .await
            {
                Ok(disks) if !disks.is_empty() => return Ok(true),
                Ok(_) => {}
                Err(e) if e.kind.is_uncertain() => return Err(block_error(e, &iqn)),
                Err(e) => debug!(iqn, error = %e.message, "no session of the target shows"),
            }
            let next = tokio::time::Instant::now() + step;
            if next + LOOK_STEP >= h.deadline().instant() {
                return Ok(false);
            }
            tokio::time::sleep_until(next).await;
            step = (step * 2).min(LOOK_STEP_MAX);
        }
    };
    let what = format!("the iSCSI login to {iqn}");
    match sessions
        .1
        .settled(h, &record.volume_id, c, &what, shows)
        .await?
    {
        Settled::No(why) => Err(Error::Unavailable(why)),
        Settled::Yes(why) => {
            debug!(volume_id = %record.volume_id, why, "the stage's login is over: unstaging");
            Ok(())
        }
    }
}

/// After a stage of `volume_id` failed for good with its record kept: the announcement of a login that answered leaves
/// the record (`Creations::retire_answered`).
pub(super) async fn retire_answered<H: Host>(
    cx: Context<'_, H>,
    sessions: &Sessions,
    volume_id: &str,
) -> Result<(), Error> {
    fn slot(r: &mut IscsiRecord) -> &mut Option<Creation> {
        &mut r.creating
    }
    sessions.1.retire_answered(cx, volume_id, slot).await
}
