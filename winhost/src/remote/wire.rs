//! What travels over the socket: one [`Request`] per facade call (owned arguments), its answer as JSON, and the
//! probe report's wire form.

use serde::{Deserialize, Serialize};

use crate::codes::{HResult, PartitionStyle};
use crate::model::{
    AuthenticationType, ChapCredentials, ConnectTarget, CreatePartition, DiskAttributes,
    FormatVolume, MsftIscsiTargetPortal, NewTargetPortal, ObjectPath, RegisterSession,
    SmbGlobalMappingCreate, SmbTransport, SymlinkFlags, VolumeNameKind,
};
use crate::paths::VolumeGuidPath;
#[cfg(test)]
use crate::probe::REQUIRED_CLASSES;
use crate::probe::{ClassStatus, Namespace, ProbeReport};

/// One request line: the call and how long its caller still waits (the server's `CallContext`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Envelope {
    /// Milliseconds left until the caller's deadline.
    pub(crate) remaining_ms: u64,
    /// The call.
    pub(crate) request: Request,
}

/// One response line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Response {
    /// The call's answer (the facade method's `Ok` value).
    Ok(serde_json::Value),
    /// The call's error.
    Err(crate::error::CallError),
}

/// A CHAP user name and secret, owned (the secret crosses the socket: the transport is a test build's, on a socket
/// in the test's own directory or on loopback).
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct Chap {
    pub(crate) username: String,
    pub(crate) secret: String,
}

impl std::fmt::Debug for Chap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chap")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl Chap {
    pub(crate) fn of(c: Option<ChapCredentials<'_>>) -> Option<Self> {
        c.map(|c| Self {
            username: c.username.to_owned(),
            secret: c.secret.to_owned(),
        })
    }

    pub(crate) fn borrow(c: &Option<Self>) -> Option<ChapCredentials<'_>> {
        c.as_ref().map(|c| ChapCredentials {
            username: &c.username,
            secret: &c.secret,
        })
    }
}

/// `MSFT_iSCSITargetPortal.New`'s parameters, owned.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct NewPortal {
    pub(crate) target_portal_address: String,
    pub(crate) target_portal_port_number: u16,
    pub(crate) initiator_portal_address: Option<String>,
    pub(crate) authentication_type: Option<AuthenticationType>,
    pub(crate) chap: Option<Chap>,
}

impl NewPortal {
    pub(crate) fn of(p: &NewTargetPortal<'_>) -> Self {
        Self {
            target_portal_address: p.target_portal_address.to_owned(),
            target_portal_port_number: p.target_portal_port_number,
            initiator_portal_address: p.initiator_portal_address.map(str::to_owned),
            authentication_type: p.authentication_type,
            chap: Chap::of(p.chap),
        }
    }

    pub(crate) fn borrow(&self) -> NewTargetPortal<'_> {
        NewTargetPortal {
            target_portal_address: &self.target_portal_address,
            target_portal_port_number: self.target_portal_port_number,
            initiator_portal_address: self.initiator_portal_address.as_deref(),
            authentication_type: self.authentication_type,
            chap: Chap::borrow(&self.chap),
        }
    }
}

/// `MSFT_iSCSITarget.Connect`'s parameters, owned.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Connect {
    pub(crate) node_address: String,
    pub(crate) target_portal_address: Option<String>,
    pub(crate) target_portal_port_number: Option<u16>,
    pub(crate) initiator_portal_address: Option<String>,
    pub(crate) authentication_type: AuthenticationType,
    pub(crate) chap: Option<Chap>,
    pub(crate) is_persistent: Option<bool>,
    pub(crate) is_multipath_enabled: Option<bool>,
}

impl Connect {
    pub(crate) fn of(p: &ConnectTarget<'_>) -> Self {
        Self {
            node_address: p.node_address.to_owned(),
            target_portal_address: p.target_portal_address.map(str::to_owned),
            target_portal_port_number: p.target_portal_port_number,
            initiator_portal_address: p.initiator_portal_address.map(str::to_owned),
            authentication_type: p.authentication_type,
            chap: Chap::of(p.chap),
            is_persistent: p.is_persistent,
            is_multipath_enabled: p.is_multipath_enabled,
        }
    }

