//! iSCSI LUNs as volumes: login, safe disk identity, initialise/format, mount, stats, expansion.
//!
//! [`Iscsi`] is the lifecycle's [`Protocol`] for LUNs: it serves volumes whose attributes name a target
//! (`iqn`, `targetPortal` or `portals`). `params.rs` parses the attributes and secrets, [`disk`] finds the
//! LUN's disk, `stage.rs` holds the stage sequence.
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
//! | volume_context | `discoveryCHAPAuth` | `true`: discovery CHAP with `node.sendtargets.auth.*` on a backend with `HostCapabilities::discovery_chap` (native); refused (FailedPrecondition) on csi-proxy, which cannot send discovery credentials |
//! | volume_context | `persistentLogin` | `true`: a persistent login on a backend with `HostCapabilities::persistent_logins` (native), removed on logout; refused on csi-proxy |
//! | volume_context | `page83`, `serial` | identity hints: the disk must match them before anything touches it |
//! | volume_context / capability | `fsType` | `ntfs` (default) only; others are InvalidArgument naming the backend that would support them |
//! | secrets | `node.session.auth.username`, `.password` | one-way CHAP (secret: 12–16 characters, a Windows rule) |
//! | secrets | `node.session.auth.password_in` (`.username_in`) | mutual CHAP: the initiator's node-wide secret, set with `SetMutualChapSecret` before the login |
//! | secrets | `node.sendtargets.auth.*` | discovery CHAP (`username`, `password`; native only; mutual discovery CHAP is refused) |
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
//! selection), no way to clear a disk's read-only flag, no partition-style query, NTFS only. The native backend lifts
//! discovery CHAP, persistent logins and the read-only flag (cleared for writable volumes, `set_disk_online_writable`;
//! a reader-only access mode keeps it); the protocol asks `Host::capabilities` (parse) and the host-call sequence below
//! is the same on both backends. One session per target:
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

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;

use tracing::{debug, info, warn};

use crate::error::Error;
use crate::host::{Host, HostCapabilities, HostError, HostErrorKind, HostOp, HostPath, Portal};
use crate::lifecycle::{
    Calls, Context, ExpandRequest, Health, Protocol, StageAt, StageRequest, Usage, VolumeStats,
    host_error,
};
use crate::locks::Deadline;
use crate::state::{Details, Phase, VolumeRecord};

pub mod disk;
mod params;
mod stage;
#[cfg(test)]
mod tests;

pub use crate::lifecycle::Secrets;
pub use params::{
    CHAP_SECRET_LEN, IscsiVolume, MAX_LUN, check_fs_type, check_iqn, is_iscsi, parse_volume,
    parse_volume_for,
};

/// csi-proxy's ResizeVolume skips growth below this.
pub const MIN_RESIZE_GROWTH: u64 = 100 * 1024 * 1024;

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

impl Details for IscsiRecord {
    const PROTOCOL: &'static str = "iscsi";
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

/// The iSCSI protocol, for a host backend with the given capabilities (discovery CHAP, persistent logins).
#[derive(Clone, Copy, Debug, Default)]
pub struct Iscsi {
    caps: HostCapabilities,
}

impl Iscsi {
    /// The protocol over a backend that can do what `caps` says.
    pub fn new(caps: HostCapabilities) -> Self {
        Self { caps }
    }
}

impl<H: Host> Protocol<H> for Iscsi {
    type Volume = IscsiVolume;

    /// Volumes whose attributes name a target (csi-driver-iscsi's keys).
    fn serves(&self, volume_context: &BTreeMap<String, String>) -> bool {
        is_iscsi(volume_context)
    }

    fn owns(&self, record: &VolumeRecord) -> bool {
        record.is::<IscsiRecord>()
    }

    fn parse(&self, req: &StageRequest) -> Result<IscsiVolume, Error> {
        if let Some(crate::lifecycle::Capability {
            access_type: crate::lifecycle::AccessType::Mount { fs_type, .. },
            ..
        }) = &req.capability
        {
            check_fs_type(fs_type)?;
        }
        let mut vol = parse_volume_for(&req.volume_context, &req.secrets, self.caps)?;
        // SINGLE_NODE_READER_ONLY (2) and MULTI_NODE_READER_ONLY (3): keep the disk's read-only flag.
        vol.read_only = req
            .capability
            .as_ref()
            .is_some_and(|c| matches!(c.access_mode, 2 | 3));
        Ok(vol)
    }

