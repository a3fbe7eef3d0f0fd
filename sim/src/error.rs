//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the simulator.
///
/// [`Error::Host`] is what a simulated host call returns: its message is the Windows/csi-proxy-like text that the
/// gRPC layer sends as status `UNKNOWN`, exactly as the real csi-proxy does for every failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A host operation failed; the message mimics the real csi-proxy error text.
    #[error("{0}")]
    Host(String),
    /// The scenario is invalid (duplicate disk numbers, bad sizes, unknown references, ...).
    #[error("invalid scenario: {0}")]
    Scenario(String),
    /// Reading or parsing a scenario file failed.
    #[error("cannot load scenario {path}: {reason}")]
    ScenarioFile {
        /// The file that was being read.
        path: PathBuf,
        /// Why it failed.
        reason: String,
    },
    /// A sandbox filesystem operation failed outside of a host call (set-up, inspection).
    #[error("sandbox I/O on {path}: {source}")]
    Io {
        /// The real path in the sandbox.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Binding or serving a socket / pipe failed.
    #[error("serving {what}: {source}")]
    Serve {
        /// What was being served (socket path, pipe name, admin address).
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The admin protocol failed (connection, framing, or an error reported by the sim).
    #[error("admin: {0}")]
    Admin(String),
}

impl Error {
    /// Builds a host-call failure with the given Windows-like message.
    pub(crate) fn host(msg: impl Into<String>) -> Self {
        Error::Host(msg.into())
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
