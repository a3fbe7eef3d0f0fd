//! The six csi-proxy gRPC services, backed by a [`SimHost`].
//!
//! Each handler converts its request into a [`crate::state::State`] call through [`SimHost::call_detached`]
//! (which audits it, applies injected faults, and — like csi-proxy, which ignores the request context — finishes
//! the host work even if the client goes away) and maps every failure to status `UNKNOWN` with the host's message,
//! exactly as csi-proxy does. Audit arguments never contain secrets.

use proxy_client::proto::{
    disk_v1, filesystem_v1, iscsi_v1alpha2, smb_v1, system_v1alpha1, volume_v1,
};
use serde_json::json;
use tonic::{Request, Response, Status};

use crate::error::Error;
use crate::host::SimHost;
use crate::scenario::{ServiceStatus, StartType};
use crate::secret::{REDACTED, Secret};
use crate::state::AuthType;

type Res<T> = Result<Response<T>, Status>;

fn status(e: Error) -> Status {
    Status::unknown(e.to_string())
}

fn ok<T>(r: crate::Result<T>) -> Res<T> {
    r.map(Response::new).map_err(status)
}

fn redact(s: &str) -> &str {
    if s.is_empty() { "" } else { REDACTED }
}

/// `v1.Disk`.
#[derive(Debug, Clone)]
pub struct DiskService(pub SimHost);
/// `v1.Volume`.
#[derive(Debug, Clone)]
pub struct VolumeService(pub SimHost);
/// `v1.Filesystem`.
#[derive(Debug, Clone)]
pub struct FilesystemService(pub SimHost);
/// `v1.Smb`.
#[derive(Debug, Clone)]
pub struct SmbService(pub SimHost);
/// `v1alpha2.Iscsi`.
#[derive(Debug, Clone)]
pub struct IscsiService(pub SimHost);
/// `v1alpha1.System`.
#[derive(Debug, Clone)]
pub struct SystemService(pub SimHost);

#[tonic::async_trait]
impl disk_v1::disk_server::Disk for DiskService {
    async fn list_disk_locations(
        &self,
        _: Request<disk_v1::ListDiskLocationsRequest>,
    ) -> Res<disk_v1::ListDiskLocationsResponse> {
        let r = self
            .0
            .call_detached("ListDiskLocations", json!({}), move |s| {
                Ok(s.list_disk_locations())
            })
            .await;
        ok(r.map(|m| disk_v1::ListDiskLocationsResponse {
            disk_locations: m
                .into_iter()
                .map(|(n, l)| {
                    let loc = disk_v1::DiskLocation {
                        adapter: l.adapter,
                        bus: l.bus,
                        target: l.target,
                        lunid: l.lun_id,
                    };
                    (n, loc)
                })
                .collect(),
        }))
    }

    async fn partition_disk(
        &self,
        req: Request<disk_v1::PartitionDiskRequest>,
    ) -> Res<disk_v1::PartitionDiskResponse> {
        let n = req.into_inner().disk_number;
        let r = self
            .0
            .call_detached("PartitionDisk", json!({ "disk_number": n }), move |s| {
                s.partition_disk(n)
            })
            .await;
        ok(r.map(|()| disk_v1::PartitionDiskResponse {}))
    }

    async fn rescan(&self, _: Request<disk_v1::RescanRequest>) -> Res<disk_v1::RescanResponse> {
        let r = self
            .0
            .call_detached("Rescan", json!({}), move |s| s.rescan())
            .await;
        ok(r.map(|()| disk_v1::RescanResponse {}))
    }

    async fn list_disk_i_ds(
        &self,
        _: Request<disk_v1::ListDiskIDsRequest>,
    ) -> Res<disk_v1::ListDiskIDsResponse> {
        let r = self
            .0
            .call_detached("ListDiskIDs", json!({}), move |s| s.list_disk_ids())
            .await;
        ok(r.map(|m| disk_v1::ListDiskIDsResponse {
            disk_i_ds: m
                .into_iter()
                .map(|(n, (page83, serial_number))| {
                    (
                        n,
                        disk_v1::DiskIDs {
                            page83,
                            serial_number,
                        },
                    )
                })
                .collect(),
        }))
    }

