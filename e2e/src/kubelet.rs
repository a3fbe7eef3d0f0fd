//! A model of kubelet's side of CSI on a Windows node: the exact paths it hands the driver, the
//! `csi.storage.k8s.io/*` attributes `podInfoOnMount` adds, its call order and its retry policy.
//!
//! * Staging path (kubelet ≥ 1.26, current through 1.33): `<root>\plugins\kubernetes.io\csi\<driver>\
//!   <sha256(volume handle), lowercase hex>\globalmount` (`makeDeviceMountPath` in `pkg/volume/csi/csi_attacher.go`).
//! * Publish path: `<root>\pods\<pod uid>\volumes\kubernetes.io~csi\<volume name>\mount`, where the volume name
//!   is the PV name (or the pod's volume name for an inline volume). kubelet creates the parent directory (it
//!   writes `vol_data.json` there), never `mount` itself.
//! * Mount: `NodeGetCapabilities` → `NodeStageVolume` (only with `STAGE_UNSTAGE`, once per node and volume) →
//!   `NodeGetCapabilities` → `NodePublishVolume` (once per pod). Tear-down: `NodeUnpublishVolume` → when no pod
//!   uses the volume any more, `NodeGetCapabilities` → `NodeUnstageVolume`.
//! * kubelet's own files (`pkg/volume/csi/csi_attacher.go` MountDevice/UnmountDevice, `csi_mounter.go`
//!   SetUpAt/TearDownAt): before NodeStage it creates the staging path itself with `MkdirAllWithPathCheck` (an
//!   existing directory, symlink or mount point is accepted as it is) and writes `vol_data.json` beside it; before
//!   NodePublish it creates the target's parent with `vol_data.json`. After NodeUnpublish / NodeUnstage, and after a
//!   *final* error of NodePublish / NodeStage (any code but Canceled, DeadlineExceeded, Unavailable,
//!   ResourceExhausted, Aborted), it runs `removeMountDir`: unless `IsLikelyNotMountPoint` says the path is a mount
//!   point (on Windows: a symlink or reparse point, `mount-utils/mount_windows.go`), it removes the path, its
//!   `vol_data.json` and the parent. These are kubelet's own file operations, not csi-proxy calls (the simulator's
//!   admin `lstat`/`mkdir`/`remove`, never audited).
//! * A failed operation is retried whole (kubelet's exponential backoff, scaled down here by [`Retry`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use csi::v1::identity_client::IdentityClient;
use csi::v1::node_client::NodeClient;
use csi::v1::node_service_capability::rpc::Type as NodeCap;
use csi::v1::volume_capability::access_mode::Mode;
use csi::v1::volume_capability::{AccessMode, AccessType, MountVolume};
use csi::v1::{
    CapacityRange, NodeExpandVolumeRequest, NodeGetCapabilitiesRequest, NodeGetVolumeStatsRequest,
    NodeGetVolumeStatsResponse, NodePublishVolumeRequest, NodeStageVolumeRequest,
    NodeUnpublishVolumeRequest, NodeUnstageVolumeRequest, VolumeCapability,
};
use sha2::{Digest, Sha256};
use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::host_files::HostFiles;

/// The kubelet root the driver is configured with (`--kubelet-root`, the chart's default).
pub const KUBELET_ROOT: &str = r"C:\var\lib\kubelet";

/// The root kubelet itself uses in the paths it sends (Windows kubelets are commonly started with
/// `--root-dir=c:\var\lib\kubelet`; the driver must accept either spelling).
pub const KUBELET_PATH_ROOT: &str = r"c:\var\lib\kubelet";

/// `<root>\plugins\kubernetes.io\csi\<driver>\<sha256(handle)>\globalmount`.
pub fn staging_path(root: &str, driver: &str, volume_handle: &str) -> String {
    let sha = Sha256::digest(volume_handle.as_bytes());
    let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
    format!(r"{root}\plugins\kubernetes.io\csi\{driver}\{hex}\globalmount")
}

