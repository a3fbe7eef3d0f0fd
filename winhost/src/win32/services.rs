//! A worker thread's connection to one WMI namespace: `IWbemServices`, opened and called directly.
//!
//! Why not the `wmi` crate's `WMIConnection` for calls: it keeps its `IWbemServices` private and turns every failure
//! into a bare HRESULT (`ohadravid/wmi-rs@445971c src/utils.rs:53-58` drops the error info `windows-core` captured),
//! so the error object a provider attaches to a failed call — `MSFT_WmiError` with the Win32 or iSCSI code — would be
//! lost. Here a failed call keeps it: `windows-core` reads `GetErrorInfo` when it turns the failing HRESULT into an
//! error (`windows-result` 0.4 `Error::from(HRESULT)`), right after the call on the same thread as Microsoft
//! requires, and [`Failure`] keeps that object as an `IWbemClassObject` for `wmi.rs` to decode. The crate's
//! `IWbemClassWrapper` still reads and writes properties.
//!
//! Security: the proxy is set to packet privacy with impersonation, as csi-proxy master sets its process security
//! (`kubernetes-csi/csi-proxy@eeba470 pkg/wmi/wmi.go:46,220`); a namespace that requires encryption refuses less
//! (MS-WMI §2.2.30.3), and it costs nothing locally. Class definitions (`GetObject(class)`, needed for every method
//! call's input signature) are fetched once per connection, not once per call.
#![allow(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::collections::HashMap;

use windows::Win32::System::Com::{
    CLSCTX_INPROC_SERVER, CoCreateInstance, CoSetProxyBlanket, EOAC_NONE, IErrorInfo,
    RPC_C_AUTHN_LEVEL_PKT_PRIVACY, RPC_C_IMP_LEVEL_IMPERSONATE,
};
use windows::Win32::System::Rpc::{RPC_C_AUTHN_WINNT, RPC_C_AUTHZ_NONE};
use windows::Win32::System::Wmi::{
    IWbemClassObject, IWbemLocator, IWbemServices, WBEM_FLAG_CONNECT_USE_MAX_WAIT,
    WBEM_FLAG_FORWARD_ONLY, WBEM_FLAG_RETURN_IMMEDIATELY, WBEM_FLAG_RETURN_WBEM_COMPLETE,
    WBEM_INFINITE, WbemLocator,
};
use windows::core::{BSTR, Interface};
use wmi::IWbemClassWrapper;

use crate::codes::{HResult, HResultCode};

/// A failed COM call: its HRESULT and what the thread's error object held.
pub(crate) struct Failure {
    /// The HRESULT.
    pub(crate) hresult: HResult,
    /// The error object as a WMI object (`MSFT_WmiError`, `__ExtendedStatus`), when it is one.
    pub(crate) object: Option<IWbemClassWrapper>,
    /// `IErrorInfo::GetDescription`, when the error object is not a WMI object.
    pub(crate) description: Option<String>,
}

impl Failure {
    fn bare(hresult: HResultCode) -> Self {
        Self {
            hresult: HResult(hresult.code()),
            object: None,
            description: None,
        }
    }
}

impl From<windows::core::Error> for Failure {
    fn from(e: windows::core::Error) -> Self {
        let hresult = HResult::from_i32(e.code().0);
        let raw = e.as_ptr();
        if raw.is_null() {
            return Self {
                hresult,
                object: None,
                description: None,
            };
        }
        // SAFETY: `raw` is the `IErrorInfo` that `e` owns (windows-result captured it with `GetErrorInfo`); it stays
        // alive while `e` does, and the borrow does not outlive this function. `cast` adds its own reference.
        let info = unsafe { IErrorInfo::from_raw_borrowed(&raw) };
        let Some(info) = info else {
            return Self {
                hresult,
                object: None,
                description: None,
            };
        };
        match info.cast::<IWbemClassObject>() {
            Ok(object) => Self {
                hresult,
                object: Some(IWbemClassWrapper::new(object)),
                description: None,
            },
            Err(_) => Self {
                hresult,
                object: None,
                // SAFETY: a plain COM call on a live interface; the BSTR it returns is owned by the result.
                description: unsafe { info.GetDescription() }
                    .ok()
                    .map(|d| d.to_string())
                    .filter(|d| !d.is_empty()),
            },
        }
    }
}

/// One namespace's `IWbemServices` on this thread, with its class definitions.
pub(crate) struct Services {
    svc: IWbemServices,
    classes: HashMap<&'static str, IWbemClassWrapper>,
}

