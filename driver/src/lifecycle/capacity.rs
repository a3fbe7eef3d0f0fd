//! The node's volume limit (issue 41 item 4): what NodeGetInfo reports as `max_volumes_per_node`, and the stage that
//! would go past it.
//!
//! Kubernetes' mutable CSINode allocatable (KEP-4876; feature gate `MutableCSINodeAllocatableCount`: alpha in 1.33,
//! beta off by default in 1.34, beta on by default in 1.35) has kubelet call NodeGetInfo again every
//! `CSIDriver.spec.nodeAllocatableUpdatePeriodSeconds` and take `max_volumes_per_node` as the CSINode's
//! `allocatable.count`; the scheduler then places no more of this driver's volumes on the node than that count. Older
//! releases read it once, when the driver registers. The count is the node's total for this driver: the volumes it
//! holds plus the ones it can still take.
//!
//! * **Configured**: `--max-volumes-per-node` (0: none).
//! * **What the host allows**: each protocol's free slots (`Protocol::free_slots`). iSCSI on a backend that lists
//!   the node's sessions (native): the initiator's free sessions, whoever holds the others (another driver, an
//!   administrator's login) — `iscsi/capacity.rs`. csi-proxy cannot list sessions: nothing is subtracted there.
//! * **Reported**: the volumes this driver holds (every record a protocol says holds a volume) plus the smallest free
//!   count, at most the configured limit; 0 (Kubernetes: no limit) only when neither applies. A node with no room at
//!   all reports the volumes it holds, at least 1 (0 would read as "no limit").
//! * **A stage past it**: a first stage of a volume on a node holding the configured number answers
//!   RESOURCE_EXHAUSTED before any host call; a login the initiator refuses for its session limit does too
//!   (`HostErrorKind::TooManySessions`). kubelet treats RESOURCE_EXHAUSTED as uncertain and retries; the CSINode
//!   refresh is what stops the scheduler from sending more (kubelet-csi-paths §9).
//!
//! NodeGetInfo must answer even when the host does not (node-driver-registrar calls it to register the driver): the
//! host's part is bounded by [`VOLUME_LIMIT_BUDGET`] and, when it fails, the configured limit is reported and the failure
//! logged.

use std::time::Duration;

use tracing::{debug, warn};

use super::{Protocol, VolumeManager};
use crate::error::Error;
use crate::host::Host;
use crate::locks::Deadline;

/// How long NodeGetInfo waits for the host's part of the limit.
pub const VOLUME_LIMIT_BUDGET: Duration = Duration::from_secs(5);

impl<H: Host, P: Protocol<H>> VolumeManager<H, P> {
    /// Refuse the first stage of `volume_id` on a node that holds its configured limit of volumes (module docs).
    pub(super) fn check_room(&self, volume_id: &str) -> Result<(), Error> {
        let Some(limit) = self.volume_limit else {
            return Ok(());
        };
        if self.store.volume(volume_id)?.is_some() {
            // Its record is there: a retry, a re-stage or a stage in progress, already counted.
            return Ok(());
        }
        let held = self.held_volumes()?;
        if held >= limit {
            return Err(Error::ResourceExhausted(format!(
                "this node holds {held} volumes of this driver, its limit (--max-volumes-per-node {limit}): \
                 refusing to stage volume {volume_id:?}. The scheduler should not have placed it here; with \
                 Kubernetes 1.35 (or 1.33-1.34 with the MutableCSINodeAllocatableCount feature gate) and the chart's \
                 csiDriver.nodeAllocatableUpdatePeriodSeconds, the node's CSINode count is refreshed; unstage a \
                 volume or schedule the pod elsewhere"
            )));
        }
        Ok(())
    }

    /// The volumes this driver holds on the node: every record its protocol says holds one.
    fn held_volumes(&self) -> Result<u64, Error> {
        Ok(self
            .store
            .volumes()?
            .iter()
            .filter(|r| self.protocol.holds(r))
            .count() as u64)
    }

    /// NodeGetInfo's `max_volumes_per_node` (module docs). `configured`: `--max-volumes-per-node`.
    pub async fn node_volume_limit(&self, configured: i64, d: Deadline) -> Result<i64, Error> {
        let d = Deadline::after(d.remaining().min(VOLUME_LIMIT_BUDGET));
        let free = match tokio::time::timeout_at(
            d.instant(),
            self.protocol.free_slots(self.context(), d),
        )
        .await
        {
            Ok(Ok(free)) => free,
            Ok(Err(e)) => {
                warn!(error = %e, configured, "cannot read what the host allows: reporting the configured volume limit");
                return Ok(configured);
            }
            Err(_) => {
                warn!(
                    configured,
                    "the host did not tell in time what it allows: reporting the configured volume limit"
                );
                return Ok(configured);
            }
        };
        let Some(free) = free else {
            return Ok(configured);
        };
        let held = self.held_volumes()?;
        let limit = limit_of(held, free, configured);
        debug!(held, free, configured, limit, "the node's volume limit");
        Ok(limit)
    }
}

/// The reported limit of a node holding `held` volumes with room for `free` more, given `configured` (module docs):
/// at least 1, since Kubernetes reads 0 as "no limit".
fn limit_of(held: u64, free: u64, configured: i64) -> i64 {
    let room = i64::try_from(held.saturating_add(free))
        .unwrap_or(i64::MAX)
        .max(1);
    if configured > 0 {
        room.min(configured)
    } else {
        room
    }
}

#[cfg(test)]
mod tests {
    use super::limit_of;

    #[test]
    fn the_limit_is_what_is_held_plus_the_room_capped_by_the_configured_one_and_never_zero() {
        assert_eq!(limit_of(3, 253, 0), 256);
        assert_eq!(limit_of(3, 253, 16), 16);
        assert_eq!(limit_of(3, 0, 0), 3, "full: what it holds");
        assert_eq!(limit_of(0, 0, 0), 1, "0 would read as no limit");
        assert_eq!(limit_of(0, 0, 5), 1);
        assert_eq!(limit_of(u64::MAX, 1, 0), i64::MAX);
    }
}
