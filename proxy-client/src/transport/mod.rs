//! How to reach csi-proxy: Windows named pipes (the real csi-proxy) or Unix sockets (the simulated
//! host and tests). The OS-specific halves live in `unix.rs` / `windows.rs` behind one API.

use std::fmt;
use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::ApiGroup;

#[cfg_attr(unix, path = "unix.rs")]
#[cfg_attr(windows, path = "windows.rs")]
mod sys;

/// The named-pipe prefix csi-proxy uses: `\\.\pipe\`.
pub const DEFAULT_PIPE_PREFIX: &str = r"\\.\pipe\";

/// Where the csi-proxy endpoints of all API groups live.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Windows named pipes `<prefix>csi-proxy-<group>-<version>`, e.g.
    /// `\\.\pipe\csi-proxy-disk-v1` with the default prefix [`DEFAULT_PIPE_PREFIX`].
    /// Only available on Windows.
    NamedPipes {
        /// Pipe name prefix, normally `\\.\pipe\`.
        prefix: String,
    },
    /// Unix sockets `<dir>/csi-proxy-<group>-<version>.sock` (simulated host, tests).
    /// Only available where tokio supports Unix sockets (not on Windows).
    UnixSockets {
        /// Directory holding one socket per group.
        dir: PathBuf,
    },
}

impl Default for Transport {
    /// Named pipes with the default prefix, i.e. the real csi-proxy.
    fn default() -> Self {
        Transport::NamedPipes {
            prefix: DEFAULT_PIPE_PREFIX.to_owned(),
        }
    }
}

impl Transport {
    /// Named pipes with the given prefix.
    pub fn named_pipes(prefix: impl Into<String>) -> Self {
        Transport::NamedPipes {
            prefix: prefix.into(),
        }
    }

    /// Unix sockets in the given directory.
    pub fn unix_sockets(dir: impl Into<PathBuf>) -> Self {
        Transport::UnixSockets { dir: dir.into() }
    }

    /// The pipe name or socket path of a group, e.g. `\\.\pipe\csi-proxy-smb-v1`.
    pub fn address(&self, group: ApiGroup) -> String {
        match self {
            Transport::NamedPipes { prefix } => pipe_name(prefix, group),
            Transport::UnixSockets { dir } => socket_path(dir, group).display().to_string(),
        }
    }

    /// A lazily connecting channel to one group. Must be called inside a tokio runtime.
    pub(crate) fn lazy_channel(&self, group: ApiGroup) -> Channel {
        let target = match self {
            Transport::NamedPipes { prefix } => Target::Pipe(pipe_name(prefix, group)),
            Transport::UnixSockets { dir } => Target::Unix(socket_path(dir, group)),
        };
        // The URI is a placeholder: csi-proxy does not check `:authority`, and the connector
        // ignores it and opens the pipe/socket instead.
        Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(
            move |_: Uri| {
                let target = target.clone();
                async move { target.connect().await.map(TokioIo::new) }
            },
        ))
    }
}

/// `<prefix>csi-proxy-<group>-<version>`.
pub fn pipe_name(prefix: &str, group: ApiGroup) -> String {
    format!("{prefix}{}", group.endpoint_name())
}

/// `<dir>/csi-proxy-<group>-<version>.sock`.
pub fn socket_path(dir: &std::path::Path, group: ApiGroup) -> PathBuf {
    dir.join(format!("{}.sock", group.endpoint_name()))
}

#[derive(Debug, Clone)]
enum Target {
    Pipe(String),
    Unix(PathBuf),
}

impl Target {
    async fn connect(&self) -> Result<sys::Stream, ConnectError> {
        match self {
            Target::Pipe(name) => sys::connect_pipe(name).await,
            Target::Unix(path) => sys::connect_unix(path).await,
        }
    }
}

/// Why opening a pipe or socket failed. Travels through tonic as the source of the call's
/// status, where [`crate::Error`] finds it again.
#[derive(Debug)]
pub(crate) struct ConnectError {
    pub(crate) endpoint: String,
    pub(crate) reason: ConnectFailure,
}

#[derive(Debug)]
pub(crate) enum ConnectFailure {
    /// The pipe or socket does not exist.
    Missing { hint: &'static str },
    /// This transport does not exist on this OS.
    Unsupported(&'static str),
    /// Anything else (refused, access denied, busy for too long, ...).
    Io(std::io::Error, &'static str),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            ConnectFailure::Missing { hint } => {
                write!(f, "{} does not exist: {hint}", self.endpoint)
            }
            ConnectFailure::Unsupported(why) => write!(f, "{}: {why}", self.endpoint),
            ConnectFailure::Io(err, "") => {
                write!(f, "cannot open {}: {err}", self.endpoint)
            }
            ConnectFailure::Io(err, hint) => {
                write!(f, "cannot open {}: {err} ({hint})", self.endpoint)
            }
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.reason {
            ConnectFailure::Io(err, _) => Some(err),
            _ => None,
        }
    }
}
