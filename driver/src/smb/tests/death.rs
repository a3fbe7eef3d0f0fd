//! What the unit suites' driver restart models (issue 37): a process death (`testing::Env::restart`,
//! `sim::process`). A killed driver's process does nothing more — none of its calls reaches the host and nothing it
//! writes is seen by the next process — while a call the host was already running when it died runs to its end there.
//! On the backend `WINCSI_TEST_HOST_BACKEND` names and the csi-proxy release `WINCSI_SIM_CSI_PROXY_VERSION` names.

use super::*;

/// The driver process the environment ran before a restart can still be driven by the test (its `Manager` is kept
/// here): nothing it does reaches the host, and nothing it writes reaches the state directory the new process reads.
#[tokio::test]
async fn a_restarted_drivers_dead_process_reaches_neither_the_host_nor_the_new_processs_state() {
    let mut env = new_env(false);
    let dead = Arc::clone(&env.mgr);
    env.restart();
    env.clear_calls();
    let r = dead.stage(&stage_req("v1", SHARE, None, "bob"), d()).await;
    assert!(r.is_err(), "a dead process staged a volume: {r:?}");
    assert_eq!(
        env.calls_text(),
        "",
        "a dead process's calls reached the host"
    );
    assert!(mappings(&env).is_empty(), "{:?}", mappings(&env));
    assert!(
        env.mgr.store().volume("v1").expect("read").is_none(),
        "the new process sees a record the dead one wrote"
    );
    // The new process is not hindered by it.
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("the new process stages");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

/// A driver killed while the host runs its call (csi-proxy's RPC in the server; natively the WMI method in its
/// provider): the call runs to its end on the host, and the restarted driver's retried stage converges over what it
/// made, from the state directory as the dead process left it (the announced creation).
#[tokio::test]
async fn a_call_the_host_was_running_when_the_driver_died_runs_to_its_end_there() {
    let mut env = new_env(false);
    let method = env.per_backend("NewSmbGlobalMapping", "MSFT_SmbGlobalMapping.Create");
    env.sim.hang_nth(method, 1).expect("hold");
    let req = stage_req("v1", SHARE, None, "bob");
    tokio::select! {
        r = env.stage(&req, d()) => panic!("the stage ended under the held call: {r:?}"),
        () = env.sim.wait_hung(1) => {}
    }
    env.restart();
    let rec = env.mgr.store().volume("v1").expect("read").expect("record");
    let facts = rec.details::<SmbRecord>().expect("decode").expect("smb");
    assert!(
        facts.creating.is_some(),
        "the record the dead process wrote before its call, with its announcement: {facts:?}"
    );
    env.sim.release_hangs();
    env.sim.wait_unhung().await;
    assert_eq!(
        mappings(&env).len(),
        1,
        "the host ran the dead process's call to its end"
    );
    env.stage(&req, d())
        .await
        .expect("the restarted driver's retry");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}
