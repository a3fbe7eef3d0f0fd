//! Invariants of the Helm chart in `charts/wincsi`.
//!
//! Every scenario in `charts/wincsi/ci/*-values.yaml` is rendered with Helm 3 and Helm 4
//! (`$WINCSI_HELM3` / `$WINCSI_HELM4`, else `helm3` / `helm4` on `PATH`; a missing Helm
//! fails the test and says to run `.ci/install.sh`). The objects are loaded into
//! `k8s-openapi` types and checked against what the scenario's values promise: Windows
//! nodes only, exactly the csi-proxy pipes the driver dials, one socket path shared by the
//! driver and both sidecars, one driver name everywhere, HostProcess pods without volumes
//! but with liveness probes, no Linux-only fields, the CSIDriver spec, RBAC absent by
//! default and `get`-only when enabled. The pipe admission policy's CEL is evaluated with
//! the `cel` crate against pods and workloads that must be allowed or denied.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, PodSpec, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::api::storage::v1::CSIDriver;
use serde::Deserialize;
use serde_json::{Value as Json, json};

/// Release name and namespace every scenario is rendered with.
const RELEASE: &str = "wincsi";
const NAMESPACE: &str = "wincsi-system";

/// The csi-proxy `<group>-<version>` endpoints the driver dials (the cross-team contract).
const PIPES: [&str; 6] = [
    "disk-v1",
    "volume-v1",
    "filesystem-v1",
    "smb-v1",
    "iscsi-v1alpha2",
    "system-v1alpha1",
];

/// Flags the driver binary accepts (the cross-team contract); anything else would make it
/// exit with status 2 at start-up.
const DRIVER_FLAGS: [&str; 12] = [
    "endpoint",
    "node-id",
    "driver-name",
    "kubelet-root",
    "host-backend",
    "csi-proxy-pipe-prefix",
    "csi-proxy-socket-dir",
    "state-dir",
    "max-volumes-per-node",
    "topology",
    "log-format",
    "log-level",
];

/// Keys that only mean something on Linux nodes; none may appear in a Windows pod spec.
const LINUX_ONLY_KEYS: [&str; 17] = [
    "privileged",
    "allowPrivilegeEscalation",
    "capabilities",
    "seLinuxOptions",
    "seccompProfile",
    "appArmorProfile",
    "procMount",
    "readOnlyRootFilesystem",
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "fsGroup",
    "fsGroupChangePolicy",
    "supplementalGroups",
    "sysctls",
    "mountPropagation",
    "hostPID",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

fn chart_dir() -> PathBuf {
    repo_root().join("charts").join("wincsi")
}

// ---------------------------------------------------------------------------------------
// Helm
// ---------------------------------------------------------------------------------------

fn on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Both Helms, from `$WINCSI_HELM3`/`$WINCSI_HELM4` or `helm3`/`helm4` on `PATH`.
fn helms() -> Vec<(&'static str, PathBuf)> {
    [("helm3", "WINCSI_HELM3"), ("helm4", "WINCSI_HELM4")]
        .into_iter()
        .map(|(name, var)| {
            let found = match env::var_os(var) {
                Some(p) => {
                    let p = PathBuf::from(p);
                    assert!(
                        p.is_file(),
                        "${var} is {} but no such file: run .ci/install.sh (and source .ci/env.sh)",
                        p.display()
                    );
                    p
                }
                None => on_path(name).unwrap_or_else(|| {
                    panic!(
                        "{name} not found (${var} unset and no {name} on PATH): run .ci/install.sh \
                         and source .ci/env.sh; the chart tests never skip"
                    )
                }),
            };
            (name, found)
        })
        .collect()
}

/// Runs `helm template` and returns the rendered objects as JSON.
fn helm_template(helm: &Path, args: &[&str]) -> Result<Vec<Json>, String> {
    let home = tempfile::tempdir().expect("temp dir for helm");
    let output = Command::new(helm)
        .arg("template")
        .arg(RELEASE)
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE])
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", helm.display()));
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8(output.stdout).expect("helm output is UTF-8");
    let mut objects = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value = Json::deserialize(doc).expect("helm output is valid YAML");
        if !value.is_null() {
            objects.push(value);
        }
    }
    Ok(objects)
}

fn read_yaml(path: &Path) -> Json {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let value: Json =
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    if value.is_null() { json!({}) } else { value }
}

/// Helm's value merge: maps merge recursively, everything else is replaced.
fn merge(base: &mut Json, over: &Json) {
    match (base, over) {
        (Json::Object(b), Json::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

fn scenario_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("ci"))
        .expect("charts/wincsi/ci exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("-values.yaml"))
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 8,
        "expected the chart's scenario value files, found {files:?}"
    );
    files
}

// ---------------------------------------------------------------------------------------
// What a scenario's values promise
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
struct Expect {
    host_process: bool,
    kubelet_root: String,
    driver_name: String,
    csi_proxy_install: bool,
    secrets: bool,
    secret_namespaces: Vec<String>,
    secret_names: Vec<String>,
    admission: bool,
    validation_actions: Vec<String>,
    service_account: String,
    max_volumes: i64,
    log_level: String,
    log_format: String,
}

fn strings(v: &Json) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("string").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

impl Expect {
    fn from_values(values: &Json) -> Self {
        let s = |ptr: &str| {
            values
                .pointer(ptr)
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let b = |ptr: &str| values.pointer(ptr).and_then(Json::as_bool).expect(ptr);
        let mode = s("/mode");
        assert!(mode == "csiProxy" || mode == "hostProcess", "mode {mode}");
        let sa = s("/serviceAccount/name");
        Expect {
            host_process: mode == "hostProcess",
            kubelet_root: s("/kubeletRoot").trim_end_matches('\\').to_owned(),
            driver_name: s("/driver/name"),
            csi_proxy_install: b("/csiProxy/install"),
            secrets: b("/rbac/secrets/enabled"),
            secret_namespaces: strings(&values["rbac"]["secrets"]["namespaces"]),
            secret_names: strings(&values["rbac"]["secrets"]["resourceNames"]),
            admission: b("/admissionPolicy/enabled"),
            validation_actions: strings(&values["admissionPolicy"]["validationActions"]),
            service_account: if sa.is_empty() {
                format!("{RELEASE}-node")
            } else {
                sa
            },
            max_volumes: values["driver"]["maxVolumesPerNode"].as_i64().expect("int"),
            log_level: s("/driver/logLevel"),
            log_format: s("/driver/logFormat"),
        }
    }

    fn plugin_dir(&self) -> String {
        format!("{}\\plugins\\{}", self.kubelet_root, self.driver_name)
    }

    fn socket(&self) -> String {
        format!("{}\\csi.sock", self.plugin_dir())
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.socket())
    }

    fn registration_dir(&self) -> String {
        format!("{}\\plugins_registry", self.kubelet_root)
    }
}

// ---------------------------------------------------------------------------------------
// Rendered objects, typed
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Rendered {
    raw: Vec<Json>,
    daemonsets: Vec<DaemonSet>,
    csidrivers: Vec<CSIDriver>,
    service_accounts: Vec<ServiceAccount>,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    policies: Vec<ValidatingAdmissionPolicy>,
    bindings: Vec<ValidatingAdmissionPolicyBinding>,
}

fn typed<T: serde::de::DeserializeOwned>(v: &Json) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v:#}"))
}

