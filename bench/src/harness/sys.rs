//! What the harness reads from the OS: a process's memory, the load average, the peer of a Unix socket.

use std::path::Path;

use serde::Serialize;

use super::error::{Error, Result};

/// Resident memory of a process from `/proc/<pid>/status`, in KiB.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Memory {
    /// `VmRSS`: resident now.
    pub(crate) rss_kib: u64,
    /// `VmHWM`: the peak resident size over the process's life.
    pub(crate) hwm_kib: u64,
}

/// Reads `VmRSS` and `VmHWM` of `pid`.
pub(crate) fn memory(pid: u32) -> Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(Error::io(format!("reading {path}")))?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
    })
}

/// CPU time (user + system, every thread) `pid` has used, in ms (`/proc/<pid>/stat`, in units of `USER_HZ`, which
/// is 100 on Linux).
pub(crate) fn cpu_ms(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(Error::io(format!("reading {path}")))?;
    // Fields after the command name (which may hold spaces, in parentheses): state is field 3, utime 14, stime 15.
    let rest = text
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| Error::Setup(format!("{path}: no command name")))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    Ok((tick(11) + tick(12)) * 10.0)
}

/// CPU time (on-CPU, every live thread) `pid` has used, in ms with nanosecond resolution: the sum of the first field
/// of `/proc/<pid>/task/*/schedstat` (the scheduler's exact run time, where `/proc/<pid>/stat` counts 10 ms ticks).
/// Threads that exited meanwhile drop out, so it suits a span in which the process keeps its threads (a tokio
/// server's workers); falls back to [`cpu_ms`] when schedstat is not there.
pub(crate) fn cpu_ms_fine(pid: u32) -> Result<f64> {
    let dir = format!("/proc/{pid}/task");
    let Ok(tasks) = std::fs::read_dir(&dir) else {
        return cpu_ms(pid);
    };
    let mut ns = 0u64;
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        if let Some(v) = text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        {
            ns += v;
            any = true;
        }
    }
    if any {
        Ok(ns as f64 / 1e6)
    } else {
        cpu_ms(pid)
    }
}

/// The machine's CPU time, in ms: (busy, total) over every core (`/proc/stat`'s `cpu` line; idle and iowait count as
/// not busy).
pub(crate) fn machine_cpu_ms() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<f64> = text
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    ((total - idle) * 10.0, total * 10.0)
}

/// `/proc/loadavg`'s first three fields.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The pid of the process listening on the Unix socket `path` (`SO_PEERCRED` of a fresh connection: the
/// credentials the listener had when it called `listen`).
pub(crate) async fn listener_pid(path: &Path) -> Result<u32> {
    let stream = tokio::net::UnixStream::connect(path)
        .await
        .map_err(Error::io(format!("connecting to {}", path.display())))?;
    let cred = stream
        .peer_cred()
        .map_err(Error::io(format!("SO_PEERCRED on {}", path.display())))?;
    cred.pid()
        .and_then(|p| u32::try_from(p).ok())
        .ok_or_else(|| Error::Setup(format!("no peer pid for {}", path.display())))
}

/// Size of a file in bytes, `None` when it does not exist.
pub(crate) fn file_size(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// Files the driver keeps in its state directory for the node rather than for a volume: never a leftover.
/// `smb-credential-key` is the SMB credential fingerprint key (driver/src/smb/rotate.rs, issue 40), made at the
/// first staged SMB volume with credentials and kept for the node's life.
const NODE_FILES: &[&str] = &["smb-credential-key"];

/// Counts the volume records under the state directory `dir` (every file, recursively, but the node-wide ones
/// of [`NODE_FILES`] at its top; 0 when it does not exist).
pub(crate) fn count_records(dir: &Path) -> u64 {
    let node_files = NODE_FILES.iter().map(|f| dir.join(f)).collect::<Vec<_>>();
    list_files(dir)
        .iter()
        .filter(|p| !node_files.contains(p))
        .count() as u64
}

/// The files under `dir` (recursively; empty when it does not exist).
pub(crate) fn list_files(dir: &Path) -> std::collections::BTreeSet<std::path::PathBuf> {
    let mut out = std::collections::BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(list_files(&p));
        } else {
            out.insert(p);
        }
    }
    out
}

/// The filesystem type (`tmpfs`, `ext4`, …) of the mount holding `path`: the longest mount point in
/// `/proc/self/mounts` that is a prefix of its canonical path. `None` when it cannot be told.
pub(crate) fn fs_type(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (device, point, kind) = (f.next()?, f.next()?, f.next()?);
            // Mount points escape spaces as \040.
            let point = point.replace("\\040", " ");
            path.starts_with(&point)
                .then(|| (point.len(), describe(device, kind)))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, kind)| kind)
}

/// `kind`, and for ext4 whether it has a journal: without one (`/proc/fs/jbd2/<device>-8` absent) every `fsync` is a
/// synchronous write and creating a file searches past recently deleted inodes, which moves the durable figures.
fn describe(device: &str, kind: &str) -> String {
    let name = device.rsplit('/').next().unwrap_or(device);
    // Only where ext4 knows the device by this name (so jbd2 would too).
    if kind == "ext4" && Path::new(&format!("/proc/fs/ext4/{name}")).is_dir() {
        let journaled = Path::new(&format!("/proc/fs/jbd2/{name}-8")).exists();
        if !journaled {
            return "ext4 (no journal)".to_owned();
        }
    }
    kind.to_owned()
}
