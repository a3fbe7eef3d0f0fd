//! The node under test: `wincsi-sim` and `wincsi-node` as separate processes (started with the e2e harness's
//! process wrappers), the CSI connection, and the driver's pid for `/proc` readings.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sim::Scenario;
use sim::admin::AdminClient;
use tempfile::TempDir;
use wincsi_e2e::{CsiConn, DriverOptions, DriverProcess, ProxyWiring, SimProcess};

use super::error::{Error, Result};
use super::sys;

/// The two binaries under test.
#[derive(Debug, Clone)]
pub(crate) struct Bins {
    /// `wincsi-node`.
    pub(crate) node: PathBuf,
    /// `wincsi-sim`.
    pub(crate) sim: PathBuf,
}

/// A running simulated node.
#[derive(Debug)]
pub(crate) struct BenchNode {
    bins: Bins,
    sim: SimProcess,
    sim_pid: Option<u32>,
    driver: Option<DriverProcess>,
    opts: DriverOptions,
    conn: CsiConn,
    pid: u32,
    metrics: std::net::SocketAddr,
    dir: TempDir,
}

fn socket_path(endpoint: &str) -> Result<PathBuf> {
    endpoint
        .strip_prefix("unix://")
        .map(PathBuf::from)
        .ok_or_else(|| Error::Setup(format!("expected a unix:// endpoint, got {endpoint}")))
}

