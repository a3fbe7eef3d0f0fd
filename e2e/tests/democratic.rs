//! wincsi as the Windows node plugin of a democratic-csi release: the volume contexts and node-stage secrets
//! democratic-csi's controllers produce (`wincsi_e2e::fixtures::democratic_*`, cited there) stage, publish, unstage
//! and stage again through kubelet's model, for SMB (a share per volume, and a directory of a share) and iSCSI (one-way
//! and mutual CHAP, `portal` + `portals` merged), and every other `node_attach_driver` — and a credential flag that is
//! no account spelling — is refused with INVALID_ARGUMENT before any host call. democratic-csi's own `node-manual`
//! example PV (`examples/node-manual-smb-pv.yaml`: the account in `mountOptions`, no `nodeStageSecretRef`) stages as it
//! is, under its driver name, with one warning per volume that the password is in the PV; a PV of its shape with a
//! distinctive password is scanned for in the driver's logs, its `/metrics`, its state directory, every status message
//! and the simulator's audit log.
//!
//! Each scenario runs twice: against the real `wincsi-node` and `wincsi-sim` binaries over csi-proxy's sockets
//! (`scripts/test-all.sh` runs this file once more per csi-proxy release the simulated host plays), and in process
//! over the native backend (the simulated host's Windows view). Both end with the simulator's invariants; the process
//! run also with the driver's state directory empty and no secret value in any driver or simulator log (at
//! `--log-level trace`), gRPC status message or audit entry.
#![cfg(unix)]

mod metrics_support;

use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::json;
use sim::admin::AdminClient;
use wincsi_e2e::fixtures::{
    self, DCSI_CHAP_USER, DCSI_IQN, DCSI_IQN_MUTUAL, DCSI_MANUAL_PASSWORD,
    DCSI_MANUAL_SCAN_PASSWORD, DCSI_MANUAL_SCAN_USER, DCSI_MANUAL_SERVER, DCSI_MANUAL_SHARE,
    DCSI_MANUAL_USER, DCSI_PORTAL, DCSI_PORTAL_2, DCSI_SECRETS, DCSI_SMB_PASSWORD, DCSI_SMB_SERVER,
    DCSI_SMB_SHARE, DCSI_SMB_TANK, DCSI_SMB_USER,
};
use wincsi_e2e::inproc::InProcessNode;
use wincsi_e2e::kubelet::Retry;
use wincsi_e2e::{Error, Kubelet, Pod, TestNode, Volume, binaries};

/// The highest audit sequence number so far (calls after it are the next step's).
async fn audit_mark(host: &AdminClient) -> u64 {
    host.audit(0)
        .await
        .expect("audit")
        .last()
        .map_or(0, |e| e.seq)
}

/// The audit entries after `mark`, as `rpc args` lines.
async fn calls_since(host: &AdminClient, mark: u64) -> Vec<String> {
    host.audit(mark)
        .await
        .expect("audit")
        .into_iter()
        .filter(|e| e.seq > mark)
        .map(|e| format!("{} {}", e.rpc, e.args))
        .collect()
}

/// The portal additions among `calls` that name `address` (csi-proxy's `AddTargetPortal`, native's
/// `MSFT_iSCSITargetPortal.New`).
fn portal_adds(calls: &[String], address: &str) -> usize {
    calls
        .iter()
        .filter(|c| {
            (c.starts_with("AddTargetPortal ") || c.starts_with("MSFT_iSCSITargetPortal.New "))
                && c.contains(&format!("\"{address}\""))
        })
        .count()
}

