//! The committer: what writes the record files, in groups, off the async runtime (see "Writes" in the module docs).
//!
//! A group is every change queued while the previous group was being written (at most [`MAX_GROUP`]). Its steps:
//! create and write a temporary file per record written; `fsync` them (concurrently when there are several, so the
//! file system commits them in one journal transaction); rename each over its record (on Windows with write-through)
//! and delete the removed records; `fsync` each directory that changed once (on Windows `FlushFileBuffers` on a
//! directory handle: the platform calls are the twins `durable_unix.rs` / `durable_windows.rs`); then wake every
//! waiter with its record's outcome. A directory whose flush fails fails the group: no waiter is told its change is
//! durable when it may not be. A directory that cannot be flushed where it lives — the file system or a filter does
//! not take a directory flush, or refuses the handle it needs (`durable::flush_refused`: on Windows
//! `ERROR_INVALID_FUNCTION`, `ERROR_NOT_SUPPORTED`, `ERROR_ACCESS_DENIED`) — would fail every write for good; there
//! the store relies on what the platform still gives (on Windows each record's rename is write-through), warns once
//! and counts each such flush ([`CommitStats::dir_syncs_refused`], `wincsi_state_dir_flush_refused_total`). A record
//! changed several times in one group is written once, with its last value.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::oneshot;

use super::{FileSlot, Kind, Shared, durable, io_err, read_file};
use crate::error::Error;

/// The most changes one group takes (a bound on the temporary files open at once).
const MAX_GROUP: usize = 512;

/// The most threads that `fsync` a group's files at once (the committer itself is one of them). A file system without
/// a journal to batch concurrent `fsync`s in (ext4 without one, NTFS's `FlushFileBuffers`) makes each a synchronous
/// write, so a group of many records finishes only as fast as the device takes them in parallel: with 256 volumes
/// staged at once on the bench's disk, 32 threads instead of 8 cut the wait for durable records per volume from 193 to
/// 70 ms (SMB) and 202 to 122 ms (iSCSI). Each thread has a 64 KiB stack and lives for one group; threads are started
/// only once flushing in turn proved slow ([`SERIAL_SYNC_BUDGET`]), so a file system with a cheap `fsync` pays for
/// none.
const SYNC_THREADS: usize = 32;

/// What a change does to its record file.
#[derive(Debug)]
pub(super) enum Op {
    /// Write these bytes as the record.
    Put(Vec<u8>),
    /// Delete the record (done when it is absent).
    Remove,
}

/// One change on its way to disk.
#[derive(Debug)]
pub(super) struct Change {
    pub(super) kind: Kind,
    pub(super) key: String,
    pub(super) op: Op,
    /// Woken with the outcome once the change is durable (or failed).
    pub(super) done: oneshot::Sender<Result<(), String>>,
    /// When it was queued (the time its caller waits is measured from here).
    pub(super) queued: Instant,
}

/// Work for the committer, in queue order.
#[derive(Debug)]
pub(super) enum Job {
    /// A record change.
    Change(Change),
    /// Read the files again ([`super::StateStore::refresh`]).
    Refresh(oneshot::Sender<Result<(), String>>),
}

/// Called before a directory `fsync` with the directory; an error counts as the `fsync` failing.
pub(super) type DirSyncHook = Arc<dyn Fn(&Path) -> io::Result<()> + Send + Sync>;

/// Points where tests stop or fail a group (a crash before the directory `fsync`, a full disk).
#[derive(Clone, Default)]
pub(super) struct Hooks {
    /// Called before each directory `fsync` of a group.
    pub(super) before_sync_dir: Option<DirSyncHook>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("before_sync_dir", &self.before_sync_dir.is_some())
            .finish()
    }
}

