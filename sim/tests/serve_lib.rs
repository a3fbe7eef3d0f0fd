//! The library serving API in-process: `serve_unix` binds every socket before returning, registers each group
//! under its exact service name on its own socket, and shuts down gracefully.

#![cfg(unix)]

mod common;

use common::unix_channel;
use proxy_client::ApiGroup;
use proxy_client::proto::disk_v1::disk_client::DiskClient;
use proxy_client::proto::system_v1alpha1::system_client::SystemClient;
use proxy_client::proto::{disk_v1, system_v1alpha1};
use sim::{HostOptions, Scenario, SimHost};

#[tokio::test]
async fn serve_unix_binds_before_returning_and_shuts_down() {
    let dir = tempfile::tempdir().unwrap();
    let sc = Scenario::from_json(r#"{"host":{"bios_serial":"LIB"}}"#).unwrap();
    let host = SimHost::new(&sc, &dir.path().join("root"), HostOptions::default()).unwrap();
    let sock = dir.path().join("sock");
    let handle = sim::serve_unix(host.clone(), &sock).unwrap();
    for g in ApiGroup::ALL {
        assert!(
            proxy_client::socket_path(&sock, g).exists(),
            "{g} socket bound"
        );
    }
    assert_eq!(handle.endpoints().len(), 6);
    let mut system =
        SystemClient::new(unix_channel(proxy_client::socket_path(&sock, ApiGroup::System)).await);
    let r = system
        .get_bios_serial_number(system_v1alpha1::GetBiosSerialNumberRequest {})
        .await
        .unwrap();
    assert_eq!(r.into_inner().serial_number, "LIB");

    // Each socket serves only its own group: the Disk service is not on the System socket.
    let mut wrong =
        DiskClient::new(unix_channel(proxy_client::socket_path(&sock, ApiGroup::System)).await);
    let e = wrong.rescan(disk_v1::RescanRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented);

    drop(system);
    drop(wrong);
    handle.shutdown().await.unwrap();
    assert_eq!(host.call_counts()["GetBIOSSerialNumber"], 1);
}

#[tokio::test]
async fn serve_refuses_named_pipes_on_unix() {
    let dir = tempfile::tempdir().unwrap();
    let host = SimHost::new(&Scenario::default(), dir.path(), HostOptions::default()).unwrap();
    let e = sim::serve(host, &sim::Endpoints::NamedPipes(r"\\.\pipe\".into())).unwrap_err();
    assert!(e.to_string().contains("not available on this platform"));
}