/// Unwraps a step, naming it.
fn ok<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// democratic-csi's SMB and iSCSI volumes through kubelet's whole lifecycle.
async fn democratic_volumes_live_their_whole_lifecycle(k: &Kubelet, host: &AdminClient) {
    let pod = Pod::new("apps", "win-0");
    let smb = fixtures::democratic_smb_volume("pv-dcsi-smb", "apps", "data", DCSI_SMB_SHARE);
    let dir =
        fixtures::democratic_smb_volume("pv-dcsi-dir", "apps", "dir", "tank/k8s/pvc-dcsi-dir");
    let lun = fixtures::democratic_iscsi_volume("pv-dcsi-lun", "apps", "db", DCSI_IQN, false);
    let mutual =
        fixtures::democratic_iscsi_volume("pv-dcsi-mutual", "apps", "logs", DCSI_IQN_MUTUAL, true);

    // SMB: the share is mapped with the server's local account, logged on as server\user.
    let mark = audit_mark(host).await;
    let t = ok("mount smb", k.mount(host, &pod, &smb).await);
    ok(
        "write",
        host.write_file(&format!(r"{t}\hello.txt"), "over SMB")
            .await,
    );
    assert_eq!(
        ok(
            "on the share",
            host.read_share_file(DCSI_SMB_SERVER, DCSI_SMB_SHARE, "hello.txt")
                .await
        ),
        "over SMB"
    );
    let principal = format!(r"{DCSI_SMB_SERVER}\\{DCSI_SMB_USER}");
    let calls = calls_since(host, mark).await;
    assert!(
        calls.iter().any(|c| c.contains(&principal)),
        "no mapping made as {principal}: {calls:#?}"
    );
    // controller-smb-client's form: a directory of a share (the root is mapped, the directory linked).
    let td = ok("mount dir", k.mount(host, &pod, &dir).await);
    ok(
        "write",
        host.write_file(&format!(r"{td}\hello.txt"), "in a directory")
            .await,
    );
    assert_eq!(
        ok(
            "in the directory",
            host.read_share_file(DCSI_SMB_SERVER, DCSI_SMB_TANK, "k8s/pvc-dcsi-dir/hello.txt")
                .await
        ),
        "in a directory"
    );

    // iSCSI: portal and portals merged (192.0.2.20 named twice, once without its port), each portal added once.
    let mark = audit_mark(host).await;
    let tl = ok("mount lun", k.mount(host, &pod, &lun).await);
    let calls = calls_since(host, mark).await;
    assert_eq!(portal_adds(&calls, DCSI_PORTAL), 1, "{calls:#?}");
    assert_eq!(portal_adds(&calls, DCSI_PORTAL_2), 1, "{calls:#?}");
    assert!(
        calls.iter().any(|c| c.contains(DCSI_CHAP_USER)),
        "the login names the CHAP user: {calls:#?}"
    );
    ok(
        "write",
        host.write_file(&format!(r"{tl}\row.txt"), "on NTFS").await,
    );
    assert_eq!(
        ok(
            "on the LUN",
            host.read_file(&format!(r"{}\row.txt", k.staging_path(&lun)))
                .await
        ),
        "on NTFS"
    );
    // Mutual CHAP: the initiator's secret comes from node-db.node.session.auth.password_in.
    let tm = ok("mount mutual", k.mount(host, &pod, &mutual).await);
    ok(
        "write",
        host.write_file(&format!(r"{tm}\log.txt"), "mutual").await,
    );

    for v in [&smb, &dir, &lun, &mutual] {
        let stats = ok("stats", k.stats(&pod, v).await);
        assert!(
            !stats.volume_condition.as_ref().is_some_and(|c| c.abnormal),
            "{}: {stats:?}",
            v.name
        );
        ok("unmount", k.unmount(host, &pod, v).await);
    }
    // Unstaged and staged again (another pod): the data is still there.
    let pod2 = Pod::new("apps", "win-1");
    let t2 = ok("remount lun", k.mount(host, &pod2, &lun).await);
    assert_eq!(
        ok("kept", host.read_file(&format!(r"{t2}\row.txt")).await),
        "on NTFS"
    );
    let t2 = ok("remount smb", k.mount(host, &pod2, &smb).await);
    assert_eq!(
        ok("kept", host.read_file(&format!(r"{t2}\hello.txt")).await),
        "over SMB"
    );
    ok("unmount", k.unmount(host, &pod2, &lun).await);
    ok("unmount", k.unmount(host, &pod2, &smb).await);
}