/// What the committer has done since the store was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Writes and removals asked of the store (every `put_*` / `remove_*` call, whether or not it had to touch a
    /// file): what the callers ask for, against [`Self::files_written`] and [`Self::files_removed`], what reached the
    /// disk.
    pub requested: u64,
    /// Groups committed.
    pub groups: u64,
    /// Changes committed (a change that wrote nothing because the record already held it is not counted).
    pub changes: u64,
    /// Record files written (temporary file, `fsync`, rename).
    pub files_written: u64,
    /// Record files deleted.
    pub files_removed: u64,
    /// Directory `fsync`s (tried).
    pub dir_syncs: u64,
    /// Directory `fsync`s the platform refused as unavailable where the directory lives (see the module docs): the
    /// changes rest on the write-through rename alone.
    pub dir_syncs_refused: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requested: AtomicU64,
    groups: AtomicU64,
    changes: AtomicU64,
    files_written: AtomicU64,
    files_removed: AtomicU64,
    dir_syncs: AtomicU64,
    dir_syncs_refused: AtomicU64,
    /// Whether a refused directory flush was logged at `warn` already (once per store).
    warned_refused: AtomicBool,
}

/// The store's committer: a queue, drained by one task at a time on the runtime's blocking pool (or a thread of its
/// own outside a runtime). A drain takes everything queued as one group, commits it, and repeats until the queue is
/// empty; a change queued while no drain runs starts one. Blocking-pool work also tells a paused test clock that
/// something is still running.
#[derive(Debug)]
pub(super) struct Committer {
    worker: Arc<Worker>,
}

#[derive(Debug)]
struct Worker {
    shared: Arc<Shared>,
    hooks: Hooks,
    counters: Counters,
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Whether a drain is running (it will see what is queued now).
    draining: bool,
    /// Names temporary files uniquely within the process.
    tmp_counter: u64,
}

impl Committer {
    /// The committer of `shared`.
    pub(super) fn new(shared: Arc<Shared>, hooks: Hooks) -> Self {
        Self {
            worker: Arc::new(Worker {
                shared,
                hooks,
                counters: Counters::default(),
                queue: Mutex::default(),
            }),
        }
    }

    /// Queue `job`; `true` when no drain runs, so the caller must [`start`](Self::start) one (after releasing the
    /// index, which a failed start takes).
    pub(super) fn push(&self, job: Job) -> bool {
        let mut q = self.worker.queue();
        q.jobs.push_back(job);
        !std::mem::replace(&mut q.draining, true)
    }

    /// Start a drain of the queue.
    pub(super) fn start(&self) {
        let worker = Arc::clone(&self.worker);
        let started = match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                drop(rt.spawn_blocking(move || worker.drain()));
                Ok(())
            }
            Err(_) => std::thread::Builder::new()
                .name("wincsi-state".to_owned())
                .spawn(move || worker.drain())
                .map(drop),
        };
        if let Err(e) = started {
            // Nothing will drain the queue: fail what is in it (its waiters get the error); the next change tries again.
            tracing::error!(error = %e, "state store: cannot start the committer");
            let jobs = {
                let mut q = self.worker.queue();
                q.draining = false;
                std::mem::take(&mut q.jobs)
            };
            self.worker
                .fail(jobs, &format!("cannot start the committer: {e}"));
        }
    }

    /// Count one write or removal asked of the store.
    pub(super) fn count_request(&self) {
        self.worker
            .counters
            .requested
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The counters so far.
    pub(super) fn stats(&self) -> CommitStats {
        let c = &self.worker.counters;
        CommitStats {
            groups: c.groups.load(Ordering::Relaxed),
            requested: c.requested.load(Ordering::Relaxed),
            changes: c.changes.load(Ordering::Relaxed),
            files_written: c.files_written.load(Ordering::Relaxed),
            files_removed: c.files_removed.load(Ordering::Relaxed),
            dir_syncs: c.dir_syncs.load(Ordering::Relaxed),
            dir_syncs_refused: c.dir_syncs_refused.load(Ordering::Relaxed),
        }
    }
}

