//! SMB through the real `wincsi-node` binary: CSI Node RPCs on its Unix socket, the in-process simulated host served
//! as csi-proxy (`--csi-proxy-socket-dir`) or, with `WINCSI_TEST_HOST_BACKEND=native`, as its Windows view over a
//! socket (`--host-backend native --test-windows-socket`, the test build's transport), logs at TRACE. Checks the wiring (capabilities, codes, deadlines), that
//! the durable state survives a SIGKILL of the driver, and that no secret reaches the driver's logs.
//!
//! Readiness is the binary's `serving CSI` line (printed after the socket is bound), so nothing sleeps.
#![cfg(unix)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use csi::v1::node_client::NodeClient;
use csi::v1::node_service_capability::rpc::Type as RpcType;
use csi::v1::{self as v1, volume_capability};
use hyper_util::rt::TokioIo;
use sim::wmi::remote::Address;
use sim::wmi::{TestBackend, WindowsView};
use sim::{HostOptions, Scenario, SimHost};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

const BIN: &str = env!("CARGO_BIN_EXE_wincsi-node");
const BOUND: Duration = Duration::from_secs(60);
const PASSWORD: &str = "N0de-Sm8-S3cret!";

struct Driver {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Driver {
    fn spawn(sock: &Path, host_args: &[String], state: &Path) -> Self {
        let mut cmd = Command::new(BIN);
        for var in [
            "CSI_ENDPOINT",
            "KUBE_NODE_NAME",
            "DRIVER_NAME",
            "LOG_LEVEL",
            "CSI_PROXY_SOCKET_DIR",
            "STATE_DIR",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .args([
                "--endpoint",
                &format!("unix://{}", sock.display()),
                "--node-id",
                "win-1",
            ])
            .args(host_args)
            .args([
                "--state-dir",
                &state.display().to_string(),
                "--log-level",
                "trace",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wincsi-node");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx2.send(line);
            }
        });
        Self {
            child,
            lines,
            log: Vec::new(),
        }
    }

    fn wait_for(&mut self, needle: &str) {
        loop {
            match self.lines.recv_timeout(BOUND) {
                Ok(line) => {
                    let hit = line.contains(needle);
                    self.log.push(line);
                    if hit {
                        return;
                    }
                }
                Err(e) => panic!(
                    "no line with {needle:?} ({e}); log:\n{}",
                    self.log.join("\n")
                ),
            }
        }
    }

    /// Kill -9 and collect every line the process wrote.
    fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        while let Ok(line) = self.lines.recv_timeout(BOUND) {
            self.log.push(line);
        }
        self.log.join("\n")
    }
}

async fn node_client(sock: &Path) -> NodeClient<Channel> {
    let path = sock.to_path_buf();
    let channel = Endpoint::try_from("http://[::]:50051")
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
        .expect("connect");
    NodeClient::new(channel)
}

fn bounded<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(Duration::from_secs(60));
    req
}

fn mount_cap() -> Option<v1::VolumeCapability> {
    Some(v1::VolumeCapability {
        access_mode: Some(volume_capability::AccessMode {
            mode: volume_capability::access_mode::Mode::MultiNodeMultiWriter as i32,
        }),
        access_type: Some(volume_capability::AccessType::Mount(
            volume_capability::MountVolume::default(),
        )),
    })
}

const STAGING: &str = r"\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\abc\globalmount";
const TARGET: &str = r"c:\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pv-1\mount";

