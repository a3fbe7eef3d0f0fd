//! The report of a `check-node` run: what it planned, what the node did per check, which rows it confirms or
//! contradicts, what it cleaned up. Rendered as text for people or as one JSON document (`--output json`) whose
//! shape is the versioned schema [`SCHEMA`] (`report-v1.schema.json` beside this file; tests validate every report
//! against it).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::expect::{Ref, Release};
use crate::host::HostError;

/// The `schema` value of a version-1 report.
pub const SCHEMA_ID: &str = "https://wincsi.invalid/schemas/check-node-report-v1.json";

/// The JSON Schema (draft 2020-12) of a version-1 report (`wincsi-node check-node --print-schema`).
///
/// Its versioning rule: additive changes keep the version. A new field may appear in any object, so the published
/// schema leaves objects open (a v1 consumer validating a later v1 report must accept it); removing or renaming a
/// field, changing its type or meaning, or a new value of an enumerated field makes a new [`SCHEMA_ID`].
pub const SCHEMA: &str = include_str!("report-v1.schema.json");

/// [`SCHEMA`] with every object that lists its properties closed (`additionalProperties: false`): what this binary
/// emits is exactly what the schema documents, so the tests validate against this copy — a field added to the
/// report without its schema entry fails them, while consumers keep the open schema.
pub fn strict_schema() -> serde_json::Value {
    fn close(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                    map.insert(
                        "additionalProperties".into(),
                        serde_json::Value::Bool(false),
                    );
                }
                map.values_mut().for_each(close);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(close),
            _ => {}
        }
    }
    let mut schema: serde_json::Value =
        serde_json::from_str(SCHEMA).expect("report-v1.schema.json is JSON (compiled in)");
    close(&mut schema);
    schema
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Always [`SCHEMA_ID`].
    pub schema: &'static str,
    /// The binary that ran.
    pub tool: Tool,
    /// When the run started (milliseconds since the Unix epoch).
    pub started_unix_ms: u64,
    /// The run's phase.
    pub phase: &'static str,
    /// Whether it only printed its plan.
    pub dry_run: bool,
    /// The host backend and the node.
    pub node: Node,
    /// Which csi-proxy release the node runs.
    pub release: ReleaseReport,
    /// What the run said it would do, before doing it.
    pub plan: Vec<PlanStep>,
    /// One entry per check, in the order they ran.
    pub checks: Vec<CheckReport>,
    /// What was removed and what was left.
    pub cleanup: Cleanup,
    /// Counts of findings by verdict, and of checks by status.
    pub summary: Summary,
}

/// The binary.
#[derive(Clone, Debug, Serialize)]
pub struct Tool {
    /// `wincsi-node check-node`.
    pub name: &'static str,
    /// Crate version.
    pub version: &'static str,
    /// Target triple.
    pub target: &'static str,
}

/// The node as the run saw it.
#[derive(Clone, Debug, Serialize)]
pub struct Node {
    /// `--host-backend`.
    pub backend: String,
    /// How the backend is reached.
    pub transport: String,
    /// `--kubelet-root`.
    pub kubelet_root: String,
    /// The scratch folder (host path).
    pub scratch: String,
    /// What the backend advertises beyond csi-proxy v1's primitives.
    pub capabilities: BTreeMap<&'static str, bool>,
    /// The node's Windows build as the backend reads it (`RtlGetVersion`; `null`: it cannot tell, as csi-proxy).
    pub windows_build: Option<u32>,
}

/// Which release the node runs.
#[derive(Clone, Debug, Serialize)]
pub struct ReleaseReport {
    /// `--csi-proxy-release`, if given.
    pub claimed: Option<Release>,
    /// The releases consistent with every sourced observation (all four when nothing told them apart; empty on
    /// another backend or when no release explains them).
    pub identified: Vec<Release>,
    /// Whether the claimed release is among the identified ones (`null` without a claim).
    pub claim_consistent: Option<bool>,
    /// The releases the findings were judged against (the claim, else the identified ones).
    pub judged_against: Vec<Release>,
}

/// One step of the plan.
#[derive(Clone, Debug, Serialize)]
pub struct PlanStep {
    /// The check it belongs to.
    pub check: &'static str,
    /// What it will do on the host, in order.
    pub actions: Vec<String>,
}

