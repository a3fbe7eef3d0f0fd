use crate::proto::volume_v1::{self as pb, volume_client::VolumeClient as Raw};
use crate::{ApiGroup, Error, ProxyClient};

/// The volume v1 API (`\\.\pipe\csi-proxy-volume-v1`).
///
/// Volume IDs have the form `\\?\Volume{GUID}\`. Paths are Windows host paths
/// (`c:\var\lib\kubelet\...`); this group does not validate them.
#[derive(Debug, Clone)]
pub struct VolumeClient {
    client: ProxyClient,
}

impl VolumeClient {
    pub(crate) fn new(client: ProxyClient) -> Self {
        VolumeClient { client }
    }

    /// `ListVolumesOnDisk`: the volume IDs on a disk; `partition_number` 0 means all partitions.
    ///
    /// Empty IDs are dropped (csi-proxy ≤ v1.2.1 returns `[""]` for a disk without volumes).
    pub async fn list_on_disk(
        &self,
        disk_number: u32,
        partition_number: u32,
    ) -> Result<Vec<String>, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Volume,
                "ListVolumesOnDisk",
                pb::ListVolumesOnDiskRequest {
                    disk_number,
                    partition_number,
                },
                |ch, req| async move { Raw::new(ch).list_volumes_on_disk(req).await },
            )
            .await?;
        Ok(response
            .volume_ids
            .into_iter()
            .filter(|id| !id.trim().is_empty())
            .collect())
    }

    /// `MountVolume`: mounts the volume at `target_path`, an existing empty directory.
    pub async fn mount(&self, volume_id: &str, target_path: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Volume,
                "MountVolume",
                pb::MountVolumeRequest {
                    volume_id: volume_id.to_owned(),
                    target_path: target_path.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).mount_volume(req).await },
            )
            .await?;
        Ok(())
    }

    /// `UnmountVolume`: flushes the volume and removes its mount point at `target_path`.
    /// Fails if nothing is mounted there; does not delete the directory.
    pub async fn unmount(&self, volume_id: &str, target_path: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Volume,
                "UnmountVolume",
                pb::UnmountVolumeRequest {
                    volume_id: volume_id.to_owned(),
                    target_path: target_path.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).unmount_volume(req).await },
            )
            .await?;
        Ok(())
    }

    /// `IsVolumeFormatted`: whether the volume has a known file system.
    pub async fn is_formatted(&self, volume_id: &str) -> Result<bool, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Volume,
                "IsVolumeFormatted",
                pb::IsVolumeFormattedRequest {
                    volume_id: volume_id.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).is_volume_formatted(req).await },
            )
            .await?;
        Ok(response.formatted)
    }

    /// `FormatVolume`: quick-formats the volume as NTFS. **Unconditional**: check
    /// [`VolumeClient::is_formatted`] first.
    pub async fn format(&self, volume_id: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Volume,
                "FormatVolume",
                pb::FormatVolumeRequest {
                    volume_id: volume_id.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).format_volume(req).await },
            )
            .await?;
        Ok(())
    }

    /// `ResizeVolume`: grows the volume's partition to `size_bytes` (0 = the maximum supported
    /// size). csi-proxy never shrinks and skips growth below 100 MiB.
    pub async fn resize(&self, volume_id: &str, size_bytes: u64) -> Result<(), Error> {
        const METHOD: &str = "ResizeVolume";
        let size_bytes = i64::try_from(size_bytes).map_err(|_| Error::InvalidArgument {
            method: METHOD,
            message: format!("size_bytes {size_bytes} exceeds i64::MAX"),
        })?;
        self.client
            .unary(
                ApiGroup::Volume,
                METHOD,
                pb::ResizeVolumeRequest {
                    volume_id: volume_id.to_owned(),
                    size_bytes,
                },
                |ch, req| async move { Raw::new(ch).resize_volume(req).await },
            )
            .await?;
        Ok(())
    }

    /// `GetVolumeStats`: `(total_bytes, used_bytes)` of the volume.
    pub async fn stats(&self, volume_id: &str) -> Result<(u64, u64), Error> {
        const METHOD: &str = "GetVolumeStats";
        let response = self
            .client
            .unary(
                ApiGroup::Volume,
                METHOD,
                pb::GetVolumeStatsRequest {
                    volume_id: volume_id.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).get_volume_stats(req).await },
            )
            .await?;
        Ok((
            super::non_negative(METHOD, "total_bytes", response.total_bytes)?,
            super::non_negative(METHOD, "used_bytes", response.used_bytes)?,
        ))
    }

    /// `GetDiskNumberFromVolumeID`: the disk holding the volume.
    pub async fn disk_number(&self, volume_id: &str) -> Result<u32, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Volume,
                "GetDiskNumberFromVolumeID",
                pb::GetDiskNumberFromVolumeIdRequest {
                    volume_id: volume_id.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).get_disk_number_from_volume_id(req).await },
            )
            .await?;
        Ok(response.disk_number)
    }

    /// `GetVolumeIDFromTargetPath`: the volume mounted at `target_path` (must be a mounted
    /// folder).
    pub async fn id_from_target_path(&self, target_path: &str) -> Result<String, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Volume,
                "GetVolumeIDFromTargetPath",
                pb::GetVolumeIdFromTargetPathRequest {
                    target_path: target_path.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).get_volume_id_from_target_path(req).await },
            )
            .await?;
        Ok(response.volume_id)
    }

    /// `WriteVolumeCache`: flushes the volume's write cache.
    pub async fn write_cache(&self, volume_id: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Volume,
                "WriteVolumeCache",
                pb::WriteVolumeCacheRequest {
                    volume_id: volume_id.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).write_volume_cache(req).await },
            )
            .await?;
        Ok(())
    }
}
