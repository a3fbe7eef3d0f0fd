//! Issue 37, "give up and unstage" (SMB): a creating call of a stage — `NewSmbGlobalMapping` with its staging link,
//! the subDir's `Mkdir` through it — that hangs until kubelet gives up, then lands after kubelet's NodeUnstage. The
//! unstage answers UNAVAILABLE while it may still run and removes what landed once it ended; an empty subDir path a
//! late `Mkdir` left at the staging path never strands the volume. Every release, both backends.

use super::*;
use crate::locks::Deadline;
use sim::CsiProxyVersion;

/// kubelet's NodeStageVolume of `req`, given up (its RPC cancelled, as a passed deadline ends it) while the held
/// creating call runs on.
async fn stage_given_up(env: &Env, req: &StageRequest) {
    let before = env.hung_calls();
    tokio::select! {
        r = env.stage(req, d()) => panic!("the stage ended under the held call: {r:?}"),
        () = env.hung_at_least(before + 1) => {}
    }
}

/// Resolves once no call is held (the released call runs on its own task).
async fn until_released(env: &Env) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while env.hung_calls() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the held call ends");
}

async fn gives_up_then_unstages(env: &Env, req: &StageRequest, when: &str) {
    stage_given_up(env, req).await;
    // kubelet's NodeUnstage while the call may still land: not OK (its short deadline passes while it waits).
    match env
        .mgr
        .unstage(
            &unstage_req("v1"),
            Deadline::after(Duration::from_millis(300)),
        )
        .await
    {
        Err(Error::Unavailable(m)) if m.contains("has not finished") => {}
        other => {
            panic!("{when}: the unstage did not wait for the stage's creating call: {other:?}")
        }
    }
    assert!(
        env.mgr.store().volume("v1").expect("read").is_some(),
        "{when}: the record went while the call may land"
    );
    // The call lands; kubelet's retried unstage removes what it made.
    env.release();
    until_released(env).await;
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .unwrap_or_else(|e| panic!("{when}: the retried unstage: {e}"));
    assert!(mappings(env).is_empty(), "{when}: {:?}", mappings(env));
    assert!(
        !env.exists(&staging("v1")),
        "{when}: the staging link stays"
    );
    assert!(env.leftovers().is_empty(), "{when}: {:?}", env.leftovers());
    assert!(
        env.mgr.store().volume("v1").expect("read").is_none(),
        "{when}"
    );
    // No volume stranded: a new pod with the same inputs.
    env.stage(req, d())
        .await
        .unwrap_or_else(|e| panic!("{when}: a later stage: {e}"));
    assert!(env.resolves(&norm_staging("v1")), "{when}");
}

#[tokio::test]
async fn a_mapping_that_lands_after_kubelet_gave_up_is_waited_for_and_removed_by_the_unstage() {
    for v in CsiProxyVersion::ALL {
        let when = v.to_string();
        let env = new_env(false);
        env.sim.set_csi_proxy_version(v).expect("release");
        env.hold_nth(NewSmbGlobalMapping, 1);
        gives_up_then_unstages(&env, &stage_req("v1", SHARE, None, "bob"), &when).await;
    }
}

/// A `NewSmbGlobalMapping` whose work landed while its answer does not come (its csi-proxy connection gone silent; the
/// call's task may wait up to the outlive bound for it): kubelet's NodeUnstage sees the link and the mapping on the host
/// and goes on at once instead of answering UNAVAILABLE at every deadline until the task ends.
#[tokio::test]
async fn a_mapping_that_landed_while_its_answer_is_late_does_not_hold_up_the_unstage() {
    for v in CsiProxyVersion::ALL {
        let when = v.to_string();
        let env = new_env(false);
        env.sim.set_csi_proxy_version(v).expect("release");
        env.hold_answer_nth(NewSmbGlobalMapping, 1);
        let req = stage_req("v1", SHARE, None, "bob");
        stage_given_up(&env, &req).await;
        assert_eq!(mappings(&env).len(), 1, "{when}: the mapping landed");
        assert!(env.exists(&staging("v1")), "{when}: the link landed");
        env.mgr
            .unstage(&unstage_req("v1"), Deadline::after(Duration::from_secs(30)))
            .await
            .unwrap_or_else(|e| {
                panic!("{when}: the unstage waited for a call whose work is done: {e}")
            });
        assert!(mappings(&env).is_empty(), "{when}: {:?}", mappings(&env));
        assert!(!env.exists(&staging("v1")), "{when}: the link stays");
        assert!(
            env.mgr.store().volume("v1").expect("read").is_none(),
            "{when}"
        );
        // The late answer changes nothing on the host; a new pod with the same inputs stages.
        env.release();
        until_released(&env).await;
        assert!(mappings(&env).is_empty(), "{when}: {:?}", mappings(&env));
        assert!(env.leftovers().is_empty(), "{when}: {:?}", env.leftovers());
        env.stage(&req, d())
            .await
            .unwrap_or_else(|e| panic!("{when}: a later stage: {e}"));
        assert!(env.resolves(&norm_staging("v1")), "{when}");
    }
}

/// Through csi-proxy (natively a port-level hold of `Mkdir` is dropped with its caller and never reaches the host; the
/// matrix's facade-level `CreateDirectoryW #1/Hang/GiveUp` cell proves the native path).
#[tokio::test]
async fn a_sub_dir_mkdir_that_lands_after_kubelet_gave_up_is_waited_for_by_the_unstage() {
    for v in CsiProxyVersion::ALL {
        let when = v.to_string();
        let env = new_env_on(sim::wmi::TestBackend::CsiProxy, false);
        env.sim.set_csi_proxy_version(v).expect("release");
        env.hold_nth(Mkdir, 1);
        let req = stage_req("v1", r"\\srv\share\base", Some("team/data"), "bob");
        gives_up_then_unstages(&env, &req, &when).await;
    }
}

/// A late `Mkdir` a restarted driver could not wait for leaves the subDir's path as empty local directories under the
/// staging path: the next stage removes them, and still refuses anything else there.
#[tokio::test]
async fn the_empty_sub_dir_path_a_late_mkdir_left_never_strands_the_volume() {
    for v in CsiProxyVersion::ALL {
        let when = v.to_string();
        let env = new_env(false);
        env.sim.set_csi_proxy_version(v).expect("release");
        env.mkdir(&format!(r"{}\team\data", staging("v1")));
        let req = stage_req("v1", r"\\srv\share\base", Some("team/data"), "bob");
        env.stage(&req, d())
            .await
            .unwrap_or_else(|e| panic!("{when}: the stage refused the empty subDir path: {e}"));
        assert!(env.resolves(&norm_staging("v1")), "{when}");
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        // Something that is not the subDir's empty path is still refused, and left as it is.
        env.mkdir(&format!(r"{}\team\other", staging("v1")));
        let err = env.stage(&req, d()).await.expect_err("not only the subDir");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("non-empty")),
            "{when}: {err:?}"
        );
        assert!(
            env.exists(&format!(r"{}\team\other", staging("v1"))),
            "{when}"
        );
    }
}
