//! Adoption of a staged share whose state record was lost or wiped ([`Protocol::adopt`](crate::lifecycle::Protocol)),
//! on a backend that can read a link's target ([`HostCapabilities::read_links`](crate::host::HostCapabilities): the
//! native one; csi-proxy v1 cannot, so with it nothing is adopted and the lifecycle only removes the link).
//!
//! The proof: `ReadLink(staging)` names a UNC path (`\\server\share\…`, the link `NewSmbGlobalMapping` made). The
//! record names that path and its share root; the principal is unknown (`None`), so the one-account-per-server rule
//! neither refuses nor matches it (`mapping.rs`), and no 1219 repair is ever justified by it.
//!
//! What an adopted record changes: while it exists it counts as a user of the share's mapping (a recorded volume of
//! the same share unstaged meanwhile keeps the mapping). Its own unstage removes the mapping only when no other record
//! names the share, no link the host shows points into it (the staging links of surviving publish records whose
//! volume has no record, read with `ReadLink`) and [`Context::may_remove_shared`] agrees. Limit: volumes whose
//! records *and* publish records were lost are invisible (no backend lists the links under kubelet's tree), so their
//! pods lose the share when the last visible user goes; the README's "State directory" section says so. On the native
//! backend the mapping is removed only if its ledger (in the same state directory) says wincsi created it, so when the
//! whole directory is lost the unstage of an adopted link leaves the mapping (the volumes whose records and publish
//! records went with it may still use it). A *stage* that adopts its own link claims the mapping instead
//! (`stage.rs`, `adopt_own`): kubelet re-stages every volume a pod uses, so the records come back for all of them.

use tracing::{debug, info};

use super::SmbRecord;
use crate::error::Error;
use crate::host::{Host, HostOp, UncPath, names_equal};
use crate::lifecycle::{Calls, Context, Found, host_error};
use crate::locks::Deadline;
use crate::state::{Phase, VolumeRecord};

#[cfg(test)]
mod tests;

/// The record of a staging link into a share at `found.staging`, when the backend can read it (module docs).
pub(super) async fn adopt<H: Host>(
    cx: Context<'_, H>,
    found: Found<'_>,
    d: Deadline,
) -> Result<Option<VolumeRecord>, Error> {
    let h = cx.calls(d);
    if !h.host().capabilities().read_links {
        return Ok(None);
    }
    let staging = found.staging;
    let target = match h
        .raw(HostOp::ReadLink, staging, h.host().read_link(staging, d))
        .await
    {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) if e.kind.is_uncertain() => return Err(host_error(e, staging)),
        Err(e) => {
            debug!(staging = %staging, error = %e.message, "no link to adopt");
            return Ok(None);
        }
    };
    let Ok(remote) = UncPath::parse(&target, "staging link target") else {
        debug!(staging = %staging, target = %target, "the link does not point into a share: not adopted");
        return Ok(None);
    };
    let rec = SmbRecord {
        root: remote.root_key(),
        remote_path: remote.to_string(),
        principal: None,
        mapped: false,
        removing: None,
        options: Default::default(),
        unledgered: false,
        credential: None,
        creating: None,
    };
    info!(staging = %staging, remote = %remote, "staging link into a share without a record: adopting it (principal \
          unknown)");
    VolumeRecord::new(
        found.volume_id,
        Phase::Staged,
        staging.as_str(),
        false,
        &rec,
    )
    .map(Some)
}

/// Whether `rec` is an adopted record whose principal nobody knows (the one-account rule skips it).
pub(super) fn principal_unknown(rec: &VolumeRecord, facts: &SmbRecord) -> bool {
    rec.adopted && facts.principal.is_none()
}

/// How many staging links the host shows into share `root` for volumes without a record, other than `volume_id`: the
/// staging paths of surviving publish records whose volume record is gone, read with `ReadLink` (0 on a backend that
/// cannot read links).
pub(super) async fn unrecorded_links_into<H: Host>(
    cx: Context<'_, H>,
    h: &Calls<'_, H>,
    volume_id: &str,
    root: &str,
) -> Result<usize, Error> {
    if !h.host().capabilities().read_links {
        return Ok(0);
    }
    let mut seen: Vec<String> = Vec::new();
    for p in cx.store().publications()? {
        if p.volume_id == volume_id
            || seen.contains(&p.volume_id)
            || cx.store().volume(&p.volume_id)?.is_some()
        {
            continue;
        }
        let Ok(staging) = cx.kubelet_root().host_path(&p.staging_path) else {
            continue;
        };
        let target = match h
            .raw(
                HostOp::ReadLink,
                &staging,
                h.host().read_link(&staging, h.deadline()),
            )
            .await
        {
            Ok(t) => t,
            Err(e) if e.kind.is_uncertain() => return Err(host_error(e, &staging)),
            Err(_) => None,
        };
        if let Some(remote) = target.and_then(|t| UncPath::parse(&t, "link target").ok())
            && names_equal(&remote.root_key(), root)
        {
            debug!(other_volume = %p.volume_id, staging = %staging, "a link without a record uses the share");
            seen.push(p.volume_id.clone());
        }
    }
    Ok(seen.len())
}
