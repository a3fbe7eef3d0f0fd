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
//! | `NewSmbGlobalMapping` | `SELECT MSFT_SmbGlobalMapping` → OK: `GetFileAttributesW(root)` (reachable: reuse) / ours and broken: `Remove(Force)` / none: ledger → `Create` → link: `CreateSymbolicLinkW` |
//! | `RemoveSmbGlobalMapping` | `SELECT MSFT_SmbGlobalMapping` → ours: `Remove(Force)`; not ours: left in place |
//! | `ListDiskLocations` | `SELECT MSFT_Disk` |
//! | `ListDiskIDs` | `SELECT MSFT_Disk` → per disk `IOCTL_STORAGE_GET_DEVICE_NUMBER`, `IOCTL_STORAGE_QUERY_PROPERTY` |
//! | `Rescan` | `MSFT_StorageSetting.UpdateHostStorageCache` |
//! | `PartitionDisk` | `SELECT MSFT_Disk` → (RAW: `Initialize(GPT)`) → `Refresh` → `SELECT MSFT_Partition` → (no partition but Microsoft Reserved: `CreatePartition` → `Refresh` → `MSFT_Partition.Online`; any other partition: AlreadyExists, nothing created) |
//! | `GetDiskStats` / `GetDiskState` | `SELECT MSFT_Disk` |
//! | `SetDiskState(online)` | `SELECT MSFT_Disk` → (offline: `Online`) → `Refresh`; writable: (onlined: `SELECT MSFT_Disk`) → (read-only: `SetAttributes(IsReadOnly=false)`) |
//! | `ListVolumesOnDisk` | `SELECT MSFT_Partition` → per partition `ASSOCIATORS …->MSFT_Volume` (a basic partition without its volume yet: `SELECT MSFT_Disk` → `Refresh` → list again) |
//! | `MountVolume` | `SetVolumeMountPointW` (145 → `GetVolumeNameForVolumeMountPointW`: the same volume is success) |
//! | `UnmountVolume` | `FlushFileBuffers` (volume gone: skipped; refused on a read-only disk: `SELECT MSFT_Volume` → `ASSOCIATORS …->MSFT_Partition` → `SELECT MSFT_Disk`, and skipped when `IsReadOnly`) → `DeleteVolumeMountPointW` |
//! | `IsVolumeFormatted` | `SELECT MSFT_Volume` |
//! | `FormatVolume` | `SELECT MSFT_Volume` → `Format(NTFS, quick, Force)` |
//! | `ResizeVolume` | `SELECT MSFT_Volume` → `ASSOCIATORS …->MSFT_Partition` → `GetSupportedSize` → (growth ≥ 100 MiB: `Resize`) |
//! | `GetVolumeStats` | `GetDiskFreeSpaceExW` |
//! | `GetVolumeIDFromTargetPath` | `FSCTL_GET_REPARSE_POINT` per hop (≤ 8) → `GetVolumeNameForVolumeMountPointW` → `GetVolumeInformationW` |
//! | `WriteVolumeCache` | `FlushFileBuffers` |
//! | `AddTargetPortal` | `SELECT MSFT_iSCSITargetPortal` → (absent: `New`, with discovery CHAP when given) |
//! | `ConnectTarget` | `SELECT MSFT_iSCSITargetPortal` → `ASSOCIATORS …->MSFT_iSCSITarget` (IQN ignoring case; absent: `Update` → again) → (not connected: `Connect`, `IsPersistent` when asked) |
//! | `DisconnectTarget` | `SELECT MSFT_iSCSITarget` → `ASSOCIATORS …->MSFT_iSCSISession` → per session (persistent: `Unregister`) → `Disconnect` |
//! | `GetTargetDisks` | `SELECT MSFT_iSCSITarget` → `ASSOCIATORS …->MSFT_iSCSISession` → per session `ASSOCIATORS …->MSFT_Disk` |
//! | `SetMutualChapSecret` | `MSFT_iSCSISession.SetCHAPSecret` |
//! | `ListTargetPortals` | `SELECT MSFT_iSCSITargetPortal` |
//! | `GetDiskNumberFromVolumeID` | `SELECT MSFT_Volume` → `ASSOCIATORS …->MSFT_Partition` (its `DiskNumber`) |
//! | `ReadLink` (no csi-proxy RPC) | `FSCTL_GET_REPARSE_POINT` (one hop, never resolved) |
//! | `DiskLayout` (no csi-proxy RPC) | `SELECT MSFT_Disk` (`PartitionStyle`) → `SELECT MSFT_Partition` (`GptType` / `MbrType`) |
//!
//! # What it does that csi-proxy cannot (advertised by [`Host::capabilities`])
//!
//! * SMB mappings are listed with their status: a mapping is removed only if this driver created it (a durable
//!   ledger in the state directory, written before `Create`); a Disconnected or broken mapping it created is
//!   removed and re-created directly (no 1219 after a reboot); a staging link over a mapping that is not OK answers
//!   "does not resolve" (the volume is reported abnormal) instead of an error.
//! * A writable volume's disk has its read-only flag cleared after `Online` (SAN policy, re-attach).
//! * Volumes are waited for (`Refresh` after `Online`, `Initialize` and `CreatePartition`, and once more when a basic
//!   partition has no volume yet) instead of reading a half-arrived disk; `Refresh` shows what has arrived and
//!   hurries nothing, so the driver also reads the partition table (`DiskLayout`): a disk with a partition whose
//!   volume has not arrived is not empty, and `PartitionDisk` refuses (AlreadyExists) rather than do nothing on a
//!   disk that has one, so a late volume is never taken for the driver's own.
//! * A link's stored target is read (`ReadLink`), so a staging link into a share can be adopted when its state record
//!   was lost.
//! * Discovery CHAP on `AddTargetPortal`; persistent logins, whose records are removed (`Unregister`) on logout;
//!   every session of a target is logged out, not only the first; IQNs compare ignoring case, with one rediscovery.

