//! kubelet's call sequences against the real `wincsi-node` binary on the native backend: the test build's
//! `--host-backend native --test-windows-socket` drives the `wincsi-sim` process's Windows view over a Unix socket
//! (`wincsi-sim --windows-socket`), so the binary's native backend — its flags, start-up, reconciliation, WMI call
//! sequences — runs off Windows against the one model of a Windows host, exactly as the csi-proxy suites run against
//! the simulated csi-proxy. The kubelet model drives it through the simulator's admin interface and, in the external
//! mode's way (`tests/external.rs`), through the local filesystem standing for `C:\`.
#![cfg(unix)]

use csi::v1::NodeGetInfoRequest;
use wincsi_e2e::external::ExternalNode;
use wincsi_e2e::fixtures::{
    self, DCSI_IQN, DCSI_PORTAL, DCSI_PORTAL_2, SECRETS, SMB_SERVER, SMB_SHARE,
};
use wincsi_e2e::{CsiConn, Kubelet, LocalFiles, Pod, TestNode, Volume, binaries};

async fn node() -> TestNode {
    TestNode::start_native(&binaries!(), &fixtures::scenario())
        .await
        .expect("a native node starts")
}

/// The end of every scenario: nothing lost, nothing left, nothing leaked — and only Windows was talked to.
async fn finish(node: TestNode) {
    finish_with(node, SECRETS).await;
}

