//! SMB global mappings over `MSFT_SmbGlobalMapping` (reference §2.2, §3), with the ledger of the mappings this driver
//! created.
//!
//! A global mapping has no owner or user field, so "created by wincsi" is recorded: the share root goes into a
//! durable ledger (`native-smb-mappings.json` in the state directory) **before** `Create`, and leaves it after
//! `Remove` (or after a `Create` that definitely failed). A crash in between over-counts, which only means a mapping
//! wincsi may have created is removed by wincsi later. At start the driver also adds the shares its own volume records
//! say it mapped ([`super::NativeHost::adopt_mappings`]): mappings made through csi-proxy before a node moved to
//! HostProcess mode, or before the state directory's ledger was lost. A mapping in neither is someone else's
//! (another driver, an administrator): it is reused while it works and never removed; when it does not work, stage
//! fails with a message saying so instead of removing it.
//!
//! **`NewSmbGlobalMapping` never removes a mapping.** The driver calls it under the share's *shared* lock while
//! other staged volumes use the mapping, so a repair inside it would cut their pods' open handles (for the sibling
//! class, Microsoft documents `Force` as "the mapping will be removed even if it is in use, which may cause data
//! loss"). What it finds decides the answer instead:
//!
//! | The share's mapping | Answer |
//! | --- | --- |
//! | none | `Create` (then the link) |
//! | `OK`, its root answers | reused (a warning, and `wincsi_smb_unencrypted_mapping_reuses_total`, when wincsi requires encryption and it does not) |
//! | `Connecting`, `Reconnecting`, `NetworkError` | left alone and waited for (bounded, with backoff, by the async side in `mod.rs`), then `Unavailable` |
//! | `OK`, its root answers "access denied" or "not found" | reused: the logon works (an account allowed only below the root is refused the root by its permissions, not by a stale credential); the stage judges the volume's own path after the link |
//! | `Disconnected`, `Unavailable`; or `OK` but its server refuses the logon (1326, 86, 1312, an account disabled, expired, locked out or restricted: `winhost::codes::Win32Error::is_logon_refused`) | `StaleMapping`: the driver's own repair upgrades to the share's exclusive lock and — only when no other staged volume still reaches the share through it — removes it (only if wincsi made it) and maps again (`driver/src/smb/mapping.rs`) |
//! | `OK` but its root does not answer otherwise (53, 64, 1231, 1219, a timeout) | `Unavailable`: re-creating cannot reach the server either, and removing it would cut its users |
//! | `Paused` | `Unavailable`, naming it (an operator's doing) |
//!
//! csi-proxy, by contrast, removes an OK-but-unreachable mapping inside its own `NewSmbGlobalMapping`
//! (`kubernetes-csi/csi-proxy@v1.3.0 pkg/server/smb/server.go:71-93`).
//!
//! The share's mapping is looked up by `RemotePath` (`SELECT … WHERE RemotePath = root`), and only when that finds
//! none of the share, among every mapping, compared ignoring case and slash style ([`mappings_of`]): whether the
//! provider's comparison ignores case is unverified (reference §2.2), and a mapping someone made as `\\FS1\Data`
//! must still be found for `\\fs1\data`.
//!
//! `Create` gets `RemotePath` = the share root, the credential as `user:password` with `\` and `:` escaped in the
//! user name (reference §2.2; `winhost::smb::credential_string`), and `RequirePrivacy` as `--smb-require-privacy`
//! says (default true, csi-proxy's `-require-privacy` default since v1.2.0: `kubernetes-csi/csi-proxy@v1.3.0
//! cmd/csi-proxy/main.go:40`; v1.1.3 always passes `-RequirePrivacy $true`, `@v1.1.3 pkg/os/smb/api.go:68`). The
//! link at `link` points at the full remote path (share plus subdirectory), as a directory link.

use tracing::{info, warn};
use winhost::ErrorKind;
use winhost::codes::SmbMappingStatus;
use winhost::model::{
    SmbGlobalMapping, SmbGlobalMappingCreate, SmbTransport as WinTransport, SymlinkFlags,
};
use winhost::paths::UncParts;