impl Rendered {
    fn load(objects: Vec<Json>) -> Self {
        let mut r = Rendered::default();
        for o in &objects {
            let api = o["apiVersion"].as_str().expect("apiVersion");
            let kind = o["kind"].as_str().expect("kind");
            match (api, kind) {
                ("apps/v1", "DaemonSet") => r.daemonsets.push(typed(o)),
                ("storage.k8s.io/v1", "CSIDriver") => r.csidrivers.push(typed(o)),
                ("v1", "ServiceAccount") => r.service_accounts.push(typed(o)),
                ("rbac.authorization.k8s.io/v1", "Role") => r.roles.push(typed(o)),
                ("rbac.authorization.k8s.io/v1", "RoleBinding") => r.role_bindings.push(typed(o)),
                ("rbac.authorization.k8s.io/v1", "ClusterRole") => r.cluster_roles.push(typed(o)),
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                    r.cluster_role_bindings.push(typed(o))
                }
                ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
                    r.policies.push(typed(o))
                }
                ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
                    r.bindings.push(typed(o))
                }
                other => panic!("unexpected object rendered: {other:?}"),
            }
        }
        r.raw = objects;
        r
    }

    fn daemonset(&self, component: &str) -> Option<&DaemonSet> {
        self.daemonsets.iter().find(|ds| {
            ds.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/component"))
                == Some(&component.to_owned())
        })
    }
}

fn pod_spec(ds: &DaemonSet) -> &PodSpec {
    ds.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

fn container<'a>(spec: &'a PodSpec, name: &str) -> &'a Container {
    spec.containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("container {name} missing"))
}

/// `--name=value` arguments as a multimap; every argument must have that form.
fn flags(c: &Container) -> BTreeMap<String, Vec<String>> {
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for arg in c.args.iter().flatten() {
        let rest = arg
            .strip_prefix("--")
            .unwrap_or_else(|| panic!("{}: argument {arg:?} is not --flag=value", c.name));
        let (k, v) = rest
            .split_once('=')
            .unwrap_or_else(|| panic!("{}: argument {arg:?} is not --flag=value", c.name));
        map.entry(k.to_owned()).or_default().push(v.to_owned());
    }
    map
}

fn flag(c: &Container, name: &str) -> String {
    let all = flags(c);
    match all.get(name).map(Vec::as_slice) {
        Some([one]) => one.clone(),
        other => panic!("{}: expected exactly one --{name}, got {other:?}", c.name),
    }
}

/// `path` is `dir` or lies below it (Windows separators).
fn is_within(path: &str, dir: &str) -> bool {
    path == dir || path.starts_with(&format!("{}\\", dir.trim_end_matches('\\')))
}

fn pipe_path(endpoint: &str) -> String {
    format!("\\\\.\\pipe\\csi-proxy-{endpoint}")
}

// ---------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------

fn check_labels(r: &Rendered) {
    for o in &r.raw {
        let labels = &o["metadata"]["labels"];
        for key in [
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
            "app.kubernetes.io/managed-by",
            "helm.sh/chart",
        ] {
            assert!(
                labels[key].is_string(),
                "{} {} lacks label {key}",
                o["kind"],
                o["metadata"]["name"]
            );
        }
        assert_eq!(labels["app.kubernetes.io/instance"], RELEASE);
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm");
    }
}

/// Recursively finds Linux-only keys in a pod spec (as JSON, so a field k8s-openapi does
/// not model cannot hide).
fn linux_only_keys(v: &Json, path: &str, found: &mut Vec<String>) {
    match v {
        Json::Object(m) => {
            for (k, child) in m {
                if LINUX_ONLY_KEYS.contains(&k.as_str()) || k == "hostIPC" {
                    found.push(format!("{path}.{k}"));
                }
                linux_only_keys(child, &format!("{path}.{k}"), found);
            }
        }
        Json::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                linux_only_keys(child, &format!("{path}[{i}]"), found);
            }
        }
        _ => {}
    }
}

fn check_windows_pod(ds: &DaemonSet, raw: &[Json]) {
    let name = ds.metadata.name.as_deref().expect("name");
    let spec = pod_spec(ds);
    assert_eq!(
        spec.node_selector
            .as_ref()
            .and_then(|s| s.get("kubernetes.io/os"))
            .map(String::as_str),
        Some("windows"),
        "{name}: must select Windows nodes"
    );
    assert_eq!(
        spec.priority_class_name.as_deref(),
        Some("system-node-critical"),
        "{name}"
    );
    let raw_ds = raw
        .iter()
        .find(|o| o["kind"] == "DaemonSet" && o["metadata"]["name"] == name)
        .expect("raw daemonset");
    let mut found = Vec::new();
    linux_only_keys(&raw_ds["spec"]["template"], "template", &mut found);
    assert!(
        found.is_empty(),
        "{name}: Linux-only fields in a Windows pod: {found:?}"
    );
    // The typed view agrees: no privileged/propagation anywhere.
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        if let Some(sc) = &c.security_context {
            assert!(
                sc.privileged.is_none() && sc.capabilities.is_none(),
                "{name}/{}",
                c.name
            );
            assert!(sc.se_linux_options.is_none() && sc.allow_privilege_escalation.is_none());
        }
        for m in c.volume_mounts.iter().flatten() {
            assert!(
                m.mount_propagation.is_none(),
                "{name}/{}: mountPropagation",
                c.name
            );
        }
        let image = c.image.as_deref().expect("image");
        let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
        assert!(
            image.contains('@') || (!tag.is_empty() && tag != "latest" && !tag.contains('/')),
            "{name}/{}: image {image} must be pinned",
            c.name
        );
    }
    assert_ne!(spec.host_pid, Some(true));
    assert_ne!(spec.host_ipc, Some(true));
}

