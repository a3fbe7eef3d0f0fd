//! The volume lifecycle, independent of any storage protocol: NodeStage / NodeUnstage / NodePublish /
//! NodeUnpublish / NodeGetVolumeStats / NodeExpandVolume and startup reconciliation, on top of the
//! [`Host`] port, the durable [`StateStore`] and the [`locks`](crate::locks).
//!
//! [`VolumeManager`] validates every request (ids, kubelet paths, capability, credentials in mount flags), takes the
//! per-volume guard (ABORTED on overlap), bounds every host call by the RPC's deadline, and hands the
//! protocol-specific work to a [`Protocol`] (`crate::smb`, `crate::iscsi`). What it does itself is what is the same
//! for every protocol:
//!
//! | Operation | Host calls |
//! | --- | --- |
//! | publish | `PathExists(target)` → the protocol's readiness check of the staging path (SMB: `IsSymlink(staging)`; iSCSI: `GetVolumeStats`) → `CreateSymlink(target → staging)` (`IsSymlink` + `Rmdir` of kubelet's empty directory after `PathExists` when present) |
//! | repeated publish | `PathExists(target)` → `IsSymlink(target)` |
//! | unpublish | `PathExists(target)` → `Rmdir(target)`; when already gone only `PathExists` |
//! | unstage without a record | `PathExists(staging)` → `Rmdir(staging)` when something is there |
//! | reconcile, per publish record | `PathExists(target)` (the record is dropped when the target is gone) |
//!
//! Publish writes its record before the link and unpublish deletes it after the link, so a crash between the two
//! converges on kubelet's retry. The staging side of the same argument is each protocol's (see `crate::smb` and
//! `crate::iscsi`).
//!
//! # Read-only
//!
//! A Windows directory link cannot be read-only, and csi-proxy v1 has no way to make an SMB mapping read-only. The
//! `readonly` flag (and the reader-only access modes) are recorded and compared on repeated publishes; the protection
//! itself comes from the container runtime's read-only bind mount, which kubelet requests when the pod's volumeMount
//! or the PV says `readOnly`.
//!
//! # Inline ephemeral volumes
//!
//! See [`inline`]: NodePublishVolume stages privately through the protocol, then links the target.

use std::path::Path;
use std::sync::Arc;

use tracing::{debug, info, warn};

use crate::error::Error;
use crate::host::{Host, HostPath, KubeletRoot};
use crate::locks::{Deadline, KeyedLocks, VolumeLocks};
use crate::state::{Phase, PublishRecord, RECORD_VERSION, StateStore};

mod context;
mod csi;
pub mod inline;
mod protocol;
mod request;

pub use context::{Calls, Context, host_error};
pub use csi::{Lifecycle, LifecycleFuture, node_capabilities};
pub use protocol::{Either, Health, Protocol, StageAt};
pub(crate) use request::is_credential_key;
pub use request::{
    AccessType, Capability, EPHEMERAL_KEY, ExpandRequest, PublishRequest, ReconcileReport, Secrets,
    StageRequest, StatsRequest, UnpublishRequest, UnstageRequest, Usage, VolumeStats,
    check_mount_flags, context_get,
};
use request::{mount_capability, required};

/// Where credentials of inline ephemeral volumes come from (the Kubernetes API in production).
pub trait SecretSource: Send + Sync + 'static {
    /// Read Secret `name` in `namespace`.
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Secrets, Error>> + Send + '_>>;
}

/// Static settings of the lifecycle.
#[derive(Clone, Debug)]
pub struct VolumeConfig {
    /// `--kubelet-root`.
    pub kubelet_root: KubeletRoot,
    /// `--driver-name` (names the private ephemeral staging directory).
    pub driver_name: String,
}

/// The volume lifecycle over a host `H`, staging volumes with protocol (set) `P`.
pub struct VolumeManager<H, P> {
    host: H,
    protocol: P,
    cfg: VolumeConfig,
    store: StateStore,
    volumes: VolumeLocks,
    objects: KeyedLocks,
    secrets: Option<Arc<dyn SecretSource>>,
}

