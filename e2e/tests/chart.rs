//! Invariants of the Helm chart in `charts/wincsi`.
//!
//! Every scenario in `charts/wincsi/ci/*-values.yaml` is rendered with Helm 3 and Helm 4
//! (`$WINCSI_HELM3` / `$WINCSI_HELM4`, else `helm3` / `helm4` on `PATH`; a missing Helm
//! fails the test and says to run `.ci/install.sh`). The objects are loaded into
//! `k8s-openapi` types and checked against what the scenario's values promise: Windows
//! nodes only (`os.name` and the node selector), exactly the csi-proxy pipes the driver
//! dials, one socket shared by the driver and both sidecars (at its host path, or at
//! `C:\csi` when the kubelet root is not on C:), one driver name everywhere, the sidecars'
//! HTTP health endpoints, HostProcess pods without volumes but with liveness probes, no
//! Linux-only fields, the CSIDriver spec (or none when another owner has it), the
//! critical-pods ResourceQuota, RBAC absent by default and `get`-only when enabled. The pipe
//! admission policy is evaluated in `chart_admission.rs`.

// Shared with the other chart test crate, which uses a different subset of it.
#[allow(dead_code)]
mod chart_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chart_support::{
    NAMESPACE, RELEASE, Rendered, Request, chart_dir, helm_run, helm_template, helm_template_as,
    helms, merge, read_yaml, repo_root, typed,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_json::Value as Json;

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
const DRIVER_FLAGS: [&str; 18] = [
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
    "health-address",
    "metrics-address",
    "vol-stats-cache-expire-in-minutes",
    "smb-require-privacy",
    "unreferenced-volume-minutes",
    "release-unreferenced-volumes",
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
    csi_driver: bool,
    priority_class: String,
    quota: bool,
    trusted_namespaces: Vec<String>,
    registrar_port: i64,
    probe_port: i64,
    health: Option<i64>,
    metrics: Option<i64>,
    metrics_annotations: bool,
    image_registry: String,
    /// `driver.health.bindAddress` / `metrics.bindAddress`.
    health_bind: String,
    metrics_bind: String,
    /// Names of `node.extraVolumes` (mounted by the driver through `driver.extraVolumeMounts`).
    extra_volumes: BTreeSet<String>,
    extra_mounts: usize,
    vol_stats_cache_minutes: i64,
    smb_require_privacy: bool,
    unreferenced_minutes: i64,
    release_unreferenced: bool,
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
            csi_driver: b("/csiDriver/create"),
            priority_class: s("/node/priorityClassName"),
            quota: b("/node/criticalPodsQuota/create"),
            trusted_namespaces: strings(&values["admissionPolicy"]["trustedNamespaces"]),
            registrar_port: values["nodeDriverRegistrar"]["healthPort"]
                .as_i64()
                .expect("int"),
            probe_port: values["livenessProbe"]["healthPort"].as_i64().expect("int"),
            health: b("/driver/health/enabled")
                .then(|| values["driver"]["health"]["port"].as_i64().expect("int")),
            metrics: b("/metrics/enabled")
                .then(|| values["metrics"]["port"].as_i64().expect("int")),
            metrics_annotations: b("/metrics/podAnnotations"),
            image_registry: s("/imageRegistry"),
            health_bind: s("/driver/health/bindAddress"),
            metrics_bind: s("/metrics/bindAddress"),
            extra_volumes: values["node"]["extraVolumes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|v| v["name"].as_str().expect("name").to_owned())
                        .collect()
                })
                .unwrap_or_default(),
            extra_mounts: values["driver"]["extraVolumeMounts"]
                .as_array()
                .map_or(0, Vec::len),
            vol_stats_cache_minutes: values["driver"]["volStatsCacheExpireInMinutes"]
                .as_i64()
                .expect("int"),
            smb_require_privacy: b("/driver/smbRequirePrivacy"),
            unreferenced_minutes: values["driver"]["unreferencedVolumeMinutes"]
                .as_i64()
                .expect("int"),
            release_unreferenced: b("/driver/releaseUnreferencedVolumes"),
        }
    }

    /// A listener's flag value for `port` on bind address `addr` (the chart's `wincsi.listen`).
    fn listen(addr: &str, port: i64) -> String {
        match addr {
            "" => format!(":{port}"),
            "podIP" => format!("$(POD_IP):{port}"),
            ip => format!("{ip}:{port}"),
        }
    }

    /// csiProxy mode with the kubelet root on another drive than C: (the containers see
    /// the plugin and registration directories at C:\csi and C:\registration).
    fn remapped(&self) -> bool {
        !self.host_process && !self.kubelet_root.to_ascii_uppercase().starts_with("C:")
    }

    /// The plugin directory as the containers see it.
    fn container_plugin_dir(&self) -> String {
        if self.remapped() {
            "C:\\csi".to_owned()
        } else {
            self.plugin_dir()
        }
    }

    fn container_registration_dir(&self) -> String {
        if self.remapped() {
            "C:\\registration".to_owned()
        } else {
            self.registration_dir()
        }
    }

    fn plugin_dir(&self) -> String {
        format!("{}\\plugins\\{}", self.kubelet_root, self.driver_name)
    }

    fn socket(&self) -> String {
        format!("{}\\csi.sock", self.plugin_dir())
    }

    /// The socket as the containers dial it (`--endpoint`, `--csi-address`).
    fn endpoint(&self) -> String {
        format!("unix://{}\\csi.sock", self.container_plugin_dir())
    }

    fn registration_dir(&self) -> String {
        format!("{}\\plugins_registry", self.kubelet_root)
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

/// The number of the container's port called `name`.
fn named_port(c: &Container, name: &str) -> i32 {
    c.ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("{}: no port {name}", c.name))
        .container_port
}

/// A Go `time.Duration` flag value as the chart writes it (`500ms`, `5s`, `1m`).
fn go_duration(text: &str) -> std::time::Duration {
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).expect("a unit"));
    let n: u64 = digits.parse().expect("a number");
    match unit {
        "ms" => std::time::Duration::from_millis(n),
        "s" => std::time::Duration::from_secs(n),
        "m" => std::time::Duration::from_secs(60 * n),
        other => panic!("unexpected unit {other:?} in {text:?}"),
    }
}

