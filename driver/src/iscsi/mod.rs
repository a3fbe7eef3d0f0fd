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
//! every mutual-CHAP volume on a node must use the same `password_in`: a stage with another one while a staged volume
//! relies on the current secret is refused (FailedPrecondition), never silently replaces it (`chap.rs`).
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
//! selection), no way to set or clear a disk's read-only flag, no partition-style query, NTFS only. The native backend
//! lifts discovery CHAP, persistent logins and the read-only flag (cleared for writable volumes,
//! `set_disk_online_writable`; set for reader-only ones, `set_disk_online_read_only`: `access.rs`); the protocol asks
//! `Host::capabilities` (parse) and the host-call sequence below is the same on both backends. Access modes
//! (`access.rs`): the multi-node writer modes are refused, a reader-only stage writes nothing. One session per target:
//! further portals are added (a later stage may log in through any of them). A second `ConnectTarget` to a connected
//! target is a no-op from csi-proxy v1.3.0 and an error ("already logged in") before: both are a login. The IQN is
//! sent as `DiscoverTargetPortal` reports it: v1.3.0 looks targets up exact-case and a miss dereferences nil (the
//! csi-proxy process dies), master answers "not found"; a target no portal reports is refused before any call names
//! it.
//!
//! # Reboots, and what each csi-proxy release says about a volume that is gone
//!
//! Logins are not persistent, so a reboot takes every session away and the mount points at the staging paths
//! dangle. PowerShell-era csi-proxy (≤ v1.2.1) still answers `GetVolumeIDFromTargetPath` with the old volume (it
//! reads the reparse data); v1.3.0+ fail. So "already staged", startup health and publish readiness all need
//! `GetVolumeStats` of the recorded volume to answer, the re-stage logs in again (the mount point resolves once the
//! volume is back), and an unstage of a volume that is gone skips the unmount and removes the dangling mount point.
//!
//! # Host-call sequences (asserted by the unit tests in `iscsi/tests.rs`)
//!
//! | Operation | Host calls |
//! | --- | --- |
//! | first stage, RAW LUN | `AddTargetPortal` (each portal) → `DiscoverTargetPortal` → (mutual CHAP: `SetMutualChapSecret`) → `ConnectTarget` → `GetTargetDisks` → `ListDiskLocations` → `ListDiskIDs` → `SetDiskState(online)` → `ListVolumesOnDisk` → `Rescan` → `ListVolumesOnDisk` (PowerShell era: "no partition", the proof; v1.3.0+: more looks, each `Rescan` → `ListVolumesOnDisk` after a pause, spanning the settle time) → `PartitionDisk` → (a pause) `Rescan` → `ListVolumesOnDisk` → `IsVolumeFormatted` → `FormatVolume` → `Mkdir(staging)` → `MountVolume` |
//! | first stage, target created after its portal was added (no portal lists it) | `AddTargetPortal` → `DiscoverTargetPortal` → native: `RefreshTargetPortal`; csi-proxy: `DiscoverTargetPortal` → `GetTargetDisks` (each target it lists) → `RemoveTargetPortal` → `AddTargetPortal` (each portal no record's session uses and no listed target has disks) → `DiscoverTargetPortal` → … as above; still not listed: FailedPrecondition naming `Update-IscsiTargetPortal` |
//! | first stage, LUN with an NTFS volume | `AddTargetPortal` → `DiscoverTargetPortal` → `ConnectTarget` → `GetTargetDisks` → `ListDiskLocations` → `ListDiskIDs` → `SetDiskState` → `ListVolumesOnDisk` → `IsVolumeFormatted` → `Mkdir` → `MountVolume` |
//! | disk not visible yet | `GetTargetDisks` (empty or no LUN match), then after each pause of a bounded backoff (500 ms doubling, at most 4 rounds, never past the RPC deadline) `Rescan` → `GetTargetDisks` → Unavailable |
//! | repeated stage | `GetVolumeIDFromTargetPath(staging)` (the recorded volume) → `GetVolumeStats` (it is there: done) |
//! | unstage | `GetVolumeIDFromTargetPath` → `UnmountVolume` (which flushes the volume first on every release) → `Rmdir(staging)` → `DisconnectTarget` (only when no other record names the target; announced in the record first, `removal.rs`); a first stage that never succeeded and partitioned the disk keeps a released record |
//! | unstage, volume gone (reboot) | `GetVolumeIDFromTargetPath` (PowerShell era: the old id) → `UnmountVolume` (not found: its flush fails) → `Rmdir(staging)` → `DisconnectTarget` (no session: done); v1.3.0+: `GetVolumeIDFromTargetPath` (fails) → `Rmdir` → `DisconnectTarget` |
//! | unstage without a record (adoption, `adopt.rs`) | `GetVolumeIDFromTargetPath` → `GetVolumeStats` → `GetDiskNumberFromVolumeID` → `ListTargetPortals` → per portal `DiscoverTargetPortal` → per target `GetTargetDisks` → `ListDiskLocations` → `ListDiskIDs`, then the unstage above with `GetTargetDisks` before `DisconnectTarget` (logout only when it is exactly this disk) |
//! | stats | `GetVolumeIDFromTargetPath` → `GetVolumeStats`; when the volume is not there: `GetTargetDisks` (→ `GetDiskState`) to say why |
//! | startup reconcile (staged record) | `GetVolumeIDFromTargetPath` → `GetVolumeStats`; not the recorded volume, or not there → record marked `needs_restage`, nothing removed |
//! | publish readiness | `GetVolumeIDFromTargetPath` (the recorded volume) → `GetVolumeStats`; the mount point gone and the volume there: → `Mkdir` → `MountVolume` (repaired from the record) |
//! | expand | `GetVolumeIDFromTargetPath` → `Rescan` → `GetDiskStats` → `GetVolumeStats` → `ResizeVolume(0)` → `GetVolumeStats`; no `ResizeVolume` when the disk has less than 100 MiB beyond the volume |
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
//! Stages running at once share a `ListDiskLocations` or `ListDiskIDs` already in flight (`listings.rs`), but only one
//! that started after the stage asked for its target's disks (`GetTargetDisks` of the look that found the candidates):
//! never older than the listing the stage would have made itself, so its answer, or its error, is the stage's. The
//! host-call sequences above are those of one stage alone; with many at once, some listings are shared.
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
//! * the disk is judged to have no volume only from a list made after a `Rescan`: Windows' storage cache may not
//!   show partitions that are still arriving, and a stale empty list followed by a fresh one would otherwise make a
//!   foreign volume look like ours. PowerShell-era answers for "none" (`[""]`, "No MSFT_Partition objects found")
//!   count as none, and their "no partition at all" (`Get-Partition`'s record, told by its identifier) proves the disk
//!   empty at once; otherwise looks span the settle time (`judge.rs`). (The native backend reads the partition table
//!   instead: a disk without a data partition is empty without a `Rescan`; one with a data partition is waited for.)
//! * no volume → record the intent (`partitioning`), `PartitionDisk`, list again (again with a `Rescan` if needed): a
//!   volume that appeared is the evidence that this driver created it (`partitioned`); still none means the disk
//!   holds partitions Windows has no volume for (a foreign layout, e.g. Linux LVM): FailedPrecondition, and
//!   `PartitionDisk` was a no-op, so the disk is untouched;
//! * `FormatVolume` runs only on an unformatted volume **this driver created in the first stage still in progress**
//!   (the evidence above, or — after a crash right after `PartitionDisk` — the intent recorded after a fresh empty
//!   list); an unformatted volume it did not create (e.g. ext4 written by a Linux node, which Windows shows as a RAW
//!   volume) is refused, never formatted;
//! * the marks (`partitioning`, `partitioned`) are retired by the `Staged` write (and on any re-stage of an older
//!   record): once a stage succeeded the volume holds what pods wrote, and Windows showing no file system on it later
//!   (`FileSystemType` Unknown: an NTFS damaged by an unclean iSCSI drop, a locked BitLocker volume) is
//!   FailedPrecondition naming the volume, `chkdsk` and unlocking — never a format. The durable fact that a stage
//!   succeeded is thus the absence of the marks, not a record that outlives the volume: an unstage removes the
//!   record, and a later stage (here or on any node) finds no marks, so an unformatted volume is never this driver's;
//! * a recorded volume is the LUN's only acceptable volume: a LUN that shows another one (re-partitioned elsewhere)
//!   is refused, never taken for this volume's (`judge.rs`);
//! * a first stage that ends without success keeps the marks and any announced call in a *released* record (no
//!   longer a user of the session): its rollback, and — since kubelet unstages a volume whose stage was uncertain
//!   when the pod is deleted — its unstage (`volume.rs`). The next stage of the volume on this node formats the volume
//!   this driver created. On another node (no record) that volume is refused like any unformatted volume, and the
//!   refusal names the explicit way back: format it by hand (`Format-Volume`) or clean the LUN. A volume attribute
//!   that lets the driver format such a volume is deliberately not offered: it would stay in the PersistentVolume, and
//!   through csi-proxy nothing tells a never-formatted volume from an NTFS a later crash damaged, so the node the pod
//!   moves to after that crash would format the pod's data;
//! * a write-protected disk (a read-only LUN, or the SAN policy) makes `PartitionDisk` / `FormatVolume` fail:
//!   reported as such (csi-proxy cannot clear the flag), nothing is formatted. LUNs arriving offline under the
//!   default SAN policy (OfflineShared) are brought online (`SetDiskState`).
//!
//! A disk with *no partition table at all* whose contents another OS wrote directly (a whole-disk file system, an LVM
//! or ZFS member, …) looks exactly like a new RAW disk to `ListVolumesOnDisk`. The native backend's `PartitionDisk`
//! reads the disk's first and last sectors and refuses it (`HostErrorKind::MayHoldData`, answered as
//! FailedPrecondition naming what was found, nothing written; `host/native/blank.rs`). Through csi-proxy it is not
//! detectable (no sector read): identity hints are the only protection there (README, safety).
//!
//! # Sessions and portals
//!
//! Logins are not persistent (csi-proxy never sets IsPersistent): after a reboot the session is gone and the next
//! stage logs in again. The session is logged out on unstage only when no other state record names the same target
//! (per-target lock, held by a stage from the portals to the login and by an unstage or rollback around the count and
//! the logout; records are written before the login and deleted after the logout, so a crash over-counts and never
//! logs out a session in use). The disk steps after the login (find the disk, its volume, format, mount) hold only
//! the LUN's own lock (`iscsi-lun:`), so the LUNs of one target stage at once while two volumes that name one LUN never
//! judge, partition or format its disk together. A definite failure of a first stage logs out (when no other record names the
//! target) and keeps no record that counts as a user: at most a *released* record remembering that this driver
//! partitioned the disk, so kubelet's retry can finish formatting it. Portals are not removed at unstage: on Windows
//! `RemoveTargetPortal` forgets every target discovered through it (other volumes, administrator-configured discovery
//! CHAP), and `AddTargetPortal` is idempotent, so a leftover portal costs nothing. The one removal: a first stage
//! whose target no portal lists re-adds a portal no session uses (on record or on the host), to make csi-proxy's Windows discover its
//! targets again (`discovery.rs`).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::error::Error;
use crate::host::{
    Host, HostCapabilities, HostError, HostErrorKind, HostOp, HostPath, IscsiAuth, Portal,
    name_key, names_equal,
};
use crate::lifecycle::{
    Calls, Context, ExpandRequest, Found, Health, Protocol, StageAt, StageRequest, VolumeStats,
    host_error,
};
use crate::locks::Deadline;
use crate::state::{Details, Phase, VolumeRecord};

