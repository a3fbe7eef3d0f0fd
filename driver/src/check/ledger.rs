//! The ledger: every host object a run creates, written to a local file *before* the object is created, so a run
//! that is interrupted (Ctrl-C, a crash, a reboot between phases) can still remove exactly what it made — and
//! nothing else — with `--phase cleanup` or the next phase.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::{Host, HostErrorKind, HostPath, KubeletRoot, Portal, UncPath};
use crate::locks::Deadline;

/// The ledger file's format version.
pub const LEDGER_VERSION: u32 = 1;

/// One created object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Created {
    /// The scratch folder (removed last, with everything in it, once no mount point or mapping is left).
    ScratchRoot {
        /// Host path.
        path: String,
    },
    /// A link or directory removed with a non-forced Rmdir (a link is removed, never its target).
    Link {
        /// Host path.
        path: String,
    },
    /// A directory made on the SMB share through the link (removed through the link, before it).
    ShareDir {
        /// Host path (through the link).
        path: String,
    },
    /// An SMB global mapping of a share root.
    SmbMapping {
        /// `\\server\share`.
        remote: String,
    },
    /// An iSCSI login.
    IscsiLogin {
        /// The portal.
        portal: Portal,
        /// The IQN.
        iqn: String,
    },
    /// A volume mounted in the scratch folder.
    Mount {
        /// The volume id.
        volume_id: String,
        /// The mount point (host path).
        path: String,
    },
    /// A LUN this run initialised and formatted: cannot be undone through the host port.
    Formatted {
        /// Disk number at the time.
        disk: u32,
        /// Its page 83 identifier.
        page83: String,
        /// Its volume id.
        volume_id: String,
    },
    /// A target portal added (csi-proxy cannot tell whether it existed before, so it is never removed).
    Portal {
        /// The portal.
        portal: Portal,
    },
}

impl Created {
    /// One line for reports.
    pub fn describe(&self) -> String {
        match self {
            Created::ScratchRoot { path } => format!("scratch folder {path}"),
            Created::Link { path } => format!("link or directory {path}"),
            Created::ShareDir { path } => format!("directory on the share {path}"),
            Created::SmbMapping { remote } => format!("SMB global mapping {remote}"),
            Created::IscsiLogin { portal, iqn } => format!("iSCSI login {iqn} at {portal}"),
            Created::Mount { volume_id, path } => format!("mount of {volume_id} at {path}"),
            Created::Formatted {
                disk,
                page83,
                volume_id,
            } => format!("NTFS volume {volume_id} on disk {disk} (page83 {page83})"),
            Created::Portal { portal } => format!("iSCSI target portal {portal}"),
        }
    }
}

/// One ledger entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The object.
    pub object: Created,
    /// Kept for the after-reboot phase.
    pub keep_for_reboot: bool,
}

/// The ledger (in creation order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// [`LEDGER_VERSION`].
    pub version: u32,
    /// The scratch folder of the run that wrote it.
    pub scratch: String,
    /// Whether a before-reboot phase left fixtures for after-reboot.
    pub awaiting_reboot: bool,
    /// What was created.
    pub entries: Vec<Entry>,
}

/// A ledger and the file it lives in.
#[derive(Debug)]
pub struct LedgerFile {
    path: PathBuf,
    /// The ledger.
    pub ledger: Ledger,
}

