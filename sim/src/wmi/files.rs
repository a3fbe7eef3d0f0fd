//! Win32 file, volume and device calls on the sandbox (reference §2.1, §2.4; Microsoft's pages of each function).
//!
//! Paths resolve as `walk.rs` describes (links followed where Windows follows them, shares checked by the model).
//! What the functions do on top, with their documented errors:
//! - `CreateDirectoryW`: 183 when anything is there (a dangling link too), 3 without the parent.
//! - `RemoveDirectoryW`: an empty directory, or a directory link / mount point itself (never its target); 145 when
//!   not empty, 2 when missing, 267 on a file (and on a file symlink: **unverified**, reference §2.1).
//! - `DeleteFileW`: a file or file symlink; 5 on a directory or directory link (**unverified** for the link).
//! - tree removal: Rust std `remove_dir_all`, which never follows links (reference §2.1).
//! - `CreateSymbolicLinkW`: 183 when the name exists, 3 without the parent; the target is stored as given; without
//!   `SYMBOLIC_LINK_FLAG_DIRECTORY` it is a file link, through which Windows will not list a directory (D11).
//!   `SeCreateSymbolicLinkPrivilege` is taken as held (README assumption 14).
//! - `SetVolumeMountPointW`: trailing `\` on both (123 otherwise), an existing empty directory (3 missing, 145 not
//!   empty or already a mount point or link); `DeleteVolumeMountPointW`: 4390 when not a mount point, the directory
//!   stays; works on a dangling mount point (reference §3).
//! - `GetVolumeNameForVolumeMountPointW`: trailing `\` (123), 4390 for a plain directory (both measured under Wine,
//!   reference §4), the volume of a drive root or mount point; a dangling mount point answers 2 (**unverified**:
//!   reference §2.4 "expected: an error such as 2, 3 or 87"), a symlink 4390 (**unverified**).
//! - `GetVolumeInformationW`: NTFS for a formatted volume, 1005 for a RAW one (**unverified** code, reference §5
//!   item 8), 3 for an unknown volume GUID (measured under Wine), 144 for a directory that is not a volume root.
//! - `GetDiskFreeSpaceExW`: a volume's partition size and the bytes stored; a share reports 1 TiB total (the model
//!   has no share capacity); the drive `C:` 256 GiB.
//! - the IOCTLs on `\\.\PhysicalDriveN`: the disk number, and page 0x83 as one device-associated identifier (binary
//!   NAA when the model's page83 is hex, else ASCII vendor id), so csi-proxy's choice gives the model's page83 back;
//!   5 for a disk `ListDiskIDs` cannot open.
//! - the raw read (`ReadFile` on `\\.\PhysicalDriveN`): the disk's bytes as `state/content.rs` models them, length
//!   `Size`; 2 for a disk that is not there, 5 for one that cannot be opened. Offline disks read too (**unverified**:
//!   whether Windows serves raw reads of a disk offline by policy; the driver onlines a LUN before it reads).

use std::path::Path;

use serde_json::json;
use winhost::codes::Win32Error;
use winhost::model::{
    AttributeTag, DeviceBytes, FileAttributes, FreeSpace, StorageDeviceNumber, SymlinkFlags,
    VolumeInformation, VolumeNameKind,
};
use winhost::page83::{ASSOCIATION_DEVICE, CODE_SET_ASCII, CODE_SET_BINARY, StorageIdentifier};
use winhost::paths::VolumeGuidPath;
use winhost::reparse::{IO_REPARSE_TAG_MOUNT_POINT, IO_REPARSE_TAG_SYMLINK, ReparsePoint};
use winhost::{CallContext, CallError, CallResult, Win32Files};

use super::WindowsView;
use super::walk::{
    DIRECTORY, FILE_NOT_FOUND, INVALID_NAME, Kind, Located, PATH_NOT_FOUND, Root, WinPath,
    link_target, locate, open, target_path, windows_name,
};
use crate::state::{Disk, State, dir_usage};

