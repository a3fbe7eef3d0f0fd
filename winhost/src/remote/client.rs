//! [`RemoteHost`]: the facade as a client of a server over a socket (see the module docs of `remote`).

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::Address;
use super::wire::{
    Connect, CreateMapping, Envelope, NewPortal, Register, Request, Response, WireNamespace,
    report_from_wire,
};
use crate::call::CallContext;
use crate::codes::PartitionStyle;
use crate::error::{CallError, CallResult};
use crate::facade::{
    Capabilities, IscsiOutcome, IscsiWmi, SmbOutcome, SmbWmi, StorageOutcome, StorageWmi,
    Win32Files,
};
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
use crate::probe::ProbeReport;
use crate::reparse::ReparsePoint;

/// How long [`RemoteHost::connect`] waits for the server's probe report.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The facade over a socket. Its probe report is fetched when it connects and again at each
/// [`Capabilities::reprobe`].
pub struct RemoteHost {
    addr: Address,
    report: RwLock<ProbeReport>,
    /// The server's Windows build, read when connecting (a node's build changes only with a reboot into an update,
    /// which ends the connection's host too).
    build: Option<u32>,
}

impl std::fmt::Debug for RemoteHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteHost")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// One connection (Unix socket or loopback TCP).
enum Stream {
    #[cfg(unix)]
    Unix(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

impl Stream {
    fn connect(addr: &Address) -> std::io::Result<Self> {
        match addr {
            #[cfg(unix)]
            Address::Unix(p) => std::os::unix::net::UnixStream::connect(p).map(Self::Unix),
            #[cfg(not(unix))]
            Address::Unix(_) => Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "Unix sockets are not available here: use tcp:127.0.0.1:PORT",
            )),
            Address::Tcp(a) => std::net::TcpStream::connect(a).map(Self::Tcp),
        }
    }

    fn try_clone(&self) -> std::io::Result<Self> {
        match self {
            #[cfg(unix)]
            Self::Unix(s) => s.try_clone().map(Self::Unix),
            Self::Tcp(s) => s.try_clone().map(Self::Tcp),
        }
    }

    fn set_read_timeout(&self, d: Duration) -> std::io::Result<()> {
        let d = Some(d.max(Duration::from_millis(1)));
        match self {
            #[cfg(unix)]
            Self::Unix(s) => s.set_read_timeout(d),
            Self::Tcp(s) => s.set_read_timeout(d),
        }
    }

    fn shutdown(&self) {
        let _ = match self {
            #[cfg(unix)]
            Self::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Self::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            #[cfg(unix)]
            Self::Unix(s) => s.read(buf),
            Self::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            #[cfg(unix)]
            Self::Unix(s) => s.write(buf),
            Self::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            #[cfg(unix)]
            Self::Unix(s) => s.flush(),
            Self::Tcp(s) => s.flush(),
        }
    }
}

impl RemoteHost {
    /// Connect to the server at `addr` and fetch its probe report.
    pub fn connect(addr: Address) -> CallResult<Self> {
        let mut host = Self {
            addr,
            report: RwLock::new(ProbeReport::complete()),
            build: None,
        };
        host.reprobe_with(&CallContext::after(CONNECT_TIMEOUT), Request::ProbeReport)?;
        host.build = host.call(&CallContext::after(CONNECT_TIMEOUT), Request::OsBuild)?;
        Ok(host)
    }

    /// The server's address.
    pub fn address(&self) -> &Address {
        &self.addr
    }

    fn unreachable(&self, what: &str, e: &std::io::Error) -> CallError {
        CallError::Unavailable(format!("the Windows host at {} {what}: {e}", self.addr))
    }

    fn reprobe_with(&self, ctx: &CallContext, request: Request) -> CallResult<ProbeReport> {
        let wire: Vec<WireNamespace> = self.call(ctx, request)?;
        let report = report_from_wire(&wire);
        *self.report.write().unwrap_or_else(PoisonError::into_inner) = report.clone();
        Ok(report)
    }

