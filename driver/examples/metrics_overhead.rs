//! What the metrics cost: the per-RPC overhead of `rpc()` with metrics installed against without, the cost of
//! recording one host call (what `host::Metered` adds to each), and one scrape's encoding. Prints figures only (timing
//! never decides a test): `cargo run --release -p wincsi-driver --example metrics_overhead`.

use std::hint::black_box;
use std::time::Instant;

use wincsi::metrics::{self, Metrics};
use wincsi::rpc::{RpcFields, rpc};

const N: u32 = 200_000;

async fn rpcs(method: &'static str) -> f64 {
    let start = Instant::now();
    for _ in 0..N {
        let r = rpc(method, RpcFields::volume("pv-1"), async { Ok(()) }).await;
        black_box(r.is_ok());
    }
    start.elapsed().as_nanos() as f64 / f64::from(N)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    // Warm up, then without metrics (nothing installed: one branch per RPC).
    rt.block_on(rpcs("NodeGetInfo"));
    let off = rt.block_on(rpcs("NodeGetInfo"));
    metrics::install();
    rt.block_on(rpcs("NodeStageVolume"));
    let on = rt.block_on(rpcs("NodeStageVolume"));
    println!(
        "rpc() per call: {off:.0} ns without metrics, {on:.0} ns with metrics: +{:.0} ns",
        on - off
    );

    let m = Metrics::new();
    let start = Instant::now();
    for _ in 0..N {
        let t = Instant::now();
        m.observe_host_call(
            "csi-proxy",
            "NewSmbGlobalMapping",
            "ok",
            t.elapsed().as_secs_f64(),
        );
    }
    let host = start.elapsed().as_nanos() as f64 / f64::from(N);
    println!("one host call recorded (clock read + counter + histogram): {host:.0} ns");

    // A busy node's exposition: every RPC with three codes, every host operation with two outcomes.
    let methods = [
        "NodeStageVolume",
        "NodeUnstageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeGetVolumeStats",
        "NodeExpandVolume",
        "NodeGetCapabilities",
        "NodeGetInfo",
        "Probe",
        "GetPluginInfo",
    ];
    for method in methods {
        for code in ["OK", "Aborted", "Internal"] {
            m.observe_rpc(method, code, 0.01);
        }
    }
    for op in 0..28 {
        let op: &'static str = Box::leak(format!("Operation{op}").into_boxed_str());
        for outcome in ["ok", "unavailable"] {
            m.observe_host_call("csi-proxy", op, outcome, 0.01);
        }
    }
    let start = Instant::now();
    let mut bytes = 0;
    for _ in 0..100 {
        bytes = black_box(m.encode()).len();
    }
    println!(
        "one scrape's encoding ({} series lines, {bytes} bytes): {:.0} µs",
        m.encode().lines().filter(|l| !l.starts_with('#')).count(),
        start.elapsed().as_secs_f64() * 1e6 / 100.0
    );
}
