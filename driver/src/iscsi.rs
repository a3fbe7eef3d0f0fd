//! iSCSI volumes through csi-proxy: login, safe disk identity, initialise/format, mount, stats, expansion.
//!
//! # Volume attributes and secrets (csi-driver-iscsi compatible)
//!
//! | Where | Key | Meaning |
//! | --- | --- | --- |
//! | volume_context | `targetPortal` | `host[:port]` (port 3260 by default; IPv6 as `[addr]:port`) |
//! | volume_context | `portals` | more portals: a JSON array string (`["10.0.0.6:3260"]`) or a comma-separated list |
//! | volume_context | `iqn` | target name: `iqn.yyyy-mm.domain[:x]`, `eui.` + 16 hex or `naa.` + 16/32 hex |
//! | volume_context | `lun` | 0–255 (Windows addresses LUNs with one byte, `SCSI_ADDRESS.Lun`) |
//! | volume_context | `sessionCHAPAuth` | `true`: log in with CHAP (default: CHAP when the secret has a user name/password) |
//! | volume_context | `discoveryCHAPAuth` | `true` is refused (FailedPrecondition): csi-proxy cannot send discovery credentials |
//! | volume_context | `page83`, `serial` | identity hints: the disk must match them before anything touches it |
//! | volume_context / capability | `fsType` | `ntfs` (default) only; others are InvalidArgument naming the backend that would support them |
//! | secrets | `node.session.auth.username`, `.password` | one-way CHAP (secret: 12–16 characters, a Windows rule) |
//! | secrets | `node.session.auth.password_in` (`.username_in`) | mutual CHAP: the initiator's node-wide secret, set with `SetMutualChapSecret` before the login |
//! | secrets | `node.sendtargets.auth.*` | discovery CHAP: refused (FailedPrecondition) |
//!
//! Credentials anywhere else (a `*.password`/`secret`-like volume attribute) are InvalidArgument naming the key.
//! `username_in` is accepted for compatibility but unused: Windows authenticates the target with the initiator's
//! node-wide mutual secret only, and csi-proxy cannot set a per-target name. The mutual secret is node-global, so
//! every mutual-CHAP volume on a node must use the same `password_in` (the last stage sets it).
//!
//! A worked example (a statically provisioned PV; the Secret holds `node.session.auth.username` / `.password`):
//!
//! ```yaml
//! apiVersion: v1
//! kind: PersistentVolume
//! metadata: {name: db-lun}
//! spec:
//!   capacity: {storage: 10Gi}
//!   accessModes: [ReadWriteOnce]
//!   csi:
//!     driver: wincsi.csi.io
//!     volumeHandle: san1-store-a-lun0
//!     fsType: ntfs
//!     volumeAttributes:
//!       targetPortal: "10.0.0.5:3260"
//!       portals: '["10.0.0.6:3260"]'
//!       iqn: iqn.2024-01.io.example:store-a
//!       lun: "0"
//!       sessionCHAPAuth: "true"
//!       page83: "6001405abcdef0123456789abcdef012"
//!     nodeStageSecretRef: {name: iscsi-chap, namespace: storage}
//! ```
//!
//! # Limits of csi-proxy's iSCSI API (v1alpha2)
//!
//! No discovery CHAP, no persistent logins, no MPIO (multipath sessions, load-balance policy, initiator portal
//! selection), no way to clear a disk's read-only flag, no partition-style query, NTFS only. One session per target:
//! further portals are added (a later stage may log in through any of them) but a second `ConnectTarget` to a
//! connected target is a no-op in csi-proxy.
//!
//! # Host-call sequences (asserted by the unit tests in `iscsi/tests.rs`)
//!
//! | Operation | Host calls |
//! | --- | --- |
//! | first stage, RAW LUN | `AddTargetPortal` (each portal) → (mutual CHAP: `SetMutualChapSecret`) → `ConnectTarget` → `GetTargetDisks` → `ListDiskLocations` → `ListDiskIDs` → `SetDiskState(online)` → `ListVolumesOnDisk` → `PartitionDisk` → `ListVolumesOnDisk` → `IsVolumeFormatted` → `FormatVolume` → `Mkdir(staging)` → `MountVolume` |
//! | first stage, LUN with an NTFS volume | as above without `PartitionDisk`, the second `ListVolumesOnDisk` and `FormatVolume` |
//! | disk not visible yet | `GetTargetDisks` (empty or no LUN match) → `Rescan` once → `GetTargetDisks` … then bounded backoff (500 ms doubling, at most 4 more rounds, never past the RPC deadline) → Unavailable |
//! | repeated stage | `GetVolumeIDFromTargetPath(staging)` (equals the recorded volume: done) |
//! | unstage | `GetVolumeIDFromTargetPath` → `WriteVolumeCache` → `UnmountVolume` → `Rmdir(staging)` → `DisconnectTarget` (only when no other record names the target) |
//! | unstage, staging path gone | `GetVolumeIDFromTargetPath` (fails) → `PathExists` → `DisconnectTarget` (as above) |
//! | stats | `GetVolumeIDFromTargetPath` → `GetVolumeStats`; when the volume is not there: `GetTargetDisks` (→ `GetDiskState`) to say why |
//! | startup reconcile (staged record) | `GetVolumeIDFromTargetPath`; not the recorded volume → record marked `needs_restage`, nothing removed |
//! | expand | `GetVolumeIDFromTargetPath` → `Rescan` → `GetDiskStats` → `GetVolumeStats` → `ResizeVolume(0)` → `GetVolumeStats` |
//!
//! # Which disk is this volume? (never the wrong one)
//!
//! 1. Candidates = `GetTargetDisks(portal, iqn)` ∩ { disks whose `ListDiskLocations` LUN is the volume's LUN }. The
//!    target filter makes LUN numbers that repeat on other targets or adapters irrelevant; the LUN filter makes
//!    several LUNs per target work (csi-proxy users that require "exactly one disk per target" cannot).
//! 2. When `page83`/`serial` hints are given, candidates must match them (`ListDiskIDs`); a mismatch is a
//!    FailedPrecondition that names both identifiers.
//! 3. The chosen disk's page83 and serial are pinned in the state record before anything is changed; a later stage
//!    (after a reboot, disk numbers change) must find the same page83 or it refuses.
//! 4. More than one distinct candidate (multipath without MPIO, a target reporting the same LUN twice) is a
//!    FailedPrecondition; zero after the bounded wait is Unavailable (kubelet retries).
//!
//! Limits: a disk whose location csi-proxy cannot parse (fewer than five `:`-separated parts) is invisible to
//! step 1; `ListDiskIDs` fails as a whole when any disk of the node cannot be opened (then hints and pins cannot be
//! checked and the stage refuses when it needs them); without hints the first stage trusts the target+LUN mapping.
//!
//! # What may be initialised or formatted
//!
//! csi-proxy v1 cannot report a disk's partition style or partitions. What it offers: `ListVolumesOnDisk` (volumes
//! Windows recognises), `IsVolumeFormatted`, and `PartitionDisk`, which initialises GPT only on a RAW disk and creates
//! a partition only when there is no non-reserved partition (a no-op otherwise). The rules:
//!
//! * the disk has a volume → never `PartitionDisk`; exactly one volume is required (several: FailedPrecondition);
//! * the disk has no volume → record the intent, `PartitionDisk`, list again: a volume now is ours; still none means
//!   the disk holds partitions Windows has no volume for (a foreign layout, e.g. Linux LVM): FailedPrecondition,
//!   and `PartitionDisk` was a no-op, so the disk is untouched;
//! * `FormatVolume` runs only on an unformatted volume **this driver created** (recorded in the state record before
//!   `PartitionDisk`); an unformatted volume it did not create (e.g. ext4 written by a Linux node, which Windows
//!   shows as a RAW volume) is refused, never formatted.
//!
//! Limit (documented, not detectable through csi-proxy v1): a disk with *no partition table at all* whose contents
//! another OS wrote directly (a whole-disk file system) looks exactly like a new RAW disk; identity hints are the
//! protection there.
//!
//! # Sessions and portals
//!
//! Logins are not persistent (csi-proxy never sets IsPersistent): after a reboot the session is gone and the next
//! stage logs in again. The session is logged out on unstage only when no other state record names the same target
//! (per-target lock; records are written before the login and deleted after the logout, so a crash over-counts and
//! never logs out a session in use). Portals are never removed: on Windows `RemoveTargetPortal` forgets every target
//! discovered through it (other volumes, administrator-configured discovery CHAP), and `AddTargetPortal` is
//! idempotent, so a leftover portal costs nothing.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::error::Error;
use crate::host::{DiskIds, Host, HostError, HostErrorKind, HostOp, HostPath, HostResult, Portal};
use crate::locks::Deadline;
use crate::state::{Phase, Protocol, RECORD_VERSION, VolumeRecord};
use crate::volume::{VolumeManager, host_error};

