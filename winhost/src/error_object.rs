//! The extended error object WMI attaches to a failed call, and the code it carries.
//!
//! A COM call that fails leaves an error object on the calling thread: "to access the error information,
//! applications can call the COM function `GetErrorInfo` immediately after an error is indicated by an interface
//! method" (Microsoft, *Handling Errors* in the WMI SDK; *IWbemServices::ExecMethod*: "on failure, you can obtain any
//! available information from the COM function GetErrorInfo"), and for WMI it is an `IWbemClassObject` (the
//! `IErrorInfo`'s other face). Which class:
//!
//! * `MSFT_WmiError` (a `CIM_Error`) from the Management Infrastructure providers — the Storage, SMB and iSCSI
//!   classes the native backend calls. It carries `error_Code`, `error_Type` (`"MI"`, `"HRESULT"` or `"WIN32"`:
//!   `MI_Context_PostError`'s result types, spelled `Win32` in some headers), `error_Category`, `Message` and
//!   `MessageID`. PowerShell prints that `MessageID` as the `FullyQualifiedErrorId` of the `CimException`: `Windows
//!   System Error 1219,New-SmbGlobalMapping` (csi-driver-smb #219), `HRESULT 0xefff0029,Connect-IscsiTarget` (public
//!   PowerShell transcripts; reference §2.5) — which is how the Win32 and iSCSI codes of those providers' failures
//!   are known to travel.
//! * `__ExtendedStatus` from classic providers and from WMI itself (`StatusCode`, `Description`, `Operation`,
//!   `ParameterInfo`, `ProviderName`; Microsoft's `__ExtendedStatus` class page).
//!
//! Which HRESULT the failed `ExecMethod` itself returns next to such an object is **unverified** (reference §5 item
//! 1): `WBEM_E_FAILED` is the likely carrier, and then only the object says what happened.
//! [`ErrorObject::cause`] reads the code from the object; [`crate::CallError::kind`] classifies by it first.

use std::fmt;

use crate::codes::{CimStatusCode, HResult, IscsiStatus, Win32Error};
use crate::error::ErrorKind;

/// The error object of a failed WMI call (`MSFT_WmiError` or `__ExtendedStatus`), as read; every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct ErrorObject {
    /// `__CLASS` (`MSFT_WmiError`, `__ExtendedStatus`, or a provider's subclass).
    pub class: Option<String>,
    /// `MSFT_WmiError.error_Code`.
    pub error_code: Option<u32>,
    /// `MSFT_WmiError.error_Type`: `MI`, `HRESULT` or `WIN32`/`Win32`.
    pub error_type: Option<String>,
    /// `MSFT_WmiError.error_Category` (`MI_ErrorCategory`).
    pub error_category: Option<u16>,
    /// `CIM_Error.Message`, else `__ExtendedStatus.Description`.
    pub message: Option<String>,
    /// `CIM_Error.MessageID` (`Windows System Error 1219`, `HRESULT 0xefff003f`, `StorageWMI 40001`).
    pub message_id: Option<String>,
    /// `CIM_Error.CIMStatusCode`.
    pub cim_status_code: Option<u32>,
    /// `__ExtendedStatus.StatusCode` (a WMI HRESULT, or a provider's own code).
    pub status_code: Option<u32>,
    /// `__ExtendedStatus.Operation` (which COM API WMI was running).
    pub operation: Option<String>,
    /// `__ExtendedStatus.ProviderName`.
    pub provider_name: Option<String>,
}

/// The code an error object names, by its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCause {
    /// A Win32 error (`error_Type` `WIN32`, or `MessageID` `Windows System Error N`).
    Win32(Win32Error),
    /// An iSCSI initiator status (an `HRESULT`-typed `error_Code` in iscsierr.h's `0xEFFF….`/`0xAFFF….` range).
    Iscsi(IscsiStatus),
    /// Another HRESULT (which may itself wrap a Win32 error).
    HResult(HResult),
    /// An `MI_Result` (the CIM status codes).
    Mi(CimStatusCode),
}

