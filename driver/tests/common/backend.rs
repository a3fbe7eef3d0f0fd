//! The backend switch of the integration suites that run per backend: `WINCSI_TEST_HOST_BACKEND` (`csi-proxy`, the
//! default, or `native`), read in one place (`sim::wmi::TestBackend::from_env`), so CI runs each suite per backend
//! without editing it. Native suites record the simulated host's own audit (WMI and Win32 call names), so the
//! crash-and-fault matrix injects its faults into the native backend's facade calls.

use std::path::Path;
use std::sync::Arc;

use proxy_client::ProxyClient;
use sim::SimHost;
use sim::wmi::{TestBackend, WindowsView};
use wincsi::host::csi_proxy::CsiProxyHost;
use wincsi::host::native::NativeHost;
use wincsi::host::native::testing::TestHost;

/// The backend this run of the suite uses.
pub(crate) fn backend() -> TestBackend {
    TestBackend::from_env_or_panic()
}

/// The host port of the backend under test over `sim`: csi-proxy through `proxy`, native through the simulated
/// host's Windows view (its SMB mapping ledger in `state`, as `wincsi-node` keeps it in `--state-dir`). Must be
/// called inside a tokio runtime.
pub(crate) fn host_for(sim: &SimHost, proxy: ProxyClient, state: &Path) -> TestHost {
    match backend() {
        TestBackend::CsiProxy => TestHost::CsiProxy(CsiProxyHost::new(proxy)),
        TestBackend::Native => TestHost::NativeBare(NativeHost::new(
            Arc::new(WindowsView::new(sim.clone())),
            Some(state),
        )),
    }
}
