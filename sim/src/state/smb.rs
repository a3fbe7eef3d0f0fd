//! SMB servers, shares and the host's global mappings (the Smb API group).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{State, paths, write_files};
use crate::error::{Error, Result};
use crate::profile::SmbLinkForm;
use crate::profile::texts;
use crate::scenario::SmbSpec;
use crate::secret::Secret;

/// `MSFT_SmbGlobalMapping.Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum MappingStatus {
    /// Connected and usable.
    #[serde(rename = "OK")]
    Ok,
    /// Paused.
    Paused,
    /// Not connected (e.g. after a reboot).
    Disconnected,
    /// Network error.
    NetworkError,
    /// Connecting.
    Connecting,
    /// Reconnecting.
    Reconnecting,
    /// Unavailable.
    Unavailable,
}

impl MappingStatus {
    /// The status as PowerShell prints it.
    pub fn as_str(&self) -> &'static str {
        match self {
            MappingStatus::Ok => "OK",
            MappingStatus::Paused => "Paused",
            MappingStatus::Disconnected => "Disconnected",
            MappingStatus::NetworkError => "NetworkError",
            MappingStatus::Connecting => "Connecting",
            MappingStatus::Reconnecting => "Reconnecting",
            MappingStatus::Unavailable => "Unavailable",
        }
    }
}

/// An account on a file server.
#[derive(Debug, Clone, Serialize)]
pub struct SmbAccount {
    /// User name.
    pub user: String,
    /// Password (never serialised).
    #[serde(skip)]
    pub password: Secret,
    /// Domain (`None` = local account).
    pub domain: Option<String>,
}

/// A share.
#[derive(Debug, Clone, Serialize)]
pub struct SmbShare {
    /// Share name as declared.
    pub name: String,
    /// Allowed users (empty = all accounts).
    pub users: Vec<String>,
    /// Guest access allowed.
    pub guest: bool,
    /// Per-directory access (lower-cased relative directory, `\`-separated, `""` for the root → allowed user names):
    /// see [`crate::scenario::SmbShareSpec::acl`].
    pub acl: BTreeMap<String, Vec<String>>,
    /// Size of the file system holding the share (bytes).
    pub capacity: u64,
    /// Directory quotas (lower-cased relative directory, `\`-separated → limit in bytes): see
    /// [`crate::scenario::SmbShareSpec::quotas`].
    pub quotas: BTreeMap<String, u64>,
}

/// The size of a share's file system when the scenario names none.
pub(crate) const DEFAULT_SHARE_CAPACITY: u64 = 1 << 40;

impl SmbShare {
    /// Whether `user` (a principal as given, `DOMAIN\user` or `user@domain`; empty for guest access) may open the path
    /// `rel` (components below the share root) by the per-directory access: the longest listed directory containing
    /// it decides; none listed: yes.
    pub(crate) fn allows(&self, user: &str, rel: &[String]) -> bool {
        let (_, name) = split_principal(user);
        let mut best: Option<&Vec<String>> = None;
        for depth in 0..=rel.len() {
            let dir = rel[..depth]
                .iter()
                .map(|c| c.to_lowercase())
                .collect::<Vec<_>>()
                .join("\\");
            if let Some(users) = self.acl.get(&dir) {
                best = Some(users);
            }
        }
        best.is_none_or(|users| users.iter().any(|u| u.eq_ignore_ascii_case(&name)))
    }

    /// `GetDiskFreeSpaceExW` at `rel` (components below the share root, as stored) on the share whose files are in
    /// `store`: `(total, used)`. Outside a quota, the share's file system (every directory of it answers the same,
    /// learn.microsoft.com `GetDiskFreeSpaceExW`: "The function accepts any directory on a disk"; the sim's share is
    /// the whole file system, a real one's may hold more). At or below quota directories, the one with the least
    /// room (**unverified** for nested quotas and through SMB: `docs/real-node-checks.md`).
    pub(crate) fn space_at(&self, store: &std::path::Path, rel: &[String]) -> (u64, u64) {
        let mut best = (
            self.capacity,
            super::dir_usage(store).bytes.min(self.capacity),
        );
        let mut dir = store.to_path_buf();
        let mut key = Vec::new();
        for depth in 0..=rel.len() {
            if depth > 0 {
                dir.push(&rel[depth - 1]);
                key.push(rel[depth - 1].to_lowercase());
            }
            if let Some(&limit) = self.quotas.get(&key.join("\\")) {
                let used = super::dir_usage(&dir).bytes.min(limit);
                if limit - used < best.0 - best.1 {
                    best = (limit, used);
                }
            }
        }
        best
    }
}

