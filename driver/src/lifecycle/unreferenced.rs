//! Staged volumes kubelet will never unstage, found by a periodic scan (issue 37 item 13).
//!
//! kubelet skips NodeUnstageVolume when the driver does not answer its capability probe at the moment the last pod
//! is deleted (the error is final: the device is marked unmounted), and after a restart or reboot it does not unstage
//! a staged volume whose pod directory is gone (`shared/reference/kubelet-csi-paths.md` §1, §4). Such a volume keeps
//! its SMB mapping or iSCSI session for ever.
//!
//! # What "referenced" means
//!
//! kubelet's only references to a staged volume are the pods' target paths, `<root>\pods\<uid>\volumes\
//! kubernetes.io~csi\<pv>\mount` (links to the staging path, `vol_data.json` beside them; §8), and its calls. No
//! backend can list the kubelet's pod directories (csi-proxy v1 has no directory listing), but the driver's own
//! publish records name every target it linked. A volume is **referenced** when
//!
//! * one of its publish records' targets exists (`PathExists`), or that target's pod directory `<root>\pods\<uid>`
//!   still exists (kubelet is setting the pod up or tearing it down), or
//! * an RPC named it (stage, unstage, publish, unpublish, stats, expansion) within the bound: kubelet retries a failed
//!   publish at least every 2 min 2 s and asks a mounted volume's stats every 1-2 min (§2, §7), so a pod that wants
//!   the volume shows up well within it.
//!
//! The scan asks one `PathExists` per publish record (one more for its pod directory when the target is gone): no
//! other host call, and no host process on any csi-proxy release (filesystem calls are Go `os` calls in csi-proxy's
//! own process, `sim/src/state/processes.rs`). It runs off the RPC path, in the background task (`watch.rs`); what
//! the RPCs pay is one map insert. A volume whose guard an RPC holds is skipped (referenced), as are inline ephemeral
//! volumes (kubelet unpublishes them; no NodeUnstage is involved).
//!
//! # Report, and release only where nothing can use it
//!
//! A volume unreferenced for longer than [`BackgroundSettings::unreferenced_after`](super::BackgroundSettings::unreferenced_after) (`--unreferenced-volume-minutes`,
//! default 60; its clock starts again at each reference, and at the driver's start) is logged once as a warning
//! naming it and the runbook, and counted in `wincsi_state_record_problems{problem="unreferenced"}`.
//!
//! Releasing it (`--release-unreferenced-volumes`, off by default) unstages it as NodeUnstageVolume would: its link or
//! mount point, then the shared mapping or session only when no other record uses it. The default only reports,
//! because what the driver can see is not a proof that nothing uses the volume: a pod whose publish never succeeded
//! has no publish record and no link the driver knows of, and kubelet may be down (so not retrying) for longer than
//! the bound; a record the driver lost (quarantined) may be such a user too. With release on, a volume is released
//! only when none of its publish records' targets nor their pod directories exist, no RPC named it within the bound,
//! and no record is quarantined; should kubelet still want it, its next NodeStageVolume (after a kubelet restart
//! kubelet re-stages every volume a pod directory names) stages it afresh.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::watch::lock;
use super::{Protocol, UnstageRequest, VolumeManager};
use crate::host::{Host, HostPath};
use crate::locks::Deadline;
use crate::state::VolumeRecord;

/// What one scan found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnreferencedReport {
    /// Volume records looked at (inline ephemeral ones excluded).
    pub checked: usize,
    /// Volumes unreferenced for longer than the bound, with how long (still staged: reported).
    pub stranded: Vec<(String, Duration)>,
    /// Volumes released (unstaged) by this scan.
    pub released: Vec<String>,
}

impl<H: Host, P: Protocol<H>> VolumeManager<H, P> {
    /// The volumes found unreferenced for longer than the bound (module docs), as of the last scan.
    pub fn unreferenced_volumes(&self) -> Vec<String> {
        lock(&self.background.stranded).keys().cloned().collect()
    }

