#![cfg_attr(not(windows), allow(missing_docs))]
#![cfg(windows)]
//! `WinHost` on what Wine 8 really implements (runs under Wine in CI; reference §4):
//! - the start-up probe through the real COM/WMI stack: the Storage namespace opens but has no `MSFT_*` class, the SMB
//!   namespace does not exist, and the probe's one message names all of it; calls into those classes are refused
//!   without reaching COM (executing a method of a missing class would crash the process under Wine);
//! - directories, attributes and reparse tags, the volume calls on `C:`, free space, final paths, device numbers,
//!   and their error paths, which match Windows;
//! - the raw device read of the RAW-disk guard on a file opened like a disk (Wine has no disk with a foreign file
//!   system to offer).
//!
//! Not called, because Wine fakes or lacks them: `CreateSymbolicLinkW` (returns success and creates nothing),
//! `SetVolumeMountPointW`/`DeleteVolumeMountPointW` (120), the volume flush (1 on a volume handle), and every Storage,
//! iSCSI and SMB WMI call. Those run against the simulated host.

use std::time::Duration;

use winhost::codes::Win32Error;
use winhost::model::VolumeNameKind;
use winhost::paths::{VolumeGuidPath, with_trailing_backslash};
use winhost::probe::{Capability, Namespace};
use winhost::win32::{WinHost, WinHostConfig};
use winhost::{
    CallContext, CallError, Capabilities, ErrorKind, IscsiWmi, SmbWmi, StorageWmi, Win32Files,
};

fn ctx() -> CallContext {
    CallContext::after(Duration::from_secs(120))
}

fn host() -> WinHost {
    WinHost::start(WinHostConfig::default(), &ctx()).expect("WinHost starts under Wine")
}

fn win32_code(r: Result<impl std::fmt::Debug, CallError>) -> Win32Error {
    match r {
        Err(e) => e
            .win32_code()
            .unwrap_or_else(|| panic!("not a Win32 error: {e}")),
        Ok(v) => panic!("expected a Win32 error, got {v:?}"),
    }
}

/// A fresh directory on Wine's C: drive, removed with its contents at the end.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Self {
        Self(
            tempfile::Builder::new()
                .prefix("winhost-")
                .tempdir()
                .expect("temp dir"),
        )
    }
    fn path(&self, rel: &str) -> String {
        let base = self
            .0
            .path()
            .to_str()
            .expect("UTF-8 temp path")
            .trim_end_matches('\\')
            .to_owned();
        if rel.is_empty() {
            base
        } else {
            format!(r"{base}\{rel}")
        }
    }
}

