//! The Windows-runner workflow (`.github/workflows/windows-real-node.yml`) read as a Windows CI engineer reads it,
//! without a runner: what would make a leg hang, hide a failure, or prove something other than what ships.
//!
//! Rules, each with a mutated copy it must refuse (`each_rule_refuses_its_mutation`):
//! * every job and every step has a `timeout-minutes`, each step's below its job's;
//! * a step that runs the kit (`check-node.sh`, `e2e-external.sh`, `container.sh`) is a proof: its name starts with
//!   `Proof:`, it has an id, runs `if: ${{ !cancelled() }}` and writes its summary under that id (`--label ID`);
//! * each Windows job ends with one gate (`gate.py`, `!cancelled()`, after every proof, `STEPS: toJSON(steps)`) whose
//!   proofs are exactly the job's proof steps;
//! * the build job runs Dockerfile.windows's `build` stage: its image (`rust:<RUST_VERSION>-bookworm`) and its cargo
//!   command (`--target x86_64-pc-windows-gnu`); no Windows job builds a binary of its own; every check-node proof
//!   expects `tool.target=x86_64-pc-windows-gnu`;
//! * the PowerShell scripts run under Windows PowerShell (`shell: powershell` or `powershell -File`, never pwsh), and
//!   the set-up script refuses any other edition;
//! * the iSCSI portal is not a loopback address: nothing in the workflow sets it, and the set-up script hands out
//!   the NIC address its `Get-PortalAddress` picks, which excludes `127.*`;
//! * actions are pinned by commit, with the tag named beside; artifact names never carry a raw ref;
//! * the csiProxy-mode container (`scripts/real-node/container.sh`) mounts what the chart mounts and passes the
//!   chart's driver args (Helm 4 renders the chart; `--log-format` is the one allowed difference).

#[allow(dead_code)]
mod chart_support;

use std::collections::BTreeSet;

use chart_support::{helm_template, helm4, repo_root};
use serde_json::{Value as Json, json};

const WORKFLOW: &str = ".github/workflows/windows-real-node.yml";
const TARGET: &str = "x86_64-pc-windows-gnu";

/// Everything the rules read, as text, so a test can mutate any of it.
#[derive(Clone)]
struct Kit {
    raw: String,
    workflow: Json,
    dockerfile: String,
    setup: String,
    container: String,
    chart: ChartContainer,
}

/// The chart's csiProxy-mode driver container (metrics enabled), rendered.
#[derive(Clone, Debug)]
struct ChartContainer {
    args: Vec<String>,
    mounts: BTreeSet<(String, String)>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn parse(raw: &str) -> Json {
    serde_norway::from_str(raw).expect("the workflow is YAML")
}

fn chart_container() -> ChartContainer {
    let objects =
        helm_template(&helm4(), &["--set", "metrics.enabled=true"]).expect("the chart renders");
    let ds = objects
        .iter()
        .find(|o| {
            o["kind"] == "DaemonSet"
                && o["metadata"]["labels"]["app.kubernetes.io/component"] == "node"
        })
        .expect("node DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    let driver = spec["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "wincsi-node")
        .expect("the driver container is named wincsi-node");
    let host_path = |volume: &str| {
        spec["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == volume)
            .and_then(|v| v["hostPath"]["path"].as_str())
            .unwrap_or_else(|| panic!("volume {volume} is a hostPath"))
            .to_owned()
    };
    ChartContainer {
        args: strings(&driver["args"]),
        mounts: driver["volumeMounts"]
            .as_array()
            .expect("volumeMounts")
            .iter()
            .map(|m| {
                (
                    host_path(m["name"].as_str().expect("name")),
                    m["mountPath"].as_str().expect("path").to_owned(),
                )
            })
            .collect(),
    }
}

fn strings(v: &Json) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn kit() -> Kit {
    let raw = read(WORKFLOW);
    Kit {
        workflow: parse(&raw),
        raw,
        dockerfile: read("Dockerfile.windows"),
        setup: read("scripts/real-node/setup-windows.ps1"),
        container: read("scripts/real-node/container.sh"),
        chart: chart_container(),
    }
}

fn text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Null => String::new(),
        other => other.to_string(),
    }
}

