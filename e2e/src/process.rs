//! The two processes of a node: the simulated Windows host (`wincsi-sim`) and the driver (`wincsi-node`), each
//! started from its real binary, with readiness taken from the line each prints once it is serving (never from
//! a sleep), and bounded by [`READY_TIMEOUT`].

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sim::Scenario;
use sim::admin::{AdminAddr, AdminClient};
use tokio::process::{Child, Command};

use crate::error::{Error, Result};
use crate::output::OutputLog;

/// Upper bound for a process to print its ready line (generous: debug builds on a loaded 2-core machine).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the two binaries are. Build it with [`binaries!`](crate::binaries) from an integration test.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The driver (`wincsi-node`, built from `driver/src/main.rs`).
    pub node: PathBuf,
    /// The simulated host (`wincsi-sim`, built from `sim/src/main.rs`).
    pub sim: PathBuf,
}

/// The [`Binaries`] cargo built for this package's integration tests (`CARGO_BIN_EXE_*` is only set there, so
/// this is a macro expanded in the test crate).
#[macro_export]
macro_rules! binaries {
    () => {
        $crate::Binaries {
            node: ::std::path::PathBuf::from(env!("CARGO_BIN_EXE_wincsi-node-e2e")),
            sim: ::std::path::PathBuf::from(env!("CARGO_BIN_EXE_wincsi-sim-e2e")),
        }
    };
}

/// How the driver reaches the simulated csi-proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyWiring {
    /// `<dir>/csi-proxy-<group>-<version>.sock` (any OS with AF_UNIX).
    UnixSockets(PathBuf),
    /// Real named pipes `<prefix>csi-proxy-<group>-<version>` (Windows, Wine).
    NamedPipes(String),
}

impl ProxyWiring {
    /// The default for this OS: Unix sockets under `workdir` on Unix, uniquely prefixed named pipes on Windows.
    pub fn for_this_os(workdir: &Path) -> ProxyWiring {
        crate::platform::default_wiring(workdir)
    }

    fn sim_args(&self) -> Vec<String> {
        match self {
            ProxyWiring::UnixSockets(dir) => vec!["--socket-dir".into(), dir.display().to_string()],
            ProxyWiring::NamedPipes(prefix) => {
                vec!["--pipes".into(), "--pipe-prefix".into(), prefix.clone()]
            }
        }
    }

    fn driver_args(&self) -> Vec<String> {
        match self {
            ProxyWiring::UnixSockets(dir) => {
                vec!["--csi-proxy-socket-dir".into(), dir.display().to_string()]
            }
            ProxyWiring::NamedPipes(prefix) => {
                vec!["--csi-proxy-pipe-prefix".into(), prefix.clone()]
            }
        }
    }
}

/// Takes a piped stdio handle of a freshly spawned child.
fn piped<T>(handle: Option<T>, what: &str, stream: &str) -> Result<T> {
    handle.ok_or_else(|| Error::Spawn {
        what: what.to_owned(),
        source: std::io::Error::other(format!("{stream} was not piped")),
    })
}

fn spawn(bin: &Path, what: &str, args: &[String], env: &[(String, String)]) -> Result<Child> {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Only what we pass: a developer's LOG_LEVEL, CSI_ENDPOINT, KUBERNETES_SERVICE_HOST... must not leak into a test.
    for var in [
        "CSI_ENDPOINT",
        "KUBE_NODE_NAME",
        "DRIVER_NAME",
        "KUBELET_ROOT",
        "CSI_PROXY_SOCKET_DIR",
        "STATE_DIR",
        "LOG_LEVEL",
        "KUBECONFIG",
        // The driver's Kubernetes API access (inline volumes' Secrets): a CI pod's own must not win.
        "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT",
        "WINCSI_SERVICE_ACCOUNT_DIR",
        "CONTAINER_SANDBOX_MOUNT_POINT",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Wine's CreateProcess occasionally fails with ERROR_INTERNAL_ERROR (1359) when the test threads start processes
    // at once (seen once in CI's Wine step; real Windows is not known to); a new attempt starts it.
    const WINE_SPAWN_ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        match cmd.spawn() {
            Err(e)
                if cfg!(windows)
                    && e.raw_os_error() == Some(1359)
                    && attempt < WINE_SPAWN_ATTEMPTS =>
            {
                attempt += 1;
            }
            other => {
                return other.map_err(|source| Error::Spawn {
                    what: format!("{what} ({})", bin.display()),
                    source,
                });
            }
        }
    }
}

