//! The typed per-group clients returned by [`crate::ProxyClient`] and their domain types.
//!
//! These wrap the generated stubs so that callers never handle tonic or prost types.

mod disk;
mod filesystem;
mod iscsi;
mod smb;
mod system;
mod volume;

pub use disk::{DiskClient, DiskIds, DiskLocation};
pub use filesystem::FilesystemClient;
pub use iscsi::{ChapAuth, IscsiClient, Portal};
pub use smb::{SmbClient, SmbCredentials};
pub use system::{ServiceInfo, ServiceStatus, StartType, SystemClient};
pub use volume::VolumeClient;

use crate::Error;

/// Converts a wire `int64` byte count to `u64`.
fn non_negative(method: &'static str, field: &str, value: i64) -> Result<u64, Error> {
    u64::try_from(value).map_err(|_| Error::InvalidResponse {
        method,
        message: format!("{field} is negative ({value})"),
    })
}
