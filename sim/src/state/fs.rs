//! The Filesystem API group and the volume mount points (MountVolume, UnmountVolume, GetVolumeIDFromTargetPath).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::{State, paths};
use crate::error::{Error, Result};

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

    // ---- Filesystem group ----

    /// `PathExists`: validates, then lstat (a dangling link exists).
    pub fn path_exists(&self, path: &str) -> Result<bool> {
        let real = self.validate(path)?;
        Ok(real.symlink_metadata().is_ok())
    }

    /// `Mkdir`: validates, then `os.MkdirAll` (idempotent, creates parents).
    pub fn mkdir(&self, path: &str) -> Result<()> {
        let real = self.validate(path)?;
        if self.layout.links().resolve(&real).is_dir() {
            return Ok(());
        }
        match self.node(&real) {
            Node::Missing => {}
            Node::File => {
                return Err(Error::host(format!(
                    "mkdir {path}: The directory name is invalid."
                )));
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
    /// (idempotent). Links and mount points are removed, never their targets.
    pub fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        let real = self.validate(path)?;
        let node = self.node(&real);
        let res = match (node, force) {
            (Node::Missing, true) => Ok(()),
            (Node::Missing, false) => Err(std::io::Error::from(ErrorKind::NotFound)),
            (Node::Symlink { .. } | Node::MountPoint { .. }, _) => remove_link(&real),
            (Node::File, _) => std::fs::remove_file(&real),
            (Node::Dir, false) => std::fs::remove_dir(&real),
            (Node::Dir, true) => std::fs::remove_dir_all(&real),
        };
        res.map_err(|e| Error::host(format!("remove {path}: {}", win_io_text(&e))))
    }

    /// `CreateSymlink`: validates both paths, then creates a link named `target_path` pointing to `source_path`;
    /// fails if `target_path` exists.
    pub fn create_symlink(&self, source_path: &str, target_path: &str) -> Result<()> {
        let link = self.validate(target_path)?;
        let source = self.validate(source_path)?;
        let fail = |text: &str| Error::host(format!("symlink {source_path} {target_path}: {text}"));
        if link.symlink_metadata().is_ok() {
            return Err(fail("Cannot create a file when that file already exists."));
        }
        if !link.parent().is_some_and(Path::is_dir) {
            return Err(fail("The system cannot find the path specified."));
        }
        self.layout
            .links()
            .create(&source, &link)
            .map_err(|e| fail(win_io_text(&e)))
    }

    /// `IsSymlink`: no validation; error if missing; true only for a link or mount point whose target exists.
    pub fn is_symlink(&self, path: &str) -> Result<bool> {
        let real = self.drive_path(path).map_err(|_| {
            Error::host(format!("CreateFile {path}: The filename, directory name, or volume label syntax is incorrect."))
        })?;
        match self.node(&real) {
            Node::Missing => Err(Error::host(format!(
                "CreateFile {path}: The system cannot find the file specified."
            ))),
            Node::Symlink { target_exists } | Node::MountPoint { target_exists, .. } => {
                Ok(target_exists)
            }
            Node::File | Node::Dir => Ok(false),
        }
    }

    // ---- Volume group: mount points ----

    /// `MountVolume`: `SetVolumeMountPoint`; target must be an existing empty directory; re-mounting the same
    /// volume succeeds, another volume fails.
    pub fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        let fail = |text: &str| {
            Error::host(format!(
                "error mount volume ({volume_id}) to path {target_path}. error: {text}"
            ))
        };
        if volume_id.is_empty() || target_path.is_empty() {
            return Err(fail("The parameter is incorrect."));
        }
        let real = self.drive_path(target_path).map_err(|_| {
            fail("The filename, directory name, or volume label syntax is incorrect.")
        })?;
        let Some((di, pi)) = self.find_volume(volume_id) else {
            return Err(fail("The system cannot find the file specified."));
        };
        let guid = self.disks[di].partitions[pi]
            .volume
            .as_ref()
            .map(|v| v.guid.clone())
            .unwrap_or_default();
        match self.node(&real) {
            Node::Missing => Err(fail("The system cannot find the file specified.")),
            Node::File => Err(fail("The directory name is invalid.")),
            Node::MountPoint { guid: g, .. } if g == guid => Ok(()),
            Node::MountPoint { .. } | Node::Symlink { .. } => {
                Err(fail("The directory is not empty."))
            }
            Node::Dir => {
                let empty = std::fs::read_dir(&real)
                    .map(|mut rd| rd.next().is_none())
                    .unwrap_or(false);
                if !empty {
                    return Err(fail("The directory is not empty."));
                }
                std::fs::remove_dir(&real).map_err(|e| fail(win_io_text(&e)))?;
                self.layout
                    .links()
                    .create(&self.layout.volume_link(&guid), &real)
                    .map_err(|e| fail(win_io_text(&e)))
            }
        }
    }

    /// `UnmountVolume`: flushes the volume (fails if it is not visible), then `DeleteVolumeMountPoint` on the
    /// target (fails if nothing is mounted there; removes whatever volume is mounted). The directory stays.
    pub fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.write_volume_cache(volume_id)?;
        let fail = |text: &str| {
            Error::host(format!(
                "error umount volume ({volume_id}) from path {target_path}. error: {text}"
            ))
        };
        let real = self.drive_path(target_path).map_err(|_| {
            fail("The filename, directory name, or volume label syntax is incorrect.")
        })?;
        match self.node(&real) {
            Node::MountPoint { .. } => {
                remove_link(&real).map_err(|e| fail(win_io_text(&e)))?;
                std::fs::create_dir(&real).map_err(|e| fail(win_io_text(&e)))
            }
            Node::Missing => Err(fail("The system cannot find the file specified.")),
            _ => Err(fail("The file or directory is not a reparse point.")),
        }
    }

    /// `GetVolumeIDFromTargetPath`: the path must be a reparse point. A mount point gives its volume. A symlink also
    /// passes csi-proxy's mounted-folder test (it checks the reparse tag with a bitwise AND), and then the volume
    /// that holds the link's final target is returned: the mounted volume for a link to a mount point, the drive's
    /// volume for a link to a plain directory.
    pub fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        let real = self.drive_path(target_path)?;
        let not_found = |api: &str| {
            Error::host(format!(
                "{api} {target_path}: The system cannot find the file specified."
            ))
        };
        match self.node(&real) {
            Node::Missing => Err(not_found("GetFileAttributes")),
            Node::MountPoint {
                guid,
                target_exists: true,
            } => Ok(format!(r"\\?\Volume{{{guid}}}\")),
            Node::MountPoint {
                target_exists: false,
                ..
            }
            | Node::Symlink {
                target_exists: false,
            } => Err(not_found("GetVolumePathName")),
            Node::Symlink {
                target_exists: true,
            } => self.volume_holding(&real, target_path),
            Node::File | Node::Dir => Err(Error::host("not a mounted folder")),
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
                    .filter(|d| d.volumes_visible())
                    .flat_map(|d| d.partitions.iter())
                    .filter_map(|p| p.volume.as_ref())
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
        let real = self.layout.links().resolve(&real);
        std::fs::read(&real).map_err(|e| Error::host(format!("open {path}: {}", win_io_text(&e))))
    }
}
