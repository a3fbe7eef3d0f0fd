//! Why a facade call failed, and the classification the backend's logic decides on.

use crate::codes::{HResult, HResultCode, IscsiStatus, StorageReturn, Win32Error};
use crate::error_object::ErrorObject;

/// The result of a facade call.
pub type CallResult<T> = Result<T, CallError>;

/// A facade call that did not produce an answer. A method that ran and answered with a non-zero `ReturnValue` is
/// *not* an error at this level: it is a [`crate::MethodOutcome`] the logic above interprets.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "remote", derive(serde::Serialize))]
pub enum CallError {
    /// A COM/WMI call failed with an HRESULT (connect, query, `GetObject`, `ExecMethod`), with the error object WMI
    /// left on the thread when there was one ([`crate::error_object`]: what the provider said, e.g. `Windows System
    /// Error 1219`).
    #[error("{call}: {hresult}{}", object_suffix(.error))]
    Wmi {
        /// What was called, e.g. `ExecMethod MSFT_Disk.Online` (never an argument value).
        call: String,
        /// The HRESULT.
        hresult: HResult,
        /// The extended error object (`MSFT_WmiError`, `__ExtendedStatus`), when WMI attached one.
        error: Option<Box<ErrorObject>>,
    },
    /// A Win32 function failed.
    #[error("{function}({path}): Win32 error {code}")]
    Win32 {
        /// The function, e.g. `CreateDirectoryW`.
        function: &'static str,
        /// The path it was called on.
        path: String,
        /// The error.
        code: Win32Error,
    },
    /// The caller's deadline passed. `started: false`: nothing was done. `started: true`: the call was running and
    /// may still complete on the host (outcome unknown: re-check state before acting on it).
    #[error("deadline exceeded ({})", started_text(*started))]
    DeadlineExceeded {
        /// Whether the host call had started.
        started: bool,
    },
    /// The caller cancelled. `started` as for [`CallError::DeadlineExceeded`].
    #[error("cancelled ({})", started_text(*started))]
    Cancelled {
        /// Whether the host call had started.
        started: bool,
    },
    /// The host lacks the WMI namespace, class or method the call needs (found by the start-up probe). The call was
    /// refused without touching COM.
    #[error("{what} is not available on this host")]
    Unsupported {
        /// What is missing, e.g. `ROOT\Microsoft\Windows\SMB MSFT_SmbGlobalMapping`.
        what: String,
    },
    /// The implementation cannot make calls at all (its worker threads could not initialise COM, or it shut down).
    #[error("host calls unavailable: {0}")]
    Unavailable(String),
    /// The host answered with something the facade cannot read (a property missing or of an unexpected type).
    #[error("{call}: unexpected answer: {detail}")]
    Decode {
        /// What was called.
        call: String,
        /// What was wrong.
        detail: String,
    },
}

fn object_suffix(error: &Option<Box<ErrorObject>>) -> String {
    match error {
        Some(e) if !e.is_empty() => format!(": {e}"),
        _ => String::new(),
    }
}

fn started_text(started: bool) -> &'static str {
    if started {
        "the host call had started and may still complete: outcome unknown"
    } else {
        "the host call was not started"
    }
}

impl CallError {
    /// A Win32 failure.
    pub fn win32(function: &'static str, path: impl Into<String>, code: Win32Error) -> Self {
        Self::Win32 {
            function,
            path: path.into(),
            code,
        }
    }

    /// A WMI failure.
    pub fn wmi(call: impl Into<String>, hresult: HResult) -> Self {
        Self::Wmi {
            call: call.into(),
            hresult,
            error: None,
        }
    }

    /// A WMI failure with the error object WMI attached to it.
    pub fn wmi_with(call: impl Into<String>, hresult: HResult, error: ErrorObject) -> Self {
        Self::Wmi {
            call: call.into(),
            hresult,
            error: (!error.is_empty()).then(|| Box::new(error)),
        }
    }

    /// The error object WMI attached, if any.
    pub fn error_object(&self) -> Option<&ErrorObject> {
        match self {
            Self::Wmi { error, .. } => error.as_deref(),
            _ => None,
        }
    }

    /// An unreadable answer.
    pub fn decode(call: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Decode {
            call: call.into(),
            detail: detail.into(),
        }
    }

    /// The Win32 code behind the error, whichever layer carried it (a Win32 call, or an HRESULT wrapping one).
    pub fn win32_code(&self) -> Option<Win32Error> {
        match self {
            Self::Win32 { code, .. } => Some(*code),
            Self::Wmi { hresult, error, .. } => error
                .as_ref()
                .and_then(|e| e.cause())
                .and_then(|c| c.win32())
                .or_else(|| hresult.win32()),
            _ => None,
        }
    }