impl ErrorCause {
    /// The classification.
    pub fn kind(self) -> ErrorKind {
        match self {
            Self::Win32(w) => ErrorKind::from_win32(w),
            Self::Iscsi(i) => ErrorKind::from_iscsi(i),
            Self::HResult(h) => ErrorKind::from_hresult(h),
            Self::Mi(c) => match c {
                CimStatusCode::AccessDenied => ErrorKind::AccessDenied,
                CimStatusCode::NotFound => ErrorKind::NotFound,
                CimStatusCode::AlreadyExists => ErrorKind::AlreadyExists,
                CimStatusCode::InvalidNamespace | CimStatusCode::InvalidClass => {
                    ErrorKind::Unavailable
                }
                _ => ErrorKind::Other,
            },
        }
    }

    /// The Win32 error, whichever way it is carried.
    pub fn win32(self) -> Option<Win32Error> {
        match self {
            Self::Win32(w) => Some(w),
            Self::HResult(h) => h.win32(),
            Self::Iscsi(IscsiStatus::Unknown(raw)) if raw <= 0xFFFF => {
                Some(Win32Error::from_code(raw))
            }
            _ => None,
        }
    }
}

/// An `HRESULT`-typed code: an iSCSI status when iscsierr.h documents it, else a plain HRESULT.
fn hresult_cause(code: u32) -> ErrorCause {
    match HResult(code).iscsi() {
        Some(status) => ErrorCause::Iscsi(status),
        None => ErrorCause::HResult(HResult(code)),
    }
}

/// A number as printed in a `MessageID`: decimal, or hex after `0x`.
fn number(text: &str) -> Option<u32> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text
            .parse::<u32>()
            .ok()
            .or_else(|| text.parse::<i32>().ok().map(|n| n as u32)),
    }
}

