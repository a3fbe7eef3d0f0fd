//! The host processes csi-proxy starts for each call, per release: what a node pays for a call beyond the call
//! itself.
//!
//! | Release | Groups that start a process | What |
//! | --- | --- | --- |
//! | v1.1.3, v1.2.1 | disk, volume, smb, iscsi, system (services) | one `powershell -Mta -NoProfile -Command` per step (`utils.RunPowershellCmd`, `pkg/utils/utils.go:12-18`) |
//! | v1.1.3, v1.2.1 | system `GetBIOSSerialNumber` | one `wmic bios get serialnumber` (`pkg/os/system/api.go:37`; `wmic` is not installed by default on Windows Server 2025) |
//! | v1.1.3, v1.2.1 | filesystem | none: Go `os` calls in csi-proxy's own process (`pkg/os/filesystem/api.go`) |
//! | v1.3.0, master | none | WMI (`pkg/cim`, master `pkg/wmi`) and Win32 in-process: `git grep 'RunPowershellCmd\|exec.Command' -- pkg cmd` finds nothing at either |
//!
//! Citations are `kubernetes-csi/csi-proxy` at v1.1.3 (v1.2.1 has the same calls: `git diff v1.1.3 v1.2.1 -- pkg/os`
//! changes only the SMB privacy flag, the resize skip and `getTarget`'s recursion bound). A call can take several
//! steps, each its own process, and which steps run depends on the host, so the count is planned from the request
//! and the host *before* the call ([`State::process_plan`], following the release's server code) and settled
//! after it ([`ProcessPlan::settle`]):
//!
//! - `PartitionDisk` (`pkg/server/disk/server.go:48-86`): `IsDiskInitialized`, `InitializeDisk` (a RAW disk only),
//!   `BasicPartitionsExist`, `CreateBasicPartition` (no basic partition only) — 2 to 4; a disk that does not exist
//!   fails in the first.
//! - `UnmountVolume` (`pkg/os/volume/api.go:147-162`): `Write-VolumeCache`, then `Remove-PartitionAccessPath` — 2;
//!   1 when the volume is gone (the flush fails).
//! - `ResizeVolume` (`pkg/os/volume/api.go:165-214`): `Get-PartitionSupportedSize` (size 0 only), the current size,
//!   and `Resize-Partition` unless the release's skip rule applies — 1 to 3.
//! - `GetVolumeIDFromTargetPath` (`pkg/os/volume/api.go:270-293`): one `(Get-Item).Target` per link followed until
//!   a `Volume{…}` target — 1 for a mount point, 2 for a link to one.
//! - `NewSmbGlobalMapping` (`pkg/server/smb/server.go:55-122`, `pkg/os/smb/api.go`): `Get-SmbGlobalMapping`; for an
//!   OK mapping `Test-Path` (`PathValid`, `pkg/os/filesystem/api.go:52-61`) and, when that fails,
//!   `Remove-SmbGlobalMapping`; `New-SmbGlobalMapping` unless an OK, valid mapping exists; `New-Item -ItemType
//!   SymbolicLink` for a `local_path` — 2 to 5.
//! - every other disk, volume, smb, iscsi and service call: one; `GetBIOSSerialNumber`: one `wmic`.
//!
//! A request csi-proxy refuses before touching the host (an empty volume id or path, a remote path without a
//! share, a missing `target_portal`) starts none. A failed call counts its steps up to and including the first one
//! that changes the host (where csi-proxy's errors arise: a read before it that fails ends the plan there already);
//! a failed `NewSmbGlobalMapping` counts its link step only if the mapping exists after the call (the link failed,
//! not the mapping). What this cannot see: a `Remove-SmbGlobalMapping` that fails before `New-SmbGlobalMapping`
//! counts one process too many (unverified how often a node meets it). Injected faults stand for the call and start
//! nothing; the Windows view (the native backend) starts none.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::State;
use crate::profile::{Backend, ResizeSkip};
use crate::scenario::{PartitionKind, PartitionStyle};

/// The host processes a call started (or several calls: see [`Spawned::add`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Spawned {
    /// `powershell.exe` processes.
    pub powershell: u64,
    /// `wmic.exe` processes.
    pub wmic: u64,
}

impl Spawned {
    /// Every process.
    pub fn total(&self) -> u64 {
        self.powershell + self.wmic
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: Spawned) {
        self.powershell += other.powershell;
        self.wmic += other.wmic;
    }

