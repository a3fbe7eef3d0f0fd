//! Test support for running the driver's suites per backend (unit tests and, with the `test-util` feature,
//! integration tests): [`TestHost`], one `Host` type that is either backend, so a suite's `Manager<TestHost>` runs
//! over csi-proxy or native as the environment chooses (`WINCSI_TEST_HOST_BACKEND`, read by the test support through
//! `sim::wmi::TestBackend::from_env`), and [`Tap`], the port-level recorder of the native backend.
//!
//! Why a tap: with csi-proxy, the simulated host's audit log *is* the list of port calls (one RPC per host
//! operation), and suites assert those sequences and inject faults by RPC name. The native backend makes several WMI
//! and Win32 calls per operation (the sim audits those under their own names, which the crash-and-fault matrix
//! uses). So that the same suites run unchanged over native, the tap records each **port** call (same names and
//! arguments as csi-proxy's RPCs) and injects the suites' port-level faults, hangs, holds and outages, then runs the
//! simulated host's scripts after a successful operation as the in-process csi-proxy does. A fault's text is
//! classified as csi-proxy's would be (the suites write csi-proxy texts); the native backend's own error handling is
//! covered by its WMI-level tests and the matrix.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;
use tokio::sync::watch;

use super::NativeHost;
use crate::host::csi_proxy::{CsiProxyHost, classify};
use crate::host::{
    DiskIds, DiskLayout, DiskLocation, Host, HostCapabilities, HostError, HostErrorKind,
    HostObject, HostOp, HostPath, HostResult, InFlight, IscsiAuth, MpioClaim, PathSpace, Portal,
    Secret, SharedObject, SmbCredential, SmbMappingOptions, TargetPath, UncPath,
};
use crate::locks::Deadline;

/// One port call as the tap saw it: the operation and its arguments, keyed as csi-proxy's RPC fields (no secret).
#[derive(Clone, Debug, PartialEq)]
pub struct TapCall {
    /// The operation.
    pub op: HostOp,
    /// Its arguments.
    pub args: serde_json::Value,
}

/// What the tap asks the simulated host's in-process gate (outages and scripts are registered there by RPC name).
pub struct TapHooks {
    /// Whether this call of the RPC finds the backend unreachable.
    pub unreachable: Box<dyn Fn(&str) -> bool + Send + Sync>,
    /// Run the scripts registered after a successful call of the RPC.
    pub after: Box<dyn Fn(&str) + Send + Sync>,
}

#[derive(Default)]
struct Rules {
    calls: Vec<TapCall>,
    faults: Vec<Rule>,
    hangs: Vec<Rule>,
    /// Held after the host work, before the answer.
    answer_hangs: Vec<Rule>,
}

struct Rule {
    op: Option<HostOp>,
    nth: u64,
    seen: u64,
    text: String,
}

/// The native backend's port-level recorder and fault injector (module docs). Shared across driver restarts.
pub struct Tap {
    rules: Mutex<Rules>,
    hooks: TapHooks,
    release: watch::Sender<u64>,
    hung: watch::Sender<u64>,
}

struct HungGuard<'a>(&'a watch::Sender<u64>);

