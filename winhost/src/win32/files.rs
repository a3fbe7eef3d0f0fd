//! The Win32 file, volume and device calls (kernel32, `DeviceIoControl`). Each function makes one call (plus the
//! handle it needs) and reports Windows' error as is. They block; `WinHost` runs them on its file worker pool.
#![allow(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::ffi::c_void;

use windows::Win32::Foundation::{CloseHandle, GENERIC_READ, GENERIC_WRITE, GetLastError, HANDLE};
use windows::Win32::Storage::FileSystem::{
    CreateDirectoryW, CreateFileW, CreateSymbolicLinkW, DeleteFileW, DeleteVolumeMountPointW,
    FILE_ATTRIBUTE_TAG_INFO, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_FLAGS_AND_ATTRIBUTES, FILE_READ_ATTRIBUTES, FILE_SHARE_DELETE, FILE_SHARE_MODE,
    FILE_SHARE_READ, FILE_SHARE_WRITE, FileAttributeTagInfo, FlushFileBuffers,
    GETFINALPATHNAMEBYHANDLE_FLAGS, GetDiskFreeSpaceExW, GetFileAttributesW,
    GetFileInformationByHandleEx, GetFileSizeEx, GetFinalPathNameByHandleW, GetVolumeInformationW,
    GetVolumeNameForVolumeMountPointW, GetVolumePathNameW, GetVolumePathNamesForVolumeNameW,
    INVALID_FILE_ATTRIBUTES, OPEN_EXISTING, ReadFile, RemoveDirectoryW, SYMBOLIC_LINK_FLAGS,
    SetVolumeMountPointW,
};
use windows::Win32::System::IO::{DeviceIoControl, OVERLAPPED};
use windows::core::HSTRING;

use crate::codes::{HResult, Win32Error};
use crate::error::{CallError, CallResult};
use crate::model::{
    AttributeTag, DeviceBytes, FileAttributes, FreeSpace, StorageDeviceNumber, SymlinkFlags,
    VolumeInformation, VolumeNameKind,
};
use crate::page83::{self, StorageIdentifier};
use crate::paths::VolumeGuidPath;
use crate::reparse::{self, MAXIMUM_REPARSE_DATA_BUFFER_SIZE, ReparsePoint};