    /// Whether no process was started.
    pub fn is_zero(&self) -> bool {
        self.total() == 0
    }
}

/// A program csi-proxy starts for a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    PowerShell,
    Wmic,
}

/// One step of a call that runs as a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    program: Program,
    /// Whether the step changes the host (a failure of the call is taken to happen at the first such step).
    changes: bool,
}

const READ: Step = Step {
    program: Program::PowerShell,
    changes: false,
};
const CHANGE: Step = Step {
    program: Program::PowerShell,
    changes: true,
};

/// The processes a call will start, as planned from the request and the host before it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessPlan {
    steps: Vec<Step>,
    /// `NewSmbGlobalMapping` with a `local_path`: the mapping root whose state after the call says whether its
    /// last step (the link) ran.
    smb_link_of: Option<String>,
}

impl ProcessPlan {
    fn of(steps: Vec<Step>) -> Self {
        Self {
            steps,
            smb_link_of: None,
        }
    }

    /// What the call started, given whether it succeeded and the host after it.
    pub(crate) fn settle(&self, ok: bool, after: &State) -> Spawned {
        let ran = if ok {
            self.steps.len()
        } else if let Some(root) = &self.smb_link_of {
            let mapped = after
                .mappings
                .get(root)
                .is_some_and(|m| m.status == super::MappingStatus::Ok);
            if mapped {
                self.steps.len()
            } else {
                self.steps.len().saturating_sub(1)
            }
        } else {
            self.steps
                .iter()
                .position(|s| s.changes)
                .map_or(self.steps.len(), |i| i + 1)
        };
        let mut spawned = Spawned::default();
        for s in &self.steps[..ran] {
            match s.program {
                Program::PowerShell => spawned.powershell += 1,
                Program::Wmic => spawned.wmic += 1,
            }
        }
        spawned
    }
}

fn text<'a>(args: &'a Value, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn number(args: &Value, key: &str) -> i64 {
    args.get(key).and_then(Value::as_i64).unwrap_or_default()
}

/// 100 MiB: v1.2.0+ skip a growth below it (`pkg/os/volume/api.go:201` at v1.2.1).
const MIN_RESIZE_GROWTH: i64 = 100 * 1024 * 1024;

impl State {
    /// The host processes csi-proxy will start for `rpc` with `args` (the audited request fields) on this host, as
    /// the release played runs it (module docs).
    pub(crate) fn process_plan(&self, rpc: &str, args: &Value) -> ProcessPlan {
        if self.profile.backend != Backend::PowerShell {
            return ProcessPlan::default();
        }
        let volume_id = || text(args, "volume_id");
        let one = |step| ProcessPlan::of(vec![step]);
        match rpc {
            // Go `os` calls in csi-proxy's process.
            "PathExists" | "Mkdir" | "Rmdir" | "CreateSymlink" | "IsSymlink" => {
                ProcessPlan::default()
            }
            "GetBIOSSerialNumber" => one(Step {
                program: Program::Wmic,
                changes: false,
            }),
            "PartitionDisk" => self.partition_plan(number(args, "disk_number")),
            "UnmountVolume" => {
                if volume_id().is_empty() || text(args, "target_path").is_empty() {
                    return ProcessPlan::default();
                }
                // The flush reads nothing back but changes no mount either: the access path's removal is where an
                // unmount of a mounted volume fails.
                let mut steps = vec![READ];
                if self.find_volume(volume_id()).is_some() {
                    steps.push(CHANGE);
                }
                ProcessPlan::of(steps)
            }
            "MountVolume" if volume_id().is_empty() || text(args, "target_path").is_empty() => {
                ProcessPlan::default()
            }
            "ResizeVolume" => self.resize_plan(volume_id(), number(args, "size_bytes")),
            "GetVolumeIDFromTargetPath" => self.volume_id_plan(text(args, "target_path")),
            "IsVolumeFormatted"
            | "GetVolumeStats"
            | "GetDiskNumberFromVolumeID"
            | "WriteVolumeCache"
                if volume_id().is_empty() =>
            {
                ProcessPlan::default()
            }
            "FormatVolume" if volume_id().is_empty() => ProcessPlan::default(),
            "NewSmbGlobalMapping" => self.smb_mapping_plan(args),
            "RemoveSmbGlobalMapping" => {
                match super::smb::root_mapping_path(&text(args, "remote_path").replace('/', "\\")) {
                    Ok(_) => one(CHANGE),
                    Err(_) => ProcessPlan::default(),
                }
            }
            "FormatVolume"
            | "MountVolume"
            | "SetDiskState"
            | "AddTargetPortal"
            | "RemoveTargetPortal"
            | "ConnectTarget"
            | "DisconnectTarget"
            | "SetMutualChapSecret"
            | "StartService"
            | "StopService"
            | "Rescan" => one(CHANGE),
            // Every other call of the disk, volume, iscsi and system groups: one PowerShell read.
            _ => one(READ),
        }
    }

