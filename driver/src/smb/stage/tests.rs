//! Recovery and rollback of SMB stages (issue 29 items 1 and 2): a node rebooted while its file server was down
//! comes back once the server does; a failed stage undoes every step it can.

use sim::CsiProxyVersion;
use sim::state::MappingStatus;

use crate::error::Error;
use crate::host::HostOp::*;
use crate::smb::tests::{
    SHARE, env_on, mappings, new_env, publish_req, stage_req, staging, target, unpublish_req,
    unstage_req,
};
use crate::state::Phase;
use crate::testing::{Env, d};

/// Volumes `v1` (published for pod `p1`) and `v2` of `\\srv\share` are staged; `srv` goes down; the node reboots (every
/// mapping Disconnected) and the driver restarts and reconciles; kubelet's re-stages fail during the outage; `srv`
/// comes back (`restart`: the driver restarts once more before kubelet's next retry). Then both volumes must
/// re-stage, the pod's path must reach the share again, and everything must tear down clean.
async fn reboot_during_an_outage(mut env: Env, what: &str, restart: bool) {
    for id in ["v1", "v2"] {
        env.stage(&stage_req(id, SHARE, None, "bob"), d())
            .await
            .unwrap_or_else(|e| panic!("{what}: stage {id}: {e}"));
    }
    env.publish(&publish_req("v1", "p1"), d())
        .await
        .unwrap_or_else(|e| panic!("{what}: publish: {e}"));
    env.script(|s| s.set_smb_reachable("srv", false))
        .expect("outage");
    env.sim.reboot().expect("reboot");
    env.restart();
    let report = env.mgr.reconcile(d()).await.expect("reconcile");
    // Nothing is removed: after the reboot kubelet's re-stages repair the links (issue 37 item 5).
    assert_eq!(report.unreachable, ["v1", "v2"], "{what}");
    assert!(report.restage.is_empty(), "{what}");
    // kubelet re-stages during the outage (twice: its retries): the server is not found.
    for _ in 0..2 {
        for id in ["v1", "v2"] {
            let err = env
                .stage(&stage_req(id, SHARE, None, "bob"), d())
                .await
                .expect_err("the server is down");
            assert!(
                matches!(&err, Error::FailedPrecondition(m) if m.contains("53")),
                "{what}: {id} during the outage: {err:?}"
            );
        }
    }
    env.script(|s| s.set_smb_reachable("srv", true))
        .expect("the server is back");
    if restart {
        env.restart();
        env.mgr.reconcile(d()).await.expect("reconcile");
    }
    for id in ["v1", "v2"] {
        env.stage(&stage_req(id, SHARE, None, "bob"), d())
            .await
            .unwrap_or_else(|e| panic!("{what}: {id} once the server is back: {e}"));
        assert_eq!(
            env.mgr
                .store()
                .volume(id)
                .expect("read")
                .expect("record")
                .phase,
            Phase::Staged,
            "{what}"
        );
    }
    assert!(env.resolves(&target("p1")), "{what}: the pod's path");
    assert!(env.resolves(&staging("v2")), "{what}: v2's staging path");
    assert_eq!(mappings(&env)[SHARE].status, MappingStatus::Ok, "{what}");
    env.mgr
        .unpublish(&unpublish_req("v1", "p1"), d())
        .await
        .expect("unpublish");
    for id in ["v1", "v2"] {
        env.mgr
            .unstage(&unstage_req(id), d())
            .await
            .unwrap_or_else(|e| panic!("{what}: unstage {id}: {e}"));
    }
    env.assert_clean();
}

#[tokio::test]
async fn a_reboot_during_a_file_server_outage_recovers_on_every_release() {
    for v in CsiProxyVersion::ALL {
        for restart in [false, true] {
            let what = format!("{v}, driver restarted before the retry: {restart}");
            reboot_during_an_outage(env_on(v), &what, restart).await;
        }
    }
}

#[tokio::test]
async fn a_reboot_during_a_file_server_outage_recovers_on_the_backend_under_test() {
    // `WINCSI_TEST_HOST_BACKEND` (native: the backend's own ledger repairs the mapping it created).
    for restart in [false, true] {
        reboot_during_an_outage(new_env(true), &format!("restart {restart}"), restart).await;
    }
}

/// The proof survives a re-stage that failed after its record went back to `Staging`: the repair is justified by
/// what the record knew before.
#[tokio::test]
async fn a_failed_restage_keeps_the_proof_that_the_mapping_is_the_drivers() {
    let env = env_on(CsiProxyVersion::DEFAULT);
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("stage");
    env.script(|s| s.set_smb_reachable("srv", false))
        .expect("outage");
    env.sim.reboot().expect("reboot");
    let _ = env.stage(&stage_req("v1", SHARE, None, "bob"), d()).await;
    let rec = env.mgr.store().volume("v1").expect("read").expect("kept");
    assert_eq!(rec.phase, Phase::Staging);
    let facts = rec
        .details::<crate::smb::SmbRecord>()
        .expect("decode")
        .expect("smb");
    assert!(facts.mapped, "{facts:?}");
    env.script(|s| s.set_smb_reachable("srv", true))
        .expect("back");
    env.clear_calls();
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("re-stage");
    assert_eq!(
        env.take_ops(),
        vec![
            Rmdir,
            NewSmbGlobalMapping,
            RemoveSmbGlobalMapping,
            NewSmbGlobalMapping,
            IsSymlink
        ]
    );
}

