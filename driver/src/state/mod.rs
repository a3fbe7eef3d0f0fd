//! Durable state records: one JSON file per staged volume and one per published target path, in `--state-dir`
//! (a directory the driver container sees locally; it is not a host path and never goes through the host port).
//!
//! Layout: `<state-dir>/volumes/<sha256(volume_id)>.json` and `<state-dir>/publish/<sha256(lower(target))>.json`.
//! Volume ids may contain any character, so file names are the hex SHA-256 of the id and the id itself is inside the
//! record. Every write is atomic: write a temporary file in the same directory, `fsync` it, rename it over the record,
//! then `fsync` the directory (on Windows: the rename with `MOVEFILE_WRITE_THROUGH` and `FlushFileBuffers` on the
//! directory's handle, `durable_windows.rs`). A reader sees the old or the new record, never a torn one.
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
//! The API is deliberately narrow (get, put, remove and list of each record kind). Secrets are never written: an SMB
//! record keeps the principal *name* only.
//!
//! # Writes: off the runtime, durable before the caller goes on, in groups
//!
//! [`StateStore::put_volume`] (and the other writes and removals) return a [`Commit`]: a future that resolves once
//! the change is durable on disk. The file work — temporary file, `fsync`, rename, directory `fsync` — runs on the
//! store's own committer thread, never on the async runtime's workers (a slow `fsync` on a 2-core node would otherwise
//! stall every other RPC). Writes that arrive while a group is being written form the next group (*group commit*):
//! its temporary files are written and `fsync`ed together (concurrently, so the file system journals them in one
//! transaction), renamed, and each directory is `fsync`ed **once** for the whole group; then every waiter is woken.
//! Several changes of one record in a group write only the last; a write that changes nothing waits for the
//! record's earlier writes instead of writing again.
//!
//! **The write-before-host-object rule holds because a caller awaits its [`Commit`] before its next host call** —
//! or at least before its next call that may create something a retry, rollback or unstage must find: a stage that
//! joins another LUN's iSCSI session lets its claim become durable while it reads the disks, and awaits it before
//! step 6 (`iscsi/stage.rs`). A group that fails (or a crash before its directory `fsync`) never wakes its callers with `Ok`: they fail, and
//! nothing they would have created exists. A change is *visible* to other readers of this process as soon as it is
//! made (so a check and the claim it guards can be one step under a lock, and the lock released before the `fsync`);
//! that is safe because readers of another volume's record only ever act conservatively on it (keep a shared host
//! object, refuse a conflicting request), and a change that fails to become durable is rolled back in the index to
//! what the file says.
//!
//! # Reads: an in-memory index
//!
//! Reads and listings never touch the disk: the store keeps every record in memory, read from the files when the
//! store is opened (driver start) and changed with every write and removal it makes. The files stay the truth:
//! [`StateStore::refresh`] (run by every CSI `Probe`, i.e. kubelet's liveness probe) reads them again, off the
//! runtime, and takes over what someone else changed — a record restored or deleted by hand, a directory wiped.
//!
//! # Quarantine
//!
//! A record file that cannot be read or decoded (a torn disk, a hand edit, a record of a newer format) must not stop
//! the node: listings skip it, and it is *quarantined* — the file stays where it is, an error names it once in the
//! log, and [`StateStore::quarantined`] reports it (Probe logs it; the count is for metrics). Only the volume whose
//! record it is fails (reading it is an error naming the file). Because a quarantined record may describe a user of a
//! shared host object, the protocols count it conservatively: while any volume record is quarantined no shared SMB
//! mapping or iSCSI session is removed (`Context::may_remove_shared`). A quarantined file is found when the store is
//! opened or refreshed, and read again by every later read or listing that meets it (only quarantined files are
//! read again), so fixing or deleting it lifts the quarantine at the next operation.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use crate::error::Error;

