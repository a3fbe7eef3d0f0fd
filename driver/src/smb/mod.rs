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
//! | first stage | `Rmdir(staging)` (kubelet's empty directory; "not found" when there is none) → `NewSmbGlobalMapping(full, link=staging)` → `IsSymlink(staging)` |
//! | first stage with subDir | `Rmdir(staging)` → `NewSmbGlobalMapping(root+source, link=staging)` → `Mkdir(staging\subDir)` (creates it on the share, through the link) → `Rmdir(staging)` → `NewSmbGlobalMapping(full, link=staging)` → `IsSymlink` |
//! | repeated stage | `IsSymlink(staging)` (true: a link whose target exists, so the path exists too) |
//! | re-stage after a reboot (Disconnected mapping) | `IsSymlink` (false or an error) → `Rmdir(staging)` → `NewSmbGlobalMapping` (1219) → `RemoveSmbGlobalMapping(root)` → `NewSmbGlobalMapping` → `IsSymlink` |
//! | re-stage after a reboot during a file-server outage | while the server is down: `Rmdir(staging)` → `NewSmbGlobalMapping` (53; the record stays, phase `staging`, still proving the mapping is the driver's); once it is back, as the row above |
//! | first stage whose share path does not exist | PowerShell era: `Rmdir(staging)` → `NewSmbGlobalMapping` (maps, then `New-Item` refuses the link) → rollback `Rmdir(staging)` ("not found": no link) → `RemoveSmbGlobalMapping(root)`; WMI era: `Rmdir` → `NewSmbGlobalMapping` (a dangling link) → `IsSymlink` (false) → `Rmdir` → `RemoveSmbGlobalMapping`; the mapping only when no other record uses it |
//! | unstage | `Rmdir(staging)` ("not found": already gone) → `RemoveSmbGlobalMapping(root)` only when no other record uses the root |
//! | unstage without a record (native: adoption, `adopt.rs`) | `ReadLink(staging)` → `Rmdir` → (per surviving publish record without a volume record: `ReadLink` of its staging path) → `RemoveSmbGlobalMapping` when nothing else names the share |
//! | stats | `PathExists(path)` → `IsSymlink(staging)` (native, reachable and staged: → `PathSpace(path)`) |
//! | startup reconcile (staged record), and its background re-checks | `IsSymlink(staging)` (a link that does not reach the share is left in place: `lifecycle/watch.rs`) |
//! | publish readiness | `IsSymlink(staging)` |
//! | publish carrying the mapping's own credential (kubelet's republish, `rotate.rs`) | none |
//! | publish carrying another credential | `IsSymlink(staging)`; when it does not reach the share: the re-stage's repair (`rotate.rs`) |
//!
//! Publish and unpublish are the lifecycle's (a link from the target to the staging path; see `crate::lifecycle`);
//! before it makes a link, publish asks [`Protocol::ready`], which checks that the staging link reaches the share
//! (Windows makes a link to a source that does not resolve a *file* link, useless to the pod).
//!
//! Why the subDir dance: csi-proxy's `Mkdir` only accepts paths under the kubelet root and `CreateSymlink` cannot
//! point at a UNC path, so the only way to create a directory on the share is through a link that
//! `NewSmbGlobalMapping` made. The staging path itself serves as that temporary link (it is ours, and a crash
//! mid-dance is repaired by the next stage, which always rebuilds a link it did not finish).
//!
//! # Mapping health
//!
//! csi-proxy v1 cannot list or query SMB global mappings. The driver therefore learns a mapping's health from path
//! reachability, always at the staging link: `IsSymlink` looks one hop (every release: `Lstat` of the link's
//! immediate target), and the staging link's immediate target is the UNC path. True means the share answers; false
//! (Windows errors 2, 3, 53) *or an error* (access denied on a Disconnected mapping, logon failure after a password
//! change, a deleted share) means the mapping is down, and the stage, reconciliation and stats treat both alike. A
//! pod's link is never asked: it points at the staging link, so one hop says true even when the share is gone.
//!
//! Repairing relies on `NewSmbGlobalMapping`'s own reuse-or-recreate logic: it keeps an OK, reachable mapping and
//! creates over a broken one without removing it first. After a reboot Windows refuses that with error 1219 (public
//! reports; the same code as "another user"): when this node's records prove it mapped the share under the same
//! principal ([`SmbRecord::mapped`]: set with a `Staged` record, kept through a re-stage that failed — a reboot while
//! the file server was down —, gone with the record), the driver removes the mapping and creates it once more, under
//! the share's exclusive lock (`mapping.rs`); a 1219 without that evidence is reported, never repaired. Error 85, should Windows answer it, is
//! repaired the same way.
//!
//! # Crash safety
//!
//! Stage writes the volume record (phase `staging`) **before** it touches the host — under the server's lock, where
//! it also claims the volume's principal (see "Concurrency") — and flips it to `staged` only at the end; unstage removes the link, then the mapping if no *other* record names its root, and deletes the record
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
//! A definite failure of a first stage (e.g. 1219, logon failure, share not found, a link refused) rolls back what
//! this call may have made — a `NewSmbGlobalMapping` that failed after the mapping step counts as having made the
//! mapping (csi-proxy maps first, links second) —, each step attempted even when another could not be undone, and
//! deletes the record when nothing is left, because kubelet treats such an error as final and will not call
//! NodeUnstage; what is left is named in the error and the record stays for it. An uncertain failure (deadline,
//! csi-proxy unavailable) keeps the record: kubelet retries or unstages.
//!
//! # Concurrency
//!
//! Stages of volumes on one already-mapped share take the share's lock shared and overlap; creating, repairing or
//! removing the mapping takes it exclusively (`mapping.rs`). Windows allows one principal per server per node
//! (error 1219), and a second principal on an OK mapping would silently ride on the first one's rights: so the
//! check that every other volume of the server uses this volume's principal and the record that claims it are one
//! step under the server's lock (`smb-server:<server>`); of two stages with different accounts exactly one passes.
//!
//! # Stats
//!
//! The volume condition: abnormal when the staging link does not reach the share. The usage, on a backend that can
//! measure a directory ([`crate::host::HostCapabilities::path_space`], the native one), is `GetDiskFreeSpaceExW` of
//! the volume path as kubelet names it, which Windows follows through the staging link to the share: the share's
//! file system as the mapping's account sees it (its per-user quota, or a directory quota on the volume's subDir,
//! where the server has one; without one, every volume of the share reports the whole share's usage). `used` is
//! `total - available`. csi-proxy v1 has no free-space query for a path (its `GetVolumeStats` takes a local volume's
//! id), so on csiProxy mode, and when the measurement fails, the usage is one `BYTES` entry with zeros (kubelet
//! requires a usage entry) and the condition's message says why. A credential-less volume needs csi-proxy v1.3.0+: v1.1.x and v1.2.x always build a
//! PowerShell credential, and such a stage fails with FailedPrecondition naming that limit.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tracing::{debug, info};

