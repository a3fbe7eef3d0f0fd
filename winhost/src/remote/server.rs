//! The server side: answer [`super::RemoteHost`]'s calls with any [`WindowsHost`] (the simulated host's Windows
//! view). Each connection is served on a thread of its own (facade calls block, and a hung call must hold only its
//! own connection, as a stuck WMI call holds only its worker).

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use super::Address;
use super::wire::{Envelope, Request, Response, report_to_wire};
use crate::call::CallContext;
use crate::error::{CallError, CallResult};
use crate::facade::WindowsHost;

fn answer<T: Serialize>(r: CallResult<T>) -> Response {
    match r {
        Ok(v) => match serde_json::to_value(v) {
            Ok(v) => Response::Ok(v),
            Err(e) => Response::Err(CallError::decode("encoding the answer", e.to_string())),
        },
        Err(e) => Response::Err(e),
    }
}

/// Run one request on `host`.
fn dispatch(host: &dyn WindowsHost, ctx: &CallContext, request: Request) -> Response {
    use Request as R;
    let c = ctx;
    match request {
        R::Disks { number } => answer(host.disks(c, number)),
        R::Partitions { disk_number } => answer(host.partitions(c, disk_number)),
        R::Volumes { unique_id } => answer(host.volumes(c, unique_id.as_deref())),
        R::PartitionVolumes { partition } => answer(host.partition_volumes(c, &partition)),
        R::VolumePartitions { volume } => answer(host.volume_partitions(c, &volume)),
        R::DiskOnline { disk } => answer(host.disk_online(c, &disk)),
        R::DiskOffline { disk } => answer(host.disk_offline(c, &disk)),
        R::DiskInitialize { disk, style } => answer(host.disk_initialize(c, &disk, style)),
        R::DiskCreatePartition { disk, params } => {
            answer(host.disk_create_partition(c, &disk, &params))
        }
        R::DiskSetAttributes { disk, attributes } => {
            answer(host.disk_set_attributes(c, &disk, &attributes))
        }
        R::DiskRefresh { disk } => answer(host.disk_refresh(c, &disk)),
        R::PartitionOnline { partition } => answer(host.partition_online(c, &partition)),
        R::PartitionSupportedSize { partition } => {
            answer(host.partition_supported_size(c, &partition))
        }
        R::PartitionResize { partition, size } => {
            answer(host.partition_resize(c, &partition, size))
        }
        R::VolumeFormat { volume, params } => answer(host.volume_format(c, &volume, &params)),
        R::VolumeFlush { volume } => answer(host.volume_flush(c, &volume)),
        R::StorageSetting => answer(host.storage_setting(c)),
        R::UpdateHostStorageCache => answer(host.update_host_storage_cache(c)),
        R::MsdsmSupportedHw => answer(host.msdsm_supported_hw(c)),
        R::TargetPortals { portal } => {
            answer(host.target_portals(c, portal.as_ref().map(|(a, p)| (a.as_str(), *p))))
        }
        R::TargetPortalNew { params } => answer(host.target_portal_new(c, &params.borrow())),
        R::TargetPortalUpdate { portal } => answer(host.target_portal_update(c, &portal)),
        R::TargetPortalRemove { portal } => answer(host.target_portal_remove(c, &portal)),
        R::PortalTargets { portal } => answer(host.portal_targets(c, &portal)),
        R::Targets => answer(host.targets(c)),
        R::TargetConnect { params } => answer(host.target_connect(c, &params.borrow())),
        R::TargetDisconnect {
            target,
            session_identifier,
        } => answer(host.target_disconnect(c, &target, &session_identifier)),
        R::TargetSessions { target } => answer(host.target_sessions(c, &target)),
        R::Sessions => answer(host.sessions(c)),
        R::SessionDisks { session } => answer(host.session_disks(c, &session)),
        R::TargetConnections { target } => answer(host.target_connections(c, &target)),
        R::ConnectionDisks { connection } => answer(host.connection_disks(c, &connection)),
        R::SessionRegister { session, params } => {
            answer(host.session_register(c, &session, &params.borrow()))
        }
        R::SessionUnregister { session } => answer(host.session_unregister(c, &session)),
        R::SetChapSecret { secret } => answer(host.set_chap_secret(c, &secret)),
        R::InitiatorPorts => answer(host.initiator_ports(c)),
        R::GlobalMappings => answer(host.global_mappings(c)),
        R::GlobalMappingsOf { remote_path } => answer(host.global_mappings_of(c, &remote_path)),
        R::GlobalMappingCreate { params } => {
            answer(host.global_mapping_create(c, &params.borrow()))
        }
        R::GlobalMappingRemove { mapping, force } => {
            answer(host.global_mapping_remove(c, &mapping, force))
        }
        R::CreateDirectory { path } => answer(host.create_directory(c, &path)),
        R::RemoveDirectory { path } => answer(host.remove_directory(c, &path)),
        R::DeleteFile { path } => answer(host.delete_file(c, &path)),
        R::RemoveTree { path } => answer(host.remove_tree(c, &path)),
        R::CreateSymbolicLink {
            link,
            target,
            flags,
        } => answer(host.create_symbolic_link(c, &link, &target, flags)),
        R::FileAttributes { path } => answer(host.file_attributes(c, &path)),
        R::ReadDevice { device, head, tail } => answer(host.read_device(c, &device, head, tail)),
        R::AttributeTag { path } => answer(host.attribute_tag(c, &path)),
        R::ReadReparsePoint { path } => answer(host.read_reparse_point(c, &path)),
        R::FinalPathName { path, kind } => answer(host.final_path_name(c, &path, kind)),
        R::SetVolumeMountPoint {
            mount_point,
            volume,
        } => answer(host.set_volume_mount_point(c, &mount_point, &volume)),
        R::DeleteVolumeMountPoint { mount_point } => {
            answer(host.delete_volume_mount_point(c, &mount_point))
        }
        R::VolumeNameForMountPoint { mount_point } => {
            answer(host.volume_name_for_mount_point(c, &mount_point))
        }
        R::VolumePathName { path } => answer(host.volume_path_name(c, &path)),
        R::VolumePathNames { volume } => answer(host.volume_path_names(c, &volume)),
        R::VolumeInformation { root } => answer(host.volume_information(c, &root)),
        R::DiskFreeSpace { path } => answer(host.disk_free_space(c, &path)),
        R::FlushVolume { volume } => answer(host.flush_volume(c, &volume)),
        R::StorageDeviceNumber { device } => answer(host.storage_device_number(c, &device)),
        R::StorageDeviceIdentifiers { device } => {
            answer(host.storage_device_identifiers(c, &device))
        }
        R::ProbeReport => answer(Ok(report_to_wire(&host.probe_report()))),
        R::Reprobe => answer(host.reprobe(c).map(|r| report_to_wire(&r))),
        R::OsBuild => answer(Ok(host.os_build())),
    }
}

