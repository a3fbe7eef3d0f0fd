//! Server-side helpers (cargo feature `server`): turn a Unix socket or a Windows named pipe into
//! a tonic incoming-connection stream, for the simulated host and tests.
//!
//! ```no_run
//! # #[cfg(unix)]
//! # async fn demo(disk: impl proxy_client::proto::disk_v1::disk_server::Disk) -> Result<(), Box<dyn std::error::Error>> {
//! use proxy_client::{listen, proto::disk_v1::disk_server::DiskServer, ApiGroup};
//!
//! // Binds /run/sim/csi-proxy-disk-v1.sock (removing a stale socket first).
//! let incoming = listen::unix_socket_for_group("/run/sim", ApiGroup::Disk)?;
//! tonic::transport::Server::builder()
//!     .add_service(DiskServer::new(disk))
//!     .serve_with_incoming(incoming)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! On Windows, `named_pipe` / `named_pipe_for_group` do the same for `\\.\pipe\csi-proxy-disk-v1`-style names.

#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

#[cfg(unix)]
pub use unix::{UnixIncoming, unix_socket, unix_socket_for_group};
#[cfg(windows)]
pub use windows::{NamedPipeIncoming, PipeConnection, named_pipe, named_pipe_for_group};
