//! wincsi: a Kubernetes CSI node driver for Windows nodes.
//!
//! The `wincsi-node` binary is a thin wrapper over this library: [`config`] parses and validates flags, [`logging`]
//! sets up tracing, [`backend`] builds the volume lifecycle over the configured host backend, and [`server`] serves
//! the CSI [`identity`] and [`node`] services on the kubelet's socket through the platform [`listener`].
//!
//! The layers, bottom up (ARCHITECTURE.md has the table; `tests/architecture.rs` checks it): [`error`]; [`locks`]
//! and [`config`]; [`metrics`]; the host port [`host`] (its vocabulary and backends), the record store [`state`], [`listener`],
//! [`logging`]; the protocol-independent [`lifecycle`]; the protocols [`smb`] and [`iscsi`] and the Kubernetes
//! Secret source [`ephemeral`]; the composition root [`backend`]; the service layer ([`rpc`], [`identity`],
//! [`node`], the HTTP health and metrics endpoints [`observability`], [`server`]) and, beside it, `wincsi-node
//! check-node` ([`check`]).

pub mod backend;
pub mod check;
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
pub mod metrics;
pub mod node;
pub mod observability;
pub mod rpc;
pub mod server;
pub mod smb;
pub mod state;
#[cfg(test)]
mod testing;

pub use error::{Error, Result};
