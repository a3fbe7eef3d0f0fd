//! The real `wincsi-node` binary on the native backend, as any external CSI suite sees it: the test build's
//! `--host-backend native --test-windows-socket` drives the simulated host's Windows view, served by this process
//! over a Unix socket (`sim::wmi::remote`), so the binary's native start-up, reconciliation, readiness and WMI call
//! sequences run off Windows. csi-sanity-style checks through the CSI socket (identity, capabilities, required
//! fields, idempotent repeats, NotFound for unknown volumes), an SMB and an iSCSI volume end to end with the durable
//! state across a SIGKILL, and `/readyz` while a capability's start-up check failed.
//!
//! Readiness is the binary's `serving CSI` line (printed after the socket is bound), so nothing sleeps.
#![cfg(unix)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use csi::v1::identity_client::IdentityClient;
use csi::v1::node_client::NodeClient;
use csi::v1::{self as v1, volume_capability};
use hyper_util::rt::TokioIo;
use sim::wmi::WindowsView;
use sim::wmi::remote::{Address, Server};
use sim::{HostOptions, Scenario, SimHost};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

const BIN: &str = env!("CARGO_BIN_EXE_wincsi-node");
const BOUND: Duration = Duration::from_secs(60);
const PASSWORD: &str = "N4tive-Sm8-S3cret!";
const CHAP: &str = "N4tive-Chap-12";
const IQN: &str = "iqn.2026-01.io.wincsi:native-node";
const GIB: u64 = 1 << 30;

struct Driver {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Driver {
    fn spawn(sock: &Path, windows: &Address, state: &Path, extra: &[&str]) -> Self {
        let mut cmd = Command::new(BIN);
        for var in [
            "CSI_ENDPOINT",
            "KUBE_NODE_NAME",
            "DRIVER_NAME",
            "LOG_LEVEL",
            "CSI_PROXY_SOCKET_DIR",
            "STATE_DIR",
            "SMB_REQUIRE_PRIVACY",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .args([
                "--endpoint",
                &format!("unix://{}", sock.display()),
                "--node-id",
                "win-native-1",
                "--host-backend",
                "native",
                "--test-windows-socket",
                &windows.to_string(),
                "--state-dir",
                &state.display().to_string(),
                "--log-level",
                "trace",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wincsi-node");
        let (tx, lines) = mpsc::channel();
        let err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
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

    fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        while let Ok(line) = self.lines.recv_timeout(BOUND) {
            self.log.push(line);
        }
        self.log.join("\n")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn channel(sock: &Path) -> Channel {
    let path = sock.to_path_buf();
    Endpoint::try_from("http://[::]:50051")
        .expect("endpoint")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
            }
        }))
        .await
        .expect("connect")
}

fn bounded<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(BOUND);
    req
}

fn mount(mode: volume_capability::access_mode::Mode) -> Option<v1::VolumeCapability> {
    Some(v1::VolumeCapability {
        access_mode: Some(volume_capability::AccessMode { mode: mode as i32 }),
        access_type: Some(volume_capability::AccessType::Mount(
            volume_capability::MountVolume::default(),
        )),
    })
}

fn scenario() -> Scenario {
    Scenario::from_json(
        &serde_json::json!({
            "host": {"directories": [r"C:\var\lib\kubelet\plugins", r"C:\var\lib\kubelet\pods"]},
            "smb": {"servers": [{"name": "fs1",
                "accounts": [{"user": "bob", "password": PASSWORD, "domain": "CORP"}],
                "shares": [{"name": "data"}]}]},
            "iscsi": {"portals": [{"address": "10.0.0.5", "targets": [
                {"iqn": IQN, "chap": {"mode": "one_way", "username": "node", "secret": CHAP},
                 "luns": [{"lun": 0, "id": "lun0", "size": 4 * GIB, "partition_style": "raw"}]}]}]}
        })
        .to_string(),
    )
    .expect("scenario")
}

/// The simulated host, its Windows view served at `<dir>/windows.sock`, and kubelet's parent directories.
struct Host {
    sim: SimHost,
    server: Option<Server>,
    addr: Address,
    _sandbox: tempfile::TempDir,
}

impl Host {
    fn new(dir: &Path, view: impl FnOnce(WindowsView) -> WindowsView) -> Self {
        let sandbox = tempfile::tempdir().expect("tmp");
        let sim = SimHost::new(&scenario(), sandbox.path(), HostOptions::default()).expect("sim");
        let addr = Address::Unix(dir.join("windows.sock"));
        let server = sim::wmi::remote::serve(view(WindowsView::new(sim.clone())), &addr)
            .expect("serve the Windows view");
        Self {
            sim,
            server: Some(server),
            addr,
            _sandbox: sandbox,
        }
    }

