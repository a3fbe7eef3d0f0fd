//! Shared by `wire.rs` (Unix sockets) and `wine_named_pipe.rs` (named pipes): a fake csi-proxy
//! that checks every request field against fixed, non-default values and answers with fixed,
//! non-default values, plus the client side that exercises every RPC through the typed API.

#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use proxy_client::proto::{
    disk_v1, filesystem_v1, iscsi_v1alpha2, smb_v1, system_v1alpha1, volume_v1,
};
use proxy_client::{
    ApiGroup, ChapAuth, DiskIds, DiskLocation, Portal, ProxyClient, Secret, ServiceInfo,
    ServiceStatus, SmbCredentials, StartType,
};
use tonic::transport::server::Router;
use tonic::{Request, Response, Status};

// ---- values (none of them is a proto3 default) ----
pub const DISK_A: u32 = 4_000_000_001; // > i32::MAX: catches a uint32/int32 mix-up
pub const DISK_B: u32 = 17;
pub const VOLUME_ID: &str = r"\\?\Volume{1b9e8f3c-5a4d-4e6f-8a7b-9c0d1e2f3a4b}\";
pub const VOLUME_ID_2: &str = r"\\?\Volume{00000000-1111-2222-3333-444455556666}\";
pub const MOUNT_PATH: &str =
    r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\pv\pvc-1f2e\globalmount";
pub const POD_PATH: &str = r"c:\var\lib\kubelet\pods\8a1c\volumes\kubernetes.io~csi\pvc-1f2e\mount";
pub const RESIZE_BYTES: u64 = 32_212_254_720; // 30 GiB: > u32::MAX
pub const VOLUME_TOTAL: u64 = 107_374_182_400;
pub const VOLUME_USED: u64 = 53_687_091_201;
pub const DISK_SIZE: u64 = 5_000_000_000_123;
pub const SMB_REMOTE: &str = r"\\fs1.contoso.local\share\pvc-1f2e";
pub const SMB_REMOTE_CONFLICT: &str = r"\\fs2.contoso.local\share";
pub const SMB_USER: &str = r"CONTOSO\svc-k8s";
pub const SMB_PASSWORD: &str = "Pa55w0rd!-smb-secret";
pub const PORTAL_ADDR: &str = "10.20.30.40";
pub const PORTAL_PORT: u16 = 3261;
pub const IQN: &str = "iqn.2003-01.org.linux-iscsi.target:sn.0123456789ab";
pub const IQN_2: &str = "iqn.1991-05.com.microsoft:target-2";
pub const CHAP_USER: &str = "node-7";
pub const CHAP_SECRET: &str = "chap-secret-0123";
pub const MUTUAL_SECRET: &str = "mutual-secret-99";
pub const SERVICE: &str = "MSiSCSI";
pub const SERVICE_DISPLAY: &str = "Microsoft iSCSI Initiator Service";
pub const HANG_SERVICE: &str = "hang-forever";
pub const BIOS_SERIAL: &str = "VMware-42 1a 7f 9c";

/// The realistic text csi-proxy (PowerShell era) sends for Windows error 1219, Go-`%q`-quoted.
pub const SMB_1219_TEXT: &str = concat!(
    r#"NewSmbGlobalMapping failed. output: "New-SmbGlobalMapping : Multiple connections to a server or "#,
    r#"shared resource by the same user, using more than one user \r\nname, are not allowed. Disconnect "#,
    r#"all previous connections to the server or shared resource and try again.\r\nAt line:1 char:190\r\n"#,
    r#"+ ... ser, $PWord;New-SmbGlobalMapping -RemotePath $Env:smbremotepath -Cred ...\r\n"#,
    r#"+                 ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\r\n"#,
    r#"    + CategoryInfo          : NotSpecified: (MSFT_SmbGlobalMapping:ROOT/Microsoft/...mbGlobalMapping) "#,
    r#"[New-SmbGlobalMapping], CimException\r\n    + FullyQualifiedErrorId : Windows System Error 1219,"#,
    r#"New-SmbGlobalMapping\r\n \r\n", err: exit status 1"#
);

