//! Issue 37 item 9 (SMB): a staging link's `Rmdir` or a share's `RemoveSmbGlobalMapping` that finishes after the
//! unstage that issued it gave up must not take away what a later stage makes. The removals are announced in the
//! record, run to their end, and stages wait for them: for an answer within their deadline while the removal runs in
//! the same process, else UNAVAILABLE. Every release, both backends.

use super::*;
use sim::CsiProxyVersion;

/// kubelet's NodeUnstageVolume of `id`, given up (its RPC cancelled, as a passed deadline ends it) while the held
/// removal runs on. (Real time in these tests: a held call's own client deadline is an hour away, and paused time
/// would jump to it whenever the runtime is idle.)
async fn unstage_given_up(env: &Env, id: &str) {
    let before = env.hung_calls();
    let req = unstage_req(id);
    tokio::select! {
        r = env.mgr.unstage(&req, d()) => panic!("the unstage of {id} ended under the held removal: {r:?}"),
        () = env.hung_at_least(before + 1) => {}
    }
}

/// What this driver process knows of its removals changes (a removal's task answered): taken before a removal is let
/// go, it wakes [`until`] without polling the host.
fn removal_changes(env: &Env) -> tokio::sync::watch::Receiver<u64> {
    env.mgr.protocol().1.removal_changes()
}

/// Hold the next mapping removal where it goes on after its driver was killed: csi-proxy's RPC, or natively the WMI
/// method in its provider (the native backend's sequence before the method dies with the process).
fn hold_mapping_removal_in_host(env: &Env) {
    let method = match env.backend {
        sim::wmi::TestBackend::CsiProxy => "RemoveSmbGlobalMapping",
        sim::wmi::TestBackend::Native => "MSFT_SmbGlobalMapping.Remove",
    };
    env.sim.hang_nth(method, 1).expect("hold");
}

/// [`unstage_given_up`] under a removal held by [`hold_mapping_removal_in_host`].
async fn unstage_given_up_in_host(env: &Env, id: &str) {
    let before = env.sim.hung_calls();
    let req = unstage_req(id);
    tokio::select! {
        r = env.mgr.unstage(&req, d()) => panic!("the unstage of {id} ended under the held removal: {r:?}"),
        () = env.sim.wait_hung(before + 1) => {}
    }
}

