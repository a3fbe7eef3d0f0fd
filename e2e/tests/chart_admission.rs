//! The csi-proxy pipe admission policy of `charts/wincsi`, evaluated.
//!
//! The rendered ValidatingAdmissionPolicies run through the `cel` crate (whose `matches` is
//! the `regex` crate: RE2 syntax, like the API server's Go `regexp`) against:
//!
//! - a corpus of spellings that reach the csi-proxy pipes on a Windows node (the issue's
//!   bypasses of the 0.1.0 policy and more), and legitimate paths (`docker_engine`,
//!   `containerd-containerd`, ordinary directories, Linux paths);
//! - several thousand generated spellings (prefix × pipe word × separator × name), each
//!   judged by an independent model of what the node opens ([`readings`]: Win32 path
//!   normalisation, verbatim device paths, Go `filepath.Clean`-style `..` removal, control
//!   characters dropped); whatever the model says reaches a csi-proxy pipe, or any pipe
//!   under a non-canonical spelling, must be refused;
//! - the kubelet-root rule judged by where a pod can run: Linux-pinned pods (every way kubelet
//!   honours, `beta.kubernetes.io/os` included) pass, Windows-pinned ones and Windows spellings
//!   are refused, and the rest — `kubectl debug node`'s pod, a Linux CSI node plugin without an
//!   OS selector — is admitted with the API server's warning (or refused under the strict
//!   setting);
//! - the trust rules (release namespace, `trustedNamespaces`, `trustedServiceAccounts`),
//!   PersistentVolumes, metadata-only updates, a second release, upgrades (from 0.1.0's
//!   rendered policies, and with renamed objects), and name uniqueness under truncation.

// Shared with the other chart test crate, which uses a different subset of it.
#[allow(dead_code)]
mod chart_support;

use std::collections::BTreeSet;

use chart_support::{
    NAMESPACE, POD_KINDS, RELEASE, Rendered, Request, Review, Verdict, admit, helm_template,
    helm_template_as, helm4, parse_yaml_stream, pod_spec_json, review, wrap,
};
use serde_json::{Value as Json, json};

/// The policies chart 0.1.0 rendered for release `wincsi` in `wincsi-system` (metadata
/// trimmed): the upgrade path starts with these in the cluster.
const POLICIES_0_1_0: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: wincsi-system-wincsi-csi-proxy-pipes-pods
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups:
      - ''
      apiVersions:
      - v1
      operations:
      - CREATE
      - UPDATE
      resources:
      - pods
  variables:
  - name: podSpec
    expression: object.spec
  - name: serviceAccount
    expression: 'has(variables.podSpec.serviceAccountName) ? variables.podSpec.serviceAccountName : ''default'''
  - name: pipeMounts
    expression: 'has(variables.podSpec.volumes) ? variables.podSpec.volumes.filter(v, has(v.hostPath) && v.hostPath.path.matches(r''(?i)^[\\/][\\/][^\\/]+[\\/]+(pipe([\\/]*$|[\\/]+(.*[\\/])?[.]{1,2}([\\/]|$)|[\\/].*csi-proxy)|globalroot([\\/]|$))'')) : []'
  - name: isWincsiDriver
    expression: request.namespace == 'wincsi-system' && variables.serviceAccount == 'wincsi-node'
  - name: isTrusted
    expression: 'false'
  validations:
  - expression: size(variables.pipeMounts) == 0 || variables.isWincsiDriver || variables.isTrusted
    reason: Forbidden
    message: 'hostPath volumes under \\.\pipe\csi-proxy (or the whole pipe namespace) are reserved for the wincsi node driver (wincsi-system/wincsi-node): whoever can open the csi-proxy pipes can format any disk on the node.'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: wincsi-system-wincsi-csi-proxy-pipes-workloads
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups:
      - apps
      apiVersions:
      - v1
      operations:
      - CREATE
      - UPDATE
      resources:
      - deployments
      - statefulsets
      - daemonsets
      - replicasets
  variables:
  - name: podSpec
    expression: object.spec.template.spec
  - name: serviceAccount
    expression: 'has(variables.podSpec.serviceAccountName) ? variables.podSpec.serviceAccountName : ''default'''
  - name: pipeMounts
    expression: 'has(variables.podSpec.volumes) ? variables.podSpec.volumes.filter(v, has(v.hostPath) && v.hostPath.path.matches(r''(?i)^[\\/][\\/][^\\/]+[\\/]+(pipe([\\/]*$|[\\/]+(.*[\\/])?[.]{1,2}([\\/]|$)|[\\/].*csi-proxy)|globalroot([\\/]|$))'')) : []'
  - name: isWincsiDriver
    expression: request.namespace == 'wincsi-system' && request.kind.kind == 'DaemonSet' && object.metadata.name == 'wincsi-node' && variables.serviceAccount == 'wincsi-node'
  - name: isTrusted
    expression: 'false'
  validations:
  - expression: size(variables.pipeMounts) == 0 || variables.isWincsiDriver || variables.isTrusted
    reason: Forbidden
    message: 'hostPath volumes under \\.\pipe\csi-proxy (or the whole pipe namespace) are reserved for the wincsi node driver (wincsi-system/wincsi-node): whoever can open the csi-proxy pipes can format any disk on the node.'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: wincsi-system-wincsi-csi-proxy-pipes-jobs
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups:
      - batch
      apiVersions:
      - v1
      operations:
      - CREATE
      - UPDATE
      resources:
      - jobs
  variables:
  - name: podSpec
    expression: object.spec.template.spec
  - name: serviceAccount
    expression: 'has(variables.podSpec.serviceAccountName) ? variables.podSpec.serviceAccountName : ''default'''
  - name: pipeMounts
    expression: 'has(variables.podSpec.volumes) ? variables.podSpec.volumes.filter(v, has(v.hostPath) && v.hostPath.path.matches(r''(?i)^[\\/][\\/][^\\/]+[\\/]+(pipe([\\/]*$|[\\/]+(.*[\\/])?[.]{1,2}([\\/]|$)|[\\/].*csi-proxy)|globalroot([\\/]|$))'')) : []'
  - name: isWincsiDriver
    expression: 'false'
  - name: isTrusted
    expression: 'false'
  validations:
  - expression: size(variables.pipeMounts) == 0 || variables.isWincsiDriver || variables.isTrusted
    reason: Forbidden
    message: 'hostPath volumes under \\.\pipe\csi-proxy (or the whole pipe namespace) are reserved for the wincsi node driver (wincsi-system/wincsi-node): whoever can open the csi-proxy pipes can format any disk on the node.'
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: wincsi-system-wincsi-csi-proxy-pipes-cronjobs
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups:
      - batch
      apiVersions:
      - v1
      operations:
      - CREATE
      - UPDATE
      resources:
      - cronjobs
  variables:
  - name: podSpec
    expression: object.spec.jobTemplate.spec.template.spec
  - name: serviceAccount
    expression: 'has(variables.podSpec.serviceAccountName) ? variables.podSpec.serviceAccountName : ''default'''
  - name: pipeMounts
    expression: 'has(variables.podSpec.volumes) ? variables.podSpec.volumes.filter(v, has(v.hostPath) && v.hostPath.path.matches(r''(?i)^[\\/][\\/][^\\/]+[\\/]+(pipe([\\/]*$|[\\/]+(.*[\\/])?[.]{1,2}([\\/]|$)|[\\/].*csi-proxy)|globalroot([\\/]|$))'')) : []'
  - name: isWincsiDriver
    expression: 'false'
  - name: isTrusted
    expression: 'false'
  validations:
  - expression: size(variables.pipeMounts) == 0 || variables.isWincsiDriver || variables.isTrusted
    reason: Forbidden
    message: 'hostPath volumes under \\.\pipe\csi-proxy (or the whole pipe namespace) are reserved for the wincsi node driver (wincsi-system/wincsi-node): whoever can open the csi-proxy pipes can format any disk on the node.'
"#;

/// The 0.1.0 policies with `Deny` bindings, compiled.
fn policies_0_1_0() -> Vec<chart_support::Policy> {
    let mut objects = parse_yaml_stream(POLICIES_0_1_0);
    let bindings: Vec<Json> = objects
        .iter()
        .map(|p| {
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": p["metadata"]["name"]},
                "spec": {"policyName": p["metadata"]["name"], "validationActions": ["Deny"]}})
        })
        .collect();
    objects.extend(bindings);
    Rendered::load(objects).compiled_policies()
}

fn render(release: &str, namespace: &str, args: &[&str]) -> Rendered {
    Rendered::load(
        helm_template_as(&helm4(), release, namespace, args)
            .unwrap_or_else(|e| panic!("helm template {release} -n {namespace} {args:?}: {e}")),
    )
}

fn default_policies() -> Vec<chart_support::Policy> {
    render(RELEASE, NAMESPACE, &[]).compiled_policies()
}

/// A pod in `namespace` (default ServiceAccount) mounting `path`.
fn pod_with(path: &str, namespace: &str) -> Json {
    wrap("Pod", "app", namespace, pod_spec_json(None, &[path]))
}

fn pod_verdict(policies: &[chart_support::Policy], path: &str, namespace: &str) -> Verdict {
    admit(
        policies,
        &Request::create(&pod_with(path, namespace), namespace),
    )
}

// ---------------------------------------------------------------------------------------
// What a Windows node opens: an independent model, deliberately generous
// ---------------------------------------------------------------------------------------