/// Every RPC of the six groups.
pub const ALL_RPCS: [&str; 36] = [
    "Disk/ListDiskLocations",
    "Disk/PartitionDisk",
    "Disk/Rescan",
    "Disk/ListDiskIDs",
    "Disk/GetDiskStats",
    "Disk/SetDiskState",
    "Disk/GetDiskState",
    "Volume/ListVolumesOnDisk",
    "Volume/MountVolume",
    "Volume/UnmountVolume",
    "Volume/IsVolumeFormatted",
    "Volume/FormatVolume",
    "Volume/ResizeVolume",
    "Volume/GetVolumeStats",
    "Volume/GetDiskNumberFromVolumeID",
    "Volume/GetVolumeIDFromTargetPath",
    "Volume/WriteVolumeCache",
    "Filesystem/PathExists",
    "Filesystem/Mkdir",
    "Filesystem/Rmdir",
    "Filesystem/CreateSymlink",
    "Filesystem/IsSymlink",
    "Smb/NewSmbGlobalMapping",
    "Smb/RemoveSmbGlobalMapping",
    "Iscsi/AddTargetPortal",
    "Iscsi/DiscoverTargetPortal",
    "Iscsi/RemoveTargetPortal",
    "Iscsi/ListTargetPortals",
    "Iscsi/ConnectTarget",
    "Iscsi/DisconnectTarget",
    "Iscsi/GetTargetDisks",
    "Iscsi/SetMutualChapSecret",
    "System/GetBIOSSerialNumber",
    "System/StartService",
    "System/StopService",
    "System/GetService",
];

/// A fake csi-proxy serving all six groups. Records which RPCs arrived intact.
#[derive(Clone, Default)]
pub struct FakeProxy {
    calls: Arc<Mutex<BTreeSet<&'static str>>>,
}

impl FakeProxy {
    pub fn calls(&self) -> BTreeSet<&'static str> {
        self.calls.lock().unwrap().clone()
    }

    fn hit(&self, rpc: &'static str) {
        self.calls.lock().unwrap().insert(rpc);
    }

    /// A tonic router serving `group` only (csi-proxy has one service per pipe).
    pub fn router(&self, group: ApiGroup) -> Router {
        let mut server = tonic::transport::Server::builder();
        match group {
            ApiGroup::Disk => {
                server.add_service(disk_v1::disk_server::DiskServer::new(self.clone()))
            }
            ApiGroup::Volume => {
                server.add_service(volume_v1::volume_server::VolumeServer::new(self.clone()))
            }
            ApiGroup::Filesystem => server.add_service(
                filesystem_v1::filesystem_server::FilesystemServer::new(self.clone()),
            ),
            ApiGroup::Smb => server.add_service(smb_v1::smb_server::SmbServer::new(self.clone())),
            ApiGroup::Iscsi => {
                server.add_service(iscsi_v1alpha2::iscsi_server::IscsiServer::new(self.clone()))
            }
            ApiGroup::System => server.add_service(
                system_v1alpha1::system_server::SystemServer::new(self.clone()),
            ),
        }
    }
}

/// Compares a received request with the expected one; a mismatch becomes the RPC's error so the
/// client-side test fails with both values in the message.
fn expect<T: PartialEq + Debug>(rpc: &str, got: T, want: T) -> Result<(), Status> {
    if got == want {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "{rpc}: request mismatch: got {got:?}, want {want:?}"
        )))
    }
}

fn portal() -> Option<iscsi_v1alpha2::TargetPortal> {
    Some(iscsi_v1alpha2::TargetPortal {
        target_address: PORTAL_ADDR.into(),
        target_port: u32::from(PORTAL_PORT),
    })
}