const ACCESS_DENIED: u32 = 5;
const WRITE_PROTECT: u32 = 19;
const ALREADY_EXISTS: u32 = 183;
const DIR_NOT_EMPTY: u32 = 145;
const NOT_A_REPARSE_POINT: u32 = 4390;
const UNRECOGNIZED_VOLUME: u32 = 1005;
const DIR_NOT_ROOT: u32 = 144;
/// The volume GUID of the simulated `C:` drive (Wine answers this synthetic form, reference §4).
const SYSTEM_VOLUME: &str = "00000000-0000-0000-0000-000000000043";

fn err<'a>(function: &'static str, path: &'a str) -> impl Fn(u32) -> CallError + 'a {
    move |code| CallError::win32(function, path, Win32Error::from_code(code))
}

fn io<'a>(function: &'static str, path: &'a str) -> impl Fn(std::io::Error) -> CallError + 'a {
    move |e| {
        let code = match e.kind() {
            std::io::ErrorKind::NotFound => FILE_NOT_FOUND,
            std::io::ErrorKind::AlreadyExists => ALREADY_EXISTS,
            std::io::ErrorKind::DirectoryNotEmpty => DIR_NOT_EMPTY,
            std::io::ErrorKind::PermissionDenied => ACCESS_DENIED,
            _ => 1117,
        };
        CallError::win32(function, path, Win32Error::from_code(code))
    }
}

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).is_ok_and(|mut rd| rd.next().is_none())
}

/// The mount-point argument of the volume functions: a trailing `\` is required (123 otherwise, reference §2.4).
fn mount_point_arg(path: &str) -> Result<&str, u32> {
    path.strip_suffix('\\')
        .filter(|p| !p.is_empty())
        .ok_or(INVALID_NAME)
}

/// The disk and partition of visible volume `guid`.
fn volume_at(st: &State, guid: &str) -> Option<(usize, usize)> {
    st.find_volume(&format!(r"\\?\Volume{{{guid}}}\"))
}

/// The scenario volume with drive letter `letter`, if visible.
fn drive_volume(st: &State, letter: char) -> Option<(usize, usize)> {
    st.disks.iter().enumerate().find_map(|(di, d)| {
        d.volumes_visible()
            .then(|| {
                (0..d.partitions.len()).find(|&pi| {
                    d.visible_volume(pi)
                        .is_some_and(|v| v.drive_letter == Some(letter.to_ascii_uppercase()))
                })
            })
            .flatten()
            .map(|pi| (di, pi))
    })
}

fn guid_of(st: &State, (di, pi): (usize, usize)) -> String {
    st.disks[di].partitions[pi]
        .volume
        .as_ref()
        .map(|v| v.guid.clone())
        .unwrap_or_default()
}

/// The volume GUID of a drive root (`C:` falls back to the synthetic system volume).
fn drive_guid(st: &State, letter: char) -> Option<String> {
    match drive_volume(st, letter) {
        Some(at) => Some(guid_of(st, at)),
        None if letter.eq_ignore_ascii_case(&'c') => Some(SYSTEM_VOLUME.to_owned()),
        None => None,
    }
}

fn attributes(kind: &Kind) -> u32 {
    match kind {
        Kind::Missing => 0,
        Kind::File => 0x20,
        Kind::Dir => FileAttributes::DIRECTORY,
        Kind::Link {
            file_link: true, ..
        } => FileAttributes::REPARSE_POINT | 0x20,
        Kind::Link { .. } => FileAttributes::DIRECTORY | FileAttributes::REPARSE_POINT,
    }
}

/// The disk behind `\\.\PhysicalDriveN` (the `Path` this host gives `MSFT_Disk`).
fn device_disk<'a>(st: &'a State, device: &str) -> Result<&'a Disk, u32> {
    let n: u32 = device
        .strip_prefix(r"\\.\PhysicalDrive")
        .or_else(|| device.strip_prefix(r"\\?\PhysicalDrive"))
        .and_then(|n| n.parse().ok())
        .ok_or(FILE_NOT_FOUND)?;
    let d = st
        .disks
        .iter()
        .find(|d| d.number == Some(n) && d.present())
        .ok_or(FILE_NOT_FOUND)?;
    if d.unopenable {
        return Err(ACCESS_DENIED);
    }
    Ok(d)
}

