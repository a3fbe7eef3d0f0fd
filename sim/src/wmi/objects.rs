//! The simulated host's WMI object paths (`__PATH`) and the objects built from the model.
//!
//! Real Storage object paths embed a long provider `ObjectId` and are opaque to the backend (reference §1.5: never
//! build or parse one); these are the simulator's own, equally opaque to the backend, and keyed by what is stable in
//! the model (a disk's id, a volume's GUID, a session's identifier), so a path taken before a change still names the
//! same object after it, or nothing.

use winhost::ObjectPath;
use winhost::codes::{
    BusType, DiskOperationalStatus, FileSystemType, OfflineReason, PartitionStyle as WmiStyle,
    SmbMappingStatus, UniqueIdFormat,
};
use winhost::model::{
    GptType, MsftDisk, MsftIscsiConnection, MsftIscsiSession, MsftIscsiTarget,
    MsftIscsiTargetPortal, MsftPartition, MsftVolume, SmbGlobalMapping,
};

use crate::scenario::{PartitionKind, PartitionStyle};
use crate::state::{Disk, DiskSource, MappingStatus, Partition, Session, State, dir_usage};

const DISK: &str = r#"MSFT_Disk.ObjectId="{sim}disk:"#;
const PARTITION: &str = r#"MSFT_Partition.ObjectId="{sim}disk:"#;
const PARTITION_SEP: &str = ":partition:";
const VOLUME: &str = r#"MSFT_Volume.ObjectId="{sim}volume:"#;
const PORTAL: &str = r#"MSFT_iSCSITargetPortal.ObjectId="{sim}portal:"#;
const TARGET: &str = r#"MSFT_iSCSITarget.NodeAddress=""#;
const SESSION: &str = r#"MSFT_iSCSISession.SessionIdentifier=""#;
const CONNECTION: &str = r#"MSFT_iSCSIConnection.ConnectionIdentifier=""#;
const CONNECTION_SUFFIX: &str = "-0x0001";
const MAPPING: &str = r#"MSFT_SmbGlobalMapping.RemotePath=""#;

fn key<'a>(path: &'a ObjectPath, prefix: &str) -> Option<&'a str> {
    path.as_str().strip_prefix(prefix)?.strip_suffix('"')
}

/// A disk's path.
pub(crate) fn disk_path(d: &Disk) -> ObjectPath {
    ObjectPath::new(format!("{DISK}{}\"", d.id))
}

/// The disk a path names: its index, when the disk is visible.
pub(crate) fn disk_of(st: &State, path: &ObjectPath) -> Option<Option<usize>> {
    let id = key(path, DISK)?;
    Some(st.disks.iter().position(|d| d.id == id && d.present()))
}

/// A partition's path.
pub(crate) fn partition_path(d: &Disk, p: &Partition) -> ObjectPath {
    ObjectPath::new(format!("{PARTITION}{}{PARTITION_SEP}{}\"", d.id, p.number))
}

/// The partition a path names: (disk index, partition index), when its disk's layout is visible.
pub(crate) fn partition_of(st: &State, path: &ObjectPath) -> Option<Option<(usize, usize)>> {
    let k = key(path, PARTITION)?;
    let (id, number) = k.rsplit_once(PARTITION_SEP)?;
    let number: u32 = number.parse().ok()?;
    Some(st.disks.iter().enumerate().find_map(|(di, d)| {
        (d.id == id && d.layout_visible())
            .then(|| d.partitions.iter().position(|p| p.number == number))
            .flatten()
            .map(|pi| (di, pi))
    }))
}

/// A volume's path.
pub(crate) fn volume_path(guid: &str) -> ObjectPath {
    ObjectPath::new(format!("{VOLUME}{guid}\""))
}

