//! `ROOT\Microsoft\Windows\Storage` disks, partitions, volumes and settings over the host model.
//!
//! Visibility follows the model's arrival: a LUN's disk is in `MSFT_Disk` once it arrived, its partitions in
//! `MSFT_Partition` once the partition cache caught up, its volumes in `MSFT_Volume` once visible (disk online) —
//! exactly what the csi-proxy view lists. `MSFT_Disk.Refresh` and `MSFT_StorageSetting.UpdateHostStorageCache`
//! complete the pending arrivals (reference §3 "How to wait for arrival", steps 2-3).
//!
//! Every `ReturnValue` answered here is one Microsoft's page documents for the method
//! ([`winhost::codes::StorageMethod::documented_codes`]; a test checks it); the `ExtendedStatus` carries the reason
//! in words.

use std::time::Duration;

use serde_json::json;
use winhost::codes::{NewDiskPolicy, PartitionStyle as WmiStyle, StorageReturn};
use winhost::facade::StorageOutcome;
use winhost::model::{
    CreatePartition, DiskAttributes, FormatVolume, GptType, MsftDisk, MsftMsdsmSupportedHw,
    MsftPartition, MsftStorageSetting, MsftVolume, SupportedSize,
};
use winhost::{CallContext, CallResult, ExtendedStatus, MethodOutcome, ObjectPath, StorageWmi};

use super::objects::{disk_of, msft_disk, msft_partition, msft_volume, partition_of, volume_of};
use super::{WindowsView, bad_path, not_found};
use crate::scenario::{PartitionKind, PartitionStyle, SanPolicy};
use crate::state::arrival::{complete, due};
use crate::state::disk::{MIB, MSR_SIZE};
use crate::state::{Partition, State, Volume, dir_usage, wipe_dir};

/// `Resize` refuses growth below one extent (csi-proxy#195: "The size of the extent is less than the minimum of
/// 1MB").
const MIN_EXTENT: u64 = MIB;

fn outcome<T>(
    method: &'static str,
    code: StorageReturn,
    why: Option<&str>,
    output: T,
) -> StorageOutcome<T> {
    let status = why.map(|m| ExtendedStatus {
        message: Some(m.to_owned()),
        message_id: Some(format!("StorageWMI {}", code.code())),
        ..ExtendedStatus::default()
    });
    MethodOutcome::new(method, code, status, output)
}

fn ok<T>(method: &'static str, output: T) -> StorageOutcome<T> {
    outcome(method, StorageReturn::Success, None, output)
}

fn fail<T: Default>(method: &'static str, code: StorageReturn) -> StorageOutcome<T> {
    outcome(method, code, code.meaning(), T::default())
}

fn disk_index(st: &State, call: &'static str, path: &ObjectPath) -> CallResult<usize> {
    disk_of(st, path)
        .ok_or_else(|| bad_path(call))?
        .ok_or_else(|| not_found(call))
}

impl StorageWmi for WindowsView {
    /// Every disk that has arrived (a LUN's disk while its arrival delay runs is absent, as from the storage cache).
    fn disks(&self, ctx: &CallContext, number: Option<u32>) -> CallResult<Vec<MsftDisk>> {
        self.call(ctx, "SELECT MSFT_Disk", json!({ "number": number }), |st| {
            Ok(st
                .disks
                .iter()
                .filter(|d| d.present() && number.is_none_or(|n| d.number == Some(n)))
                .map(msft_disk)
                .collect())
        })
    }

    /// The partitions of disks whose layout is visible.
    fn partitions(
        &self,
        ctx: &CallContext,
        disk_number: Option<u32>,
    ) -> CallResult<Vec<MsftPartition>> {
        self.call(
            ctx,
            "SELECT MSFT_Partition",
            json!({ "disk_number": disk_number }),
            |st| {
                Ok(st
                    .disks
                    .iter()
                    .filter(|d| {
                        d.layout_visible() && disk_number.is_none_or(|n| d.number == Some(n))
                    })
                    .flat_map(|d| (0..d.partitions.len()).map(move |pi| msft_partition(d, pi)))
                    .collect())
            },
        )
    }

