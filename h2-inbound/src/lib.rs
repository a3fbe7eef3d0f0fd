//! What an HTTP/2 gRPC server needs from a client's byte stream before `h2` sees it: the `:authority` repair, so
//! every conforming gRPC client is served whatever it puts there, and the settings the client announced.
//!
//! Both of wincsi's servers read their connections through [`AuthorityFix`]: the driver's CSI listener (kubelet and
//! the sidecars, or any gRPC client of the CSI socket) and the simulated host's csi-proxy endpoints (the driver, or
//! any Go client of csi-proxy). Neither may depend on the other, so the code lives here.
//!
//! # `:authority`
//!
//! For a `unix:` target a gRPC client has no host name to send, and clients disagree on what to send instead.
//! grpc-go sends `localhost`. gRPC C-core (and every wrapper of it: Python grpcio, Ruby, PHP, C#/Grpc.Core) sends the
//! target's path percent-encoded, without its leading `/`: `ResolverFactory::GetDefaultAuthority` is
//! `URI::PercentEncodeAuthority(StripPrefix(uri.path(), "/"))` (grpc `src/core/resolver/resolver_factory.h`;
//! `uri.cc` escapes everything but RFC 3986's unreserved, sub-delims and `: [ ] @`), so
//! `unix:///var/lib/kubelet/csi.sock` gives `var%2Flib%2Fkubelet%2Fcsi.sock` and `unix:C:/csi/csi.sock` gives
//! `C:%2Fcsi%2Fcsi.sock` (grpc/grpc#38142 and #34305: since 1.57). grpc-java sends the raw path, grpc-swift the
//! percent-encoded one. None of these is an RFC 3986 authority (`%` is not allowed in a host; `C:%2F…` has no numeric
//! port), and the `h2` server behind tonic resets such a stream with PROTOCOL_ERROR before the service sees it
//! (hyperium/h2#487, unmerged). Go clients of csi-proxy (csi-proxy's own `client/groups/*`, csi-driver-smb) send the
//! pipe name percent-encoded (`%5C%5C.%5Cpipe%5Ccsi-proxy-filesystem-v1`: grpc-go v1.57 `clientconn.go:1837-1946`),
//! which csi-proxy's grpc-go server accepts and `h2` refuses alike.
//!
//! A CSI socket or a csi-proxy pipe serves one local peer; the authority carries no information there. So the server reads the
//! client's HTTP/2 stream through [`AuthorityFix`]: it passes every frame through unchanged except header blocks
//! (HEADERS and CONTINUATION frames), which it decodes with the client's HPACK context, rewrites — an `:authority`
//! that is not a valid RFC 3986 authority becomes `localhost`, everything else is kept — and re-encodes with its
//! own HPACK context towards the server, in HEADERS/CONTINUATION frames of at most 16,384 bytes (the smallest
//! maximum frame size HTTP/2 allows, so always acceptable). Every header block is re-encoded, not only those that
//! change, so the two HPACK contexts stay exact. A connection whose *first* header block provably carries a valid
//! authority (read in place, without the HPACK context: grpc-go's `localhost`, so kubelet and every sidecar) is
//! passed through whole and unchanged instead (see `first_block_is_valid`): only clients that need the repair pay
//! for decoding. A connection that does not start with the HTTP/2 preface is passed through untouched. A malformed
//! header block ends the connection, as `h2` itself would (COMPRESSION_ERROR).
//!
//! # The client's settings
//!
//! The SETTINGS frames a client sends before its first request (RFC 9113 §3.4: the first frame after its preface)
//! are read in passing and kept in [`ClientSettings`], which the server's services can consult (`h2` keeps the peer's
//! settings to itself). Settings changed later on a connection that takes the pass-through path are not seen; no
//! gRPC client changes them.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The HTTP/2 client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame types (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
/// Frame flags.
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame payload this layer emits: the minimum SETTINGS_MAX_FRAME_SIZE, which every peer accepts.
const MAX_FRAME: usize = 16_384;
/// The largest header block it buffers (h2's own default limit on a header list is far below this).
const MAX_BLOCK: usize = 1 << 20;
/// What an invalid `:authority` becomes.
const LOCAL_AUTHORITY: &[u8] = b"localhost";
/// SETTINGS parameter ids (RFC 9113 §6.5.2).
const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
/// The flag of a SETTINGS acknowledgement.
const ACK: u8 = 0x1;

