//! How far a partition may grow, computed from the disk's layout instead of asked of Windows.
//!
//! `MSFT_Partition.GetSupportedSize` (`Get-PartitionSupportedSize`) answers StorageWMI 4 "Failed" while the Optimize
//! Drives service (`defragsvc`) is disabled or busy, and every retry fails alike until the service changes
//! (kubernetes-sigs/aws-ebs-csi-driver#2877, reproduced on Windows Server 2025 by disabling the service); its
//! `SizeMin` needs a call into defrag (the Windows storage team, quoted in Azure/AgentBaker#3804). Growing needs only
//! `SizeMax`, which the layout gives:
//!
//! * **GPT**: the backup partition entry array and the backup header occupy the disk's last sectors (UEFI 2.10
//!   §5.3.2: the backup GPT header is in the last LBA, its entry array just before it). Windows writes 128 entries of
//!   128 bytes (16 KiB), so the backup area is 33 sectors of 512 bytes or 5 of 4096 bytes. Measured on Windows:
//!   `SizeMax` = disk size − 33 × 512 − the partition's offset (ansible/ansible#56910: a 60 GiB disk, offset 1 MiB,
//!   `SizeMax` 64423443968; csi-proxy#195: a 3 GiB disk, offset 16 MiB, `SizeMax` 3204431360).
//! * **MBR**: no backup area; a partition's length is a 32-bit sector count.
//! * **Alignment**: the end is rounded down to 1 MiB, as `CreatePartition -UseMaximumSize` rounds (ansible#56910:
//!   the maximum-size partition is `SizeMax` rounded down to a MiB multiple), so the size asked for is never above
//!   `SizeMax` whatever the array's rounding of the LUN's size; the cost is less than 1 MiB of the LUN.
//! * **The next partition**: the partition may grow only up to the start of the partition that follows it.
//!
//! `None` when the layout cannot be read (no offset, a partition without one, a RAW or unknown style): the caller asks
//! `GetSupportedSize` then.

use winhost::codes::PartitionStyle;
use winhost::model::{MsftDisk, MsftPartition};

/// The alignment of a partition's end (1 MiB, Windows' default partition alignment).
pub(crate) const ALIGNMENT: u64 = 1024 * 1024;
/// The GPT partition entry array Windows writes: 128 entries of 128 bytes.
const GPT_ENTRY_ARRAY: u64 = 128 * 128;
/// The sector size assumed when `MSFT_Disk.LogicalSectorSize` is NULL: the larger one, whose backup area is larger.
const UNKNOWN_SECTOR: u64 = 4096;

/// The bytes the backup GPT takes at the end of a disk with `sector`-byte logical sectors: the entry array rounded up
/// to whole sectors, plus the header's sector.
pub(crate) fn gpt_backup_bytes(sector: u64) -> u64 {
    GPT_ENTRY_ARRAY.div_ceil(sector) * sector + sector
}

/// The largest size `partition` of `disk` may grow to (module docs), given every partition of the disk; `None` when
/// the layout cannot tell.
pub(crate) fn max_partition_size(
    disk: &MsftDisk,
    partition: &MsftPartition,
    partitions: &[MsftPartition],
) -> Option<u64> {
    let offset = partition.offset?;
    let sector = disk
        .logical_sector_size
        .map(u64::from)
        .filter(|s| *s >= 512 && s.is_power_of_two())
        .unwrap_or(UNKNOWN_SECTOR);
    let mut end = match disk.partition_style? {
        PartitionStyle::Gpt => disk.size.checked_sub(gpt_backup_bytes(sector))?,
        PartitionStyle::Mbr => disk
            .size
            .min(offset.saturating_add(u64::from(u32::MAX) * sector)),
        _ => return None,
    };
    for p in partitions {
        if p.partition_number == partition.partition_number {
            continue;
        }
        let start = p.offset?;
        if start > offset {
            end = end.min(start);
        }
    }
    let end = end / ALIGNMENT * ALIGNMENT;
    Some(end.saturating_sub(offset).max(partition.size))
}

#[cfg(test)]
mod tests {
    use winhost::ObjectPath;

    use super::*;

    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;

    fn disk(size: u64, style: PartitionStyle, sector: Option<u32>) -> MsftDisk {
        MsftDisk {
            path: ObjectPath::new("d"),
            number: 3,
            device_path: None,
            location: None,
            unique_id: None,
            unique_id_format: None,
            serial_number: None,
            size,
            logical_sector_size: sector,
            number_of_partitions: None,
            partition_style: Some(style),
            bus_type: None,
            is_offline: false,
            offline_reason: None,
            is_read_only: false,
            is_system: false,
            is_boot: false,
            operational_status: vec![],
        }
    }

