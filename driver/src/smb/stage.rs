//! NodeStageVolume of a share (also the private stage of an inline ephemeral volume): the principal claimed under
//! the server's lock, the health of an existing stage, the mapping (with its repairs) and the staging link, and the
//! rollback of a definite failure.

use tracing::{debug, info, warn};

use super::mapping::{MapRepair, check_principal, lock_mapping, map_locked, remove_mapping};
use super::{Mappings, SmbRecord, SmbVolume, other_share_users, reaches_share};
use crate::error::Error;
use crate::host::{Host, HostError, HostErrorKind};
use crate::lifecycle::{Context, StageAt, host_error};
use crate::locks::Deadline;
use crate::state::{Phase, VolumeRecord};

#[cfg(test)]
mod tests;

/// The object lock of an SMB server's principal (Windows allows one user per server per node: error 1219).
fn server_lock_key(vol: &SmbVolume) -> String {
    format!("smb-server:{}", vol.source.server_key())
}

/// NodeStageVolume of a share.
pub(super) async fn stage<H: Host>(
    cx: Context<'_, H>,
    mappings: &Mappings,
    at: StageAt<'_>,
    vol: &SmbVolume,
    d: Deadline,
) -> Result<(), Error> {
    let StageAt {
        volume_id,
        staging,
        ephemeral,
    } = at;
    let h = cx.calls(d);
    let mut wanted = SmbRecord::of(vol);
    let existing = cx.store().volume(volume_id)?;
    if let Some(rec) = &existing {
        let facts = rec.details::<SmbRecord>()?;
        let same = facts.as_ref().is_some_and(|r| r.same_volume(&wanted));
        if !same || !staging.is(&rec.staging_path) {
            return Err(Error::AlreadyExists(format!(
                "volume {volume_id:?} is already staged at {} from another source or path; unstage it first",
                rec.staging_path
            )));
        }
        // What the record proved about the mapping stays proven while this stage runs and after it fails: the
        // mapping is still there (only this driver's unstage or rollback removes it, and either deletes the record).
        wanted.mapped = facts.is_some_and(|r| r.proves_mapping(rec) && r.same_mapping(&wanted));
    }
    let fresh = existing.is_none();
    // Shared with the store's index (held to the end of the stage: with many stages at once, copies add up).
    let record = std::sync::Arc::new(VolumeRecord::new(
        volume_id,
        Phase::Staging,
        staging.as_str(),
        ephemeral,
        &wanted,
    )?);
    // The one-principal-per-server rule, checked and claimed atomically under the server's lock: the record naming
    // this principal is in the store (visible to every other stage) before the lock is released, so of two stages on
    // one server with different accounts exactly one passes (the other sees its record). It becomes durable after
    // the lock (a stage of another volume on the server need not wait for this one's write), before any host call.
    let (repair, claim) = {
        let _server = cx.object_locks().lock(&server_lock_key(vol)).await;
        check_principal(cx, volume_id, vol)?;
        let repair = MapRepair::of(cx, volume_id, existing.as_deref(), vol)?;
        let claim = match &existing {
            None => Some(cx.store().put_shared_volume(&record)),
            // Same share, new principal name (rotated credentials): keep the record truthful.
            Some(rec) if rec.details::<SmbRecord>()?.as_ref() != Some(&wanted) => {
                Some(cx.store().put_volume(&rec.with_details(&wanted)?))
            }
            Some(_) => None,
        };
        (repair, claim)
    };
    if let Some(claim) = claim {
        claim.await?;
    }
    debug!(root = %vol.source.root(), fresh, "principal claimed");

    // A repeated stage asks `IsSymlink` alone: true only for a link whose own target exists, so the path exists too
    // (on every csi-proxy release, `os.Lstat` first, and the native backend), one call where `PathExists` first made
    // two. Anything else goes the repair way below.
    if let Some(rec) = &existing
        && rec.phase == Phase::Staged
    {
        match reaches_share(&h, staging).await? {
            Ok(()) => {
                debug!(staging = %staging, "already staged and reachable: nothing to do");
                return Ok(());
            }
            // An error here (e.g. access denied on a mapping Disconnected by a reboot, or the path is missing) means
            // "not healthy": repair.
            Err(why) => {
                info!(staging = %staging, why = %why, "staging link does not reach the share: re-staging")
            }
        }
    }
    // What is at the staging path goes first: kubelet's empty directory (kubelet makes it before NodeStage) or the
    // link of a stage being repaired. A non-forced `Rmdir` never removes data (a non-empty directory is refused), and
    // "not found" means nothing is there on every csi-proxy release (Go's `os.Remove`: Windows errors 2/3) and the
    // native backend: no `PathExists` first. Before the mapping's lock, so stages of one share do this at once.
    match h.rmdir(staging).await {
        Ok(()) => {
            debug!(staging = %staging, "removed what was at the staging path (kubelet's directory or an old link)")
        }
        Err(e) if e.kind == HostErrorKind::NotFound => {}
        Err(e) => return Err(forget_fresh(cx, fresh, volume_id, host_error(e, staging)).await?),
    }

    // From here on the record (phase staging) counts as a user of the mapping (a fresh one was written with the
    // claim above).
    if !fresh {
        cx.store().put_shared_volume(&record).await?;
    }
    let root = vol.source.root_key();
    // A re-stage (a record exists) may find the mapping broken and repair it: it does not go by what this process
    // remembers making.
    let mut mapping = lock_mapping(cx, fresh.then_some(mappings), volume_id, &root).await?;
    let mut mapped = false;
    // Whether this call made the mapping (under the exclusive side, which it then gave up for the shared one).
    let mut created = false;
    // Once the share is mapped, the other stages queued on it go on under the shared side while this one finishes.
    let mut share_mapped = |mapping: &mut crate::locks::KeyedGuard| {
        mappings.mapped(&root);
        if !mapping.is_shared() {
            created = true;
            mapping.downgrade();
        }
    };
    // Whether a link this call made is at the staging path (the only thing a rollback may remove there).
    let mut link_ours = false;
    let cred = vol.credential.as_ref();
    let result = async {
        if !vol.sub_dir.is_empty() {
            let sub = staging.join(&vol.sub_dir.join("\\"), cx.kubelet_root())?;
            debug!(sub_dir = %vol.full_path(), "ensuring subDir exists on the share through a temporary link");
            map_locked(&h, &mut mapping, &vol.source, staging, cred, repair)
                .await
                .map_err(|e| map_error(e, vol, &vol.source))?;
            mapped = true;
            share_mapped(&mut mapping);
            link_ours = true;
            h.mkdir(&sub).await.map_err(|e| host_error(e, &vol.full_path()))?;
            h.rmdir(staging).await.map_err(|e| host_error(e, staging))?;
            link_ours = false;
        }
        let full = vol.full_path();
        map_locked(&h, &mut mapping, &full, staging, cred, repair)
            .await
            .map_err(|e| map_error(e, vol, &full))?;
        mapped = true;
        share_mapped(&mut mapping);
        link_ours = true;
        if let Err(why) = reaches_share(&h, staging).await? {
            return Err(Error::FailedPrecondition(format!(
                "{full} is not reachable through the SMB mapping ({why}): the path does not exist on the share, or \
                 the mapping is not usable; check the volume's source and subDir"
            )));
        }
        Ok(())
    }
    .await;

    match result {
        Ok(()) => {
            // Staged in the store (visible) while the mapping's lock is held: stages queued behind this one's mapping
            // see a staged user and share the mapping; they need not wait for this record to be durable.
            // The mapping of the share under this principal is now provably this driver's (`SmbRecord::mapped`).
            let facts = SmbRecord {
                mapped: true,
                ..wanted
            };
            let staged = cx
                .store()
                .put_volume(&cx.staged(&record.with_details(&facts)?));
            drop(mapping);
            staged.await?;
            info!(staging = %staging, remote = %vol.full_path(), "volume staged");
            Ok(())
        }
        Err(err @ (Error::DeadlineExceeded(_) | Error::Unavailable(_))) => {
            warn!(error = %err, "stage outcome uncertain: keeping the record for kubelet's retry or unstage");
            Err(err)
        }
        Err(err) if fresh => {
            debug!(error = %err, "stage failed: rolling back what this call created");
            if link_ours && let Err(e) = h.rmdir(staging).await {
                warn!(error = %e, "rollback: cannot remove the staging link; keeping the record");
                return Err(err);
            }
            // A mapping this call did not make was there before it (another volume uses it, or it was found) and is
            // never ours alone to remove. One it made may have gained users since it gave up the exclusive side:
            // they are counted again under that side.
            if mapped && created {
                mapping.upgrade().await;
            }
            if mapped
                && created
                && other_share_users(cx, volume_id, &root)? == 0
                && cx.may_remove_shared(0, &root)
            {
                mappings.forget(&root);
                match remove_mapping(&h, &vol.source.root()).await {
                    Ok(()) => {}
                    Err(e) if e.kind == HostErrorKind::NotFound => {}
                    Err(e) => {
                        warn!(error = %e, "rollback: cannot remove the mapping; keeping the record");
                        return Err(err);
                    }
                }
            }
            cx.store().remove_volume(volume_id).await?;
            Err(err)
        }
        Err(err) => Err(err),
    }
}

