//! The facade over a socket (feature `remote`): a test build's native backend driving a simulated host's Windows view
//! in another process, so any external suite can run against `wincsi-node --host-backend native` exactly as against
//! csi-proxy (`sim/README.md`, "The Windows view over a socket").
//!
//! [`RemoteHost`] implements [`crate::WindowsHost`] by sending each call to a server ([`server::serve`], which
//! `wincsi-sim --windows-socket` runs over its `WindowsView`), one JSON line per request and per answer, one
//! connection per call. The semantics of [`crate::CallContext`] hold across the socket: a call is not sent once its
//! deadline passed or it was cancelled (`started: false`); once sent, the caller stops waiting at its deadline or
//! when cancelled and gets `started: true` (outcome unknown) while the server's call runs on, exactly as a started
//! WMI call outlives its caller on Windows. The server gives the call the caller's remaining time.
//!
//! Never part of the shipped driver: the driver enables this only with its `test-windows-socket` feature, which the
//! release builds (`Dockerfile.windows`) do not; a test checks that.

mod client;
pub mod server;
mod wire;

use std::collections::HashSet;
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

pub use client::RemoteHost;

/// Where the server listens: `unix:PATH` (Unix) or `tcp:127.0.0.1:PORT` (loopback only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A Unix socket path.
    Unix(std::path::PathBuf),
    /// A loopback TCP address.
    Tcp(std::net::SocketAddr),
}

impl std::str::FromStr for Address {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path".to_owned());
            }
            return Ok(Self::Unix(path.into()));
        }
        if let Some(addr) = s.strip_prefix("tcp:") {
            let addr: std::net::SocketAddr = addr
                .parse()
                .map_err(|e| format!("{s:?}: not an IP:PORT address: {e}"))?;
            if !addr.ip().is_loopback() {
                return Err(format!("{s:?}: only a loopback address is accepted"));
            }
            return Ok(Self::Tcp(addr));
        }
        Err(format!("{s:?}: expected unix:PATH or tcp:127.0.0.1:PORT"))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
            Self::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// A name that arrived over the wire where the facade has a `&'static str` (a method name of a
/// [`crate::MethodOutcome`], a Win32 function of a [`crate::CallError`]).
pub(crate) struct StaticName(pub(crate) &'static str);

impl<'de> serde::Deserialize<'de> for StaticName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        intern(d).map(Self)
    }
}

/// The error as it travels (the derive cannot deserialize its `&'static str`s).
impl<'de> serde::Deserialize<'de> for crate::CallError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use crate::CallError as E;
        use crate::codes::{HResult, Win32Error};
        #[derive(serde::Deserialize)]
        enum Wire {
            Wmi {
                call: String,
                hresult: HResult,
                error: Option<Box<crate::ErrorObject>>,
            },
            Win32 {
                function: StaticName,
                path: String,
                code: Win32Error,
            },
            DeadlineExceeded {
                started: bool,
            },
            Cancelled {
                started: bool,
            },
            Unsupported {
                what: String,
            },
            Unavailable(String),
            Decode {
                call: String,
                detail: String,
            },
        }
        Ok(match Wire::deserialize(d)? {
            Wire::Wmi {
                call,
                hresult,
                error,
            } => E::Wmi {
                call,
                hresult,
                error,
            },
            Wire::Win32 {
                function,
                path,
                code,
            } => E::Win32 {
                function: function.0,
                path,
                code,
            },
            Wire::DeadlineExceeded { started } => E::DeadlineExceeded { started },
            Wire::Cancelled { started } => E::Cancelled { started },
            Wire::Unsupported { what } => E::Unsupported { what },
            Wire::Unavailable(m) => E::Unavailable(m),
            Wire::Decode { call, detail } => E::Decode { call, detail },
        })
    }
}

/// A `&'static str` for a name that arrived over the wire: each distinct name is allocated once for the process
/// (the facade's method and function names are a small fixed set).
fn intern<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let name = <String as serde::Deserialize>::deserialize(d)?;
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = names.get(name.as_str()) {
        return Ok(known);
    }
    // Bounded by the facade's method names; a server naming more than a few hundred is not one of ours.
    if names.len() >= 512 {
        return Ok("Class.Method");
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    Ok(leaked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_refuse_what_is_not_loopback() {
        assert_eq!(
            "unix:/tmp/w.sock".parse::<Address>(),
            Ok(Address::Unix("/tmp/w.sock".into()))
        );
        assert_eq!(
            "tcp:127.0.0.1:4000"
                .parse::<Address>()
                .map(|a| a.to_string()),
            Ok("tcp:127.0.0.1:4000".to_owned())
        );
        assert!("tcp:10.0.0.1:4000".parse::<Address>().is_err());
        assert!("/tmp/x".parse::<Address>().is_err());
        assert!("unix:".parse::<Address>().is_err());
    }
}