    fn part(number: u32, offset: Option<u64>, size: u64) -> MsftPartition {
        MsftPartition {
            path: ObjectPath::new(format!("p{number}")),
            disk_number: 3,
            partition_number: number,
            offset,
            size,
            gpt_type: None,
            mbr_type: None,
            access_paths: vec![],
            is_read_only: false,
            is_offline: false,
            is_hidden: false,
        }
    }

    #[test]
    fn the_gpt_backup_area_is_33_sectors_of_512_or_5_of_4096() {
        assert_eq!(gpt_backup_bytes(512), 33 * 512);
        assert_eq!(gpt_backup_bytes(4096), 5 * 4096);
    }

    /// The measured cases (module docs): the computed size is Windows' `SizeMax` rounded down to a MiB multiple, never
    /// above it.
    #[test]
    fn windows_measured_size_max_rounded_down_to_a_mib() {
        // ansible#56910: 60 GiB, the data partition at 1 MiB, SizeMax 64423443968.
        let d = disk(60 * GIB, PartitionStyle::Gpt, Some(512));
        let p = part(1, Some(MIB), 40 * GIB);
        let max = max_partition_size(&d, &p, std::slice::from_ref(&p)).expect("computed");
        assert!(max <= 64_423_443_968, "{max}");
        assert_eq!(max, 64_423_443_968 / MIB * MIB);
        assert_eq!((MIB + max) % MIB, 0, "the end is aligned");
        // csi-proxy#195: 3 GiB, a 16 MiB reserved partition in front, SizeMax 3204431360.
        let d = disk(3 * GIB, PartitionStyle::Gpt, Some(512));
        let msr = part(1, Some(17_408), 16 * MIB - 17_408);
        let p = part(2, Some(16 * MIB), 2 * GIB);
        let max = max_partition_size(&d, &p, &[msr, p.clone()]).expect("computed");
        assert!(max <= 3_204_431_360, "{max}");
        assert!(3_204_431_360 - max < MIB, "{max}");
    }

    #[test]
    fn a_disk_not_a_mib_multiple_and_4k_sectors_stay_inside_the_backup_area() {
        let size = 10 * GIB + 30 * 1024;
        for (sector, backup) in [
            (Some(512), 33 * 512),
            (Some(4096), 5 * 4096),
            (None, 5 * 4096),
        ] {
            let d = disk(size, PartitionStyle::Gpt, sector);
            let p = part(2, Some(16 * MIB), 5 * GIB);
            let max = max_partition_size(&d, &p, std::slice::from_ref(&p)).expect("computed");
            assert!(16 * MIB + max <= size - backup, "{sector:?}: {max}");
            assert_eq!((16 * MIB + max) % MIB, 0);
        }
    }

    #[test]
    fn the_next_partition_bounds_the_growth() {
        let d = disk(10 * GIB, PartitionStyle::Gpt, Some(512));
        let p = part(2, Some(16 * MIB), GIB);
        let next = part(3, Some(4 * GIB), GIB);
        assert_eq!(
            max_partition_size(&d, &p, &[p.clone(), next]),
            Some(4 * GIB - 16 * MIB)
        );
    }

    #[test]
    fn mbr_has_no_backup_area() {
        let d = disk(10 * GIB, PartitionStyle::Mbr, Some(512));
        let p = part(1, Some(MIB), GIB);
        assert_eq!(
            max_partition_size(&d, &p, std::slice::from_ref(&p)),
            Some(10 * GIB - MIB)
        );
    }

    #[test]
    fn what_cannot_be_read_is_not_guessed() {
        let d = disk(10 * GIB, PartitionStyle::Gpt, Some(512));
        let unknown = part(2, None, GIB);
        assert_eq!(
            max_partition_size(&d, &unknown, std::slice::from_ref(&unknown)),
            None
        );
        let p = part(2, Some(16 * MIB), GIB);
        let other = part(3, None, GIB);
        assert_eq!(max_partition_size(&d, &p, &[p.clone(), other]), None);
        let raw = disk(10 * GIB, PartitionStyle::Raw, Some(512));
        assert_eq!(max_partition_size(&raw, &p, std::slice::from_ref(&p)), None);
        // A disk smaller than its own layout: never a size below the current one.
        let tiny = disk(MIB, PartitionStyle::Gpt, Some(512));
        assert_eq!(
            max_partition_size(&tiny, &p, std::slice::from_ref(&p)),
            Some(GIB)
        );
    }
}