    fn partition_plan(&self, n: i64) -> ProcessPlan {
        let disk = u32::try_from(n).ok().and_then(|n| {
            self.disks
                .iter()
                .find(|d| d.number == Some(n) && d.present())
        });
        let Some(d) = disk else {
            // `Get-Disk -Number N` fails in IsDiskInitialized.
            return ProcessPlan::of(vec![READ]);
        };
        let mut steps = vec![READ];
        if d.partition_style == PartitionStyle::Raw {
            steps.push(CHANGE);
        }
        steps.push(READ);
        let partitioned = d.partition_style != PartitionStyle::Raw
            && d.partitions
                .iter()
                .any(|p| p.kind != PartitionKind::Reserved);
        if !partitioned {
            steps.push(CHANGE);
        }
        ProcessPlan::of(steps)
    }

    fn resize_plan(&self, id: &str, size: i64) -> ProcessPlan {
        if id.is_empty() {
            return ProcessPlan::default();
        }
        let Some((current, max)) = self.partition_sizes(id) else {
            // The first query (`Get-PartitionSupportedSize` or the current size) fails.
            return ProcessPlan::of(vec![READ]);
        };
        if size == 0 && !self.defrag_available() {
            // `Get-PartitionSupportedSize` fails without the Optimize Drives service: the call ends there.
            return ProcessPlan::of(vec![READ]);
        }
        let mut steps = vec![READ];
        if size == 0 {
            steps.push(READ);
        }
        let (current, final_size) = (current as i64, if size == 0 { max as i64 } else { size });
        let skip = match self.profile.resize_skip {
            ResizeSkip::CurrentAtLeastFinal => current >= final_size,
            ResizeSkip::GrowthUnder100MiB => final_size - current < MIN_RESIZE_GROWTH,
        };
        if !skip {
            steps.push(CHANGE);
        }
        ProcessPlan::of(steps)
    }

    fn volume_id_plan(&self, path: &str) -> ProcessPlan {
        if path.is_empty() {
            return ProcessPlan::default();
        }
        let mut steps = vec![READ];
        let mut at = path.to_owned();
        // `getTarget` recurses until the target names a volume, at most 256 times (v1.2.1; unbounded at v1.1.3).
        for _ in 0..256 {
            match self.read_link(&at) {
                Some(t) if t.trim_start_matches(r"\\?\").starts_with("Volume") => break,
                Some(t) => {
                    steps.push(READ);
                    at = t;
                }
                None => break,
            }
        }
        ProcessPlan::of(steps)
    }

    fn smb_mapping_plan(&self, args: &Value) -> ProcessPlan {
        let remote = text(args, "remote_path").replace('/', "\\");
        if remote.is_empty() {
            return ProcessPlan::default();
        }
        let Ok((root, server, share)) = super::smb::root_mapping_path(&remote) else {
            return ProcessPlan::default();
        };
        let mut steps = vec![READ];
        let ok_mapping = self
            .mappings
            .get(&root)
            .is_some_and(|m| m.status == super::MappingStatus::Ok);
        let mut mapped = ok_mapping;
        if ok_mapping {
            steps.push(READ);
            if self.unc_access(&server, &share).is_err() {
                steps.push(CHANGE);
                mapped = false;
            }
        }
        if !mapped {
            steps.push(CHANGE);
        }
        let local = text(args, "local_path");
        let linked = !local.is_empty()
            && super::paths::validate_path_windows(
                local,
                &self.cfg.kubelet_path,
                &self.cfg.working_dirs,
            )
            .is_ok();
        if linked {
            steps.push(CHANGE);
        }
        ProcessPlan {
            steps,
            smb_link_of: linked.then_some(root),
        }
    }
}

#[cfg(test)]
mod tests;
