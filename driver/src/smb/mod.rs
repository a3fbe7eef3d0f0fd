//! SMB shares as volumes: an SMB global mapping of the share root on the node plus a directory link at the staging
//! path that points into the share (csi-driver-smb's keys; see [`params`] for the attributes and secrets).
//!
//! [`Smb`] is the lifecycle's [`Protocol`] for shares. It serves every volume another protocol does not claim
//! (csi-driver-smb compatibility: any volume without iSCSI attributes is a share).
//!
//! # Host-call sequences (asserted by the unit tests in `smb/tests.rs`)
//!
//! | Operation | Host calls |
//! | --- | --- |
//! | first stage | `PathExists(staging)` → `NewSmbGlobalMapping(full, link=staging)` → `IsSymlink(staging)` (plus `Rmdir(staging)` first when kubelet left a directory there) |
//! | first stage with subDir | `PathExists` → `NewSmbGlobalMapping(root+source, link=staging)` → `Mkdir(staging\subDir)` (creates it on the share, through the link) → `Rmdir(staging)` → `NewSmbGlobalMapping(full, link=staging)` → `IsSymlink` |
//! | repeated stage | `PathExists(staging)` → `IsSymlink(staging)` |
//! | unstage | `PathExists(staging)` → `Rmdir(staging)` → `RemoveSmbGlobalMapping(root)` only when no other record uses the root |
//! | stats | `PathExists(path)` → `IsSymlink(path)` |
//! | startup reconcile (staged record) | `PathExists(staging)` → `IsSymlink(staging)` (→ `Rmdir(staging)` when it no longer resolves) |
//!
//! Publish and unpublish are the lifecycle's (a link from the target to the staging path; see `crate::lifecycle`).
//!
//! Why the subDir dance: csi-proxy's `Mkdir` only accepts paths under the kubelet root and `CreateSymlink` cannot
//! point at a UNC path, so the only way to create a directory on the share is through a link that
//! `NewSmbGlobalMapping` made. The staging path itself serves as that temporary link (it is ours, and a crash
//! mid-dance is repaired by the next stage, which always rebuilds a link it did not finish).
//!
//! # Mapping health
//!
//! csi-proxy v1 cannot list or query SMB global mappings. The driver therefore learns a mapping's health from path
//! reachability: `IsSymlink` is true only when a link *and its target* exist, so a staging link whose UNC target
//! does not resolve means the mapping is down (Disconnected after a reboot, credentials rotated, server gone).
//! Repairing relies on `NewSmbGlobalMapping`'s own reuse-or-recreate logic: it keeps an OK, reachable mapping and
//! removes and re-creates a broken one; when a stale mapping blocks the create (Windows error 85) it is removed
//! first, under the share's exclusive lock.
//!
//! # Crash safety
//!
//! Stage writes the volume record (phase `staging`) **before** it touches the host and flips it to `staged` only at
//! the end; unstage removes the link, then the mapping if no *other* record names its root, and deletes the record
//! **last**. Walking every crash point:
//!
//! * stage, before the record: nothing exists; the retry starts afresh.
//! * stage, after the record, anywhere among the host calls: the record counts as a user of the root, so no concurrent
//!   unstage removes the mapping under it. A retried stage sees phase `staging`, removes whatever link is at the
//!   staging path and redoes every step (each is idempotent or preceded by its cleanup). If kubelet unstages instead,
//!   unstage removes the link and — being the last user — the mapping, then the record: nothing leaks.
//! * unstage, after the link removal or after the mapping removal: the record still exists, so the retry repeats the
//!   remaining steps (`RemoveSmbGlobalMapping`'s "not found" counts as done).
//!
//! A definite stage failure (e.g. 1219, logon failure, share not found) rolls back what this call created and deletes
//! a fresh record, because kubelet treats such an error as final and will not call NodeUnstage. An uncertain failure
//! (deadline, csi-proxy unavailable) keeps the record: kubelet retries or unstages.
//!
//! # Concurrency
//!
//! Stages of volumes on one already-mapped share take the share's lock shared and overlap; creating, repairing or
//! removing the mapping takes it exclusively (`mapping.rs`).
//!
//! # Stats
//!
//! csi-proxy v1 has no free-space query for a UNC path, so SMB usage is reported as one `BYTES` entry with zeros
//! (kubelet requires a usage entry). The volume condition is what can be known: abnormal when the volume path no
//! longer resolves through the mapping.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::host::{Host, HostErrorKind, HostPath, UncPath, name_key, names_equal};
use crate::lifecycle::{
    Context, Health, Protocol, StageAt, StageRequest, Usage, VolumeStats, host_error,
};
use crate::locks::Deadline;
use crate::state::{Details, Phase, VolumeRecord};

