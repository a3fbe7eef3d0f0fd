//! The Windows view of the simulated host: the same disks, partitions, volumes, SMB global mappings, iSCSI portals,
//! targets, sessions and CHAP state, and the same sandbox filesystem, seen the way wincsi's native (HostProcess)
//! backend sees Windows — through the `winhost` facade's WMI queries, WMI methods and Win32 calls
//! ([`winhost::WindowsHost`]).
//!
//! [`WindowsView`] implements the facade over the host model, so the native backend's logic runs unchanged against
//! it. It shares everything with the csi-proxy view ([`crate::SimHost`]'s gRPC services): every call goes through
//! [`crate::SimHost`]'s call path, so it is audited (under its own name: [`CALLS`]), counted, delayed, hung, failed
//! by injected faults and failed when a reboot interrupts it; the disks' arrival delays, offline LUNs, read-only
//! disks, data-loss detection and the invariants are the model's. A test can mix both views of one host (stage with
//! one backend, inspect or repair with the other).
//!
//! Behaviour: Windows' documented answers, cited per call in `storage.rs`, `iscsi.rs`, `smb.rs` and `files.rs`
//! ("reference §N" = `shared/reference/windows-native-apis.md`); **unverified** marks what no source settles and says
//! what the simulator chose. Unlike the csi-proxy view, nothing here depends on the csi-proxy release being played:
//! this is Windows, not csi-proxy (the one exception: how a failed SMB/iSCSI provider method reports its error,
//! `host.behaviour.wmi_failures`, which the csi-proxy view also follows).
//!
//! Threading: the facade is synchronous. Call it from a thread that is not running the tokio runtime the view was
//! created in (the native backend calls it from `spawn_blocking`): each call runs [`crate::SimHost`]'s async call
//! path with [`tokio::runtime::Handle::block_on`], so injected latency uses tokio's (possibly paused) clock and a
//! hung call blocks its thread until released, exactly as a stuck WMI provider holds a worker thread.
//!
//! Injected faults ([`crate::SimHost::fail_nth`] on a name of [`CALLS`]) answer as follows, by the fault's message:
//! `return:N` — the method ran and returned `ReturnValue` N (methods only); `raise:N` — the provider raised N in its
//! error object (`raised`: `Windows System Error N` for SMB methods, `HRESULT 0x…` otherwise);
//! `hresult:0xXXXXXXXX` — the COM call failed with that HRESULT; `win32:N` — the Win32 call failed with error N;
//! anything else — `WBEM_E_FAILED` for WMI calls, error 31 (`ERROR_GEN_FAILURE`) for Win32 calls.

mod files;
mod iscsi;
mod objects;
pub mod remote;
mod smb;
mod storage;
#[cfg(test)]
mod tests;
mod walk;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use winhost::codes::{HResult, HResultCode, Win32Error};
use winhost::method::ReturnCode;
use winhost::probe::{ClassStatus, Namespace, ProbeReport, REQUIRED_CLASSES, is_absence};
use winhost::{CallContext, CallError, CallResult, Capabilities, MethodOutcome};

use crate::error::Error;
use crate::host::{Face, SimHost};
use crate::state::State;

