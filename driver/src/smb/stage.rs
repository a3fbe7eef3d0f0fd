//! NodeStageVolume of a share (also the private stage of an inline ephemeral volume): the principal claimed under
//! the server's lock, the health of an existing stage, the mapping (with its repairs) and the staging link, and the
//! rollback of a definite failure.

use tracing::{debug, info, warn};

use super::mapping::{MapFailure, MapRepair, check_principal, lock_mapping, map_locked};
use super::removal::Removals;
use super::{Mappings, SmbRecord, SmbVolume, other_share_users, reaches_share, rotate};
use crate::error::Error;
use crate::host::{
    Host, HostError, HostErrorKind, HostOp, HostPath, MAX_PATH_BYTES, SharedObject, SmbCredential,
    SmbMappingOptions, UncPath, names_equal,
};
use crate::lifecycle::creation::Creation;
use crate::lifecycle::{Calls, Context, Found, StageAt, host_error};
use crate::locks::{Deadline, KeyedGuard};
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
    removals: &Removals,
    at: StageAt<'_>,
    vol: &SmbVolume,
    credential: Option<String>,
    d: Deadline,
) -> Result<(), Error> {
    let StageAt {
        volume_id,
        staging,
        ephemeral,
    } = at;
    let h = cx.calls(d);
    machine_account_here(h.host(), vol)?;
    if !h.host().capabilities().smb_mapping_options {
        super::options::refuse_on_csi_proxy(vol)?;
    }
    // The record keeps the mapping's fingerprint until this stage has mapped with `credential` (a stage that finds its
    // volume staged and reachable changes nothing on the host: `rotate.rs`).
    let mut wanted = SmbRecord::of(vol);
    // On a backend without a ledger of its mappings (csi-proxy) the record is the driver's only claim on the mapping:
    // said in the record, for a node later moved to the native backend (`SmbRecord::unledgered`).
    wanted.unledgered = h
        .host()
        .made_by_wincsi(SharedObject::SmbMapping(&vol.source.root_key()))
        .is_none();
    let existing = cx.store().volume(volume_id)?;
    if let Some(rec) = &existing {
        let facts = rec.details::<SmbRecord>()?;
        wanted.unledgered |= facts.as_ref().is_some_and(|r| r.unledgered);
        let same = facts.as_ref().is_some_and(|r| r.same_volume(&wanted));
        if !same || !staging.is(&rec.staging_path) {
            return Err(Error::AlreadyExists(format!(
                "volume {volume_id:?} is already staged at {} from another source or path; unstage it first",
                rec.staging_path
            )));
        }
        // What the record proved about the mapping stays proven while this stage runs and after it fails: the
        // mapping is still there (only this driver's unstage or rollback removes it, and either deletes the record).
        wanted.credential = facts.as_ref().and_then(|r| r.credential.clone());
        // So does an announcement of creating calls an earlier attempt may still run (`creation.rs`): it leaves only
        // with this attempt's `Staged` write.
        wanted.creating = facts.as_ref().and_then(|r| r.creating.clone());
        wanted.mapped = facts.is_some_and(|r| r.proves_mapping(rec) && r.same_mapping(&wanted));
    }
    // The subDir is created through the staging link (csi-proxy's `Mkdir` takes local paths only): that path obeys
    // every host-path rule, 260 bytes included, so a subDir too long for it is refused before any host call or record.
    let sub = sub_dir_path(cx, staging, vol)?;
    let existing = match existing {
        Some(rec) => Some(rec),
        // An inline volume's private stage is left out (kubelet publishes it again with its Secret; its path is the
        // driver's own), as are the stages on csi-proxy (it cannot read links, and removes any mapping it is asked to).
        None if ephemeral => None,
        None => {
            // Refused up front without a host call (checked again, and claimed, under the server's lock below).
            check_principal(cx, volume_id, vol)?;
            adopt_own(cx, at, vol, d).await?
        }
    };
    let fresh = existing.is_none();
    // Shared with the store's index (held to the end of the stage: with many stages at once, copies add up).
    let record = std::sync::Arc::new(VolumeRecord::new(
        volume_id,
        Phase::Staging,
        staging.as_str(),
        ephemeral,
        &wanted,
    )?);
    // A removal of the share's mapping (or of this volume's staging link) that may still run would take away what this
    // stage makes: UNAVAILABLE until it is over (`removal.rs`), before anything is written or done. One that runs in
    // this very process is waited for within the deadline (its answer is signalled): no retry for kubelet.
    let root = vol.source.root_key();
    if let Some(why) = removals.wait_settled(cx, &h, volume_id, &root).await? {
        return Err(Error::Unavailable(why));
    }
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
        Err(e) => {
            // The volume's own subDir path, empty, left by a late `Mkdir` (`creation.rs`): removed, never refused.
            let cleared = e.kind == HostErrorKind::NotEmpty
                && super::creation::clear_late_sub_dir(cx, &h, staging, vol).await?;
            if !cleared {
                return Err(forget_fresh(cx, fresh, volume_id, host_error(e, staging)).await?);
            }
        }
    }

    // From here on the record (phase staging) counts as a user of the mapping (a fresh one was written with the
    // claim above).
    if !fresh {
        cx.store().put_shared_volume(&record).await?;
    }
    // A re-stage (a record exists) may find the mapping broken and repair it: it does not go by what this process
    // remembers making.
    let mut mapping = lock_mapping(cx, fresh.then_some(mappings), volume_id, &root).await?;

    // Once more under the share's lock: an unstage of the share may have announced its removal since the look above
    // and given up waiting for it (its lock is released at its deadline, the removal going on). A removal running in
    // this process is waited for without the lock (other users of the share need not queue behind the wait), then
    // the lock is taken again and the look repeated.
    while removals.unsettled_now(cx, &h, volume_id, &root).await? {
        drop(mapping);
        if let Some(why) = removals.wait_settled(cx, &h, volume_id, &root).await? {
            if fresh {
                cx.store().remove_volume(volume_id).await?;
            }
            return Err(Error::Unavailable(why));
        }
        mapping = lock_mapping(cx, fresh.then_some(mappings), volume_id, &root).await?;
    }
    // Each creating call below (the mapping with its link, the subDir) is announced in the record first, durable, and
    // run to its end (`crate::lifecycle::creation`): an unstage after this stage gave up waits for it.
    let announce = async |earlier: Option<&Creation>, call: HostOp, path: Option<&HostPath>| {
        let c = removals.1.announce(
            h.host(),
            volume_id,
            earlier,
            call,
            path.map(|p| p.as_str().to_owned()),
        );
        let announced = SmbRecord {
            creating: Some(c.clone()),
            ..wanted.clone()
        };
        cx.store()
            .put_volume(&record.with_details(&announced)?)
            .await?;
        Ok::<_, Error>(c)
    };
    let mut creation =
        announce(wanted.creating.as_ref(), HostOp::NewSmbGlobalMapping, None).await?;
    // What this call may have made, for the rollback of a definite failure.
    let mut made = Made::default();
    let cred = vol.credential.as_ref();
    let result = async {
        if let Some(sub) = &sub {
            debug!(sub_dir = %vol.full_path(), "ensuring subDir exists on the share through a temporary link");
            let on = Mapping {
                cx,
                h: &h,
                removals,
                volume_id,
                staging,
                cred,
                options: &vol.options,
                repair,
            };
            on.map(&mut mapping, &mut made, &vol.source)
                .await
                .map_err(|e| map_error(e, vol, &vol.source))?;
            mappings.mapped(&root);
            creation = announce(Some(&creation), HostOp::Mkdir, Some(sub)).await?;
            if let Err(e) = removals.mkdir_to_end(&h, volume_id, sub).await {
                return Err(sub_dir_error(&h, staging, vol, e).await);
            }
            h.rmdir(staging).await.map_err(|e| host_error(e, staging))?;
            made.link = false;
            creation = announce(Some(&creation), HostOp::NewSmbGlobalMapping, None).await?;
        }
        let full = vol.full_path();
        let on = Mapping {
            cx,
            h: &h,
            removals,
            volume_id,
            staging,
            cred,
            options: &vol.options,
            repair,
        };
        on.map(&mut mapping, &mut made, &full)
            .await
            .map_err(|e| map_error(e, vol, &full))?;
        mappings.mapped(&root);
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
            // A stage that only joined the mapping others made (the shared side) may not have given it its credential:
            // its fingerprint says the mapping's only when a sibling's record proves the same one (`rotate.rs`).

            let credential = match credential {
                Some(fp) if !made.mapping && !rotate::joined_same(cx, volume_id, &root, &fp)? => {
                    None
                }
                fp => fp,
            };
            let facts = SmbRecord {
                mapped: true,
                credential,
                // The announcement of the creating calls is retired with this write: they all answered.
                creating: None,
                ..wanted
            };
            let staged = cx
                .store()
                .put_volume(&cx.staged(&record.with_details(&facts)?));
            drop(mapping);
            staged.await?;
            removals.1.forget(volume_id, &creation);
            info!(staging = %staging, remote = %vol.full_path(), "volume staged");
            Ok(())
        }
        Err(err @ (Error::DeadlineExceeded(_) | Error::Unavailable(_))) => {
            warn!(error = %err, "stage outcome uncertain: keeping the record for kubelet's retry or unstage");
            Err(err)
        }
        Err(err) if fresh => {
            let rollback = Rollback {
                cx,
                h: &h,
                mappings,
                removals,
                volume_id,
                staging,
                vol,
            };
            let err = rollback.run(mapping, made, err).await?;
            if cx.store().volume(volume_id)?.is_none() {
                removals.1.forget(volume_id, &creation);
            }
            Err(retired(cx, removals, volume_id, err).await?)
        }
        Err(err) => Err(retired(cx, removals, volume_id, err).await?),
    }
}