// winioctl.h control codes (the same values as the `windows` crate's Win32_System_Ioctl feature, which is not
// enabled: it costs ~40% more build time of the `windows` crate for these three numbers).
/// `FSCTL_GET_REPARSE_POINT`: `CTL_CODE(FILE_DEVICE_FILE_SYSTEM, 42, METHOD_BUFFERED, FILE_ANY_ACCESS)`.
const FSCTL_GET_REPARSE_POINT: u32 = 0x0009_00A8;
/// `IOCTL_STORAGE_GET_DEVICE_NUMBER`: `CTL_CODE(IOCTL_STORAGE_BASE, 0x0420, METHOD_BUFFERED, FILE_ANY_ACCESS)`.
const IOCTL_STORAGE_GET_DEVICE_NUMBER: u32 = 0x002D_1080;
/// `IOCTL_STORAGE_QUERY_PROPERTY`: `CTL_CODE(IOCTL_STORAGE_BASE, 0x0500, METHOD_BUFFERED, FILE_ANY_ACCESS)`.
const IOCTL_STORAGE_QUERY_PROPERTY: u32 = 0x002D_1400;
/// `STORAGE_PROPERTY_QUERY { PropertyId = StorageDeviceIdProperty (2), QueryType = PropertyStandardQuery (0),
/// AdditionalParameters[1] }`, little-endian, padded to its C size of 12 bytes.
const DEVICE_ID_PROPERTY_QUERY: [u8; 12] = [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// `sizeof(STORAGE_DEVICE_NUMBER)`: `DeviceType`, `DeviceNumber`, `PartitionNumber`, each a `u32`.
const STORAGE_DEVICE_NUMBER_SIZE: usize = 12;
/// `IOCTL_DISK_GET_LENGTH_INFO`: `CTL_CODE(IOCTL_DISK_BASE, 0x0017, METHOD_BUFFERED, FILE_READ_ACCESS)`; its output is
/// `GET_LENGTH_INFORMATION { LARGE_INTEGER Length }`.
const IOCTL_DISK_GET_LENGTH_INFO: u32 = 0x0007_405C;
/// The buffer alignment of raw reads: a disk opened without the cache needs sector-aligned buffers (`CreateFileW`,
/// "File Buffering"); 4096 suits 512- and 4096-byte sectors.
const SECTOR_ALIGN: usize = 4096;

/// The Win32 error inside a `windows` crate error (`HRESULT_FROM_WIN32(GetLastError())` for these functions).
fn win32_of(e: &windows::core::Error) -> Win32Error {
    let h = HResult::from_i32(e.code().0);
    h.win32().unwrap_or(Win32Error::Unknown(h.0))
}

fn fail(function: &'static str, path: &str, e: &windows::core::Error) -> CallError {
    CallError::win32(function, path, win32_of(e))
}

fn last_error(function: &'static str, path: &str) -> CallError {
    // SAFETY: reads this thread's last-error value; no arguments.
    let code = unsafe { GetLastError() };
    CallError::win32(function, path, Win32Error::from_code(code.0))
}

/// A wide, NUL-terminated copy of `path`. A path holding a NUL would be cut short by the call: refuse it as Windows
/// refuses a bad name.
fn wide(function: &'static str, path: &str) -> CallResult<HSTRING> {
    if path.contains('\0') {
        return Err(CallError::win32(function, path, Win32Error::InvalidName));
    }
    Ok(HSTRING::from(path))
}

/// A handle closed on drop.
struct Handle(HANDLE);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a valid handle returned by `CreateFileW` and owned only by this guard, closed once.
        let _ = unsafe { CloseHandle(self.0) };
    }
}

const SHARE_ALL: windows::Win32::Storage::FileSystem::FILE_SHARE_MODE =
    windows::Win32::Storage::FileSystem::FILE_SHARE_MODE(
        FILE_SHARE_READ.0 | FILE_SHARE_WRITE.0 | FILE_SHARE_DELETE.0,
    );

fn open(path: &str, access: u32, flags: FILE_FLAGS_AND_ATTRIBUTES) -> CallResult<Handle> {
    open_shared(path, access, SHARE_ALL, flags)
}

fn open_shared(
    path: &str,
    access: u32,
    share: FILE_SHARE_MODE,
    flags: FILE_FLAGS_AND_ATTRIBUTES,
) -> CallResult<Handle> {
    let name = wide("CreateFileW", path)?;
    // SAFETY: `name` is a NUL-terminated wide string that outlives the call; no security attributes or template
    // handle; the returned handle is owned by the `Handle` guard.
    let h = unsafe { CreateFileW(&name, access, share, None, OPEN_EXISTING, flags, None) }
        .map_err(|e| fail("CreateFileW", path, &e))?;
    Ok(Handle(h))
}

/// `DeviceIoControl` with an optional input struct and an output buffer; the number of bytes returned.
fn ioctl(
    handle: &Handle,
    code: u32,
    input: Option<&[u8]>,
    output: &mut [u8],
    what: &str,
) -> CallResult<usize> {
    let (in_ptr, in_len) = match input {
        Some(bytes) => (Some(bytes.as_ptr().cast::<c_void>()), bytes.len() as u32),
        None => (None, 0),
    };
    let mut returned = 0u32;
    // SAFETY: the input pointer/length and output pointer/length describe live buffers owned by the caller for the
    // duration of this synchronous call (no OVERLAPPED); `returned` is a live u32.
    unsafe {
        DeviceIoControl(
            handle.0,
            code,
            in_ptr,
            in_len,
            Some(output.as_mut_ptr().cast::<c_void>()),
            output.len() as u32,
            Some(&mut returned),
            None,
        )
    }
    .map_err(|e| fail("DeviceIoControl", what, &e))?;
    Ok(returned as usize)
}

