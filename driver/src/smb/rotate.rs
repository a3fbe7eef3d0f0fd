//! SMB credentials that rotate without deleting pods (issue 40 item 3).
//!
//! With the chart's `csiDriver.requiresRepublish`, kubelet calls NodePublishVolume again for every mounted volume at
//! each pod sync (every 1–1.5 min, `syncFrequency` with jitter), on the same target and without unpublishing, and
//! passes the PersistentVolume's `nodePublishSecretRef` Secret as it is *now* (re-read on every call, with the node's
//! own authorisation; `/work/shared/reference/kubelet-csi-paths.md` §6). A share's credentials otherwise reach the
//! driver only at NodeStageVolume, which kubelet calls again only after a reboot or once every pod of the volume is
//! gone (csi-driver-smb #877, #551, #1194). So a PV whose node-publish Secret is its node-stage Secret rotates:
//!
//! | The republish's credential (against the record's fingerprint) | Host calls | Answer |
//! | --- | --- | --- |
//! | none (no node-publish Secret, `authentication: machine`, no `username`/`password`) | none | the publish as before |
//! | the same principal and password | none (the SMB side; the lifecycle's repeated publish checks the pod's link) | the publish as before |
//! | other, and the staging link still reaches the share | `IsSymlink(staging)` | kept as it is (`kept`): the mapping's SMB session stays authenticated with the old password, and re-creating it would cut this volume's own pods' open files; the record keeps the old fingerprint, so every republish looks again until the mapping stops working |
//! | other, and the staging link does not reach the share (the server refuses the old password, the mapping went `Disconnected` or `Unavailable`) | the re-stage's: `IsSymlink` → `Rmdir(staging)` → `NewSmbGlobalMapping` with the new credential (→ on 1219/85 or a stale mapping: `RemoveSmbGlobalMapping` → `NewSmbGlobalMapping`) → `IsSymlink` | re-created (`recreated`), the new fingerprint recorded; or the re-stage's error (`failed`) |
//!
//! The re-creation is the stage's own repair (`stage.rs`, `mapping.rs`), under the same locks and with the same
//! guards: the server's lock and the one-principal-per-server check, the share's exclusive lock for a removal, a
//! removal announced in the record and run to its end (`removal.rs`: a stage of the share waits for one that outlives
//! this call), a mapping removed only when no *other* staged volume still reaches the share through it (its pods' open
//! files would be cut: the error names that volume and says what to do), and, natively, only a mapping wincsi made.
//! Other volumes of the share whose links do not reach it either share this volume's broken mapping: their open files
//! are already cut by the server's refusal, and the re-created mapping serves their links again.
//!
//! A re-stage that fails leaves the record `staging` (its mapping proven the driver's as before); kubelet's next
//! republish of the still-published volume retries it, and NodePublishVolume answers the error meanwhile (kubelet
//! shows it as the pod's `FailedMount` event and keeps the pod running).
//!
//! # The fingerprint
//!
//! It says which credential the share's mapping holds, as far as the driver knows: a stage that made (or re-made) the
//! mapping records its own; a stage that joined a mapping other volumes made records its own only when one of theirs
//! records the same, else none (so a volume staged with a newer Secret than the mapping's does not hide the mapping's
//! older credential: its republishes keep looking at the mapping until a re-creation records one).
//!
//! HMAC-SHA256 (`ring`) of the principal (as Windows compares names) and the password under a random 256-bit key made
//! once per node and kept in `--state-dir` ([`KEY_FILE`]; `0600` on Unix; on Windows the state directory's ACL), so the
//! records, which anyone able to read the state directory may copy, never hold the secret nor a hash of it that a
//! dictionary could invert without the key. Never logged. A key that cannot be read or made leaves the fingerprint out
//! (a warning): rotation then looks at the mapping on every republish, as for records of earlier versions.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ring::hmac;
use ring::rand::SecureRandom;
use tracing::{debug, info, warn};

use super::{Mappings, SmbRecord, SmbVolume, parse_stage, reaches_share, removal::Removals, stage};
use crate::error::Error;
use crate::host::{Host, HostPath, name_key, names_equal};
use crate::lifecycle::{Context, PublishRequest, StageAt, StageRequest};
use crate::locks::Deadline;
use crate::state::{Phase, VolumeRecord};

/// The per-node fingerprint key's file in `--state-dir` (64 hex digits).
pub(crate) const KEY_FILE: &str = "smb-credential-key";

/// The node's fingerprint key, read (or made) at its first use and kept for the process.
#[derive(Clone, Default)]
pub(crate) struct CredentialKey(Arc<Mutex<Option<hmac::Key>>>);

impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialKey(..)")
    }
}