/// Every call name of the Windows view, as audited and as fault injection, latency and hangs take them
/// ([`crate::normalize_rpc`] accepts them).
pub const CALLS: &[&str] = &[
    // ROOT\Microsoft\Windows\Storage: disks, partitions, volumes, settings
    "SELECT MSFT_Disk",
    "SELECT MSFT_Partition",
    "SELECT MSFT_Volume",
    "ASSOCIATORS MSFT_PartitionToVolume->MSFT_Volume",
    "ASSOCIATORS MSFT_PartitionToVolume->MSFT_Partition",
    "MSFT_Disk.Online",
    "MSFT_Disk.Offline",
    "MSFT_Disk.Initialize",
    "MSFT_Disk.CreatePartition",
    "MSFT_Disk.SetAttributes",
    "MSFT_Disk.Refresh",
    "MSFT_Partition.Online",
    "MSFT_Partition.GetSupportedSize",
    "MSFT_Partition.Resize",
    "MSFT_Volume.Format",
    "MSFT_Volume.Flush",
    "MSFT_StorageSetting.Get",
    "MSFT_StorageSetting.UpdateHostStorageCache",
    "SELECT MSFT_MSDSMSupportedHW",
    // ROOT\Microsoft\Windows\Storage: the iSCSI initiator
    "SELECT MSFT_iSCSITargetPortal",
    "MSFT_iSCSITargetPortal.New",
    "MSFT_iSCSITargetPortal.Update",
    "MSFT_iSCSITargetPortal.Remove",
    "ASSOCIATORS MSFT_iSCSITargetToiSCSITargetPortal->MSFT_iSCSITarget",
    "SELECT MSFT_iSCSITarget",
    "MSFT_iSCSITarget.Connect",
    "MSFT_iSCSITarget.Disconnect",
    "ASSOCIATORS MSFT_iSCSITargetToiSCSISession->MSFT_iSCSISession",
    "SELECT MSFT_iSCSISession",
    "ASSOCIATORS MSFT_iSCSISessionToDisk->MSFT_Disk",
    "ASSOCIATORS MSFT_iSCSITargetToiSCSIConnection->MSFT_iSCSIConnection",
    "ASSOCIATORS MSFT_iSCSIConnectionToDisk->MSFT_Disk",
    "MSFT_iSCSISession.Unregister",
    "MSFT_iSCSISession.SetCHAPSecret",
    "SELECT MSFT_InitiatorPort",
    "MSFT_iSCSISession.Register",
    // ROOT\Microsoft\Windows\SMB
    "SELECT MSFT_SmbGlobalMapping",
    "SELECT MSFT_SmbGlobalMapping WHERE RemotePath",
    "MSFT_SmbGlobalMapping.Create",
    "MSFT_SmbGlobalMapping.Remove",
    // Win32
    "CreateDirectoryW",
    "RemoveDirectoryW",
    "DeleteFileW",
    "RemoveDirectoryTree",
    "CreateSymbolicLinkW",
    "GetFileAttributesW",
    "GetFileInformationByHandleEx",
    "FSCTL_GET_REPARSE_POINT",
    "GetFinalPathNameByHandleW",
    "SetVolumeMountPointW",
    "DeleteVolumeMountPointW",
    "GetVolumeNameForVolumeMountPointW",
    "GetVolumePathNameW",
    "GetVolumePathNamesForVolumeNameW",
    "GetVolumeInformationW",
    "GetDiskFreeSpaceExW",
    "FlushFileBuffers",
    "IOCTL_STORAGE_GET_DEVICE_NUMBER",
    "IOCTL_STORAGE_QUERY_PROPERTY",
    "ReadFile",
    // The start-up probe when it runs again (`Capabilities::reprobe`): a fault here is a probe that could not tell
    // (`hresult:0x80041033`, WMI shutting down at boot).
    "ConnectServer ROOT\\Microsoft\\Windows\\Storage",
    "ConnectServer ROOT\\Microsoft\\Windows\\SMB",
    "GetObject MSFT_Disk",
    "GetObject MSFT_Partition",
    "GetObject MSFT_Volume",
    "GetObject MSFT_PartitionToVolume",
    "GetObject MSFT_StorageSetting",
    "GetObject MSFT_iSCSITargetPortal",
    "GetObject MSFT_iSCSITarget",
    "GetObject MSFT_iSCSISession",
    "GetObject MSFT_iSCSIConnection",
    "GetObject MSFT_InitiatorPort",
    "GetObject MSFT_iSCSITargetToiSCSITargetPortal",
    "GetObject MSFT_iSCSITargetToiSCSISession",
    "GetObject MSFT_iSCSITargetToiSCSIConnection",
    "GetObject MSFT_iSCSIConnectionToDisk",
    "GetObject MSFT_iSCSISessionToDisk",
    "GetObject MSFT_SmbGlobalMapping",
];

