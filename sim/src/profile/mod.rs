//! Release profiles: what each csi-proxy release does differently, in one place.
//!
//! The simulated host plays exactly one csi-proxy release at a time ([`CsiProxyVersion`]). Every behaviour that
//! differs between releases is a field of [`Profile`] (a small policy value), and every error text that differs is
//! built by `texts` from the profile's [`Backend`]. The model in `state/` asks the profile; it never matches on a
//! version itself. [`ROWS`] is the same knowledge as a table with its sources (`sim/README.md` renders it, and a
//! test keeps the two identical).
//!
//! The release in force comes from, in order: [`crate::HostOptions::csi_proxy_version`] (the binary's
//! `--csi-proxy-version`), the scenario's `host.csi_proxy_version`, the environment variable
//! [`CSI_PROXY_VERSION_ENV`] (read only by [`CsiProxyVersion::from_env_or_default`]), and finally
//! [`CsiProxyVersion::DEFAULT`], the release the Helm chart deploys.

mod arrival;
mod rows;
pub(crate) mod texts;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use arrival::{Arrival, ArrivalModel};
pub use rows::{ProfileRow, ROWS, profile_table_markdown};

/// Environment variable naming the csi-proxy release a simulated host plays when neither its options nor its
/// scenario name one (`v1.1.3`, `v1.2.1`, `v1.3.0` or `master`). Lets CI run every suite against each release
/// without editing tests.
pub const CSI_PROXY_VERSION_ENV: &str = "WINCSI_SIM_CSI_PROXY_VERSION";

/// A csi-proxy release the simulated host can play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CsiProxyVersion {
    /// v1.1.3 (2023-08): PowerShell per call, Go 1.20; the Helm chart's default image tag.
    V1_1_3,
    /// v1.2.1 (2025-03): last PowerShell release; `-require-privacy`, the 100 MiB resize skip.
    V1_2_1,
    /// v1.3.0 (2025-09): WMI (`microsoft/wmi`) and Win32 instead of PowerShell.
    V1_3_0,
    /// master (unreleased, 2026-08): its own go-ole WMI layer (`pkg/wmi`).
    Master,
}

impl CsiProxyVersion {
    /// Every release, oldest first.
    pub const ALL: [CsiProxyVersion; 4] = [
        CsiProxyVersion::V1_1_3,
        CsiProxyVersion::V1_2_1,
        CsiProxyVersion::V1_3_0,
        CsiProxyVersion::Master,
    ];

    /// The release the Helm chart deploys by default (`charts/wincsi/values.yaml`, `csiProxy.image.tag`).
    pub const DEFAULT: CsiProxyVersion = CsiProxyVersion::V1_1_3;

    /// The spelling used on the command line, in scenarios and in the environment variable.
    pub fn as_str(self) -> &'static str {
        match self {
            CsiProxyVersion::V1_1_3 => "v1.1.3",
            CsiProxyVersion::V1_2_1 => "v1.2.1",
            CsiProxyVersion::V1_3_0 => "v1.3.0",
            CsiProxyVersion::Master => "master",
        }
    }

    /// [`CSI_PROXY_VERSION_ENV`] if set (an unknown value is an error, never silently ignored), else
    /// [`CsiProxyVersion::DEFAULT`]. The only place the environment variable is read.
    pub fn from_env_or_default() -> Result<CsiProxyVersion> {
        match std::env::var(CSI_PROXY_VERSION_ENV) {
            Ok(v) if !v.trim().is_empty() => v
                .parse()
                .map_err(|e: Error| Error::Scenario(format!("{CSI_PROXY_VERSION_ENV}: {e}"))),
            _ => Ok(CsiProxyVersion::DEFAULT),
        }
    }

    /// The behaviour of this release.
    pub fn profile(self) -> Profile {
        Profile::of(self)
    }

    /// Whether this release runs a PowerShell process per call (v1.1.3, v1.2.1).
    pub fn is_powershell(self) -> bool {
        self.profile().backend == Backend::PowerShell
    }
}

