//! The real `wincsi-node` binary's HTTP endpoints over loopback: `/metrics` scraped after kubelet's calls (every
//! RPC and every host call counted, volumes by protocol, build info, no secret), and `/readyz` / `/livez` as csi-proxy
//! comes and goes (a node without csi-proxy is not ready but stays live; the CSI `Probe` stays ready).
#![cfg(unix)]

mod metrics_support;

use metrics_support::{
    get, host_calls_by_operation, http_listeners, reachable, sample, until_status,
};
use wincsi_e2e::fixtures::{self, SECRETS};
use wincsi_e2e::{DriverOptions, DriverProcess, Pod, ProxyWiring, SimProcess, TestNode, binaries};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_kubelets_rpcs_and_every_host_call() {
    let node = TestNode::start_with(&binaries!(), &fixtures::scenario(), |o| {
        o.extra_args.extend(
            [
                "--metrics-address",
                "127.0.0.2:0",
                "--health-address",
                "127.0.0.1:0",
            ]
            .map(String::from),
        );
    })
    .await
    .expect("node starts");
    let listeners = http_listeners(&node.driver_logs());
    let metrics = listeners["/metrics"];
    let health = listeners["/readyz /livez"];
    // Unequal addresses (equal ones share a listener), both on loopback.
    assert_ne!(metrics.ip(), health.ip(), "two listeners");

    // Before any volume: every protocol's volume gauges are there, at 0 (a dashboard and an `== 0` alert see them).
    let (_, text) = get(metrics, "/metrics").await;
    for protocol in ["smb", "iscsi"] {
        for gauge in ["wincsi_volumes_staged", "wincsi_volumes_published"] {
            let series = format!("{gauge}{{protocol=\"{protocol}\"}}");
            assert_eq!(sample(&text, &series), Some(0.0), "{series}\n{text}");
        }
    }

    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("team-a", "app-0");
    let smb = fixtures::smb_volume("pv-smb", "team-a", "data-smb", None);
    k.mount(host, &pod, &smb).await.expect("mount");
    // A refused call: NodeStageVolume without its required fields.
    let refused = node
        .csi()
        .node()
        .node_stage_volume(csi::v1::NodeStageVolumeRequest::default())
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);

    let (status, text) = get(metrics, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    let value =
        |series: &str| sample(&text, series).unwrap_or_else(|| panic!("no {series}\n{text}"));
    for (method, code, n) in [
        ("NodeStageVolume", "OK", 1.0),
        ("NodePublishVolume", "OK", 1.0),
        ("NodeStageVolume", "InvalidArgument", 1.0),
    ] {
        let labels = format!("{{method=\"{method}\",grpc_code=\"{code}\"}}");
        assert_eq!(value(&format!("wincsi_csi_requests_total{labels}")), n);
        assert_eq!(
            value(&format!(
                "wincsi_csi_request_duration_seconds_count{labels}"
            )),
            n
        );
    }
    // Every host call the simulated csi-proxy served is counted once, under its csi-proxy method name (the backend
    // probes' PathExists of the driver's plugin directory is a health check, not a host call of the port).
    let mut served = host.call_counts().await.expect("call counts");
    let plugin_dir = format!(
        r"{}\plugins\{}",
        wincsi_e2e::kubelet::KUBELET_ROOT,
        wincsi_e2e::DRIVER_NAME
    );
    let probes = host
        .audit(0)
        .await
        .expect("audit")
        .iter()
        .filter(|e| e.rpc == "PathExists" && e.args["path"].as_str() == Some(plugin_dir.as_str()))
        .count() as u64;
    if let Some(n) = served.get_mut("PathExists") {
        *n -= probes;
    }
    served.retain(|_, n| *n > 0);
    assert!(
        !host
            .host_processes()
            .await
            .expect("processes")
            .contains_key("GetBIOSSerialNumber"),
        "no probe runs wmic"
    );
    assert!(served.contains_key("NewSmbGlobalMapping"), "{served:?}");
    assert_eq!(host_calls_by_operation(&text), served, "{text}");
    assert_eq!(
        value(
            "wincsi_host_calls_total{backend=\"csi-proxy\",operation=\"NewSmbGlobalMapping\",outcome=\"ok\"}"
        ),
        1.0
    );
    assert_eq!(value("wincsi_volumes_staged{protocol=\"smb\"}"), 1.0);
    assert_eq!(value("wincsi_volumes_published{protocol=\"smb\"}"), 1.0);
    for problem in ["needs_restage", "unreachable", "unreferenced"] {
        assert_eq!(
            value(&format!(
                "wincsi_state_record_problems{{problem=\"{problem}\"}}"
            )),
            0.0,
            "{problem}"
        );
    }
    assert_eq!(value("wincsi_host_backend_up{backend=\"csi-proxy\"}"), 1.0);
    // A stage (its claim, its Staged record) and a publish (its record) each waited for a durable change.
    let changes = value("wincsi_state_commit_changes_total");
    assert!(changes >= 3.0, "{text}");
    assert!(
        value("wincsi_state_commit_wait_seconds_count") >= 3.0,
        "{text}"
    );
    assert!(
        value("wincsi_state_commit_duration_seconds_count") >= changes,
        "{text}"
    );
    let info = text
        .lines()
        .find(|l| l.starts_with("wincsi_build_info{"))
        .expect("build info");
    assert!(
        info.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && info.ends_with("} 1"),
        "{info}"
    );
    for secret in SECRETS {
        assert!(!text.contains(secret), "a secret in /metrics");
    }
    assert_eq!(get(health, "/readyz").await, (200, "ok\n".to_owned()));
    assert_eq!(get(health, "/livez").await, (200, "ok\n".to_owned()));
    assert_eq!(
        get(health, "/metrics").await.0,
        404,
        "metrics only on --metrics-address"
    );

    assert_eq!(value("wincsi_volumes_staged{protocol=\"iscsi\"}"), 0.0);

    // Unmounted: the volume gauges follow the records back to 0 (they do not disappear).
    k.unmount(host, &pod, &smb).await.expect("unmount");
    let (_, text) = get(metrics, "/metrics").await;
    assert_eq!(
        sample(&text, "wincsi_volumes_staged{protocol=\"smb\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "wincsi_volumes_published{protocol=\"smb\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "wincsi_csi_requests_total{method=\"NodeUnstageVolume\",grpc_code=\"OK\"}"
        ),
        Some(1.0)
    );

    node.check_clean().await.expect("clean");
    node.check_no_secret_in_logs(SECRETS)
        .expect("no secret in logs");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_csi_proxy_is_not_ready_but_live() {
    let dir = tempfile::tempdir().expect("tmp");
    let sockets = dir.path().join("proxy");
    std::fs::create_dir_all(&sockets).expect("dir");
    let wiring = ProxyWiring::UnixSockets(sockets.clone());
    let mut opts = DriverOptions::new(dir.path(), wiring.clone());
    // One address for both: one listener serves /readyz, /livez and /metrics.
    // `:PORT` as the chart passes it: every interface, reached here over IPv4 loopback.
    opts.extra_args
        .extend(["--health-address", ":0", "--metrics-address", ":0"].map(String::from));
    let driver = DriverProcess::start(&binaries!().node, &opts)
        .await
        .expect("driver starts");
    let listeners = http_listeners(&driver.log().text());
    let addr = reachable(listeners["/metrics /readyz /livez"]);
    assert_eq!(listeners.len(), 1, "{listeners:?}");

    // No csi-proxy: not ready, with the reason naming the endpoint; live; the CSI Probe still ready.
    let (status, reason) = get(addr, "/readyz").await;
    assert_eq!(status, 503);
    let filesystem = sockets.join("csi-proxy-filesystem-v1.sock");
    assert!(
        reason.starts_with("csi-proxy PathExists: ")
            && reason.contains(&format!("{} does not exist", filesystem.display()))
            && reason.ends_with('\n')
            && reason.lines().count() == 1,
        "{reason:?}"
    );
    assert_eq!(get(addr, "/livez").await, (200, "ok\n".to_owned()));
    let (_, text) = get(addr, "/metrics").await;
    assert_eq!(
        sample(&text, "wincsi_host_backend_up{backend=\"csi-proxy\"}"),
        Some(0.0)
    );
    let conn = wincsi_e2e::CsiConn::connect(driver.endpoint()).expect("connect");
    let probe = conn
        .identity()
        .probe(csi::v1::ProbeRequest {})
        .await
        .expect("probe")
        .into_inner();
    assert_eq!(
        probe.ready,
        Some(true),
        "restarting the driver cannot start csi-proxy"
    );

    // csi-proxy starts: ready. It crashes: not ready again, still live.
    let sim = SimProcess::start(
        &binaries!().sim,
        &fixtures::scenario(),
        &dir.path().join("host"),
        &wiring,
    )
    .await
    .expect("sim starts");
    assert_eq!(until_status(addr, "/readyz", 200).await, "ok\n");
    sim.admin().crash_csi_proxy("e2e").await.expect("crash");
    let reason = until_status(addr, "/readyz", 503).await;
    assert!(reason.starts_with("csi-proxy PathExists: "), "{reason:?}");
    assert_eq!(get(addr, "/livez").await.0, 200);
    sim.admin().restart_csi_proxy().await.expect("restart");
    until_status(addr, "/readyz", 200).await;

    let log = driver.kill().await.text();
    for secret in SECRETS {
        assert!(!log.contains(secret));
    }
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_http_listener_by_default() {
    let node = TestNode::start(&binaries!(), &fixtures::scenario())
        .await
        .expect("node starts");
    assert!(http_listeners(&node.driver_logs()).is_empty());
    node.shutdown().await;
}