impl BenchNode {
    /// Starts the simulator with `scenario`, then the driver at `log_level`, with their files under `work_dir`.
    pub(crate) async fn start(
        bins: &Bins,
        scenario: &Scenario,
        log_level: &str,
        work_dir: &Path,
    ) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("wincsi-bench-")
            .tempdir_in(work_dir)
            .map_err(Error::io("creating the node's temporary directory"))?;
        let wiring = ProxyWiring::for_this_os(dir.path());
        let sim = SimProcess::start(&bins.sim, scenario, &dir.path().join("host"), &wiring).await?;
        let mut opts = DriverOptions::new(dir.path(), wiring);
        opts.log_level = log_level.to_owned();
        // The driver's own count of committed state-record changes is read from its metrics endpoint.
        let metrics = free_loopback_port()?;
        // `/readyz` on the same listener: the at-rest section counts what a readiness check costs the host.
        opts.extra_args.extend([
            "--metrics-address".to_owned(),
            metrics.to_string(),
            "--health-address".to_owned(),
            metrics.to_string(),
        ]);
        opts.extra_args.extend(settle_args());
        let driver = DriverProcess::start(&bins.node, &opts).await?;
        let conn = CsiConn::connect(driver.endpoint())?;
        let pid = sys::listener_pid(&socket_path(driver.endpoint())?).await?;
        let sim_pid = match sim.wiring() {
            ProxyWiring::UnixSockets(dir) => {
                sys::listener_pid(&dir.join("csi-proxy-system-v1alpha1.sock"))
                    .await
                    .ok()
            }
            ProxyWiring::NamedPipes(_) => None,
        };
        Ok(BenchNode {
            sim_pid,
            bins: bins.clone(),
            sim,
            driver: Some(driver),
            opts,
            conn,
            pid,
            metrics,
            dir,
        })
    }

    /// The simulator's admin client.
    pub(crate) fn host(&self) -> &AdminClient {
        self.sim.admin()
    }

    /// The shared CSI connection (one HTTP/2 connection).
    pub(crate) fn csi(&self) -> &CsiConn {
        &self.conn
    }

    /// A new CSI connection to the driver (kubelet dials the driver per operation).
    pub(crate) fn new_csi(&self) -> Result<CsiConn> {
        let ep = self
            .driver
            .as_ref()
            .map(|d| d.endpoint().to_owned())
            .ok_or_else(|| Error::Setup("the driver is not running".to_owned()))?;
        Ok(CsiConn::connect(&ep)?)
    }

    /// The driver's CSI endpoint (`unix://…`).
    pub(crate) fn endpoint(&self) -> &str {
        self.driver.as_ref().map_or("", |d| d.endpoint())
    }

    /// The driver's CSI socket.
    pub(crate) fn socket(&self) -> Result<PathBuf> {
        socket_path(self.endpoint())
    }

    /// Replaces the driver with a new process over the same state directory and simulator, with `extra` added to
    /// its arguments (a restart: kubelet's connection is re-dialled, the volumes stay staged).
    pub(crate) async fn restart_driver_with(&mut self, extra: &[&str]) -> Result<()> {
        if let Some(d) = self.driver.take() {
            d.kill().await;
        }
        let mut opts = self.opts.clone();
        opts.extra_args
            .extend(extra.iter().map(|a| (*a).to_owned()));
        let driver = DriverProcess::start(&self.bins.node, &opts).await?;
        self.conn = CsiConn::connect(driver.endpoint())?;
        self.pid = sys::listener_pid(&socket_path(driver.endpoint())?).await?;
        self.driver = Some(driver);
        Ok(())
    }

    /// `GET /readyz` of the driver: whether it answered 200.
    pub(crate) async fn ready(&self) -> Result<bool> {
        Ok(get(self.metrics, "/readyz").await?.0 == 200)
    }

    /// The simulator's pid (the listener of its first csi-proxy socket), when it serves Unix sockets.
    pub(crate) fn sim_pid(&self) -> Option<u32> {
        self.sim_pid
    }

    /// How the simulator serves the csi-proxy API.
    pub(crate) fn proxy_wiring(&self) -> &ProxyWiring {
        self.sim.wiring()
    }

    /// The driver's pid.
    pub(crate) fn driver_pid(&self) -> u32 {
        self.pid
    }

    /// From one scrape of the driver's `/metrics`: the state-record changes (file writes and removals) it has
    /// committed durably since it started (`wincsi_state_commit_changes_total`), and the seconds it has spent so far
    /// in host calls (`wincsi_host_call_duration_seconds_sum`, every operation) and waiting for its records to be
    /// durable (`wincsi_state_commit_wait_seconds_sum`).
    pub(crate) async fn progress(&self) -> Result<Progress> {
        const NAME: &str = "wincsi_state_commit_changes_total";
        let m = self.metrics().await?;
        let changes = m
            .get(NAME)
            .map(|v| v as u64)
            .ok_or_else(|| Error::Setup(format!("{NAME} not in the driver's /metrics")))?;
        Ok(Progress {
            changes,
            host_s: m.sum("wincsi_host_call_duration_seconds_sum", &[]),
            commit_wait_s: m.sum("wincsi_state_commit_wait_seconds_sum", &[]),
        })
    }

    /// Every sample of the driver's `/metrics` now.
    pub(crate) async fn metrics(&self) -> Result<Samples> {
        Ok(Samples::parse(&scrape(self.metrics).await?))
    }

    /// The driver's `--state-dir`.
    pub(crate) fn state_dir(&self) -> &Path {
        &self.opts.state_dir
    }

    /// Starts another driver process with the same options but its own endpoint and state directory, against
    /// the same simulator, and returns the time from spawning it to its `serving CSI` line (the endpoint is
    /// bound then). The process is killed afterwards.
    pub(crate) async fn time_a_start(&self, n: usize) -> Result<Duration> {
        let dir = self.dir.path().join(format!("start-{n}"));
        let mut opts = DriverOptions::new(&dir, self.sim.wiring().clone());
        opts.log_level = self.opts.log_level.clone();
        opts.extra_args.extend(settle_args());
        let start = Instant::now();
        let driver = DriverProcess::start(&self.bins.node, &opts).await?;
        let took = start.elapsed();
        driver.kill().await;
        Ok(took)
    }

    /// Stops both processes.
    pub(crate) async fn shutdown(mut self) {
        if let Some(d) = self.driver.take() {
            d.kill().await;
        }
        self.sim.stop().await;
    }
}

/// A loopback address with a port free right now (bound, read, released).
fn free_loopback_port() -> Result<std::net::SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(Error::io(
        "binding a loopback port for the driver's metrics",
    ))?;
    l.local_addr()
        .map_err(Error::io("reading the metrics port"))
}

/// `GET /metrics` over HTTP/1.1 with `Connection: close`; the body.
async fn scrape(addr: std::net::SocketAddr) -> Result<String> {
    match get(addr, "/metrics").await? {
        (200, body) => Ok(body),
        (status, _) => Err(Error::Setup(format!(
            "scraping http://{addr}/metrics: status {status}"
        ))),
    }
}