mod access;
mod adopt;
mod capacity;
mod chap;
mod creation;
mod discovery;
pub mod disk;
mod judge;
mod listings;
mod multipath;
mod params;
// Test-only, named tests.rs so the architecture test treats it as test code.
mod pending;
#[cfg(test)]
#[path = "raw/tests.rs"]
mod raw_tests;
mod removal;
mod stage;
#[cfg(test)]
mod tests;
mod volume;

pub use crate::lifecycle::Secrets;
pub use capacity::ISCSI_SESSION_LIMIT;
pub use judge::{DEFAULT_SETTLE, IscsiSettings};
pub use params::{
    CHAP_SECRET_LEN, IscsiVolume, MAX_LUN, check_fs_type, check_iqn, is_iscsi, parse_volume,
    parse_volume_for,
};
pub use pending::{Destructive, Pending};

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
    /// A multipath volume's portals, one session through each (`multipath.rs`); empty for one session. While its
    /// logins run: the portals whose logins were issued and have not failed (an unstage's look, `creation.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub session_portals: Vec<Portal>,
    /// Target name, as given.
    pub iqn: String,
    /// The target name as the portal reports it (`DiscoverTargetPortal`), recorded before the first call that names
    /// the target: every call uses this spelling (csi-proxy v1.3.0 matches exact-case, and a miss kills it).
    #[serde(default)]
    pub target_iqn: Option<String>,
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
    /// Intent, recorded before `PartitionDisk` and only after the disk was proven to have no volume (csi-proxy: a
    /// `Rescan` and a re-list across the settle time; native: a partition table without a data partition): a volume
    /// found on the disk afterwards can only be the one `PartitionDisk` created. A mark of the first stage still in
    /// progress: retired once a stage of the volume succeeded (see "What may be initialised or formatted").
    #[serde(default)]
    pub partitioning: bool,
    /// Evidence that this driver created the disk's volume: none after a refreshed storage cache before
    /// `PartitionDisk`, one after it (so an unformatted volume there is ours to format). Retired with `partitioning`.
    #[serde(default)]
    pub partitioned: bool,
    /// A fingerprint (salted PBKDF2, never the secret) of the initiator's mutual CHAP secret this volume's session
    /// relies on (see `chap.rs`).
    #[serde(default)]
    pub mutual_chap: Option<String>,
    /// A first stage failed definitely: the record only remembers the disk this driver partitioned (so a retry can
    /// finish formatting it) and no longer counts as a user of the target's session.
    #[serde(default)]
    pub released: bool,
    /// A destructive call announced before it was issued whose outcome is not known yet (`pending.rs`): the next
    /// stage or expansion learns it from the host before it issues anything destructive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    /// The logout of the target's session announced before it was issued (`removal.rs`), whose outcome is not known
    /// yet: stages of the target wait for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removal: Option<Pending>,
    /// The unstage's `Rmdir` of the staging path announced before it was issued (`removal.rs`), its outcome not known
    /// yet: a stage of the volume waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmounting: Option<Pending>,
    /// The node's uptime when a stage of the volume last succeeded (absent in records of earlier versions, or when
    /// the backend cannot tell): start-up reconciliation tells a session lost to a reboot (re-stage) from a disk
    /// that went away while the node ran (a portal outage: left in place, `volume.rs` `check`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_boot: Option<crate::host::BootStamp>,
    /// A stage of this volume ran on a backend that keeps no ledger of the sessions it makes (csi-proxy: a login to a
    /// connected target answers "already logged in", and the target's last unstage logs out whoever logged in).
    /// Written before the stage's login and kept by later stages. A node moved to the native backend counts the
    /// target's session as wincsi's from this record, whatever its phase (`backend::recorded_targets`), unless the
    /// native backend knew it as someone else's: a stage killed on csi-proxy leaves its session to the native driver's
    /// unstage, as csi-proxy's would have logged out (issue 37, backend change with running pods).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unledgered: bool,
    /// The stage's login, announced before it was issued and retired by the `Staged` write (`creation.rs`): an
    /// unstage waits until it cannot still run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creating: Option<crate::lifecycle::creation::Creation>,
}

