//! The pure host state model (no gRPC): disks, volumes, the filesystem sandbox, SMB, iSCSI and services.
//!
//! Every host call is a method on [`State`] returning `Result<_, Error>`; `Error::Host` carries the exact text a
//! real csi-proxy would put in its gRPC `UNKNOWN` status. [`crate::SimHost`] wraps a `State` with locking, the
//! audit log and fault injection.
//!
//! # Sandbox layout
//!
//! Everything that is a file or a link on a real host is a real file or symlink under the sandbox root, so the
//! filesystem semantics (lstat, dangling links, recursive removal not following links) are the OS's own:
//!
//! | Sandbox path | Windows meaning |
//! | --- | --- |
//! | `<root>/c/...` | `C:\...` (any drive letter, lower-cased) |
//! | `<root>/volumes/<guid>` | `\\?\Volume{<guid>}\`: a symlink to the volume's store, present only while the volume is visible (disk present and online) |
//! | `<root>/store/volumes/<guid>/` | the volume's contents (persist while the disk is detached) |
//! | `<root>/unc/<server>/<share>` | `\\server\share`: a symlink to the share's store, present only while an OK global mapping of that share exists |
//! | `<root>/store/shares/<server>/<share>/` | the share's contents on the file server |
//!
//! A mount point made by `MountVolume` is a symlink into `<root>/volumes/`; an SMB `local_path` link points into
//! `<root>/unc/`; a `CreateSymlink` link points at another drive path. The kind of a link is therefore visible on
//! disk, and survives a simulated reboot exactly like reparse points do.
//!
//! Where the OS cannot make directory symlinks (Wine 8 stubs `CreateSymbolicLinkW`), the Windows build emulates
//! them with marker files that the model follows itself; see `links.rs`. All link handling goes through
//! `Layout::links`, never straight to the OS.

pub(crate) mod arrival;
pub(crate) mod content;
pub(crate) mod disk;
pub(crate) mod fs;
pub(crate) mod iscsi;
mod links;
mod mpio;
pub(crate) mod paths;
pub(crate) mod processes;
pub(crate) mod smb;
pub(crate) mod system;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::profile::{CsiProxyVersion, HostBehaviour, Profile};
use crate::scenario::{HostSpec, SanPolicy, Scenario};
use crate::secret::Secret;
use links::LinkMode;

pub use content::DiskContent;
pub use disk::{Disk, DiskSource, Partition, Volume};
pub use iscsi::{AuthType, Portal, Session, SessionRecovery, Target};
pub use processes::Spawned;
pub use smb::{
    BUILD_WITH_2022_OPTIONS, BUILD_WITH_2025_OPTIONS, Mapping, MappingOptions, MappingStatus,
    SmbAccount, SmbServer, SmbShare,
};
pub use system::Service;

/// Options that correspond to csi-proxy's command-line flags; they override the scenario's `host` values.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// The csi-proxy release to play (`wincsi-sim --csi-proxy-version`). `None`: the scenario's
    /// `host.csi_proxy_version`, else [`CsiProxyVersion::from_env_or_default`].
    pub csi_proxy_version: Option<CsiProxyVersion>,
    /// `-kubelet-path`.
    pub kubelet_path: Option<String>,
    /// `-working-dir` (replaces the scenario's list when non-empty).
    pub working_dirs: Vec<String>,
    /// `-require-privacy` (given explicitly; csi-proxy v1.1.3 has no such flag and refuses to start with it).
    pub require_privacy: Option<bool>,
    /// Represent links as simulator-interpreted marker files even where the OS can make directory symlinks (the
    /// fallback used automatically where it cannot, e.g. Wine 8); for testing that fallback.
    pub emulate_links: bool,
}

/// Paths inside the sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    root: PathBuf,
    links: LinkMode,
}

impl Layout {
    pub(crate) fn new(root: PathBuf, links: LinkMode) -> Self {
        Layout { root, links }
    }

