//! The Filesystem API group and the volume mount points (MountVolume, UnmountVolume, GetVolumeIDFromTargetPath).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::{State, paths};
use crate::error::{Error, Result};
use crate::profile::texts::{self, MountFailure, VolumeIdFailure};
use crate::profile::{Backend, DanglingMountPoint, OnRepeat, is_not_exist, windows_message};

/// Windows text for the common I/O failures, as Go's `syscall.Errno` prints them.
pub(crate) fn win_io_text(e: &std::io::Error) -> &'static str {
    match e.kind() {
        ErrorKind::NotFound => "The system cannot find the file specified.",
        ErrorKind::AlreadyExists => "Cannot create a file when that file already exists.",
        ErrorKind::DirectoryNotEmpty => "The directory is not empty.",
        ErrorKind::NotADirectory => "The directory name is invalid.",
        ErrorKind::PermissionDenied => "Access is denied.",
        _ => "The request could not be performed because of an I/O device error.",
    }
}

/// `os.MkdirAll`'s `ENOTDIR` for `named` (the path itself or the file above it): on Windows `syscall.ENOTDIR` is
/// `ERROR_PATH_NOT_FOUND`.
fn not_a_directory(named: &str) -> Error {
    Error::host(format!("mkdir {named}: {}", windows_message(3)))
}

/// Removes a link (file or directory symlink) without following it.
pub(crate) fn remove_link(p: &Path) -> std::io::Result<()> {
    std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p))
}

/// What a path is, from the host's point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    Missing,
    File,
    Dir,
    /// A symlink (CreateSymlink or SMB local_path link); `target_exists` = whether it resolves.
    Symlink {
        target_exists: bool,
    },
    /// A volume mount point; `guid` = mounted volume, `target_exists` = whether the volume is visible.
    MountPoint {
        guid: String,
        target_exists: bool,
    },
}

impl State {
    fn validate(&self, path: &str) -> Result<PathBuf> {
        paths::validate_path_windows(path, &self.cfg.kubelet_path, &self.cfg.working_dirs)
            .map_err(Error::Host)?;
        self.drive_path(path)
    }

    fn drive_path(&self, path: &str) -> Result<PathBuf> {
        let dp = paths::DrivePath::parse(path).ok_or_else(|| {
            Error::host(format!(
                "The filename, directory name, or volume label syntax is incorrect: {path}"
            ))
        })?;
        Ok(self.real_drive_path(&dp))
    }

    pub(crate) fn node(&self, real: &Path) -> Node {
        let Ok(meta) = real.symlink_metadata() else {
            return Node::Missing;
        };
        let links = self.layout.links();
        if links.is_link(real) {
            let target_exists = links.resolve(real).metadata().is_ok();
            if let Some(t) = links.target(real)
                && let Ok(rest) = t.strip_prefix(self.layout.volumes_dir())
            {
                let guid = rest.to_string_lossy().into_owned();
                return Node::MountPoint {
                    guid,
                    target_exists,
                };
            }
            return Node::Symlink { target_exists };
        }
        if meta.is_dir() { Node::Dir } else { Node::File }
    }

