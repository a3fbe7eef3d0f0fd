//! The Kubernetes side of inline ephemeral volumes: [`KubeSecrets`] reads the Secret an inline volume names
//! (`secretName`, in the pod's namespace) from the Kubernetes API, as the lifecycle's
//! [`SecretSource`]. The publish flow itself is [`crate::lifecycle::inline`].

use crate::error::Error;
use crate::lifecycle::{SecretSource, Secrets};

/// Reads Secrets from the Kubernetes API (`GET /api/v1/namespaces/<ns>/secrets/<name>`). The client is built on
/// first use, so a driver without any Kubernetes config still starts and serves every other volume; only an inline
/// volume that names a `secretName` then fails, with `FAILED_PRECONDITION`.
pub struct KubeSecrets {
    config: ConfigSource,
    client: tokio::sync::OnceCell<kube::Client>,
}

/// Where the API client's config comes from.
enum ConfigSource {
    /// In-cluster first, then `KUBECONFIG` (see [`KubeSecrets::in_cluster`]).
    Environment,
    /// A fixed config (tests).
    Fixed(Box<kube::Config>),
}

impl std::fmt::Debug for KubeSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSecrets").finish_non_exhaustive()
    }
}

impl KubeSecrets {
    /// The config a DaemonSet pod expects, resolved on first use:
    ///
    /// 1. **in-cluster**: the pod's service account token and `KUBERNETES_SERVICE_HOST`/`_PORT`;
    /// 2. otherwise **`KUBECONFIG`**, when that variable is set (its current context; outside a cluster, e.g. a
    ///    driver run by hand or in tests against a fake API server; `http://` servers are accepted).
    ///
    /// This is deliberately *not* `kube::Config::infer()`: that tries a kubeconfig first, including the default
    /// `~/.kube/config`, and a HostProcess container sees the node's filesystem, so an administrator's kubeconfig
    /// on the node could silently replace the pod's own service account (and its RBAC). The home-directory
    /// kubeconfig is never read. With neither source, reading a Secret fails with `FAILED_PRECONDITION` naming both.
    pub fn in_cluster() -> Self {
        Self {
            config: ConfigSource::Environment,
            client: tokio::sync::OnceCell::new(),
        }
    }

    /// A given config (tests point it at a fake API server).
    pub fn from_config(config: kube::Config) -> Self {
        Self {
            config: ConfigSource::Fixed(Box::new(config)),
            client: tokio::sync::OnceCell::new(),
        }
    }

    async fn load_config(&self) -> Result<kube::Config, String> {
        match &self.config {
            ConfigSource::Fixed(c) => Ok((**c).clone()),
            ConfigSource::Environment => {
                let in_cluster = match kube::Config::incluster() {
                    Ok(c) => return Ok(c),
                    Err(e) => e,
                };
                match kube::config::Kubeconfig::from_env() {
                    Ok(Some(kubeconfig)) => kube::Config::from_custom_kubeconfig(
                        kubeconfig,
                        &kube::config::KubeConfigOptions::default(),
                    )
                    .await
                    .map_err(|e| {
                        format!(
                            "no in-cluster config ({in_cluster}) and KUBECONFIG is unusable: {}",
                            kubeconfig_error_text(&e)
                        )
                    }),
                    Ok(None) => Err(format!(
                        "no in-cluster config ({in_cluster}) and KUBECONFIG is not set"
                    )),
                    Err(e) => Err(format!(
                        "no in-cluster config ({in_cluster}) and KUBECONFIG cannot be read: {}",
                        kubeconfig_error_text(&e)
                    )),
                }
            }
        }
    }

    async fn client(&self) -> Result<&kube::Client, Error> {
        self.client
            .get_or_try_init(|| async {
                let config = self.load_config().await.map_err(|e| {
                    Error::FailedPrecondition(format!(
                        "inline ephemeral volumes need Kubernetes API access to read their Secret: {e}"
                    ))
                })?;
                kube::Client::try_from(config)
                    .map_err(|e| Error::Internal(format!("cannot build the Kubernetes API client: {e}")))
            })
            .await
    }

