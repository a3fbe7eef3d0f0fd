//! The state store's durability calls on Windows, under Wine (issue 37 item 10): the record rename is
//! `MoveFileExW(MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)` and each changed directory is flushed through a
//! handle opened for writing with `FILE_FLAG_BACKUP_SEMANTICS` (`state/durable_windows.rs`,
//! `winhost::win32::durable`).
//!
//! What this proves: the calls are made with arguments Windows accepts and succeed (a record written, replaced and
//! read back by a new store), and a directory that cannot be opened for its flush fails the commit instead of being
//! skipped (the store used to skip it on Windows: `File::open` of a directory fails without
//! `FILE_FLAG_BACKUP_SEMANTICS`, and the error was ignored).
//!
//! A directory the platform cannot flush where it lives (`ERROR_INVALID_FUNCTION`, `ERROR_NOT_SUPPORTED`,
//! `ERROR_ACCESS_DENIED`: a file system or filter without directory flushes) does not fail every write: those codes,
//! injected in place of the flush, are told apart by the Windows build's own classification
//! (`winhost::win32::durable::directory_flush_refused`), counted, and the write goes through the real
//! `MoveFileExW`; a sharing violation still fails it.
//!
//! What Wine cannot prove: that anything reaches a disk. Wine maps `FlushFileBuffers` to `fsync(2)` of its Unix file
//! and renames with `rename(2)`; whether NTFS commits its journal for `MOVEFILE_WRITE_THROUGH` and for a directory
//! handle's flush, and whether the device honours the cache flush, only a real node can show. Nor the replacement of
//! a record another handle holds open (`MoveFileExW` refuses it; std's POSIX-semantics rename then does it): Wine 8
//! has no POSIX renames (measured: std's own `fs::rename` over a file open with `FILE_SHARE_DELETE` answers "Access
//! denied" there). Nor which code a real file system or filter answers a directory flush with: Wine flushes a
//! directory with `fsync(2)`, so the refusals are injected (the store's test hook, `test-util`). All are in
//! docs/real-node-checks.md.
#![cfg(windows)]

use std::fs::OpenOptions;
use std::os::windows::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use wincsi::state::{Details, Phase, StateStore, VolumeRecord};

/// `FILE_FLAG_BACKUP_SEMANTICS` (winbase.h): needed to open a directory.
const FILE_FLAG_BACKUP_SEMANTICS: u32 = 0x0200_0000;
/// `FILE_SHARE_READ` (winnt.h).
const FILE_SHARE_READ: u32 = 0x1;
/// `FILE_SHARE_DELETE` (winnt.h).
const FILE_SHARE_DELETE: u32 = 0x4;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Share {
    root: String,
}

impl Details for Share {
    const PROTOCOL: &'static str = "smb";
}

fn record(id: &str, phase: Phase) -> VolumeRecord {
    VolumeRecord::new(
        id,
        phase,
        &format!(r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount"),
        false,
        &Share {
            root: r"\\files\share".to_owned(),
        },
    )
    .expect("record")
}

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_is_replaced_with_write_through_and_survives_a_new_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = StateStore::open(dir.path()).expect("open");
    store
        .put_volume(&record("vol-1", Phase::Staging))
        .await
        .expect("first write: MoveFileExW onto a new name, then the directory flushes");
    store
        .put_volume(&record("vol-1", Phase::Staged))
        .await
        .expect("second write: MoveFileExW(MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH) over the record");
    let stats = store.commit_stats();
    assert_eq!(stats.files_written, 2, "{stats:?}");
    // First group: the new `volumes` directory and its parent; second group: `volumes`.
    assert_eq!(stats.dir_syncs, 3, "{stats:?}");
    drop(store);
    assert!(
        temporaries(&dir.path().join("volumes")).is_empty(),
        "no temporary file is left"
    );

    let again = StateStore::open(dir.path()).expect("reopen");
    let read = again
        .volume("vol-1")
        .expect("read")
        .expect("the record survives");
    assert_eq!(
        read.phase,
        Phase::Staged,
        "the replacement is what a new store reads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_that_cannot_be_flushed_fails_the_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = StateStore::open(dir.path()).expect("open");
    store
        .put_volume(&record("vol-1", Phase::Staging))
        .await
        .expect("first write");
    // Someone holds the records' directory open without sharing write access: the committer's flush needs a handle
    // with GENERIC_WRITE, which Windows refuses while that handle is open (ERROR_SHARING_VIOLATION).
    let holder = OpenOptions::new()
        .read(true)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_DELETE)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
        .open(dir.path().join("volumes"))
        .expect("hold the directory");
    let failed = store.put_volume(&record("vol-2", Phase::Staging)).await;
    drop(holder);
    let err = failed.expect_err(
        "a change whose directory was not flushed is not reported durable (the flush was skipped on Windows before)",
    );
    assert!(
        err.to_string().contains("flush the directory"),
        "the error names the flush: {err}"
    );
    // Once the directory can be flushed again, the same write succeeds.
    store
        .put_volume(&record("vol-2", Phase::Staging))
        .await
        .expect("the retry succeeds");
}

/// Review of item 10: the refusals a file system or filter answers a directory flush with let the write through
/// (counted), while a sharing violation — the directory held by someone else for a while — still fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_flush_the_platform_refuses_does_not_fail_every_write() {
    // ERROR_INVALID_FUNCTION, ERROR_NOT_SUPPORTED, ERROR_ACCESS_DENIED, then ERROR_SHARING_VIOLATION.
    const CODES: [i32; 4] = [1, 50, 5, 32];
    let dir = tempfile::tempdir().expect("tempdir");
    let next = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&next);
    let store = StateStore::open_with_dir_sync_hook(dir.path(), move |_: &Path| {
        Err(std::io::Error::from_raw_os_error(
            CODES[n.load(Ordering::SeqCst).min(CODES.len() - 1)],
        ))
    })
    .expect("open");
    // A first write: the new directory's flush and its parent's, both refused as "Incorrect function".
    store
        .put_volume(&record("vol-1", Phase::Staging))
        .await
        .expect("ERROR_INVALID_FUNCTION lets the write through");
    next.store(1, Ordering::SeqCst);
    store
        .put_volume(&record("vol-1", Phase::Staged))
        .await
        .expect("ERROR_NOT_SUPPORTED lets the write through");
    next.store(2, Ordering::SeqCst);
    store
        .put_volume(&record("vol-2", Phase::Staging))
        .await
        .expect("ERROR_ACCESS_DENIED lets the write through");
    let stats = store.commit_stats();
    assert_eq!(
        (stats.dir_syncs, stats.dir_syncs_refused),
        (4, 4),
        "{stats:?}"
    );
    next.store(3, Ordering::SeqCst);
    let err = store
        .put_volume(&record("vol-3", Phase::Staging))
        .await
        .expect_err("a sharing violation fails the write");
    assert!(
        err.to_string().contains("flush the directory"),
        "the error names the flush: {err}"
    );
    assert_eq!(store.commit_stats().dir_syncs_refused, 4);
    drop(store);
    let again = StateStore::open(dir.path()).expect("reopen");
    assert_eq!(
        again.volume("vol-1").expect("read").map(|r| r.phase),
        Some(Phase::Staged),
        "the records written through MoveFileExW are in place"
    );
    assert!(again.volume("vol-2").expect("read").is_some());
}
