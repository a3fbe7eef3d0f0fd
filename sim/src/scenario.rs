//! The scenario file: what the simulated host and its storage network look like when the simulator starts.
//!
//! The format is JSON (documented with an example in `sim/README.md` and `sim/scenarios/example.json`). Every
//! field except the names of things has a default, so `{}` is a valid (empty) scenario.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::profile::{CsiProxyVersion, HostBehaviour};
use crate::secret::Secret;

/// A complete scenario.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// Host-level settings (csi-proxy flags, BIOS serial, services, pre-created directories).
    pub host: HostSpec,
    /// Disks attached locally (always present, e.g. the OS disk, cloud data disks).
    pub disks: Vec<DiskSpec>,
    /// SMB file servers reachable from the host.
    pub smb: SmbSpec,
    /// iSCSI portals reachable from the host.
    pub iscsi: IscsiSpec,
}

impl Scenario {
    /// Parses a scenario from JSON text.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::Scenario(e.to_string()))
    }

    /// Reads and parses a scenario file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::ScenarioFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| Error::ScenarioFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }
}

/// Host-level settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostSpec {
    /// The csi-proxy release the host plays (`v1.1.3`, `v1.2.1`, `v1.3.0`, `master`). Absent: the host options'
    /// value, else the `WINCSI_SIM_CSI_PROXY_VERSION` environment variable, else the chart's default (v1.1.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csi_proxy_version: Option<CsiProxyVersion>,
    /// csi-proxy's `-kubelet-path` (filesystem path-validation root).
    pub kubelet_path: String,
    /// csi-proxy's `-working-dir` values (extra allowed roots).
    pub working_dirs: Vec<String>,
    /// csi-proxy's `-require-privacy` flag passed to every new SMB global mapping.
    pub require_privacy: bool,
    /// `CIM_BIOSElement.SerialNumber`.
    pub bios_serial: String,
    /// The SCSI adapter number of the Microsoft iSCSI initiator (appears in `DiskLocation.Adapter`).
    pub iscsi_adapter: u32,
    /// When true (the default), creating a global mapping over an existing *Disconnected* mapping of the same root
    /// fails with Windows error 1219, as public reports show after a reboot, until the mapping is removed.
    pub disconnected_mapping_blocks_create: bool,
    /// The SAN policy new iSCSI disks arrive under (default `offline_shared`: LUNs arrive offline).
    pub san_policy: SanPolicy,
    /// Host behaviours no source settles (documented defaults; see `sim/README.md`).
    pub behaviour: HostBehaviour,
    /// Directories (Windows paths) that exist when the host boots, besides the kubelet path and working dirs.
    pub directories: Vec<String>,
    /// Windows services known to `GetService`/`StartService`/`StopService`.
    pub services: Vec<ServiceSpec>,
    /// Multipath I/O on the node (default: not installed).
    pub mpio: MpioSpec,
    /// The node's Windows build number (`RtlGetVersion`'s `dwBuildNumber`). Default 17763, Windows Server 2019: the
    /// oldest build Kubernetes supports Windows nodes on, so the host is at least as unkind as any node when the
    /// driver asks for what a newer build has (20348: Windows Server 2022; 26100: Windows Server 2025).
    pub windows_build: u32,
}

/// Windows Server 2019's build, the scenario default ([`HostSpec::windows_build`]).
pub const WINDOWS_SERVER_2019: u32 = 17763;

/// Multipath I/O on the node (scenario `host.mpio`; `State::set_mpio`): whether the Multipath-IO feature is installed
/// (`Install-WindowsFeature Multipath-IO`; Windows Server installs it only on request, so the default is no) and
/// whether the Microsoft DSM claims iSCSI disks (`Enable-MSDSMAutomaticClaim -BusType iSCSI`, which puts `MSFT2005` /
/// `iSCSIBusType_0x9` in its supported hardware list; it takes effect after a reboot, which the scenario stands for).
/// Claimed, the sessions of one target through several portals show each LUN as one disk with a path per session;
/// not claimed, each further session shows the LUN again as a disk of its own (Microsoft's "MPIO on Nano Server":
/// until MPIO claims them, disks are exposed redundantly, one per path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MpioSpec {
    /// The Multipath-IO feature is installed (`MSFT_MSDSMSupportedHW` exists).
    pub installed: bool,
    /// The MSDSM claims iSCSI disks (only with `installed`).
    pub claim_iscsi: bool,
}