    async fn get_disk_stats(
        &self,
        req: Request<disk_v1::GetDiskStatsRequest>,
    ) -> Res<disk_v1::GetDiskStatsResponse> {
        let n = req.into_inner().disk_number;
        let r = self
            .0
            .call_detached("GetDiskStats", json!({ "disk_number": n }), move |s| {
                s.get_disk_stats(n)
            })
            .await;
        ok(r.map(|total_bytes| disk_v1::GetDiskStatsResponse { total_bytes }))
    }

    async fn set_disk_state(
        &self,
        req: Request<disk_v1::SetDiskStateRequest>,
    ) -> Res<disk_v1::SetDiskStateResponse> {
        let q = req.into_inner();
        let args = json!({ "disk_number": q.disk_number, "is_online": q.is_online });
        let r = self
            .0
            .call_detached("SetDiskState", args, move |s| {
                s.set_disk_state(q.disk_number, q.is_online)
            })
            .await;
        ok(r.map(|()| disk_v1::SetDiskStateResponse {}))
    }

    async fn get_disk_state(
        &self,
        req: Request<disk_v1::GetDiskStateRequest>,
    ) -> Res<disk_v1::GetDiskStateResponse> {
        let n = req.into_inner().disk_number;
        let r = self
            .0
            .call_detached("GetDiskState", json!({ "disk_number": n }), move |s| {
                s.get_disk_state(n)
            })
            .await;
        ok(r.map(|is_online| disk_v1::GetDiskStateResponse { is_online }))
    }
}

#[tonic::async_trait]
impl volume_v1::volume_server::Volume for VolumeService {
    async fn list_volumes_on_disk(
        &self,
        req: Request<volume_v1::ListVolumesOnDiskRequest>,
    ) -> Res<volume_v1::ListVolumesOnDiskResponse> {
        let q = req.into_inner();
        let args = json!({ "disk_number": q.disk_number, "partition_number": q.partition_number });
        let r = self
            .0
            .call_detached("ListVolumesOnDisk", args, move |s| {
                s.list_volumes_on_disk(q.disk_number, q.partition_number)
            })
            .await;
        ok(r.map(|volume_ids| volume_v1::ListVolumesOnDiskResponse { volume_ids }))
    }

    async fn mount_volume(
        &self,
        req: Request<volume_v1::MountVolumeRequest>,
    ) -> Res<volume_v1::MountVolumeResponse> {
        let q = req.into_inner();
        let args = json!({ "volume_id": q.volume_id, "target_path": q.target_path });
        let r = self
            .0
            .call_detached("MountVolume", args, move |s| {
                s.mount_volume(&q.volume_id, &q.target_path)
            })
            .await;
        ok(r.map(|()| volume_v1::MountVolumeResponse {}))
    }

    async fn unmount_volume(
        &self,
        req: Request<volume_v1::UnmountVolumeRequest>,
    ) -> Res<volume_v1::UnmountVolumeResponse> {
        let q = req.into_inner();
        let args = json!({ "volume_id": q.volume_id, "target_path": q.target_path });
        let r = self
            .0
            .call_detached("UnmountVolume", args, move |s| {
                s.unmount_volume(&q.volume_id, &q.target_path)
            })
            .await;
        ok(r.map(|()| volume_v1::UnmountVolumeResponse {}))
    }

    async fn is_volume_formatted(
        &self,
        req: Request<volume_v1::IsVolumeFormattedRequest>,
    ) -> Res<volume_v1::IsVolumeFormattedResponse> {
        let id = req.into_inner().volume_id;
        let r = self
            .0
            .call_detached("IsVolumeFormatted", json!({ "volume_id": id }), move |s| {
                s.is_volume_formatted(&id)
            })
            .await;
        ok(r.map(|formatted| volume_v1::IsVolumeFormattedResponse { formatted }))
    }

