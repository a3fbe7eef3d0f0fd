//! Unit tests of the lifecycle's own rules (issue 15): access modes and repeated calls, lookups before paths, the
//! records deciding which paths a request may touch, unstage while published, quarantine of corrupt records,
//! reconciliation per volume and adoption. They run the real protocols and the csi-proxy adapter against the
//! simulated host in-process (`crate::testing`).

use std::collections::BTreeMap;

use super::*;
use crate::host::HostOp;
use crate::host::csi_proxy::CsiProxyHost;
use crate::smb::{Smb, SmbRecord};
use crate::state::Phase;
use crate::testing::{Env, KUBELET, d};

const SHARE: &str = r"\\srv\share";

/// kubelet's modes (wire values).
const SINGLE_NODE_WRITER: i32 = 1;
const MULTI_NODE_MULTI_WRITER: i32 = 5;
const SINGLE_NODE_SINGLE_WRITER: i32 = 6;
const SINGLE_NODE_MULTI_WRITER: i32 = 7;

fn env() -> Env {
    Env::new(&serde_json::json!({
        "smb": {"servers": [
            {"name": "srv",
             "accounts": [{"user": "bob", "password": "pw-1", "domain": "CORP"}],
             "shares": [{"name": "share"}, {"name": "other"}, {"name": "Ärzte"}]}
        ]}
    }))
}

fn staging(id: &str) -> String {
    format!(r"{KUBELET}\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount")
}

fn target(pod: &str) -> String {
    format!(r"{KUBELET}\pods\{pod}\volumes\kubernetes.io~csi\pv\mount")
}

fn mount(mode: i32) -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Mount {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: mode,
    })
}

fn block(mode: i32) -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Block,
        access_mode: mode,
    })
}

fn stage_req(id: &str, source: &str, cap: Option<Capability>) -> StageRequest {
    StageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        capability: cap,
        volume_context: [("source".to_owned(), source.to_owned())].into(),
        secrets: Secrets::new([
            ("username", "bob"),
            ("password", "pw-1"),
            ("domain", "CORP"),
        ]),
    }
}

fn publish_req(id: &str, pod: &str, cap: Option<Capability>) -> PublishRequest {
    PublishRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        target_path: target(pod),
        capability: cap,
        ..Default::default()
    }
}

fn unstage_req(id: &str, path: &str) -> UnstageRequest {
    UnstageRequest {
        volume_id: id.into(),
        staging_target_path: path.into(),
    }
}

fn unpublish_req(id: &str, path: &str) -> UnpublishRequest {
    UnpublishRequest {
        volume_id: id.into(),
        target_path: path.into(),
    }
}

fn stats_req(id: &str, path: &str) -> StatsRequest {
    StatsRequest {
        volume_id: id.into(),
        volume_path: path.into(),
    }
}

fn expand_req(id: &str, path: &str) -> ExpandRequest {
    ExpandRequest {
        volume_id: id.into(),
        volume_path: path.into(),
        required_bytes: 0,
    }
}

async fn staged(env: &Env, id: &str, source: &str, mode: i32) {
    env.stage(&stage_req(id, source, mount(mode)), d())
        .await
        .unwrap_or_else(|e| panic!("stage {id}: {e}"));
}

// ---- 1 and 3: access modes, repeated and second calls ----