impl Default for HostSpec {
    fn default() -> Self {
        HostSpec {
            kubelet_path: r"C:\var\lib\kubelet".to_string(),
            working_dirs: Vec::new(),
            require_privacy: true,
            bios_serial: "SIM-0000-0000-0001".to_string(),
            csi_proxy_version: None,
            iscsi_adapter: 2,
            disconnected_mapping_blocks_create: true,
            san_policy: SanPolicy::default(),
            behaviour: HostBehaviour::default(),
            directories: Vec::new(),
            services: Vec::new(),
            mpio: MpioSpec::default(),
            windows_build: WINDOWS_SERVER_2019,
        }
    }
}

/// Windows' SAN policy (`Set-StorageSetting -NewDiskPolicy`): whether newly discovered disks on a shared bus
/// (iSCSI) come online.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SanPolicy {
    /// Disks on a shared bus stay offline (Windows Server's default).
    #[default]
    OfflineShared,
    /// Every new disk comes online.
    OnlineAll,
    /// Every new disk stays offline.
    OfflineAll,
}

impl SanPolicy {
    /// Whether a new iSCSI disk arrives online.
    pub fn shared_disk_online(self) -> bool {
        self == SanPolicy::OnlineAll
    }
}

/// A Windows service.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// Service name (case-insensitive key).
    pub name: String,
    /// Display name.
    #[serde(default)]
    pub display_name: String,
    /// Start type.
    #[serde(default)]
    pub start_type: StartType,
    /// Current status.
    #[serde(default)]
    pub status: ServiceStatus,
    /// Names of services this one depends on (they must run for it to start).
    #[serde(default)]
    pub depends_on: Vec<String>,
}

/// Service start type (same names and numbers as csi-proxy's `StartType`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartType {
    /// 0
    Boot,
    /// 1
    System,
    /// 2
    Automatic,
    /// 3
    #[default]
    Manual,
    /// 4
    Disabled,
}

/// Service status (same names and numbers as csi-proxy's `ServiceStatus`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceStatus {
    /// 0
    Unknown,
    /// 1
    #[default]
    Stopped,
    /// 2
    StartPending,
    /// 3
    StopPending,
    /// 4
    Running,
    /// 5
    ContinuePending,
    /// 6
    PausePending,
    /// 7
    Paused,
}

/// Partition table style of a disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionStyle {
    /// Not initialised.
    #[default]
    Raw,
    /// GUID partition table.
    Gpt,
    /// Master boot record.
    Mbr,
}

/// A disk (local, or the backing disk of an iSCSI LUN).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskSpec {
    /// Stable identifier used by the control surface (defaults to `disk<N>` / `<iqn>/lun<N>`).
    pub id: Option<String>,
    /// Disk number for local disks (defaults to the next free number). Ignored for iSCSI LUNs, which get the
    /// lowest free number when their target is connected.
    pub number: Option<u32>,
    /// Size in bytes.
    pub size: u64,
    /// `MSFT_Disk.Location`; default `PCI Slot <n> : Adapter 0 : Port 0 : Target 0 : LUN <n>` for local disks and
    /// `Integrated : Adapter <iscsi_adapter> : Port 0 : Target <t> : LUN <lun>` for iSCSI disks.
    pub location: Option<String>,
    /// SCSI VPD page 0x83 identifier as csi-proxy returns it (lowercase hex for binary ids).
    pub page83: Option<String>,
    /// Serial number (may be blank or space-padded, as on real hosts).
    pub serial: Option<String>,
    /// Whether the disk is online (for iSCSI LUNs: whether it arrives online when connected; absent = the SAN
    /// policy decides).
    pub online: Option<bool>,
    /// Whether the disk is read-only.
    pub read_only: bool,
    /// Partition table style.
    pub partition_style: PartitionStyle,
    /// Partitions, in order (numbers start at 1).
    pub partitions: Vec<PartitionSpec>,
    /// Data Windows cannot see (e.g. ext4 written by a Linux node): the disk looks RAW or unformatted, but
    /// initialising or formatting it destroys data and is recorded as a data-loss event.
    pub foreign_data: bool,
    /// When true, `ListDiskIDs` cannot open this disk and fails as a whole (a real csi-proxy quirk).
    pub unopenable: bool,
    /// Bytes on the device itself, outside any partition Windows knows (a whole-disk file system, an LVM label, …
    /// written by another system): the Windows view's raw device read returns them, and a disk holding a non-zero
    /// byte holds data Windows cannot see (as with `foreign_data`, initialising it is a data-loss event).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentSpec>,
}