impl Details for IscsiRecord {
    const PROTOCOL: &'static str = "iscsi";
}

impl IscsiRecord {
    fn new(vol: &IscsiVolume) -> Self {
        Self {
            portals: vol.portals.clone(),
            session_portal: None,
            session_portals: Vec::new(),
            iqn: vol.iqn.clone(),
            target_iqn: None,
            lun: vol.lun,
            disk_number: None,
            page83: None,
            serial: None,
            volume: None,
            partitioning: false,
            partitioned: false,
            mutual_chap: None,
            released: false,
            pending: None,
            removal: None,
            unmounting: None,
            staged_boot: None,
            unledgered: false,
            creating: None,
        }
    }

    /// The lock / reference key of the target.
    pub fn target_key(&self) -> String {
        target_key(&self.iqn)
    }

    /// The lock key of this LUN's disk (one per target and LUN, whatever the spelling of the target's name).
    pub fn lun_key(&self) -> String {
        format!("{}{}", target_luns_key(&self.iqn), self.lun)
    }

    fn same_lun(&self, vol: &IscsiVolume) -> bool {
        same_name(&self.iqn, &vol.iqn) && self.lun == vol.lun
    }

    /// The portal to log out through.
    fn logout_portal(&self) -> Option<&Portal> {
        self.session_portal.as_ref().or(self.portals.first())
    }