#[cfg(any(test, feature = "test-util"))]
pub mod fake;
mod params;
#[cfg(test)]
mod tests;

pub use params::{
    CHAP_SECRET_LEN, IscsiVolume, MAX_LUN, check_fs_type, check_iqn, is_iscsi, parse_volume,
};

/// The iSCSI facts of a staged volume, kept in its state record (never a secret).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IscsiRecord {
    /// The portals asked for.
    pub portals: Vec<Portal>,
    /// The portal the session was made through.
    #[serde(default)]
    pub session_portal: Option<Portal>,
    /// Target name, as given.
    pub iqn: String,
    /// LUN.
    pub lun: u32,
    /// Disk number at the last stage (changes across reboots).
    #[serde(default)]
    pub disk_number: Option<u32>,
    /// The disk's page83 identifier, pinned at the first stage.
    #[serde(default)]
    pub page83: Option<String>,
    /// The disk's serial number, pinned at the first stage.
    #[serde(default)]
    pub serial: Option<String>,
    /// The volume id (`\\?\Volume{…}\`) mounted at the staging path.
    #[serde(default)]
    pub volume: Option<String>,
    /// Whether this driver ran `PartitionDisk` on a disk without volumes (so an unformatted volume there is ours).
    #[serde(default)]
    pub partitioned: bool,
}

impl IscsiRecord {
    fn new(vol: &IscsiVolume) -> Self {
        Self {
            portals: vol.portals.clone(),
            session_portal: None,
            iqn: vol.iqn.clone(),
            lun: vol.lun,
            disk_number: None,
            page83: None,
            serial: None,
            volume: None,
            partitioned: false,
        }
    }

    /// The lock / reference key of the target.
    pub fn target_key(&self) -> String {
        target_key(&self.iqn)
    }

    fn same_lun(&self, vol: &IscsiVolume) -> bool {
        self.iqn.eq_ignore_ascii_case(&vol.iqn) && self.lun == vol.lun
    }

