//! Field-number fidelity against csi-proxy's wire contract, independent of our `.proto` files:
//! every message with fields is encoded with all fields set to non-default values, and the field
//! numbers and wire types found in the bytes are compared with the tables of the contract
//! (`shared/reference/csi-proxy-api.md` §2, i.e. csi-proxy v1.1.3–v1.3.0).

use std::collections::BTreeMap;

use prost::Message;
use proxy_client::proto::{
    disk_v1 as disk, filesystem_v1 as fs, iscsi_v1alpha2 as iscsi, smb_v1 as smb,
    system_v1alpha1 as system, volume_v1 as volume,
};

const VARINT: u8 = 0;
const LEN: u8 = 2;

fn varint(bytes: &mut &[u8]) -> u64 {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (byte, rest) = bytes.split_first().expect("truncated varint");
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
    }
    panic!("varint too long")
}

/// (field number, wire type) of every top-level field, in encoding order; length-delimited
/// payloads are returned too so nested messages can be checked.
fn fields(bytes: &[u8]) -> Vec<(u32, u8, Vec<u8>)> {
    let mut rest = bytes;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let key = varint(&mut rest);
        let (number, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let payload = match wire {
            VARINT => {
                varint(&mut rest);
                Vec::new()
            }
            LEN => {
                let len = varint(&mut rest) as usize;
                let (payload, tail) = rest.split_at(len);
                rest = tail;
                payload.to_vec()
            }
            other => panic!("unexpected wire type {other}"),
        };
        out.push((number, wire, payload));
    }
    out
}

fn shape(bytes: &[u8]) -> Vec<(u32, u8)> {
    fields(bytes).into_iter().map(|(n, w, _)| (n, w)).collect()
}

fn assert_shape<M: Message>(name: &str, message: M, want: &[(u32, u8)]) {
    assert_eq!(shape(&message.encode_to_vec()), want, "{name}");
}

fn portal() -> Option<iscsi::TargetPortal> {
    Some(iscsi::TargetPortal {
        target_address: "10.0.0.1".into(),
        target_port: 3261,
    })
}

#[test]
fn disk_v1_field_numbers() {
    let location = disk::DiskLocation {
        adapter: "1".into(),
        bus: "2".into(),
        target: "3".into(),
        lunid: "4".into(),
    };
    assert_shape(
        "DiskLocation",
        location.clone(),
        &[(1, LEN), (2, LEN), (3, LEN), (4, LEN)],
    );
    // map<uint32, DiskLocation> disk_locations = 1: entries {key = 1 varint, value = 2 message}.
    let response = disk::ListDiskLocationsResponse {
        disk_locations: BTreeMap::from([(7, location)]),
    };
    let entries = fields(&response.encode_to_vec());
    assert_eq!(entries.len(), 1);
    assert_eq!((entries[0].0, entries[0].1), (1, LEN));
    assert_eq!(
        shape(&entries[0].2),
        [(1, VARINT), (2, LEN)],
        "disk_locations entry"
    );

    let ids = disk::DiskIDs {
        page83: "a".into(),
        serial_number: "b".into(),
    };
    assert_shape("DiskIDs", ids.clone(), &[(1, LEN), (2, LEN)]);
    let response = disk::ListDiskIDsResponse {
        disk_i_ds: BTreeMap::from([(9, ids)]),
    };
    let entries = fields(&response.encode_to_vec());
    assert_eq!(
        (entries[0].0, entries[0].1),
        (1, LEN),
        "ListDiskIDsResponse.diskIDs"
    );
    assert_eq!(
        shape(&entries[0].2),
        [(1, VARINT), (2, LEN)],
        "diskIDs entry"
    );

    assert_shape(
        "PartitionDiskRequest",
        disk::PartitionDiskRequest { disk_number: 1 },
        &[(1, VARINT)],
    );
    assert_shape(
        "GetDiskStatsRequest",
        disk::GetDiskStatsRequest { disk_number: 1 },
        &[(1, VARINT)],
    );
    assert_shape(
        "GetDiskStatsResponse",
        disk::GetDiskStatsResponse { total_bytes: 1 },
        &[(1, VARINT)],
    );
    assert_shape(
        "SetDiskStateRequest",
        disk::SetDiskStateRequest {
            disk_number: 1,
            is_online: true,
        },
        &[(1, VARINT), (2, VARINT)],
    );
    assert_shape(
        "GetDiskStateRequest",
        disk::GetDiskStateRequest { disk_number: 1 },
        &[(1, VARINT)],
    );
    assert_shape(
        "GetDiskStateResponse",
        disk::GetDiskStateResponse { is_online: true },
        &[(1, VARINT)],
    );
    // uint32, not int32: a disk number above i32::MAX encodes in 5 bytes, never as a negative
    // 10-byte varint.
    assert_eq!(
        disk::PartitionDiskRequest {
            disk_number: u32::MAX
        }
        .encode_to_vec()
        .len(),
        6
    );
}

