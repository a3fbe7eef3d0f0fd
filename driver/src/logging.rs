//! tracing setup: plain or JSON lines on stderr, filtered by `--log-level`.
//!
//! Logs go to stderr so stdout stays free, and so the kubelet/container runtime captures them as
//! usual. HTTP/2 internals (h2, hyper, tower) are capped at `info` unless the level is `trace`:
//! at `debug` they would drown the driver's own messages.
//!
//! # One event, one line
//!
//! Volume ids, paths and volume attributes come from users, and a user can put a newline or a terminal escape
//! sequence in them. No such value may forge a log line or recolour a terminal, at any level and in either format:
//!
//! * JSON: every value is a JSON string, so control characters are escaped by the encoder (`\n`, `\u001b`).
//! * Plain: every field, the message included, goes through [`EscapedFields`], which writes control characters
//!   (C0, DEL, C1), the Unicode line and paragraph separators and the bidirectional overrides as escapes (`\n`,
//!   `\r`, `\t`, `\u{1b}`, `\u{2028}`, `\u{202e}`). Span fields are formatted by the same formatter, so a volume id in
//!   the RPC span is escaped too.

use std::fmt;

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::{DefaultFields, FormatFields, Writer};
use tracing_subscriber::util::SubscriberInitExt;

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

/// The driver's subscriber: `format` lines written to `writer`, filtered by `level`.
pub fn subscriber<W>(
    format: LogFormat,
    level: LogLevel,
    writer: W,
) -> Result<Box<dyn Subscriber + Send + Sync>>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(filter_directives(level))
        .map_err(|e| Error::Internal(format!("building log filter: {e}")))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(true);
    Ok(match format {
        LogFormat::Plain => Box::new(
            builder
                .with_ansi(false)
                .fmt_fields(EscapedFields::default())
                .finish(),
        ),
        LogFormat::Json => Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                // The RPC's span once ("span"), not again as a one-element "spans" list: each costs a parse of the
                // span's stored fields per event, and the list repeats what "span" says.
                .with_span_list(false)
                .finish(),
        ),
    })
}

/// Installs the global tracing subscriber (stderr). Fails if one is already installed.
pub fn init(format: LogFormat, level: LogLevel) -> Result<()> {
    subscriber(format, level, std::io::stderr)?
        .try_init()
        .map_err(|e| Error::Internal(format!("installing the tracing subscriber: {e}")))
}

/// The plain format's field formatter: tracing's default layout (`name=value`), with every character that could
/// break or disguise a line escaped (see the module docs).
#[derive(Debug, Default)]
pub struct EscapedFields(DefaultFields);

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut text = String::new();
        self.0.format_fields(Writer::new(&mut text), fields)?;
        write_escaped(&mut writer, &text)
    }
}

/// Whether `c` must not reach a plain log line as itself.
fn must_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Write `text` with [`must_escape`] characters as escapes.
fn write_escaped(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    for c in text.chars() {
        match c {
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if must_escape(c) => write!(out, "\\u{{{:x}}}", u32::from(c))?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};

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

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A volume id that tries to forge a line in each format and to recolour a terminal.
    const EVIL: &str = "vol\n2026-01-01T00:00:00Z  INFO wincsi: forged\r\n{\"level\":\"INFO\",\"fields\":{\"message\":\"forged\"}}\u{1b}[31mred\u{2028}x\u{202e}gnp.exe";

    /// Log what the driver logs with user strings, at every field kind, and return the output.
    fn log_evil(format: LogFormat) -> String {
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = subscriber(format, LogLevel::Debug, move || writer.clone()).expect("subscriber");
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("csi_rpc", method = "NodeStageVolume", volume_id = %EVIL, path = EVIL);
            let _e = span.enter();
            tracing::info!(volume_id = %EVIL, staging = ?EVIL, "staged {EVIL}");
            tracing::warn!(error = %format!("failed for {EVIL}"), "rpc failed");
        });
        let out = buf.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn user_strings_never_forge_plain_lines_or_escape_sequences() {
        let out = log_evil(LogFormat::Plain);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "one line per event:\n{out}");
        for line in &lines {
            assert!(
                line.starts_with(|c: char| c.is_ascii_digit()),
                "a timestamp first: {line}"
            );
            assert!(
                !line.chars().any(must_escape),
                "raw control or bidi character in {line:?}"
            );
        }
        assert!(!out.contains('\r') && !out.contains('\u{1b}'), "{out:?}");
        assert!(
            lines[0].contains(r"vol\n2026")
                && lines[0].contains(r"\u{1b}[31m")
                && lines[0].contains(r"\u{202e}"),
            "escaped, not dropped: {}",
            lines[0]
        );
    }

    #[test]
    fn user_strings_never_forge_json_lines_and_round_trip() {
        let out = log_evil(LogFormat::Json);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "one line per event:\n{out}");
        assert!(!out.contains('\u{1b}') && !out.contains('\r'), "{out:?}");
        let first: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON line");
        assert_eq!(first["volume_id"], EVIL);
        assert_eq!(first["message"], format!("staged {EVIL}"));
        assert_eq!(first["span"]["volume_id"], EVIL);
        let second: serde_json::Value = serde_json::from_str(lines[1]).expect("a JSON line");
        assert_eq!(second["error"], format!("failed for {EVIL}"));
    }

    #[test]
    fn an_rpc_logs_one_json_line_with_its_outcome_and_its_span_once() {
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = subscriber(LogFormat::Json, LogLevel::Info, move || writer.clone())
            .expect("subscriber");
        tracing::subscriber::with_default(sub, || {
            let fields = crate::rpc::RpcFields::volume("vol-1").staging(r"c:\var\lib\kubelet\g");
            futures::executor::block_on(crate::rpc::rpc("NodeStageVolume", fields, async {
                Ok::<_, crate::error::Error>(())
            }))
            .expect("ok");
        });
        let out = String::from_utf8(buf.0.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .expect("utf-8");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let line: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON line");
        assert_eq!(line["message"], "rpc ok");
        assert_eq!(line["grpc_code"], "Ok");
        assert!(line["duration_ms"].is_f64(), "{line}");
        assert_eq!(line["span"]["method"], "NodeStageVolume");
        assert_eq!(line["span"]["volume_id"], "vol-1");
        assert!(line["span"].get("grpc_code").is_none(), "{line}");
        assert!(
            line.get("spans").is_none(),
            "the span once, not again as a list: {line}"
        );
    }

    #[test]
    fn escaping_is_exact() {
        let mut s = String::new();
        write_escaped(&mut s, "a\tb\u{7f}\u{85}c\u{2029}é日本").expect("write");
        assert_eq!(s, r"a\tb\u{7f}\u{85}c\u{2029}é日本");
    }
}
