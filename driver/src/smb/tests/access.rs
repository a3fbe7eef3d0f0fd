//! Issue 37 item 8: who may force-remove a share's mapping. An account allowed only below the share root (the
//! simulated host's per-directory access) is not a stale credential, and a mapping another staged volume still
//! reaches its share through is never removed by a stage's repair.

use super::*;

/// Server `fs1`: share `data`, whose root only `bob` may read; `alice` may map it and use `team-a` below it.
fn per_directory_env(backend: sim::wmi::TestBackend) -> Env {
    Env::on(
        backend,
        &serde_json::json!({
            "smb": {"servers": [{"name": "fs1",
                "accounts": [{"user": "alice", "password": "pw-1", "domain": "CORP"},
                             {"user": "bob", "password": "pw-1", "domain": "CORP"}],
                "shares": [{"name": "data", "acl": {"": ["bob"], "team-a": ["alice"]},
                            "files": {"team-a/a/keep.txt": "a", "team-a/b/keep.txt": "b"}}]}]}
        }),
    )
}

/// How often the host's mapping of `\\fs1\data` was removed (the Windows view's `MSFT_SmbGlobalMapping.Remove`, or
/// csi-proxy's removal of the same root, driver-asked or its own).
fn removals(env: &Env) -> usize {
    env.sim
        .audit(0)
        .iter()
        .filter(|e| e.rpc == "MSFT_SmbGlobalMapping.Remove" || e.rpc == "RemoveSmbGlobalMapping")
        .count()
}

/// An account allowed only below the root: the second volume of the share reuses the mapping the first one made,
/// on the native backend without removing it (it used to take the root's "access denied" for a stale credential and
/// remove the mapping with `Force`, cutting the first volume's open files, at every stage of the share).
#[tokio::test]
async fn an_account_allowed_only_below_the_root_keeps_one_mapping() {
    let env = per_directory_env(sim::wmi::TestBackend::from_env_or_panic());
    let req =
        |id: &str, dir: &str| stage_req(id, &format!(r"\\fs1\data\team-a\{dir}"), None, "alice");
    env.stage(&req("v1", "a"), d()).await.expect("v1");
    env.publish(&publish_req("v1", "p1"), d())
        .await
        .expect("publish v1");
    env.clear_calls();
    env.stage(&req("v2", "b"), d()).await.expect("v2");
    assert!(
        !env.ops().contains(&RemoveSmbGlobalMapping),
        "the driver asked to remove the mapping v1 uses:\n{}",
        env.calls_text()
    );
    if env.backend == sim::wmi::TestBackend::Native {
        assert_eq!(removals(&env), 0, "the native backend removed the mapping");
    }
    assert!(env.resolves(&target("p1")), "v1's pod lost its path");
    assert!(env.resolves(&norm_staging("v2")));
    assert_eq!(mappings(&env).len(), 1);
    for (id, pod) in [("v1", Some("p1")), ("v2", None)] {
        if let Some(pod) = pod {
            env.mgr
                .unpublish(&unpublish_req(id, pod), d())
                .await
                .expect("unpublish");
        }
        env.mgr
            .unstage(&unstage_req(id), d())
            .await
            .expect("unstage");
    }
    env.assert_clean();
}

/// A mapping that needs repair (Windows answers 85 for it twice) while another staged volume still reaches the
/// share through it: the stage is refused, naming that volume, and nothing is removed; once the mapping is usable
/// again the stage goes through.
#[tokio::test]
async fn a_mapping_another_volume_reaches_is_never_force_removed() {
    let env = new_env(false);
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("v1");
    env.publish(&publish_req("v1", "p1"), d())
        .await
        .expect("publish");
    let stale = "NewSmbGlobalMapping failed. output: \"New-SmbGlobalMapping : The local device name is already in \
                 use. FullyQualifiedErrorId : Windows System Error 85,New-SmbGlobalMapping\"";
    env.fail_nth(NewSmbGlobalMapping, 1, stale);
    env.fail_nth(NewSmbGlobalMapping, 2, stale);
    env.clear_calls();
    let err = env
        .stage(&stage_req("v2", r"\\srv\share\base", None, "bob"), d())
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains("\"v1\"") && m.contains(r"\\srv\share")),
        "{err:?}"
    );
    assert_eq!(
        env.take_ops(),
        vec![Rmdir, NewSmbGlobalMapping, NewSmbGlobalMapping, IsSymlink],
        "one IsSymlink of v1's staging link decides; nothing removed"
    );
    assert!(env.resolves(&target("p1")), "v1's pod lost its path");
    assert!(
        env.mgr.store().volume("v2").expect("read").is_none(),
        "a refused first stage keeps no record"
    );
    env.stage(&stage_req("v2", r"\\srv\share\base", None, "bob"), d())
        .await
        .expect("v2 once the mapping answers");
    assert_eq!(mappings(&env).len(), 1);
}

/// After a reboot every volume of the share is broken: the first re-stage may repair the Disconnected mapping with
/// the other volumes still recorded (none reaches the share), and each re-stage converges.
#[tokio::test]
async fn after_a_reboot_the_repair_goes_on_while_other_volumes_are_recorded() {
    let env = new_env(true);
    for id in ["v1", "v2"] {
        env.stage(&stage_req(id, SHARE, None, "bob"), d())
            .await
            .expect("stage");
    }
    env.sim.reboot().expect("reboot");
    for id in ["v1", "v2"] {
        env.stage(&stage_req(id, SHARE, None, "bob"), d())
            .await
            .unwrap_or_else(|e| panic!("re-stage {id}: {e}"));
        assert!(env.resolves(&norm_staging(id)), "{id}");
    }
    assert_eq!(mappings(&env)[SHARE].status, MappingStatus::Ok);
}
