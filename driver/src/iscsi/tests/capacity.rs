//! Issue 41 item 4: the node's volume limit (NodeGetInfo's `max_volumes_per_node`, KEP-4876) and the stage on a full
//! node (RESOURCE_EXHAUSTED): what `--max-volumes-per-node` configures, and natively what the iSCSI initiator
//! allows minus the sessions other software holds.

use sim::state::AuthType;

use super::*;

/// [`scenario`] with a second target, IQN2 (LUN 0), behind the same portal: another tool's sessions go there.
fn env() -> Env {
    Env::with(|sc| {
        sc["iscsi"]["portals"][0]["targets"]
            .as_array_mut()
            .expect("targets")
            .push(json!({"iqn": IQN2, "luns": [{"lun": 0, "id": "other0", "size": GIB}]}));
    })
}

/// Another tool (an administrator's `Connect-IscsiTarget`) logs in to IQN2.
fn someone_logs_in_to_iqn2(env: &Env) {
    env.script(|s| {
        s.add_target_portal("10.0.0.5", 3260)?;
        s.connect_target(
            "10.0.0.5",
            3260,
            IQN2,
            AuthType::None,
            "",
            &sim::Secret::new(""),
        )
    })
    .expect("the other tool's login");
}

fn session_limit(env: &Env, n: u32) {
    env.script(|s| {
        let mut b = *s.behaviour();
        b.iscsi_session_limit = n;
        s.set_behaviour(b)
    })
    .expect("behaviour");
}

async fn limit(env: &Env, configured: i64) -> i64 {
    env.mgr
        .node_volume_limit(configured, d())
        .await
        .expect("limit")
}

#[tokio::test(start_paused = true)]
async fn the_limit_is_what_the_initiator_allows_minus_other_sessions_natively_and_the_configured_one_else()
 {
    let env = env();
    env.mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect("stage");
    match env.backend {
        sim::wmi::TestBackend::Native => {
            // One volume held, 255 sessions free.
            assert_eq!(limit(&env, 0).await, ISCSI_SESSION_LIMIT as i64);
            someone_logs_in_to_iqn2(&env);
            assert_eq!(limit(&env, 0).await, ISCSI_SESSION_LIMIT as i64 - 1);
            // The configured limit caps it.
            assert_eq!(limit(&env, 16).await, 16);
            env.script(|s| s.disconnect_target("10.0.0.5", 3260, IQN2))
                .expect("the other tool logs out");
        }
        sim::wmi::TestBackend::CsiProxy => {
            // csi-proxy cannot list the node's sessions: the configured limit, as given.
            someone_logs_in_to_iqn2(&env);
            assert_eq!(limit(&env, 0).await, 0);
            assert_eq!(limit(&env, 16).await, 16);
            env.script(|s| s.disconnect_target("10.0.0.5", 3260, IQN2))
                .expect("the other tool logs out");
        }
    }
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_first_stage_past_the_configured_limit_is_resource_exhausted_before_any_host_call() {
    let mut env = env();
    env.set_volume_limit(1);
    env.mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect("stage");
    env.ops();
    let err = env
        .mgr
        .stage(&stage_req("v2", 1, &[], &[]), d())
        .await
        .expect_err("full");
    assert!(matches!(err, Error::ResourceExhausted(_)), "{err:?}");
    assert!(
        err.to_string().contains("--max-volumes-per-node 1"),
        "{err}"
    );
    assert_eq!(env.ops(), [], "nothing asked of the host");
    assert!(env.mgr.store().volume("v2").expect("read").is_none());
    // The staged volume's retry is no new volume.
    env.mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect("re-stage");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.mgr
        .stage(&stage_req("v2", 1, &[], &[]), d())
        .await
        .expect("room again");
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .expect("unstage");
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

#[tokio::test(start_paused = true)]
async fn a_login_past_the_initiators_session_limit_is_resource_exhausted() {
    let env = env();
    session_limit(&env, 1);
    someone_logs_in_to_iqn2(&env);
    let err = env
        .mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect_err("no session left");
    assert!(matches!(err, Error::ResourceExhausted(_)), "{err:?}");
    assert!(err.to_string().contains("refuses another session"), "{err}");
    // A definite failure of a first stage: nothing kept.
    assert!(env.mgr.store().volume("v1").expect("read").is_none());
    env.script(|s| s.disconnect_target("10.0.0.5", 3260, IQN2))
        .expect("the other tool logs out");
    session_limit(&env, 256);
    env.mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect("a session is free again");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}