use super::{
    HostError, HostErrorKind, HostOp, HostPath, HostResult, Ops, Secret, SmbCredential, UncPath,
};
use crate::host::{ReportedOptions, SmbMappingOptions, SmbTransport};
use crate::locks::Deadline;

/// The ledger's file name in the state directory.
pub const LEDGER_FILE: &str = "native-smb-mappings.json";

/// Whether two UNC paths name the same share root, ignoring slash style (csi-driver-smb PR #163) and compared as
/// Windows compares names (every character, not ASCII only: `\\fs1\Ärzte` and `\\fs1\ärzte` are one mapping).
pub(super) fn same_share_root(a: &str, b: &str) -> bool {
    match (UncParts::parse(a), UncParts::parse(b)) {
        (Some(a), Some(b)) => crate::host::names_equal(&a.share_root(), &b.share_root()),
        _ => false,
    }
}

/// The global mappings of the share root `root` (`\\server\share`): `SELECT … WHERE RemotePath = root` first, so a
/// node with many mappings is not listed whole for each look-up; when that yields no row of this share (the provider
/// may compare `RemotePath` case-sensitively: unverified, reference §2.2), every mapping, compared here the way
/// Windows compares names ([`same_share_root`]) — a mapping made in another spelling or case is still found, so no
/// second one is created and none is missed.
pub(super) fn mappings_of(o: &Ops<'_>, root: &str) -> HostResult<Vec<SmbGlobalMapping>> {
    let of_share = |mappings: Vec<SmbGlobalMapping>| -> Vec<SmbGlobalMapping> {
        mappings
            .into_iter()
            .filter(|m| same_share_root(&m.remote_path, root))
            .collect()
    };
    let found = of_share(o.w.global_mappings_of(o.c, root).map_err(|e| o.err(e))?);
    if !found.is_empty() {
        return Ok(found);
    }
    Ok(of_share(o.w.global_mappings(o.c).map_err(|e| o.err(e))?))
}

fn ledger_error(o: &Ops<'_>, e: std::io::Error) -> super::HostError {
    o.fail(
        HostErrorKind::Other,
        format!("cannot record the SMB mapping in the state directory: {e}"),
    )
}

/// One pass of `NewSmbGlobalMapping` (see the module docs' table).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum MapPass {
    /// Mapped (created or reused) and linked.
    Done,
    /// The share's mapping is re-establishing itself (`Connecting`, `Reconnecting`, `NetworkError`): ask again later.
    Settling(SmbMappingStatus),
}

/// A mapping status as PowerShell shows it (`Disconnected`).
pub(super) fn status_text(status: SmbMappingStatus) -> String {
    match status.meaning() {
        Some(m) => m.to_owned(),
        None => format!("in status {}", status.code()),
    }
}

/// What the share root's answer through an `OK` mapping says about the mapping.
#[derive(Debug, PartialEq, Eq)]
enum RootAnswer {
    /// The mapping works: the root answered, or the server answered for the file itself — access denied (an account
    /// allowed only below the root: the logon worked and the directory's permissions refused it) or not found. The
    /// volume's own path is judged after the link (the protocol's `IsSymlink` of the staging path).
    Works,
    /// The server refused the mapping's logon (`Win32Error::is_logon_refused`: 1326, 86, the `ERROR_ACCOUNT_*`
    /// refusals): its credentials no longer work (a rotated password, a disabled or locked-out account), so it must
    /// be re-created with the requested ones.
    LogonRefused,
    /// The server did not answer (53, 64, 1231, a timeout, 1219 from another session to the server, …).
    Silent,
}

fn root_answer(e: &winhost::CallError) -> RootAnswer {
    match e.win32_code() {
        Some(code) if code.is_logon_refused() => RootAnswer::LogonRefused,
        _ if matches!(e.kind(), ErrorKind::AccessDenied | ErrorKind::NotFound) => RootAnswer::Works,
        _ if e.kind() == ErrorKind::LogonFailure => RootAnswer::LogonRefused,
        _ => RootAnswer::Silent,
    }
}