impl Drop for HungGuard<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Tap {
    /// A tap asking `hooks`.
    pub fn new(hooks: TapHooks) -> Arc<Self> {
        Arc::new(Self {
            rules: Mutex::default(),
            hooks,
            release: watch::channel(0).0,
            hung: watch::channel(0).0,
        })
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.rules.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls completed since the last [`Tap::clear`].
    pub fn calls(&self) -> Vec<TapCall> {
        self.rules().calls.clone()
    }

    /// Forget the recorded calls.
    pub fn clear(&self) {
        self.rules().calls.clear();
    }

    /// Fail the `nth` next call of `op` (`None`: of any) with csi-proxy's error `text`.
    pub fn fail_nth(&self, op: Option<HostOp>, nth: u64, text: &str) {
        self.rules().faults.push(Rule {
            op,
            nth,
            seen: 0,
            text: text.to_owned(),
        });
    }

    /// Hold the `nth` next call of `op` (`None`: of any) before it reaches the host, until [`Tap::release`].
    pub fn hang_nth(&self, op: Option<HostOp>, nth: u64) {
        self.rules().hangs.push(Rule {
            op,
            nth,
            seen: 0,
            text: String::new(),
        });
    }

    /// Let the `nth` next call of `op` (`None`: of any) reach the host and then hold its answer until [`Tap::release`]
    /// (the call landed; its caller hears nothing yet).
    pub fn hang_answer_nth(&self, op: Option<HostOp>, nth: u64) {
        self.rules().answer_hangs.push(Rule {
            op,
            nth,
            seen: 0,
            text: String::new(),
        });
    }

    async fn hold(&self) {
        let mut rx = self.release.subscribe();
        rx.borrow_and_update();
        self.hung.send_modify(|n| *n += 1);
        let _guard = HungGuard(&self.hung);
        let _ = rx.changed().await;
    }

    /// Let every held call go on.
    pub fn release(&self) {
        self.release.send_modify(|g| *g += 1);
    }

    /// How many calls are held right now.
    pub fn hung_calls(&self) -> u64 {
        *self.hung.borrow()
    }

    /// Resolves once at least `n` calls are held.
    pub async fn wait_hung(&self, n: u64) {
        let mut rx = self.hung.subscribe();
        let _ = rx.wait_for(|c| *c >= n).await;
    }

    /// Run `fut`, the host operation `call` of a process that is dead once `dead` says so, under the tap's rules. A
    /// dead process's call is not the tap's: it counts against no rule and is not recorded (its Windows view refuses
    /// it unseen, `sim::wmi::WindowsView::kill`), and a call held here when its process died never reaches the host.
    async fn around<T>(
        &self,
        call: TapCall,
        dead: &AtomicBool,
        fut: impl Future<Output = HostResult<T>>,
    ) -> HostResult<T> {
        if dead.load(Ordering::SeqCst) {
            return fut.await;
        }
        let op = call.op;
        if (self.hooks.unreachable)(op.name()) {
            return Err(HostError::new(
                op,
                HostErrorKind::Unavailable,
                "the host backend did not answer (injected outage)",
            ));
        }
        let (fault, hang, hang_answer) = {
            let mut rules = self.rules();
            let pick = |list: &mut Vec<Rule>| {
                let mut hit = None;
                for r in list.iter_mut().filter(|r| r.op.is_none_or(|o| o == op)) {
                    r.seen += 1;
                    if hit.is_none() && r.seen == r.nth {
                        hit = Some(r.text.clone());
                    }
                }
                list.retain(|r| r.seen < r.nth);
                hit
            };
            (
                pick(&mut rules.faults),
                pick(&mut rules.hangs).is_some(),
                pick(&mut rules.answer_hangs).is_some(),
            )
        };
        if hang {
            self.hold().await;
            if dead.load(Ordering::SeqCst) {
                return fut.await;
            }
        }
        let result = match fault {
            Some(text) => Err(classify(
                op,
                &proxy_client::Error::Proxy {
                    method: op.name(),
                    code: 2,
                    message: text,
                },
            )),
            None => fut.await,
        };
        if hang_answer {
            self.hold().await;
        }
        self.rules().calls.push(call);
        if result.is_ok() {
            (self.hooks.after)(op.name());
        }
        result
    }
}

/// The native backend behind a [`Tap`].
#[derive(Clone)]
pub struct Tapped {
    host: NativeHost,
    tap: Arc<Tap>,
    /// Set when the driver process calling through it was killed.
    dead: Arc<AtomicBool>,
}

impl Tapped {
    /// `host` behind `tap`.
    pub fn new(host: NativeHost, tap: Arc<Tap>) -> Self {
        Self::of_process(host, tap, Arc::default())
    }

    /// `host` behind `tap`, called by a driver process that is dead once `dead` is set (its host's Windows view is
    /// killed with it): from then on its calls bypass the tap.
    pub fn of_process(host: NativeHost, tap: Arc<Tap>, dead: Arc<AtomicBool>) -> Self {
        Self { host, tap, dead }
    }

    fn call(op: HostOp, args: serde_json::Value) -> TapCall {
        TapCall { op, args }
    }
}

fn portal_json(p: &Portal) -> serde_json::Value {
    json!({ "target_address": p.address, "target_port": p.port })
}

impl Host for Tapped {
    fn capabilities(&self) -> HostCapabilities {
        self.host.capabilities()
    }

    async fn path_exists(&self, path: &HostPath, d: Deadline) -> HostResult<bool> {
        let c = Self::call(HostOp::PathExists, json!({ "path": path.as_str() }));
        self.tap
            .around(c, &self.dead, self.host.path_exists(path, d))
            .await
    }

