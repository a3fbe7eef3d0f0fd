//! Issue 37 items 1, 2, 4 and 7: kubelet's paths other than "retry until it succeeds" — a re-stage of a volume
//! Windows no longer reads, the judge's evidence across arrivals of a disk, an unstage before any stage succeeded, a
//! publish onto a staging path that lost its mount point. Each test runs on every csi-proxy release and on the native
//! backend (whatever `WINCSI_TEST_HOST_BACKEND` says), and ends with the invariants: no data-loss event, nothing left,
//! and a later stage with the same inputs that succeeds or refuses naming the way back.

use super::*;

/// The csi-proxy backend on each release, then the native backend, each over [`scenario`] changed by `f`.
fn every_host(f: impl Fn(&mut Value)) -> impl Iterator<Item = (String, Env)> {
    CsiProxyVersion::ALL
        .into_iter()
        .map(Some)
        .chain([None])
        .map(move |v| match v {
            Some(v) => (v.to_string(), env_on(v, &f)),
            None => (
                "native".to_owned(),
                Env::with_on(sim::wmi::TestBackend::Native, &f),
            ),
        })
}

/// How many formats the host has run.
fn formats(env: &Env) -> u64 {
    let call = env.per_backend("FormatVolume", "MSFT_Volume.Format");
    env.sim.call_counts().get(call).copied().unwrap_or(0)
}

fn publish_req(pod: &str) -> PublishRequest {
    PublishRequest {
        volume_id: "v1".into(),
        staging_target_path: staging("v1"),
        target_path: target(pod),
        capability: cap(""),
        ..Default::default()
    }
}

fn unpublish_req(pod: &str) -> UnpublishRequest {
    UnpublishRequest {
        volume_id: "v1".into(),
        target_path: target(pod),
    }
}

fn data_at(env: &Env, dir: &str) -> Option<Vec<u8>> {
    env.state(|s| s.read_file(&format!(r"{dir}\data.txt")).ok())
}

/// A first stage of the RAW LUN 0, and the pod's data written on it; returns the volume.
async fn staged_with_data(host: &str, env: &Env) -> String {
    env.mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .unwrap_or_else(|e| panic!("{host}: stage: {e}"));
    env.script(|s| s.write_file(&format!(r"{}\data.txt", staging("v1")), b"the pod's data"))
        .expect("write");
    env.record("v1").volume.expect("volume recorded")
}

async fn unstaged_clean(host: &str, env: &Env) {
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .unwrap_or_else(|e| panic!("{host}: unstage: {e}"));
    env.assert_clean();
}

// ---- item 1: a volume a stage succeeded on is never formatted ----

/// The pod's NTFS volume reads `FileSystemType` Unknown after a reboot (damaged by an unclean iSCSI drop, or a locked
/// BitLocker volume). kubelet's re-stage refuses it, naming the volume and what to do, and formats nothing; once it is
/// repaired on the node, the next re-stage mounts it with the pod's data. Before issue 37 the first stage's
/// `partitioned` mark made it "ours and unformatted" for ever, and the re-stage formatted it.
#[tokio::test(start_paused = true)]
async fn a_restage_after_a_reboot_never_formats_a_volume_windows_no_longer_reads() {
    for (host, env) in every_host(|_| {}) {
        let vid = staged_with_data(&host, &env).await;
        env.sim.reboot().expect("reboot");
        env.script(|s| s.make_volume_unreadable(&vid))
            .expect("unreadable");
        let before = formats(&env);
        let err = env
            .mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect_err("an unreadable volume");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains(&vid) && m.contains("was staged for this \
                volume before") && m.contains("chkdsk") && m.contains("manage-bde") && m.contains("refusing to format")),
            "{host}: {err:?}"
        );
        assert_eq!(formats(&env), before, "{host}: nothing is formatted");
        assert!(env.data_loss().is_empty(), "{host}: {:?}", env.data_loss());
        // A retry before the repair refuses again (kubelet retries; the record may have become a first stage's).
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect_err("still unreadable");
        assert_eq!(formats(&env), before, "{host}: nothing is formatted");
        // chkdsk (or unlocking) on the node: the next re-stage mounts it, the pod's data there.
        env.script(|s| s.make_volume_readable(&vid))
            .expect("repair");
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: re-stage after the repair: {e}"));
        assert_eq!(
            data_at(&env, &staging("v1")).as_deref(),
            Some(&b"the pod's data"[..]),
            "{host}"
        );
        assert_eq!(formats(&env), before, "{host}");
        unstaged_clean(&host, &env).await;
    }
}