/// The `StaleMapping` answer for a mapping that serves no one: the driver's repair removes it if wincsi made it.
fn stale(o: &Ops<'_>, root: &str, key: &str, why: &str) -> super::HostError {
    let message = if o.ledger.contains(key) {
        format!(
            "the SMB global mapping of {root} {why}: it must be re-created (wincsi does so under the share's \
             exclusive lock, never while another stage of the share runs)"
        )
    } else {
        // The protocol's repair asks to remove it (which leaves it in place, not ours) and retries once, then reports
        // this message as FailedPrecondition.
        format!(
            "the SMB global mapping of {root} {why} and was not created by wincsi, which never removes a mapping it \
             did not create; remove or repair it on the node (Remove-SmbGlobalMapping -RemotePath {root})"
        )
    };
    o.fail(HostErrorKind::StaleMapping, message)
}

/// `NewSmbGlobalMapping`, one pass: create the share's mapping when there is none, reuse a working one, and answer
/// for any other (module docs) — never removing one; then the link.
pub(super) fn new_mapping(
    o: &Ops<'_>,
    remote: &UncPath,
    link: Option<&str>,
    cred: Option<&(String, Secret)>,
    options: &SmbMappingOptions,
) -> HostResult<MapPass> {
    let root = remote.root().to_string();
    let key = remote.root_key();
    check_build(o, &root, options)?;
    let mappings = mappings_of(o, &root)?;
    match mappings.first() {
        None => create(o, &root, &key, cred, options)?,
        Some(m) if m.status.is_settling() => return Ok(MapPass::Settling(m.status)),
        Some(m) if m.status.is_broken() => {
            return Err(stale(
                o,
                &root,
                &key,
                &format!("is {}", status_text(m.status)),
            ));
        }
        Some(m) if m.status.is_ok() => match o
            .w
            .file_attributes(o.c, &format!(r"{root}\"))
            .map_err(|e| (root_answer(&e), e))
        {
            Ok(_) | Err((RootAnswer::Works, _)) => {
                let why = options.weaker_in(&reported(m));
                if !why.is_empty() {
                    return Err(o.fail(
                        HostErrorKind::NotSatisfiable,
                        format!(
                            "the SMB global mapping of {root} exists with weaker client options than this volume \
                             asks ({}): wincsi never reuses a mapping weaker than asked, and does not remove one \
                             that other volumes or other software may use. Give every volume of the share the same \
                             options (the StorageClass's parameters), or, once no pod on this node uses the share, \
                             remove the mapping (unstage its volumes; a mapping wincsi did not make: \
                             Remove-SmbGlobalMapping -RemotePath {root}) so the next stage maps it as asked",
                            why.join("; ")
                        ),
                    ));
                }
                if options.require_privacy.is_none()
                    && o.smb_privacy
                    && m.require_privacy == Some(false)
                {
                    warn!(
                        root = %root,
                        "reusing an SMB global mapping that does not require encryption (RequirePrivacy false), \
                         although --smb-require-privacy is on: someone else made it; remove it on the node to have \
                         wincsi map the share encrypted"
                    );
                    if let Some(metrics) = crate::metrics::installed() {
                        metrics.observe_unencrypted_mapping_reuse();
                    }
                }
            }
            Err((RootAnswer::LogonRefused, e)) => {
                return Err(stale(
                    o,
                    &root,
                    &key,
                    &format!("is OK but its server refuses the logon it was made with ({e})"),
                ));
            }
            Err((_, e)) => {
                return Err(o.fail(
                    HostErrorKind::Unavailable,
                    format!(
                        "the SMB global mapping of {root} is OK but its share does not answer ({e}); it is left in \
                         place (other volumes may use it, and re-creating it cannot reach the server either)"
                    ),
                ));
            }
        },
        Some(m) => {
            return Err(o.fail(
                HostErrorKind::Unavailable,
                format!(
                    "the SMB global mapping of {root} is {}; wincsi leaves it so (resume it on the node)",
                    status_text(m.status)
                ),
            ));
        }
    }
    if let Some(link) = link {
        o.w.create_symbolic_link(o.c, link, &remote.to_string(), SymlinkFlags::DIRECTORY)
            .map_err(|e| o.err(e))?;
    }
    Ok(MapPass::Done)
}

/// What an existing mapping's instance reports of the client options.
fn reported(m: &SmbGlobalMapping) -> ReportedOptions {
    ReportedOptions {
        require_privacy: m.require_privacy,
        require_integrity: m.require_integrity,
        use_write_through: m.use_write_through,
        compress_network_traffic: m.compress_network_traffic,
        transport_type: match m.transport_type {
            Some(WinTransport::Tcp) => Some(SmbTransport::Tcp),
            Some(WinTransport::Quic) => Some(SmbTransport::Quic),
            Some(WinTransport::Default) | None => None,
        },
        block_ntlm: m.block_ntlm,
    }
}

/// Refuse, before any WMI call, an option the node's Windows build lacks (`RtlGetVersion`'s build number; the
/// options' first builds: `host/smb_options.rs`). A build that cannot be read refuses every asked option rather than
/// guess.
fn check_build(o: &Ops<'_>, root: &str, options: &SmbMappingOptions) -> HostResult<()> {
    let build = o.w.os_build();
    let missing = options.missing_on(build.unwrap_or(0));
    if missing.is_empty() {
        return Ok(());
    }
    let node = build.map_or_else(|| "cannot be read".to_owned(), |b| format!("is {b}"));
    let needs: Vec<String> = missing
        .iter()
        .map(|m| {
            let (b, name) = m.first_build();
            format!("{} needs build {b} ({name}) or later", m.key())
        })
        .collect();
    Err(o.fail(
        HostErrorKind::NotSatisfiable,
        format!(
            "the volume's SMB client options cannot be given to the mapping of {root} on this node: {}; the node's \
             Windows build {node}. Schedule the volume's pods on newer nodes (a nodeSelector or node affinity on \
             node.kubernetes.io/windows-build) or remove the option from the StorageClass",
            needs.join(", ")
        ),
    ))
}

fn create(
    o: &Ops<'_>,
    root: &str,
    key: &str,
    cred: Option<&(String, Secret)>,
    options: &SmbMappingOptions,
) -> HostResult<()> {
    // Already held with no mapping of the share in sight: an earlier `Create` of wincsi's wrote it (durably, before
    // it was issued) and may still land — a killed process's method, which its WMI provider finishes.
    let held = o.ledger.contains(key);
    o.ledger.set(key, true).map_err(|e| ledger_error(o, e))?;
    let params = SmbGlobalMappingCreate {
        remote_path: root,
        local_path: None,
        user_name: cred.map(|(u, _)| u.as_str()).filter(|u| !u.is_empty()),
        password: cred.map(|(_, p)| p.expose()).unwrap_or(""),
        persistent: None,
        // The volume's own choice, else --smb-require-privacy.
        require_privacy: Some(options.require_privacy.unwrap_or(o.smb_privacy)),
        require_integrity: options.require_integrity,
        use_write_through: options.use_write_through,
        compress_network_traffic: options.compress_network_traffic,
        transport_type: options.transport_type.map(|t| match t {
            SmbTransport::Tcp => WinTransport::Tcp,
            SmbTransport::Quic => WinTransport::Quic,
        }),
        block_ntlm: options.block_ntlm,
    };
    // In the in-flight ledger while it runs (`inflight.rs`): an unstage of a killed driver's stage waits for a `Create`
    // its provider may finish, and for nothing else of the dead process.
    let called = o.calls.method(
        o,
        super::inflight::CREATE_MAPPING,
        &crate::host::HostObject::Mapping(root.to_owned()),
        None,
        None,
    )?;
    let created = o.method(o.w.global_mapping_create(o.c, &params), &[]);
    drop(called);
    if let Err(e) = &created
        && e.kind != HostErrorKind::DeadlineExceeded
        && e.kind != HostErrorKind::Unavailable
    {
        // A definite failure: this `Create` made no mapping. The key goes, unless it was held before and the share has
        // a mapping now: the earlier `Create` that wrote it landed between this pass's look and its own `Create`
        // (which then failed on the name taken), so that mapping is wincsi's and its last unstage removes it.
        let landed = held && mappings_of(o, root).is_ok_and(|m| !m.is_empty());
        if landed {
            info!(
                root,
                "SMB mapping counted as wincsi's: an earlier Create of this driver (announced in its ledger) landed \
                 while this stage mapped the share"
            );
        } else {
            o.ledger.set(key, false).map_err(|e| ledger_error(o, e))?;
        }
    }
    created.map(|_| ())
}

impl super::NativeHost {
    /// `NewSmbGlobalMapping` with the volume's client options ([`new_mapping`] on the pool, one pass at a time): a
    /// mapping the SMB client is re-establishing is looked at again with backoff, never torn down.
    pub(super) async fn map_share(
        &self,
        remote: &UncPath,
        link: Option<&HostPath>,
        credential: Option<&SmbCredential>,
        options: &SmbMappingOptions,
        d: Deadline,
    ) -> HostResult<()> {
        let op = HostOp::NewSmbGlobalMapping;
        let options = *options;
        let link = link.map(|l| l.as_str().to_owned());
        let cred = credential.map(|c| (c.principal().to_owned(), c.password().clone()));
        // A mapping the SMB client is re-establishing is waited for, never torn down (smb.rs): bounded by
        // super::MAPPING_SETTLE_WAIT and the RPC's deadline, with backoff.
        let give_up = tokio::time::Instant::now() + super::MAPPING_SETTLE_WAIT;
        let mut step = super::MAPPING_SETTLE_STEP;
        loop {
            let (r, l, c) = (remote.clone(), link.clone(), cred.clone());
            let pass = self
                .run(op, d, move |o| {
                    new_mapping(o, &r, l.as_deref(), c.as_ref(), &options)
                })
                .await?;
            let MapPass::Settling(status) = pass else {
                return Ok(());
            };
            let status = status_text(status);
            let now = tokio::time::Instant::now();
            if now + step > give_up || now + step >= d.instant() {
                return Err(HostError::new(
                    op,
                    HostErrorKind::Unavailable,
                    format!(
                        "the SMB global mapping of {} is still {status}: the node's SMB client is re-establishing it; \
                         it is left in place (other volumes may use it) and the stage can be retried",
                        remote.root()
                    ),
                ));
            }
            info!(root = %remote.root(), %status, wait_ms = step.as_millis() as u64, "the SMB mapping is \
                  re-establishing itself: waiting before looking again");
            tokio::time::sleep(step).await;
            step = (step * 2).min(super::MAPPING_SETTLE_STEP_MAX);
        }
    }
}

/// The ledger key of the share root `root` (`\\server\share` in any spelling): its lower-cased root, as volume records
/// and `UncPath::root_key` keep it.
fn ledger_key(root: &str) -> Option<String> {
    UncPath::parse(root, "share root")
        .ok()
        .map(|u| u.root_key())
}

/// Whether the ledger counts the mapping of `root` as wincsi's ([`crate::host::Host::made_by_wincsi`]).
pub(super) fn made_by_wincsi(ledger: &super::Ledger, root: &str) -> bool {
    ledger_key(root).is_some_and(|k| ledger.contains(&k))
}

/// Count the mapping of `root` as wincsi's: an adopted staging link of this driver points into the share (the same
/// proof the volume records give at start, [`super::NativeHost::adopt_mappings`]).
pub(super) fn claim(o: &Ops<'_>, root: &str) -> HostResult<()> {
    let Some(key) = ledger_key(root) else {
        return Ok(());
    };
    let added = o.ledger.adopt([key]).map_err(|e| ledger_error(o, e))?;
    if !added.is_empty() {
        info!(
            root,
            "SMB mapping counted as wincsi's: a staging link of this driver into the share was adopted"
        );
    }
    Ok(())
}

/// `RemoveSmbGlobalMapping`: NotFound when there is none; a mapping wincsi did not create is left in place.
pub(super) fn remove_mapping(o: &Ops<'_>, remote: &UncPath) -> HostResult<()> {
    let root = remote.root().to_string();
    let key = remote.root_key();
    let mappings = mappings_of(o, &root)?;
    let Some(m) = mappings.first() else {
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
    // In the in-flight ledger while it runs (`inflight.rs`): a removal that outlives a killed driver is waited for by
    // the share's stages until the mapping list shows it gone, not for the one-hour bound.
    let _called = o.calls.method(
        o,
        super::inflight::REMOVE_MAPPING,
        &crate::host::HostObject::Mapping(root.clone()),
        None,
        None,
    )?;
    o.method(o.w.global_mapping_remove(o.c, &m.path, true), &[])?;
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
