//! Host calls and latency per host backend, on the simulated host, both in-process: the csi-proxy backend over the
//! simulated csi-proxy's gRPC services (in-memory HTTP/2 connections) and the native backend over the simulated
//! host's Windows view (the `winhost` facade). Prints the Markdown table of BENCHMARKS.md §6:
//!
//! ```sh
//! cargo run --release -p wincsi-driver --example backend_bench            # 200 rounds per backend
//! cargo run --release -p wincsi-driver --example backend_bench -- 50      # fewer
//! ```
//!
//! One round = SMB stage → publish → unpublish → unstage, then iSCSI stage (RAW LUN: partition + format) → publish
//! → unpublish → unstage, on a fresh host; latency is each CSI operation's wall time through the driver's
//! `VolumeManager` (no CSI socket), host calls are the simulated host's audit entries per operation (csi-proxy RPCs,
//! or WMI + Win32 calls) and the port operations the driver's protocols made.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sim::inproc::InProcess;
use sim::wmi::{TestBackend, WindowsView};
use sim::{HostOptions, Scenario, SimHost};
use wincsi::backend::Manager;
use wincsi::host::KubeletRoot;
use wincsi::host::csi_proxy::CsiProxyHost;
use wincsi::host::native::NativeHost;
use wincsi::host::native::testing::TestHost;
use wincsi::lifecycle::{
    AccessType, Capability, PublishRequest, StageRequest, UnpublishRequest, UnstageRequest,
    VolumeConfig,
};
use wincsi::locks::Deadline;
use wincsi::smb::Secrets;

const OPS: [&str; 4] = ["stage", "publish", "unpublish", "unstage"];

fn scenario() -> Scenario {
    Scenario::from_json(
        &json!({
            "host": {"csi_proxy_version": "v1.3.0",
                     "directories": [r"C:\var\lib\kubelet\plugins\b", r"C:\var\lib\kubelet\pods\p"]},
            "smb": {"servers": [{"name": "fs1",
                "accounts": [{"user": "bob", "password": "Bench-Pw-0123!", "domain": "CORP"}],
                "shares": [{"name": "data"}]}]},
            "iscsi": {"portals": [{"address": "10.0.0.5", "targets": [{"iqn": "iqn.2026-01.io.bench:t",
                "luns": [{"lun": 0, "size": 1u64 << 30, "online": true}]}]}]}
        })
        .to_string(),
    )
    .expect("scenario")
}

fn cap() -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Mount {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: 1,
    })
}

fn requests(
    smb: bool,
) -> (
    StageRequest,
    PublishRequest,
    UnpublishRequest,
    UnstageRequest,
) {
    let id = if smb { "s" } else { "l" };
    let staging = format!(r"C:\var\lib\kubelet\plugins\b\{id}");
    let target = format!(r"C:\var\lib\kubelet\pods\p\{id}");
    let ctx: BTreeMap<String, String> = if smb {
        [("source", r"\\fs1\data")].into_iter()
    } else {
        [("targetPortal", "10.0.0.5")].into_iter()
    }
    .chain(if smb {
        vec![]
    } else {
        vec![("iqn", "iqn.2026-01.io.bench:t"), ("lun", "0")]
    })
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let secrets = if smb {
        Secrets::new([
            ("username", "bob"),
            ("password", "Bench-Pw-0123!"),
            ("domain", "CORP"),
        ])
    } else {
        Secrets::default()
    };
    (
        StageRequest {
            volume_id: id.into(),
            staging_target_path: staging.clone(),
            capability: cap(),
            volume_context: ctx,
            secrets,
        },
        PublishRequest {
            volume_id: id.into(),
            staging_target_path: staging.clone(),
            target_path: target.clone(),
            capability: cap(),
            ..Default::default()
        },
        UnpublishRequest {
            volume_id: id.into(),
            target_path: target,
        },
        UnstageRequest {
            volume_id: id.into(),
            staging_target_path: staging,
        },
    )
}

#[derive(Default)]
struct Cell {
    times: Vec<Duration>,
    calls: usize,
}

type Table = BTreeMap<(TestBackend, &'static str, &'static str), Cell>;

async fn round(backend: TestBackend, table: &mut Table) {
    let sandbox = tempfile::tempdir().expect("tmp");
    let state = tempfile::tempdir().expect("tmp");
    let sim = SimHost::new(&scenario(), sandbox.path(), HostOptions::default()).expect("sim");
    let host = match backend {
        TestBackend::CsiProxy => {
            TestHost::CsiProxy(CsiProxyHost::new(InProcess::new(sim.clone()).client()))
        }
        TestBackend::Native => TestHost::NativeBare(NativeHost::new(
            Arc::new(WindowsView::new(sim.clone())),
            Some(state.path()),
        )),
    };
    let cfg = VolumeConfig {
        kubelet_root: KubeletRoot::new(r"C:\var\lib\kubelet").expect("root"),
        driver_name: "wincsi.csi.io".into(),
    };
    let mgr: Manager<TestHost> =
        wincsi::backend::manager(host, cfg, state.path()).expect("manager");
    let d = || Deadline::after(Duration::from_secs(60));
    for (protocol, smb) in [("SMB", true), ("iSCSI", false)] {
        let (stage, publish, unpublish, unstage) = requests(smb);
        for op in OPS {
            sim.clear_audit();
            let t = Instant::now();
            let r = match op {
                "stage" => mgr.stage(&stage, d()).await,
                "publish" => mgr.publish(&publish, d()).await,
                "unpublish" => mgr.unpublish(&unpublish, d()).await,
                _ => mgr.unstage(&unstage, d()).await,
            };
            let elapsed = t.elapsed();
            r.unwrap_or_else(|e| panic!("{backend} {protocol} {op}: {e:?}"));
            let cell = table.entry((backend, protocol, op)).or_default();
            cell.times.push(elapsed);
            cell.calls = sim.audit(0).len();
        }
    }
    assert!(sim.invariants().ok(), "{:?}", sim.invariants());
}

fn pct(times: &[Duration], p: f64) -> Duration {
    let mut v = times.to_vec();
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut table = Table::new();
    rt.block_on(async {
        for backend in [TestBackend::CsiProxy, TestBackend::Native] {
            // One warm-up round, not counted.
            round(backend, &mut Table::new()).await;
            for _ in 0..rounds {
                round(backend, &mut table).await;
            }
        }
    });
    println!(
        "| Protocol | Operation | csi-proxy: host calls | csi-proxy: p50 | csi-proxy: p90 | native: host calls (WMI + Win32) | native: p50 | native: p90 |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for protocol in ["SMB", "iSCSI"] {
        for op in OPS {
            let c = &table[&(TestBackend::CsiProxy, protocol, op)];
            let n = &table[&(TestBackend::Native, protocol, op)];
            println!(
                "| {protocol} | {op} | {} | {} | {} | {} | {} | {} |",
                c.calls,
                ms(pct(&c.times, 0.5)),
                ms(pct(&c.times, 0.9)),
                n.calls,
                ms(pct(&n.times, 0.5)),
                ms(pct(&n.times, 0.9)),
            );
        }
    }
    println!("\n{rounds} rounds per backend, each on a fresh simulated host.");
}
