//! kubelet's call sequences against the real `wincsi-node` binary on the native backend: the test build's
//! `--host-backend native --test-windows-socket` drives the `wincsi-sim` process's Windows view over a Unix socket
//! (`wincsi-sim --windows-socket`), so the binary's native backend — its flags, start-up, reconciliation, WMI call
//! sequences — runs off Windows against the one model of a Windows host, exactly as the csi-proxy suites run against
//! the simulated csi-proxy. The kubelet model drives it through the simulator's admin interface and, in the external
//! mode's way (`tests/external.rs`), through the local filesystem standing for `C:\`.
#![cfg(unix)]

use wincsi_e2e::external::ExternalNode;
use wincsi_e2e::fixtures::{self, SECRETS, SMB_SERVER, SMB_SHARE};
use wincsi_e2e::{CsiConn, Kubelet, LocalFiles, Pod, TestNode, Volume, binaries};

async fn node() -> TestNode {
    TestNode::start_native(&binaries!(), &fixtures::scenario())
        .await
        .expect("a native node starts")
}

/// The end of every scenario: nothing lost, nothing left, nothing leaked — and only Windows was talked to.
async fn finish(node: TestNode) {
    if let Err(e) = node.check_clean().await {
        panic!("{e}\n--- driver log ---\n{}", tail(&node.driver_logs(), 40));
    }
    node.check_no_secret_in_logs(SECRETS)
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