    async fn read(&self, namespace: &str, name: &str) -> Result<Secrets, Error> {
        use k8s_openapi::api::core::v1::Secret;
        let api: kube::Api<Secret> = kube::Api::namespaced(self.client().await?.clone(), namespace);
        let secret = match api.get(name).await {
            Ok(s) => s,
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                return Err(Error::FailedPrecondition(format!(
                    "Secret {namespace}/{name} named by the inline volume does not exist"
                )));
            }
            Err(kube::Error::Api(status)) => {
                // The API's status message never carries the Secret's data.
                return Err(Error::FailedPrecondition(format!(
                    "cannot read Secret {namespace}/{name}: {} {} (check the driver's RBAC: get secrets)",
                    status.code, status.reason
                )));
            }
            Err(_) => {
                // Other errors (transport, decoding) are not echoed: a decoding error could quote Secret data.
                return Err(Error::Unavailable(format!(
                    "cannot read Secret {namespace}/{name} from the Kubernetes API (transport or decoding failure)"
                )));
            }
        };
        let mut entries = Vec::new();
        for (key, value) in secret.data.unwrap_or_default() {
            let text = String::from_utf8(value.0).map_err(|_| {
                Error::InvalidArgument(format!(
                    "Secret {namespace}/{name} key {key:?} is not UTF-8 text"
                ))
            })?;
            entries.push((key, text));
        }
        Ok(Secrets::new(entries))
    }
}

/// A kubeconfig error for logs and gRPC status text. A YAML parse error may quote the offending value, which can be a
/// token or key, so its details are withheld.
fn kubeconfig_error_text(e: &kube::config::KubeconfigError) -> String {
    match e {
        kube::config::KubeconfigError::Parse(_) => {
            "failed to parse kubeconfig YAML (details withheld: they could quote credentials)"
                .to_owned()
        }
        other => other.to_string(),
    }
}

impl SecretSource for KubeSecrets {
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Secrets, Error>> + Send + '_>>
    {
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        Box::pin(async move { self.read(&namespace, &name).await })
    }
}

/// A tiny fake Kubernetes API server on loopback for tests: serves `GET /api/v1/namespaces/<ns>/secrets/<name>` from
/// a fixed map of `(namespace, name) → JSON body`, 404 otherwise. Bound before it is returned; never sleeps.
#[cfg(any(test, feature = "test-util"))]
pub mod fake_api {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A running fake API server.
    #[derive(Debug)]
    pub struct FakeApiServer {
        /// `http://127.0.0.1:<port>`.
        pub url: String,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for FakeApiServer {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    /// The JSON of a Secret with string `data` (base64-encoded here).
    pub fn secret_json(namespace: &str, name: &str, data: &[(&str, &str)]) -> String {
        let data: BTreeMap<&str, String> = data
            .iter()
            .map(|(k, v)| (*k, base64(v.as_bytes())))
            .collect();
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        })
        .to_string()
    }

