//! `wincsi-bench`: the benchmark harness of wincsi.
//!
//! It starts the real `wincsi-sim` binary (the simulated Windows host serving csi-proxy over Unix sockets) and the
//! real `wincsi-node` binary (the driver serving CSI on a Unix socket), plays kubelet's CSI calls against the
//! driver's socket, and measures per-RPC overhead against a plain-gRPC floor, host round trips per operation (from
//! the simulator's audit log), concurrency scaling with injected host latency, footprint (RSS, binary sizes, start
//! to serving) and a soak of full lifecycles. It writes a JSON result file and the tables of `BENCHMARKS.md`.
//!
//! Timing lives only here, never in tests. `--smoke` runs every section tiny and asserts only correctness (zero
//! errors, zero leaked host objects), never timing: that is what CI runs (`.ci/bench-smoke.sh`).
//!
//! The harness needs AF_UNIX sockets and `/proc`, so its body is Unix-only; a Windows build only says so.

mod cli;
#[cfg(unix)]
mod harness;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse().smoke_sized();
    run(args)
}

#[cfg(unix)]
fn run(args: cli::Args) -> ExitCode {
    harness::main(args)
}

#[cfg(not(unix))]
fn run(_args: cli::Args) -> ExitCode {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "wincsi-bench runs on Linux only: it needs AF_UNIX sockets for CSI and csi-proxy and /proc for memory \
         figures (build and run it on the Linux host; the Windows binary size is measured from there)"
    );
    ExitCode::from(2)
}
