//! A recording fake of the [`Host`] port (in the style of youki's syscall test double): an in-memory model of the
//! host's kubelet tree, SMB shares and global mappings that records every call, with scriptable state and failure
//! injection ("fail the Nth call of X", "hang from call N on" to simulate a driver killed between two host calls).
//!
//! Semantics follow csi-proxy v1 (see the reference): `PathExists` is `Lstat`, `IsSymlink` is true only when the
//! target resolves, `Mkdir` is `MkdirAll`, non-forced `Rmdir` removes only a link or an empty directory,
//! `CreateSymlink` fails on an existing link path, `NewSmbGlobalMapping` keeps an OK reachable mapping and re-creates
//! a broken one and fails with 1219 when the server is mapped under another principal, `RemoveSmbGlobalMapping` fails
//! when there is no mapping. Only compiled for tests or with the `test-util` feature.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, Semaphore};

use super::{DiskIds, DiskLocation, HostPath, IscsiAuth, Portal, Secret, SmbCredential, UncPath};
use super::{Host, HostError, HostErrorKind, HostOp, HostResult};
use crate::iscsi::fake::{BlockCall, BlockModel};
use crate::locks::Deadline;

/// One recorded host call (paths as the driver sent them; never a password).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `PathExists(path)`.
    PathExists(String),
    /// `Mkdir(path)`.
    Mkdir(String),
    /// `Rmdir(path, force)`.
    Rmdir(String, bool),
    /// `CreateSymlink(link → points_to)`.
    CreateSymlink {
        /// The link path.
        link: String,
        /// What it points to.
        points_to: String,
    },
    /// `IsSymlink(path)`.
    IsSymlink(String),
    /// `NewSmbGlobalMapping(remote, link, principal)`.
    NewSmbGlobalMapping {
        /// The remote path.
        remote: String,
        /// The link path, if any.
        link: Option<String>,
        /// The principal name, if any.
        principal: Option<String>,
    },
    /// `RemoveSmbGlobalMapping(remote)`.
    RemoveSmbGlobalMapping(String),
    /// A block-storage or iSCSI call (see [`crate::iscsi::fake`]).
    Block(BlockCall),
}

impl Call {
    /// The operation of this call.
    pub fn op(&self) -> HostOp {
        match self {
            Self::PathExists(_) => HostOp::PathExists,
            Self::Mkdir(_) => HostOp::Mkdir,
            Self::Rmdir(..) => HostOp::Rmdir,
            Self::CreateSymlink { .. } => HostOp::CreateSymlink,
            Self::IsSymlink(_) => HostOp::IsSymlink,
            Self::NewSmbGlobalMapping { .. } => HostOp::NewSmbGlobalMapping,
            Self::RemoveSmbGlobalMapping(_) => HostOp::RemoveSmbGlobalMapping,
            Self::Block(c) => c.op(),
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PathExists(p) => write!(f, "PathExists({p})"),
            Self::Mkdir(p) => write!(f, "Mkdir({p})"),
            Self::Rmdir(p, force) => write!(f, "Rmdir({p}, force={force})"),
            Self::CreateSymlink { link, points_to } => {
                write!(f, "CreateSymlink({link} -> {points_to})")
            }
            Self::IsSymlink(p) => write!(f, "IsSymlink({p})"),
            Self::NewSmbGlobalMapping {
                remote,
                link,
                principal,
            } => write!(
                f,
                "NewSmbGlobalMapping({remote}, link={}, user={})",
                link.as_deref().unwrap_or("-"),
                principal.as_deref().unwrap_or("-")
            ),
            Self::RemoveSmbGlobalMapping(r) => write!(f, "RemoveSmbGlobalMapping({r})"),
            Self::Block(c) => write!(f, "{c}"),
        }
    }
}

/// The status of a fake global mapping (a subset of `MSFT_SmbGlobalMapping.Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MappingStatus {
    /// Connected.
    Ok,
    /// Disconnected (e.g. after a reboot).
    Disconnected,
}

