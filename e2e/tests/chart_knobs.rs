//! The chart's operator knobs and behaviours, rendered with Helm 3 and Helm 4:
//!
//! - `maxSurge` refused (two node plugins would share one socket, registration and state directory);
//! - default tolerations `operator: Exists`, overridable;
//! - the liveness timeouts agree: kubelet's `timeoutSeconds` above the livenessprobe sidecar's `--probe-timeout`,
//!   and both above the driver's own bound on `Probe` (`wincsi::host::PROBE_TIMEOUT`);
//! - the health and metrics listeners' bind address, and kubelet's probes following it;
//! - the PodMonitor only where the Prometheus Operator's API is served, with the fields its CRD defines;
//! - the Grafana dashboard ConfigMap, off by default, holding exactly `docs/grafana/wincsi-dashboard.json`;
//! - `extraEnv`, `extraVolumes`/`extraVolumeMounts`, `podAnnotations`/`podLabels`, `dnsPolicy`, `hostAliases`,
//!   per-container `securityContext` (Windows fields only), `terminationGracePeriodSeconds`;
//! - csi-proxy's DaemonSet without a memory limit by default;
//! - the CSIDriver's `nodeAllocatableUpdatePeriodSeconds` (KEP-4876) where the API server knows the field.

// Shared with the other chart test crates.
#[allow(dead_code)]
mod chart_support;

use std::path::Path;

use chart_support::{Rendered, helm_template, helms, repo_root};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde::Deserialize;
use serde_json::Value as Json;

fn render_with(helm: &Path, args: &[&str]) -> Rendered {
    Rendered::load(
        helm_template(helm, args).unwrap_or_else(|e| panic!("helm template {args:?}: {e}")),
    )
}

fn each_helm(args: &[&str]) -> Vec<(&'static str, Rendered)> {
    helms()
        .into_iter()
        .map(|(name, helm)| (name, render_with(&helm, args)))
        .collect()
}

fn refused(args: &[&str], because: &str) {
    for (name, helm) in helms() {
        match helm_template(&helm, args) {
            Ok(_) => panic!("{name} accepted {args:?}"),
            Err(e) => assert!(e.contains(because), "{name} {args:?}: {e}"),
        }
    }
}

fn spec<'a>(r: &'a Rendered, component: &str) -> &'a PodSpec {
    r.daemonset(component)
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .unwrap_or_else(|| panic!("{component} DaemonSet"))
}

fn container<'a>(spec: &'a PodSpec, name: &str) -> &'a Container {
    spec.containers.iter().find(|c| c.name == name).expect(name)
}

fn arg(c: &Container, flag: &str) -> String {
    let prefix = format!("--{flag}=");
    c.args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
        .unwrap_or_else(|| panic!("{}: no --{flag}", c.name))
}

#[test]
fn max_surge_is_refused_and_max_unavailable_is_the_only_knob() {
    for v in ["1", "25%"] {
        refused(
            &[
                "--set",
                &format!("node.updateStrategy.rollingUpdate.maxSurge={v}"),
            ],
            "maxSurge",
        );
    }
    refused(
        &[
            "--set",
            "node.updateStrategy.rollingUpdate.maxUnavailable=0",
        ],
        "schema",
    );
    for (name, r) in each_helm(&[
        "--set",
        "mode=hostProcess",
        "--set-string",
        "node.updateStrategy.rollingUpdate.maxUnavailable=10%",
    ]) {
        let ds = r.daemonset("node").unwrap();
        let ru = ds
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.rolling_update.as_ref())
            .expect("rollingUpdate");
        assert!(ru.max_surge.is_none(), "{name}");
        assert_eq!(
            ru.max_unavailable,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("10%".into())),
            "{name}"
        );
    }
}

#[test]
fn every_taint_is_tolerated_by_default_and_the_list_can_be_replaced() {
    for (name, r) in each_helm(&["--set", "csiProxy.install=true"]) {
        for component in ["node", "csi-proxy"] {
            let t = spec(&r, component).tolerations.clone().unwrap_or_default();
            assert_eq!(t.len(), 1, "{name} {component}");
            assert_eq!(t[0].operator.as_deref(), Some("Exists"));
            assert!(
                t[0].key.is_none() && t[0].effect.is_none(),
                "{name} {component}: every taint"
            );
        }
    }
    for (name, r) in each_helm(&[
        "--set",
        "node.tolerations[0].key=dedicated",
        "--set",
        "node.tolerations[0].operator=Equal",
        "--set",
        "node.tolerations[0].value=windows",
        "--set",
        "node.tolerations[0].effect=NoSchedule",
    ]) {
        let t = spec(&r, "node").tolerations.clone().unwrap();
        assert_eq!(t.len(), 1, "{name}");
        assert_eq!(
            t[0].key.as_deref(),
            Some("dedicated"),
            "{name}: replaced, not merged"
        );
    }
}