    async fn format_volume(
        &self,
        req: Request<volume_v1::FormatVolumeRequest>,
    ) -> Res<volume_v1::FormatVolumeResponse> {
        let id = req.into_inner().volume_id;
        let r = self
            .0
            .call_detached("FormatVolume", json!({ "volume_id": id }), move |s| {
                s.format_volume(&id)
            })
            .await;
        ok(r.map(|()| volume_v1::FormatVolumeResponse {}))
    }

    async fn resize_volume(
        &self,
        req: Request<volume_v1::ResizeVolumeRequest>,
    ) -> Res<volume_v1::ResizeVolumeResponse> {
        let q = req.into_inner();
        let args = json!({ "volume_id": q.volume_id, "size_bytes": q.size_bytes });
        let r = self
            .0
            .call_detached("ResizeVolume", args, move |s| {
                s.resize_volume(&q.volume_id, q.size_bytes)
            })
            .await;
        ok(r.map(|()| volume_v1::ResizeVolumeResponse {}))
    }

    async fn get_volume_stats(
        &self,
        req: Request<volume_v1::GetVolumeStatsRequest>,
    ) -> Res<volume_v1::GetVolumeStatsResponse> {
        let id = req.into_inner().volume_id;
        let r = self
            .0
            .call_detached("GetVolumeStats", json!({ "volume_id": id }), move |s| {
                s.get_volume_stats(&id)
            })
            .await;
        ok(r.map(
            |(total_bytes, used_bytes)| volume_v1::GetVolumeStatsResponse {
                total_bytes,
                used_bytes,
            },
        ))
    }

    async fn get_disk_number_from_volume_id(
        &self,
        req: Request<volume_v1::GetDiskNumberFromVolumeIdRequest>,
    ) -> Res<volume_v1::GetDiskNumberFromVolumeIdResponse> {
        let id = req.into_inner().volume_id;
        let r = self
            .0
            .call_detached(
                "GetDiskNumberFromVolumeID",
                json!({ "volume_id": id }),
                move |s| s.get_disk_number_from_volume_id(&id),
            )
            .await;
        ok(r.map(|disk_number| volume_v1::GetDiskNumberFromVolumeIdResponse { disk_number }))
    }

    async fn get_volume_id_from_target_path(
        &self,
        req: Request<volume_v1::GetVolumeIdFromTargetPathRequest>,
    ) -> Res<volume_v1::GetVolumeIdFromTargetPathResponse> {
        let p = req.into_inner().target_path;
        let r = self
            .0
            .call_detached(
                "GetVolumeIDFromTargetPath",
                json!({ "target_path": p }),
                move |s| s.get_volume_id_from_target_path(&p),
            )
            .await;
        ok(r.map(|volume_id| volume_v1::GetVolumeIdFromTargetPathResponse { volume_id }))
    }

    async fn write_volume_cache(
        &self,
        req: Request<volume_v1::WriteVolumeCacheRequest>,
    ) -> Res<volume_v1::WriteVolumeCacheResponse> {
        let id = req.into_inner().volume_id;
        let r = self
            .0
            .call_detached("WriteVolumeCache", json!({ "volume_id": id }), move |s| {
                s.write_volume_cache(&id)
            })
            .await;
        ok(r.map(|()| volume_v1::WriteVolumeCacheResponse {}))
    }
}

#[tonic::async_trait]
impl filesystem_v1::filesystem_server::Filesystem for FilesystemService {
    async fn path_exists(
        &self,
        req: Request<filesystem_v1::PathExistsRequest>,
    ) -> Res<filesystem_v1::PathExistsResponse> {
        let p = req.into_inner().path;
        let r = self
            .0
            .call_detached("PathExists", json!({ "path": p }), move |s| {
                s.path_exists(&p)
            })
            .await;
        ok(r.map(|exists| filesystem_v1::PathExistsResponse { exists }))
    }

    async fn mkdir(
        &self,
        req: Request<filesystem_v1::MkdirRequest>,
    ) -> Res<filesystem_v1::MkdirResponse> {
        let p = req.into_inner().path;
        let r = self
            .0
            .call_detached("Mkdir", json!({ "path": p }), move |s| s.mkdir(&p))
            .await;
        ok(r.map(|()| filesystem_v1::MkdirResponse {}))
    }

