//! The seam between the lifecycle and a storage protocol.
//!
//! The lifecycle owns everything that is the same for every protocol: validation of ids, paths and capabilities,
//! the per-volume guard, deadlines, publish/unpublish (a link from the pod's target path to the staging path),
//! startup reconciliation and the dispatch of stats and expansion. A [`Protocol`] owns what differs: its parameters
//! and secrets, how a staging object is made and removed (an SMB mapping plus a link, an iSCSI login plus a mounted
//! volume), whether that object still works, its usage, expansion, and what its state record holds
//! ([`Details`](crate::state::Details)).
//!
//! Protocols are peers: `smb` and `iscsi` each implement this trait and know nothing of each other. A set of
//! protocols is a protocol too: the pair `(A, B)` serves a volume with `A` when `A` [serves](Protocol::serves) it,
//! else with `B`, and routes records by [`Protocol::owns`]. Everything is generic (no dynamic dispatch inside the
//! lifecycle): the driver's protocol set is one type, chosen in `crate::backend`.

use std::collections::BTreeMap;
use std::future::Future;

use super::{Context, ExpandRequest, PublishRequest, StageRequest, VolumeStats};
use crate::error::Error;
use crate::host::{Host, HostPath};
use crate::locks::Deadline;
use crate::state::{AccessRecord, VolumeRecord};

/// Where and how a volume is staged.
#[derive(Clone, Copy, Debug)]
pub struct StageAt<'a> {
    /// The CSI volume id.
    pub volume_id: &'a str,
    /// The validated staging path (for an inline ephemeral volume: the driver's private one).
    pub staging: &'a HostPath,
    /// Whether this is the private stage of an inline ephemeral volume (kept in the record).
    pub ephemeral: bool,
}

/// A staging object the host shows for a volume that no record describes (the state directory was lost or wiped):
/// the volume kubelet names and the staging path kubelet gave for it. See [`Protocol::adopt`].
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    /// The CSI volume id (from kubelet's request, or from a surviving publish record).
    pub volume_id: &'a str,
    /// The validated staging path; nothing the records name for another volume.
    pub staging: &'a HostPath,
}

/// What a protocol found when it checked a staged volume's staging object (startup reconciliation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// The staging object works.
    Healthy,
    /// It no longer works (e.g. an SMB mapping Disconnected or an iSCSI session gone after a reboot): the protocol
    /// removed what must not survive and marked the record for re-stage; the next stage repairs it.
    NeedsRestage,
    /// It does not work now (its server does not answer, its mapping is reconnecting), and a running pod may use
    /// it: the protocol left everything in place (kubelet never re-stages a volume it believes mounted, so a removed
    /// staging object would stay broken after the server returns); the lifecycle checks it again in the background
    /// until it works, and reports it meanwhile (`watch.rs`).
    Unreachable,
}

