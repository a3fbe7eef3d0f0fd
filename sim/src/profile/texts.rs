//! Every error text that differs between csi-proxy releases, built from the profile's [`Backend`].
//!
//! The Go wrappers (`error … cmd: …, output: …, error: exit status 1`, `… error: Not Found`, `WMI <C>.<M> failed
//! (target=…): code=N`) follow the cited csi-proxy source exactly. Inside PowerShell-era outputs, the first line of
//! a cmdlet error is from the cited sources where one exists; the `At line…` / `CategoryInfo` /
//! `FullyQualifiedErrorId` frame around it is reconstructed (PowerShell 5.1's layout) and unverified in detail.
//! Sources per text are in `sim/README.md` (table rows) and on each function.

use super::{Backend, Profile, WmiFailureReport, windows_message};
use crate::error::Error;

/// Go's `%q` for an ASCII-ish string (what csi-proxy uses for SMB outputs).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A PowerShell 5.1 error record as `CombinedOutput` captures it (real CR LF line ends).
pub(crate) fn ps_block(
    cmdlet: &str,
    message: &str,
    command: &str,
    category: &str,
    fqid: &str,
) -> String {
    let snippet: String = if command.chars().count() > 70 {
        format!("{} ...", command.chars().take(70).collect::<String>())
    } else {
        command.to_string()
    };
    let tildes = "~".repeat(snippet.chars().count().min(74));
    format!(
        "{cmdlet} : {message}\r\nAt line:1 char:1\r\n+ {snippet}\r\n+ {tildes}\r\n    + CategoryInfo          : {category}\r\n    + FullyQualifiedErrorId : {fqid}\r\n \r\n"
    )
}

/// The cmdletization "not found" record (`No MSFT_Volume objects found with property 'UniqueId' equal to …`).
pub(crate) fn ps_not_found(
    cmdlet: &str,
    class: &str,
    property: &str,
    value: &str,
    command: &str,
) -> String {
    ps_block(
        cmdlet,
        &format!(
            "No {class} objects found with property '{property}' equal to '{value}'.  Verify the value of the property and retry."
        ),
        command,
        &format!("ObjectNotFound: ({value}:String) [{cmdlet}], CimJobException"),
        &format!("CmdletizationQuery_NotFound_{property},{cmdlet}"),
    )
}

/// A cmdlet failing with a CIM exception (storage, SMB and iSCSI cmdlets).
pub(crate) fn ps_cim_error(
    cmdlet: &str,
    message: &str,
    command: &str,
    class: &str,
    fqid: &str,
) -> String {
    ps_block(
        cmdlet,
        message,
        command,
        &format!("NotSpecified: ({class}:ROOT/Microsoft/...{class}) [{cmdlet}], CimException"),
        &format!("{fqid},{cmdlet}"),
    )
}

/// The `%v` of a go-ole `*ole.IDispatch` in master's `WMIError` (a pointer; the value is irrelevant).
const DISPATCH: &str = "&{{0xc000a2e1a0}}";

/// go-ole's text for a method that raised (`DISP_E_EXCEPTION` with the provider's description).
pub(crate) fn ole_exception(description: &str) -> String {
    format!("Exception occurred. ({description})")
}

fn wmi_error(class: &str, method: &str, target: &str, code: u32) -> String {
    format!("WMI {class}.{method} failed (target={target}): code={code}")
}

/// v1.3.0's `microsoft/wmi` "not found" (`pkg/errors/errors.go`).
pub(crate) const WMI_NOT_FOUND: &str = "Not Found";
/// master's `pkg/wmi` `ErrNotFound` (`pkg/wmi/wmi.go:58`).
pub(crate) const GOOLE_NOT_FOUND: &str = "not found";

/// How the profile reports failed WMI method calls, with the host's override.
pub(crate) fn wmi_report(p: &Profile, over: Option<WmiFailureReport>) -> WmiFailureReport {
    over.unwrap_or(p.wmi_failures)
}

// ---------------------------------------------------------------------------------------------------------------
// Volume group
// ---------------------------------------------------------------------------------------------------------------

/// Which volume call met a volume id that does not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VolumeOp {
    IsFormatted,
    Format,
    Stats,
    /// WriteVolumeCache, and UnmountVolume (which flushes first).
    WriteCache,
    /// ResizeVolume with size 0 (asks for `SizeMax`).
    ResizeToMax,
    /// ResizeVolume with an explicit size (asks for the current size).
    Resize,
    DiskNumber,
}

const PS_VOL_FILTER: &str = r#"Get-Volume -UniqueId "$Env:volumeID""#;

fn ps_volume_not_found(id: &str, cmd: &str) -> String {
    ps_not_found("Get-Volume", "MSFT_Volume", "UniqueId", id, cmd)
}