/// A fake global mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The status.
    pub status: MappingStatus,
    /// The principal it was created with.
    pub principal: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    Dir,
    /// A link to a lower-cased local path.
    LocalLink(String),
    /// A link to a remote `\\server\share` root key plus lower-cased components.
    RemoteLink(String, Vec<String>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Loc {
    Local(String),
    Remote(String, Vec<String>),
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    local: BTreeMap<String, Entry>,
    /// Share root key → directories (lower-cased, `\`-joined relative paths).
    shares: BTreeMap<String, BTreeSet<String>>,
    /// Share root key → the password it requires (None: any credential works).
    share_passwords: BTreeMap<String, String>,
    mappings: BTreeMap<String, Mapping>,
    failures: Vec<(HostOp, usize, HostErrorKind)>,
    hang_after: Option<usize>,
    holds: Vec<(HostOp, usize)>,
    disconnected_blocks_create: bool,
    block: BlockModel,
}

/// The recording fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct FakeHost {
    state: Arc<Mutex<State>>,
    hung: Arc<Notify>,
    released: Arc<Semaphore>,
}

impl Default for FakeHost {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            hung: Arc::default(),
            released: Arc::new(Semaphore::new(0)),
        }
    }
}

/// Lower-cased, without a trailing `\`; a drive-less `\var\…` (kubelet's spelling) gets `c:`.
fn key(path: &str) -> String {
    let path = path.replace('/', "\\");
    let path = path.trim_end_matches('\\').to_ascii_lowercase();
    if path.starts_with('\\') && !path.starts_with("\\\\") {
        format!("c:{path}")
    } else {
        path
    }
}

fn parent_and_name(path: &str) -> Option<(&str, &str)> {
    path.rsplit_once('\\')
}

impl State {
    fn remote_exists(&self, root: &str, rel: &[String]) -> bool {
        let mapped = self
            .mappings
            .get(root)
            .is_some_and(|m| m.status == MappingStatus::Ok);
        mapped
            && self
                .shares
                .get(root)
                .is_some_and(|dirs| rel.is_empty() || dirs.contains(&rel.join("\\")))
    }

    /// Resolve `path` (lower-case) following links at every step; None when any step does not exist.
    fn resolve(&self, path: &str, depth: usize) -> Option<Loc> {
        if depth > 16 {
            return None;
        }
        let mut parts = path.split('\\').filter(|p| !p.is_empty());
        let mut cur = Loc::Local(parts.next()?.to_owned());
        for part in parts {
            cur = match cur {
                Loc::Local(p) => {
                    let next = format!("{p}\\{part}");
                    match self.local.get(&next)? {
                        Entry::Dir => Loc::Local(next),
                        Entry::LocalLink(t) => self.resolve(t, depth + 1)?,
                        Entry::RemoteLink(root, rel) => {
                            if !self.remote_exists(root, rel) {
                                return None;
                            }
                            Loc::Remote(root.clone(), rel.clone())
                        }
                    }
                }
                Loc::Remote(root, mut rel) => {
                    rel.push(part.to_owned());
                    if !self.remote_exists(&root, &rel) {
                        return None;
                    }
                    Loc::Remote(root, rel)
                }
            };
        }
        Some(cur)
    }

    /// `Lstat`: the entry at `path` without following a final link. Remote entries are reported as directories.
    fn lstat(&self, path: &str) -> Option<Entry> {
        let (parent, name) = parent_and_name(path)?;
        match self.resolve(parent, 0)? {
            Loc::Local(p) => self.local.get(&format!("{p}\\{name}")).cloned(),
            Loc::Remote(root, mut rel) => {
                rel.push(name.to_owned());
                self.remote_exists(&root, &rel).then_some(Entry::Dir)
            }
        }
    }

    /// kubelet creates the parents of staging and target paths; the fake does the same when a link is made.
    fn ensure_parents(&mut self, path: &str) {
        let parts: Vec<&str> = path.split('\\').collect();
        for i in 2..parts.len() {
            self.local
                .entry(parts[..i].join("\\"))
                .or_insert(Entry::Dir);
        }
    }

