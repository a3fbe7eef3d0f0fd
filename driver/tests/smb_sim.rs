//! SMB volume lifecycle against the simulated Windows host: the driver's `VolumeManager` with the csi-proxy adapter,
//! talking to `sim::serve_unix` over Unix sockets exactly as it talks to csi-proxy over named pipes. After every
//! test the simulated host's invariants must hold (no data loss, no mapping or link left behind), and the logs —
//! captured at TRACE level for the whole suite — must not contain any secret value.

#![cfg(unix)]

mod common;

use common::{Env, d, logged_text, staging, target, unstage_req};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proxy_client::SmbCredentials;
use sim::Scenario;
use wincsi::Error;
use wincsi::host::KubeletRoot;
use wincsi::host::csi_proxy::CsiProxyHost;
use wincsi::lifecycle::{
    AccessType, Capability, EPHEMERAL_KEY, PublishRequest, StageRequest, StatsRequest,
    UnpublishRequest, VolumeConfig,
};
use wincsi::smb::Secrets;

const BOB_PW: &str = "Bob-Sm8-S3cret!";
const ALICE_PW: &str = "Alice-Sm8-S3cret!";
const SECRETS: [&str; 2] = [BOB_PW, ALICE_PW];

fn scenario() -> Scenario {
    Scenario::from_json(
        &serde_json::json!({
            "smb": {"servers": [
                {"name": "fs1",
                 "accounts": [
                    {"user": "bob", "password": BOB_PW, "domain": "CORP"},
                    {"user": "alice", "password": ALICE_PW, "domain": "CORP"}],
                 "shares": [
                    {"name": "data", "files": {"base/readme.txt": "keep me"}},
                    {"name": "apps"}]},
                {"name": "fs2",
                 "accounts": [{"user": "bob", "password": BOB_PW, "domain": "CORP"}],
                 "shares": [{"name": "data"}]}
            ]}
        })
        .to_string(),
    )
    .expect("scenario")
}

fn assert_no_secret_logged() {
    let text = logged_text();
    assert!(text.contains("host call"), "TRACE/DEBUG logs were captured");
    for s in SECRETS {
        assert!(!text.contains(s), "a secret value appears in the logs");
    }
}

// ---- environment (shared with the other simulated-host suites: tests/common) ----

impl Env {
    async fn new() -> Self {
        Self::with_scenario(&scenario()).await
    }

    async fn publish(&self, req: &PublishRequest) -> Result<(), Error> {
        self.kubelet_mkdir_parent(&req.target_path).await;
        self.mgr.publish(req, d()).await
    }

    /// Write a file through a published target path (what the pod does) and read it back from the share.
    fn write_through(&self, target: &str, name: &str, text: &str) {
        let real = self
            .sim
            .with_state(|s| s.sandbox_path(target))
            .expect("sandbox path");
        std::fs::write(real.join(name), text).expect("write through the target link");
    }

    fn share_file(&self, server: &str, share: &str, rel: &str) -> Option<String> {
        self.sim
            .with_state(|s| s.read_share_file(server, share, rel).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    fn mappings(&self) -> Vec<String> {
        self.sim
            .with_state(|s| s.mappings().keys().cloned().collect())
    }

    /// Tear down: the host's invariants hold and no secret was logged.
    async fn finish(mut self) {
        let report = self.sim.invariants();
        assert!(report.ok(), "simulated host invariants: {report:?}");
        assert!(
            self.mgr.store().volumes().expect("list").is_empty(),
            "volume records left"
        );
        assert!(
            self.mgr.store().publications().expect("list").is_empty(),
            "publish records left"
        );
        self.shutdown().await;
        assert_no_secret_logged();
    }
}

fn cap() -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Mount {
            fs_type: String::new(),
            mount_flags: vec!["vers=3.0".into()],
        },
        access_mode: 5,
    })
}

fn stage_req(id: &str, source: &str, user: &str, password: &str) -> StageRequest {
    StageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        capability: cap(),
        volume_context: [("source".to_owned(), source.to_owned())].into(),
        secrets: Secrets::new([
            ("username", user),
            ("password", password),
            ("domain", "CORP"),
        ]),
    }
}

