//! Under Wine (CI) or on Windows: the Windows `wincsi-sim.exe` serves all six groups over real named pipes with
//! a unique prefix; one RPC per group goes through each pipe, and the admin interface answers over loopback TCP.

#![cfg(windows)]

mod common;

use common::{SimProcess, pipe_channel};
use proxy_client::ApiGroup;
use proxy_client::proto::disk_v1::disk_client::DiskClient;
use proxy_client::proto::filesystem_v1::filesystem_client::FilesystemClient;
use proxy_client::proto::iscsi_v1alpha2::iscsi_client::IscsiClient;
use proxy_client::proto::smb_v1::smb_client::SmbClient;
use proxy_client::proto::system_v1alpha1::system_client::SystemClient;
use proxy_client::proto::volume_v1::volume_client::VolumeClient;
use proxy_client::proto::{
    disk_v1, filesystem_v1, iscsi_v1alpha2, smb_v1, system_v1alpha1, volume_v1,
};
use tonic::Code;

const SCENARIO: &str = r#"{
  "host": {
    "bios_serial": "WINE-SERIAL-1",
    "services": [ { "name": "defragsvc", "display_name": "Optimize drives" } ]
  },
  "iscsi": { "portals": [ { "address": "192.0.2.10", "targets": [] } ] }
}"#;

#[tokio::test]
async fn one_rpc_per_group_over_named_pipes() {
    let prefix = format!(r"\\.\pipe\wincsi-sim-wine-{}-", std::process::id());
    let p = SimProcess::start(|dir| {
        let scenario = dir.join("scenario.json");
        std::fs::write(&scenario, SCENARIO).unwrap();
        vec![
            "--scenario".into(),
            scenario.display().to_string(),
            "--pipes".into(),
            "--pipe-prefix".into(),
            prefix.clone(),
            "--csi-proxy-version".into(),
            "v1.1.3".into(),
        ]
    })
    .await;
    let endpoints: Vec<String> = p.ready["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = ApiGroup::ALL
        .iter()
        .map(|g| proxy_client::pipe_name(&prefix, *g))
        .collect();
    assert_eq!(endpoints, want);
    let ch = |g| pipe_channel(proxy_client::pipe_name(&prefix, g));

    let mut disk = DiskClient::new(ch(ApiGroup::Disk).await);
    let locs = disk
        .list_disk_locations(disk_v1::ListDiskLocationsRequest {})
        .await
        .unwrap();
    assert!(locs.into_inner().disk_locations.is_empty());

    let mut volume = VolumeClient::new(ch(ApiGroup::Volume).await);
    let e = volume
        .list_volumes_on_disk(volume_v1::ListVolumesOnDiskRequest {
            disk_number: 7,
            partition_number: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unknown);
    assert!(
        e.message().starts_with(
            "error list volumes on disk. cmd: (Get-Disk -Number 7 | Get-Partition | Get-Volume).UniqueId, output: Get-Disk : No MSFT_Disk objects found"
        ),
        "{}",
        e.message()
    );

    let mut fs = FilesystemClient::new(ch(ApiGroup::Filesystem).await);
    let dir = r"C:\var\lib\kubelet\plugins\wine".to_string();
    fs.mkdir(filesystem_v1::MkdirRequest { path: dir.clone() })
        .await
        .unwrap();
    let exists = fs
        .path_exists(filesystem_v1::PathExistsRequest { path: dir.clone() })
        .await
        .unwrap();
    assert!(exists.into_inner().exists);

    let mut smb = SmbClient::new(ch(ApiGroup::Smb).await);
    let e = smb
        .remove_smb_global_mapping(smb_v1::RemoveSmbGlobalMappingRequest {
            remote_path: r"\\srv\share".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unknown);
    assert!(e.message().starts_with("UnmountSmbShare failed."));

    let mut iscsi = IscsiClient::new(ch(ApiGroup::Iscsi).await);
    let tp = iscsi_v1alpha2::TargetPortal {
        target_address: "192.0.2.10".into(),
        target_port: 0,
    };
    iscsi
        .add_target_portal(iscsi_v1alpha2::AddTargetPortalRequest {
            target_portal: Some(tp),
        })
        .await
        .unwrap();
    let portals = iscsi
        .list_target_portals(iscsi_v1alpha2::ListTargetPortalsRequest {})
        .await
        .unwrap();
    let portals = portals.into_inner().target_portals;
    assert_eq!(portals.len(), 1);
    assert_eq!(portals[0].target_port, 3260);

    let mut system = SystemClient::new(ch(ApiGroup::System).await);
    let serial = system
        .get_bios_serial_number(system_v1alpha1::GetBiosSerialNumberRequest {})
        .await
        .unwrap();
    assert_eq!(serial.into_inner().serial_number, "WINE-SERIAL-1");

    let admin = p.admin().await;
    assert!(p.admin_addr.to_string().starts_with("tcp:127.0.0.1:"));
    let counts = admin.call_counts().await.unwrap();
    assert_eq!(counts.values().sum::<u64>(), 8);
    assert!(admin.invariants().await.unwrap().ok());

    // csi-proxy dies: every pipe disappears until it is restarted, then each is created again. The crash call returns
    // only when the names are gone: the simulator waits out the listening instance whose cancelled connect mio closes
    // a runtime turn later (without that wait this check failed 11 runs in 25 under Wine).
    drop((disk, volume, fs, smb, iscsi, system));
    admin.crash_csi_proxy("wine test").await.unwrap();
    for name in &want {
        let open = tokio::net::windows::named_pipe::ClientOptions::new().open(name);
        assert!(open.is_err(), "{name} is gone");
    }
    admin.restart_csi_proxy().await.unwrap();
    let mut system = SystemClient::new(ch(ApiGroup::System).await);
    let serial = system
        .get_bios_serial_number(system_v1alpha1::GetBiosSerialNumberRequest {})
        .await
        .unwrap();
    assert_eq!(serial.into_inner().serial_number, "WINE-SERIAL-1");
    assert_eq!(admin.csi_proxy_status().await.unwrap().process.crashes, 1);
}
