//! The kubelet plugin-registration handshake, as far as it involves the driver.
//!
//! node-driver-registrar dials the driver's socket (`--csi-address`), calls `GetPluginInfo`, and serves kubelet's
//! Registration API on `<--plugin-registration-path>\<name from GetPluginInfo>-reg.sock`, telling kubelet to dial
//! `--kubelet-registration-path`. So: the name the driver reports must be the chart's driver name, the socket
//! kubelet dials must be the one the driver serves, and the registration socket must land where kubelet's plugin
//! watcher looks (`C:\var\lib\kubelet\plugins_registry`). The chart is rendered with Helm 3 (`$WINCSI_HELM3`, else
//! `helm3` on `PATH`; a missing Helm fails the test and says to run `.ci/install.sh`).
#![cfg(unix)]

use std::path::PathBuf;
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;
use wincsi_e2e::kubelet::{plugin_socket_path, registration_socket_path};
use wincsi_e2e::{TestNode, binaries, fixtures};

fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/wincsi")
}

fn helm3() -> PathBuf {
    if let Some(p) = std::env::var_os("WINCSI_HELM3") {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("helm3")).find(|p| p.is_file()))
        .unwrap_or_else(|| panic!("helm3 not found ($WINCSI_HELM3 unset, none on PATH): run .ci/install.sh and source .ci/env.sh"))
}

fn render_default_chart() -> Vec<Value> {
    let home = tempfile::tempdir().expect("temp dir");
    let out = Command::new(helm3())
        .args(["template", "wincsi"])
        .arg(chart_dir())
        .args(["--namespace", "kube-system"])
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .expect("running helm3");
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `--flag=value` of the named container of the node DaemonSet.
fn flag(objects: &[Value], container: &str, flag: &str) -> String {
    let ds = objects
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let c = ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == container)
        .unwrap_or_else(|| panic!("container {container}"));
    let prefix = format!("{flag}=");
    c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
        .unwrap_or_else(|| panic!("{container} has no {flag}"))
}

fn values() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values.yaml");
    serde_norway::from_str(&text).expect("values.yaml is YAML")
}

#[test]
fn chart_default_paths_agree_with_the_driver_endpoint_and_kubelets_plugin_watcher() {
    let values = values();
    let root = values["kubeletRoot"].as_str().expect("kubeletRoot");
    let name = values["driver"]["name"].as_str().expect("driver.name");
    assert_eq!(name, wincsi_e2e::DRIVER_NAME);
    assert_eq!(root, wincsi_e2e::kubelet::KUBELET_ROOT);

    let objects = render_default_chart();
    let endpoint = flag(&objects, "wincsi-node", "--endpoint");
    let driver_name = flag(&objects, "wincsi-node", "--driver-name");
    let csi_address = flag(&objects, "node-driver-registrar", "--csi-address");
    let kubelet_path = flag(
        &objects,
        "node-driver-registrar",
        "--kubelet-registration-path",
    );
    let reg_dir = flag(
        &objects,
        "node-driver-registrar",
        "--plugin-registration-path",
    );

    // The registrar dials the socket the driver serves, and tells kubelet the same socket (host view).
    assert_eq!(csi_address, endpoint);
    assert_eq!(
        endpoint,
        format!("unix://{}", plugin_socket_path(root, name))
    );
    assert_eq!(kubelet_path, plugin_socket_path(root, name));
    assert_eq!(driver_name, name);
    // The registration socket kubelet's plugin watcher finds: <root>\plugins_registry\<name>-reg.sock.
    assert_eq!(
        format!(r"{}\{name}-reg.sock", reg_dir.trim_end_matches('\\')),
        registration_socket_path(root, name)
    );
    assert_eq!(
        registration_socket_path(root, name),
        r"C:\var\lib\kubelet\plugins_registry\wincsi.csi.io-reg.sock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrar_handshake_get_plugin_info_names_the_chart_driver_and_the_driver_is_ready() {
    let name = values()["driver"]["name"]
        .as_str()
        .expect("driver.name")
        .to_owned();
    let node = TestNode::start_with(&binaries!(), &fixtures::scenario(), |o| {
        o.driver_name = name.clone()
    })
    .await
    .expect("node starts");
    let mut id = node.csi().identity();
    // What node-driver-registrar does first: GetPluginInfo on --csi-address.
    let info = id
        .get_plugin_info(csi::v1::GetPluginInfoRequest {})
        .await
        .expect("GetPluginInfo")
        .into_inner();
    assert_eq!(info.name, name);
    assert!(!info.vendor_version.is_empty(), "vendor_version is set");
    // The registration socket the registrar then creates is named after that answer.
    assert_eq!(
        registration_socket_path(wincsi_e2e::kubelet::KUBELET_ROOT, &info.name),
        r"C:\var\lib\kubelet\plugins_registry\wincsi.csi.io-reg.sock"
    );
    // The registrar's liveness probe and kubelet's first calls.
    let probe = id
        .probe(csi::v1::ProbeRequest {})
        .await
        .expect("Probe")
        .into_inner();
    assert_ne!(
        probe.ready,
        Some(false),
        "the driver reports ready once csi-proxy answers"
    );
    let caps = id
        .get_plugin_capabilities(csi::v1::GetPluginCapabilitiesRequest {})
        .await
        .expect("caps")
        .into_inner();
    let _ = caps; // A node-only plugin may advertise no plugin capabilities; the call must succeed.
    let node_info = node
        .csi()
        .node()
        .node_get_info(csi::v1::NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner();
    assert_eq!(node_info.node_id, node.driver_options().node_id);
    node.shutdown().await;
}
