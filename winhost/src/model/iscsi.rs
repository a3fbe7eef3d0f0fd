//! The iSCSI initiator classes of `ROOT\Microsoft\Windows\Storage` (Microsoft's "iSCSI Initiator WMI Classes").

use std::fmt;

use super::{ObjectPath, redacted};

/// `MSFT_iSCSITargetPortal`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftIscsiTargetPortal {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `TargetPortalAddress`: IP address or DNS name.
    pub target_portal_address: String,
    /// `TargetPortalPortNumber`.
    pub target_portal_port_number: u16,
    /// `InitiatorInstanceName`.
    pub initiator_instance_name: Option<String>,
    /// `InitiatorPortalAddress`.
    pub initiator_portal_address: Option<String>,
}

/// `MSFT_iSCSITarget`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftIscsiTarget {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `NodeAddress`: the target's IQN, in the array's spelling (IQNs compare case-insensitively, reference D9).
    pub node_address: String,
    /// `IsConnected`: a session exists (through any portal).
    pub is_connected: bool,
}

/// `MSFT_iSCSISession`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftIscsiSession {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `SessionIdentifier` (what `MSFT_iSCSITarget.Disconnect` takes).
    pub session_identifier: String,
    /// `TargetNodeAddress`.
    pub target_node_address: Option<String>,
    /// `InitiatorNodeAddress`.
    pub initiator_node_address: Option<String>,
    /// `InitiatorPortalAddress`.
    pub initiator_portal_address: Option<String>,
    /// `AuthenticationType`.
    pub authentication_type: Option<String>,
    /// `NumberOfConnections`.
    pub number_of_connections: Option<u32>,
    /// `IsConnected`.
    pub is_connected: bool,
    /// `IsPersistent`: the MSiSCSI service logs it back in at boot.
    pub is_persistent: bool,
    /// `IsDiscovered`.
    pub is_discovered: bool,
}

/// `MSFT_iSCSIConnection`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftIscsiConnection {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `ConnectionIdentifier`.
    pub connection_identifier: String,
    /// `InitiatorAddress`.
    pub initiator_address: Option<String>,
    /// `TargetAddress`.
    pub target_address: Option<String>,
    /// `TargetPortNumber`.
    pub target_port_number: Option<u16>,
}

/// `MSFT_InitiatorPort` (the local initiator: its IQN is what arrays put in their ACLs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub struct MsftInitiatorPort {
    /// `__PATH`.
    pub path: ObjectPath,
    /// `NodeAddress`: the initiator IQN.
    pub node_address: Option<String>,
    /// `InstanceName`.
    pub instance_name: Option<String>,
    /// `ConnectionType` (raw).
    pub connection_type: Option<u16>,
}

/// `AuthenticationType` of `MSFT_iSCSITarget.Connect` and `MSFT_iSCSITargetPortal.New`: the strings csi-proxy passes
/// (upper case, `pkg/server/iscsi/server.go`, reference §2.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub enum AuthenticationType {
    /// `NONE`.
    #[default]
    None,
    /// `ONEWAYCHAP`.
    OneWayChap,
    /// `MUTUALCHAP` (the initiator's node-wide secret must be set first with `SetCHAPSecret`).
    MutualChap,
}

impl AuthenticationType {
    /// The parameter text.
    pub const fn as_wmi(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::OneWayChap => "ONEWAYCHAP",
            Self::MutualChap => "MUTUALCHAP",
        }
    }
}

/// A CHAP user name and secret. `Debug` never shows the secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ChapCredentials<'a> {
    /// `ChapUsername`.
    pub username: &'a str,
    /// `ChapSecret`.
    pub secret: &'a str,
}

impl fmt::Debug for ChapCredentials<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChapCredentials")
            .field("username", &self.username)
            .field("secret", &redacted(Some(self.secret)))
            .finish()
    }
}

/// Static `MSFT_iSCSITargetPortal.New` in-parameters (only those set are passed). Discovery CHAP goes here; csi-proxy
/// cannot pass it (reference §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewTargetPortal<'a> {
    /// `TargetPortalAddress`.
    pub target_portal_address: &'a str,
    /// `TargetPortalPortNumber`.
    pub target_portal_port_number: u16,
    /// `InitiatorPortalAddress`.
    pub initiator_portal_address: Option<&'a str>,
    /// `AuthenticationType` (discovery).
    pub authentication_type: Option<AuthenticationType>,
    /// `ChapUsername` and `ChapSecret` (discovery).
    pub chap: Option<ChapCredentials<'a>>,
}

/// Static `MSFT_iSCSITarget.Connect` in-parameters (only those set are passed). csi-proxy passes `NodeAddress`, the
/// portal, `AuthenticationType`, `ChapUsername` and `ChapSecret`, never `IsPersistent` (`pkg/cim/iscsi.go:333-355`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectTarget<'a> {
    /// `NodeAddress`: the target IQN.
    pub node_address: &'a str,
    /// `TargetPortalAddress`.
    pub target_portal_address: Option<&'a str>,
    /// `TargetPortalPortNumber`.
    pub target_portal_port_number: Option<u16>,
    /// `InitiatorPortalAddress`.
    pub initiator_portal_address: Option<&'a str>,
    /// `AuthenticationType`.
    pub authentication_type: AuthenticationType,
    /// `ChapUsername` and `ChapSecret`.
    pub chap: Option<ChapCredentials<'a>>,
    /// `IsPersistent`: log back in at boot (the session must be `Unregister`ed on teardown).
    pub is_persistent: Option<bool>,
    /// `IsMultipathEnabled`.
    pub is_multipath_enabled: Option<bool>,
}

/// `MSFT_iSCSISession.Register` in-parameters (only those set are passed): make an existing session persistent, so
/// the initiator logs it back in at boot (Microsoft's *Register method of the MSFT_iSCSISession class*:
/// `IsMultipathEnabled`, `ChapUsername`, `ChapSecret`; reference §2.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegisterSession<'a> {
    /// `IsMultipathEnabled`.
    pub is_multipath_enabled: Option<bool>,
    /// `ChapUsername` and `ChapSecret`: the credentials the persistent login uses at boot.
    pub chap: Option<ChapCredentials<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_chap_secrets() {
        let chap = ChapCredentials {
            username: "chapuser",
            secret: "s3cr3t-value-1",
        };
        let connect = ConnectTarget {
            node_address: "iqn.2000-01.com.example:t1",
            target_portal_address: Some("10.0.0.1"),
            target_portal_port_number: Some(3260),
            initiator_portal_address: None,
            authentication_type: AuthenticationType::OneWayChap,
            chap: Some(chap),
            is_persistent: None,
            is_multipath_enabled: None,
        };
        let portal = NewTargetPortal {
            target_portal_address: "10.0.0.1",
            target_portal_port_number: 3260,
            initiator_portal_address: None,
            authentication_type: Some(AuthenticationType::OneWayChap),
            chap: Some(chap),
        };
        let register = RegisterSession {
            is_multipath_enabled: None,
            chap: Some(chap),
        };
        for text in [
            format!("{register:?}"),
            format!("{connect:?}"),
            format!("{portal:?}"),
            format!("{chap:#?}"),
        ] {
            assert!(!text.contains("s3cr3t-value-1"), "{text}");
            assert!(
                text.contains("chapuser") && text.contains("<redacted>"),
                "{text}"
            );
        }
        assert_eq!(AuthenticationType::MutualChap.as_wmi(), "MUTUALCHAP");
    }
}
