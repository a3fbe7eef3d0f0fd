//! The commands `sim/README.md` gives for the native test build ("The Windows view over a socket") build what they
//! say: the `cargo build` lines of that block, resolved as written, compile a `wincsi-node` with the
//! `test-windows-socket` feature (the feature that gives it `--test-windows-socket`, which the driver's CLI tests
//! check). The earlier one-line form (`cargo build -p wincsi-sim -p wincsi-driver --features
//! wincsi-driver/test-windows-socket`) resolved it without the feature (cargo 1.95), which this test reports.
//!
//! Each line is resolved with cargo's unit graph (`-Z unstable-options --unit-graph`, through `RUSTC_BOOTSTRAP=1`):
//! exactly the units, and their features, that the build would compile, without compiling them. Building the lines
//! for real would rebuild the whole dependency stack with other features inside `cargo test` (minutes on CI's two
//! cores, and it overwrote `target/debug/wincsi-node`). `cargo tree` is no substitute: it shows the feature as
//! enabled for the old line (it folds in the dev-dependencies' features), where the build and the unit graph do not.

use std::path::Path;
use std::process::Command;

/// The `cargo build` lines of the README's code block that starts the driver with `--test-windows-socket`, as argument
/// lists (the block's commands have no quoting; a trailing `# comment` is dropped).
fn documented_builds(readme: &str) -> Vec<Vec<String>> {
    let block = readme
        .split("```")
        .find(|b| b.starts_with("sh") && b.contains("--test-windows-socket unix:"))
        .expect("sim/README.md has the native test build's commands");
    block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| l.starts_with("cargo build"))
        .map(|l| l.split_whitespace().skip(1).map(str::to_owned).collect())
        .collect()
}

/// The features of the `wincsi-node` binary unit in the unit graph of `cargo <args>`, if it builds one.
fn node_features(root: &Path, args: &[String]) -> Option<Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(&cargo)
        .args(args)
        .args(["-Z", "unstable-options", "--unit-graph"])
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(root)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {} --unit-graph: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let graph: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the unit graph is JSON");
    graph["units"]
        .as_array()
        .expect("units")
        .iter()
        .find(|u| u["target"]["name"] == "wincsi-node" && u["target"]["kind"][0] == "bin")
        .map(|u| {
            u["features"]
                .as_array()
                .expect("features")
                .iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
}

#[test]
fn the_documented_commands_build_a_wincsi_node_with_the_test_windows_socket_feature() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let readme = std::fs::read_to_string(root.join("sim/README.md")).expect("sim/README.md");
    let builds = documented_builds(&readme);
    let nodes: Vec<(String, Vec<String>)> = builds
        .iter()
        .filter_map(|args| node_features(root, args).map(|f| (args.join(" "), f)))
        .collect();
    assert!(
        !nodes.is_empty(),
        "no documented command builds wincsi-node: {builds:?}"
    );
    for (command, features) in nodes {
        assert!(
            features.iter().any(|f| f == "test-windows-socket"),
            "`cargo {command}` builds wincsi-node with features {features:?}, without test-windows-socket"
        );
    }
}

#[test]
fn the_old_one_line_command_is_caught() {
    // The form the README gave before: the check above must fail on it, or it proves nothing.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let old: Vec<String> =
        "build -p wincsi-sim -p wincsi-driver --features wincsi-driver/test-windows-socket"
            .split_whitespace()
            .map(str::to_owned)
            .collect();
    let features = node_features(root, &old).expect("the old command builds wincsi-node");
    assert!(
        !features.iter().any(|f| f == "test-windows-socket"),
        "cargo now resolves the old one-line command with the feature ({features:?}): the README's two-command form \
         and this check's reason can go"
    );
}

#[test]
fn the_readme_block_is_found_and_split() {
    let readme = "x\n```sh\ncargo build -p a --features f   # why\ncargo build -p b\nbin --test-windows-socket unix:/s\n```\n";
    assert_eq!(
        documented_builds(readme),
        [
            vec!["build", "-p", "a", "--features", "f"],
            vec!["build", "-p", "b"]
        ]
    );
}
