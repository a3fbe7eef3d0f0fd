//! The store's tests: records and their layout, quarantine, and the committer's durability and grouping (stopped and
//! failed at the directory `fsync` through [`Hooks`], never timed).

use std::fs;
use std::io;
use std::sync::{PoisonError, mpsc};

use futures::FutureExt as _;
use futures::executor::block_on;

use super::commit::Hooks;
use super::*;

/// Wait for a change to be durable.
fn done(commit: Commit, what: &str) {
    block_on(commit).unwrap_or_else(|e| panic!("{what}: {e}"));
}

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
        done(store.put_volume(&record(id, r"\\srv\share")), "put");
    }
    done(store.put_volume(&record("other", r"\\srv\other")), "put");
    for id in ids {
        assert_eq!(store.volume(id).expect("get").expect("some").volume_id, id);
    }
    assert_eq!(users(&store, r"\\srv\share"), ids.len());
    done(store.remove_volume("plain"), "rm");
    done(store.remove_volume("plain"), "rm twice is fine");
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
    done(store.put_volume(&r), "put");
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
    done(
        store.put_publication(&p.target_path.to_ascii_lowercase(), &p),
        "put",
    );
    assert_eq!(
        store
            .publication(&p.target_path.to_ascii_lowercase())
            .expect("get"),
        Some(p.clone())
    );
    assert_eq!(store.publications().expect("list"), vec![p.clone()]);
    done(
        store.remove_publication(&p.target_path.to_ascii_lowercase()),
        "rm",
    );
    assert!(store.publications().expect("list").is_empty());
}

#[test]
fn a_corrupt_record_is_quarantined_not_a_node_wide_failure() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("open");
    assert!(store.volumes().expect("no directory yet").is_empty());
    done(store.put_volume(&record("good", r"\\srv\share")), "put");
    // The record of volume "bad", torn by something outside the driver.
    let bad = dir
        .path()
        .join("volumes")
        .join(format!("{}.json", file_key("bad")));
    fs::write(&bad, b"{\"version\": 1, \"volume_id\": \"ba").expect("write");
    // The store finds it when it reads the files again (a Probe does; so does opening the store).
    done(store.refresh(), "refresh");
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
    done(store.refresh(), "refresh");
    assert!(store.publications().expect("list").is_empty());
    assert_eq!(
        (store.quarantined_count(), store.quarantined_volumes()),
        (2, 1)
    );
    // Fixing (or removing) the file lifts the quarantine at the next listing.
    fs::remove_file(&bad).expect("rm");
    done(store.put_volume(&record("bad", r"\\srv\share")), "rewrite");
    assert_eq!(store.volumes().expect("list").len(), 2);
    fs::remove_file(dir.path().join("publish").join("x.json")).expect("rm");
    store.publications().expect("list");
    assert!(store.quarantined().is_empty());
    // A record whose protocol facts do not decode is quarantined by whoever decodes it, and lifted on rewrite.
    store.quarantine_details("good", "missing field root");
    assert_eq!(store.quarantined_volumes(), 1);
    done(store.put_volume(&record("good", r"\\srv\share")), "rewrite");
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
    done(store.put_volume(&r), "put");
    let back = store.volume("v").expect("read").expect("some");
    assert_eq!(*back, r);
    assert_eq!(
        back.details::<Share>().expect("details").expect("smb").root,
        r"\\srv\share"
    );
    assert_eq!(back.with_phase(Phase::Staged).access, r.access);
}

