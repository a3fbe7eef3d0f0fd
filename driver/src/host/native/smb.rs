//! SMB global mappings over `MSFT_SmbGlobalMapping` (reference §2.2, §3), with the ledger of the mappings this driver
//! created.
//!
//! A global mapping has no owner or user field, so "created by wincsi" is recorded: the share root goes into a
//! durable ledger (`native-smb-mappings.json` in the state directory) **before** `Create`, and leaves it after
//! `Remove` (or after a `Create` that definitely failed). A crash in between over-counts, which only means a mapping
//! wincsi may have created is removed by wincsi later. A mapping not in the ledger is someone else's (another
//! driver, an administrator, a csi-proxy-era wincsi): it is reused while it works and never removed; when it does not
//! work, stage fails with a message saying so instead of removing it.
//!
//! `Create` gets `RemotePath` = the share root, the credential as `user:password` with `\` and `:` escaped in the
//! user name (reference §2.2; `winhost::smb::credential_string`), `RequirePrivacy = true` (csi-proxy's default since
//! v1.2.0). The link at `link` points at the full remote path (share plus subdirectory), as a directory link.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use tracing::{info, warn};
use winhost::model::{SmbGlobalMapping, SmbGlobalMappingCreate, SymlinkFlags};
use winhost::paths::UncParts;

use super::{HostErrorKind, HostResult, Ops, Secret, UncPath};

/// The ledger's file name in the state directory.
pub const LEDGER_FILE: &str = "native-smb-mappings.json";

/// The share roots (lower-cased `\\server\share`) whose global mapping this driver created.
pub(crate) struct Ledger {
    path: Option<PathBuf>,
    roots: Mutex<BTreeSet<String>>,
}

impl Ledger {
    /// The ledger kept in `dir` (read now; a missing or unreadable file starts empty, logged), or in memory.
    pub(crate) fn open(dir: Option<&Path>) -> Self {
        let path = dir.map(|d| d.join(LEDGER_FILE));
        let roots = match &path {
            Some(p) => match std::fs::read(p) {
                Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                    warn!(file = %p.display(), error = %e, "unreadable SMB mapping ledger: starting empty");
                    BTreeSet::new()
                }),
                Err(_) => BTreeSet::new(),
            },
            None => BTreeSet::new(),
        };
        Self {
            path,
            roots: Mutex::new(roots),
        }
    }

    pub(crate) fn contains(&self, root: &str) -> bool {
        self.lock().contains(root)
    }

    /// Add or remove `root`, durably (write, fsync, rename) before returning.
    pub(crate) fn set(&self, root: &str, present: bool) -> std::io::Result<()> {
        let mut roots = self.lock();
        let changed = if present {
            roots.insert(root.to_owned())
        } else {
            roots.remove(root)
        };
        if !changed {
            return Ok(());
        }
        let Some(path) = &self.path else {
            return Ok(());
        };
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(&*roots).map_err(std::io::Error::other)?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.roots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether two UNC paths name the same share root, ignoring slash style (csi-driver-smb PR #163) and compared as
/// Windows compares names (every character, not ASCII only: `\\fs1\Ärzte` and `\\fs1\ärzte` are one mapping).
pub(super) fn same_share_root(a: &str, b: &str) -> bool {
    match (UncParts::parse(a), UncParts::parse(b)) {
        (Some(a), Some(b)) => crate::host::names_equal(&a.share_root(), &b.share_root()),
        _ => false,
    }
}

fn find<'a>(mappings: &'a [SmbGlobalMapping], root: &str) -> Option<&'a SmbGlobalMapping> {
    mappings
        .iter()
        .find(|m| same_share_root(&m.remote_path, root))
}

fn ledger_error(o: &Ops<'_>, e: std::io::Error) -> super::HostError {
    o.fail(
        HostErrorKind::Other,
        format!("cannot record the SMB mapping in the state directory: {e}"),
    )
}

