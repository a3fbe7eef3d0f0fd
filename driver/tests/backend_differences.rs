//! The documented differences between the host backends, each run on both against the same simulated host: what
//! the native backend does that csi-proxy v1 cannot (README "Limits" table, issue 16 §3), and what stays the same.
//! Every scenario ends with the host's invariants (no data loss, nothing left behind) where the backend can reach
//! them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sim::inproc::InProcess;
use sim::wmi::{TestBackend, WindowsView};
use sim::{HostOptions, Scenario, SimHost};
use wincsi::Error;
use wincsi::backend::Manager;
use wincsi::host::KubeletRoot;
use wincsi::host::csi_proxy::CsiProxyHost;
use wincsi::host::native::NativeHost;
use wincsi::host::native::testing::TestHost;
use wincsi::lifecycle::{
    AccessType, Capability, PublishRequest, StageRequest, StatsRequest, UnpublishRequest,
    UnstageRequest, VolumeConfig,
};
use wincsi::locks::Deadline;
use wincsi::smb::Secrets;

const PW: &str = "Diff-Smb-Pw-17!";
const CHAP: &str = "Diff-Chap-0123";
const DISC: &str = "Diff-Disc-0123";
const IQN: &str = "iqn.2026-02.io.example:diff";
const GIB: u64 = 1 << 30;
const BOTH: [TestBackend; 2] = [TestBackend::CsiProxy, TestBackend::Native];

fn scenario() -> Scenario {
    Scenario::from_json(
        &json!({
            "host": {"csi_proxy_version": "v1.3.0",
                     "directories": [r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io",
                                     r"C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi"]},
            "smb": {"servers": [{"name": "fs1",
                "accounts": [{"user": "bob", "password": PW, "domain": "CORP"}],
                "shares": [{"name": "data", "files": {"keep.txt": "keep"}}]}]},
            "iscsi": {"portals": [
                {"address": "10.0.0.5", "targets": [
                    {"iqn": IQN, "chap": {"mode": "one_way", "username": "node", "secret": CHAP},
                     "luns": [{"lun": 0, "id": "ro", "size": 2 * GIB, "read_only": true, "online": true},
                              {"lun": 1, "id": "plain", "size": 2 * GIB}]}]},
                {"address": "10.0.0.9", "discovery_chap": {"username": "disc", "secret": DISC},
                 "targets": [{"iqn": "iqn.2026-02.io.example:hidden", "luns": [{"lun": 0, "size": GIB}]}]}
            ]}
        })
        .to_string(),
    )
    .expect("scenario")
}

struct Env {
    backend: TestBackend,
    sim: SimHost,
    inproc: InProcess,
    mgr: Arc<Manager<TestHost>>,
    state: tempfile::TempDir,
    _sandbox: tempfile::TempDir,
}

impl Env {
    fn new(backend: TestBackend) -> Self {
        let sandbox = tempfile::tempdir().expect("tmp");
        let state = tempfile::tempdir().expect("tmp");
        let sim = SimHost::new(&scenario(), sandbox.path(), HostOptions::default()).expect("sim");
        let inproc = InProcess::new(sim.clone());
        let mgr = Self::manager(backend, &sim, &inproc, state.path());
        Self {
            backend,
            sim,
            inproc,
            mgr,
            state,
            _sandbox: sandbox,
        }
    }

    fn manager(
        backend: TestBackend,
        sim: &SimHost,
        inproc: &InProcess,
        state: &std::path::Path,
    ) -> Arc<Manager<TestHost>> {
        let host = match backend {
            TestBackend::CsiProxy => TestHost::CsiProxy(CsiProxyHost::new(inproc.client())),
            TestBackend::Native => TestHost::NativeBare(NativeHost::new(
                Arc::new(WindowsView::new(sim.clone())),
                Some(state),
            )),
        };
        let cfg = VolumeConfig {
            kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
            driver_name: "wincsi.csi.io".into(),
        };
        Arc::new(wincsi::backend::manager(host, cfg, state).expect("manager"))
    }

    /// The driver killed and started again (same state dir, same host), reconciling first. Like `wincsi-node`, a
    /// failed reconciliation is not fatal; native's never fails here (a link over a Disconnected mapping simply does
    /// not resolve), csi-proxy's can (its IsSymlink reports the share's access error).
    async fn restart(&mut self) {
        self.mgr = Self::manager(self.backend, &self.sim, &self.inproc, self.state.path());
        let r = self.mgr.reconcile(d()).await;
        if self.native() {
            r.expect("reconcile");
        }
    }

    fn native(&self) -> bool {
        self.backend == TestBackend::Native
    }
}

fn d() -> Deadline {
    Deadline::after(Duration::from_secs(120))
}

fn staging(id: &str) -> String {
    format!(r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{id}")
}

fn target(id: &str) -> String {
    format!(r"C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\{id}")
}

fn cap(mode: i32) -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Mount {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: mode,
    })
}

