//! What the host port reports: the operation ([`HostOp`], named after the csi-proxy RPC) and a classification of
//! its failure ([`HostErrorKind`]) that every backend maps its own errors to.

use std::fmt;

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
    /// `disk/v1.ListDiskLocations`.
    ListDiskLocations,
    /// `disk/v1.ListDiskIDs`.
    ListDiskIDs,
    /// `disk/v1.Rescan`.
    Rescan,
    /// `disk/v1.PartitionDisk`.
    PartitionDisk,
    /// `disk/v1.GetDiskStats`.
    GetDiskStats,
    /// `disk/v1.SetDiskState`.
    SetDiskState,
    /// `disk/v1.GetDiskState`.
    GetDiskState,
    /// `volume/v1.ListVolumesOnDisk`.
    ListVolumesOnDisk,
    /// `volume/v1.MountVolume`.
    MountVolume,
    /// `volume/v1.UnmountVolume`.
    UnmountVolume,
    /// `volume/v1.IsVolumeFormatted`.
    IsVolumeFormatted,
    /// `volume/v1.FormatVolume`.
    FormatVolume,
    /// `volume/v1.ResizeVolume`.
    ResizeVolume,
    /// `volume/v1.GetVolumeStats`.
    GetVolumeStats,
    /// `volume/v1.GetVolumeIDFromTargetPath`.
    GetVolumeIDFromTargetPath,
    /// `volume/v1.WriteVolumeCache`.
    WriteVolumeCache,
    /// `volume/v1.GetDiskNumberFromVolumeID`.
    GetDiskNumberFromVolumeID,
    /// `iscsi/v1alpha2.AddTargetPortal`.
    AddTargetPortal,
    /// `iscsi/v1alpha2.DiscoverTargetPortal`.
    DiscoverTargetPortal,
    /// `iscsi/v1alpha2.ConnectTarget`.
    ConnectTarget,
    /// `iscsi/v1alpha2.DisconnectTarget`.
    DisconnectTarget,
    /// `iscsi/v1alpha2.GetTargetDisks`.
    GetTargetDisks,
    /// `iscsi/v1alpha2.SetMutualChapSecret`.
    SetMutualChapSecret,
    /// `iscsi/v1alpha2.ListTargetPortals`.
    ListTargetPortals,
    /// Reading a link's stored target (no csi-proxy RPC: a native backend's `FSCTL_GET_REPARSE_POINT`).
    ReadLink,
    /// `iscsi/v1alpha2.RemoveTargetPortal`.
    RemoveTargetPortal,
    /// Asking Windows to rediscover a portal's targets (no csi-proxy RPC: a native backend's
    /// `MSFT_iSCSITargetPortal.Update`, what `Update-IscsiTargetPortal` does).
    RefreshTargetPortal,
    /// Reading a disk's partition table (no csi-proxy RPC: a native backend's `MSFT_Disk` and `MSFT_Partition`).
    DiskLayout,
    /// Listing every iSCSI session on the node (no csi-proxy RPC: a native backend's `MSFT_iSCSISession`).
    ListIscsiSessions,
    /// Reading whether MPIO's Microsoft DSM claims iSCSI disks (no csi-proxy RPC: a native backend's
    /// `MSFT_MSDSMSupportedHW`).
    MultipathClaim,
    /// Listing a target's paths: per session (connection), the portal and its disks (no csi-proxy RPC: a native
    /// backend's `MSFT_iSCSIConnection` and `MSFT_iSCSIConnectionToDisk`).
    TargetPaths,
    /// What a backend knows of its own calls that may still be running on an object (no csi-proxy RPC: a native
    /// backend's ledger of WMI methods in flight, and what the host shows of their outcome).
    InFlight,
    /// The space of the file system a directory is on, as its user sees it (no csi-proxy RPC: a native backend's
    /// `GetDiskFreeSpaceExW`): an SMB volume's usage.
    PathSpace,
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
            Self::ListDiskLocations => "ListDiskLocations",
            Self::ListDiskIDs => "ListDiskIDs",
            Self::Rescan => "Rescan",
            Self::PartitionDisk => "PartitionDisk",
            Self::GetDiskStats => "GetDiskStats",
            Self::SetDiskState => "SetDiskState",
            Self::GetDiskState => "GetDiskState",
            Self::ListVolumesOnDisk => "ListVolumesOnDisk",
            Self::MountVolume => "MountVolume",
            Self::UnmountVolume => "UnmountVolume",
            Self::IsVolumeFormatted => "IsVolumeFormatted",
            Self::FormatVolume => "FormatVolume",
            Self::ResizeVolume => "ResizeVolume",
            Self::GetVolumeStats => "GetVolumeStats",
            Self::GetVolumeIDFromTargetPath => "GetVolumeIDFromTargetPath",
            Self::WriteVolumeCache => "WriteVolumeCache",
            Self::GetDiskNumberFromVolumeID => "GetDiskNumberFromVolumeID",
            Self::AddTargetPortal => "AddTargetPortal",
            Self::DiscoverTargetPortal => "DiscoverTargetPortal",
            Self::ConnectTarget => "ConnectTarget",
            Self::DisconnectTarget => "DisconnectTarget",
            Self::GetTargetDisks => "GetTargetDisks",
            Self::SetMutualChapSecret => "SetMutualChapSecret",
            Self::ListTargetPortals => "ListTargetPortals",
            Self::ReadLink => "ReadLink",
            Self::RemoveTargetPortal => "RemoveTargetPortal",
            Self::RefreshTargetPortal => "RefreshTargetPortal",
            Self::DiskLayout => "DiskLayout",
            Self::ListIscsiSessions => "ListIscsiSessions",
            Self::MultipathClaim => "MultipathClaim",
            Self::TargetPaths => "TargetPaths",
            Self::InFlight => "InFlight",
            Self::PathSpace => "PathSpace",
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
    /// The object the call names does not exist (a path, a mapping, a volume, a target, a session), or nothing is
    /// mounted where the call looked, in any csi-proxy release's wording.
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
    /// The iSCSI target already has a session (PowerShell-era csi-proxy's `ConnectTarget` of a connected target:
    /// "The target has already been logged in via an iSCSI session."). The login the caller wanted exists.
    AlreadyLoggedIn,
    /// PowerShell-era `MountVolume` where a volume is already mounted at the path ("The requested access path is
    /// already in use."): which volume is there must be asked.
    AccessPathInUse,
    /// csi-proxy refused the path (validation).
    InvalidPath,
    /// The backend refused a destructive step because the disk may hold data it cannot see (native: a RAW disk
    /// whose first or last sectors are not blank or cannot be read, or whose partition style is neither RAW, MBR nor
    /// GPT). Nothing was written.
    MayHoldData,
    /// `ListVolumesOnDisk` answered that the disk has no partition at all (PowerShell-era csi-proxy: `Get-Partition`'s
    /// not-found record, told by its untranslated `FullyQualifiedErrorId`; proxy-client kind `NoPartition`). Only
    /// that call reports it; like [`HostErrorKind::NotFound`] it means "no volume", and it is also the one thing
    /// csi-proxy can say of a disk's partition table (`iscsi/judge.rs`).
    NoPartition,
    /// The partition's supported sizes could not be read: Windows' `MSFT_Partition.GetSupportedSize`
    /// (`Get-PartitionSupportedSize`) failed with StorageWMI 4 "Failed", which it does while the Optimize Drives service
    /// (`defragsvc`) is disabled or busy (kubernetes-sigs/aws-ebs-csi-driver#2877; Azure/AgentBaker#3804: its `SizeMin`
    /// needs a call into defrag). Nothing was resized.
    SupportedSizeFailed,
    /// The iSCSI initiator refuses another session: `ISDSC_TOO_MANY_SESSIONS` (0xEFFF001E, "Exceeded max sessions for
    /// this initiator.", iscsierr.h). Nothing was logged in.
    TooManySessions,
    /// The backend did not start the call: an earlier call that may still be running changes the same object (the
    /// native backend's own operation whose caller stopped waiting, or a WMI method an earlier driver process left in
    /// flight: `host/native/inflight.rs`). Nothing was started.
    InFlight,
    /// The backend will not do what the call asks on this node, and did nothing: an SMB client option the node's
    /// Windows build lacks, or a mapping of the share that exists already and is weaker than the options asked
    /// (`host/smb_options.rs`). The message says which and what to do.
    NotSatisfiable,
    /// csi-proxy cannot be reached (pipe missing, service stopped, connection refused).
    Unavailable,
    /// The call did not finish before the deadline.
    DeadlineExceeded,
    /// Anything else.
    Other,
}

