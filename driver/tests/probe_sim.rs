//! Readiness (`/readyz`) and the CSI `Probe` against the simulated host, on every csi-proxy release and on the
//! native backend: what they ask of the host, and that they start no process on it (issue 29 item 4). The probes
//! are the ones the binary builds (`backend::probe`, `backend::probe_within`), over the simulated csi-proxy's Unix
//! sockets or its Windows view.
#![cfg(unix)]

use std::sync::Arc;

use csi::v1::ProbeRequest;
use csi::v1::identity_server::Identity;
use sim::{CsiProxyVersion, HostOptions, Scenario, SimHost};
use tonic::Request;
use wincsi::config::Config;
use wincsi::identity::IdentityService;
use wincsi::observability::{READINESS_TIMEOUT, Readiness, ServerState};

/// The driver's plugin directory under the default kubelet root: what both probes read.
const PLUGIN_DIR: &str = r"C:\var\lib\kubelet\plugins\wincsi.csi.io";

fn config(sockets: &std::path::Path) -> Config {
    Config::try_parse_args([
        "wincsi-node",
        "--endpoint",
        "unix:///tmp/unused.sock",
        "--node-id",
        "n1",
        "--csi-proxy-socket-dir",
        &sockets.to_string_lossy(),
    ])
    .expect("config")
}

fn host(v: CsiProxyVersion, sandbox: &std::path::Path) -> SimHost {
    let opts = HostOptions {
        csi_proxy_version: Some(v),
        ..HostOptions::default()
    };
    SimHost::new(&Scenario::default(), sandbox, opts).expect("sim")
}

/// Ten readiness checks (the cache is bypassed: one check each) and ten CSI Probes.
async fn probe_twenty_times(
    probe: Arc<dyn wincsi::host::HostProbe>,
    readiness_probe: Arc<dyn wincsi::host::HostProbe>,
) {
    let state = ServerState::default();
    state.set_serving();
    let identity = IdentityService::new("wincsi.csi.io", probe);
    for _ in 0..10 {
        let readiness = Readiness::new(readiness_probe.clone(), "backend", state.clone());
        assert_eq!(readiness.ready().await, Ok(()));
        let answer = identity
            .probe(Request::new(ProbeRequest {}))
            .await
            .expect("probe")
            .into_inner();
        assert_eq!(answer.ready, Some(true));
    }
}

#[tokio::test]
async fn csi_proxy_probes_read_the_plugin_directory_and_start_no_process_on_any_release() {
    for v in CsiProxyVersion::ALL {
        let sandbox = tempfile::tempdir().expect("tmp");
        let sockets = tempfile::tempdir().expect("tmp");
        let sim = host(v, sandbox.path());
        let serving = sim::serve_unix(sim.clone(), sockets.path()).expect("serve");
        let cfg = config(sockets.path());
        probe_twenty_times(
            wincsi::backend::probe(&cfg),
            wincsi::backend::probe_within(&cfg, READINESS_TIMEOUT),
        )
        .await;
        let calls = sim.audit(0);
        assert_eq!(calls.len(), 20, "{v}: one host call per check");
        for call in &calls {
            assert_eq!(
                (call.rpc.as_str(), call.args["path"].as_str()),
                ("PathExists", Some(PLUGIN_DIR)),
                "{v}: {call:?}"
            );
            assert!(call.host_processes.is_zero(), "{v}: {call:?}");
        }
        assert!(
            sim.host_processes().is_empty(),
            "{v}: {:?}",
            sim.host_processes()
        );

        // Unreachable: the reason names the call and the endpoint; the CSI Probe stays ready (identity.rs).
        sim.crash_csi_proxy("test");
        sim.wait_endpoints().await;
        let reason = wincsi::backend::probe_within(&cfg, READINESS_TIMEOUT)
            .check()
            .await
            .expect_err("csi-proxy is gone");
        assert!(
            reason.starts_with("csi-proxy PathExists: ")
                && reason.contains("csi-proxy-filesystem-v1.sock"),
            "{v}: {reason}"
        );
        serving.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_native_probe_makes_one_win32_call_and_no_wmi_query() {
    let sandbox = tempfile::tempdir().expect("tmp");
    let sim = host(CsiProxyVersion::DEFAULT, sandbox.path());
    let cfg = config(sandbox.path());
    let windows = Arc::new(sim::wmi::WindowsView::new(sim.clone()));
    probe_twenty_times(
        wincsi::backend::native_probe(&cfg, windows.clone()),
        wincsi::backend::native_probe_within(&cfg, windows, READINESS_TIMEOUT),
    )
    .await;
    let calls = sim.audit(0);
    assert_eq!(calls.len(), 20, "one Win32 call per check: {calls:?}");
    for call in &calls {
        assert_eq!(call.rpc, "GetFileAttributesW", "{call:?}");
    }
    assert!(sim.host_processes().is_empty());
}
