//! `ROOT\Microsoft\Windows\Storage`: disks, partitions, volumes and the storage settings.

use crate::codes::{
    BusType, DiskOperationalStatus, FileSystemType, NewDiskPolicy, OfflineReason, PartitionStyle,
    UniqueIdFormat,
};

use super::ObjectPath;

/// `MSFT_Disk` (Microsoft's `MSFT_Disk` class page), the properties the native backend reads.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftDisk {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `Number`: the OS disk number (not stable across restarts, per the page).
    pub number: u32,
    /// `Path`: a device path that can be opened (for the IOCTLs).
    pub device_path: Option<String>,
    /// `Location`: the PnP location text ([`crate::location`] parses it). NULL for Hyper-V/VHD per the page.
    pub location: Option<String>,
    /// `UniqueId`: the provider's chosen VPD page 0x83 identifier (not csi-proxy's page83, reference §2.3).
    pub unique_id: Option<String>,
    /// `UniqueIdFormat`.
    pub unique_id_format: Option<UniqueIdFormat>,
    /// `SerialNumber` (may be blank or space-padded).
    pub serial_number: Option<String>,
    /// `Size` in bytes (stale after a LUN grows until a rescan or `Refresh`).
    pub size: u64,
    /// `LogicalSectorSize` in bytes (512 or 4096): the unit of the partition table, so of the GPT backup area at the
    /// end of the disk (the native backend's expansion computes the partition's maximum from it).
    pub logical_sector_size: Option<u32>,
    /// `NumberOfPartitions`.
    pub number_of_partitions: Option<u32>,
    /// `PartitionStyle`; `None` when the provider left it NULL. Only `Some(Raw)` means "no MBR and no GPT": a NULL or
    /// undocumented value is not proof of anything (the native backend refuses to initialise such a disk).
    pub partition_style: Option<PartitionStyle>,
    /// `BusType`.
    pub bus_type: Option<BusType>,
    /// `IsOffline`.
    pub is_offline: bool,
    /// `OfflineReason` (set when offline).
    pub offline_reason: Option<OfflineReason>,
    /// `IsReadOnly`.
    pub is_read_only: bool,
    /// `IsSystem`.
    pub is_system: bool,
    /// `IsBoot`.
    pub is_boot: bool,
    /// `OperationalStatus` (a list: see [`DiskOperationalStatus`]).
    pub operational_status: Vec<DiskOperationalStatus>,
}

/// `MSFT_Partition` (Microsoft's `MSFT_Partition` class page).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftPartition {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `DiskNumber`.
    pub disk_number: u32,
    /// `PartitionNumber`.
    pub partition_number: u32,
    /// `Offset` in bytes (Windows 10 and later).
    pub offset: Option<u64>,
    /// `Size` in bytes.
    pub size: u64,
    /// `GptType` (NULL on MBR disks).
    pub gpt_type: Option<String>,
    /// `MbrType` (NULL on GPT disks).
    pub mbr_type: Option<u16>,
    /// `AccessPaths`: drive letters and mounted folders, including the volume GUID path.
    pub access_paths: Vec<String>,
    /// `IsReadOnly`.
    pub is_read_only: bool,
    /// `IsOffline`.
    pub is_offline: bool,
    /// `IsHidden`.
    pub is_hidden: bool,
}

impl MsftPartition {
    /// Whether this is a Microsoft Reserved partition (csi-proxy's "non-MSR" filter, reference §2.3).
    pub fn is_microsoft_reserved(&self) -> bool {
        self.gpt_type
            .as_deref()
            .is_some_and(|t| GptType::MicrosoftReserved.matches(t))
    }
}