/// The same without a reboot (kubelet restarted, the volume still mounted). csi-proxy answers `GetVolumeStats` for a
/// volume without a file system, so the re-stage finds it already staged; the native backend's `GetDiskFreeSpaceExW`
/// fails there (1005), so the native re-stage judges the volume again — and must refuse it, not format it.
#[tokio::test(start_paused = true)]
async fn a_restage_without_a_reboot_never_formats_a_volume_windows_no_longer_reads() {
    for (host, env) in every_host(|_| {}) {
        let vid = staged_with_data(&host, &env).await;
        env.script(|s| s.make_volume_unreadable(&vid))
            .expect("unreadable");
        let before = formats(&env);
        let r = env.mgr.stage(&stage_req("v1", 0, &[], &[]), d()).await;
        match env.backend {
            sim::wmi::TestBackend::CsiProxy => r.unwrap_or_else(|e| panic!("{host}: {e}")),
            sim::wmi::TestBackend::Native => assert!(
                matches!(&r, Err(Error::FailedPrecondition(m)) if m.contains(&vid) && m.contains("chkdsk")),
                "{host}: {r:?}"
            ),
        }
        assert_eq!(formats(&env), before, "{host}: nothing is formatted");
        assert!(env.data_loss().is_empty(), "{host}: {:?}", env.data_loss());
        env.script(|s| s.make_volume_readable(&vid))
            .expect("repair");
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: re-stage after the repair: {e}"));
        unstaged_clean(&host, &env).await;
    }
}

/// After a reboot the recorded LUN shows one volume, but not the recorded one (the LUN was re-partitioned by another
/// system). It is refused, naming both, never taken for this volume's — let alone formatted because the first stage's
/// marks said "ours".
#[tokio::test(start_paused = true)]
async fn a_different_volume_on_a_recorded_lun_is_refused() {
    const OTHER: &str = "0badc0de-0000-4000-8000-000000000001";
    for (host, env) in every_host(|_| {}) {
        let vid = staged_with_data(&host, &env).await;
        env.sim.reboot().expect("reboot");
        env.script(|s| s.replace_volume(&vid, OTHER))
            .expect("re-partitioned");
        env.ops();
        let err = env
            .mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect_err("another volume");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains(&vid) && m.contains(OTHER)
                && m.contains("Refusing to use or format it")),
            "{host}: {err:?}"
        );
        let ops = env.ops();
        assert!(
            !ops.contains(&FormatVolume) && !ops.contains(&PartitionDisk),
            "{host}: {ops:?}"
        );
        assert!(env.data_loss().is_empty(), "{host}: {:?}", env.data_loss());
        // The way back the message names: the pod is deleted, kubelet unstages the volume; the next stage takes the
        // LUN as it finds it (here: another system's data, refused, never formatted).
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: unstage: {e}"));
        let err = env
            .mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect_err("another system's data");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("refusing to format")),
            "{host}: {err:?}"
        );
        assert!(env.data_loss().is_empty(), "{host}: {:?}", env.data_loss());
        env.assert_clean();
    }
}

// ---- item 2: the judge's evidence belongs to one arrival of the disk ----

/// [`scenario`] with LUN 0 holding another system's data on a partition Windows makes an (unrecognised) volume for,
/// which arrives an hour after the disk comes online: only a later arrival, scripted by the test, shows it sooner.
fn foreign_late(sc: &mut Value) {
    let lun0 = lun_spec(sc, 0);
    lun0["partition_style"] = json!("gpt");
    lun0["partitions"] = json!([{"size": GIB,
        "volume": {"foreign_data": true, "files": {"db.bin": "precious"}}}]);
    lun0["arrival_delay_ms"] = json!(0);
    lun0["volume_arrival_delay_ms"] = json!(3_600_000);
}

