//! One span per CSI RPC, shared by the Identity and Node services.
//!
//! Every RPC runs inside [`rpc`], which opens a `csi_rpc` span with the method, volume id and
//! paths, and logs one event with the gRPC code and duration when the call ends. Requests are
//! never `Debug`-printed: they may carry secrets. With `--metrics-address` each RPC is also counted and timed by
//! method and gRPC code (`wincsi_csi_requests_total`, `wincsi_csi_request_duration_seconds`; an RPC kubelet
//! cancels counts as `Canceled`). This module is the bottom of the service layer:
//! `identity` and `node` use it, `server` wires them up; none of them imports another sideways.

use std::future::Future;
use std::time::Instant;

use tonic::{Code, Response, Status};
use tracing::Instrument;

use crate::error::Result;
use crate::metrics::Metrics;

/// Structured fields of one RPC's span. Empty strings are left out.
#[derive(Debug, Default, Clone, Copy)]
pub struct RpcFields<'a> {
    volume_id: Option<&'a str>,
    staging_target_path: Option<&'a str>,
    target_path: Option<&'a str>,
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

impl<'a> RpcFields<'a> {
    /// Fields for an RPC on `volume_id`.
    pub fn volume(volume_id: &'a str) -> Self {
        Self {
            volume_id: non_empty(volume_id),
            ..Self::default()
        }
    }

    /// Adds the staging path.
    pub fn staging(mut self, path: &'a str) -> Self {
        self.staging_target_path = non_empty(path);
        self
    }

    /// Adds the target (or volume) path.
    pub fn target(mut self, path: &'a str) -> Self {
        self.target_path = non_empty(path);
        self
    }
}

/// Runs one RPC body inside its span and maps the crate error to a gRPC status.
///
/// Frequent, cheap calls (Probe, GetPluginInfo, capabilities, NodeGetInfo) log at `debug`,
/// volume operations at `info`; failures at `warn` (`error` for `INTERNAL`).
pub async fn rpc<T, F>(
    method: &'static str,
    fields: RpcFields<'_>,
    body: F,
) -> Result<Response<T>, Status>
where
    F: Future<Output = Result<T>>,
{
    let span = tracing::info_span!(
        "csi_rpc",
        method,
        volume_id = fields.volume_id,
        staging_target_path = fields.staging_target_path,
        target_path = fields.target_path,
    );
    let start = Instant::now();
    // Counted when dropped: after the body, or when tonic drops the call unfinished (kubelet cancelled it).
    let mut meter = crate::metrics::installed().map(|metrics| RpcMeter {
        metrics,
        method,
        start,
        code: Code::Cancelled,
    });
    let result = body.instrument(span.clone()).await.map_err(Status::from);
    let code = match &result {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    };
    if let Some(meter) = &mut meter {
        meter.code = code;
    }
    drop(meter);
    let duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    // The outcome goes on the closing event, not recorded into the span: recording into a span makes the JSON
    // formatter parse and rewrite the span's fields each time.
    let _entered = span.enter();
    let chatty = matches!(
        method,
        "Probe" | "GetPluginInfo" | "GetPluginCapabilities" | "NodeGetCapabilities" | "NodeGetInfo"
    );
    match &result {
        Ok(_) if chatty => tracing::debug!(grpc_code = ?code, duration_ms, "rpc ok"),
        Ok(_) => tracing::info!(grpc_code = ?code, duration_ms, "rpc ok"),
        Err(status) if status.code() == Code::Internal => {
            tracing::error!(grpc_code = ?code, duration_ms, message = status.message(), "rpc failed");
        }
        Err(status) => {
            tracing::warn!(grpc_code = ?code, duration_ms, message = status.message(), "rpc failed");
        }
    }
    result.map(Response::new)
}

/// Records one RPC in the metrics when dropped.
struct RpcMeter {
    metrics: &'static Metrics,
    method: &'static str,
    start: Instant,
    code: Code,
}

impl Drop for RpcMeter {
    fn drop(&mut self) {
        self.metrics.observe_rpc(
            self.method,
            code_name(self.code),
            self.start.elapsed().as_secs_f64(),
        );
    }
}

/// The `grpc_code` label: the code's name as gRPC's Go implementation spells it (`codes.Code.String()`), as
/// grpc-ecosystem's Prometheus middleware labels it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn count(method: &str, code: &str) -> u64 {
        let prefix =
            format!("wincsi_csi_requests_total{{method=\"{method}\",grpc_code=\"{code}\"}} ");
        crate::metrics::install()
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|n| n.parse().expect("count")))
            .unwrap_or(0)
    }

    // Method names unique to each test: the registry is process-wide and tests run in parallel.
    #[tokio::test]
    async fn rpcs_are_counted_by_method_and_code() {
        crate::metrics::install();
        let ok = rpc("TestCountedOk", RpcFields::default(), async { Ok(()) }).await;
        assert!(ok.is_ok());
        let err = rpc("TestCountedErr", RpcFields::volume("v"), async {
            Err::<(), _>(Error::Aborted("busy".into()))
        })
        .await;
        assert_eq!(err.expect_err("aborted").code(), Code::Aborted);
        assert_eq!(count("TestCountedOk", "OK"), 1);
        assert_eq!(count("TestCountedErr", "Aborted"), 1);
        let text = crate::metrics::install().encode();
        assert!(text.contains(
            "wincsi_csi_request_duration_seconds_count{method=\"TestCountedOk\",grpc_code=\"OK\"} 1\n"
        ));
    }

    #[tokio::test]
    async fn an_rpc_dropped_unfinished_counts_as_canceled() {
        crate::metrics::install();
        let call = rpc::<(), _>(
            "TestCancelled",
            RpcFields::default(),
            std::future::pending(),
        );
        tokio::select! {
            biased;
            _ = call => panic!("a pending body finished"),
            () = std::future::ready(()) => {}
        }
        assert_eq!(count("TestCancelled", "Canceled"), 1);
    }

    #[test]
    fn code_names_are_go_spellings() {
        assert_eq!(code_name(Code::Ok), "OK");
        assert_eq!(code_name(Code::Cancelled), "Canceled");
        assert_eq!(code_name(Code::FailedPrecondition), "FailedPrecondition");
    }
}
