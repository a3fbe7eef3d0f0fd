//! The native backend needs Windows: elsewhere it reports so (tests drive its logic over the simulated host).

use std::sync::Arc;

use winhost::WindowsHost;

/// Always `Err`: there is no Windows host to call here.
pub fn windows_host() -> Result<Arc<dyn WindowsHost>, String> {
    Err(
        "--host-backend native runs only on Windows, in a HostProcess container; use --host-backend csi-proxy here"
            .to_owned(),
    )
}
