//! The harness proper (Unix): runs every section against the real binaries and reports.

mod clients;
mod echo;
mod error;
mod kubelet_client;
mod node;
mod relay;
mod report;
mod report_rest;
mod rest;
mod sections;
mod stats;
mod sys;
mod volumes;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::cli::{Args, Command};
use error::{Error, Result};
use node::{BenchNode, Bins};
use report::{Check, Footprint, Meta, Results};
use stats::Stats;
use volumes::Allocator;

/// Entry point: builds the runtime, runs the bench or a helper process, maps the outcome to an exit code.
pub(crate) fn main(args: Args) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("starting the tokio runtime: {e}")),
    };
    let outcome = match &args.command {
        Some(Command::EchoServer { socket, latency_ms }) => rt
            .block_on(echo::serve(
                socket,
                std::time::Duration::from_millis(*latency_ms),
            ))
            .map(|()| true),
        Some(Command::RelayServer {
            socket,
            upstream,
            stage_calls,
            publish_calls,
        }) => rt
            .block_on(relay::serve(socket, upstream, *stage_calls, *publish_calls))
            .map(|()| true),
        None => rt.block_on(bench(args)),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(msg: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "wincsi-bench: {msg}");
    ExitCode::FAILURE
}

fn say(msg: &str) {
    let _ = writeln!(std::io::stdout(), "wincsi-bench: {msg}");
}

/// `<dir of this executable>/<name>`.
fn sibling(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(Error::io("locating wincsi-bench"))?;
    exe.parent()
        .map(|d| d.join(name))
        .ok_or_else(|| Error::Setup("wincsi-bench has no parent directory".to_owned()))
}

fn existing(path: PathBuf, what: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Setup(format!(
            "{what} not found at {} (build it first, or pass its path)",
            path.display()
        )))
    }
}

/// The Windows driver next to a `<target>/<profile>/` directory: `<target>/x86_64-pc-windows-gnu/release/`.
fn default_windows_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?;
    Some(
        target
            .join("x86_64-pc-windows-gnu")
            .join("release")
            .join("wincsi-node.exe"),
    )
}

