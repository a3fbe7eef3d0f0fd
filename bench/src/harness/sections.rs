//! The measurements: floor, per-RPC overhead with host round trips, concurrency scaling, footprint, soak.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde::Serialize;
use sim::admin::AdminClient;
use wincsi_e2e::{CsiConn, ProxyWiring};

use super::echo::EchoProcess;
use super::error::{Error, Result};
use super::node::{BenchNode, Samples};
use super::stats::{Stats, median};
use super::sys::{self, Memory};
use super::volumes::{Allocator, BenchVolume, CallError, Protocol, Rpc};

/// Warm-up lifecycles per protocol before the per-RPC timings are recorded (lazy connections, first allocations).
const WARMUP: usize = 3;

/// The floor section's result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Floor {
    /// One plain gRPC round trip (`GetPluginInfo` to a trivial server process over a Unix socket).
    pub(crate) echo: Stats,
    /// The same call to the driver under test (its own trivial RPC, for comparison).
    pub(crate) driver_get_plugin_info: Stats,
    /// The simulator's cheapest csi-proxy call (`GetBIOSSerialNumber`) from this process through the driver's
    /// csi-proxy client crate: a host call's round trip with next to no host work.
    pub(crate) sim_call: Stats,
    /// One durable record write (temp file, fsync, rename, directory fsync) on the state directory's filesystem,
    /// sampled after every timed RPC of the per-RPC section.
    pub(crate) durable_write: Stats,
    /// One durable record removal (unlink, directory fsync) on the same filesystem, sampled likewise.
    pub(crate) durable_remove: Stats,
}

/// Times `n` sequential calls of `call` (after 100 unrecorded ones).
async fn time_calls<F, Fut>(n: usize, mut call: F) -> Result<Stats>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 100 {
        let start = Instant::now();
        call().await?;
        if i >= 100 {
            samples.push(start.elapsed());
        }
    }
    Ok(Stats::of(&samples))
}

/// Times `n` sequential `GetPluginInfo` calls on `conn` (after 100 unrecorded ones).
async fn time_identity(conn: &CsiConn, n: usize) -> Result<Stats> {
    let client = conn.identity();
    time_calls(n, || {
        let mut client = client.clone();
        async move {
            client
                .get_plugin_info(csi::v1::GetPluginInfoRequest {})
                .await
                .map(drop)
                .map_err(|s| Error::Setup(format!("GetPluginInfo: {s}")))
        }
    })
    .await
}

/// `n` sequential `GetBIOSSerialNumber` calls to the simulator (after 100 unrecorded ones), through the csi-proxy
/// client crate the driver uses (before the sections that count calls).
pub(crate) async fn sim_floor(node: &BenchNode, n: usize) -> Result<Stats> {
    let ProxyWiring::UnixSockets(dir) = node.proxy_wiring() else {
        return Err(Error::Setup(
            "the simulator's round trip needs its Unix sockets".to_owned(),
        ));
    };
    let client =
        proxy_client::ProxyClient::new(proxy_client::Transport::UnixSockets { dir: dir.clone() });
    let system = client.system();
    time_calls(n, || async {
        system
            .bios_serial()
            .await
            .map(drop)
            .map_err(|e| Error::Setup(format!("GetBIOSSerialNumber: {e}")))
    })
    .await
}

/// The plain-gRPC round trip on a Unix socket to a separate trivial server process.
pub(crate) async fn echo_floor(dir: &Path, n: usize) -> Result<Stats> {
    let socket = dir.join("floor.sock");
    let _server = EchoProcess::start(&socket, Duration::ZERO).await?;
    let conn = CsiConn::connect(&format!("unix://{}", socket.display()))?;
    time_identity(&conn, n).await
}

/// The driver's own trivial RPC.
pub(crate) async fn driver_floor(node: &BenchNode, n: usize) -> Result<Stats> {
    time_identity(node.csi(), n).await
}

