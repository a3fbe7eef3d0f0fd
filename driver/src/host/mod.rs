//! The host port: everything the driver asks of the Windows host, shaped after csi-proxy's primitives, and the
//! vocabulary it speaks.
//!
//! * The port: [`Host`], one method per host operation ([`HostOp`], named after the csi-proxy RPC), each bounded by
//!   the RPC's [`Deadline`]; failures are [`HostError`]s classified into [`HostErrorKind`] by the backend, so the
//!   layers above decide on kinds, never on a backend's error texts. [`HostProbe`] is the backend's liveness check.
//! * The vocabulary: validated host paths inside the kubelet root ([`HostPath`], [`KubeletRoot`]), UNC paths and SMB
//!   credentials ([`UncPath`], [`SmbCredential`]), disk locations and identifiers ([`DiskLocation`], [`DiskIds`]),
//!   target portals and login authentication ([`Portal`], [`IscsiAuth`]) and the redacting [`Secret`]; how Windows
//!   compares names ([`name`]: case-insensitively through its upcase table, for every character).
//! * The backends: [`csi_proxy::CsiProxyHost`] (csi-proxy over named pipes, or the simulated host over Unix sockets
//!   or in-process). A native HostProcess backend (Win32 + WMI) is another implementation of the same trait, in
//!   `host/native/`. Only this module and the composition root (`crate::backend`) name a backend. [`Metered`] wraps
//!   any of them to count and time every call (`--metrics-address`).
//!
//! Every test double of the host is the simulated host (`sim`), reached through the csi-proxy backend: there is one
//! model of a Windows host.
//!
//! csi-proxy v1 cannot list or query SMB global mappings. The driver therefore learns a mapping's health from path
//! reachability: [`Host::is_symlink`] looks one hop (the link's *immediate* target), so on a staging link, whose
//! immediate target is the UNC path, true means the share answers through the mapping; false (Windows errors 2, 3,
//! 53) or an error (5, 67, 1326, … — a Disconnected mapping after a reboot, rotated credentials, a deleted share)
//! means the mapping is down. Repairing relies on `NewSmbGlobalMapping`'s own reuse-or-recreate logic: it keeps an OK,
//! reachable mapping and re-creates a broken one.
//!
//! Capabilities csi-proxy lacks (listing SMB mappings, clearing a disk's read-only flag, discovery CHAP, persistent
//! logins, reading a link's target, rediscovering a portal's targets, reading a disk's partition table) are advertised by [`Host::capabilities`] (none by default); the operations themselves join the trait as
//! methods whose default says "not supported", so a backend that has them overrides both and the protocols ask
//! before relying on one.

use std::collections::BTreeMap;
use std::future::Future;

use crate::locks::Deadline;

mod block;
mod boot;
pub mod csi_proxy;
mod error;
mod metered;
pub mod name;
pub mod native;
mod path;
mod probe;
mod smb_options;
mod unc;

pub use block::{
    DEFAULT_PORT, DiskIds, DiskLayout, DiskLocation, IscsiAuth, MpioClaim, PartitionInfo,
    PartitionKind, PartitionStyle, Portal, TargetPath,
};
pub use boot::{BootStamp, HostObject, InFlight, OUTLIVE_BOUND, Since};
pub use error::{HostError, HostErrorKind, HostOp, HostResult};
pub use metered::Metered;
pub use name::{name_key, names_equal};
pub use path::{HostPath, KubeletRoot, MAX_PATH_BYTES};
pub use probe::{HostProbe, NoHostProbe, PROBE_TIMEOUT};
/// A secret string (a password, a CHAP secret): proxy-client's type, whose `Debug`/`Display` never show the value,
/// so a secret travels from the CSI request to the host call without ever being re-wrapped.
pub use proxy_client::Secret;
pub use smb_options::{
    BUILD_2019, BUILD_2022, BUILD_2025, ReportedOptions, SmbMappingOptions, SmbOption, SmbTransport,
};
pub(crate) use unc::check_component;
pub use unc::{SmbCredential, UncPath};

