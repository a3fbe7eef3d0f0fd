//! The admin interface of a running `wincsi-sim`: newline-delimited JSON requests and responses over a Unix
//! socket (`unix:<path>`, default `<socket-dir>/admin.sock`) or loopback TCP (`tcp:127.0.0.1:<port>`, the
//! default when serving named pipes, since Wine has no AF_UNIX).
//!
//! Each request is one JSON object on one line with an `op` field (see [`Request`]); each response is one line
//! `{"ok":true,"result":...}` or `{"ok":false,"error":"..."}`. [`AdminClient`] wraps the protocol.

mod client;
#[cfg(unix)]
#[path = "unix.rs"]
mod platform;
#[cfg(windows)]
#[path = "windows.rs"]
mod platform;
mod server;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use client::AdminClient;
pub use server::{AdminServer, serve_admin};

use crate::error::Error;
use crate::host::Fault;
use crate::profile::{CsiProxyVersion, HostBehaviour};
use crate::scenario::{DiskSpec, Scenario, ServiceStatus, StartType, TargetChap, TargetSpec};
use crate::secret::Secret;

/// Where the admin interface listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminAddr {
    /// A Unix socket path.
    Unix(PathBuf),
    /// A loopback TCP address (port 0 = pick a free port when binding).
    Tcp(SocketAddr),
}

impl fmt::Display for AdminAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            AdminAddr::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

impl FromStr for AdminAddr {
    type Err = Error;

    /// Parses `unix:<path>` or `tcp:<loopback ip>:<port>`.
    fn from_str(s: &str) -> Result<Self, Error> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(AdminAddr::Unix(PathBuf::from(p)));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            let addr: SocketAddr = a
                .parse()
                .map_err(|e| Error::Admin(format!("bad admin address {s:?}: {e}")))?;
            if !addr.ip().is_loopback() {
                return Err(Error::Admin(format!(
                    "admin address {s:?} must be a loopback address"
                )));
            }
            return Ok(AdminAddr::Tcp(addr));
        }
        Err(Error::Admin(format!(
            "admin address {s:?} must start with unix: or tcp:"
        )))
    }
}

/// The single JSON line `wincsi-sim` prints on stdout once every endpoint and the admin interface are bound.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyLine {
    /// Always `true`.
    pub ready: bool,
    /// Socket paths or pipe names, in `ApiGroup::ALL` order (disk, volume, filesystem, smb, iscsi, system).
    pub endpoints: Vec<String>,
    /// Admin address (`unix:...` or `tcp:...`), parse with [`ReadyLine::admin_addr`].
    pub admin: String,
    /// Sandbox root.
    pub root: PathBuf,
    /// The Windows view's address (`--windows-socket`), when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<String>,
}

impl ReadyLine {
    /// Parses the ready line.
    pub fn parse(line: &str) -> Result<ReadyLine, Error> {
        let r: ReadyLine = serde_json::from_str(line.trim())
            .map_err(|e| Error::Admin(format!("bad ready line {line:?}: {e}")))?;
        if !r.ready {
            return Err(Error::Admin(format!("not a ready line: {line:?}")));
        }
        Ok(r)
    }

    /// The admin address.
    pub fn admin_addr(&self) -> Result<AdminAddr, Error> {
        self.admin.parse()
    }
}

