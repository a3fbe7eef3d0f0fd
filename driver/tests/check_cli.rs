//! The real `wincsi-node check-node` binary: `--print-schema`, usage errors (exit 2, one line), and a run against
//! the simulated host served on Unix sockets — JSON on stdout that validates against the schema, progress on
//! stderr, exit 0, and no secret in either stream.

#![cfg(unix)]

use std::process::{Command, Output};

use serde_json::{Value, json};
use sim::{CsiProxyVersion, HostOptions, Scenario, SimHost};

const BIN: &str = env!("CARGO_BIN_EXE_wincsi-node");
const PASSWORD: &str = "Cli-Ch3ck-Pw!";

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    for var in [
        "KUBELET_ROOT",
        "CSI_PROXY_SOCKET_DIR",
        "STATE_DIR",
        "WINCSI_CHECK_SMB_PASSWORD",
        "WINCSI_CHECK_SMB_USERNAME",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("check-node").args(args).envs(env.iter().copied());
    cmd.output().expect("run wincsi-node check-node")
}

#[test]
fn print_schema_prints_the_schema() {
    let out = run(&["--print-schema"], &[]);
    assert!(out.status.success());
    let schema: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(schema["$id"], wincsi::check::report::SCHEMA_ID);
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    for (args, needle) in [
        (&["--phase", "sometime"][..], "--phase"),
        (
            &["--smb-share", r"\\fs1\x", "--smb-username", "bob"][..],
            "WINCSI_CHECK_SMB_PASSWORD",
        ),
        (&["--scratch-dir", r"C:\Windows\x"][..], "--scratch-dir"),
    ] {
        let out = run(args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{needle} missing: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_against_the_simulated_host_prints_a_valid_report() {
    let sandbox = tempfile::tempdir().expect("tmp");
    let socks = tempfile::tempdir().expect("tmp");
    let work = tempfile::tempdir().expect("tmp");
    let scenario = Scenario::from_json(
        &json!({"smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": PASSWORD, "domain": "CORP"}],
            "shares": [{"name": "s"}]}]}})
        .to_string(),
    )
    .expect("scenario");
    let opts = HostOptions {
        csi_proxy_version: Some(CsiProxyVersion::V1_3_0),
        ..HostOptions::default()
    };
    let host = SimHost::new(&scenario, sandbox.path(), opts).expect("sim");
    let _serve = sim::serve_unix(host.clone(), socks.path()).expect("serve");
    let socks_dir = socks.path().display().to_string();
    let check_dir = work.path().display().to_string();
    let args: Vec<String> = [
        "--csi-proxy-socket-dir",
        &socks_dir,
        "--check-dir",
        &check_dir,
        "--output",
        "json",
        "--smb-share",
        r"\\fs1\s",
        "--smb-username",
        r"CORP\bob",
        "--csi-proxy-release",
        "v1.3.0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    // The simulated host is served by this test's runtime: the blocking child runs on another thread.
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args, &[("WINCSI_CHECK_SMB_PASSWORD", PASSWORD)])
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert!(
        !stdout.contains(PASSWORD) && !stderr.contains(PASSWORD),
        "a secret was printed"
    );
    assert!(
        stderr.contains("check-node plan") && stderr.contains("-> NewSmbGlobalMapping"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).expect("stdout is one JSON document");
    let schema = wincsi::check::report::strict_schema();
    let validator = jsonschema::validator_for(&schema).expect("schema");
    assert!(validator.is_valid(&report), "{report}");
    assert_eq!(report["release"]["claim_consistent"], true);
    assert_eq!(report["summary"]["findings"]["contradicts"], 0, "{report}");
    assert!(host.invariants().ok(), "{:?}", host.invariants());
}