    /// What kubelet does before NodeStage/NodePublish: the parent directory.
    fn kubelet_parent(&self, path: &str) {
        let (parent, _) = path.rsplit_once('\\').expect("parent");
        self.sim.with_state_mut(|s| s.mkdir(parent)).expect("mkdir");
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}

const STAGING: &str = r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\n1\globalmount";
const TARGET: &str = r"C:\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pv-1\mount";
const LUN_STAGING: &str =
    r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\n2\globalmount";
const LUN_TARGET: &str = r"C:\var\lib\kubelet\pods\uid-2\volumes\kubernetes.io~csi\pv-2\mount";

/// csi-sanity's Identity and Node checks that need no storage, then an SMB volume and an iSCSI LUN through every
/// Node RPC, repeated where CSI requires idempotency, across a SIGKILL of the driver; the host ends clean and no
/// secret reaches the driver's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_sanity_style_checks_and_both_protocols_through_the_binary_on_native() {
    use volume_capability::access_mode::Mode;
    let dir = tempfile::tempdir().expect("tmp");
    let state = dir.path().join("state");
    let host = Host::new(dir.path(), |v| v);
    let sock = dir.path().join("csi.sock");
    let mut driver = Driver::spawn(&sock, &host.addr, &state, &[]);
    driver.wait_for("serving CSI");
    let ch = channel(&sock).await;
    let mut identity = IdentityClient::new(ch.clone());
    let mut node = NodeClient::new(ch);

    // Identity: name, capabilities, Probe ready (the Windows view answers).
    let info = identity
        .get_plugin_info(bounded(v1::GetPluginInfoRequest {}))
        .await
        .expect("info")
        .into_inner();
    assert_eq!(info.name, "wincsi.csi.io");
    assert!(!info.vendor_version.is_empty());
    identity
        .get_plugin_capabilities(bounded(v1::GetPluginCapabilitiesRequest {}))
        .await
        .expect("plugin capabilities");
    let probe = identity
        .probe(bounded(v1::ProbeRequest {}))
        .await
        .expect("probe")
        .into_inner();
    assert_eq!(probe.ready, Some(true));
    let node_info = node
        .node_get_info(bounded(v1::NodeGetInfoRequest {}))
        .await
        .expect("node info")
        .into_inner();
    assert_eq!(node_info.node_id, "win-native-1");
    node.node_get_capabilities(bounded(v1::NodeGetCapabilitiesRequest {}))
        .await
        .expect("node capabilities");

    // Required fields.
    let missing = |r: Result<tonic::Response<v1::NodeStageVolumeResponse>, tonic::Status>| {
        r.expect_err("missing field").code()
    };
    let smb_stage = v1::NodeStageVolumeRequest {
        volume_id: "fs1/data#pv-1".into(),
        staging_target_path: STAGING.into(),
        volume_capability: mount(Mode::MultiNodeMultiWriter),
        secrets: HashMap::from([
            ("username".to_owned(), "bob".to_owned()),
            ("password".to_owned(), PASSWORD.to_owned()),
            ("domain".to_owned(), "CORP".to_owned()),
        ]),
        volume_context: HashMap::from([("source".to_owned(), r"\\fs1\data".to_owned())]),
        ..Default::default()
    };
    for strip in 0..3 {
        let mut r = smb_stage.clone();
        match strip {
            0 => r.volume_id.clear(),
            1 => r.staging_target_path.clear(),
            _ => r.volume_capability = None,
        }
        assert_eq!(
            missing(node.node_stage_volume(bounded(r)).await),
            Code::InvalidArgument
        );
    }
    let err = node
        .node_get_volume_stats(bounded(v1::NodeGetVolumeStatsRequest {
            volume_id: "no-such-volume".into(),
            volume_path: TARGET.into(),
            ..Default::default()
        }))
        .await
        .expect_err("unknown volume");
    assert_eq!(err.code(), Code::NotFound);

    // SMB: stage (twice), publish (twice), stats.
    host.kubelet_parent(STAGING);
    host.kubelet_parent(TARGET);
    for _ in 0..2 {
        node.node_stage_volume(bounded(smb_stage.clone()))
            .await
            .expect("stage");
    }
    let smb_publish = v1::NodePublishVolumeRequest {
        volume_id: smb_stage.volume_id.clone(),
        staging_target_path: STAGING.into(),
        target_path: TARGET.into(),
        volume_capability: mount(Mode::MultiNodeMultiWriter),
        ..Default::default()
    };
    for _ in 0..2 {
        node.node_publish_volume(bounded(smb_publish.clone()))
            .await
            .expect("publish");
    }
    // iSCSI: a RAW LUN is partitioned, formatted and mounted.
    host.kubelet_parent(LUN_STAGING);
    host.kubelet_parent(LUN_TARGET);
    let lun_stage = v1::NodeStageVolumeRequest {
        volume_id: "lun-0".into(),
        staging_target_path: LUN_STAGING.into(),
        volume_capability: mount(Mode::SingleNodeWriter),
        secrets: HashMap::from([
            ("node.session.auth.username".to_owned(), "node".to_owned()),
            ("node.session.auth.password".to_owned(), CHAP.to_owned()),
        ]),
        volume_context: HashMap::from([
            ("targetPortal".to_owned(), "10.0.0.5:3260".to_owned()),
            ("iqn".to_owned(), IQN.to_owned()),
            ("lun".to_owned(), "0".to_owned()),
            ("sessionCHAPAuth".to_owned(), "true".to_owned()),
        ]),
        ..Default::default()
    };
    node.node_stage_volume(bounded(lun_stage.clone()))
        .await
        .expect("stage the LUN");