/// Host calls made since `cursor` (advanced past them), by RPC name in order.
async fn host_calls_since(host: &AdminClient, cursor: &mut u64) -> Result<Vec<String>> {
    Ok(host_calls_timed(host, cursor).await?.0)
}

/// The csi-proxy call of the driver's backend check, which each scrape of its `/metrics` makes (cached for a
/// second): `PathExists` of the driver's plugin directory, the harness's own doing, never part of the RPC being
/// measured, so left out of every count.
fn is_probe(e: &sim::AuditEntry) -> bool {
    const PLUGIN_DIR: &str = r"C:\var\lib\kubelet\plugins\wincsi.csi.io";
    e.rpc == "PathExists" && e.args["path"].as_str() == Some(PLUGIN_DIR)
}

/// Like [`host_calls_since`], plus the time the simulator spent inside those calls (its own processing).
async fn host_calls_timed(host: &AdminClient, cursor: &mut u64) -> Result<(Vec<String>, Duration)> {
    let mut entries = host.audit(*cursor).await?;
    if let Some(last) = entries.last() {
        *cursor = last.seq;
    }
    entries.retain(|e| !is_probe(e));
    let inside = Duration::from_micros(entries.iter().map(|e| e.duration_us).sum());
    Ok((entries.into_iter().map(|e| e.rpc).collect(), inside))
}

/// One durable record write as the driver's state store does it (write a temporary file, fsync it, rename it over
/// the record, fsync the directory) in `dir`, on the same filesystem as its `--state-dir`; its duration.
fn durable_write_once(dir: &Path) -> Result<Duration> {
    use std::io::Write as _;
    let record = dir.join("record.json");
    let tmp = dir.join("record.json.tmp");
    let start = Instant::now();
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&[b'x'; 400])?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &record)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(Error::io(format!("durable write in {}", dir.display())))?;
    Ok(start.elapsed())
}

/// One durable record removal as the store does it (unlink the record, fsync the directory) of the record
/// [`durable_write_once`] left in `dir`; its duration.
fn durable_remove_once(dir: &Path) -> Result<Duration> {
    let start = Instant::now();
    let remove = || -> std::io::Result<()> {
        std::fs::remove_file(dir.join("record.json"))?;
        std::fs::File::open(dir)?.sync_all()
    };
    remove().map_err(Error::io(format!("durable removal in {}", dir.display())))?;
    Ok(start.elapsed())
}

/// The durable-write floor, sampled between the per-RPC section's RPCs so that it sees the disk as they did.
#[derive(Debug, Default)]
pub(crate) struct DurableSamples {
    /// Durable record writes.
    pub(crate) writes: Vec<Duration>,
    /// Durable record removals.
    pub(crate) removals: Vec<Duration>,
}

impl DurableSamples {
    /// One write then one removal in `dir`.
    fn sample(&mut self, dir: &Path) -> Result<()> {
        self.writes.push(durable_write_once(dir)?);
        self.removals.push(durable_remove_once(dir)?);
        Ok(())
    }
}

/// The operations whose host calls are counted, in lifecycle order.
pub(crate) const OPERATIONS: [(&str, Rpc); 5] = [
    ("first-time stage", Rpc::Stage),
    ("repeated stage", Rpc::Stage),
    ("publish", Rpc::Publish),
    ("unpublish", Rpc::Unpublish),
    ("unstage", Rpc::Unstage),
];