/// A failure before the first host change: a fresh record (the principal's claim) goes again, unless the outcome is
/// uncertain (kubelet retries or unstages).
async fn forget_fresh<H: Host>(
    cx: Context<'_, H>,
    fresh: bool,
    volume_id: &str,
    err: Error,
) -> Result<Error, Error> {
    if fresh && !matches!(err, Error::DeadlineExceeded(_) | Error::Unavailable(_)) {
        cx.store().remove_volume(volume_id).await?;
    }
    Ok(err)
}

/// A failed `NewSmbGlobalMapping`. Without credentials, a failure Windows gives no known reason for is csi-proxy's own
/// limit: v1.1.x and v1.2.x (PowerShell) always build a `PSCredential` and cannot map with the node's identity.
fn map_error(e: HostError, vol: &SmbVolume, subject: &dyn std::fmt::Display) -> Error {
    if vol.credential.is_none() && e.kind == HostErrorKind::Other {
        return Error::FailedPrecondition(format!(
            "{subject} cannot be mapped without credentials by this node's csi-proxy ({}): csi-proxy v1.1.x and \
             v1.2.x (PowerShell) always pass a credential and cannot map a share with the node's own identity; only \
             v1.3.0 and later can. Give the volume a username and password (the node-stage secret, or an inline \
             volume's secretName), or upgrade csi-proxy on the node",
            e.message
        ));
    }
    host_error(e, subject)
}
