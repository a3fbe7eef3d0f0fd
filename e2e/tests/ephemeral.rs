//! Inline ephemeral SMB volumes whose credentials come from a Secret (`secretName`), end to end: the real driver
//! process reads the Secret from a fake Kubernetes API server on loopback, found through `KUBECONFIG` (the fallback
//! after in-cluster config), and the real simulator checks the mapping, the data and the teardown.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wincsi_e2e::fixtures::{
    self, SECRETS, SMB_DOMAIN, SMB_PASSWORD, SMB_SERVER, SMB_SHARE, SMB_USER,
};
use wincsi_e2e::{Pod, TestNode, Volume, binaries};

/// The bearer token in the test kubeconfig: a credential too, so it must not be logged either.
const API_TOKEN: &str = "e2e-fake-api-token-5ecr3t";

/// A fake API server: serves `GET /api/v1/namespaces/<ns>/secrets/<name>` from `secrets`, 404 otherwise, and
/// records each request line with whether the bearer token came along. Bound before it returns.
struct FakeApi {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn fake_api(secrets: BTreeMap<(String, String), Secret>) -> FakeApi {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (secrets, log) = (Arc::new(secrets), Arc::clone(&requests));
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (secrets, log) = (Arc::clone(&secrets), Arc::clone(&log));
            tokio::spawn(async move {
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
                let authorised = head.lines().any(|l| {
                    l.to_ascii_lowercase().starts_with("authorization:")
                        && l.ends_with(&format!("Bearer {API_TOKEN}"))
                });
                log.lock()
                    .unwrap()
                    .push(format!("{line} auth={authorised}"));
                let path = line.split_whitespace().nth(1).unwrap_or("");
                let path = path.split('?').next().unwrap_or("");
                let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
                let found = match parts.as_slice() {
                    ["api", "v1", "namespaces", ns, "secrets", name] if authorised => {
                        secrets.get(&((*ns).to_owned(), (*name).to_owned()))
                    }
                    _ => None,
                };
                let (status, body) = match found {
                    Some(s) => ("200 OK", serde_json::to_string(s).expect("secret json")),
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
    FakeApi {
        url,
        requests,
        task,
    }
}

fn smb_secret(namespace: &str, name: &str) -> Secret {
    let data = [
        ("username", SMB_USER),
        ("password", SMB_PASSWORD),
        ("domain", SMB_DOMAIN),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Default::default()
    }
}

/// A kubeconfig whose only context points at `server` with a bearer token.
fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\nusers:\n- name: \
         driver\n  user:\n    token: {API_TOKEN}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: \
         driver\n    namespace: default\ncurrent-context: fake\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_smb_volume_reads_its_secret_through_kubeconfig_and_tears_down_cleanly() {
    let api = fake_api(BTreeMap::from([(
        ("scratch".to_owned(), "smb-creds".to_owned()),
        smb_secret("scratch", "smb-creds"),
    )]))
    .await;
    let cfg_dir = tempfile::tempdir().expect("tempdir");
    let cfg = cfg_dir.path().join("kubeconfig");
    std::fs::write(&cfg, kubeconfig(&api.url)).expect("write kubeconfig");
    let node = TestNode::start_with(&binaries!(), &fixtures::scenario(), |o| {
        o.env
            .push(("KUBECONFIG".to_owned(), cfg.display().to_string()));
    })
    .await
    .expect("node starts");
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("scratch", "job-2");
    let vol = Volume::inline(&pod, "creds")
        .attr("source", &format!(r"\\{SMB_SERVER}\{SMB_SHARE}"))
        .attr("subDir", "inline-job-2")
        .attr("secretName", "smb-creds");

    let t = k
        .mount(host, &pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n--- driver log ---\n{}", node.driver_logs()));
    let requests = api.requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(
            |r| r.starts_with("GET /api/v1/namespaces/scratch/secrets/smb-creds ")
                && r.ends_with("auth=true")
        ),
        "the driver read the Secret with the kubeconfig's token: {requests:?}"
    );
    let state = host.state().await.expect("state");
    let mappings = state["mappings"].as_object().cloned().unwrap_or_default();
    assert_eq!(mappings.len(), 1, "{mappings:?}");
    host.write_file(&format!(r"{t}\out.txt"), "through the Secret")
        .await
        .expect("write through the publish link");
    assert_eq!(
        host.read_share_file(SMB_SERVER, SMB_SHARE, "inline-job-2/out.txt")
            .await
            .expect("read on the share"),
        "through the Secret"
    );
    assert!(k.calls().iter().all(|c| c.rpc != "NodeStageVolume"));

    k.unmount(host, &pod, &vol)
        .await
        .unwrap_or_else(|e| panic!("{e}\n--- driver log ---\n{}", node.driver_logs()));
    if let Err(e) = node.check_clean().await {
        panic!("{e}\n--- driver log ---\n{}", node.driver_logs());
    }
    let mut secrets = SECRETS.to_vec();
    secrets.push(API_TOKEN);
    node.check_no_secret_in_logs(&secrets)
        .expect("no secret in logs");
    let logs = node.driver_logs();
    assert!(!logs.contains(SMB_PASSWORD) && !logs.contains(API_TOKEN));
    assert!(!logs.is_empty(), "the driver logged (at trace level)");
    node.shutdown().await;
    drop(api);
}