    /// How links are made and followed in this sandbox.
    pub(crate) fn links(&self) -> LinkMode {
        self.links
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn drive(&self, letter: char) -> PathBuf {
        self.root.join(letter.to_ascii_lowercase().to_string())
    }

    pub(crate) fn volumes_dir(&self) -> PathBuf {
        self.root.join("volumes")
    }

    pub(crate) fn volume_link(&self, guid: &str) -> PathBuf {
        self.volumes_dir().join(guid)
    }

    pub(crate) fn volume_store(&self, guid: &str) -> PathBuf {
        self.root.join("store").join("volumes").join(guid)
    }

    pub(crate) fn unc_dir(&self) -> PathBuf {
        self.root.join("unc")
    }

    pub(crate) fn unc_link(&self, server: &str, share: &str) -> PathBuf {
        self.unc_dir().join(server).join(share)
    }

    /// `\\?\\\server\share` (the v1.3.0+ SMB link form): present only while that form resolves and the
    /// share is usable.
    pub(crate) fn unc_long_dir(&self) -> PathBuf {
        self.root.join("unc-long")
    }

    pub(crate) fn unc_long_link(&self, server: &str, share: &str) -> PathBuf {
        self.unc_long_dir().join(server).join(share)
    }

    pub(crate) fn share_store(&self, server: &str, share: &str) -> PathBuf {
        self.root
            .join("store")
            .join("shares")
            .join(server)
            .join(share)
    }

    /// Maps a sandbox path back to its Windows spelling (for link targets shown to tests).
    pub(crate) fn to_windows(&self, real: &Path) -> Option<String> {
        let rel = real.strip_prefix(&self.root).ok()?;
        let parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        let first = parts.first()?;
        match first.as_str() {
            "volumes" => {
                let guid = parts.get(1)?;
                let mut s = format!(r"\\?\Volume{{{guid}}}\");
                s.push_str(&parts[2..].join("\\"));
                Some(s)
            }
            "unc" | "unc-long" => {
                let prefix = if first == "unc" { "" } else { r"\\?\" };
                let mut s = format!(r"{prefix}\\{}\{}\", parts.get(1)?, parts.get(2)?);
                if parts.len() > 3 {
                    s.push_str(&parts[3..].join("\\"));
                    s.push('\\');
                }
                Some(s)
            }
            d if d.len() == 1 => Some(format!(
                "{}:\\{}",
                d.to_ascii_uppercase(),
                parts[1..].join("\\")
            )),
            _ => None,
        }
    }
}

/// A data-loss event: a destructive host call hit a volume or disk that held data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DataLossEvent {
    /// The RPC that destroyed data (`FormatVolume`, `PartitionDisk`).
    pub rpc: String,
    /// Stable id of the disk.
    pub disk_id: String,
    /// Disk number at the time.
    pub disk_number: u32,
    /// Volume id, when a volume was formatted.
    pub volume_id: Option<String>,
    /// What was lost.
    pub detail: String,
}

/// Host-level configuration (csi-proxy flags and scenario knobs).
#[derive(Debug, Clone)]
pub(crate) struct HostConfig {
    pub(crate) kubelet_path: String,
    pub(crate) working_dirs: Vec<String>,
    pub(crate) require_privacy: bool,
    pub(crate) iscsi_adapter: u32,
    pub(crate) disconnected_mapping_blocks_create: bool,
    pub(crate) san_policy: SanPolicy,
    pub(crate) mpio: crate::scenario::MpioSpec,
    pub(crate) windows_build: u32,
}

/// The whole simulated host.
#[derive(Debug)]
pub struct State {
    pub(crate) layout: Layout,
    pub(crate) cfg: HostConfig,
    pub(crate) bios_serial: String,
    pub(crate) services: BTreeMap<String, Service>,
    pub(crate) disks: Vec<Disk>,
    pub(crate) servers: BTreeMap<String, SmbServer>,
    pub(crate) mappings: BTreeMap<String, Mapping>,
    pub(crate) portals: Vec<Portal>,
    pub(crate) sessions: Vec<Session>,
    /// Persistent iSCSI login records (`Connect(IsPersistent = true)` through the Windows view), kept across reboots
    /// until `MSFT_iSCSISession.Unregister`.
    pub(crate) persistent_logins: Vec<Session>,
    pub(crate) mutual_chap_secret: Option<Secret>,
    pub(crate) data_loss: Vec<DataLossEvent>,
    pub(crate) next_guid: u64,
    pub(crate) boots: u64,
    /// When the current boot's uptime was last set (at the start and at each reboot) and what it was then: the
    /// node's `GetTickCount64` ([`State::uptime`]).
    pub(crate) uptime_base: (tokio::time::Instant, std::time::Duration),
    /// The csi-proxy release being played.
    pub(crate) profile: Profile,
    /// Configurable host behaviours no source settles.
    pub(crate) behaviour: HostBehaviour,
    /// Links made by CreateSymlink whose source did not `Stat` as a directory (file links; sandbox paths).
    pub(crate) file_links: BTreeSet<PathBuf>,
    /// Set by a host call that kills the csi-proxy process (taken by [`crate::SimHost`]).
    pub(crate) crash: Option<String>,
    /// The names in the `volumes/` directory as [`disk::sync_volume_links`] left them (`None`: not known, read the
    /// directory). Only that function changes the directory, so it compares the state with this set instead of
    /// reading and `stat`ing every entry after each change (which made every disk change O(volumes) in system calls,
    /// under the state lock).
    pub(crate) volume_links: Option<BTreeSet<String>>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

impl State {
    /// Builds a host from a scenario on a sandbox directory (created if missing; must be empty or a previous
    /// sandbox of this simulator, whose contents are replaced). A relative `root` is made absolute (and on Unix
    /// canonical) first: [`State::root`] is that path.
    pub fn new(scenario: &Scenario, root: &Path, opts: &HostOptions) -> Result<State> {
        let h: &HostSpec = &scenario.host;
        let version = match opts.csi_proxy_version.or(h.csi_proxy_version) {
            Some(v) => v,
            None => CsiProxyVersion::from_env_or_default()?,
        };
        let profile = version.profile();
        if !profile.require_privacy_flag && opts.require_privacy.is_some() {
            // csi-proxy v1.1.3's flag set has no -require-privacy: Go's flag package refuses to start.
            return Err(Error::Scenario(format!(
                "csi-proxy {version} does not start with -require-privacy: flag provided but not defined: -require-privacy"
            )));
        }
        let cfg = HostConfig {
            kubelet_path: opts
                .kubelet_path
                .clone()
                .unwrap_or_else(|| h.kubelet_path.clone()),
            working_dirs: if opts.working_dirs.is_empty() {
                h.working_dirs.clone()
            } else {
                opts.working_dirs.clone()
            },
            // v1.1.3 hard-codes -RequirePrivacy $true (`pkg/os/smb/api.go:68`).
            require_privacy: !profile.require_privacy_flag
                || opts.require_privacy.unwrap_or(h.require_privacy),
            iscsi_adapter: h.iscsi_adapter,
            disconnected_mapping_blocks_create: h.disconnected_mapping_blocks_create,
            san_policy: h.san_policy,
            mpio: h.mpio,
            windows_build: h.windows_build,
        };
        claim_sandbox(root)?;
        let root = &platform::absolute_root(root).map_err(io_err(root))?;
        let links = if opts.emulate_links {
            LinkMode::Emulated
        } else {
            platform::link_mode(root)
        };
        log_link_mode(links);
        let layout = Layout::new(root.to_path_buf(), links);
        for sub in ["volumes", "unc", "unc-long", "store"] {
            let p = root.join(sub);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
            }
        }
        // Drive directories from an earlier run are wiped too: a scenario describes the whole host.
        if let Ok(rd) = std::fs::read_dir(root) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.len() == 1 && name.chars().all(|c| c.is_ascii_lowercase()) {
                    std::fs::remove_dir_all(e.path()).map_err(io_err(&e.path()))?;
                }
            }
        }
        for p in [
            layout.volumes_dir(),
            layout.unc_dir(),
            layout.unc_long_dir(),
            layout.drive('c'),
        ] {
            std::fs::create_dir_all(&p).map_err(io_err(&p))?;
        }
        let mut st = State {
            layout,
            cfg,
            bios_serial: h.bios_serial.clone(),
            services: BTreeMap::new(),
            disks: Vec::new(),
            servers: BTreeMap::new(),
            mappings: BTreeMap::new(),
            portals: Vec::new(),
            sessions: Vec::new(),
            persistent_logins: Vec::new(),
            mutual_chap_secret: None,
            data_loss: Vec::new(),
            next_guid: 1,
            boots: 1,
            uptime_base: (tokio::time::Instant::now(), UPTIME_AT_BOOT),
            profile,
            behaviour: h.behaviour,
            file_links: BTreeSet::new(),
            crash: None,
            volume_links: None,
        };
        let mut dirs = vec![st.cfg.kubelet_path.clone()];
        dirs.extend(st.cfg.working_dirs.iter().cloned());
        dirs.extend(h.directories.iter().cloned());
        for d in &dirs {
            let dp = paths::DrivePath::parse(d)
                .ok_or_else(|| Error::Scenario(format!("not a drive-letter path: {d}")))?;
            let real = st.real_drive_path(&dp);
            std::fs::create_dir_all(&real).map_err(io_err(&real))?;
        }
        system::load(&mut st, &h.services)?;
        disk::load_local(&mut st, &scenario.disks)?;
        smb::load(&mut st, &scenario.smb)?;
        iscsi::load(&mut st, &scenario.iscsi)?;
        st.sync_links()?;
        Ok(st)
    }

    /// The sandbox root.
    pub fn root(&self) -> &Path {
        self.layout.root()
    }

    /// The kubelet path in force (csi-proxy `-kubelet-path`).
    pub fn kubelet_path(&self) -> &str {
        &self.cfg.kubelet_path
    }

    /// The working dirs in force (csi-proxy `-working-dir`).
    pub fn working_dirs(&self) -> &[String] {
        &self.cfg.working_dirs
    }

    /// Whether new SMB mappings require privacy (csi-proxy `-require-privacy`).
    pub fn require_privacy(&self) -> bool {
        self.cfg.require_privacy
    }

    /// The csi-proxy release being played.
    pub fn csi_proxy_version(&self) -> CsiProxyVersion {
        self.profile.version
    }

    /// The behaviour of the release being played.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Plays another csi-proxy release from the next call on (host state is kept, as when csi-proxy is upgraded
    /// in place).
    pub fn set_csi_proxy_version(&mut self, version: CsiProxyVersion) -> Result<()> {
        self.profile = version.profile();
        if !self.profile.require_privacy_flag {
            self.cfg.require_privacy = true;
        }
        self.sync_links()
    }

    /// The configurable host behaviours in force.
    pub fn behaviour(&self) -> &HostBehaviour {
        &self.behaviour
    }

    /// Replaces the configurable host behaviours.
    pub fn set_behaviour(&mut self, behaviour: HostBehaviour) -> Result<()> {
        self.behaviour = behaviour;
        self.sync_links()
    }

    /// Marks the csi-proxy process as killed by the current call (see [`crate::SimHost`]).
    pub(crate) fn crash(&mut self, reason: &str) -> Error {
        self.crash = Some(reason.to_string());
        Error::host(format!("csi-proxy crashed: {reason}"))
    }

    /// Takes the crash a call caused, if any.
    pub(crate) fn take_crash(&mut self) -> Option<String> {
        self.crash.take()
    }

    /// Applies everything that became due by `now`: disks and volumes that arrived at least the storage cache's lag
    /// ago appear (see `arrival.rs`), SMB mappings whose reconnection ended settle.
    pub fn tick(&mut self, now: tokio::time::Instant) -> Result<()> {
        let settled = smb::settle_mappings(self, now);
        let lag = self.behaviour.arrival.cache_lag();
        if arrival::complete(self, now, lag, None) || settled {
            self.sync_links()?;
        }
        Ok(())
    }

    /// Completes every pending disk and volume arrival at once: a test's (or the admin interface's) control of
    /// time. No host call does this; `Rescan` shows only what has arrived.
    pub fn complete_arrivals(&mut self) -> Result<()> {
        if arrival::force_all(self) {
            self.sync_links()?;
        }
        Ok(())
    }

    /// Maps a parsed drive path to the sandbox (case-insensitive, like NTFS).
    pub(crate) fn real_drive_path(&self, p: &paths::DrivePath) -> PathBuf {
        let base = self.layout.drive(p.drive);
        paths::resolve_ci(&base, &p.components, self.layout.links())
    }

    /// Maps any Windows path the host can reach (drive path, `\\server\share\...` through an OK mapping,
    /// `\\?\Volume{..}\...`) to the sandbox.
    pub(crate) fn real_path(&self, win: &str) -> Option<PathBuf> {
        if let Some(dp) = paths::DrivePath::parse(win) {
            return Some(self.real_drive_path(&dp));
        }
        if let Some(rest) = win.strip_prefix(r"\\?\") {
            if let Some(after) = rest
                .strip_prefix("Volume{")
                .or_else(|| rest.strip_prefix("volume{"))
            {
                let (guid, tail) = after.split_once('}')?;
                if guid.is_empty() || !guid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                    return None;
                }
                let comps = paths::normalise_components(tail);
                return Some(paths::resolve_ci(
                    &self.layout.volume_link(&guid.to_lowercase()),
                    &comps,
                    self.layout.links(),
                ));
            }
            return self.real_path(rest);
        }
        let (server, share, rest) = paths::parse_unc(win)?;
        Some(paths::resolve_ci(
            &self.layout.unc_link(&server, &share),
            &rest,
            self.layout.links(),
        ))
    }

