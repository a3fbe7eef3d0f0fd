//! What is on a disk Windows calls RAW: the known on-disk signatures in its first and last bytes, found where
//! util-linux's libblkid looks for them, and any other non-zero byte there.
//!
//! `MSFT_Disk.PartitionStyle` 0 means only "no MBR and no GPT". A LUN that another system formatted directly on the
//! device (ext4, XFS, Btrfs, an LVM physical volume, LUKS, a ZFS pool member, NTFS or FAT without a partition table,
//! swap, …) shows as RAW too, and `Initialize` would overwrite its first and last sectors. The native backend reads
//! [`HEAD_BYTES`] from the start and [`TAIL_BYTES`] from the end of the device
//! ([`crate::facade::Win32Files::read_device`]) before `Initialize`, and initialises only when [`examine`] finds
//! nothing: no signature and no non-zero byte at all in those regions.
//!
//! Sources (cited per entry as `file:line`): util-linux `libblkid/src/superblocks/*.c`, `libblkid/src/partitions/gpt.c`,
//! `include/pt-mbr.h` and `libblkid/src/probe.c` at commit `39465c780` (v2.43-devel). libblkid locates a magic at
//! `kboff * 1024 + sboff` from the start of the device, or from its end when `kboff` is negative (`probe.c:1385-1388`);
//! the offsets below are those sums. The two regions cover every offset libblkid probes on a whole device:
//! - from the start, the furthest are LUKS2's secondary headers (up to 4 MiB, `luks.c:40-41`), VMFS (2 MiB,
//!   `vmfs.c:86`) and bcachefs' second superblock (2 MiB, `bcache.c:537-540`);
//! - from the end, Promise FastTrack RAID metadata (up to 3087 sectors, `promise_raid.c:31-33`), bcachefs' last
//!   superblock (1 MiB, `bcache.c:543-546`), ZFS labels 2 and 3 (the last 512 KiB before a 256 KiB boundary,
//!   `zfs.c:98-103`), MD RAID 0.90/1.0 superblocks (`linux_raid.c:248-261`) and the backup GPT header (the last LBA,
//!   `gpt.c:330`).
//!
//! The table names what it finds (several names for one spot are possible: an NTFS boot sector also carries the
//! 0x55AA signature); a region with non-zero bytes but no known signature is reported by its first non-zero byte.
//! Naming is for the operator: the verdict is "blank or not", so an unnamed format is refused all the same.

use std::fmt;

use crate::model::DeviceBytes;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Bytes read from the start of the device: 4 MiB + 4 KiB, LUKS2's last secondary header included (module docs). A
/// multiple of 4096, so the read is sector-aligned for 512- and 4096-byte sectors alike.
pub const HEAD_BYTES: u64 = 4 * MIB + 4 * KIB;

/// Bytes read from the end of the device: 2 MiB (module docs). A multiple of 4096.
pub const TAIL_BYTES: u64 = 2 * MIB;