/// `NewSmbGlobalMapping`: reuse a working mapping, repair one of ours that does not work, refuse to touch one that is
/// not ours, create one otherwise; then the link.
pub(super) fn new_mapping(
    o: &Ops<'_>,
    remote: &UncPath,
    link: Option<&str>,
    cred: Option<&(String, Secret)>,
) -> HostResult<()> {
    let root = remote.root().to_string();
    let key = remote.root_key();
    let mappings = o.w.global_mappings(o.c).map_err(|e| o.err(e))?;
    let ours = o.ledger.contains(&key);
    let usable = match find(&mappings, &root) {
        None => false,
        Some(m) => {
            let working =
                m.status.is_ok() && o.w.file_attributes(o.c, &format!(r"{root}\")).is_ok();
            if !working {
                if !ours {
                    // StaleMapping: the protocol's repair asks to remove it (which leaves it in place, not ours)
                    // and retries once, then reports this message as FailedPrecondition.
                    return Err(o.fail(
                        HostErrorKind::StaleMapping,
                        format!(
                            "the SMB global mapping of {root} is {} and was not created by wincsi, which never removes \
                             a mapping it did not create; remove or repair it on the node (Remove-SmbGlobalMapping \
                             -RemotePath {root})",
                            if m.status.is_ok() { "not reachable".to_owned() } else { m.status.to_string() }
                        ),
                    ));
                }
                info!(root = %root, status = %m.status, "repairing the SMB mapping wincsi created: removing it");
                let out =
                    o.w.global_mapping_remove(o.c, &m.path, true)
                        .map_err(|e| o.err(e))?;
                o.accept(out, &[])?;
            }
            working
        }
    };
    if !usable {
        create(o, &root, &key, cred)?;
    }
    if let Some(link) = link {
        o.w.create_symbolic_link(o.c, link, &remote.to_string(), SymlinkFlags::DIRECTORY)
            .map_err(|e| o.err(e))?;
    }
    Ok(())
}

fn create(o: &Ops<'_>, root: &str, key: &str, cred: Option<&(String, Secret)>) -> HostResult<()> {
    o.ledger.set(key, true).map_err(|e| ledger_error(o, e))?;
    let params = SmbGlobalMappingCreate {
        remote_path: root,
        local_path: None,
        user_name: cred.map(|(u, _)| u.as_str()).filter(|u| !u.is_empty()),
        password: cred.map(|(_, p)| p.expose()).unwrap_or(""),
        persistent: None,
        require_privacy: Some(true),
        require_integrity: None,
        use_write_through: None,
    };
    let created =
        o.w.global_mapping_create(o.c, &params)
            .map_err(|e| o.err(e))
            .and_then(|out| o.accept(out, &[]));
    if let Err(e) = &created
        && e.kind != HostErrorKind::DeadlineExceeded
        && e.kind != HostErrorKind::Unavailable
    {
        // A definite failure: no mapping was made, so it is not ours.
        o.ledger.set(key, false).map_err(|e| ledger_error(o, e))?;
    }
    created.map(|_| ())
}

/// `RemoveSmbGlobalMapping`: NotFound when there is none; a mapping wincsi did not create is left in place.
pub(super) fn remove_mapping(o: &Ops<'_>, remote: &UncPath) -> HostResult<()> {
    let root = remote.root().to_string();
    let key = remote.root_key();
    let mappings = o.w.global_mappings(o.c).map_err(|e| o.err(e))?;
    let Some(m) = find(&mappings, &root) else {
        o.ledger.set(&key, false).map_err(|e| ledger_error(o, e))?;
        return Err(o.fail(
            HostErrorKind::NotFound,
            format!("no SMB global mapping of {root}"),
        ));
    };
    if !o.ledger.contains(&key) {
        info!(root = %root, "SMB mapping left in place: it was not created by wincsi");
        return Ok(());
    }
    let out =
        o.w.global_mapping_remove(o.c, &m.path, true)
            .map_err(|e| o.err(e))?;
    o.accept(out, &[])?;
    o.ledger.set(&key, false).map_err(|e| ledger_error(o, e))
}

#[cfg(test)]
mod root_tests {
    use super::same_share_root;

    #[test]
    fn share_roots_compare_the_windows_way_in_any_spelling() {
        assert!(same_share_root(r"\\10.1.2.5\Share\a", "//10.1.2.5/share"));
        assert!(same_share_root(r"\\fs1\Ärzte", r"\\FS1\ärzte\x"));
        assert!(!same_share_root(r"\\srv\a", r"\\srv\b"));
        assert!(!same_share_root(r"\\srv\a", r"C:\a"));
    }
}