    async fn mkdir(&self, path: &HostPath, d: Deadline) -> HostResult<()> {
        let c = Self::call(HostOp::Mkdir, json!({ "path": path.as_str() }));
        self.tap
            .around(c, &self.dead, self.host.mkdir(path, d))
            .await
    }

    async fn rmdir(&self, path: &HostPath, force: bool, d: Deadline) -> HostResult<()> {
        let c = Self::call(
            HostOp::Rmdir,
            json!({ "path": path.as_str(), "force": force }),
        );
        self.tap
            .around(c, &self.dead, self.host.rmdir(path, force, d))
            .await
    }

    async fn create_symlink(&self, link: &HostPath, to: &HostPath, d: Deadline) -> HostResult<()> {
        let args = json!({ "source_path": to.as_str(), "target_path": link.as_str() });
        let c = Self::call(HostOp::CreateSymlink, args);
        self.tap
            .around(c, &self.dead, self.host.create_symlink(link, to, d))
            .await
    }

    async fn is_symlink(&self, path: &HostPath, d: Deadline) -> HostResult<bool> {
        let c = Self::call(HostOp::IsSymlink, json!({ "path": path.as_str() }));
        self.tap
            .around(c, &self.dead, self.host.is_symlink(path, d))
            .await
    }

    async fn new_smb_global_mapping(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        cred: Option<&SmbCredential>,
        d: Deadline,
    ) -> HostResult<()> {
        let args = json!({
            "remote_path": remote.to_string(),
            "local_path": link.map(HostPath::as_str).unwrap_or(""),
            "username": cred.map(SmbCredential::principal).unwrap_or(""),
            "password": if cred.is_some() { "<redacted>" } else { "" },
        });
        let c = Self::call(HostOp::NewSmbGlobalMapping, args);
        self.tap
            .around(
                c,
                &self.dead,
                self.host.new_smb_global_mapping(remote, link, cred, d),
            )
            .await
    }

    async fn new_smb_global_mapping_with(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        cred: Option<&SmbCredential>,
        options: &SmbMappingOptions,
        d: Deadline,
    ) -> HostResult<()> {
        let mut args = json!({
            "remote_path": remote.to_string(),
            "local_path": link.map(HostPath::as_str).unwrap_or(""),
            "username": cred.map(SmbCredential::principal).unwrap_or(""),
            "password": if cred.is_some() { "<redacted>" } else { "" },
        });
        if !options.is_empty() {
            args["options"] = json!(options.describe());
        }
        let c = Self::call(HostOp::NewSmbGlobalMapping, args);
        self.tap
            .around(
                c,
                &self.dead,
                self.host
                    .new_smb_global_mapping_with(remote, link, cred, options, d),
            )
            .await
    }

    async fn remove_smb_global_mapping(&self, remote: &UncPath, d: Deadline) -> HostResult<()> {
        let args = json!({ "remote_path": remote.root().to_string() });
        let c = Self::call(HostOp::RemoveSmbGlobalMapping, args);
        self.tap
            .around(
                c,
                &self.dead,
                self.host.remove_smb_global_mapping(remote, d),
            )
            .await
    }

    async fn list_disk_locations(
        &self,
        d: Deadline,
    ) -> HostResult<std::collections::BTreeMap<u32, DiskLocation>> {
        let c = Self::call(HostOp::ListDiskLocations, json!({}));
        self.tap
            .around(c, &self.dead, self.host.list_disk_locations(d))
            .await
    }

    async fn list_disk_ids(
        &self,
        d: Deadline,
    ) -> HostResult<std::collections::BTreeMap<u32, DiskIds>> {
        let c = Self::call(HostOp::ListDiskIDs, json!({}));
        self.tap
            .around(c, &self.dead, self.host.list_disk_ids(d))
            .await
    }

    async fn rescan(&self, d: Deadline) -> HostResult<()> {
        let c = Self::call(HostOp::Rescan, json!({}));
        self.tap.around(c, &self.dead, self.host.rescan(d)).await
    }

    async fn partition_disk(&self, n: u32, d: Deadline) -> HostResult<()> {
        let c = Self::call(HostOp::PartitionDisk, json!({ "disk_number": n }));
        self.tap
            .around(c, &self.dead, self.host.partition_disk(n, d))
            .await
    }

    async fn disk_size(&self, n: u32, d: Deadline) -> HostResult<u64> {
        let c = Self::call(HostOp::GetDiskStats, json!({ "disk_number": n }));
        self.tap
            .around(c, &self.dead, self.host.disk_size(n, d))
            .await
    }

