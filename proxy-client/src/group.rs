//! The csi-proxy API groups (and the one version of each) that wincsi talks to.

use std::fmt;

/// One csi-proxy API group at the version wincsi uses.
///
/// Each group is served by csi-proxy on its own named pipe, `\\.\pipe\csi-proxy-<group>-<version>`
/// (or, for the simulated host, on the Unix socket `<dir>/csi-proxy-<group>-<version>.sock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApiGroup {
    /// `disk` v1.
    Disk,
    /// `volume` v1.
    Volume,
    /// `filesystem` v1.
    Filesystem,
    /// `smb` v1.
    Smb,
    /// `iscsi` v1alpha2.
    Iscsi,
    /// `system` v1alpha1.
    System,
}

impl ApiGroup {
    /// All groups, in a fixed order.
    pub const ALL: [ApiGroup; 6] = [
        ApiGroup::Disk,
        ApiGroup::Volume,
        ApiGroup::Filesystem,
        ApiGroup::Smb,
        ApiGroup::Iscsi,
        ApiGroup::System,
    ];

    /// The group's name as it appears in pipe names (`disk`, `volume`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ApiGroup::Disk => "disk",
            ApiGroup::Volume => "volume",
            ApiGroup::Filesystem => "filesystem",
            ApiGroup::Smb => "smb",
            ApiGroup::Iscsi => "iscsi",
            ApiGroup::System => "system",
        }
    }

    /// The API version wincsi uses for this group (`v1`, `v1alpha2`, `v1alpha1`).
    pub const fn version(self) -> &'static str {
        match self {
            ApiGroup::Disk | ApiGroup::Volume | ApiGroup::Filesystem | ApiGroup::Smb => "v1",
            ApiGroup::Iscsi => "v1alpha2",
            ApiGroup::System => "v1alpha1",
        }
    }

    /// The endpoint name csi-proxy serves this group on: `csi-proxy-<group>-<version>`.
    ///
    /// ```
    /// use proxy_client::ApiGroup;
    /// assert_eq!(ApiGroup::Iscsi.endpoint_name(), "csi-proxy-iscsi-v1alpha2");
    /// ```
    pub fn endpoint_name(self) -> String {
        format!("csi-proxy-{}-{}", self.name(), self.version())
    }

    /// The fully qualified gRPC service name, e.g. `v1.Disk` or `v1alpha2.Iscsi`.
    pub const fn service_name(self) -> &'static str {
        match self {
            ApiGroup::Disk => "v1.Disk",
            ApiGroup::Volume => "v1.Volume",
            ApiGroup::Filesystem => "v1.Filesystem",
            ApiGroup::Smb => "v1.Smb",
            ApiGroup::Iscsi => "v1alpha2.Iscsi",
            ApiGroup::System => "v1alpha1.System",
        }
    }

    /// Position in [`ApiGroup::ALL`].
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ApiGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name(), self.version())
    }
}