impl fmt::Display for CsiProxyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CsiProxyVersion {
    type Err = Error;

    /// Accepts `v1.1.3`, `1.1.3`, `v1.2.1`, `v1.3.0`, `master` (case-insensitive).
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_prefix('v').unwrap_or(&t);
        Ok(match t {
            "1.1.3" => CsiProxyVersion::V1_1_3,
            "1.2.1" => CsiProxyVersion::V1_2_1,
            "1.3.0" => CsiProxyVersion::V1_3_0,
            "master" => CsiProxyVersion::Master,
            _ => {
                return Err(Error::Scenario(format!(
                    "unknown csi-proxy version {s:?} (expected v1.1.3, v1.2.1, v1.3.0 or master)"
                )));
            }
        })
    }
}

impl Serialize for CsiProxyVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CsiProxyVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How a release reaches the host, which decides the shape of every error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// A `powershell -Mta -NoProfile -Command` child per call; errors carry the cmdlet's output.
    PowerShell,
    /// `github.com/microsoft/wmi` (v1.3.0): `Not Found`, go-ole `Exception occurred. (…)`.
    MicrosoftWmi,
    /// csi-proxy's own `pkg/wmi` over go-ole (master): `not found`, `WMI <Class>.<Method> failed (…): code=N`.
    GoOleWmi,
}

/// What a repeated (already satisfied) request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRepeat {
    /// The host call fails (the release does not check the current state first).
    Fails,
    /// Success without doing anything.
    NoOp,
}

/// When `ResizeVolume` is skipped as a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResizeSkip {
    /// Only when the partition is already at least the target size (v1.1.3): sub-MiB slack reaches
    /// `Resize-Partition`, which fails "Size Not Supported".
    CurrentAtLeastFinal,
    /// Whenever the growth is below 100 MiB (v1.2.0+).
    GrowthUnder100MiB,
}

/// The link `NewSmbGlobalMapping` makes at `local_path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SmbLinkForm {
    /// `New-Item -ItemType SymbolicLink` to `\\server\share\dir\` (PowerShell era).
    NewItemUnc,
    /// `CreateSymbolicLink` to `\\?\` + `\\server\share\dir\` (`EnsureLongPath`, v1.3.0+); whether Windows resolves
    /// it is unverified ([`HostBehaviour::long_unc_links_resolve`]).
    LongPathPrefixed,
}

/// How ConnectTarget / DisconnectTarget / GetTargetDisks find the target by IQN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IqnMatch {
    /// PowerShell `-eq` / cmdlet parameters: case-insensitive.
    CaseInsensitive,
    /// Exact-case `==`; a miss returns `(nil, nil)` and the next dereference panics: the csi-proxy process dies.
    ExactOrCrash,
    /// Exact-case `==`; a miss is a `not found` error.
    ExactOrNotFound,
}

/// What `GetVolumeIDFromTargetPath` answers for a mount point whose volume is gone (e.g. after a reboot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DanglingMountPoint {
    /// `(Get-Item).Target` reads the reparse data: the old `\\?\Volume{…}\` comes back.
    ReadsReparseData,
    /// The Win32 volume-name calls fail (chosen; unverified).
    Fails,
}

/// The Win32 call Go's `os.Lstat` names in the error for a path that does not exist (`<op> <path>: <text>`): it
/// depends on the Go release csi-proxy was built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LstatErrorOp {
    /// `CreateFile`: Go 1.20 tries `GetFileAttributesEx`, then opens the path and reports that failure.
    CreateFile,
    /// `GetFileAttributesEx`: Go ≥ 1.25 reports that call's failure for a path that does not exist.
    GetFileAttributesEx,
}

impl LstatErrorOp {
    /// The name as Go's `PathError` prints it.
    pub fn name(self) -> &'static str {
        match self {
            LstatErrorOp::CreateFile => "CreateFile",
            LstatErrorOp::GetFileAttributesEx => "GetFileAttributesEx",
        }
    }
}