/// Normalises like Win32 `GetFullPathNameW` (and, for `..`, like Go's `filepath.Clean`):
/// `/` → `\`; the root is `\\.\`, `\\?\`, `\??\`, `\\server\share\`, `X:\` or `\`; empty and
/// `.` segments vanish, `..` removes the previous segment (never the root), trailing dots and
/// spaces of a segment are trimmed. (Win32 leaves `\\?\` paths verbatim; normalising them too
/// only makes the model more generous.) Source: Microsoft Learn, "File path formats on
/// Windows systems" (Normalize paths: evaluate relative components, trim characters).
fn normalise(p: &str) -> String {
    let (root, rest): (String, &str) = if [r"\\.\", r"\\?\", r"\??\"]
        .iter()
        .any(|pre| p.starts_with(pre))
    {
        (p[..4].to_owned(), &p[4..])
    } else if let Some(r) = p.strip_prefix(r"\\") {
        let mut it = r.splitn(3, '\\');
        let server = it.next().unwrap_or("");
        let share = it.next().unwrap_or("");
        (format!(r"\\{server}\{share}\"), it.next().unwrap_or(""))
    } else if p.len() >= 2 && p.as_bytes()[1] == b':' && p.as_bytes()[0].is_ascii_alphabetic() {
        (format!("{}\\", &p[..2]), p[2..].trim_start_matches('\\'))
    } else if let Some(r) = p.strip_prefix('\\') {
        ("\\".to_owned(), r)
    } else {
        (String::new(), p)
    };
    let mut segments: Vec<&str> = Vec::new();
    for seg in rest.split('\\') {
        match seg {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => {
                let trimmed = s.trim_end_matches(['.', ' ']);
                if !trimmed.is_empty() {
                    segments.push(trimmed);
                }
            }
        }
    }
    format!("{root}{}", segments.join("\\"))
}

/// Every reading of `raw` a node might act on: verbatim (containerd hands `\\.\pipe\` paths
/// to the runtime uncleaned; `\\?\` and `\??\` are not normalised by Win32) and normalised,
/// each with and without control characters (a layer that drops them).
fn readings(raw: &str) -> Vec<String> {
    let slashed = raw.replace('/', "\\");
    let stripped: String = slashed.chars().filter(|c| !c.is_control()).collect();
    [slashed, stripped]
        .into_iter()
        .flat_map(|p| [normalise(&p), p])
        .collect()
}

/// Upper-case fold as the named-pipe file system compares names (case-insensitively, through
/// the Unicode upcase table: `ſ` → `S`, `ı` → `I`).
fn fold(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut up = c.to_uppercase();
            match (up.next(), up.next()) {
                (Some(u), None) => u,
                _ => c,
            }
        })
        .collect()
}

/// The pipe name a (folded) device-namespace remainder opens: `PIPE\n`, `GLOBAL\…` (the
/// `Global` link, repeatable), `GLOBALROOT\Device\NamedPipe\n`, `GLOBALROOT\GLOBAL??\…`,
/// `UNC\<host>\PIPE\n` (any host: it may be this node's own name).
fn device_pipe(mut r: &str) -> Option<String> {
    loop {
        if let Some(x) = r.strip_prefix(r"GLOBAL\") {
            r = x;
        } else if let Some(x) = r.strip_prefix(r"GLOBALROOT\") {
            if let Some(n) = x.strip_prefix(r"DEVICE\NAMEDPIPE\") {
                return Some(n.to_owned());
            }
            r = x.strip_prefix(r"GLOBAL??\").or(x.strip_prefix(r"??\"))?;
        } else if let Some(n) = r.strip_prefix(r"PIPE\") {
            return Some(n.to_owned());
        } else if let Some(x) = r.strip_prefix(r"UNC\") {
            return x
                .split_once('\\')?
                .1
                .strip_prefix(r"PIPE\")
                .map(str::to_owned);
        } else {
            return None;
        }
    }
}

/// The (folded) pipe names `raw` can open on a node, under any reading.
fn pipe_names(raw: &str) -> BTreeSet<String> {
    readings(raw)
        .iter()
        .filter_map(|reading| {
            let up = fold(reading);
            for pre in [r"\\.\", r"\\?\", r"\??\"] {
                if let Some(r) = up.strip_prefix(pre) {
                    return device_pipe(r);
                }
            }
            // \\host\PIPE\name: SMB to a pipe; the host may be this node.
            let (_host, r) = up.strip_prefix(r"\\")?.split_once('\\')?;
            r.strip_prefix(r"PIPE\").map(str::to_owned)
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// The model's verdict: `raw` can open a csi-proxy pipe (a name segment starting with it).
fn reaches_csi_proxy(raw: &str) -> bool {
    pipe_names(raw)
        .iter()
        .any(|n| n.split('\\').any(|seg| seg.starts_with("CSI-PROXY")))
}

/// `\\.\pipe\NAME` exactly, NAME of ASCII `[A-Za-z0-9_$-]` runs joined by single dots in
/// `\`-separated segments (written independently of the policy's regex).
fn canonical_pipe(raw: &str) -> bool {
    raw.strip_prefix(r"\\.\pipe\").is_some_and(|name| {
        name.split('\\').all(|seg| {
            seg.split('.').all(|run| {
                !run.is_empty()
                    && run
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_$-".contains(c))
            })
        })
    })
}

#[test]
fn the_path_model_is_not_vacuous() {
    for reaching in [
        r"\\.\pipe\csi-proxy-disk-v1",
        r"\\.\x\..\pipe\csi-proxy-disk-v1",
        r"\??\pipe\csi-proxy-disk-v1",
        r"\\.\pipe.\csi-proxy-disk-v1",
        r"\\.\GLOBALROOT\Device\NamedPipe\csi-proxy-disk-v1",
        r"\\.\UNC\localhost\pipe\csi-proxy-disk-v1",
        "\\\\.\\pipe\\x\n\\..\\csi-proxy-disk-v1",
        r"\\.\pipe\cſi-proxy-disk-v1",
    ] {
        assert!(reaches_csi_proxy(reaching), "{reaching}");
    }
    for not_reaching in [
        r"C:\pipe\csi-proxy-disk-v1",
        r"\\.\pipe\docker_engine",
        r"C:\ProgramData\csi-proxy",
        r"\var\lib\kubelet",
        "/var/run/docker.sock",
    ] {
        assert!(!reaches_csi_proxy(not_reaching), "{not_reaching}");
    }
    assert_eq!(
        pipe_names(r"//./PIPE/docker_engine."),
        BTreeSet::from(["DOCKER_ENGINE".to_owned(), "DOCKER_ENGINE.".to_owned()])
    );
    assert!(canonical_pipe(r"\\.\pipe\mssql$SQLEXPRESS\sql\query"));
    assert!(!canonical_pipe(r"\\.\pipe\docker_engine."));
    assert!(!canonical_pipe(r"\\.\PIPE\docker_engine"));
}

// ---------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------

/// Spellings that reach a csi-proxy pipe on a node, and why.
const BYPASSES: &[(&str, &str)] = &[
    (r"\\.\pipe\csi-proxy-disk-v1", "the pipe itself"),
    (
        r"\\.\PIPE\CSI-PROXY-DISK-V1",
        "NPFS names are case-insensitive",
    ),
    ("//./pipe/csi-proxy-smb-v1", "either separator"),
    (r"\\.\pipe\\csi-proxy-system-v1alpha1", "doubled separator"),
    (r"\\.\pipe\.\csi-proxy-volume-v1", "a '.' segment"),
    (
        r"\\.\pipe\x\..\csi-proxy-disk-v1",
        "'..' inside the pipe name",
    ),
    (
        r"\\.\x\..\pipe\csi-proxy-disk-v1",
        "'..' before 'pipe' (issue 17)",
    ),
    (r"\\.\.\pipe\csi-proxy-disk-v1", "'.' before 'pipe'"),
    (
        r"\\.\pipe.\csi-proxy-disk-v1",
        "trailing dot trimmed (issue 17)",
    ),
    (r"\\.\pipe \csi-proxy-disk-v1", "trailing space trimmed"),
    (r"\\.\pipe\csi-proxy-disk-v1.", "trailing dot on the name"),
    (
        r"\\.\Global\pipe\csi-proxy-disk-v1",
        "the Global link (issue 17)",
    ),
    (
        r"\\.\GLOBAL\Global\pipe\csi-proxy-disk-v1",
        "the Global link, twice",
    ),
    (
        r"\??\pipe\csi-proxy-disk-v1",
        "NT path, passed through by Win32 (issue 17)",
    ),
    (r"\\?\pipe\csi-proxy-disk-v1", "verbatim device path"),
    (
        r"\\?\GLOBALROOT\Device\NamedPipe\csi-proxy-disk-v1",
        "the NPFS device",
    ),
    (
        r"\\.\GLOBALROOT\GLOBAL??\pipe\csi-proxy-disk-v1",
        "GLOBALROOT back into GLOBAL??",
    ),
    (
        r"\\.\UNC\localhost\pipe\csi-proxy-disk-v1",
        "UNC through the device namespace (issue 17)",
    ),
    (
        r"\\localhost\pipe\csi-proxy-filesystem-v1",
        "UNC to this host",
    ),
    (
        r"\\127.0.0.1\pipe\csi-proxy-filesystem-v1",
        "UNC to loopback",
    ),
    (
        r"\\win-node-1\pipe\csi-proxy-filesystem-v1",
        "UNC to the node's own name",
    ),
    (
        r"\\.\pipe\LOCAL\csi-proxy-disk-v1",
        "the LOCAL\\ pipe prefix",
    ),
    (r"\\.\pipe\cſi-proxy-disk-v1", "U+017F folds to S"),
    (r"\\.\pıpe\csi-proxy-disk-v1", "U+0131 folds to I"),
    // Go filepath.Clean on Windows drops a newline-only segment with the '..' after it, so
    // these clean to \\.\pipe\csi-proxy-disk-v1 (and Win32 normalisation agrees).
    (
        "\\\\.\\pipe\\x\n\\..\\csi-proxy-disk-v1",
        "newline segment + '..' (issue 17)",
    ),
    (
        "\\\\.\\pipe\\\n\\..\\csi-proxy-disk-v1",
        "newline-only segment + '..'",
    ),
    (
        "\\\\.\\\n\\..\\pipe\\csi-proxy-disk-v1",
        "newline segment before 'pipe'",
    ),
    ("\\\\.\\pipe\\csi-proxy-disk-v1\n", "trailing newline"),
    (
        "\\\\.\\pipe\\csi-proxy-disk-v1\r\n\\..",
        "CRLF segment + '..'",
    ),
    (
        "\\\\.\\pi\tpe\\csi-proxy-disk-v1",
        "a tab inside 'pipe' (a layer that drops controls)",
    ),
    // Go before 1.21.4 (CVE-2023-45283) cleaned a rooted \a\..\??\b into \??\b.
    (
        r"\a\..\??\pipe\csi-proxy-disk-v1",
        "rooted path cleaned into an NT path",
    ),
    ("/x/../??/pipe/csi-proxy-disk-v1", "the same with '/'"),
    (r"\\.\pipe\", "the whole pipe namespace"),
    (r"\\.\pipe", "the pipe namespace without a separator"),
];

/// Paths that must keep working for everyone (the kubelet root and its parents are not among
/// them: they hold the kubelet's plugin directories, see "The kubelet's plugin directories").
const LEGITIMATE: &[&str] = &[
    r"\\.\pipe\docker_engine",
    r"\\.\pipe\containerd-containerd",
    r"\\.\pipe\openssh-ssh-agent",
    r"\\.\pipe\mssql$SQLEXPRESS\sql\query",
    r"\\.\pipe\my.app-v2\ipc",
    r"C:\var\log",
    "C:/var/log/pods",
    r"c:\ProgramData\csi-proxy-logs",
    r"E:\csi-proxy\state",
    r"D:\data\..\data\.\x",
    r"D:\",
    r"D:\var\lib\kubelet\plugins\wincsi.csi.io",
    r"C:\var\lib\kubelet2",
    r"C:\var\lib\kubelet-backup\plugins_registry",
    r"C:\var\log\pods",
    "/dev",
    "/run/containerd/containerd.sock",
    "/var/run/docker.sock",
    "/var/log/pods/ns_pod_uid/c/0.log",
];

#[test]
fn every_bypass_spelling_is_refused_outside_trusted_namespaces() {
    let policies = default_policies();
    for (path, why) in BYPASSES {
        for kind in POD_KINDS {
            let obj = wrap(
                kind,
                "intruder",
                "default",
                pod_spec_json(None, &[r"C:\logs", path]),
            );
            let verdict = admit(&policies, &Request::create(&obj, "default"));
            match verdict {
                Verdict::Denied(_, message) => {
                    let shown = message.split(" is refused").next().unwrap();
                    assert_eq!(shown, format!("hostPath {path}"), "{kind}: {why}");
                }
                Verdict::Admitted => panic!("{kind} mounting {path:?} ({why}) was admitted"),
            }
        }
        // A PersistentVolume with that hostPath or local path.
        for source in [
            json!({"hostPath": {"path": path}}),
            json!({"local": {"path": path}}),
        ] {
            let mut spec =
                json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]});
            merge_obj(&mut spec, &source);
            let pv = wrap("PersistentVolume", "pv", "", spec);
            assert!(
                !admit(&policies, &Request::create(&pv, "")).admitted(),
                "PersistentVolume {source} ({why})"
            );
        }
        // Trusted namespaces may (they are where the csi-proxy clients live).
        for ns in [NAMESPACE, "kube-system"] {
            assert!(
                pod_verdict(&policies, path, ns).admitted(),
                "{path:?} in {ns}"
            );
        }
        assert!(
            reaches_csi_proxy(path) || path.ends_with("pipe") || path.ends_with('\\'),
            "the model disagrees that {path:?} reaches csi-proxy ({why})"
        );
    }
}

fn merge_obj(base: &mut Json, extra: &Json) {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
}

#[test]
fn legitimate_paths_are_admitted_everywhere() {
    let policies = default_policies();
    for path in LEGITIMATE {
        assert!(!reaches_csi_proxy(path), "{path}: corpus error");
        for kind in POD_KINDS {
            let obj = wrap(kind, "app", "default", pod_spec_json(None, &[path]));
            assert!(
                admit(&policies, &Request::create(&obj, "default")).admitted(),
                "{kind} mounting {path:?}"
            );
        }
        let pv = wrap(
            "PersistentVolume",
            "pv",
            "",
            json!({"capacity": {"storage": "1Gi"}, "hostPath": {"path": path}}),
        );
        assert!(
            admit(&policies, &Request::create(&pv, "")).admitted(),
            "PV {path}"
        );
    }
    let obj = wrap("Deployment", "app", "default", pod_spec_json(None, &[]));
    assert!(
        admit(&policies, &Request::create(&obj, "default")).admitted(),
        "no volumes"
    );
}

#[test]
fn the_0_1_0_policy_admitted_the_issue_bypasses_and_this_corpus_catches_them() {
    // The corpus is sharp enough to see the old defect.
    let old = policies_0_1_0();
    let admitted: Vec<&str> = BYPASSES
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| pod_verdict(&old, p, "default").admitted())
        .collect();
    for issue_example in [
        r"\\.\x\..\pipe\csi-proxy-disk-v1",
        r"\\.\Global\pipe\csi-proxy-disk-v1",
        r"\\.\pipe.\csi-proxy-disk-v1",
        r"\??\pipe\csi-proxy-disk-v1",
        r"\\.\UNC\localhost\pipe\csi-proxy-disk-v1",
        "\\\\.\\\n\\..\\pipe\\csi-proxy-disk-v1",
    ] {
        assert!(
            admitted.contains(&issue_example),
            "0.1.0 refused {issue_example:?}"
        );
    }
}

/// Generated spellings: prefix × pipe word × separator × name.
fn generated() -> Vec<String> {
    let prefixes = [
        r"\\.\",
        r"\\?\",
        r"\??\",
        "//./",
        r"\/.\",
        r"\\.\\",
        r"\\.\.\",
        r"\\.\x\..\",
        "\\\\.\\x\n\\..\\",
        r"\\.\Global\",
        r"\\?\GLOBALROOT\GLOBAL??\",
        r"\\.\UNC\localhost\",
        r"\\localhost\",
        r"\\127.0.0.1\",
        r"\\?\UNC\win-node-1\",
        r"C:\",
        r"\",
        "",
    ];
    let pipe_words = ["pipe", "PIPE", "Pipe", "pipe.", "pipe. .", "pıpe", "pi\npe"];
    let separators = [r"\", "/", r"\\", r"\.\", r"\x\..\", "\\\n\\..\\"];
    let names = [
        "csi-proxy-disk-v1",
        "CSI-Proxy-Smb-V1",
        "csi-proxy-disk-v1.",
        "csi-proxy-disk-v1 ",
        "cſi-proxy-disk-v1",
        r"x\..\csi-proxy-disk-v1",
        r"LOCAL\csi-proxy-iscsi-v1alpha2",
        r"csi-proxy-disk-v1\.",
        "docker_engine",
        "containerd-containerd",
        "my.app",
    ];
    let mut out = Vec::new();
    for p in prefixes {
        for w in pipe_words {
            for s in separators {
                for n in names {
                    out.push(format!("{p}{w}{s}{n}"));
                }
            }
        }
    }
    out.push(r"\\.\GLOBALROOT\Device\NamedPipe\csi-proxy-disk-v1".to_owned());
    out.push(r"\\?\globalroot\device\namedpipe\docker_engine".to_owned());
    out
}

#[test]
fn generated_spellings_are_refused_unless_canonical_and_not_csi_proxy() {
    let policies = default_policies();
    let all = generated();
    let (mut refused, mut admitted, mut reaching) = (0, 0, 0);
    for path in &all {
        let verdict = pod_verdict(&policies, path, "default");
        let reaches_pipe = !pipe_names(path).is_empty();
        if reaches_csi_proxy(path) {
            reaching += 1;
            assert!(
                !verdict.admitted(),
                "{path:?} reaches csi-proxy but was admitted"
            );
        } else if reaches_pipe && !canonical_pipe(path) {
            assert!(
                !verdict.admitted(),
                "{path:?} reaches a pipe, non-canonically, but was admitted"
            );
        } else if canonical_pipe(path) {
            assert!(verdict.admitted(), "canonical {path:?} was refused");
        }
        if verdict.admitted() {
            admitted += 1;
        } else {
            refused += 1;
        }
    }
    assert!(all.len() > 8000, "{} spellings", all.len());
    assert!(
        reaching > 3000,
        "only {reaching} spellings reach csi-proxy: the generator is weak"
    );
    // The canonical, unreserved pipes and the ordinary paths among them are admitted.
    assert!(admitted > 10, "{admitted} admitted");
    println!(
        "pipe policy: {} generated spellings, {reaching} reach csi-proxy, {refused} refused, {admitted} admitted",
        all.len()
    );
}

// ---------------------------------------------------------------------------------------
// The regexes are RE2 regexes
// ---------------------------------------------------------------------------------------

/// The `r'...'` literals passed to `matches` in a CEL expression.
fn regexes(expression: &str) -> Vec<String> {
    expression
        .split(".matches(r'")
        .skip(1)
        .map(|rest| rest.split_once("')").expect("closed literal").0.to_owned())
        .collect()
}

#[test]
fn the_regexes_use_only_syntax_re2_and_the_regex_crate_share() {
    let r = render(RELEASE, NAMESPACE, &[]);
    let mut seen = BTreeSet::new();
    let mut filters = BTreeSet::new();
    for p in &r.policies {
        for v in p.spec.as_ref().unwrap().variables.iter().flatten() {
            if v.name == "pipeRefused" || v.name == "refused" {
                filters.insert(v.expression.clone());
            }
            seen.extend(regexes(&v.expression));
        }
        for c in p.spec.as_ref().unwrap().match_conditions.iter().flatten() {
            seen.extend(regexes(&c.expression));
        }
    }
    // One pipe filter and two combinations (the pipe policies', the unpinned policies'), shared
    // by every kind (so the corpus run on pods covers them all).
    assert_eq!(filters.len(), 3, "{filters:#?}");
    // Three for the pipes, four for the kubelet's plugin directories, one for Windows
    // spellings.
    assert_eq!(seen.len(), 8, "{seen:#?}");
    for re in &seen {
        // Where RE2 (Go regexp) and the regex crate differ, or RE2 lacks a feature:
        // Unicode-aware shorthand classes (\d \w \s \b in the regex crate), \p classes,
        // \z \A, back-references, look-around, atomic/possessive groups, class set
        // operations (&& ~~ --) and nested classes (regex crate only).
        let mut plain = String::new(); // the regex with every escape pair replaced by 'E'
        let mut chars = re.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                let e = chars.next().expect("dangling escape");
                assert!(
                    !"dDwWsSbBpPzA123456789".contains(e),
                    "{re} uses the escape \\{e}"
                );
                plain.push('E');
            } else {
                plain.push(c);
            }
        }
        for bad in ["&&", "~~", "(?=", "(?!", "(?<", "(?>", "++", "*+", "?+"] {
            assert!(!plain.contains(bad), "{re} uses {bad}");
        }
        let mut in_class = false;
        let mut prev = ' ';
        let mut it = plain.chars().peekable();
        while let Some(c) = it.next() {
            if in_class {
                assert!(c != '[', "{re}: '[' inside a class");
                assert!(!(c == '-' && prev == '-'), "{re}: '--' inside a class");
                if c == ']' {
                    in_class = false;
                }
            } else if c == '[' {
                in_class = true;
                if it.peek() == Some(&'^') {
                    it.next();
                }
            }
            prev = c;
        }
        // ASCII classes must not be under (?i): Unicode case folding would let [a-z] match
        // U+017F and U+212A in both engines.
        if re.starts_with("(?i)") {
            assert!(!re.contains("[A-Za-z"), "{re}");
        }
        // And it compiles (the cel crate's `matches` is the regex crate).
        let compiled = cel::Program::compile(&format!("'x'.matches(r'{re}')")).unwrap();
        compiled.execute(&cel::Context::default()).unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Who is trusted
// ---------------------------------------------------------------------------------------

#[test]
fn kube_system_and_listed_namespaces_and_service_accounts_are_trusted() {
    let r = render(
        RELEASE,
        NAMESPACE,
        &[
            "--set",
            "admissionPolicy.trustedNamespaces={kube-system,vmware-system-csi}",
            "--set",
            "admissionPolicy.trustedServiceAccounts[0].namespace=storage",
            "--set",
            "admissionPolicy.trustedServiceAccounts[0].name=csi-smb-node-sa",
        ],
    );
    let policies = r.compiled_policies();
    let pipe = r"\\.\pipe\csi-proxy-smb-v1";
    for kind in POD_KINDS {
        for (ns, sa, ok) in [
            ("kube-system", Some("csi-gce-pd-node-sa"), true),
            ("vmware-system-csi", Some("vsphere-csi-node"), true),
            (NAMESPACE, None, true),
            ("storage", Some("csi-smb-node-sa"), true),
            ("storage", Some("default"), false),
            ("default", Some("csi-smb-node-sa"), false),
            ("team-a", None, false),
        ] {
            let obj = wrap(
                kind,
                "csi-node",
                ns,
                pod_spec_json(sa, &[r"C:\var\lib\kubelet\", pipe]),
            );
            let verdict = admit(&policies, &Request::create(&obj, ns));
            assert_eq!(
                verdict.admitted(),
                ok,
                "{kind} in {ns} as {sa:?}: {verdict:?}"
            );
            if let Verdict::Denied(_, message) = verdict {
                assert!(
                    message.contains("wincsi-system, kube-system, vmware-system-csi")
                        && message.contains("admissionPolicy.trustedNamespaces"),
                    "{message}"
                );
            }
        }
    }
}

#[test]
fn peers_in_kube_system_get_pods_on_new_nodes_with_the_defaults() {
    // GCE PD, Azure Disk/File, vSphere and csi-driver-smb node DaemonSets in kube-system.
    let policies = default_policies();
    for (name, sa, pipes) in [
        (
            "csi-gce-pd-node-win",
            "csi-gce-pd-node-sa",
            &["disk-v1", "volume-v1", "filesystem-v1"][..],
        ),
        (
            "csi-azuredisk-node-win",
            "csi-azuredisk-node-sa",
            &["disk-v1", "volume-v1", "filesystem-v1"][..],
        ),
        (
            "csi-azurefile-node-win",
            "csi-azurefile-node-sa",
            &["smb-v1", "filesystem-v1"][..],
        ),
        (
            "vsphere-csi-node-windows",
            "vsphere-csi-node",
            &["disk-v1", "volume-v1", "filesystem-v1", "system-v1alpha1"][..],
        ),
        (
            "csi-smb-node-win",
            "csi-smb-node-sa",
            &["smb-v1", "filesystem-v1"][..],
        ),
    ] {
        let paths: Vec<String> = pipes
            .iter()
            .map(|p| format!(r"\\.\pipe\csi-proxy-{p}"))
            .collect();
        let mut all: Vec<&str> = paths.iter().map(String::as_str).collect();
        all.push(r"C:\var\lib\kubelet\");
        let ds = wrap(
            "DaemonSet",
            name,
            "kube-system",
            pod_spec_json(Some(sa), &all),
        );
        assert!(
            admit(&policies, &Request::create(&ds, "kube-system")).admitted(),
            "{name}"
        );
        let pod = wrap(
            "Pod",
            &format!("{name}-abcde"),
            "kube-system",
            pod_spec_json(Some(sa), &all),
        );
        assert!(
            admit(&policies, &Request::create(&pod, "kube-system")).admitted(),
            "{name} pod"
        );
    }
}

#[test]
fn metadata_only_updates_are_never_refused() {
    let policies = default_policies();
    let pipe = r"\\.\pipe\csi-proxy-disk-v1";
    // A pod that mounts a pipe, created before the policy existed: pods are matched on
    // CREATE only, so its label, finalizer and owner-reference updates pass.
    let pod = wrap("Pod", "old", "default", pod_spec_json(None, &[pipe]));
    let mut relabelled = pod.clone();
    relabelled["metadata"]["labels"] = json!({"x": "y"});
    relabelled["metadata"]["finalizers"] = json!([]);
    assert!(admit(&policies, &Request::update(&relabelled, &pod, "default")).admitted());
    // A workload likewise: an update that keeps the paths it had (labels, replicas, image).
    for kind in &POD_KINDS[1..] {
        let old = wrap(kind, "old", "default", pod_spec_json(None, &[pipe]));
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"x": "y"});
        assert!(
            admit(&policies, &Request::update(&new, &old, "default")).admitted(),
            "{kind}"
        );
        // But an update that adds a refused path is refused, naming the new one.
        let added = wrap(
            kind,
            "old",
            "default",
            pod_spec_json(None, &[pipe, r"\??\pipe\csi-proxy-smb-v1"]),
        );
        match admit(&policies, &Request::update(&added, &old, "default")) {
            Verdict::Denied(_, m) => assert!(
                m.starts_with(r"hostPath \??\pipe\csi-proxy-smb-v1 is refused"),
                "{m}"
            ),
            Verdict::Admitted => panic!("{kind}: added path admitted"),
        }
        // And a workload without pipes that gains one.
        let clean = wrap(kind, "old", "default", pod_spec_json(None, &[r"C:\logs"]));
        assert!(
            !admit(&policies, &Request::update(&old, &clean, "default")).admitted(),
            "{kind}"
        );
    }
    // PersistentVolumes are matched on CREATE only (their source is immutable).
    let pv = wrap(
        "PersistentVolume",
        "pv",
        "",
        json!({"hostPath": {"path": pipe}}),
    );
    let mut pv2 = pv.clone();
    pv2["metadata"]["labels"] = json!({"x": "y"});
    assert!(admit(&policies, &Request::update(&pv2, &pv, "")).admitted());
}

// ---------------------------------------------------------------------------------------
// Second release, upgrades, names
// ---------------------------------------------------------------------------------------

/// The objects a release creates that the policies judge: its node DaemonSet, a node pod,
/// and (with csiProxy.install) the csi-proxy DaemonSet.
fn release_objects(r: &Rendered) -> Vec<Json> {
    let mut out: Vec<Json> = r
        .raw
        .iter()
        .filter(|o| o["kind"] == "DaemonSet")
        .cloned()
        .collect();
    out.push(r.node_pod_json());
    out
}

fn all_admitted(policies: &[chart_support::Policy], objects: &[Json]) -> Result<(), String> {
    for o in objects {
        let ns = o["metadata"]["namespace"].as_str().unwrap();
        if let Verdict::Denied(p, m) = admit(policies, &Request::create(o, ns)) {
            return Err(format!("{} {}: {p}: {m}", o["kind"], o["metadata"]["name"]));
        }
    }
    Ok(())
}

#[test]
fn a_second_release_in_the_same_namespace_and_each_others_policies() {
    let first = render(RELEASE, NAMESPACE, &[]);
    let second = render(
        "wincsi-iscsi",
        NAMESPACE,
        &["--set", "driver.name=iscsi.wincsi.example.com"],
    );
    for (a, b) in [(&first, &second), (&second, &first)] {
        all_admitted(&a.compiled_policies(), &release_objects(b)).unwrap();
        all_admitted(&a.compiled_policies(), &release_objects(a)).unwrap();
    }
    // Distinct cluster-scoped names: both releases' policies can coexist.
    let names = |r: &Rendered| -> BTreeSet<String> {
        r.policies
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    };
    assert!(names(&first).is_disjoint(&names(&second)));
}

#[test]
fn a_second_release_in_another_namespace_needs_to_be_trusted_and_says_so() {
    let first = render(RELEASE, NAMESPACE, &[]);
    let second = render(
        "wincsi",
        "storage-b",
        &["--set", "driver.name=b.wincsi.example.com"],
    );
    // The first release's policy refuses the second's pods, with a message that says what to do.
    let err = all_admitted(&first.compiled_policies(), &release_objects(&second)).unwrap_err();
    assert!(err.contains("admissionPolicy.trustedNamespaces"), "{err}");
    // Trusted both ways: each admits the other's.
    let first = render(
        RELEASE,
        NAMESPACE,
        &[
            "--set",
            "admissionPolicy.trustedNamespaces={kube-system,storage-b}",
        ],
    );
    let second = render(
        "wincsi",
        "storage-b",
        &[
            "--set",
            "driver.name=b.wincsi.example.com",
            "--set",
            "admissionPolicy.trustedNamespaces={kube-system,wincsi-system}",
        ],
    );
    all_admitted(&first.compiled_policies(), &release_objects(&second)).unwrap();
    all_admitted(&second.compiled_policies(), &release_objects(&first)).unwrap();
}

#[test]
fn upgrades_are_not_refused_by_the_policies_already_in_the_cluster() {
    // helm upgrade applies the DaemonSet before the (unknown-kind, so last) policies: the new
    // objects meet the policies of the release being replaced.
    let new = render(RELEASE, NAMESPACE, &["--set", "csiProxy.install=true"]);
    // From 0.1.0 (policies keyed on the DaemonSet name and ServiceAccount, which this release
    // keeps by default).
    all_admitted(&policies_0_1_0(), &release_objects(&new)).unwrap();
    for ds in new.raw.iter().filter(|o| o["kind"] == "DaemonSet") {
        let mut old = ds.clone();
        old["metadata"]["labels"] = json!({});
        let verdict = admit(&policies_0_1_0(), &Request::update(ds, &old, NAMESPACE));
        assert!(
            verdict.admitted(),
            "{}: {verdict:?}",
            ds["metadata"]["name"]
        );
    }
    // From 0.1.0 with a renamed ServiceAccount the old policy refuses: the README says to
    // upgrade from 0.1.0 first without renaming. This shows that advice is needed.
    let renamed = render(
        RELEASE,
        NAMESPACE,
        &["--set", "serviceAccount.name=wincsi-renamed"],
    );
    assert!(all_admitted(&policies_0_1_0(), &release_objects(&renamed)).is_err());
    // From this version on, renaming the ServiceAccount, the DaemonSet (fullnameOverride) or
    // the driver passes the previous release's policies: trust is by namespace.
    let current = render(RELEASE, NAMESPACE, &[]).compiled_policies();
    for args in [
        &["--set", "serviceAccount.name=wincsi-renamed"][..],
        &["--set", "fullnameOverride=storage-node"][..],
        &[
            "--set",
            "driver.name=other.wincsi.example.com",
            "--set",
            "csiProxy.install=true",
        ][..],
    ] {
        let upgraded = render(RELEASE, NAMESPACE, args);
        all_admitted(&current, &release_objects(&upgraded))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
}

#[test]
fn policy_and_binding_names_stay_unique_with_long_namespaces_and_releases() {
    let long_ns = "storage-system-for-windows-nodes-in-the-production-cluster-01";
    assert!(long_ns.len() <= 63);
    let releases = [
        (
            long_ns,
            "wincsi-smb-driver-for-the-finance-department-share-a",
        ),
        (
            long_ns,
            "wincsi-smb-driver-for-the-finance-department-share-b",
        ),
        (
            &long_ns[..long_ns.len() - 1],
            "s-wincsi-smb-driver-for-the-finance-department-share",
        ),
        ("a-b", "c"),
        ("a", "b-c"),
        (NAMESPACE, RELEASE),
    ];
    let mut all = BTreeSet::new();
    let mut count = 0;
    for (ns, release) in releases {
        let r = render(release, ns, &["--set", "rbac.secrets.enabled=true"]);
        let again = render(release, ns, &["--set", "rbac.secrets.enabled=true"]);
        let mut names: Vec<String> = r
            .policies
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .chain(
                r.cluster_roles
                    .iter()
                    .map(|c| c.metadata.name.clone().unwrap()),
            )
            .collect();
        for b in &r.bindings {
            let n = b.metadata.name.clone().unwrap();
            assert!(names.contains(&n), "binding {n} is named after its policy");
        }
        let again_names: Vec<String> = again
            .policies
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .chain(
                again
                    .cluster_roles
                    .iter()
                    .map(|c| c.metadata.name.clone().unwrap()),
            )
            .collect();
        assert_eq!(names, again_names, "deterministic");
        for n in &names {
            assert!(n.len() <= 63, "{n} ({} chars)", n.len());
            assert!(
                n.ends_with("-pods")
                    || n.ends_with("-workloads")
                    || n.ends_with("-jobs")
                    || n.ends_with("-cronjobs")
                    || n.ends_with("-pvs")
                    || n.ends_with("-secret-reader"),
                "the suffix is never cut: {n}"
            );
        }
        count += names.len();
        all.extend(names.drain(..));
    }
    assert_eq!(all.len(), count, "a cluster-scoped name collides: {all:#?}");
}

#[test]
fn validation_actions_warn_and_audit_never_deny() {
    let r = render(
        RELEASE,
        NAMESPACE,
        &["--set", "admissionPolicy.validationActions={Warn,Audit}"],
    );
    let policies = r.compiled_policies();
    assert!(pod_verdict(&policies, r"\\.\pipe\csi-proxy-disk-v1", "default").admitted());
    let helm = helm4();
    let rendered = helm_template(&helm, &["--set", "admissionPolicy.enabled=false"]).unwrap();
    assert!(rendered.iter().all(|o| {
        !o["kind"]
            .as_str()
            .unwrap()
            .starts_with("ValidatingAdmission")
    }));
}

// ---------------------------------------------------------------------------------------
// The kubelet root: the driver's socket directory, plugins_registry, the staged volumes
// ---------------------------------------------------------------------------------------

/// The kubelet root the default render guards, and the driver's name.
const KUBELET_ROOT: &str = r"C:\var\lib\kubelet";

/// Where one reading of a path lands on a node.
enum Landing {
    /// Not on a drive of this node: a pipe, another host's share.
    Elsewhere,
    /// On a drive the model cannot place (`\\?\Volume{…}`, `\\.\GLOBALROOT\…`, a relative path):
    /// treated as reaching anything.
    Unknown,
    /// Drive letter and (folded) segments.
    At(char, Vec<String>),
}

/// Where each reading of `raw` lands: `X:...`, a rooted path (on `current`, which may be the
/// kubelet's drive), the device forms `\\?\X:`, `\\.\X:`, `\??\X:` and the administrative
/// shares `\\host\X$` (`\\.\UNC\host\X$`, `\\?\UNC\host\X$`).
fn landings(raw: &str, current: char) -> Vec<Landing> {
    let split = |rest: &str| -> Vec<String> {
        rest.split('\\')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let drive_path = |r: &str| -> Option<Landing> {
        let b = r.as_bytes();
        (b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':')
            .then(|| Landing::At(b[0] as char, split(&r[2..])))
    };
    // `X$\rest` is drive X (an administrative share); other shares are not this node's drives.
    let share = |s: &str| -> Landing {
        let (name, rest) = s.split_once('\\').unwrap_or((s, ""));
        let b = name.as_bytes();
        if b.len() == 2 && b[0].is_ascii_alphabetic() && b[1] == b'$' {
            Landing::At(b[0] as char, split(rest))
        } else {
            Landing::Elsewhere
        }
    };
    readings(raw)
        .iter()
        .map(|reading| {
            let up = fold(reading);
            if let Some(d) = drive_path(&up) {
                return d;
            }
            if let Some(rest) = [r"\\?\", r"\\.\", r"\??\"]
                .iter()
                .find_map(|p| up.strip_prefix(p))
            {
                let rest = rest.strip_prefix(r"GLOBAL\").unwrap_or(rest);
                return if let Some(d) = drive_path(rest) {
                    d
                } else if let Some(unc) = rest.strip_prefix(r"UNC\") {
                    unc.split_once('\\')
                        .map_or(Landing::Elsewhere, |(_, s)| share(s))
                } else if rest.starts_with("PIPE") {
                    Landing::Elsewhere
                } else {
                    Landing::Unknown
                };
            }
            if let Some(unc) = up.strip_prefix(r"\\") {
                return unc
                    .split_once('\\')
                    .map_or(Landing::Elsewhere, |(_, s)| share(s));
            }
            if up.starts_with('\\') {
                return Landing::At(current, split(&up));
            }
            // Relative: wherever the runtime's current directory is.
            Landing::Unknown
        })
        .collect()
}

/// The model's verdict: `raw` may reach the kubelet root `root` (its directories, its
/// parents, or a segment the model cannot resolve: an 8.3 short name with `~`, a stream
/// with `:`).
fn reaches_kubelet(raw: &str, root: &str) -> bool {
    let root_up = fold(root);
    let drive = root_up.chars().next().unwrap();
    let root_segs: Vec<&str> = root_up[3..].split('\\').collect();
    landings(raw, drive).into_iter().any(|r| match r {
        Landing::Elsewhere => false,
        Landing::Unknown => true,
        Landing::At(d, segs) => {
            d.to_ascii_uppercase() == drive
                && (segs.iter().any(|s| s.contains(['~', ':']))
                    || segs.iter().zip(&root_segs).all(|(a, b)| a == b))
        }
    })
}

/// Written plainly on the kubelet's drive (an independent statement of what the policy can
/// judge exactly): a drive or rooted path, no `.`/`..` segment, no segment ending in `.` or
/// a space, no `~`, `:` (after the drive), `?` or control character.
fn plain(raw: &str) -> bool {
    let sep = |c: &u8| *c == b'\\' || *c == b'/';
    let rest = match raw.as_bytes() {
        [d, b':', s, ..] if d.is_ascii_alphabetic() && sep(s) => &raw[2..],
        [s, t, ..] if sep(s) && sep(t) => return false,
        [s, ..] if sep(s) => raw,
        _ => return false,
    };
    rest.split(['\\', '/']).filter(|s| !s.is_empty()).all(|s| {
        !s.ends_with(['.', ' ']) && !s.contains(['~', ':', '?']) && !s.chars().any(char::is_control)
    })
}

#[test]
fn the_kubelet_model_is_not_vacuous() {
    for reaching in [
        r"C:\var\lib\kubelet\plugins\wincsi.csi.io",
        r"c:/VAR/lib/kubelet/plugins_registry",
        r"\var\lib\kubelet",
        r"C:\",
        r"C:\var",
        r"\\?\C:\var\lib\kubelet",
        r"\\localhost\c$\var\lib\kubelet",
        r"\\.\UNC\localhost\C$\var",
        r"C:\var\lib\KUBELE~1",
        r"C:\var\lıb\kubelet",
        r"C:\var\lib\kubelet.\plugins",
        r"C:\x\..\var\lib\kubelet",
        r"\\?\Volume{1b3b2c8c-0000-0000-0000-100000000000}\var",
        "plugins",
    ] {
        assert!(reaches_kubelet(reaching, KUBELET_ROOT), "{reaching}");
    }
    for not_reaching in [
        r"D:\var\lib\kubelet",
        r"C:\var\log\pods",
        r"C:\var\lib\kubelet2",
        r"\\.\pipe\csi-proxy-disk-v1",
        r"\\fileserver\share\var\lib\kubelet",
    ] {
        assert!(
            !reaches_kubelet(not_reaching, KUBELET_ROOT),
            "{not_reaching}"
        );
    }
    assert!(plain(r"C:\var\log") && plain("/var/log") && !plain(r"C:\x\..\y") && !plain("C:var"));
}

/// Spellings of the kubelet's directories that a node resolves, and why.
const KUBELET_BYPASSES: &[(&str, &str)] = &[
    (
        r"C:\var\lib\kubelet\plugins\wincsi.csi.io",
        "the driver's socket directory",
    ),
    (
        r"C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock",
        "the socket itself",
    ),
    (
        r"C:\var\lib\kubelet\plugins_registry",
        "plugin registration",
    ),
    (r"C:\var\lib\kubelet", "the kubelet root"),
    (r"C:\var\lib\kubelet\", "with a trailing separator"),
    (
        r"C:\var\lib\kubelet\plugins",
        "every driver's socket directory",
    ),
    (
        r"C:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io",
        "every staged volume of the driver",
    ),
    (r"C:\var\lib\kubelet\pods", "every published volume"),
    (r"C:\var\lib", "a parent"),
    (r"C:\var", "a parent"),
    (r"C:\", "the drive's root"),
    ("C:", "the drive's current directory"),
    ("C:var\\lib\\kubelet", "drive-relative"),
    (
        r"c:\VAR\Lib\KUBELET\Plugins\WINCSI.CSI.IO",
        "NTFS names are case-insensitive",
    ),
    ("C:/var/lib/kubelet/plugins_registry", "either separator"),
    (r"C:\\var\\lib\\\kubelet", "doubled separators"),
    (
        r"\var\lib\kubelet\plugins\wincsi.csi.io",
        "rooted: the current drive",
    ),
    (
        "/var/lib/kubelet/plugins_registry",
        "a Linux spelling, rooted on Windows",
    ),
    ("/", "the current drive's root"),
    (r"C:\var\.\lib\kubelet", "a '.' segment"),
    (r"C:\var\x\..\lib\kubelet", "'..'"),
    (
        r"C:\tmp\..\var\lib\kubelet\plugins",
        "'..' from a harmless start",
    ),
    (
        r"C:\var\lib\kubelet.\plugins_registry",
        "trailing dot trimmed",
    ),
    (
        r"C:\var\lib\kubelet \plugins_registry",
        "trailing space trimmed",
    ),
    (r"C:\var\lib\KUBELE~1\plugins", "an 8.3 short name"),
    (r"C:\var\lib\kubelet\PLUGIN~1", "8.3: plugins_registry"),
    (
        r"C:\var\lib\kubelet\plugins\WINCSI~1.IO",
        "8.3: the driver's directory",
    ),
    (r"C:\var\lıb\kubelet", "U+0131 upper-cases to I"),
    (
        r"C:\var\lib\kubelet\plugins\wincſi.csi.io",
        "U+017F upper-cases to S",
    ),
    (
        r"C:\var\lib\kubelet::$INDEX_ALLOCATION",
        "a directory's index stream",
    ),
    (
        r"C:\var\lib\kubelet:$I30:$INDEX_ALLOCATION",
        "a named index stream",
    ),
    (
        "C:\\var\\lib\\kube\nlet",
        "a control character a layer may drop",
    ),
    (r"\\?\C:\var\lib\kubelet", "verbatim device path"),
    (r"\\.\C:\var\lib\kubelet", "device path"),
    (r"\??\C:\var\lib\kubelet", "NT path"),
    (
        r"\\localhost\C$\var\lib\kubelet",
        "the administrative share",
    ),
    (
        r"\\127.0.0.1\c$\var\lib\kubelet",
        "the administrative share, by address",
    ),
    (
        r"\\.\UNC\localhost\C$\var\lib\kubelet",
        "UNC through the device namespace",
    ),
    (
        r"\\?\GLOBALROOT\Device\HarddiskVolume1\var\lib\kubelet",
        "the volume device",
    ),
    (
        r"\\?\Volume{1b3b2c8c-0000-0000-0000-100000000000}\var\lib\kubelet",
        "a volume GUID path",
    ),
    ("var/lib/kubelet", "relative"),
];

#[test]
fn every_kubelet_directory_spelling_is_refused_outside_trusted_namespaces() {
    let policies = default_policies();
    for (path, why) in KUBELET_BYPASSES {
        assert!(
            reaches_kubelet(path, KUBELET_ROOT),
            "the model disagrees that {path:?} reaches the kubelet root ({why})"
        );
        for kind in POD_KINDS {
            let obj = wrap(
                kind,
                "intruder",
                "default",
                pod_spec_json(None, &[r"D:\logs", path]),
            );
            match admit(&policies, &Request::create(&obj, "default")) {
                Verdict::Denied(_, message) => {
                    let shown = message.split(" is refused").next().unwrap();
                    assert_eq!(shown, format!("hostPath {path}"), "{kind}: {why}");
                    if plain(path) {
                        assert!(
                            message.contains(r"the kubelet root C:\var\lib\kubelet")
                                && message.contains(r"plugins\wincsi.csi.io\csi.sock"),
                            "{message}"
                        );
                    }
                }
                Verdict::Admitted => panic!("{kind} mounting {path:?} ({why}) was admitted"),
            }
        }
        // A PersistentVolume pinned to Windows nodes is refused; without a pin, a path written
        // the Windows way is refused and a Linux-style one warned about.
        let windows_pv = wrap(
            "PersistentVolume",
            "pv",
            "",
            json!({"capacity": {"storage": "1Gi"}, "local": {"path": path},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]}]}}}),
        );
        assert!(
            !admit(&policies, &Request::create(&windows_pv, "")).admitted(),
            "PersistentVolume {path} ({why})"
        );
        let pv = wrap(
            "PersistentVolume",
            "pv",
            "",
            json!({"capacity": {"storage": "1Gi"}, "local": {"path": path}}),
        );
        let r = review(&policies, &Request::create(&pv, ""));
        let windows_spelt = path.contains('\\') || path.as_bytes().get(1) == Some(&b':');
        assert!(
            r.denied.is_some() || (!windows_spelt && r.warnings.len() == 1),
            "PersistentVolume {path} ({why}): {r:?}"
        );
        for ns in [NAMESPACE, "kube-system"] {
            assert!(
                pod_verdict(&policies, path, ns).admitted(),
                "{path:?} in {ns}"
            );
        }
    }
}

/// A pod spec that only Linux nodes run, in each of the ways kubelet honours (it refuses a
/// pod whose `spec.os.name`, node selector or required node affinity does not match its node:
/// `pkg/kubelet/lifecycle/predicate.go`).
fn linux_pod_specs(path: &str) -> Vec<Json> {
    let unpinned = || {
        let mut spec = pod_spec_json(None, &[path]);
        spec.as_object_mut().unwrap().remove("nodeSelector");
        spec
    };
    let mut by_selector = unpinned();
    by_selector["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
    // The label's deprecated beta spelling, which kubelet still sets.
    let mut by_beta_selector = unpinned();
    by_beta_selector["nodeSelector"] = json!({"beta.kubernetes.io/os": "linux", "disk": "ssd"});
    let mut by_os = unpinned();
    by_os["os"] = json!({"name": "linux"});
    let mut by_affinity = unpinned();
    by_affinity["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "NotIn", "values": ["windows"]},
                              {"key": "node-role", "operator": "Exists"}]},
        {"matchExpressions": [{"key": "beta.kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
        {"matchExpressions": [{"key": "node.kubernetes.io/windows-build", "operator": "DoesNotExist"}]}
    ]}}});
    vec![by_selector, by_beta_selector, by_os, by_affinity]
}

/// A pod spec pinned to Windows nodes, each way.
fn windows_pod_specs(path: &str) -> Vec<Json> {
    let mut specs = Vec::new();
    for pin in [
        json!({"nodeSelector": {"kubernetes.io/os": "windows"}}),
        json!({"nodeSelector": {"beta.kubernetes.io/os": "windows"}}),
        json!({"nodeSelector": {"node.kubernetes.io/windows-build": "10.0.20348"}}),
        json!({"os": {"name": "windows"}}),
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]},
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "NotIn", "values": ["linux"]}]},
            {"matchExpressions": [{"key": "node.kubernetes.io/windows-build", "operator": "Exists"}]}
        ]}}}}),
    ] {
        let mut spec = pod_spec_json(None, &[path]);
        spec.as_object_mut().unwrap().remove("nodeSelector");
        merge_obj(&mut spec, &pin);
        specs.push(spec);
    }
    specs
}