mod mapping;
pub mod params;
#[cfg(test)]
mod tests;

pub use crate::lifecycle::Secrets;
pub use params::{SmbVolume, parse_volume};

use mapping::{check_principal, lock_mapping, map_locked, remove_mapping};

/// The SMB facts of a staged volume, kept in its state record (never a secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmbRecord {
    /// The mapping key: `\\server\share`, lower-cased.
    pub root: String,
    /// The full remote path the staging link points to (root + source path + subDir).
    pub remote_path: String,
    /// The principal name the mapping was requested with (never the password).
    pub principal: Option<String>,
}

impl Details for SmbRecord {
    const PROTOCOL: &'static str = "smb";
}

impl SmbRecord {
    fn of(vol: &SmbVolume) -> Self {
        Self {
            root: vol.source.root_key(),
            remote_path: vol.full_path().to_string(),
            principal: vol.principal().map(str::to_owned),
        }
    }

    /// Whether two records describe the same staged share path (principal excluded: credentials may rotate).
    fn same_volume(&self, other: &Self) -> bool {
        self.root == other.root && self.remote_path.eq_ignore_ascii_case(&other.remote_path)
    }
}

/// The SMB protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct Smb;

impl<H: Host> Protocol<H> for Smb {
    type Volume = SmbVolume;

    /// Every volume: SMB is the fallback protocol (csi-driver-smb compatibility).
    fn serves(&self, _volume_context: &BTreeMap<String, String>) -> bool {
        true
    }

    fn owns(&self, record: &VolumeRecord) -> bool {
        record.is::<SmbRecord>()
    }

    fn parse(&self, req: &StageRequest) -> Result<SmbVolume, Error> {
        parse_volume(&req.volume_context, &req.secrets)
    }

    fn parse_inline(&self, req: &StageRequest) -> Option<Result<SmbVolume, Error>> {
        Some(parse_volume(&req.volume_context, &req.secrets))
    }

    async fn stage(
        &self,
        cx: Context<'_, H>,
        at: StageAt<'_>,
        vol: &SmbVolume,
        d: Deadline,
    ) -> Result<(), Error> {
        stage(cx, at, vol, d).await
    }

    async fn unstage(
        &self,
        cx: Context<'_, H>,
        staging: &HostPath,
        record: &VolumeRecord,
        d: Deadline,
    ) -> Result<(), Error> {
        unstage(cx, staging, record, d).await
    }

    async fn stats(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        d: Deadline,
    ) -> Result<VolumeStats, Error> {
        stats(cx, record, path, d).await
    }

