//! Durable state records: one JSON file per staged volume and one per published target path, in `--state-dir`
//! (a directory the driver container sees locally; it is not a host path and never goes through the host port).
//!
//! Layout: `<state-dir>/volumes/<sha256(volume_id)>.json` and `<state-dir>/publish/<sha256(lower(target))>.json`.
//! Volume ids may contain any character, so file names are the hex SHA-256 of the id and the id itself is inside the
//! record. Every write is atomic: write a temporary file in the same directory, `fsync` it, rename it over the record,
//! then `fsync` the directory where the platform allows it. A reader sees the old or the new record, never a torn one.
//!
//! **Durable reference count per SMB mapping.** There is no counter to get out of sync: the reference count of a
//! share root is the number of volume records naming that root. Stage writes its record *before* it creates the
//! mapping or the link, and unstage deletes it only *after* it removed the link and (when it was the last user) the
//! mapping. A crash between any two steps therefore leaves a record that over-counts, never one that under-counts:
//! a mapping is never removed while a staged volume uses it, and a retried stage or unstage converges (see
//! `volume.rs` for the step-by-step argument).
//!
//! Secrets are never written: an SMB record keeps the principal *name* only.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Error;

/// The record format version written by this driver.
pub const RECORD_VERSION: u32 = 1;

/// Where a volume is in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Stage has begun (record written first); host objects may or may not exist yet.
    Staging,
    /// Stage completed.
    Staged,
    /// Startup reconciliation found the staging link broken and removed it; the next stage redoes the work.
    NeedsRestage,
}

/// Protocol-specific facts of a staged volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "protocol", rename_all = "snake_case")]
pub enum Protocol {
    /// An SMB share.
    Smb {
        /// The mapping key: `\\server\share`, lower-cased.
        root: String,
        /// The full remote path the staging link points to (root + source path + subDir).
        remote_path: String,
        /// The principal name the mapping was requested with (never the password).
        principal: Option<String>,
    },
    /// An iSCSI LUN (portals, target, LUN, pinned disk identity, volume id; see [`crate::iscsi`]).
    Iscsi(crate::iscsi::IscsiRecord),
}

/// One staged (or being-staged) volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// The CSI volume id, verbatim.
    pub volume_id: String,
    /// The lifecycle phase.
    pub phase: Phase,
    /// The normalised staging path (for an inline ephemeral volume: the driver's private staging path).
    pub staging_path: String,
    /// Whether this is an inline ephemeral volume (staged by publish).
    #[serde(default)]
    pub ephemeral: bool,
    /// What is staged.
    #[serde(flatten)]
    pub protocol: Protocol,
}

impl VolumeRecord {
    /// The SMB mapping key, if this is an SMB volume.
    pub fn smb_root(&self) -> Option<&str> {
        match &self.protocol {
            Protocol::Smb { root, .. } => Some(root),
            Protocol::Iscsi(_) => None,
        }
    }
}

/// One published target path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishRecord {
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// The CSI volume id.
    pub volume_id: String,
    /// The normalised target path.
    pub target_path: String,
    /// The normalised staging path the target links to.
    pub staging_path: String,
    /// Whether the publish was read-only.
    pub readonly: bool,
}

/// The record store in `--state-dir`.
#[derive(Debug)]
pub struct StateStore {
    volumes: PathBuf,
    publish: PathBuf,
    tmp_counter: AtomicU64,
}

