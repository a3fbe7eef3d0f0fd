//! The creating calls of an SMB stage that may outlive it (`crate::lifecycle::creation`): the subDir's `Mkdir` run to
//! its end, what an unstage looks at before it proceeds, and the empty directories a late `Mkdir` leaves at the
//! staging path.
//!
//! A `Mkdir` of the subDir through the staging link that lands after an unstage removed the link creates the subDir's
//! path as local, empty directories under the staging path (Go's `os.MkdirAll` on every csi-proxy release, and the
//! native backend's parents-first `CreateDirectoryW`), which a later stage's non-forced `Rmdir` refuses as non-empty.
//! This process waits for its own calls; a restarted driver may not see such a call (its look at the staging path
//! shows the link), so a stage that finds exactly the subDir's path there, empty, removes it (non-forced `Rmdir`s,
//! deepest first: never data) before it refuses anything.

use tracing::{debug, info};

use super::SmbRecord;
use super::SmbVolume;
use super::removal::Removals;
use crate::error::Error;
use crate::host::{Host, HostErrorKind, HostOp, HostPath, HostResult};
use crate::lifecycle::creation::Settled;
use crate::lifecycle::{Calls, Context, host_error};
use crate::state::VolumeRecord;

impl Removals {
    /// `Mkdir` of a subDir through the staging link, a creating call of `volume_id`'s stage, watched
    /// (`Creations::watched`): one host call that lands by itself once issued, bounded by the RPC's deadline as before
    /// (csi-proxy's connection handling sees its deadline pass), its late result shown by the subDir itself.
    pub(super) async fn mkdir_to_end<H: Host>(
        &self,
        h: &Calls<'_, H>,
        volume_id: &str,
        path: &HostPath,
    ) -> HostResult<()> {
        self.1.watched(volume_id, h.mkdir(path)).await
    }

    /// Before an unstage of `rec` (facts `facts`): UNAVAILABLE while a creating call its stage announced may still
    /// run (`crate::lifecycle::creation`). What such a call makes shows as something at the staging path: the
    /// mapping's link is the last step of `NewSmbGlobalMapping` (and of the native backend's pair of calls), and the
    /// path was emptied before it was issued.
    pub(super) async fn creation_settled<H: Host>(
        &self,
        cx: Context<'_, H>,
        h: &Calls<'_, H>,
        rec: &VolumeRecord,
        facts: &SmbRecord,
        staging: &HostPath,
    ) -> Result<(), Error> {
        let Some(c) = &facts.creating else {
            return Ok(());
        };
        // What a `NewSmbGlobalMapping` makes shows as something at the staging path (its link is the last step, and
        // the path was emptied before it was issued). A subDir's `Mkdir` through the link shows as the subDir, or as
        // nothing at the staging path any more: the stage went past it (its next step removes the link).
        let exists = async |p: &HostPath| match h.path_exists(p).await {
            Ok(there) => Ok(there),
            Err(e) if e.kind.is_uncertain() => Err(host_error(e, p)),
            Err(_) => Ok(false),
        };
        let sub = (c.call == HostOp::Mkdir.name())
            .then(|| {
                c.path
                    .as_deref()
                    .and_then(|p| cx.kubelet_root().host_path(p).ok())
            })
            .flatten();
        let (exists, sub) = (&exists, &sub);
        let shows = move || async move {
            let at_staging = exists(staging).await?;
            Ok(match sub {
                Some(sub) => !at_staging || exists(sub).await?,
                None => at_staging,
            })
        };
        let what = format!(
            "the SMB mapping of {} with its staging link (or the subDir made through it)",
            facts.root
        );
        match self.1.settled(h, &rec.volume_id, c, &what, shows).await? {
            Settled::No(why) => Err(Error::Unavailable(why)),
            Settled::Yes(why) => {
                debug!(volume_id = %rec.volume_id, why, "the stage's creating calls are over: unstaging");
                Ok(())
            }
        }
    }
}

/// A first stage's `Rmdir` of the staging path was refused as non-empty: when all that is there is the volume's own
/// subDir path, empty (a late `Mkdir`, module docs), it goes — each level with a non-forced `Rmdir`, deepest first —
/// and the staging path after it. `Ok(false)` when something else is there (the caller refuses as before).
pub(super) async fn clear_late_sub_dir<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    staging: &HostPath,
    vol: &SmbVolume,
) -> Result<bool, Error> {
    if vol.sub_dir.is_empty() {
        return Ok(false);
    }
    let mut levels = Vec::new();
    for k in 1..=vol.sub_dir.len() {
        let Ok(p) = staging.join(&vol.sub_dir[..k].join("\\"), cx.kubelet_root()) else {
            return Ok(false);
        };
        levels.push(p);
    }
    for p in levels.iter().rev() {
        match h.rmdir(p).await {
            Ok(()) => {}
            Err(e) if e.kind == HostErrorKind::NotFound => {}
            Err(e) if e.kind.is_uncertain() => return Err(host_error(e, p)),
            Err(e) => {
                debug!(path = %p, error = %e.message, "not the subDir's empty path alone: left");
                return Ok(false);
            }
        }
    }
    match h.rmdir(staging).await {
        Ok(()) => {}
        Err(e) if e.kind == HostErrorKind::NotFound => {}
        Err(e) if e.kind.is_uncertain() => return Err(host_error(e, staging)),
        Err(_) => return Ok(false),
    }
    info!(staging = %staging, "removed the empty subDir path a late Mkdir left at the staging path");
    Ok(true)
}
