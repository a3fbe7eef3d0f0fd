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
//! | publish | the protocol's readiness check of the staging path (SMB: `IsSymlink(staging)`; iSCSI: `GetVolumeStats`) → `CreateSymlink(target → staging)`; only when that fails (something is at the target): `PathExists(target)` → `IsSymlink(target)` → `Rmdir` of kubelet's empty directory or a dangling link → `CreateSymlink` |
//! | repeated publish | `PathExists(target)` → `IsSymlink(target)` |
//! | unpublish | `Rmdir(target)` ("not found" means already gone) |
//! | unstage | `PathExists(target)` of each recorded publish target of the volume, then the protocol's unstage |
//! | unstage without a record | the protocols' [`Protocol::adopt`]; when none adopts: `Rmdir(staging)` ("not found" means nothing was there) |
//! | reconcile, per publish record | `PathExists(target)` (the record is dropped when the target is gone) |
//!
//! Publish writes its record before the link and unpublish deletes it after the link, so a crash between the two
//! converges on kubelet's retry. A first publish makes the link without asking what is at the target (kubelet makes
//! only its parent; `CreateSymlink` fails and creates nothing when something is there): when the failure shows a
//! resolving link it did not make, or a non-empty directory, the record it wrote goes again before the error.
//! Given up for that one call: a crash between that record and its removal leaves a record naming a link this
//! driver did not make (kubelet's retry then finds it "published"); a link at a pod's own target path for this
//! volume that this driver's records do not know is already a lost-state case. The staging side of the same argument is each protocol's (see `crate::smb` and
//! `crate::iscsi`).
//!
//! # The records decide what a request may touch
//!
//! A request names a volume and a path; the records say which paths are that volume's. A path that is not the named
//! volume's is never touched (an adversarial or confused caller cannot reach another volume through it):
//!
//! * **NodeUnstageVolume** of a volume staged at another path than the request's answers OK and changes nothing (the
//!   spec: "not staged to the staging_target_path → OK"); without any record, a path that is another volume's
//!   staging path or publish target is left alone (OK), else the protocols may [adopt](Protocol::adopt) what is there
//!   and unstage it, or the link is removed.
//! * **NodeUnstageVolume while the volume is still published** (a recorded publish target still exists on the host)
//!   is FAILED_PRECONDITION naming the targets: unstaging would cut the pods' paths. The spec makes the CO unpublish
//!   first; kubelet does, and its orphaned-pod cleanup unpublishes (NodeUnpublishVolume) before it unstages, so the
//!   retry converges. A recorded target that no longer exists is a stale record (kubelet removed the pod directory)
//!   and is dropped.
//! * **NodeUnpublishVolume** of a path recorded for another volume, or of a staging path, is FAILED_PRECONDITION.
//! * **NodeStageVolume / NodePublishVolume** at a path recorded in the other role (a staging path as a target, a
//!   target as a staging path) or at another volume's staging path is FAILED_PRECONDITION: both would first remove
//!   what is there (another volume's publish target at publish stays ALREADY_EXISTS).
//! * **NodeGetVolumeStats / NodeExpandVolume** look the volume up first (NOT_FOUND when it is not staged here) and
//!   then the path: it must be the volume's staging path or one of its publish targets, else NOT_FOUND (also for a
//!   path that is not even a valid kubelet path: it is certainly not one of the volume's).
//!
//! # Access modes and repeated calls
//!
//! The stage and publish records remember the capability (access mode, access type, fs type: [`AccessRecord`]). A
//! repeated NodeStageVolume or NodePublishVolume at the same path with another capability (or, for publish, another
//! `readonly`) is ALREADY_EXISTS. A publish at a *second* target path is FAILED_PRECONDITION when the volume is
//! `SINGLE_NODE_SINGLE_WRITER` (in the request, the stage or an existing publish) or when it asks for another
//! capability than the existing publishes — the spec's table for plugins with `SINGLE_NODE_MULTI_WRITER`.
//! `SINGLE_NODE_WRITER` stays publishable at several targets: kubelets without the ReadWriteOncePod feature send it
//! for ReadWriteOnce volumes shared by the pods of one node, and the spec requires plugins to keep accepting it.
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
use crate::state::{AccessRecord, PublishRecord, StateStore, VolumeRecord};

