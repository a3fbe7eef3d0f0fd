use crate::proto::filesystem_v1::{self as pb, filesystem_client::FilesystemClient as Raw};
use crate::{ApiGroup, Error, ProxyClient};

/// The filesystem v1 API (`\\.\pipe\csi-proxy-filesystem-v1`).
///
/// Paths are Windows host paths with a drive letter (`c:\var\lib\kubelet\...`). csi-proxy
/// rejects paths that are not under its kubelet path or working dirs (except for
/// [`FilesystemClient::is_symlink`]).
#[derive(Debug, Clone)]
pub struct FilesystemClient {
    client: ProxyClient,
}

impl FilesystemClient {
    pub(crate) fn new(client: ProxyClient) -> Self {
        FilesystemClient { client }
    }

    /// `PathExists`: whether the path exists (true for a dangling link).
    pub async fn path_exists(&self, path: &str) -> Result<bool, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Filesystem,
                "PathExists",
                pb::PathExistsRequest {
                    path: path.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).path_exists(req).await },
            )
            .await?;
        Ok(response.exists)
    }

    /// `Mkdir`: creates the directory and its parents; succeeds if it exists.
    pub async fn mkdir(&self, path: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Filesystem,
                "Mkdir",
                pb::MkdirRequest {
                    path: path.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).mkdir(req).await },
            )
            .await?;
        Ok(())
    }

    /// `Rmdir`: removes an empty directory or a link; with `force`, removes recursively and
    /// succeeds if the path is missing. On a link or mount point it removes the link only.
    pub async fn rmdir(&self, path: &str, force: bool) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Filesystem,
                "Rmdir",
                pb::RmdirRequest {
                    path: path.to_owned(),
                    force,
                },
                |ch, req| async move { Raw::new(ch).rmdir(req).await },
            )
            .await?;
        Ok(())
    }

    /// `CreateSymlink`: creates a link **named `target`** pointing to `source`. Fails if `target`
    /// exists.
    pub async fn create_symlink(&self, source: &str, target: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::Filesystem,
                "CreateSymlink",
                pb::CreateSymlinkRequest {
                    source_path: source.to_owned(),
                    target_path: target.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).create_symlink(req).await },
            )
            .await?;
        Ok(())
    }

    /// `IsSymlink`: whether the path is a link (or mounted folder) whose target exists. Fails if
    /// the path does not exist.
    pub async fn is_symlink(&self, path: &str) -> Result<bool, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::Filesystem,
                "IsSymlink",
                pb::IsSymlinkRequest {
                    path: path.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).is_symlink(req).await },
            )
            .await?;
        Ok(response.is_symlink)
    }
}
