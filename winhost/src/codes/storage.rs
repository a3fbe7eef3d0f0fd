//! Return values of the Windows Storage Management API methods (`ROOT\Microsoft\Windows\Storage`).

use super::code_table;

code_table! {
    /// The `ReturnValue` of an `MSFT_Disk`, `MSFT_Partition`, `MSFT_Volume` or `MSFT_StorageSetting` method.
    ///
    /// Meanings are Microsoft's, from the method pages of the Windows Storage Management API (windows-driver-docs
    /// `storage/`: `createpartition-msft-disk`, `initialize-msft-disk`, `msft-disk-online`, `msft-disk-offline`,
    /// `msft-disk-setattributes`, `msft-disk-refresh`, `msft-partition-online`, `msft-partition-getsupportedsizes`,
    /// `msft-partition-resize`, `format-msft-volume`, `msft-volume-flush`, `addaccesspath-msft-partition`). Code 6 is
    /// "Disk is in use" on the disk pages and "In Use" on `MSFT_Partition.Online`. Which codes each method documents:
    /// [`StorageMethod::documented_codes`].
    pub enum StorageReturn: u32, "{}" {
        Success = 0 => "Success",
        NotSupported = 1 => "Not Supported",
        UnspecifiedError = 2 => "Unspecified Error",
        Timeout = 3 => "Timeout",
        Failed = 4 => "Failed",
        InvalidParameter = 5 => "Invalid Parameter",
        InUse = 6 => "Disk is in use",
        NotSupportedOnWow64 = 7 => "This command is not supported on x86 running in x64 environment.",
        SizeNotSupported = 4097 => "Size Not Supported",
        NotEnoughFreeSpace = 40000 => "Not enough free space",
        AccessDenied = 40001 => "Access denied",
        NotEnoughResources = 40002 => "There are not enough resources to complete the operation.",
        CacheOutOfDate = 40003 => "Cache out of date",
        UnexpectedIoError = 40004 => "An unexpected I/O error has occurred",
        SizeParameterRequired = 40005 => "You must specify a size by using either the Size or the UseMaximumSize parameter. You can specify only one of these parameters at a time.",
        VolumeClusterManaged = 40018 => "The specified object is managed by the Microsoft Failover Clustering component. The disk must be in cluster maintenance mode and the cluster resource status must be online to perform this operation.",
        DiskNotInitialized = 41000 => "The disk has not been initialized.",
        DiskAlreadyInitialized = 41001 => "The disk has already been initialized.",
        DiskReadOnly = 41002 => "The disk is read only.",
        DiskOffline = 41003 => "The disk is offline.",
        PartitionLimitReached = 41004 => "The disk's partition limit has been reached.",
        InvalidAlignment = 41005 => "The specified partition alignment is not valid. It must be a multiple of the disk's sector size.",
        ParameterNotValidForPartitionType = 41006 => "A parameter is not valid for this type of partition.",
        CriticalDisk = 41009 => "Operation not supported on a critical disk.",
        InvalidPartitionType = 41010 => "The specified partition type is not valid.",
        MbrTwoTerabyteLimit = 41011 => "Only the first 2 TB are usable on MBR disks.",
        InvalidOffset = 41012 => "The specified offset is not valid.",
        TooSmallForGpt = 41014 => "The disk is not large enough to support a GPT partition style.",
        NoMedia = 41015 => "There is no media in the device.",
        InvalidOffsetAlt = 41016 => "The specified offset is not valid (41016).",
        InvalidPartitionLayout = 41017 => "The specified partition layout is invalid.",
        DiskClusterManaged = 41018 => "The specified object is managed by the Microsoft Failover Clustering component. The disk must be in cluster maintenance mode and the cluster resource status must be online to perform this operation.",
        AccessPathInUse = 42002 => "The requested access path is already in use.",
        HiddenPartitionAccessPath = 42004 => "Cannot assign access paths to hidden partitions.",
        InvalidAccessPath = 42007 => "The access path is not valid.",
        VolumeHasErrors = 42008 => "Cannot shrink a partition containing a volume with errors.",
        UnknownFileSystem = 42009 => "Cannot resize a partition containing an unknown file system.",
        SystemOrCriticalPartition = 42010 => "The operation is not allowed on a system or critical partition.",
        DataPartitionsOnly = 42011 => "This operation is only supported on data partitions.",
        InvalidClusterSize = 43000 => "The specified cluster size is invalid",
        FileSystemNotSupported = 43001 => "The specified file system is not supported",
        CannotQuickFormat = 43002 => "The volume cannot be quick formatted",
        ClustersExceed32Bits = 43003 => "The number of clusters exceeds 32 bits",
        UdfVersionNotSupported = 43004 => "The specified UDF version is not supported",
        ClusterSizeNotSectorMultiple = 43005 => "The cluster size must be a multiple of the disk's physical sector size",
        DriveReadOnly = 43006 => "Cannot perform the requested operation when the drive is read only",
        FormatUndocumented43034 = 43034 => "Listed by MSFT_Volume.Format with the text \"Missing documentation\"",
    }
}

