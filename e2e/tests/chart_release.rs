//! The release workflow (`.github/workflows/release.yml`) and what it publishes agree with the chart:
//!
//! - the workflow's `IMAGE` is the chart's `driver.image.repository`, the chart's tag defaults to its
//!   `appVersion`, `appVersion` equals the chart's `version` and the Cargo workspace version (a tag `vX.Y.Z` then
//!   names all of them; `scripts/release-check.sh` refuses a tag that does not), and the HostProcess suffix the chart
//!   appends is the one `scripts/release-images.sh` pushes;
//! - the workflow runs on tags only, with no permission at the top and only what signing and publishing need on
//!   its job, every action pinned to a commit SHA with the tag it stands for in a comment, every job and every step
//!   with a time limit, and the steps the issue asks for: the tag check, the image script, keyless signing of
//!   images, chart and checksums, the chart as an OCI artifact, the SBOM;
//! - the image script builds the three Windows Server versions and gives each list entry its `os.version`.
//!
//! `.ci/chart-check.sh` validates the workflow against the GitHub-workflow schema (offline) and runs both scripts.

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
        .flat_map(|j| j["steps"].as_array().expect("steps"))
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
    for (name, job) in w["jobs"].as_object().unwrap() {
        assert!(
            job["timeout-minutes"].as_u64().is_some(),
            "job {name}: timeout-minutes"
        );
        let perms = job["permissions"].as_object().expect("job permissions");
        let granted: BTreeSet<(&str, &str)> = perms
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
            .collect();
        assert_eq!(
            granted,
            [
                ("contents", "write"),
                ("packages", "write"),
                ("id-token", "write")
            ]
            .into(),
            "job {name}: the release, the registry, keyless signing — nothing else"
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