    /// Visible volumes; `UniqueId` compared ignoring case (WQL string comparison; **unverified** for this provider,
    /// README assumption 4).
    fn volumes(&self, ctx: &CallContext, unique_id: Option<&str>) -> CallResult<Vec<MsftVolume>> {
        self.call(
            ctx,
            "SELECT MSFT_Volume",
            json!({ "unique_id": unique_id }),
            |st| {
                let mut out = Vec::new();
                for d in st.disks.iter() {
                    for pi in 0..d.partitions.len() {
                        if let Some(v) = msft_volume(st, d, pi)
                            && unique_id.is_none_or(|u| v.unique_id.eq_ignore_ascii_case(u))
                        {
                            out.push(v);
                        }
                    }
                }
                Ok(out)
            },
        )
    }

    fn partition_volumes(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<Vec<MsftVolume>> {
        const CALL: &str = "ASSOCIATORS MSFT_PartitionToVolume->MSFT_Volume";
        self.call(
            ctx,
            CALL,
            json!({ "partition": partition.as_str() }),
            |st| {
                let (di, pi) = partition_of(st, partition)
                    .ok_or_else(|| bad_path(CALL))?
                    .ok_or_else(|| not_found(CALL))?;
                let d = &st.disks[di];
                Ok(msft_volume(st, d, pi).into_iter().collect())
            },
        )
    }

    fn volume_partitions(
        &self,
        ctx: &CallContext,
        volume: &ObjectPath,
    ) -> CallResult<Vec<MsftPartition>> {
        const CALL: &str = "ASSOCIATORS MSFT_PartitionToVolume->MSFT_Partition";
        self.call(ctx, CALL, json!({ "volume": volume.as_str() }), |st| {
            let (di, pi) = volume_of(st, volume)
                .ok_or_else(|| bad_path(CALL))?
                .ok_or_else(|| not_found(CALL))?;
            Ok(vec![msft_partition(&st.disks[di], pi)])
        })
    }

    /// `Online()`: 0 when already online (csi-proxy checks `IsOffline` first, so repeat behaviour is **unverified**;
    /// chosen: success). It does not clear `IsReadOnly` (reference §2.3). The disk's volumes arrive after their delay.
    fn disk_online(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_Disk.Online";
        self.method(ctx, CALL, json!({ "disk": disk.as_str() }), |st| {
            let di = disk_index(st, CALL, disk)?;
            if !st.disks[di].online {
                let arrival = st.behaviour.arrival;
                st.disks[di].online = true;
                st.disks[di].schedule_volumes(tokio::time::Instant::now(), &arrival);
                st.sync_links()
                    .map_err(|e| super::win32(CALL, "", io_code(&e)))?;
            }
            Ok(ok(CALL, ()))
        })
    }

    /// `Offline()`: 41009 on the system/boot disk (the page: "operation not supported on a critical disk").
    fn disk_offline(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_Disk.Offline";
        self.method(ctx, CALL, json!({ "disk": disk.as_str() }), |st| {
            let di = disk_index(st, CALL, disk)?;
            if msft_disk(&st.disks[di]).is_system {
                return Ok(fail(CALL, StorageReturn::CriticalDisk));
            }
            if st.disks[di].online {
                st.disks[di].online = false;
                st.sync_links()
                    .map_err(|e| super::win32(CALL, "", io_code(&e)))?;
            }
            Ok(ok(CALL, ()))
        })
    }

    /// `Initialize(PartitionStyle)`: 41001 when not RAW (the page); GPT adds the 16 MiB Microsoft Reserved
    /// partition, as `Initialize-Disk -PartitionStyle GPT` does (the csi-proxy view's PartitionDisk models the
    /// same). An offline or read-only disk fails (4, with the reason in `ExtendedStatus`: the page lists no
    /// specific code). A RAW disk holding data Windows cannot see is a data-loss event.
    fn disk_initialize(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        style: WmiStyle,
    ) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_Disk.Initialize";
        let args = json!({ "disk": disk.as_str(), "partition_style": style.code() });
        self.method(ctx, CALL, args, |st| {
            let di = disk_index(st, CALL, disk)?;
            let d = &st.disks[di];
            if d.partition_style != PartitionStyle::Raw {
                return Ok(fail(CALL, StorageReturn::DiskAlreadyInitialized));
            }
            if !d.online {
                return Ok(outcome(
                    CALL,
                    StorageReturn::Failed,
                    Some("The disk is offline."),
                    (),
                ));
            }
            if d.read_only {
                return Ok(outcome(
                    CALL,
                    StorageReturn::Failed,
                    Some("The disk is read only."),
                    (),
                ));
            }
            let new_style = match style {
                WmiStyle::Mbr => PartitionStyle::Mbr,
                WmiStyle::Gpt => PartitionStyle::Gpt,
                _ => return Ok(fail(CALL, StorageReturn::InvalidParameter)),
            };
            if d.foreign_data {
                let detail = format!(
                    "MSFT_Disk.Initialize initialised disk {} ({}) that held foreign data",
                    d.number.unwrap_or_default(),
                    d.id
                );
                st.record_loss(CALL, di, None, detail);
            }
            let d = &mut st.disks[di];
            d.foreign_data = false;
            d.content.clear();
            d.partition_style = new_style;
            d.partitions.clear();
            if new_style == PartitionStyle::Gpt {
                let msr = MSR_SIZE.min(d.free_space(None));
                d.partitions.push(Partition {
                    number: 1,
                    kind: PartitionKind::Reserved,
                    size: msr,
                    volume: None,
                });
            }
            Ok(ok(CALL, ()))
        })
    }