#[test]
fn decoded_details_are_kept_per_record_never_copied_nor_compared_nor_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("open");
    done(store.put_volume(&record("v", r"\\srv\share")), "put");
    let rec = store.volume("v").expect("read").expect("some");
    let first = rec
        .cached_details::<Share>()
        .expect("decodes")
        .expect("smb");
    assert_eq!(first.root, r"\\srv\share");
    let again = rec
        .cached_details::<Share>()
        .expect("decodes")
        .expect("smb");
    assert!(std::ptr::eq(first, again), "decoded once");
    // Another protocol's type: not this record's.
    #[derive(Debug, Serialize, Deserialize)]
    struct Other {}
    impl Details for Other {
        const PROTOCOL: &'static str = "other";
    }
    assert!(rec.cached_details::<Other>().expect("no error").is_none());
    // A copy may be given other facts: it starts without the decoded ones, and still equals the original.
    let mut copy = VolumeRecord::clone(&rec);
    assert_eq!(copy, *rec);
    copy.details.insert("root".into(), r"\\nas\data".into());
    let facts = copy
        .cached_details::<Share>()
        .expect("decodes")
        .expect("smb");
    assert_eq!(facts.root, r"\\nas\data");
    assert_eq!(
        serde_json::to_value(&*rec).expect("json"),
        serde_json::to_value(record("v", r"\\srv\share")).expect("json"),
        "nothing of the cache is written"
    );
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

/// A directory `fsync` that stops until the test releases it (with the `fsync`'s outcome), telling the test when a
/// group reached it.
struct Gate {
    reached: mpsc::Receiver<PathBuf>,
    release: mpsc::Sender<io::Result<()>>,
}

fn gated(dir: &Path) -> (StateStore, Gate) {
    let (reached_tx, reached) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<io::Result<()>>();
    let release_rx = Mutex::new(release_rx);
    let hooks = Hooks {
        before_sync_dir: Some(Arc::new(move |d: &Path| {
            let _ = reached_tx.send(d.to_path_buf());
            release_rx
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv()
                .unwrap_or(Ok(()))
        })),
    };
    let store = StateStore::open_with(dir, hooks).expect("open");
    (store, Gate { reached, release })
}

impl Gate {
    /// Wait until a group is stopped before its directory fsync; returns the directory.
    fn reached(&self) -> PathBuf {
        self.reached
            .recv()
            .expect("a group reaches the directory fsync")
    }

    fn release(&self, outcome: io::Result<()>) {
        self.release.send(outcome).expect("release");
    }
}

#[test]
fn a_write_is_not_done_before_its_directory_is_flushed_and_a_crash_there_fails_the_caller() {
    let dir = tempfile::tempdir().expect("tmp");
    fs::create_dir_all(dir.path().join("volumes")).expect("mkdir");
    let (store, gate) = gated(dir.path());
    let mut commit = store.put_volume(&record("v1", r"\\srv\share"));
    assert_eq!(gate.reached(), dir.path().join("volumes"));
    // The record file is in place, but its directory entry is not flushed: the caller must not go on yet.
    assert!(
        (&mut commit).now_or_never().is_none(),
        "done before the directory fsync"
    );
    assert!((&mut commit).now_or_never().is_none());
    // The machine dies in the fsync: the caller gets an error, never a go-ahead.
    gate.release(Err(io::Error::other("power lost")));
    let err = block_on(commit).expect_err("a failed group fails its callers");
    assert!(
        matches!(&err, Error::Internal(m) if m.contains("power lost")),
        "{err:?}"
    );
    // A restart (a new store over the same files) sees what the failed store now says: the index went back to the
    // file, whole or absent, never torn and never a temporary file.
    let restarted = StateStore::open(dir.path()).expect("restart");
    assert_eq!(
        restarted.volume("v1").expect("read"),
        store.volume("v1").expect("read")
    );
    assert_eq!(restarted.quarantined_count(), 0);
    drop(restarted);
    // The same write again is made again (the file may hold it without it being durable), and then it is done.
    let again = store.put_volume(&record("v1", r"\\srv\share"));
    gate.reached();
    gate.release(Ok(()));
    done(again, "rewrite");
    assert_eq!(store.commit_stats().files_written, 2);
}

/// What a file system or filter without directory flushes answers a directory flush (`durable::flush_refused`):
/// `EINVAL` on Unix, `ERROR_INVALID_FUNCTION` on Windows (dgraph-io/badger#699, an SMB redirector drive).
#[cfg(unix)]
const FLUSH_REFUSED: i32 = 22;
#[cfg(windows)]
const FLUSH_REFUSED: i32 = 1;

/// Log lines, shared with the committer's thread.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