/// A volume id that does not resolve. PowerShell: v1.1.3 `pkg/os/volume/api.go:64-80,117-130,100-110,216-231,
/// 243-253,401-408`; v1.3.0: `pkg/os/volume/api.go:132-134,99-102,262-265,438-441,198-201,287-291`; master:
/// `pkg/os/volume/api.go` + `pkg/wmi/volume.go:53-63`.
pub(crate) fn volume_not_found(p: &Profile, op: VolumeOp, id: &str) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let (prefix, cmd) = match op {
                VolumeOp::IsFormatted => (
                    "error checking if volume is formatted",
                    format!("({PS_VOL_FILTER} -ErrorAction Stop).FileSystemType"),
                ),
                VolumeOp::Format => (
                    "error formatting volume",
                    format!("{PS_VOL_FILTER} | Format-Volume -FileSystem ntfs -Confirm:$false"),
                ),
                VolumeOp::Stats => (
                    "error getting capacity and used size of volume",
                    format!("({PS_VOL_FILTER} | Select SizeRemaining,Size) | ConvertTo-Json"),
                ),
                VolumeOp::WriteCache => (
                    "error writing volume cache",
                    format!("{PS_VOL_FILTER} | Write-Volumecache"),
                ),
                VolumeOp::ResizeToMax => (
                    "error getting sizemin,sizemax from mount",
                    format!(
                        "{PS_VOL_FILTER} | Get-partition | Get-PartitionSupportedSize | Select SizeMax | ConvertTo-Json"
                    ),
                ),
                VolumeOp::Resize => {
                    let cmd = format!("({PS_VOL_FILTER} | Get-partition).Size");
                    let out = ps_volume_not_found(id, &cmd);
                    return Error::host(format!(
                        "error getting the current size of volume ({id}) with error (error getting size of the partition from mount. cmd {cmd}, output: {out}, error: exit status 1)"
                    ));
                }
                VolumeOp::DiskNumber => (
                    "error getting disk number",
                    format!("({PS_VOL_FILTER} | Get-Partition).DiskNumber"),
                ),
            };
            let out = ps_volume_not_found(id, &cmd);
            format!("{prefix}. cmd: {cmd}, output: {out}, error: exit status 1")
        }
        Backend::MicrosoftWmi => match op {
            VolumeOp::IsFormatted => {
                format!("error checking if volume ({id}) is formatted. error: {WMI_NOT_FOUND}")
            }
            VolumeOp::Format => format!("error formatting volume ({id}). error: {WMI_NOT_FOUND}"),
            VolumeOp::Stats => format!(
                "error getting capacity and used size of volume ({id}). error: {WMI_NOT_FOUND}"
            ),
            VolumeOp::WriteCache => {
                format!("error writing volume ({id}) cache. error: {WMI_NOT_FOUND}")
            }
            VolumeOp::ResizeToMax | VolumeOp::Resize | VolumeOp::DiskNumber => {
                WMI_NOT_FOUND.to_string()
            }
        },
        Backend::GoOleWmi => {
            let inner = format!("failed to query volume {id}: {GOOLE_NOT_FOUND}");
            match op {
                VolumeOp::IsFormatted
                | VolumeOp::Format
                | VolumeOp::Stats
                | VolumeOp::WriteCache => {
                    format!("error querying volume ({id}). error: {inner}")
                }
                VolumeOp::ResizeToMax | VolumeOp::Resize | VolumeOp::DiskNumber => inner,
            }
        }
    };
    Error::host(text)
}

/// Why MountVolume failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MountFailure {
    /// The same volume is already mounted there (PowerShell only; WMI succeeds).
    AlreadyMounted,
    /// Another volume or a link is mounted there.
    OtherMounted,
    /// A plain directory that is not empty.
    NotEmpty,
    /// The target path does not exist.
    Missing,
    /// The target path is a file.
    NotADirectory,
    /// The volume id does not resolve.
    NoVolume,
}

/// MountVolume failures. v1.1.3 `pkg/os/volume/api.go:133-144` (texts: democratic-csi
/// `src/driver/index.js:2384-2392` for the re-mount; the rest unverified); v1.3.0 `pkg/os/volume/api.go:149-173`.
pub(crate) fn mount_failed(p: &Profile, id: &str, path: &str, why: MountFailure) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let cmd = format!(
                "{PS_VOL_FILTER} | Get-Partition | Add-PartitionAccessPath -AccessPath $Env:mountpath"
            );
            let out = match why {
                MountFailure::NoVolume => ps_volume_not_found(id, &cmd),
                MountFailure::AlreadyMounted => ps_cim_error(
                    "Add-PartitionAccessPath",
                    "The requested access path is already in use.",
                    &cmd,
                    "StorageWMI",
                    "StorageWMI 42002",
                ),
                _ => ps_cim_error(
                    "Add-PartitionAccessPath",
                    "The access path is not valid.",
                    &cmd,
                    "StorageWMI",
                    "StorageWMI 42001",
                ),
            };
            format!("error mount volume to path. cmd: {cmd}, output: {out}, error: exit status 1")
        }
        Backend::MicrosoftWmi | Backend::GoOleWmi => match why {
            MountFailure::NotEmpty => format!(
                "error get target volume ({id}) to path {path}. error: not a mounted folder"
            ),
            MountFailure::AlreadyMounted | MountFailure::OtherMounted => format!(
                "error mount volume ({id}) to path {path}. error: {}",
                windows_message(145)
            ),
            MountFailure::Missing | MountFailure::NoVolume => format!(
                "error mount volume ({id}) to path {path}. error: {}",
                windows_message(2)
            ),
            MountFailure::NotADirectory => format!(
                "error mount volume ({id}) to path {path}. error: {}",
                windows_message(267)
            ),
        },
    };
    Error::host(text)
}

/// UnmountVolume where nothing (or nothing at all) is at the path. v1.1.3 `pkg/os/volume/api.go:147-162`
/// (democratic-csi `src/driver/index.js:2916-2920`); v1.3.0 `pkg/os/volume/api.go:176-191`.
pub(crate) fn unmount_failed(p: &Profile, id: &str, path: &str, missing: bool) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let cmd = format!(
                "{PS_VOL_FILTER} | Get-Partition | Remove-PartitionAccessPath -AccessPath $Env:mountpath"
            );
            let out = ps_cim_error(
                "Remove-PartitionAccessPath",
                "The access path is not valid.",
                &cmd,
                "StorageWMI",
                "StorageWMI 42001",
            );
            // Sic: no space before "error" (`pkg/os/volume/api.go:159`).
            format!(
                "error getting driver letter to mount volume. cmd: {cmd}, output: {out},error: exit status 1"
            )
        }
        Backend::MicrosoftWmi | Backend::GoOleWmi => format!(
            "error umount volume ({id}) from path {path}. error: {}",
            windows_message(if missing { 2 } else { 4390 })
        ),
    };
    Error::host(text)
}

