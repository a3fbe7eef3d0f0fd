//! tracing setup: plain or JSON lines on stderr, filtered by `--log-level`.
//!
//! Logs go to stderr so stdout stays free, and so the kubelet/container runtime captures them as
//! usual. HTTP/2 internals (h2, hyper, tower) are capped at `info` unless the level is `trace`:
//! at `debug` they would drown the driver's own messages.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogLevel};
use crate::error::{Error, Result};

/// The filter directives used for a level.
pub fn filter_directives(level: LogLevel) -> String {
    let base = level.as_tracing().as_str().to_ascii_lowercase();
    if level == LogLevel::Trace {
        base
    } else {
        format!("{base},h2=info,hyper=info,hyper_util=info,tower=info")
    }
}

/// Installs the global tracing subscriber. Fails if one is already installed.
pub fn init(format: LogFormat, level: LogLevel) -> Result<()> {
    let filter = EnvFilter::try_new(filter_directives(level))
        .map_err(|e| Error::Internal(format!("building log filter: {e}")))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true);
    let installed = match format {
        LogFormat::Plain => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
    installed.map_err(|e| Error::Internal(format!("installing the tracing subscriber: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_cap_http2_noise_below_trace() {
        assert_eq!(
            filter_directives(LogLevel::Debug),
            "debug,h2=info,hyper=info,hyper_util=info,tower=info"
        );
        assert_eq!(filter_directives(LogLevel::Trace), "trace");
        for level in [
            LogLevel::Error,
            LogLevel::Warn,
            LogLevel::Info,
            LogLevel::Debug,
            LogLevel::Trace,
        ] {
            assert!(EnvFilter::try_new(filter_directives(level)).is_ok());
        }
    }
}
