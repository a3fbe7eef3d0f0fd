//! The Kubernetes side of inline ephemeral volumes: [`KubeSecrets`] reads the Secret an inline volume names
//! (`secretName`, in the pod's namespace) from the Kubernetes API, as the lifecycle's
//! [`SecretSource`]. The publish flow itself is [`crate::lifecycle::inline`].
//!
//! The read is one `GET /api/v1/namespaces/<ns>/secrets/<name>` over HTTPS, made here on hyper's HTTP/1 client and
//! rustls rather than through the `kube` crate: the driver needs nothing else of the API, and `kube`'s client,
//! kubeconfig (YAML) and auth-plugin stack cost the Windows executable about 3.4 MB (`BENCHMARKS.md`, Windows
//! release binary). What it keeps of a Kubernetes client's in-cluster behaviour:
//!
//! - the API server is `KUBERNETES_SERVICE_HOST`:`KUBERNETES_SERVICE_PORT` (both required, as client-go's
//!   `rest.InClusterConfig`); its certificate is verified against the service account's `ca.crt` only (no system
//!   roots, no skipping);
//! - the service account's `token` is read again for every request, so kubelet's rotation of bound tokens (hourly
//!   by default) never leaves the driver with an expired one; so are the environment and `ca.crt` (a Secret read is
//!   rare — one per inline volume's publish — and a rotated cluster CA then needs no restart);
//! - the service account directory is, in a HostProcess pod, the path below under
//!   `%CONTAINER_SANDBOX_MOUNT_POINT%` when it holds a token (containerd 1.6 places volume mounts under the
//!   container's sandbox: kubernetes.io, "Create a Windows HostProcess Pod", *Volume mounts*; the plain path is then
//!   an ordinary host directory that must not win), else `/var/run/secrets/kubernetes.io/serviceaccount`, or the
//!   directory `WINCSI_SERVICE_ACCOUNT_DIR` names (out-of-cluster runs and tests; then only that one).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::error::Error;
use crate::lifecycle::{SecretSource, Secrets};

/// Where a pod's service account token and CA are mounted.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Names a service account directory (with `token` and `ca.crt`) to use instead of the in-cluster ones.
pub const SERVICE_ACCOUNT_DIR_ENV: &str = "WINCSI_SERVICE_ACCOUNT_DIR";

/// The environment variables in-cluster access reads.
const IN_CLUSTER_VARS: [&str; 4] = [
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    SERVICE_ACCOUNT_DIR_ENV,
    "CONTAINER_SANDBOX_MOUNT_POINT",
];

/// The longest one Secret read may take, connection included, whatever the RPC's own deadline.
const REQUEST_BUDGET: Duration = Duration::from_secs(15);

/// The largest response body read (a Secret holds at most 1 MiB of data; base64 and metadata add to it).
const MAX_BODY: usize = 4 << 20;

/// Reads Secrets from the Kubernetes API (`GET /api/v1/namespaces/<ns>/secrets/<name>`). The API access is resolved
/// for each read, so a driver without any Kubernetes access still starts and serves every other volume; only an
/// inline volume that names a `secretName` then fails, with `FAILED_PRECONDITION`.
pub struct KubeSecrets {
    source: Source,
}

/// Reads one environment variable.
type EnvReader = dyn Fn(&str) -> Option<std::ffi::OsString> + Send + Sync;

/// Where the API access comes from.
enum Source {
    /// The pod's service account (see [`KubeSecrets::in_cluster`]), from this environment.
    InCluster(Box<EnvReader>),
    /// A given access (tests).
    Fixed(ApiAccess),
}

impl std::fmt::Debug for KubeSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSecrets").finish_non_exhaustive()
    }
}

impl KubeSecrets {
    /// The access a DaemonSet pod has: its service account (module docs), resolved on first use.
    ///
    /// A kubeconfig is never read: a HostProcess container sees the node's filesystem, and an administrator's
    /// kubeconfig there must not silently replace the pod's own service account (and its RBAC). Without in-cluster
    /// access, reading a Secret fails with `FAILED_PRECONDITION` saying what is missing.
    pub fn in_cluster() -> Self {
        Self::in_cluster_with(|k| std::env::var_os(k))
    }

