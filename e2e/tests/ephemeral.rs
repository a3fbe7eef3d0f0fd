//! Inline ephemeral SMB volumes whose credentials come from a Secret (`secretName`), end to end: the real driver
//! process reads the Secret from a fake Kubernetes API server on loopback over TLS, found as in a pod
//! (`KUBERNETES_SERVICE_HOST`/`_PORT`, a service account directory with `token` and `ca.crt`, here named by
//! `WINCSI_SERVICE_ACCOUNT_DIR`), and the real simulator checks the mapping, the data and the teardown.
#![cfg(unix)]

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use wincsi::ephemeral::{SERVICE_ACCOUNT_DIR_ENV, fake_api};
use wincsi_e2e::fixtures::{
    self, SECRETS, SMB_DOMAIN, SMB_PASSWORD, SMB_SERVER, SMB_SHARE, SMB_USER,
};
use wincsi_e2e::{Pod, TestNode, Volume, binaries};

/// The service account's bearer token: a credential too, so it must not be logged either.
const API_TOKEN: &str = "e2e-fake-api-token-5ecr3t";

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_smb_volume_reads_its_secret_from_the_api_as_a_pod_and_tears_down_cleanly() {
    let secret = serde_json::to_string(&smb_secret("scratch", "smb-creds")).expect("secret json");
    let api = fake_api::serve(BTreeMap::from([(
        ("scratch".to_owned(), "smb-creds".to_owned()),
        secret,
    )]))
    .await
    .expect("fake api");
    api.rotate_token(API_TOKEN);
    let sa = tempfile::tempdir().expect("tempdir");
    api.write_service_account(sa.path())
        .expect("service account");
    let node = TestNode::start_with(&binaries!(), &fixtures::scenario(), |o| {
        o.env.extend([
            ("KUBERNETES_SERVICE_HOST".to_owned(), api.host.clone()),
            ("KUBERNETES_SERVICE_PORT".to_owned(), api.port.to_string()),
            (
                SERVICE_ACCOUNT_DIR_ENV.to_owned(),
                sa.path().display().to_string(),
            ),
        ]);
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
    let requests = api.requests();
    assert!(
        requests.iter().any(
            |r| r.starts_with("GET /api/v1/namespaces/scratch/secrets/smb-creds ")
                && r.ends_with("auth=true")
        ),
        "the driver read the Secret with the service account's token: {requests:?}"
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