/// An admin request (`{"op": "<snake_case name>", ...fields}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Liveness check; result `"pong"`.
    Ping,
    /// Full state snapshot (no secrets).
    State,
    /// Audit entries with `seq > since`.
    Audit {
        /// Only entries after this sequence number.
        #[serde(default)]
        since: u64,
    },
    /// Clears the audit log.
    ClearAudit,
    /// Calls per RPC so far.
    CallCounts,
    /// Host processes csi-proxy started so far, by RPC (`{rpc: {powershell, wmic}}`).
    HostProcesses,
    /// Adds a fault (`rpc`, `nth`, `times`, `message`).
    InjectFault(Fault),
    /// Sets latency for an RPC (`*` = all); 0 removes it.
    SetLatency {
        /// RPC name or `*`.
        rpc: String,
        /// Latency in milliseconds.
        millis: u64,
    },
    /// Hangs the `nth` next call of `rpc`.
    Hang {
        /// RPC name or `*`.
        rpc: String,
        /// Which call (1 = next).
        #[serde(default = "one")]
        nth: u64,
    },
    /// Releases every hung call.
    ReleaseHangs,
    /// Waits until at least `count` calls are hung.
    WaitHung {
        /// Number of hung calls to wait for.
        #[serde(default = "one")]
        count: u64,
    },
    /// Removes all faults, hangs and latencies.
    ClearFaults,
    /// Reboots the simulated node.
    Reboot,
    /// Runs both invariant checks; result is an [`crate::InvariantReport`].
    Invariants,
    /// Data-loss events so far.
    DataLoss,
    /// Replaces the host with a new scenario.
    LoadScenario {
        /// The scenario.
        scenario: Box<Scenario>,
    },
    /// Changes an SMB account's password on its server.
    SetSmbPassword {
        /// Server name.
        server: String,
        /// User name.
        user: String,
        /// New password.
        password: Secret,
    },
    /// Makes an SMB server (un)reachable.
    SetSmbReachable {
        /// Server name.
        server: String,
        /// Reachable or not.
        reachable: bool,
    },
    /// Changes a disk's size (e.g. LUN expanded on the storage side).
    SetDiskSize {
        /// Disk id.
        disk_id: String,
        /// New size in bytes.
        size: u64,
    },
    /// Writes a text file through the host's filesystem view (follows links and mount points).
    WriteFile {
        /// Windows path.
        path: String,
        /// Content.
        content: String,
    },
    /// Reads a text file through the host's filesystem view.
    ReadFile {
        /// Windows path.
        path: String,
    },
    /// What another process on the node (kubelet) sees with `os.Lstat`: `null` (nothing), `"link"` (a symlink or
    /// mount point), `"directory"` or `"file"`.
    Lstat {
        /// Windows path.
        path: String,
    },
    /// `os.MkdirAll` as another process on the node (kubelet) does it: not a csi-proxy call, never audited.
    Mkdir {
        /// Windows path.
        path: String,
    },
    /// `os.Remove` as another process on the node (kubelet) does it: a file, an empty directory or a link (never its
    /// target); not a csi-proxy call, never audited.
    Remove {
        /// Windows path.
        path: String,
    },
    /// Reads a link's target (Windows spelling; `null` if not a link).
    ReadLink {
        /// Windows path.
        path: String,
    },
    /// Writes a file directly on a share's storage.
    WriteShareFile {
        /// Server.
        server: String,
        /// Share.
        share: String,
        /// Relative path on the share.
        path: String,
        /// Content.
        content: String,
    },
    /// Reads a file directly from a share's storage.
    ReadShareFile {
        /// Server.
        server: String,
        /// Share.
        share: String,
        /// Relative path on the share.
        path: String,
    },
    /// Plays another csi-proxy release from the next call on.
    SetCsiProxyVersion {
        /// `v1.1.3`, `v1.2.1`, `v1.3.0` or `master`.
        version: CsiProxyVersion,
    },
    /// The release played and the csi-proxy process's state (a [`CsiProxyStatus`]).
    CsiProxyStatus,
    /// Kills csi-proxy: every pipe drops until `restart_csi_proxy`.
    CrashCsiProxy {
        /// Why (logged and reported by `csi_proxy_status`).
        #[serde(default)]
        reason: Option<String>,
    },
    /// Starts csi-proxy again (or restarts it: its connections drop).
    RestartCsiProxy,
    /// Replaces the configurable host behaviours (a full [`HostBehaviour`]; absent fields take their defaults).
    SetHostBehaviour {
        /// The behaviours.
        behaviour: HostBehaviour,
    },
    /// Sets a LUN disk's arrival delays (after a login; `Rescan` ends them).
    SetArrivalDelay {
        /// Disk id.
        disk_id: String,
        /// Milliseconds until the disk is visible.
        millis: u64,
        /// Further milliseconds until its partitions and volumes are visible.
        #[serde(default)]
        volume_millis: u64,
    },
    /// Makes every pending disk and volume arrival complete now (as a `Rescan` would, without an audit entry).
    CompleteArrivals,
    /// Replaces the disk behind a target's LUN; result: the new disk id.
    ReplaceLun {
        /// Target IQN.
        iqn: String,
        /// LUN number.
        lun: u32,
        /// The new disk (its `number` is ignored).
        disk: Box<DiskSpec>,
    },
    /// The array creates a target (with its LUNs) behind an existing portal after start (one target per volume);
    /// Windows' discovery cache of the portal does not list it until refreshed (row `discovery_refresh`). Result:
    /// the new LUN disks' ids.
    AddTarget {
        /// Portal address.
        address: String,
        /// Portal port.
        #[serde(default = "iscsi_port")]
        port: u32,
        /// The target.
        target: Box<TargetSpec>,
    },
    /// Changes what a target requires for login (existing sessions notice at their next recovery).
    SetTargetChap {
        /// Target IQN.
        iqn: String,
        /// The new authentication.
        chap: TargetChap,
    },
    /// iSCSI session recovery: sessions (of `iqn`, or all) log in again with their credentials and the node's
    /// current mutual CHAP secret; failures drop the session. Result: `[SessionRecovery]`.
    RecoverIscsiSessions {
        /// Only this target's sessions.
        #[serde(default)]
        iqn: Option<String>,
    },
    /// A path's loss: the sessions of target `iqn` through portal `address` end (an MPIO disk stays while another
    /// path lives). Result: how many ended.
    DropIscsiPath {
        /// Target IQN.
        iqn: String,
        /// Portal address.
        address: String,
    },
    /// An operator's `Update-IscsiTargetPortal`: SendTargets through the added portal, so targets the array created
    /// since appear in its discovery cache.
    RefreshDiscovery {
        /// Portal address.
        address: String,
        /// Portal port.
        #[serde(default = "iscsi_port")]
        port: u32,
    },
    /// An administrator's `Set-Service`: a service's start type and status (declared when the scenario did not).
    SetService {
        /// Service name (e.g. `defragsvc`).
        name: String,
        /// Start type.
        start_type: StartType,
        /// Status.
        status: ServiceStatus,
    },
}