    /// One scan (module docs).
    pub async fn scan_unreferenced(&self) -> UnreferencedReport {
        let mut report = UnreferencedReport::default();
        let Some(bound) = self.background.settings.unreferenced_after else {
            return report;
        };
        let records = match self.store.volumes() {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "cannot list the volume records for the unreferenced-volume scan");
                return report;
            }
        };
        // Forget what belongs to volumes that are gone.
        {
            let ids: std::collections::HashSet<&str> =
                records.iter().map(|r| r.volume_id.as_str()).collect();
            lock(&self.background.activity).retain(|id, _| ids.contains(id.as_str()));
            lock(&self.background.stranded).retain(|id, _| ids.contains(id.as_str()));
        }
        for rec in records.iter().filter(|r| !r.ephemeral) {
            if self.background.stopped() {
                break;
            }
            report.checked += 1;
            let since = match self.last_reference(rec).await {
                None => {
                    lock(&self.background.stranded).remove(&rec.volume_id);
                    continue;
                }
                Some(since) => since,
            };
            let idle = since.elapsed();
            if idle < bound {
                lock(&self.background.stranded).remove(&rec.volume_id);
                continue;
            }
            let first = lock(&self.background.stranded)
                .insert(rec.volume_id.clone(), since)
                .is_none();
            if first {
                warn!(volume_id = %rec.volume_id, staging = %rec.staging_path, protocol = %rec.protocol,
                      unreferenced_min = idle.as_secs() / 60,
                      "staged volume that no pod references and kubelet no longer asks about: kubelet will not \
                       unstage it (its SMB mapping or iSCSI session stays); see the README runbook \"volumes kubelet \
                       will never unstage\"");
            }
            if self.background.settings.release_unreferenced && self.release(rec).await {
                lock(&self.background.stranded).remove(&rec.volume_id);
                report.released.push(rec.volume_id.clone());
            } else {
                report.stranded.push((rec.volume_id.clone(), idle));
            }
        }
        debug!(
            checked = report.checked,
            stranded = report.stranded.len(),
            released = report.released.len(),
            "unreferenced-volume scan"
        );
        report
    }

    /// When `rec`'s volume was last referenced (module docs); `None`: it is referenced now (or busy, or the host
    /// could not tell: counted as referenced).
    async fn last_reference(&self, rec: &VolumeRecord) -> Option<Instant> {
        let Ok(_guard) = self
            .volumes
            .try_lock(&rec.volume_id, "unreferenced-volume scan")
        else {
            return None;
        };
        let h = self
            .context()
            .calls(Deadline::after(self.background.settings.check_budget));
        let publications = match self.publications_of(&rec.volume_id) {
            Ok(p) => p,
            Err(_) => return None,
        };
        for p in publications {
            let Ok(target) = self.cfg.kubelet_root.host_path(&p.target_path) else {
                continue;
            };
            let mut paths = vec![target.clone()];
            if let Some(pod) = self.pod_dir(&target) {
                paths.push(pod);
            }
            for path in paths {
                match h.path_exists(&path).await {
                    Ok(false) => {}
                    // It exists, or the host could not tell: referenced.
                    Ok(true) | Err(_) => {
                        self.background.touched(&rec.volume_id);
                        return None;
                    }
                }
            }
        }
        let at = lock(&self.background.activity).get(&rec.volume_id).copied();
        Some(at.unwrap_or(self.background.started))
    }

    /// The pod directory `<root>\pods\<uid>` of a publish target under it.
    fn pod_dir(&self, target: &HostPath) -> Option<HostPath> {
        let root = self.cfg.kubelet_root.as_str();
        let text = target.as_str();
        let pods = format!("{root}\\pods\\");
        let rest = text
            .get(..pods.len())
            .filter(|p| p.eq_ignore_ascii_case(&pods))
            .map(|_| &text[pods.len()..])?;
        let uid = rest.split('\\').next().filter(|u| !u.is_empty())?;
        self.cfg
            .kubelet_root
            .host_path(&format!("{pods}{uid}"))
            .ok()
    }

    /// Unstage an unreferenced volume (module docs): only while no record is quarantined; `true` once it is gone.
    async fn release(&self, rec: &VolumeRecord) -> bool {
        let quarantined = self.store.quarantined_volumes();
        if quarantined > 0 {
            warn!(volume_id = %rec.volume_id, quarantined, "unreferenced volume not released: quarantined state \
                  records may describe a user of it");
            return false;
        }
        let req = UnstageRequest {
            volume_id: rec.volume_id.clone(),
            staging_target_path: rec.staging_path.clone(),
        };
        let d = Deadline::after(self.background.settings.check_budget);
        match self.unstage(&req, d).await {
            Ok(()) => {
                info!(volume_id = %rec.volume_id, staging = %rec.staging_path, "unreferenced volume released \
                      (--release-unreferenced-volumes): unstaged as kubelet would have");
                true
            }
            Err(e) => {
                warn!(volume_id = %rec.volume_id, error = %e, "cannot release the unreferenced volume: tried again \
                      at the next scan");
                false
            }
        }
    }
}