    /// The IQN to name the target with in a host call, when a session may exist: the spelling the portal reported,
    /// or (records of older versions) the one a login succeeded with. `None`: this volume never got as far as a
    /// login, so there is nothing to log out (and no spelling that is safe to send).
    fn login_iqn(&self) -> Option<&str> {
        self.target_iqn
            .as_deref()
            .or_else(|| self.session_portal.is_some().then_some(self.iqn.as_str()))
    }

    /// Whether an unformatted volume on the disk is this driver's to format: the marks (`partitioning`,
    /// `partitioned`) of a first stage still in progress, which no stage of the volume has completed since.
    fn volume_is_ours(&self) -> bool {
        self.partitioned || self.partitioning
    }

    /// A stage of the volume succeeded: from now on its volume holds what the pod wrote, so nothing may ever format it
    /// again, whatever Windows later reads on it (see "What may be initialised or formatted").
    fn retire_marks(&mut self) {
        self.partitioning = false;
        self.partitioned = false;
    }

    /// What a first stage that ended without success keeps (a rollback, or an unstage before any stage succeeded):
    /// the marks that this driver partitioned the disk and any announced call, so the next stage formats the volume it
    /// created and never issues a second destructive call while the first may run; no longer a user of the session.
    fn release(&mut self) {
        self.session_portal = None;
        self.session_portals.clear();
        self.mutual_chap = None;
        self.released = true;
    }
}

