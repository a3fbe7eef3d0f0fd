//! Disks over `MSFT_Disk`, `MSFT_Partition` and the device IOCTLs (reference §2.3), with the waits for arrival
//! (reference §3): `Refresh` after `Online`, `Initialize` and `CreatePartition`, and once more when a basic partition
//! has no volume yet, so nothing is decided on a half-arrived disk (D5).

use std::collections::BTreeMap;

use winhost::codes::{PartitionStyle, StorageReturn};
use winhost::location::DiskLocation as Location;
use winhost::model::{CreatePartition, DiskAttributes, MsftDisk};
use winhost::page83::csi_proxy_page83;

use super::{DiskIds, DiskLocation, HostErrorKind, HostObject, HostResult, Ops, inflight};
use crate::host::{DiskLayout, PartitionInfo, PartitionKind, PartitionStyle as Style};

/// The disk numbered `n` (NotFound when absent, like csi-proxy's "not found").
pub(super) fn one(o: &Ops<'_>, n: u32) -> HostResult<MsftDisk> {
    o.w.disks(o.c, Some(n))
        .map_err(|e| o.err(e))?
        .into_iter()
        .next()
        .ok_or_else(|| o.fail(HostErrorKind::NotFound, format!("disk {n} not found")))
}

/// `ListDiskLocations`: every disk whose `Location` parses (csi-proxy's rules, or the documented PnP form).
pub(super) fn locations(o: &Ops<'_>) -> HostResult<BTreeMap<u32, DiskLocation>> {
    let disks = o.w.disks(o.c, None).map_err(|e| o.err(e))?;
    Ok(disks
        .iter()
        .filter_map(|d| {
            let loc = match Location::parse(d.location.as_deref()?)? {
                Location::CsiProxy(l) => DiskLocation {
                    adapter: l.adapter,
                    target: l.target,
                    lun: l.lun,
                },
                Location::Pnp(l) => DiskLocation {
                    adapter: String::new(),
                    target: l.target_id.to_string(),
                    lun: l.lun.to_string(),
                },
            };
            Some((d.number, loc))
        })
        .collect())
}

/// `ListDiskIDs`: page83 as csi-proxy picks it from `IOCTL_STORAGE_QUERY_PROPERTY`, keyed by the device number,
/// serial from `MSFT_Disk.SerialNumber`; one disk that cannot be opened fails the whole call (csi-proxy's rule,
/// kept by the port).
pub(super) fn ids(o: &Ops<'_>) -> HostResult<BTreeMap<u32, DiskIds>> {
    let disks = o.w.disks(o.c, None).map_err(|e| o.err(e))?;
    let mut out = BTreeMap::new();
    for d in &disks {
        let device = d
            .device_path
            .clone()
            .unwrap_or_else(|| format!(r"\\.\PhysicalDrive{}", d.number));
        let number =
            o.w.storage_device_number(o.c, &device)
                .map_err(|e| o.err(e))?;
        let identifiers =
            o.w.storage_device_identifiers(o.c, &device)
                .map_err(|e| o.err(e))?;
        out.insert(
            number.device_number,
            DiskIds {
                page83: csi_proxy_page83(&identifiers),
                serial: d.serial_number.clone().unwrap_or_default(),
            },
        );
    }
    Ok(out)
}

/// `Rescan`: `UpdateHostStorageCache`.
pub(super) fn rescan(o: &Ops<'_>) -> HostResult<()> {
    let out = o.w.update_host_storage_cache(o.c).map_err(|e| o.err(e))?;
    o.accept(out, &[])
}