    /// What another process on the node (kubelet) sees with Go's `os.Lstat` at `path`: `None` when nothing is there,
    /// else `"link"` (a symlink or a mount point: a reparse point, `ModeSymlink`/`ModeIrregular` to Go),
    /// `"directory"` or `"file"`. Not a csi-proxy call: no validation beyond the path's syntax, no audit.
    pub fn lstat_kind(&self, path: &str) -> Result<Option<&'static str>> {
        let real = self.drive_path(path)?;
        Ok(match self.node(&real) {
            Node::Missing => None,
            Node::Symlink { .. } | Node::MountPoint { .. } => Some("link"),
            Node::Dir => Some("directory"),
            Node::File => Some("file"),
        })
    }

    // ---- Filesystem group ----

    /// `PathExists`: validates, then lstat (a dangling link exists).
    pub fn path_exists(&self, path: &str) -> Result<bool> {
        let real = self.validate(path)?;
        Ok(real.symlink_metadata().is_ok())
    }

    /// `Mkdir`: validates, then `os.MkdirAll` (idempotent, creates parents). Over a file or below one it fails
    /// with `ENOTDIR` (Windows error 3) naming the file (profile row `mkdir_over_file`). Over a dangling link or
    /// mount point it fails (Go < 1.23 semantics, kubernetes#119401), except that master (Go 1.25, no
    /// `winsymlink=0`) sees a mount point as a directory and succeeds without creating anything.
    pub fn mkdir(&self, path: &str) -> Result<()> {
        let real = self.validate(path)?;
        if self.through_file_link(path) {
            return Err(Error::host(format!(
                "mkdir {path}: {}",
                windows_message(267)
            )));
        }
        if self.layout.links().resolve(&real).is_dir() {
            return Ok(());
        }
        match self.node(&real) {
            Node::Missing => {
                if let Some(file) = self.file_ancestor(path) {
                    return Err(not_a_directory(file));
                }
            }
            Node::File => return Err(not_a_directory(path)),
            Node::MountPoint { .. } if self.profile.mkdir_accepts_dangling_mount_point => {
                return Ok(());
            }
            // A dangling link or mount point: Go's MkdirAll fails on the existing entry (kubernetes#119401).
            _ => {
                return Err(Error::host(format!(
                    "mkdir {path}: Cannot create a file when that file already exists."
                )));
            }
        }
        std::fs::create_dir_all(&real)
            .map_err(|e| Error::host(format!("mkdir {path}: {}", win_io_text(&e))))
    }

    /// `Rmdir`: validates; non-force = `os.Remove` (empty dir, file or link), force = `os.RemoveAll`
    /// (idempotent). Links and mount points are removed, never their targets. A missing path is Windows error 2, or
    /// 3 when its parent is missing too or is a file (profile row `missing_parent_code`).
    pub fn rmdir(&mut self, path: &str, force: bool) -> Result<()> {
        let real = self.validate(path)?;
        let node = self.node(&real);
        let res = match (node, force) {
            (Node::Missing, true) => Ok(()),
            (Node::Missing, false) => {
                return Err(Error::host(format!(
                    "remove {path}: {}",
                    windows_message(self.missing_code(&real))
                )));
            }
            (Node::Symlink { .. } | Node::MountPoint { .. }, _) => remove_link(&real),
            (Node::File, _) => std::fs::remove_file(&real),
            (Node::Dir, false) => std::fs::remove_dir(&real),
            (Node::Dir, true) => std::fs::remove_dir_all(&real),
        };
        res.map_err(|e| Error::host(format!("remove {path}: {}", win_io_text(&e))))?;
        self.file_links.retain(|l| !l.starts_with(&real));
        Ok(())
    }

    /// `CreateSymlink`: validates both paths, then `os.Symlink(source, target)`: a link named `target_path`
    /// pointing to `source_path`; fails if `target_path` exists. Like Go's `os.Symlink`, it is a directory link
    /// only if the source `Stat`s as a directory at that moment; otherwise a *file* link, which cannot be used as
    /// a directory.
    pub fn create_symlink(&mut self, source_path: &str, target_path: &str) -> Result<()> {
        let link = self.validate(target_path)?;
        let source = self.validate(source_path)?;
        let fail = |text: &str| Error::host(format!("symlink {source_path} {target_path}: {text}"));
        if link.symlink_metadata().is_ok() {
            return Err(fail("Cannot create a file when that file already exists."));
        }
        if !link.parent().is_some_and(Path::is_dir) {
            return Err(fail("The system cannot find the path specified."));
        }
        let is_dir = !self.file_links.contains(&source)
            && !self.through_file_link(source_path)
            && self.layout.links().resolve(&source).is_dir();
        self.layout
            .links()
            .create(&source, &link)
            .map_err(|e| fail(win_io_text(&e)))?;
        if is_dir {
            self.file_links.remove(&link);
        } else {
            self.file_links.insert(link);
        }
        Ok(())
    }

    /// Whether the Windows path `win` passes *through* a file link (one of its parents is one): Windows refuses
    /// to use a file link as a directory (ERROR_DIRECTORY, "The directory name is invalid."). Checked on the
    /// Windows components, so it does not depend on how the sandbox represents links.
    pub(crate) fn through_file_link(&self, win: &str) -> bool {
        if self.file_links.is_empty() {
            return false;
        }
        let Some(dp) = paths::DrivePath::parse(win) else {
            return false;
        };
        (1..dp.components.len()).any(|i| {
            let prefix = paths::DrivePath {
                drive: dp.drive,
                components: dp.components[..i].to_vec(),
            };
            self.file_links.contains(&self.real_drive_path(&prefix))
        })
    }

    /// `IsSymlink`: no validation; `Lstat` error if missing (Windows error 2, or 3 below a missing parent or a file;
    /// the call it names depends on the release's Go: profile rows `missing_parent_code`, `lstat_missing_op`); for a
    /// link (or mount point), `Readlink` and `Lstat` of the *immediate* target only: true if it exists, false for
    /// Windows errors 2/3/53, and any other error (an SMB share the node cannot reach:
    /// [`crate::profile::UncErrors`]) is returned as an error.
    pub fn is_symlink(&self, path: &str) -> Result<bool> {
        let op = self.profile.lstat_error_op.name();
        let real = self
            .drive_path(path)
            .map_err(|_| Error::host(format!("{op} {path}: {}", windows_message(123))))?;
        match self.node(&real) {
            Node::Missing => Err(Error::host(format!(
                "{op} {path}: {}",
                windows_message(self.missing_code(&real))
            ))),
            Node::MountPoint { target_exists, .. } => Ok(target_exists),
            Node::Symlink { .. } => self.lstat_link_target(&real),
            Node::File | Node::Dir => Ok(false),
        }
    }

    /// The Windows error for a path that does not exist: 2 when its parent is a directory (through links), else 3
    /// (the parent is missing, or is a file).
    fn missing_code(&self, real: &Path) -> u32 {
        let parent_is_dir = real
            .parent()
            .is_some_and(|p| self.layout.links().resolve(p).is_dir());
        if parent_is_dir { 2 } else { 3 }
    }

    /// The nearest existing ancestor of the Windows path `win` as `os.MkdirAll` finds it walking up (`Stat`, which
    /// follows links), spelled as in `win`, when that ancestor is a file.
    fn file_ancestor<'p>(&self, win: &'p str) -> Option<&'p str> {
        let mut rest = win.trim_end_matches('\\');
        while let Some((parent, _)) = rest.rsplit_once('\\') {
            rest = parent;
            // `C:` is the drive: always a directory.
            if !rest.contains('\\') {
                return None;
            }
            let real = self.drive_path(rest).ok()?;
            match self.node(&real) {
                Node::Missing => continue,
                Node::File => return Some(rest),
                _ => return self.layout.links().resolve(&real).is_file().then_some(rest),
            }
        }
        None
    }

    /// `Lstat` of a link's immediate target (one hop), as `IsSymlink` does after `Readlink`.
    fn lstat_link_target(&self, link: &Path) -> Result<bool> {
        let Some(target) = self.layout.links().target(link) else {
            return Ok(false);
        };
        let unc = self.layout.unc_dir();
        let unc_long = self.layout.unc_long_dir();
        let (rest, long) = if let Ok(r) = target.strip_prefix(&unc) {
            (r.to_path_buf(), false)
        } else if let Ok(r) = target.strip_prefix(&unc_long) {
            (r.to_path_buf(), true)
        } else {
            // A drive path: Lstat sees the entry itself (a dangling link still exists).
            return Ok(target.symlink_metadata().is_ok());
        };
        let parts: Vec<String> = rest
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        let (Some(server), Some(share)) = (parts.first(), parts.get(1)) else {
            return Ok(false);
        };
        if long && !self.behaviour.long_unc_links_resolve {
            // Readlink of a `\??\\\server…` substitute name opens it (GetFinalPathNameByHandle) and fails.
            return Err(Error::host(format!(
                "readlink error: {}",
                windows_message(123)
            )));
        }
        let shown = {
            let mut s = format!(r"\\{server}\{share}\");
            if parts.len() > 2 {
                s.push_str(&parts[2..].join("\\"));
                if !long {
                    s.push('\\');
                }
            }
            s
        };
        match self.unc_access_at(server, share, &parts[2..]) {
            Ok(()) => {
                let mut p = self.layout.share_store(server, share);
                for c in &parts[2..] {
                    p.push(c);
                }
                Ok(p.symlink_metadata().is_ok())
            }
            Err(code) if is_not_exist(code) => Ok(false),
            Err(code) => Err(Error::host(format!(
                "CreateFile {shown}: {}",
                windows_message(code)
            ))),
        }
    }

    // ---- Volume group: mount points ----

    /// `MountVolume`. The server refuses empty arguments first. PowerShell era: `Add-PartitionAccessPath` fails
    /// when the volume is already mounted there ("The requested access path is already in use."); WMI era:
    /// `SetVolumeMountPoint`, and on ERROR_DIR_NOT_EMPTY success if the volume mounted there is the same. The
    /// target must be an existing empty directory.
    pub fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        if volume_id.is_empty() {
            return Err(Error::host("MountVolumeRequest.VolumeId is empty"));
        }
        if target_path.is_empty() {
            return Err(Error::host("MountVolumeRequest.TargetPath is empty"));
        }
        let fail = |why| texts::mount_failed(&self.profile, volume_id, target_path, why);
        let Some((di, pi)) = self.find_rpc_volume(volume_id) else {
            return Err(fail(MountFailure::NoVolume));
        };
        let real = self
            .drive_path(target_path)
            .map_err(|_| fail(MountFailure::Missing))?;
        let guid = self.disks[di].partitions[pi]
            .volume
            .as_ref()
            .map(|v| v.guid.clone())
            .unwrap_or_default();
        let ps = self.profile.backend == Backend::PowerShell;
        match self.node(&real) {
            Node::Missing => Err(fail(MountFailure::Missing)),
            Node::File => Err(fail(MountFailure::NotADirectory)),
            Node::MountPoint { guid: g, .. } if g == guid => {
                match self.profile.mount_volume_again {
                    OnRepeat::NoOp => Ok(()),
                    OnRepeat::Fails => Err(fail(MountFailure::AlreadyMounted)),
                }
            }
            Node::Symlink { .. }
                if !ps
                    && self
                        .volume_holding(&real, target_path)
                        .is_ok_and(|v| v.eq_ignore_ascii_case(volume_id)) =>
            {
                // ERROR_DIR_NOT_EMPTY, then getTarget reads the same volume through the link: success.
                Ok(())
            }
            Node::MountPoint { .. } | Node::Symlink { .. } => Err(fail(MountFailure::OtherMounted)),
            Node::Dir => {
                let empty = std::fs::read_dir(&real)
                    .map(|mut rd| rd.next().is_none())
                    .unwrap_or(false);
                if !empty {
                    return Err(fail(MountFailure::NotEmpty));
                }
                std::fs::remove_dir(&real).map_err(|_| fail(MountFailure::NotEmpty))?;
                self.layout
                    .links()
                    .create(&self.layout.volume_link(&guid), &real)
                    .map_err(|_| fail(MountFailure::Missing))
            }
        }
    }

    /// `UnmountVolume`: the server refuses empty arguments; the volume is flushed first (fails once it is gone),
    /// then PowerShell removes the volume's access path (`The access path is not valid.` if it is not mounted
    /// there) and WMI deletes whatever mount point is at the path (`not a reparse point` otherwise). The
    /// directory stays.
    pub fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        if volume_id.is_empty() {
            return Err(Error::host("volume id empty"));
        }
        if target_path.is_empty() {
            return Err(Error::host("target path empty"));
        }
        self.write_volume_cache(volume_id)?;
        let ps = self.profile.backend == Backend::PowerShell;
        let fail = |missing| texts::unmount_failed(&self.profile, volume_id, target_path, missing);
        let real = self.drive_path(target_path).map_err(|_| fail(true))?;
        let own_guid = self
            .find_rpc_volume(volume_id)
            .and_then(|(di, pi)| self.disks[di].partitions[pi].volume.as_ref())
            .map(|v| v.guid.clone());
        match self.node(&real) {
            Node::MountPoint { guid, .. } if !ps || Some(&guid) == own_guid.as_ref() => {
                remove_link(&real).map_err(|_| fail(false))?;
                std::fs::create_dir(&real).map_err(|_| fail(false))
            }
            Node::Missing => Err(fail(true)),
            _ => Err(fail(false)),
        }
    }

    /// `GetVolumeIDFromTargetPath`. PowerShell era: `(Get-Item).Target`, followed while it does not start with
    /// `Volume`: a mount point answers its volume from the reparse data even when the volume is gone (e.g. after
    /// a reboot), a link is followed to its target. WMI era: the path must be a mounted folder (a symlink passes
    /// the bitwise reparse-tag test) and the volume is read through it; a dangling one fails (chosen,
    /// unverified).
    pub fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        if target_path.is_empty() {
            return Err(Error::host("target path is empty"));
        }
        match self.profile.backend {
            Backend::PowerShell => self.ps_get_target(target_path, target_path, 0),
            Backend::MicrosoftWmi | Backend::GoOleWmi => self.wmi_get_target(target_path),
        }
    }

    fn ps_get_target(&self, mount: &str, path: &str, depth: usize) -> Result<String> {
        let fail = |why| texts::volume_id_failed(&self.profile, mount, path, why);
        let Ok(real) = self.drive_path(path) else {
            return Err(fail(VolumeIdFailure::Missing));
        };
        match self.node(&real) {
            Node::Missing => Err(fail(VolumeIdFailure::Missing)),
            Node::File | Node::Dir => Err(fail(VolumeIdFailure::NotMounted)),
            Node::MountPoint { guid, .. } => Ok(format!(r"\\?\Volume{{{guid}}}\")),
            Node::Symlink { .. } => {
                if depth >= 255 {
                    return Err(Error::host(format!(
                        "maximum recursion reached, cmd: (Get-Item -Path $Env:mountpath).Target, output: {path}, :retry {depth}"
                    )));
                }
                let target = self
                    .layout
                    .links()
                    .target(&real)
                    .and_then(|t| self.layout.to_windows(&t))
                    .unwrap_or_default();
                // `.Target` of a UNC link is `UNC\server\share\…`: a relative path Get-Item cannot find.
                let next = match target.strip_prefix(r"\\?\") {
                    Some(rest) if rest.starts_with(r"\\") => format!("UNC{}", &rest[1..]),
                    _ if target.starts_with(r"\\") => format!("UNC{}", &target[1..]),
                    _ => target,
                };
                self.ps_get_target(mount, &next, depth + 1)
            }
        }
    }

    fn wmi_get_target(&self, target_path: &str) -> Result<String> {
        let fail = |why| texts::volume_id_failed(&self.profile, target_path, target_path, why);
        let real = self
            .drive_path(target_path)
            .map_err(|_| fail(VolumeIdFailure::Missing))?;
        match self.node(&real) {
            Node::Missing => Err(fail(VolumeIdFailure::Missing)),
            Node::File | Node::Dir => Err(fail(VolumeIdFailure::NotMounted)),
            Node::MountPoint {
                guid,
                target_exists: true,
            } => Ok(format!(r"\\?\Volume{{{guid}}}\")),
            Node::MountPoint {
                target_exists: false,
                ..
            } => match self.profile.dangling_mount_point_volume_id {
                DanglingMountPoint::ReadsReparseData => {
                    let Node::MountPoint { guid, .. } = self.node(&real) else {
                        unreachable!()
                    };
                    Ok(format!(r"\\?\Volume{{{guid}}}\"))
                }
                DanglingMountPoint::Fails => Err(fail(VolumeIdFailure::Unresolvable)),
            },
            Node::Symlink {
                target_exists: false,
            } => Err(fail(VolumeIdFailure::Unresolvable)),
            Node::Symlink {
                target_exists: true,
            } => self
                .volume_holding(&real, target_path)
                .map_err(|_| fail(VolumeIdFailure::Unresolvable)),
        }
    }

    /// The volume whose contents hold `real` once every link is resolved.
    fn volume_holding(&self, real: &Path, target_path: &str) -> Result<String> {
        let fail = || {
            Error::host(format!(
                "GetVolumeNameForVolumeMountPoint {target_path}: The parameter is incorrect."
            ))
        };
        let canon = self.layout.links().canonicalize(real).map_err(|_| fail())?;
        let root = std::fs::canonicalize(self.layout.root()).map_err(|_| fail())?;
        let rel = canon.strip_prefix(&root).map_err(|_| fail())?;
        let parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        match parts
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["store", "volumes", guid, ..] => Ok(format!(r"\\?\Volume{{{guid}}}\")),
            [drive, ..] if drive.len() == 1 => {
                let letter = drive.chars().next().map(|c| c.to_ascii_uppercase());
                self.disks
                    .iter()
                    .flat_map(|d| (0..d.partitions.len()).filter_map(|pi| d.visible_volume(pi)))
                    .find(|v| v.drive_letter == letter)
                    .map(|v| v.id())
                    .ok_or_else(fail)
            }
            _ => Err(fail()),
        }
    }

    /// Writes a file through the host's view of the filesystem (follows links and mount points), as a pod would.
    pub fn write_file(&self, path: &str, content: &[u8]) -> Result<()> {
        let real = self
            .real_path(path)
            .ok_or_else(|| Error::host(format!("unsupported path {path}")))?;
        if self.through_file_link(path) {
            return Err(Error::host(format!(
                "open {path}: {}",
                windows_message(267)
            )));
        }
        let real = self.layout.links().resolve(&real);
        if let Some(parent) = real.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::host(format!("open {path}: {}", win_io_text(&e))))?;
        }
        std::fs::write(&real, content)
            .map_err(|e| Error::host(format!("open {path}: {}", win_io_text(&e))))
    }

    /// Reads a file through the host's view of the filesystem.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let real = self
            .real_path(path)
            .ok_or_else(|| Error::host(format!("unsupported path {path}")))?;
        if self.through_file_link(path) {
            return Err(Error::host(format!(
                "open {path}: {}",
                windows_message(267)
            )));
        }
        let real = self.layout.links().resolve(&real);
        std::fs::read(&real).map_err(|e| Error::host(format!("open {path}: {}", win_io_text(&e))))
    }
}
