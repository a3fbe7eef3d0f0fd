//! The `smb_options` check (issue 40 item 2; native items N47, N48): the operator's share staged with SMB client
//! options, as a StorageClass's parameters would ask them, through the same host call the driver's stage makes
//! (`NewSmbGlobalMapping` with the options and the staging link).
//!
//! On the native backend it records the node's Windows build, maps the share with the options asked (`--smb-options`,
//! else every default option the build takes: [`default_smb_options`]), checks the link, and reads back what the
//! mapping's `MSFT_SmbGlobalMapping` instance reports of each option the build takes through the driver's own
//! weaker-than-asked judgement: a second stage of the share asks every one of them at its strongest (booleans true,
//! `transportType=quic`) with no link. That ask either reuses the mapping (it holds them all) or is refused as weaker,
//! naming per option what the instance shows — and that refusal is itself the record of the "weaker than asked"
//! conflict. The ask never creates a mapping while the share's own is there (`host/native/smb.rs`: an existing `OK`
//! mapping is judged, never replaced). An option the build lacks (the first in the options' documented order) is asked
//! alone, and the driver's refusal recorded: it refuses before any WMI call, so what Windows itself answers an older
//! build is still settled by hand (`docs/real-node-checks.md` N47). Then the stage is undone (`Rmdir` of the link,
//! `RemoveSmbGlobalMapping`) and shown gone (`PathExists` false, a second removal finds no mapping).
//!
//! On csiProxy mode no host call is made: the driver refuses every SMB client option before any (csi-proxy v1's
//! request cannot carry them), and the check records that refusal, the same `FailedPrecondition` text, naming
//! `mode: hostProcess`.

use std::collections::BTreeMap;

use super::Ctx;
use super::expect::{Claim, Ref};
use super::ledger::Created;
use super::options::CheckOptions;
use super::options::{SmbTarget, default_smb_options};
use super::report::{ErrorReport, OptionRefusal, Outcome, PlanStep, SmbOptionsReport};
use crate::host::{Host, HostErrorKind, HostOp, SmbMappingOptions, SmbOption, SmbTransport};

/// The options `build` takes, each at its strongest: booleans true, `transportType=quic`.
fn strongest(build: u32) -> SmbMappingOptions {
    let on = |o: SmbOption| (build >= o.first_build().0).then_some(true);
    SmbMappingOptions {
        require_privacy: on(SmbOption::RequirePrivacy),
        require_integrity: on(SmbOption::RequireIntegrity),
        use_write_through: on(SmbOption::UseWriteThrough),
        compress_network_traffic: on(SmbOption::CompressNetworkTraffic),
        transport_type: on(SmbOption::TransportType).map(|_| SmbTransport::Quic),
        block_ntlm: on(SmbOption::BlockNtlm),
    }
}

/// The first option (documented order) `build` lacks, asked alone (`transportType=tcp`: the build check refuses the
/// key whatever its value, and TCP asks nothing of the server).
fn one_missing(build: u32) -> Option<(SmbOption, SmbMappingOptions)> {
    let o = SmbOption::ALL
        .into_iter()
        .find(|o| build < o.first_build().0)?;
    let mut asked = SmbMappingOptions::default();
    match o {
        SmbOption::RequirePrivacy => asked.require_privacy = Some(true),
        SmbOption::RequireIntegrity => asked.require_integrity = Some(true),
        SmbOption::UseWriteThrough => asked.use_write_through = Some(true),
        SmbOption::CompressNetworkTraffic => asked.compress_network_traffic = Some(true),
        SmbOption::TransportType => asked.transport_type = Some(SmbTransport::Tcp),
        SmbOption::BlockNtlm => asked.block_ntlm = Some(true),
    }
    Some((o, asked))
}

fn json(options: &SmbMappingOptions) -> serde_json::Value {
    serde_json::to_value(options).unwrap_or_default()
}