#[test]
fn volume_v1_field_numbers() {
    let id = || "\\\\?\\Volume{x}\\".to_string();
    assert_shape(
        "ListVolumesOnDiskRequest",
        volume::ListVolumesOnDiskRequest {
            disk_number: 1,
            partition_number: 2,
        },
        &[(1, VARINT), (2, VARINT)],
    );
    assert_shape(
        "ListVolumesOnDiskResponse",
        volume::ListVolumesOnDiskResponse {
            volume_ids: vec![id(), id()],
        },
        &[(1, LEN), (1, LEN)],
    );
    assert_shape(
        "MountVolumeRequest",
        volume::MountVolumeRequest {
            volume_id: id(),
            target_path: "c:\\t".into(),
        },
        &[(1, LEN), (2, LEN)],
    );
    assert_shape(
        "UnmountVolumeRequest",
        volume::UnmountVolumeRequest {
            volume_id: id(),
            target_path: "c:\\t".into(),
        },
        &[(1, LEN), (2, LEN)],
    );
    assert_shape(
        "IsVolumeFormattedRequest",
        volume::IsVolumeFormattedRequest { volume_id: id() },
        &[(1, LEN)],
    );
    assert_shape(
        "IsVolumeFormattedResponse",
        volume::IsVolumeFormattedResponse { formatted: true },
        &[(1, VARINT)],
    );
    assert_shape(
        "FormatVolumeRequest",
        volume::FormatVolumeRequest { volume_id: id() },
        &[(1, LEN)],
    );
    assert_shape(
        "ResizeVolumeRequest",
        volume::ResizeVolumeRequest {
            volume_id: id(),
            size_bytes: 5,
        },
        &[(1, LEN), (2, VARINT)],
    );
    assert_shape(
        "GetVolumeStatsRequest",
        volume::GetVolumeStatsRequest { volume_id: id() },
        &[(1, LEN)],
    );
    assert_shape(
        "GetVolumeStatsResponse",
        volume::GetVolumeStatsResponse {
            total_bytes: 2,
            used_bytes: 1,
        },
        &[(1, VARINT), (2, VARINT)],
    );
    assert_shape(
        "GetDiskNumberFromVolumeIDRequest",
        volume::GetDiskNumberFromVolumeIdRequest { volume_id: id() },
        &[(1, LEN)],
    );
    assert_shape(
        "GetDiskNumberFromVolumeIDResponse",
        volume::GetDiskNumberFromVolumeIdResponse { disk_number: 3 },
        &[(1, VARINT)],
    );
    assert_shape(
        "GetVolumeIDFromTargetPathRequest",
        volume::GetVolumeIdFromTargetPathRequest {
            target_path: "c:\\t".into(),
        },
        &[(1, LEN)],
    );
    assert_shape(
        "GetVolumeIDFromTargetPathResponse",
        volume::GetVolumeIdFromTargetPathResponse { volume_id: id() },
        &[(1, LEN)],
    );
    assert_shape(
        "WriteVolumeCacheRequest",
        volume::WriteVolumeCacheRequest { volume_id: id() },
        &[(1, LEN)],
    );
}

#[test]
fn filesystem_v1_field_numbers() {
    let p = || "c:\\var\\lib\\kubelet\\x".to_string();
    assert_shape(
        "PathExistsRequest",
        fs::PathExistsRequest { path: p() },
        &[(1, LEN)],
    );
    assert_shape(
        "PathExistsResponse",
        fs::PathExistsResponse { exists: true },
        &[(1, VARINT)],
    );
    assert_shape("MkdirRequest", fs::MkdirRequest { path: p() }, &[(1, LEN)]);
    assert_shape(
        "RmdirRequest",
        fs::RmdirRequest {
            path: p(),
            force: true,
        },
        &[(1, LEN), (2, VARINT)],
    );
    assert_shape(
        "CreateSymlinkRequest",
        fs::CreateSymlinkRequest {
            source_path: p(),
            target_path: p(),
        },
        &[(1, LEN), (2, LEN)],
    );
    assert_shape(
        "IsSymlinkRequest",
        fs::IsSymlinkRequest { path: p() },
        &[(1, LEN)],
    );
    assert_shape(
        "IsSymlinkResponse",
        fs::IsSymlinkResponse { is_symlink: true },
        &[(1, VARINT)],
    );
}

