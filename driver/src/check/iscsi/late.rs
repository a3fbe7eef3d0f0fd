//! `iscsi_discovery_refresh`: a target the storage side created after the node added its portal (one target per
//! volume, as democratic-csi's TrueNAS and zfs-generic drivers make them). Does the node list it without a refresh
//! (`AddTargetPortal` again, then `DiscoverTargetPortal`: row `discovery_refresh`, real-node check 25), and after the
//! refresh the driver would make (native: `MSFT_iSCSITargetPortal.Update`; csi-proxy: `RemoveTargetPortal` +
//! `AddTargetPortal`, which the driver does only for a portal no session of the node uses)?
//!
//! Runs before the scratch target's login, so no session of this run uses the portal. Through csi-proxy the portal is
//! removed only when no target it lists has disks on this node (`GetTargetDisks`); otherwise the check is skipped.
//! The portal stays added, as the other iSCSI checks leave it.

use serde_json::json;

use super::super::expect::{Claim, Expect, Ref};
use super::super::options::IscsiTarget;
use super::super::report::Outcome;
use super::super::{CheckRun, Ctx};
use crate::host::{Host, HostOp, HostResult};

/// Whether `iqns` lists `wanted` (IQNs compare ignoring case).
fn lists(r: &HostResult<Vec<String>>, wanted: &str) -> Option<bool> {
    r.as_ref()
        .ok()
        .map(|v| v.iter().any(|i| i.trim().eq_ignore_ascii_case(wanted)))
}

/// `DiscoverTargetPortal`, observed as "is `late` listed".
async fn listed<H: Host>(
    cx: &Ctx<'_, H>,
    c: &mut CheckRun,
    name: &'static str,
    t: &IscsiTarget,
    late: &str,
    claims: Vec<Claim>,
) -> Option<(bool, Vec<String>)> {
    let h = cx.host();
    let (o, r) = cx
        .call(
            HostOp::DiscoverTargetPortal,
            &t.portal.to_string(),
            h.discover_target_portal(&t.portal, cx.d()),
        )
        .await;
    let found = lists(&r, late);
    let o = match found {
        Some(f) => Outcome {
            value: Some(json!(f)),
            ..o
        },
        None => o,
    };
    c.observe(name, o, claims);
    found.map(|f| (f, r.unwrap_or_default()))
}

/// The first target `iqns` lists that has disks on this node (a session), asked with `GetTargetDisks`. Its error
/// counts as no session (the PowerShell era fails it for an unconnected target: row `target_disks_unconnected`).
async fn with_session<H: Host>(
    cx: &Ctx<'_, H>,
    c: &mut CheckRun,
    t: &IscsiTarget,
    iqns: &[String],
) -> Option<String> {
    let h = cx.host();
    for iqn in iqns {
        let (o, r) = cx
            .call(
                HostOp::GetTargetDisks,
                &format!("{iqn} (a session on the portal?)"),
                h.get_target_disks(&t.portal, iqn, cx.d()),
            )
            .await;
        c.observe("portal_sessions", o, Vec::new());
        if r.is_ok_and(|d| !d.is_empty()) {
            return Some(iqn.clone());
        }
    }
    None
}

pub(super) async fn run<H: Host>(cx: &mut Ctx<'_, H>, t: &IscsiTarget) {
    let Some(late) = t.late_iqn.clone() else {
        return;
    };
    let h = cx.host();
    let mut c = cx.begin(
        "iscsi_discovery_refresh",
        "a target created after the portal was added: listed without a refresh, and after one?",
        "iscsi",
    );
    let (o, _) = cx
        .call(
            HostOp::AddTargetPortal,
            &format!("{} (already added)", t.portal),
            h.add_target_portal(&t.portal, cx.d()),
        )
        .await;
    c.observe("add_target_portal_again", o, Vec::new());
    // PowerShell era: whether New-IscsiTargetPortal (or Get-IscsiTarget) re-runs SendTargets is the open question;
    // v1.3.0 and master return early from AddTargetPortal and read the cache (sourced).
    let before = listed(
        cx,
        &mut c,
        "listed_without_refresh",
        t,
        &late,
        vec![
            Claim::eras(
                Ref::Row("discovery_refresh"),
                Expect::Record,
                Expect::Value(json!(false)),
                true,
            ),
            Claim::record(Ref::NodeCheck(21)),
        ],
    )
    .await;
    let Some((_, listed_before)) = before else {
        c.fail("DiscoverTargetPortal gave no answer: the discovery check stops");
        cx.end(c);
        return;
    };
    let refreshed = if h.capabilities().refresh_discovery {
        let (o, r) = cx
            .call(
                HostOp::RefreshTargetPortal,
                &t.portal.to_string(),
                h.refresh_target_portal(&t.portal, cx.d()),
            )
            .await;
        c.observe("refresh_target_portal", o, Vec::new());
        r.is_ok()
    } else {
        // RemoveTargetPortal forgets every target discovered through the portal: never on a portal that carries a
        // session (the driver's rule too), which this tool did not open.
        if let Some(iqn) = with_session(cx, &mut c, t, &listed_before).await {
            c.skip(format!(
                "{iqn} has a session through portal {}: it is not removed to refresh discovery (run the check where \
                 no volume uses the portal)",
                t.portal
            ));
            cx.end(c);
            return;
        }
        let (o, r) = cx
            .call(
                HostOp::RemoveTargetPortal,
                &t.portal.to_string(),
                h.remove_target_portal(&t.portal, cx.d()),
            )
            .await;
        c.observe("remove_target_portal", o, Vec::new());
        let (o, r2) = cx
            .call(
                HostOp::AddTargetPortal,
                &format!("{} (again, after its removal)", t.portal),
                h.add_target_portal(&t.portal, cx.d()),
            )
            .await;
        c.observe("add_target_portal_after_removal", o, Vec::new());
        r.is_ok() && r2.is_ok()
    };
    let after = listed(
        cx,
        &mut c,
        "listed_after_refresh",
        t,
        &late,
        vec![
            Claim::all(
                Ref::Row("discovery_refresh"),
                Expect::Value(json!(true)),
                true,
            ),
            Claim::record(Ref::NodeCheck(21)),
        ],
    )
    .await;
    if !refreshed {
        c.fail("the refresh failed (see its observation)");
    } else if after.map(|(f, _)| f) != Some(true) {
        c.fail(format!(
            "{late} is not listed even after the refresh: check --iscsi-late-iqn and that the target allows this \
             initiator"
        ));
    }
    cx.end(c);
}
