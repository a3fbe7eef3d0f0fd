//! The two Win32 file calls that make the driver's state records durable on NTFS (the driver's
//! `state/durable_windows.rs` calls them; nothing of the facade does). They take std paths and answer std I/O errors,
//! since the state store is plain file work and never goes through the facade's pools.
//!
//! - [`replace_write_through`]: `MoveFileExW(MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)`. std's
//!   `fs::rename` renames by handle (`FileRenameInfoEx`) or with `MoveFileExW(MOVEFILE_REPLACE_EXISTING)`, never
//!   asking for write-through. Microsoft documents `MOVEFILE_WRITE_THROUGH` as "the function does not return until
//!   the file is actually moved on the disk" (learn.microsoft.com, `MoveFileExW`, dwFlags). When a reader holds the
//!   record open, `MoveFileExW` refuses to replace it; std's rename (POSIX semantics) does it then, and the renamed
//!   file is flushed.
//! - [`flush_directory`]: `FlushFileBuffers` on a directory handle. A directory handle needs
//!   `FILE_FLAG_BACKUP_SEMANTICS` ("you must set this flag to obtain a handle to a directory": `CreateFileW`,
//!   "Directories"), and `FlushFileBuffers` needs the handle to have `GENERIC_WRITE` (its documentation, `hFile`).
//!   A flush with no flags "commits all pending metadata changes for the given file" and sends the device a cache
//!   flush (`ntifs.h`, `NtFlushBuffersFileEx`: "This is equivalent to how NtFlushBuffersFile has always worked").
//!   Microsoft's FAT driver (Windows-driver-samples `filesys/fastfat/flush.c`, `UserDirectoryOpen`) accepts the
//!   flush of a directory and passes the device flush down; what NTFS commits for a directory handle is not public
//!   (docs/real-node-checks.md).
//! - [`directory_flush_refused`]: the errors that say a directory flush is not available where the directory lives
//!   (as opposed to this flush failing), so the caller relies on the write-through rename instead of failing every
//!   write. `ERROR_INVALID_FUNCTION` (`STATUS_INVALID_DEVICE_REQUEST`) is what a file system or filter that does not
//!   take `IRP_MJ_FLUSH_BUFFERS` for a directory answers (support for that IRP is optional: learn.microsoft.com,
//!   "DispatchFlushBuffers Routines"): measured on an SMB redirector drive, where the same call succeeds on a local
//!   disk (dgraph-io/badger#699: `sync Z:\bd: Incorrect function.`), and the container bind filter answers it for
//!   other calls it does not pass down (moby/moby#38112, `UnlockFileAll` through a container's bind point).
//!   `ERROR_NOT_SUPPORTED` is the generic form of the same answer. `ERROR_ACCESS_DENIED` is what a handle without
//!   write access gets from the flush (microsoft/go#1907, containerd/containerd#12301) and what a filter that maps a
//!   directory read-only, or an ACL without `FILE_WRITE_EA`/`FILE_WRITE_ATTRIBUTES` for the driver, answers the
//!   open for `GENERIC_WRITE`. `NtFlushBuffersFileEx` documents a plain flush (flags 0) for NTFS, ReFS, FAT and
//!   exFAT, and only its `FLUSH_FLAGS_FILE_DATA_SYNC_ONLY` as "not valid with volume or directory handles"; whether
//!   ReFS and the bind filter of HostProcess containers (bindflt) take it is unverified (docs/real-node-checks.md).
//!   Every other error (a sharing violation while a backup agent holds the directory, a failing disk) fails the
//!   write as before.
#![allow(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::fs::OpenOptions;
use std::io;
use std::os::windows::fs::OpenOptionsExt as _;
use std::path::Path;

use windows::Win32::Storage::FileSystem::{
    FILE_FLAG_BACKUP_SEMANTICS, MOVEFILE_REPLACE_EXISTING, MOVEFILE_WRITE_THROUGH, MoveFileExW,
};
use windows::core::HSTRING;

use crate::codes::{HResult, Win32Error};

/// `ERROR_ACCESS_DENIED`, as `io::Error::raw_os_error` carries it.
const ACCESS_DENIED: i32 = Win32Error::AccessDenied.code() as i32;

/// Rename `from` over `to` (same volume), replacing it, and return only once the move is on the disk.
///
/// `MoveFileExW` refuses to replace a file another handle has open, even one opened with `FILE_SHARE_DELETE`
/// (`ERROR_ACCESS_DENIED`: a reader of the record, a backup agent, a scanner). Then std's `fs::rename` does the
/// rename (it retries that refusal by handle with POSIX semantics — `FileRenameInfoEx`, Windows 10 1709+ on NTFS —
/// so the readers keep the old file and new opens see the new one), and the renamed file is flushed
/// (`FlushFileBuffers` commits its pending metadata; the caller flushes the directory as after any rename).
///
/// # Errors
/// Windows' error, as its Win32 code where it has one.
pub fn replace_write_through(from: &Path, to: &Path) -> io::Result<()> {
    let (wide_from, wide_to) = (HSTRING::from(from), HSTRING::from(to));
    // SAFETY: both arguments are NUL-terminated UTF-16 strings owned by this frame for the whole call; the flags are
    // documented values.
    let moved = unsafe {
        MoveFileExW(
            &wide_from,
            &wide_to,
            MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH,
        )
    };
    match moved.map_err(|e| io_error(&e)) {
        Err(e) if e.raw_os_error() == Some(ACCESS_DENIED) => {
            std::fs::rename(from, to)?;
            OpenOptions::new().write(true).open(to)?.sync_all()
        }
        other => other,
    }
}

/// Open the directory `dir` for writing (`GENERIC_WRITE`, `FILE_FLAG_BACKUP_SEMANTICS`, sharing everything) and
/// `FlushFileBuffers` it (std's `File::sync_all` is that call).
///
/// # Errors
/// The open's or the flush's error: a directory that cannot be flushed is not reported flushed.
pub fn flush_directory(dir: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS.0)
        .open(dir)?
        .sync_all()
}

/// Whether `e`, from [`flush_directory`], says the directory cannot be flushed where it lives (the file system or a
/// filter does not take the flush, or refuses the handle it needs): `ERROR_INVALID_FUNCTION`, `ERROR_NOT_SUPPORTED`,
/// `ERROR_ACCESS_DENIED` (sources in the module docs). Anything else is a failure of this flush.
pub fn directory_flush_refused(e: &io::Error) -> bool {
    [
        Win32Error::InvalidFunction,
        Win32Error::NotSupported,
        Win32Error::AccessDenied,
    ]
    .iter()
    .any(|w| i64::from(w.code()) == e.raw_os_error().map_or(-1, i64::from))
}

/// A `windows` crate error as an I/O error carrying the Win32 code (so `io::Error::kind` means what it says).
fn io_error(e: &windows::core::Error) -> io::Error {
    match HResult::from_i32(e.code().0).win32() {
        // A Win32 code inside an HRESULT has 16 bits.
        Some(w) => io::Error::from_raw_os_error(i32::try_from(w.code()).unwrap_or(i32::MAX)),
        None => io::Error::other(e.message()),
    }
}
