//! The csi-proxy adapter of the host port: [`CsiProxyHost`] implements [`Host`] with `proxy_client`, over Windows
//! named pipes in production or over Unix sockets against the simulated host (`--csi-proxy-socket-dir`).
//!
//! Errors are classified from [`proxy_client::Error::kind`] alone (Windows errors 1219, 53, 67, 1326/86, 5; not found,
//! already exists, not empty, already logged in, access path in use — in every csi-proxy release's wording; pipe
//! missing; unavailable; deadline): the driver matches no csi-proxy text. The message kept for operators is
//! csi-proxy's first line, trimmed — never the whole PowerShell dump, and never a request (so never a password).
//!
//! Deadlines: every call carries the RPC's deadline down to proxy-client (`ProxyClient::with_deadline`), which
//! times the call out there (sending it as `grpc-timeout`; its own per-call timeout, `ProxyClient::with_timeout`, is
//! the upper bound) and, when nothing came back on the group's connection by then, dials a fresh connection for the
//! group's next calls; the lifecycle additionally drops every call at the same deadline.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use proxy_client::{ChapAuth, ErrorKind, ProxyClient, SmbCredentials};

use super::{
    DiskIds, DiskLocation, Host, HostError, HostErrorKind, HostOp, HostPath, HostProbe, HostResult,
    IscsiAuth, Portal, Secret, SmbCredential, UncPath,
};
use crate::locks::Deadline;

/// Where a csi-proxy backend reads the node's uptime ([`Host::uptime`]).
pub type UptimeSource = std::sync::Arc<dyn Fn() -> Option<std::time::Duration> + Send + Sync>;

/// The host port over csi-proxy.
#[derive(Clone)]
pub struct CsiProxyHost {
    client: ProxyClient,
    uptime: UptimeSource,
}

impl std::fmt::Debug for CsiProxyHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsiProxyHost")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl CsiProxyHost {
    /// An adapter over `client`. The node's uptime is read by this process (`winhost::uptime`: csi-proxy has no
    /// call for it, and the container shares the node's kernel).
    pub fn new(client: ProxyClient) -> Self {
        Self {
            client,
            uptime: std::sync::Arc::new(winhost::uptime::node_uptime),
        }
    }

    /// The same adapter reading the node's uptime from `source` (tests: the simulated host's, which reboots).
    pub fn with_uptime(mut self, source: UptimeSource) -> Self {
        self.uptime = source;
        self
    }

    /// The underlying client.
    pub fn client(&self) -> &ProxyClient {
        &self.client
    }

    /// The client for one host call bounded by `deadline`: proxy-client then times the call out there itself (the
    /// same instant the lifecycle drops it), so a deadline with nothing back on the group's connection is known to it
    /// as one and the connection is replaced (`proxy_client`'s connection docs).
    ///
    /// A call that outlives its caller (`Deadline::outliving`: a destructive call run to its end) waits until its own
    /// deadline, past the client's timeout, and its connection is judged at the caller's deadline
    /// (`ProxyClient::running_to`).
    fn at(&self, deadline: Deadline) -> ProxyClient {
        match deadline.caller() {
            Some(caller) => self
                .client
                .with_deadline(caller)
                .running_to(deadline.instant()),
            None => self.client.with_deadline(deadline.instant()),
        }
    }
}

/// The most the operator-facing message keeps of csi-proxy's text.
const MAX_MESSAGE: usize = 300;

/// The first line of csi-proxy's message (PowerShell dumps arrive Go-quoted with `\r\n` escapes), trimmed.
fn first_line(text: &str) -> String {
    let cut = ["\\r\\n", "\r\n", "\n", "+ CategoryInfo"]
        .iter()
        .filter_map(|sep| text.find(sep))
        .min()
        .unwrap_or(text.len());
    let mut line = text[..cut].trim().trim_end_matches(['"', ' ']).to_owned();
    if line.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}

fn to_portal(p: &Portal) -> proxy_client::Portal {
    proxy_client::Portal::new(p.address.clone(), p.port)
}

