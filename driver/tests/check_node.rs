//! `check-node` against the simulated host, once per csi-proxy release it plays: every check runs, the answers
//! identify exactly the release played, every finding on a profile row confirms it (the self-test of the check
//! logic: a wrong expectation or a sim that drifted from its table fails here), the report validates against its
//! JSON Schema, and the host is left with nothing the run created (except the LUN's formatting, reported).
//! Also: the before-reboot / after-reboot phases across a simulated reboot, the refusals (a share already mapped,
//! a target already connected, a disk that is not empty, a scratch folder not ours), the dry run, and the cleanup
//! of an interrupted run from its ledger.

#![cfg(unix)]

use std::collections::BTreeSet;
use std::path::Path;

use proxy_client::{ProxyClient, Transport};
use serde_json::{Value, json};
use sim::{CsiProxyVersion, HostOptions, Scenario, SimHost};
use wincsi::backend::BackendInfo;
use wincsi::check::cli;
use wincsi::check::expect::Release;
use wincsi::check::options::CheckOptions;
use wincsi::config::HostBackend;
use wincsi::host::csi_proxy::CsiProxyHost;

const SMB_PASSWORD: &str = "Bob-Ch3ck-S3cret!";
const CHAP_SECRET: &str = "chap-secret-12";

fn scenario() -> Scenario {
    Scenario::from_json(
        &json!({
            "smb": {
                // A domain-joined node whose computer account share `machine` grants (issue 40 item 1, N46).
                "node_account": r"CORP\NODE1$",
                "servers": [{
                    "name": "fs1",
                    "accounts": [{"user": "bob", "password": SMB_PASSWORD, "domain": "CORP"}],
                    "shares": [{"name": "scratch", "files": {"dir/readme.txt": "the scratch share"}}]
                }, {
                    "name": "fs2",
                    "computers": [r"CORP\NODE1$"],
                    "shares": [{"name": "machine", "users": ["NODE1$"], "files": {"dir/readme.txt": "x"}},
                               {"name": "private", "users": ["someone"]}]
                }]
            },
            "iscsi": {"portals": [{
                "address": "192.0.2.10", "port": 3260,
                "targets": [
                    {"iqn": "iqn.2026-01.io.wincsi:scratch",
                     "chap": {"mode": "one_way", "username": "initiator1", "secret": CHAP_SECRET},
                     "luns": [{"lun": 3, "id": "scratch", "size": 2147483648u64, "partition_style": "raw"}]},
                    {"iqn": "iqn.2026-01.io.wincsi:used",
                     "luns": [{"lun": 0, "id": "used", "size": 1073741824u64, "partition_style": "gpt",
                               "partitions": [{"kind": "basic", "volume": {"filesystem": "NTFS",
                                               "files": {"keep.txt": "data"}}}]}]}
                ]
            }]}
        })
        .to_string(),
    )
    .expect("scenario")
}

fn releases() -> [(CsiProxyVersion, Release); 4] {
    [
        (CsiProxyVersion::V1_1_3, Release::V1_1_3),
        (CsiProxyVersion::V1_2_1, Release::V1_2_1),
        (CsiProxyVersion::V1_3_0, Release::V1_3_0),
        (CsiProxyVersion::Master, Release::Master),
    ]
}