impl HostErrorKind {
    /// Whether a failure of this kind leaves the call's outcome open (the deadline passed or csi-proxy did not
    /// answer): the host may have done it, so nothing may be undone on its word; kubelet retries or unstages.
    pub fn is_uncertain(self) -> bool {
        matches!(self, Self::DeadlineExceeded | Self::Unavailable)
    }
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
    /// The host's whole text when `message` is a shortened form of it (diagnostics such as `check-node`, which
    /// must quote the exact text; the driver itself answers and logs `message`). Without secrets, like `message`.
    pub full_text: Option<String>,
}

impl HostError {
    /// Build an error.
    pub fn new(op: HostOp, kind: HostErrorKind, message: impl Into<String>) -> Self {
        Self {
            op,
            kind,
            message: message.into(),
            full_text: None,
        }
    }

    /// Keep the host's whole text beside the shortened `message` (when they differ).
    pub fn with_full_text(mut self, text: impl Into<String>) -> Self {
        let text = text.into();
        if text != self.message {
            self.full_text = Some(text);
        }
        self
    }

    /// The host's whole text (`message` when it was not shortened).
    pub fn text(&self) -> &str {
        self.full_text.as_deref().unwrap_or(&self.message)
    }
}

/// The result of a host call.
pub type HostResult<T> = Result<T, HostError>;
