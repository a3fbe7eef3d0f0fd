use super::*;

const GIB: u64 = 1 << 30;

/// A device of `length` bytes read as the native backend reads it, with `writes` (offset from the start, bytes) on it.
fn device(length: u64, writes: &[(u64, &[u8])]) -> DeviceBytes {
    let head_len = HEAD_BYTES.min(length);
    let tail_len = TAIL_BYTES.min(length);
    let tail_start = length - tail_len;
    let mut head = vec![0u8; head_len as usize];
    let mut tail = vec![0u8; tail_len as usize];
    for &(offset, bytes) in writes {
        for (i, &b) in bytes.iter().enumerate() {
            let at = offset + i as u64;
            if at < head_len {
                head[at as usize] = b;
            }
            if at >= tail_start && at < length {
                tail[(at - tail_start) as usize] = b;
            }
        }
    }
    DeviceBytes { length, head, tail }
}

fn whats(f: &[Finding]) -> Vec<(&'static str, u64)> {
    f.iter().map(|f| (f.what, f.offset)).collect()
}

#[test]
fn a_blank_device_has_nothing() {
    for length in [0, 1, 511, 4096, MIB, 5 * MIB, 10 * GIB, 10 * GIB + 512] {
        assert!(examine(&device(length, &[])).is_empty(), "{length}");
    }
}

/// Every format of the issue, written where libblkid's probe looks (the module's citations), on a 10 GiB LUN, is
/// named at its offset.
#[test]
fn each_known_signature_is_named_where_libblkid_finds_it() {
    let len = 10 * GIB;
    let zfs_nvlist: &[u8] = &[1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x28];
    let cases: &[(&str, u64, &[u8], &str)] = &[
        ("ext4", 1080, b"\x53\xEF", "ext2/ext3/ext4 superblock"),
        ("xfs", 0, b"XFSB", "XFS superblock"),
        (
            "lvm2 (label in sector 1)",
            0x218,
            b"LVM2 001",
            "LVM2 physical volume label",
        ),
        (
            "lvm2 (label in sector 0)",
            0x18,
            b"LVM2 001",
            "LVM2 physical volume label",
        ),
        ("luks1", 0, b"LUKS\xBA\xBE", "LUKS header"),
        (
            "luks2 secondary",
            0x4000,
            b"SKUL\xBA\xBE",
            "LUKS2 secondary header",
        ),
        (
            "luks2 last secondary",
            0x400000,
            b"SKUL\xBA\xBE",
            "LUKS2 secondary header",
        ),
        ("btrfs", 0x10040, b"_BHRfS_M", "Btrfs superblock"),
        ("ntfs", 3, b"NTFS    ", "NTFS boot sector"),
        ("exfat", 3, b"EXFAT   ", "exFAT boot sector"),
        ("refs", 0, b"\0\0\0ReFS\0", "ReFS boot sector"),
        ("fat32", 0x52, b"FAT32   ", "FAT32 boot sector"),
        ("fat16", 0x36, b"FAT16   ", "FAT12/FAT16 boot sector"),
        ("bitlocker", 3, b"-FVE-FS-", "BitLocker volume header"),
        ("swap 4k", 0xff6, b"SWAPSPACE2", "Linux swap signature"),
        ("swap 64k", 0xfff6, b"SWAP-SPACE", "Linux swap signature"),
        ("iso9660", 0x8001, b"CD001", "ISO 9660 volume descriptor"),
        ("udf", 0x8001, b"NSR03", "UDF volume recognition sequence"),
        ("mbr", 510, b"\x55\xAA", "MBR/boot sector signature 0x55AA"),
        ("gpt 512", 512, b"EFI PART", "GPT header"),
        ("gpt 4k", 4096, b"EFI PART", "GPT header"),
        ("gpt backup", len - 512, b"EFI PART", "backup GPT header"),
        ("jfs", 0x8000, b"JFS1", "JFS superblock"),
        ("f2fs", 1024, b"\x10\x20\xF5\xF2", "F2FS superblock"),
        ("reiserfs", 0x10034, b"ReIsEr2Fs", "ReiserFS superblock"),
        (
            "bluestore",
            0,
            b"bluestore block device",
            "Ceph BlueStore label",
        ),
        ("vmfs", 2 * MIB, b"\x5e\xf1\xab\x2f", "VMFS superblock"),
        (
            "md 1.2",
            4096,
            &MD_MAGIC.to_le_bytes(),
            "Linux MD RAID superblock",
        ),
        (
            "md 1.1",
            0,
            &MD_MAGIC.to_le_bytes(),
            "Linux MD RAID superblock",
        ),
        (
            "md 1.0",
            len - 8 * KIB,
            &MD_MAGIC.to_le_bytes(),
            "Linux MD RAID superblock",
        ),
        (
            "md 0.90 (big-endian)",
            len - 64 * KIB,
            &MD_MAGIC.to_be_bytes(),
            "Linux MD RAID superblock",
        ),
        ("zfs label 0", 16 * KIB, zfs_nvlist, "ZFS label"),
        ("zfs label 1", 256 * KIB + 16 * KIB, zfs_nvlist, "ZFS label"),
        (
            "zfs label 3",
            len - 256 * KIB + 16 * KIB,
            zfs_nvlist,
            "ZFS label",
        ),
        (
            "bcachefs (end)",
            len - MIB + 24,
            b"\xc6\x85\x73\xf6\x66\xce\x90\xa9\xd9\x6a\x60\xcf\x80\x3d\xf7\xef",
            "bcachefs superblock",
        ),
    ];
    for &(case, offset, magic, what) in cases {
        let found = examine(&device(len, &[(offset, magic)]));
        assert!(
            found.iter().any(|f| f.what == what && f.offset == offset),
            "{case}: {:?}",
            whats(&found)
        );
        assert!(
            found.iter().all(|f| f.what != Finding::NON_ZERO),
            "{case}: a named signature needs no catch-all: {:?}",
            whats(&found)
        );
    }
}

