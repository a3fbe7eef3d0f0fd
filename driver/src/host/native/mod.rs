//! The native backend of the host port: [`NativeHost`] implements [`Host`] in-process over the `winhost` facade
//! (WMI `ROOT\Microsoft\Windows\Storage` and `ROOT\Microsoft\Windows\SMB`, Win32 files and volumes), for a
//! HostProcess container with no csi-proxy, no PowerShell and no child process (so no user string can reach a
//! command line). The facts behind each call are in `shared/reference/windows-native-apis.md` ("reference §N").
//!
//! This module is the backend's logic: which objects to query, in what order, how to read return codes and
//! `ExtendedStatus`, idempotency, and the waits for arrival. It runs over `Arc<dyn winhost::WindowsHost>`: on
//! Windows `winhost::win32::WinHost` (the only code that touches COM or Win32, `platform.rs` starts it), in tests
//! the simulated host's Windows view (`sim::wmi::WindowsView`), so every suite runs this logic unchanged.
//!
//! # Threading and deadlines
//!
//! Facade calls block. Each host operation runs its facade calls on tokio's blocking pool, at most
//! [`DEFAULT_POOL_SIZE`] at a time per backend (a semaphore, not a lock: operations on different volumes run
//! concurrently), with the RPC's deadline as the facade's `CallContext`. The async side stops waiting at the
//! deadline (DeadlineExceeded) or when the RPC goes away; a call that had started keeps its thread until the host
//! answers, and the next facade call of that operation is refused unstarted (its `CallContext` is past its deadline
//! or cancelled: the facade never starts work then), so a stuck
//! provider holds at most the pool's threads and the next RPC re-checks state (every operation is idempotent or
//! checks before acting). The destructive operations (`PartitionDisk`, `FormatVolume`, `ResizeVolume`) are the
//! exception: once started they run to their end, as csi-proxy's handlers do, so their outcome shows on the host for
//! the next stage to learn (the iSCSI protocol announces them in the volume's record first). `winhost::win32::WinHost` adds its own bounded COM threads underneath.
//! Those and `DisconnectTarget` are registered on their object while they run, and each WMI method among them that
//! changes the host ("ledger" below) is in a durable ledger while it runs: [`Host::in_flight`] (`inflight.rs`).
//!
//! # Host-call sequences (asserted in `tests.rs`, in WMI and Win32 terms)
//!
//! | Host operation | Facade calls |
//! | --- | --- |
//! | `PathExists` | `GetFileAttributesW` |
//! | `Mkdir` | `CreateDirectoryW` (183 → `GetFileInformationByHandleEx`: a directory, or a link that resolves; 3 → the parent first) |
//! | `Rmdir` | `RemoveDirectoryW` (267 → `DeleteFileW`); force: `RemoveDirectoryTree` (2/3 = done) |
//! | `CreateSymlink` | `CreateSymbolicLinkW(DIRECTORY)` |
//! | `IsSymlink` | `FSCTL_GET_REPARSE_POINT` → mount point: `GetVolumeInformationW`; local link: `GetFileAttributesW(target)`; share link: `SELECT MSFT_SmbGlobalMapping` (not OK → false) → `GetFileAttributesW(target)` |
//! | `NewSmbGlobalMapping` | `SELECT MSFT_SmbGlobalMapping` (here, in `IsSymlink` and in `RemoveSmbGlobalMapping`: `WHERE RemotePath = root` first, every mapping only when that finds none of the share: `smb.rs` `mappings_of`) → none: ledger → `Create` / OK: `GetFileAttributesW(root)` (reachable: reuse) / settling: wait, list again / broken: StaleMapping (never removed here: `smb.rs`) → link: `CreateSymbolicLinkW` |
//! | `RemoveSmbGlobalMapping` | `SELECT MSFT_SmbGlobalMapping` → ours: `Remove(Force)`; not ours: left in place |
//! | `ListDiskLocations` | `SELECT MSFT_Disk` |
//! | `ListDiskIDs` | `SELECT MSFT_Disk` → per disk `IOCTL_STORAGE_GET_DEVICE_NUMBER`, `IOCTL_STORAGE_QUERY_PROPERTY` |
//! | `Rescan` | `MSFT_StorageSetting.UpdateHostStorageCache` |
//! | `PartitionDisk` | (a method an earlier process left in flight on the disk: its outcome read, InFlight while it may run) → `SELECT MSFT_Disk` → (RAW: `ReadFile` of its first 4 MiB + 4 KiB and last 2 MiB, refused unless blank → ledger → `Initialize(GPT)`; NULL/undocumented style: refused) → `Refresh` → `SELECT MSFT_Partition` → (no partition but Microsoft Reserved: ledger → `CreatePartition` (MBR disk: `MbrType` 7) → `Refresh` → `SELECT MSFT_Partition` → `MSFT_Partition.Online`; any other partition: AlreadyExists, nothing created) |
//! | `GetDiskStats` / `GetDiskState` | `SELECT MSFT_Disk` |
//! | `SetDiskState(online)` | `SELECT MSFT_Disk` → (offline: `Online`) → writable or reader-only: (onlined: `SELECT MSFT_Disk`) → (flag not as wanted: `SetAttributes(IsReadOnly=false/true)`) → `Refresh` |
//! | `ListVolumesOnDisk` | `SELECT MSFT_Partition` → per partition `ASSOCIATORS …->MSFT_Volume` (a basic partition without its volume yet: `SELECT MSFT_Disk` → `Refresh` → list again) |
//! | `MountVolume` | `SetVolumeMountPointW` (145 → `GetVolumeNameForVolumeMountPointW`: the same volume is success) |
//! | `UnmountVolume` | `FlushFileBuffers` (volume gone: skipped; refused on a read-only disk: `SELECT MSFT_Volume` → `ASSOCIATORS …->MSFT_Partition` → `SELECT MSFT_Disk`, and skipped when `IsReadOnly`) → `DeleteVolumeMountPointW` |
//! | `IsVolumeFormatted` | `SELECT MSFT_Volume` |
//! | `FormatVolume` | (in flight: as `PartitionDisk`) → `SELECT MSFT_Volume` → ledger → `Format(NTFS, quick, Force)` |
//! | `ResizeVolume` | (in flight: as `PartitionDisk`) → `SELECT MSFT_Volume` → `ASSOCIATORS …->MSFT_Partition` → size 0: `SELECT MSFT_Disk` → `SELECT MSFT_Partition` (the maximum from the layout, `grow.rs`; a partition without `Offset`: `GetSupportedSize` instead) → (growth ≥ 100 MiB: ledger → `Resize`) |
//! | `GetVolumeStats` | `GetDiskFreeSpaceExW` |
//! | `GetVolumeIDFromTargetPath` | `FSCTL_GET_REPARSE_POINT` per hop (≤ 8) → `GetVolumeNameForVolumeMountPointW` → `GetVolumeInformationW` |
//! | `WriteVolumeCache` | `FlushFileBuffers` |
//! | `AddTargetPortal` | `SELECT MSFT_iSCSITargetPortal` → (absent: `New`, with discovery CHAP when given) |
//! | `DiscoverTargetPortal` | `SELECT MSFT_iSCSITargetPortal` → `ASSOCIATORS …->MSFT_iSCSITarget` (the cache only) |
//! | `RefreshTargetPortal` (no csi-proxy RPC) | `SELECT MSFT_iSCSITargetPortal` → `Update(TargetPortalAddress, TargetPortalPortNumber[, InitiatorInstanceName, InitiatorPortalAddress])` |
//! | `ConnectTarget` | `SELECT MSFT_iSCSITargetPortal` → `ASSOCIATORS …->MSFT_iSCSITarget` (IQN ignoring case; absent: `Update` → again) → (not connected: session ledger → `Connect`, `IsPersistent` when asked; connected by someone else: joined ledger) |
//! | `DisconnectTarget` | a joined target: nothing (its sessions are someone else's: `iscsi.rs`); else `SELECT MSFT_iSCSITarget` → `ASSOCIATORS …->MSFT_iSCSISession` → per session (persistent: `Unregister`) → ledger → `Disconnect` |
//! | `InFlight` (no csi-proxy RPC) | this process's operation still running on the object: none; else per ledger entry of an earlier process on it: its outcome (`SELECT MSFT_Disk` / `SELECT MSFT_Partition` / `SELECT MSFT_Volume` → `ASSOCIATORS …->MSFT_Partition` / `GetTargetDisks`'s calls) |
//! | `GetTargetDisks` | `SELECT MSFT_iSCSITarget` → `ASSOCIATORS …->MSFT_iSCSISession` → per session `ASSOCIATORS …->MSFT_Disk` |
//! | `SetMutualChapSecret` | `MSFT_iSCSISession.SetCHAPSecret` |
//! | `ListTargetPortals` | `SELECT MSFT_iSCSITargetPortal` |
//! | `GetDiskNumberFromVolumeID` | `SELECT MSFT_Volume` → `ASSOCIATORS …->MSFT_Partition` (its `DiskNumber`) |
//! | `ReadLink` (no csi-proxy RPC) | `FSCTL_GET_REPARSE_POINT` (one hop, never resolved) |
//! | `DiskLayout` (no csi-proxy RPC) | `SELECT MSFT_Disk` (`PartitionStyle`) → `SELECT MSFT_Partition` (`GptType` / `MbrType`) |
//! | `PathSpace` (no csi-proxy RPC) | `GetDiskFreeSpaceExW(path\)` (links followed by Windows) |
//!
//! # What it does that csi-proxy cannot (advertised by [`Host::capabilities`])
//!
//! * SMB mappings are listed with their status: a mapping is removed only if this driver created it (a durable
//!   ledger in the state directory, written before `Create`, and seeded at start from the driver's volume records);
//!   `NewSmbGlobalMapping` never removes one (others may use it): a Disconnected one is reported as stale, which the
//!   driver repairs under the share's exclusive lock (no 1219 after a reboot), and one that is `Connecting` or
//!   `Reconnecting` is waited for; a staging link over a mapping that is not OK answers "does not resolve" (the
//!   volume is reported abnormal) instead of an error. `RequirePrivacy` follows `--smb-require-privacy`.
//! * A writable volume's disk has its read-only flag cleared after `Online` (SAN policy, re-attach).
//! * Volumes are waited for (`Refresh` after `Online`, `Initialize` and `CreatePartition`, and once more when a basic
//!   partition has no volume yet) instead of reading a half-arrived disk; `Refresh` shows what has arrived and
//!   hurries nothing, so the driver also reads the partition table (`DiskLayout`): a disk with a partition whose
//!   volume has not arrived is not empty, and `PartitionDisk` refuses (AlreadyExists) rather than do nothing on a
//!   disk that has one, so a late volume is never taken for the driver's own.
//! * An SMB volume's real usage: `GetDiskFreeSpaceExW` on its pod path (`PathSpace`), which Windows follows to the
//!   share; csi-proxy's `GetVolumeStats` takes a local volume's id only.
//! * A link's stored target is read (`ReadLink`), so a staging link into a share can be adopted when its state record
//!   was lost.
//! * Discovery CHAP on `AddTargetPortal`; persistent logins, whose records are removed (`Unregister`) on logout, and
//!   made on a target that already has a session (`Register`); every session of a target is logged out, not only
//!   the first; IQNs compare ignoring case, with one rediscovery; a portal's targets are rediscovered on request
//!   (`RefreshTargetPortal`: a target created after the portal was added).
//! * A RAW disk is initialised only when its first and last sectors are blank (`winhost::signature`: nothing a
//!   libblkid probe would find, no non-zero byte), and never when its partition style is NULL or undocumented.
//! * Windows' own error codes: the error object WMI attaches to a failed call (`MSFT_WmiError`: `Windows System
//!   Error 1219`, `HRESULT 0xefff003f`) is read and classified, and the "already logged in / already exists"
//!   tolerances apply whether the provider returned the code or raised it.
//! * A capability whose start-up check failed for a passing reason (WMI restarting at boot) is checked again with
//!   backoff ([`NativeHost::recheck_capabilities`]); meanwhile `/readyz` says which and why
//!   (`wincsi_host_capability_up` in metrics).

