//! Shared by the driver's HTTP endpoint tests (`metrics.rs` on Unix, `wine_metrics.rs` under Wine): finding the
//! listeners in the driver's log, plain HTTP/1.1 requests over loopback, and reading the Prometheus text.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The HTTP listeners the driver logged (`serving HTTP`): address → the paths it serves.
pub fn http_listeners(log: &str) -> BTreeMap<String, SocketAddr> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let field = |k: &str| {
            v.get(k)
                .or_else(|| v.get("fields").and_then(|f| f.get(k)))
                .and_then(|x| x.as_str())
                .map(str::to_owned)
        };
        if field("message").as_deref() == Some("serving HTTP") {
            let addr = field("address")
                .expect("address")
                .parse()
                .expect("socket address");
            out.insert(field("paths").expect("paths"), addr);
        }
    }
    out
}

/// Where to connect to a listener bound at `addr`: IPv4 loopback for an unspecified address (`:PORT` binds `[::]`
/// dual-stack, or `0.0.0.0`), so the dual-stack listener is reached over IPv4 as kubelet's probes usually are.
pub fn reachable(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::from(([127, 0, 0, 1], addr.port()))
    } else {
        addr
    }
}

/// `GET path` over a fresh connection: the status and the body.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: wincsi\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    (head[9..12].parse().expect("status"), body.to_owned())
}

/// Asks `path` until it answers `status` (the readiness result is cached for a second), at most 30 s.
pub async fn until_status(addr: SocketAddr, path: &str, status: u16) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (got, body) = get(addr, path).await;
        if got == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} still answers {got} {body:?}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the sample `name{labels}` (labels exactly as exposed), if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
}

/// Sum of `wincsi_host_calls_total` by operation, over every outcome.
pub fn host_calls_by_operation(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) =
            line.strip_prefix("wincsi_host_calls_total{backend=\"csi-proxy\",operation=\"")
        else {
            continue;
        };
        let (op, rest) = rest.split_once('"').expect("operation");
        let n: u64 = rest
            .rsplit(' ')
            .next()
            .expect("value")
            .parse()
            .expect("count");
        *out.entry(op.to_owned()).or_default() += n;
    }
    out
}
