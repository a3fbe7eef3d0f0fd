//! Results and flags of the Win32 file, volume and device calls.

/// `dwFileAttributes` (`GetFileAttributesW`, `FILE_ATTRIBUTE_TAG_INFO.FileAttributes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct FileAttributes(pub u32);

impl FileAttributes {
    /// `FILE_ATTRIBUTE_READONLY`.
    pub const READONLY: u32 = 0x1;
    /// `FILE_ATTRIBUTE_DIRECTORY`.
    pub const DIRECTORY: u32 = 0x10;
    /// `FILE_ATTRIBUTE_REPARSE_POINT`.
    pub const REPARSE_POINT: u32 = 0x400;

    /// Whether the entry is a directory (a directory symlink or mount point is one too).
    pub fn is_directory(self) -> bool {
        self.0 & Self::DIRECTORY != 0
    }

    /// Whether the entry is a reparse point (symlink, junction, mount point, …).
    pub fn is_reparse_point(self) -> bool {
        self.0 & Self::REPARSE_POINT != 0
    }
}

/// `FILE_ATTRIBUTE_TAG_INFO`: attributes plus the exact reparse tag (0 when not a reparse point), read without
/// following the final link (`GetFileInformationByHandleEx(FileAttributeTagInfo)` on a handle opened with
/// `FILE_FLAG_OPEN_REPARSE_POINT`, reference §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct AttributeTag {
    /// The attributes.
    pub attributes: FileAttributes,
    /// The reparse tag; compare with `==` (reference §2.1: csi-proxy's bitwise test mistakes symlinks for mount
    /// points). Constants in [`crate::reparse`].
    pub reparse_tag: u32,
}

/// `CreateSymbolicLinkW` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct SymlinkFlags {
    /// `SYMBOLIC_LINK_FLAG_DIRECTORY` (0x1): always set it for directory links (reference D11).
    pub directory: bool,
    /// `SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE` (0x2): only helps in Developer Mode; older builds reject it with
    /// 87.
    pub allow_unprivileged_create: bool,
}

impl SymlinkFlags {
    /// A directory link.
    pub const DIRECTORY: Self = Self {
        directory: true,
        allow_unprivileged_create: false,
    };

    /// The `dwFlags` value.
    pub fn bits(self) -> u32 {
        u32::from(self.directory) | (u32::from(self.allow_unprivileged_create) << 1)
    }
}

/// The form `GetFinalPathNameByHandleW` answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub enum VolumeNameKind {
    /// `VOLUME_NAME_DOS` (0): `\\?\C:\…`, `\\?\UNC\server\share\…`.
    Dos,
    /// `VOLUME_NAME_GUID` (1): `\\?\Volume{…}\…`.
    Guid,
    /// `VOLUME_NAME_NT` (2): `\Device\HarddiskVolume1\…`.
    Nt,
}

impl VolumeNameKind {
    /// The `dwFlags` value (with `FILE_NAME_NORMALIZED`, which is 0).
    pub fn bits(self) -> u32 {
        match self {
            Self::Dos => 0,
            Self::Guid => 1,
            Self::Nt => 2,
        }
    }
}

/// `GetVolumeInformationW` results.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct VolumeInformation {
    /// The volume label.
    pub label: String,
    /// The volume serial number.
    pub serial_number: u32,
    /// The maximum file name component length.
    pub max_component_length: u32,
    /// The file system flags (`FILE_*` capability bits).
    pub file_system_flags: u32,
    /// The file system name, e.g. `NTFS`.
    pub file_system_name: String,
}

/// `GetDiskFreeSpaceExW` results, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct FreeSpace {
    /// `lpFreeBytesAvailableToCaller` (quota-aware).
    pub available_to_caller: u64,
    /// `lpTotalNumberOfBytes`.
    pub total: u64,
    /// `lpTotalNumberOfFreeBytes`.
    pub free: u64,
}

/// `STORAGE_DEVICE_NUMBER` (`IOCTL_STORAGE_GET_DEVICE_NUMBER`): csi-proxy keys `ListDiskIDs` by `device_number`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct StorageDeviceNumber {
    /// `DeviceType` (`FILE_DEVICE_DISK` is 7).
    pub device_type: u32,
    /// `DeviceNumber`: the disk number.
    pub device_number: u32,
    /// `PartitionNumber` (`u32::MAX` when the device cannot be partitioned).
    pub partition_number: u32,
}

/// What [`crate::facade::Win32Files::read_device`] read from a device: its length and its first and last bytes
/// (`head` is bytes `0..head.len()`, `tail` is bytes `length - tail.len()..length`; they overlap on a device shorter
/// than both). [`crate::signature::examine`] judges them.
#[derive(Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct DeviceBytes {
    /// The device's length in bytes (`IOCTL_DISK_GET_LENGTH_INFO`; a file's size for a file).
    pub length: u64,
    /// The first bytes.
    pub head: Vec<u8>,
    /// The last bytes.
    pub tail: Vec<u8>,
}

impl std::fmt::Debug for DeviceBytes {
    /// Lengths only: the bytes are megabytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBytes")
            .field("length", &self.length)
            .field("head_len", &self.head.len())
            .field("tail_len", &self.tail.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_attributes() {
        assert_eq!(SymlinkFlags::DIRECTORY.bits(), 1);
        assert_eq!(SymlinkFlags::default().bits(), 0);
        let both = SymlinkFlags {
            directory: true,
            allow_unprivileged_create: true,
        };
        assert_eq!(both.bits(), 3);
        let dir_link = FileAttributes(FileAttributes::DIRECTORY | FileAttributes::REPARSE_POINT);
        assert!(dir_link.is_directory() && dir_link.is_reparse_point());
        assert!(!FileAttributes(0x20).is_directory());
        assert_eq!(VolumeNameKind::Guid.bits(), 1);
    }
}
