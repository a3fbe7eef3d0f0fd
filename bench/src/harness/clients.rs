//! What a cheap RPC costs the driver's server with each client: tonic's (no PINGs) and the kubelet-like one
//! ([`KubeletConn`]: a PING after each response, as grpc-go's BDP estimation sends).
//!
//! Sequential `NodeGetCapabilities` calls (no host call, no record: the server's own work) on one connection, and
//! with a new connection per call as kubelet dials (`pkg/volume/csi/csi_client.go`: a `grpc.Dial` per operation),
//! in interleaved rounds (a tonic round and a kubelet-like one, their order alternating from round to round) so both
//! clients meet the same machine. The driver's CPU is its threads' run time (`/proc/<pid>/task/*/schedstat`,
//! nanoseconds; see [`sys::cpu_ms_fine`]), divided by the calls; latency is each call's, to its answer. Each round
//! pair also gives a ratio (kubelet-like over tonic): on a shared machine the rounds' CPU figures drift with the
//! other load, and the median of the pairs' ratios, with their spread, is the comparison the target reads. After each call (untimed) the kubelet-like client waits for
//! its PING's answer: grpc-go writes the PING the moment the response's DATA arrives, ahead of the next request, so
//! the server meets it alone; `h2` would otherwise let it ride in one write with the next request, which a real
//! kubelet does not do.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use wincsi_e2e::CsiConn;

use super::error::{Error, Result};
use super::kubelet_client::KubeletConn;
use super::node::BenchNode;
use super::stats::Stats;
use super::sys;

/// The gRPC path of the cheap call.
const CHEAP: &str = "/csi.v1.Node/NodeGetCapabilities";

/// One client's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClientCost {
    /// `tonic` or `kubelet-like`.
    pub(crate) client: &'static str,
    /// `one connection` or `a connection per call`.
    pub(crate) connection: &'static str,
    /// Calls measured.
    pub(crate) calls: usize,
    /// Latency per call.
    pub(crate) latency: Stats,
    /// The driver's CPU per call, µs.
    pub(crate) server_cpu_us: f64,
    /// PINGs the client sent (and the driver answered).
    pub(crate) pings: u64,
}

/// The section's result.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Clients {
    /// Per client and connection pattern.
    pub(crate) rows: Vec<ClientCost>,
    /// Per connection pattern: the driver's CPU per call of the kubelet-like client over tonic's, one ratio per
    /// round pair.
    pub(crate) ratios: Vec<RoundRatios>,
}

/// The per-round CPU ratios (kubelet-like over tonic) of one connection pattern.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RoundRatios {
    /// `one connection` or `a connection per call`.
    pub(crate) connection: &'static str,
    /// One per round pair, in order.
    pub(crate) rounds: Vec<f64>,
}

impl RoundRatios {
    /// The median of the rounds' ratios.
    pub(crate) fn median(&self) -> f64 {
        let mut v = self.rounds.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// The smallest and largest round ratio.
    pub(crate) fn range(&self) -> (f64, f64) {
        self.rounds
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
                (lo.min(*r), hi.max(*r))
            })
    }
}

impl Clients {
    /// The row of `client` with `connection`.
    pub(crate) fn row(&self, client: &str, connection: &str) -> Option<&ClientCost> {
        self.rows
            .iter()
            .find(|r| r.client == client && r.connection == connection)
    }

    /// The round ratios of `connection`.
    pub(crate) fn ratios(&self, connection: &str) -> Option<&RoundRatios> {
        self.ratios.iter().find(|r| r.connection == connection)
    }
}

/// Which client makes a round's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    Tonic,
    KubeletLike,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Tonic => "tonic",
            Client::KubeletLike => "kubelet-like",
        }
    }
}

/// A client's connection.
enum Conn {
    Tonic(CsiConn),
    Kubelet(KubeletConn),
}

impl Conn {
    async fn open(client: Client, endpoint: &str, socket: &Path) -> Result<Conn> {
        Ok(match client {
            Client::Tonic => Conn::Tonic(CsiConn::connect(endpoint)?),
            Client::KubeletLike => Conn::Kubelet(KubeletConn::connect(socket).await?),
        })
    }