/// The environment variable that chooses which face of the simulated host the driver's test suites use:
/// `csi-proxy` (default) or `native` (see [`TestBackend::from_env`]).
pub const TEST_HOST_BACKEND_ENV: &str = "WINCSI_TEST_HOST_BACKEND";

/// Which host backend a driver test suite runs over the simulated host: csi-proxy (the gRPC services) or native
/// (the Windows view through the `winhost` facade).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TestBackend {
    /// The csi-proxy backend over the simulated csi-proxy.
    #[default]
    CsiProxy,
    /// The native backend over the Windows view.
    Native,
}

impl TestBackend {
    /// The backend named by [`TEST_HOST_BACKEND_ENV`] (unset or empty: csi-proxy). The one place the variable is
    /// read, so CI can run every suite per backend without editing tests. An unknown value is an error.
    pub fn from_env() -> crate::Result<Self> {
        match std::env::var(TEST_HOST_BACKEND_ENV) {
            Err(_) => Ok(Self::CsiProxy),
            Ok(v) => v.parse(),
        }
    }

    /// [`TestBackend::from_env`], panicking on an unknown value (test support).
    pub fn from_env_or_panic() -> Self {
        Self::from_env().unwrap_or_else(|e| panic!("{e}"))
    }

    /// The value as the variable spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CsiProxy => "csi-proxy",
            Self::Native => "native",
        }
    }
}

impl std::str::FromStr for TestBackend {
    type Err = Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        match s.trim() {
            "" | "csi-proxy" => Ok(Self::CsiProxy),
            "native" => Ok(Self::Native),
            other => Err(Error::Scenario(format!(
                "{TEST_HOST_BACKEND_ENV}={other:?}: expected csi-proxy or native"
            ))),
        }
    }
}

impl fmt::Display for TestBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The simulated host through the `winhost` facade (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct WindowsView {
    host: SimHost,
    handle: tokio::runtime::Handle,
    /// What this host has for good: a namespace or class missing here stays missing (`with_probe`).
    facts: Arc<ProbeReport>,
    /// What the last probe found (shared by clones): `with_probe`'s report until a `reprobe`.
    probe: Arc<RwLock<ProbeReport>>,
    /// The process calling through this view was killed ([`WindowsView::kill`]; shared by clones).
    dead: Arc<AtomicBool>,
}

impl fmt::Debug for WindowsView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowsView")
            .field("complete", &self.report().is_complete())
            .finish_non_exhaustive()
    }
}

impl WindowsView {
    /// The Windows view of `host`. Must be called inside a tokio runtime (its handle runs the calls).
    pub fn new(host: SimHost) -> Self {
        Self::with_handle(host, tokio::runtime::Handle::current())
    }

