//! Windows half of the transport: named pipes work; tokio has no Unix sockets here.

use std::io;
use std::path::Path;
use std::time::Duration;

use tokio::net::windows::named_pipe::{ClientOptions, NamedPipeClient};

use super::{ConnectError, ConnectFailure};

/// The byte stream a connection runs over.
pub(super) type Stream = NamedPipeClient;

/// `ERROR_FILE_NOT_FOUND`: no pipe with that name.
const ERROR_FILE_NOT_FOUND: i32 = 2;
/// `ERROR_ACCESS_DENIED`: the pipe's default DACL only grants admins/SYSTEM read-write.
const ERROR_ACCESS_DENIED: i32 = 5;
/// `ERROR_PIPE_BUSY`: all server instances are in use at this moment.
const ERROR_PIPE_BUSY: i32 = 231;

/// Busy retries: 10 ms doubling to 320 ms, at most 12 attempts (about 2.5 s in total). The
/// call's own deadline bounds this too.
const BUSY_FIRST_DELAY: Duration = Duration::from_millis(10);
const BUSY_MAX_DELAY: Duration = Duration::from_millis(320);
const BUSY_ATTEMPTS: u32 = 12;

const MISSING_HINT: &str = "csi-proxy is not running on this node (or is older than v1.1.0 and \
                            does not serve this API version), or the pipe is not mounted into \
                            this container as a hostPath volume";

pub(super) async fn connect_pipe(name: &str) -> Result<Stream, ConnectError> {
    let mut delay = BUSY_FIRST_DELAY;
    let mut attempt = 1;
    loop {
        match ClientOptions::new().open(name) {
            Ok(client) => return Ok(client),
            Err(err) if err.raw_os_error() == Some(ERROR_PIPE_BUSY) && attempt < BUSY_ATTEMPTS => {
                tracing::debug!(pipe = name, attempt, "csi-proxy pipe busy, retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(BUSY_MAX_DELAY);
                attempt += 1;
            }
            Err(err) => {
                return Err(ConnectError {
                    endpoint: name.to_owned(),
                    reason: classify(err),
                });
            }
        }
    }
}

fn classify(err: io::Error) -> ConnectFailure {
    match err.raw_os_error() {
        Some(ERROR_FILE_NOT_FOUND) => ConnectFailure::Missing { hint: MISSING_HINT },
        Some(ERROR_ACCESS_DENIED) => ConnectFailure::Io(
            err,
            "csi-proxy pipes are only writable by Administrators and SYSTEM; run the driver \
             as a privileged/HostProcess container or as an administrator",
        ),
        Some(ERROR_PIPE_BUSY) => ConnectFailure::Io(
            err,
            "all pipe instances stayed busy; csi-proxy is overloaded",
        ),
        _ => ConnectFailure::Io(err, ""),
    }
}

pub(super) async fn connect_unix(path: &Path) -> Result<Stream, ConnectError> {
    Err(ConnectError {
        endpoint: path.display().to_string(),
        reason: ConnectFailure::Unsupported(
            "the Unix-socket transport is not supported on Windows (tokio has no AF_UNIX \
             client there); use the named-pipe transport",
        ),
    })
}