impl WindowsView {
    fn win32<T>(
        &self,
        ctx: &CallContext,
        function: &'static str,
        path: &str,
        f: impl FnOnce(&mut State) -> Result<T, u32>,
    ) -> CallResult<T> {
        self.call(ctx, function, json!({ "path": path }), |st| {
            f(st).map_err(err(function, path))
        })
    }
}

/// Remove the link at `located` (a file or directory link), forgetting it is a file link.
fn remove_link(st: &mut State, located: &Located) -> Result<(), u32> {
    crate::state::fs::remove_link(&located.real).map_err(|_| ACCESS_DENIED)?;
    st.file_links.remove(&located.real);
    Ok(())
}

impl Win32Files for WindowsView {
    fn create_directory(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        self.win32(ctx, "CreateDirectoryW", path, |st| {
            let at = open(st, path, false)?;
            if at.kind != Kind::Missing {
                return Err(ALREADY_EXISTS);
            }
            std::fs::create_dir(&at.real).map_err(|_| PATH_NOT_FOUND)
        })
    }

    fn remove_directory(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        self.win32(ctx, "RemoveDirectoryW", path, |st| {
            let at = open(st, path, false)?;
            match &at.kind {
                Kind::Missing => Err(FILE_NOT_FOUND),
                Kind::File
                | Kind::Link {
                    file_link: true, ..
                } => Err(DIRECTORY),
                Kind::Link { .. } => remove_link(st, &at),
                Kind::Dir if !is_empty_dir(&at.real) => Err(DIR_NOT_EMPTY),
                Kind::Dir => std::fs::remove_dir(&at.real).map_err(|_| DIR_NOT_EMPTY),
            }
        })
    }

    fn delete_file(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        self.win32(ctx, "DeleteFileW", path, |st| {
            let at = open(st, path, false)?;
            match &at.kind {
                Kind::Missing => Err(FILE_NOT_FOUND),
                Kind::Dir
                | Kind::Link {
                    file_link: false, ..
                } => Err(ACCESS_DENIED),
                Kind::Link { .. } => remove_link(st, &at),
                Kind::File => std::fs::remove_file(&at.real).map_err(|_| ACCESS_DENIED),
            }
        })
    }

    fn remove_tree(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        self.win32(ctx, "RemoveDirectoryTree", path, |st| {
            let at = open(st, path, false)?;
            match &at.kind {
                Kind::Missing => Err(FILE_NOT_FOUND),
                Kind::File => Err(DIRECTORY),
                Kind::Link { .. } => remove_link(st, &at),
                Kind::Dir => {
                    std::fs::remove_dir_all(&at.real).map_err(|_| ACCESS_DENIED)?;
                    st.file_links.retain(|l| !l.starts_with(&at.real));
                    Ok(())
                }
            }
        })
    }

    fn create_symbolic_link(
        &self,
        ctx: &CallContext,
        link: &str,
        target: &str,
        flags: SymlinkFlags,
    ) -> CallResult<()> {
        const CALL: &str = "CreateSymbolicLinkW";
        let args = json!({ "link": link, "target": target, "flags": flags.bits() });
        self.call(ctx, CALL, args, |st| {
            let fail = err(CALL, link);
            let at = open(st, link, false).map_err(&fail)?;
            if at.kind != Kind::Missing {
                return Err(fail(ALREADY_EXISTS));
            }
            // Any other target form (relative, another namespace) is stored by Windows but not representable here.
            let real_target = link_target(st, target).map_err(|_| fail(50))?;
            st.layout
                .links()
                .create(&real_target, &at.real)
                .map_err(io(CALL, link))?;
            if flags.directory {
                st.file_links.remove(&at.real);
            } else {
                st.file_links.insert(at.real.clone());
            }
            Ok(())
        })
    }

    fn file_attributes(&self, ctx: &CallContext, path: &str) -> CallResult<FileAttributes> {
        self.win32(ctx, "GetFileAttributesW", path, |st| {
            let at = open(st, path, false)?;
            match at.kind {
                Kind::Missing => Err(FILE_NOT_FOUND),
                kind => Ok(FileAttributes(attributes(&kind))),
            }
        })
    }

