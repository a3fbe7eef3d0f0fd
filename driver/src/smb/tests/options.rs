//! Per-volume SMB client options (issue 40 item 2): the volume context's `requirePrivacy`, `requireIntegrity`,
//! `useWriteThrough`, `compressNetworkTraffic`, `transportType` and `blockNTLM` reach `MSFT_SmbGlobalMapping.Create`
//! on the native backend, each checked against the node's Windows build first; a mapping of the share that exists
//! weaker than asked is refused, a stronger one reused; csiProxy mode refuses every option before any record or host
//! call, naming `mode: hostProcess`.

use super::*;

/// Server `srv` (SMB encryption, QUIC) with shares `team` and `apps`; `CORP\bob` may use both.
fn env() -> Env {
    let bob = serde_json::json!({"user": "bob", "password": "pw-1", "domain": "CORP"});
    Env::on(
        sim::wmi::TestBackend::from_env_or_panic(),
        &serde_json::json!({
            "smb": {"servers": [{"name": "srv", "quic": true, "accounts": [bob],
                                 "shares": [{"name": "team"}, {"name": "apps"}]}]}
        }),
    )
}

fn with_options(mut req: StageRequest, options: &[(&str, &str)]) -> StageRequest {
    for (k, v) in options {
        req.volume_context.insert((*k).into(), (*v).into());
    }
    req
}

fn native(env: &Env) -> bool {
    env.per_backend(false, true)
}

fn creates(env: &Env) -> Vec<serde_json::Value> {
    env.sim
        .audit(0)
        .into_iter()
        .filter(|e| e.rpc == "MSFT_SmbGlobalMapping.Create")
        .map(|e| e.args)
        .collect()
}

const ALL: [(&str, &str); 6] = [
    ("requirePrivacy", "true"),
    ("requireIntegrity", "true"),
    ("useWriteThrough", "true"),
    ("compressNetworkTraffic", "true"),
    ("transportType", "quic"),
    ("blockNTLM", "true"),
];

