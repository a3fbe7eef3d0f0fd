//! Plain data: the WMI objects the facade returns (only the properties the native backend reads), the in-parameters
//! of the methods it calls, and the results of the Win32 calls.
//!
//! Objects carry their WMI object path ([`ObjectPath`], `__PATH`), which instance methods and association queries
//! take. It is opaque: Storage object paths embed a long `ObjectId` with quotes and backslashes and must never be
//! built by hand (reference §1.5); a simulated host makes up its own.

mod files;
mod iscsi;
mod smb;
mod storage;

use std::fmt;

pub use files::{
    AttributeTag, DeviceBytes, FileAttributes, FreeSpace, StorageDeviceNumber, SymlinkFlags,
    VolumeInformation, VolumeNameKind,
};
pub use iscsi::{
    AuthenticationType, ChapCredentials, ConnectTarget, MsftInitiatorPort, MsftIscsiConnection,
    MsftIscsiSession, MsftIscsiTarget, MsftIscsiTargetPortal, NewTargetPortal, RegisterSession,
};
pub use smb::{SmbGlobalMapping, SmbGlobalMappingCreate, SmbTransport};
pub use storage::{
    CreatePartition, DiskAttributes, FormatVolume, GptType, MsftDisk, MsftMsdsmSupportedHw,
    MsftPartition, MsftStorageSetting, MsftVolume, SupportedSize,
};

/// A WMI object path (`__PATH`), as the host gave it. Opaque: pass it back to instance methods and association
/// queries; never parse or build one.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct ObjectPath(String);

impl ObjectPath {
    /// Wraps a path the host (or a simulated host) produced.
    pub fn new(path: impl Into<String>) -> Self {
        Self(path.into())
    }

    /// The path text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ObjectPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectPath({:?})", self.0)
    }
}

impl fmt::Display for ObjectPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The text a redacted secret shows in `Debug` output.
pub(crate) const REDACTED: &str = "<redacted>";

/// `Debug` for an optional secret: whether it is set, never its value.
pub(crate) fn redacted(secret: Option<&str>) -> Option<&'static str> {
    secret.map(|_| REDACTED)
}