    fn local_children(&self, path: &str) -> bool {
        let prefix = format!("{path}\\");
        self.local.keys().any(|k| k.starts_with(&prefix))
    }
}

impl FakeHost {
    /// An empty host (only drives exist).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Add a share `\\server\share` (with optional directories below it, `a\b` style).
    pub fn add_share(&self, root: &str, dirs: &[&str]) {
        let mut st = self.lock();
        let set = st.shares.entry(key(&root.replace('/', "\\"))).or_default();
        for d in dirs {
            let d = key(d);
            let parts: Vec<&str> = d.split('\\').collect();
            for i in 1..=parts.len() {
                set.insert(parts[..i].join("\\"));
            }
        }
    }

    /// Make a share accept only `password` (any principal); other passwords fail with logon failure (1326).
    pub fn require_password(&self, root: &str, password: &str) {
        self.lock()
            .share_passwords
            .insert(key(root), password.to_owned());
    }

    /// Create a local directory (and parents), as kubelet would.
    pub fn add_dir(&self, path: &str) {
        let mut st = self.lock();
        let k = key(path);
        let parts: Vec<&str> = k.split('\\').collect();
        for i in 2..=parts.len() {
            st.local.entry(parts[..i].join("\\")).or_insert(Entry::Dir);
        }
    }

    /// Put an existing global mapping in place (as another workload or a previous boot left it).
    pub fn add_mapping(&self, root: &str, status: MappingStatus, principal: Option<&str>) {
        self.lock().mappings.insert(
            key(root),
            Mapping {
                status,
                principal: principal.map(str::to_owned),
            },
        );
    }

    /// Simulate a reboot: every mapping becomes Disconnected; links stay (and no longer resolve).
    pub fn reboot(&self) {
        for m in self.lock().mappings.values_mut() {
            m.status = MappingStatus::Disconnected;
        }
    }

    /// Fail the `nth` (1-based, counted since creation) call of `op` with `kind`, before it has any effect.
    pub fn fail_nth(&self, op: HostOp, nth: usize, kind: HostErrorKind) {
        self.lock().failures.push((op, nth, kind));
    }

    /// From call number `n + 1` on (1-based over all operations), calls never return, as if the driver had been
    /// killed after `n` host calls. Wait for that point with [`Self::hung`].
    pub fn hang_after(&self, n: usize) {
        self.lock().hang_after = Some(n);
    }

    /// Hold the `nth` (1-based, counted since creation) call of `op` after recording it, before it has any effect,
    /// until [`Self::release`] (other calls go on: one operation stuck inside a host call while others run). Wait
    /// for that point with [`Self::hung`].
    pub fn hold_nth(&self, op: HostOp, nth: usize) {
        self.lock().holds.push((op, nth));
    }

    /// Let one held call (see [`Self::hold_nth`]) go on.
    pub fn release(&self) {
        self.released.add_permits(1);
    }

    /// Make a Disconnected mapping block re-creation (Windows error 85) instead of being replaced silently.
    pub fn disconnected_blocks_create(&self, on: bool) {
        self.lock().disconnected_blocks_create = on;
    }

    /// Stop hanging (the "restarted driver" talks to the same host).
    pub fn resume(&self) {
        self.lock().hang_after = None;
    }

