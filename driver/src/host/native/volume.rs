//! Volumes over `MSFT_Volume`, `MSFT_Partition` and the Win32 mount-point and volume functions (reference §2.4).

use winhost::codes::Win32Error;
use winhost::model::{FormatVolume, MsftVolume};
use winhost::paths::{LinkTarget, VolumeGuidPath, with_trailing_backslash};
use winhost::reparse::ReparsePoint;

use super::{HostErrorKind, HostObject, HostResult, Ops, inflight};

/// csi-proxy v1.2.0+ skips a resize that grows the partition by less than this (`pkg/os/volume/api.go:17`).
const MIN_RESIZE_GROWTH: u64 = 100 * 1024 * 1024;
/// Links followed from a path to its mount point (azuredisk follows 5, reference §2.4).
const MAX_HOPS: usize = 8;

fn guid(o: &Ops<'_>, volume_id: &str) -> HostResult<VolumeGuidPath> {
    VolumeGuidPath::parse(volume_id).ok_or_else(|| {
        o.fail(
            HostErrorKind::NotFound,
            format!("{volume_id:?} is not a volume GUID path (\\\\?\\Volume{{…}}\\)"),
        )
    })
}

/// The visible volume `volume_id` (NotFound when absent).
pub(super) fn one(o: &Ops<'_>, volume_id: &str) -> HostResult<MsftVolume> {
    let g = guid(o, volume_id)?;
    o.w.volumes(o.c, Some(&g.to_path()))
        .map_err(|e| o.err(e))?
        .into_iter()
        .next()
        .ok_or_else(|| o.fail(HostErrorKind::NotFound, format!("volume {g} not found")))
}

/// `GetDiskNumberFromVolumeID`: the disk of the volume's partition (`MSFT_PartitionToVolume`), NotFound when the
/// volume or its partition is not there.
pub(super) fn disk_number(o: &Ops<'_>, volume_id: &str) -> HostResult<u32> {
    let v = one(o, volume_id)?;
    o.w.volume_partitions(o.c, &v.path)
        .map_err(|e| o.err(e))?
        .first()
        .map(|p| p.disk_number)
        .ok_or_else(|| {
            o.fail(
                HostErrorKind::NotFound,
                format!("no partition behind {volume_id}"),
            )
        })
}

/// `MountVolume`: `SetVolumeMountPointW`; when the directory is taken (145), success only if it is this volume's mount
/// point already (csi-proxy v1.3.0's repeat rule, without its separate `GetLastError`).
pub(super) fn mount(o: &Ops<'_>, volume_id: &str, path: &str) -> HostResult<()> {
    let g = guid(o, volume_id)?;
    let mp = with_trailing_backslash(path);
    match o.w.set_volume_mount_point(o.c, &mp, &g) {
        Ok(()) => Ok(()),
        Err(e) if e.win32_code() == Some(Win32Error::DirNotEmpty) => {
            match o.w.volume_name_for_mount_point(o.c, &mp) {
                Ok(v) if v == g => Ok(()),
                Ok(v) => Err(o.fail(
                    HostErrorKind::AlreadyExists,
                    format!("{path} has volume {v} mounted, not {g}"),
                )),
                Err(_) => Err(o.fail(
                    HostErrorKind::AlreadyExists,
                    format!("{path} is not empty or is a link; a volume is mounted only on an empty directory"),
                )),
            }
        }
        Err(e) => Err(o.err(e)),
    }
}

/// `UnmountVolume`: flush the volume (skipped when it is gone: a dangling mount point can still be removed,
/// reference §3; and when the flush is refused on a read-only disk, which has nothing to flush: the flush needs a
/// `GENERIC_WRITE` handle, native-backend review M6), then `DeleteVolumeMountPointW`; NotFound when nothing is mounted
/// there. The directory stays.
pub(super) fn unmount(o: &Ops<'_>, volume_id: &str, path: &str) -> HostResult<()> {
    let g = guid(o, volume_id)?;
    match o.w.flush_volume(o.c, &g) {
        Ok(()) => {}
        Err(e) if e.kind() == winhost::ErrorKind::NotFound => {
            tracing::debug!(volume = %g, "volume gone: nothing to flush");
        }
        // How Windows refuses a flush through a read-only volume (19 write-protected or 5 access denied) is
        // **unverified** (real-node check 29); either is "nothing to flush" only when the disk is read-only.
        Err(e)
            if matches!(
                e.win32_code(),
                Some(Win32Error::WriteProtect | Win32Error::AccessDenied)
            ) && on_read_only_disk(o, volume_id)? =>
        {
            tracing::debug!(volume = %g, error = %e, "read-only volume: nothing to flush");
        }
        Err(e) => return Err(o.err(e)),
    }
    o.w.delete_volume_mount_point(o.c, &with_trailing_backslash(path))
        .map_err(|e| o.err(e))
}

/// Whether `volume_id`'s partition or disk is read-only (`MSFT_Volume` → its `MSFT_Partition` → `MSFT_Disk`).
fn on_read_only_disk(o: &Ops<'_>, volume_id: &str) -> HostResult<bool> {
    let v = one(o, volume_id)?;
    let Some(part) =
        o.w.volume_partitions(o.c, &v.path)
            .map_err(|e| o.err(e))?
            .into_iter()
            .next()
    else {
        return Ok(false);
    };
    Ok(part.is_read_only || super::disk::one(o, part.disk_number)?.is_read_only)
}