fn publish_req(id: &str, pod: &str) -> PublishRequest {
    PublishRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        target_path: target(pod),
        capability: cap(),
        ..Default::default()
    }
}

fn unpublish_req(id: &str, pod: &str) -> UnpublishRequest {
    UnpublishRequest {
        volume_id: id.into(),
        target_path: target(pod),
    }
}

// ---- tests ----

#[tokio::test]
async fn two_volumes_on_one_share_keep_the_mapping_until_the_last_unstage() {
    let env = Env::new().await;
    env.stage(&stage_req("v1", r"\\fs1\data\base", "bob", BOB_PW))
        .await
        .expect("stage v1");
    env.stage(&stage_req("v2", "//FS1/Data", "bob", BOB_PW))
        .await
        .expect("stage v2");
    env.publish(&publish_req("v1", "pod1"))
        .await
        .expect("publish v1");
    env.publish(&publish_req("v2", "pod2"))
        .await
        .expect("publish v2");
    assert_eq!(env.mappings().len(), 1, "one global mapping per share root");
    env.write_through(&target("pod1"), "hello.txt", "from pod1");
    assert_eq!(
        env.share_file("fs1", "data", "base/hello.txt").as_deref(),
        Some("from pod1")
    );
    // Repeated calls are idempotent.
    env.mgr
        .stage(&stage_req("v1", r"\\fs1\data\base", "bob", BOB_PW), d())
        .await
        .expect("repeat stage");
    env.mgr
        .publish(&publish_req("v1", "pod1"), d())
        .await
        .expect("repeat publish");

    env.mgr
        .unpublish(&unpublish_req("v1", "pod1"), d())
        .await
        .expect("unpublish v1");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage v1");
    assert_eq!(env.mappings().len(), 1, "v2 still uses the mapping");
    env.write_through(&target("pod2"), "still.txt", "works");
    assert_eq!(
        env.share_file("fs1", "data", "still.txt").as_deref(),
        Some("works")
    );
    env.mgr
        .unpublish(&unpublish_req("v2", "pod2"), d())
        .await
        .expect("unpublish v2");
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .expect("unstage v2");
    assert!(env.mappings().is_empty());
    assert_eq!(
        env.share_file("fs1", "data", "base/readme.txt").as_deref(),
        Some("keep me"),
        "no data loss"
    );
    env.finish().await;
}

#[tokio::test]
async fn two_shares_on_one_server_with_the_same_credentials() {
    let env = Env::new().await;
    env.stage(&stage_req("v1", r"\\fs1\data", "bob", BOB_PW))
        .await
        .expect("stage data");
    env.stage(&stage_req("v2", r"\\fs1\apps", "bob", BOB_PW))
        .await
        .expect("stage apps");
    assert_eq!(env.mappings().len(), 2);
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage v1");
    assert_eq!(env.mappings().len(), 1);
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .expect("unstage v2");
    env.finish().await;
}

