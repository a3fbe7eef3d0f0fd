//! What a WMI method returns: its `ReturnValue`, its `ExtendedStatus`, and its typed out-parameters.

use std::fmt;

use crate::codes::{CimStatusCode, IscsiStatus, StorageReturn, Win32Error};
use crate::error::ErrorKind;

/// A method's `ReturnValue` table.
pub trait ReturnCode: Copy + fmt::Debug + fmt::Display + PartialEq + Send + Sync + 'static {
    /// The raw value.
    fn raw(self) -> u32;
    /// Whether the method did what was asked (warnings included).
    fn is_success(self) -> bool;
    /// The classification of a failure.
    fn kind(self) -> ErrorKind;
}

impl ReturnCode for StorageReturn {
    fn raw(self) -> u32 {
        self.code()
    }
    fn is_success(self) -> bool {
        StorageReturn::is_success(self)
    }
    fn kind(self) -> ErrorKind {
        ErrorKind::from_storage(self)
    }
}

impl ReturnCode for IscsiStatus {
    fn raw(self) -> u32 {
        self.code()
    }
    fn is_success(self) -> bool {
        self.is_success_or_warning()
    }
    fn kind(self) -> ErrorKind {
        ErrorKind::from_iscsi(self)
    }
}

/// The `ReturnValue` of an `MSFT_SmbGlobalMapping` method. Microsoft documents none beyond `uint32`; 0 is success
/// (csi-proxy@master treats any other value as an error, reference §1.4). Whether a failure carries a Win32 code
/// (1219, 53, …) here or in the HRESULT is **unverified** (reference §5 item 1), so a value that is a known Win32
/// error is shown and classified as one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct SmbReturn(pub u32);

impl SmbReturn {
    /// Success.
    pub const SUCCESS: Self = Self(0);

    /// The value as a Win32 error, when it is one this crate documents.
    pub fn win32(self) -> Option<Win32Error> {
        match Win32Error::from_code(self.0) {
            Win32Error::Unknown(_) => None,
            known => Some(known),
        }
    }
}

impl From<u32> for SmbReturn {
    fn from(code: u32) -> Self {
        Self(code)
    }
}

impl fmt::Display for SmbReturn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.win32()) {
            (0, _) => f.write_str("success (0)"),
            (_, Some(w)) => write!(f, "return value {} (as a Win32 error: {w})", self.0),
            (raw, None) => write!(f, "return value {raw}"),
        }
    }
}

impl ReturnCode for SmbReturn {
    fn raw(self) -> u32 {
        self.0
    }
    fn is_success(self) -> bool {
        self.0 == 0
    }
    fn kind(self) -> ErrorKind {
        self.win32().map_or(ErrorKind::Other, ErrorKind::from_win32)
    }
}

/// `MSFT_StorageExtendedStatus` (a `CIM_Error`): the provider's detail on a Storage method's outcome.
///
/// The documentation types the out-parameter as a string "that contains an embedded `MSFT_StorageExtendedStatus`
/// object". Whether WMI hands it over as an embedded object or as text is **unverified** (reference §5 item 10): the
/// Windows implementation reads the fields of an object, and keeps text as [`ExtendedStatus::text`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct ExtendedStatus {
    /// `Message`.
    pub message: Option<String>,
    /// `MessageID`.
    pub message_id: Option<String>,
    /// `CIMStatusCode`.
    pub cim_status_code: Option<CimStatusCode>,
    /// `ErrorType` (`CIM_Error` value map; kept raw).
    pub error_type: Option<u16>,
    /// `PerceivedSeverity` (`CIM_Error` value map; kept raw).
    pub perceived_severity: Option<u16>,
    /// `RecommendedActions`.
    pub recommended_actions: Vec<String>,
    /// The raw text, when the provider returned the embedded instance as a string.
    pub text: Option<String>,
}

impl ExtendedStatus {
    /// Whether it carries nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl fmt::Display for ExtendedStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(m) = &self.message {
            parts.push(m.clone());
        }
        if let Some(id) = &self.message_id {
            parts.push(format!("MessageID {id}"));
        }
        if let Some(code) = self.cim_status_code {
            parts.push(code.to_string());
        }
        if !self.recommended_actions.is_empty() {
            parts.push(format!(
                "recommended: {}",
                self.recommended_actions.join("; ")
            ));
        }
        if let Some(text) = &self.text {
            parts.push(text.clone());
        }
        if parts.is_empty() {
            f.write_str("no extended status")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// What a WMI method call returned: the method ran (no COM error) and answered `code`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize))]
pub struct MethodOutcome<C, T = ()> {
    /// `Class.Method`, for messages.
    pub method: &'static str,
    /// The `ReturnValue`.
    pub code: C,
    /// `ExtendedStatus`, when the method has one and the provider filled it.
    pub extended_status: Option<ExtendedStatus>,
    /// The typed out-parameters (`Default` when the call failed and returned none).
    pub output: T,
}

/// The wire form of an outcome: its method name is interned on arrival (a `&'static str` cannot be borrowed from
/// the input).
#[cfg(feature = "remote")]
impl<'de, C: serde::Deserialize<'de>, T: serde::Deserialize<'de>> serde::Deserialize<'de>
    for MethodOutcome<C, T>
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Wire<C, T> {
            method: crate::remote::StaticName,
            code: C,
            extended_status: Option<ExtendedStatus>,
            output: T,
        }
        let w = Wire::<C, T>::deserialize(d)?;
        Ok(Self {
            method: w.method.0,
            code: w.code,
            extended_status: w.extended_status,
            output: w.output,
        })
    }
}