/// Per protocol and operation: latencies and host calls.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OpMeasure {
    /// Protocol.
    pub(crate) protocol: Protocol,
    /// Operation (one of [`OPERATIONS`]).
    pub(crate) operation: &'static str,
    /// The CSI method.
    pub(crate) rpc: &'static str,
    /// Latency of the measured iterations.
    pub(crate) latency: Stats,
    /// Time the simulator spent inside this RPC's host calls (its own processing, summed per RPC).
    pub(crate) in_host: Stats,
    /// This RPC's host calls as the driver timed them (`wincsi_host_call_duration_seconds_sum`, read between RPCs):
    /// the csi-proxy client, the transport and the simulator's server and work.
    pub(crate) host_timed: Stats,
    /// The driver's own part of each sample: the RPC's latency less its host calls as the driver timed them (the
    /// CSI transport, the handler, its records).
    pub(crate) own: Stats,
    /// Of the driver's own part, the time the RPC waited for its records to be durable
    /// (`wincsi_state_commit_wait_seconds_sum`, read between RPCs): the committer's hand-off and its `fsync`s.
    pub(crate) durable_wait: Stats,
    /// Host calls: median, min, max over every iteration.
    pub(crate) host_calls: usize,
    /// Fewest host calls seen.
    pub(crate) host_calls_min: usize,
    /// Most host calls seen.
    pub(crate) host_calls_max: usize,
    /// The host calls of the first iteration, in order.
    pub(crate) sequence: Vec<String>,
    /// Durable state-record file writes (median over every iteration): the driver's committed changes
    /// (`wincsi_state_commit_changes_total`, read between RPCs) less the record files that disappeared.
    pub(crate) record_writes: usize,
    /// Durable state-record removals (median): record files under `--state-dir` before the RPC and gone after it.
    pub(crate) record_removals: usize,
    /// Fewest and most committed changes (writes + removals) seen in one call.
    pub(crate) record_changes_range: (usize, usize),
}

/// Per-RPC section: `iterations` (+ warm-up) sequential lifecycles per protocol, each on a fresh volume, at zero
/// injected latency, one CSI connection; every RPC timed alone and its host calls read from the audit log.
///
/// After every timed RPC (outside its timing), one durable record write and one removal are timed in `fsync_dir`
/// (on the `--state-dir` filesystem) for the floor, so that the floor and the RPCs see the same disk load.
pub(crate) async fn per_rpc(
    node: &BenchNode,
    alloc: &Allocator,
    iterations: usize,
    fsync_dir: &Path,
    errors: &mut Vec<CallError>,
) -> Result<(Vec<OpMeasure>, DurableSamples)> {
    std::fs::create_dir_all(fsync_dir)
        .map_err(Error::io(format!("creating {}", fsync_dir.display())))?;
    let mut durable = DurableSamples::default();
    let host = node.host();
    let conn = node.csi();
    let mut cursor = host.audit(0).await?.last().map_or(0, |e| e.seq);
    let mut out = Vec::new();
    for protocol in Protocol::ALL {
        let mut lat: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
        let mut inside: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
        let mut timed: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
        let mut own: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
        let mut waited: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
        let mut counts: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut seqs: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let mut writes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut removals: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in 0..WARMUP + iterations {
            let v = alloc.fresh(protocol)?;
            v.prepare(host).await?;
            host_calls_since(host, &mut cursor).await?;
            let mut progress = node.progress().await?;
            let mut records = sys::list_files(node.state_dir());
            for (op, (_, rpc)) in OPERATIONS.iter().enumerate() {
                let took = match v.call(conn, *rpc).await {
                    Ok(d) => d,
                    Err(e) => {
                        errors.push(e);
                        // Leave nothing behind for the next iteration.
                        errors.extend(v.down(conn).await);
                        host_calls_since(host, &mut cursor).await?;
                        break;
                    }
                };
                let (calls, in_host) = host_calls_timed(host, &mut cursor).await?;
                // The RPC returned only once its changes were durable, so they are all counted by now.
                let now = node.progress().await?;
                let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
                let host_took = secs(now.host_s - progress.host_s);
                let durable_wait = secs(now.commit_wait_s - progress.commit_wait_s);
                let changes =
                    usize::try_from(now.changes.saturating_sub(progress.changes)).unwrap_or(0);
                progress = now;
                let records_now = sys::list_files(node.state_dir());
                let removed = records.difference(&records_now).count();
                writes
                    .entry(op)
                    .or_default()
                    .push(changes.saturating_sub(removed));
                removals.entry(op).or_default().push(removed);
                records = records_now;
                if i >= WARMUP {
                    lat.entry(op).or_default().push(took);
                    inside.entry(op).or_default().push(in_host);
                    timed.entry(op).or_default().push(host_took);
                    waited.entry(op).or_default().push(durable_wait);
                    own.entry(op)
                        .or_default()
                        .push(took.saturating_sub(host_took));
                    durable.sample(fsync_dir)?;
                }
                counts.entry(op).or_default().push(calls.len());
                seqs.entry(op).or_insert(calls);
            }
        }
        for (op, (name, rpc)) in OPERATIONS.iter().enumerate() {
            let c = counts.remove(&op).unwrap_or_default();
            let w = writes.remove(&op).unwrap_or_default();
            let r = removals.remove(&op).unwrap_or_default();
            let total: Vec<usize> = w.iter().zip(&r).map(|(a, b)| a + b).collect();
            out.push(OpMeasure {
                protocol,
                operation: name,
                rpc: rpc.name(),
                latency: Stats::of(&lat.remove(&op).unwrap_or_default()),
                in_host: Stats::of(&inside.remove(&op).unwrap_or_default()),
                host_timed: Stats::of(&timed.remove(&op).unwrap_or_default()),
                own: Stats::of(&own.remove(&op).unwrap_or_default()),
                durable_wait: Stats::of(&waited.remove(&op).unwrap_or_default()),
                host_calls: median(&c),
                host_calls_min: c.iter().copied().min().unwrap_or(0),
                host_calls_max: c.iter().copied().max().unwrap_or(0),
                sequence: seqs.remove(&op).unwrap_or_default(),
                record_writes: median(&w),
                record_removals: median(&r),
                record_changes_range: (
                    total.iter().copied().min().unwrap_or(0),
                    total.iter().copied().max().unwrap_or(0),
                ),
            });
        }
    }
    Ok((out, durable))
}