/// `MSFT_Volume` (Microsoft's `MSFT_Volume` class page).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftVolume {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `UniqueId`: the volume GUID path `\\?\Volume{…}\`.
    pub unique_id: String,
    /// `Path`: the volume path.
    pub volume_path: Option<String>,
    /// `DriveLetter`.
    pub drive_letter: Option<char>,
    /// `FileSystem` text, e.g. `NTFS`.
    pub file_system: Option<String>,
    /// `FileSystemLabel`.
    pub file_system_label: Option<String>,
    /// `FileSystemType`.
    pub file_system_type: FileSystemType,
    /// `Size` in bytes.
    pub size: u64,
    /// `SizeRemaining` in bytes.
    pub size_remaining: u64,
    /// `HealthStatus` (0 Healthy, 1 Scan Needed, 2 Spot Fix Needed, 3 Full Repair Needed).
    pub health_status: Option<u16>,
}

/// `MSFT_StorageSetting`, from the static `Get` method's `StorageSettings` out-parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftStorageSetting {
    /// `NewDiskPolicy`: the SAN policy.
    pub new_disk_policy: Option<NewDiskPolicy>,
}

/// `MSFT_MSDSMSupportedHW`: one hardware id in the Microsoft DSM's supported hardware list (`Get-MSDSMSupportedHW`,
/// whose output class is `root/microsoft/windows/storage/MSFT_MSDSMSupportedHW`: Microsoft's
/// `Enable-StorageSpacesMpioSupport` page, OUTPUTS). `Enable-MSDSMAutomaticClaim -BusType iSCSI` adds `MSFT2005` /
/// `iSCSIBusType_0x9` (Microsoft's "MPIO on Nano Server": the iSCSI hardware id `MSFT2005iSCSIBusType_0x9`, claimed
/// when it is in both the MPIO and the MSDSM lists).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftMsdsmSupportedHw {
    /// `VendorId` (without `mpclaim`'s padding).
    pub vendor_id: String,
    /// `ProductId`.
    pub product_id: String,
}

impl MsftMsdsmSupportedHw {
    /// The hardware id under which the MSDSM claims every iSCSI disk (`Enable-MSDSMAutomaticClaim -BusType iSCSI`).
    pub const ISCSI_BUS_TYPE: (&'static str, &'static str) = ("MSFT2005", "iSCSIBusType_0x9");

    /// Whether this entry claims iSCSI disks (ids compared ignoring case and `mpclaim`'s space padding).
    pub fn claims_iscsi(&self) -> bool {
        let (v, p) = Self::ISCSI_BUS_TYPE;
        self.vendor_id.trim().eq_ignore_ascii_case(v)
            && self.product_id.trim().eq_ignore_ascii_case(p)
    }
}

/// `MSFT_Partition.GetSupportedSize` out-parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct SupportedSize {
    /// `SizeMin` in bytes.
    pub min: u64,
    /// `SizeMax` in bytes.
    pub max: u64,
}

/// GPT partition types of `MSFT_Disk.CreatePartition(GptType)` and `MSFT_Partition.GptType` (Microsoft's
/// `CreatePartition` page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GptType {
    /// An EFI system partition.
    SystemPartition,
    /// A Microsoft reserved partition.
    MicrosoftReserved,
    /// A basic data partition: the only type that gets a volume GUID path and mounted folders.
    BasicData,
    /// A Microsoft recovery partition.
    MicrosoftRecovery,
}

impl GptType {
    /// The GUID in the braced form csi-proxy passes (`{ebd0a0a2-…}`).
    pub const fn guid(self) -> &'static str {
        match self {
            Self::SystemPartition => "{c12a7328-f81f-11d2-ba4b-00a0c93ec93b}",
            Self::MicrosoftReserved => "{e3c9e316-0b5c-4db8-817d-f92df00215ae}",
            Self::BasicData => "{ebd0a0a2-b9e5-4433-87c0-68b6b72699c7}",
            Self::MicrosoftRecovery => "{de94bba4-06d1-4d40-a16a-bfd50179d6ac}",
        }
    }

    /// Whether a `GptType` value names this type (case-insensitive, braces optional).
    pub fn matches(self, value: &str) -> bool {
        let bare = |s: &str| {
            s.trim()
                .trim_start_matches('{')
                .trim_end_matches('}')
                .to_ascii_lowercase()
        };
        bare(value) == bare(self.guid())
    }
}

