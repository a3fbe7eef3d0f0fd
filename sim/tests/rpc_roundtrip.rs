//! Every RPC of the six groups, round-tripped through the `wincsi-sim` binary over Unix sockets with the
//! generated tonic client stubs, plus the admin interface (faults, hangs, audit, reboot, invariants).

#![cfg(unix)]

mod common;

use std::path::Path;

use common::{SimProcess, example_scenario, unix_channel};
use proxy_client::ApiGroup;
use proxy_client::proto::disk_v1::disk_client::DiskClient;
use proxy_client::proto::filesystem_v1::filesystem_client::FilesystemClient;
use proxy_client::proto::iscsi_v1alpha2::iscsi_client::IscsiClient;
use proxy_client::proto::smb_v1::smb_client::SmbClient;
use proxy_client::proto::system_v1alpha1::system_client::SystemClient;
use proxy_client::proto::volume_v1::volume_client::VolumeClient;
use proxy_client::proto::{
    disk_v1, filesystem_v1, iscsi_v1alpha2 as iscsi, smb_v1, system_v1alpha1, volume_v1,
};
use tonic::Code;
use tonic::transport::Channel;

const K: &str = r"C:\var\lib\kubelet";
const PORTAL: &str = "192.0.2.10";

struct Clients {
    disk: DiskClient<Channel>,
    volume: VolumeClient<Channel>,
    fs: FilesystemClient<Channel>,
    smb: SmbClient<Channel>,
    iscsi: IscsiClient<Channel>,
    system: SystemClient<Channel>,
}

async fn clients(dir: &Path) -> Clients {
    let ch = |g| unix_channel(proxy_client::socket_path(dir, g));
    Clients {
        disk: DiskClient::new(ch(ApiGroup::Disk).await),
        volume: VolumeClient::new(ch(ApiGroup::Volume).await),
        fs: FilesystemClient::new(ch(ApiGroup::Filesystem).await),
        smb: SmbClient::new(ch(ApiGroup::Smb).await),
        iscsi: IscsiClient::new(ch(ApiGroup::Iscsi).await),
        system: SystemClient::new(ch(ApiGroup::System).await),
    }
}

/// Starts the binary on the example scenario, playing the chart's default csi-proxy release (pinned, so the
/// `WINCSI_SIM_CSI_PROXY_VERSION` environment variable does not change these tests).
async fn start() -> (SimProcess, Clients) {
    start_version("v1.1.3").await
}

async fn start_version(version: &str) -> (SimProcess, Clients) {
    let p = SimProcess::start(|dir| {
        let sock = dir.join("sock").display().to_string();
        vec![
            "--scenario".into(),
            example_scenario(),
            "--socket-dir".into(),
            sock,
            "--csi-proxy-version".into(),
            version.into(),
        ]
    })
    .await;
    let c = clients(&p.dir.path().join("sock")).await;
    (p, c)
}

fn tp() -> Option<iscsi::TargetPortal> {
    Some(iscsi::TargetPortal {
        target_address: PORTAL.into(),
        target_port: 3260,
    })
}

