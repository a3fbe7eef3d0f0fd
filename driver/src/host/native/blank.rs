//! The guard before `MSFT_Disk.Initialize`: a RAW disk is initialised only when it is provably blank.
//!
//! `PartitionStyle` RAW means only "no MBR and no GPT" (reference review H1): a LUN another system formatted
//! directly on the device (ext4, XFS, an LVM physical volume, LUKS, a ZFS pool member, NTFS without a partition
//! table, …) is RAW too, and `Initialize` overwrites its first and last sectors. As SYSTEM the backend can read them:
//! [`winhost::signature::HEAD_BYTES`] from the start and [`winhost::signature::TAIL_BYTES`] from the end (every place
//! libblkid looks for a signature on a whole device), and it initialises only when nothing is there — no known
//! signature and no non-zero byte. A NULL or undocumented `PartitionStyle` is no proof of anything: refused too.
//! csi-proxy's API has no sector read, so only this backend can make the check (README, safety).

use winhost::codes::PartitionStyle;
use winhost::model::MsftDisk;
use winhost::signature::{HEAD_BYTES, TAIL_BYTES, describe, examine};

use super::{HostErrorKind, HostResult, Ops};

/// What the operator can do about a refused disk.
const ADVICE: &str = "If its data is not needed, wipe the LUN's first 4 MiB and last 2 MiB on the storage system \
                      (or initialise the disk by hand, e.g. Initialize-Disk), then retry; otherwise use another LUN";

/// Whether `PartitionStyle` calls for `Initialize`: `Ok(true)` for RAW, `Ok(false)` for MBR or GPT, an error text
/// for a NULL or undocumented value.
pub(super) fn needs_initialize(style: Option<PartitionStyle>) -> Result<bool, String> {
    match style {
        Some(PartitionStyle::Raw) => Ok(true),
        Some(PartitionStyle::Mbr | PartitionStyle::Gpt) => Ok(false),
        Some(other @ PartitionStyle::Unknown(_)) => Err(format!(
            "its partition style is {other}, neither RAW, MBR nor GPT"
        )),
        None => Err("Windows reports no partition style for it (NULL)".to_owned()),
    }
}

/// `Ok(true)` when the disk is RAW and provably blank (`Initialize` may run), `Ok(false)` when it is already MBR or
/// GPT; [`HostErrorKind::MayHoldData`] otherwise (nothing written). A read that could not finish keeps its uncertain
/// kind (the deadline passed: kubelet retries).
pub(super) fn may_initialize(o: &Ops<'_>, disk: &MsftDisk) -> HostResult<bool> {
    let n = disk.number;
    let refuse = |why: String| {
        o.fail(
            HostErrorKind::MayHoldData,
            format!("disk {n} {why}; it may hold another system's data, so it is not initialised. {ADVICE}"),
        )
    };
    if !needs_initialize(disk.partition_style).map_err(refuse)? {
        return Ok(false);
    }
    let device = disk
        .device_path
        .clone()
        .unwrap_or_else(|| format!(r"\\.\PhysicalDrive{n}"));
    let bytes = match o.w.read_device(o.c, &device, HEAD_BYTES, TAIL_BYTES) {
        Ok(b) => b,
        Err(e) => {
            let e = o.err(e);
            if e.kind.is_uncertain() {
                return Err(e);
            }
            return Err(refuse(format!(
                "has no partition table (RAW), and its first and last sectors could not be read to prove it blank \
                 ({})",
                e.message
            )));
        }
    };
    let found = examine(&bytes);
    if found.is_empty() {
        return Ok(true);
    }
    Err(refuse(format!(
        "has no partition table (RAW) but is not blank: {}",
        describe(&found, 4)
    )))
}
