//! What a protocol gets from the lifecycle to do its work: the host behind deadline-bounded, logged [`Calls`], the
//! record store, the locks of shared host objects and the settings ([`Context`]); and the one mapping of a host
//! failure to the error kubelet and the operator see ([`host_error`]).

use std::fmt::Display;
use std::future::Future;

use tracing::debug;

use super::VolumeConfig;
use crate::error::Error;
use crate::host::{Host, HostError, HostErrorKind, HostOp, HostPath, HostResult, KubeletRoot};
use crate::locks::{Deadline, KeyedLocks};
use crate::state::{AccessRecord, Details, Phase, StateStore, VolumeRecord};

/// The lifecycle's shared parts, lent to a protocol for one operation.
#[derive(Debug)]
pub struct Context<'a, H> {
    pub(super) host: &'a H,
    pub(super) store: &'a StateStore,
    pub(super) objects: &'a KeyedLocks,
    pub(super) config: &'a VolumeConfig,
    /// The capability of the stage this context is lent to (`None` outside a stage): the protocol's `Staged` record
    /// carries it, so the lifecycle need not write the record again to remember it.
    pub(super) access: Option<&'a AccessRecord>,
}

impl<H> Clone for Context<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H> Copy for Context<'_, H> {}

impl<'a, H: Host> Context<'a, H> {
    /// Host calls bounded by `d`.
    pub fn calls(&self, d: Deadline) -> Calls<'a, H> {
        Calls { host: self.host, d }
    }

    /// The durable record store.
    pub fn store(&self) -> &'a StateStore {
        self.store
    }

    /// `rec` as the record of a completed stage: phase `Staged`, with the capability the stage was asked with (when
    /// this context is a stage's). One write ends a stage.
    pub fn staged(&self, rec: &VolumeRecord) -> VolumeRecord {
        let mut staged = rec.with_phase(Phase::Staged);
        if let Some(access) = self.access {
            staged.access = Some(access.clone());
        }
        staged
    }

    /// Locks of shared host objects (an SMB share root, an iSCSI target), keyed by the protocol's object name:
    /// shared while an object is only used, exclusive while it is created, repaired or removed.
    pub fn object_locks(&self) -> &'a KeyedLocks {
        self.objects
    }

    /// The lifecycle's settings.
    pub fn config(&self) -> &'a VolumeConfig {
        self.config
    }

    /// `--kubelet-root`: the only tree the driver touches on the host.
    pub fn kubelet_root(&self) -> &'a KubeletRoot {
        &self.config.kubelet_root
    }

    /// Every usable record of protocol `T` with its facts (the durable reference counts of shared host objects are
    /// counted over these). A record whose facts do not decode is quarantined, not an error: one bad record must not
    /// stop every volume of the protocol. Counts over these are exact only while [`Self::may_remove_shared`] says so.
    pub fn records<T: Details + Clone>(&self) -> Result<Vec<(VolumeRecord, T)>, Error> {
        let mut out = Vec::new();
        self.scan_decoded(
            |rec, details: &T| {
                out.push((rec.clone(), details.clone()));
                false
            },
            |accept| self.store.count_volumes(accept),
        )?;
        out.sort_by(|(a, _), (b, _)| a.volume_id.cmp(&b.volume_id));
        Ok(out)
    }

    /// The record of `T`'s protocol with the smallest volume id whose facts `wanted` accepts, decoded; a scan that
    /// copies only its answer. Records whose facts do not decode are quarantined, as [`Self::records`] does.
    pub fn first_record<T: Details>(
        &self,
        wanted: impl FnMut(&VolumeRecord, &T) -> bool,
    ) -> Result<Option<(VolumeRecord, T)>, Error> {
        let found = self.scan_decoded(wanted, |accept| self.store.first_volume(accept))?;
        Ok(match found {
            Some(rec) => rec.details::<T>()?.map(|details| (rec, details)),
            None => None,
        })
    }

    /// How many usable records of protocol `T` `wanted` accepts, decoded in place (nothing is copied: the durable
    /// reference counts of shared host objects). Records whose facts do not decode are quarantined, as
    /// [`Self::records`] does.
    pub fn count_records<T: Details>(
        &self,
        wanted: impl FnMut(&VolumeRecord, &T) -> bool,
    ) -> Result<usize, Error> {
        self.scan_decoded(wanted, |accept| self.store.count_volumes(accept))
    }

    /// Run a store scan whose predicate is `wanted` over the records of `T`'s protocol with their facts decoded in
    /// place; records whose facts do not decode are rejected, then quarantined, as [`Self::records`] does.
    fn scan_decoded<T: Details, R>(
        &self,
        mut wanted: impl FnMut(&VolumeRecord, &T) -> bool,
        scan: impl FnOnce(&mut dyn FnMut(&VolumeRecord) -> bool) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut corrupt = Vec::new();
        let out = scan(&mut |rec| match rec.cached_details::<T>() {
            Ok(Some(details)) => wanted(rec, details),
            Ok(None) => false,
            Err(e) => {
                corrupt.push((rec.volume_id.clone(), e.to_string()));
                false
            }
        })?;
        for (volume_id, why) in corrupt {
            self.store.quarantine_details(&volume_id, &why);
        }
        Ok(out)
    }

    /// Whether a shared host object (an SMB mapping, an iSCSI session) that `others` other records use may be removed:
    /// only when no other record uses it and no volume record is quarantined (a quarantined record may describe a
    /// user of any shared object, so it is counted as one). Logs why an object is kept.
    pub fn may_remove_shared(&self, others: usize, object: &(dyn Display + Sync)) -> bool {
        if others > 0 {
            return false;
        }
        let unknown = self.store.quarantined_volumes();
        if unknown > 0 {
            tracing::warn!(object = %object, quarantined = unknown, "kept: quarantined state records may describe \
                           other users of it (fix or remove them; see the README, \"State directory\")");
            return false;
        }
        true
    }

    /// Mark a staged volume whose staging object no longer works for re-stage (startup reconciliation).
    pub async fn mark_needs_restage(&self, rec: &VolumeRecord) -> Result<(), Error> {
        self.store
            .put_volume(&rec.with_phase(Phase::NeedsRestage))
            .await
    }

    /// The staging path behind `path` for `rec`'s volume: the staging path itself or a target it is published at
    /// (NotFound otherwise).
    pub fn staging_behind(&self, rec: &VolumeRecord, path: &HostPath) -> Result<HostPath, Error> {
        if path.is(&rec.staging_path) {
            return self.kubelet_root().host_path(&rec.staging_path);
        }
        let publication = match self.store.publication(&path.key())? {
            Some(p) => Some(p),
            None => self.store.publication(&path.legacy_key())?,
        };
        match publication {
            Some(p) if p.volume_id == rec.volume_id => {
                self.kubelet_root().host_path(&p.staging_path)
            }
            _ => Err(Error::NotFound(format!(
                "{path} is not a staging or publish path of volume {:?} on this node",
                rec.volume_id
            ))),
        }
    }

    /// Remove whatever link or empty directory is at the staging path (a non-forced `Rmdir`; "not found" means done
    /// on every csi-proxy release and the native backend, so no `PathExists` first): the first step of every unstage,
    /// and all of it when no record exists.
    pub async fn remove_staging_link(&self, staging: &HostPath, d: Deadline) -> Result<(), Error> {
        match self.calls(d).rmdir(staging).await {
            Ok(()) => {
                debug!(staging = %staging, "staging link removed");
                Ok(())
            }
            Err(e) if e.kind == HostErrorKind::NotFound => Ok(()),
            Err(e) => Err(host_error(e, staging)),
        }
    }
}

