//! Shared by the chart tests (`chart.rs`, `chart_admission.rs`): running Helm 3 and Helm 4,
//! loading the rendered objects into `k8s-openapi` types, and evaluating the rendered
//! ValidatingAdmissionPolicies with the `cel` crate the way the API server does (variables in
//! order, every matching policy, the binding's validationActions — Deny refuses, Warn adds the
//! API server's warning text, Audit an audit annotation —, messageExpression on a failure).
//!
//! What "against the API server's CEL" means here, exactly: the policies' CEL is compiled and
//! run by the `cel` crate (cel-rust), not by the API server's cel-go with Kubernetes' libraries
//! (no kube-apiserver, kind or envtest can run on these machines, and cel-go needs a Go
//! toolchain and module proxy they lack). The harness mirrors the API server's dispatcher
//! (`k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go`: matchConditions
//! first, then the variables — the API server evaluates them lazily, the harness each one in
//! order, which is stricter —, each binding action, the warning text
//! "Validation failed for ValidatingAdmissionPolicy '<policy>' with binding '<binding>':
//! <message>") and treats any evaluation error as a test failure (under failurePolicy Fail the
//! API server would refuse the object: a policy that errors on a well-formed object is a bug).
//! The `cel` crate's `matches` is the `regex` crate, whose syntax is RE2's (the API server's
//! CEL uses Go's RE2 `regexp`); `chart_admission.rs` also checks that the policies' regexes
//! avoid the constructs where the two engines differ. Reading a field an object lacks is an
//! error in both (cel-rust's missing map key, cel-go's "no such key"), so the corpus's objects
//! without node selectors, affinities or `os` prove the policies guard such reads with `has()`.

use std::collections::HashMap;
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::CSIDriver;
use serde::Deserialize;
use serde_json::{Value as Json, json};

/// Release name and namespace scenarios are rendered with.
pub(crate) const RELEASE: &str = "wincsi";
pub(crate) const NAMESPACE: &str = "wincsi-system";

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

