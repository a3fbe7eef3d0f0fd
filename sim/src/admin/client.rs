use std::collections::BTreeMap;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::server::{BoxRead, BoxWrite};
use super::{AdminAddr, CsiProxyStatus, Request, Response};
use crate::error::{Error, Result};
use crate::host::{AuditEntry, Fault, InvariantReport};
use crate::profile::{CsiProxyVersion, HostBehaviour};
use crate::scenario::{DiskSpec, Scenario, ServiceStatus, StartType, TargetChap, TargetSpec};
use crate::secret::Secret;
use crate::state::{DataLossEvent, SessionRecovery, Spawned};

/// Async client for a running `wincsi-sim`'s admin interface. One connection, requests serialised.
#[derive(Debug)]
pub struct AdminClient {
    conn: Mutex<Conn>,
}

struct Conn {
    reader: BufReader<BoxRead>,
    writer: BoxWrite,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Conn")
    }
}

fn io_err(addr: &AdminAddr) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Admin(format!("{addr}: {e}"))
}

impl AdminClient {
    /// Connects to `addr` (as printed in the binary's ready line).
    pub async fn connect(addr: &AdminAddr) -> Result<AdminClient> {
        let (r, w): (BoxRead, BoxWrite) = match addr {
            AdminAddr::Tcp(a) => {
                let s = TcpStream::connect(a).await.map_err(io_err(addr))?;
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            AdminAddr::Unix(p) => super::platform::connect_unix(p)
                .await
                .map_err(io_err(addr))?,
        };
        Ok(AdminClient {
            conn: Mutex::new(Conn {
                reader: BufReader::new(r),
                writer: w,
            }),
        })
    }

    /// Sends one request and returns its result (an error if the sim answered `ok: false`).
    pub async fn request(&self, req: &Request) -> Result<serde_json::Value> {
        let mut line = serde_json::to_vec(req).map_err(|e| Error::Admin(e.to_string()))?;
        line.push(b'\n');
        let mut c = self.conn.lock().await;
        c.writer
            .write_all(&line)
            .await
            .map_err(|e| Error::Admin(format!("send: {e}")))?;
        c.writer
            .flush()
            .await
            .map_err(|e| Error::Admin(format!("send: {e}")))?;
        let mut resp = String::new();
        let n = c
            .reader
            .read_line(&mut resp)
            .await
            .map_err(|e| Error::Admin(format!("receive: {e}")))?;
        if n == 0 {
            return Err(Error::Admin("connection closed by the simulator".into()));
        }
        let r: Response =
            serde_json::from_str(&resp).map_err(|e| Error::Admin(format!("bad response: {e}")))?;
        if r.ok {
            Ok(r.result)
        } else {
            Err(Error::Admin(
                r.error.unwrap_or_else(|| "unknown error".into()),
            ))
        }
    }

    async fn typed<T: DeserializeOwned>(&self, req: &Request) -> Result<T> {
        let v = self.request(req).await?;
        serde_json::from_value(v).map_err(|e| Error::Admin(format!("bad result: {e}")))
    }

    async fn unit(&self, req: &Request) -> Result<()> {
        self.request(req).await.map(|_| ())
    }

    /// Liveness check.
    pub async fn ping(&self) -> Result<()> {
        self.unit(&Request::Ping).await
    }

    /// Full state snapshot.
    pub async fn state(&self) -> Result<serde_json::Value> {
        self.request(&Request::State).await
    }

    /// Audit entries with `seq > since`.
    pub async fn audit(&self, since: u64) -> Result<Vec<AuditEntry>> {
        self.typed(&Request::Audit { since }).await
    }

    /// Clears the audit log.
    pub async fn clear_audit(&self) -> Result<()> {
        self.unit(&Request::ClearAudit).await
    }

    /// Calls per RPC.
    pub async fn call_counts(&self) -> Result<BTreeMap<String, u64>> {
        self.typed(&Request::CallCounts).await
    }

    /// Host processes csi-proxy started so far, by RPC (RPCs that started none are absent).
    pub async fn host_processes(&self) -> Result<BTreeMap<String, Spawned>> {
        self.typed(&Request::HostProcesses).await
    }

    /// Adds a fault.
    pub async fn inject_fault(&self, fault: Fault) -> Result<()> {
        self.unit(&Request::InjectFault(fault)).await
    }

    /// Fails the `nth` next call of `rpc` once with `message`.
    pub async fn fail_nth(&self, rpc: &str, nth: u64, message: &str) -> Result<()> {
        self.inject_fault(Fault {
            rpc: rpc.into(),
            nth,
            times: 1,
            message: message.into(),
        })
        .await
    }

    /// Sets per-RPC latency (`*` = all; zero removes it).
    pub async fn set_latency(&self, rpc: &str, latency: Duration) -> Result<()> {
        self.unit(&Request::SetLatency {
            rpc: rpc.into(),
            millis: latency.as_millis() as u64,
        })
        .await
    }

    /// Hangs the `nth` next call of `rpc`.
    pub async fn hang(&self, rpc: &str, nth: u64) -> Result<()> {
        self.unit(&Request::Hang {
            rpc: rpc.into(),
            nth,
        })
        .await
    }

    /// Releases every hung call.
    pub async fn release_hangs(&self) -> Result<()> {
        self.unit(&Request::ReleaseHangs).await
    }

    /// Waits until at least `count` calls are hung.
    pub async fn wait_hung(&self, count: u64) -> Result<u64> {
        self.typed(&Request::WaitHung { count }).await
    }

    /// Removes all faults, hangs and latencies.
    pub async fn clear_faults(&self) -> Result<()> {
        self.unit(&Request::ClearFaults).await
    }

    /// Reboots the simulated node.
    pub async fn reboot(&self) -> Result<()> {
        self.unit(&Request::Reboot).await
    }

    /// Both invariant checks.
    pub async fn invariants(&self) -> Result<InvariantReport> {
        self.typed(&Request::Invariants).await
    }

    /// Data-loss events.
    pub async fn data_loss(&self) -> Result<Vec<DataLossEvent>> {
        self.typed(&Request::DataLoss).await
    }

    /// Replaces the host with a new scenario.
    pub async fn load_scenario(&self, scenario: &Scenario) -> Result<()> {
        self.unit(&Request::LoadScenario {
            scenario: Box::new(scenario.clone()),
        })
        .await
    }

    /// Changes an SMB account's password.
    pub async fn set_smb_password(&self, server: &str, user: &str, password: &str) -> Result<()> {
        let req = Request::SetSmbPassword {
            server: server.into(),
            user: user.into(),
            password: Secret::new(password),
        };
        self.unit(&req).await
    }

    /// Makes an SMB server (un)reachable.
    pub async fn set_smb_reachable(&self, server: &str, reachable: bool) -> Result<()> {
        self.unit(&Request::SetSmbReachable {
            server: server.into(),
            reachable,
        })
        .await
    }

    /// Changes a disk's size.
    pub async fn set_disk_size(&self, disk_id: &str, size: u64) -> Result<()> {
        self.unit(&Request::SetDiskSize {
            disk_id: disk_id.into(),
            size,
        })
        .await
    }

    /// Writes a text file through the host's filesystem view.
    pub async fn write_file(&self, path: &str, content: &str) -> Result<()> {
        self.unit(&Request::WriteFile {
            path: path.into(),
            content: content.into(),
        })
        .await
    }

    /// Reads a text file through the host's filesystem view.
    pub async fn read_file(&self, path: &str) -> Result<String> {
        self.typed(&Request::ReadFile { path: path.into() }).await
    }

    /// What `os.Lstat` sees at `path`: `None` (nothing), `"link"`, `"directory"` or `"file"`.
    pub async fn lstat(&self, path: &str) -> Result<Option<String>> {
        self.typed(&Request::Lstat { path: path.into() }).await
    }

    /// `os.MkdirAll` as kubelet does it (not a csi-proxy call).
    pub async fn mkdir(&self, path: &str) -> Result<()> {
        self.unit(&Request::Mkdir { path: path.into() }).await
    }

    /// `os.Remove` as kubelet does it (not a csi-proxy call).
    pub async fn remove(&self, path: &str) -> Result<()> {
        self.unit(&Request::Remove { path: path.into() }).await
    }

    /// A link's target in Windows spelling (`None` if not a link).
    pub async fn read_link(&self, path: &str) -> Result<Option<String>> {
        self.typed(&Request::ReadLink { path: path.into() }).await
    }

    /// Writes a file directly on a share.
    pub async fn write_share_file(
        &self,
        server: &str,
        share: &str,
        path: &str,
        content: &str,
    ) -> Result<()> {
        let req = Request::WriteShareFile {
            server: server.into(),
            share: share.into(),
            path: path.into(),
            content: content.into(),
        };
        self.unit(&req).await
    }

    /// Reads a file directly from a share.
    pub async fn read_share_file(&self, server: &str, share: &str, path: &str) -> Result<String> {
        self.typed(&Request::ReadShareFile {
            server: server.into(),
            share: share.into(),
            path: path.into(),
        })
        .await
    }

    /// Plays another csi-proxy release from the next call on.
    pub async fn set_csi_proxy_version(&self, version: CsiProxyVersion) -> Result<()> {
        self.unit(&Request::SetCsiProxyVersion { version }).await
    }

    /// The release played and the csi-proxy process's state.
    pub async fn csi_proxy_status(&self) -> Result<CsiProxyStatus> {
        self.typed(&Request::CsiProxyStatus).await
    }

    /// Kills csi-proxy (every pipe drops until [`AdminClient::restart_csi_proxy`]).
    pub async fn crash_csi_proxy(&self, reason: &str) -> Result<()> {
        self.unit(&Request::CrashCsiProxy {
            reason: Some(reason.into()),
        })
        .await
    }

    /// Starts csi-proxy again (or restarts it).
    pub async fn restart_csi_proxy(&self) -> Result<()> {
        self.unit(&Request::RestartCsiProxy).await
    }

    /// Replaces the configurable host behaviours.
    pub async fn set_host_behaviour(&self, behaviour: HostBehaviour) -> Result<()> {
        self.unit(&Request::SetHostBehaviour { behaviour }).await
    }

    /// Sets a LUN disk's arrival delays.
    pub async fn set_arrival_delay(
        &self,
        disk_id: &str,
        delay: Duration,
        volume_delay: Duration,
    ) -> Result<()> {
        self.unit(&Request::SetArrivalDelay {
            disk_id: disk_id.into(),
            millis: delay.as_millis() as u64,
            volume_millis: volume_delay.as_millis() as u64,
        })
        .await
    }

    /// Completes every pending disk and volume arrival now.
    pub async fn complete_arrivals(&self) -> Result<()> {
        self.unit(&Request::CompleteArrivals).await
    }

    /// Replaces the disk behind a target's LUN; returns the new disk id.
    pub async fn replace_lun(&self, iqn: &str, lun: u32, disk: &DiskSpec) -> Result<String> {
        self.typed(&Request::ReplaceLun {
            iqn: iqn.into(),
            lun,
            disk: Box::new(disk.clone()),
        })
        .await
    }

    /// The array creates `target` behind the portal `address:port` (not yet in Windows' discovery cache); returns
    /// its LUN disks' ids.
    pub async fn add_target(
        &self,
        address: &str,
        port: u32,
        target: &TargetSpec,
    ) -> Result<Vec<String>> {
        self.typed(&Request::AddTarget {
            address: address.into(),
            port,
            target: Box::new(target.clone()),
        })
        .await
    }

    /// Changes what a target requires for login.
    pub async fn set_target_chap(&self, iqn: &str, chap: TargetChap) -> Result<()> {
        self.unit(&Request::SetTargetChap {
            iqn: iqn.into(),
            chap,
        })
        .await
    }

    /// A path's loss: the sessions of `iqn` through portal `address` end; how many did.
    pub async fn drop_iscsi_path(&self, iqn: &str, address: &str) -> Result<usize> {
        self.typed(&Request::DropIscsiPath {
            iqn: iqn.into(),
            address: address.into(),
        })
        .await
    }

    /// An operator's `Update-IscsiTargetPortal` on portal `address:port`.
    pub async fn refresh_discovery(&self, address: &str, port: u32) -> Result<()> {
        self.unit(&Request::RefreshDiscovery {
            address: address.into(),
            port,
        })
        .await
    }

    /// An administrator sets service `name`'s start type and status (`Set-Service`).
    pub async fn set_service(
        &self,
        name: &str,
        start_type: StartType,
        status: ServiceStatus,
    ) -> Result<()> {
        self.unit(&Request::SetService {
            name: name.into(),
            start_type,
            status,
        })
        .await
    }

    /// iSCSI session recovery (of `iqn`, or every session).
    pub async fn recover_iscsi_sessions(&self, iqn: Option<&str>) -> Result<Vec<SessionRecovery>> {
        self.typed(&Request::RecoverIscsiSessions {
            iqn: iqn.map(str::to_string),
        })
        .await
    }
}