impl Worker {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commit what is queued, group after group, until the queue is empty.
    fn drain(&self) {
        loop {
            let (jobs, mut tmp_counter) = {
                let mut q = self.queue();
                if q.jobs.is_empty() {
                    q.draining = false;
                    return;
                }
                let n = q.jobs.len().min(MAX_GROUP);
                let jobs: Vec<Job> = q.jobs.drain(..n).collect();
                (jobs, q.tmp_counter)
            };
            let mut group = Vec::new();
            for job in jobs {
                match job {
                    Job::Change(c) => group.push(c),
                    Job::Refresh(done) => {
                        self.commit(std::mem::take(&mut group), &mut tmp_counter);
                        let _ = done.send(refresh(&self.shared).map_err(|e| e.to_string()));
                    }
                }
            }
            self.commit(group, &mut tmp_counter);
            self.queue().tmp_counter = tmp_counter;
        }
    }

    /// Wake the waiters of `jobs` with `error` (the index goes back to the files).
    fn fail(&self, jobs: VecDeque<Job>, error: &str) {
        let mut ix = self.shared.index();
        for job in jobs {
            match job {
                Job::Change(c) => {
                    let id = (c.kind, c.key.clone());
                    if let Some(n) = ix.pending.get_mut(&id) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            ix.pending.remove(&id);
                        }
                    }
                    if ix.pending(c.kind, &c.key) == 0 {
                        let now = read_file(c.kind, &self.shared.file(c.kind, &c.key));
                        self.shared.apply(&mut ix, c.kind, &c.key, now);
                    }
                    let _ = c.done.send(Err(error.to_owned()));
                }
                Job::Refresh(done) => {
                    let _ = done.send(Err(error.to_owned()));
                }
            }
        }
    }
}

impl Worker {
    /// Flush `dir` (step 4 of a group). A flush the platform cannot do there is let through (module docs): warned
    /// once, counted, and the changes rest on their write-through renames; any other failure is the group's.
    fn sync_dir(&self, dir: &Path) -> Result<(), String> {
        let counters = &self.counters;
        counters.dir_syncs.fetch_add(1, Ordering::Relaxed);
        let synced = self
            .hooks
            .before_sync_dir
            .as_ref()
            .map_or(Ok(()), |hook| hook(dir))
            .and_then(|()| durable::sync_dir(dir));
        match synced {
            Ok(()) => Ok(()),
            Err(e) if durable::flush_refused(&e) => {
                counters.dir_syncs_refused.fetch_add(1, Ordering::Relaxed);
                if let Some(m) = crate::metrics::installed() {
                    m.observe_state_dir_flush_refused();
                }
                if counters.warned_refused.swap(true, Ordering::Relaxed) {
                    tracing::debug!(dir = %dir.display(), error = %e, "state store: directory flush refused again");
                } else {
                    tracing::warn!(
                        dir = %dir.display(),
                        error = %e,
                        "state store: the file system refuses to flush the state directory; records rest on their \
                         write-through renames (a removed record may come back after a power cut). Counted in \
                         wincsi_state_dir_flush_refused_total; warned once"
                    );
                }
                Ok(())
            }
            Err(e) => Err(io_err("flush the directory", dir, e).to_string()),
        }
    }
}

/// A record file being written in a group.
struct Write {
    kind: Kind,
    key: String,
    tmp: PathBuf,
    file: Option<File>,
    synced: bool,
    result: Result<(), String>,
}