/// A file server.
#[derive(Debug, Clone, Serialize)]
pub struct SmbServer {
    /// Name as declared.
    pub name: String,
    /// Reachable from the host.
    pub reachable: bool,
    /// Supports SMB3 encryption.
    pub encryption: bool,
    /// Accepts SMB over QUIC.
    pub quic: bool,
    /// Accounts.
    pub accounts: Vec<SmbAccount>,
    /// Shares by lower-cased name.
    pub shares: BTreeMap<String, SmbShare>,
    /// The node's computer account when this server accepts it ([`crate::scenario::SmbSpec::node_account`] listed
    /// in the server's `computers`): what a mapping without a credential authenticates as.
    pub machine: Option<String>,
}

/// The first build whose `New-SmbGlobalMapping` has `CompressNetworkTraffic`, `TransportType` and `BlockNTLM`:
/// 26100, Windows Server 2025 (they appear in Microsoft's `winserver2025-ps` docset of the cmdlet and not in the
/// `winserver2022-ps` one; an earlier build having them is **unverified**).
pub const BUILD_WITH_2025_OPTIONS: u32 = 26100;

/// The first build whose `New-SmbGlobalMapping` documents `RequireIntegrity` and `UseWriteThrough`: 20348, Windows
/// Server 2022 (the `winserver2022-ps` docset; Windows Server 2019's docset has no `SmbGlobalMapping` page, so
/// 17763 having them is **unverified**).
pub const BUILD_WITH_2022_OPTIONS: u32 = 20348;

/// The client options of a global mapping besides `RequirePrivacy`, as `MSFT_SmbGlobalMapping.Create` took them and
/// its instance reports them (Microsoft, *New-SmbGlobalMapping*: `RequireIntegrity` and `UseWriteThrough` in the
/// Windows Server 2022 docset, `CompressNetworkTraffic`, `TransportType` and `BlockNTLM` in the 2025 one). That the
/// instance reports each as it was created is **unverified** for the 2025 ones (`docs/real-node-checks.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MappingOptions {
    /// `RequireIntegrity` (SMB signing required).
    pub require_integrity: bool,
    /// `UseWriteThrough`.
    pub use_write_through: bool,
    /// `CompressNetworkTraffic`.
    pub compress_network_traffic: bool,
    /// `TransportType` as its `uint32` (0 None, 1 TCP, 2 QUIC: winhost `SmbTransport`).
    pub transport_type: u32,
    /// `BlockNTLM`.
    pub block_ntlm: bool,
}

/// A global mapping on the host.
#[derive(Debug, Clone, Serialize)]
pub struct Mapping {
    /// Lower-cased `\\server\share` root.
    pub remote_path: String,
    /// Lower-cased server.
    pub server: String,
    /// Lower-cased share.
    pub share: String,
    /// The principal it was created with (`DOMAIN\user` as given, empty for none).
    pub principal: String,
    /// Password it was created with (never serialised).
    #[serde(skip)]
    pub password: Secret,
    /// Status.
    pub status: MappingStatus,
    /// RequirePrivacy it was created with.
    pub require_privacy: bool,
    /// The other client options it was created with (the Windows view's `Create`; csi-proxy passes none).
    pub options: MappingOptions,
    /// Its instance lists Windows Server 2025's properties (`CompressNetworkTraffic`, `TransportType`, `BlockNTLM`):
    /// created on build [`BUILD_WITH_2025_OPTIONS`] or later.
    pub reports_2025_options: bool,
    /// A status change due by itself (the SMB client reconnecting, or giving up), on tokio's clock.
    #[serde(skip)]
    pub settles: Option<(tokio::time::Instant, MappingStatus)>,
}

