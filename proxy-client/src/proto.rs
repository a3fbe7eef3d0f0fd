//! Generated protobuf messages and gRPC stubs for the csi-proxy API groups wincsi uses.
//!
//! The `.proto` files under `proxy-client/proto/` were written from the csi-proxy wire contract
//! and match csi-proxy releases **v1.1.3 to v1.3.0** (the v1 / v1alpha2 / v1alpha1 APIs used here
//! have not changed since v1.1.0). Each group is generated into its own module because disk,
//! volume, filesystem and smb v1 all share protobuf `package v1`.
//!
//! Every module holds the prost messages plus a `<group>_client` module; with the cargo feature
//! `server` also a `<group>_server` module. Messages that carry secrets
//! ([`smb_v1::NewSmbGlobalMappingRequest`], [`iscsi_v1alpha2::ConnectTargetRequest`],
//! [`iscsi_v1alpha2::SetMutualChapSecretRequest`]) have a hand-written `Debug` that redacts them.

use std::fmt;

/// Placeholder printed instead of a secret.
pub(crate) const REDACTED: &str = "<redacted>";

fn redact(secret: &str) -> &'static str {
    if secret.is_empty() { "\"\"" } else { REDACTED }
}

macro_rules! generated {
    ($(#[$doc:meta])* $module:ident, $file:literal) => {
        $(#[$doc])*
        #[allow(
            missing_docs,
            unreachable_pub,
            clippy::all,
            clippy::pedantic,
            rustdoc::broken_intra_doc_links,
            rustdoc::invalid_html_tags,
            rustdoc::bare_urls
        )]
        pub mod $module {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($module), "/", $file));
        }
    };
}

generated!(
    /// Disk v1 (`package v1; service Disk`), pipe `csi-proxy-disk-v1`.
    disk_v1,
    "v1.rs"
);
generated!(
    /// Volume v1 (`package v1; service Volume`), pipe `csi-proxy-volume-v1`.
    volume_v1,
    "v1.rs"
);
generated!(
    /// Filesystem v1 (`package v1; service Filesystem`), pipe `csi-proxy-filesystem-v1`.
    filesystem_v1,
    "v1.rs"
);
generated!(
    /// SMB v1 (`package v1; service Smb`), pipe `csi-proxy-smb-v1`.
    smb_v1,
    "v1.rs"
);
generated!(
    /// iSCSI v1alpha2 (`package v1alpha2; service Iscsi`), pipe `csi-proxy-iscsi-v1alpha2`.
    iscsi_v1alpha2,
    "v1alpha2.rs"
);
generated!(
    /// System v1alpha1 (`package v1alpha1; service System`), pipe `csi-proxy-system-v1alpha1`.
    system_v1alpha1,
    "v1alpha1.rs"
);

impl fmt::Debug for smb_v1::NewSmbGlobalMappingRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewSmbGlobalMappingRequest")
            .field("remote_path", &self.remote_path)
            .field("local_path", &self.local_path)
            .field("username", &self.username)
            .field("password", &format_args!("{}", redact(&self.password)))
            .finish()
    }
}

impl fmt::Debug for iscsi_v1alpha2::ConnectTargetRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectTargetRequest")
            .field("target_portal", &self.target_portal)
            .field("iqn", &self.iqn)
            .field("auth_type", &self.auth_type)
            .field("chap_username", &self.chap_username)
            .field(
                "chap_secret",
                &format_args!("{}", redact(&self.chap_secret)),
            )
            .finish()
    }
}

impl fmt::Debug for iscsi_v1alpha2::SetMutualChapSecretRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetMutualChapSecretRequest")
            .field(
                "mutual_chap_secret",
                &format_args!("{}", redact(&self.mutual_chap_secret)),
            )
            .finish()
    }
}
