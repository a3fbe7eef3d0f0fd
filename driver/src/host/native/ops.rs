//! What one host operation's facade calls run with, and how their failures become the port's errors: a method's
//! code read from its `ReturnValue` or from the error object WMI attaches when the provider raises it.

use winhost::codes::IscsiStatus;
use winhost::method::{MethodOutcome, ReturnCode};
use winhost::{CallContext, CallError, CallResult, ErrorKind, WindowsHost};

use super::ledger::Ledger;
use super::{HostError, HostErrorKind, HostOp, HostResult};

/// What one host operation's facade calls run with (on a pool thread).
pub(crate) struct Ops<'a> {
    pub(crate) w: &'a dyn WindowsHost,
    pub(crate) c: &'a CallContext,
    pub(crate) op: HostOp,
    pub(crate) ledger: &'a Ledger,
    /// The targets whose sessions this driver made.
    pub(crate) sessions: &'a Ledger,
    /// The targets whose sessions this driver found made by someone else and joined.
    pub(crate) joined: &'a Ledger,
    /// `RequirePrivacy` for the SMB mappings this operation creates.
    pub(crate) smb_privacy: bool,
    /// The backend's calls that may outlive their callers: the ledger of WMI methods in flight (`inflight.rs`).
    pub(crate) calls: &'a super::inflight::InFlightCalls,
}

/// The code a method's raised failure carries, as its return-code table reads it: iSCSI methods raise an iscsierr.h
/// status (`HRESULT 0xefff003f`), SMB methods a Win32 error (`Windows System Error 1219`), in the error object WMI
/// attaches (`winhost::error_object`); Storage methods answer in `ReturnValue`.
pub(crate) trait RaisedCode: ReturnCode {
    /// The code `e` carries, if it is one of this table's.
    fn raised(e: &CallError) -> Option<Self>;
}

impl RaisedCode for IscsiStatus {
    fn raised(e: &CallError) -> Option<Self> {
        e.iscsi_status()
    }
}

impl RaisedCode for winhost::SmbReturn {
    fn raised(e: &CallError) -> Option<Self> {
        e.win32_code().map(|w| Self(w.code()))
    }
}

impl RaisedCode for winhost::StorageReturn {
    fn raised(_: &CallError) -> Option<Self> {
        None
    }
}

impl Ops<'_> {
    /// A facade failure as this operation's error.
    pub(crate) fn err(&self, e: CallError) -> HostError {
        let kind = match (e.win32_code().map(|w| w.code()), e.iscsi_status()) {
            // Not a reparse point: nothing is mounted or linked there.
            (Some(4390), _) => HostErrorKind::NotFound,
            (_, Some(IscsiStatus::TargetAlreadyLoggedIn)) => HostErrorKind::AlreadyLoggedIn,
            _ => kind_of(e.kind()),
        };
        HostError::new(self.op, kind, e.to_string())
    }

    /// A method call's output when it succeeded or answered one of `also_ok` — in its `ReturnValue` or raised with
    /// the code in its error object, whichever way the provider reports it (reference §5 item 1) — else the failure
    /// as this operation's error.
    pub(crate) fn method<C: RaisedCode, T: Default>(
        &self,
        result: CallResult<MethodOutcome<C, T>>,
        also_ok: &[C],
    ) -> HostResult<T> {
        match result {
            Ok(outcome) => self.accept(outcome, also_ok),
            Err(e) => match C::raised(&e) {
                Some(code) if also_ok.contains(&code) => {
                    tracing::debug!(op = %self.op, %code, "a tolerated code, raised");
                    Ok(T::default())
                }
                _ => Err(self.err(e)),
            },
        }
    }

    /// A method's output when it succeeded (or answered one of `also_ok`), else its failure as this operation's
    /// error (the code, its meaning and the `ExtendedStatus` in the message).
    pub(crate) fn accept<C: ReturnCode, T>(
        &self,
        outcome: MethodOutcome<C, T>,
        also_ok: &[C],
    ) -> HostResult<T> {
        outcome
            .accept(also_ok)
            .map_err(|f| HostError::new(self.op, kind_of(f.kind()), f.to_string()))
    }

    /// A failure of this operation.
    pub(crate) fn fail(&self, kind: HostErrorKind, message: impl Into<String>) -> HostError {
        HostError::new(self.op, kind, message)
    }
}

/// The facade's classification as the port's (reference §1.4's table).
fn kind_of(k: ErrorKind) -> HostErrorKind {
    match k {
        ErrorKind::NotFound => HostErrorKind::NotFound,
        ErrorKind::AlreadyExists => HostErrorKind::AlreadyExists,
        ErrorKind::NotEmpty => HostErrorKind::NotEmpty,
        ErrorKind::MultipleConnections => HostErrorKind::MultipleConnections,
        ErrorKind::NetworkPathNotFound => HostErrorKind::NetworkPathNotFound,
        ErrorKind::NetworkNameNotFound => HostErrorKind::NetworkNameNotFound,
        ErrorKind::StaleMapping => HostErrorKind::StaleMapping,
        ErrorKind::LogonFailure => HostErrorKind::LogonFailure,
        ErrorKind::AccessDenied => HostErrorKind::AccessDenied,
        ErrorKind::InvalidPath => HostErrorKind::InvalidPath,
        ErrorKind::Unavailable => HostErrorKind::Unavailable,
        ErrorKind::DeadlineExceeded | ErrorKind::Cancelled => HostErrorKind::DeadlineExceeded,
        ErrorKind::Other => HostErrorKind::Other,
    }
}
