//! The Windows implementation of the facade: the only code that touches COM, WMI and Win32.
//!
//! # Threading
//! [`WinHost`] owns five bounded [`WorkerPool`]s, one per lane, so that what is stuck in one lane cannot starve
//! another (reference §1.3; review L2: two calls to an unreachable SMB server used to hold both threads every long
//! call shared):
//! - `winhost-wmi`: queries, association walks and quick methods (`Online`, `SetAttributes`, `Remove`, …);
//! - `winhost-disk`: disk and volume methods that do device I/O (`Format`, `Resize`, `GetSupportedSize`, `Flush`,
//!   `CreatePartition`, `Initialize`, `UpdateHostStorageCache`);
//! - `winhost-iscsi`: iSCSI methods that talk to a target (`Connect`, `Disconnect`, portal `New`/`Update`);
//! - `winhost-smb`: `MSFT_SmbGlobalMapping.Create` (talks to a file server);
//! - `winhost-files`: the Win32 file, volume and device calls (a call on a path through an unreachable share can block
//!   for the SMB redirector's timeout), the raw device reads included.
//!
//! A call whose caller stopped waiting keeps its thread until the provider answers; each lane replaces such a stuck
//! thread (up to [`WinHostConfig::max_replacements`] at a time) and reports it ([`Capabilities::lanes`]; the
//! backend's readiness names an exhausted lane). See [`crate::pool`].
//!
//! Each WMI thread joins the MTA once (`CoInitializeEx(COINIT_MULTITHREADED)`), opens its own connection to each
//! namespace on first use (a `wmi::WMIConnection` cannot cross threads), keeps it, and reopens it after
//! `RPC_E_DISCONNECTED`-class errors. Every call honours its [`CallContext`] as [`crate::pool`] documents: not started
//! after the deadline; a started WMI call that outlives it keeps its thread until the provider answers (synchronous
//! `ExecQuery`/`ExecMethod` cannot be cancelled), while the caller gets `DeadlineExceeded { started: true }`.
//!
//! # Start-up probe
//! [`WinHost::start`] runs the probe ([`crate::probe`]) before anything else and keeps its report: a call into a
//! namespace, class or method the probe did not find fails with [`CallError::Unsupported`] without touching COM.
//! [`Capabilities::reprobe`] runs it again (the backend does, with backoff, while a probe failed for a reason other
//! than "no such namespace or class": WMI restarting at boot, a timeout) and serves what it then finds.

mod clock;
mod com;
pub mod durable;
mod files;
mod services;
mod wmi;

pub(crate) use clock::{build_number, tick_count};

use std::sync::{Arc, PoisonError, RwLock};

use ::wmi::{IWbemClassWrapper, Variant};

use crate::call::CallContext;
use crate::codes::{IscsiStatus, PartitionStyle, StorageReturn};
use crate::error::{CallError, CallResult};
use crate::facade::{
    Capabilities, IscsiOutcome, IscsiWmi, SmbOutcome, SmbWmi, StorageOutcome, StorageWmi,
    Win32Files,
};
use crate::method::{MethodOutcome, ReturnCode, SmbReturn};
use crate::model::{
    AttributeTag, ConnectTarget, CreatePartition, DeviceBytes, DiskAttributes, FileAttributes,
    FormatVolume, FreeSpace, MsftDisk, MsftInitiatorPort, MsftIscsiConnection, MsftIscsiSession,
    MsftIscsiTarget, MsftIscsiTargetPortal, MsftMsdsmSupportedHw, MsftPartition,
    MsftStorageSetting, MsftVolume, NewTargetPortal, ObjectPath, RegisterSession, SmbGlobalMapping,
    SmbGlobalMappingCreate, StorageDeviceNumber, SupportedSize, SymlinkFlags, VolumeInformation,
    VolumeNameKind,
};
use crate::page83::StorageIdentifier;
use crate::paths::VolumeGuidPath;
use crate::pool::{PoolConfig, PoolStatus, WorkerPool};
use crate::probe::{Namespace, ProbeReport};
use crate::reparse::ReparsePoint;
use crate::smb::credential_string;
use crate::wql::{Select, WqlValue};
use wmi::WmiThread;

/// Pool sizes, per lane (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WinHostConfig {
    /// Threads for queries and quick methods.
    pub wmi_threads: usize,
    /// Threads for disk and volume methods that do device I/O.
    pub disk_threads: usize,
    /// Threads for iSCSI methods that talk to a target.
    pub iscsi_threads: usize,
    /// Threads for SMB mapping creation.
    pub smb_threads: usize,
    /// Threads for Win32 file, volume and device calls.
    pub file_threads: usize,
    /// How many calls may wait for a thread, per pool.
    pub queue_capacity: usize,
    /// How many threads stuck in calls their callers gave up on may be replaced at a time, per pool.
    pub max_replacements: usize,
}