/// Whether two target names are one target: Windows compares them case-insensitively through its upcase table, for
/// every character (`crate::host::name`; RFC 3722 stringprep lower-cases too, and `iqn.…:` suffixes may be non-ASCII).
fn same_name(a: &str, b: &str) -> bool {
    names_equal(a, b)
}

/// What every [`IscsiRecord::lun_key`] of target `iqn` starts with (target names hold no `#`).
fn target_luns_key(iqn: &str) -> String {
    format!("iscsi-lun:{}#", name_key(iqn))
}

/// The lock key of a target: its name as a Windows name key (the historical lower-cased form for ASCII names).
fn target_key(iqn: &str) -> String {
    format!("iscsi-target:{}", name_key(iqn))
}

/// The iSCSI protocol, for a host backend with the given capabilities (discovery CHAP, persistent logins, partition
/// tables).
#[derive(Clone, Debug)]
pub struct Iscsi {
    caps: HostCapabilities,
    sessions: Sessions,
    listings: listings::Listings,
    judge: judge::Judge,
}

impl Default for Iscsi {
    fn default() -> Self {
        Self::new(HostCapabilities::default())
    }
}

impl Iscsi {
    /// The protocol over a backend that can do what `caps` says, with the default settings.
    pub fn new(caps: HostCapabilities) -> Self {
        Self::with_settings(caps, IscsiSettings::default())
    }

    /// [`Iscsi::new`] with `settings` (the driver's flags).
    pub fn with_settings(caps: HostCapabilities, settings: IscsiSettings) -> Self {
        Self {
            caps,
            sessions: Sessions::default(),
            listings: listings::Listings::default(),
            judge: judge::Judge::new(settings),
        }
    }
}

