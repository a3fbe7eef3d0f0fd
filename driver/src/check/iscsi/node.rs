//! Read-only: what the node offers multipath volumes and the volume limit (issue 41 items 1 and 4; real-node checks
//! N33 and N39). Whether MPIO's Microsoft DSM claims iSCSI disks (`MSFT_MSDSMSupportedHW`), and how many iSCSI
//! sessions the node has, whoever made them: the driver reports the initiator's remaining sessions in NodeGetInfo.
//! csi-proxy has no call for either: there the check does not run (and is not reported).

use super::super::Ctx;
use super::super::report::PlanStep;
use crate::host::{Host, HostOp};
use crate::iscsi::ISCSI_SESSION_LIMIT;

pub(in crate::check) fn plan() -> PlanStep {
    PlanStep {
        check: "iscsi_node",
        actions: vec![
            "read-only (native backend): whether MPIO's Microsoft DSM claims iSCSI disks (MSFT_MSDSMSupportedHW)"
                .to_owned(),
            format!(
                "read-only (native backend): the node's iSCSI sessions, whoever made them (NodeGetInfo reports \
                 {ISCSI_SESSION_LIMIT} minus them plus the volumes held)"
            ),
        ],
    }
}

pub(in crate::check) async fn run<H: Host>(cx: &mut Ctx<'_, H>) {
    let h = cx.host();
    let caps = h.capabilities();
    if !caps.multipath && !caps.list_iscsi_sessions {
        // Not a check of this backend (the plan says native only), so not in the report either.
        return;
    }
    let mut c = cx.begin(
        "iscsi_node",
        "MPIO's claim of iSCSI disks and the node's iSCSI sessions",
        "iscsi",
    );
    let mut notes = Vec::new();
    if caps.multipath {
        let d = cx.d();
        let (o, r) = cx
            .call(HostOp::MultipathClaim, "MSFT_MSDSMSupportedHW", async {
                h.mpio_claim(d).await.map(|claim| format!("{claim:?}"))
            })
            .await;
        c.observe("mpio_claim", o, Vec::new());
        if let Ok(claim) = r {
            notes.push(format!(
                "MPIO: {claim} (multipath volumes need ClaimsIscsi; check N33)"
            ));
        }
    }
    if caps.list_iscsi_sessions {
        let d = cx.d();
        let (o, r) = cx
            .call(
                HostOp::ListIscsiSessions,
                "every session of the node",
                async { h.iscsi_sessions(d).await.map(|s| s.len()) },
            )
            .await;
        c.observe("iscsi_sessions", o, Vec::new());
        if let Ok(n) = r {
            notes.push(format!(
                "{n} iSCSI sessions: {} left of the initiator's {ISCSI_SESSION_LIMIT} (check N39)",
                ISCSI_SESSION_LIMIT.saturating_sub(n as u64)
            ));
        }
    }
    if !notes.is_empty() {
        c.note(notes.join("; "));
    }
    cx.end(c);
}
