//! End-to-end tests of the real `wincsi-node` binary on a Unix socket in a temp dir: every
//! implemented RPC through a tonic client, gRPC codes, socket-path handling and SIGTERM.
//!
//! Readiness is the binary's `serving CSI` log line, which it prints only after the socket is
//! bound, so no test sleeps.
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use csi::v1::identity_client::IdentityClient;
use csi::v1::node_client::NodeClient;
use csi::v1::node_service_capability::rpc::Type as RpcType;
use csi::v1::{self as v1, plugin_capability};
use hyper_util::rt::TokioIo;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

mod raw_h2;

const BIN: &str = env!("CARGO_BIN_EXE_wincsi-node");
/// Upper bound for the binary to become ready or exit (a hang fails the test, never a sleep).
const BOUND: Duration = Duration::from_secs(60);

/// A running `wincsi-node`; killed on drop. stderr lines arrive on `lines`.
struct Driver {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Driver {
    fn spawn(args: &[&str]) -> Self {
        let mut cmd = Command::new(BIN);
        for var in [
            "CSI_ENDPOINT",
            "KUBE_NODE_NAME",
            "DRIVER_NAME",
            "LOG_LEVEL",
            "CSI_PROXY_SOCKET_DIR",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wincsi-node");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Waits for a stderr line containing `needle`; panics with the log so far otherwise.
    fn wait_for(&mut self, needle: &str) -> String {
        loop {
            match self.lines.recv_timeout(BOUND) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "no line with {needle:?} ({e}); log:\n{}",
                    self.log.join("\n")
                ),
            }
        }
    }

    /// All remaining stderr (until the process closes it).
    fn drain(&mut self) -> String {
        while let Ok(line) = self.lines.recv_timeout(BOUND) {
            self.log.push(line);
        }
        self.log.join("\n")
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let log = self.drain();
        let status = self.child.wait().expect("wait");
        self.log = vec![log];
        status
    }

    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A request with a gRPC deadline, so a backend that never answers cannot hang the test.
fn bounded<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(Duration::from_secs(20));
    req
}

async fn channel(socket: &Path) -> Channel {
    let socket = socket.to_path_buf();
    Endpoint::from_static("http://[::1]:50051")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                tokio::net::UnixStream::connect(socket)
                    .await
                    .map(TokioIo::new)
            }
        }))
        .await
        .expect("connect to the CSI socket")
}