/// Classify a proxy-client error for the driver: from [`proxy_client::ErrorKind`] alone, which recognises every
/// csi-proxy release's texts (PowerShell cmdlet output, v1.3.0's `Not Found`, master's `not found` and `code=N`), so
/// the driver never matches text itself. The one addition is Windows error 85 by its number (a stale mapping that
/// blocks a new one; no public report shows it, kept for robustness).
pub fn classify(op: HostOp, err: &proxy_client::Error) -> HostError {
    let message = first_line(&err.to_string());
    let kind = match err.kind() {
        ErrorKind::SmbMultipleConnections => HostErrorKind::MultipleConnections,
        ErrorKind::NetworkPathNotFound => HostErrorKind::NetworkPathNotFound,
        ErrorKind::NetworkNameNotFound => HostErrorKind::NetworkNameNotFound,
        ErrorKind::LogonFailure => HostErrorKind::LogonFailure,
        // Only a volume listing's answer speaks of the disk's partitions; elsewhere it is a plain "not found".
        ErrorKind::NoPartition if op == HostOp::ListVolumesOnDisk => HostErrorKind::NoPartition,
        ErrorKind::NotFound | ErrorKind::NoPartition => HostErrorKind::NotFound,
        ErrorKind::AccessDenied => HostErrorKind::AccessDenied,
        ErrorKind::AlreadyExists => HostErrorKind::AlreadyExists,
        ErrorKind::DirectoryNotEmpty => HostErrorKind::NotEmpty,
        ErrorKind::IscsiAlreadyLoggedIn => HostErrorKind::AlreadyLoggedIn,
        ErrorKind::AccessPathInUse => HostErrorKind::AccessPathInUse,
        ErrorKind::SupportedSizeFailed => HostErrorKind::SupportedSizeFailed,
        ErrorKind::IscsiTooManySessions => HostErrorKind::TooManySessions,
        ErrorKind::PipeMissing | ErrorKind::ProxyUnavailable | ErrorKind::Unsupported => {
            HostErrorKind::Unavailable
        }
        ErrorKind::DeadlineExceeded => HostErrorKind::DeadlineExceeded,
        ErrorKind::InvalidArgument => HostErrorKind::InvalidPath,
        _ if err.windows_error_code() == Some(85) => HostErrorKind::StaleMapping,
        _ => HostErrorKind::Other,
    };
    HostError::new(op, kind, message).with_full_text(err.to_string())
}

impl Host for CsiProxyHost {
    fn uptime(&self) -> Option<std::time::Duration> {
        (self.uptime)()
    }

    async fn path_exists(&self, path: &HostPath, deadline: Deadline) -> HostResult<bool> {
        self.at(deadline)
            .filesystem()
            .path_exists(path.as_str())
            .await
            .map_err(|e| classify(HostOp::PathExists, &e))
    }

    async fn mkdir(&self, path: &HostPath, deadline: Deadline) -> HostResult<()> {
        self.at(deadline)
            .filesystem()
            .mkdir(path.as_str())
            .await
            .map_err(|e| classify(HostOp::Mkdir, &e))
    }

    async fn rmdir(&self, path: &HostPath, force: bool, deadline: Deadline) -> HostResult<()> {
        self.at(deadline)
            .filesystem()
            .rmdir(path.as_str(), force)
            .await
            .map_err(|e| classify(HostOp::Rmdir, &e))
    }

    async fn create_symlink(
        &self,
        link: &HostPath,
        points_to: &HostPath,
        deadline: Deadline,
    ) -> HostResult<()> {
        // csi-proxy: CreateSymlink(source_path = what the link points to, target_path = the link).
        self.at(deadline)
            .filesystem()
            .create_symlink(points_to.as_str(), link.as_str())
            .await
            .map_err(|e| classify(HostOp::CreateSymlink, &e))
    }

    async fn is_symlink(&self, path: &HostPath, deadline: Deadline) -> HostResult<bool> {
        self.at(deadline)
            .filesystem()
            .is_symlink(path.as_str())
            .await
            .map_err(|e| classify(HostOp::IsSymlink, &e))
    }