/// `PartitionDisk`: GPT-initialise a RAW disk proven blank (`blank.rs`), then create one maximum-size basic data
/// partition when the disk has no partition other than Microsoft Reserved (csi-proxy's calls and parameters, reference
/// §2.3). Unlike csi-proxy, a disk that already has another partition is refused (AlreadyExists, nothing created)
/// instead of a silent no-op: its volume, arriving later, must never be taken for the one this call would have made.
///
/// `Initialize` and `CreatePartition` are each in the in-flight ledger while they run (`inflight.rs`), and nothing is
/// started while a method an earlier driver process called on the disk may still run; the reads carry no entry.
pub(super) fn partition(o: &Ops<'_>, n: u32) -> HostResult<()> {
    let object = HostObject::Disk(n);
    o.calls.refuse_while_in_flight(o, &object)?;
    let disk = one(o, n)?;
    let id = disk.unique_id.as_deref();
    if super::blank::may_initialize(o, &disk)? {
        let _called = o.calls.method(o, inflight::INITIALIZE, &object, id, None)?;
        let out =
            o.w.disk_initialize(o.c, &disk.path, PartitionStyle::Gpt)
                .map_err(|e| o.err(e))?;
        o.accept(out, &[StorageReturn::DiskAlreadyInitialized])?;
    }
    refresh(o, &disk)?;
    let parts = o.w.partitions(o.c, Some(n)).map_err(|e| o.err(e))?;
    if let Some(p) = parts.iter().find(|p| !p.is_microsoft_reserved()) {
        return Err(o.fail(
            HostErrorKind::AlreadyExists,
            format!(
                "disk {n} already has partition {} ({}): nothing was created",
                p.partition_number,
                type_of(p)
            ),
        ));
    }
    // csi-proxy v1.3.0 and later always pass the GPT basic-data type, which an MBR disk refuses (sim/README.md row
    // `partition_disk_mbr`): an MBR-initialised disk without partitions gets an IFS partition (MbrType 7), as the
    // PowerShell era's `New-Partition -UseMaximumSize` makes there.
    let mut params = CreatePartition::csi_proxy_basic_data();
    if disk.partition_style == Some(PartitionStyle::Mbr) {
        params.gpt_type = None;
        params.mbr_type = Some(MBR_IFS);
    }
    let called = o
        .calls
        .method(o, inflight::CREATE_PARTITION, &object, id, None)?;
    let out =
        o.w.disk_create_partition(o.c, &disk.path, &params)
            .map_err(|e| o.err(e))?;
    drop(called);
    // 42002: created, but no access path could be assigned (csi-proxy accepts it, `pkg/os/disk/api.go:196`).
    o.accept(out, &[StorageReturn::AccessPathInUse])?;
    refresh(o, &disk)?;
    // The partition to online is found by listing, not by trusting the `CreatedPartition` out-parameter (whether it
    // decodes on a node is unverified): csi-proxy re-lists after `Refresh` and onlines the first basic partition
    // (`kubernetes-csi/csi-proxy@v1.3.0 pkg/os/disk/api.go:177-219`).
    let parts = o.w.partitions(o.c, Some(n)).map_err(|e| o.err(e))?;
    let Some(p) = parts.iter().find(|p| !p.is_microsoft_reserved()) else {
        return Err(o.fail(
            HostErrorKind::Other,
            format!("disk {n}: CreatePartition succeeded but the disk shows no basic partition"),
        ));
    };
    let out = o.w.partition_online(o.c, &p.path).map_err(|e| o.err(e))?;
    o.accept(out, &[])?;
    Ok(())
}

/// `DiskLayout`: `MSFT_Disk.PartitionStyle` and the disk's partitions as Windows reads them, whether or not their
/// volumes have arrived. NotFound when the disk is not there.
pub(super) fn layout(o: &Ops<'_>, n: u32) -> HostResult<DiskLayout> {
    let disk = one(o, n)?;
    let style = match disk.partition_style {
        Some(PartitionStyle::Mbr) => Style::Mbr,
        Some(PartitionStyle::Gpt) => Style::Gpt,
        // RAW, NULL or undocumented: no table Windows reads. `PartitionDisk` initialises only a RAW disk whose
        // sectors read blank (`blank.rs`) and refuses the others, so this is never a licence to write.
        _ => Style::Raw,
    };
    let parts = o.w.partitions(o.c, Some(n)).map_err(|e| o.err(e))?;
    Ok(DiskLayout {
        style,
        partitions: parts
            .iter()
            .map(|p| PartitionInfo {
                number: p.partition_number,
                kind: kind_of(p),
                size: p.size,
            })
            .collect(),
    })
}

/// MBR partition types Windows mounts as a volume (IFS/NTFS/exFAT, FAT12, FAT16, FAT16B, FAT32, FAT32 LBA, FAT16
/// LBA: Microsoft's *Partition types* list for `PARTITION_INFORMATION_MBR`, `IsRecognizedPartition`).
const MBR_VOLUME_TYPES: [u16; 7] = [MBR_IFS, 0x01, 0x04, 0x06, 0x0B, 0x0C, 0x0E];

/// `MbrType` IFS (NTFS, exFAT): `MSFT_Disk.CreatePartition`'s documented value 7.
const MBR_IFS: u16 = 0x07;

/// What Windows makes of a partition: Microsoft Reserved, one it gives a volume (GPT basic data, a recognised MBR
/// type), or another type.
fn kind_of(p: &winhost::model::MsftPartition) -> PartitionKind {
    if p.is_microsoft_reserved() {
        PartitionKind::Reserved
    } else if p
        .gpt_type
        .as_deref()
        .is_some_and(|t| winhost::model::GptType::BasicData.matches(t))
        || p.mbr_type.is_some_and(|t| MBR_VOLUME_TYPES.contains(&t))
    {
        PartitionKind::Basic
    } else {
        PartitionKind::Other(type_of(p))
    }
}