#[tokio::test]
async fn conflicting_credentials_on_one_server_fail_with_1219_advice() {
    let env = Env::new().await;
    env.stage(&stage_req("v1", r"\\fs1\data", "bob", BOB_PW))
        .await
        .expect("stage as bob");
    // Another principal on the same server: refused up front, naming the server and the principal in use.
    let err = env
        .stage(&stage_req("v2", r"\\fs1\apps", "alice", ALICE_PW))
        .await
        .expect_err("1219");
    match &err {
        Error::FailedPrecondition(m) => {
            assert!(
                m.contains("fs1") && m.contains(r"CORP\bob") && m.contains("1219"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    // A mapping made outside the driver, under another principal, to another share of the same server: the
    // host's own error 1219, translated.
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage v1");
    env.proxy
        .smb()
        .new_global_mapping(
            r"\\fs1\apps",
            None,
            &SmbCredentials::new(r"CORP\alice", ALICE_PW),
        )
        .await
        .expect("foreign mapping");
    let err = env
        .stage(&stage_req("v3", r"\\fs1\data", "bob", BOB_PW))
        .await
        .expect_err("host 1219");
    assert!(
        matches!(&err, Error::FailedPrecondition(m)
            if m.contains("1219") && m.contains(r"\\fs1\data") && !m.contains("CategoryInfo")),
        "{err:?}"
    );
    assert!(!tonic::Status::from(err).message().contains(BOB_PW));
    assert!(
        env.mgr.store().volume("v3").expect("read").is_none(),
        "failed fresh stage leaves no record"
    );
    env.proxy
        .smb()
        .remove_global_mapping(r"\\fs1\apps")
        .await
        .expect("cleanup foreign mapping");
    env.finish().await;
}

#[tokio::test]
async fn disconnected_mapping_after_reboot_is_repaired_by_reconcile_and_restage() {
    let mut env = Env::new().await;
    env.stage(&stage_req("v1", r"\\fs1\data", "bob", BOB_PW))
        .await
        .expect("stage");
    env.publish(&publish_req("v1", "pod1"))
        .await
        .expect("publish");
    env.sim.reboot().expect("reboot");
    let stats = env
        .mgr
        .stats(
            &StatsRequest {
                volume_id: "v1".into(),
                volume_path: target("pod1"),
            },
            d(),
        )
        .await
        .expect("stats");
    assert!(stats.abnormal, "{stats:?}");
    // The driver restarts with the node.
    env.restart();
    let report = env.mgr.reconcile(d()).await.expect("reconcile");
    // Left in place (issue 37 item 5): kubelet's re-stage after the reboot repairs it.
    assert_eq!(report.unreachable, vec!["v1".to_owned()]);
    // kubelet re-stages: the Disconnected mapping blocks a plain create; the driver replaces it.
    env.mgr
        .stage(&stage_req("v1", r"\\fs1\data", "bob", BOB_PW), d())
        .await
        .expect("re-stage");
    env.mgr
        .publish(&publish_req("v1", "pod1"), d())
        .await
        .expect("re-publish");
    let stats = env
        .mgr
        .stats(
            &StatsRequest {
                volume_id: "v1".into(),
                volume_path: target("pod1"),
            },
            d(),
        )
        .await
        .expect("stats");
    assert!(!stats.abnormal, "{stats:?}");
    env.write_through(&target("pod1"), "after-reboot.txt", "ok");
    assert_eq!(
        env.share_file("fs1", "data", "after-reboot.txt").as_deref(),
        Some("ok")
    );
    env.mgr
        .unpublish(&unpublish_req("v1", "pod1"), d())
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.finish().await;
}

#[tokio::test]
async fn sub_dir_templates_are_created_on_the_share() {
    let env = Env::new().await;
    let mut req = stage_req("v1", r"\\fs1\data\base", "bob", BOB_PW);
    req.volume_context.insert(
        "subDir".into(),
        "${pvc.metadata.namespace}/${pvc.metadata.name}".into(),
    );
    req.volume_context
        .insert("csi.storage.k8s.io/pvc/name".into(), "claim-1".into());
    req.volume_context
        .insert("csi.storage.k8s.io/pvc/namespace".into(), "team-a".into());
    env.stage(&req).await.expect("stage");
    env.publish(&publish_req("v1", "pod1"))
        .await
        .expect("publish");
    env.write_through(&target("pod1"), "f.txt", "in subdir");
    assert_eq!(
        env.share_file("fs1", "data", "base/team-a/claim-1/f.txt")
            .as_deref(),
        Some("in subdir")
    );
    env.mgr
        .unpublish(&unpublish_req("v1", "pod1"), d())
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    assert_eq!(
        env.share_file("fs1", "data", "base/team-a/claim-1/f.txt")
            .as_deref(),
        Some("in subdir")
    );
    env.finish().await;
}

/// One volume's whole life, as kubelet drives it.
async fn cycle(env: &Env) -> Result<(), Error> {
    cycle_from(env, 0).await
}

/// The host calls of [`cycle`]'s steps (stage with subDir, publish, unpublish, unstage), in order.
const CYCLE_CALLS: [usize; 4] = [6, 2, 1, 2];

/// [`cycle`] from its `step` on (0 stage, 1 publish, 2 unpublish, 3 unstage): kubelet retries the step that failed
/// and goes on from there (after an unstage that failed it retries the unstage; a pod that wants the volume again
/// meanwhile is published without a new stage).
async fn cycle_from(env: &Env, step: usize) -> Result<(), Error> {
    if step == 0 {
        let mut req = stage_req("v1", r"\\fs1\data", "bob", BOB_PW);
        req.volume_context.insert("subDir".into(), "pvc-x".into());
        env.mgr.stage(&req, d()).await?;
    }
    if step <= 1 {
        env.mgr.publish(&publish_req("v1", "pod1"), d()).await?;
    }
    if step <= 2 {
        env.mgr.unpublish(&unpublish_req("v1", "pod1"), d()).await?;
    }
    env.mgr.unstage(&unstage_req("v1"), d()).await
}

#[tokio::test]
async fn killed_between_host_calls_then_kubelet_retries_and_converges() {
    // The host calls of a clean run.
    let rpcs: Vec<String> = {
        let env = Env::new().await;
        env.kubelet_mkdir_parent(&staging("v1")).await;
        env.kubelet_mkdir_parent(&target("pod1")).await;
        env.sim.clear_audit();
        cycle(&env).await.expect("clean run");
        let rpcs = env.sim.audit(0).into_iter().map(|e| e.rpc).collect();
        env.finish().await;
        rpcs
    };
    // Stage with subDir 6, publish 2 (no `PathExists` first), unpublish 1, unstage 2.
    assert_eq!(rpcs.len(), CYCLE_CALLS.iter().sum::<usize>(), "{rpcs:?}");
    for (i, rpc) in rpcs.iter().enumerate() {
        let nth = rpcs[..=i].iter().filter(|r| *r == rpc).count() as u64;
        let mut env = Env::new().await;
        // A node up for a day: a reboot shows to the driver's boot stamps (its uptime is lower after it).
        env.sim
            .with_state_mut(|s| s.set_uptime(Duration::from_secs(86_400)));
        env.kubelet_mkdir_parent(&staging("v1")).await;
        env.kubelet_mkdir_parent(&target("pod1")).await;
        env.sim.hang_nth(rpc, nth).expect("hang");
        tokio::select! {
            r = cycle(&env) => panic!("call {i} ({rpc}): the cycle finished despite the hang: {r:?}"),
            () = env.sim.wait_hung(1) => {}
        }
        // The driver is gone mid-call; csi-proxy may still finish what it was doing.
        env.sim.release_hangs();
        tokio::time::timeout(Duration::from_secs(30), async {
            while env.sim.hung_calls() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("hung call ends");
        env.restart();
        // kubelet retries the step that was cut and goes on from there (an unstage cut during its removals is
        // retried as an unstage) ...
        let step = (1..=CYCLE_CALLS.len())
            .position(|n| i < CYCLE_CALLS[..n].iter().sum())
            .expect("step");
        cycle_from(&env, step)
            .await
            .unwrap_or_else(|e| panic!("call {i} ({rpc}): retry failed: {e:?}"));
        // ... and the volume stages again with the same inputs (nothing stranded): at once, or — when the killed
        // driver's announced mapping removal may still run, which csi-proxy can never show ended (`smb/orphans.rs`)
        // — after the way back its refusal names, a reboot.
        match cycle(&env).await {
            Ok(()) => {}
            Err(Error::Unavailable(m))
                if m.contains("a reboot of the node ends the wait at once") =>
            {
                assert_eq!(
                    rpc, "RemoveSmbGlobalMapping",
                    "call {i}: only a mapping removal is waited for: {m}"
                );
                env.sim.reboot().expect("reboot");
                env.restart();
                cycle(&env).await.unwrap_or_else(|e| {
                    panic!("call {i} ({rpc}): the next cycle after a reboot failed: {e:?}")
                });
            }
            Err(e) => panic!("call {i} ({rpc}): the next cycle failed: {e:?}"),
        }
        env.finish().await;
    }
}

#[tokio::test]
async fn same_volume_in_flight_is_aborted_and_fifty_volumes_run_concurrently() {
    let env = Env::new().await;
    env.kubelet_mkdir_parent(&staging("busy")).await;
    env.sim.hang_nth("NewSmbGlobalMapping", 1).expect("hang");
    let first = {
        let mgr = Arc::clone(&env.mgr);
        tokio::spawn(async move {
            mgr.stage(&stage_req("busy", r"\\fs1\data", "bob", BOB_PW), d())
                .await
        })
    };
    env.sim.wait_hung(1).await;
    let err = env
        .mgr
        .stage(&stage_req("busy", r"\\fs1\data", "bob", BOB_PW), d())
        .await
        .expect_err("busy");
    assert!(matches!(err, Error::Aborted(_)), "{err:?}");
    assert_eq!(tonic::Status::from(err).code(), tonic::Code::Aborted);
    env.sim.release_hangs();
    first.await.expect("join").expect("first stage completes");

    let mut set = tokio::task::JoinSet::new();
    for i in 0..50 {
        let id = format!("c{i}");
        env.kubelet_mkdir_parent(&staging(&id)).await;
        env.kubelet_mkdir_parent(&target(&format!("p{i}"))).await;
        let mgr = Arc::clone(&env.mgr);
        set.spawn(async move {
            let mut req = stage_req(&id, r"\\fs1\data", "bob", BOB_PW);
            req.volume_context
                .insert("subDir".into(), format!("dir-{i}"));
            mgr.stage(&req, d()).await?;
            mgr.publish(&publish_req(&id, &format!("p{i}")), d()).await
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("join").expect("stage + publish");
    }
    assert_eq!(env.mappings().len(), 1);
    for i in 0..50 {
        let mgr = Arc::clone(&env.mgr);
        set.spawn(async move {
            let id = format!("c{i}");
            mgr.unpublish(&unpublish_req(&id, &format!("p{i}")), d())
                .await?;
            mgr.unstage(&unstage_req(&id), d()).await
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("join").expect("unpublish + unstage");
    }
    env.mgr
        .unstage(&unstage_req("busy"), d())
        .await
        .expect("unstage busy");
    assert_eq!(
        env.sim.call_counts().get("RemoveSmbGlobalMapping"),
        Some(&1)
    );
    env.finish().await;
}

#[tokio::test]
async fn inline_ephemeral_volume_reads_its_secret_from_the_api() {
    let env = Env::new().await;
    let secrets: BTreeMap<_, _> = [(
        ("team".to_owned(), "smb-creds".to_owned()),
        wincsi::ephemeral::fake_api::secret_json(
            "team",
            "smb-creds",
            &[
                ("username", "bob"),
                ("password", BOB_PW),
                ("domain", "CORP"),
            ],
        ),
    )]
    .into();
    let api = wincsi::ephemeral::fake_api::serve(secrets)
        .await
        .expect("fake api");
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    let sa = tempfile::tempdir().expect("tempdir");
    api.write_service_account(sa.path())
        .expect("service account");
    let mgr = wincsi::backend::manager(CsiProxyHost::new(env.proxy.clone()), cfg, env.state.path())
        .expect("mgr")
        .with_secret_source(Arc::new(wincsi::ephemeral::KubeSecrets::from_access(
            api.access(sa.path()),
        )));
    let req = PublishRequest {
        volume_id: "csi-0123".into(),
        target_path: target("eph"),
        capability: cap(),
        volume_context: [
            (EPHEMERAL_KEY, "true"),
            ("source", r"\\fs1\apps"),
            ("secretName", "smb-creds"),
            ("csi.storage.k8s.io/pod.namespace", "team"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        ..Default::default()
    };
    env.kubelet_mkdir_parent(&req.target_path).await;
    mgr.publish(&req, d()).await.expect("publish");
    mgr.publish(&req, d()).await.expect("repeat publish");
    env.write_through(&target("eph"), "e.txt", "ephemeral");
    assert_eq!(
        env.share_file("fs1", "apps", "e.txt").as_deref(),
        Some("ephemeral")
    );
    mgr.unpublish(
        &UnpublishRequest {
            volume_id: "csi-0123".into(),
            target_path: target("eph"),
        },
        d(),
    )
    .await
    .expect("unpublish");
    assert!(env.mappings().is_empty());
    env.finish().await;
}