/// What a backend can do beyond csi-proxy v1's primitives. csi-proxy offers none of these; a native backend may,
/// and a protocol asks ([`Host::capabilities`]) before relying on one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostCapabilities {
    /// It can list the node's SMB global mappings and their status.
    pub list_smb_mappings: bool,
    /// It can clear a disk's read-only flag, and set it ([`Host::set_disk_online_read_only`]).
    pub clear_disk_read_only: bool,
    /// It can add a target portal with discovery CHAP credentials.
    pub discovery_chap: bool,
    /// It can make iSCSI logins persistent across reboots.
    pub persistent_logins: bool,
    /// It can read a link's stored target ([`Host::read_link`]).
    pub read_links: bool,
    /// It can ask Windows to rediscover a portal's targets ([`Host::refresh_target_portal`]).
    pub refresh_discovery: bool,
    /// It can read a disk's partition table ([`Host::disk_layout`]), so a disk's emptiness is read, not inferred
    /// from the volumes Windows lists over time.
    pub disk_layout: bool,
    /// Its [`Host::list_volumes_on_disk`] refreshes the disk's view when a data partition shows no volume, so a
    /// listing shows a volume that has arrived without a host-wide [`Host::rescan`] (native: `MSFT_Disk.Refresh`,
    /// `host/native/disk.rs` `volumes`).
    pub list_refreshes_disk: bool,
    /// It can list every iSCSI session on the node ([`Host::iscsi_sessions`]), so NodeGetInfo can count the session
    /// slots other software uses.
    pub list_iscsi_sessions: bool,
    /// It can log in with Multipath I/O ([`Host::connect_target_multipath`]), read whether MPIO claims iSCSI disks
    /// ([`Host::mpio_claim`]) and list a target's paths ([`Host::target_paths`]).
    pub multipath: bool,
    /// It can measure the space of the file system a directory is on ([`Host::path_space`]): an SMB volume's real
    /// usage.
    pub path_space: bool,
    /// It passes a volume's SMB client options to the mapping it creates and judges an existing mapping by them
    /// ([`Host::new_smb_global_mapping_with`]).
    pub smb_mapping_options: bool,
}