mod blank;
mod capability;
mod disk;
mod files;
mod grow;
mod inflight;
mod iscsi;
mod ledger;
mod ops;
#[cfg(not(windows))]
#[path = "platform_other.rs"]
mod platform;
#[cfg(windows)]
#[path = "platform_windows.rs"]
mod platform;
mod probe;
#[cfg(feature = "test-windows-socket")]
mod remote;
mod smb;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
#[cfg(test)]
mod tests;
mod volume;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tracing::info;
use winhost::{CallContext, CallError, CancelToken, WindowsHost};

use super::{
    DiskIds, DiskLayout, DiskLocation, Host, HostCapabilities, HostError, HostErrorKind,
    HostObject, HostOp, HostPath, HostProbe, HostResult, InFlight, IscsiAuth, MpioClaim, PathSpace,
    Portal, Secret, SharedObject, SmbCredential, SmbMappingOptions, TargetPath, UncPath,
};
use crate::locks::Deadline;

use capability::capabilities_of;
pub use capability::{
    CAPABILITY_CHECK_TIMEOUT, CAPABILITY_RECHECK_FIRST, CAPABILITY_RECHECK_MAX, degraded,
};
pub use inflight::LEDGER_FILE as IN_FLIGHT_LEDGER_FILE;
pub use iscsi::{JOINED_LEDGER_FILE, SESSION_LEDGER_FILE};
use ledger::Ledger;
pub(crate) use ops::Ops;
pub use platform::windows_host;
pub use probe::{FailedProbe, NativeProbe};
#[cfg(feature = "test-windows-socket")]
pub use remote::remote_windows_host;
pub use smb::LEDGER_FILE;

