//! The release workflow (`.github/workflows/release.yml`) and what it publishes agree with the chart:
//!
//! - the workflow's `IMAGE` is the chart's `driver.image.repository`, the chart's tag defaults to its
//!   `appVersion`, `appVersion` equals the chart's `version` and the Cargo workspace version (a tag `vX.Y.Z` then
//!   names all of them; `scripts/release-check.sh` refuses a tag that does not), and the HostProcess suffix the chart
//!   appends is the one `scripts/release-images.sh` pushes;
//! - the workflow runs on tags only, with no permission at the top and on each job only what it needs, every action
//!   pinned to a commit SHA with the tag it stands for in a comment, every job and every step
//!   with a time limit, and the steps the issue asks for: the tag check, the image script, keyless signing of
//!   images, chart and checksums, the chart as an OCI artifact, the SBOM;
//! - the image script builds the three Windows Server versions and gives each list entry its `os.version`;
//! - a tag publishes only after the test workflow (`.github/workflows/test.yml`, `.ci/run`) passed on that commit:
//!   it is called as a reusable workflow and every other job needs it;
//! - after the push, `scripts/release-public-check.py` pulls the image manifests and the chart with no credentials
//!   before the GitHub release is made; run here with the workflow's own arguments against a fake registry on
//!   loopback, it passes public packages and fails, naming each package's GHCR settings page, while one is private
//!   (403 DENIED, or a refused anonymous token), a tag is missing, or the chart layer is not what its digest says.
//!
//! `.ci/chart-check.sh` validates the workflows against the GitHub-workflow schema (offline) and runs the shell
//! scripts.

// Shared with the other chart test crates.
#[allow(dead_code)]
mod chart_support;

use std::collections::BTreeSet;

use chart_support::{chart_dir, helm_template, helms, read_yaml, repo_root};
use serde_json::Value as Json;