/// The refusals: INVALID_ARGUMENT, a message that says what to do, and no host call. Returns the messages.
async fn refusals_make_no_host_call(k: &Kubelet, host: &AdminClient) -> Vec<String> {
    let once = k.clone().with_retry(Retry {
        attempts: 1,
        ..Retry::default()
    });
    let pod = Pod::new("apps", "win-0");
    let mut cases: Vec<(Volume, &str)> = Vec::new();
    // democratic-csi's other node_attach_drivers (its NFS controllers write server + share too).
    for driver in ["nfs", "hostpath", "nvmeof", "lustre"] {
        let v =
            fixtures::democratic_smb_volume(&format!("pv-{driver}"), "apps", "x", DCSI_SMB_SHARE)
                .attr("node_attach_driver", driver);
        cases.push((
            v,
            "a Windows node attaches only democratic-csi's smb and iscsi",
        ));
    }
    // A credential in mountOptions that is no account spelling (mount.cifs's credentials file, a made-up key).
    let mut v = fixtures::democratic_smb_volume("pv-opts", "apps", "x", DCSI_SMB_SHARE);
    v.mount_flags = vec![format!("vers=3.0,passwd={DCSI_SMB_PASSWORD}")];
    cases.push((v, "not an account flag"));
    // The account in mountOptions of a volume that is not democratic-csi's: refused as ever.
    let mut v = fixtures::smb_volume("pv-not-dcsi", "apps", "x", None);
    v.mount_flags = vec![format!(
        "username={DCSI_SMB_USER},password={DCSI_SMB_PASSWORD}"
    )];
    cases.push((v, "never in mountOptions"));
    // CHAP asked for without its secret.
    let mut v = fixtures::democratic_iscsi_volume("pv-nochap", "apps", "x", DCSI_IQN, false);
    v.stage_secrets
        .retain(|k, _| !k.ends_with("node-db.node.session.auth.password"));
    cases.push((v, "authmethod CHAP but not both"));

    let mut messages = Vec::new();
    for (v, want) in cases {
        let mark = audit_mark(host).await;
        match once.mount(host, &pod, &v).await {
            Err(Error::Csi { code, message, .. }) => {
                assert_eq!(code, tonic::Code::InvalidArgument, "{}: {message}", v.name);
                assert!(message.contains(want), "{}: {message}", v.name);
                messages.push(message);
            }
            other => panic!("{}: {other:?}", v.name),
        }
        let calls = calls_since(host, mark).await;
        assert!(calls.is_empty(), "{}: host calls {calls:#?}", v.name);
        // kubelet removed its staging directory after the final error.
        assert_eq!(
            ok("lstat", host.lstat(&k.staging_path(&v)).await),
            None,
            "{}",
            v.name
        );
    }
    messages
}

/// democratic-csi's driver name for its `node-manual` volumes (the example PV's `csi.driver`).
const NODE_MANUAL: &str = "org.democratic-csi.node-manual";

/// democratic-csi's `examples/node-manual-smb-pv.yaml` (democratic-csi `v1.9.4`, unchanged at `8a4a28a`), field by
/// field: `mountOptions: [username=foo, password=bar]`, no `nodeStageSecretRef`, `csi.driver:
/// org.democratic-csi.node-manual`, `fsType: cifs`, `volumeHandle: unique-volumeid`, `ReadWriteMany`,
/// `volumeAttributes` `server`, `share: someshare`, `node_attach_driver: smb`, `provisioner_driver: node-manual`. Its
/// `server: host or ip` is the placeholder a user fills in: here the simulated file server's name.
fn example_pv() -> PersistentVolume {
    let pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "smb-manual"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "mountOptions": [format!("username={DCSI_MANUAL_USER}"), format!("password={DCSI_MANUAL_PASSWORD}")],
            "csi": {
                "driver": NODE_MANUAL,
                "readOnly": false,
                "fsType": "cifs",
                "volumeHandle": "unique-volumeid",
                "volumeAttributes": {
                    "server": DCSI_MANUAL_SERVER,
                    "share": DCSI_MANUAL_SHARE,
                    "node_attach_driver": "smb",
                    "provisioner_driver": "node-manual"
                }
            }
        }
    });
    serde_json::from_value(pv).expect("a valid PersistentVolume")
}

