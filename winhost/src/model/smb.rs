//! `ROOT\Microsoft\Windows\SMB`: global mappings.

use std::fmt;

use crate::codes::SmbMappingStatus;

use super::{ObjectPath, redacted};

/// `MSFT_SmbGlobalMapping` (reference §2.2). It has no user-name property.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct SmbGlobalMapping {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `LocalPath` (a drive letter, or empty).
    pub local_path: Option<String>,
    /// `RemotePath`: `\\server\share`, as created (compare ignoring case: reference §2.2).
    pub remote_path: String,
    /// `Status`.
    pub status: SmbMappingStatus,
    /// `RequirePrivacy`.
    pub require_privacy: Option<bool>,
    /// `RequireIntegrity`.
    pub require_integrity: Option<bool>,
    /// `UseWriteThrough`.
    pub use_write_through: Option<bool>,
    /// `CompressNetworkTraffic` (a property of the Windows Server 2025 class: absent, `None`, on older builds).
    pub compress_network_traffic: Option<bool>,
    /// `TransportType` (Windows Server 2025; see [`SmbTransport`]).
    pub transport_type: Option<SmbTransport>,
    /// `BlockNTLM` (Windows Server 2025).
    pub block_ntlm: Option<bool>,
}

/// `TransportType` of `New-SmbGlobalMapping` (Microsoft, *New-SmbGlobalMapping*, Windows Server 2025 docset:
/// "Accepted values: None, TCP, QUIC"). It travels as a `uint32` whose values are taken to follow the documented
/// order (None 0, TCP 1, QUIC 2): **unverified** (`docs/real-node-checks.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub enum SmbTransport {
    /// `None`: the SMB client chooses (TCP, or QUIC where the client is configured for it).
    Default,
    /// `TCP`.
    Tcp,
    /// `QUIC` (SMB over QUIC: TLS 1.3 on UDP 443).
    Quic,
}

impl SmbTransport {
    /// The `uint32` value WMI carries (unverified order, see the type's docs).
    pub const fn code(self) -> u32 {
        match self {
            Self::Default => 0,
            Self::Tcp => 1,
            Self::Quic => 2,
        }
    }

    /// The transport of a `uint32` value; `None` for a value outside the documented three.
    pub const fn from_code(code: u32) -> Option<Self> {
        match code {
            0 => Some(Self::Default),
            1 => Some(Self::Tcp),
            2 => Some(Self::Quic),
            _ => None,
        }
    }

    /// The name `New-SmbGlobalMapping` uses (`None`, `TCP`, `QUIC`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Default => "None",
            Self::Tcp => "TCP",
            Self::Quic => "QUIC",
        }
    }
}

/// Static `MSFT_SmbGlobalMapping.Create` in-parameters (only those set are passed). `Debug` never shows the
/// password.
///
/// With `user_name`, the implementation passes `Credential` as [`crate::smb::credential_string`] builds it (the
/// PowerShell cmdletization form csi-proxy copies); without it, no `Credential` (the mapping authenticates as the
/// machine, reference D8).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SmbGlobalMappingCreate<'a> {
    /// `RemotePath`: the share root `\\server\share`.
    pub remote_path: &'a str,
    /// `LocalPath`.
    pub local_path: Option<&'a str>,
    /// The user name of `Credential` (`DOMAIN\user` or `user`).
    pub user_name: Option<&'a str>,
    /// The password of `Credential`.
    pub password: &'a str,
    /// `Persistent`.
    pub persistent: Option<bool>,
    /// `RequirePrivacy`.
    pub require_privacy: Option<bool>,
    /// `RequireIntegrity`.
    pub require_integrity: Option<bool>,
    /// `UseWriteThrough`.
    pub use_write_through: Option<bool>,
    /// `CompressNetworkTraffic` (Windows Server 2025's `New-SmbGlobalMapping`).
    pub compress_network_traffic: Option<bool>,
    /// `TransportType` (Windows Server 2025's `New-SmbGlobalMapping`).
    pub transport_type: Option<SmbTransport>,
    /// `BlockNTLM` (Windows Server 2025's `New-SmbGlobalMapping`).
    pub block_ntlm: Option<bool>,
}

impl fmt::Debug for SmbGlobalMappingCreate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmbGlobalMappingCreate")
            .field("remote_path", &self.remote_path)
            .field("local_path", &self.local_path)
            .field("user_name", &self.user_name)
            .field("password", &redacted(Some(self.password)))
            .field("persistent", &self.persistent)
            .field("require_privacy", &self.require_privacy)
            .field("require_integrity", &self.require_integrity)
            .field("use_write_through", &self.use_write_through)
            .field("compress_network_traffic", &self.compress_network_traffic)
            .field("transport_type", &self.transport_type)
            .field("block_ntlm", &self.block_ntlm)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let create = SmbGlobalMappingCreate {
            remote_path: r"\\srv\share",
            local_path: None,
            user_name: Some(r"DOM\user"),
            password: "pa:ss-w0rd!",
            persistent: None,
            require_privacy: Some(true),
            require_integrity: None,
            use_write_through: None,
            compress_network_traffic: None,
            transport_type: None,
            block_ntlm: None,
        };
        let text = format!("{create:?} {create:#?}");
        assert!(!text.contains("pa:ss-w0rd!"), "{text}");
        assert!(
            text.contains("<redacted>") && text.contains(r"DOM\\user"),
            "{text}"
        );
    }
}