type R<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl disk_v1::disk_server::Disk for FakeProxy {
    async fn list_disk_locations(
        &self,
        _: Request<disk_v1::ListDiskLocationsRequest>,
    ) -> R<disk_v1::ListDiskLocationsResponse> {
        self.hit("Disk/ListDiskLocations");
        let mut map = BTreeMap::new();
        map.insert(
            DISK_A,
            disk_v1::DiskLocation {
                adapter: "3".into(),
                bus: "bus-9".into(),
                target: "11".into(),
                lunid: "42".into(),
            },
        );
        map.insert(
            DISK_B,
            disk_v1::DiskLocation {
                adapter: "0".into(),
                bus: String::new(),
                target: "1".into(),
                lunid: "7".into(),
            },
        );
        Ok(Response::new(disk_v1::ListDiskLocationsResponse {
            disk_locations: map,
        }))
    }
    async fn partition_disk(
        &self,
        r: Request<disk_v1::PartitionDiskRequest>,
    ) -> R<disk_v1::PartitionDiskResponse> {
        expect(
            "PartitionDisk",
            r.into_inner(),
            disk_v1::PartitionDiskRequest {
                disk_number: DISK_A,
            },
        )?;
        self.hit("Disk/PartitionDisk");
        Ok(Response::new(disk_v1::PartitionDiskResponse {}))
    }
    async fn rescan(&self, _: Request<disk_v1::RescanRequest>) -> R<disk_v1::RescanResponse> {
        self.hit("Disk/Rescan");
        Ok(Response::new(disk_v1::RescanResponse {}))
    }
    async fn list_disk_i_ds(
        &self,
        _: Request<disk_v1::ListDiskIDsRequest>,
    ) -> R<disk_v1::ListDiskIDsResponse> {
        self.hit("Disk/ListDiskIDs");
        let mut map = BTreeMap::new();
        map.insert(
            DISK_A,
            disk_v1::DiskIDs {
                page83: "60022480a1b2c3d4e5f60718293a4b5c".into(),
                serial_number: "  SER-0042  ".into(),
            },
        );
        Ok(Response::new(disk_v1::ListDiskIDsResponse {
            disk_i_ds: map,
        }))
    }
    async fn get_disk_stats(
        &self,
        r: Request<disk_v1::GetDiskStatsRequest>,
    ) -> R<disk_v1::GetDiskStatsResponse> {
        expect(
            "GetDiskStats",
            r.into_inner(),
            disk_v1::GetDiskStatsRequest {
                disk_number: DISK_B,
            },
        )?;
        self.hit("Disk/GetDiskStats");
        Ok(Response::new(disk_v1::GetDiskStatsResponse {
            total_bytes: DISK_SIZE as i64,
        }))
    }
    async fn set_disk_state(
        &self,
        r: Request<disk_v1::SetDiskStateRequest>,
    ) -> R<disk_v1::SetDiskStateResponse> {
        expect(
            "SetDiskState",
            r.into_inner(),
            disk_v1::SetDiskStateRequest {
                disk_number: DISK_A,
                is_online: true,
            },
        )?;
        self.hit("Disk/SetDiskState");
        Ok(Response::new(disk_v1::SetDiskStateResponse {}))
    }
    async fn get_disk_state(
        &self,
        r: Request<disk_v1::GetDiskStateRequest>,
    ) -> R<disk_v1::GetDiskStateResponse> {
        expect(
            "GetDiskState",
            r.into_inner(),
            disk_v1::GetDiskStateRequest {
                disk_number: DISK_B,
            },
        )?;
        self.hit("Disk/GetDiskState");
        Ok(Response::new(disk_v1::GetDiskStateResponse {
            is_online: true,
        }))
    }
}