use crate::error::Error;
use crate::host::{
    Host, HostErrorKind, HostOp, HostPath, SharedObject, SmbMappingOptions, UncPath, name_key,
    names_equal,
};
use crate::lifecycle::creation::Creation;
use crate::lifecycle::{
    Calls, Context, Found, Health, Protocol, StageAt, StageRequest, Usage, VolumeStats, host_error,
};
use crate::locks::Deadline;
use crate::state::{Details, Phase, VolumeRecord};

mod adopt;
mod creation;
mod mapping;
mod options;
mod orphans;
pub mod params;
mod removal;
mod rotate;
mod stage;
#[cfg(test)]
mod tests;

pub use crate::lifecycle::Secrets;
pub use params::{SmbVolume, parse_stage, parse_volume};
use removal::Removals;
pub use removal::SmbRemoval;

/// The SMB facts of a staged volume, kept in its state record (never a secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmbRecord {
    /// The mapping key: `\\server\share`, lower-cased.
    pub root: String,
    /// The full remote path the staging link points to (root + source path + subDir).
    pub remote_path: String,
    /// The principal name the mapping was requested with (never the password).
    pub principal: Option<String>,
    /// What this driver durably knows about the share's mapping: a `NewSmbGlobalMapping` of `root` under `principal`
    /// succeeded for this volume (set with the `Staged` record) and the driver has not removed the mapping since.
    /// Kept through a re-stage (its record goes back to `staging` first, and may stay there when the re-stage fails),
    /// so a Disconnected mapping that a reboot left behind stays provably the driver's own until it is gone; see
    /// `SmbRecord::proves_mapping`. Absent (false) in records of earlier versions.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mapped: bool,
    /// Removals announced before they were issued whose outcome is not known yet (`removal.rs`): stages of the share
    /// (and of this volume) wait for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removing: Option<SmbRemoval>,
    /// The SMB client options the volume asked of the share's mapping (`smb/options.rs`); absent (none asked) in
    /// records of earlier versions and of volumes that ask none.
    #[serde(default, skip_serializing_if = "SmbMappingOptions::is_empty")]
    pub options: SmbMappingOptions,
    /// A stage of this volume ran on a backend that keeps no ledger of the mappings it makes (csi-proxy: it maps the
    /// share or reuses its mapping, and the share's last unstage removes the mapping whoever made it). Written with
    /// the record's claim, before the stage's first host call, and kept by later stages. A node moved to the native
    /// backend counts the share's mapping as wincsi's from this record, whatever its phase (`backend::recorded_shares`):
    /// a stage killed on csi-proxy before it completed leaves its mapping to the native driver's unstage, as csi-proxy's
    /// would have removed it (issue 37, backend change with running pods).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unledgered: bool,
    /// A keyed fingerprint of the credential this volume's last successful stage (or credential rotation) presented
    /// to Windows (`rotate.rs`: HMAC-SHA256 under a per-node key, never the secret itself): a NodePublishVolume
    /// carrying the same credential costs no SMB host call. Absent in records of earlier versions, for credential-less
    /// volumes, and when the node key could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// Creating calls of a stage attempt (the mapping with its staging link, the subDir) announced before they were
    /// issued and not yet retired by the `Staged` write (`creation.rs`): an unstage waits until they cannot still run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creating: Option<Creation>,
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
            mapped: false,
            removing: None,
            options: vol.options,
            unledgered: false,
            credential: None,
            creating: None,
        }
    }

    /// Whether `rec` (whose facts these are) proves that this driver mapped `root` under `principal`: it says so
    /// ([`Self::mapped`]), or — a record of an earlier version — its stage completed (`Staged`, or `NeedsRestage`,
    /// which only a `Staged` record becomes). An adopted record whose principal is unknown proves nothing.
    pub(crate) fn proves_mapping(&self, rec: &VolumeRecord) -> bool {
        !adopt::principal_unknown(rec, self)
            && (self.mapped || matches!(rec.phase, Phase::Staged | Phase::NeedsRestage))
    }

    /// Whether these facts and `other`'s name the same share root under the same principal (Windows compares both
    /// case-insensitively).
    fn same_mapping(&self, other: &Self) -> bool {
        names_equal(&self.root, &other.root)
            && names_equal(
                self.principal.as_deref().unwrap_or(""),
                other.principal.as_deref().unwrap_or(""),
            )
    }

    /// Whether two records describe the same staged share path (principal excluded: credentials may rotate).
    fn same_volume(&self, other: &Self) -> bool {
        names_equal(&self.root, &other.root) && names_equal(&self.remote_path, &other.remote_path)
    }
}