/// ZFS labels at the end sit before the size aligned down to 256 KiB (`zfs.c` `label_offset`).
#[test]
fn zfs_end_labels_follow_the_256k_alignment() {
    let len = 10 * GIB + 100 * KIB;
    let aligned = 10 * GIB;
    let nv: &[u8] = &[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8];
    let found = examine(&device(len, &[(aligned - 512 * KIB + 16 * KIB, nv)]));
    assert_eq!(
        whats(&found),
        [("ZFS label", aligned - 512 * KIB + 16 * KIB)]
    );
    // The same bytes 100 KiB later are not where a label lives: only the catch-all sees them.
    let found = examine(&device(len, &[(len - 512 * KIB + 16 * KIB, nv)]));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].what, Finding::NON_ZERO);
}

/// A disk whose signature libblkid would need more bytes to accept (or one no table row names) is still not blank:
/// the first non-zero byte of each region is reported.
#[test]
fn unknown_non_zero_data_is_reported_by_its_first_byte_in_each_region() {
    let len = GIB;
    let found = examine(&device(len, &[(700_000, b"\x01"), (len - 3, b"xyz")]));
    assert_eq!(
        whats(&found),
        [(Finding::NON_ZERO, 700_000), (Finding::NON_ZERO, len - 3)]
    );
    let found = examine(&device(len, &[(HEAD_BYTES - 1, b"\x80")]));
    assert_eq!(whats(&found), [(Finding::NON_ZERO, HEAD_BYTES - 1)]);
    assert_eq!(
        found[0].to_string(),
        format!(
            "non-zero data (no known signature) at byte {}",
            HEAD_BYTES - 1
        )
    );
}

/// An NTFS volume written without a partition table: its boot sector carries two signatures, both named, once each.
#[test]
fn several_findings_are_sorted_and_described() {
    let found = examine(&device(
        GIB,
        &[
            (3, b"NTFS    "),
            (510, b"\x55\xAA"),
            (GIB - 512, b"EFI PART"),
        ],
    ));
    assert_eq!(
        whats(&found),
        [
            ("NTFS boot sector", 3),
            ("MBR/boot sector signature 0x55AA", 510),
            ("backup GPT header", GIB - 512)
        ]
    );
    assert_eq!(
        describe(&found, 2),
        "NTFS boot sector at byte 3; MBR/boot sector signature 0x55AA at byte 510; and 1 more"
    );
}

/// Devices shorter than the regions (head and tail overlap, end offsets underflow) and regions shorter than the
/// device says (a short read): never a panic, every offset inside the device, blank only when every byte is zero.
#[test]
fn odd_lengths_and_short_regions_never_panic() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..400 {
        let length = next() % (8 * MIB);
        // Mostly short regions (a short read), which keeps the debug build's scans quick.
        let head_len = (next() % (length + 1)).min(64 * KIB) as usize;
        let tail_len = (next() % (length + 1)).min(64 * KIB) as usize;
        let mut head = vec![0u8; head_len];
        let mut tail = vec![0u8; tail_len];
        for _ in 0..(next() % 4) {
            if !head.is_empty() {
                let i = (next() % head.len() as u64) as usize;
                head[i] = next() as u8;
            }
            if !tail.is_empty() {
                let i = (next() % tail.len() as u64) as usize;
                tail[i] = next() as u8;
            }
        }
        let dev = DeviceBytes { length, head, tail };
        let found = examine(&dev);
        assert!(
            found.iter().all(|f| f.offset < length.max(1)),
            "{dev:?}: {found:?}"
        );
        let blank = dev.head.iter().chain(&dev.tail).all(|&b| b == 0);
        assert_eq!(found.is_empty(), blank, "{dev:?}: {found:?}");
    }
}

/// The regions cover every offset of the table (so a magic is never silently out of reach; the custom probes' reach and
/// the alignment are compile-time assertions beside the constants).
#[test]
fn the_regions_cover_the_table_and_are_aligned() {
    for m in MAGICS {
        let longest = m.bytes.iter().map(|b| b.len() as u64).max().unwrap_or(0);
        match m.at {
            At::Start(offsets) => {
                for &o in offsets {
                    assert!(o + longest <= HEAD_BYTES, "{} at {o}", m.what);
                }
            }
            At::End(offsets) => {
                for &o in offsets {
                    assert!(o <= TAIL_BYTES && o >= longest, "{} at end - {o}", m.what);
                }
            }
        }
    }
}
