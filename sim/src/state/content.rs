//! The bytes on a disk's device, as a raw read sees them (the Windows view's `read_device`, which the native backend's
//! RAW-disk guard makes before `Initialize`): what a scenario put there (`DiskSpec::content`: another system's
//! whole-disk file system, an LVM label, …), under the partition table and boot sectors the model's own layout implies.
//!
//! The named formats are written where their tools write them, as util-linux libblkid finds them (commit `39465c780`;
//! `libblkid/src/superblocks/<file>.c`, cited per format). This table is the simulator's own: the native backend's
//! prober (`winhost::signature`) has its own table from the same source, so a wrong offset in either shows as a failed
//! refusal test rather than agreeing with itself.
//!
//! What the model's layout implies (so a raw read of a disk Windows initialised is not blank): a GPT disk reads a
//! protective MBR (type 0xEE, 0x55AA) and `EFI PART` at LBA 1 and at the last LBA (512-byte sectors); an MBR disk the
//! 0x55AA signature; an NTFS volume its boot sector's `NTFS    ` (partition offsets as `MSFT_Partition.Offset`
//! reports them). Initialising a disk drops the scenario's bytes: the data-loss event is recorded, and what
//! survives outside the new table is not modelled.

use std::collections::BTreeMap;

use super::Disk;
use crate::error::{Error, Result};
use crate::scenario::{ContentSpec, PartitionKind, PartitionStyle};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Bytes at offsets (absolute, from the start of the device).
pub type DiskContent = BTreeMap<u64, Vec<u8>>;

/// The writes of a named format on a disk of `size` bytes.
fn named(name: &str, size: u64) -> Option<Vec<(u64, Vec<u8>)>> {
    let w = |offset: u64, bytes: &[u8]| (offset, bytes.to_vec());
    let boot = |name: &[u8], at: u64| vec![w(0, b"\xEB\x52\x90"), w(at, name), w(510, b"\x55\xAA")];
    // A ZFS label's name/value list header (zfs.c:41-49,334): XDR encoding, big-endian, a first pair size.
    let nvlist = [1u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40];
    let aligned = size - size % (256 * KIB);
    Some(match name {
        // ext.c:83-89: the superblock at 1 KiB, s_magic 0xEF53 at 0x38.
        "ext4" => vec![w(1024 + 0x38, b"\x53\xEF"), w(1024, b"\x00\x40\x00\x00")],
        // xfs.c:271.
        "xfs" => vec![w(0, b"XFSB"), w(4, b"\x00\x00\x10\x00")],
        // lvm.c:211-214 (pvcreate writes the label to sector 1): "LABELONE", then "LVM2 001" at 0x18.
        "lvm2" => vec![w(512, b"LABELONE"), w(512 + 0x18, b"LVM2 001")],
        // luks.c:34: the LUKS1 header at 0.
        "luks1" => vec![w(0, b"LUKS\xBA\xBE\x00\x01")],
        // luks.c:34-35,40: the LUKS2 primary header at 0 and the secondary after a 16 KiB one.
        "luks2" => vec![
            w(0, b"LUKS\xBA\xBE\x00\x02"),
            w(16 * KIB, b"SKUL\xBA\xBE\x00\x02"),
        ],
        // btrfs.c:317: the superblock at 64 KiB, its magic 0x40 in.
        "btrfs" => vec![w(64 * KIB + 0x40, b"_BHRfS_M")],
        // zfs.c:98-103,319: four labels, two at the start and two at the end of the 256 KiB-aligned size.
        "zfs" => [
            0,
            256 * KIB,
            aligned.checked_sub(512 * KIB)?,
            aligned.checked_sub(256 * KIB)?,
        ]
        .into_iter()
        .map(|l| w(l + 16 * KIB, &nvlist))
        .collect(),
        // ntfs.c:257, the 0x55AA of every PC boot sector (include/pt-mbr.h:87-90).
        "ntfs" => boot(b"NTFS    ", 3),
        // vfat.c:452.
        "fat32" => boot(b"FAT32   ", 0x52),
        // exfat.c:289.
        "exfat" => boot(b"EXFAT   ", 3),
        // swap.c:150: mkswap on 4 KiB pages.
        "swap" => vec![w(0xff6, b"SWAPSPACE2"), w(1024, b"\x01\x00\x00\x00")],
        // linux_raid.c:100,276: an MD 1.2 superblock 4 KiB in (magic little-endian, major version 1).
        "linux_raid" => vec![
            w(4096, &0xa92b_4efcu32.to_le_bytes()),
            w(4100, b"\x01\x00\x00\x00"),
        ],
        // iso9660.c:444: the primary volume descriptor at 32 KiB.
        "iso9660" => vec![w(32 * KIB, b"\x01CD001\x01")],
        // A DOS partition table with one Linux partition (include/pt-mbr.h: entries at 446, type at +4).
        "mbr" => vec![
            w(446 + 4, b"\x83"),
            w(446 + 8, b"\x00\x08"),
            w(510, b"\x55\xAA"),
        ],
        // gpt.c:328-330: a protective MBR, the primary header at LBA 1, the backup at the last LBA.
        "gpt" => vec![
            w(446 + 4, b"\xEE"),
            w(510, b"\x55\xAA"),
            w(512, b"EFI PART"),
            w(size.checked_sub(512)?, b"EFI PART"),
        ],
        _ => return None,
    })
}