impl Worker {
    /// Commit one group (see the module docs).
    fn commit(&self, group: Vec<Change>, tmp_counter: &mut u64) {
        let (shared, counters) = (&*self.shared, &self.counters);
        if group.is_empty() {
            return;
        }
        // The last change of each record is the one that reaches the disk.
        let mut last: HashMap<(Kind, &str), usize> = HashMap::new();
        for (i, c) in group.iter().enumerate() {
            last.insert((c.kind, c.key.as_str()), i);
        }
        let mut outcome: HashMap<(Kind, String), Result<(), String>> = HashMap::new();
        let mut writes: Vec<Write> = Vec::new();
        let mut removals: Vec<(Kind, &str)> = Vec::new();
        for (&(kind, key), &i) in &last {
            match &group[i].op {
                Op::Put(_) => writes.push(Write {
                    kind,
                    key: key.to_owned(),
                    tmp: PathBuf::new(),
                    file: None,
                    synced: false,
                    result: Ok(()),
                }),
                Op::Remove => removals.push((kind, key)),
            }
        }
        // Directories are created by the first write into them; a new directory's own entry needs its parent synced.
        let mut new_dirs: BTreeMap<Kind, Result<bool, String>> = BTreeMap::new();
        for w in &writes {
            new_dirs.entry(w.kind).or_insert_with(|| {
                let dir = shared.dir(w.kind);
                let existed = dir.is_dir();
                fs::create_dir_all(dir)
                    .map(|()| !existed)
                    .map_err(|e| io_err("create", dir, e).to_string())
            });
        }
        // 1. Temporary files, written.
        for w in &mut writes {
            if let Some(Err(e)) = new_dirs.get(&w.kind) {
                w.result = Err(e.clone());
                continue;
            }
            let path = shared.file(w.kind, &w.key);
            *tmp_counter += 1;
            w.tmp = path.with_extension(format!("{}-{}.tmp", std::process::id(), tmp_counter));
            let Op::Put(bytes) = &group[last[&(w.kind, w.key.as_str())]].op else {
                continue;
            };
            match File::create(&w.tmp).and_then(|mut f| f.write_all(bytes).map(|()| f)) {
                Ok(f) => w.file = Some(f),
                Err(e) => w.result = Err(io_err("write", &path, e).to_string()),
            }
        }
        // 2. fsync'ed together.
        sync_files(&mut writes);
        // 3. Renamed over the records; removed records deleted.
        let mut changed_dirs: BTreeSet<Kind> = BTreeSet::new();
        for w in &mut writes {
            drop(w.file.take());
            if w.result.is_ok() {
                let path = shared.file(w.kind, &w.key);
                match durable::replace(&w.tmp, &path) {
                    Ok(()) => {
                        changed_dirs.insert(w.kind);
                        counters.files_written.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => w.result = Err(io_err("write", &path, e).to_string()),
                }
            }
            if w.result.is_err() {
                let _ = fs::remove_file(&w.tmp);
            }
            outcome.insert((w.kind, w.key.clone()), w.result.clone());
        }
        for &(kind, key) in &removals {
            let path = shared.file(kind, key);
            let result = match fs::remove_file(&path) {
                Ok(()) => {
                    changed_dirs.insert(kind);
                    counters.files_removed.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io_err("remove", &path, e).to_string()),
            };
            outcome.insert((kind, key.to_owned()), result);
        }
        // 4. One fsync per changed directory (and the parent of a new one).
        for kind in changed_dirs {
            let mut dirs = vec![shared.dir(kind).to_path_buf()];
            if matches!(new_dirs.get(&kind), Some(Ok(true)))
                && let Some(parent) = shared.dir(kind).parent()
            {
                dirs.push(parent.to_path_buf());
            }
            for dir in dirs {
                if let Err(e) = self.sync_dir(&dir) {
                    for ((k, _), r) in outcome.iter_mut() {
                        if *k == kind && r.is_ok() {
                            *r = Err(e.clone());
                        }
                    }
                    // Every change of the directory failed already: flushing its parent would change nothing.
                    break;
                }
            }
        }
        // 5. The index learns the outcome; every waiter is woken with its record's.
        {
            let mut ix = shared.index();
            for c in &group {
                let id = (c.kind, c.key.clone());
                if let Some(n) = ix.pending.get_mut(&id) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        ix.pending.remove(&id);
                    }
                }
            }
            for ((kind, key), result) in &outcome {
                let id = (*kind, key.clone());
                match result {
                    Ok(()) => {
                        ix.dirty.remove(&id);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "state record change failed; the caller gets the error");
                        ix.dirty.insert(id.clone());
                        if ix.pending(*kind, key) == 0 {
                            // Nothing newer in flight: the index goes back to what the file says.
                            let now = read_file(*kind, &shared.file(*kind, key));
                            shared.apply(&mut ix, *kind, key, now);
                        }
                    }
                }
            }
        }
        counters.groups.fetch_add(1, Ordering::Relaxed);
        counters
            .changes
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        let metrics = crate::metrics::installed();
        if let Some(m) = metrics {
            m.observe_state_group(group.len());
        }
        for c in group {
            let result = outcome
                .get(&(c.kind, c.key.clone()))
                .cloned()
                .unwrap_or(Ok(()));
            if let Some(m) = metrics {
                m.observe_state_commit(c.queued.elapsed().as_secs_f64());
            }
            let _ = c.done.send(result);
        }
    }
}