/// Everything that differs between csi-proxy releases, as data. Build with [`CsiProxyVersion::profile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// The release.
    pub version: CsiProxyVersion,
    /// How it reaches the host (error text shapes).
    pub backend: Backend,
    /// ConnectTarget to a target that already has a session.
    pub connect_target_when_connected: OnRepeat,
    /// DisconnectTarget of a discovered target without a session (PowerShell era: see
    /// [`HostBehaviour::ps_disconnect_unconnected`]).
    pub disconnect_target_when_not_connected: OnRepeat,
    /// GetTargetDisks of a target without a session (`NoOp` = an empty list).
    pub get_target_disks_when_not_connected: OnRepeat,
    /// MountVolume of the volume already mounted at the target path.
    pub mount_volume_again: OnRepeat,
    /// The ResizeVolume skip rule.
    pub resize_skip: ResizeSkip,
    /// NewSmbGlobalMapping always builds a credential (PowerShell era): an empty user name or password fails.
    pub smb_needs_credentials: bool,
    /// The `local_path` link form.
    pub smb_link: SmbLinkForm,
    /// The `local_path` link is refused when its target does not exist (PowerShell era: Windows PowerShell 5.1's
    /// `New-Item -ItemType SymbolicLink`); the mapping made before it stays. WMI era: a dangling link is made.
    pub smb_link_needs_target: bool,
    /// Whether `-require-privacy` exists (v1.1.3 hard-codes `-RequirePrivacy $true`).
    pub require_privacy_flag: bool,
    /// IQN matching.
    pub iqn_match: IqnMatch,
    /// GetVolumeIDFromTargetPath on a dangling mount point.
    pub dangling_mount_point_volume_id: DanglingMountPoint,
    /// `os.MkdirAll` over a dangling mount point succeeds (Go ≥ 1.23 without `winsymlink=0`: master).
    pub mkdir_accepts_dangling_mount_point: bool,
    /// ListVolumesOnDisk of a disk number that does not exist fails (PowerShell `Get-Disk`); WMI answers `[]`.
    pub list_volumes_unknown_disk_fails: bool,
    /// ListVolumesOnDisk of a disk without partitions fails (PowerShell `Get-Partition`); WMI answers `[]`.
    pub list_volumes_without_partitions_fails: bool,
    /// How a failed WMI method call is reported by default ([`HostBehaviour::wmi_failures`] overrides).
    pub wmi_failures: WmiFailureReport,
    /// The call named by a missing path's `Lstat` error (IsSymlink).
    pub lstat_error_op: LstatErrorOp,
}

impl Profile {
    /// The profile of `version`.
    pub fn of(version: CsiProxyVersion) -> Profile {
        use CsiProxyVersion::*;
        let ps = matches!(version, V1_1_3 | V1_2_1);
        Profile {
            version,
            backend: match version {
                V1_1_3 | V1_2_1 => Backend::PowerShell,
                V1_3_0 => Backend::MicrosoftWmi,
                Master => Backend::GoOleWmi,
            },
            connect_target_when_connected: if ps { OnRepeat::Fails } else { OnRepeat::NoOp },
            disconnect_target_when_not_connected: if ps { OnRepeat::Fails } else { OnRepeat::NoOp },
            get_target_disks_when_not_connected: if ps { OnRepeat::Fails } else { OnRepeat::NoOp },
            mount_volume_again: if ps { OnRepeat::Fails } else { OnRepeat::NoOp },
            resize_skip: if version == V1_1_3 {
                ResizeSkip::CurrentAtLeastFinal
            } else {
                ResizeSkip::GrowthUnder100MiB
            },
            smb_needs_credentials: ps,
            smb_link: if ps {
                SmbLinkForm::NewItemUnc
            } else {
                SmbLinkForm::LongPathPrefixed
            },
            smb_link_needs_target: ps,
            require_privacy_flag: version != V1_1_3,
            iqn_match: match version {
                V1_1_3 | V1_2_1 => IqnMatch::CaseInsensitive,
                V1_3_0 => IqnMatch::ExactOrCrash,
                Master => IqnMatch::ExactOrNotFound,
            },
            dangling_mount_point_volume_id: if ps {
                DanglingMountPoint::ReadsReparseData
            } else {
                DanglingMountPoint::Fails
            },
            mkdir_accepts_dangling_mount_point: version == Master,
            list_volumes_unknown_disk_fails: ps,
            list_volumes_without_partitions_fails: ps,
            wmi_failures: if version == Master {
                WmiFailureReport::ReturnValue
            } else {
                WmiFailureReport::Exception
            },
            // Unsettled for v1.2.1 (built with Go 1.23.1) and v1.3.0 (Go 1.24.4): chosen as Go 1.20.
            lstat_error_op: if version == Master {
                LstatErrorOp::GetFileAttributesEx
            } else {
                LstatErrorOp::CreateFile
            },
        }
    }
}