/// A check's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It ran and recorded its observations.
    Ran,
    /// It did not run (see `note`).
    Skipped,
    /// It could not be carried out (a step it needed failed; see `note`).
    Failed,
}

/// One check.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// Stable identifier.
    pub id: &'static str,
    /// What it looks at.
    pub title: &'static str,
    /// `release`, `filesystem`, `smb` or `iscsi`.
    pub group: &'static str,
    /// Whether it ran.
    pub status: Status,
    /// Why it was skipped or failed, or what to know about its result.
    pub note: Option<String>,
    /// What the node did, by observation name.
    pub observations: BTreeMap<&'static str, Outcome>,
    /// What the observations say about rows and real-node checks.
    pub findings: Vec<Finding>,
    /// The `smb_options` check's digest (absent from every other check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smb_options: Option<SmbOptionsReport>,
}

/// What the `smb_options` check asked of a mapping and what the node answered (native items N47, N48).
#[derive(Clone, Debug, Serialize)]
pub struct SmbOptionsReport {
    /// The node's Windows build the options were judged by (`null`: the backend cannot tell).
    pub windows_build: Option<u32>,
    /// `flag` (`--smb-options`) or `default` (every default option the build takes).
    pub source: &'static str,
    /// The options the mapping was asked with, as volume-context keys and values.
    pub asked: serde_json::Value,
    /// What the mapping's `MSFT_SmbGlobalMapping` instance reports of each option the build takes, as the driver's
    /// weaker-than-asked judgement reads it: `true`/`false`, `"tcp"`/`"quic"`, `null` when the instance does not show
    /// it. Empty when no mapping was made (or it could not be read back).
    pub reported: BTreeMap<&'static str, serde_json::Value>,
    /// The driver's refusal of an option the build lacks (`null` when the build takes every option).
    pub missing: Option<OptionRefusal>,
    /// A second stage of the share asking every option the build takes at its strongest: the driver's refusal when
    /// the mapping is weaker (`null` when the mapping already holds them all, or none was made).
    pub stronger: Option<OptionRefusal>,
}

/// An ask the driver refused, with its words.
#[derive(Clone, Debug, Serialize)]
pub struct OptionRefusal {
    /// The options asked, as volume-context keys and values.
    pub asked: serde_json::Value,
    /// The refusal's message.
    pub message: String,
}

/// What one host call (or a measured wait) did.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The host operation (`MountVolume`, …) or the measurement.
    pub op: String,
    /// The value it returned (`null` for none).
    pub value: Option<serde_json::Value>,
    /// Its error, if it failed.
    pub error: Option<ErrorReport>,
    /// How long it took.
    pub millis: u64,
}

impl Outcome {
    /// A call that answered.
    pub fn from_result<T: Serialize>(op: &str, result: &Result<T, HostError>, millis: u64) -> Self {
        match result {
            Ok(v) => Outcome {
                op: op.to_owned(),
                value: serde_json::to_value(v).ok().filter(|v| !v.is_null()),
                error: None,
                millis,
            },
            Err(e) => Outcome {
                op: op.to_owned(),
                value: None,
                error: Some(ErrorReport::classified(
                    e.op.name(),
                    &format!("{:?}", e.kind),
                    e.text(),
                )),
                millis,
            },
        }
    }

    /// Whether it produced an answer the findings can be judged on (a deadline or an unreachable backend is none).
    pub fn ran(&self) -> bool {
        self.error
            .as_ref()
            .is_none_or(|e| e.kind != "DeadlineExceeded" && e.kind != "Unavailable")
    }