#[test]
fn smb_v1_field_numbers() {
    assert_shape(
        "NewSmbGlobalMappingRequest",
        smb::NewSmbGlobalMappingRequest {
            remote_path: "\\\\s\\share".into(),
            local_path: "c:\\l".into(),
            username: "u".into(),
            password: "p".into(),
        },
        &[(1, LEN), (2, LEN), (3, LEN), (4, LEN)],
    );
    assert_shape(
        "RemoveSmbGlobalMappingRequest",
        smb::RemoveSmbGlobalMappingRequest {
            remote_path: "\\\\s\\share".into(),
        },
        &[(1, LEN)],
    );
}

#[test]
fn iscsi_v1alpha2_field_numbers() {
    assert_shape("TargetPortal", portal().unwrap(), &[(1, LEN), (2, VARINT)]);
    assert_shape(
        "AddTargetPortalRequest",
        iscsi::AddTargetPortalRequest {
            target_portal: portal(),
        },
        &[(1, LEN)],
    );
    assert_shape(
        "DiscoverTargetPortalRequest",
        iscsi::DiscoverTargetPortalRequest {
            target_portal: portal(),
        },
        &[(1, LEN)],
    );
    assert_shape(
        "DiscoverTargetPortalResponse",
        iscsi::DiscoverTargetPortalResponse {
            iqns: vec!["iqn".into()],
        },
        &[(1, LEN)],
    );
    assert_shape(
        "RemoveTargetPortalRequest",
        iscsi::RemoveTargetPortalRequest {
            target_portal: portal(),
        },
        &[(1, LEN)],
    );
    assert_shape(
        "ListTargetPortalsResponse",
        iscsi::ListTargetPortalsResponse {
            target_portals: vec![portal().unwrap()],
        },
        &[(1, LEN)],
    );
    assert_shape(
        "ConnectTargetRequest",
        iscsi::ConnectTargetRequest {
            target_portal: portal(),
            iqn: "iqn".into(),
            auth_type: iscsi::AuthenticationType::MutualChap as i32,
            chap_username: "u".into(),
            chap_secret: "s".into(),
        },
        &[(1, LEN), (2, LEN), (3, VARINT), (4, LEN), (5, LEN)],
    );
    assert_eq!(iscsi::AuthenticationType::None as i32, 0);
    assert_eq!(iscsi::AuthenticationType::OneWayChap as i32, 1);
    assert_eq!(iscsi::AuthenticationType::MutualChap as i32, 2);
    assert_shape(
        "GetTargetDisksRequest",
        iscsi::GetTargetDisksRequest {
            target_portal: portal(),
            iqn: "iqn".into(),
        },
        &[(1, LEN), (2, LEN)],
    );
    assert_shape(
        "GetTargetDisksResponse",
        iscsi::GetTargetDisksResponse {
            disk_i_ds: vec!["1".into()],
        },
        &[(1, LEN)],
    );
    assert_shape(
        "DisconnectTargetRequest",
        iscsi::DisconnectTargetRequest {
            target_portal: portal(),
            iqn: "iqn".into(),
        },
        &[(1, LEN), (2, LEN)],
    );
    assert_shape(
        "SetMutualChapSecretRequest",
        iscsi::SetMutualChapSecretRequest {
            mutual_chap_secret: "s".into(),
        },
        &[(1, LEN)],
    );
}

