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
        };
        let text = format!("{create:?} {create:#?}");
        assert!(!text.contains("pa:ss-w0rd!"), "{text}");
        assert!(
            text.contains("<redacted>") && text.contains(r"DOM\\user"),
            "{text}"
        );
    }
}
