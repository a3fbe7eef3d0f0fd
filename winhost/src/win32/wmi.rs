//! The WMI side: a worker thread's COM context (apartment and lazily opened connections), the query and method-call
//! helpers, and the decoding of WMI objects (and of the error objects of failed calls) into the facade's data types.
//! Safe code over `services.rs` (the `IWbemServices` calls) and the `wmi` crate's object wrapper.

use wmi::{IWbemClassWrapper, Variant, WMIError};

use super::com::Apartment;
use super::services::{Failure, Services};
use crate::codes::{
    BusType, CimStatusCode, DiskOperationalStatus, FileSystemType, HResult, HResultCode,
    NewDiskPolicy, OfflineReason, PartitionStyle, SmbMappingStatus, UniqueIdFormat,
};
use crate::error::{CallError, CallResult};
use crate::error_object::ErrorObject;
use crate::method::ExtendedStatus;
use crate::model::{
    MsftDisk, MsftInitiatorPort, MsftIscsiConnection, MsftIscsiSession, MsftIscsiTarget,
    MsftIscsiTargetPortal, MsftMsdsmSupportedHw, MsftPartition, MsftStorageSetting, MsftVolume,
    ObjectPath, SmbGlobalMapping, SupportedSize,
};
use crate::probe::{Namespace, ProbeReport};
use crate::wql::{self, Select};

/// A COM worker thread's context. Field order matters: the connections are released before the apartment is left.
pub(crate) struct WmiThread {
    storage: Option<Services>,
    smb: Option<Services>,
    _apartment: Apartment,
}

