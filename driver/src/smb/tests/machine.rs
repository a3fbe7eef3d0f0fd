//! `authentication: machine` (issue 40 item 1): a share mapped as the node's computer account, with no credential;
//! native backend only, refused on csiProxy mode with the reason; the machine account is a principal of its own for
//! the one-account-per-server rule (1219) and shares its mapping's reference count like any principal.

use super::*;

/// A domain-joined node (`CORP\NODE1$`): server `srv` knows it (share `team` lets it in, `private` does not, `other`
/// lets everyone); server `nas` is of another domain (no computer account of the node).
fn env() -> Env {
    let bob = serde_json::json!({"user": "bob", "password": "pw-1", "domain": "CORP"});
    Env::on(
        sim::wmi::TestBackend::from_env_or_panic(),
        &serde_json::json!({
            "smb": {
                "node_account": r"CORP\NODE1$",
                "servers": [
                    {"name": "srv", "computers": [r"CORP\NODE1$"], "accounts": [bob],
                     "shares": [{"name": "team", "users": ["NODE1$", "bob"]}, {"name": "private", "users": ["bob"]},
                                {"name": "other"}]},
                    {"name": "nas", "accounts": [bob], "shares": [{"name": "data"}]}
                ]
            }
        }),
    )
}

fn machine_req(id: &str, source: &str, sub_dir: Option<&str>) -> StageRequest {
    let mut req = stage_req(id, source, sub_dir, "bob");
    req.secrets = Secrets::default();
    req.volume_context
        .insert("authentication".into(), "machine".into());
    req
}

fn native(env: &Env) -> bool {
    env.per_backend(false, true)
}

#[tokio::test]
async fn a_machine_account_volume_maps_without_a_credential_natively_and_csi_proxy_mode_refuses_it()
{
    let env = env();
    let r = env
        .stage(&machine_req("m1", r"\\srv\team", None), d())
        .await;
    if !native(&env) {
        match &r {
            Err(Error::FailedPrecondition(m)) => {
                assert!(
                    m.contains("mode: hostProcess") && m.contains("machine"),
                    "{m}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(env.ops().is_empty(), "refused before any host call");
        assert!(env.mgr.store().volume("m1").expect("read").is_none());
        env.assert_clean();
        return;
    }
    r.expect("stage");
    assert_eq!(mappings(&env)[r"\\srv\team"].principal, "");
    let creates: Vec<_> = env
        .sim
        .audit(0)
        .into_iter()
        .filter(|e| e.rpc == "MSFT_SmbGlobalMapping.Create")
        .collect();
    assert_eq!(creates.len(), 1, "{creates:?}");
    assert!(
        creates[0].args["user_name"].is_null(),
        "Create without a Credential: {:?}",
        creates[0].args
    );
    env.publish(&publish_req("m1", "p1"), d())
        .await
        .expect("publish");
    assert!(env.resolves(&target("p1")));
    env.mgr
        .unpublish(&unpublish_req("m1", "p1"), d())
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("m1"), d())
        .await
        .expect("unstage");
    assert!(mappings(&env).is_empty());
    env.assert_clean();
}

#[tokio::test]
async fn the_machine_account_is_a_principal_of_its_own_for_1219_and_reference_counting() {
    let env = env();
    if !native(&env) {
        return; // csiProxy mode refuses every machine-account volume (the test above).
    }
    // Two machine-account volumes of one share share its mapping: the first unstage keeps it.
    for (id, sub) in [("m1", "a"), ("m2", "b")] {
        env.stage(&machine_req(id, r"\\srv\team", Some(sub)), d())
            .await
            .expect("stage");
    }
    // A password volume of the same server is the 1219 case, refused up front naming the machine account.
    let err = env
        .stage(&stage_req("p1", r"\\srv\other", None, "bob"), d())
        .await
        .expect_err("1219");
    match &err {
        Error::FailedPrecondition(m) => {
            assert!(m.contains("1219") && m.contains("computer account"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    env.mgr
        .unstage(&unstage_req("m1"), d())
        .await
        .expect("unstage");
    assert!(
        mappings(&env).contains_key(r"\\srv\team"),
        "m2 still uses it"
    );
    env.mgr
        .unstage(&unstage_req("m2"), d())
        .await
        .expect("unstage");
    assert!(mappings(&env).is_empty());
    // And the other way round: a password volume first, then a machine-account one.
    env.stage(&stage_req("p1", r"\\srv\other", None, "bob"), d())
        .await
        .expect("stage");
    let err = env
        .stage(&machine_req("m3", r"\\srv\team", None), d())
        .await
        .expect_err("1219");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains(r"CORP\bob") && m.contains("1219")),
        "{err:?}"
    );
    // Another server is another principal's business.
    env.mgr
        .unstage(&unstage_req("p1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

#[tokio::test]
async fn a_share_the_computer_account_may_not_use_fails_the_stage_and_leaves_nothing() {
    let env = env();
    if !native(&env) {
        return;
    }
    for source in [r"\\srv\private", r"\\nas\data"] {
        let r = env.stage(&machine_req("m1", source, None), d()).await;
        assert!(r.is_err(), "{source}: {r:?}");
        assert!(env.mgr.store().volume("m1").expect("read").is_none());
        env.assert_clean();
    }
}

#[test]
fn authentication_machine_takes_no_credential_and_unknown_values_are_refused() {
    let ctx = |auth: &str| -> BTreeMap<String, String> {
        [
            ("source".to_owned(), r"\\srv\team".to_owned()),
            ("Authentication".to_owned(), auth.to_owned()),
        ]
        .into()
    };
    let v = parse_volume(&ctx("Machine"), &Secrets::default()).expect("machine");
    assert!(v.machine && v.credential.is_none());
    let v = parse_volume(
        &ctx("password"),
        &Secrets::new([("username", "bob"), ("password", "pw-1")]),
    )
    .expect("password");
    assert!(!v.machine && v.principal() == Some("bob"));
    let err = parse_volume(
        &ctx("machine"),
        &Secrets::new([("username", "bob"), ("password", "the-secret-pw")]),
    )
    .expect_err("ambiguous");
    let m = err.to_string();
    assert!(
        m.contains("username, password") && !m.contains("the-secret-pw"),
        "{m}"
    );
    assert!(matches!(
        parse_volume(&ctx("kerberos"), &Secrets::default()),
        Err(Error::InvalidArgument(_))
    ));
}
