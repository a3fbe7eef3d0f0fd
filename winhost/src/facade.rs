//! The facade: what the native backend asks of Windows, one trait per area, each method one WMI query, association
//! walk or method call, or one Win32 call.
//!
//! Shape rules (so the logic above can be driven by a simulated host, and the Windows side stays thin):
//! - Methods are synchronous and blocking; the caller runs them off its async runtime. Every method takes a
//!   [`CallContext`]; an implementation never starts work after its deadline or cancellation.
//! - WMI methods answer a [`MethodOutcome`] whenever the method ran, whatever its `ReturnValue`: interpreting the
//!   code (retry after 40003, accept 42002, …) is the logic's job. [`CallError`](crate::CallError) is for calls that produced no answer.
//! - Queries return every matching row; "not found" is an empty list, never an error (reference §1.4).
//! - Filters are typed (no WQL crosses the facade); string filter values are escaped by the implementation
//!   ([`crate::wql`]).
//! - Paths are passed to Win32 exactly as given: the trailing-backslash and `\\?\` rules of each function are the
//!   caller's ([`crate::paths`] has the conversions), so a simulated host can answer like Windows does (123 for a
//!   missing trailing `\`, …).
//! - Nothing here is csi-proxy-shaped: idempotency, "reuse or repair", waiting for arrival and disk identification
//!   are the backend's logic over these calls.

use crate::call::CallContext;
use crate::codes::{IscsiStatus, PartitionStyle, StorageReturn};
use crate::error::CallResult;
use crate::method::{MethodOutcome, SmbReturn};
use crate::model::{
    AttributeTag, ConnectTarget, CreatePartition, DeviceBytes, DiskAttributes, FileAttributes,
    FormatVolume, FreeSpace, MsftDisk, MsftInitiatorPort, MsftIscsiConnection, MsftIscsiSession,
    MsftIscsiTarget, MsftIscsiTargetPortal, MsftMsdsmSupportedHw, MsftPartition,
    MsftStorageSetting, MsftVolume, NewTargetPortal, ObjectPath, RegisterSession, SmbGlobalMapping,
    SmbGlobalMappingCreate, StorageDeviceNumber, SupportedSize, SymlinkFlags, VolumeInformation,
    VolumeNameKind,
};
use crate::page83::StorageIdentifier;
use crate::paths::VolumeGuidPath;
use crate::pool::PoolStatus;
use crate::probe::ProbeReport;
use crate::reparse::ReparsePoint;

/// A Storage method's outcome.
pub type StorageOutcome<T = ()> = MethodOutcome<StorageReturn, T>;
/// An iSCSI method's outcome.
pub type IscsiOutcome<T = ()> = MethodOutcome<IscsiStatus, T>;
/// An SMB method's outcome.
pub type SmbOutcome<T = ()> = MethodOutcome<SmbReturn, T>;

/// Disks, partitions, volumes and storage settings: `ROOT\Microsoft\Windows\Storage`.
pub trait StorageWmi: Send + Sync {
    /// `SELECT … FROM MSFT_Disk [WHERE Number = n]`.
    fn disks(&self, ctx: &CallContext, number: Option<u32>) -> CallResult<Vec<MsftDisk>>;

    /// `SELECT … FROM MSFT_Partition [WHERE DiskNumber = n]`.
    fn partitions(
        &self,
        ctx: &CallContext,
        disk_number: Option<u32>,
    ) -> CallResult<Vec<MsftPartition>>;

    /// `SELECT … FROM MSFT_Volume [WHERE UniqueId = "…"]` (the value escaped).
    fn volumes(&self, ctx: &CallContext, unique_id: Option<&str>) -> CallResult<Vec<MsftVolume>>;