mod capacity;
mod context;
pub mod creation;
mod csi;
pub mod democratic;
pub mod inline;
pub mod outlive;
mod protocol;
mod publish;
mod reconcile;
mod request;
mod stats_cache;
#[cfg(test)]
mod tests;
mod unreferenced;
mod watch;

pub use capacity::VOLUME_LIMIT_BUDGET;
pub use context::{Calls, Context, host_error};
pub use csi::{Lifecycle, LifecycleFuture, node_capabilities};
pub use protocol::{Either, Found, Health, Protocol, StageAt};
pub use request::{
    AccessType, Capability, EPHEMERAL_KEY, ExpandRequest, PublishRequest, ReconcileReport, Secrets,
    StageRequest, StatsRequest, UnpublishRequest, UnstageRequest, Usage, VolumeStats,
    check_mount_flags, check_mount_flags_for, context_get,
};
pub(crate) use request::{access_mode_name, is_credential_key};
use request::{mount_capability, required};
use stats_cache::Invalidate;
pub use stats_cache::StatsCache;
pub use unreferenced::UnreferencedReport;
use watch::Background;
pub use watch::BackgroundSettings;

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
    stats_cache: StatsCache,
    /// `--max-volumes-per-node` (`capacity.rs`).
    volume_limit: Option<u64>,
    background: Background,
}