/// Why GetVolumeIDFromTargetPath failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VolumeIdFailure {
    /// Nothing at the path.
    Missing,
    /// A directory (or file) with no reparse target.
    NotMounted,
    /// A mount point or link whose target cannot be resolved to a volume.
    Unresolvable,
}

/// GetVolumeIDFromTargetPath failures. v1.1.3 `pkg/os/volume/api.go:270-293`; v1.3.0 `pkg/os/volume/api.go:
/// 304-340` (x/sys/windows calls return bare `Errno`s).
pub(crate) fn volume_id_failed(
    p: &Profile,
    mount: &str,
    failing: &str,
    why: VolumeIdFailure,
) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let cmd = "(Get-Item -Path $Env:mountpath).Target";
            let out = match why {
                VolumeIdFailure::Missing => ps_block(
                    "Get-Item",
                    &format!("Cannot find path '{failing}' because it does not exist."),
                    "(Get-Item -Path $Env:mountpath).Target",
                    &format!(
                        "ObjectNotFound: ({failing}:String) [Get-Item], ItemNotFoundException"
                    ),
                    "PathNotFound,Microsoft.PowerShell.Commands.GetItemCommand",
                ),
                VolumeIdFailure::NotMounted | VolumeIdFailure::Unresolvable => String::new(),
            };
            let err = if out.is_empty() {
                "<nil>"
            } else {
                "exit status 1"
            };
            format!(
                "error getting the volume for the mount {mount}, internal error error getting volume from mount. cmd: {cmd}, output: {out}, error: {err}"
            )
        }
        Backend::MicrosoftWmi | Backend::GoOleWmi => match why {
            VolumeIdFailure::NotMounted => "not a mounted folder".to_string(),
            VolumeIdFailure::Missing | VolumeIdFailure::Unresolvable => {
                windows_message(2).to_string()
            }
        },
    };
    Error::host(text)
}

/// `Resize-Partition` / `MSFT_Partition.Resize` refusing the size (StorageWMI 4097 "Size Not Supported").
/// v1.1.3 `pkg/os/volume/api.go:206-212` (text: csi-proxy PR #364); v1.3.0 `:233-236`; master `:243-247` +
/// `pkg/wmi/volume.go:343-354`.
pub(crate) fn resize_not_supported(
    p: &Profile,
    id: &str,
    size: i64,
    final_size: i64,
    sub_mib: bool,
) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let cmd =
                format!("{PS_VOL_FILTER} | Get-Partition | Resize-Partition -Size {final_size}");
            let extended = if sub_mib {
                "\r\n \r\nExtended information:\r\nThe size of the extent is less than the minimum of 1MB.\r\n \r\nActivity ID: {0ce86b89-e624-484f-a5aa-9810dccdf9b6}"
            } else {
                ""
            };
            let out = ps_cim_error(
                "Resize-Partition",
                &format!("Size Not Supported{extended}"),
                &cmd,
                "StorageWMI",
                "StorageWMI 4097",
            );
            format!(
                "error resizing volume. cmd: {cmd}, output: {out} size:{size}, finalSize {final_size}, error: exit status 1"
            )
        }
        Backend::MicrosoftWmi => format!(
            "error resizing volume ({id}). size:{size}, finalSize {final_size}, error: <nil>"
        ),
        Backend::GoOleWmi => format!(
            "error resizing volume ({id}). size:{size}, finalSize {final_size}, error: {}",
            wmi_error("MSFT_Partition", "Resize", DISPATCH, 4097)
        ),
    };
    Error::host(text)
}

/// FormatVolume on a write-protected disk. v1.1.3 `pkg/os/volume/api.go:101-110`; v1.3.0 `:104-118`;
/// master `pkg/wmi/volume.go:88-98`. The codes (19 / 40001-ish) are unverified.
pub(crate) fn format_write_protected(p: &Profile, id: &str) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let cmd = format!("{PS_VOL_FILTER} | Format-Volume -FileSystem ntfs -Confirm:$false");
            let out = ps_cim_error(
                "Format-Volume",
                windows_message(19),
                &cmd,
                "MSFT_Volume",
                "StorageWMI 19",
            );
            format!("error formatting volume. cmd: {cmd}, output: {out}, error: exit status 1")
        }
        Backend::MicrosoftWmi => {
            format!("error formatting volume ({id}). result: 19, error: <nil>")
        }
        Backend::GoOleWmi => format!(
            "error formatting volume ({id}). error: {}",
            wmi_error("MSFT_Volume", "Format", DISPATCH, 19)
        ),
    };
    Error::host(text)
}

/// A flush of a volume on a read-only disk (WriteVolumeCache, and UnmountVolume, which flushes first): v1.1.3
/// `pkg/os/volume/api.go:401-408` (`Write-Volumecache`), v1.3.0 `pkg/os/volume/api.go:436-449` (`MSFT_Volume.Flush`,
/// `result != 0`), master `pkg/os/volume/api.go:459-474` + `pkg/wmi/volume.go:103-112`. That the flush fails there,
/// and with 19, is **unverified** (`host.behaviour.read_only_flush_fails`).
pub(crate) fn flush_write_protected(p: &Profile, id: &str) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let cmd = format!("{PS_VOL_FILTER} | Write-Volumecache");
            let out = ps_cim_error(
                "Write-VolumeCache",
                windows_message(19),
                &cmd,
                "MSFT_Volume",
                "StorageWMI 19",
            );
            format!("error writing volume cache. cmd: {cmd}, output: {out}, error: exit status 1")
        }
        Backend::MicrosoftWmi => {
            format!("error writing volume ({id}) cache. result: 19, error: <nil>")
        }
        Backend::GoOleWmi => format!(
            "error writing volume ({id}) cache. error: {}",
            wmi_error("MSFT_Volume", "Flush", DISPATCH, 19)
        ),
    };
    Error::host(text)
}

