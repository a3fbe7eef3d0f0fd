//! Access modes of iSCSI volumes (issue 37 item 3, `access.rs`): the multi-node writer modes are refused with the
//! spec's code for a capability the plugin does not support, and a reader-only stage never partitions, formats,
//! resizes or writes to its disk (natively the disk is set read-only). On every csi-proxy release and the backend
//! `WINCSI_TEST_HOST_BACKEND` names.

use super::*;

fn with_mode(mut req: StageRequest, mode: i32) -> StageRequest {
    if let Some(c) = req.capability.as_mut() {
        c.access_mode = mode;
    }
    req
}

fn publish_req(id: &str, pod: &str, mode: i32, readonly: bool) -> PublishRequest {
    PublishRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        target_path: target(pod),
        capability: cap("").map(|mut c| {
            c.access_mode = mode;
            c
        }),
        readonly,
        ..PublishRequest::default()
    }
}

/// `MULTI_NODE_SINGLE_WRITER` (4) and `MULTI_NODE_MULTI_WRITER` (5): NodeStageVolume and NodePublishVolume answer
/// FAILED_PRECONDITION before any host call; the node-local and reader modes stage.
#[tokio::test(start_paused = true)]
async fn multi_node_writer_modes_are_refused_before_anything_is_touched() {
    for v in CsiProxyVersion::ALL {
        let env = Env::new();
        env.sim.set_csi_proxy_version(v).expect("release");
        for mode in [4, 5] {
            let r = env
                .mgr
                .stage(&with_mode(stage_req("v1", 0, &[], &[]), mode), d())
                .await;
            assert!(
                matches!(&r, Err(Error::FailedPrecondition(m)) if m.contains("not supported for iSCSI volumes")
                    && m.contains("MULTI_NODE")),
                "{v}: mode {mode}: {r:?}"
            );
            assert!(env.ops().is_empty(), "{v}: mode {mode}: no host call");
            assert!(env.mgr.store().volumes().expect("list").is_empty(), "{v}");
        }
        // A volume staged for one node cannot be published for writers on many.
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect("SINGLE_NODE_WRITER stages");
        env.mkdir_parent(&target("pod-a"));
        let r = env
            .mgr
            .publish(&publish_req("v1", "pod-a", 5, false), d())
            .await;
        assert!(
            matches!(&r, Err(Error::FailedPrecondition(m)) if m.contains("MULTI_NODE_MULTI_WRITER")),
            "{v}: {r:?}"
        );
        env.mgr
            .publish(&publish_req("v1", "pod-a", 1, false), d())
            .await
            .expect("publish");
        env.mgr
            .unpublish(
                &UnpublishRequest {
                    volume_id: "v1".into(),
                    target_path: target("pod-a"),
                },
                d(),
            )
            .await
            .expect("unpublish");
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
    }
}

/// A reader-only stage of a RAW LUN is refused with the reason, and nothing is written to the disk: no partition,
/// no format, the layout as it was; the session is logged out again and no record is left.
#[tokio::test(start_paused = true)]
async fn a_raw_lun_staged_reader_only_is_refused_and_never_written() {
    for v in CsiProxyVersion::ALL {
        for mode in [2, 3] {
            let env = Env::new();
            env.sim.set_csi_proxy_version(v).expect("release");
            let before = env.layouts();
            let r = env
                .mgr
                .stage(&with_mode(stage_req("v1", 0, &[], &[]), mode), d())
                .await;
            assert!(
                matches!(&r, Err(Error::FailedPrecondition(m)) if m.contains("reader-only stage never partitions")),
                "{v}: mode {mode}: {r:?}"
            );
            let ops = env.ops();
            assert!(
                !ops.contains(&PartitionDisk) && !ops.contains(&FormatVolume),
                "{v}: mode {mode}: {ops:?}"
            );
            assert_eq!(
                env.layouts(),
                before,
                "{v}: mode {mode}: the disk is untouched"
            );
            assert_eq!(env.sessions(), 0, "{v}: mode {mode}: logged out again");
            assert!(env.mgr.store().volumes().expect("list").is_empty(), "{v}");
        }
    }
}

