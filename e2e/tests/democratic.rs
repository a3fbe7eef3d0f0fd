//! wincsi as the Windows node plugin of a democratic-csi release: the volume contexts and node-stage secrets
//! democratic-csi's controllers produce (`wincsi_e2e::fixtures::democratic_*`, cited there) stage, publish, unstage
//! and stage again through kubelet's model, for SMB (a share per volume, and a directory of a share) and iSCSI (one-way
//! and mutual CHAP, `portal` + `portals` merged), and every other `node_attach_driver` — and credentials in a PV's
//! `mountOptions` — are refused with INVALID_ARGUMENT before any host call.
//!
//! Each scenario runs twice: against the real `wincsi-node` and `wincsi-sim` binaries over csi-proxy's sockets
//! (`scripts/test-all.sh` runs this file once more per csi-proxy release the simulated host plays), and in process
//! over the native backend (the simulated host's Windows view). Both end with the simulator's invariants; the process
//! run also with the driver's state directory empty and no secret value in any driver or simulator log (at
//! `--log-level trace`), gRPC status message or audit entry.
#![cfg(unix)]

use sim::admin::AdminClient;
use wincsi_e2e::fixtures::{
    self, DCSI_CHAP_USER, DCSI_IQN, DCSI_IQN_MUTUAL, DCSI_PORTAL, DCSI_PORTAL_2, DCSI_SECRETS,
    DCSI_SMB_PASSWORD, DCSI_SMB_SERVER, DCSI_SMB_SHARE, DCSI_SMB_TANK, DCSI_SMB_USER,
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
    // The account in the StorageClass's mountOptions (democratic-csi reads it there; wincsi never does).
    let mut v = fixtures::democratic_smb_volume("pv-opts", "apps", "x", DCSI_SMB_SHARE);
    v.stage_secrets.clear();
    v.mount_flags = vec![format!(
        "username={DCSI_SMB_USER},password={DCSI_SMB_PASSWORD}"
    )];
    cases.push((v, "mount_flags: \"username=…,password=…\""));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn democratic_csi_volumes_over_csi_proxy() {
    let node = TestNode::start(&binaries!(), &fixtures::democratic_scenario())
        .await
        .expect("node starts");
    let (k, host) = (node.kubelet(), node.host());
    democratic_volumes_live_their_whole_lifecycle(k, host).await;
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
    // Positive control: the scanned texts hold what is not secret.
    assert!(audit.contains(DCSI_CHAP_USER) && audit.contains(DCSI_SMB_SERVER));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn democratic_csi_volumes_over_the_native_backend() {
    let node = InProcessNode::start_native(&fixtures::democratic_scenario())
        .await
        .expect("native node starts");
    let (k, host) = (node.kubelet(), node.admin());
    democratic_volumes_live_their_whole_lifecycle(k, host).await;
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
