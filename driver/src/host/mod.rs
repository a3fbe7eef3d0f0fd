//! The host port: everything the driver asks of the Windows host, shaped after csi-proxy's primitives.
//!
//! The driver never touches a host path directly; every host operation goes through [`Host`]. Implementations:
//! [`csi_proxy::CsiProxyHost`] (csi-proxy over named pipes, or the simulated host over Unix sockets) and, for tests,
//! [`fake::FakeHost`], a recording fake with scriptable state and failure injection.
//!
//! csi-proxy v1 cannot list or query SMB global mappings. The driver therefore learns a mapping's health from path
//! reachability: [`Host::is_symlink`] is true only when a link *and its target* exist, so a staging link whose UNC
//! target does not resolve means the mapping is down (Disconnected after a reboot, credentials rotated, server gone).
//! Repairing relies on `NewSmbGlobalMapping`'s own reuse-or-recreate logic: it keeps an OK, reachable mapping and
//! removes and re-creates a broken one.

use std::fmt;
use std::future::Future;

use crate::locks::Deadline;
use crate::paths::HostPath;
use crate::smb::{SmbCredential, UncPath};

pub mod csi_proxy;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;

/// The host operations, named after the csi-proxy RPC that implements each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostOp {
    /// `filesystem/v1.PathExists`.
    PathExists,
    /// `filesystem/v1.Mkdir`.
    Mkdir,
    /// `filesystem/v1.Rmdir`.
    Rmdir,
    /// `filesystem/v1.CreateSymlink`.
    CreateSymlink,
    /// `filesystem/v1.IsSymlink`.
    IsSymlink,
    /// `smb/v1.NewSmbGlobalMapping`.
    NewSmbGlobalMapping,
    /// `smb/v1.RemoveSmbGlobalMapping`.
    RemoveSmbGlobalMapping,
}

impl HostOp {
    /// The csi-proxy RPC name.
    pub fn name(self) -> &'static str {
        match self {
            Self::PathExists => "PathExists",
            Self::Mkdir => "Mkdir",
            Self::Rmdir => "Rmdir",
            Self::CreateSymlink => "CreateSymlink",
            Self::IsSymlink => "IsSymlink",
            Self::NewSmbGlobalMapping => "NewSmbGlobalMapping",
            Self::RemoveSmbGlobalMapping => "RemoveSmbGlobalMapping",
        }
    }
}

impl fmt::Display for HostOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong on the host, classified so the driver can decide and answer with the right CSI code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostErrorKind {
    /// The path or mapping does not exist.
    NotFound,
    /// The path already exists (e.g. a link target).
    AlreadyExists,
    /// A directory is not empty (non-forced Rmdir).
    NotEmpty,
    /// Windows error 1219: the server is already connected under another user name.
    MultipleConnections,
    /// Windows error 53: the network path (server) was not found.
    NetworkPathNotFound,
    /// Windows error 67: the network name (share) cannot be found.
    NetworkNameNotFound,
    /// A mapping of the share exists but is not usable and blocks creating a new one (e.g. a Disconnected mapping:
    /// Windows error 85, "The local device name is already in use"). Removing it first fixes it.
    StaleMapping,
    /// Windows error 1326 or 86: the user name or password is incorrect.
    LogonFailure,
    /// Access denied (Windows error 5).
    AccessDenied,
    /// csi-proxy refused the path (validation).
    InvalidPath,
    /// csi-proxy cannot be reached (pipe missing, service stopped, connection refused).
    Unavailable,
    /// The call did not finish before the deadline.
    DeadlineExceeded,
    /// Anything else.
    Other,
}

/// A failed host call: which operation, its classification and an operator-facing message (never a secret).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op} failed: {message}")]
pub struct HostError {
    /// The operation.
    pub op: HostOp,
    /// The classification.
    pub kind: HostErrorKind,
    /// What the host said, without secrets.
    pub message: String,
}

impl HostError {
    /// Build an error.
    pub fn new(op: HostOp, kind: HostErrorKind, message: impl Into<String>) -> Self {
        Self {
            op,
            kind,
            message: message.into(),
        }
    }
}

/// The result of a host call.
pub type HostResult<T> = Result<T, HostError>;

/// Everything the driver asks of the Windows host. Paths are validated [`HostPath`]s (inside the kubelet root);
/// remote paths are validated [`UncPath`]s. Every call carries the RPC's [`Deadline`], which implementations pass on
/// (csi-proxy: the gRPC deadline); the driver also bounds every call by it.
pub trait Host: Send + Sync + 'static {
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

    /// Whether `path` is a link whose target resolves. NotFound when `path` does not exist.
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

    /// Remove the global mapping of `remote`'s share root (NotFound when there is none). Links are not touched.
    fn remove_smb_global_mapping(
        &self,
        remote: &UncPath,
        deadline: Deadline,
    ) -> impl Future<Output = HostResult<()>> + Send;
}