#[tokio::test]
async fn a_single_writer_volume_is_published_at_one_target_at_a_time() {
    let env = env();
    staged(&env, "v1", SHARE, SINGLE_NODE_SINGLE_WRITER).await;
    env.publish(
        &publish_req("v1", "p1", mount(SINGLE_NODE_SINGLE_WRITER)),
        d(),
    )
    .await
    .expect("first publish");
    env.publish(
        &publish_req("v1", "p1", mount(SINGLE_NODE_SINGLE_WRITER)),
        d(),
    )
    .await
    .expect("repeated publish at the same target is idempotent");
    env.clear_calls();
    let err = env
        .publish(
            &publish_req("v1", "p2", mount(SINGLE_NODE_SINGLE_WRITER)),
            d(),
        )
        .await
        .expect_err("second target");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains("SINGLE_NODE_SINGLE_WRITER") && m.contains(r"p1\volumes")),
        "{err:?}"
    );
    assert!(!env.exists(&target("p2")), "nothing was linked");
    assert!(
        env.calls().is_empty(),
        "refused from the records: {}",
        env.calls_text()
    );
    // The stage remembers the mode: a publish that claims another mode cannot escape the rule.
    let err = env
        .publish(
            &publish_req("v1", "p3", mount(SINGLE_NODE_MULTI_WRITER)),
            d(),
        )
        .await
        .expect_err("second target, other mode");
    assert!(matches!(&err, Error::FailedPrecondition(_)), "{err:?}");
    // Once the first target is unpublished, another one may be used.
    env.mgr
        .unpublish(&unpublish_req("v1", &target("p1")), d())
        .await
        .expect("unpublish");
    env.publish(
        &publish_req("v1", "p2", mount(SINGLE_NODE_SINGLE_WRITER)),
        d(),
    )
    .await
    .expect("publish after unpublish");
}

#[tokio::test]
async fn multi_writer_modes_and_single_node_writer_keep_working_at_several_targets() {
    let env = env();
    for (id, mode) in [
        ("v1", SINGLE_NODE_MULTI_WRITER),
        ("v2", MULTI_NODE_MULTI_WRITER),
        ("v3", SINGLE_NODE_WRITER),
    ] {
        staged(&env, id, SHARE, mode).await;
        for pod in ["a", "b", "c"] {
            env.publish(&publish_req(id, &format!("{id}{pod}"), mount(mode)), d())
                .await
                .unwrap_or_else(|e| panic!("{id} at {pod}: {e}"));
        }
    }
    // A second target asking for another capability than the first: FAILED_PRECONDITION (the spec's "a second
    // NodePublishVolume with a different volume_capability").
    let err = env
        .publish(
            &publish_req("v1", "v1d", mount(MULTI_NODE_MULTI_WRITER)),
            d(),
        )
        .await
        .expect_err("other capability");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains("same capability")),
        "{err:?}"
    );
}

#[tokio::test]
async fn restage_or_republish_with_an_incompatible_capability_is_already_exists() {
    let env = env();
    staged(&env, "v1", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    let rec = env.mgr.store().volume("v1").expect("read").expect("record");
    assert_eq!(
        rec.access.as_ref().map(|a| a.access_mode),
        Some(SINGLE_NODE_MULTI_WRITER),
        "the stage record remembers the access mode"
    );
    env.clear_calls();
    let mut ntfs = stage_req("v1", SHARE, mount(SINGLE_NODE_MULTI_WRITER));
    ntfs.capability = Some(Capability {
        access_type: AccessType::Mount {
            fs_type: "ntfs".into(),
            mount_flags: vec![],
        },
        access_mode: SINGLE_NODE_MULTI_WRITER,
    });
    for (what, req) in [
        (
            "other mode",
            stage_req("v1", SHARE, mount(SINGLE_NODE_SINGLE_WRITER)),
        ),
        (
            "block",
            stage_req("v1", SHARE, block(SINGLE_NODE_MULTI_WRITER)),
        ),
        ("other fs type", ntfs),
    ] {
        let err = env.stage(&req, d()).await.expect_err(what);
        assert!(
            matches!(&err, Error::AlreadyExists(m) if m.contains("already staged")),
            "{what}: {err:?}"
        );
    }
    assert!(
        env.calls().is_empty(),
        "refused before any host call: {}",
        env.calls_text()
    );
    staged(&env, "v1", SHARE, SINGLE_NODE_MULTI_WRITER).await;

    env.publish(
        &publish_req("v1", "p1", mount(SINGLE_NODE_MULTI_WRITER)),
        d(),
    )
    .await
    .expect("publish");
    for (what, cap) in [
        ("other mode", mount(MULTI_NODE_MULTI_WRITER)),
        ("block", block(SINGLE_NODE_MULTI_WRITER)),
    ] {
        let err = env
            .publish(&publish_req("v1", "p1", cap), d())
            .await
            .expect_err(what);
        assert!(
            matches!(&err, Error::AlreadyExists(m) if m.contains("already published")),
            "{what}: {err:?}"
        );
    }
    // A block request for a volume that is not staged is still INVALID_ARGUMENT.
    let err = env
        .stage(
            &stage_req("v9", SHARE, block(SINGLE_NODE_MULTI_WRITER)),
            d(),
        )
        .await
        .expect_err("block");
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("block")),
        "{err:?}"
    );
}

