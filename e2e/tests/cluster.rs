//! Opt-in suite against a real cluster with Windows nodes running wincsi (installed separately, e.g. with the
//! chart). It creates a Secret, a PersistentVolume, a PersistentVolumeClaim and a Windows Pod that writes a file to
//! the volume and reads it back, waits (bounded) for the Pod to succeed, checks its output, and deletes everything it
//! created. The inline case puts the volume in the Pod itself (`csi:` with `secretName`): the driver then reads the
//! Secret from the API server with its own service account, the one path a fake API server cannot settle. It
//! installs nothing. Run it as `e2e/README.md` explains:
//!
//! ```text
//! KUBECONFIG=... WINCSI_E2E_SMB_SOURCE='\\server\share' WINCSI_E2E_SMB_USERNAME=... WINCSI_E2E_SMB_PASSWORD=... \
//!   cargo test -p wincsi-e2e --test cluster -- --ignored --nocapture
//! ```
//!
//! A test whose storage variables are unset fails and names them (it never passes vacuously).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, CSIVolumeSource, Container, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, Pod,
    PodSpec, Secret, SecretReference, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, LogParams, PostParams};

/// What the environment says about the cluster and the storage.
struct Env {
    namespace: String,
    driver: String,
    image: String,
    timeout: Duration,
    run_id: String,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn required(name: &str) -> String {
    var(name).unwrap_or_else(|| panic!("{name} is not set: see e2e/README.md (real-cluster suite)"))
}

impl Env {
    fn load() -> Env {
        let secs = var("WINCSI_E2E_TIMEOUT_SECS").map_or(600, |s| {
            s.parse().expect("WINCSI_E2E_TIMEOUT_SECS: seconds")
        });
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        Env {
            namespace: var("WINCSI_E2E_NAMESPACE").unwrap_or_else(|| "default".to_owned()),
            driver: var("WINCSI_E2E_DRIVER").unwrap_or_else(|| "wincsi.csi.io".to_owned()),
            image: var("WINCSI_E2E_IMAGE")
                .unwrap_or_else(|| "mcr.microsoft.com/windows/servercore:ltsc2022".to_owned()),
            timeout: Duration::from_secs(secs),
            run_id: format!("{}-{:x}", std::process::id(), nanos),
        }
    }
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/part-of".to_owned(),
            "wincsi-e2e".to_owned(),
        )])),
        ..ObjectMeta::default()
    }
}

/// One volume under test: its attributes and node-stage secret.
struct Case {
    kind: &'static str,
    attributes: BTreeMap<String, String>,
    secret: BTreeMap<String, String>,
    access_mode: &'static str,
    /// An inline ephemeral volume naming the Secret (`secretName`) instead of a PersistentVolume and its claim.
    inline: bool,
}

