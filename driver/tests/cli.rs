//! Command-line behaviour of the real `wincsi-node` binary: bad values exit with status 2 and a
//! one-line message naming the flag and the rule; `--version` and `--help` exit 0.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_wincsi-node");

/// Runs the binary with `args` and a clean environment for every flag with an env fallback.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    for var in [
        "CSI_ENDPOINT",
        "KUBE_NODE_NAME",
        "DRIVER_NAME",
        "KUBELET_ROOT",
        "CSI_PROXY_SOCKET_DIR",
        "STATE_DIR",
        "LOG_LEVEL",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(args).envs(env.iter().copied());
    cmd.output().expect("run wincsi-node")
}

/// Asserts exit status 2 and a single stderr line mentioning every needle.
fn assert_usage_error(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<_> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    for needle in needles {
        assert!(lines[0].contains(needle), "{needle:?} missing in: {stderr}");
    }
}

const OK: &[&str] = &[
    "--endpoint",
    "unix:///tmp/wincsi-cli-test.sock",
    "--node-id",
    "n1",
];

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = OK.to_vec();
    v.extend_from_slice(extra);
    v
}

#[test]
fn bad_driver_names_exit_2() {
    let long = Box::leak("a".repeat(64).into_boxed_str());
    for bad in ["1wincsi.io", "wincsi.io-", "win csi", "wincsi/io", long] {
        let out = run(&with(&["--driver-name", bad]), &[]);
        assert_usage_error(
            &out,
            &[
                "--driver-name",
                "at most 63 characters",
                "start and end with a letter",
            ],
        );
    }
}

#[test]
fn bad_driver_name_from_env_names_the_flag() {
    let out = run(OK, &[("DRIVER_NAME", "-bad-")]);
    assert_usage_error(&out, &["--driver-name"]);
}

#[test]
fn bad_endpoints_exit_2() {
    for bad in [
        "/tmp/csi.sock",
        "unix://relative.sock",
        "tcp://0.0.0.0:10000",
        "tcp://10.1.2.3:10000",
        "http://127.0.0.1:1",
    ] {
        let out = run(&["--endpoint", bad, "--node-id", "n1"], &[]);
        assert_usage_error(&out, &["--endpoint", "unix://"]);
    }
}

#[test]
fn other_bad_values_exit_2() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--max-volumes-per-node", "-3"],
            &["--max-volumes-per-node", "non-negative"],
        ),
        (
            &["--max-volumes-per-node", "many"],
            &["--max-volumes-per-node"],
        ),
        (&["--topology", "zone"], &["--topology", "KEY=VALUE"]),
        (
            &["--topology", "a=b", "--topology", "a=c"],
            &["--topology", "more than once"],
        ),
        (&["--log-format", "xml"], &["--log-format", "plain", "json"]),
        (&["--log-level", "loud"], &["--log-level", "debug"]),
        (&["--host-backend", "wmi"], &["--host-backend", "csi-proxy"]),
        (
            &["--csi-proxy-pipe-prefix", "pipe"],
            &["--csi-proxy-pipe-prefix"],
        ),
        (&["--no-such-flag"], &["--no-such-flag"]),
    ];
    for (extra, needles) in cases {
        let out = run(&with(extra), &[]);
        assert_usage_error(&out, needles);
    }
}

#[test]
fn missing_required_flags_exit_2() {
    let out = run(&["--endpoint", "unix:///tmp/x.sock"], &[]);
    assert_usage_error(&out, &["--node-id"]);
    let out = run(&[], &[]);
    assert_usage_error(&out, &["--endpoint", "--node-id"]);
}

#[test]
fn env_fallbacks_are_used() {
    // A valid configuration from the environment that fails only at bind time (missing
    // directory): exit status 1, not a usage error.
    let out = run(
        &[],
        &[
            ("CSI_ENDPOINT", "unix:///nonexistent-wincsi-dir/csi.sock"),
            ("KUBE_NODE_NAME", "node-from-env"),
            ("LOG_LEVEL", "error"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/nonexistent-wincsi-dir"), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
}

#[test]
fn version_and_help() {
    let out = run(&["--version"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(&format!("wincsi-node {}", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
    assert!(stdout.contains("CSI spec 1.12.0"), "{stdout}");

    let out = run(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--endpoint",
        "--node-id",
        "--driver-name",
        "--kubelet-root",
        "--host-backend",
        "--csi-proxy-pipe-prefix",
        "--csi-proxy-socket-dir",
        "--state-dir",
        "--max-volumes-per-node",
        "--topology",
        "--log-format",
        "--log-level",
        "--metrics-address",
        "--health-address",
        "--version",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from --help");
    }
}