#[test]
fn system_v1alpha1_field_numbers() {
    assert_shape(
        "GetBIOSSerialNumberResponse",
        system::GetBiosSerialNumberResponse {
            serial_number: "s".into(),
        },
        &[(1, LEN)],
    );
    assert_shape(
        "StartServiceRequest",
        system::StartServiceRequest { name: "n".into() },
        &[(1, LEN)],
    );
    assert_shape(
        "StopServiceRequest",
        system::StopServiceRequest {
            name: "n".into(),
            force: true,
        },
        &[(1, LEN), (2, VARINT)],
    );
    assert_shape(
        "GetServiceRequest",
        system::GetServiceRequest { name: "n".into() },
        &[(1, LEN)],
    );
    assert_shape(
        "GetServiceResponse",
        system::GetServiceResponse {
            display_name: "d".into(),
            start_type: 3,
            status: 4,
        },
        &[(1, LEN), (2, VARINT), (3, VARINT)],
    );
    let statuses = [
        system::ServiceStatus::Unknown,
        system::ServiceStatus::Stopped,
        system::ServiceStatus::StartPending,
        system::ServiceStatus::StopPending,
        system::ServiceStatus::Running,
        system::ServiceStatus::ContinuePending,
        system::ServiceStatus::PausePending,
        system::ServiceStatus::Paused,
    ];
    for (value, status) in statuses.into_iter().enumerate() {
        assert_eq!(status as usize, value, "{status:?}");
    }
    let start_types = [
        system::StartType::Boot,
        system::StartType::System,
        system::StartType::Automatic,
        system::StartType::Manual,
        system::StartType::Disabled,
    ];
    for (value, start_type) in start_types.into_iter().enumerate() {
        assert_eq!(start_type as usize, value, "{start_type:?}");
    }
}

/// The gRPC method paths csi-proxy serves (reference §2), as generated into the client stubs.
#[test]
fn service_and_method_paths() {
    let sources = [
        include_str!("../proto/disk/v1/api.proto"),
        include_str!("../proto/volume/v1/api.proto"),
        include_str!("../proto/filesystem/v1/api.proto"),
        include_str!("../proto/smb/v1/api.proto"),
        include_str!("../proto/iscsi/v1alpha2/api.proto"),
        include_str!("../proto/system/v1alpha1/api.proto"),
    ];
    let mut paths = Vec::new();
    for source in sources {
        let package = source
            .lines()
            .find_map(|l| l.trim().strip_prefix("package "))
            .unwrap()
            .trim_end_matches(';');
        let service = source
            .lines()
            .find_map(|l| l.trim().strip_prefix("service "))
            .unwrap()
            .trim_end_matches(" {");
        for line in source.lines() {
            if let Some(rpc) = line.trim().strip_prefix("rpc ") {
                let method = rpc.split('(').next().unwrap();
                paths.push(format!("/{package}.{service}/{method}"));
            }
        }
    }
    let want = [
        "/v1.Disk/ListDiskLocations",
        "/v1.Disk/PartitionDisk",
        "/v1.Disk/Rescan",
        "/v1.Disk/ListDiskIDs",
        "/v1.Disk/GetDiskStats",
        "/v1.Disk/SetDiskState",
        "/v1.Disk/GetDiskState",
        "/v1.Volume/ListVolumesOnDisk",
        "/v1.Volume/MountVolume",
        "/v1.Volume/UnmountVolume",
        "/v1.Volume/IsVolumeFormatted",
        "/v1.Volume/FormatVolume",
        "/v1.Volume/ResizeVolume",
        "/v1.Volume/GetVolumeStats",
        "/v1.Volume/GetDiskNumberFromVolumeID",
        "/v1.Volume/GetVolumeIDFromTargetPath",
        "/v1.Volume/WriteVolumeCache",
        "/v1.Filesystem/PathExists",
        "/v1.Filesystem/Mkdir",
        "/v1.Filesystem/Rmdir",
        "/v1.Filesystem/CreateSymlink",
        "/v1.Filesystem/IsSymlink",
        "/v1.Smb/NewSmbGlobalMapping",
        "/v1.Smb/RemoveSmbGlobalMapping",
        "/v1alpha2.Iscsi/AddTargetPortal",
        "/v1alpha2.Iscsi/DiscoverTargetPortal",
        "/v1alpha2.Iscsi/RemoveTargetPortal",
        "/v1alpha2.Iscsi/ListTargetPortals",
        "/v1alpha2.Iscsi/ConnectTarget",
        "/v1alpha2.Iscsi/DisconnectTarget",
        "/v1alpha2.Iscsi/GetTargetDisks",
        "/v1alpha2.Iscsi/SetMutualChapSecret",
        "/v1alpha1.System/GetBIOSSerialNumber",
        "/v1alpha1.System/StartService",
        "/v1alpha1.System/StopService",
        "/v1alpha1.System/GetService",
    ];
    assert_eq!(paths, want);
}