/// `${{ expr }}` → `expr`, spaces removed.
fn expr(v: &Json) -> String {
    let t = text(v);
    let t = t.trim();
    let t = t
        .strip_prefix("${{")
        .and_then(|t| t.strip_suffix("}}"))
        .unwrap_or(t);
    t.chars().filter(|c| !c.is_whitespace()).collect()
}

fn jobs(w: &Json) -> Vec<(String, &Json)> {
    w["jobs"]
        .as_object()
        .expect("jobs")
        .iter()
        .map(|(k, v)| (k.clone(), v))
        .collect()
}

fn steps(job: &Json) -> &[Json] {
    job["steps"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn is_windows(job: &Json) -> bool {
    let runs_on = text(&job["runs-on"]);
    if runs_on.contains("matrix.image") {
        return strings(&job["strategy"]["matrix"]["image"])
            .iter()
            .all(|i| i.starts_with("windows-"));
    }
    runs_on.starts_with("windows-")
}

fn step_name(step: &Json) -> String {
    text(&step["name"])
}

fn runs_kit(run: &str) -> bool {
    ["check-node.sh", "e2e-external.sh", "container.sh"]
        .iter()
        .any(|s| run.contains(s))
}

fn is_proof(step: &Json) -> bool {
    step_name(step).starts_with("Proof:")
}

/// The `cargo build` command of Dockerfile.windows's build stage (its RUN line, up to `&&`).
fn dockerfile_cargo_build(dockerfile: &str) -> Option<String> {
    let joined = dockerfile.replace("\\\n", " ");
    let line = joined.lines().find(|l| l.contains("cargo build"))?;
    let cmd = &line[line.find("cargo build")?..];
    let cmd = cmd.split("&&").next()?;
    Some(cmd.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn dockerfile_arg(dockerfile: &str, name: &str) -> Option<String> {
    dockerfile.lines().find_map(|l| {
        l.trim()
            .strip_prefix(&format!("ARG {name}="))
            .map(str::to_owned)
    })
}

/// `NAME=( ... )` of a shell script: its words, comments and quotes dropped.
fn shell_array(script: &str, name: &str) -> Vec<String> {
    let start = format!("{name}=(");
    let body = script
        .split_once(&start)
        .and_then(|(_, rest)| rest.split_once("\n)"))
        .map(|(body, _)| body)
        .unwrap_or_else(|| panic!("no {name}=( ... ) array"));
    body.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_matches('\'').trim_matches('"').to_owned())
        .collect()
}

fn shell_var(script: &str, name: &str) -> Option<String> {
    script.lines().find_map(|l| {
        l.trim()
            .strip_prefix(&format!("{name}="))
            .map(|v| v.trim_matches('\'').to_owned())
    })
}

/// The PowerShell function `name`'s body (up to the first line that is a lone `}`).
fn ps_function<'a>(script: &'a str, name: &str) -> Option<&'a str> {
    let start = script.find(&format!("function {name}"))?;
    let rest = &script[start..];
    Some(&rest[..rest.find("\n}")?])
}

/// Every rule; a violation each, empty when the kit is right.
fn lint(k: &Kit) -> Vec<String> {
    let mut v = Vec::new();
    let w = &k.workflow;
    // Timeouts.
    for (id, job) in jobs(w) {
        let Some(job_limit) = job["timeout-minutes"].as_u64() else {
            v.push(format!("job {id} has no timeout-minutes"));
            continue;
        };
        for step in steps(job) {
            match step["timeout-minutes"].as_u64() {
                None => v.push(format!(
                    "{id}: step {:?} has no timeout-minutes",
                    step_name(step)
                )),
                Some(t) if t >= job_limit => v.push(format!(
                    "{id}: step {:?} may take the whole job ({t} min)",
                    step_name(step)
                )),
                Some(_) => {}
            }
        }
    }
    // Proofs and gates.
    for (id, job) in jobs(w) {
        let mut proofs = Vec::new();
        let mut gates = Vec::new();
        for (i, step) in steps(job).iter().enumerate() {
            let run = text(&step["run"]);
            let name = step_name(step);
            if runs_kit(&run) && !is_proof(step) {
                v.push(format!(
                    "{id}: step {name:?} runs the kit but is not a `Proof:` step"
                ));
            }
            if is_proof(step) {
                let sid = text(&step["id"]);
                if sid.is_empty() {
                    v.push(format!("{id}: proof {name:?} has no id"));
                } else if !run.contains(&format!("--label {sid}")) {
                    v.push(format!(
                        "{id}: proof {sid} does not write its summary under its id (--label {sid})"
                    ));
                }
                if expr(&step["if"]) != "!cancelled()" {
                    v.push(format!(
                        "{id}: proof {name:?} does not run `if: ${{{{ !cancelled() }}}}`"
                    ));
                }
                proofs.push((i, sid));
            }
            if run.contains("gate.py") {
                gates.push((i, step));
            }
        }
        if !is_windows(job) {
            continue;
        }
        let [(at, gate)] = gates.as_slice() else {
            v.push(format!("{id}: {} gate steps, not one", gates.len()));
            continue;
        };
        if expr(&gate["if"]) != "!cancelled()" {
            v.push(format!(
                "{id}: the gate does not run `if: ${{{{ !cancelled() }}}}`"
            ));
        }
        if expr(&gate["env"]["STEPS"]) != "toJSON(steps)" {
            v.push(format!(
                "{id}: the gate does not read STEPS: ${{{{ toJSON(steps) }}}}"
            ));
        }
        if proofs.iter().any(|(i, _)| i > at) {
            v.push(format!("{id}: a proof runs after the gate"));
        }
        let run = text(&gate["run"]);
        let words: Vec<&str> = run.split_whitespace().collect();
        let listed: BTreeSet<&str> = words
            .iter()
            .position(|w| *w == "--results")
            .map(|p| words[p + 2..].iter().copied().collect())
            .unwrap_or_default();
        let have: BTreeSet<&str> = proofs.iter().map(|(_, s)| s.as_str()).collect();
        if listed != have {
            v.push(format!(
                "{id}: the gate checks {listed:?}, the job's proofs are {have:?}"
            ));
        }
    }
    // What ships is what is proven.
    let build_cmd = dockerfile_cargo_build(&k.dockerfile);
    match &build_cmd {
        None => v.push("Dockerfile.windows has no cargo build command".into()),
        Some(cmd) if !cmd.contains(&format!("--target {TARGET}")) => {
            v.push(format!("Dockerfile.windows does not build {TARGET}: {cmd}"))
        }
        Some(_) => {}
    }
    let image = dockerfile_arg(&k.dockerfile, "RUST_VERSION").map(|r| format!("rust:{r}-bookworm"));
    let mut builds = 0;
    for (id, job) in jobs(w) {
        for step in steps(job) {
            let run = text(&step["run"]);
            let cargo = run.split_whitespace().collect::<Vec<_>>().join(" ");
            if is_windows(job) && (cargo.contains("cargo build") || cargo.contains("cargo test")) {
                v.push(format!(
                    "{id}: a Windows job builds its own binary ({:?})",
                    step_name(step)
                ));
            }
            if !is_windows(job) && cargo.contains("cargo build") {
                builds += 1;
                if build_cmd
                    .as_ref()
                    .is_none_or(|c| !cargo.contains(c.as_str()))
                {
                    v.push(format!(
                        "{id}: `{cargo}` is not Dockerfile.windows's `{build_cmd:?}`"
                    ));
                }
                if text(&job["container"]) != image.clone().unwrap_or_default() {
                    v.push(format!(
                        "{id}: builds in {:?}, Dockerfile.windows in {image:?}",
                        text(&job["container"])
                    ));
                }
            }
            if run.contains("check-node.sh")
                && !run.contains(&format!("--expect tool.target={TARGET}"))
            {
                v.push(format!(
                    "{id}: {:?} does not check that the binary is {TARGET}",
                    step_name(step)
                ));
            }
        }
        if is_windows(job) {
            if !text(&job["env"]["WINCSI_NODE_BIN"]).starts_with("dist/") {
                v.push(format!(
                    "{id}: WINCSI_NODE_BIN is not the build job's artifact (dist/)"
                ));
            }
            if !strings(&job["needs"]).contains(&"build".to_owned())
                && text(&job["needs"]) != "build"
            {
                v.push(format!("{id}: does not need the build job"));
            }
        }
    }
    if builds == 0 {
        v.push("no job builds wincsi-node".into());
    }
    // Windows PowerShell.
    for (id, job) in jobs(w) {
        for step in steps(job) {
            let run = text(&step["run"]);
            let shell = text(&step["shell"]);
            if shell == "pwsh" || run.contains("pwsh") {
                v.push(format!(
                    "{id}: {:?} uses PowerShell 7 (pwsh)",
                    step_name(step)
                ));
            }
            for script in ["setup-windows.ps1", "diagnose.ps1"] {
                if !run.contains(script) {
                    continue;
                }
                let direct = shell == "powershell";
                let via = run.lines().filter(|l| l.contains(script)).all(|l| {
                    l.trim_start().starts_with("powershell ")
                        && l.contains(&format!("-File scripts/real-node/{script}"))
                });
                if !direct && !via {
                    v.push(format!(
                        "{id}: {:?} runs {script} outside Windows PowerShell",
                        step_name(step)
                    ));
                }
            }
        }
    }
    if !k.setup.contains("$PSVersionTable.PSEdition -ne 'Desktop'") {
        v.push("setup-windows.ps1 does not refuse PowerShell 7".into());
    }
    // The iSCSI portal.
    for needle in [
        "127.0.0.1",
        "localhost",
        "[::1]",
        "WINCSI_CHECK_ISCSI_PORTAL",
        "WINCSI_E2E_ISCSI_PORTAL",
    ] {
        if k.raw.contains(needle) {
            v.push(format!(
                "the workflow names {needle:?}: the portal is the set-up script's NIC address"
            ));
        }
    }
    let sets_portal: Vec<&str> = k
        .setup
        .lines()
        .filter(|l| {
            l.trim_start()
                .starts_with("Set-Output WINCSI_CHECK_ISCSI_PORTAL")
        })
        .collect();
    if sets_portal.len() != 1 || !sets_portal[0].contains("\"${portal}:3260\"") {
        v.push(format!(
            "setup-windows.ps1 hands out the portal as {sets_portal:?}, not the NIC address"
        ));
    }
    if !k.setup.contains("$portal = Get-PortalAddress") {
        v.push("setup-windows.ps1's portal is not Get-PortalAddress's".into());
    }
    match ps_function(&k.setup, "Get-PortalAddress") {
        Some(body) if body.contains("-notlike '127.*'") => {}
        _ => v.push("Get-PortalAddress may pick a loopback address (no -notlike '127.*')".into()),
    }
    // Actions pinned by commit, the tag beside.
    for line in k
        .raw
        .lines()
        .filter(|l| l.trim_start().starts_with("uses:") || l.trim_start().starts_with("- uses:"))
    {
        let spec = line.split("uses:").nth(1).unwrap_or("").trim();
        let (action, rest) = spec.split_once('@').unwrap_or((spec, ""));
        let (sha, comment) = rest.split_once('#').unwrap_or((rest, ""));
        let sha = sha.trim();
        if sha.len() != 40 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
            v.push(format!("{action} is not pinned by commit: {line:?}"));
        }
        if !comment.trim().starts_with('v') {
            v.push(format!(
                "{action}: the pinned commit's tag is not named: {line:?}"
            ));
        }
    }
    // Artifact names.
    for (id, job) in jobs(w) {
        for step in steps(job) {
            if text(&step["uses"]).starts_with("actions/upload-artifact@")
                && text(&step["with"]["name"]).contains("matrix.")
            {
                v.push(format!(
                    "{id}: an artifact name carries a raw matrix value (a ref may hold `/`)"
                ));
            }
        }
    }
    // The container as the chart runs it.
    let root = shell_var(&k.container, "container_kubelet_root").unwrap_or_default();
    let mut mounts: BTreeSet<(String, String)> = BTreeSet::from([(root.clone(), root)]);
    for p in shell_array(&k.container, "container_pipes") {
        let pipe = format!(r"\\.\pipe\csi-proxy-{p}");
        mounts.insert((pipe.clone(), pipe));
    }
    if mounts != k.chart.mounts {
        v.push(format!(
            "container.sh mounts {mounts:?}, the chart {:?}",
            k.chart.mounts
        ));
    }
    let args = shell_array(&k.container, "container_args");
    let differ = |a: &[String], b: &[String]| -> bool {
        a.len() != b.len()
            || a.iter().zip(b).any(|(x, y)| {
                x != y && !(x.starts_with("--log-format=") && y.starts_with("--log-format="))
            })
    };
    if differ(&args, &k.chart.args) {
        v.push(format!(
            "container.sh passes {args:?}, the chart {:?}",
            k.chart.args
        ));
    }
    v
}