    async fn stage(
        &self,
        cx: Context<'_, H>,
        at: StageAt<'_>,
        vol: &IscsiVolume,
        d: Deadline,
    ) -> Result<(), Error> {
        stage::stage(cx, at.volume_id, at.staging, vol, d).await
    }

    async fn unstage(
        &self,
        cx: Context<'_, H>,
        staging: &HostPath,
        record: &VolumeRecord,
        d: Deadline,
    ) -> Result<(), Error> {
        unstage(cx, &record.volume_id, staging, &details(record)?, d).await
    }

    async fn stats(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        d: Deadline,
    ) -> Result<VolumeStats, Error> {
        stats(cx, record, path, d).await
    }

    async fn check(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<Health, Error> {
        check(cx, record, staging, d).await
    }

    async fn expand(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        req: &ExpandRequest,
        d: Deadline,
    ) -> Result<i64, Error> {
        expand(cx, record, path, req, d).await
    }
}

fn details(record: &VolumeRecord) -> Result<IscsiRecord, Error> {
    record.details::<IscsiRecord>()?.ok_or_else(|| {
        Error::Internal(format!(
            "volume {:?} is not an iSCSI volume; refusing to handle it as one",
            record.volume_id
        ))
    })
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

/// One host call whose failure is mapped with [`block_error`].
async fn run<H: Host, T: std::fmt::Debug>(
    h: &Calls<'_, H>,
    op: HostOp,
    subject: &(dyn Display + Sync),
    fut: impl Future<Output = crate::host::HostResult<T>>,
) -> Result<T, Error> {
    h.raw(op, subject, fut)
        .await
        .map_err(|e| block_error(e, subject))
}

fn same_id(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// Write the volume's record with `rec` as its iSCSI facts.
fn put_iscsi<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    staging: &HostPath,
    phase: Phase,
    rec: &IscsiRecord,
) -> Result<(), Error> {
    cx.store().put_volume(&VolumeRecord::new(
        volume_id,
        phase,
        staging.as_str(),
        false,
        rec,
    )?)
}

/// Other volume records naming the same target (its durable reference count).
fn target_users<H: Host>(cx: Context<'_, H>, volume_id: &str, iqn: &str) -> Result<usize, Error> {
    Ok(cx
        .records::<IscsiRecord>()?
        .iter()
        .filter(|(r, i)| r.volume_id != volume_id && i.iqn.eq_ignore_ascii_case(iqn))
        .count())
}

/// NodeUnstageVolume for an iSCSI record (the caller holds the volume guard).
async fn unstage<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    staging: &HostPath,
    rec: &IscsiRecord,
    d: Deadline,
) -> Result<(), Error> {
    let h = &cx.calls(d);
    match h
        .raw(
            HostOp::GetVolumeIDFromTargetPath,
            staging,
            h.host().volume_id_from_target_path(staging, d),
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
                    h.host().write_volume_cache(&v, d),
                )
                .await
            {
                if uncertain(e.kind) {
                    return Err(block_error(e, &v));
                }
                warn!(error = %e.message, "flushing the volume cache failed; unmounting anyway (UnmountVolume flushes too)");
            }
            run(
                h,
                HostOp::UnmountVolume,
                staging,
                h.host().unmount_volume(&v, staging, d),
            )
            .await?;
            run(h, HostOp::Rmdir, staging, h.host().rmdir(staging, false, d)).await?;
        }
        Err(e) if uncertain(e.kind) => return Err(block_error(e, staging)),
        Err(_) => {
            if run(
                h,
                HostOp::PathExists,
                staging,
                h.host().path_exists(staging, d),
            )
            .await?
            {
                // An empty directory or a dangling mount point: non-forced Rmdir removes either, never data.
                run(h, HostOp::Rmdir, staging, h.host().rmdir(staging, false, d)).await?;
            }
        }
    }
    let _target = cx.object_locks().lock(&rec.target_key()).await;
    let others = target_users(cx, volume_id, &rec.iqn)?;
    if others == 0 {
        if let Some(p) = rec.logout_portal() {
            match h
                .raw(
                    HostOp::DisconnectTarget,
                    &rec.iqn,
                    h.host().disconnect_target(p, &rec.iqn, d),
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
    cx.store().remove_volume(volume_id)?;
    info!(staging = %staging, "iSCSI volume unstaged");
    Ok(())
}

/// Startup reconciliation of a staged iSCSI volume. A mount point is never judged by `IsSymlink` (Go reports
/// mount points differently across versions) and nothing is removed here: when the recorded volume is no longer
/// mounted at the staging path (the session died with a reboot), the record is marked for re-stage; the next stage logs in again and repairs the dangling mount point.
async fn check<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    staging: &HostPath,
    d: Deadline,
) -> Result<Health, Error> {
    let r = details(rec)?;
    let h = &cx.calls(d);
    match h
        .raw(
            HostOp::GetVolumeIDFromTargetPath,
            staging,
            h.host().volume_id_from_target_path(staging, d),
        )
        .await
    {
        Ok(v) if r.volume.as_deref().is_none_or(|w| same_id(w, &v)) => Ok(Health::Healthy),
        Err(e) if uncertain(e.kind) => Err(block_error(e, staging)),
        _ => {
            cx.mark_needs_restage(rec)?;
            info!(volume_id = %rec.volume_id, staging = %staging, iqn = %r.iqn, "iSCSI volume no longer mounted: \
                  marked for re-stage");
            Ok(Health::NeedsRestage)
        }
    }
}

/// NodeGetVolumeStats for an iSCSI record.
async fn stats<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    path: &HostPath,
    d: Deadline,
) -> Result<VolumeStats, Error> {
    let r = &details(rec)?;
    let staging = cx.staging_behind(rec, path)?;
    let h = &cx.calls(d);
    let mounted = h
        .raw(
            HostOp::GetVolumeIDFromTargetPath,
            &staging,
            h.host().volume_id_from_target_path(&staging, d),
        )
        .await;
    match mounted {
        Ok(v)
            if r.volume.as_deref().is_none_or(|w| same_id(w, &v)) && rec.phase == Phase::Staged =>
        {
            let (total, used) =
                run(h, HostOp::GetVolumeStats, &v, h.host().volume_stats(&v, d)).await?;
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
                _ => diagnose(h, r).await,
            };
            Ok(VolumeStats {
                usage: Usage::default(),
                abnormal: true,
                message: format!("{why}; restart the pod to re-stage the volume"),
            })
        }
    }
}

