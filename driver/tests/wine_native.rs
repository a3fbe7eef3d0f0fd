//! The real `wincsi-node.exe --host-backend native` under Wine (run by `.ci/wine-run.sh`): Wine 8 has the WMI
//! service and the `ROOT\Microsoft\Windows\Storage` namespace but no `MSFT_*` class in it, and no
//! `ROOT\Microsoft\Windows\SMB` namespace (reference §4). The backend's start-up check finds that through the real
//! COM/WMI stack without executing any method (executing one on a missing class crashes a Wine process), and the
//! driver exits with one message naming what is missing, instead of serving volumes it could never stage.

#![cfg(windows)]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_wincsi-node");

#[test]
fn a_host_without_the_storage_and_smb_providers_is_refused_at_start_with_one_clear_message() {
    let state = tempfile::tempdir().expect("tmp");
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
    cmd.args([
        "--endpoint",
        "tcp://127.0.0.1:0",
        "--node-id",
        "wine-native",
        "--host-backend",
        "native",
        "--state-dir",
    ])
    .arg(state.path());
    let out = cmd.output().expect("run wincsi-node.exe");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    for needle in [
        "--host-backend native: this host lacks the Windows storage management WMI providers the native backend \
         calls (Windows Server 2019 and later have them)",
        "has no class MSFT_Disk, MSFT_Partition, MSFT_Volume",
        "MSFT_iSCSISessionToDisk",
        "cannot be opened (0x8004100E WBEM_E_INVALID_NAMESPACE",
    ] {
        assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
    }
    assert!(!text.contains("serving CSI"), "{text}");
}