fn socket_in(dir: &tempfile::TempDir) -> (PathBuf, String) {
    let path = dir.path().join("csi.sock");
    let endpoint = format!("unix://{}", path.display());
    (path, endpoint)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_rpcs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, endpoint) = socket_in(&dir);
    // csi-proxy is "missing": point the backend at an empty socket directory.
    let proxy_dir = tempfile::tempdir().expect("tempdir");
    let mut driver = Driver::spawn(&[
        "--endpoint",
        &endpoint,
        "--node-id",
        "win-node-1",
        "--driver-name",
        "smb.example.com",
        "--csi-proxy-socket-dir",
        proxy_dir.path().to_str().expect("utf-8"),
    ]);
    driver.wait_for("serving CSI");
    let mut identity = IdentityClient::new(channel(&socket).await);

    let info = identity
        .get_plugin_info(v1::GetPluginInfoRequest {})
        .await
        .expect("GetPluginInfo")
        .into_inner();
    assert_eq!(info.name, "smb.example.com");
    assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.manifest["csi-spec"], "1.12.0");
    assert_eq!(info.manifest["version"], env!("CARGO_PKG_VERSION"));
    for key in ["target", "profile", "rustc"] {
        assert!(!info.manifest[key].is_empty(), "manifest {key}");
    }

    let caps = identity
        .get_plugin_capabilities(v1::GetPluginCapabilitiesRequest {})
        .await
        .expect("GetPluginCapabilities")
        .into_inner();
    let controller = v1::PluginCapability {
        r#type: Some(plugin_capability::Type::Service(
            plugin_capability::Service {
                r#type: plugin_capability::service::Type::ControllerService as i32,
            },
        )),
    };
    assert!(
        !caps.capabilities.contains(&controller),
        "node-only plugin advertises CONTROLLER_SERVICE"
    );

    // Backend unreachable: still ready (a restart would not help), with a warning logged.
    let probe = identity
        .probe(v1::ProbeRequest {})
        .await
        .expect("Probe")
        .into_inner();
    assert_eq!(probe.ready, Some(true));
    driver.wait_for("host backend unreachable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_rpcs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, endpoint) = socket_in(&dir);
    let mut driver = Driver::spawn(&[
        "--endpoint",
        &endpoint,
        "--node-id",
        "win-node-7",
        "--max-volumes-per-node",
        "24",
        "--topology",
        "topology.kubernetes.io/zone=zone-a",
        "--topology",
        "kubernetes.io/os=windows",
    ]);
    driver.wait_for("serving CSI");
    let mut node = NodeClient::new(channel(&socket).await);

    let caps = node
        .node_get_capabilities(v1::NodeGetCapabilitiesRequest {})
        .await
        .expect("NodeGetCapabilities")
        .into_inner();
    let advertised: Vec<i32> = caps
        .capabilities
        .iter()
        .filter_map(|c| {
            let v1::node_service_capability::Type::Rpc(rpc) = c.r#type.as_ref()?;
            Some(rpc.r#type)
        })
        .collect();
    let advertises = |t: RpcType| advertised.contains(&(t as i32));

    let info = node
        .node_get_info(v1::NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner();
    assert_eq!(info.node_id, "win-node-7");
    assert_eq!(info.max_volumes_per_node, 24);
    let segments = info.accessible_topology.expect("topology").segments;
    assert_eq!(segments.len(), 2);
    assert_eq!(segments["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(segments["kubernetes.io/os"], "windows");

    let staging = r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\abc\globalmount";
    let target = r"C:\var\lib\kubelet\pods\uid\volumes\kubernetes.io~csi\pv\mount";
    let capability = v1::VolumeCapability {
        access_type: Some(v1::volume_capability::AccessType::Mount(Default::default())),
        access_mode: Some(v1::volume_capability::AccessMode {
            mode: v1::volume_capability::access_mode::Mode::MultiNodeMultiWriter as i32,
        }),
    };

    // Invalid requests: INVALID_ARGUMENT naming the missing field.
    let err = node
        .node_stage_volume(v1::NodeStageVolumeRequest {
            staging_target_path: staging.into(),
            volume_capability: Some(capability.clone()),
            ..Default::default()
        })
        .await
        .expect_err("no volume id");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("volume_id"), "{}", err.message());
    let err = node
        .node_publish_volume(v1::NodePublishVolumeRequest {
            volume_id: "vol-1".into(),
            target_path: target.into(),
            ..Default::default()
        })
        .await
        .expect_err("no capability");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("volume_capability"),
        "{}",
        err.message()
    );
    let err = node
        .node_unpublish_volume(v1::NodeUnpublishVolumeRequest {
            volume_id: "vol-1".into(),
            ..Default::default()
        })
        .await
        .expect_err("no target");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("target_path"), "{}", err.message());

    // Valid requests. There is no host backend here (no csi-proxy), so nothing can succeed;
    // what matters is the code: UNIMPLEMENTED exactly for what is not advertised.
    let mut secrets = std::collections::HashMap::new();
    secrets.insert("password".to_owned(), "never-logged-Pa55".to_owned());
    let stage = node
        .node_stage_volume(bounded(v1::NodeStageVolumeRequest {
            volume_id: "vol-1".into(),
            staging_target_path: staging.into(),
            volume_capability: Some(capability.clone()),
            secrets: secrets.clone(),
            ..Default::default()
        }))
        .await;
    let unstage = node
        .node_unstage_volume(bounded(v1::NodeUnstageVolumeRequest {
            volume_id: "vol-1".into(),
            staging_target_path: staging.into(),
        }))
        .await;
    let stats = node
        .node_get_volume_stats(bounded(v1::NodeGetVolumeStatsRequest {
            volume_id: "vol-1".into(),
            volume_path: target.into(),
            ..Default::default()
        }))
        .await;
    let expand = node
        .node_expand_volume(bounded(v1::NodeExpandVolumeRequest {
            volume_id: "vol-1".into(),
            volume_path: target.into(),
            ..Default::default()
        }))
        .await;
    let publish = node
        .node_publish_volume(bounded(v1::NodePublishVolumeRequest {
            volume_id: "vol-1".into(),
            staging_target_path: staging.into(),
            target_path: target.into(),
            volume_capability: Some(capability.clone()),
            secrets,
            ..Default::default()
        }))
        .await;
    let unpublish = node
        .node_unpublish_volume(bounded(v1::NodeUnpublishVolumeRequest {
            volume_id: "vol-1".into(),
            target_path: target.into(),
        }))
        .await;
    let unimplemented =
        |r: &Result<(), tonic::Status>| matches!(r, Err(s) if s.code() == Code::Unimplemented);
    for (name, cap, result) in [
        (
            "NodeStageVolume",
            RpcType::StageUnstageVolume,
            stage.map(|_| ()),
        ),
        (
            "NodeUnstageVolume",
            RpcType::StageUnstageVolume,
            unstage.map(|_| ()),
        ),
        (
            "NodeGetVolumeStats",
            RpcType::GetVolumeStats,
            stats.map(|_| ()),
        ),
        (
            "NodeExpandVolume",
            RpcType::ExpandVolume,
            expand.map(|_| ()),
        ),
    ] {
        assert_eq!(
            unimplemented(&result),
            !advertises(cap),
            "{name}: advertised={} result={result:?}",
            advertises(cap)
        );
    }
    // Publish/unpublish have no capability: while staging is not implemented they are not
    // either (this driver only publishes staged volumes).
    if !advertises(RpcType::StageUnstageVolume) {
        assert!(unimplemented(&publish.map(|_| ())));
        assert!(unimplemented(&unpublish.map(|_| ())));
    }

    // One span per RPC with the volume id and paths; secrets never reach the log.
    driver.sigterm();
    assert!(driver.wait_exit().success());
    let log = driver.log.join("\n");
    assert!(log.contains("NodePublishVolume"), "{log}");
    assert!(
        log.contains("volume_id=\"vol-1\"") || log.contains("volume_id=vol-1"),
        "{log}"
    );
    assert!(log.contains("globalmount"), "{log}");
    assert!(log.contains("grpc_code"), "{log}");
    assert!(
        !log.contains("never-logged-Pa55"),
        "secret leaked into the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_and_sigterm_removes_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, endpoint) = socket_in(&dir);
    let mut driver = Driver::spawn(&[
        "--endpoint",
        &endpoint,
        "--node-id",
        "n1",
        "--log-format",
        "json",
    ]);
    let ready = driver.wait_for("serving CSI");
    assert!(
        ready.starts_with('{') && ready.ends_with('}'),
        "not JSON: {ready}"
    );
    assert!(ready.contains("\"endpoint\""), "{ready}");
    assert!(socket.exists());

    // An RPC, then SIGTERM: clean exit and the socket file is gone.
    let mut identity = IdentityClient::new(channel(&socket).await);
    identity.probe(v1::ProbeRequest {}).await.expect("Probe");
    driver.sigterm();
    let status = driver.wait_exit();
    let log = driver.log.join("\n");
    assert!(status.success(), "exit {status:?}: {log}");
    assert!(!socket.exists(), "socket left behind");
    // The idle connection was closed by graceful shutdown, not by the drain timeout.
    assert!(!log.contains("did not finish in time"), "{log}");
    drop(identity);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_socket_is_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, endpoint) = socket_in(&dir);
    // A socket file nobody listens on any more (e.g. left by a killed driver).
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(socket.exists());

    let mut driver = Driver::spawn(&["--endpoint", &endpoint, "--node-id", "n1"]);
    driver.wait_for("removing stale socket");
    driver.wait_for("serving CSI");
    let mut node = NodeClient::new(channel(&socket).await);
    let info = node
        .node_get_info(v1::NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner();
    assert_eq!(info.node_id, "n1");
}

#[test]
fn live_socket_is_not_stolen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, endpoint) = socket_in(&dir);
    let _live = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let mut driver = Driver::spawn(&["--endpoint", &endpoint, "--node-id", "n1"]);
    let status = driver.wait_exit();
    let log = driver.log.join("\n");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("in use by a running server"), "{log}");
    assert!(socket.exists());
}