    pub(crate) fn borrow(&self) -> ConnectTarget<'_> {
        ConnectTarget {
            node_address: &self.node_address,
            target_portal_address: self.target_portal_address.as_deref(),
            target_portal_port_number: self.target_portal_port_number,
            initiator_portal_address: self.initiator_portal_address.as_deref(),
            authentication_type: self.authentication_type,
            chap: Chap::borrow(&self.chap),
            is_persistent: self.is_persistent,
            is_multipath_enabled: self.is_multipath_enabled,
        }
    }
}

/// `MSFT_iSCSISession.Register`'s parameters, owned.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Register {
    pub(crate) is_multipath_enabled: Option<bool>,
    pub(crate) chap: Option<Chap>,
}

impl Register {
    pub(crate) fn of(p: &RegisterSession<'_>) -> Self {
        Self {
            is_multipath_enabled: p.is_multipath_enabled,
            chap: Chap::of(p.chap),
        }
    }

    pub(crate) fn borrow(&self) -> RegisterSession<'_> {
        RegisterSession {
            is_multipath_enabled: self.is_multipath_enabled,
            chap: Chap::borrow(&self.chap),
        }
    }
}

/// `MSFT_SmbGlobalMapping.Create`'s parameters, owned.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct CreateMapping {
    pub(crate) remote_path: String,
    pub(crate) local_path: Option<String>,
    pub(crate) user_name: Option<String>,
    pub(crate) password: String,
    pub(crate) persistent: Option<bool>,
    pub(crate) require_privacy: Option<bool>,
    pub(crate) require_integrity: Option<bool>,
    pub(crate) use_write_through: Option<bool>,
    #[serde(default)]
    pub(crate) compress_network_traffic: Option<bool>,
    #[serde(default)]
    pub(crate) transport_type: Option<SmbTransport>,
    #[serde(default)]
    pub(crate) block_ntlm: Option<bool>,
}

impl std::fmt::Debug for CreateMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateMapping")
            .field("remote_path", &self.remote_path)
            .field("user_name", &self.user_name)
            .finish_non_exhaustive()
    }
}

impl CreateMapping {
    pub(crate) fn of(p: &SmbGlobalMappingCreate<'_>) -> Self {
        Self {
            remote_path: p.remote_path.to_owned(),
            local_path: p.local_path.map(str::to_owned),
            user_name: p.user_name.map(str::to_owned),
            password: p.password.to_owned(),
            persistent: p.persistent,
            require_privacy: p.require_privacy,
            require_integrity: p.require_integrity,
            use_write_through: p.use_write_through,
            compress_network_traffic: p.compress_network_traffic,
            transport_type: p.transport_type,
            block_ntlm: p.block_ntlm,
        }
    }

    pub(crate) fn borrow(&self) -> SmbGlobalMappingCreate<'_> {
        SmbGlobalMappingCreate {
            remote_path: &self.remote_path,
            local_path: self.local_path.as_deref(),
            user_name: self.user_name.as_deref(),
            password: &self.password,
            persistent: self.persistent,
            require_privacy: self.require_privacy,
            require_integrity: self.require_integrity,
            use_write_through: self.use_write_through,
            compress_network_traffic: self.compress_network_traffic,
            transport_type: self.transport_type,
            block_ntlm: self.block_ntlm,
        }
    }
}

