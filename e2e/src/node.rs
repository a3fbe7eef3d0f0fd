//! [`TestNode`]: one simulated Windows node — the simulator and the driver as separate processes, and kubelet
//! talking CSI to the driver — with the checks every scenario ends with.

use std::path::{Path, PathBuf};

use sim::Scenario;
use sim::admin::AdminClient;
use tempfile::TempDir;

use crate::error::{Error, Result};
use crate::kubelet::{CsiConn, Kubelet};
use crate::process::{Binaries, DriverOptions, DriverProcess, ProxyWiring, SimProcess};

/// The driver's `--disk-settle-time` on these nodes: 3 s instead of the production 15 s, still three times the
/// simulated host's default arrival (a volume 500 ms after its cause, the storage cache 500 ms later), so every
/// settle the driver waits out still sees what arrives; only the idle tail is shorter (a raw LUN's stage took ~18 s).
pub(crate) const E2E_DISK_SETTLE: &str = "3s";

/// A node under test. Dropping it kills both processes (`kill_on_drop`) and removes its temporary directory.
#[derive(Debug)]
pub struct TestNode {
    bins: Binaries,
    sim: SimProcess,
    driver: Option<DriverProcess>,
    driver_opts: DriverOptions,
    conn: CsiConn,
    kubelet: Kubelet,
    /// Logs of driver processes that were killed or restarted (for secret scans and failure reports).
    old_driver_logs: Vec<String>,
    dir: TempDir,
}

impl TestNode {
    /// Starts the simulator with `scenario` and the driver with the default options for this OS.
    pub async fn start(bins: &Binaries, scenario: &Scenario) -> Result<TestNode> {
        Self::start_with(bins, scenario, |_| {}).await
    }

    /// Like [`TestNode::start`], letting `customise` adjust the driver's options first.
    pub async fn start_with(
        bins: &Binaries,
        scenario: &Scenario,
        customise: impl FnOnce(&mut DriverOptions),
    ) -> Result<TestNode> {
        Self::start_on(bins, scenario, false, customise).await
    }

    /// The driver on the native backend (`--host-backend native`, a test build's `--test-windows-socket`) driving
    /// the simulator's Windows view over a Unix socket (`wincsi-sim --windows-socket`): the real binary's native
    /// backend, off Windows. Unix only.
    pub async fn start_native(bins: &Binaries, scenario: &Scenario) -> Result<TestNode> {
        Self::start_on(bins, scenario, true, |_| {}).await
    }

    /// [`TestNode::start_native`] with the driver's options customised (e.g. extra flags).
    pub async fn start_native_with(
        bins: &Binaries,
        scenario: &Scenario,
        customise: impl FnOnce(&mut DriverOptions),
    ) -> Result<TestNode> {
        Self::start_on(bins, scenario, true, customise).await
    }

    async fn start_on(
        bins: &Binaries,
        scenario: &Scenario,
        native: bool,
        customise: impl FnOnce(&mut DriverOptions),
    ) -> Result<TestNode> {
        let dir = tempfile::Builder::new()
            .prefix("wincsi-e2e-")
            .tempdir()
            .map_err(Error::io("creating the node's temporary directory"))?;
        let wiring = ProxyWiring::for_this_os(dir.path());
        let windows = format!("unix:{}", dir.path().join("windows.sock").display());
        let sim_args = if native {
            vec!["--windows-socket".to_owned(), windows.clone()]
        } else {
            Vec::new()
        };
        let sim = SimProcess::start_with(
            &bins.sim,
            scenario,
            &dir.path().join("host"),
            &wiring,
            &sim_args,
        )
        .await?;
        let mut driver_opts = DriverOptions::new(dir.path(), wiring);
        driver_opts
            .extra_args
            .extend(["--disk-settle-time".to_owned(), E2E_DISK_SETTLE.to_owned()]);
        if native {
            driver_opts.extra_args.extend([
                "--host-backend".to_owned(),
                "native".to_owned(),
                "--test-windows-socket".to_owned(),
                windows,
            ]);
        }
        customise(&mut driver_opts);
        let driver = DriverProcess::start(&bins.node, &driver_opts).await?;
        let conn = CsiConn::connect(driver.endpoint())?;
        let kubelet = Kubelet::new(conn.clone(), &driver_opts.driver_name);
        Ok(TestNode {
            bins: bins.clone(),
            sim,
            driver: Some(driver),
            driver_opts,
            conn,
            kubelet,
            old_driver_logs: Vec::new(),
            dir,
        })
    }

    /// The simulator's admin client.
    pub fn host(&self) -> &AdminClient {
        self.sim.admin()
    }

    /// The simulator process.
    pub fn sim(&self) -> &SimProcess {
        &self.sim
    }

    /// kubelet.
    pub fn kubelet(&self) -> &Kubelet {
        &self.kubelet
    }

