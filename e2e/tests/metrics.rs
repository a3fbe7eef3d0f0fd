//! The real `wincsi-node` binary's HTTP endpoints over loopback: `/metrics` scraped after kubelet's calls (every
//! RPC and every host call counted, volumes by protocol, build info, no secret), and `/readyz` / `/livez` as csi-proxy
//! comes and goes (a node without csi-proxy is not ready but stays live; the CSI `Probe` stays ready).
#![cfg(unix)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wincsi_e2e::fixtures::{self, SECRETS};
use wincsi_e2e::{DriverOptions, DriverProcess, Pod, ProxyWiring, SimProcess, TestNode, binaries};

/// The HTTP listeners the driver logged (`serving HTTP`): address → the paths it serves.
fn http_listeners(log: &str) -> BTreeMap<String, SocketAddr> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let field = |k: &str| {
            v.get(k)
                .or_else(|| v.get("fields").and_then(|f| f.get(k)))
                .and_then(|x| x.as_str())
                .map(str::to_owned)
        };
        if field("message").as_deref() == Some("serving HTTP") {
            let addr = field("address")
                .expect("address")
                .parse()
                .expect("socket address");
            out.insert(field("paths").expect("paths"), addr);
        }
    }
    out
}

/// `GET path` over a fresh connection: the status and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: wincsi\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    (head[9..12].parse().expect("status"), body.to_owned())
}

/// Asks `path` until it answers `status` (the readiness result is cached for a second), at most 30 s.
async fn until_status(addr: SocketAddr, path: &str, status: u16) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (got, body) = get(addr, path).await;
        if got == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} still answers {got} {body:?}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the sample `name{labels}` (labels exactly as exposed), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
}

/// Sum of `wincsi_host_calls_total` by operation, over every outcome.
fn host_calls_by_operation(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) =
            line.strip_prefix("wincsi_host_calls_total{backend=\"csi-proxy\",operation=\"")
        else {
            continue;
        };
        let (op, rest) = rest.split_once('"').expect("operation");
        let n: u64 = rest
            .rsplit(' ')
            .next()
            .expect("value")
            .parse()
            .expect("count");
        *out.entry(op.to_owned()).or_default() += n;
    }
    out
}

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
    // probes' GetBIOSSerialNumber is a health check, not a host call of the port).
    let mut served = host.call_counts().await.expect("call counts");
    served.remove("GetBIOSSerialNumber");
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
    assert_eq!(
        value("wincsi_state_record_problems{problem=\"needs_restage\"}"),
        0.0
    );
    assert_eq!(value("wincsi_host_backend_up{backend=\"csi-proxy\"}"), 1.0);
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

    // Unmounted: the volume gauges follow the records away.
    k.unmount(&pod, &smb).await.expect("unmount");
    let (_, text) = get(metrics, "/metrics").await;
    assert_eq!(
        sample(&text, "wincsi_volumes_staged{protocol=\"smb\"}"),
        None,
        "{text}"
    );
    assert_eq!(
        sample(&text, "wincsi_volumes_published{protocol=\"smb\"}"),
        None
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
    opts.extra_args.extend(
        [
            "--health-address",
            "127.0.0.1:0",
            "--metrics-address",
            "127.0.0.1:0",
        ]
        .map(String::from),
    );
    let driver = DriverProcess::start(&binaries!().node, &opts)
        .await
        .expect("driver starts");
    let listeners = http_listeners(&driver.log().text());
    let addr = listeners["/metrics /readyz /livez"];
    assert_eq!(listeners.len(), 1, "{listeners:?}");

    // No csi-proxy: not ready, with the reason naming the endpoint; live; the CSI Probe still ready.
    let (status, reason) = get(addr, "/readyz").await;
    assert_eq!(status, 503);
    let system = sockets.join("csi-proxy-system-v1alpha1.sock");
    assert!(
        reason.starts_with("csi-proxy GetBIOSSerialNumber: ")
            && reason.contains(&format!("{} does not exist", system.display()))
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
    assert!(
        reason.starts_with("csi-proxy GetBIOSSerialNumber: "),
        "{reason:?}"
    );
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
