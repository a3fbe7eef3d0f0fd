//! Durable record files on Windows (NTFS: the node's state directory). Its Unix twin is `durable_unix.rs`.
//!
//! NTFS logs every metadata change (a rename, a new or deleted directory entry) in its journal before applying it, so
//! a crash leaves a volume whose metadata is consistent — but the log itself reaches the disk lazily, so a change
//! the call returned from can still be lost to a power cut ("NTFS Recoverability", Windows 2000 Server Resource Kit:
//! recovery restores *consistency*, not the last changes). The store therefore asks for each step to be on the disk:
//! the temporary file is `FlushFileBuffers`ed before the rename (the committer, `File::sync_all`), the rename asks
//! for write-through (`MoveFileExW` with `MOVEFILE_WRITE_THROUGH`: "does not return until the file is actually
//! moved on the disk"), and each changed directory is flushed through a handle opened for writing with
//! `FILE_FLAG_BACKUP_SEMANTICS` (`FlushFileBuffers` commits the handle's pending metadata and flushes the device's
//! cache). The Win32 calls and their sources are in `winhost::win32::durable`; what only a real NTFS volume can
//! confirm is in docs/real-node-checks.md.

use std::io;
use std::path::Path;

use winhost::win32::durable;

/// Rename `tmp` over `path` (same directory), replacing it, with write-through.
pub(super) fn replace(tmp: &Path, path: &Path) -> io::Result<()> {
    durable::replace_write_through(tmp, path)
}

/// Flush `dir`'s metadata through a directory handle opened for writing. A directory that cannot be opened or
/// flushed is an error: the changes in it are not known to be durable (the committer asks [`flush_refused`] whether
/// the platform cannot flush it there at all).
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    durable::flush_directory(dir)
}

/// Whether `e`, from [`sync_dir`], says this directory cannot be flushed where it lives (a file system or filter that
/// does not take a directory flush, or refuses the handle it needs), rather than that this flush failed: the store
/// then relies on the write-through rename (`winhost::win32::durable::directory_flush_refused` has the codes and
/// their sources).
pub(super) fn flush_refused(e: &io::Error) -> bool {
    durable::directory_flush_refused(e)
}