/// ListVolumesOnDisk failures of the PowerShell era (`pkg/os/volume/api.go:83-98`): an unknown disk number
/// (`Get-Disk`) or a disk without partitions (`Get-Partition`).
pub(crate) fn ps_list_volumes_failed(disk: u32, partition: u32, no_disk: bool) -> Error {
    let cmd = if partition == 0 {
        format!("(Get-Disk -Number {disk} | Get-Partition | Get-Volume).UniqueId")
    } else {
        format!(
            "(Get-Disk -Number {disk} | Get-Partition -PartitionNumber {partition} | Get-Volume).UniqueId"
        )
    };
    let out = if no_disk {
        ps_not_found("Get-Disk", "MSFT_Disk", "Number", &disk.to_string(), &cmd)
    } else if partition == 0 {
        ps_not_found(
            "Get-Partition",
            "MSFT_Partition",
            "DiskNumber",
            &disk.to_string(),
            &cmd,
        )
    } else {
        ps_not_found(
            "Get-Partition",
            "MSFT_Partition",
            "PartitionNumber",
            &partition.to_string(),
            &cmd,
        )
    };
    Error::host(format!(
        "error list volumes on disk. cmd: {cmd}, output: {out}, error: exit status 1"
    ))
}

// ---------------------------------------------------------------------------------------------------------------
// Disk group
// ---------------------------------------------------------------------------------------------------------------

/// Which disk call met a disk number that does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiskOp {
    Stats,
    SetState(bool),
    GetState,
    Partition,
}

/// A disk number that does not exist. v1.1.3 `pkg/os/disk/api.go:131-142,323-369`; v1.3.0
/// `pkg/os/disk/api.go:129-145,368-425` + `pkg/cim/disk.go:48-61`; master `pkg/os/disk/api.go` +
/// `pkg/wmi/disk.go:65-76`.
pub(crate) fn disk_not_found(p: &Profile, op: DiskOp, n: u32) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let (prefix, cmd) = match op {
                DiskOp::Stats => (
                    "error getting size of disk",
                    format!("(Get-Disk -Number {n}).Size"),
                ),
                DiskOp::SetState(online) => (
                    "error setting disk attach state",
                    format!("(Get-Disk -Number {n}) | Set-Disk -IsOffline ${}", !online),
                ),
                DiskOp::GetState => (
                    "error getting disk state",
                    format!("(Get-Disk -Number {n}) | Select-Object -ExpandProperty IsOffline"),
                ),
                DiskOp::Partition => {
                    let cmd = format!("Get-Disk -Number {n} | Where partitionstyle -eq 'raw'");
                    let out = ps_not_found("Get-Disk", "MSFT_Disk", "Number", &n.to_string(), &cmd);
                    // `%v` of the []byte output: Go prints the bytes as decimal numbers (`pkg/os/disk/api.go:135`).
                    return Error::host(format!(
                        "error checking initialized status of disk {n}: {}, exit status 1",
                        go_bytes(&out)
                    ));
                }
            };
            let out = ps_not_found("Get-Disk", "MSFT_Disk", "Number", &n.to_string(), &cmd);
            format!("{prefix}. cmd: {cmd}, output: {out}, error: exit status 1")
        }
        Backend::MicrosoftWmi => match op {
            DiskOp::Partition => {
                format!("error checking initialized status of disk {n}: {WMI_NOT_FOUND}")
            }
            _ => WMI_NOT_FOUND.to_string(),
        },
        Backend::GoOleWmi => {
            let inner = format!("failed to query disk {n}. error: {GOOLE_NOT_FOUND}");
            match op {
                DiskOp::Partition => {
                    format!("error checking initialized status of disk {n}: {inner}")
                }
                _ => inner,
            }
        }
    };
    Error::host(text)
}

/// Go's `%v` of a `[]byte`: `[72 101 …]`.
pub(crate) fn go_bytes(s: &str) -> String {
    let nums: Vec<String> = s.bytes().map(|b| b.to_string()).collect();
    format!("[{}]", nums.join(" "))
}

/// Why PartitionDisk could not initialise or partition a disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartitionFailure {
    Offline,
    ReadOnly,
    NoSpace,
    /// v1.3.0 and master pass a GPT basic-data `GptType` to `CreatePartition` on an MBR disk (N5; code unverified).
    GptTypeOnMbr,
}

