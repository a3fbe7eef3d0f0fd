//! Where kubelet's own files go: kubelet writes `vol_data.json` (and so creates the parent directories) before it
//! calls NodeStage / NodePublish. On a simulated node that is the simulator's filesystem (its admin interface); on a
//! real node (the external mode, [`crate::external`]) the local filesystem, where `C:\…` is the node's own drive —
//! or, to run the external mode against a simulated host started by a script, a directory standing for `C:\`.

use std::future::Future;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// Writes a file at a Windows host path, creating its parent directories, as kubelet does.
pub trait HostFiles: Sync {
    /// Write `content` to `path` (a Windows path such as `c:\var\lib\kubelet\…\vol_data.json`).
    fn write_file(&self, path: &str, content: &str) -> impl Future<Output = Result<()>> + Send;
}

impl HostFiles for sim::admin::AdminClient {
    async fn write_file(&self, path: &str, content: &str) -> Result<()> {
        Ok(sim::admin::AdminClient::write_file(self, path, content).await?)
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