fn check_host_process_pod(spec: &PodSpec, name: &str) {
    let wo = spec
        .security_context
        .as_ref()
        .and_then(|s| s.windows_options.as_ref())
        .unwrap_or_else(|| panic!("{name}: pod windowsOptions missing"));
    assert_eq!(wo.host_process, Some(true), "{name}: hostProcess");
    assert_eq!(
        wo.run_as_user_name.as_deref(),
        Some("NT AUTHORITY\\SYSTEM"),
        "{name}"
    );
    assert_eq!(
        spec.host_network,
        Some(true),
        "{name}: HostProcess needs hostNetwork"
    );
    assert!(
        spec.volumes.as_ref().is_none_or(Vec::is_empty),
        "{name}: HostProcess pod with volumes"
    );
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        assert!(
            c.volume_mounts.as_ref().is_none_or(Vec::is_empty),
            "{name}/{}: HostProcess container with volume mounts",
            c.name
        );
        let cmd = c.command.as_ref().filter(|c| !c.is_empty());
        assert!(
            cmd.is_some(),
            "{name}/{}: HostProcess containers need an explicit command",
            c.name
        );
        // A per-container override must not contradict the pod.
        if let Some(wo) = c
            .security_context
            .as_ref()
            .and_then(|s| s.windows_options.as_ref())
        {
            assert_ne!(wo.host_process, Some(false), "{name}/{}", c.name);
        }
    }
}

fn check_node_daemonset(r: &Rendered, exp: &Expect) {
    let ds = r.daemonset("node").expect("node DaemonSet");
    check_windows_pod(ds, &r.raw);
    let spec = pod_spec(ds);
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some(exp.service_account.as_str())
    );
    assert_eq!(
        spec.automount_service_account_token,
        Some(exp.secrets),
        "token only for secrets"
    );
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["wincsi-node", "node-driver-registrar", "liveness-probe"]
    );

    // The driver: exactly the contract's flags, with the values the chart promises.
    let driver = container(spec, "wincsi-node");
    let df = flags(driver);
    for k in df.keys() {
        assert!(
            DRIVER_FLAGS.contains(&k.as_str()),
            "driver flag --{k} is not in the contract"
        );
    }
    assert_eq!(flag(driver, "endpoint"), exp.endpoint());
    assert_eq!(flag(driver, "node-id"), "$(KUBE_NODE_NAME)");
    assert_eq!(flag(driver, "driver-name"), exp.driver_name);
    assert_eq!(flag(driver, "kubelet-root"), exp.kubelet_root);
    assert_eq!(flag(driver, "log-level"), exp.log_level);
    assert_eq!(flag(driver, "log-format"), exp.log_format);
    if exp.max_volumes > 0 {
        assert_eq!(
            flag(driver, "max-volumes-per-node"),
            exp.max_volumes.to_string()
        );
    } else {
        assert!(
            !df.contains_key("max-volumes-per-node"),
            "0 means the flag is not passed"
        );
    }
    assert!(
        !df.contains_key("csi-proxy-pipe-prefix") && !df.contains_key("csi-proxy-socket-dir"),
        "the mounted pipes assume the default pipe prefix"
    );
    let node_env = driver
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "KUBE_NODE_NAME")
        .expect("KUBE_NODE_NAME env");
    let field = node_env
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .expect("fieldRef");
    assert_eq!(field.field_path, "spec.nodeName");

    // The driver's liveness probe is served by the livenessprobe sidecar.
    let probe = driver
        .liveness_probe
        .as_ref()
        .expect("driver liveness probe");
    let http = probe.http_get.as_ref().expect("httpGet liveness probe");
    assert_eq!(http.path.as_deref(), Some("/healthz"));
    let port = driver
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("healthz"))
        .expect("healthz port");
    assert_eq!(
        http.port,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("healthz".into())
    );
    let lp = container(spec, "liveness-probe");
    assert_eq!(
        flag(lp, "csi-address"),
        exp.endpoint(),
        "livenessprobe dials the driver's socket"
    );
    assert_eq!(flag(lp, "health-port"), port.container_port.to_string());
    assert!(
        lp.image
            .as_deref()
            .unwrap()
            .starts_with("registry.k8s.io/sig-storage/livenessprobe:v2.")
    );

    // The registrar: same socket, registration paths from the same kubelet root.
    let reg = container(spec, "node-driver-registrar");
    assert!(
        reg.image
            .as_deref()
            .unwrap()
            .starts_with("registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.")
    );
    assert_eq!(flag(reg, "csi-address"), exp.endpoint());
    assert_eq!(flag(reg, "kubelet-registration-path"), exp.socket());
    assert_eq!(
        format!("unix://{}", flag(reg, "kubelet-registration-path")),
        flag(driver, "endpoint"),
        "kubelet must dial the socket the driver listens on"
    );
    assert_eq!(
        flag(reg, "plugin-registration-path"),
        exp.registration_dir()
    );
    let reg_probe = reg
        .liveness_probe
        .as_ref()
        .and_then(|p| p.exec.as_ref())
        .expect("registrar probe");
    let cmd = reg_probe.command.as_ref().expect("probe command");
    assert!(
        cmd[0].ends_with("\\csi-node-driver-registrar.exe"),
        "{cmd:?}"
    );
    assert!(cmd.contains(&"--mode=kubelet-registration-probe".to_owned()));
    assert!(cmd.contains(&format!("--kubelet-registration-path={}", exp.socket())));

    if exp.host_process {
        check_host_process_pod(spec, "node");
        for c in &spec.containers {
            let cmd = &c.command.as_ref().unwrap()[0];
            assert!(
                cmd.starts_with("%CONTAINER_SANDBOX_MOUNT_POINT%\\") && cmd.ends_with(".exe"),
                "{}: HostProcess command {cmd:?} must name the binary in the image",
                c.name
            );
        }
        assert!(
            cmd[0].starts_with("%CONTAINER_SANDBOX_MOUNT_POINT%\\"),
            "{cmd:?}"
        );
        assert!(
            spec.containers
                .iter()
                .filter(|c| c.liveness_probe.is_some())
                .count()
                >= 2
        );
    } else {
        check_csi_proxy_mode_mounts(spec, exp);
        assert!(
            spec.security_context
                .as_ref()
                .and_then(|s| s.windows_options.as_ref())
                .is_none()
        );
        assert_ne!(spec.host_network, Some(true));
    }
}