    async fn set_disk_online(&self, n: u32, online: bool, d: Deadline) -> HostResult<()> {
        let args = json!({ "disk_number": n, "is_online": online });
        let c = Self::call(HostOp::SetDiskState, args);
        self.tap
            .around(c, &self.dead, self.host.set_disk_online(n, online, d))
            .await
    }

    async fn set_disk_online_writable(&self, n: u32, d: Deadline) -> HostResult<()> {
        let args = json!({ "disk_number": n, "is_online": true, "writable": true });
        let c = Self::call(HostOp::SetDiskState, args);
        self.tap
            .around(c, &self.dead, self.host.set_disk_online_writable(n, d))
            .await
    }

    async fn set_disk_online_read_only(&self, n: u32, d: Deadline) -> HostResult<()> {
        let args = json!({ "disk_number": n, "is_online": true, "read_only": true });
        let c = Self::call(HostOp::SetDiskState, args);
        self.tap
            .around(c, &self.dead, self.host.set_disk_online_read_only(n, d))
            .await
    }

    fn uptime(&self) -> Option<std::time::Duration> {
        self.host.uptime()
    }

    fn windows_build(&self) -> Option<u32> {
        self.host.windows_build()
    }

    /// Not recorded: what the backend knows of its own calls is no host operation of csi-proxy's (the suites' call
    /// sequences are csi-proxy's), and its facade reads, if any, are in the sim's audit.
    async fn in_flight(&self, object: &HostObject, d: Deadline) -> HostResult<InFlight> {
        self.host.in_flight(object, d).await
    }

    async fn is_disk_online(&self, n: u32, d: Deadline) -> HostResult<bool> {
        let c = Self::call(HostOp::GetDiskState, json!({ "disk_number": n }));
        self.tap
            .around(c, &self.dead, self.host.is_disk_online(n, d))
            .await
    }

    async fn list_volumes_on_disk(&self, n: u32, d: Deadline) -> HostResult<Vec<String>> {
        let args = json!({ "disk_number": n, "partition_number": 0 });
        let c = Self::call(HostOp::ListVolumesOnDisk, args);
        self.tap
            .around(c, &self.dead, self.host.list_volumes_on_disk(n, d))
            .await
    }

    async fn mount_volume(&self, v: &str, path: &HostPath, d: Deadline) -> HostResult<()> {
        let args = json!({ "volume_id": v, "target_path": path.as_str() });
        let c = Self::call(HostOp::MountVolume, args);
        self.tap
            .around(c, &self.dead, self.host.mount_volume(v, path, d))
            .await
    }

    async fn unmount_volume(&self, v: &str, path: &HostPath, d: Deadline) -> HostResult<()> {
        let args = json!({ "volume_id": v, "target_path": path.as_str() });
        let c = Self::call(HostOp::UnmountVolume, args);
        self.tap
            .around(c, &self.dead, self.host.unmount_volume(v, path, d))
            .await
    }

    async fn is_volume_formatted(&self, v: &str, d: Deadline) -> HostResult<bool> {
        let c = Self::call(HostOp::IsVolumeFormatted, json!({ "volume_id": v }));
        self.tap
            .around(c, &self.dead, self.host.is_volume_formatted(v, d))
            .await
    }

    async fn format_volume(&self, v: &str, d: Deadline) -> HostResult<()> {
        let c = Self::call(HostOp::FormatVolume, json!({ "volume_id": v }));
        self.tap
            .around(c, &self.dead, self.host.format_volume(v, d))
            .await
    }

    async fn resize_volume(&self, v: &str, size: u64, d: Deadline) -> HostResult<()> {
        let args = json!({ "volume_id": v, "size_bytes": size });
        let c = Self::call(HostOp::ResizeVolume, args);
        self.tap
            .around(c, &self.dead, self.host.resize_volume(v, size, d))
            .await
    }

    async fn volume_stats(&self, v: &str, d: Deadline) -> HostResult<(u64, u64)> {
        let c = Self::call(HostOp::GetVolumeStats, json!({ "volume_id": v }));
        self.tap
            .around(c, &self.dead, self.host.volume_stats(v, d))
            .await
    }

