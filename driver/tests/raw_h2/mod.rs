//! A raw HTTP/2 gRPC client that sends exactly what gRPC C-core (Python grpcio and the other C-core wrappers) sends
//! for a `unix:` target, for the tests of issue 15 item 13 on both listener twins.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// HPACK Huffman codes (RFC 7541 Appendix B) of the characters used below.
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
    (b'.', 0x17, 6),
];

/// An HPACK string literal (length < 127), Huffman-coded or raw.
fn hpack_string(text: &[u8], huffman: bool) -> Vec<u8> {
    let body = if huffman {
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
            out.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
        }
        out
    } else {
        text.to_vec()
    };
    assert!(body.len() < 127);
    let mut out = vec![body.len() as u8 | if huffman { 0x80 } else { 0 }];
    out.extend(body);
    out
}

/// One response as a raw client sees it: decoded headers (response and trailers), DATA bytes, RST_STREAM code.
pub(crate) type RawResponse = (Vec<(String, String)>, Vec<u8>, Option<u32>);

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// A raw HTTP/2 client that sends exactly what gRPC C-core (Python grpcio, …) sends for the target
/// `unix:C:/var/lib/kubelet/plugins/wincsi.csi.io/csi.sock`: `:authority` is the percent-encoded path, a literal
/// with incremental indexing, Huffman-coded; the second request on the connection refers to it by its dynamic-table
/// index. Returns, per stream, the decoded response headers and trailers, the DATA bytes, and any RST_STREAM code.
pub(crate) async fn c_core_calls<S>(mut conn: S, paths: &[&str]) -> Vec<RawResponse>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let authority = b"C:%2Fvar%2Flib%2Fkubelet%2Fplugins%2Fwincsi.csi.io%2Fcsi.sock";
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    for (i, path) in paths.iter().enumerate() {
        let stream = 2 * i as u32 + 1;
        let mut block = vec![0x83, 0x86, 0x44];
        block.extend(hpack_string(path.as_bytes(), false));
        if i == 0 {
            block.push(0x41);
            block.extend(hpack_string(authority, true));
            block.push(0x5f);
            block.extend(hpack_string(b"application/grpc", false));
            block.push(0x40);
            block.extend(hpack_string(b"te", false));
            block.extend(hpack_string(b"trailers", false));
        } else {
            // Every request inserts its :path first, so the first request's te, content-type and :authority are
            // at 62 + i, 63 + i and 64 + i now.
            let te = 62 + i as u8;
            block.extend([0x80 | (te + 2), 0x80 | (te + 1), 0x80 | te]);
        }
        out.extend(h2_frame(0x1, 0x4, stream, &block));
        out.extend(h2_frame(0x0, 0x1, stream, &[0, 0, 0, 0, 0]));
    }
    conn.write_all(&out).await.expect("send");
    let mut results: Vec<RawResponse> = vec![(Vec::new(), Vec::new(), None); paths.len()];
    let mut decoder = loona_hpack::Decoder::new();
    let mut done = 0;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while done < paths.len() {
            let mut chunk = [0u8; 4096];
            let n = conn.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
            while buf.len() >= 9 {
                let len =
                    usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
                if buf.len() < 9 + len {
                    break;
                }
                let frame: Vec<u8> = buf.drain(..9 + len).collect();
                let (kind, flags) = (frame[3], frame[4]);
                let stream =
                    u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
                let payload = &frame[9..];
                let slot = (stream as usize).checked_sub(1).map(|s| s / 2);
                match (kind, slot) {
                    (0x4, _) if flags & 0x1 == 0 => {
                        conn.write_all(&h2_frame(0x4, 0x1, 0, &[]))
                            .await
                            .expect("ack");
                    }
                    (0x1, Some(s)) => {
                        for (k, v) in decoder.decode(payload).expect("response headers") {
                            results[s].0.push((
                                String::from_utf8_lossy(&k).into_owned(),
                                String::from_utf8_lossy(&v).into_owned(),
                            ));
                        }
                        if flags & 0x1 != 0 {
                            done += 1;
                        }
                    }
                    (0x0, Some(s)) => {
                        results[s].1.extend_from_slice(payload);
                        if flags & 0x1 != 0 {
                            done += 1;
                        }
                    }
                    (0x3, Some(s)) => {
                        results[s].2 = Some(u32::from_be_bytes([
                            payload[0], payload[1], payload[2], payload[3],
                        ]));
                        done += 1;
                    }
                    (0x7, _) => panic!("GOAWAY: {payload:?}"),
                    _ => {}
                }
            }
        }
    })
    .await
    .expect("the server answered every request");
    results
}