    async fn new_smb_global_mapping(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        credential: Option<&SmbCredential>,
        deadline: Deadline,
    ) -> HostResult<()> {
        let creds = credential
            .map(|c| SmbCredentials::new(c.principal(), c.password().expose()))
            .unwrap_or_default();
        self.at(deadline)
            .smb()
            .new_global_mapping(&remote.to_string(), link.map(HostPath::as_str), &creds)
            .await
            .map_err(|e| classify(HostOp::NewSmbGlobalMapping, &e))
    }

    async fn remove_smb_global_mapping(
        &self,
        remote: &UncPath,
        deadline: Deadline,
    ) -> HostResult<()> {
        self.at(deadline)
            .smb()
            .remove_global_mapping(&remote.root().to_string())
            .await
            .map_err(|e| classify(HostOp::RemoveSmbGlobalMapping, &e))
    }
    async fn list_disk_locations(&self, d: Deadline) -> HostResult<BTreeMap<u32, DiskLocation>> {
        let locs = self
            .at(d)
            .disk()
            .list_disk_locations()
            .await
            .map_err(|e| classify(HostOp::ListDiskLocations, &e))?;
        Ok(locs
            .into_iter()
            .map(|(n, l)| {
                let loc = DiskLocation {
                    adapter: l.adapter,
                    target: l.target,
                    lun: l.lun_id,
                };
                (n, loc)
            })
            .collect())
    }

    async fn list_disk_ids(&self, d: Deadline) -> HostResult<BTreeMap<u32, DiskIds>> {
        let ids = self
            .at(d)
            .disk()
            .list_disk_ids()
            .await
            .map_err(|e| classify(HostOp::ListDiskIDs, &e))?;
        Ok(ids
            .into_iter()
            .map(|(n, i)| {
                let ids = DiskIds {
                    page83: i.page83,
                    serial: i.serial_number,
                };
                (n, ids)
            })
            .collect())
    }

    async fn rescan(&self, d: Deadline) -> HostResult<()> {
        self.at(d)
            .disk()
            .rescan()
            .await
            .map_err(|e| classify(HostOp::Rescan, &e))
    }

    async fn partition_disk(&self, disk: u32, d: Deadline) -> HostResult<()> {
        self.at(d)
            .disk()
            .partition(disk)
            .await
            .map_err(|e| classify(HostOp::PartitionDisk, &e))
    }

    async fn disk_size(&self, disk: u32, d: Deadline) -> HostResult<u64> {
        self.at(d)
            .disk()
            .stats(disk)
            .await
            .map_err(|e| classify(HostOp::GetDiskStats, &e))
    }

    async fn set_disk_online(&self, disk: u32, online: bool, d: Deadline) -> HostResult<()> {
        self.at(d)
            .disk()
            .set_online(disk, online)
            .await
            .map_err(|e| classify(HostOp::SetDiskState, &e))
    }

    async fn is_disk_online(&self, disk: u32, d: Deadline) -> HostResult<bool> {
        self.at(d)
            .disk()
            .is_online(disk)
            .await
            .map_err(|e| classify(HostOp::GetDiskState, &e))
    }

    async fn list_volumes_on_disk(&self, disk: u32, d: Deadline) -> HostResult<Vec<String>> {
        self.at(d)
            .volume()
            .list_on_disk(disk, 0)
            .await
            .map_err(|e| classify(HostOp::ListVolumesOnDisk, &e))
    }

    async fn mount_volume(&self, volume_id: &str, path: &HostPath, d: Deadline) -> HostResult<()> {
        self.at(d)
            .volume()
            .mount(volume_id, path.as_str())
            .await
            .map_err(|e| classify(HostOp::MountVolume, &e))
    }

    async fn unmount_volume(
        &self,
        volume_id: &str,
        path: &HostPath,
        d: Deadline,
    ) -> HostResult<()> {
        self.at(d)
            .volume()
            .unmount(volume_id, path.as_str())
            .await
            .map_err(|e| classify(HostOp::UnmountVolume, &e))
    }