pub(crate) fn create_directory(path: &str) -> CallResult<()> {
    let name = wide("CreateDirectoryW", path)?;
    // SAFETY: NUL-terminated wide path valid for the call; no security attributes.
    unsafe { CreateDirectoryW(&name, None) }.map_err(|e| fail("CreateDirectoryW", path, &e))
}

pub(crate) fn remove_directory(path: &str) -> CallResult<()> {
    let name = wide("RemoveDirectoryW", path)?;
    // SAFETY: NUL-terminated wide path valid for the call.
    unsafe { RemoveDirectoryW(&name) }.map_err(|e| fail("RemoveDirectoryW", path, &e))
}

pub(crate) fn delete_file(path: &str) -> CallResult<()> {
    let name = wide("DeleteFileW", path)?;
    // SAFETY: NUL-terminated wide path valid for the call.
    unsafe { DeleteFileW(&name) }.map_err(|e| fail("DeleteFileW", path, &e))
}

pub(crate) fn remove_tree(path: &str) -> CallResult<()> {
    std::fs::remove_dir_all(path).map_err(|e| {
        let code = e
            .raw_os_error()
            .map_or(Win32Error::Unknown(0), |c| Win32Error::from_code(c as u32));
        CallError::win32("remove_dir_all", path, code)
    })
}

pub(crate) fn create_symbolic_link(
    link: &str,
    target: &str,
    flags: SymlinkFlags,
) -> CallResult<()> {
    let l = wide("CreateSymbolicLinkW", link)?;
    let t = wide("CreateSymbolicLinkW", target)?;
    // SAFETY: both NUL-terminated wide strings are valid for the call.
    if unsafe { CreateSymbolicLinkW(&l, &t, SYMBOLIC_LINK_FLAGS(flags.bits())) } {
        Ok(())
    } else {
        Err(last_error("CreateSymbolicLinkW", link))
    }
}

pub(crate) fn file_attributes(path: &str) -> CallResult<FileAttributes> {
    let name = wide("GetFileAttributesW", path)?;
    // SAFETY: NUL-terminated wide path valid for the call.
    let attrs = unsafe { GetFileAttributesW(&name) };
    if attrs == INVALID_FILE_ATTRIBUTES {
        Err(last_error("GetFileAttributesW", path))
    } else {
        Ok(FileAttributes(attrs))
    }
}

pub(crate) fn attribute_tag(path: &str) -> CallResult<AttributeTag> {
    let h = open(
        path,
        FILE_READ_ATTRIBUTES.0,
        FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS,
    )?;
    let mut info = FILE_ATTRIBUTE_TAG_INFO::default();
    // SAFETY: `info` is a live FILE_ATTRIBUTE_TAG_INFO and the size passed is its size, as FileAttributeTagInfo
    // requires.
    unsafe {
        GetFileInformationByHandleEx(
            h.0,
            FileAttributeTagInfo,
            (&raw mut info).cast::<c_void>(),
            size_of::<FILE_ATTRIBUTE_TAG_INFO>() as u32,
        )
    }
    .map_err(|e| fail("GetFileInformationByHandleEx", path, &e))?;
    Ok(AttributeTag {
        attributes: FileAttributes(info.FileAttributes),
        reparse_tag: info.ReparseTag,
    })
}

pub(crate) fn read_reparse_point(path: &str) -> CallResult<ReparsePoint> {
    let h = open(
        path,
        0,
        FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS,
    )?;
    let mut buf = vec![0u8; MAXIMUM_REPARSE_DATA_BUFFER_SIZE];
    let n = ioctl(&h, FSCTL_GET_REPARSE_POINT, None, &mut buf, path)?;
    reparse::parse_reparse_data(&buf[..n])
        .map_err(|e| CallError::decode(format!("FSCTL_GET_REPARSE_POINT({path})"), e.to_string()))
}