    /// Resolves once a call has hung (see [`Self::hang_after`]).
    pub async fn hung(&self) {
        self.hung.notified().await;
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The operations of every call so far.
    pub fn ops(&self) -> Vec<HostOp> {
        self.lock().calls.iter().map(Call::op).collect()
    }

    /// Forget the recorded calls (state is kept).
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The global mappings, by lower-cased root.
    pub fn mappings(&self) -> BTreeMap<String, Mapping> {
        self.lock().mappings.clone()
    }

    /// Every local link, lower-cased path → rendered target.
    pub fn links(&self) -> BTreeMap<String, String> {
        self.lock()
            .local
            .iter()
            .filter_map(|(k, e)| match e {
                Entry::Dir => None,
                Entry::LocalLink(t) => Some((k.clone(), t.clone())),
                Entry::RemoteLink(root, rel) => {
                    let mut t = root.clone();
                    for r in rel {
                        t.push('\\');
                        t.push_str(r);
                    }
                    t.push('\\');
                    Some((k.clone(), t))
                }
            })
            .collect()
    }

    /// Whether a local path exists (not following a final link).
    pub fn exists(&self, path: &str) -> bool {
        self.lock().lstat(&key(path)).is_some()
    }

    /// Whether `path` resolves (following links).
    pub fn resolves(&self, path: &str) -> bool {
        self.lock().resolve(&key(path), 0).is_some()
    }

    /// Whether a directory exists on a share (`root` `\\server\share`, `rel` `a\b`).
    pub fn share_has_dir(&self, root: &str, rel: &str) -> bool {
        self.lock()
            .shares
            .get(&key(root))
            .is_some_and(|d| d.contains(&key(rel)))
    }

    /// Inspect or script the block-storage model (disks, portals, targets, sessions, mounts).
    pub fn with_block<R>(&self, f: impl FnOnce(&mut BlockModel) -> R) -> R {
        f(&mut self.lock().block)
    }

    /// Record a block call, then run `f` on the model (and the local tree) unless a failure was injected.
    async fn block<T>(
        &self,
        call: BlockCall,
        f: impl FnOnce(&mut State) -> HostResult<T>,
    ) -> HostResult<T> {
        // Yield first, so concurrent operations in one test task interleave at every block call.
        tokio::task::yield_now().await;
        self.enter(Call::Block(call)).await?;
        f(&mut self.lock())
    }

    /// Record the call, apply injected failures and hangs.
    async fn enter(&self, call: Call) -> HostResult<()> {
        let op = call.op();
        let (fail, hang, held) = {
            let mut st = self.lock();
            st.calls.push(call);
            let n = st.calls.iter().filter(|c| c.op() == op).count();
            let fail = st
                .failures
                .iter()
                .find(|(o, nth, _)| *o == op && *nth == n)
                .map(|(_, _, k)| *k);
            let held = st.holds.contains(&(op, n));
            (
                fail,
                st.hang_after.is_some_and(|h| st.calls.len() > h),
                held,
            )
        };
        if held {
            self.hung.notify_one();
            // The semaphore is never closed; a closed one would just let the call go on.
            if let Ok(permit) = self.released.acquire().await {
                permit.forget();
            }
        }
        if hang {
            self.hung.notify_one();
            std::future::pending::<()>().await;
        }
        match fail {
            Some(kind) => Err(HostError::new(op, kind, format!("injected {kind:?}"))),
            None => Ok(()),
        }
    }
}

impl Host for FakeHost {
    async fn path_exists(&self, path: &HostPath, _deadline: Deadline) -> HostResult<bool> {
        self.enter(Call::PathExists(path.to_string())).await?;
        Ok(self.lock().lstat(&path.key()).is_some())
    }

    async fn mkdir(&self, path: &HostPath, _deadline: Deadline) -> HostResult<()> {
        self.enter(Call::Mkdir(path.to_string())).await?;
        let mut st = self.lock();
        let k = path.key();
        let parts: Vec<&str> = k.split('\\').collect();
        for i in 2..=parts.len() {
            let prefix = parts[..i].join("\\");
            if st.resolve(&prefix, 0).is_some() {
                continue;
            }
            let (parent, name) = parent_and_name(&prefix).unwrap_or_default();
            match st.resolve(parent, 0) {
                Some(Loc::Local(p)) => {
                    let child = format!("{p}\\{name}");
                    if st.local.contains_key(&child) {
                        // A dangling link is in the way.
                        return Err(HostError::new(
                            HostOp::Mkdir,
                            HostErrorKind::NotFound,
                            "link target not found",
                        ));
                    }
                    st.local.insert(child, Entry::Dir);
                }
                Some(Loc::Remote(root, mut rel)) => {
                    rel.push(name.to_owned());
                    st.shares.entry(root).or_default().insert(rel.join("\\"));
                }
                None => {
                    return Err(HostError::new(
                        HostOp::Mkdir,
                        HostErrorKind::NotFound,
                        "parent not found",
                    ));
                }
            }
        }
        Ok(())
    }

