//! Issue 37 item 5: a driver restarted (rollout, crash, OOM) while a file server does not answer must not break the
//! paths of the pods that use its shares. Start-up reconciliation leaves the staging links in place, the background
//! watch checks them again, and the pods' paths work again once the mapping does.

use super::*;
use sim::CsiProxyVersion;
use sim::wmi::TestBackend;

/// `v1` staged and published for pod `p1`; then `srv` stops answering (the node's mapping shows Disconnected) and the
/// driver restarts and reconciles: the link stays, the volume is watched.
async fn restart_during_an_outage(env: &mut Env, when: &str) {
    env.stage(&stage_req("v1", SHARE, Some("data"), "bob"), d())
        .await
        .unwrap_or_else(|e| panic!("{when}: stage: {e}"));
    env.publish(&publish_req("v1", "p1"), d())
        .await
        .unwrap_or_else(|e| panic!("{when}: publish: {e}"));
    env.script(|s| s.set_smb_reachable("srv", false))
        .expect("outage");
    env.restart();
    env.clear_calls();
    let report = env.mgr.reconcile(d()).await.expect("reconcile");
    assert_eq!(report.unreachable, ["v1"], "{when}: {report:?}");
    assert!(report.restage.is_empty(), "{when}: {report:?}");
    assert!(
        env.exists(&staging("v1")),
        "{when}: the staging link the pod's path goes through was removed"
    );
    assert_eq!(
        env.mgr
            .store()
            .volume("v1")
            .expect("read")
            .expect("record")
            .phase,
        Phase::Staged,
        "{when}"
    );
    assert_eq!(env.mgr.unreachable_volumes(), ["v1"], "{when}");
    assert!(!env.resolves(&target("p1")), "{when}: the server is down");
}

/// The server answers again and the node's SMB client reconnects the mapping (scripted: whether Windows reconnects a
/// global mapping by itself once its server answers is a real-node check).
fn server_back(env: &Env) {
    env.script(|s| s.set_smb_reachable("srv", true))
        .expect("server back");
    env.script(|s| s.set_mapping_status(SHARE, MappingStatus::Ok, None))
        .expect("reconnected");
}

#[tokio::test]
async fn a_restart_during_a_file_server_outage_keeps_the_pods_paths_on_every_release() {
    for v in CsiProxyVersion::ALL {
        let when = format!("{v}");
        let mut env = new_env(false);
        env.sim.set_csi_proxy_version(v).expect("release");
        restart_during_an_outage(&mut env, &when).await;
        // While the server is down a background round changes nothing.
        assert_eq!(env.mgr.recheck_unreachable().await, 1, "{when}");
        server_back(&env);
        assert_eq!(env.mgr.recheck_unreachable().await, 0, "{when}");
        assert!(env.mgr.unreachable_volumes().is_empty(), "{when}");
        assert!(
            env.resolves(&target("p1")),
            "{when}: the pod's path works again"
        );
        let ops = env.ops();
        assert!(
            !ops.contains(&Rmdir) && !ops.contains(&RemoveSmbGlobalMapping),
            "{when}: something was removed:\n{}",
            env.calls_text()
        );
        assert!(
            ops.iter().all(|op| matches!(op, IsSymlink | PathExists)),
            "{when}: reconcile and the background checks only look:\n{}",
            env.calls_text()
        );
        let stats = env
            .mgr
            .stats(
                &StatsRequest {
                    volume_id: "v1".into(),
                    volume_path: target("p1"),
                },
                d(),
            )
            .await
            .expect("stats");
        assert!(!stats.abnormal, "{when}: {stats:?}");
        env.mgr
            .unpublish(&unpublish_req("v1", "p1"), d())
            .await
            .expect("unpublish");
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
    }
}

/// The background task itself (paused time): a native mapping still `Reconnecting` when the driver starts is waited
/// for with backoff, and the volume leaves the watch once the mapping is OK.
#[tokio::test(start_paused = true)]
async fn a_mapping_reconnecting_at_start_is_waited_for_in_the_background() {
    let mut env = new_env_on(TestBackend::Native, false);
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("stage");
    env.publish(&publish_req("v1", "p1"), d())
        .await
        .expect("publish");
    env.script(|s| {
        s.set_mapping_status(
            SHARE,
            MappingStatus::Reconnecting,
            Some((Duration::from_secs(40), MappingStatus::Ok)),
        )
    })
    .expect("reconnecting");
    env.restart();
    let report = env.mgr.reconcile(d()).await.expect("reconcile");
    assert_eq!(report.unreachable, ["v1"]);
    assert!(env.exists(&staging("v1")));
    let start = tokio::time::Instant::now();
    let task = tokio::spawn(Arc::clone(&env.mgr).run_background());
    until_unwatched(&env).await;
    // Checked after 5 s, 15 s, 35 s and 75 s (doubling waits): the mapping settled at 40 s.
    assert!(
        start.elapsed() >= Duration::from_secs(40) && start.elapsed() < Duration::from_secs(160),
        "{:?}",
        start.elapsed()
    );
    assert!(env.resolves(&target("p1")));
    assert_eq!(mappings(&env)[SHARE].status, MappingStatus::Ok);
    env.mgr.stop_background();
    task.await.expect("task");
}

/// Resolves once the background watch has nothing left (within ten minutes of paused time).
async fn until_unwatched(env: &Env) {
    tokio::time::timeout(Duration::from_secs(600), async {
        while !env.mgr.unreachable_volumes().is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .expect("the watch ends");
}

/// A mapping that stays Disconnected after the server is back cannot be repaired without the volume's credentials
/// (never stored): the volume stays reported and watched — with backoff up to five minutes between checks, one
/// `IsSymlink` each — until kubelet unstages it. Another driver's task stops at shutdown.
#[tokio::test(start_paused = true)]
async fn an_unrepaired_volume_stays_watched_until_unstaged_and_the_watch_stops_at_shutdown() {
    let mut env = new_env(false);
    restart_during_an_outage(&mut env, "outage").await;
    env.script(|s| s.set_smb_reachable("srv", true))
        .expect("server back, mapping still Disconnected");
    let task = tokio::spawn(Arc::clone(&env.mgr).run_background());
    tokio::time::sleep(Duration::from_secs(30 * 60)).await;
    assert_eq!(env.mgr.unreachable_volumes(), ["v1"]);
    let checks = env.ops().iter().filter(|op| **op == IsSymlink).count();
    // 5 s, then doubling to the 300 s cap: 11 rounds in 30 minutes.
    assert!((9..=12).contains(&checks), "{checks} checks in 30 minutes");
    // kubelet deletes the pod: unpublish, unstage (the link and the Disconnected mapping go).
    env.mgr
        .unpublish(&unpublish_req("v1", "p1"), d())
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    until_unwatched(&env).await;
    env.mgr.stop_background();
    task.await.expect("task");
    env.assert_clean();

    // Shutdown: the task stops at once, the volume still watched.
    let mut env = new_env(false);
    restart_during_an_outage(&mut env, "shutdown").await;
    let task = tokio::spawn(Arc::clone(&env.mgr).run_background());
    tokio::task::yield_now().await;
    env.mgr.stop_background();
    tokio::time::timeout(Duration::from_millis(1), task)
        .await
        .expect("the task stops at shutdown")
        .expect("task");
    assert_eq!(env.mgr.unreachable_volumes(), ["v1"]);
}