fn text(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn workflow() -> Json {
    serde_norway::from_str(&text(".github/workflows/release.yml")).expect("release.yml is YAML")
}

fn cargo_version() -> String {
    let cargo = text("Cargo.toml");
    let section = cargo
        .split_once("[workspace.package]")
        .expect("workspace.package")
        .1;
    section
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("workspace version")
        .to_owned()
}

#[test]
fn the_chart_installs_what_the_release_publishes() {
    let chart = read_yaml(&chart_dir().join("Chart.yaml"));
    let values = read_yaml(&chart_dir().join("values.yaml"));
    let version = chart["version"].as_str().expect("version");
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(version),
        "appVersion = version"
    );
    assert_eq!(
        cargo_version(),
        version,
        "Cargo workspace version = chart version"
    );
    let w = workflow();
    let image = w["env"]["IMAGE"].as_str().expect("release.yml env.IMAGE");
    assert_eq!(
        values["driver"]["image"]["repository"].as_str(),
        Some(image),
        "the chart's driver image is the one the release pushes"
    );
    assert_eq!(
        values["driver"]["image"]["tag"], "",
        "the tag defaults to appVersion"
    );
    assert_eq!(values["driver"]["image"]["digest"], "");
    let script = text("scripts/release-images.sh");
    let suffix = values["driver"]["image"]["hostProcessTagSuffix"]
        .as_str()
        .expect("suffix");
    assert!(
        script.contains(&format!("\"$IMAGE:$VERSION{suffix}\"")),
        "release-images.sh pushes the HostProcess image as <version>{suffix}"
    );
    // And the rendered pods say so, in both modes, with both Helms.
    for (name, helm) in helms() {
        for (args, want) in [
            (vec![], format!("{image}:{version}")),
            (
                vec!["--set", "mode=hostProcess"],
                format!("{image}:{version}{suffix}"),
            ),
        ] {
            let objects = helm_template(&helm, &args).unwrap_or_else(|e| panic!("{name}: {e}"));
            let ds = objects
                .iter()
                .find(|o| o["kind"] == "DaemonSet")
                .expect("node DaemonSet");
            let driver = ds["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == "wincsi-node")
                .expect("driver container");
            assert_eq!(
                driver["image"].as_str(),
                Some(want.as_str()),
                "{name} {args:?}"
            );
        }
    }
    // The chart is pushed where the README and docs/images.md say it is.
    let repo = w["env"]["CHART_REPOSITORY"]
        .as_str()
        .expect("CHART_REPOSITORY");
    assert!(
        text("docs/images.md").contains(&format!("{repo}/wincsi")),
        "docs/images.md names {repo}/wincsi"
    );
}

/// The workflow's steps, in order.
fn steps(w: &Json) -> Vec<&Json> {
    w["jobs"]
        .as_object()
        .expect("jobs")
        .values()
        .flat_map(|j| j["steps"].as_array().into_iter().flatten())
        .collect()
}

#[test]
fn the_workflow_runs_on_tags_pinned_bounded_and_least_privileged() {
    let w = workflow();
    let on = &w["on"];
    assert_eq!(
        on.as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["push".to_owned()]),
        "tags only"
    );
    assert!(on["push"]["tags"].is_array() && on["push"]["branches"].is_null());
    assert_eq!(
        w["permissions"],
        serde_json::json!({}),
        "nothing at the top"
    );
    // Each job only what it needs: the tests read, the publishing job pushes and signs, the check reads, the GitHub
    // release writes contents.
    let wanted: [(&str, &[(&str, &str)]); 4] = [
        ("test", &[("contents", "read")]),
        (
            "release",
            &[
                ("contents", "read"),
                ("packages", "write"),
                ("id-token", "write"),
            ],
        ),
        ("public", &[("contents", "read")]),
        ("github-release", &[("contents", "write")]),
    ];
    let jobs = w["jobs"].as_object().unwrap();
    assert_eq!(
        jobs.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        wanted.iter().map(|(j, _)| *j).collect(),
    );
    for (name, perms) in wanted {
        let job = &jobs[name];
        // A reusable workflow's call has no timeout of its own (the called jobs have theirs).
        assert!(
            job["uses"].is_string() || job["timeout-minutes"].as_u64().is_some(),
            "job {name}: timeout-minutes"
        );
        let granted: BTreeSet<(&str, &str)> = job["permissions"]
            .as_object()
            .expect("job permissions")
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
            .collect();
        assert_eq!(
            granted,
            perms.iter().copied().collect(),
            "job {name}: exactly what it needs"
        );
    }
    for step in steps(&w) {
        let name = step["name"].as_str().expect("every step is named");
        let limit = step["timeout-minutes"].as_u64();
        assert!(
            limit.is_some_and(|m| m > 0 && m <= 90),
            "{name}: timeout-minutes"
        );
    }
    // Every action pinned to a full commit SHA, the tag it stands for in a comment.
    let raw = text(".github/workflows/release.yml");
    let mut pinned = 0;
    for line in raw
        .lines()
        .filter(|l| l.trim_start().starts_with("uses:") || l.contains("- uses:"))
        // A workflow of this repository is called at the caller's own commit.
        .filter(|l| !l.contains("uses: ./.github/workflows/"))
    {
        let spec = line.split("uses:").nth(1).unwrap().trim();
        let (action, rest) = spec
            .split_once('@')
            .unwrap_or_else(|| panic!("{line}: no @"));
        let (sha, comment) = rest
            .split_once(" # ")
            .unwrap_or_else(|| panic!("{line}: no # vX.Y.Z"));
        assert!(action.contains('/'), "{line}");
        assert!(
            sha.len() == 40
                && sha
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{line}: not pinned to a commit SHA"
        );
        assert!(
            comment.trim().starts_with('v'),
            "{line}: the comment names the tag"
        );
        pinned += 1;
    }
    assert!(pinned >= 5, "{pinned} actions");
}