/// A simulated node served on Unix sockets.
struct Node {
    sim: SimHost,
    _serve: sim::ServeHandle,
    socks: tempfile::TempDir,
    _sandbox: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Node {
    fn start(version: CsiProxyVersion) -> Node {
        let sandbox = tempfile::tempdir().expect("tmp");
        let socks = tempfile::tempdir().expect("tmp");
        let opts = HostOptions {
            csi_proxy_version: Some(version),
            ..HostOptions::default()
        };
        let sim = SimHost::new(&scenario(), sandbox.path(), opts).expect("sim");
        let serve = sim::serve_unix(sim.clone(), socks.path()).expect("serve");
        Node {
            sim,
            _serve: serve,
            socks,
            _sandbox: sandbox,
            work: tempfile::tempdir().expect("tmp"),
        }
    }

    fn options(&self, extra: &[&str]) -> CheckOptions {
        let socks = self.socks.path().display().to_string();
        let check_dir = self.work.path().display().to_string();
        let mut argv = vec![
            "wincsi-node",
            "check-node",
            "--csi-proxy-socket-dir",
            &socks,
            "--check-dir",
            &check_dir,
            "--call-timeout-secs",
            "30",
            // The simulated host's arrivals take 1 s at most (500 ms, then a 500 ms cache lag): 2 s of looks span them.
            "--disk-settle-time",
            "2s",
        ];
        argv.extend_from_slice(extra);
        let argv: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
        let chap = extra.contains(&"--iscsi-chap-username");
        let (config, args) = cli::parse(&argv).expect("parse");
        CheckOptions::resolve(&config, &args, &|k| match k {
            cli::SMB_PASSWORD_ENV => Some(SMB_PASSWORD.to_owned()),
            cli::CHAP_SECRET_ENV if chap => Some(CHAP_SECRET.to_owned()),
            _ => None,
        })
        .expect("options")
    }

    async fn run(&self, extra: &[&str]) -> Result<Value, String> {
        let host = CsiProxyHost::new(ProxyClient::new(Transport::UnixSockets {
            dir: self.socks.path().to_path_buf(),
        }));
        let info = BackendInfo {
            kind: HostBackend::CsiProxy,
            description: "the simulated host".to_owned(),
        };
        self.run_on(host, info, extra).await
    }

    /// The run on the native backend over the simulated host's Windows view (WMI classes and Win32 calls).
    async fn run_native(&self, extra: &[&str]) -> Result<Value, String> {
        let windows = std::sync::Arc::new(sim::wmi::WindowsView::new(self.sim.clone()));
        let host = wincsi::host::native::NativeHost::new(windows, Some(self.work.path()));
        let info = BackendInfo {
            kind: HostBackend::Native,
            description: "native over the simulated host's Windows view".to_owned(),
        };
        self.run_on(host, info, extra).await
    }

    async fn run_on<H: wincsi::host::Host>(
        &self,
        host: H,
        info: BackendInfo,
        extra: &[&str],
    ) -> Result<Value, String> {
        let opts = self.options(extra);
        let report = wincsi::check::run(host, info, &opts).await?;
        let value = serde_json::to_value(&report).expect("json");
        if let Ok(dir) = std::env::var("WINCSI_CHECK_TEST_DUMP") {
            let name = format!("{dir}/{}-{}.json", report.phase, report.started_unix_ms);
            std::fs::write(name, serde_json::to_string_pretty(&value).expect("text"))
                .expect("dump");
        }
        assert_valid(&value);
        Ok(value)
    }

    fn ledger(&self) -> &Path {
        self.work.path()
    }
}

const SMB: &[&str] = &[
    "--smb-share",
    r"\\fs1\scratch\dir",
    "--smb-username",
    r"CORP\bob",
];
const ISCSI: &[&str] = &[
    "--iscsi-portal",
    "192.0.2.10:3260",
    "--iscsi-iqn",
    "iqn.2026-01.io.wincsi:scratch",
    "--iscsi-lun",
    "3",
    "--iscsi-chap-username",
    "initiator1",
];

fn all_targets() -> Vec<&'static str> {
    [SMB, ISCSI].concat()
}

/// The report validates against the schema the binary prints, closed: no undocumented field.
fn assert_valid(report: &Value) {
    let schema = wincsi::check::report::strict_schema();
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    let errors: Vec<String> = validator
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "schema violations:\n{}",
        errors.join("\n")
    );
}

fn checks(report: &Value) -> &Vec<Value> {
    report["checks"].as_array().expect("checks")
}

fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    checks(report)
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}"))
}

fn findings(report: &Value) -> Vec<&Value> {
    checks(report)
        .iter()
        .flat_map(|c| c["findings"].as_array().expect("findings"))
        .collect()
}

