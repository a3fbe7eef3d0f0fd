use crate::proto::iscsi_v1alpha2::{self as pb, iscsi_client::IscsiClient as Raw};
use crate::{ApiGroup, Error, ProxyClient, Secret};

/// An iSCSI target portal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Portal {
    /// Host name or IP address.
    pub address: String,
    /// TCP port; 0 means the iSCSI default 3260.
    pub port: u16,
}

impl Portal {
    /// A portal at `address:port` (port 0 = 3260).
    pub fn new(address: impl Into<String>, port: u16) -> Self {
        Portal {
            address: address.into(),
            port,
        }
    }

    fn to_wire(&self) -> Option<pb::TargetPortal> {
        // Always set: csi-proxy dereferences target_portal without a nil check.
        Some(pb::TargetPortal {
            target_address: self.address.clone(),
            target_port: u32::from(self.port),
        })
    }
}

/// How to authenticate to an iSCSI target. `Debug` redacts the secrets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ChapAuth {
    /// No authentication.
    #[default]
    None,
    /// One-way CHAP: the initiator authenticates to the target.
    OneWay {
        /// CHAP user name.
        username: String,
        /// CHAP secret.
        secret: Secret,
    },
    /// Mutual CHAP: as one-way, and the target authenticates back with the secret set by
    /// [`IscsiClient::set_mutual_chap_secret`].
    Mutual {
        /// CHAP user name.
        username: String,
        /// CHAP secret.
        secret: Secret,
    },
}

/// The iSCSI v1alpha2 API (`\\.\pipe\csi-proxy-iscsi-v1alpha2`).
#[derive(Debug, Clone)]
pub struct IscsiClient {
    client: ProxyClient,
}

impl IscsiClient {
    pub(crate) fn new(client: ProxyClient) -> Self {
        IscsiClient { client }
    }

    /// `AddTargetPortal`: registers the portal (no-op if present).
    pub async fn add_target_portal(&self, portal: &Portal) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Iscsi,
                "AddTargetPortal",
                pb::AddTargetPortalRequest {
                    target_portal: portal.to_wire(),
                },
                |ch, req| async move { Raw::new(ch).add_target_portal(req).await },
            )
            .await?;
        Ok(())
    }

    /// `DiscoverTargetPortal`: the IQNs of the targets behind the portal.
    pub async fn discover_target_portal(&self, portal: &Portal) -> Result<Vec<String>, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Iscsi,
                "DiscoverTargetPortal",
                pb::DiscoverTargetPortalRequest {
                    target_portal: portal.to_wire(),
                },
                |ch, req| async move { Raw::new(ch).discover_target_portal(req).await },
            )
            .await?;
        Ok(response.iqns)
    }

    /// `RemoveTargetPortal`: removes the portal; fails if it does not exist.
    pub async fn remove_target_portal(&self, portal: &Portal) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Iscsi,
                "RemoveTargetPortal",
                pb::RemoveTargetPortalRequest {
                    target_portal: portal.to_wire(),
                },
                |ch, req| async move { Raw::new(ch).remove_target_portal(req).await },
            )
            .await?;
        Ok(())
    }

    /// `ListTargetPortals`: all registered portals.
    pub async fn list_target_portals(&self) -> Result<Vec<Portal>, Error> {
        const METHOD: &str = "ListTargetPortals";
        let response = self
            .client
            .unary(
                ApiGroup::Iscsi,
                METHOD,
                pb::ListTargetPortalsRequest {},
                |ch, req| async move { Raw::new(ch).list_target_portals(req).await },
            )
            .await?;
        response
            .target_portals
            .into_iter()
            .map(|p| {
                let port = u16::try_from(p.target_port).map_err(|_| Error::InvalidResponse {
                    method: METHOD,
                    message: format!("target_port {} is not a TCP port", p.target_port),
                })?;
                Ok(Portal {
                    address: p.target_address,
                    port,
                })
            })
            .collect()
    }

    /// `ConnectTarget`: logs in to a discovered target (no-op if connected; not persistent
    /// across reboots).
    pub async fn connect_target(
        &self,
        portal: &Portal,
        iqn: &str,
        auth: &ChapAuth,
    ) -> Result<(), Error> {
        let (auth_type, chap_username, chap_secret) = match auth {
            ChapAuth::None => (pb::AuthenticationType::None, "", ""),
            ChapAuth::OneWay { username, secret } => (
                pb::AuthenticationType::OneWayChap,
                username.as_str(),
                secret.expose(),
            ),
            ChapAuth::Mutual { username, secret } => (
                pb::AuthenticationType::MutualChap,
                username.as_str(),
                secret.expose(),
            ),
        };
        self.client
            .unary(
                ApiGroup::Iscsi,
                "ConnectTarget",
                pb::ConnectTargetRequest {
                    target_portal: portal.to_wire(),
                    iqn: iqn.to_owned(),
                    auth_type: auth_type as i32,
                    chap_username: chap_username.to_owned(),
                    chap_secret: chap_secret.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).connect_target(req).await },
            )
            .await?;
        Ok(())
    }

    /// `DisconnectTarget`: logs out of the target (no-op if not connected).
    pub async fn disconnect_target(&self, portal: &Portal, iqn: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Iscsi,
                "DisconnectTarget",
                pb::DisconnectTargetRequest {
                    target_portal: portal.to_wire(),
                    iqn: iqn.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).disconnect_target(req).await },
            )
            .await?;
        Ok(())
    }

    /// `GetTargetDisks`: the disk numbers of a connected target (empty if not connected).
    pub async fn get_target_disks(&self, portal: &Portal, iqn: &str) -> Result<Vec<u32>, Error> {
        const METHOD: &str = "GetTargetDisks";
        let response = self
            .client
            .unary(
                ApiGroup::Iscsi,
                METHOD,
                pb::GetTargetDisksRequest {
                    target_portal: portal.to_wire(),
                    iqn: iqn.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).get_target_disks(req).await },
            )
            .await?;
        response
            .disk_i_ds
            .iter()
            .map(|id| {
                id.trim()
                    .parse::<u32>()
                    .map_err(|_| Error::InvalidResponse {
                        method: METHOD,
                        message: format!("disk ID {id:?} is not a disk number"),
                    })
            })
            .collect()
    }

    /// `SetMutualChapSecret`: sets the initiator's node-global mutual CHAP secret (12–16 bytes
    /// outside IPsec).
    pub async fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Iscsi,
                "SetMutualChapSecret",
                pb::SetMutualChapSecretRequest {
                    mutual_chap_secret: secret.expose().to_owned(),
                },
                |ch, req| async move { Raw::new(ch).set_mutual_chap_secret(req).await },
            )
            .await?;
        Ok(())
    }
}