pub(crate) fn load(st: &mut State, spec: &SmbSpec) -> Result<()> {
    for s in &spec.servers {
        let key = s.name.to_lowercase();
        if st.servers.contains_key(&key) {
            return Err(Error::Scenario(format!("duplicate SMB server {}", s.name)));
        }
        let mut shares = BTreeMap::new();
        for sh in &s.shares {
            let skey = sh.name.to_lowercase();
            write_files(&st.layout.share_store(&key, &skey), &sh.files)?;
            shares.insert(
                skey,
                SmbShare {
                    name: sh.name.clone(),
                    users: sh.users.clone(),
                    guest: sh.guest,
                    capacity: sh.capacity.unwrap_or(DEFAULT_SHARE_CAPACITY),
                    quotas: sh
                        .quotas
                        .iter()
                        .map(|(dir, limit)| (acl_key(dir), *limit))
                        .collect(),
                    acl: sh
                        .acl
                        .iter()
                        .map(|(dir, users)| (acl_key(dir), users.clone()))
                        .collect(),
                },
            );
        }
        let accounts = s
            .accounts
            .iter()
            .map(|a| SmbAccount {
                user: a.user.clone(),
                password: a.password.clone(),
                domain: a.domain.clone(),
            })
            .collect();
        st.servers.insert(
            key,
            SmbServer {
                name: s.name.clone(),
                reachable: s.reachable,
                encryption: s.encryption,
                quic: s.quic,
                accounts,
                shares,
                machine: spec.node_account.clone().filter(|n| {
                    s.computers.iter().any(|c| {
                        let (cd, cu) = split_principal(c);
                        let (nd, nu) = split_principal(n);
                        cu.eq_ignore_ascii_case(&nu)
                            && cd
                                .unwrap_or_default()
                                .eq_ignore_ascii_case(&nd.unwrap_or_default())
                    })
                }),
            },
        );
    }
    Ok(())
}

/// Makes `<root>/unc/<server>/<share>` exist exactly for usable (OK, reachable) mappings, and
/// `<root>/unc-long/<server>/<share>` (the v1.3.0+ `\\?\\\server\share` link form) for the same shares while that
/// form resolves ([`crate::profile::HostBehaviour::long_unc_links_resolve`]).
/// Applies the mapping status changes due by `now` ([`State::set_mapping_status`]); whether any was.
pub(crate) fn settle_mappings(st: &mut State, now: tokio::time::Instant) -> bool {
    let mut changed = false;
    for m in st.mappings.values_mut() {
        if let Some((at, then)) = m.settles
            && at <= now
        {
            m.status = then;
            m.settles = None;
            changed = true;
        }
    }
    changed
}

pub(crate) fn sync_unc_links(st: &mut State) -> Result<()> {
    let mut want = std::collections::BTreeSet::new();
    for m in st.mappings.values() {
        let usable = m.status == MappingStatus::Ok
            && st
                .servers
                .get(&m.server)
                .is_some_and(|s| s.reachable && s.shares.contains_key(&m.share));
        if usable {
            want.insert((m.server.clone(), m.share.clone()));
        }
    }
    let long = if st.behaviour.long_unc_links_resolve {
        want.clone()
    } else {
        std::collections::BTreeSet::new()
    };
    for (dir, want) in [
        (st.layout.unc_dir(), &want),
        (st.layout.unc_long_dir(), &long),
    ] {
        if let Ok(servers) = std::fs::read_dir(&dir) {
            for s in servers.flatten() {
                let server = s.file_name().to_string_lossy().into_owned();
                if let Ok(shares) = std::fs::read_dir(s.path()) {
                    for sh in shares.flatten() {
                        let share = sh.file_name().to_string_lossy().into_owned();
                        if !want.contains(&(server.clone(), share)) {
                            super::fs::remove_link(&sh.path())
                                .map_err(|e| Error::io(sh.path(), e))?;
                        }
                    }
                }
            }
        }
    }
    for (server, share) in &want {
        let link = st.layout.unc_link(server, share);
        if link.symlink_metadata().is_err() {
            let dir = st.layout.unc_dir().join(server);
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let store = st.layout.share_store(server, share);
            std::fs::create_dir_all(&store).map_err(|e| Error::io(&store, e))?;
            st.layout
                .links()
                .create(&store, &link)
                .map_err(|e| Error::io(&link, e))?;
        }
    }
    for (server, share) in &long {
        let link = st.layout.unc_long_link(server, share);
        if link.symlink_metadata().is_err() {
            let dir = st.layout.unc_long_dir().join(server);
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let store = st.layout.share_store(server, share);
            st.layout
                .links()
                .create(&store, &link)
                .map_err(|e| Error::io(&link, e))?;
        }
    }
    Ok(())
}