// ---- 2 and 6: stats and expansion look the volume up first, then the path, by the records ----

#[tokio::test]
async fn stats_and_expand_answer_not_found_for_an_unknown_volume_or_a_path_that_is_not_its() {
    let env = env();
    staged(&env, "v1", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    staged(&env, "v2", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    env.publish(
        &publish_req("v1", "p1", mount(SINGLE_NODE_MULTI_WRITER)),
        d(),
    )
    .await
    .expect("publish v1");
    env.publish(
        &publish_req("v2", "p2", mount(SINGLE_NODE_MULTI_WRITER)),
        d(),
    )
    .await
    .expect("publish v2");
    env.clear_calls();
    for (id, path) in [
        // csi-sanity: "should fail when volume is not found" / "does not exist on the specified path".
        ("nope", "some/path"),
        ("nope", target("p1").as_str()),
        ("v1", "some/path"),
        ("v1", r"C:\Windows\System32"),
        // Another volume's staging path and publish target.
        ("v1", staging("v2").as_str()),
        ("v1", target("p2").as_str()),
    ] {
        let err = env
            .mgr
            .stats(&stats_req(id, path), d())
            .await
            .expect_err(path);
        assert!(
            matches!(err, Error::NotFound(_)),
            "stats {id} {path}: {err:?}"
        );
        let err = env
            .mgr
            .expand(&expand_req(id, path), d())
            .await
            .expect_err(path);
        assert!(
            matches!(err, Error::NotFound(_)),
            "expand {id} {path}: {err:?}"
        );
    }
    assert!(
        env.calls().is_empty(),
        "nothing asked of the host: {}",
        env.calls_text()
    );
    for path in [staging("v1"), target("p1"), target("p1").to_uppercase()] {
        let s = env
            .mgr
            .stats(&stats_req("v1", &path), d())
            .await
            .expect("own path");
        assert!(!s.abnormal, "{s:?}");
        env.mgr
            .expand(&expand_req("v1", &path), d())
            .await
            .expect("own path");
    }
    // Required fields are still checked first.
    let err = env
        .mgr
        .stats(&stats_req("nope", ""), d())
        .await
        .expect_err("no path");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

// ---- 6: a request naming volume A never touches volume B ----

#[tokio::test]
async fn unstage_and_unpublish_never_touch_another_volumes_paths() {
    let env = env();
    staged(&env, "a", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    staged(&env, "b", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    env.publish(
        &publish_req("b", "pb", mount(SINGLE_NODE_MULTI_WRITER)),
        d(),
    )
    .await
    .expect("publish b");
    let b_ok = |env: &Env| {
        assert!(env.resolves(&staging("b")), "b's staging link");
        assert!(env.resolves(&target("pb")), "b's target");
        assert!(env.mgr.store().volume("b").expect("read").is_some());
    };
    // Unstage of A naming B's staging path or target: A is not staged there → OK, and nothing changes.
    for path in [staging("b"), target("pb")] {
        env.mgr
            .unstage(&unstage_req("a", &path), d())
            .await
            .expect("not staged there: OK");
        b_ok(&env);
        assert!(
            env.resolves(&staging("a")),
            "a stays staged at its own path"
        );
        assert!(env.mgr.store().volume("a").expect("read").is_some());
    }
    // The same without any record of the named volume.
    for path in [staging("b"), target("pb")] {
        env.mgr
            .unstage(&unstage_req("ghost", &path), d())
            .await
            .expect("OK");
        b_ok(&env);
    }
    // Unpublish naming B's staging path, B's target, or A's own staging path: refused.
    for (id, path) in [
        ("a", staging("b")),
        ("a", target("pb")),
        ("a", staging("a")),
        ("ghost", staging("b")),
    ] {
        let err = env
            .mgr
            .unpublish(&unpublish_req(id, &path), d())
            .await
            .expect_err(&path);
        assert!(
            matches!(err, Error::FailedPrecondition(_)),
            "{id} {path}: {err:?}"
        );
        b_ok(&env);
        assert!(env.resolves(&staging("a")));
    }
    assert!(env.mappings_ok(SHARE));
}

#[tokio::test]
async fn stage_and_publish_at_another_volumes_paths_are_refused_even_when_its_link_is_broken() {
    let env = env();
    staged(&env, "a", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    staged(&env, "b", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    env.publish(
        &publish_req("b", "pb", mount(SINGLE_NODE_MULTI_WRITER)),
        d(),
    )
    .await
    .expect("publish b");
    // B's share goes away: its links stay but no longer resolve (the case where a publish used to remove what it
    // found at the target path).
    env.script(|s| s.set_smb_reachable("srv", false))
        .expect("outage");
    let mut publish_at_b = publish_req("a", "x", mount(SINGLE_NODE_MULTI_WRITER));
    publish_at_b.target_path = staging("b");
    let mut publish_at_own_staging = publish_req("a", "x", mount(SINGLE_NODE_MULTI_WRITER));
    publish_at_own_staging.target_path = staging("a");
    for req in [publish_at_b, publish_at_own_staging] {
        let err = env.publish(&req, d()).await.expect_err(&req.target_path);
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("staging path")),
            "{err:?}"
        );
    }
    let mut stage_at_b = stage_req("c", SHARE, mount(SINGLE_NODE_MULTI_WRITER));
    stage_at_b.staging_target_path = staging("b");
    let mut stage_at_target = stage_req("c", SHARE, mount(SINGLE_NODE_MULTI_WRITER));
    stage_at_target.staging_target_path = target("pb");
    for req in [stage_at_b, stage_at_target] {
        let err = env
            .stage(&req, d())
            .await
            .expect_err(&req.staging_target_path);
        assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    }
    assert!(
        env.exists(&staging("b")) && env.exists(&target("pb")),
        "b's links were not touched"
    );
    assert!(env.mgr.store().volume("c").expect("read").is_none());
}

#[tokio::test]
async fn unstage_with_another_path_than_recorded_keeps_the_recorded_link_and_record() {
    let env = env();
    staged(&env, "a", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    let elsewhere =
        format!(r"{KUBELET}\plugins\kubernetes.io\csi\wincsi.csi.io\elsewhere\globalmount");
    env.mkdir(&elsewhere);
    env.mgr
        .unstage(&unstage_req("a", &elsewhere), d())
        .await
        .expect("OK");
    assert!(
        env.resolves(&staging("a")),
        "the recorded link did not leak"
    );
    assert!(
        env.exists(&elsewhere),
        "the requested path was not A's: untouched"
    );
    assert!(
        env.mgr.store().volume("a").expect("read").is_some(),
        "record kept"
    );
    assert!(env.mappings_ok(SHARE));
    env.mgr
        .unstage(&unstage_req("a", &staging("a").to_lowercase()), d())
        .await
        .expect("unstage at the recorded path, any case");
    assert!(!env.exists(&staging("a")));
    assert!(env.mgr.store().volume("a").expect("read").is_none());
}

// ---- 7: unstage while published ----

#[tokio::test]
async fn unstage_while_published_is_refused_until_the_targets_are_unpublished_or_gone() {
    let env = env();
    staged(&env, "v1", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    for pod in ["p1", "p2"] {
        env.publish(
            &publish_req("v1", pod, mount(SINGLE_NODE_MULTI_WRITER)),
            d(),
        )
        .await
        .expect("publish");
    }
    let err = env
        .mgr
        .unstage(&unstage_req("v1", &staging("v1")), d())
        .await
        .expect_err("still published");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains(r"p1\volumes") && m.contains(r"p2\volumes")),
        "{err:?}"
    );
    assert!(
        env.resolves(&target("p1")) && env.resolves(&target("p2")),
        "no pod path was cut"
    );
    // kubelet unpublishes one; the other pod's directory disappears without an unpublish (orphan cleanup).
    env.mgr
        .unpublish(&unpublish_req("v1", &target("p1")), d())
        .await
        .expect("unpublish");
    let p2 = target("p2");
    env.script(|s| s.rmdir(&p2, false))
        .expect("pod directory removed");
    env.clear_calls();
    env.mgr
        .unstage(&unstage_req("v1", &staging("v1")), d())
        .await
        .expect("converges");
    assert_eq!(
        env.ops()[..1],
        [HostOp::PathExists],
        "the recorded target was checked first"
    );
    env.assert_clean();
}

// ---- 5: Windows names ----

#[tokio::test]
async fn share_names_differing_in_non_ascii_case_are_one_mapping() {
    let env = env();
    staged(&env, "v1", r"\\srv\Ärzte", SINGLE_NODE_MULTI_WRITER).await;
    staged(&env, "v2", r"\\SRV\ärzte", SINGLE_NODE_MULTI_WRITER).await;
    assert_eq!(
        env.state(|s| s.mappings().len()),
        1,
        "one mapping on the host"
    );
    env.mgr
        .unstage(&unstage_req("v1", &staging("v1")), d())
        .await
        .expect("unstage v1");
    assert!(env.resolves(&staging("v2")), "the mapping v2 uses was kept");
    assert_eq!(env.state(|s| s.mappings().len()), 1);
    env.mgr
        .unstage(&unstage_req("v2", &staging("v2")), d())
        .await
        .expect("unstage v2");
    env.assert_clean();
}

#[tokio::test]
async fn kubelet_paths_compare_the_windows_way_for_every_character() {
    let root = KubeletRoot::new(r"C:\Dätä\kubelet").expect("root");
    let p = root
        .check(r"c:\DÄTÄ\KUBELET\pods\Ü\mount", "target_path")
        .expect("inside the root, any case");
    let q = root
        .check(r"C:\dätä\kubelet\pods\ü\MOUNT", "x")
        .expect("ok");
    assert_eq!(p, q);
    assert_eq!(p.key(), q.key());
    assert!(p.is(r"C:\DÄTÄ\Kubelet\PODS\ü\mount"));
    assert!(!p.is(r"C:\DÄTÄ\Kubelet\PODS\u\mount"));
    assert!(root.check(r"C:\Dätä\kubeletX\pods\a", "x").is_err());
}

// ---- 9: one corrupt record ----

/// Write `text` as the record file of `volume_id`, as a torn disk or a hand edit would.
fn corrupt_record(env: &Env, volume_id: &str, text: &str) -> std::path::PathBuf {
    let path = env
        .dir
        .path()
        .join("volumes")
        .join(format!("{}.json", crate::state::file_key(volume_id)));
    std::fs::write(&path, text).expect("write");
    path
}

#[tokio::test]
async fn a_corrupt_record_blocks_only_its_own_volume_and_shared_objects_are_kept() {
    let facts_missing = format!(
        r#"{{"version": 1, "volume_id": "broken", "phase": "staged", "staging_path": {:?}, "protocol": "smb"}}"#,
        staging("broken")
    );
    for corruption in [
        "{\"version\": 1, \"volume_id\": \"bro",
        // Decodes as a record, but its SMB facts do not.
        facts_missing.as_str(),
    ] {
        let env = env();
        staged(&env, "v1", SHARE, SINGLE_NODE_MULTI_WRITER).await;
        let file = corrupt_record(&env, "broken", corruption);
        // The driver finds the file when it reads the state directory again (every Probe does).
        Lifecycle::quarantined(&*env.mgr).await.expect("probe");
        // Unrelated volumes stage, publish and unstage.
        staged(&env, "v2", SHARE, SINGLE_NODE_MULTI_WRITER).await;
        staged(&env, "v3", r"\\srv\other", SINGLE_NODE_MULTI_WRITER).await;
        env.publish(
            &publish_req("v2", "p2", mount(SINGLE_NODE_MULTI_WRITER)),
            d(),
        )
        .await
        .expect("publish");
        env.mgr
            .unpublish(&unpublish_req("v2", &target("p2")), d())
            .await
            .expect("unpublish");
        for id in ["v1", "v2", "v3"] {
            env.mgr
                .unstage(&unstage_req(id, &staging(id)), d())
                .await
                .unwrap_or_else(|e| panic!("unstage {id} with {corruption}: {e}"));
        }
        // The quarantined record may be a user of any share: no mapping was removed, and it is reported.
        assert_eq!(env.state(|s| s.mappings().len()), 2, "{corruption}");
        let q = Lifecycle::quarantined(&*env.mgr)
            .await
            .expect("quarantined");
        assert_eq!(q.len(), 1, "{q:?}");
        assert!(q[0].contains(&*file.to_string_lossy()), "{q:?}");
        assert_eq!(Lifecycle::quarantined_count(&*env.mgr), 1);
        assert!(file.exists(), "the file is kept");
        // Only the volume whose record it is fails.
        let err = env
            .mgr
            .unstage(&unstage_req("broken", &staging("broken")), d())
            .await
            .expect_err("its own volume");
        assert!(
            matches!(&err, Error::Internal(m) if m.contains("quarantined") || m.contains("corrupt")),
            "{err:?}"
        );
        let report = env.mgr.reconcile(d()).await.expect("reconcile");
        assert!(report.failed.is_empty(), "{report:?}");
        // Removing the file lifts the quarantine; the next last user removes the mapping.
        std::fs::remove_file(&file).expect("rm");
        staged(&env, "v4", SHARE, SINGLE_NODE_MULTI_WRITER).await;
        env.mgr
            .unstage(&unstage_req("v4", &staging("v4")), d())
            .await
            .expect("unstage");
        assert_eq!(Lifecycle::quarantined_count(&*env.mgr), 0);
        assert_eq!(
            env.state(|s| s.mappings().len()),
            1,
            "only the other share's mapping is left"
        );
    }
}

// ---- 11: reconciliation per volume, and adoption ----

#[tokio::test]
async fn reconciliation_checks_every_volume_when_one_fails() {
    let env = env();
    for id in ["v1", "v2", "v3"] {
        staged(&env, id, SHARE, SINGLE_NODE_MULTI_WRITER).await;
    }
    env.clear_calls();
    // The first volume's check (its `IsSymlink`) finds csi-proxy unavailable.
    env.unavailable_nth(HostOp::IsSymlink, 1);
    let report = env.mgr.reconcile(d()).await.expect("reconcile");
    assert_eq!(report.checked, 3);
    assert_eq!(report.failed.len(), 1, "{report:?}");
    let checked: Vec<_> = env
        .calls()
        .into_iter()
        .filter(|c| c.op() == HostOp::IsSymlink)
        .collect();
    assert_eq!(
        checked.len(),
        2,
        "the other two volumes were checked: {}",
        env.calls_text()
    );
    // Healthy: nothing removed, nothing marked.
    assert!(!env.ops().contains(&HostOp::Rmdir), "{}", env.calls_text());
}

/// A protocol that adopts an SMB staging link it is told about: it stands for a backend that can read a link's
/// target (csi-proxy v1 cannot), to test the lifecycle's side of adoption with the real SMB unstage.
struct Adopter {
    root: String,
}

impl Protocol<CsiProxyHost> for Adopter {
    type Volume = ();

    fn serves(&self, _: &BTreeMap<String, String>) -> bool {
        false
    }

    fn owns(&self, _: &VolumeRecord) -> bool {
        false
    }

    fn parse(&self, _: &StageRequest) -> Result<(), Error> {
        Err(Error::Internal("not for staging".into()))
    }

    async fn stage(
        &self,
        _: Context<'_, CsiProxyHost>,
        _: StageAt<'_>,
        _: &(),
        _: Deadline,
    ) -> Result<(), Error> {
        Err(Error::Internal("not for staging".into()))
    }

    async fn unstage(
        &self,
        _: Context<'_, CsiProxyHost>,
        _: &HostPath,
        _: &VolumeRecord,
        _: Deadline,
    ) -> Result<(), Error> {
        Err(Error::Internal("owns nothing".into()))
    }

    async fn stats(
        &self,
        _: Context<'_, CsiProxyHost>,
        _: &VolumeRecord,
        _: &HostPath,
        _: Deadline,
    ) -> Result<VolumeStats, Error> {
        Err(Error::Internal("owns nothing".into()))
    }

    async fn check(
        &self,
        _: Context<'_, CsiProxyHost>,
        _: &VolumeRecord,
        _: &HostPath,
        _: Deadline,
    ) -> Result<Health, Error> {
        Err(Error::Internal("owns nothing".into()))
    }

    async fn adopt(
        &self,
        cx: Context<'_, CsiProxyHost>,
        found: Found<'_>,
        d: Deadline,
    ) -> Result<Option<VolumeRecord>, Error> {
        let h = cx.calls(d);
        if !h
            .path_exists(found.staging)
            .await
            .map_err(|e| host_error(e, found.staging))?
            || !h
                .is_symlink(found.staging)
                .await
                .map_err(|e| host_error(e, found.staging))?
        {
            return Ok(None);
        }
        let facts = SmbRecord {
            root: self.root.clone(),
            remote_path: self.root.clone(),
            principal: None,
            mapped: false,
            removing: None,
            options: Default::default(),
            unledgered: false,
            credential: None,
            creating: None,
        };
        VolumeRecord::new(
            found.volume_id,
            Phase::Staged,
            found.staging.as_str(),
            false,
            &facts,
        )
        .map(Some)
    }
}

fn adopting(env: &Env) -> VolumeManager<CsiProxyHost, (Adopter, Smb)> {
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(KUBELET).expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    let protocols = (Adopter { root: SHARE.into() }, Smb::default());
    VolumeManager::new(
        CsiProxyHost::new(env.inproc.client()),
        protocols,
        cfg,
        env.dir.path(),
    )
    .expect("manager")
}

#[tokio::test]
async fn a_wiped_state_directory_is_adopted_at_unstage_and_nothing_leaks() {
    let env = env();
    staged(&env, "v1", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    std::fs::remove_dir_all(env.dir.path().join("volumes")).expect("wipe");
    let mgr = adopting(&env);
    mgr.unstage(&unstage_req("v1", &staging("v1")), d())
        .await
        .expect("unstage without a record");
    // `env.mgr` stands for the driver before the loss; it reads what the new one left when it reads the files again.
    env.mgr.store().refresh().await.expect("refresh");
    env.assert_clean();
    // With csi-proxy nothing adopts it (v1 cannot say which share): the link goes and the mapping is left. The native
    // backend reads the link, so SMB adopts it and removes the mapping (no other user; its ledger survived).
    staged(&env, "v2", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    std::fs::remove_dir_all(env.dir.path().join("volumes")).expect("wipe");
    // The running driver takes over the wiped directory when it reads it again (every Probe does).
    env.mgr.store().refresh().await.expect("refresh");
    env.mgr
        .unstage(&unstage_req("v2", &staging("v2")), d())
        .await
        .expect("unstage without a record");
    assert!(!env.exists(&staging("v2")));
    assert_eq!(
        env.state(|s| s.mappings().len()),
        env.per_backend(1, 0),
        "the documented leak of csi-proxy mode"
    );
}

#[tokio::test]
async fn reconciliation_adopts_a_volume_whose_record_was_lost_through_its_publish_record() {
    let env = env();
    staged(&env, "v1", SHARE, SINGLE_NODE_MULTI_WRITER).await;
    env.publish(
        &publish_req("v1", "p1", mount(SINGLE_NODE_MULTI_WRITER)),
        d(),
    )
    .await
    .expect("publish");
    std::fs::remove_dir_all(env.dir.path().join("volumes")).expect("lose the volume records");
    let mgr = adopting(&env);
    let report = mgr.reconcile(d()).await.expect("reconcile");
    assert_eq!(report.adopted, ["v1"], "{report:?}");
    let rec = mgr
        .store()
        .volume("v1")
        .expect("read")
        .expect("adopted record");
    assert!(
        rec.adopted && rec.phase == Phase::Staged && rec.is::<SmbRecord>(),
        "{rec:?}"
    );
    // kubelet's teardown now cleans up everything.
    mgr.unpublish(&unpublish_req("v1", &target("p1")), d())
        .await
        .expect("unpublish");
    mgr.unstage(&unstage_req("v1", &staging("v1")), d())
        .await
        .expect("unstage");
    env.mgr.store().refresh().await.expect("refresh");
    env.assert_clean();
}

// ---- architecture notes: inline volumes with iSCSI attributes ----

#[tokio::test]
async fn an_inline_volume_with_iscsi_attributes_is_not_parsed_as_a_share() {
    let env = env();
    let req = PublishRequest {
        volume_id: "csi-inline".into(),
        target_path: target("p1"),
        capability: mount(SINGLE_NODE_WRITER),
        volume_context: [
            (EPHEMERAL_KEY.to_owned(), "true".to_owned()),
            ("targetPortal".to_owned(), "10.0.0.5:3260".to_owned()),
            ("iqn".to_owned(), "iqn.2024-01.io.example:store1".to_owned()),
            ("lun".to_owned(), "0".to_owned()),
        ]
        .into(),
        ..Default::default()
    };
    let err = env.publish(&req, d()).await.expect_err("no inline iSCSI");
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("inline") && m.contains("iSCSI") && !m.contains("source")),
        "{err:?}"
    );
    env.assert_clean();
}

impl Env {
    /// Whether the host has an OK global mapping of `root`.
    fn mappings_ok(&self, root: &str) -> bool {
        self.state(|s| {
            s.mappings()
                .get(&root.to_lowercase())
                .is_some_and(|m| m.status == sim::state::MappingStatus::Ok)
        })
    }
}

// ---- issue 18: the record a host object needs is durable before the object is made ----

#[tokio::test]
async fn a_stage_waits_for_its_record_to_be_durable_and_a_crash_before_that_creates_nothing() {
    let env = env();
    let (store, mut held) = crate::testing::held_commits(env.dir.path(), true);
    let mgr = adopting(&env).with_store(store);
    env.clear_calls();
    let req = stage_req("v1", SHARE, mount(SINGLE_NODE_MULTI_WRITER));
    // What kubelet does before NodeStage (the parent of the staging path exists).
    env.mkdir_parent(&req.staging_target_path);
    let stage = mgr.stage(&req, d());
    tokio::pin!(stage);
    // The stage runs until its intent record is on its way to disk; the commit stops before the directory fsync.
    let dir = tokio::select! {
        r = &mut stage => panic!("the stage finished before its record was durable: {r:?}"),
        dir = held.reached.recv() => dir.expect("a commit reaches the directory fsync"),
    };
    assert!(dir.ends_with("volumes"), "{}", dir.display());
    assert!(
        !env.ops().contains(&HostOp::NewSmbGlobalMapping),
        "the mapping was asked for before its record was durable: {}",
        env.calls_text()
    );
    // The node dies in that fsync: the stage fails and nothing was created on the host.
    held.release
        .send(Err(std::io::Error::other("power lost")))
        .expect("release");
    let err = stage
        .await
        .expect_err("the stage must fail with its record");
    assert!(
        matches!(&err, Error::Internal(m) if m.contains("power lost")),
        "{err:?}"
    );
    assert!(
        !env.ops().contains(&HostOp::NewSmbGlobalMapping),
        "{}",
        env.calls_text()
    );
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    // kubelet's retry, with a working disk, converges.
    drop(held);
    mgr.stage(&req, d()).await.expect("retry");
    assert!(env.resolves(&staging("v1")));
}