/// `kubectl debug node/<node>`'s pod, as kubectl builds it: `nodeName`, a toleration of
/// everything, host namespaces and the node's `/` mounted at `/host` (kubernetes/kubectl
/// `pkg/cmd/debug/debug.go` `generateNodeDebugPod`, `pkg/cmd/debug/profiles.go`
/// `mountRootPartition`), as the API server stores it (hostPath `type` defaulted to "").
fn kubectl_debug_node_pod(node: &str, namespace: &str) -> Json {
    json!({"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": format!("node-debugger-{node}-x7k2p"), "namespace": namespace},
    "spec": {
        "containers": [{"name": "debugger", "image": "busybox", "stdin": true, "tty": true,
            "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/host", "name": "host-root"}]}],
        "nodeName": node,
        "restartPolicy": "Never",
        "tolerations": [{"operator": "Exists"}],
        "hostNetwork": true, "hostPID": true, "hostIPC": true,
        "volumes": [{"name": "host-root", "hostPath": {"path": "/", "type": ""}}]
    }})
}

/// A Linux CSI node plugin without an OS selector: csi-driver-host-path's plugin StatefulSet
/// (kubernetes-csi/csi-driver-host-path `deploy/kubernetes-1.30/hostpath/csi-hostpath-plugin.yaml`,
/// namespace `default`, no nodeSelector), its hostPath volumes as written there.
fn linux_csi_plugin(kind: &str, namespace: &str) -> Json {
    let volumes = json!([
        {"name": "socket-dir", "hostPath": {"path": "/var/lib/kubelet/plugins/csi-hostpath", "type": "DirectoryOrCreate"}},
        {"name": "mountpoint-dir", "hostPath": {"path": "/var/lib/kubelet/pods", "type": "DirectoryOrCreate"}},
        {"name": "registration-dir", "hostPath": {"path": "/var/lib/kubelet/plugins_registry", "type": "Directory"}},
        {"name": "plugins-dir", "hostPath": {"path": "/var/lib/kubelet/plugins", "type": "Directory"}},
        {"name": "csi-data-dir", "hostPath": {"path": "/var/lib/csi-hostpath-data/", "type": "DirectoryOrCreate"}},
        {"name": "dev-dir", "hostPath": {"path": "/dev", "type": "Directory"}}
    ]);
    let spec = json!({
        "serviceAccountName": "csi-hostpathplugin-sa",
        "containers": [{"name": "hostpath", "image": "registry.k8s.io/sig-storage/hostpathplugin:v1.15.0",
            "securityContext": {"privileged": true}}],
        "volumes": volumes,
    });
    wrap(kind, "csi-hostpathplugin", namespace, spec)
}