/// `<root>\pods\<uid>\volumes\kubernetes.io~csi\<volume name>\mount`.
pub fn publish_path(root: &str, pod_uid: &str, volume_name: &str) -> String {
    format!(r"{root}\pods\{pod_uid}\volumes\kubernetes.io~csi\{volume_name}\mount")
}

/// The driver's socket as kubelet sees it on the host: `<root>\plugins\<driver>\csi.sock` (node-driver-registrar's
/// `--kubelet-registration-path`).
pub fn plugin_socket_path(root: &str, driver: &str) -> String {
    format!(r"{root}\plugins\{driver}\csi.sock")
}

/// The registration socket node-driver-registrar creates for kubelet's plugin watcher:
/// `<root>\plugins_registry\<driver>-reg.sock`.
pub fn registration_socket_path(root: &str, driver: &str) -> String {
    format!(r"{root}\plugins_registry\{driver}-reg.sock")
}

/// The parent of a Windows path (`a\b\c` → `a\b`).
pub fn parent(path: &str) -> &str {
    path.rsplit_once('\\').map_or(path, |(p, _)| p)
}

/// A pod, as far as its volumes are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.serviceAccountName`.
    pub service_account: String,
}

impl Pod {
    /// A pod with a UID derived from its namespace and name (stable across runs, UUID-shaped).
    pub fn new(namespace: &str, name: &str) -> Pod {
        let h = Sha256::digest(format!("{namespace}/{name}").as_bytes());
        let x: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
        let uid = format!(
            "{}-{}-{}-{}-{}",
            &x[0..8],
            &x[8..12],
            &x[12..16],
            &x[16..20],
            &x[20..32]
        );
        Pod {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            uid,
            service_account: "default".to_owned(),
        }
    }

    /// The attributes kubelet adds to NodePublishVolume's volume_context when the CSIDriver has
    /// `podInfoOnMount: true`.
    pub fn pod_info(&self, ephemeral: bool) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("csi.storage.k8s.io/pod.name".to_owned(), self.name.clone()),
            (
                "csi.storage.k8s.io/pod.namespace".to_owned(),
                self.namespace.clone(),
            ),
            ("csi.storage.k8s.io/pod.uid".to_owned(), self.uid.clone()),
            (
                "csi.storage.k8s.io/serviceAccount.name".to_owned(),
                self.service_account.clone(),
            ),
            (
                "csi.storage.k8s.io/ephemeral".to_owned(),
                ephemeral.to_string(),
            ),
        ])
    }
}

/// A CSI volume as kubelet knows it: a PersistentVolume's `spec.csi`, or a pod's inline `csi` volume.
#[derive(Debug, Clone)]
pub struct Volume {
    /// The PV name, or the pod's volume name for an inline volume (the `<volume name>` of the publish path).
    pub name: String,
    /// `volumeHandle` (inline: kubelet makes `csi-<sha256(pod uid + volume name)>`).
    pub handle: String,
    /// `volumeAttributes`.
    pub attributes: BTreeMap<String, String>,
    /// `nodeStageSecretRef` contents.
    pub stage_secrets: BTreeMap<String, String>,
    /// `nodePublishSecretRef` contents.
    pub publish_secrets: BTreeMap<String, String>,
    /// `fsType`.
    pub fs_type: String,
    /// The PV's `mountOptions` (the capability's `mount_flags`).
    pub mount_flags: Vec<String>,
    /// The pod mounts it read-only.
    pub read_only: bool,
    /// Access mode.
    pub access_mode: Mode,
    /// An inline ephemeral volume (no stage; publish does everything).
    pub ephemeral: bool,
}