/// The volume a path names: (disk index, partition index), when visible.
pub(crate) fn volume_of(st: &State, path: &ObjectPath) -> Option<Option<(usize, usize)>> {
    let guid = key(path, VOLUME)?;
    Some(st.find_volume(&format!(r"\\?\Volume{{{guid}}}\")))
}

/// A portal's path.
pub(crate) fn portal_path(address: &str, port: u32) -> ObjectPath {
    ObjectPath::new(format!("{PORTAL}{address}:{port}\""))
}

/// The added portal a path names (index).
pub(crate) fn portal_of(st: &State, path: &ObjectPath) -> Option<Option<usize>> {
    let (address, port) = key(path, PORTAL)?.rsplit_once(':')?;
    let port: u32 = port.parse().ok()?;
    Some(
        st.portals
            .iter()
            .position(|p| p.added && p.address == address && p.port == port),
    )
}

/// A target's path.
pub(crate) fn target_path(iqn: &str) -> ObjectPath {
    ObjectPath::new(format!("{TARGET}{iqn}\""))
}

/// The IQN a target path names.
pub(crate) fn target_of(path: &ObjectPath) -> Option<&str> {
    key(path, TARGET)
}

/// A session's path.
pub(crate) fn session_path(s: &Session) -> ObjectPath {
    ObjectPath::new(format!("{SESSION}{}\"", s.session_identifier))
}

/// The session a path names (index), when it still exists.
pub(crate) fn session_of(st: &State, path: &ObjectPath) -> Option<Option<usize>> {
    let id = key(path, SESSION)?;
    Some(st.sessions.iter().position(|s| s.session_identifier == id))
}

/// A session's one connection's path.
pub(crate) fn connection_path(s: &Session) -> ObjectPath {
    ObjectPath::new(format!(
        "{CONNECTION}{}{CONNECTION_SUFFIX}\"",
        s.session_identifier
    ))
}

/// The session whose connection a path names (index).
pub(crate) fn connection_of(st: &State, path: &ObjectPath) -> Option<Option<usize>> {
    let id = key(path, CONNECTION)?.strip_suffix(CONNECTION_SUFFIX)?;
    Some(st.sessions.iter().position(|s| s.session_identifier == id))
}

/// A mapping's path.
pub(crate) fn mapping_path(root: &str) -> ObjectPath {
    ObjectPath::new(format!("{MAPPING}{root}\""))
}

/// The mapping key (lower-cased root) a path names.
pub(crate) fn mapping_of(path: &ObjectPath) -> Option<&str> {
    key(path, MAPPING)
}

/// `\\.\PhysicalDriveN` (what a disk's `Path` is here; the IOCTLs open it).
pub(crate) fn device_path(number: u32) -> String {
    format!(r"\\.\PhysicalDrive{number}")
}

/// The drive letter of the system volume (`C:`) belongs to a scenario disk with a `C` volume, if any.
fn holds_drive_c(d: &Disk) -> bool {
    d.partitions
        .iter()
        .filter_map(|p| p.volume.as_ref())
        .any(|v| v.drive_letter == Some('C'))
}

/// `MSFT_Disk` of a visible disk (Microsoft's `MSFT_Disk` class page). `UniqueId` is the page83 id upper-cased in
/// the NAA format (the provider's own formatting is **unverified**: reference §2.3); `SerialNumber` is the model's.
pub(crate) fn msft_disk(d: &Disk) -> MsftDisk {
    let number = d.number.unwrap_or_default();
    let style = match d.partition_style {
        PartitionStyle::Raw => WmiStyle::Raw,
        PartitionStyle::Mbr => WmiStyle::Mbr,
        PartitionStyle::Gpt => WmiStyle::Gpt,
    };
    let system = holds_drive_c(d);
    MsftDisk {
        path: disk_path(d),
        number,
        device_path: Some(device_path(number)),
        location: Some(d.location.clone()).filter(|l| !l.is_empty()),
        unique_id: Some(d.page83.to_uppercase()).filter(|u| !u.is_empty()),
        unique_id_format: Some(UniqueIdFormat::FcphName),
        serial_number: Some(d.serial.clone()),
        size: d.size,
        // The sim's disks have 512-byte logical sectors (its partition arithmetic is in bytes).
        logical_sector_size: Some(512),
        number_of_partitions: Some(if d.layout_visible() {
            d.partitions.len() as u32
        } else {
            0
        }),
        partition_style: Some(style),
        bus_type: Some(match d.source {
            DiskSource::Iscsi { .. } => BusType::Iscsi,
            DiskSource::Local => BusType::Sas,
        }),
        is_offline: !d.online,
        // The SAN policy or an `Offline()` call: both are "Policy" (the page: "the user requested the disk to be
        // offline", and the SAN policy's reason per reference §3).
        offline_reason: (!d.online).then_some(OfflineReason::Policy),
        is_read_only: d.read_only,
        is_system: system,
        is_boot: system,
        operational_status: vec![if d.online {
            DiskOperationalStatus::Online
        } else {
            DiskOperationalStatus::Offline
        }],
    }
}

/// The byte offset of partition `pi` (1 MiB of table in front, partitions back to back).
fn offset_of(d: &Disk, pi: usize) -> u64 {
    crate::state::disk::MIB + d.partitions[..pi].iter().map(|p| p.size).sum::<u64>()
}

/// `MSFT_Partition` (Microsoft's `MSFT_Partition` class page): `GptType` on GPT disks, `MbrType` 7 (IFS) on MBR
/// disks; `AccessPaths` lists the drive letter and the volume GUID path while the volume is visible (mounted
/// folders are not listed: **unverified** whether the provider lists them; the backend never reads them).
pub(crate) fn msft_partition(d: &Disk, pi: usize) -> MsftPartition {
    let p = &d.partitions[pi];
    let gpt = d.partition_style == PartitionStyle::Gpt;
    let gpt_type = gpt.then(|| {
        match p.kind {
            PartitionKind::Reserved => GptType::MicrosoftReserved,
            PartitionKind::System => GptType::SystemPartition,
            PartitionKind::Basic => GptType::BasicData,
        }
        .guid()
        .to_owned()
    });
    let mut access_paths = Vec::new();
    if let Some(v) = d.visible_volume(pi) {
        if let Some(l) = v.drive_letter {
            access_paths.push(format!(r"{l}:\"));
        }
        access_paths.push(v.id());
    }
    MsftPartition {
        path: partition_path(d, p),
        disk_number: d.number.unwrap_or_default(),
        partition_number: p.number,
        offset: Some(offset_of(d, pi)),
        size: p.size,
        gpt_type,
        mbr_type: (!gpt).then_some(7),
        access_paths,
        is_read_only: d.read_only,
        is_offline: !d.online,
        is_hidden: false,
    }
}

/// `MSFT_Volume` (Microsoft's `MSFT_Volume` class page) of a visible volume (arrived, its disk online):
/// `FileSystemType` NTFS (14) for a formatted volume, Unknown (0) otherwise (csi-proxy's "formatted" test, reference §2.4); `SizeRemaining` from the bytes stored on it.
pub(crate) fn msft_volume(st: &State, d: &Disk, pi: usize) -> Option<MsftVolume> {
    let p = &d.partitions[pi];
    let v = d.visible_volume(pi)?;
    let used = dir_usage(&st.layout.volume_store(&v.guid))
        .bytes
        .min(p.size);
    let fs = v.filesystem.as_deref();
    Some(MsftVolume {
        path: volume_path(&v.guid),
        unique_id: v.id(),
        volume_path: Some(v.id()),
        drive_letter: v.drive_letter,
        file_system: Some(fs.unwrap_or("").to_owned()),
        file_system_label: Some(String::new()),
        file_system_type: match fs {
            Some(f) if f.eq_ignore_ascii_case("NTFS") => FileSystemType::Ntfs,
            Some(f) if f.eq_ignore_ascii_case("ReFS") => FileSystemType::ReFs,
            Some(_) => FileSystemType::Unknown(1),
            None => FileSystemType::Unknown0,
        },
        size: p.size,
        size_remaining: p.size - used,
        health_status: Some(0),
    })
}

/// `MSFT_iSCSITargetPortal` of an added portal.
pub(crate) fn msft_portal(address: &str, port: u32) -> MsftIscsiTargetPortal {
    MsftIscsiTargetPortal {
        path: portal_path(address, port),
        target_portal_address: address.to_owned(),
        target_portal_port_number: port as u16,
        initiator_instance_name: None,
        initiator_portal_address: None,
    }
}

/// `MSFT_iSCSITarget`: `IsConnected` when a session to it exists through any portal (reference §2.5).
pub(crate) fn msft_target(st: &State, iqn: &str) -> MsftIscsiTarget {
    MsftIscsiTarget {
        path: target_path(iqn),
        node_address: iqn.to_owned(),
        is_connected: st.sessions.iter().any(|s| s.iqn.eq_ignore_ascii_case(iqn)),
    }
}

/// The initiator's IQN (`MSFT_InitiatorPort.NodeAddress`, Windows' default form `iqn.1991-05.com.microsoft:<host>`).
pub(crate) const INITIATOR_IQN: &str = "iqn.1991-05.com.microsoft:wincsi-sim-node";

/// `MSFT_iSCSISession`.
pub(crate) fn msft_session(s: &Session) -> MsftIscsiSession {
    MsftIscsiSession {
        path: session_path(s),
        session_identifier: s.session_identifier.clone(),
        target_node_address: Some(s.iqn.clone()),
        initiator_node_address: Some(INITIATOR_IQN.to_owned()),
        initiator_portal_address: Some("0.0.0.0".to_owned()),
        authentication_type: Some(
            match s.auth {
                crate::state::AuthType::None => "NONE",
                crate::state::AuthType::OneWayChap => "ONEWAYCHAP",
                crate::state::AuthType::MutualChap => "MUTUALCHAP",
            }
            .to_owned(),
        ),
        number_of_connections: Some(1),
        is_connected: true,
        is_persistent: s.persistent,
        is_discovered: true,
    }
}

/// The one `MSFT_iSCSIConnection` of a session.
pub(crate) fn msft_connection(s: &Session) -> MsftIscsiConnection {
    MsftIscsiConnection {
        path: connection_path(s),
        connection_identifier: format!("{}{CONNECTION_SUFFIX}", s.session_identifier),
        initiator_address: Some("0.0.0.0".to_owned()),
        target_address: Some(s.portal_address.clone()),
        target_port_number: Some(s.portal_port as u16),
    }
}

/// `MSFT_SmbGlobalMapping` (reference §2.2). `RemotePath` is the model's key, lower-cased (the provider keeps the
/// spelling given at creation: a deviation the backend tolerates by comparing ignoring case).
pub(crate) fn msft_mapping(m: &crate::state::Mapping) -> SmbGlobalMapping {
    SmbGlobalMapping {
        path: mapping_path(&m.remote_path),
        local_path: Some(String::new()),
        remote_path: m.remote_path.clone(),
        status: match m.status {
            MappingStatus::Ok => SmbMappingStatus::Ok,
            MappingStatus::Paused => SmbMappingStatus::Paused,
            MappingStatus::Disconnected => SmbMappingStatus::Disconnected,
            MappingStatus::NetworkError => SmbMappingStatus::NetworkError,
            MappingStatus::Connecting => SmbMappingStatus::Connecting,
            MappingStatus::Reconnecting => SmbMappingStatus::Reconnecting,
            MappingStatus::Unavailable => SmbMappingStatus::Unavailable,
        },
        require_privacy: Some(m.require_privacy),
        require_integrity: Some(m.options.require_integrity),
        use_write_through: Some(m.options.use_write_through),
        // Windows Server 2025's class has these (its `New-SmbGlobalMapping` does); an older build's instance lacks
        // them, which the reader sees as absent. The view reports them only from that build on.
        compress_network_traffic: m
            .reports_2025_options
            .then_some(m.options.compress_network_traffic),
        transport_type: if m.reports_2025_options {
            winhost::model::SmbTransport::from_code(m.options.transport_type)
        } else {
            None
        },
        block_ntlm: m.reports_2025_options.then_some(m.options.block_ntlm),
    }
}