/// The CSI volume kubelet makes of a PersistentVolume: `spec.csi` and the PV's `mountOptions` (the capability's
/// `mount_flags`), no node-stage secret without `nodeStageSecretRef`.
fn volume_of(pv: &PersistentVolume) -> Volume {
    let spec = pv.spec.as_ref().expect("spec");
    let csi = spec.csi.as_ref().expect("a CSI PersistentVolume");
    assert!(
        csi.node_stage_secret_ref.is_none(),
        "the example has no nodeStageSecretRef"
    );
    let mut v = Volume::persistent(
        pv.metadata.name.as_deref().expect("name"),
        &csi.volume_handle,
        "apps",
        "unbound",
    );
    // kubelet passes volumeAttributes as they are (no provisioner added keys to a hand-made PV).
    v.attributes = csi
        .volume_attributes
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    v.fs_type = csi.fs_type.clone().unwrap_or_default();
    v.mount_flags = spec.mount_options.clone().unwrap_or_default();
    v.read_only = csi.read_only.unwrap_or(false);
    assert_eq!(
        spec.access_modes.as_deref(),
        Some(&["ReadWriteMany".to_owned()][..])
    );
    v
}

/// A PV of the example's shape whose password the secret scans look for.
fn scanned_pv() -> Volume {
    let mut v = volume_of(&example_pv());
    v.name = "smb-manual-scan".to_owned();
    v.handle = "unique-volumeid-scan".to_owned();
    v.mount_flags = vec![
        format!("username={DCSI_MANUAL_SCAN_USER}"),
        format!("password={DCSI_MANUAL_SCAN_PASSWORD}"),
    ];
    v
}

/// The example PV stages, publishes, serves a pod's write on the share and tears down, twice; the mapping is made as
/// `server\foo` with the password from `mountOptions`.
async fn the_example_pv_stages_as_it_is(k: &Kubelet, host: &AdminClient) {
    let v = volume_of(&example_pv());
    for round in ["win-0", "win-1"] {
        let pod = Pod::new("apps", round);
        let mark = audit_mark(host).await;
        let t = ok("mount the example PV", k.mount(host, &pod, &v).await);
        ok(
            "write",
            host.write_file(&format!(r"{t}\{round}.txt"), "as it is")
                .await,
        );
        assert_eq!(
            ok(
                "on the share",
                host.read_share_file(
                    DCSI_MANUAL_SERVER,
                    DCSI_MANUAL_SHARE,
                    &format!("{round}.txt")
                )
                .await
            ),
            "as it is"
        );
        let principal = format!(r"{DCSI_MANUAL_SERVER}\\{DCSI_MANUAL_USER}");
        let calls = calls_since(host, mark).await;
        assert!(
            calls.iter().any(|c| c.contains(&principal)),
            "no mapping made as {principal}: {calls:#?}"
        );
        ok("unmount", k.unmount(host, &pod, &v).await);
    }
}

