//! The node's SMB global mappings: creating one (repairing one a reboot left Disconnected), removing one, the
//! per-share lock that lets stages on an already-mapped share overlap, and the one-principal-per-server rule (Windows
//! error 1219).

use tracing::{debug, info, warn};

use super::adopt::principal_unknown;
use super::removal::Removals;
use super::{Mappings, SmbRecord, SmbVolume};
use crate::error::Error;
use crate::host::name::starts_with_name;
use crate::host::{
    Host, HostError, HostErrorKind, HostOp, HostPath, HostResult, SmbCredential, SmbMappingOptions,
    UncPath, names_equal,
};
use crate::lifecycle::{Calls, Context};
use crate::locks::KeyedGuard;
use crate::state::{Phase, VolumeRecord};

/// `NewSmbGlobalMapping` of `remote` with a link at `link`, with the volume's SMB client options: a creating call of
/// `volume_id`'s stage, announced in its record by the stage and run to its end on its own task
/// (`crate::lifecycle::creation`), so an unstage after the stage gave up waits for it rather than answer OK before the
/// mapping and link land.
async fn new_mapping<H: Host>(
    h: &Calls<'_, H>,
    removals: &Removals,
    volume_id: &str,
    remote: &UncPath,
    link: &HostPath,
    cred: Option<&SmbCredential>,
    options: &SmbMappingOptions,
) -> HostResult<()> {
    let (r, l, c, o) = (remote.clone(), link.clone(), cred.cloned(), *options);
    h.raw(
        HostOp::NewSmbGlobalMapping,
        remote,
        removals.1.to_end(
            h.host(),
            volume_id,
            HostOp::NewSmbGlobalMapping,
            h.deadline(),
            move |host: H, d| async move {
                host.new_smb_global_mapping_with(&r, Some(&l), c.as_ref(), &o, d)
                    .await
            },
        ),
    )
    .await
}

/// `RemoveSmbGlobalMapping` of `remote`'s root.
pub(super) async fn remove_mapping<H: Host>(h: &Calls<'_, H>, remote: &UncPath) -> HostResult<()> {
    h.raw(
        HostOp::RemoveSmbGlobalMapping,
        remote,
        h.host().remove_smb_global_mapping(remote, h.deadline()),
    )
    .await
}

/// When a failed `NewSmbGlobalMapping` is repaired by removing the share's mapping and creating it once more.
///
/// csi-proxy counts only an `OK` mapping as mapped and creates over any other without removing it first, which
/// Windows may refuse: with error 85 (a stale mapping; no public report shows it, kept for robustness), or — what
/// public reports show after a reboot, when every mapping is `Disconnected` — with error 1219, the same answer as for
/// a mapping under another user. 1219 is repaired only when this node's own records prove it mapped this share under
/// the requested principal ([`SmbRecord::proves_mapping`]: a stage of a volume on it completed, and the record has
/// kept that knowledge since, also through a re-stage that failed), so a mapping someone else made under another user
/// is never removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MapRepair {
    /// This node's records map the share under the requested principal.
    mapped_by_us: bool,
}

impl MapRepair {
    /// The repair allowed for a stage of `volume_id` (`existing`: its record before this stage touched it).
    pub(super) fn of<H: Host>(
        cx: Context<'_, H>,
        volume_id: &str,
        existing: Option<&VolumeRecord>,
        vol: &SmbVolume,
    ) -> Result<Self, Error> {
        let wanted = SmbRecord::of(vol);
        let proves =
            |rec: &VolumeRecord, r: &SmbRecord| r.proves_mapping(rec) && r.same_mapping(&wanted);
        let mut mapped_by_us = false;
        if let Some(rec) = existing
            && let Some(r) = rec.details::<SmbRecord>()?
        {
            mapped_by_us = proves(rec, &r);
        }
        if !mapped_by_us {
            mapped_by_us = cx
                .first_record::<SmbRecord>(|rec, r| rec.volume_id != volume_id && proves(rec, r))?
                .is_some();
        }
        Ok(Self { mapped_by_us })
    }

    fn repairs(self, e: &HostError) -> bool {
        e.kind == HostErrorKind::StaleMapping
            || (e.kind == HostErrorKind::MultipleConnections && self.mapped_by_us)
    }
}