    async fn volume_id_from_target_path(&self, path: &HostPath, d: Deadline) -> HostResult<String> {
        let args = json!({ "target_path": path.as_str() });
        let c = Self::call(HostOp::GetVolumeIDFromTargetPath, args);
        self.tap
            .around(c, &self.dead, self.host.volume_id_from_target_path(path, d))
            .await
    }

    async fn write_volume_cache(&self, v: &str, d: Deadline) -> HostResult<()> {
        let c = Self::call(HostOp::WriteVolumeCache, json!({ "volume_id": v }));
        self.tap
            .around(c, &self.dead, self.host.write_volume_cache(v, d))
            .await
    }

    async fn add_target_portal(&self, p: &Portal, d: Deadline) -> HostResult<()> {
        let c = Self::call(
            HostOp::AddTargetPortal,
            json!({ "target_portal": portal_json(p) }),
        );
        self.tap
            .around(c, &self.dead, self.host.add_target_portal(p, d))
            .await
    }

    async fn discover_target_portal(&self, p: &Portal, d: Deadline) -> HostResult<Vec<String>> {
        let c = Self::call(
            HostOp::DiscoverTargetPortal,
            json!({ "target_portal": portal_json(p) }),
        );
        self.tap
            .around(c, &self.dead, self.host.discover_target_portal(p, d))
            .await
    }

    async fn add_target_portal_with_chap(
        &self,
        p: &Portal,
        discovery: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        let args = json!({ "target_portal": portal_json(p), "discovery_auth": discovery.mode() });
        let c = Self::call(HostOp::AddTargetPortal, args);
        self.tap
            .around(
                c,
                &self.dead,
                self.host.add_target_portal_with_chap(p, discovery, d),
            )
            .await
    }

    async fn connect_target(
        &self,
        p: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        let args = json!({ "target_portal": portal_json(p), "iqn": iqn, "auth_type": auth.mode() });
        let c = Self::call(HostOp::ConnectTarget, args);
        self.tap
            .around(c, &self.dead, self.host.connect_target(p, iqn, auth, d))
            .await
    }

    async fn connect_target_persistent(
        &self,
        p: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        let args = json!({
            "target_portal": portal_json(p), "iqn": iqn, "auth_type": auth.mode(), "persistent": true,
        });
        let c = Self::call(HostOp::ConnectTarget, args);
        self.tap
            .around(
                c,
                &self.dead,
                self.host.connect_target_persistent(p, iqn, auth, d),
            )
            .await
    }

    async fn disconnect_target(&self, p: &Portal, iqn: &str, d: Deadline) -> HostResult<()> {
        let args = json!({ "target_portal": portal_json(p), "iqn": iqn });
        let c = Self::call(HostOp::DisconnectTarget, args);
        self.tap
            .around(c, &self.dead, self.host.disconnect_target(p, iqn, d))
            .await
    }

    async fn get_target_disks(&self, p: &Portal, iqn: &str, d: Deadline) -> HostResult<Vec<u32>> {
        let args = json!({ "target_portal": portal_json(p), "iqn": iqn });
        let c = Self::call(HostOp::GetTargetDisks, args);
        self.tap
            .around(c, &self.dead, self.host.get_target_disks(p, iqn, d))
            .await
    }

    async fn set_mutual_chap_secret(&self, secret: &Secret, d: Deadline) -> HostResult<()> {
        let c = Self::call(
            HostOp::SetMutualChapSecret,
            json!({ "mutual_chap_secret": "<redacted>" }),
        );
        self.tap
            .around(c, &self.dead, self.host.set_mutual_chap_secret(secret, d))
            .await
    }

    async fn list_target_portals(&self, d: Deadline) -> HostResult<Vec<Portal>> {
        let c = Self::call(HostOp::ListTargetPortals, json!({}));
        self.tap
            .around(c, &self.dead, self.host.list_target_portals(d))
            .await
    }

    async fn disk_number_of_volume(&self, v: &str, d: Deadline) -> HostResult<u32> {
        let c = Self::call(HostOp::GetDiskNumberFromVolumeID, json!({ "volume_id": v }));
        self.tap
            .around(c, &self.dead, self.host.disk_number_of_volume(v, d))
            .await
    }

    async fn read_link(&self, path: &HostPath, d: Deadline) -> HostResult<Option<String>> {
        let c = Self::call(HostOp::ReadLink, json!({ "path": path.as_str() }));
        self.tap
            .around(c, &self.dead, self.host.read_link(path, d))
            .await
    }