    // The driver dies; a new one takes over from the durable records over the same socket.
    let first = driver.kill();
    let mut driver = Driver::spawn(&sock, &host.addr, &state, &[]);
    driver.wait_for("serving CSI");
    let mut node = NodeClient::new(channel(&sock).await);
    node.node_stage_volume(bounded(lun_stage.clone()))
        .await
        .expect("repeat stage after the restart");
    let lun_publish = v1::NodePublishVolumeRequest {
        volume_id: "lun-0".into(),
        staging_target_path: LUN_STAGING.into(),
        target_path: LUN_TARGET.into(),
        volume_capability: mount(Mode::SingleNodeWriter),
        ..Default::default()
    };
    node.node_publish_volume(bounded(lun_publish))
        .await
        .expect("publish the LUN");
    for (id, path) in [
        (smb_stage.volume_id.as_str(), TARGET),
        ("lun-0", LUN_TARGET),
    ] {
        let stats = node
            .node_get_volume_stats(bounded(v1::NodeGetVolumeStatsRequest {
                volume_id: id.into(),
                volume_path: path.into(),
                ..Default::default()
            }))
            .await
            .expect("stats")
            .into_inner();
        assert_eq!(
            stats.volume_condition.map(|c| c.abnormal),
            Some(false),
            "{id}"
        );
    }
    // Teardown, each step twice.
    for (id, staging, target) in [
        (smb_stage.volume_id.as_str(), STAGING, TARGET),
        ("lun-0", LUN_STAGING, LUN_TARGET),
    ] {
        for _ in 0..2 {
            node.node_unpublish_volume(bounded(v1::NodeUnpublishVolumeRequest {
                volume_id: id.into(),
                target_path: target.into(),
            }))
            .await
            .expect("unpublish");
        }
        for _ in 0..2 {
            node.node_unstage_volume(bounded(v1::NodeUnstageVolumeRequest {
                volume_id: id.into(),
                staging_target_path: staging.into(),
            }))
            .await
            .expect("unstage");
        }
    }
    let report = host.sim.invariants();
    assert!(report.ok(), "{report:?}");
    // Only Windows was talked to: WMI and Win32 calls, no csi-proxy RPC.
    let audit = host.sim.audit(0);
    assert!(
        audit
            .iter()
            .any(|e| e.rpc == "MSFT_SmbGlobalMapping.Create")
    );
    assert!(audit.iter().any(|e| e.rpc == "MSFT_Volume.Format"));
    assert!(!audit.iter().any(|e| sim::RPCS.contains(&e.rpc.as_str())));
    let all = format!("{first}\n{}", driver.kill());
    assert!(all.contains("TEST BUILD"), "the test build says so");
    for secret in [PASSWORD, CHAP] {
        assert!(
            !all.contains(secret),
            "a secret appears in the driver's log"
        );
    }
}

/// `GET /readyz` on the driver's health listener: (status, body).
fn readyz(port: u16) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect /readyz");
    s.set_read_timeout(Some(BOUND)).expect("timeout");
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

/// At start the SMB provider's check failed (WMI shutting down at boot): the binary starts, `/readyz` answers 503
/// naming SMB while it checks again, and once a check finds it, 200 — SMB volumes then stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_names_a_capability_whose_check_failed_until_it_is_found() {
    use winhost::codes::HResult;
    use winhost::probe::{Namespace, ProbeReport};
    let dir = tempfile::tempdir().expect("tmp");
    let state = dir.path().join("state");
    let at_boot = ProbeReport::from_lookup(
        |ns| (ns == Namespace::Smb).then_some(HResult(0x8004_1033)),
        |_, _| Ok(Vec::new()),
    );
    let host = Host::new(dir.path(), |v| v.with_probe(at_boot));
    // The first check again hangs until the test has seen /readyz fail.
    host.sim
        .hang_nth("ConnectServer ROOT\\Microsoft\\Windows\\SMB", 1)
        .expect("hang");
    let sock = dir.path().join("csi.sock");
    let mut driver = Driver::spawn(
        &sock,
        &host.addr,
        &state,
        &["--health-address", "127.0.0.1:0"],
    );
    let http = driver.wait_for("serving HTTP");
    let port: u16 = http
        .rsplit("127.0.0.1:")
        .next()
        .and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {http:?}"));
    driver.wait_for("serving CSI");
    host.sim.wait_hung(1).await;
    let (status, body) = readyz(port);
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("SMB global mappings") && body.contains("WBEM_E_SHUTTING_DOWN"),
        "{body}"
    );
    host.sim.release_hangs();
    driver.wait_for("the Windows WMI providers' check succeeded");
    // The readiness verdict is cached for a second: the first fresh one is green.
    let since = std::time::Instant::now();
    loop {
        let (status, body) = readyz(port);
        if status == 200 {
            break;
        }
        assert!(since.elapsed() < BOUND, "{status} {body}");
        std::thread::yield_now();
    }
    let log = driver.kill();
    assert!(!log.contains(PASSWORD));
}
