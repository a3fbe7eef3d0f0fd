//! Where kubelet's own files go: kubelet writes `vol_data.json` (and so creates the parent directories) before it
//! calls NodeStage / NodePublish. On a simulated node that is the simulator's filesystem (its admin interface); on a
//! real node (the external mode, [`crate::external`]) the local filesystem, where `C:\…` is the node's own drive —
//! or, to run the external mode against a simulated host started by a script, a directory standing for `C:\`.

use std::future::Future;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// kubelet's own file operations on the node (Go's `os` package, never csi-proxy calls).
pub trait HostFiles: Sync {
    /// Write `content` to `path` (a Windows path such as `c:\var\lib\kubelet\…\vol_data.json`), creating its
    /// parent directories.
    fn write_file(&self, path: &str, content: &str) -> impl Future<Output = Result<()>> + Send;
    /// `os.Lstat`: `None` (nothing there), `"link"` (a symlink or mount point), `"directory"` or `"file"`.
    fn lstat(&self, path: &str) -> impl Future<Output = Result<Option<String>>> + Send;
    /// `os.MkdirAll`.
    fn mkdir(&self, path: &str) -> impl Future<Output = Result<()>> + Send;
    /// `os.Remove`: a file, an empty directory or a link (never its target).
    fn remove(&self, path: &str) -> impl Future<Output = Result<()>> + Send;
}

impl HostFiles for sim::admin::AdminClient {
    async fn write_file(&self, path: &str, content: &str) -> Result<()> {
        Ok(sim::admin::AdminClient::write_file(self, path, content).await?)
    }
    async fn lstat(&self, path: &str) -> Result<Option<String>> {
        Ok(sim::admin::AdminClient::lstat(self, path).await?)
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        Ok(sim::admin::AdminClient::mkdir(self, path).await?)
    }
    async fn remove(&self, path: &str) -> Result<()> {
        Ok(sim::admin::AdminClient::remove(self, path).await?)
    }
}

/// The local filesystem as the node's `C:` drive: `C:\x` is `<drive_c>\x`, or the path itself on Windows when no
/// directory is given.
#[derive(Clone, Debug, Default)]
pub struct LocalFiles {
    drive_c: Option<PathBuf>,
}

impl LocalFiles {
    /// Paths as given (Windows: the node's own drives).
    pub fn native() -> LocalFiles {
        LocalFiles { drive_c: None }
    }

    /// `C:\` is `dir` (e.g. the simulated host's sandbox `<root>/c`, which looks names up case-insensitively).
    pub fn with_drive_c(dir: impl Into<PathBuf>) -> LocalFiles {
        LocalFiles {
            drive_c: Some(dir.into()),
        }
    }

    /// The local path of a Windows path.
    pub fn local(&self, path: &str) -> Result<PathBuf> {
        let Some(dir) = &self.drive_c else {
            return Ok(PathBuf::from(path));
        };
        let rest = path
            .strip_prefix("c:\\")
            .or_else(|| path.strip_prefix("C:\\"))
            .ok_or_else(|| Error::Check(format!("{path} is not on drive C:")))?;
        Ok(rest
            .split('\\')
            .filter(|c| !c.is_empty())
            .fold(dir.clone(), |p, c| p.join(c)))
    }
}

impl HostFiles for LocalFiles {
    async fn write_file(&self, path: &str, content: &str) -> Result<()> {
        let local = self.local(path)?;
        if let Some(parent) = local.parent() {
            std::fs::create_dir_all(parent)
                .map_err(Error::io(format!("creating {}", parent.display())))?;
        }
        std::fs::write(&local, content).map_err(Error::io(format!("writing {}", local.display())))
    }
    async fn lstat(&self, path: &str) -> Result<Option<String>> {
        let local = self.local(path)?;
        match std::fs::symlink_metadata(&local) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("lstat {}", local.display()))(e)),
            Ok(m) => Ok(Some(local_kind(&m).to_owned())),
        }
    }
    async fn mkdir(&self, path: &str) -> Result<()> {
        let local = self.local(path)?;
        std::fs::create_dir_all(&local).map_err(Error::io(format!("creating {}", local.display())))
    }
    async fn remove(&self, path: &str) -> Result<()> {
        let local = self.local(path)?;
        let m = std::fs::symlink_metadata(&local)
            .map_err(Error::io(format!("lstat {}", local.display())))?;
        // Like Go's os.Remove: a file or link is unlinked, a directory removed only when empty. A Windows directory
        // link is removed with RemoveDirectory, which never touches its target.
        let res = if m.is_dir() || (cfg!(windows) && m.file_type().is_symlink() && local.is_dir()) {
            std::fs::remove_dir(&local)
        } else {
            std::fs::remove_file(&local)
        };
        res.map_err(Error::io(format!("removing {}", local.display())))
    }
}

/// `os.Lstat`'s view: on Windows a mount point or any name-surrogate reparse point is a "link", as Go reports it.
fn local_kind(m: &std::fs::Metadata) -> &'static str {
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        const FILE_ATTRIBUTE_REPARSE_POINT: u32 = 0x400;
        if m.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return "link";
        }
    }
    if m.file_type().is_symlink() {
        "link"
    } else if m.is_dir() {
        "directory"
    } else {
        "file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_c_maps_windows_paths_into_a_directory() {
        let f = LocalFiles::with_drive_c("/tmp/sandbox/c");
        assert_eq!(
            f.local(r"c:\var\lib\kubelet\pods\x\vol_data.json")
                .expect("map"),
            PathBuf::from("/tmp/sandbox/c/var/lib/kubelet/pods/x/vol_data.json")
        );
        assert!(f.local(r"D:\x").is_err());
        assert_eq!(
            LocalFiles::native().local(r"C:\x").expect("as is"),
            PathBuf::from(r"C:\x")
        );
    }
}