/// Everything the driver asks of the Windows host. Paths are validated [`HostPath`]s (inside the kubelet root);
/// remote paths are validated [`UncPath`]s. Every call carries the RPC's [`Deadline`], which implementations pass on
/// (csi-proxy: the gRPC deadline); the driver also bounds every call by it. Cheap to clone (a handle): a removal that
/// may outlive its caller runs to its end on a clone (`smb/removal.rs`).
pub trait Host: Clone + Send + Sync + 'static {
    /// What this backend can do beyond csi-proxy v1's primitives (nothing, unless it says so).
    fn capabilities(&self) -> HostCapabilities {
        HostCapabilities::default()
    }

    /// Whether `path` exists (a dangling link exists too).
    fn path_exists(
        &self,
        path: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<bool>> + Send;

    /// Create `path` and its parents (idempotent). Through a link to a share this creates directories on the share.
    fn mkdir(
        &self,
        path: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// Remove `path`: without `force` only a link or an empty directory (NotEmpty / NotFound otherwise); with `force`
    /// everything below it (idempotent). A link is removed, never its target.
    fn rmdir(
        &self,
        path: &HostPath,
        force: bool,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// Create a directory link at `link` pointing to `points_to` (csi-proxy's `CreateSymlink(source_path =
    /// points_to, target_path = link)`). Fails when `link` exists.
    fn create_symlink(
        &self,
        link: &HostPath,
        points_to: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// Whether `path` is a link (or a mount point) whose *immediate* target exists (one hop: a link to a dangling
    /// link is still true). NotFound when `path` does not exist; other errors when the target cannot be examined
    /// (e.g. an SMB share the node cannot reach: access denied, logon failure, bad network name).
    fn is_symlink(
        &self,
        path: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<bool>> + Send;

    /// Ensure the global mapping of `remote`'s share root (reuse an OK, reachable one; re-create a broken one) and,
    /// when `link` is given, create a directory link there to `remote` (fails when `link` exists).
    fn new_smb_global_mapping(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        credential: Option<&SmbCredential>,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// [`Host::new_smb_global_mapping`] with the volume's SMB client options ([`SmbMappingOptions`]): a backend that
    /// can pass them ([`HostCapabilities::smb_mapping_options`]) refuses, with [`HostErrorKind::NotSatisfiable`], an
    /// option the node's Windows build lacks and an existing mapping weaker than asked. Default: without options
    /// the plain call; with any, that refusal (csi-proxy v1's request has no field for them).
    fn new_smb_global_mapping_with(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        credential: Option<&SmbCredential>,
        options: &SmbMappingOptions,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        let empty = options.is_empty();
        let asked = options.describe();
        async move {
            if empty {
                self.new_smb_global_mapping(remote, link, credential, deadline)
                    .await
            } else {
                Err(HostError::new(
                    HostOp::NewSmbGlobalMapping,
                    HostErrorKind::NotSatisfiable,
                    format!("SMB client options ({asked}): not supported by this host backend"),
                ))
            }
        }
    }

    /// Remove the global mapping of `remote`'s share root (NotFound when there is none). Links are not touched.
    fn remove_smb_global_mapping(
        &self,
        remote: &UncPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;
    // ---- Block storage and iSCSI (see `crate::iscsi`) ----

    /// `ListDiskLocations`: disk number → location (only disks whose location csi-proxy can parse).
    fn list_disk_locations(
        &self,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<BTreeMap<u32, DiskLocation>>> + Send;

    /// `ListDiskIDs`: disk number → page83 and serial (fails as a whole when a disk cannot be opened).
    fn list_disk_ids(
        &self,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<BTreeMap<u32, DiskIds>>> + Send;

    /// `Rescan`: update the host's storage cache.
    fn rescan(&self, deadline: Deadline) -> impl Future<Output = HostResult<()>> + Send;

    /// `PartitionDisk`: GPT-initialise a RAW disk and create a partition when it has no non-reserved one (a no-op
    /// otherwise).
    fn partition_disk(
        &self,
        disk: u32,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `GetDiskStats`: the disk's size in bytes.
    fn disk_size(
        &self,
        disk: u32,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<u64>> + Send;

    /// `SetDiskState`: bring a disk online or offline (idempotent).
    fn set_disk_online(
        &self,
        disk: u32,
        online: bool,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `GetDiskState`: whether the disk is online.
    fn is_disk_online(
        &self,
        disk: u32,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<bool>> + Send;

    /// `ListVolumesOnDisk` (all partitions): the volume ids (`\\?\Volume{…}\`) Windows has for the disk.
    fn list_volumes_on_disk(
        &self,
        disk: u32,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<Vec<String>>> + Send;

    /// `MountVolume`: mount the volume at `path`, an existing empty directory (idempotent for the same volume).
    fn mount_volume(
        &self,
        volume_id: &str,
        path: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `UnmountVolume`: flush and remove the mount point at `path` (fails when nothing is mounted there).
    fn unmount_volume(
        &self,
        volume_id: &str,
        path: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `IsVolumeFormatted`: whether the volume has a file system Windows recognises.
    fn is_volume_formatted(
        &self,
        volume_id: &str,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<bool>> + Send;

    /// `FormatVolume`: quick NTFS format. Destructive and unguarded: the driver decides.
    fn format_volume(
        &self,
        volume_id: &str,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `ResizeVolume`: grow the volume's partition to `size_bytes` (0 = maximum). Which growth is silently skipped
    /// depends on the release (v1.2.0+: under 100 MiB; v1.1.x: none, so sub-MiB growth fails).
    fn resize_volume(
        &self,
        volume_id: &str,
        size_bytes: u64,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `GetVolumeStats`: `(total, used)` bytes.
    fn volume_stats(
        &self,
        volume_id: &str,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<(u64, u64)>> + Send;

    /// `GetVolumeIDFromTargetPath`: the volume mounted at `path` (an error when it is not a live mounted folder).
    fn volume_id_from_target_path(
        &self,
        path: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<String>> + Send;

    /// `WriteVolumeCache`: flush the volume.
    fn write_volume_cache(
        &self,
        volume_id: &str,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `AddTargetPortal` (idempotent).
    fn add_target_portal(
        &self,
        portal: &Portal,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `DiscoverTargetPortal`: the names of the targets the portal reports, spelled as the targets spell them.
    fn discover_target_portal(
        &self,
        portal: &Portal,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<Vec<String>>> + Send;

    /// `ConnectTarget` (not persistent across reboots). A connected target: a no-op from csi-proxy v1.3.0,
    /// [`HostErrorKind::AlreadyLoggedIn`] before. The IQN must be spelled as the target reports it (v1.3.0 matches
    /// exact-case and a miss kills csi-proxy).
    fn connect_target(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `DisconnectTarget`. A target without a session: a no-op from csi-proxy v1.3.0, NotFound before.
    fn disconnect_target(
        &self,
        portal: &Portal,
        iqn: &str,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `GetTargetDisks`: disk numbers of a connected target (not connected: empty from csi-proxy v1.3.0, NotFound
    /// before).
    fn get_target_disks(
        &self,
        portal: &Portal,
        iqn: &str,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<Vec<u32>>> + Send;

    /// `SetMutualChapSecret`: the initiator's node-global mutual CHAP secret.
    fn set_mutual_chap_secret(
        &self,
        secret: &Secret,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;

    /// `ListTargetPortals`: the target portals added on the node (port 0 reported as 3260).
    fn list_target_portals(
        &self,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<Vec<Portal>>> + Send;

    /// `RemoveTargetPortal`: the portal goes, and Windows forgets every target it discovered through it (sessions
    /// are not logged out). Fails when the portal is not added. Default: not supported (a backend with
    /// [`HostCapabilities::refresh_discovery`] never needs it).
    fn remove_target_portal(
        &self,
        portal: &Portal,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        let _ = (portal, deadline);
        async {
            Err(not_supported(
                HostOp::RemoveTargetPortal,
                "removing a target portal",
            ))
        }
    }

    /// `GetDiskNumberFromVolumeID`: the number of the disk holding the volume (its partition's `DiskNumber`).
    fn disk_number_of_volume(
        &self,
        volume_id: &str,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<u32>> + Send;

    // ---- Beyond csi-proxy v1 (see `HostCapabilities`); the defaults say "not supported" ----

    /// `SetDiskState(online)` of a disk a writable volume is staged from: a backend with
    /// [`HostCapabilities::clear_disk_read_only`] also clears a read-only flag left by the SAN policy or a re-attach.
    /// Default: [`Host::set_disk_online`].
    fn set_disk_online_writable(
        &self,
        disk: u32,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        self.set_disk_online(disk, true, deadline)
    }

    /// `SetDiskState(online)` of a disk a reader-only volume is staged from: a backend with
    /// [`HostCapabilities::clear_disk_read_only`] also sets the disk's read-only flag, so nothing on the node writes to
    /// it. Default: [`Host::set_disk_online`] (the flag is left as it is).
    fn set_disk_online_read_only(
        &self,
        disk: u32,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        self.set_disk_online(disk, true, deadline)
    }

    /// How long the node has been up (`GetTickCount64`: counts from the boot, never goes back within one, not moved
    /// by the wall clock; [`BootStamp`]), or `None` when the backend cannot tell. Not a host call: the kernel's tick
    /// count, which the driver's process shares with the node.
    fn uptime(&self) -> Option<std::time::Duration> {
        None
    }

    /// The node's Windows build number (`RtlGetVersion`: 17763, 20348, 26100, …), which decides the SMB client options
    /// a mapping may be given ([`SmbOption::first_build`]), or `None` when the backend cannot tell (csi-proxy v1 has
    /// no call for it). Not a host call: the process's own view of the OS it runs on.
    fn windows_build(&self) -> Option<u32> {
        None
    }

    /// What this backend knows of its own calls on `object` that may outlive their callers (`PartitionDisk`,
    /// `FormatVolume`, `ResizeVolume`, `DisconnectTarget`) and may still be running, in this process or one before
    /// it (no csi-proxy RPC). Default: [`InFlight::Unknown`] (csi-proxy runs them in its own process).
    fn in_flight(
        &self,
        object: &HostObject,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<InFlight>> + Send {
        let _ = (object, deadline);
        async { Ok(InFlight::Unknown) }
    }

    /// `AddTargetPortal` with discovery CHAP ([`HostCapabilities::discovery_chap`]). Default: not supported.
    fn add_target_portal_with_chap(
        &self,
        portal: &Portal,
        discovery: &IscsiAuth,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        let _ = (portal, discovery, deadline);
        async { Err(not_supported(HostOp::AddTargetPortal, "discovery CHAP")) }
    }

    /// `ConnectTarget` with a persistent login ([`HostCapabilities::persistent_logins`]): the initiator logs in
    /// again at boot until the session is disconnected by [`Host::disconnect_target`], which also removes the
    /// persistent record. Default: not supported.
    fn connect_target_persistent(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        let _ = (portal, iqn, auth, deadline);
        async { Err(not_supported(HostOp::ConnectTarget, "persistent logins")) }
    }

    /// Ask Windows to rediscover the portal's targets (SendTargets), so targets the array created since it was added
    /// are listed by [`Host::discover_target_portal`] ([`HostCapabilities::refresh_discovery`]). Default: not
    /// supported (csi-proxy v1 has no RPC for it).
    fn refresh_target_portal(
        &self,
        portal: &Portal,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        let _ = (portal, deadline);
        async {
            Err(not_supported(
                HostOp::RefreshTargetPortal,
                "rediscovering a portal's targets",
            ))
        }
    }

    /// The stored target of the link at `path`, one hop, never resolved ([`HostCapabilities::read_links`]):
    /// `Some(\\server\share\…)` for a link into a share, `Some(C:\…)` for a local link, `None` when `path` is no
    /// link (a directory, a volume mount point, a link of another kind). NotFound when `path` does not exist.
    /// Default: not supported (csi-proxy v1 cannot read a link's target).
    fn read_link(
        &self,
        path: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<Option<String>>> + Send {
        let _ = (path, deadline);
        async { Err(not_supported(HostOp::ReadLink, "reading a link's target")) }
    }

    /// The target names of every iSCSI session on the node, one entry per session, whoever made it
    /// ([`HostCapabilities::list_iscsi_sessions`]). Default: not supported.
    fn iscsi_sessions(
        &self,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<Vec<String>>> + Send {
        let _ = deadline;
        async { Err(not_supported_multipath(HostOp::ListIscsiSessions)) }
    }

    /// Whether MPIO's Microsoft DSM claims iSCSI disks ([`HostCapabilities::multipath`]). Default: not supported.
    fn mpio_claim(&self, deadline: Deadline) -> impl Future<Output = HostResult<MpioClaim>> + Send {
        let _ = deadline;
        async { Err(not_supported_multipath(HostOp::MultipathClaim)) }
    }

    /// Log in to `iqn` through `portal` with Multipath I/O (`IsMultipathEnabled`): a session through this portal,
    /// beside the target's sessions through other portals; nothing when the target already has a session through
    /// this portal ([`HostCapabilities::multipath`]). `persistent` as [`Host::connect_target_persistent`]. Default:
    /// not supported.
    fn connect_target_multipath(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        persistent: bool,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        let _ = (portal, iqn, auth, persistent, deadline);
        async { Err(not_supported_multipath(HostOp::ConnectTarget)) }
    }

    /// The paths of target `iqn`: per session, its portal and the disks it shows ([`HostCapabilities::multipath`]).
    /// Empty when the target has no session. Default: not supported.
    fn target_paths(
        &self,
        iqn: &str,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<Vec<TargetPath>>> + Send {
        let _ = (iqn, deadline);
        async { Err(not_supported_multipath(HostOp::TargetPaths)) }
    }

    /// The partition table of disk `disk` ([`HostCapabilities::disk_layout`]): its style and partitions, whether or
    /// not their volumes have arrived. NotFound when the disk is not there. Default: not supported (csi-proxy v1 has
    /// no call that lists partitions).
    fn disk_layout(
        &self,
        disk: u32,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<DiskLayout>> + Send {
        let _ = (disk, deadline);
        async {
            Err(not_supported(
                HostOp::DiskLayout,
                "reading a disk's partition table",
            ))
        }
    }

    /// Whether wincsi made `object`, as far as this backend records it (not a host call): `Some(false)` when the
    /// backend knows it is someone else's and will leave it in place when asked to remove it or log out of it (the
    /// native ledgers), `Some(true)` when it will remove it. Default `None`: the backend keeps no such record and
    /// removes whatever it is asked to (csi-proxy). Asked so that a log line says what really happened.
    fn made_by_wincsi(&self, object: SharedObject<'_>) -> Option<bool> {
        let _ = object;
        None
    }

    /// Count `object` as made by wincsi from now on: a volume the host proves this driver staged uses it (an adopted
    /// staging object, `Protocol::adopt`), exactly as the volume records of staged volumes count at start. Durable
    /// before it returns. Default: nothing to record (a backend that keeps no ledger).
    fn claim(
        &self,
        object: SharedObject<'_>,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send {
        let _ = (object, deadline);
        async { Ok(()) }
    }

    /// The space of the file system the directory `path` is on, links followed to their end (an SMB volume's pod
    /// path: the share's) ([`HostCapabilities::path_space`]). Default: not supported (csi-proxy v1's `GetVolumeStats`
    /// takes a local volume's id, never a path, and its filesystem API has no space call).
    fn path_space(
        &self,
        path: &HostPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<PathSpace>> + Send {
        let _ = (path, deadline);
        async {
            Err(not_supported(
                HostOp::PathSpace,
                "measuring a directory's file system",
            ))
        }
    }
}

/// A shared host object that has no owner field on Windows: whether wincsi made it is what a backend may record
/// ([`Host::made_by_wincsi`], [`Host::claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedObject<'a> {
    /// The SMB global mapping of a share root (`\\server\share`, any case).
    SmbMapping(&'a str),
    /// The sessions of an iSCSI target (its name, any case). A claim leaves a target the backend knows as someone
    /// else's (joined) so.
    IscsiSession(&'a str),
    /// The sessions of an iSCSI target the caller's own login just joined as someone else's, proven the driver's own
    /// since (its staging path mounts the LUN): a claim counts them as made by wincsi.
    IscsiSessionJoined(&'a str),
}

/// The defaults of the multipath and session-listing operations (`HostCapabilities::{multipath,
/// list_iscsi_sessions}`): not supported (csi-proxy v1 has no multipath flag, csi-proxy PR #99, and no session list).
pub(crate) fn not_supported_multipath(op: HostOp) -> HostError {
    not_supported(op, "Multipath I/O and the node's session list")
}

/// The space of the file system a directory is on, as the backend's account sees it (`GetDiskFreeSpaceExW`), in
/// bytes. Quota-aware where Windows is: with per-user quotas `total` and `available` are the account's (learn.microsoft
/// .com, `GetDiskFreeSpaceExW`: "may be less than the total number of bytes on a disk"), and under a directory quota
/// they are the quota's (a Microsoft blog, "Getting the free space available under a certain directory").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PathSpace {
    /// `lpTotalNumberOfBytes`: the bytes the account may use in all.
    pub total: u64,
    /// `lpFreeBytesAvailableToCaller`: the free bytes the account may still use.
    pub available: u64,
    /// `lpTotalNumberOfFreeBytes`: the free bytes on the file system, quotas aside.
    pub free: u64,
}

/// The error of a capability a backend lacks.
fn not_supported(op: HostOp, what: &str) -> HostError {
    HostError::new(
        op,
        HostErrorKind::Other,
        format!("{what}: not supported by this host backend"),
    )
}
