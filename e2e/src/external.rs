//! The external mode: kubelet's calls against a driver someone else started — on a real Windows node with the
//! real csi-proxy (or the native backend) and the CSI endpoint on AF_UNIX as kubelet uses it, or against a driver
//! and a simulated host a script started — with no simulator admin interface. kubelet's own files go to the local
//! filesystem ([`LocalFiles`]), and a pod's data is written and read through the publish path there.
//!
//! Configured from the environment (`tests/external.rs` reads it; every variable is named when missing):
//!
//! | Variable | Meaning |
//! | --- | --- |
//! | `WINCSI_E2E_EXTERNAL_ENDPOINT` | the driver's CSI endpoint (`unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock`, `unix:///…`, `tcp://127.0.0.1:P`) |
//! | `WINCSI_E2E_EXTERNAL_DRIVE_C` | optional: a local directory standing for `C:\` (a simulated host's sandbox `<root>/c`) |
//! | `WINCSI_E2E_DRIVER` | the driver name (default `wincsi.csi.io`) |
//! | `WINCSI_E2E_SMB_SOURCE`, `_USERNAME`, `_PASSWORD`, `_DOMAIN` | an SMB share (as in the real-cluster suite) |
//! | `WINCSI_E2E_ISCSI_PORTAL`, `_IQN`, `_LUN`, `_CHAP_USERNAME`, `_CHAP_PASSWORD` | a scratch iSCSI LUN |

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::host_files::LocalFiles;
use crate::kubelet::{CsiConn, Kubelet};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A node whose driver runs outside the test.
#[derive(Debug, Clone)]
pub struct ExternalNode {
    /// kubelet, talking to the driver's endpoint.
    pub kubelet: Kubelet,
    /// Where kubelet's files and the pod's data go.
    pub files: LocalFiles,
    /// The endpoint.
    pub endpoint: String,
}

impl ExternalNode {
    /// From the environment; `Err` names what is missing.
    pub fn from_env() -> Result<ExternalNode> {
        let endpoint = var("WINCSI_E2E_EXTERNAL_ENDPOINT").ok_or_else(|| {
            Error::Check(
                "WINCSI_E2E_EXTERNAL_ENDPOINT is not set: see e2e/README.md (external mode)"
                    .to_owned(),
            )
        })?;
        let driver = var("WINCSI_E2E_DRIVER").unwrap_or_else(|| crate::DRIVER_NAME.to_owned());
        let files = match var("WINCSI_E2E_EXTERNAL_DRIVE_C") {
            Some(dir) => LocalFiles::with_drive_c(dir),
            None => LocalFiles::native(),
        };
        let conn = CsiConn::connect(&endpoint)?;
        Ok(ExternalNode {
            kubelet: Kubelet::new(conn, &driver),
            files,
            endpoint,
        })
    }

    /// The local path of a file in a pod's volume (`publish` is the publish path kubelet used).
    pub fn pod_file(&self, publish: &str, name: &str) -> Result<PathBuf> {
        Ok(self.files.local(publish)?.join(name))
    }

    /// A pod writes `content` to `name` in its volume.
    pub fn pod_write(&self, publish: &str, name: &str, content: &str) -> Result<()> {
        let path = self.pod_file(publish, name)?;
        std::fs::write(&path, content).map_err(Error::io(format!("writing {}", path.display())))
    }

    /// A pod reads `name` from its volume.
    pub fn pod_read(&self, publish: &str, name: &str) -> Result<String> {
        let path = self.pod_file(publish, name)?;
        std::fs::read_to_string(&path).map_err(Error::io(format!("reading {}", path.display())))
    }

    /// Whether anything is left at a host path (a link counts, even dangling).
    pub fn exists(&self, path: &str) -> Result<bool> {
        Ok(std::fs::symlink_metadata(self.files.local(path)?).is_ok())
    }
}