    /// The portal to log out through.
    fn logout_portal(&self) -> Option<&Portal> {
        self.session_portal.as_ref().or(self.portals.first())
    }
}

fn target_key(iqn: &str) -> String {
    format!("iscsi-target:{}", iqn.to_ascii_lowercase())
}

/// NodeExpandVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct ExpandRequest {
    /// Volume id.
    pub volume_id: String,
    /// A path where the volume is staged or published.
    pub volume_path: String,
    /// `capacity_range.required_bytes` (0 = not given).
    pub required_bytes: i64,
}

impl From<&csi::v1::NodeExpandVolumeRequest> for ExpandRequest {
    fn from(r: &csi::v1::NodeExpandVolumeRequest) -> Self {
        Self {
            volume_id: r.volume_id.clone(),
            volume_path: r.volume_path.clone(),
            required_bytes: r.capacity_range.as_ref().map_or(0, |c| c.required_bytes),
        }
    }
}

/// The bounded wait for a LUN's disk to appear.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(4);
const MAX_WAIT_ROUNDS: u32 = 4;
/// Time kept in reserve so the RPC can still answer before its deadline.
const ANSWER_RESERVE: Duration = Duration::from_secs(1);
/// csi-proxy's ResizeVolume skips growth below this.
pub const MIN_RESIZE_GROWTH: u64 = 100 * 1024 * 1024;

/// The waits between looks for a LUN's disk: 500 ms doubling up to 4 s, at most [`MAX_WAIT_ROUNDS`], and only as
/// many as fit in `remaining` while keeping [`ANSWER_RESERVE`] to answer. Pure, so its bounds are tested without
/// sleeping.
pub(crate) fn backoff_schedule(remaining: Duration) -> Vec<Duration> {
    let mut out = Vec::new();
    let mut used = Duration::ZERO;
    let mut delay = FIRST_BACKOFF;
    while out.len() < MAX_WAIT_ROUNDS as usize && used + delay + ANSWER_RESERVE <= remaining {
        out.push(delay);
        used += delay;
        delay = (delay * 2).min(MAX_BACKOFF);
    }
    out
}

fn uncertain(kind: HostErrorKind) -> bool {
    matches!(
        kind,
        HostErrorKind::DeadlineExceeded | HostErrorKind::Unavailable
    )
}

/// Map a block/iSCSI host failure to the driver error.
fn block_error(err: HostError, subject: &dyn Display) -> Error {
    match (err.op, err.kind) {
        (HostOp::ConnectTarget, HostErrorKind::LogonFailure) => Error::FailedPrecondition(format!(
            "the iSCSI target {subject} rejected the login (CHAP authentication failure); check \
             node.session.auth.username/password (and password_in for mutual CHAP) in the node-stage secret and the \
             target's CHAP settings. Not retried with other portals"
        )),
        (HostOp::AddTargetPortal, kind) if !uncertain(kind) => Error::FailedPrecondition(format!(
            "cannot add iSCSI portal {subject}: {}; check the address and that the node reaches it",
            err.message
        )),
        (
            HostOp::ConnectTarget | HostOp::GetTargetDisks | HostOp::DisconnectTarget,
            HostErrorKind::NotFound,
        ) => Error::FailedPrecondition(format!(
            "the iSCSI target {subject} is not known through its portal ({}); check iqn and the portal",
            err.message
        )),
        (_, HostErrorKind::NotEmpty) => Error::FailedPrecondition(format!(
            "{subject} is not an empty directory; refusing to mount over it ({})",
            err.message
        )),
        _ => host_error(err, subject),
    }
}

/// Host calls bounded by the deadline, logged at debug level, errors mapped with [`block_error`].
struct Calls<'a, H> {
    host: &'a H,
    d: Deadline,
}