/// Host calls bounded by the request's deadline, each logged at debug level (never a secret: subjects are paths,
/// share names, portals and volume ids).
#[derive(Debug)]
pub struct Calls<'a, H> {
    host: &'a H,
    d: Deadline,
}

impl<'a, H: Host> Calls<'a, H> {
    /// The host.
    pub fn host(&self) -> &'a H {
        self.host
    }

    /// The deadline every call is bounded by.
    pub fn deadline(&self) -> Deadline {
        self.d
    }

    /// Run one host call: never started after the deadline, dropped at it, logged either way.
    ///
    /// Not an `async fn`: that would keep `fut` inline in its future until the first poll, so every protocol future
    /// that makes a call would carry the largest host call's future (a gRPC exchange, 2–3 KiB) for the whole RPC,
    /// once per nesting level (measured with `-Zprint-type-sizes`: an iSCSI stage's future was 11 KiB). Boxed here,
    /// the call's future is on the heap for the call's duration only.
    pub fn raw<T>(
        &self,
        op: HostOp,
        subject: &(dyn Display + Sync),
        fut: impl Future<Output = HostResult<T>>,
    ) -> impl Future<Output = HostResult<T>>
    where
        T: std::fmt::Debug,
    {
        let fut = Box::pin(fut);
        let d = self.d;
        async move {
            let result = if d.remaining().is_zero() {
                // Never start a host call after the deadline: its outcome could not be reported anyway.
                Err(HostError::new(
                    op,
                    HostErrorKind::DeadlineExceeded,
                    "was not started: the request deadline had passed",
                ))
            } else {
                match tokio::time::timeout_at(d.instant(), fut).await {
                    Ok(r) => r,
                    Err(_) => Err(HostError::new(
                        op,
                        HostErrorKind::DeadlineExceeded,
                        "did not finish before the request deadline",
                    )),
                }
            };
            match &result {
                Ok(v) => debug!(op = op.name(), subject = %subject, result = ?v, "host call"),
                Err(e) => {
                    debug!(op = op.name(), subject = %subject, kind = ?e.kind, error = %e.message, "host call failed")
                }
            }
            result
        }
    }

    /// `PathExists`.
    pub async fn path_exists(&self, p: &HostPath) -> HostResult<bool> {
        self.raw(HostOp::PathExists, p, self.host.path_exists(p, self.d))
            .await
    }

    /// `Mkdir` (and parents).
    pub async fn mkdir(&self, p: &HostPath) -> HostResult<()> {
        self.raw(HostOp::Mkdir, p, self.host.mkdir(p, self.d)).await
    }

    /// `Rmdir`, never forced: removes a link or an empty directory, never data.
    pub async fn rmdir(&self, p: &HostPath) -> HostResult<()> {
        self.raw(HostOp::Rmdir, p, self.host.rmdir(p, false, self.d))
            .await
    }

    /// `CreateSymlink`: a link at `link` to `to`.
    pub async fn create_symlink(&self, link: &HostPath, to: &HostPath) -> HostResult<()> {
        self.raw(
            HostOp::CreateSymlink,
            link,
            self.host.create_symlink(link, to, self.d),
        )
        .await
    }

    /// `IsSymlink`: a link whose target resolves.
    pub async fn is_symlink(&self, p: &HostPath) -> HostResult<bool> {
        self.raw(HostOp::IsSymlink, p, self.host.is_symlink(p, self.d))
            .await
    }
}