    async fn rmdir(
        &self,
        req: Request<filesystem_v1::RmdirRequest>,
    ) -> Res<filesystem_v1::RmdirResponse> {
        let q = req.into_inner();
        let args = json!({ "path": q.path, "force": q.force });
        let r = self
            .0
            .call_detached("Rmdir", args, move |s| s.rmdir(&q.path, q.force))
            .await;
        ok(r.map(|()| filesystem_v1::RmdirResponse {}))
    }

    async fn create_symlink(
        &self,
        req: Request<filesystem_v1::CreateSymlinkRequest>,
    ) -> Res<filesystem_v1::CreateSymlinkResponse> {
        let q = req.into_inner();
        let args = json!({ "source_path": q.source_path, "target_path": q.target_path });
        let r = self
            .0
            .call_detached("CreateSymlink", args, move |s| {
                s.create_symlink(&q.source_path, &q.target_path)
            })
            .await;
        ok(r.map(|()| filesystem_v1::CreateSymlinkResponse {}))
    }

    async fn is_symlink(
        &self,
        req: Request<filesystem_v1::IsSymlinkRequest>,
    ) -> Res<filesystem_v1::IsSymlinkResponse> {
        let p = req.into_inner().path;
        let r = self
            .0
            .call_detached("IsSymlink", json!({ "path": p }), move |s| s.is_symlink(&p))
            .await;
        ok(r.map(|is_symlink| filesystem_v1::IsSymlinkResponse { is_symlink }))
    }
}

#[tonic::async_trait]
impl smb_v1::smb_server::Smb for SmbService {
    async fn new_smb_global_mapping(
        &self,
        req: Request<smb_v1::NewSmbGlobalMappingRequest>,
    ) -> Res<smb_v1::NewSmbGlobalMappingResponse> {
        let q = req.into_inner();
        let password = Secret::new(q.password);
        let args = json!({
            "remote_path": q.remote_path,
            "local_path": q.local_path,
            "username": q.username,
            "password": redact(password.expose()),
        });
        let r = self
            .0
            .call_detached("NewSmbGlobalMapping", args, move |s| {
                s.new_smb_global_mapping(&q.remote_path, &q.local_path, &q.username, &password)
            })
            .await;
        ok(r.map(|()| smb_v1::NewSmbGlobalMappingResponse {}))
    }

    async fn remove_smb_global_mapping(
        &self,
        req: Request<smb_v1::RemoveSmbGlobalMappingRequest>,
    ) -> Res<smb_v1::RemoveSmbGlobalMappingResponse> {
        let p = req.into_inner().remote_path;
        let r = self
            .0
            .call_detached(
                "RemoveSmbGlobalMapping",
                json!({ "remote_path": p }),
                move |s| s.remove_smb_global_mapping(&p),
            )
            .await;
        ok(r.map(|()| smb_v1::RemoveSmbGlobalMappingResponse {}))
    }
}

/// The real server dereferences `target_portal` without a check (`pkg/server/iscsi/server.go:46,71-73,94`, every
/// release) and grpc-go does not recover the panic: a missing one kills csi-proxy, and with it every pipe.
fn portal(
    host: &SimHost,
    p: Option<iscsi_v1alpha2::TargetPortal>,
) -> Result<(String, u32), Status> {
    p.map(|p| (p.target_address, p.target_port)).ok_or_else(|| {
        host.crash_csi_proxy(crate::profile::texts::NIL_DEREF);
        Status::unknown(crate::profile::texts::NIL_DEREF)
    })
}

fn portal_json(addr: &str, port: u32) -> serde_json::Value {
    json!({ "target_address": addr, "target_port": port })
}

#[tonic::async_trait]
impl iscsi_v1alpha2::iscsi_server::Iscsi for IscsiService {
    async fn add_target_portal(
        &self,
        req: Request<iscsi_v1alpha2::AddTargetPortalRequest>,
    ) -> Res<iscsi_v1alpha2::AddTargetPortalResponse> {
        let (a, p) = portal(&self.0, req.into_inner().target_portal)?;
        let args = json!({ "target_portal": portal_json(&a, p) });
        let r = self
            .0
            .call_detached("AddTargetPortal", args, move |s| s.add_target_portal(&a, p))
            .await;
        ok(r.map(|()| iscsi_v1alpha2::AddTargetPortalResponse {}))
    }