/// Windows compares account names case-insensitively, through its upcase table for every character.
fn same_principal(a: &str, b: &str) -> bool {
    names_equal(a, b)
}

/// Why a stage's `NewSmbGlobalMapping` failed.
#[derive(Debug)]
pub(super) enum MapFailure {
    /// The host's answer.
    Host(HostError),
    /// The driver's own answer (the mapping needs repair, but another staged volume still reaches its share through
    /// it: refused, nothing removed; FAILED_PRECONDITION naming the volume), returned as it is.
    Refused(Error),
}

impl From<HostError> for MapFailure {
    fn from(e: HostError) -> Self {
        Self::Host(e)
    }
}

/// The first other volume on share `root` whose staging link still reaches the share (one `IsSymlink` per other
/// record of the share, only on the repair path): its pods use the mapping, so it must not be force-removed. An
/// uncertain answer is an error (nothing is removed on it).
async fn reaching_user<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    volume_id: &str,
    root: &str,
) -> Result<Option<String>, MapFailure> {
    let others = cx.records::<SmbRecord>().map_err(MapFailure::Refused)?;
    for (rec, facts) in others {
        if rec.volume_id == volume_id || !names_equal(&facts.root, root) {
            continue;
        }
        let Ok(staging) = cx.kubelet_root().host_path(&rec.staging_path) else {
            continue;
        };
        match h.is_symlink(&staging).await {
            Ok(true) => return Ok(Some(rec.volume_id.clone())),
            Ok(false) => {}
            Err(e) if e.kind.is_uncertain() => return Err(e.into()),
            Err(_) => {}
        }
    }
    Ok(None)
}

/// `NewSmbGlobalMapping`, repaired once as [`MapRepair`] allows (the caller holds the share's lock exclusively). A
/// mapping another staged volume still reaches its share through is never removed (`Remove(Force)` would cut its
/// pods' open files): the repair is refused instead.
#[allow(clippy::too_many_arguments)]
async fn map_repairing<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    removals: &Removals,
    volume_id: &str,
    remote: &UncPath,
    link: &HostPath,
    cred: Option<&SmbCredential>,
    options: &SmbMappingOptions,
    repair: MapRepair,
) -> Result<(), MapFailure> {
    match new_mapping(h, removals, volume_id, remote, link, cred, options).await {
        Err(e) if repair.repairs(&e) => {
            let root = remote.root_key();
            if let Some(user) = reaching_user(cx, h, volume_id, &root).await? {
                warn!(root = %root, other_volume = %user, why = %e.message, "the share's mapping needs repair, but \
                      another staged volume still reaches the share through it: left in place");
                return Err(MapFailure::Refused(Error::FailedPrecondition(format!(
                    "the SMB global mapping of {} cannot serve this volume ({}), and volume {user:?} still reaches the \
                     share through it, so wincsi does not remove it (a forced removal would cut that volume's open \
                     files). Check the volume's credentials and the share's permissions; once the other volumes of \
                     the share are unstaged from this node (or their pods moved), the next stage re-creates the \
                     mapping",
                    remote.root(),
                    e.message
                ))));
            }
            info!(root = %remote.root(), kind = ?e.kind, "the share's old mapping blocks a new one and no other staged \
                  volume reaches the share through it: removing it and retrying once");
            // Announced in this stage's record and run to its end (`removal.rs`): should it outlive this stage,
            // the next stage of the share waits for it rather than map the share beneath it.
            match removals
                .remove_mapping(cx, h, volume_id, &remote.root())
                .await
                .map_err(MapFailure::Refused)?
            {
                Ok(()) => {}
                Err(e) if e.kind == HostErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            Ok(new_mapping(h, removals, volume_id, remote, link, cred, options).await?)
        }
        other => Ok(other?),
    }
}

/// `NewSmbGlobalMapping` under a share's mapping lock. Under the shared side only the plain call runs (it adds a link
/// to the existing mapping); a repair (remove + re-create) changes the mapping under other users, so it first upgrades
/// to the exclusive side and then runs the full repairing sequence afresh (another caller may have repaired it).
#[allow(clippy::too_many_arguments)]
pub(super) async fn map_locked<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    removals: &Removals,
    guard: &mut KeyedGuard,
    volume_id: &str,
    remote: &UncPath,
    link: &HostPath,
    cred: Option<&SmbCredential>,
    options: &SmbMappingOptions,
    repair: MapRepair,
) -> Result<(), MapFailure> {
    if guard.is_shared() {
        match new_mapping(h, removals, volume_id, remote, link, cred, options).await {
            Err(e) if repair.repairs(&e) => {
                info!(root = %remote.root(), "the mapping needs repair: taking the exclusive mapping lock");
                guard.upgrade().await;
            }
            other => return Ok(other?),
        }
    }
    map_repairing(
        cx, h, removals, volume_id, remote, link, cred, options, repair,
    )
    .await
}