    pub(crate) fn new_guid(&mut self) -> String {
        let n = self.next_guid;
        self.next_guid += 1;
        format!("{:08x}-5eed-4000-8000-{:012x}", 0x5ee0_0000u64 + n, n)
    }

    /// Re-creates the `volumes/` and `unc/` presence links from the state.
    pub(crate) fn sync_links(&mut self) -> Result<()> {
        disk::sync_volume_links(self)?;
        smb::sync_unc_links(self)?;
        Ok(())
    }

    /// Simulates a node reboot: SMB global mappings become `Disconnected`, iSCSI sessions drop so their disks vanish
    /// (csi-proxy never makes them persistent; persistent login records made through the Windows view log in again,
    /// their disks arriving after their delays), services return to their start types; directories, symlinks and
    /// mount points stay on disk (a mount point whose volume vanished dangles).
    pub fn reboot(&mut self) -> Result<()> {
        self.boots += 1;
        self.uptime_base = (tokio::time::Instant::now(), UPTIME_AT_BOOT);
        for m in self.mappings.values_mut() {
            m.status = MappingStatus::Disconnected;
            m.settles = None;
        }
        let sessions = std::mem::take(&mut self.sessions);
        for s in &sessions {
            iscsi::detach_session_disks(self, s);
        }
        self.restore_persistent_logins();
        system::reboot(self);
        self.sync_links()
    }

