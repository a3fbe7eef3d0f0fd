//! Issue 40 item 3: SMB credentials that rotate without deleting pods. kubelet (the CSIDriver's `requiresRepublish`)
//! calls NodePublishVolume again on the same target with the PV's node-publish Secret as it is now; the driver maps
//! the share again with the new credentials once the old ones stop working, and costs no SMB host call while they are
//! unchanged (`smb/rotate.rs`). Run on every csi-proxy release (`WINCSI_SIM_CSI_PROXY_VERSION`) and natively
//! (`WINCSI_TEST_HOST_BACKEND=native`).

use super::*;

/// What the driver logs at every level while `f` runs (this thread's subscriber).
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
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let out = {
        let _default = tracing::subscriber::set_default(sub);
        f.await
    };
    let text = String::from_utf8_lossy(&buf.0.lock().expect("lock")).into_owned();
    (out, text)
}

const OLD: &str = "Old-S3cret-pw-1";
const NEW: &str = "New-S3cret-pw-2";

/// The test world with `CORP\bob`'s password on `srv` set to [`OLD`].
fn world() -> Env {
    let env = new_env(true);
    env.script(|s| s.set_smb_password("srv", "bob", sim::Secret::new(OLD)))
        .expect("password");
    env
}

fn secrets(password: &str) -> Secrets {
    Secrets::new([
        ("username", "bob"),
        ("password", password),
        ("domain", "CORP"),
    ])
}

fn stage_with(id: &str, sub_dir: &str, password: &str) -> StageRequest {
    StageRequest {
        secrets: secrets(password),
        ..stage_req(id, SHARE, Some(sub_dir), "bob")
    }
}

/// kubelet's NodePublishVolume of `id` at pod `pod`'s target, carrying the node-publish Secret with `password`
/// (the same context as the stage: kubelet passes the PV's volumeAttributes to both).
fn republish(id: &str, sub_dir: &str, pod: &str, password: &str) -> PublishRequest {
    PublishRequest {
        volume_context: stage_with(id, sub_dir, password).volume_context,
        secrets: secrets(password),
        ..publish_req(id, pod)
    }
}

fn record(env: &Env, id: &str) -> (Phase, SmbRecord) {
    let rec = env.mgr.store().volume(id).expect("read").expect("record");
    let facts = rec.details::<SmbRecord>().expect("decode").expect("smb");
    (rec.phase, facts)
}

/// Whether the volume's pod path reaches the share with the mapping's credentials (the driver's own judgement:
/// NodeGetVolumeStats' condition, `IsSymlink` of the staging link, which authenticates on the simulated host).
async fn works(env: &Env, id: &str, pod: &str) -> bool {
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
        .expect("stats");
    !stats.abnormal && env.resolves(&target(pod))
}

fn rotations(outcome: &'static str) -> u64 {
    crate::metrics::install().credential_rotations(outcome)
}

async fn stage_and_publish(env: &Env, id: &str, sub_dir: &str, pod: &str) {
    env.stage(&stage_with(id, sub_dir, OLD), d())
        .await
        .expect("stage");
    env.publish(&republish(id, sub_dir, pod, OLD), d())
        .await
        .expect("publish");
    assert!(works(env, id, pod).await);
    env.clear_calls();
}

#[tokio::test]
async fn an_unchanged_republish_costs_no_smb_host_call() {
    let env = world();
    stage_and_publish(&env, "v1", "a", "p1").await;
    let (_, facts) = record(&env, "v1");
    let fingerprint = facts.credential.clone().expect("a fingerprint");
    assert!(fingerprint.starts_with("hmac-sha256:"), "{fingerprint}");
    for _ in 0..3 {
        env.publish(&republish("v1", "a", "p1", OLD), d())
            .await
            .expect("republish");
        // The lifecycle's repeated publish (the pod's link is still there) and nothing for the credentials.
        assert_eq!(env.take_ops(), vec![PathExists, IsSymlink]);
    }
    // A republish without a node-publish Secret says nothing about credentials either.
    env.publish(&publish_req("v1", "p1"), d())
        .await
        .expect("republish without secret");
    assert_eq!(env.take_ops(), vec![PathExists, IsSymlink]);
    assert_eq!(record(&env, "v1").1.credential, Some(fingerprint));
}