/// A storage protocol the lifecycle stages volumes of. `H` is the host port it works through.
///
/// Every method that touches the host gets the lifecycle's [`Context`] and the request's deadline; the lifecycle
/// holds the volume's guard around each call. Records are written with the protocol's
/// [`Details`](crate::state::Details): *before* a host object is created and deleted *after* it is gone, so a crash
/// at any step converges on kubelet's retry.
pub trait Protocol<H: Host>: Send + Sync + 'static {
    /// A volume's validated parameters (from `volume_context` and the secrets).
    type Volume: Send + Sync;

    /// Whether this protocol serves the volume `volume_context` describes.
    fn serves(&self, volume_context: &BTreeMap<String, String>) -> bool;

    /// Whether `record` is one of this protocol's.
    fn owns(&self, record: &VolumeRecord) -> bool;

    /// Parse and validate NodeStageVolume's parameters and secrets (the lifecycle has checked the ids, the paths,
    /// the capability and the mount flags).
    fn parse(&self, req: &StageRequest) -> Result<Self::Volume, Error>;

    /// Parse an inline ephemeral volume's parameters (the Secret already read); `None` when the protocol has no
    /// inline volumes.
    fn parse_inline(&self, req: &StageRequest) -> Option<Result<Self::Volume, Error>> {
        let _ = req;
        None
    }

    /// NodeStageVolume: make `at.staging` a working staging object of `vol` (idempotent; repairs a broken one).
    fn stage(
        &self,
        cx: Context<'_, H>,
        at: StageAt<'_>,
        vol: &Self::Volume,
        d: Deadline,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// NodeUnstageVolume of a volume this protocol staged: remove the staging object (and the shared host object
    /// when no other record uses it), then the record.
    fn unstage(
        &self,
        cx: Context<'_, H>,
        staging: &HostPath,
        record: &VolumeRecord,
        d: Deadline,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// NodeGetVolumeStats at `path` (the staging path or a publish target): usage and condition.
    fn stats(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        d: Deadline,
    ) -> impl Future<Output = Result<VolumeStats, Error>> + Send;

    /// Startup reconciliation of a staged volume: whether its staging object still works (see [`Health`]).
    fn check(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> impl Future<Output = Result<Health, Error>> + Send;

    /// NodePublishVolume's check of the capability it asks for (`access`, `readonly`) against the staged volume
    /// `record`: FailedPrecondition (the spec's "exceeds capabilities") when the protocol cannot serve it there.
    /// Default: any capability.
    fn check_publish(
        &self,
        record: &VolumeRecord,
        access: &AccessRecord,
        readonly: bool,
    ) -> Result<(), Error> {
        let _ = (record, access, readonly);
        Ok(())
    }

    /// NodePublishVolume's check before it links a new target to `staging`: the staging object still resolves
    /// (FailedPrecondition otherwise). On Windows a link to a source that does not resolve is made as a *file* link,
    /// useless to the pod and answered "already published" afterwards. Default: no check.
    fn ready(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = (cx, record, staging, d);
        async { Ok(()) }
    }

    /// NodePublishVolume of the volume staged at `staging` (`record`: `Staged`, or `Staging` while it is published —
    /// what a re-stage this hook made and could not finish leaves), before the lifecycle judges the record: what the
    /// request carries *now* may call for work on the staged object. kubelet re-sends NodePublishVolume periodically
    /// when the CSIDriver says `requiresRepublish`, with the PV's node-publish Secret as it is at that moment (SMB: a
    /// mapping re-created with rotated credentials, `smb/rotate.rs`). Default: nothing.
    fn republish(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        req: &PublishRequest,
        staging: &HostPath,
        d: Deadline,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = (cx, record, req, staging, d);
        async { Ok(()) }
    }

    /// A staging object without a record ([`Found`]): when the host proves it is this protocol's (an iSCSI volume
    /// mounted at the staging path and the target session serving its disk; an SMB link whose target is a share),
    /// return a record describing it — phase `Staged`, the facts the host proved and nothing else — so the lifecycle
    /// can unstage it like any other (it writes the record, marked `adopted`, before anything is removed). `None`
    /// when nothing there is provably this protocol's: the lifecycle then only removes the link.
    ///
    /// A protocol must be conservative with an adopted record: other volumes whose records were lost too may use
    /// the same shared host object, so it removes one only when the host proves no other user. The default adopts
    /// nothing (csi-proxy v1 can neither read a link's target nor list iSCSI sessions by volume).
    fn adopt(
        &self,
        cx: Context<'_, H>,
        found: Found<'_>,
        d: Deadline,
    ) -> impl Future<Output = Result<Option<VolumeRecord>, Error>> + Send {
        let _ = (cx, found, d);
        async { Ok(None) }
    }

    /// Whether `record` (this protocol's) holds a volume on the node, so it counts against the node's volume limit
    /// (`capacity.rs`). Default: yes (iSCSI: not a released record, whose first stage never succeeded).
    fn holds(&self, record: &VolumeRecord) -> bool {
        let _ = record;
        true
    }

    /// How many more volumes of this protocol the node can take beyond those it holds: a limit of the host's that the
    /// backend can read (iSCSI: the initiator's free session slots), `None` when there is none. NodeGetInfo's
    /// `max_volumes_per_node` is the volumes held plus the smallest of these (`capacity.rs`).
    fn free_slots(
        &self,
        cx: Context<'_, H>,
        d: Deadline,
    ) -> impl Future<Output = Result<Option<u64>, Error>> + Send {
        let _ = (cx, d);
        async { Ok(None) }
    }

    /// NodeExpandVolume at `path`: grow the volume and return its capacity in bytes (0 = nothing to grow on the
    /// node, e.g. a share whose size is the server's business).
    fn expand(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        req: &ExpandRequest,
        d: Deadline,
    ) -> impl Future<Output = Result<i64, Error>> + Send {
        let _ = (cx, record, path, req, d);
        async { Ok(0) }
    }
}

/// A volume of one of two protocols.
#[derive(Clone, Debug)]
pub enum Either<A, B> {
    /// The first protocol's.
    First(A),
    /// The second protocol's.
    Second(B),
}

fn unowned(record: &VolumeRecord) -> Error {
    Error::Internal(format!(
        "volume {:?} has a record of protocol {:?}, which this driver does not serve",
        record.volume_id, record.protocol
    ))
}

/// Two protocols as one: `A` where it serves the volume, `B` otherwise (the fallback); records go to their owner.
impl<H, A, B> Protocol<H> for (A, B)
where
    H: Host,
    A: Protocol<H>,
    B: Protocol<H>,
{
    type Volume = Either<A::Volume, B::Volume>;

    fn serves(&self, volume_context: &BTreeMap<String, String>) -> bool {
        self.0.serves(volume_context) || self.1.serves(volume_context)
    }

    fn owns(&self, record: &VolumeRecord) -> bool {
        self.0.owns(record) || self.1.owns(record)
    }

    fn parse(&self, req: &StageRequest) -> Result<Self::Volume, Error> {
        if self.0.serves(&req.volume_context) {
            self.0.parse(req).map(Either::First)
        } else {
            self.1.parse(req).map(Either::Second)
        }
    }

    fn parse_inline(&self, req: &StageRequest) -> Option<Result<Self::Volume, Error>> {
        // The protocol that serves the volume decides, also when it has no inline volumes: the fallback must never
        // parse another protocol's attributes as its own.
        if self.0.serves(&req.volume_context) {
            return self.0.parse_inline(req).map(|r| r.map(Either::First));
        }
        self.1.parse_inline(req).map(|r| r.map(Either::Second))
    }

    async fn stage(
        &self,
        cx: Context<'_, H>,
        at: StageAt<'_>,
        vol: &Self::Volume,
        d: Deadline,
    ) -> Result<(), Error> {
        match vol {
            // Each protocol's future on the heap at its own size: inline, every stage would carry the larger one.
            Either::First(v) => Box::pin(self.0.stage(cx, at, v, d)).await,
            Either::Second(v) => Box::pin(self.1.stage(cx, at, v, d)).await,
        }
    }

    async fn unstage(
        &self,
        cx: Context<'_, H>,
        staging: &HostPath,
        record: &VolumeRecord,
        d: Deadline,
    ) -> Result<(), Error> {
        if self.0.owns(record) {
            Box::pin(self.0.unstage(cx, staging, record, d)).await
        } else if self.1.owns(record) {
            Box::pin(self.1.unstage(cx, staging, record, d)).await
        } else {
            Err(unowned(record))
        }
    }

    async fn stats(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        d: Deadline,
    ) -> Result<VolumeStats, Error> {
        if self.0.owns(record) {
            self.0.stats(cx, record, path, d).await
        } else if self.1.owns(record) {
            self.1.stats(cx, record, path, d).await
        } else {
            Err(unowned(record))
        }
    }

    async fn check(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<Health, Error> {
        if self.0.owns(record) {
            self.0.check(cx, record, staging, d).await
        } else if self.1.owns(record) {
            self.1.check(cx, record, staging, d).await
        } else {
            Err(unowned(record))
        }
    }

    fn check_publish(
        &self,
        record: &VolumeRecord,
        access: &AccessRecord,
        readonly: bool,
    ) -> Result<(), Error> {
        if self.0.owns(record) {
            self.0.check_publish(record, access, readonly)
        } else if self.1.owns(record) {
            self.1.check_publish(record, access, readonly)
        } else {
            Err(unowned(record))
        }
    }

    async fn ready(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<(), Error> {
        if self.0.owns(record) {
            self.0.ready(cx, record, staging, d).await
        } else if self.1.owns(record) {
            self.1.ready(cx, record, staging, d).await
        } else {
            Err(unowned(record))
        }
    }

    async fn republish(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        req: &PublishRequest,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<(), Error> {
        if self.0.owns(record) {
            self.0.republish(cx, record, req, staging, d).await
        } else if self.1.owns(record) {
            self.1.republish(cx, record, req, staging, d).await
        } else {
            Ok(())
        }
    }

    async fn adopt(
        &self,
        cx: Context<'_, H>,
        found: Found<'_>,
        d: Deadline,
    ) -> Result<Option<VolumeRecord>, Error> {
        if let Some(rec) = self.0.adopt(cx, found, d).await? {
            return Ok(Some(rec));
        }
        self.1.adopt(cx, found, d).await
    }

    fn holds(&self, record: &VolumeRecord) -> bool {
        if self.0.owns(record) {
            self.0.holds(record)
        } else {
            self.1.holds(record)
        }
    }

    async fn free_slots(&self, cx: Context<'_, H>, d: Deadline) -> Result<Option<u64>, Error> {
        let a = self.0.free_slots(cx, d).await?;
        let b = self.1.free_slots(cx, d).await?;
        Ok(match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    async fn expand(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        req: &ExpandRequest,
        d: Deadline,
    ) -> Result<i64, Error> {
        if self.0.owns(record) {
            self.0.expand(cx, record, path, req, d).await
        } else if self.1.owns(record) {
            self.1.expand(cx, record, path, req, d).await
        } else {
            Err(unowned(record))
        }
    }
}
