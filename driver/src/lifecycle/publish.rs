//! NodePublishVolume and NodeUnpublishVolume: a directory link from the pod's target path to the staging path, and
//! the rules of repeated and second publishes (see "Access modes and repeated calls" in the module docs).

use tracing::{debug, info};

use super::{
    EPHEMERAL_KEY, Invalidate, Owner, Protocol, PublishRequest, UnpublishRequest, VolumeManager,
    check_mount_flags, check_mount_flags_for, context_get, host_error, inline, mount_capability,
    required,
};
use crate::error::Error;
use crate::host::{Host, HostError, HostErrorKind, HostPath};
use crate::lifecycle::context::Calls;
use crate::locks::Deadline;
use crate::state::{AccessRecord, Phase, PublishRecord, RECORD_VERSION, VolumeRecord};

#[cfg(test)]
mod tests;

/// `VolumeCapability.AccessMode.Mode.SINGLE_NODE_SINGLE_WRITER`.
const SINGLE_NODE_SINGLE_WRITER: i32 = 6;

/// How a publish's attempt to replace what is at its target ended: `Maybe` the link is there (a `CreateSymlink` whose
/// outcome is unknown: the record stays for kubelet's retry or unpublish), or `Not` (the record goes).
enum Replaced {
    Maybe(Error),
    Not(Error),
}

/// The link publish makes: `target` (the pod's path) pointing at `staging`, for `volume_id`.
pub(super) struct Link<'a> {
    pub(super) volume_id: &'a str,
    pub(super) target: &'a HostPath,
    pub(super) staging: &'a HostPath,
}