/// Every facade call, with owned arguments (`winhost::facade`, one variant per method).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    // StorageWmi
    Disks {
        number: Option<u32>,
    },
    Partitions {
        disk_number: Option<u32>,
    },
    Volumes {
        unique_id: Option<String>,
    },
    PartitionVolumes {
        partition: ObjectPath,
    },
    VolumePartitions {
        volume: ObjectPath,
    },
    DiskOnline {
        disk: ObjectPath,
    },
    DiskOffline {
        disk: ObjectPath,
    },
    DiskInitialize {
        disk: ObjectPath,
        style: PartitionStyle,
    },
    DiskCreatePartition {
        disk: ObjectPath,
        params: CreatePartition,
    },
    DiskSetAttributes {
        disk: ObjectPath,
        attributes: DiskAttributes,
    },
    DiskRefresh {
        disk: ObjectPath,
    },
    PartitionOnline {
        partition: ObjectPath,
    },
    PartitionSupportedSize {
        partition: ObjectPath,
    },
    PartitionResize {
        partition: ObjectPath,
        size: u64,
    },
    VolumeFormat {
        volume: ObjectPath,
        params: FormatVolume,
    },
    VolumeFlush {
        volume: ObjectPath,
    },
    StorageSetting,
    UpdateHostStorageCache,
    MsdsmSupportedHw,
    // IscsiWmi
    TargetPortals {
        portal: Option<(String, u16)>,
    },
    TargetPortalNew {
        params: NewPortal,
    },
    TargetPortalUpdate {
        portal: MsftIscsiTargetPortal,
    },
    TargetPortalRemove {
        portal: MsftIscsiTargetPortal,
    },
    PortalTargets {
        portal: ObjectPath,
    },
    Targets,
    TargetConnect {
        params: Connect,
    },
    TargetDisconnect {
        target: ObjectPath,
        session_identifier: String,
    },
    TargetSessions {
        target: ObjectPath,
    },
    Sessions,
    SessionDisks {
        session: ObjectPath,
    },
    TargetConnections {
        target: ObjectPath,
    },
    ConnectionDisks {
        connection: ObjectPath,
    },
    SessionRegister {
        session: ObjectPath,
        params: Register,
    },
    SessionUnregister {
        session: ObjectPath,
    },
    SetChapSecret {
        secret: String,
    },
    InitiatorPorts,
    // SmbWmi
    GlobalMappings,
    GlobalMappingsOf {
        remote_path: String,
    },
    GlobalMappingCreate {
        params: CreateMapping,
    },
    GlobalMappingRemove {
        mapping: ObjectPath,
        force: bool,
    },
    // Win32Files
    CreateDirectory {
        path: String,
    },
    RemoveDirectory {
        path: String,
    },
    DeleteFile {
        path: String,
    },
    RemoveTree {
        path: String,
    },
    CreateSymbolicLink {
        link: String,
        target: String,
        flags: SymlinkFlags,
    },
    FileAttributes {
        path: String,
    },
    ReadDevice {
        device: String,
        head: u64,
        tail: u64,
    },
    AttributeTag {
        path: String,
    },
    ReadReparsePoint {
        path: String,
    },
    FinalPathName {
        path: String,
        kind: VolumeNameKind,
    },
    SetVolumeMountPoint {
        mount_point: String,
        volume: VolumeGuidPath,
    },
    DeleteVolumeMountPoint {
        mount_point: String,
    },
    VolumeNameForMountPoint {
        mount_point: String,
    },
    VolumePathName {
        path: String,
    },
    VolumePathNames {
        volume: VolumeGuidPath,
    },
    VolumeInformation {
        root: String,
    },
    DiskFreeSpace {
        path: String,
    },
    FlushVolume {
        volume: VolumeGuidPath,
    },
    StorageDeviceNumber {
        device: String,
    },
    StorageDeviceIdentifiers {
        device: String,
    },
    // Capabilities
    ProbeReport,
    Reprobe,
    OsBuild,
}

impl Request {
    /// The call's name in messages (the `op` tag), never an argument.
    pub(crate) fn name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("op").and_then(|o| o.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "call".to_owned())
    }

    /// Whether it carries a secret (its arguments are then never logged).
    pub(crate) fn has_secret(&self) -> bool {
        matches!(
            self,
            Self::TargetPortalNew { .. }
                | Self::TargetConnect { .. }
                | Self::SessionRegister { .. }
                | Self::SetChapSecret { .. }
                | Self::GlobalMappingCreate { .. }
        )
    }
}