impl Default for WinHostConfig {
    fn default() -> Self {
        Self {
            wmi_threads: 2,
            disk_threads: 2,
            iscsi_threads: 2,
            smb_threads: 2,
            file_threads: 4,
            queue_capacity: 256,
            max_replacements: 4,
        }
    }
}

/// The facade over the real Windows host.
pub struct WinHost {
    wmi: WorkerPool<WmiThread>,
    disk: WorkerPool<WmiThread>,
    iscsi: WorkerPool<WmiThread>,
    smb: WorkerPool<WmiThread>,
    files: WorkerPool<()>,
    report: RwLock<ProbeReport>,
}

#[derive(Clone, Copy)]
enum Lane {
    Quick,
    Disk,
    Iscsi,
    Smb,
}

/// An in-parameter value, built into a COM `VARIANT` on the worker thread.
enum In {
    Str(String),
    U16(u16),
    U32(u32),
    /// uint64 goes as a decimal string (the WMI convention the `wmi` crate follows).
    U64(u64),
    Bool(bool),
    /// char16 goes as `VT_I2`.
    Char(char),
}

impl In {
    fn variant(self) -> Variant {
        match self {
            Self::Str(s) => Variant::String(s),
            Self::U16(n) => Variant::UI2(n),
            Self::U32(n) => Variant::UI4(n),
            Self::U64(n) => Variant::UI8(n),
            Self::Bool(b) => Variant::Bool(b),
            Self::Char(c) => Variant::I2(u16::try_from(u32::from(c)).unwrap_or(0) as i16),
        }
    }
}