/// How many facade calls one backend runs at a time (the rest queue for a thread).
pub const DEFAULT_POOL_SIZE: usize = 16;

/// How long `NewSmbGlobalMapping` waits for a `Connecting`/`Reconnecting` mapping to settle (within the RPC's
/// deadline) before answering Unavailable: SMB 3's transparent failover and reconnect take seconds; longer than this,
/// kubelet's retry is the better wait.
pub const MAPPING_SETTLE_WAIT: Duration = Duration::from_secs(30);

/// The first pause between two looks at a settling mapping (doubling, at most [`MAPPING_SETTLE_STEP_MAX`]).
const MAPPING_SETTLE_STEP: Duration = Duration::from_millis(250);
const MAPPING_SETTLE_STEP_MAX: Duration = Duration::from_secs(4);

/// What the native backend is told by the flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeOptions {
    /// `RequirePrivacy` of the SMB global mappings it creates (`--smb-require-privacy`).
    pub smb_require_privacy: bool,
    /// How many facade calls at a time.
    pub pool_size: usize,
}

impl Default for NativeOptions {
    fn default() -> Self {
        Self {
            smb_require_privacy: true,
            pool_size: DEFAULT_POOL_SIZE,
        }
    }
}

// The facade calls of a destructive operation that runs to its end (`NativeHost::run_to_end`) are bounded by this,
// not by the RPC's deadline: the hour after which the driver takes such a call to be over.
use inflight::RUN_TO_END_BUDGET;