/// Hex SHA-256 of `text`: a file name safe for any volume id.
pub fn file_key(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn io_err(what: &str, path: &Path, err: io::Error) -> Error {
    Error::Internal(format!(
        "state store: cannot {what} {}: {err}",
        path.display()
    ))
}

impl StateStore {
    /// Open the store under `dir`, removing temporary files a crash left behind. Directories are created by the
    /// first write, so a driver that never stages a volume leaves no trace.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        let store = Self {
            volumes: dir.join("volumes"),
            publish: dir.join("publish"),
            tmp_counter: AtomicU64::new(0),
        };
        for d in [&store.volumes, &store.publish] {
            let entries = match fs::read_dir(d) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("list", d, e)),
            };
            for entry in entries {
                let path = entry.map_err(|e| io_err("list", d, e))?.path();
                if path.extension().is_some_and(|e| e == "tmp") {
                    fs::remove_file(&path).map_err(|e| io_err("remove", &path, e))?;
                }
            }
        }
        Ok(store)
    }

    fn volume_file(&self, volume_id: &str) -> PathBuf {
        self.volumes.join(format!("{}.json", file_key(volume_id)))
    }

    fn publish_file(&self, target_key: &str) -> PathBuf {
        self.publish.join(format!("{}.json", file_key(target_key)))
    }

    fn write_atomic<T: Serialize>(&self, path: &Path, value: &T) -> Result<(), Error> {
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| {
            Error::Internal(format!(
                "state store: cannot encode {}: {e}",
                path.display()
            ))
        })?;
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("{}-{n}.tmp", std::process::id()));
        let write = || -> io::Result<()> {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("write", path, e));
        }
        sync_dir(path);
        Ok(())
    }

    fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, Error> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Error::Internal(format!(
                    "state store: corrupt record {}: {e}",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("read", path, e)),
        }
    }

    fn remove(path: &Path) -> Result<(), Error> {
        match fs::remove_file(path) {
            Ok(()) => {
                sync_dir(path);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove", path, e)),
        }
    }

    fn list<T: for<'de> Deserialize<'de>>(dir: &Path) -> Result<Vec<T>, Error> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io_err("list", dir, e)),
        };
        for entry in entries {
            let path = entry.map_err(|e| io_err("list", dir, e))?.path();
            if path.extension().is_some_and(|e| e == "json")
                && let Some(record) = Self::read(&path)?
            {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// The record of `volume_id`, if any.
    pub fn volume(&self, volume_id: &str) -> Result<Option<VolumeRecord>, Error> {
        Self::read(&self.volume_file(volume_id))
    }

    /// Write (create or replace) a volume record atomically.
    pub fn put_volume(&self, record: &VolumeRecord) -> Result<(), Error> {
        self.write_atomic(&self.volume_file(&record.volume_id), record)
    }

    /// Delete a volume record (OK if absent).
    pub fn remove_volume(&self, volume_id: &str) -> Result<(), Error> {
        Self::remove(&self.volume_file(volume_id))
    }

    /// Every volume record.
    pub fn volumes(&self) -> Result<Vec<VolumeRecord>, Error> {
        Self::list(&self.volumes)
    }

    /// The volume records referencing SMB mapping `root` (its durable reference count is their number).
    pub fn smb_users(&self, root: &str) -> Result<Vec<VolumeRecord>, Error> {
        Ok(self
            .volumes()?
            .into_iter()
            .filter(|r| r.smb_root() == Some(root))
            .collect())
    }

    /// The publish record of a target (by its lower-cased normalised path).
    pub fn publication(&self, target_key: &str) -> Result<Option<PublishRecord>, Error> {
        Self::read(&self.publish_file(target_key))
    }

    /// Write a publish record atomically.
    pub fn put_publication(&self, record: &PublishRecord) -> Result<(), Error> {
        self.write_atomic(
            &self.publish_file(&record.target_path.to_ascii_lowercase()),
            record,
        )
    }

    /// Delete a publish record (OK if absent).
    pub fn remove_publication(&self, target_key: &str) -> Result<(), Error> {
        Self::remove(&self.publish_file(target_key))
    }

    /// Every publish record.
    pub fn publications(&self) -> Result<Vec<PublishRecord>, Error> {
        Self::list(&self.publish)
    }
}

/// Flush a directory entry change where the platform allows opening a directory (not on Windows, where `rename`
/// with `MOVEFILE_WRITE_THROUGH` semantics is the best available and the open simply fails).
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(d) = fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, root: &str) -> VolumeRecord {
        VolumeRecord {
            version: RECORD_VERSION,
            volume_id: id.to_owned(),
            phase: Phase::Staging,
            staging_path: format!(
                r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{}\globalmount",
                file_key(id)
            ),
            ephemeral: false,
            protocol: Protocol::Smb {
                root: root.to_owned(),
                remote_path: format!(r"{root}\x"),
                principal: Some(r"CORP\bob".into()),
            },
        }
    }

    #[test]
    fn round_trip_any_volume_id_and_count_users() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = StateStore::open(dir.path()).expect("open");
        let ids = [
            "plain",
            "srv/share#sub#uuid",
            "..\\..\\evil",
            "é \u{1f600} :*?",
            "",
        ];
        for id in ids {
            store.put_volume(&record(id, r"\\srv\share")).expect("put");
        }
        store
            .put_volume(&record("other", r"\\srv\other"))
            .expect("put");
        for id in ids {
            assert_eq!(store.volume(id).expect("get").expect("some").volume_id, id);
        }
        assert_eq!(
            store.smb_users(r"\\srv\share").expect("users").len(),
            ids.len()
        );
        store.remove_volume("plain").expect("rm");
        store.remove_volume("plain").expect("rm twice is fine");
        assert_eq!(
            store.smb_users(r"\\srv\share").expect("users").len(),
            ids.len() - 1
        );
        // A fresh store over the same directory sees the same records.
        let again = StateStore::open(dir.path()).expect("reopen");
        assert_eq!(again.volumes().expect("list").len(), ids.len());
        let names: Vec<_> = fs::read_dir(dir.path().join("volumes"))
            .expect("ls")
            .map(|e| e.expect("e").file_name())
            .collect();
        assert!(
            names.iter().all(|n| n.to_string_lossy().len() == 64 + 5),
            "{names:?}"
        );
    }

    #[test]
    fn leftover_temp_files_are_removed_and_json_is_stable() {
        let dir = tempfile::tempdir().expect("tmp");
        fs::create_dir_all(dir.path().join("volumes")).expect("mkdir");
        fs::write(dir.path().join("volumes").join("abc.1-0.tmp"), b"{partial").expect("write");
        let store = StateStore::open(dir.path()).expect("open");
        assert!(store.volumes().expect("list").is_empty());
        let r = record("v", r"\\srv\share");
        store.put_volume(&r).expect("put");
        let text = fs::read_to_string(
            dir.path()
                .join("volumes")
                .join(format!("{}.json", file_key("v"))),
        )
        .expect("read");
        assert!(
            text.contains(r#""protocol": "smb""#) && text.contains(r#""phase": "staging""#),
            "{text}"
        );
        assert!(!text.contains("password"));
        let p = PublishRecord {
            version: RECORD_VERSION,
            volume_id: "v".into(),
            target_path: r"C:\var\lib\kubelet\pods\U\mount".into(),
            staging_path: r.staging_path.clone(),
            readonly: true,
        };
        store.put_publication(&p).expect("put");
        assert_eq!(
            store
                .publication(&p.target_path.to_ascii_lowercase())
                .expect("get"),
            Some(p.clone())
        );
        assert_eq!(store.publications().expect("list"), vec![p.clone()]);
        store
            .remove_publication(&p.target_path.to_ascii_lowercase())
            .expect("rm");
        assert!(store.publications().expect("list").is_empty());
    }

    #[test]
    fn corrupt_record_is_an_error_not_a_silent_skip() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = StateStore::open(dir.path()).expect("open");
        assert!(store.volumes().expect("no directory yet").is_empty());
        fs::create_dir_all(dir.path().join("volumes")).expect("mkdir");
        fs::write(dir.path().join("volumes").join("bad.json"), b"not json").expect("write");
        assert!(matches!(store.volumes(), Err(Error::Internal(m)) if m.contains("corrupt")));
    }
}