    /// [`in_cluster`](Self::in_cluster) with the environment `env` reads (tests).
    pub(crate) fn in_cluster_with(
        env: impl Fn(&str) -> Option<std::ffi::OsString> + Send + Sync + 'static,
    ) -> Self {
        Self {
            source: Source::InCluster(Box::new(env)),
        }
    }

    /// A given access (tests point it at a fake API server).
    pub fn from_access(access: ApiAccess) -> Self {
        Self {
            source: Source::Fixed(access),
        }
    }

    /// The access for one read: the fixed one, or the service account's as it is now (two small files).
    async fn api(&self) -> Result<std::borrow::Cow<'_, ApiAccess>, Error> {
        match &self.source {
            Source::Fixed(a) => Ok(std::borrow::Cow::Borrowed(a)),
            Source::InCluster(env) => {
                // The variables it reads, then its file reads off the async workers.
                let vars: std::collections::HashMap<&'static str, std::ffi::OsString> =
                    IN_CLUSTER_VARS
                        .iter()
                        .filter_map(|&k| env(k).map(|v| (k, v)))
                        .collect();
                tokio::task::spawn_blocking(move || ApiAccess::in_cluster(&|k| vars.get(k).cloned()))
                    .await
                    .unwrap_or_else(|e| Err(format!("resolving the service account failed: {e}")))
                    .map(std::borrow::Cow::Owned)
                    .map_err(|e| {
                        Error::FailedPrecondition(format!(
                            "inline ephemeral volumes need Kubernetes API access to read their Secret: {e}"
                        ))
                    })
            }
        }
    }

    async fn read(&self, namespace: &str, name: &str) -> Result<Secrets, Error> {
        use k8s_openapi::api::core::v1::Secret;
        // Both go into the request's path: only names Kubernetes itself accepts (no `/`, `?`, `%`, `..`).
        if !is_dns_label(namespace) {
            return Err(Error::InvalidArgument(format!(
                "namespace {} of the inline volume's Secret is not a valid Kubernetes namespace name",
                crate::error::quote_short(namespace)
            )));
        }
        if !is_dns_subdomain(name) {
            return Err(Error::InvalidArgument(format!(
                "secretName {} of the inline volume is not a valid Kubernetes Secret name",
                crate::error::quote_short(name)
            )));
        }
        let api = self.api().await?;
        let path = format!("/api/v1/namespaces/{namespace}/secrets/{name}");
        let (status, body) = api.get(&path).await.map_err(|e| {
            Error::Unavailable(format!(
                "cannot read Secret {namespace}/{name} from the Kubernetes API: {e}"
            ))
        })?;
        if status != http::StatusCode::OK {
            return Err(status_error(namespace, name, status, &body));
        }
        // A decoding error is not echoed either: it could quote the Secret's data.
        let secret: Secret = serde_json::from_slice(&body).map_err(|_| {
            Error::Unavailable(format!(
                "cannot read Secret {namespace}/{name}: the Kubernetes API's answer is not a Secret (details \
                 withheld: they could quote its data)"
            ))
        })?;
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

/// How to reach the Kubernetes API: its HTTPS address, the CA that signs its certificate, and the bearer token's
/// file (read again for every request).
#[derive(Clone)]
pub struct ApiAccess {
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    token_file: PathBuf,
    tls: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for ApiAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiAccess")
            .field("authority", &self.authority())
            .field("token_file", &self.token_file)
            .finish_non_exhaustive()
    }
}