/// What the mapping reports of each option of `asked` (the strongest ask), read from the driver's answer to it:
/// reused means the instance shows every one (`SmbMappingOptions::weaker_in`: an option asked true is weaker unless
/// shown true, QUIC unless shown QUIC); a weaker-than-asked refusal names, per option it lacks, what the instance
/// shows (`the mapping's <Parameter> is <true|false|not shown|tcp|not QUIC>`). `None` for any other answer.
fn read_back(
    asked: &SmbMappingOptions,
    answer: Result<(), (HostErrorKind, &str)>,
) -> Option<BTreeMap<&'static str, serde_json::Value>> {
    let refusal = match answer {
        Ok(()) => None,
        Err((HostErrorKind::NotSatisfiable, text)) if text.contains("weaker client options") => {
            Some(text)
        }
        Err(_) => return None,
    };
    let mut shown = BTreeMap::new();
    for o in asked.asked() {
        let strongest = if o == SmbOption::TransportType {
            serde_json::json!(SmbTransport::Quic.key())
        } else {
            serde_json::json!(true)
        };
        let value = match refusal.and_then(|t| {
            let clause = t.find(&format!("{}: asked ", o.key()))?;
            let rest = &t[clause..];
            let is = format!("the mapping's {} is ", o.parameter());
            let at = rest.find(&is)? + is.len();
            let end = rest[at..].find([';', ')']).map_or(rest.len(), |e| at + e);
            Some(rest[at..end].trim())
        }) {
            None => strongest,
            Some("true") => serde_json::json!(true),
            Some("false") => serde_json::json!(false),
            Some("tcp") => serde_json::json!(SmbTransport::Tcp.key()),
            Some(_) => serde_json::Value::Null,
        };
        shown.insert(o.key(), value);
    }
    Some(shown)
}

pub(super) fn plan(o: &CheckOptions, t: &SmbTarget) -> PlanStep {
    let link = o.scratch_path(r"smb-options\link");
    let root = t.share.root();
    let asked = t.options.map_or_else(
        || "the default options of the node's Windows build (see --smb-options)".to_owned(),
        |a| a.describe(),
    );
    PlanStep {
        check: "smb_options",
        actions: vec![
            format!(
                "csiProxy mode: nothing (the driver refuses SMB client options before any host call; recorded). \
                 Native backend: Mkdir {}",
                o.scratch_path("smb-options")
            ),
            format!(
                "NewSmbGlobalMapping {} with {asked}, local_path {link}; IsSymlink {link}",
                t.share
            ),
            format!(
                "NewSmbGlobalMapping {root} (no link) with every option the build takes at its strongest (read back: \
                 reused, or refused as weaker than asked), and with one option the build lacks (refused)"
            ),
            format!(
                "Rmdir {link}; RemoveSmbGlobalMapping {root}; PathExists {link}; RemoveSmbGlobalMapping {root} again"
            ),
        ],
    }
}

