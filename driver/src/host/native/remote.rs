//! A test build's Windows host over a socket (feature `test-windows-socket`, never in the shipped driver): the
//! native backend of the real binary drives a simulated host's Windows view served by `wincsi-sim --windows-socket`
//! (`winhost::remote`), so external suites run against `--host-backend native` as they run against csi-proxy
//! (`sim/README.md`).

use std::sync::{Arc, OnceLock};

use winhost::WindowsHost;
use winhost::remote::{Address, RemoteHost};

/// The process's Windows host at `addr` (`unix:PATH` or `tcp:127.0.0.1:PORT`), connected on first use; its probe
/// report is fetched then. `Err`: the operator's message.
pub fn remote_windows_host(addr: &str) -> Result<Arc<dyn WindowsHost>, String> {
    static HOST: OnceLock<Result<Arc<dyn WindowsHost>, String>> = OnceLock::new();
    HOST.get_or_init(|| {
        let parsed: Address = addr
            .parse()
            .map_err(|e| format!("--test-windows-socket {e}"))?;
        let host = RemoteHost::connect(parsed)
            .map_err(|e| format!("--test-windows-socket {addr}: {e}"))?;
        tracing::warn!(
            address = addr,
            "TEST BUILD: the native backend drives the Windows host served at this address, not this machine"
        );
        Ok(Arc::new(host) as Arc<dyn WindowsHost>)
    })
    .clone()
}