/// A partition's type as text (`GptType` or `MbrType`).
fn type_of(p: &winhost::model::MsftPartition) -> String {
    match (&p.gpt_type, p.mbr_type) {
        (Some(g), _) => format!("GPT type {g}"),
        (None, Some(m)) => format!("MBR type 0x{m:02X}"),
        (None, None) => "type unknown".to_owned(),
    }
}

fn refresh(o: &Ops<'_>, disk: &MsftDisk) -> HostResult<()> {
    let out = o.w.disk_refresh(o.c, &disk.path).map_err(|e| o.err(e))?;
    o.accept(out, &[])
}

/// `SetDiskState`: `Online()`/`Offline()` when the disk is not already so (csi-proxy's check first), then, online,
/// `Refresh` so its volumes arrive. `read_only`: `Some(false)` (a writable volume) clears a read-only flag still set
/// after `Online` (SAN policy, re-attach: csi-proxy #437) with `SetAttributes(IsReadOnly = false)` (reference §3);
/// `Some(true)` (a reader-only volume) sets it with `SetAttributes(IsReadOnly = true)` right after `Online`, before
/// anything on the node reads the volume ("the disk must be online for most attributes to be set", *SetAttributes
/// method of the MSFT_Disk class*; whether an iSCSI LUN keeps it is real-node check 40).
pub(super) fn set_online(
    o: &Ops<'_>,
    n: u32,
    online: bool,
    read_only: Option<bool>,
) -> HostResult<()> {
    let disk = one(o, n)?;
    if !online {
        if !disk.is_offline {
            let out = o.w.disk_offline(o.c, &disk.path).map_err(|e| o.err(e))?;
            o.accept(out, &[])?;
        }
        return Ok(());
    }
    let onlined = disk.is_offline;
    if onlined {
        let out = o.w.disk_online(o.c, &disk.path).map_err(|e| o.err(e))?;
        o.accept(out, &[])?;
    }
    if let Some(want) = read_only {
        let is = if onlined {
            one(o, n)?.is_read_only
        } else {
            disk.is_read_only
        };
        if is != want {
            if want {
                tracing::info!(
                    disk = n,
                    "setting the disk read-only for a reader-only volume"
                );
            } else {
                tracing::info!(
                    disk = n,
                    "clearing the disk's read-only flag for a writable volume"
                );
            }
            let attrs = DiskAttributes {
                is_read_only: Some(want),
                ..DiskAttributes::default()
            };
            let set =
                o.w.disk_set_attributes(o.c, &disk.path, &attrs)
                    .map_err(|e| o.err(e))
                    .and_then(|out| o.accept(out, &[]));
            match set {
                Ok(()) => {}
                // Where Windows refuses the flag (41009 "not supported on a critical disk", a provider without it),
                // the reader-only stage goes on without it: the driver itself writes nothing there.
                Err(e) if want && !e.kind.is_uncertain() => tracing::warn!(
                    disk = n,
                    error = %e.message,
                    "Windows did not set the disk read-only: the reader-only volume is mounted without the flag"
                ),
                Err(e) => return Err(e),
            }
        }
    }
    refresh(o, &disk)
}

/// `ListVolumesOnDisk`: the volumes of every partition (`MSFT_PartitionToVolume`). A basic partition of an online
/// disk whose volume has not arrived yet makes it `Refresh` the disk and look once more, rather than report a disk
/// without volumes (which the driver would partition or call foreign). An unknown disk has none.
pub(super) fn volumes(o: &Ops<'_>, n: u32) -> HostResult<Vec<String>> {
    let list = |o: &Ops<'_>| -> HostResult<(Vec<String>, bool)> {
        let parts = o.w.partitions(o.c, Some(n)).map_err(|e| o.err(e))?;
        let mut out = Vec::new();
        let mut missing = false;
        for p in &parts {
            let vols = o.w.partition_volumes(o.c, &p.path).map_err(|e| o.err(e))?;
            missing |= vols.is_empty() && !p.is_microsoft_reserved() && !p.is_offline;
            out.extend(vols.into_iter().map(|v| v.unique_id));
        }
        Ok((out, missing))
    };
    let (vols, missing) = list(o)?;
    if !missing {
        return Ok(vols);
    }
    let Ok(disk) = one(o, n) else {
        return Ok(vols);
    };
    if disk.is_offline {
        return Ok(vols);
    }
    refresh(o, &disk)?;
    Ok(list(o)?.0)
}