#[test]
fn the_workflow_passes_its_lint() {
    let k = kit();
    let v = lint(&k);
    assert!(v.is_empty(), "{WORKFLOW}:\n{}", v.join("\n"));
    // The legs the issue names.
    let images = strings(&k.workflow["jobs"]["csi-proxy"]["strategy"]["matrix"]["image"]);
    assert_eq!(images, ["windows-2022", "windows-2025"]);
    container_runs_each_runner_s_own_image(&k.workflow).unwrap();
}

/// The csiProxy-mode container job runs, on each Windows runner, the manifest list's entry for that runner's build:
/// ltsc2022 on windows-2022, ltsc2025 on windows-2025 (issue 38), process-isolated.
fn container_runs_each_runner_s_own_image(w: &Json) -> Result<(), String> {
    let job = &w["jobs"]["container"];
    let matrix = &job["strategy"]["matrix"];
    if text(&job["runs-on"]) != "${{ matrix.image }}" {
        return Err(format!("container runs on {}", text(&job["runs-on"])));
    }
    let images = strings(&matrix["image"]);
    if images != ["windows-2022", "windows-2025"] {
        return Err(format!("container runs on {images:?}"));
    }
    let pairs: BTreeSet<(String, String)> = matrix["include"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| (text(&i["image"]), text(&i["osversion"])))
        .collect();
    let want: BTreeSet<(String, String)> =
        [("windows-2022", "ltsc2022"), ("windows-2025", "ltsc2025")]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into();
    if pairs != want {
        return Err(format!("container pairs runners and images as {pairs:?}"));
    }
    if text(&job["env"]["WINCSI_OSVERSION"]) != "${{ matrix.osversion }}" {
        return Err("WINCSI_OSVERSION is not the matrix's osversion".into());
    }
    let image_step = steps(job)
        .iter()
        .find(|s| text(&s["id"]) == "image")
        .ok_or("no image proof")?;
    if !text(&image_step["run"]).contains("--osversion \"$WINCSI_OSVERSION\"") {
        return Err(format!(
            "the image proof builds {}",
            text(&image_step["run"])
        ));
    }
    Ok(())
}

