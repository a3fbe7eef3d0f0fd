//! The volume lifecycle: NodeStage / NodeUnstage / NodePublish / NodeUnpublish / NodeGetVolumeStats and startup
//! reconciliation, on top of the [`Host`] port, the durable [`StateStore`] and the [`locks`](crate::locks).
//!
//! # Host-call sequences (asserted by the unit tests)
//!
//! | Operation | Host calls |
//! | --- | --- |
//! | first stage | `PathExists(staging)` → `NewSmbGlobalMapping(full, link=staging)` → `IsSymlink(staging)` (plus `Rmdir(staging)` first when kubelet left a directory there) |
//! | first stage with subDir | `PathExists` → `NewSmbGlobalMapping(root+source, link=staging)` → `Mkdir(staging\subDir)` (creates it on the share, through the link) → `Rmdir(staging)` → `NewSmbGlobalMapping(full, link=staging)` → `IsSymlink` |
//! | repeated stage | `PathExists(staging)` → `IsSymlink(staging)` |
//! | publish | `PathExists(target)` → `CreateSymlink(target → staging)` (`IsSymlink` + `Rmdir` of kubelet's empty directory in between when present) |
//! | repeated publish | `PathExists(target)` → `IsSymlink(target)` |
//! | unpublish | `PathExists(target)` → `Rmdir(target)`; when already gone only `PathExists` |
//! | unstage | `PathExists(staging)` → `Rmdir(staging)` → `RemoveSmbGlobalMapping(root)` only when no other record uses the root |
//! | stats | `PathExists(path)` → `IsSymlink(path)` |
//!
//! Why the subDir dance: csi-proxy's `Mkdir` only accepts paths under the kubelet root and `CreateSymlink` cannot
//! point at a UNC path, so the only way to create a directory on the share is through a link that
//! `NewSmbGlobalMapping` made. The staging path itself serves as that temporary link (it is ours, and a crash
//! mid-dance is repaired by the next stage, which always rebuilds a link it did not finish).
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
//! * publish writes its record before the link and unpublish deletes it after the link, with the same argument.
//!
//! A definite stage failure (e.g. 1219, logon failure, share not found) rolls back what this call created and deletes
//! a fresh record, because kubelet treats such an error as final and will not call NodeUnstage. An uncertain failure
//! (deadline, csi-proxy unavailable) keeps the record: kubelet retries or unstages.
//!
//! # Read-only
//!
//! A Windows directory link cannot be read-only, and csi-proxy v1 has no way to make an SMB mapping read-only. The
//! `readonly` flag (and the reader-only access modes) are recorded and compared on repeated publishes; the protection
//! itself comes from the container runtime's read-only bind mount, which kubelet requests when the pod's volumeMount
//! or the PV says `readOnly`.
//!
//! # Stats
//!
//! csi-proxy v1 has no free-space query for a UNC path, so SMB usage is reported as one `BYTES` entry with zeros
//! (kubelet requires a usage entry). The volume condition is what can be known: abnormal when the volume path no
//! longer resolves through the mapping.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use tracing::{debug, info, warn};

use crate::error::Error;
use crate::host::{Host, HostError, HostErrorKind, HostOp, HostResult};
use crate::host::{HostPath, KubeletRoot};
use crate::host::{SmbCredential, UncPath};
use crate::locks::{Deadline, KeyedGuard, KeyedLocks, VolumeLocks};
use crate::smb::{self, Secrets, SmbVolume};
use crate::state::{Phase, Protocol, PublishRecord, RECORD_VERSION, StateStore, VolumeRecord};

/// How a volume is accessed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessType {
    /// A filesystem mount (here: a directory link).
    Mount {
        /// `fs_type` (ignored for SMB).
        fs_type: String,
        /// Mount flags (credentials refused; the rest is ignored on Windows).
        mount_flags: Vec<String>,
    },
    /// A raw block device: refused, Windows containers have none.
    Block,
}

/// A CSI volume capability: access type plus the access mode (`csi.v1` enum value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capability {
    /// Access type.
    pub access_type: AccessType,
    /// `VolumeCapability.AccessMode.Mode` as its wire value.
    pub access_mode: i32,
}

/// NodeStageVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct StageRequest {
    /// Volume id.
    pub volume_id: String,
    /// Staging path as kubelet sent it.
    pub staging_target_path: String,
    /// Capability (required).
    pub capability: Option<Capability>,
    /// Volume attributes.
    pub volume_context: BTreeMap<String, String>,
    /// Node-stage secrets (redacted in `Debug`).
    pub secrets: Secrets,
}

/// NodeUnstageVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct UnstageRequest {
    /// Volume id.
    pub volume_id: String,
    /// Staging path.
    pub staging_target_path: String,
}

/// NodePublishVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct PublishRequest {
    /// Volume id.
    pub volume_id: String,
    /// Staging path (required: the driver has STAGE_UNSTAGE_VOLUME), empty for inline ephemeral volumes.
    pub staging_target_path: String,
    /// Target path.
    pub target_path: String,
    /// Capability (required).
    pub capability: Option<Capability>,
    /// Read-only publish.
    pub readonly: bool,
    /// Volume attributes.
    pub volume_context: BTreeMap<String, String>,
    /// Node-publish secrets (redacted in `Debug`).
    pub secrets: Secrets,
}

/// NodeUnpublishVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct UnpublishRequest {
    /// Volume id.
    pub volume_id: String,
    /// Target path.
    pub target_path: String,
}

/// NodeGetVolumeStats's inputs.
#[derive(Clone, Debug, Default)]
pub struct StatsRequest {
    /// Volume id.
    pub volume_id: String,
    /// A path where the volume is published or staged.
    pub volume_path: String,
}

/// Byte usage (zeros when unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Total bytes.
    pub total: i64,
    /// Available bytes.
    pub available: i64,
    /// Used bytes.
    pub used: i64,
}

/// NodeGetVolumeStats's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeStats {
    /// Byte usage.
    pub usage: Usage,
    /// Whether the volume is abnormal (VOLUME_CONDITION).
    pub abnormal: bool,
    /// The condition message.
    pub message: String,
}

/// What startup reconciliation found and repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Volume records examined.
    pub checked: usize,
    /// Volumes whose staging link no longer resolved: link removed, marked for re-stage.
    pub restage: Vec<String>,
    /// Volumes whose stage never completed (left for kubelet's retry or unstage).
    pub incomplete: Vec<String>,
    /// Publish records whose target no longer exists (deleted).
    pub stale_publications: Vec<String>,
}

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

/// The volume lifecycle over a host `H`.
pub struct VolumeManager<H> {
    host: H,
    cfg: VolumeConfig,
    store: StateStore,
    volumes: VolumeLocks,
    mappings: KeyedLocks,
    secrets: Option<Arc<dyn SecretSource>>,
}

impl<H> std::fmt::Debug for VolumeManager<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeManager")
            .field("cfg", &self.cfg)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Host calls bounded by the deadline, each logged at debug level.
struct Calls<'a, H> {
    host: &'a H,
    d: Deadline,
}