/// Resolves once `done` holds, looked at each time the driver process `changes` came from learns a removal's answer
/// (also when that process was killed by a restart: its task still ends when the host's call does — on a broken
/// connection, or natively with the method's answer — and can do nothing more, so it is only a wake-up here). The
/// bound only turns a hang into a failure.
async fn until(
    mut changes: tokio::sync::watch::Receiver<u64>,
    what: &str,
    mut done: impl FnMut() -> bool,
) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !done() {
            if changes.changed().await.is_err() {
                break;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never: {what}"));
    assert!(done(), "never: {what}");
}

fn unavailable_for_removal(r: Result<(), Error>, when: &str) {
    match r {
        Err(Error::Unavailable(m)) if m.contains("has not finished") && m.contains("\"v1\"") => {}
        other => panic!("{when}: the stage did not wait for the removal: {other:?}"),
    }
}

/// A stage of `id` while this process's removal runs waits for it (no answer, no record) and goes on once it ended:
/// kubelet gets OK without a retry, and what the stage made outlives the removal.
async fn waits_for_the_removal_then_stages(env: &Env, id: &str, when: &str) {
    let mut waiters = env.mgr.protocol().1.removal_waiters();
    let changes = removal_changes(env);
    let req = stage_req(id, SHARE, None, "bob");
    let mut stage = std::pin::pin!(env.stage(&req, d()));
    tokio::select! {
        r = &mut stage => panic!("{when}: the stage of {id} answered while the removal ran: {r:?}"),
        r = waiters.wait_for(|n| *n >= 1) => { r.expect("waiters"); }
    }
    env.release();
    stage
        .await
        .unwrap_or_else(|e| panic!("{when}: the stage of {id} once the removal ended: {e}"));
    until(changes, "the removal's task answered", || {
        env.hung_calls() == 0
    })
    .await;
    assert!(
        env.resolves(&norm_staging(id)),
        "{when}: the stage of {id} answered OK, and the late removal took away what it made"
    );
}

/// A stage whose deadline comes while this process's removal still runs answers UNAVAILABLE naming it.
async fn unavailable_at_its_deadline(env: &Env, id: &str, when: &str) {
    let short = Deadline::after(Duration::from_millis(200));
    unavailable_for_removal(
        env.stage(&stage_req(id, SHARE, None, "bob"), short).await,
        when,
    );
    assert!(
        env.mgr.store().volume(id).expect("read").is_none(),
        "{when}: a stage that waited in vain leaves no record"
    );
}

#[tokio::test]
async fn a_mapping_removal_that_outlives_its_unstage_is_waited_for_by_the_next_stage() {
    for v in CsiProxyVersion::ALL {
        let when = v.to_string();
        let env = new_env(false);
        env.sim.set_csi_proxy_version(v).expect("release");
        env.stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("v1");
        env.hold_nth(RemoveSmbGlobalMapping, 1);
        unstage_given_up(&env, "v1").await;
        // Another volume of the share: the old mapping is still there, and would go from under it. This process
        // runs the removal: the stage waits for its answer, within its deadline.
        unavailable_at_its_deadline(&env, "v2", &when).await;
        // The removal ends while the stage waits; the stage maps the share afresh and keeps its mapping.
        waits_for_the_removal_then_stages(&env, "v2", &when).await;
        // kubelet's retry of v1's unstage finishes it; v2's mapping stays.
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{when}: v1 unstage retry: {e}"));
        assert!(env.resolves(&norm_staging("v2")), "{when}");
    }
}

#[tokio::test]
async fn a_link_removal_that_outlives_its_unstage_is_waited_for_by_the_volumes_next_stage() {
    for v in CsiProxyVersion::ALL {
        let when = v.to_string();
        let env = new_env(false);
        env.sim.set_csi_proxy_version(v).expect("release");
        env.stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .expect("v1");
        env.stage(&stage_req("v9", SHARE, None, "bob"), d())
            .await
            .expect("v9 keeps the mapping");
        env.hold_nth(Rmdir, 1);
        unstage_given_up(&env, "v1").await;
        // kubelet stages the volume again (a new pod): the link is still there and would look staged. The stage
        // waits for this process's removal, then makes the link afresh.
        waits_for_the_removal_then_stages(&env, "v1", &when).await;
    }
}

/// A driver killed while its removals ran: the restarted driver learns the link's removal from the host (the path is
/// gone) and natively the mapping's (the in-flight ledger until the mapping list shows it gone); a mapping's removal
/// through csi-proxy cannot be observed, so stages of the share wait for the node's reboot or the one-hour bound.
#[tokio::test]
async fn after_a_restart_the_removals_are_learned_from_the_host_a_reboot_or_the_bound() {
    let mut env = new_env(false);
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("v1");
    // The link's removal, held where a killed driver leaves it running: csi-proxy's RPC, or natively the Win32 call
    // (the driver's port call held before the host would die with the process and never land).
    env.sim
        .hang_nth(env.per_backend("Rmdir", "RemoveDirectoryW"), 1)
        .expect("hold");
    unstage_given_up_in_host(&env, "v1").await;
    let changes = removal_changes(&env);
    env.restart();
    unavailable_for_removal(
        env.stage(&stage_req("v1", SHARE, None, "bob"), d()).await,
        "the link is still there",
    );
    env.release();
    until(changes, "the link is removed", || {
        !env.exists(&staging("v1"))
    })
    .await;
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("the path is gone: the removal is over");
    // The mapping's removal, held where a killed driver leaves it running.
    hold_mapping_removal_in_host(&env);
    unstage_given_up_in_host(&env, "v1").await;
    let changes = removal_changes(&env);
    env.restart();
    unavailable_for_removal(
        env.stage(&stage_req("v2", SHARE, None, "bob"), d()).await,
        "while the removal runs",
    );
    env.release();
    until(changes, "the mapping is removed", || {
        mappings(&env).is_empty()
    })
    .await;
    if env.backend == sim::wmi::TestBackend::Native {
        // Natively the in-flight ledger holds `MSFT_SmbGlobalMapping.Remove` until the mapping list shows it gone.
        env.stage(&stage_req("v2", SHARE, None, "bob"), d())
            .await
            .expect("natively the mapping list shows the removal ended");
    } else {
        unavailable_for_removal(
            env.stage(&stage_req("v2", SHARE, None, "bob"), d()).await,
            "a new process cannot observe it through csi-proxy",
        );
        // Nothing is in flight any more: the clock can be moved on to the bound.
        tokio::time::pause();
        tokio::time::advance(Duration::from_secs(3600)).await;
        env.stage(&stage_req("v2", SHARE, None, "bob"), d())
            .await
            .expect("after the bound");
        tokio::time::resume();
    }
    assert!(env.resolves(&norm_staging("v2")));
    // A reboot ends every call from before it at once. (kubelet's retry of v1's unstage ends v1 first.)
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("v1's unstage retry");
    hold_mapping_removal_in_host(&env);
    unstage_given_up_in_host(&env, "v2").await;
    env.restart();
    unavailable_for_removal_of(
        env.stage(&stage_req("v3", SHARE, None, "bob"), d()).await,
        "v2",
        "before the reboot",
    );
    env.sim.reboot().expect("reboot");
    env.stage(&stage_req("v3", SHARE, None, "bob"), d())
        .await
        .expect("the node rebooted since the removal was announced");
}

fn unavailable_for_removal_of(r: Result<(), Error>, volume: &str, when: &str) {
    match r {
        Err(Error::Unavailable(m))
            if m.contains("has not finished") && m.contains(&format!("{volume:?}")) => {}
        other => panic!("{when}: the stage did not wait for {volume}'s removal: {other:?}"),
    }
}

/// The driver killed inside the share's last mapping removal, then kubelet's retried unstage of the volume: its own
/// removal answers and its record goes, which proves nothing of the earlier call (through csi-proxy it runs on in its
/// own PowerShell process). A stage of the share must go on waiting for it — or the late removal takes the new
/// mapping from under the new pod — until a reboot (or the bound) ends it; natively the backend's ledger settles it.
#[tokio::test]
async fn kubelets_retried_unstage_does_not_end_a_removal_a_killed_driver_left_running() {
    let mut env = new_env(false);
    let when = format!("{:?}", env.backend);
    env.sim
        .with_state_mut(|s| s.set_uptime(Duration::from_secs(86_400)));
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("v1");
    hold_mapping_removal_in_host(&env);
    unstage_given_up_in_host(&env, "v1").await;
    // The killed process's removal task goes on (the held call answers it once released).
    let changes = removal_changes(&env);
    env.restart();
    // kubelet's retry of v1's unstage: its own removal answers, the record goes.
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .unwrap_or_else(|e| panic!("{when}: v1's unstage retry: {e}"));
    assert!(env.mgr.store().volume("v1").expect("read").is_none());
    let orphans = env.mgr.store().dir().join("smb-removals");
    if env.backend == sim::wmi::TestBackend::Native {
        // The backend's ledger holds the earlier `MSFT_SmbGlobalMapping.Remove` until the mapping list shows it gone.
        env.release();
        until(changes.clone(), "the held removal ended", || {
            env.sim.hung_calls() == 0
        })
        .await;
        env.stage(&stage_req("v2", SHARE, None, "bob"), d())
            .await
            .unwrap_or_else(|e| panic!("{when}: natively the ledger settles it: {e}"));
    } else {
        match env.stage(&stage_req("v2", SHARE, None, "bob"), d()).await {
            Err(Error::Unavailable(m)) if m.contains("\"v1\"") && m.contains(wincsi_way_back()) => {
            }
            other => panic!("{when}: the stage did not wait for v1's earlier removal: {other:?}"),
        }
        // The late removal runs now: with nothing of the share mapped, it takes nothing.
        env.release();
        until(changes.clone(), "the held removal ended", || {
            env.sim.hung_calls() == 0
        })
        .await;
        // Its end cannot be observed through csi-proxy: still waiting, until the node reboots.
        assert!(
            matches!(
                env.stage(&stage_req("v2", SHARE, None, "bob"), d()).await,
                Err(Error::Unavailable(_))
            ),
            "{when}: a new process cannot observe the end through csi-proxy"
        );
        assert_eq!(
            std::fs::read_dir(&orphans).map(|d| d.count()).unwrap_or(0),
            1,
            "{when}: kept on its own"
        );
        env.sim.reboot().expect("reboot");
        env.stage(&stage_req("v2", SHARE, None, "bob"), d())
            .await
            .unwrap_or_else(|e| panic!("{when}: the node rebooted since: {e}"));
    }
    assert!(env.resolves(&norm_staging("v2")), "{when}: v2's mapping");
    assert_eq!(
        std::fs::read_dir(&orphans).map(|d| d.count()).unwrap_or(0),
        0,
        "{when}: the kept removal leaves once it is over"
    );
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .unwrap_or_else(|e| panic!("{when}: v2's unstage: {e}"));
    assert!(
        mappings(&env).is_empty(),
        "{when}: v2's unstage removes the mapping"
    );
}

fn wincsi_way_back() -> &'static str {
    crate::lifecycle::outlive::WAY_BACK
}