#[test]
fn liveness_timeouts_agree_and_sit_above_the_drivers_probe_bound() {
    for (name, r) in each_helm(&[]) {
        let s = spec(&r, "node");
        let sidecar: u64 = arg(container(s, "liveness-probe"), "probe-timeout")
            .strip_suffix('s')
            .expect("whole seconds")
            .parse()
            .unwrap();
        let kubelet = container(s, "wincsi-node")
            .liveness_probe
            .as_ref()
            .and_then(|p| p.timeout_seconds)
            .expect("timeoutSeconds") as u64;
        assert!(
            kubelet > sidecar,
            "{name}: kubelet {kubelet}s must outlast the sidecar's {sidecar}s"
        );
        assert!(
            std::time::Duration::from_secs(sidecar) > wincsi::host::PROBE_TIMEOUT * 2,
            "{name}: the sidecar's timeout must leave the driver's Probe bound ({:?}) room",
            wincsi::host::PROBE_TIMEOUT
        );
        assert_eq!(
            (sidecar, kubelet),
            (10, 12),
            "{name}: the documented defaults"
        );
    }
    refused(
        &["--set", "livenessProbe.probeTimeout=12s"],
        "must be larger than livenessProbe.probeTimeout",
    );
    refused(
        &["--set", "livenessProbe.probe.timeoutSeconds=5"],
        "must be larger than livenessProbe.probeTimeout",
    );
    refused(&["--set", "livenessProbe.probeTimeout=500ms"], "schema");
}

/// Every container of the node pod that has `POD_IP` gets it from `status.podIP`.
fn pod_ip_env(c: &Container) -> bool {
    c.env.iter().flatten().any(|e| {
        e.name == "POD_IP"
            && e.value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .is_some_and(|f| f.field_path == "status.podIP")
    })
}

#[test]
fn listeners_bind_where_the_operator_says_and_probes_follow() {
    // Default: every interface, no POD_IP, probes at the pod IP.
    for (name, r) in each_helm(&["--set", "metrics.enabled=true"]) {
        let s = spec(&r, "node");
        let d = container(s, "wincsi-node");
        assert_eq!(arg(d, "health-address"), ":29667", "{name}");
        assert_eq!(arg(d, "metrics-address"), ":29668", "{name}");
        assert!(s.containers.iter().all(|c| !pod_ip_env(c)), "{name}");
        assert!(
            d.liveness_probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .host
                .is_none()
        );
    }
    // hostProcess: health on loopback, kubelet probes 127.0.0.1; metrics on the node's primary address.
    for (name, r) in each_helm(&[
        "--set",
        "mode=hostProcess",
        "--set",
        "driver.health.bindAddress=127.0.0.1",
        "--set",
        "metrics.enabled=true",
        "--set",
        "metrics.bindAddress=podIP",
    ]) {
        let s = spec(&r, "node");
        let d = container(s, "wincsi-node");
        assert_eq!(arg(d, "health-address"), "127.0.0.1:29667", "{name}");
        assert_eq!(arg(d, "metrics-address"), "$(POD_IP):29668", "{name}");
        assert!(
            pod_ip_env(d),
            "{name}: the driver needs POD_IP for --metrics-address"
        );
        assert_eq!(
            arg(container(s, "liveness-probe"), "http-endpoint"),
            "127.0.0.1:29665"
        );
        assert_eq!(
            arg(container(s, "node-driver-registrar"), "http-endpoint"),
            "127.0.0.1:29666"
        );
        for (c, probe) in [
            ("wincsi-node", d.liveness_probe.as_ref()),
            ("wincsi-node", d.readiness_probe.as_ref()),
            (
                "node-driver-registrar",
                container(s, "node-driver-registrar")
                    .liveness_probe
                    .as_ref(),
            ),
        ] {
            let host = probe
                .and_then(|p| p.http_get.as_ref())
                .and_then(|h| h.host.as_deref());
            assert_eq!(host, Some("127.0.0.1"), "{name} {c}");
        }
    }
    // An IPv6 literal: bracketed in the flag, bare in the probe.
    for (name, r) in each_helm(&[
        "--set",
        "mode=hostProcess",
        "--set",
        "driver.health.bindAddress=[::1]",
    ]) {
        let d = container(spec(&r, "node"), "wincsi-node");
        assert_eq!(arg(d, "health-address"), "[::1]:29667", "{name}");
        let host = d
            .readiness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.host.clone());
        assert_eq!(host.as_deref(), Some("::1"), "{name}");
    }
    // podIP in csiProxy mode, for the health endpoints: every container that binds gets POD_IP.
    for (name, r) in each_helm(&["--set", "driver.health.bindAddress=podIP"]) {
        let s = spec(&r, "node");
        for c in &s.containers {
            assert!(pod_ip_env(c), "{name} {}", c.name);
        }
        assert_eq!(
            arg(container(s, "liveness-probe"), "http-endpoint"),
            "$(POD_IP):29665"
        );
    }
    // A literal address in csiProxy mode: the pod's address is not known in advance.
    refused(
        &[
            "--set",
            "metrics.bindAddress=10.0.0.5",
            "--set",
            "metrics.enabled=true",
        ],
        "schema",
    );
    refused(&["--set", "driver.health.bindAddress=localhost"], "schema");
}

