//! What each csi-proxy release is expected to answer, and how an observation is judged against it.
//!
//! A check records [`Outcome`]s (what the node did). Each outcome carries [`Claim`]s: a reference (a release-profile
//! row of `sim/README.md`, an item of `docs/real-node-checks.md`, an unverified item of the native backend) and, for
//! the csi-proxy backend, what each release is expected to do ([`Expect`], one per [`Release`]). The verdicts are
//! computed once every check has run, because which release the node runs is itself learnt from the sourced claims
//! ([`identify`]).

use serde::{Deserialize, Serialize};

use super::report::{Finding, Outcome, Verdict};

/// A csi-proxy release the simulated host plays and the driver supports.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
pub enum Release {
    /// v1.1.3 (PowerShell per call; the chart's default).
    #[value(name = "v1.1.3")]
    #[serde(rename = "v1.1.3")]
    V1_1_3,
    /// v1.2.1 (the last PowerShell release).
    #[value(name = "v1.2.1")]
    #[serde(rename = "v1.2.1")]
    V1_2_1,
    /// v1.3.0 (WMI through `microsoft/wmi`).
    #[value(name = "v1.3.0")]
    #[serde(rename = "v1.3.0")]
    V1_3_0,
    /// master (its own go-ole WMI layer; unreleased).
    #[value(name = "master")]
    #[serde(rename = "master")]
    Master,
}

impl Release {
    /// Every release, oldest first (the order of [`Expect`] arrays).
    pub const ALL: [Release; 4] = [
        Release::V1_1_3,
        Release::V1_2_1,
        Release::V1_3_0,
        Release::Master,
    ];

    /// The tag as written in the profile table.
    pub fn as_str(self) -> &'static str {
        match self {
            Release::V1_1_3 => "v1.1.3",
            Release::V1_2_1 => "v1.2.1",
            Release::V1_3_0 => "v1.3.0",
            Release::Master => "master",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What a claim refers to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "id", rename_all = "kebab-case")]
pub enum Ref {
    /// A row of the release-profile table (`sim/README.md`, `sim/src/profile/rows.rs`), by id.
    Row(&'static str),
    /// An item of `docs/real-node-checks.md` ("Checks"), by number.
    NodeCheck(u32),
    /// An item of `shared/reference/windows-native-apis.md` §5 (native backend assumptions), by number.
    Native(u32),
}

/// What one release is expected to answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// No prediction: the observation is recorded for the table of results.
    Record,
    /// The call succeeds (any value).
    Ok,
    /// The call succeeds with exactly this value.
    Value(serde_json::Value),
    /// The call fails; every needle is in the message (case-sensitive) and, if given, the driver classifies it so.
    Err {
        /// Substrings of the host's message.
        contains: Vec<&'static str>,
        /// The expected classification (`HostErrorKind` as reported).
        kind: Option<&'static str>,
    },
}

impl Expect {
    /// A failure whose message contains `needle`.
    pub fn err(needle: &'static str) -> Expect {
        Expect::Err {
            contains: vec![needle],
            kind: None,
        }
    }

    /// A failure that says "not there" in its release's own shape: every needle in the message *and* classified
    /// `NotFound` (proxy-client recognises a not-found only in each release's exact shapes, so a failure whose text
    /// merely contains the words — a WMI query that failed — does not confirm a not-found prediction; issue 37
    /// item 12).
    pub fn not_found(needles: &[&'static str]) -> Expect {
        Expect::Err {
            contains: needles.to_vec(),
            kind: Some("NotFound"),
        }
    }

    /// A failure classified as `kind` (whatever the text).
    pub fn err_kind(kind: &'static str) -> Expect {
        Expect::Err {
            contains: Vec::new(),
            kind: Some(kind),
        }
    }

    /// A failure of any kind and text.
    pub fn any_err() -> Expect {
        Expect::Err {
            contains: Vec::new(),
            kind: None,
        }
    }

    /// Does `outcome` meet the expectation? `None` when there is none.
    pub fn matches(&self, outcome: &Outcome) -> Option<bool> {
        match self {
            Expect::Record => None,
            Expect::Ok => Some(outcome.error.is_none()),
            Expect::Value(v) => Some(outcome.error.is_none() && outcome.value.as_ref() == Some(v)),
            Expect::Err { contains, kind } => Some(outcome.error.as_ref().is_some_and(|e| {
                contains.iter().all(|n| e.message.contains(n)) && kind.is_none_or(|k| e.kind == k)
            })),
        }
    }

    /// One line for reports.
    pub fn describe(&self) -> String {
        match self {
            Expect::Record => "no prediction (recorded)".to_owned(),
            Expect::Ok => "success".to_owned(),
            Expect::Value(v) => format!("success with {v}"),
            Expect::Err { contains, kind } => {
                let mut s = "an error".to_owned();
                if let Some(k) = kind {
                    s.push_str(&format!(" classified {k}"));
                }
                if !contains.is_empty() {
                    let quoted: Vec<String> = contains.iter().map(|n| format!("{n:?}")).collect();
                    s.push_str(&format!(" containing {}", quoted.join(" and ")));
                }
                s
            }
        }
    }
}

/// A claim about one outcome of a check.
#[derive(Clone, Debug)]
pub struct Claim {
    /// What it refers to.
    pub reference: Ref,
    /// The expectation per release, in [`Release::ALL`] order (csi-proxy backend only).
    pub per_release: [Expect; 4],
    /// Whether a public source settles every prediction (only sourced claims identify the release; an unsourced one
    /// says what the simulator chose).
    pub sourced: bool,
}

impl Claim {
    /// A claim with the same expectation for every release.
    pub fn all(reference: Ref, expect: Expect, sourced: bool) -> Claim {
        Claim {
            reference,
            per_release: [expect.clone(), expect.clone(), expect.clone(), expect],
            sourced,
        }
    }