/// One concurrency level's result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConcurrencyRow {
    /// Protocol.
    pub(crate) protocol: Protocol,
    /// Volumes staged and published at once.
    pub(crate) n: usize,
    /// Wall time from the first call to the last reply, ms.
    pub(crate) wall_ms: f64,
    /// One volume's stage + publish alone at the same injected latency (median of 3), ms.
    pub(crate) critical_path_ms: f64,
    /// `wall_ms / critical_path_ms` (ideal 1.0).
    pub(crate) ratio: f64,
    /// Host calls of one volume's stage + publish.
    pub(crate) host_calls_per_volume: usize,
    /// The injected host time alone on that path (`host_calls_per_volume` × latency), ms.
    pub(crate) injected_ms: f64,
    /// Failed calls (stage/publish and tear-down).
    pub(crate) errors: usize,
    /// Where each volume's time went at this N (from the driver's metrics and the simulator's audit).
    pub(crate) attribution: Attribution,
}

/// Where the time of one volume's stage + publish went, as means per volume over one concurrency level (ms): the
/// driver's own metrics (RPC, host-call, lock-wait and commit-wait histograms' sums) and the simulator's audit, each
/// read before and after the level. A part that grows with N against the critical path is what serialises.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Attribution {
    /// The client's time for stage + publish (kubelet's view, from the call to the answer).
    pub(crate) client_ms: f64,
    /// The slowest volume's client time (≈ the wall time of the level).
    pub(crate) client_max_ms: f64,
    /// The driver's time inside NodeStageVolume + NodePublishVolume (`wincsi_csi_request_duration_seconds`).
    pub(crate) driver_ms: f64,
    /// Host calls as the driver timed them (`wincsi_host_call_duration_seconds`: csi-proxy client and transport
    /// included).
    pub(crate) host_ms: f64,
    /// The same calls inside the simulator (its audit: injected latency plus its own work).
    pub(crate) sim_ms: f64,
    /// Waits for shared host objects' locks, by lock kind (`wincsi_lock_wait_seconds`).
    pub(crate) lock_wait_ms: BTreeMap<String, f64>,
    /// Time callers waited for state records to be durable (`wincsi_state_commit_wait_seconds`: a change awaited after
    /// other work counts only the time its caller was blocked).
    pub(crate) commit_wait_ms: f64,
    /// Commit groups in the level and the changes they carried (changes / groups = the mean group size).
    pub(crate) commit_groups: u64,
    /// State-record changes committed in the level.
    pub(crate) commit_changes: u64,
    /// CPU time per volume (ms) of the driver, of the simulator and of this harness (the kubelet side) over the
    /// level: the three share the machine, so the level's wall time cannot be below their sum over the cores.
    pub(crate) cpu_ms: Cpu,
}

