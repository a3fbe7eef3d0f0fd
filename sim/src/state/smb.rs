//! SMB servers, shares and the host's global mappings (the Smb API group).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{State, paths, write_files};
use crate::error::{Error, Result};
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
    /// Accounts.
    pub accounts: Vec<SmbAccount>,
    /// Shares by lower-cased name.
    pub shares: BTreeMap<String, SmbShare>,
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
                accounts,
                shares,
            },
        );
    }
    Ok(())
}

/// Makes `<root>/unc/<server>/<share>` exist exactly for usable (OK, reachable) mappings.
pub(crate) fn sync_unc_links(st: &mut State) -> Result<()> {
    let unc = st.layout.unc_dir();
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
    if let Ok(servers) = std::fs::read_dir(&unc) {
        for s in servers.flatten() {
            let server = s.file_name().to_string_lossy().into_owned();
            if let Ok(shares) = std::fs::read_dir(s.path()) {
                for sh in shares.flatten() {
                    let share = sh.file_name().to_string_lossy().into_owned();
                    if !want.contains(&(server.clone(), share)) {
                        super::fs::remove_link(&sh.path()).map_err(|e| Error::io(sh.path(), e))?;
                    }
                }
            }
        }
    }
    for (server, share) in want {
        let link = st.layout.unc_link(&server, &share);
        if link.symlink_metadata().is_err() {
            let dir = st.layout.unc_dir().join(&server);
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let store = st.layout.share_store(&server, &share);
            std::fs::create_dir_all(&store).map_err(|e| Error::io(&store, e))?;
            st.layout
                .links()
                .create(&store, &link)
                .map_err(|e| Error::io(&link, e))?;
        }
    }
    Ok(())
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

fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A failed `New-SmbGlobalMapping` as csi-proxy reports it.
fn new_mapping_error(code: u32, text: &str) -> Error {
    let output = format!(
        "New-SmbGlobalMapping : {text} \r\n    + CategoryInfo          : NotSpecified: (MSFT_SmbGlobalMapping:ROOT/Microsoft/...mbGlobalMapping) [New-SmbGlobalMapping], CimException\r\n    + FullyQualifiedErrorId : Windows System Error {code},New-SmbGlobalMapping\r\n"
    );
    Error::host(format!(
        "NewSmbGlobalMapping failed. output: {}, err: exit status 1",
        go_quote(&output)
    ))
}

/// Windows error 1219.
pub(crate) const TEXT_1219: &str = "Multiple connections to a server or shared resource by the same user, using more than one user name, are not allowed. Disconnect all previous connections to the server or shared resource and try again.";

impl State {
    fn authenticate(
        &self,
        server: &str,
        share: &str,
        username: &str,
        password: &str,
    ) -> Result<()> {
        let srv = &self.servers[server];
        let sh = &srv.shares[share];
        if username.is_empty() {
            return if sh.guest {
                Ok(())
            } else {
                Err(new_mapping_error(5, "Access is denied."))
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
            return Err(new_mapping_error(
                1326,
                "The user name or password is incorrect.",
            ));
        };
        if !sh.users.is_empty()
            && !sh
                .users
                .iter()
                .any(|u| u.eq_ignore_ascii_case(&account.user))
        {
            return Err(new_mapping_error(5, "Access is denied."));
        }
        Ok(())
    }

    /// Whether an OK mapping is still usable (csi-proxy's PathValid on the root).
    fn mapping_valid(&self, m: &Mapping) -> bool {
        let Some(srv) = self.servers.get(&m.server) else {
            return false;
        };
        srv.reachable
            && srv.shares.contains_key(&m.share)
            && self
                .authenticate(&m.server, &m.share, &m.principal, m.password.expose())
                .is_ok()
    }

    /// `NewSmbGlobalMapping`.
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
        let Some((server, share, _)) = paths::parse_unc(&remote) else {
            return Err(new_mapping_error(
                123,
                "The filename, directory name, or volume label syntax is incorrect.",
            ));
        };
        let root = format!(r"\\{server}\{share}");
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
            let mut target = remote.clone();
            if !target.ends_with('\\') {
                target.push('\\');
            }
            let link_fail = |text: String| {
                Error::host(format!(
                    "creating link {local_path} to {remote} failed with error: error linking {target} to {local_path}. output: {text}, err: exit status 1"
                ))
            };
            let dp = paths::DrivePath::parse(local_path)
                .ok_or_else(|| link_fail("invalid path".into()))?;
            let link = self.real_drive_path(&dp);
            if link.symlink_metadata().is_ok() {
                return Err(link_fail(format!(
                    "New-Item : An item with the specified name {local_path} already exists."
                )));
            }
            if !link.parent().is_some_and(|p| p.is_dir()) {
                return Err(link_fail(format!(
                    "New-Item : Could not find a part of the path '{local_path}'."
                )));
            }
            let (_, _, rest) = paths::parse_unc(&remote).unwrap_or_default();
            let mut real_target = self.layout.unc_link(&server, &share);
            for c in rest {
                real_target.push(c);
            }
            self.layout
                .links()
                .create(&real_target, &link)
                .map_err(|e| link_fail(super::fs::win_io_text(&e).to_string()))?;
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
        let Some(srv) = self.servers.get(server).filter(|s| s.reachable) else {
            return Err(new_mapping_error(53, "The network path was not found."));
        };
        if !srv.shares.contains_key(share) {
            return Err(new_mapping_error(67, "The network name cannot be found."));
        }
        if self.cfg.require_privacy && !srv.encryption {
            return Err(new_mapping_error(5, "Access is denied."));
        }
        let principal_key = username.to_lowercase();
        if self
            .mappings
            .values()
            .any(|m| m.server == server && m.principal.to_lowercase() != principal_key)
        {
            return Err(new_mapping_error(1219, TEXT_1219));
        }
        if self.mappings.contains_key(root) {
            if self.cfg.disconnected_mapping_blocks_create {
                return Err(new_mapping_error(
                    85,
                    "The local device name is already in use.",
                ));
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
                require_privacy: self.cfg.require_privacy,
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
        let root = paths::parse_unc(&remote).map(|(s, sh, _)| format!(r"\\{s}\{sh}"));
        match root.and_then(|r| self.mappings.remove(&r)) {
            Some(_) => self.sync_links(),
            None => {
                let output = format!(
                    "Remove-SmbGlobalMapping : No MSFT_SmbGlobalMapping objects found with property 'RemotePath' equal to '{remote}'.  Verify the value of the property and retry.\r\n    + CategoryInfo          : ObjectNotFound: ({remote}:String) [Remove-SmbGlobalMapping], CimJobException\r\n    + FullyQualifiedErrorId : CmdletizationQuery_NotFound_RemotePath,Remove-SmbGlobalMapping\r\n"
                );
                Err(Error::host(format!(
                    "UnmountSmbShare failed. output: {}, err: exit status 1",
                    go_quote(&output)
                )))
            }
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
            }
        }
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