/// The PodMonitor fields the chart uses, as the Prometheus Operator's CRD defines them
/// (prometheus-operator `example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml`, operator
/// 0.91.0: `spec.selector`, `spec.namespaceSelector.matchNames`, `spec.podMetricsEndpoints[].port`, `.path`,
/// `.interval`, `.scrapeTimeout`); an unknown field fails deserialisation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodMonitorSpec {
    selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    namespace_selector: NamespaceSelector,
    pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NamespaceSelector {
    match_names: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodMetricsEndpoint {
    port: String,
    path: String,
    interval: Option<String>,
    scrape_timeout: Option<String>,
}

#[test]
fn the_pod_monitor_is_rendered_only_where_the_operator_is() {
    let on = [
        "--set",
        "metrics.enabled=true",
        "--set",
        "metrics.podMonitor.enabled=true",
        "--set",
        "metrics.podMonitor.interval=30s",
        "--set",
        "metrics.podMonitor.labels.release=kube-prometheus-stack",
    ];
    for (name, r) in each_helm(&on) {
        assert!(
            r.pod_monitors.is_empty(),
            "{name}: no monitoring.coreos.com API, no PodMonitor"
        );
    }
    let mut with_api = on.to_vec();
    with_api.extend(["--api-versions", "monitoring.coreos.com/v1/PodMonitor"]);
    for (name, r) in each_helm(&with_api) {
        assert_eq!(r.pod_monitors.len(), 1, "{name}");
        let pm = &r.pod_monitors[0];
        assert_eq!(pm["metadata"]["namespace"], chart_support::NAMESPACE);
        assert_eq!(pm["metadata"]["labels"]["release"], "kube-prometheus-stack");
        let s: PodMonitorSpec =
            serde_json::from_value(pm["spec"].clone()).expect("the CRD's fields");
        // It selects exactly the node pods, at their metrics port.
        let pod_labels = r
            .daemonset("node")
            .and_then(|d| d.spec.as_ref())
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap();
        let want = s.selector.match_labels.clone().unwrap();
        assert!(
            want.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
            "{name}"
        );
        assert_eq!(
            want.get("app.kubernetes.io/component").map(String::as_str),
            Some("node")
        );
        assert_eq!(s.namespace_selector.match_names, [chart_support::NAMESPACE]);
        let ep = &s.pod_metrics_endpoints[0];
        assert_eq!(
            (ep.port.as_str(), ep.path.as_str()),
            ("metrics", "/metrics"),
            "{name}"
        );
        assert_eq!(ep.interval.as_deref(), Some("30s"));
        assert!(ep.scrape_timeout.is_none());
        let ports = &container(spec(&r, "node"), "wincsi-node").ports;
        assert!(
            ports
                .iter()
                .flatten()
                .any(|p| p.name.as_deref() == Some("metrics"))
        );
    }
    // One listener: the PodMonitor scrapes the health port.
    with_api.extend(["--set", "metrics.port=29667"]);
    for (name, r) in each_helm(&with_api) {
        assert_eq!(
            r.pod_monitors[0]["spec"]["podMetricsEndpoints"][0]["port"], "health",
            "{name}"
        );
    }
}

#[test]
fn the_dashboard_config_map_is_off_by_default_and_holds_the_docs_json() {
    for (name, r) in each_helm(&[]) {
        assert!(r.config_maps.is_empty(), "{name}");
    }
    let docs =
        std::fs::read_to_string(repo_root().join("docs/grafana/wincsi-dashboard.json")).unwrap();
    for (name, r) in each_helm(&[
        "--set",
        "metrics.dashboard.enabled=true",
        "--set",
        "metrics.dashboard.annotations.grafana_folder=Storage",
        "--set",
        "metrics.dashboard.namespace=monitoring",
    ]) {
        assert_eq!(r.config_maps.len(), 1, "{name}");
        let cm = &r.config_maps[0];
        assert_eq!(cm.metadata.namespace.as_deref(), Some("monitoring"));
        let labels = cm.metadata.labels.clone().unwrap();
        assert_eq!(
            labels.get("grafana_dashboard").map(String::as_str),
            Some("1"),
            "{name}"
        );
        assert_eq!(
            cm.metadata
                .annotations
                .as_ref()
                .unwrap()
                .get("grafana_folder")
                .map(String::as_str),
            Some("Storage")
        );
        let data = cm.data.as_ref().unwrap();
        assert_eq!(
            data["wincsi.json"],
            docs.trim_end_matches('\n'),
            "{name}: the ConfigMap holds the docs file"
        );
        let _: Json = serde_json::from_str(&data["wincsi.json"]).expect("JSON");
    }
}

#[test]
fn the_knobs_peers_offer_render_where_operators_expect_them() {
    let args = [
        "--set",
        "driver.extraEnv[0].name=HTTPS_PROXY",
        "--set",
        "driver.extraEnv[0].value=http://proxy:3128",
        "--set",
        "node.extraVolumes[0].name=ca",
        "--set",
        "node.extraVolumes[0].configMap.name=corp-ca",
        "--set",
        "driver.extraVolumeMounts[0].name=ca",
        "--set-string",
        r"driver.extraVolumeMounts[0].mountPath=C:\\ca",
        "--set",
        "node.podAnnotations.team=storage",
        "--set",
        "node.podLabels.tier=node",
        "--set",
        "node.dnsPolicy=Default",
        "--set",
        "node.hostAliases[0].ip=192.0.2.10",
        "--set",
        "node.hostAliases[0].hostnames[0]=files.example.com",
        "--set",
        "driver.securityContext.windowsOptions.runAsUserName=ContainerAdministrator",
        "--set",
        "livenessProbe.securityContext.windowsOptions.runAsUserName=ContainerUser",
        "--set",
        "nodeDriverRegistrar.securityContext.runAsNonRoot=false",
        "--set",
        "node.terminationGracePeriodSeconds=45",
    ];
    for mode in ["csiProxy", "hostProcess"] {
        let mode_arg = format!("mode={mode}");
        let mut a = args.to_vec();
        a.extend(["--set", mode_arg.as_str()]);
        for (name, r) in each_helm(&a) {
            let ds = r.daemonset("node").unwrap();
            let meta = ds
                .spec
                .as_ref()
                .unwrap()
                .template
                .metadata
                .as_ref()
                .unwrap();
            assert_eq!(
                meta.annotations.as_ref().unwrap()["team"],
                "storage",
                "{name} {mode}"
            );
            assert_eq!(
                meta.labels.as_ref().unwrap()["tier"],
                "node",
                "{name} {mode}"
            );
            let s = spec(&r, "node");
            assert_eq!(s.dns_policy.as_deref(), Some("Default"), "{name} {mode}");
            assert_eq!(s.termination_grace_period_seconds, Some(45));
            let ha = s.host_aliases.as_ref().expect("hostAliases");
            assert_eq!(ha[0].ip, "192.0.2.10");
            let d = container(s, "wincsi-node");
            assert!(
                d.env.iter().flatten().any(|e| e.name == "HTTPS_PROXY"),
                "{name} {mode}"
            );
            assert!(
                d.env.iter().flatten().any(|e| e.name == "KUBE_NODE_NAME"),
                "kept"
            );
            assert!(
                d.volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.name == "ca" && m.mount_path == r"C:\ca"),
                "{name} {mode}"
            );
            assert!(
                s.volumes
                    .iter()
                    .flatten()
                    .any(|v| v.name == "ca" && v.config_map.is_some())
            );
            let sc = |c: &str| container(s, c).security_context.clone().unwrap_or_default();
            assert_eq!(
                sc("wincsi-node")
                    .windows_options
                    .and_then(|w| w.run_as_user_name)
                    .as_deref(),
                Some("ContainerAdministrator")
            );
            assert_eq!(
                sc("liveness-probe")
                    .windows_options
                    .and_then(|w| w.run_as_user_name)
                    .as_deref(),
                Some("ContainerUser")
            );
            assert_eq!(sc("node-driver-registrar").run_as_non_root, Some(false));
        }
    }
    // The default dnsPolicy follows the mode.
    for (mode, want) in [
        ("csiProxy", None),
        ("hostProcess", Some("ClusterFirstWithHostNet")),
    ] {
        let mode_arg = format!("mode={mode}");
        for (name, r) in each_helm(&["--set", mode_arg.as_str()]) {
            assert_eq!(
                spec(&r, "node").dns_policy.as_deref(),
                want,
                "{name} {mode}"
            );
        }
    }
    // Linux-only fields never reach a Windows pod: the schema refuses them.
    for field in [
        "privileged=true",
        "capabilities.drop[0]=ALL",
        "seccompProfile.type=RuntimeDefault",
        "runAsUser=1000",
        "readOnlyRootFilesystem=true",
    ] {
        refused(
            &["--set", &format!("driver.securityContext.{field}")],
            "schema",
        );
    }
    refused(&["--set", "node.dnsPolicy=None"], "schema");
    refused(
        &[
            "--set",
            "driver.extraVolumeMounts[0].name=x",
            "--set",
            "driver.extraVolumeMounts[0].mountPath=/x",
            "--set",
            "driver.extraVolumeMounts[0].mountPropagation=Bidirectional",
        ],
        "schema",
    );
}