    async fn check(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<Health, Error> {
        check(cx, record, staging, d).await
    }
}

fn details(record: &VolumeRecord) -> Result<SmbRecord, Error> {
    record.details::<SmbRecord>()?.ok_or_else(|| {
        Error::Internal(format!(
            "volume {:?} is not an SMB volume; refusing to handle it as one",
            record.volume_id
        ))
    })
}

/// NodeStageVolume of a share (also the private stage of an inline ephemeral volume).
async fn stage<H: Host>(
    cx: Context<'_, H>,
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
    let wanted = SmbRecord::of(vol);
    let existing = cx.store().volume(volume_id)?;
    if let Some(rec) = &existing {
        let same = rec
            .details::<SmbRecord>()?
            .is_some_and(|r| r.same_volume(&wanted));
        if !same || !rec.staging_path.eq_ignore_ascii_case(staging.as_str()) {
            return Err(Error::AlreadyExists(format!(
                "volume {volume_id:?} is already staged at {} from another source or path; unstage it first",
                rec.staging_path
            )));
        }
    }
    check_principal(cx, volume_id, vol)?;

    let exists = h
        .path_exists(staging)
        .await
        .map_err(|e| host_error(e, staging))?;
    if let Some(rec) = &existing
        && rec.phase == Phase::Staged
        && exists
    {
        if h.is_symlink(staging)
            .await
            .map_err(|e| host_error(e, staging))?
        {
            debug!(staging = %staging, "already staged and reachable: nothing to do");
            if rec.details::<SmbRecord>()?.as_ref() != Some(&wanted) {
                // Same share, new principal name (rotated credentials): keep the record truthful.
                cx.store().put_volume(&rec.with_details(&wanted)?).await?;
            }
            return Ok(());
        }
        info!(staging = %staging, "staging link no longer resolves: re-staging");
    }

    // Intent first: from here on the record counts as a user of the mapping.
    let fresh = existing.is_none();
    let record = VolumeRecord::new(
        volume_id,
        Phase::Staging,
        staging.as_str(),
        ephemeral,
        &wanted,
    )?;
    cx.store().put_volume(&record).await?;
    debug!(root = %vol.source.root(), fresh, "stage record written");

    let root = vol.source.root_key();
    let mut mapping = lock_mapping(cx, volume_id, &root).await?;
    let mut mapped = false;
    // Whether a link this call made is at the staging path (the only thing a rollback may remove there).
    let mut link_ours = false;
    let result = async {
        if exists {
            debug!(staging = %staging, "removing what is at the staging path (kubelet's directory or an old link)");
            h.rmdir(staging).await.map_err(|e| host_error(e, staging))?;
        }
        if !vol.sub_dir.is_empty() {
            let sub = staging.join(&vol.sub_dir.join("\\"), cx.kubelet_root())?;
            debug!(sub_dir = %vol.full_path(), "ensuring subDir exists on the share through a temporary link");
            map_locked(&h, &mut mapping, &vol.source, staging, vol.credential.as_ref())
                .await
                .map_err(|e| host_error(e, &vol.source))?;
            mapped = true;
            link_ours = true;
            h.mkdir(&sub).await.map_err(|e| host_error(e, &vol.full_path()))?;
            h.rmdir(staging).await.map_err(|e| host_error(e, staging))?;
            link_ours = false;
        }
        let full = vol.full_path();
        map_locked(&h, &mut mapping, &full, staging, vol.credential.as_ref())
            .await
            .map_err(|e| host_error(e, &full))?;
        mapped = true;
        link_ours = true;
        if !h.is_symlink(staging).await.map_err(|e| host_error(e, staging))? {
            return Err(Error::FailedPrecondition(format!(
                "{full} is not reachable through the SMB mapping (the path does not exist on the share or the \
                 mapping is not connected); check the volume's source and subDir"
            )));
        }
        Ok(())
    }
    .await;

    match result {
        Ok(()) => {
            cx.store()
                .put_volume(&record.with_phase(Phase::Staged))
                .await?;
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
            // Under the shared side another volume is Staged on this share (checked under the lock, and only an
            // exclusive holder can remove it), so the mapping is never ours alone to remove.
            if mapped
                && !mapping.is_shared()
                && share_users(cx, &root)?
                    .iter()
                    .all(|r| r.volume_id == volume_id)
                && cx.may_remove_shared(0, &root)
            {
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

/// The volume records naming share `root` (its durable reference count is their number).
fn share_users<H: Host>(cx: Context<'_, H>, root: &str) -> Result<Vec<VolumeRecord>, Error> {
    Ok(cx
        .records::<SmbRecord>()?
        .into_iter()
        .filter(|(_, r)| names_equal(&r.root, root))
        .map(|(rec, _)| rec)
        .collect())
}

/// NodeUnstageVolume of a share: the link, then the mapping when no other record names its root, then the record.
async fn unstage<H: Host>(
    cx: Context<'_, H>,
    staging: &HostPath,
    record: &VolumeRecord,
    d: Deadline,
) -> Result<(), Error> {
    let volume_id = &record.volume_id;
    cx.remove_staging_link(staging, d).await?;
    let SmbRecord {
        root, remote_path, ..
    } = details(record)?;
    // The lock key of the share as stage computes it (a record of an earlier version keys non-ASCII names otherwise).
    let root = name_key(&root);
    let h = cx.calls(d);
    let _mapping = cx.object_locks().lock(&root).await;
    let others = share_users(cx, &root)?
        .into_iter()
        .filter(|r| &r.volume_id != volume_id)
        .count();
    if cx.may_remove_shared(others, &root) {
        let remote = UncPath::parse(&remote_path, "recorded remote path")?.root();
        match remove_mapping(&h, &remote).await {
            Ok(()) => info!(root = %root, "last user gone: SMB mapping removed"),
            Err(e) if e.kind == HostErrorKind::NotFound => {
                debug!(root = %root, "mapping already gone")
            }
            Err(e) => return Err(host_error(e, &remote)),
        }
    } else {
        debug!(root = %root, others, "SMB mapping kept: other staged volumes use it");
    }
    cx.store().remove_volume(volume_id).await?;
    info!(staging = %staging, "volume unstaged");
    Ok(())
}

/// NodeGetVolumeStats of a share: zero usage (no free-space query for a UNC path) and whether `path` resolves.
async fn stats<H: Host>(
    cx: Context<'_, H>,
    record: &VolumeRecord,
    path: &HostPath,
    d: Deadline,
) -> Result<VolumeStats, Error> {
    let h = cx.calls(d);
    if !h.path_exists(path).await.map_err(|e| host_error(e, path))? {
        return Err(Error::NotFound(format!(
            "volume path {path} does not exist"
        )));
    }
    let resolves = h.is_symlink(path).await.map_err(|e| host_error(e, path))?;
    let SmbRecord {
        remote_path, root, ..
    } = details(record)?;
    let (abnormal, message) = if resolves && record.phase == Phase::Staged {
        (false, format!("{remote_path} is reachable"))
    } else {
        (
            true,
            format!(
                "{remote_path} is not reachable: the SMB mapping of {root} is disconnected or was removed, or the \
                 credentials are no longer accepted; restart the pod to re-stage the volume"
            ),
        )
    };
    debug!(abnormal, "volume condition");
    Ok(VolumeStats {
        usage: Usage::default(),
        abnormal,
        message,
    })
}

/// Startup reconciliation of a staged share: a staging link that no longer resolves (after a reboot the mapping is
/// Disconnected) is removed, so kubelet's re-stage can rebuild it, and the volume is marked for re-stage.
async fn check<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    staging: &HostPath,
    d: Deadline,
) -> Result<Health, Error> {
    let h = cx.calls(d);
    let exists = h
        .path_exists(staging)
        .await
        .map_err(|e| host_error(e, staging))?;
    let resolves = exists
        && h.is_symlink(staging)
            .await
            .map_err(|e| host_error(e, staging))?;
    if resolves {
        return Ok(Health::Healthy);
    }
    if exists {
        h.rmdir(staging).await.map_err(|e| host_error(e, staging))?;
    }
    cx.mark_needs_restage(rec).await?;
    info!(volume_id = %rec.volume_id, staging = %staging, "staging link broken: removed, volume \
          marked for re-stage");
    Ok(Health::NeedsRestage)
}
