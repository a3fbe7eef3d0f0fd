//! Wire-compatible client for the Windows [csi-proxy](https://github.com/kubernetes-csi/csi-proxy)
//! named-pipe gRPC API.
//!
//! csi-proxy runs on every Windows node and performs privileged storage operations for CSI
//! drivers. Each API group is a gRPC service (h2c, no TLS) on its own named pipe,
//! `\\.\pipe\csi-proxy-<group>-<version>`. This crate speaks to the groups wincsi uses:
//!
//! | Group | Version | Typed client |
//! | --- | --- | --- |
//! | disk | v1 | [`DiskClient`] |
//! | volume | v1 | [`VolumeClient`] |
//! | filesystem | v1 | [`FilesystemClient`] |
//! | smb | v1 | [`SmbClient`] |
//! | iscsi | v1alpha2 | [`IscsiClient`] |
//! | system | v1alpha1 | [`SystemClient`] |
//!
//! The protobuf definitions in `proto/` (generated into [`proto`]) match csi-proxy releases
//! **v1.1.3 to v1.3.0**; these API versions have not changed since v1.1.0.
//!
//! # Transports
//!
//! [`Transport::NamedPipes`] (Windows only) opens the pipes with tokio's named-pipe client and
//! retries while all pipe instances are busy. [`Transport::UnixSockets`] (not on Windows) reaches
//! the same services on `<dir>/csi-proxy-<group>-<version>.sock`, which is how the simulated host
//! and the tests serve them. Connections are lazy, one per group, and come back by themselves
//! after csi-proxy restarts. Every call has a deadline ([`ProxyClient::with_timeout`], and the
//! caller's own with [`ProxyClient::with_deadline`]); a connection on which nothing came back
//! before a call's deadline is left for a fresh one, so a silent connection cannot wedge its group
//! ([`ProxyClient::on_connection_abandoned`] reports each).
//!
//! # Errors
//!
//! csi-proxy reports every failure as gRPC `UNKNOWN` with free text. [`Error::kind`] classifies
//! the failures a driver reacts to ([`ErrorKind`]); the original text stays in the error.
//! Secrets ([`Secret`]) never appear in any `Debug`/`Display` output of this crate's types.
//!
//! # Examples
//!
//! One client for all groups:
//!
//! ```no_run
//! use std::time::Duration;
//! use proxy_client::{ProxyClient, Transport};
//!
//! # async fn demo() -> Result<(), proxy_client::Error> {
//! let proxy = ProxyClient::new(Transport::default()) // \\.\pipe\csi-proxy-*
//!     .with_timeout(Duration::from_secs(60));
//! // or, against the simulated host: Transport::unix_sockets("/run/wincsi-sim")
//! # let _ = proxy; Ok(()) }
//! ```
//!
//! Disk:
//!
//! ```no_run
//! # async fn demo(proxy: proxy_client::ProxyClient) -> Result<(), proxy_client::Error> {
//! let disk = proxy.disk();
//! disk.rescan().await?;
//! for (number, location) in disk.list_disk_locations().await? {
//!     println!("disk {number}: LUN {}", location.lun_id);
//! }
//! let ids = disk.list_disk_ids().await?; // disk number -> page83 / serial
//! disk.set_online(2, true).await?;
//! disk.partition(2).await?;
//! let size = disk.stats(2).await?;
//! # let _ = (ids, size); Ok(()) }
//! ```
//!
//! Volume:
//!
//! ```no_run
//! # async fn demo(proxy: proxy_client::ProxyClient) -> Result<(), proxy_client::Error> {
//! let volume = proxy.volume();
//! let ids = volume.list_on_disk(2, 0).await?; // 0 = all partitions
//! let id = &ids[0]; // \\?\Volume{...}\
//! if !volume.is_formatted(id).await? {
//!     volume.format(id).await?;
//! }
//! volume.mount(id, r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\pv\pv1\globalmount").await?;
//! let (total, used) = volume.stats(id).await?;
//! volume.resize(id, 0).await?; // 0 = grow to the maximum
//! # let _ = (total, used); Ok(()) }
//! ```
//!
//! Filesystem:
//!
//! ```no_run
//! # async fn demo(proxy: proxy_client::ProxyClient) -> Result<(), proxy_client::Error> {
//! let fs = proxy.filesystem();
//! let staging = r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\pv\pv1\globalmount";
//! let target = r"c:\var\lib\kubelet\pods\uid\volumes\kubernetes.io~csi\pv1\mount";
//! fs.mkdir(staging).await?;
//! if fs.path_exists(target).await? {
//!     fs.rmdir(target, false).await?;
//! }
//! fs.create_symlink(staging, target).await?; // link named `target` -> `staging`
//! assert!(fs.is_symlink(target).await?);
//! # Ok(()) }
//! ```
//!
//! SMB:
//!
//! ```no_run
//! use proxy_client::{ErrorKind, SmbCredentials};
//! # async fn demo(proxy: proxy_client::ProxyClient) -> Result<(), proxy_client::Error> {
//! let creds = SmbCredentials::new(r"CONTOSO\svc-k8s", "p@ssw0rd");
//! let smb = proxy.smb();
//! match smb.new_global_mapping(r"\\fs1\share\pv1", None, &creds).await {
//!     Ok(()) => {}
//!     Err(e) if e.kind() == ErrorKind::SmbMultipleConnections => {
//!         // the node holds a mapping to fs1 under other credentials
//!     }
//!     Err(e) => return Err(e),
//! }
//! smb.remove_global_mapping(r"\\fs1\share").await?;
//! # Ok(()) }
//! ```
//!
//! iSCSI:
//!
//! ```no_run
//! use proxy_client::{ChapAuth, Portal, Secret};
//! # async fn demo(proxy: proxy_client::ProxyClient) -> Result<(), proxy_client::Error> {
//! let iscsi = proxy.iscsi();
//! let portal = Portal::new("10.0.0.5", 3260);
//! iscsi.add_target_portal(&portal).await?;
//! let iqns = iscsi.discover_target_portal(&portal).await?;
//! let auth = ChapAuth::OneWay { username: "node1".into(), secret: Secret::new("0123456789ab") };
//! iscsi.connect_target(&portal, &iqns[0], &auth).await?;
//! let disks: Vec<u32> = iscsi.get_target_disks(&portal, &iqns[0]).await?;
//! # let _ = disks; Ok(()) }
//! ```
//!
//! System:
//!
//! ```no_run
//! use proxy_client::ServiceStatus;
//! # async fn demo(proxy: proxy_client::ProxyClient) -> Result<(), proxy_client::Error> {
//! let system = proxy.system();
//! let serial = system.bios_serial().await?;
//! if system.get_service("MSiSCSI").await?.status != ServiceStatus::Running {
//!     system.start_service("MSiSCSI").await?;
//! }
//! # let _ = serial; Ok(()) }
//! ```

mod api;
mod client;
pub mod codec;
mod connections;
mod error;
mod group;
#[cfg(feature = "server")]
pub mod listen;
pub mod proto;
mod secret;
mod transport;

pub use api::{
    ChapAuth, DiskClient, DiskIds, DiskLocation, FilesystemClient, IscsiClient, Portal,
    ServiceInfo, ServiceStatus, SmbClient, SmbCredentials, StartType, SystemClient, VolumeClient,
};
pub use client::{ChannelFactory, DEFAULT_TIMEOUT, ProxyClient};
pub use error::{Error, ErrorKind};
pub use group::ApiGroup;
pub use secret::Secret;
pub use transport::{DEFAULT_PIPE_PREFIX, Transport, pipe_name, socket_path};