pub(crate) fn final_path_name(path: &str, kind: VolumeNameKind) -> CallResult<String> {
    let h = open(path, 0, FILE_FLAG_BACKUP_SEMANTICS)?;
    let mut buf = vec![0u16; 512];
    loop {
        // SAFETY: `h` is an open handle and `buf` a live, writable buffer whose length the call receives.
        let n = unsafe {
            GetFinalPathNameByHandleW(h.0, &mut buf, GETFINALPATHNAMEBYHANDLE_FLAGS(kind.bits()))
        } as usize;
        if n == 0 {
            return Err(last_error("GetFinalPathNameByHandleW", path));
        }
        if n < buf.len() {
            return Ok(String::from_utf16_lossy(&buf[..n]));
        }
        // Too small: `n` is the size needed, NUL included.
        buf.resize(n + 1, 0);
    }
}

pub(crate) fn set_volume_mount_point(mount_point: &str, volume: &VolumeGuidPath) -> CallResult<()> {
    let m = wide("SetVolumeMountPointW", mount_point)?;
    let v = wide("SetVolumeMountPointW", &volume.to_path())?;
    // SAFETY: both NUL-terminated wide strings are valid for the call.
    unsafe { SetVolumeMountPointW(&m, &v) }
        .map_err(|e| fail("SetVolumeMountPointW", mount_point, &e))
}

pub(crate) fn delete_volume_mount_point(mount_point: &str) -> CallResult<()> {
    let m = wide("DeleteVolumeMountPointW", mount_point)?;
    // SAFETY: NUL-terminated wide path valid for the call.
    unsafe { DeleteVolumeMountPointW(&m) }
        .map_err(|e| fail("DeleteVolumeMountPointW", mount_point, &e))
}

fn until_nul(buf: &[u16]) -> String {
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf16_lossy(&buf[..end])
}

pub(crate) fn volume_name_for_mount_point(mount_point: &str) -> CallResult<VolumeGuidPath> {
    let m = wide("GetVolumeNameForVolumeMountPointW", mount_point)?;
    // "A reasonable size for the buffer to accommodate the largest possible volume GUID path is 50 characters."
    let mut buf = [0u16; 64];
    // SAFETY: NUL-terminated wide path valid for the call; `buf` is live and its length is passed.
    unsafe { GetVolumeNameForVolumeMountPointW(&m, &mut buf) }
        .map_err(|e| fail("GetVolumeNameForVolumeMountPointW", mount_point, &e))?;
    let name = until_nul(&buf);
    VolumeGuidPath::parse(&name).ok_or_else(|| {
        CallError::decode(
            format!("GetVolumeNameForVolumeMountPointW({mount_point})"),
            format!("{name:?} is not a volume GUID path"),
        )
    })
}

pub(crate) fn volume_path_name(path: &str) -> CallResult<String> {
    let p = wide("GetVolumePathNameW", path)?;
    // The volume path is at most as long as the path itself (plus a trailing `\`).
    let mut buf = vec![0u16; (path.encode_utf16().count() + 2).max(261)];
    // SAFETY: NUL-terminated wide path valid for the call; `buf` is live and its length is passed.
    unsafe { GetVolumePathNameW(&p, &mut buf) }
        .map_err(|e| fail("GetVolumePathNameW", path, &e))?;
    Ok(until_nul(&buf))
}

pub(crate) fn volume_path_names(volume: &VolumeGuidPath) -> CallResult<Vec<String>> {
    let text = volume.to_path();
    let v = wide("GetVolumePathNamesForVolumeNameW", &text)?;
    let mut buf = vec![0u16; 1024];
    loop {
        let mut needed = 0u32;
        // SAFETY: NUL-terminated wide name valid for the call; `buf` is live and its length is passed; `needed` is a
        // live u32.
        match unsafe { GetVolumePathNamesForVolumeNameW(&v, Some(&mut buf), &mut needed) } {
            Ok(()) => {
                return Ok(buf[..(needed as usize).min(buf.len())]
                    .split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(String::from_utf16_lossy)
                    .collect());
            }
            Err(e) if win32_of(&e) == Win32Error::MoreData && needed as usize > buf.len() => {
                buf.resize(needed as usize, 0);
            }
            Err(e) => return Err(fail("GetVolumePathNamesForVolumeNameW", &text, &e)),
        }
    }
}