fn ctx(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn smb_req(id: &str) -> StageRequest {
    StageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        capability: cap(5),
        volume_context: ctx(&[("source", r"\\fs1\data")]),
        secrets: Secrets::new([("username", "bob"), ("password", PW), ("domain", "CORP")]),
    }
}

fn lun_req(id: &str, lun: &str, extra: &[(&str, &str)], secrets: &[(&str, &str)]) -> StageRequest {
    let mut c = ctx(&[("targetPortal", "10.0.0.5"), ("iqn", IQN), ("lun", lun)]);
    c.extend(ctx(extra));
    let mut s = vec![
        ("node.session.auth.username", "node"),
        ("node.session.auth.password", CHAP),
    ];
    s.extend_from_slice(secrets);
    StageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        capability: cap(1),
        volume_context: c,
        secrets: Secrets::new(s),
    }
}

fn unstage(id: &str) -> UnstageRequest {
    UnstageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
    }
}

#[tokio::test]
async fn only_native_leaves_a_mapping_it_did_not_create() {
    for b in BOTH {
        let env = Env::new(b);
        // Another component (an administrator, another driver) mapped the share first.
        env.sim
            .with_state_mut(|s| {
                s.new_smb_global_mapping(r"\\fs1\data", "", r"CORP\bob", &sim::Secret::new(PW))
            })
            .expect("foreign mapping");
        env.mgr.stage(&smb_req("v1"), d()).await.expect("stage");
        env.mgr.unstage(&unstage("v1"), d()).await.expect("unstage");
        let left = env.sim.with_state(|s| s.mappings().len());
        // csi-proxy cannot tell whose mapping it is: the last user's unstage removes it (README limit).
        assert_eq!(left, usize::from(env.native()), "{b}");
    }
}