    async fn is_volume_formatted(&self, volume_id: &str, d: Deadline) -> HostResult<bool> {
        self.at(d)
            .volume()
            .is_formatted(volume_id)
            .await
            .map_err(|e| classify(HostOp::IsVolumeFormatted, &e))
    }

    async fn format_volume(&self, volume_id: &str, d: Deadline) -> HostResult<()> {
        self.at(d)
            .volume()
            .format(volume_id)
            .await
            .map_err(|e| classify(HostOp::FormatVolume, &e))
    }

    async fn resize_volume(&self, volume_id: &str, size_bytes: u64, d: Deadline) -> HostResult<()> {
        self.at(d)
            .volume()
            .resize(volume_id, size_bytes)
            .await
            .map_err(|e| classify(HostOp::ResizeVolume, &e))
    }

    async fn volume_stats(&self, volume_id: &str, d: Deadline) -> HostResult<(u64, u64)> {
        self.at(d)
            .volume()
            .stats(volume_id)
            .await
            .map_err(|e| classify(HostOp::GetVolumeStats, &e))
    }

    async fn volume_id_from_target_path(&self, path: &HostPath, d: Deadline) -> HostResult<String> {
        self.at(d)
            .volume()
            .id_from_target_path(path.as_str())
            .await
            .map_err(|e| classify(HostOp::GetVolumeIDFromTargetPath, &e))
    }

    async fn write_volume_cache(&self, volume_id: &str, d: Deadline) -> HostResult<()> {
        self.at(d)
            .volume()
            .write_cache(volume_id)
            .await
            .map_err(|e| classify(HostOp::WriteVolumeCache, &e))
    }

    async fn add_target_portal(&self, portal: &Portal, d: Deadline) -> HostResult<()> {
        self.at(d)
            .iscsi()
            .add_target_portal(&to_portal(portal))
            .await
            .map_err(|e| classify(HostOp::AddTargetPortal, &e))
    }

    async fn remove_target_portal(&self, portal: &Portal, _d: Deadline) -> HostResult<()> {
        self.client
            .iscsi()
            .remove_target_portal(&to_portal(portal))
            .await
            .map_err(|e| classify(HostOp::RemoveTargetPortal, &e))
    }

    async fn discover_target_portal(
        &self,
        portal: &Portal,
        d: Deadline,
    ) -> HostResult<Vec<String>> {
        self.at(d)
            .iscsi()
            .discover_target_portal(&to_portal(portal))
            .await
            .map_err(|e| classify(HostOp::DiscoverTargetPortal, &e))
    }

    async fn connect_target(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        let auth = match auth {
            IscsiAuth::None => ChapAuth::None,
            IscsiAuth::OneWay { username, secret } => ChapAuth::OneWay {
                username: username.clone(),
                secret: secret.clone(),
            },
            IscsiAuth::Mutual { username, secret } => ChapAuth::Mutual {
                username: username.clone(),
                secret: secret.clone(),
            },
        };
        self.at(d)
            .iscsi()
            .connect_target(&to_portal(portal), iqn, &auth)
            .await
            .map_err(|e| classify(HostOp::ConnectTarget, &e))
    }

    async fn disconnect_target(&self, portal: &Portal, iqn: &str, d: Deadline) -> HostResult<()> {
        self.at(d)
            .iscsi()
            .disconnect_target(&to_portal(portal), iqn)
            .await
            .map_err(|e| classify(HostOp::DisconnectTarget, &e))
    }

    async fn get_target_disks(
        &self,
        portal: &Portal,
        iqn: &str,
        d: Deadline,
    ) -> HostResult<Vec<u32>> {
        self.at(d)
            .iscsi()
            .get_target_disks(&to_portal(portal), iqn)
            .await
            .map_err(|e| classify(HostOp::GetTargetDisks, &e))
    }

    async fn set_mutual_chap_secret(&self, secret: &Secret, d: Deadline) -> HostResult<()> {
        self.at(d)
            .iscsi()
            .set_mutual_chap_secret(secret)
            .await
            .map_err(|e| classify(HostOp::SetMutualChapSecret, &e))
    }