impl<H: Host> Calls<'_, H> {
    async fn run<T>(
        &self,
        op: HostOp,
        subject: &(dyn Display + Sync),
        fut: impl Future<Output = HostResult<T>>,
    ) -> HostResult<T>
    where
        T: std::fmt::Debug,
    {
        let result = if self.d.remaining().is_zero() {
            // Never start a host call after the deadline: its outcome could not be reported anyway.
            Err(HostError::new(
                op,
                HostErrorKind::DeadlineExceeded,
                "was not started: the request deadline had passed",
            ))
        } else {
            match tokio::time::timeout_at(self.d.instant(), fut).await {
                Ok(r) => r,
                Err(_) => Err(HostError::new(
                    op,
                    HostErrorKind::DeadlineExceeded,
                    "did not finish before the request deadline",
                )),
            }
        };
        match &result {
            Ok(v) => debug!(op = op.name(), subject = %subject, result = ?v, "host call"),
            Err(e) => {
                debug!(op = op.name(), subject = %subject, kind = ?e.kind, error = %e.message, "host call failed")
            }
        }
        result
    }

    async fn path_exists(&self, p: &HostPath) -> HostResult<bool> {
        self.run(HostOp::PathExists, p, self.host.path_exists(p, self.d))
            .await
    }
    async fn mkdir(&self, p: &HostPath) -> HostResult<()> {
        self.run(HostOp::Mkdir, p, self.host.mkdir(p, self.d)).await
    }
    async fn rmdir(&self, p: &HostPath) -> HostResult<()> {
        // Never forced: removes a link or an empty directory, never data.
        self.run(HostOp::Rmdir, p, self.host.rmdir(p, false, self.d))
            .await
    }
    async fn create_symlink(&self, link: &HostPath, to: &HostPath) -> HostResult<()> {
        self.run(
            HostOp::CreateSymlink,
            link,
            self.host.create_symlink(link, to, self.d),
        )
        .await
    }
    async fn is_symlink(&self, p: &HostPath) -> HostResult<bool> {
        self.run(HostOp::IsSymlink, p, self.host.is_symlink(p, self.d))
            .await
    }
    async fn new_mapping(
        &self,
        remote: &UncPath,
        link: &HostPath,
        cred: Option<&SmbCredential>,
    ) -> HostResult<()> {
        self.run(
            HostOp::NewSmbGlobalMapping,
            remote,
            self.host
                .new_smb_global_mapping(remote, Some(link), cred, self.d),
        )
        .await
    }
    /// `NewSmbGlobalMapping`, repairing once when a stale (e.g. Disconnected) mapping blocks the create: csi-proxy
    /// treats a non-OK mapping as absent and tries to create over it, which Windows may refuse.
    async fn map_repairing(
        &self,
        remote: &UncPath,
        link: &HostPath,
        cred: Option<&SmbCredential>,
    ) -> HostResult<()> {
        match self.new_mapping(remote, link, cred).await {
            Err(e) if e.kind == HostErrorKind::StaleMapping => {
                info!(root = %remote.root(), "a stale mapping blocks the new one: removing it and retrying once");
                match self.remove_mapping(&remote.root()).await {
                    Ok(()) => {}
                    Err(e) if e.kind == HostErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                self.new_mapping(remote, link, cred).await
            }
            other => other,
        }
    }

    async fn remove_mapping(&self, remote: &UncPath) -> HostResult<()> {
        self.run(
            HostOp::RemoveSmbGlobalMapping,
            remote,
            self.host.remove_smb_global_mapping(remote, self.d),
        )
        .await
    }
}

/// `NewSmbGlobalMapping` under a share's mapping lock. Under the shared side only the plain call runs (it adds a link
/// to the existing mapping); a repair (remove + re-create) changes the mapping under other users, so it first upgrades
/// to the exclusive side and then runs the full repairing sequence afresh (another caller may have repaired it).
async fn map_locked<H: Host>(
    h: &Calls<'_, H>,
    guard: &mut KeyedGuard,
    remote: &UncPath,
    link: &HostPath,
    cred: Option<&SmbCredential>,
) -> HostResult<()> {
    if guard.is_shared() {
        match h.new_mapping(remote, link, cred).await {
            Err(e) if e.kind == HostErrorKind::StaleMapping => {
                info!(root = %remote.root(), "the mapping needs repair: taking the exclusive mapping lock");
                guard.upgrade().await;
            }
            other => return other,
        }
    }
    h.map_repairing(remote, link, cred).await
}

/// Turn a host failure into the driver error kubelet and the operator see. `subject` is the path or share involved.
pub fn host_error(err: HostError, subject: &dyn Display) -> Error {
    let HostError { op, kind, message } = err;
    match kind {
        HostErrorKind::Unavailable => Error::Unavailable(format!(
            "csi-proxy did not answer {op} ({message}); check that the csi-proxy service is running on the node"
        )),
        HostErrorKind::DeadlineExceeded => Error::DeadlineExceeded(format!(
            "{op} on {subject} {message}; the operation is safe to retry"
        )),
        HostErrorKind::MultipleConnections => Error::FailedPrecondition(format!(
            "the SMB server of {subject} is already mapped on this node under another user name (Windows error \
             1219). Windows allows one user per server per node: use the same credentials for every volume on this \
             server, or remove the other mapping on the node (Remove-SmbGlobalMapping)"
        )),
        HostErrorKind::NetworkPathNotFound => Error::FailedPrecondition(format!(
            "the SMB server of {subject} was not found from the node (Windows error 53); check that the name resolves \
             on the Windows host (cluster DNS names usually do not) and that port 445 is reachable"
        )),
        HostErrorKind::NetworkNameNotFound => Error::FailedPrecondition(format!(
            "the share {subject} does not exist on its server (Windows error 67); check the volume's source"
        )),
        HostErrorKind::LogonFailure => Error::FailedPrecondition(format!(
            "the server rejected the credentials for {subject} (Windows error 1326/86); check username, password and \
             domain in the node-stage secret"
        )),
        HostErrorKind::AccessDenied => Error::FailedPrecondition(format!(
            "access to {subject} was denied on the host ({op}: {message})"
        )),
        HostErrorKind::StaleMapping => Error::FailedPrecondition(format!(
            "a stale SMB mapping for {subject} blocks a new one and could not be replaced ({message}); remove it on the \
             node with Remove-SmbGlobalMapping"
        )),
        HostErrorKind::NotEmpty => Error::FailedPrecondition(format!(
            "{subject} is a non-empty directory; refusing to replace it (remove its contents or fix the path)"
        )),
        HostErrorKind::NotFound
        | HostErrorKind::AlreadyExists
        | HostErrorKind::InvalidPath
        | HostErrorKind::Other => Error::Internal(format!("{op} on {subject} failed: {message}")),
    }
}

fn required(value: &str, name: &str) -> Result<(), Error> {
    if value.trim().is_empty() {
        return Err(Error::InvalidArgument(format!("{name} is required")));
    }
    Ok(())
}

/// Validate the capability: present, and not block.
fn mount_capability(cap: Option<&Capability>) -> Result<&[String], Error> {
    match cap {
        None => Err(Error::InvalidArgument("volume_capability is required".to_owned())),
        Some(Capability { access_type: AccessType::Block, .. }) => Err(Error::InvalidArgument(
            "block access type is not supported: Windows containers cannot use raw block devices; use a mount volume"
                .to_owned(),
        )),
        Some(Capability { access_type: AccessType::Mount { mount_flags, .. }, .. }) => Ok(mount_flags),
    }
}

fn smb_protocol(vol: &SmbVolume) -> Protocol {
    Protocol::Smb {
        root: vol.source.root_key(),
        remote_path: vol.full_path().to_string(),
        principal: vol.principal().map(str::to_owned),
    }
}

/// Whether two records describe the same staged volume (principal excluded: credentials may rotate).
fn same_volume(a: &Protocol, b: &Protocol) -> bool {
    match (a, b) {
        (
            Protocol::Smb {
                root: r1,
                remote_path: p1,
                ..
            },
            Protocol::Smb {
                root: r2,
                remote_path: p2,
                ..
            },
        ) => r1 == r2 && p1.eq_ignore_ascii_case(p2),
        _ => false,
    }
}

/// The context key that marks an inline ephemeral volume.
pub const EPHEMERAL_KEY: &str = "csi.storage.k8s.io/ephemeral";