#[tokio::test]
async fn a_disconnected_mapping_after_a_reboot_is_repaired_by_both() {
    for b in BOTH {
        let mut env = Env::new(b);
        env.mgr.stage(&smb_req("v1"), d()).await.expect("stage");
        env.sim.reboot().expect("reboot");
        let stats = env
            .mgr
            .stats(
                &StatsRequest {
                    volume_id: "v1".into(),
                    volume_path: staging("v1"),
                },
                d(),
            )
            .await;
        match (b, stats) {
            // The link no longer resolves: abnormal.
            (TestBackend::Native, Ok(s)) => assert!(s.abnormal, "{s:?}"),
            // csi-proxy learns it from the access error (Windows error 5 by default): an error or abnormal.
            (TestBackend::CsiProxy, Ok(s)) => assert!(s.abnormal, "{s:?}"),
            (TestBackend::CsiProxy, Err(_)) => {}
            (_, Err(e)) => panic!("{b}: {e:?}"),
        }
        env.restart().await;
        // Both repair it now: native lists the mapping and re-creates it; csi-proxy meets Windows' 1219 over the
        // Disconnected mapping and, because the records prove a staged volume of that share under the same account,
        // removes the mapping and creates it again (reference D2, issue 14 §2).
        env.mgr
            .stage(&smb_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{b}: the Disconnected mapping is repaired: {e:?}"));
        env.mgr.unstage(&unstage("v1"), d()).await.expect("unstage");
        assert!(env.sim.invariants().ok(), "{:?}", env.sim.invariants());
    }
}

#[tokio::test]
async fn a_read_only_lun_is_made_writable_only_by_native_and_only_for_writers() {
    for b in BOTH {
        let env = Env::new(b);
        let r = env.mgr.stage(&lun_req("ro", "0", &[], &[]), d()).await;
        if env.native() {
            r.expect("native clears the read-only flag of a writable volume's disk");
            let ro = env
                .sim
                .with_state(|s| s.disks().iter().find(|x| x.id == "ro").map(|x| x.read_only));
            assert_eq!(ro, Some(false));
            env.mgr.unstage(&unstage("ro"), d()).await.expect("unstage");
            assert!(env.sim.invariants().ok(), "{:?}", env.sim.invariants());
        } else {
            // csi-proxy cannot clear it: initialising the disk fails (csi-proxy #437).
            let e = r.expect_err("write-protected");
            assert!(!matches!(e, Error::Aborted(_)), "{e:?}");
        }
    }
    // A reader-only volume keeps the flag on both (the disk is never written).
    let env = Env::new(TestBackend::Native);
    let mut req = lun_req("ro", "0", &[], &[]);
    req.capability = cap(3);
    let e = env
        .mgr
        .stage(&req, d())
        .await
        .expect_err("a read-only RAW disk cannot be initialised");
    assert!(!matches!(e, Error::Aborted(_)), "{e:?}");
    assert_eq!(
        env.sim
            .with_state(|s| s.disks().iter().find(|x| x.id == "ro").map(|x| x.read_only)),
        Some(true)
    );
}

#[tokio::test]
async fn discovery_chap_is_native_only() {
    let hidden = |b| {
        let mut req = lun_req(
            "h",
            "0",
            &[("discoveryCHAPAuth", "true")],
            &[
                ("node.sendtargets.auth.username", "disc"),
                ("node.sendtargets.auth.password", DISC),
            ],
        );
        req.volume_context
            .insert("targetPortal".into(), "10.0.0.9".into());
        req.volume_context
            .insert("iqn".into(), "iqn.2026-02.io.example:hidden".into());
        req.secrets = Secrets::new([
            ("node.sendtargets.auth.username", "disc"),
            ("node.sendtargets.auth.password", DISC),
        ]);
        let _ = b;
        req
    };
    for b in BOTH {
        let env = Env::new(b);
        let r = env.mgr.stage(&hidden(b), d()).await;
        if env.native() {
            r.expect("discovery CHAP through MSFT_iSCSITargetPortal.New");
            env.mgr.unstage(&unstage("h"), d()).await.expect("unstage");
            assert!(env.sim.invariants().ok(), "{:?}", env.sim.invariants());
        } else {
            let e = r.expect_err("csi-proxy cannot");
            assert!(
                matches!(e, Error::FailedPrecondition(ref m) if m.contains("native backend")),
                "{e:?}"
            );
        }
    }
}

#[tokio::test]
async fn persistent_logins_are_native_only_and_unregistered_on_unstage() {
    for b in BOTH {
        let mut env = Env::new(b);
        let req = lun_req("p", "1", &[("persistentLogin", "true")], &[]);
        let r = env.mgr.stage(&req, d()).await;
        if !env.native() {
            let e = r.expect_err("csi-proxy logs in non-persistently only");
            assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
            continue;
        }
        r.expect("persistent login");
        env.mgr
            .publish(
                &PublishRequest {
                    volume_id: "p".into(),
                    staging_target_path: staging("p"),
                    target_path: target("p"),
                    capability: cap(1),
                    ..Default::default()
                },
                d(),
            )
            .await
            .expect("publish");
        env.sim
            .with_state(|s| s.write_file(&format!(r"{}\data.txt", target("p")), b"persisted"))
            .expect("write");
        // After a reboot the initiator logs the session back in by itself; the driver restages the mount.
        env.sim.reboot().expect("reboot");
        assert_eq!(
            env.sim.with_state(|s| s.sessions().len()),
            1,
            "logged in at boot"
        );
        env.restart().await;
        env.mgr.stage(&req, d()).await.expect("restage");
        assert_eq!(
            env.sim
                .with_state(|s| s.read_file(&format!(r"{}\data.txt", target("p"))).ok()),
            Some(b"persisted".to_vec())
        );
        env.mgr
            .unpublish(
                &UnpublishRequest {
                    volume_id: "p".into(),
                    target_path: target("p"),
                },
                d(),
            )
            .await
            .expect("unpublish");
        env.mgr.unstage(&unstage("p"), d()).await.expect("unstage");
        env.sim.reboot().expect("reboot");
        // Unregistered: no session comes back, nothing is left.
        assert!(env.sim.invariants().ok(), "{:?}", env.sim.invariants());
        assert!(env.sim.data_loss_events().is_empty());
    }
}

#[tokio::test]
async fn the_same_lifecycle_on_both_backends_leaves_the_same_host() {
    let mut shares = Vec::new();
    for b in BOTH {
        let mut env = Env::new(b);
        env.mgr.stage(&smb_req("s"), d()).await.expect("smb stage");
        env.mgr
            .stage(&lun_req("l", "1", &[], &[]), d())
            .await
            .expect("lun stage");
        for id in ["s", "l"] {
            env.mgr
                .publish(
                    &PublishRequest {
                        volume_id: id.into(),
                        staging_target_path: staging(id),
                        target_path: target(id),
                        capability: cap(1),
                        ..Default::default()
                    },
                    d(),
                )
                .await
                .expect("publish");
            env.sim
                .with_state(|s| s.write_file(&format!(r"{}\{b}.txt", target(id)), b"x"))
                .expect("write through the target");
        }
        // A restart in the middle changes nothing.
        env.restart().await;
        for id in ["s", "l"] {
            let st = env
                .mgr
                .stats(
                    &StatsRequest {
                        volume_id: id.into(),
                        volume_path: target(id),
                    },
                    d(),
                )
                .await
                .expect("stats");
            assert!(!st.abnormal, "{b} {id}: {st:?}");
            env.mgr
                .unpublish(
                    &UnpublishRequest {
                        volume_id: id.into(),
                        target_path: target(id),
                    },
                    d(),
                )
                .await
                .expect("unpublish");
            env.mgr.unstage(&unstage(id), d()).await.expect("unstage");
        }
        assert!(env.sim.invariants().ok(), "{b}: {:?}", env.sim.invariants());
        shares.push(
            env.sim
                .with_state(|s| s.read_share_file("fs1", "data", &format!("{b}.txt")).ok()),
        );
    }
    assert_eq!(shares, [Some(b"x".to_vec()), Some(b"x".to_vec())]);
}