    /// All data-loss events so far.
    pub fn data_loss_events(&self) -> &[DataLossEvent] {
        &self.data_loss
    }

    /// Everything left behind that a fully unstaged node must not have: SMB mappings (any status), iSCSI sessions,
    /// and mount points or symlinks under the kubelet path and working dirs.
    pub fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in self.mappings.values() {
            out.push(format!(
                "SMB global mapping {} ({})",
                m.remote_path,
                m.status.as_str()
            ));
        }
        for s in &self.sessions {
            out.push(format!(
                "iSCSI session to {} via {}:{}",
                s.iqn, s.portal_address, s.portal_port
            ));
        }
        for s in &self.persistent_logins {
            out.push(format!(
                "iSCSI persistent login to {} via {}:{}",
                s.iqn, s.portal_address, s.portal_port
            ));
        }
        let mut roots = vec![self.cfg.kubelet_path.clone()];
        roots.extend(self.cfg.working_dirs.iter().cloned());
        let mut seen = std::collections::BTreeSet::new();
        for r in roots {
            let Some(dp) = paths::DrivePath::parse(&r) else {
                continue;
            };
            let real = self.real_drive_path(&dp);
            if !seen.insert(real.clone()) {
                continue;
            }
            let mut found = Vec::new();
            collect_links(&real, &mut found, self.layout.links());
            for l in found {
                let win = self
                    .layout
                    .to_windows(&l)
                    .unwrap_or_else(|| l.display().to_string());
                let target = self
                    .layout
                    .links()
                    .target(&l)
                    .and_then(|t| self.layout.to_windows(&t))
                    .unwrap_or_default();
                let kind = if target.starts_with(r"\\?\Volume") {
                    "mount point"
                } else {
                    "symlink"
                };
                out.push(format!("{kind} {win} -> {target}"));
            }
        }
        out
    }

    /// Reads a link's target, in Windows spelling (`None` if `path` is not a link).
    pub fn read_link(&self, path: &str) -> Option<String> {
        let real = self.real_path(path)?;
        let t = self.layout.links().target(&real)?;
        self.layout.to_windows(&t)
    }

    /// The sandbox path of a Windows path (drive, UNC through a mapping, or volume path).
    pub fn sandbox_path(&self, path: &str) -> Option<PathBuf> {
        self.real_path(path)
    }

    /// Current disks (including detached iSCSI LUN disks, whose `number` is `None`).
    pub fn disks(&self) -> &[Disk] {
        &self.disks
    }

    /// Current SMB global mappings, keyed by lower-cased `\\server\share`.
    pub fn mappings(&self) -> &BTreeMap<String, Mapping> {
        &self.mappings
    }

    /// Current iSCSI sessions.
    pub fn sessions(&self) -> &[Session] {
        &self.sessions
    }

    /// Persistent iSCSI login records (made through the Windows view), logged in again at every boot.
    pub fn persistent_logins(&self) -> &[Session] {
        &self.persistent_logins
    }

    /// iSCSI portals (scenario side, with whether they are added on the host).
    pub fn portals(&self) -> &[Portal] {
        &self.portals
    }

    /// How many times the host has booted (1 + reboots).
    pub fn boots(&self) -> u64 {
        self.boots
    }

    /// How long the node has been up: Windows' `GetTickCount64` (milliseconds since the system was started; the wall
    /// clock does not move it), which the Windows view and the driver's csi-proxy backend read. It starts again at
    /// [`UPTIME_AT_BOOT`] with every reboot and runs on tokio's clock (paused in tests).
    pub fn uptime(&self) -> std::time::Duration {
        let (since, base) = self.uptime_base;
        base + tokio::time::Instant::now().saturating_duration_since(since)
    }

    /// The node's Windows build (scenario `host.windows_build`).
    pub fn windows_build(&self) -> u32 {
        self.cfg.windows_build
    }

    /// Make the node run another Windows build (an in-place upgrade, as far as the SMB client's options go).
    pub fn set_windows_build(&mut self, build: u32) {
        self.cfg.windows_build = build;
    }

    /// Make the current boot `uptime` old from now on (a node that has been up that long).
    pub fn set_uptime(&mut self, uptime: std::time::Duration) {
        self.uptime_base = (tokio::time::Instant::now(), uptime);
    }
}