/// PartitionDisk failures on an existing disk. v1.1.3 `pkg/os/disk/api.go:144-173`; v1.3.0
/// `pkg/os/disk/api.go:147-223`; master `pkg/os/disk/api.go:150-235`. The storage codes are those of the
/// `MSFT_Disk.CreatePartition` page (createpartition-msft-disk.md: 41003 "The disk is offline.", 41002 "The disk is
/// read only.", 40000 "Not enough free space"; winhost's code table agrees). `Initialize`'s page lists neither an
/// offline nor a read-only code, so what it answers there is unverified: the same codes are used.
pub(crate) fn partition_failed(
    p: &Profile,
    n: u32,
    initialise: bool,
    why: PartitionFailure,
) -> Error {
    let (msg, code) = match why {
        PartitionFailure::Offline => ("The disk is offline.", 41003u32),
        PartitionFailure::ReadOnly => ("The disk is read only.", 41002),
        PartitionFailure::NoSpace => ("Not enough free space", 40000),
        PartitionFailure::GptTypeOnMbr => ("The specified partition type is not valid.", 41010),
    };
    let text = match (p.backend, initialise) {
        (Backend::PowerShell, true) => {
            let cmd = format!("Initialize-Disk -Number {n} -PartitionStyle GPT");
            let out = ps_cim_error(
                "Initialize-Disk",
                msg,
                &cmd,
                "MSFT_Disk",
                &format!("StorageWMI {code}"),
            );
            format!("error initializing disk {n}: {out}, exit status 1")
        }
        (Backend::PowerShell, false) => {
            let cmd = format!("New-Partition -DiskNumber {n} -UseMaximumSize");
            let out = ps_cim_error(
                "New-Partition",
                msg,
                &cmd,
                "MSFT_Disk",
                &format!("StorageWMI {code}"),
            );
            format!(
                "error creating partition on disk {n}: {}, exit status 1",
                go_bytes(&out)
            )
        }
        (Backend::MicrosoftWmi, true) => {
            format!("failed to initializing disk {n}: result {code}, error: <nil>")
        }
        (Backend::MicrosoftWmi, false) => {
            format!("error creating partition on disk {n}. result: {code}, err: <nil>")
        }
        (Backend::GoOleWmi, true) => format!(
            "failed to initializing disk {n}: error: {}",
            wmi_error("MSFT_Disk", "Initialize", DISPATCH, code)
        ),
        (Backend::GoOleWmi, false) => format!(
            "error creating partition on disk {n}. err: {}",
            wmi_error("MSFT_Disk", "CreatePartition", DISPATCH, code)
        ),
    };
    Error::host(text)
}

/// ListDiskIDs when one disk cannot be opened (`syscall.Open` error, returned as is in every release:
/// v1.1.3 `pkg/os/disk/api.go:260-265,308-312`).
pub(crate) fn disk_unopenable() -> Error {
    Error::host(windows_message(5))
}

// ---------------------------------------------------------------------------------------------------------------
// iSCSI group
// ---------------------------------------------------------------------------------------------------------------

/// `DiscoverTargetPortal` of a portal that is not added (or does not answer). v1.1.3/v1.2.1: `Get-IscsiTargetPortal`
/// finds nothing inside a pipeline; the output is printed with `%s` (real line ends) and the error `%w`-wrapped
/// (v1.1.3 `pkg/os/iscsi/api.go:37-44`). v1.3.0: `error list targets by target portal at (A:P). err: Not Found`
/// (`pkg/os/iscsi/api.go:47-50`, `pkg/cim/iscsi.go:57-65`, `pkg/cim/wmi.go:65-66`; measured). master: the query's own wrapper inside it
/// (`pkg/os/iscsi/api.go:50-53`, `pkg/wmi/iscsi.go:73-76`, `pkg/wmi/wmi.go:708-709`; measured).
pub(crate) fn discover_failed(p: &Profile, address: &str, port: u32) -> Error {
    Error::host(match p.backend {
        Backend::PowerShell => {
            const CMD: &str = "ConvertTo-Json -InputObject @(Get-IscsiTargetPortal -TargetPortalAddress ${Env:iscsi_tp_address} -TargetPortalPortNumber ${Env:iscsi_tp_port} | Get-IscsiTarget | Select-Object -ExpandProperty NodeAddress)";
            format!(
                "error discovering target portal. cmd: {CMD}, output: {}, err: exit status 1",
                ps_not_found(
                    "Get-IscsiTargetPortal",
                    "MSFT_iSCSITargetPortal",
                    "TargetPortalAddress",
                    address,
                    CMD,
                )
            )
        }
        Backend::MicrosoftWmi => format!(
            "error list targets by target portal at ({address}:{port}). err: {WMI_NOT_FOUND}"
        ),
        Backend::GoOleWmi => format!(
            "error list targets by target portal at ({address}:{port}). err: failed to query iSCSI target portal at ({address}:{port}). error: {GOOLE_NOT_FOUND}"
        ),
    })
}

/// The PowerShell ConnectTarget command line (`pkg/os/iscsi/api.go:95-106`); the secret is never in it.
pub(crate) fn ps_connect_cmd(chap_user: bool, chap_secret: bool) -> String {
    let mut cmd = String::from(
        "Connect-IscsiTarget -TargetPortalAddress ${Env:iscsi_tp_address} -TargetPortalPortNumber ${Env:iscsi_tp_port} -NodeAddress ${Env:iscsi_target_iqn} -AuthenticationType ${Env:iscsi_auth_type}",
    );
    if chap_user {
        cmd.push_str(" -ChapUsername ${Env:iscsi_chap_user}");
    }
    if chap_secret {
        cmd.push_str(" -ChapSecret ${Env:iscsi_chap_secret}");
    }
    cmd
}

/// Why a login failed (the iSCSI initiator's messages; ISDSC status codes unverified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoginFailure {
    /// ISDSC_TARGET_ALREADY_LOGGED_IN (democratic-csi `src/driver/index.js:2286-2293`).
    AlreadyLoggedIn,
    /// ISDSC_AUTH_FAILURE.
    Authentication,
    /// A CHAP secret outside 12–16 bytes.
    BadChapSecret,
    /// The target is not discovered through the portal.
    TargetNotFound,
    /// ISDSC_CONNECTION_FAILED: the portal does not answer (the text New-IscsiTargetPortal gives a portal not on the
    /// network, `State::add_target_portal`).
    ConnectionFailed,
}