    /// The Windows view of `host`, running calls on `handle`'s runtime.
    pub fn with_handle(host: SimHost, handle: tokio::runtime::Handle) -> Self {
        Self {
            host,
            handle,
            facts: Arc::new(ProbeReport::complete()),
            probe: Arc::new(RwLock::new(ProbeReport::complete())),
            dead: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The driver process calling through this view (and its clones) was killed: from now on none of its calls
    /// reaches the host — they fail with [`CallError::Cancelled`] `started: false`, unaudited — while a call already
    /// running finishes there, as a WMI method whose caller died does. A test's driver restart kills the old
    /// process's view, so that nothing the dead process had in progress (a facade sequence on a blocking thread, a
    /// task it spawned) issues a host call a dead process never could: the next step of a sequence dies with it.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    /// A host whose start-up probe found what `report` says: a namespace or class it reports absent (`Missing`,
    /// `WBEM_E_INVALID_NAMESPACE`) is absent for good; one whose probe failed (`Failed`, any other connect error:
    /// WMI shutting down at boot) is there, and a [`Capabilities::reprobe`] finds it unless a fault is injected on
    /// its `ConnectServer …` / `GetObject …` call. Calls into what the current report lacks fail with
    /// [`CallError::Unsupported`] without reaching the host, as the Windows implementation's do.
    pub fn with_probe(mut self, report: ProbeReport) -> Self {
        self.facts = Arc::new(report.clone());
        self.probe = Arc::new(RwLock::new(report));
        self
    }

    fn report(&self) -> ProbeReport {
        self.probe
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The simulated host.
    pub fn host(&self) -> &SimHost {
        &self.host
    }

    /// One facade call: refused when past its deadline or cancelled (`started: false`; the host never sees it),
    /// otherwise run through the host's call path under `name` (audited, faults, latency, hangs), then `f` on the
    /// state. `f`'s answer is the call's; an injected fault answers per the module docs.
    fn call<T>(
        &self,
        ctx: &CallContext,
        name: &'static str,
        args: serde_json::Value,
        f: impl FnOnce(&mut State) -> CallResult<T>,
    ) -> CallResult<T> {
        self.run(ctx, name, args, f, |_| None, |fault| Err(fault.error(name)))
    }

    /// [`WindowsView::call`] for a WMI method: a non-success `ReturnValue` is audited as the call's error, and an
    /// injected `return:N` answers `ReturnValue` N.
    fn method<C, T>(
        &self,
        ctx: &CallContext,
        name: &'static str,
        args: serde_json::Value,
        f: impl FnOnce(&mut State) -> CallResult<MethodOutcome<C, T>>,
    ) -> CallResult<MethodOutcome<C, T>>
    where
        C: ReturnCode + From<u32>,
        T: Default,
    {
        self.run(
            ctx,
            name,
            args,
            f,
            |o: &MethodOutcome<C, T>| (!o.is_success()).then(|| format!("ReturnValue {}", o.code)),
            |fault| match fault {
                Fault::Return(code) => {
                    Ok(MethodOutcome::new(name, C::from(code), None, T::default()))
                }
                other => Err(other.error(name)),
            },
        )
    }

    fn run<T>(
        &self,
        ctx: &CallContext,
        name: &'static str,
        args: serde_json::Value,
        f: impl FnOnce(&mut State) -> CallResult<T>,
        failure: impl FnOnce(&T) -> Option<String>,
        fault: impl FnOnce(Fault) -> CallResult<T>,
    ) -> CallResult<T> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(CallError::Cancelled { started: false });
        }
        ctx.check()?;
        if let Some(missing) = self.missing(name) {
            return Err(CallError::Unsupported { what: missing });
        }
        let answer = self.handle.block_on(self.host.call_on(
            Face::Windows,
            name,
            args,
            |st| Ok(f(st)),
            |r: &CallResult<T>| match r {
                Err(e) => Some(e.to_string()),
                Ok(v) => failure(v),
            },
        ));
        match answer {
            Ok(r) => r,
            Err(Error::Host(msg)) => fault(Fault::parse(&msg)),
            Err(other) => Err(CallError::Unavailable(other.to_string())),
        }
    }

    /// What the probe found missing for call `name` (WMI calls name their class first).
    fn missing(&self, name: &str) -> Option<String> {
        let probe = self.report();
        if probe.is_complete() {
            return None;
        }
        let class = name
            .strip_prefix("SELECT ")
            .or_else(|| name.strip_prefix("ASSOCIATORS "))
            .map(|rest| rest.split("->").next().unwrap_or(rest))
            .unwrap_or(name)
            .split('.')
            .next()
            .unwrap_or(name);
        let namespace = if class.starts_with("MSFT_Smb") {
            winhost::probe::Namespace::Smb
        } else if class.starts_with("MSFT_") {
            winhost::probe::Namespace::Storage
        } else {
            return None;
        };
        (!probe.has_class(namespace, class)).then(|| format!("{namespace} {class}"))
    }
}

/// The audited name of a probe's `ConnectServer`.
fn connect_call(ns: Namespace) -> &'static str {
    match ns {
        Namespace::Storage => "ConnectServer ROOT\\Microsoft\\Windows\\Storage",
        Namespace::Smb => "ConnectServer ROOT\\Microsoft\\Windows\\SMB",
    }
}