#[test]
fn the_probe_names_the_missing_storage_and_smb_classes_and_calls_into_them_are_refused() {
    let host = host();
    let report = host.probe_report();
    assert_eq!(
        report.missing_message().as_deref(),
        Some(
            "this host lacks the Windows storage management WMI providers the native backend calls (Windows Server \
             2019 and later have them): ROOT\\Microsoft\\Windows\\Storage has no class MSFT_Disk, MSFT_Partition, \
             MSFT_Volume, MSFT_PartitionToVolume, MSFT_StorageSetting, MSFT_iSCSITargetPortal, MSFT_iSCSITarget, \
             MSFT_iSCSISession, MSFT_iSCSIConnection, MSFT_InitiatorPort, MSFT_iSCSITargetToiSCSITargetPortal, \
             MSFT_iSCSITargetToiSCSISession, MSFT_iSCSITargetToiSCSIConnection, MSFT_iSCSIConnectionToDisk, \
             MSFT_iSCSISessionToDisk; namespace ROOT\\Microsoft\\Windows\\SMB cannot be opened (0x8004100E \
             WBEM_E_INVALID_NAMESPACE)"
        )
    );
    assert!(!report.is_complete());
    for cap in [Capability::Disks, Capability::Iscsi, Capability::Smb] {
        assert!(!report.supports(cap), "{cap:?}");
    }
    // The Storage namespace itself opened (the probe got as far as GetObject of each class).
    assert_eq!(report.namespaces[0].namespace, Namespace::Storage);
    assert_eq!(report.namespaces[0].connect_error, None);

    // Refused before COM: a query (which Wine would answer with zero rows, silently) and the static method that
    // crashes a Wine process when executed on the missing class.
    let refused = |r: Result<(), CallError>, what: &str| match r {
        Err(CallError::Unsupported { what: w }) => assert_eq!(w, what),
        other => panic!("{what}: expected Unsupported, got {other:?}"),
    };
    refused(
        host.disks(&ctx(), None).map(drop),
        r"ROOT\Microsoft\Windows\Storage MSFT_Disk",
    );
    refused(
        host.update_host_storage_cache(&ctx()).map(drop),
        r"ROOT\Microsoft\Windows\Storage MSFT_StorageSetting.UpdateHostStorageCache",
    );
    refused(
        host.targets(&ctx()).map(drop),
        r"ROOT\Microsoft\Windows\Storage MSFT_iSCSITarget",
    );
    refused(
        host.global_mappings(&ctx()).map(drop),
        r"ROOT\Microsoft\Windows\SMB MSFT_SmbGlobalMapping",
    );
    let err = host.global_mappings(&ctx()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
}

/// What Wine lacks it lacks for good: the probe's answers are absences (`WBEM_E_NOT_FOUND`, `WBEM_E_INVALID_NAMESPACE`),
/// not failures, so the report is settled (nothing to check again, nothing for readiness to report); a reprobe —
/// the same `IWbemServices` connections at packet privacy, the class definitions cached per connection — finds the
/// same; every lane is there and idle.
#[test]
fn the_probe_runs_again_and_finds_the_same_absences_and_the_lanes_are_idle() {
    use winhost::probe::CapabilityState;
    let host = host();
    let first = host.probe_report();
    assert!(first.is_settled(), "{:?}", first.failure_message());
    assert_eq!(first.failure_message(), None);
    for cap in [Capability::Disks, Capability::Iscsi, Capability::Smb] {
        assert_eq!(first.state(cap), CapabilityState::Absent, "{cap:?}");
    }
    let again = host.reprobe(&ctx()).expect("reprobe");
    assert_eq!(again, first);
    assert_eq!(host.probe_report(), first);
    let lanes = host.lanes();
    let names: Vec<&str> = lanes.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "winhost-wmi",
            "winhost-disk",
            "winhost-iscsi",
            "winhost-smb",
            "winhost-files"
        ]
    );
    assert!(lanes.iter().all(|l| l.stuck.is_empty() && !l.exhausted()));
}

/// The node's Windows build (`RtlGetVersion`, what the SMB client options are checked against): Wine answers the
/// build of the Windows its prefix plays, never zero.
#[test]
fn the_windows_build_is_read() {
    let build = winhost::os_build::node_build().expect("RtlGetVersion answers");
    assert!(build >= 7600, "{build}");
    assert_eq!(host().os_build(), Some(build));
}