/// CPU time per volume over one concurrency level, and how busy the machine was.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Cpu {
    /// The driver (`wincsi-node`).
    pub(crate) driver: f64,
    /// The simulated host (`wincsi-sim`).
    pub(crate) sim: f64,
    /// The harness, playing kubelet.
    pub(crate) harness: f64,
    /// The machine's busy share over the level (every core; 1.0 = all cores busy throughout).
    pub(crate) machine_busy: f64,
}

/// CPU counters read before and after a level (of the driver and the simulator, or whatever runs in their places).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuMark {
    driver: f64,
    sim: f64,
    harness: f64,
    busy: f64,
    total: f64,
}

impl CpuMark {
    pub(crate) fn now(driver: Option<u32>, sim: Option<u32>) -> Self {
        let (busy, total) = sys::machine_cpu_ms();
        CpuMark {
            driver: driver.and_then(|p| sys::cpu_ms(p).ok()).unwrap_or(0.0),
            sim: sim.and_then(|p| sys::cpu_ms(p).ok()).unwrap_or(0.0),
            harness: sys::cpu_ms(std::process::id()).unwrap_or(0.0),
            busy,
            total,
        }
    }

    pub(crate) fn per_volume(self, after: CpuMark, n: usize) -> Cpu {
        let per = |a: f64, b: f64| (b - a) / n.max(1) as f64;
        Cpu {
            driver: per(self.driver, after.driver),
            sim: per(self.sim, after.sim),
            harness: per(self.harness, after.harness),
            machine_busy: if after.total > self.total {
                (after.busy - self.busy) / (after.total - self.total)
            } else {
                0.0
            },
        }
    }
}

impl Attribution {
    /// The driver's time not in host calls, lock waits or commit waits (its own work and the runtime's queueing).
    pub(crate) fn driver_rest_ms(&self) -> f64 {
        self.driver_ms
            - self.host_ms
            - self.lock_wait_ms.values().sum::<f64>()
            - self.commit_wait_ms
    }

    /// The client's time outside the driver's RPC handlers (connection set-up, HTTP/2, queueing before a handler).
    pub(crate) fn outside_ms(&self) -> f64 {
        self.client_ms - self.driver_ms
    }

    fn between(
        before: &Samples,
        after: &Samples,
        n: usize,
        sim: Duration,
        client: &[Duration],
        cpu_ms: Cpu,
    ) -> Self {
        let per = |x: f64| x * 1e3 / n.max(1) as f64;
        let delta =
            |name: &str, labels: &[&str]| after.sum(name, labels) - before.sum(name, labels);
        let rpc = |m: &str| {
            delta(
                "wincsi_csi_request_duration_seconds_sum",
                &[&format!("method=\"{m}\"")],
            )
        };
        let lock_wait_ms = after
            .label_values("wincsi_lock_wait_seconds_sum", "lock")
            .into_iter()
            .map(|k| {
                let v = per(delta(
                    "wincsi_lock_wait_seconds_sum",
                    &[&format!("lock=\"{k}\"")],
                ));
                (k, v)
            })
            .filter(|(_, v)| *v > 0.0)
            .collect();
        Attribution {
            client_ms: client.iter().map(|d| d.as_secs_f64() * 1e3).sum::<f64>() / n.max(1) as f64,
            client_max_ms: client.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1e3),
            driver_ms: per(rpc("NodeStageVolume") + rpc("NodePublishVolume")),
            host_ms: per(delta("wincsi_host_call_duration_seconds_sum", &[])),
            sim_ms: sim.as_secs_f64() * 1e3 / n.max(1) as f64,
            lock_wait_ms,
            commit_wait_ms: per(delta("wincsi_state_commit_wait_seconds_sum", &[])),
            commit_groups: delta("wincsi_state_commit_groups_total", &[]) as u64,
            commit_changes: delta("wincsi_state_commit_changes_total", &[]) as u64,
            cpu_ms,
        }
    }
}