impl LoginFailure {
    fn message(self) -> &'static str {
        match self {
            LoginFailure::AlreadyLoggedIn => {
                "The target has already been logged in via an iSCSI session."
            }
            LoginFailure::Authentication => "Authentication Failure.",
            LoginFailure::BadChapSecret => {
                "The CHAP secret given is invalid. Maximum size of CHAP secret is 16 bytes. Minimum size is 12 bytes if IPSec is not used."
            }
            LoginFailure::TargetNotFound => {
                "The target name is not found or is marked as hidden from login."
            }
            LoginFailure::ConnectionFailed => "Connection Failed.",
        }
    }

    fn status(self) -> u32 {
        match self {
            LoginFailure::AlreadyLoggedIn => 0xEFFF_003F,
            LoginFailure::Authentication => 0xEFFF_0009,
            LoginFailure::BadChapSecret => 0xEFFF_0067,
            LoginFailure::TargetNotFound => 0xEFFF_0063,
            LoginFailure::ConnectionFailed => 0xEFFF_0003,
        }
    }
}

/// A failed ConnectTarget login. v1.1.3 `pkg/os/iscsi/api.go:90-119` (`:115`); v1.3.0
/// `pkg/os/iscsi/api.go:126-129` and `pkg/cim/iscsi.go:333-353`; master `pkg/os/iscsi/api.go:135-138` and
/// `pkg/wmi/iscsi.go:356-382`.
///
/// `None` when a v1.3.0 provider reports through `ReturnValue` (v1.3.0 ignores it: a silent "success").
pub(crate) fn login_failed(
    p: &Profile,
    report: WmiFailureReport,
    address: &str,
    port: u32,
    chap_user: bool,
    chap_secret: bool,
    why: LoginFailure,
) -> Option<Error> {
    let text = match p.backend {
        Backend::PowerShell => {
            let cmd = ps_connect_cmd(chap_user, chap_secret);
            let out = ps_cim_error(
                "Connect-IscsiTarget",
                why.message(),
                &cmd,
                "MSFT_iSCSITarget",
                &format!("HRESULT {:#x}", why.status()),
            );
            format!(
                "error connecting to target portal. cmd {cmd}, output: {out}, err: exit status 1"
            )
        }
        Backend::MicrosoftWmi => match report {
            WmiFailureReport::Exception => format!(
                "error connecting to target portal. result: -1, err: {}",
                ole_exception(why.message())
            ),
            WmiFailureReport::ReturnValue => return None,
        },
        Backend::GoOleWmi => match report {
            WmiFailureReport::Exception => format!(
                "error connecting to target portal. err: failed to connect iSCSI target {address}:{port}. error: ExecMethod_ failed: {}",
                ole_exception(why.message())
            ),
            WmiFailureReport::ReturnValue => format!(
                "error connecting to target portal. err: {}",
                wmi_error("MSFT_iSCSITarget", "Connect", "<nil>", why.status())
            ),
        },
    };
    Some(Error::host(text))
}

/// Which PowerShell-era iSCSI call could not find the portal, the target or its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TargetOp {
    Disconnect,
    GetDisks,
}

/// The portal is not added on the host, or the IQN is not among its targets (WMI era; PowerShell is split
/// into [`ps_connect_target_not_found`] and friends because each cmdlet fails differently).
/// v1.3.0 `pkg/os/iscsi/api.go:109-112` + `pkg/cim/iscsi.go:57-65` (`Not Found`); master
/// `pkg/os/iscsi/api.go:118-121` + `pkg/wmi/iscsi.go:66-79,198-228`.
pub(crate) fn wmi_target_not_found(
    p: &Profile,
    iqn: &str,
    address: &str,
    port: u32,
    portal_missing: bool,
) -> Error {
    let err = match (p.backend, portal_missing) {
        (Backend::GoOleWmi, true) => format!(
            "failed to query iSCSI target portal at ({address}:{port}). error: {GOOLE_NOT_FOUND}"
        ),
        (Backend::GoOleWmi, false) => GOOLE_NOT_FOUND.to_string(),
        _ => WMI_NOT_FOUND.to_string(),
    };
    Error::host(format!(
        "error query target {iqn} from target portal at ({address}:{port}). err: {err}"
    ))
}

