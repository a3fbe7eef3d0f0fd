//! `wincsi-node check-node`: settle on a real node what the simulated host can only assume.
//!
//! The run exercises the configured host backend (csi-proxy, or the native backend when it lands) through the
//! host port ([`Host`]) only, on scratch objects it creates and removes itself: a directory tree and links under a
//! scratch folder of the kubelet root (`fs.rs`); optionally an SMB share (`smb.rs`) and an iSCSI LUN (`iscsi/`) given
//! on the command line. For each check it records what the node did ([`report::Outcome`]: the value or the error
//! with the driver's classification) and judges it against the csi-proxy release-profile rows (`sim/README.md`)
//! and the items of `docs/real-node-checks.md` ([`expect`]); the node's release is identified from the answers
//! that public sources settle (`release.rs`).
//!
//! Safety by construction:
//! * the plan (every object it will create or touch) is printed before anything is done; `--dry-run` stops there;
//! * every object is written to a local ledger ([`ledger`]) *before* it is created, and removed at the end —
//!   after a failed check, on Ctrl-C, or by a later `--phase cleanup` after a crash;
//! * it refuses a scratch folder it did not create, an SMB share that is already mapped (a mapping attempt with a
//!   wrong password must fail with a logon failure, which proves no usable mapping existed: csi-proxy would have
//!   reused it), an iSCSI target that already has a session on the node, and a LUN whose disk has any volume or
//!   partition, or is ambiguous (target ∩ LUN must name exactly one disk);
//! * secrets come from the environment or a file and never reach the report or the progress lines.
//!
//! Reboot-dependent checks run in two phases (`before-reboot` keeps fixtures, `after-reboot` checks and removes
//! them); the ledger carries the state between them.

pub mod cli;
pub mod expect;
mod fs;
mod iscsi;
pub mod ledger;
pub mod options;
mod release;
pub mod report;
mod smb;
mod smb_machine;
mod smb_options;

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::time::Instant;

use serde::Serialize;

use self::cli::Phase;
use self::expect::{Claim, Release};
use self::ledger::{Created, LedgerFile};
use self::options::CheckOptions;
use self::report::{
    CheckReport, Cleanup, LeftObject, Node, Outcome, PlanStep, ReleaseReport, Report, Status,
    Summary, Tool,
};
use crate::backend::{BackendInfo, HostJob};
use crate::config::{HostBackend, build_info};
use crate::host::{Host, HostError, HostErrorKind, HostOp, HostResult};
use crate::locks::Deadline;

/// A check in progress: its report and the claims to judge once the release is known.
pub(crate) struct CheckRun {
    report: CheckReport,
    claims: Vec<(&'static str, Claim)>,
}

impl CheckRun {
    /// Record an observation and what it is evidence for.
    pub(crate) fn observe(&mut self, name: &'static str, outcome: Outcome, claims: Vec<Claim>) {
        self.report.observations.insert(name, outcome);
        self.claims.extend(claims.into_iter().map(|c| (name, c)));
    }

    /// The check could not be carried out.
    pub(crate) fn fail(&mut self, note: impl Into<String>) {
        self.report.status = Status::Failed;
        self.report.note = Some(note.into());
    }

    /// The check did not run.
    pub(crate) fn skip(&mut self, note: impl Into<String>) {
        self.report.status = Status::Skipped;
        self.report.note = Some(note.into());
    }

    /// Something to know about the result.
    pub(crate) fn note(&mut self, note: impl Into<String>) {
        self.report.note = Some(note.into());
    }

    /// The `smb_options` check's digest.
    pub(crate) fn smb_options(&mut self, digest: report::SmbOptionsReport) {
        self.report.smb_options = Some(digest);
    }
}

/// What the checks share: the host, the options, the ledger and the finished checks.
pub(crate) struct Ctx<'a, H> {
    host: &'a H,
    opts: &'a CheckOptions,
    ledger: LedgerFile,
    runs: Vec<CheckRun>,
}

