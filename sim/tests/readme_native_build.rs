//! The commands `sim/README.md` gives for the native test build ("The Windows view over a socket") build what they
//! say: their `cargo build` lines, run as written (plus `--message-format json`), leave a `wincsi-node` compiled with
//! the `test-windows-socket` feature whose `--help` lists `--test-windows-socket`. The earlier one-line form
//! (`cargo build -p wincsi-sim -p wincsi-driver --features wincsi-driver/test-windows-socket`) built it without the
//! feature (cargo 1.95), which this test reported.

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

#[test]
fn the_documented_commands_build_a_wincsi_node_with_the_test_windows_socket_flag() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let readme = std::fs::read_to_string(root.join("sim/README.md")).expect("sim/README.md");
    let builds = documented_builds(&readme);
    assert!(
        builds
            .iter()
            .any(|b| b.iter().any(|a| a == "wincsi-driver")),
        "no documented command builds wincsi-driver: {builds:?}"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut node = None;
    for args in &builds {
        let out = Command::new(&cargo)
            .args(args)
            .arg("--message-format=json-render-diagnostics")
            .current_dir(root)
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "cargo {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(m) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if m["reason"] == "compiler-artifact" && m["target"]["name"] == "wincsi-node" {
                node = Some((
                    args.join(" "),
                    m["features"].clone(),
                    m["executable"].as_str().map(str::to_owned),
                ));
            }
        }
    }
    let (command, features, exe) = node.expect("the documented commands build wincsi-node");
    assert!(
        features
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "test-windows-socket")),
        "`cargo {command}` builds wincsi-node with features {features}, without test-windows-socket"
    );
    let exe = exe.expect("wincsi-node's executable");
    let help = Command::new(&exe)
        .arg("--help")
        .output()
        .expect("wincsi-node --help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--test-windows-socket"),
        "{exe} --help lists no --test-windows-socket"
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