impl LedgerFile {
    /// Load the ledger at `path`; `None` when there is none.
    pub fn load(path: &Path) -> Result<Option<LedgerFile>, String> {
        match std::fs::read(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading the ledger {}: {e}", path.display())),
            Ok(bytes) => {
                let ledger: Ledger = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("the ledger {} is not valid: {e}", path.display()))?;
                if ledger.version != LEDGER_VERSION {
                    return Err(format!(
                        "the ledger {} has version {}, this tool writes {LEDGER_VERSION}",
                        path.display(),
                        ledger.version
                    ));
                }
                Ok(Some(LedgerFile {
                    path: path.to_owned(),
                    ledger,
                }))
            }
        }
    }

    /// A new, empty ledger for `scratch` (not yet written).
    pub fn new(path: &Path, scratch: &HostPath) -> LedgerFile {
        LedgerFile {
            path: path.to_owned(),
            ledger: Ledger {
                version: LEDGER_VERSION,
                scratch: scratch.as_str().to_owned(),
                awaiting_reboot: false,
                entries: Vec::new(),
            },
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write the ledger atomically (temporary file, then rename); an empty ledger removes the file.
    pub fn save(&self) -> Result<(), String> {
        if self.ledger.entries.is_empty() {
            return match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(format!("removing the ledger {}: {e}", self.path.display()))
                }
                _ => Ok(()),
            };
        }
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let json = serde_json::to_vec_pretty(&self.ledger).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, json).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path)
            .map_err(|e| format!("writing the ledger {}: {e}", self.path.display()))
    }

    /// Record an object before creating it.
    pub fn record(&mut self, object: Created, keep_for_reboot: bool) -> Result<(), String> {
        if !self.ledger.entries.iter().any(|e| e.object == object) {
            self.ledger.entries.push(Entry {
                object,
                keep_for_reboot,
            });
        }
        self.save()
    }
}

/// What one cleanup pass did.
#[derive(Clone, Debug, Default)]
pub struct CleanupResult {
    /// Removed objects.
    pub removed: Vec<String>,
    /// Left objects, with the reason.
    pub left: Vec<(String, String)>,
    /// Whether every object that was to go is gone.
    pub complete: bool,
}