impl ApiAccess {
    /// The API server at `host:port` (a DNS name or an IP address, IPv6 without brackets), whose certificate must
    /// chain to one of the PEM certificates in `ca_pem` and name `host`, with the bearer token in `token_file`.
    pub fn new(host: &str, port: u16, ca_pem: &[u8], token_file: PathBuf) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| format!("the CA bundle is not PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("the CA bundle holds an unusable certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the CA bundle holds no certificate".to_owned());
        }
        let server_name = ServerName::try_from(host.to_owned())
            .map_err(|_| format!("{host:?} is neither a host name nor an IP address"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            host: host.to_owned(),
            port,
            server_name,
            token_file,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// The pod's in-cluster access (module docs), from the environment `var` reads.
    fn in_cluster(var: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Result<Self, String> {
        let text = |k: &str| {
            var(k)
                .and_then(|v| v.into_string().ok())
                .filter(|v| !v.is_empty())
        };
        let (Some(host), Some(port)) = (
            text("KUBERNETES_SERVICE_HOST"),
            text("KUBERNETES_SERVICE_PORT"),
        ) else {
            return Err(
                "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set".to_owned(),
            );
        };
        let port: u16 = port
            .parse()
            .map_err(|_| format!("KUBERNETES_SERVICE_PORT {port:?} is not a port number"))?;
        let candidates: Vec<PathBuf> = match var(SERVICE_ACCOUNT_DIR_ENV).filter(|v| !v.is_empty())
        {
            Some(dir) => vec![PathBuf::from(dir)],
            // In a HostProcess pod, the sandbox's copy first: on containerd 1.6 the plain path is an ordinary
            // directory of the host, where a user who may create folders under C:\ could plant a token and a CA
            // of their choosing; the sandbox is the pod's own mount. (From containerd 1.7 the plain path is the
            // pod's mount, and the sandbox may hold no copy.)
            None => {
                let mut c = Vec::new();
                if let Some(sandbox) =
                    var("CONTAINER_SANDBOX_MOUNT_POINT").filter(|v| !v.is_empty())
                {
                    c.push(Path::new(&sandbox).join(SERVICE_ACCOUNT_DIR.trim_start_matches('/')));
                }
                c.push(PathBuf::from(SERVICE_ACCOUNT_DIR));
                c
            }
        };
        let Some(dir) = candidates.iter().find(|d| d.join("token").is_file()) else {
            let tried: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
            return Err(format!(
                "no service account token (automountServiceAccountToken off?) in {}",
                tried.join(" or ")
            ));
        };
        let ca_file = dir.join("ca.crt");
        let ca = std::fs::read(&ca_file)
            .map_err(|e| format!("cannot read the API server's CA {}: {e}", ca_file.display()))?;
        Self::new(&host, port, &ca, dir.join("token"))
            .map_err(|e| format!("{} (CA {})", e, ca_file.display()))
    }

    /// `host:port` for the request's `Host` header (an IPv6 address in brackets).
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// `GET path`: the answer's status and body. An error here is the transport's (connection, TLS, timeout), never
    /// a status; its text holds no token or body.
    async fn get(&self, path: &str) -> Result<(http::StatusCode, Bytes), String> {
        match tokio::time::timeout(REQUEST_BUDGET, self.get_unbounded(path)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "no answer from {} within {} s",
                self.authority(),
                REQUEST_BUDGET.as_secs()
            )),
        }
    }

    async fn get_unbounded(&self, path: &str) -> Result<(http::StatusCode, Bytes), String> {
        let authority = self.authority();
        let token = tokio::fs::read_to_string(&self.token_file)
            .await
            .map_err(|e| format!("cannot read the token {}: {e}", self.token_file.display()))?;
        let mut bearer =
            http::HeaderValue::try_from(format!("Bearer {}", token.trim())).map_err(|_| {
                format!(
                    "the token in {} is not a header value",
                    self.token_file.display()
                )
            })?;
        bearer.set_sensitive(true);
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
        let tls = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| format!("TLS with {authority}: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .map_err(|e| format!("HTTP with {authority}: {e}"))?;
        // The connection's own task ends with the exchange (the sender is dropped below) or the budget.
        tokio::spawn(tokio::time::timeout(REQUEST_BUDGET, connection));
        let request = http::Request::get(path)
            .header(http::header::HOST, &authority)
            .header(http::header::ACCEPT, "application/json")
            .header(
                http::header::USER_AGENT,
                concat!("wincsi-node/", env!("CARGO_PKG_VERSION")),
            )
            .header(http::header::AUTHORIZATION, bearer)
            .body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| format!("request for {authority}: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("HTTP with {authority}: {e}"))?;
        let status = response.status();
        let body = http_body_util::Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("reading the answer of {authority}: {e}"))?
            .to_bytes();
        Ok((status, body))
    }
}

/// The error for an answer other than 200 to a Secret read.
fn status_error(namespace: &str, name: &str, status: http::StatusCode, body: &[u8]) -> Error {
    let code = status.as_u16();
    if code == 404 {
        return Error::FailedPrecondition(format!(
            "Secret {namespace}/{name} named by the inline volume does not exist"
        ));
    }
    // Only the status's reason (a CamelCase word such as `Forbidden`): its message is not echoed.
    let reason = status_reason(body)
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("").replace(' ', ""));
    let text = format!("cannot read Secret {namespace}/{name}: {code} {reason}");
    match code {
        // Worth a retry: throttled, timed out, or the server's own trouble.
        408 | 429 | 500.. => Error::Unavailable(text),
        // Not followed: the API server never redirects a resource read.
        300..=399 => Error::FailedPrecondition(format!(
            "{text} (a redirect: is KUBERNETES_SERVICE_HOST the API server?)"
        )),
        401 | 403 => Error::FailedPrecondition(format!(
            "{text} (check the driver's RBAC: get secrets, and its service account token)"
        )),
        _ => Error::FailedPrecondition(text),
    }
}

/// The `reason` of a Kubernetes `Status` body, when it is one short CamelCase word.
fn status_reason(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let reason = v.get("reason")?.as_str()?;
    (!reason.is_empty() && reason.len() <= 64 && reason.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| reason.to_owned())
}

/// An RFC 1123 label, as Kubernetes namespace names are: lower-case alphanumerics and `-`, at most 63, alphanumeric
/// at both ends.
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// An RFC 1123 subdomain as Kubernetes checks Secret names (apimachinery's `IsDNS1123Subdomain`): labels of
/// lower-case alphanumerics and `-`, alphanumeric at both ends, joined by `.`, at most 253 in all. Unlike DNS, a
/// single label may be longer than 63 (the whole name's limit is the only one).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// A fake Kubernetes API server on loopback for tests, over TLS with a throwaway CA as a cluster's is: serves
/// `GET /api/v1/namespaces/<ns>/secrets/<name>` from a fixed map to requests that carry its current bearer token
/// (401 without it), 404 for anything else, and records each request line. Bound before it is returned; never sleeps.
///
/// What it models, and from where: failures answer with a `Status` object (`kind: Status`, `status: Failure`,
/// `reason`, `code`) as the API server does (Kubernetes API conventions, `api-conventions.md`, "Response Status
/// Kind"; reasons `Unauthorized` for a missing or rejected token and `NotFound` for an absent object); a Secret's
/// `data` values are base64 (core/v1 `Secret`). Unverified against a real server here, and simpler than one: it
/// speaks HTTP/1.1 only and closes each connection after one answer (a real API server also offers HTTP/2 and keeps
/// connections open; the reader sends one request per connection and asks for HTTP/1.1 by ALPN, so either way
/// works), and it checks no RBAC (a 403 `Forbidden` is not produced).
#[cfg(any(test, feature = "test-util"))]
pub mod fake_api {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::{Arc, Mutex, PoisonError};

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::ApiAccess;