impl CredentialKey {
    /// The fingerprint of `vol`'s credential (`None` without one, or when the key cannot be had).
    pub(super) fn fingerprint<H: Host>(
        &self,
        cx: Context<'_, H>,
        vol: &SmbVolume,
    ) -> Option<String> {
        let cred = vol.credential.as_ref()?;
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            match load_or_make(cx.store().dir()) {
                Ok(bytes) => *slot = Some(hmac::Key::new(hmac::HMAC_SHA256, &bytes)),
                Err(e) => {
                    warn!(error = %e, file = KEY_FILE, "the SMB credential fingerprint key cannot be read or made in \
                          the state directory: credentials are not fingerprinted (rotation checks the mapping on \
                          every republish)");
                    return None;
                }
            }
        }
        let key = slot.as_ref()?;
        let mut ctx = hmac::Context::with_key(key);
        ctx.update(b"wincsi-smb-credential-v1\0");
        ctx.update(name_key(cred.principal()).as_bytes());
        ctx.update(b"\0");
        ctx.update(cred.password().expose().as_bytes());
        Some(format!("hmac-sha256:{}", hex(ctx.sign().as_ref())))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The key in `dir` ([`KEY_FILE`]), made there first when it is missing or unreadable as a key (a crash while it was
/// written): a new key only makes the fingerprints recorded under the old one differ, which costs one look at the
/// mapping per republish, never a re-creation of a working one. Written to a temporary file (`0600` on Unix),
/// flushed, then renamed over the name, so a reader never sees half a key.
fn load_or_make(dir: &Path) -> std::io::Result<[u8; 32]> {
    let path = dir.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            if let Some(key) = unhex(&text) {
                return Ok(key);
            }
            warn!(file = %path.display(), "the SMB credential fingerprint key is damaged: making a new one");
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut key = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| std::io::Error::other("the system's random number generator failed"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{KEY_FILE}.tmp"));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(hex(&key).as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &path)?;
    // The rename's directory entry (best effort: Windows cannot open a directory as a file).
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    info!(file = %path.display(), "made this node's SMB credential fingerprint key");
    Ok(key)
}

/// Whether another volume's record on share `root` holds fingerprint `fp`: a stage that joined the share's existing
/// mapping (it did not make it) records its credential's fingerprint only then; otherwise the mapping may hold
/// another credential, and the record says none (every republish then looks at the mapping once).
pub(super) fn joined_same<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    root: &str,
    fp: &str,
) -> Result<bool, Error> {
    Ok(cx
        .first_record::<SmbRecord>(|rec, f| {
            rec.volume_id != volume_id
                && names_equal(&f.root, root)
                && f.credential.as_deref() == Some(fp)
        })?
        .is_some())
}

fn observe(outcome: &'static str) {
    if let Some(m) = crate::metrics::installed() {
        m.observe_credential_rotation(outcome);
    }
}

/// What a NodePublishVolume of the staged share `rec` does with the credential it carries (module docs). Before the
/// lifecycle judges the record's phase: a rotation's re-stage that failed left it `staging`, and this retries it.
#[allow(clippy::too_many_arguments)]
pub(super) async fn republish<H: Host>(
    cx: Context<'_, H>,
    mappings: &Mappings,
    removals: &Removals,
    key: &CredentialKey,
    rec: &VolumeRecord,
    req: &PublishRequest,
    staging: &HostPath,
    d: Deadline,
) -> Result<(), Error> {
    if req.secrets.is_empty() {
        return Ok(());
    }
    let volume_id = rec.volume_id.as_str();
    let vol = match parse_stage(&StageRequest {
        volume_id: req.volume_id.clone(),
        staging_target_path: req.staging_target_path.clone(),
        capability: req.capability.clone(),
        volume_context: req.volume_context.clone(),
        secrets: req.secrets.clone(),
    }) {
        Ok(vol) => vol,
        Err(e) => {
            // The parser's messages name keys, never values.
            warn!(volume_id, error = %e, "the node-publish secret does not give this SMB volume's credentials: not \
                  used for rotation");
            return Ok(());
        }
    };
    let Some(principal) = vol.principal() else {
        return Ok(());
    };
    let Some(facts) = rec.details::<SmbRecord>()? else {
        return Ok(());
    };
    if !facts.same_volume(&SmbRecord::of(&vol)) {
        warn!(volume_id, remote = %vol.full_path(), recorded = %facts.remote_path, "the publish names another share \
              path than the volume was staged with: its credentials are not used for rotation");
        return Ok(());
    }
    let fingerprint = key.fingerprint(cx, &vol);
    let same_principal = names_equal(facts.principal.as_deref().unwrap_or(""), principal);
    if rec.phase == Phase::Staged
        && same_principal
        && fingerprint.is_some()
        && facts.credential == fingerprint
    {
        debug!(
            volume_id,
            "the publish carries the mapping's own SMB credentials: nothing to do"
        );
        return Ok(());
    }
    if rec.phase == Phase::Staged {
        match reaches_share(&cx.calls(d), staging).await? {
            Ok(()) => {
                observe("kept");
                info!(volume_id, principal, recorded_principal = ?facts.principal, "the publish carries other SMB \
                      credentials than the volume's mapping was made with, and the mapping still works: kept as it \
                      is (its session stays authenticated; it is mapped again with these credentials once it stops \
                      working)");
                return Ok(());
            }
            Err(why) => {
                info!(volume_id, principal, why = %why, "the publish carries other SMB credentials and the volume's \
                      mapping no longer reaches the share: mapping it again with them");
            }
        }
    }
    let at = StageAt {
        volume_id,
        staging,
        ephemeral: rec.ephemeral,
    };
    match stage::stage(cx, mappings, removals, at, &vol, fingerprint, d).await {
        Ok(()) => {
            observe("recreated");
            info!(
                volume_id,
                principal, "SMB mapping re-created with the rotated credentials"
            );
            Ok(())
        }
        Err(e) => {
            observe("failed");
            warn!(volume_id, principal, error = %e, "the SMB mapping could not be re-created with the rotated \
                  credentials: kubelet's next republish retries");
            Err(e)
        }
    }
}
