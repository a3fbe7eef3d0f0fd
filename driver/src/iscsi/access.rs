//! Access modes of iSCSI volumes (issue 37 item 3): what NTFS on a LUN can serve, and what a reader-only stage never
//! does.
//!
//! | Access mode (Kubernetes) | iSCSI |
//! | --- | --- |
//! | `SINGLE_NODE_WRITER` (ReadWriteOnce), `SINGLE_NODE_SINGLE_WRITER` (ReadWriteOncePod), `SINGLE_NODE_MULTI_WRITER` | staged read-write: the disk's read-only flag is cleared where the backend can (native) |
//! | `SINGLE_NODE_READER_ONLY`, `MULTI_NODE_READER_ONLY` (ReadOnlyMany) | staged reader-only: never partitioned, formatted, resized or written by the driver; a LUN without an NTFS volume is refused; natively the disk is set read-only (`MSFT_Disk.SetAttributes(IsReadOnly = true)`) unless another volume staged on this node writes the same LUN |
//! | `MULTI_NODE_SINGLE_WRITER`, `MULTI_NODE_MULTI_WRITER` (ReadWriteMany) | refused, FAILED_PRECONDITION (the spec's "exceeds capabilities" for NodeStageVolume and NodePublishVolume): NTFS is no cluster file system, two nodes mounting it read-write corrupt it, and the lock that keeps two stages from partitioning and formatting one new LUN at once is per node |
//!
//! A publish that asks for a writer mode (and not `readonly`) of a volume staged reader-only is refused too: its disk
//! is read-only. SMB keeps every mode (a share serves many writers; `crate::smb`).

use crate::error::Error;
use crate::lifecycle::access_mode_name;
use crate::state::{AccessRecord, VolumeRecord};

/// `SINGLE_NODE_READER_ONLY` (2) and `MULTI_NODE_READER_ONLY` (3).
pub(super) fn reader_only(mode: i32) -> bool {
    matches!(mode, 2 | 3)
}

/// Whether a staged volume's record says it was staged reader-only.
pub(super) fn staged_reader_only(record: &VolumeRecord) -> bool {
    record
        .access
        .as_ref()
        .is_some_and(|a| reader_only(a.access_mode))
}

/// The multi-node writer modes NTFS cannot serve: FailedPrecondition (NodeStageVolume, NodePublishVolume).
pub(super) fn check_mode(mode: i32) -> Result<(), Error> {
    if !matches!(mode, 4 | 5) {
        return Ok(());
    }
    Err(Error::FailedPrecondition(format!(
        "access mode {} is not supported for iSCSI volumes: the LUN holds NTFS, which is not a cluster file system, \
         so two nodes mounting it for writing would corrupt it (and each node's lock that keeps two stages from \
         partitioning and formatting one new LUN is local to the node). Use ReadWriteOnce or ReadWriteOncePod \
         (SINGLE_NODE_*), or ReadOnlyMany (MULTI_NODE_READER_ONLY) for readers on many nodes",
        access_mode_name(mode)
    )))
}

/// NodePublishVolume of a staged iSCSI volume with `access`: the multi-node writer modes are refused, and a writer
/// publish of a volume staged reader-only.
pub(super) fn check_publish(
    record: &VolumeRecord,
    access: &AccessRecord,
    readonly: bool,
) -> Result<(), Error> {
    check_mode(access.access_mode)?;
    if staged_reader_only(record) && !reader_only(access.access_mode) && !readonly {
        return Err(Error::FailedPrecondition(format!(
            "volume {:?} is staged reader-only ({}), on a disk this driver keeps read-only; a publish for writing \
             ({}) exceeds that: publish it readonly, or unstage it and stage it with a writer access mode",
            record.volume_id,
            record
                .access
                .as_ref()
                .map_or_else(String::new, AccessRecord::describe),
            access_mode_name(access.access_mode)
        )));
    }
    Ok(())
}

/// The refusal of a reader-only stage that would have to write to `disk` (partition it, format it): `why` says what
/// the disk lacks.
pub(super) fn refuse_write(disk: &str, why: &str) -> Error {
    Error::FailedPrecondition(format!(
        "{disk} {why}, and the volume is staged reader-only (SINGLE_NODE_READER_ONLY or MULTI_NODE_READER_ONLY): a \
         reader-only stage never partitions, formats or writes to a disk. Stage it once with a writer access mode \
         (e.g. a ReadWriteOnce PV) to create its NTFS volume, or put the data on the LUN first; nothing was written"
    ))
}