impl<H: Host> VolumeManager<H> {
    /// A manager over `host`, keeping records in `state_dir`.
    pub fn new(host: H, cfg: VolumeConfig, state_dir: &Path) -> Result<Self, Error> {
        Ok(Self {
            host,
            cfg,
            store: StateStore::open(state_dir)?,
            volumes: VolumeLocks::default(),
            mappings: KeyedLocks::default(),
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

    /// The settings.
    pub fn config(&self) -> &VolumeConfig {
        &self.cfg
    }

    fn calls(&self, d: Deadline) -> Calls<'_, H> {
        Calls {
            host: &self.host,
            d,
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
        let ignored = smb::check_mount_flags(flags)?;
        if !ignored.is_empty() {
            debug!(options = ?ignored, "mount options are ignored on Windows");
        }
        if crate::iscsi::is_iscsi(&req.volume_context) {
            return self.stage_iscsi_request(req, &staging, d).await;
        }
        let vol = smb::parse_volume(&req.volume_context, &req.secrets)?;
        let _guard = self.volumes.try_lock(&req.volume_id, "NodeStageVolume")?;
        self.stage_smb(&req.volume_id, &staging, &vol, false, d)
            .await
    }

    /// Refuse up front what Windows would refuse with 1219: another staged volume on the same server under another
    /// principal (a second principal on the same root would otherwise silently reuse the first one's mapping).
    fn check_principal(&self, volume_id: &str, vol: &SmbVolume) -> Result<(), Error> {
        let server = format!("\\\\{}\\", vol.source.server_key());
        let mine = vol.principal().unwrap_or("");
        for rec in self.store.volumes()? {
            if rec.volume_id == volume_id {
                continue;
            }
            let Protocol::Smb {
                root, principal, ..
            } = &rec.protocol
            else {
                continue;
            };
            let theirs = principal.as_deref().unwrap_or("");
            if root.starts_with(&server) && !theirs.eq_ignore_ascii_case(mine) {
                let theirs = if theirs.is_empty() {
                    "(no credential)"
                } else {
                    theirs
                };
                return Err(Error::FailedPrecondition(format!(
                    "SMB server {} is already mapped on this node under principal {theirs} (volume {:?}); Windows \
                     allows one user per server per node (error 1219). Use the same credentials for every volume on \
                     {}, or unstage the other volume first",
                    vol.source.server(),
                    rec.volume_id,
                    vol.source.server()
                )));
            }
        }
        Ok(())
    }

    pub(crate) async fn stage_smb(
        &self,
        volume_id: &str,
        staging: &HostPath,
        vol: &SmbVolume,
        ephemeral: bool,
        d: Deadline,
    ) -> Result<(), Error> {
        let h = self.calls(d);
        let wanted = smb_protocol(vol);
        let existing = self.store.volume(volume_id)?;
        if let Some(rec) = &existing
            && (!same_volume(&rec.protocol, &wanted)
                || !rec.staging_path.eq_ignore_ascii_case(staging.as_str()))
        {
            return Err(Error::AlreadyExists(format!(
                "volume {volume_id:?} is already staged at {} from another source or path; unstage it first",
                rec.staging_path
            )));
        }
        self.check_principal(volume_id, vol)?;

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
                if rec.protocol != wanted {
                    // Same share, new principal name (rotated credentials): keep the record truthful.
                    self.store.put_volume(&VolumeRecord {
                        protocol: wanted,
                        ..rec.clone()
                    })?;
                }
                return Ok(());
            }
            info!(staging = %staging, "staging link no longer resolves: re-staging");
        }

        // Intent first: from here on the record counts as a user of the mapping.
        let fresh = existing.is_none();
        let record = VolumeRecord {
            version: RECORD_VERSION,
            volume_id: volume_id.to_owned(),
            phase: Phase::Staging,
            staging_path: staging.to_string(),
            ephemeral,
            protocol: wanted,
        };
        self.store.put_volume(&record)?;
        debug!(root = %vol.source.root(), fresh, "stage record written");

        let root = vol.source.root_key();
        let mut mapping = self.lock_mapping(volume_id, &root).await?;
        let mut mapped = false;
        // Whether a link this call made is at the staging path (the only thing a rollback may remove there).
        let mut link_ours = false;
        let result = async {
            if exists {
                debug!(staging = %staging, "removing what is at the staging path (kubelet's directory or an old link)");
                h.rmdir(staging).await.map_err(|e| host_error(e, staging))?;
            }
            if !vol.sub_dir.is_empty() {
                let sub = staging.join(&vol.sub_dir.join("\\"), &self.cfg.kubelet_root)?;
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
                self.store.put_volume(&VolumeRecord {
                    phase: Phase::Staged,
                    ..record
                })?;
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
                    && self
                        .store
                        .smb_users(&root)?
                        .iter()
                        .all(|r| r.volume_id == volume_id)
                {
                    match h.remove_mapping(&vol.source.root()).await {
                        Ok(()) => {}
                        Err(e) if e.kind == HostErrorKind::NotFound => {}
                        Err(e) => {
                            warn!(error = %e, "rollback: cannot remove the mapping; keeping the record");
                            return Err(err);
                        }
                    }
                }
                self.store.remove_volume(volume_id)?;
                Err(err)
            }
            Err(err) => Err(err),
        }
    }

    /// Lock a share's mapping for a stage of `volume_id`: the shared side when another volume is already Staged on
    /// the share (the mapping exists and only needs a link, so stages of many volumes on one share overlap), the
    /// exclusive side otherwise (this stage may create or repair the mapping). Unstage and every mapping removal take
    /// the exclusive side, so a mapping is never removed while a stage holds either side.
    async fn lock_mapping(&self, volume_id: &str, root: &str) -> Result<KeyedGuard, Error> {
        let other_staged = || -> Result<bool, Error> {
            Ok(self
                .store
                .smb_users(root)?
                .iter()
                .any(|r| r.volume_id != volume_id && r.phase == Phase::Staged))
        };
        if !other_staged()? {
            let guard = self.mappings.lock(root).await;
            if !other_staged()? {
                return Ok(guard);
            }
            // Stages that queued together as first users: one created the mapping while this one waited, so this
            // one only adds a link. Release the exclusive side (the next queued first user re-checks the same way)
            // and continue under the shared side.
            debug!(root = %root, "another volume staged meanwhile: taking the shared mapping lock");
            drop(guard);
        }
        let mut guard = self.mappings.lock_shared(root).await;
        // The other users may have been unstaged (and the mapping removed) while this call waited: re-check under
        // the lock, where they can no longer go.
        if !other_staged()? {
            debug!(root = %root, "no other staged user any more: taking the exclusive mapping lock");
            guard.upgrade().await;
        }
        Ok(guard)
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
        if let Some(rec) = &record
            && let Protocol::Iscsi(r) = &rec.protocol
        {
            return self.unstage_iscsi(&req.volume_id, &staging, r, d).await;
        }
        self.unstage_inner(&req.volume_id, &staging, record, d)
            .await
    }

    async fn unstage_inner(
        &self,
        volume_id: &str,
        staging: &HostPath,
        record: Option<VolumeRecord>,
        d: Deadline,
    ) -> Result<(), Error> {
        let h = self.calls(d);
        if h.path_exists(staging)
            .await
            .map_err(|e| host_error(e, staging))?
        {
            h.rmdir(staging).await.map_err(|e| host_error(e, staging))?;
            debug!(staging = %staging, "staging link removed");
        }
        let Some(record) = record else {
            debug!("no record: nothing else to undo");
            return Ok(());
        };
        let Protocol::Smb {
            root, remote_path, ..
        } = &record.protocol
        else {
            return Err(Error::Internal(format!(
                "volume {volume_id:?} is not an SMB volume; refusing to unstage it as one"
            )));
        };
        let _mapping = self.mappings.lock(root).await;
        let others = self
            .store
            .smb_users(root)?
            .into_iter()
            .filter(|r| r.volume_id != volume_id)
            .count();
        if others == 0 {
            let remote = UncPath::parse(remote_path, "recorded remote path")?.root();
            match h.remove_mapping(&remote).await {
                Ok(()) => info!(root = %root, "last user gone: SMB mapping removed"),
                Err(e) if e.kind == HostErrorKind::NotFound => {
                    debug!(root = %root, "mapping already gone")
                }
                Err(e) => return Err(host_error(e, &remote)),
            }
        } else {
            debug!(root = %root, others, "SMB mapping kept: other staged volumes use it");
        }
        self.store.remove_volume(volume_id)?;
        info!(staging = %staging, "volume unstaged");
        Ok(())
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
        smb::check_mount_flags(flags)?;
        if smb::context_get(&req.volume_context, EPHEMERAL_KEY)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return self.publish_ephemeral(req, &target, d).await;
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
        match rec {
            Some(rec)
                if rec.phase == Phase::Staged
                    && rec.staging_path.eq_ignore_ascii_case(staging.as_str()) => {}
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
        }
        self.link_target(&req.volume_id, &target, &staging, req.readonly, d)
            .await
    }

    /// Make `target` a link to `staging` (idempotent; refuses another source and non-empty directories).
    pub(crate) async fn link_target(
        &self,
        volume_id: &str,
        target: &HostPath,
        staging: &HostPath,
        readonly: bool,
        d: Deadline,
    ) -> Result<(), Error> {
        let h = self.calls(d);
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
            debug!(target = %target, "removing kubelet's empty directory (or a dangling link) at the target path");
            h.rmdir(target).await.map_err(|e| host_error(e, target))?;
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
        let h = self.calls(d);
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
            self.unstage_inner(&req.volume_id, &staging, Some(rec), d)
                .await?;
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
        if let Protocol::Iscsi(r) = &rec.protocol {
            return self.stats_iscsi(&rec, r, &path, d).await;
        }
        let h = self.calls(d);
        if !h
            .path_exists(&path)
            .await
            .map_err(|e| host_error(e, &path))?
        {
            return Err(Error::NotFound(format!(
                "volume path {path} does not exist"
            )));
        }
        let resolves = h
            .is_symlink(&path)
            .await
            .map_err(|e| host_error(e, &path))?;
        let Protocol::Smb {
            remote_path, root, ..
        } = &rec.protocol
        else {
            return Err(Error::Internal("not an SMB volume".to_owned()));
        };
        let (abnormal, message) = if resolves && rec.phase == Phase::Staged {
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

    /// Startup reconciliation: compare the records with the host, remove staging links that no longer resolve (after a
    /// reboot they would make kubelet's re-stage fail) and mark those volumes for re-stage; drop publish records whose
    /// target is gone. Logs and returns what was repaired.
    #[tracing::instrument(level = "info", name = "reconcile", skip_all)]
    pub async fn reconcile(&self, d: Deadline) -> Result<ReconcileReport, Error> {
        let h = self.calls(d);
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
                Phase::Staged if matches!(rec.protocol, Protocol::Iscsi(_)) => {
                    if self.reconcile_iscsi(&rec, &staging, d).await? {
                        report.restage.push(rec.volume_id.clone());
                    }
                }
                Phase::Staged => {
                    let exists = h
                        .path_exists(&staging)
                        .await
                        .map_err(|e| host_error(e, &staging))?;
                    let resolves = exists
                        && h.is_symlink(&staging)
                            .await
                            .map_err(|e| host_error(e, &staging))?;
                    if !resolves {
                        if exists {
                            h.rmdir(&staging)
                                .await
                                .map_err(|e| host_error(e, &staging))?;
                        }
                        self.store.put_volume(&VolumeRecord {
                            phase: Phase::NeedsRestage,
                            ..rec.clone()
                        })?;
                        info!(volume_id = %rec.volume_id, staging = %staging, "staging link broken: removed, volume \
                              marked for re-stage");
                        report.restage.push(rec.volume_id.clone());
                    }
                }
                Phase::Staging => report.incomplete.push(rec.volume_id.clone()),
                Phase::NeedsRestage => {}
            }
        }
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

    async fn publish_ephemeral(
        &self,
        req: &PublishRequest,
        target: &HostPath,
        d: Deadline,
    ) -> Result<(), Error> {
        crate::ephemeral::publish(self, req, target, d).await
    }

    pub(crate) fn secret_source(&self) -> Option<&Arc<dyn SecretSource>> {
        self.secrets.as_ref()
    }

    /// The per-volume operation guards (public so tests can check that none stays held).
    pub fn volume_locks(&self) -> &VolumeLocks {
        &self.volumes
    }

    /// Locks of shared host objects (SMB share roots; iSCSI targets under `iscsi-target:` keys).
    pub fn object_locks(&self) -> &KeyedLocks {
        &self.mappings
    }

    pub(crate) async fn ensure_dir(&self, dir: &HostPath, d: Deadline) -> Result<(), Error> {
        self.calls(d)
            .mkdir(dir)
            .await
            .map_err(|e| host_error(e, dir))
    }
}

/// A boxed, sendable future of a lifecycle result.
pub type LifecycleFuture<'a, T> =
    std::pin::Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// The volume lifecycle as the Node service sees it: CSI requests in, CSI responses out. Object-safe so the Node
/// service does not need to know the host type.
pub trait Lifecycle: Send + Sync + std::fmt::Debug {
    /// NodeStageVolume.
    fn stage_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeStageVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeStageVolumeResponse>;
    /// NodeUnstageVolume.
    fn unstage_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeUnstageVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeUnstageVolumeResponse>;
    /// NodePublishVolume.
    fn publish_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodePublishVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodePublishVolumeResponse>;
    /// NodeUnpublishVolume.
    fn unpublish_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeUnpublishVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeUnpublishVolumeResponse>;
    /// NodeGetVolumeStats.
    fn volume_stats<'a>(
        &'a self,
        req: &'a csi::v1::NodeGetVolumeStatsRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeGetVolumeStatsResponse>;
    /// NodeExpandVolume (UNIMPLEMENTED unless the lifecycle overrides it).
    fn expand_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeExpandVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeExpandVolumeResponse> {
        let _ = (req, d);
        Box::pin(async { Err(Error::Unimplemented("NodeExpandVolume")) })
    }
    /// The Node capabilities this lifecycle implements.
    fn capabilities(&self) -> Vec<csi::v1::NodeServiceCapability>;
}

/// Convert a CSI capability; a capability without an access type is invalid.
fn capability(cap: Option<&csi::v1::VolumeCapability>) -> Result<Option<Capability>, Error> {
    use csi::v1::volume_capability::AccessType as Csi;
    let Some(cap) = cap else { return Ok(None) };
    let access_type = match &cap.access_type {
        Some(Csi::Mount(m)) => AccessType::Mount {
            fs_type: m.fs_type.clone(),
            mount_flags: m.mount_flags.clone(),
        },
        Some(Csi::Block(_)) => AccessType::Block,
        None => {
            return Err(Error::InvalidArgument(
                "volume_capability.access_type is required (mount or block)".to_owned(),
            ));
        }
    };
    Ok(Some(Capability {
        access_type,
        access_mode: cap.access_mode.map_or(0, |m| m.mode),
    }))
}

fn sorted(map: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

impl TryFrom<&csi::v1::NodeStageVolumeRequest> for StageRequest {
    type Error = Error;
    fn try_from(r: &csi::v1::NodeStageVolumeRequest) -> Result<Self, Error> {
        Ok(Self {
            volume_id: r.volume_id.clone(),
            staging_target_path: r.staging_target_path.clone(),
            capability: capability(r.volume_capability.as_ref())?,
            volume_context: sorted(&r.volume_context),
            secrets: Secrets::new(r.secrets.iter().map(|(k, v)| (k.clone(), v.clone()))),
        })
    }
}

impl TryFrom<&csi::v1::NodePublishVolumeRequest> for PublishRequest {
    type Error = Error;
    fn try_from(r: &csi::v1::NodePublishVolumeRequest) -> Result<Self, Error> {
        Ok(Self {
            volume_id: r.volume_id.clone(),
            staging_target_path: r.staging_target_path.clone(),
            target_path: r.target_path.clone(),
            capability: capability(r.volume_capability.as_ref())?,
            readonly: r.readonly,
            volume_context: sorted(&r.volume_context),
            secrets: Secrets::new(r.secrets.iter().map(|(k, v)| (k.clone(), v.clone()))),
        })
    }
}

impl From<VolumeStats> for csi::v1::NodeGetVolumeStatsResponse {
    fn from(s: VolumeStats) -> Self {
        Self {
            usage: vec![csi::v1::VolumeUsage {
                available: s.usage.available,
                total: s.usage.total,
                used: s.usage.used,
                unit: csi::v1::volume_usage::Unit::Bytes as i32,
            }],
            volume_condition: Some(csi::v1::VolumeCondition {
                abnormal: s.abnormal,
                message: s.message,
            }),
        }
    }
}

/// The Node capabilities the lifecycle implements.
pub fn node_capabilities() -> Vec<csi::v1::NodeServiceCapability> {
    use csi::v1::node_service_capability::rpc::Type;
    use csi::v1::node_service_capability::{Rpc, Type as Cap};
    [
        Type::StageUnstageVolume,
        Type::GetVolumeStats,
        Type::VolumeCondition,
        Type::SingleNodeMultiWriter,
        Type::ExpandVolume,
    ]
    .into_iter()
    .map(|t| csi::v1::NodeServiceCapability {
        r#type: Some(Cap::Rpc(Rpc { r#type: t as i32 })),
    })
    .collect()
}

impl<H: Host> Lifecycle for VolumeManager<H> {
    fn stage_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeStageVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeStageVolumeResponse> {
        Box::pin(async move {
            self.stage(&StageRequest::try_from(req)?, d).await?;
            Ok(csi::v1::NodeStageVolumeResponse {})
        })
    }

    fn unstage_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeUnstageVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeUnstageVolumeResponse> {
        Box::pin(async move {
            let r = UnstageRequest {
                volume_id: req.volume_id.clone(),
                staging_target_path: req.staging_target_path.clone(),
            };
            self.unstage(&r, d).await?;
            Ok(csi::v1::NodeUnstageVolumeResponse {})
        })
    }

    fn publish_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodePublishVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodePublishVolumeResponse> {
        Box::pin(async move {
            self.publish(&PublishRequest::try_from(req)?, d).await?;
            Ok(csi::v1::NodePublishVolumeResponse {})
        })
    }

    fn unpublish_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeUnpublishVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeUnpublishVolumeResponse> {
        Box::pin(async move {
            let r = UnpublishRequest {
                volume_id: req.volume_id.clone(),
                target_path: req.target_path.clone(),
            };
            self.unpublish(&r, d).await?;
            Ok(csi::v1::NodeUnpublishVolumeResponse {})
        })
    }

    fn volume_stats<'a>(
        &'a self,
        req: &'a csi::v1::NodeGetVolumeStatsRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeGetVolumeStatsResponse> {
        Box::pin(async move {
            let r = StatsRequest {
                volume_id: req.volume_id.clone(),
                volume_path: req.volume_path.clone(),
            };
            Ok(self.stats(&r, d).await?.into())
        })
    }

    fn expand_volume<'a>(
        &'a self,
        req: &'a csi::v1::NodeExpandVolumeRequest,
        d: Deadline,
    ) -> LifecycleFuture<'a, csi::v1::NodeExpandVolumeResponse> {
        Box::pin(async move {
            let capacity_bytes = self
                .expand(&crate::iscsi::ExpandRequest::from(req), d)
                .await?;
            Ok(csi::v1::NodeExpandVolumeResponse { capacity_bytes })
        })
    }