impl ErrorObject {
    /// Whether nothing was read.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The code the object names: `error_Code` as its `error_Type` says; else the `MessageID` (`Windows System
    /// Error N`, `HRESULT 0x…`, `MI RESULT N`); else `__ExtendedStatus.StatusCode` (an HRESULT). `None` when it names
    /// none.
    pub fn cause(&self) -> Option<ErrorCause> {
        if let Some(code) = self.error_code {
            let kind = self.error_type.as_deref().map(str::trim).unwrap_or("");
            if kind.eq_ignore_ascii_case("WIN32") {
                return Some(ErrorCause::Win32(Win32Error::from_code(code)));
            }
            if kind.eq_ignore_ascii_case("HRESULT") {
                return Some(hresult_cause(code));
            }
            if kind.eq_ignore_ascii_case("MI") {
                return Some(ErrorCause::Mi(CimStatusCode::from_code(code)));
            }
        }
        if let Some(id) = self.message_id.as_deref().map(str::trim) {
            let lower = id.to_ascii_lowercase();
            if let Some(n) = lower.strip_prefix("windows system error").and_then(number) {
                return Some(ErrorCause::Win32(Win32Error::from_code(n)));
            }
            if let Some(n) = lower.strip_prefix("hresult").and_then(number) {
                return Some(hresult_cause(n));
            }
            if let Some(n) = lower.strip_prefix("mi result").and_then(number) {
                return Some(ErrorCause::Mi(CimStatusCode::from_code(n)));
            }
        }
        if let Some(code) = self.error_code {
            // A type this table does not know: a Win32-sized number is taken as one, anything else as an HRESULT.
            return Some(if code <= 0xFFFF {
                ErrorCause::Win32(Win32Error::from_code(code))
            } else {
                hresult_cause(code)
            });
        }
        self.status_code
            .filter(|&c| c != 0)
            .map(|c| ErrorCause::HResult(HResult(c)))
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(id) = &self.message_id {
            parts.push(id.clone());
        }
        if let Some(m) = &self.message {
            parts.push(m.trim().to_owned());
        }
        if parts.is_empty()
            && let Some(cause) = self.cause()
        {
            parts.push(match cause {
                ErrorCause::Win32(w) => format!("Win32 error {w}"),
                ErrorCause::Iscsi(i) => format!("iSCSI {i}"),
                ErrorCause::HResult(h) => h.to_string(),
                ErrorCause::Mi(c) => c.to_string(),
            });
        }
        if let Some(op) = &self.operation {
            parts.push(format!("during {op}"));
        }
        if parts.is_empty() {
            f.write_str(self.class.as_deref().unwrap_or("an empty error object"))
        } else {
            f.write_str(&parts.join(": "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wmi_error(code: u32, kind: &str, id: &str) -> ErrorObject {
        ErrorObject {
            class: Some("MSFT_WmiError".into()),
            error_code: Some(code),
            error_type: Some(kind.into()),
            message_id: Some(id.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_smb_and_iscsi_providers_codes_are_read_as_powershell_shows_them() {
        let e = wmi_error(1219, "Win32", "Windows System Error 1219");
        assert_eq!(
            e.cause(),
            Some(ErrorCause::Win32(Win32Error::SessionCredentialConflict))
        );
        assert_eq!(
            e.cause().map(ErrorCause::kind),
            Some(ErrorKind::MultipleConnections)
        );
        let e = wmi_error(0xEFFF_003F, "HRESULT", "HRESULT 0xefff003f");
        assert_eq!(
            e.cause(),
            Some(ErrorCause::Iscsi(IscsiStatus::TargetAlreadyLoggedIn))
        );
        let e = wmi_error(6, "MI", "MI RESULT 6");
        assert_eq!(e.cause().map(ErrorCause::kind), Some(ErrorKind::NotFound));
        // A type spelled as MI_Context_PostError documents it.
        let e = wmi_error(1326, "WIN32", "");
        assert_eq!(
            e.cause().map(ErrorCause::kind),
            Some(ErrorKind::LogonFailure)
        );
    }

    #[test]
    fn a_message_id_alone_names_the_code() {
        for (id, kind) in [
            ("Windows System Error 53", ErrorKind::NetworkPathNotFound),
            ("windows system error 1312", ErrorKind::LogonFailure),
            ("HRESULT 0xefff0009", ErrorKind::LogonFailure),
            ("HRESULT 0x80070005", ErrorKind::AccessDenied),
        ] {
            let e = ErrorObject {
                message_id: Some(id.into()),
                ..Default::default()
            };
            assert_eq!(e.cause().map(ErrorCause::kind), Some(kind), "{id}");
        }
        let e = ErrorObject {
            message_id: Some("Windows System Error 1312".into()),
            ..Default::default()
        };
        assert_eq!(
            e.cause().and_then(ErrorCause::win32).map(|w| w.code()),
            Some(1312)
        );
    }

    #[test]
    fn an_extended_status_names_its_status_code_and_nothing_is_none() {
        let e = ErrorObject {
            class: Some("__ExtendedStatus".into()),
            status_code: Some(0x8004_1002),
            message: Some("Not found ".into()),
            operation: Some("GetObject".into()),
            ..Default::default()
        };
        assert_eq!(e.cause().map(ErrorCause::kind), Some(ErrorKind::NotFound));
        assert_eq!(e.to_string(), "Not found: during GetObject");
        assert_eq!(ErrorObject::default().cause(), None);
        assert!(ErrorObject::default().is_empty());
        assert_eq!(
            wmi_error(1219, "Win32", "Windows System Error 1219").to_string(),
            "Windows System Error 1219"
        );
        let bare = ErrorObject {
            error_code: Some(67),
            ..Default::default()
        };
        assert_eq!(
            bare.to_string(),
            "Win32 error The network name cannot be found. (67)"
        );
    }
}
