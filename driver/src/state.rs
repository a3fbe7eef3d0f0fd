//! Durable state records: one JSON file per staged volume and one per published target path, in `--state-dir`
//! (a directory the driver container sees locally; it is not a host path and never goes through the host port).
//!
//! Layout: `<state-dir>/volumes/<sha256(volume_id)>.json` and `<state-dir>/publish/<sha256(lower(target))>.json`.
//! Volume ids may contain any character, so file names are the hex SHA-256 of the id and the id itself is inside the
//! record. Every write is atomic: write a temporary file in the same directory, `fsync` it, rename it over the record,
//! then `fsync` the directory where the platform allows it. A reader sees the old or the new record, never a torn one.
//!
//! The store knows no protocol: a [`VolumeRecord`] holds the lifecycle's fields (id, phase, staging path) plus a
//! protocol tag and the protocol's own facts ([`Details`]: an SMB share root, an iSCSI target and pinned disk
//! identity), flattened into the same JSON object. Protocols read and write their part with
//! [`VolumeRecord::details`] / [`VolumeRecord::new`].
//!
//! **Durable reference counts.** There is no counter to get out of sync: the reference count of a shared host
//! object (an SMB share root, an iSCSI target session) is the number of volume records naming it. Stage writes its
//! record *before* it creates the object, and unstage deletes it only *after* it removed it (when it was the last
//! user). A crash between any two steps therefore leaves a record that over-counts, never one that under-counts: an
//! object is never removed while a staged volume uses it, and a retried stage or unstage converges (see `smb/` and
//! `iscsi/` for the step-by-step arguments).
//!
//! The API is deliberately narrow (get, put, remove and list of each record kind) so a faster implementation (a
//! cache in front of the files) can replace it without touching the lifecycle. Secrets are never written: an SMB
//! record keeps the principal *name* only.
//!
//! **Quarantine.** A record file that cannot be read or decoded (a torn disk, a hand edit, a record of a newer
//! format) must not stop the node: listings skip it, and it is *quarantined* — the file stays where it is, an error
//! names it once in the log, and [`StateStore::quarantined`] reports it (Probe logs it; the count is for metrics).
//! Only the volume whose record it is fails (reading it is an error naming the file). Because a quarantined record
//! may describe a user of a shared host object, the protocols count it conservatively: while any volume record is
//! quarantined no shared SMB mapping or iSCSI session is removed (`Context::may_remove_shared`). Fixing or deleting
//! the file lifts the quarantine at the next listing.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::de::DeserializeOwned;
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

/// What one protocol keeps in a staged volume's record (never a secret). Serialised as JSON fields of the record
/// itself, next to `"protocol": PROTOCOL`.
pub trait Details: Serialize + DeserializeOwned {
    /// The record's protocol tag (`"smb"`, `"iscsi"`).
    const PROTOCOL: &'static str;
}

/// How a volume was staged or published: the parts of its CSI capability the lifecycle compares on a repeated call
/// (a repeated stage or publish with another capability is ALREADY_EXISTS; see `crate::lifecycle`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRecord {
    /// `VolumeCapability.AccessMode.Mode` as its wire value (e.g. 6 = `SINGLE_NODE_SINGLE_WRITER`).
    pub access_mode: i32,
    /// The access type: `"mount"` or `"block"`.
    pub access_type: String,
    /// `MountVolume.fs_type` as the CO sent it (empty when not given).
    #[serde(default)]
    pub fs_type: String,
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
    /// Which protocol staged the volume ([`Details::PROTOCOL`]).
    pub protocol: String,
    /// The capability the volume was staged with (written by the lifecycle once a stage succeeded; absent in
    /// records of earlier versions and of a stage still in progress: then any capability is accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessRecord>,
    /// Whether the record was rebuilt from what the host shows (no record survived): its facts are what the protocol
    /// could prove, and the protocol is conservative with shared host objects it names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
    /// The protocol's facts ([`Details`]), flattened into the record.
    #[serde(flatten)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl VolumeRecord {
    /// A record of `details`' protocol.
    pub fn new<T: Details>(
        volume_id: &str,
        phase: Phase,
        staging_path: &str,
        ephemeral: bool,
        details: &T,
    ) -> Result<Self, Error> {
        Ok(Self {
            version: RECORD_VERSION,
            volume_id: volume_id.to_owned(),
            phase,
            staging_path: staging_path.to_owned(),
            ephemeral,
            protocol: T::PROTOCOL.to_owned(),
            access: None,
            adopted: false,
            details: encode(details)?,
        })
    }

    /// Whether the record belongs to `T`'s protocol.
    pub fn is<T: Details>(&self) -> bool {
        self.protocol == T::PROTOCOL
    }

    /// The protocol facts when the record is `T`'s protocol's (`None` for another protocol's record); a record
    /// that claims the protocol but does not decode is an error, never a silent skip.
    pub fn details<T: Details>(&self) -> Result<Option<T>, Error> {
        if !self.is::<T>() {
            return Ok(None);
        }
        serde_json::from_value(serde_json::Value::Object(self.details.clone()))
            .map(Some)
            .map_err(|e| {
                Error::Internal(format!(
                    "state store: corrupt {} record of volume {:?}: {e}",
                    self.protocol, self.volume_id
                ))
            })
    }

    /// The same record with another phase.
    pub fn with_phase(&self, phase: Phase) -> Self {
        Self {
            phase,
            ..self.clone()
        }
    }

    /// The same record with new protocol facts.
    pub fn with_details<T: Details>(&self, details: &T) -> Result<Self, Error> {
        Ok(Self {
            protocol: T::PROTOCOL.to_owned(),
            details: encode(details)?,
            ..self.clone()
        })
    }
}

