//! Resource bounds under a flood: thousands of CSI operations started at once (many for the same volume, some cut
//! short by tiny deadlines) against the simulated host. Every call is answered (a result or ABORTED) — nothing
//! hangs, the whole test is bounded by a timeout that fails — and afterwards the per-volume lock table and the
//! shared-object lock map are empty again, the process' memory does not grow from one flood to the next, and the
//! host is left clean.

#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use proxy_client::{ProxyClient, Transport};
use serde_json::json;
use sim::{HostOptions, Scenario, SimHost};
use wincsi::Error;
use wincsi::backend::Manager;
use wincsi::host::KubeletRoot;
use wincsi::host::native::testing::TestHost;
use wincsi::lifecycle::{AccessType, Capability, StageRequest, UnstageRequest, VolumeConfig};
use wincsi::locks::{Deadline, KeyedLocks};
use wincsi::smb::Secrets;

const PW: &str = "Flood-Smb-Pw-93!";
/// Operations per flood round.
const FLOOD: usize = 2000;
/// Distinct cold volumes (each gets several concurrent operations too).
const COLD: usize = 60;

fn staging(id: &str) -> String {
    format!(r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount")
}

fn stage_req(id: &str) -> StageRequest {
    StageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        capability: Some(Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: vec![],
            },
            access_mode: 5,
        }),
        // Two shares: the hot volume's share lock and the cold volumes' one.
        volume_context: BTreeMap::from([(
            "source".to_owned(),
            if id == "hot" {
                r"\\fs1\data"
            } else {
                r"\\fs1\apps"
            }
            .to_owned(),
        )]),
        secrets: Secrets::new([("username", "bob"), ("password", PW), ("domain", "CORP")]),
    }
}

fn unstage_req(id: &str) -> UnstageRequest {
    UnstageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
    }
}

/// Resident set size of this process in bytes (Linux `/proc/self/statm`).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("rss pages");
    pages * 4096
}

#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    aborted: usize,
    other: usize,
}

/// One flood: `FLOOD` operations start at once — half stage the same hot volume (each answers OK or ABORTED), the
/// rest stage/unstage the cold volumes, a third of them with a 1 ms deadline (cancelled while waiting for the share
/// lock or mid-call).
async fn flood(mgr: &Arc<Manager<TestHost>>) -> Tally {
    let mut tasks = Vec::with_capacity(FLOOD);
    for i in 0..FLOOD {
        let mgr = Arc::clone(mgr);
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                // OK, ABORTED, or a transient error: cancelled calls reset their HTTP/2 streams, and a server
                // may close a connection that resets too many (rapid-reset protection); kubelet retries those.
                return mgr.stage(&stage_req("hot"), long()).await;
            }
            let id = format!("cold-{}", i % COLD);
            let d = if i % 3 == 0 {
                Deadline::after(Duration::from_millis(1))
            } else {
                long()
            };
            if i % 4 == 1 {
                mgr.stage(&stage_req(&id), d).await
            } else {
                mgr.unstage(&unstage_req(&id), d).await
            }
        }));
    }
    let mut tally = Tally::default();
    for t in tasks {
        match t.await.expect("task") {
            Ok(()) => tally.ok += 1,
            Err(Error::Aborted(_)) => tally.aborted += 1,
            Err(_) => tally.other += 1,
        }
    }
    tally
}

fn long() -> Deadline {
    Deadline::after(Duration::from_secs(120))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_in_flight_are_all_answered_and_leave_nothing_behind() {
    let sandbox = tempfile::tempdir().expect("tmp");
    let socks = tempfile::tempdir().expect("tmp");
    let state = tempfile::tempdir().expect("tmp");
    let scenario = Scenario::from_json(
        &json!({"smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": PW, "domain": "CORP"}],
            "shares": [{"name": "data"}, {"name": "apps"}]}]}})
        .to_string(),
    )
    .expect("scenario");
    let sim = SimHost::new(&scenario, sandbox.path(), HostOptions::default()).expect("sim");
    let serve = sim::serve_unix(sim.clone(), socks.path()).expect("serve");
    let proxy = ProxyClient::new(Transport::UnixSockets {
        dir: socks.path().to_path_buf(),
    });
    for id in std::iter::once("hot".to_owned()).chain((0..COLD).map(|i| format!("cold-{i}"))) {
        let parent = staging(&id).rsplit_once('\\').expect("parent").0.to_owned();
        proxy
            .filesystem()
            .mkdir(&parent)
            .await
            .expect("kubelet mkdir");
    }
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    let mgr = Arc::new(
        wincsi::backend::manager(
            common::backend::host_for(&sim, proxy.clone(), state.path()),
            cfg,
            state.path(),
        )
        .expect("manager"),
    );

    let bounded = tokio::time::timeout(Duration::from_secs(300), async {
        let first = flood(&mgr).await;
        let after_first = rss();
        let second = flood(&mgr).await;
        let after_second = rss();
        (first, second, after_first, after_second)
    })
    .await;
    let (first, second, after_first, after_second) =
        bounded.expect("every call of the flood was answered within the bound");
    println!(
        "hardening flood: {FLOOD} ops ×2 in flight: first {first:?}, second {second:?}; RSS after first {} KiB, \
         after second {} KiB",
        after_first / 1024,
        after_second / 1024
    );
    for t in [&first, &second] {
        assert_eq!(t.ok + t.aborted + t.other, FLOOD);
    }
    // Steady state: a second flood of the same size must not grow memory (generous bound for allocator slack).
    assert!(
        after_second <= after_first + 64 * 1024 * 1024,
        "memory grew by {} KiB between two equal floods",
        (after_second - after_first) / 1024
    );
    assert!(mgr.volume_locks().is_empty(), "volume locks left held");
    assert!(mgr.object_locks().is_empty(), "share lock entries leaked");

    // Nothing hangs on the host and everything can be cleaned up: every volume unstages (not ABORTED).
    for id in std::iter::once("hot".to_owned()).chain((0..COLD).map(|i| format!("cold-{i}"))) {
        // kubelet's policy: the same call again (bounded) after a transient failure.
        let mut last = None;
        for _ in 0..3 {
            match mgr.unstage(&unstage_req(&id), long()).await {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e @ Error::Aborted(_)) => panic!("unstage {id}: a lock stayed held: {e:?}"),
                Err(e) => last = Some(e),
            }
        }
        assert!(last.is_none(), "unstage {id}: {last:?}");
    }
    assert!(mgr.store().volumes().expect("list").is_empty());
    let report = sim.invariants();
    assert!(report.ok(), "simulated host invariants: {report:?}");
    assert_eq!(sim.hung_calls(), 0);
    serve.shutdown().await.expect("shutdown");
}

/// Regression: a waiter on a shared-object lock whose RPC was cancelled after the holder released left its map
/// entry behind forever (the holder saw the waiter's handle and kept the entry; the waiter never came back).
#[tokio::test]
async fn a_cancelled_lock_waiter_leaves_no_entry() {
    let locks = KeyedLocks::default();
    let held = locks.lock(r"\\fs1\data").await;
    let mut waiter = Box::pin(locks.lock(r"\\fs1\data"));
    assert!((&mut waiter).now_or_never().is_none(), "the waiter waits");
    drop(held);
    drop(waiter);
    assert!(locks.is_empty(), "{} entries left", locks.len());
}
