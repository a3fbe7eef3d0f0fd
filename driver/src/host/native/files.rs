//! Filesystem operations over Win32 (reference §2.1): paths as the driver validated them (`X:\…` inside the
//! kubelet root, at most 260 bytes), links always made with `SYMBOLIC_LINK_FLAG_DIRECTORY` (D11), and links never
//! followed where the operation is about the link itself.

use winhost::ErrorKind;
use winhost::codes::Win32Error;
use winhost::model::SymlinkFlags;
use winhost::paths::{LinkTarget, UncParts, with_trailing_backslash};

use super::{HostErrorKind, HostResult, Ops, PathSpace};

fn is(e: &winhost::CallError, code: Win32Error) -> bool {
    e.win32_code() == Some(code)
}

/// `PathExists`: `GetFileAttributesW` does not follow the final link, so a dangling link exists (csi-proxy's
/// `os.Lstat`); not found and an invalid name are `false` (csi-proxy's `IsPathValid`).
pub(super) fn path_exists(o: &Ops<'_>, path: &str) -> HostResult<bool> {
    match o.w.file_attributes(o.c, path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound || is(&e, Win32Error::InvalidName) => Ok(false),
        Err(e) => Err(o.err(e)),
    }
}

/// The parent of a drive path (`None` at the drive root).
fn parent(path: &str) -> Option<&str> {
    let (p, _) = path.trim_end_matches('\\').rsplit_once('\\')?;
    (p.len() > 2).then_some(p)
}

/// `Mkdir` = Rust's `create_dir_all`: `CreateDirectoryW` each missing component; an existing entry is fine when it is
/// a directory or a link that resolves (a dangling link or mount point is AlreadyExists, as csi-proxy's Go < 1.23
/// `MkdirAll` answers, so the iSCSI stage can remove a mount point left dangling by a reboot).
pub(super) fn mkdir(o: &Ops<'_>, path: &str) -> HostResult<()> {
    let mut pending = vec![path.to_owned()];
    while let Some(p) = pending.last().cloned() {
        match o.w.create_directory(o.c, &p) {
            Ok(()) => {}
            Err(e) if is(&e, Win32Error::AlreadyExists) => {
                let tag = o.w.attribute_tag(o.c, &p).map_err(|e| o.err(e))?;
                let resolves = !tag.attributes.is_reparse_point()
                    || o.w
                        .final_path_name(o.c, &p, winhost::model::VolumeNameKind::Dos)
                        .is_ok();
                if !tag.attributes.is_directory() || !resolves {
                    return Err(o.fail(
                        HostErrorKind::AlreadyExists,
                        format!(
                            "{p}: Cannot create a file when that file already exists (it is {})",
                            if tag.attributes.is_directory() {
                                "a link or mount point that does not resolve"
                            } else {
                                "a file"
                            }
                        ),
                    ));
                }
            }
            Err(e) if is(&e, Win32Error::PathNotFound) => match parent(&p) {
                Some(up) if pending.len() < 64 => {
                    pending.push(up.to_owned());
                    continue;
                }
                _ => return Err(o.err(e)),
            },
            Err(e) => return Err(o.err(e)),
        }
        pending.pop();
    }
    Ok(())
}

/// `Rmdir`: without force `RemoveDirectoryW` (an empty directory, or a directory link or mount point itself),
/// falling back to `DeleteFileW` for a file or file link (267); with force the tree, never following a link
/// (Rust std `remove_dir_all`), not found counting as done.
pub(super) fn rmdir(o: &Ops<'_>, path: &str, force: bool) -> HostResult<()> {
    let first = if force {
        o.w.remove_tree(o.c, path)
    } else {
        o.w.remove_directory(o.c, path)
    };
    match first {
        Ok(()) => Ok(()),
        Err(e) if force && e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) if is(&e, Win32Error::Directory) => match o.w.delete_file(o.c, path) {
            Ok(()) => Ok(()),
            Err(e) if force && e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(o.err(e)),
        },
        Err(e) => Err(o.err(e)),
    }
}

/// `CreateSymlink`: a directory link at `link` to `target`, stored as given (fails when `link` exists).
pub(super) fn create_symlink(o: &Ops<'_>, link: &str, target: &str) -> HostResult<()> {
    o.w.create_symbolic_link(o.c, link, target, SymlinkFlags::DIRECTORY)
        .map_err(|e| o.err(e))
}