/// The audited name of a probe's `GetObject` of `class`.
fn get_object_call(class: &str) -> &'static str {
    CALLS
        .iter()
        .copied()
        .find(|c| c.strip_prefix("GetObject ") == Some(class))
        .unwrap_or("GetObject")
}

fn hresult_of(e: &CallError) -> HResult {
    match e {
        CallError::Wmi { hresult, .. } => *hresult,
        _ => HResult(HResultCode::WbemEFailed.code()),
    }
}

impl Capabilities for WindowsView {
    fn probe_report(&self) -> ProbeReport {
        self.report()
    }

    /// The simulated node's `GetTickCount64` (restarts with every reboot; not audited: a read of the kernel's tick
    /// count, no WMI or Win32 call that could fail or hang).
    fn uptime(&self) -> Option<std::time::Duration> {
        Some(self.host().uptime())
    }

    /// The scenario's Windows build (`host.windows_build`; not audited: a read, like the uptime).
    fn os_build(&self) -> Option<u32> {
        Some(self.host().windows_build())
    }

    /// The probe again, through the host's call path (audited; a fault on `ConnectServer …` or `GetObject …` is a
    /// probe that could not tell): what the host lacks for good stays missing, the rest is found.
    fn reprobe(&self, ctx: &CallContext) -> CallResult<ProbeReport> {
        let facts = self.facts.clone();
        let mut connect = Vec::new();
        for ns in Namespace::ALL {
            let fact = facts
                .namespaces
                .iter()
                .find(|n| n.namespace == ns)
                .and_then(|n| n.connect_error);
            let error = match fact {
                Some(h) if is_absence(h) => Some(h),
                _ => self
                    .call(ctx, connect_call(ns), serde_json::json!({}), |_| Ok(()))
                    .err()
                    .map(|e| hresult_of(&e)),
            };
            connect.push((ns, error));
        }
        let mut classes = Vec::new();
        for r in REQUIRED_CLASSES {
            if connect
                .iter()
                .any(|(n, e)| *n == r.namespace && e.is_some())
            {
                continue;
            }
            let fact = facts
                .namespaces
                .iter()
                .find(|n| n.namespace == r.namespace)
                .and_then(|n| n.classes.iter().find(|(c, _)| *c == r.class))
                .map(|(_, s)| s.clone());
            let answer = match fact {
                Some(ClassStatus::Missing(h)) => Err(h),
                Some(ClassStatus::Present { missing_methods }) => self
                    .call(ctx, get_object_call(r.class), serde_json::json!({}), |_| {
                        Ok(())
                    })
                    .map(|()| missing_methods)
                    .map_err(|e| hresult_of(&e)),
                _ => self
                    .call(ctx, get_object_call(r.class), serde_json::json!({}), |_| {
                        Ok(())
                    })
                    .map(|()| Vec::new())
                    .map_err(|e| hresult_of(&e)),
            };
            classes.push((r.class, answer));
        }
        let report = ProbeReport::from_lookup(
            |ns| connect.iter().find(|(n, _)| *n == ns).and_then(|(_, e)| *e),
            |_, r| {
                classes
                    .iter()
                    .find(|(c, _)| *c == r.class)
                    .map(|(_, a)| a.clone())
                    .unwrap_or(Ok(Vec::new()))
            },
        );
        *self.probe.write().unwrap_or_else(PoisonError::into_inner) = report.clone();
        Ok(report)
    }
}

/// How an injected fault answers (module docs).
enum Fault {
    Return(u32),
    Raise(u32),
    HResult(u32),
    Win32(u32),
    /// The host rebooted while the call was hung.
    Rebooted,
    Other,
}