/// `GET path` over HTTP/1.1 with `Connection: close`; the status and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let what = format!("GET http://{addr}{path}");
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(Error::io(what.clone()))?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .map_err(Error::io(what.clone()))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)
        .await
        .map_err(Error::io(what.clone()))?;
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok());
    match (status, text.split_once("\r\n\r\n")) {
        (Some(status), Some((_, body))) => Ok((status, body.to_owned())),
        _ => Err(Error::Setup(format!(
            "{what}: unexpected answer {:?}",
            text.lines().next()
        ))),
    }
}

/// The driver's running totals that [`BenchNode::progress`] reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    /// Durable state-record changes committed.
    pub(crate) changes: u64,
    /// Seconds spent in host calls.
    pub(crate) host_s: f64,
    /// Seconds callers waited for durable records.
    pub(crate) commit_wait_s: f64,
}

/// The samples of one scrape, by series (`name` or `name{labels}`, exactly as exposed).
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples(std::collections::BTreeMap<String, f64>);

impl Samples {
    /// Parses the Prometheus text format (comments and unparsable lines are skipped; label values hold no spaces
    /// here, so a series ends at the last space of its line).
    fn parse(text: &str) -> Samples {
        Samples(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (series, value) = l.trim().rsplit_once(' ')?;
                    Some((series.to_owned(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    /// One series' value.
    pub(crate) fn get(&self, series: &str) -> Option<f64> {
        self.0.get(series).copied()
    }

    /// The sum over every series of metric `name` (any labels) whose labels include each of `labels`
    /// (`key="value"` strings).
    pub(crate) fn sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|(series, _)| {
                let (n, l) = series.split_once('{').unwrap_or((series.as_str(), ""));
                n == name && labels.iter().all(|want| l.contains(want))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// The values of label `key` among the series of metric `name`.
    pub(crate) fn label_values(&self, name: &str, key: &str) -> Vec<String> {
        let prefix = format!("{key}=\"");
        let mut out: Vec<String> = self
            .0
            .keys()
            .filter_map(|series| {
                let (n, l) = series.split_once('{')?;
                if n != name {
                    return None;
                }
                let rest = &l[l.find(&prefix)? + prefix.len()..];
                Some(rest[..rest.find('"')?].to_owned())
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// `--disk-settle-time` at its minimum. Through csi-proxy the driver calls a RAW LUN empty only after looks spanning
/// the settle time (15 s by default: Windows shows an existing volume some time after the disk comes online), which
/// would make every first-time iSCSI stage measure that wait instead of the driver's work. The simulator here runs
/// with instant arrival, so the shortest settle time is still exact; on a real node a fresh LUN's first stage
/// through csi-proxy adds `--disk-settle-time` (BENCHMARKS.md, "What this does and does not measure").
fn settle_args() -> [String; 2] {
    ["--disk-settle-time".to_owned(), "1ms".to_owned()]
}

#[cfg(test)]
mod tests {
    use super::Samples;

    #[test]
    fn samples_sum_by_name_and_labels() {
        let s = Samples::parse(
            "# HELP x y\n\
             wincsi_lock_wait_seconds_sum{lock=\"smb-share\"} 1.5\n\
             wincsi_lock_wait_seconds_sum{lock=\"smb-server\"} 0.25\n\
             wincsi_lock_wait_seconds_count{lock=\"smb-share\"} 3\n\
             wincsi_state_commit_changes_total 7\n",
        );
        assert_eq!(s.get("wincsi_state_commit_changes_total"), Some(7.0));
        assert_eq!(s.sum("wincsi_lock_wait_seconds_sum", &[]), 1.75);
        assert_eq!(
            s.sum("wincsi_lock_wait_seconds_sum", &["lock=\"smb-share\""]),
            1.5
        );
        assert_eq!(
            s.label_values("wincsi_lock_wait_seconds_sum", "lock"),
            ["smb-server", "smb-share"]
        );
        assert_eq!(s.sum("wincsi_lock_wait_seconds", &[]), 0.0);
    }
}