#[tonic::async_trait]
impl volume_v1::volume_server::Volume for FakeProxy {
    async fn list_volumes_on_disk(
        &self,
        r: Request<volume_v1::ListVolumesOnDiskRequest>,
    ) -> R<volume_v1::ListVolumesOnDiskResponse> {
        expect(
            "ListVolumesOnDisk",
            r.into_inner(),
            volume_v1::ListVolumesOnDiskRequest {
                disk_number: DISK_A,
                partition_number: 2,
            },
        )?;
        self.hit("Volume/ListVolumesOnDisk");
        // The empty entry is what csi-proxy <= v1.2.1 sends for "no volumes"; the client drops it.
        Ok(Response::new(volume_v1::ListVolumesOnDiskResponse {
            volume_ids: vec![VOLUME_ID.into(), String::new(), VOLUME_ID_2.into()],
        }))
    }
    async fn mount_volume(
        &self,
        r: Request<volume_v1::MountVolumeRequest>,
    ) -> R<volume_v1::MountVolumeResponse> {
        expect(
            "MountVolume",
            r.into_inner(),
            volume_v1::MountVolumeRequest {
                volume_id: VOLUME_ID.into(),
                target_path: MOUNT_PATH.into(),
            },
        )?;
        self.hit("Volume/MountVolume");
        Ok(Response::new(volume_v1::MountVolumeResponse {}))
    }
    async fn unmount_volume(
        &self,
        r: Request<volume_v1::UnmountVolumeRequest>,
    ) -> R<volume_v1::UnmountVolumeResponse> {
        expect(
            "UnmountVolume",
            r.into_inner(),
            volume_v1::UnmountVolumeRequest {
                volume_id: VOLUME_ID_2.into(),
                target_path: POD_PATH.into(),
            },
        )?;
        self.hit("Volume/UnmountVolume");
        Ok(Response::new(volume_v1::UnmountVolumeResponse {}))
    }
    async fn is_volume_formatted(
        &self,
        r: Request<volume_v1::IsVolumeFormattedRequest>,
    ) -> R<volume_v1::IsVolumeFormattedResponse> {
        expect(
            "IsVolumeFormatted",
            r.into_inner(),
            volume_v1::IsVolumeFormattedRequest {
                volume_id: VOLUME_ID.into(),
            },
        )?;
        self.hit("Volume/IsVolumeFormatted");
        Ok(Response::new(volume_v1::IsVolumeFormattedResponse {
            formatted: true,
        }))
    }
    async fn format_volume(
        &self,
        r: Request<volume_v1::FormatVolumeRequest>,
    ) -> R<volume_v1::FormatVolumeResponse> {
        expect(
            "FormatVolume",
            r.into_inner(),
            volume_v1::FormatVolumeRequest {
                volume_id: VOLUME_ID_2.into(),
            },
        )?;
        self.hit("Volume/FormatVolume");
        Ok(Response::new(volume_v1::FormatVolumeResponse {}))
    }
    async fn resize_volume(
        &self,
        r: Request<volume_v1::ResizeVolumeRequest>,
    ) -> R<volume_v1::ResizeVolumeResponse> {
        expect(
            "ResizeVolume",
            r.into_inner(),
            volume_v1::ResizeVolumeRequest {
                volume_id: VOLUME_ID.into(),
                size_bytes: RESIZE_BYTES as i64,
            },
        )?;
        self.hit("Volume/ResizeVolume");
        Ok(Response::new(volume_v1::ResizeVolumeResponse {}))
    }
    async fn get_volume_stats(
        &self,
        r: Request<volume_v1::GetVolumeStatsRequest>,
    ) -> R<volume_v1::GetVolumeStatsResponse> {
        expect(
            "GetVolumeStats",
            r.into_inner(),
            volume_v1::GetVolumeStatsRequest {
                volume_id: VOLUME_ID.into(),
            },
        )?;
        self.hit("Volume/GetVolumeStats");
        Ok(Response::new(volume_v1::GetVolumeStatsResponse {
            total_bytes: VOLUME_TOTAL as i64,
            used_bytes: VOLUME_USED as i64,
        }))
    }
    async fn get_disk_number_from_volume_id(
        &self,
        r: Request<volume_v1::GetDiskNumberFromVolumeIdRequest>,
    ) -> R<volume_v1::GetDiskNumberFromVolumeIdResponse> {
        expect(
            "GetDiskNumberFromVolumeID",
            r.into_inner(),
            volume_v1::GetDiskNumberFromVolumeIdRequest {
                volume_id: VOLUME_ID_2.into(),
            },
        )?;
        self.hit("Volume/GetDiskNumberFromVolumeID");
        Ok(Response::new(
            volume_v1::GetDiskNumberFromVolumeIdResponse {
                disk_number: DISK_A,
            },
        ))
    }
    async fn get_volume_id_from_target_path(
        &self,
        r: Request<volume_v1::GetVolumeIdFromTargetPathRequest>,
    ) -> R<volume_v1::GetVolumeIdFromTargetPathResponse> {
        expect(
            "GetVolumeIDFromTargetPath",
            r.into_inner(),
            volume_v1::GetVolumeIdFromTargetPathRequest {
                target_path: MOUNT_PATH.into(),
            },
        )?;
        self.hit("Volume/GetVolumeIDFromTargetPath");
        Ok(Response::new(
            volume_v1::GetVolumeIdFromTargetPathResponse {
                volume_id: VOLUME_ID_2.into(),
            },
        ))
    }
    async fn write_volume_cache(
        &self,
        r: Request<volume_v1::WriteVolumeCacheRequest>,
    ) -> R<volume_v1::WriteVolumeCacheResponse> {
        expect(
            "WriteVolumeCache",
            r.into_inner(),
            volume_v1::WriteVolumeCacheRequest {
                volume_id: VOLUME_ID.into(),
            },
        )?;
        self.hit("Volume/WriteVolumeCache");
        Ok(Response::new(volume_v1::WriteVolumeCacheResponse {}))
    }
}

