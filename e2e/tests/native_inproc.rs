//! kubelet's call sequences against `wincsi-node --host-backend native`, in process: the real CSI server, lifecycle,
//! protocols and native backend over the simulated host's Windows view (`wincsi_e2e::inproc` says what this cannot
//! cover: the binary's Windows start-up, real WMI/Win32 and the HostProcess container). The same scenarios as the
//! process-level suites, ending with the simulator's invariants.

#![cfg(unix)]

use wincsi_e2e::Pod;
use wincsi_e2e::fixtures::{self, SMB_SERVER, SMB_SHARE};
use wincsi_e2e::inproc::InProcessNode;

async fn finish(node: InProcessNode) {
    let report = node.host().invariants();
    assert!(report.ok(), "simulated host invariants: {report:?}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_an_smb_and_an_iscsi_volume_over_the_native_backend() {
    let node = InProcessNode::start_native(&fixtures::scenario())
        .await
        .expect("native node starts");
    let (k, host) = (node.kubelet(), node.admin());
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
    let staging = k.staging_path(&lun);
    assert_eq!(
        host.read_file(&format!(r"{staging}\row.txt"))
            .await
            .expect("on the LUN"),
        "hello on NTFS"
    );
    for v in [&smb, &lun] {
        let stats = k.stats(&pod, v).await.expect("stats");
        let abnormal = stats
            .volume_condition
            .as_ref()
            .map(|c| c.abnormal)
            .unwrap_or(false);
        assert!(!abnormal, "{stats:?}");
    }
    // The native backend talked to Windows, not to csi-proxy: the audit holds WMI and Win32 calls only (kubelet's
    // own directories go through the simulator's admin interface).
    let audit = node.host().audit(0);
    assert!(
        audit
            .iter()
            .any(|e| e.rpc == "MSFT_SmbGlobalMapping.Create")
    );
    assert!(audit.iter().any(|e| e.rpc == "MSFT_iSCSITarget.Connect"));
    assert!(
        !audit.iter().any(|e| sim::RPCS.contains(&e.rpc.as_str())),
        "a csi-proxy RPC was made"
    );
    k.unmount(host, &pod, &smb).await.expect("unmount smb");
    k.unmount(host, &pod, &lun).await.expect("unmount lun");
    // The LUN keeps its data: another pod mounts it again.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_node_reboot_the_native_backend_repairs_the_smb_mapping_itself() {
    let node = InProcessNode::start_native(&fixtures::scenario())
        .await
        .expect("native node starts");
    let (k, host) = (node.kubelet(), node.admin());
    let pod = Pod::new("web", "web-0");
    let vol = fixtures::smb_volume("pv-reboot", "web", "shared", Some("shared"));
    let t = k.mount(host, &pod, &vol).await.expect("mount");
    host.reboot().await.expect("reboot");
    // The mapping is Disconnected: the volume is reported abnormal (not an error).
    let stats = k.stats(&pod, &vol).await.expect("stats");
    assert!(
        stats.volume_condition.as_ref().is_some_and(|c| c.abnormal),
        "{stats:?}"
    );
    // kubelet re-stages after the reboot: the mapping is removed and re-created, the pod's path works again.
    k.unmount(host, &pod, &vol).await.expect("unmount");
    let t = {
        let again = k.mount(host, &pod, &vol).await.expect("remount");
        assert_eq!(again, t);
        again
    };
    host.write_file(&format!(r"{t}\after.txt"), "after the reboot")
        .await
        .expect("write");
    k.unmount(host, &pod, &vol).await.expect("unmount");
    finish(node).await;
}