fn check_csi_proxy_mode_mounts(spec: &PodSpec, exp: &Expect) {
    let volumes: BTreeMap<&str, _> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| {
            (
                v.name.as_str(),
                v.host_path.as_ref().expect("only hostPath volumes"),
            )
        })
        .collect();
    let want_pipes: BTreeSet<String> = PIPES.iter().map(|p| pipe_path(p)).collect();
    let pipe_volumes: BTreeMap<&str, String> = volumes
        .iter()
        .filter(|(_, hp)| hp.path.starts_with("\\\\.\\pipe\\"))
        .map(|(n, hp)| {
            assert_eq!(
                hp.type_.as_deref(),
                Some(""),
                "{n}: a pipe's hostPath type must be \"\""
            );
            (*n, hp.path.clone())
        })
        .collect();
    let got_pipes: BTreeSet<String> = pipe_volumes.values().cloned().collect();
    assert_eq!(got_pipes, want_pipes, "exactly the pipes the driver dials");
    assert_eq!(pipe_volumes.len(), PIPES.len(), "no pipe mounted twice");
    // Everything else: kubelet dir, plugin dir, registration dir — nothing more.
    let dirs: BTreeSet<(String, String)> = volumes
        .values()
        .filter(|hp| !hp.path.starts_with("\\\\.\\pipe\\"))
        .map(|hp| (hp.path.clone(), hp.type_.clone().unwrap_or_default()))
        .collect();
    let want_dirs: BTreeSet<(String, String)> = [
        (exp.kubelet_root.clone(), "Directory".to_owned()),
        (exp.plugin_dir(), "DirectoryOrCreate".to_owned()),
        (exp.registration_dir(), "Directory".to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(dirs, want_dirs);

    for c in &spec.containers {
        let mounts: Vec<(&str, &str)> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| {
                let hp = volumes[m.name.as_str()];
                // Same path inside and outside: kubelet's paths mean the same thing.
                assert_eq!(
                    m.mount_path, hp.path,
                    "{}: {} not mounted at its host path",
                    c.name, m.name
                );
                assert_ne!(
                    m.read_only,
                    Some(true),
                    "{}: {} must be writable",
                    c.name,
                    m.name
                );
                (m.name.as_str(), hp.path.as_str())
            })
            .collect();
        let pipes: BTreeSet<&str> = mounts
            .iter()
            .filter(|(n, _)| pipe_volumes.contains_key(n))
            .map(|(_, p)| *p)
            .collect();
        // The socket is reachable through a mount, without nested mounts.
        let socket_mounts = mounts
            .iter()
            .filter(|(_, p)| is_within(&exp.socket(), p))
            .count();
        assert_eq!(
            socket_mounts, 1,
            "{}: the socket must be reachable through one mount",
            c.name
        );
        match c.name.as_str() {
            "wincsi-node" => {
                assert_eq!(pipes.len(), PIPES.len(), "the driver mounts every pipe");
                assert!(mounts.iter().any(|(_, p)| *p == exp.kubelet_root));
                assert_eq!(
                    mounts.len(),
                    1 + PIPES.len(),
                    "driver: kubelet dir + pipes only"
                );
            }
            "node-driver-registrar" => {
                assert!(pipes.is_empty(), "registrar must not see csi-proxy");
                let reg = mounts.iter().find(|(_, p)| *p == exp.registration_dir());
                assert!(
                    reg.is_some(),
                    "registrar needs the registration dir at its host path"
                );
                assert_eq!(mounts.len(), 2);
            }
            "liveness-probe" => {
                assert!(pipes.is_empty(), "livenessprobe must not see csi-proxy");
                assert_eq!(mounts, [("plugin-dir", exp.plugin_dir().as_str())]);
            }
            other => panic!("unexpected container {other}"),
        }
    }
}

fn check_csi_proxy_daemonset(r: &Rendered, exp: &Expect) {
    let Some(ds) = r.daemonset("csi-proxy") else {
        assert!(
            !exp.csi_proxy_install,
            "csiProxy.install=true but no csi-proxy DaemonSet"
        );
        return;
    };
    assert!(
        exp.csi_proxy_install,
        "csi-proxy DaemonSet rendered although not requested"
    );
    check_windows_pod(ds, &r.raw);
    let spec = pod_spec(ds);
    check_host_process_pod(spec, "csi-proxy");
    assert_eq!(spec.automount_service_account_token, Some(false));
    let c = container(spec, "csi-proxy");
    assert_eq!(
        c.command.as_ref().unwrap()[0],
        "%CONTAINER_SANDBOX_MOUNT_POINT%\\csi-proxy.exe"
    );
    assert_eq!(flag(c, "kubelet-path"), exp.kubelet_root);
    assert_eq!(r.daemonsets.len(), 2);
}

fn check_csidriver(r: &Rendered, exp: &Expect) {
    assert_eq!(r.csidrivers.len(), 1);
    let d = &r.csidrivers[0];
    assert_eq!(d.metadata.name.as_deref(), Some(exp.driver_name.as_str()));
    let ds = r.daemonset("node").unwrap();
    let driver = container(pod_spec(ds), "wincsi-node");
    assert_eq!(
        d.metadata.name.as_deref(),
        Some(flag(driver, "driver-name").as_str())
    );
    assert!(
        flag(
            container(pod_spec(ds), "node-driver-registrar"),
            "kubelet-registration-path"
        )
        .ends_with(&format!("\\plugins\\{}\\csi.sock", exp.driver_name))
    );
    let s = &d.spec;
    assert_eq!(s.attach_required, Some(false));
    assert_eq!(s.pod_info_on_mount, Some(true));
    assert_eq!(s.fs_group_policy.as_deref(), Some("None"));
    assert_eq!(s.requires_republish, Some(false));
    assert_eq!(
        s.volume_lifecycle_modes.as_deref(),
        Some(&["Persistent".to_owned(), "Ephemeral".to_owned()][..])
    );
}

fn check_secret_rule(rules: &[PolicyRule], exp: &Expect) {
    assert_eq!(rules.len(), 1, "one rule");
    let rule = &rules[0];
    assert_eq!(rule.api_groups.as_deref(), Some(&[String::new()][..]));
    assert_eq!(rule.resources.as_deref(), Some(&["secrets".to_owned()][..]));
    assert_eq!(rule.verbs, ["get"], "get only: no list/watch");
    assert!(rule.non_resource_urls.is_none());
    let names = rule.resource_names.clone().unwrap_or_default();
    assert_eq!(names, exp.secret_names);
}

fn check_rbac(r: &Rendered, exp: &Expect) {
    assert_eq!(r.service_accounts.len(), 1);
    let sa = &r.service_accounts[0];
    assert_eq!(
        sa.metadata.name.as_deref(),
        Some(exp.service_account.as_str())
    );
    assert_eq!(sa.metadata.namespace.as_deref(), Some(NAMESPACE));
    assert_eq!(sa.automount_service_account_token, Some(false));
    if !exp.secrets {
        assert!(
            r.roles.is_empty()
                && r.role_bindings.is_empty()
                && r.cluster_roles.is_empty()
                && r.cluster_role_bindings.is_empty(),
            "no RBAC by default"
        );
        return;
    }
    let subject_ok = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        let s = subjects.as_deref().unwrap_or_default();
        s.len() == 1
            && s[0].kind == "ServiceAccount"
            && s[0].name == exp.service_account
            && s[0].namespace.as_deref() == Some(NAMESPACE)
    };
    if exp.secret_namespaces.is_empty() {
        assert!(r.roles.is_empty() && r.role_bindings.is_empty());
        assert_eq!(r.cluster_roles.len(), 1);
        assert_eq!(r.cluster_role_bindings.len(), 1);
        check_secret_rule(r.cluster_roles[0].rules.as_deref().unwrap_or_default(), exp);
        let b = &r.cluster_role_bindings[0];
        assert_eq!(b.role_ref.kind, "ClusterRole");
        assert_eq!(
            Some(&b.role_ref.name),
            r.cluster_roles[0].metadata.name.as_ref()
        );
        assert!(subject_ok(&b.subjects));
    } else {
        assert!(
            r.cluster_roles.is_empty() && r.cluster_role_bindings.is_empty(),
            "namespaced only"
        );
        let ns_of = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.namespace.clone().expect("namespace")
        };
        let role_ns: Vec<String> = r.roles.iter().map(|x| ns_of(&x.metadata)).collect();
        let binding_ns: Vec<String> = r.role_bindings.iter().map(|x| ns_of(&x.metadata)).collect();
        assert_eq!(role_ns, exp.secret_namespaces);
        assert_eq!(binding_ns, exp.secret_namespaces);
        for (role, binding) in r.roles.iter().zip(&r.role_bindings) {
            check_secret_rule(role.rules.as_deref().unwrap_or_default(), exp);
            assert_eq!(binding.role_ref.kind, "Role");
            assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
            assert!(subject_ok(&binding.subjects));
        }
    }
}