    /// Send `request` and read its answer within `ctx`.
    fn call<T: DeserializeOwned>(&self, ctx: &CallContext, request: Request) -> CallResult<T> {
        ctx.check()?;
        let name = request.name();
        let mut stream =
            Stream::connect(&self.addr).map_err(|e| self.unreachable("does not answer", &e))?;
        let mut line = serde_json::to_vec(&Envelope {
            remaining_ms: u64::try_from(ctx.remaining().as_millis()).unwrap_or(u64::MAX),
            request,
        })
        .map_err(|e| CallError::decode(&name, e.to_string()))?;
        line.push(b'\n');
        stream
            .write_all(&line)
            .and_then(|()| stream.flush())
            .map_err(|e| self.unreachable("refused the call", &e))?;
        // Sent: from here on the call has started. Cancelling closes the connection, which ends the read at once.
        let closer = stream.try_clone().map(Arc::new).ok();
        let _registration = closer.as_ref().and_then(|c| {
            let c = c.clone();
            ctx.cancel_token()
                .and_then(|t| t.register(Arc::new(move || c.shutdown())))
        });
        let mut reader = BufReader::new(stream);
        let mut answer = Vec::new();
        loop {
            if ctx.is_cancelled() {
                return Err(CallError::Cancelled { started: true });
            }
            let left = ctx.remaining();
            if left.is_zero() {
                return Err(CallError::DeadlineExceeded { started: true });
            }
            reader
                .get_ref()
                .set_read_timeout(left)
                .map_err(|e| self.unreachable("failed", &e))?;
            match reader.read_until(b'\n', &mut answer) {
                Ok(_) if answer.ends_with(b"\n") => break,
                Ok(_) => {
                    if ctx.is_cancelled() {
                        return Err(CallError::Cancelled { started: true });
                    }
                    return Err(CallError::Unavailable(format!(
                        "the Windows host at {} closed the connection during {name}",
                        self.addr
                    )));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) if ctx.is_cancelled() => {
                    let _ = e;
                    return Err(CallError::Cancelled { started: true });
                }
                Err(e) => return Err(self.unreachable("failed", &e)),
            }
        }
        match serde_json::from_slice::<Response>(&answer)
            .map_err(|e| CallError::decode(&name, format!("unreadable answer: {e}")))?
        {
            Response::Ok(value) => serde_json::from_value(value)
                .map_err(|e| CallError::decode(&name, format!("unexpected answer: {e}"))),
            Response::Err(e) => Err(e),
        }
    }
}