    #[cfg(test)]
    pub(crate) fn test_ok(value: Option<serde_json::Value>) -> Self {
        Outcome {
            op: "X".into(),
            value,
            error: None,
            millis: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn test_err(error: ErrorReport) -> Self {
        Outcome {
            op: "X".into(),
            value: None,
            error: Some(error),
            millis: 0,
        }
    }
}

/// A failed call as the driver saw it.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorReport {
    /// The host operation.
    pub op: String,
    /// The driver's classification (`HostErrorKind`) when version 1 of the schema lists it, else `Other`.
    pub kind: String,
    /// The driver's classification, whatever it is: a `HostErrorKind` (also those v1's `kind` enum predates:
    /// `NotSatisfiable`, `InFlight`, …), or the CSI code of a refusal the driver gives before any host call.
    pub classification: String,
    /// The host's whole message (csi-proxy: the gRPC status message, exactly).
    pub message: String,
}

/// The values of `kind` that version 1 of the schema enumerates (a new value would need a new schema id).
const V1_KINDS: [&str; 16] = [
    "NotFound",
    "AlreadyExists",
    "NotEmpty",
    "MultipleConnections",
    "NetworkPathNotFound",
    "NetworkNameNotFound",
    "StaleMapping",
    "LogonFailure",
    "AccessDenied",
    "AlreadyLoggedIn",
    "AccessPathInUse",
    "InvalidPath",
    "NoPartition",
    "Unavailable",
    "DeadlineExceeded",
    "Other",
];

impl ErrorReport {
    /// An error classified `classification`: `kind` is it when v1's enum lists it, else `Other`.
    pub fn classified(op: &str, classification: &str, message: &str) -> Self {
        let kind = if V1_KINDS.contains(&classification) {
            classification
        } else {
            "Other"
        };
        ErrorReport {
            op: op.to_owned(),
            kind: kind.to_owned(),
            classification: classification.to_owned(),
            message: message.to_owned(),
        }
    }
}

/// A verdict on one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The node did what the row (or the simulator's choice) says for the judged release(s).
    Confirms,
    /// It did not.
    Contradicts,
    /// The judged releases disagree and the node's release is not known, or the call gave no usable answer.
    Inconclusive,
    /// No prediction: the observation is recorded for the results table.
    Recorded,
    /// The reference does not apply to this backend.
    NotApplicable,
}

/// What one release was expected to do.
#[derive(Clone, Debug, Serialize)]
pub struct Expected {
    /// The release.
    pub release: Release,
    /// What it was expected to answer.
    pub expect: String,
}

impl Expected {
    /// Build one.
    pub fn new(release: Release, expect: String) -> Self {
        Self { release, expect }
    }
}

/// One claim judged.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The row, real-node check or native item.
    #[serde(rename = "ref")]
    pub reference: Ref,
    /// The observation it is about.
    pub observation: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Whether the expectation is the simulator's unverified choice (a real node settles it).
    pub unverified: bool,
    /// What the judged releases were expected to answer.
    pub expected: Vec<Expected>,
    /// Every release whose expectation the observation meets.
    pub matching_releases: Vec<Release>,
}

/// What was cleaned up.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cleanup {
    /// Whether everything the run created (and did not mean to keep) is gone.
    pub complete: bool,
    /// Objects removed.
    pub removed: Vec<String>,
    /// Objects left on the node, with the reason.
    pub left: Vec<LeftObject>,
    /// Where the ledger of created objects is kept (local path).
    pub ledger: String,
}

/// An object left on the node.
#[derive(Clone, Debug, Serialize)]
pub struct LeftObject {
    /// What it is.
    pub object: String,
    /// Why it is left (kept for the after-reboot phase, cannot be undone, removal failed).
    pub reason: String,
}

/// Counts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Findings by verdict.
    pub findings: BTreeMap<&'static str, usize>,
    /// Checks by status.
    pub checks: BTreeMap<&'static str, usize>,
}

impl Summary {
    /// Count a report's checks and findings.
    pub fn of(checks: &[CheckReport]) -> Summary {
        let mut s = Summary::default();
        for v in [
            "confirms",
            "contradicts",
            "inconclusive",
            "recorded",
            "not_applicable",
        ] {
            s.findings.insert(v, 0);
        }
        for st in ["ran", "skipped", "failed"] {
            s.checks.insert(st, 0);
        }
        for c in checks {
            *s.checks.entry(status_name(c.status)).or_default() += 1;
            for f in &c.findings {
                *s.findings.entry(verdict_name(f.verdict)).or_default() += 1;
            }
        }
        s
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ran => "ran",
        Status::Skipped => "skipped",
        Status::Failed => "failed",
    }
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Confirms => "confirms",
        Verdict::Contradicts => "contradicts",
        Verdict::Inconclusive => "inconclusive",
        Verdict::Recorded => "recorded",
        Verdict::NotApplicable => "not_applicable",
    }
}

fn reference_text(r: &Ref) -> String {
    match r {
        Ref::Row(id) => format!("row `{id}`"),
        Ref::NodeCheck(n) => format!("real-node check #{n}"),
        Ref::Native(n) => format!("native item §5.{n}"),
    }
}

