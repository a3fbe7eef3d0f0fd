//! The harness's error type.

use std::io;

/// Everything that can stop a benchmark run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The e2e harness (processes, CSI connection, admin client).
    #[error(transparent)]
    E2e(#[from] wincsi_e2e::Error),
    /// The simulator's admin client.
    #[error(transparent)]
    Sim(#[from] sim::Error),
    /// A file or process operation.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// JSON encoding of the results.
    #[error("encoding results: {0}")]
    Json(#[from] serde_json::Error),
    /// A precondition of the harness itself failed (e.g. a binary is missing).
    #[error("{0}")]
    Setup(String),
}

impl Error {
    /// An [`Error::Io`] maker for `map_err`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

/// The harness's result type.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