/// Where a magic is looked for.
#[derive(Clone, Copy, Debug)]
enum At {
    /// Bytes from the start of the device.
    Start(&'static [u64]),
    /// Bytes before the end of the device (the magic starts there).
    End(&'static [u64]),
}

/// One row of the table: what it is, where, and the bytes that identify it (any of them).
struct Magic {
    what: &'static str,
    at: At,
    bytes: &'static [&'static [u8]],
}

/// libblkid's fixed-offset magics that can sit on a whole device (module docs for the citation's base).
const MAGICS: &[Magic] = &[
    // superblocks/xfs.c:271
    Magic {
        what: "XFS superblock",
        at: At::Start(&[0]),
        bytes: &[b"XFSB"],
    },
    // superblocks/ext.c:83-89,379-382: "\123\357" at 1 KiB + 0x38
    Magic {
        what: "ext2/ext3/ext4 superblock",
        at: At::Start(&[1024 + 0x38]),
        bytes: &[b"\x53\xEF"],
    },
    // superblocks/lvm.c:211-214: "LVM2 001" at 0x18 past the LABELONE label in sector 0, 1, 2 or 3
    Magic {
        what: "LVM2 physical volume label",
        at: At::Start(&[0x18, 0x218, 0x418, 0x618]),
        bytes: &[b"LVM2 001"],
    },
    // superblocks/luks.c:34 (LUKS1 and LUKS2 primary header)
    Magic {
        what: "LUKS header",
        at: At::Start(&[0]),
        bytes: &[b"LUKS\xBA\xBE"],
    },
    // superblocks/luks.c:35,40-41
    Magic {
        what: "LUKS2 secondary header",
        at: At::Start(&[
            0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000,
        ]),
        bytes: &[b"SKUL\xBA\xBE"],
    },
    // superblocks/btrfs.c:317: 64 KiB + 0x40
    Magic {
        what: "Btrfs superblock",
        at: At::Start(&[64 * KIB + 0x40]),
        bytes: &[b"_BHRfS_M"],
    },
    // superblocks/ntfs.c:257
    Magic {
        what: "NTFS boot sector",
        at: At::Start(&[3]),
        bytes: &[b"NTFS    "],
    },
    // superblocks/exfat.c:289
    Magic {
        what: "exFAT boot sector",
        at: At::Start(&[3]),
        bytes: &[b"EXFAT   "],
    },
    // superblocks/refs.c:22
    Magic {
        what: "ReFS boot sector",
        at: At::Start(&[0]),
        bytes: &[b"\0\0\0ReFS\0"],
    },
    // superblocks/vfat.c:451-452
    Magic {
        what: "FAT32 boot sector",
        at: At::Start(&[0x52]),
        bytes: &[b"FAT32   ", b"MSWIN"],
    },
    // superblocks/vfat.c:453-456
    Magic {
        what: "FAT12/FAT16 boot sector",
        at: At::Start(&[0x36]),
        bytes: &[b"FAT16   ", b"FAT12   ", b"FAT     ", b"MSDOS"],
    },
    // superblocks/bitlocker.c:76-80 (the jump instruction, then "-FVE-FS-")
    Magic {
        what: "BitLocker volume header",
        at: At::Start(&[3]),
        bytes: &[b"-FVE-FS-"],
    },
    // superblocks/swap.c:149-158: the last 10 bytes of a 4, 8, 16, 32 or 64 KiB page
    Magic {
        what: "Linux swap signature",
        at: At::Start(&[0xff6, 0x1ff6, 0x3ff6, 0x7ff6, 0xfff6]),
        bytes: &[b"SWAPSPACE2", b"SWAP-SPACE"],
    },
    // superblocks/iso9660.c:444
    Magic {
        what: "ISO 9660 volume descriptor",
        at: At::Start(&[32 * KIB + 1]),
        bytes: &[b"CD001"],
    },
    // superblocks/udf.c:607-613
    Magic {
        what: "UDF volume recognition sequence",
        at: At::Start(&[32 * KIB + 1]),
        bytes: &[b"BEA01", b"BOOT2", b"CDW02", b"NSR02", b"NSR03", b"TEA01"],
    },
    // superblocks/bcache.c:173-182,508-511: 4 KiB + 24
    Magic {
        what: "bcache superblock",
        at: At::Start(&[4 * KIB + 24]),
        bytes: &[b"\xc6\x85\x73\xf6\x4e\x1a\x45\xca\x82\x65\xf5\x7f\x48\xba\x6d\x81"],
    },
    // superblocks/bcache.c:174,531-546: 4 KiB, 2 MiB and 1 MiB before the end, + 24
    Magic {
        what: "bcachefs superblock",
        at: At::Start(&[4 * KIB + 24, 2 * MIB + 24]),
        bytes: &[b"\xc6\x85\x73\xf6\x66\xce\x90\xa9\xd9\x6a\x60\xcf\x80\x3d\xf7\xef"],
    },
    Magic {
        what: "bcachefs superblock",
        at: At::End(&[MIB - 24]),
        bytes: &[b"\xc6\x85\x73\xf6\x66\xce\x90\xa9\xd9\x6a\x60\xcf\x80\x3d\xf7\xef"],
    },
    // superblocks/bluestore.c:50
    Magic {
        what: "Ceph BlueStore label",
        at: At::Start(&[0]),
        bytes: &[b"bluestore block device"],
    },
    // superblocks/vdo.c:45
    Magic {
        what: "VDO volume",
        at: At::Start(&[0]),
        bytes: &[b"dmvdo001"],
    },
    // superblocks/squashfs.c:104,116-117
    Magic {
        what: "squashfs superblock",
        at: At::Start(&[0]),
        bytes: &[b"hsqs", b"sqsh"],
    },
    // superblocks/f2fs.c:14-19,131-134
    Magic {
        what: "F2FS superblock",
        at: At::Start(&[1024]),
        bytes: &[b"\x10\x20\xF5\xF2"],
    },
    // superblocks/jfs.c:71
    Magic {
        what: "JFS superblock",
        at: At::Start(&[32 * KIB]),
        bytes: &[b"JFS1"],
    },
    // superblocks/reiserfs.c:118-122
    Magic {
        what: "ReiserFS superblock",
        at: At::Start(&[64 * KIB + 0x34, 8 * KIB + 0x34, 8 * KIB + 20]),
        bytes: &[b"ReIsEr2Fs", b"ReIsEr3Fs", b"ReIsErFs"],
    },
    // superblocks/hfs.c:334,346-348
    Magic {
        what: "HFS/HFS+ volume header",
        at: At::Start(&[1024]),
        bytes: &[b"H+", b"HX", b"BD"],
    },
    // superblocks/apfs.c:115
    Magic {
        what: "APFS container superblock",
        at: At::Start(&[32]),
        bytes: &[b"NXSB"],
    },
    // superblocks/ocfs.c:200-203
    Magic {
        what: "OCFS2 superblock",
        at: At::Start(&[KIB, 2 * KIB, 4 * KIB, 8 * KIB]),
        bytes: &[b"OCFSV2"],
    },
    // superblocks/gfs.c:124,137
    Magic {
        what: "GFS/GFS2 superblock",
        at: At::Start(&[64 * KIB]),
        bytes: &[b"\x01\x16\x19\x70"],
    },
    // superblocks/vmfs.c:86,98
    Magic {
        what: "VMFS superblock",
        at: At::Start(&[2 * MIB]),
        bytes: &[b"\x5e\xf1\xab\x2f"],
    },
    Magic {
        what: "VMFS volume member",
        at: At::Start(&[MIB]),
        bytes: &[b"\x0d\xd0\x01\xc0"],
    },
    // include/pt-mbr.h:87-90 (partitions/dos.c:74): an MBR or any PC boot sector
    Magic {
        what: "MBR/boot sector signature 0x55AA",
        at: At::Start(&[510]),
        bytes: &[b"\x55\xAA"],
    },
    // partitions/gpt.c:28-30,328: LBA 1 with 512- or 4096-byte sectors
    Magic {
        what: "GPT header",
        at: At::Start(&[512, 4096]),
        bytes: &[b"EFI PART"],
    },
    // partitions/gpt.c:330: the last LBA
    Magic {
        what: "backup GPT header",
        at: At::End(&[512, 4096]),
        bytes: &[b"EFI PART"],
    },
];

// Both regions are sector-aligned for 512- and 4096-byte sectors, and the tail reaches Promise FastTrack's furthest
// metadata sector (3087 sectors before the end, `promise_raid.c:31-33`) and the ZFS end labels with the most alignment
// slack (two labels plus up to 256 KiB, `zfs.c:98-103`).
const _: () = assert!(HEAD_BYTES.is_multiple_of(4096) && TAIL_BYTES.is_multiple_of(4096));
const _: () = assert!(3087 * 512 <= TAIL_BYTES && 3 * ZFS_LABEL <= TAIL_BYTES);

/// `MD_SB_MAGIC` (`linux_raid.c:100`), little-endian on disk for 1.x, either order for 0.90.
const MD_MAGIC: u32 = 0xa92b_4efc;
/// ZFS: label size and the offset of its XDR-encoded name/value list (`zfs.c:20-21`).
const ZFS_LABEL: u64 = 256 * KIB;
const ZFS_NVLIST: u64 = 16 * KIB;

/// Something found in the regions read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What it is (`"ext2/ext3/ext4 superblock"`, …, or [`Finding::NON_ZERO`]).
    pub what: &'static str,
    /// Its byte offset from the start of the device.
    pub offset: u64,
}