/// How long a group's files are flushed one after another before the rest is spread over threads. A file system
/// whose `fsync` returns at once (tmpfs, a journal that batches) finishes a whole group within it and starts no
/// thread; one that writes each file synchronously exceeds it at the first file or two.
const SERIAL_SYNC_BUDGET: std::time::Duration = std::time::Duration::from_millis(1);

/// `fsync` every written file: in turn while that is fast, then the rest concurrently.
fn sync_files(writes: &mut [Write]) {
    fn sync(w: &mut Write) {
        if w.synced {
            return;
        }
        w.synced = true;
        if let (Some(f), Ok(())) = (&w.file, &w.result)
            && let Err(e) = f.sync_all()
        {
            w.result = Err(format!("cannot flush {}: {e}", w.tmp.display()));
        }
    }
    let started = Instant::now();
    let mut done = 0;
    while done < writes.len() && started.elapsed() < SERIAL_SYNC_BUDGET {
        sync(&mut writes[done]);
        done += 1;
    }
    let writes = &mut writes[done..];
    let open = writes.iter().filter(|w| w.file.is_some()).count();
    if open <= 1 {
        writes.iter_mut().for_each(sync);
        return;
    }
    let per_thread = writes.len().div_ceil(open.min(SYNC_THREADS));
    std::thread::scope(|s| {
        let mut parts = writes.chunks_mut(per_thread);
        let mine = parts.next();
        for part in parts {
            let spawned = std::thread::Builder::new()
                .name("wincsi-state-sync".to_owned())
                .stack_size(64 * 1024)
                .spawn_scoped(s, move || part.iter_mut().for_each(sync));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "state store: no thread to flush files with; flushing them in turn");
            }
        }
        if let Some(part) = mine {
            part.iter_mut().for_each(sync);
        }
    });
    // A part whose thread could not start is flushed here.
    writes.iter_mut().for_each(sync);
}

/// Delete temporary files a crash left in `dir` (store open only: while the store runs, the committer owns them).
pub(super) fn remove_temporaries(dir: &Path) -> Result<(), Error> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("list", dir, e)),
    };
    for entry in entries {
        let path = entry.map_err(|e| io_err("list", dir, e))?.path();
        if path.extension().is_some_and(|e| e == "tmp") {
            fs::remove_file(&path).map_err(|e| io_err("remove", &path, e))?;
        }
    }
    Ok(())
}

/// Every record file in `dir` by file stem, read (an absent directory has none).
pub(super) fn scan(kind: Kind, dir: &Path) -> io::Result<Vec<(String, FileSlot)>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Some(key) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if let Some(slot) = read_file(kind, &path) {
            out.push((key.to_owned(), slot));
        }
    }
    Ok(out)
}

/// Take over what the files say now, except for records with a change in flight.
fn refresh(shared: &Shared) -> Result<(), Error> {
    for kind in [Kind::Volume, Kind::Publish] {
        let files =
            scan(kind, shared.dir(kind)).map_err(|e| io_err("list", shared.dir(kind), e))?;
        let mut ix = shared.index();
        let on_disk: BTreeSet<String> = files.iter().map(|(k, _)| k.clone()).collect();
        for (key, slot) in files {
            if ix.pending(kind, &key) == 0 {
                shared.apply(&mut ix, kind, &key, Some(slot));
            }
        }
        let known: Vec<String> = match kind {
            Kind::Volume => ix.volumes.keys().cloned().collect(),
            Kind::Publish => ix.publish.keys().cloned().collect(),
        };
        for key in known {
            if !on_disk.contains(&key) && ix.pending(kind, &key) == 0 {
                shared.apply(&mut ix, kind, &key, None);
            }
        }
    }
    Ok(())
}