impl Volume {
    /// A PersistentVolume bound to PVC `pvc_namespace/pvc_name`; the attributes get the `csi.storage.k8s.io/pv/name`,
    /// `pvc/name` and `pvc/namespace` keys external-provisioner's `--extra-create-metadata` adds (the subDir
    /// templates use them).
    pub fn persistent(name: &str, handle: &str, pvc_namespace: &str, pvc_name: &str) -> Volume {
        let attributes = BTreeMap::from([
            ("csi.storage.k8s.io/pv/name".to_owned(), name.to_owned()),
            (
                "csi.storage.k8s.io/pvc/name".to_owned(),
                pvc_name.to_owned(),
            ),
            (
                "csi.storage.k8s.io/pvc/namespace".to_owned(),
                pvc_namespace.to_owned(),
            ),
        ]);
        Volume {
            name: name.to_owned(),
            handle: handle.to_owned(),
            attributes,
            stage_secrets: BTreeMap::new(),
            publish_secrets: BTreeMap::new(),
            fs_type: String::new(),
            mount_flags: Vec::new(),
            read_only: false,
            access_mode: Mode::MultiNodeMultiWriter,
            ephemeral: false,
        }
    }

    /// An inline ephemeral volume named `volume_name` in `pod`'s spec; the handle is what kubelet generates.
    pub fn inline(pod: &Pod, volume_name: &str) -> Volume {
        let h = Sha256::digest(format!("{}{volume_name}", pod.uid).as_bytes());
        let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
        Volume {
            name: volume_name.to_owned(),
            handle: format!("csi-{hex}"),
            attributes: BTreeMap::new(),
            stage_secrets: BTreeMap::new(),
            publish_secrets: BTreeMap::new(),
            fs_type: String::new(),
            mount_flags: Vec::new(),
            read_only: false,
            access_mode: Mode::SingleNodeWriter,
            ephemeral: true,
        }
    }

    /// Adds a volume attribute.
    pub fn attr(mut self, key: &str, value: &str) -> Volume {
        self.attributes.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Adds a node-stage secret.
    pub fn stage_secret(mut self, key: &str, value: &str) -> Volume {
        self.stage_secrets.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Names the node-stage Secret as the node-publish Secret too (a StorageClass's `node-publish-secret-name` equal to
    /// its `node-stage-secret-name`): what SMB credential rotation needs (`driver/src/smb/rotate.rs`).
    pub fn publish_stage_secret(mut self) -> Volume {
        self.publish_secrets = self.stage_secrets.clone();
        self
    }

    /// Changes `key` in the Secret this volume names (node-stage, and node-publish where it names the same Secret):
    /// what kubelet reads at its next call.
    pub fn update_secret(&mut self, key: &str, value: &str) {
        for secrets in [&mut self.stage_secrets, &mut self.publish_secrets] {
            if let Some(v) = secrets.get_mut(key) {
                *v = value.to_owned();
            }
        }
    }

    /// Sets the access mode.
    pub fn mode(mut self, mode: Mode) -> Volume {
        self.access_mode = mode;
        self
    }

    fn capability(&self) -> VolumeCapability {
        VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume {
                fs_type: self.fs_type.clone(),
                mount_flags: self.mount_flags.clone(),
                volume_mount_group: String::new(),
            })),
            access_mode: Some(AccessMode {
                mode: self.access_mode as i32,
            }),
        }
    }
}

/// kubelet's retry policy for a failed volume operation: the same call again after an exponential backoff
/// (kubelet: 500 ms doubling up to 2 min 2 s, indefinitely; here bounded and scaled down so a test fails
/// instead of hanging).
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts in total (1 = no retry).
    pub attempts: u32,
    /// Backoff before the second attempt; doubles after each failure.
    pub backoff: Duration,
    /// Per-call deadline sent to the driver (kubelet uses 2 minutes for stage/publish).
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 6,
            backoff: Duration::from_millis(25),
            timeout: Duration::from_secs(30),
        }
    }
}

/// One CSI call kubelet made (an attempt, when retried).
#[derive(Debug, Clone)]
pub struct CallRecord {
    /// The CSI method.
    pub rpc: &'static str,
    /// The volume handle, if the call is about a volume.
    pub volume: String,
    /// Attempt number (1-based).
    pub attempt: u32,
    /// How long the call took.
    pub duration: Duration,
    /// `None` on success, else the gRPC code and message.
    pub error: Option<(tonic::Code, String)>,
}

/// The current connection to the driver's CSI endpoint. Cloning shares it; [`CsiConn::replace`] swaps in a new
/// channel after a driver restart (whose TCP port may differ under Wine).
#[derive(Debug, Clone)]
pub struct CsiConn(Arc<RwLock<Channel>>);

