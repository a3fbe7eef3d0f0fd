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
    // NTFS serves one node: iSCSI refuses the multi-node writer modes the SMB requests ask for (issue 37 item 3).
    req.capability = iscsi_cap();
    req
}

/// The iSCSI volume's capability: a mounted NTFS volume, one node writing.
fn iscsi_cap() -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Mount {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: 1,
    })
}

/// [`publish_req`] with the iSCSI volume's capability for the iSCSI volume of these tests (`blk`).
pub(super) fn publish_req_of(id: &str, pod: &str) -> PublishRequest {
    let mut req = publish_req(id, pod);
    if id == "blk" {
        req.capability = iscsi_cap();
    }
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
        env.publish(&publish_req_of(id, pod), d())
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

/// A stage killed on csi-proxy inside its `NewSmbGlobalMapping` (the call goes on in csi-proxy and maps the share),
/// then the node moved to hostProcess mode: the native driver's unstage removes the mapping, as csi-proxy's would
/// have (the record claimed the share through a backend without a ledger, `SmbRecord::unledgered`) — after kubelet's
/// retried stage, or straight away when kubelet gave up and unstages. Every release.
#[tokio::test]
async fn a_stage_killed_on_csi_proxy_is_torn_down_by_the_native_driver() {
    for v in CsiProxyVersion::ALL {
        for restaged in [true, false] {
            let when = format!("{v}: re-staged first: {restaged}");
            let mut env = world(TestBackend::CsiProxy, v);
            env.hold_nth(NewSmbGlobalMapping, 1);
            let req = stage_req("smb", SHARE, None, "bob");
            tokio::select! {
                r = env.stage(&req, d()) => panic!("{when}: the stage ended under the held call: {r:?}"),
                () = env.hung() => {}
            }
            // The driver dies; csi-proxy finishes the call.
            env.release();
            env.sim.wait_unhung().await;
            assert_eq!(
                mappings(&env).len(),
                1,
                "{when}: csi-proxy mapped the share"
            );
            env.switch_backend(TestBackend::Native);
            if restaged {
                env.stage(&req, d())
                    .await
                    .unwrap_or_else(|e| panic!("{when}: native stage: {e}"));
            }
            env.mgr
                .unstage(&unstage_req("smb"), d())
                .await
                .unwrap_or_else(|e| panic!("{when}: native unstage: {e}"));
            env.assert_clean();
        }
    }
}

/// The native driver never claims a mapping someone else made because a stage of its own through it did not complete:
/// a native stage killed inside its `NewSmbGlobalMapping` over someone else's mapping leaves that mapping at its
/// unstage (only a backend without a ledger marks the record `unledgered`).
#[tokio::test]
async fn a_native_stage_killed_over_someone_elses_mapping_leaves_it() {
    let mut env = world(TestBackend::Native, CsiProxyVersion::V1_1_3);
    env.script(|s| s.new_smb_global_mapping(SHARE, "", r"CORP\bob", &sim::Secret::new("pw-1")))
        .expect("someone else's mapping");
    // Killed inside the call's last step, the staging link over the existing mapping: held in the host (Win32 runs a
    // call it began to its end; the sequence's steps before and after it die with the process).
    env.sim.hang_nth("CreateSymbolicLinkW", 1).expect("hold");
    let req = stage_req("smb", SHARE, None, "bob");
    tokio::select! {
        r = env.stage(&req, d()) => panic!("the stage ended under the held call: {r:?}"),
        () = env.sim.wait_hung(1) => {}
    }
    env.restart();
    env.sim.release_hangs();
    // The released call lands on its own task: kubelet's unstage answers UNAVAILABLE until the link it makes shows
    // (issue 37, give up and unstage: `lifecycle/creation.rs`), and is retried.
    let mut attempts = 0;
    while let Err(e) = env.mgr.unstage(&unstage_req("smb"), d()).await {
        attempts += 1;
        assert!(
            attempts < 100 && matches!(&e, Error::Unavailable(m) if m.contains("has not finished")),
            "unstage: {e}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(mappings(&env).len(), 1, "someone else's mapping stays");
}

/// The same for an iSCSI stage killed on csi-proxy inside its `ConnectTarget` (csi-proxy finishes the login): the
/// native driver's login finds the session connected, counts it as wincsi's (the record claimed the target through a
/// backend without a ledger, `IscsiRecord::unledgered`) and its unstage logs it out — after kubelet's retried stage,
/// or straight away. Every release.
#[tokio::test]
async fn an_iscsi_stage_killed_on_csi_proxy_is_torn_down_by_the_native_driver() {
    for v in CsiProxyVersion::ALL {
        for restaged in [true, false] {
            let when = format!("{v}: re-staged first: {restaged}");
            let mut env = world(TestBackend::CsiProxy, v);
            env.hold_nth(ConnectTarget, 1);
            let req = iscsi_stage("blk");
            tokio::select! {
                r = env.stage(&req, d()) => panic!("{when}: the stage ended under the held call: {r:?}"),
                () = env.hung() => {}
            }
            env.release();
            env.sim.wait_unhung().await;
            env.switch_backend(TestBackend::Native);
            if restaged {
                env.stage(&req, d())
                    .await
                    .unwrap_or_else(|e| panic!("{when}: native stage: {e}"));
            }
            env.mgr
                .unstage(&unstage_req("blk"), d())
                .await
                .unwrap_or_else(|e| panic!("{when}: native unstage: {e}"));
            env.assert_clean();
        }
    }
}