    /// PowerShell era (v1.1.3, v1.2.1) versus WMI era (v1.3.0, master).
    pub fn eras(reference: Ref, powershell: Expect, wmi: Expect, sourced: bool) -> Claim {
        Claim {
            reference,
            per_release: [powershell.clone(), powershell, wmi.clone(), wmi],
            sourced,
        }
    }

    /// One expectation per release.
    pub fn each(reference: Ref, per_release: [Expect; 4], sourced: bool) -> Claim {
        Claim {
            reference,
            per_release,
            sourced,
        }
    }

    /// A reference with no expectation (observed and recorded only).
    pub fn record(reference: Ref) -> Claim {
        Claim::all(reference, Expect::Record, false)
    }

    /// The releases whose expectation `outcome` meets (releases without a prediction are left out).
    pub fn matching(&self, outcome: &Outcome) -> Vec<Release> {
        Release::ALL
            .into_iter()
            .filter(|r| self.per_release[r.index()].matches(outcome) == Some(true))
            .collect()
    }

    fn predicts_all(&self) -> bool {
        self.per_release.iter().all(|e| *e != Expect::Record)
    }
}

/// The releases consistent with every sourced claim (that predicts all four) of the csi-proxy backend.
pub fn identify<'a>(claims: impl IntoIterator<Item = (&'a Claim, &'a Outcome)>) -> Vec<Release> {
    let mut candidates = Release::ALL.to_vec();
    for (claim, outcome) in claims {
        if claim.sourced && claim.predicts_all() && outcome.ran() {
            let ok = claim.matching(outcome);
            candidates.retain(|r| ok.contains(r));
        }
    }
    candidates
}

