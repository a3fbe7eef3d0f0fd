//! Calls that outlive their callers (issue 37 items 9, 11 and 14): an announced call from before a reboot is settled
//! at once, a wall clock set forward shortens no wait, one LUN reached through two targets is one LUN for locks and
//! destructive calls, a logout that outlives its unstage never ends a later stage's session, and a native driver
//! killed during a first stage waits only for a WMI method that was in flight. On every csi-proxy release and on the
//! backend `WINCSI_TEST_HOST_BACKEND` names (the native-only tests run natively whatever it says).

use super::*;

/// A RAW LUN's first stage, hung at the format (the WMI method natively), then the driver killed.
async fn killed_in_a_hung_format(env: &mut Env) -> &'static str {
    let format = env.per_backend("FormatVolume", "MSFT_Volume.Format");
    env.sim.hang_nth(format, 1).expect("hang");
    let req = stage_req("v1", 0, &[], &[]);
    tokio::select! {
        r = env.mgr.stage(&req, d()) => panic!("finished despite the hang: {r:?}"),
        () = env.sim.wait_hung(1) => {}
    }
    env.restart();
    format
}

/// Issue 37 item 11: the node reboots while a format announced in the record hangs (the driver was killed in it).
/// Nothing from before a reboot can still be running, so the re-stage after it formats at once instead of waiting
/// out the hour: the boot identity (the node's uptime, lower after the reboot) settles the announcement.
#[tokio::test(start_paused = true)]
async fn an_announced_format_from_before_a_reboot_is_settled_at_once() {
    for v in CsiProxyVersion::ALL {
        let mut env = Env::new();
        env.sim.set_csi_proxy_version(v).expect("release");
        // A node that has been up a while: its new boot's uptime is lower than the one the announcement carries.
        env.sim
            .with_state_mut(|s| s.set_uptime(Duration::from_secs(6 * 3600)));
        let format = killed_in_a_hung_format(&mut env).await;
        // The reboot ends the hung call (it never formatted) and the session.
        env.sim.reboot().expect("reboot");
        env.sim.wait_unhung().await;
        assert!(env.record("v1").pending.is_some(), "{v}: announced");
        let req = stage_req("v1", 0, &[], &[]);
        env.mgr
            .stage(&req, Deadline::after(Duration::from_secs(120)))
            .await
            .unwrap_or_else(|e| panic!("{v}: the re-stage after the reboot: {e}"));
        assert_eq!(env.sim.call_counts()[format], 2, "{v}: formatted once more");
        assert_eq!(env.record("v1").pending, None, "{v}");
        assert!(env.data_loss().is_empty(), "{v}: {:?}", env.data_loss());
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
    }
}

/// Issue 37 item 11: the wall clock jumps two hours forward while a format announced in the record may still run
/// (the driver was killed in it). The announcement's wall-clock time now looks two hours old; the wait must not end
/// for that: the age is the node's uptime since the announcement, which no clock setting moves.
#[tokio::test(start_paused = true)]
async fn a_wall_clock_set_forward_never_shortens_the_wait_for_an_announced_format() {
    for v in CsiProxyVersion::ALL {
        let mut env = Env::new();
        env.sim.set_csi_proxy_version(v).expect("release");
        let format = killed_in_a_hung_format(&mut env).await;
        let two_hours = 2 * 3600 * 1000;
        let rec = env.mgr.store().volume("v1").expect("read").expect("record");
        let mut r = env.record("v1");
        let p = r.pending.as_mut().expect("announced");
        p.announced_unix_ms -= two_hours;
        env.mgr
            .store()
            .put_volume(&rec.with_details(&r).expect("details"))
            .await
            .expect("write");
        env.restart();
        // Native: the hung provider call holds a blocking thread, so tokio's paused clock does not advance by
        // itself; the retry runs in real time with a short deadline (as `a_format_that_outlives_…` does).
        tokio::time::resume();
        let r = env
            .mgr
            .stage(
                &stage_req("v1", 0, &[], &[]),
                Deadline::after(Duration::from_secs(3)),
            )
            .await;
        assert!(
            matches!(&r, Err(Error::Unavailable(m)) if m.contains("FormatVolume") && m.contains("may still be running")),
            "{v}: {r:?}"
        );
        assert_eq!(env.sim.call_counts()[format], 1, "{v}: no second format");
        env.sim.release_hangs();
        env.sim.wait_unhung().await;
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: staged once the format is done: {e}"));
        assert_eq!(env.sim.call_counts()[format], 1, "{v}");
        assert!(env.data_loss().is_empty(), "{v}: {:?}", env.data_loss());
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
        tokio::time::pause();
    }
}