/// A probe's `timeoutSeconds` (kubelet's default when unset: 1 s).
fn seconds(timeout: Option<i32>) -> std::time::Duration {
    std::time::Duration::from_secs(u64::try_from(timeout.unwrap_or(1)).expect("positive"))
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

fn check_windows_pod(ds: &DaemonSet, raw: &[Json], exp: &Expect) {
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
    // os.name: the API server then refuses Linux-only fields, and Pod Security Admission
    // judges the pod as a Windows pod.
    assert_eq!(
        spec.os.as_ref().map(|o| o.name.as_str()),
        Some("windows"),
        "{name}: spec.os.name"
    );
    assert_eq!(
        spec.priority_class_name.as_deref().unwrap_or(""),
        exp.priority_class,
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
        if !exp.image_registry.is_empty() {
            assert!(
                image.starts_with(&format!("{}/", exp.image_registry)),
                "{name}/{}: image {image} is not from imageRegistry {}",
                c.name,
                exp.image_registry
            );
        }
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

fn check_host_process_pod(spec: &PodSpec, name: &str, extra_volumes: &BTreeSet<String>) {
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
    // No volumes but the operator's own (node.extraVolumes): a HostProcess pod sees the host.
    let volumes: BTreeSet<String> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.clone())
        .collect();
    assert!(
        volumes.is_subset(extra_volumes),
        "{name}: HostProcess pod with volumes {volumes:?}"
    );
    for v in spec.volumes.iter().flatten() {
        assert!(
            v.host_path.is_none(),
            "{name}: HostProcess pod with a hostPath volume"
        );
    }
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        assert!(
            c.volume_mounts
                .iter()
                .flatten()
                .all(|m| extra_volumes.contains(&m.name)),
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
    check_windows_pod(ds, &r.raw, exp);
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
    assert_eq!(
        flag(driver, "vol-stats-cache-expire-in-minutes"),
        exp.vol_stats_cache_minutes.to_string()
    );
    // Volumes kubelet will never unstage (issue 37 item 13): always passed, so the chart's values decide.
    assert_eq!(
        flag(driver, "unreferenced-volume-minutes"),
        exp.unreferenced_minutes.to_string()
    );
    assert_eq!(
        flag(driver, "release-unreferenced-volumes"),
        exp.release_unreferenced.to_string()
    );
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
    // SMB encryption: the native backend's flag in hostProcess mode; csi-proxy's own flag decides otherwise.
    if exp.host_process {
        assert_eq!(
            flag(driver, "smb-require-privacy"),
            exp.smb_require_privacy.to_string()
        );
    } else {
        assert!(
            !df.contains_key("smb-require-privacy"),
            "csi-proxy's -require-privacy decides in csiProxy mode"
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

    // --state-dir only where the default (under --kubelet-root) is not visible inside.
    if exp.remapped() {
        assert_eq!(flag(driver, "state-dir"), "C:\\csi\\state");
    } else {
        assert!(!df.contains_key("state-dir"), "the default state dir");
    }

    // The operator's extra volumes are mounted where driver.extraVolumeMounts says, nowhere else.
    let extra_mounts: Vec<&str> = spec
        .containers
        .iter()
        .flat_map(|c| c.volume_mounts.iter().flatten().map(move |m| (c, m)))
        .filter(|(_, m)| exp.extra_volumes.contains(&m.name))
        .map(|(c, _)| c.name.as_str())
        .collect();
    assert_eq!(extra_mounts.len(), exp.extra_mounts, "{extra_mounts:?}");
    assert!(
        extra_mounts.iter().all(|c| *c == "wincsi-node"),
        "{extra_mounts:?}"
    );

    // Liveness: the CSI Probe, served by the livenessprobe sidecar's --http-endpoint.
    let probe = driver
        .liveness_probe
        .as_ref()
        .expect("driver liveness probe");
    let http = probe.http_get.as_ref().expect("httpGet liveness probe");
    assert_eq!(http.path.as_deref(), Some("/healthz"));
    assert_eq!(http.port, IntOrString::String("healthz".into()));
    let port = named_port(driver, "healthz");
    assert_eq!(i64::from(port), exp.probe_port);
    let lp = container(spec, "liveness-probe");
    assert_eq!(
        flag(lp, "csi-address"),
        exp.endpoint(),
        "livenessprobe dials the driver's socket"
    );
    assert_eq!(
        flag(lp, "http-endpoint"),
        Expect::listen(&exp.health_bind, i64::from(port))
    );
    assert!(
        !flags(lp).contains_key("health-port"),
        "--health-port is deprecated"
    );
    let image = |c: &Container| {
        let i = c.image.as_deref().unwrap();
        i.strip_prefix(&format!("{}/", exp.image_registry))
            .map(|rest| format!("registry.k8s.io/{rest}"))
            .unwrap_or_else(|| i.to_owned())
    };
    assert!(image(lp).starts_with("registry.k8s.io/sig-storage/livenessprobe:v2."));
    // The liveness timeouts nest: kubelet's > the sidecar's --probe-timeout > the driver's own Probe bound.
    let sidecar = go_duration(&flag(lp, "probe-timeout"));
    let kubelet = seconds(probe.timeout_seconds);
    assert!(
        wincsi::host::PROBE_TIMEOUT < sidecar && sidecar < kubelet,
        "driver {:?} < sidecar {sidecar:?} < kubelet {kubelet:?}",
        wincsi::host::PROBE_TIMEOUT
    );

    // Readiness: the driver's own /readyz, only when the driver serves it.
    match exp.health {
        Some(health_port) => {
            assert_eq!(
                flag(driver, "health-address"),
                Expect::listen(&exp.health_bind, health_port)
            );
            assert_eq!(i64::from(named_port(driver, "health")), health_port);
            let ready = driver
                .readiness_probe
                .as_ref()
                .and_then(|p| p.http_get.as_ref())
                .expect("readiness probe");
            assert_eq!(ready.path.as_deref(), Some("/readyz"));
            assert_eq!(ready.port, IntOrString::String("health".into()));
            // The driver's backend check gives up before kubelet does.
            let timeout = driver
                .readiness_probe
                .as_ref()
                .and_then(|p| p.timeout_seconds);
            assert!(
                wincsi::observability::READINESS_TIMEOUT < seconds(timeout),
                "readiness timeoutSeconds {timeout:?}"
            );
        }
        None => {
            assert!(driver.readiness_probe.is_none());
            assert!(!df.contains_key("health-address"));
        }
    }

    // Metrics: --metrics-address and a port of its own (the health port when both are equal).
    let annotations = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    match exp.metrics {
        Some(port) => {
            assert_eq!(
                flag(driver, "metrics-address"),
                Expect::listen(&exp.metrics_bind, port)
            );
            if exp.health == Some(port) {
                assert!(
                    driver
                        .ports
                        .iter()
                        .flatten()
                        .all(|p| p.name.as_deref() != Some("metrics"))
                );
            } else {
                assert_eq!(i64::from(named_port(driver, "metrics")), port);
            }
            let scrape = annotations.get("prometheus.io/scrape").map(String::as_str);
            if exp.metrics_annotations {
                assert_eq!(scrape, Some("true"));
                assert_eq!(annotations["prometheus.io/port"], port.to_string());
                assert_eq!(annotations["prometheus.io/path"], "/metrics");
            } else {
                assert_eq!(scrape, None);
            }
        }
        None => {
            assert!(!df.contains_key("metrics-address"));
            assert!(!annotations.contains_key("prometheus.io/scrape"));
        }
    }

    // The registrar: same socket, registration paths from the same kubelet root.
    let reg = container(spec, "node-driver-registrar");
    assert!(image(reg).starts_with("registry.k8s.io/sig-storage/csi-node-driver-registrar:v2."));
    assert_eq!(flag(reg, "csi-address"), exp.endpoint());
    assert_eq!(
        flag(reg, "kubelet-registration-path"),
        exp.socket(),
        "kubelet dials the host path"
    );
    assert_eq!(
        flag(reg, "plugin-registration-path"),
        exp.container_registration_dir()
    );
    // Liveness: the registrar's /healthz (registration socket present and answering), not
    // the no-op --mode=kubelet-registration-probe.
    let reg_port = named_port(reg, "reg-healthz");
    assert_eq!(i64::from(reg_port), exp.registrar_port);
    assert_eq!(
        flag(reg, "http-endpoint"),
        Expect::listen(&exp.health_bind, i64::from(reg_port))
    );
    let reg_probe = reg
        .liveness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .expect("registrar httpGet liveness probe");
    assert_eq!(reg_probe.path.as_deref(), Some("/healthz"));
    assert_eq!(reg_probe.port, IntOrString::String("reg-healthz".into()));
    assert!(!flags(reg).contains_key("mode"));
    // The pod's containers share one network (the node's, in hostProcess mode).
    let mut ports: Vec<i64> = vec![exp.probe_port, exp.registrar_port];
    ports.extend(exp.health);
    ports.extend(exp.metrics.filter(|m| exp.health != Some(*m)));
    let distinct: BTreeSet<i64> = ports.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        ports.len(),
        "health ports collide: {ports:?}"
    );

    if exp.host_process {
        check_host_process_pod(spec, "node", &exp.extra_volumes);
        for c in &spec.containers {
            let cmd = &c.command.as_ref().unwrap()[0];
            assert!(
                cmd.starts_with("%CONTAINER_SANDBOX_MOUNT_POINT%\\") && cmd.ends_with(".exe"),
                "{}: HostProcess command {cmd:?} must name the binary in the image",
                c.name
            );
        }
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
        .filter(|v| !exp.extra_volumes.contains(&v.name))
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
    let mut want_dirs: BTreeSet<(String, String)> = [
        (exp.plugin_dir(), "DirectoryOrCreate".to_owned()),
        (exp.registration_dir(), "Directory".to_owned()),
    ]
    .into_iter()
    .collect();
    if !exp.remapped() {
        want_dirs.insert((exp.kubelet_root.clone(), "Directory".to_owned()));
    }
    assert_eq!(dirs, want_dirs);

    for c in &spec.containers {
        // (volume, host path, path inside the container)
        let mounts: Vec<(&str, &str, &str)> = c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| !exp.extra_volumes.contains(&m.name))
            .map(|m| {
                let hp = volumes[m.name.as_str()];
                assert_ne!(
                    m.read_only,
                    Some(true),
                    "{}: {} must be writable",
                    c.name,
                    m.name
                );
                if hp.path.starts_with("\\\\.\\pipe\\") {
                    assert_eq!(m.mount_path, hp.path, "{}: a pipe at its own name", c.name);
                } else {
                    // A Windows container has only a C: drive.
                    assert!(
                        m.mount_path.to_ascii_uppercase().starts_with("C:\\"),
                        "{}: {} mounted at {}, not on C:",
                        c.name,
                        m.name,
                        m.mount_path
                    );
                    if !exp.remapped() {
                        // Same path inside and outside: kubelet's paths mean the same thing.
                        assert_eq!(m.mount_path, hp.path, "{}: {}", c.name, m.name);
                    }
                }
                (m.name.as_str(), hp.path.as_str(), m.mount_path.as_str())
            })
            .collect();
        // A path inside the container, as the host sees it (through exactly one mount).
        let host_view = |inside: &str| -> String {
            let via: Vec<String> = mounts
                .iter()
                .filter(|(_, _, at)| is_within(inside, at))
                .map(|(_, host, at)| format!("{host}{}", &inside[at.len()..]))
                .collect();
            assert_eq!(
                via.len(),
                1,
                "{}: {inside} is reachable through {via:?}",
                c.name
            );
            via[0].clone()
        };
        let socket_flag = if c.name == "wincsi-node" {
            "endpoint"
        } else {
            "csi-address"
        };
        let socket = flag(c, socket_flag);
        assert_eq!(
            host_view(socket.strip_prefix("unix://").expect("unix://")),
            exp.socket(),
            "{}: --{socket_flag} must be the socket kubelet dials",
            c.name
        );
        let pipes: BTreeSet<&str> = mounts
            .iter()
            .filter(|(n, _, _)| pipe_volumes.contains_key(n))
            .map(|(_, p, _)| *p)
            .collect();
        match c.name.as_str() {
            "wincsi-node" => {
                assert_eq!(pipes.len(), PIPES.len(), "the driver mounts every pipe");
                assert_eq!(
                    mounts.len(),
                    1 + PIPES.len(),
                    "driver: one directory + pipes only"
                );
                if exp.remapped() {
                    assert_eq!(
                        host_view(&flag(c, "state-dir")),
                        format!("{}\\state", exp.plugin_dir())
                    );
                } else {
                    assert!(mounts.iter().any(|(_, p, _)| *p == exp.kubelet_root));
                }
            }
            "node-driver-registrar" => {
                assert!(pipes.is_empty(), "registrar must not see csi-proxy");
                assert_eq!(
                    host_view(&flag(c, "plugin-registration-path")),
                    exp.registration_dir(),
                    "kubelet's plugin watcher looks there"
                );
                assert_eq!(mounts.len(), 2);
            }
            "liveness-probe" => {
                assert!(pipes.is_empty(), "livenessprobe must not see csi-proxy");
                assert_eq!(mounts.len(), 1);
                assert_eq!(mounts[0].1, exp.plugin_dir());
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
    check_windows_pod(ds, &r.raw, exp);
    let spec = pod_spec(ds);
    check_host_process_pod(spec, "csi-proxy", &BTreeSet::new());
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
    if !exp.csi_driver {
        // Another owner (e.g. csi-driver-smb's release) has the CSIDriver object.
        assert!(r.csidrivers.is_empty(), "csiDriver.create=false");
        return;
    }
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
    let named = |suffix: &str| {
        r.policies
            .iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.contains(suffix))
            })
            .count()
    };
    assert_eq!(
        named("-csi-proxy-pipes-"),
        5,
        "pods, workloads, jobs, cronjobs, persistentvolumes"
    );
    assert!(
        [0, 5].contains(&named("-kubelet-unpinned-")),
        "the unpinned-object policies come as a set of five"
    );
    assert_eq!(
        r.policies.len(),
        named("-csi-proxy-pipes-") + named("-kubelet-unpinned-")
    );
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
            let res = rule.resources.clone().unwrap_or_default();
            // Pod and PV volumes are immutable: only CREATE, so that metadata-only updates
            // of existing pods are never refused.
            if res == ["pods"] || res == ["persistentvolumes"] {
                assert_eq!(ops, ["CREATE"], "{res:?}");
            } else {
                assert_eq!(ops, ["CREATE", "UPDATE"], "{res:?}");
            }
            resources.extend(res);
        }
        let name = p.metadata.name.clone().unwrap();
        assert!(name.len() <= 63, "{name}");
        let binding = r
            .bindings
            .iter()
            .find(|b| b.spec.as_ref().and_then(|s| s.policy_name.as_ref()) == Some(&name))
            .unwrap_or_else(|| panic!("no binding for {name}"));
        assert_eq!(binding.metadata.name.as_ref(), Some(&name));
        let actions = binding
            .spec
            .as_ref()
            .unwrap()
            .validation_actions
            .clone()
            .unwrap_or_default();
        if name.contains("-kubelet-unpinned-") {
            // The unpinned-object policies have their own actions (Warn and Audit by default).
            assert!(!actions.is_empty(), "{name}");
        } else {
            assert_eq!(actions, exp.validation_actions);
        }
        if let Some(trusted) = spec
            .variables
            .iter()
            .flatten()
            .find(|v| v.name == "trusted")
        {
            for ns in std::iter::once(&NAMESPACE.to_owned()).chain(&exp.trusted_namespaces) {
                assert!(trusted.expression.contains(&format!("'{ns}'")), "{ns}");
            }
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
        "persistentvolumes",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(resources, want);
    // The release's own node pods are admitted by its own policy.
    let policies = r.compiled_policies();
    let pod = r.node_pod_json();
    assert!(
        chart_support::admit(&policies, &Request::create(&pod, NAMESPACE)).admitted(),
        "the release's own node pods"
    );
}

fn check_quota(r: &Rendered, exp: &Expect) {
    let want = exp.quota && exp.priority_class.starts_with("system-");
    assert_eq!(
        r.resource_quotas.len(),
        usize::from(want),
        "critical-pods quota"
    );
    if let Some(q) = r.resource_quotas.first() {
        assert_eq!(q.metadata.namespace.as_deref(), Some(NAMESPACE));
        let spec = q.spec.as_ref().expect("quota spec");
        let scope = &spec
            .scope_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref()
            .unwrap()[0];
        assert_eq!(scope.scope_name, "PriorityClass");
        assert_eq!(scope.operator, "In");
        assert_eq!(
            scope.values.as_deref(),
            Some(&[exp.priority_class.clone()][..])
        );
        assert!(spec.hard.as_ref().unwrap().contains_key("pods"));
    }
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
    check_quota(&r, &exp);
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
    // The stats cache: on, with the driver's own default.
    assert_eq!(
        exp.vol_stats_cache_minutes,
        wincsi::config::DEFAULT_VOL_STATS_CACHE_MINUTES as i64
    );
    // Unreferenced volumes: reported after the driver's own default, never released unless asked.
    assert_eq!(
        exp.unreferenced_minutes,
        wincsi::config::DEFAULT_UNREFERENCED_VOLUME_MINUTES as i64
    );
    assert!(!exp.release_unreferenced);
    for (name, helm) in helms() {
        let r = Rendered::load(helm_template(&helm, &[]).unwrap_or_else(|e| panic!("{name}: {e}")));
        let driver = container(pod_spec(r.daemonset("node").unwrap()), "wincsi-node");
        assert_eq!(
            flag(driver, "endpoint"),
            "unix://C:\\var\\lib\\kubelet\\plugins\\wincsi.csi.io\\csi.sock"
        );
        assert!(r.roles.is_empty() && r.cluster_roles.is_empty());
        assert_eq!(
            r.policies.len(),
            10,
            "5 pipe policies, 5 for unpinned objects"
        );
        assert_eq!(
            r.resource_quotas.len(),
            1,
            "system-node-critical outside kube-system"
        );
        assert_eq!(r.csidrivers.len(), 1);
    }
}

#[test]
fn one_minimum_kubernetes_version_1_30_everywhere() {
    // Chart.yaml's kubeVersion is the one minimum; the READMEs and NOTES say the same.
    let chart = read_yaml(&chart_dir().join("Chart.yaml"));
    assert_eq!(chart["kubeVersion"], ">=1.30.0-0");
    for (name, helm) in helms() {
        let err = helm_template(&helm, &["--kube-version", "1.29.9"])
            .err()
            .unwrap_or_else(|| panic!("{name} rendered for Kubernetes 1.29"));
        assert!(err.contains("kubeVersion"), "{name}: {err}");
        let r = Rendered::load(helm_template(&helm, &["--kube-version", "1.30.0"]).unwrap());
        assert_eq!(r.policies.len(), 10, "{name}");
    }
    for doc in ["README.md", "charts/wincsi/README.md"] {
        let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
        assert!(
            text.contains("Kubernetes ≥ 1.30"),
            "{doc} names the minimum"
        );
        for old in ["≥ 1.26", ">= 1.26", "1.26 ", "< 1.30"] {
            assert!(!text.contains(old), "{doc} still says {old}");
        }
    }
}

#[test]
fn one_namespace_in_every_install_command() {
    // README, chart README and the rendered NOTES use one namespace: wincsi-system.
    // The namespace argument of every command about this chart's release or objects.
    let re_ns = |text: &str| -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for line in text
            .lines()
            .filter(|l| (l.contains("kubectl") || l.contains("helm ")) && l.contains("wincsi"))
        {
            let words: Vec<&str> = line.split_whitespace().collect();
            let clean = |w: &str| {
                w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                    .to_owned()
            };
            for w in words.windows(2) {
                if matches!(w[0], "-n" | "--namespace") && !w[1].starts_with('<') {
                    found.insert(clean(w[1]));
                }
            }
            for w in &words {
                if let Some(ns) = w.strip_prefix("--namespace=") {
                    found.insert(clean(ns));
                }
            }
        }
        found
    };
    let helm = chart_support::helm4();
    let notes = helm_run(&helm, "install", RELEASE, NAMESPACE, &["--dry-run=client"]).unwrap();
    for (doc, text) in [
        (
            "README.md",
            std::fs::read_to_string(repo_root().join("README.md")).unwrap(),
        ),
        (
            "charts/wincsi/README.md",
            std::fs::read_to_string(chart_dir().join("README.md")).unwrap(),
        ),
        ("NOTES", notes),
    ] {
        let found = re_ns(&text);
        assert_eq!(
            found,
            BTreeSet::from([NAMESPACE.to_owned()]),
            "{doc} uses namespaces {found:?}"
        );
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
            ["--set", "imageRegistry=https://mirror.example.com"],
            ["--set", "node.priorityClassName=Not_A_Class"],
            ["--set", "node.criticalPodsQuota.pods=0"],
            ["--set-string", "csiDriver.create=no"],
            ["--set", "nodeDriverRegistrar.healthPort=0"],
            ["--set", "admissionPolicy.trustedNamespaces[0]=Kube_System"],
            ["--set", "driver.health.port=70000"],
            // The driver refuses 1 to 9 minutes (a pod still being set up) and more than a week.
            ["--set", "driver.unreferencedVolumeMinutes=5"],
            ["--set", "driver.unreferencedVolumeMinutes=10081"],
            ["--set-string", "driver.releaseUnreferencedVolumes=yes"],
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

#[test]
fn a_readiness_timeout_the_driver_overruns_is_refused() {
    // The liveness chain (driver < sidecar < kubelet) is chart_knobs.rs's; this is the readiness side: the driver
    // bounds its backend check at 2 s, so kubelet's readiness timeout must be at least 3 s.
    for (name, helm) in helms() {
        let err = helm_template(
            &helm,
            &["--set", "driver.health.readinessProbe.timeoutSeconds=2"],
        )
        .err()
        .unwrap_or_else(|| {
            panic!("{name} accepted a readiness timeout the driver's 2 s check overruns")
        });
        assert!(err.contains("schema"), "{name}: {err}");
    }
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
        // The pipe policy trusts the release namespace, whatever ServiceAccount runs there.
        let policies = r.compiled_policies();
        let ds = r.node_daemonset_json();
        assert!(chart_support::admit(&policies, &Request::create(ds, NAMESPACE)).admitted());
        let pod = r.node_pod_json();
        assert!(chart_support::admit(&policies, &Request::create(&pod, NAMESPACE)).admitted());
    }
}

#[test]
fn image_registry_points_every_image_at_a_mirror() {
    for (name, helm) in helms() {
        let r = Rendered::load(
            helm_template(
                &helm,
                &[
                    "--set",
                    "imageRegistry=mirror.example.com:5000/k8s",
                    "--set",
                    "csiProxy.install=true",
                    "--set",
                    "livenessProbe.image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                ],
            )
            .unwrap(),
        );
        let images: BTreeSet<String> = r
            .daemonsets
            .iter()
            .flat_map(|ds| pod_spec(ds).containers.iter())
            .map(|c| c.image.clone().unwrap())
            .collect();
        assert_eq!(
            images,
            BTreeSet::from([
                "mirror.example.com:5000/k8s/wincsi/wincsi-node:0.1.0".to_owned(),
                "mirror.example.com:5000/k8s/sig-storage/csi-node-driver-registrar:v2.17.0".to_owned(),
                "mirror.example.com:5000/k8s/sig-storage/livenessprobe@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".to_owned(),
                "mirror.example.com:5000/k8s/kubernetes-sigs/sig-windows/csi-proxy:v1.1.3".to_owned(),
            ]),
            "{name}"
        );
        // Without the value, the images' own registries.
        let r = Rendered::load(helm_template(&helm, &[]).unwrap());
        let spec = pod_spec(r.daemonset("node").unwrap());
        assert_eq!(
            container(spec, "wincsi-node").image.as_deref(),
            Some("ghcr.io/wincsi/wincsi-node:0.1.0")
        );
    }
}

#[test]
fn priority_class_choices_that_work_on_managed_platforms() {
    let helm = chart_support::helm4();
    let class_and_quota = |namespace: &str, args: &[&str]| {
        let r = Rendered::load(helm_template_as(&helm, RELEASE, namespace, args).unwrap());
        let classes: BTreeSet<Option<String>> = r
            .daemonsets
            .iter()
            .map(|ds| pod_spec(ds).priority_class_name.clone())
            .collect();
        (classes, r.resource_quotas.len())
    };
    let node_critical = Some("system-node-critical".to_owned());
    // Default: system-node-critical plus the quota that makes it admissible outside kube-system.
    assert_eq!(
        class_and_quota(NAMESPACE, &["--set", "csiProxy.install=true"]),
        (BTreeSet::from([node_critical.clone()]), 1)
    );
    // In kube-system no quota is needed.
    assert_eq!(
        class_and_quota("kube-system", &[]),
        (BTreeSet::from([node_critical.clone()]), 0)
    );
    // Platforms without the restriction: the quota can be left out.
    assert_eq!(
        class_and_quota(NAMESPACE, &["--set", "node.criticalPodsQuota.create=false"]),
        (BTreeSet::from([node_critical]), 0)
    );
    // An own class, or none: no quota.
    assert_eq!(
        class_and_quota(
            NAMESPACE,
            &["--set", "node.priorityClassName=storage-critical"]
        ),
        (BTreeSet::from([Some("storage-critical".to_owned())]), 0)
    );
    assert_eq!(
        class_and_quota(NAMESPACE, &["--set", "node.priorityClassName="]),
        (BTreeSet::from([None]), 0)
    );
}

#[test]
fn readiness_follows_the_driver_health_endpoint_by_default() {
    // On by default: a node without csi-proxy shows its driver pod not ready.
    let helm = chart_support::helm4();
    for mode in ["csiProxy", "hostProcess"] {
        let set_mode = format!("mode={mode}");
        let r = Rendered::load(helm_template(&helm, &["--set", &set_mode]).unwrap());
        let spec = pod_spec(r.daemonset("node").unwrap());
        let driver = container(spec, "wincsi-node");
        assert_eq!(flag(driver, "health-address"), ":29667");
        let ready = driver.readiness_probe.as_ref().expect("readinessProbe");
        let http = ready.http_get.as_ref().expect("httpGet");
        assert_eq!(http.path.as_deref(), Some("/readyz"));
        assert_eq!(http.port, IntOrString::String("health".into()));
        assert_eq!(named_port(driver, "health"), 29667);
        // Liveness stays on the CSI Probe: restarting the driver cannot start csi-proxy.
        let live = driver
            .liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(live.port, IntOrString::String("healthz".into()));
        let notes = helm_run(
            &helm,
            "install",
            RELEASE,
            NAMESPACE,
            &["--dry-run=client", "--set", &set_mode],
        )
        .unwrap();
        assert!(
            notes.contains("READY 2/3") && notes.contains("/readyz"),
            "{notes}"
        );
    }
    // Off only for a driver image older than --health-address: 3/3, and NOTES say where to look instead.
    let off =
        Rendered::load(helm_template(&helm, &["--set", "driver.health.enabled=false"]).unwrap());
    let driver = container(pod_spec(off.daemonset("node").unwrap()), "wincsi-node");
    assert!(driver.readiness_probe.is_none() && !flags(driver).contains_key("health-address"));
    let notes = helm_run(
        &helm,
        "install",
        RELEASE,
        NAMESPACE,
        &["--dry-run=client", "--set", "driver.health.enabled=false"],
    )
    .unwrap();
    assert!(
        notes.contains("READY 3/3 but every volume fails")
            && notes.contains("host backend unreachable"),
        "{notes}"
    );
}

#[test]
fn metrics_are_off_by_default_and_share_the_health_listener_on_an_equal_port() {
    let helm = chart_support::helm4();
    let r = Rendered::load(helm_template(&helm, &[]).unwrap());
    let driver = container(pod_spec(r.daemonset("node").unwrap()), "wincsi-node");
    assert!(!flags(driver).contains_key("metrics-address"));
    for mode in ["csiProxy", "hostProcess"] {
        let set_mode = format!("mode={mode}");
        let r = Rendered::load(
            helm_template(
                &helm,
                &["--set", &set_mode, "--set", "metrics.enabled=true"],
            )
            .unwrap(),
        );
        let driver = container(pod_spec(r.daemonset("node").unwrap()), "wincsi-node");
        assert_eq!(flag(driver, "metrics-address"), ":29668");
        assert_eq!(named_port(driver, "metrics"), 29668);
    }
    // One port for both: one listener in the driver, one container port.
    let r = Rendered::load(
        helm_template(
            &helm,
            &[
                "--set",
                "metrics.enabled=true",
                "--set",
                "metrics.port=29667",
            ],
        )
        .unwrap(),
    );
    let driver = container(pod_spec(r.daemonset("node").unwrap()), "wincsi-node");
    assert_eq!(
        flag(driver, "metrics-address"),
        flag(driver, "health-address")
    );
    let ports: Vec<i32> = driver
        .ports
        .iter()
        .flatten()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(
        ports.iter().filter(|p| **p == 29667).count(),
        1,
        "{ports:?}"
    );
    let notes = helm_run(
        &helm,
        "install",
        RELEASE,
        NAMESPACE,
        &["--dry-run=client", "--set", "metrics.enabled=true"],
    )
    .unwrap();
    assert!(notes.contains(":29668/metrics"), "{notes}");
}

/// The contract's flags are the driver's: each one is in the real binary's `--help`.
#[test]
fn driver_flags_of_the_contract_exist_in_the_binary() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wincsi-node-e2e"))
        .arg("--help")
        .output()
        .expect("run wincsi-node --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for f in DRIVER_FLAGS {
        assert!(
            help.contains(&format!("--{f} ")) || help.contains(&format!("--{f}\n")),
            "--{f} is not in --help:\n{help}"
        );
    }
}

#[test]
fn migration_from_csi_driver_smb_leaves_its_csidriver_alone() {
    // wincsi as smb.csi.k8s.io on the Windows nodes, in place of csi-driver-smb's Windows
    // DaemonSet: csi-driver-smb's release keeps owning the CSIDriver object, so existing PVs
    // (csi.driver is immutable) stay valid and the two releases never fight over it.
    let file = chart_dir().join("ci").join("smb-migration-values.yaml");
    let values = read_yaml(&file);
    assert_eq!(values["driver"]["name"], "smb.csi.k8s.io");
    assert_eq!(values["csiDriver"]["create"], false);
    for (name, helm) in helms() {
        let r = Rendered::load(helm_template(&helm, &["-f", file.to_str().unwrap()]).unwrap());
        assert!(r.csidrivers.is_empty(), "{name}: no CSIDriver of our own");
        let spec = pod_spec(r.daemonset("node").unwrap());
        let driver = container(spec, "wincsi-node");
        assert_eq!(flag(driver, "driver-name"), "smb.csi.k8s.io");
        assert_eq!(
            flag(
                container(spec, "node-driver-registrar"),
                "kubelet-registration-path"
            ),
            "C:\\var\\lib\\kubelet\\plugins\\smb.csi.k8s.io\\csi.sock"
        );
        // Only on the nodes handed over (csi-driver-smb keeps the others).
        assert_eq!(
            spec.node_selector
                .as_ref()
                .unwrap()
                .get("wincsi.csi.io/smb-node")
                .map(String::as_str),
            Some("true")
        );
        // csi-driver-smb's Windows pods in kube-system stay admitted by our pipe policy.
        let policies = r.compiled_policies();
        let smb = chart_support::wrap(
            "DaemonSet",
            "csi-smb-node-win",
            "kube-system",
            chart_support::pod_spec_json(
                Some("csi-smb-node-sa"),
                &["C:\\var\\lib\\kubelet\\", "\\\\.\\pipe\\csi-proxy-smb-v1"],
            ),
        );
        assert!(chart_support::admit(&policies, &Request::create(&smb, "kube-system")).admitted());
    }
    // Helm 3's install --dry-run=client still dials a cluster; Helm 4's renders NOTES offline.
    let notes = helm_run(
        &chart_support::helm4(),
        "install",
        RELEASE,
        NAMESPACE,
        &["--dry-run=client", "-f", file.to_str().unwrap()],
    )
    .unwrap();
    assert!(notes.contains("NOT managed by this release"), "{notes}");
    // With create=true (the default) a CSIDriver of that name would be ours: Helm refuses to
    // adopt csi-driver-smb's, so the documented path sets create=false.
    let r = Rendered::load(
        helm_template(
            &chart_support::helm4(),
            &["--set", "driver.name=smb.csi.k8s.io"],
        )
        .unwrap(),
    );
    assert_eq!(r.csidrivers.len(), 1);
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
        // kubelet expands $(KUBE_NODE_NAME) and $(POD_IP) from the downward-API env vars.
        let argv = std::iter::once("wincsi-node".to_owned()).chain(
            driver.args.iter().flatten().map(|a| {
                a.replace("$(KUBE_NODE_NAME)", "win-node-1")
                    .replace("$(POD_IP)", "10.244.1.7")
            }),
        );
        let config = Config::try_parse_args(argv).unwrap_or_else(|e| {
            panic!(
                "{}: the driver rejects the chart's arguments: {e}",
                file.display()
            )
        });
        match &config.endpoint {
            Endpoint::Unix(path) => assert_eq!(
                Some(format!("unix://{}", path.to_str().unwrap())),
                Some(exp.endpoint())
            ),
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
        // both modes (through the kubelet-dir mount, or at C:\csi when the kubelet root is
        // on another drive).
        let state = config.state_dir();
        assert!(
            is_within(state.to_str().unwrap(), &exp.container_plugin_dir()),
            "{}: state dir {} outside {}",
            file.display(),
            state.display(),
            exp.container_plugin_dir()
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

// ---------------------------------------------------------------------------------------
// Users' paths: examples on Windows Server 2022 and 2025 (and 2019), copy-paste safe commands
// ---------------------------------------------------------------------------------------

/// Windows build of each nanoserver tag (a process-isolated container runs only there).
const NANOSERVER_BUILDS: [(&str, &str); 3] = [
    ("ltsc2022", "10.0.20348"),
    ("ltsc2025", "10.0.26100"),
    ("1809", "10.0.17763"),
];

/// The READMEs' recipe for Windows Server 2025 nodes, applied to an example.
fn for_server_2025(text: &str) -> String {
    text.replace("nanoserver:ltsc2022", "nanoserver:ltsc2025")
        .replace("10.0.20348", "10.0.26100")
}

/// The same for Windows Server 2019 nodes (`nanoserver:1809`, `10.0.17763`).
fn for_server_2019(text: &str) -> String {
    text.replace("nanoserver:ltsc2022", "nanoserver:1809")
        .replace("10.0.20348", "10.0.17763")
}

/// Every example Pod's nanoserver tag matches the Windows build its node selector asks for.
fn check_example_pods_match_their_build(text: &str, what: &str) -> usize {
    let mut pods = 0;
    for o in chart_support::parse_yaml_stream(text) {
        if o["kind"] != "Pod" {
            continue;
        }
        pods += 1;
        let build = o["spec"]["nodeSelector"]["node.kubernetes.io/windows-build"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: pod without a windows-build node selector"));
        for c in o["spec"]["containers"].as_array().unwrap() {
            let image = c["image"].as_str().unwrap();
            let tag = image
                .strip_prefix("mcr.microsoft.com/windows/nanoserver:")
                .unwrap_or_else(|| panic!("{what}: {image}"));
            let want = NANOSERVER_BUILDS
                .iter()
                .find(|(t, _)| *t == tag)
                .unwrap_or_else(|| panic!("{what}: nanoserver has no tag {tag}"))
                .1;
            assert_eq!(build, want, "{what}: {image} on build {build}");
        }
    }
    pods
}

#[test]
fn examples_run_on_windows_server_2022_2025_and_2019_nodes() {
    let mut pods = 0;
    for entry in std::fs::read_dir(repo_root().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let what = path.display().to_string();
        pods += check_example_pods_match_their_build(&text, &what);
        for (recipe, tag) in [
            (for_server_2025 as fn(&str) -> String, "nanoserver:ltsc2025"),
            (for_server_2019, "nanoserver:1809"),
        ] {
            assert_eq!(
                check_example_pods_match_their_build(&recipe(&text), &what),
                check_example_pods_match_their_build(&text, &what)
            );
            assert!(recipe(&text).contains(tag) || !text.contains("kind: Pod"));
        }
    }
    assert!(pods >= 4, "{pods} example pods");
    // The READMEs give exactly that recipe.
    for doc in ["README.md", "charts/wincsi/README.md"] {
        let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
        assert!(
            text.contains(
                r"sed -e 's/nanoserver:ltsc2022/nanoserver:ltsc2025/' -e 's/10\.0\.20348/10.0.26100/'"
            ),
            "{doc} lacks the Windows Server 2025 recipe"
        );
    }
}

#[test]
fn windows_server_versions_are_stated_alike_everywhere() {
    // 2022 and 2025 supported and tested; 2019 images built, with what is not proven there said.
    let docs = [
        "README.md",
        "charts/wincsi/README.md",
        "charts/wincsi/values.yaml",
        "docs/real-node-checks.md",
    ];
    for doc in docs {
        let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for stale in [
            "Windows Server 2019 or 2022",
            "2019/2022",
            "Windows Server 2019 and 2022",
            "covers Server 2019 and 2022",
            "ltsc2019/ltsc2022",
        ] {
            assert!(!flat.contains(stale), "{doc} still says {stale:?}");
        }
        assert!(
            flat.contains("2022 and 2025") || flat.contains("2022 or 2025"),
            "{doc} names 2022 and 2025"
        );
        if doc != "docs/real-node-checks.md" {
            assert!(
                flat.contains("2019")
                    && (flat.contains("no CI") || flat.contains("untested by CI")),
                "{doc} says what is not proven on 2019"
            );
        }
    }
    // The Windows-runner workflow proves both: each image process-isolated on its own runner.
    let w: Json = serde_norway::from_str(
        &std::fs::read_to_string(repo_root().join(".github/workflows/windows-real-node.yml"))
            .unwrap(),
    )
    .unwrap();
    for job in ["csi-proxy", "container", "native"] {
        assert_eq!(
            w["jobs"][job]["strategy"]["matrix"]["image"],
            serde_json::json!(["windows-2022", "windows-2025"]),
            "{job}"
        );
    }
}

/// Words of a shell command line that bash or zsh would change: unquoted backslashes
/// (`C:\data` → `C:data`), glob characters (zsh: "no matches found"), brace lists
/// (`{a,b}` → two words). Quotes are tracked; a trailing `\` continues the line; an unquoted
/// ` #` starts a comment; `<placeholder>` words are left to the reader.
fn shell_hazards(line: &str) -> Vec<String> {
    let mut hazards = Vec::new();
    let (mut single, mut double) = (false, false);
    let chars: Vec<char> = line.trim_end().chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let unquoted = !single && !double;
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '\\' if unquoted => {
                if i + 1 < chars.len() {
                    hazards.push(format!("unquoted backslash at {i}"));
                }
                i += 1;
            }
            '\\' if double => i += 1,
            '#' if unquoted && (i == 0 || chars[i - 1] == ' ') => break,
            '*' | '?' | '[' if unquoted => hazards.push(format!("unquoted glob {c:?} at {i}")),
            '{' if unquoted => {
                let rest: String = chars[i..].iter().collect();
                if let Some(end) = rest.find('}')
                    && rest[..end].contains(',')
                {
                    hazards.push(format!("unquoted brace list at {i}"));
                }
            }
            _ => {}
        }
        i += 1;
    }
    hazards
}

/// The shell lines of a Markdown file's ```sh blocks (continuations joined).
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh" || line == "```bash";
            continue;
        }
        if in_sh {
            pending.push_str(line.trim_end().trim_end_matches('\\'));
            if !line.trim_end().ends_with('\\') {
                out.push(std::mem::take(&mut pending));
            }
        }
    }
    out
}

#[test]
fn readme_and_notes_commands_are_copy_paste_safe_in_bash_and_zsh() {
    // The hazard finder itself.
    assert!(!shell_hazards(r"kubectl exec p -- cmd /c type C:\data\hello.txt").is_empty());
    assert!(shell_hazards(r"kubectl exec p -- cmd /c type 'C:\data\hello.txt'").is_empty());
    assert!(
        !shell_hazards("kubectl get csinodes -o custom-columns=A:.spec.drivers[*].name").is_empty()
    );
    assert!(!shell_hazards("helm install x . --set a={b,c}").is_empty());
    assert!(shell_hazards("helm install x . --set 'a={b,c}'  # {x,y} [*]").is_empty());
    let mut checked = 0;
    for doc in ["README.md", "charts/wincsi/README.md", "docs/images.md"] {
        let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
        for line in sh_blocks(&text) {
            let hazards = shell_hazards(&line);
            assert!(hazards.is_empty(), "{doc}: {line}\n{hazards:?}");
            checked += 1;
        }
        // Inline `kubectl …`/`helm …` commands in the prose, too.
        for cmd in text.split('`').skip(1).step_by(2) {
            if cmd.starts_with("kubectl ") || cmd.starts_with("helm ") {
                let hazards = shell_hazards(cmd);
                assert!(hazards.is_empty(), "{doc}: `{cmd}`\n{hazards:?}");
                checked += 1;
            }
        }
    }
    // The commands NOTES prints (all options of the chart that change them).
    let helm = chart_support::helm4();
    for args in [
        &["--dry-run=client"][..],
        &[
            "--dry-run=client",
            "--set",
            "csiProxy.install=true",
            "--set",
            "driver.health.enabled=false",
            "--set",
            "metrics.enabled=true",
        ][..],
    ] {
        let notes = helm_run(&helm, "install", RELEASE, NAMESPACE, args).unwrap();
        for line in notes
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("kubectl ") || l.starts_with("helm "))
        {
            let hazards = shell_hazards(line);
            assert!(hazards.is_empty(), "NOTES: {line}\n{hazards:?}");
            checked += 1;
        }
    }
    assert!(checked > 30, "{checked} commands checked");
}
