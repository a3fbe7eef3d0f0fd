//! Where the simulated host's HTTP/2 server (tonic over `h2`) must answer like csi-proxy's (grpc-go) instead.
//!
//! * **`:authority`.** Go clients of csi-proxy (csi-proxy's own `client/groups/*`, csi-driver-smb) percent-encode
//!   the pipe name into `:authority` (`%5C%5C.%5Cpipe%5Ccsi-proxy-filesystem-v1`, grpc-go v1.57
//!   `clientconn.go:1837-1946`); grpc-go's server accepts it, `h2` resets every such stream with PROTOCOL_ERROR
//!   (measured against both: the reference's F5). Every connection is read through [`h2_inbound::AuthorityFix`], the
//!   repair the driver's CSI listener uses, which also reads the client's SETTINGS in passing.
//! * **An answer larger than the client accepts.** grpc-go's server checks a header block against the client's
//!   `SETTINGS_MAX_HEADER_LIST_SIZE` before writing it, and when the block exceeds it, resets that one stream
//!   (`RST_STREAM INTERNAL_ERROR`) and keeps the connection (grpc-go `internal/transport/http2_server.go:1079-1084`
//!   in `writeStatus`; `checkForHeaderListSize` sums each field's name, value and 32 bytes). csi-proxy's errors are
//!   trailers-only answers whose `grpc-message` is the whole Go error text, so an error text over ~16 KiB to a client
//!   that announces 16 KiB (hyper's client, hence the driver: hyper 1.12 `src/proto/h2/client.rs:52`) is such a
//!   reset (measured on master with a 17 000-character IsSymlink path: the reference's F6). `h2` sends the block
//!   anyway and the client then drops the whole connection (COMPRESSION_ERROR). [`HeaderLimitLayer`] resets the
//!   stream instead, by grpc-go's rule applied to what this server sends (grpc-go's fields, plus the `date` field
//!   hyper adds and grpc-go does not: 65 bytes, so the sim resets texts from 16 130 bytes where csi-proxy resets from
//!   16 195 for a 16 KiB client); a client that announced no limit (grpc-go's default) gets the text, as from
//!   csi-proxy.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use h2_inbound::{AuthorityFix, ClientSettings};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// A served connection, read through the `:authority` repair; tells the services what the client announced.
pub(crate) struct ClientIo<T>(AuthorityFix<T>);

impl<T> ClientIo<T> {
    pub(crate) fn new(io: T) -> Self {
        ClientIo(AuthorityFix::new(io))
    }
}

/// What a call's request extensions carry about its connection (tonic inserts it).
#[derive(Clone, Debug)]
pub(crate) struct ClientInfo {
    settings: ClientSettings,
}

impl<T> Connected for ClientIo<T> {
    type ConnectInfo = ClientInfo;

    fn connect_info(&self) -> ClientInfo {
        ClientInfo {
            settings: self.0.client_settings(),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ClientIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ClientIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Resets a call whose trailers-only answer exceeds the client's announced header-list limit, as grpc-go does.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HeaderLimitLayer;

impl<S> tower::Layer<S> for HeaderLimitLayer {
    type Service = HeaderLimit<S>;

    fn layer(&self, inner: S) -> HeaderLimit<S> {
        HeaderLimit { inner }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct HeaderLimit<S> {
    inner: S,
}

/// The answer did not fit the client's header-list limit: hyper resets the stream with INTERNAL_ERROR for a service
/// error that is no gRPC status (`hyper::Error::h2_reason`), which is grpc-go's answer.
#[derive(Debug)]
struct AnswerTooLarge {
    size: u64,
    limit: u32,
}

impl std::fmt::Display for AnswerTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "header list size to send violates the maximum size ({}) set by client: {} bytes",
            self.limit, self.size
        )
    }
}

impl std::error::Error for AnswerTooLarge {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B, R> tower::Service<http::Request<B>> for HeaderLimit<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<R>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<http::Response<R>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let limit = req
            .extensions()
            .get::<ClientInfo>()
            .and_then(|c| c.settings.max_header_list_size());
        let call = self.inner.call(req);
        Box::pin(async move {
            let response = call.await.map_err(Into::into)?;
            if let Some(limit) = limit
                && let Some(size) = trailers_only_size(response.headers())
                && size > u64::from(limit)
            {
                tracing::debug!(
                    size,
                    limit,
                    "the answer exceeds the client's header-list limit: stream reset"
                );
                return Err(AnswerTooLarge { size, limit }.into());
            }
            Ok(response)
        })
    }
}

/// The `date` field hyper's server adds to every answer (`date: <IMF-fixdate>`, 4 + 29 + 32 bytes), which grpc-go
/// does not send: measured, a 16 KiB client takes the sim's answers up to a text of 16 128 bytes.
const HYPER_DATE_FIELD: u64 = 4 + 29 + 32;

/// The header-list size of the trailers-only answer that `headers` (tonic's) stands for, as this server sends it, or
/// `None` when it is no trailers-only answer: grpc-go's fields — `:status`, `content-type`, `grpc-status` and
/// `grpc-message` in grpc-go's encoding (bytes outside `' '..='~'` and `%` become `%XX`; grpc-go
/// `internal/transport/http_util.go` `encodeGrpcMessage`) — and hyper's `date`, each field's name and value plus 32
/// (RFC 9113 §6.5.2; grpc-go's `checkForHeaderListSize`).
fn trailers_only_size(headers: &http::HeaderMap) -> Option<u64> {
    let status = headers.get("grpc-status")?;
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    let go_encoded: usize = message
        .iter()
        .map(|&b| {
            if (b' '..=b'~').contains(&b) && b != b'%' {
                1
            } else {
                3
            }
        })
        .sum();
    let field = |name: &str, value: usize| (name.len() + value + 32) as u64;
    Some(
        field(":status", 3)
            + field("content-type", "application/grpc".len())
            + field("grpc-status", status.len())
            + field("grpc-message", go_encoded)
            + HYPER_DATE_FIELD,
    )
}

/// `%XX` sequences to bytes (tonic percent-encodes `grpc-message`); anything else is kept.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(|&b| hex(b)),
                bytes.get(i + 2).and_then(|&b| hex(b)),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_is_grpc_go_s_whatever_tonic_encoded() {
        let answer = |message: &str| {
            tonic::Status::unknown(message)
                .into_http::<()>()
                .headers()
                .clone()
        };
        // 42 + 60 + 44 + 44 bytes of names, values and overhead before the message, 65 of hyper's `date`.
        let base = 42 + 60 + 44 + 44 + 65;
        assert_eq!(trailers_only_size(&answer("")), Some(base));
        // tonic encodes the space and the quote; grpc-go neither: one byte each. `%` and non-ASCII: three.
        assert_eq!(
            trailers_only_size(&answer("mkdir \"C:\\x\": 100%")),
            Some(base + 17 + 3)
        );
        assert_eq!(trailers_only_size(&answer("é")), Some(base + 6));
        let ok = http::Response::new(());
        assert_eq!(
            trailers_only_size(ok.headers()),
            None,
            "no status: not trailers-only"
        );
    }
}