/// What the concurrency section measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Concurrency {
    /// Injected latency per host call, ms.
    pub(crate) latency_ms: u64,
    /// Rows per protocol and N.
    pub(crate) rows: Vec<ConcurrencyRow>,
    /// Driver memory during the largest N (max of VmRSS sampled every 5 ms), KiB.
    pub(crate) peak_sampled_rss_kib: u64,
    /// Driver VmHWM right after the largest N, KiB.
    pub(crate) hwm_after_kib: u64,
    /// The same levels against the concurrency floor (`super::relay`): the machine's own ratio for as many gRPC
    /// exchanges with nothing else done.
    pub(crate) floor: Vec<super::relay::FloorRow>,
}

impl Concurrency {
    /// The floor's row for `protocol` at `n`.
    pub(crate) fn floor_of(&self, protocol: Protocol, n: usize) -> Option<&super::relay::FloorRow> {
        self.floor
            .iter()
            .find(|f| f.protocol == protocol && f.n == n)
    }
}

/// Samples the driver's VmRSS every 5 ms until `stop` fires; returns the max.
fn sample_rss(
    pid: u32,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut max = 0;
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        loop {
            if let Ok(m) = sys::memory(pid) {
                max = max.max(m.rss_kib);
            }
            tokio::select! {
                _ = tick.tick() => {}
                _ = &mut stop => break,
            }
        }
        max
    })
}

/// What bringing volumes up at once gave: the wall time, each volume's own time, and the failures.
struct Up {
    wall: Duration,
    each: Vec<Duration>,
    errors: Vec<CallError>,
}

/// Brings `vols` up all at once (a connection each, as kubelet dials per operation).
async fn up_all(node: &BenchNode, vols: &[BenchVolume]) -> Result<Up> {
    let conns: Vec<CsiConn> = vols.iter().map(|_| node.new_csi()).collect::<Result<_>>()?;
    let start = Instant::now();
    let res = join_all(vols.iter().zip(&conns).map(|(v, c)| async move {
        let r = v.up(c).await;
        (start.elapsed(), r)
    }))
    .await;
    let wall = start.elapsed();
    let each = res.iter().map(|(d, _)| *d).collect();
    let errors = res.into_iter().filter_map(|(_, r)| r.err()).collect();
    Ok(Up { wall, each, errors })
}

/// Tears `vols` down all at once.
async fn down_all(node: &BenchNode, vols: &[BenchVolume]) -> Result<Vec<CallError>> {
    let conns: Vec<CsiConn> = vols.iter().map(|_| node.new_csi()).collect::<Result<_>>()?;
    let res = join_all(vols.iter().zip(&conns).map(|(v, c)| v.down(c))).await;
    Ok(res.into_iter().flatten().collect())
}