/// Progress goes to stderr (stdout carries the report).
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

impl<'a, H: Host> Ctx<'a, H> {
    pub(crate) fn host(&self) -> &'a H {
        self.host
    }

    pub(crate) fn opts(&self) -> &'a CheckOptions {
        self.opts
    }

    /// A fresh deadline for one host call.
    pub(crate) fn d(&self) -> Deadline {
        Deadline::after(self.opts.call_timeout)
    }

    /// Start a check.
    pub(crate) fn begin(
        &self,
        id: &'static str,
        title: &'static str,
        group: &'static str,
    ) -> CheckRun {
        say(&format!("[{id}] {title}"));
        CheckRun {
            report: CheckReport {
                id,
                title,
                group,
                status: Status::Ran,
                note: None,
                observations: BTreeMap::new(),
                findings: Vec::new(),
                smb_options: None,
            },
            claims: Vec::new(),
        }
    }

    /// Finish a check.
    pub(crate) fn end(&mut self, run: CheckRun) {
        if let Some(n) = &run.report.note {
            say(&format!("  note: {n}"));
        }
        self.runs.push(run);
    }

    /// Make one host call, saying first what it does; bounded by the call timeout.
    pub(crate) async fn call<T: Serialize>(
        &self,
        op: HostOp,
        what: &str,
        fut: impl Future<Output = HostResult<T>>,
    ) -> (Outcome, HostResult<T>) {
        say(&format!("  -> {op} {what}"));
        let start = Instant::now();
        let result = match tokio::time::timeout(self.opts.call_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(HostError::new(
                op,
                HostErrorKind::DeadlineExceeded,
                format!("no answer within {:?}", self.opts.call_timeout),
            )),
        };
        let millis = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let outcome = Outcome::from_result(op.name(), &result, millis);
        match &outcome.error {
            Some(e) => say(&format!(
                "     error {}: {}",
                e.kind,
                report::first_line(&e.message)
            )),
            None => say(&format!(
                "     ok{}",
                outcome
                    .value
                    .as_ref()
                    .map(|v| format!(": {v}"))
                    .unwrap_or_default()
            )),
        }
        (outcome, result)
    }

    /// Record an object in the ledger before creating it.
    pub(crate) fn record(&mut self, object: Created, keep_for_reboot: bool) -> Result<(), String> {
        self.ledger.record(object, keep_for_reboot)
    }

    /// Mark a recorded object as kept (or not) for the after-reboot phase.
    pub(crate) fn keep(&mut self, object: &Created, keep: bool) -> Result<(), String> {
        for e in &mut self.ledger.ledger.entries {
            if &e.object == object {
                e.keep_for_reboot = keep;
            }
        }
        self.ledger.save()
    }

    /// Forget an object that is gone.
    pub(crate) fn forget(&mut self, object: &Created) -> Result<(), String> {
        self.ledger.ledger.entries.retain(|e| &e.object != object);
        self.ledger.save()
    }

    /// The ledger's entries.
    pub(crate) fn recorded(&self) -> &[ledger::Entry] {
        &self.ledger.ledger.entries
    }
}

/// The plan of a run, from the options alone.
pub fn plan(opts: &CheckOptions) -> Vec<PlanStep> {
    let mut steps = release::plan();
    match opts.phase {
        Phase::Full | Phase::BeforeReboot => {
            steps.extend(fs::plan(opts));
            steps.extend(smb::plan(opts));
            steps.extend(smb_machine::plan(opts));
            steps.push(iscsi::node_plan());
            steps.extend(iscsi::plan(opts));
        }
        Phase::AfterReboot => {
            steps.extend(smb::plan(opts));
            steps.extend(iscsi::plan(opts));
        }
        Phase::Cleanup => {}
    }
    steps.push(PlanStep {
        check: "cleanup",
        actions: vec![format!(
            "remove, newest first, every object recorded in the ledger {} (a link or mount point is removed, \
             never its target){}",
            opts.ledger_path.display(),
            if opts.phase == Phase::BeforeReboot {
                ", except the reboot fixtures"
            } else {
                ""
            }
        )],
    });
    steps
}