impl StorageReturn {
    /// Whether the method succeeded.
    pub fn is_success(self) -> bool {
        self == Self::Success
    }
}

/// The Storage Management API methods the facade calls, for their documented return values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StorageMethod {
    /// `MSFT_Disk.Online`.
    DiskOnline,
    /// `MSFT_Disk.Offline`.
    DiskOffline,
    /// `MSFT_Disk.Initialize`.
    DiskInitialize,
    /// `MSFT_Disk.CreatePartition`.
    DiskCreatePartition,
    /// `MSFT_Disk.SetAttributes`.
    DiskSetAttributes,
    /// `MSFT_Disk.Refresh`.
    DiskRefresh,
    /// `MSFT_Partition.Online`.
    PartitionOnline,
    /// `MSFT_Partition.GetSupportedSize`.
    PartitionGetSupportedSize,
    /// `MSFT_Partition.Resize`.
    PartitionResize,
    /// `MSFT_Volume.Format`.
    VolumeFormat,
    /// `MSFT_Volume.Flush`.
    VolumeFlush,
    /// `MSFT_StorageSetting.Get` (static).
    StorageSettingGet,
    /// `MSFT_StorageSetting.UpdateHostStorageCache` (static).
    UpdateHostStorageCache,
}

impl StorageMethod {
    /// Every method, in declaration order.
    pub const ALL: &'static [Self] = &[
        Self::DiskOnline,
        Self::DiskOffline,
        Self::DiskInitialize,
        Self::DiskCreatePartition,
        Self::DiskSetAttributes,
        Self::DiskRefresh,
        Self::PartitionOnline,
        Self::PartitionGetSupportedSize,
        Self::PartitionResize,
        Self::VolumeFormat,
        Self::VolumeFlush,
        Self::StorageSettingGet,
        Self::UpdateHostStorageCache,
    ];

    /// `Class.Method`.
    pub const fn qualified_name(self) -> &'static str {
        match self {
            Self::DiskOnline => "MSFT_Disk.Online",
            Self::DiskOffline => "MSFT_Disk.Offline",
            Self::DiskInitialize => "MSFT_Disk.Initialize",
            Self::DiskCreatePartition => "MSFT_Disk.CreatePartition",
            Self::DiskSetAttributes => "MSFT_Disk.SetAttributes",
            Self::DiskRefresh => "MSFT_Disk.Refresh",
            Self::PartitionOnline => "MSFT_Partition.Online",
            Self::PartitionGetSupportedSize => "MSFT_Partition.GetSupportedSize",
            Self::PartitionResize => "MSFT_Partition.Resize",
            Self::VolumeFormat => "MSFT_Volume.Format",
            Self::VolumeFlush => "MSFT_Volume.Flush",
            Self::StorageSettingGet => "MSFT_StorageSetting.Get",
            Self::UpdateHostStorageCache => "MSFT_StorageSetting.UpdateHostStorageCache",
        }
    }

    /// The return values the method's documentation page lists (in its order). Empty when the page lists none
    /// (`MSFT_StorageSetting.Get` and `UpdateHostStorageCache` document only the `UInt32` return type). A simulated
    /// host answers only with these; anything else from a real host is reported as is.
    pub const fn documented_codes(self) -> &'static [u32] {
        const COMMON: [u32; 6] = [0, 1, 2, 3, 4, 5];
        match self {
            Self::DiskOnline => &[0, 1, 2, 3, 4, 5, 6, 40001, 40002, 40003, 41018],
            Self::DiskOffline => &[0, 1, 2, 3, 4, 5, 6, 40001, 40002, 40003, 41009, 41018],
            Self::DiskInitialize => &[
                0, 1, 2, 3, 4, 5, 6, 40001, 40002, 40003, 41001, 41010, 41014, 41018,
            ],
            Self::DiskCreatePartition => &[
                0, 1, 2, 3, 4, 5, 6, 4097, 40000, 40001, 40002, 40003, 40005, 41000, 41002, 41003,
                41004, 41005, 41006, 41010, 41011, 41012, 41015, 41016, 41017, 41018, 42002, 42004,
                42007,
            ],
            Self::DiskSetAttributes => &[
                0, 1, 2, 3, 4, 5, 6, 40001, 40002, 40003, 41000, 41003, 41006, 41009, 41018,
            ],
            Self::DiskRefresh => &[0, 1, 2, 3, 4, 5, 6, 40001, 40002, 40003, 41000, 41003],
            Self::PartitionOnline => &[0, 1, 2, 3, 4, 5, 6, 40001, 40002, 42011],
            Self::PartitionGetSupportedSize | Self::PartitionResize => {
                &[0, 1, 2, 3, 4, 5, 4097, 40001, 40002, 42008, 42009]
            }
            Self::VolumeFormat => &[
                0, 1, 2, 3, 4, 5, 7, 40001, 40004, 40018, 42010, 43000, 43001, 43002, 43003, 43004,
                43005, 43006, 43034,
            ],
            Self::VolumeFlush => &COMMON,
            Self::StorageSettingGet | Self::UpdateHostStorageCache => &[],
        }
    }

    /// Whether `code` is among the method's documented return values.
    pub fn documents(self, code: StorageReturn) -> bool {
        self.documented_codes().contains(&code.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_code_is_in_the_table() {
        for &method in StorageMethod::ALL {
            for &code in method.documented_codes() {
                assert!(
                    !matches!(StorageReturn::from_code(code), StorageReturn::Unknown(_)),
                    "{} documents {code}, missing from StorageReturn",
                    method.qualified_name()
                );
            }
        }
    }

    #[test]
    fn method_tables_follow_the_pages() {
        // CreatePartition documents 42002 (csi-proxy treats it as success, reference §2.3); Online does not.
        assert!(StorageMethod::DiskCreatePartition.documents(StorageReturn::AccessPathInUse));
        assert!(!StorageMethod::DiskOnline.documents(StorageReturn::AccessPathInUse));
        // Initialize's "already initialized" (41001) is what makes a repeat distinguishable.
        assert!(StorageMethod::DiskInitialize.documents(StorageReturn::DiskAlreadyInitialized));
        // SetAttributes' page lists no 41002 (the csi-proxy PR #438 review names it): undocumented for it.
        assert!(!StorageMethod::DiskSetAttributes.documents(StorageReturn::DiskReadOnly));
        assert!(
            StorageMethod::UpdateHostStorageCache
                .documented_codes()
                .is_empty()
        );
        assert!(StorageReturn::Success.is_success());
        assert!(!StorageReturn::CacheOutOfDate.is_success());
    }
}