    /// `CreatePartition`: 41000 on a RAW disk, 41003 offline, 41002 read-only (reference §2.3), 40005 without
    /// exactly one of `Size`/`UseMaximumSize`, 40000 without room. `UseMaximumSize` ends
    /// `partition_slack_bytes` below `SizeMax` (csi-proxy#195). A basic data partition gets a new unformatted volume,
    /// which arrives `arrival.volume_after_partition_ms` later (reference §3 step 3: volumes appear some time after
    /// `CreatePartition`); `Refresh` or a rescan shows it only once it has.
    fn disk_create_partition(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        params: &CreatePartition,
    ) -> CallResult<StorageOutcome<Option<MsftPartition>>> {
        const CALL: &str = "MSFT_Disk.CreatePartition";
        let args = json!({
            "disk": disk.as_str(),
            "size": params.size,
            "use_maximum_size": params.use_maximum_size,
            "gpt_type": params.gpt_type,
        });
        self.method(ctx, CALL, args, |st| {
            let di = disk_index(st, CALL, disk)?;
            let slack = st.behaviour.partition_slack_bytes;
            let d = &st.disks[di];
            if d.partition_style == PartitionStyle::Raw {
                return Ok(fail(CALL, StorageReturn::DiskNotInitialized));
            }
            if !d.online {
                return Ok(fail(CALL, StorageReturn::DiskOffline));
            }
            if d.read_only {
                return Ok(fail(CALL, StorageReturn::DiskReadOnly));
            }
            let max = params.use_maximum_size == Some(true);
            if max == params.size.is_some() {
                return Ok(fail(CALL, StorageReturn::SizeParameterRequired));
            }
            // A GPT type on an MBR disk (csi-proxy v1.3.0 and later always pass one): refused, code unverified
            // (row `partition_disk_mbr`).
            if d.partition_style == PartitionStyle::Mbr && params.gpt_type.is_some() {
                return Ok(fail(CALL, StorageReturn::InvalidPartitionType));
            }
            let kind = match params.gpt_type.as_deref() {
                None => PartitionKind::Basic,
                Some(t) if GptType::BasicData.matches(t) => PartitionKind::Basic,
                Some(t) if GptType::MicrosoftReserved.matches(t) => PartitionKind::Reserved,
                Some(t) if GptType::SystemPartition.matches(t) => PartitionKind::System,
                Some(_) => return Ok(fail(CALL, StorageReturn::InvalidPartitionType)),
            };
            let free = d.free_space(None);
            let size = match params.size {
                Some(s) => s,
                None if free > slack + MIB => free - slack,
                None => free,
            };
            if free < MIB || size > free || size == 0 {
                return Ok(fail(CALL, StorageReturn::NotEnoughFreeSpace));
            }
            let guid = (kind != PartitionKind::Reserved).then(|| st.new_guid());
            // The partition is returned (and listed) at once; its volume arrives later (reference §3 step 3).
            let arrives_at = due(
                tokio::time::Instant::now(),
                st.behaviour.arrival.volume_after_partition(),
            );
            let d = &mut st.disks[di];
            let number = d.partitions.iter().map(|p| p.number).max().unwrap_or(0) + 1;
            d.partitions.push(Partition {
                number,
                kind,
                size,
                volume: guid.clone().map(|guid| Volume::new(guid, arrives_at)),
            });
            if let Some(g) = &guid {
                wipe_dir(&st.layout.volume_store(g))
                    .map_err(|e| super::win32(CALL, "", io_code(&e)))?;
            }
            st.sync_links()
                .map_err(|e| super::win32(CALL, "", io_code(&e)))?;
            let d = &st.disks[di];
            let pi = d.partitions.len() - 1;
            // `host.behaviour.created_partition_returned = false`: the embedded `CreatedPartition` does not come
            // back readable (winhost README, assumption 2), and the caller must find the partition itself.
            let created = st
                .behaviour
                .created_partition_returned
                .then(|| msft_partition(d, pi));
            Ok(ok(CALL, created))
        })
    }

