use std::collections::BTreeMap;

use crate::proto::disk_v1::{self as pb, disk_client::DiskClient as Raw};
use crate::{ApiGroup, Error, ProxyClient};

/// Where a disk sits on its storage adapter, as csi-proxy reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct DiskLocation {
    /// Adapter number (text), e.g. `"0"`.
    pub adapter: String,
    /// Bus; csi-proxy never fills this in (always empty).
    pub bus: String,
    /// Target number (text).
    pub target: String,
    /// LUN number (text).
    pub lun_id: String,
}

/// The identifiers of one disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct DiskIds {
    /// SCSI page 83 identifier: lower-case hex for binary identifiers, raw text for ASCII ones.
    pub page83: String,
    /// Serial number; may be empty or space-padded.
    pub serial_number: String,
}

/// The disk v1 API (`\\.\pipe\csi-proxy-disk-v1`). Disks are identified by their number.
#[derive(Debug, Clone)]
pub struct DiskClient {
    client: ProxyClient,
}

impl DiskClient {
    pub(crate) fn new(client: ProxyClient) -> Self {
        DiskClient { client }
    }

    /// `ListDiskLocations`: disk number → location, for disks whose location the host could
    /// parse.
    pub async fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Disk,
                "ListDiskLocations",
                pb::ListDiskLocationsRequest {},
                |ch, req| async move { Raw::new(ch).list_disk_locations(req).await },
            )
            .await?;
        Ok(response
            .disk_locations
            .into_iter()
            .map(|(number, l)| {
                let location = DiskLocation {
                    adapter: l.adapter,
                    bus: l.bus,
                    target: l.target,
                    lun_id: l.lunid,
                };
                (number, location)
            })
            .collect())
    }

    /// `ListDiskIDs`: disk number → identifiers. Fails as a whole if any disk cannot be opened.
    pub async fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Disk,
                "ListDiskIDs",
                pb::ListDiskIDsRequest {},
                |ch, req| async move { Raw::new(ch).list_disk_i_ds(req).await },
            )
            .await?;
        Ok(response
            .disk_i_ds
            .into_iter()
            .map(|(number, ids)| {
                let ids = DiskIds {
                    page83: ids.page83,
                    serial_number: ids.serial_number,
                };
                (number, ids)
            })
            .collect())
    }

    /// `PartitionDisk`: initialises a raw disk as GPT with one basic-data partition; a no-op for
    /// a disk that is already partitioned.
    pub async fn partition(&self, disk_number: u32) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Disk,
                "PartitionDisk",
                pb::PartitionDiskRequest { disk_number },
                |ch, req| async move { Raw::new(ch).partition_disk(req).await },
            )
            .await?;
        Ok(())
    }

    /// `Rescan`: refreshes the host's storage cache (after attaching a LUN).
    pub async fn rescan(&self) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Disk,
                "Rescan",
                pb::RescanRequest {},
                |ch, req| async move { Raw::new(ch).rescan(req).await },
            )
            .await?;
        Ok(())
    }

    /// `GetDiskStats`: the size of the disk in bytes.
    pub async fn stats(&self, disk_number: u32) -> Result<u64, Error> {
        const METHOD: &str = "GetDiskStats";
        let response = self
            .client
            .unary(
                ApiGroup::Disk,
                METHOD,
                pb::GetDiskStatsRequest { disk_number },
                |ch, req| async move { Raw::new(ch).get_disk_stats(req).await },
            )
            .await?;
        super::non_negative(METHOD, "total_bytes", response.total_bytes)
    }

    /// `SetDiskState`: brings the disk online (`true`) or offline (`false`).
    pub async fn set_online(&self, disk_number: u32, online: bool) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Disk,
                "SetDiskState",
                pb::SetDiskStateRequest {
                    disk_number,
                    is_online: online,
                },
                |ch, req| async move { Raw::new(ch).set_disk_state(req).await },
            )
            .await?;
        Ok(())
    }

    /// `GetDiskState`: whether the disk is online.
    pub async fn is_online(&self, disk_number: u32) -> Result<bool, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Disk,
                "GetDiskState",
                pb::GetDiskStateRequest { disk_number },
                |ch, req| async move { Raw::new(ch).get_disk_state(req).await },
            )
            .await?;
        Ok(response.is_online)
    }
}