impl<H, P> std::fmt::Debug for VolumeManager<H, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeManager")
            .field("cfg", &self.cfg)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Who a host path belongs to, by the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// The staging path of this volume.
    Staging,
    /// A publish target of this volume.
    Target,
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
            objects: KeyedLocks::with_observer(Arc::new(observe_lock_wait)),
            secrets: None,
            stats_cache: StatsCache::default(),
            volume_limit: None,
            background: Background::default(),
        })
    }

    /// Refuse a first stage past `limit` volumes on the node (`--max-volumes-per-node`; `None` or 0: no limit). See
    /// `capacity.rs`.
    pub fn with_volume_limit(mut self, limit: Option<u64>) -> Self {
        self.volume_limit = limit.filter(|&n| n > 0);
        self
    }

    /// Cache NodeGetVolumeStats answers for `expiry` (`--vol-stats-cache-expire-in-minutes`; `None` or zero: no
    /// cache, which is also the default of a manager built without this). See `stats_cache.rs`.
    pub fn with_stats_cache(mut self, expiry: Option<std::time::Duration>) -> Self {
        self.stats_cache = StatsCache::new(expiry);
        self
    }

    /// The NodeGetVolumeStats cache.
    pub fn stats_cache(&self) -> &StatsCache {
        &self.stats_cache
    }

    /// Keep records in `store` instead (tests that stop or fail its commits).
    #[cfg(test)]
    pub(crate) fn with_store(mut self, store: StateStore) -> Self {
        self.store = store;
        self
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

    /// Locks of shared host objects (SMB share roots and servers; iSCSI targets under `iscsi-target:` keys, their LUNs'
    /// disks under `iscsi-lun:`).
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
            access: None,
        }
    }

    /// The context of a stage asked with `access` (see [`Context::staged`]).
    fn stage_context<'a>(&'a self, access: &'a AccessRecord) -> Context<'a, H> {
        Context {
            access: Some(access),
            ..self.context()
        }
    }

    /// NodeStageVolume.
    #[tracing::instrument(level = "debug", name = "stage", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn stage(&self, req: &StageRequest, d: Deadline) -> Result<(), Error> {
        required(&req.volume_id, "volume_id")?;
        required(&req.staging_target_path, "staging_target_path")?;
        let Some(cap) = req.capability.as_ref() else {
            return Err(Error::InvalidArgument(
                "volume_capability is required".to_owned(),
            ));
        };
        let staging = self
            .cfg
            .kubelet_root
            .check(&req.staging_target_path, "staging_target_path")?;
        self.background.touched(&req.volume_id);
        let _guard = self.volumes.try_lock(&req.volume_id, "NodeStageVolume")?;
        let _stats = Invalidate::around(&self.stats_cache, &req.volume_id);
        let access = cap.access();
        // A volume already staged here with another capability: ALREADY_EXISTS, before the capability itself is
        // judged (a block request for a volume staged as a mount is "incompatible", not "invalid").
        if let Some(rec) = self.store.volume(&req.volume_id)?
            && staging.is(&rec.staging_path)
            && let Some(recorded) = &rec.access
            && !recorded.same_as(&access)
        {
            return Err(Error::AlreadyExists(format!(
                "volume {:?} is already staged at {staging} with {}; the request asks for {}; unstage it first",
                req.volume_id,
                recorded.describe(),
                access.describe()
            )));
        }
        let flags = mount_capability(Some(cap))?;
        let ignored = check_mount_flags_for(flags, &req.volume_context)?;
        if !ignored.is_empty() {
            debug!(options = ?ignored, "mount options are ignored on Windows");
        }
        self.refuse_foreign_path(&req.volume_id, &staging, Owner::Staging)?;
        let vol = self.protocol.parse(req)?;
        self.check_room(&req.volume_id)?;
        let at = StageAt {
            volume_id: &req.volume_id,
            staging: &staging,
            ephemeral: false,
        };
        self.protocol
            .stage(self.stage_context(&access), at, &vol, d)
            .await?;
        self.remember_access(&req.volume_id, access).await
    }

    /// Record the capability a stage succeeded with (the volume guard is held).
    async fn remember_access(&self, volume_id: &str, access: AccessRecord) -> Result<(), Error> {
        if let Some(rec) = self.store.volume(volume_id)?
            && rec.access.as_ref() != Some(&access)
        {
            let mut rec = VolumeRecord::clone(&rec);
            rec.access = Some(access);
            self.store.put_volume(&rec).await?;
        }
        Ok(())
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
        self.background.touched(&req.volume_id);
        let _guard = self.volumes.try_lock(&req.volume_id, "NodeUnstageVolume")?;
        let _stats = Invalidate::around(&self.stats_cache, &req.volume_id);
        match self.store.volume(&req.volume_id)? {
            Some(rec) if !staging.is(&rec.staging_path) => {
                // Not staged to this path: the spec's answer is OK, and neither the recorded staging nor whatever is
                // at the requested path (possibly another volume's) may be touched.
                warn!(recorded = %rec.staging_path, requested = %staging, "NodeUnstageVolume names another path than \
                      the volume is staged at: nothing done (the volume stays staged at its recorded path)");
                Ok(())
            }
            Some(rec) => {
                self.refuse_while_published(&rec, d).await?;
                self.protocol
                    .unstage(self.context(), &staging, &rec, d)
                    .await
            }
            // Boxed: adoption (rare) would otherwise size every unstage's future.
            None => Box::pin(self.unstage_unrecorded(&req.volume_id, &staging, d)).await,
        }
    }

    /// NodeUnstageVolume without a record (the caller holds the guard): never touch another volume's path; let the
    /// protocols adopt what they can prove is this volume's; else remove the link (or empty directory) there.
    async fn unstage_unrecorded(
        &self,
        volume_id: &str,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<(), Error> {
        if let Some((other, owner)) = self.owner_of(staging)? {
            warn!(requested = %staging, other_volume = %other, role = ?owner, "NodeUnstageVolume of a volume without \
                  a record names a path recorded for another volume: nothing done");
            return Ok(());
        }
        if let Some(rec) = self.adopt(volume_id, staging, d).await? {
            return self
                .protocol
                .unstage(self.context(), staging, &rec, d)
                .await;
        }
        self.context().remove_staging_link(staging, d).await?;
        debug!("no record: nothing else to undo");
        Ok(())
    }

    /// Ask the protocols to adopt a staging object of `volume_id` at `staging` that no record describes; an adopted
    /// record is written (before anything is removed, like every record) and returned.
    async fn adopt(
        &self,
        volume_id: &str,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<Option<VolumeRecord>, Error> {
        let found = Found { volume_id, staging };
        let Some(mut rec) = self.protocol.adopt(self.context(), found, d).await? else {
            return Ok(None);
        };
        rec.volume_id = volume_id.to_owned();
        rec.staging_path = staging.to_string();
        rec.adopted = true;
        rec.ephemeral = false;
        self.store.put_volume(&rec).await?;
        info!(staging = %staging, protocol = %rec.protocol, "a staging object without a record was adopted from \
              what the host shows");
        Ok(Some(rec))
    }

    /// FAILED_PRECONDITION when the records name `path` in another role than `role` (a staging path used as a
    /// publish target or the other way round, whichever volume's), or as another volume's staging path: a stage or
    /// publish there would first remove what is at the path. (Another volume's publish target at publish is
    /// ALREADY_EXISTS, see `publish.rs`.)
    fn refuse_foreign_path(
        &self,
        volume_id: &str,
        path: &HostPath,
        role: Owner,
    ) -> Result<(), Error> {
        match self.owner_of(path)? {
            Some((owner, found))
                if found != role || (role == Owner::Staging && owner != volume_id) =>
            {
                Err(Error::FailedPrecondition(format!(
                    "{path} is the {} of volume {owner:?}; refusing to use it for volume {volume_id:?}",
                    match found {
                        Owner::Staging => "staging path",
                        Owner::Target => "publish target",
                    }
                )))
            }
            _ => Ok(()),
        }
    }

    /// FAILED_PRECONDITION while a recorded publish target of `rec`'s volume still exists on the host (unstaging
    /// would cut the pod's path); records of targets that are gone are dropped.
    async fn refuse_while_published(&self, rec: &VolumeRecord, d: Deadline) -> Result<(), Error> {
        let h = self.context().calls(d);
        let mut live = Vec::new();
        for p in self.publications_of(&rec.volume_id)? {
            let Ok(target) = self.cfg.kubelet_root.host_path(&p.target_path) else {
                continue;
            };
            if h.path_exists(&target)
                .await
                .map_err(|e| host_error(e, &target))?
            {
                live.push(target.to_string());
            } else {
                debug!(target = %target, "publish record of a target that is gone: dropped");
                self.remove_publication(&target).await?;
            }
        }
        if live.is_empty() {
            return Ok(());
        }
        Err(Error::FailedPrecondition(format!(
            "volume {:?} is still published at {}; unstaging it would cut the pods' paths. Rule: NodeUnpublishVolume \
             every target first (kubelet does; if the pod is gone, remove the target path or let kubelet's cleanup \
             unpublish it)",
            rec.volume_id,
            live.join(", ")
        )))
    }

    /// NodeGetVolumeStats.
    #[tracing::instrument(level = "debug", name = "stats", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn stats(&self, req: &StatsRequest, d: Deadline) -> Result<VolumeStats, Error> {
        required(&req.volume_id, "volume_id")?;
        required(&req.volume_path, "volume_path")?;
        self.background.touched(&req.volume_id);
        let rec = self.staged_record(&req.volume_id)?;
        let path = self.locate(&rec, &req.volume_path)?;
        // After the record checks (an unstaged volume or an unpublished path is NOT_FOUND, never a cached answer).
        let key = path.key();
        if let Some(stats) = self.stats_cache.get(&req.volume_id, &key) {
            debug!(abnormal = stats.abnormal, "volume stats from the cache");
            return Ok(stats);
        }
        let ticket = self.stats_cache.ticket();
        let stats = self.protocol.stats(self.context(), &rec, &path, d).await?;
        self.stats_cache.put(&req.volume_id, &key, ticket, &stats);
        Ok(stats)
    }

    /// NodeExpandVolume: grow the volume and return its capacity (0 when there is nothing to grow on the node).
    #[tracing::instrument(level = "debug", name = "expand", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn expand(&self, req: &ExpandRequest, d: Deadline) -> Result<i64, Error> {
        required(&req.volume_id, "volume_id")?;
        required(&req.volume_path, "volume_path")?;
        self.background.touched(&req.volume_id);
        let _guard = self.volumes.try_lock(&req.volume_id, "NodeExpandVolume")?;
        let _stats = Invalidate::around(&self.stats_cache, &req.volume_id);
        let rec = self.staged_record(&req.volume_id)?;
        let path = self.locate(&rec, &req.volume_path)?;
        self.protocol
            .expand(self.context(), &rec, &path, req, d)
            .await
    }

    /// The record of a volume the request names (NOT_FOUND without one).
    fn staged_record(&self, volume_id: &str) -> Result<Arc<VolumeRecord>, Error> {
        self.store.volume(volume_id)?.ok_or_else(|| {
            Error::NotFound(format!("volume {volume_id:?} is not staged on this node"))
        })
    }

    /// The volume's staging path or publish target that `raw` names (NOT_FOUND for any other path, valid or not).
    fn locate(&self, rec: &VolumeRecord, raw: &str) -> Result<HostPath, Error> {
        let not_found = |why: &str| {
            Error::NotFound(format!(
                "{raw:?} is not a staging or publish path of volume {:?} on this node{why}",
                rec.volume_id
            ))
        };
        let path = self
            .cfg
            .kubelet_root
            .check(raw, "volume_path")
            .map_err(|e| not_found(&format!(" ({e})")))?;
        if path.is(&rec.staging_path) {
            return Ok(path);
        }
        match self.publication(&path)? {
            Some(p) if p.volume_id == rec.volume_id => Ok(path),
            _ => Err(not_found("")),
        }
    }

    /// The publish record of `target` (also under the key earlier versions used).
    fn publication(&self, target: &HostPath) -> Result<Option<PublishRecord>, Error> {
        if let Some(p) = self.store.publication(&target.key())? {
            return Ok(Some(p));
        }
        let legacy = target.legacy_key();
        if legacy != target.key() {
            return self.store.publication(&legacy);
        }
        Ok(None)
    }

    /// Delete the publish record of `target` (under either key; both removals share one commit group).
    async fn remove_publication(&self, target: &HostPath) -> Result<(), Error> {
        let current = self.store.remove_publication(&target.key());
        let legacy = target.legacy_key();
        let old = (legacy != target.key()).then(|| self.store.remove_publication(&legacy));
        current.await?;
        if let Some(old) = old {
            old.await?;
        }
        Ok(())
    }

    /// The publish records of a volume.
    fn publications_of(&self, volume_id: &str) -> Result<Vec<PublishRecord>, Error> {
        self.store.select_publications(|p| p.volume_id == volume_id)
    }

    /// Which volume's records name `path` (as a staging path or a publish target), if any.
    fn owner_of(&self, path: &HostPath) -> Result<Option<(String, Owner)>, Error> {
        if let Some(p) = self.publication(path)? {
            return Ok(Some((p.volume_id, Owner::Target)));
        }
        Ok(self
            .store
            .first_volume(|r| path.is(&r.staging_path))?
            .map(|r| (r.volume_id, Owner::Staging)))
    }

    pub(crate) fn secret_source(&self) -> Option<&Arc<dyn SecretSource>> {
        self.secrets.as_ref()
    }
}

/// Report a wait for a shared host object's lock to the metrics, by the object's kind (the lock key's prefix: an
/// SMB share root has none).
fn observe_lock_wait(key: &str, waited: std::time::Duration) {
    if let Some(m) = crate::metrics::installed() {
        let kind = match key.split_once(':').map(|(kind, _)| kind) {
            None => "smb-share",
            Some("smb-server") => "smb-server",
            Some("iscsi-target") => "iscsi-target",
            Some("iscsi-lun") => "iscsi-lun",
            Some("iscsi-chap") => "iscsi-chap",
            Some(_) => "other",
        };
        m.observe_lock_wait(kind, waited.as_secs_f64());
    }
}