    /// The iSCSI initiator status behind the error: the error object's `HRESULT 0xEFFF….` code, or an HRESULT that is
    /// one (how the iSCSI provider raises a failure; reference §2.5).
    pub fn iscsi_status(&self) -> Option<IscsiStatus> {
        match self {
            Self::Wmi { hresult, error, .. } => error
                .as_ref()
                .and_then(|e| e.cause())
                .and_then(|c| match c {
                    crate::error_object::ErrorCause::Iscsi(i) => Some(i),
                    _ => None,
                })
                .or_else(|| hresult.iscsi()),
            _ => None,
        }
    }

    /// Whether the host may have acted even though no answer arrived (a started call that outlived its deadline or
    /// was cancelled). The logic above must re-check state before relying on either outcome.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            Self::DeadlineExceeded { started: true } | Self::Cancelled { started: true }
        )
    }

    /// The classification (`reference/windows-native-apis.md` §1.4, "Mapping to HostErrorKind").
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Win32 { code, .. } => ErrorKind::from_win32(*code),
            // What the provider said wins over the carrier HRESULT (`WBEM_E_FAILED` says nothing), unless it names
            // nothing more specific than the HRESULT does.
            Self::Wmi { hresult, error, .. } => error
                .as_ref()
                .and_then(|e| e.cause())
                .map(|c| c.kind())
                .filter(|k| *k != ErrorKind::Other)
                .unwrap_or_else(|| ErrorKind::from_hresult(*hresult)),
            Self::DeadlineExceeded { .. } => ErrorKind::DeadlineExceeded,
            Self::Cancelled { .. } => ErrorKind::Cancelled,
            Self::Unsupported { .. } | Self::Unavailable(_) => ErrorKind::Unavailable,
            Self::Decode { .. } => ErrorKind::Other,
        }
    }
}

/// What kind of failure, for the backend's decisions (mirrors the driver's `HostErrorKind`, plus `Cancelled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The object does not exist: Win32 2/3, `WBEM_E_NOT_FOUND`, iSCSI `NOT_FOUND`/`TARGET_NOT_FOUND`/
    /// `PORTAL_NOT_FOUND`. (An empty query result is not an error at all: the caller sees zero rows.)
    NotFound,
    /// It already exists: Win32 183/80.
    AlreadyExists,
    /// A directory is not empty: Win32 145.
    NotEmpty,
    /// Another credential is connected to the same server: Win32 1219.
    MultipleConnections,
    /// The server was not found: Win32 53.
    NetworkPathNotFound,
    /// The share was not found: Win32 67.
    NetworkNameNotFound,
    /// A local name is in use by a stale mapping: Win32 85.
    StaleMapping,
    /// A refused logon: bad user name or password (Win32 1326/86), a user name without a domain (1312), an account
    /// disabled, expired, locked out or restricted (`Win32Error::is_logon_refused`); iSCSI authentication/authorization
    /// failures.
    LogonFailure,
    /// Access denied: Win32 5, storage 40001, `WBEM_E_ACCESS_DENIED`.
    AccessDenied,
    /// The path's syntax is invalid: Win32 123/161.
    InvalidPath,
    /// WMI or the service behind it is unavailable: `WBEM_E_INVALID_NAMESPACE`, `WBEM_E_PROVIDER_LOAD_FAILURE`,
    /// `RPC_S_SERVER_UNAVAILABLE`, `WBEM_E_SHUTTING_DOWN`, `CO_E_*`, `RPC_E_DISCONNECTED`, the iSCSI service not
    /// running; also a class the probe found missing.
    Unavailable,
    /// The host's own timeout (`WBEM_E_TIMED_OUT`, storage 3) or the caller's deadline.
    DeadlineExceeded,
    /// The caller cancelled.
    Cancelled,
    /// Anything else (the message carries the number).
    Other,
}

impl ErrorKind {
    /// The kind of a Win32 error.
    pub fn from_win32(code: Win32Error) -> Self {
        use Win32Error as W;
        match code {
            W::FileNotFound | W::PathNotFound => Self::NotFound,
            W::AlreadyExists | W::FileExists => Self::AlreadyExists,
            W::DirNotEmpty => Self::NotEmpty,
            W::SessionCredentialConflict => Self::MultipleConnections,
            W::BadNetPath => Self::NetworkPathNotFound,
            W::BadNetName => Self::NetworkNameNotFound,
            W::AlreadyAssigned => Self::StaleMapping,
            // 1312 ("a specified logon session does not exist") is what New-SmbGlobalMapping answers for a user name
            // without a domain (csi-driver-smb known issues; MicrosoftDocs/windows-powershell-docs#2655): the
            // credentials are the problem, as with 1326.
            w if w.is_logon_refused() => Self::LogonFailure,
            W::AccessDenied => Self::AccessDenied,
            W::InvalidName | W::BadPathname => Self::InvalidPath,
            _ => Self::Other,
        }
    }

