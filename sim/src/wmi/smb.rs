//! `ROOT\Microsoft\Windows\SMB` global mappings over the host model (reference §2.2).
//!
//! `Create` is the model's own mapping creation (the one csi-proxy's NewSmbGlobalMapping reaches): 53, 67, 5, 1219,
//! 1326 by cause, and over an existing mapping of the same root 1219 (Disconnected, with
//! `disconnected_mapping_blocks_create`) or 85 (OK; **unverified**, reference §5 item 4). Unlike csi-proxy, a Windows
//! caller sees every mapping with its `Status` and can remove a Disconnected one itself. The error is raised, as
//! PowerShell shows it (`Windows System Error 1219,New-SmbGlobalMapping`, csi-driver-smb #219): the call fails and
//! its `MSFT_WmiError` carries the Windows error ([`super::raised`]); with `host.behaviour.wmi_failures =
//! return_value`, it is the method's `ReturnValue` instead (the other plausible answer: reference §5 item 1).

use serde_json::json;
use winhost::facade::SmbOutcome;
use winhost::model::{SmbGlobalMapping, SmbGlobalMappingCreate};
use winhost::{CallContext, CallResult, MethodOutcome, ObjectPath, SmbReturn, SmbWmi};

use super::iscsi::report;
use super::objects::{mapping_of, msft_mapping};
use super::{WindowsView, bad_path, not_found};
use crate::profile::WmiFailureReport;
use crate::secret::Secret;
use crate::state::{BUILD_WITH_2022_OPTIONS, BUILD_WITH_2025_OPTIONS, MappingOptions, State};

fn failed<T: Default>(st: &State, method: &'static str, code: u32) -> CallResult<SmbOutcome<T>> {
    match report(st) {
        WmiFailureReport::Exception => Err(super::raised(
            method,
            code,
            "WIN32",
            crate::profile::windows_message(code),
        )),
        WmiFailureReport::ReturnValue => Ok(MethodOutcome::new(
            method,
            SmbReturn(code),
            None,
            T::default(),
        )),
    }
}

/// `\\server\share` of a `RemotePath`, lower-cased, with server and share (csi-proxy's `getRootMappingPath` rule).
fn root_of(remote: &str) -> Option<(String, String, String)> {
    let parts: Vec<String> = remote
        .replace('/', "\\")
        .split('\\')
        .filter(|s| !s.is_empty())
        .map(str::to_lowercase)
        .collect();
    let [server, share] = parts.as_slice() else {
        return None;
    };
    Some((
        format!(r"\\{server}\{share}"),
        server.clone(),
        share.clone(),
    ))
}

impl SmbWmi for WindowsView {
    fn global_mappings(&self, ctx: &CallContext) -> CallResult<Vec<SmbGlobalMapping>> {
        self.call(ctx, "SELECT MSFT_SmbGlobalMapping", json!({}), |st| {
            Ok(st.mappings.values().map(msft_mapping).collect())
        })
    }

    /// `SELECT … WHERE RemotePath = "…"`: the mappings whose `RemotePath` equals `remote_path` exactly — case,
    /// slashes and all. Whether the SMB provider compares `RemotePath` ignoring case is **unverified** (reference
    /// §2.2; `docs/real-node-checks.md` N3), so the view is at least as unkind as Windows may be: `\\FS1\Data`
    /// finds nothing when the mapping lists as `\\fs1\data` (every `RemotePath` here is listed lower-cased). Audited
    /// as its own call, so tests tell it from the full listing.
    fn global_mappings_of(
        &self,
        ctx: &CallContext,
        remote_path: &str,
    ) -> CallResult<Vec<SmbGlobalMapping>> {
        let args = json!({ "remote_path": remote_path });
        self.call(
            ctx,
            "SELECT MSFT_SmbGlobalMapping WHERE RemotePath",
            args,
            |st| {
                Ok(st
                    .mappings
                    .values()
                    .filter(|m| m.remote_path == remote_path)
                    .map(msft_mapping)
                    .collect())
            },
        )
    }

