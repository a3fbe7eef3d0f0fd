//! One span per CSI RPC, shared by the Identity and Node services.
//!
//! Every RPC runs inside [`rpc`], which opens a `csi_rpc` span with the method, volume id and
//! paths, and logs one event with the gRPC code and duration when the call ends. Requests are
//! never `Debug`-printed: they may carry secrets. This module is the bottom of the service layer:
//! `identity` and `node` use it, `server` wires them up; none of them imports another sideways.

use std::future::Future;
use std::time::Instant;

use tonic::{Code, Response, Status};
use tracing::Instrument;

use crate::error::Result;

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
        grpc_code = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    );
    let start = Instant::now();
    let result = body.instrument(span.clone()).await.map_err(Status::from);
    let code = match &result {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    };
    let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
    span.record("grpc_code", tracing::field::debug(code));
    span.record("duration_ms", elapsed_ms);
    let _entered = span.enter();
    let chatty = matches!(
        method,
        "Probe" | "GetPluginInfo" | "GetPluginCapabilities" | "NodeGetCapabilities" | "NodeGetInfo"
    );
    match &result {
        Ok(_) if chatty => tracing::debug!("rpc ok"),
        Ok(_) => tracing::info!("rpc ok"),
        Err(status) if status.code() == Code::Internal => {
            tracing::error!(message = status.message(), "rpc failed");
        }
        Err(status) => tracing::warn!(message = status.message(), "rpc failed"),
    }
    result.map(Response::new)
}