/// [`finish`] for a scenario whose secrets are `secrets`.
async fn finish_with(node: TestNode, secrets: &[&str]) {
    if let Err(e) = node.check_clean().await {
        panic!("{e}\n--- driver log ---\n{}", tail(&node.driver_logs(), 40));
    }
    node.check_no_secret_in_logs(secrets)
        .expect("no secret in logs");
    let audit = node.host().audit(0).await.expect("audit");
    assert!(
        !audit.iter().any(|e| sim::RPCS.contains(&e.rpc.as_str())),
        "a csi-proxy RPC was made"
    );
    node.shutdown().await;
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Per-volume SMB client options (issue 40 item 2) through the binary, on a Windows Server 2022 node (build 20348,
/// which the binary reads over the socket): `useWriteThrough` and `requireIntegrity` reach `Create`; `transportType:
/// quic` (Windows Server 2025) is refused naming the option, the build it needs and the node's, and nothing is mapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smb_client_options_reach_create_and_a_newer_build_s_option_is_refused_on_the_binarys_native_backend()
 {
    let mut scenario = fixtures::scenario();
    scenario.host.windows_build = 20348;
    let node = TestNode::start_native(&binaries!(), &scenario)
        .await
        .expect("a native node starts");
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("team-c", "app-0");
    let vol = fixtures::smb_volume("pv-opts", "team-c", "data-opts", Some("opts"))
        .attr("useWriteThrough", "true")
        .attr("requireIntegrity", "true");
    let t = k.mount(host, &pod, &vol).await.expect("mount");
    host.write_file(&format!(r"{t}\durable.txt"), "written through")
        .await
        .expect("write");
    let audit = host.audit(0).await.expect("audit");
    let create = audit
        .iter()
        .find(|e| e.rpc == "MSFT_SmbGlobalMapping.Create")
        .expect("mapped");
    assert_eq!(create.args["use_write_through"], true, "{:?}", create.args);
    assert_eq!(create.args["require_integrity"], true, "{:?}", create.args);
    assert_eq!(create.args["require_privacy"], true, "{:?}", create.args);
    k.unmount(host, &pod, &vol).await.expect("unmount");

    let quic =
        fixtures::smb_volume("pv-quic", "team-c", "data-quic", None).attr("transportType", "quic");
    let k1 = k.clone().with_retry(wincsi_e2e::kubelet::Retry {
        attempts: 1,
        ..Default::default()
    });
    let err = k1.mount(host, &pod, &quic).await.expect_err("needs 2025");
    assert_eq!(
        err.csi_code(),
        Some(tonic::Code::FailedPrecondition),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("transportType needs build 26100") && text.contains("20348"),
        "{text}"
    );
    let creates = host
        .audit(0)
        .await
        .expect("audit")
        .iter()
        .filter(|e| e.rpc == "MSFT_SmbGlobalMapping.Create")
        .count();
    assert_eq!(creates, 1, "nothing mapped for the refused volume");
    k.tear_down(host, &pod, &quic).await.expect("tear down");
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_an_smb_and_an_iscsi_volume_on_the_binarys_native_backend() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("team-a", "app-0");
    let smb = fixtures::smb_volume("pv-smb", "team-a", "data-smb", Some("${pvc.metadata.name}"));
    let lun = fixtures::iscsi_volume("pv-lun0", "team-a", "data-lun", 0);
    let smb_target = k.mount(host, &pod, &smb).await.expect("mount smb");
    let lun_target = k.mount(host, &pod, &lun).await.expect("mount lun");
    host.write_file(&format!(r"{smb_target}\hello.txt"), "hello over SMB")
        .await
        .expect("write smb");
    host.write_file(&format!(r"{lun_target}\row.txt"), "hello on NTFS")
        .await
        .expect("write lun");
    assert_eq!(
        host.read_share_file(SMB_SERVER, SMB_SHARE, "data-smb/hello.txt")
            .await
            .expect("on the share"),
        "hello over SMB"
    );
    for v in [&smb, &lun] {
        let stats = k.stats(&pod, v).await.expect("stats");
        assert!(
            !stats.volume_condition.as_ref().is_some_and(|c| c.abnormal),
            "{stats:?}"
        );
    }
    // The share's real usage (issue 40 item 4): its file system (the scenario's default 1 TiB) with what is on it.
    let stats = k.stats(&pod, &smb).await.expect("stats");
    let bytes = &stats.usage[0];
    assert_eq!(bytes.total, 1 << 40, "{stats:?}");
    assert!(
        bytes.used >= "hello over SMB".len() as i64 && bytes.used + bytes.available == bytes.total,
        "{stats:?}"
    );
    let audit = host.audit(0).await.expect("audit");
    for call in [
        "MSFT_SmbGlobalMapping.Create",
        "MSFT_iSCSITarget.Connect",
        "MSFT_Volume.Format",
    ] {
        assert!(audit.iter().any(|e| e.rpc == call), "{call} not made");
    }
    k.unmount(host, &pod, &smb).await.expect("unmount smb");
    k.unmount(host, &pod, &lun).await.expect("unmount lun");
    let pod2 = Pod::new("team-a", "app-1");
    let t2 = k.mount(host, &pod2, &lun).await.expect("remount");
    assert_eq!(
        host.read_file(&format!(r"{t2}\row.txt"))
            .await
            .expect("kept"),
        "hello on NTFS"
    );
    k.unmount(host, &pod2, &lun).await.expect("unmount");
    finish(node).await;
}

/// `authentication: machine` (issue 40 item 1) through the binary: the share only the node's computer account may
/// use is mapped without a credential and the pod's data lands on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_account_volume_needs_no_secret_on_the_binarys_native_backend() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("team-b", "app-0");
    let vol = fixtures::smb_machine_volume("pv-machine", "team-b", "data-machine");
    let t = k.mount(host, &pod, &vol).await.expect("mount");
    host.write_file(&format!(r"{t}\by-machine.txt"), "no password stored")
        .await
        .expect("write");
    assert_eq!(
        host.read_share_file(
            fixtures::SMB_MACHINE_SERVER,
            "machine",
            "pv-machine/by-machine.txt"
        )
        .await
        .expect("on the share"),
        "no password stored"
    );
    let audit = host.audit(0).await.expect("audit");
    let create = audit
        .iter()
        .find(|e| e.rpc == "MSFT_SmbGlobalMapping.Create")
        .expect("mapped");
    assert!(create.args["user_name"].is_null(), "{:?}", create.args);
    k.unmount(host, &pod, &vol).await.expect("unmount");
    finish(node).await;
}

/// A node reboot with the driver restarted (it reconciles over the socket): the Disconnected mapping is reported
/// stale and repaired by the restage under the share's exclusive lock; the pod's path works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_node_reboot_the_binary_repairs_the_mapping_and_restages() {
    let mut node = node().await;
    let pod = Pod::new("web", "web-0");
    let vol = fixtures::smb_volume("pv-reboot", "web", "shared", Some("shared"));
    let lun = fixtures::iscsi_volume("pv-lun0", "web", "db", 0);
    {
        let (k, host) = (node.kubelet(), node.host());
        let t = k.mount(host, &pod, &vol).await.expect("mount");
        host.write_file(&format!(r"{t}\before.txt"), "before")
            .await
            .expect("write");
        let l = k.mount(host, &pod, &lun).await.expect("mount lun");
        host.write_file(&format!(r"{l}\before.txt"), "on the lun")
            .await
            .expect("write lun");
    }
    node.reboot().await.expect("reboot");
    let (k, host) = (node.kubelet(), node.host());
    let t = k
        .mount(host, &pod, &vol)
        .await
        .expect("remount after the reboot");
    assert_eq!(
        host.read_file(&format!(r"{t}\before.txt"))
            .await
            .expect("read"),
        "before"
    );
    let l = k.mount(host, &pod, &lun).await.expect("remount the lun");
    assert_eq!(
        host.read_file(&format!(r"{l}\before.txt"))
            .await
            .expect("read"),
        "on the lun"
    );
    let audit = host.audit(0).await.expect("audit");
    assert!(
        audit
            .iter()
            .any(|e| e.rpc == "MSFT_SmbGlobalMapping.Remove"),
        "the Disconnected mapping was replaced"
    );
    k.unmount(host, &pod, &vol).await.expect("unmount");
    k.unmount(host, &pod, &lun).await.expect("unmount lun");
    node.check_no_data_loss().await.expect("no data loss");
    finish(node).await;
}