/// A first stage that ends early (a short deadline, as when kubelet's call is cut short), an unstage (the pod was
/// deleted), and a stage much later whose disk shows its foreign volume soon after coming online. What the first
/// attempt saw ("no volume since …") belongs to its own arrival of the disk: the later stage must not take the disk
/// for empty at once. Before issue 37 it did: through csi-proxy `PartitionDisk` ran (a no-op on the foreign partition)
/// and the foreign volume, arriving after it, was taken for this driver's and formatted; natively the stale mark
/// refused the volume as "no volume after …" before it could arrive.
#[tokio::test(start_paused = true)]
async fn what_an_ended_attempt_saw_of_the_disk_is_not_evidence_for_a_later_stage() {
    for (host, env) in every_host(foreign_late) {
        let err = env
            .mgr
            .stage(
                &stage_req("v1", 0, &[], &[]),
                Deadline::after(Duration::from_millis(2_500)),
            )
            .await
            .expect_err("cut short");
        assert!(
            matches!(&err, Error::Unavailable(m) if m.contains("waiting for the partitions of")
                || m.contains("waiting for the volume of partition")),
            "{host}: the first attempt ends while it waits: {err:?}"
        );
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: unstage: {e}"));
        assert_eq!(env.sessions(), 0, "{host}");
        // Much later, the disk's volumes show a second after it comes online.
        tokio::time::sleep(Duration::from_secs(30)).await;
        env.script(|s| {
            s.set_arrival_delay(
                "lun0",
                Duration::from_millis(500),
                Duration::from_secs(1),
                tokio::time::Instant::now(),
            )
        })
        .expect("arrival");
        env.ops();
        let err = env
            .mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect_err("another system's data");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("refusing to format")),
            "{host}: the foreign volume is waited for and refused: {err:?}"
        );
        let ops = env.ops();
        assert!(
            !ops.contains(&PartitionDisk) && !ops.contains(&FormatVolume),
            "{host}: {ops:?}"
        );
        assert!(env.data_loss().is_empty(), "{host}: {:?}", env.data_loss());
        env.assert_clean();
    }
}

/// The unstage itself ends what its volume's attempts saw, also while the session stays (another LUN of the target is
/// staged, so the disk does not arrive again): a later stage of the volume waits afresh for the foreign volume, which
/// shows (scripted) right after that stage's first look. Before issue 37 the stale "no volume since …" made that look
/// judge the disk empty (csi-proxy: a no-op `PartitionDisk`, then the foreign volume formatted as this driver's), or
/// (native) the stale "partition without a volume since …" refused it as a layout Windows does not mount.
#[tokio::test(start_paused = true)]
async fn an_unstage_ends_what_its_attempts_saw_while_the_session_stays() {
    for (host, env) in every_host(foreign_late) {
        env.mgr
            .stage(&stage_req("v2", 1, &[], &[]), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: LUN 1: {e}"));
        let err = env
            .mgr
            .stage(
                &stage_req("v1", 0, &[], &[]),
                Deadline::after(Duration::from_millis(2_500)),
            )
            .await
            .expect_err("cut short");
        assert!(
            matches!(&err, Error::Unavailable(m) if m.contains("waiting for the partitions of")
                || m.contains("waiting for the volume of partition")),
            "{host}: the first attempt ends while it waits: {err:?}"
        );
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: unstage: {e}"));
        assert_eq!(env.sessions(), 1, "{host}: LUN 1 keeps the session");
        tokio::time::sleep(Duration::from_secs(30)).await;
        let mut lists = 0;
        env.inproc
            .after("ListVolumesOnDisk", move |s| {
                lists += 1;
                if lists == 2 {
                    s.complete_arrivals().expect("arrive");
                }
            })
            .expect("script");
        env.ops();
        let err = env
            .mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect_err("another system's data");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("refusing to format")),
            "{host}: the foreign volume is waited for and refused: {err:?}"
        );
        let ops = env.ops();
        assert!(
            !ops.contains(&PartitionDisk) && !ops.contains(&FormatVolume),
            "{host}: {ops:?}"
        );
        assert!(env.data_loss().is_empty(), "{host}: {:?}", env.data_loss());
        env.mgr
            .unstage(&unstage_req("v2"), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: unstage v2: {e}"));
        env.assert_clean();
    }
}