/// A stage whose rollback finds its own link already gone (here removed right after `NewSmbGlobalMapping` made it, so
/// the link check fails too) still removes the mapping it made and its record: a rollback undoes every step it can.
#[tokio::test]
async fn a_rollback_that_finds_its_link_gone_still_removes_the_mapping_and_the_record() {
    let env = new_env(true);
    let link = staging("v1");
    let once = std::sync::atomic::AtomicBool::new(false);
    env.inproc
        .after("NewSmbGlobalMapping", move |s| {
            if !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                s.rmdir(&link, false).expect("someone removes the link");
            }
        })
        .expect("script");
    let err = env
        .stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect_err("the link is gone");
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    assert_eq!(
        env.take_ops(),
        crate::smb::tests::first_stage(
            &env,
            vec![
                Rmdir,
                NewSmbGlobalMapping,
                IsSymlink,
                Rmdir,
                RemoveSmbGlobalMapping
            ]
        )
    );
    assert!(env.mgr.store().volume("v1").expect("read").is_none());
    assert!(mappings(&env).is_empty(), "the mapping this stage made");
    env.assert_clean();
    // kubelet's retry stages the volume.
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("retry");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

/// What the rollback could not undo is named in the answer, and the record stays for it.
#[tokio::test]
async fn a_rollback_reports_what_it_could_not_undo_and_keeps_the_record_for_it() {
    let env = new_env(true);
    env.fail_nth(
        RemoveSmbGlobalMapping,
        1,
        r"UnmountSmbShare failed. output: Remove-SmbGlobalMapping : Access is denied.",
    );
    let err = env
        .stage(&stage_req("v1", r"\\srv\share\missing", None, "bob"), d())
        .await
        .expect_err("missing path");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains(r"\\srv\share\missing")
            && m.contains(r"could not remove the SMB mapping of \\srv\share")),
        "{err:?}"
    );
    assert!(!env.exists(&staging("v1")), "the link went");
    assert!(
        env.mgr.store().volume("v1").expect("read").is_some(),
        "kept for what is left"
    );
    // kubelet (or the next stage) finishes it.
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

/// PowerShell-era csi-proxy maps the share, then `New-Item -ItemType SymbolicLink` refuses a target that does not
/// exist: the answer names the missing path (FAILED_PRECONDITION, not INTERNAL) and the mapping it made goes — unless
/// another staged volume uses it. WMI era: the dangling link is made, found unreachable, and rolled back the same way.
#[tokio::test]
async fn a_link_to_a_missing_path_rolls_back_the_mapping_on_every_release() {
    for v in CsiProxyVersion::ALL {
        let env = env_on(v);
        let refused = v.is_powershell();
        for sub_dir in [None, Some("new")] {
            let err = env
                .stage(
                    &stage_req("v1", r"\\srv\share\missing", sub_dir, "bob"),
                    d(),
                )
                .await
                .expect_err("missing path");
            let why = if refused {
                "does not exist"
            } else {
                "not reachable"
            };
            assert!(
                matches!(&err, Error::FailedPrecondition(m) if m.contains(r"\\srv\share\missing") && m.contains(why)),
                "{v} {sub_dir:?}: {err:?}"
            );
            assert!(mappings(&env).is_empty(), "{v} {sub_dir:?}: mapping left");
            assert!(
                env.mgr.store().volume("v1").expect("read").is_none(),
                "{v} {sub_dir:?}"
            );
            env.assert_clean();
        }
        // Another volume is staged on the share: the mapping stays.
        env.stage(&stage_req("v2", SHARE, None, "bob"), d())
            .await
            .expect("v2");
        env.clear_calls();
        let err = env
            .stage(&stage_req("v1", r"\\srv\share\missing", None, "bob"), d())
            .await
            .expect_err("missing path");
        assert!(matches!(err, Error::FailedPrecondition(_)), "{v}: {err:?}");
        assert!(
            !env.ops().contains(&RemoveSmbGlobalMapping),
            "{v}: {}",
            env.calls_text()
        );
        assert_eq!(mappings(&env).len(), 1, "{v}");
        assert!(
            env.resolves(&staging("v2")),
            "{v}: v2 still reaches the share"
        );
        env.mgr
            .unstage(&unstage_req("v2"), d())
            .await
            .expect("unstage v2");
        env.assert_clean();
    }
}

/// The subDir is created through `staging\subDir`, a local path of at most 260 bytes: one byte more is refused before
/// any host call or record; a component longer than Windows' 255 characters is refused too.
#[tokio::test]
async fn a_sub_dir_too_long_for_windows_is_refused_before_any_host_call() {
    let env = new_env(true);
    let room = crate::host::MAX_PATH_BYTES - staging("v1").len() - 1;
    // Components of 100 bytes; the last one carries a two-byte character at the boundary.
    let sub_dir = |bytes: usize| {
        let mut parts = Vec::new();
        let mut left = bytes;
        while left > 100 {
            parts.push("d".repeat(99));
            left -= 100;
        }
        parts.push(format!("{}é", "e".repeat(left - 2)));
        parts.join("/")
    };
    let fits = sub_dir(room);
    assert_eq!(fits.len(), room);
    env.stage(&stage_req("v1", SHARE, Some(&fits), "bob"), d())
        .await
        .expect("exactly 260 bytes");
    assert!(env.state(|s| s.share_has_dir("srv", "share", &fits)));
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.clear_calls();
    for (sub, rule) in [
        (sub_dir(room + 1), "260 bytes"),
        (format!("a/{}", "c".repeat(256)), "255 characters"),
    ] {
        let err = env
            .stage(&stage_req("v1", SHARE, Some(&sub), "bob"), d())
            .await
            .expect_err("too long");
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains(rule)),
            "{rule}: {err:?}"
        );
        assert_eq!(env.take_ops(), Vec::new(), "{rule}: no host call");
        assert!(env.mgr.store().volume("v1").expect("read").is_none());
    }
    env.assert_clean();
}