/// In-parameters, only those given.
#[derive(Default)]
struct Params(Vec<(&'static str, In)>);

impl Params {
    fn with(mut self, name: &'static str, value: Option<In>) -> Self {
        if let Some(v) = value {
            self.0.push((name, v));
        }
        self
    }
}

fn pool_error(name: &str, e: std::io::Error) -> CallError {
    CallError::Unavailable(format!("cannot start the {name} worker threads: {e}"))
}

impl WinHost {
    /// Start the worker pools and run the start-up probe (on a WMI thread, within `ctx`). The host starts even when
    /// classes are missing: [`ProbeReport::missing_message`] says what, and calls into them are refused.
    pub fn start(config: WinHostConfig, ctx: &CallContext) -> CallResult<Self> {
        let pool = |name: &str, threads| PoolConfig {
            name: name.to_owned(),
            threads,
            queue_capacity: config.queue_capacity,
            max_replacements: config.max_replacements,
        };
        let com = Arc::new(WmiThread::new);
        let wmi_pool = |name: &str, threads| {
            WorkerPool::new(pool(name, threads), com.clone()).map_err(|e| pool_error(name, e))
        };
        let wmi = wmi_pool("winhost-wmi", config.wmi_threads)?;
        let disk = wmi_pool("winhost-disk", config.disk_threads)?;
        let iscsi = wmi_pool("winhost-iscsi", config.iscsi_threads)?;
        let smb = wmi_pool("winhost-smb", config.smb_threads)?;
        let files = WorkerPool::new(
            pool("winhost-files", config.file_threads),
            Arc::new(|| Ok(())),
        )
        .map_err(|e| pool_error("winhost-files", e))?;
        let report = wmi.run(ctx, "probe", |t| Ok(t.probe()))?;
        log_report(&report);
        Ok(Self {
            wmi,
            disk,
            iscsi,
            smb,
            files,
            report: RwLock::new(report),
        })
    }

    fn report(&self) -> ProbeReport {
        self.report
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn check(&self, ns: Namespace, class: &'static str, method: Option<&str>) -> CallResult<()> {
        let report = self.report.read().unwrap_or_else(PoisonError::into_inner);
        let present = match method {
            Some(m) => report.has_method(ns, class, m),
            None => report.has_class(ns, class),
        };
        if present {
            Ok(())
        } else {
            Err(CallError::Unsupported {
                what: match method {
                    Some(m) => format!("{ns} {class}.{m}"),
                    None => format!("{ns} {class}"),
                },
            })
        }
    }

    fn lane(&self, lane: Lane) -> &WorkerPool<WmiThread> {
        match lane {
            Lane::Quick => &self.wmi,
            Lane::Disk => &self.disk,
            Lane::Iscsi => &self.iscsi,
            Lane::Smb => &self.smb,
        }
    }

    fn select<T: Send + 'static>(
        &self,
        ctx: &CallContext,
        ns: Namespace,
        class: &'static str,
        filter: Vec<(&'static str, In)>,
        decode: fn(&IWbemClassWrapper) -> CallResult<T>,
    ) -> CallResult<Vec<T>> {
        self.check(ns, class, None)?;
        self.wmi.run(ctx, class, move |t| {
            let mut select = Select::new(class, &[]);
            for (property, value) in &filter {
                let v = match value {
                    In::Str(s) => WqlValue::Str(s),
                    In::U16(n) => WqlValue::U32(u32::from(*n)),
                    In::U32(n) => WqlValue::U32(*n),
                    In::Bool(b) => WqlValue::Bool(*b),
                    In::U64(_) | In::Char(_) => {
                        return Err(CallError::decode(class, "unsupported filter value type"));
                    }
                };
                select = select.eq(property, v);
            }
            t.select(ns, select, decode)
        })
    }

    fn associators<T: Send + 'static>(
        &self,
        ctx: &CallContext,
        of: &ObjectPath,
        assoc_class: &'static str,
        result_class: &'static str,
        decode: fn(&IWbemClassWrapper) -> CallResult<T>,
    ) -> CallResult<Vec<T>> {
        self.check(Namespace::Storage, assoc_class, None)?;
        self.check(Namespace::Storage, result_class, None)?;
        let of = of.clone();
        self.wmi.run(ctx, assoc_class, move |t| {
            t.associators(Namespace::Storage, &of, assoc_class, result_class, decode)
        })
    }

    /// Execute `qualified` (`Class.Method`) on `object` (an instance path, or `None` for a static method).
    #[allow(clippy::too_many_arguments)]
    fn call<C: ReturnCode, T: Send + 'static>(
        &self,
        ctx: &CallContext,
        lane: Lane,
        ns: Namespace,
        qualified: &'static str,
        object: Option<&ObjectPath>,
        params: Params,
        code: fn(u32) -> C,
        output: fn(&IWbemClassWrapper) -> T,
    ) -> CallResult<MethodOutcome<C, T>> {
        let (class, method) = qualified
            .split_once('.')
            .ok_or_else(|| CallError::decode(qualified, "not Class.Method"))?;
        self.check(ns, class, Some(method))?;
        let object_path = object.map_or_else(|| class.to_owned(), |p| p.as_str().to_owned());
        self.lane(lane).run(ctx, qualified, move |t| {
            let inputs = params
                .0
                .into_iter()
                .map(|(n, v)| (n, v.variant()))
                .collect();
            let out = t.exec(ns, class, &object_path, method, inputs)?;
            let value = wmi::return_value(&out, qualified)?;
            Ok(MethodOutcome::new(
                qualified,
                code(value),
                wmi::extended_status(&out),
                output(&out),
            ))
        })
    }

    fn storage<T: Send + 'static>(
        &self,
        ctx: &CallContext,
        lane: Lane,
        qualified: &'static str,
        object: Option<&ObjectPath>,
        params: Params,
        output: fn(&IWbemClassWrapper) -> T,
    ) -> CallResult<StorageOutcome<T>> {
        self.call(
            ctx,
            lane,
            Namespace::Storage,
            qualified,
            object,
            params,
            StorageReturn::from_code,
            output,
        )
    }

    fn iscsi<T: Send + 'static>(
        &self,
        ctx: &CallContext,
        lane: Lane,
        qualified: &'static str,
        object: Option<&ObjectPath>,
        params: Params,
        output: fn(&IWbemClassWrapper) -> T,
    ) -> CallResult<IscsiOutcome<T>> {
        self.call(
            ctx,
            lane,
            Namespace::Storage,
            qualified,
            object,
            params,
            IscsiStatus::from_code,
            output,
        )
    }

    fn file<T: Send + 'static>(
        &self,
        ctx: &CallContext,
        function: &'static str,
        job: impl FnOnce() -> CallResult<T> + Send + 'static,
    ) -> CallResult<T> {
        self.files.run(ctx, function, move |_| job())
    }
}

fn log_report(report: &ProbeReport) {
    if let Some(m) = report.failure_message() {
        tracing::warn!("{m}");
    } else if let Some(m) = report.missing_message() {
        tracing::warn!("{m}");
    } else {
        tracing::info!("{report}");
    }
}

fn nothing(_: &IWbemClassWrapper) {}

fn str_in(s: Option<&str>) -> Option<In> {
    s.map(|s| In::Str(s.to_owned()))
}

impl StorageWmi for WinHost {
    fn disks(&self, ctx: &CallContext, number: Option<u32>) -> CallResult<Vec<MsftDisk>> {
        let filter = number.map(|n| ("Number", In::U32(n))).into_iter().collect();
        self.select(ctx, Namespace::Storage, "MSFT_Disk", filter, wmi::disk)
    }

    fn partitions(
        &self,
        ctx: &CallContext,
        disk_number: Option<u32>,
    ) -> CallResult<Vec<MsftPartition>> {
        let filter = disk_number
            .map(|n| ("DiskNumber", In::U32(n)))
            .into_iter()
            .collect();
        self.select(
            ctx,
            Namespace::Storage,
            "MSFT_Partition",
            filter,
            wmi::partition,
        )
    }

