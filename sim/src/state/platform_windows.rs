//! Symlinks on Windows sandboxes (needs the symlink privilege or developer mode; Wine allows it).

use std::path::Path;

/// Creates a directory symlink `link` → `target`.
pub(super) fn symlink_dir(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_dir(target, link)
}
