//! A gRPC client that speaks HTTP/2 to the driver the way kubelet's does: after each response's DATA it sends a PING
//! (grpc-go's BDP estimation), one at a time.
//!
//! kubelet's CSI client is grpc-go (`pkg/volume/csi/csi_client.go` `newGrpcConn`: `grpc.Dial` with no window
//! options, so dynamic flow control is on). grpc-go's client transport, on every DATA frame it receives
//! (`internal/transport/http2_client.go` `handleData`), asks its BDP estimator whether to ping
//! (`internal/transport/bdp_estimator.go` `add`: yes unless a BDP ping is already out) and, if so, queues a
//! connection WINDOW_UPDATE for the bytes not yet acknowledged and a PING with the constant payload
//! `2 4 16 16 9 14 7 7`; the estimator takes the next ping only after the ACK came back (`calculate`). So a
//! sequence of unary calls makes the server answer one PING per response. tonic's client (hyper) sends none, which
//! is why the harness's other client never showed that cost.
//!
//! This client does the same on the `h2` crate: a PING when a response's DATA arrives and no ping of its own is
//! unanswered (`h2::PingPong` allows one in flight, as the estimator does). What it does not copy: the payload
//! (h2's own fixed opaque one; the server echoes any), the WINDOW_UPDATE grpc-go puts before each ping (h2 acknowledges received bytes on its own schedule, every
//! half window; a WINDOW_UPDATE needs no answer from the server), and grpc-go's window growth after the ACK (never
//! reached with responses this small). Requests are encoded as grpc-go does (`:authority` `localhost`,
//! `content-type: application/grpc`, `te: trailers`, one length-prefixed message); a status other than OK is an
//! error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use h2::client::SendRequest;
use tokio::net::UnixStream;
use tokio::sync::Notify;

use super::error::{Error, Result};

/// One HTTP/2 connection to a gRPC server on a Unix socket, pinging after responses like grpc-go.
#[derive(Clone, Debug)]
pub(crate) struct KubeletConn {
    send: SendRequest<Bytes>,
    pinger: Arc<Pinger>,
}

/// The one BDP ping in flight, as grpc-go's estimator keeps it.
#[derive(Debug, Default)]
struct Pinger {
    in_flight: AtomicBool,
    wanted: Notify,
    /// Woken when a PING was answered.
    answered: Notify,
    /// PINGs sent (each answered before the next).
    sent: AtomicU64,
}

impl Pinger {
    /// A response's DATA arrived: ping unless a ping of ours is unanswered.
    fn on_data(&self) {
        if !self.in_flight.swap(true, Ordering::SeqCst) {
            self.wanted.notify_one();
        }
    }
}

impl KubeletConn {
    /// Connects to the socket at `path` (the HTTP/2 handshake with the server's default settings).
    pub(crate) async fn connect(path: &std::path::Path) -> Result<Self> {
        let what = format!("connecting to {}", path.display());
        let io = UnixStream::connect(path)
            .await
            .map_err(Error::io(what.clone()))?;
        let (send, mut conn) = h2::client::handshake(io)
            .await
            .map_err(|e| Error::Setup(format!("{what}: HTTP/2 handshake: {e}")))?;
        let mut ping_pong = conn
            .ping_pong()
            .ok_or_else(|| Error::Setup(format!("{what}: no PING handle")))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let pinger = Arc::new(Pinger::default());
        let p = Arc::clone(&pinger);
        tokio::spawn(async move {
            loop {
                p.wanted.notified().await;
                if ping_pong.ping(h2::Ping::opaque()).await.is_err() {
                    return;
                }
                p.sent.fetch_add(1, Ordering::Relaxed);
                p.in_flight.store(false, Ordering::SeqCst);
                p.answered.notify_waiters();
            }
        });
        Ok(Self { send, pinger })
    }

    /// PINGs sent and answered so far.
    pub(crate) fn pings(&self) -> u64 {
        self.pinger.sent.load(Ordering::Relaxed)
    }

    /// Waits until no PING of this connection is unanswered (before closing it: grpc-go writes its BDP ping as soon
    /// as the response's DATA arrives, before kubelet closes the connection, so the server sees and answers it).
    pub(crate) async fn settle(&self) {
        loop {
            let answered = self.pinger.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if !self.pinger.in_flight.load(Ordering::SeqCst) {
                return;
            }
            answered.await;
        }
    }

    /// One unary call of `path` (`/csi.v1.Identity/GetPluginInfo`) with `request`.
    pub(crate) async fn unary<Q, A>(&self, path: &str, request: &Q) -> Result<A>
    where
        Q: prost::Message,
        A: prost::Message + Default,
    {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| Error::Setup(format!("{path}: {what}: {e}"));
        let mut send = self
            .send
            .clone()
            .ready()
            .await
            .map_err(|e| fail("connection", &e))?;
        let head = http::Request::builder()
            .method(http::Method::POST)
            .uri(format!("http://localhost{path}"))
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .body(())
            .map_err(|e| fail("request", &e))?;
        let (response, mut body) = send
            .send_request(head, false)
            .map_err(|e| fail("send", &e))?;
        let mut message = BytesMut::with_capacity(5 + request.encoded_len());
        message.put_u8(0);
        message.put_u32(request.encoded_len() as u32);
        request
            .encode(&mut message)
            .map_err(|e| fail("encode", &e))?;
        body.send_data(message.freeze(), true)
            .map_err(|e| fail("send", &e))?;
        let response = response.await.map_err(|e| fail("response", &e))?;
        let (head, mut body) = response.into_parts();
        let mut data = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| fail("body", &e))?;
            self.pinger.on_data();
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        // A trailers-only answer carries its status in the headers.
        let trailers = body.trailers().await.map_err(|e| fail("trailers", &e))?;
        let status = trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| head.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if status != "0" {
            let message = trailers
                .as_ref()
                .and_then(|t| t.get("grpc-message"))
                .or_else(|| head.headers.get("grpc-message"))
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            return Err(Error::Setup(format!(
                "{path}: grpc-status {status:?} {message}"
            )));
        }
        if data.len() < 5 {
            return Err(Error::Setup(format!("{path}: no message in the answer")));
        }
        let mut data = data.freeze();
        let _compressed = data.get_u8();
        let len = data.get_u32() as usize;
        A::decode(data.slice(..len.min(data.len()))).map_err(|e| fail("decode", &e))
    }
}