/// Before a first stage (no record), on a backend that can read links (native) and does not count the share's mapping
/// as the driver's: this volume's own staging link into the same share path, left by a stage whose record was lost
/// with the state directory (ledgers included), is adopted (`adopt.rs`: the record, marked `adopted`, and the
/// mapping claimed as the driver's), so the stage goes on as a re-stage of the driver's own objects and their
/// unstage removes the mapping instead of taking it for someone else's (issue 37 item 15). Costs one `ReadLink` of
/// the staging path on those first stages only.
async fn adopt_own<H: Host>(
    cx: Context<'_, H>,
    at: StageAt<'_>,
    vol: &SmbVolume,
    d: Deadline,
) -> Result<Option<std::sync::Arc<VolumeRecord>>, Error> {
    let h = cx.calls(d);
    let root = vol.source.root_key();
    if !h.host().capabilities().read_links
        || h.host().made_by_wincsi(SharedObject::SmbMapping(&root)) != Some(false)
    {
        return Ok(None);
    }
    let found = Found {
        volume_id: at.volume_id,
        staging: at.staging,
    };
    let Some(mut rec) = super::adopt::adopt(cx, found, d).await? else {
        return Ok(None);
    };
    if !rec
        .details::<SmbRecord>()?
        .is_some_and(|r| r.same_volume(&SmbRecord::of(vol)))
    {
        debug!(staging = %at.staging, "the link at the staging path is another share path's: not adopted");
        return Ok(None);
    }
    rec.adopted = true;
    rec.ephemeral = at.ephemeral;
    // The link proves this driver staged the volume on the share, the proof the volume records give at start (they
    // seed the ledger): the mapping is counted as the driver's (native ledger), as the record is written.
    h.host()
        .claim(SharedObject::SmbMapping(&root), d)
        .await
        .map_err(|e| host_error(e, &vol.source.root()))?;
    cx.store().put_volume(&rec).await?;
    info!(staging = %at.staging, "this volume's own staging link (its record lost) adopted: re-staging it");
    Ok(Some(std::sync::Arc::new(rec)))
}