fn row_ids(report: &Value) -> BTreeSet<String> {
    findings(report)
        .iter()
        .filter(|f| f["ref"]["kind"] == "row")
        .map(|f| f["ref"]["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Check 27's measurement: the scratch disk's volume, listed again after the disk went offline and online (the
/// simulated host's arrival delays it), is the same volume.
fn assert_volume_came_back(report: &Value) {
    let c = check(report, "iscsi_volumes_after_online");
    let back = &c["observations"]["volumes_after_online"]["value"];
    assert_eq!(back["same_volume"], true, "{c}");
    assert!(
        findings(report)
            .iter()
            .any(|f| f["ref"]["kind"] == "node-check" && f["ref"]["id"] == 27),
        "{c}"
    );
}

/// Every check ran, nothing contradicts, the release played is the one identified, cleanup is complete.
fn assert_self_test(report: &Value, release: Release) {
    let name = serde_json::to_value(release).expect("release");
    let text = serde_json::to_string_pretty(report).expect("text");
    for c in checks(report) {
        assert_eq!(c["status"], "ran", "{} did not run:\n{text}", c["id"]);
    }
    let contradicting: Vec<String> = findings(report)
        .iter()
        .filter(|f| f["verdict"] == "contradicts" || f["verdict"] == "inconclusive")
        .map(|f| format!("{} ({})", f["ref"], f["observation"]))
        .collect();
    assert!(
        contradicting.is_empty(),
        "{release:?}: {contradicting:?}\n{text}"
    );
    assert_eq!(report["release"]["identified"], json!([name]), "{text}");
    assert_volume_came_back(report);
    assert_eq!(report["cleanup"]["complete"], true, "{text}");
    assert_eq!(report["summary"]["findings"]["contradicts"], 0);
    assert!(
        report["summary"]["findings"]["confirms"]
            .as_u64()
            .expect("n")
            >= 20,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_profile_is_identified_and_confirms_its_rows() {
    for (version, release) in releases() {
        let node = Node::start(version);
        let report = node.run(&all_targets()).await.expect("run");
        assert_self_test(&report, release);
        // Judged against the release the answers identify (no claim given).
        assert_eq!(report["release"]["claimed"], Value::Null);
        assert_eq!(
            report["release"]["judged_against"],
            report["release"]["identified"]
        );
        // Nothing of the run is left on the host but the LUN's formatting (and the portal, never removed).
        let inv = node.sim.invariants();
        assert!(inv.ok(), "{release:?}: {inv:?}");
        let left: Vec<&str> = report["cleanup"]["left"]
            .as_array()
            .expect("left")
            .iter()
            .map(|l| l["object"].as_str().expect("object"))
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(
            left.iter().any(|l| l.starts_with("NTFS volume")),
            "{left:?}"
        );
        assert!(
            left.iter().any(|l| l.starts_with("iSCSI target portal")),
            "{left:?}"
        );
        assert!(
            !node.ledger().join("ledger.json").exists(),
            "the ledger goes with the objects"
        );
        // The rows the run speaks to exist in the simulator's table.
        let known: BTreeSet<&str> = sim::profile::ROWS.iter().map(|r| r.id).collect();
        for id in row_ids(&report) {
            assert!(known.contains(id.as_str()), "unknown row {id}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_native_backend_runs_every_check_and_leaves_nothing() {
    // The workflow repeats check-node with --host-backend native on real Windows; here the same run goes through
    // the native backend over the simulated host's Windows view. csi-proxy's profile rows do not apply to it; its
    // own items (native refs) and the real-node items must not be contradicted, and cleanup must be complete.
    let node = Node::start(CsiProxyVersion::V1_1_3);
    let report = node.run_native(&all_targets()).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    assert_eq!(report["node"]["backend"], "native", "{text}");
    for c in checks(&report) {
        assert_eq!(c["status"], "ran", "{} did not run:\n{text}", c["id"]);
    }
    assert_volume_came_back(&report);
    // Issue 41: MPIO's claim and the node's sessions, read before the iSCSI checks log in (N33, N36).
    let room = &check(&report, "iscsi_node")["observations"];
    assert_eq!(room["mpio_claim"]["value"], "NotInstalled", "{text}");
    assert_eq!(room["iscsi_sessions"]["value"], 0, "{text}");
    // The share's space through the link (issue 40 item 4), recorded for native item N45.
    // SMB client options on the scenario's default build, Windows Server 2019 (issue 40 item 2, N47): asked
    // requirePrivacy only, and requireIntegrity (the first option 2019 lacks) refused before any mapping.
    let options = &check(&report, "smb_options")["smb_options"];
    assert_eq!(options["asked"], json!({"requirePrivacy": true}), "{text}");
    assert_eq!(
        options["reported"],
        json!({"requirePrivacy": true}),
        "{text}"
    );
    assert!(
        options["missing"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("requireIntegrity needs build 20348")),
        "{text}"
    );
    let space = &check(&report, "smb_link_form")["observations"]["path_space"]["value"];
    assert!(
        space["total"].as_u64().is_some_and(|t| t > 0),
        "{space}\n{text}"
    );
    let contradicting: Vec<String> = findings(&report)
        .iter()
        .filter(|f| f["verdict"] == "contradicts")
        .map(|f| format!("{} ({})", f["ref"], f["observation"]))
        .collect();
    assert!(contradicting.is_empty(), "{contradicting:?}\n{text}");
    for f in findings(&report) {
        if f["ref"]["kind"] == "row" {
            assert_eq!(f["verdict"], "not_applicable", "{f}\n{text}");
        }
    }
    assert!(
        findings(&report)
            .iter()
            .any(|f| f["ref"]["kind"] == "native" && f["verdict"] == "recorded"),
        "the native items are recorded for the real-node table\n{text}"
    );
    assert_eq!(report["cleanup"]["complete"], true, "{text}");
    let inv = node.sim.invariants();
    assert!(inv.ok(), "{inv:?}");
    assert_eq!(
        node.sim.with_state(|s| s.mappings().len()),
        0,
        "the check's mapping is gone\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_release_is_judged_and_a_wrong_claim_shows() {
    let node = Node::start(CsiProxyVersion::V1_3_0);
    let report = node
        .run(&[&all_targets()[..], &["--csi-proxy-release", "v1.3.0"]].concat())
        .await
        .expect("run");
    assert_eq!(report["release"]["claim_consistent"], true);
    assert_self_test(&report, Release::V1_3_0);

    let node = Node::start(CsiProxyVersion::V1_3_0);
    let report = node
        .run(&[&all_targets()[..], &["--csi-proxy-release", "v1.1.3"]].concat())
        .await
        .expect("run");
    assert_eq!(report["release"]["claim_consistent"], false);
    assert_eq!(report["release"]["judged_against"], json!(["v1.1.3"]));
    let contradicted: BTreeSet<&str> = findings(&report)
        .iter()
        .filter(|f| f["verdict"] == "contradicts" && f["ref"]["kind"] == "row")
        .map(|f| f["ref"]["id"].as_str().expect("id"))
        .collect();
    for row in [
        "connect_target_connected",
        "mount_volume_again",
        "not_found_texts",
        "resize_skip",
    ] {
        assert!(
            contradicted.contains(row),
            "{row} not contradicted: {contradicted:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_checks_alone_need_no_share_or_target() {
    let node = Node::start(CsiProxyVersion::V1_1_3);
    let report = node.run(&[]).await.expect("run");
    assert_eq!(check(&report, "smb")["status"], "skipped");
    assert_eq!(check(&report, "iscsi")["status"], "skipped");
    assert_eq!(check(&report, "is_symlink_one_hop")["status"], "ran");
    assert_eq!(
        report["release"]["identified"],
        json!(["v1.1.3", "v1.2.1"]),
        "without a LUN the two PowerShell releases look alike"
    );
    assert_eq!(report["cleanup"]["complete"], true);
    assert!(node.sim.invariants().ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_phases_keep_fixtures_then_check_and_remove_them() {
    for (version, release) in releases() {
        let node = Node::start(version);
        let before = node
            .run(&[&all_targets()[..], &["--phase", "before-reboot"]].concat())
            .await
            .expect("before");
        assert_self_test(&before, release);
        let kept: Vec<&str> = before["cleanup"]["left"]
            .as_array()
            .expect("left")
            .iter()
            .filter(|l| {
                l["reason"]
                    .as_str()
                    .expect("reason")
                    .contains("after-reboot")
            })
            .map(|l| l["object"].as_str().expect("o"))
            .collect();
        assert_eq!(kept.len(), 4, "mapping, link, login, mount: {kept:?}");
        assert!(node.ledger().join("ledger.json").exists());
        // A full run now is refused: the fixtures are not cleaned up by accident.
        let refused = node.run(&all_targets()).await.expect_err("refused");
        assert!(refused.contains("after-reboot"), "{refused}");

        node.sim.reboot().expect("reboot");
        let after = node
            .run(&[&all_targets()[..], &["--phase", "after-reboot"]].concat())
            .await
            .expect("after");
        let text = serde_json::to_string_pretty(&after).expect("text");
        for id in ["smb_after_reboot", "iscsi_after_reboot"] {
            assert_eq!(check(&after, id)["status"], "ran", "{text}");
        }
        let bad: Vec<String> = findings(&after)
            .iter()
            .filter(|f| f["verdict"] == "contradicts" || f["verdict"] == "inconclusive")
            .map(|f| format!("{} ({})", f["ref"], f["observation"]))
            .collect();
        assert!(bad.is_empty(), "{release:?}: {bad:?}\n{text}");
        let rows = row_ids(&after);
        for row in [
            "smb_disconnected_recreate",
            "unc_errors",
            "dangling_mount_point_volume_id",
            "mkdir_dangling_mount_point",
        ] {
            assert!(rows.contains(row), "{row} missing: {rows:?}");
        }
        assert_eq!(after["cleanup"]["complete"], true, "{text}");
        assert!(node.sim.invariants().ok(), "{:?}", node.sim.invariants());
        assert!(!node.ledger().join("ledger.json").exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_what_it_did_not_create() {
    // A share that is already mapped: the probe with a wrong password succeeds (csi-proxy reuses the mapping), so
    // the SMB checks stop and the mapping stays.
    let node = Node::start(CsiProxyVersion::V1_1_3);
    let client = ProxyClient::new(Transport::UnixSockets {
        dir: node.socks.path().to_path_buf(),
    });
    client
        .smb()
        .new_global_mapping(
            r"\\fs1\scratch",
            None,
            &proxy_client::SmbCredentials::new(r"CORP\bob", SMB_PASSWORD),
        )
        .await
        .expect("someone else's mapping");
    let report = node.run(SMB).await.expect("run");
    assert_eq!(check(&report, "smb_unmapped_probe")["status"], "failed");
    assert!(checks(&report).iter().all(|c| c["id"] != "smb_link_form"));
    let mappings = node.sim.with_state(|s| s.mappings().len());
    assert_eq!(mappings, 1, "the existing mapping is untouched");

    // A target that already has a session on the node: the iSCSI checks stop before logging in.
    let node = Node::start(CsiProxyVersion::V1_3_0);
    let client = ProxyClient::new(Transport::UnixSockets {
        dir: node.socks.path().to_path_buf(),
    });
    let portal = proxy_client::Portal::new("192.0.2.10".to_owned(), 3260);
    client
        .iscsi()
        .add_target_portal(&portal)
        .await
        .expect("portal");
    client
        .iscsi()
        .connect_target(
            &portal,
            "iqn.2026-01.io.wincsi:scratch",
            &proxy_client::ChapAuth::OneWay {
                username: "initiator1".to_owned(),
                secret: proxy_client::Secret::new(CHAP_SECRET),
            },
        )
        .await
        .expect("someone else's session");
    // A session someone else made earlier: its disk has arrived (arrival is asynchronous by default).
    node.sim
        .with_state_mut(|s| s.complete_arrivals())
        .expect("arrivals");
    let report = node.run(ISCSI).await.expect("run");
    assert_eq!(check(&report, "iscsi_unconnected")["status"], "failed");
    assert_eq!(
        node.sim.with_state(|s| s.sessions().len()),
        1,
        "the session stays"
    );

    // A LUN whose disk has a volume: refused before anything destructive, the login undone.
    let node = Node::start(CsiProxyVersion::V1_2_1);
    let used = [
        "--iscsi-portal",
        "192.0.2.10",
        "--iscsi-iqn",
        "iqn.2026-01.io.wincsi:used",
        "--iscsi-lun",
        "0",
    ];
    let report = node.run(&used).await.expect("run");
    assert_eq!(check(&report, "iscsi_scratch_disk")["status"], "failed");
    assert!(checks(&report).iter().all(|c| c["id"] != "iscsi_partition"));
    assert_eq!(report["cleanup"]["complete"], true);
    assert!(node.sim.invariants().ok(), "{:?}", node.sim.invariants());
    assert!(node.sim.data_loss_events().is_empty());

    // A scratch folder that is not this tool's.
    let node = Node::start(CsiProxyVersion::V1_1_3);
    node.sim
        .with_state(|s| {
            s.write_file(
                r"C:\var\lib\kubelet\plugins\wincsi.csi.io\check-node\scratch\mine.txt",
                b"x",
            )
        })
        .expect("write");
    let report = node.run(&[]).await.expect("run");
    assert_eq!(check(&report, "scratch_tree")["status"], "failed");
    assert_eq!(check(&report, "stopped")["status"], "failed");
    assert!(
        report["cleanup"]["removed"]
            .as_array()
            .expect("removed")
            .is_empty()
    );
    assert!(node.sim.with_state(|s| {
        s.read_file(r"C:\var\lib\kubelet\plugins\wincsi.csi.io\check-node\scratch\mine.txt")
            .is_ok()
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_touches_nothing_and_cleanup_phase_removes_leftovers() {
    let node = Node::start(CsiProxyVersion::Master);
    node.sim.clear_audit();
    let report = node
        .run(&[&all_targets()[..], &["--dry-run"]].concat())
        .await
        .expect("dry run");
    assert_eq!(report["dry_run"], true);
    assert!(checks(&report).is_empty());
    let plan = serde_json::to_string(&report["plan"]).expect("plan");
    for needle in [
        "NewSmbGlobalMapping",
        "PartitionDisk",
        "WRONG password",
        "cannot be undone",
    ] {
        assert!(
            plan.contains(needle),
            "{needle} missing from the plan: {plan}"
        );
    }
    assert!(node.sim.audit(0).is_empty(), "a dry run makes no host call");

    // An interrupted before-reboot run's fixtures are removed by --phase cleanup.
    let before = node
        .run(&[&all_targets()[..], &["--phase", "before-reboot"]].concat())
        .await
        .expect("before");
    assert_eq!(before["cleanup"]["complete"], true);
    assert!(!node.sim.invariants().ok(), "fixtures are on the host");
    let cleaned = node
        .run(&[&all_targets()[..], &["--phase", "cleanup"]].concat())
        .await
        .expect("cleanup");
    assert_eq!(cleaned["cleanup"]["complete"], true, "{cleaned}");
    assert!(node.sim.invariants().ok(), "{:?}", node.sim.invariants());
    assert!(!node.ledger().join("ledger.json").exists());
}

/// A CreateSymlink that answers OK but leaves no link (as csi-proxy's did under Wine) proves nothing about links:
/// the check must not confirm `create_symlink_kind` from a Mkdir through a "link" that is a plain path, and says
/// why instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_that_was_never_created_confirms_nothing() {
    let node = Node::start(CsiProxyVersion::V1_1_3);
    let inproc = sim::inproc::InProcess::new(node.sim.clone());
    let dir_link = r"C:\var\lib\kubelet\plugins\wincsi.csi.io\check-node\scratch\links\dir-link";
    inproc
        .after("CreateSymlink", move |s| {
            if s.lstat_kind(dir_link).ok().flatten() == Some("link") {
                s.rmdir(dir_link, false)
                    .expect("remove the link behind the host's back");
            }
        })
        .expect("script");
    let host = CsiProxyHost::new(inproc.client());
    let info = BackendInfo {
        kind: HostBackend::CsiProxy,
        description: "the simulated host, in process".to_owned(),
    };
    let report = node.run_on(host, info, &[]).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    let kind = check(&report, "create_symlink_kind");
    assert_eq!(kind["status"], "failed", "{text}");
    assert!(
        kind["note"]
            .as_str()
            .is_some_and(|n| n.contains(dir_link) && n.contains("nothing is claimed")),
        "{text}"
    );
    assert!(
        kind["observations"].get("mkdir_through_dir_link").is_none(),
        "{text}"
    );
    assert!(
        kind["observations"].get("dir_link_is_link").is_some(),
        "{text}"
    );
    assert!(
        !findings(&report)
            .iter()
            .any(|f| f["ref"]["id"] == "create_symlink_kind" && f["verdict"] == "confirms"),
        "{text}"
    );
    // The rest of the run still happened and cleaned up.
    assert_eq!(
        check(&report, "is_symlink_one_hop")["status"],
        "ran",
        "{text}"
    );
    assert_eq!(report["cleanup"]["complete"], true, "{text}");
}

/// `--iscsi-late-iqn`: a target the storage side created after the node added the portal (here: the portal added at
/// boot, then `add_target`). On every release the node does not list it after `AddTargetPortal` again (the
/// simulator's default answer for the PowerShell era, unverified), and lists it after the refresh the driver would
/// make (csi-proxy: `RemoveTargetPortal` + `AddTargetPortal`; native: `MSFT_iSCSITargetPortal.Update`); the row
/// `discovery_refresh` is confirmed, nothing contradicts, and the rest of the run is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discovery_check_sees_a_target_created_after_the_portal() {
    const LATE: &str = "iqn.2026-01.io.wincsi:late";
    let spec: sim::TargetSpec =
        serde_json::from_value(json!({"iqn": LATE, "luns": [{"lun": 0, "size": 1073741824u64}]}))
            .expect("target");
    let late_args = [all_targets(), vec!["--iscsi-late-iqn", LATE]].concat();
    let mut runs = Vec::new();
    for (version, release) in releases() {
        runs.push((Some(release), version));
    }
    runs.push((None, CsiProxyVersion::V1_1_3));
    for (release, version) in runs {
        let node = Node::start(version);
        node.sim
            .with_state_mut(|s| {
                s.add_target_portal("192.0.2.10", 3260)?;
                s.add_target("192.0.2.10", 3260, &spec)
            })
            .expect("portal, then the late target");
        let report = match release {
            Some(_) => node.run(&late_args).await,
            None => node.run_native(&late_args).await,
        }
        .expect("run");
        let text = serde_json::to_string_pretty(&report).expect("text");
        let c = check(&report, "iscsi_discovery_refresh");
        assert_eq!(c["status"], "ran", "{release:?}\n{text}");
        let obs = &c["observations"];
        assert_eq!(
            obs["listed_without_refresh"]["value"], false,
            "{release:?}: {obs}"
        );
        assert_eq!(
            obs["listed_after_refresh"]["value"], true,
            "{release:?}: {obs}"
        );
        match release {
            Some(release) => {
                assert!(obs["remove_target_portal"]["error"].is_null(), "{obs}");
                assert_self_test(&report, release);
                let rows: Vec<&Value> = c["findings"]
                    .as_array()
                    .expect("findings")
                    .iter()
                    .filter(|f| f["ref"]["id"] == "discovery_refresh")
                    .collect();
                assert!(
                    rows.iter().any(|f| f["verdict"] == "confirms"),
                    "{release:?}: {rows:?}"
                );
            }
            None => {
                assert!(obs["refresh_target_portal"]["error"].is_null(), "{obs}");
                assert!(obs.get("remove_target_portal").is_none(), "{obs}");
            }
        }
        assert_eq!(report["cleanup"]["complete"], true, "{text}");
    }
}

/// Through csi-proxy the discovery check removes the portal only when no target it lists has a session on the node:
/// with another target of the portal logged in (its disk present), the check is skipped, no `RemoveTargetPortal` is
/// sent, and the session stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discovery_check_never_removes_a_portal_that_carries_a_session() {
    const LATE: &str = "iqn.2026-01.io.wincsi:late";
    let spec: sim::TargetSpec =
        serde_json::from_value(json!({"iqn": LATE, "luns": [{"lun": 0, "size": 1073741824u64}]}))
            .expect("target");
    let late_args = [all_targets(), vec!["--iscsi-late-iqn", LATE]].concat();
    for (version, release) in releases() {
        let node = Node::start(version);
        let client = ProxyClient::new(Transport::UnixSockets {
            dir: node.socks.path().to_path_buf(),
        });
        let portal = proxy_client::Portal::new("192.0.2.10".to_owned(), 3260);
        client
            .iscsi()
            .add_target_portal(&portal)
            .await
            .expect("portal");
        client
            .iscsi()
            .connect_target(
                &portal,
                "iqn.2026-01.io.wincsi:used",
                &proxy_client::ChapAuth::None,
            )
            .await
            .expect("another volume's session");
        node.sim
            .with_state_mut(|s| s.complete_arrivals())
            .expect("arrivals");
        node.sim
            .with_state_mut(|s| s.add_target("192.0.2.10", 3260, &spec))
            .expect("the late target");
        let report = node.run(&late_args).await.expect("run");
        let c = check(&report, "iscsi_discovery_refresh");
        assert_eq!(c["status"], "skipped", "{release:?}: {c}");
        assert!(
            c["note"]
                .as_str()
                .is_some_and(|n| n.contains("wincsi:used")),
            "{c}"
        );
        assert!(
            node.sim
                .audit(0)
                .iter()
                .all(|e| e.rpc != "RemoveTargetPortal"),
            "{release:?}: the portal was removed"
        );
        assert_eq!(
            node.sim.with_state(|s| s.sessions().len()),
            1,
            "{release:?}: the session stays"
        );
        assert_eq!(report["cleanup"]["complete"], true, "{release:?}");
    }
}

/// The `smb_options` check of a run (issue 40 item 2: native items N47, N48).
fn smb_options(report: &Value) -> (&Value, &Value) {
    let c = check(report, "smb_options");
    (c, &c["smb_options"])
}

/// Nothing of the run is left: no mapping, the ledger gone, cleanup complete.
fn assert_nothing_left(node: &Node, report: &Value) {
    let text = serde_json::to_string_pretty(report).expect("text");
    assert_eq!(report["cleanup"]["complete"], true, "{text}");
    assert_eq!(
        node.sim.with_state(|s| s.mappings().len()),
        0,
        "no mapping left\n{text}"
    );
    assert!(node.sim.invariants().ok(), "{:?}", node.sim.invariants());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smb_options_on_windows_server_2025_map_read_back_and_refuse_a_stronger_stage() {
    let node = Node::start(CsiProxyVersion::V1_1_3);
    node.sim.with_state_mut(|s| s.set_windows_build(26100));
    let report = node.run_native(SMB).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    assert_eq!(report["node"]["windows_build"], 26100, "{text}");
    let (c, so) = smb_options(&report);
    assert_eq!(c["status"], "ran", "{text}");
    assert_eq!(
        c["observations"]["map_with_options"]["error"],
        Value::Null,
        "{text}"
    );
    assert_eq!(c["observations"]["is_symlink"]["value"], true, "{text}");
    assert_eq!(so["windows_build"], 26100);
    assert_eq!(so["source"], "default");
    assert_eq!(
        so["asked"],
        json!({"requireIntegrity": true, "useWriteThrough": true, "compressNetworkTraffic": true,
               "transportType": "tcp"}),
        "{text}"
    );
    // What the instance reports, as created (privacy: the driver's --smb-require-privacy default).
    assert_eq!(
        so["reported"],
        json!({"requirePrivacy": true, "requireIntegrity": true, "useWriteThrough": true,
               "compressNetworkTraffic": true, "transportType": "tcp", "blockNTLM": false}),
        "{text}"
    );
    assert_eq!(so["missing"], Value::Null, "the build has every option");
    let stronger = so["stronger"]["message"].as_str().expect("refused");
    assert!(
        stronger.contains("weaker client options")
            && stronger.contains("blockNTLM: asked true")
            && stronger.contains("transportType: asked quic"),
        "{stronger}"
    );
    let refusal = &c["observations"]["stronger_than_mapping"]["error"];
    assert_eq!(
        (&refusal["kind"], &refusal["classification"]),
        (&json!("Other"), &json!("NotSatisfiable")),
        "{text}"
    );
    // The unstage is shown complete.
    assert_eq!(
        c["observations"]["link_exists_after"]["value"], false,
        "{text}"
    );
    assert_eq!(
        c["observations"]["remove_again"]["error"]["kind"], "NotFound",
        "{text}"
    );
    for f in c["findings"].as_array().expect("findings") {
        assert_eq!(f["ref"]["kind"], "native", "{f}");
        assert_eq!(f["verdict"], "recorded", "{f}");
    }
    assert_nothing_left(&node, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smb_options_from_the_flag_on_windows_server_2022_and_the_option_it_lacks() {
    let node = Node::start(CsiProxyVersion::V1_1_3);
    node.sim.with_state_mut(|s| s.set_windows_build(20348));
    let args = [
        SMB,
        &[
            "--smb-options",
            "requireIntegrity=false, UseWriteThrough=TRUE",
        ],
    ]
    .concat();
    let report = node.run_native(&args).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    let (c, so) = smb_options(&report);
    assert_eq!(c["status"], "ran", "{text}");
    assert_eq!(so["source"], "flag");
    assert_eq!(
        so["asked"],
        json!({"requireIntegrity": false, "useWriteThrough": true})
    );
    // 2025's properties are not on a 2022 instance, and not asked of it.
    assert_eq!(
        so["reported"],
        json!({"requirePrivacy": true, "requireIntegrity": false, "useWriteThrough": true}),
        "{text}"
    );
    let missing = so["missing"]["message"].as_str().expect("refused");
    assert!(
        missing.contains("compressNetworkTraffic needs build 26100")
            && missing.contains("is 20348"),
        "{missing}"
    );
    assert_eq!(
        so["missing"]["asked"],
        json!({"compressNetworkTraffic": true})
    );
    let stronger = so["stronger"]["message"].as_str().expect("refused");
    assert!(
        stronger.contains("requireIntegrity: asked true, the mapping's RequireIntegrity is false"),
        "{stronger}"
    );
    assert_nothing_left(&node, &report);

    // Asking, by the flag, an option the build lacks: refused before anything is made, and recorded.
    let node = Node::start(CsiProxyVersion::V1_1_3);
    node.sim.with_state_mut(|s| s.set_windows_build(20348));
    let args = [SMB, &["--smb-options", "blockNTLM=true"]].concat();
    let report = node.run_native(&args).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    let (c, so) = smb_options(&report);
    assert_eq!(c["status"], "ran", "{text}");
    let map = &c["observations"]["map_with_options"]["error"];
    assert_eq!(map["classification"], "NotSatisfiable", "{text}");
    assert!(
        map["message"]
            .as_str()
            .is_some_and(|m| m.contains("blockNTLM needs build 26100")),
        "{text}"
    );
    assert_eq!(so["reported"], json!({}), "{text}");
    let removed = report["cleanup"]["removed"].to_string();
    assert!(
        !removed.contains("smb-options"),
        "nothing was made, nothing to remove: {removed}"
    );
    assert_nothing_left(&node, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smb_options_on_csi_proxy_mode_record_the_drivers_refusal() {
    let node = Node::start(CsiProxyVersion::V1_2_1);
    let report = node.run(SMB).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    assert_eq!(report["node"]["windows_build"], Value::Null, "{text}");
    let (c, so) = smb_options(&report);
    assert_eq!(c["status"], "ran", "{text}");
    let refused = &c["observations"]["refused_on_csi_proxy"];
    assert_eq!(refused["op"], "NodeStageVolume");
    assert_eq!(
        refused["error"]["classification"], "FailedPrecondition",
        "{text}"
    );
    let message = refused["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("mode: hostProcess") && message.contains("requirePrivacy"),
        "{message}"
    );
    assert_eq!(
        (&so["missing"], &so["stronger"]),
        (&Value::Null, &Value::Null)
    );
    assert!(
        !c["observations"]
            .as_object()
            .expect("observations")
            .contains_key("map_with_options"),
        "no host call on csiProxy mode\n{text}"
    );
    assert_nothing_left(&node, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machine_account_check_is_opt_in_maps_as_the_node_and_leaves_nothing() {
    let node = Node::start(CsiProxyVersion::V1_1_3);
    // Not asked: not run.
    let report = node.run_native(&[]).await.expect("run");
    assert!(
        checks(&report)
            .iter()
            .all(|c| c["id"] != "smb_machine_account")
    );

    let machine = ["--smb-machine-share", r"\\fs2\machine\dir"];
    let report = node.run_native(&machine).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    let c = check(&report, "smb_machine_account");
    assert_eq!(c["status"], "ran", "{text}");
    let obs = &c["observations"];
    assert_eq!(
        obs["unmapped_probe"]["error"]["kind"], "LogonFailure",
        "{text}"
    );
    assert_eq!(obs["map_as_machine"]["error"], Value::Null, "{text}");
    assert_eq!(obs["is_symlink"]["value"], true, "{text}");
    assert_eq!(obs["mkdir_through_link"]["error"], Value::Null, "{text}");
    assert_eq!(obs["link_exists_after"]["value"], false, "{text}");
    assert_eq!(obs["remove_again"]["error"]["kind"], "NotFound", "{text}");
    assert!(
        c["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["ref"] == json!({"kind": "native", "id": 46})),
        "{text}"
    );
    assert_nothing_left(&node, &report);

    // A share that does not grant the computer account: the mapping's refusal recorded, nothing left.
    let private = ["--smb-machine-share", r"\\fs2\private"];
    let report = node.run_native(&private).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    let c = check(&report, "smb_machine_account");
    assert_eq!(c["status"], "failed", "{text}");
    assert!(
        c["observations"]["map_as_machine"]["error"].is_object(),
        "{text}"
    );
    assert_nothing_left(&node, &report);

    // csiProxy mode: the driver's refusal, no host call.
    let report = node.run(&machine).await.expect("run");
    let text = serde_json::to_string_pretty(&report).expect("text");
    let c = check(&report, "smb_machine_account");
    assert_eq!(c["status"], "ran", "{text}");
    let refused = &c["observations"]["refused_on_csi_proxy"]["error"];
    assert_eq!(refused["classification"], "FailedPrecondition", "{text}");
    assert!(
        refused["message"].as_str().is_some_and(
            |m| m.contains("authentication: machine") && m.contains("mode: hostProcess")
        ),
        "{text}"
    );
    assert_eq!(
        c["observations"].as_object().expect("obs").len(),
        1,
        "{text}"
    );
    assert_nothing_left(&node, &report);
}