#[test]
fn csi_proxy_runs_without_a_memory_limit_by_default() {
    for (name, r) in each_helm(&["--set", "csiProxy.install=true"]) {
        let c = container(spec(&r, "csi-proxy"), "csi-proxy");
        let res = c.resources.as_ref().expect("resources");
        assert!(
            res.limits
                .as_ref()
                .is_none_or(|l| !l.contains_key("memory")),
            "{name}: {res:?}"
        );
        assert!(
            res.requests.as_ref().unwrap().contains_key("memory"),
            "{name}: a request for scheduling"
        );
    }
    for (name, r) in each_helm(&[
        "--set",
        "csiProxy.install=true",
        "--set",
        "csiProxy.resources.limits.memory=1Gi",
    ]) {
        let c = container(spec(&r, "csi-proxy"), "csi-proxy");
        assert!(
            c.resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()
                .contains_key("memory"),
            "{name}"
        );
    }
}

/// KEP-4876: kubelet calls NodeGetInfo again every `nodeAllocatableUpdatePeriodSeconds` (issue 41 item 4). The field
/// exists from Kubernetes 1.33; an older API server would refuse it as unknown, so it is rendered only there; 0 leaves
/// it out and the API server's minimum (10) is the schema's.
#[test]
fn the_csidriver_asks_kubelet_to_refresh_the_volume_limit_where_kubernetes_has_the_field() {
    let period = |r: &Rendered| r.csidrivers[0].spec.node_allocatable_update_period_seconds;
    for (name, r) in each_helm(&["--kube-version", "1.35.0"]) {
        assert_eq!(period(&r), Some(60), "{name}: the default on 1.35");
    }
    for (name, r) in each_helm(&["--kube-version", "1.33.0"]) {
        assert_eq!(
            period(&r),
            Some(60),
            "{name}: 1.33 has the field (behind its gate)"
        );
    }
    for (name, r) in each_helm(&["--kube-version", "1.32.9"]) {
        assert_eq!(period(&r), None, "{name}: 1.32 does not know the field");
    }
    for (name, r) in each_helm(&[
        "--kube-version",
        "1.35.0",
        "--set",
        "csiDriver.nodeAllocatableUpdatePeriodSeconds=300",
    ]) {
        assert_eq!(period(&r), Some(300), "{name}");
    }
    for (name, r) in each_helm(&[
        "--kube-version",
        "1.35.0",
        "--set",
        "csiDriver.nodeAllocatableUpdatePeriodSeconds=0",
    ]) {
        assert_eq!(period(&r), None, "{name}: 0 leaves it out");
    }
    refused(
        &[
            "--kube-version",
            "1.35.0",
            "--set",
            "csiDriver.nodeAllocatableUpdatePeriodSeconds=5",
        ],
        "nodeAllocatableUpdatePeriodSeconds",
    );
}
