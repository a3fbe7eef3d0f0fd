//! The Windows listener adapter (socket2 socket + tokio readiness carrier) under Wine.
//!
//! Wine 8 has no AF_UNIX, so the adapter is exercised over AF_INET loopback (`tcp://`), which
//! goes through exactly the same socket2 create/bind/listen/accept and readiness-carrier code
//! as AF_UNIX on a real Windows host. The AF_UNIX path is checked for whichever outcome is
//! true where the test runs: a working socket (Windows 10 1803+) or a clear error (Wine).
#![cfg(windows)]

use std::sync::Arc;

use csi::v1::identity_client::IdentityClient;
use csi::v1::node_client::NodeClient;
use csi::v1::{GetPluginInfoRequest, NodeGetInfoRequest, ProbeRequest};
use wincsi::config::{Config, Endpoint};
use wincsi::host::NoHostProbe;
use wincsi::listener::Listener;
use wincsi::server::{Services, serve};

fn config(endpoint: &str) -> Config {
    Config::try_parse_args([
        "wincsi-node",
        "--endpoint",
        endpoint,
        "--node-id",
        "win-node-1",
    ])
    .expect("config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_identity_and_node_through_the_adapter_on_loopback() {
    let listener = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".parse().expect("addr")))
        .expect("bind the adapter on AF_INET loopback");
    let Endpoint::Tcp(addr) = listener.local_endpoint().clone() else {
        panic!("tcp endpoint expected");
    };
    assert_ne!(addr.port(), 0, "bound port is reported");

    let services = Services::from_config(&config("tcp://127.0.0.1:0"), Arc::new(NoHostProbe));
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, services, async move {
        let _ = stop_rx.await;
    }));

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect through the adapter");
    let mut identity = IdentityClient::new(channel.clone());
    let info = identity
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .expect("GetPluginInfo")
        .into_inner();
    assert_eq!(info.name, "wincsi.csi.io");
    assert_eq!(info.manifest["target"], "x86_64-pc-windows-gnu");

    // Several calls on one connection and a second connection: reads and writes keep flowing
    // through the readiness carrier, and accept re-arms.
    for _ in 0..20 {
        let probe = identity.probe(ProbeRequest {}).await.expect("Probe");
        assert_eq!(probe.into_inner().ready, Some(true));
    }
    let second = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("second connection");
    let node = NodeClient::new(second)
        .node_get_info(NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner();
    assert_eq!(node.node_id, "win-node-1");

    drop(identity);
    drop(channel);
    stop.send(()).expect("stop");
    server.await.expect("join").expect("serve returns cleanly");
}

#[tokio::test]
async fn af_unix_listener_works_or_fails_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("csi.sock");
    // A stale socket file from a previous run: removed before binding either way.
    std::fs::write(&path, b"").expect("stale file");
    match Listener::bind(&Endpoint::Unix(path.clone())) {
        Ok(listener) => {
            // Real Windows: the socket exists at the kubelet-visible path.
            assert_eq!(listener.local_endpoint(), &Endpoint::Unix(path.clone()));
            assert!(path.exists());
            drop(listener);
            assert!(!path.exists(), "socket file removed on drop");
        }
        Err(e) => {
            // Wine: no AF_UNIX (WSAEAFNOSUPPORT). The error names the family and the path.
            let msg = e.chain();
            assert!(msg.contains("AF_UNIX"), "{msg}");
            assert!(msg.contains("csi.sock"), "{msg}");
            assert!(!path.exists(), "stale file was removed before binding");
        }
    }
}

#[tokio::test]
async fn missing_socket_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("plugins").join("wincsi.csi.io");
    let err = Listener::bind(&Endpoint::Unix(missing.join("csi.sock"))).expect_err("missing dir");
    let msg = err.chain();
    assert!(
        msg.contains(&format!(
            "socket directory {} does not exist",
            missing.display()
        )),
        "{msg}"
    );
}

#[test]
fn windows_endpoint_forms_parse() {
    let c = config(r"unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock");
    assert_eq!(
        c.endpoint,
        Endpoint::Unix(r"C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock".into())
    );
    assert_eq!(
        c.state_dir(),
        std::path::PathBuf::from(r"C:\var\lib\kubelet\plugins\wincsi.csi.io\state")
    );
}
