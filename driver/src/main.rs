//! `wincsi-node`: the wincsi CSI node plugin binary. Parses flags, sets up logging, serves.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::error::ErrorKind;
use wincsi::config::{Config, one_line_error};
use wincsi::{backend, logging, server};

fn main() -> ExitCode {
    let config = match Config::try_parse_args(std::env::args_os()) {
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
    runtime.block_on(server::run(config, probe))?;
    Ok(())
}