/// The same evidence across a lost session with the record kept: the first attempt is cut short (UNAVAILABLE, its
/// record kept for kubelet's retry), then the node loses the session (a reboot; a target restart is the same to the
/// driver, which keeps running), and kubelet's retry logs in again. The disk arrives anew during that stage, so what
/// the first attempt saw proves nothing about it.
#[tokio::test(start_paused = true)]
async fn a_disk_that_arrives_again_is_judged_afresh() {
    for (host, env) in every_host(foreign_late) {
        let err = env
            .mgr
            .stage(
                &stage_req("v1", 0, &[], &[]),
                Deadline::after(Duration::from_millis(2_500)),
            )
            .await
            .expect_err("cut short");
        assert!(
            matches!(&err, Error::Unavailable(m) if m.contains("waiting for the partitions of")
                || m.contains("waiting for the volume of partition")),
            "{host}: the first attempt ends while it waits: {err:?}"
        );
        env.sim.reboot().expect("the session goes");
        tokio::time::sleep(Duration::from_secs(30)).await;
        env.script(|s| {
            s.set_arrival_delay(
                "lun0",
                Duration::from_millis(500),
                Duration::from_secs(1),
                tokio::time::Instant::now(),
            )
        })
        .expect("arrival");
        env.ops();
        let err = env
            .mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect_err("another system's data");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("refusing to format")),
            "{host}: the foreign volume is waited for and refused: {err:?}"
        );
        let ops = env.ops();
        assert!(
            !ops.contains(&PartitionDisk) && !ops.contains(&FormatVolume),
            "{host}: {ops:?}"
        );
        assert!(env.data_loss().is_empty(), "{host}: {:?}", env.data_loss());
        env.assert_clean();
    }
}

/// Natively: a partition whose volume did not arrive within the settle time is refused ("no volume after …"), and the
/// rollback logs out. The LUN is an NTFS volume moved from another Windows node whose volume was only slow; on a later
/// attempt (a new login, a new arrival) it shows a second after the disk comes online. Before issue 37 the stale mark
/// refused it at once on every retry, until the driver restarted.
#[tokio::test(start_paused = true)]
async fn a_refused_late_volume_is_waited_for_again_after_the_rollback() {
    let env = Env::with_on(sim::wmi::TestBackend::Native, |sc| {
        let lun0 = lun_spec(sc, 0);
        lun0["partition_style"] = json!("gpt");
        lun0["partitions"] = json!([{"size": GIB,
            "volume": {"filesystem": "NTFS", "files": {"data.txt": "kept"}}}]);
        lun0["volume_arrival_delay_ms"] = json!(3_600_000);
    });
    let err = env
        .mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect_err("no volume yet");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains("a layout Windows does not mount")),
        "{err:?}"
    );
    assert_eq!(env.sessions(), 0, "rolled back");
    env.script(|s| {
        s.set_arrival_delay(
            "lun0",
            Duration::from_millis(500),
            Duration::from_secs(1),
            tokio::time::Instant::now(),
        )
    })
    .expect("arrival");
    env.mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect("the volume arrives within the settle time of this arrival");
    assert_eq!(data_at(&env, &staging("v1")).as_deref(), Some(&b"kept"[..]));
    assert_eq!(formats(&env), 0);
    unstaged_clean("native", &env).await;
}

// ---- item 4: an unstage before any stage succeeded keeps the proof ----

