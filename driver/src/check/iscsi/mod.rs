//! iSCSI checks on a scratch LUN given on the command line: repeat-call behaviour of the iSCSI and volume calls,
//! arrival times, the SAN policy, the texts of edge cases; after a reboot, the dangling mount point.
//!
//! The LUN's disk is identified positively before anything destructive: it must be the only disk of the target
//! with that LUN, appear only after this run's login (the target had no session on the node before), and have no
//! partition or volume. Initialising and formatting it cannot be undone through the host port.

use std::time::Instant;

use serde_json::json;

mod late;
mod node;
mod reboot;
mod wait;

pub(super) use node::{plan as node_plan, run as node_run};
pub(super) use reboot::after_reboot;
use wait::{measured, wait_for_disk, wait_for_volume};

use super::expect::{Claim, Expect, Ref};
use super::ledger::Created;
use super::options::CheckOptions;
use super::report::PlanStep;
use super::{Ctx, say};
use crate::host::{Host, HostErrorKind, HostOp};

pub(super) fn plan(o: &CheckOptions) -> Vec<PlanStep> {
    let Some(t) = &o.iscsi else {
        return vec![PlanStep {
            check: "iscsi",
            actions: vec!["skipped: no --iscsi-portal/--iscsi-iqn".to_owned()],
        }];
    };
    let mnt = o.scratch_path("mnt");
    let target = format!(
        "{} at {} (LUN {}, {})",
        t.iqn,
        t.portal,
        t.lun,
        t.auth.mode()
    );
    if o.phase == super::cli::Phase::AfterReboot {
        return vec![PlanStep {
            check: "iscsi_after_reboot",
            actions: vec![
                format!("GetTargetDisks {target} (is the session gone?)"),
                format!(
                    "GetVolumeIDFromTargetPath {mnt} (dangling mount point); Mkdir {mnt} over it; UnmountVolume \
                     of the gone volume there"
                ),
                format!("DisconnectTarget {} (not connected)", t.iqn),
                format!("cleanup: UnmountVolume / Rmdir {mnt}"),
            ],
        }];
    }
    let mut actions = vec![
        format!("AddTargetPortal {} (idempotent; never removed)", t.portal),
        match &t.late_iqn {
            Some(late) => format!(
                "is {late} (created after the portal was added) listed by DiscoverTargetPortal after AddTargetPortal \
                 again, and after a refresh (native: MSFT_iSCSITargetPortal.Update; csi-proxy: RemoveTargetPortal + \
                 AddTargetPortal {}, skipped when GetTargetDisks finds a session on a target it lists)?",
                t.portal
            ),
            None => "no discovery check: no --iscsi-late-iqn".to_owned(),
        },
        format!("GetTargetDisks {target}: refuse if the target already has a session on this node"),
        format!("DisconnectTarget {} while not connected", t.iqn),
        format!("ConnectTarget {target}; wait (at most {:?}) for its LUN's disk", o.arrival_timeout),
        "refuse unless exactly one disk of the target has that LUN and it has no partition or volume".to_owned(),
        "GetDiskState; SetDiskState online (twice)".to_owned(),
        "PartitionDisk (GPT, one partition: cannot be undone), wait for the volume; FormatVolume NTFS".to_owned(),
        format!("Mkdir {mnt}; MountVolume there (twice); GetVolumeIDFromTargetPath; IsSymlink"),
        "ResizeVolume to the maximum (within the partition's slack); GetVolumeStats; GetDiskStats".to_owned(),
        format!("ConnectTarget {} again (connected)", t.iqn),
        format!("WriteVolumeCache; UnmountVolume {mnt} (twice); Rmdir {mnt}"),
        "SetDiskState offline, then online: how long until the volume is listed again".to_owned(),
    ];
    if o.phase == super::cli::Phase::BeforeReboot {
        actions.push(format!(
            "MountVolume at {mnt} again and keep it and the login for --phase after-reboot"
        ));
    } else {
        actions.push(format!("DisconnectTarget {}", t.iqn));
    }
    vec![PlanStep {
        check: "iscsi",
        actions,
    }]
}

