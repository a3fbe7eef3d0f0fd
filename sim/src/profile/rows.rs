//! The per-release table with its sources. `sim/README.md` embeds [`profile_table_markdown`]'s output verbatim
//! (a test keeps them identical) and every row has a test in `profile/tests.rs` that checks the simulated host
//! against it, for all four releases.
//!
//! Citations are `path:line` in `kubernetes-csi/csi-proxy` at the tag of the column (`v1.1.3`, `v1.2.1`,
//! `v1.3.0`, `master` = commit `eeba470`, 2026-08-06) unless another repository is named. "unverified" means no
//! source settles the behaviour; the row then says what the simulator chose.

/// One row of the per-release table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileRow {
    /// Stable identifier (also the name of the row's test, `row_<id>`).
    pub id: &'static str,
    /// What is compared.
    pub behaviour: &'static str,
    /// What each release does: v1.1.3, v1.2.1, v1.3.0, master.
    pub releases: [&'static str; 4],
    /// Where each answer comes from; "unverified: …" where no source settles it.
    pub source: &'static str,
}

impl ProfileRow {
    /// Whether part of the row is unverified.
    pub fn unverified(&self) -> bool {
        self.source.contains("unverified")
    }
}

/// The table. Keep `sim/README.md` in sync by pasting [`profile_table_markdown`] (its test prints it).
pub const ROWS: &[ProfileRow] = &[
    ProfileRow {
        id: "backend",
        behaviour: "How host calls are made (decides every error text's shape)",
        releases: [
            "`powershell -Mta -NoProfile -Command` per call",
            "same",
            "`microsoft/wmi` + Win32",
            "own go-ole `pkg/wmi` + Win32",
        ],
        source: "v1.1.3 `pkg/utils/utils.go:12-18`; v1.3.0 `pkg/cim/wmi.go:93-139`; master `pkg/wmi/wmi.go:416-500`",
    },
    ProfileRow {
        id: "path_validation",
        behaviour: "Filesystem paths and SMB `local_path`: 260 bytes, no leading `\\`, none of `\"` `/` `:` `?` `*` `\\|` or `..` after `X:\\`, `^[a-zA-Z]:\\\\`, case-insensitive plain prefix of a working dir; message `path: P is not within the working directories: [W… K]` (the `-working-dir`s, then `-kubelet-path`)",
        releases: ["same in all", "same", "same", "same"],
        source: "`pkg/server/filesystem/server.go:75-110` (identical at all four); `cmd/csi-proxy/main.go:79` (v1.1.3), `:80` (v1.2.1), `:90` (v1.3.0, master)",
    },
    ProfileRow {
        id: "server_argument_checks",
        behaviour: "Checks the servers make before touching the host: `remote path is empty`, `remote path (P) is invalid`, `MountVolumeRequest.VolumeId is empty`, `volume id empty`, `target path empty`, `target path is empty`, …; a request without `target_portal` dereferences nil and kills the process",
        releases: ["same in all", "same", "same", "same"],
        source: "`pkg/server/smb/server.go:28-69`, `pkg/server/volume/server.go:43-51,78-86,101-103,278-279`, `pkg/server/iscsi/server.go:46,71-73` (identical at all four); no recovery interceptor: `pkg/server/server.go:111` (v1.1.3), `:122` (v1.3.0)",
    },
    ProfileRow {
        id: "connect_target_connected",
        behaviour: "ConnectTarget to a target that already has a session",
        releases: [
            "error: `Connect-IscsiTarget : The target has already been logged in via an iSCSI session.`",
            "same",
            "no-op",
            "no-op",
        ],
        source: "v1.1.3/v1.2.1 `pkg/os/iscsi/api.go:90-119` (no check); v1.3.0 `pkg/os/iscsi/api.go:119-122`; master `pkg/os/iscsi/api.go:128-131`; text: democratic-csi `src/driver/index.js:2286-2293` (commit 8a4a28a)",
    },
    ProfileRow {
        id: "disconnect_target_unconnected",
        behaviour: "DisconnectTarget of a discovered target without a session",
        releases: [
            "error, category `ObjectNotFound` (configurable: `ps_disconnect_unconnected`)",
            "same",
            "no-op",
            "no-op",
        ],
        source: "v1.1.3/v1.2.1 `pkg/os/iscsi/api.go:121-137`; v1.3.0 `:147-150`; master `:157-160`; unverified for PowerShell (chosen: error; democratic-csi `src/driver/index.js:2930-2932` tolerates `ObjectNotFound` there)",
    },
    ProfileRow {
        id: "target_disks_unconnected",
        behaviour: "GetTargetDisks of a target without a session",
        releases: [
            "error (`$ErrorActionPreference = \"Stop\"`; `Get-IscsiConnection` finds nothing)",
            "same",
            "empty list",
            "empty list",
        ],
        source: "v1.1.3/v1.2.1 `pkg/os/iscsi/api.go:139-164` (`:143`); v1.3.0 `:197-200`; master `:207-210`; the cmdlet's text is unverified",
    },
    ProfileRow {
        id: "iqn_matching",
        behaviour: "How the IQN is matched against the portal's targets",
        releases: [
            "case-insensitive (`-eq`, cmdlet parameters)",
            "same",
            "exact-case; a miss returns `(nil, nil)` and the next call dereferences it: the csi-proxy process dies and every pipe drops until restarted",
            "exact-case; a miss is `… err: not found`",
        ],
        source: "v1.1.3/v1.2.1 `pkg/os/iscsi/api.go:96-98,126`; v1.3.0 `pkg/cim/iscsi.go:187-210` (`:204`, `:209`) and `pkg/os/iscsi/api.go:109-116`; master `pkg/wmi/iscsi.go:198-228` (`:216`, `:226`); Cmdlet case handling unverified (chosen: insensitive)",
    },
    ProfileRow {
        id: "mount_volume_again",
        behaviour: "MountVolume of the volume already mounted at the path",
        releases: [
            "error: `Add-PartitionAccessPath : The requested access path is already in use.`",
            "same",
            "success (ERROR_DIR_NOT_EMPTY, then the mounted volume is compared)",
            "same",
        ],
        source: "v1.1.3/v1.2.1 `pkg/os/volume/api.go:133-144`; v1.3.0 `pkg/os/volume/api.go:149-173` (`:158`); master `:162-186`; text: democratic-csi `src/driver/index.js:2384-2392`",
    },
    ProfileRow {
        id: "resize_skip",
        behaviour: "When ResizeVolume is a silent success",
        releases: [
            "only when current ≥ final; sub-MiB slack reaches `Resize-Partition` and fails `Size Not Supported … The size of the extent is less than the minimum of 1MB.`",
            "growth < 100 MiB",
            "growth < 100 MiB, or current ≥ final",
            "growth < 100 MiB; a negative size is an error",
        ],
        source: "v1.1.3 `pkg/os/volume/api.go:201`; v1.2.1 `:201`; v1.3.0 `:222-231`; master `:225-241`; text: csi-proxy#195, PR #364",
    },
    ProfileRow {
        id: "resize_without_defragsvc",
        behaviour: "ResizeVolume(0) while the Optimize Drives service (`defragsvc`) is disabled: `Get-PartitionSupportedSize` / `MSFT_Partition.GetSupportedSize` answers StorageWMI 4 `Failed`; an explicit size skips it",
        releases: [
            "fails `error getting sizemin,sizemax from mount … Get-PartitionSupportedSize : Failed … StorageWMI 4 … {\"SizeMax\": null}`; an explicit size resizes",
            "same",
            "fails `error getting sizeMin, sizeMax from volume (V). result: 4, status: , error: strconv.ParseInt: parsing \"\": invalid syntax`; an explicit size resizes",
            "fails `error getting sizeMin, sizeMax from volume (V). status: , error: WMI MSFT_Partition.GetSupportedSize failed (…): code=4`; an explicit size resizes",
        ],
        source: "kubernetes-sigs/aws-ebs-csi-driver#2877 (StorageWMI 4 while defragsvc is disabled or busy, reproduced on Windows Server 2025; the explicit-size path \"works\") and PR #2471 (the PowerShell output); v1.1.3 `pkg/os/volume/api.go:172-179`; v1.3.0 `pkg/os/volume/api.go:204-210`, `pkg/cim/volume.go:345-363` (the text derived from the code: unverified); master `pkg/os/volume/api.go:218-223`, `pkg/wmi/volume.go:311-322`; defragsvc busy (the issue's other cause) not modelled",
    },
    ProfileRow {
        id: "partition_slack",
        behaviour: "A new max-size partition ends a few KiB below `SizeMax` (host, all releases)",
        releases: ["48640 bytes (configurable)", "same", "same", "same"],
        source: "csi-proxy#195 (`SizeMax` 3204431360 vs size 3204382720); exact slack per disk unverified",
    },
    ProfileRow {
        id: "smb_credentials",
        behaviour: "NewSmbGlobalMapping with an empty user name or password",
        releases: [
            "fails: a `PSCredential` is always built (`ConvertTo-SecureString` rejects the empty string)",
            "same",
            "maps without a credential when the user name is empty (the node's identity)",
            "same",
        ],
        source: "v1.1.3 `pkg/os/smb/api.go:66-68`; v1.2.1 `:70-72`; v1.3.0 `pkg/cim/smb.go:92`; master `pkg/wmi/smb.go:112`; the PowerShell error text is unverified",
    },
    ProfileRow {
        id: "smb_require_privacy",
        behaviour: "`RequirePrivacy` of new mappings",
        releases: [
            "always `$true` (no `-require-privacy` flag)",
            "`-require-privacy` (default true)",
            "same",
            "same",
        ],
        source: "v1.1.3 `pkg/os/smb/api.go:68`; v1.2.1 `pkg/os/smb/api.go:72`, `cmd/csi-proxy/main.go:39`; v1.3.0 `pkg/cim/smb.go:87-99`",
    },
    ProfileRow {
        id: "smb_reuse",
        behaviour: "NewSmbGlobalMapping: only an `OK` mapping counts as mapped; an OK one that fails `PathValid` is removed and re-created; a non-OK one is re-created directly",
        releases: ["same in all", "same", "same", "same"],
        source: "`pkg/server/smb/server.go:71-104` (identical at all four); v1.1.3 `pkg/os/smb/api.go:25-37`; v1.3.0 `pkg/os/smb/api.go:30-47`",
    },
    ProfileRow {
        id: "smb_disconnected_recreate",
        behaviour: "Re-creating a `Disconnected` mapping (after a reboot) with the same credentials",
        releases: [
            "error 1219 (configurable off: `disconnected_mapping_blocks_create`)",
            "same",
            "same, in the WMI error form",
            "same, `code=1219`",
        ],
        source: "reports: microsoft/K8s-Storage-Plugins#14, csi-driver-smb#219, #1007 (1219 after reboot); no report shows 85; the exact code is unverified",
    },
    ProfileRow {
        id: "smb_errors",
        behaviour: "Shape of a failed NewSmbGlobalMapping / RemoveSmbGlobalMapping of an absent mapping",
        releases: [
            "`NewSmbGlobalMapping failed. output: \"New-SmbGlobalMapping : <text> … Windows System Error N,New-SmbGlobalMapping…\", err: exit status 1`; `UnmountSmbShare failed. output: \"Remove-SmbGlobalMapping : No MSFT_SmbGlobalMapping objects found …\"`",
            "same",
            "`NewSmbGlobalMapping failed. result: -1, err: Exception occurred. (<text>)`; `error remove smb mapping '<root>'. err: Not Found`",
            "`NewSmbGlobalMapping failed. err: WMI MSFT_SmbGlobalMapping.Create failed (target=<nil>): code=N`; `error remove smb mapping '<root>'. err: failed to query SMB global mapping by remote path <root>: not found`",
        ],
        source: "v1.1.3 `pkg/os/smb/api.go:73,81`; v1.3.0 `pkg/os/smb/api.go:73,83`, `pkg/cim/wmi.go:65-66` + microsoft/wmi `pkg/errors/errors.go` (`Not Found`); master `pkg/os/smb/api.go:75,86`, `pkg/wmi/smb.go:83-101,118-124`, `pkg/wmi/wmi.go:58,897-903`; whether the providers raise (go-ole `Exception occurred.`) or return a code is unverified (configurable: `wmi_failures`)",
    },
    ProfileRow {
        id: "smb_link_form",
        behaviour: "The link made at `local_path`",
        releases: [
            "`New-Item -ItemType SymbolicLink` → `\\\\server\\share\\dir\\`",
            "same",
            "`CreateSymbolicLink(\\\\?\\<local>, \\\\?\\\\\\server\\share\\dir\\)`",
            "same",
        ],
        source: "v1.1.3 `pkg/os/smb/api.go:46-61`; v1.3.0 `pkg/os/smb/api.go:52-67` (`:58`); master `pkg/os/smb/api.go:54-69`; whether Windows resolves the `\\\\?\\\\\\server` form is unverified (chosen: it resolves; configurable: `long_unc_links_resolve`)",
    },
    ProfileRow {
        id: "smb_link_target",
        behaviour: "NewSmbGlobalMapping's link when its target (the full remote path) does not exist; the mapping made before the link stays either way",
        releases: [
            "refused: `creating link L to R failed with error: error linking R\\ to L. output: \"New-Item : Cannot find path 'R\\' because it does not exist. … ItemNotFoundException …\", err: exit status 1`",
            "same",
            "a dangling link is made (`CreateSymbolicLink`)",
            "same",
        ],
        source: "v1.1.3 `pkg/os/smb/api.go:46-61` and v1.2.1 `:50-65` (`New-Item -ItemType SymbolicLink … -Target`, run by Windows PowerShell 5.1), `pkg/server/smb/server.go:97-117` (the mapping first, then the link); links to missing targets came with PowerShell 6 (PowerShell/PowerShell#804, 2016-04; #9067 shows 6.2 still refusing an unreachable target), so 5.1 refusing them is medium confidence; the record's exact text is unverified; v1.3.0 `pkg/os/smb/api.go:52-67`, master `:54-69`",
    },
    ProfileRow {
        id: "is_symlink_one_hop",
        behaviour: "IsSymlink: `Lstat`; for a link, `Readlink` then `Lstat` of the immediate target only; errors other than 2/3/53 are returned",
        releases: [
            "same in all (a mount point counts: Go < 1.23 reports it as a symlink)",
            "same",
            "same (`IsMountedFolder` too)",
            "same",
        ],
        source: "v1.1.3/v1.2.1 `pkg/os/filesystem/api.go:123-146`; v1.3.0 `pkg/os/filesystem/api.go:100-128`, `pkg/utils/utils.go:113-123`; master same lines; Go `syscall/syscall_windows.go` `Errno.Is`",
    },
    ProfileRow {
        id: "unc_errors",
        behaviour: "The Windows error for reading through an SMB link whose share is unreachable (drives IsSymlink)",
        releases: [
            "unmapped 5, Disconnected 5, unreachable 53 (= false), bad credentials 1326, share gone 67 (all configurable)",
            "same",
            "same",
            "same",
        ],
        source: "1326: v1.3.0 `pkg/utils/utils.go:39`; 5 for Disconnected: csi-driver-smb#733; the others unverified",
    },
    ProfileRow {
        id: "create_symlink_kind",
        behaviour: "CreateSymlink makes a directory link only if the source `Stat`s as a directory; otherwise a file link (unusable as a directory)",
        releases: ["same in all", "same", "same", "same"],
        source: "v1.1.3 `pkg/os/filesystem/api.go:111-113`; v1.3.0 `:88-90`; Go `os/file_windows.go` `Symlink`",
    },
    ProfileRow {
        id: "mkdir_over_file",
        behaviour: "Mkdir of a path that is a file, or below one (`F\\x\\y`): `os.MkdirAll` walks up to the nearest existing path and fails there with `ENOTDIR`, which is Windows error 3 on Windows; the error names that file, not the requested path",
        releases: [
            "`mkdir <file>: The system cannot find the path specified.`",
            "same",
            "same",
            "same",
        ],
        source: "v1.1.3 `pkg/os/filesystem/api.go:75-77`, v1.3.0 `:51-54` (`os.MkdirAll`); go1.25 `src/os/path.go:21-27` (the `Stat` fast path, long-standing: also in Go 1.20), `src/syscall/zerrors_windows.go:9` (`ENOTDIR = ERROR_PATH_NOT_FOUND`); measured against the real server at v1.1.3, v1.3.0 and master under Wine",
    },
    ProfileRow {
        id: "missing_parent_code",
        behaviour: "Non-forced Rmdir and IsSymlink of a missing path: Windows error 2 when its parent is a directory, 3 (\"The system cannot find the path specified.\") when the parent is missing or a file",
        releases: ["same in all", "same", "same", "same"],
        source: "`os.Remove` (DeleteFile and RemoveDirectory both fail with 3 there, so 3 is returned: go1.25 `src/os/file_windows.go:222-256`) and `os.Lstat`; measured against the real server at v1.1.3, v1.3.0 and master under Wine",
    },
    ProfileRow {
        id: "lstat_missing_op",
        behaviour: "The call named by IsSymlink's error for a missing path (`<op> <path>: …`)",
        releases: [
            "`CreateFile` (Go 1.20)",
            "`CreateFile` (unverified: built with Go 1.23.1)",
            "`CreateFile` (unverified: built with Go 1.24.4)",
            "`GetFileAttributesEx` (Go ≥ 1.25)",
        ],
        source: "go1.25 `src/os/stat_windows.go:37-40`; Go 1.20 opens the path after `GetFileAttributesEx` fails and reports `CreateFile` (measured at v1.1.3); master `go.mod:3` (`go 1.25.0`); build Go per release: `release-tools/prow.sh:89` at v1.1.3 (1.20), v1.2.1 (1.23.1), v1.3.0 (1.24.4); which Go release made the change is unsettled here, so v1.2.1 and v1.3.0 are unverified (chosen: `CreateFile`)",
    },
    ProfileRow {
        id: "dangling_mount_point_volume_id",
        behaviour: "GetVolumeIDFromTargetPath on a mount point whose volume is gone",
        releases: [
            "the old `\\\\?\\Volume{…}\\` (`(Get-Item).Target` reads the reparse data)",
            "same",
            "error `The system cannot find the file specified.`",
            "same",
        ],
        source: "v1.1.3 `pkg/os/volume/api.go:270-293`; v1.2.1 `:270-299`; democratic-csi `src/utils/windows.js:58-76`; v1.3.0 `pkg/os/volume/api.go:313-340`: unverified (chosen: error)",
    },
    ProfileRow {
        id: "mkdir_dangling_mount_point",
        behaviour: "Mkdir over a dangling mount point",
        releases: [
            "`mkdir P: Cannot create a file when that file already exists.`",
            "same",
            "same (`godebug winsymlink=0`)",
            "success (Go 1.25 reports mount points as directories)",
        ],
        source: "v1.1.3 `go.mod:3` (go 1.20); v1.2.1 `go.mod:6`; v1.3.0 `go.mod:8`; master `go.mod:3`; kubernetes#119401",
    },
    ProfileRow {
        id: "list_volumes_edge",
        behaviour: "ListVolumesOnDisk of an unknown disk / a disk without partitions",
        releases: [
            "error `Get-Disk : No MSFT_Disk objects found …` / `Get-Partition : No MSFT_Partition objects found …`, its record's `FullyQualifiedErrorId` `CmdletizationQuery_NotFound_DiskNumber,Get-Partition` (wrapped at 78 columns; unverified, real-node check 34)",
            "same",
            "`[]` / `[]`",
            "`[]` / `[]`",
        ],
        source: "v1.1.3 `pkg/os/volume/api.go:83-98`; v1.3.0 `pkg/os/volume/api.go:71-94`, `pkg/cim/volume.go:186-205` (`IgnoreNotFound`); master `pkg/wmi/volume.go:144-181`; the record's shape: cloudfoundry/bosh-agent `platform/windows_platform_test.go` (`getPartitionError`)",
    },
    ProfileRow {
        id: "not_found_texts",
        behaviour: "A volume / disk / target that does not exist",
        releases: [
            "the cmdlet's `No MSFT_<Class> objects found with property '<P>' equal to '<V>'.` inside `… cmd: …, output: …, error: exit status 1`",
            "same",
            "`… error: Not Found` (or bare `Not Found`)",
            "`… failed to query <thing> <id>: not found` / `… error: not found`",
        ],
        source: "v1.1.3 `pkg/os/volume/api.go:119-123`, `pkg/os/disk/api.go:324-327`; v1.3.0 `pkg/os/volume/api.go:132-134`, `pkg/cim/volume.go:64`; master `pkg/wmi/volume.go:53-63`, `pkg/wmi/disk.go:65-76`",
    },
    ProfileRow {
        id: "discover_portal_missing",
        behaviour: "DiscoverTargetPortal of a portal that is not added",
        releases: [
            "`error discovering target portal. cmd: ConvertTo-Json -InputObject @(Get-IscsiTargetPortal … \\| Get-IscsiTarget \\| Select-Object -ExpandProperty NodeAddress), output: Get-IscsiTargetPortal : No MSFT_iSCSITargetPortal objects found …, err: exit status 1`",
            "same",
            "`error list targets by target portal at (A:P). err: Not Found`",
            "`error list targets by target portal at (A:P). err: failed to query iSCSI target portal at (A:P). error: not found`",
        ],
        source: "v1.1.3/v1.2.1 `pkg/os/iscsi/api.go:34-45`; v1.3.0 `pkg/os/iscsi/api.go:44-50`, `pkg/cim/iscsi.go:57-65`, `pkg/cim/wmi.go:65-66`; master `pkg/os/iscsi/api.go:46-53`, `pkg/wmi/iscsi.go:75`, `pkg/wmi/wmi.go:708-709`; v1.3.0 and master measured against the real server under Wine (master with Wine's own error in place of `not found`); the cmdlet's record is unverified in detail",
    },
    ProfileRow {
        id: "unmount_not_mounted",
        behaviour: "UnmountVolume where nothing is mounted",
        releases: [
            "error `Remove-PartitionAccessPath : The access path is not valid.`",
            "same",
            "error `… The file or directory is not a reparse point.`",
            "same",
        ],
        source: "v1.1.3 `pkg/os/volume/api.go:147-162`; democratic-csi `src/driver/index.js:2916-2920`; v1.3.0 `pkg/os/volume/api.go:176-191`",
    },
    ProfileRow {
        id: "disk_arrival",
        behaviour: "A LUN's disk arrives after the login, a disk's volumes after it comes online, a new partition's volume after `PartitionDisk` (the partition itself at once), each after its own delay (`behaviour.arrival`, realistic by default; a LUN's `arrival_delay_ms` / `volume_arrival_delay_ms` override); the storage cache shows an arrival `cache_lag_ms` later, or at a `Rescan` once it has happened: `Rescan` hurries nothing (host, all releases)",
        releases: ["no call waits for an arrival", "same", "same", "same"],
        source: "`Rescan` = `Update-HostStorageCache` v1.1.3 `pkg/os/disk/api.go:122-129` / `MSFT_StorageSetting.UpdateHostStorageCache` v1.3.0 `pkg/os/disk/api.go:119-127`; `SetDiskState`, `PartitionDisk` return without waiting (v1.1.3 `pkg/os/disk/api.go:166-173,345-353`; v1.3.0 `pkg/os/disk/api.go:177-223,387-411`); democratic-csi `src/driver/index.js:2303`; delays (default 500 ms each) unverified",
    },
    ProfileRow {
        id: "partition_disk_mbr",
        behaviour: "PartitionDisk on an MBR-initialised LUN without partitions",
        releases: [
            "`New-Partition -UseMaximumSize`: an IFS partition",
            "same",
            "fails: `CreatePartition` is passed the GPT basic-data `GptType`; chosen: 41010 `The specified partition type is not valid.`",
            "same",
        ],
        source: "v1.1.3 `pkg/os/disk/api.go:166-173`; v1.3.0 `pkg/os/disk/api.go:184-199` (`:193`); master `pkg/os/disk/api.go:192-204` (`:201`); the code an MBR disk answers is unverified",
    },
    ProfileRow {
        id: "volume_id_match",
        behaviour: "How volume calls (IsVolumeFormatted, FormatVolume, MountVolume, GetVolumeStats, …) match the volume id",
        releases: [
            "case-insensitive (`Get-Volume -UniqueId`)",
            "same",
            "exact-case: `MSFT_Volume` enumerated, `UniqueId == volumeID` compared in Go",
            "case-insensitive (WQL `=`)",
        ],
        source: "v1.1.3 `pkg/os/volume/api.go`; v1.3.0 `pkg/cim/volume.go:38-65` (`:59`); master `pkg/wmi/volume.go:53-56`",
    },
    ProfileRow {
        id: "read_only_flush",
        behaviour: "WriteVolumeCache, and UnmountVolume (which flushes first), of a volume on a read-only disk (host, all releases)",
        releases: [
            "chosen: fails, `Write-VolumeCache` error 19 `The media is write protected.`",
            "same",
            "chosen: fails, `MSFT_Volume.Flush` result 19",
            "same",
        ],
        source: "v1.1.3 `pkg/os/volume/api.go:401-408`; v1.3.0 `pkg/os/volume/api.go:436-449`; master `pkg/os/volume/api.go:459-474`, `pkg/wmi/volume.go:103-112`; whether Windows refuses the flush is unverified (`behaviour.read_only_flush_fails`, real-node check 29)",
    },
    ProfileRow {
        id: "san_policy",
        behaviour: "iSCSI LUNs arrive offline (default SAN policy OfflineShared) unless the LUN says otherwise; optionally read-only",
        releases: ["same in all", "same", "same", "same"],
        source: "VDS_SAN_POLICY docs; whether an OfflineShared LUN is also read-only on arrival is unverified (chosen: writable)",
    },
    ProfileRow {
        id: "calls_outlive_clients",
        behaviour: "A host call keeps running after its client went away (context and deadlines are ignored)",
        releases: ["same in all", "same", "same", "same"],
        source: "no `ctx` reaches the host in any `pkg/os` package (all four)",
    },
    ProfileRow {
        id: "discovery_refresh",
        behaviour: "A target the array created after its portal was added on the node: `DiscoverTargetPortal` lists only the portal's cached targets (Windows' discovery cache), in every release; what refreshes the cache through csi-proxy",
        releases: [
            "`AddTargetPortal` again (`New-IscsiTargetPortal`): only with `portal_readd_refreshes` (unverified; default no); `RemoveTargetPortal` + `AddTargetPortal`: yes",
            "same",
            "`AddTargetPortal` of an added portal returns early: no; `RemoveTargetPortal` + `AddTargetPortal`: yes",
            "same",
        ],
        source: "v1.1.3/v1.2.1 `pkg/os/iscsi/api.go:21-54` (`New-IscsiTargetPortal`; `Get-IscsiTargetPortal … \\| Get-IscsiTarget`), `:75-88` (remove); v1.3.0 `pkg/os/iscsi/api.go:23-64`, `:91-105`; master `pkg/os/iscsi/api.go:23-68`, `:97-113`; no RPC maps to `Update-IscsiTargetPortal`; unverified: whether re-running `New-IscsiTargetPortal`, or `Get-IscsiTarget` itself, runs SendTargets again (chosen: neither; the knob plays the other answer for the first)",
    },
    ProfileRow {
        id: "host_processes",
        behaviour: "Host processes a call starts (counted per call: audit `host_processes`, admin `host_processes`); which steps run depends on the host before the call (`sim/src/state/processes.rs`)",
        releases: [
            "one `powershell` per step of every disk, volume, smb, iscsi and service call (`PartitionDisk` 2-4, `NewSmbGlobalMapping` 2-5, `UnmountVolume` 2, `ResizeVolume` 1-3, `GetVolumeIDFromTargetPath` 1 per link); `GetBIOSSerialNumber`: one `wmic`; filesystem calls: none",
            "same",
            "none (WMI and Win32 in-process)",
            "none",
        ],
        source: "v1.1.3/v1.2.1 `pkg/utils/utils.go:12-18`, `pkg/os/system/api.go:37` (`wmic`), `pkg/os/filesystem/api.go` (Go `os`; only `PathValid`, `:52-61`, used by the SMB server, runs PowerShell), `pkg/server/disk/server.go:48-86`, `pkg/server/smb/server.go:55-122`, `pkg/os/volume/api.go:147-162,165-214,270-293`; v1.3.0, master: no `RunPowershellCmd` or `exec.Command` under `pkg/` or `cmd/`",
    },
];

/// The table as Markdown (the block `sim/README.md` embeds).
pub fn profile_table_markdown() -> String {
    let mut out = String::from(
        "| Row | Behaviour | v1.1.3 | v1.2.1 | v1.3.0 | master | Source |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in ROWS {
        let [a, b, c, d] = r.releases;
        out.push_str(&format!(
            "| `{}` | {} | {a} | {b} | {c} | {d} | {} |\n",
            r.id, r.behaviour, r.source
        ));
    }
    out
}