/// Result of the `csi_proxy_status` admin op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsiProxyStatus {
    /// The release being played.
    pub version: CsiProxyVersion,
    /// The process's state.
    #[serde(flatten)]
    pub process: crate::host::ProxyStatus,
}

fn iscsi_port() -> u32 {
    3260
}

fn one() -> u64 {
    1
}

/// An admin response line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The result (`null` when there is none).
    #[serde(default)]
    pub result: serde_json::Value,
    /// The error message when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::SimHost;
    use crate::state::HostOptions;

    #[test]
    fn ready_line_round_trips() {
        let r = ReadyLine {
            ready: true,
            endpoints: vec!["/s/csi-proxy-disk-v1.sock".into()],
            admin: "unix:/s/admin.sock".into(),
            root: "/s/sandbox".into(),
            windows: None,
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(ReadyLine::parse(&line).unwrap(), r);
        assert_eq!(
            r.admin_addr().unwrap(),
            AdminAddr::Unix("/s/admin.sock".into())
        );
        assert!(ReadyLine::parse("hello").is_err());
    }

    #[test]
    fn addresses_parse_and_must_be_loopback() {
        assert_eq!(
            "unix:/tmp/a.sock".parse::<AdminAddr>().unwrap(),
            AdminAddr::Unix("/tmp/a.sock".into())
        );
        let tcp: AdminAddr = "tcp:127.0.0.1:0".parse().unwrap();
        assert_eq!(tcp.to_string(), "tcp:127.0.0.1:0");
        assert!("tcp:0.0.0.0:1".parse::<AdminAddr>().is_err());
        assert!("tcp:[::1]:1".parse::<AdminAddr>().is_ok());
        assert!("http://x".parse::<AdminAddr>().is_err());
    }

    #[test]
    fn requests_use_op_tags_and_hide_secrets_in_debug() {
        let r: Request = serde_json::from_str(
            r#"{"op":"set_smb_password","server":"s","user":"u","password":"pw-secret"}"#,
        )
        .unwrap();
        assert!(!format!("{r:?}").contains("pw-secret"));
        let f: Request =
            serde_json::from_str(r#"{"op":"inject_fault","rpc":"Mkdir","message":"x"}"#).unwrap();
        match f {
            Request::InjectFault(f) => assert_eq!((f.nth, f.times), (1, 1)),
            other => panic!("{other:?}"),
        }
        assert!(
            serde_json::from_str::<Request>(r#"{"op":"audit","sinc":1}"#).is_err(),
            "typos are rejected"
        );
    }

    #[tokio::test]
    async fn client_and_server_over_loopback_tcp() {
        let dir = tempfile::tempdir().unwrap();
        let host = SimHost::new(&Scenario::default(), dir.path(), HostOptions::default()).unwrap();
        let server = serve_admin(host.clone(), &"tcp:127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = AdminClient::connect(server.addr()).await.unwrap();
        client.ping().await.unwrap();
        client.fail_nth("Mkdir", 1, "x").await.unwrap();
        let err = client.hang("Nope", 1).await.unwrap_err();
        assert!(err.to_string().contains("unknown RPC"));
        client
            .write_file(r"C:\var\lib\kubelet\f.txt", "hi")
            .await
            .unwrap();
        // kubelet's own file operations: not csi-proxy calls (the audit stays empty).
        let dir = r"C:\var\lib\kubelet\plugins\p\globalmount";
        assert_eq!(client.lstat(dir).await.unwrap(), None);
        client.mkdir(dir).await.unwrap();
        assert_eq!(
            client.lstat(dir).await.unwrap().as_deref(),
            Some("directory")
        );
        assert_eq!(
            client
                .lstat(r"C:\var\lib\kubelet\f.txt")
                .await
                .unwrap()
                .as_deref(),
            Some("file")
        );
        assert!(
            client
                .remove(r"C:\var\lib\kubelet\plugins\p")
                .await
                .is_err(),
            "not empty"
        );
        client.remove(dir).await.unwrap();
        assert_eq!(client.lstat(dir).await.unwrap(), None);
        assert_eq!(
            client.read_file(r"C:\var\lib\kubelet\f.txt").await.unwrap(),
            "hi"
        );
        assert_eq!(
            client.read_link(r"C:\var\lib\kubelet\f.txt").await.unwrap(),
            None
        );
        assert!(client.invariants().await.unwrap().ok());
        assert!(client.data_loss().await.unwrap().is_empty());
        assert!(client.audit(0).await.unwrap().is_empty());
        assert!(client.set_disk_size("nope", 1).await.is_err());
        client.reboot().await.unwrap();
        assert_eq!(client.state().await.unwrap()["boots"], 2);
        server.shutdown().await;
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn unix_socket_admin_replaces_stale_sockets_only() {
        let dir = tempfile::tempdir().unwrap();
        let host = SimHost::new(
            &Scenario::default(),
            &dir.path().join("root"),
            HostOptions::default(),
        )
        .unwrap();
        let addr = AdminAddr::Unix(dir.path().join("admin.sock"));
        let first = serve_admin(host.clone(), &addr).await.unwrap();
        first.shutdown().await;
        let second = serve_admin(host.clone(), &addr).await.unwrap();
        AdminClient::connect(&addr)
            .await
            .unwrap()
            .ping()
            .await
            .unwrap();
        second.shutdown().await;
        let file = AdminAddr::Unix(dir.path().join("not-a-socket"));
        std::fs::write(dir.path().join("not-a-socket"), "x").unwrap();
        assert!(serve_admin(host, &file).await.is_err());
    }
}
