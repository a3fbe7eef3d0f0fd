//! Inline ephemeral volumes are written by pod authors: their `secretNamespace` must not let a pod borrow the
//! credentials of another namespace's Secret (the driver reads Secrets with its own, wider, RBAC).

#[path = "common/backend.rs"]
mod backend_switch;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sim::inproc::InProcess;
use sim::{HostOptions, Scenario, SimHost};
use wincsi::Error;
use wincsi::host::KubeletRoot;
use wincsi::lifecycle::{
    AccessType, Capability, EPHEMERAL_KEY, PublishRequest, SecretSource, VolumeConfig,
};
use wincsi::locks::Deadline;
use wincsi::smb::Secrets;

/// Records which Secrets the driver asked for.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl SecretSource for Recorder {
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Secrets, Error>> + Send + '_>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{namespace}/{name}"));
        Box::pin(async {
            Ok(Secrets::new([
                ("username", "bob"),
                ("password", "Eph-Pw-0123!"),
            ]))
        })
    }
}

fn req(secret_namespace: Option<&str>) -> PublishRequest {
    let mut ctx: BTreeMap<String, String> = [
        (EPHEMERAL_KEY, "true"),
        ("source", r"\\fs1\data"),
        ("secretName", "smb-creds"),
        ("csi.storage.k8s.io/pod.namespace", "team-a"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if let Some(ns) = secret_namespace {
        ctx.insert("secretNamespace".into(), ns.into());
    }
    PublishRequest {
        volume_id: "csi-eph-1".into(),
        target_path: r"C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\v\mount".into(),
        capability: Some(Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: vec![],
            },
            access_mode: 1,
        }),
        volume_context: ctx,
        ..Default::default()
    }
}

#[tokio::test]
async fn inline_volumes_only_read_secrets_of_their_pods_namespace() {
    let dir = tempfile::tempdir().expect("tmp");
    let sandbox = tempfile::tempdir().expect("tmp");
    let scenario = Scenario::from_json(
        &serde_json::json!({"smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": "Eph-Pw-0123!"}],
            "shares": [{"name": "data"}]}]}})
        .to_string(),
    )
    .expect("scenario");
    let sim = SimHost::new(&scenario, sandbox.path(), HostOptions::default()).expect("sim");
    // kubelet's directory of the target.
    sim.with_state_mut(|s| s.mkdir(r"C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\v"))
        .expect("mkdir");
    let host = backend_switch::host_for(&sim, InProcess::new(sim.clone()).client(), dir.path());
    let recorder = Arc::new(Recorder::default());
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    let mgr = wincsi::backend::manager(host, cfg, dir.path())
        .expect("manager")
        .with_secret_source(recorder.clone());
    let d = || Deadline::after(Duration::from_secs(30));
    for other in ["kube-system", "team-b", "TEAM-A"] {
        let err = mgr
            .publish(&req(Some(other)), d())
            .await
            .expect_err("another namespace's Secret is refused");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("pod's namespace")),
            "{err:?}"
        );
    }
    assert!(
        recorder
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty(),
        "the driver read a Secret of another namespace"
    );
    assert!(sim.audit(0).is_empty(), "nothing reached the host");
    // The pod's own namespace (implicit or explicit) is fine.
    mgr.publish(&req(None), d()).await.expect("own namespace");
    mgr.publish(&req(Some("team-a")), d())
        .await
        .expect("explicit own namespace");
    let reads = recorder
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert!(
        !reads.is_empty() && reads.iter().all(|r| r == "team-a/smb-creds"),
        "{reads:?}"
    );
}
