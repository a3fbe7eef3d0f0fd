//! Issue 15 item 13 on the Windows listener twin, under Wine: a gRPC C-core client's `:authority` (the percent-encoded
//! socket path) is repaired by the listener, so the request is served instead of reset. Wine has no AF_UNIX, so the
//! Windows adapter runs on AF_INET loopback (the same accept path and the same connection wrapper as AF_UNIX).
#![cfg(windows)]

use std::sync::Arc;

use wincsi::config::{Config, Endpoint};
use wincsi::host::NoHostProbe;
use wincsi::listener::Listener;
use wincsi::server::{Services, serve};

mod raw_h2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_core_clients_are_served_through_the_windows_adapter() {
    let listener =
        Listener::bind(&Endpoint::Tcp("127.0.0.1:0".parse().expect("addr"))).expect("bind");
    let Endpoint::Tcp(addr) = listener.local_endpoint().clone() else {
        panic!("tcp endpoint expected");
    };
    let config = Config::try_parse_args([
        "wincsi-node",
        "--endpoint",
        "tcp://127.0.0.1:0",
        "--node-id",
        "win-node-1",
        "--driver-name",
        "authority.example.com",
    ])
    .expect("config");
    let services = Services::from_config(&config, Arc::new(NoHostProbe));
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, services, async move {
        let _ = stop_rx.await;
    }));
    let conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let results = raw_h2::c_core_calls(
        conn,
        &["/csi.v1.Identity/GetPluginInfo", "/csi.v1.Identity/Probe"],
    )
    .await;
    for (i, (headers, data, reset)) in results.iter().enumerate() {
        assert_eq!(*reset, None, "request {i}: RST_STREAM");
        assert!(
            headers.contains(&("grpc-status".into(), "0".into())),
            "{i}: {headers:?}"
        );
        if i == 0 {
            let name = b"authority.example.com";
            assert!(data.windows(name.len()).any(|w| w == name), "{data:?}");
        }
    }
    stop.send(()).expect("stop");
    server.await.expect("join").expect("serve returns cleanly");
}