/// Run the check (after `smb_removed`: the run's own mapping of the share is gone).
pub(super) async fn run<H: Host>(cx: &mut Ctx<'_, H>, t: &SmbTarget) -> Result<(), String> {
    let h = cx.host();
    let root = t.share.root();
    let mut c = cx.begin(
        "smb_options",
        "the share staged with SMB client options, read back, and the driver's refusals",
        "smb",
    );
    let build = h.windows_build();
    let (source, asked) = match t.options {
        Some(o) => ("flag", o),
        None => ("default", default_smb_options(build.unwrap_or(0))),
    };
    let mut digest = SmbOptionsReport {
        windows_build: build,
        source,
        asked: json(&asked),
        reported: BTreeMap::new(),
        missing: None,
        stronger: None,
    };
    if !h.capabilities().smb_mapping_options {
        // The driver's own answer on csiProxy mode (`smb/stage.rs`), before any record or host call.
        let refusal = crate::smb::options::host_process_refusal(&t.share.to_string(), &asked).err();
        let outcome = Outcome {
            op: "NodeStageVolume".to_owned(),
            value: None,
            error: refusal.map(|e| {
                ErrorReport::classified("NodeStageVolume", &format!("{:?}", e.code()), &e.chain())
            }),
            millis: 0,
        };
        c.observe("refused_on_csi_proxy", outcome, Vec::new());
        c.note("csiProxy mode: SMB client options need mode: hostProcess; the driver's refusal is recorded");
        c.smb_options(digest);
        cx.end(c);
        return Ok(());
    }
    c.observe(
        "windows_build",
        Outcome {
            op: "RtlGetVersion".to_owned(),
            value: build.map(serde_json::Value::from),
            error: None,
            millis: 0,
        },
        vec![Claim::record(Ref::Native(47))],
    );
    let mapping = Created::SmbMapping {
        remote: root.to_string(),
    };
    // The option the build lacks, asked alone: refused before any WMI call, so it runs before anything is made.
    if let Some((option, alone)) = build.and_then(one_missing) {
        cx.record(mapping.clone(), false)?;
        let (o, r) = cx
            .call(
                HostOp::NewSmbGlobalMapping,
                &format!("{root} with {} (the build lacks it)", alone.describe()),
                h.new_smb_global_mapping_with(&root, None, Some(&t.credential), &alone, cx.d()),
            )
            .await;
        c.observe("missing_option", o, vec![Claim::record(Ref::Native(47))]);
        match r {
            Err(e) => {
                if e.kind == HostErrorKind::NotSatisfiable {
                    // Refused before any WMI call: nothing was made.
                    cx.forget(&mapping)?;
                }
                digest.missing = Some(OptionRefusal {
                    asked: json(&alone),
                    message: e.text().to_owned(),
                });
            }
            Ok(()) => {
                // Mapped although the driver's table says the build lacks it (the ledger's cleanup removes it).
                c.fail(format!(
                    "{} was not refused on build {build:?}: the driver's first-build table \
                     (host/smb_options.rs) does not hold on this node",
                    option.key()
                ));
                c.smb_options(digest);
                cx.end(c);
                return Ok(());
            }
        }
    }
    let dir = cx.opts().scratch_path("smb-options");
    let link = cx.opts().scratch_path(r"smb-options\link");
    let (_, r) = cx
        .call(HostOp::Mkdir, dir.as_str(), h.mkdir(&dir, cx.d()))
        .await;
    r.map_err(|e| format!("cannot create {dir}: {e}"))?;
    let link_obj = Created::Link {
        path: link.to_string(),
    };
    cx.record(mapping.clone(), false)?;
    cx.record(link_obj.clone(), false)?;
    let (o, r) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!("{} with {} at {link}", t.share, asked.describe()),
            h.new_smb_global_mapping_with(
                &t.share,
                Some(&link),
                Some(&t.credential),
                &asked,
                cx.d(),
            ),
        )
        .await;
    let mut refs = vec![Claim::record(Ref::Native(47))];
    if asked.transport_type.is_some() || asked.block_ntlm.is_some() {
        refs.push(Claim::record(Ref::Native(48)));
    }
    c.observe("map_with_options", o, refs);
    if let Err(e) = r {
        if e.kind == HostErrorKind::NotSatisfiable {
            // Refused before any `Create` (a build check, or a mapping of the share that appeared meanwhile, weaker
            // than asked: someone else's, never to be removed by this run's cleanup).
            cx.forget(&mapping)?;
            cx.forget(&link_obj)?;
        }
        if e.kind == HostErrorKind::NotSatisfiable
            && !asked.missing_on(build.unwrap_or(0)).is_empty()
        {
            c.note(format!(
                "the options asked include one the node's build lacks: refused before any mapping ({})",
                super::report::first_line(e.text())
            ));
        } else {
            c.fail(format!(
                "the share could not be mapped with {}: {e}",
                asked.describe()
            ));
        }
        c.smb_options(digest);
        cx.end(c);
        return Ok(());
    }
    let (o, _) = cx
        .call(
            HostOp::IsSymlink,
            link.as_str(),
            h.is_symlink(&link, cx.d()),
        )
        .await;
    c.observe("is_symlink", o, Vec::new());
    // Read back through the driver's weaker-than-asked judgement: a second stage, every option at its strongest.
    let strong = strongest(build.unwrap_or(0));
    let (o, r) = cx
        .call(
            HostOp::NewSmbGlobalMapping,
            &format!(
                "{root} with {} (a second stage asking more)",
                strong.describe()
            ),
            h.new_smb_global_mapping_with(&root, None, Some(&t.credential), &strong, cx.d()),
        )
        .await;
    c.observe(
        "stronger_than_mapping",
        o,
        vec![
            Claim::record(Ref::Native(47)),
            Claim::record(Ref::Native(48)),
        ],
    );
    match read_back(
        &strong,
        r.as_ref().map(|_| ()).map_err(|e| (e.kind, e.text())),
    ) {
        Some(shown) => digest.reported = shown,
        None => c.note(
            "the mapping's options could not be read back (the second stage got another answer)",
        ),
    }
    if let Err(e) = &r {
        digest.stronger = Some(OptionRefusal {
            asked: json(&strong),
            message: e.text().to_owned(),
        });
    }
    // Unstage: the link, then the mapping; then show both gone.
    super::smb::unstage_and_show_gone(cx, &mut c, &link, &root).await?;
    c.smb_options(digest);
    cx.end(c);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{BUILD_2019, BUILD_2022, BUILD_2025, ReportedOptions};

    #[test]
    fn the_defaults_and_the_strongest_ask_follow_the_build() {
        assert_eq!(
            default_smb_options(BUILD_2019).describe(),
            "requirePrivacy=true"
        );
        assert_eq!(
            default_smb_options(BUILD_2022).describe(),
            "requireIntegrity=true, useWriteThrough=true"
        );
        assert_eq!(
            default_smb_options(BUILD_2025).describe(),
            "requireIntegrity=true, useWriteThrough=true, compressNetworkTraffic=true, transportType=tcp"
        );
        assert_eq!(strongest(BUILD_2022).asked().len(), 3);
        assert_eq!(strongest(BUILD_2025).asked().len(), 6);
        assert_eq!(
            one_missing(BUILD_2019).map(|m| m.0),
            Some(SmbOption::RequireIntegrity)
        );
        assert_eq!(
            one_missing(BUILD_2022).map(|m| m.0),
            Some(SmbOption::CompressNetworkTraffic)
        );
        assert!(one_missing(BUILD_2025).is_none());
        assert_eq!(one_missing(0).map(|m| m.0), Some(SmbOption::RequirePrivacy));
    }

    /// The read-back parses the driver's own weaker-than-asked text (`host/native/smb.rs` wraps
    /// `SmbMappingOptions::weaker_in`'s clauses in parentheses): a change of its wording fails here.
    #[test]
    fn the_read_back_follows_the_weaker_than_asked_text() {
        let asked = strongest(BUILD_2025);
        let reported = ReportedOptions {
            require_privacy: Some(true),
            require_integrity: Some(false),
            use_write_through: Some(true),
            compress_network_traffic: None,
            transport_type: Some(SmbTransport::Tcp),
            block_ntlm: Some(false),
        };
        let text = format!(
            "the SMB global mapping of \\\\fs1\\s exists with weaker client options than this volume asks ({}): \
             wincsi never reuses a mapping weaker than asked",
            asked.weaker_in(&reported).join("; ")
        );
        let shown = read_back(&asked, Err((HostErrorKind::NotSatisfiable, &text))).expect("read");
        assert_eq!(shown["requirePrivacy"], true);
        assert_eq!(shown["requireIntegrity"], false);
        assert_eq!(shown["useWriteThrough"], true);
        assert_eq!(shown["compressNetworkTraffic"], serde_json::Value::Null);
        assert_eq!(shown["transportType"], "tcp");
        assert_eq!(shown["blockNTLM"], false);
        let silent = asked.weaker_in(&ReportedOptions::default()).join("; ");
        let text = format!("weaker client options than this volume asks ({silent}): x");
        let shown = read_back(&asked, Err((HostErrorKind::NotSatisfiable, &text))).expect("read");
        assert_eq!(shown["transportType"], serde_json::Value::Null);
        let all = read_back(&asked, Ok(())).expect("reused");
        assert_eq!(all["transportType"], "quic");
        assert!(all.values().filter(|v| **v == true).count() == 5);
        assert!(read_back(&asked, Err((HostErrorKind::Unavailable, "no"))).is_none());
    }
}
