//! Durable record files on Unix (the simulated host's platform, and Linux test runs): `rename(2)` is atomic, and the
//! directory entry it changed is durable once the directory is `fsync`ed (POSIX `fsync`; Linux `fsync(2)`: "calling
//! fsync() on a file descriptor for the directory is also needed" for the entry). Windows' twin is
//! `durable_windows.rs`.

use std::fs::{self, File};
use std::io;
use std::path::Path;

/// Rename `tmp` over `path` (same directory), replacing it.
pub(super) fn replace(tmp: &Path, path: &Path) -> io::Result<()> {
    fs::rename(tmp, path)
}

/// Make `dir`'s entries (renames, creations, removals) durable: open it and `fsync` it. A directory that cannot be
/// opened or flushed is an error: the changes in it are not known to be durable (the committer asks [`flush_refused`]
/// whether the platform cannot flush it there at all).
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Whether `e`, from [`sync_dir`], says this directory cannot be flushed where it lives rather than that this flush
/// failed: `EINVAL` (Linux `fsync(2)`: the descriptor "does not support synchronization"; some network and FUSE file
/// systems answer it for a directory) and `EBADF` (systems that refuse `fsync` on a descriptor opened read-only, as a
/// directory is) — PostgreSQL's `fsync_fname_ext` (src/backend/storage/file/fd.c) ignores exactly these two for a
/// directory: "Some OSes don't allow us to fsync directories at all".
pub(super) fn flush_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(EINVAL | EBADF))
}

/// `EBADF` and `EINVAL` (the same numbers on Linux, the BSDs and macOS: `errno.h`).
const EBADF: i32 = 9;
const EINVAL: i32 = 22;
