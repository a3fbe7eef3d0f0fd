//! The node's Windows build number: what the native backend checks an SMB mapping option against (the driver's
//! `smb/options.rs`: each option names the first build whose `New-SmbGlobalMapping` has it).
//!
//! * Windows: `RtlGetVersion` (ntdll), whose `OSVERSIONINFOW.dwBuildNumber` is the running system's build
//!   (learn.microsoft.com, `wdm.h`, *RtlGetVersion function*: it "returns version information about the currently
//!   running operating system"; unlike `GetVersionExW`, whose answer depends on the caller's manifest, Microsoft's
//!   *GetVersionExW function* page). A HostProcess container runs on the node's kernel, so it reads the node's build
//!   (real-node check: unverified on a node).
//! * Anything else (tests, a Linux build): unknown (`None`); the simulated host answers its scenario's build.

/// The build number of the Windows this process runs on (26100 for Windows Server 2025), `None` when unknown.
pub fn node_build() -> Option<u32> {
    platform::build()
}

#[cfg(windows)]
mod platform {
    pub(super) fn build() -> Option<u32> {
        crate::win32::build_number()
    }
}

#[cfg(not(windows))]
mod platform {
    pub(super) fn build() -> Option<u32> {
        None
    }
}