impl CsiConn {
    /// A lazily connecting channel to `unix:///path` or `tcp://127.0.0.1:PORT`.
    pub fn connect(endpoint: &str) -> Result<CsiConn> {
        Ok(CsiConn(Arc::new(RwLock::new(crate::platform::channel(
            endpoint,
        )?))))
    }

    /// Points this connection (and every clone) at `endpoint`.
    pub fn replace(&self, endpoint: &str) -> Result<()> {
        let ch = crate::platform::channel(endpoint)?;
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = ch;
        Ok(())
    }

    /// The channel.
    pub fn channel(&self) -> Channel {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A CSI Identity client.
    pub fn identity(&self) -> IdentityClient<Channel> {
        IdentityClient::new(self.channel())
    }

    /// A CSI Node client.
    pub fn node(&self) -> NodeClient<Channel> {
        NodeClient::new(self.channel())
    }
}

#[derive(Debug, Default)]
struct KubeletState {
    /// Volume handles kubelet has staged (its "actual state of world" device mounts).
    staged: BTreeSet<String>,
    /// (pod uid, volume name) published.
    published: BTreeSet<(String, String)>,
    calls: Vec<CallRecord>,
}

/// kubelet's volume manager for one node, talking CSI to the driver and writing its own files (`vol_data.json`)
/// on the host through `host` (the simulator's admin interface, or the node's own filesystem: [`HostFiles`]).
#[derive(Debug, Clone)]
pub struct Kubelet {
    conn: CsiConn,
    driver: String,
    root: String,
    retry: Retry,
    state: Arc<Mutex<KubeletState>>,
}

fn status_err(rpc: &'static str, s: &tonic::Status) -> Error {
    Error::Csi {
        rpc,
        code: s.code(),
        message: s.message().to_owned(),
    }
}

fn hash(map: &BTreeMap<String, String>) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

impl Kubelet {
    /// A kubelet for `driver`, sending paths under [`KUBELET_PATH_ROOT`].
    pub fn new(conn: CsiConn, driver: &str) -> Kubelet {
        Kubelet {
            conn,
            driver: driver.to_owned(),
            root: KUBELET_PATH_ROOT.to_owned(),
            retry: Retry::default(),
            state: Arc::default(),
        }
    }

    /// Changes the retry policy.
    pub fn with_retry(mut self, retry: Retry) -> Kubelet {
        self.retry = retry;
        self
    }

    /// The CSI connection.
    pub fn conn(&self) -> &CsiConn {
        &self.conn
    }

    /// The staging path kubelet uses for `volume`.
    pub fn staging_path(&self, volume: &Volume) -> String {
        staging_path(&self.root, &self.driver, &volume.handle)
    }

    /// The publish path kubelet uses for `volume` in `pod`.
    pub fn publish_path(&self, pod: &Pod, volume: &Volume) -> String {
        publish_path(&self.root, &pod.uid, &volume.name)
    }

    /// Every CSI call made so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.lock().calls.clone()
    }