    fn attribute_tag(&self, ctx: &CallContext, path: &str) -> CallResult<AttributeTag> {
        self.win32(ctx, "GetFileInformationByHandleEx", path, |st| {
            let at = open(st, path, false)?;
            let tag = match (&at.kind, at.mount_point_guid(st)) {
                (Kind::Missing, _) => return Err(FILE_NOT_FOUND),
                (Kind::Link { .. }, Some(_)) => IO_REPARSE_TAG_MOUNT_POINT,
                (Kind::Link { .. }, None) => IO_REPARSE_TAG_SYMLINK,
                _ => 0,
            };
            Ok(AttributeTag {
                attributes: FileAttributes(attributes(&at.kind)),
                reparse_tag: tag,
            })
        })
    }

    /// The reparse data as Windows stores it: `\??\Volume{GUID}\` for a mount point, `\??\C:\…` for a local link,
    /// `\??\UNC\server\share\…` for a link to a share, and `\??\\\server\share\…` for csi-proxy v1.3.0's glued form.
    fn read_reparse_point(&self, ctx: &CallContext, path: &str) -> CallResult<ReparsePoint> {
        self.win32(ctx, "FSCTL_GET_REPARSE_POINT", path, |st| {
            let at = open(st, path, false)?;
            let Kind::Link { target, .. } = &at.kind else {
                return Err(if at.kind == Kind::Missing {
                    FILE_NOT_FOUND
                } else {
                    NOT_A_REPARSE_POINT
                });
            };
            if let Some(guid) = at.mount_point_guid(st) {
                return Ok(ReparsePoint::MountPoint {
                    substitute_name: format!(r"\??\Volume{{{guid}}}\"),
                    print_name: String::new(),
                });
            }
            let long_form = target.starts_with(st.layout.unc_long_dir());
            let print = match st.layout.to_windows(target) {
                Some(w) if long_form => w.trim_start_matches(r"\\?\").to_owned(),
                // The sandbox does not keep a trailing `\` apart: shown without one, as the driver creates them.
                Some(w) => w.trim_end_matches('\\').to_owned(),
                None => return Err(FILE_NOT_FOUND),
            };
            let substitute = if long_form {
                format!(r"\??\{print}")
            } else if let Some(unc) = print.strip_prefix(r"\\") {
                format!(r"\??\UNC\{unc}")
            } else {
                format!(r"\??\{print}")
            };
            Ok(ReparsePoint::Symlink {
                substitute_name: substitute,
                print_name: print,
                relative: false,
            })
        })
    }

    fn final_path_name(
        &self,
        ctx: &CallContext,
        path: &str,
        kind: VolumeNameKind,
    ) -> CallResult<String> {
        self.win32(ctx, "GetFinalPathNameByHandleW", path, |st| {
            let at = open(st, path, true)?;
            if at.kind == Kind::Missing {
                return Err(FILE_NOT_FOUND);
            }
            let name = windows_name(st, &at.real).ok_or(FILE_NOT_FOUND)?;
            let name = name.trim_end_matches('\\').to_owned();
            Ok(match (kind, name.strip_prefix(r"\\")) {
                (_, Some(rest)) if !rest.starts_with("?\\") => format!(r"\\?\UNC\{rest}"),
                (VolumeNameKind::Guid, _) if name.as_bytes().get(1) == Some(&b':') => {
                    let guid = drive_guid(st, name.chars().next().unwrap_or('C'))
                        .unwrap_or_else(|| SYSTEM_VOLUME.to_owned());
                    format!(r"\\?\Volume{{{guid}}}{}", &name[2..])
                }
                (_, _) if name.starts_with(r"\\?\") => name,
                _ => format!(r"\\?\{name}"),
            })
        })
    }

    fn set_volume_mount_point(
        &self,
        ctx: &CallContext,
        mount_point: &str,
        volume: &VolumeGuidPath,
    ) -> CallResult<()> {
        const CALL: &str = "SetVolumeMountPointW";
        let args = json!({ "mount_point": mount_point, "volume": volume.to_path() });
        self.call(ctx, CALL, args, |st| {
            let fail = err(CALL, mount_point);
            let dir = mount_point_arg(mount_point).map_err(&fail)?;
            if volume_at(st, volume.guid()).is_none() {
                return Err(fail(FILE_NOT_FOUND));
            }
            let at = open(st, dir, false).map_err(&fail)?;
            match at.kind {
                Kind::Missing => Err(fail(PATH_NOT_FOUND)),
                Kind::File => Err(fail(DIRECTORY)),
                Kind::Link { .. } => Err(fail(DIR_NOT_EMPTY)),
                Kind::Dir if !is_empty_dir(&at.real) => Err(fail(DIR_NOT_EMPTY)),
                Kind::Dir => {
                    std::fs::remove_dir(&at.real).map_err(io(CALL, mount_point))?;
                    st.layout
                        .links()
                        .create(&st.layout.volume_link(volume.guid()), &at.real)
                        .map_err(io(CALL, mount_point))
                }
            }
        })
    }

    fn delete_volume_mount_point(&self, ctx: &CallContext, mount_point: &str) -> CallResult<()> {
        self.win32(ctx, "DeleteVolumeMountPointW", mount_point, |st| {
            let dir = mount_point_arg(mount_point)?;
            let at = open(st, dir, false)?;
            if at.kind == Kind::Missing {
                return Err(FILE_NOT_FOUND);
            }
            if at.mount_point_guid(st).is_none() {
                return Err(NOT_A_REPARSE_POINT);
            }
            remove_link(st, &at)?;
            std::fs::create_dir(&at.real).map_err(|_| ACCESS_DENIED)
        })
    }

    fn volume_name_for_mount_point(
        &self,
        ctx: &CallContext,
        mount_point: &str,
    ) -> CallResult<VolumeGuidPath> {
        self.win32(
            ctx,
            "GetVolumeNameForVolumeMountPointW",
            mount_point,
            |st| {
                let dir = mount_point_arg(mount_point)?;
                let wp = WinPath::parse(dir)?;
                let guid = match (&wp.root, wp.components.is_empty()) {
                    (Root::Drive(d), true) => drive_guid(st, *d).ok_or(PATH_NOT_FOUND)?,
                    (Root::Volume(g), true) => g.clone(),
                    _ => {
                        let at = locate(st, &wp, false)?;
                        match (&at.kind, at.mount_point_guid(st)) {
                            (Kind::Missing, _) => return Err(FILE_NOT_FOUND),
                            (Kind::Link { .. }, Some(g)) if volume_at(st, &g).is_some() => g,
                            (Kind::Link { .. }, Some(_)) => return Err(FILE_NOT_FOUND),
                            _ => return Err(NOT_A_REPARSE_POINT),
                        }
                    }
                };
                VolumeGuidPath::parse(&format!(r"\\?\Volume{{{guid}}}\")).ok_or(FILE_NOT_FOUND)
            },
        )
    }

    /// The root of the volume holding `path`, every link followed: the last live mount point crossed, or the
    /// share, or the drive. A dangling mount point is crossed as the directory it is (the containing volume's root
    /// answers: the dangerous fallback reference §2.4 warns of; **unverified**).
    fn volume_path_name(&self, ctx: &CallContext, path: &str) -> CallResult<String> {
        self.win32(ctx, "GetVolumePathNameW", path, |st| {
            let mut wp = WinPath::parse(path)?;
            let mut root = volume_root_of(&wp);
            let mut i = 0;
            let mut hops = 0;
            while i < wp.components.len() {
                let prefix = WinPath {
                    root: wp.root.clone(),
                    components: wp.components[..=i].to_vec(),
                };
                let at = match locate(st, &prefix, false) {
                    Ok(at) => at,
                    Err(_) => break,
                };
                if let Kind::Link { target, .. } = &at.kind {
                    if let Some(g) = at.mount_point_guid(st) {
                        if volume_at(st, &g).is_some() {
                            root = format!("{}\\", prefix.display());
                        }
                    } else if hops < 40 {
                        hops += 1;
                        let mut next = target_path(st, target)?;
                        next.components
                            .extend(wp.components[i + 1..].iter().cloned());
                        root = volume_root_of(&next);
                        wp = next;
                        i = 0;
                        continue;
                    }
                }
                i += 1;
            }
            Ok(root)
        })
    }

    fn volume_path_names(
        &self,
        ctx: &CallContext,
        volume: &VolumeGuidPath,
    ) -> CallResult<Vec<String>> {
        self.win32(
            ctx,
            "GetVolumePathNamesForVolumeNameW",
            &volume.to_path(),
            |st| {
                let at = volume_at(st, volume.guid()).ok_or(FILE_NOT_FOUND)?;
                let mut out = Vec::new();
                if let Some(v) = st.disks[at.0].partitions[at.1].volume.as_ref()
                    && let Some(l) = v.drive_letter
                {
                    out.push(format!(r"{l}:\"));
                }
                out.extend(st.mount_points_of(volume.guid()));
                Ok(out)
            },
        )
    }

    fn volume_information(&self, ctx: &CallContext, root: &str) -> CallResult<VolumeInformation> {
        self.win32(ctx, "GetVolumeInformationW", root, |st| {
            let dir = mount_point_arg(root)?;
            let wp = WinPath::parse(dir)?;
            let at = match (&wp.root, wp.components.is_empty()) {
                (Root::Volume(g), true) => Some(volume_at(st, g).ok_or(PATH_NOT_FOUND)?),
                (Root::Drive(d), true) => drive_volume(st, *d),
                (Root::Share(..), true) => None,
                _ => {
                    let at = locate(st, &wp, false)?;
                    let g = at.mount_point_guid(st).ok_or(DIR_NOT_ROOT)?;
                    Some(volume_at(st, &g).ok_or(PATH_NOT_FOUND)?)
                }
            };
            let fs = match at {
                Some((di, pi)) => st.disks[di].partitions[pi]
                    .volume
                    .as_ref()
                    .and_then(|v| v.filesystem.clone())
                    .ok_or(UNRECOGNIZED_VOLUME)?,
                None => "NTFS".to_owned(),
            };
            Ok(VolumeInformation {
                label: String::new(),
                serial_number: 0x5EED_0000 | at.map_or(0, |(di, _)| di as u32),
                max_component_length: 255,
                file_system_flags: 0x0001_00ff,
                file_system_name: fs,
            })
        })
    }

    fn disk_free_space(&self, ctx: &CallContext, path: &str) -> CallResult<FreeSpace> {
        self.win32(ctx, "GetDiskFreeSpaceExW", path, |st| {
            let at = open(st, path.trim_end_matches('\\'), true)?;
            if !matches!(at.kind, Kind::Dir) {
                return Err(if at.kind == Kind::Missing {
                    PATH_NOT_FOUND
                } else {
                    DIRECTORY
                });
            }
            let rel = at.real.strip_prefix(st.layout.root()).unwrap_or(&at.real);
            let parts: Vec<String> = rel
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            let (total, used) = match parts.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["store", "volumes", guid, ..] => {
                    let (di, pi) = volume_at(st, guid).ok_or(PATH_NOT_FOUND)?;
                    // A volume without a file system Windows reads (new, damaged NTFS, locked BitLocker): 1005, as
                    // `GetVolumeInformationW` (unverified; docs/real-node-checks.md, "Volumes Windows no longer
                    // reads").
                    if st.disks[di].partitions[pi]
                        .volume
                        .as_ref()
                        .is_none_or(|v| v.filesystem.is_none())
                    {
                        return Err(UNRECOGNIZED_VOLUME);
                    }
                    let size = st.disks[di].partitions[pi].size;
                    let used = dir_usage(&st.layout.volume_store(guid)).bytes.min(size);
                    (size, used)
                }
                ["store", "shares", server, share, ref rest @ ..] => st
                    .servers
                    .get(server)
                    .and_then(|s| s.shares.get(share))
                    .ok_or(PATH_NOT_FOUND)?
                    .space_at(
                        &st.layout.share_store(server, share),
                        &rest.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>(),
                    ),
                [drive, ..] => {
                    let total = 256 << 30;
                    (
                        total,
                        dir_usage(&st.layout.root().join(drive)).bytes.min(total),
                    )
                }
                [] => return Err(PATH_NOT_FOUND),
            };
            Ok(FreeSpace {
                available_to_caller: total - used,
                total,
                free: total - used,
            })
        })
    }

    /// `FlushFileBuffers` on the volume device (opened `GENERIC_READ | GENERIC_WRITE`): 2 when the volume is gone;
    /// 19 on a read-only disk (**unverified**, native-backend review M6: `host.behaviour.read_only_flush_fails`).
    fn flush_volume(&self, ctx: &CallContext, volume: &VolumeGuidPath) -> CallResult<()> {
        self.win32(ctx, "FlushFileBuffers", &volume.to_device(), |st| {
            let (di, _) = volume_at(st, volume.guid()).ok_or(FILE_NOT_FOUND)?;
            if st.disks[di].read_only && st.behaviour.read_only_flush_fails {
                return Err(WRITE_PROTECT);
            }
            Ok(())
        })
    }

    fn storage_device_number(
        &self,
        ctx: &CallContext,
        device: &str,
    ) -> CallResult<StorageDeviceNumber> {
        self.win32(ctx, "IOCTL_STORAGE_GET_DEVICE_NUMBER", device, |st| {
            let d = device_disk(st, device)?;
            Ok(StorageDeviceNumber {
                device_type: 7,
                device_number: d.number.unwrap_or_default(),
                partition_number: 0,
            })
        })
    }

    fn storage_device_identifiers(
        &self,
        ctx: &CallContext,
        device: &str,
    ) -> CallResult<Vec<StorageIdentifier>> {
        self.win32(ctx, "IOCTL_STORAGE_QUERY_PROPERTY", device, |st| {
            let d = device_disk(st, device)?;
            let id = d.page83.trim();
            if id.is_empty() {
                return Ok(Vec::new());
            }
            let hex = id.len() % 2 == 0 && id.bytes().all(|b| b.is_ascii_hexdigit());
            Ok(vec![if hex {
                StorageIdentifier {
                    code_set: CODE_SET_BINARY,
                    id_type: 3,
                    association: ASSOCIATION_DEVICE,
                    identifier: (0..id.len())
                        .step_by(2)
                        .filter_map(|i| u8::from_str_radix(&id[i..i + 2], 16).ok())
                        .collect(),
                }
            } else {
                StorageIdentifier {
                    code_set: CODE_SET_ASCII,
                    id_type: 1,
                    association: ASSOCIATION_DEVICE,
                    identifier: id.as_bytes().to_vec(),
                }
            }])
        })
    }

    fn read_device(
        &self,
        ctx: &CallContext,
        device: &str,
        head: u64,
        tail: u64,
    ) -> CallResult<DeviceBytes> {
        self.win32(ctx, "ReadFile", device, |st| {
            let d = device_disk(st, device)?;
            let length = d.size;
            let (head, tail) = (head.min(length), tail.min(length));
            Ok(DeviceBytes {
                length,
                head: crate::state::content::read(d, 0, head),
                tail: crate::state::content::read(d, length - tail, tail),
            })
        })
    }
}

/// The volume root of a path's start (before any mount point).
fn volume_root_of(wp: &WinPath) -> String {
    match &wp.root {
        Root::Drive(d) => format!("{}:\\", d.to_ascii_uppercase()),
        Root::Volume(g) => format!(r"\\?\Volume{{{g}}}\"),
        Root::Share(s, sh) => format!(r"\\{s}\{sh}\"),
        Root::Store(p) => p.display().to_string(),
    }
}

impl State {
    /// The folders where volume `guid` is mounted, under the kubelet path and the working directories.
    pub(crate) fn mount_points_of(&self, guid: &str) -> Vec<String> {
        let mut roots = vec![self.cfg.kubelet_path.clone()];
        roots.extend(self.cfg.working_dirs.iter().cloned());
        let mut out = Vec::new();
        for r in roots {
            let Ok(at) = open(self, &r, true) else {
                continue;
            };
            let mut found = Vec::new();
            crate::state::collect_links(&at.real, &mut found, self.layout.links());
            for l in found {
                let points_here = self
                    .layout
                    .links()
                    .target(&l)
                    .is_some_and(|t| t == self.layout.volume_link(guid));
                if points_here && let Some(w) = self.layout.to_windows(&l) {
                    let w = format!("{}\\", w.trim_end_matches('\\'));
                    if !out.contains(&w) {
                        out.push(w);
                    }
                }
            }
        }
        out
    }
}
