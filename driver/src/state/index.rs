//! The in-memory index of the record files (see "Reads" in the module docs) and what the store and its committer
//! thread share.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::de::DeserializeOwned;

use super::{PublishRecord, VolumeRecord};

/// The two kinds of record, each in its own directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    Volume,
    Publish,
}

/// What the index holds for one record file.
#[derive(Clone, Debug)]
pub(super) enum Slot<T> {
    /// A usable record.
    Good(Arc<T>),
    /// A quarantined file, and why.
    Bad(String),
}

impl<T> Slot<T> {
    pub(super) fn good(&self) -> Option<&Arc<T>> {
        match self {
            Slot::Good(r) => Some(r),
            Slot::Bad(_) => None,
        }
    }
}

/// The in-memory view of the record files, keyed by file stem (the hex key of a volume id or target).
#[derive(Debug, Default)]
pub(super) struct Index {
    pub(super) volumes: HashMap<String, Slot<VolumeRecord>>,
    pub(super) publish: HashMap<String, Slot<PublishRecord>>,
    /// Volume records that read but whose protocol facts do not decode, by file stem.
    pub(super) undecodable: BTreeMap<String, String>,
    /// Changes made to the index whose commit has not finished yet, per record: a refresh leaves these alone, and a
    /// failed commit rolls a record back to its file only when no later change is in flight.
    pub(super) pending: HashMap<(Kind, String), usize>,
    /// Records whose last commit failed: the file may hold what the index holds without being durable, so the next
    /// write of the same value is made, not skipped.
    pub(super) dirty: HashSet<(Kind, String)>,
}

impl Index {
    pub(super) fn pending(&self, kind: Kind, key: &str) -> usize {
        self.pending
            .get(&(kind, key.to_owned()))
            .copied()
            .unwrap_or(0)
    }
}

/// Where the store's files live and what the committer thread shares with the store.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) volumes: PathBuf,
    pub(super) publish: PathBuf,
    pub(super) index: Mutex<Index>,
}

impl Shared {
    pub(super) fn dir(&self, kind: Kind) -> &Path {
        match kind {
            Kind::Volume => &self.volumes,
            Kind::Publish => &self.publish,
        }
    }

    pub(super) fn file(&self, kind: Kind, key: &str) -> PathBuf {
        self.dir(kind).join(format!("{key}.json"))
    }

    pub(super) fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Set what the index holds for one file from what the file says now (`None`: no file), logging a quarantine
    /// the first time a file enters it.
    pub(super) fn apply(&self, ix: &mut Index, kind: Kind, key: &str, slot: Option<FileSlot>) {
        let path = self.file(kind, key);
        let bad = |reason: &str, before: Option<&str>| {
            if before != Some(reason) {
                tracing::error!(
                    file = %path.display(),
                    reason,
                    "state record quarantined: it is kept but ignored; volumes that do not use it are unaffected, \
                     shared SMB mappings and iSCSI sessions are not removed while it is quarantined"
                );
            }
        };
        match kind {
            Kind::Volume => {
                let before = ix.volumes.get(key);
                let changed = match (&slot, before) {
                    (Some(FileSlot::Volume(new)), Some(Slot::Good(old))) => **old != **new,
                    _ => true,
                };
                if changed {
                    ix.undecodable.remove(key);
                }
                match slot {
                    Some(FileSlot::Volume(r)) => {
                        if changed {
                            ix.volumes.insert(key.to_owned(), Slot::Good(r));
                        }
                    }
                    Some(FileSlot::Bad(reason)) => {
                        let old = match before {
                            Some(Slot::Bad(r)) => Some(r.as_str()),
                            _ => None,
                        };
                        bad(&reason, old);
                        ix.volumes.insert(key.to_owned(), Slot::Bad(reason));
                    }
                    Some(FileSlot::Publish(_)) | None => {
                        ix.volumes.remove(key);
                    }
                }
            }
            Kind::Publish => match slot {
                Some(FileSlot::Publish(r)) => {
                    ix.publish.insert(key.to_owned(), Slot::Good(Arc::new(r)));
                }
                Some(FileSlot::Bad(reason)) => {
                    let old = match ix.publish.get(key) {
                        Some(Slot::Bad(r)) => Some(r.as_str()),
                        _ => None,
                    };
                    bad(&reason, old);
                    ix.publish.insert(key.to_owned(), Slot::Bad(reason));
                }
                Some(FileSlot::Volume(_)) | None => {
                    ix.publish.remove(key);
                }
            },
        }
    }
}

/// One record file as read from disk.
#[derive(Debug)]
pub(super) enum FileSlot {
    Volume(Arc<VolumeRecord>),
    Publish(PublishRecord),
    Bad(String),
}

/// Read one record file: `None` when absent, [`FileSlot::Bad`] when it cannot be read or decoded.
pub(super) fn read_file(kind: Kind, path: &Path) -> Option<FileSlot> {
    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("corrupt record: {e}"))
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => return Some(FileSlot::Bad(format!("cannot read it: {e}"))),
    };
    Some(match kind {
        Kind::Volume => {
            decode(&bytes).map_or_else(FileSlot::Bad, |r| FileSlot::Volume(Arc::new(r)))
        }
        Kind::Publish => decode(&bytes).map_or_else(FileSlot::Bad, FileSlot::Publish),
    })
}