/// The named formats ([`named`]).
pub(crate) const SIGNATURES: &[&str] = &[
    "ext4",
    "xfs",
    "lvm2",
    "luks1",
    "luks2",
    "btrfs",
    "zfs",
    "ntfs",
    "fat32",
    "exfat",
    "swap",
    "linux_raid",
    "iso9660",
    "mbr",
    "gpt",
];

fn hex(text: &str) -> Option<Vec<u8>> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if t.is_empty() || !t.len().is_multiple_of(2) {
        return None;
    }
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(t.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A disk's content from its scenario entries (`disk` names it in errors).
pub(crate) fn resolve(specs: &[ContentSpec], size: u64, disk: &str) -> Result<DiskContent> {
    let bad = |why: String| Error::Scenario(format!("disk {disk}: content: {why}"));
    let mut out = DiskContent::new();
    for c in specs {
        let writes = match (&c.signature, &c.hex, &c.text) {
            (Some(name), None, None) => named(name, size).ok_or_else(|| {
                bad(format!(
                    "unknown signature {name:?} (or the disk is too small for it); known: {}",
                    SIGNATURES.join(", ")
                ))
            })?,
            (None, Some(h), None) => {
                let bytes = hex(h).ok_or_else(|| bad(format!("{h:?} is not hex bytes")))?;
                vec![(c.offset, bytes)]
            }
            (None, None, Some(t)) if !t.is_empty() => vec![(c.offset, t.as_bytes().to_vec())],
            _ => {
                return Err(bad(
                    "give exactly one of signature, hex and (non-empty) text".to_owned(),
                ));
            }
        };
        for (offset, bytes) in writes {
            let at = if c.from_end && c.signature.is_none() {
                size.checked_sub(offset)
            } else {
                Some(offset)
            };
            let at = at
                .filter(|&a| a + bytes.len() as u64 <= size)
                .ok_or_else(|| bad(format!("{} bytes at {offset} do not fit", bytes.len())))?;
            out.insert(at, bytes);
        }
    }
    Ok(out)
}

/// Whether any byte of `content` is non-zero.
pub(crate) fn holds_data(content: &DiskContent) -> bool {
    content.values().any(|b| b.iter().any(|&x| x != 0))
}

/// `len` bytes of `d`'s device from `offset`, zeros where nothing was written (module docs for what is).
pub(crate) fn read(d: &Disk, offset: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    let mut put = |at: u64, bytes: &[u8]| {
        for (i, &b) in bytes.iter().enumerate() {
            let x = at + i as u64;
            if x >= offset && x < offset + len {
                buf[(x - offset) as usize] = b;
            }
        }
    };
    match d.partition_style {
        PartitionStyle::Raw => {}
        PartitionStyle::Mbr => put(510, b"\x55\xAA"),
        PartitionStyle::Gpt => {
            put(446 + 4, b"\xEE");
            put(510, b"\x55\xAA");
            put(512, b"EFI PART");
            if let Some(last) = d.size.checked_sub(512) {
                put(last, b"EFI PART");
            }
        }
    }
    let mut at = MIB;
    for p in &d.partitions {
        let ntfs = p.kind != PartitionKind::Reserved
            && p.volume.as_ref().is_some_and(|v| {
                v.filesystem
                    .as_deref()
                    .is_some_and(|f| f.eq_ignore_ascii_case("NTFS"))
            });
        if ntfs {
            put(at + 3, b"NTFS    ");
            put(at + 510, b"\x55\xAA");
        }
        at += p.size;
    }
    for (&at, bytes) in &d.content {
        put(at, bytes);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> Vec<ContentSpec> {
        serde_json::from_value(json).expect("content spec")
    }

    #[test]
    fn named_formats_and_byte_ranges_resolve_to_absolute_offsets() {
        let size = 10 * 1024 * MIB;
        let c = resolve(
            &spec(serde_json::json!([
                {"signature": "ext4"},
                {"offset": 512, "from_end": true, "text": "EFI PART"},
                {"offset": 4096, "hex": "de ad be ef"}
            ])),
            size,
            "d",
        )
        .unwrap();
        assert_eq!(c.get(&1080).map(Vec::as_slice), Some(&b"\x53\xEF"[..]));
        assert_eq!(
            c.get(&(size - 512)).map(Vec::as_slice),
            Some(&b"EFI PART"[..])
        );
        assert_eq!(c.get(&4096), Some(&vec![0xde, 0xad, 0xbe, 0xef]));
        assert!(holds_data(&c));
        for name in SIGNATURES {
            let c = resolve(&spec(serde_json::json!([{ "signature": name }])), size, "d")
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(holds_data(&c), "{name}");
        }
        assert!(!holds_data(
            &resolve(&spec(serde_json::json!([{"hex": "0000"}])), size, "d").unwrap()
        ));
    }

    #[test]
    fn bad_entries_are_refused_with_the_disk_named() {
        for bad in [
            serde_json::json!([{"signature": "hfs"}]),
            serde_json::json!([{"hex": "abc"}]),
            serde_json::json!([{"hex": "zz"}]),
            serde_json::json!([{"text": ""}]),
            serde_json::json!([{}]),
            serde_json::json!([{"signature": "ext4", "text": "x"}]),
            serde_json::json!([{"offset": 4096, "text": "late"}]),
            serde_json::json!([{"offset": 5000, "from_end": true, "text": "x"}]),
        ] {
            let e = resolve(&spec(bad.clone()), 4096, "lun7").unwrap_err();
            assert!(e.to_string().contains("disk lun7: content"), "{bad}: {e}");
        }
    }
}