    async fn discover_target_portal(
        &self,
        req: Request<iscsi_v1alpha2::DiscoverTargetPortalRequest>,
    ) -> Res<iscsi_v1alpha2::DiscoverTargetPortalResponse> {
        let (a, p) = portal(&self.0, req.into_inner().target_portal)?;
        let args = json!({ "target_portal": portal_json(&a, p) });
        let r = self
            .0
            .call_detached("DiscoverTargetPortal", args, move |s| {
                s.discover_target_portal(&a, p)
            })
            .await;
        ok(r.map(|iqns| iscsi_v1alpha2::DiscoverTargetPortalResponse { iqns }))
    }

    async fn remove_target_portal(
        &self,
        req: Request<iscsi_v1alpha2::RemoveTargetPortalRequest>,
    ) -> Res<iscsi_v1alpha2::RemoveTargetPortalResponse> {
        let (a, p) = portal(&self.0, req.into_inner().target_portal)?;
        let args = json!({ "target_portal": portal_json(&a, p) });
        let r = self
            .0
            .call_detached("RemoveTargetPortal", args, move |s| {
                s.remove_target_portal(&a, p)
            })
            .await;
        ok(r.map(|()| iscsi_v1alpha2::RemoveTargetPortalResponse {}))
    }

    async fn list_target_portals(
        &self,
        _: Request<iscsi_v1alpha2::ListTargetPortalsRequest>,
    ) -> Res<iscsi_v1alpha2::ListTargetPortalsResponse> {
        let r = self
            .0
            .call_detached("ListTargetPortals", json!({}), move |s| {
                Ok(s.list_target_portals())
            })
            .await;
        ok(r.map(|v| iscsi_v1alpha2::ListTargetPortalsResponse {
            target_portals: v
                .into_iter()
                .map(
                    |(target_address, target_port)| iscsi_v1alpha2::TargetPortal {
                        target_address,
                        target_port,
                    },
                )
                .collect(),
        }))
    }

    async fn connect_target(
        &self,
        req: Request<iscsi_v1alpha2::ConnectTargetRequest>,
    ) -> Res<iscsi_v1alpha2::ConnectTargetResponse> {
        let q = req.into_inner();
        let (a, p) = portal(&self.0, q.target_portal)?;
        let secret = Secret::new(q.chap_secret);
        let args = json!({
            "target_portal": portal_json(&a, p),
            "iqn": q.iqn,
            "auth_type": q.auth_type,
            "chap_username": q.chap_username,
            "chap_secret": redact(secret.expose()),
        });
        let auth = match q.auth_type {
            0 => Some(AuthType::None),
            1 => Some(AuthType::OneWayChap),
            2 => Some(AuthType::MutualChap),
            _ => None,
        };
        let r = self
            .0
            .call_detached("ConnectTarget", args, move |s| match auth {
                Some(auth) => s.connect_target(&a, p, &q.iqn, auth, &q.chap_username, &secret),
                None => Err(Error::host("error connecting to target portal. result: 87, err: The parameter is incorrect.")),
            })
            .await;
        ok(r.map(|()| iscsi_v1alpha2::ConnectTargetResponse {}))
    }

    async fn disconnect_target(
        &self,
        req: Request<iscsi_v1alpha2::DisconnectTargetRequest>,
    ) -> Res<iscsi_v1alpha2::DisconnectTargetResponse> {
        let q = req.into_inner();
        let (a, p) = portal(&self.0, q.target_portal)?;
        let args = json!({ "target_portal": portal_json(&a, p), "iqn": q.iqn });
        let r = self
            .0
            .call_detached("DisconnectTarget", args, move |s| {
                s.disconnect_target(&a, p, &q.iqn)
            })
            .await;
        ok(r.map(|()| iscsi_v1alpha2::DisconnectTargetResponse {}))
    }