pub(crate) fn volume_information(root: &str) -> CallResult<VolumeInformation> {
    let r = wide("GetVolumeInformationW", root)?;
    let mut label = [0u16; 261];
    let mut fs = [0u16; 261];
    let (mut serial, mut max_len, mut flags) = (0u32, 0u32, 0u32);
    // SAFETY: NUL-terminated wide root valid for the call; both buffers are live with their lengths passed; the
    // three out-pointers point at live u32s.
    unsafe {
        GetVolumeInformationW(
            &r,
            Some(&mut label),
            Some(&mut serial),
            Some(&mut max_len),
            Some(&mut flags),
            Some(&mut fs),
        )
    }
    .map_err(|e| fail("GetVolumeInformationW", root, &e))?;
    Ok(VolumeInformation {
        label: until_nul(&label),
        serial_number: serial,
        max_component_length: max_len,
        file_system_flags: flags,
        file_system_name: until_nul(&fs),
    })
}

pub(crate) fn disk_free_space(path: &str) -> CallResult<FreeSpace> {
    let p = wide("GetDiskFreeSpaceExW", path)?;
    let (mut available, mut total, mut free) = (0u64, 0u64, 0u64);
    // SAFETY: NUL-terminated wide path valid for the call; the three out-pointers point at live u64s.
    unsafe { GetDiskFreeSpaceExW(&p, Some(&mut available), Some(&mut total), Some(&mut free)) }
        .map_err(|e| fail("GetDiskFreeSpaceExW", path, &e))?;
    Ok(FreeSpace {
        available_to_caller: available,
        total,
        free,
    })
}

pub(crate) fn flush_volume(volume: &VolumeGuidPath) -> CallResult<()> {
    let device = volume.to_device();
    let h = open(
        &device,
        GENERIC_READ.0 | GENERIC_WRITE.0,
        FILE_FLAGS_AND_ATTRIBUTES(0),
    )?;
    // SAFETY: `h` is an open handle to the volume device.
    unsafe { FlushFileBuffers(h.0) }.map_err(|e| fail("FlushFileBuffers", &device, &e))
}

pub(crate) fn storage_device_number(device: &str) -> CallResult<StorageDeviceNumber> {
    // Access 0: the IOCTL needs no read access (FILE_ANY_ACCESS), so no administrator rights either.
    let h = open(device, 0, FILE_FLAGS_AND_ATTRIBUTES(0))?;
    let mut out = [0u8; STORAGE_DEVICE_NUMBER_SIZE];
    let n = ioctl(&h, IOCTL_STORAGE_GET_DEVICE_NUMBER, None, &mut out, device)?;
    if n < out.len() {
        return Err(CallError::decode(
            format!("IOCTL_STORAGE_GET_DEVICE_NUMBER({device})"),
            format!("{n} bytes returned, {} expected", out.len()),
        ));
    }
    let field = |i: usize| u32::from_le_bytes([out[i], out[i + 1], out[i + 2], out[i + 3]]);
    Ok(StorageDeviceNumber {
        device_type: field(0),
        device_number: field(4),
        partition_number: field(8),
    })
}