    fn base64(bytes: &[u8]) -> String {
        const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Start serving `secrets` (`(namespace, name) → Secret JSON`).
    pub async fn serve(
        secrets: BTreeMap<(String, String), String>,
    ) -> std::io::Result<FakeApiServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let secrets = Arc::new(secrets);
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let secrets = Arc::clone(&secrets);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf);
                    let path = head
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or("")
                        .split('?')
                        .next()
                        .unwrap_or("");
                    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
                    let found = match parts.as_slice() {
                        ["api", "v1", "namespaces", ns, "secrets", name] => secrets
                            .get(&((*ns).to_owned(), (*name).to_owned()))
                            .cloned(),
                        _ => None,
                    };
                    let (status, body) = match found {
                        Some(body) => ("200 OK", body),
                        None => (
                            "404 Not Found",
                            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "message": "not found", "reason": "NotFound", "code": 404})
                            .to_string(),
                        ),
                    };
                    let response = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: \
                         close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Ok(FakeApiServer { url, task })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::fake_api;
    use super::*;
    use crate::host::HostOp::*;
    use crate::lifecycle::inline::staging_path;
    use crate::lifecycle::{
        AccessType, Capability, EPHEMERAL_KEY, PublishRequest, UnpublishRequest,
    };
    use crate::testing::{Env, d};

    const PASSWORD: &str = "Eph-S3cret!";

    /// Share `\\srv\share` (with `apps`) that only `CORP\bob` with [`PASSWORD`] may map, and the Kubernetes API
    /// serving that credential as Secret `team/smb-creds`.
    async fn setup() -> (Env, fake_api::FakeApiServer) {
        let mut env = Env::new(&serde_json::json!({"smb": {"servers": [{"name": "srv",
            "accounts": [{"user": "bob", "password": PASSWORD, "domain": "CORP"}],
            "shares": [{"name": "share", "files": {"apps/readme.txt": "hello"}}]}]}}));
        let secrets: BTreeMap<_, _> = [(
            ("team".to_owned(), "smb-creds".to_owned()),
            fake_api::secret_json(
                "team",
                "smb-creds",
                &[
                    ("username", "bob"),
                    ("password", PASSWORD),
                    ("domain", "CORP"),
                ],
            ),
        )]
        .into();
        let api = fake_api::serve(secrets).await.expect("fake api");
        let config = kube::Config::new(api.url.parse().expect("url"));
        env.set_secret_source(Arc::new(KubeSecrets::from_config(config)));
        (env, api)
    }

    fn req(secret_name: &str) -> PublishRequest {
        let ctx: BTreeMap<String, String> = [
            (EPHEMERAL_KEY, "true"),
            ("source", r"\\srv\share\apps"),
            ("secretName", secret_name),
            ("csi.storage.k8s.io/pod.namespace", "team"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        PublishRequest {
            volume_id: "csi-eph-1".into(),
            target_path: r"c:\var\lib\kubelet\pods\u1\volumes\kubernetes.io~csi\data\mount".into(),
            capability: Some(Capability {
                access_type: AccessType::Mount {
                    fs_type: String::new(),
                    mount_flags: vec![],
                },
                access_mode: 1,
            }),
            volume_context: ctx,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn ephemeral_publish_stages_privately_and_unpublish_cleans_up() {
        let (env, _api) = setup().await;
        let mgr = &env.mgr;
        env.publish(&req("smb-creds"), d()).await.expect("publish");
        assert_eq!(
            env.ops(),
            vec![Mkdir, Rmdir, NewSmbGlobalMapping, IsSymlink, CreateSymlink]
        );
        let private = staging_path(mgr, "csi-eph-1").expect("path");
        assert!(
            private
                .as_str()
                .starts_with(r"C:\var\lib\kubelet\plugins\wincsi.csi.io\ephemeral\")
        );
        assert!(env.resolves(r"c:\var\lib\kubelet\pods\u1\volumes\kubernetes.io~csi\data\mount"));
        let rec = mgr
            .store()
            .volume("csi-eph-1")
            .expect("read")
            .expect("record");
        assert!(rec.ephemeral);
        env.clear_calls();
        env.publish(&req("smb-creds"), d()).await.expect("repeat");
        // The private stage's `IsSymlink` (healthy), then the target's `PathExists` + `IsSymlink` (published).
        assert_eq!(env.ops(), vec![IsSymlink, PathExists, IsSymlink]);
        env.clear_calls();
        let un = UnpublishRequest {
            volume_id: "csi-eph-1".into(),
            target_path: req("x").target_path,
        };
        mgr.unpublish(&un, d()).await.expect("unpublish");
        assert_eq!(env.ops(), vec![Rmdir, Rmdir, RemoveSmbGlobalMapping]);
        env.assert_clean();
    }

    #[tokio::test]
    async fn missing_secret_and_namespace() {
        let (env, _api) = setup().await;
        let mgr = &env.mgr;
        let err = mgr.publish(&req("nope"), d()).await.expect_err("missing");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("team/nope")),
            "{err:?}"
        );
        let mut r = req("smb-creds");
        r.volume_context.remove("csi.storage.k8s.io/pod.namespace");
        assert!(matches!(
            mgr.publish(&r, d()).await,
            Err(Error::InvalidArgument(_))
        ));
        let mut r = req("smb-creds");
        r.volume_context
            .insert("secretNamespace".into(), "other".into());
        assert!(matches!(
            mgr.publish(&r, d()).await,
            Err(Error::FailedPrecondition(_))
        ));
        assert!(env.calls().is_empty());
    }

    #[test]
    fn kubeconfig_parse_errors_never_quote_the_file() {
        let token = "kubeconfig-t0ken-value";
        let e = kube::config::Kubeconfig::from_yaml(&format!("users: {token}\n"))
            .expect_err("a string where a list belongs");
        assert!(matches!(e, kube::config::KubeconfigError::Parse(_)), "{e}");
        let text = kubeconfig_error_text(&e);
        assert!(!text.contains(token), "{text}");
        assert!(text.contains("kubeconfig"), "{text}");
    }
}