async fn run_case(case: Case) {
    let env = Env::load();
    let client = kube::Client::try_default()
        .await
        .expect("a Kubernetes client from KUBECONFIG");
    let name = format!("wincsi-e2e-{}-{}", case.kind, env.run_id);
    let token = format!("wincsi e2e {name}");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &env.namespace);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &env.namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &env.namespace);

    let result = async {
        let secret = Secret {
            metadata: meta(&name, Some(&env.namespace)),
            string_data: Some(case.secret.clone()),
            ..Secret::default()
        };
        secrets.create(&PostParams::default(), &secret).await.map_err(|e| format!("create Secret: {e}"))?;
        let volume = if case.inline {
            let mut attributes = case.attributes.clone();
            attributes.insert("secretName".to_owned(), name.clone());
            Volume {
                name: "data".to_owned(),
                csi: Some(CSIVolumeSource {
                    driver: env.driver.clone(),
                    volume_attributes: Some(attributes),
                    ..CSIVolumeSource::default()
                }),
                ..Volume::default()
            }
        } else {
            create_claim(&case, &env, &name, &pvs, &pvcs).await?;
            Volume {
                name: "data".to_owned(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: name.clone(),
                    read_only: None,
                }),
                ..Volume::default()
            }
        };
        let script = format!(
            "Set-Content -Path C:\\data\\e2e.txt -Value '{token}'; Get-Content -Path C:\\data\\e2e.txt"
        );
        let pod = Pod {
            metadata: meta(&name, Some(&env.namespace)),
            spec: Some(PodSpec {
                node_selector: Some(BTreeMap::from([("kubernetes.io/os".to_owned(), "windows".to_owned())])),
                restart_policy: Some("Never".to_owned()),
                containers: vec![Container {
                    name: "writer".to_owned(),
                    image: Some(env.image.clone()),
                    command: Some(vec!["powershell.exe".to_owned(), "-NoProfile".to_owned(), "-Command".to_owned(), script]),
                    volume_mounts: Some(vec![VolumeMount {
                        name: "data".to_owned(),
                        mount_path: "C:\\data".to_owned(),
                        ..VolumeMount::default()
                    }]),
                    ..Container::default()
                }],
                volumes: Some(vec![volume]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        pods.create(&PostParams::default(), &pod).await.map_err(|e| format!("create Pod: {e}"))?;
        wait_and_check(&pods, &name, &token, env.timeout).await
    }
    .await;

    // Clean up whatever was created, whatever happened (errors for objects never created are expected).
    let dp = DeleteParams::default();
    let _ = pods.delete(&name, &dp).await;
    let _ = pvcs.delete(&name, &dp).await;
    let _ = pvs.delete(&name, &dp).await;
    let _ = secrets.delete(&name, &dp).await;
    if let Err(e) = result {
        panic!("{} volume on the cluster: {e}", case.kind);
    }
}

/// The PersistentVolume and its claim, bound by name.
async fn create_claim(
    case: &Case,
    env: &Env,
    name: &str,
    pvs: &Api<PersistentVolume>,
    pvcs: &Api<PersistentVolumeClaim>,
) -> Result<(), String> {
    let name = name.to_owned();
    let pv = PersistentVolume {
        metadata: meta(&name, None),
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([(
                "storage".to_owned(),
                Quantity("1Gi".to_owned()),
            )])),
            access_modes: Some(vec![case.access_mode.to_owned()]),
            persistent_volume_reclaim_policy: Some("Retain".to_owned()),
            storage_class_name: Some(String::new()),
            csi: Some(CSIPersistentVolumeSource {
                driver: env.driver.clone(),
                volume_handle: name.clone(),
                volume_attributes: Some(case.attributes.clone()),
                node_stage_secret_ref: Some(SecretReference {
                    name: Some(name.clone()),
                    namespace: Some(env.namespace.clone()),
                }),
                ..CSIPersistentVolumeSource::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        ..PersistentVolume::default()
    };
    pvs.create(&PostParams::default(), &pv)
        .await
        .map_err(|e| format!("create PersistentVolume: {e}"))?;
    let pvc = PersistentVolumeClaim {
        metadata: meta(&name, Some(&env.namespace)),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![case.access_mode.to_owned()]),
            storage_class_name: Some(String::new()),
            volume_name: Some(name.clone()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity("1Gi".to_owned()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    };
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .map_err(|e| format!("create PersistentVolumeClaim: {e}"))?;
    Ok(())
}

/// Waits (bounded) for Pod `name` to finish and checks that it read back `token`.
async fn wait_and_check(
    pods: &Api<Pod>,
    name: &str,
    token: &str,
    timeout: Duration,
) -> Result<(), String> {
    // Bounded wait for the Pod to finish (polling a real API server; there is nothing local to wait on).
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let p = pods.get(name).await.map_err(|e| format!("get Pod: {e}"))?;
        match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded") => break,
            Some("Failed") => {
                let logs = pods
                    .logs(name, &LogParams::default())
                    .await
                    .unwrap_or_default();
                return Err(format!("the Pod failed; its output:\n{logs}"));
            }
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the Pod did not finish within {timeout:?}: {:?}",
                p.status
            ));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let logs = pods
        .logs(name, &LogParams::default())
        .await
        .map_err(|e| format!("Pod logs: {e}"))?;
    if logs.contains(token) {
        Ok(())
    } else {
        Err(format!(
            "the Pod did not read back {token:?}; output:\n{logs}"
        ))
    }
}

/// The SMB credentials the environment names (`WINCSI_E2E_SMB_USERNAME`, `_PASSWORD`, optional `_DOMAIN`).
fn smb_secret() -> BTreeMap<String, String> {
    let mut secret = BTreeMap::from([
        ("username".to_owned(), required("WINCSI_E2E_SMB_USERNAME")),
        ("password".to_owned(), required("WINCSI_E2E_SMB_PASSWORD")),
    ]);
    if let Some(d) = var("WINCSI_E2E_SMB_DOMAIN") {
        secret.insert("domain".to_owned(), d);
    }
    secret
}

#[tokio::test]
#[ignore = "needs a real cluster with Windows nodes and an SMB share: see e2e/README.md"]
async fn windows_pod_writes_and_reads_back_a_file_on_an_smb_volume() {
    let secret = smb_secret();
    let mut attributes = BTreeMap::from([("source".to_owned(), required("WINCSI_E2E_SMB_SOURCE"))]);
    attributes.insert("subDir".to_owned(), "wincsi-e2e".to_owned());
    run_case(Case {
        kind: "smb",
        attributes,
        secret,
        access_mode: "ReadWriteMany",
        inline: false,
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a real cluster with Windows nodes, an SMB share and the chart's rbac.secrets: see e2e/README.md"]
async fn windows_pod_mounts_an_inline_smb_volume_whose_secret_the_driver_reads_from_the_api() {
    // The driver reads this Secret itself (its service account; the chart's `rbac.secrets.enabled=true`), over
    // the API server's TLS with the pod's `ca.crt` and token: what only a real cluster settles.
    let secret = smb_secret();
    let attributes = BTreeMap::from([
        ("source".to_owned(), required("WINCSI_E2E_SMB_SOURCE")),
        ("subDir".to_owned(), "wincsi-e2e-inline".to_owned()),
    ]);
    run_case(Case {
        kind: "smb-inline",
        attributes,
        secret,
        access_mode: "ReadWriteOnce",
        inline: true,
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a real cluster with Windows nodes and an iSCSI target: see e2e/README.md"]
async fn windows_pod_writes_and_reads_back_a_file_on_an_iscsi_volume() {
    let mut attributes = BTreeMap::from([
        (
            "targetPortal".to_owned(),
            required("WINCSI_E2E_ISCSI_PORTAL"),
        ),
        ("iqn".to_owned(), required("WINCSI_E2E_ISCSI_IQN")),
        (
            "lun".to_owned(),
            var("WINCSI_E2E_ISCSI_LUN").unwrap_or_else(|| "0".to_owned()),
        ),
    ]);
    let mut secret = BTreeMap::new();
    if let (Some(u), Some(p)) = (
        var("WINCSI_E2E_ISCSI_CHAP_USERNAME"),
        var("WINCSI_E2E_ISCSI_CHAP_PASSWORD"),
    ) {
        attributes.insert("sessionCHAPAuth".to_owned(), "true".to_owned());
        secret.insert("node.session.auth.username".to_owned(), u);
        secret.insert("node.session.auth.password".to_owned(), p);
    }
    run_case(Case {
        kind: "iscsi",
        attributes,
        secret,
        access_mode: "ReadWriteOnce",
        inline: false,
    })
    .await;
}
