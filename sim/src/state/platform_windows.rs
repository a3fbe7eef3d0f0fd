//! Symlinks on Windows sandboxes (needs the symlink privilege or developer mode).

use std::path::Path;

use super::links::LinkMode;

/// Creates a directory symlink `link` → `target`.
pub(super) fn symlink_dir(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_dir(target, link)
}

/// The sandbox root as an absolute path (the links the sandbox makes are absolute: a relative root would make them
/// relative to the link's own directory, so broken). Not `canonicalize`, whose `\\?\` form the sandbox's path
/// arithmetic does not expect.
pub(super) fn absolute_root(root: &Path) -> std::io::Result<std::path::PathBuf> {
    std::path::absolute(root)
}

/// Probes whether a directory symlink made under `root` really exists afterwards and reads back. Wine 8's
/// `CreateSymbolicLinkW` reports success without creating anything, and a process without the symlink privilege
/// fails outright; both get [`LinkMode::Emulated`].
pub(super) fn link_mode(root: &Path) -> LinkMode {
    let target = root.join(".link-probe-target");
    let link = root.join(".link-probe");
    let _ = std::fs::remove_dir(&link);
    let _ = std::fs::remove_file(&link);
    let works = std::fs::create_dir_all(&target).is_ok()
        && symlink_dir(&target, &link).is_ok()
        && link
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        && std::fs::read_link(&link).is_ok()
        && link.metadata().is_ok_and(|m| m.is_dir());
    // A directory symlink is removed with RemoveDirectory; either call failing just means nothing was made.
    let _ = std::fs::remove_dir(&link);
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_dir(&target);
    if works {
        LinkMode::Native
    } else {
        LinkMode::Emulated
    }
}