#[tonic::async_trait]
impl filesystem_v1::filesystem_server::Filesystem for FakeProxy {
    async fn path_exists(
        &self,
        r: Request<filesystem_v1::PathExistsRequest>,
    ) -> R<filesystem_v1::PathExistsResponse> {
        expect(
            "PathExists",
            r.into_inner(),
            filesystem_v1::PathExistsRequest {
                path: POD_PATH.into(),
            },
        )?;
        self.hit("Filesystem/PathExists");
        Ok(Response::new(filesystem_v1::PathExistsResponse {
            exists: true,
        }))
    }
    async fn mkdir(
        &self,
        r: Request<filesystem_v1::MkdirRequest>,
    ) -> R<filesystem_v1::MkdirResponse> {
        expect(
            "Mkdir",
            r.into_inner(),
            filesystem_v1::MkdirRequest {
                path: MOUNT_PATH.into(),
            },
        )?;
        self.hit("Filesystem/Mkdir");
        Ok(Response::new(filesystem_v1::MkdirResponse {}))
    }
    async fn rmdir(
        &self,
        r: Request<filesystem_v1::RmdirRequest>,
    ) -> R<filesystem_v1::RmdirResponse> {
        expect(
            "Rmdir",
            r.into_inner(),
            filesystem_v1::RmdirRequest {
                path: POD_PATH.into(),
                force: true,
            },
        )?;
        self.hit("Filesystem/Rmdir");
        Ok(Response::new(filesystem_v1::RmdirResponse {}))
    }
    async fn create_symlink(
        &self,
        r: Request<filesystem_v1::CreateSymlinkRequest>,
    ) -> R<filesystem_v1::CreateSymlinkResponse> {
        expect(
            "CreateSymlink",
            r.into_inner(),
            filesystem_v1::CreateSymlinkRequest {
                source_path: MOUNT_PATH.into(),
                target_path: POD_PATH.into(),
            },
        )?;
        self.hit("Filesystem/CreateSymlink");
        Ok(Response::new(filesystem_v1::CreateSymlinkResponse {}))
    }
    async fn is_symlink(
        &self,
        r: Request<filesystem_v1::IsSymlinkRequest>,
    ) -> R<filesystem_v1::IsSymlinkResponse> {
        expect(
            "IsSymlink",
            r.into_inner(),
            filesystem_v1::IsSymlinkRequest {
                path: POD_PATH.into(),
            },
        )?;
        self.hit("Filesystem/IsSymlink");
        Ok(Response::new(filesystem_v1::IsSymlinkResponse {
            is_symlink: true,
        }))
    }
}

#[tonic::async_trait]
impl smb_v1::smb_server::Smb for FakeProxy {
    async fn new_smb_global_mapping(
        &self,
        r: Request<smb_v1::NewSmbGlobalMappingRequest>,
    ) -> R<smb_v1::NewSmbGlobalMappingResponse> {
        let r = r.into_inner();
        if r.remote_path == SMB_REMOTE_CONFLICT {
            return Err(Status::unknown(SMB_1219_TEXT));
        }
        expect(
            "NewSmbGlobalMapping",
            r,
            smb_v1::NewSmbGlobalMappingRequest {
                remote_path: SMB_REMOTE.into(),
                local_path: POD_PATH.into(),
                username: SMB_USER.into(),
                password: SMB_PASSWORD.into(),
            },
        )?;
        self.hit("Smb/NewSmbGlobalMapping");
        Ok(Response::new(smb_v1::NewSmbGlobalMappingResponse {}))
    }
    async fn remove_smb_global_mapping(
        &self,
        r: Request<smb_v1::RemoveSmbGlobalMappingRequest>,
    ) -> R<smb_v1::RemoveSmbGlobalMappingResponse> {
        expect(
            "RemoveSmbGlobalMapping",
            r.into_inner(),
            smb_v1::RemoveSmbGlobalMappingRequest {
                remote_path: SMB_REMOTE.into(),
            },
        )?;
        self.hit("Smb/RemoveSmbGlobalMapping");
        Ok(Response::new(smb_v1::RemoveSmbGlobalMappingResponse {}))
    }
}