    async fn remove_target_portal(&self, p: &Portal, d: Deadline) -> HostResult<()> {
        let c = Self::call(
            HostOp::RemoveTargetPortal,
            json!({ "target_portal": portal_json(p) }),
        );
        self.tap
            .around(c, &self.dead, self.host.remove_target_portal(p, d))
            .await
    }

    async fn refresh_target_portal(&self, p: &Portal, d: Deadline) -> HostResult<()> {
        let c = Self::call(
            HostOp::RefreshTargetPortal,
            json!({ "target_portal": portal_json(p) }),
        );
        self.tap
            .around(c, &self.dead, self.host.refresh_target_portal(p, d))
            .await
    }

    async fn disk_layout(&self, disk: u32, d: Deadline) -> HostResult<DiskLayout> {
        let c = Self::call(HostOp::DiskLayout, json!({ "disk_number": disk }));
        self.tap
            .around(c, &self.dead, self.host.disk_layout(disk, d))
            .await
    }

    async fn iscsi_sessions(&self, d: Deadline) -> HostResult<Vec<String>> {
        let c = Self::call(HostOp::ListIscsiSessions, json!({}));
        self.tap
            .around(c, &self.dead, self.host.iscsi_sessions(d))
            .await
    }

    async fn mpio_claim(&self, d: Deadline) -> HostResult<MpioClaim> {
        let c = Self::call(HostOp::MultipathClaim, json!({}));
        self.tap
            .around(c, &self.dead, self.host.mpio_claim(d))
            .await
    }

    async fn connect_target_multipath(
        &self,
        p: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        persistent: bool,
        d: Deadline,
    ) -> HostResult<()> {
        let c = Self::call(
            HostOp::ConnectTarget,
            json!({ "target_portal": portal_json(p), "iqn": iqn, "multipath": true, "persistent": persistent }),
        );
        self.tap
            .around(
                c,
                &self.dead,
                self.host
                    .connect_target_multipath(p, iqn, auth, persistent, d),
            )
            .await
    }

    async fn target_paths(&self, iqn: &str, d: Deadline) -> HostResult<Vec<TargetPath>> {
        let c = Self::call(HostOp::TargetPaths, json!({ "iqn": iqn }));
        self.tap
            .around(c, &self.dead, self.host.target_paths(iqn, d))
            .await
    }

    fn made_by_wincsi(&self, object: SharedObject<'_>) -> Option<bool> {
        self.host.made_by_wincsi(object)
    }

    async fn claim(&self, object: SharedObject<'_>, d: Deadline) -> HostResult<()> {
        self.host.claim(object, d).await
    }

    async fn path_space(&self, path: &HostPath, d: Deadline) -> HostResult<PathSpace> {
        let c = Self::call(HostOp::PathSpace, json!({ "path": path.as_str() }));
        self.tap
            .around(c, &self.dead, self.host.path_space(path, d))
            .await
    }
}

/// Either backend, as one `Host` type (module docs).
#[derive(Clone)]
pub enum TestHost {
    /// csi-proxy (over the simulated csi-proxy).
    CsiProxy(CsiProxyHost),
    /// Native (over the simulated host's Windows view), behind the port tap.
    Native(Tapped),
    /// Native without a tap: the port calls are not recorded (integration suites record the host's own audit).
    NativeBare(NativeHost),
}

impl std::fmt::Debug for TestHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::CsiProxy(_) => "TestHost::CsiProxy",
            Self::Native(_) => "TestHost::Native",
            Self::NativeBare(_) => "TestHost::NativeBare",
        })
    }
}

macro_rules! each {
    ($self:ident, $h:ident => $e:expr) => {
        match $self {
            TestHost::CsiProxy($h) => $e.await,
            TestHost::Native($h) => $e.await,
            TestHost::NativeBare($h) => $e.await,
        }
    };
}