#[test]
fn the_workflow_builds_signs_and_publishes_what_the_issue_lists() {
    let w = workflow();
    let runs: Vec<String> = steps(&w)
        .iter()
        .map(|s| {
            format!(
                "{} {}",
                s["uses"].as_str().unwrap_or(""),
                s["run"].as_str().unwrap_or("")
            )
        })
        .collect();
    let position = |needle: &str| {
        runs.iter()
            .position(|r| r.contains(needle))
            .unwrap_or_else(|| panic!("no step runs {needle}"))
    };
    // The tag check comes before anything is pushed.
    assert!(position("scripts/release-check.sh") < position("scripts/release-images.sh"));
    assert!(position("docker/setup-buildx-action@") < position("scripts/release-images.sh"));
    assert!(position("sigstore/cosign-installer@") < position("cosign sign --yes \"$IMAGE@"));
    for needle in [
        "cosign sign --yes \"$IMAGE@$(cat dist/index.digest)\"",
        "cosign sign --yes \"$IMAGE@$(cat dist/hostprocess.digest)\"",
        "helm push",
        "cosign sign --yes \"${CHART_REPOSITORY#oci://}/wincsi@$digest\"",
        "anchore/sbom-action@",
        "cosign attest --yes --type spdxjson",
        "sha256sum",
        "cosign sign-blob --yes --bundle SHA256SUMS.sigstore.json SHA256SUMS",
        "gh release create",
    ] {
        position(needle);
    }
    assert!(
        w["env"]["CHART_REPOSITORY"]
            .as_str()
            .unwrap()
            .starts_with("oci://")
    );
    // The image script: the three Windows Server versions, the HostProcess image, descriptors with os.version.
    let script = text("scripts/release-images.sh");
    for want in [
        "OSVERSIONS=(1809 ltsc2022 ltsc2025)",
        "[1809]=10.0.17763 [ltsc2022]=10.0.20348 [ltsc2025]=10.0.26100",
        "--platform windows/amd64",
        "--target binary",
        "build hostprocess",
        "\"os.version\": $osv",
        "docker buildx imagetools create --tag \"$IMAGE:$VERSION\" \"${descriptors[@]}\"",
    ] {
        assert!(script.contains(want), "release-images.sh lacks {want}");
    }
    let dockerfile = text("Dockerfile.windows");
    assert!(dockerfile.contains("FROM scratch AS binary"));
    for v in ["1809", "ltsc2022", "ltsc2025"] {
        assert!(
            text("docs/images.md").contains(&format!("`{v}`")),
            "docs/images.md: {v}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// A tag publishes only after the tests passed on it; anyone can pull what it publishes
// ---------------------------------------------------------------------------------------

/// The jobs a job needs, directly.
fn needs(job: &Json) -> Vec<String> {
    match &job["needs"] {
        Json::String(s) => vec![s.clone()],
        Json::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// Every job `id` waits for, transitively.
fn all_needs(w: &Json, id: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = needs(&w["jobs"][id]);
    while let Some(n) = todo.pop() {
        if out.insert(n.clone()) {
            todo.extend(needs(&w["jobs"][n.as_str()]));
        }
    }
    out
}

#[test]
fn a_tag_publishes_only_after_the_test_workflow_passed_on_that_commit() {
    let w = workflow();
    // The test workflow, called on the tagged commit (a reusable workflow: no ref, so the caller's commit).
    assert_eq!(w["jobs"]["test"]["uses"], "./.github/workflows/test.yml");
    for (id, job) in w["jobs"].as_object().unwrap() {
        if id != "test" {
            assert!(
                all_needs(&w, id).contains("test"),
                "job {id} may run before the tests passed: {job}"
            );
        }
    }
    let test: Json =
        serde_norway::from_str(&text(".github/workflows/test.yml")).expect("test.yml is YAML");
    assert!(
        test["on"]["workflow_call"].is_null() && test["on"].get("workflow_call").is_some(),
        "test.yml can be called by the release workflow"
    );
    assert_eq!(test["permissions"], serde_json::json!({"contents": "read"}));
    let jobs = test["jobs"].as_object().expect("jobs");
    let runs: Vec<&str> = jobs
        .values()
        .flat_map(|j| j["steps"].as_array().unwrap())
        .filter_map(|s| s["run"].as_str())
        .collect();
    assert!(
        runs.iter().any(|r| r.trim() == "bash .ci/run"),
        "the whole suite, as CI runs it: {runs:?}"
    );
    // On Debian 12 as root, with the Rust of Dockerfile.windows's build stage (what CI and the images use).
    let rust = text("Dockerfile.windows")
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_VERSION="))
        .expect("RUST_VERSION")
        .to_owned();
    for (id, job) in jobs {
        assert_eq!(
            job["container"].as_str(),
            Some(format!("rust:{rust}-bookworm").as_str()),
            "{id}"
        );
        assert!(job["timeout-minutes"].as_u64().is_some(), "{id}");
    }
}

#[test]
fn the_anonymous_pull_check_runs_after_the_push_and_before_the_github_release() {
    let w = workflow();
    let public = &w["jobs"]["public"];
    assert_eq!(needs(public), ["release"]);
    let run = public["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["run"].as_str())
        .find(|r| r.contains("release-public-check.py"))
        .expect("the public job runs scripts/release-public-check.py");
    for want in [
        "--image \"$IMAGE\"",
        "--chart \"$CHART_REPOSITORY/wincsi\"",
        "--version \"${GITHUB_REF_NAME#v}\"",
        "--summary \"$GITHUB_STEP_SUMMARY\"",
    ] {
        assert!(run.contains(want), "{run} lacks {want}");
    }
    assert!(!run.contains("--plain-http") && !run.contains("--connect"));
    // No credential reaches the check: no login, no token, no packages permission.
    assert_eq!(
        public["permissions"],
        serde_json::json!({"contents": "read"})
    );
    assert!(!serde_json::to_string(public).unwrap().contains("secrets."));
    let release = &w["jobs"]["github-release"];
    assert!(all_needs(&w, "github-release").contains("public"));
    assert!(
        serde_json::to_string(release)
            .unwrap()
            .contains("gh release create")
    );
    // The release docs tell the maintainer what to do once, with the page.
    let images = text("docs/images.md");
    for want in [
        "https://github.com/orgs/wincsi/packages/container/wincsi-node/settings",
        "https://github.com/orgs/wincsi/packages/container/charts%2Fwincsi/settings",
        "Change visibility",
        "scripts/release-public-check.py",
    ] {
        assert!(images.contains(want), "docs/images.md lacks {want}");
    }
}

/// A registry with the OCI distribution API's anonymous flow, on loopback: a 401 with a Bearer challenge, an anonymous
/// token from the realm, then the manifest or blob — or, for a private repository, what GHCR answers a token without
/// access (403 DENIED), for a missing tag 404 MANIFEST_UNKNOWN.
struct FakeRegistry {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone, Default)]
struct RegistryContent {
    /// (repository, tag) → manifest JSON.
    manifests: std::collections::HashMap<(String, String), Json>,
    /// digest → bytes.
    blobs: std::collections::HashMap<String, Vec<u8>>,
    /// Repositories that answer 403 DENIED to an anonymous token.
    private: BTreeSet<String>,
    /// The token endpoint refuses anonymous tokens for private repositories (401), as some registries do.
    refuse_tokens: bool,
}

fn http_answer(
    stream: &mut std::net::TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) {
    use std::io::Write;
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

impl FakeRegistry {
    fn start(content: RegistryContent) -> FakeRegistry {
        use std::io::{BufRead, BufReader};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
                let mut stream = match listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        // Polling the listener until the test ends (no readiness API in std).
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        continue;
                    }
                    Err(_) => break,
                };
                stream.set_nonblocking(false).unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                let mut auth = String::new();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.strip_prefix("Authorization: ") {
                        auth = v.trim().to_owned();
                    }
                }
                serve_registry(&mut stream, addr, &content, &target, &auth);
            }
        });
        FakeRegistry {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_registry(
    stream: &mut std::net::TcpStream,
    addr: std::net::SocketAddr,
    c: &RegistryContent,
    target: &str,
    auth: &str,
) {
    let error = |code: &str| {
        serde_json::to_vec(
            &serde_json::json!({"errors": [{"code": code, "message": code.to_lowercase()}]}),
        )
        .unwrap()
    };
    if let Some(query) = target.strip_prefix("/token?") {
        let scope = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("scope="))
            .unwrap_or("")
            .replace("%3A", ":")
            .replace("%2F", "/");
        let repo = scope
            .strip_prefix("repository:")
            .and_then(|s| s.strip_suffix(":pull"))
            .unwrap_or("");
        if c.refuse_tokens && c.private.contains(repo) {
            return http_answer(stream, "401 Unauthorized", &[], &error("UNAUTHORIZED"));
        }
        let body =
            serde_json::to_vec(&serde_json::json!({"token": format!("anon:{repo}")})).unwrap();
        return http_answer(
            stream,
            "200 OK",
            &[("Content-Type", "application/json".into())],
            &body,
        );
    }
    let Some(rest) = target.strip_prefix("/v2/") else {
        return http_answer(stream, "404 Not Found", &[], b"");
    };
    let (repo, kind, reference) = if let Some((repo, tag)) = rest.split_once("/manifests/") {
        (repo, "manifests", tag)
    } else if let Some((repo, digest)) = rest.split_once("/blobs/") {
        (repo, "blobs", digest)
    } else {
        return http_answer(stream, "404 Not Found", &[], b"");
    };
    if auth != format!("Bearer anon:{repo}") {
        let challenge = format!(
            "Bearer realm=\"http://{addr}/token\",service=\"fake-registry\",scope=\"repository:{repo}:pull\""
        );
        return http_answer(
            stream,
            "401 Unauthorized",
            &[("WWW-Authenticate", challenge)],
            &error("UNAUTHORIZED"),
        );
    }
    if c.private.contains(repo) {
        return http_answer(stream, "403 Forbidden", &[], &error("DENIED"));
    }
    let found = match kind {
        "manifests" => c
            .manifests
            .get(&(repo.to_owned(), reference.to_owned()))
            .map(|m| serde_json::to_vec(m).unwrap()),
        _ => c.blobs.get(reference).cloned(),
    };
    match found {
        Some(body) => http_answer(stream, "200 OK", &[], &body),
        None => http_answer(
            stream,
            "404 Not Found",
            &[],
            &error(if kind == "manifests" {
                "MANIFEST_UNKNOWN"
            } else {
                "BLOB_UNKNOWN"
            }),
        ),
    }
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    format!(
        "sha256:{}",
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// What the release pushes for `version`, as the registry holds it: the manifest list of three Windows images, the
/// HostProcess image, and the chart packaged by Helm.
fn released(
    image_repo: &str,
    chart_repo: &str,
    version: &str,
    chart_tgz: Vec<u8>,
) -> RegistryContent {
    let mut c = RegistryContent::default();
    let entry = |build: &str| {
        serde_json::json!({"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(build.as_bytes()), "size": 1024,
            "platform": {"os": "windows", "architecture": "amd64", "os.version": build}})
    };
    c.manifests.insert(
        (image_repo.to_owned(), version.to_owned()),
        serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [entry("10.0.17763.8000"), entry("10.0.20348.4000"), entry("10.0.26100.5000")]}),
    );
    c.manifests.insert(
        (image_repo.to_owned(), format!("{version}-hostprocess")),
        serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(b"cfg"), "size": 3},
            "layers": []}),
    );
    let config = b"{}".to_vec();
    c.manifests.insert(
        (chart_repo.to_owned(), version.to_owned()),
        serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": sha256(&config), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                "digest": sha256(&chart_tgz), "size": chart_tgz.len()}]}),
    );
    c.blobs.insert(sha256(&config), config);
    c.blobs.insert(sha256(&chart_tgz), chart_tgz);
    c
}

