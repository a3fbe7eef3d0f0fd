//! Issue 37 item 6: a node's `mode` changed (csiProxy ↔ hostProcess) with pods running. The simulated host's one model
//! serves both backends over the same state, so a restarted driver on the other backend meets exactly what the first
//! one made: an SMB mapping and staging link (csi-proxy v1.3.0 and master make their links in the `\\?\\\server`
//! form, which the native backend used to take for "not a link", so its start-up reconciliation removed every pod's
//! SMB path) and an iSCSI session and mounted volume. Every release, both directions, and back again.

use super::*;
use sim::CsiProxyVersion;
use sim::wmi::TestBackend;

const IQN: &str = "iqn.2026-01.io.wincsi:moves";

/// SMB server `srv` (share `share`, account `CORP\bob`) and one iSCSI target with a RAW 1 GiB LUN.
pub(super) fn world(backend: TestBackend, v: CsiProxyVersion) -> Env {
    let env = Env::on(
        backend,
        &serde_json::json!({
            "smb": {"servers": [{"name": "srv",
                "accounts": [{"user": "bob", "password": "pw-1", "domain": "CORP"}],
                "shares": [{"name": "share"}]}]},
            "iscsi": {"portals": [{"address": "10.0.0.5", "targets": [
                {"iqn": IQN, "luns": [{"lun": 0, "id": "lun0", "size": 1u64 << 30}]}]}]}
        }),
    );
    env.sim.set_csi_proxy_version(v).expect("release");
    env
}

pub(super) fn iscsi_stage(id: &str) -> StageRequest {
    let mut req = stage_req(id, SHARE, None, "bob");
    req.volume_context = [
        ("targetPortal".to_owned(), "10.0.0.5:3260".to_owned()),
        ("iqn".to_owned(), IQN.to_owned()),
        ("lun".to_owned(), "0".to_owned()),
    ]
    .into();
    req.secrets = Secrets::default();
    req
}

/// The SMB volume `smb` and the iSCSI volume `blk`, each staged and published to its pod.
async fn start_pods(env: &Env) {
    env.stage(&stage_req("smb", SHARE, Some("data"), "bob"), d())
        .await
        .expect("stage smb");
    env.stage(&iscsi_stage("blk"), d())
        .await
        .expect("stage iscsi");
    for (id, pod) in [("smb", "p-smb"), ("blk", "p-blk")] {
        env.publish(&publish_req(id, pod), d())
            .await
            .unwrap_or_else(|e| panic!("publish {id}: {e}"));
    }
}

/// The pods' paths resolve and both volumes report healthy.
async fn assert_running(env: &Env, when: &str) {
    for (id, pod) in [("smb", "p-smb"), ("blk", "p-blk")] {
        assert!(
            env.resolves(&target(pod)),
            "{when}: the pod's path of {id} does not resolve"
        );
        let stats = env
            .mgr
            .stats(
                &StatsRequest {
                    volume_id: id.into(),
                    volume_path: target(pod),
                },
                d(),
            )
            .await
            .unwrap_or_else(|e| panic!("{when}: stats {id}: {e}"));
        assert!(!stats.abnormal, "{when}: {id}: {stats:?}");
    }
    let blk = env
        .mgr
        .store()
        .volume("blk")
        .expect("read")
        .expect("record");
    assert_eq!(blk.protocol, "iscsi");
}

/// The driver restarted on `backend` (same host, same state directory), then its start-up reconciliation: nothing
/// may be found broken, nothing removed.
async fn move_to(env: &mut Env, backend: TestBackend, when: &str) {
    env.switch_backend(backend);
    let report = env
        .mgr
        .reconcile(d())
        .await
        .unwrap_or_else(|e| panic!("{when}: reconcile: {e}"));
    assert!(
        report.restage.is_empty() && report.failed.is_empty(),
        "{when}: {report:?}"
    );
    assert_eq!(report.checked, 2, "{when}");
    assert_running(env, when).await;
    if backend == TestBackend::Native {
        // The link's target reads as the share path whichever release made it (what adoption of a volume whose
        // record was lost relies on).
        let staging = crate::host::KubeletRoot::new(r"C:\var\lib\kubelet")
            .expect("root")
            .host_path(&staging("smb"))
            .expect("path");
        let target = env
            .mgr
            .host()
            .read_link(&staging, d())
            .await
            .unwrap_or_else(|e| panic!("{when}: read_link: {e:?}"));
        assert_eq!(
            target
                .as_deref()
                .map(|t| t.trim_end_matches('\\').to_ascii_lowercase()),
            Some(r"\\srv\share\data".to_owned()),
            "{when}"
        );
    }
}

/// kubelet's teardown of both pods, on whichever backend runs now: nothing left on the host.
async fn stop_pods(env: &Env, when: &str) {
    for (id, pod) in [("smb", "p-smb"), ("blk", "p-blk")] {
        env.mgr
            .unpublish(&unpublish_req(id, pod), d())
            .await
            .unwrap_or_else(|e| panic!("{when}: unpublish {id}: {e}"));
        env.mgr
            .unstage(&unstage_req(id), d())
            .await
            .unwrap_or_else(|e| panic!("{when}: unstage {id}: {e}"));
    }
    env.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_node_moves_between_modes_with_pods_running_on_every_release() {
    use TestBackend::{CsiProxy, Native};
    for v in CsiProxyVersion::ALL {
        for (from, to) in [(CsiProxy, Native), (Native, CsiProxy)] {
            // One move, torn down on the new backend.
            let when = format!("{v}: {from:?} → {to:?}");
            let mut env = world(from, v);
            start_pods(&env).await;
            assert_running(&env, &when).await;
            move_to(&mut env, to, &when).await;
            stop_pods(&env, &when).await;
            // A move and back, torn down on the first backend.
            let when = format!("{v}: {from:?} → {to:?} → {from:?}");
            let mut env = world(from, v);
            start_pods(&env).await;
            move_to(&mut env, to, &when).await;
            move_to(&mut env, from, &when).await;
            stop_pods(&env, &when).await;
        }
    }
}