    /// The kind of an HRESULT (a wrapped Win32 code or iSCSI status is classified as such).
    pub fn from_hresult(hresult: HResult) -> Self {
        use HResultCode as H;
        match hresult.code() {
            H::WbemENotFound => Self::NotFound,
            H::WbemEAccessDenied => Self::AccessDenied,
            H::WbemEInvalidNamespace
            | H::WbemEProviderLoadFailure
            | H::WbemEShuttingDown
            | H::WbemETransportFailure
            | H::CoENotInitialized
            | H::RpcEDisconnected
            | H::RpcSServerUnavailable => Self::Unavailable,
            H::WbemETimedOut => Self::DeadlineExceeded,
            H::WbemEAlreadyExists => Self::AlreadyExists,
            H::Unknown(_) => {
                if let Some(w) = hresult.win32() {
                    Self::from_win32(w)
                } else if let Some(i) = hresult.iscsi() {
                    Self::from_iscsi(i)
                } else {
                    Self::Other
                }
            }
            _ => Self::Other,
        }
    }

    /// The kind of a storage method's `ReturnValue`.
    pub fn from_storage(code: StorageReturn) -> Self {
        match code {
            StorageReturn::AccessDenied => Self::AccessDenied,
            StorageReturn::Timeout => Self::DeadlineExceeded,
            _ => Self::Other,
        }
    }