impl Default for Profile {
    fn default() -> Self {
        Profile::of(CsiProxyVersion::DEFAULT)
    }
}

/// How a WMI provider reports a failed method call (WMI era only). Which one the SMB and iSCSI providers use is
/// unverified: v1.3.0 only looks at the call's error, master at both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WmiFailureReport {
    /// `ExecMethod_` raises: go-ole `Exception occurred. (<description>)`.
    Exception,
    /// The method returns a non-zero `ReturnValue`: master reports `code=N`; v1.3.0 ignores it and reports success.
    ReturnValue,
}

/// Windows errors the host answers when something is read through an SMB link whose share it cannot reach, by
/// cause. 2, 3 and 53 make Go's `os.IsNotExist` true (so IsSymlink answers false); anything else is returned as
/// an error. Which code a real node gives is unverified except where noted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UncErrors {
    /// No global mapping of the share exists (the node's own identity is used). Default 5.
    pub unmapped: u32,
    /// The mapping is `Disconnected` (after a reboot). Default 5 (csi-driver-smb#733 reports access denied).
    pub disconnected: u32,
    /// The server does not answer. Default 53 (ERROR_BAD_NETPATH).
    pub unreachable: u32,
    /// The mapping's credentials are no longer accepted. Default 1326 (v1.3.0 `pkg/utils/utils.go:39` says so).
    pub bad_credentials: u32,
    /// The share no longer exists. Default 67.
    pub share_missing: u32,
}

impl Default for UncErrors {
    fn default() -> Self {
        UncErrors {
            unmapped: 5,
            disconnected: 5,
            unreachable: 53,
            bad_credentials: 1326,
            share_missing: 67,
        }
    }
}