/// The host port over the Windows facade (see the module docs).
#[derive(Clone)]
pub struct NativeHost {
    inner: Arc<Inner>,
}

struct Inner {
    host: Arc<dyn WindowsHost>,
    permits: Arc<Semaphore>,
    ledger: Ledger,
    /// The targets whose sessions this driver made, and those it joined (`iscsi.rs`).
    sessions: Ledger,
    joined: Ledger,
    /// Its calls that may outlive their callers (`inflight.rs`).
    calls: Arc<inflight::InFlightCalls>,
    options: NativeOptions,
}

impl std::fmt::Debug for NativeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeHost")
            .field("capabilities", &self.capabilities())
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl NativeHost {
    /// The backend over `host`, keeping its ledger of created SMB mappings in `state_dir`
    /// (`native-smb-mappings.json`; `None`: in memory only).
    pub fn new(host: Arc<dyn WindowsHost>, state_dir: Option<&Path>) -> Self {
        Self::with_pool_size(host, state_dir, DEFAULT_POOL_SIZE)
    }

    /// [`NativeHost::new`] with at most `threads` facade calls at a time.
    pub fn with_pool_size(
        host: Arc<dyn WindowsHost>,
        state_dir: Option<&Path>,
        threads: usize,
    ) -> Self {
        Self::with_options(
            host,
            state_dir,
            NativeOptions {
                pool_size: threads,
                ..NativeOptions::default()
            },
        )
    }

    /// [`NativeHost::new`] with `options` (the flags').
    pub fn with_options(
        host: Arc<dyn WindowsHost>,
        state_dir: Option<&Path>,
        options: NativeOptions,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                host,
                permits: Arc::new(Semaphore::new(options.pool_size.max(1))),
                ledger: Ledger::open(state_dir, LEDGER_FILE, "SMB mapping"),
                sessions: Ledger::open(state_dir, SESSION_LEDGER_FILE, "iSCSI session"),
                joined: Ledger::open(state_dir, JOINED_LEDGER_FILE, "joined iSCSI session"),
                calls: Arc::new(inflight::InFlightCalls::open(state_dir)),
                options,
            }),
        }
    }

    /// The facade this backend calls.
    pub fn windows(&self) -> &Arc<dyn WindowsHost> {
        &self.inner.host
    }

    /// Count the SMB mappings of `roots` (lower-cased `\\server\share`, as volume records keep them) as made by
    /// wincsi: at start, the shares the driver's own records say it mapped — through csi-proxy before the node moved
    /// to HostProcess mode, or before the ledger was lost (review M4). Durable before it returns; the roots added.
    pub fn adopt_mappings(
        &self,
        roots: impl IntoIterator<Item = String>,
    ) -> std::io::Result<Vec<String>> {
        let added = self.inner.ledger.adopt(roots)?;
        if !added.is_empty() {
            info!(
                shares = ?added,
                "SMB mappings the driver's volume records say it made are counted as wincsi's (made through \
                 csi-proxy or before the mapping ledger was lost)"
            );
        }
        Ok(added)
    }

    /// Run `f` (one host operation's facade calls) on the bounded blocking pool, bounded by `d`.
    async fn run<T: Send + 'static>(
        &self,
        op: HostOp,
        d: Deadline,
        f: impl FnOnce(&Ops<'_>) -> HostResult<T> + Send + 'static,
    ) -> HostResult<T> {
        self.run_as(op, d, false, None, f).await
    }

    /// [`NativeHost::run`] for an operation that may outlive its caller on `object` (`DisconnectTarget`), registered
    /// as running there until its facade calls end ([`Host::in_flight`]).
    async fn run_outliving<T: Send + 'static>(
        &self,
        op: HostOp,
        d: Deadline,
        object: HostObject,
        f: impl FnOnce(&Ops<'_>) -> HostResult<T> + Send + 'static,
    ) -> HostResult<T> {
        self.run_as(op, d, false, Some(object), f).await
    }

    /// [`NativeHost::run`] for a destructive operation (`PartitionDisk`, `FormatVolume`, `ResizeVolume`): once
    /// started, its facade calls run to their end even when the caller stops waiting (its deadline passed, the RPC
    /// was cancelled), as csi-proxy's handlers do, so its outcome shows on the host for the next stage to learn
    /// (`crate::iscsi`'s `pending.rs`) instead of a half-done operation (a disk initialised but not partitioned) that
    /// only the one-hour bound would end. Only a process death cuts it short.
    /// While it runs it is registered on `object` (`inflight.rs`).
    async fn run_to_end<T: Send + 'static>(
        &self,
        op: HostOp,
        d: Deadline,
        object: HostObject,
        f: impl FnOnce(&Ops<'_>) -> HostResult<T> + Send + 'static,
    ) -> HostResult<T> {
        self.run_as(op, d, true, Some(object), f).await
    }

    async fn run_as<T: Send + 'static>(
        &self,
        op: HostOp,
        d: Deadline,
        to_end: bool,
        object: Option<HostObject>,
        f: impl FnOnce(&Ops<'_>) -> HostResult<T> + Send + 'static,
    ) -> HostResult<T> {
        let late = |started: bool| {
            let e = CallError::DeadlineExceeded { started };
            HostError::new(op, HostErrorKind::DeadlineExceeded, e.to_string())
        };
        let permit = match tokio::time::timeout_at(
            d.instant(),
            Arc::clone(&self.inner.permits).acquire_owned(),
        )
        .await
        {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => {
                return Err(HostError::new(
                    op,
                    HostErrorKind::Unavailable,
                    "host call pool closed",
                ));
            }
            Err(_) => return Err(late(false)),
        };
        // Dropping this operation (the RPC cancelled, its deadline passed, the driver stopping) stops its facade calls:
        // the one running finishes on its thread, the next is never started.
        let token = CancelToken::new();
        let _stop = (!to_end).then(|| CancelOnDrop(token.clone()));
        let ctx = if to_end {
            CallContext::after(RUN_TO_END_BUDGET)
        } else {
            CallContext::after(d.remaining()).with_cancel(token)
        };
        let inner = Arc::clone(&self.inner);
        // Registered before the task is spawned, so a caller that gives up while it waits for a thread leaves it
        // registered until it ran (or was dropped unstarted).
        let running = match &object {
            Some(o) => Some(inner.calls.start(op, o)?),
            None => None,
        };
        // A task of tokio's blocking pool: the permit bounds how many run for this backend. (While it runs, tokio's
        // paused test clock does not auto-advance, exactly as while csi-proxy's in-runtime calls run.)
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _running = running;
            f(&Ops {
                w: &*inner.host,
                c: &ctx,
                op,
                ledger: &inner.ledger,
                sessions: &inner.sessions,
                joined: &inner.joined,
                smb_privacy: inner.options.smb_require_privacy,
                calls: &inner.calls,
            })
        });
        match tokio::time::timeout_at(d.instant(), task).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(HostError::new(
                op,
                HostErrorKind::Other,
                format!("the host call's thread failed before answering: {e}"),
            )),
            // The caller stops waiting; the call keeps its thread until the host answers, its result is dropped.
            Err(_) => Err(late(true)),
        }
    }
}