fn check_admission_objects(r: &Rendered, exp: &Expect) {
    if !exp.admission {
        assert!(
            r.policies.is_empty() && r.bindings.is_empty(),
            "admission policy disabled"
        );
        return;
    }
    assert_eq!(r.policies.len(), 4, "pods, workloads, jobs, cronjobs");
    assert_eq!(r.bindings.len(), r.policies.len());
    let mut resources = BTreeSet::new();
    for p in &r.policies {
        let spec = p.spec.as_ref().expect("policy spec");
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        for rule in spec
            .match_constraints
            .as_ref()
            .and_then(|m| m.resource_rules.as_ref())
            .expect("resource rules")
        {
            let ops = rule.operations.clone().unwrap_or_default();
            assert_eq!(ops, ["CREATE", "UPDATE"]);
            for res in rule.resources.iter().flatten() {
                resources.insert(res.clone());
            }
        }
        let name = p.metadata.name.clone().unwrap();
        let binding = r
            .bindings
            .iter()
            .find(|b| b.spec.as_ref().and_then(|s| s.policy_name.as_ref()) == Some(&name))
            .unwrap_or_else(|| panic!("no binding for {name}"));
        let actions = binding
            .spec
            .as_ref()
            .unwrap()
            .validation_actions
            .clone()
            .unwrap_or_default();
        assert_eq!(actions, exp.validation_actions);
        let exempt = spec
            .variables
            .iter()
            .flatten()
            .find(|v| v.name == "isWincsiDriver")
            .expect("isWincsiDriver variable");
        if exempt.expression != "false" {
            assert!(exempt.expression.contains(&format!("'{NAMESPACE}'")));
            assert!(
                exempt
                    .expression
                    .contains(&format!("'{}'", exp.service_account))
            );
        }
    }
    let want: BTreeSet<String> = [
        "pods",
        "deployments",
        "statefulsets",
        "daemonsets",
        "replicasets",
        "jobs",
        "cronjobs",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(resources, want);
}

fn check_scenario(helm_name: &str, helm: &Path, file: &Path, defaults: &Json) {
    let mut values = defaults.clone();
    merge(&mut values, &read_yaml(file));
    let exp = Expect::from_values(&values);
    let objects = helm_template(helm, &["-f", file.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("{helm_name} template -f {}: {e}", file.display()));
    let r = Rendered::load(objects);
    check_labels(&r);
    check_node_daemonset(&r, &exp);
    check_csi_proxy_daemonset(&r, &exp);
    check_csidriver(&r, &exp);
    check_rbac(&r, &exp);
    check_admission_objects(&r, &exp);
}

#[test]
fn every_scenario_renders_with_its_invariants() {
    let defaults = read_yaml(&chart_dir().join("values.yaml"));
    let mut modes = BTreeSet::new();
    for (name, helm) in helms() {
        for file in scenario_files() {
            let mut values = defaults.clone();
            merge(&mut values, &read_yaml(&file));
            modes.insert(values["mode"].as_str().unwrap().to_owned());
            check_scenario(name, &helm, &file, &defaults);
        }
    }
    assert_eq!(modes.len(), 2, "the scenarios cover both modes: {modes:?}");
}

#[test]
fn defaults_are_csi_proxy_mode_without_rbac_with_admission_policy() {
    let defaults = read_yaml(&chart_dir().join("values.yaml"));
    let exp = Expect::from_values(&defaults);
    assert!(!exp.host_process);
    assert_eq!(exp.driver_name, "wincsi.csi.io");
    assert_eq!(exp.kubelet_root, "C:\\var\\lib\\kubelet");
    assert!(!exp.secrets && exp.admission && !exp.csi_proxy_install);
    for (name, helm) in helms() {
        let r = Rendered::load(helm_template(&helm, &[]).unwrap_or_else(|e| panic!("{name}: {e}")));
        let driver = container(pod_spec(r.daemonset("node").unwrap()), "wincsi-node");
        assert_eq!(
            flag(driver, "endpoint"),
            "unix://C:\\var\\lib\\kubelet\\plugins\\wincsi.csi.io\\csi.sock"
        );
        assert!(r.roles.is_empty() && r.cluster_roles.is_empty());
        assert_eq!(r.policies.len(), 4);
    }
}

#[test]
fn admission_policy_is_skipped_before_kubernetes_1_30() {
    for (name, helm) in helms() {
        let r = Rendered::load(
            helm_template(&helm, &["--kube-version", "1.29.0"])
                .unwrap_or_else(|e| panic!("{name}: {e}")),
        );
        assert!(r.policies.is_empty() && r.bindings.is_empty(), "{name}");
        let r = Rendered::load(helm_template(&helm, &["--kube-version", "1.30.0"]).unwrap());
        assert_eq!(r.policies.len(), 4, "{name}");
    }
}

#[test]
fn schema_rejects_typos_and_wrong_types() {
    for (name, helm) in helms() {
        for args in [
            ["--set", "driver.nmae=x"],
            ["--set", "modee=hostProcess"],
            ["--set", "mode=privileged"],
            ["--set", "driver.maxVolumesPerNode=lots"],
            ["--set-string", "csiProxy.install=yes"],
            ["--set", "rbac.secrets.enabled=1"],
            ["--set", "livenessProbe.healthPort=70000"],
            ["--set-string", "kubeletRoot=/var/lib/kubelet"],
        ] {
            let err = helm_template(&helm, &args)
                .err()
                .unwrap_or_else(|| panic!("{name} accepted {args:?}"));
            assert!(
                err.contains("schema"),
                "{name} {args:?} failed, but not by the schema: {err}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// The admission policy, evaluated
// ---------------------------------------------------------------------------------------

/// One rendered ValidatingAdmissionPolicy, compiled.
struct Policy {
    resources: Vec<String>,
    variables: Vec<(String, cel::Program)>,
    validations: Vec<cel::Program>,
}

impl Policy {
    fn compile(p: &ValidatingAdmissionPolicy) -> Self {
        let spec = p.spec.as_ref().unwrap();
        let compile = |src: &str| {
            cel::Program::compile(src)
                .unwrap_or_else(|e| panic!("CEL does not compile: {src}: {e:?}"))
        };
        Policy {
            resources: spec
                .match_constraints
                .as_ref()
                .and_then(|m| m.resource_rules.as_ref())
                .unwrap()
                .iter()
                .flat_map(|r| r.resources.clone().unwrap_or_default())
                .collect(),
            variables: spec
                .variables
                .iter()
                .flatten()
                .map(|v| (v.name.clone(), compile(&v.expression)))
                .collect(),
            validations: spec
                .validations
                .iter()
                .flatten()
                .map(|v| compile(&v.expression))
                .collect(),
        }
    }

    /// true = admitted. A CEL error fails the test (failurePolicy Fail would deny, but a
    /// policy that errors on well-formed objects is a bug).
    fn admits(&self, object: &Json, namespace: &str) -> bool {
        let kind = object["kind"].as_str().unwrap();
        let request = json!({
            "namespace": namespace,
            "operation": "CREATE",
            "kind": {"group": "", "version": "v1", "kind": kind},
        });
        let mut ctx = cel::Context::default();
        ctx.add_variable_from_value("object", cel::to_value(object).unwrap());
        ctx.add_variable_from_value("request", cel::to_value(&request).unwrap());
        let mut vars: HashMap<String, cel::Value> = HashMap::new();
        for (name, program) in &self.variables {
            ctx.add_variable_from_value("variables", cel::Value::from(vars.clone()));
            let value = program
                .execute(&ctx)
                .unwrap_or_else(|e| panic!("variable {name} fails on {object}: {e:?}"));
            vars.insert(name.clone(), value);
        }
        ctx.add_variable_from_value("variables", cel::Value::from(vars));
        self.validations.iter().all(|v| match v.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => b,
            other => panic!("validation on {object} gave {other:?}"),
        })
    }
}

fn pod_spec_json(sa: Option<&str>, host_paths: &[&str]) -> Json {
    let volumes: Vec<Json> = host_paths
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"name": format!("v{i}"), "hostPath": {"path": p, "type": ""}}))
        .collect();
    let mut spec = json!({
        "nodeSelector": {"kubernetes.io/os": "windows"},
        "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}],
        "volumes": volumes,
    });
    if let Some(sa) = sa {
        spec["serviceAccountName"] = json!(sa);
    }
    if host_paths.is_empty() {
        spec.as_object_mut().unwrap().remove("volumes");
    }
    spec
}

fn wrap(kind: &str, name: &str, namespace: &str, spec: Json) -> Json {
    let meta = json!({"name": name, "namespace": namespace});
    let template = json!({"metadata": {"labels": {"app": name}}, "spec": spec});
    match kind {
        "Pod" => {
            json!({"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": template["spec"]})
        }
        "CronJob" => json!({"apiVersion": "batch/v1", "kind": kind, "metadata": meta,
            "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": template}}}}),
        "Job" => {
            json!({"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": {"template": template}})
        }
        _ => json!({"apiVersion": "apps/v1", "kind": kind, "metadata": meta,
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": template}}),
    }
}

fn resource_of(kind: &str) -> String {
    format!("{}s", kind.to_lowercase())
}

/// Runs `obj` through the one policy that matches its resource.
fn admitted_by(policies: &[Policy], obj: &Json, ns: &str) -> bool {
    let resource = resource_of(obj["kind"].as_str().unwrap());
    let matching: Vec<&Policy> = policies
        .iter()
        .filter(|p| p.resources.contains(&resource))
        .collect();
    assert_eq!(matching.len(), 1, "exactly one policy matches {resource}");
    matching[0].admits(obj, ns)
}

#[test]
fn admission_policy_trusts_listed_service_accounts_for_pods_and_daemonsets_only() {
    let (_, helm) = helms().pop().unwrap();
    let r = Rendered::load(
        helm_template(
            &helm,
            &[
                "--set",
                "admissionPolicy.trustedServiceAccounts[0].namespace=kube-system",
                "--set",
                "admissionPolicy.trustedServiceAccounts[0].name=csi-smb-node-sa",
                "--set",
                "admissionPolicy.trustedServiceAccounts[1].namespace=kube-system",
                "--set",
                "admissionPolicy.trustedServiceAccounts[1].name=csi-azuredisk-node-sa",
            ],
        )
        .unwrap(),
    );
    let policies: Vec<Policy> = r.policies.iter().map(Policy::compile).collect();
    let pipe = "\\\\.\\pipe\\csi-proxy-smb-v1";
    for sa in ["csi-smb-node-sa", "csi-azuredisk-node-sa"] {
        for kind in ["Pod", "DaemonSet"] {
            let obj = wrap(
                kind,
                "csi-smb-node-win",
                "kube-system",
                pod_spec_json(Some(sa), &[pipe]),
            );
            assert!(
                admitted_by(&policies, &obj, "kube-system"),
                "{kind} as {sa}"
            );
            let obj = wrap(
                kind,
                "csi-smb-node-win",
                "default",
                pod_spec_json(Some(sa), &[pipe]),
            );
            assert!(
                !admitted_by(&policies, &obj, "default"),
                "{kind} as {sa} elsewhere"
            );
        }
        for kind in ["Deployment", "StatefulSet", "ReplicaSet", "Job", "CronJob"] {
            let obj = wrap(kind, "x", "kube-system", pod_spec_json(Some(sa), &[pipe]));
            assert!(
                !admitted_by(&policies, &obj, "kube-system"),
                "{kind} as {sa}"
            );
        }
    }
    let obj = wrap(
        "Pod",
        "x",
        "kube-system",
        pod_spec_json(Some("default"), &[pipe]),
    );
    assert!(
        !admitted_by(&policies, &obj, "kube-system"),
        "unlisted ServiceAccount"
    );
    // The release's own driver still passes.
    let ds = r.raw.iter().find(|o| o["kind"] == "DaemonSet").unwrap();
    assert!(admitted_by(&policies, ds, NAMESPACE));
}

#[test]
fn admission_policy_denies_csi_proxy_pipes_to_everyone_but_the_driver() {
    let (_, helm) = helms().pop().unwrap();
    let r = Rendered::load(helm_template(&helm, &[]).unwrap());
    let policies: Vec<Policy> = r.policies.iter().map(Policy::compile).collect();
    let admits = |obj: &Json, ns: &str| admitted_by(&policies, obj, ns);
    let sa = "wincsi-node";
    let pipe = "\\\\.\\pipe\\csi-proxy-disk-v1";
    let ds_name = "wincsi-node";
    let kinds = [
        "Pod",
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "ReplicaSet",
        "Job",
        "CronJob",
    ];

    // Denied everywhere: sneaky spellings of the csi-proxy pipes and the pipe namespace.
    let denied_paths = [
        pipe,
        "\\\\.\\pipe\\csi-proxy-smb-v1",
        "\\\\.\\pipe\\csi-proxy-iscsi-v1alpha2",
        "//./pipe/csi-proxy-disk-v1",
        "\\\\.\\PIPE\\CSI-PROXY-disk-v1",
        "\\\\?\\pipe\\csi-proxy-volume-v1",
        "\\\\localhost\\pipe\\csi-proxy-filesystem-v1",
        "\\\\.\\pipe\\\\csi-proxy-system-v1alpha1",
        "\\\\.\\pipe\\csi-proxy-disk-v1beta2",
        "\\\\.\\pipe\\",
        "\\\\.\\pipe",
        "\\\\.\\pipe\\.",
        "\\\\.\\pipe\\x\\..\\csi-proxy-disk-v1",
        "\\\\.\\GLOBALROOT\\Device\\NamedPipe\\csi-proxy-disk-v1",
    ];
    for kind in kinds {
        for path in denied_paths {
            let obj = wrap(
                kind,
                "intruder",
                "default",
                pod_spec_json(Some("default"), &["C:\\logs", path]),
            );
            assert!(
                !admits(&obj, "default"),
                "{kind} mounting {path} must be denied"
            );
        }
        // Even in the release namespace with the driver's ServiceAccount, only the
        // release's DaemonSet (and its pods) pass.
        let obj = wrap(
            kind,
            "imposter",
            NAMESPACE,
            pod_spec_json(Some(sa), &[pipe]),
        );
        assert_eq!(
            admits(&obj, NAMESPACE),
            kind == "Pod",
            "{kind} named imposter in {NAMESPACE}"
        );
        let obj = wrap(kind, ds_name, NAMESPACE, pod_spec_json(Some(sa), &[pipe]));
        let driver = kind == "Pod" || kind == "DaemonSet";
        assert_eq!(
            admits(&obj, NAMESPACE),
            driver,
            "{kind} {ds_name} with the driver's SA"
        );
        // Wrong ServiceAccount or namespace: denied.
        let obj = wrap(kind, ds_name, NAMESPACE, pod_spec_json(None, &[pipe]));
        assert!(
            !admits(&obj, NAMESPACE),
            "{kind} with the default ServiceAccount"
        );
        let obj = wrap(kind, ds_name, "default", pod_spec_json(Some(sa), &[pipe]));
        assert!(!admits(&obj, "default"), "{kind} in another namespace");
        // Everything else is untouched.
        for path in [
            "\\\\.\\pipe\\docker_engine",
            "\\\\.\\pipe\\containerd-containerd",
            "C:\\var\\log",
            "C:\\ProgramData\\csi-proxy-logs",
        ] {
            let obj = wrap(kind, "app", "default", pod_spec_json(None, &[path]));
            assert!(
                admits(&obj, "default"),
                "{kind} mounting {path} must be admitted"
            );
        }
        let obj = wrap(kind, "app", "default", pod_spec_json(None, &[]));
        assert!(admits(&obj, "default"), "{kind} without volumes");
    }

    // The chart's own DaemonSet and its pods are admitted.
    let ds = r.raw.iter().find(|o| o["kind"] == "DaemonSet").unwrap();
    assert!(admits(ds, NAMESPACE), "the rendered node DaemonSet");
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "wincsi-node-abcde", "namespace": NAMESPACE},
        "spec": ds["spec"]["template"]["spec"]});
    assert!(admits(&pod, NAMESPACE), "the node DaemonSet's pods");
    assert!(!admits(&pod, "default"), "the same pod spec elsewhere");
}