mod disk;
mod files;
mod iscsi;
#[cfg(not(windows))]
#[path = "platform_other.rs"]
mod platform;
#[cfg(windows)]
#[path = "platform_windows.rs"]
mod platform;
mod smb;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
#[cfg(test)]
mod tests;
mod volume;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use winhost::method::{MethodOutcome, ReturnCode};
use winhost::probe::Capability;
use winhost::{CallContext, CallError, CancelToken, ErrorKind, WindowsHost};

use super::{
    DiskIds, DiskLayout, DiskLocation, Host, HostCapabilities, HostError, HostErrorKind, HostOp,
    HostPath, HostProbe, HostResult, IscsiAuth, Portal, Secret, SmbCredential, UncPath,
};
use crate::locks::Deadline;

pub use platform::windows_host;
pub use smb::LEDGER_FILE;
use smb::Ledger;

/// How many facade calls one backend runs at a time (the rest queue for a thread).
pub const DEFAULT_POOL_SIZE: usize = 16;

/// The facade calls of a destructive operation that runs to its end ([`NativeHost::run_to_end`]) are bounded by
/// this, not by the RPC's deadline: the hour after which the driver takes such a call to be over.
const RUN_TO_END_BUDGET: std::time::Duration = std::time::Duration::from_secs(3600);

/// The host port over the Windows facade (see the module docs).
#[derive(Clone)]
pub struct NativeHost {
    inner: Arc<Inner>,
}

struct Inner {
    host: Arc<dyn WindowsHost>,
    permits: Arc<Semaphore>,
    ledger: Ledger,
    caps: HostCapabilities,
}