/// A first stage whose new volume is late answers UNAVAILABLE; the pod is deleted and kubelet unstages the uncertain
/// volume. The unstage keeps what says the volume is this driver's (released: no longer a user of the session), so a
/// later stage formats the volume it created instead of refusing it as someone else's for ever.
#[tokio::test(start_paused = true)]
async fn an_unstage_between_partition_and_format_keeps_the_volume_this_driver_created() {
    for (host, env) in every_host(|sc| {
        sc["host"]["behaviour"]["arrival"]["volume_after_partition_ms"] = json!(90_000);
    }) {
        let err = env
            .mgr
            .stage(
                &stage_req("v1", 0, &[], &[]),
                Deadline::after(Duration::from_secs(60)),
            )
            .await
            .expect_err("its volume has not arrived");
        assert!(
            matches!(&err, Error::Unavailable(m) if m.contains("the partition this driver created")),
            "{host}: {err:?}"
        );
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: unstage: {e}"));
        let r = env.record("v1");
        assert!(
            r.released && r.partitioning && r.session_portal.is_none(),
            "{host}: {r:?}"
        );
        assert_eq!(env.sessions(), 0, "{host}: logged out");
        assert!(!env.exists(&staging("v1")), "{host}");
        // A new pod, later: the volume has long arrived; the stage takes it as this driver's and formats it.
        tokio::time::sleep(Duration::from_secs(120)).await;
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: the later stage: {e}"));
        let r = env.record("v1");
        assert!(
            r.volume.is_some() && !r.partitioning && !r.partitioned && !r.released,
            "{host}: {r:?}"
        );
        assert_eq!(env.mounted(&staging("v1")), r.volume, "{host}");
        assert_eq!(formats(&env), 1, "{host}");
        unstaged_clean(&host, &env).await;
    }
}

/// A LUN another node's stage partitioned and never formatted (no record here): refused, and the refusal names the
/// way back — formatting it by hand, or cleaning the LUN — after either of which a stage with the same inputs
/// succeeds. No volume attribute lets the driver format it (module docs of `stage.rs`, `unrecognised`).
#[tokio::test(start_paused = true)]
async fn a_lun_another_node_partitioned_is_refused_with_the_way_back() {
    let partitioned = |sc: &mut Value| {
        let lun0 = lun_spec(sc, 0);
        lun0["partition_style"] = json!("gpt");
        lun0["partitions"] = json!([{"kind": "reserved", "size": 16 << 20},
            {"size": 0, "volume": {}}]);
    };
    for way_back in ["format", "clean"] {
        for (host, env) in every_host(partitioned) {
            let err = env
                .mgr
                .stage(&stage_req("v1", 0, &[], &[]), d())
                .await
                .expect_err("not this driver's");
            let vid = env.state(|s| {
                s.disks()
                    .iter()
                    .find(|d| d.id == "lun0")
                    .expect("lun0")
                    .partitions[1]
                    .volume
                    .as_ref()
                    .expect("volume")
                    .id()
            });
            assert!(
                matches!(&err, Error::FailedPrecondition(m) if m.contains("refusing to format")
                    && m.contains(&format!("Format-Volume -Path '{vid}' -FileSystem NTFS"))
                    && m.contains("Clear-Disk")),
                "{host}: {err:?}"
            );
            assert_eq!(formats(&env), 0, "{host}");
            assert_eq!(env.sessions(), 0, "{host}: rolled back");
            match way_back {
                "format" => env.script(|s| s.make_volume_readable(&vid)),
                _ => env.script(|s| s.clean_disk("lun0")),
            }
            .expect("the operator's act");
            env.mgr
                .stage(&stage_req("v1", 0, &[], &[]), d())
                .await
                .unwrap_or_else(|e| panic!("{host} {way_back}: {e}"));
            unstaged_clean(&host, &env).await;
        }
    }
}

// ---- item 7: publish onto a staging path that no longer resolves ----