pub(crate) fn storage_device_identifiers(device: &str) -> CallResult<Vec<StorageIdentifier>> {
    let h = open(device, 0, FILE_FLAGS_AND_ATTRIBUTES(0))?;
    // csi-proxy uses 4 KiB; a descriptor announcing more gets a second, exact-size attempt.
    let mut buf = vec![0u8; 4096];
    for _ in 0..2 {
        let n = ioctl(
            &h,
            IOCTL_STORAGE_QUERY_PROPERTY,
            Some(&DEVICE_ID_PROPERTY_QUERY),
            &mut buf,
            device,
        )?;
        let reply = &buf[..n];
        match page83::descriptor_size(reply) {
            Ok(size) if size as usize > n && size as usize > buf.len() => {
                buf.resize(size as usize, 0)
            }
            _ => {
                return page83::parse_device_id_descriptor(reply).map_err(|e| {
                    CallError::decode(
                        format!("IOCTL_STORAGE_QUERY_PROPERTY({device})"),
                        e.to_string(),
                    )
                });
            }
        }
    }
    Err(CallError::decode(
        format!("IOCTL_STORAGE_QUERY_PROPERTY({device})"),
        "the device id descriptor kept growing",
    ))
}

/// A device's length: `IOCTL_DISK_GET_LENGTH_INFO`, or, for a handle that is no disk (a file standing in for one: the
/// Wine test), `GetFileSizeEx`.
fn device_length(h: &Handle, device: &str) -> CallResult<u64> {
    let mut out = [0u8; 8];
    match ioctl(h, IOCTL_DISK_GET_LENGTH_INFO, None, &mut out, device) {
        Ok(8) => return Ok(u64::from_le_bytes(out)),
        Ok(n) => {
            return Err(CallError::decode(
                format!("IOCTL_DISK_GET_LENGTH_INFO({device})"),
                format!("{n} bytes returned, 8 expected"),
            ));
        }
        Err(e)
            if matches!(
                e.win32_code(),
                Some(Win32Error::InvalidFunction | Win32Error::NotSupported)
            ) => {}
        Err(e) => return Err(e),
    }
    let mut size = 0i64;
    // SAFETY: `h` is an open handle and `size` a live i64 the call writes.
    unsafe { GetFileSizeEx(h.0, &mut size) }.map_err(|e| fail("GetFileSizeEx", device, &e))?;
    Ok(size.max(0) as u64)
}

/// `len` bytes at `offset` through a sector-aligned buffer (positioned reads on a synchronous handle: the
/// `OVERLAPPED` gives the offset and the call completes before it returns). Stops early at the end of a file.
fn read_at(h: &Handle, device: &str, offset: u64, len: usize) -> CallResult<Vec<u8>> {
    let mut buf = vec![0u8; len + SECTOR_ALIGN];
    let start = buf.as_ptr().align_offset(SECTOR_ALIGN).min(SECTOR_ALIGN);
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        let mut ov = OVERLAPPED::default();
        ov.Anonymous.Anonymous.Offset = at as u32;
        ov.Anonymous.Anonymous.OffsetHigh = (at >> 32) as u32;
        let mut read = 0u32;
        let chunk = &mut buf[start + done..start + len];
        // SAFETY: `h` is an open synchronous handle; `chunk` is a live, writable slice whose length the call receives;
        // `read` and `ov` are live for the duration of the synchronous call.
        unsafe { ReadFile(h.0, Some(chunk), Some(&mut read), Some(&mut ov)) }
            .map_err(|e| fail("ReadFile", device, &e))?;
        if read == 0 {
            break;
        }
        done += read as usize;
    }
    Ok(buf[start..start + done].to_vec())
}

pub(crate) fn read_device(device: &str, head: u64, tail: u64) -> CallResult<DeviceBytes> {
    // Read access only, shared with every reader and writer: this must never lock a disk another process uses.
    let h = open_shared(
        device,
        GENERIC_READ.0,
        FILE_SHARE_MODE(FILE_SHARE_READ.0 | FILE_SHARE_WRITE.0),
        FILE_FLAGS_AND_ATTRIBUTES(0),
    )?;
    let length = device_length(&h, device)?;
    let head_len = head.min(length);
    let tail_len = tail.min(length);
    Ok(DeviceBytes {
        length,
        head: read_at(&h, device, 0, head_len as usize)?,
        tail: read_at(&h, device, length - tail_len, tail_len as usize)?,
    })
}