impl std::fmt::Debug for NativeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeHost")
            .field("capabilities", &self.inner.caps)
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
        let report = host.probe_report();
        let caps = HostCapabilities {
            list_smb_mappings: report.supports(Capability::Smb),
            clear_disk_read_only: report.supports(Capability::Disks),
            discovery_chap: report.supports(Capability::Iscsi),
            persistent_logins: report.supports(Capability::Iscsi),
            read_links: true,
            disk_layout: report.supports(Capability::Disks),
        };
        Self {
            inner: Arc::new(Inner {
                host,
                permits: Arc::new(Semaphore::new(threads.max(1))),
                ledger: Ledger::open(state_dir),
                caps,
            }),
        }
    }

    /// The facade this backend calls.
    pub fn windows(&self) -> &Arc<dyn WindowsHost> {
        &self.inner.host
    }

    /// Run `f` (one host operation's facade calls) on the bounded blocking pool, bounded by `d`.
    async fn run<T: Send + 'static>(
        &self,
        op: HostOp,
        d: Deadline,
        f: impl FnOnce(&Ops<'_>) -> HostResult<T> + Send + 'static,
    ) -> HostResult<T> {
        self.run_as(op, d, false, f).await
    }

    /// [`NativeHost::run`] for a destructive operation (`PartitionDisk`, `FormatVolume`, `ResizeVolume`): once
    /// started, its facade calls run to their end even when the caller stops waiting (its deadline passed, the RPC
    /// was cancelled), as csi-proxy's handlers do, so its outcome shows on the host for the next stage to learn
    /// (`crate::iscsi`'s `pending.rs`) instead of a half-done operation (a disk initialised but not partitioned) that
    /// only the one-hour bound would end. Only a process death cuts it short.
    async fn run_to_end<T: Send + 'static>(
        &self,
        op: HostOp,
        d: Deadline,
        f: impl FnOnce(&Ops<'_>) -> HostResult<T> + Send + 'static,
    ) -> HostResult<T> {
        self.run_as(op, d, true, f).await
    }

    async fn run_as<T: Send + 'static>(
        &self,
        op: HostOp,
        d: Deadline,
        to_end: bool,
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
        // A task of tokio's blocking pool: the permit bounds how many run for this backend. (While it runs, tokio's
        // paused test clock does not auto-advance, exactly as while csi-proxy's in-runtime calls run.)
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f(&Ops {
                w: &*inner.host,
                c: &ctx,
                op,
                ledger: &inner.ledger,
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

/// What one host operation's facade calls run with (on a pool thread).
pub(crate) struct Ops<'a> {
    pub(crate) w: &'a dyn WindowsHost,
    pub(crate) c: &'a CallContext,
    pub(crate) op: HostOp,
    pub(crate) ledger: &'a Ledger,
}

impl Ops<'_> {
    /// A facade failure as this operation's error.
    pub(crate) fn err(&self, e: CallError) -> HostError {
        let kind = match e.win32_code().map(|w| w.code()) {
            // Not a reparse point: nothing is mounted or linked there.
            Some(4390) => HostErrorKind::NotFound,
            _ => kind_of(e.kind()),
        };
        HostError::new(self.op, kind, e.to_string())
    }

    /// A method's output when it succeeded (or answered one of `also_ok`), else its failure as this operation's
    /// error (the code, its meaning and the `ExtendedStatus` in the message).
    pub(crate) fn accept<C: ReturnCode, T>(
        &self,
        outcome: MethodOutcome<C, T>,
        also_ok: &[C],
    ) -> HostResult<T> {
        outcome
            .accept(also_ok)
            .map_err(|f| HostError::new(self.op, kind_of(f.kind()), f.to_string()))
    }

    /// A failure of this operation.
    pub(crate) fn fail(&self, kind: HostErrorKind, message: impl Into<String>) -> HostError {
        HostError::new(self.op, kind, message)
    }
}

/// The facade's classification as the port's (reference §1.4's table).
fn kind_of(k: ErrorKind) -> HostErrorKind {
    match k {
        ErrorKind::NotFound => HostErrorKind::NotFound,
        ErrorKind::AlreadyExists => HostErrorKind::AlreadyExists,
        ErrorKind::NotEmpty => HostErrorKind::NotEmpty,
        ErrorKind::MultipleConnections => HostErrorKind::MultipleConnections,
        ErrorKind::NetworkPathNotFound => HostErrorKind::NetworkPathNotFound,
        ErrorKind::NetworkNameNotFound => HostErrorKind::NetworkNameNotFound,
        ErrorKind::StaleMapping => HostErrorKind::StaleMapping,
        ErrorKind::LogonFailure => HostErrorKind::LogonFailure,
        ErrorKind::AccessDenied => HostErrorKind::AccessDenied,
        ErrorKind::InvalidPath => HostErrorKind::InvalidPath,
        ErrorKind::Unavailable => HostErrorKind::Unavailable,
        ErrorKind::DeadlineExceeded | ErrorKind::Cancelled => HostErrorKind::DeadlineExceeded,
        ErrorKind::Other => HostErrorKind::Other,
    }
}