    async fn call(&self) -> Result<()> {
        match self {
            Conn::Tonic(c) => c
                .node()
                .node_get_capabilities(csi::v1::NodeGetCapabilitiesRequest {})
                .await
                .map(drop)
                .map_err(|s| Error::Setup(format!("NodeGetCapabilities: {s}"))),
            Conn::Kubelet(c) => c
                .unary::<_, csi::v1::NodeGetCapabilitiesResponse>(
                    CHEAP,
                    &csi::v1::NodeGetCapabilitiesRequest {},
                )
                .await
                .map(drop),
        }
    }

    async fn settle(&self) {
        if let Conn::Kubelet(c) = self {
            c.settle().await;
        }
    }

    fn pings(&self) -> u64 {
        match self {
            Conn::Tonic(_) => 0,
            Conn::Kubelet(c) => c.pings(),
        }
    }
}

#[derive(Default)]
struct Tally {
    samples: Vec<Duration>,
    cpu_ms: f64,
    pings: u64,
}

/// One round of `n` calls by `client`, on one connection or one per call; adds to `tally` and returns the driver's
/// CPU in the round, ms.
async fn round(
    node: &BenchNode,
    client: Client,
    per_call: bool,
    n: usize,
    tally: &mut Tally,
) -> Result<f64> {
    let endpoint = node.endpoint().to_owned();
    let socket = node.socket()?;
    let shared = if per_call {
        None
    } else {
        let c = Conn::open(client, &endpoint, &socket).await?;
        // Unrecorded: the connection's set-up and first allocations.
        for _ in 0..50 {
            c.call().await?;
        }
        Some(c)
    };
    let pings_before = shared.as_ref().map_or(0, Conn::pings);
    let cpu = sys::cpu_ms_fine(node.driver_pid())?;
    for _ in 0..n {
        let start = Instant::now();
        let opened;
        let c = match &shared {
            Some(c) => c,
            None => {
                opened = Conn::open(client, &endpoint, &socket).await?;
                &opened
            }
        };
        c.call().await?;
        tally.samples.push(start.elapsed());
        // Untimed: the PING goes out before the next request (grpc-go writes it as the response's DATA arrives,
        // before the call even returns), so the server meets it on its own, as it meets kubelet's.
        c.settle().await;
        if shared.is_none() {
            tally.pings += c.pings();
        }
    }
    let used = sys::cpu_ms_fine(node.driver_pid())? - cpu;
    tally.cpu_ms += used;
    if let Some(c) = &shared {
        tally.pings += c.pings() - pings_before;
    }
    Ok(used)
}

/// `calls` cheap calls per client and pattern, in `rounds` interleaved rounds.
pub(crate) async fn cheap_rpcs(node: &BenchNode, calls: usize, rounds: usize) -> Result<Clients> {
    let mut out = Clients::default();
    for (per_call, connection) in [(false, "one connection"), (true, "a connection per call")] {
        // Dialling costs more per call: fewer calls, still thousands of ticks' worth.
        let n = if per_call { calls / 4 } else { calls };
        let per_round = (n / rounds).max(1);
        let mut tallies = [Tally::default(), Tally::default()];
        let mut ratios = RoundRatios {
            connection,
            rounds: Vec::with_capacity(rounds),
        };
        for r in 0..rounds {
            // Alternating which client goes first, so neither always meets the machine right after the other.
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            let mut cpu = [0.0; 2];
            for i in order {
                let client = [Client::Tonic, Client::KubeletLike][i];
                cpu[i] = round(node, client, per_call, per_round, &mut tallies[i]).await?;
            }
            if cpu[0] > 0.0 {
                ratios.rounds.push(cpu[1] / cpu[0]);
            }
        }
        out.ratios.push(ratios);
        for (client, t) in [Client::Tonic, Client::KubeletLike]
            .into_iter()
            .zip(tallies)
        {
            out.rows.push(ClientCost {
                client: client.name(),
                connection,
                calls: t.samples.len(),
                latency: Stats::of(&t.samples),
                server_cpu_us: t.cpu_ms * 1000.0 / t.samples.len().max(1) as f64,
                pings: t.pings,
            });
        }
    }
    Ok(out)
}
