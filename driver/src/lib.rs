//! wincsi: a Kubernetes CSI node driver for Windows nodes.
//!
//! The `wincsi-node` binary is a thin wrapper over this library: `config` parses and validates
//! flags, `logging` sets up tracing, and `server` serves the CSI Identity and Node services on
//! the kubelet's socket through the platform `listener`.

pub mod config;
pub mod error;
pub mod identity;
pub mod listener;
pub mod ephemeral;
pub mod host;
pub mod iscsi;
pub mod locks;
pub mod paths;
pub mod smb;
pub mod state;
pub mod volume;
pub mod logging;
pub mod node;
pub mod server;

pub use error::{Error, Result};