async fn diagnose<H: Host>(h: &Calls<'_, H>, r: &IscsiRecord) -> String {
    let d = h.deadline();
    let Some(p) = r.logout_portal() else {
        return "the volume is not mounted".to_owned();
    };
    match h
        .raw(
            HostOp::GetTargetDisks,
            &r.iqn,
            h.host().get_target_disks(p, &r.iqn, d),
        )
        .await
    {
        Ok(disks) if disks.is_empty() => format!(
            "the iSCSI session to {} is gone (node rebooted, target unreachable or logged out)",
            r.iqn
        ),
        Ok(disks) => match r.disk_number.filter(|n| disks.contains(n)) {
            Some(n) => match h
                .raw(HostOp::GetDiskState, &n, h.host().is_disk_online(n, d))
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
async fn expand<H: Host>(
    cx: Context<'_, H>,
    rec: &VolumeRecord,
    path: &HostPath,
    req: &ExpandRequest,
    d: Deadline,
) -> Result<i64, Error> {
    let r = &details(rec)?;
    let staging = cx.staging_behind(rec, path)?;
    let h = &cx.calls(d);
    let v = run(
        h,
        HostOp::GetVolumeIDFromTargetPath,
        &staging,
        h.host().volume_id_from_target_path(&staging, d),
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
    run(h, HostOp::Rescan, &disk, h.host().rescan(d)).await?;
    let disk_size = run(h, HostOp::GetDiskStats, &disk, h.host().disk_size(n, d)).await?;
    if req.required_bytes > 0 && disk_size < req.required_bytes as u64 {
        return Err(Error::FailedPrecondition(format!(
            "{disk} is {disk_size} bytes, less than the requested {} bytes: grow the LUN on the storage system \
             first (kubelet retries)",
            req.required_bytes
        )));
    }
    let (before, _) = run(h, HostOp::GetVolumeStats, &v, h.host().volume_stats(&v, d)).await?;
    run(
        h,
        HostOp::ResizeVolume,
        &v,
        h.host().resize_volume(&v, 0, d),
    )
    .await?;
    let (after, _) = run(h, HostOp::GetVolumeStats, &v, h.host().volume_stats(&v, d)).await?;
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
