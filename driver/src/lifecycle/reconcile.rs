//! Startup reconciliation: compare the records with the host once, when the driver starts.
//!
//! * Each staged volume's protocol checks its staging object ([`Protocol::check`]). One that does not work but may be
//!   what a running pod's path goes through (a file server that does not answer) is never removed: it is left in
//!   place and checked again in the background until it works (`watch.rs`), since kubelet never re-stages a volume
//!   it believes mounted. (A protocol may still clean up and mark a volume for re-stage when nothing a pod uses is
//!   lost that way.)
//! * Publish records whose target no longer exists are dropped.
//! * A publish record whose volume has no record (its record was lost) names a staging path: the protocols may adopt
//!   what the host shows there ([`Protocol::adopt`]), so a later unstage cleans it up.
//!
//! Every volume is checked on its own: a host error on one (its server unreachable, a call timing out) is reported
//! and the others are still checked. Quarantined records are skipped (see `crate::state`).

use std::collections::BTreeSet;

use tracing::{info, warn};

use super::{Health, Protocol, ReconcileReport, VolumeManager, host_error};
use crate::error::Error;
use crate::host::Host;
use crate::locks::Deadline;
use crate::state::Phase;

impl<H: Host, P: Protocol<H>> VolumeManager<H, P> {
    /// Startup reconciliation (see the module docs). Logs and returns what was found and repaired; fails only when
    /// the records cannot be listed at all.
    #[tracing::instrument(level = "info", name = "reconcile", skip_all)]
    pub async fn reconcile(&self, d: Deadline) -> Result<ReconcileReport, Error> {
        let mut report = ReconcileReport::default();
        let records = self.store.volumes()?;
        let recorded: BTreeSet<String> = records.iter().map(|r| r.volume_id.clone()).collect();
        for rec in records {
            report.checked += 1;
            let Ok(_guard) = self.volumes.try_lock(&rec.volume_id, "reconcile") else {
                continue;
            };
            let staging = match self.cfg.kubelet_root.host_path(&rec.staging_path) {
                Ok(p) => p,
                Err(e) => {
                    warn!(volume_id = %rec.volume_id, error = %e, "record has an invalid staging path; skipped");
                    report.failed.push((rec.volume_id.clone(), e.to_string()));
                    continue;
                }
            };
            match rec.phase {
                Phase::Staged => match self.protocol.check(self.context(), &rec, &staging, d).await
                {
                    Ok(Health::NeedsRestage) => report.restage.push(rec.volume_id.clone()),
                    Ok(Health::Unreachable) => {
                        warn!(volume_id = %rec.volume_id, staging = %staging, "the staging object does not work now \
                              (its server does not answer): left in place, since running pods may use it, and checked \
                              again in the background until it works");
                        self.background.watch_unreachable(&rec.volume_id);
                        report.unreachable.push(rec.volume_id.clone());
                    }
                    Ok(Health::Healthy) => {}
                    Err(e) => {
                        warn!(volume_id = %rec.volume_id, error = %e, "cannot check the volume's staging object; \
                              the next stage of the volume repairs it");
                        report.failed.push((rec.volume_id.clone(), e.to_string()));
                    }
                },
                Phase::Staging => report.incomplete.push(rec.volume_id.clone()),
                Phase::NeedsRestage => {}
            }
        }
        let h = self.context().calls(d);
        let mut orphans = Vec::new();
        for p in self.store.publications()? {
            let Ok(target) = self.cfg.kubelet_root.host_path(&p.target_path) else {
                continue;
            };
            match h.path_exists(&target).await {
                Ok(true) => {
                    if !recorded.contains(&p.volume_id)
                        && !orphans.iter().any(|(v, _)| v == &p.volume_id)
                    {
                        orphans.push((p.volume_id.clone(), p.staging_path.clone()));
                    }
                }
                Ok(false) => {
                    self.remove_publication(&target).await?;
                    report.stale_publications.push(p.target_path.clone());
                }
                Err(e) => {
                    let e = host_error(e, &target);
                    warn!(target = %target, error = %e, "cannot check a publish target; its record is kept");
                    report.failed.push((p.target_path.clone(), e.to_string()));
                }
            }
        }
        for (volume_id, staging) in orphans {
            match self.adopt_orphan(&volume_id, &staging, d).await {
                Ok(true) => report.adopted.push(volume_id),
                Ok(false) => {}
                Err(e) => {
                    warn!(volume_id = %volume_id, error = %e, "cannot adopt the staging object of a volume without \
                          a record");
                    report.failed.push((volume_id, e.to_string()));
                }
            }
        }
        info!(
            checked = report.checked,
            restage = ?report.restage,
            unreachable = ?report.unreachable,
            incomplete = ?report.incomplete,
            stale_publications = report.stale_publications.len(),
            adopted = ?report.adopted,
            failed = report.failed.len(),
            quarantined = self.store.quarantined_count(),
            "startup reconciliation finished"
        );
        Ok(report)
    }

    /// Adopt the staging object of a volume that has publish records but no volume record.
    async fn adopt_orphan(
        &self,
        volume_id: &str,
        staging: &str,
        d: Deadline,
    ) -> Result<bool, Error> {
        let Ok(_guard) = self.volumes.try_lock(volume_id, "reconcile") else {
            return Ok(false);
        };
        // Re-read under the guard; a quarantined (unreadable) record is an error here: never overwrite it.
        if self.store.volume(volume_id)?.is_some() {
            return Ok(false);
        }
        let staging = self.cfg.kubelet_root.host_path(staging)?;
        if self.owner_of(&staging)?.is_some() {
            return Ok(false);
        }
        Ok(self.adopt(volume_id, &staging, d).await?.is_some())
    }
}