    async fn get_target_disks(
        &self,
        req: Request<iscsi_v1alpha2::GetTargetDisksRequest>,
    ) -> Res<iscsi_v1alpha2::GetTargetDisksResponse> {
        let q = req.into_inner();
        let (a, p) = portal(&self.0, q.target_portal)?;
        let args = json!({ "target_portal": portal_json(&a, p), "iqn": q.iqn });
        let r = self
            .0
            .call_detached("GetTargetDisks", args, move |s| {
                s.get_target_disks(&a, p, &q.iqn)
            })
            .await;
        ok(r.map(|disk_i_ds| iscsi_v1alpha2::GetTargetDisksResponse { disk_i_ds }))
    }

    async fn set_mutual_chap_secret(
        &self,
        req: Request<iscsi_v1alpha2::SetMutualChapSecretRequest>,
    ) -> Res<iscsi_v1alpha2::SetMutualChapSecretResponse> {
        let secret = Secret::new(req.into_inner().mutual_chap_secret);
        let args = json!({ "mutual_chap_secret": redact(secret.expose()) });
        let r = self
            .0
            .call_detached("SetMutualChapSecret", args, move |s| {
                s.set_mutual_chap_secret(&secret)
            })
            .await;
        ok(r.map(|()| iscsi_v1alpha2::SetMutualChapSecretResponse {}))
    }
}

fn start_type_number(t: StartType) -> i32 {
    match t {
        StartType::Boot => 0,
        StartType::System => 1,
        StartType::Automatic => 2,
        StartType::Manual => 3,
        StartType::Disabled => 4,
    }
}

fn status_number(s: ServiceStatus) -> i32 {
    match s {
        ServiceStatus::Unknown => 0,
        ServiceStatus::Stopped => 1,
        ServiceStatus::StartPending => 2,
        ServiceStatus::StopPending => 3,
        ServiceStatus::Running => 4,
        ServiceStatus::ContinuePending => 5,
        ServiceStatus::PausePending => 6,
        ServiceStatus::Paused => 7,
    }
}

#[tonic::async_trait]
impl system_v1alpha1::system_server::System for SystemService {
    async fn get_bios_serial_number(
        &self,
        _: Request<system_v1alpha1::GetBiosSerialNumberRequest>,
    ) -> Res<system_v1alpha1::GetBiosSerialNumberResponse> {
        let r = self
            .0
            .call_detached("GetBIOSSerialNumber", json!({}), move |s| {
                Ok(s.bios_serial_number())
            })
            .await;
        ok(r.map(|serial_number| system_v1alpha1::GetBiosSerialNumberResponse { serial_number }))
    }

    async fn start_service(
        &self,
        req: Request<system_v1alpha1::StartServiceRequest>,
    ) -> Res<system_v1alpha1::StartServiceResponse> {
        let name = req.into_inner().name;
        let r = self
            .0
            .call_detached("StartService", json!({ "name": name }), move |s| {
                s.start_service(&name)
            })
            .await;
        ok(r.map(|()| system_v1alpha1::StartServiceResponse {}))
    }

    async fn stop_service(
        &self,
        req: Request<system_v1alpha1::StopServiceRequest>,
    ) -> Res<system_v1alpha1::StopServiceResponse> {
        let q = req.into_inner();
        let args = json!({ "name": q.name, "force": q.force });
        let r = self
            .0
            .call_detached("StopService", args, move |s| {
                s.stop_service(&q.name, q.force)
            })
            .await;
        ok(r.map(|()| system_v1alpha1::StopServiceResponse {}))
    }

    async fn get_service(
        &self,
        req: Request<system_v1alpha1::GetServiceRequest>,
    ) -> Res<system_v1alpha1::GetServiceResponse> {
        let name = req.into_inner().name;
        let r = self
            .0
            .call_detached("GetService", json!({ "name": name }), move |s| {
                s.get_service(&name)
            })
            .await;
        ok(r.map(|svc| system_v1alpha1::GetServiceResponse {
            display_name: svc.display_name,
            start_type: start_type_number(svc.start_type),
            status: status_number(svc.status),
        }))
    }
}
