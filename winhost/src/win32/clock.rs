//! `GetTickCount64` (kernel32) and `RtlGetVersion` (ntdll), declared here rather than through the `windows` crate's
//! `SystemInformation` and `Wdk` features, which would add modules to everyone's build for two functions.
#![allow(unsafe_code)]

#[link(name = "kernel32")]
unsafe extern "system" {
    fn GetTickCount64() -> u64;
}

/// Milliseconds since the system was started.
pub(crate) fn tick_count() -> u64 {
    // SAFETY: GetTickCount64 takes no arguments, has no preconditions and cannot fail.
    unsafe { GetTickCount64() }
}

/// `OSVERSIONINFOW` (`winnt.h`): the fields `RtlGetVersion` fills.
#[repr(C)]
struct OsVersionInfoW {
    size: u32,
    major: u32,
    minor: u32,
    build: u32,
    platform: u32,
    csd_version: [u16; 128],
}

#[link(name = "ntdll")]
unsafe extern "system" {
    fn RtlGetVersion(info: *mut OsVersionInfoW) -> i32;
}

/// The running system's build number (`RtlGetVersion`, [`crate::os_build`]); `None` if the call fails.
pub(crate) fn build_number() -> Option<u32> {
    let mut info = OsVersionInfoW {
        size: std::mem::size_of::<OsVersionInfoW>() as u32,
        major: 0,
        minor: 0,
        build: 0,
        platform: 0,
        csd_version: [0; 128],
    };
    // SAFETY: `info` is a writable OSVERSIONINFOW whose size field says so, as RtlGetVersion requires; it writes
    // within that size and returns an NTSTATUS (0: success).
    let status = unsafe { RtlGetVersion(&mut info) };
    (status == 0 && info.build != 0).then_some(info.build)
}