/// A volume this driver partitioned in a writer stage that failed before its format (a released record keeps that
/// proof) is formatted by the writer's retry, never by a reader-only stage: that one is refused.
#[tokio::test(start_paused = true)]
async fn a_reader_only_stage_never_formats_even_the_volume_this_driver_created() {
    for v in CsiProxyVersion::ALL {
        let env = Env::new();
        env.sim.set_csi_proxy_version(v).expect("release");
        env.fail_nth(FormatVolume, 1, "Format-Volume : The disk is busy");
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect_err("the format failed");
        assert!(
            env.record("v1").volume_is_ours(),
            "{v}: {:?}",
            env.record("v1")
        );
        env.ops();
        let r = env
            .mgr
            .stage(&with_mode(stage_req("v1", 0, &[], &[]), 3), d())
            .await;
        assert!(
            matches!(&r, Err(Error::FailedPrecondition(m)) if m.contains("reader-only stage never")),
            "{v}: {r:?}"
        );
        assert!(!env.ops().contains(&FormatVolume), "{v}: never formatted");
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: the writer's retry formats it: {e}"));
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
    }
}

/// A LUN that holds NTFS stages reader-only: natively its disk is set read-only (`MSFT_Disk.SetAttributes`), which
/// csi-proxy cannot do; a publish for writing and an expansion are refused, a reader's publish goes on, and the data
/// stays.
#[tokio::test(start_paused = true)]
async fn a_reader_only_lun_with_ntfs_is_staged_on_a_read_only_disk_and_never_resized() {
    for v in CsiProxyVersion::ALL {
        let env = Env::with(|sc| {
            let lun0 = lun_spec(sc, 0);
            lun0["partition_style"] = json!("gpt");
            lun0["partitions"] = json!([{"size": 5 * GIB,
                "volume": {"filesystem": "NTFS", "files": {"data.txt": "keep me"}}}]);
        });
        env.sim.set_csi_proxy_version(v).expect("release");
        env.mgr
            .stage(&with_mode(stage_req("v1", 0, &[], &[]), 3), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: {e}"));
        let native = env.backend == sim::wmi::TestBackend::Native;
        assert_eq!(
            env.disk("lun0").read_only,
            native,
            "{v}: read-only where the backend can set it"
        );
        assert!(!env.ops().contains(&FormatVolume), "{v}");
        env.mkdir_parent(&target("pod-a"));
        let r = env
            .mgr
            .publish(&publish_req("v1", "pod-a", 1, false), d())
            .await;
        assert!(
            matches!(&r, Err(Error::FailedPrecondition(m)) if m.contains("staged reader-only")),
            "{v}: {r:?}"
        );
        env.mgr
            .publish(&publish_req("v1", "pod-a", 3, true), d())
            .await
            .expect("a reader's publish");
        let r = env
            .mgr
            .expand(
                &crate::lifecycle::ExpandRequest {
                    volume_id: "v1".into(),
                    volume_path: target("pod-a"),
                    required_bytes: (10 * GIB) as i64,
                },
                d(),
            )
            .await;
        assert!(
            matches!(&r, Err(Error::FailedPrecondition(m)) if m.contains("never resized")),
            "{v}: {r:?}"
        );
        assert!(!env.ops().contains(&ResizeVolume), "{v}");
        env.mgr
            .unpublish(
                &UnpublishRequest {
                    volume_id: "v1".into(),
                    target_path: target("pod-a"),
                },
                d(),
            )
            .await
            .expect("unpublish");
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
        let data = env.disk("lun0").partitions[0].volume.clone();
        assert!(
            data.is_some_and(|v| v.filesystem.as_deref() == Some("NTFS")),
            "{v}: the data stays"
        );
        assert!(env.data_loss().is_empty(), "{v}");
    }
}