impl<H: Host> Calls<'_, H> {
    async fn raw<T: std::fmt::Debug>(
        &self,
        op: HostOp,
        subject: &(dyn Display + Sync),
        fut: impl Future<Output = HostResult<T>>,
    ) -> HostResult<T> {
        let result = if self.d.remaining().is_zero() {
            Err(HostError::new(
                op,
                HostErrorKind::DeadlineExceeded,
                "was not started: the request deadline had passed",
            ))
        } else {
            match tokio::time::timeout_at(self.d.instant(), fut).await {
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

    async fn run<T: std::fmt::Debug>(
        &self,
        op: HostOp,
        subject: &(dyn Display + Sync),
        fut: impl Future<Output = HostResult<T>>,
    ) -> Result<T, Error> {
        self.raw(op, subject, fut)
            .await
            .map_err(|e| block_error(e, subject))
    }
}

impl<H: Host> Calls<'_, H> {
    /// `ListVolumesOnDisk`; "not found" counts as no volume: csi-proxy's PowerShell generation fails with "No
    /// MSFT_Partition objects found" on a disk without partitions instead of returning an empty list.
    async fn volumes_on(&self, disk: u32, subject: &str) -> Result<Vec<String>, Error> {
        match self
            .raw(
                HostOp::ListVolumesOnDisk,
                &subject,
                self.host.list_volumes_on_disk(disk, self.d),
            )
            .await
        {
            Ok(v) => Ok(v),
            Err(e) if e.kind == HostErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(block_error(e, &subject)),
        }
    }
}

fn same_id(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

impl<H: Host> VolumeManager<H> {
    fn block_calls(&self, d: Deadline) -> Calls<'_, H> {
        Calls {
            host: self.host(),
            d,
        }
    }

    fn put_iscsi(
        &self,
        volume_id: &str,
        staging: &HostPath,
        phase: Phase,
        rec: &IscsiRecord,
    ) -> Result<(), Error> {
        self.store().put_volume(&VolumeRecord {
            version: RECORD_VERSION,
            volume_id: volume_id.to_owned(),
            phase,
            staging_path: staging.to_string(),
            ephemeral: false,
            protocol: Protocol::Iscsi(rec.clone()),
        })
    }

    /// Other volume records naming the same target (its durable reference count).
    fn target_users(&self, volume_id: &str, iqn: &str) -> Result<usize, Error> {
        Ok(self
            .store()
            .volumes()?
            .iter()
            .filter(|r| r.volume_id != volume_id)
            .filter(
                |r| matches!(&r.protocol, Protocol::Iscsi(i) if i.iqn.eq_ignore_ascii_case(iqn)),
            )
            .count())
    }

    /// NodeStageVolume of a request whose volume_context describes an iSCSI volume (the caller checked the ids, the
    /// staging path and the capability).
    pub(crate) async fn stage_iscsi_request(
        &self,
        req: &crate::volume::StageRequest,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<(), Error> {
        if let Some(crate::volume::Capability {
            access_type: crate::volume::AccessType::Mount { fs_type, .. },
            ..
        }) = &req.capability
        {
            check_fs_type(fs_type)?;
        }
        let vol = parse_volume(&req.volume_context, &req.secrets)?;
        let _guard = self
            .volume_locks()
            .try_lock(&req.volume_id, "NodeStageVolume")?;
        self.stage_iscsi(&req.volume_id, staging, &vol, d).await
    }

    /// NodeStageVolume for an iSCSI volume (the caller validated the request and holds the volume guard).
    pub(crate) async fn stage_iscsi(
        &self,
        volume_id: &str,
        staging: &HostPath,
        vol: &IscsiVolume,
        d: Deadline,
    ) -> Result<(), Error> {
        let h = self.block_calls(d);
        let existing = self.store().volume(volume_id)?;
        let prev = match &existing {
            None => None,
            Some(rec) => match &rec.protocol {
                Protocol::Iscsi(r)
                    if r.same_lun(vol)
                        && rec.staging_path.eq_ignore_ascii_case(staging.as_str()) =>
                {
                    Some((rec.phase, r.clone()))
                }
                _ => {
                    return Err(Error::AlreadyExists(format!(
                        "volume {volume_id:?} is already staged at {} from another source or path; unstage it first",
                        rec.staging_path
                    )));
                }
            },
        };
        // What is mounted at the staging path now (only asked when this driver may have mounted something there).
        let mut mounted = None;
        if let Some((phase, r)) = &prev {
            match h
                .raw(
                    HostOp::GetVolumeIDFromTargetPath,
                    staging,
                    h.host.volume_id_from_target_path(staging, d),
                )
                .await
            {
                Ok(v) => {
                    if *phase == Phase::Staged
                        && r.volume.as_deref().is_some_and(|want| same_id(want, &v))
                    {
                        debug!(staging = %staging, volume = %v, "already staged: nothing to do");
                        return Ok(());
                    }
                    mounted = Some(v);
                }
                Err(e) if uncertain(e.kind) => return Err(block_error(e, staging)),
                Err(_) => {
                    info!(staging = %staging, "the recorded volume is not mounted at the staging path: (re)staging")
                }
            }
        }
        let fresh = prev.is_none();
        let mut rec = prev
            .map(|(_, r)| r)
            .unwrap_or_else(|| IscsiRecord::new(vol));
        rec.portals = vol.portals.clone();
        // Intent first: from here on the record counts as a user of the target's session.
        self.put_iscsi(volume_id, staging, Phase::Staging, &rec)?;
        let _target = self.object_locks().lock(&rec.target_key()).await;
        let result = self
            .stage_steps(&h, volume_id, staging, vol, &mut rec, mounted, fresh)
            .await;
        match result {
            Ok(()) => {
                self.put_iscsi(volume_id, staging, Phase::Staged, &rec)?;
                info!(staging = %staging, iqn = %vol.iqn, lun = vol.lun, volume = ?rec.volume, "iSCSI volume staged");
                Ok(())
            }
            Err(err @ (Error::DeadlineExceeded(_) | Error::Unavailable(_))) => {
                warn!(error = %err, "stage outcome uncertain: keeping the record for kubelet's retry or unstage");
                Err(err)
            }
            Err(err) if fresh => {
                // kubelet will not unstage after a definite failure: log out again if nobody else uses the target.
                if rec.session_portal.is_some() && self.target_users(volume_id, &vol.iqn)? == 0 {
                    let p = rec.logout_portal().cloned();
                    if let Some(p) = p
                        && let Err(e) = h
                            .raw(
                                HostOp::DisconnectTarget,
                                &p,
                                h.host.disconnect_target(&p, &vol.iqn, d),
                            )
                            .await
                    {
                        warn!(error = %e, "rollback: logout failed; keeping the record");
                        return Err(err);
                    }
                }
                if rec.partitioned {
                    // Keep the fact that the unformatted volume is ours, so a retry can finish formatting it.
                    rec.session_portal = None;
                    self.put_iscsi(volume_id, staging, Phase::Staging, &rec)?;
                } else {
                    self.store().remove_volume(volume_id)?;
                }
                Err(err)
            }
            Err(err) => Err(err),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn stage_steps(
        &self,
        h: &Calls<'_, H>,
        volume_id: &str,
        staging: &HostPath,
        vol: &IscsiVolume,
        rec: &mut IscsiRecord,
        mounted: Option<String>,
        fresh: bool,
    ) -> Result<(), Error> {
        let d = h.d;
        let target = format!("{} (LUN {})", vol.iqn, vol.lun);
        // 1. Portals (every one, so a later stage can use any of them).
        let mut added = Vec::new();
        let mut last = None;
        for p in &vol.portals {
            match h
                .raw(HostOp::AddTargetPortal, p, h.host.add_target_portal(p, d))
                .await
            {
                Ok(()) => added.push(p.clone()),
                Err(e) if uncertain(e.kind) => return Err(block_error(e, p)),
                Err(e) => {
                    warn!(portal = %p, error = %e.message, "cannot add portal");
                    last = Some(block_error(e, p));
                }
            }
        }
        if added.is_empty() {
            return Err(last.unwrap_or_else(|| Error::InvalidArgument("no portal".to_owned())));
        }
        // 2. Login (the mutual secret is node-global and must be in place first).
        if let Some(secret) = &vol.mutual_secret {
            h.run(
                HostOp::SetMutualChapSecret,
                &"the initiator",
                h.host.set_mutual_chap_secret(secret, d),
            )
            .await?;
        }
        let mut session = None;
        for p in &added {
            match h
                .raw(
                    HostOp::ConnectTarget,
                    &vol.iqn,
                    h.host.connect_target(p, &vol.iqn, &vol.auth, d),
                )
                .await
            {
                Ok(()) => {
                    session = Some(p.clone());
                    break;
                }
                Err(e) if uncertain(e.kind) || e.kind == HostErrorKind::LogonFailure => {
                    return Err(block_error(e, &vol.iqn));
                }
                Err(e) => {
                    warn!(portal = %p, error = %e.message, "login through this portal failed");
                    last = Some(block_error(e, &vol.iqn));
                }
            }
        }
        let Some(portal) = session else {
            return Err(last.unwrap_or_else(|| Error::Internal("no login attempted".to_owned())));
        };
        rec.session_portal = Some(portal.clone());
        // 3. Which disk.
        let (number, ids) = self.find_disk(h, &portal, vol, rec).await?;
        rec.disk_number = Some(number);
        if let Some(ids) = &ids {
            rec.page83 = Some(ids.page83.trim().to_owned()).filter(|s| !s.is_empty());
            rec.serial = Some(ids.serial.trim().to_owned()).filter(|s| !s.is_empty());
        }
        // Identity recorded before anything changes on the disk.
        self.put_iscsi(volume_id, staging, Phase::Staging, rec)?;
        let disk = format!("disk {number} ({target})");
        h.run(
            HostOp::SetDiskState,
            &disk,
            h.host.set_disk_online(number, true, d),
        )
        .await?;
        // 4. Volume: create only on a disk without volumes; never touch a foreign layout.
        let mut vols = h.volumes_on(number, &disk).await?;
        if vols.is_empty() {
            rec.partitioned = true;
            self.put_iscsi(volume_id, staging, Phase::Staging, rec)?;
            h.run(
                HostOp::PartitionDisk,
                &disk,
                h.host.partition_disk(number, d),
            )
            .await?;
            vols = h.volumes_on(number, &disk).await?;
            if vols.is_empty() {
                rec.partitioned = false;
                self.put_iscsi(volume_id, staging, Phase::Staging, rec)?;
                return Err(Error::FailedPrecondition(format!(
                    "{disk} has partitions but no volume Windows can use (an unknown or foreign partition layout, \
                     e.g. written by another operating system); refusing to touch it. Clean the LUN on the storage \
                     system or use another LUN"
                )));
            }
        }
        if vols.len() > 1 {
            return Err(Error::FailedPrecondition(format!(
                "{disk} has {} volumes ({}); this driver mounts a LUN with exactly one volume and will not guess",
                vols.len(),
                vols.join(", ")
            )));
        }
        let vid = vols.remove(0);
        if !h
            .run(
                HostOp::IsVolumeFormatted,
                &vid,
                h.host.is_volume_formatted(&vid, d),
            )
            .await?
        {
            if !rec.partitioned {
                return Err(Error::FailedPrecondition(format!(
                    "volume {vid} on {disk} has no file system Windows recognises, but this driver did not create \
                     it (it may hold data of another operating system, e.g. ext4); refusing to format it"
                )));
            }
            rec.volume = Some(vid.clone());
            self.put_iscsi(volume_id, staging, Phase::Staging, rec)?;
            info!(volume = %vid, disk = %disk, "formatting the new volume (NTFS)");
            h.run(HostOp::FormatVolume, &vid, h.host.format_volume(&vid, d))
                .await?;
        }
        rec.volume = Some(vid.clone());
        self.put_iscsi(volume_id, staging, Phase::Staging, rec)?;
        // 5. Mount at the staging path.
        match mounted {
            Some(v) if same_id(&v, &vid) => {
                debug!(staging = %staging, "the volume is already mounted at the staging path");
                return Ok(());
            }
            Some(other) => {
                return Err(Error::FailedPrecondition(format!(
                    "{staging} has volume {other} mounted, not {vid}; refusing to replace it"
                )));
            }
            None => {}
        }
        match h
            .raw(HostOp::Mkdir, staging, h.host.mkdir(staging, d))
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind == HostErrorKind::AlreadyExists && !fresh => {
                // A mount point left dangling by a reboot (its volume vanished with the session): remove the reparse
                // point (non-forced Rmdir never deletes data) and start over.
                info!(staging = %staging, "removing a dangling mount point at the staging path");
                h.run(HostOp::Rmdir, staging, h.host.rmdir(staging, false, d))
                    .await?;
                h.run(HostOp::Mkdir, staging, h.host.mkdir(staging, d))
                    .await?;
            }
            Err(e) => return Err(block_error(e, staging)),
        }
        h.run(
            HostOp::MountVolume,
            staging,
            h.host.mount_volume(&vid, staging, d),
        )
        .await?;
        Ok(())
    }

    /// Find THE disk of (target, LUN); see the module docs.
    async fn find_disk(
        &self,
        h: &Calls<'_, H>,
        portal: &Portal,
        vol: &IscsiVolume,
        rec: &IscsiRecord,
    ) -> Result<(u32, Option<DiskIds>), Error> {
        let d = h.d;
        let target = format!("{} (LUN {})", vol.iqn, vol.lun);
        let mut rescanned = false;
        let mut waits = backoff_schedule(d.remaining()).into_iter();
        let candidates = loop {
            let disks = h
                .run(
                    HostOp::GetTargetDisks,
                    &vol.iqn,
                    h.host.get_target_disks(portal, &vol.iqn, d),
                )
                .await?;
            if !disks.is_empty() {
                let locs = h
                    .run(
                        HostOp::ListDiskLocations,
                        &target,
                        h.host.list_disk_locations(d),
                    )
                    .await?;
                let mut c: Vec<u32> = disks
                    .iter()
                    .copied()
                    .filter(|n| {
                        locs.get(n)
                            .is_some_and(|l| l.lun.trim().parse::<u32>() == Ok(vol.lun))
                    })
                    .collect();
                c.sort_unstable();
                c.dedup();
                if !c.is_empty() {
                    break c;
                }
            }
            if !rescanned {
                rescanned = true;
                h.run(HostOp::Rescan, &target, h.host.rescan(d)).await?;
                continue;
            }
            let delay = match waits.next() {
                Some(delay) if d.remaining() > delay + ANSWER_RESERVE => delay,
                _ => {
                    return Err(Error::Unavailable(format!(
                        "logged in to {} through {portal}, but no disk with LUN {} appeared (the target's disks: \
                     {disks:?}); check that the LUN exists and is mapped to this initiator. kubelet will retry",
                        vol.iqn, vol.lun
                    )));
                }
            };
            debug!(?delay, "the LUN's disk is not visible yet: waiting");
            tokio::time::sleep(delay).await;
        };
        let need_ids = vol.page83.is_some()
            || vol.serial.is_some()
            || rec.page83.is_some()
            || rec.serial.is_some();
        let ids = match h
            .raw(HostOp::ListDiskIDs, &target, h.host.list_disk_ids(d))
            .await
        {
            Ok(ids) => Some(ids),
            Err(e) if need_ids || uncertain(e.kind) => {
                return Err(Error::FailedPrecondition(format!(
                    "cannot read disk identifiers to verify {target} ({}); refusing to touch a disk whose identity \
                     cannot be checked",
                    e.message
                )));
            }
            Err(e) => {
                warn!(error = %e.message, "ListDiskIDs failed; identity cannot be pinned");
                None
            }
        };
        let id_of = |n: u32| {
            ids.as_ref()
                .and_then(|m| m.get(&n))
                .cloned()
                .unwrap_or_default()
        };
        let matches = |n: &u32| {
            let i = id_of(*n);
            vol.page83.as_deref().is_none_or(|w| same_id(w, &i.page83))
                && vol.serial.as_deref().is_none_or(|w| same_id(w, &i.serial))
        };
        let chosen: Vec<u32> = candidates.iter().copied().filter(matches).collect();
        if chosen.is_empty() {
            let seen: Vec<String> = candidates
                .iter()
                .map(|n| {
                    let i = id_of(*n);
                    format!(
                        "disk {n}: page83 {:?}, serial {:?}",
                        i.page83.trim(),
                        i.serial.trim()
                    )
                })
                .collect();
            return Err(Error::FailedPrecondition(format!(
                "{target} does not match the volume's identity hints (page83 {:?}, serial {:?}); found {}. Refusing \
                 to touch it",
                vol.page83.as_deref().unwrap_or("-"),
                vol.serial.as_deref().unwrap_or("-"),
                seen.join("; ")
            )));
        }
        if chosen.len() > 1 {
            return Err(Error::FailedPrecondition(format!(
                "{target} appears as {} different disks ({chosen:?}): the LUN is reachable over several paths \
                 without MPIO, or the target reports the LUN twice. Refusing to guess; configure MPIO or a single \
                 portal",
                chosen.len()
            )));
        }
        let n = chosen[0];
        let found = id_of(n);
        for (pinned, now, what) in [
            (&rec.page83, found.page83.trim(), "page83"),
            (&rec.serial, found.serial.trim(), "serial"),
        ] {
            if ids.is_some()
                && let Some(p) = pinned
                && !same_id(p, now)
            {
                return Err(Error::FailedPrecondition(format!(
                    "{target} is now disk {n} with {what} {now:?}, but this volume was staged from a disk with \
                     {what} {p:?}; the LUN maps to a different disk: refusing to touch it"
                )));
            }
        }
        debug!(disk = n, page83 = %found.page83.trim(), "disk identified");
        Ok((n, ids.map(|_| found)))
    }

    /// NodeUnstageVolume for an iSCSI record (the caller holds the volume guard).
    pub(crate) async fn unstage_iscsi(
        &self,
        volume_id: &str,
        staging: &HostPath,
        rec: &IscsiRecord,
        d: Deadline,
    ) -> Result<(), Error> {
        let h = self.block_calls(d);
        match h
            .raw(
                HostOp::GetVolumeIDFromTargetPath,
                staging,
                h.host.volume_id_from_target_path(staging, d),
            )
            .await
        {
            Ok(v) => {
                if let Some(want) = &rec.volume
                    && !same_id(want, &v)
                {
                    return Err(Error::FailedPrecondition(format!(
                        "{staging} holds volume {v}, not the recorded {want}; refusing to unmount it"
                    )));
                }
                if let Err(e) = h
                    .raw(
                        HostOp::WriteVolumeCache,
                        &v,
                        h.host.write_volume_cache(&v, d),
                    )
                    .await
                {
                    if uncertain(e.kind) {
                        return Err(block_error(e, &v));
                    }
                    warn!(error = %e.message, "flushing the volume cache failed; unmounting anyway (UnmountVolume flushes too)");
                }
                h.run(
                    HostOp::UnmountVolume,
                    staging,
                    h.host.unmount_volume(&v, staging, d),
                )
                .await?;
                h.run(HostOp::Rmdir, staging, h.host.rmdir(staging, false, d))
                    .await?;
            }
            Err(e) if uncertain(e.kind) => return Err(block_error(e, staging)),
            Err(_) => {
                if h.run(HostOp::PathExists, staging, h.host.path_exists(staging, d))
                    .await?
                {
                    // An empty directory or a dangling mount point: non-forced Rmdir removes either, never data.
                    h.run(HostOp::Rmdir, staging, h.host.rmdir(staging, false, d))
                        .await?;
                }
            }
        }
        let _target = self.object_locks().lock(&rec.target_key()).await;
        let others = self.target_users(volume_id, &rec.iqn)?;
        if others == 0 {
            if let Some(p) = rec.logout_portal() {
                match h
                    .raw(
                        HostOp::DisconnectTarget,
                        &rec.iqn,
                        h.host.disconnect_target(p, &rec.iqn, d),
                    )
                    .await
                {
                    Ok(()) => info!(iqn = %rec.iqn, "last staged LUN of the target: logged out"),
                    Err(e) if e.kind == HostErrorKind::NotFound => debug!("target already gone"),
                    Err(e) => return Err(block_error(e, &rec.iqn)),
                }
            }
        } else {
            debug!(iqn = %rec.iqn, others, "session kept: other staged LUNs of the target use it");
        }
        self.store().remove_volume(volume_id)?;
        info!(staging = %staging, "iSCSI volume unstaged");
        Ok(())
    }

    /// Startup reconciliation of a staged iSCSI volume. A mount point is never judged by `IsSymlink` (Go reports
    /// mount points differently across versions) and nothing is removed here: when the recorded volume is no longer
    /// mounted at the staging path (the session died with a reboot), the record is marked for re-stage and `true` is
    /// returned; the next stage logs in again and repairs the dangling mount point.
    pub(crate) async fn reconcile_iscsi(
        &self,
        rec: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<bool, Error> {
        let Protocol::Iscsi(r) = &rec.protocol else {
            return Ok(false);
        };
        let h = self.block_calls(d);
        match h
            .raw(
                HostOp::GetVolumeIDFromTargetPath,
                staging,
                h.host.volume_id_from_target_path(staging, d),
            )
            .await
        {
            Ok(v) if r.volume.as_deref().is_none_or(|w| same_id(w, &v)) => Ok(false),
            Err(e) if uncertain(e.kind) => Err(block_error(e, staging)),
            _ => {
                self.store().put_volume(&VolumeRecord {
                    phase: Phase::NeedsRestage,
                    ..rec.clone()
                })?;
                info!(volume_id = %rec.volume_id, staging = %staging, iqn = %r.iqn, "iSCSI volume no longer mounted: \
                      marked for re-stage");
                Ok(true)
            }
        }
    }

    /// The staging path behind `path` for `volume_id`: the staging path itself or a target it is published at.
    fn staging_behind(&self, rec: &VolumeRecord, path: &HostPath) -> Result<HostPath, Error> {
        if rec.staging_path.eq_ignore_ascii_case(path.as_str()) {
            return self.config().kubelet_root.host_path(&rec.staging_path);
        }
        match self.store().publication(&path.key())? {
            Some(p) if p.volume_id == rec.volume_id => {
                self.config().kubelet_root.host_path(&p.staging_path)
            }
            _ => Err(Error::NotFound(format!(
                "{path} is not a staging or publish path of volume {:?} on this node",
                rec.volume_id
            ))),
        }
    }

    /// NodeGetVolumeStats for an iSCSI record.
    pub(crate) async fn stats_iscsi(
        &self,
        rec: &VolumeRecord,
        r: &IscsiRecord,
        path: &HostPath,
        d: Deadline,
    ) -> Result<crate::volume::VolumeStats, Error> {
        use crate::volume::{Usage, VolumeStats};
        let staging = self.staging_behind(rec, path)?;
        let h = self.block_calls(d);
        let mounted = h
            .raw(
                HostOp::GetVolumeIDFromTargetPath,
                &staging,
                h.host.volume_id_from_target_path(&staging, d),
            )
            .await;
        match mounted {
            Ok(v)
                if r.volume.as_deref().is_none_or(|w| same_id(w, &v))
                    && rec.phase == Phase::Staged =>
            {
                let (total, used) = h
                    .run(HostOp::GetVolumeStats, &v, h.host.volume_stats(&v, d))
                    .await?;
                let (total, used) = (total as i64, used as i64);
                Ok(VolumeStats {
                    usage: Usage {
                        total,
                        used,
                        available: (total - used).max(0),
                    },
                    abnormal: false,
                    message: format!("volume {v} of {} LUN {} is mounted", r.iqn, r.lun),
                })
            }
            Err(e) if uncertain(e.kind) => Err(block_error(e, &staging)),
            other => {
                let why = match other {
                    Ok(v) => format!("{staging} holds volume {v}, not the recorded one"),
                    _ => self.diagnose(&h, r).await,
                };
                Ok(VolumeStats {
                    usage: Usage::default(),
                    abnormal: true,
                    message: format!("{why}; restart the pod to re-stage the volume"),
                })
            }
        }
    }

    async fn diagnose(&self, h: &Calls<'_, H>, r: &IscsiRecord) -> String {
        let d = h.d;
        let Some(p) = r.logout_portal() else {
            return "the volume is not mounted".to_owned();
        };
        match h
            .raw(
                HostOp::GetTargetDisks,
                &r.iqn,
                h.host.get_target_disks(p, &r.iqn, d),
            )
            .await
        {
            Ok(disks) if disks.is_empty() => format!(
                "the iSCSI session to {} is gone (node rebooted, target unreachable or logged out)",
                r.iqn
            ),
            Ok(disks) => match r.disk_number.filter(|n| disks.contains(n)) {
                Some(n) => match h
                    .raw(HostOp::GetDiskState, &n, h.host.is_disk_online(n, d))
                    .await
                {
                    Ok(false) => format!("disk {n} ({} LUN {}) is offline", r.iqn, r.lun),
                    _ => "the volume is not mounted at the staging path".to_owned(),
                },
                None => format!("the disk of {} LUN {} is no longer visible", r.iqn, r.lun),
            },
            Err(e) => format!(
                "the iSCSI target {} cannot be queried: {}",
                r.iqn, e.message
            ),
        }
    }

    /// NodeExpandVolume: grow the volume's partition to the LUN's size and return the new capacity.
    #[tracing::instrument(level = "debug", name = "expand", skip_all, fields(volume_id = %req.volume_id))]
    pub async fn expand(&self, req: &ExpandRequest, d: Deadline) -> Result<i64, Error> {
        for (v, n) in [
            (&req.volume_id, "volume_id"),
            (&req.volume_path, "volume_path"),
        ] {
            if v.trim().is_empty() {
                return Err(Error::InvalidArgument(format!("{n} is required")));
            }
        }
        let path = self
            .config()
            .kubelet_root
            .check(&req.volume_path, "volume_path")?;
        let _guard = self
            .volume_locks()
            .try_lock(&req.volume_id, "NodeExpandVolume")?;
        let Some(rec) = self.store().volume(&req.volume_id)? else {
            return Err(Error::NotFound(format!(
                "volume {:?} is not staged on this node",
                req.volume_id
            )));
        };
        let Protocol::Iscsi(r) = &rec.protocol else {
            // An SMB share's size is the server's business: nothing to grow on the node.
            return Ok(0);
        };
        let staging = self.staging_behind(&rec, &path)?;
        let h = self.block_calls(d);
        let v = h
            .run(
                HostOp::GetVolumeIDFromTargetPath,
                &staging,
                h.host.volume_id_from_target_path(&staging, d),
            )
            .await?;
        if r.volume.as_deref().is_some_and(|w| !same_id(w, &v)) {
            return Err(Error::FailedPrecondition(format!(
                "{staging} holds volume {v}, not the recorded one; refusing to resize it"
            )));
        }
        let Some(n) = r.disk_number else {
            return Err(Error::FailedPrecondition(
                "the volume's disk is not recorded; re-stage it".to_owned(),
            ));
        };
        let disk = format!("disk {n} ({} LUN {})", r.iqn, r.lun);
        h.run(HostOp::Rescan, &disk, h.host.rescan(d)).await?;
        let disk_size = h
            .run(HostOp::GetDiskStats, &disk, h.host.disk_size(n, d))
            .await?;
        if req.required_bytes > 0 && disk_size < req.required_bytes as u64 {
            return Err(Error::FailedPrecondition(format!(
                "{disk} is {disk_size} bytes, less than the requested {} bytes: grow the LUN on the storage system \
                 first (kubelet retries)",
                req.required_bytes
            )));
        }
        let (before, _) = h
            .run(HostOp::GetVolumeStats, &v, h.host.volume_stats(&v, d))
            .await?;
        h.run(HostOp::ResizeVolume, &v, h.host.resize_volume(&v, 0, d))
            .await?;
        let (after, _) = h
            .run(HostOp::GetVolumeStats, &v, h.host.volume_stats(&v, d))
            .await?;
        if after == before {
            info!(
                capacity = after,
                disk_size,
                "volume not grown: the LUN has less than 100 MiB of unused space \
                  (csi-proxy's minimum growth); reporting the current capacity"
            );
        } else {
            info!(before, after, "volume expanded");
        }
        Ok(after as i64)
    }
}