/// A second target exposing LUN 0 with the identity of the first target's LUN 0 (one LUN exported through two
/// targets: a node without MPIO sees two disks with one page83).
fn one_lun_two_targets(sc: &mut Value) {
    let lun0 = lun_spec(sc, 0);
    lun0["page83"] = json!("6001405aabbccddeeff00112233445566");
    let twin = json!({"lun": 0, "id": "lun0-twin", "size": 10 * GIB, "serial": "SN-lun0",
        "page83": "6001405aabbccddeeff00112233445566"});
    sc["iscsi"]["portals"][0]["targets"]
        .as_array_mut()
        .expect("targets")
        .push(json!({"iqn": IQN2, "luns": [twin]}));
}

fn stage_twin(id: &str) -> StageRequest {
    let mut req = stage_req(id, 0, &[], &[]);
    req.volume_context.insert("iqn".into(), IQN2.into());
    req
}

/// Issue 37 item 11: two volumes naming one LUN through two targets (the same page83) are one LUN. While the first
/// one's `PartitionDisk` runs, the second waits for the LUN's lock instead of judging its own disk (the same LUN)
/// empty and partitioning it; once the first driver is gone with its call still running, the second refuses to
/// partition (UNAVAILABLE, naming the first volume) until that call may no longer run.
#[tokio::test(start_paused = true)]
async fn one_lun_reached_through_two_targets_is_one_lun_for_locks_and_destructive_calls() {
    for v in CsiProxyVersion::ALL {
        let mut env = Env::with(one_lun_two_targets);
        env.sim.set_csi_proxy_version(v).expect("release");
        let partition = env.per_backend("PartitionDisk", "MSFT_Disk.Initialize");
        env.sim.hang_nth(partition, 1).expect("hang");
        let mgr = Arc::clone(&env.mgr);
        let first =
            tokio::spawn(async move { mgr.stage(&stage_req("v1", 0, &[], &[]), d()).await });
        env.sim.wait_hung(1).await;
        // Native: the hung WMI method holds a blocking thread (tokio's paused clock stops): real time from here.
        let native = env.backend == sim::wmi::TestBackend::Native;
        if native {
            tokio::time::resume();
        }
        let second = tokio::time::timeout(
            Duration::from_secs(3),
            env.mgr.stage(&stage_twin("v2"), d()),
        )
        .await;
        assert!(
            second.is_err(),
            "{v}: v2 waits for the LUN's lock: {second:?}"
        );
        assert_eq!(env.sim.call_counts()[partition], 1, "{v}");
        // The first driver is killed; its call goes on on the host.
        first.abort();
        env.restart();
        // csi-proxy judges the disk empty only after the settle time (paused clock); native from its layout at once
        // (in real time: generous for a loaded machine, the answer comes at once).
        let within = Duration::from_secs(60);
        let r = env
            .mgr
            .stage(&stage_twin("v2"), Deadline::after(within))
            .await;
        assert!(
            matches!(&r, Err(Error::Unavailable(m)) if m.contains("volume \"v1\"") && m.contains("same LUN")),
            "{v}: {r:?}"
        );
        assert_eq!(
            env.sim.call_counts()[partition],
            1,
            "{v}: nothing destructive meanwhile"
        );
        // csi-proxy finishes the whole call; natively the method completes in its provider, and the killed
        // process's next call (its `Refresh`) never reaches the host (`Env::restart`: its Windows view died with it).
        env.sim.release_hangs();
        env.sim.wait_unhung().await;
        for (id, req) in [
            ("v1", stage_req("v1", 0, &[], &[])),
            ("v2", stage_twin("v2")),
        ] {
            env.mgr
                .stage(&req, d())
                .await
                .unwrap_or_else(|e| panic!("{v}: {id}: {e}"));
        }
        assert!(env.data_loss().is_empty(), "{v}: {:?}", env.data_loss());
        for id in ["v1", "v2"] {
            env.mgr
                .unstage(&unstage_req(id), d())
                .await
                .expect("unstage");
        }
        env.0.assert_clean();
        if native {
            tokio::time::pause();
        }
    }
}

