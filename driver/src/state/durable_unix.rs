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
/// opened or flushed is an error: the changes in it are not known to be durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