/// Bytes on a disk: a named on-disk format written where its tools put their signature, or bytes at an offset.
/// Exactly one of `signature`, `hex` and `text`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContentSpec {
    /// A format (`ext4`, `xfs`, `btrfs`, `lvm2`, `luks1`, `luks2`, `zfs`, `ntfs`, `fat32`, `exfat`, `swap`,
    /// `linux_raid`, `iso9660`, `mbr`, `gpt`; `state/content.rs` writes each where its tool does, citing libblkid).
    pub signature: Option<String>,
    /// Bytes as hex digits, at `offset`.
    pub hex: Option<String>,
    /// Bytes as text, at `offset`.
    pub text: Option<String>,
    /// Where `hex`/`text` start: bytes from the start of the disk, or before its end with `from_end`.
    pub offset: u64,
    /// `offset` counts back from the end of the disk.
    pub from_end: bool,
}

/// What a partition is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionKind {
    /// Microsoft reserved partition (no volume).
    Reserved,
    /// EFI system partition.
    System,
    /// Basic data partition.
    #[default]
    Basic,
}

/// A partition.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PartitionSpec {
    /// Partition kind.
    pub kind: PartitionKind,
    /// Size in bytes (0 = all remaining space).
    pub size: u64,
    /// The volume on the partition (basic partitions only; absent = basic partition without a volume).
    pub volume: Option<VolumeSpec>,
}

/// A volume.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VolumeSpec {
    /// The GUID (without braces); generated when absent.
    pub guid: Option<String>,
    /// File system type (`NTFS`, `ReFS`, ...); absent = unformatted.
    pub filesystem: Option<String>,
    /// Drive letter, if any (informational).
    pub drive_letter: Option<char>,
    /// Files on the volume: relative path (`/` or `\` separated) → text content.
    pub files: BTreeMap<String, String>,
    /// Data Windows cannot read (foreign filesystem); formatting it is a data-loss event.
    pub foreign_data: bool,
}

/// SMB servers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmbSpec {
    /// The servers.
    pub servers: Vec<SmbServerSpec>,
    /// The computer account a domain-joined node presents when it maps a share without a credential
    /// (`DOMAIN\NAME$`; Microsoft, "LocalSystem Account": a SYSTEM process "presents the computer's credentials to
    /// remote servers"). Absent: a workgroup node, which presents none (only guest shares map; **unverified**,
    /// `docs/real-node-checks.md` N46).
    pub node_account: Option<String>,
}

/// An SMB server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmbServerSpec {
    /// Host name or address as used in `\\server\share` (case-insensitive).
    pub name: String,
    /// Whether the server is reachable (false → error 53 "network path was not found").
    #[serde(default = "yes")]
    pub reachable: bool,
    /// Whether the server supports SMB3 encryption (false + RequirePrivacy → access denied).
    #[serde(default = "yes")]
    pub encryption: bool,
    /// Accounts known to the server.
    #[serde(default)]
    pub accounts: Vec<SmbAccountSpec>,
    /// Shares.
    #[serde(default)]
    pub shares: Vec<SmbShareSpec>,
    /// Computer accounts (`DOMAIN\NAME$`) of the server's domain (and trusted ones): a node whose `node_account` is
    /// listed authenticates as it (Kerberos), and a share's `users` may name it (`NAME$`).
    #[serde(default)]
    pub computers: Vec<String>,
    /// The server accepts SMB over QUIC (Windows Server 2022 Azure Edition and 2025 can serve it; off by default, as
    /// a file server's QUIC needs a certificate mapping set up first: Microsoft, *SMB over QUIC*).
    #[serde(default)]
    pub quic: bool,
}

fn yes() -> bool {
    true
}

/// An account on an SMB server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmbAccountSpec {
    /// User name (without domain).
    pub user: String,
    /// Password.
    pub password: Secret,
    /// Domain; absent = a local account of the server (matches `user`, `SERVER\user` and `.\user`).
    #[serde(default)]
    pub domain: Option<String>,
}