#[tonic::async_trait]
impl iscsi_v1alpha2::iscsi_server::Iscsi for FakeProxy {
    async fn add_target_portal(
        &self,
        r: Request<iscsi_v1alpha2::AddTargetPortalRequest>,
    ) -> R<iscsi_v1alpha2::AddTargetPortalResponse> {
        expect(
            "AddTargetPortal",
            r.into_inner(),
            iscsi_v1alpha2::AddTargetPortalRequest {
                target_portal: portal(),
            },
        )?;
        self.hit("Iscsi/AddTargetPortal");
        Ok(Response::new(iscsi_v1alpha2::AddTargetPortalResponse {}))
    }
    async fn discover_target_portal(
        &self,
        r: Request<iscsi_v1alpha2::DiscoverTargetPortalRequest>,
    ) -> R<iscsi_v1alpha2::DiscoverTargetPortalResponse> {
        expect(
            "DiscoverTargetPortal",
            r.into_inner(),
            iscsi_v1alpha2::DiscoverTargetPortalRequest {
                target_portal: portal(),
            },
        )?;
        self.hit("Iscsi/DiscoverTargetPortal");
        Ok(Response::new(
            iscsi_v1alpha2::DiscoverTargetPortalResponse {
                iqns: vec![IQN.into(), IQN_2.into()],
            },
        ))
    }
    async fn remove_target_portal(
        &self,
        r: Request<iscsi_v1alpha2::RemoveTargetPortalRequest>,
    ) -> R<iscsi_v1alpha2::RemoveTargetPortalResponse> {
        expect(
            "RemoveTargetPortal",
            r.into_inner(),
            iscsi_v1alpha2::RemoveTargetPortalRequest {
                target_portal: portal(),
            },
        )?;
        self.hit("Iscsi/RemoveTargetPortal");
        Ok(Response::new(iscsi_v1alpha2::RemoveTargetPortalResponse {}))
    }
    async fn list_target_portals(
        &self,
        _: Request<iscsi_v1alpha2::ListTargetPortalsRequest>,
    ) -> R<iscsi_v1alpha2::ListTargetPortalsResponse> {
        self.hit("Iscsi/ListTargetPortals");
        Ok(Response::new(iscsi_v1alpha2::ListTargetPortalsResponse {
            target_portals: vec![
                iscsi_v1alpha2::TargetPortal {
                    target_address: PORTAL_ADDR.into(),
                    target_port: u32::from(PORTAL_PORT),
                },
                iscsi_v1alpha2::TargetPortal {
                    target_address: "fd00::17".into(),
                    target_port: 65535,
                },
            ],
        }))
    }
    async fn connect_target(
        &self,
        r: Request<iscsi_v1alpha2::ConnectTargetRequest>,
    ) -> R<iscsi_v1alpha2::ConnectTargetResponse> {
        expect(
            "ConnectTarget",
            r.into_inner(),
            iscsi_v1alpha2::ConnectTargetRequest {
                target_portal: portal(),
                iqn: IQN.into(),
                auth_type: iscsi_v1alpha2::AuthenticationType::MutualChap as i32,
                chap_username: CHAP_USER.into(),
                chap_secret: CHAP_SECRET.into(),
            },
        )?;
        self.hit("Iscsi/ConnectTarget");
        Ok(Response::new(iscsi_v1alpha2::ConnectTargetResponse {}))
    }
    async fn disconnect_target(
        &self,
        r: Request<iscsi_v1alpha2::DisconnectTargetRequest>,
    ) -> R<iscsi_v1alpha2::DisconnectTargetResponse> {
        expect(
            "DisconnectTarget",
            r.into_inner(),
            iscsi_v1alpha2::DisconnectTargetRequest {
                target_portal: portal(),
                iqn: IQN_2.into(),
            },
        )?;
        self.hit("Iscsi/DisconnectTarget");
        Ok(Response::new(iscsi_v1alpha2::DisconnectTargetResponse {}))
    }
    async fn get_target_disks(
        &self,
        r: Request<iscsi_v1alpha2::GetTargetDisksRequest>,
    ) -> R<iscsi_v1alpha2::GetTargetDisksResponse> {
        expect(
            "GetTargetDisks",
            r.into_inner(),
            iscsi_v1alpha2::GetTargetDisksRequest {
                target_portal: portal(),
                iqn: IQN.into(),
            },
        )?;
        self.hit("Iscsi/GetTargetDisks");
        Ok(Response::new(iscsi_v1alpha2::GetTargetDisksResponse {
            disk_i_ds: vec!["3".into(), DISK_A.to_string()],
        }))
    }
    async fn set_mutual_chap_secret(
        &self,
        r: Request<iscsi_v1alpha2::SetMutualChapSecretRequest>,
    ) -> R<iscsi_v1alpha2::SetMutualChapSecretResponse> {
        expect(
            "SetMutualChapSecret",
            r.into_inner(),
            iscsi_v1alpha2::SetMutualChapSecretRequest {
                mutual_chap_secret: MUTUAL_SECRET.into(),
            },
        )?;
        self.hit("Iscsi/SetMutualChapSecret");
        Ok(Response::new(
            iscsi_v1alpha2::SetMutualChapSecretResponse {},
        ))
    }
}

