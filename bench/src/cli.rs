//! Command line of `wincsi-bench`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Benchmarks the real `wincsi-node` binary over its CSI socket against the `wincsi-sim` binary.
#[derive(Debug, Parser)]
#[command(name = "wincsi-bench", version)]
pub(crate) struct Args {
    /// Internal helper processes (the plain-gRPC floor server, the concurrency floor's relay).
    #[command(subcommand)]
    pub(crate) command: Option<Command>,

    /// A seconds-long run of every section with tiny sizes; checks correctness only (zero errors, zero leaks).
    #[arg(long)]
    pub(crate) smoke: bool,

    /// The driver binary (default: `wincsi-node` next to this executable).
    #[arg(long)]
    pub(crate) node_bin: Option<PathBuf>,

    /// The simulated host binary (default: `wincsi-sim` next to this executable).
    #[arg(long)]
    pub(crate) sim_bin: Option<PathBuf>,

    /// The Windows driver binary whose size is reported (default:
    /// `<target>/x86_64-pc-windows-gnu/release/wincsi-node.exe`).
    #[arg(long)]
    pub(crate) windows_node_bin: Option<PathBuf>,

    /// Where the JSON results go.
    #[arg(long, default_value = "bench/results/latest.json")]
    pub(crate) out: PathBuf,

    /// A Markdown file whose generated section (between the wincsi-bench markers) is replaced with the tables.
    #[arg(long)]
    pub(crate) markdown: Option<PathBuf>,

    /// Measured iterations per protocol of the per-RPC section (after warm-up).
    #[arg(long, default_value_t = 200)]
    pub(crate) iterations: usize,

    /// Round trips measured for the plain-gRPC floor.
    #[arg(long, default_value_t = 5000)]
    pub(crate) floor_iterations: usize,

    /// Concurrency levels (volumes staged and published at once).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 8, 64, 256])]
    pub(crate) concurrency: Vec<usize>,

    /// Latency injected per host call in the concurrency section, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub(crate) latency_ms: u64,

    /// Full lifecycles (stage, publish, unpublish, unstage) in the soak.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) soak: usize,

    /// Lifecycles in flight at once in the soak.
    #[arg(long, default_value_t = 32)]
    pub(crate) soak_in_flight: usize,

    /// Driver starts timed for "start to serving CSI".
    #[arg(long, default_value_t = 10)]
    pub(crate) starts: usize,

    /// Where the node's temporary directory (driver `--state-dir`, simulator sandbox) is made (default: the
    /// system temporary directory). A tmpfs here (`/dev/shm`) takes the disk's fsync cost out of the figures, and
    /// the overhead target then counts round trips only (elsewhere round trips plus the RPC's durable writes).
    #[arg(long)]
    pub(crate) work_dir: Option<PathBuf>,

    /// `--log-level` of the driver under test (`info` is its default in production).
    #[arg(long, default_value = "info")]
    pub(crate) driver_log_level: String,

    /// Volumes of each protocol staged for the at-rest section's stats polls.
    #[arg(long, default_value_t = 50)]
    pub(crate) rest_volumes: usize,

    /// CSI Probes and readiness checks per csi-proxy release in the at-rest section.
    #[arg(long, default_value_t = 3)]
    pub(crate) rest_checks: usize,

    /// Cheap calls per client (and pattern) in the clients section (tonic's and the kubelet-like one).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) client_calls: usize,

    /// Interleaved rounds per client in the clients section (the calls split among them; each round pair gives one
    /// CPU ratio, the target reads their median).
    #[arg(long, default_value_t = 10)]
    pub(crate) client_rounds: usize,

    /// Only the clients section (tonic's and the kubelet-like client's cost per cheap RPC), printed; no results
    /// file is written.
    #[arg(long)]
    pub(crate) clients_only: bool,
}

/// Helper processes the harness starts from its own executable.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serves a trivial CSI Identity service on a Unix socket (the floor: a plain gRPC round trip).
    #[command(hide = true)]
    EchoServer {
        /// Socket path to bind.
        #[arg(long)]
        socket: PathBuf,
        /// Wait this long before each answer (the concurrency floor's host).
        #[arg(long, default_value_t = 0)]
        latency_ms: u64,
    },
    /// Serves CSI stage and publish by making plain calls to an echo server (the concurrency floor).
    #[command(hide = true)]
    RelayServer {
        /// Socket path to bind.
        #[arg(long)]
        socket: PathBuf,
        /// The echo server's socket.
        #[arg(long)]
        upstream: PathBuf,
        /// Upstream calls per `NodeStageVolume`.
        #[arg(long)]
        stage_calls: usize,
        /// Upstream calls per `NodePublishVolume`.
        #[arg(long)]
        publish_calls: usize,
    },
}

impl Args {
    /// Applies the `--smoke` sizes.
    pub(crate) fn smoke_sized(mut self) -> Args {
        if self.smoke {
            self.iterations = 3;
            self.floor_iterations = 200;
            self.concurrency = vec![1, 4];
            self.latency_ms = 5;
            self.soak = 64;
            self.soak_in_flight = 8;
            self.starts = 1;
            self.rest_volumes = 2;
            self.rest_checks = 1;
            self.client_calls = 200;
            self.client_rounds = 2;
        }
        self
    }
}