/// The iSCSI sessions this process logged in to and has not logged out of since, by target lock key. A first stage
/// of another LUN of such a target joins the session (no portal, discovery or login call, and no wait behind other
/// stages' logins); it is only a hint: a stage that joins and finds no disk of the target forgets the session and
/// logs in itself, and every logout forgets it. Empty at start, so after a reboot every target is logged in again.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sessions(
    Arc<Mutex<HashMap<String, Session>>>,
    /// The logins this process issued, run to their end (`creation.rs`).
    pub(super) crate::lifecycle::creation::Creations,
);

/// What a stage that joins a session takes from the one that made it.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// The target's own spelling of its name (as discovered).
    pub(crate) iqn: String,
    /// The portal of the login.
    pub(crate) portal: Portal,
    /// The portals added with it.
    portals: Vec<Portal>,
    /// Whether the login was persistent.
    persistent: bool,
    /// Whether it logged in through every portal with Multipath I/O.
    multipath: bool,
}

impl Sessions {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The session `vol` may join: one this process made to the target, with every portal `vol` names added and the
    /// same persistence, for a volume that needs no call of its own before the login (no mutual CHAP secret to set,
    /// no discovery CHAP to add portals with). The caller holds the target's lock.
    pub(crate) fn joinable(&self, key: &str, vol: &IscsiVolume) -> Option<Session> {
        if vol.mutual_secret.is_some() || !matches!(vol.discovery, IscsiAuth::None) {
            return None;
        }
        self.map()
            .get(key)
            .filter(|s| {
                s.persistent == vol.persistent
                    && (s.multipath || !vol.multipath)
                    && vol.portals.iter().all(|p| s.portals.contains(p))
            })
            .cloned()
    }

    /// Remember the session a stage of `vol` logged in to (the caller holds the target's lock).
    pub(crate) fn logged_in(&self, key: &str, vol: &IscsiVolume, iqn: &str, portal: &Portal) {
        self.map().insert(
            key.to_owned(),
            Session {
                iqn: iqn.to_owned(),
                portal: portal.clone(),
                portals: vol.portals.clone(),
                persistent: vol.persistent,
                multipath: vol.multipath,
            },
        );
    }

