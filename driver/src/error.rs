//! The crate's one error type and its single, deliberate mapping to gRPC status codes.
//!
//! Every fallible path in the driver returns [`Error`]. RPC handlers convert it with
//! `tonic::Status::from(err)` (or `?` in a function returning `Result<_, Status>`), which is the
//! only place CSI error codes are chosen. The codes follow the CSI spec's error scheme:
//!
//! | Variant | gRPC code | CO behaviour |
//! | --- | --- | --- |
//! | [`Error::InvalidArgument`] | `INVALID_ARGUMENT` | fix the request, do not retry as is |
//! | [`Error::NotFound`] | `NOT_FOUND` | volume/path does not exist |
//! | [`Error::AlreadyExists`] | `ALREADY_EXISTS` | incompatible object already present |
//! | [`Error::FailedPrecondition`] | `FAILED_PRECONDITION` | e.g. publish before stage |
//! | [`Error::Aborted`] | `ABORTED` | an operation on the same volume is in flight; retry with backoff |
//! | [`Error::ResourceExhausted`] | `RESOURCE_EXHAUSTED` | the node is full (volume limit, iSCSI sessions); kubelet retries, the CSINode refresh corrects the scheduler |
//! | [`Error::Unavailable`] | `UNAVAILABLE` | csi-proxy, the Kubernetes API or a LUN's disk not answering yet; retry |
//! | [`Error::DeadlineExceeded`] | `DEADLINE_EXCEEDED` | host call timed out; retry |
//! | [`Error::Unimplemented`] | `UNIMPLEMENTED` | never retry |
//! | everything else | `INTERNAL` | unexpected; message carries the context chain |
//!
//! Error texts must never contain secrets: variants carry identifiers and paths only.

use std::error::Error as StdError;
use std::io;