/// The share path of csi-proxy v1.3.0's and master's SMB links: their `NewSmbLink` appends `\` to the remote path
/// and then `\\?\` (`utils.EnsureLongPath`), so `CreateSymbolicLinkW` gets `\\?\\\server\share\dir\` and stores
/// the substitute name `\??\\\server\share\dir\` (`kubernetes-csi/csi-proxy@v1.3.0 pkg/os/smb/api.go:52-67`, the same at
/// master `eeba470`; reference D10), never the documented long UNC form `\??\UNC\…`. As `\\server\share\dir`, when
/// `target` is that form.
fn glued_unc(target: &LinkTarget) -> Option<String> {
    let LinkTarget::Other(name) = target else {
        return None;
    };
    let rest = name.strip_prefix(r"\??\\\")?;
    let unc = format!(r"\\{}", rest.trim_end_matches('\\'));
    UncParts::parse(&unc).map(|_| unc)
}

/// A link's target as a share path (`\??\UNC\…`, or csi-proxy's glued form: [`glued_unc`]) or a local path.
fn share_or_local(target: &LinkTarget) -> Option<String> {
    match target {
        LinkTarget::Unc(t) | LinkTarget::Local(t) => Some(t.clone()),
        other => glued_unc(other),
    }
}

/// `ReadLink`: the stored target of a symbolic link or junction at `path` (one hop, never resolved, so a link into a
/// share whose mapping is gone is read all the same) — a link csi-proxy v1.3.0 or master made into a share as the
/// share path it names ([`glued_unc`]); `None` for a volume mount point, a relative or foreign-namespace target,
/// another reparse tag or no reparse point at all.
pub(super) fn read_link(o: &Ops<'_>, path: &str) -> HostResult<Option<String>> {
    let point = match o.w.read_reparse_point(o.c, path) {
        Ok(p) => p,
        Err(e) if is(&e, Win32Error::NotAReparsePoint) => return Ok(None),
        Err(e) => return Err(o.err(e)),
    };
    Ok(point.target().as_ref().and_then(share_or_local))
}

/// `PathSpace`: `GetDiskFreeSpaceExW` on the directory `path`, with the trailing backslash a UNC name must have
/// (learn.microsoft.com, `GetDiskFreeSpaceExW`, `lpDirectoryName`); Windows performs it on a link's target
/// ("Symbolic link behavior"), so a pod path answers for the share its staging link points into.
pub(super) fn path_space(o: &Ops<'_>, path: &str) -> HostResult<PathSpace> {
    let s =
        o.w.disk_free_space(o.c, &with_trailing_backslash(path))
            .map_err(|e| o.err(e))?;
    Ok(PathSpace {
        total: s.total,
        available: s.available_to_caller,
        free: s.free,
    })
}

/// Whether a share target answered like an unreachable share rather than a broken call.
fn unreachable_share(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::NotFound
            | ErrorKind::NetworkPathNotFound
            | ErrorKind::NetworkNameNotFound
            | ErrorKind::LogonFailure
            | ErrorKind::AccessDenied
            | ErrorKind::MultipleConnections
    )
}

/// Links followed from a path to what it finally names.
const MAX_HOPS: usize = 8;

/// `IsSymlink`: a link (or mount point) whose target resolves. Local links are followed hop by hop through their
/// reparse data (so a publish link to a staging link whose share is gone does not resolve either); a link into a
/// share resolves only while the share's global mapping is OK (Disconnected after a reboot: `false`, so the volume
/// is reported abnormal, not an error: csi-proxy can only learn that from the access error, which it returns as an
/// error) and the path is reachable; a mount point while its volume is there.
pub(super) fn is_symlink(o: &Ops<'_>, path: &str) -> HostResult<bool> {
    let mut point = match o.w.read_reparse_point(o.c, path) {
        Ok(p) => p,
        Err(e) if is(&e, Win32Error::NotAReparsePoint) => return Ok(false),
        Err(e) => return Err(o.err(e)),
    };
    for _ in 0..MAX_HOPS {
        match point.target() {
            Some(LinkTarget::Volume(v)) => {
                return match o.w.volume_information(o.c, &v.to_path()) {
                    Ok(_) => Ok(true),
                    // A RAW volume is there all the same.
                    Err(e) if is(&e, Win32Error::UnrecognizedVolume) => Ok(true),
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
                    Err(e) => Err(o.err(e)),
                };
            }
            Some(LinkTarget::Local(target)) => match o.w.read_reparse_point(o.c, &target) {
                Ok(next) => point = next,
                Err(e) if is(&e, Win32Error::NotAReparsePoint) => return Ok(true),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(o.err(e)),
            },
            Some(LinkTarget::Unc(target)) => return share_resolves(o, &target),
            Some(other) => {
                // csi-proxy v1.3.0's and master's link into a share (a node moved from csiProxy to hostProcess mode
                // with pods running): the share must answer, and Windows must follow the link itself (whether it
                // follows that form is unverified, reference D10; if it does not, the pods' paths do not resolve
                // either).
                return match glued_unc(&other) {
                    Some(target) => Ok(share_resolves(o, &target)? && link_resolves(o, path)?),
                    // A relative link, another namespace or another tag.
                    None => Ok(false),
                };
            }
            None => return Ok(false),
        }
    }
    Ok(false)
}

/// Whether Windows follows every link of `path` to something (`GetFinalPathNameByHandleW`, which opens the path
/// following its links): a failure that is not an uncertain one is "no".
fn link_resolves(o: &Ops<'_>, path: &str) -> HostResult<bool> {
    match o
        .w
        .final_path_name(o.c, path, winhost::model::VolumeNameKind::Dos)
    {
        Ok(_) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DeadlineExceeded | ErrorKind::Unavailable | ErrorKind::Cancelled
            ) =>
        {
            Err(o.err(e))
        }
        Err(_) => Ok(false),
    }
}

/// Whether `target`, a path on a share, resolves: the share's mapping is OK (or re-establishing itself:
/// `Reconnecting` after a blip is not a broken volume) and the path answers.
fn share_resolves(o: &Ops<'_>, target: &str) -> HostResult<bool> {
    let Some(parts) = UncParts::parse(target) else {
        return Ok(false);
    };
    let root = parts.share_root();
    let usable = super::smb::mappings_of(o, &root)?
        .iter()
        .any(|m| m.status.is_ok() || m.status.is_settling());
    if !usable {
        return Ok(false);
    }
    match o.w.file_attributes(o.c, &with_trailing_backslash(target)) {
        Ok(_) => Ok(true),
        Err(e) if unreachable_share(e.kind()) => Ok(false),
        Err(e) => Err(o.err(e)),
    }
}