#[test]
fn the_container_check_refuses_a_runner_without_its_image() {
    let k = kit();
    let mut only_2022 = k.workflow.clone();
    only_2022["jobs"]["container"]["strategy"]["matrix"]["image"] = json!(["windows-2022"]);
    assert!(container_runs_each_runner_s_own_image(&only_2022).is_err());
    let mut mismatched = k.workflow.clone();
    mismatched["jobs"]["container"]["strategy"]["matrix"]["include"][1]["osversion"] =
        json!("ltsc2022");
    assert!(container_runs_each_runner_s_own_image(&mismatched).is_err());
    let mut fixed = k.workflow.clone();
    let steps = fixed["jobs"]["container"]["steps"].as_array_mut().unwrap();
    for s in steps.iter_mut().filter(|s| s["id"] == "image") {
        s["run"] = json!(text(&s["run"]).replace("\"$WINCSI_OSVERSION\"", "ltsc2022"));
    }
    assert!(container_runs_each_runner_s_own_image(&fixed).is_err());
}

fn step_mut<'a>(k: &'a mut Kit, job: &str, id: &str) -> &'a mut Json {
    k.workflow["jobs"][job]["steps"]
        .as_array_mut()
        .expect("steps")
        .iter_mut()
        .find(|s| s["id"] == id || s["name"].as_str().is_some_and(|n| n.contains(id)))
        .unwrap_or_else(|| panic!("{job} has no step {id}"))
}