#[test]
fn examples_use_the_default_driver_name_and_windows_nodes() {
    let dir = repo_root().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut kinds = BTreeSet::new();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(f).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let o = Json::deserialize(doc).unwrap();
            if o.is_null() {
                continue;
            }
            let kind = o["kind"].as_str().unwrap().to_owned();
            if let Some(csi) = o.pointer("/spec/csi") {
                assert_eq!(csi["driver"], "wincsi.csi.io", "{}", f.display());
            }
            if kind == "Pod" {
                let pod: k8s_openapi::api::core::v1::Pod = typed(&o);
                let spec = pod.spec.unwrap();
                assert_eq!(
                    spec.node_selector
                        .unwrap()
                        .get("kubernetes.io/os")
                        .map(String::as_str),
                    Some("windows"),
                    "{}",
                    f.display()
                );
                for v in spec.volumes.iter().flatten() {
                    if let Some(csi) = &v.csi {
                        assert_eq!(csi.driver, "wincsi.csi.io");
                    }
                }
            }
            kinds.insert(kind);
        }
    }
    for k in ["Secret", "PersistentVolume", "PersistentVolumeClaim", "Pod"] {
        assert!(kinds.contains(k), "examples lack a {k}");
    }
}

/// Dotted paths of the leaves of `values.yaml` (an empty map or list counts as a leaf).
fn leaf_paths(v: &Json, prefix: &str, out: &mut Vec<String>) {
    match v {
        Json::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_paths(child, &path, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

#[test]
fn readme_values_table_covers_every_value() {
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).unwrap();
    let table = readme
        .split_once("\n## Values\n")
        .map(|(_, rest)| rest.split_once("\n## ").map_or(rest, |(t, _)| t))
        .expect("README has a ## Values section");
    let documented: BTreeSet<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |").map(|(k, _)| k))
        .collect();
    let mut leaves = Vec::new();
    leaf_paths(
        &read_yaml(&chart_dir().join("values.yaml")),
        "",
        &mut leaves,
    );
    assert!(leaves.len() > 40, "{leaves:?}");
    for leaf in &leaves {
        // A row may document a whole sub-tree (e.g. `driver.resources`).
        let mut path = leaf.as_str();
        let covered = loop {
            if documented.contains(path) {
                break true;
            }
            match path.rsplit_once('.') {
                Some((parent, _)) => path = parent,
                None => break false,
            }
        };
        assert!(
            covered,
            "charts/wincsi/README.md values table lacks `{leaf}`"
        );
    }
    // And the table lists nothing that does not exist.
    let schema: Json = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap(),
    )
    .unwrap();
    for key in &documented {
        let mut node = &schema;
        for part in key.split('.') {
            node = node
                .pointer(&format!("/properties/{part}"))
                .unwrap_or_else(|| {
                    panic!("README documents `{key}`, which the schema does not know")
                });
        }
    }
}

#[test]
fn an_existing_service_account_can_be_used() {
    for (name, helm) in helms() {
        let err = helm_template(&helm, &["--set", "serviceAccount.create=false"])
            .err()
            .unwrap_or_else(|| panic!("{name}: create=false without a name must fail"));
        assert!(
            err.contains("serviceAccount.name is required"),
            "{name}: {err}"
        );
        let r = Rendered::load(
            helm_template(
                &helm,
                &[
                    "--set",
                    "serviceAccount.create=false",
                    "--set",
                    "serviceAccount.name=storage-admins",
                ],
            )
            .unwrap(),
        );
        assert!(r.service_accounts.is_empty(), "{name}");
        let spec = pod_spec(r.daemonset("node").unwrap());
        assert_eq!(spec.service_account_name.as_deref(), Some("storage-admins"));
        let exempt = r.policies[0]
            .spec
            .as_ref()
            .unwrap()
            .variables
            .as_ref()
            .unwrap();
        assert!(
            exempt
                .iter()
                .any(|v| v.expression.contains("'storage-admins'"))
        );
    }
}

// ---------------------------------------------------------------------------------------
// The chart and the examples against the driver's own parsers
// ---------------------------------------------------------------------------------------

#[test]
fn rendered_driver_args_parse_with_the_driver_cli() {
    use wincsi::config::{Config, Endpoint};
    let defaults = read_yaml(&chart_dir().join("values.yaml"));
    let (_, helm) = helms().pop().unwrap();
    for file in scenario_files() {
        let mut values = defaults.clone();
        merge(&mut values, &read_yaml(&file));
        let exp = Expect::from_values(&values);
        let r = Rendered::load(helm_template(&helm, &["-f", file.to_str().unwrap()]).unwrap());
        let spec = pod_spec(r.daemonset("node").unwrap());
        let driver = container(spec, "wincsi-node");
        // kubelet expands $(KUBE_NODE_NAME) from the downward-API env var.
        let argv = std::iter::once("wincsi-node".to_owned()).chain(
            driver
                .args
                .iter()
                .flatten()
                .map(|a| a.replace("$(KUBE_NODE_NAME)", "win-node-1")),
        );
        let config = Config::try_parse_args(argv).unwrap_or_else(|e| {
            panic!(
                "{}: the driver rejects the chart's arguments: {e}",
                file.display()
            )
        });
        match &config.endpoint {
            Endpoint::Unix(path) => assert_eq!(path.to_str(), Some(exp.socket().as_str())),
            other => panic!("{}: endpoint {other}", file.display()),
        }
        assert_eq!(config.node_id, "win-node-1");
        assert_eq!(config.driver_name, exp.driver_name);
        assert_eq!(
            config.kubelet_root.to_str(),
            Some(exp.kubelet_root.as_str())
        );
        assert_eq!(config.max_volumes_per_node, exp.max_volumes);
        assert!(
            config.csi_proxy_socket_dir.is_none(),
            "pipes, not Unix sockets"
        );
        // The driver's state lives in the plugin directory, which the driver reaches in
        // both modes (through the kubelet-dir mount in csiProxy mode).
        let state = config.state_dir();
        assert!(
            is_within(state.to_str().unwrap(), &exp.plugin_dir()),
            "{}: state dir {} outside {}",
            file.display(),
            state.display(),
            exp.plugin_dir()
        );
        let topology: Vec<(String, String)> = config
            .topology
            .iter()
            .map(|t| (t.key.clone(), t.value.clone()))
            .collect();
        let want: Vec<(String, String)> = values["driver"]["topology"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(topology, want);
    }
}

/// Secrets (stringData) of an example file, by name.
fn example_secrets(docs: &[Json]) -> BTreeMap<String, Vec<(String, String)>> {
    docs.iter()
        .filter(|o| o["kind"] == "Secret")
        .map(|o| {
            let data = o["stringData"]
                .as_object()
                .expect("example Secrets use stringData")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            (o["metadata"]["name"].as_str().unwrap().to_owned(), data)
        })
        .collect()
}

fn parse_with_driver(context: &BTreeMap<String, String>, secrets: &[(String, String)]) -> String {
    let secrets = wincsi::smb::Secrets::new(secrets.iter().cloned());
    if wincsi::iscsi::is_iscsi(context) {
        wincsi::iscsi::parse_volume(context, &secrets)
            .map(|v| format!("iscsi {} portals", v.portals.len()))
            .unwrap_or_else(|e| panic!("the driver rejects {context:?}: {e}"))
    } else {
        wincsi::smb::parse_volume(context, &secrets)
            .map(|v| format!("smb {}", v.full_path()))
            .unwrap_or_else(|e| panic!("the driver rejects {context:?}: {e}"))
    }
}

#[test]
fn examples_are_accepted_by_the_driver() {
    let dir = repo_root().join("examples");
    let mut parsed = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let docs: Vec<Json> = serde_norway::Deserializer::from_str(&text)
            .map(|d| Json::deserialize(d).unwrap())
            .filter(|d| !d.is_null())
            .collect();
        let secrets = example_secrets(&docs);
        let attrs = |v: &Json| -> BTreeMap<String, String> {
            v.as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                        .collect()
                })
                .unwrap_or_default()
        };
        for o in &docs {
            if let Some(csi) = o.pointer("/spec/csi") {
                // A PersistentVolume: kubelet passes volumeAttributes plus PV/PVC info, and
                // the nodeStageSecretRef's data as the stage secrets.
                let mut ctx = attrs(&csi["volumeAttributes"]);
                ctx.insert(
                    "csi.storage.k8s.io/pv/name".into(),
                    o["metadata"]["name"].as_str().unwrap().into(),
                );
                let secret = csi["nodeStageSecretRef"]["name"]
                    .as_str()
                    .map(|n| {
                        secrets
                            .get(n)
                            .unwrap_or_else(|| panic!("{}: no Secret {n}", f.display()))
                            .clone()
                    })
                    .unwrap_or_default();
                if let Some(fs) = csi["fsType"].as_str() {
                    wincsi::iscsi::check_fs_type(fs).unwrap();
                }
                parsed.push(parse_with_driver(&ctx, &secret));
            }
            if o["kind"] == "Pod" {
                for v in o["spec"]["volumes"].as_array().into_iter().flatten() {
                    if v["csi"].is_object() {
                        // An inline ephemeral volume, as kubelet (podInfoOnMount) hands it over.
                        let mut ctx = attrs(&v["csi"]["volumeAttributes"]);
                        ctx.insert("csi.storage.k8s.io/ephemeral".into(), "true".into());
                        ctx.insert(
                            "csi.storage.k8s.io/pod.namespace".into(),
                            o["metadata"]["namespace"].as_str().unwrap().into(),
                        );
                        let name = ctx["secretName"].clone();
                        let secret = secrets
                            .get(&name)
                            .expect("the inline volume's Secret")
                            .clone();
                        parsed.push(parse_with_driver(&ctx, &secret));
                    }
                }
            }
        }
    }
    let kinds: BTreeSet<&str> = parsed
        .iter()
        .map(|p| p.split(' ').next().unwrap())
        .collect();
    assert_eq!(kinds, BTreeSet::from(["iscsi", "smb"]), "{parsed:?}");
    assert!(parsed.contains(&"iscsi 2 portals".to_owned()), "{parsed:?}");
    assert_eq!(parsed.len(), 4, "{parsed:?}");
}
