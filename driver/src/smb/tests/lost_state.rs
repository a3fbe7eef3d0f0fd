//! Issue 37 item 15 (native backend): the state directory is lost (a new node disk, a wiped `--state-dir`, its ledgers
//! with it) while volumes are staged. kubelet's next NodeStageVolume adopts what the host proves is the driver's own
//! staging object, so the share's mapping and the target's session stay the driver's and the teardown removes them;
//! and every teardown log line says what really happened to a mapping or session someone else made.

use super::backend_change::{iscsi_stage, world};
use super::*;
use sim::CsiProxyVersion;
use sim::wmi::TestBackend;

/// What the driver logs while `f` runs (this thread's subscriber: the lifecycle's and protocols' lines; the native
/// backend's own lines run on its blocking pool and are not captured).
async fn logged<T>(f: impl std::future::Future<Output = T>) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let out = {
        let _default = tracing::subscriber::set_default(sub);
        f.await
    };
    let text = String::from_utf8_lossy(&buf.0.lock().expect("lock")).into_owned();
    (out, text)
}

/// kubelet's teardown of `smb` (pod `p-smb`) and `blk` (pod `p-blk`).
async fn teardown(env: &Env) {
    for (id, pod) in [("smb", "p-smb"), ("blk", "p-blk")] {
        env.mgr
            .unpublish(&unpublish_req(id, pod), d())
            .await
            .unwrap_or_else(|e| panic!("unpublish {id}: {e}"));
        env.mgr
            .unstage(&unstage_req(id), d())
            .await
            .unwrap_or_else(|e| panic!("unstage {id}: {e}"));
    }
}

async fn stage_and_publish(env: &Env) {
    env.stage(&stage_req("smb", SHARE, None, "bob"), d())
        .await
        .expect("stage smb");
    env.stage(&iscsi_stage("blk"), d())
        .await
        .expect("stage blk");
    for (id, pod) in [("smb", "p-smb"), ("blk", "p-blk")] {
        env.publish(&publish_req(id, pod), d())
            .await
            .unwrap_or_else(|e| panic!("publish {id}: {e}"));
    }
}

#[tokio::test(start_paused = true)]
async fn after_the_state_directory_is_lost_a_restage_adopts_the_drivers_own_mapping_and_session() {
    let mut env = world(TestBackend::Native, CsiProxyVersion::V1_1_3);
    stage_and_publish(&env).await;
    // The state directory is wiped (records and ledgers) and the driver restarts.
    for entry in std::fs::read_dir(env.dir.path()).expect("state dir") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).expect("rm");
        } else {
            std::fs::remove_file(&p).expect("rm");
        }
    }
    env.restart();
    // kubelet restarts too, and stages every volume a pod directory names again.
    env.stage(&stage_req("smb", SHARE, None, "bob"), d())
        .await
        .expect("re-stage smb");
    env.stage(&iscsi_stage("blk"), d())
        .await
        .expect("re-stage blk");
    let adopted: Vec<bool> = ["smb", "blk"]
        .iter()
        .map(|id| {
            let rec = env.mgr.store().volume(id).expect("read").expect("record");
            assert_eq!(rec.phase, Phase::Staged, "{id}");
            rec.adopted
        })
        .collect();
    assert!(env.resolves(&target("p-smb")) && env.resolves(&target("p-blk")));
    let ((), log) = logged(teardown(&env)).await;
    // The driver's own mapping and session go, and the log says so.
    env.assert_clean();
    // SMB adopts its staging link before the stage; iSCSI, whose stage logs in first, proves the joined session its own
    // from its staging mount point after the login (no adopted record needed).
    assert_eq!(
        adopted,
        [true, false],
        "the driver's own staging link is adopted"
    );
    assert!(log.contains("SMB mapping removed"), "{log}");
    assert!(log.contains("logged out"), "{log}");
    assert!(!log.contains("left in place"), "{log}");
}

#[tokio::test(start_paused = true)]
async fn a_mapping_and_a_session_someone_else_made_are_left_and_the_log_says_so() {
    let env = world(TestBackend::Native, CsiProxyVersion::V1_1_3);
    // An administrator mapped the share and logged in to the target before the driver came.
    env.script(|s| s.new_smb_global_mapping(SHARE, "", r"CORP\bob", &sim::Secret::new("pw-1")))
        .expect("admin mapping");
    env.script(|s| {
        s.add_target_portal("10.0.0.5", 3260)?;
        s.connect_target(
            "10.0.0.5",
            3260,
            "iqn.2026-01.io.wincsi:moves",
            sim::state::AuthType::None,
            "",
            &sim::Secret::new(""),
        )
    })
    .expect("admin login");
    stage_and_publish(&env).await;
    let ((), log) = logged(teardown(&env)).await;
    assert_eq!(mappings(&env).len(), 1, "someone else's mapping stays");
    assert_eq!(
        env.state(|s| s.sessions().len()),
        1,
        "someone else's session stays"
    );
    assert!(
        log.contains("SMB mapping left in place") && log.contains("session is left in place"),
        "{log}"
    );
    assert!(
        !log.contains("SMB mapping removed") && !log.contains(": logged out"),
        "the log says the opposite of what happened:\n{log}"
    );
}