/// The HTTP/2 settings a client announced (see the crate docs for which): cheap to clone, shared with the connection.
#[derive(Clone, Debug, Default)]
pub struct ClientSettings {
    /// `SETTINGS_MAX_HEADER_LIST_SIZE` + 1, 0 while not announced.
    max_header_list_size: Arc<AtomicU64>,
}

impl ClientSettings {
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`: the largest header list (RFC 9113 §6.5.2: names and values plus 32 bytes per
    /// field) the client accepts, if it announced one.
    pub fn max_header_list_size(&self) -> Option<u32> {
        match self.max_header_list_size.load(Ordering::Relaxed) {
            0 => None,
            n => u32::try_from(n - 1).ok(),
        }
    }

    /// Records the parameters of one SETTINGS frame's payload.
    fn apply(&self, payload: &[u8]) {
        for entry in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            if id == SETTINGS_MAX_HEADER_LIST_SIZE {
                self.max_header_list_size
                    .store(u64::from(value) + 1, Ordering::Relaxed);
            }
        }
    }
}

/// A header block being collected from a HEADERS frame and its CONTINUATION frames.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Matching the client preface (bytes seen so far).
    Preface(usize),
    /// HTTP/2 frames.
    Frames,
    /// Not HTTP/2: everything passes unchanged.
    Passthrough,
}

/// A connection's read side with the `:authority` repair and the client's settings read in passing (see the crate
/// docs); writes pass straight through.
pub struct AuthorityFix<S> {
    inner: S,
    phase: Phase,
    /// Read from `inner`, not processed yet.
    input: Vec<u8>,
    /// Processed, not yet handed to the reader (from `out_pos`).
    out: Vec<u8>,
    out_pos: usize,
    /// Payload bytes of a pass-through frame still to copy.
    passthrough: usize,
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    encoder: loona_hpack::Encoder<'static>,
    /// Whether this connection's header blocks are decoded and re-encoded (its first one needed the repair).
    rewriting: bool,
    eof: bool,
    settings: ClientSettings,
}

impl<S> std::fmt::Debug for AuthorityFix<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorityFix")
            .field("phase", &self.phase)
            .field("buffered", &self.input.len())
            .finish_non_exhaustive()
    }
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Whether `value` is an authority the HTTP/2 server accepts (the same parser h2 uses).
fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

impl<S> AuthorityFix<S> {
    /// Reads `inner` (a connection a server accepted) through the repair.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            phase: Phase::Preface(0),
            input: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            passthrough: 0,
            block: None,
            decoder: loona_hpack::Decoder::new(),
            encoder: loona_hpack::Encoder::new(),
            rewriting: false,
            eof: false,
            settings: ClientSettings::default(),
        }
    }

    /// The connection underneath.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The settings the client announced (filled in as its frames are read).
    pub fn client_settings(&self) -> ClientSettings {
        self.settings.clone()
    }

    /// Move as much of `input` to `out` as can be processed now.
    fn process(&mut self) -> io::Result<()> {
        loop {
            match self.phase {
                Phase::Passthrough => {
                    self.out.append(&mut self.input);
                    return Ok(());
                }
                Phase::Preface(seen) => {
                    let n = (PREFACE.len() - seen).min(self.input.len());
                    if self.input[..n] != PREFACE[seen..seen + n] {
                        self.phase = Phase::Passthrough;
                        continue;
                    }
                    self.out.extend(self.input.drain(..n));
                    self.phase = if seen + n == PREFACE.len() {
                        Phase::Frames
                    } else {
                        Phase::Preface(seen + n)
                    };
                    if n == 0 || self.phase != Phase::Frames {
                        return Ok(());
                    }
                }
                Phase::Frames => {
                    if self.passthrough > 0 {
                        let n = self.passthrough.min(self.input.len());
                        if n == 0 {
                            return Ok(());
                        }
                        self.out.extend(self.input.drain(..n));
                        self.passthrough -= n;
                        continue;
                    }
                    if self.input.len() < 9 {
                        return Ok(());
                    }
                    let len = usize::from(self.input[0]) << 16
                        | usize::from(self.input[1]) << 8
                        | usize::from(self.input[2]);
                    let kind = self.input[3];
                    match kind {
                        HEADERS | CONTINUATION => {
                            if len > MAX_BLOCK {
                                return Err(invalid("HTTP/2 header frame too large"));
                            }
                            if self.input.len() < 9 + len {
                                return Ok(());
                            }
                            let frame: Vec<u8> = self.input.drain(..9 + len).collect();
                            self.header_frame(&frame)?;
                        }
                        PUSH_PROMISE => return Err(invalid("PUSH_PROMISE from an HTTP/2 client")),
                        SETTINGS if self.block.is_none() && len <= MAX_FRAME => {
                            if self.input.len() < 9 + len {
                                return Ok(());
                            }
                            if self.input[4] & ACK == 0 {
                                self.settings.apply(&self.input[9..9 + len]);
                            }
                            self.out.extend(self.input.drain(..9 + len));
                        }
                        _ => {
                            if self.block.is_some() {
                                return Err(invalid("HTTP/2 frame inside a header block"));
                            }
                            self.out.extend(self.input.drain(..9));
                            self.passthrough = len;
                        }
                    }
                }
            }
        }
    }

    /// One HEADERS or CONTINUATION frame (header and payload).
    fn header_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[9..];
        if kind == HEADERS {
            if self.block.is_some() {
                return Err(invalid("HTTP/2 HEADERS inside a header block"));
            }
            let mut at = 0;
            let pad = if flags & PADDED != 0 {
                at = 1;
                usize::from(*payload.first().ok_or_else(|| invalid("HTTP/2 padding"))?)
            } else {
                0
            };
            let priority = if flags & PRIORITY != 0 {
                let p: [u8; 5] = payload
                    .get(at..at + 5)
                    .and_then(|p| p.try_into().ok())
                    .ok_or_else(|| invalid("HTTP/2 priority"))?;
                at += 5;
                Some(p)
            } else {
                None
            };
            let end = payload
                .len()
                .checked_sub(pad)
                .filter(|e| *e >= at)
                .ok_or_else(|| invalid("HTTP/2 padding longer than the frame"))?;
            self.block = Some(Block {
                stream,
                end_stream: flags & END_STREAM != 0,
                priority,
                fragment: payload[at..end].to_vec(),
            });
        } else {
            let block = self
                .block
                .as_mut()
                .filter(|b| b.stream == stream)
                .ok_or_else(|| invalid("HTTP/2 CONTINUATION without its HEADERS"))?;
            if block.fragment.len() + payload.len() > MAX_BLOCK {
                return Err(invalid("HTTP/2 header block too large"));
            }
            block.fragment.extend_from_slice(payload);
        }
        if flags & END_HEADERS != 0
            && let Some(block) = self.block.take()
        {
            self.emit(block)?;
        }
        Ok(())
    }

    /// Pass a complete header block on: unchanged when it is the connection's first and its `:authority` is valid
    /// (then the rest of the connection passes through, see [`first_block_is_valid`]); else decoded, repaired and
    /// re-encoded.
    fn emit(&mut self, block: Block) -> io::Result<()> {
        if !self.rewriting && first_block_is_valid(&block.fragment) {
            let mut bytes = Vec::with_capacity(5 + block.fragment.len());
            if let Some(p) = block.priority {
                bytes.extend_from_slice(&p);
            }
            bytes.extend_from_slice(&block.fragment);
            self.frame_block(&block, &bytes);
            self.phase = Phase::Passthrough;
            return Ok(());
        }
        self.rewriting = true;
        let mut headers: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        self.decoder
            .decode_with_cb(&block.fragment, |n, v| {
                headers.push((n.into_owned(), v.into_owned()))
            })
            .map_err(|e| invalid(format!("HTTP/2 header block: {e:?}")))?;
        for (name, value) in &mut headers {
            if name.as_slice() == b":authority" && !valid_authority(value) {
                tracing::trace!(
                    authority = %String::from_utf8_lossy(value),
                    "the client sent an :authority the HTTP/2 server would reject; using localhost"
                );
                *value = LOCAL_AUTHORITY.to_vec();
            }
        }
        let mut encoded = Vec::new();
        if let Some(p) = block.priority {
            encoded.extend_from_slice(&p);
        }
        self.encoder
            .encode_into(
                headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
                &mut encoded,
            )
            .map_err(|e| invalid(format!("HTTP/2 header block: {e}")))?;
        self.frame_block(&block, &encoded);
        Ok(())
    }

    /// Write `encoded` (the priority fields, if any, then the header block) as `block`'s HEADERS frame and as many
    /// CONTINUATION frames as it needs.
    fn frame_block(&mut self, block: &Block, encoded: &[u8]) {
        let mut chunks = encoded.chunks(MAX_FRAME).peekable();
        let mut first = true;
        // An empty block still needs its HEADERS frame.
        let empty: &[u8] = &[];
        let mut next = chunks.next().or(Some(empty));
        while let Some(chunk) = next {
            next = chunks.next();
            let mut flags = 0;
            let kind = if first {
                if block.end_stream {
                    flags |= END_STREAM;
                }
                if block.priority.is_some() {
                    flags |= PRIORITY;
                }
                HEADERS
            } else {
                CONTINUATION
            };
            if next.is_none() {
                flags |= END_HEADERS;
            }
            let len = chunk.len();
            self.out.extend_from_slice(&[
                (len >> 16) as u8,
                (len >> 8) as u8,
                len as u8,
                kind,
                flags,
            ]);
            self.out.extend_from_slice(&block.stream.to_be_bytes());
            self.out.extend_from_slice(chunk);
            first = false;
        }
    }
}

/// Whether a connection's first header block provably carries a valid `:authority` (or none), read without decoding
/// the block: the fast path for every client but C-core's kind (kubelet and the sidecars are grpc-go, which sends
/// `localhost`). Decoding every block with the HPACK context was a sixth of the driver's CPU with 256 volumes in
/// flight (kubelet dials a connection per call, so every call's block was decoded and re-encoded).
///
/// Such a block is passed on unchanged and so is the rest of the connection: the server's HPACK context is then the
/// client's own, and a gRPC client's authority is a property of its channel, the same on every call. (A client
/// that sent a valid authority first and an invalid one later on the same connection would get h2's reset for that
/// call; no gRPC client does.) `false` sends the block down the full path: anything not provable here — a reference
/// to the dynamic table, a malformed block, an invalid authority — is decided there.
fn first_block_is_valid(block: &[u8]) -> bool {
    /// Static-table index of `:authority` (RFC 7541 Appendix A); 62 and up are the dynamic table.
    const AUTHORITY: usize = 1;
    const DYNAMIC: usize = 62;
    let mut at = 0;
    while at < block.len() {
        // RFC 7541 §6: the representation, from the first bits, and its integer's prefix length.
        let (prefix, field) = match block[at] {
            b if b & 0x80 != 0 => (7, Field::Indexed),
            b if b & 0xc0 == 0x40 => (6, Field::Literal),
            b if b & 0xe0 == 0x20 => (5, Field::SizeUpdate),
            _ => (4, Field::Literal),
        };
        let Some((index, used)) = hpack_integer(&block[at..], prefix) else {
            return false;
        };
        at += used;
        match field {
            Field::SizeUpdate => continue,
            // The static `:authority` entry has an empty value (not an authority).
            Field::Indexed if index == AUTHORITY || index >= DYNAMIC || index == 0 => return false,
            Field::Indexed => continue,
            Field::Literal => {}
        }
        let is_authority = match index {
            0 => match hpack_string(block, &mut at) {
                Some((false, name)) => name == b":authority",
                // A string has one Huffman coding (RFC 7541 §5.2: the codes are prefix-free, the padding fixed).
                Some((true, name)) => name == HUFFMAN_AUTHORITY,
                None => return false,
            },
            i if i >= DYNAMIC => return false,
            i => i == AUTHORITY,
        };
        let Some((huffman, value)) = hpack_string(block, &mut at) else {
            return false;
        };
        if is_authority {
            let valid = if huffman {
                HUFFMAN.with(|d| {
                    d.borrow_mut()
                        .decode(value)
                        .is_ok_and(|v| valid_authority(&v))
                })
            } else {
                valid_authority(value)
            };
            if !valid {
                return false;
            }
        }
    }
    true
}

/// A header field representation (RFC 7541 §6), as far as [`first_block_is_valid`] tells them apart.
enum Field {
    Indexed,
    Literal,
    SizeUpdate,
}

/// `:authority` Huffman-coded (RFC 7541 Appendix B; h2 codes every new header name so).
const HUFFMAN_AUTHORITY: &[u8] = &[0xb8, 0x3b, 0x53, 0x39, 0xec, 0x32, 0x7d, 0x7f];

thread_local! {
    /// One Huffman decoder per thread: `loona_hpack` builds its code table for every string it decodes.
    static HUFFMAN: std::cell::RefCell<loona_hpack::huffman::HuffmanDecoder> =
        std::cell::RefCell::new(loona_hpack::huffman::HuffmanDecoder::new());
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1) at the start of `bytes`: its value and length.
fn hpack_integer(bytes: &[u8], n: u32) -> Option<(usize, usize)> {
    let max = (1usize << n) - 1;
    let mut value = usize::from(*bytes.first()?) & max;
    if value < max {
        return Some((value, 1));
    }
    for (i, &b) in bytes.iter().enumerate().skip(1).take(4) {
        value += usize::from(b & 0x7f) << (7 * (i - 1));
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// An HPACK string literal (RFC 7541 §5.2) at `*at`: whether it is Huffman-coded, and its bytes; `*at` moves past it.
fn hpack_string<'a>(block: &'a [u8], at: &mut usize) -> Option<(bool, &'a [u8])> {
    let huffman = *block.get(*at)? & 0x80 != 0;
    let (len, used) = hpack_integer(&block[*at..], 7)?;
    let start = *at + used;
    let bytes = block.get(start..start.checked_add(len)?)?;
    *at = start + len;
    Some((huffman, bytes))
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Past the first header block (every grpc-go connection) or not HTTP/2: nothing is left to fix, so once the
        // buffers are drained the caller's buffer is filled straight from the connection (no 16 KiB scratch buffer
        // zeroed per poll, no copy through `input` and `out`, no allocation per read).
        if this.phase == Phase::Passthrough
            && this.out_pos >= this.out.len()
            && this.input.is_empty()
            && !this.eof
        {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        loop {
            if this.out_pos < this.out.len() {
                let n = (this.out.len() - this.out_pos).min(buf.remaining());
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    // Freed, not kept: a connection holds nothing between requests (kubelet dials one per
                    // operation, so with 256 volumes in flight these buffers were ~3 KiB × 256 while every
                    // connection waited for its answer).
                    this.out = Vec::new();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            this.process()?;
            if this.input.is_empty() {
                this.input = Vec::new();
            }
            if !this.out.is_empty() {
                continue;
            }
            if this.eof {
                // A truncated frame at the end: hand it on as it is; the server reports it.
                if !this.input.is_empty() {
                    this.out.append(&mut this.input);
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
            } else {
                this.input.extend_from_slice(read.filled());
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// HPACK Huffman codes (RFC 7541 Appendix B) of the characters the tests use.
    const HUFFMAN: &[(u8, u32, u8)] = &[
        (b'C', 0x5e, 7),
        (b':', 0x5c, 7),
        (b'%', 0x15, 6),
        (b'2', 0x2, 5),
        (b'F', 0x61, 7),
        (b'a', 0x3, 5),
        (b'b', 0x23, 6),
        (b'c', 0x4, 5),
        (b'e', 0x5, 5),
        (b'g', 0x26, 6),
        (b'h', 0x27, 6),
        (b'i', 0x6, 5),
        (b'k', 0x75, 7),
        (b'l', 0x28, 6),
        (b'n', 0x2a, 6),
        (b'o', 0x7, 5),
        (b'p', 0x2b, 6),
        (b'r', 0x2c, 6),
        (b's', 0x8, 5),
        (b't', 0x9, 5),
        (b'u', 0x2d, 6),
        (b'v', 0x77, 7),
        (b'w', 0x78, 7),
        (b'y', 0x7a, 7),
        (b'.', 0x17, 6),
    ];

    fn huffman(text: &[u8]) -> Vec<u8> {
        let (mut out, mut acc, mut bits) = (Vec::new(), 0u64, 0u32);
        for c in text {
            let &(_, code, len) = HUFFMAN.iter().find(|(ch, _, _)| ch == c).expect("a code");
            acc = acc << len | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        if bits > 0 {
            // Padding: the most significant bits of EOS (all ones).
            out.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
        }
        out
    }

    /// An HPACK string literal: raw, or Huffman-coded (lengths below 127 only, enough here).
    fn string(text: &[u8], huff: bool) -> Vec<u8> {
        let body = if huff { huffman(text) } else { text.to_vec() };
        assert!(body.len() < 127);
        let mut out = vec![body.len() as u8 | if huff { 0x80 } else { 0 }];
        out.extend(body);
        out
    }

    /// What gRPC C-core sends for `unix:C:/var/lib/kubelet/plugins/wincsi.csi.io/csi.sock`.
    const C_CORE_AUTHORITY: &[u8] =
        b"C:%2Fvar%2Flib%2Fkubelet%2Fplugins%2Fwincsi.csi.io%2Fcsi.sock";

    /// A gRPC request header block the way C-core encodes it: static-table pseudo headers, `:path` and
    /// `:authority` as literals with incremental indexing (`:authority` Huffman-coded), then `content-type` and `te`.
    fn c_core_headers(path: &[u8]) -> Vec<u8> {
        let mut b = vec![0x83, 0x86, 0x44];
        b.extend(string(path, false));
        b.push(0x41);
        b.extend(string(C_CORE_AUTHORITY, true));
        b.push(0x5f);
        b.extend(string(b"application/grpc", false));
        b.push(0x40);
        b.extend(string(b"te", false));
        b.extend(string(b"trailers", false));
        b
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// The frames of `bytes` (after the preface): (type, flags, stream, payload).
    fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        assert!(bytes.starts_with(PREFACE));
        bytes = &bytes[PREFACE.len()..];
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let len =
                usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
            let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
            out.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
            bytes = &bytes[9 + len..];
        }
        out
    }

    async fn through(input: &[u8]) -> io::Result<Vec<u8>> {
        let mut fix = AuthorityFix::new(input);
        let mut out = Vec::new();
        fix.read_to_end(&mut out).await?;
        Ok(out)
    }

    #[test]
    fn huffman_codes_are_rfc_7541s() {
        assert_eq!(huffman(b":authority"), HUFFMAN_AUTHORITY);
        for text in [C_CORE_AUTHORITY, b"localhost", b":authority"] {
            let decoded = loona_hpack::huffman::HuffmanDecoder::new()
                .decode(&huffman(text))
                .expect("decodes");
            assert_eq!(decoded, text);
        }
        assert!(!valid_authority(C_CORE_AUTHORITY));
        assert!(!valid_authority(b"tmp%2Fcsi.sock"));
        assert!(!valid_authority(b"/var/lib/kubelet/csi.sock"));
        assert!(valid_authority(b"localhost") && valid_authority(b"[::1]:50051"));
    }

    #[tokio::test]
    async fn c_core_requests_reach_the_server_with_a_valid_authority_and_everything_else_intact() {
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[]));
        input.extend(frame(
            HEADERS,
            END_HEADERS,
            1,
            &c_core_headers(b"/csi.v1.Identity/GetPluginInfo"),
        ));
        input.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
        // The second request refers to the first one's dynamic-table entries by index (after its own `:path` is
        // inserted: :path = 62, te = 63, content-type = 64, :authority = 65), split over HEADERS + CONTINUATION,
        // padded.
        let second = {
            let mut b = vec![0x83, 0x86, 0x44];
            b.extend(string(b"/csi.v1.Identity/Probe", false));
            b.extend([0x80 | 65, 0x80 | 64, 0x80 | 63]);
            b
        };
        let (a, b) = second.split_at(3);
        let mut padded = vec![4];
        padded.extend(a);
        padded.extend([0; 4]);
        input.extend(frame(HEADERS, PADDED | END_STREAM, 3, &padded));
        input.extend(frame(CONTINUATION, END_HEADERS, 3, b));
        let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        input.extend(frame(0x0, 0, 5, &data));

        let out = through(&input).await.expect("through");
        let frames = frames(&out);
        let mut server = loona_hpack::Decoder::new();
        let headers: Vec<Vec<(Vec<u8>, Vec<u8>)>> = frames
            .iter()
            .filter(|f| f.0 == HEADERS)
            .map(|f| server.decode(&f.3).expect("h2 can decode what we send"))
            .collect();
        assert_eq!(headers.len(), 2);
        for (h, path) in headers.iter().zip([
            &b"/csi.v1.Identity/GetPluginInfo"[..],
            b"/csi.v1.Identity/Probe",
        ]) {
            let get = |n: &[u8]| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_slice());
            assert_eq!(get(b":authority"), Some(LOCAL_AUTHORITY));
            assert_eq!(get(b":path"), Some(path));
            assert_eq!(get(b":method"), Some(&b"POST"[..]));
            assert_eq!(get(b"content-type"), Some(&b"application/grpc"[..]));
            assert_eq!(get(b"te"), Some(&b"trailers"[..]));
        }
        let kinds: Vec<(u8, u8, u32)> = frames.iter().map(|f| (f.0, f.1, f.2)).collect();
        assert_eq!(
            kinds,
            [
                (0x4, 0, 0),
                (HEADERS, END_HEADERS, 1),
                (0x0, END_STREAM, 1),
                (HEADERS, END_HEADERS | END_STREAM, 3),
                (0x0, 0, 5),
            ]
        );
        assert_eq!(frames[2].3, [0, 0, 0, 0, 0]);
        assert_eq!(frames[4].3, data, "DATA passes byte for byte");
    }

    #[tokio::test]
    async fn valid_authorities_are_kept_and_large_blocks_are_split() {
        let mut input = PREFACE.to_vec();
        let mut block = vec![0x83, 0x86, 0x84, 0x41];
        block.extend(string(b"localhost:1234", false));
        let big = vec![b'x'; 40_000];
        block.push(0x00);
        block.extend(string(b"x-big", false));
        block.push(0x7f);
        let mut n = big.len() - 127;
        while n >= 128 {
            block.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        block.push(n as u8);
        block.extend(&big);
        input.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM | PRIORITY,
            1,
            &[[0, 0, 0, 0, 15].as_slice(), &block].concat(),
        ));
        let out = through(&input).await.expect("through");
        let frames = frames(&out);
        assert!(frames.len() >= 3, "split into HEADERS + CONTINUATION");
        assert!(frames.iter().all(|f| f.3.len() <= MAX_FRAME));
        assert_eq!((frames[0].0, frames[0].1), (HEADERS, END_STREAM | PRIORITY));
        assert_eq!(&frames[0].3[..5], &[0, 0, 0, 0, 15]);
        let last = frames.last().expect("last");
        assert_eq!((last.0, last.1), (CONTINUATION, END_HEADERS));
        let block: Vec<u8> = frames
            .iter()
            .enumerate()
            .flat_map(|(i, f)| {
                if i == 0 {
                    f.3[5..].to_vec()
                } else {
                    f.3.clone()
                }
            })
            .collect();
        let h = loona_hpack::Decoder::new().decode(&block).expect("decode");
        assert!(h.contains(&(b":authority".to_vec(), b"localhost:1234".to_vec())));
        assert!(h.contains(&(b"x-big".to_vec(), big)));
    }

    #[tokio::test]
    async fn a_connection_whose_first_block_is_valid_passes_through_unchanged() {
        // grpc-go's way (kubelet, the sidecars): `:authority` Huffman-coded against its static name, indexed with
        // incremental indexing; the second request refers to the dynamic table (which a pass-through leaves as the
        // client made it).
        let mut first = vec![0x83, 0x86, 0x44];
        first.extend(string(b"/csi.v1.Node/NodeStageVolume", false));
        first.push(0x41);
        first.extend(string(b"localhost", true));
        first.push(0x5f);
        first.extend(string(b"application/grpc", false));
        // h2 Huffman-codes new names.
        first.push(0x40);
        first.extend(string(b"te", true));
        first.extend(string(b"trailers", false));
        assert!(first_block_is_valid(&first));
        let renamed = [
            &[0x83, 0x40][..],
            &string(b":authority", true),
            &string(b"localhost", false),
        ]
        .concat();
        assert!(first_block_is_valid(&renamed));
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[]));
        input.extend(frame(HEADERS, END_HEADERS, 1, &first));
        input.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
        input.extend(frame(
            HEADERS,
            END_HEADERS,
            3,
            &[0x83, 0x86, 0x80 | 64, 0x80 | 63],
        ));
        let out = through(&input).await.expect("through");
        assert_eq!(out, input, "byte for byte");
        let mut server = loona_hpack::Decoder::new();
        let blocks: Vec<_> = frames(&out)
            .into_iter()
            .filter(|f| f.0 == HEADERS)
            .map(|f| server.decode(&f.3).expect("decodes"))
            .collect();
        assert!(blocks[1].contains(&(b":authority".to_vec(), b"localhost".to_vec())));
    }

    #[tokio::test]
    async fn a_first_block_the_fast_path_cannot_prove_takes_the_full_one() {
        // An invalid authority under a literal name, raw; one under the static name, Huffman-coded; a reference to
        // the dynamic table inside the first block; an invalid one under a Huffman-coded name. Each is still repaired (or
        // kept) exactly.
        let blocks: [(Vec<u8>, &[u8]); 4] = [
            (
                [
                    &[0x83, 0x86, 0x00][..],
                    &string(b":authority", false),
                    &string(b"a%2Fb", false),
                ]
                .concat(),
                LOCAL_AUTHORITY,
            ),
            (
                [&[0x83, 0x41][..], &string(C_CORE_AUTHORITY, true)].concat(),
                LOCAL_AUTHORITY,
            ),
            (
                [
                    &[0x83, 0x41][..],
                    &string(b"localhost", false),
                    &[0x80 | 62],
                ]
                .concat(),
                b"localhost",
            ),
            (
                [
                    &[0x83, 0x40][..],
                    &string(b":authority", true),
                    &string(b"a%2Fb", false),
                ]
                .concat(),
                LOCAL_AUTHORITY,
            ),
        ];
        for (block, want) in blocks {
            assert!(!first_block_is_valid(&block));
            let mut input = PREFACE.to_vec();
            input.extend(frame(HEADERS, END_HEADERS, 1, &block));
            let out = through(&input).await.expect("through");
            let h = loona_hpack::Decoder::new()
                .decode(&frames(&out)[0].3)
                .expect("decodes");
            assert!(
                h.iter()
                    .filter(|(n, _)| n == b":authority")
                    .all(|(_, v)| v == want),
                "{h:?}"
            );
        }
        // Integers over several bytes, and cut ones.
        assert_eq!(hpack_integer(&[0x1f, 0x9a, 0x0a], 5), Some((1337, 3)));
        assert_eq!(hpack_integer(&[0x7f, 0x80], 7), None);
        assert!(!first_block_is_valid(&[0x41, 0x85, b'l']));
    }

    #[tokio::test]
    async fn the_client_s_settings_are_read_in_passing_and_passed_on_unchanged() {
        // What hyper's client sends (ENABLE_PUSH 0, INITIAL_WINDOW_SIZE, MAX_HEADER_LIST_SIZE 16384), then an ACK of
        // the server's SETTINGS (which carries no parameters), then a request.
        let mut input = PREFACE.to_vec();
        input.extend(frame(
            SETTINGS,
            0,
            0,
            &[0, 2, 0, 0, 0, 0, 0, 4, 0, 32, 0, 0, 0, 6, 0, 0, 0x40, 0],
        ));
        input.extend(frame(SETTINGS, ACK, 0, &[]));
        input.extend(frame(HEADERS, END_HEADERS, 1, &c_core_headers(b"/x")));
        let mut fix = AuthorityFix::new(&input[..]);
        let settings = fix.client_settings();
        assert_eq!(settings.max_header_list_size(), None, "nothing read yet");
        let mut out = Vec::new();
        fix.read_to_end(&mut out).await.expect("through");
        assert_eq!(settings.max_header_list_size(), Some(16_384));
        assert_eq!(frames(&out)[..2], frames(&input)[..2], "SETTINGS unchanged");
        // A client that announces no limit (grpc-go's default) has none; a later ACK changes nothing.
        let mut quiet = PREFACE.to_vec();
        quiet.extend(frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0]));
        quiet.extend(frame(SETTINGS, ACK, 0, &[]));
        let mut fix = AuthorityFix::new(&quiet[..]);
        let settings = fix.client_settings();
        let mut out = Vec::new();
        fix.read_to_end(&mut out).await.expect("through");
        assert_eq!(out, quiet);
        assert_eq!(settings.max_header_list_size(), None);
    }

    #[tokio::test]
    async fn other_protocols_pass_through_and_garbage_is_refused() {
        let http1 = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(through(http1).await.expect("through"), http1);
        let mut bad = PREFACE.to_vec();
        bad.extend(frame(
            HEADERS,
            END_HEADERS,
            1,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ));
        assert_eq!(
            through(&bad).await.expect_err("malformed").kind(),
            io::ErrorKind::InvalidData
        );
        let mut orphan = PREFACE.to_vec();
        orphan.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x83]));
        assert!(through(&orphan).await.is_err());
        let mut interleaved = PREFACE.to_vec();
        interleaved.extend(frame(HEADERS, 0, 1, &[0x83]));
        interleaved.extend(frame(0x0, 0, 1, &[1]));
        assert!(through(&interleaved).await.is_err());
        // Cut anywhere: what arrived is passed on, nothing panics.
        let mut full = PREFACE.to_vec();
        full.extend(frame(HEADERS, END_HEADERS, 1, &c_core_headers(b"/x")));
        for cut in 0..full.len() {
            let _ = through(&full[..cut]).await;
        }
    }
}