/// Turn a host failure into the driver error kubelet and the operator see. `subject` is the path or share involved.
pub fn host_error(err: HostError, subject: &dyn Display) -> Error {
    let HostError {
        op, kind, message, ..
    } = err;
    match kind {
        HostErrorKind::Unavailable => Error::Unavailable(format!(
            "csi-proxy did not answer {op} ({message}); check that the csi-proxy service is running on the node"
        )),
        HostErrorKind::DeadlineExceeded => Error::DeadlineExceeded(format!(
            "{op} on {subject} {message}; the operation is safe to retry"
        )),
        HostErrorKind::MultipleConnections => Error::FailedPrecondition(format!(
            "the SMB server of {subject} is already mapped on this node under another user name (Windows error \
             1219). Windows allows one user per server per node: use the same credentials for every volume on this \
             server, or remove the other mapping on the node (Remove-SmbGlobalMapping)"
        )),
        HostErrorKind::NetworkPathNotFound => Error::FailedPrecondition(format!(
            "the SMB server of {subject} was not found from the node (Windows error 53); check that the name resolves \
             on the Windows host (cluster DNS names usually do not) and that port 445 is reachable"
        )),
        HostErrorKind::NetworkNameNotFound => Error::FailedPrecondition(format!(
            "the share {subject} does not exist on its server (Windows error 67); check the volume's source"
        )),
        HostErrorKind::LogonFailure => Error::FailedPrecondition(format!(
            "the server rejected the credentials for {subject} (Windows error 1326/86, or 1312 for a user name without \
             a domain: write a local account as .\\user or HOST\\user); check username, password and domain in the \
             node-stage secret"
        )),
        HostErrorKind::AccessDenied => Error::FailedPrecondition(format!(
            "access to {subject} was denied on the host ({op}: {message})"
        )),
        HostErrorKind::StaleMapping => Error::FailedPrecondition(format!(
            "a stale SMB mapping for {subject} blocks a new one and could not be replaced ({message}); remove it on the \
             node with Remove-SmbGlobalMapping"
        )),
        HostErrorKind::NotEmpty => Error::FailedPrecondition(format!(
            "{subject} is a non-empty directory; refusing to replace it (remove its contents or fix the path)"
        )),
        HostErrorKind::InFlight => Error::Unavailable(format!(
            "{op} on {subject} was not started: {message}; kubelet will retry"
        )),
        HostErrorKind::MayHoldData => {
            Error::FailedPrecondition(format!("{op} on {subject} refused: {message}"))
        }
        HostErrorKind::NotSatisfiable => {
            Error::FailedPrecondition(format!("{op} on {subject} refused: {message}"))
        }
        HostErrorKind::SupportedSizeFailed => Error::Unavailable(format!(
            "{op} on {subject}: Windows could not tell how far the partition may grow ({message}). \
             MSFT_Partition.GetSupportedSize (Get-PartitionSupportedSize) fails while the Optimize Drives service \
             (defragsvc) is disabled or busy (kubernetes-sigs/aws-ebs-csi-driver#2877): on the node, set it to start \
             on demand and start it (Set-Service defragsvc -StartupType Manual; Start-Service defragsvc), or run the \
             driver in mode: hostProcess, whose expansion computes the size from the disk's layout without it. \
             Nothing was resized; kubelet retries"
        )),
        HostErrorKind::TooManySessions => Error::ResourceExhausted(format!(
            "{op} on {subject}: the node's iSCSI initiator refuses another session ({message}); unstage volumes \
             of other targets on this node, or schedule the pod elsewhere"
        )),
        HostErrorKind::NotFound
        | HostErrorKind::NoPartition
        | HostErrorKind::AlreadyExists
        | HostErrorKind::AlreadyLoggedIn
        | HostErrorKind::AccessPathInUse
        | HostErrorKind::InvalidPath
        | HostErrorKind::Other => Error::Internal(format!("{op} on {subject} failed: {message}")),
    }
}