/// Serve one connection: a request per line, each answered in order, until the client closes it.
pub fn serve_connection<S: std::io::Read + Write>(host: &dyn WindowsHost, stream: S) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let response = match serde_json::from_str::<Envelope>(&line) {
            Ok(env) => {
                let ctx = CallContext::after(Duration::from_millis(env.remaining_ms));
                if env.request.has_secret() {
                    tracing::debug!(call = %env.request.name(), "remote facade call");
                } else {
                    tracing::debug!(call = ?env.request, "remote facade call");
                }
                dispatch(host, &ctx, env.request)
            }
            Err(e) => Response::Err(CallError::decode("reading the request", e.to_string())),
        };
        let Ok(mut out) = serde_json::to_vec(&response) else {
            return;
        };
        out.push(b'\n');
        let w = reader.get_mut();
        // The client may have given up (deadline, cancellation) and closed the connection: nothing to do then.
        if w.write_all(&out).and_then(|()| w.flush()).is_err() {
            return;
        }
    }
}

/// A running server: stops accepting (and removes a Unix socket it made) when dropped or [`Server::stop`]ped;
/// connections in flight finish on their own threads.
pub struct Server {
    addr: Address,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

/// One accepted connection, waiting for the host to serve it with.
type Connection = Box<dyn FnOnce(&dyn WindowsHost) + Send>;

enum Listener {
    #[cfg(unix)]
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

/// Listen on `addr` (`tcp:127.0.0.1:0` picks a port: see [`Server::address`]) and serve `host`.
pub fn serve(host: Arc<dyn WindowsHost>, addr: &Address) -> std::io::Result<Server> {
    let (listener, addr) = match addr {
        #[cfg(unix)]
        Address::Unix(p) => {
            let l = std::os::unix::net::UnixListener::bind(p)?;
            (Listener::Unix(l), addr.clone())
        }
        #[cfg(not(unix))]
        Address::Unix(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "Unix sockets are not available here: use tcp:127.0.0.1:PORT",
            ));
        }
        Address::Tcp(a) => {
            let l = std::net::TcpListener::bind(a)?;
            let bound = l.local_addr()?;
            (Listener::Tcp(l), Address::Tcp(bound))
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let acceptor = std::thread::Builder::new()
        .name("winhost-remote".to_owned())
        .spawn(move || {
            loop {
                let conn: Connection = match &listener {
                    #[cfg(unix)]
                    Listener::Unix(l) => match l.accept() {
                        Ok((s, _)) => Box::new(move |h: &dyn WindowsHost| serve_connection(h, s)),
                        Err(_) => continue,
                    },
                    Listener::Tcp(l) => match l.accept() {
                        Ok((s, _)) => Box::new(move |h: &dyn WindowsHost| serve_connection(h, s)),
                        Err(_) => continue,
                    },
                };
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                let host = host.clone();
                let _ = std::thread::Builder::new()
                    .name("winhost-remote-conn".to_owned())
                    .spawn(move || conn(&*host));
            }
        })?;
    Ok(Server {
        addr,
        stop,
        acceptor: Some(acceptor),
    })
}

impl Server {
    /// Where it listens (the bound port for `tcp:…:0`).
    pub fn address(&self) -> &Address {
        &self.addr
    }

    /// Stop accepting.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the blocking accept with a connection of our own.
        let _ = match &self.addr {
            #[cfg(unix)]
            Address::Unix(p) => std::os::unix::net::UnixStream::connect(p).map(drop),
            #[cfg(not(unix))]
            Address::Unix(_) => Ok(()),
            Address::Tcp(a) => std::net::TcpStream::connect(a).map(drop),
        };
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        if let Address::Unix(p) = &self.addr {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}