mod commit;
// The platform's durable rename and directory flush (cfg'd twins; the only platform code of the store).
#[cfg(unix)]
#[path = "durable_unix.rs"]
mod durable;
#[cfg(windows)]
#[path = "durable_windows.rs"]
mod durable;
mod index;
mod node_files;
#[cfg(test)]
mod tests;

use commit::{Change, Committer, Job, Op};
use index::{FileSlot, Index, Kind, Shared, Slot, read_file};
pub use node_files::{remove_file_durably, write_file_durably};

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
pub trait Details: Serialize + DeserializeOwned + Send + Sync + 'static {
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
    /// The facts decoded, once, for the store's scans ([`VolumeRecord::cached_details`]).
    #[serde(skip)]
    decoded: DecodedDetails,
}

/// [`VolumeRecord::details`] decoded once. Not part of the record's value: a clone starts empty (it may be given
/// other facts), and it never makes two records unequal.
#[derive(Default)]
struct DecodedDetails(std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>);

impl Clone for DecodedDetails {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for DecodedDetails {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for DecodedDetails {}

impl std::fmt::Debug for DecodedDetails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DecodedDetails")
    }
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
            decoded: DecodedDetails::default(),
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
        T::deserialize(&self.details).map(Some).map_err(|e| {
            Error::Internal(format!(
                "state store: corrupt {} record of volume {:?}: {e}",
                self.protocol, self.volume_id
            ))
        })
    }

    /// [`Self::details`] without decoding them again: the first call decodes and keeps them. Only for records that
    /// no longer change — the store's own, behind its `Arc`s — which its scans visit on every stage and unstage
    /// (decoding every record on every visit made a stage of N volumes at once cost O(N) decodes each).
    pub(crate) fn cached_details<T: Details>(&self) -> Result<Option<&T>, Error> {
        if !self.is::<T>() {
            return Ok(None);
        }
        if let Some(t) = self.decoded.0.get().and_then(|any| any.downcast_ref::<T>()) {
            return Ok(Some(t));
        }
        let Some(decoded) = self.details::<T>()? else {
            return Ok(None);
        };
        let _ = self.decoded.0.set(Box::new(decoded));
        match self.decoded.0.get().and_then(|any| any.downcast_ref::<T>()) {
            Some(t) => Ok(Some(t)),
            None => Err(Error::Internal(format!(
                "state store: two detail types claim protocol {:?}",
                T::PROTOCOL
            ))),
        }
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

/// Hex SHA-256 of `text`: a file name safe for any volume id.
pub fn file_key(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A change to the store on its way to disk: resolves to `Ok` once it is durable (see "Writes" in the module docs),
/// to an error naming the file when it cannot be made durable. Dropping it does not cancel the change.
#[must_use = "a change is durable only once its Commit has resolved; await it before the host object it describes"]
#[derive(Debug)]
pub struct Commit {
    state: CommitState,
    /// When the caller first waited (the `wincsi_state_commit_wait_seconds` metric: what it cost the caller, which
    /// is less than queued → durable when it awaited the change later).
    waiting_since: Option<std::time::Instant>,
}

#[derive(Debug)]
enum CommitState {
    Done(Option<Result<(), Error>>),
    Waiting(oneshot::Receiver<Result<(), String>>),
}

impl Commit {
    fn done(result: Result<(), Error>) -> Self {
        Self {
            state: CommitState::Done(Some(result)),
            waiting_since: None,
        }
    }

    fn waiting(rx: oneshot::Receiver<Result<(), String>>) -> Self {
        Self {
            state: CommitState::Waiting(rx),
            waiting_since: None,
        }
    }
}

impl Future for Commit {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match &mut this.state {
            CommitState::Done(result) => Poll::Ready(result.take().unwrap_or_else(|| Ok(()))),
            CommitState::Waiting(rx) => {
                let since = *this
                    .waiting_since
                    .get_or_insert_with(std::time::Instant::now);
                let answer = std::task::ready!(Pin::new(rx).poll(cx));
                if let Some(m) = crate::metrics::installed() {
                    m.observe_state_wait(since.elapsed().as_secs_f64());
                }
                Poll::Ready(match answer {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(Error::Internal(format!("state store: {e}"))),
                    Err(_) => Err(Error::Internal(
                        "state store: the committer stopped before the change was durable"
                            .to_owned(),
                    )),
                })
            }
        }
    }
}

/// The record store in `--state-dir`.
#[derive(Debug)]
pub struct StateStore {
    shared: Arc<Shared>,
    committer: Committer,
}

fn quarantined_error(path: &Path, reason: &str) -> Error {
    Error::Internal(format!(
        "state store: record {} is quarantined ({reason}); fix or remove the file (see the README, \"State \
         directory\")",
        path.display()
    ))
}

impl StateStore {
    /// Open the store under `dir`: remove temporary files a crash left behind, read every record into the index
    /// (quarantining the ones that cannot be used) and start the committer thread. Directories are created by the
    /// first write, so a driver that never stages a volume leaves no trace. Blocking (it reads the directory): call
    /// it once, at start.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        Self::open_with(dir, commit::Hooks::default())
    }

    /// A store whose every directory `fsync` first calls `hook` (which may stop it, or fail it like a crash, a full
    /// disk or a file system without directory flushes would): for tests of the write-before-host-object rule and of
    /// a refused directory flush (also under Wine, hence `test-util`).
    #[cfg(any(test, feature = "test-util"))]
    pub fn open_with_dir_sync_hook(
        dir: &Path,
        hook: impl Fn(&Path) -> io::Result<()> + Send + Sync + 'static,
    ) -> Result<Self, Error> {
        Self::open_with(
            dir,
            commit::Hooks {
                before_sync_dir: Some(Arc::new(hook)),
            },
        )
    }

    fn open_with(dir: &Path, hooks: commit::Hooks) -> Result<Self, Error> {
        let shared = Arc::new(Shared {
            volumes: dir.join("volumes"),
            publish: dir.join("publish"),
            index: Mutex::default(),
        });
        for kind in [Kind::Volume, Kind::Publish] {
            commit::remove_temporaries(shared.dir(kind))?;
            let files = commit::scan(kind, shared.dir(kind))
                .map_err(|e| io_err("list", shared.dir(kind), e))?;
            let mut ix = shared.index();
            for (key, slot) in files {
                shared.apply(&mut ix, kind, &key, Some(slot));
            }
        }
        let committer = Committer::new(Arc::clone(&shared), hooks);
        Ok(Self { shared, committer })
    }

    /// Make a change visible in the index and queue it for the committer, in one step (the queue's order is the
    /// index's order). When the index already holds exactly `after`, nothing is written unless an earlier change of
    /// the record is still in flight or failed.
    fn change(&self, kind: Kind, key: String, op: Op, after: Option<FileSlot>) -> Commit {
        self.committer.count_request();
        let mut ix = self.shared.index();
        let unchanged = match (&after, kind) {
            (Some(FileSlot::Volume(r)), Kind::Volume) => ix
                .volumes
                .get(&key)
                .and_then(Slot::good)
                .is_some_and(|old| **old == **r),
            (Some(FileSlot::Publish(r)), Kind::Publish) => ix
                .publish
                .get(&key)
                .and_then(Slot::good)
                .is_some_and(|old| **old == *r),
            (None, Kind::Volume) => !ix.volumes.contains_key(&key),
            (None, Kind::Publish) => !ix.publish.contains_key(&key),
            _ => false,
        };
        let id = (kind, key);
        if unchanged && ix.pending(kind, &id.1) == 0 && !ix.dirty.contains(&id) {
            return Commit::done(Ok(()));
        }
        let (done, rx) = oneshot::channel();
        self.shared.apply(&mut ix, kind, &id.1, after);
        *ix.pending.entry(id.clone()).or_default() += 1;
        let (kind, key) = id;
        let start = self.committer.push(Job::Change(Change {
            kind,
            key,
            op,
            done,
            queued: std::time::Instant::now(),
        }));
        drop(ix);
        if start {
            self.committer.start();
        }
        Commit::waiting(rx)
    }

    fn put<T: Serialize>(&self, kind: Kind, key: String, after: FileSlot, value: &T) -> Commit {
        match serde_json::to_vec_pretty(value) {
            Ok(bytes) => self.change(kind, key, Op::Put(bytes), Some(after)),
            Err(e) => Commit::done(Err(Error::Internal(format!(
                "state store: cannot encode {}: {e}",
                self.shared.file(kind, &key).display()
            )))),
        }
    }

    fn remove(&self, kind: Kind, key: String) -> Commit {
        self.change(kind, key, Op::Remove, None)
    }

    /// Read a quarantined file again (it may have been fixed or removed by hand) and take over what it says now.
    fn reread(&self, kind: Kind, key: &str) {
        let now = read_file(kind, &self.shared.file(kind, key));
        let mut ix = self.shared.index();
        if is_quarantined(&ix, kind, key) && ix.pending(kind, key) == 0 {
            self.shared.apply(&mut ix, kind, key, now);
        }
    }

    /// Read every quarantined file of `kind` again (nothing is read while none is quarantined).
    fn reread_quarantined(&self, kind: Kind) {
        let quarantined: Vec<String> = {
            let ix = self.shared.index();
            match kind {
                Kind::Volume => bad_keys(&ix.volumes)
                    .into_iter()
                    .chain(ix.undecodable.keys().cloned())
                    .collect(),
                Kind::Publish => bad_keys(&ix.publish),
            }
        };
        for key in quarantined {
            self.reread(kind, &key);
        }
    }

    fn get<T>(
        &self,
        kind: Kind,
        key: &str,
        slots: impl Fn(&Index) -> &HashMap<String, Slot<T>>,
    ) -> Result<Option<Arc<T>>, Error> {
        let lookup = |this: &Self| match slots(&this.shared.index()).get(key) {
            None => Ok(None),
            Some(Slot::Good(r)) => Ok(Some(Arc::clone(r))),
            Some(Slot::Bad(reason)) => Err(reason.clone()),
        };
        match lookup(self) {
            Ok(r) => Ok(r),
            Err(_) => {
                self.reread(kind, key);
                lookup(self)
                    .map_err(|reason| quarantined_error(&self.shared.file(kind, key), &reason))
            }
        }
    }

    /// Quarantine the record of `volume_id` whose protocol facts do not decode (see [`VolumeRecord::details`]); it
    /// leaves the quarantine when the record is rewritten or removed.
    pub fn quarantine_details(&self, volume_id: &str, reason: &str) {
        let key = file_key(volume_id);
        let fresh = self
            .shared
            .index()
            .undecodable
            .insert(key.clone(), reason.to_owned())
            .is_none();
        if fresh {
            tracing::error!(
                file = %self.shared.file(Kind::Volume, &key).display(),
                volume_id,
                reason,
                "state record quarantined: its protocol facts do not decode; it is kept but ignored"
            );
        }
    }

    /// Every quarantined record file, volume records first.
    pub fn quarantined(&self) -> Vec<Quarantined> {
        let ix = self.shared.index();
        let mut out: Vec<Quarantined> = Vec::new();
        let bad = |kind: Kind, key: &str, reason: &str| Quarantined {
            file: self.shared.file(kind, key),
            volume: kind == Kind::Volume,
            reason: reason.to_owned(),
        };
        for (key, slot) in &ix.volumes {
            if let Slot::Bad(reason) = slot {
                out.push(bad(Kind::Volume, key, reason));
            }
        }
        for (key, reason) in &ix.undecodable {
            if !matches!(ix.volumes.get(key), Some(Slot::Bad(_))) {
                out.push(bad(Kind::Volume, key, reason));
            }
        }
        for (key, slot) in &ix.publish {
            if let Slot::Bad(reason) = slot {
                out.push(bad(Kind::Publish, key, reason));
            }
        }
        out.sort_by(|a, b| (!a.volume, &a.file).cmp(&(!b.volume, &b.file)));
        out
    }

    /// How many record files are quarantined (for metrics).
    pub fn quarantined_count(&self) -> usize {
        self.quarantined().len()
    }

    /// How many *volume* records are quarantined: each may be a user of any shared host object.
    pub fn quarantined_volumes(&self) -> usize {
        let ix = self.shared.index();
        let bad = ix
            .volumes
            .values()
            .filter(|s| matches!(s, Slot::Bad(_)))
            .count();
        let undecodable = ix
            .undecodable
            .keys()
            .filter(|k| !matches!(ix.volumes.get(*k), Some(Slot::Bad(_))))
            .count();
        bad + undecodable
    }

    /// Read the record files again, off the runtime, and take over what changed outside the driver (records restored,
    /// fixed, corrupted or removed by hand; see "Reads" in the module docs). Records with a change of this store in
    /// flight keep the store's version.
    pub fn refresh(&self) -> Commit {
        let (done, rx) = oneshot::channel();
        if self.committer.push(Job::Refresh(done)) {
            self.committer.start();
        }
        Commit::waiting(rx)
    }

    /// The store's directory (`--state-dir`), for the few node-local files kept beside the records (the SMB credential
    /// fingerprints' key, `smb/rotate.rs`).
    pub fn dir(&self) -> &Path {
        self.shared
            .volumes
            .parent()
            .unwrap_or(self.shared.volumes.as_path())
    }

    /// The record of `volume_id`, if any (an error naming the file when it is quarantined). Shared with the index, not
    /// copied: every volume RPC reads its record, and a copy (the protocol facts are a JSON map) is a kilobyte per RPC
    /// in flight.
    pub fn volume(&self, volume_id: &str) -> Result<Option<Arc<VolumeRecord>>, Error> {
        self.get(Kind::Volume, &file_key(volume_id), |ix| &ix.volumes)
    }

    /// Write (create or replace) a volume record atomically; durable when the [`Commit`] resolves.
    pub fn put_volume(&self, record: &VolumeRecord) -> Commit {
        self.put_shared_volume(&Arc::new(record.clone()))
    }

    /// [`Self::put_volume`] of a record the caller keeps using: the index shares it instead of holding a copy (a
    /// stage holds its record to the end; with many stages at once the copies add up).
    pub fn put_shared_volume(&self, record: &Arc<VolumeRecord>) -> Commit {
        let key = file_key(&record.volume_id);
        self.shared.index().undecodable.remove(&key);
        self.put(
            Kind::Volume,
            key,
            FileSlot::Volume(Arc::clone(record)),
            &**record,
        )
    }

    /// Delete a volume record (OK if absent); durable when the [`Commit`] resolves.
    pub fn remove_volume(&self, volume_id: &str) -> Commit {
        let key = file_key(volume_id);
        self.shared.index().undecodable.remove(&key);
        self.remove(Kind::Volume, key)
    }

    /// Every usable volume record (see "Quarantine" for the others).
    pub fn volumes(&self) -> Result<Vec<VolumeRecord>, Error> {
        self.select_volumes(|_| true)
    }

    /// The usable volume records for which `wanted` holds (a listing that copies only what it returns).
    pub fn select_volumes(
        &self,
        mut wanted: impl FnMut(&VolumeRecord) -> bool,
    ) -> Result<Vec<VolumeRecord>, Error> {
        let mut out: Vec<VolumeRecord> =
            self.scan_volumes(|good| good.filter(|r| wanted(r)).map(|r| (*r).clone()).collect());
        out.sort_by(|a, b| a.volume_id.cmp(&b.volume_id));
        Ok(out)
    }

    /// The usable volume record with the smallest volume id for which `wanted` holds: a scan that copies nothing but
    /// its answer (the checks a stage makes against every other record stay cheap with many volumes).
    pub fn first_volume(
        &self,
        mut wanted: impl FnMut(&VolumeRecord) -> bool,
    ) -> Result<Option<VolumeRecord>, Error> {
        Ok(self.scan_volumes(|good| {
            good.filter(|r| wanted(r))
                .min_by(|a, b| a.volume_id.cmp(&b.volume_id))
                .cloned()
        }))
    }

    /// How many usable volume records `wanted` holds for: a scan that copies nothing (the reference counts of shared
    /// host objects are taken under their locks, with many volumes at once).
    pub fn count_volumes(
        &self,
        mut wanted: impl FnMut(&VolumeRecord) -> bool,
    ) -> Result<usize, Error> {
        Ok(self.scan_volumes(|good| good.filter(|r| wanted(r)).count()))
    }

    /// `f` over the usable volume records in the index (after re-reading quarantined ones), without copying them.
    fn scan_volumes<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = &VolumeRecord>) -> R) -> R {
        self.reread_quarantined(Kind::Volume);
        let ix = self.shared.index();
        f(&mut ix.volumes.values().filter_map(Slot::good).map(|r| &**r))
    }

    /// The publish record of a target, by the target's key (`HostPath::key`).
    pub fn publication(&self, target_key: &str) -> Result<Option<PublishRecord>, Error> {
        Ok(self
            .get(Kind::Publish, &file_key(target_key), |ix| &ix.publish)?
            .map(|r| (*r).clone()))
    }

    /// Write a publish record atomically under the target's key (`HostPath::key`); durable when the [`Commit`]
    /// resolves.
    pub fn put_publication(&self, target_key: &str, record: &PublishRecord) -> Commit {
        let key = file_key(target_key);
        self.put(
            Kind::Publish,
            key,
            FileSlot::Publish(record.clone()),
            record,
        )
    }

    /// Delete a publish record (OK if absent); durable when the [`Commit`] resolves.
    pub fn remove_publication(&self, target_key: &str) -> Commit {
        self.remove(Kind::Publish, file_key(target_key))
    }

    /// Every usable publish record (see "Quarantine" for the others).
    pub fn publications(&self) -> Result<Vec<PublishRecord>, Error> {
        self.select_publications(|_| true)
    }

    /// The usable publish records for which `wanted` holds.
    pub fn select_publications(
        &self,
        mut wanted: impl FnMut(&PublishRecord) -> bool,
    ) -> Result<Vec<PublishRecord>, Error> {
        self.reread_quarantined(Kind::Publish);
        let ix = self.shared.index();
        let mut out: Vec<PublishRecord> = ix
            .publish
            .values()
            .filter_map(Slot::good)
            .filter(|r| wanted(r))
            .map(|r| (**r).clone())
            .collect();
        out.sort_by(|a, b| a.target_path.cmp(&b.target_path));
        Ok(out)
    }

    /// What the committer has done so far (for tests and diagnostics).
    pub fn commit_stats(&self) -> CommitStats {
        self.committer.stats()
    }
}

/// Whether the index holds the record `key` of `kind` as quarantined (unreadable, or its protocol facts undecodable).
fn is_quarantined(ix: &Index, kind: Kind, key: &str) -> bool {
    match kind {
        Kind::Volume => {
            matches!(ix.volumes.get(key), Some(Slot::Bad(_))) || ix.undecodable.contains_key(key)
        }
        Kind::Publish => matches!(ix.publish.get(key), Some(Slot::Bad(_))),
    }
}

fn bad_keys<T>(slots: &HashMap<String, Slot<T>>) -> Vec<String> {
    slots
        .iter()
        .filter(|(_, s)| matches!(s, Slot::Bad(_)))
        .map(|(k, _)| k.clone())
        .collect()
}

fn io_err(what: &str, path: &Path, err: io::Error) -> Error {
    Error::Internal(format!(
        "state store: cannot {what} {}: {err}",
        path.display()
    ))
}

pub use commit::CommitStats;