impl Finding {
    /// What a non-zero byte no known signature explains is called.
    pub const NON_ZERO: &'static str = "non-zero data (no known signature)";
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

/// The bytes of the device at `offset..offset + len`, when one region holds them whole.
fn bytes_at(dev: &DeviceBytes, offset: u64, len: usize) -> Option<&[u8]> {
    let end = offset.checked_add(len as u64)?;
    if end > dev.length {
        return None;
    }
    if end <= dev.head.len() as u64 {
        return dev.head.get(offset as usize..end as usize);
    }
    let tail_start = dev.length.checked_sub(dev.tail.len() as u64)?;
    let from = offset.checked_sub(tail_start)?;
    dev.tail.get(from as usize..from as usize + len)
}

fn u32_at(dev: &DeviceBytes, offset: u64, big_endian: bool) -> Option<u32> {
    let b: [u8; 4] = bytes_at(dev, offset, 4)?.try_into().ok()?;
    Some(if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    })
}

/// MD RAID superblocks (`linux_raid.c:248-276`): 0.90 in the last 64 KiB-aligned 64 KiB (either byte order), 1.0 at
/// 8 KiB before the last 4 KiB boundary, 1.1 at 0, 1.2 at 4 KiB.
fn md_raid(dev: &DeviceBytes, out: &mut Vec<Finding>) {
    let len = dev.length;
    let v090 = (len & !(64 * KIB - 1)).checked_sub(64 * KIB);
    let v10 = (len & !(4 * KIB - 1)).checked_sub(8 * KIB);
    for (offset, both_orders) in [
        (v090, true),
        (v10, false),
        (Some(0), false),
        (Some(4 * KIB), false),
    ] {
        let Some(offset) = offset else { continue };
        let found = u32_at(dev, offset, false) == Some(MD_MAGIC)
            || (both_orders && u32_at(dev, offset, true) == Some(MD_MAGIC));
        if found {
            out.push(Finding {
                what: "Linux MD RAID superblock",
                offset,
            });
        }
    }
}