async fn wait_ready<T>(
    what: &str,
    rx: tokio::sync::oneshot::Receiver<T>,
    child: &mut Child,
    log: &OutputLog,
) -> Result<T> {
    let not_ready = |reason: String| Error::NotReady {
        what: what.to_owned(),
        reason,
        output: log.tail(60),
    };
    match tokio::time::timeout(READY_TIMEOUT, rx).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => {
            // The output closed without a ready line: the process exited. Reap it for the status.
            let status = child
                .wait()
                .await
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string());
            Err(not_ready(format!("exited ({status}) without a ready line")))
        }
        Err(_) => Err(not_ready(format!("no ready line within {READY_TIMEOUT:?}"))),
    }
}

/// A running `wincsi-sim`.
#[derive(Debug)]
pub struct SimProcess {
    child: Child,
    admin: AdminClient,
    admin_addr: AdminAddr,
    wiring: ProxyWiring,
    log: OutputLog,
}

impl SimProcess {
    /// Writes `scenario` to `<workdir>/scenario.json` and starts the simulator serving it as `wiring` says, with
    /// its sandbox in `<workdir>/sandbox`; returns once its JSON ready line arrived and the admin client is
    /// connected.
    pub async fn start(
        bin: &Path,
        scenario: &Scenario,
        workdir: &Path,
        wiring: &ProxyWiring,
    ) -> Result<SimProcess> {
        Self::start_with(bin, scenario, workdir, wiring, &[]).await
    }

    /// [`SimProcess::start`] with more flags (e.g. `--windows-socket unix:PATH`: its Windows view for a native
    /// driver).
    pub async fn start_with(
        bin: &Path,
        scenario: &Scenario,
        workdir: &Path,
        wiring: &ProxyWiring,
        extra_args: &[String],
    ) -> Result<SimProcess> {
        std::fs::create_dir_all(workdir)
            .map_err(Error::io(format!("creating {}", workdir.display())))?;
        let file = workdir.join("scenario.json");
        let json = serde_json::to_string_pretty(scenario)
            .map_err(|e| Error::Check(format!("scenario: {e}")))?;
        std::fs::write(&file, json).map_err(Error::io(format!("writing {}", file.display())))?;
        let mut args = vec!["--scenario".to_owned(), file.display().to_string()];
        args.extend(wiring.sim_args());
        args.extend([
            "--root".to_owned(),
            workdir.join("sandbox").display().to_string(),
        ]);
        if let ProxyWiring::UnixSockets(dir) = wiring {
            args.extend([
                "--admin".to_owned(),
                format!("unix:{}", dir.join("admin.sock").display()),
            ]);
        } else {
            args.extend(["--admin".to_owned(), "tcp:127.0.0.1:0".to_owned()]);
        }
        args.extend(extra_args.iter().cloned());
        let mut child = spawn(bin, "wincsi-sim", &args, &[])?;
        let log = OutputLog::default();
        let ready = log.capture(
            piped(child.stdout.take(), "wincsi-sim", "stdout")?,
            |line| {
                let v: serde_json::Value = serde_json::from_str(line).ok()?;
                (v.get("ready")? == true)
                    .then(|| v.get("admin").and_then(|a| a.as_str()).map(str::to_owned))?
            },
        );
        // stderr is only logged; its channel is never used.
        drop(
            log.capture(piped(child.stderr.take(), "wincsi-sim", "stderr")?, |_| {
                None::<()>
            }),
        );
        let admin = wait_ready("wincsi-sim", ready, &mut child, &log).await?;
        let admin_addr: AdminAddr = admin.parse()?;
        let admin = AdminClient::connect(&admin_addr).await?;
        Ok(SimProcess {
            child,
            admin,
            admin_addr,
            wiring: wiring.clone(),
            log,
        })
    }

    /// The admin client (reboot, faults, hangs, audit, files, invariants).
    pub fn admin(&self) -> &AdminClient {
        &self.admin
    }

    /// The admin address (to connect more clients).
    pub fn admin_addr(&self) -> &AdminAddr {
        &self.admin_addr
    }

    /// How the simulator serves csi-proxy.
    pub fn wiring(&self) -> &ProxyWiring {
        &self.wiring
    }

    /// What the simulator printed.
    pub fn log(&self) -> &OutputLog {
        &self.log
    }

    /// Kills the simulator and waits for it to exit.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// How to start the driver.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// `--endpoint` as requested (`unix://...`, or `tcp://127.0.0.1:0` for a port the OS picks).
    pub endpoint: String,
    /// `--node-id`.
    pub node_id: String,
    /// `--driver-name`.
    pub driver_name: String,
    /// `--kubelet-root` (a Windows path: the driver never touches it directly, csi-proxy does).
    pub kubelet_root: String,
    /// `--state-dir` (a local directory).
    pub state_dir: PathBuf,
    /// How to reach csi-proxy.
    pub wiring: ProxyWiring,
    /// `--log-level`.
    pub log_level: String,
    /// Extra flags.
    pub extra_args: Vec<String>,
    /// Extra environment variables (e.g. `KUBECONFIG` for inline volumes' Secrets).
    pub env: Vec<(String, String)>,
}

