//! Shared helpers: start the `wincsi-sim` binary and open raw tonic channels to its endpoints.

#![allow(dead_code, unreachable_pub)]

use std::process::Stdio;

use serde_json::Value;
use sim::admin::{AdminAddr, AdminClient};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running simulator process (killed on drop).
pub struct SimProcess {
    pub child: Child,
    pub ready: Value,
    pub admin_addr: AdminAddr,
    pub dir: tempfile::TempDir,
}

impl SimProcess {
    /// Starts the binary with the arguments `args(tempdir)` returns and waits for its ready line (no sleeping:
    /// the line is printed once every endpoint is bound). The sandbox lives in the tempdir too.
    pub async fn start(args: impl FnOnce(&std::path::Path) -> Vec<String>) -> SimProcess {
        Self::start_with_env(&[], args).await
    }

    /// [`SimProcess::start`] with extra environment variables for the child (`None` removes one).
    pub async fn start_with_env(
        env: &[(&str, Option<&str>)],
        args: impl FnOnce(&std::path::Path) -> Vec<String>,
    ) -> SimProcess {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(binary());
        for (k, v) in env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let mut child = cmd
            .args(args(dir.path()))
            .arg("--root")
            .arg(dir.path().join("sandbox"))
            .arg("--log-level")
            .arg("warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn wincsi-sim");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).await.unwrap();
        let admin_addr: AdminAddr = sim::admin::ReadyLine::parse(&line)
            .unwrap()
            .admin_addr()
            .unwrap();
        let ready: Value = serde_json::from_str(&line).unwrap();
        SimProcess {
            child,
            ready,
            admin_addr,
            dir,
        }
    }

    pub async fn admin(&self) -> AdminClient {
        AdminClient::connect(&self.admin_addr).await.unwrap()
    }
}

/// The simulator binary. A Windows build cross-compiled on Linux sees cargo's Linux path; under Wine that path
/// is reachable through the `Z:` drive.
fn binary() -> String {
    let exe = env!("CARGO_BIN_EXE_wincsi-sim");
    if cfg!(windows) && exe.starts_with('/') {
        format!("Z:{}", exe.replace('/', "\\"))
    } else {
        exe.to_string()
    }
}

pub fn example_scenario() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/example.json").to_string()
}

#[cfg(unix)]
pub async fn unix_channel(path: std::path::PathBuf) -> tonic::transport::Channel {
    use hyper_util::rt::TokioIo;
    tonic::transport::Endpoint::try_from("http://localhost")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
            }
        }))
        .await
        .unwrap()
}

#[cfg(windows)]
pub async fn pipe_channel(name: String) -> tonic::transport::Channel {
    use hyper_util::rt::TokioIo;
    tonic::transport::Endpoint::try_from("http://localhost")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let name = name.clone();
            async move {
                tokio::net::windows::named_pipe::ClientOptions::new()
                    .open(&name)
                    .map(TokioIo::new)
            }
        }))
        .await
        .unwrap()
}