/// Concurrency section: with `latency` injected on every host call, N fresh volumes staged and published at once,
/// against one fresh volume's critical path.
pub(crate) async fn concurrency(
    node: &BenchNode,
    alloc: &Allocator,
    levels: &[usize],
    latency_ms: u64,
    errors: &mut Vec<CallError>,
) -> Result<Concurrency> {
    let host = node.host();
    let latency = Duration::from_millis(latency_ms);
    let max_n = levels.iter().copied().max().unwrap_or(0);
    let mut rows = Vec::new();
    let (mut peak_sampled, mut hwm_after) = (0, 0);
    host.set_latency("*", latency).await?;
    let result = async {
        for protocol in Protocol::ALL {
            // The critical path: one fresh volume alone, three times.
            let mut singles = Vec::new();
            let mut calls = Vec::new();
            let mut cursor = host.audit(0).await?.last().map_or(0, |e| e.seq);
            for _ in 0..3 {
                let v = alloc.fresh(protocol)?;
                v.prepare(host).await?;
                host_calls_since(host, &mut cursor).await?;
                let up = up_all(node, std::slice::from_ref(&v)).await?;
                calls.push(host_calls_since(host, &mut cursor).await?.len());
                singles.push(up.wall);
                errors.extend(up.errors);
                errors.extend(down_all(node, std::slice::from_ref(&v)).await?);
                host_calls_since(host, &mut cursor).await?;
            }
            singles.sort();
            let critical = singles[singles.len() / 2];
            let per_volume = median(&calls);
            for &n in levels {
                let vols = alloc.fresh_group(protocol, n)?;
                for v in &vols {
                    v.prepare(host).await?;
                }
                host_calls_since(host, &mut cursor).await?;
                let before = node.metrics().await?;
                let sampler = (n == max_n).then(|| {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    (tx, sample_rss(node.driver_pid(), rx))
                });
                let cpu_before = CpuMark::now(Some(node.driver_pid()), node.sim_pid());
                let up = up_all(node, &vols).await?;
                let cpu =
                    cpu_before.per_volume(CpuMark::now(Some(node.driver_pid()), node.sim_pid()), n);
                if let Some((tx, task)) = sampler {
                    let _ = tx.send(());
                    peak_sampled = peak_sampled.max(task.await.unwrap_or(0));
                    hwm_after = hwm_after.max(sys::memory(node.driver_pid())?.hwm_kib);
                }
                let after = node.metrics().await?;
                let (_, sim) = host_calls_timed(host, &mut cursor).await?;
                let attribution = Attribution::between(&before, &after, n, sim, &up.each, cpu);
                let mut errs = up.errors;
                errs.extend(down_all(node, &vols).await?);
                host_calls_since(host, &mut cursor).await?;
                rows.push(ConcurrencyRow {
                    protocol,
                    n,
                    wall_ms: up.wall.as_secs_f64() * 1e3,
                    critical_path_ms: critical.as_secs_f64() * 1e3,
                    ratio: up.wall.as_secs_f64() / critical.as_secs_f64(),
                    host_calls_per_volume: per_volume,
                    injected_ms: (per_volume as u64 * latency_ms) as f64,
                    errors: errs.len(),
                    attribution,
                });
                errors.extend(errs);
            }
        }
        Ok::<_, Error>(())
    }
    .await;
    host.set_latency("*", Duration::ZERO).await?;
    result?;
    Ok(Concurrency {
        latency_ms,
        rows,
        peak_sampled_rss_kib: peak_sampled,
        hwm_after_kib: hwm_after,
        floor: Vec::new(),
    })
}