/// `MSFT_Disk.CreatePartition` in-parameters (only those set are passed; the page forbids `Size` with
/// `UseMaximumSize`, and `DriveLetter` with `AssignDriveLetter`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct CreatePartition {
    /// `Size` in bytes.
    pub size: Option<u64>,
    /// `UseMaximumSize`.
    pub use_maximum_size: Option<bool>,
    /// `Offset` in bytes.
    pub offset: Option<u64>,
    /// `Alignment` in bytes.
    pub alignment: Option<u32>,
    /// `DriveLetter`.
    pub drive_letter: Option<char>,
    /// `AssignDriveLetter`.
    pub assign_drive_letter: Option<bool>,
    /// `MbrType`.
    pub mbr_type: Option<u16>,
    /// `GptType` (braced GUID).
    pub gpt_type: Option<String>,
    /// `IsHidden`.
    pub is_hidden: Option<bool>,
    /// `IsActive`.
    pub is_active: Option<bool>,
}

impl CreatePartition {
    /// csi-proxy's call: the largest free extent, basic data, no drive letter, not hidden, not active
    /// (`pkg/os/disk/api.go:129-219`, reference §2.3).
    pub fn csi_proxy_basic_data() -> Self {
        Self {
            use_maximum_size: Some(true),
            assign_drive_letter: Some(false),
            gpt_type: Some(GptType::BasicData.guid().to_owned()),
            is_hidden: Some(false),
            is_active: Some(false),
            ..Self::default()
        }
    }
}

/// `MSFT_Disk.SetAttributes` in-parameters (only those set are passed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct DiskAttributes {
    /// `IsReadOnly`.
    pub is_read_only: Option<bool>,
    /// `Signature` (MBR only).
    pub signature: Option<u32>,
    /// `Guid` (GPT only).
    pub guid: Option<String>,
}

/// `MSFT_Volume.Format` in-parameters (only those set are passed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct FormatVolume {
    /// `FileSystem`: `NTFS`, `ReFS`, …
    pub file_system: Option<String>,
    /// `FileSystemLabel`.
    pub file_system_label: Option<String>,
    /// `AllocationUnitSize` in bytes.
    pub allocation_unit_size: Option<u32>,
    /// `Full` (false: quick format).
    pub full: Option<bool>,
    /// `Force`.
    pub force: Option<bool>,
}

impl FormatVolume {
    /// csi-proxy's call: quick NTFS, forced, no label (`pkg/os/volume/api.go:97-118`, reference §2.4).
    pub fn csi_proxy_quick_ntfs() -> Self {
        Self {
            file_system: Some("NTFS".to_owned()),
            full: Some(false),
            force: Some(true),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(gpt: Option<&str>) -> MsftPartition {
        MsftPartition {
            path: ObjectPath::new("p"),
            disk_number: 1,
            partition_number: 1,
            offset: None,
            size: 0,
            gpt_type: gpt.map(str::to_owned),
            mbr_type: None,
            access_paths: vec![],
            is_read_only: false,
            is_offline: false,
            is_hidden: false,
        }
    }

    #[test]
    fn reserved_partitions_are_recognised_in_any_spelling() {
        assert!(partition(Some("{e3c9e316-0b5c-4db8-817d-f92df00215ae}")).is_microsoft_reserved());
        assert!(partition(Some("E3C9E316-0B5C-4DB8-817D-F92DF00215AE")).is_microsoft_reserved());
        assert!(!partition(Some(GptType::BasicData.guid())).is_microsoft_reserved());
        // MBR partitions have no GptType: never "reserved".
        assert!(!partition(None).is_microsoft_reserved());
    }

    #[test]
    fn csi_proxy_parameter_sets() {
        let p = CreatePartition::csi_proxy_basic_data();
        assert_eq!(p.use_maximum_size, Some(true));
        assert_eq!(p.size, None);
        assert!(GptType::BasicData.matches(p.gpt_type.as_deref().unwrap()));
        let f = FormatVolume::csi_proxy_quick_ntfs();
        assert_eq!(
            (f.file_system.as_deref(), f.full, f.force),
            (Some("NTFS"), Some(false), Some(true))
        );
    }
}
