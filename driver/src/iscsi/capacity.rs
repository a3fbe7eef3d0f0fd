//! The iSCSI initiator's room for more volumes (issue 41 item 4; NodeGetInfo, `lifecycle/capacity.rs`).
//!
//! The Microsoft software initiator gives each session a SCSI target id on its adapter (a disk's location reads
//! `Adapter a : Port 0 : Target t : LUN l`), and a SCSI address carries the target id in one byte
//! (`SCSI_ADDRESS.TargetId`, a `UCHAR`, ntddscsi.h): [`ISCSI_SESSION_LIMIT`] sessions at most; a login past the
//! initiator's limit answers `ISDSC_TOO_MANY_SESSIONS` ("Exceeded max sessions for this initiator.", iscsierr.h). The
//! exact number Windows accepts is **unverified** (real-node check N39). Every session counts, whoever made it: those
//! of other drivers or of an administrator's logins leave fewer for this driver's volumes. A volume takes one session
//! (LUNs of one target share theirs; a multipath volume takes one per portal), so the free sessions are an upper
//! bound of the volumes the node can still take, reached by arrays with one target per volume (democratic-csi's).

use super::block_error;
use crate::error::Error;
use crate::host::{Host, HostOp};
use crate::lifecycle::Context;
use crate::locks::Deadline;

/// The sessions the initiator takes (module docs).
pub const ISCSI_SESSION_LIMIT: u64 = 256;

/// The initiator's free sessions, when the backend can list the node's sessions (native); `None` otherwise (csi-proxy
/// has no call that lists them).
pub(super) async fn free_slots<H: Host>(
    cx: Context<'_, H>,
    d: Deadline,
) -> Result<Option<u64>, Error> {
    let h = &cx.calls(d);
    if !h.host().capabilities().list_iscsi_sessions {
        return Ok(None);
    }
    let sessions = h
        .raw(
            HostOp::ListIscsiSessions,
            &"the iSCSI initiator",
            h.host().iscsi_sessions(d),
        )
        .await
        .map_err(|e| block_error(e, &"the iSCSI initiator"))?;
    Ok(Some(
        ISCSI_SESSION_LIMIT.saturating_sub(sessions.len() as u64),
    ))
}
