//! wincsi: a Kubernetes CSI node driver for Windows nodes.
//!
//! The `wincsi-node` binary is a thin wrapper over this library: [`config`] parses and validates
//! flags, [`logging`] sets up tracing, and [`server`] serves the CSI [`identity`] and [`node`]
//! services on the kubelet's socket through the platform [`listener`]. [`error`] holds the one
//! error type and its mapping to CSI gRPC codes.

pub mod backend;
pub mod config;
pub mod ephemeral;
pub mod error;
pub mod host;
pub mod identity;
pub mod iscsi;
pub mod lifecycle;
pub mod listener;
pub mod locks;
pub mod logging;
pub mod node;
pub mod rpc;
pub mod server;
pub mod smb;
pub mod state;
#[cfg(test)]
mod testing;

pub use error::{Error, Result};
