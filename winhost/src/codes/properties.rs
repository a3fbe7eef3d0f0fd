//! Enumerated property values of the WMI classes the facade reads.

use super::code_table;

code_table! {
    /// `CIM_Error.CIMStatusCode` (inherited by `MSFT_StorageExtendedStatus`), per Microsoft's `CIM_Error` class page
    /// (DMTF DSP0200 `CIMError`).
    pub enum CimStatusCode: u32, "{}" {
        Failed = 1 => "CIM_ERR_FAILED: a general error occurred that is not covered by a more specific error code.",
        AccessDenied = 2 => "CIM_ERR_ACCESS_DENIED: access to a CIM resource was not available to the client.",
        InvalidNamespace = 3 => "CIM_ERR_INVALID_NAMESPACE: the target namespace does not exist.",
        InvalidParameter = 4 => "CIM_ERR_INVALID_PARAMETER: one or more parameter values passed to the method were invalid.",
        InvalidClass = 5 => "CIM_ERR_INVALID_CLASS: the specified class does not exist.",
        NotFound = 6 => "CIM_ERR_NOT_FOUND: the requested object could not be found.",
        NotSupported = 7 => "CIM_ERR_NOT_SUPPORTED: the requested operation is not supported.",
        ClassHasChildren = 8 => "CIM_ERR_CLASS_HAS_CHILDREN: the operation cannot be invoked on this class because it has subclasses.",
        ClassHasInstances = 9 => "CIM_ERR_CLASS_HAS_INSTANCES: the operation cannot be invoked on this class because it has instances.",
        InvalidSuperclass = 10 => "CIM_ERR_INVALID_SUPERCLASS: the operation cannot be invoked because the specified superclass does not exist.",
        AlreadyExists = 11 => "CIM_ERR_ALREADY_EXISTS: the operation cannot be invoked because an object already exists.",
        NoSuchProperty = 12 => "CIM_ERR_NO_SUCH_PROPERTY: the specified property does not exist.",
        TypeMismatch = 13 => "CIM_ERR_TYPE_MISMATCH: the value supplied is not compatible with the type.",
        QueryLanguageNotSupported = 14 => "CIM_ERR_QUERY_LANGUAGE_NOT_SUPPORTED: the query language is not recognized or supported.",
        InvalidQuery = 15 => "CIM_ERR_INVALID_QUERY: the query is not valid for the specified query language.",
        MethodNotAvailable = 16 => "CIM_ERR_METHOD_NOT_AVAILABLE: the extrinsic method cannot be invoked.",
        MethodNotFound = 17 => "CIM_ERR_METHOD_NOT_FOUND: the specified extrinsic method does not exist.",
    }
}

code_table! {
    /// `MSFT_SmbGlobalMapping.Status` (uint32), per Microsoft's `MSFT_SmbMapping` class page and csi-proxy
    /// `pkg/cim/smb.go:15-21` (reference §2.2).
    pub enum SmbMappingStatus: u32, "{}" {
        Ok = 0 => "OK",
        Paused = 1 => "Paused",
        Disconnected = 2 => "Disconnected",
        NetworkError = 3 => "NetworkError",
        Connecting = 4 => "Connecting",
        Reconnecting = 5 => "Reconnecting",
        Unavailable = 6 => "Unavailable",
    }
}

code_table! {
    /// `MSFT_Disk.PartitionStyle`, also `MSFT_Disk.Initialize(PartitionStyle)` (Microsoft's `MSFT_Disk` and
    /// `Initialize` pages; the page calls 0 "Unknown", csi-proxy and PowerShell call it RAW).
    pub enum PartitionStyle: u16, "{}" {
        Raw = 0 => "Unknown (RAW: not initialised)",
        Mbr = 1 => "Master Boot Record (MBR)",
        Gpt = 2 => "GUID Partition Table (GPT)",
    }
}

code_table! {
    /// `MSFT_Disk.OfflineReason` (Microsoft's `MSFT_Disk` page).
    pub enum OfflineReason: u16, "{}" {
        Policy = 1 => "Policy: the user requested the disk to be offline (also the SAN policy).",
        RedundantPath = 2 => "Redundant Path: the disk is used for multi-path I/O.",
        Snapshot = 3 => "Snapshot: the disk is a snapshot disk.",
        Collision = 4 => "Collision: there was a signature or identifier collision with another disk.",
        ResourceExhaustion = 5 => "Resource Exhaustion: there were insufficient resources to bring the disk online.",
        CriticalWriteFailures = 6 => "Critical Write Failures: there were critical write failures on the disk.",
        DataIntegrityScanRequired = 7 => "Data Integrity Scan Required: a data integrity scan is required.",
    }
}

