//! Symlinks on Unix sandboxes.

use std::path::Path;

use super::links::LinkMode;

/// Creates a symlink `link` → `target` (a directory or not; Unix does not distinguish).
pub(super) fn symlink_dir(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

/// Unix always makes real symlinks.
pub(super) fn link_mode(_root: &Path) -> LinkMode {
    LinkMode::Native
}