/// One class's probe status on the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WireStatus {
    Present { missing_methods: Vec<String> },
    Missing(HResult),
    Failed(HResult),
    NamespaceUnavailable,
}

/// A namespace's probe findings on the wire.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WireNamespace {
    pub(crate) namespace: Namespace,
    pub(crate) connect_error: Option<HResult>,
    pub(crate) classes: Vec<(String, WireStatus)>,
}

/// The probe report's wire form (its class and method names are the facade's own statics, rebuilt on arrival).
pub(crate) fn report_to_wire(r: &ProbeReport) -> Vec<WireNamespace> {
    r.namespaces
        .iter()
        .map(|n| WireNamespace {
            namespace: n.namespace,
            connect_error: n.connect_error,
            classes: n
                .classes
                .iter()
                .map(|(c, s)| {
                    let s = match s {
                        ClassStatus::Present { missing_methods } => WireStatus::Present {
                            missing_methods: missing_methods
                                .iter()
                                .map(|m| (*m).to_owned())
                                .collect(),
                        },
                        ClassStatus::Missing(h) => WireStatus::Missing(*h),
                        ClassStatus::Failed(h) => WireStatus::Failed(*h),
                        ClassStatus::NamespaceUnavailable => WireStatus::NamespaceUnavailable,
                    };
                    ((*c).to_owned(), s)
                })
                .collect(),
        })
        .collect()
}

/// The probe report from its wire form.
pub(crate) fn report_from_wire(wire: &[WireNamespace]) -> ProbeReport {
    ProbeReport::from_lookup(
        |ns| {
            wire.iter()
                .find(|n| n.namespace == ns)
                .and_then(|n| n.connect_error)
        },
        |ns, req| {
            let status = wire
                .iter()
                .find(|n| n.namespace == ns)
                .and_then(|n| n.classes.iter().find(|(c, _)| c == req.class))
                .map(|(_, s)| s);
            match status {
                Some(WireStatus::Present { missing_methods }) => Ok(req
                    .methods
                    .iter()
                    .copied()
                    .filter(|m| missing_methods.iter().any(|x| x == m))
                    .collect()),
                Some(WireStatus::Missing(h) | WireStatus::Failed(h)) => Err(*h),
                // Not reported: not there.
                Some(WireStatus::NamespaceUnavailable) | None => {
                    Err(HResult(crate::codes::HResultCode::WbemENotFound.code()))
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_report_survives_the_wire() {
        let report = ProbeReport::from_lookup(
            |ns| (ns == Namespace::Smb).then_some(HResult(0x8004_1033)),
            |_, c| match c.class {
                "MSFT_Volume" => Ok(vec!["Flush"]),
                "MSFT_iSCSITarget" => Err(HResult(0x8004_1069)),
                "MSFT_Partition" => Err(HResult(0x8004_1002)),
                _ => Ok(vec![]),
            },
        );
        let json = serde_json::to_string(&report_to_wire(&report)).expect("json");
        let back: Vec<WireNamespace> = serde_json::from_str(&json).expect("parse");
        assert_eq!(report_from_wire(&back), report);
        assert_eq!(REQUIRED_CLASSES.len(), 16);
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let r = Request::GlobalMappingCreate {
            params: CreateMapping {
                remote_path: r"\\s\x".into(),
                local_path: None,
                user_name: Some("u".into()),
                password: "pw-secret-1".into(),
                persistent: None,
                require_privacy: Some(true),
                require_integrity: None,
                use_write_through: None,
                compress_network_traffic: None,
                transport_type: None,
                block_ntlm: None,
            },
        };
        assert!(!format!("{r:?}").contains("pw-secret-1"));
        assert!(r.has_secret());
        assert_eq!(r.name(), "global_mapping_create");
        let c = Chap {
            username: "u".into(),
            secret: "chap-secret-1".into(),
        };
        assert!(!format!("{c:?}").contains("chap-secret-1"));
    }
}