    /// Forget a target's session (logged out, or found gone).
    pub(crate) fn forget(&self, key: &str) {
        self.map().remove(key);
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

    /// A released record (a first stage that never succeeded) holds no volume on the node.
    fn holds(&self, record: &VolumeRecord) -> bool {
        !matches!(record.details::<IscsiRecord>(), Ok(Some(r)) if r.released)
    }

    /// The initiator's free sessions (`capacity.rs`).
    async fn free_slots(&self, cx: Context<'_, H>, d: Deadline) -> Result<Option<u64>, Error> {
        capacity::free_slots(cx, d).await
    }

    fn parse(&self, req: &StageRequest) -> Result<IscsiVolume, Error> {
        if let Some(crate::lifecycle::Capability {
            access_type: crate::lifecycle::AccessType::Mount { fs_type, .. },
            ..
        }) = &req.capability
        {
            check_fs_type(fs_type)?;
        }
        let mode = req.capability.as_ref().map_or(0, |c| c.access_mode);
        // The multi-node writer modes NTFS cannot serve (`access.rs`).
        access::check_mode(mode)?;
        let mut vol = parse_volume_for(&req.volume_context, &req.secrets, self.caps)?;
        // SINGLE_NODE_READER_ONLY (2) and MULTI_NODE_READER_ONLY (3): nothing is written to the disk, which is kept
        // (natively: made) read-only.
        vol.read_only = access::reader_only(mode);
        Ok(vol)
    }

    fn check_publish(
        &self,
        record: &VolumeRecord,
        access: &crate::state::AccessRecord,
        readonly: bool,
    ) -> Result<(), Error> {
        access::check_publish(record, access, readonly)
    }

    async fn stage(
        &self,
        cx: Context<'_, H>,
        at: StageAt<'_>,
        vol: &IscsiVolume,
        d: Deadline,
    ) -> Result<(), Error> {
        stage::stage(
            cx,
            &self.sessions,
            &self.listings,
            &self.judge,
            at.volume_id,
            at.staging,
            vol,
            d,
        )
        .await
    }

    async fn unstage(
        &self,
        cx: Context<'_, H>,
        staging: &HostPath,
        record: &VolumeRecord,
        d: Deadline,
    ) -> Result<(), Error> {
        volume::unstage(
            cx,
            &self.sessions,
            &self.judge,
            record,
            staging,
            &details(record)?,
            d,
        )
        .await
    }

    /// A volume mounted at the staging path on a disk an iSCSI session serves (`adopt.rs`).
    async fn adopt(
        &self,
        cx: Context<'_, H>,
        found: Found<'_>,
        d: Deadline,
    ) -> Result<Option<VolumeRecord>, Error> {
        adopt::adopt(cx, found, d).await
    }

    async fn stats(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        d: Deadline,
    ) -> Result<VolumeStats, Error> {
        volume::stats(cx, record, path, d).await
    }

    async fn check(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<Health, Error> {
        volume::check(cx, record, staging, d).await
    }

    async fn ready(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        staging: &HostPath,
        d: Deadline,
    ) -> Result<(), Error> {
        volume::ready(cx, record, staging, d).await
    }

    async fn expand(
        &self,
        cx: Context<'_, H>,
        record: &VolumeRecord,
        path: &HostPath,
        req: &ExpandRequest,
        d: Deadline,
    ) -> Result<i64, Error> {
        volume::expand(cx, &self.judge, record, path, req, d).await
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

/// Map a block/iSCSI host failure to the driver error.
fn block_error(err: HostError, subject: &dyn Display) -> Error {
    match (err.op, err.kind) {
        (HostOp::ConnectTarget, HostErrorKind::LogonFailure) => Error::FailedPrecondition(format!(
            "the iSCSI target {subject} rejected the login (CHAP authentication failure); check \
             node.session.auth.username/password (and password_in for mutual CHAP) in the node-stage secret and the \
             target's CHAP settings. Not retried with other portals"
        )),
        (HostOp::AddTargetPortal, kind) if !kind.is_uncertain() => {
            Error::FailedPrecondition(format!(
                "cannot add iSCSI portal {subject}: {}; check the address and that the node reaches it",
                err.message
            ))
        }
        (HostOp::DiscoverTargetPortal, kind) if !kind.is_uncertain() => {
            Error::FailedPrecondition(format!(
                "cannot list the targets of iSCSI portal {subject}: {}; check the portal and that it allows this \
             initiator",
                err.message
            ))
        }
        (HostOp::ConnectTarget, HostErrorKind::NotFound) => Error::FailedPrecondition(format!(
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

/// One host call whose failure is mapped with [`block_error`]. Not an `async fn`, so that `fut` is boxed at once
/// (see [`Calls::raw`]).
fn run<H: Host, T: std::fmt::Debug>(
    h: &Calls<'_, H>,
    op: HostOp,
    subject: &(dyn Display + Sync),
    fut: impl Future<Output = crate::host::HostResult<T>>,
) -> impl Future<Output = Result<T, Error>> {
    let call = h.raw(op, subject, fut);
    async move { call.await.map_err(|e| block_error(e, subject)) }
}

fn same_id(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// Write the volume's record with `rec` as its iSCSI facts.
async fn put_iscsi<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    staging: &HostPath,
    phase: Phase,
    rec: &IscsiRecord,
) -> Result<(), Error> {
    cx.store()
        .put_volume(&iscsi_record(cx, volume_id, staging, phase, rec)?)
        .await
}

/// The volume record of an iSCSI volume in `phase`.
fn iscsi_record<H: Host>(
    cx: Context<'_, H>,
    volume_id: &str,
    staging: &HostPath,
    phase: Phase,
    rec: &IscsiRecord,
) -> Result<VolumeRecord, Error> {
    let record = VolumeRecord::new(volume_id, phase, staging.as_str(), false, rec)?;
    Ok(if phase == Phase::Staged {
        cx.staged(&record)
    } else {
        record
    })
}

/// Other volume records naming the same target (its durable reference count). A record a failed first stage released
/// no longer holds the session.
fn target_users<H: Host>(cx: Context<'_, H>, volume_id: &str, iqn: &str) -> Result<usize, Error> {
    cx.count_records::<IscsiRecord>(|r, i| {
        r.volume_id != volume_id && !i.released && same_name(&i.iqn, iqn)
    })
}
