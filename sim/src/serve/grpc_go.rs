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
//!   stream instead, by grpc-go's rule applied to the fields this server sends (grpc-go's fields, plus the `date`
//!   field hyper adds and grpc-go does not: 65 bytes, so the sim resets texts from 16 130 bytes where csi-proxy resets
//!   from 16 195 for a 16 KiB client); a client that announced no limit (grpc-go's default) gets the text, as from
//!   csi-proxy.
//! * **`grpc-message`'s encoding.** tonic percent-encodes the space (`%20`, three bytes), `"`, `#`, `<`, `>`, `` ` ``,
//!   `?`, `{`, `}` besides what grpc-go encodes; grpc-go only bytes outside `' '..='~'`, and `%`
//!   (`encodeGrpcMessage`). Sized by grpc-go's encoding but
//!   sent in tonic's, a 10–12 KiB text with thousands of spaces passed the check and then broke a 16 KiB client's
//!   connection, where csi-proxy delivers it (measured under Wine against v1.1.3 and master). [`HeaderLimitLayer`]
//!   therefore re-encodes the text as grpc-go does before anything else, and sizes the fields as they are sent.

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

/// Sends `grpc-message` in grpc-go's encoding, and resets a call whose trailers-only answer exceeds the client's
/// announced header-list limit, as grpc-go does.
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
            let mut response = call.await.map_err(Into::into)?;
            go_encode_message(response.headers_mut());
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

/// The header-list size of the trailers-only answer `headers` stands for, as this server sends it, or `None` when it
/// is no trailers-only answer (no `grpc-status`): every field's name and value plus 32 (RFC 9113 §6.5.2; grpc-go's
/// `checkForHeaderListSize`), `:status` and hyper's `date` included. Run after [`go_encode_message`], so the
/// `grpc-message` counted is the one sent.
fn trailers_only_size(headers: &http::HeaderMap) -> Option<u64> {
    headers.get("grpc-status")?;
    let field = |name: usize, value: usize| (name + value + 32) as u64;
    let date = if headers.contains_key(http::header::DATE) {
        0
    } else {
        HYPER_DATE_FIELD
    };
    Some(
        field(":status".len(), 3)
            + headers
                .iter()
                .map(|(n, v)| field(n.as_str().len(), v.len()))
                .sum::<u64>()
            + date,
    )
}

/// Rewrites tonic's `grpc-message` in grpc-go's encoding (`internal/transport/http_util.go` `encodeGrpcMessage`: bytes
/// outside `' '..='~'`, and `%`, become `%XX`; everything else is sent as is). Both decode to the same text.
fn go_encode_message(headers: &mut http::HeaderMap) {
    let Some(value) = headers.get("grpc-message") else {
        return;
    };
    let text = percent_decode(value.as_bytes());
    let mut encoded = String::with_capacity(text.len());
    for b in text {
        if (b' '..=b'~').contains(&b) && b != b'%' {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    // Only visible ASCII and spaces: always a valid header value.
    if let Ok(v) = http::HeaderValue::from_str(&encoded) {
        headers.insert("grpc-message", v);
    }
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

    /// tonic's trailers-only answer for `message`, as the layer leaves it.
    fn sent(message: &str) -> http::HeaderMap {
        let mut headers = tonic::Status::unknown(message)
            .into_http::<()>()
            .headers()
            .clone();
        go_encode_message(&mut headers);
        headers
    }

    #[test]
    fn the_text_is_sent_in_grpc_go_s_encoding_and_sized_as_sent() {
        // `:status`, `content-type`, `grpc-status`: 42 + 60 + 44 bytes of names, values and overhead; 65 of hyper's
        // `date`; `grpc-message` 44 plus the text as sent (tonic sends none for an empty text).
        assert_eq!(trailers_only_size(&sent("")), Some(42 + 60 + 44 + 65));
        let base = 42 + 60 + 44 + 44 + 65;
        // tonic encodes the space and the quote; grpc-go neither: one byte each. `%` and non-ASCII: three.
        let h = sent("mkdir \"C:\\x\": 100%");
        assert_eq!(h["grpc-message"], "mkdir \"C:\\x\": 100%25");
        assert_eq!(trailers_only_size(&h), Some(base + 17 + 3));
        assert_eq!(sent("é")["grpc-message"], "%C3%A9");
        assert_eq!(trailers_only_size(&sent("é")), Some(base + 6));
        // A long text with thousands of spaces: sent as grpc-go sends it (one byte a space), and sized so.
        let text = "the parameter is incorrect ".repeat(420);
        let h = sent(&text);
        assert_eq!(h["grpc-message"].len(), text.len());
        assert_eq!(trailers_only_size(&h), Some(base + text.len() as u64));
        let ok = http::Response::new(());
        assert_eq!(
            trailers_only_size(ok.headers()),
            None,
            "no status: not trailers-only"
        );
    }
}