/// Runs every section; `Ok(false)` when a correctness check failed (results are still written).
async fn bench(args: Args) -> Result<bool> {
    let run_start = Instant::now();
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let load_start = sys::load_average();
    let bins = Bins {
        node: existing(
            args.node_bin
                .clone()
                .map_or_else(|| sibling("wincsi-node"), Ok)?,
            "wincsi-node",
        )?,
        sim: existing(
            args.sim_bin
                .clone()
                .map_or_else(|| sibling("wincsi-sim"), Ok)?,
            "wincsi-sim",
        )?,
    };
    let windows_bin = args.windows_node_bin.clone().or_else(default_windows_bin);
    let work_dir = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let work = tempfile::Builder::new()
        .prefix("wincsi-bench-floor-")
        .tempdir_in(&work_dir)
        .map_err(Error::io("creating a temporary directory"))?;

    say(&format!(
        "floor: {} plain gRPC round trips",
        args.floor_iterations
    ));
    let echo = sections::echo_floor(work.path(), args.floor_iterations).await?;
    let work_fs = sys::fs_type(&work_dir).unwrap_or_else(|| "unknown".to_owned());

    // Targets: per-RPC fresh iSCSI volumes + the concurrency critical paths (3 per protocol) + soak workers, and one
    // wide target per concurrency level (its volumes are LUNs of one target).
    let iscsi_needed = 3 + args.iterations + 3 + args.soak_in_flight.div_ceil(2) + 8;
    // One wide target per concurrency level, and one for the at-rest section's LUNs.
    let wide = args.concurrency.len() + 1;
    let luns = args
        .concurrency
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(args.rest_volumes);
    let alloc = Allocator::new(iscsi_needed, wide, luns);
    say(&format!(
        "starting wincsi-sim ({iscsi_needed} iSCSI targets, {wide} of {luns} LUNs) and wincsi-node"
    ));
    let mut node = BenchNode::start(
        &bins,
        &volumes::scenario(iscsi_needed, wide, luns)?,
        &args.driver_log_level,
        &work_dir,
    )
    .await?;
    if args.clients_only {
        let c = clients::cheap_rpcs(&node, args.client_calls, args.client_rounds.max(1)).await?;
        say(&report_rest::clients_table(&c));
        node.shutdown().await;
        return Ok(true);
    }
    let idle = sys::memory(node.driver_pid())?;
    let driver_get_plugin_info = sections::driver_floor(&node, args.floor_iterations).await?;
    let sim_call = sections::sim_floor(&node, args.floor_iterations).await?;

    say(&format!("start to serving: {} starts", args.starts));
    let mut starts = Vec::new();
    for i in 0..args.starts {
        starts.push(node.time_a_start(i).await?);
    }

    let mut errors = Vec::new();
    say(&format!(
        "per-RPC: {} lifecycles per protocol",
        args.iterations
    ));
    let (operations, durable) = sections::per_rpc(
        &node,
        &alloc,
        args.iterations,
        &work.path().join("fsync-floor"),
        &mut errors,
    )
    .await?;

    say(&format!(
        "concurrency: N = {:?} at {} ms per host call",
        args.concurrency, args.latency_ms
    ));
    let mut concurrency = sections::concurrency(
        &node,
        &alloc,
        &args.concurrency,
        args.latency_ms,
        &mut errors,
    )
    .await?;
    say("concurrency floor: the same levels against a relay that only makes as many gRPC calls");
    let calls: Vec<_> = volumes::Protocol::ALL
        .into_iter()
        .map(|p| {
            let count = |op: &str| {
                operations
                    .iter()
                    .find(|o| o.protocol == p && o.operation == op)
                    .map_or(0, |o| o.host_calls)
            };
            (p, count("first-time stage"), count("publish"))
        })
        .collect();
    concurrency.floor = relay::concurrency_floor(
        work.path(),
        &args.concurrency,
        std::time::Duration::from_millis(args.latency_ms),
        &calls,
    )
    .await?;

    say(&format!(
        "at rest: probes per csi-proxy release, stats polls of {} volumes per protocol with and without the cache",
        args.rest_volumes
    ));
    let at_rest = rest::at_rest(
        &mut node,
        &alloc,
        args.rest_volumes,
        args.rest_checks,
        &mut errors,
    )
    .await?;
    say(&format!(
        "clients: {} cheap calls each by tonic's client and the kubelet-like one",
        args.client_calls
    ));
    let clients = clients::cheap_rpcs(&node, args.client_calls, args.client_rounds.max(1)).await?;

    say(&format!(
        "soak: {} lifecycles, {} in flight",
        args.soak, args.soak_in_flight
    ));
    let soak = sections::soak(&node, &alloc, args.soak, args.soak_in_flight).await?;
    node.shutdown().await;

    let footprint = Footprint {
        idle,
        peak_kib: concurrency
            .peak_sampled_rss_kib
            .max(concurrency.hwm_after_kib),
        node_bin_bytes: sys::file_size(&bins.node),
        windows_node_bin_bytes: windows_bin.as_deref().and_then(sys::file_size),
        sim_bin_bytes: sys::file_size(&bins.sim),
        start_to_serving: Stats::of(&starts),
    };
    let checks = vec![
        Check {
            name: "no failed CSI call (per-RPC and concurrency sections)".to_owned(),
            ok: errors.is_empty(),
            detail: format!("{} errors", errors.len()),
        },
        Check {
            name: "every RPC made host calls as expected (stage and unstage touch the host)"
                .to_owned(),
            ok: operations
                .iter()
                .filter(|o| o.operation == "first-time stage" || o.operation == "unstage")
                .all(|o| o.host_calls_min > 0),
            detail: operations
                .iter()
                .map(|o| format!("{} {}: {}", o.protocol.name(), o.operation, o.host_calls))
                .collect::<Vec<_>>()
                .join(", "),
        },
        Check {
            name: "durable record writes counted (a first stage writes its record before any host object)"
                .to_owned(),
            ok: operations
                .iter()
                .filter(|o| o.operation == "first-time stage")
                .all(|o| o.record_writes > 0),
            detail: operations
                .iter()
                .map(|o| {
                    format!(
                        "{} {}: {} + {}",
                        o.protocol.name(),
                        o.operation,
                        o.record_writes,
                        o.record_removals
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        },
        Check {
            name: "at rest: the readiness check and the CSI Probe start no host process on any csi-proxy release"
                .to_owned(),
            ok: at_rest
                .releases
                .iter()
                .all(|r| r.probe_processes == 0.0 && r.readiness_processes == 0.0 && r.probe_calls > 0.0),
            detail: at_rest
                .releases
                .iter()
                .map(|r| {
                    format!(
                        "{}: {} per Probe, {} per readiness check ({})",
                        r.release,
                        r.probe_processes,
                        r.readiness_processes,
                        r.probe_rpcs.join(", ")
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        },
        Check {
            name: "at rest: a poll within the cache's expiry asks the host nothing; every volume healthy".to_owned(),
            ok: at_rest
                .polls
                .iter()
                .all(|p| p.abnormal == 0 && (p.round != "cache, warm" || p.calls == 0)),
            detail: at_rest
                .polls
                .iter()
                .map(|p| format!("{} {} {}: {} calls", p.protocol.name(), p.release, p.round, p.calls))
                .collect::<Vec<_>>()
                .join(", "),
        },
        Check {
            name: "kubelet-like client: one PING per response on a connection, each answered".to_owned(),
            ok: clients
                .row("kubelet-like", "one connection")
                .is_some_and(|r| r.pings as usize >= r.calls * 9 / 10),
            detail: clients
                .rows
                .iter()
                .map(|r| format!("{} {}: {} calls, {} PINGs", r.client, r.connection, r.calls, r.pings))
                .collect::<Vec<_>>()
                .join("; "),
        },
        Check {
            name: "soak: no failed CSI call".to_owned(),
            ok: soak.errors == 0,
            detail: format!("{} errors in {} lifecycles", soak.errors, soak.lifecycles),
        },
        Check {
            name: "no leaked host object, no data loss".to_owned(),
            ok: soak.leaked_host_objects == 0,
            detail: format!("{:?}", soak.leftovers),
        },
        Check {
            name: "no driver state record left".to_owned(),
            ok: soak.state_records_left == 0,
            detail: format!("{} records", soak.state_records_left),
        },
    ];
    let all_ok = checks.iter().all(|c| c.ok);
    let results = Results {
        meta: Meta {
            mode: if args.smoke { "smoke" } else { "full" },
            command: std::env::args().collect::<Vec<_>>().join(" "),
            started_unix_s,
            duration_s: run_start.elapsed().as_secs_f64(),
            load_start,
            load_end: sys::load_average(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            node_bin: bins.node.display().to_string(),
            sim_bin: bins.sim.display().to_string(),
            driver_log_level: args.driver_log_level.clone(),
            work_dir: work_dir.display().to_string(),
            work_fs,
        },
        floor: sections::Floor {
            echo,
            driver_get_plugin_info,
            sim_call,
            durable_write: Stats::of(&durable.writes),
            durable_remove: Stats::of(&durable.removals),
        },
        operations,
        concurrency,
        at_rest,
        clients,
        footprint,
        soak,
        errors,
        checks,
    };
    report::write(&results, &args.out)?;
    if let Some(md) = &args.markdown {
        report::update_markdown(&results, md)?;
    }
    print_checks(&results.checks, &args.out);
    Ok(all_ok)
}

fn print_checks(checks: &[Check], out: &Path) {
    let passed = checks.iter().filter(|c| c.ok).count();
    for c in checks {
        say(&format!(
            "{} {} ({})",
            if c.ok { "ok  " } else { "FAIL" },
            c.name,
            c.detail
        ));
    }
    say(&format!("results in {}", out.display()));
    // The plain closing line CI runners read.
    let _ = writeln!(
        std::io::stdout(),
        "wincsi-bench: {passed} passed, {} failed",
        checks.len() - passed
    );
}
