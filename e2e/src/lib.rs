//! End-to-end harness for wincsi: a Windows node the way kubelet sees it, built from the real binaries.
//!
//! A [`TestNode`] runs the simulated Windows host (`wincsi-sim`, serving the csi-proxy API) and the driver
//! (`wincsi-node`) as two separate processes wired exactly as on a node — csi-proxy over Unix sockets (or the
//! real named pipes under Wine), CSI over a Unix socket (loopback TCP under Wine) — and a [`Kubelet`] model
//! that makes kubelet's CSI calls, with its paths, attributes, call order and retries. The simulator is driven
//! through its admin interface ([`sim::admin::AdminClient`]): reboot, faults, hangs, files, audit, invariants.
//!
//! The binaries are built by cargo as targets of this package (`wincsi-node-e2e`, `wincsi-sim-e2e`: the
//! driver's and the simulator's own `main.rs`), so `cargo test -p wincsi-e2e` is self-contained; integration
//! tests get their paths with [`binaries!`].
//!
//! * `tests/local.rs` — the kubelet-faithful scenarios (SMB, iSCSI, sharing, restart, expansion, stats, reboot,
//!   crash mid-stage, inline volume, full teardown).
//! * `tests/registration.rs` — what node-driver-registrar needs from the driver.
//! * `tests/wine_e2e.rs` — the Windows builds under Wine over real named pipes.
//! * `tests/cluster.rs` — opt-in, against a real cluster (see `e2e/README.md`).
//! * `tests/external.rs` — opt-in, kubelet's calls against a driver someone else started on a real node (or on a
//!   simulated host a script started), with no simulator admin: [`external`].
//! * `src/bin/wincsi-demo.rs` — the README demo.

mod error;
pub mod external;
pub mod fixtures;
pub mod host_files;
pub mod inproc;
pub mod kubelet;
mod node;
mod output;
mod platform;
pub mod process;
pub mod report;

pub use error::{Error, Result};
pub use host_files::{HostFiles, LocalFiles};
pub use kubelet::{CsiConn, Kubelet, Pod, Volume};
pub use node::TestNode;
pub use output::OutputLog;
pub use process::{Binaries, DriverOptions, DriverProcess, ProxyWiring, SimProcess};

/// The driver name the chart installs and every test uses.
pub const DRIVER_NAME: &str = "wincsi.csi.io";