pub(super) async fn run<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    let Some(t) = cx.opts().iscsi.clone() else {
        let mut c = cx.begin("iscsi", "iSCSI checks", "iscsi");
        c.skip("no --iscsi-portal/--iscsi-iqn given");
        cx.end(c);
        return Ok(());
    };
    let h = cx.host();

    // ---- the target must have no session on this node ----
    let mut c = cx.begin(
        "iscsi_unconnected",
        "GetTargetDisks and DisconnectTarget of a target without a session",
        "iscsi",
    );
    cx.record(
        Created::Portal {
            portal: t.portal.clone(),
        },
        false,
    )?;
    let (o, r) = cx
        .call(
            HostOp::AddTargetPortal,
            &t.portal.to_string(),
            h.add_target_portal(&t.portal, cx.d()),
        )
        .await;
    c.observe("add_target_portal", o, Vec::new());
    if let Err(e) = r {
        c.fail(format!("AddTargetPortal failed: {e}"));
        cx.end(c);
        return Ok(());
    }
    let (o, r) = cx
        .call(
            HostOp::GetTargetDisks,
            &t.iqn,
            h.get_target_disks(&t.portal, &t.iqn, cx.d()),
        )
        .await;
    let usable = o.ran();
    c.observe(
        "get_target_disks",
        o,
        vec![
            Claim::eras(
                Ref::Row("target_disks_unconnected"),
                Expect::any_err(),
                Expect::Value(json!([])),
                true,
            ),
            Claim::each(
                Ref::NodeCheck(9),
                [
                    Expect::any_err(),
                    Expect::any_err(),
                    Expect::Record,
                    Expect::Record,
                ],
                false,
            ),
        ],
    );
    match r {
        Ok(d) if !d.is_empty() => {
            c.fail(format!(
                "{} already has a session on this node (disks {d:?}): it is not this tool's, so the iSCSI checks stop",
                t.iqn
            ));
            cx.end(c);
            return Ok(());
        }
        _ if !usable => {
            c.fail("GetTargetDisks gave no answer: the iSCSI checks stop");
            cx.end(c);
            return Ok(());
        }
        _ => {}
    }
    let (o, _) = cx
        .call(
            HostOp::DisconnectTarget,
            &format!("{} (not connected)", t.iqn),
            h.disconnect_target(&t.portal, &t.iqn, cx.d()),
        )
        .await;
    c.observe(
        "disconnect_target",
        o,
        vec![
            Claim::eras(
                Ref::Row("disconnect_target_unconnected"),
                Expect::any_err(),
                Expect::Ok,
                false,
            ),
            Claim::each(
                Ref::NodeCheck(8),
                [
                    Expect::any_err(),
                    Expect::any_err(),
                    Expect::Record,
                    Expect::Record,
                ],
                false,
            ),
        ],
    );
    cx.end(c);

    // ---- a target created after the portal was added (before any login of this run) ----
    late::run(cx, &t).await;

    // ---- login and arrival ----
    let mut c = cx.begin(
        "iscsi_arrival",
        "ConnectTarget, then how long until the LUN's disk appears",
        "iscsi",
    );
    let login = Created::IscsiLogin {
        portal: t.portal.clone(),
        iqn: t.iqn.clone(),
    };
    cx.record(login.clone(), false)?;
    let since = Instant::now();
    let (o, r) = cx
        .call(
            HostOp::ConnectTarget,
            &format!("{} ({})", t.iqn, t.auth.mode()),
            h.connect_target(&t.portal, &t.iqn, &t.auth, cx.d()),
        )
        .await;
    c.observe("connect_target", o, Vec::new());
    if let Err(e) = r {
        c.fail(format!("ConnectTarget failed: {e}"));
        cx.end(c);
        return Ok(());
    }
    say(&format!("  .. waiting for LUN {} of {}", t.lun, t.iqn));
    let disk = match wait_for_disk(cx, &t, since).await {
        Ok((disks, rescanned)) if disks.len() == 1 => {
            let disk = disks[0];
            c.observe(
                "disk_arrival",
                measured(
                    "wait",
                    json!({"disk": disk, "rescan_needed": rescanned}),
                    since,
                ),
                vec![
                    Claim::record(Ref::Row("disk_arrival")),
                    Claim::record(Ref::NodeCheck(13)),
                ],
            );
            disk
        }
        Ok((disks, _)) => {
            c.fail(format!(
                "disks {disks:?} all carry LUN {} of {}: the disk is ambiguous, nothing is touched",
                t.lun, t.iqn
            ));
            cx.end(c);
            return Ok(());
        }
        Err(e) => {
            c.fail(e);
            cx.end(c);
            return Ok(());
        }
    };
    let (o, _) = cx
        .call(
            HostOp::GetDiskState,
            &format!("disk {disk}"),
            h.is_disk_online(disk, cx.d()),
        )
        .await;
    c.observe(
        "online_on_arrival",
        o,
        vec![
            Claim::all(Ref::Row("san_policy"), Expect::Value(json!(false)), false),
            Claim::all(Ref::NodeCheck(14), Expect::Value(json!(false)), false),
        ],
    );
    let ids = h.list_disk_ids(cx.d()).await.ok();
    let page83 = ids
        .as_ref()
        .and_then(|m| m.get(&disk))
        .map(|i| i.page83.clone())
        .unwrap_or_default();
    cx.end(c);

    let mut c = cx.begin(
        "iscsi_scratch_disk",
        "the LUN's disk: online, and proven empty",
        "iscsi",
    );
    for name in ["set_online", "set_online_again"] {
        let (o, _) = cx
            .call(
                HostOp::SetDiskState,
                &format!("disk {disk} online"),
                h.set_disk_online(disk, true, cx.d()),
            )
            .await;
        let claims = if name == "set_online_again" {
            vec![Claim::all(Ref::NodeCheck(12), Expect::Ok, false)]
        } else {
            Vec::new()
        };
        c.observe(name, o, claims);
    }
    // Windows shows an existing volume some time after the disk comes online, and a Rescan hurries nothing: the
    // disk counts as empty only when looks spanning the driver's settle time (`--disk-settle-time`) all show none.
    let settle_since = Instant::now();
    let mut delay = std::time::Duration::from_millis(100);
    let mut first = true;
    let (empty, r) = loop {
        let (o, r) = cx
            .call(
                HostOp::ListVolumesOnDisk,
                &format!("disk {disk}"),
                h.list_volumes_on_disk(disk, cx.d()),
            )
            .await;
        if first {
            c.observe(
                "list_volumes_raw",
                o,
                vec![
                    Claim::eras(
                        Ref::Row("list_volumes_edge"),
                        Expect::err("No MSFT_Partition objects found"),
                        Expect::Value(json!([])),
                        true,
                    ),
                    // The proof the driver takes a RAW LUN as empty from at once (issue 39): Get-Partition's
                    // not-found record, told by its untranslated identifier.
                    Claim::eras(
                        Ref::NodeCheck(34),
                        Expect::err_kind("NoPartition"),
                        Expect::Value(json!([])),
                        false,
                    ),
                    Claim::record(Ref::NodeCheck(15)),
                ],
            );
            first = false;
        }
        let empty = match &r {
            Ok(v) => v.iter().all(|v| v.trim().is_empty()),
            Err(e) => {
                e.kind == HostErrorKind::NoPartition
                    || e.message.contains("No MSFT_Partition objects found")
            }
        };
        if !empty || settle_since.elapsed() >= cx.opts().disk_settle {
            break (empty, r);
        }
        let _ = h.rescan(cx.d()).await;
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(2));
    };
    if !empty {
        c.fail(format!(
            "disk {disk} is not empty ({}): check-node only uses a LUN without partitions or volumes",
            match r {
                Ok(v) => format!("volumes {v:?}"),
                Err(e) => e.to_string(),
            }
        ));
        cx.end(c);
        return Ok(());
    }
    cx.end(c);

    // ---- partition, volume arrival, format ----
    let mut c = cx.begin(
        "iscsi_partition",
        "PartitionDisk, then how long until its volume appears; FormatVolume",
        "iscsi",
    );
    let pending = Created::Formatted {
        disk,
        page83: page83.clone(),
        volume_id: String::new(),
    };
    cx.record(pending.clone(), false)?;
    let since = Instant::now();
    let (o, r) = cx
        .call(
            HostOp::PartitionDisk,
            &format!("disk {disk}"),
            h.partition_disk(disk, cx.d()),
        )
        .await;
    // How long the destructive calls take (their `millis`) is what check 28 asks.
    c.observe("partition_disk", o, vec![Claim::record(Ref::NodeCheck(28))]);
    if let Err(e) = r {
        c.fail(format!("PartitionDisk failed: {e}"));
        cx.end(c);
        return Ok(());
    }
    say(&format!("  .. waiting for the volume on disk {disk}"));
    // From PartitionDisk's return: how long its new volume takes to be listed (check 28).
    let returned = Instant::now();
    let (volume, rescanned) = match wait_for_volume(cx, disk, returned).await {
        Ok(v) => v,
        Err(e) => {
            c.fail(e);
            cx.end(c);
            return Ok(());
        }
    };
    c.observe(
        "volume_arrival",
        measured(
            "wait",
            json!({"volume": volume, "rescan_needed": rescanned, "since_partition_disk_issued_ms":
                u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)}),
            returned,
        ),
        vec![
            Claim::record(Ref::Row("disk_arrival")),
            Claim::record(Ref::NodeCheck(13)),
            Claim::record(Ref::NodeCheck(28)),
        ],
    );
    cx.forget(&pending)?;
    cx.record(
        Created::Formatted {
            disk,
            page83,
            volume_id: volume.clone(),
        },
        false,
    )?;
    let (o, r) = cx
        .call(
            HostOp::IsVolumeFormatted,
            &volume,
            h.is_volume_formatted(&volume, cx.d()),
        )
        .await;
    c.observe("formatted_before", o, Vec::new());
    if !matches!(r, Ok(false)) {
        c.fail("the new partition's volume is not reported unformatted: it is not formatted");
        cx.end(c);
        return Ok(());
    }
    let (o, r) = cx
        .call(
            HostOp::FormatVolume,
            &volume,
            h.format_volume(&volume, cx.d()),
        )
        .await;
    c.observe("format_volume", o, vec![Claim::record(Ref::NodeCheck(28))]);
    if let Err(e) = r {
        c.fail(format!("FormatVolume failed: {e}"));
        cx.end(c);
        return Ok(());
    }
    cx.end(c);

    // ---- mount, re-mount, what the mount point looks like ----
    let mut c = cx.begin(
        "mount_volume_again",
        "MountVolume of the volume already mounted there",
        "iscsi",
    );
    let mnt = cx.opts().scratch_path("mnt");
    let (_, r) = cx
        .call(HostOp::Mkdir, mnt.as_str(), h.mkdir(&mnt, cx.d()))
        .await;
    r.map_err(|e| format!("cannot create {mnt}: {e}"))?;
    let mount = Created::Mount {
        volume_id: volume.clone(),
        path: mnt.to_string(),
    };
    cx.record(mount.clone(), false)?;
    let (o, r) = cx
        .call(
            HostOp::MountVolume,
            &format!("{volume} at {mnt}"),
            h.mount_volume(&volume, &mnt, cx.d()),
        )
        .await;
    c.observe("mount", o, Vec::new());
    if let Err(e) = r {
        c.fail(format!("MountVolume failed: {e}"));
        cx.end(c);
        return Ok(());
    }
    let (o, _) = cx
        .call(
            HostOp::MountVolume,
            &format!("{volume} at {mnt} (again)"),
            h.mount_volume(&volume, &mnt, cx.d()),
        )
        .await;
    c.observe(
        "mount_again",
        o,
        vec![
            Claim::eras(
                Ref::Row("mount_volume_again"),
                Expect::err("already in use"),
                Expect::Ok,
                true,
            ),
            Claim::record(Ref::NodeCheck(16)),
        ],
    );
    let (o, _) = cx
        .call(
            HostOp::GetVolumeIDFromTargetPath,
            mnt.as_str(),
            h.volume_id_from_target_path(&mnt, cx.d()),
        )
        .await;
    c.observe(
        "volume_id_from_target_path",
        o,
        vec![Claim::all(
            Ref::Row("dangling_mount_point_volume_id"),
            Expect::Value(json!(volume)),
            true,
        )],
    );
    let (o, _) = cx
        .call(HostOp::IsSymlink, mnt.as_str(), h.is_symlink(&mnt, cx.d()))
        .await;
    c.observe(
        "is_symlink_mount_point",
        o,
        vec![
            Claim::all(
                Ref::Row("is_symlink_one_hop"),
                Expect::Value(json!(true)),
                false,
            ),
            Claim::each(
                Ref::NodeCheck(17),
                [
                    Expect::Value(json!(true)),
                    Expect::Value(json!(true)),
                    Expect::Record,
                    Expect::Record,
                ],
                false,
            ),
        ],
    );
    cx.end(c);

    // ---- resize within the slack ----
    let mut c = cx.begin(
        "resize_within_slack",
        "ResizeVolume to the maximum right after PartitionDisk",
        "iscsi",
    );
    let (o, _) = cx
        .call(
            HostOp::ResizeVolume,
            &format!("{volume} to the maximum"),
            h.resize_volume(&volume, 0, cx.d()),
        )
        .await;
    c.observe(
        "resize_to_max",
        o,
        vec![
            Claim::each(
                Ref::Row("resize_skip"),
                [
                    Expect::err("Size Not Supported"),
                    Expect::Ok,
                    Expect::Ok,
                    Expect::Ok,
                ],
                true,
            ),
            Claim::record(Ref::Row("partition_slack")),
            Claim::record(Ref::NodeCheck(18)),
            Claim::record(Ref::NodeCheck(28)),
        ],
    );
    let (o, _) = cx
        .call(
            HostOp::GetVolumeStats,
            &volume,
            h.volume_stats(&volume, cx.d()),
        )
        .await;
    c.observe("volume_stats", o, Vec::new());
    let (o, _) = cx
        .call(
            HostOp::GetDiskStats,
            &format!("disk {disk}"),
            h.disk_size(disk, cx.d()),
        )
        .await;
    c.observe("disk_size", o, Vec::new());
    cx.end(c);

    // ---- ConnectTarget on a connected target ----
    let mut c = cx.begin(
        "connect_target_connected",
        "ConnectTarget to a target that has a session",
        "iscsi",
    );
    let (o, _) = cx
        .call(
            HostOp::ConnectTarget,
            &format!("{} (connected)", t.iqn),
            h.connect_target(&t.portal, &t.iqn, &t.auth, cx.d()),
        )
        .await;
    c.observe(
        "connect_again",
        o,
        vec![Claim::eras(
            Ref::Row("connect_target_connected"),
            Expect::err("already been logged in"),
            Expect::Ok,
            true,
        )],
    );
    cx.end(c);

    // ---- unmount, and unmount where nothing is mounted ----
    let mut c = cx.begin(
        "unmount_not_mounted",
        "UnmountVolume where nothing is mounted",
        "iscsi",
    );
    let (o, _) = cx
        .call(
            HostOp::WriteVolumeCache,
            &volume,
            h.write_volume_cache(&volume, cx.d()),
        )
        .await;
    c.observe("write_volume_cache", o, Vec::new());
    let (o, r) = cx
        .call(
            HostOp::UnmountVolume,
            &format!("{volume} from {mnt}"),
            h.unmount_volume(&volume, &mnt, cx.d()),
        )
        .await;
    c.observe("unmount", o, Vec::new());
    let unmounted = r.is_ok();
    if unmounted {
        let (o, _) = cx
            .call(
                HostOp::UnmountVolume,
                &format!("{volume} from {mnt} (again)"),
                h.unmount_volume(&volume, &mnt, cx.d()),
            )
            .await;
        c.observe(
            "unmount_again",
            o,
            vec![Claim::eras(
                Ref::Row("unmount_not_mounted"),
                Expect::err("The access path is not valid"),
                Expect::err("not a reparse point"),
                true,
            )],
        );
    }
    cx.end(c);

    // ---- the volume's return after the disk is onlined again (check 27) ----
    if unmounted {
        volumes_after_online(cx, disk, &volume).await;
    }

    if cx.opts().phase == super::cli::Phase::BeforeReboot {
        let mut c = cx.begin(
            "iscsi_reboot_fixture",
            "the volume mounted again and the login kept for after the reboot",
            "iscsi",
        );
        let (o, r) = cx
            .call(
                HostOp::MountVolume,
                &format!("{volume} at {mnt}"),
                h.mount_volume(&volume, &mnt, cx.d()),
            )
            .await;
        c.observe("mount", o, Vec::new());
        if r.is_ok() {
            cx.keep(&mount, true)?;
            cx.keep(&login, true)?;
            c.note("kept: reboot the node, then run --phase after-reboot");
        } else {
            c.fail("the fixture could not be mounted");
        }
        cx.end(c);
    }
    say("");
    Ok(())
}

