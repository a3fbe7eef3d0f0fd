//! Issue 37 item 9 (SMB): a staging link's `Rmdir` or a share's `RemoveSmbGlobalMapping` that finishes after the
//! unstage that issued it gave up must not take away what a later stage makes. The removals are announced in the
//! record, run to their end, and stages wait for them (UNAVAILABLE meanwhile). Every release, both backends.

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

/// Resolves once `done` holds (polling the host's state; the removal runs on its own task).
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never: {what}"));
}

fn unavailable_for_removal(r: Result<(), Error>, when: &str) {
    match r {
        Err(Error::Unavailable(m)) if m.contains("has not finished") && m.contains("\"v1\"") => {}
        other => panic!("{when}: the stage did not wait for the removal: {other:?}"),
    }
}

/// The stage of `id` waits for the removal; were it to succeed, the late removal would take away what it made: shown
/// by letting the removal end and looking at the stage's staging link.
async fn waits_for_the_removal(env: &Env, id: &str, when: &str) {
    let r = env.stage(&stage_req(id, SHARE, None, "bob"), d()).await;
    if r.is_ok() {
        env.release();
        until("the removal ends", || env.hung_calls() == 0).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        panic!(
            "{when}: the stage of {id} succeeded under the removal, whose end then left its staging link reaching \
             the share: {}",
            env.resolves(&norm_staging(id))
        );
    }
    unavailable_for_removal(r, when);
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
        // Another volume of the share: the old mapping is still there, and would go from under it.
        waits_for_the_removal(&env, "v2", &when).await;
        assert!(
            env.mgr.store().volume("v2").expect("read").is_none(),
            "{when}"
        );
        // The removal ends; the next stage maps the share afresh and keeps its mapping.
        env.release();
        until("the mapping is removed", || mappings(&env).is_empty()).await;
        env.stage(&stage_req("v2", SHARE, None, "bob"), d())
            .await
            .unwrap_or_else(|e| panic!("{when}: v2 once the removal ended: {e}"));
        assert!(
            env.resolves(&norm_staging("v2")),
            "{when}: v2 lost its mapping"
        );
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
        // kubelet stages the volume again (a new pod): the link is still there and would look staged.
        waits_for_the_removal(&env, "v1", &when).await;
        env.release();
        until("the link is removed", || !env.exists(&staging("v1"))).await;
        env.stage(&stage_req("v1", SHARE, None, "bob"), d())
            .await
            .unwrap_or_else(|e| panic!("{when}: re-stage once the removal ended: {e}"));
        assert!(env.resolves(&norm_staging("v1")), "{when}");
    }
}

/// A driver killed while its removals ran: the restarted driver learns the link's removal from the host (the path is
/// gone); a mapping's removal through csi-proxy cannot be observed, so stages of the share wait for the node's reboot
/// or the one-hour bound.
#[tokio::test]
async fn after_a_restart_the_removals_are_learned_from_the_host_a_reboot_or_the_bound() {
    let mut env = new_env(false);
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("v1");
    env.hold_nth(Rmdir, 1);
    unstage_given_up(&env, "v1").await;
    env.restart();
    unavailable_for_removal(
        env.stage(&stage_req("v1", SHARE, None, "bob"), d()).await,
        "the link is still there",
    );
    env.release();
    until("the link is removed", || !env.exists(&staging("v1"))).await;
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("the path is gone: the removal is over");
    // The mapping's removal.
    env.hold_nth(RemoveSmbGlobalMapping, 1);
    unstage_given_up(&env, "v1").await;
    env.restart();
    env.release();
    until("the mapping is removed", || mappings(&env).is_empty()).await;
    unavailable_for_removal(
        env.stage(&stage_req("v2", SHARE, None, "bob"), d()).await,
        "a new process cannot observe it",
    );
    // Nothing is in flight any more: the clock can be moved on to the bound.
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(3600)).await;
    env.stage(&stage_req("v2", SHARE, None, "bob"), d())
        .await
        .expect("after the bound");
    assert!(env.resolves(&norm_staging("v2")));
    // A reboot ends every call from before it at once. (kubelet's retry of v1's unstage ends v1 first.)
    tokio::time::resume();
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("v1's unstage retry");
    env.hold_nth(RemoveSmbGlobalMapping, 1);
    unstage_given_up(&env, "v2").await;
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