/// Result alias defaulting to the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the driver.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A request field is missing or invalid.
    #[error("{0}")]
    InvalidArgument(String),

    /// The referenced volume, path or host object does not exist.
    #[error("{0}")]
    NotFound(String),

    /// An incompatible object already exists (e.g. a volume staged with other parameters).
    #[error("{0}")]
    AlreadyExists(String),

    /// The call is valid but the system is not in the required state.
    #[error("{0}")]
    FailedPrecondition(String),

    /// Another operation on the same volume is in progress.
    #[error("an operation on {0} is already in progress")]
    Aborted(String),

    /// The node cannot take another volume: the volume limit it reports in NodeGetInfo is reached, or the iSCSI
    /// initiator refuses another session. The message says which; kubelet treats it as uncertain and retries, and
    /// the CSINode allocatable refresh (KEP-4876) stops the scheduler from sending more.
    #[error("{0}")]
    ResourceExhausted(String),

    /// What the call needs did not answer, or is not there yet: the host backend (csi-proxy or the simulated host),
    /// the Kubernetes API (an inline volume's Secret), an iSCSI LUN's disk. The message names which; kubelet retries.
    #[error("{0}")]
    Unavailable(String),

    /// A call to the host backend did not finish in time.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),

    /// The RPC is not implemented by this driver.
    #[error("{0} is not implemented by this driver")]
    Unimplemented(&'static str),

    /// An unexpected failure; the message says what was being done.
    #[error("{0}")]
    Internal(String),

    /// A command-line flag or environment variable has an invalid value.
    #[error("invalid value for {flag}: {rule}")]
    Config {
        /// The flag, e.g. `--driver-name`.
        flag: &'static str,
        /// The rule that was violated, phrased for the operator.
        rule: String,
    },

    /// An I/O operation failed; `context` says which and on what.
    #[error("{context}")]
    Io {
        /// What was being done, e.g. `binding C:\...\csi.sock`.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The gRPC server failed.
    #[error("gRPC server error")]
    Transport(#[from] tonic::transport::Error),
}

impl Error {
    /// Wraps an I/O error with a description of what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// The error's message followed by its `source()` chain, joined by `": "`.
    pub fn chain(&self) -> String {
        let mut msg = self.to_string();
        let mut source = self.source();
        while let Some(s) = source {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            source = s.source();
        }
        msg
    }

    /// The gRPC code this error maps to (see the module docs).
    pub fn code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::NotFound(_) => Code::NotFound,
            Self::AlreadyExists(_) => Code::AlreadyExists,
            Self::FailedPrecondition(_) => Code::FailedPrecondition,
            Self::Aborted(_) => Code::Aborted,
            Self::ResourceExhausted(_) => Code::ResourceExhausted,
            Self::Unavailable(_) => Code::Unavailable,
            Self::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Self::Unimplemented(_) => Code::Unimplemented,
            Self::Internal(_) | Self::Config { .. } | Self::Io { .. } | Self::Transport(_) => {
                Code::Internal
            }
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> Self {
        tonic::Status::new(err.code(), err.chain())
    }
}

/// A pod author's string for an error message: debug-quoted (control characters escaped) and cut to 253
/// characters, so a huge value cannot swell the gRPC status and the kubelet's events.
pub(crate) fn quote_short(s: &str) -> String {
    const MAX: usize = 253;
    match s.char_indices().nth(MAX) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &s[..end], s.len()),
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    #[test]
    fn maps_each_variant_to_its_csi_code() {
        let cases = [
            (
                Error::InvalidArgument("volume_id is required".into()),
                Code::InvalidArgument,
            ),
            (Error::NotFound("vol-1".into()), Code::NotFound),
            (Error::AlreadyExists("vol-1".into()), Code::AlreadyExists),
            (
                Error::FailedPrecondition("not staged".into()),
                Code::FailedPrecondition,
            ),
            (Error::Aborted("vol-1".into()), Code::Aborted),
            (
                Error::ResourceExhausted("node full".into()),
                Code::ResourceExhausted,
            ),
            (
                Error::Unavailable("csi-proxy-smb-v1".into()),
                Code::Unavailable,
            ),
            (
                Error::DeadlineExceeded("NewSmbGlobalMapping".into()),
                Code::DeadlineExceeded,
            ),
            (Error::Unimplemented("NodeStageVolume"), Code::Unimplemented),
            (Error::Internal("boom".into()), Code::Internal),
            (
                Error::io("reading state", io::Error::other("disk on fire")),
                Code::Internal,
            ),
        ];
        for (err, code) in cases {
            let status = tonic::Status::from(err);
            assert_eq!(status.code(), code, "{}", status.message());
        }
    }

    #[test]
    fn status_message_carries_the_context_chain() {
        let err = Error::io(
            r"creating C:\var\lib\kubelet\plugins\wincsi.csi.io",
            io::Error::new(io::ErrorKind::PermissionDenied, "access denied"),
        );
        let status = tonic::Status::from(err);
        assert_eq!(
            status.message(),
            r"creating C:\var\lib\kubelet\plugins\wincsi.csi.io: access denied"
        );
    }

    #[test]
    fn aborted_names_the_volume() {
        let status = tonic::Status::from(Error::Aborted("volume vol-7".into()));
        assert_eq!(
            status.message(),
            "an operation on volume vol-7 is already in progress"
        );
    }

    #[test]
    fn pod_authors_strings_are_quoted_short_and_escaped() {
        assert_eq!(quote_short("creds"), "\"creds\"");
        assert_eq!(quote_short("a\nb"), "\"a\\nb\"");
        let huge = "x".repeat(100_000);
        let q = quote_short(&huge);
        assert!(q.len() < 300 && q.ends_with("(100000 bytes)"), "{q}");
        // Cut on a character boundary.
        let q = quote_short(&"é".repeat(300));
        assert!(
            q.starts_with(&format!("{:?}…", "é".repeat(253))) && q.ends_with("(600 bytes)"),
            "{q}"
        );
    }
}