/// Check 27: the scratch disk (unmounted, its volume formatted by this run) is taken offline and brought online
/// again; how long until `ListVolumesOnDisk` lists its volume again, and whether a `Rescan` was needed. The longest
/// seen on a loaded node bounds `--disk-settle-time`: a stage that looks for less long takes a disk whose volume is
/// late for empty.
async fn volumes_after_online<H: Host>(cx: &mut Ctx<'_, H>, disk: u32, volume: &str) {
    let h = cx.host();
    let mut c = cx.begin(
        "iscsi_volumes_after_online",
        "SetDiskState offline then online: how long until the disk's volume is listed again",
        "iscsi",
    );
    // The wait is timed from the online call (issued last).
    let mut since = Instant::now();
    for (online, state, name) in [
        (false, "offline", "set_offline"),
        (true, "online", "set_online"),
    ] {
        since = Instant::now();
        let (o, r) = cx
            .call(
                HostOp::SetDiskState,
                &format!("disk {disk} {state}"),
                h.set_disk_online(disk, online, cx.d()),
            )
            .await;
        c.observe(name, o, Vec::new());
        if let Err(e) = r {
            c.fail(format!("SetDiskState {state} failed: {e}"));
            cx.end(c);
            return;
        }
    }
    say(&format!(
        "  .. waiting for the volume of disk {disk} to come back"
    ));
    match wait_for_volume(cx, disk, since).await {
        Ok((back, rescanned)) => c.observe(
            "volumes_after_online",
            measured(
                "wait",
                json!({"volume": back, "same_volume": back == volume, "rescan_needed": rescanned}),
                since,
            ),
            vec![
                Claim::record(Ref::Row("disk_arrival")),
                Claim::record(Ref::NodeCheck(27)),
            ],
        ),
        Err(e) => c.fail(e),
    }
    cx.end(c);
}
