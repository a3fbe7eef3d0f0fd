//! Symlinks on Unix sandboxes.

use std::path::Path;

use super::links::LinkMode;

/// Creates a symlink `link` → `target` (a directory or not; Unix does not distinguish).
pub(super) fn symlink_dir(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

/// The sandbox root as an absolute path without links (the links the sandbox makes are absolute: a relative root
/// would make them relative to the link's own directory, so broken).
pub(super) fn absolute_root(root: &Path) -> std::io::Result<std::path::PathBuf> {
    std::fs::canonicalize(root)
}

/// Unix always makes real symlinks.
pub(super) fn link_mode(_root: &Path) -> LinkMode {
    LinkMode::Native
}