/// The checks of the run's phase. Errors stop the run (the cleanup still runs).
async fn checks<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    let r = groups(cx).await;
    if let Err(why) = &r {
        let mut c = cx.begin("stopped", "the run stopped early", "filesystem");
        c.fail(why.clone());
        cx.end(c);
    }
    r
}

async fn groups<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    release::run(cx).await;
    match cx.opts.phase {
        Phase::Full | Phase::BeforeReboot => {
            fs::run(cx).await?;
            smb::run(cx).await?;
            smb_machine::run(cx).await?;
            iscsi::node_run(cx).await;
            iscsi::run(cx).await?;
        }
        Phase::AfterReboot => {
            smb::after_reboot(cx).await?;
            iscsi::after_reboot(cx).await?;
        }
        Phase::Cleanup => {}
    }
    Ok(())
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// Run check-node on `host` (see the module docs). `Err` only when the run is refused before touching the host.
pub async fn run<H: Host>(
    host: H,
    backend: BackendInfo,
    opts: &CheckOptions,
) -> Result<Report, String> {
    let started_unix_ms = now_unix_ms();
    let plan = plan(opts);
    say(&format!(
        "check-node plan (phase {}, backend {}):\n{}",
        opts.phase.as_str(),
        backend.description,
        report::render_plan(&plan)
    ));
    let csi_proxy = matches!(backend.kind, HostBackend::CsiProxy);
    let caps = host.capabilities();
    let node = Node {
        backend: backend.kind.name().to_owned(),
        transport: backend.description.clone(),
        kubelet_root: opts.kubelet_root.as_str().to_owned(),
        scratch: opts.scratch.as_str().to_owned(),
        capabilities: BTreeMap::from([
            ("list_smb_mappings", caps.list_smb_mappings),
            ("clear_disk_read_only", caps.clear_disk_read_only),
            ("discovery_chap", caps.discovery_chap),
            ("persistent_logins", caps.persistent_logins),
            ("smb_mapping_options", caps.smb_mapping_options),
        ]),
        windows_build: host.windows_build(),
    };
    let existing = LedgerFile::load(&opts.ledger_path)?;
    let mut report = Report {
        schema: report::SCHEMA_ID,
        tool: Tool {
            name: "wincsi-node check-node",
            version: build_info::VERSION,
            target: build_info::TARGET,
        },
        started_unix_ms,
        phase: opts.phase.as_str(),
        dry_run: opts.dry_run,
        node,
        release: ReleaseReport {
            claimed: opts.claimed,
            identified: Vec::new(),
            claim_consistent: None,
            judged_against: Vec::new(),
        },
        plan,
        checks: Vec::new(),
        cleanup: Cleanup {
            complete: true,
            ledger: opts.ledger_path.display().to_string(),
            ..Cleanup::default()
        },
        summary: Summary::default(),
    };
    if opts.dry_run {
        report.summary = Summary::of(&report.checks);
        return Ok(report);
    }
    let ledger = match (opts.phase, existing) {
        (Phase::Full | Phase::BeforeReboot, Some(l)) if !l.ledger.entries.is_empty() => {
            return Err(format!(
                "the ledger {} lists {} object(s) of an earlier run (scratch {}): run --phase {} first",
                l.path().display(),
                l.ledger.entries.len(),
                l.ledger.scratch,
                if l.ledger.awaiting_reboot {
                    "after-reboot"
                } else {
                    "cleanup"
                }
            ));
        }
        (Phase::AfterReboot, None) => {
            return Err(format!(
                "no ledger at {}: run --phase before-reboot, reboot the node, then --phase after-reboot",
                opts.ledger_path.display()
            ));
        }
        (Phase::AfterReboot, Some(l)) if !l.ledger.awaiting_reboot => {
            return Err(format!(
                "the ledger {} holds no reboot fixtures (it was not written by --phase before-reboot): run \
                 --phase cleanup",
                l.path().display()
            ));
        }
        (_, Some(l))
            if l.ledger.scratch != opts.scratch.as_str() && !l.ledger.entries.is_empty() =>
        {
            return Err(format!(
                "the ledger {} belongs to scratch folder {}, not {}: pass the same --scratch-dir",
                l.path().display(),
                l.ledger.scratch,
                opts.scratch
            ));
        }
        (_, Some(l)) => l,
        (_, None) => LedgerFile::new(&opts.ledger_path, &opts.scratch),
    };
    let mut cx = Ctx {
        host: &host,
        opts,
        ledger,
        runs: Vec::new(),
    };
    let (interrupted, stopped) = {
        let body = checks(&mut cx);
        tokio::pin!(body);
        tokio::select! {
            r = &mut body => (false, r.err()),
            _ = tokio::signal::ctrl_c() => (true, None),
        }
    };
    if interrupted {
        say("interrupted: cleaning up what this run created");
    }
    if let Some(why) = &stopped {
        say(&format!(
            "stopped: {why}; cleaning up what this run created"
        ));
    }
    say("[cleanup]");
    let keep = opts.phase == Phase::BeforeReboot && !interrupted && stopped.is_none();
    let cleaned = ledger::clean(
        cx.host,
        &mut cx.ledger,
        &opts.kubelet_root,
        keep,
        opts.call_timeout,
    )
    .await;
    for r in &cleaned.removed {
        say(&format!("  removed {r}"));
    }
    for (o, why) in &cleaned.left {
        say(&format!("  left {o}: {why}"));
    }
    report.cleanup.complete = cleaned.complete;
    report.cleanup.removed = cleaned.removed;
    report.cleanup.left = cleaned
        .left
        .into_iter()
        .map(|(object, reason)| LeftObject { object, reason })
        .collect();
    if interrupted {
        report.cleanup.left.push(LeftObject {
            object: "the run".to_owned(),
            reason: "interrupted (Ctrl-C): later checks did not run".to_owned(),
        });
    }
    if let Some(why) = stopped {
        report.cleanup.left.push(LeftObject {
            object: "the run".to_owned(),
            reason: format!("stopped: {why}"),
        });
    }
    // Judge: identify the release from the sourced claims, then every claim against the claim or the identified.
    let runs = std::mem::take(&mut cx.runs);
    let identified = if csi_proxy {
        expect::identify(runs.iter().flat_map(|r| {
            r.claims
                .iter()
                .filter_map(|(obs, c)| r.report.observations.get(obs).map(|o| (c, o)))
        }))
    } else {
        Vec::new()
    };
    let judged_against: Vec<Release> = match opts.claimed {
        Some(r) => vec![r],
        None => identified.clone(),
    };
    report.release.claim_consistent = opts.claimed.map(|r| identified.contains(&r));
    report.release.identified = identified;
    report.release.judged_against = judged_against.clone();
    for run in runs {
        let mut rep = run.report;
        for (obs, claim) in &run.claims {
            if let Some(outcome) = rep.observations.get(obs) {
                let f = expect::judge(claim, outcome, &judged_against, csi_proxy, obs);
                rep.findings.push(f);
            }
        }
        report.checks.push(rep);
    }
    report.summary = Summary::of(&report.checks);
    Ok(report)
}

/// The check-node job for [`crate::backend::run_job`].
pub struct CheckJob {
    /// The resolved options.
    pub options: CheckOptions,
}

impl HostJob for CheckJob {
    type Output = Result<Report, String>;

    async fn run<H: Host>(self, host: H, backend: BackendInfo) -> Self::Output {
        run(host, backend, &self.options).await
    }

    fn unavailable(self, kind: HostBackend, why: String) -> Self::Output {
        Err(format!(
            "the {} host backend cannot start: {why}",
            kind.name()
        ))
    }
}