impl Fault {
    fn parse(message: &str) -> Self {
        let number = |s: &str| {
            let s = s.trim();
            match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => s.parse().ok(),
            }
        };
        if message == crate::host::REBOOT_ABORT {
            Self::Rebooted
        } else if let Some(n) = message.strip_prefix("return:").and_then(number) {
            Self::Return(n)
        } else if let Some(n) = message.strip_prefix("raise:").and_then(number) {
            Self::Raise(n)
        } else if let Some(n) = message.strip_prefix("hresult:").and_then(number) {
            Self::HResult(n)
        } else if let Some(n) = message.strip_prefix("win32:").and_then(number) {
            Self::Win32(n)
        } else {
            Self::Other
        }
    }

    /// The error a call named `name` answers with.
    fn error(self, name: &'static str) -> CallError {
        let win32_call = !name.contains("MSFT_");
        match self {
            Self::Rebooted => {
                CallError::Unavailable("the node rebooted while the call was running".into())
            }
            Self::HResult(h) => CallError::wmi(name, HResult(h)),
            Self::Raise(code) if name.starts_with("MSFT_Smb") => {
                raised(name, code, "WIN32", crate::profile::windows_message(code))
            }
            Self::Raise(code) => raised(
                name,
                code,
                "HRESULT",
                winhost::IscsiStatus::from_code(code)
                    .meaning()
                    .unwrap_or("the provider failed"),
            ),
            Self::Win32(code) | Self::Return(code) if win32_call => {
                CallError::win32(name, "", Win32Error::from_code(code))
            }
            Self::Win32(code) => CallError::wmi(name, HResult(0x8007_0000 | (code & 0xFFFF))),
            Self::Return(_) | Self::Other if !win32_call => {
                CallError::wmi(name, HResult(HResultCode::WbemEFailed.code()))
            }
            Self::Return(_) | Self::Other => CallError::win32(name, "", Win32Error::from_code(31)),
        }
    }
}

/// A Management Infrastructure provider's failed method as WMI raises it (the SMB and iSCSI providers): the call
/// fails — with `WBEM_E_FAILED` here (which HRESULT DCOM returns is **unverified**, reference §5 item 1) — and the
/// error object on the thread is an `MSFT_WmiError` whose `MessageID` is what PowerShell prints as the
/// `FullyQualifiedErrorId` of its `CimException`: `Windows System Error 1219,New-SmbGlobalMapping` (csi-driver-smb
/// #219), `HRESULT 0xefff0029,Connect-IscsiTarget` (public PowerShell transcripts, reference §2.5), category
/// `NotSpecified` (0) in both. `error_Type` as `MI_Context_PostError` names the result types (`WIN32`, `HRESULT`).
pub(crate) fn raised(call: &'static str, code: u32, error_type: &str, message: &str) -> CallError {
    let message_id = if error_type == "WIN32" {
        format!("Windows System Error {code}")
    } else {
        format!("HRESULT 0x{code:08x}")
    };
    CallError::wmi_with(
        call,
        HResult(HResultCode::WbemEFailed.code()),
        winhost::ErrorObject {
            class: Some("MSFT_WmiError".to_owned()),
            error_code: Some(code),
            error_type: Some(error_type.to_owned()),
            error_category: Some(0),
            message: Some(message.to_owned()),
            message_id: Some(message_id),
            ..Default::default()
        },
    )
}

/// `WBEM_E_NOT_FOUND` for an instance method or association on an object that no longer exists (reference §1.4:
/// `GetObject` of a missing path; that `ExecMethod` answers the same is **unverified**).
pub(crate) fn not_found(call: &'static str) -> CallError {
    CallError::wmi(call, HResult(HResultCode::WbemENotFound.code()))
}

/// `WBEM_E_INVALID_OBJECT_PATH`: a path this host never produced.
pub(crate) fn bad_path(call: &'static str) -> CallError {
    CallError::wmi(call, HResult(HResultCode::WbemEInvalidObjectPath.code()))
}

/// A Win32 failure of `function` on `path`.
pub(crate) fn win32(function: &'static str, path: &str, code: u32) -> CallError {
    CallError::win32(function, path, Win32Error::from_code(code))
}
