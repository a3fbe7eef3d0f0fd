//! The Windows builds of the driver and the simulated host, run under Wine (by `.ci/wine-run.sh`) as separate
//! processes that talk over the **real csi-proxy named pipes** (`\\.\pipe\wincsi-e2e-<pid>-<n>\csi-proxy-*`);
//! kubelet talks CSI over loopback TCP because Wine has no AF_UNIX. SMB and iSCSI happy paths (stage, publish,
//! stats, unpublish, unstage) and a full teardown, each ending with the simulator's invariants (no data loss, no
//! mapping or session left) and an empty driver state directory.
//!
//! Wine 8 does not create symbolic links (`CreateSymbolicLinkW` is a stub that reports success), so the
//! simulator probes its sandbox at start-up and falls back to emulated links there (see `sim/src/state/links.rs`):
//! staging and publish links and mount points behave like real ones for every host call, and the pod's data is
//! written and read *through* them here exactly as on Linux and real Windows.

#![cfg(windows)]

use wincsi_e2e::fixtures::{self, SECRETS, SMB_SERVER, SMB_SHARE};
use wincsi_e2e::{Pod, ProxyWiring, TestNode, binaries};

async fn node() -> TestNode {
    let node = TestNode::start(&binaries!(), &fixtures::scenario())
        .await
        .expect("node starts under Wine");
    assert!(
        matches!(node.sim().wiring(), ProxyWiring::NamedPipes(_)),
        "named pipes on Windows"
    );
    let endpoint = node.driver().expect("driver").endpoint().to_owned();
    assert!(
        endpoint.starts_with("tcp://127.0.0.1:") && !endpoint.ends_with(":0"),
        "{endpoint}"
    );
    node
}

async fn finish(node: TestNode) {
    if let Err(e) = node.check_clean().await {
        panic!("{e}\n--- driver log ---\n{}", node.driver_logs());
    }
    node.check_no_secret_in_logs(SECRETS)
        .expect("no secret in logs");
    node.shutdown().await;
}

/// Asserts that the host holds a link (publish link or mount point) at `path`.
async fn assert_link(node: &TestNode, path: &str) {
    let target = node.host().read_link(path).await.expect("read_link");
    assert!(target.is_some(), "no link at {path}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smb_volume_over_real_named_pipes_stage_publish_write_teardown() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("wine", "smb-0");
    let vol = fixtures::smb_volume("pv-wine-smb", "wine", "files", None);
    let t = k
        .mount(host, &pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.driver_logs()));
    let state = host.state().await.expect("state");
    assert_eq!(
        state["mappings"].as_object().map_or(0, |m| m.len()),
        1,
        "{}",
        state["mappings"]
    );
    assert_link(&node, &t).await;
    host.write_file(&format!(r"{t}\hello.txt"), "hello from Wine")
        .await
        .expect("write");
    assert_eq!(
        host.read_share_file(SMB_SERVER, SMB_SHARE, "hello.txt")
            .await
            .expect("read"),
        "hello from Wine"
    );
    k.stats(&pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.driver_logs()));
    k.unmount(host, &pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.driver_logs()));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iscsi_volume_over_real_named_pipes_stage_publish_write_teardown() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("wine", "iscsi-0");
    let vol = fixtures::iscsi_volume("pv-wine-lun", "wine", "disk", 0);
    let t = k
        .mount(host, &pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.driver_logs()));
    let state = host.state().await.expect("state");
    assert_eq!(
        state["sessions"].as_array().map_or(0, Vec::len),
        1,
        "{}",
        state["sessions"]
    );
    assert_link(&node, &t).await;
    host.write_file(&format!(r"{t}\data.txt"), "on NTFS")
        .await
        .expect("write");
    let staging = k.staging_path(&vol);
    assert_eq!(
        host.read_file(&format!(r"{staging}\data.txt"))
            .await
            .expect("read"),
        "on NTFS"
    );
    k.unmount(host, &pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.driver_logs()));
    finish(node).await;
}