    /// `ASSOCIATORS OF {partition} WHERE AssocClass = MSFT_PartitionToVolume ResultClass = MSFT_Volume`.
    fn partition_volumes(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<Vec<MsftVolume>>;

    /// `ASSOCIATORS OF {volume} WHERE AssocClass = MSFT_PartitionToVolume ResultClass = MSFT_Partition`.
    fn volume_partitions(
        &self,
        ctx: &CallContext,
        volume: &ObjectPath,
    ) -> CallResult<Vec<MsftPartition>>;

    /// `MSFT_Disk.Online()`.
    fn disk_online(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome>;

    /// `MSFT_Disk.Offline()`.
    fn disk_offline(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome>;

    /// `MSFT_Disk.Initialize(PartitionStyle)`.
    fn disk_initialize(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        style: PartitionStyle,
    ) -> CallResult<StorageOutcome>;

    /// `MSFT_Disk.CreatePartition(…)`; out `CreatedPartition`.
    fn disk_create_partition(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        params: &CreatePartition,
    ) -> CallResult<StorageOutcome<Option<MsftPartition>>>;

    /// `MSFT_Disk.SetAttributes(…)` (for example `IsReadOnly = false`).
    fn disk_set_attributes(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        attributes: &DiskAttributes,
    ) -> CallResult<StorageOutcome>;

    /// `MSFT_Disk.Refresh()`: re-read the disk's layout.
    fn disk_refresh(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome>;

    /// `MSFT_Partition.Online()`.
    fn partition_online(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<StorageOutcome>;

    /// `MSFT_Partition.GetSupportedSize()`; out `SizeMin`, `SizeMax`.
    fn partition_supported_size(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<StorageOutcome<Option<SupportedSize>>>;

    /// `MSFT_Partition.Resize(Size)` (`size` non-zero, per the page).
    fn partition_resize(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
        size: u64,
    ) -> CallResult<StorageOutcome>;

    /// `MSFT_Volume.Format(…)`; out `FormattedVolume`. Destructive and not cancellable once started.
    fn volume_format(
        &self,
        ctx: &CallContext,
        volume: &ObjectPath,
        params: &FormatVolume,
    ) -> CallResult<StorageOutcome<Option<MsftVolume>>>;

    /// `MSFT_Volume.Flush()`.
    fn volume_flush(&self, ctx: &CallContext, volume: &ObjectPath) -> CallResult<StorageOutcome>;

    /// Static `MSFT_StorageSetting.Get()`; out `StorageSettings`.
    fn storage_setting(
        &self,
        ctx: &CallContext,
    ) -> CallResult<StorageOutcome<Option<MsftStorageSetting>>>;

    /// Static `MSFT_StorageSetting.UpdateHostStorageCache()`: re-enumerate disks, partitions and volumes.
    fn update_host_storage_cache(&self, ctx: &CallContext) -> CallResult<StorageOutcome>;

    /// `SELECT … FROM MSFT_MSDSMSupportedHW`: the Microsoft DSM's supported hardware list (Multipath I/O). `None` when
    /// the class does not exist — the Multipath-IO feature is not installed — which is a fact of the host, not a
    /// failure: the class is not part of the start-up probe.
    fn msdsm_supported_hw(
        &self,
        ctx: &CallContext,
    ) -> CallResult<Option<Vec<MsftMsdsmSupportedHw>>>;
}

/// The iSCSI initiator: the `MSFT_iSCSI*` classes of `ROOT\Microsoft\Windows\Storage`.
pub trait IscsiWmi: Send + Sync {
    /// `SELECT … FROM MSFT_iSCSITargetPortal [WHERE TargetPortalAddress = "…" AND TargetPortalPortNumber = p]`.
    fn target_portals(
        &self,
        ctx: &CallContext,
        portal: Option<(&str, u16)>,
    ) -> CallResult<Vec<MsftIscsiTargetPortal>>;

    /// Static `MSFT_iSCSITargetPortal.New(…)`; out `CreatedTargetPortal`.
    fn target_portal_new(
        &self,
        ctx: &CallContext,
        params: &NewTargetPortal<'_>,
    ) -> CallResult<IscsiOutcome<Option<MsftIscsiTargetPortal>>>;

    /// `MSFT_iSCSITargetPortal.Update(InitiatorInstanceName, InitiatorPortalAddress, TargetPortalAddress,
    /// TargetPortalPortNumber)` on the portal's instance: rediscover its targets (SendTargets). The parameters are
    /// the portal's own (the initiator ones only when set), as Microsoft's `Update` page declares them and as both
    /// csi-proxy WMI layers pass them to the sibling `Remove` (v1.3.0 `pkg/cim/iscsi.go:139-150`, master
    /// `pkg/wmi/iscsi.go:147-158`).
    fn target_portal_update(
        &self,
        ctx: &CallContext,
        portal: &MsftIscsiTargetPortal,
    ) -> CallResult<IscsiOutcome>;

    /// `MSFT_iSCSITargetPortal.Remove(InitiatorInstanceName, InitiatorPortalAddress, TargetPortalAddress,
    /// TargetPortalPortNumber)` on the portal's instance, with the portal's own parameters as for `Update`
    /// (csi-proxy v1.3.0 `pkg/cim/iscsi.go:139-150` passes them so): the portal and its discovery cache go; sessions
    /// stay.
    fn target_portal_remove(
        &self,
        ctx: &CallContext,
        portal: &MsftIscsiTargetPortal,
    ) -> CallResult<IscsiOutcome>;

    /// `ASSOCIATORS OF {portal} WHERE AssocClass = MSFT_iSCSITargetToiSCSITargetPortal ResultClass =
    /// MSFT_iSCSITarget`.
    fn portal_targets(
        &self,
        ctx: &CallContext,
        portal: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiTarget>>;

    /// `SELECT … FROM MSFT_iSCSITarget`: every discovered target.
    fn targets(&self, ctx: &CallContext) -> CallResult<Vec<MsftIscsiTarget>>;

    /// Static `MSFT_iSCSITarget.Connect(…)`; out `CreatediSCSISession`.
    fn target_connect(
        &self,
        ctx: &CallContext,
        params: &ConnectTarget<'_>,
    ) -> CallResult<IscsiOutcome<Option<MsftIscsiSession>>>;

    /// `MSFT_iSCSITarget.Disconnect(SessionIdentifier)` on the target instance (as csi-proxy calls it).
    fn target_disconnect(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
        session_identifier: &str,
    ) -> CallResult<IscsiOutcome>;

    /// `ASSOCIATORS OF {target} WHERE AssocClass = MSFT_iSCSITargetToiSCSISession ResultClass = MSFT_iSCSISession`:
    /// every session (several with MPIO or several portals).
    fn target_sessions(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiSession>>;

    /// `SELECT … FROM MSFT_iSCSISession`: every session, persistent ones included.
    fn sessions(&self, ctx: &CallContext) -> CallResult<Vec<MsftIscsiSession>>;

    /// `ASSOCIATORS OF {session} WHERE AssocClass = MSFT_iSCSISessionToDisk ResultClass = MSFT_Disk`.
    fn session_disks(&self, ctx: &CallContext, session: &ObjectPath) -> CallResult<Vec<MsftDisk>>;

    /// `ASSOCIATORS OF {target} WHERE AssocClass = MSFT_iSCSITargetToiSCSIConnection ResultClass =
    /// MSFT_iSCSIConnection` (csi-proxy's route to the disks).
    fn target_connections(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiConnection>>;

    /// `ASSOCIATORS OF {connection} WHERE AssocClass = MSFT_iSCSIConnectionToDisk ResultClass = MSFT_Disk`.
    fn connection_disks(
        &self,
        ctx: &CallContext,
        connection: &ObjectPath,
    ) -> CallResult<Vec<MsftDisk>>;

    /// `MSFT_iSCSISession.Register(…)`: make an existing session persistent (the initiator logs it back in at boot).
    fn session_register(
        &self,
        ctx: &CallContext,
        session: &ObjectPath,
        params: &RegisterSession<'_>,
    ) -> CallResult<IscsiOutcome>;

    /// `MSFT_iSCSISession.Unregister()`: drop the persistent login record.
    fn session_unregister(
        &self,
        ctx: &CallContext,
        session: &ObjectPath,
    ) -> CallResult<IscsiOutcome>;

    /// Static `MSFT_iSCSISession.SetCHAPSecret(ChapSecret)`: the initiator's node-wide mutual-CHAP secret.
    fn set_chap_secret(&self, ctx: &CallContext, secret: &str) -> CallResult<IscsiOutcome>;

    /// `SELECT … FROM MSFT_InitiatorPort`.
    fn initiator_ports(&self, ctx: &CallContext) -> CallResult<Vec<MsftInitiatorPort>>;
}

/// SMB global mappings: `ROOT\Microsoft\Windows\SMB`.
pub trait SmbWmi: Send + Sync {
    /// `SELECT … FROM MSFT_SmbGlobalMapping`: every mapping (the caller compares `RemotePath` itself, ignoring case:
    /// whether the provider does is unverified, reference §2.2).
    fn global_mappings(&self, ctx: &CallContext) -> CallResult<Vec<SmbGlobalMapping>>;

    /// `SELECT … FROM MSFT_SmbGlobalMapping WHERE RemotePath = "<remote_path>"` (quoted by [`crate::wql::quote`]):
    /// the mappings of one remote path, without listing every mapping on the node. Whether the provider compares
    /// `RemotePath` ignoring case (or slash style) is unverified (reference §2.2), so an empty answer does not prove
    /// there is no mapping under another spelling: a caller that must not miss one falls back to
    /// [`SmbWmi::global_mappings`].
    fn global_mappings_of(
        &self,
        ctx: &CallContext,
        remote_path: &str,
    ) -> CallResult<Vec<SmbGlobalMapping>>;

    /// Static `MSFT_SmbGlobalMapping.Create(…)`; out `CreatedMapping`.
    fn global_mapping_create(
        &self,
        ctx: &CallContext,
        params: &SmbGlobalMappingCreate<'_>,
    ) -> CallResult<SmbOutcome<Option<SmbGlobalMapping>>>;

    /// `MSFT_SmbGlobalMapping.Remove(Force)` on the mapping instance.
    fn global_mapping_remove(
        &self,
        ctx: &CallContext,
        mapping: &ObjectPath,
        force: bool,
    ) -> CallResult<SmbOutcome>;
}

/// Win32 file, volume and device calls (kernel32 / DeviceIoControl). Paths are passed as given.
pub trait Win32Files: Send + Sync {
    /// `CreateDirectoryW(path)`: one directory (183 when it exists, 3 when the parent is missing).
    fn create_directory(&self, ctx: &CallContext, path: &str) -> CallResult<()>;

    /// `RemoveDirectoryW(path)`: an empty directory, or a directory link / mount point itself (never its target).
    fn remove_directory(&self, ctx: &CallContext, path: &str) -> CallResult<()>;

    /// `DeleteFileW(path)`: a file, or a file symlink itself.
    fn delete_file(&self, ctx: &CallContext, path: &str) -> CallResult<()>;

    /// Remove a directory tree without following links (Rust std `remove_dir_all`, which opens the root with
    /// `FILE_FLAG_OPEN_REPARSE_POINT`, reference §2.1). Unmount volume mount points below it first.
    fn remove_tree(&self, ctx: &CallContext, path: &str) -> CallResult<()>;

    /// `CreateSymbolicLinkW(link, target, flags)`. `target` is stored as given.
    fn create_symbolic_link(
        &self,
        ctx: &CallContext,
        link: &str,
        target: &str,
        flags: SymlinkFlags,
    ) -> CallResult<()>;

    /// `GetFileAttributesW(path)` (does not follow the final component).
    fn file_attributes(&self, ctx: &CallContext, path: &str) -> CallResult<FileAttributes>;

    /// Attributes and exact reparse tag, not following the final link (`CreateFileW` with
    /// `FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS`, then `GetFileInformationByHandleEx`).
    fn attribute_tag(&self, ctx: &CallContext, path: &str) -> CallResult<AttributeTag>;

    /// The reparse point at `path`, one hop, dangling or not (`FSCTL_GET_REPARSE_POINT`; 4390 when `path` is not
    /// one).
    fn read_reparse_point(&self, ctx: &CallContext, path: &str) -> CallResult<ReparsePoint>;

    /// Where `path` finally leads, every link followed (`GetFinalPathNameByHandleW`). Fails when a hop dangles.
    fn final_path_name(
        &self,
        ctx: &CallContext,
        path: &str,
        kind: VolumeNameKind,
    ) -> CallResult<String>;

    /// `SetVolumeMountPointW(mount_point, volume)`: `mount_point` an existing empty NTFS directory with a trailing
    /// `\` (145 when not empty or already a mount point, 123 without the `\`).
    fn set_volume_mount_point(
        &self,
        ctx: &CallContext,
        mount_point: &str,
        volume: &VolumeGuidPath,
    ) -> CallResult<()>;

    /// `DeleteVolumeMountPointW(mount_point)` (trailing `\`; 4390 when not a mount point). The directory stays.
    fn delete_volume_mount_point(&self, ctx: &CallContext, mount_point: &str) -> CallResult<()>;

    /// `GetVolumeNameForVolumeMountPointW(mount_point)` (trailing `\`): the volume GUID path.
    fn volume_name_for_mount_point(
        &self,
        ctx: &CallContext,
        mount_point: &str,
    ) -> CallResult<VolumeGuidPath>;

    /// `GetVolumePathNameW(path)`: the root of the volume holding `path` (links followed).
    fn volume_path_name(&self, ctx: &CallContext, path: &str) -> CallResult<String>;

    /// `GetVolumePathNamesForVolumeNameW(volume)`: the volume's drive letters and mounted folders.
    fn volume_path_names(
        &self,
        ctx: &CallContext,
        volume: &VolumeGuidPath,
    ) -> CallResult<Vec<String>>;

    /// `GetVolumeInformationW(root)` (`root` with a trailing `\`).
    fn volume_information(&self, ctx: &CallContext, root: &str) -> CallResult<VolumeInformation>;

    /// `GetDiskFreeSpaceExW(path)` (a directory, with a trailing `\`).
    fn disk_free_space(&self, ctx: &CallContext, path: &str) -> CallResult<FreeSpace>;

    /// Flush a volume: `CreateFileW` on the volume device (the GUID path without its trailing `\`), then
    /// `FlushFileBuffers`. Needs administrator rights.
    fn flush_volume(&self, ctx: &CallContext, volume: &VolumeGuidPath) -> CallResult<()>;

    /// `IOCTL_STORAGE_GET_DEVICE_NUMBER` on a device path (`MSFT_Disk.Path` or `\\.\PhysicalDriveN`).
    fn storage_device_number(
        &self,
        ctx: &CallContext,
        device: &str,
    ) -> CallResult<StorageDeviceNumber>;

    /// `IOCTL_STORAGE_QUERY_PROPERTY(StorageDeviceIdProperty)` on a device path: the VPD page 0x83 identifiers,
    /// in the device's order ([`crate::page83::csi_proxy_page83`] picks csi-proxy's one).
    fn storage_device_identifiers(
        &self,
        ctx: &CallContext,
        device: &str,
    ) -> CallResult<Vec<StorageIdentifier>>;

    /// Read a device's first `head` and last `tail` bytes (both multiples of 4096, so every read is sector-aligned;
    /// a device shorter than either is read whole): `CreateFileW(device, GENERIC_READ, FILE_SHARE_READ |
    /// FILE_SHARE_WRITE, OPEN_EXISTING)`, the length (`IOCTL_DISK_GET_LENGTH_INFO`, or `GetFileSizeEx` for a file),
    /// then `ReadFile` at each offset. Needs administrator rights for a disk (`\\.\PhysicalDriveN`, `MSFT_Disk.Path`).
    /// Reads only: nothing on the device changes.
    fn read_device(
        &self,
        ctx: &CallContext,
        device: &str,
        head: u64,
        tail: u64,
    ) -> CallResult<DeviceBytes>;
}

/// What the host offers, as found by the start-up probe, and how its call lanes are doing.
pub trait Capabilities: Send + Sync {
    /// The probe's findings. Calls into a missing namespace or class fail with [`crate::CallError::Unsupported`]
    /// without reaching the host.
    fn probe_report(&self) -> ProbeReport;

    /// Run the probe again and keep its findings (what [`Capabilities::probe_report`] answers from now on): after a
    /// probe that could not tell ([`crate::probe::CapabilityState::ProbeFailed`]: WMI restarting at boot, a
    /// timeout), calls into what it now finds are served.
    fn reprobe(&self, ctx: &CallContext) -> CallResult<ProbeReport>;

    /// The implementation's call lanes (its worker pools), for reports: stuck calls, exhausted lanes. None when it
    /// has no lanes of its own (the simulated host).
    fn lanes(&self) -> Vec<PoolStatus> {
        Vec::new()
    }

    /// How long the node has been up ([`crate::uptime`]: `GetTickCount64` on Windows), `None` when it cannot tell. A
    /// read of the kernel's tick count, not a WMI call: it neither fails nor hangs, so it takes no `CallContext`.
    /// The simulated host answers its own boots' uptime.
    fn uptime(&self) -> Option<std::time::Duration> {
        crate::uptime::node_uptime()
    }

    /// The node's Windows build number ([`crate::os_build`]: `RtlGetVersion` on Windows), `None` when it cannot
    /// tell. Like [`Capabilities::uptime`], a read that neither fails nor hangs. The simulated host answers its
    /// scenario's build; the socket client the build its server answered when it connected.
    fn os_build(&self) -> Option<u32> {
        crate::os_build::node_build()
    }
}

/// Everything the native backend needs, as one object-safe trait (`Arc<dyn WindowsHost>`).
pub trait WindowsHost: StorageWmi + IscsiWmi + SmbWmi + Win32Files + Capabilities {}

impl<T: StorageWmi + IscsiWmi + SmbWmi + Win32Files + Capabilities + ?Sized> WindowsHost for T {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The traits are object-safe and shareable across threads (a compile-time check).
    #[test]
    fn traits_are_object_safe_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + ?Sized>() {}
        assert_send_sync::<dyn StorageWmi>();
        assert_send_sync::<dyn IscsiWmi>();
        assert_send_sync::<dyn SmbWmi>();
        assert_send_sync::<dyn Win32Files>();
        assert_send_sync::<dyn Capabilities>();
        assert_send_sync::<dyn WindowsHost>();
        let _: Option<std::sync::Arc<dyn WindowsHost>> = None;
    }
}
