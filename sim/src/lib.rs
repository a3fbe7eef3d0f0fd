//! A simulated Windows node running csi-proxy.
//!
//! [`SimHost`] is a faithful, stateful test double of a Windows host as seen through csi-proxy's v1 gRPC API
//! (disk v1, volume v1, filesystem v1, smb v1, iscsi v1alpha2, system v1alpha1): real directories and symlinks
//! in a sandbox, disks/volumes, SMB global mappings and iSCSI sessions, with csi-proxy's exact validation,
//! idempotency rules and error texts. It records an audit log, injects faults, simulates reboots and checks
//! invariants (no data loss, nothing left behind). It plays one csi-proxy release at a time ([`CsiProxyVersion`]:
//! v1.1.3, v1.2.1, v1.3.0 or master; every per-release difference is in [`profile`]). [`serve`] serves it over
//! Unix sockets (`serve_unix`) or, on Windows, named pipes (`serve_pipes`); the `wincsi-sim` binary serves a
//! scenario file and exposes an [admin] interface. [`wmi::WindowsView`] is the same host seen the way a native
//! (HostProcess) backend sees Windows: the `winhost` facade's WMI and Win32 calls, sharing the model, audit log,
//! faults and reboots with the csi-proxy view.

mod error;
mod host;
pub mod profile;
mod scenario;
mod secret;
pub mod state;

pub use error::{Error, Result};
pub use host::{AuditEntry, Fault, InvariantReport, ProxyStatus, RPCS, SimHost, normalize_rpc};
pub use profile::{
    Arrival, ArrivalModel, CSI_PROXY_VERSION_ENV, CsiProxyVersion, HostBehaviour, Profile,
};
pub use scenario::*;
pub use secret::{REDACTED, Secret};
pub use state::{DataLossEvent, HostOptions, SANDBOX_MARKER, State};

pub mod admin;
mod grpc;
pub mod inproc;
pub mod process;
mod scripting;
mod serve;
pub mod wmi;

pub use grpc::{
    DiskService, FilesystemService, IscsiService, SmbService, SystemService, VolumeService,
};
#[cfg(windows)]
pub use serve::serve_pipes;
#[cfg(unix)]
pub use serve::serve_unix;
pub use serve::{Endpoints, ServeHandle, serve};