    /// `SetAttributes`: `IsReadOnly` sets or clears the disk's read-only flag (online or offline: hpe-storage
    /// common-host-libs PR #40 clears it before onlining; the page's 41003 "disk offline" for other attributes is
    /// not modelled). `Signature`/`Guid` are not modelled (1, not supported).
    fn disk_set_attributes(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        attributes: &DiskAttributes,
    ) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_Disk.SetAttributes";
        let args = json!({ "disk": disk.as_str(), "is_read_only": attributes.is_read_only });
        self.method(ctx, CALL, args, |st| {
            let di = disk_index(st, CALL, disk)?;
            if attributes.signature.is_some() || attributes.guid.is_some() {
                return Ok(fail(CALL, StorageReturn::NotSupported));
            }
            if let Some(ro) = attributes.is_read_only {
                st.disks[di].read_only = ro;
            }
            Ok(ok(CALL, ()))
        })
    }

    /// `Refresh()`: the cached view of this disk catches up with what has arrived (its volumes that arrived but the
    /// cache does not show yet); nothing that has not arrived appears (reference §3 step 3; see
    /// `state/arrival.rs`).
    fn disk_refresh(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_Disk.Refresh";
        self.method(ctx, CALL, json!({ "disk": disk.as_str() }), |st| {
            let di = disk_index(st, CALL, disk)?;
            if complete(st, tokio::time::Instant::now(), Duration::ZERO, Some(di)) {
                st.sync_links()
                    .map_err(|e| super::win32(CALL, "", io_code(&e)))?;
            }
            Ok(ok(CALL, ()))
        })
    }

    /// `MSFT_Partition.Online()`: partitions have no offline state of their own in the model: 0.
    fn partition_online(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_Partition.Online";
        self.method(
            ctx,
            CALL,
            json!({ "partition": partition.as_str() }),
            |st| {
                partition_of(st, partition)
                    .ok_or_else(|| bad_path(CALL))?
                    .ok_or_else(|| not_found(CALL))?;
                Ok(ok(CALL, ()))
            },
        )
    }

    /// `GetSupportedSize()`: `SizeMin` the bytes in use, `SizeMax` the partition plus the free space after the
    /// other partitions (the csi-proxy view's `SizeMax`); 4 "Failed" with no sizes while the Optimize Drives service
    /// is disabled ([`State::defrag_available`], aws-ebs-csi-driver#2877: `{"SizeMax": null}`, StorageWMI 4).
    fn partition_supported_size(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<StorageOutcome<Option<SupportedSize>>> {
        const CALL: &str = "MSFT_Partition.GetSupportedSize";
        self.method(
            ctx,
            CALL,
            json!({ "partition": partition.as_str() }),
            |st| {
                let (di, pi) = partition_of(st, partition)
                    .ok_or_else(|| bad_path(CALL))?
                    .ok_or_else(|| not_found(CALL))?;
                if !st.defrag_available() {
                    return Ok(fail(CALL, StorageReturn::Failed));
                }
                let (min, max) = sizes(st, di, pi);
                Ok(ok(CALL, Some(SupportedSize { min, max })))
            },
        )
    }

    /// `Resize(Size)`: 4097 outside `[SizeMin, SizeMax]` or for a change under one extent (csi-proxy#195), 4 on a
    /// read-only disk; 42009 for a partition without a recognised file system is not modelled. It works while the
    /// Optimize Drives service is disabled: aws-ebs-csi-driver#2877 reports the explicit-size path (csi-proxy's
    /// `ResizeVolume` with a size, which skips `GetSupportedSize`) working there (**unverified** beyond that report:
    /// real-node check N38).
    fn partition_resize(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
        size: u64,
    ) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_Partition.Resize";
        self.method(
            ctx,
            CALL,
            json!({ "partition": partition.as_str(), "size": size }),
            |st| {
                let (di, pi) = partition_of(st, partition)
                    .ok_or_else(|| bad_path(CALL))?
                    .ok_or_else(|| not_found(CALL))?;
                let (min, max) = sizes(st, di, pi);
                let current = st.disks[di].partitions[pi].size;
                if size < min || size > max || size.abs_diff(current) < MIN_EXTENT {
                    return Ok(fail(CALL, StorageReturn::SizeNotSupported));
                }
                if st.disks[di].read_only {
                    return Ok(outcome(
                        CALL,
                        StorageReturn::Failed,
                        Some("The disk is read only."),
                        (),
                    ));
                }
                st.disks[di].partitions[pi].size = size;
                Ok(ok(CALL, ()))
            },
        )
    }

    /// `Format(…)`: 43006 on a read-only disk, 43001 for a file system other than NTFS (the only one modelled);
    /// formatting a volume that holds anything is a data-loss event (and the data is gone), as in the csi-proxy
    /// view.
    fn volume_format(
        &self,
        ctx: &CallContext,
        volume: &ObjectPath,
        params: &FormatVolume,
    ) -> CallResult<StorageOutcome<Option<MsftVolume>>> {
        const CALL: &str = "MSFT_Volume.Format";
        let args = json!({
            "volume": volume.as_str(),
            "file_system": params.file_system,
            "full": params.full,
            "force": params.force,
        });
        self.method(ctx, CALL, args, |st| {
            let (di, pi) = volume_of(st, volume)
                .ok_or_else(|| bad_path(CALL))?
                .ok_or_else(|| not_found(CALL))?;
            if st.disks[di].read_only {
                return Ok(fail(CALL, StorageReturn::DriveReadOnly));
            }
            let fs = params.file_system.as_deref().unwrap_or("NTFS");
            if !fs.eq_ignore_ascii_case("NTFS") {
                return Ok(fail(CALL, StorageReturn::FileSystemNotSupported));
            }
            let Some(v) = st.disks[di].partitions[pi].volume.clone() else {
                return Err(not_found(CALL));
            };
            let store = st.layout.volume_store(&v.guid);
            let usage = dir_usage(&store);
            if usage.entries > 0 || v.foreign_data {
                let detail = format!(
                    "MSFT_Volume.Format on {} (disk {}) destroyed {} file(s), {} byte(s){}",
                    v.id(),
                    st.disks[di].id,
                    usage.files,
                    usage.bytes,
                    if v.foreign_data {
                        " and foreign data"
                    } else {
                        ""
                    }
                );
                st.record_loss(CALL, di, Some(v.id()), detail);
            }
            wipe_dir(&store).map_err(|e| super::win32(CALL, "", io_code(&e)))?;
            if let Some(vol) = st.disks[di].partitions[pi].volume.as_mut() {
                vol.filesystem = Some("NTFS".to_owned());
                vol.foreign_data = false;
            }
            let d = &st.disks[di];
            Ok(ok(CALL, msft_volume(st, d, pi)))
        })
    }

    fn volume_flush(&self, ctx: &CallContext, volume: &ObjectPath) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_Volume.Flush";
        self.method(ctx, CALL, json!({ "volume": volume.as_str() }), |st| {
            volume_of(st, volume)
                .ok_or_else(|| bad_path(CALL))?
                .ok_or_else(|| not_found(CALL))?;
            Ok(ok(CALL, ()))
        })
    }

    /// `Get()`: `NewDiskPolicy` from the scenario's SAN policy (reference §2.3).
    fn storage_setting(
        &self,
        ctx: &CallContext,
    ) -> CallResult<StorageOutcome<Option<MsftStorageSetting>>> {
        const CALL: &str = "MSFT_StorageSetting.Get";
        self.method(ctx, CALL, json!({}), |st| {
            let policy = match st.cfg.san_policy {
                SanPolicy::OnlineAll => NewDiskPolicy::OnlineAll,
                SanPolicy::OfflineShared => NewDiskPolicy::OfflineShared,
                SanPolicy::OfflineAll => NewDiskPolicy::OfflineAll,
            };
            Ok(ok(
                CALL,
                Some(MsftStorageSetting {
                    new_disk_policy: Some(policy),
                }),
            ))
        })
    }

    /// `UpdateHostStorageCache()`: the storage cache shows every disk and volume that has arrived; nothing that has
    /// not (what csi-proxy's `Rescan` calls, reference §2.3; see `state/arrival.rs`).
    fn update_host_storage_cache(&self, ctx: &CallContext) -> CallResult<StorageOutcome> {
        const CALL: &str = "MSFT_StorageSetting.UpdateHostStorageCache";
        self.method(ctx, CALL, json!({}), |st| {
            st.rescan()
                .map_err(|e| super::win32(CALL, "", io_code(&e)))?;
            Ok(ok(CALL, ()))
        })
    }

    /// Without the Multipath-IO feature the class does not exist: `None`; with it, the MSDSM's list
    /// (`state/mpio.rs`).
    fn msdsm_supported_hw(
        &self,
        ctx: &CallContext,
    ) -> CallResult<Option<Vec<MsftMsdsmSupportedHw>>> {
        self.call(ctx, "SELECT MSFT_MSDSMSupportedHW", json!({}), |st| {
            Ok(st.msdsm_supported_hw().map(|rows| {
                rows.into_iter()
                    .map(|(vendor_id, product_id)| MsftMsdsmSupportedHw {
                        vendor_id,
                        product_id,
                    })
                    .collect()
            }))
        })
    }
}

/// (`SizeMin`, `SizeMax`) of partition `pi` of disk `di`.
fn sizes(st: &State, di: usize, pi: usize) -> (u64, u64) {
    let d = &st.disks[di];
    let p = &d.partitions[pi];
    let used = p
        .volume
        .as_ref()
        .map(|v| dir_usage(&st.layout.volume_store(&v.guid)).bytes)
        .unwrap_or(0);
    let max = d.free_space(Some(p.number)).max(p.size);
    (used.max(MIB).min(p.size), max)
}

/// A sandbox I/O failure as a Win32 code (the simulator's own trouble, surfaced rather than hidden).
pub(crate) fn io_code(e: &crate::Error) -> u32 {
    match e {
        crate::Error::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::NotFound => 2,
            std::io::ErrorKind::PermissionDenied => 5,
            _ => 1117,
        },
        _ => 1117,
    }
}