/// Host behaviours no source settles, made configurable (scenario `host.behaviour`, admin op
/// `set_host_behaviour`). The defaults are the documented choices of `sim/README.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostBehaviour {
    /// Errors for reads through unreachable SMB links (IsSymlink's one-hop `Lstat`).
    pub unc_errors: UncErrors,
    /// Whether the v1.3.0+ `\\?\\\server\share\` link resolves. Default true; when false every access through it
    /// fails with error 123 and IsSymlink with `readlink error: …`.
    pub long_unc_links_resolve: bool,
    /// Overrides the release's [`Profile::wmi_failures`] (WMI era).
    pub wmi_failures: Option<WmiFailureReport>,
    /// PowerShell-era DisconnectTarget of a discovered target without a session. Default `fails`
    /// (`Disconnect-IscsiTarget` with an `ObjectNotFound` category).
    pub ps_disconnect_unconnected: OnRepeat,
    /// Bytes by which a new max-size partition stays below `SizeMax` (csi-proxy#195 shows 48640).
    pub partition_slack_bytes: u64,
    /// Whether adding a portal that is already added (PowerShell-era csi-proxy's `New-IscsiTargetPortal` on every
    /// `AddTargetPortal`; `MSFT_iSCSITargetPortal.New` in the Windows view) runs SendTargets again, so targets the
    /// array created since appear. Unverified: default false (Windows keeps the portal's cached target list, which
    /// only `Update-IscsiTargetPortal` / `MSFT_iSCSITargetPortal.Update`, or removing and re-adding the portal,
    /// refreshes; row `discovery_refresh`).
    pub portal_readd_refreshes: bool,
    /// Whether the Windows view's `MSFT_Disk.CreatePartition` hands back a readable `CreatedPartition`
    /// out-parameter. Default true; whether a real node's embedded object decodes is **unverified** (winhost README,
    /// assumption 2), so callers must not depend on it (csi-proxy re-lists the partitions instead).
    pub created_partition_returned: bool,
    /// When disks and volumes appear, and how far the storage cache lags ([`Arrival`]; default: realistic).
    pub arrival: Arrival,
    /// Whether flushing a volume of a read-only disk fails (`Write-VolumeCache`, `MSFT_Volume.Flush`,
    /// `FlushFileBuffers` through a `GENERIC_WRITE` handle): error 19 "The media is write protected.". Default true;
    /// **unverified** (real-node check 29), so the driver must survive both answers.
    pub read_only_flush_fails: bool,
    /// How many iSCSI sessions the initiator takes; a login past it answers `ISDSC_TOO_MANY_SESSIONS` (0xEFFF001E,
    /// "Exceeded max sessions for this initiator.", iscsierr.h). Default 256: the software initiator gives each
    /// session a SCSI target id on its adapter, one byte in `SCSI_ADDRESS.TargetId` (ntddscsi.h). The number Windows
    /// really allows is **unverified** (real-node check N39).
    pub iscsi_session_limit: u32,
}

impl Default for HostBehaviour {
    fn default() -> Self {
        HostBehaviour {
            unc_errors: UncErrors::default(),
            long_unc_links_resolve: true,
            wmi_failures: None,
            ps_disconnect_unconnected: OnRepeat::Fails,
            partition_slack_bytes: 48_640,
            portal_readd_refreshes: false,
            created_partition_returned: true,
            arrival: Arrival::default(),
            read_only_flush_fails: true,
            iscsi_session_limit: 256,
        }
    }
}

/// The Windows message Go's `syscall.Errno.Error()` prints for the codes the simulator uses.
pub fn windows_message(code: u32) -> &'static str {
    match code {
        2 => "The system cannot find the file specified.",
        3 => "The system cannot find the path specified.",
        5 => "Access is denied.",
        19 => "The media is write protected.",
        53 => "The network path was not found.",
        59 => "An unexpected network error occurred.",
        64 => "The specified network name is no longer available.",
        67 => "The network name cannot be found.",
        85 => "The local device name is already in use.",
        86 => "The specified network password is not correct.",
        87 => "The parameter is incorrect.",
        123 => "The filename, directory name, or volume label syntax is incorrect.",
        145 => "The directory is not empty.",
        183 => "Cannot create a file when that file already exists.",
        267 => "The directory name is invalid.",
        1219 => {
            "Multiple connections to a server or shared resource by the same user, using more than one user name, are not allowed. Disconnect all previous connections to the server or shared resource and try again."
        }
        1222 => "The network is not present or not started.",
        1231 => {
            "The network location cannot be reached. For information about network troubleshooting, see Windows Help."
        }
        1326 => "The user name or password is incorrect.",
        4390 => "The file or directory is not a reparse point.",
        _ => "The request is not supported.",
    }
}

/// Whether Go's `os.IsNotExist` is true for a Windows error (`syscall/syscall_windows.go`, `Errno.Is`).
pub fn is_not_exist(code: u32) -> bool {
    matches!(code, 2 | 3 | 53)
}

#[cfg(test)]
mod tests;