type Mutation = fn(&mut Kit);

/// Each rule's mutated copy, and the words of the violation it must produce.
const MUTATIONS: &[(&str, Mutation, &str)] = &[
    (
        "a step without a timeout",
        |k| {
            step_mut(k, "csi-proxy", "smoke")
                .as_object_mut()
                .unwrap()
                .remove("timeout-minutes");
        },
        "has no timeout-minutes",
    ),
    (
        "a step as long as its job",
        |k| {
            step_mut(k, "native", "lifecycle-iscsi")["timeout-minutes"] = json!(75);
        },
        "may take the whole job",
    ),
    (
        "a job without a timeout",
        |k| {
            k.workflow["jobs"]["build"]
                .as_object_mut()
                .unwrap()
                .remove("timeout-minutes");
        },
        "job build has no timeout-minutes",
    ),
    (
        "a proof that runs only after success",
        |k| {
            step_mut(k, "csi-proxy", "check-iscsi")
                .as_object_mut()
                .unwrap()
                .remove("if");
        },
        "does not run `if: ${{ !cancelled() }}`",
    ),
    (
        "a proof that runs always, even when cancelled",
        |k| {
            step_mut(k, "container", "container-smoke")["if"] = json!("${{ always() }}");
        },
        "does not run `if: ${{ !cancelled() }}`",
    ),
    (
        "the kit run by a step that is not a proof",
        |k| {
            step_mut(k, "csi-proxy", "lifecycle-smb")["name"] = json!("e2e SMB");
        },
        "runs the kit but is not a `Proof:` step",
    ),
    (
        "a proof whose summary is not under its id",
        |k| {
            step_mut(k, "native", "smoke")["id"] = json!("af-unix");
        },
        "does not write its summary under its id",
    ),
    (
        "a gate that forgets a proof",
        |k| {
            let gate = step_mut(k, "csi-proxy", "Gate");
            let run = gate["run"]
                .as_str()
                .unwrap()
                .replace(" lifecycle-iscsi", "");
            gate["run"] = json!(run);
        },
        "the gate checks",
    ),
    (
        "a gate that runs only on success",
        |k| {
            step_mut(k, "native", "Gate")["if"] = json!("${{ success() }}");
        },
        "the gate does not run",
    ),
    (
        "a gate blind to the outcomes",
        |k| {
            step_mut(k, "container", "Gate")["env"] = json!({});
        },
        "the gate does not read STEPS",
    ),
    (
        "an MSVC build on the runner",
        |k| {
            let steps = k.workflow["jobs"]["native"]["steps"]
                .as_array_mut()
                .unwrap();
            steps.insert(1, json!({"name": "build", "timeout-minutes": 30, "run": "cargo build --release -p wincsi-driver"}));
        },
        "a Windows job builds its own binary",
    ),
    (
        "another target in the build job",
        |k| {
            let steps = k.workflow["jobs"]["build"]["steps"].as_array_mut().unwrap();
            let s = steps
                .iter_mut()
                .find(|s| s["run"].as_str().is_some_and(|r| r.contains("cargo build")))
                .unwrap();
            s["run"] = json!(
                s["run"]
                    .as_str()
                    .unwrap()
                    .replace(TARGET, "x86_64-pc-windows-msvc")
            );
        },
        "is not Dockerfile.windows's",
    ),
    (
        "another Rust image than the Dockerfile's",
        |k| {
            k.workflow["jobs"]["build"]["container"] = json!("rust:1.97-bookworm");
        },
        "builds in",
    ),
    (
        "the Dockerfile building another target",
        |k| {
            k.dockerfile = k.dockerfile.replace(
                "--target x86_64-pc-windows-gnu",
                "--target x86_64-pc-windows-msvc",
            );
        },
        "Dockerfile.windows does not build",
    ),
    (
        "check-node not told which binary ships",
        |k| {
            let s = step_mut(k, "csi-proxy", "check-smb");
            s["run"] = json!(
                s["run"]
                    .as_str()
                    .unwrap()
                    .replace("--expect tool.target=x86_64-pc-windows-gnu", "")
            );
        },
        "does not check that the binary is",
    ),
    (
        "the binary not from the build job",
        |k| {
            k.workflow["jobs"]["container"]["env"]["WINCSI_NODE_BIN"] =
                json!("target/release/wincsi-node.exe");
        },
        "WINCSI_NODE_BIN is not the build job's artifact",
    ),
    (
        "the set-up script under PowerShell 7",
        |k| {
            step_mut(k, "native", "Set up: local SMB")["shell"] = json!("pwsh");
        },
        "uses PowerShell 7",
    ),
    (
        "the set-up script from bash without powershell",
        |k| {
            let s = step_mut(k, "csi-proxy", "lifecycle-iscsi");
            s["run"] = json!(s["run"].as_str().unwrap().replace(
            "powershell -NoProfile -NonInteractive -ExecutionPolicy Bypass -File scripts/real-node/setup-windows.ps1",
            "./scripts/real-node/setup-windows.ps1"));
        },
        "runs setup-windows.ps1 outside Windows PowerShell",
    ),
    (
        "a set-up script that accepts PowerShell 7",
        |k| {
            k.setup = k
                .setup
                .replace("$PSVersionTable.PSEdition -ne 'Desktop'", "$false");
        },
        "does not refuse PowerShell 7",
    ),
    (
        "a loopback portal in the workflow",
        |k| {
            k.raw = k.raw.replacen(
            "        id: check-iscsi\n",
            "        id: check-iscsi\n        env:\n          WINCSI_CHECK_ISCSI_PORTAL: 127.0.0.1:3260\n",
            1,
        );
            k.workflow = parse(&k.raw);
        },
        "the workflow names \"127.0.0.1\"",
    ),
    (
        "a loopback portal in the set-up script",
        |k| {
            k.setup = k.setup.replace(
                "Set-Output WINCSI_CHECK_ISCSI_PORTAL \"${portal}:3260\"",
                "Set-Output WINCSI_CHECK_ISCSI_PORTAL '127.0.0.1:3260'",
            );
        },
        "hands out the portal as",
    ),
    (
        "a portal picker that may pick loopback",
        |k| {
            k.setup = k.setup.replace("$_.IPAddress -notlike '127.*' -and ", "");
        },
        "may pick a loopback address",
    ),
    (
        "an action pinned by tag",
        |k| {
            k.raw = k.raw.replacen(
                "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1",
                "actions/checkout@v7",
                1,
            );
            k.workflow = parse(&k.raw);
        },
        "is not pinned by commit",
    ),
    (
        "a pinned commit without its tag",
        |k| {
            k.raw = k.raw.replacen(
                "@6323deb102c322ba6fcbdcafc7e3dddab59af2b6 # v2.9.2",
                "@6323deb102c322ba6fcbdcafc7e3dddab59af2b6",
                1,
            );
        },
        "the pinned commit's tag is not named",
    ),
    (
        "an artifact named after the raw ref",
        |k| {
            let s = step_mut(k, "csi-proxy", "Upload");
            s["with"]["name"] = json!("real-node-${{ matrix.image }}-${{ matrix.csi-proxy }}");
        },
        "an artifact name carries a raw matrix value",
    ),
    (
        "a pipe the chart maps missing from the container",
        |k| {
            k.container = k.container.replace("    iscsi-v1alpha2\n", "");
        },
        "container.sh mounts",
    ),
    (
        "the container started with other args than the chart's",
        |k| {
            k.container = k.container.replace(
                "'--kubelet-root=C:\\var\\lib\\kubelet'",
                "'--kubelet-root=C:\\k'",
            );
        },
        "container.sh passes",
    ),
];

#[test]
fn each_rule_refuses_its_mutation() {
    let pristine = kit();
    assert!(
        lint(&pristine).is_empty(),
        "the workflow itself must pass first"
    );
    for (what, mutate, expected) in MUTATIONS {
        let mut k = pristine.clone();
        mutate(&mut k);
        let v = lint(&k);
        assert!(
            v.iter().any(|m| m.contains(expected)),
            "{what}: expected a violation containing {expected:?}, got {v:#?}"
        );
    }
}

#[test]
fn the_dockerfile_readers_read_the_dockerfile() {
    let d = read("Dockerfile.windows");
    assert_eq!(
        dockerfile_cargo_build(&d).as_deref(),
        Some(
            "cargo build --locked --release --target x86_64-pc-windows-gnu -p wincsi-driver --bin wincsi-node"
        )
    );
    assert!(dockerfile_arg(&d, "RUST_VERSION").is_some_and(|v| !v.is_empty()));
    assert_eq!(parse("a: ${{ !cancelled() }}")["a"], "${{ !cancelled() }}");
    assert_eq!(expr(&json!("${{ !cancelled() }}")), "!cancelled()");
}