    /// Forgets every call made so far.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// What a node reboot does to kubelet: it restarts with no volume mounted in its books, so every running pod's
    /// volumes are staged and published again.
    pub fn restart(&self) {
        let mut st = self.lock();
        st.staged.clear();
        st.published.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KubeletState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `call` with kubelet's retry policy, recording each attempt.
    async fn call<T, F, Fut>(
        &self,
        rpc: &'static str,
        volume: &str,
        attempts: u32,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut(NodeClient<Channel>, Duration) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut backoff = self.retry.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let start = Instant::now();
            let res = call(self.conn.node(), self.retry.timeout).await;
            let record = CallRecord {
                rpc,
                volume: volume.to_owned(),
                attempt,
                duration: start.elapsed(),
                error: res
                    .as_ref()
                    .err()
                    .map(|s| (s.code(), s.message().to_owned())),
            };
            self.lock().calls.push(record);
            match res {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if attempt >= attempts => return Err(status_err(rpc, &s)),
                Err(_) => {
                    // kubelet's exponential backoff between attempts of a failed operation (not synchronisation).
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
    }

    /// One attempt of `call`, recorded as attempt number `attempt`.
    async fn call_once<T, F, Fut>(
        &self,
        rpc: &'static str,
        volume: &str,
        attempt: u32,
        call: F,
    ) -> Result<T>
    where
        F: FnOnce(NodeClient<Channel>, Duration) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let start = Instant::now();
        let res = call(self.conn.node(), self.retry.timeout).await;
        self.lock().calls.push(CallRecord {
            rpc,
            volume: volume.to_owned(),
            attempt,
            duration: start.elapsed(),
            error: res
                .as_ref()
                .err()
                .map(|s| (s.code(), s.message().to_owned())),
        });
        res.map(tonic::Response::into_inner)
            .map_err(|s| status_err(rpc, &s))
    }

    /// A whole kubelet operation (its own file steps and the CSI call) under kubelet's retry policy; `op` gets the
    /// 1-based attempt number.
    async fn retried<F, Fut>(&self, mut op: F) -> Result<()>
    where
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        let mut backoff = self.retry.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match op(attempt).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= self.retry.attempts => return Err(e),
                Err(_) => {
                    // kubelet's exponential backoff between attempts of a failed operation (not synchronisation).
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
    }

    async fn supports_stage(&self) -> Result<bool> {
        let caps = self
            .call(
                "NodeGetCapabilities",
                "",
                self.retry.attempts,
                |mut c, t| async move {
                    let mut req = tonic::Request::new(NodeGetCapabilitiesRequest {});
                    req.set_timeout(t);
                    c.node_get_capabilities(req).await
                },
            )
            .await?;
        Ok(caps.capabilities.iter().any(|c| match &c.r#type {
            Some(csi::v1::node_service_capability::Type::Rpc(r)) => {
                r.r#type == NodeCap::StageUnstageVolume as i32
            }
            _ => false,
        }))
    }

    fn stage_request(&self, volume: &Volume) -> NodeStageVolumeRequest {
        NodeStageVolumeRequest {
            volume_id: volume.handle.clone(),
            publish_context: HashMap::new(),
            staging_target_path: self.staging_path(volume),
            volume_capability: Some(volume.capability()),
            secrets: hash(&volume.stage_secrets),
            volume_context: hash(&volume.attributes),
        }
    }

    /// kubelet's own steps before NodeStage (MountDevice): `MkdirAllWithPathCheck(staging path)`, then
    /// `vol_data.json` in its parent.
    async fn prepare_staging(&self, host: &impl HostFiles, volume: &Volume) -> Result<()> {
        let staging = self.staging_path(volume);
        mkdir_all_with_path_check(host, &staging).await?;
        let data = serde_json::json!({"driverName": self.driver, "volumeHandle": volume.handle});
        host.write_file(
            &format!(r"{}\vol_data.json", parent(&staging)),
            &data.to_string(),
        )
        .await?;
        Ok(())
    }

    /// One MountDevice attempt: kubelet's files, `NodeStageVolume`, and `removeMountDir` after a final error.
    async fn stage_attempt(
        &self,
        host: &impl HostFiles,
        volume: &Volume,
        attempt: u32,
    ) -> Result<()> {
        self.prepare_staging(host, volume).await?;
        let req = self.stage_request(volume);
        let res = self
            .call_once("NodeStageVolume", &volume.handle, attempt, |mut c, t| {
                let mut r = tonic::Request::new(req.clone());
                r.set_timeout(t);
                async move { c.node_stage_volume(r).await }
            })
            .await;
        if let Err(e) = &res
            && is_final(e)
        {
            remove_mount_dir(host, &self.staging_path(volume)).await?;
        }
        res.map(drop)
    }

    /// One `NodeStageVolume` attempt (after kubelet's own files), no retry: to crash the driver in the middle of it.
    pub async fn stage_once(&self, host: &impl HostFiles, volume: &Volume) -> Result<()> {
        self.stage_attempt(host, volume, 1).await
    }

    /// kubelet's MountDevice: `NodeGetCapabilities`, then (with `STAGE_UNSTAGE`) the staging path and
    /// `vol_data.json`, and `NodeStageVolume`, the whole retried. A no-op when kubelet already staged it.
    pub async fn mount_device(&self, host: &impl HostFiles, volume: &Volume) -> Result<()> {
        if volume.ephemeral || self.lock().staged.contains(&volume.handle) {
            return Ok(());
        }
        if self.supports_stage().await? {
            self.retried(|attempt| self.stage_attempt(host, volume, attempt))
                .await?;
        }
        self.lock().staged.insert(volume.handle.clone());
        Ok(())
    }

    /// kubelet's SetUp for one pod: `NodeGetCapabilities`, the publish path's parent (with `vol_data.json`), then
    /// `NodePublishVolume` with the pod-info attributes (`removeMountDir` after a final error), the whole retried.
    /// Returns the publish path.
    pub async fn set_up(
        &self,
        host: &impl HostFiles,
        pod: &Pod,
        volume: &Volume,
    ) -> Result<String> {
        let staged = self.supports_stage().await? && !volume.ephemeral;
        let target = self.publish_path(pod, volume);
        let mut ctx = volume.attributes.clone();
        ctx.extend(pod.pod_info(volume.ephemeral));
        let req = NodePublishVolumeRequest {
            volume_id: volume.handle.clone(),
            publish_context: HashMap::new(),
            staging_target_path: if staged {
                self.staging_path(volume)
            } else {
                String::new()
            },
            target_path: target.clone(),
            volume_capability: Some(volume.capability()),
            readonly: volume.read_only,
            secrets: hash(&volume.publish_secrets),
            volume_context: hash(&ctx),
        };
        self.retried(|attempt| {
            let req = req.clone();
            let target = target.clone();
            async move {
                let data = serde_json::json!({"driverName": self.driver, "volumeHandle": volume.handle, "specVolID": volume.name});
                host.write_file(
                    &format!(r"{}\vol_data.json", parent(&target)),
                    &data.to_string(),
                )
                .await?;
                let res = self
                    .call_once("NodePublishVolume", &volume.handle, attempt, |mut c, t| {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(t);
                        async move { c.node_publish_volume(r).await }
                    })
                    .await;
                if let Err(e) = &res
                    && is_final(e)
                {
                    remove_mount_dir(host, &target).await?;
                }
                res.map(drop)
            }
        })
        .await?;
        self.lock()
            .published
            .insert((pod.uid.clone(), volume.name.clone()));
        Ok(target)
    }

    /// kubelet's periodic remount of a mounted volume when the CSIDriver says `requiresRepublish` (each pod sync,
    /// every 1–1.5 min: `MarkRemountRequired`, then SetUp again): `NodePublishVolume` on the same target, without an
    /// unpublish, with the node-publish Secret as it is now (`shared/reference/kubelet-csi-paths.md` §6).
    pub async fn republish(
        &self,
        host: &impl HostFiles,
        pod: &Pod,
        volume: &Volume,
    ) -> Result<String> {
        self.set_up(host, pod, volume).await
    }

    /// Starts `pod` with `volume`: [`Kubelet::mount_device`] then [`Kubelet::set_up`]. Returns the publish path.
    pub async fn mount(&self, host: &impl HostFiles, pod: &Pod, volume: &Volume) -> Result<String> {
        self.mount_device(host, volume).await?;
        self.set_up(host, pod, volume).await
    }

    /// kubelet's TearDown for one pod: `NodeUnpublishVolume`, then `removeMountDir` of the publish path, retried.
    pub async fn tear_down(&self, host: &impl HostFiles, pod: &Pod, volume: &Volume) -> Result<()> {
        let target = self.publish_path(pod, volume);
        let req = NodeUnpublishVolumeRequest {
            volume_id: volume.handle.clone(),
            target_path: target.clone(),
        };
        self.retried(|attempt| {
            let req = req.clone();
            let target = target.clone();
            async move {
                self.call_once(
                    "NodeUnpublishVolume",
                    &volume.handle,
                    attempt,
                    |mut c, t| {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(t);
                        async move { c.node_unpublish_volume(r).await }
                    },
                )
                .await?;
                remove_mount_dir(host, &target).await
            }
        })
        .await?;
        self.lock()
            .published
            .remove(&(pod.uid.clone(), volume.name.clone()));
        Ok(())
    }

    /// kubelet's UnmountDevice: `NodeGetCapabilities` then `NodeUnstageVolume` and `removeMountDir` of the staging
    /// path, retried.
    pub async fn unmount_device(&self, host: &impl HostFiles, volume: &Volume) -> Result<()> {
        if !volume.ephemeral && self.supports_stage().await? {
            let staging = self.staging_path(volume);
            let req = NodeUnstageVolumeRequest {
                volume_id: volume.handle.clone(),
                staging_target_path: staging.clone(),
            };
            self.retried(|attempt| {
                let req = req.clone();
                let staging = staging.clone();
                async move {
                    self.call_once("NodeUnstageVolume", &volume.handle, attempt, |mut c, t| {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(t);
                        async move { c.node_unstage_volume(r).await }
                    })
                    .await?;
                    remove_mount_dir(host, &staging).await
                }
            })
            .await?;
        }
        self.lock().staged.remove(&volume.handle);
        Ok(())
    }

    /// Stops `pod`'s use of `volume`: [`Kubelet::tear_down`], then [`Kubelet::unmount_device`] when no other pod
    /// on the node still has the volume published.
    pub async fn unmount(&self, host: &impl HostFiles, pod: &Pod, volume: &Volume) -> Result<()> {
        self.tear_down(host, pod, volume).await?;
        let in_use = self.lock().published.iter().any(|(_, v)| *v == volume.name);
        if !in_use {
            self.unmount_device(host, volume).await?;
        }
        Ok(())
    }

    /// `NodeGetVolumeStats` for `volume` as published in `pod` (kubelet's periodic volume metrics).
    pub async fn stats(&self, pod: &Pod, volume: &Volume) -> Result<NodeGetVolumeStatsResponse> {
        let req = NodeGetVolumeStatsRequest {
            volume_id: volume.handle.clone(),
            volume_path: self.publish_path(pod, volume),
            staging_target_path: if volume.ephemeral {
                String::new()
            } else {
                self.staging_path(volume)
            },
        };
        self.call("NodeGetVolumeStats", &volume.handle, 1, |mut c, t| {
            let mut r = tonic::Request::new(req.clone());
            r.set_timeout(t);
            async move { c.node_get_volume_stats(r).await }
        })
        .await
    }

    /// Online expansion as kubelet does it after the controller grew the PV: `NodeExpandVolume` with the pod's
    /// publish path as volume_path, the staging path, and the new size. Returns the capacity the driver reports.
    pub async fn expand(&self, pod: &Pod, volume: &Volume, required_bytes: i64) -> Result<i64> {
        let req = NodeExpandVolumeRequest {
            volume_id: volume.handle.clone(),
            volume_path: self.publish_path(pod, volume),
            capacity_range: Some(CapacityRange {
                required_bytes,
                limit_bytes: 0,
            }),
            staging_target_path: self.staging_path(volume),
            volume_capability: Some(volume.capability()),
            secrets: HashMap::new(),
        };
        let resp = self
            .call(
                "NodeExpandVolume",
                &volume.handle,
                self.retry.attempts,
                |mut c, t| {
                    let mut r = tonic::Request::new(req.clone());
                    r.set_timeout(t);
                    async move { c.node_expand_volume(r).await }
                },
            )
            .await?;
        Ok(resp.capacity_bytes)
    }
}

/// Whether kubelet treats a CSI error as final (`pkg/volume/csi/csi_client.go` `isFinalError`): every gRPC code but
/// Canceled, DeadlineExceeded, Unavailable, ResourceExhausted and Aborted (the operation may still be in progress).
/// Only after a final error does kubelet remove the mount directory.
pub fn is_final(e: &Error) -> bool {
    !matches!(
        e.csi_code(),
        None | Some(
            tonic::Code::Cancelled
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Unavailable
                | tonic::Code::ResourceExhausted
                | tonic::Code::Aborted
        )
    )
}

/// kubelet's `filesystem.MkdirAllWithPathCheck` (`pkg/util/filesystem/defaultfs.go`): an existing directory, or on
/// Windows an existing symlink or reparse point, is accepted as it is; anything else is created with `MkdirAll`.
pub async fn mkdir_all_with_path_check(host: &impl HostFiles, path: &str) -> Result<()> {
    match host.lstat(path).await?.as_deref() {
        Some("directory" | "link") => Ok(()),
        Some(other) => Err(Error::Check(format!(
            "path {path} exists but is not a directory ({other})"
        ))),
        None => Ok(host.mkdir(path).await?),
    }
}

/// kubelet's `removeMountDir` (`pkg/volume/csi/csi_mounter.go`): unless `IsLikelyNotMountPoint` says `path` is a
/// mount point (Windows: a symlink or reparse point), remove it, the `vol_data.json` beside it and their parent
/// directory (each only if it is there).
pub async fn remove_mount_dir(host: &impl HostFiles, path: &str) -> Result<()> {
    if host.lstat(path).await?.as_deref() == Some("link") {
        return Ok(());
    }
    let dir = parent(path);
    for p in [
        path.to_owned(),
        format!(r"{dir}\vol_data.json"),
        dir.to_owned(),
    ] {
        if host.lstat(&p).await?.is_some() {
            host.remove(&p).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_path_is_sha256_of_the_handle_under_the_driver() {
        // sha256("vol-1"), computed independently.
        let p = staging_path(KUBELET_PATH_ROOT, "wincsi.csi.io", "vol-1");
        assert_eq!(
            p,
            r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49\globalmount"
        );
        assert!(p.ends_with(r"\globalmount"));
        assert_eq!(
            parent(parent(&p)).rsplit('\\').next(),
            Some("wincsi.csi.io")
        );
    }

    #[test]
    fn publish_and_registration_paths() {
        assert_eq!(
            publish_path(KUBELET_PATH_ROOT, "uid-1", "pv-a"),
            r"c:\var\lib\kubelet\pods\uid-1\volumes\kubernetes.io~csi\pv-a\mount"
        );
        assert_eq!(
            registration_socket_path(KUBELET_ROOT, "wincsi.csi.io"),
            r"C:\var\lib\kubelet\plugins_registry\wincsi.csi.io-reg.sock"
        );
        assert_eq!(
            plugin_socket_path(KUBELET_ROOT, "wincsi.csi.io"),
            r"C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock"
        );
    }

    #[test]
    fn final_errors_are_kubelets() {
        let csi = |code| Error::Csi {
            rpc: "NodeStageVolume",
            code,
            message: String::new(),
        };
        for code in [
            tonic::Code::FailedPrecondition,
            tonic::Code::Internal,
            tonic::Code::InvalidArgument,
            tonic::Code::NotFound,
            tonic::Code::AlreadyExists,
        ] {
            assert!(is_final(&csi(code)), "{code:?}");
        }
        for code in [
            tonic::Code::Cancelled,
            tonic::Code::DeadlineExceeded,
            tonic::Code::Unavailable,
            tonic::Code::ResourceExhausted,
            tonic::Code::Aborted,
        ] {
            assert!(!is_final(&csi(code)), "{code:?}");
        }
        assert!(!is_final(&Error::Check("not a gRPC status".into())));
    }

    #[test]
    fn pod_info_has_every_pod_info_on_mount_key() {
        let pod = Pod::new("team-a", "web-0");
        let info = pod.pod_info(false);
        assert_eq!(info["csi.storage.k8s.io/pod.name"], "web-0");
        assert_eq!(info["csi.storage.k8s.io/pod.namespace"], "team-a");
        assert_eq!(info["csi.storage.k8s.io/pod.uid"], pod.uid);
        assert_eq!(info["csi.storage.k8s.io/serviceAccount.name"], "default");
        assert_eq!(info["csi.storage.k8s.io/ephemeral"], "false");
        assert_eq!(pod.uid.len(), 36);
    }
}