/// The uptime at which the simulated node's boot reaches the driver's first call: Windows starts, then kubelet, then
/// the driver's pod (a minute is a guess, unverified). A reboot shows to the driver only while the uptime it reads is
/// below the one recorded before the reboot; tests play a new boot that has been up longer with
/// [`State::set_uptime`].
pub const UPTIME_AT_BOOT: std::time::Duration = std::time::Duration::from_secs(60);

/// Marks `root` as a simulator sandbox. A non-empty directory without the marker is refused, so a wrong
/// `--root` can never wipe unrelated files.
fn claim_sandbox(root: &Path) -> Result<()> {
    let marker = root.join(SANDBOX_MARKER);
    if root.exists() && !marker.exists() {
        let mut entries = std::fs::read_dir(root).map_err(io_err(root))?;
        if entries.next().is_some() {
            return Err(Error::Scenario(format!(
                "sandbox {} is not empty and was not created by wincsi-sim (no {SANDBOX_MARKER})",
                root.display()
            )));
        }
    }
    std::fs::create_dir_all(root).map_err(io_err(root))?;
    std::fs::write(
        &marker,
        b"wincsi-sim sandbox: everything here is replaced when a scenario is loaded\n",
    )
    .map_err(io_err(&marker))
}

/// File that marks a directory as a simulator sandbox.
pub const SANDBOX_MARKER: &str = ".wincsi-sim-sandbox";

