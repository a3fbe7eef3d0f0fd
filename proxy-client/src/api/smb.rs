use crate::proto::smb_v1::{self as pb, smb_client::SmbClient as Raw};
use crate::{ApiGroup, Error, ProxyClient, Secret};

/// Credentials for an SMB global mapping. `Debug` redacts the password.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmbCredentials {
    /// User name, usually `DOMAIN\user`. Empty = map without credentials.
    pub username: String,
    /// The password.
    pub password: Secret,
}

impl SmbCredentials {
    /// Credentials from a user name and password.
    pub fn new(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        SmbCredentials {
            username: username.into(),
            password: password.into(),
        }
    }
}

/// The SMB v1 API (`\\.\pipe\csi-proxy-smb-v1`).
#[derive(Debug, Clone)]
pub struct SmbClient {
    client: ProxyClient,
}

impl SmbClient {
    pub(crate) fn new(client: ProxyClient) -> Self {
        SmbClient { client }
    }

    /// `NewSmbGlobalMapping`: maps the share root of `remote_path` (`\\server\share[\dir]`)
    /// node-wide with `credentials`, keeping an existing healthy mapping. With `local_path`, also
    /// creates a directory link `local_path` → `remote_path` (fails if `local_path` exists; it
    /// must be under the kubelet directory).
    ///
    /// Typical failures: [`crate::ErrorKind::SmbMultipleConnections`],
    /// [`crate::ErrorKind::NetworkPathNotFound`], [`crate::ErrorKind::LogonFailure`],
    /// [`crate::ErrorKind::NetworkNameNotFound`].
    pub async fn new_global_mapping(
        &self,
        remote_path: &str,
        local_path: Option<&str>,
        credentials: &SmbCredentials,
    ) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Smb,
                "NewSmbGlobalMapping",
                pb::NewSmbGlobalMappingRequest {
                    remote_path: remote_path.to_owned(),
                    local_path: local_path.unwrap_or_default().to_owned(),
                    username: credentials.username.clone(),
                    password: credentials.password.expose().to_owned(),
                },
                |ch, req| async move { Raw::new(ch).new_smb_global_mapping(req).await },
            )
            .await?;
        Ok(())
    }

    /// `RemoveSmbGlobalMapping`: removes the mapping of `remote_path`'s share root. Fails if there
    /// is none; does not remove a local link.
    pub async fn remove_global_mapping(&self, remote_path: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Smb,
                "RemoveSmbGlobalMapping",
                pb::RemoveSmbGlobalMappingRequest {
                    remote_path: remote_path.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).remove_smb_global_mapping(req).await },
            )
            .await?;
        Ok(())
    }
}