/// The external mode's round trip (`tests/external.rs`: kubelet's files and the pod's data through the local
/// filesystem, no admin interface) against the binary on native: a writer pod, a full teardown, a reader pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_external_modes_round_trip_on_native() {
    let node = node().await;
    let external = ExternalNode {
        kubelet: Kubelet::new(
            CsiConn::connect(node.driver().expect("driver").endpoint()).expect("connect"),
            wincsi_e2e::DRIVER_NAME,
        ),
        files: LocalFiles::with_drive_c(node.drive_c()),
        endpoint: node.driver().expect("driver").endpoint().to_owned(),
    };
    for volume in [
        fixtures::smb_volume("pv-ext-smb", "external", "ext-smb", Some("ext")),
        fixtures::iscsi_volume("pv-ext-lun", "external", "ext-lun", 0),
    ] {
        round_trip(&external, &volume).await;
    }
    finish(node).await;
}

async fn round_trip(node: &ExternalNode, volume: &Volume) {
    let (k, h) = (&node.kubelet, &node.files);
    let token = format!("wincsi native e2e {}", volume.handle);
    let writer = Pod::new("external", &format!("writer-{}", volume.name));
    let publish = k.mount(h, &writer, volume).await.expect("mount");
    node.pod_write(&publish, "e2e.txt", &token)
        .expect("the pod writes");
    k.unmount(h, &writer, volume).await.expect("unmount");
    assert!(!node.exists(&publish).expect("path"), "publish path left");
    assert!(
        !node.exists(&k.staging_path(volume)).expect("path"),
        "staging path left"
    );
    let reader = Pod::new("external", &format!("reader-{}", volume.name));
    let publish = k.mount(h, &reader, volume).await.expect("re-mount");
    assert_eq!(node.pod_read(&publish, "e2e.txt").expect("read"), token);
    k.unmount(h, &reader, volume).await.expect("unmount");
}

/// NodeGetInfo's `max_volumes_per_node`, as kubelet reads it at registration and every
/// `nodeAllocatableUpdatePeriodSeconds` (KEP-4876).
async fn volume_limit(node: &TestNode) -> i64 {
    node.kubelet()
        .conn()
        .node()
        .node_get_info(NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner()
        .max_volumes_per_node
}

/// Issue 41 items 1 and 4 through the binary: democratic-csi's volume names two portals of one array and the node's
/// MPIO claims iSCSI disks. A session through each portal with `IsMultipathEnabled`, one MPIO disk, the pod's data
/// kept through a path's loss, every session logged out at unstage; the volume limit counts the initiator's sessions
/// (the multipath volume takes two of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipath_volume_keeps_its_data_through_a_paths_loss_on_the_binarys_native_backend() {
    let node = TestNode::start_native(&binaries!(), &fixtures::democratic_scenario())
        .await
        .expect("a native node starts");
    let (k, host) = (node.kubelet(), node.host());
    // The initiator's sessions (the driver's figure; the simulated initiator refuses a login past the same number).
    let limit = wincsi::iscsi::ISCSI_SESSION_LIMIT as i64;
    assert_eq!(
        volume_limit(&node).await,
        limit,
        "an empty node: every session free"
    );
    let pod = Pod::new("db", "pg-0");
    let lun = fixtures::democratic_iscsi_volume("pv-mpio", "db", "pg", DCSI_IQN, false);
    let t = k.mount(host, &pod, &lun).await.expect("mount");
    let audit = host.audit(0).await.expect("audit");
    let mut logins: Vec<String> = audit
        .iter()
        .filter(|e| e.rpc == "MSFT_iSCSITarget.Connect" && e.error.is_none())
        .map(|e| {
            assert_eq!(e.args["is_multipath_enabled"], true, "{e:?}");
            e.args["portal"].as_str().expect("portal").to_owned()
        })
        .collect();
    logins.sort();
    assert_eq!(
        logins,
        [
            format!("{DCSI_PORTAL}:3260"),
            format!("{DCSI_PORTAL_2}:3260")
        ],
        "a login through each portal"
    );
    // One volume held, two of the initiator's sessions taken.
    assert_eq!(volume_limit(&node).await, 1 + (limit - 2));
    host.write_file(&format!(r"{t}\row.txt"), "on every path")
        .await
        .expect("write");
    // The portal the volume's calls go through goes down: the MPIO disk stays on the other path.
    assert_eq!(
        host.drop_iscsi_path(DCSI_IQN, DCSI_PORTAL)
            .await
            .expect("a path's loss"),
        1
    );
    let stats = k.stats(&pod, &lun).await.expect("stats");
    assert!(
        !stats.volume_condition.as_ref().is_some_and(|c| c.abnormal),
        "{stats:?}"
    );
    assert_eq!(
        host.read_file(&format!(r"{t}\row.txt"))
            .await
            .expect("read through the other path"),
        "on every path"
    );
    k.unmount(host, &pod, &lun).await.expect("unmount");
    // `finish` finds no session left (the simulated host's leftovers).
    finish_with(node, fixtures::DCSI_SECRETS).await;
}