/// `WriteVolumeCache` (`FlushFileBuffers` on the volume device); `tolerate_gone`: a volume that vanished is fine.
pub(super) fn flush(o: &Ops<'_>, volume_id: &str, tolerate_gone: bool) -> HostResult<()> {
    let g = guid(o, volume_id)?;
    match o.w.flush_volume(o.c, &g) {
        Ok(()) => Ok(()),
        Err(e) if tolerate_gone && e.kind() == winhost::ErrorKind::NotFound => {
            tracing::debug!(volume = %g, "volume gone: nothing to flush");
            Ok(())
        }
        Err(e) => Err(o.err(e)),
    }
}

/// `FormatVolume`: quick NTFS, forced, no label (csi-proxy's parameters). Destructive: the driver decides.
///
/// `Format` is in the in-flight ledger while it runs (`inflight.rs`); nothing is started while a method an earlier
/// driver process called on the volume may still run.
pub(super) fn format(o: &Ops<'_>, volume_id: &str) -> HostResult<()> {
    let object = HostObject::Volume(volume_id.to_owned());
    o.calls.refuse_while_in_flight(o, &object)?;
    let v = one(o, volume_id)?;
    let called = o.calls.method(o, inflight::FORMAT, &object, None, None)?;
    let out =
        o.w.volume_format(o.c, &v.path, &FormatVolume::csi_proxy_quick_ntfs())
            .map_err(|e| o.err(e))?;
    drop(called);
    o.accept(out, &[]).map(|_| ())
}

/// `ResizeVolume`: the partition behind the volume to `size` (0: `SizeMax`), skipped when it would grow by less than
/// 100 MiB or not at all (csi-proxy v1.3.0's rule); never shrinks.
/// `Resize` is in the in-flight ledger while it runs, as `Format` is.
pub(super) fn resize(o: &Ops<'_>, volume_id: &str, size: u64) -> HostResult<()> {
    let object = HostObject::Volume(volume_id.to_owned());
    o.calls.refuse_while_in_flight(o, &object)?;
    let v = one(o, volume_id)?;
    let part =
        o.w.volume_partitions(o.c, &v.path)
            .map_err(|e| o.err(e))?
            .into_iter()
            .next()
            .ok_or_else(|| {
                o.fail(
                    HostErrorKind::NotFound,
                    format!("no partition behind {volume_id}"),
                )
            })?;
    let supported =
        o.w.partition_supported_size(o.c, &part.path)
            .map_err(|e| o.err(e))?;
    let max = o.accept(supported, &[])?.map_or(part.size, |s| s.max);
    let target = if size == 0 { max } else { size };
    if part.size >= target || target - part.size < MIN_RESIZE_GROWTH {
        return Ok(());
    }
    let called = o
        .calls
        .method(o, inflight::RESIZE, &object, None, Some(target))?;
    let out =
        o.w.partition_resize(o.c, &part.path, target)
            .map_err(|e| o.err(e))?;
    drop(called);
    o.accept(out, &[])
}

/// `GetVolumeStats`: `GetDiskFreeSpaceExW` on the volume (reference §3: no WMI); `(total, used)`.
pub(super) fn stats(o: &Ops<'_>, volume_id: &str) -> HostResult<(u64, u64)> {
    let g = guid(o, volume_id)?;
    let space =
        o.w.disk_free_space(o.c, &g.to_path())
            .map_err(|e| o.err(e))?;
    Ok((space.total, space.total.saturating_sub(space.free)))
}

/// `GetVolumeIDFromTargetPath`: follow links hop by hop (the reparse data, never resolving a dangling hop) to a volume
/// mount point, then ask Windows for the volume mounted there and check it is the one the reparse data names and that
/// it is present; anything that disagrees is an error, never a volume id (reference §2.4 "Dangling mount points").
pub(super) fn id_from_target_path(o: &Ops<'_>, path: &str) -> HostResult<String> {
    let mut cur = path.to_owned();
    for _ in 0..MAX_HOPS {
        let point = o.w.read_reparse_point(o.c, &cur).map_err(|e| {
            let mut err = o.err(e);
            if err.kind == HostErrorKind::NotFound {
                err.message = format!("{cur} is not a mounted folder: {}", err.message);
            }
            err
        })?;
        match (point.target(), &point) {
            (Some(LinkTarget::Volume(g)), ReparsePoint::MountPoint { .. }) => {
                let mp = with_trailing_backslash(&cur);
                let mounted =
                    o.w.volume_name_for_mount_point(o.c, &mp)
                        .map_err(|e| o.err(e))?;
                if mounted != g {
                    return Err(o.fail(
                        HostErrorKind::Other,
                        format!("{cur}: the mount point names {g} but Windows reports {mounted}"),
                    ));
                }
                match o.w.volume_information(o.c, &g.to_path()) {
                    Ok(_) => {}
                    Err(e) if e.win32_code() == Some(Win32Error::UnrecognizedVolume) => {}
                    Err(e) => return Err(o.err(e)),
                }
                return Ok(g.to_path());
            }
            (Some(LinkTarget::Local(next)), _) => cur = next,
            _ => {
                return Err(o.fail(
                    HostErrorKind::NotFound,
                    format!("{cur} is not a mounted folder (a link to a share or elsewhere)"),
                ));
            }
        }
    }
    Err(o.fail(
        HostErrorKind::Other,
        format!("{path}: more than {MAX_HOPS} links before a mount point"),
    ))
}