pub(crate) fn collect_links(dir: &Path, out: &mut Vec<PathBuf>, links: LinkMode) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if links.is_link(&p) {
            out.push(p);
            continue;
        }
        match p.symlink_metadata() {
            Ok(m) if m.is_dir() => collect_links(&p, out, links),
            _ => {}
        }
    }
}

/// Usage of a directory tree (not following symlinks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) bytes: u64,
    pub(crate) files: u64,
    /// Files, directories and links: any entry counts as data a format would destroy.
    pub(crate) entries: u64,
}

pub(crate) fn dir_usage(dir: &Path) -> Usage {
    let mut u = Usage::default();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return u;
    };
    for e in rd.flatten() {
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        u.entries += 1;
        if m.is_dir() {
            let sub = dir_usage(&e.path());
            u.bytes += sub.bytes;
            u.files += sub.files;
            u.entries += sub.entries;
        } else {
            u.bytes += m.len();
            u.files += 1;
        }
    }
    u
}

/// Writes scenario files under `dir`.
pub(crate) fn write_files(dir: &Path, files: &BTreeMap<String, String>) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    for (rel, content) in files {
        let relp = paths::safe_relative(rel).ok_or_else(|| {
            Error::Scenario(format!("file path must be relative without '..': {rel}"))
        })?;
        let p = dir.join(relp);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        std::fs::write(&p, content).map_err(io_err(&p))?;
    }
    Ok(())
}

/// Removes everything inside `dir` (keeps `dir`).
pub(crate) fn wipe_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io_err(dir))?;
    }
    std::fs::create_dir_all(dir).map_err(io_err(dir))
}

/// Logs the link mode the first time a sandbox uses it (once per process and mode).
fn log_link_mode(links: LinkMode) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static NATIVE: AtomicBool = AtomicBool::new(false);
    static EMULATED: AtomicBool = AtomicBool::new(false);
    let flag = match links {
        LinkMode::Native => &NATIVE,
        LinkMode::Emulated => &EMULATED,
    };
    if !flag.swap(true, Ordering::Relaxed) {
        tracing::info!(mode = links.describe(), "sandbox link mode");
    }
}

#[cfg(unix)]
#[path = "platform_unix.rs"]
mod platform;
#[cfg(windows)]
#[path = "platform_windows.rs"]
mod platform;

#[cfg(test)]
mod tests;