/// The warning that a volume's password is in its PV, once per volume: the lines of `logs` that carry it for `handle`.
fn password_warnings(logs: &str, handle: &str) -> usize {
    logs.lines()
        .filter(|l| {
            l.contains("readable by anyone who can read PersistentVolumes")
                && l.contains(&format!("\"{handle}\""))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn democratic_csi_volumes_over_csi_proxy() {
    // Registered under democratic-csi's node-manual driver name, as the example PV's csi.driver asks.
    let node = TestNode::start_with(&binaries!(), &fixtures::democratic_scenario(), |o| {
        o.driver_name = NODE_MANUAL.to_owned();
        o.extra_args
            .extend(["--metrics-address", "127.0.0.1:0"].map(String::from));
    })
    .await
    .expect("node starts");
    let (k, host) = (node.kubelet(), node.host());
    democratic_volumes_live_their_whole_lifecycle(k, host).await;
    the_example_pv_stages_as_it_is(k, host).await;
    assert_eq!(
        password_warnings(&node.driver_logs(), "unique-volumeid"),
        1,
        "one warning for the example PV, however often it stages"
    );
    // A PV of the example's shape with a password to look for: staged, then scanned where a secret could land while
    // the volume is staged (the state directory, /metrics), and in every log and message at the end.
    let scan = scanned_pv();
    let pod = Pod::new("apps", "win-scan");
    ok("mount the scanned PV", k.mount(host, &pod, &scan).await);
    let state: String = ok("state records", node.state_records())
        .iter()
        .map(|f| {
            std::fs::read_to_string(node.driver_options().state_dir.join(f)).unwrap_or_default()
        })
        .collect();
    assert!(
        state.contains(DCSI_MANUAL_SCAN_USER),
        "positive control: the state names the principal"
    );
    assert!(
        !state.contains(DCSI_MANUAL_SCAN_PASSWORD),
        "the password in the state directory"
    );
    let metrics = metrics_support::http_listeners(&node.driver_logs())["/metrics"];
    let (status, text) = metrics_support::get(metrics, "/metrics").await;
    assert_eq!(status, 200);
    assert!(text.contains("wincsi_volumes_staged"), "positive control");
    for s in DCSI_SECRETS {
        assert!(!text.contains(s), "a secret in /metrics");
    }
    ok("unmount the scanned PV", k.unmount(host, &pod, &scan).await);
    assert_eq!(
        password_warnings(&node.driver_logs(), "unique-volumeid-scan"),
        1
    );
    let messages = refusals_make_no_host_call(k, host).await;
    if let Err(e) = node.check_clean().await {
        panic!("{e}\n--- driver log ---\n{}", node.driver_logs());
    }
    let secrets: Vec<&str> = DCSI_SECRETS
        .iter()
        .chain(fixtures::SECRETS)
        .copied()
        .collect();
    node.check_no_secret_in_logs(&secrets)
        .expect("no secret in logs");
    let audit = format!("{:?}", host.audit(0).await.expect("audit"));
    let statuses = format!(
        "{messages:?} {:?}",
        k.calls().iter().map(|c| &c.error).collect::<Vec<_>>()
    );
    for s in &secrets {
        assert!(!audit.contains(s), "a secret in the audit log");
        assert!(!statuses.contains(s), "a secret in a status message");
    }
    // The example's own password, as it would be logged with its key.
    let logs = node.driver_logs();
    assert!(!logs.contains(&format!("password={DCSI_MANUAL_PASSWORD}")));
    assert!(!statuses.contains(&format!("password={DCSI_MANUAL_PASSWORD}")));
    // Positive control: the scanned texts hold what is not secret.
    assert!(audit.contains(DCSI_CHAP_USER) && audit.contains(DCSI_SMB_SERVER));
    assert!(audit.contains(DCSI_MANUAL_SCAN_USER) && logs.contains("unique-volumeid-scan"));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn democratic_csi_volumes_over_the_native_backend() {
    let node = InProcessNode::start_native(&fixtures::democratic_scenario())
        .await
        .expect("native node starts");
    let (k, host) = (node.kubelet(), node.admin());
    democratic_volumes_live_their_whole_lifecycle(k, host).await;
    the_example_pv_stages_as_it_is(k, host).await;
    refusals_make_no_host_call(k, host).await;
    assert!(
        !node
            .host()
            .audit(0)
            .iter()
            .any(|e| sim::RPCS.contains(&e.rpc.as_str())),
        "a csi-proxy RPC was made"
    );
    let report = node.host().invariants();
    assert!(report.ok(), "simulated host invariants: {report:?}");
    node.shutdown().await;
}