#[tokio::test]
async fn client_options_reach_create_natively_and_csi_proxy_mode_refuses_them() {
    let env = env();
    env.script(|s| s.set_windows_build(26100));
    let req = with_options(stage_req("o1", r"\\srv\team", None, "bob"), &ALL);
    let r = env.stage(&req, d()).await;
    if !native(&env) {
        match &r {
            Err(Error::FailedPrecondition(m)) => assert!(
                m.contains("mode: hostProcess")
                    && m.contains("requirePrivacy")
                    && m.contains("transportType")
                    && m.contains("blockNTLM"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(env.ops().is_empty(), "refused before any host call");
        assert!(env.mgr.store().volume("o1").expect("read").is_none());
        env.assert_clean();
        return;
    }
    r.expect("stage");
    let c = creates(&env);
    assert_eq!(c.len(), 1, "{c:?}");
    for (key, value) in [
        ("require_privacy", serde_json::json!(true)),
        ("require_integrity", serde_json::json!(true)),
        ("use_write_through", serde_json::json!(true)),
        ("compress_network_traffic", serde_json::json!(true)),
        ("transport_type", serde_json::json!("QUIC")),
        ("block_ntlm", serde_json::json!(true)),
    ] {
        assert_eq!(c[0][key], value, "{key}: {:?}", c[0]);
    }
    let m = &mappings(&env)[r"\\srv\team"];
    assert!(m.require_privacy && m.options.use_write_through && m.options.block_ntlm);
    assert_eq!(m.options.transport_type, 2);
    // The record keeps what was asked (never a secret).
    let rec = env.mgr.store().volume("o1").expect("read").expect("record");
    let facts = rec.details::<SmbRecord>().expect("facts").expect("smb");
    assert_eq!(facts.options, parse_stage(&req).expect("parse").options);
    // A second volume of the share asking the same reuses the mapping (no second Create).
    env.stage(
        &with_options(stage_req("o2", r"\\srv\team", Some("b"), "bob"), &ALL),
        d(),
    )
    .await
    .expect("stage o2");
    assert_eq!(creates(&env).len(), 1);
    for id in ["o1", "o2"] {
        env.mgr
            .unstage(&unstage_req(id), d())
            .await
            .expect("unstage");
    }
    assert!(mappings(&env).is_empty());
    env.assert_clean();
}

#[tokio::test]
async fn an_option_the_node_s_build_lacks_is_refused_naming_it_the_build_it_needs_and_the_node_s() {
    let env = env();
    if !native(&env) {
        return; // csiProxy mode refuses every option (the test above).
    }
    // The simulated node is Windows Server 2019 (17763) unless told otherwise.
    let req = with_options(
        stage_req("o1", r"\\srv\team", None, "bob"),
        &[("transportType", "quic"), ("useWriteThrough", "true")],
    );
    let err = env.stage(&req, d()).await.expect_err("refused");
    match &err {
        Error::FailedPrecondition(m) => assert!(
            m.contains("transportType needs build 26100")
                && m.contains("useWriteThrough needs build 20348")
                && m.contains("17763"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(creates(&env).is_empty(), "no Create on a node without it");
    assert!(mappings(&env).is_empty());
    assert!(env.mgr.store().volume("o1").expect("read").is_none());
    // Windows Server 2022 has UseWriteThrough, not QUIC.
    env.script(|s| s.set_windows_build(20348));
    let err = env.stage(&req, d()).await.expect_err("refused");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains("transportType") && !m.contains("useWriteThrough")),
        "{err:?}"
    );
    env.script(|s| s.set_windows_build(26100));
    env.stage(&req, d()).await.expect("stage on 2025");
    env.mgr
        .unstage(&unstage_req("o1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

#[tokio::test]
async fn a_mapping_weaker_than_asked_is_refused_and_one_at_least_as_strong_is_reused() {
    let env = env();
    if !native(&env) {
        return;
    }
    env.script(|s| s.set_windows_build(20348));
    // The first volume maps the share with write-through (and encryption, --smb-require-privacy).
    env.stage(
        &with_options(
            stage_req("w1", r"\\srv\team", Some("a"), "bob"),
            &[("useWriteThrough", "true")],
        ),
        d(),
    )
    .await
    .expect("stage");
    // A volume asking for signing the mapping does not show: refused, naming what and what to do; nothing changes.
    let err = env
        .stage(
            &with_options(
                stage_req("w2", r"\\srv\team", Some("b"), "bob"),
                &[("requireIntegrity", "true")],
            ),
            d(),
        )
        .await
        .expect_err("weaker");
    match &err {
        Error::FailedPrecondition(m) => assert!(
            m.contains("requireIntegrity: asked true")
                && m.contains("weaker")
                && m.contains("same options")
                && m.contains(
                    r#"volumes on this node using the share: "w1" (useWriteThrough=true)"#
                ),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(env.mgr.store().volume("w2").expect("read").is_none());
    assert_eq!(creates(&env).len(), 1);
    // Asking less than the mapping has (no write-through, encryption) reuses it.
    env.stage(
        &with_options(
            stage_req("w3", r"\\srv\team", Some("c"), "bob"),
            &[("useWriteThrough", "false"), ("requirePrivacy", "true")],
        ),
        d(),
    )
    .await
    .expect("stronger mapping reused");
    assert_eq!(creates(&env).len(), 1);
    for id in ["w1", "w3"] {
        env.mgr
            .unstage(&unstage_req(id), d())
            .await
            .expect("unstage");
    }
    env.assert_clean();
}

#[tokio::test]
async fn an_unencrypted_mapping_someone_else_made_is_refused_to_a_volume_that_asks_for_encryption()
{
    let env = env();
    if !native(&env) {
        return;
    }
    // Another component mapped `apps` without RequirePrivacy (csi-proxy with -require-privacy=false, an admin).
    env.script(|s| {
        s.map_share_as_another_client(
            r"\\srv\apps",
            r"CORP\bob",
            &sim::Secret::new("pw-1"),
            false,
            sim::state::MappingOptions::default(),
        )
    })
    .expect("mapped");
    let err = env
        .stage(
            &with_options(
                stage_req("e1", r"\\srv\apps", None, "bob"),
                &[("requirePrivacy", "true")],
            ),
            d(),
        )
        .await
        .expect_err("weaker");
    assert!(
        matches!(&err, Error::FailedPrecondition(m)
            if m.contains("requirePrivacy: asked true, the mapping's RequirePrivacy is false")
                && m.contains(r"Remove-SmbGlobalMapping -RemotePath \\srv\apps")),
        "{err:?}"
    );
    assert!(
        mappings(&env).contains_key(r"\\srv\apps"),
        "someone else's mapping is left in place"
    );
    // A volume that says nothing keeps the --smb-require-privacy rule: reused, with the warning and the metric.
    env.stage(&stage_req("e2", r"\\srv\apps", None, "bob"), d())
        .await
        .expect("reused as before");
    env.mgr
        .unstage(&unstage_req("e2"), d())
        .await
        .expect("unstage");
}
