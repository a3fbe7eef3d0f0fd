//! COM apartment membership of a worker thread: one `CoInitializeEx(COINIT_MULTITHREADED)` per thread, balanced by
//! `CoUninitialize` when the thread's context is dropped, and the process-wide COM security set once.
#![allow(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::marker::PhantomData;
use std::sync::Once;

use windows::Win32::Foundation::RPC_E_TOO_LATE;
use windows::Win32::System::Com::{
    COINIT_MULTITHREADED, CoInitializeEx, CoInitializeSecurity, CoUninitialize, EOAC_NONE,
    RPC_C_AUTHN_LEVEL_PKT_PRIVACY, RPC_C_IMP_LEVEL_IMPERSONATE,
};

use crate::codes::HResult;

/// This thread's membership of the process's multithreaded apartment. `!Send`: it must be dropped on the thread that
/// made it, which is what balances `CoUninitialize` with `CoInitializeEx`.
pub(crate) struct Apartment {
    _not_send: PhantomData<*const ()>,
}

impl Apartment {
    /// Join the MTA on this thread (`S_FALSE`, "already initialised", counts and is balanced too). A thread already
    /// in a single-threaded apartment gets `RPC_E_CHANGED_MODE` (reference §1.3): the pool's threads never are.
    pub(crate) fn enter_mta() -> Result<Self, HResult> {
        // SAFETY: `pvReserved` must be null (None); the call only changes this thread's COM state, and every success
        // (S_OK or S_FALSE) is balanced by exactly one `CoUninitialize` in `Drop`, on this thread (`Apartment` is
        // `!Send`).
        let hr = unsafe { CoInitializeEx(None, COINIT_MULTITHREADED) };
        if hr.is_err() {
            return Err(HResult::from_i32(hr.0));
        }
        set_process_security_once();
        Ok(Self {
            _not_send: PhantomData,
        })
    }
}

impl Drop for Apartment {
    fn drop(&mut self) {
        // SAFETY: balances the successful `CoInitializeEx` of `enter_mta` on this same thread; every COM object this
        // thread used is owned by fields dropped before the `Apartment` (see `WmiThread`'s field order).
        unsafe { CoUninitialize() };
    }
}

/// `CoInitializeSecurity` at packet privacy with impersonation, once per process, as csi-proxy master does
/// (`kubernetes-csi/csi-proxy@eeba470 pkg/wmi/wmi.go:46,220`): a namespace that requires encryption refuses anything
/// less (MS-WMI §2.2.30.3), and locally it costs nothing. Each connection's proxy is set the same way
/// (`services.rs`). Whoever calls it first wins; `RPC_E_TOO_LATE` means someone did.
fn set_process_security_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: every pointer argument is null (None) or a plain value: no security descriptor (COM's default
        // access permissions), `-1` authentication services (let COM choose), no authentication list. The call
        // only sets process-wide COM security state.
        let result = unsafe {
            CoInitializeSecurity(
                None,
                -1,
                None,
                None,
                RPC_C_AUTHN_LEVEL_PKT_PRIVACY,
                RPC_C_IMP_LEVEL_IMPERSONATE,
                None,
                EOAC_NONE,
                None,
            )
        };
        match result {
            Ok(()) => {
                tracing::debug!("COM process security set (packet privacy, impersonate)")
            }
            Err(e) if e.code() == RPC_E_TOO_LATE => {
                tracing::debug!("COM process security was already set by someone else")
            }
            Err(e) => tracing::warn!(
                hresult = %HResult::from_i32(e.code().0),
                "CoInitializeSecurity failed; WMI calls use COM's defaults"
            ),
        }
    });
}