impl Host for TestHost {
    fn capabilities(&self) -> HostCapabilities {
        match self {
            Self::CsiProxy(h) => h.capabilities(),
            Self::Native(h) => h.capabilities(),
            Self::NativeBare(h) => h.capabilities(),
        }
    }
    async fn path_exists(&self, p: &HostPath, d: Deadline) -> HostResult<bool> {
        each!(self, h => h.path_exists(p, d))
    }
    async fn mkdir(&self, p: &HostPath, d: Deadline) -> HostResult<()> {
        each!(self, h => h.mkdir(p, d))
    }
    async fn rmdir(&self, p: &HostPath, force: bool, d: Deadline) -> HostResult<()> {
        each!(self, h => h.rmdir(p, force, d))
    }
    async fn create_symlink(&self, l: &HostPath, t: &HostPath, d: Deadline) -> HostResult<()> {
        each!(self, h => h.create_symlink(l, t, d))
    }
    async fn is_symlink(&self, p: &HostPath, d: Deadline) -> HostResult<bool> {
        each!(self, h => h.is_symlink(p, d))
    }
    async fn new_smb_global_mapping(
        &self,
        r: &UncPath,
        l: Option<&HostPath>,
        c: Option<&SmbCredential>,
        d: Deadline,
    ) -> HostResult<()> {
        each!(self, h => h.new_smb_global_mapping(r, l, c, d))
    }
    async fn new_smb_global_mapping_with(
        &self,
        r: &UncPath,
        l: Option<&HostPath>,
        c: Option<&SmbCredential>,
        o: &SmbMappingOptions,
        d: Deadline,
    ) -> HostResult<()> {
        each!(self, h => h.new_smb_global_mapping_with(r, l, c, o, d))
    }
    async fn remove_smb_global_mapping(&self, r: &UncPath, d: Deadline) -> HostResult<()> {
        each!(self, h => h.remove_smb_global_mapping(r, d))
    }
    async fn list_disk_locations(
        &self,
        d: Deadline,
    ) -> HostResult<std::collections::BTreeMap<u32, DiskLocation>> {
        each!(self, h => h.list_disk_locations(d))
    }
    async fn list_disk_ids(
        &self,
        d: Deadline,
    ) -> HostResult<std::collections::BTreeMap<u32, DiskIds>> {
        each!(self, h => h.list_disk_ids(d))
    }
    async fn rescan(&self, d: Deadline) -> HostResult<()> {
        each!(self, h => h.rescan(d))
    }
    async fn partition_disk(&self, n: u32, d: Deadline) -> HostResult<()> {
        each!(self, h => h.partition_disk(n, d))
    }
    async fn disk_size(&self, n: u32, d: Deadline) -> HostResult<u64> {
        each!(self, h => h.disk_size(n, d))
    }
    async fn set_disk_online(&self, n: u32, online: bool, d: Deadline) -> HostResult<()> {
        each!(self, h => h.set_disk_online(n, online, d))
    }
    async fn set_disk_online_writable(&self, n: u32, d: Deadline) -> HostResult<()> {
        each!(self, h => h.set_disk_online_writable(n, d))
    }
    async fn set_disk_online_read_only(&self, n: u32, d: Deadline) -> HostResult<()> {
        each!(self, h => h.set_disk_online_read_only(n, d))
    }
    fn uptime(&self) -> Option<std::time::Duration> {
        match self {
            Self::CsiProxy(h) => h.uptime(),
            Self::Native(h) => h.uptime(),
            Self::NativeBare(h) => h.uptime(),
        }
    }
    fn windows_build(&self) -> Option<u32> {
        match self {
            Self::CsiProxy(h) => h.windows_build(),
            Self::Native(h) => h.windows_build(),
            Self::NativeBare(h) => h.windows_build(),
        }
    }
    async fn in_flight(&self, o: &HostObject, d: Deadline) -> HostResult<InFlight> {
        each!(self, h => h.in_flight(o, d))
    }
    async fn is_disk_online(&self, n: u32, d: Deadline) -> HostResult<bool> {
        each!(self, h => h.is_disk_online(n, d))
    }
    async fn list_volumes_on_disk(&self, n: u32, d: Deadline) -> HostResult<Vec<String>> {
        each!(self, h => h.list_volumes_on_disk(n, d))
    }
    async fn mount_volume(&self, v: &str, p: &HostPath, d: Deadline) -> HostResult<()> {
        each!(self, h => h.mount_volume(v, p, d))
    }
    async fn unmount_volume(&self, v: &str, p: &HostPath, d: Deadline) -> HostResult<()> {
        each!(self, h => h.unmount_volume(v, p, d))
    }
    async fn is_volume_formatted(&self, v: &str, d: Deadline) -> HostResult<bool> {
        each!(self, h => h.is_volume_formatted(v, d))
    }
    async fn format_volume(&self, v: &str, d: Deadline) -> HostResult<()> {
        each!(self, h => h.format_volume(v, d))
    }
    async fn resize_volume(&self, v: &str, s: u64, d: Deadline) -> HostResult<()> {
        each!(self, h => h.resize_volume(v, s, d))
    }
    async fn volume_stats(&self, v: &str, d: Deadline) -> HostResult<(u64, u64)> {
        each!(self, h => h.volume_stats(v, d))
    }
    async fn volume_id_from_target_path(&self, p: &HostPath, d: Deadline) -> HostResult<String> {
        each!(self, h => h.volume_id_from_target_path(p, d))
    }
    async fn write_volume_cache(&self, v: &str, d: Deadline) -> HostResult<()> {
        each!(self, h => h.write_volume_cache(v, d))
    }
    async fn add_target_portal(&self, p: &Portal, d: Deadline) -> HostResult<()> {
        each!(self, h => h.add_target_portal(p, d))
    }
    async fn discover_target_portal(&self, p: &Portal, d: Deadline) -> HostResult<Vec<String>> {
        each!(self, h => h.discover_target_portal(p, d))
    }
    async fn add_target_portal_with_chap(
        &self,
        p: &Portal,
        a: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        each!(self, h => h.add_target_portal_with_chap(p, a, d))
    }
    async fn connect_target(
        &self,
        p: &Portal,
        i: &str,
        a: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        each!(self, h => h.connect_target(p, i, a, d))
    }
    async fn connect_target_persistent(
        &self,
        p: &Portal,
        i: &str,
        a: &IscsiAuth,
        d: Deadline,
    ) -> HostResult<()> {
        each!(self, h => h.connect_target_persistent(p, i, a, d))
    }
    async fn disconnect_target(&self, p: &Portal, i: &str, d: Deadline) -> HostResult<()> {
        each!(self, h => h.disconnect_target(p, i, d))
    }
    async fn get_target_disks(&self, p: &Portal, i: &str, d: Deadline) -> HostResult<Vec<u32>> {
        each!(self, h => h.get_target_disks(p, i, d))
    }
    async fn set_mutual_chap_secret(&self, s: &Secret, d: Deadline) -> HostResult<()> {
        each!(self, h => h.set_mutual_chap_secret(s, d))
    }
    async fn list_target_portals(&self, d: Deadline) -> HostResult<Vec<Portal>> {
        each!(self, h => h.list_target_portals(d))
    }
    async fn disk_number_of_volume(&self, v: &str, d: Deadline) -> HostResult<u32> {
        each!(self, h => h.disk_number_of_volume(v, d))
    }
    async fn remove_target_portal(&self, p: &Portal, d: Deadline) -> HostResult<()> {
        each!(self, h => h.remove_target_portal(p, d))
    }