/// The soak's result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Soak {
    /// Full lifecycles run.
    pub(crate) lifecycles: usize,
    /// In flight at once.
    pub(crate) in_flight: usize,
    /// Wall time, seconds.
    pub(crate) wall_s: f64,
    /// Lifecycles per second.
    pub(crate) per_second: f64,
    /// Stages retried as kubelet retries an UNAVAILABLE answer (not errors unless the retries did not end it).
    pub(crate) kubelet_retries: usize,
    /// Failed CSI calls.
    pub(crate) errors: usize,
    /// The first few failures.
    pub(crate) first_errors: Vec<CallError>,
    /// Host objects left (SMB mappings, iSCSI sessions, mount points, links) plus data-loss events.
    pub(crate) leaked_host_objects: usize,
    /// What was left on the host.
    pub(crate) leftovers: Vec<String>,
    /// Data-loss events recorded by the simulator.
    pub(crate) data_loss_events: usize,
    /// Driver state records left under `--state-dir`.
    pub(crate) state_records_left: u64,
    /// Driver memory before the soak.
    pub(crate) memory_start: Memory,
    /// Driver memory after it.
    pub(crate) memory_end: Memory,
    /// VmRSS (KiB) after every tenth of the lifecycles.
    pub(crate) rss_progress_kib: Vec<u64>,
}

/// Soak: `total` lifecycles (stage, publish, unpublish, unstage) with `in_flight` workers, each cycling its own
/// volume (half SMB on the shared share, half iSCSI on their own targets), at zero injected latency.
pub(crate) async fn soak(
    node: &BenchNode,
    alloc: &Allocator,
    total: usize,
    in_flight: usize,
) -> Result<Soak> {
    let host = node.host();
    let pid = node.driver_pid();
    // The simulator keeps its audit log in memory; the soak does not read it.
    host.clear_audit().await?;
    let mut workers = Vec::new();
    for w in 0..in_flight {
        let protocol = if w % 2 == 0 {
            Protocol::Smb
        } else {
            Protocol::Iscsi
        };
        let v = alloc.fresh(protocol)?;
        v.prepare(host).await?;
        workers.push((v, node.new_csi()?));
    }
    let memory_start = sys::memory(pid)?;
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let progress = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Instant::now();
    let results = join_all(workers.iter().map(|(v, conn)| {
        let (next, done, progress) = (next.clone(), done.clone(), progress.clone());
        async move {
            let mut errs = Vec::new();
            let mut retried = 0usize;
            while next.fetch_add(1, Ordering::Relaxed) < total {
                // kubelet retries a stage the driver answers UNAVAILABLE (another volume's SMB mapping removal of
                // the same share still running, issue 37 item 9) after 500 ms, doubling: so does the soak, a few
                // times, and counts those retries; a call still failing after them is an error.
                let mut pause = std::time::Duration::from_millis(500);
                let mut outcome = v.up(conn).await;
                for _ in 0..4 {
                    match &outcome {
                        Err(e) if e.status.starts_with("Unavailable") => {
                            retried += 1;
                            tokio::time::sleep(pause).await;
                            pause *= 2;
                            outcome = v.up(conn).await;
                        }
                        _ => break,
                    }
                }
                if let Err(e) = outcome {
                    errs.push(e);
                }
                errs.extend(v.down(conn).await);
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if total >= 10 && d % (total / 10) == 0 {
                    let rss = sys::memory(pid).map(|m| m.rss_kib).unwrap_or(0);
                    progress.lock().unwrap_or_else(|e| e.into_inner()).push(rss);
                }
            }
            (errs, retried)
        }
    }))
    .await;
    let wall = start.elapsed();
    let kubelet_retries = results.iter().map(|(_, r)| r).sum();
    let errors: Vec<CallError> = results.into_iter().flat_map(|(e, _)| e).collect();
    let memory_end = sys::memory(pid)?;
    let report = host.invariants().await?;
    let rss_progress_kib = progress.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(Soak {
        lifecycles: total,
        in_flight,
        wall_s: wall.as_secs_f64(),
        per_second: total as f64 / wall.as_secs_f64(),
        errors: errors.len(),
        kubelet_retries,
        first_errors: errors.into_iter().take(5).collect(),
        leaked_host_objects: report.leftovers.len() + report.data_loss.len(),
        leftovers: report.leftovers.into_iter().take(20).collect(),
        data_loss_events: report.data_loss.len(),
        state_records_left: sys::count_records(node.state_dir()),
        memory_start,
        memory_end,
        rss_progress_kib,
    })
}
