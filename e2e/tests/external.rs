//! Opt-in: kubelet's exact call sequences against a driver started outside the test (external mode, see
//! `e2e/src/external.rs` and `e2e/README.md`) — on a real Windows node against the real csi-proxy with the CSI
//! endpoint on AF_UNIX (the Windows-runner workflow), or here against a driver and a simulated host started by
//! `scripts/real-node/e2e-external.sh`. A pod writes a file through its publish path and a second pod reads it
//! after a full teardown and re-mount; afterwards nothing is left at the staging or publish paths.
//!
//! ```text
//! WINCSI_E2E_EXTERNAL_ENDPOINT='unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock' \
//! WINCSI_E2E_SMB_SOURCE='\\server\share' WINCSI_E2E_SMB_USERNAME=... WINCSI_E2E_SMB_PASSWORD=... \
//!   cargo test -p wincsi-e2e --test external -- --ignored smb
//! ```
//!
//! A test whose variables are unset fails and names them (it never passes vacuously). `smoke` runs first on a node:
//! the transport alone, bounded.

use std::time::Duration;

use wincsi_e2e::external::ExternalNode;
use wincsi_e2e::{Pod, Volume};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn required(name: &str) -> String {
    var(name).unwrap_or_else(|| panic!("{name} is not set: see e2e/README.md (external mode)"))
}

fn node() -> ExternalNode {
    ExternalNode::from_env().unwrap_or_else(|e| panic!("{e}"))
}

fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{:x}-{}", nanos, std::process::id())
}

/// The transport alone, before any lifecycle: connect to the endpoint and call GetPluginInfo within
/// `WINCSI_E2E_SMOKE_SECS` (default one minute). AF_UNIX on Windows runs nowhere but a real node: a hang there fails
/// here fast, and says so, instead of eating the lifecycle suite's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external mode: needs a running driver (see e2e/README.md)"]
async fn smoke() {
    let node = node();
    let bound = Duration::from_secs(var("WINCSI_E2E_SMOKE_SECS").map_or(60, |s| {
        s.parse()
            .expect("WINCSI_E2E_SMOKE_SECS is a number of seconds")
    }));
    let mut identity = node.kubelet.conn().identity();
    let info = tokio::time::timeout(
        bound,
        identity.get_plugin_info(csi::v1::GetPluginInfoRequest {}),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "no GetPluginInfo answer from {} within {bound:?}: the CSI transport hangs",
            node.endpoint
        )
    })
    .unwrap_or_else(|status| panic!("GetPluginInfo over {}: {status}", node.endpoint))
    .into_inner();
    let driver = var("WINCSI_E2E_DRIVER").unwrap_or_else(|| wincsi_e2e::DRIVER_NAME.to_owned());
    assert_eq!(info.name, driver, "{} serves another driver", node.endpoint);
    assert!(!info.vendor_version.is_empty(), "{info:?}");
}

/// Mount for a writer pod, write, tear down, mount for a reader pod, read, tear down; nothing left behind.
async fn round_trip(node: &ExternalNode, volume: &Volume) {
    let k = &node.kubelet;
    let h = &node.files;
    let token = format!("wincsi external e2e {}", volume.handle);
    let writer = Pod::new("external", &format!("writer-{}", volume.name));
    let publish = k
        .mount(h, &writer, volume)
        .await
        .unwrap_or_else(|e| panic!("mount: {e}"));
    node.pod_write(&publish, "e2e.txt", &token)
        .expect("the pod writes");
    let stats = k.stats(&writer, volume).await.expect("stats");
    assert!(!stats.usage.is_empty(), "stats report usage");
    k.unmount(h, &writer, volume).await.expect("unmount");
    assert!(
        !node.exists(&publish).expect("path"),
        "publish path left: {publish}"
    );
    let staging = k.staging_path(volume);
    assert!(
        !node.exists(&staging).expect("path"),
        "staging path left: {staging}"
    );

    let reader = Pod::new("external", &format!("reader-{}", volume.name));
    let publish = k
        .mount(h, &reader, volume)
        .await
        .unwrap_or_else(|e| panic!("re-mount: {e}"));
    assert_eq!(
        node.pod_read(&publish, "e2e.txt").expect("the pod reads"),
        token
    );
    k.unmount(h, &reader, volume).await.expect("unmount");
    assert!(!node.exists(&publish).expect("path"));
    assert!(!node.exists(&staging).expect("path"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external mode: needs a running driver (see e2e/README.md)"]
async fn smb() {
    let node = node();
    let id = run_id();
    let mut v = Volume::persistent(
        &format!("pv-smb-{id}"),
        &format!("smb-{id}"),
        "external",
        "smb",
    )
    .attr("source", &required("WINCSI_E2E_SMB_SOURCE"))
    .attr("subDir", &format!("wincsi-e2e-{id}"))
    .stage_secret("username", &required("WINCSI_E2E_SMB_USERNAME"))
    .stage_secret("password", &required("WINCSI_E2E_SMB_PASSWORD"));
    if let Some(domain) = var("WINCSI_E2E_SMB_DOMAIN") {
        v = v.stage_secret("domain", &domain);
    }
    round_trip(&node, &v).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external mode: needs a running driver (see e2e/README.md)"]
async fn iscsi() {
    let node = node();
    let id = run_id();
    let mut v = Volume::persistent(
        &format!("pv-iscsi-{id}"),
        &format!("iscsi-{id}"),
        "external",
        "iscsi",
    )
    .attr("targetPortal", &required("WINCSI_E2E_ISCSI_PORTAL"))
    .attr("iqn", &required("WINCSI_E2E_ISCSI_IQN"))
    .attr(
        "lun",
        &var("WINCSI_E2E_ISCSI_LUN").unwrap_or_else(|| "0".to_owned()),
    )
    // An NTFS LUN serves one node's writers: the multi-node writer modes are refused for iSCSI.
    .mode(csi::v1::volume_capability::access_mode::Mode::SingleNodeWriter);
    if let (Some(user), Some(secret)) = (
        var("WINCSI_E2E_ISCSI_CHAP_USERNAME"),
        var("WINCSI_E2E_ISCSI_CHAP_PASSWORD"),
    ) {
        v = v
            .attr("sessionCHAPAuth", "true")
            .stage_secret("node.session.auth.username", &user)
            .stage_secret("node.session.auth.password", &secret);
    }
    round_trip(&node, &v).await;
}
