//! The crate's error type.

use std::io;

/// Everything that can go wrong while running an end-to-end scenario.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A process could not be started.
    #[error("starting {what}: {source}")]
    Spawn {
        /// Which process.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// A process did not print its ready line (it exited, or the bounded wait ran out).
    #[error("{what} did not become ready: {reason}\n--- output of {what} ---\n{output}")]
    NotReady {
        /// Which process.
        what: String,
        /// Why we gave up.
        reason: String,
        /// Everything the process printed so far.
        output: String,
    },
    /// A CSI call returned an error status (after kubelet's retries, if any).
    #[error("{rpc} failed with {code:?}: {message}")]
    Csi {
        /// The CSI method.
        rpc: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// The CSI endpoint could not be used.
    #[error("CSI endpoint {endpoint}: {reason}")]
    Endpoint {
        /// The endpoint URL.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The simulated host (its admin interface or library) failed.
    #[error("simulated host: {0}")]
    Sim(#[from] sim::Error),
    /// A local file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What we were doing.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// The simulated host's invariants or the driver's state directory show something left behind or lost.
    #[error("node is not clean:\n{0}")]
    NotClean(String),
    /// An expectation of a scenario did not hold.
    #[error("check failed: {0}")]
    Check(String),
}

impl Error {
    /// The gRPC code when this is a CSI error.
    pub fn csi_code(&self) -> Option<tonic::Code> {
        match self {
            Error::Csi { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
