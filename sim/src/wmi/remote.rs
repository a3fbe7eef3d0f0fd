//! The Windows view over a socket: `wincsi-sim --windows-socket ADDR` (and tests, in process) serve the view to a
//! test build of the driver (`wincsi-node --host-backend native --test-windows-socket ADDR`, feature
//! `test-windows-socket`), through `winhost::remote` — so the real binary's native backend runs against the one
//! model of a Windows host, and any external suite (csi-sanity, a kubelet model) can drive it (`sim/README.md`).

use std::sync::Arc;

pub use winhost::remote::Address;
pub use winhost::remote::server::Server;

use super::WindowsView;

/// Serve `view` at `addr` (`unix:PATH`, or `tcp:127.0.0.1:PORT`, port 0 for any: see [`Server::address`]). Each
/// connection is served on a thread of its own, outside the runtime (the view's calls block on it).
pub fn serve(view: WindowsView, addr: &Address) -> std::io::Result<Server> {
    winhost::remote::server::serve(Arc::new(view), addr)
}