/// Review of issue 37 item 10: a directory the platform cannot flush where it lives (a filter that does not take the
/// flush, ReFS, an SMB drive) must not fail every write for good: the records rest on their (write-through) renames,
/// the refusal is warned once and counted (stats and `wincsi_state_dir_flush_refused_total`). Any other failure of
/// the flush still fails the write. (Before: every write failed with "flush the directory".)
#[test]
fn a_directory_the_platform_cannot_flush_does_not_fail_every_write() {
    let dir = tempfile::tempdir().expect("tmp");
    let metrics = crate::metrics::install();
    let refused_before = metrics.state_dir_flush_refused();
    let logs = Logs::default();
    let (sink, fail_next) = (logs.clone(), Arc::new(Mutex::new(None::<io::Error>)));
    let fail = Arc::clone(&fail_next);
    let store = StateStore::open_with_dir_sync_hook(dir.path(), move |_: &Path| {
        // The hook runs on the committer's thread: route that thread's logs into the test's buffer.
        thread_local!(static LOGS: std::cell::RefCell<Option<tracing::subscriber::DefaultGuard>> = const { std::cell::RefCell::new(None) });
        LOGS.with(|g| {
            let writer = sink.clone();
            g.borrow_mut().get_or_insert_with(|| {
                tracing::subscriber::set_default(
                    tracing_subscriber::fmt()
                        .with_writer(move || writer.clone())
                        .with_ansi(false)
                        .with_max_level(tracing::Level::DEBUG)
                        .finish(),
                )
            });
        });
        match fail.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Some(e) => Err(e),
            None => Err(io::Error::from_raw_os_error(FLUSH_REFUSED)),
        }
    })
    .expect("open");
    // A new directory (its own and its parent's flush refused), then a replacement, a second record and a removal.
    done(
        store.put_volume(&record("v1", r"\\srv\share")),
        "first write",
    );
    let mut staged = record("v1", r"\\srv\share");
    staged.phase = Phase::Staged;
    done(store.put_volume(&staged), "replacement");
    done(
        store.put_volume(&record("v2", r"\\srv\share")),
        "second record",
    );
    done(store.remove_volume("v2"), "removal");
    let stats = store.commit_stats();
    assert_eq!(
        (stats.dir_syncs, stats.dir_syncs_refused),
        (5, 5),
        "{stats:?}"
    );
    assert!(
        metrics.state_dir_flush_refused() >= refused_before + 5,
        "counted in the metric"
    );
    let reopened = StateStore::open(dir.path()).expect("reopen");
    assert_eq!(
        reopened.volume("v1").expect("read").map(|r| r.phase),
        Some(Phase::Staged),
        "the records are in place"
    );
    assert!(reopened.volume("v2").expect("read").is_none());
    drop(reopened);
    let text = logs.text();
    assert_eq!(
        text.lines().filter(|l| l.contains("WARN")).count(),
        1,
        "warned once:\n{text}"
    );
    assert!(
        text.contains("wincsi_state_dir_flush_refused_total") && text.contains("DEBUG"),
        "the warning names the metric; later refusals are at debug:\n{text}"
    );
    // A flush that fails for another reason (a failing disk) still fails the write, and is not counted as refused.
    *fail_next.lock().unwrap_or_else(PoisonError::into_inner) =
        Some(io::Error::other("device I/O error"));
    let err = block_on(store.put_volume(&record("v3", r"\\srv\share")))
        .expect_err("a failed flush fails the write");
    assert!(
        matches!(&err, Error::Internal(m) if m.contains("flush the directory") && m.contains("device I/O error")),
        "{err:?}"
    );
    assert_eq!(store.commit_stats().dir_syncs_refused, 5);
}