code_table! {
    /// `MSFT_Disk.OperationalStatus` values (Microsoft's `MSFT_Disk` page). The page types the property as `UInt16`;
    /// the facade reads it as a list because CIM's `OperationalStatus` is an array (**unverified** which form the
    /// provider returns: both are accepted).
    pub enum DiskOperationalStatus: u16, "{}" {
        Unknown0 = 0 => "Unknown: the operational status is unknown.",
        Other = 1 => "Other: a vendor-specific status.",
        Ok = 2 => "OK: the disk is responding to commands and is in a normal operating state.",
        Degraded = 3 => "Degraded: the disk is responding to commands, but is not running in an optimal operating state.",
        Stressed = 4 => "Stressed: the disk is functioning, but needs attention.",
        PredictiveFailure = 5 => "Predictive Failure: the disk is functioning, but a failure is likely to occur in the near future.",
        Error = 6 => "Error: an error has occurred.",
        NonRecoverableError = 7 => "Non-Recoverable Error: a non-recoverable error has occurred.",
        Starting = 8 => "Starting: the disk is in the process of starting.",
        Stopping = 9 => "Stopping: the disk is in the process of stopping.",
        Stopped = 10 => "Stopped: the disk was stopped or shut down in a clean and orderly fashion.",
        InService = 11 => "In Service: the disk is being configured, maintained, cleaned, or otherwise administered.",
        NoContact = 12 => "No Contact: the provider has never been able to establish communication with the disk.",
        LostCommunication = 13 => "Lost Communication: the disk is currently unreachable.",
        Aborted = 14 => "Aborted: the disk stopped abruptly and may require configuration or maintenance.",
        Dormant = 15 => "Dormant: the disk is reachable, but it is inactive.",
        SupportingEntityInError = 16 => "Supporting Entity in Error: a device or connection the disk depends on may need attention.",
        Completed = 17 => "Completed: the disk has completed an operation.",
        Online = 0xD010 => "Online: the object is online.",
        NotReady = 0xD011 => "Not Ready: the object is not ready.",
        NoMedia = 0xD012 => "No Media: the object has no media present.",
        Offline = 0xD013 => "Offline: the object is offline.",
        Failed = 0xD014 => "Failed: the object is in a failed state.",
    }
}

code_table! {
    /// `MSFT_Disk.BusType` (Microsoft's `MSFT_Disk` page).
    pub enum BusType: u16, "{}" {
        Unknown0 = 0 => "Unknown",
        Scsi = 1 => "SCSI",
        Atapi = 2 => "ATAPI",
        Ata = 3 => "ATA",
        Ieee1394 = 4 => "IEEE 1394",
        Ssa = 5 => "SSA",
        FibreChannel = 6 => "Fibre Channel",
        Usb = 7 => "USB",
        Raid = 8 => "RAID",
        Iscsi = 9 => "iSCSI",
        Sas = 10 => "Serial Attached SCSI (SAS)",
        Sata = 11 => "Serial ATA (SATA)",
        Sd = 12 => "Secure Digital (SD)",
        Mmc = 13 => "Multimedia Card (MMC)",
        Virtual = 14 => "Virtual (reserved for system use)",
        FileBackedVirtual = 15 => "File-Backed Virtual",
        StorageSpaces = 16 => "Storage Spaces",
        Nvme = 17 => "NVMe",
    }
}

code_table! {
    /// `MSFT_Volume.FileSystemType` (Microsoft's `MSFT_Volume` page, "starting in Windows 10"). csi-proxy counts a
    /// volume as formatted when this is not 0 (reference §2.4).
    pub enum FileSystemType: u16, "{}" {
        Unknown0 = 0 => "Unknown",
        Ufs = 2 => "UFS",
        Hfs = 3 => "HFS",
        Fat = 4 => "FAT",
        Fat16 = 5 => "FAT16",
        Fat32 = 6 => "FAT32",
        Ntfs4 = 7 => "NTFS4",
        Ntfs5 = 8 => "NTFS5",
        Xfs = 9 => "XFS",
        Afs = 10 => "AFS",
        Ext2 = 11 => "EXT2",
        Ext3 = 12 => "EXT3",
        ReiserFs = 13 => "ReiserFS",
        Ntfs = 14 => "NTFS",
        ReFs = 15 => "ReFS",
        CsvfsNtfs = 0x8000 => "CSVFS_NTFS",
        CsvfsReFs = 0x8001 => "CSVFS_ReFS",
    }
}

code_table! {
    /// `MSFT_StorageSetting.NewDiskPolicy`, the SAN policy (reference §2.3).
    pub enum NewDiskPolicy: u16, "{}" {
        OnlineAll = 1 => "OnlineAll",
        OfflineShared = 2 => "OfflineShared (Windows Server's default: shared-bus disks arrive offline and read-only)",
        OfflineAll = 3 => "OfflineAll",
        OfflineInternal = 4 => "OfflineInternal",
    }
}

code_table! {
    /// `MSFT_Disk.UniqueIdFormat`: the VPD page 0x83 descriptor type behind `UniqueId` (Microsoft's `MSFT_Disk` page).
    pub enum UniqueIdFormat: u16, "{}" {
        VendorSpecific = 0 => "Vendor Specific",
        VendorId = 1 => "Vendor Id",
        Eui64 = 2 => "EUI64",
        FcphName = 3 => "FCPH Name",
        ScsiNameString = 8 => "SCSI Name String",
    }
}

impl FileSystemType {
    /// Whether Windows recognises a file system on the volume (csi-proxy's `IsVolumeFormatted`: not `Unknown`).
    pub fn is_formatted(self) -> bool {
        self != Self::Unknown0
    }
}

impl SmbMappingStatus {
    /// Whether the mapping is usable as is.
    pub fn is_ok(self) -> bool {
        self == Self::Ok
    }

    /// Whether the SMB client is (re)establishing the connection by itself (`Connecting`, `Reconnecting`, or a
    /// `NetworkError` it retries): wait for it; removing the mapping cannot fix a network and would cut the open
    /// handles of everyone using it.
    pub fn is_settling(self) -> bool {
        matches!(
            self,
            Self::Connecting | Self::Reconnecting | Self::NetworkError
        )
    }

    /// Whether the mapping serves no one until it is re-created (`Disconnected`: after a reboot or a credential
    /// change; `Unavailable`): azurefile-csi-driver PR #3416 repairs `Disconnected` ones.
    pub fn is_broken(self) -> bool {
        matches!(self, Self::Disconnected | Self::Unavailable)
    }
}