    async fn rmdir(&self, path: &HostPath, force: bool, _deadline: Deadline) -> HostResult<()> {
        self.enter(Call::Rmdir(path.to_string(), force)).await?;
        let mut st = self.lock();
        let k = path.key();
        match st.lstat(&k) {
            None if force => Ok(()),
            None => Err(HostError::new(
                HostOp::Rmdir,
                HostErrorKind::NotFound,
                "the path does not exist",
            )),
            Some(Entry::Dir) if !st.local.contains_key(&k) => Err(HostError::new(
                HostOp::Rmdir,
                HostErrorKind::Other,
                "the fake does not remove remote directories",
            )),
            Some(Entry::Dir) => {
                if st.local_children(&k) {
                    if !force {
                        return Err(HostError::new(
                            HostOp::Rmdir,
                            HostErrorKind::NotEmpty,
                            "the directory is not empty",
                        ));
                    }
                    let prefix = format!("{k}\\");
                    st.local.retain(|p, _| !p.starts_with(&prefix));
                }
                st.local.remove(&k);
                Ok(())
            }
            Some(_) => {
                st.local.remove(&k);
                Ok(())
            }
        }
    }

    async fn create_symlink(
        &self,
        link: &HostPath,
        points_to: &HostPath,
        _deadline: Deadline,
    ) -> HostResult<()> {
        self.enter(Call::CreateSymlink {
            link: link.to_string(),
            points_to: points_to.to_string(),
        })
        .await?;
        let mut st = self.lock();
        if st.lstat(&link.key()).is_some() {
            return Err(HostError::new(
                HostOp::CreateSymlink,
                HostErrorKind::AlreadyExists,
                "the link path exists",
            ));
        }
        st.ensure_parents(&link.key());
        st.local
            .insert(link.key(), Entry::LocalLink(points_to.key()));
        Ok(())
    }

    async fn is_symlink(&self, path: &HostPath, _deadline: Deadline) -> HostResult<bool> {
        self.enter(Call::IsSymlink(path.to_string())).await?;
        let st = self.lock();
        match st.lstat(&path.key()) {
            None => Err(HostError::new(
                HostOp::IsSymlink,
                HostErrorKind::NotFound,
                "the path does not exist",
            )),
            Some(Entry::Dir) => Ok(false),
            Some(_) => Ok(st.resolve(&path.key(), 0).is_some()),
        }
    }

    async fn new_smb_global_mapping(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        credential: Option<&SmbCredential>,
        _deadline: Deadline,
    ) -> HostResult<()> {
        let principal = credential.map(|c| c.principal().to_owned());
        self.enter(Call::NewSmbGlobalMapping {
            remote: remote.to_string(),
            link: link.map(ToString::to_string),
            principal: principal.clone(),
        })
        .await?;
        let op = HostOp::NewSmbGlobalMapping;
        let mut st = self.lock();
        let root = remote.root_key();
        let server = format!("\\\\{}\\", remote.server_key());
        let conflict = st.mappings.iter().any(|(r, m)| {
            r.starts_with(&server)
                && (*r != root || m.status == MappingStatus::Ok)
                && !m
                    .principal
                    .as_deref()
                    .unwrap_or("")
                    .eq_ignore_ascii_case(principal.as_deref().unwrap_or(""))
        });
        if conflict {
            return Err(HostError::new(
                op,
                HostErrorKind::MultipleConnections,
                "error 1219",
            ));
        }
        if !st.shares.contains_key(&root) {
            let server_known = st.shares.keys().any(|r| r.starts_with(&server));
            let kind = if server_known {
                HostErrorKind::NetworkNameNotFound
            } else {
                HostErrorKind::NetworkPathNotFound
            };
            return Err(HostError::new(op, kind, "not found"));
        }
        if let Some(want) = st.share_passwords.get(&root)
            && credential.is_none_or(|c| c.password().expose() != want)
        {
            return Err(HostError::new(
                op,
                HostErrorKind::LogonFailure,
                "error 1326",
            ));
        }
        if st.disconnected_blocks_create
            && st
                .mappings
                .get(&root)
                .is_some_and(|m| m.status != MappingStatus::Ok)
        {
            return Err(HostError::new(op, HostErrorKind::StaleMapping, "error 85"));
        }
        let healthy = st
            .mappings
            .get(&root)
            .is_some_and(|m| m.status == MappingStatus::Ok);
        if !healthy {
            st.mappings.insert(
                root.clone(),
                Mapping {
                    status: MappingStatus::Ok,
                    principal,
                },
            );
        }
        if let Some(link) = link {
            if st.lstat(&link.key()).is_some() {
                return Err(HostError::new(
                    op,
                    HostErrorKind::AlreadyExists,
                    "the link path exists",
                ));
            }
            let rel = remote
                .components()
                .iter()
                .map(|c| c.to_ascii_lowercase())
                .collect();
            st.ensure_parents(&link.key());
            st.local.insert(link.key(), Entry::RemoteLink(root, rel));
        }
        Ok(())
    }

