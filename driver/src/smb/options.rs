//! The volume context's SMB client options (`requirePrivacy`, `requireIntegrity`, `useWriteThrough`,
//! `compressNetworkTraffic`, `transportType`, `blockNTLM`: a StorageClass's parameters carry them to every volume it
//! provisions), parsed strictly, and the csiProxy mode's refusal of them. What each means, the Windows build it needs
//! and when an existing mapping is weaker than asked: [`crate::host::SmbMappingOptions`] (`host/smb_options.rs`).

use std::collections::BTreeMap;

use crate::error::Error;
use crate::host::{SmbMappingOptions, SmbOption, SmbTransport};
use crate::lifecycle::context_get;

/// The options `context` asks for (keys matched case-insensitively, as every SMB key): `true`/`false` for the
/// booleans, `tcp`/`quic` for `transportType` (either in any case). Any other value is refused with InvalidArgument
/// naming the key; an empty value counts as not given (a StorageClass template that left it blank).
pub(crate) fn parse(context: &BTreeMap<String, String>) -> Result<SmbMappingOptions, Error> {
    let boolean = |o: SmbOption| -> Result<Option<bool>, Error> {
        let Some(raw) = context_get(context, o.key())
            .map(str::trim)
            .filter(|v| !v.is_empty())
        else {
            return Ok(None);
        };
        match raw.to_ascii_lowercase().as_str() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            _ => Err(Error::InvalidArgument(format!(
                "volume_context {} is {}; rule: true or false",
                o.key(),
                crate::error::quote_short(raw)
            ))),
        }
    };
    let transport_type = match context_get(context, SmbOption::TransportType.key())
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        None => None,
        Some(raw) => Some(match raw.to_ascii_lowercase().as_str() {
            "tcp" => SmbTransport::Tcp,
            "quic" => SmbTransport::Quic,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "volume_context transportType is {}; rule: tcp or quic (quic: SMB over QUIC, Windows Server \
                     2025 nodes, hostProcess mode)",
                    crate::error::quote_short(raw)
                )));
            }
        }),
    };
    Ok(SmbMappingOptions {
        require_privacy: boolean(SmbOption::RequirePrivacy)?,
        require_integrity: boolean(SmbOption::RequireIntegrity)?,
        use_write_through: boolean(SmbOption::UseWriteThrough)?,
        compress_network_traffic: boolean(SmbOption::CompressNetworkTraffic)?,
        transport_type,
        block_ntlm: boolean(SmbOption::BlockNtlm)?,
    })
}

/// The csiProxy mode's answer to a volume with options: csi-proxy v1's `NewSmbGlobalMappingRequest` carries only
/// `remote_path`, `local_path`, `username` and `password` (`kubernetes-csi/csi-proxy@v1.3.0
/// client/api/smb/v1/api.proto`), and `RequirePrivacy` is csi-proxy's own `-require-privacy` flag (v1.2.0 on; v1.1.x
/// always true), which this driver cannot see — so even `requirePrivacy: "true"` cannot be promised there. Refused
/// before any record or host call, naming `mode: hostProcess`.
pub(super) fn refuse_on_csi_proxy(vol: &super::SmbVolume) -> Result<(), Error> {
    host_process_refusal(&vol.source.to_string(), &vol.options)
}

/// [`refuse_on_csi_proxy`]'s answer for `options` of the share `source` (`check-node` records it on csiProxy mode).
pub(crate) fn host_process_refusal(source: &str, options: &SmbMappingOptions) -> Result<(), Error> {
    let asked: Vec<&str> = options.asked().iter().map(|o| o.key()).collect();
    if asked.is_empty() {
        return Ok(());
    }
    Err(Error::FailedPrecondition(format!(
        "{} asks for SMB client options ({}), which need the chart's mode: hostProcess (--host-backend native): \
         csi-proxy's NewSmbGlobalMapping request cannot carry them, and whether its mappings require encryption is \
         csi-proxy's own -require-privacy flag (default true), which this driver can neither see nor change. Remove \
         the keys from the StorageClass to take csi-proxy's setting, or run the driver in mode: hostProcess",
        source,
        asked.join(", ")
    )))
}

/// The answer to `authentication: machine` where the driver does not make the mapping itself as SYSTEM (csiProxy
/// mode; `stage.rs` `machine_account_here`), also recorded by `check-node`.
pub(crate) fn machine_account_refusal(source: &str) -> Error {
    Error::FailedPrecondition(format!(
        "{source} asks for authentication: machine (the node's computer account), which needs the chart's mode: \
         hostProcess (--host-backend native): csi-proxy v1.1.x and v1.2.x always send a credential, and from \
         v1.3.0 on a mapping without one takes the identity of whatever account csi-proxy runs as, which this \
         driver can neither see nor check"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_option_parses_in_any_case() {
        let o = parse(&ctx(&[
            ("requirePrivacy", "False"),
            ("RequireIntegrity", "true"),
            ("usewritethrough", "TRUE"),
            ("compressNetworkTraffic", "true"),
            ("transportType", "QUIC"),
            ("blockNTLM", "true"),
        ]))
        .unwrap();
        assert_eq!(
            o,
            SmbMappingOptions {
                require_privacy: Some(false),
                require_integrity: Some(true),
                use_write_through: Some(true),
                compress_network_traffic: Some(true),
                transport_type: Some(SmbTransport::Quic),
                block_ntlm: Some(true),
            }
        );
        assert!(
            parse(&ctx(&[("source", r"\\s\x"), ("requirePrivacy", " ")]))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            parse(&ctx(&[("transportType", "tcp")]))
                .unwrap()
                .transport_type,
            Some(SmbTransport::Tcp)
        );
    }

    #[test]
    fn an_unknown_value_is_refused_naming_the_key() {
        for (key, value) in [
            ("requirePrivacy", "yes"),
            ("requireIntegrity", "1"),
            ("useWriteThrough", "on"),
            ("compressNetworkTraffic", "maybe"),
            ("blockNTLM", "enabled"),
            ("transportType", "rdma"),
        ] {
            let e = parse(&ctx(&[(key, value)])).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains(key)),
                "{key}: {e:?}"
            );
        }
    }
}