/// Issue 37 item 9: `DisconnectTarget` of the target's last volume outlives its unstage (kubelet gave up; then the
/// driver restarts). A stage of another LUN of the target meanwhile must not log in on "already logged in" (or join
/// the session) and succeed, only to lose its disk when the late logout ends the session: it answers UNAVAILABLE
/// while the logout may still run, and stages once it has ended.
#[tokio::test(start_paused = true)]
async fn a_logout_that_outlives_its_unstage_never_ends_a_later_stage() {
    for v in CsiProxyVersion::ALL {
        let mut env = Env::new();
        env.sim.set_csi_proxy_version(v).expect("release");
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect("v1");
        let logout = env.per_backend("DisconnectTarget", "MSFT_iSCSITarget.Disconnect");
        env.sim.hang_nth(logout, 1).expect("hang");
        let unstage = unstage_req("v1");
        tokio::select! {
            r = env.mgr.unstage(&unstage, d()) => panic!("{v}: finished despite the hang: {r:?}"),
            () = env.sim.wait_hung(1) => {}
        }
        env.restart();
        let native = env.backend == sim::wmi::TestBackend::Native;
        if native {
            tokio::time::resume();
        }
        // Long enough for a whole first stage of the RAW LUN (csi-proxy's settle time, paused clock); native runs in
        // real time (the hung method's blocking thread), where a short deadline suffices.
        let within = Duration::from_secs(if native { 3 } else { 60 });
        let r = env
            .mgr
            .stage(&stage_req("v2", 1, &[], &[]), Deadline::after(within))
            .await;
        assert!(
            matches!(&r, Err(Error::Unavailable(m)) if m.contains("DisconnectTarget") && m.contains("volume \"v1\"")),
            "{v}: {r:?}"
        );
        assert!(
            env.record("v1").removal.is_some(),
            "{v}: the logout stays announced in v1's record"
        );
        // The late logout ends the session (v2's stage learns that from the host).
        env.sim.release_hangs();
        env.sim.wait_unhung().await;
        env.mgr
            .stage(&stage_req("v2", 1, &[], &[]), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: v2 once the logout ended: {e}"));
        assert_eq!(env.sessions(), 1, "{v}: logged in again");
        env.state(|s| s.write_file(&format!(r"{}\pod.txt", staging("v2")), b"from the pod"))
            .expect("write");
        // kubelet's retry of v1's unstage: v2 uses the session now, which stays.
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: v1's unstage retry: {e}"));
        assert_eq!(env.sessions(), 1, "{v}: v2's session stays");
        assert!(
            env.exists(&format!(r"{}\pod.txt", staging("v2"))),
            "{v}: v2's volume is still there"
        );
        env.mgr
            .unstage(&unstage_req("v2"), d())
            .await
            .expect("unstage v2");
        assert!(env.mgr.store().volumes().expect("list").is_empty(), "{v}");
        env.0.assert_clean();
        if native {
            tokio::time::pause();
        }
    }
}

/// The native kill points of a RAW LUN's first stage between its announced `PartitionDisk` (or `FormatVolume`) and
/// the calls that change the disk: the reads (`ReadFile` of the raw sectors, `SELECT MSFT_Partition`,
/// `MSFT_Disk.Refresh`, `SELECT MSFT_Volume`) and the gap between `Initialize` and `CreatePartition`, as (audit name,
/// occurrence) in a clean first stage.
fn native_kill_points(audit: &[String]) -> Vec<(String, u64)> {
    let names = [
        "ReadFile",
        "SELECT MSFT_Partition",
        "MSFT_Disk.Refresh",
        "SELECT MSFT_Volume",
    ];
    let start = audit
        .iter()
        .position(|c| c == "ReadFile")
        .expect("the raw read");
    let end = audit
        .iter()
        .position(|c| c == "MSFT_Volume.Format")
        .expect("the format");
    let mut out = Vec::new();
    for i in start..end {
        if names.contains(&audit[i].as_str()) {
            let nth = audit[..=i].iter().filter(|c| **c == audit[i]).count() as u64;
            if !out.iter().any(|(n, k)| *n == audit[i] && *k == nth) {
                out.push((audit[i].clone(), nth));
            }
        }
    }
    out
}

/// Issue 37 item 14: a native driver killed during any read of a RAW LUN's first stage (after `PartitionDisk` or
/// `FormatVolume` was announced, before or between the WMI methods that change the disk) is not waited for: its
/// sequence died with it and no method was in flight, so the restarted driver's retry stages at once (it waited out
/// the one-hour bound before).
#[tokio::test(start_paused = true)]
async fn a_native_driver_killed_between_the_calls_that_change_the_disk_is_not_waited_for() {
    let clean = Env::with_on(sim::wmi::TestBackend::Native, |_| {});
    clean.sim.clear_audit();
    clean
        .mgr
        .stage(&stage_req("v1", 0, &[], &[]), d())
        .await
        .expect("clean stage");
    let audit: Vec<String> = clean.sim.audit(0).iter().map(|e| e.rpc.clone()).collect();
    let points = native_kill_points(&audit);
    assert!(points.len() >= 4, "{points:?}");
    for (name, nth) in points {
        let mut env = Env::with_on(sim::wmi::TestBackend::Native, |_| {});
        env.sim.clear_audit();
        env.sim.hang_nth(&name, nth).expect("hang");
        let req = stage_req("v1", 0, &[], &[]);
        tokio::select! {
            r = env.mgr.stage(&req, d()) => panic!("{name}#{nth}: finished despite the hang: {r:?}"),
            () = env.sim.wait_hung(1) => {}
        }
        // The process dies: its sequence ends at the call it was in.
        env.restart();
        env.sim.fail_hangs();
        env.sim.wait_unhung().await;
        let pending = env.record("v1").pending;
        assert!(pending.is_some(), "{name}#{nth}: a call was announced");
        env.mgr
            .stage(&req, Deadline::after(Duration::from_secs(120)))
            .await
            .unwrap_or_else(|e| panic!("{name}#{nth} ({pending:?}): {e}"));
        assert!(env.data_loss().is_empty(), "{name}#{nth}");
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
    }
}

/// Issue 37 item 14: a native driver killed while `MSFT_Disk.Initialize` is in flight in its provider. The
/// restarted driver's retry waits for that method (named, UNAVAILABLE) — and only until Windows shows its outcome
/// (the disk has a partition table), not for the one-hour bound: then it creates the partition and stages.
#[tokio::test(start_paused = true)]
async fn a_native_initialize_in_flight_is_waited_for_until_its_outcome_shows() {
    let mut env = Env::with_on(sim::wmi::TestBackend::Native, |_| {});
    env.sim.hang_nth("MSFT_Disk.Initialize", 1).expect("hang");
    let req = stage_req("v1", 0, &[], &[]);
    tokio::select! {
        r = env.mgr.stage(&req, d()) => panic!("finished despite the hang: {r:?}"),
        () = env.sim.wait_hung(1) => {}
    }
    env.restart();
    tokio::time::resume();
    let r = env
        .mgr
        .stage(&req, Deadline::after(Duration::from_secs(3)))
        .await;
    assert!(
        matches!(&r, Err(Error::Unavailable(m)) if m.contains("MSFT_Disk.Initialize") && m.contains("driver process that has since gone")),
        "{r:?}"
    );
    // The method completes in its provider; the dead process's next call (the `Refresh` after it) never reaches the
    // host (`Env::restart`: its Windows view died with it).
    let refreshes = env.sim.call_counts().get("MSFT_Disk.Refresh").copied();
    env.sim.release_hangs();
    env.sim.wait_unhung().await;
    tokio::time::pause();
    assert_eq!(
        env.sim.call_counts().get("MSFT_Disk.CreatePartition"),
        None,
        "the dead sequence never partitioned"
    );
    assert_eq!(
        env.sim.call_counts().get("MSFT_Disk.Refresh").copied(),
        refreshes,
        "the dead sequence's next call never reached the host"
    );
    env.mgr
        .stage(&req, Deadline::after(Duration::from_secs(120)))
        .await
        .unwrap_or_else(|e| panic!("staged once Initialize shows: {e}"));
    assert_eq!(
        env.sim.call_counts()["MSFT_Disk.Initialize"],
        1,
        "never twice"
    );
    assert!(env.data_loss().is_empty());
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

/// Issue 37 item 9, the iSCSI staging path: the unstage's `Rmdir` of the staging path hangs (csi-proxy and
/// `RemoveDirectoryW` finish after their caller went away) and the driver is killed in it. A new pod's stage of the
/// volume meanwhile must not mount the volume there again and answer OK, only to lose the mount point when the late
/// removal lands: it answers UNAVAILABLE while the removal may still run, and stages once the path is gone.
#[tokio::test(start_paused = true)]
async fn a_staging_path_removal_that_outlives_its_unstage_never_takes_a_later_stage_s_mount_point()
{
    for v in CsiProxyVersion::ALL {
        let mut env = Env::new();
        env.sim.set_csi_proxy_version(v).expect("release");
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect("v1");
        let rmdir = env.per_backend("Rmdir", "RemoveDirectoryW");
        env.sim.hang_nth(rmdir, 1).expect("hang");
        let unstage = unstage_req("v1");
        tokio::select! {
            r = env.mgr.unstage(&unstage, d()) => panic!("{v}: finished despite the hang: {r:?}"),
            () = env.sim.wait_hung(1) => {}
        }
        env.restart();
        let native = env.backend == sim::wmi::TestBackend::Native;
        if native {
            tokio::time::resume();
        }
        let within = Duration::from_secs(if native { 3 } else { 60 });
        let r = env
            .mgr
            .stage(&stage_req("v1", 0, &[], &[]), Deadline::after(within))
            .await;
        assert!(
            matches!(&r, Err(Error::Unavailable(m)) if m.contains("Rmdir") && m.contains("volume \"v1\"")),
            "{v}: {r:?}"
        );
        assert!(
            env.record("v1").unmounting.is_some(),
            "{v}: the removal stays announced in the record"
        );
        // The late removal lands; the next stage learns it from the host (the staging path is gone).
        env.sim.release_hangs();
        env.sim.wait_unhung().await;
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: the stage once the removal ended: {e}"));
        assert!(
            env.resolves(&staging("v1")),
            "{v}: the stage's mount point stays"
        );
        assert!(
            env.record("v1").unmounting.is_none(),
            "{v}: the announcement left the record"
        );
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        assert!(env.mgr.store().volumes().expect("list").is_empty(), "{v}");
        env.0.assert_clean();
        if native {
            tokio::time::pause();
        }
    }
}

/// Issue 37 item 14: a first stage gives up (its deadline) while its announced `PartitionDisk` hangs, kubelet unstages
/// (the logout takes the disk away), and the late call then fails on the host: no outcome can ever show on the RAW
/// disk. The call ran on its own task, so this process heard it answer: the next stage goes on at once instead of
/// waiting for the hour's bound (through csi-proxy nothing else can prove the call over).
#[tokio::test(start_paused = true)]
async fn a_stage_that_gave_up_still_hears_its_partition_answer_and_is_not_held_for_the_bound() {
    // csi-proxy only: natively the backend itself knows its calls in flight (`Host::in_flight`).
    for v in CsiProxyVersion::ALL {
        let env = Env::with_on(sim::wmi::TestBackend::CsiProxy, |_| {});
        env.sim.set_csi_proxy_version(v).expect("release");
        env.sim.hang_nth("PartitionDisk", 1).expect("hang");
        let req = stage_req("v1", 0, &[], &[]);
        let r = env
            .mgr
            .stage(&req, Deadline::after(Duration::from_secs(60)))
            .await;
        assert!(
            matches!(&r, Err(Error::DeadlineExceeded(_) | Error::Unavailable(_))),
            "{v}: {r:?}"
        );
        assert!(env.record("v1").pending.is_some(), "{v}: announced");
        // The pod is deleted: NodeUnstage while the call hangs (the logout takes the disk away).
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: unstage: {e}"));
        env.sim.release_hangs();
        env.sim.wait_unhung().await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        env.mgr
            .stage(&req, d())
            .await
            .unwrap_or_else(|e| panic!("{v}: the next stage once the call answered: {e}"));
        assert!(env.mounted(&staging("v1")).is_some(), "{v}: staged");
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.0.assert_clean();
    }
}
