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
    assert_eq!(report.restage, ["v1", "v2"], "{what}");
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
