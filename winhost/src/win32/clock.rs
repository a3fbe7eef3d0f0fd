//! `GetTickCount64` (kernel32), declared here rather than through the `windows` crate's `SystemInformation` feature,
//! which would add a module to everyone's build for one function.
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
