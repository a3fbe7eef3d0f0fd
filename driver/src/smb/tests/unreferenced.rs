//! Issue 37 item 13: staged volumes kubelet will never unstage (it skipped NodeUnstageVolume, or their pod directory
//! went with a reboot) are found by the background scan, reported after the bound, and released only when asked and
//! nothing the driver can see references them. Both protocols, every release, both backends.

use super::backend_change::{iscsi_stage, world};
use super::*;
use crate::lifecycle::BackgroundSettings;
use sim::CsiProxyVersion;
use sim::wmi::TestBackend;

const MIN: Duration = Duration::from_secs(60);

/// `smb` and `blk` (iSCSI) lose their pods without NodeUnstageVolume (kubelet's capability probe failed as it
/// deleted them: it unpublished, then marked the devices unmounted); `kept` (the same share as `smb`) stays in use.
async fn pods_gone_without_unstage(env: &Env) {
    env.stage(&stage_req("smb", SHARE, Some("a"), "bob"), d())
        .await
        .expect("stage smb");
    env.stage(&stage_req("kept", SHARE, Some("b"), "bob"), d())
        .await
        .expect("stage kept");
    env.stage(&iscsi_stage("blk"), d())
        .await
        .expect("stage blk");
    for (id, pod) in [("smb", "p-smb"), ("kept", "p-kept"), ("blk", "p-blk")] {
        env.publish(&publish_req(id, pod), d())
            .await
            .unwrap_or_else(|e| panic!("publish {id}: {e}"));
    }
    for (id, pod) in [("smb", "p-smb"), ("blk", "p-blk")] {
        env.mgr
            .unpublish(&unpublish_req(id, pod), d())
            .await
            .unwrap_or_else(|e| panic!("unpublish {id}: {e}"));
        // kubelet removes the pod's directory once its volumes are unmounted.
        env.script(|s| s.rmdir(&format!(r"C:\var\lib\kubelet\pods\{pod}"), true))
            .expect("pod dir");
    }
}

fn processes(env: &Env) -> u64 {
    env.sim.host_processes().values().map(|p| p.total()).sum()
}

#[tokio::test(start_paused = true)]
async fn volumes_kubelet_never_unstages_are_reported_after_the_bound_on_every_release() {
    let backend = TestBackend::from_env_or_panic();
    for v in CsiProxyVersion::ALL {
        let env = world(backend, v);
        pods_gone_without_unstage(&env).await;
        env.clear_calls();
        let spawned = processes(&env);
        tokio::time::sleep(59 * MIN).await;
        let early = env.mgr.scan_unreferenced().await;
        assert!(early.stranded.is_empty(), "{v}: {early:?}");
        assert_eq!(early.checked, 3, "{v}");
        tokio::time::sleep(2 * MIN).await;
        let late = env.mgr.scan_unreferenced().await;
        let ids: Vec<&str> = late.stranded.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["blk", "smb"], "{v}: {late:?}");
        assert!(late.released.is_empty(), "{v}: report only by default");
        assert_eq!(env.mgr.unreferenced_volumes(), ["blk", "smb"], "{v}");
        // Two scans: one PathExists each of the one live publish target, nothing else, and no host process.
        assert_eq!(env.ops(), [PathExists, PathExists], "{v}");
        assert_eq!(
            processes(&env),
            spawned,
            "{v}: a scan started a host process"
        );
        // Reported, not touched: the records, the mapping and the session stay.
        for id in ["smb", "blk"] {
            assert!(
                env.mgr.store().volume(id).expect("read").is_some(),
                "{v}: {id}"
            );
        }
        assert_eq!(mappings(&env).len(), 1, "{v}");
        assert_eq!(env.state(|s| s.sessions().len()), 1, "{v}");
        // kubelet unstages one after all (a restarted kubelet): it leaves the report.
        env.mgr
            .unstage(&unstage_req("smb"), d())
            .await
            .expect("unstage smb");
        env.mgr.scan_unreferenced().await;
        assert_eq!(env.mgr.unreferenced_volumes(), ["blk"], "{v}");
        assert!(env.resolves(&target("p-kept")), "{v}");
    }
}