#[test]
fn linux_node_plugins_and_kubectl_debug_node_are_never_refused() {
    let policies = default_policies();
    // kubectl debug node/<node> in an ordinary namespace: nothing says the node is Linux, so a
    // warning (on a Windows node `/` is the kubelet's drive), never a refusal.
    for ns in ["default", "ops"] {
        let pod = kubectl_debug_node_pod("linux-node-1", ns);
        let r = review(&policies, &Request::create(&pod, ns));
        assert!(r.denied.is_none(), "kubectl debug node refused: {r:?}");
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        assert!(
            r.warnings[0]
                .starts_with("Validation failed for ValidatingAdmissionPolicy 'default-wincsi-")
                || r.warnings[0].starts_with(
                    "Validation failed for ValidatingAdmissionPolicy 'wincsi-system-wincsi-"
                ),
            "{}",
            r.warnings[0]
        );
        assert!(
            r.warnings[0].contains("-kubelet-unpinned-pods' with binding '")
                && r.warnings[0]
                    .contains("hostPath / (release wincsi-system/wincsi): on a Windows node")
                && r.warnings[0].contains("kubernetes.io/os: linux"),
            "{}",
            r.warnings[0]
        );
        assert_eq!(r.audit.len(), 1, "Audit records it too");
    }
    // A Linux CSI node plugin with no OS selector, as every workload kind: admitted, warned.
    for kind in POD_KINDS {
        let obj = linux_csi_plugin(kind, "default");
        let r = review(&policies, &Request::create(&obj, "default"));
        assert!(r.denied.is_none(), "{kind}: {r:?}");
        assert_eq!(r.warnings.len(), 1, "{kind}: one warning per object: {r:?}");
    }
    // Pinned to Linux by any of kubelet's means (beta.kubernetes.io/os too): not even a warning.
    for path in [
        "/var/lib/kubelet",
        "/var/lib/kubelet/plugins_registry",
        "/",
        "/var/lib/kubelet/pods/",
        "/var/lib/../lib/kubelet",
        // Windows spellings on a pod that cannot run on Windows: Linux's problem, not ours.
        r"C:\var\lib\kubelet",
    ] {
        for spec in linux_pod_specs(path) {
            for kind in POD_KINDS {
                let obj = wrap(kind, "longhorn-manager", "longhorn-system", spec.clone());
                let r = review(&policies, &Request::create(&obj, "longhorn-system"));
                assert!(
                    r.denied.is_none() && r.warnings.is_empty() && r.audit.is_empty(),
                    "{kind} {path} {spec}: {r:?}"
                );
            }
        }
        let mut pv_spec = json!({"local": {"path": path}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}});
        let pv = wrap("PersistentVolume", "pv", "", pv_spec.clone());
        let r = review(&policies, &Request::create(&pv, ""));
        assert!(
            r.denied.is_none() && r.warnings.is_empty(),
            "PV {path}: {r:?}"
        );
        // Without the pin a Linux-style path is warned about, a Windows one refused.
        pv_spec.as_object_mut().unwrap().remove("nodeAffinity");
        let pv = wrap("PersistentVolume", "pv", "", pv_spec);
        let r = review(&policies, &Request::create(&pv, ""));
        if path.starts_with('C') {
            assert!(r.denied.is_some(), "PV {path}: {r:?}");
        } else {
            assert!(
                r.denied.is_none() && r.warnings.len() == 1,
                "PV {path}: {r:?}"
            );
        }
    }
    // A Linux pin does not open the csi-proxy pipes: those stay the pipe rule's.
    for spec in linux_pod_specs(r"\\.\pipe\csi-proxy-disk-v1") {
        let pod = wrap("Pod", "x", "default", spec);
        assert!(!admit(&policies, &Request::create(&pod, "default")).admitted());
    }
}