struct CheckRun {
    ok: bool,
    stdout: String,
    stderr: String,
    summary: String,
}

/// scripts/release-public-check.py with the workflow's own arguments, connected to `registry` for ghcr.io.
fn public_check(registry: &FakeRegistry, version: &str, github_actions: bool) -> CheckRun {
    let w = workflow();
    let image = w["env"]["IMAGE"].as_str().unwrap();
    let chart = format!("{}/wincsi", w["env"]["CHART_REPOSITORY"].as_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.md");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(repo_root().join("scripts/release-public-check.py"))
        .args(["--image", image, "--chart", &chart, "--version", version])
        .arg("--summary")
        .arg(&summary)
        .args([
            "--connect",
            &format!("ghcr.io={}", registry.addr),
            "--plain-http",
        ])
        .env_remove("GITHUB_ACTIONS");
    if github_actions {
        cmd.env("GITHUB_ACTIONS", "true");
    }
    let out = cmd.output().expect("python3 runs");
    CheckRun {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        summary: std::fs::read_to_string(&summary).unwrap_or_default(),
    }
}

#[test]
fn the_anonymous_pull_check_passes_public_packages_and_fails_loudly_while_one_is_private() {
    let chart = read_yaml(&chart_dir().join("Chart.yaml"));
    let version = chart["version"].as_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let helm = chart_support::helm4();
    let out = std::process::Command::new(&helm)
        .arg("package")
        .arg(chart_dir())
        .arg("--destination")
        .arg(dir.path())
        .env("HELM_CACHE_HOME", dir.path().join("cache"))
        .env("HELM_CONFIG_HOME", dir.path().join("config"))
        .env("HELM_DATA_HOME", dir.path().join("data"))
        .output()
        .expect("helm package");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tgz =
        std::fs::read(dir.path().join(format!("wincsi-{version}.tgz"))).expect("the chart package");
    let (image_repo, chart_repo) = ("wincsi/wincsi-node", "wincsi/charts/wincsi");
    let content = released(image_repo, chart_repo, &version, tgz.clone());

    // Everything public: the three references pulled, the chart's digest and Chart.yaml checked.
    let r = FakeRegistry::start(content.clone());
    let run = public_check(&r, &version, false);
    assert!(run.ok, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("all 3 references pulled anonymously"),
        "{}",
        run.stdout
    );
    assert!(
        run.summary.contains(
            "manifest list, 3 Windows images (10.0.17763.8000, 10.0.20348.4000, 10.0.26100.5000)"
        ) && run
            .summary
            .contains(&format!("Helm chart wincsi {version}"))
            && !run.summary.contains("NOT PULLABLE"),
        "{}",
        run.summary
    );
    drop(r);

    let image_page = "https://github.com/orgs/wincsi/packages/container/wincsi-node/settings";
    let chart_page = "https://github.com/orgs/wincsi/packages/container/charts%2Fwincsi/settings";
    // The image private (GHCR's answer to an anonymous token without access), the chart public.
    let mut private_image = content.clone();
    private_image.private.insert(image_repo.to_owned());
    let r = FakeRegistry::start(private_image);
    let run = public_check(&r, &version, true);
    assert!(!run.ok);
    assert!(
        run.stderr
            .contains("2 of 3 references cannot be pulled anonymously"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("answered 403 (DENIED)") && run.stderr.contains(image_page),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains(chart_page),
        "the chart is public: {}",
        run.stderr
    );
    assert!(
        run.stdout
            .contains("::error title=Release not public::ghcr.io/wincsi/wincsi-node:"),
        "an annotation in the run: {}",
        run.stdout
    );
    assert!(
        run.summary.contains("**NOT PULLABLE**")
            && run.summary.contains(image_page)
            && run.summary.contains("Change visibility")
            && run.summary.contains("re-run the failed jobs"),
        "{}",
        run.summary
    );
    drop(r);

    // The chart private, and a registry that refuses the anonymous token itself.
    let mut private_chart = content.clone();
    private_chart.private.insert(chart_repo.to_owned());
    private_chart.refuse_tokens = true;
    let r = FakeRegistry::start(private_chart);
    let run = public_check(&r, &version, false);
    assert!(!run.ok);
    assert!(
        run.stderr.contains(chart_page) && !run.stderr.contains(image_page),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("answered 401 (UNAUTHORIZED)"),
        "{}",
        run.stderr
    );
    drop(r);

    // A tag that is not there, a chart of another version, a chart layer that is not its digest.
    let r = FakeRegistry::start(content.clone());
    let run = public_check(&r, "9.9.9", false);
    assert!(
        !run.ok && run.stderr.contains("answered 404 (MANIFEST_UNKNOWN)"),
        "{}",
        run.stderr
    );
    drop(r);
    let mut tampered = content.clone();
    let digest = sha256(&tgz);
    tampered.blobs.insert(digest, b"not the chart".to_vec());
    let r = FakeRegistry::start(tampered);
    let run = public_check(&r, &version, false);
    assert!(
        !run.ok && run.stderr.contains("chart layer is not sha256:"),
        "{}",
        run.stderr
    );
    drop(r);
    let mut other = released(image_repo, chart_repo, &version, tgz.clone());
    other.manifests.insert(
        (chart_repo.to_owned(), "0.0.1".to_owned()),
        content.manifests[&(chart_repo.to_owned(), version.clone())].clone(),
    );
    for tag in ["0.0.1", "0.0.1-hostprocess"] {
        let from = if tag.ends_with("hostprocess") {
            format!("{version}-hostprocess")
        } else {
            version.clone()
        };
        other.manifests.insert(
            (image_repo.to_owned(), tag.to_owned()),
            content.manifests[&(image_repo.to_owned(), from)].clone(),
        );
    }
    let r = FakeRegistry::start(other);
    let run = public_check(&r, "0.0.1", false);
    assert!(
        !run.ok
            && run.stderr.contains(&format!(
                "chart layer is wincsi {version}, not wincsi 0.0.1"
            )),
        "{}",
        run.stderr
    );
}