/// PowerShell-era failures of DisconnectTarget / GetTargetDisks (`pkg/os/iscsi/api.go:121-164`).
pub(crate) fn ps_target_call_failed(op: TargetOp, address: &str, why: PsTargetFailure) -> Error {
    let (prefix, cmd) = match op {
        TargetOp::Disconnect => (
            "error disconnecting from target portal",
            "Disconnect-IscsiTarget -InputObject (Get-IscsiTargetPortal -TargetPortalAddress ${Env:iscsi_tp_address} -TargetPortalPortNumber ${Env:iscsi_tp_port}  | Get-IscsiTarget | Where-Object { $_.NodeAddress -eq ${Env:iscsi_target_iqn} }) -Confirm:$false".to_string(),
        ),
        TargetOp::GetDisks => (
            "error getting target disks",
            "$ErrorActionPreference = \"Stop\"; $tp = Get-IscsiTargetPortal -TargetPortalAddress ${Env:iscsi_tp_address} -TargetPortalPortNumber ${Env:iscsi_tp_port}; $t = $tp | Get-IscsiTarget | Where-Object { $_.NodeAddress -eq ${Env:iscsi_target_iqn} }; $c = Get-IscsiConnection -IscsiTarget $t; $ids = $c | Get-Disk | Select -ExpandProperty Number | Out-String -Stream; ConvertTo-Json -InputObject @($ids)".to_string(),
        ),
    };
    let portal_nf = || {
        ps_not_found(
            "Get-IscsiTargetPortal",
            "MSFT_iSCSITargetPortal",
            "TargetPortalAddress",
            address,
            &cmd,
        )
    };
    let out = match (op, why) {
        (TargetOp::Disconnect, PsTargetFailure::PortalMissing) => {
            format!(
                "{}{}",
                portal_nf(),
                ps_null_input_object("Disconnect-IscsiTarget", &cmd)
            )
        }
        (TargetOp::Disconnect, PsTargetFailure::TargetMissing) => {
            ps_null_input_object("Disconnect-IscsiTarget", &cmd)
        }
        (TargetOp::Disconnect, PsTargetFailure::NotConnected) => ps_block(
            "Disconnect-IscsiTarget",
            "The session does not exist.",
            &cmd,
            "ObjectNotFound: (MSFT_iSCSITarget:ROOT/Microsoft/...SFT_iSCSITarget) [Disconnect-IscsiTarget], CimException",
            "HRESULT 0xefff001c,Disconnect-IscsiTarget",
        ),
        (_, PsTargetFailure::PortalMissing) => portal_nf(),
        (_, PsTargetFailure::TargetMissing) => ps_block(
            "Get-IscsiConnection",
            "Cannot validate argument on parameter 'IscsiTarget'. The argument is null or empty. Provide an argument that is not null or empty, and then try the command again.",
            &cmd,
            "InvalidData: (:) [Get-IscsiConnection], ParameterBindingValidationException",
            "ParameterArgumentValidationError,Get-IscsiConnection",
        ),
        (_, PsTargetFailure::NotConnected) => ps_block(
            "Get-IscsiConnection",
            "No matching MSFT_iSCSIConnection objects found by CIM query for instances of the ROOT/Microsoft/Windows/Storage/MSFT_iSCSITarget class on the  CIM server. Verify query parameters and retry.",
            &cmd,
            "ObjectNotFound: (MSFT_iSCSIConnection:String) [Get-IscsiConnection], CimJobException",
            "CmdletizationQuery_NotFound,Get-IscsiConnection",
        ),
    };
    Error::host(format!(
        "{prefix}. cmd {cmd}, output: {out}, err: exit status 1"
    ))
}

/// What a PowerShell-era target call did not find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PsTargetFailure {
    PortalMissing,
    TargetMissing,
    NotConnected,
}

fn ps_null_input_object(cmdlet: &str, cmd: &str) -> String {
    ps_block(
        cmdlet,
        "Cannot validate argument on parameter 'InputObject'. The argument is null. Provide a valid value for the argument, and then try running the command again.",
        cmd,
        &format!("InvalidData: (:) [{cmdlet}], ParameterBindingValidationException"),
        &format!("ParameterArgumentValidationError,{cmdlet}"),
    )
}

/// The Go runtime's message for the nil dereference that kills csi-proxy.
pub(crate) const NIL_DEREF: &str =
    "runtime error: invalid memory address or nil pointer dereference";

// ---------------------------------------------------------------------------------------------------------------
// SMB group
// ---------------------------------------------------------------------------------------------------------------

/// A failed `New-SmbGlobalMapping` / `MSFT_SmbGlobalMapping.Create` with Windows error `code`.
/// v1.1.3 `pkg/os/smb/api.go:63-76`; v1.3.0 `pkg/os/smb/api.go:69-77`; master `pkg/os/smb/api.go:71-79` +
/// `pkg/wmi/smb.go:107-126`. `None` when a v1.3.0 provider reports through `ReturnValue` (ignored: "success").
pub(crate) fn new_mapping_failed(
    p: &Profile,
    report: WmiFailureReport,
    code: u32,
) -> Option<Error> {
    let text = windows_message(code);
    let e = match p.backend {
        Backend::PowerShell => {
            let output = format!(
                "New-SmbGlobalMapping : {text} \r\nAt line:1 char:190\r\n+ ... ser, $PWord;New-SmbGlobalMapping -RemotePath $Env:smbremotepath -Cred ...\r\n+                 ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\r\n    + CategoryInfo          : NotSpecified: (MSFT_SmbGlobalMapping:ROOT/Microsoft/...mbGlobalMapping) [New-SmbGlobalMapping], CimException\r\n    + FullyQualifiedErrorId : Windows System Error {code},New-SmbGlobalMapping\r\n \r\n"
            );
            format!(
                "NewSmbGlobalMapping failed. output: {}, err: exit status 1",
                go_quote(&output)
            )
        }
        Backend::MicrosoftWmi => match report {
            WmiFailureReport::Exception => format!(
                "NewSmbGlobalMapping failed. result: -1, err: {}",
                ole_exception(text)
            ),
            WmiFailureReport::ReturnValue => return None,
        },
        Backend::GoOleWmi => match report {
            WmiFailureReport::Exception => format!(
                "NewSmbGlobalMapping failed. err: failed to create SMB global mapping: ExecMethod_ failed: {}",
                ole_exception(text)
            ),
            WmiFailureReport::ReturnValue => format!(
                "NewSmbGlobalMapping failed. err: {}",
                wmi_error("MSFT_SmbGlobalMapping", "Create", "<nil>", code)
            ),
        },
    };
    Some(Error::host(e))
}

