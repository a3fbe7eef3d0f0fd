//! The `wincsi-bench` command line: the options `.ci/bench-smoke.sh` and BENCHMARKS.md's commands use exist.
//!
//! Also what makes `cargo test --workspace --all-features` build the `wincsi-bench` binary (cargo builds a package's
//! binaries for its integration tests), so CI's bench smoke runs the binary that build made instead of building the
//! whole dependency stack a second time without the tests' features (`.ci/README.md`, "Builds made once").

use std::process::Command;

#[test]
fn help_lists_the_options_the_smoke_run_and_benchmarks_use() {
    let out = Command::new(env!("CARGO_BIN_EXE_wincsi-bench"))
        .arg("--help")
        .output()
        .expect("run wincsi-bench --help");
    assert!(out.status.success(), "wincsi-bench --help failed: {out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for option in ["--smoke", "--node-bin", "--sim-bin", "--out"] {
        assert!(
            help.contains(option),
            "`wincsi-bench --help` does not list {option}:\n{help}"
        );
    }
}