    /// The kind of an iSCSI status (our mapping of iscsierr.h's meanings).
    pub fn from_iscsi(status: IscsiStatus) -> Self {
        use IscsiStatus as I;
        match status {
            I::NotFound
            | I::TargetNotFound
            | I::PortalNotFound
            | I::InitiatorNotFound
            | I::DeviceNotFound => Self::NotFound,
            I::AuthenticationFailure
            | I::AuthorizationFailure
            | I::InvalidChapSecret
            | I::InvalidTargetChapSecret
            | I::InvalidChapUserName => Self::LogonFailure,
            I::ServiceNotRunning | I::ServiceUnavailable | I::ServiceDidNotRespond => {
                Self::Unavailable
            }
            I::TargetAlreadyLoggedIn | I::SessionAlreadyExists | I::TargetPortalAlreadyExists => {
                Self::AlreadyExists
            }
            I::Unknown(raw) if raw <= 0xFFFF => Self::from_win32(Win32Error::from_code(raw)),
            _ => Self::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn win32_codes_follow_the_reference_table() {
        let cases = [
            (2, ErrorKind::NotFound),
            (3, ErrorKind::NotFound),
            (183, ErrorKind::AlreadyExists),
            (80, ErrorKind::AlreadyExists),
            (145, ErrorKind::NotEmpty),
            (1219, ErrorKind::MultipleConnections),
            (53, ErrorKind::NetworkPathNotFound),
            (67, ErrorKind::NetworkNameNotFound),
            (85, ErrorKind::StaleMapping),
            (1326, ErrorKind::LogonFailure),
            (86, ErrorKind::LogonFailure),
            (1312, ErrorKind::LogonFailure),
            (1327, ErrorKind::LogonFailure),
            (1331, ErrorKind::LogonFailure),
            (1793, ErrorKind::LogonFailure),
            (1907, ErrorKind::LogonFailure),
            (1909, ErrorKind::LogonFailure),
            (5, ErrorKind::AccessDenied),
            (123, ErrorKind::InvalidPath),
            (161, ErrorKind::InvalidPath),
            (4390, ErrorKind::Other),
            (9999, ErrorKind::Other),
        ];
        for (code, kind) in cases {
            let err = CallError::win32("F", "C:\\x", Win32Error::from_code(code));
            assert_eq!(err.kind(), kind, "Win32 {code}");
            // The same code wrapped in an HRESULT classifies the same way.
            let wrapped = CallError::wmi("ExecMethod X.Y", HResult(0x8007_0000 | code));
            assert_eq!(wrapped.kind(), kind, "HRESULT_FROM_WIN32({code})");
        }
    }

    #[test]
    fn hresults_follow_the_reference_table() {
        let cases = [
            (0x8004_1002, ErrorKind::NotFound),
            (0x8004_1003, ErrorKind::AccessDenied),
            (0x8004_100E, ErrorKind::Unavailable),
            (0x8004_1013, ErrorKind::Unavailable),
            (0x8007_06BA, ErrorKind::Unavailable),
            (0x8004_1033, ErrorKind::Unavailable),
            (0x8004_01F0, ErrorKind::Unavailable),
            (0x8004_1069, ErrorKind::DeadlineExceeded),
            (0x8004_1017, ErrorKind::Other),
            (0xEFFF_003E, ErrorKind::Unavailable),
            (0xEFFF_0009, ErrorKind::LogonFailure),
            (0xEFFF_0029, ErrorKind::NotFound),
        ];
        for (raw, kind) in cases {
            assert_eq!(ErrorKind::from_hresult(HResult(raw)), kind, "0x{raw:08X}");
        }
    }

    /// `WBEM_E_FAILED` says nothing; the error object WMI attached says what the provider meant.
    #[test]
    fn the_error_object_classifies_what_its_hresult_does_not() {
        let call = "ExecMethod MSFT_SmbGlobalMapping.Create";
        let bare = CallError::wmi(call, HResult(0x8004_1001));
        assert_eq!(bare.kind(), ErrorKind::Other);
        assert_eq!(bare.win32_code(), None);
        let object = ErrorObject {
            class: Some("MSFT_WmiError".into()),
            error_code: Some(1219),
            error_type: Some("Win32".into()),
            message_id: Some("Windows System Error 1219".into()),
            message: Some("Multiple connections to a server ...".into()),
            ..Default::default()
        };
        let e = CallError::wmi_with(call, HResult(0x8004_1001), object);
        assert_eq!(e.kind(), ErrorKind::MultipleConnections);
        assert_eq!(e.win32_code(), Some(Win32Error::SessionCredentialConflict));
        assert!(e.error_object().is_some());
        assert_eq!(
            e.to_string(),
            "ExecMethod MSFT_SmbGlobalMapping.Create: WBEM_E_FAILED: the call failed. (0x80041001): Windows System \
             Error 1219: Multiple connections to a server ..."
        );
        let login = CallError::wmi_with(
            "ExecMethod MSFT_iSCSITarget.Connect",
            HResult(0x8004_1001),
            ErrorObject {
                error_code: Some(0xEFFF_003F),
                error_type: Some("HRESULT".into()),
                ..Default::default()
            },
        );
        assert_eq!(
            login.iscsi_status(),
            Some(IscsiStatus::TargetAlreadyLoggedIn)
        );
        assert_eq!(login.kind(), ErrorKind::AlreadyExists);
        // An HRESULT that is itself the status still counts; an object naming nothing leaves the HRESULT's kind.
        assert_eq!(
            CallError::wmi("x", HResult(0xEFFF_0029)).iscsi_status(),
            Some(IscsiStatus::TargetNotFound)
        );
        let vague = CallError::wmi_with(
            "x",
            HResult(0x8004_1033),
            ErrorObject {
                message: Some("shutting down".into()),
                ..Default::default()
            },
        );
        assert_eq!(vague.kind(), ErrorKind::Unavailable);
        assert!(
            CallError::wmi_with("x", HResult(1), ErrorObject::default())
                .error_object()
                .is_none()
        );
    }

    #[test]
    fn return_codes_classify() {
        assert_eq!(
            ErrorKind::from_storage(StorageReturn::AccessDenied),
            ErrorKind::AccessDenied
        );
        assert_eq!(
            ErrorKind::from_storage(StorageReturn::Timeout),
            ErrorKind::DeadlineExceeded
        );
        assert_eq!(
            ErrorKind::from_storage(StorageReturn::CacheOutOfDate),
            ErrorKind::Other
        );
        assert_eq!(
            ErrorKind::from_iscsi(IscsiStatus::Unknown(1326)),
            ErrorKind::LogonFailure
        );
        assert_eq!(
            ErrorKind::from_iscsi(IscsiStatus::TargetAlreadyLoggedIn),
            ErrorKind::AlreadyExists
        );
    }

    #[test]
    fn deadline_errors_say_whether_the_outcome_is_known() {
        assert!(CallError::DeadlineExceeded { started: true }.outcome_unknown());
        assert!(!CallError::DeadlineExceeded { started: false }.outcome_unknown());
        assert!(CallError::Cancelled { started: true }.outcome_unknown());
        assert!(
            CallError::DeadlineExceeded { started: true }
                .to_string()
                .contains("outcome unknown")
        );
        assert_eq!(
            CallError::win32("RemoveDirectoryW", "C:\\a", Win32Error::DirNotEmpty).to_string(),
            "RemoveDirectoryW(C:\\a): Win32 error The directory is not empty. (145)"
        );
        assert_eq!(
            CallError::wmi("ExecMethod X.Y", HResult(0x8007_0005)).win32_code(),
            Some(Win32Error::AccessDenied)
        );
    }
}