    async fn list_target_portals(&self, d: Deadline) -> HostResult<Vec<Portal>> {
        let portals = self
            .at(d)
            .iscsi()
            .list_target_portals()
            .await
            .map_err(|e| classify(HostOp::ListTargetPortals, &e))?;
        Ok(portals
            .into_iter()
            .map(|p| Portal {
                address: p.address,
                port: if p.port == 0 {
                    super::DEFAULT_PORT
                } else {
                    p.port
                },
            })
            .collect())
    }

    async fn disk_number_of_volume(&self, volume_id: &str, d: Deadline) -> HostResult<u32> {
        self.at(d)
            .volume()
            .disk_number(volume_id)
            .await
            .map_err(|e| classify(HostOp::GetDiskNumberFromVolumeID, &e))
    }
}

/// Checks csi-proxy (or the simulated host) with `filesystem.PathExists` of a path the driver owns (its plugin
/// directory `<kubelet-root>\plugins\<driver-name>`, inside csi-proxy's `-kubelet-path`, so its path validation
/// passes).
///
/// Why that call: it is served in csi-proxy's own process on every release (Go's `os.Lstat`, `pkg/os/filesystem/
/// api.go` at v1.1.3, v1.2.1, v1.3.0 and master). The probe it replaces, `system.GetBIOSSerialNumber`, runs
/// `wmic bios get serialnumber` as a new process on v1.1.3 and v1.2.1 (`pkg/os/system/api.go:37`; `wmic` is not
/// installed by default on Windows Server 2025) and took 2.5 s on a cold start against a real server: every
/// readiness check and every CSI `Probe` cost the node a process.
///
/// Any answer from csi-proxy, even an error status (e.g. a path outside its `-kubelet-path`), proves it is
/// reachable; only a missing pipe/socket, a refused or broken connection or a deadline counts as unreachable.
#[derive(Debug, Clone)]
pub struct CsiProxyProbe {
    client: ProxyClient,
    path: HostPath,
}

impl CsiProxyProbe {
    /// Probes through `client` with `PathExists(path)`.
    pub fn new(client: ProxyClient, path: HostPath) -> Self {
        Self { client, path }
    }
}