impl DriverOptions {
    /// The defaults for a node whose files live in `workdir`: driver name `wincsi.csi.io`, kubelet root
    /// `C:\var\lib\kubelet`, state in `<workdir>/state`, trace logging, endpoint and wiring for this OS.
    pub fn new(workdir: &Path, wiring: ProxyWiring) -> DriverOptions {
        DriverOptions {
            endpoint: crate::platform::default_csi_endpoint(workdir),
            node_id: "win-node-1".to_owned(),
            driver_name: crate::DRIVER_NAME.to_owned(),
            kubelet_root: crate::kubelet::KUBELET_ROOT.to_owned(),
            state_dir: workdir.join("state"),
            wiring,
            // The most verbose level, so the "no secret in any log line" checks see everything.
            log_level: "trace".to_owned(),
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }

    fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--endpoint".to_owned(),
            self.endpoint.clone(),
            "--node-id".to_owned(),
            self.node_id.clone(),
            "--driver-name".to_owned(),
            self.driver_name.clone(),
            "--kubelet-root".to_owned(),
            self.kubelet_root.clone(),
            "--state-dir".to_owned(),
            self.state_dir.display().to_string(),
            "--log-format".to_owned(),
            "json".to_owned(),
            "--log-level".to_owned(),
            self.log_level.clone(),
        ];
        a.extend(self.wiring.driver_args());
        a.extend(self.extra_args.iter().cloned());
        a
    }
}

/// Extracts the endpoint from the driver's `serving CSI` JSON log line.
fn serving_endpoint(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let msg = v
        .get("message")
        .or_else(|| v.get("fields").and_then(|f| f.get("message")))?;
    if msg != "serving CSI" {
        return None;
    }
    let ep = v
        .get("endpoint")
        .or_else(|| v.get("fields").and_then(|f| f.get("endpoint")))?;
    ep.as_str().map(str::to_owned)
}

/// A running `wincsi-node`.
#[derive(Debug)]
pub struct DriverProcess {
    child: Child,
    endpoint: String,
    log: OutputLog,
    opts: DriverOptions,
}

impl DriverProcess {
    /// Starts the driver and returns once it logged `serving CSI` (its endpoint is bound then).
    pub async fn start(bin: &Path, opts: &DriverOptions) -> Result<DriverProcess> {
        crate::platform::prepare_endpoint(&opts.endpoint)?;
        let mut child = spawn(bin, "wincsi-node", &opts.args(), &opts.env)?;
        let log = OutputLog::default();
        drop(
            log.capture(piped(child.stdout.take(), "wincsi-node", "stdout")?, |_| {
                None::<()>
            }),
        );
        let ready = log.capture(
            piped(child.stderr.take(), "wincsi-node", "stderr")?,
            serving_endpoint,
        );
        let endpoint = wait_ready("wincsi-node", ready, &mut child, &log).await?;
        Ok(DriverProcess {
            child,
            endpoint,
            log,
            opts: opts.clone(),
        })
    }

    /// The endpoint the driver serves on (with the real port for `tcp://...:0`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The options it was started with.
    pub fn options(&self) -> &DriverOptions {
        &self.opts
    }

    /// Everything the driver logged (JSON lines).
    pub fn log(&self) -> &OutputLog {
        &self.log
    }

    /// Kills the driver abruptly (SIGKILL / TerminateProcess: no shutdown handler runs, like a crash or an
    /// OOM kill) and waits for it to exit. Returns its log.
    pub async fn kill(mut self) -> OutputLog {
        let _ = self.child.kill().await;
        self.log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_line_is_recognised_flat_and_nested() {
        let flat = r#"{"timestamp":"t","level":"INFO","message":"serving CSI","endpoint":"tcp://127.0.0.1:5000"}"#;
        assert_eq!(
            serving_endpoint(flat).as_deref(),
            Some("tcp://127.0.0.1:5000")
        );
        let nested = r#"{"fields":{"message":"serving CSI","endpoint":"unix:///x/csi.sock"}}"#;
        assert_eq!(
            serving_endpoint(nested).as_deref(),
            Some("unix:///x/csi.sock")
        );
        assert_eq!(serving_endpoint(r#"{"message":"stopped"}"#), None);
        assert_eq!(serving_endpoint("serving CSI"), None);
    }
}