fn releases_text(rs: &[Release]) -> String {
    if rs.is_empty() {
        return "none".to_owned();
    }
    rs.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")
}

/// The first line of a host message, at most 240 characters (terminal output; the JSON keeps it whole).
pub fn first_line(text: &str) -> String {
    let line = text
        .split(['\r', '\n'])
        .next()
        .unwrap_or_default()
        .split("\\r\\n")
        .next()
        .unwrap_or_default();
    if line.chars().count() > 240 {
        format!("{}…", line.chars().take(240).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// The plan as text.
pub fn render_plan(plan: &[PlanStep]) -> String {
    let mut out = String::new();
    for step in plan {
        let _ = writeln!(out, "  [{}]", step.check);
        for a in &step.actions {
            let _ = writeln!(out, "    - {a}");
        }
    }
    out
}

impl Report {
    /// The report as text for a terminal.
    pub fn render_text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "wincsi check-node {} ({}), phase {}{}",
            self.tool.version,
            self.tool.target,
            self.phase,
            if self.dry_run { ", dry run" } else { "" }
        );
        let _ = writeln!(
            o,
            "backend: {} ({}); kubelet root {}; scratch {}",
            self.node.backend, self.node.transport, self.node.kubelet_root, self.node.scratch
        );
        let _ = writeln!(
            o,
            "csi-proxy release: claimed {}, identified {}, judged against {}",
            self.release.claimed.map_or("-", Release::as_str),
            releases_text(&self.release.identified),
            releases_text(&self.release.judged_against)
        );
        for c in &self.checks {
            let _ = writeln!(o, "\n[{}] {} ({})", c.id, c.title, status_name(c.status));
            if let Some(n) = &c.note {
                let _ = writeln!(o, "  note: {n}");
            }
            for (name, out) in &c.observations {
                let what = match (&out.error, &out.value) {
                    (Some(e), _) => {
                        format!("error {}: {}", e.classification, first_line(&e.message))
                    }
                    (None, Some(v)) => format!("ok: {v}"),
                    (None, None) => "ok".to_owned(),
                };
                let _ = writeln!(o, "  {name}: {} -> {what} ({} ms)", out.op, out.millis);
            }
            if let Some(so) = &c.smb_options {
                let build = so
                    .windows_build
                    .map_or("unknown".to_owned(), |b| b.to_string());
                let _ = writeln!(
                    o,
                    "  Windows build {build}; asked ({}) {}; the mapping reports {}",
                    so.source,
                    so.asked,
                    serde_json::to_string(&so.reported).unwrap_or_default()
                );
                for (what, r) in [("missing", &so.missing), ("stronger", &so.stronger)] {
                    if let Some(r) = r {
                        let _ = writeln!(
                            o,
                            "  {what} {} refused: {}",
                            r.asked,
                            first_line(&r.message)
                        );
                    }
                }
            }
            for f in &c.findings {
                let _ = writeln!(
                    o,
                    "  {} {}{} [{}] (matches: {})",
                    verdict_name(f.verdict),
                    reference_text(&f.reference),
                    if f.unverified {
                        " (the simulator's unverified choice)"
                    } else {
                        ""
                    },
                    f.observation,
                    releases_text(&f.matching_releases)
                );
            }
        }
        let _ = writeln!(
            o,
            "\ncleanup: {}",
            if self.cleanup.complete {
                "complete"
            } else {
                "INCOMPLETE"
            }
        );
        for r in &self.cleanup.removed {
            let _ = writeln!(o, "  removed {r}");
        }
        for l in &self.cleanup.left {
            let _ = writeln!(o, "  left {}: {}", l.object, l.reason);
        }
        let _ = writeln!(
            o,
            "summary: findings {:?}; checks {:?}",
            self.summary.findings, self.summary.checks
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// The smallest v1 report: one check with one observation and one finding.
    fn minimal() -> Value {
        json!({
            "schema": SCHEMA_ID,
            "tool": { "name": "wincsi-node check-node", "version": "0", "target": "x86_64-pc-windows-gnu" },
            "started_unix_ms": 0,
            "phase": "full",
            "dry_run": false,
            "node": {
                "backend": "csi-proxy", "transport": "pipes", "kubelet_root": "C:\\var\\lib\\kubelet",
                "scratch": "C:\\s",
                "capabilities": { "list_smb_mappings": false, "clear_disk_read_only": false,
                                  "discovery_chap": false, "persistent_logins": false }
            },
            "release": { "claimed": null, "identified": ["v1.1.3"], "claim_consistent": null,
                         "judged_against": ["v1.1.3"] },
            "plan": [{ "check": "volume_not_found", "actions": ["IsVolumeFormatted"] }],
            "checks": [{
                "id": "volume_not_found", "title": "t", "group": "filesystem", "status": "ran", "note": null,
                "observations": { "o": { "op": "IsVolumeFormatted", "value": null, "error": null, "millis": 1 } },
                "findings": [{
                    "ref": { "kind": "row", "id": "not_found_texts" }, "observation": "o", "verdict": "confirms",
                    "unverified": false, "expected": [{ "release": "v1.1.3", "expect": "e" }],
                    "matching_releases": ["v1.1.3"]
                }]
            }],
            "cleanup": { "complete": true, "removed": [], "left": [], "ledger": "l" },
            "summary": {
                "findings": { "confirms": 1, "contradicts": 0, "inconclusive": 0, "recorded": 0, "not_applicable": 0 },
                "checks": { "ran": 1, "skipped": 0, "failed": 0 }
            }
        })
    }

    fn valid(schema: &Value, report: &Value) -> bool {
        jsonschema::validator_for(schema)
            .expect("a valid JSON Schema")
            .is_valid(report)
    }

    /// Every object level a later v1 may add a field to.
    const LEVELS: [&str; 6] = [
        "",
        "/tool",
        "/node",
        "/checks/0",
        "/checks/0/findings/0/ref",
        "/cleanup",
    ];

    #[test]
    fn an_added_field_keeps_v1_for_consumers_and_fails_the_strict_copy() {
        let open: Value = serde_json::from_str(SCHEMA).expect("schema");
        let strict = strict_schema();
        assert!(valid(&open, &minimal()) && valid(&strict, &minimal()));
        for level in LEVELS {
            let mut r = minimal();
            r.pointer_mut(level)
                .and_then(Value::as_object_mut)
                .unwrap_or_else(|| panic!("{level} is an object"))
                .insert("added_in_a_later_v1".into(), json!(1));
            assert!(
                valid(&open, &r),
                "v1 consumers accept a field added at {level:?}"
            );
            assert!(
                !valid(&strict, &r),
                "the strict copy refuses an undocumented field at {level:?}"
            );
        }
    }

    #[test]
    fn error_kinds_v1_lacks_are_reported_as_other_with_their_classification() {
        let open: Value = serde_json::from_str(SCHEMA).expect("schema");
        let listed = open
            .pointer("/$defs/outcome/properties/error/oneOf/1/properties/kind/enum")
            .and_then(Value::as_array)
            .expect("the kind enum");
        let listed: Vec<&str> = listed.iter().filter_map(Value::as_str).collect();
        assert_eq!(listed, V1_KINDS, "V1_KINDS is the schema's enum");
        let e = ErrorReport::classified("NewSmbGlobalMapping", "NotSatisfiable", "m");
        assert_eq!(
            (e.kind.as_str(), e.classification.as_str()),
            ("Other", "NotSatisfiable")
        );
        let e = ErrorReport::classified("Mkdir", "AccessDenied", "m");
        assert_eq!(
            (e.kind.as_str(), e.classification.as_str()),
            ("AccessDenied", "AccessDenied")
        );
    }

    #[test]
    fn a_removed_field_or_a_new_enum_value_is_not_v1() {
        let open: Value = serde_json::from_str(SCHEMA).expect("schema");
        let mut removed = minimal();
        removed["checks"][0]
            .as_object_mut()
            .expect("check")
            .remove("findings");
        assert!(!valid(&open, &removed), "a removed field is a new version");
        let mut new_value = minimal();
        new_value["checks"][0]["findings"][0]["verdict"] = json!("maybe");
        assert!(
            !valid(&open, &new_value),
            "a new enum value is a new version"
        );
        let mut renamed = minimal();
        renamed["schema"] = json!("https://wincsi.invalid/schemas/check-node-report-v2.json");
        assert!(!valid(&open, &renamed), "a v2 document is not v1");
    }
}