#[tokio::test]
async fn every_rpc_round_trips_through_the_binary() {
    let (p, mut c) = start_version("v1.3.0").await;
    // Disks and volumes arrive after their delays (the example scenario's realistic model): the admin interface
    // moves time on where a step needs them.
    let arrive = p.admin().await;
    assert_eq!(p.ready["endpoints"].as_array().unwrap().len(), 6);

    // ---- system ----
    let serial = c
        .system
        .get_bios_serial_number(system_v1alpha1::GetBiosSerialNumberRequest {})
        .await
        .unwrap();
    assert_eq!(
        serial.into_inner().serial_number,
        "VMware-56 4d 2a 1b 9c 3e 5f 01"
    );
    let svc = c
        .system
        .get_service(system_v1alpha1::GetServiceRequest {
            name: "defragsvc".into(),
        })
        .await
        .unwrap();
    let svc = svc.into_inner();
    assert_eq!(
        (svc.display_name.as_str(), svc.start_type, svc.status),
        ("Optimize drives", 3, 1)
    );
    c.system
        .start_service(system_v1alpha1::StartServiceRequest {
            name: "defragsvc".into(),
        })
        .await
        .unwrap();
    c.system
        .stop_service(system_v1alpha1::StopServiceRequest {
            name: "defragsvc".into(),
            force: false,
        })
        .await
        .unwrap();

    // ---- iSCSI ----
    c.iscsi
        .add_target_portal(iscsi::AddTargetPortalRequest {
            target_portal: tp(),
        })
        .await
        .unwrap();
    let portals = c
        .iscsi
        .list_target_portals(iscsi::ListTargetPortalsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(portals.target_portals.len(), 2);
    let iqns = c
        .iscsi
        .discover_target_portal(iscsi::DiscoverTargetPortalRequest {
            target_portal: tp(),
        })
        .await
        .unwrap();
    assert_eq!(iqns.into_inner().iqns.len(), 4);
    c.iscsi
        .set_mutual_chap_secret(iscsi::SetMutualChapSecretRequest {
            mutual_chap_secret: "target-secret-1".into(),
        })
        .await
        .unwrap();
    let iqn = "iqn.2026-01.io.wincsi:pvc-empty".to_string();
    c.iscsi
        .connect_target(iscsi::ConnectTargetRequest {
            target_portal: tp(),
            iqn: iqn.clone(),
            auth_type: iscsi::AuthenticationType::None as i32,
            chap_username: String::new(),
            chap_secret: String::new(),
        })
        .await
        .unwrap();
    arrive.complete_arrivals().await.unwrap();
    let disks = c
        .iscsi
        .get_target_disks(iscsi::GetTargetDisksRequest {
            target_portal: tp(),
            iqn: iqn.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .disk_i_ds;
    assert_eq!(disks.len(), 1);
    let n: u32 = disks[0].parse().unwrap();

    // ---- disk ----
    c.disk.rescan(disk_v1::RescanRequest {}).await.unwrap();
    let locs = c
        .disk
        .list_disk_locations(disk_v1::ListDiskLocationsRequest {})
        .await
        .unwrap()
        .into_inner();
    let loc = &locs.disk_locations[&n];
    assert_eq!(
        (loc.adapter.as_str(), loc.bus.as_str(), loc.lunid.as_str()),
        ("2", "", "0")
    );
    let ids = c
        .disk
        .list_disk_i_ds(disk_v1::ListDiskIDsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids.disk_i_ds[&0].page83, "6000c29d6c5e4f2a8b7f1c2d3e4f5a6b");
    let size = c
        .disk
        .get_disk_stats(disk_v1::GetDiskStatsRequest { disk_number: n })
        .await
        .unwrap();
    assert_eq!(size.into_inner().total_bytes, 1 << 30);
    c.disk
        .set_disk_state(disk_v1::SetDiskStateRequest {
            disk_number: n,
            is_online: true,
        })
        .await
        .unwrap();
    let st = c
        .disk
        .get_disk_state(disk_v1::GetDiskStateRequest { disk_number: n })
        .await
        .unwrap();
    assert!(st.into_inner().is_online);
    c.disk
        .partition_disk(disk_v1::PartitionDiskRequest { disk_number: n })
        .await
        .unwrap();
    arrive.complete_arrivals().await.unwrap();

    // ---- volume ----
    let vols = c
        .volume
        .list_volumes_on_disk(volume_v1::ListVolumesOnDiskRequest {
            disk_number: n,
            partition_number: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .volume_ids;
    assert_eq!(vols.len(), 1);
    let v = vols[0].clone();
    assert!(v.starts_with(r"\\?\Volume{") && v.ends_with(r"}\"));
    let f = c
        .volume
        .is_volume_formatted(volume_v1::IsVolumeFormattedRequest {
            volume_id: v.clone(),
        })
        .await
        .unwrap();
    assert!(!f.into_inner().formatted);
    c.volume
        .format_volume(volume_v1::FormatVolumeRequest {
            volume_id: v.clone(),
        })
        .await
        .unwrap();
    let num = c
        .volume
        .get_disk_number_from_volume_id(volume_v1::GetDiskNumberFromVolumeIdRequest {
            volume_id: v.clone(),
        })
        .await
        .unwrap();
    assert_eq!(num.into_inner().disk_number, n);

    // ---- filesystem + mount ----
    let staging = format!(r"{K}\plugins\wincsi.csi.io\pv\pvc-empty\globalmount");
    let exists =
        c.fs.path_exists(filesystem_v1::PathExistsRequest {
            path: staging.clone(),
        })
        .await
        .unwrap();
    assert!(!exists.into_inner().exists);
    c.fs.mkdir(filesystem_v1::MkdirRequest {
        path: staging.clone(),
    })
    .await
    .unwrap();
    c.volume
        .mount_volume(volume_v1::MountVolumeRequest {
            volume_id: v.clone(),
            target_path: staging.clone(),
        })
        .await
        .unwrap();
    let got = c
        .volume
        .get_volume_id_from_target_path(volume_v1::GetVolumeIdFromTargetPathRequest {
            target_path: staging.clone(),
        })
        .await
        .unwrap();
    assert_eq!(got.into_inner().volume_id, v);
    c.volume
        .resize_volume(volume_v1::ResizeVolumeRequest {
            volume_id: v.clone(),
            size_bytes: 0,
        })
        .await
        .unwrap();
    let pod_dir = format!(r"{K}\pods\uid-1\volumes\kubernetes.io~csi\pvc-empty");
    let publish = format!(r"{pod_dir}\mount");
    c.fs.mkdir(filesystem_v1::MkdirRequest {
        path: pod_dir.clone(),
    })
    .await
    .unwrap();
    c.fs.create_symlink(filesystem_v1::CreateSymlinkRequest {
        source_path: staging.clone(),
        target_path: publish.clone(),
    })
    .await
    .unwrap();
    let is =
        c.fs.is_symlink(filesystem_v1::IsSymlinkRequest {
            path: publish.clone(),
        })
        .await
        .unwrap();
    assert!(is.into_inner().is_symlink);
    let admin = p.admin().await;
    admin
        .write_file(&format!(r"{publish}\hello.txt"), "from the pod")
        .await
        .unwrap();
    let stats = c
        .volume
        .get_volume_stats(volume_v1::GetVolumeStatsRequest {
            volume_id: v.clone(),
        })
        .await
        .unwrap();
    assert_eq!(stats.into_inner().used_bytes, 12);
    c.volume
        .write_volume_cache(volume_v1::WriteVolumeCacheRequest {
            volume_id: v.clone(),
        })
        .await
        .unwrap();
    c.fs.rmdir(filesystem_v1::RmdirRequest {
        path: publish.clone(),
        force: false,
    })
    .await
    .unwrap();
    c.volume
        .unmount_volume(volume_v1::UnmountVolumeRequest {
            volume_id: v.clone(),
            target_path: staging.clone(),
        })
        .await
        .unwrap();
    c.fs.rmdir(filesystem_v1::RmdirRequest {
        path: staging.clone(),
        force: true,
    })
    .await
    .unwrap();
    c.iscsi
        .disconnect_target(iscsi::DisconnectTargetRequest {
            target_portal: tp(),
            iqn: iqn.clone(),
        })
        .await
        .unwrap();
    c.iscsi
        .remove_target_portal(iscsi::RemoveTargetPortalRequest {
            target_portal: tp(),
        })
        .await
        .unwrap();

    // ---- SMB ----
    let global = format!(r"{K}\plugins\wincsi.csi.io\pv\smb\globalmount");
    c.fs.mkdir(filesystem_v1::MkdirRequest {
        path: format!(r"{K}\plugins\wincsi.csi.io\pv\smb"),
    })
    .await
    .unwrap();
    c.smb
        .new_smb_global_mapping(smb_v1::NewSmbGlobalMappingRequest {
            remote_path: r"\\fileserver.corp.example\data".into(),
            local_path: global.clone(),
            username: r"CORP\alice".into(),
            password: "alice-password-1".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        admin
            .read_file(&format!(r"{global}\hello.txt"))
            .await
            .unwrap(),
        "hello from the file server\n"
    );
    c.smb
        .remove_smb_global_mapping(smb_v1::RemoveSmbGlobalMappingRequest {
            remote_path: r"\\fileserver.corp.example\data".into(),
        })
        .await
        .unwrap();
    c.fs.rmdir(filesystem_v1::RmdirRequest {
        path: global.clone(),
        force: true,
    })
    .await
    .unwrap();

    // Nothing left, nothing lost, every RPC seen.
    let inv = admin.invariants().await.unwrap();
    assert!(inv.ok(), "{inv:?}");
    let counts = admin.call_counts().await.unwrap();
    for rpc in sim::RPCS {
        assert!(counts.contains_key(*rpc), "{rpc} was not exercised");
    }
    // Host processes as the release played starts them: PowerShell and wmic children up to v1.2.1, none after.
    let processes = admin.host_processes().await.unwrap();
    let release = admin.csi_proxy_status().await.unwrap().version;
    assert_eq!(
        processes.is_empty(),
        !release.is_powershell(),
        "{release}: {processes:?}"
    );
    assert!(processes.keys().all(|rpc| {
        !["PathExists", "Mkdir", "Rmdir", "IsSymlink", "CreateSymlink"].contains(&rpc.as_str())
    }));
    // The audit log has every call, with secrets redacted.
    let audit = admin.audit(0).await.unwrap();
    let text = serde_json::to_string(&audit).unwrap();
    assert!(!text.contains("alice-password-1") && !text.contains("target-secret-1"));
    let smb = audit
        .iter()
        .find(|e| e.rpc == "NewSmbGlobalMapping")
        .unwrap();
    assert_eq!(smb.args["password"], "<redacted>");
    assert_eq!(smb.args["username"], r"CORP\alice");
}

#[tokio::test]
async fn failures_are_unknown_with_the_host_message() {
    let (_p, mut c) = start().await;
    let e =
        c.fs.mkdir(filesystem_v1::MkdirRequest {
            path: r"C:\Windows\x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unknown);
    assert_eq!(
        e.message(),
        r"path: C:\Windows\x is not within the working directories: [C:\var\lib\kubelet]"
    );
    let e = c
        .smb
        .remove_smb_global_mapping(smb_v1::RemoveSmbGlobalMappingRequest {
            remote_path: r"\\x\y".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unknown);
    assert!(e.message().starts_with("UnmountSmbShare failed."));
    // A missing target_portal would crash the real server; the sim answers UNKNOWN.
    let e = c
        .iscsi
        .add_target_portal(iscsi::AddTargetPortalRequest {
            target_portal: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unknown);
}

#[tokio::test]
async fn admin_faults_hangs_latency_and_reboot() {
    let (p, mut c) = start().await;
    let admin = p.admin().await;
    let path = format!(r"{K}\x");

    // Fail the 2nd next Mkdir.
    admin
        .fail_nth("/v1.Filesystem/Mkdir", 2, "injected: Access is denied.")
        .await
        .unwrap();
    c.fs.mkdir(filesystem_v1::MkdirRequest { path: path.clone() })
        .await
        .unwrap();
    let e =
        c.fs.mkdir(filesystem_v1::MkdirRequest { path: path.clone() })
            .await
            .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unknown, "injected: Access is denied.")
    );
    c.fs.mkdir(filesystem_v1::MkdirRequest { path: path.clone() })
        .await
        .unwrap();
    let audit = admin.audit(0).await.unwrap();
    assert_eq!(audit.iter().filter(|e| e.injected).count(), 1);

    // Unknown RPC names are rejected.
    assert!(admin.fail_nth("NoSuchRpc", 1, "x").await.is_err());

    // Latency (no timing assertion: just that calls still complete and are audited).
    admin
        .set_latency("PathExists", std::time::Duration::from_millis(5))
        .await
        .unwrap();
    c.fs.path_exists(filesystem_v1::PathExistsRequest { path: path.clone() })
        .await
        .unwrap();
    admin
        .set_latency("PathExists", std::time::Duration::ZERO)
        .await
        .unwrap();

    // Hang the next IsSymlink, observe it hung, release it.
    admin.hang("IsSymlink", 1).await.unwrap();
    let mut fs2 = c.fs.clone();
    let p2 = path.clone();
    let hung = tokio::spawn(async move {
        fs2.is_symlink(filesystem_v1::IsSymlinkRequest { path: p2 })
            .await
    });
    assert_eq!(admin.wait_hung(1).await.unwrap(), 1);
    admin.release_hangs().await.unwrap();
    assert!(!hung.await.unwrap().unwrap().into_inner().is_symlink);

    // A hung call fails when the node reboots.
    admin.hang("IsSymlink", 1).await.unwrap();
    let mut fs3 = c.fs.clone();
    let p3 = path.clone();
    let hung = tokio::spawn(async move {
        fs3.is_symlink(filesystem_v1::IsSymlinkRequest { path: p3 })
            .await
    });
    admin.wait_hung(1).await.unwrap();
    admin.reboot().await.unwrap();
    assert_eq!(hung.await.unwrap().unwrap_err().code(), Code::Unknown);
    assert_eq!(admin.state().await.unwrap()["boots"], 2);

    // Faults can be cleared.
    admin.fail_nth("Mkdir", 1, "x").await.unwrap();
    admin.clear_faults().await.unwrap();
    c.fs.mkdir(filesystem_v1::MkdirRequest { path: path.clone() })
        .await
        .unwrap();
}

#[tokio::test]
async fn data_loss_and_leftovers_are_reported_over_admin() {
    let (p, mut c) = start().await;
    let admin = p.admin().await;
    c.iscsi
        .add_target_portal(iscsi::AddTargetPortalRequest {
            target_portal: tp(),
        })
        .await
        .unwrap();
    c.iscsi
        .connect_target(iscsi::ConnectTargetRequest {
            target_portal: tp(),
            iqn: "iqn.2026-01.io.wincsi:pvc-data".into(),
            auth_type: iscsi::AuthenticationType::OneWayChap as i32,
            chap_username: "initiator1".into(),
            chap_secret: "chap-secret-12".into(),
        })
        .await
        .unwrap();
    let audit = admin.audit(0).await.unwrap();
    let connect = audit.iter().find(|e| e.rpc == "ConnectTarget").unwrap();
    assert_eq!(connect.args["chap_secret"], "<redacted>");
    admin.complete_arrivals().await.unwrap();
    let disks = c
        .iscsi
        .get_target_disks(iscsi::GetTargetDisksRequest {
            target_portal: tp(),
            iqn: "iqn.2026-01.io.wincsi:pvc-data".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .disk_i_ds;
    let n: u32 = disks[0].parse().unwrap();
    // The default SAN policy leaves the LUN offline.
    c.disk
        .set_disk_state(disk_v1::SetDiskStateRequest {
            disk_number: n,
            is_online: true,
        })
        .await
        .unwrap();
    admin.complete_arrivals().await.unwrap();
    let v = c
        .volume
        .list_volumes_on_disk(volume_v1::ListVolumesOnDiskRequest {
            disk_number: n,
            partition_number: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .volume_ids[0]
        .clone();
    // The unguarded format destroys the precious data.
    c.volume
        .format_volume(volume_v1::FormatVolumeRequest {
            volume_id: v.clone(),
        })
        .await
        .unwrap();
    let inv = admin.invariants().await.unwrap();
    assert_eq!(inv.data_loss.len(), 1);
    assert_eq!(inv.data_loss[0].volume_id.as_deref(), Some(v.as_str()));
    assert_eq!(
        inv.leftovers.len(),
        1,
        "the iSCSI session is still there: {:?}",
        inv.leftovers
    );
    assert!(!inv.ok());
    // Reboot drops the session.
    admin.reboot().await.unwrap();
    assert!(admin.invariants().await.unwrap().leftovers.is_empty());
    assert_eq!(admin.data_loss().await.unwrap().len(), 1);
}

#[tokio::test]
async fn admin_can_load_a_scenario_and_drive_share_state() {
    let (p, mut c) = start().await;
    let admin = p.admin().await;
    let sc = sim::Scenario::from_json(
        r#"{"host":{"bios_serial":"NEW"},"smb":{"servers":[{"name":"s","accounts":[{"user":"u","password":"pw-000000001"}],"shares":[{"name":"d"}]}]}}"#,
    )
    .unwrap();
    admin.load_scenario(&sc).await.unwrap();
    let serial = c
        .system
        .get_bios_serial_number(system_v1alpha1::GetBiosSerialNumberRequest {})
        .await
        .unwrap();
    assert_eq!(serial.into_inner().serial_number, "NEW");
    admin
        .write_share_file("s", "d", "a/b.txt", "on the server")
        .await
        .unwrap();
    let local = format!(r"{K}\m");
    c.smb
        .new_smb_global_mapping(smb_v1::NewSmbGlobalMappingRequest {
            remote_path: r"\\s\d\a".into(),
            local_path: local.clone(),
            username: "u".into(),
            password: "pw-000000001".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        admin.read_link(&local).await.unwrap().as_deref(),
        Some(r"\\s\d\a\")
    );
    assert_eq!(
        admin.read_file(&format!(r"{local}\b.txt")).await.unwrap(),
        "on the server"
    );
    admin
        .write_file(&format!(r"{local}\c.txt"), "from the node")
        .await
        .unwrap();
    assert_eq!(
        admin.read_share_file("s", "d", "a/c.txt").await.unwrap(),
        "from the node"
    );
    admin
        .set_smb_password("s", "u", "pw-000000002")
        .await
        .unwrap();
    admin.set_smb_reachable("s", false).await.unwrap();
    let st = admin.state().await.unwrap();
    assert_eq!(st["mappings"][r"\\s\d"]["status"], "Disconnected");
    assert!(
        !st.to_string().contains("pw-00000000"),
        "no secrets in state snapshots"
    );
}

#[tokio::test]
async fn answers_larger_than_the_codec_buffers_arrive_whole() {
    // 300 local disks: a ListDiskLocations answer of several KiB, against 1 KiB codec buffers on both sides.
    let dir = tempfile::tempdir().unwrap();
    let disks: Vec<_> = (0..300)
        .map(|n| serde_json::json!({"number": n, "id": format!("disk-with-a-long-identifier-{n:04}"), "size": 1u64 << 30}))
        .collect();
    let scenario = dir.path().join("many-disks.json");
    std::fs::write(&scenario, serde_json::json!({ "disks": disks }).to_string()).unwrap();
    let p = SimProcess::start(|d| {
        vec![
            "--scenario".into(),
            scenario.display().to_string(),
            "--socket-dir".into(),
            d.join("sock").display().to_string(),
        ]
    })
    .await;
    let mut c = clients(&p.dir.path().join("sock")).await;
    let locations = c
        .disk
        .list_disk_locations(disk_v1::ListDiskLocationsRequest {})
        .await
        .unwrap()
        .into_inner()
        .disk_locations;
    assert_eq!(locations.len(), 300);
    let ids = c
        .disk
        .list_disk_i_ds(disk_v1::ListDiskIDsRequest {})
        .await
        .unwrap()
        .into_inner()
        .disk_i_ds;
    assert_eq!(ids.len(), 300);
}