/// A kubelet call naming the volume, or a pod directory of its recorded target that kubelet has not removed yet,
/// counts as a reference: the clock starts again.
#[tokio::test(start_paused = true)]
async fn a_kubelet_call_or_a_pod_directory_is_a_reference() {
    let env = world(TestBackend::from_env_or_panic(), CsiProxyVersion::V1_1_3);
    env.stage(&stage_req("v1", SHARE, None, "bob"), d())
        .await
        .expect("stage");
    env.publish(&publish_req("v1", "p1"), d())
        .await
        .expect("publish");
    // kubelet removed the pod's mount directory (the link) but not the pod directory: still being torn down.
    env.script(|s| s.rmdir(&target("p1").replace(r"\var", r"C:\var"), false))
        .expect("target link");
    env.clear_calls();
    tokio::time::sleep(90 * MIN).await;
    let report = env.mgr.scan_unreferenced().await;
    assert!(report.stranded.is_empty(), "{report:?}");
    assert_eq!(
        env.ops(),
        [PathExists, PathExists],
        "the target, then its pod directory"
    );
    env.script(|s| s.rmdir(r"C:\var\lib\kubelet\pods\p1", true))
        .expect("pod dir");
    tokio::time::sleep(50 * MIN).await;
    // A failing publish retry names it (kubelet still wants it).
    let _ = env
        .mgr
        .stats(
            &StatsRequest {
                volume_id: "v1".into(),
                volume_path: staging("v1"),
            },
            d(),
        )
        .await;
    tokio::time::sleep(50 * MIN).await;
    assert!(env.mgr.scan_unreferenced().await.stranded.is_empty());
    tokio::time::sleep(11 * MIN).await;
    let report = env.mgr.scan_unreferenced().await;
    assert_eq!(report.stranded.len(), 1, "{report:?}");
}

/// `--release-unreferenced-volumes`: the stranded volumes are unstaged as kubelet would have (the share's mapping
/// stays for the volume still in use; the session goes), never while a record is quarantined.
#[tokio::test(start_paused = true)]
async fn release_unstages_them_when_asked_and_nothing_can_use_them() {
    let backend = TestBackend::from_env_or_panic();
    for v in [CsiProxyVersion::V1_1_3, CsiProxyVersion::Master] {
        let mut env = world(backend, v);
        env.set_background(BackgroundSettings {
            release_unreferenced: true,
            ..BackgroundSettings::default()
        });
        pods_gone_without_unstage(&env).await;
        // A quarantined record (it might describe a user of the share or the target): nothing is released.
        let bad = env.dir.path().join("volumes").join("bad.json");
        std::fs::write(&bad, "{\"version\": 1, \"volume_id\": \"b").expect("corrupt");
        crate::lifecycle::Lifecycle::quarantined(&*env.mgr)
            .await
            .expect("probe");
        tokio::time::sleep(61 * MIN).await;
        let report = env.mgr.scan_unreferenced().await;
        assert!(report.released.is_empty(), "{v}: {report:?}");
        assert_eq!(report.stranded.len(), 2, "{v}");
        std::fs::remove_file(&bad).expect("rm");
        let report = env.mgr.scan_unreferenced().await;
        assert_eq!(report.released, ["blk", "smb"], "{v}: {report:?}");
        assert!(env.mgr.unreferenced_volumes().is_empty(), "{v}");
        for id in ["smb", "blk"] {
            assert!(
                env.mgr.store().volume(id).expect("read").is_none(),
                "{v}: {id}"
            );
            assert!(!env.exists(&staging(id)), "{v}: {id}");
        }
        assert_eq!(mappings(&env).len(), 1, "{v}: kept uses the mapping");
        assert_eq!(
            env.state(|s| s.sessions().len()),
            0,
            "{v}: the session goes"
        );
        assert!(env.resolves(&target("p-kept")), "{v}");
        // The background task does the same on its own (5-minute scans).
        env.mgr
            .unpublish(&unpublish_req("kept", "p-kept"), d())
            .await
            .expect("unpublish kept");
        env.script(|s| s.rmdir(r"C:\var\lib\kubelet\pods\p-kept", true))
            .expect("pod dir");
        let task = tokio::spawn(Arc::clone(&env.mgr).run_background());
        tokio::time::sleep(70 * MIN).await;
        assert!(
            env.mgr.store().volume("kept").expect("read").is_none(),
            "{v}"
        );
        env.mgr.stop_background();
        task.await.expect("task");
        env.assert_clean();
    }
}
