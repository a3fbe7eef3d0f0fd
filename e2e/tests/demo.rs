//! The README demo (`cargo run -p wincsi-e2e --bin wincsi-demo`) runs, exits 0, stays concise, and shows both
//! volumes' lifecycles with their host calls and no secret.
#![cfg(unix)]

use std::process::Command;

use wincsi_e2e::fixtures::SECRETS;

#[test]
fn demo_exits_zero_and_tells_the_whole_story() {
    let out = Command::new(env!("CARGO_BIN_EXE_wincsi-demo"))
        .output()
        .expect("runs the demo");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "CSI NodeStageVolume",
        "CSI NodePublishVolume",
        "CSI NodeUnpublishVolume",
        "CSI NodeUnstageVolume",
        "host NewSmbGlobalMapping",
        "password=<redacted>",
        "host ConnectTarget",
        "chap_secret=<redacted>",
        "host FormatVolume",
        "host RemoveSmbGlobalMapping",
        "host DisconnectTarget",
        "0 data-loss events, 0 leftovers",
        "demo finished: the node is clean.",
    ] {
        assert!(
            stdout.contains(needle),
            "demo output lacks {needle:?}:\n{stdout}"
        );
    }
    for s in SECRETS {
        assert!(!stdout.contains(s), "a secret appears in the demo output");
    }
    let lines = stdout.lines().count();
    assert!((40..=110).contains(&lines), "demo output is {lines} lines");
}