impl Services {
    /// `ConnectServer` to `namespace` (within WMI's maximum wait, `WBEM_FLAG_CONNECT_USE_MAX_WAIT`), then the
    /// proxy blanket at packet privacy. The thread must be in the MTA.
    pub(crate) fn connect(namespace: &str) -> Result<Self, Failure> {
        // SAFETY: creates the in-process WbemLocator COM object; the thread is in the MTA (`com::Apartment`).
        let locator: IWbemLocator =
            unsafe { CoCreateInstance(&WbemLocator, None, CLSCTX_INPROC_SERVER) }?;
        // SAFETY: every argument is an owned BSTR (empty: the current user, locale and authority) or a plain value;
        // no context object.
        let svc = unsafe {
            locator.ConnectServer(
                &BSTR::from(namespace),
                &BSTR::new(),
                &BSTR::new(),
                &BSTR::new(),
                WBEM_FLAG_CONNECT_USE_MAX_WAIT.0,
                &BSTR::new(),
                None,
            )
        }?;
        // SAFETY: sets the security of the proxy just obtained; no server principal name and no authentication
        // identity (the process token's), as the wmi crate and csi-proxy do.
        unsafe {
            CoSetProxyBlanket(
                &svc,
                RPC_C_AUTHN_WINNT,
                RPC_C_AUTHZ_NONE,
                None,
                RPC_C_AUTHN_LEVEL_PKT_PRIVACY,
                RPC_C_IMP_LEVEL_IMPERSONATE,
                None,
                EOAC_NONE,
            )
        }?;
        Ok(Self {
            svc,
            classes: HashMap::new(),
        })
    }

    /// `ExecQuery("WQL", query)` forward-only, every row.
    pub(crate) fn query(&self, query: &str) -> Result<Vec<IWbemClassWrapper>, Failure> {
        // SAFETY: owned BSTR arguments, no context; the enumerator returned is owned.
        let rows = unsafe {
            self.svc.ExecQuery(
                &BSTR::from("WQL"),
                &BSTR::from(query),
                WBEM_FLAG_FORWARD_ONLY | WBEM_FLAG_RETURN_IMMEDIATELY,
                None,
            )
        }?;
        let mut out = Vec::new();
        loop {
            let mut objects = [None; 1];
            let mut returned = 0;
            // SAFETY: `objects` has room for the one object asked for; `returned` is a valid out-pointer.
            let hr = unsafe { rows.Next(WBEM_INFINITE, &mut objects, &mut returned) };
            hr.ok()?;
            if returned == 0 {
                return Ok(out);
            }
            let [object] = objects;
            out.push(IWbemClassWrapper::new(
                object.ok_or_else(|| Failure::bare(HResultCode::WbemEFailed))?,
            ));
        }
    }

    /// The definition of `class` (`GetObject`), fetched once per connection.
    pub(crate) fn class(&mut self, class: &'static str) -> Result<&IWbemClassWrapper, Failure> {
        if !self.classes.contains_key(class) {
            let mut object = None;
            // SAFETY: owned BSTR, no context, a valid out-pointer for the object; no call-result object.
            unsafe {
                self.svc.GetObject(
                    &BSTR::from(class),
                    WBEM_FLAG_RETURN_WBEM_COMPLETE,
                    None,
                    Some(&mut object),
                    None,
                )
            }?;
            let object = object.ok_or_else(|| Failure::bare(HResultCode::WbemENotFound))?;
            self.classes.insert(class, IWbemClassWrapper::new(object));
        }
        Ok(&self.classes[class])
    }

    /// Synchronous `ExecMethod` on `object_path` (an instance's `__PATH`, or the class name for a static method).
    pub(crate) fn exec(
        &self,
        object_path: &str,
        method: &str,
        in_params: Option<&IWbemClassWrapper>,
    ) -> Result<Option<IWbemClassWrapper>, Failure> {
        let mut out = None;
        // SAFETY: owned BSTRs, no context, the in-parameters object (if any) borrowed for the call, a valid
        // out-pointer for the out-parameters; no call-result object (synchronous).
        unsafe {
            self.svc.ExecMethod(
                &BSTR::from(object_path),
                &BSTR::from(method),
                WBEM_FLAG_RETURN_WBEM_COMPLETE,
                None,
                in_params.map(|p| &p.inner),
                Some(&mut out),
                None,
            )
        }?;
        Ok(out.map(IWbemClassWrapper::new))
    }
}