fn encode<T: Serialize>(details: &T) -> Result<serde_json::Map<String, serde_json::Value>, Error> {
    match serde_json::to_value(details) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::Internal(
            "state store: protocol details must encode as a JSON object".to_owned(),
        )),
        Err(e) => Err(Error::Internal(format!(
            "state store: cannot encode protocol details: {e}"
        ))),
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
    /// The capability of the publish (absent in records of earlier versions: then any capability is accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessRecord>,
}

/// A record file that cannot be used (see "Quarantine" in the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The record file (kept in place).
    pub file: PathBuf,
    /// Whether it is a volume record (else a publish record).
    pub volume: bool,
    /// Why it cannot be used.
    pub reason: String,
}

/// The record store in `--state-dir`.
#[derive(Debug)]
pub struct StateStore {
    volumes: PathBuf,
    publish: PathBuf,
    tmp_counter: AtomicU64,
    /// Files a listing could not read or decode, by path.
    unreadable: Mutex<BTreeMap<PathBuf, String>>,
    /// Volume records that read but whose protocol facts do not decode, by path.
    undecodable: Mutex<BTreeMap<PathBuf, String>>,
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
            unreadable: Mutex::default(),
            undecodable: Mutex::default(),
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

    /// Read one record: `Ok(None)` when absent, `Err(reason)` when it cannot be read or decoded.
    fn read_raw<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, String> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("corrupt record: {e}")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read it: {e}")),
        }
    }

    /// Read one record; one that cannot be used is quarantined and is an error naming the file.
    fn read<T: for<'de> Deserialize<'de>>(&self, path: &Path) -> Result<Option<T>, Error> {
        Self::read_raw(path).map_err(|reason| {
            self.quarantine(path, &reason);
            Error::Internal(format!(
                "state store: record {} is quarantined ({reason}); fix or remove the file (see the README, \"State \
                 directory\")",
                path.display()
            ))
        })
    }

    fn quarantine(&self, path: &Path, reason: &str) {
        let mut bad = self
            .unreadable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if bad.insert(path.to_path_buf(), reason.to_owned()).is_none() {
            tracing::error!(
                file = %path.display(),
                reason,
                "state record quarantined: it is kept but ignored; volumes that do not use it are unaffected, shared \
                 SMB mappings and iSCSI sessions are not removed while it is quarantined"
            );
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

    /// Every usable record in `dir`; the others are quarantined (and a file that became usable again, or is gone,
    /// leaves the quarantine).
    fn list<T: for<'de> Deserialize<'de>>(&self, dir: &Path) -> Result<Vec<T>, Error> {
        let mut out = Vec::new();
        let mut bad = Vec::new();
        let entries = match fs::read_dir(dir) {
            Ok(entries) => Some(entries),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err("list", dir, e)),
        };
        for entry in entries.into_iter().flatten() {
            let path = entry.map_err(|e| io_err("list", dir, e))?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match Self::read_raw(&path) {
                Ok(Some(record)) => out.push(record),
                Ok(None) => {}
                Err(reason) => bad.push((path, reason)),
            }
        }
        self.unreadable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|p, _| p.parent() != Some(dir) || bad.iter().any(|(b, _)| b == p));
        for (path, reason) in bad {
            self.quarantine(&path, &reason);
        }
        Ok(out)
    }

    /// Quarantine the record of `volume_id` whose protocol facts do not decode (see [`VolumeRecord::details`]); it
    /// leaves the quarantine when the record is rewritten or removed.
    pub fn quarantine_details(&self, volume_id: &str, reason: &str) {
        let path = self.volume_file(volume_id);
        let fresh = self
            .undecodable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.clone(), reason.to_owned())
            .is_none();
        if fresh {
            tracing::error!(
                file = %path.display(),
                volume_id,
                reason,
                "state record quarantined: its protocol facts do not decode; it is kept but ignored"
            );
        }
    }

    /// Every quarantined record file, volume records first.
    pub fn quarantined(&self) -> Vec<Quarantined> {
        let unreadable = self
            .unreadable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let undecodable = self
            .undecodable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out: Vec<Quarantined> = unreadable
            .into_iter()
            .chain(undecodable)
            .map(|(file, reason)| Quarantined {
                volume: file.parent() == Some(self.volumes.as_path()),
                file,
                reason,
            })
            .collect();
        out.sort_by_key(|q| (!q.volume, q.file.clone()));
        out.dedup_by(|a, b| a.file == b.file);
        out
    }

    /// How many record files are quarantined (for metrics).
    pub fn quarantined_count(&self) -> usize {
        self.quarantined().len()
    }

    /// How many *volume* records are quarantined: each may be a user of any shared host object.
    pub fn quarantined_volumes(&self) -> usize {
        self.quarantined().iter().filter(|q| q.volume).count()
    }

    fn lift_details_quarantine(&self, volume_id: &str) {
        let path = self.volume_file(volume_id);
        self.undecodable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&path);
        self.unreadable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&path);
    }

    /// The record of `volume_id`, if any (an error naming the file when it is quarantined).
    pub fn volume(&self, volume_id: &str) -> Result<Option<VolumeRecord>, Error> {
        self.read(&self.volume_file(volume_id))
    }

    /// Write (create or replace) a volume record atomically.
    pub fn put_volume(&self, record: &VolumeRecord) -> Result<(), Error> {
        self.write_atomic(&self.volume_file(&record.volume_id), record)?;
        self.lift_details_quarantine(&record.volume_id);
        Ok(())
    }

    /// Delete a volume record (OK if absent).
    pub fn remove_volume(&self, volume_id: &str) -> Result<(), Error> {
        Self::remove(&self.volume_file(volume_id))?;
        self.lift_details_quarantine(volume_id);
        Ok(())
    }

    /// Every usable volume record (see "Quarantine" for the others).
    pub fn volumes(&self) -> Result<Vec<VolumeRecord>, Error> {
        self.list(&self.volumes)
    }

    /// The publish record of a target, by the target's key (`HostPath::key`).
    pub fn publication(&self, target_key: &str) -> Result<Option<PublishRecord>, Error> {
        self.read(&self.publish_file(target_key))
    }

    /// Write a publish record atomically under the target's key (`HostPath::key`).
    pub fn put_publication(&self, target_key: &str, record: &PublishRecord) -> Result<(), Error> {
        self.write_atomic(&self.publish_file(target_key), record)
    }

    /// Delete a publish record (OK if absent).
    pub fn remove_publication(&self, target_key: &str) -> Result<(), Error> {
        Self::remove(&self.publish_file(target_key))
    }

    /// Every usable publish record (see "Quarantine" for the others).
    pub fn publications(&self) -> Result<Vec<PublishRecord>, Error> {
        self.list(&self.publish)
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

    /// The shape of an SMB record's facts (the store itself knows no protocol).
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Share {
        root: String,
        remote_path: String,
        principal: Option<String>,
    }

    impl Details for Share {
        const PROTOCOL: &'static str = "smb";
    }

    fn record(id: &str, root: &str) -> VolumeRecord {
        let share = Share {
            root: root.to_owned(),
            remote_path: format!(r"{root}\x"),
            principal: Some(r"CORP\bob".into()),
        };
        let staging = format!(
            r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{}\globalmount",
            file_key(id)
        );
        VolumeRecord::new(id, Phase::Staging, &staging, false, &share).expect("record")
    }

    /// The records naming share `root` (its durable reference count is their number).
    fn users(store: &StateStore, root: &str) -> usize {
        store
            .volumes()
            .expect("list")
            .iter()
            .filter(|r| {
                r.details::<Share>()
                    .expect("decode")
                    .is_some_and(|s| s.root == root)
            })
            .count()
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
        assert_eq!(users(&store, r"\\srv\share"), ids.len());
        store.remove_volume("plain").expect("rm");
        store.remove_volume("plain").expect("rm twice is fine");
        assert_eq!(users(&store, r"\\srv\share"), ids.len() - 1);
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
            access: None,
        };
        store
            .put_publication(&p.target_path.to_ascii_lowercase(), &p)
            .expect("put");
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
    fn a_corrupt_record_is_quarantined_not_a_node_wide_failure() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = StateStore::open(dir.path()).expect("open");
        assert!(store.volumes().expect("no directory yet").is_empty());
        store
            .put_volume(&record("good", r"\\srv\share"))
            .expect("put");
        // The record of volume "bad", torn by something outside the driver.
        let bad = dir
            .path()
            .join("volumes")
            .join(format!("{}.json", file_key("bad")));
        fs::write(&bad, b"{\"version\": 1, \"volume_id\": \"ba").expect("write");
        // Listings go on without it; it is reported, and kept.
        let ids: Vec<_> = store
            .volumes()
            .expect("list")
            .into_iter()
            .map(|r| r.volume_id)
            .collect();
        assert_eq!(ids, ["good"]);
        let q = store.quarantined();
        assert_eq!(q.len(), 1, "{q:?}");
        assert!(
            q[0].volume && q[0].file == bad && q[0].reason.contains("corrupt"),
            "{q:?}"
        );
        assert_eq!(
            (store.quarantined_count(), store.quarantined_volumes()),
            (1, 1)
        );
        assert!(bad.exists());
        // Only the volume whose record it is fails, with an error that names the file.
        let err = store.volume("bad").expect_err("its own record");
        assert!(
            matches!(&err, Error::Internal(m) if m.contains("quarantined") && m.contains(&*bad.to_string_lossy())),
            "{err:?}"
        );
        assert!(store.volume("good").expect("read").is_some());
        // A corrupt publish record is quarantined the same way.
        fs::create_dir_all(dir.path().join("publish")).expect("mkdir");
        fs::write(dir.path().join("publish").join("x.json"), b"[]").expect("write");
        assert!(store.publications().expect("list").is_empty());
        assert_eq!(
            (store.quarantined_count(), store.quarantined_volumes()),
            (2, 1)
        );
        // Fixing (or removing) the file lifts the quarantine at the next listing.
        fs::remove_file(&bad).expect("rm");
        store
            .put_volume(&record("bad", r"\\srv\share"))
            .expect("rewrite");
        assert_eq!(store.volumes().expect("list").len(), 2);
        fs::remove_file(dir.path().join("publish").join("x.json")).expect("rm");
        store.publications().expect("list");
        assert!(store.quarantined().is_empty());
        // A record whose protocol facts do not decode is quarantined by whoever decodes it, and lifted on rewrite.
        store.quarantine_details("good", "missing field root");
        assert_eq!(store.quarantined_volumes(), 1);
        store
            .put_volume(&record("good", r"\\srv\share"))
            .expect("rewrite");
        assert_eq!(store.quarantined_volumes(), 0);
    }

    #[test]
    fn access_and_adoption_round_trip_and_stay_out_of_old_layouts() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = StateStore::open(dir.path()).expect("open");
        let mut r = record("v", r"\\srv\share");
        let plain = serde_json::to_value(&r).expect("json");
        assert!(
            plain.get("access").is_none() && plain.get("adopted").is_none(),
            "{plain}"
        );
        r.access = Some(AccessRecord {
            access_mode: 6,
            access_type: "mount".into(),
            fs_type: "ntfs".into(),
        });
        r.adopted = true;
        store.put_volume(&r).expect("put");
        let back = store.volume("v").expect("read").expect("some");
        assert_eq!(back, r);
        assert_eq!(
            back.details::<Share>().expect("details").expect("smb").root,
            r"\\srv\share"
        );
        assert_eq!(back.with_phase(Phase::Staged).access, r.access);
    }

    #[test]
    fn records_keep_their_json_layout() {
        // A record as the driver wrote it before the store stopped knowing protocols (a tagged enum flattened into
        // the record): it must read, and write back, field for field.
        let old = r#"{
  "version": 1,
  "volume_id": "v",
  "phase": "staged",
  "staging_path": "C:\\var\\lib\\kubelet\\x\\globalmount",
  "ephemeral": false,
  "protocol": "smb",
  "root": "\\\\srv\\share",
  "remote_path": "\\\\srv\\share\\x",
  "principal": "CORP\\bob"
}"#;
        let rec: VolumeRecord = serde_json::from_str(old).expect("decode");
        assert_eq!(rec.phase, Phase::Staged);
        assert_eq!(
            rec.details::<Share>().expect("details"),
            Some(Share {
                root: r"\\srv\share".into(),
                remote_path: r"\\srv\share\x".into(),
                principal: Some(r"CORP\bob".into()),
            })
        );
        let again: serde_json::Value = serde_json::to_value(&rec).expect("encode");
        let before: serde_json::Value = serde_json::from_str(old).expect("json");
        assert_eq!(again, before);
        let mut other = rec.clone();
        other.protocol = "iscsi".into();
        assert_eq!(other.details::<Share>().expect("not ours"), None);
        let mut bad = rec;
        bad.details.remove("root");
        assert!(matches!(bad.details::<Share>(), Err(Error::Internal(m)) if m.contains("corrupt")));
    }
}
