//! The matrix's multipath workflow (issue 41 items 1 and 2): the iSCSI volume of the matrix named through two portals
//! of one array on a node whose MPIO (MSDSM) claims iSCSI disks, grown while published. On the native backend the
//! stage logs in through each portal with `IsMultipathEnabled` and the unstage logs every session out; through
//! csi-proxy it is one session (its `ConnectTarget` has no multipath flag). Its cells are the ones the other
//! workflows do not have: every login and logout (each occurrence, even where the recording repeats it back to back)
//! and every step of the expansion, crossed with each fault; the rest of its sequence is the iSCSI workflow's.

use wincsi::lifecycle::ExpandRequest;

use super::{CHAP_SECRET, Env, Error, Fault, ID, IQN, Op, faultable, target};
use serde_json::json;
use sim::Scenario;
use wincsi::locks::Deadline;

/// kubelet's operations: the volume grows while a pod uses it.
pub(super) const OPS: [Op; 5] = [
    Op::Stage,
    Op::Publish,
    Op::Expand,
    Op::Unpublish,
    Op::Unstage,
];

/// The volume context's second portal.
pub(super) const PORTALS: (&str, &str) = ("portals", "10.0.0.6:3260");

const LUN_ID: &str = "matrix-lun";
const SIZE: u64 = 1 << 30;
/// What the array grows the LUN to before the expansion.
const GROWN: u64 = 2 * SIZE;

/// The matrix's scenario with the target also behind portal 10.0.0.6 (the array's portal group) and MPIO claiming
/// iSCSI disks.
pub(super) fn scenario() -> Scenario {
    Scenario::from_json(
        &json!({
            "iscsi": {"portals": [
                {"address": "10.0.0.5", "targets": [
                    {"iqn": IQN, "chap": {"mode": "one_way", "username": "node-a", "secret": CHAP_SECRET},
                     "luns": [{"lun": 0, "id": LUN_ID, "size": SIZE, "online": false}]}]},
                {"address": "10.0.0.6", "targets": [{"iqn": IQN}]}
            ]},
            "host": {
                "behaviour": {"arrival": crate::common::ARRIVAL},
                "mpio": {"installed": true, "claim_iscsi": true}
            }
        })
        .to_string(),
    )
    .expect("scenario")
}

/// A login or a logout (native WMI or csi-proxy).
fn path_call(rpc: &str) -> bool {
    matches!(
        rpc,
        "MSFT_iSCSITarget.Connect"
            | "MSFT_iSCSITarget.Disconnect"
            | "ConnectTarget"
            | "DisconnectTarget"
    )
}

/// The calls of one operation's recording a cell may fault: the steps, and every login and logout.
pub(super) fn indices(rpcs: &[String]) -> Vec<usize> {
    let steps: Vec<usize> = faultable(rpcs).collect();
    (0..rpcs.len())
        .filter(|&i| steps.contains(&i) || path_call(&rpcs[i]))
        .collect()
}

/// Whether the workflow has a cell for `rpc` of `op` (module docs).
pub(super) fn covers(op: Op, rpc: &str, _fault: Fault) -> bool {
    match op {
        Op::Stage | Op::Unstage => path_call(rpc),
        Op::Expand => true,
        Op::Publish | Op::Unpublish => false,
    }
}

/// NodeExpandVolume on the published path, once the array grew the LUN (again on a retry: it stays grown).
pub(super) async fn expand(env: &Env, d: Deadline) -> Result<(), Error> {
    env.sim
        .with_state_mut(|s| s.set_disk_size(LUN_ID, GROWN))
        .expect("the array grows the LUN");
    let size = env
        .mgr
        .expand(
            &ExpandRequest {
                volume_id: ID.into(),
                volume_path: target(),
                required_bytes: GROWN as i64,
            },
            d,
        )
        .await?;
    assert!(size > SIZE as i64, "the volume did not grow: {size}");
    Ok(())
}