/// What a stage may have made on the host, so that the rollback of a definite failure removes it. A call whose
/// outcome is unknown counts as possibly done.
#[derive(Debug, Default)]
struct Made {
    /// A link this call made may be at the staging path (the only thing a rollback may remove there).
    link: bool,
    /// This call may have created the share's mapping: a `NewSmbGlobalMapping` it made under the exclusive side
    /// succeeded, or failed in a way that does not prove the mapping step refused (csi-proxy maps first and links
    /// second, and a failed link leaves the mapping it just made: PowerShell-era `New-Item` refuses a missing target).
    mapping: bool,
}

/// Whether a failed `NewSmbGlobalMapping` proves that no mapping was made: Windows refused the mapping itself (another
/// user 1219, server 53, share 67, credentials 1326/86, a stale mapping 85). Any other failure may come from the link
/// made after the mapping.
fn refused_before_mapping(kind: HostErrorKind) -> bool {
    matches!(
        kind,
        HostErrorKind::MultipleConnections
            | HostErrorKind::NetworkPathNotFound
            | HostErrorKind::NetworkNameNotFound
            | HostErrorKind::LogonFailure
            | HostErrorKind::StaleMapping
            // An option the node lacks, or a weaker mapping: refused before any WMI method.
            | HostErrorKind::NotSatisfiable
    )
}

/// What a stage maps with: the staging link at `staging`, the volume's credential and the repair it may make.
struct Mapping<'a, H> {
    cx: Context<'a, H>,
    h: &'a Calls<'a, H>,
    removals: &'a Removals,
    volume_id: &'a str,
    staging: &'a HostPath,
    cred: Option<&'a SmbCredential>,
    options: &'a SmbMappingOptions,
    repair: MapRepair,
}