/// Judge one claim: against `releases` (the claimed release, else the identified ones) on the csi-proxy backend;
/// recorded only on another backend.
pub fn judge(
    claim: &Claim,
    outcome: &Outcome,
    releases: &[Release],
    csi_proxy: bool,
    observation: &str,
) -> Finding {
    let applicable = match claim.reference {
        Ref::Native(_) => !csi_proxy,
        Ref::Row(_) | Ref::NodeCheck(_) => csi_proxy,
    };
    let mut finding = Finding {
        reference: claim.reference.clone(),
        observation: observation.to_owned(),
        verdict: Verdict::Recorded,
        unverified: !claim.sourced,
        expected: Vec::new(),
        matching_releases: Vec::new(),
    };
    if !applicable {
        finding.verdict = Verdict::NotApplicable;
        return finding;
    }
    if !outcome.ran() {
        finding.verdict = Verdict::Inconclusive;
        return finding;
    }
    if !csi_proxy {
        return finding;
    }
    finding.matching_releases = claim.matching(outcome);
    let judged: Vec<(Release, bool)> = releases
        .iter()
        .filter_map(|r| {
            let e = &claim.per_release[r.index()];
            finding
                .expected
                .push(super::report::Expected::new(*r, e.describe()));
            e.matches(outcome).map(|m| (*r, m))
        })
        .collect();
    finding.verdict = if releases.is_empty() {
        // No release explains every sourced answer: nothing to judge against.
        Verdict::Inconclusive
    } else if judged.is_empty() {
        Verdict::Recorded
    } else if judged.iter().all(|(_, m)| *m) {
        Verdict::Confirms
    } else if judged.iter().all(|(_, m)| !*m) {
        Verdict::Contradicts
    } else {
        Verdict::Inconclusive
    };
    finding
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::report::ErrorReport;

    fn ok(v: serde_json::Value) -> Outcome {
        Outcome::test_ok(Some(v))
    }

    fn err(kind: &str, message: &str) -> Outcome {
        Outcome::test_err(ErrorReport::classified("X", kind, message))
    }

    #[test]
    fn expectations_match_values_errors_and_kinds() {
        assert_eq!(Expect::Ok.matches(&ok(serde_json::json!(1))), Some(true));
        assert_eq!(Expect::Ok.matches(&err("Other", "x")), Some(false));
        let v = Expect::Value(serde_json::json!(true));
        assert_eq!(v.matches(&ok(serde_json::json!(true))), Some(true));
        assert_eq!(v.matches(&ok(serde_json::json!(false))), Some(false));
        let e = Expect::Err {
            contains: vec!["Not Found"],
            kind: Some("NotFound"),
        };
        assert_eq!(e.matches(&err("NotFound", "error: Not Found")), Some(true));
        assert_eq!(e.matches(&err("Other", "error: Not Found")), Some(false));
        assert_eq!(
            e.matches(&err("NotFound", "error: not found")),
            Some(false),
            "case-sensitive"
        );
        assert_eq!(Expect::Record.matches(&ok(serde_json::json!(1))), None);
    }

    #[test]
    fn a_not_found_prediction_needs_the_text_and_the_classification() {
        let master = Expect::not_found(&["failed to query volume", ": not found"]);
        let v = r"\\?\Volume{1}\";
        assert_eq!(
            master.matches(&err(
                "NotFound",
                &format!(
                    "error querying volume ({v}). error: failed to query volume {v}: not found"
                )
            )),
            Some(true)
        );
        // The master text measured under Wine: a WMI query that failed, with "not found" in go-ole's text. It used
        // to confirm the prefix-only prediction.
        let failed = format!(
            "error querying volume ({v}). error: failed to query volume {v}: error 2147749902 (FormatMessage failed \
             with: Message 0x%1 not found in file %2.)"
        );
        assert_eq!(master.matches(&err("Other", &failed)), Some(false));
        assert_eq!(master.matches(&err("NotFound", &failed)), Some(false));
    }

    #[test]
    fn identification_keeps_releases_consistent_with_sourced_claims_only() {
        let ps = Claim::eras(Ref::Row("a"), Expect::any_err(), Expect::Ok, true);
        let resize = Claim::each(
            Ref::Row("b"),
            [Expect::any_err(), Expect::Ok, Expect::Ok, Expect::Ok],
            true,
        );
        let unsourced = Claim::eras(Ref::Row("c"), Expect::Ok, Expect::any_err(), false);
        let failed = err("Other", "x");
        let fine = ok(serde_json::json!(null));
        let ids = identify([(&ps, &failed), (&resize, &fine), (&unsourced, &failed)]);
        assert_eq!(ids, vec![Release::V1_2_1]);
        assert_eq!(identify(std::iter::empty()), Release::ALL.to_vec());
    }

    #[test]
    fn verdicts_against_one_or_several_releases() {
        let c = Claim::eras(Ref::Row("a"), Expect::any_err(), Expect::Ok, true);
        let fine = ok(serde_json::json!(null));
        assert_eq!(
            judge(&c, &fine, &[Release::V1_3_0], true, "o").verdict,
            Verdict::Confirms
        );
        assert_eq!(
            judge(&c, &fine, &[Release::V1_1_3], true, "o").verdict,
            Verdict::Contradicts
        );
        assert_eq!(
            judge(&c, &fine, &Release::ALL, true, "o").verdict,
            Verdict::Inconclusive
        );
        let f = judge(&c, &fine, &Release::ALL, true, "o");
        assert_eq!(f.matching_releases, vec![Release::V1_3_0, Release::Master]);
        assert_eq!(
            judge(&c, &fine, &Release::ALL, false, "o").verdict,
            Verdict::NotApplicable,
            "a profile row says nothing about another backend"
        );
        let native = Claim::record(Ref::Native(5));
        assert_eq!(
            judge(&native, &fine, &[], false, "o").verdict,
            Verdict::Recorded
        );
        assert_eq!(
            judge(&native, &fine, &[], true, "o").verdict,
            Verdict::NotApplicable
        );
    }
}