    fn capabilities(&self) -> Vec<csi::v1::NodeServiceCapability> {
        node_capabilities()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::host::fake::{Call, FakeHost, MappingStatus};
    use HostOp::*;

    const SHARE: &str = r"\\srv\share";

    fn staging(id: &str) -> String {
        format!(r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount")
    }

    fn norm_staging(id: &str) -> String {
        format!(r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount")
    }

    fn target(pod: &str) -> String {
        format!(r"\var\lib\kubelet\pods\{pod}\volumes\kubernetes.io~csi\pv\mount")
    }

    fn d() -> Deadline {
        Deadline::after(Duration::from_secs(600))
    }

    fn cap() -> Option<Capability> {
        Some(Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: vec![],
            },
            access_mode: 5,
        })
    }

    struct Env {
        host: FakeHost,
        mgr: VolumeManager<FakeHost>,
        dir: tempfile::TempDir,
    }

    impl Env {
        fn new() -> Self {
            let host = FakeHost::new();
            host.add_share(SHARE, &["base", "base/existing"]);
            host.add_share(r"\\srv\other", &[]);
            let dir = tempfile::tempdir().expect("tmp");
            let mgr = Self::manager(&host, dir.path());
            Self { host, mgr, dir }
        }

        fn manager(host: &FakeHost, dir: &Path) -> VolumeManager<FakeHost> {
            let cfg = VolumeConfig {
                kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
                driver_name: "wincsi.csi.io".into(),
            };
            VolumeManager::new(host.clone(), cfg, dir).expect("manager")
        }

        /// A fresh manager over the same state dir and host: a restarted driver.
        fn restart(&mut self) {
            self.mgr = Self::manager(&self.host, self.dir.path());
        }

        fn ops(&self) -> Vec<HostOp> {
            let ops = self.host.ops();
            self.host.clear_calls();
            ops
        }

        fn assert_clean(&self) {
            assert!(
                self.host.mappings().is_empty(),
                "leaked mappings: {:?}",
                self.host.mappings()
            );
            assert!(
                self.host.links().is_empty(),
                "leaked links: {:?}",
                self.host.links()
            );
            assert!(
                self.mgr.store().volumes().expect("list").is_empty(),
                "leaked volume records"
            );
            assert!(
                self.mgr.store().publications().expect("list").is_empty(),
                "leaked publish records"
            );
        }
    }

    fn stage_req(id: &str, source: &str, sub_dir: Option<&str>, user: &str) -> StageRequest {
        let mut volume_context: BTreeMap<String, String> =
            [("source".to_owned(), source.to_owned())].into();
        if let Some(s) = sub_dir {
            volume_context.insert("subDir".into(), s.into());
        }
        StageRequest {
            volume_id: id.into(),
            staging_target_path: staging(id),
            capability: cap(),
            volume_context,
            secrets: Secrets::new([("username", user), ("password", "pw-1"), ("domain", "CORP")]),
        }
    }

    fn publish_req(id: &str, pod: &str) -> PublishRequest {
        PublishRequest {
            volume_id: id.into(),
            staging_target_path: staging(id),
            target_path: target(pod),
            capability: cap(),
            ..Default::default()
        }
    }

    fn unstage_req(id: &str) -> UnstageRequest {
        UnstageRequest {
            volume_id: id.into(),
            staging_target_path: staging(id),
        }
    }

    fn unpublish_req(id: &str, pod: &str) -> UnpublishRequest {
        UnpublishRequest {
            volume_id: id.into(),
            target_path: target(pod),
        }
    }

    #[tokio::test]
    async fn first_and_repeated_stage() {
        let env = Env::new();
        let req = stage_req("v1", r"\\srv\share\base", None, "bob");
        env.mgr.stage(&req, d()).await.expect("stage");
        assert_eq!(
            env.host.calls(),
            vec![
                Call::PathExists(norm_staging("v1")),
                Call::NewSmbGlobalMapping {
                    remote: r"\\srv\share\base".into(),
                    link: Some(norm_staging("v1")),
                    principal: Some(r"CORP\bob".into()),
                },
                Call::IsSymlink(norm_staging("v1")),
            ]
        );
        env.host.clear_calls();
        let rec = env.mgr.store().volume("v1").expect("read").expect("record");
        assert_eq!(rec.phase, Phase::Staged);
        assert_eq!(
            rec.protocol,
            Protocol::Smb {
                root: SHARE.into(),
                remote_path: r"\\srv\share\base".into(),
                principal: Some(r"CORP\bob".into())
            }
        );
        env.mgr.stage(&req, d()).await.expect("repeat");
        assert_eq!(env.ops(), vec![PathExists, IsSymlink]);
        assert_eq!(env.host.mappings().len(), 1);
        assert!(env.host.resolves(&norm_staging("v1")));
    }

    #[tokio::test]
    async fn stage_replaces_kubelets_empty_directory() {
        let env = Env::new();
        env.host.add_dir(&staging("v1"));
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("stage");
        assert_eq!(
            env.ops(),
            vec![PathExists, Rmdir, NewSmbGlobalMapping, IsSymlink]
        );
        assert!(env.host.calls().is_empty());
    }

    #[tokio::test]
    async fn stage_refuses_non_empty_staging_directory_and_leaves_nothing() {
        let env = Env::new();
        env.host.add_dir(&format!(r"{}\data", staging("v1")));
        let err = env
            .mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect_err("non-empty");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("non-empty")),
            "{err:?}"
        );
        assert_eq!(env.ops(), vec![PathExists, Rmdir]);
        assert!(env.mgr.store().volume("v1").expect("read").is_none());
        assert!(env.host.exists(&format!(r"{}\data", staging("v1"))));
    }

    #[tokio::test]
    async fn stage_with_sub_dir_template_creates_it_on_the_share() {
        let env = Env::new();
        let mut req = stage_req(
            "v1",
            r"\\srv\share\base",
            Some("${pvc.metadata.namespace}/${pvc.metadata.name}"),
            "bob",
        );
        req.volume_context
            .insert("csi.storage.k8s.io/pvc/name".into(), "data".into());
        req.volume_context
            .insert("csi.storage.k8s.io/pvc/namespace".into(), "team".into());
        env.mgr.stage(&req, d()).await.expect("stage");
        let calls = env.host.calls();
        assert_eq!(
            env.ops(),
            vec![
                PathExists,
                NewSmbGlobalMapping,
                Mkdir,
                Rmdir,
                NewSmbGlobalMapping,
                IsSymlink
            ]
        );
        assert_eq!(
            calls[2],
            Call::Mkdir(format!(r"{}\team\data", norm_staging("v1")))
        );
        assert!(
            matches!(&calls[4], Call::NewSmbGlobalMapping { remote, .. } if remote == r"\\srv\share\base\team\data")
        );
        assert!(env.host.share_has_dir(SHARE, r"base\team\data"));
        assert_eq!(
            env.host
                .links()
                .get(&norm_staging("v1").to_ascii_lowercase())
                .map(String::as_str),
            Some(r"\\srv\share\base\team\data\")
        );
        env.mgr.stage(&req, d()).await.expect("repeat");
        assert_eq!(env.ops(), vec![PathExists, IsSymlink]);
    }

    #[tokio::test]
    async fn publish_unpublish_sequences() {
        let env = Env::new();
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("stage");
        env.host.clear_calls();
        env.mgr
            .publish(&publish_req("v1", "p1"), d())
            .await
            .expect("publish");
        let t = r"C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pv\mount".to_owned();
        assert_eq!(
            env.host.calls(),
            vec![
                Call::PathExists(t.clone()),
                Call::CreateSymlink {
                    link: t.clone(),
                    points_to: norm_staging("v1")
                }
            ]
        );
        env.host.clear_calls();
        assert!(env.host.resolves(&t));
        env.mgr
            .publish(&publish_req("v1", "p1"), d())
            .await
            .expect("repeat");
        assert_eq!(env.ops(), vec![PathExists, IsSymlink]);
        // kubelet's empty directory at a second target.
        env.host.add_dir(&target("p2"));
        env.mgr
            .publish(&publish_req("v1", "p2"), d())
            .await
            .expect("publish over dir");
        assert_eq!(env.ops(), vec![PathExists, IsSymlink, Rmdir, CreateSymlink]);
        env.mgr
            .unpublish(&unpublish_req("v1", "p1"), d())
            .await
            .expect("unpublish");
        assert_eq!(env.ops(), vec![PathExists, Rmdir]);
        env.mgr
            .unpublish(&unpublish_req("v1", "p1"), d())
            .await
            .expect("repeat unpublish");
        assert_eq!(env.ops(), vec![PathExists]);
        env.mgr
            .unpublish(&unpublish_req("v1", "p2"), d())
            .await
            .expect("unpublish 2");
        env.host.clear_calls();
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        assert_eq!(
            env.host.calls(),
            vec![
                Call::PathExists(norm_staging("v1")),
                Call::Rmdir(norm_staging("v1"), false),
                Call::RemoveSmbGlobalMapping(SHARE.into()),
            ]
        );
        env.host.clear_calls();
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("repeat unstage");
        assert_eq!(env.ops(), vec![PathExists]);
        env.assert_clean();
    }

    #[tokio::test]
    async fn publish_error_branches() {
        let env = Env::new();
        // Not staged.
        let err = env
            .mgr
            .publish(&publish_req("v1", "p1"), d())
            .await
            .expect_err("not staged");
        assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("stage");
        env.mgr
            .stage(&stage_req("v2", SHARE, None, "bob"), d())
            .await
            .expect("stage");
        env.host.clear_calls();
        // No staging path.
        let mut r = publish_req("v1", "p1");
        r.staging_target_path.clear();
        assert!(matches!(
            env.mgr.publish(&r, d()).await,
            Err(Error::FailedPrecondition(_))
        ));
        // Block.
        let mut r = publish_req("v1", "p1");
        r.capability = Some(Capability {
            access_type: AccessType::Block,
            access_mode: 1,
        });
        assert!(
            matches!(env.mgr.publish(&r, d()).await, Err(Error::InvalidArgument(m)) if m.contains("block"))
        );
        assert!(env.host.calls().is_empty());
        // Non-empty target directory.
        env.host.add_dir(&format!(r"{}\file", target("p9")));
        let err = env
            .mgr
            .publish(&publish_req("v1", "p9"), d())
            .await
            .expect_err("non-empty");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("non-empty")),
            "{err:?}"
        );
        assert_eq!(env.ops(), vec![PathExists, IsSymlink, Rmdir]);
        // Published from another source.
        env.mgr
            .publish(&publish_req("v1", "p1"), d())
            .await
            .expect("publish");
        env.host.clear_calls();
        let mut other = publish_req("v2", "p1");
        other.target_path = target("p1");
        let err = env
            .mgr
            .publish(&other, d())
            .await
            .expect_err("other source");
        assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
        assert_eq!(env.ops(), vec![PathExists, IsSymlink]);
        // Readonly mismatch.
        let mut ro = publish_req("v1", "p1");
        ro.readonly = true;
        assert!(matches!(
            env.mgr.publish(&ro, d()).await,
            Err(Error::AlreadyExists(_))
        ));
        // Unpublish of another volume's target is refused.
        assert!(matches!(
            env.mgr.unpublish(&unpublish_req("v2", "p1"), d()).await,
            Err(Error::FailedPrecondition(_))
        ));
        // Credentials in mount options.
        let mut r = publish_req("v1", "p3");
        r.capability = Some(Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: vec!["password=topsecret".into()],
            },
            access_mode: 5,
        });
        let err = env.mgr.publish(&r, d()).await.expect_err("creds");
        assert!(
            matches!(&err, Error::InvalidArgument(m) if !m.contains("topsecret")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn error_table() {
        let env = Env::new();
        let mut s = stage_req("v1", SHARE, None, "bob");
        s.volume_id.clear();
        assert!(matches!(
            env.mgr.stage(&s, d()).await,
            Err(Error::InvalidArgument(_))
        ));
        let mut s = stage_req("v1", SHARE, None, "bob");
        s.staging_target_path.clear();
        assert!(matches!(
            env.mgr.stage(&s, d()).await,
            Err(Error::InvalidArgument(_))
        ));
        let mut s = stage_req("v1", SHARE, None, "bob");
        s.capability = None;
        assert!(matches!(
            env.mgr.stage(&s, d()).await,
            Err(Error::InvalidArgument(_))
        ));
        let mut s = stage_req("v1", SHARE, None, "bob");
        s.staging_target_path = r"C:\Windows\System32".into();
        assert!(
            matches!(env.mgr.stage(&s, d()).await, Err(Error::InvalidArgument(m)) if m.contains("kubelet-root"))
        );
        let mut s = stage_req("v1", SHARE, None, "bob");
        s.capability = Some(Capability {
            access_type: AccessType::Block,
            access_mode: 1,
        });
        assert!(matches!(
            env.mgr.stage(&s, d()).await,
            Err(Error::InvalidArgument(_))
        ));
        let mut p = publish_req("v1", "p1");
        p.target_path.clear();
        assert!(matches!(
            env.mgr.publish(&p, d()).await,
            Err(Error::InvalidArgument(_))
        ));
        let mut p = publish_req("v1", "p1");
        p.capability = None;
        assert!(matches!(
            env.mgr.publish(&p, d()).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            env.mgr.unstage(&UnstageRequest::default(), d()).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            env.mgr.unpublish(&UnpublishRequest::default(), d()).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            env.mgr
                .unpublish(
                    &UnpublishRequest {
                        volume_id: "v1".into(),
                        target_path: String::new()
                    },
                    d()
                )
                .await,
            Err(Error::InvalidArgument(_))
        ));
        let stats = |id: &str, path: &str| StatsRequest {
            volume_id: id.into(),
            volume_path: path.into(),
        };
        assert!(matches!(
            env.mgr.stats(&stats("", &staging("v1")), d()).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            env.mgr.stats(&stats("v1", ""), d()).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            env.mgr.stats(&stats("v1", &staging("v1")), d()).await,
            Err(Error::NotFound(_))
        ));
        assert!(
            env.host.calls().is_empty(),
            "validation happens before any host call"
        );
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("stage");
        assert!(matches!(
            env.mgr.stats(&stats("v1", &target("nope")), d()).await,
            Err(Error::NotFound(_))
        ));
        // Unstage/unpublish of unknown volumes are idempotent successes.
        env.mgr
            .unstage(&unstage_req("unknown"), d())
            .await
            .expect("unknown unstage");
        env.mgr
            .unpublish(&unpublish_req("unknown", "px"), d())
            .await
            .expect("unknown unpublish");
        // Same volume id, other source: AlreadyExists.
        let err = env
            .mgr
            .stage(&stage_req("v1", r"\\srv\other", None, "bob"), d())
            .await
            .expect_err("conflict");
        assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
    }

    #[tokio::test]
    async fn two_volumes_share_one_mapping_with_durable_count() {
        let mut env = Env::new();
        env.mgr
            .stage(&stage_req("v1", r"\\srv\share\base", None, "bob"), d())
            .await
            .expect("v1");
        env.mgr
            .stage(&stage_req("v2", r"\\SRV\Share", None, "bob"), d())
            .await
            .expect("v2");
        assert_eq!(env.host.mappings().len(), 1);
        env.restart();
        env.host.clear_calls();
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage v1");
        assert_eq!(env.ops(), vec![PathExists, Rmdir], "mapping kept for v2");
        assert_eq!(env.host.mappings().len(), 1);
        assert!(env.host.resolves(&staging("v2")));
        env.mgr
            .unstage(&unstage_req("v2"), d())
            .await
            .expect("unstage v2");
        assert_eq!(env.ops(), vec![PathExists, Rmdir, RemoveSmbGlobalMapping]);
        env.assert_clean();
    }

    #[tokio::test]
    async fn conflicting_principals_fail_with_1219_advice() {
        let env = Env::new();
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("v1");
        env.host.clear_calls();
        // Detected up front from the records: no host call.
        let err = env
            .mgr
            .stage(&stage_req("v2", r"\\srv\other", None, "alice"), d())
            .await
            .expect_err("1219");
        match &err {
            Error::FailedPrecondition(m) => assert!(
                m.contains("srv") && m.contains(r"CORP\bob") && m.contains("1219"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(env.host.calls().is_empty());
        assert!(env.mgr.store().volume("v2").expect("read").is_none());
        // Reported by the host (a mapping this driver did not make).
        env.host.add_share(r"\\nas\data", &[]);
        env.host
            .add_mapping(r"\\nas\other", MappingStatus::Ok, Some("someone"));
        let err = env
            .mgr
            .stage(&stage_req("v3", r"\\nas\data", None, "bob"), d())
            .await
            .expect_err("host 1219");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("1219") && m.contains(r"\\nas\data")),
            "{err:?}"
        );
        assert_eq!(env.ops(), vec![PathExists, NewSmbGlobalMapping]);
        assert!(
            env.mgr.store().volume("v3").expect("read").is_none(),
            "fresh record rolled back"
        );
        assert!(!env.host.exists(&staging("v3")));
    }

    #[tokio::test]
    async fn definite_failures_roll_back() {
        let env = Env::new();
        // The path does not exist on the share: link made, then found unreachable → link and mapping removed.
        let err = env
            .mgr
            .stage(&stage_req("v1", r"\\srv\share\missing", None, "bob"), d())
            .await
            .expect_err("x");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("not reachable")),
            "{err:?}"
        );
        assert_eq!(
            env.ops(),
            vec![
                PathExists,
                NewSmbGlobalMapping,
                IsSymlink,
                Rmdir,
                RemoveSmbGlobalMapping
            ]
        );
        env.assert_clean();
        // Mkdir of the subDir fails: the temporary link and the mapping are rolled back.
        env.host.fail_nth(Mkdir, 1, HostErrorKind::AccessDenied);
        let err = env
            .mgr
            .stage(&stage_req("v1", SHARE, Some("new"), "bob"), d())
            .await
            .expect_err("mkdir");
        assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
        assert_eq!(
            env.ops(),
            vec![
                PathExists,
                NewSmbGlobalMapping,
                Mkdir,
                Rmdir,
                RemoveSmbGlobalMapping
            ]
        );
        env.assert_clean();
        // Wrong password.
        env.host.require_password(SHARE, "right");
        let err = env
            .mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect_err("logon");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("credentials") && !m.contains("pw-1")),
            "{err:?}"
        );
        env.host.clear_calls();
        env.assert_clean();
        // Unknown share / server.
        let err = env
            .mgr
            .stage(&stage_req("v1", r"\\srv\nope", None, "bob"), d())
            .await
            .expect_err("67");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("67")),
            "{err:?}"
        );
        let err = env
            .mgr
            .stage(&stage_req("v1", r"\\ghost\x", None, "bob"), d())
            .await
            .expect_err("53");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("53")),
            "{err:?}"
        );
        env.host.clear_calls();
        env.assert_clean();
    }

    #[tokio::test]
    async fn uncertain_failures_keep_the_record_and_converge() {
        let env = Env::new();
        env.host
            .fail_nth(NewSmbGlobalMapping, 1, HostErrorKind::Unavailable);
        let err = env
            .mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect_err("unavailable");
        assert!(
            matches!(&err, Error::Unavailable(m) if m.contains("csi-proxy")),
            "{err:?}"
        );
        assert_eq!(
            env.mgr
                .store()
                .volume("v1")
                .expect("read")
                .expect("kept")
                .phase,
            Phase::Staging
        );
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("retry");
        assert_eq!(
            env.mgr
                .store()
                .volume("v1")
                .expect("read")
                .expect("kept")
                .phase,
            Phase::Staged
        );
        // Unstage: RemoveSmbGlobalMapping unavailable → error, record kept; retry converges.
        env.host
            .fail_nth(RemoveSmbGlobalMapping, 1, HostErrorKind::Unavailable);
        assert!(matches!(
            env.mgr.unstage(&unstage_req("v1"), d()).await,
            Err(Error::Unavailable(_))
        ));
        assert!(env.mgr.store().volume("v1").expect("read").is_some());
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("retry unstage");
        env.assert_clean();
        // An expired deadline is DEADLINE_EXCEEDED, never a hang.
        let err = env
            .mgr
            .stage(
                &stage_req("v2", SHARE, None, "bob"),
                Deadline::after(Duration::ZERO),
            )
            .await;
        assert!(matches!(err, Err(Error::DeadlineExceeded(_))), "{err:?}");
    }

    #[tokio::test]
    async fn reboot_stats_reconcile_and_restage() {
        let env = Env::new();
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("stage");
        env.mgr
            .publish(&publish_req("v1", "p1"), d())
            .await
            .expect("publish");
        let stats = |p: String| StatsRequest {
            volume_id: "v1".into(),
            volume_path: p,
        };
        env.host.clear_calls();
        let ok = env
            .mgr
            .stats(&stats(target("p1")), d())
            .await
            .expect("stats");
        assert!(!ok.abnormal, "{ok:?}");
        assert_eq!(ok.usage, Usage::default());
        assert_eq!(env.ops(), vec![PathExists, IsSymlink]);
        env.host.reboot();
        let bad = env
            .mgr
            .stats(&stats(target("p1")), d())
            .await
            .expect("stats");
        assert!(bad.abnormal && bad.message.contains(SHARE), "{bad:?}");
        env.host.clear_calls();
        let report = env.mgr.reconcile(d()).await.expect("reconcile");
        assert_eq!(report.restage, vec!["v1".to_owned()]);
        assert_eq!(report.checked, 1);
        assert!(
            !env.host.exists(&staging("v1")),
            "broken staging link removed"
        );
        assert_eq!(
            env.mgr.store().volume("v1").expect("r").expect("r").phase,
            Phase::NeedsRestage
        );
        assert_eq!(env.ops(), vec![PathExists, IsSymlink, Rmdir, PathExists]);
        // kubelet re-stages: the Disconnected mapping is re-created and the target resolves again.
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("restage");
        assert_eq!(env.ops(), vec![PathExists, NewSmbGlobalMapping, IsSymlink]);
        assert_eq!(env.host.mappings()[SHARE].status, MappingStatus::Ok);
        assert!(env.host.resolves(&target("p1")));
        let report = env.mgr.reconcile(d()).await.expect("reconcile");
        assert!(report.restage.is_empty());
    }

    #[tokio::test]
    async fn disconnected_mapping_that_blocks_create_is_replaced() {
        let env = Env::new();
        env.host.disconnected_blocks_create(true);
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("stage");
        env.host.reboot();
        env.mgr.reconcile(d()).await.expect("reconcile");
        env.host.clear_calls();
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("restage");
        assert_eq!(
            env.ops(),
            vec![
                PathExists,
                NewSmbGlobalMapping,
                RemoveSmbGlobalMapping,
                NewSmbGlobalMapping,
                IsSymlink
            ]
        );
        assert_eq!(env.host.mappings()[SHARE].status, MappingStatus::Ok);
    }

    /// Count the host calls of a complete stage → publish → unpublish → unstage with subDir.
    async fn full_cycle(env: &Env) -> Result<(), Error> {
        env.mgr
            .stage(&stage_req("v1", SHARE, Some("sub"), "bob"), d())
            .await?;
        env.mgr.publish(&publish_req("v1", "p1"), d()).await?;
        env.mgr.unpublish(&unpublish_req("v1", "p1"), d()).await?;
        env.mgr.unstage(&unstage_req("v1"), d()).await
    }

    /// Retry every step as kubelet would, from a restarted driver.
    async fn kubelet_retries(env: &Env) {
        env.mgr
            .stage(&stage_req("v1", SHARE, Some("sub"), "bob"), d())
            .await
            .expect("retry stage");
        env.mgr
            .publish(&publish_req("v1", "p1"), d())
            .await
            .expect("retry publish");
        env.mgr
            .unpublish(&unpublish_req("v1", "p1"), d())
            .await
            .expect("retry unpublish");
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("retry unstage");
    }

    #[tokio::test]
    async fn killed_between_any_two_host_calls_then_retried_converges() {
        let total = {
            let env = Env::new();
            full_cycle(&env).await.expect("clean run");
            env.assert_clean();
            env.host.calls().len()
        };
        assert_eq!(total, 6 + 2 + 2 + 3);
        for n in 0..total {
            for kubelet_unstages_instead in [false, true] {
                let mut env = Env::new();
                env.host.hang_after(n);
                tokio::select! {
                    r = full_cycle(&env) => panic!("call {n}: cycle finished despite the hang: {r:?}"),
                    () = env.host.hung() => {}
                }
                env.host.resume();
                env.restart();
                if kubelet_unstages_instead {
                    env.mgr
                        .unpublish(&unpublish_req("v1", "p1"), d())
                        .await
                        .expect("unpublish");
                    env.mgr
                        .unstage(&unstage_req("v1"), d())
                        .await
                        .expect("unstage");
                } else {
                    kubelet_retries(&env).await;
                }
                env.assert_clean();
                assert!(
                    kubelet_unstages_instead || env.host.share_has_dir(SHARE, "sub"),
                    "call {n}"
                );
            }
        }
    }

    #[tokio::test]
    async fn same_volume_in_flight_is_aborted() {
        let env = Env::new();
        env.host.hang_after(0);
        let req = stage_req("v1", SHARE, None, "bob");
        let first = env.mgr.stage(&req, d());
        tokio::pin!(first);
        tokio::select! {
            r = &mut first => panic!("{r:?}"),
            () = env.host.hung() => {}
        }
        for err in [
            env.mgr
                .stage(&stage_req("v1", SHARE, None, "bob"), d())
                .await,
            env.mgr.unstage(&unstage_req("v1"), d()).await,
            env.mgr.publish(&publish_req("v1", "p"), d()).await,
            env.mgr.unpublish(&unpublish_req("v1", "p"), d()).await,
        ] {
            assert!(matches!(err, Err(Error::Aborted(_))), "{err:?}");
        }
        env.host.resume();
        env.host.clear_calls();
        // Another volume is not blocked (no global lock).
        env.mgr
            .stage(&stage_req("v2", SHARE, None, "bob"), d())
            .await
            .expect("other volume");
    }

    #[tokio::test]
    async fn fifty_volumes_concurrently() {
        let env = Env::new();
        let mgr = Arc::new(env.mgr);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..50 {
            let mgr = Arc::clone(&mgr);
            set.spawn(async move {
                mgr.stage(
                    &stage_req(&format!("v{i}"), SHARE, Some(&format!("d{i}")), "bob"),
                    d(),
                )
                .await
            });
        }
        while let Some(r) = set.join_next().await {
            r.expect("join").expect("stage");
        }
        assert_eq!(env.host.mappings().len(), 1);
        assert_eq!(mgr.store().smb_users(SHARE).expect("users").len(), 50);
        for i in 0..50 {
            let mgr = Arc::clone(&mgr);
            set.spawn(async move { mgr.unstage(&unstage_req(&format!("v{i}")), d()).await });
        }
        while let Some(r) = set.join_next().await {
            r.expect("join").expect("unstage");
        }
        let removes = env
            .host
            .ops()
            .iter()
            .filter(|o| **o == RemoveSmbGlobalMapping)
            .count();
        assert_eq!(removes, 1, "exactly the last unstage removes the mapping");
        assert!(env.host.mappings().is_empty() && env.host.links().is_empty());
        assert!(mgr.store().volumes().expect("list").is_empty());
        assert!(mgr.mappings.is_empty(), "mapping lock entries are dropped");
    }

    // Paused time: a probe's timeout can only fire once every task is stuck, so it proves "blocked", not "slow".
    #[tokio::test(start_paused = true)]
    async fn stages_on_one_mapped_share_overlap_and_unstage_waits_for_them() {
        let env = Env::new();
        env.mgr
            .stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("v1");
        // Calls are counted since the last clear: hold v2's (the next) NewSmbGlobalMapping.
        env.host.clear_calls();
        env.host.hold_nth(NewSmbGlobalMapping, 1);
        let v2_req = stage_req("v2", SHARE, None, "bob");
        let v2 = env.mgr.stage(&v2_req, d());
        tokio::pin!(v2);
        tokio::select! {
            r = &mut v2 => panic!("{r:?}"),
            () = env.host.hung() => {}
        }
        // v2 is stuck inside NewSmbGlobalMapping with the share's lock held: v3 on the same share still completes.
        let v3 = tokio::time::timeout(
            Duration::from_secs(10),
            env.mgr.stage(&stage_req("v3", SHARE, None, "bob"), d()),
        )
        .await;
        assert!(matches!(v3, Ok(Ok(()))), "{v3:?}");
        // An unstage needs the exclusive side: it waits for the in-flight stage of v2.
        let unstage_req3 = unstage_req("v3");
        let unstage3 = env.mgr.unstage(&unstage_req3, d());
        tokio::pin!(unstage3);
        let probe = tokio::time::timeout(Duration::from_secs(10), &mut unstage3).await;
        assert!(
            probe.is_err(),
            "unstage ran under an in-flight stage: {probe:?}"
        );
        env.host.release();
        v2.await.expect("v2");
        unstage3.await.expect("unstage v3");
        assert!(
            !env.ops().contains(&RemoveSmbGlobalMapping),
            "mapping kept for v1 and v2"
        );
        assert!(env.host.resolves(&staging("v1")) && env.host.resolves(&staging("v2")));
        for id in ["v1", "v2"] {
            env.mgr
                .unstage(&unstage_req(id), d())
                .await
                .expect("unstage");
        }
        assert_eq!(
            env.ops()
                .iter()
                .filter(|o| **o == RemoveSmbGlobalMapping)
                .count(),
            1
        );
        env.assert_clean();
        assert!(
            env.mgr.mappings.is_empty(),
            "mapping lock entries are dropped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn first_users_queued_together_continue_shared_once_one_has_mapped() {
        let env = Env::new();
        env.host.hold_nth(NewSmbGlobalMapping, 1);
        env.host.hold_nth(NewSmbGlobalMapping, 2);
        let (r1, r2) = (
            stage_req("v1", SHARE, None, "bob"),
            stage_req("v2", SHARE, None, "bob"),
        );
        let v1 = env.mgr.stage(&r1, d());
        tokio::pin!(v1);
        tokio::select! {
            r = &mut v1 => panic!("{r:?}"),
            () = env.host.hung() => {}
        }
        // v2 is a first user too: it waits for the exclusive side v1 holds while creating the mapping.
        let v2 = env.mgr.stage(&r2, d());
        tokio::pin!(v2);
        let probe = tokio::time::timeout(Duration::from_secs(10), &mut v2).await;
        assert!(probe.is_err(), "v2 ran beside the creator: {probe:?}");
        env.host.release();
        v1.await.expect("v1");
        tokio::select! {
            r = &mut v2 => panic!("{r:?}"),
            () = env.host.hung() => {}
        }
        // v1 is Staged now, so v2 went on under the shared side: v3 completes while v2 is held.
        let v3 = tokio::time::timeout(
            Duration::from_secs(10),
            env.mgr.stage(&stage_req("v3", SHARE, None, "bob"), d()),
        )
        .await;
        assert!(matches!(v3, Ok(Ok(()))), "{v3:?}");
        env.host.release();
        v2.await.expect("v2");
        for id in ["v1", "v2", "v3"] {
            env.mgr
                .unstage(&unstage_req(id), d())
                .await
                .expect("unstage");
        }
        env.assert_clean();
        assert!(
            env.mgr.mappings.is_empty(),
            "mapping lock entries are dropped"
        );
    }

    #[tokio::test]
    async fn shared_stage_upgrades_to_exclusive_to_repair_the_mapping() {
        let env = Env::new();
        env.host.disconnected_blocks_create(true);
        for id in ["v1", "v2"] {
            env.mgr
                .stage(&stage_req(id, SHARE, None, "bob"), d())
                .await
                .expect("stage");
        }
        env.host.reboot();
        env.host.clear_calls();
        // Other volumes are Staged, so v3 starts under the shared side; the repair runs only after the upgrade.
        env.mgr
            .stage(&stage_req("v3", SHARE, None, "bob"), d())
            .await
            .expect("v3");
        assert_eq!(
            env.ops(),
            vec![
                PathExists,
                NewSmbGlobalMapping,
                NewSmbGlobalMapping,
                RemoveSmbGlobalMapping,
                NewSmbGlobalMapping,
                IsSymlink
            ]
        );
        assert_eq!(env.host.mappings()[SHARE].status, MappingStatus::Ok);
        assert!(
            env.mgr.mappings.is_empty(),
            "mapping lock entries are dropped"
        );
    }

    #[tokio::test]
    async fn credentials_never_reach_errors_or_records() {
        let env = Env::new();
        env.host.require_password(SHARE, "another");
        let mut req = stage_req("v1", SHARE, None, "bob");
        req.secrets = Secrets::new([("username", "bob"), ("password", "Sup3r-S3cret!")]);
        let err = env.mgr.stage(&req, d()).await.expect_err("logon failure");
        assert!(!err.chain().contains("Sup3r-S3cret!"));
        assert!(!format!("{req:?}").contains("Sup3r-S3cret!"));
        env.host.require_password(SHARE, "Sup3r-S3cret!");
        env.mgr.stage(&req, d()).await.expect("stage");
        for entry in std::fs::read_dir(env.dir.path().join("volumes")).expect("ls") {
            let text = std::fs::read_to_string(entry.expect("e").path()).expect("read");
            assert!(!text.contains("Sup3r-S3cret!"));
        }
    }
}