/// ZFS labels (`zfs.c:98-103,319-335`): four 256 KiB labels, two at the start and two at the end (after aligning the
/// size down to 256 KiB), each with an XDR name/value list 16 KiB in: encoding 1, endianness 0 or 1, a non-zero
/// first pair size.
fn zfs(dev: &DeviceBytes, out: &mut Vec<Finding>) {
    let aligned = dev.length - dev.length % ZFS_LABEL;
    let labels = [
        Some(0),
        Some(ZFS_LABEL),
        aligned.checked_sub(2 * ZFS_LABEL),
        aligned.checked_sub(ZFS_LABEL),
    ];
    for label in labels.into_iter().flatten() {
        let offset = label + ZFS_NVLIST;
        let Some(h) = bytes_at(dev, offset, 16) else {
            continue;
        };
        let first_size = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        if h[0] == 1 && h[1] <= 1 && first_size != 0 {
            out.push(Finding {
                what: "ZFS label",
                offset,
            });
        }
    }
}

/// The first non-zero byte of a region (device offset), if any.
fn first_non_zero(region: &[u8], start: u64) -> Option<u64> {
    region
        .iter()
        .position(|&b| b != 0)
        .map(|i| start + i as u64)
}

/// Everything found in `dev`: the named signatures (by offset, each once), or, when there is none, the first non-zero
/// byte of each region. Empty means the regions read are all zeros: the only answer on which a RAW disk may be
/// initialised.
pub fn examine(dev: &DeviceBytes) -> Vec<Finding> {
    let mut out = Vec::new();
    for m in MAGICS {
        let (offsets, from_end) = match m.at {
            At::Start(o) => (o, false),
            At::End(o) => (o, true),
        };
        for &o in offsets {
            let offset = if from_end {
                match dev.length.checked_sub(o) {
                    Some(x) => x,
                    None => continue,
                }
            } else {
                o
            };
            let hit = m
                .bytes
                .iter()
                .any(|magic| bytes_at(dev, offset, magic.len()) == Some(*magic));
            if hit {
                out.push(Finding {
                    what: m.what,
                    offset,
                });
            }
        }
    }
    md_raid(dev, &mut out);
    zfs(dev, &mut out);
    out.sort_by_key(|f| (f.offset, f.what));
    out.dedup();
    if out.is_empty() {
        let tail_start = dev.length.saturating_sub(dev.tail.len() as u64);
        for at in [
            first_non_zero(&dev.head, 0),
            first_non_zero(&dev.tail, tail_start),
        ]
        .into_iter()
        .flatten()
        {
            if !out.iter().any(|f| f.offset == at) {
                out.push(Finding {
                    what: Finding::NON_ZERO,
                    offset: at,
                });
            }
        }
    }
    out
}

/// The findings for a message: the first `max`, then how many more.
pub fn describe(findings: &[Finding], max: usize) -> String {
    let mut text = findings
        .iter()
        .take(max)
        .map(Finding::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if findings.len() > max {
        text.push_str(&format!("; and {} more", findings.len() - max));
    }
    text
}

#[cfg(test)]
mod tests;