impl Host for NativeHost {
    fn capabilities(&self) -> HostCapabilities {
        self.inner.caps
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
        let remote = remote.clone();
        let link = link.map(|l| l.as_str().to_owned());
        let cred = credential.map(|c| (c.principal().to_owned(), c.password().clone()));
        self.run(HostOp::NewSmbGlobalMapping, d, move |o| {
            smb::new_mapping(o, &remote, link.as_deref(), cred.as_ref())
        })
        .await
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
        self.run_to_end(HostOp::PartitionDisk, d, move |o| disk::partition(o, n))
            .await
    }

    async fn disk_size(&self, n: u32, d: Deadline) -> HostResult<u64> {
        self.run(HostOp::GetDiskStats, d, move |o| Ok(disk::one(o, n)?.size))
            .await
    }

    async fn set_disk_online(&self, n: u32, online: bool, d: Deadline) -> HostResult<()> {
        self.run(HostOp::SetDiskState, d, move |o| {
            disk::set_online(o, n, online, false)
        })
        .await
    }

    async fn set_disk_online_writable(&self, n: u32, d: Deadline) -> HostResult<()> {
        self.run(HostOp::SetDiskState, d, move |o| {
            disk::set_online(o, n, true, true)
        })
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
        self.run_to_end(HostOp::FormatVolume, d, move |o| volume::format(o, &v))
            .await
    }

    async fn resize_volume(&self, volume_id: &str, size: u64, d: Deadline) -> HostResult<()> {
        let v = volume_id.to_owned();
        self.run_to_end(HostOp::ResizeVolume, d, move |o| {
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
            iscsi::connect(o, &p, &i, &a, false)
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
            iscsi::connect(o, &p, &i, &a, true)
        })
        .await
    }

    async fn disconnect_target(&self, _portal: &Portal, iqn: &str, d: Deadline) -> HostResult<()> {
        let i = iqn.to_owned();
        self.run(HostOp::DisconnectTarget, d, move |o| {
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
            let out = o.w.set_chap_secret(o.c, s.expose()).map_err(|e| o.err(e))?;
            o.accept(out, &[])
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

    async fn disk_layout(&self, n: u32, d: Deadline) -> HostResult<DiskLayout> {
        self.run(HostOp::DiskLayout, d, move |o| disk::layout(o, n))
            .await
    }
}

/// The native backend's liveness check for the Identity service's `Probe`: one cheap read (`SELECT MSFT_Disk
/// WHERE Number = <none>` when the Storage classes are there, else `GetFileAttributesW` of the kubelet root).
pub struct NativeProbe {
    host: NativeHost,
    kubelet_root: String,
    timeout: std::time::Duration,
}

impl NativeProbe {
    /// Probes `host`, each check within [`super::PROBE_TIMEOUT`].
    pub fn new(host: NativeHost, kubelet_root: &str) -> Self {
        Self::within(host, kubelet_root, super::PROBE_TIMEOUT)
    }

    /// Probes `host`, each check within `timeout` (readiness uses a shorter one).
    pub fn within(host: NativeHost, kubelet_root: &str, timeout: std::time::Duration) -> Self {
        Self {
            host,
            kubelet_root: kubelet_root.to_owned(),
            timeout,
        }
    }
}

impl HostProbe for NativeProbe {
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let d = Deadline::after(self.timeout);
            let root = self.kubelet_root.clone();
            let storage = self.host.inner.caps.clear_disk_read_only;
            self.host
                .run(HostOp::GetDiskState, d, move |o| {
                    if storage {
                        o.w.disks(o.c, Some(u32::MAX)).map(|_| ())
                    } else {
                        o.w.file_attributes(o.c, &root).map(|_| ())
                    }
                    .map_err(|e| o.err(e))
                })
                .await
                .map_err(|e| e.message)
        })
    }
}

/// A probe for a backend that could not start: always reports why.
pub struct FailedProbe(pub String);

impl HostProbe for FailedProbe {
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { Err(self.0.clone()) })
    }
}