/// A share.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmbShareSpec {
    /// Share name (case-insensitive).
    pub name: String,
    /// Accounts (user names) allowed on this share; empty = every account of the server.
    #[serde(default)]
    pub users: Vec<String>,
    /// Whether guest (no credentials) access is allowed.
    #[serde(default)]
    pub guest: bool,
    /// Per-directory access below the share's own permission (NTFS permissions on the server): relative directory
    /// (`""` for the share root, `team-a\logs` below it; any case) → the accounts (user names) allowed at and below
    /// it; the longest listed directory containing a path decides, a path under none is open to every account the
    /// share allows. The share's permission (`users`) decides whether a mapping can be made at all (the tree
    /// connect); these decide what it may open afterwards, so an account can map a share whose root it may not read
    /// (`GetFileAttributesW` of the root: 5) and still reach its own directory below it (Windows grants every user the
    /// traverse privilege by default: learn.microsoft.com, "Checking for Traverse Privilege on IRP_MJ_CREATE").
    #[serde(default)]
    pub acl: BTreeMap<String, Vec<String>>,
    /// Initial files: relative path → text content.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Size in bytes of the file system that holds the share on the server (default 1 TiB): what
    /// `GetDiskFreeSpaceExW` answers as its total outside a directory quota.
    #[serde(default)]
    pub capacity: Option<u64>,
    /// Directory quotas on the server (FSRM hard quotas): relative directory (any case, `/` or `\`) → limit in
    /// bytes. `GetDiskFreeSpaceExW` at or below such a directory answers the quota's limit and what is left of it
    /// (a Microsoft blog, "Getting the free space available under a certain directory", for a local path; through
    /// SMB **unverified**: `docs/real-node-checks.md`).
    #[serde(default)]
    pub quotas: BTreeMap<String, u64>,
}

/// iSCSI portals.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IscsiSpec {
    /// The portals.
    pub portals: Vec<PortalSpec>,
}

/// An iSCSI target portal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortalSpec {
    /// Address (as the client passes it).
    pub address: String,
    /// TCP port (3260 by default).
    #[serde(default = "default_iscsi_port")]
    pub port: u32,
    /// CHAP required for discovery. csi-proxy's AddTargetPortal cannot send credentials, so such a portal can
    /// only be used when `preconfigured` (added by the node's administrator with credentials).
    #[serde(default)]
    pub discovery_chap: Option<ChapCredentials>,
    /// Whether the portal is already added on the host when it boots (as an administrator would have done).
    #[serde(default)]
    pub preconfigured: bool,
    /// Targets exposed through this portal. A target an earlier portal lists (same IQN) is the same target reached
    /// through another portal, as arrays expose a target on every portal of their portal group: its LUNs are the
    /// earlier portal's (leave `luns` empty here).
    #[serde(default)]
    pub targets: Vec<TargetSpec>,
}

fn default_iscsi_port() -> u32 {
    3260
}

/// CHAP user name and secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChapCredentials {
    /// CHAP user name.
    pub username: String,
    /// CHAP secret.
    pub secret: Secret,
}

/// Authentication a target requires for login.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum TargetChap {
    /// No authentication.
    #[default]
    None,
    /// The initiator authenticates with `username`/`secret`.
    OneWay {
        /// Expected CHAP user name.
        username: String,
        /// Expected CHAP secret.
        secret: Secret,
    },
    /// Both sides authenticate; the initiator's node-wide mutual secret (`SetMutualChapSecret`) must equal
    /// `target_secret`.
    Mutual {
        /// Expected CHAP user name.
        username: String,
        /// Expected CHAP secret.
        secret: Secret,
        /// The secret the target answers with (must match the initiator's mutual CHAP secret).
        target_secret: Secret,
    },
}

/// An iSCSI target.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// Target IQN.
    pub iqn: String,
    /// Login authentication.
    #[serde(default)]
    pub chap: TargetChap,
    /// LUNs.
    #[serde(default)]
    pub luns: Vec<LunSpec>,
}

/// A LUN of a target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LunSpec {
    /// LUN number.
    pub lun: u32,
    /// Milliseconds after a login before the LUN's disk arrives (absent: the host's `behaviour.arrival.disk_ms`;
    /// 0 = at once). The storage cache shows it `cache_lag_ms` later, or at a `Rescan` once it has arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_delay_ms: Option<u64>,
    /// Milliseconds after the disk comes online before its volumes arrive (absent: the host's
    /// `behaviour.arrival.volumes_after_online_ms`; 0 = at once). A `Rescan` shows them only once they have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_arrival_delay_ms: Option<u64>,
    /// The disk behind the LUN (its `number` is ignored; `online` = whether it arrives online).
    #[serde(flatten)]
    pub disk: DiskSpec,
}
