//! `wincsi-sim --root` given a relative path: the sandbox's links are made from the root, so a relative one would
//! make them relative to each link's own directory, and broken. The binary makes the root absolute at start (and
//! reports it so in its ready line); a link made by CreateSymlink then leads where it should.

#![cfg(unix)]

use std::process::Stdio;

use proxy_client::{ProxyClient, Transport};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn a_relative_root_is_made_absolute_and_links_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_wincsi-sim"))
        .current_dir(dir.path())
        .args([
            "--socket-dir",
            "socks",
            "--root",
            "sandbox",
            "--log-level",
            "warn",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wincsi-sim");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();

    let fs = ProxyClient::new(Transport::unix_sockets(dir.path().join("socks"))).filesystem();
    let k = r"C:\var\lib\kubelet";
    fs.mkdir(&format!(r"{k}\source")).await.unwrap();
    fs.create_symlink(&format!(r"{k}\source"), &format!(r"{k}\link"))
        .await
        .unwrap();
    // Through the link: the directory appears in its target.
    fs.mkdir(&format!(r"{k}\link\sub"))
        .await
        .expect("mkdir through the link");
    assert!(fs.path_exists(&format!(r"{k}\source\sub")).await.unwrap());
    assert!(fs.is_symlink(&format!(r"{k}\link")).await.unwrap());
    let ready: serde_json::Value = serde_json::from_str(&line).expect("ready line");
    let canonical = std::fs::canonicalize(dir.path().join("sandbox")).unwrap();
    assert_eq!(ready["root"], canonical.display().to_string(), "{line}");
    child.kill().await.unwrap();
}