    /// A running fake API server.
    #[derive(Debug)]
    pub struct FakeApiServer {
        /// `127.0.0.1`, the name its certificate is for.
        pub host: String,
        /// Its port.
        pub port: u16,
        /// The PEM of the CA that signed its certificate.
        pub ca_pem: String,
        token: Arc<Mutex<String>>,
        requests: Arc<Mutex<Vec<String>>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for FakeApiServer {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    impl FakeApiServer {
        /// The bearer token it accepts now.
        pub fn token(&self) -> String {
            self.token
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }

        /// Accept `token` from now on, and no longer the one before (a rotation).
        pub fn rotate_token(&self, token: &str) {
            *self.token.lock().unwrap_or_else(PoisonError::into_inner) = token.to_owned();
        }

        /// Each request so far: its request line and ` auth=<whether it carried the current token>`.
        pub fn requests(&self) -> Vec<String> {
            self.requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }

        /// Write a service account directory for it into `dir`: `token` (the current one) and `ca.crt`.
        pub fn write_service_account(&self, dir: &Path) -> std::io::Result<()> {
            std::fs::write(dir.join("token"), self.token())?;
            std::fs::write(dir.join("ca.crt"), &self.ca_pem)
        }

        /// The access the driver would resolve from a service account directory written by
        /// [`write_service_account`](Self::write_service_account) into `dir`.
        pub fn access(&self, dir: &Path) -> ApiAccess {
            ApiAccess::new(
                &self.host,
                self.port,
                self.ca_pem.as_bytes(),
                dir.join("token"),
            )
            .expect("the fake API's access")
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

    fn status(code: u16, reason: &str) -> String {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("fake API: {reason}"), "reason": reason, "code": code})
        .to_string()
    }

    /// Start serving `secrets` (`(namespace, name) → response body`, normally [`secret_json`]) to the token
    /// `initial-token`.
    pub async fn serve(
        secrets: BTreeMap<(String, String), String>,
    ) -> std::io::Result<FakeApiServer> {
        let err = |e: rcgen::Error| std::io::Error::other(e.to_string());
        let ca_key = rcgen::KeyPair::generate().map_err(err)?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "wincsi fake API CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(err)?;
        let key = rcgen::KeyPair::generate().map_err(err)?;
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .map_err(err)?
            .signed_by(&key, &ca)
            .map_err(err)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_no_client_auth().with_single_cert(
                    vec![CertificateDer::from(cert.der().to_vec())],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
                )
            })
            .map_err(std::io::Error::other)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let token = Arc::new(Mutex::new("initial-token".to_owned()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let secrets = Arc::new(secrets);
        let (tok, log) = (Arc::clone(&token), Arc::clone(&requests));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (secrets, tok, log, acceptor) = (
                    Arc::clone(&secrets),
                    Arc::clone(&tok),
                    Arc::clone(&log),
                    acceptor.clone(),
                );
                tokio::spawn(async move {
                    let Ok(mut conn) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).into_owned();
                    let line = head.lines().next().unwrap_or("").to_owned();
                    let expected = tok.lock().unwrap_or_else(PoisonError::into_inner).clone();
                    // RFC 7235: the scheme is case-insensitive, the token is not.
                    let authorised = head.lines().any(|l| {
                        l.split_once(':').is_some_and(|(k, v)| {
                            k.eq_ignore_ascii_case("authorization")
                                && v.trim().split_once(' ').is_some_and(|(scheme, token)| {
                                    scheme.eq_ignore_ascii_case("bearer") && token == expected
                                })
                        })
                    });
                    log.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(format!("{line} auth={authorised}"));
                    let path = line.split_whitespace().nth(1).unwrap_or("");
                    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
                    let (status_line, body) = if !authorised {
                        ("401 Unauthorized", status(401, "Unauthorized"))
                    } else {
                        match parts.as_slice() {
                            ["api", "v1", "namespaces", ns, "secrets", name] => {
                                match secrets.get(&((*ns).to_owned(), (*name).to_owned())) {
                                    Some(body) => ("200 OK", body.clone()),
                                    None => ("404 Not Found", status(404, "NotFound")),
                                }
                            }
                            _ => ("404 Not Found", status(404, "NotFound")),
                        }
                    };
                    let response = format!(
                        "HTTP/1.1 {status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                         connection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Ok(FakeApiServer {
            host: "127.0.0.1".to_owned(),
            port,
            ca_pem: ca.pem(),
            token,
            requests,
            task,
        })
    }
}

#[cfg(test)]
mod tests;
