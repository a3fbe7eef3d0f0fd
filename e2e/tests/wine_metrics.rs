//! The Windows build of the driver under Wine (by `.ci/wine-run.sh`): `--health-address` and `--metrics-address` on
//! one TCP listener bound as the chart binds it (`:PORT`), `/metrics` after kubelet's calls over the real csi-proxy
//! named pipes, and `/readyz` naming the system pipe while csi-proxy is down, with `/livez` up.

#![cfg(windows)]

mod metrics_support;

use metrics_support::{get, http_listeners, reachable, sample, until_status};
use wincsi_e2e::fixtures::{self, SECRETS};
use wincsi_e2e::{Pod, ProxyWiring, TestNode, binaries};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_over_tcp_beside_named_pipes() {
    let node = TestNode::start_with(&binaries!(), &fixtures::scenario(), |o| {
        o.extra_args
            .extend(["--health-address", ":0", "--metrics-address", ":0"].map(String::from));
    })
    .await
    .expect("node starts under Wine");
    assert!(matches!(node.sim().wiring(), ProxyWiring::NamedPipes(_)));
    let listeners = http_listeners(&node.driver_logs());
    let addr = reachable(listeners["/metrics /readyz /livez"]);
    assert_eq!(get(addr, "/livez").await, (200, "ok\n".to_owned()));
    assert_eq!(get(addr, "/readyz").await, (200, "ok\n".to_owned()));

    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("wine", "metrics-0");
    let vol = fixtures::smb_volume("pv-wine-metrics", "wine", "files", None);
    k.mount(host, &pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.driver_logs()));
    let (status, text) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    for (series, value) in [
        (
            "wincsi_csi_requests_total{method=\"NodeStageVolume\",grpc_code=\"OK\"}",
            1.0,
        ),
        (
            "wincsi_host_calls_total{backend=\"csi-proxy\",operation=\"NewSmbGlobalMapping\",outcome=\"ok\"}",
            1.0,
        ),
        ("wincsi_volumes_published{protocol=\"smb\"}", 1.0),
        ("wincsi_host_backend_up{backend=\"csi-proxy\"}", 1.0),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series}\n{text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with("wincsi_build_info{")
            && l.contains("target=\"x86_64-pc-windows-gnu\"")),
        "{text}"
    );
    k.unmount(host, &pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.driver_logs()));

    // csi-proxy goes away: not ready, naming the filesystem pipe; still live. Back: ready.
    host.crash_csi_proxy("wine e2e").await.expect("crash");
    let reason = until_status(addr, "/readyz", 503).await;
    assert!(
        reason.starts_with("csi-proxy PathExists: ") && reason.contains("csi-proxy-filesystem-v1"),
        "{reason:?}"
    );
    assert_eq!(get(addr, "/livez").await.0, 200);
    host.restart_csi_proxy().await.expect("restart");
    until_status(addr, "/readyz", 200).await;

    if let Err(e) = node.check_clean().await {
        panic!("{e}\n--- driver log ---\n{}", node.driver_logs());
    }
    node.check_no_secret_in_logs(SECRETS)
        .expect("no secret in logs");
    node.shutdown().await;
}
