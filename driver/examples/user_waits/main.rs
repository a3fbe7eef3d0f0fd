//! `user_waits`: what a user waits for and what the node pays per operation, per csi-proxy release and native, at
//! the simulated host's default arrival and the driver's default flags (issue 39 item 1; `measure.rs` says how).
//! The tables of BENCHMARKS.md's section "What a user waits for":
//!
//! ```sh
//! cargo run -p wincsi-driver --example user_waits                                # print the tables
//! cargo run -p wincsi-driver --example user_waits -- --markdown BENCHMARKS.md    # replace them there
//! cargo run -p wincsi-driver --example user_waits -- --check BENCHMARKS.md       # fail when they differ
//! cargo run -p wincsi-driver --example user_waits -- -v                          # and every call sequence
//! ```
//!
//! The measurement runs on a paused clock, so it is deterministic and takes seconds; `driver/tests/user_waits.rs`
//! checks BENCHMARKS.md against it and the goals of issue 39 items 2 and 3.

mod measure;
mod report;
#[path = "../common/requests.rs"]
mod requests;

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let measured = measure::measure_all();
    let block = report::render(&measured);
    if let Some(path) = file("--markdown").or_else(|| file("--check")) {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let Some(new) = report::replaced(&text, &block) else {
            let _ = writeln!(
                std::io::stderr(),
                "{path} has no section between {} and {}",
                report::BEGIN,
                report::END
            );
            return ExitCode::FAILURE;
        };
        if file("--check").is_some() {
            if new != text {
                let _ = writeln!(
                    std::io::stderr(),
                    "{path}'s user_waits tables are out of date; run with --markdown {path}:\n{block}"
                );
                return ExitCode::FAILURE;
            }
            println!("{path} holds the current tables");
        } else {
            std::fs::write(path, new).unwrap_or_else(|e| panic!("{path}: {e}"));
            println!("{path}: tables replaced");
        }
        return ExitCode::SUCCESS;
    }
    println!("{block}");
    if args.iter().any(|a| a == "-v") {
        for ((column, row), cell) in &measured.table {
            println!("\n{} — {}:", column.heading(), row.label());
            println!("  {}", cell.sequence.join(" → "));
            for e in &cell.errors {
                println!("  ! {e}");
            }
        }
    }
    ExitCode::SUCCESS
}