fn gone_or<T>(r: Result<T, crate::host::HostError>) -> Result<(), String> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.kind == HostErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Remove every object of the ledger (newest first) except those kept for the reboot when `keep_reboot_fixtures`;
/// removed entries leave the ledger, which is saved after each one.
pub async fn clean<H: Host>(
    host: &H,
    file: &mut LedgerFile,
    root: &KubeletRoot,
    keep_reboot_fixtures: bool,
    timeout: std::time::Duration,
) -> CleanupResult {
    let mut result = CleanupResult {
        complete: true,
        ..CleanupResult::default()
    };
    let path = |p: &str| root.host_path(p).map_err(|e| e.to_string());
    let mut blocked_scratch = false;
    let entries: Vec<Entry> = file.ledger.entries.iter().rev().cloned().collect();
    for entry in entries {
        let what = entry.object.describe();
        let keep = keep_reboot_fixtures && entry.keep_for_reboot;
        let d = || Deadline::after(timeout);
        let outcome: Result<(), String> = if keep {
            result
                .left
                .push((what.clone(), "kept for --phase after-reboot".to_owned()));
            if matches!(
                entry.object,
                Created::Mount { .. } | Created::Link { .. } | Created::SmbMapping { .. }
            ) {
                blocked_scratch = true;
            }
            continue;
        } else {
            match &entry.object {
                Created::ScratchRoot { path: p } if blocked_scratch => {
                    result.left.push((
                        what.clone(),
                        format!("kept: {p} still holds a mount point, a link or a fixture"),
                    ));
                    if !keep_reboot_fixtures {
                        result.complete = false;
                    }
                    continue;
                }
                Created::ScratchRoot { path: p } => match path(p) {
                    Ok(p) => gone_or(host.rmdir(&p, true, d()).await),
                    Err(e) => Err(e),
                },
                Created::Link { path: p } | Created::ShareDir { path: p } => match path(p) {
                    Ok(p) => gone_or(host.rmdir(&p, false, d()).await),
                    Err(e) => Err(e),
                },
                Created::SmbMapping { remote } => match UncPath::parse(remote, "mapping") {
                    Ok(u) => gone_or(host.remove_smb_global_mapping(&u, d()).await),
                    Err(e) => Err(e.to_string()),
                },
                Created::IscsiLogin { portal, iqn } => {
                    gone_or(host.disconnect_target(portal, iqn, d()).await)
                }
                Created::Mount { volume_id, path: p } => match path(p) {
                    Ok(p) => {
                        // Unmount first; if the volume is gone (after a reboot) or nothing is mounted, the mount
                        // point itself is removed by a non-forced Rmdir (a mount point is a link, never followed).
                        let unmounted = host.unmount_volume(volume_id, &p, d()).await;
                        match host.rmdir(&p, false, d()).await {
                            Ok(()) => Ok(()),
                            Err(e) if e.kind == HostErrorKind::NotFound => Ok(()),
                            Err(e) => Err(match unmounted {
                                Ok(()) => e.to_string(),
                                Err(u) => format!("{u}; then {e}"),
                            }),
                        }
                    }
                    Err(e) => Err(e),
                },
                Created::Formatted { .. } => {
                    result.left.push((
                        what.clone(),
                        "the host port has no call to clear a disk: the LUN stays initialised and formatted \
                         (clear it on the target, or with Clear-Disk, before the next run)"
                            .to_owned(),
                    ));
                    file.ledger.entries.retain(|e| e.object != entry.object);
                    let _ = file.save();
                    continue;
                }
                Created::Portal { .. } => {
                    result.left.push((
                        what.clone(),
                        "csi-proxy cannot tell whether the portal existed before, so it is never removed (remove \
                         it with Remove-IscsiTargetPortal if only this check added it)"
                            .to_owned(),
                    ));
                    file.ledger.entries.retain(|e| e.object != entry.object);
                    let _ = file.save();
                    continue;
                }
            }
        };
        match outcome {
            Ok(()) => {
                result.removed.push(what);
                file.ledger.entries.retain(|e| e.object != entry.object);
                if let Err(e) = file.save() {
                    result.left.push(("the ledger file".to_owned(), e));
                    result.complete = false;
                }
            }
            Err(e) => {
                if matches!(
                    entry.object,
                    Created::Mount { .. } | Created::Link { .. } | Created::SmbMapping { .. }
                ) {
                    blocked_scratch = true;
                }
                result.left.push((what, format!("removal failed: {e}")));
                result.complete = false;
            }
        }
    }
    file.ledger.awaiting_reboot = keep_reboot_fixtures && !file.ledger.entries.is_empty();
    if let Err(e) = file.save() {
        result.left.push(("the ledger file".to_owned(), e));
        result.complete = false;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_round_trips_and_vanishes_when_empty() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("sub").join("ledger.json");
        let root = KubeletRoot::new(r"C:\var\lib\kubelet").expect("root");
        let scratch = root.host_path(r"C:\var\lib\kubelet\x").expect("path");
        let mut f = LedgerFile::new(&path, &scratch);
        assert!(LedgerFile::load(&path).expect("load").is_none());
        f.record(
            Created::ScratchRoot {
                path: scratch.to_string(),
            },
            false,
        )
        .expect("record");
        f.record(
            Created::Portal {
                portal: Portal::parse("10.0.0.1", "p").expect("portal"),
            },
            true,
        )
        .expect("record");
        f.record(
            Created::ScratchRoot {
                path: scratch.to_string(),
            },
            false,
        )
        .expect("idempotent");
        let back = LedgerFile::load(&path).expect("load").expect("some");
        assert_eq!(back.ledger, f.ledger);
        assert_eq!(back.ledger.entries.len(), 2);
        f.ledger.entries.clear();
        f.save().expect("save");
        assert!(!path.exists());
        std::fs::write(
            &path,
            r#"{"version":9,"scratch":"","awaiting_reboot":false,"entries":[]}"#,
        )
        .expect("write");
        assert!(
            LedgerFile::load(&path)
                .expect_err("version")
                .contains("version 9")
        );
    }
}