impl HostProbe for CsiProxyProbe {
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            match self
                .client
                .filesystem()
                .path_exists(self.path.as_str())
                .await
            {
                Ok(_) => Ok(()),
                Err(e) => match e.kind() {
                    ErrorKind::PipeMissing
                    | ErrorKind::ProxyUnavailable
                    | ErrorKind::DeadlineExceeded
                    | ErrorKind::Unsupported => Err(e.to_string()),
                    _ => Ok(()),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(message: &str) -> proxy_client::Error {
        proxy_client::Error::Proxy {
            method: "X",
            code: 2,
            message: message.to_owned(),
        }
    }

    #[test]
    fn csi_proxy_offers_no_capability_beyond_its_primitives() {
        let host = CsiProxyHost::new(ProxyClient::new(proxy_client::Transport::default()));
        assert_eq!(
            host.capabilities(),
            crate::host::HostCapabilities::default()
        );
        assert!(!host.capabilities().discovery_chap && !host.capabilities().list_smb_mappings);
    }

    /// Every failure the driver reacts to, produced by the simulated host playing each csi-proxy release (so each in
    /// that release's exact wording), classified the same way.
    #[test]
    fn every_release_s_texts_are_classified_alike() {
        use sim::state::AuthType;
        use sim::{CsiProxyVersion, HostOptions, Scenario, Secret, SimHost};
        let scenario = Scenario::from_json(
            &serde_json::json!({
                "smb": {"servers": [{"name": "srv",
                    "accounts": [{"user": "bob", "password": "pw-1", "domain": "CORP"},
                                 {"user": "alice", "password": "pw-2", "domain": "CORP"}],
                    "shares": [{"name": "share"}, {"name": "other"}]}]},
                "iscsi": {"portals": [{"address": "10.0.0.5", "targets": [
                    {"iqn": "iqn.2024-01.io.example:t", "luns": [{"lun": 0, "size": 1u64 << 30}]}]}]}
            })
            .to_string(),
        )
        .expect("scenario");
        let kind = |op: HostOp, r: Result<(), sim::Error>| -> Option<HostErrorKind> {
            r.err().map(|e| {
                let err = proxy_client::Error::Proxy {
                    method: "X",
                    code: 2,
                    message: e.to_string(),
                };
                classify(op, &err).kind
            })
        };
        for v in CsiProxyVersion::ALL {
            let dir = tempfile::tempdir().expect("tmp");
            let opts = HostOptions {
                csi_proxy_version: Some(v),
                ..HostOptions::default()
            };
            let host = SimHost::new(&scenario, dir.path(), opts).expect("sim");
            let ps = v.is_powershell();
            let staging = r"C:\var\lib\kubelet\plugins\x\globalmount";
            host.with_state_mut(|s| {
                let bob = Secret::new("pw-1");
                let smb = |s: &mut sim::State, share: &str, user: &str, pw: &str| {
                    s.new_smb_global_mapping(share, "", user, &Secret::new(pw))
                };
                assert_eq!(
                    kind(
                        HostOp::RemoveSmbGlobalMapping,
                        s.remove_smb_global_mapping(r"\\srv\share")
                    ),
                    Some(HostErrorKind::NotFound),
                    "{v}"
                );
                assert_eq!(
                    kind(
                        HostOp::NewSmbGlobalMapping,
                        smb(s, r"\\srv\share", r"CORP\bob", "nope")
                    ),
                    Some(HostErrorKind::LogonFailure),
                    "{v}"
                );
                assert_eq!(
                    kind(
                        HostOp::NewSmbGlobalMapping,
                        smb(s, r"\\srv\gone", r"CORP\bob", "pw-1")
                    ),
                    Some(HostErrorKind::NetworkNameNotFound),
                    "{v}"
                );
                assert_eq!(
                    kind(
                        HostOp::NewSmbGlobalMapping,
                        smb(s, r"\\ghost\x", r"CORP\bob", "pw-1")
                    ),
                    Some(HostErrorKind::NetworkPathNotFound),
                    "{v}"
                );
                s.mkdir(r"C:\var\lib\kubelet\plugins\x").expect("mkdir");
                s.new_smb_global_mapping(r"\\srv\share", staging, r"CORP\bob", &bob)
                    .expect("map");
                assert_eq!(
                    kind(
                        HostOp::NewSmbGlobalMapping,
                        smb(s, r"\\srv\other", r"CORP\alice", "pw-2")
                    ),
                    Some(HostErrorKind::MultipleConnections),
                    "{v}"
                );
                assert_eq!(
                    kind(HostOp::Rmdir, s.rmdir(r"C:\var\lib\kubelet\plugins", false)),
                    Some(HostErrorKind::NotEmpty),
                    "{v}"
                );
                s.reboot().expect("reboot");
                assert_eq!(
                    kind(HostOp::IsSymlink, s.is_symlink(staging).map(|_| ())),
                    Some(HostErrorKind::AccessDenied),
                    "{v}: a Disconnected mapping"
                );
                assert_eq!(
                    kind(
                        HostOp::NewSmbGlobalMapping,
                        smb(s, r"\\srv\share", r"CORP\bob", "pw-1")
                    ),
                    Some(HostErrorKind::MultipleConnections),
                    "{v}: after a reboot"
                );
                // iSCSI.
                let (p, iqn) = ("10.0.0.5", "iqn.2024-01.io.example:t");
                s.add_target_portal(p, 3260).expect("portal");
                let unconnected = ps.then_some(HostErrorKind::NotFound);
                assert_eq!(
                    kind(
                        HostOp::GetTargetDisks,
                        s.get_target_disks(p, 3260, iqn).map(|_| ())
                    ),
                    unconnected,
                    "{v}"
                );
                assert_eq!(
                    kind(HostOp::DisconnectTarget, s.disconnect_target(p, 3260, iqn)),
                    unconnected,
                    "{v}"
                );
                let login = |s: &mut sim::State| {
                    s.connect_target(p, 3260, iqn, AuthType::None, "", &Secret::new(""))
                };
                login(s).expect("login");
                assert_eq!(
                    kind(HostOp::ConnectTarget, login(s)),
                    ps.then_some(HostErrorKind::AlreadyLoggedIn),
                    "{v}"
                );
                let missing = r"\\?\Volume{00000000-0000-0000-0000-000000000000}\";
                assert_eq!(
                    kind(
                        HostOp::GetVolumeStats,
                        s.get_volume_stats(missing).map(|_| ())
                    ),
                    Some(HostErrorKind::NotFound),
                    "{v}"
                );
                assert_eq!(
                    kind(
                        HostOp::UnmountVolume,
                        s.unmount_volume(missing, r"C:\var\lib\kubelet\plugins\x")
                    ),
                    Some(HostErrorKind::NotFound),
                    "{v}"
                );
            });
        }
    }

    #[test]
    fn classification_and_trimming() {
        let ps = "NewSmbGlobalMapping failed. output: \"New-SmbGlobalMapping : Multiple connections to a server or \
                  shared resource by the same user \\r\\n    + CategoryInfo : NotSpecified\\r\\n    + \
                  FullyQualifiedErrorId : Windows System Error 1219,New-SmbGlobalMapping\\r\\n\", err: exit status 1";
        let e = classify(HostOp::NewSmbGlobalMapping, &proxy(ps));
        assert_eq!(e.kind, HostErrorKind::MultipleConnections);
        assert!(!e.message.contains("CategoryInfo"), "{}", e.message);
        for (text, kind) in [
            (
                "remove C:\\x: The directory is not empty.",
                HostErrorKind::NotEmpty,
            ),
            (
                "remove C:\\x: The system cannot find the file specified.",
                HostErrorKind::NotFound,
            ),
            (
                "No MSFT_SmbGlobalMapping objects found with property 'RemotePath'",
                HostErrorKind::NotFound,
            ),
            (
                "symlink a b: Cannot create a file when that file already exists.",
                HostErrorKind::AlreadyExists,
            ),
            (
                "New-SmbGlobalMapping : The local device name is already in use. ... Windows System Error \
                 85,New-SmbGlobalMapping",
                HostErrorKind::StaleMapping,
            ),
            (
                "Connect-IscsiTarget : The target has already been logged in via an iSCSI session.",
                HostErrorKind::AlreadyLoggedIn,
            ),
            (
                "Add-PartitionAccessPath : The requested access path is already in use.",
                HostErrorKind::AccessPathInUse,
            ),
            ("Access is denied.", HostErrorKind::AccessDenied),
            (
                "Windows System Error 53,New-SmbGlobalMapping",
                HostErrorKind::NetworkPathNotFound,
            ),
            (
                "Windows System Error 67,New-SmbGlobalMapping",
                HostErrorKind::NetworkNameNotFound,
            ),
            (
                "Windows System Error 1326,New-SmbGlobalMapping",
                HostErrorKind::LogonFailure,
            ),
            ("something odd", HostErrorKind::Other),
        ] {
            assert_eq!(classify(HostOp::Rmdir, &proxy(text)).kind, kind, "{text}");
        }
        let long = "x".repeat(1000);
        assert!(classify(HostOp::Rmdir, &proxy(&long)).message.len() <= MAX_MESSAGE + 4);
        let dl = proxy_client::Error::DeadlineExceeded {
            method: "X",
            timeout: std::time::Duration::from_secs(1),
        };
        assert_eq!(
            classify(HostOp::Mkdir, &dl).kind,
            HostErrorKind::DeadlineExceeded
        );
        let missing = proxy_client::Error::PipeMissing {
            method: "X",
            endpoint: "p".into(),
            hint: "h",
        };
        assert_eq!(
            classify(HostOp::Mkdir, &missing).kind,
            HostErrorKind::Unavailable
        );
    }
}