impl<H: Host, P: Protocol<H>> VolumeManager<H, P> {
    /// NodePublishVolume.
    #[tracing::instrument(level = "debug", name = "publish", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn publish(&self, req: &PublishRequest, d: Deadline) -> Result<(), Error> {
        required(&req.volume_id, "volume_id")?;
        self.background.touched(&req.volume_id);
        required(&req.target_path, "target_path")?;
        let Some(cap) = req.capability.as_ref() else {
            return Err(Error::InvalidArgument(
                "volume_capability is required".to_owned(),
            ));
        };
        let target = self
            .cfg
            .kubelet_root
            .check(&req.target_path, "target_path")?;
        if context_get(&req.volume_context, EPHEMERAL_KEY)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            check_mount_flags(mount_capability(Some(cap))?)?;
            // Boxed: the inline path (a Secret read, a private stage) would otherwise size every publish's future.
            return Box::pin(inline::publish(self, req, &target, d)).await;
        }
        if req.staging_target_path.trim().is_empty() {
            return Err(Error::FailedPrecondition(
                "staging_target_path is required: this driver stages volumes (STAGE_UNSTAGE_VOLUME)".to_owned(),
            ));
        }
        let staging = self
            .cfg
            .kubelet_root
            .check(&req.staging_target_path, "staging_target_path")?;
        let _guard = self.volumes.try_lock(&req.volume_id, "NodePublishVolume")?;
        let _stats = Invalidate::around(&self.stats_cache, &req.volume_id);
        let access = cap.access();
        // A repeated publish at this target with another capability is ALREADY_EXISTS, before the capability itself
        // is judged.
        let existing =
            self.check_target(&req.volume_id, &target, &staging, &access, req.readonly)?;
        check_mount_flags_for(mount_capability(Some(cap))?, &req.volume_context)?;
        self.refuse_foreign_path(&req.volume_id, &target, Owner::Target)?;
        // kubelet's republish (the CSIDriver's `requiresRepublish`) carries the node-publish Secret as it is now: the
        // protocol acts on it first (SMB: rotated credentials, `smb/rotate.rs`). A re-stage it made and could not
        // finish leaves the record `staging` while the volume is published: the next republish retries it.
        if let Some(rec) = self.store.volume(&req.volume_id)?
            && staging.is(&rec.staging_path)
            && (rec.phase == Phase::Staged
                || (rec.phase == Phase::Staging
                    && !self.publications_of(&req.volume_id)?.is_empty()))
        {
            self.protocol
                .republish(self.context(), &rec, req, &staging, d)
                .await?;
        }
        let rec = match self.store.volume(&req.volume_id)? {
            Some(rec) if rec.phase == Phase::Staged && staging.is(&rec.staging_path) => rec,
            Some(rec) if rec.phase == Phase::Staged => {
                return Err(Error::FailedPrecondition(format!(
                    "volume {:?} is staged at {}, not at {staging}",
                    req.volume_id, rec.staging_path
                )));
            }
            _ => {
                return Err(Error::FailedPrecondition(format!(
                    "volume {:?} is not staged on this node (NodeStageVolume has not completed)",
                    req.volume_id
                )));
            }
        };
        if existing.is_none() {
            self.protocol.check_publish(&rec, &access, req.readonly)?;
            self.check_second_target(&rec, &target, &access)?;
        }
        let link = Link {
            volume_id: &rec.volume_id,
            target: &target,
            staging: &staging,
        };
        self.link_target(link, access, req.readonly, Some(&rec), d)
            .await
    }

    /// What the records say about `target` for a publish of `volume_id`: `Some` when it is already published for it
    /// from `staging` with this capability and `readonly` (idempotent), ALREADY_EXISTS when it is published with
    /// other arguments or for another volume.
    pub(super) fn check_target(
        &self,
        volume_id: &str,
        target: &HostPath,
        staging: &HostPath,
        access: &AccessRecord,
        readonly: bool,
    ) -> Result<Option<PublishRecord>, Error> {
        let Some(p) = self.publication(target)? else {
            return Ok(None);
        };
        if p.volume_id != volume_id || !staging.is(&p.staging_path) {
            return Err(Error::AlreadyExists(format!(
                "{target} is already published from another source (volume {:?}); unpublish it first",
                p.volume_id
            )));
        }
        if p.readonly != readonly {
            return Err(Error::AlreadyExists(format!(
                "{target} is already published with readonly={}; the request asks for readonly={readonly}",
                p.readonly
            )));
        }
        if let Some(recorded) = &p.access
            && !recorded.same_as(access)
        {
            return Err(Error::AlreadyExists(format!(
                "{target} is already published with {}; the request asks for {}",
                recorded.describe(),
                access.describe()
            )));
        }
        Ok(Some(p))
    }

    /// A publish of `rec`'s volume at a target it is not published at yet: FAILED_PRECONDITION when another target
    /// exists and the volume is single-writer, or the request's capability differs from the other publishes'.
    pub(super) fn check_second_target(
        &self,
        rec: &VolumeRecord,
        target: &HostPath,
        access: &AccessRecord,
    ) -> Result<(), Error> {
        let others: Vec<PublishRecord> = self
            .publications_of(&rec.volume_id)?
            .into_iter()
            .filter(|p| !target.is(&p.target_path))
            .collect();
        let Some(first) = others.first() else {
            return Ok(());
        };
        let single = |a: Option<&AccessRecord>| {
            a.is_some_and(|a| a.access_mode == SINGLE_NODE_SINGLE_WRITER)
        };
        if single(Some(access))
            || single(rec.access.as_ref())
            || others.iter().any(|p| single(p.access.as_ref()))
        {
            return Err(Error::FailedPrecondition(format!(
                "volume {:?} is SINGLE_NODE_SINGLE_WRITER and already published at {}; it can be published at one \
                 target path at a time (unpublish it there first, or use SINGLE_NODE_MULTI_WRITER)",
                rec.volume_id, first.target_path
            )));
        }
        if let Some(p) = others
            .iter()
            .find(|p| p.access.as_ref().is_some_and(|a| !a.same_as(access)))
        {
            return Err(Error::FailedPrecondition(format!(
                "volume {:?} is published at {} with {}; a second publish must ask for the same capability, not {}",
                rec.volume_id,
                p.target_path,
                p.access
                    .as_ref()
                    .map_or_else(String::new, AccessRecord::describe),
                access.describe()
            )));
        }
        Ok(())
    }

    /// Make `target` a link to `staging` (idempotent; refuses another source and non-empty directories). The
    /// caller checked the records ([`Self::check_target`], [`Self::check_second_target`]). With the volume's record,
    /// the protocol first checks that the staging object resolves ([`Protocol::ready`]).
    pub(super) async fn link_target(
        &self,
        link: Link<'_>,
        access: AccessRecord,
        readonly: bool,
        record: Option<&crate::state::VolumeRecord>,
        d: Deadline,
    ) -> Result<(), Error> {
        let Link {
            volume_id,
            target,
            staging,
        } = link;
        let h = self.context().calls(d);
        let existing = self.publication(target)?;
        let record_of = |access| PublishRecord {
            version: RECORD_VERSION,
            volume_id: volume_id.to_owned(),
            target_path: target.to_string(),
            staging_path: staging.to_string(),
            readonly,
            access: Some(access),
        };
        if existing.is_none() {
            if let Some(rec) = record {
                self.protocol.ready(self.context(), rec, staging, d).await?;
            }
            return self
                .link_new_target(&h, target, staging, &record_of(access))
                .await;
        }
        let ours = existing
            .as_ref()
            .is_some_and(|p| p.volume_id == volume_id && staging.is(&p.staging_path));
        if h.path_exists(target)
            .await
            .map_err(|e| host_error(e, target))?
        {
            let resolves = h
                .is_symlink(target)
                .await
                .map_err(|e| host_error(e, target))?;
            match &existing {
                Some(_) if ours && resolves => {
                    debug!(target = %target, "already published: nothing to do");
                    return Ok(());
                }
                Some(p) if !ours => {
                    return Err(Error::AlreadyExists(format!(
                        "{target} is already published from another source (volume {:?}); unpublish it first",
                        p.volume_id
                    )));
                }
                _ => {}
            }
            if let Some(rec) = record {
                self.protocol.ready(self.context(), rec, staging, d).await?;
            }
            debug!(target = %target, "removing kubelet's empty directory (or a dangling link) at the target path");
            h.rmdir(target).await.map_err(|e| host_error(e, target))?;
        } else if let Some(rec) = record {
            self.protocol.ready(self.context(), rec, staging, d).await?;
        }
        self.store
            .put_publication(&target.key(), &record_of(access))
            .await?;
        match h.create_symlink(target, staging).await {
            Ok(()) => {}
            Err(e) if e.kind.is_uncertain() => return Err(host_error(e, target)),
            Err(e) => {
                // Nothing of this driver's is at the target (what was there is gone): no record may claim it.
                self.remove_publication(target).await?;
                return Err(host_error(e, target));
            }
        }
        info!(target = %target, readonly, "volume published");
        Ok(())
    }

    /// A first publish at `target` (no record names it; the caller checked the staging side): kubelet made only the
    /// target's parent, so the link is made at once, without a `PathExists` first. `CreateSymlink` fails when something
    /// is at the path, on every csi-proxy release (Go's `os.Symlink`) and the native backend, and creates nothing
    /// then; only that failure asks what is there. `record` is durable before the link, and goes again with any
    /// failure after which no link of this call's can be at the target — all of them but a last `CreateSymlink` whose
    /// outcome is unknown — so a failed publish leaves no record to block the volume's unstage.
    async fn link_new_target(
        &self,
        h: &Calls<'_, H>,
        target: &HostPath,
        staging: &HostPath,
        record: &PublishRecord,
    ) -> Result<(), Error> {
        self.store.put_publication(&target.key(), record).await?;
        let failed = match h.create_symlink(target, staging).await {
            Ok(()) => {
                info!(target = %target, readonly = record.readonly, "volume published");
                return Ok(());
            }
            Err(e) if e.kind.is_uncertain() => return Err(host_error(e, target)),
            Err(e) => e,
        };
        match self.replace_at_target(h, target, staging, failed).await {
            Ok(()) => {
                info!(target = %target, readonly = record.readonly, "volume published");
                Ok(())
            }
            Err(Replaced::Maybe(e)) => Err(e),
            Err(Replaced::Not(e)) => {
                self.remove_publication(target).await?;
                Err(e)
            }
        }
    }

    /// After a first `CreateSymlink` at `target` failed (`failed`): replace kubelet's empty directory (or a dangling
    /// link) there with the link; a resolving link this driver did not make and a non-empty directory are refused.
    async fn replace_at_target(
        &self,
        h: &Calls<'_, H>,
        target: &HostPath,
        staging: &HostPath,
        failed: HostError,
    ) -> Result<(), Replaced> {
        let not = |e| Replaced::Not(host_error(e, target));
        if !h.path_exists(target).await.map_err(not)? {
            // Nothing is there: the failure is the link's own.
            return Err(not(failed));
        }
        if h.is_symlink(target).await.map_err(not)? {
            // A link that resolves, made before this call and not by this driver (its record would be there): not
            // ours to replace, and the record just written must not claim it.
            return Err(Replaced::Not(Error::AlreadyExists(format!(
                "{target} is already a link this driver did not make; refusing to replace it"
            ))));
        }
        debug!(target = %target, "removing kubelet's empty directory (or a dangling link) at the target path");
        // A non-empty directory is never removed: still not ours, and neither is the record.
        h.rmdir(target).await.map_err(not)?;
        match h.create_symlink(target, staging).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind.is_uncertain() => Err(Replaced::Maybe(host_error(e, target))),
            Err(e) => Err(not(e)),
        }
    }

    /// NodeUnpublishVolume.
    #[tracing::instrument(level = "debug", name = "unpublish", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn unpublish(&self, req: &UnpublishRequest, d: Deadline) -> Result<(), Error> {
        required(&req.volume_id, "volume_id")?;
        self.background.touched(&req.volume_id);
        required(&req.target_path, "target_path")?;
        let target = self
            .cfg
            .kubelet_root
            .check(&req.target_path, "target_path")?;
        let _guard = self
            .volumes
            .try_lock(&req.volume_id, "NodeUnpublishVolume")?;
        let _stats = Invalidate::around(&self.stats_cache, &req.volume_id);
        match self.owner_of(&target)? {
            Some((owner, Owner::Target)) if owner != req.volume_id => {
                return Err(Error::FailedPrecondition(format!(
                    "{target} is published for volume {owner:?}, not {:?}; refusing to unpublish it",
                    req.volume_id
                )));
            }
            Some((owner, Owner::Staging)) => {
                return Err(Error::FailedPrecondition(format!(
                    "{target} is the staging path of volume {owner:?}, not a publish target; refusing to remove it \
                     (NodeUnstageVolume undoes a stage)"
                )));
            }
            _ => {}
        }
        let h = self.context().calls(d);
        // No `PathExists` first: a non-forced `Rmdir` of a missing path answers "not found" on every csi-proxy release
        // (Go's `os.Remove`: Windows errors 2/3) and on the native backend, and that already means done.
        match h.rmdir(&target).await {
            Ok(()) => info!(target = %target, "volume unpublished"),
            Err(e) if e.kind == HostErrorKind::NotFound => {
                debug!(target = %target, "target already gone")
            }
            Err(e) => return Err(host_error(e, &target)),
        }
        self.remove_publication(&target).await?;
        if let Some(rec) = self.store.volume(&req.volume_id)?
            && rec.ephemeral
            && self.publications_of(&req.volume_id)?.is_empty()
        {
            let staging = self.cfg.kubelet_root.host_path(&rec.staging_path)?;
            debug!(staging = %staging, "inline ephemeral volume: undoing its private stage");
            self.protocol
                .unstage(self.context(), &staging, &rec, d)
                .await?;
        }
        Ok(())
    }
}