#[test]
fn non_socket_file_is_not_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, endpoint) = socket_in(&dir);
    std::fs::write(&socket, b"precious").expect("write");
    let mut driver = Driver::spawn(&["--endpoint", &endpoint, "--node-id", "n1"]);
    let status = driver.wait_exit();
    let log = driver.log.join("\n");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("is not a socket"), "{log}");
    assert_eq!(std::fs::read(&socket).expect("read"), b"precious");
}

#[test]
fn missing_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("plugins").join("wincsi.csi.io");
    let endpoint = format!("unix://{}", missing.join("csi.sock").display());
    let mut driver = Driver::spawn(&["--endpoint", &endpoint, "--node-id", "n1"]);
    let status = driver.wait_exit();
    let log = driver.log.join("\n");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!(
            "socket directory {} does not exist",
            missing.display()
        )),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_loopback_endpoint() {
    let mut driver = Driver::spawn(&["--endpoint", "tcp://127.0.0.1:0", "--node-id", "n1"]);
    let ready = driver.wait_for("serving CSI");
    // The ready line carries the port the kernel chose.
    let addr = ready
        .split("endpoint=tcp://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("endpoint in ready line");
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let info = IdentityClient::new(channel)
        .get_plugin_info(v1::GetPluginInfoRequest {})
        .await
        .expect("GetPluginInfo")
        .into_inner();
    assert_eq!(info.name, "wincsi.csi.io");
}

/// A probe that reports when it is entered and then waits for the test to release it.
struct GatedProbe {
    entered: tokio::sync::mpsc::UnboundedSender<()>,
    release: std::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

impl wincsi::host::HostProbe for GatedProbe {
    fn check(&self) -> futures::future::BoxFuture<'_, Result<(), String>> {
        let release = self.release.lock().expect("lock").take();
        let _ = self.entered.send(());
        Box::pin(async move {
            if let Some(release) = release {
                let _ = release.await;
            }
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_rpc_finishes_after_shutdown_signal() {
    use std::sync::Arc;
    use wincsi::config::{Config, Endpoint as CsiEndpoint};
    use wincsi::listener::Listener;
    use wincsi::server::{Services, serve};

    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, endpoint) = socket_in(&dir);
    let config =
        Config::try_parse_args(["wincsi-node", "--endpoint", &endpoint, "--node-id", "n1"])
            .expect("config");
    let listener = Listener::bind(&CsiEndpoint::Unix(socket.clone())).expect("bind");

    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (release, release_rx) = tokio::sync::oneshot::channel();
    let probe = Arc::new(GatedProbe {
        entered: entered_tx,
        release: std::sync::Mutex::new(Some(release_rx)),
    });
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        Services::from_config(&config, probe),
        async move {
            let _ = stop_rx.await;
        },
    ));

    let mut client = IdentityClient::new(channel(&socket).await);
    let call = tokio::spawn(async move { client.probe(v1::ProbeRequest {}).await });
    entered.recv().await.expect("probe entered");
    stop.send(()).expect("signal shutdown");
    release.send(()).expect("release probe");

    let resp = call
        .await
        .expect("join")
        .expect("in-flight Probe completes");
    assert_eq!(resp.into_inner().ready, Some(true));
    server.await.expect("join").expect("serve returns cleanly");
    assert!(!socket.exists(), "socket file removed after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_with_a_reachable_simulated_host() {
    let sandbox = tempfile::tempdir().expect("tempdir");
    let socks = tempfile::tempdir().expect("tempdir");
    let dir = tempfile::tempdir().expect("tempdir");
    let host = sim::SimHost::new(
        &sim::Scenario::default(),
        sandbox.path(),
        sim::HostOptions::default(),
    )
    .expect("sim");
    let serving = sim::serve_unix(host, socks.path()).expect("serve the simulated csi-proxy");

    let (socket, endpoint) = socket_in(&dir);
    let state = dir.path().join("state");
    let mut driver = Driver::spawn(&[
        "--endpoint",
        &endpoint,
        "--node-id",
        "n1",
        "--csi-proxy-socket-dir",
        socks.path().to_str().expect("utf-8"),
        "--kubelet-root",
        dir.path().to_str().expect("utf-8"),
        "--state-dir",
        state.to_str().expect("utf-8"),
    ]);
    driver.wait_for("serving CSI");
    let mut identity = IdentityClient::new(channel(&socket).await);
    for _ in 0..3 {
        let probe = identity
            .probe(v1::ProbeRequest {})
            .await
            .expect("Probe")
            .into_inner();
        assert_eq!(probe.ready, Some(true));
    }
    driver.sigterm();
    assert!(driver.wait_exit().success());
    let log = driver.log.join("\n");
    assert!(!log.contains("host backend unreachable"), "{log}");
    assert!(!log.contains("did not answer in time"), "{log}");
    serving.shutdown().await.expect("sim shutdown");
}

/// A volume id that tries to forge a line in either log format and to recolour a terminal.
const EVIL_ID: &str = "vol\n2026-01-01T00:00:00.000000Z  INFO wincsi: forged\n{\"level\":\"INFO\",\"message\":\"forged\"}\u{1b}[31mred";

/// Issue 15 item 12: user strings (here a volume id, in a state record read by startup reconciliation and in an
/// RPC) never forge log lines, in either format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_id_never_forges_log_lines() {
    for format in ["plain", "json"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (socket, endpoint) = socket_in(&dir);
        let state = dir.path().join("state");
        std::fs::create_dir_all(state.join("volumes")).expect("mkdir");
        // A staged volume whose record names a staging path outside the kubelet root: reconciliation warns about it,
        // naming the volume id.
        let record = serde_json::json!({
            "version": 1, "volume_id": EVIL_ID, "phase": "staged",
            "staging_path": r"C:\outside\globalmount", "ephemeral": false, "protocol": "smb",
            "root": r"\\srv\share", "remote_path": r"\\srv\share", "principal": null
        });
        std::fs::write(
            state
                .join("volumes")
                .join(format!("{}.json", wincsi::state::file_key(EVIL_ID))),
            record.to_string(),
        )
        .expect("write record");
        let proxy_dir = tempfile::tempdir().expect("tempdir");
        let mut driver = Driver::spawn(&[
            "--endpoint",
            &endpoint,
            "--node-id",
            "n1",
            "--log-format",
            format,
            "--log-level",
            "debug",
            "--state-dir",
            state.to_str().expect("utf-8"),
            "--csi-proxy-socket-dir",
            proxy_dir.path().to_str().expect("utf-8"),
        ]);
        driver.wait_for("serving CSI");
        let mut node = NodeClient::new(channel(&socket).await);
        let _ = node
            .node_unstage_volume(bounded(v1::NodeUnstageVolumeRequest {
                volume_id: EVIL_ID.into(),
                staging_target_path: r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\x\globalmount"
                    .into(),
            }))
            .await;
        driver.sigterm();
        driver.wait_exit();
        let log = driver.log.join("\n");
        assert!(
            !log.contains('\u{1b}'),
            "{format}: a raw escape sequence: {log}"
        );
        let mut named = 0;
        for line in log.lines() {
            if format == "json" {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{format}: not a JSON line ({e}): {line}"));
                named += usize::from(v.to_string().contains(r"vol\n2026-01-01"));
            } else {
                assert!(
                    line.starts_with(|c: char| c.is_ascii_digit()),
                    "{format}: a line that is not a log record: {line:?}\n{log}"
                );
                assert!(
                    !line.contains("forged\"}") || line.contains(r"\n"),
                    "{line}"
                );
                named += usize::from(line.contains(r"vol\n2026-01-01"));
            }
        }
        assert!(
            log.contains("invalid staging path"),
            "{format}: reconciliation warned: {log}"
        );
        assert!(named >= 2, "{format}: the id is logged, escaped: {log}");
    }
}

// ---- issue 15 item 13: gRPC clients other than Go's ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_c_core_clients_are_served_despite_their_authority() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, endpoint) = socket_in(&dir);
    let proxy_dir = tempfile::tempdir().expect("tempdir");
    let mut driver = Driver::spawn(&[
        "--endpoint",
        &endpoint,
        "--node-id",
        "n1",
        "--driver-name",
        "authority.example.com",
        "--csi-proxy-socket-dir",
        proxy_dir.path().to_str().expect("utf-8"),
    ]);
    driver.wait_for("serving CSI");
    let conn = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    let results = raw_h2::c_core_calls(
        conn,
        &[
            "/csi.v1.Identity/GetPluginInfo",
            "/csi.v1.Identity/GetPluginCapabilities",
        ],
    )
    .await;
    for (i, (headers, data, reset)) in results.iter().enumerate() {
        assert_eq!(*reset, None, "request {i}: RST_STREAM (PROTOCOL_ERROR = 1)");
        assert!(
            headers.contains(&(":status".into(), "200".into())),
            "{i}: {headers:?}"
        );
        assert!(
            headers.contains(&("grpc-status".into(), "0".into())),
            "{i}: {headers:?}"
        );
        if i == 0 {
            let name = b"authority.example.com";
            assert!(
                data.windows(name.len()).any(|w| w == name),
                "GetPluginInfo answered: {data:?}"
            );
        }
    }
    // The Go client (tonic here sends a valid authority) is served on the same endpoint as before.
    let mut identity = IdentityClient::new(channel(&socket).await);
    identity.probe(v1::ProbeRequest {}).await.expect("Probe");
}