#[tonic::async_trait]
impl system_v1alpha1::system_server::System for FakeProxy {
    async fn get_bios_serial_number(
        &self,
        _: Request<system_v1alpha1::GetBiosSerialNumberRequest>,
    ) -> R<system_v1alpha1::GetBiosSerialNumberResponse> {
        self.hit("System/GetBIOSSerialNumber");
        Ok(Response::new(
            system_v1alpha1::GetBiosSerialNumberResponse {
                serial_number: BIOS_SERIAL.into(),
            },
        ))
    }
    async fn start_service(
        &self,
        r: Request<system_v1alpha1::StartServiceRequest>,
    ) -> R<system_v1alpha1::StartServiceResponse> {
        expect(
            "StartService",
            r.into_inner(),
            system_v1alpha1::StartServiceRequest {
                name: SERVICE.into(),
            },
        )?;
        self.hit("System/StartService");
        Ok(Response::new(system_v1alpha1::StartServiceResponse {}))
    }
    async fn stop_service(
        &self,
        r: Request<system_v1alpha1::StopServiceRequest>,
    ) -> R<system_v1alpha1::StopServiceResponse> {
        expect(
            "StopService",
            r.into_inner(),
            system_v1alpha1::StopServiceRequest {
                name: SERVICE.into(),
                force: true,
            },
        )?;
        self.hit("System/StopService");
        Ok(Response::new(system_v1alpha1::StopServiceResponse {}))
    }
    async fn get_service(
        &self,
        r: Request<system_v1alpha1::GetServiceRequest>,
    ) -> R<system_v1alpha1::GetServiceResponse> {
        let r = r.into_inner();
        if r.name == HANG_SERVICE {
            // Never answers: the client's deadline must end the call.
            std::future::pending::<()>().await;
        }
        expect(
            "GetService",
            r,
            system_v1alpha1::GetServiceRequest {
                name: SERVICE.into(),
            },
        )?;
        self.hit("System/GetService");
        Ok(Response::new(system_v1alpha1::GetServiceResponse {
            display_name: SERVICE_DISPLAY.into(),
            start_type: system_v1alpha1::StartType::Manual as i32,
            status: system_v1alpha1::ServiceStatus::Running as i32,
        }))
    }
}

fn check<T: PartialEq + Debug, E: Debug>(what: &str, got: Result<T, E>, want: T) {
    match got {
        Ok(got) => assert_eq!(got, want, "{what}: response mismatch"),
        Err(err) => panic!("{what} failed: {err:?}"),
    }
}

/// Calls every RPC of every group through the typed API and checks every response.
pub async fn exercise_all(proxy: &ProxyClient) {
    exercise_disk(proxy).await;
    exercise_volume(proxy).await;
    exercise_filesystem(proxy).await;
    exercise_smb(proxy).await;
    exercise_iscsi(proxy).await;
    exercise_system(proxy).await;
}

pub async fn exercise_disk(proxy: &ProxyClient) {
    let disk = proxy.disk();
    let mut locations = BTreeMap::new();
    locations.insert(
        DISK_A,
        DiskLocation {
            adapter: "3".into(),
            bus: "bus-9".into(),
            target: "11".into(),
            lun_id: "42".into(),
        },
    );
    locations.insert(
        DISK_B,
        DiskLocation {
            adapter: "0".into(),
            bus: String::new(),
            target: "1".into(),
            lun_id: "7".into(),
        },
    );
    check(
        "ListDiskLocations",
        disk.list_disk_locations().await,
        locations,
    );
    check("PartitionDisk", disk.partition(DISK_A).await, ());
    check("Rescan", disk.rescan().await, ());
    let mut ids = BTreeMap::new();
    ids.insert(
        DISK_A,
        DiskIds {
            page83: "60022480a1b2c3d4e5f60718293a4b5c".into(),
            serial_number: "  SER-0042  ".into(),
        },
    );
    check("ListDiskIDs", disk.list_disk_ids().await, ids);
    check("GetDiskStats", disk.stats(DISK_B).await, DISK_SIZE);
    check("SetDiskState", disk.set_online(DISK_A, true).await, ());
    check("GetDiskState", disk.is_online(DISK_B).await, true);
}