/// The SMB protocol.
#[derive(Clone, Debug, Default)]
pub struct Smb {
    mappings: Mappings,
    removals: Removals,
    key: rotate::CredentialKey,
}

#[cfg(test)]
impl Smb {
    /// Every later change of what this process knows of its announced removals (a removal's task answered): tests
    /// wait on it instead of polling the host.
    pub(crate) fn removal_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.removals.changes()
    }

    /// How many stages wait for a removal this process runs.
    pub(crate) fn removal_waiters(&self) -> tokio::sync::watch::Receiver<usize> {
        self.removals.waiting()
    }
}

/// The share roots (lock keys) this process mapped and has not removed since. A stage that finds its root here takes
/// the shared side of the mapping lock at once, without waiting for the stage that made the mapping to finish (see
/// `mapping::lock_mapping`). Only a hint: under the shared side the plain `NewSmbGlobalMapping` runs and a mapping found
/// broken is repaired under the exclusive side, as for any existing mapping. Every removal forgets the root; empty at
/// start.
#[derive(Clone, Debug, Default)]
pub(crate) struct Mappings(Arc<MappingsInner>);

#[derive(Debug, Default)]
struct MappingsInner {
    roots: Mutex<HashSet<String>>,
    /// Woken whenever a root becomes known: first stages queued for the exclusive side stop waiting for it.
    mapped: tokio::sync::Notify,
}