/// An unstage that removed the mount point and then failed to log out leaves the record `Staged`, and kubelet
/// publishes the next pod without a re-stage. The publish mounts the recorded volume at the staging path again (the
/// disk is there), so the pod sees its data; when the disk is gone too, the publish is refused with a message.
#[tokio::test(start_paused = true)]
async fn a_publish_onto_a_staging_path_without_its_mount_point_repairs_it_or_refuses() {
    for (host, env) in every_host(|_| {}) {
        staged_with_data(&host, &env).await;
        env.fail_nth(
            DisconnectTarget,
            1,
            "DisconnectTarget failed: the target is busy",
        );
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect_err("the logout fails");
        assert!(
            !env.exists(&staging("v1")),
            "{host}: the mount point is gone"
        );
        env.publish(&publish_req("pod1"), d())
            .await
            .unwrap_or_else(|e| panic!("{host}: publish: {e}"));
        assert!(env.resolves(&target("pod1")), "{host}");
        assert_eq!(
            data_at(&env, &target("pod1")).as_deref(),
            Some(&b"the pod's data"[..]),
            "{host}: the pod sees its data"
        );
        env.mgr
            .unpublish(&unpublish_req("pod1"), d())
            .await
            .expect("unpublish");
        // Again, and this time the session goes too (the target restarted): nothing to mount, refused.
        env.fail_nth(
            DisconnectTarget,
            1,
            "DisconnectTarget failed: the target is busy",
        );
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect_err("the logout fails");
        env.sim.reboot().expect("the session goes");
        let err = env
            .publish(&publish_req("pod2"), d())
            .await
            .expect_err("nothing to publish");
        assert!(
            matches!(&err, Error::FailedPrecondition(m) if m.contains("is not there any more")),
            "{host}: {err:?}"
        );
        assert!(!env.exists(&target("pod2")), "{host}");
        unstaged_clean(&host, &env).await;
    }
}

// ---- the matrix's restart during an iSCSI portal outage ----

/// A driver restarted (a rollout, a crash) while the volume's portal does not answer: the session stays and its disk
/// is gone until the portal answers again. Start-up reconciliation keeps the record staged (left in place and
/// watched: kubelet never re-stages a volume it believes mounted; marked for re-stage, every later publish answered
/// "not staged" for ever), a publish meanwhile answers UNAVAILABLE saying why, and once the portal answers and the
/// disk is back a publish links the pod to its data. After a reboot (the session gone with it) the record is still
/// marked for re-stage.
#[tokio::test(start_paused = true)]
async fn a_restart_during_a_portal_outage_keeps_the_volume_staged_and_publish_works_once_it_answers()
 {
    for (host, mut env) in every_host(|_| {}) {
        staged_with_data(&host, &env).await;
        env.script(|s| s.set_portal_reachable("10.0.0.5", false))
            .expect("outage");
        env.restart();
        let report = env.mgr.reconcile(d()).await.expect("reconcile");
        assert!(report.restage.is_empty(), "{host}: {report:?}");
        assert_eq!(report.unreachable, ["v1"], "{host}: {report:?}");
        let phase = env
            .mgr
            .store()
            .volume("v1")
            .expect("read")
            .expect("record")
            .phase;
        assert_eq!(phase, Phase::Staged, "{host}");
        let err = env
            .publish(&publish_req("pod1"), d())
            .await
            .expect_err("the disk is gone during the outage");
        assert!(
            matches!(&err, Error::Unavailable(m) if m.contains("is not there now")),
            "{host}: {err:?}"
        );
        assert!(!env.exists(&target("pod1")), "{host}");
        env.script(|s| s.set_portal_reachable("10.0.0.5", true))
            .expect("the portal answers");
        // kubelet's retries are spaced by its backoff, which spans the disk's arrival delay.
        let mut published = Err(err);
        for _ in 0..20 {
            published = env.publish(&publish_req("pod1"), d()).await;
            if published.is_ok() {
                break;
            }
            tokio::time::advance(Duration::from_millis(500)).await;
        }
        published.unwrap_or_else(|e| panic!("{host}: publish once the portal answers: {e}"));
        assert_eq!(
            data_at(&env, &target("pod1")).as_deref(),
            Some(&b"the pod's data"[..]),
            "{host}: the pod sees its data"
        );
        env.mgr
            .unpublish(&unpublish_req("pod1"), d())
            .await
            .expect("unpublish");
        // A reboot ends the session: reconciliation marks the volume for re-stage, as before.
        env.sim.reboot().expect("reboot");
        env.restart();
        let report = env.mgr.reconcile(d()).await.expect("reconcile");
        assert_eq!(report.restage, ["v1"], "{host}: {report:?}");
        unstaged_clean(&host, &env).await;
    }
}