pub(crate) fn chart_dir() -> PathBuf {
    repo_root().join("charts").join("wincsi")
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Both Helms, from `$WINCSI_HELM3`/`$WINCSI_HELM4` or `helm3`/`helm4` on `PATH`.
pub(crate) fn helms() -> Vec<(&'static str, PathBuf)> {
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

/// Helm 4 (the tests that need one Helm use the newer).
pub(crate) fn helm4() -> PathBuf {
    helms().pop().expect("helm4").1
}

/// Parses a multi-document YAML stream into JSON values (nulls dropped).
pub(crate) fn parse_yaml_stream(text: &str) -> Vec<Json> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Json::deserialize(doc).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// Runs `helm <command> <release> <chart> --namespace <ns> <args>`; stdout on success.
pub(crate) fn helm_run(
    helm: &Path,
    command: &str,
    release: &str,
    namespace: &str,
    args: &[&str],
) -> Result<String, String> {
    let home = tempfile::tempdir().expect("temp dir for helm");
    let output = Command::new(helm)
        .arg(command)
        .arg(release)
        .arg(chart_dir())
        .args(["--namespace", namespace])
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", helm.display()));
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(String::from_utf8(output.stdout).expect("helm output is UTF-8"))
}

/// `helm template` of release `release` in `namespace`; the rendered objects as JSON.
pub(crate) fn helm_template_as(
    helm: &Path,
    release: &str,
    namespace: &str,
    args: &[&str],
) -> Result<Vec<Json>, String> {
    helm_run(helm, "template", release, namespace, args).map(|t| parse_yaml_stream(&t))
}

/// `helm template` of the default release and namespace.
pub(crate) fn helm_template(helm: &Path, args: &[&str]) -> Result<Vec<Json>, String> {
    helm_template_as(helm, RELEASE, NAMESPACE, args)
}

pub(crate) fn read_yaml(path: &Path) -> Json {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let value: Json =
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    if value.is_null() { json!({}) } else { value }
}

/// Helm's value merge: maps merge recursively, everything else is replaced.
pub(crate) fn merge(base: &mut Json, over: &Json) {
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

pub(crate) fn typed<T: serde::de::DeserializeOwned>(v: &Json) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v:#}"))
}

// ---------------------------------------------------------------------------------------
// Rendered objects, typed
// ---------------------------------------------------------------------------------------

#[derive(Default)]
pub(crate) struct Rendered {
    pub(crate) raw: Vec<Json>,
    pub(crate) daemonsets: Vec<DaemonSet>,
    pub(crate) csidrivers: Vec<CSIDriver>,
    pub(crate) service_accounts: Vec<ServiceAccount>,
    pub(crate) roles: Vec<Role>,
    pub(crate) role_bindings: Vec<RoleBinding>,
    pub(crate) cluster_roles: Vec<ClusterRole>,
    pub(crate) cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub(crate) policies: Vec<ValidatingAdmissionPolicy>,
    pub(crate) bindings: Vec<ValidatingAdmissionPolicyBinding>,
    pub(crate) resource_quotas: Vec<ResourceQuota>,
    pub(crate) config_maps: Vec<ConfigMap>,
    /// Prometheus Operator PodMonitors (no k8s-openapi type: raw).
    pub(crate) pod_monitors: Vec<Json>,
}

impl Rendered {
    pub(crate) fn load(objects: Vec<Json>) -> Self {
        let mut r = Rendered::default();
        for o in &objects {
            let api = o["apiVersion"].as_str().expect("apiVersion");
            let kind = o["kind"].as_str().expect("kind");
            match (api, kind) {
                ("apps/v1", "DaemonSet") => r.daemonsets.push(typed(o)),
                ("storage.k8s.io/v1", "CSIDriver") => r.csidrivers.push(typed(o)),
                ("v1", "ServiceAccount") => r.service_accounts.push(typed(o)),
                ("v1", "ResourceQuota") => r.resource_quotas.push(typed(o)),
                ("v1", "ConfigMap") => r.config_maps.push(typed(o)),
                ("monitoring.coreos.com/v1", "PodMonitor") => r.pod_monitors.push(o.clone()),
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

    pub(crate) fn daemonset(&self, component: &str) -> Option<&DaemonSet> {
        self.daemonsets.iter().find(|ds| {
            ds.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/component"))
                == Some(&component.to_owned())
        })
    }

    /// The raw (JSON) node DaemonSet.
    pub(crate) fn node_daemonset_json(&self) -> &Json {
        self.raw
            .iter()
            .find(|o| {
                o["kind"] == "DaemonSet"
                    && o["metadata"]["labels"]["app.kubernetes.io/component"] == "node"
            })
            .expect("node DaemonSet")
    }

    /// A Pod as the node DaemonSet's controller creates it (name suffix, same spec).
    pub(crate) fn node_pod_json(&self) -> Json {
        let ds = self.node_daemonset_json();
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{}-x7k2p", ds["metadata"]["name"].as_str().unwrap()),
                         "namespace": ds["metadata"]["namespace"]},
            "spec": ds["spec"]["template"]["spec"]})
    }

    /// The admission policies with their bindings' actions, compiled.
    pub(crate) fn compiled_policies(&self) -> Vec<Policy> {
        self.policies
            .iter()
            .map(|p| {
                let name = p.metadata.name.clone().expect("policy name");
                let binding = self
                    .bindings
                    .iter()
                    .find(|b| b.spec.as_ref().and_then(|s| s.policy_name.as_ref()) == Some(&name))
                    .unwrap_or_else(|| panic!("no binding for {name}"));
                let actions = binding
                    .spec
                    .as_ref()
                    .and_then(|s| s.validation_actions.clone())
                    .unwrap_or_default();
                Policy::compile(p, &actions)
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// The admission policies, evaluated
// ---------------------------------------------------------------------------------------

struct Validation {
    expression: cel::Program,
    message_expression: Option<cel::Program>,
    message: String,
}

/// One ValidatingAdmissionPolicy with its binding's actions, compiled.
pub(crate) struct Policy {
    pub(crate) name: String,
    groups: Vec<String>,
    resources: Vec<String>,
    operations: Vec<String>,
    match_conditions: Vec<(String, cel::Program)>,
    variables: Vec<(String, cel::Program)>,
    validations: Vec<Validation>,
    deny: bool,
    warn: bool,
    audit: bool,
}

/// What the API server would answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Admitted,
    /// Denied, with the policy name and the message the user would see.
    Denied(String, String),
}

impl Verdict {
    pub(crate) fn admitted(&self) -> bool {
        *self == Verdict::Admitted
    }
}

/// One admission request.
pub(crate) struct Request<'a> {
    pub(crate) object: &'a Json,
    /// `oldObject` (UPDATE only).
    pub(crate) old: Option<&'a Json>,
    /// `request.namespace` ("" for cluster-scoped objects).
    pub(crate) namespace: &'a str,
    pub(crate) operation: &'a str,
}

impl<'a> Request<'a> {
    pub(crate) fn create(object: &'a Json, namespace: &'a str) -> Self {
        Request {
            object,
            old: None,
            namespace,
            operation: "CREATE",
        }
    }

    pub(crate) fn update(object: &'a Json, old: &'a Json, namespace: &'a str) -> Self {
        Request {
            object,
            old: Some(old),
            namespace,
            operation: "UPDATE",
        }
    }
}

fn compile(src: &str) -> cel::Program {
    cel::Program::compile(src).unwrap_or_else(|e| panic!("CEL does not compile: {src}: {e:?}"))
}

/// The resource (plural) and API group of a kind.
pub(crate) fn resource_of(kind: &str) -> (&'static str, String) {
    let group = match kind {
        "Pod" | "PersistentVolume" => "",
        "Job" | "CronJob" => "batch",
        _ => "apps",
    };
    (group, format!("{}s", kind.to_lowercase()))
}

impl Policy {
    fn compile(p: &ValidatingAdmissionPolicy, actions: &[String]) -> Self {
        let spec = p.spec.as_ref().expect("policy spec");
        let rules = spec
            .match_constraints
            .as_ref()
            .and_then(|m| m.resource_rules.as_ref())
            .expect("resource rules");
        let all = |f: &dyn Fn(
            &k8s_openapi::api::admissionregistration::v1::NamedRuleWithOperations,
        ) -> Vec<String>| { rules.iter().flat_map(f).collect::<Vec<String>>() };
        Policy {
            name: p.metadata.name.clone().expect("name"),
            groups: all(&|r| r.api_groups.clone().unwrap_or_default()),
            resources: all(&|r| r.resources.clone().unwrap_or_default()),
            operations: all(&|r| r.operations.clone().unwrap_or_default()),
            match_conditions: spec
                .match_conditions
                .iter()
                .flatten()
                .map(|c| (c.name.clone(), compile(&c.expression)))
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
                .map(|v| Validation {
                    expression: compile(&v.expression),
                    message_expression: v.message_expression.as_deref().map(compile),
                    message: v.message.clone().unwrap_or_default(),
                })
                .collect(),
            deny: actions.iter().any(|a| a == "Deny"),
            warn: actions.iter().any(|a| a == "Warn"),
            audit: actions.iter().any(|a| a == "Audit"),
        }
    }

    pub(crate) fn matches(&self, kind: &str, operation: &str) -> bool {
        let (group, resource) = resource_of(kind);
        self.groups.iter().any(|g| g == group)
            && self.resources.contains(&resource)
            && self.operations.iter().any(|o| o == operation)
    }

    fn context(req: &Request<'_>) -> cel::Context<'static, 'static> {
        let kind = req.object["kind"].as_str().expect("kind");
        let request = json!({
            "namespace": req.namespace,
            "operation": req.operation,
            "kind": {"group": resource_of(kind).0, "version": "v1", "kind": kind},
        });
        let mut ctx = cel::Context::default();
        ctx.add_variable_from_value("object", cel::to_value(req.object).expect("object"));
        ctx.add_variable_from_value(
            "oldObject",
            cel::to_value(req.old.unwrap_or(&Json::Null)).expect("oldObject"),
        );
        ctx.add_variable_from_value("request", cel::to_value(&request).expect("request"));
        ctx
    }

    /// Whether the API server evaluates this policy for `req` at all: every matchCondition
    /// true (a condition that errors would fail the request under failurePolicy Fail; on a
    /// well-formed object that is a bug, and fails the test).
    pub(crate) fn applies(&self, req: &Request<'_>) -> bool {
        let ctx = Self::context(req);
        self.match_conditions
            .iter()
            .all(|(name, program)| match program.execute(&ctx) {
                Ok(cel::Value::Bool(b)) => b,
                other => panic!(
                    "{}: matchCondition {name} on {} gave {other:?}",
                    self.name, req.object
                ),
            })
    }

    /// `None` = admitted by this policy, else the denial message. A CEL error fails the test
    /// (failurePolicy Fail would deny, but a policy that errors on a well-formed object is a
    /// bug). Policies whose matchConditions do not hold are not evaluated ([`Policy::applies`]).
    pub(crate) fn evaluate(&self, req: &Request<'_>) -> Option<String> {
        if !self.applies(req) {
            return None;
        }
        let mut ctx = Self::context(req);
        let mut vars: HashMap<String, cel::Value> = HashMap::new();
        for (name, program) in &self.variables {
            ctx.add_variable_from_value("variables", cel::Value::from(vars.clone()));
            let value = program.execute(&ctx).unwrap_or_else(|e| {
                panic!(
                    "{}: variable {name} fails on {}: {e:?}",
                    self.name, req.object
                )
            });
            vars.insert(name.clone(), value);
        }
        ctx.add_variable_from_value("variables", cel::Value::from(vars));
        for v in &self.validations {
            match v.expression.execute(&ctx) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) => {
                    let message = match &v.message_expression {
                        Some(m) => match m.execute(&ctx) {
                            Ok(cel::Value::String(s)) => s.to_string(),
                            other => panic!("{}: messageExpression gave {other:?}", self.name),
                        },
                        None => v.message.clone(),
                    };
                    return Some(message);
                }
                other => panic!("{}: validation on {} gave {other:?}", self.name, req.object),
            }
        }
        None
    }
}

/// What the API server answers a request, every policy's say included.
#[derive(Debug, Clone, Default)]
pub(crate) struct Review {
    /// The first denial (policy name and message), as the API server reports it.
    pub(crate) denied: Option<(String, String)>,
    /// The warnings the client is shown (`Validation failed for ValidatingAdmissionPolicy
    /// '<policy>' with binding '<binding>': <message>`; the chart names each binding after its
    /// policy).
    pub(crate) warnings: Vec<String>,
    /// The audit annotations (policy, message) of failed validations bound with Audit.
    pub(crate) audit: Vec<(String, String)>,
}

impl Review {
    pub(crate) fn verdict(&self) -> Verdict {
        match &self.denied {
            Some((p, m)) => Verdict::Denied(p.clone(), m.clone()),
            None => Verdict::Admitted,
        }
    }
}

/// Runs a request through every policy that matches it, as the API server does
/// (`dispatcher.go`): each matching policy whose validation fails acts by its binding's
/// validationActions — Deny refuses (the first denial is reported), Warn adds a warning, Audit
/// an audit annotation; a request no binding denies is admitted with its warnings.
pub(crate) fn review(policies: &[Policy], req: &Request<'_>) -> Review {
    let kind = req.object["kind"].as_str().expect("kind");
    let mut out = Review::default();
    for p in policies.iter().filter(|p| p.matches(kind, req.operation)) {
        let Some(message) = p.evaluate(req) else {
            continue;
        };
        if p.deny && out.denied.is_none() {
            out.denied = Some((p.name.clone(), message.clone()));
        }
        if p.warn {
            let w = format!(
                "Validation failed for ValidatingAdmissionPolicy '{0}' with binding '{0}': {message}",
                p.name
            );
            if !out.warnings.contains(&w) {
                out.warnings.push(w);
            }
        }
        if p.audit {
            out.audit.push((p.name.clone(), message));
        }
    }
    out
}

/// Whether the request is admitted (warnings aside): [`review`]'s verdict.
pub(crate) fn admit(policies: &[Policy], req: &Request<'_>) -> Verdict {
    review(policies, req).verdict()
}

/// A Windows pod spec with these hostPath volumes (and ServiceAccount, when given).
pub(crate) fn pod_spec_json(sa: Option<&str>, host_paths: &[&str]) -> Json {
    let volumes: Vec<Json> = host_paths
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"name": format!("v{i}"), "hostPath": {"path": p, "type": ""}}))
        .collect();
    let mut spec = json!({
        "nodeSelector": {"kubernetes.io/os": "windows"},
        "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}],
    });
    if !volumes.is_empty() {
        spec["volumes"] = json!(volumes);
    }
    if let Some(sa) = sa {
        spec["serviceAccountName"] = json!(sa);
    }
    spec
}

/// An object of `kind` whose pod spec is `spec` (a PersistentVolume takes `spec` as is).
pub(crate) fn wrap(kind: &str, name: &str, namespace: &str, spec: Json) -> Json {
    let meta = json!({"name": name, "namespace": namespace});
    let template = json!({"metadata": {"labels": {"app": name}}, "spec": spec});
    match kind {
        "Pod" => {
            json!({"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": template["spec"]})
        }
        "PersistentVolume" => {
            json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, "spec": spec})
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

/// Every workload kind the policies cover, Pod first.
pub(crate) const POD_KINDS: [&str; 7] = [
    "Pod",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
];