/// PowerShell era: a mapping request with an empty user name or password never reaches `New-SmbGlobalMapping`
/// (`ConvertTo-SecureString -String ''` / `PSCredential` reject it). v1.1.3 `pkg/os/smb/api.go:66-68`. The exact
/// PowerShell text is unverified.
pub(crate) fn ps_credential_required(empty_password: bool) -> Error {
    let output = if empty_password {
        "ConvertTo-SecureString : Cannot bind argument to parameter 'String' because it is an empty string.\r\nAt line:1 char:46\r\n+ $PWord = ConvertTo-SecureString -String $Env:smbpassword -AsPlainText  ...\r\n+                                         ~~~~~~~~~~~~~~~~\r\n    + CategoryInfo          : InvalidData: (:) [ConvertTo-SecureString], ParameterBindingValidationException\r\n    + FullyQualifiedErrorId : ParameterArgumentValidationErrorEmptyStringNotAllowed,Microsoft.PowerShell.Commands.ConvertToSecureStringCommand\r\n \r\n".to_string()
    } else {
        "New-Object : Exception calling \".ctor\" with \"2\" argument(s): \"Cannot process argument because the value of argument \"userName\" is not valid. Change the value of the \"userName\" argument and run the operation again.\"\r\nAt line:1 char:88\r\n+ ... ; $Credential = New-Object -TypeName System.Management.Automation.PSCredent ...\r\n+                     ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\r\n    + CategoryInfo          : InvalidOperation: (:) [New-Object], MethodInvocationException\r\n    + FullyQualifiedErrorId : ConstructorInvokedThrowException,Microsoft.PowerShell.Commands.NewObjectCommand\r\n \r\n".to_string()
    };
    Error::host(format!(
        "NewSmbGlobalMapping failed. output: {}, err: exit status 1",
        go_quote(&output)
    ))
}

/// RemoveSmbGlobalMapping of a mapping that does not exist. v1.1.3 `pkg/os/smb/api.go:78-84`; v1.3.0
/// `pkg/os/smb/api.go:79-87` + `pkg/cim/smb.go:72-81`; master `pkg/os/smb/api.go:81-91` + `pkg/wmi/smb.go:83-101`.
pub(crate) fn remove_mapping_not_found(p: &Profile, root: &str) -> Error {
    let text = match p.backend {
        Backend::PowerShell => {
            let output = format!(
                "Remove-SmbGlobalMapping : No MSFT_SmbGlobalMapping objects found with property 'RemotePath' equal to '{root}'.  Verify the value of the property and retry.\r\nAt line:1 char:1\r\n+ Remove-SmbGlobalMapping -RemotePath $Env:smbremotepath -Force\r\n+ ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\r\n    + CategoryInfo          : ObjectNotFound: ({root}:String) [Remove-SmbGlobalMapping], CimJobException\r\n    + FullyQualifiedErrorId : CmdletizationQuery_NotFound_RemotePath,Remove-SmbGlobalMapping\r\n \r\n"
            );
            format!(
                "UnmountSmbShare failed. output: {}, err: exit status 1",
                go_quote(&output)
            )
        }
        Backend::MicrosoftWmi => format!("error remove smb mapping '{root}'. err: {WMI_NOT_FOUND}"),
        Backend::GoOleWmi => format!(
            "error remove smb mapping '{root}'. err: failed to query SMB global mapping by remote path {root}: {GOOLE_NOT_FOUND}"
        ),
    };
    Error::host(text)
}

/// The `local_path` link could not be made (it exists, or its parent is missing). v1.1.3
/// `pkg/server/smb/server.go:113-117` + `pkg/os/smb/api.go:46-61`; v1.3.0 `pkg/os/smb/api.go:52-67`.
/// PowerShell-era `NewSmbLink` when the link's target does not exist: Windows PowerShell 5.1's `New-Item -ItemType
/// SymbolicLink` resolves `-Target` first and refuses a path that is not there (links to missing targets came with
/// PowerShell 6: PowerShell/PowerShell#804; #9067). The mapping made before it stays. The text is PowerShell's
/// `ItemNotFoundException` ("Cannot find path '…' because it does not exist."); its exact record is unverified.
pub(crate) fn smb_link_target_missing(local: &str, remote: &str) -> Error {
    let mut target = remote.to_string();
    if !target.ends_with('\\') {
        target.push('\\');
    }
    let out = ps_block(
        "New-Item",
        &format!("Cannot find path '{target}' because it does not exist."),
        "New-Item -ItemType SymbolicLink $Env:smblocalPath -Target $Env:smbremotepath",
        &format!("ObjectNotFound: ({target}:String) [New-Item], ItemNotFoundException"),
        "PathNotFound,Microsoft.PowerShell.Commands.NewItemCommand",
    );
    Error::host(format!(
        "creating link {local} to {remote} failed with error: error linking {target} to {local}. output: {out}, err: \
         exit status 1"
    ))
}

pub(crate) fn smb_link_failed(p: &Profile, local: &str, remote: &str, exists: bool) -> Error {
    let mut target = remote.to_string();
    if !target.ends_with('\\') {
        target.push('\\');
    }
    let inner = match p.backend {
        Backend::PowerShell => {
            let cmd =
                "New-Item -ItemType SymbolicLink $Env:smblocalPath -Target $Env:smbremotepath";
            let out = if exists {
                ps_block(
                    "New-Item",
                    &format!("An item with the specified name {local} already exists."),
                    cmd,
                    &format!("ResourceExists: ({local}:String) [New-Item], IOException"),
                    "DirectoryExist,Microsoft.PowerShell.Commands.NewItemCommand",
                )
            } else {
                ps_block(
                    "New-Item",
                    &format!("Could not find a part of the path '{local}'."),
                    cmd,
                    &format!("WriteError: ({local}:String) [New-Item], DirectoryNotFoundException"),
                    "NewItemIOError,Microsoft.PowerShell.Commands.NewItemCommand",
                )
            };
            format!("error linking {target} to {local}. output: {out}, err: exit status 1")
        }
        Backend::MicrosoftWmi | Backend::GoOleWmi => format!(
            "error linking {target} to {local}. err: {}",
            windows_message(if exists { 183 } else { 3 })
        ),
    };
    Error::host(format!(
        "creating link {local} to {remote} failed with error: {inner}"
    ))
}