impl<H, P> std::fmt::Debug for VolumeManager<H, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeManager")
            .field("cfg", &self.cfg)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl<H: Host, P: Protocol<H>> VolumeManager<H, P> {
    /// A manager over `host` staging volumes with `protocol`, keeping records in `state_dir`.
    pub fn new(host: H, protocol: P, cfg: VolumeConfig, state_dir: &Path) -> Result<Self, Error> {
        Ok(Self {
            host,
            protocol,
            cfg,
            store: StateStore::open(state_dir)?,
            volumes: VolumeLocks::default(),
            objects: KeyedLocks::default(),
            secrets: None,
        })
    }

    /// Use `source` to read the Secrets of inline ephemeral volumes.
    pub fn with_secret_source(mut self, source: Arc<dyn SecretSource>) -> Self {
        self.secrets = Some(source);
        self
    }

    /// The record store (read-only use: tests and diagnostics).
    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// The host.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// The protocol (set).
    pub fn protocol(&self) -> &P {
        &self.protocol
    }

    /// The settings.
    pub fn config(&self) -> &VolumeConfig {
        &self.cfg
    }

    /// The per-volume operation guards (public so tests can check that none stays held).
    pub fn volume_locks(&self) -> &VolumeLocks {
        &self.volumes
    }

    /// Locks of shared host objects (SMB share roots; iSCSI targets under `iscsi-target:` keys).
    pub fn object_locks(&self) -> &KeyedLocks {
        &self.objects
    }

    /// What the protocols get for one operation.
    pub fn context(&self) -> Context<'_, H> {
        Context {
            host: &self.host,
            store: &self.store,
            objects: &self.objects,
            config: &self.cfg,
        }
    }

    /// NodeStageVolume.
    #[tracing::instrument(level = "debug", name = "stage", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn stage(&self, req: &StageRequest, d: Deadline) -> Result<(), Error> {
        required(&req.volume_id, "volume_id")?;
        required(&req.staging_target_path, "staging_target_path")?;
        let flags = mount_capability(req.capability.as_ref())?;
        let staging = self
            .cfg
            .kubelet_root
            .check(&req.staging_target_path, "staging_target_path")?;
        let ignored = check_mount_flags(flags)?;
        if !ignored.is_empty() {
            debug!(options = ?ignored, "mount options are ignored on Windows");
        }
        let vol = self.protocol.parse(req)?;
        let _guard = self.volumes.try_lock(&req.volume_id, "NodeStageVolume")?;
        let at = StageAt {
            volume_id: &req.volume_id,
            staging: &staging,
            ephemeral: false,
        };
        self.protocol.stage(self.context(), at, &vol, d).await
    }

    /// NodeUnstageVolume.
    #[tracing::instrument(level = "debug", name = "unstage", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn unstage(&self, req: &UnstageRequest, d: Deadline) -> Result<(), Error> {
        required(&req.volume_id, "volume_id")?;
        required(&req.staging_target_path, "staging_target_path")?;
        let staging = self
            .cfg
            .kubelet_root
            .check(&req.staging_target_path, "staging_target_path")?;
        let _guard = self.volumes.try_lock(&req.volume_id, "NodeUnstageVolume")?;
        let record = self.store.volume(&req.volume_id)?;
        if let Some(rec) = &record
            && !rec.staging_path.eq_ignore_ascii_case(staging.as_str())
        {
            warn!(recorded = %rec.staging_path, requested = %staging, "unstage path differs from the staged path");
        }
        self.unstage_record(&staging, record.as_ref(), d).await
    }

    /// Undo a stage (the caller holds the volume guard): without a record only what is at the staging path goes.
    async fn unstage_record(
        &self,
        staging: &HostPath,
        record: Option<&crate::state::VolumeRecord>,
        d: Deadline,
    ) -> Result<(), Error> {
        match record {
            Some(rec) => self.protocol.unstage(self.context(), staging, rec, d).await,
            None => {
                self.context().remove_staging_link(staging, d).await?;
                debug!("no record: nothing else to undo");
                Ok(())
            }
        }
    }

    /// NodePublishVolume.
    #[tracing::instrument(level = "debug", name = "publish", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn publish(&self, req: &PublishRequest, d: Deadline) -> Result<(), Error> {
        required(&req.volume_id, "volume_id")?;
        required(&req.target_path, "target_path")?;
        let flags = mount_capability(req.capability.as_ref())?;
        let target = self
            .cfg
            .kubelet_root
            .check(&req.target_path, "target_path")?;
        check_mount_flags(flags)?;
        if context_get(&req.volume_context, EPHEMERAL_KEY)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return inline::publish(self, req, &target, d).await;
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
        let rec = self.store.volume(&req.volume_id)?;
        let rec = match rec {
            Some(rec)
                if rec.phase == Phase::Staged
                    && rec.staging_path.eq_ignore_ascii_case(staging.as_str()) =>
            {
                rec
            }
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
        self.link_target(
            &req.volume_id,
            &target,
            &staging,
            req.readonly,
            Some(&rec),
            d,
        )
        .await
    }

    /// Make `target` a link to `staging` (idempotent; refuses another source and non-empty directories). With the
    /// volume's record, the protocol first checks that the staging object resolves ([`Protocol::ready`]).
    async fn link_target(
        &self,
        volume_id: &str,
        target: &HostPath,
        staging: &HostPath,
        readonly: bool,
        record: Option<&crate::state::VolumeRecord>,
        d: Deadline,
    ) -> Result<(), Error> {
        let h = self.context().calls(d);
        let existing = self.store.publication(&target.key())?;
        let ours = existing.as_ref().is_some_and(|p| {
            p.volume_id == volume_id && p.staging_path.eq_ignore_ascii_case(staging.as_str())
        });
        if h.path_exists(target)
            .await
            .map_err(|e| host_error(e, target))?
        {
            let resolves = h
                .is_symlink(target)
                .await
                .map_err(|e| host_error(e, target))?;
            match &existing {
                Some(p) if ours && resolves => {
                    if p.readonly != readonly {
                        return Err(Error::AlreadyExists(format!(
                            "{target} is already published with readonly={}; the request asks for readonly={readonly}",
                            p.readonly
                        )));
                    }
                    debug!(target = %target, "already published: nothing to do");
                    return Ok(());
                }
                Some(p) if !ours => {
                    return Err(Error::AlreadyExists(format!(
                        "{target} is already published from another source (volume {:?}); unpublish it first",
                        p.volume_id
                    )));
                }
                None if resolves => {
                    return Err(Error::AlreadyExists(format!(
                        "{target} is already a link this driver did not make; refusing to replace it"
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
        self.store.put_publication(&PublishRecord {
            version: RECORD_VERSION,
            volume_id: volume_id.to_owned(),
            target_path: target.to_string(),
            staging_path: staging.to_string(),
            readonly,
        })?;
        h.create_symlink(target, staging)
            .await
            .map_err(|e| host_error(e, target))?;
        info!(target = %target, readonly, "volume published");
        Ok(())
    }

    /// NodeUnpublishVolume.
    #[tracing::instrument(level = "debug", name = "unpublish", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn unpublish(&self, req: &UnpublishRequest, d: Deadline) -> Result<(), Error> {
        required(&req.volume_id, "volume_id")?;
        required(&req.target_path, "target_path")?;
        let target = self
            .cfg
            .kubelet_root
            .check(&req.target_path, "target_path")?;
        let _guard = self
            .volumes
            .try_lock(&req.volume_id, "NodeUnpublishVolume")?;
        if let Some(p) = self.store.publication(&target.key())?
            && p.volume_id != req.volume_id
        {
            return Err(Error::FailedPrecondition(format!(
                "{target} is published for volume {:?}, not {:?}; refusing to unpublish it",
                p.volume_id, req.volume_id
            )));
        }
        let h = self.context().calls(d);
        if h.path_exists(&target)
            .await
            .map_err(|e| host_error(e, &target))?
        {
            h.rmdir(&target).await.map_err(|e| host_error(e, &target))?;
            info!(target = %target, "volume unpublished");
        } else {
            debug!(target = %target, "target already gone");
        }
        self.store.remove_publication(&target.key())?;
        if let Some(rec) = self.store.volume(&req.volume_id)?
            && rec.ephemeral
        {
            let staging = self.cfg.kubelet_root.host_path(&rec.staging_path)?;
            debug!(staging = %staging, "inline ephemeral volume: undoing its private stage");
            self.unstage_record(&staging, Some(&rec), d).await?;
        }
        Ok(())
    }

    /// NodeGetVolumeStats.
    #[tracing::instrument(level = "debug", name = "stats", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn stats(&self, req: &StatsRequest, d: Deadline) -> Result<VolumeStats, Error> {
        required(&req.volume_id, "volume_id")?;
        required(&req.volume_path, "volume_path")?;
        let path = self
            .cfg
            .kubelet_root
            .check(&req.volume_path, "volume_path")?;
        let Some(rec) = self.store.volume(&req.volume_id)? else {
            return Err(Error::NotFound(format!(
                "volume {:?} is not staged on this node",
                req.volume_id
            )));
        };
        self.protocol.stats(self.context(), &rec, &path, d).await
    }

    /// NodeExpandVolume: grow the volume and return its capacity (0 when there is nothing to grow on the node).
    #[tracing::instrument(level = "debug", name = "expand", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn expand(&self, req: &ExpandRequest, d: Deadline) -> Result<i64, Error> {
        for (v, n) in [
            (&req.volume_id, "volume_id"),
            (&req.volume_path, "volume_path"),
        ] {
            if v.trim().is_empty() {
                return Err(Error::InvalidArgument(format!("{n} is required")));
            }
        }
        let path = self
            .cfg
            .kubelet_root
            .check(&req.volume_path, "volume_path")?;
        let _guard = self.volumes.try_lock(&req.volume_id, "NodeExpandVolume")?;
        let Some(rec) = self.store.volume(&req.volume_id)? else {
            return Err(Error::NotFound(format!(
                "volume {:?} is not staged on this node",
                req.volume_id
            )));
        };
        self.protocol
            .expand(self.context(), &rec, &path, req, d)
            .await
    }

    /// Startup reconciliation: ask each staged volume's protocol whether its staging object still works (a broken
    /// one is cleaned up and the volume marked for re-stage: after a reboot it would make kubelet's re-stage fail);
    /// drop publish records whose target is gone. Logs and returns what was repaired.
    #[tracing::instrument(level = "info", name = "reconcile", skip_all)]
    pub async fn reconcile(&self, d: Deadline) -> Result<ReconcileReport, Error> {
        let mut report = ReconcileReport::default();
        for rec in self.store.volumes()? {
            report.checked += 1;
            let Ok(_guard) = self.volumes.try_lock(&rec.volume_id, "reconcile") else {
                continue;
            };
            let staging = match self.cfg.kubelet_root.host_path(&rec.staging_path) {
                Ok(p) => p,
                Err(e) => {
                    warn!(volume_id = %rec.volume_id, error = %e, "record has an invalid staging path; skipped");
                    continue;
                }
            };
            match rec.phase {
                Phase::Staged => {
                    let health = self
                        .protocol
                        .check(self.context(), &rec, &staging, d)
                        .await?;
                    if health == Health::NeedsRestage {
                        report.restage.push(rec.volume_id.clone());
                    }
                }
                Phase::Staging => report.incomplete.push(rec.volume_id.clone()),
                Phase::NeedsRestage => {}
            }
        }
        let h = self.context().calls(d);
        for p in self.store.publications()? {
            let target = match self.cfg.kubelet_root.host_path(&p.target_path) {
                Ok(t) => t,
                Err(_) => continue,
            };
            if !h
                .path_exists(&target)
                .await
                .map_err(|e| host_error(e, &target))?
            {
                self.store.remove_publication(&target.key())?;
                report.stale_publications.push(p.target_path.clone());
            }
        }
        info!(
            checked = report.checked,
            restage = ?report.restage,
            incomplete = ?report.incomplete,
            stale_publications = report.stale_publications.len(),
            "startup reconciliation finished"
        );
        Ok(report)
    }

    pub(crate) fn secret_source(&self) -> Option<&Arc<dyn SecretSource>> {
        self.secrets.as_ref()
    }
}
