//! Kubelet-faithful end-to-end scenarios on a simulated Windows node: the real `wincsi-sim` and `wincsi-node`
//! binaries as separate processes (csi-proxy over Unix sockets, CSI over a Unix socket), kubelet's exact paths,
//! attributes, call order and retries. Every scenario ends with the simulator's invariants (no data loss,
//! nothing left behind), the driver's state directory empty, and no secret value in any log.
#![cfg(unix)]

use wincsi_e2e::fixtures::{self, SECRETS, SMB_GUEST_SHARE, SMB_SERVER, SMB_SHARE};
use wincsi_e2e::{Pod, TestNode, Volume, binaries};

async fn node() -> TestNode {
    TestNode::start(&binaries!(), &fixtures::scenario())
        .await
        .expect("node starts")
}

/// The end of every scenario: nothing lost, nothing left, nothing leaked.
async fn finish(node: TestNode) {
    if let Err(e) = node.check_clean().await {
        panic!(
            "{e}\n--- driver log (tail) ---\n{}",
            tail(&node.driver_logs(), 40)
        );
    }
    node.check_no_secret_in_logs(SECRETS)
        .expect("no secret in logs");
    node.shutdown().await;
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Unwraps a scenario step, printing the driver's log tail on failure.
macro_rules! step {
    ($node:expr, $e:expr) => {
        match $e.await {
            Ok(v) => v,
            Err(e) => panic!(
                "{} failed: {e}\n--- driver log (tail) ---\n{}",
                stringify!($e),
                tail(&$node.driver_logs(), 40)
            ),
        }
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_with_an_smb_pvc_and_an_iscsi_pvc_writes_data_that_lands_on_the_share_and_the_lun() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("team-a", "app-0");
    let smb = fixtures::smb_volume(
        "pv-smb",
        "team-a",
        "data-smb",
        Some("${pvc.metadata.namespace}/${pvc.metadata.name}"),
    );
    let lun = fixtures::iscsi_volume("pv-lun0", "team-a", "data-lun", 0);

    let smb_target = step!(node, k.mount(host, &pod, &smb));
    let lun_target = step!(node, k.mount(host, &pod, &lun));
    assert!(
        smb_target.ends_with(r"\volumes\kubernetes.io~csi\pv-smb\mount"),
        "{smb_target}"
    );

    // The pod writes through its volume paths.
    step!(
        node,
        host.write_file(&format!(r"{smb_target}\hello.txt"), "hello over SMB")
    );
    step!(
        node,
        host.write_file(&format!(r"{lun_target}\db\row1.txt"), "hello on NTFS")
    );

    // The SMB data is on the share, under the subDir the templates produced (created by the driver).
    assert_eq!(
        step!(
            node,
            host.read_share_file(SMB_SERVER, SMB_SHARE, "team-a/data-smb/hello.txt")
        ),
        "hello over SMB"
    );
    // The pod sees what was already on the share root through its link only under subDir: not the README.
    assert!(
        host.read_file(&format!(r"{smb_target}\README.txt"))
            .await
            .is_err()
    );
    // The iSCSI data is on the volume mounted at the staging path (the LUN's NTFS volume).
    let staging = k.staging_path(&lun);
    assert_eq!(
        step!(node, host.read_file(&format!(r"{staging}\db\row1.txt"))),
        "hello on NTFS"
    );

    step!(node, k.unmount(host, &pod, &smb));
    step!(node, k.unmount(host, &pod, &lun));

    // The LUN keeps the data after a full teardown: another pod mounts it and reads the file.
    let pod2 = Pod::new("team-a", "app-1");
    let t2 = step!(node, k.mount(host, &pod2, &lun));
    assert_eq!(
        step!(node, host.read_file(&format!(r"{t2}\db\row1.txt"))),
        "hello on NTFS"
    );
    step!(node, k.unmount(host, &pod2, &lun));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_share_one_smb_volume_and_one_leaving_does_not_break_the_other() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let vol = fixtures::smb_volume("pv-shared", "web", "shared", Some("shared"));
    let (a, b) = (Pod::new("web", "web-0"), Pod::new("web", "web-1"));
    let ta = step!(node, k.mount(host, &a, &vol));
    let tb = step!(node, k.mount(host, &b, &vol));
    assert_ne!(ta, tb);
    step!(node, host.write_file(&format!(r"{ta}\from-a.txt"), "a"));
    assert_eq!(
        step!(node, host.read_file(&format!(r"{tb}\from-a.txt"))),
        "a"
    );

    // Pod A goes away: kubelet unpublishes its path only (the volume stays staged for B).
    step!(node, k.unmount(host, &a, &vol));
    assert!(
        host.read_link(&ta).await.expect("read_link").is_none(),
        "A's target link is gone"
    );
    step!(node, host.write_file(&format!(r"{tb}\from-b.txt"), "b"));
    assert_eq!(
        step!(
            node,
            host.read_share_file(SMB_SERVER, SMB_SHARE, "shared/from-b.txt")
        ),
        "b"
    );
    let stats = step!(node, k.stats(&b, &vol));
    if let Some(c) = stats.volume_condition {
        assert!(!c.abnormal, "B's volume is healthy: {}", c.message);
    }

    step!(node, k.unmount(host, &b, &vol));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_restart_unpublishes_and_publishes_again_with_the_data_intact() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("db", "pg-0");
    let smb = fixtures::smb_volume("pv-restart", "db", "conf", Some("conf"));
    let lun = fixtures::iscsi_volume("pv-restart-lun", "db", "data", 1);
    for v in [&smb, &lun] {
        let t = step!(node, k.mount(host, &pod, v));
        step!(
            node,
            host.write_file(&format!(r"{t}\state.txt"), "before restart")
        );
    }
    // The container restarts with a new pod sandbox: kubelet tears down and sets up the pod's volumes again
    // without unstaging them. Repeated publish of an already published target is a no-op (idempotent).
    for v in [&smb, &lun] {
        step!(node, k.tear_down(host, &pod, v));
        let t = step!(node, k.set_up(host, &pod, v));
        let t_again = step!(node, k.set_up(host, &pod, v));
        assert_eq!(t, t_again);
        assert_eq!(
            step!(node, host.read_file(&format!(r"{t}\state.txt"))),
            "before restart"
        );
    }
    for v in [&smb, &lun] {
        step!(node, k.unmount(host, &pod, v));
    }
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iscsi_volume_expands_online_and_reports_stats() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("db", "mysql-0");
    let lun = fixtures::iscsi_volume("pv-grow", "db", "grow", 0);
    let t = step!(node, k.mount(host, &pod, &lun));
    step!(node, host.write_file(&format!(r"{t}\data.bin"), "payload"));

    let before = step!(node, k.stats(&pod, &lun));
    let total = |s: &csi::v1::NodeGetVolumeStatsResponse| {
        s.usage
            .iter()
            .find(|u| u.unit == csi::v1::volume_usage::Unit::Bytes as i32)
            .map(|u| (u.total, u.used, u.available))
    };
    let (t0, used0, avail0) = total(&before).expect("byte usage reported");
    assert!(t0 > 0 && t0 <= fixtures::LUN_SIZE as i64, "total {t0}");
    assert!(
        used0 >= 0 && avail0 >= 0 && used0 + avail0 <= t0,
        "used {used0} + available {avail0} <= total {t0}"
    );
    if let Some(c) = &before.volume_condition {
        assert!(!c.abnormal, "{}", c.message);
    }

    // The storage side grows the LUN to 3 GiB; the controller expands the PV; kubelet calls NodeExpandVolume.
    let new_size = 3 * fixtures::LUN_SIZE;
    step!(node, host.set_disk_size("lun0", new_size));
    let cap = step!(node, k.expand(&pod, &lun, new_size as i64));
    assert!(cap > t0, "capacity grew: {cap} > {t0}");
    let (t1, _, _) = total(&step!(node, k.stats(&pod, &lun))).expect("byte usage reported");
    assert!(
        t1 > t0 && t1 <= new_size as i64,
        "stats see the new size: {t1}"
    );
    assert_eq!(
        step!(node, host.read_file(&format!(r"{t}\data.bin"))),
        "payload"
    );

    // Stats on a path that is not one of our volumes: NotFound.
    let other = Pod::new("db", "not-here");
    let err = k.stats(&other, &lun).await.expect_err("unknown path");
    assert_eq!(err.csi_code(), Some(tonic::Code::NotFound), "{err}");

    step!(node, k.unmount(host, &pod, &lun));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smb_volume_reports_stats_and_a_healthy_condition() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("web", "nginx-0");
    let vol = fixtures::smb_volume("pv-stats", "web", "html", None);
    step!(node, k.mount(host, &pod, &vol));
    let stats = step!(node, k.stats(&pod, &vol));
    if let Some(c) = &stats.volume_condition {
        assert!(!c.abnormal, "{}", c.message);
    }
    step!(node, k.unmount(host, &pod, &vol));
    finish(node).await;
}

/// `authentication: machine` (issue 40 item 1) on csiProxy mode: refused with the reason, nothing done on the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_account_volume_is_refused_on_csi_proxy_mode_naming_host_process() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("team-b", "app-0");
    let vol = fixtures::smb_machine_volume("pv-machine", "team-b", "data-machine");
    let k1 = k.clone().with_retry(wincsi_e2e::kubelet::Retry {
        attempts: 1,
        ..Default::default()
    });
    let err = k1.mount(host, &pod, &vol).await.expect_err("csiProxy mode");
    assert_eq!(
        err.csi_code(),
        Some(tonic::Code::FailedPrecondition),
        "{err}"
    );
    assert!(err.to_string().contains("mode: hostProcess"), "{err}");
    let audit = host.audit(0).await.expect("audit");
    assert!(
        !audit.iter().any(|e| e.rpc == "NewSmbGlobalMapping"),
        "nothing mapped"
    );
    step!(node, k.tear_down(host, &pod, &vol));
    finish(node).await;
}

/// Per-volume SMB client options (issue 40 item 2) on csiProxy mode: refused with the reason (csi-proxy's request
/// cannot carry them), naming `mode: hostProcess`; nothing done on the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smb_client_options_are_refused_on_csi_proxy_mode_naming_host_process() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("team-c", "app-0");
    let vol = fixtures::smb_volume("pv-opts", "team-c", "data-opts", None)
        .attr("requirePrivacy", "true")
        .attr("blockNTLM", "true");
    let k1 = k.clone().with_retry(wincsi_e2e::kubelet::Retry {
        attempts: 1,
        ..Default::default()
    });
    let err = k1.mount(host, &pod, &vol).await.expect_err("csiProxy mode");
    assert_eq!(
        err.csi_code(),
        Some(tonic::Code::FailedPrecondition),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("mode: hostProcess") && text.contains("requirePrivacy, blockNTLM"),
        "{text}"
    );
    let audit = host.audit(0).await.expect("audit");
    assert!(
        !audit.iter().any(|e| e.rpc == "NewSmbGlobalMapping"),
        "nothing mapped"
    );
    step!(node, k.tear_down(host, &pod, &vol));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_reboot_then_kubelet_restages_and_republishes_with_data_intact() {
    let mut node = node().await;
    let pod = Pod::new("team-b", "worker-0");
    let smb = fixtures::smb_volume("pv-reboot", "team-b", "files", Some("reboot"));
    let lun = fixtures::iscsi_volume("pv-reboot-lun", "team-b", "disk", 0);
    for v in [&smb, &lun] {
        let t = step!(node, node.kubelet().mount(node.host(), &pod, v));
        step!(
            node,
            node.host()
                .write_file(&format!(r"{t}\before-reboot.txt"), "survives")
        );
    }

    // The node reboots: mappings go Disconnected, the iSCSI session drops, the driver restarts and reconciles,
    // kubelet comes back with empty books and mounts the running pod's volumes again.
    node.reboot().await.expect("reboot");
    // The restarted driver's reconciliation saw both volumes' staging paths broken and marked them for re-stage.
    let log = node.driver().expect("driver").log().text();
    let line = log
        .lines()
        .find(|l| l.contains("startup reconciliation finished"))
        .unwrap_or_else(|| panic!("no reconciliation line:\n{log}"));
    for v in [&smb, &lun] {
        assert!(
            line.contains(&v.handle),
            "{} not marked for re-stage: {line}",
            v.handle
        );
    }
    for v in [&smb, &lun] {
        let t = step!(node, node.kubelet().mount(node.host(), &pod, v));
        assert_eq!(
            step!(
                node,
                node.host().read_file(&format!(r"{t}\before-reboot.txt"))
            ),
            "survives"
        );
        step!(
            node,
            node.host()
                .write_file(&format!(r"{t}\after-reboot.txt"), "works")
        );
    }
    assert_eq!(
        step!(
            node,
            node.host()
                .read_share_file(SMB_SERVER, SMB_SHARE, "reboot/after-reboot.txt")
        ),
        "works"
    );
    for v in [&smb, &lun] {
        step!(node, node.kubelet().unmount(node.host(), &pod, v));
    }
    finish(node).await;
}

/// The node reboots while its file server is down (issue 29 item 1): kubelet's re-stages fail during the outage (its
/// retries run out); the server comes back (`restart`: the driver restarts once more first) and kubelet's next mount
/// of the running pod's volume must bring it back with the data, then tear down clean.
async fn reboot_during_a_file_server_outage(restart: bool) {
    let mut node = node().await;
    let pod = Pod::new("team-o", "outage-0");
    let smb = fixtures::smb_volume("pv-outage", "team-o", "files", Some("outage"));
    let t = step!(node, node.kubelet().mount(node.host(), &pod, &smb));
    step!(
        node,
        node.host()
            .write_file(&format!(r"{t}\before.txt"), "survives")
    );
    step!(node, node.host().set_smb_reachable(SMB_SERVER, false));
    node.reboot().await.expect("reboot");
    let during = node.kubelet().mount(node.host(), &pod, &smb).await;
    assert!(
        during.is_err(),
        "the share cannot be staged while its server is down: {during:?}"
    );
    step!(node, node.host().set_smb_reachable(SMB_SERVER, true));
    if restart {
        step!(node, node.restart_driver());
    }
    let t = step!(node, node.kubelet().mount(node.host(), &pod, &smb));
    assert_eq!(
        step!(node, node.host().read_file(&format!(r"{t}\before.txt"))),
        "survives"
    );
    step!(
        node,
        node.host().write_file(&format!(r"{t}\after.txt"), "works")
    );
    assert_eq!(
        step!(
            node,
            node.host()
                .read_share_file(SMB_SERVER, SMB_SHARE, "outage/after.txt")
        ),
        "works"
    );
    step!(node, node.kubelet().unmount(node.host(), &pod, &smb));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_reboot_during_a_file_server_outage_recovers_once_the_server_is_back() {
    reboot_during_a_file_server_outage(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_reboot_during_a_file_server_outage_recovers_across_a_driver_restart() {
    reboot_during_a_file_server_outage(true).await;
}

/// Crashes the driver while the `nth` call of host RPC `rpc` is in flight during kubelet's first NodeStage
/// attempt, restarts it, and lets kubelet retry: the volume must end up staged and usable, then tear down clean.
async fn crash_mid_stage(rpc: &str, nth: u64, vol: Volume) {
    crash_mid_stage_then(rpc, nth, vol, false).await;
}

/// [`crash_mid_stage`]; with `outlives`, the hung call is destructive and goes on on the host after the driver died
/// (csi-proxy finishes a call whose client went away): the restarted driver's first attempt must fail without
/// issuing it again, then the call completes, after the restart, and kubelet's retries converge without data loss.
async fn crash_mid_stage_then(rpc: &str, nth: u64, vol: Volume, outlives: bool) {
    let mut node = node().await;
    let pod = Pod::new("crash", "victim-0");
    node.host().hang(rpc, nth).await.expect("hang");
    // kubelet creates the staging parent first (as in mount_device), then its first attempt hangs in the host.
    let admin = sim::admin::AdminClient::connect(node.sim().admin_addr())
        .await
        .expect("admin");
    let stage = {
        let k = node.kubelet().clone();
        let v = vol.clone();
        tokio::spawn(async move { k.stage_once(&admin, &v).await })
    };
    let hung =
        tokio::time::timeout(std::time::Duration::from_secs(60), node.host().wait_hung(1)).await;
    assert!(
        matches!(hung, Ok(Ok(n)) if n >= 1),
        "the {rpc} call hangs: {hung:?}\n{}",
        tail(&node.driver_logs(), 30)
    );
    node.kill_driver().await;
    let first = stage.await.expect("join");
    assert!(
        first.is_err(),
        "the attempt in flight fails when the driver dies"
    );

    // The DaemonSet restarts the driver (it reconciles); kubelet retries the same NodeStage, then publishes.
    step!(node, node.start_driver());
    if outlives {
        let admin = sim::admin::AdminClient::connect(node.sim().admin_addr())
            .await
            .expect("admin");
        let calls = admin.call_counts().await.expect("counts").get(rpc).copied();
        let retry = node.kubelet().stage_once(&admin, &vol).await;
        assert!(
            matches!(&retry, Err(e) if e.to_string().contains("may still be running")),
            "the retry while {rpc} runs waits for it: {retry:?}"
        );
        assert_eq!(
            admin.call_counts().await.expect("counts").get(rpc).copied(),
            calls,
            "{rpc} issued again while the first may still run"
        );
        // The first call completes, after the restart.
        admin.release_hangs().await.expect("release");
    }
    let t = step!(node, node.kubelet().mount(node.host(), &pod, &vol));
    step!(
        node,
        node.host().write_file(&format!(r"{t}\ok.txt"), "converged")
    );
    assert_eq!(
        step!(node, node.host().read_file(&format!(r"{t}\ok.txt"))),
        "converged"
    );
    step!(node, node.kubelet().unmount(node.host(), &pod, &vol));
    node.check_no_data_loss().await.expect("no data loss");
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_killed_while_creating_the_smb_mapping_converges_on_retry() {
    crash_mid_stage(
        "NewSmbGlobalMapping",
        1,
        fixtures::smb_volume("pv-crash-1", "crash", "c1", Some("c1")),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_killed_after_the_smb_mapping_before_the_link_converges_on_retry() {
    crash_mid_stage(
        // The second mapping call links the staging path to root + subDir, after the root mapping exists.
        "NewSmbGlobalMapping",
        2,
        fixtures::smb_volume("pv-crash-2", "crash", "c2", Some("c2")),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_killed_while_formatting_the_lun_converges_on_retry_without_data_loss() {
    crash_mid_stage_then(
        "FormatVolume",
        1,
        fixtures::iscsi_volume("pv-crash-3", "crash", "c3", 0),
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_killed_while_mounting_the_lun_converges_on_retry() {
    crash_mid_stage(
        "MountVolume",
        1,
        fixtures::iscsi_volume("pv-crash-4", "crash", "c4", 1),
    )
    .await;
}

/// Whether the simulated node plays a PowerShell-era csi-proxy (≤ v1.2.1), which cannot map a share without
/// credentials.
async fn powershell_csi_proxy(node: &TestNode) -> bool {
    let status = step!(node, node.host().csi_proxy_status());
    status.version.is_powershell()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_ephemeral_smb_volume_is_published_and_torn_down_by_publish_alone() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("scratch", "job-0");
    let vol = Volume::inline(&pod, "scratch")
        .attr("source", &format!(r"\\{SMB_SERVER}\{SMB_GUEST_SHARE}"))
        .attr("subDir", "jobs");
    if powershell_csi_proxy(&node).await {
        // A credential-less volume cannot work on csi-proxy ≤ v1.2.1: a clear refusal naming the limit, nothing left.
        let k1 = k.clone().with_retry(wincsi_e2e::kubelet::Retry {
            attempts: 1,
            ..Default::default()
        });
        let err = k1
            .mount(host, &pod, &vol)
            .await
            .expect_err("no credentials");
        assert_eq!(
            err.csi_code(),
            Some(tonic::Code::FailedPrecondition),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("without credentials") && text.contains("v1.3.0"),
            "{text}"
        );
        step!(node, k.tear_down(host, &pod, &vol));
        finish(node).await;
        return;
    }
    let t = step!(node, k.mount(host, &pod, &vol));
    step!(node, host.write_file(&format!(r"{t}\out.txt"), "inline"));
    assert_eq!(
        step!(
            node,
            host.read_share_file(SMB_SERVER, SMB_GUEST_SHARE, "jobs/out.txt")
        ),
        "inline"
    );
    // kubelet never calls NodeStage/NodeUnstage for inline volumes.
    assert!(k.calls().iter().all(|c| c.rpc != "NodeStageVolume"));
    step!(node, k.unmount(host, &pod, &vol));
    assert!(k.calls().iter().all(|c| c.rpc != "NodeUnstageVolume"));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_teardown_of_many_volumes_leaves_no_mapping_session_mount_link_or_record() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("many", "m-0");
    let vols = [
        fixtures::smb_volume("pv-m1", "many", "a", Some("a")),
        fixtures::smb_volume("pv-m2", "many", "b", Some("b")),
        fixtures::iscsi_volume("pv-m3", "many", "c", 0),
        fixtures::iscsi_volume("pv-m4", "many", "d", 1),
    ];
    for v in &vols {
        step!(node, k.mount(host, &pod, v));
    }
    // Unstaging one SMB volume keeps the shared mapping; unstaging one LUN keeps the target's session.
    step!(node, k.unmount(host, &pod, &vols[0]));
    step!(node, k.unmount(host, &pod, &vols[2]));
    let state = step!(node, host.state());
    assert_eq!(
        state["mappings"].as_object().map_or(0, |m| m.len()),
        1,
        "mapping kept: {}",
        state["mappings"]
    );
    assert_eq!(
        state["sessions"].as_array().map_or(0, Vec::len),
        1,
        "session kept: {}",
        state["sessions"]
    );
    let t = k.publish_path(&pod, &vols[1]);
    step!(node, host.write_file(&format!(r"{t}\still.txt"), "ok"));
    step!(node, k.unmount(host, &pod, &vols[1]));
    step!(node, k.unmount(host, &pod, &vols[3]));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_volume_with_a_secret_name_but_no_api_access_fails_cleanly() {
    // The driver binary reads inline volumes' Secrets with its pod's service account; the harness clears the
    // service env, so it must refuse with FailedPrecondition, leave nothing on the host, and keep serving.
    let node = node().await;
    let k = node
        .kubelet()
        .clone()
        .with_retry(wincsi_e2e::kubelet::Retry {
            attempts: 1,
            ..Default::default()
        });
    let pod = Pod::new("scratch", "job-1");
    let vol = Volume::inline(&pod, "creds")
        .attr("source", &format!(r"\\{SMB_SERVER}\{SMB_SHARE}"))
        .attr("secretName", "smb-creds");
    let err = k
        .mount(node.host(), &pod, &vol)
        .await
        .expect_err("no API access");
    assert_eq!(
        err.csi_code(),
        Some(tonic::Code::FailedPrecondition),
        "{err}"
    );
    let other = fixtures::smb_volume("pv-after", "scratch", "after", None);
    step!(node, k.mount(node.host(), &pod, &other));
    step!(node, k.unmount(node.host(), &pod, &other));
    // kubelet still tears the failed inline volume down (NodeUnpublish of a never-published target is OK).
    step!(node, k.tear_down(node.host(), &pod, &vol));
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_host_failures_are_retried_by_kubelet_and_converge() {
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("flaky", "f-0");
    let smb = fixtures::smb_volume("pv-flaky", "flaky", "s", Some("flaky"));
    let lun = fixtures::iscsi_volume("pv-flaky-lun", "flaky", "l", 1);
    host.fail_nth(
        "NewSmbGlobalMapping",
        1,
        "New-SmbGlobalMapping : The network path was not found.",
    )
    .await
    .expect("fault");
    host.fail_nth(
        "ConnectTarget",
        1,
        "iSCSI login failed: connection timed out",
    )
    .await
    .expect("fault");
    for v in [&smb, &lun] {
        let t = step!(node, k.mount(host, &pod, v));
        step!(
            node,
            host.write_file(&format!(r"{t}\ok.txt"), "after a retry")
        );
    }
    let stage_attempts: Vec<_> = k
        .calls()
        .into_iter()
        .filter(|c| c.rpc == "NodeStageVolume")
        .collect();
    for v in [&smb, &lun] {
        let attempts: Vec<_> = stage_attempts
            .iter()
            .filter(|c| c.volume == v.handle)
            .collect();
        assert!(
            attempts.len() >= 2,
            "{}: kubelet retried: {attempts:?}",
            v.handle
        );
        assert!(attempts[0].error.is_some() && attempts.last().is_some_and(|c| c.error.is_none()));
    }
    for v in [&smb, &lun] {
        step!(node, k.unmount(host, &pod, v));
    }
    finish(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_makes_the_staging_directory_and_removes_its_mount_directories() {
    // kubelet creates `globalmount` itself before NodeStage (MkdirAllWithPathCheck) and removes the mount
    // directories (and vol_data.json, and their parents) after NodeUnpublish / NodeUnstage and after a final error.
    let node = node().await;
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("dirs", "d-0");
    let smb = fixtures::smb_volume("pv-dirs", "dirs", "d", Some("dirs"));
    let lun = fixtures::iscsi_volume("pv-dirs-lun", "dirs", "l", 0);
    for v in [&smb, &lun] {
        let since = step!(node, host.audit(0)).last().map_or(0, |e| e.seq);
        step!(node, k.mount(host, &pod, v));
        let staging = k.staging_path(v);
        assert_eq!(
            step!(node, host.lstat(&staging)).as_deref(),
            Some("link"),
            "{}: the staging path is the driver's link or mount point",
            v.handle
        );
        let rpcs: Vec<String> = step!(node, host.audit(since))
            .into_iter()
            .map(|e| e.rpc)
            .collect();
        if v.handle == smb.handle {
            // The SMB stage replaces kubelet's empty directory with its link (a non-forced `Rmdir` first, no
            // `PathExists`).
            assert_eq!(&rpcs[..2], ["Rmdir", "NewSmbGlobalMapping"], "{rpcs:?}");
        }
    }
    for v in [&smb, &lun] {
        step!(node, k.unmount(host, &pod, v));
        for path in [k.staging_path(v), k.publish_path(&pod, v)] {
            let dir = wincsi_e2e::kubelet::parent(&path).to_owned();
            assert_eq!(step!(node, host.lstat(&path)), None, "{path}");
            assert_eq!(step!(node, host.lstat(&dir)), None, "{dir}");
        }
    }
    // A final error of NodeStage: kubelet removes what it made.
    let wrong = fixtures::smb_volume("pv-dirs-wrong", "dirs", "w", None)
        .stage_secret("password", "not-the-password");
    let k1 = k.clone().with_retry(wincsi_e2e::kubelet::Retry {
        attempts: 1,
        ..Default::default()
    });
    let err = k1
        .mount(host, &pod, &wrong)
        .await
        .expect_err("logon failure");
    assert_eq!(
        err.csi_code(),
        Some(tonic::Code::FailedPrecondition),
        "{err}"
    );
    let staging = k.staging_path(&wrong);
    assert_eq!(step!(node, host.lstat(&staging)), None);
    assert_eq!(
        step!(node, host.lstat(wincsi_e2e::kubelet::parent(&staging))),
        None
    );
    finish(node).await;
}