#[test]
fn windows_pods_are_refused_and_unpinned_ones_warned_about() {
    let policies = default_policies();
    for path in [
        "/var/lib/kubelet",
        "/var/lib/kubelet/plugins_registry",
        "/",
        "/var",
        "/var/lib/kubelet/pods/",
        "/var/lib/KUBELE~1",
    ] {
        // Pinned to Windows by any means: refused, with the kubelet rule's message.
        for spec in windows_pod_specs(path) {
            for kind in POD_KINDS {
                let obj = wrap(kind, "x", "default", spec.clone());
                match admit(&policies, &Request::create(&obj, "default")) {
                    Verdict::Denied(name, message) => {
                        assert!(
                            name.ends_with(&format!("-csi-proxy-pipes-{}", policy_id(kind))),
                            "{name}"
                        );
                        assert!(message.contains("pinned to Windows"), "{message}");
                    }
                    Verdict::Admitted => panic!("{kind} {path} {spec} admitted"),
                }
            }
        }
        // Unpinned: admitted with a warning, unless the strict setting asks for a refusal.
        let mut unpinned = pod_spec_json(None, &[path]);
        unpinned.as_object_mut().unwrap().remove("nodeSelector");
        // An affinity term that still admits Windows pins nothing.
        let mut loose = unpinned.clone();
        loose["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
            {"matchExpressions": [{"key": "node-role", "operator": "Exists"}]}
        ]}}});
        for spec in [unpinned, loose] {
            for kind in POD_KINDS {
                let obj = wrap(kind, "x", "default", spec.clone());
                let r = review(&policies, &Request::create(&obj, "default"));
                assert!(r.denied.is_none(), "{kind} {path}: {r:?}");
                assert_eq!(r.warnings.len(), 1, "{kind} {path}: {r:?}");
            }
        }
    }
    // A path written the Windows way needs no pin: refused.
    for path in [
        r"C:\var\lib\kubelet",
        r"\var\lib\kubelet",
        "C:/var/lib/kubelet",
        r"/var\lib/kubelet",
    ] {
        let mut spec = pod_spec_json(None, &[path]);
        spec.as_object_mut().unwrap().remove("nodeSelector");
        let pod = wrap("Pod", "x", "default", spec);
        assert!(
            !admit(&policies, &Request::create(&pod, "default")).admitted(),
            "{path}"
        );
    }
    // Trusted namespaces: neither refused nor warned.
    let pod = kubectl_debug_node_pod("win-node-1", "kube-system");
    let r = review(&policies, &Request::create(&pod, "kube-system"));
    assert!(r.denied.is_none() && r.warnings.is_empty(), "{r:?}");
    // Elsewhere than the kubelet root: nothing to say.
    let mut spec = pod_spec_json(None, &["/data/logs", "/etc/ssl/certs"]);
    spec.as_object_mut().unwrap().remove("nodeSelector");
    let pod = wrap("Pod", "x", "default", spec);
    let r = review(&policies, &Request::create(&pod, "default"));
    assert!(r.denied.is_none() && r.warnings.is_empty(), "{r:?}");
}