impl<H: Host> Mapping<'_, H> {
    /// `NewSmbGlobalMapping` of `remote` with the staging link, noting in `made` what it may have made. Once the share
    /// is mapped, the other stages queued on it go on under the shared side while this one finishes.
    async fn map(
        &self,
        mapping: &mut KeyedGuard,
        made: &mut Made,
        remote: &UncPath,
    ) -> Result<(), MapFailure> {
        let result = map_locked(
            self.cx,
            self.h,
            self.removals,
            mapping,
            self.volume_id,
            remote,
            self.staging,
            self.cred,
            self.options,
            self.repair,
        )
        .await;
        let possibly_made = match &result {
            Ok(()) => true,
            Err(MapFailure::Host(e)) => !refused_before_mapping(e.kind),
            // Refused before any removal, after a call that answered the mapping needs repair.
            Err(MapFailure::Refused(_)) => false,
        };
        if possibly_made {
            made.link = true;
            // Under the shared side the mapping was there before this call (other volumes use it): never this call's.

            made.mapping |= !mapping.is_shared();
        }
        if result.is_ok() {
            mapping.downgrade();
        }
        match result {
            Err(MapFailure::Host(mut e)) if e.kind == HostErrorKind::NotSatisfiable => {
                e.message.push_str(&self.share_users(remote));
                Err(MapFailure::Host(e))
            }
            other => other,
        }
    }

    /// For a refusal of the share's mapping (a weaker mapping, an option the node lacks): which other volumes this
    /// node has staged on the share, and the options they asked (none of a secret), as the 1219 refusal names them.
    fn share_users(&self, remote: &UncPath) -> String {
        let root = remote.root_key();
        let users: Vec<String> = self
            .cx
            .records::<super::SmbRecord>()
            .unwrap_or_default()
            .into_iter()
            .filter(|(rec, r)| rec.volume_id != self.volume_id && names_equal(&r.root, &root))
            .map(|(rec, r)| match r.options.describe() {
                d if d.is_empty() => format!("{:?} (no options)", rec.volume_id),
                d => format!("{:?} ({d})", rec.volume_id),
            })
            .collect();
        if users.is_empty() {
            "; no other volume on this node uses the share".to_owned()
        } else {
            format!(
                "; volumes on this node using the share: {}",
                users.join(", ")
            )
        }
    }
}

/// The rollback of a fresh stage's definite failure: kubelet treats the error as final and will not call NodeUnstage,
/// so every step this call may have made is undone — each attempted even when another could not be — and the record
/// goes only when nothing is left; what could not be undone is named in the error, and the record stays for it.
struct Rollback<'a, H> {
    cx: Context<'a, H>,
    h: &'a Calls<'a, H>,
    mappings: &'a Mappings,
    removals: &'a Removals,
    volume_id: &'a str,
    staging: &'a HostPath,
    vol: &'a SmbVolume,
}

impl<H: Host> Rollback<'_, H> {
    async fn run(self, mut mapping: KeyedGuard, made: Made, err: Error) -> Result<Error, Error> {
        let Self {
            cx,
            h,
            mappings,
            removals,
            volume_id,
            staging,
            vol,
        } = self;
        debug!(error = %err, ?made, "stage failed: rolling back what this call may have made");
        let mut left = Vec::new();
        if made.link {
            match h.rmdir(staging).await {
                Ok(()) => {}
                // Already gone (or never made): nothing to undo there.
                Err(e) if e.kind == HostErrorKind::NotFound => {}
                Err(e) => left.push(format!("the staging link at {staging} ({})", e.message)),
            }
        }
        if made.mapping {
            let root = vol.source.root_key();
            // One this call made may have gained users since it gave up the exclusive side: they are counted again
            // under that side. A mapping another volume uses is never removed.
            mapping.upgrade().await;
            if other_share_users(cx, volume_id, &root)? == 0 && cx.may_remove_shared(0, &root) {
                mappings.forget(&root);
                // Announced in the record first and run to its end (`removal.rs`): a stage of the share arriving
                // after this one gave up waits for it.
                match removals
                    .remove_mapping(cx, h, volume_id, &vol.source.root())
                    .await?
                {
                    Ok(()) => {}
                    Err(e) if e.kind == HostErrorKind::NotFound => {}
                    Err(e) => left.push(format!("the SMB mapping of {root} ({})", e.message)),
                }
            }
        }
        drop(mapping);
        if left.is_empty() {
            cx.store().remove_volume(volume_id).await?;
            return Ok(err);
        }
        let left = left.join(" and ");
        warn!(left = %left, "rollback incomplete: keeping the volume's record");
        Ok(noted(
            err,
            &format!(
                "; the rollback could not remove {left}: the volume's record is kept, so NodeUnstageVolume or the \
                 next NodeStageVolume finishes the cleanup"
            ),
        ))
    }
}

