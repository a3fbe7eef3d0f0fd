//! `wincsi-node`: the wincsi CSI node plugin binary. Parses flags, sets up logging, serves.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::error::ErrorKind;
use wincsi::config::{Config, one_line_error};
use wincsi::{backend, check, logging, server};

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if check::cli::is_check_node(&args) {
        return check_node(&args);
    }
    let config = match Config::try_parse_args(args) {
        Ok(config) => config,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            // Help/version go to stdout with status 0; nothing useful to do if stdout is gone.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}", one_line_error(&e));
            return ExitCode::from(2);
        }
    };
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if tracing::dispatcher::has_been_set() {
                tracing::error!(error = format!("{e:#}"), "wincsi-node failed");
            } else {
                let _ = writeln!(std::io::stderr(), "error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

fn run(config: Config) -> anyhow::Result<()> {
    logging::init(config.log_format, config.log_level)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("wincsi-node")
        .build()
        .context("starting the tokio runtime")?;
    let probe = backend::probe(&config);
    // The server runs as a task on the runtime's workers, not as `block_on`'s future on the main thread: its accept
    // loop then spawns each connection's task onto the worker that accepted it (its local queue) instead of
    // handing it over from the main thread through the shared queue. Measured with a connection per call (as
    // kubelet dials): per call the main thread was woken by the worker that saw the listener readable and a worker
    // by the main thread's spawn, 4 futex calls and two cross-thread wake-ups for every connection.
    let served = runtime.block_on(async { tokio::spawn(server::run(config, probe)).await });
    match served {
        Ok(result) => result?,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => return Err(anyhow::anyhow!("the server task ended: {e}")),
    }
    Ok(())
}

/// `wincsi-node check-node`: exit 0 when every check could run and cleanup is complete, 1 otherwise, 2 for a usage
/// error or a refusal before anything was touched.
fn check_node(args: &[std::ffi::OsString]) -> ExitCode {
    let (config, flags) = match check::cli::parse(args) {
        Ok(parsed) => parsed,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}", one_line_error(&e));
            return ExitCode::from(2);
        }
    };
    if flags.print_schema {
        let _ = write!(std::io::stdout(), "{}", check::report::SCHEMA);
        return ExitCode::SUCCESS;
    }
    let options =
        match check::options::CheckOptions::resolve(&config, &flags, &|k| std::env::var(k).ok()) {
            Ok(o) => o,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: {e}");
                return ExitCode::from(2);
            }
        };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("wincsi-check")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: starting the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let output = options.output;
    let job = check::CheckJob { options };
    match runtime.block_on(backend::run_job(&config, job)) {
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::from(2)
        }
        Ok(report) => {
            let text = match output {
                check::cli::OutputFormat::Json => {
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                }
                check::cli::OutputFormat::Text => report.render_text(),
            };
            let _ = writeln!(std::io::stdout(), "{text}");
            let ok = report.cleanup.complete
                && report
                    .checks
                    .iter()
                    .all(|c| c.status != check::report::Status::Failed);
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