/// Issue 41 item 2 through the binary: with the Optimize Drives service disabled (`MSFT_Partition.GetSupportedSize`
/// then fails, aws-ebs-csi-driver#2877) the volume still grows: the partition's maximum is computed from the disk's
/// layout and `MSFT_Partition.Resize` called without asking the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_grows_with_defragsvc_disabled_on_the_binarys_native_backend() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    host.set_service(
        "defragsvc",
        sim::StartType::Disabled,
        sim::ServiceStatus::Stopped,
    )
    .await
    .expect("Set-Service defragsvc -StartupType Disabled");
    let pod = Pod::new("db", "grow-0");
    let lun = fixtures::iscsi_volume("pv-grow", "db", "grow", 0);
    let t = k.mount(host, &pod, &lun).await.expect("mount");
    host.write_file(&format!(r"{t}\data.bin"), "payload")
        .await
        .expect("write");
    let new_size = 3 * fixtures::LUN_SIZE;
    host.set_disk_size("lun0", new_size)
        .await
        .expect("the LUN grows");
    let cap = k
        .expand(&pod, &lun, new_size as i64)
        .await
        .expect("NodeExpandVolume");
    assert!(
        cap > 2 * fixtures::LUN_SIZE as i64 && cap <= new_size as i64,
        "grown to {cap}"
    );
    let audit = host.audit(0).await.expect("audit");
    assert!(
        audit
            .iter()
            .any(|e| e.rpc == "MSFT_Partition.Resize" && e.error.is_none()),
        "the partition was resized"
    );
    assert!(
        !audit
            .iter()
            .any(|e| e.rpc == "MSFT_Partition.GetSupportedSize"),
        "the defragmentation service was not asked"
    );
    assert_eq!(
        host.read_file(&format!(r"{t}\data.bin"))
            .await
            .expect("kept"),
        "payload"
    );
    k.unmount(host, &pod, &lun).await.expect("unmount");
    finish(node).await;
}

/// Issue 41 item 4 through the binary: `--max-volumes-per-node 1` is what NodeGetInfo reports (less than the
/// initiator's free sessions), and a second volume's stage on the full node answers RESOURCE_EXHAUSTED before any
/// host call; once the first is unstaged the second stages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_refuses_another_volume_on_the_binarys_native_backend() {
    let node = TestNode::start_native_with(&binaries!(), &fixtures::scenario(), |o| {
        o.extra_args
            .extend(["--max-volumes-per-node".to_owned(), "1".to_owned()]);
    })
    .await
    .expect("a native node starts");
    let (k, host) = (node.kubelet(), node.host());
    assert_eq!(volume_limit(&node).await, 1);
    let (pod, other) = (Pod::new("db", "a-0"), Pod::new("db", "b-0"));
    let first = fixtures::iscsi_volume("pv-first", "db", "first", 0);
    let second = fixtures::iscsi_volume("pv-second", "db", "second", 1);
    k.mount(host, &pod, &first).await.expect("mount the first");
    assert_eq!(volume_limit(&node).await, 1);
    let before = host.audit(0).await.expect("audit").len();
    let err = k
        .stage_once(host, &second)
        .await
        .expect_err("the node is full");
    assert_eq!(
        err.csi_code(),
        Some(tonic::Code::ResourceExhausted),
        "{err}"
    );
    assert!(
        err.to_string().contains("--max-volumes-per-node 1"),
        "{err}"
    );
    assert_eq!(
        host.audit(0).await.expect("audit").len(),
        before,
        "no host call for the refused stage"
    );
    k.unmount(host, &pod, &first)
        .await
        .expect("unmount the first");
    k.mount(host, &other, &second)
        .await
        .expect("room again: the second stages");
    k.unmount(host, &other, &second).await.expect("unmount");
    finish(node).await;
}