#[tokio::test]
async fn a_rotated_password_the_share_refuses_recreates_the_mapping_and_the_pod_path_works() {
    let env = world();
    stage_and_publish(&env, "v1", "a", "p1").await;
    let before = record(&env, "v1").1.credential;
    let recreated = rotations("recreated");
    // The operator rotates: the file server takes the new password (the old session is refused from now on: the
    // simulated host re-authenticates at every access, unkinder than Windows' session that lives on), the Secret
    // says it.
    env.script(|s| s.set_smb_password("srv", "bob", sim::Secret::new(NEW)))
        .expect("password");
    assert!(!works(&env, "v1", "p1").await, "the old mapping is refused");
    env.clear_calls();
    env.publish(&republish("v1", "a", "p1", NEW), d())
        .await
        .expect("republish with the new password");
    let calls = env.calls();
    assert!(
        calls
            .iter()
            .any(|c| matches!(c, Call::NewSmbGlobalMapping { principal, .. }
            if principal.as_deref() == Some(r"CORP\bob"))),
        "{calls:?}"
    );
    assert_eq!(mappings(&env)[SHARE].password.expose(), NEW);
    assert_eq!(mappings(&env)[SHARE].status, MappingStatus::Ok);
    assert!(works(&env, "v1", "p1").await, "the pod's path works again");
    let (phase, facts) = record(&env, "v1");
    assert_eq!(phase, Phase::Staged);
    assert!(facts.mapped);
    assert!(facts.credential.is_some() && facts.credential != before);
    assert!(rotations("recreated") > recreated);
    // The next republish with the same Secret costs nothing for the credentials.
    env.clear_calls();
    env.publish(&republish("v1", "a", "p1", NEW), d())
        .await
        .expect("republish");
    assert_eq!(env.take_ops(), vec![PathExists, IsSymlink]);
    env.mgr
        .unpublish(&unpublish_req("v1", "p1"), d())
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

#[tokio::test]
async fn a_rotated_secret_the_share_still_accepts_keeps_the_working_mapping() {
    let env = world();
    stage_and_publish(&env, "v1", "a", "p1").await;
    stage_and_publish(&env, "v2", "b", "p2").await;
    let before = record(&env, "v1").1.credential;
    let kept = rotations("kept");
    // The Secret is updated first; the server still accepts the old password (or its session lives on).
    for (id, sub, pod) in [("v1", "a", "p1"), ("v2", "b", "p2")] {
        env.publish(&republish(id, sub, pod, NEW), d())
            .await
            .expect("republish");
        // One look at the staging link: it works, so nothing is cut (re-creating would cut this volume's own and
        // the other volume's open files).
        assert_eq!(
            env.take_ops(),
            vec![IsSymlink, PathExists, IsSymlink],
            "{id}"
        );
    }
    assert_eq!(mappings(&env)[SHARE].password.expose(), OLD);
    assert_eq!(record(&env, "v1").1.credential, before, "the mapping's own");
    assert!(rotations("kept") >= kept + 2);
    // Once the server refuses the old password, one republish re-creates the share's mapping: every volume of the
    // share works again (their links point at the share; none reached it through the refused mapping).
    env.script(|s| s.set_smb_password("srv", "bob", sim::Secret::new(NEW)))
        .expect("password");
    env.publish(&republish("v2", "b", "p2", NEW), d())
        .await
        .expect("republish v2");
    assert!(works(&env, "v1", "p1").await);
    assert!(works(&env, "v2", "p2").await);
    assert_eq!(mappings(&env)[SHARE].password.expose(), NEW);
}

#[tokio::test]
async fn a_rotation_that_fails_is_retried_by_the_next_republish() {
    let env = world();
    stage_and_publish(&env, "v1", "a", "p1").await;
    env.script(|s| s.set_smb_password("srv", "bob", sim::Secret::new(NEW)))
        .expect("password");
    let failed = rotations("failed");
    // A Secret with a typo: the server refuses it too.
    let err = env
        .publish(&republish("v1", "a", "p1", "typo"), d())
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    assert!(rotations("failed") > failed);
    assert_eq!(record(&env, "v1").0, Phase::Staging);
    // Fixed: kubelet's next republish (the volume is still published; kubelet does not stage it again) repairs it.
    env.publish(&republish("v1", "a", "p1", NEW), d())
        .await
        .expect("retried");
    assert_eq!(record(&env, "v1").0, Phase::Staged);
    assert!(works(&env, "v1", "p1").await);
}

#[tokio::test]
async fn a_shared_mapping_another_volume_still_reaches_is_not_cut() {
    let env = world();
    stage_and_publish(&env, "v1", "a", "p1").await;
    stage_and_publish(&env, "v2", "b", "p2").await;
    // v1's staging link is gone (v1's pod path is broken), while v2 works through the share's mapping, which still
    // holds the old password. The rotated Secret's republish of v1 re-stages v1 — without removing the mapping v2
    // uses (its pods' open files would be cut): v1's link joins it.
    env.script(|s| s.rmdir(&norm_staging("v1"), false))
        .expect("rm");
    assert!(!works(&env, "v1", "p1").await);
    env.clear_calls();
    env.publish(&republish("v1", "a", "p1", NEW), d())
        .await
        .expect("v1 re-staged on the working mapping");
    let ops = env.take_ops();

    assert!(!ops.contains(&RemoveSmbGlobalMapping), "{ops:?}");
    assert!(works(&env, "v1", "p1").await);
    assert!(works(&env, "v2", "p2").await);
    assert_eq!(mappings(&env)[SHARE].password.expose(), OLD);
    // v1 joined a mapping made with another credential: its record does not claim the new one for the mapping, so
    // its republishes keep looking until the mapping is re-created.
    assert_eq!(record(&env, "v1").1.credential, None);
    env.clear_calls();
    env.publish(&republish("v1", "a", "p1", NEW), d())
        .await
        .expect("republish");
    assert_eq!(env.take_ops(), vec![IsSymlink, PathExists, IsSymlink]);
    env.script(|s| s.set_smb_password("srv", "bob", sim::Secret::new(NEW)))
        .expect("password");
    env.publish(&republish("v1", "a", "p1", NEW), d())
        .await
        .expect("recreated");
    assert!(works(&env, "v1", "p1").await);
    assert!(works(&env, "v2", "p2").await);
    // Natively the repair re-creates the mapping under the share's exclusive lock (v1's credential is the mapping's
    // now); csi-proxy re-creates a mapping that fails its PathValid inside its own `NewSmbGlobalMapping`, under the
    // shared side, where the driver cannot tell a re-creation from a reuse: no fingerprint is claimed.
    assert_eq!(
        record(&env, "v1").1.credential.is_some(),
        env.per_backend(false, true)
    );
}

#[tokio::test]
async fn rotated_secrets_never_reach_logs_records_errors_or_the_key_file() {
    let env = world();
    let ((), text) = logged(async {
        stage_and_publish(&env, "v1", "a", "p1").await;
        env.publish(&republish("v1", "a", "p1", NEW), d())
            .await
            .expect("kept");
        env.script(|s| s.set_smb_password("srv", "bob", sim::Secret::new(NEW)))
            .expect("password");
        let err = env
            .publish(&republish("v1", "a", "p1", "Typo-S3cret-pw-3"), d())
            .await
            .expect_err("refused");
        assert!(!err.chain().contains("Typo-S3cret-pw-3"), "{err}");
        env.publish(&republish("v1", "a", "p1", NEW), d())
            .await
            .expect("recreated");
    })
    .await;
    assert!(
        text.contains("re-created"),
        "the rotation is logged: {text}"
    );
    let mut files = vec![];
    for dir in ["volumes", "publish"] {
        for entry in std::fs::read_dir(env.dir.path().join(dir)).expect("ls") {
            files.push(std::fs::read_to_string(entry.expect("e").path()).expect("read"));
        }
    }
    let key = std::fs::read_to_string(env.dir.path().join(super::super::rotate::KEY_FILE))
        .expect("the node key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(env.dir.path().join(super::super::rotate::KEY_FILE))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the key is the node's alone");
    }
    for secret in [OLD, NEW, "Typo-S3cret-pw-3", key.trim()] {
        assert!(!text.contains(secret), "{secret} logged");
        for f in &files {
            assert!(!f.contains(secret), "{secret} in a record");
        }
    }
}

#[tokio::test]
async fn a_record_of_an_earlier_version_without_a_fingerprint_loads_and_rotates() {
    let env = world();
    stage_and_publish(&env, "v1", "a", "p1").await;
    // As an earlier version wrote it: no `credential` key.
    let rec = env.mgr.store().volume("v1").expect("read").expect("record");
    let mut json = serde_json::to_value(&*rec).expect("json");
    let fields = json.as_object_mut().expect("an object");
    assert!(fields.remove("credential").is_some());
    let old: VolumeRecord = serde_json::from_value(json).expect("an earlier record decodes");
    env.mgr.store().put_volume(&old).await.expect("write");
    assert_eq!(record(&env, "v1").1.credential, None);
    env.clear_calls();
    // Nothing says the mapping's credentials: one look, and it works.
    env.publish(&republish("v1", "a", "p1", OLD), d())
        .await
        .expect("republish");
    assert_eq!(env.take_ops(), vec![IsSymlink, PathExists, IsSymlink]);
}