/// Cancels its token when dropped.
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Host for NativeHost {
    fn capabilities(&self) -> HostCapabilities {
        capabilities_of(&self.inner.host.probe_report())
    }

    async fn path_exists(&self, path: &HostPath, d: Deadline) -> HostResult<bool> {
        let p = path.as_str().to_owned();
        self.run(HostOp::PathExists, d, move |o| files::path_exists(o, &p))
            .await
    }

    async fn mkdir(&self, path: &HostPath, d: Deadline) -> HostResult<()> {
        let p = path.as_str().to_owned();
        self.run(HostOp::Mkdir, d, move |o| files::mkdir(o, &p))
            .await
    }

    async fn rmdir(&self, path: &HostPath, force: bool, d: Deadline) -> HostResult<()> {
        let p = path.as_str().to_owned();
        self.run(HostOp::Rmdir, d, move |o| files::rmdir(o, &p, force))
            .await
    }

    async fn create_symlink(
        &self,
        link: &HostPath,
        points_to: &HostPath,
        d: Deadline,
    ) -> HostResult<()> {
        let (l, t) = (link.as_str().to_owned(), points_to.as_str().to_owned());
        self.run(HostOp::CreateSymlink, d, move |o| {
            files::create_symlink(o, &l, &t)
        })
        .await
    }

    async fn is_symlink(&self, path: &HostPath, d: Deadline) -> HostResult<bool> {
        let p = path.as_str().to_owned();
        self.run(HostOp::IsSymlink, d, move |o| files::is_symlink(o, &p))
            .await
    }

    async fn new_smb_global_mapping(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        credential: Option<&SmbCredential>,
        d: Deadline,
    ) -> HostResult<()> {
        let none = SmbMappingOptions::default();
        self.new_smb_global_mapping_with(remote, link, credential, &none, d)
            .await
    }

    async fn new_smb_global_mapping_with(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        credential: Option<&SmbCredential>,
        options: &SmbMappingOptions,
        d: Deadline,
    ) -> HostResult<()> {
        self.map_share(remote, link, credential, options, d).await
    }

    async fn remove_smb_global_mapping(&self, remote: &UncPath, d: Deadline) -> HostResult<()> {
        let remote = remote.clone();
        self.run(HostOp::RemoveSmbGlobalMapping, d, move |o| {
            smb::remove_mapping(o, &remote)
        })
        .await
    }

    async fn list_disk_locations(&self, d: Deadline) -> HostResult<BTreeMap<u32, DiskLocation>> {
        self.run(HostOp::ListDiskLocations, d, disk::locations)
            .await
    }

    async fn list_disk_ids(&self, d: Deadline) -> HostResult<BTreeMap<u32, DiskIds>> {
        self.run(HostOp::ListDiskIDs, d, disk::ids).await
    }

    async fn rescan(&self, d: Deadline) -> HostResult<()> {
        self.run(HostOp::Rescan, d, disk::rescan).await
    }

    async fn partition_disk(&self, n: u32, d: Deadline) -> HostResult<()> {
        self.run_to_end(HostOp::PartitionDisk, d, HostObject::Disk(n), move |o| {
            disk::partition(o, n)
        })
        .await
    }

    async fn disk_size(&self, n: u32, d: Deadline) -> HostResult<u64> {
        self.run(HostOp::GetDiskStats, d, move |o| Ok(disk::one(o, n)?.size))
            .await
    }

    async fn set_disk_online(&self, n: u32, online: bool, d: Deadline) -> HostResult<()> {
        self.run(HostOp::SetDiskState, d, move |o| {
            disk::set_online(o, n, online, None)
        })
        .await
    }

    async fn set_disk_online_writable(&self, n: u32, d: Deadline) -> HostResult<()> {
        self.run(HostOp::SetDiskState, d, move |o| {
            disk::set_online(o, n, true, Some(false))
        })
        .await
    }

    async fn set_disk_online_read_only(&self, n: u32, d: Deadline) -> HostResult<()> {
        self.run(HostOp::SetDiskState, d, move |o| {
            disk::set_online(o, n, true, Some(true))
        })
        .await
    }

    fn uptime(&self) -> Option<Duration> {
        self.inner.host.uptime()
    }

    fn windows_build(&self) -> Option<u32> {
        self.inner.host.os_build()
    }

    async fn in_flight(&self, object: &HostObject, d: Deadline) -> HostResult<InFlight> {
        let object = object.clone();
        self.run(HostOp::InFlight, d, move |o| o.calls.query(o, &object))
            .await
    }

    async fn is_disk_online(&self, n: u32, d: Deadline) -> HostResult<bool> {
        self.run(HostOp::GetDiskState, d, move |o| {
            Ok(!disk::one(o, n)?.is_offline)
        })
        .await
    }

    async fn list_volumes_on_disk(&self, n: u32, d: Deadline) -> HostResult<Vec<String>> {
        self.run(HostOp::ListVolumesOnDisk, d, move |o| disk::volumes(o, n))
            .await
    }

    async fn mount_volume(&self, volume_id: &str, path: &HostPath, d: Deadline) -> HostResult<()> {
        let (v, p) = (volume_id.to_owned(), path.as_str().to_owned());
        self.run(HostOp::MountVolume, d, move |o| volume::mount(o, &v, &p))
            .await
    }

    async fn unmount_volume(
        &self,
        volume_id: &str,
        path: &HostPath,
        d: Deadline,
    ) -> HostResult<()> {
        let (v, p) = (volume_id.to_owned(), path.as_str().to_owned());
        self.run(HostOp::UnmountVolume, d, move |o| {
            volume::unmount(o, &v, &p)
        })
        .await
    }

    async fn is_volume_formatted(&self, volume_id: &str, d: Deadline) -> HostResult<bool> {
        let v = volume_id.to_owned();
        self.run(HostOp::IsVolumeFormatted, d, move |o| {
            Ok(volume::one(o, &v)?.file_system_type.is_formatted())
        })
        .await
    }

    async fn format_volume(&self, volume_id: &str, d: Deadline) -> HostResult<()> {
        let v = volume_id.to_owned();
        let object = HostObject::Volume(v.clone());
        self.run_to_end(HostOp::FormatVolume, d, object, move |o| {
            volume::format(o, &v)
        })
        .await
    }

    async fn resize_volume(&self, volume_id: &str, size: u64, d: Deadline) -> HostResult<()> {
        let v = volume_id.to_owned();
        let object = HostObject::Volume(v.clone());
        self.run_to_end(HostOp::ResizeVolume, d, object, move |o| {
            volume::resize(o, &v, size)
        })
        .await
    }

    async fn volume_stats(&self, volume_id: &str, d: Deadline) -> HostResult<(u64, u64)> {
        let v = volume_id.to_owned();
        self.run(HostOp::GetVolumeStats, d, move |o| volume::stats(o, &v))
            .await
    }

    async fn volume_id_from_target_path(&self, path: &HostPath, d: Deadline) -> HostResult<String> {
        let p = path.as_str().to_owned();
        self.run(HostOp::GetVolumeIDFromTargetPath, d, move |o| {
            volume::id_from_target_path(o, &p)
        })
        .await
    }

    async fn write_volume_cache(&self, volume_id: &str, d: Deadline) -> HostResult<()> {
        let v = volume_id.to_owned();
        self.run(HostOp::WriteVolumeCache, d, move |o| {
            volume::flush(o, &v, false)
        })
        .await
    }

    async fn add_target_portal(&self, portal: &Portal, d: Deadline) -> HostResult<()> {
        let p = portal.clone();
        self.run(HostOp::AddTargetPortal, d, move |o| {
            iscsi::add_portal(o, &p, &IscsiAuth::None)
        })
        .await
    }

    async fn discover_target_portal(
        &self,
        portal: &Portal,
        d: Deadline,
    ) -> HostResult<Vec<String>> {
        let p = portal.clone();
        self.run(HostOp::DiscoverTargetPortal, d, move |o| {
            iscsi::discover(o, &p)
        })
        .await
    }

    async fn add_target_portal_with_chap(
        &self,
        portal: &Portal,
        discovery: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        let (p, a) = (portal.clone(), discovery.clone());
        self.run(HostOp::AddTargetPortal, d, move |o| {
            iscsi::add_portal(o, &p, &a)
        })
        .await
    }

    async fn connect_target(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        let (p, i, a) = (portal.clone(), iqn.to_owned(), auth.clone());
        self.run(HostOp::ConnectTarget, d, move |o| {
            iscsi::connect(o, &p, &i, &a, false, false)
        })
        .await
    }

    async fn connect_target_persistent(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        let (p, i, a) = (portal.clone(), iqn.to_owned(), auth.clone());
        self.run(HostOp::ConnectTarget, d, move |o| {
            iscsi::connect(o, &p, &i, &a, true, false)
        })
        .await
    }

    async fn disconnect_target(&self, _portal: &Portal, iqn: &str, d: Deadline) -> HostResult<()> {
        let i = iqn.to_owned();
        let object = HostObject::Target(i.clone());
        self.run_outliving(HostOp::DisconnectTarget, d, object, move |o| {
            iscsi::disconnect(o, &i)
        })
        .await
    }

    async fn get_target_disks(
        &self,
        _portal: &Portal,
        iqn: &str,
        d: Deadline,
    ) -> HostResult<Vec<u32>> {
        let i = iqn.to_owned();
        self.run(HostOp::GetTargetDisks, d, move |o| {
            iscsi::target_disks(o, &i)
        })
        .await
    }

    async fn set_mutual_chap_secret(&self, secret: &Secret, d: Deadline) -> HostResult<()> {
        let s = secret.clone();
        self.run(HostOp::SetMutualChapSecret, d, move |o| {
            o.method(o.w.set_chap_secret(o.c, s.expose()), &[])
        })
        .await
    }

    async fn list_target_portals(&self, d: Deadline) -> HostResult<Vec<Portal>> {
        self.run(HostOp::ListTargetPortals, d, iscsi::portals).await
    }

    async fn disk_number_of_volume(&self, volume_id: &str, d: Deadline) -> HostResult<u32> {
        let v = volume_id.to_owned();
        self.run(HostOp::GetDiskNumberFromVolumeID, d, move |o| {
            volume::disk_number(o, &v)
        })
        .await
    }

    async fn read_link(&self, path: &HostPath, d: Deadline) -> HostResult<Option<String>> {
        let p = path.as_str().to_owned();
        self.run(HostOp::ReadLink, d, move |o| files::read_link(o, &p))
            .await
    }

    async fn path_space(&self, path: &HostPath, d: Deadline) -> HostResult<PathSpace> {
        let p = path.as_str().to_owned();
        self.run(HostOp::PathSpace, d, move |o| files::path_space(o, &p))
            .await
    }

    async fn refresh_target_portal(&self, portal: &Portal, d: Deadline) -> HostResult<()> {
        let p = portal.clone();
        self.run(HostOp::RefreshTargetPortal, d, move |o| {
            iscsi::refresh(o, &p)
        })
        .await
    }

    async fn disk_layout(&self, n: u32, d: Deadline) -> HostResult<DiskLayout> {
        self.run(HostOp::DiskLayout, d, move |o| disk::layout(o, n))
            .await
    }

    async fn iscsi_sessions(&self, d: Deadline) -> HostResult<Vec<String>> {
        self.run(HostOp::ListIscsiSessions, d, iscsi::sessions)
            .await
    }

    async fn mpio_claim(&self, d: Deadline) -> HostResult<MpioClaim> {
        self.run(HostOp::MultipathClaim, d, iscsi::mpio_claim).await
    }

    async fn connect_target_multipath(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        persistent: bool,
        d: Deadline,
    ) -> HostResult<()> {
        let (p, i, a) = (portal.clone(), iqn.to_owned(), auth.clone());
        self.run(HostOp::ConnectTarget, d, move |o| {
            iscsi::connect(o, &p, &i, &a, persistent, true)
        })
        .await
    }

    async fn target_paths(&self, iqn: &str, d: Deadline) -> HostResult<Vec<TargetPath>> {
        let i = iqn.to_owned();
        self.run(HostOp::TargetPaths, d, move |o| iscsi::paths(o, &i))
            .await
    }

    /// The ledgers' word (`ledger.rs`).
    fn made_by_wincsi(&self, object: SharedObject<'_>) -> Option<bool> {
        let i = &self.inner;
        Some(ledger::made_by_wincsi(
            [&i.ledger, &i.sessions, &i.joined],
            object,
        ))
    }

    async fn claim(&self, object: SharedObject<'_>, d: Deadline) -> HostResult<()> {
        let (op, claim) = ledger::claim(object);
        self.run(op, d, claim).await
    }
}