/// A definite failure that keeps the record: the announcement of creating calls that all answered leaves it.
async fn retired<H: Host>(
    cx: Context<'_, H>,
    removals: &Removals,
    volume_id: &str,
    err: Error,
) -> Result<Error, Error> {
    fn slot(r: &mut SmbRecord) -> &mut Option<Creation> {
        &mut r.creating
    }
    removals.1.retire_answered(cx, volume_id, slot).await?;
    Ok(err)
}

/// `err` with `note` appended to its message (same code).
fn noted(err: Error, note: &str) -> Error {
    match err {
        Error::InvalidArgument(m) => Error::InvalidArgument(m + note),
        Error::NotFound(m) => Error::NotFound(m + note),
        Error::AlreadyExists(m) => Error::AlreadyExists(m + note),
        Error::FailedPrecondition(m) => Error::FailedPrecondition(m + note),
        Error::Internal(m) => Error::Internal(m + note),
        other => other,
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

/// A failed `Mkdir` of the subDir through the staging link. "Not found" or "already exists" is what a link whose target
/// does not exist gives (WMI-era csi-proxy links to a missing source path; Go's `MkdirAll` then meets the link itself):
/// one `IsSymlink` tells, and such a source path is named as FAILED_PRECONDITION, like the link the PowerShell era
/// refuses.
async fn sub_dir_error<H: Host>(
    h: &Calls<'_, H>,
    staging: &HostPath,
    vol: &SmbVolume,
    e: HostError,
) -> Error {
    if matches!(
        e.kind,
        HostErrorKind::NotFound | HostErrorKind::AlreadyExists
    ) {
        match reaches_share(h, staging).await {
            Ok(Err(why)) => {
                return Error::FailedPrecondition(format!(
                    "{} is not reachable through the SMB mapping ({why}), so the subDir cannot be created in it: the \
                     path does not exist on the share, or the mapping is not usable; check the volume's source",
                    vol.source
                ));
            }
            Err(uncertain) => return uncertain,
            Ok(Ok(())) => {}
        }
    }
    host_error(e, &vol.full_path())
}

/// `staging\subDir`, the path the subDir is created through (`None` without a subDir); InvalidArgument when it breaks a
/// host-path rule (at most 260 bytes: csi-proxy's `MaxPathLengthWindows`, which the driver applies on every backend).
fn sub_dir_path<H: Host>(
    cx: Context<'_, H>,
    staging: &HostPath,
    vol: &SmbVolume,
) -> Result<Option<HostPath>, Error> {
    if vol.sub_dir.is_empty() {
        return Ok(None);
    }
    let sub = vol.sub_dir.join("\\");
    staging.join(&sub, cx.kubelet_root()).map(Some).map_err(|e| {
        Error::InvalidArgument(format!(
            "subDir {sub:?} cannot be created through the staging path {staging}: {e}. Rule: the staging path, a \
             backslash and the subDir are at most {MAX_PATH_BYTES} bytes (csi-proxy's limit on local paths); use a \
             shorter subDir"
        ))
    })
}

/// A failed `NewSmbGlobalMapping`. Without credentials, a failure Windows gives no known reason for is csi-proxy's own
/// limit: v1.1.x and v1.2.x (PowerShell) always build a `PSCredential` and cannot map with the node's identity.
fn map_error(e: MapFailure, vol: &SmbVolume, subject: &dyn std::fmt::Display) -> Error {
    let e = match e {
        MapFailure::Host(e) => e,
        MapFailure::Refused(err) => return err,
    };
    if e.kind == HostErrorKind::NotFound {
        // The mapping is made first, then the link to the full remote path: PowerShell-era csi-proxy (`New-Item
        // -ItemType SymbolicLink`, Windows PowerShell 5.1) refuses a link to a path that does not exist.
        return Error::FailedPrecondition(format!(
            "{subject} does not exist on the share, so csi-proxy could not link the staging path to it ({}); check \
             the volume's source and subDir, or create the directory on the share",
            e.message
        ));
    }
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

/// `authentication: machine` only where the driver makes the mapping itself, as SYSTEM (Microsoft, "LocalSystem
/// Account": such a process "presents the computer's credentials to remote servers"): the native backend, which
/// also lists the node's mappings. Refused before any record or host call elsewhere, with the reason.
fn machine_account_here<H: Host>(host: &H, vol: &SmbVolume) -> Result<(), Error> {
    if !vol.machine || host.capabilities().list_smb_mappings {
        return Ok(());
    }
    Err(super::options::machine_account_refusal(
        &vol.source.to_string(),
    ))
}
