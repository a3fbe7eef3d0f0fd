//! After the reboot: the login made before it is gone and its mount point dangles.

use serde_json::json;

use super::super::expect::{Claim, Expect, Ref};
use super::super::ledger::Created;
use super::super::{Ctx, say};
use crate::host::{Host, HostErrorKind, HostOp, HostPath};

/// After the reboot: the session is gone and the mount point dangles.
pub(in crate::check) async fn after_reboot<H: Host>(cx: &mut Ctx<'_, H>) -> Result<(), String> {
    let Some(t) = cx.opts().iscsi.clone() else {
        return Ok(());
    };
    let mut c = cx.begin(
        "iscsi_after_reboot",
        "the login and mount point made before the reboot",
        "iscsi",
    );
    let fixture = cx.recorded().iter().find_map(|e| match &e.object {
        Created::Mount { volume_id, path } if e.keep_for_reboot => {
            Some((volume_id.clone(), path.clone()))
        }
        _ => None,
    });
    let Some((volume, path)) = fixture else {
        c.skip("the ledger holds no iSCSI fixture (was --iscsi-portal given to before-reboot?)");
        cx.end(c);
        return Ok(());
    };
    let mnt: HostPath = cx
        .opts()
        .kubelet_root
        .host_path(&path)
        .map_err(|e| e.to_string())?;
    let h = cx.host();
    let (o, r) = cx
        .call(
            HostOp::GetTargetDisks,
            &t.iqn,
            h.get_target_disks(&t.portal, &t.iqn, cx.d()),
        )
        .await;
    c.observe(
        "get_target_disks",
        o,
        vec![Claim::eras(
            Ref::Row("target_disks_unconnected"),
            Expect::any_err(),
            Expect::Value(json!([])),
            true,
        )],
    );
    let rebooted = !matches!(&r, Ok(d) if !d.is_empty());
    if !rebooted {
        c.note("the iSCSI session is still there: the node did not reboot, so the findings below say nothing about a reboot");
    }
    let (o, _) = cx
        .call(
            HostOp::GetVolumeIDFromTargetPath,
            mnt.as_str(),
            h.volume_id_from_target_path(&mnt, cx.d()),
        )
        .await;
    let dangling = if rebooted {
        vec![
            Claim::eras(
                Ref::Row("dangling_mount_point_volume_id"),
                Expect::Value(json!(volume)),
                Expect::err("cannot find the file specified"),
                false,
            ),
            Claim::eras(
                Ref::NodeCheck(7),
                Expect::Value(json!(volume)),
                Expect::err("cannot find the file specified"),
                false,
            ),
            Claim::record(Ref::Native(5)),
        ]
    } else {
        Vec::new()
    };
    c.observe("volume_id_dangling", o, dangling);
    let (o, _) = cx
        .call(
            HostOp::Mkdir,
            &format!("{mnt} (over the mount point)"),
            h.mkdir(&mnt, cx.d()),
        )
        .await;
    let over = if rebooted {
        vec![Claim::each(
            Ref::Row("mkdir_dangling_mount_point"),
            [
                Expect::err("already exists"),
                Expect::err("already exists"),
                Expect::err("already exists"),
                Expect::Ok,
            ],
            true,
        )]
    } else {
        Vec::new()
    };
    c.observe("mkdir_over_dangling", o, over);
    // The driver's unstage after a reboot relies on this: `UnmountVolume` flushes the volume first, which fails
    // "not found" for a volume whose session is gone, and the mount point is then removed with a non-forced `Rmdir`.
    let (o, _) = cx
        .call(
            HostOp::UnmountVolume,
            &format!("{volume} from {mnt} (the volume is gone)"),
            h.unmount_volume(&volume, &mnt, cx.d()),
        )
        .await;
    let gone = if rebooted {
        vec![Claim::all(
            Ref::NodeCheck(7),
            Expect::err_kind("NotFound"),
            false,
        )]
    } else {
        Vec::new()
    };
    c.observe("unmount_gone_volume", o, gone);
    if rebooted {
        let (o, r) = cx
            .call(
                HostOp::DisconnectTarget,
                &format!("{} (not connected)", t.iqn),
                h.disconnect_target(&t.portal, &t.iqn, cx.d()),
            )
            .await;
        c.observe(
            "disconnect_target",
            o,
            vec![Claim::eras(
                Ref::Row("disconnect_target_unconnected"),
                Expect::any_err(),
                Expect::Ok,
                false,
            )],
        );
        // The session is gone either way: the login needs no cleanup.
        let _ = r.map_err(|e| e.kind == HostErrorKind::NotFound);
        cx.forget(&Created::IscsiLogin {
            portal: t.portal.clone(),
            iqn: t.iqn.clone(),
        })?;
    } else {
        cx.keep(
            &Created::IscsiLogin {
                portal: t.portal.clone(),
                iqn: t.iqn.clone(),
            },
            false,
        )?;
    }
    cx.keep(
        &Created::Mount {
            volume_id: volume,
            path,
        },
        false,
    )?;
    cx.end(c);
    say("");
    Ok(())
}