// Multi-threaded: the simulated host is served from this process while the test blocks on the driver's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smb_volume_through_the_binary_survives_a_driver_kill() {
    let sandbox = tempfile::tempdir().expect("tmp");
    let socks = tempfile::tempdir().expect("tmp");
    let state = tempfile::tempdir().expect("tmp");
    let dir = tempfile::tempdir().expect("tmp");
    let scenario = Scenario::from_json(
        &serde_json::json!({"smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": PASSWORD, "domain": "CORP"}],
            "shares": [{"name": "data"}]}]}})
        .to_string(),
    )
    .expect("scenario");
    let host = SimHost::new(&scenario, sandbox.path(), HostOptions::default()).expect("sim");
    let serve = sim::serve_unix(host.clone(), socks.path()).expect("serve");
    // kubelet creates the parents of the staging and target paths.
    let proxy = proxy_client::ProxyClient::new(proxy_client::Transport::UnixSockets {
        dir: socks.path().into(),
    });
    for p in [STAGING, TARGET] {
        let parent = format!(
            r"C:{}",
            p.trim_start_matches(['c', ':'])
                .rsplit_once('\\')
                .expect("parent")
                .0
        );
        proxy
            .filesystem()
            .mkdir(&parent)
            .await
            .expect("mkdir parent");
    }

    // The backend under test: csi-proxy's sockets, or the Windows view served over a socket of its own.
    let windows = match TestBackend::from_env_or_panic() {
        TestBackend::CsiProxy => None,
        TestBackend::Native => {
            let addr = Address::Unix(dir.path().join("windows.sock"));
            let server =
                sim::wmi::remote::serve(WindowsView::new(host.clone()), &addr).expect("serve");
            Some((server, addr))
        }
    };
    let host_args: Vec<String> = match &windows {
        None => vec![
            "--csi-proxy-socket-dir".into(),
            socks.path().display().to_string(),
        ],
        Some((_, addr)) => vec![
            "--host-backend".into(),
            "native".into(),
            "--test-windows-socket".into(),
            addr.to_string(),
        ],
    };
    // The host calls made from here on are the driver's (kubelet's mkdirs above went through csi-proxy).
    let since = host.audit(0).last().map_or(0, |e| e.seq);
    let sock = dir.path().join("csi.sock");
    let mut driver = Driver::spawn(&sock, &host_args, state.path());
    driver.wait_for("serving CSI");
    let mut node = node_client(&sock).await;

    let caps = node
        .node_get_capabilities(bounded(v1::NodeGetCapabilitiesRequest {}))
        .await
        .expect("caps");
    let types: Vec<i32> = caps
        .into_inner()
        .capabilities
        .iter()
        .filter_map(|c| {
            c.r#type
                .map(|v1::node_service_capability::Type::Rpc(r)| r.r#type)
        })
        .collect();
    for t in [
        RpcType::StageUnstageVolume,
        RpcType::GetVolumeStats,
        RpcType::VolumeCondition,
    ] {
        assert!(types.contains(&(t as i32)), "{t:?} advertised");
    }
    assert!(!types.contains(&(RpcType::VolumeMountGroup as i32)));

    let stage = v1::NodeStageVolumeRequest {
        volume_id: "fs1/data#pv-1".into(),
        staging_target_path: STAGING.into(),
        volume_capability: mount_cap(),
        secrets: HashMap::from([
            ("username".to_owned(), "bob".to_owned()),
            ("password".to_owned(), PASSWORD.to_owned()),
            ("domain".to_owned(), "CORP".to_owned()),
        ]),
        volume_context: HashMap::from([
            ("source".to_owned(), "//fs1/data".to_owned()),
            ("subDir".to_owned(), "${pv.metadata.name}".to_owned()),
            ("csi.storage.k8s.io/pv/name".to_owned(), "pv-1".to_owned()),
        ]),
        ..Default::default()
    };
    node.node_stage_volume(bounded(stage.clone()))
        .await
        .expect("stage");
    node.node_stage_volume(bounded(stage.clone()))
        .await
        .expect("repeat stage");

    // Block access → INVALID_ARGUMENT (for a volume not staged yet: a staged one answers ALREADY_EXISTS, the
    // capability being incompatible with its stage); stats of an unknown volume → NOT_FOUND.
    let mut block = stage.clone();
    block.volume_id = "vol-block".into();
    block.volume_capability = Some(v1::VolumeCapability {
        access_type: Some(volume_capability::AccessType::Block(
            volume_capability::BlockVolume {},
        )),
        ..mount_cap().expect("cap")
    });
    let err = node
        .node_stage_volume(bounded(block))
        .await
        .expect_err("block");
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = node
        .node_get_volume_stats(bounded(v1::NodeGetVolumeStatsRequest {
            volume_id: "nope".into(),
            volume_path: TARGET.into(),
            ..Default::default()
        }))
        .await
        .expect_err("unknown volume");
    assert_eq!(err.code(), Code::NotFound);

    // The driver is killed after the stage; a new one takes over from the durable records.
    let first_log = driver.kill();
    let mut driver = Driver::spawn(&sock, &host_args, state.path());
    driver.wait_for("serving CSI");
    let mut node = node_client(&sock).await;

    let publish = v1::NodePublishVolumeRequest {
        volume_id: stage.volume_id.clone(),
        staging_target_path: STAGING.into(),
        target_path: TARGET.into(),
        volume_capability: mount_cap(),
        ..Default::default()
    };
    node.node_publish_volume(bounded(publish.clone()))
        .await
        .expect("publish");
    let real = host
        .with_state(|s| s.sandbox_path(TARGET))
        .expect("sandbox path");
    std::fs::write(real.join("x.txt"), "through the binary").expect("write");
    let content = host
        .with_state(|s| s.read_share_file("fs1", "data", "pv-1/x.txt"))
        .expect("on share");
    assert_eq!(content, b"through the binary");
    let stats = node
        .node_get_volume_stats(bounded(v1::NodeGetVolumeStatsRequest {
            volume_id: stage.volume_id.clone(),
            volume_path: TARGET.into(),
            ..Default::default()
        }))
        .await
        .expect("stats")
        .into_inner();
    assert_eq!(stats.volume_condition.map(|c| c.abnormal), Some(false));

    node.node_unpublish_volume(bounded(v1::NodeUnpublishVolumeRequest {
        volume_id: stage.volume_id.clone(),
        target_path: TARGET.into(),
    }))
    .await
    .expect("unpublish");
    node.node_unstage_volume(bounded(v1::NodeUnstageVolumeRequest {
        volume_id: stage.volume_id.clone(),
        staging_target_path: STAGING.into(),
    }))
    .await
    .expect("unstage");
    node.node_unstage_volume(bounded(v1::NodeUnstageVolumeRequest {
        volume_id: stage.volume_id.clone(),
        staging_target_path: STAGING.into(),
    }))
    .await
    .expect("repeat unstage");

    let report = host.invariants();
    assert!(report.ok(), "{report:?}");
    let second_log = driver.kill();
    let all = format!("{first_log}\n{second_log}");
    assert!(all.contains("host call"), "TRACE logs captured:\n{all}");
    assert!(
        !all.contains(PASSWORD),
        "a secret appears in the driver's logs"
    );
    if let Some((server, _)) = windows {
        // Only Windows was talked to: the mapping through WMI, no csi-proxy RPC.
        let audit = host.audit(since);
        assert!(
            audit
                .iter()
                .any(|e| e.rpc == "MSFT_SmbGlobalMapping.Create")
        );
        assert!(!audit.iter().any(|e| sim::RPCS.contains(&e.rpc.as_str())));
        server.stop();
    }
    serve.shutdown().await.expect("shutdown");
}