/// Lock a share's mapping for a stage of `volume_id`: the shared side when the mapping exists (this process made it,
/// see [`Mappings`], when `mappings` is given; or another volume is Staged on the share: it only needs a link, so stages of many volumes on one
/// share overlap), the exclusive side otherwise (this stage may create or repair the mapping). Unstage and every mapping removal take
/// the exclusive side, so a mapping is never removed while a stage holds either side.
pub(super) async fn lock_mapping<H: Host>(
    cx: Context<'_, H>,
    mappings: Option<&Mappings>,
    volume_id: &str,
    root: &str,
) -> Result<KeyedGuard, Error> {
    // The mapping exists: this process made it (and has not removed it since), or another volume is Staged on it.
    let other_staged = || -> Result<bool, Error> {
        Ok(mappings.is_some_and(|m| m.known(root))
            || cx
                .first_record::<SmbRecord>(|r, f| {
                    r.volume_id != volume_id
                        && r.phase == Phase::Staged
                        && names_equal(&f.root, root)
                })?
                .is_some())
    };
    if !other_staged()? {
        // A first user queued behind the one making the mapping stops waiting for the exclusive side as soon as the
        // mapping is made (its maker keeps only the shared side until its stage ends), instead of waiting for that
        // whole stage and then for every first user queued ahead of it.
        let guard = match mappings {
            Some(m) => {
                cx.object_locks()
                    .lock_unless(root, m.until_known(root))
                    .await
            }
            None => Some(cx.object_locks().lock(root).await),
        };
        if let Some(guard) = guard
            && !other_staged()?
        {
            return Ok(guard);
        }
        // Stages that queued together as first users: one created the mapping while this one waited, so this
        // one only adds a link. Release the exclusive side if it has it (the next queued first user re-checks the
        // same way) and continue under the shared side.
        debug!(root = %root, "another volume mapped the share meanwhile: taking the shared mapping lock");
    }
    let mut guard = cx.object_locks().lock_shared(root).await;
    // The other users may have been unstaged (and the mapping removed) while this call waited: re-check under
    // the lock, where they can no longer go.
    if !other_staged()? {
        debug!(root = %root, "no other staged user any more: taking the exclusive mapping lock");
        guard.upgrade().await;
    }
    Ok(guard)
}

/// Refuse up front what Windows would refuse with 1219: another volume on the same server under another principal
/// (a second principal on the same root would otherwise silently reuse the first one's mapping). The caller holds the
/// server's lock and writes the record that claims its principal before releasing it, so the check and the claim are
/// one step.
pub(super) fn check_principal<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    vol: &SmbVolume,
) -> Result<(), Error> {
    let server = format!("\\\\{}\\", vol.source.server_key());
    let mine = vol.principal().unwrap_or("");
    // An adopted record whose principal is unknown neither refuses nor matches: Windows decides (1219).
    let conflict = cx.first_record::<SmbRecord>(|rec, facts| {
        rec.volume_id != volume_id
            && !principal_unknown(rec, facts)
            && starts_with_name(&facts.root, &server)
            && !same_principal(facts.principal.as_deref().unwrap_or(""), mine)
    })?;
    if let Some((rec, facts)) = conflict {
        let theirs = match facts.principal.as_deref() {
            None | Some("") => "the node's own identity (no credential: its computer account)",
            Some(p) => p,
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
    Ok(())
}