impl Mappings {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0
            .roots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this process mapped `root` and has not removed it since.
    pub(crate) fn known(&self, root: &str) -> bool {
        self.set().contains(root)
    }

    /// `root` is mapped (a `NewSmbGlobalMapping` of it succeeded).
    pub(crate) fn mapped(&self, root: &str) {
        if self.set().insert(root.to_owned()) {
            self.0.mapped.notify_waiters();
        }
    }

    /// `root`'s mapping is being removed.
    pub(crate) fn forget(&self, root: &str) {
        self.set().remove(root);
    }

    /// Finishes once `root` is known (at once if it is).
    pub(crate) async fn until_known(&self, root: &str) {
        loop {
            // Registered before the check, so a `mapped` between the check and the wait is not missed.
            let notified = self.0.mapped.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.known(root) {
                return;
            }
            notified.await;
        }
    }
}

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
        parse_stage(req)
    }

    fn parse_inline(&self, req: &StageRequest) -> Option<Result<SmbVolume, Error>> {
        Some(parse_stage(req))
    }

    async fn stage(
        &self,
        cx: Context<'_, H>,
        at: StageAt<'_>,
        vol: &SmbVolume,
        d: Deadline,
    ) -> Result<(), Error> {
        let credential = self.key.fingerprint(cx, vol);
        stage::stage(cx, &self.mappings, &self.removals, at, vol, credential, d).await
    }

    async fn unstage(
        &self,
        cx: Context<'_, H>,
        staging: &HostPath,
        record: &VolumeRecord,
        d: Deadline,
    ) -> Result<(), Error> {
        unstage(cx, &self.mappings, &self.removals, staging, record, d).await
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

    async fn ready(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<(), Error> {
        ready(cx, record, staging, d).await
    }

    /// Rotated credentials (`rotate.rs`).
    async fn republish(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        req: &crate::lifecycle::PublishRequest,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<(), Error> {
        rotate::republish(
            cx,
            &self.mappings,
            &self.removals,
            &self.key,
            record,
            req,
            staging,
            d,
        )
        .await
    }

    /// A staging link into a share, on a backend that can read links (`adopt.rs`).
    async fn adopt(
        &self,
        cx: Context<'_, H>,
        found: Found<'_>,
        d: Deadline,
    ) -> Result<Option<VolumeRecord>, Error> {
        adopt::adopt(cx, found, d).await
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

/// How many volume records other than `volume_id`'s name share `root` (its durable reference count).
fn other_share_users<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    root: &str,
) -> Result<usize, Error> {
    cx.count_records::<SmbRecord>(|rec, r| rec.volume_id != volume_id && names_equal(&r.root, root))
}

/// NodeUnstageVolume of a share: the link, then the mapping when no other record (for an adopted record: nor a link the
/// host shows, see `adopt.rs`) names its root, then the record. Both removals are announced in the record first and run
/// to their end (`removal.rs`): a stage arriving after this unstage gave up waits for them.
async fn unstage<H: Host>(
    cx: Context<'_, H>,
    mappings: &Mappings,
    removals: &Removals,
    staging: &HostPath,
    record: &VolumeRecord,
    d: Deadline,
) -> Result<(), Error> {
    let volume_id = &record.volume_id;
    let facts = details(record)?;
    // The lock key of the share as stage computes it (a record of an earlier version keys non-ASCII names otherwise).
    let root = name_key(&facts.root);
    let h = cx.calls(d);
    // A creating call of an earlier stage that may still run would land after this unstage: UNAVAILABLE until it
    // cannot (`creation.rs`); kubelet retries.
    removals
        .creation_settled(cx, &h, record, &facts, staging)
        .await?;
    // The link's removal is announced before it is issued; the mapping's below, under the share's lock, only when
    // this is its last user (each announced removal is one that was issued, so a restarted driver never waits for a
    // removal that never ran).
    let facts = removals.announce(cx, record, &facts, true, false).await?;
    let mut announced = facts
        .removing
        .clone()
        .unwrap_or_else(|| unreachable!("just announced"));
    removal::remove_link(removals, &h, volume_id, &announced, staging).await?;
    let remote_path = facts.remote_path.clone();
    let _mapping = cx.object_locks().lock(&root).await;
    let others = other_share_users(cx, volume_id, &root)?;
    // An adopted volume's siblings may have lost their records too: links the host shows count as users.
    let others = others
        + if record.adopted {
            adopt::unrecorded_links_into(cx, &h, volume_id, &root).await?
        } else {
            0
        };
    if cx.may_remove_shared(others, &root) {
        // The last user: one more write, under the share's lock (no stage of the share runs meanwhile).
        let next = removals.announce(cx, record, &facts, false, true).await?;
        removals.forget(volume_id, &announced);
        announced = next
            .removing
            .unwrap_or_else(|| unreachable!("just announced"));
        let remote = UncPath::parse(&remote_path, "recorded remote path")?.root();
        mappings.forget(&root);
        // What the backend will do with it, so the log says what happened (issue 37 item 15).
        let ours = h.host().made_by_wincsi(SharedObject::SmbMapping(&root)) != Some(false);
        match removal::remove_mapping_to_end(removals, &h, volume_id, &announced, &remote).await {
            Ok(()) if ours => info!(root = %root, "last user gone: SMB mapping removed"),
            Ok(()) => {
                info!(root = %root, "last user gone: SMB mapping left in place (someone else made it: wincsi \
                            removes only mappings it made)")
            }
            Err(e) if e.kind == HostErrorKind::NotFound => {
                debug!(root = %root, "mapping already gone")
            }
            Err(e) => return Err(host_error(e, &remote)),
        }
    } else {
        debug!(root = %root, others, "SMB mapping kept: other staged volumes use it");
    }
    cx.store().remove_volume(volume_id).await?;
    removals.forget(volume_id, &announced);
    if let Some(c) = &facts.creating {
        removals.1.forget(volume_id, c);
    }
    info!(staging = %staging, "volume unstaged");
    Ok(())
}

/// Whether the staging link reaches the share: `IsSymlink` of the staging path looks one hop, at the UNC path itself.
/// `Ok(Err(why))`: it does not (false — Windows errors 2, 3, 53 — or an error such as access denied on a Disconnected
/// mapping, a logon failure after a password change, a deleted share); `Err` only when the answer is uncertain.
async fn reaches_share<H: Host>(
    h: &Calls<'_, H>,
    staging: &HostPath,
) -> Result<Result<(), String>, Error> {
    match h.is_symlink(staging).await {
        Ok(true) => Ok(Ok(())),
        Ok(false) => Ok(Err("the share path does not answer".to_owned())),
        Err(e) if e.kind.is_uncertain() => Err(host_error(e, staging)),
        Err(e) => Ok(Err(e.message)),
    }
}

/// NodeGetVolumeStats of a share: zero usage (no free-space query for a UNC path) and whether the volume's staging
/// link reaches the share (judged there: a pod's link to the staging link answers one hop, so it looks fine even when
/// the mapping is down).
async fn stats<H: Host>(
    cx: Context<'_, H>,
    record: &VolumeRecord,
    path: &HostPath,
    d: Deadline,
) -> Result<VolumeStats, Error> {
    let staging = cx.staging_behind(record, path)?;
    let h = cx.calls(d);
    if !h.path_exists(path).await.map_err(|e| host_error(e, path))? {
        return Err(Error::NotFound(format!(
            "volume path {path} does not exist"
        )));
    }
    let reach = reaches_share(&h, &staging).await?;
    let SmbRecord {
        remote_path, root, ..
    } = details(record)?;
    let (abnormal, message) = match reach {
        Ok(()) if record.phase == Phase::Staged => (false, format!("{remote_path} is reachable")),
        why => (
            true,
            format!(
                "{remote_path} is not reachable ({}): the SMB mapping of {root} is disconnected or was removed, or \
                 the credentials are no longer accepted; restart the pod to re-stage the volume",
                why.err().unwrap_or_else(|| "not staged".to_owned())
            ),
        ),
    };
    let (usage, message) = if abnormal {
        (Usage::default(), message)
    } else {
        usage(&h, path, message).await?
    };
    debug!(abnormal, "volume condition");
    Ok(VolumeStats {
        usage,
        abnormal,
        message,
    })
}

/// A reachable share's usage and the condition's message: the backend's measurement of `path` (module docs,
/// "Stats"), or zeros with the reason (csiProxy mode; a measurement Windows refused, e.g. an account without
/// `FILE_LIST_DIRECTORY` on the directory). A measurement cut short (deadline, backend unavailable) fails the call:
/// an answer of zeros would be cached as if true.
async fn usage<H: Host>(
    h: &Calls<'_, H>,
    path: &HostPath,
    message: String,
) -> Result<(Usage, String), Error> {
    if !h.host().capabilities().path_space {
        return Ok((
            Usage::default(),
            format!(
                "{message}; usage not measured (csi-proxy cannot measure a share: mode hostProcess does)"
            ),
        ));
    }
    match h
        .raw(
            HostOp::PathSpace,
            path,
            h.host().path_space(path, h.deadline()),
        )
        .await
    {
        Ok(space) => {
            let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
            Ok((
                Usage {
                    total: bytes(space.total),
                    available: bytes(space.available),
                    used: bytes(space.total.saturating_sub(space.available)),
                },
                message,
            ))
        }
        Err(e) if e.kind.is_uncertain() => Err(host_error(e, path)),
        Err(e) => {
            debug!(path = %path, error = %e.message, "share usage not measured");
            Ok((
                Usage::default(),
                format!("{message}; usage not measured: {}", e.message),
            ))
        }
    }
}

/// Startup reconciliation of a staged share (and the background re-checks of one left in place): `IsSymlink` of the
/// staging link. One that does not reach the share is **left in place** ([`Health::Unreachable`]): it is what the
/// pods' links point at, and kubelet never re-stages a volume it believes mounted, so removing it would break their
/// paths for good even once the server answers again — while left, they work again as soon as the mapping does. After
/// a reboot (the mapping Disconnected, no pod running) kubelet's NodeStageVolume repairs it as any re-stage does.
async fn check<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    staging: &HostPath,
    d: Deadline,
) -> Result<Health, Error> {
    match reaches_share(&cx.calls(d), staging).await? {
        Ok(()) => Ok(Health::Healthy),
        Err(why) => {
            debug!(volume_id = %rec.volume_id, staging = %staging, why = %why,
                   "the staging link does not reach the share now: left in place (running pods may use it)");
            Ok(Health::Unreachable)
        }
    }
}

/// NodePublishVolume's check: the staging link reaches the share (a link to one that does not would be a *file*
/// link on Windows).
async fn ready<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    staging: &HostPath,
    d: Deadline,
) -> Result<(), Error> {
    let Err(why) = reaches_share(&cx.calls(d), staging).await? else {
        return Ok(());
    };
    let SmbRecord {
        remote_path, root, ..
    } = details(rec)?;
    Err(Error::FailedPrecondition(format!(
        "the staging path {staging} does not reach {remote_path} ({why}): the SMB mapping of {root} is down, so a \
         link to it would be unusable. kubelet retries; if the share stays unreachable, restart the pod so the volume \
         is staged again"
    )))
}