/// A per-directory key (access lists, quotas): lower case, `\` separators, no leading or trailing separator.
fn acl_key(dir: &str) -> String {
    dir.replace('/', "\\")
        .split('\\')
        .filter(|c| !c.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join("\\")
}

/// Splits `DOMAIN\user` / `user@domain` / `user`.
fn split_principal(username: &str) -> (Option<String>, String) {
    if let Some((d, u)) = username.split_once('\\') {
        (Some(d.to_string()), u.to_string())
    } else if let Some((u, d)) = username.split_once('@') {
        (Some(d.to_string()), u.to_string())
    } else {
        (None, username.to_string())
    }
}

/// csi-proxy's `getRootMappingPath` (`pkg/server/smb/server.go:28-46`): the first two non-empty `\`-separated
/// parts, lower-cased, as `\\server\share`; anything shorter is `remote path (P) is invalid`.
pub(crate) fn root_mapping_path(remote: &str) -> Result<(String, String, String)> {
    let parts: Vec<&str> = remote
        .split('\\')
        .filter(|s| !s.is_empty())
        .take(2)
        .collect();
    if parts.len() != 2 {
        return Err(Error::host(format!("remote path ({remote}) is invalid")));
    }
    let server = parts[0].to_lowercase();
    let share = parts[1].to_lowercase();
    Ok((format!(r"\\{server}\{share}"), server, share))
}

/// Why a mapping could not be created: a Windows error number.
pub(crate) type WinCode = u32;

impl State {
    pub(crate) fn authenticate(
        &self,
        server: &str,
        share: &str,
        username: &str,
        password: &str,
    ) -> std::result::Result<(), WinCode> {
        let srv = &self.servers[server];
        let sh = &srv.shares[share];
        if username.is_empty() {
            // No credential: the node's computer account where the server accepts it, allowed when the share lets
            // it in; otherwise nothing but guest access.
            let machine = srv.machine.as_deref().map(split_principal);
            let allowed = |name: &str| {
                sh.users.is_empty() || sh.users.iter().any(|u| u.eq_ignore_ascii_case(name))
            };
            return if sh.guest || machine.is_some_and(|(_, name)| allowed(&name)) {
                Ok(())
            } else {
                Err(5)
            };
        }
        let (domain, user) = split_principal(username);
        let account = srv.accounts.iter().find(|a| {
            a.user.eq_ignore_ascii_case(&user)
                && match (&a.domain, &domain) {
                    (None, None) => true,
                    (None, Some(d)) => d == "." || d.eq_ignore_ascii_case(&srv.name),
                    (Some(ad), Some(d)) => ad.eq_ignore_ascii_case(d),
                    (Some(_), None) => false,
                }
        });
        let Some(account) = account.filter(|a| a.password.expose() == password) else {
            return Err(1326);
        };
        if !sh.users.is_empty()
            && !sh
                .users
                .iter()
                .any(|u| u.eq_ignore_ascii_case(&account.user))
        {
            return Err(5);
        }
        Ok(())
    }

    /// Whether an OK mapping is still usable (csi-proxy's PathValid on the root).
    fn mapping_valid(&self, m: &Mapping) -> bool {
        self.unc_access(&m.server, &m.share).is_ok()
    }

    /// Whether the host can open the root of `\\server\share` right now, else the Windows error a file access gets
    /// (by cause, [`crate::profile::UncErrors`]).
    pub(crate) fn unc_access(&self, server: &str, share: &str) -> std::result::Result<(), WinCode> {
        self.unc_access_at(server, share, &[])
    }

    /// Whether the host can open `rel` (components below the root) on `\\server\share` right now: the share answers
    /// ([`Self::unc_access`]'s causes) and the per-directory access lets the mapping's account open it (5 otherwise,
    /// as the server's NTFS permissions answer).
    pub(crate) fn unc_access_at(
        &self,
        server: &str,
        share: &str,
        rel: &[String],
    ) -> std::result::Result<(), WinCode> {
        let errs = &self.behaviour.unc_errors;
        let Some(srv) = self.servers.get(server).filter(|s| s.reachable) else {
            return Err(errs.unreachable);
        };
        let root = format!(r"\\{server}\{share}");
        match self.mappings.get(&root) {
            None => {
                if srv
                    .shares
                    .get(share)
                    .is_some_and(|s| s.guest && s.allows("", rel))
                {
                    Ok(())
                } else {
                    Err(errs.unmapped)
                }
            }
            Some(m) if m.status != MappingStatus::Ok => Err(errs.disconnected),
            Some(m) => {
                let Some(sh) = srv.shares.get(share) else {
                    return Err(errs.share_missing);
                };
                self.authenticate(server, share, &m.principal, m.password.expose())
                    .map_err(|_| errs.bad_credentials)?;
                if sh.allows(&m.principal, rel) {
                    Ok(())
                } else {
                    Err(5)
                }
            }
        }
    }

    /// `NewSmbGlobalMapping`, as csi-proxy's server does it (`pkg/server/smb/server.go:55-122`, the same in every
    /// release): only an `OK` mapping of the lower-cased root counts as mapped; an OK one that fails PathValid is
    /// removed and re-created; otherwise a mapping is created (a `Disconnected` one is not removed first). Then
    /// `local_path` is validated and linked to the full remote path in the release's link form.
    pub fn new_smb_global_mapping(
        &mut self,
        remote_path: &str,
        local_path: &str,
        username: &str,
        password: &Secret,
    ) -> Result<()> {
        let remote = remote_path.replace('/', "\\");
        if remote.is_empty() {
            return Err(Error::host("remote path is empty"));
        }
        let (root, server, share) = root_mapping_path(&remote)?;
        let mut mapped = self
            .mappings
            .get(&root)
            .is_some_and(|m| m.status == MappingStatus::Ok);
        if mapped && !self.mapping_valid(&self.mappings[&root]) {
            self.mappings.remove(&root);
            mapped = false;
        }
        if !mapped {
            self.create_mapping(&root, &server, &share, username, password)?;
        }
        self.sync_links()?;
        if !local_path.is_empty() {
            paths::validate_path_windows(
                local_path,
                &self.cfg.kubelet_path,
                &self.cfg.working_dirs,
            )
            .map_err(Error::Host)?;
            let dp = paths::DrivePath::parse(local_path)
                .ok_or_else(|| texts::smb_link_failed(&self.profile, local_path, &remote, false))?;
            let link = self.real_drive_path(&dp);
            if link.symlink_metadata().is_ok() {
                return Err(texts::smb_link_failed(
                    &self.profile,
                    local_path,
                    &remote,
                    true,
                ));
            }
            if !link.parent().is_some_and(|p| p.is_dir()) {
                return Err(texts::smb_link_failed(
                    &self.profile,
                    local_path,
                    &remote,
                    false,
                ));
            }
            let rest: Vec<String> = remote
                .split('\\')
                .filter(|s| !s.is_empty())
                .skip(2)
                .map(str::to_string)
                .collect();
            let rest = paths::normalise_components(&rest.join("\\"));
            let mut real_target = match self.profile.smb_link {
                SmbLinkForm::NewItemUnc => self.layout.unc_link(&server, &share),
                SmbLinkForm::LongPathPrefixed => self.layout.unc_long_link(&server, &share),
            };
            for c in rest {
                real_target.push(c);
            }
            // Windows PowerShell 5.1 resolves `-Target` before it makes the link (profile row `smb_link_target`).
            if self.profile.smb_link_needs_target
                && self
                    .layout
                    .links()
                    .resolve(&real_target)
                    .metadata()
                    .is_err()
            {
                return Err(texts::smb_link_target_missing(local_path, &remote));
            }
            self.layout
                .links()
                .create(&real_target, &link)
                .map_err(|_| texts::smb_link_failed(&self.profile, local_path, &remote, false))?;
            self.file_links.remove(&link);
        }
        Ok(())
    }

    fn create_mapping(
        &mut self,
        root: &str,
        server: &str,
        share: &str,
        username: &str,
        password: &Secret,
    ) -> Result<()> {
        if self.profile.smb_needs_credentials && (username.is_empty() || password.is_empty()) {
            return Err(texts::ps_credential_required(password.is_empty()));
        }
        let report = texts::wmi_report(&self.profile, self.behaviour.wmi_failures);
        let require_privacy = self.cfg.require_privacy;
        match self.create_global_mapping(root, server, share, username, password, require_privacy) {
            Ok(()) => Ok(()),
            Err(code) => match texts::new_mapping_failed(&self.profile, report, code) {
                Some(e) => Err(e),
                // v1.3.0 ignores a non-zero ReturnValue: "success" without a mapping.
                None => Ok(()),
            },
        }
    }

    /// What Windows does on `MSFT_SmbGlobalMapping.Create` of `root` (shared by csi-proxy's view and the Windows
    /// view): 53 for an unknown or unreachable server, 67 for an unknown share, 5 when privacy is required of a
    /// server without encryption, 1219 when the server already has a mapping under another principal or this root
    /// already has one (a Disconnected one, with `disconnected_mapping_blocks_create`), the logon's own error; the
    /// Windows error number on failure.
    pub(crate) fn create_global_mapping(
        &mut self,
        root: &str,
        server: &str,
        share: &str,
        username: &str,
        password: &Secret,
        require_privacy: bool,
    ) -> std::result::Result<(), WinCode> {
        let account = (username, password);
        self.create_global_mapping_with(
            root,
            server,
            share,
            account,
            require_privacy,
            MappingOptions::default(),
        )
    }

    /// [`State::create_global_mapping`] with the client options only the Windows view's `Create` passes. A QUIC
    /// mapping to a server that does not accept QUIC fails as an unreachable server (53; which code Windows answers
    /// is **unverified**).
    pub(crate) fn create_global_mapping_with(
        &mut self,
        root: &str,
        server: &str,
        share: &str,
        (username, password): (&str, &Secret),
        require_privacy: bool,
        options: MappingOptions,
    ) -> std::result::Result<(), WinCode> {
        let Some(srv) = self.servers.get(server).filter(|s| s.reachable) else {
            return Err(53);
        };
        if options.transport_type == 2 && !srv.quic {
            return Err(53);
        }
        if !srv.shares.contains_key(share) {
            return Err(67);
        }
        if require_privacy && !srv.encryption {
            return Err(5);
        }
        let principal_key = username.to_lowercase();
        if self
            .mappings
            .values()
            .any(|m| m.server == server && m.principal.to_lowercase() != principal_key)
        {
            return Err(1219);
        }
        if let Some(existing) = self.mappings.get(root) {
            if existing.status == MappingStatus::Ok {
                // Only the Windows view gets here (csi-proxy never creates over an OK mapping): the name is taken.
                // Which code Windows answers is unverified (reference §5 item 4; chosen: 85, "The local device
                // name is already in use").
                return Err(85);
            }
            // A Disconnected mapping of this root (csi-proxy never removes it first): public reports show 1219.
            if self.cfg.disconnected_mapping_blocks_create {
                return Err(1219);
            }
            self.mappings.remove(root);
        }
        self.authenticate(server, share, username, password.expose())?;
        self.mappings.insert(
            root.to_string(),
            Mapping {
                remote_path: root.to_string(),
                server: server.to_string(),
                share: share.to_string(),
                principal: username.to_string(),
                password: password.clone(),
                status: MappingStatus::Ok,
                require_privacy,
                options,
                reports_2025_options: self.cfg.windows_build >= BUILD_WITH_2025_OPTIONS,
                settles: None,
            },
        );
        Ok(())
    }

    /// `RemoveSmbGlobalMapping`: by lower-cased root; fails when absent; leaves any local_path link.
    pub fn remove_smb_global_mapping(&mut self, remote_path: &str) -> Result<()> {
        let remote = remote_path.replace('/', "\\");
        if remote.is_empty() {
            return Err(Error::host("remote path is empty"));
        }
        let (root, _, _) = root_mapping_path(&remote)?;
        match self.mappings.remove(&root) {
            Some(_) => self.sync_links(),
            None => Err(texts::remove_mapping_not_found(&self.profile, &root)),
        }
    }

    /// Changes an account's password on a file server (existing mappings then fail PathValid and are re-created).
    pub fn set_smb_password(&mut self, server: &str, user: &str, password: Secret) -> Result<()> {
        let srv = self
            .servers
            .get_mut(&server.to_lowercase())
            .ok_or_else(|| Error::Scenario(format!("no SMB server {server}")))?;
        let acct = srv
            .accounts
            .iter_mut()
            .find(|a| a.user.eq_ignore_ascii_case(user))
            .ok_or_else(|| Error::Scenario(format!("no account {user} on {server}")))?;
        acct.password = password;
        Ok(())
    }

    /// Makes a file server reachable or not; unreachable servers' mappings become `Disconnected`.
    pub fn set_smb_reachable(&mut self, server: &str, reachable: bool) -> Result<()> {
        let key = server.to_lowercase();
        let srv = self
            .servers
            .get_mut(&key)
            .ok_or_else(|| Error::Scenario(format!("no SMB server {server}")))?;
        srv.reachable = reachable;
        if !reachable {
            for m in self.mappings.values_mut().filter(|m| m.server == key) {
                m.status = MappingStatus::Disconnected;
                m.settles = None;
            }
        }
        self.sync_links()
    }

    /// Maps `remote`'s share as another component of the node would (an administrator's `New-SmbGlobalMapping`,
    /// csi-proxy run with `-require-privacy=false`): with exactly these options, whatever the driver's flags.
    pub fn map_share_as_another_client(
        &mut self,
        remote: &str,
        username: &str,
        password: &Secret,
        require_privacy: bool,
        options: MappingOptions,
    ) -> Result<()> {
        let (root, server, share) = root_mapping_path(&remote.replace('/', "\\"))?;
        self.create_global_mapping_with(
            &root,
            &server,
            &share,
            (username, password),
            require_privacy,
            options,
        )
        .map_err(|code| {
            Error::host(format!("New-SmbGlobalMapping {root}: Windows error {code}"))
        })?;
        self.sync_links()
    }

    /// Sets the status of the global mapping of `root` (`\\server\share`, any case), e.g. `Reconnecting` after a
    /// network blip or an SMB 3 transparent failover. With `settle = (after, then)` it turns `then` by itself once
    /// `after` has passed on tokio's clock (the SMB client reconnected, or gave up): what `Connecting` and
    /// `Reconnecting` mean (`MSFT_SmbMapping.Status`, reference §2.2); how long Windows takes is **unverified**.
    pub fn set_mapping_status(
        &mut self,
        root: &str,
        status: MappingStatus,
        settle: Option<(std::time::Duration, MappingStatus)>,
    ) -> Result<()> {
        let key = root
            .replace('/', "\\")
            .trim_end_matches('\\')
            .to_lowercase();
        let m = self
            .mappings
            .get_mut(&key)
            .ok_or_else(|| Error::Scenario(format!("no SMB global mapping of {root}")))?;
        m.status = status;
        m.settles = settle.map(|(after, then)| (tokio::time::Instant::now() + after, then));
        self.sync_links()
    }

    /// Writes a file directly on a share (as another client of the file server would).
    pub fn write_share_file(
        &self,
        server: &str,
        share: &str,
        rel: &str,
        content: &[u8],
    ) -> Result<()> {
        let relp = paths::safe_relative(rel)
            .ok_or_else(|| Error::Scenario(format!("bad relative path {rel}")))?;
        let p = self
            .layout
            .share_store(&server.to_lowercase(), &share.to_lowercase())
            .join(relp);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::write(&p, content).map_err(|e| Error::io(&p, e))
    }

    /// Reads a file directly from a share's storage.
    pub fn read_share_file(&self, server: &str, share: &str, rel: &str) -> Result<Vec<u8>> {
        let relp = paths::safe_relative(rel)
            .ok_or_else(|| Error::Scenario(format!("bad relative path {rel}")))?;
        let p = self
            .layout
            .share_store(&server.to_lowercase(), &share.to_lowercase())
            .join(relp);
        std::fs::read(&p).map_err(|e| Error::io(&p, e))
    }
}