#[test]
fn writes_queued_during_a_group_share_the_next_groups_directory_fsync() {
    let dir = tempfile::tempdir().expect("tmp");
    fs::create_dir_all(dir.path().join("volumes")).expect("mkdir");
    fs::create_dir_all(dir.path().join("publish")).expect("mkdir");
    let (store, gate) = gated(dir.path());
    let first = store.put_volume(&record("first", r"\\srv\share"));
    gate.reached();
    // While the first group is stopped in its fsync, twenty more volumes are written, one of them three times, and
    // one is written and removed again.
    let mut commits: Vec<Commit> = (0..20)
        .map(|i| store.put_volume(&record(&format!("v{i}"), r"\\srv\share")))
        .collect();
    commits.push(store.put_volume(&record("v3", r"\\srv\other")));
    commits.push(store.put_volume(&record("v3", r"\\srv\third")));
    commits.push(store.put_volume(&record("gone", r"\\srv\share")));
    commits.push(store.remove_volume("gone"));
    for c in &mut commits {
        assert!(
            c.now_or_never().is_none(),
            "nothing of the next group is durable yet"
        );
    }
    gate.release(Ok(()));
    done(first, "first");
    // The next group: one fsync of the volumes directory for all of it.
    assert_eq!(gate.reached(), dir.path().join("volumes"));
    gate.release(Ok(()));
    for c in commits {
        done(c, "grouped");
    }
    let stats = store.commit_stats();
    assert_eq!((stats.groups, stats.dir_syncs), (2, 2), "{stats:?}");
    assert_eq!(stats.changes, 1 + 24, "{stats:?}");
    assert_eq!(
        stats.files_written,
        1 + 20,
        "v3 once, 'gone' never: {stats:?}"
    );
    // What a restart reads is what the store said.
    drop(store);
    let again = StateStore::open(dir.path()).expect("reopen");
    assert_eq!(again.volumes().expect("list").len(), 21);
    let v3 = again.volume("v3").expect("read").expect("v3");
    assert_eq!(
        v3.details::<Share>().expect("decode").expect("smb").root,
        r"\\srv\third"
    );
    assert!(again.volume("gone").expect("read").is_none());
}

#[test]
fn reads_come_from_the_index_and_a_refresh_takes_over_hand_changes() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("open");
    done(store.put_volume(&record("v1", r"\\srv\share")), "put");
    done(store.put_volume(&record("v2", r"\\srv\share")), "put");
    let file = |id: &str| {
        dir.path()
            .join("volumes")
            .join(format!("{}.json", file_key(id)))
    };
    // Deleted by hand: the store still answers from memory (no read of the disk per request)...
    fs::remove_file(file("v1")).expect("rm");
    let restored = fs::read(file("v2")).expect("read");
    fs::write(file("v3"), restored.clone()).expect("copy");
    assert!(store.volume("v1").expect("read").is_some());
    // ...until it reads the files again: v1 is gone, and the copy (whose file name is not its id's) is listed.
    done(store.refresh(), "refresh");
    assert!(store.volume("v1").expect("read").is_none());
    let ids: Vec<String> = store
        .volumes()
        .expect("list")
        .into_iter()
        .map(|r| r.volume_id)
        .collect();
    assert_eq!(ids, ["v2", "v2"]);
    // Writing what the store already holds writes nothing; removing what it does not hold removes nothing.
    let before = store.commit_stats();
    done(store.put_volume(&record("v2", r"\\srv\share")), "same");
    done(store.remove_volume("never-staged"), "absent");
    done(store.remove_publication("never-published"), "absent");
    assert_eq!(
        store.commit_stats(),
        CommitStats {
            requested: before.requested + 3,
            ..before
        },
        "three asked for, nothing written"
    );
    // A changed record is written.
    let mut staged = record("v2", r"\\srv\share");
    staged.phase = Phase::Staged;
    done(store.put_volume(&staged), "staged");
    assert_eq!(store.commit_stats().files_written, before.files_written + 1);
}

#[test]
fn concurrent_writers_leave_the_files_as_the_index_says() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Arc::new(StateStore::open(dir.path()).expect("open"));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..40 {
                    let id = format!("t{t}-v{}", i % 10);
                    let mut r = record(&id, r"\\srv\share");
                    if i % 3 == 0 {
                        done(store.remove_volume(&id), "rm");
                    } else {
                        r.phase = if i % 2 == 0 {
                            Phase::Staged
                        } else {
                            Phase::Staging
                        };
                        done(store.put_volume(&r), "put");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("join");
    }
    let stats = store.commit_stats();
    assert!(stats.groups <= stats.changes, "{stats:?}");
    let mine = store.volumes().expect("list");
    let again = StateStore::open(dir.path()).expect("reopen");
    assert_eq!(again.volumes().expect("list"), mine);
}