    /// `Create(RemotePath, Credential, RequirePrivacy, …)`: `RemotePath` must be a share root (87 otherwise, the
    /// "parameter is incorrect" of csi-proxy#206 for a malformed argument); `RequirePrivacy` defaults to false
    /// (`New-SmbGlobalMapping`'s default), as do the other options. A parameter the node's build lacks
    /// (`RequireIntegrity`/`UseWriteThrough` before 20348, `CompressNetworkTraffic`/`TransportType`/`BlockNTLM` before
    /// 26100: [`crate::state::BUILD_WITH_2025_OPTIONS`]) fails the call with 87 and makes nothing: what Windows
    /// answers for an in-parameter its class does not declare is **unverified** (an error of some kind is certain:
    /// the in-parameters object has no such property), so the view refuses rather than ignore it.
    fn global_mapping_create(
        &self,
        ctx: &CallContext,
        params: &SmbGlobalMappingCreate<'_>,
    ) -> CallResult<SmbOutcome<Option<SmbGlobalMapping>>> {
        const CALL: &str = "MSFT_SmbGlobalMapping.Create";
        let args = json!({
            "remote_path": params.remote_path,
            "user_name": params.user_name,
            "require_privacy": params.require_privacy,
            "persistent": params.persistent,
            "require_integrity": params.require_integrity,
            "use_write_through": params.use_write_through,
            "compress_network_traffic": params.compress_network_traffic,
            "transport_type": params.transport_type.map(|t| t.name()),
            "block_ntlm": params.block_ntlm,
        });
        self.method(ctx, CALL, args, |st| {
            let Some((root, server, share)) = root_of(params.remote_path) else {
                return failed(st, CALL, 87);
            };
            let user = params.user_name.unwrap_or("");
            let password = Secret::new(if user.is_empty() { "" } else { params.password });
            let privacy = params.require_privacy.unwrap_or(false);
            let build = st.windows_build();
            let needs_2022 =
                params.require_integrity.is_some() || params.use_write_through.is_some();
            let needs_2025 = params.compress_network_traffic.is_some()
                || params.transport_type.is_some()
                || params.block_ntlm.is_some();
            if (needs_2022 && build < BUILD_WITH_2022_OPTIONS)
                || (needs_2025 && build < BUILD_WITH_2025_OPTIONS)
            {
                return failed(st, CALL, 87);
            }
            let options = MappingOptions {
                require_integrity: params.require_integrity.unwrap_or(false),
                use_write_through: params.use_write_through.unwrap_or(false),
                compress_network_traffic: params.compress_network_traffic.unwrap_or(false),
                transport_type: params.transport_type.map_or(0, |t| t.code()),
                block_ntlm: params.block_ntlm.unwrap_or(false),
            };
            if let Err(code) = st.create_global_mapping_with(
                &root,
                &server,
                &share,
                (user, &password),
                privacy,
                options,
            ) {
                return failed(st, CALL, code);
            }
            st.sync_links()
                .map_err(|e| super::win32(CALL, "", super::storage::io_code(&e)))?;
            let created = st.mappings.get(&root).map(msft_mapping);
            Ok(MethodOutcome::new(CALL, SmbReturn::SUCCESS, None, created))
        })
    }

    /// `Remove(Force)`: the mapping goes (its links then dangle); `Force` is accepted and not modelled (open files
    /// are not tracked). A mapping that no longer exists is `WBEM_E_NOT_FOUND`.
    fn global_mapping_remove(
        &self,
        ctx: &CallContext,
        mapping: &ObjectPath,
        force: bool,
    ) -> CallResult<SmbOutcome> {
        const CALL: &str = "MSFT_SmbGlobalMapping.Remove";
        self.method(
            ctx,
            CALL,
            json!({ "mapping": mapping.as_str(), "force": force }),
            |st| {
                let root = mapping_of(mapping)
                    .ok_or_else(|| bad_path(CALL))?
                    .to_owned();
                if st.mappings.remove(&root).is_none() {
                    return Err(not_found(CALL));
                }
                st.sync_links()
                    .map_err(|e| super::win32(CALL, "", super::storage::io_code(&e)))?;
                Ok(MethodOutcome::new(CALL, SmbReturn::SUCCESS, None, ()))
            },
        )
    }
}
