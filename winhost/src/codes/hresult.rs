//! COM and WMI HRESULTs.

use std::fmt;

use super::code_table;
use super::{IscsiStatus, Win32Error};

code_table! {
    /// A COM/WMI HRESULT the native backend meets (as `u32`, the way the documentation prints them).
    ///
    /// Meanings: Microsoft's "WMI Error Constants" and `WbemErrorEnum` (wbemdisp.h) for the `WBEM_*` values; COM's
    /// winerror.h for `CO_E_*`/`RPC_*`. Where each appears: `reference/windows-native-apis.md` §1.3-§1.4 and §4.
    pub enum HResultCode: u32, "0x{:08X}" {
        WbemSTimedOut = 0x0004_0004 => "WBEM_S_TIMEDOUT: a semi-synchronous call timed out before returning an object.",
        WbemEFailed = 0x8004_1001 => "WBEM_E_FAILED: the call failed.",
        WbemENotFound = 0x8004_1002 => "WBEM_E_NOT_FOUND: the object could not be found.",
        WbemEAccessDenied = 0x8004_1003 => "WBEM_E_ACCESS_DENIED: the current user does not have permission to perform the action.",
        WbemEProviderFailure = 0x8004_1004 => "WBEM_E_PROVIDER_FAILURE: the provider has failed at some time other than during initialization.",
        WbemETypeMismatch = 0x8004_1005 => "WBEM_E_TYPE_MISMATCH: a type mismatch occurred.",
        WbemEOutOfMemory = 0x8004_1006 => "WBEM_E_OUT_OF_MEMORY: there was not enough memory for the operation.",
        WbemEInvalidParameter = 0x8004_1008 => "WBEM_E_INVALID_PARAMETER: one of the parameters to the call is not correct.",
        WbemENotAvailable = 0x8004_1009 => "WBEM_E_NOT_AVAILABLE: the resource, typically a remote server, is not currently available.",
        WbemENotSupported = 0x8004_100C => "WBEM_E_NOT_SUPPORTED: the feature or operation is not supported.",
        WbemEInvalidNamespace = 0x8004_100E => "WBEM_E_INVALID_NAMESPACE: the namespace specified could not be found.",
        WbemEInvalidObject = 0x8004_100F => "WBEM_E_INVALID_OBJECT: the specified instance is not valid.",
        WbemEInvalidClass = 0x8004_1010 => "WBEM_E_INVALID_CLASS: the specified class is not valid.",
        WbemEProviderNotFound = 0x8004_1011 => "WBEM_E_PROVIDER_NOT_FOUND: a provider referenced in the schema does not have a corresponding registration.",
        WbemEProviderLoadFailure = 0x8004_1013 => "WBEM_E_PROVIDER_LOAD_FAILURE: COM cannot locate a provider referenced in the schema.",
        WbemEInitializationFailure = 0x8004_1014 => "WBEM_E_INITIALIZATION_FAILURE: a component, such as a provider, failed to initialize for internal reasons.",
        WbemETransportFailure = 0x8004_1015 => "WBEM_E_TRANSPORT_FAILURE: a networking error occurred, preventing normal operation.",
        WbemEInvalidOperation = 0x8004_1016 => "WBEM_E_INVALID_OPERATION: the requested operation is not valid.",
        WbemEInvalidQuery = 0x8004_1017 => "WBEM_E_INVALID_QUERY: the query was not syntactically valid.",
        WbemEAlreadyExists = 0x8004_1019 => "WBEM_E_ALREADY_EXISTS: the object already exists.",
        WbemEProviderNotCapable = 0x8004_1024 => "WBEM_E_PROVIDER_NOT_CAPABLE: the provider cannot perform the requested operation.",
        WbemEInvalidMethod = 0x8004_102E => "WBEM_E_INVALID_METHOD: the requested method is not available.",
        WbemEInvalidMethodParameters = 0x8004_102F => "WBEM_E_INVALID_METHOD_PARAMETERS: the parameters provided for the method are not valid.",
        WbemECallCancelled = 0x8004_1032 => "WBEM_E_CALL_CANCELLED: the asynchronous delivery of the call was cancelled.",
        WbemEShuttingDown = 0x8004_1033 => "WBEM_E_SHUTTING_DOWN: the user requested an operation while WMI was shutting down.",
        WbemEInvalidObjectPath = 0x8004_103A => "WBEM_E_INVALID_OBJECT_PATH: the object path is not syntactically valid.",
        WbemETimedOut = 0x8004_1069 => "WBEM_E_TIMED_OUT: the call timed out.",
        CoENotInitialized = 0x8004_01F0 => "CO_E_NOTINITIALIZED: CoInitialize has not been called on this thread.",
        RpcEChangedMode = 0x8001_0106 => "RPC_E_CHANGED_MODE: the thread is already in another COM apartment.",
        RpcEDisconnected = 0x8001_0108 => "RPC_E_DISCONNECTED: the object invoked has disconnected from its clients.",
        RpcETooLate = 0x8001_0119 => "RPC_E_TOO_LATE: process-wide COM security has already been initialized.",
        RpcSServerUnavailable = 0x8007_06BA => "RPC_S_SERVER_UNAVAILABLE: the RPC server is unavailable.",
    }
}