    /// The CSI connection to the driver.
    pub fn csi(&self) -> &CsiConn {
        &self.conn
    }

    /// The running driver (`None` between [`TestNode::kill_driver`] and [`TestNode::start_driver`]).
    pub fn driver(&self) -> Option<&DriverProcess> {
        self.driver.as_ref()
    }

    /// The driver's options.
    pub fn driver_options(&self) -> &DriverOptions {
        &self.driver_opts
    }

    /// The node's temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The local directory standing for the simulated host's `C:\` (its sandbox), for kubelet's files and a pod's
    /// data in the external mode ([`crate::LocalFiles::with_drive_c`]).
    pub fn drive_c(&self) -> std::path::PathBuf {
        self.dir.path().join("host").join("sandbox").join("c")
    }

    /// Kills the driver abruptly (no shutdown handler runs).
    pub async fn kill_driver(&mut self) {
        if let Some(d) = self.driver.take() {
            let log = d.kill().await;
            self.old_driver_logs.push(log.text());
        }
    }

    /// Starts the driver again with the same options (it reconciles its state on start) and points kubelet's
    /// connection at it.
    pub async fn start_driver(&mut self) -> Result<()> {
        self.kill_driver().await;
        let d = DriverProcess::start(&self.bins.node, &self.driver_opts).await?;
        self.conn.replace(d.endpoint())?;
        self.driver = Some(d);
        Ok(())
    }

    /// Kill + start: a crash and the DaemonSet bringing the pod back.
    pub async fn restart_driver(&mut self) -> Result<()> {
        self.start_driver().await
    }

    /// A node reboot: the host reboots (SMB mappings go Disconnected, iSCSI sessions drop), the driver process
    /// restarts (and reconciles), and kubelet restarts with empty books so it re-stages and re-publishes.
    pub async fn reboot(&mut self) -> Result<()> {
        self.kill_driver().await;
        self.host().reboot().await?;
        self.start_driver().await?;
        self.kubelet.restart();
        Ok(())
    }

    /// Every driver log line so far, across restarts (JSON lines).
    pub fn driver_logs(&self) -> String {
        let mut all = self.old_driver_logs.join("\n");
        if let Some(d) = &self.driver {
            all.push('\n');
            all.push_str(&d.log().text());
        }
        all
    }

    /// The driver's state records still on disk (relative paths of every file under `--state-dir` but the node's SMB
    /// credential fingerprint key).
    pub fn state_records(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let root = &self.driver_opts.state_dir;
        if root.exists() {
            walk(root, root, &mut out)?;
        }
        // The node's SMB credential fingerprint key is kept for the node's life by design (`driver/src/smb/rotate.rs`),
        // not a record of a volume.
        out.retain(|p| p.as_os_str() != "smb-credential-key");
        Ok(out)
    }

    /// The simulator's invariants: no data-loss event ever (always required).
    pub async fn check_no_data_loss(&self) -> Result<()> {
        let report = self.host().invariants().await?;
        if report.data_loss.is_empty() {
            Ok(())
        } else {
            Err(Error::NotClean(format!(
                "data-loss events: {:#?}",
                report.data_loss
            )))
        }
    }

    /// The full end-of-scenario check, once every volume is torn down: no data loss, and no SMB mapping, iSCSI
    /// session, mount point, link or driver state record left.
    pub async fn check_clean(&self) -> Result<()> {
        let report = self.host().invariants().await?;
        let records = self.state_records()?;
        if report.ok() && records.is_empty() {
            return Ok(());
        }
        let mut msg = String::new();
        for e in &report.data_loss {
            msg.push_str(&format!("  data loss: {e:?}\n"));
        }
        for l in &report.leftovers {
            msg.push_str(&format!("  left on the host: {l}\n"));
        }
        for r in &records {
            msg.push_str(&format!("  driver state record left: {}\n", r.display()));
        }
        Err(Error::NotClean(msg))
    }

    /// Asserts that no secret value appears in any driver log line or in the simulator's output.
    pub fn check_no_secret_in_logs(&self, secrets: &[&str]) -> Result<()> {
        let logs = format!("{}\n{}", self.driver_logs(), self.sim.log().text());
        for s in secrets {
            if logs.contains(s) {
                return Err(Error::Check(format!(
                    "a secret value (length {}) appears in the logs",
                    s.len()
                )));
            }
        }
        Ok(())
    }

    /// Stops both processes.
    pub async fn shutdown(mut self) {
        self.kill_driver().await;
        self.sim.stop().await;
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(Error::io(format!("listing {}", dir.display())))?;
    for e in entries {
        let e = e.map_err(Error::io(format!("listing {}", dir.display())))?;
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out)?;
        } else {
            out.push(p.strip_prefix(root).unwrap_or(&p).to_path_buf());
        }
    }
    Ok(())
}