/// The id in a policy's name for a kind.
fn policy_id(kind: &str) -> &'static str {
    match kind {
        "Pod" => "pods",
        "Job" => "jobs",
        "CronJob" => "cronjobs",
        "PersistentVolume" => "pvs",
        _ => "workloads",
    }
}

#[test]
fn the_strict_setting_refuses_unpinned_pods_and_the_empty_one_says_nothing() {
    let strict = render(
        RELEASE,
        NAMESPACE,
        &["--set", "admissionPolicy.unpinnedValidationActions={Deny}"],
    )
    .compiled_policies();
    let pod = kubectl_debug_node_pod("node-1", "default");
    match review(&strict, &Request::create(&pod, "default")) {
        Review {
            denied: Some((name, message)),
            warnings,
            ..
        } => {
            assert!(name.ends_with("-kubelet-unpinned-pods"), "{name}");
            assert!(
                message.contains("nothing pins this pod to Linux nodes"),
                "{message}"
            );
            assert!(warnings.is_empty(), "Deny alone warns nothing");
        }
        r => panic!("strict: {r:?}"),
    }
    for kind in POD_KINDS {
        let obj = linux_csi_plugin(kind, "default");
        assert!(
            !admit(&strict, &Request::create(&obj, "default")).admitted(),
            "{kind}"
        );
        // Pinned, it passes under the strict setting too.
        let mut pinned = obj.clone();
        let spec = match kind {
            "Pod" => &mut pinned["spec"],
            "CronJob" => &mut pinned["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            _ => &mut pinned["spec"]["template"]["spec"],
        };
        spec["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
        assert!(
            admit(&strict, &Request::create(&pinned, "default")).admitted(),
            "{kind}"
        );
    }
    let silent = render(
        RELEASE,
        NAMESPACE,
        &["--set", "admissionPolicy.unpinnedValidationActions=null"],
    );
    assert_eq!(silent.policies.len(), 5);
    let r = review(
        &silent.compiled_policies(),
        &Request::create(&pod, "default"),
    );
    assert!(r.denied.is_none() && r.warnings.is_empty(), "{r:?}");
    let off = render(
        RELEASE,
        NAMESPACE,
        &["--set", "admissionPolicy.kubeletDirectories=false"],
    );
    assert_eq!(
        off.policies.len(),
        5,
        "no kubelet rule, no unpinned policies"
    );
}

#[test]
fn an_update_that_pins_a_workload_to_windows_is_judged_like_a_create() {
    let policies = default_policies();
    let mut spec = pod_spec_json(None, &["/var/lib/kubelet"]);
    spec.as_object_mut().unwrap().remove("nodeSelector");
    let old = wrap("DaemonSet", "x", "default", spec.clone());
    spec["nodeSelector"] = json!({"kubernetes.io/os": "windows"});
    let new = wrap("DaemonSet", "x", "default", spec);
    assert!(
        !admit(&policies, &Request::update(&new, &old, "default")).admitted(),
        "pinning a kubelet-root mount to Windows"
    );
    // Unchanged, the update is let through (no new warning either).
    let r = review(&policies, &Request::update(&old, &old, "default"));
    assert!(r.denied.is_none() && r.warnings.is_empty(), "{r:?}");
    // Dropping a Linux pin makes the path unpinned: warned.
    let mut spec = pod_spec_json(None, &["/var/lib/kubelet"]);
    spec["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
    let pinned = wrap("DaemonSet", "x", "default", spec.clone());
    spec.as_object_mut().unwrap().remove("nodeSelector");
    let dropped = wrap("DaemonSet", "x", "default", spec);
    let r = review(&policies, &Request::update(&dropped, &pinned, "default"));
    assert!(r.denied.is_none() && r.warnings.len() == 1, "{r:?}");
}

/// Generated spellings: prefix × the root's segments under variations × what follows.
fn generated_kubelet() -> Vec<String> {
    let prefixes = [
        "C:",
        "c:",
        r"\",
        "/",
        r"\\?\C:",
        r"\\.\c:",
        r"\??\C:",
        r"\\localhost\C$",
        r"\\.\UNC\localhost\c$",
        "D:",
        r"\\fileserver\share",
    ];
    let var = ["var", "VAR", "var.", r"x\..\var", "v~1"];
    let lib = ["lib", "lıb", r".\lib", "lib::$INDEX_ALLOCATION"];
    let kubelet = ["kubelet", "KUBELE~1", "kubelet ", "kubelet2", "kube\tlet"];
    let tails = [
        "",
        r"\plugins\wincsi.csi.io",
        r"\plugins\wincſi.csi.io\csi.sock",
        r"\plugins_registry",
        r"\PLUGIN~1",
        r"\..\..\x",
    ];
    let seps = [r"\", "/", r"\\"];
    let mut out = Vec::new();
    for p in prefixes {
        for v in var {
            for l in lib {
                for k in kubelet {
                    for t in tails {
                        let s = seps[out.len() % seps.len()];
                        out.push(format!("{p}{s}{v}{s}{l}{s}{k}{t}"));
                    }
                }
            }
        }
        out.push(format!(r"{p}\"));
        out.push(format!(r"{p}\logs\app"));
    }
    out
}

#[test]
fn generated_kubelet_spellings_are_refused_unless_plainly_elsewhere() {
    let policies = default_policies();
    let pipe_only = render(
        RELEASE,
        NAMESPACE,
        &["--set", "admissionPolicy.kubeletDirectories=false"],
    )
    .compiled_policies();
    let all = generated_kubelet();
    let (mut reaching, mut admitted) = (0, 0);
    for path in &all {
        let verdict = pod_verdict(&policies, path, "default");
        let before = pod_verdict(&pipe_only, path, "default");
        if reaches_kubelet(path, KUBELET_ROOT) {
            reaching += 1;
            assert!(
                !verdict.admitted(),
                "{path:?} reaches the kubelet root but was admitted"
            );
        } else if plain(path) || !path.to_ascii_uppercase().starts_with('C') {
            // Written plainly, or elsewhere than the kubelet's drive: this rule changes nothing.
            assert_eq!(verdict.admitted(), before.admitted(), "{path:?}");
        }
        // The rule only ever adds refusals.
        assert!(before.admitted() || !verdict.admitted(), "{path:?}");
        if verdict.admitted() {
            admitted += 1;
        }
    }
    assert!(all.len() > 6000, "{} spellings", all.len());
    assert!(
        reaching > 2000,
        "only {reaching} spellings reach the kubelet root"
    );
    assert!(
        admitted > 300,
        "only {admitted} admitted: the rule refuses too much"
    );
    println!(
        "kubelet rule: {} generated spellings, {reaching} reach the kubelet root, {admitted} admitted",
        all.len()
    );
}

#[test]
fn another_kubelet_root_and_driver_name_are_guarded_instead() {
    let r = render(
        RELEASE,
        NAMESPACE,
        &[
            "--set-string",
            r"kubeletRoot=D:\\k\\kubelet",
            "--set",
            "driver.name=iscsi.wincsi.example.com",
        ],
    );
    let policies = r.compiled_policies();
    for path in [
        r"D:\k\kubelet\plugins\iscsi.wincsi.example.com",
        r"d:/K/kubelet/plugins_registry",
        r"D:\k",
        r"\k\kubelet",
        r"D:\k\kubelet\x\..",
    ] {
        assert!(reaches_kubelet(path, r"D:\k\kubelet"), "{path}");
        assert!(
            !pod_verdict(&policies, path, "default").admitted(),
            "{path}"
        );
    }
    for path in [
        r"C:\var\lib\kubelet\plugins",
        r"D:\k2\kubelet",
        r"D:\kubelet",
        r"E:\k\kubelet",
    ] {
        assert!(!reaches_kubelet(path, r"D:\k\kubelet"), "{path}");
        assert!(pod_verdict(&policies, path, "default").admitted(), "{path}");
    }
    // The release's own node pods (HostProcess or not) are admitted in its namespace.
    all_admitted(&policies, &release_objects(&r)).unwrap();
}

#[test]
fn the_policies_judge_only_objects_with_a_host_path() {
    let policies = default_policies();
    assert_eq!(policies.len(), 10);
    let no_volumes = pod_spec_json(None, &[]);
    let mut empty_dir = pod_spec_json(None, &[]);
    empty_dir["volumes"] =
        json!([{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}]);
    for kind in POD_KINDS {
        for spec in [&no_volumes, &empty_dir] {
            let obj = wrap(kind, "app", "default", spec.clone());
            let req = Request::create(&obj, "default");
            for p in policies.iter().filter(|p| p.matches(kind, "CREATE")) {
                assert!(
                    !p.applies(&req),
                    "{} judged a {kind} without hostPath: {spec}",
                    p.name
                );
            }
        }
        let obj = wrap(kind, "app", "default", pod_spec_json(None, &[r"D:\logs"]));
        let req = Request::create(&obj, "default");
        let judged = policies
            .iter()
            .filter(|p| p.matches(kind, "CREATE") && p.applies(&req))
            .count();
        assert_eq!(
            judged, 2,
            "{kind} with a hostPath: the pipe rule and the unpinned rule"
        );
    }
    let csi_pv = wrap(
        "PersistentVolume",
        "pv",
        "",
        json!({"csi": {"driver": "wincsi.csi.io", "volumeHandle": "x"}}),
    );
    let req = Request::create(&csi_pv, "");
    assert!(
        policies
            .iter()
            .filter(|p| p.matches("PersistentVolume", "CREATE"))
            .all(|p| !p.applies(&req))
    );
    let local_pv = wrap(
        "PersistentVolume",
        "pv",
        "",
        json!({"local": {"path": r"D:\disks\1"}}),
    );
    let req = Request::create(&local_pv, "");
    assert!(
        policies
            .iter()
            .filter(|p| p.matches("PersistentVolume", "CREATE"))
            .all(|p| p.applies(&req))
    );
}

#[test]
fn the_only_non_ascii_letters_that_upper_case_to_ascii_are_the_two_the_policy_knows() {
    // NTFS compares names upper-cased through its upcase table (one UTF-16 unit to one); a
    // non-ASCII character whose upper case is an ASCII letter would spell a protected name.
    let found: Vec<char> = (0x80..=0xFFFF_u32)
        .filter_map(char::from_u32)
        .filter(|c| {
            let mut up = c.to_uppercase();
            matches!((up.next(), up.next()), (Some(u), None) if u.is_ascii_alphabetic())
        })
        .collect();
    assert_eq!(found, ['\u{131}', '\u{17F}']);
}