    fn volumes(&self, ctx: &CallContext, unique_id: Option<&str>) -> CallResult<Vec<MsftVolume>> {
        let filter = unique_id
            .map(|u| ("UniqueId", In::Str(u.to_owned())))
            .into_iter()
            .collect();
        self.select(ctx, Namespace::Storage, "MSFT_Volume", filter, wmi::volume)
    }

    fn partition_volumes(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<Vec<MsftVolume>> {
        self.associators(
            ctx,
            partition,
            "MSFT_PartitionToVolume",
            "MSFT_Volume",
            wmi::volume,
        )
    }

    fn volume_partitions(
        &self,
        ctx: &CallContext,
        volume: &ObjectPath,
    ) -> CallResult<Vec<MsftPartition>> {
        self.associators(
            ctx,
            volume,
            "MSFT_PartitionToVolume",
            "MSFT_Partition",
            wmi::partition,
        )
    }

    fn disk_online(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        self.storage(
            ctx,
            Lane::Quick,
            "MSFT_Disk.Online",
            Some(disk),
            Params::default(),
            nothing,
        )
    }

    fn disk_offline(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        self.storage(
            ctx,
            Lane::Quick,
            "MSFT_Disk.Offline",
            Some(disk),
            Params::default(),
            nothing,
        )
    }

    fn disk_initialize(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        style: PartitionStyle,
    ) -> CallResult<StorageOutcome> {
        let params = Params::default().with("PartitionStyle", Some(In::U16(style.code())));
        self.storage(
            ctx,
            Lane::Disk,
            "MSFT_Disk.Initialize",
            Some(disk),
            params,
            nothing,
        )
    }

    fn disk_create_partition(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        p: &CreatePartition,
    ) -> CallResult<StorageOutcome<Option<MsftPartition>>> {
        let params = Params::default()
            .with("Size", p.size.map(In::U64))
            .with("UseMaximumSize", p.use_maximum_size.map(In::Bool))
            .with("Offset", p.offset.map(In::U64))
            .with("Alignment", p.alignment.map(In::U32))
            .with("DriveLetter", p.drive_letter.map(In::Char))
            .with("AssignDriveLetter", p.assign_drive_letter.map(In::Bool))
            .with("MbrType", p.mbr_type.map(In::U16))
            .with("GptType", str_in(p.gpt_type.as_deref()))
            .with("IsHidden", p.is_hidden.map(In::Bool))
            .with("IsActive", p.is_active.map(In::Bool));
        self.storage(
            ctx,
            Lane::Disk,
            "MSFT_Disk.CreatePartition",
            Some(disk),
            params,
            |out| wmi::out_object(out, "CreatedPartition", wmi::partition),
        )
    }

    fn disk_set_attributes(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        a: &DiskAttributes,
    ) -> CallResult<StorageOutcome> {
        let params = Params::default()
            .with("IsReadOnly", a.is_read_only.map(In::Bool))
            .with("Signature", a.signature.map(In::U32))
            .with("Guid", str_in(a.guid.as_deref()));
        self.storage(
            ctx,
            Lane::Quick,
            "MSFT_Disk.SetAttributes",
            Some(disk),
            params,
            nothing,
        )
    }

    fn disk_refresh(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        self.storage(
            ctx,
            Lane::Quick,
            "MSFT_Disk.Refresh",
            Some(disk),
            Params::default(),
            nothing,
        )
    }

    fn partition_online(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<StorageOutcome> {
        self.storage(
            ctx,
            Lane::Quick,
            "MSFT_Partition.Online",
            Some(partition),
            Params::default(),
            nothing,
        )
    }

    fn partition_supported_size(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<StorageOutcome<Option<SupportedSize>>> {
        self.storage(
            ctx,
            Lane::Disk,
            "MSFT_Partition.GetSupportedSize",
            Some(partition),
            Params::default(),
            wmi::supported_size,
        )
    }

    fn partition_resize(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
        size: u64,
    ) -> CallResult<StorageOutcome> {
        let params = Params::default().with("Size", Some(In::U64(size)));
        self.storage(
            ctx,
            Lane::Disk,
            "MSFT_Partition.Resize",
            Some(partition),
            params,
            nothing,
        )
    }

    fn volume_format(
        &self,
        ctx: &CallContext,
        volume: &ObjectPath,
        f: &FormatVolume,
    ) -> CallResult<StorageOutcome<Option<MsftVolume>>> {
        let params = Params::default()
            .with("FileSystem", str_in(f.file_system.as_deref()))
            .with("FileSystemLabel", str_in(f.file_system_label.as_deref()))
            .with("AllocationUnitSize", f.allocation_unit_size.map(In::U32))
            .with("Full", f.full.map(In::Bool))
            .with("Force", f.force.map(In::Bool));
        self.storage(
            ctx,
            Lane::Disk,
            "MSFT_Volume.Format",
            Some(volume),
            params,
            |out| wmi::out_object(out, "FormattedVolume", wmi::volume),
        )
    }

    fn volume_flush(&self, ctx: &CallContext, volume: &ObjectPath) -> CallResult<StorageOutcome> {
        self.storage(
            ctx,
            Lane::Disk,
            "MSFT_Volume.Flush",
            Some(volume),
            Params::default(),
            nothing,
        )
    }

    fn storage_setting(
        &self,
        ctx: &CallContext,
    ) -> CallResult<StorageOutcome<Option<MsftStorageSetting>>> {
        self.storage(
            ctx,
            Lane::Quick,
            "MSFT_StorageSetting.Get",
            None,
            Params::default(),
            |out| wmi::out_object(out, "StorageSettings", wmi::storage_setting),
        )
    }

    fn update_host_storage_cache(&self, ctx: &CallContext) -> CallResult<StorageOutcome> {
        self.storage(
            ctx,
            Lane::Disk,
            "MSFT_StorageSetting.UpdateHostStorageCache",
            None,
            Params::default(),
            nothing,
        )
    }

    /// Not in the start-up probe (the Multipath-IO feature is optional): queried directly, and a class Windows
    /// says does not exist (`WBEM_E_INVALID_CLASS`, `WBEM_E_NOT_FOUND`: `probe::is_absence`) is `None`. Under Wine
    /// a query of an unknown class answers no rows (reference §4): no claim, which refuses multipath as safely.
    fn msdsm_supported_hw(
        &self,
        ctx: &CallContext,
    ) -> CallResult<Option<Vec<MsftMsdsmSupportedHw>>> {
        const CLASS: &str = "MSFT_MSDSMSupportedHW";
        let rows = self.wmi.run(ctx, CLASS, move |t| {
            t.select(
                Namespace::Storage,
                Select::new(CLASS, &["VendorId", "ProductId"]),
                wmi::msdsm_supported_hw,
            )
        });
        match rows {
            Ok(rows) => Ok(Some(rows)),
            Err(CallError::Wmi { hresult, .. }) if crate::probe::is_absence(hresult) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl IscsiWmi for WinHost {
    fn target_portals(
        &self,
        ctx: &CallContext,
        portal: Option<(&str, u16)>,
    ) -> CallResult<Vec<MsftIscsiTargetPortal>> {
        let filter = match portal {
            Some((address, port)) => vec![
                ("TargetPortalAddress", In::Str(address.to_owned())),
                ("TargetPortalPortNumber", In::U16(port)),
            ],
            None => Vec::new(),
        };
        self.select(
            ctx,
            Namespace::Storage,
            "MSFT_iSCSITargetPortal",
            filter,
            wmi::target_portal,
        )
    }

    fn target_portal_new(
        &self,
        ctx: &CallContext,
        p: &NewTargetPortal<'_>,
    ) -> CallResult<IscsiOutcome<Option<MsftIscsiTargetPortal>>> {
        let params = Params::default()
            .with("TargetPortalAddress", str_in(Some(p.target_portal_address)))
            .with(
                "TargetPortalPortNumber",
                Some(In::U16(p.target_portal_port_number)),
            )
            .with("InitiatorPortalAddress", str_in(p.initiator_portal_address))
            .with(
                "AuthenticationType",
                p.authentication_type
                    .map(|a| In::Str(a.as_wmi().to_owned())),
            )
            .with("ChapUsername", str_in(p.chap.map(|c| c.username)))
            .with("ChapSecret", str_in(p.chap.map(|c| c.secret)));
        self.iscsi(
            ctx,
            Lane::Iscsi,
            "MSFT_iSCSITargetPortal.New",
            None,
            params,
            |out| wmi::out_object(out, "CreatedTargetPortal", wmi::target_portal),
        )
    }

    fn target_portal_update(
        &self,
        ctx: &CallContext,
        portal: &MsftIscsiTargetPortal,
    ) -> CallResult<IscsiOutcome> {
        self.iscsi(
            ctx,
            Lane::Iscsi,
            "MSFT_iSCSITargetPortal.Update",
            Some(&portal.path),
            portal_params(portal),
            nothing,
        )
    }

    fn target_portal_remove(
        &self,
        ctx: &CallContext,
        portal: &MsftIscsiTargetPortal,
    ) -> CallResult<IscsiOutcome> {
        self.iscsi(
            ctx,
            Lane::Iscsi,
            "MSFT_iSCSITargetPortal.Remove",
            Some(&portal.path),
            portal_params(portal),
            nothing,
        )
    }

    fn portal_targets(
        &self,
        ctx: &CallContext,
        portal: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiTarget>> {
        self.associators(
            ctx,
            portal,
            "MSFT_iSCSITargetToiSCSITargetPortal",
            "MSFT_iSCSITarget",
            wmi::target,
        )
    }

    fn targets(&self, ctx: &CallContext) -> CallResult<Vec<MsftIscsiTarget>> {
        self.select(
            ctx,
            Namespace::Storage,
            "MSFT_iSCSITarget",
            Vec::new(),
            wmi::target,
        )
    }

    fn target_connect(
        &self,
        ctx: &CallContext,
        p: &ConnectTarget<'_>,
    ) -> CallResult<IscsiOutcome<Option<MsftIscsiSession>>> {
        let params = Params::default()
            .with("NodeAddress", str_in(Some(p.node_address)))
            .with("TargetPortalAddress", str_in(p.target_portal_address))
            .with(
                "TargetPortalPortNumber",
                p.target_portal_port_number.map(In::U16),
            )
            .with("InitiatorPortalAddress", str_in(p.initiator_portal_address))
            .with(
                "AuthenticationType",
                Some(In::Str(p.authentication_type.as_wmi().to_owned())),
            )
            .with("ChapUsername", str_in(p.chap.map(|c| c.username)))
            .with("ChapSecret", str_in(p.chap.map(|c| c.secret)))
            .with("IsPersistent", p.is_persistent.map(In::Bool))
            .with("IsMultipathEnabled", p.is_multipath_enabled.map(In::Bool));
        self.iscsi(
            ctx,
            Lane::Iscsi,
            "MSFT_iSCSITarget.Connect",
            None,
            params,
            |out| wmi::out_object(out, "CreatediSCSISession", wmi::session),
        )
    }

    fn target_disconnect(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
        session_identifier: &str,
    ) -> CallResult<IscsiOutcome> {
        let params = Params::default().with("SessionIdentifier", str_in(Some(session_identifier)));
        self.iscsi(
            ctx,
            Lane::Iscsi,
            "MSFT_iSCSITarget.Disconnect",
            Some(target),
            params,
            nothing,
        )
    }

    fn target_sessions(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiSession>> {
        self.associators(
            ctx,
            target,
            "MSFT_iSCSITargetToiSCSISession",
            "MSFT_iSCSISession",
            wmi::session,
        )
    }

    fn sessions(&self, ctx: &CallContext) -> CallResult<Vec<MsftIscsiSession>> {
        self.select(
            ctx,
            Namespace::Storage,
            "MSFT_iSCSISession",
            Vec::new(),
            wmi::session,
        )
    }

    fn session_disks(&self, ctx: &CallContext, session: &ObjectPath) -> CallResult<Vec<MsftDisk>> {
        self.associators(
            ctx,
            session,
            "MSFT_iSCSISessionToDisk",
            "MSFT_Disk",
            wmi::disk,
        )
    }

    fn target_connections(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiConnection>> {
        self.associators(
            ctx,
            target,
            "MSFT_iSCSITargetToiSCSIConnection",
            "MSFT_iSCSIConnection",
            wmi::connection,
        )
    }

    fn connection_disks(
        &self,
        ctx: &CallContext,
        connection: &ObjectPath,
    ) -> CallResult<Vec<MsftDisk>> {
        self.associators(
            ctx,
            connection,
            "MSFT_iSCSIConnectionToDisk",
            "MSFT_Disk",
            wmi::disk,
        )
    }

    fn session_unregister(
        &self,
        ctx: &CallContext,
        session: &ObjectPath,
    ) -> CallResult<IscsiOutcome> {
        self.iscsi(
            ctx,
            Lane::Quick,
            "MSFT_iSCSISession.Unregister",
            Some(session),
            Params::default(),
            nothing,
        )
    }

    fn session_register(
        &self,
        ctx: &CallContext,
        session: &ObjectPath,
        p: &RegisterSession<'_>,
    ) -> CallResult<IscsiOutcome> {
        let params = Params::default()
            .with("IsMultipathEnabled", p.is_multipath_enabled.map(In::Bool))
            .with("ChapUsername", str_in(p.chap.map(|c| c.username)))
            .with("ChapSecret", str_in(p.chap.map(|c| c.secret)));
        self.iscsi(
            ctx,
            Lane::Quick,
            "MSFT_iSCSISession.Register",
            Some(session),
            params,
            nothing,
        )
    }

    fn set_chap_secret(&self, ctx: &CallContext, secret: &str) -> CallResult<IscsiOutcome> {
        let params = Params::default().with("ChapSecret", str_in(Some(secret)));
        self.iscsi(
            ctx,
            Lane::Quick,
            "MSFT_iSCSISession.SetCHAPSecret",
            None,
            params,
            nothing,
        )
    }

    fn initiator_ports(&self, ctx: &CallContext) -> CallResult<Vec<MsftInitiatorPort>> {
        self.select(
            ctx,
            Namespace::Storage,
            "MSFT_InitiatorPort",
            Vec::new(),
            wmi::initiator_port,
        )
    }
}

/// The in-parameters `MSFT_iSCSITargetPortal.Update` and `.Remove` take: the portal's own (the initiator ones only
/// when set).
fn portal_params(portal: &MsftIscsiTargetPortal) -> Params {
    Params::default()
        .with(
            "InitiatorInstanceName",
            str_in(portal.initiator_instance_name.as_deref()),
        )
        .with(
            "InitiatorPortalAddress",
            str_in(portal.initiator_portal_address.as_deref()),
        )
        .with(
            "TargetPortalAddress",
            str_in(Some(&portal.target_portal_address)),
        )
        .with(
            "TargetPortalPortNumber",
            Some(In::U16(portal.target_portal_port_number)),
        )
}

impl SmbWmi for WinHost {
    fn global_mappings(&self, ctx: &CallContext) -> CallResult<Vec<SmbGlobalMapping>> {
        self.select(
            ctx,
            Namespace::Smb,
            "MSFT_SmbGlobalMapping",
            Vec::new(),
            wmi::smb_mapping,
        )
    }

    fn global_mappings_of(
        &self,
        ctx: &CallContext,
        remote_path: &str,
    ) -> CallResult<Vec<SmbGlobalMapping>> {
        self.select(
            ctx,
            Namespace::Smb,
            "MSFT_SmbGlobalMapping",
            vec![("RemotePath", In::Str(remote_path.to_owned()))],
            wmi::smb_mapping,
        )
    }

    fn global_mapping_create(
        &self,
        ctx: &CallContext,
        p: &SmbGlobalMappingCreate<'_>,
    ) -> CallResult<SmbOutcome<Option<SmbGlobalMapping>>> {
        let params = Params::default()
            .with("RemotePath", str_in(Some(p.remote_path)))
            .with("LocalPath", str_in(p.local_path))
            .with(
                "Credential",
                p.user_name
                    .map(|u| In::Str(credential_string(u, p.password))),
            )
            .with("Persistent", p.persistent.map(In::Bool))
            .with("RequirePrivacy", p.require_privacy.map(In::Bool))
            .with("RequireIntegrity", p.require_integrity.map(In::Bool))
            .with("UseWriteThrough", p.use_write_through.map(In::Bool))
            // Windows Server 2025's parameters: passed only when asked (the driver checks the node's build first).
            .with(
                "CompressNetworkTraffic",
                p.compress_network_traffic.map(In::Bool),
            )
            .with("TransportType", p.transport_type.map(|t| In::U32(t.code())))
            .with("BlockNTLM", p.block_ntlm.map(In::Bool));
        self.call(
            ctx,
            Lane::Smb,
            Namespace::Smb,
            "MSFT_SmbGlobalMapping.Create",
            None,
            params,
            SmbReturn,
            |out| wmi::out_object(out, "CreatedMapping", wmi::smb_mapping),
        )
    }

    fn global_mapping_remove(
        &self,
        ctx: &CallContext,
        mapping: &ObjectPath,
        force: bool,
    ) -> CallResult<SmbOutcome> {
        let params = Params::default().with("Force", Some(In::Bool(force)));
        self.call(
            ctx,
            Lane::Quick,
            Namespace::Smb,
            "MSFT_SmbGlobalMapping.Remove",
            Some(mapping),
            params,
            SmbReturn,
            nothing,
        )
    }
}

impl Win32Files for WinHost {
    fn create_directory(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        let path = path.to_owned();
        self.file(ctx, "CreateDirectoryW", move || {
            files::create_directory(&path)
        })
    }

    fn remove_directory(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        let path = path.to_owned();
        self.file(ctx, "RemoveDirectoryW", move || {
            files::remove_directory(&path)
        })
    }

    fn delete_file(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        let path = path.to_owned();
        self.file(ctx, "DeleteFileW", move || files::delete_file(&path))
    }

    fn remove_tree(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        let path = path.to_owned();
        self.file(ctx, "RemoveDirectoryTree", move || {
            files::remove_tree(&path)
        })
    }

    fn create_symbolic_link(
        &self,
        ctx: &CallContext,
        link: &str,
        target: &str,
        flags: SymlinkFlags,
    ) -> CallResult<()> {
        let (link, target) = (link.to_owned(), target.to_owned());
        self.file(ctx, "CreateSymbolicLinkW", move || {
            files::create_symbolic_link(&link, &target, flags)
        })
    }

    fn file_attributes(&self, ctx: &CallContext, path: &str) -> CallResult<FileAttributes> {
        let path = path.to_owned();
        self.file(ctx, "GetFileAttributesW", move || {
            files::file_attributes(&path)
        })
    }

    fn attribute_tag(&self, ctx: &CallContext, path: &str) -> CallResult<AttributeTag> {
        let path = path.to_owned();
        self.file(ctx, "GetFileInformationByHandleEx", move || {
            files::attribute_tag(&path)
        })
    }

    fn read_reparse_point(&self, ctx: &CallContext, path: &str) -> CallResult<ReparsePoint> {
        let path = path.to_owned();
        self.file(ctx, "FSCTL_GET_REPARSE_POINT", move || {
            files::read_reparse_point(&path)
        })
    }

    fn final_path_name(
        &self,
        ctx: &CallContext,
        path: &str,
        kind: VolumeNameKind,
    ) -> CallResult<String> {
        let path = path.to_owned();
        self.file(ctx, "GetFinalPathNameByHandleW", move || {
            files::final_path_name(&path, kind)
        })
    }

    fn set_volume_mount_point(
        &self,
        ctx: &CallContext,
        mount_point: &str,
        volume: &VolumeGuidPath,
    ) -> CallResult<()> {
        let (mount_point, volume) = (mount_point.to_owned(), volume.clone());
        self.file(ctx, "SetVolumeMountPointW", move || {
            files::set_volume_mount_point(&mount_point, &volume)
        })
    }

    fn delete_volume_mount_point(&self, ctx: &CallContext, mount_point: &str) -> CallResult<()> {
        let mount_point = mount_point.to_owned();
        self.file(ctx, "DeleteVolumeMountPointW", move || {
            files::delete_volume_mount_point(&mount_point)
        })
    }

    fn volume_name_for_mount_point(
        &self,
        ctx: &CallContext,
        mount_point: &str,
    ) -> CallResult<VolumeGuidPath> {
        let mount_point = mount_point.to_owned();
        self.file(ctx, "GetVolumeNameForVolumeMountPointW", move || {
            files::volume_name_for_mount_point(&mount_point)
        })
    }

    fn volume_path_name(&self, ctx: &CallContext, path: &str) -> CallResult<String> {
        let path = path.to_owned();
        self.file(ctx, "GetVolumePathNameW", move || {
            files::volume_path_name(&path)
        })
    }

    fn volume_path_names(
        &self,
        ctx: &CallContext,
        volume: &VolumeGuidPath,
    ) -> CallResult<Vec<String>> {
        let volume = volume.clone();
        self.file(ctx, "GetVolumePathNamesForVolumeNameW", move || {
            files::volume_path_names(&volume)
        })
    }

    fn volume_information(&self, ctx: &CallContext, root: &str) -> CallResult<VolumeInformation> {
        let root = root.to_owned();
        self.file(ctx, "GetVolumeInformationW", move || {
            files::volume_information(&root)
        })
    }

    fn disk_free_space(&self, ctx: &CallContext, path: &str) -> CallResult<FreeSpace> {
        let path = path.to_owned();
        self.file(ctx, "GetDiskFreeSpaceExW", move || {
            files::disk_free_space(&path)
        })
    }

    fn flush_volume(&self, ctx: &CallContext, volume: &VolumeGuidPath) -> CallResult<()> {
        let volume = volume.clone();
        self.file(ctx, "FlushFileBuffers", move || {
            files::flush_volume(&volume)
        })
    }

    fn storage_device_number(
        &self,
        ctx: &CallContext,
        device: &str,
    ) -> CallResult<StorageDeviceNumber> {
        let device = device.to_owned();
        self.file(ctx, "IOCTL_STORAGE_GET_DEVICE_NUMBER", move || {
            files::storage_device_number(&device)
        })
    }

    fn storage_device_identifiers(
        &self,
        ctx: &CallContext,
        device: &str,
    ) -> CallResult<Vec<StorageIdentifier>> {
        let device = device.to_owned();
        self.file(ctx, "IOCTL_STORAGE_QUERY_PROPERTY", move || {
            files::storage_device_identifiers(&device)
        })
    }

    fn read_device(
        &self,
        ctx: &CallContext,
        device: &str,
        head: u64,
        tail: u64,
    ) -> CallResult<DeviceBytes> {
        let device = device.to_owned();
        self.file(ctx, "ReadFile", move || {
            files::read_device(&device, head, tail)
        })
    }
}

impl Capabilities for WinHost {
    fn probe_report(&self) -> ProbeReport {
        self.report()
    }

    fn reprobe(&self, ctx: &CallContext) -> CallResult<ProbeReport> {
        let report = self.wmi.run(ctx, "probe", |t| Ok(t.probe()))?;
        log_report(&report);
        *self.report.write().unwrap_or_else(PoisonError::into_inner) = report.clone();
        Ok(report)
    }

    fn lanes(&self) -> Vec<PoolStatus> {
        vec![
            self.wmi.status(),
            self.disk.status(),
            self.iscsi.status(),
            self.smb.status(),
            self.files.status(),
        ]
    }
}