    async fn remove_smb_global_mapping(
        &self,
        remote: &UncPath,
        _deadline: Deadline,
    ) -> HostResult<()> {
        self.enter(Call::RemoveSmbGlobalMapping(remote.to_string()))
            .await?;
        match self.lock().mappings.remove(&remote.root_key()) {
            Some(_) => Ok(()),
            None => Err(HostError::new(
                HostOp::RemoveSmbGlobalMapping,
                HostErrorKind::NotFound,
                "no such mapping",
            )),
        }
    }
    async fn list_disk_locations(&self, _d: Deadline) -> HostResult<BTreeMap<u32, DiskLocation>> {
        self.block(BlockCall::Plain(HostOp::ListDiskLocations), |s| {
            Ok(s.block.list_disk_locations())
        })
        .await
    }

    async fn list_disk_ids(&self, _d: Deadline) -> HostResult<BTreeMap<u32, DiskIds>> {
        self.block(BlockCall::Plain(HostOp::ListDiskIDs), |s| {
            Ok(s.block.list_disk_ids())
        })
        .await
    }

    async fn rescan(&self, _d: Deadline) -> HostResult<()> {
        self.block(BlockCall::Plain(HostOp::Rescan), |s| {
            s.block.rescan();
            Ok(())
        })
        .await
    }

    async fn partition_disk(&self, disk: u32, _d: Deadline) -> HostResult<()> {
        self.block(BlockCall::Disk(HostOp::PartitionDisk, disk), |s| {
            s.block.partition_disk(disk)
        })
        .await
    }

    async fn disk_size(&self, disk: u32, _d: Deadline) -> HostResult<u64> {
        self.block(BlockCall::Disk(HostOp::GetDiskStats, disk), |s| {
            s.block.disk_size(disk)
        })
        .await
    }

    async fn set_disk_online(&self, disk: u32, online: bool, _d: Deadline) -> HostResult<()> {
        self.block(BlockCall::Disk(HostOp::SetDiskState, disk), |s| {
            s.block.set_online(disk, online)
        })
        .await
    }

    async fn is_disk_online(&self, disk: u32, _d: Deadline) -> HostResult<bool> {
        self.block(BlockCall::Disk(HostOp::GetDiskState, disk), |s| {
            s.block.is_online(disk)
        })
        .await
    }

    async fn list_volumes_on_disk(&self, disk: u32, _d: Deadline) -> HostResult<Vec<String>> {
        self.block(BlockCall::Disk(HostOp::ListVolumesOnDisk, disk), |s| {
            s.block.list_volumes(disk)
        })
        .await
    }

    async fn mount_volume(&self, volume_id: &str, path: &HostPath, _d: Deadline) -> HostResult<()> {
        let call = BlockCall::Volume(
            HostOp::MountVolume,
            volume_id.to_owned(),
            Some(path.to_string()),
        );
        self.block(call, |s| {
            let k = path.key();
            let empty_dir = matches!(s.lstat(&k), Some(Entry::Dir)) && !s.local_children(&k);
            s.block.mount(volume_id, &k, empty_dir)
        })
        .await
    }