impl<C: ReturnCode, T> MethodOutcome<C, T> {
    /// An outcome.
    pub fn new(
        method: &'static str,
        code: C,
        extended_status: Option<ExtendedStatus>,
        output: T,
    ) -> Self {
        Self {
            method,
            code,
            extended_status,
            output,
        }
    }

    /// Whether the method succeeded.
    pub fn is_success(&self) -> bool {
        self.code.is_success()
    }

    /// The output when the method succeeded, or when it answered one of `also_ok` (for example `CreatePartition`'s
    /// 42002, "partition created but no access path could be assigned", which csi-proxy accepts); otherwise the
    /// failure, with the code and extended status for the message.
    pub fn accept(self, also_ok: &[C]) -> Result<T, MethodFailure<C>> {
        if self.code.is_success() || also_ok.contains(&self.code) {
            Ok(self.output)
        } else {
            Err(MethodFailure {
                method: self.method,
                code: self.code,
                extended_status: self.extended_status.map(Box::new),
            })
        }
    }
}

/// A method that answered a failure `ReturnValue`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{method} returned {code}{}", extended_suffix(.extended_status))]
pub struct MethodFailure<C: ReturnCode> {
    /// `Class.Method`.
    pub method: &'static str,
    /// The `ReturnValue`.
    pub code: C,
    /// `ExtendedStatus`.
    pub extended_status: Option<Box<ExtendedStatus>>,
}

fn extended_suffix(status: &Option<Box<ExtendedStatus>>) -> String {
    match status {
        Some(s) if !s.is_empty() => format!(": {s}"),
        _ => String::new(),
    }
}

impl<C: ReturnCode> MethodFailure<C> {
    /// The classification.
    pub fn kind(&self) -> ErrorKind {
        self.code.kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_takes_success_and_listed_codes() {
        let ok = MethodOutcome::new("MSFT_Disk.Online", StorageReturn::Success, None, 7u32);
        assert_eq!(ok.accept(&[]), Ok(7));

        let partial = MethodOutcome::new(
            "MSFT_Disk.CreatePartition",
            StorageReturn::AccessPathInUse,
            None,
            1u32,
        );
        assert_eq!(
            partial.clone().accept(&[StorageReturn::AccessPathInUse]),
            Ok(1)
        );
        let failure = partial.accept(&[]).unwrap_err();
        assert_eq!(failure.code, StorageReturn::AccessPathInUse);
        assert_eq!(
            failure.to_string(),
            "MSFT_Disk.CreatePartition returned The requested access path is already in use. (42002)"
        );
    }

    #[test]
    fn failures_carry_the_extended_status_and_kind() {
        let status = ExtendedStatus {
            message: Some("Access denied".into()),
            message_id: Some("StorageWMI 40001".into()),
            cim_status_code: Some(CimStatusCode::AccessDenied),
            ..Default::default()
        };
        let failure = MethodOutcome::new(
            "MSFT_Disk.Online",
            StorageReturn::AccessDenied,
            Some(status),
            (),
        )
        .accept(&[])
        .unwrap_err();
        assert_eq!(failure.kind(), ErrorKind::AccessDenied);
        assert_eq!(
            failure.to_string(),
            "MSFT_Disk.Online returned Access denied (40001): Access denied, MessageID StorageWMI 40001, \
             CIM_ERR_ACCESS_DENIED: access to a CIM resource was not available to the client. (2)"
        );
        assert!(ExtendedStatus::default().is_empty());
        assert_eq!(ExtendedStatus::default().to_string(), "no extended status");
    }

    #[test]
    fn smb_and_iscsi_codes() {
        assert!(SmbReturn::SUCCESS.is_success());
        assert_eq!(SmbReturn(1219).kind(), ErrorKind::MultipleConnections);
        assert_eq!(SmbReturn(424_242).kind(), ErrorKind::Other);
        assert!(
            SmbReturn(53)
                .to_string()
                .contains("The network path was not found.")
        );
        assert!(IscsiStatus::ShortChapSecret.is_success());
        assert!(!ReturnCode::is_success(IscsiStatus::LoginFailed));
        assert_eq!(ReturnCode::kind(IscsiStatus::LoginFailed), ErrorKind::Other);
    }
}
