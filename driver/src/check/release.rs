//! Read-only look-ups of objects that do not exist, whose answers differ by csi-proxy release: the node's release
//! is identified from them (and from the sourced answers of the other checks).

use serde_json::json;

use super::expect::{Claim, Expect, Ref};
use super::report::PlanStep;
use super::{Ctx, say};
use crate::host::{Host, HostOp};

/// A volume id no Windows host has (GUID of zeros with a marker).
pub(crate) const ABSENT_VOLUME: &str = r"\\?\Volume{00000000-0000-0000-0000-0000c4ec0000}\";
/// A disk number no host has.
pub(crate) const ABSENT_DISK: u32 = 999_999;

pub(super) fn plan() -> Vec<PlanStep> {
    vec![PlanStep {
        check: "release",
        actions: vec![
            format!("read-only: IsVolumeFormatted of the absent volume {ABSENT_VOLUME}"),
            format!("read-only: ListVolumesOnDisk of the absent disk {ABSENT_DISK}"),
        ],
    }]
}

pub(super) async fn run<H: Host>(cx: &mut Ctx<'_, H>) {
    let h = cx.host();
    let mut c = cx.begin(
        "volume_not_found",
        "the text of a volume that does not exist",
        "release",
    );
    let (o, _) = cx
        .call(
            HostOp::IsVolumeFormatted,
            ABSENT_VOLUME,
            h.is_volume_formatted(ABSENT_VOLUME, cx.d()),
        )
        .await;
    c.observe(
        "is_volume_formatted",
        o,
        vec![Claim::each(
            Ref::Row("not_found_texts"),
            // Each release's not-found shape, classified NotFound (a failed query whose text merely mentions "not
            // found" confirms nothing): v1.1.3/v1.2.1 `pkg/os/volume/api.go:119-123` (the cmdlet's record); v1.3.0
            // `pkg/os/volume/api.go:132-134` (`errors.NotFound`, "Not Found"); master `pkg/os/volume/api.go:146` and
            // `pkg/wmi/volume.go:53-63` (`ErrNotFound`, "not found", last).
            [
                Expect::not_found(&["No MSFT_Volume objects found"]),
                Expect::not_found(&["No MSFT_Volume objects found"]),
                Expect::not_found(&["error: Not Found"]),
                Expect::not_found(&["failed to query volume", ": not found"]),
            ],
            true,
        )],
    );
    cx.end(c);

    let mut c = cx.begin(
        "disk_not_found",
        "ListVolumesOnDisk of a disk that does not exist",
        "release",
    );
    let (o, _) = cx
        .call(
            HostOp::ListVolumesOnDisk,
            &format!("disk {ABSENT_DISK}"),
            h.list_volumes_on_disk(ABSENT_DISK, cx.d()),
        )
        .await;
    c.observe(
        "list_volumes_on_disk",
        o,
        vec![Claim::eras(
            Ref::Row("list_volumes_edge"),
            Expect::err("No MSFT_Disk objects found"),
            Expect::Value(json!([])),
            true,
        )],
    );
    cx.end(c);
    say("");
}