    async fn refresh_target_portal(&self, p: &Portal, d: Deadline) -> HostResult<()> {
        each!(self, h => h.refresh_target_portal(p, d))
    }

    async fn read_link(&self, p: &HostPath, d: Deadline) -> HostResult<Option<String>> {
        each!(self, h => h.read_link(p, d))
    }
    async fn disk_layout(&self, n: u32, d: Deadline) -> HostResult<DiskLayout> {
        each!(self, h => h.disk_layout(n, d))
    }
    async fn iscsi_sessions(&self, d: Deadline) -> HostResult<Vec<String>> {
        each!(self, h => h.iscsi_sessions(d))
    }
    async fn mpio_claim(&self, d: Deadline) -> HostResult<MpioClaim> {
        each!(self, h => h.mpio_claim(d))
    }
    async fn connect_target_multipath(
        &self,
        p: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        persistent: bool,
        d: Deadline,
    ) -> HostResult<()> {
        each!(self, h => h.connect_target_multipath(p, iqn, auth, persistent, d))
    }
    async fn target_paths(&self, iqn: &str, d: Deadline) -> HostResult<Vec<TargetPath>> {
        each!(self, h => h.target_paths(iqn, d))
    }
    fn made_by_wincsi(&self, object: SharedObject<'_>) -> Option<bool> {
        match self {
            Self::CsiProxy(h) => h.made_by_wincsi(object),
            Self::Native(h) => h.made_by_wincsi(object),
            Self::NativeBare(h) => h.made_by_wincsi(object),
        }
    }
    async fn claim(&self, object: SharedObject<'_>, d: Deadline) -> HostResult<()> {
        each!(self, h => h.claim(object, d))
    }

    async fn path_space(&self, p: &HostPath, d: Deadline) -> HostResult<PathSpace> {
        each!(self, h => h.path_space(p, d))
    }
}