pub async fn exercise_volume(proxy: &ProxyClient) {
    let volume = proxy.volume();
    check(
        "ListVolumesOnDisk",
        volume.list_on_disk(DISK_A, 2).await,
        vec![VOLUME_ID.to_owned(), VOLUME_ID_2.to_owned()],
    );
    check("MountVolume", volume.mount(VOLUME_ID, MOUNT_PATH).await, ());
    check(
        "UnmountVolume",
        volume.unmount(VOLUME_ID_2, POD_PATH).await,
        (),
    );
    check(
        "IsVolumeFormatted",
        volume.is_formatted(VOLUME_ID).await,
        true,
    );
    check("FormatVolume", volume.format(VOLUME_ID_2).await, ());
    check(
        "ResizeVolume",
        volume.resize(VOLUME_ID, RESIZE_BYTES).await,
        (),
    );
    check(
        "GetVolumeStats",
        volume.stats(VOLUME_ID).await,
        (VOLUME_TOTAL, VOLUME_USED),
    );
    check(
        "GetDiskNumberFromVolumeID",
        volume.disk_number(VOLUME_ID_2).await,
        DISK_A,
    );
    check(
        "GetVolumeIDFromTargetPath",
        volume.id_from_target_path(MOUNT_PATH).await,
        VOLUME_ID_2.to_owned(),
    );
    check("WriteVolumeCache", volume.write_cache(VOLUME_ID).await, ());
}

pub async fn exercise_filesystem(proxy: &ProxyClient) {
    let fs = proxy.filesystem();
    check("PathExists", fs.path_exists(POD_PATH).await, true);
    check("Mkdir", fs.mkdir(MOUNT_PATH).await, ());
    check("Rmdir", fs.rmdir(POD_PATH, true).await, ());
    check(
        "CreateSymlink",
        fs.create_symlink(MOUNT_PATH, POD_PATH).await,
        (),
    );
    check("IsSymlink", fs.is_symlink(POD_PATH).await, true);
}

pub async fn exercise_smb(proxy: &ProxyClient) {
    let smb = proxy.smb();
    let creds = SmbCredentials::new(SMB_USER, SMB_PASSWORD);
    check(
        "NewSmbGlobalMapping",
        smb.new_global_mapping(SMB_REMOTE, Some(POD_PATH), &creds)
            .await,
        (),
    );
    check(
        "RemoveSmbGlobalMapping",
        smb.remove_global_mapping(SMB_REMOTE).await,
        (),
    );
}

pub async fn exercise_iscsi(proxy: &ProxyClient) {
    let iscsi = proxy.iscsi();
    let portal = Portal::new(PORTAL_ADDR, PORTAL_PORT);
    check(
        "AddTargetPortal",
        iscsi.add_target_portal(&portal).await,
        (),
    );
    check(
        "DiscoverTargetPortal",
        iscsi.discover_target_portal(&portal).await,
        vec![IQN.to_owned(), IQN_2.to_owned()],
    );
    check(
        "RemoveTargetPortal",
        iscsi.remove_target_portal(&portal).await,
        (),
    );
    check(
        "ListTargetPortals",
        iscsi.list_target_portals().await,
        vec![portal.clone(), Portal::new("fd00::17", 65535)],
    );
    let auth = ChapAuth::Mutual {
        username: CHAP_USER.into(),
        secret: Secret::new(CHAP_SECRET),
    };
    check(
        "ConnectTarget",
        iscsi.connect_target(&portal, IQN, &auth).await,
        (),
    );
    check(
        "DisconnectTarget",
        iscsi.disconnect_target(&portal, IQN_2).await,
        (),
    );
    check(
        "GetTargetDisks",
        iscsi.get_target_disks(&portal, IQN).await,
        vec![3, DISK_A],
    );
    check(
        "SetMutualChapSecret",
        iscsi
            .set_mutual_chap_secret(&Secret::new(MUTUAL_SECRET))
            .await,
        (),
    );
}

pub async fn exercise_system(proxy: &ProxyClient) {
    let system = proxy.system();
    check(
        "GetBIOSSerialNumber",
        system.bios_serial().await,
        BIOS_SERIAL.to_owned(),
    );
    check("StartService", system.start_service(SERVICE).await, ());
    check("StopService", system.stop_service(SERVICE, true).await, ());
    check(
        "GetService",
        system.get_service(SERVICE).await,
        ServiceInfo {
            display_name: SERVICE_DISPLAY.into(),
            start_type: StartType::Manual,
            status: ServiceStatus::Running,
        },
    );
}