/// An HRESULT as returned by a COM/WMI call, with its classification helpers.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct HResult(pub u32);

impl HResult {
    /// `FACILITY_WIN32`: an HRESULT that wraps a Win32 error code (`HRESULT_FROM_WIN32`).
    const FACILITY_WIN32: u32 = 7;

    /// From the signed form COM returns.
    pub const fn from_i32(raw: i32) -> Self {
        Self(raw as u32)
    }

    /// The documented constant, when this is one.
    pub const fn code(self) -> HResultCode {
        HResultCode::from_code(self.0)
    }

    /// Whether the severity bit is clear (`S_OK`, `S_FALSE`, `WBEM_S_*`).
    pub const fn is_success(self) -> bool {
        self.0 & 0x8000_0000 == 0
    }

    /// The Win32 error inside a `0x8007xxxx` HRESULT (`reference/windows-native-apis.md` §1.4: "Win32 errors wrapped as
    /// HRESULTs carry the Win32 code in the low 16 bits").
    pub const fn win32(self) -> Option<Win32Error> {
        if self.0 & 0xFFFF_0000 == 0x8000_0000 | (Self::FACILITY_WIN32 << 16) {
            Some(Win32Error::from_code(self.0 & 0xFFFF))
        } else {
            None
        }
    }

    /// The iSCSI initiator status, when the value is one of iscsierr.h's `ISDSC_*` codes (they are HRESULT-shaped:
    /// severity bits set, facility 0xFFF), as the iSCSI WMI methods may surface them (**unverified**: the reference
    /// says the exact carrier is unknown).
    pub const fn iscsi(self) -> Option<IscsiStatus> {
        match IscsiStatus::from_code(self.0) {
            IscsiStatus::Unknown(_) => None,
            known => Some(known),
        }
    }
}

impl fmt::Display for HResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let HResultCode::Unknown(_) = self.code() {
            if let Some(w) = self.win32() {
                return write!(f, "HRESULT 0x{:08X} (Win32 error {w})", self.0);
            }
            if let Some(i) = self.iscsi() {
                return write!(f, "HRESULT 0x{:08X} (iSCSI {i})", self.0);
            }
            write!(f, "HRESULT 0x{:08X}", self.0)
        } else {
            write!(f, "{}", self.code())
        }
    }
}

impl fmt::Debug for HResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HResult(0x{:08X})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn win32_errors_are_unwrapped_from_facility_7() {
        assert_eq!(HResult(0x8007_0005).win32(), Some(Win32Error::AccessDenied));
        assert_eq!(
            HResult(0x8007_04C3).win32(),
            Some(Win32Error::SessionCredentialConflict)
        );
        assert_eq!(HResult(0x8004_1002).win32(), None);
        assert_eq!(
            HResult::from_i32(-2_147_024_891).win32(),
            Some(Win32Error::AccessDenied)
        );
        // RPC_S_SERVER_UNAVAILABLE is itself facility 7 (Win32 1722): both views hold.
        assert_eq!(
            HResult(0x8007_06BA).code(),
            HResultCode::RpcSServerUnavailable
        );
        assert_eq!(
            HResult(0x8007_06BA).win32(),
            Some(Win32Error::Unknown(1722))
        );
    }

    #[test]
    fn iscsi_statuses_are_recognised() {
        assert_eq!(
            HResult(0xEFFF_003F).iscsi(),
            Some(IscsiStatus::TargetAlreadyLoggedIn)
        );
        assert_eq!(HResult(0x8004_1002).iscsi(), None);
        assert!(!HResult(0xEFFF_003F).is_success());
        assert!(HResult(0x0004_0004).is_success());
    }

    #[test]
    fn display_names_the_constant_or_the_wrapped_code() {
        assert_eq!(
            HResult(0x8004_100E).to_string(),
            "WBEM_E_INVALID_NAMESPACE: the namespace specified could not be found. (0x8004100E)"
        );
        assert_eq!(
            HResult(0x8007_0002).to_string(),
            "HRESULT 0x80070002 (Win32 error The system cannot find the file specified. (2))"
        );
        assert_eq!(HResult(0x8000_4005).to_string(), "HRESULT 0x80004005");
        assert_eq!(format!("{:?}", HResult(0x8004_1002)), "HResult(0x80041002)");
    }
}