impl StorageWmi for RemoteHost {
    fn disks(&self, ctx: &CallContext, number: Option<u32>) -> CallResult<Vec<MsftDisk>> {
        self.call(ctx, Request::Disks { number })
    }
    fn partitions(
        &self,
        ctx: &CallContext,
        disk_number: Option<u32>,
    ) -> CallResult<Vec<MsftPartition>> {
        self.call(ctx, Request::Partitions { disk_number })
    }
    fn volumes(&self, ctx: &CallContext, unique_id: Option<&str>) -> CallResult<Vec<MsftVolume>> {
        let unique_id = unique_id.map(str::to_owned);
        self.call(ctx, Request::Volumes { unique_id })
    }
    fn partition_volumes(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<Vec<MsftVolume>> {
        let partition = partition.clone();
        self.call(ctx, Request::PartitionVolumes { partition })
    }
    fn volume_partitions(
        &self,
        ctx: &CallContext,
        volume: &ObjectPath,
    ) -> CallResult<Vec<MsftPartition>> {
        let volume = volume.clone();
        self.call(ctx, Request::VolumePartitions { volume })
    }
    fn disk_online(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        let disk = disk.clone();
        self.call(ctx, Request::DiskOnline { disk })
    }
    fn disk_offline(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        let disk = disk.clone();
        self.call(ctx, Request::DiskOffline { disk })
    }
    fn disk_initialize(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        style: PartitionStyle,
    ) -> CallResult<StorageOutcome> {
        let disk = disk.clone();
        self.call(ctx, Request::DiskInitialize { disk, style })
    }
    fn disk_create_partition(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        params: &CreatePartition,
    ) -> CallResult<StorageOutcome<Option<MsftPartition>>> {
        let (disk, params) = (disk.clone(), params.clone());
        self.call(ctx, Request::DiskCreatePartition { disk, params })
    }
    fn disk_set_attributes(
        &self,
        ctx: &CallContext,
        disk: &ObjectPath,
        attributes: &DiskAttributes,
    ) -> CallResult<StorageOutcome> {
        let (disk, attributes) = (disk.clone(), attributes.clone());
        self.call(ctx, Request::DiskSetAttributes { disk, attributes })
    }
    fn disk_refresh(&self, ctx: &CallContext, disk: &ObjectPath) -> CallResult<StorageOutcome> {
        let disk = disk.clone();
        self.call(ctx, Request::DiskRefresh { disk })
    }
    fn partition_online(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<StorageOutcome> {
        let partition = partition.clone();
        self.call(ctx, Request::PartitionOnline { partition })
    }
    fn partition_supported_size(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
    ) -> CallResult<StorageOutcome<Option<SupportedSize>>> {
        let partition = partition.clone();
        self.call(ctx, Request::PartitionSupportedSize { partition })
    }
    fn partition_resize(
        &self,
        ctx: &CallContext,
        partition: &ObjectPath,
        size: u64,
    ) -> CallResult<StorageOutcome> {
        let partition = partition.clone();
        self.call(ctx, Request::PartitionResize { partition, size })
    }
    fn volume_format(
        &self,
        ctx: &CallContext,
        volume: &ObjectPath,
        params: &FormatVolume,
    ) -> CallResult<StorageOutcome<Option<MsftVolume>>> {
        let (volume, params) = (volume.clone(), params.clone());
        self.call(ctx, Request::VolumeFormat { volume, params })
    }
    fn volume_flush(&self, ctx: &CallContext, volume: &ObjectPath) -> CallResult<StorageOutcome> {
        let volume = volume.clone();
        self.call(ctx, Request::VolumeFlush { volume })
    }
    fn storage_setting(
        &self,
        ctx: &CallContext,
    ) -> CallResult<StorageOutcome<Option<MsftStorageSetting>>> {
        self.call(ctx, Request::StorageSetting)
    }
    fn update_host_storage_cache(&self, ctx: &CallContext) -> CallResult<StorageOutcome> {
        self.call(ctx, Request::UpdateHostStorageCache)
    }
    fn msdsm_supported_hw(
        &self,
        ctx: &CallContext,
    ) -> CallResult<Option<Vec<MsftMsdsmSupportedHw>>> {
        self.call(ctx, Request::MsdsmSupportedHw)
    }
}

impl IscsiWmi for RemoteHost {
    fn target_portals(
        &self,
        ctx: &CallContext,
        portal: Option<(&str, u16)>,
    ) -> CallResult<Vec<MsftIscsiTargetPortal>> {
        let portal = portal.map(|(a, p)| (a.to_owned(), p));
        self.call(ctx, Request::TargetPortals { portal })
    }
    fn target_portal_new(
        &self,
        ctx: &CallContext,
        params: &NewTargetPortal<'_>,
    ) -> CallResult<IscsiOutcome<Option<MsftIscsiTargetPortal>>> {
        let params = NewPortal::of(params);
        self.call(ctx, Request::TargetPortalNew { params })
    }
    fn target_portal_update(
        &self,
        ctx: &CallContext,
        portal: &MsftIscsiTargetPortal,
    ) -> CallResult<IscsiOutcome> {
        let portal = portal.clone();
        self.call(ctx, Request::TargetPortalUpdate { portal })
    }
    fn target_portal_remove(
        &self,
        ctx: &CallContext,
        portal: &MsftIscsiTargetPortal,
    ) -> CallResult<IscsiOutcome> {
        let portal = portal.clone();
        self.call(ctx, Request::TargetPortalRemove { portal })
    }
    fn portal_targets(
        &self,
        ctx: &CallContext,
        portal: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiTarget>> {
        let portal = portal.clone();
        self.call(ctx, Request::PortalTargets { portal })
    }
    fn targets(&self, ctx: &CallContext) -> CallResult<Vec<MsftIscsiTarget>> {
        self.call(ctx, Request::Targets)
    }
    fn target_connect(
        &self,
        ctx: &CallContext,
        params: &ConnectTarget<'_>,
    ) -> CallResult<IscsiOutcome<Option<MsftIscsiSession>>> {
        let params = Connect::of(params);
        self.call(ctx, Request::TargetConnect { params })
    }
    fn target_disconnect(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
        session_identifier: &str,
    ) -> CallResult<IscsiOutcome> {
        let (target, session_identifier) = (target.clone(), session_identifier.to_owned());
        self.call(
            ctx,
            Request::TargetDisconnect {
                target,
                session_identifier,
            },
        )
    }
    fn target_sessions(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiSession>> {
        let target = target.clone();
        self.call(ctx, Request::TargetSessions { target })
    }
    fn sessions(&self, ctx: &CallContext) -> CallResult<Vec<MsftIscsiSession>> {
        self.call(ctx, Request::Sessions)
    }
    fn session_disks(&self, ctx: &CallContext, session: &ObjectPath) -> CallResult<Vec<MsftDisk>> {
        let session = session.clone();
        self.call(ctx, Request::SessionDisks { session })
    }
    fn target_connections(
        &self,
        ctx: &CallContext,
        target: &ObjectPath,
    ) -> CallResult<Vec<MsftIscsiConnection>> {
        let target = target.clone();
        self.call(ctx, Request::TargetConnections { target })
    }
    fn connection_disks(
        &self,
        ctx: &CallContext,
        connection: &ObjectPath,
    ) -> CallResult<Vec<MsftDisk>> {
        let connection = connection.clone();
        self.call(ctx, Request::ConnectionDisks { connection })
    }
    fn session_register(
        &self,
        ctx: &CallContext,
        session: &ObjectPath,
        params: &RegisterSession<'_>,
    ) -> CallResult<IscsiOutcome> {
        let (session, params) = (session.clone(), Register::of(params));
        self.call(ctx, Request::SessionRegister { session, params })
    }
    fn session_unregister(
        &self,
        ctx: &CallContext,
        session: &ObjectPath,
    ) -> CallResult<IscsiOutcome> {
        let session = session.clone();
        self.call(ctx, Request::SessionUnregister { session })
    }
    fn set_chap_secret(&self, ctx: &CallContext, secret: &str) -> CallResult<IscsiOutcome> {
        let secret = secret.to_owned();
        self.call(ctx, Request::SetChapSecret { secret })
    }
    fn initiator_ports(&self, ctx: &CallContext) -> CallResult<Vec<MsftInitiatorPort>> {
        self.call(ctx, Request::InitiatorPorts)
    }
}

impl SmbWmi for RemoteHost {
    fn global_mappings(&self, ctx: &CallContext) -> CallResult<Vec<SmbGlobalMapping>> {
        self.call(ctx, Request::GlobalMappings)
    }
    fn global_mappings_of(
        &self,
        ctx: &CallContext,
        remote_path: &str,
    ) -> CallResult<Vec<SmbGlobalMapping>> {
        let remote_path = remote_path.to_owned();
        self.call(ctx, Request::GlobalMappingsOf { remote_path })
    }
    fn global_mapping_create(
        &self,
        ctx: &CallContext,
        params: &SmbGlobalMappingCreate<'_>,
    ) -> CallResult<SmbOutcome<Option<SmbGlobalMapping>>> {
        let params = CreateMapping::of(params);
        self.call(ctx, Request::GlobalMappingCreate { params })
    }
    fn global_mapping_remove(
        &self,
        ctx: &CallContext,
        mapping: &ObjectPath,
        force: bool,
    ) -> CallResult<SmbOutcome> {
        let mapping = mapping.clone();
        self.call(ctx, Request::GlobalMappingRemove { mapping, force })
    }
}

impl Win32Files for RemoteHost {
    fn create_directory(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        let path = path.to_owned();
        self.call(ctx, Request::CreateDirectory { path })
    }
    fn remove_directory(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        let path = path.to_owned();
        self.call(ctx, Request::RemoveDirectory { path })
    }
    fn delete_file(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        let path = path.to_owned();
        self.call(ctx, Request::DeleteFile { path })
    }
    fn remove_tree(&self, ctx: &CallContext, path: &str) -> CallResult<()> {
        let path = path.to_owned();
        self.call(ctx, Request::RemoveTree { path })
    }
    fn create_symbolic_link(
        &self,
        ctx: &CallContext,
        link: &str,
        target: &str,
        flags: SymlinkFlags,
    ) -> CallResult<()> {
        let (link, target) = (link.to_owned(), target.to_owned());
        self.call(
            ctx,
            Request::CreateSymbolicLink {
                link,
                target,
                flags,
            },
        )
    }
    fn file_attributes(&self, ctx: &CallContext, path: &str) -> CallResult<FileAttributes> {
        let path = path.to_owned();
        self.call(ctx, Request::FileAttributes { path })
    }
    fn read_device(
        &self,
        ctx: &CallContext,
        device: &str,
        head: u64,
        tail: u64,
    ) -> CallResult<DeviceBytes> {
        let device = device.to_owned();
        self.call(ctx, Request::ReadDevice { device, head, tail })
    }
    fn attribute_tag(&self, ctx: &CallContext, path: &str) -> CallResult<AttributeTag> {
        let path = path.to_owned();
        self.call(ctx, Request::AttributeTag { path })
    }
    fn read_reparse_point(&self, ctx: &CallContext, path: &str) -> CallResult<ReparsePoint> {
        let path = path.to_owned();
        self.call(ctx, Request::ReadReparsePoint { path })
    }
    fn final_path_name(
        &self,
        ctx: &CallContext,
        path: &str,
        kind: VolumeNameKind,
    ) -> CallResult<String> {
        let path = path.to_owned();
        self.call(ctx, Request::FinalPathName { path, kind })
    }
    fn set_volume_mount_point(
        &self,
        ctx: &CallContext,
        mount_point: &str,
        volume: &VolumeGuidPath,
    ) -> CallResult<()> {
        let (mount_point, volume) = (mount_point.to_owned(), volume.clone());
        self.call(
            ctx,
            Request::SetVolumeMountPoint {
                mount_point,
                volume,
            },
        )
    }
    fn delete_volume_mount_point(&self, ctx: &CallContext, mount_point: &str) -> CallResult<()> {
        let mount_point = mount_point.to_owned();
        self.call(ctx, Request::DeleteVolumeMountPoint { mount_point })
    }
    fn volume_name_for_mount_point(
        &self,
        ctx: &CallContext,
        mount_point: &str,
    ) -> CallResult<VolumeGuidPath> {
        let mount_point = mount_point.to_owned();
        self.call(ctx, Request::VolumeNameForMountPoint { mount_point })
    }
    fn volume_path_name(&self, ctx: &CallContext, path: &str) -> CallResult<String> {
        let path = path.to_owned();
        self.call(ctx, Request::VolumePathName { path })
    }
    fn volume_path_names(
        &self,
        ctx: &CallContext,
        volume: &VolumeGuidPath,
    ) -> CallResult<Vec<String>> {
        let volume = volume.clone();
        self.call(ctx, Request::VolumePathNames { volume })
    }
    fn volume_information(&self, ctx: &CallContext, root: &str) -> CallResult<VolumeInformation> {
        let root = root.to_owned();
        self.call(ctx, Request::VolumeInformation { root })
    }
    fn disk_free_space(&self, ctx: &CallContext, path: &str) -> CallResult<FreeSpace> {
        let path = path.to_owned();
        self.call(ctx, Request::DiskFreeSpace { path })
    }
    fn flush_volume(&self, ctx: &CallContext, volume: &VolumeGuidPath) -> CallResult<()> {
        let volume = volume.clone();
        self.call(ctx, Request::FlushVolume { volume })
    }
    fn storage_device_number(
        &self,
        ctx: &CallContext,
        device: &str,
    ) -> CallResult<StorageDeviceNumber> {
        let device = device.to_owned();
        self.call(ctx, Request::StorageDeviceNumber { device })
    }
    fn storage_device_identifiers(
        &self,
        ctx: &CallContext,
        device: &str,
    ) -> CallResult<Vec<StorageIdentifier>> {
        let device = device.to_owned();
        self.call(ctx, Request::StorageDeviceIdentifiers { device })
    }
}

impl Capabilities for RemoteHost {
    fn probe_report(&self) -> ProbeReport {
        self.report
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn reprobe(&self, ctx: &CallContext) -> CallResult<ProbeReport> {
        self.reprobe_with(ctx, Request::Reprobe)
    }

    fn os_build(&self) -> Option<u32> {
        self.build
    }
}