/// A method's in-parameters: name and value, only those the caller set.
pub(crate) type Inputs = Vec<(&'static str, Variant)>;

fn hresult_of(e: &WMIError) -> Option<HResult> {
    match e {
        WMIError::HResultError { hres } => Some(HResult::from_i32(*hres)),
        _ => None,
    }
}

fn wmi_error(call: &str, e: WMIError) -> CallError {
    match hresult_of(&e) {
        Some(h) => CallError::wmi(call, h),
        None => CallError::decode(call, e.to_string()),
    }
}

/// A failed COM call as the facade's error, with its error object decoded.
fn com_error(call: &str, f: Failure) -> CallError {
    let mut object = f.object.as_ref().map(error_object).unwrap_or_default();
    if object.message.is_none() {
        object.message = f.description;
    }
    CallError::wmi_with(call, f.hresult, object)
}

impl WmiThread {
    /// Join the MTA on this thread. Connections are opened on first use.
    pub(crate) fn new() -> Result<Self, String> {
        let apartment = Apartment::enter_mta()
            .map_err(|h| format!("CoInitializeEx(COINIT_MULTITHREADED) failed: {h}"))?;
        Ok(Self {
            storage: None,
            smb: None,
            _apartment: apartment,
        })
    }

    fn slot(&mut self, ns: Namespace) -> &mut Option<Services> {
        match ns {
            Namespace::Storage => &mut self.storage,
            Namespace::Smb => &mut self.smb,
        }
    }

    fn connection(&mut self, ns: Namespace) -> CallResult<&mut Services> {
        let slot = self.slot(ns);
        if slot.is_none() {
            let conn = Services::connect(ns.path())
                .map_err(|f| com_error(&format!("ConnectServer {}", ns.path()), f))?;
            *slot = Some(conn);
        }
        Ok(slot.as_mut().expect("connected above"))
    }

    /// Drop the namespace's connection after an error that says it is dead, so the next call reconnects (reference
    /// §1.3, "Reconnecting").
    fn note(&mut self, ns: Namespace, err: &CallError) {
        if let CallError::Wmi { hresult, .. } = err
            && matches!(
                hresult.code(),
                HResultCode::RpcEDisconnected
                    | HResultCode::RpcSServerUnavailable
                    | HResultCode::WbemEShuttingDown
                    | HResultCode::WbemETransportFailure
            )
        {
            tracing::info!(namespace = ns.path(), %hresult, "WMI connection lost; reconnecting on the next call");
            *self.slot(ns) = None;
        }
    }

    fn objects(&mut self, ns: Namespace, query: &str) -> CallResult<Vec<IWbemClassWrapper>> {
        let result = self
            .connection(ns)
            .and_then(|conn| conn.query(query).map_err(|f| com_error(query, f)));
        if let Err(e) = &result {
            self.note(ns, e);
        }
        result
    }

    /// Run a `SELECT` and decode every row.
    pub(crate) fn select<T>(
        &mut self,
        ns: Namespace,
        select: Select<'_>,
        decode: impl Fn(&IWbemClassWrapper) -> CallResult<T>,
    ) -> CallResult<Vec<T>> {
        let query = select
            .build()
            .map_err(|e| CallError::decode("building a WQL query", e.to_string()))?;
        self.objects(ns, &query)?.iter().map(decode).collect()
    }

    /// Run an `ASSOCIATORS OF` and decode every row.
    pub(crate) fn associators<T>(
        &mut self,
        ns: Namespace,
        of: &ObjectPath,
        assoc_class: &'static str,
        result_class: &'static str,
        decode: impl Fn(&IWbemClassWrapper) -> CallResult<T>,
    ) -> CallResult<Vec<T>> {
        let query = wql::associators_of(of, assoc_class, result_class)
            .map_err(|e| CallError::decode("building a WQL query", e.to_string()))?;
        self.objects(ns, &query)?.iter().map(decode).collect()
    }

    /// `ExecMethod`: `object_path` is the instance's `__PATH`, or the class name for a static method. In-parameters are
    /// put on an instance of the method's input signature, taken from the class definition this connection fetched
    /// once. A failure keeps the error object the provider attached.
    pub(crate) fn exec(
        &mut self,
        ns: Namespace,
        class: &'static str,
        object_path: &str,
        method: &'static str,
        inputs: Inputs,
    ) -> CallResult<IWbemClassWrapper> {
        let call = format!("ExecMethod {class}.{method}");
        let result = (|| -> CallResult<IWbemClassWrapper> {
            let conn = self.connection(ns)?;
            let signature = conn
                .class(class)
                .map_err(|f| com_error(&call, f))?
                .get_method(method)
                .map_err(|e| wmi_error(&call, e))?;
            let in_params = match signature {
                Some(signature) => {
                    let instance = signature
                        .spawn_instance()
                        .map_err(|e| wmi_error(&call, e))?;
                    for (name, value) in inputs {
                        instance
                            .put_property(name, value)
                            .map_err(|e| wmi_error(&format!("{call} (in-parameter {name})"), e))?;
                    }
                    Some(instance)
                }
                None if inputs.is_empty() => None,
                None => {
                    return Err(CallError::decode(
                        &call,
                        "the method takes no in-parameters",
                    ));
                }
            };
            conn.exec(object_path, method, in_params.as_ref())
                .map_err(|f| com_error(&call, f))?
                .ok_or_else(|| CallError::decode(&call, "no out-parameters (no ReturnValue)"))
        })();
        if let Err(e) = &result {
            self.note(ns, e);
        }
        result
    }

    /// The probe: open each namespace, then fetch each required class and method signature. Nothing is executed
    /// (reference §4: executing a method of a missing class crashes under Wine). A namespace that could not be
    /// opened is tried again on the next probe (and by the next call).
    pub(crate) fn probe(&mut self) -> ProbeReport {
        let mut connect_errors = Vec::new();
        for ns in Namespace::ALL {
            if let Err(e) = self.connection(ns) {
                let h = match e {
                    CallError::Wmi { hresult, .. } => hresult,
                    _ => HResult(HResultCode::WbemEFailed.code()),
                };
                connect_errors.push((ns, h));
            }
        }
        ProbeReport::from_lookup(
            |ns| {
                connect_errors
                    .iter()
                    .find(|(n, _)| *n == ns)
                    .map(|(_, h)| *h)
            },
            |ns, req| {
                let Some(conn) = self.slot(ns).as_mut() else {
                    return Err(HResult(HResultCode::WbemEFailed.code()));
                };
                let class = conn.class(req.class).map_err(|f| f.hresult)?;
                Ok(req
                    .methods
                    .iter()
                    .copied()
                    .filter(|m| class.get_method(m).is_err())
                    .collect())
            },
        )
    }
}

// ---- Reading properties ----

/// A property's value; `None` when NULL/empty or when the object has no such property (older Windows releases lack
/// some, e.g. `MSFT_Partition.Offset` before Windows 10).
fn get(o: &IWbemClassWrapper, name: &str) -> CallResult<Option<Variant>> {
    match o.get_property(name) {
        Ok(Variant::Null | Variant::Empty) => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(e) if hresult_of(&e).map(HResult::code) == Some(HResultCode::WbemENotFound) => Ok(None),
        Err(e) => Err(wmi_error(&format!("reading property {name}"), e)),
    }
}

fn as_u64(v: &Variant) -> Option<u64> {
    match *v {
        Variant::UI1(n) => Some(n.into()),
        Variant::UI2(n) => Some(n.into()),
        Variant::UI4(n) => Some(n.into()),
        Variant::UI8(n) => Some(n),
        Variant::I1(n) => u64::try_from(n).ok(),
        Variant::I2(n) => u64::try_from(n).ok(),
        Variant::I4(n) => u64::try_from(n).ok(),
        Variant::I8(n) => u64::try_from(n).ok(),
        Variant::String(ref s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn bad(name: &str, v: &Variant) -> CallError {
    CallError::decode(
        format!("reading property {name}"),
        format!("unexpected value {v:?}"),
    )
}

fn opt_u64(o: &IWbemClassWrapper, name: &str) -> CallResult<Option<u64>> {
    get(o, name)?
        .map(|v| as_u64(&v).ok_or_else(|| bad(name, &v)))
        .transpose()
}

fn opt_u32(o: &IWbemClassWrapper, name: &str) -> CallResult<Option<u32>> {
    opt_u64(o, name)?
        .map(|n| {
            u32::try_from(n).map_err(|_| {
                CallError::decode(
                    format!("reading property {name}"),
                    format!("{n} out of range"),
                )
            })
        })
        .transpose()
}

fn opt_u16(o: &IWbemClassWrapper, name: &str) -> CallResult<Option<u16>> {
    opt_u64(o, name)?
        .map(|n| {
            u16::try_from(n).map_err(|_| {
                CallError::decode(
                    format!("reading property {name}"),
                    format!("{n} out of range"),
                )
            })
        })
        .transpose()
}

fn required<T>(name: &str, v: Option<T>) -> CallResult<T> {
    v.ok_or_else(|| CallError::decode(format!("reading property {name}"), "missing"))
}

fn u32_of(o: &IWbemClassWrapper, name: &str) -> CallResult<u32> {
    required(name, opt_u32(o, name)?)
}

fn u64_of(o: &IWbemClassWrapper, name: &str) -> CallResult<u64> {
    Ok(opt_u64(o, name)?.unwrap_or(0))
}

fn opt_bool(o: &IWbemClassWrapper, name: &str) -> CallResult<Option<bool>> {
    get(o, name)?
        .map(|v| match v {
            Variant::Bool(b) => Ok(b),
            other => Err(bad(name, &other)),
        })
        .transpose()
}

fn bool_of(o: &IWbemClassWrapper, name: &str) -> CallResult<bool> {
    Ok(opt_bool(o, name)?.unwrap_or(false))
}

fn opt_string(o: &IWbemClassWrapper, name: &str) -> CallResult<Option<String>> {
    get(o, name)?
        .map(|v| match v {
            Variant::String(s) => Ok(s),
            other => Err(bad(name, &other)),
        })
        .transpose()
}

fn string_of(o: &IWbemClassWrapper, name: &str) -> CallResult<String> {
    required(name, opt_string(o, name)?)
}

fn strings_of(o: &IWbemClassWrapper, name: &str) -> CallResult<Vec<String>> {
    match get(o, name)? {
        None => Ok(Vec::new()),
        Some(Variant::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Variant::String(s) => Ok(s),
                other => Err(bad(name, &other)),
            })
            .collect(),
        Some(Variant::String(s)) => Ok(vec![s]),
        Some(other) => Err(bad(name, &other)),
    }
}

/// `OperationalStatus` as a list, whether the provider returns an array or a single value (unverified which).
fn u16s_of(o: &IWbemClassWrapper, name: &str) -> CallResult<Vec<u16>> {
    let one = |v: &Variant| {
        as_u64(v)
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| bad(name, v))
    };
    match get(o, name)? {
        None => Ok(Vec::new()),
        Some(Variant::Array(items)) => items.iter().map(one).collect(),
        Some(v) => Ok(vec![one(&v)?]),
    }
}

fn path_of(o: &IWbemClassWrapper) -> CallResult<ObjectPath> {
    let path = match opt_string(o, "__PATH")? {
        Some(p) if !p.is_empty() => p,
        _ => string_of(o, "__RELPATH")?,
    };
    Ok(ObjectPath::new(path))
}

fn object(o: &IWbemClassWrapper, name: &str) -> CallResult<Option<IWbemClassWrapper>> {
    match get(o, name)? {
        None => Ok(None),
        Some(Variant::Object(obj)) => Ok(Some(obj)),
        Some(Variant::Unknown(u)) => u
            .to_wbem_class_obj()
            .map(Some)
            .map_err(|e| wmi_error(name, e)),
        Some(other) => Err(bad(name, &other)),
    }
}

// ---- Decoders: WMI objects to the facade's types ----

pub(crate) fn disk(o: &IWbemClassWrapper) -> CallResult<MsftDisk> {
    Ok(MsftDisk {
        path: path_of(o)?,
        number: u32_of(o, "Number")?,
        device_path: opt_string(o, "Path")?,
        location: opt_string(o, "Location")?,
        unique_id: opt_string(o, "UniqueId")?,
        unique_id_format: opt_u16(o, "UniqueIdFormat")?.map(UniqueIdFormat::from_code),
        serial_number: opt_string(o, "SerialNumber")?,
        size: u64_of(o, "Size")?,
        logical_sector_size: opt_u32(o, "LogicalSectorSize")?,
        number_of_partitions: opt_u32(o, "NumberOfPartitions")?,
        partition_style: opt_u16(o, "PartitionStyle")?.map(PartitionStyle::from_code),
        bus_type: opt_u16(o, "BusType")?.map(BusType::from_code),
        is_offline: bool_of(o, "IsOffline")?,
        offline_reason: opt_u16(o, "OfflineReason")?.map(OfflineReason::from_code),
        is_read_only: bool_of(o, "IsReadOnly")?,
        is_system: bool_of(o, "IsSystem")?,
        is_boot: bool_of(o, "IsBoot")?,
        operational_status: u16s_of(o, "OperationalStatus")?
            .into_iter()
            .map(DiskOperationalStatus::from_code)
            .collect(),
    })
}

pub(crate) fn partition(o: &IWbemClassWrapper) -> CallResult<MsftPartition> {
    Ok(MsftPartition {
        path: path_of(o)?,
        disk_number: u32_of(o, "DiskNumber")?,
        partition_number: u32_of(o, "PartitionNumber")?,
        offset: opt_u64(o, "Offset")?,
        size: u64_of(o, "Size")?,
        gpt_type: opt_string(o, "GptType")?,
        mbr_type: opt_u16(o, "MbrType")?,
        access_paths: strings_of(o, "AccessPaths")?,
        is_read_only: bool_of(o, "IsReadOnly")?,
        is_offline: bool_of(o, "IsOffline")?,
        is_hidden: bool_of(o, "IsHidden")?,
    })
}

pub(crate) fn volume(o: &IWbemClassWrapper) -> CallResult<MsftVolume> {
    Ok(MsftVolume {
        path: path_of(o)?,
        unique_id: string_of(o, "UniqueId")?,
        volume_path: opt_string(o, "Path")?,
        drive_letter: opt_string(o, "DriveLetter")?
            .and_then(|s| s.chars().next())
            .filter(|c| *c != '\0'),
        file_system: opt_string(o, "FileSystem")?,
        file_system_label: opt_string(o, "FileSystemLabel")?,
        file_system_type: FileSystemType::from_code(opt_u16(o, "FileSystemType")?.unwrap_or(0)),
        size: u64_of(o, "Size")?,
        size_remaining: u64_of(o, "SizeRemaining")?,
        health_status: opt_u16(o, "HealthStatus")?,
    })
}

pub(crate) fn msdsm_supported_hw(o: &IWbemClassWrapper) -> CallResult<MsftMsdsmSupportedHw> {
    Ok(MsftMsdsmSupportedHw {
        vendor_id: string_of(o, "VendorId")?,
        product_id: string_of(o, "ProductId")?,
    })
}

pub(crate) fn storage_setting(o: &IWbemClassWrapper) -> CallResult<MsftStorageSetting> {
    Ok(MsftStorageSetting {
        new_disk_policy: opt_u16(o, "NewDiskPolicy")?.map(NewDiskPolicy::from_code),
    })
}

pub(crate) fn target_portal(o: &IWbemClassWrapper) -> CallResult<MsftIscsiTargetPortal> {
    Ok(MsftIscsiTargetPortal {
        path: path_of(o)?,
        target_portal_address: string_of(o, "TargetPortalAddress")?,
        target_portal_port_number: required(
            "TargetPortalPortNumber",
            opt_u16(o, "TargetPortalPortNumber")?,
        )?,
        initiator_instance_name: opt_string(o, "InitiatorInstanceName")?,
        initiator_portal_address: opt_string(o, "InitiatorPortalAddress")?,
    })
}

pub(crate) fn target(o: &IWbemClassWrapper) -> CallResult<MsftIscsiTarget> {
    Ok(MsftIscsiTarget {
        path: path_of(o)?,
        node_address: string_of(o, "NodeAddress")?,
        is_connected: bool_of(o, "IsConnected")?,
    })
}

pub(crate) fn session(o: &IWbemClassWrapper) -> CallResult<MsftIscsiSession> {
    Ok(MsftIscsiSession {
        path: path_of(o)?,
        session_identifier: string_of(o, "SessionIdentifier")?,
        target_node_address: opt_string(o, "TargetNodeAddress")?,
        initiator_node_address: opt_string(o, "InitiatorNodeAddress")?,
        initiator_portal_address: opt_string(o, "InitiatorPortalAddress")?,
        authentication_type: opt_string(o, "AuthenticationType")?,
        number_of_connections: opt_u32(o, "NumberOfConnections")?,
        is_connected: bool_of(o, "IsConnected")?,
        is_persistent: bool_of(o, "IsPersistent")?,
        is_discovered: bool_of(o, "IsDiscovered")?,
    })
}

pub(crate) fn connection(o: &IWbemClassWrapper) -> CallResult<MsftIscsiConnection> {
    Ok(MsftIscsiConnection {
        path: path_of(o)?,
        connection_identifier: string_of(o, "ConnectionIdentifier")?,
        initiator_address: opt_string(o, "InitiatorAddress")?,
        target_address: opt_string(o, "TargetAddress")?,
        target_port_number: opt_u16(o, "TargetPortNumber")?,
    })
}

pub(crate) fn initiator_port(o: &IWbemClassWrapper) -> CallResult<MsftInitiatorPort> {
    Ok(MsftInitiatorPort {
        path: path_of(o)?,
        node_address: opt_string(o, "NodeAddress")?,
        instance_name: opt_string(o, "InstanceName")?,
        connection_type: opt_u16(o, "ConnectionType")?,
    })
}

pub(crate) fn smb_mapping(o: &IWbemClassWrapper) -> CallResult<SmbGlobalMapping> {
    Ok(SmbGlobalMapping {
        path: path_of(o)?,
        local_path: opt_string(o, "LocalPath")?.filter(|s| !s.is_empty()),
        remote_path: string_of(o, "RemotePath")?,
        status: SmbMappingStatus::from_code(
            opt_u32(o, "Status")?.unwrap_or(SmbMappingStatus::Unavailable.code()),
        ),
        require_privacy: opt_bool(o, "RequirePrivacy")?,
        require_integrity: opt_bool(o, "RequireIntegrity")?,
        use_write_through: opt_bool(o, "UseWriteThrough")?,
        // Absent on builds before Windows Server 2025 (`get` answers `None` for a property the class lacks).
        compress_network_traffic: opt_bool(o, "CompressNetworkTraffic")?,
        transport_type: opt_u32(o, "TransportType")?
            .and_then(crate::model::SmbTransport::from_code),
        block_ntlm: opt_bool(o, "BlockNTLM")?,
    })
}

// ---- Error objects ----

/// The error object of a failed call (`MSFT_WmiError`: `error_Code`, `error_Type`, `error_Category`, `Message`,
/// `MessageID`, `CIMStatusCode`; `__ExtendedStatus`: `StatusCode`, `Description`, `Operation`, `ProviderName`),
/// best-effort: a property that cannot be read is left out (the failure stands either way).
pub(crate) fn error_object(o: &IWbemClassWrapper) -> ErrorObject {
    let text = |name: &str| opt_string(o, name).ok().flatten().filter(|s| !s.is_empty());
    // uint32 values arrive as VT_I4: an iSCSI code (0xEFFF….) may come negative if not converted by CIM type.
    let number = |name: &str| match get(o, name).ok().flatten() {
        Some(Variant::I4(n)) => Some(n as u32),
        Some(v) => as_u64(&v).and_then(|n| u32::try_from(n).ok()),
        None => None,
    };
    ErrorObject {
        class: text("__CLASS"),
        error_code: number("error_Code"),
        error_type: text("error_Type"),
        error_category: number("error_Category").and_then(|n| u16::try_from(n).ok()),
        message: text("Message").or_else(|| text("Description")),
        message_id: text("MessageID"),
        cim_status_code: number("CIMStatusCode"),
        status_code: number("StatusCode"),
        operation: text("Operation"),
        provider_name: text("ProviderName"),
    }
}

// ---- Method out-parameters ----

/// `ReturnValue`.
pub(crate) fn return_value(out: &IWbemClassWrapper, call: &str) -> CallResult<u32> {
    opt_u32(out, "ReturnValue")?.ok_or_else(|| CallError::decode(call, "no ReturnValue"))
}

/// `ExtendedStatus`: an embedded `MSFT_StorageExtendedStatus` object, or its text (unverified which).
pub(crate) fn extended_status(out: &IWbemClassWrapper) -> Option<ExtendedStatus> {
    let read = || -> CallResult<Option<ExtendedStatus>> {
        match get(out, "ExtendedStatus")? {
            None => Ok(None),
            Some(Variant::String(text)) if text.is_empty() => Ok(None),
            Some(Variant::String(text)) => Ok(Some(ExtendedStatus {
                text: Some(text),
                ..Default::default()
            })),
            Some(Variant::Object(o)) => Ok(Some(ExtendedStatus {
                message: opt_string(&o, "Message")?,
                message_id: opt_string(&o, "MessageID")?,
                cim_status_code: opt_u32(&o, "CIMStatusCode")?.map(CimStatusCode::from_code),
                error_type: opt_u16(&o, "ErrorType")?,
                perceived_severity: opt_u16(&o, "PerceivedSeverity")?,
                recommended_actions: strings_of(&o, "RecommendedActions")?,
                text: None,
            })),
            Some(other) => Err(bad("ExtendedStatus", &other)),
        }
    };
    // The status only explains an outcome: if it cannot be read, the outcome still stands.
    read().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "could not read a method's ExtendedStatus");
        None
    })
}

/// An embedded-object out-parameter (`CreatedPartition`, `FormattedVolume`, …), decoded best-effort: the method's
/// outcome stands even if the object cannot be read (the caller re-queries).
pub(crate) fn out_object<T>(
    out: &IWbemClassWrapper,
    name: &str,
    decode: impl Fn(&IWbemClassWrapper) -> CallResult<T>,
) -> Option<T> {
    match object(out, name).and_then(|o| o.as_ref().map(&decode).transpose()) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(parameter = name, error = %e, "could not read a method's out-parameter");
            None
        }
    }
}

/// `MSFT_Partition.GetSupportedSize`'s `SizeMin`/`SizeMax`.
pub(crate) fn supported_size(out: &IWbemClassWrapper) -> Option<SupportedSize> {
    match (opt_u64(out, "SizeMin"), opt_u64(out, "SizeMax")) {
        (Ok(Some(min)), Ok(Some(max))) => Some(SupportedSize { min, max }),
        _ => None,
    }
}