    async fn unmount_volume(
        &self,
        volume_id: &str,
        path: &HostPath,
        _d: Deadline,
    ) -> HostResult<()> {
        let call = BlockCall::Volume(
            HostOp::UnmountVolume,
            volume_id.to_owned(),
            Some(path.to_string()),
        );
        self.block(call, |s| s.block.unmount(volume_id, &path.key()))
            .await
    }

    async fn is_volume_formatted(&self, volume_id: &str, _d: Deadline) -> HostResult<bool> {
        let call = BlockCall::Volume(HostOp::IsVolumeFormatted, volume_id.to_owned(), None);
        self.block(call, |s| s.block.is_formatted(volume_id)).await
    }

    async fn format_volume(&self, volume_id: &str, _d: Deadline) -> HostResult<()> {
        let call = BlockCall::Volume(HostOp::FormatVolume, volume_id.to_owned(), None);
        self.block(call, |s| s.block.format(volume_id)).await
    }

    async fn resize_volume(&self, volume_id: &str, _size: u64, _d: Deadline) -> HostResult<()> {
        let call = BlockCall::Volume(HostOp::ResizeVolume, volume_id.to_owned(), None);
        self.block(call, |s| s.block.resize(volume_id)).await
    }

    async fn volume_stats(&self, volume_id: &str, _d: Deadline) -> HostResult<(u64, u64)> {
        let call = BlockCall::Volume(HostOp::GetVolumeStats, volume_id.to_owned(), None);
        self.block(call, |s| s.block.stats(volume_id)).await
    }

    async fn volume_id_from_target_path(
        &self,
        path: &HostPath,
        _d: Deadline,
    ) -> HostResult<String> {
        let call = BlockCall::Path(HostOp::GetVolumeIDFromTargetPath, path.to_string());
        self.block(call, |s| {
            let exists = s.lstat(&path.key()).is_some();
            s.block.volume_at(&path.key(), exists)
        })
        .await
    }

    async fn write_volume_cache(&self, volume_id: &str, _d: Deadline) -> HostResult<()> {
        let call = BlockCall::Volume(HostOp::WriteVolumeCache, volume_id.to_owned(), None);
        self.block(call, |s| s.block.flush(volume_id)).await
    }

    async fn add_target_portal(&self, portal: &Portal, _d: Deadline) -> HostResult<()> {
        let call = BlockCall::Iscsi(HostOp::AddTargetPortal, portal.to_string(), None, None);
        self.block(call, |s| s.block.add_portal(portal)).await
    }

    async fn connect_target(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &IscsiAuth,
        _d: Deadline,
    ) -> HostResult<()> {
        let call = BlockCall::Iscsi(
            HostOp::ConnectTarget,
            portal.to_string(),
            Some(iqn.to_owned()),
            Some(auth.mode()),
        );
        self.block(call, |s| s.block.connect(portal, iqn, auth))
            .await
    }

    async fn disconnect_target(&self, portal: &Portal, iqn: &str, _d: Deadline) -> HostResult<()> {
        let call = BlockCall::Iscsi(
            HostOp::DisconnectTarget,
            portal.to_string(),
            Some(iqn.to_owned()),
            None,
        );
        self.block(call, |s| s.block.disconnect(portal, iqn)).await
    }

    async fn get_target_disks(
        &self,
        portal: &Portal,
        iqn: &str,
        _d: Deadline,
    ) -> HostResult<Vec<u32>> {
        let call = BlockCall::Iscsi(
            HostOp::GetTargetDisks,
            portal.to_string(),
            Some(iqn.to_owned()),
            None,
        );
        self.block(call, |s| s.block.target_disks(portal, iqn))
            .await
    }

    async fn set_mutual_chap_secret(&self, secret: &Secret, _d: Deadline) -> HostResult<()> {
        self.block(BlockCall::Plain(HostOp::SetMutualChapSecret), |s| {
            s.block.set_mutual(secret.expose());
            Ok(())
        })
        .await
    }
}