#[test]
fn directories_attributes_and_reparse_tags() {
    let host = host();
    let s = Scratch::new();
    let dir = s.path("a");
    host.create_directory(&ctx(), &dir).unwrap();

    // A repeat gives 183; a missing parent gives 3.
    let again = host.create_directory(&ctx(), &dir);
    assert_eq!(win32_code(again), Win32Error::AlreadyExists);
    assert_eq!(
        host.create_directory(&ctx(), &dir).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        win32_code(host.create_directory(&ctx(), &s.path(r"missing\b"))),
        Win32Error::PathNotFound
    );

    let attrs = host.file_attributes(&ctx(), &dir).unwrap();
    assert!(
        attrs.is_directory() && !attrs.is_reparse_point(),
        "{attrs:?}"
    );
    let tag = host.attribute_tag(&ctx(), &dir).unwrap();
    assert!(tag.attributes.is_directory());
    assert_eq!(tag.reparse_tag, 0);
    let missing = host.file_attributes(&ctx(), &s.path("nope"));
    assert_eq!(missing.unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(
        host.attribute_tag(&ctx(), &s.path("nope"))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    // A plain directory is not a reparse point: 4390, as on Windows.
    assert_eq!(
        win32_code(host.read_reparse_point(&ctx(), &dir)),
        Win32Error::NotAReparsePoint
    );

    // Non-empty directories are kept (145); files go with DeleteFileW; empty directories with RemoveDirectoryW.
    let file = s.path(r"a\f.txt");
    std::fs::write(&file, b"x").unwrap();
    assert!(!host.file_attributes(&ctx(), &file).unwrap().is_directory());
    assert_eq!(
        win32_code(host.remove_directory(&ctx(), &dir)),
        Win32Error::DirNotEmpty
    );
    assert_eq!(
        host.remove_directory(&ctx(), &dir).unwrap_err().kind(),
        ErrorKind::NotEmpty
    );
    host.delete_file(&ctx(), &file).unwrap();
    host.remove_directory(&ctx(), &dir).unwrap();
    assert_eq!(
        host.remove_directory(&ctx(), &dir).unwrap_err().kind(),
        ErrorKind::NotFound
    );

    // A tree goes in one call.
    host.create_directory(&ctx(), &s.path("t")).unwrap();
    host.create_directory(&ctx(), &s.path(r"t\u")).unwrap();
    std::fs::write(s.path(r"t\u\g"), b"y").unwrap();
    host.remove_tree(&ctx(), &s.path("t")).unwrap();
    assert_eq!(
        host.file_attributes(&ctx(), &s.path("t"))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    // A NUL in a path is refused before Windows sees a truncated name.
    assert_eq!(
        win32_code(host.create_directory(&ctx(), &s.path("a\0b"))),
        Win32Error::InvalidName
    );
}

#[test]
fn volumes_free_space_and_final_paths_on_c() {
    let host = host();
    let s = Scratch::new();

    let root = host.volume_path_name(&ctx(), &s.path("")).unwrap();
    assert!(root.eq_ignore_ascii_case(r"C:\"), "{root}");

    let volume = host.volume_name_for_mount_point(&ctx(), &root).unwrap();
    assert_eq!(
        VolumeGuidPath::parse(&volume.to_path()).as_ref(),
        Some(&volume)
    );
    // The error paths match Windows: no trailing backslash 123; a plain directory 4390.
    assert_eq!(
        win32_code(host.volume_name_for_mount_point(&ctx(), &s.path(""))),
        Win32Error::InvalidName
    );
    assert_eq!(
        win32_code(host.volume_name_for_mount_point(&ctx(), &with_trailing_backslash(&s.path("")))),
        Win32Error::NotAReparsePoint
    );

    let info = host.volume_information(&ctx(), &volume.to_path()).unwrap();
    assert_eq!(info.file_system_name, "NTFS");
    let unknown =
        VolumeGuidPath::parse(r"\\?\Volume{12345678-1234-1234-1234-123456789abc}\").unwrap();
    assert_eq!(
        host.volume_information(&ctx(), &unknown.to_path())
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    let space = host
        .disk_free_space(&ctx(), &with_trailing_backslash(&s.path("")))
        .unwrap();
    assert!(
        space.total > 0 && space.free <= space.total && space.available_to_caller <= space.total,
        "{space:?}"
    );
    assert_eq!(
        host.disk_free_space(&ctx(), &with_trailing_backslash(&s.path("nope")))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    let dos = host
        .final_path_name(&ctx(), &s.path(""), VolumeNameKind::Dos)
        .unwrap();
    let leaf = s.0.path().file_name().unwrap().to_str().unwrap();
    assert!(
        dos.starts_with(r"\\?\C:\") || dos.starts_with(r"\\?\c:\"),
        "{dos}"
    );
    assert!(
        dos.to_ascii_lowercase()
            .ends_with(&leaf.to_ascii_lowercase()),
        "{dos}"
    );
    let by_guid = host
        .final_path_name(&ctx(), &s.path(""), VolumeNameKind::Guid)
        .unwrap();
    assert!(
        by_guid.to_ascii_lowercase().starts_with(r"\\?\volume{"),
        "{by_guid}"
    );
    assert_eq!(
        host.final_path_name(&ctx(), &s.path("nope"), VolumeNameKind::Dos)
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn physical_drive_device_number() {
    let host = host();
    let number = host
        .storage_device_number(&ctx(), r"\\.\PhysicalDrive0")
        .unwrap();
    assert_eq!(number.device_number, 0, "{number:?}");
    // Wine 8 answers StorageDeviceIdProperty with ERROR_NOT_SUPPORTED (50, reference §4); an unknown control code
    // would get ERROR_INVALID_FUNCTION (1) instead, so this also checks the IOCTL code winhost defines.
    assert_eq!(
        win32_code(host.storage_device_identifiers(&ctx(), r"\\.\PhysicalDrive0")),
        Win32Error::NotSupported
    );
    assert_eq!(
        host.storage_device_number(&ctx(), r"\\.\PhysicalDrive97")
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn calls_are_not_started_after_the_deadline() {
    let host = host();
    let s = Scratch::new();
    let expired = CallContext::new(std::time::Instant::now() - Duration::from_millis(1));
    assert_eq!(
        host.create_directory(&expired, &s.path("late")),
        Err(CallError::DeadlineExceeded { started: false })
    );
    assert_eq!(
        host.file_attributes(&ctx(), &s.path("late"))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    let token = winhost::CancelToken::new();
    token.cancel();
    assert_eq!(
        host.create_directory(&ctx().with_cancel(token), &s.path("late")),
        Err(CallError::Cancelled { started: false })
    );
}

/// The raw read of the native backend's RAW-disk guard, on a file opened the way a disk is (`GENERIC_READ`, shared
/// read/write): the length comes from `GetFileSizeEx` (a file answers `IOCTL_DISK_GET_LENGTH_INFO` with 1 or 50), the
/// head and tail at their offsets, and the signature prober names what a Linux node would have left there. A device
/// shorter than the regions is read whole; a missing one is NotFound.
#[test]
fn read_device_reads_the_head_and_tail_of_a_file_standing_in_for_a_disk() {
    use winhost::signature::{HEAD_BYTES, TAIL_BYTES, examine};
    let host = host();
    let s = Scratch::new();
    let len: u64 = 8 << 20;
    let mut bytes = vec![0u8; len as usize];
    bytes[1080..1082].copy_from_slice(b"\x53\xEF");
    bytes[(len - 512) as usize..(len - 504) as usize].copy_from_slice(b"EFI PART");
    let disk = s.path("lun.img");
    std::fs::write(&disk, &bytes).expect("write the image");

    let read = host
        .read_device(&ctx(), &disk, HEAD_BYTES, TAIL_BYTES)
        .unwrap();
    assert_eq!(read.length, len);
    assert_eq!(read.head.len() as u64, HEAD_BYTES);
    assert_eq!(read.tail.len() as u64, TAIL_BYTES);
    assert_eq!(&read.head[1080..1082], b"\x53\xEF");
    assert_eq!(
        &read.tail[read.tail.len() - 512..read.tail.len() - 504],
        b"EFI PART"
    );
    let found: Vec<(&str, u64)> = examine(&read).iter().map(|f| (f.what, f.offset)).collect();
    assert_eq!(
        found,
        [
            ("ext2/ext3/ext4 superblock", 1080),
            ("backup GPT header", len - 512)
        ]
    );

    let small = s.path("small.img");
    std::fs::write(&small, vec![0u8; 12_288]).expect("write the small image");
    let read = host
        .read_device(&ctx(), &small, HEAD_BYTES, TAIL_BYTES)
        .unwrap();
    assert_eq!(
        (read.length, read.head.len(), read.tail.len()),
        (12_288, 12_288, 12_288)
    );
    assert!(examine(&read).is_empty());

    assert_eq!(
        host.read_device(&ctx(), &s.path("absent.img"), HEAD_BYTES, TAIL_BYTES)
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}
