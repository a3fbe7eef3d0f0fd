//! Durable ledgers of the host objects this driver created: what Windows cannot say about an object (a global
//! mapping, an iSCSI session has no owner field) is recorded before the object is made, so only wincsi's own are
//! ever removed. One JSON set of keys per ledger file in the state directory, replaced atomically (write, fsync,
//! rename) before [`Ledger::set`] returns.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use tracing::warn;

/// A set of keys (lower-cased share roots, target names) kept in one file.
pub(crate) struct Ledger {
    path: Option<PathBuf>,
    what: &'static str,
    keys: Mutex<BTreeSet<String>>,
}

impl Ledger {
    /// The ledger `file` in `dir` (read now; a missing or unreadable file starts empty, logged), or in memory (no
    /// `dir`). `what` names it in logs. The file goes when the set is empty.
    pub(crate) fn open(dir: Option<&Path>, file: &str, what: &'static str) -> Self {
        let path = dir.map(|d| d.join(file));
        let keys = match &path {
            Some(p) => match std::fs::read(p) {
                Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                    warn!(file = %p.display(), error = %e, "unreadable {what} ledger: starting empty");
                    BTreeSet::new()
                }),
                Err(_) => BTreeSet::new(),
            },
            None => BTreeSet::new(),
        };
        Self {
            path,
            what,
            keys: Mutex::new(keys),
        }
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        self.lock().contains(key)
    }

    /// Every key held (the in-flight ledger lists its entries: `inflight.rs`).
    pub(crate) fn keys(&self) -> Vec<String> {
        self.lock().iter().cloned().collect()
    }

    /// Add or remove `key`, durably (write, fsync, rename) before returning.
    pub(crate) fn set(&self, key: &str, present: bool) -> std::io::Result<()> {
        let mut keys = self.lock();
        let changed = if present {
            keys.insert(key.to_owned())
        } else {
            keys.remove(key)
        };
        if !changed {
            return Ok(());
        }
        self.write(&keys)
    }

    /// Add every key of `keys` not there yet, durably, in one write; the keys added.
    pub(crate) fn adopt(
        &self,
        keys: impl IntoIterator<Item = String>,
    ) -> std::io::Result<Vec<String>> {
        let mut held = self.lock();
        let added: Vec<String> = keys
            .into_iter()
            .filter(|k| held.insert(k.clone()))
            .collect();
        if !added.is_empty() {
            self.write(&held)?;
        }
        Ok(added)
    }

    fn write(&self, keys: &BTreeSet<String>) -> std::io::Result<()> {
        let Some(path) = self.path.as_deref() else {
            return Ok(());
        };
        if keys.is_empty() {
            // Nothing held: no file (a missing file reads as empty), so a node with nothing keeps no record.
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(keys).map_err(std::io::Error::other)?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path).inspect_err(|e| {
            warn!(file = %path.display(), error = %e, "cannot replace the {} ledger", self.what);
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`crate::host::Host::made_by_wincsi`] of the native backend, from its ledgers `[mappings, sessions, joined]`: a
/// mapping not in the mapping ledger, a target whose session wincsi joined, is someone else's (left in place).
pub(super) fn made_by_wincsi(
    [mappings, sessions, joined]: [&Ledger; 3],
    object: crate::host::SharedObject<'_>,
) -> bool {
    use crate::host::SharedObject as O;
    match object {
        O::SmbMapping(root) => super::smb::made_by_wincsi(mappings, root),
        O::IscsiSession(iqn) | O::IscsiSessionJoined(iqn) => {
            super::iscsi::made_by_wincsi(sessions, joined, iqn)
        }
    }
}

/// [`crate::host::Host::claim`] of the native backend: the operation its errors are named after, and the ledger write
/// it runs on the backend's blocking pool.
pub(super) fn claim(
    object: crate::host::SharedObject<'_>,
) -> (
    super::HostOp,
    impl FnOnce(&super::Ops<'_>) -> super::HostResult<()> + Send + 'static,
) {
    use crate::host::SharedObject as O;
    let (op, key, joined_now) = match object {
        O::SmbMapping(root) => (super::HostOp::NewSmbGlobalMapping, root.to_owned(), None),
        O::IscsiSession(iqn) => (super::HostOp::ConnectTarget, iqn.to_owned(), Some(false)),
        O::IscsiSessionJoined(iqn) => (super::HostOp::ConnectTarget, iqn.to_owned(), Some(true)),
    };
    (op, move |o: &super::Ops<'_>| match joined_now {
        None => super::smb::claim(o, &key),
        Some(now) => super::iscsi::claim(o, &key, now),
    })
}
