//! One test per row of [`ROWS`] (`row_<id>`), each checking the simulated host against the row for all four
//! releases; plus the checks that keep `sim/README.md` and the table identical and every row tested.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use super::*;
use crate::profile::CsiProxyVersion::{Master, V1_1_3, V1_2_1, V1_3_0};
use crate::scenario::{Scenario, TargetChap};
use crate::secret::Secret;
use crate::state::{AuthType, HostOptions, MappingStatus, State};

const K: &str = r"C:\var\lib\kubelet";
const PORTAL: &str = "192.0.2.10";
const DATA: &str = "iqn.2026-01.io.wincsi:data";
/// Spelled with capitals, as some arrays report their IQNs.
const EMPTY: &str = "iqn.2026-01.io.wincsi:Empty";
const SLOW: &str = "iqn.2026-01.io.wincsi:slow";
const SRV: &str = r"\\fs1.corp.example";

const SCENARIO: &str = r#"{
  "host": { "directories": ["C:\\var\\lib\\kubelet\\plugins", "C:\\var\\lib\\kubelet\\pods"] },
  "disks": [ { "id": "os", "size": 137438953472, "partition_style": "gpt",
               "partitions": [ { "kind": "basic", "volume": { "filesystem": "NTFS", "drive_letter": "C" } } ] } ],
  "smb": { "servers": [
    { "name": "fs1.corp.example",
      "accounts": [ { "user": "alice", "password": "alice-password-1", "domain": "CORP" },
                    { "user": "bob", "password": "bob-password-1", "domain": "CORP" } ],
      "shares": [ { "name": "data", "files": { "hello.txt": "hi" } }, { "name": "pub", "guest": true } ] },
    { "name": "legacy", "encryption": false,
      "accounts": [ { "user": "alice", "password": "alice-password-1" } ], "shares": [ { "name": "old" } ] }
  ] },
  "iscsi": { "portals": [ { "address": "192.0.2.10", "targets": [
    { "iqn": "iqn.2026-01.io.wincsi:data",
      "chap": { "mode": "one_way", "username": "initiator1", "secret": "chap-secret-12" },
      "luns": [ { "lun": 0, "id": "data", "size": 2147483648, "partition_style": "gpt",
                  "partitions": [ { "kind": "reserved", "size": 16777216 },
                                  { "kind": "basic", "volume": { "filesystem": "NTFS", "files": { "db.bin": "precious" } } } ] } ] },
    { "iqn": "iqn.2026-01.io.wincsi:Empty", "luns": [ { "lun": 0, "id": "empty", "size": 1073741824 } ] },
    { "iqn": "iqn.2026-01.io.wincsi:slow",
      "luns": [ { "lun": 0, "id": "slow", "size": 1073741824, "arrival_delay_ms": 1000, "volume_arrival_delay_ms": 500,
                  "partition_style": "gpt", "partitions": [ { "kind": "basic", "volume": { "filesystem": "NTFS" } } ] } ] }
  ] } ] }
}"#;

/// Set to run this suite on emulated links (the fallback used under Wine): CI runs it both ways.
const EMULATE_ENV: &str = "WINCSI_SIM_TEST_EMULATED_LINKS";

struct Fx {
    st: State,
    _dir: tempfile::TempDir,
}

impl Deref for Fx {
    type Target = State;
    fn deref(&self) -> &State {
        &self.st
    }
}

impl DerefMut for Fx {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.st
    }
}

fn host_with(v: CsiProxyVersion, json: &str, f: impl FnOnce(&mut Scenario)) -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let mut sc = Scenario::from_json(json).unwrap();
    // The rows are about the releases, not about arrival (row `disk_arrival` and its neighbours set their own).
    sc.host.behaviour.arrival = crate::Arrival::INSTANT;
    f(&mut sc);
    let opts = HostOptions {
        csi_proxy_version: Some(v),
        emulate_links: std::env::var_os(EMULATE_ENV).is_some(),
        ..HostOptions::default()
    };
    let st = State::new(&sc, dir.path(), &opts).unwrap();
    Fx { st, _dir: dir }
}

fn host(v: CsiProxyVersion) -> Fx {
    host_with(v, SCENARIO, |_| {})
}

fn host_err<T: std::fmt::Debug>(r: crate::Result<T>) -> String {
    match r {
        Err(crate::Error::Host(m)) => m,
        other => panic!("expected a host error, got {other:?}"),
    }
}

fn secret(s: &str) -> Secret {
    Secret::new(s)
}

fn p(rel: &str) -> String {
    format!(r"{K}\{rel}")
}

fn ps(v: CsiProxyVersion) -> bool {
    matches!(v, V1_1_3 | V1_2_1)
}

/// Adds the portal and logs in to `iqn` with the right credentials.
fn login(f: &mut Fx, iqn: &str) -> crate::Result<()> {
    f.add_target_portal(PORTAL, 3260)?;
    if iqn.eq_ignore_ascii_case(DATA) {
        f.connect_target(
            PORTAL,
            3260,
            iqn,
            AuthType::OneWayChap,
            "initiator1",
            &secret("chap-secret-12"),
        )
    } else {
        f.connect_target(PORTAL, 3260, iqn, AuthType::None, "", &secret(""))
    }
}

/// Logs in and brings the target's disks online (the default SAN policy leaves them offline).
fn attach(f: &mut Fx, iqn: &str) -> Vec<u32> {
    login(f, iqn).unwrap();
    let disks: Vec<u32> = f
        .get_target_disks(PORTAL, 3260, iqn)
        .unwrap()
        .iter()
        .map(|d| d.parse().unwrap())
        .collect();
    for n in &disks {
        f.set_disk_state(*n, true).unwrap();
    }
    disks
}

/// The data LUN's volume id (logged in, online).
fn data_volume(f: &mut Fx) -> String {
    let n = attach(f, DATA)[0];
    let v = f.list_volumes_on_disk(n, 0).unwrap();
    v.into_iter().find(|v| !v.is_empty()).unwrap()
}

fn map(f: &mut Fx, remote: &str, local: &str) -> crate::Result<()> {
    f.new_smb_global_mapping(remote, local, r"CORP\alice", &secret("alice-password-1"))
}

// ---------------------------------------------------------------------------------------------------------------
// The table itself
// ---------------------------------------------------------------------------------------------------------------

/// Every row has its `row_<id>` test below.
const TESTED: &[&str] = &[
    "backend",
    "path_validation",
    "server_argument_checks",
    "connect_target_connected",
    "disconnect_target_unconnected",
    "target_disks_unconnected",
    "iqn_matching",
    "mount_volume_again",
    "resize_skip",
    "partition_slack",
    "smb_credentials",
    "smb_require_privacy",
    "smb_reuse",
    "smb_disconnected_recreate",
    "smb_errors",
    "smb_link_form",
    "smb_link_target",
    "is_symlink_one_hop",
    "unc_errors",
    "create_symlink_kind",
    "mkdir_over_file",
    "missing_parent_code",
    "lstat_missing_op",
    "dangling_mount_point_volume_id",
    "mkdir_dangling_mount_point",
    "list_volumes_edge",
    "not_found_texts",
    "discover_portal_missing",
    "unmount_not_mounted",
    "disk_arrival",
    "partition_disk_mbr",
    "volume_id_match",
    "read_only_flush",
    "san_policy",
    "calls_outlive_clients",
    "discovery_refresh",
    "host_processes",
];

#[test]
fn every_row_has_a_test_and_ids_are_unique() {
    let ids: Vec<&str> = ROWS.iter().map(|r| r.id).collect();
    assert_eq!(
        ids, TESTED,
        "ROWS and TESTED must list the same rows in order"
    );
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "duplicate row id");
    for r in ROWS {
        assert!(!r.source.is_empty(), "{} cites no source", r.id);
        let bare_pipe = |c: &str| c.replace("\\|", "").contains('|');
        assert!(
            r.releases.iter().all(|c| !c.is_empty() && !bare_pipe(c)),
            "{}: a cell is empty or breaks the Markdown table",
            r.id
        );
        assert!(!bare_pipe(r.behaviour) && !bare_pipe(r.source), "{}", r.id);
    }
}

#[test]
fn readme_embeds_the_table_verbatim() {
    let readme = include_str!("../../README.md");
    let table = profile_table_markdown();
    assert!(
        readme.contains(&table),
        "sim/README.md is out of date: paste this table between the profile-table markers:\n\n{table}"
    );
}

#[test]
fn versions_parse_print_and_default_to_the_chart() {
    for v in CsiProxyVersion::ALL {
        assert_eq!(v.as_str().parse::<CsiProxyVersion>().unwrap(), v);
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(serde_json::from_str::<CsiProxyVersion>(&json).unwrap(), v);
    }
    assert_eq!("1.3.0".parse::<CsiProxyVersion>().unwrap(), V1_3_0);
    assert_eq!("MASTER".parse::<CsiProxyVersion>().unwrap(), Master);
    assert!("v1.2.0".parse::<CsiProxyVersion>().is_err());
    assert_eq!(CsiProxyVersion::DEFAULT, V1_1_3);
    let values = include_str!("../../../charts/wincsi/values.yaml");
    assert!(
        values.contains(&format!("tag: {}\n", CsiProxyVersion::DEFAULT)),
        "the simulator's default must be the chart's csi-proxy image tag"
    );
    assert!(V1_1_3.is_powershell() && V1_2_1.is_powershell());
    assert!(!V1_3_0.is_powershell() && !Master.is_powershell());
}

#[test]
fn the_scenario_names_the_release_when_the_options_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let sc = Scenario::from_json(r#"{"host":{"csi_proxy_version":"v1.3.0"}}"#).unwrap();
    let st = State::new(&sc, dir.path(), &HostOptions::default()).unwrap();
    assert_eq!(st.csi_proxy_version(), V1_3_0);
    let opts = HostOptions {
        csi_proxy_version: Some(Master),
        ..HostOptions::default()
    };
    let st = State::new(&sc, dir.path(), &opts).unwrap();
    assert_eq!(
        st.csi_proxy_version(),
        Master,
        "options win over the scenario"
    );
    assert!(Scenario::from_json(r#"{"host":{"csi_proxy_version":"v9"}}"#).is_err());
}

// ---------------------------------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn row_backend() {
    for v in CsiProxyVersion::ALL {
        let f = host(v);
        let e = host_err(f.is_volume_formatted(r"\\?\Volume{0-0}\"));
        match v.profile().backend {
            Backend::PowerShell => assert!(
                e.starts_with("error checking if volume is formatted. cmd: (Get-Volume")
                    && e.ends_with(", error: exit status 1"),
                "{v}: {e}"
            ),
            Backend::MicrosoftWmi => assert!(e.ends_with("error: Not Found"), "{v}: {e}"),
            Backend::GoOleWmi => assert!(e.ends_with(": not found"), "{v}: {e}"),
        }
    }
}

#[test]
fn row_path_validation() {
    for v in CsiProxyVersion::ALL {
        let f = host_with(v, SCENARIO, |sc| {
            sc.host.working_dirs = vec![r"D:\csi".into()]
        });
        assert_eq!(
            host_err(f.mkdir(r"C:\Windows\x")),
            r"path: C:\Windows\x is not within the working directories: [D:\csi C:\var\lib\kubelet]",
            "{v}"
        );
        assert!(f.mkdir(r"C:\var\lib\kubeletX\no-boundary").is_ok(), "{v}");
        assert_eq!(
            host_err(f.path_exists(r"\\?\C:\var\lib\kubelet")),
            r"invalid character \ at beginning of path: \\?\C:\var\lib\kubelet"
        );
    }
}

#[test]
fn row_server_argument_checks() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let pw = secret("x");
        assert_eq!(
            host_err(f.new_smb_global_mapping("", "", "u", &pw)),
            "remote path is empty"
        );
        assert_eq!(
            host_err(f.new_smb_global_mapping(r"\\server", "", "u", &pw)),
            r"remote path (\\server) is invalid"
        );
        assert_eq!(
            host_err(f.remove_smb_global_mapping("/srv/")),
            r"remote path (\srv\) is invalid"
        );
        assert_eq!(
            host_err(f.mount_volume("", &p("m"))),
            "MountVolumeRequest.VolumeId is empty"
        );
        assert_eq!(
            host_err(f.mount_volume(r"\\?\Volume{1}\", "")),
            "MountVolumeRequest.TargetPath is empty"
        );
        for r in [
            f.is_volume_formatted("").map(|_| ()),
            f.write_volume_cache(""),
            f.get_volume_stats("").map(|_| ()),
            f.get_disk_number_from_volume_id("").map(|_| ()),
            f.unmount_volume("", &p("m")),
        ] {
            assert_eq!(host_err(r), "volume id empty", "{v}");
        }
        assert_eq!(host_err(f.format_volume("")), "volume id empty");
        assert_eq!(host_err(f.resize_volume("", 0)), "volume id empty");
        assert_eq!(
            host_err(f.unmount_volume(r"\\?\Volume{1}\", "")),
            "target path empty"
        );
        assert_eq!(
            host_err(f.get_volume_id_from_target_path("")),
            "target path is empty"
        );
    }
}

#[test]
fn row_connect_target_connected() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        login(&mut f, EMPTY).unwrap();
        let again = login(&mut f, EMPTY);
        if ps(v) {
            let e = host_err(again);
            assert!(
                e.starts_with("error connecting to target portal. cmd Connect-IscsiTarget -TargetPortalAddress ${Env:iscsi_tp_address}")
                    && e.contains("output: Connect-IscsiTarget : The target has already been logged in via an iSCSI session.")
                    && e.ends_with(", err: exit status 1"),
                "{v}: {e}"
            );
        } else {
            again.unwrap();
        }
        assert_eq!(f.sessions().len(), 1, "{v}");
    }
}

#[test]
fn row_disconnect_target_unconnected() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        f.add_target_portal(PORTAL, 3260).unwrap();
        let r = f.disconnect_target(PORTAL, 3260, EMPTY);
        if ps(v) {
            let e = host_err(r);
            assert!(
                e.starts_with("error disconnecting from target portal. cmd Disconnect-IscsiTarget")
                    && e.contains("ObjectNotFound"),
                "{v}: {e}"
            );
            let mut b = *f.behaviour();
            b.ps_disconnect_unconnected = OnRepeat::NoOp;
            f.set_behaviour(b).unwrap();
            f.disconnect_target(PORTAL, 3260, EMPTY).unwrap();
        } else {
            r.unwrap();
        }
        // A connected one always disconnects, and its disks vanish.
        let n = attach(&mut f, EMPTY)[0];
        f.disconnect_target(PORTAL, 3260, EMPTY).unwrap();
        assert!(f.get_disk_stats(n).is_err(), "{v}");
    }
}

#[test]
fn row_target_disks_unconnected() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        f.add_target_portal(PORTAL, 3260).unwrap();
        let r = f.get_target_disks(PORTAL, 3260, EMPTY);
        if ps(v) {
            let e = host_err(r);
            assert!(
                e.starts_with("error getting target disks. cmd $ErrorActionPreference = \"Stop\";")
                    && e.contains("No matching MSFT_iSCSIConnection objects found"),
                "{v}: {e}"
            );
        } else {
            assert!(r.unwrap().is_empty(), "{v}");
        }
    }
}

#[test]
fn row_iqn_matching() {
    let lower = EMPTY.to_lowercase();
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let r = login(&mut f, &lower);
        match v {
            V1_1_3 | V1_2_1 => {
                r.unwrap();
                assert_eq!(
                    f.sessions()[0].iqn,
                    EMPTY,
                    "the session has the target's spelling"
                );
                assert_eq!(f.get_target_disks(PORTAL, 3260, &lower).unwrap().len(), 1);
                assert!(f.take_crash().is_none());
            }
            V1_3_0 => {
                let e = host_err(r);
                assert!(e.contains(texts::NIL_DEREF), "{e}");
                assert_eq!(
                    f.take_crash().as_deref(),
                    Some(texts::NIL_DEREF),
                    "csi-proxy dies"
                );
                assert!(f.sessions().is_empty());
                // Every call that looks the target up dies the same way.
                assert!(f.get_target_disks(PORTAL, 3260, &lower).is_err());
                assert!(f.take_crash().is_some());
                assert!(f.disconnect_target(PORTAL, 3260, &lower).is_err());
                assert!(f.take_crash().is_some());
                // The exact spelling works; an unknown portal is "Not Found", not a crash.
                login(&mut f, EMPTY).unwrap();
                assert_eq!(
                    host_err(f.get_target_disks("198.51.100.9", 3260, EMPTY)),
                    format!(
                        "error query target {EMPTY} from target portal at (198.51.100.9:3260). err: Not Found"
                    )
                );
                assert!(f.take_crash().is_none());
            }
            Master => {
                assert_eq!(
                    host_err(r),
                    format!(
                        "error query target {lower} from target portal at ({PORTAL}:3260). err: not found"
                    )
                );
                assert!(f.take_crash().is_none());
                login(&mut f, EMPTY).unwrap();
            }
        }
    }
}

#[test]
fn row_mount_volume_again() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let vol = data_volume(&mut f);
        let t = p("m");
        f.mkdir(&t).unwrap();
        f.mount_volume(&vol, &t).unwrap();
        let again = f.mount_volume(&vol, &t);
        if ps(v) {
            let e = host_err(again);
            assert!(
                e.starts_with("error mount volume to path. cmd: Get-Volume -UniqueId \"$Env:volumeID\" | Get-Partition | Add-PartitionAccessPath")
                    && e.contains("Add-PartitionAccessPath : The requested access path is already in use."),
                "{v}: {e}"
            );
        } else {
            again.unwrap();
        }
        assert_eq!(f.read_file(&format!(r"{t}\db.bin")).unwrap(), b"precious");
    }
}

#[test]
fn row_resize_skip() {
    const MIB: u64 = 1 << 20;
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let n = attach(&mut f, EMPTY)[0];
        f.partition_disk(n).unwrap();
        let vol = f.list_volumes_on_disk(n, 2).unwrap()[0].clone();
        let (size, max) = f.partition_sizes(&vol).unwrap();
        assert_eq!(max - size, 48_640, "{v}: sub-MiB slack below SizeMax");
        // ResizeVolume(0) right after partitioning: the slack reaches Resize-Partition only on v1.1.3.
        let r = f.resize_volume(&vol, 0);
        if v == V1_1_3 {
            let e = host_err(r);
            assert!(
                e.starts_with(&format!(
                    "error resizing volume. cmd: Get-Volume -UniqueId \"$Env:volumeID\" | Get-Partition | Resize-Partition -Size {max}, output: Resize-Partition : Size Not Supported"
                )) && e.contains("The size of the extent is less than the minimum of 1MB.")
                    && e.ends_with(&format!(" size:0, finalSize {max}, error: exit status 1")),
                "{e}"
            );
        } else {
            r.unwrap();
        }
        assert_eq!(f.partition_sizes(&vol).unwrap().0, size, "{v}: unchanged");
        // A 50 MiB growth: grown by v1.1.3, skipped from v1.2.0.
        f.set_disk_size("empty", (1 << 30) + 50 * MIB).unwrap();
        f.resize_volume(&vol, 0).unwrap();
        let grown = f.partition_sizes(&vol).unwrap().0;
        if v == V1_1_3 {
            assert_eq!(grown, (1 << 30) + 50 * MIB - 18 * MIB, "{v}");
        } else {
            assert_eq!(grown, size, "{v}: growth < 100 MiB skipped");
        }
        // Never shrinks.
        f.resize_volume(&vol, 100 * MIB as i64).unwrap();
        assert_eq!(f.partition_sizes(&vol).unwrap().0, grown);
        let neg = f.resize_volume(&vol, -1);
        if v == Master {
            assert_eq!(
                host_err(neg),
                format!("invalid negative size -1 for volume ({vol})")
            );
        } else {
            neg.unwrap();
        }
    }
}

#[test]
fn row_partition_slack() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let mut b = *f.behaviour();
        b.partition_slack_bytes = 4096;
        f.set_behaviour(b).unwrap();
        let n = attach(&mut f, EMPTY)[0];
        f.partition_disk(n).unwrap();
        let vol = f.list_volumes_on_disk(n, 2).unwrap()[0].clone();
        let (size, max) = f.partition_sizes(&vol).unwrap();
        assert_eq!(max - size, 4096, "{v}");
    }
}

#[test]
fn row_smb_credentials() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let r = f.new_smb_global_mapping(&format!(r"{SRV}\pub"), "", "", &secret(""));
        let r2 = f.new_smb_global_mapping(&format!(r"{SRV}\pub"), "", r"CORP\alice", &secret(""));
        if ps(v) {
            let e = host_err(r);
            assert!(
                e.starts_with("NewSmbGlobalMapping failed. output: \"ConvertTo-SecureString : Cannot bind argument to parameter 'String' because it is an empty string."),
                "{v}: {e}"
            );
            assert!(host_err(r2).contains("ConvertTo-SecureString"), "{v}");
            assert!(f.mappings().is_empty());
        } else {
            // The guest share maps with the node's identity; the empty password of the second call is ignored
            // because the root is already mapped.
            r.unwrap();
            r2.unwrap();
            assert_eq!(f.mappings()[r"\\fs1.corp.example\pub"].principal, "");
        }
    }
}

#[test]
fn row_smb_require_privacy() {
    for v in CsiProxyVersion::ALL {
        let mut f = host_with(v, SCENARIO, |sc| sc.host.require_privacy = false);
        let r = f.new_smb_global_mapping(r"\\legacy\old", "", "alice", &secret("alice-password-1"));
        if v == V1_1_3 {
            // No -require-privacy flag: always $true, so a server without encryption refuses.
            assert!(host_err(r).contains("Windows System Error 5,"), "{v}");
            assert!(f.require_privacy());
        } else {
            r.unwrap();
            assert!(!f.mappings()[r"\\legacy\old"].require_privacy, "{v}");
        }
    }
}

#[test]
fn row_smb_reuse() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        map(&mut f, &format!(r"{SRV}\Data\pv1"), "").unwrap();
        // An OK, valid mapping is reused: the request's credentials are ignored.
        f.new_smb_global_mapping(&format!(r"{SRV}\data"), "", r"CORP\bob", &secret("wrong"))
            .unwrap();
        assert_eq!(
            f.mappings()[r"\\fs1.corp.example\data"].principal,
            r"CORP\alice"
        );
        // The password changes on the server: PathValid fails, the mapping is removed and re-created.
        f.set_smb_password("fs1.corp.example", "alice", secret("alice-password-2"))
            .unwrap();
        f.new_smb_global_mapping(
            &format!(r"{SRV}\data"),
            "",
            r"CORP\alice",
            &secret("alice-password-2"),
        )
        .unwrap();
        assert_eq!(
            f.mappings()[r"\\fs1.corp.example\data"].status,
            MappingStatus::Ok,
            "{v}"
        );
    }
}

#[test]
fn row_smb_disconnected_recreate() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        map(&mut f, &format!(r"{SRV}\data"), "").unwrap();
        f.reboot().unwrap();
        let e = host_err(map(&mut f, &format!(r"{SRV}\data"), ""));
        match v {
            V1_1_3 | V1_2_1 => assert!(
                e.starts_with("NewSmbGlobalMapping failed. output: \"New-SmbGlobalMapping : Multiple connections")
                    && e.contains("Windows System Error 1219,New-SmbGlobalMapping"),
                "{e}"
            ),
            V1_3_0 => assert!(
                e.starts_with("NewSmbGlobalMapping failed. result: -1, err: Exception occurred. (Multiple connections to a server"),
                "{e}"
            ),
            Master => assert_eq!(
                e,
                "NewSmbGlobalMapping failed. err: WMI MSFT_SmbGlobalMapping.Create failed (target=<nil>): code=1219"
            ),
        }
        assert!(!e.contains("alice-password-1"));
        // Removing the stale mapping lets it be re-created; so does turning the behaviour off.
        f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
            .unwrap();
        map(&mut f, &format!(r"{SRV}\data"), "").unwrap();
        let mut g = host_with(v, SCENARIO, |sc| {
            sc.host.disconnected_mapping_blocks_create = false
        });
        map(&mut g, &format!(r"{SRV}\data"), "").unwrap();
        g.reboot().unwrap();
        map(&mut g, &format!(r"{SRV}\data"), "").unwrap();
    }
}

#[test]
fn row_smb_errors() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let e = host_err(f.remove_smb_global_mapping(&format!(r"{SRV}\Data\sub")));
        let root = r"\\fs1.corp.example\data";
        match v {
            V1_1_3 | V1_2_1 => assert!(
                e.starts_with(&format!(
                    "UnmountSmbShare failed. output: \"Remove-SmbGlobalMapping : No MSFT_SmbGlobalMapping objects found with property 'RemotePath' equal to '{}'.",
                    root.replace('\\', "\\\\")
                )) && e.ends_with("\", err: exit status 1"),
                "{e}"
            ),
            V1_3_0 => assert_eq!(e, format!("error remove smb mapping '{root}'. err: Not Found")),
            Master => assert_eq!(
                e,
                format!("error remove smb mapping '{root}'. err: failed to query SMB global mapping by remote path {root}: not found")
            ),
        }
        let e = host_err(map(&mut f, r"\\nosuch\share", ""));
        match v {
            V1_1_3 | V1_2_1 => assert!(e.contains("Windows System Error 53,"), "{e}"),
            V1_3_0 => assert!(
                e.ends_with("Exception occurred. (The network path was not found.)"),
                "{e}"
            ),
            Master => assert!(e.ends_with("code=53"), "{e}"),
        }
        // The other WMI failure report: v1.3.0 ignores a ReturnValue ("success", no mapping); master raises.
        let mut b = *f.behaviour();
        b.wmi_failures = Some(match v {
            Master => WmiFailureReport::Exception,
            _ => WmiFailureReport::ReturnValue,
        });
        f.set_behaviour(b).unwrap();
        let r = map(&mut f, r"\\nosuch\share", "");
        match v {
            V1_3_0 => {
                r.unwrap();
                assert!(
                    f.mappings().is_empty(),
                    "v1.3.0 reports success without a mapping"
                );
            }
            Master => assert_eq!(
                host_err(r),
                "NewSmbGlobalMapping failed. err: failed to create SMB global mapping: ExecMethod_ failed: Exception occurred. (The network path was not found.)"
            ),
            _ => assert!(host_err(r).contains("Windows System Error 53,")),
        }
    }
}

#[test]
fn row_smb_link_form() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let stage = p(r"plugins\pv\globalmount");
        f.mkdir(&p(r"plugins\pv")).unwrap();
        map(&mut f, &format!(r"{SRV}\data"), &stage).unwrap();
        let want = if ps(v) {
            r"\\fs1.corp.example\data\".to_string()
        } else {
            r"\\?\\\fs1.corp.example\data\".to_string()
        };
        assert_eq!(f.read_link(&stage).unwrap(), want, "{v}");
        assert!(f.is_symlink(&stage).unwrap(), "{v}");
        assert_eq!(f.read_file(&format!(r"{stage}\hello.txt")).unwrap(), b"hi");
        // The link exists now: a second request fails at the link step (the mapping stays).
        let e = host_err(map(&mut f, &format!(r"{SRV}\data"), &stage));
        assert!(
            e.starts_with(&format!(r"creating link {stage} to {SRV}\data failed with error: error linking {SRV}\data\ to {stage}.")),
            "{v}: {e}"
        );
        if ps(v) {
            assert!(
                e.contains("New-Item : An item with the specified name"),
                "{e}"
            );
        } else {
            assert!(
                e.ends_with("err: Cannot create a file when that file already exists."),
                "{e}"
            );
        }
        // If Windows does not resolve the `\\?\\\server` form (unverified), nothing goes through it.
        let mut b = *f.behaviour();
        b.long_unc_links_resolve = false;
        f.set_behaviour(b).unwrap();
        if ps(v) {
            assert!(f.is_symlink(&stage).unwrap());
        } else {
            assert_eq!(
                host_err(f.is_symlink(&stage)),
                "readlink error: The filename, directory name, or volume label syntax is incorrect."
            );
            assert!(f.read_file(&format!(r"{stage}\hello.txt")).is_err());
        }
    }
}

#[test]
fn row_smb_link_target() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let stage = p(r"plugins\pv\globalmount");
        f.mkdir(&p(r"plugins\pv")).unwrap();
        let r = map(&mut f, &format!(r"{SRV}\data\missing"), &stage);
        // The mapping is made first, and stays either way.
        assert!(f.mappings().contains_key(r"\\fs1.corp.example\data"), "{v}");
        if ps(v) {
            let e = host_err(r);
            assert!(
                e.starts_with(&format!(
                    r"creating link {stage} to {SRV}\data\missing failed with error: error linking {SRV}\data\missing\ to {stage}. output: New-Item : Cannot find path '{SRV}\data\missing\' because it does not exist."
                )),
                "{v}: {e}"
            );
            assert!(
                e.contains("ItemNotFoundException") && e.ends_with(", err: exit status 1"),
                "{e}"
            );
            assert_eq!(f.lstat_kind(&stage).unwrap(), None, "{v}: no link");
        } else {
            r.unwrap();
            // A dangling link: 2/3 → false.
            assert!(!f.is_symlink(&stage).unwrap(), "{v}");
        }
        // Once the directory exists on the share, every release links to it.
        f.write_share_file("fs1.corp.example", "data", "missing/x", b"1")
            .unwrap();
        let other = p(r"plugins\pv\other");
        map(&mut f, &format!(r"{SRV}\data\missing"), &other).unwrap();
        assert!(f.is_symlink(&other).unwrap(), "{v}");
    }
}

#[test]
fn row_is_symlink_one_hop() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let stage = p(r"plugins\pv\globalmount");
        let publish = p(r"pods\uid\mount");
        f.mkdir(&p(r"plugins\pv")).unwrap();
        f.mkdir(&p(r"pods\uid")).unwrap();
        if ps(v) {
            // Windows PowerShell 5.1 links only to a target that exists (row `smb_link_target`).
            f.write_share_file("fs1.corp.example", "data", "sub/x", b"1")
                .unwrap();
            map(&mut f, &format!(r"{SRV}\data\sub"), &stage).unwrap();
        } else {
            map(&mut f, &format!(r"{SRV}\data\sub"), &stage).unwrap();
            // The share has no `sub` yet: the staging link's target does not exist (2/3 → false).
            assert!(!f.is_symlink(&stage).unwrap(), "{v}");
            f.write_share_file("fs1.corp.example", "data", "sub/x", b"1")
                .unwrap();
        }
        assert!(f.is_symlink(&stage).unwrap(), "{v}");
        f.create_symlink(&stage, &publish).unwrap();
        assert!(f.is_symlink(&publish).unwrap());
        // The server goes away: 53 makes the staging link "false"; the publish link's immediate target (the
        // staging link) still exists, so it stays "true" — one hop only.
        f.set_smb_reachable("fs1.corp.example", false).unwrap();
        assert!(!f.is_symlink(&stage).unwrap(), "{v}");
        assert!(f.is_symlink(&publish).unwrap(), "{v}: one hop");
        assert!(
            host_err(f.is_symlink(&p("missing")))
                .ends_with(r"\missing: The system cannot find the file specified."),
            "{v}"
        );
        assert!(!f.is_symlink(K).unwrap(), "a directory");
    }
}

#[test]
fn row_mkdir_over_file() {
    for v in CsiProxyVersion::ALL {
        let f = host(v);
        let file = p("F");
        f.write_file(&file, b"x").unwrap();
        let not_found = format!("mkdir {file}: The system cannot find the path specified.");
        // Over the file, below it, and further below: the error names the file every time.
        for path in [file.clone(), p(r"F\sub"), p(r"F\x\y")] {
            assert_eq!(host_err(f.mkdir(&path)), not_found, "{v}: {path}");
        }
        // As the path was spelled (os.MkdirAll cuts the requested string).
        assert_eq!(
            host_err(f.mkdir(r"C:\VAR\lib\kubelet\F\sub")),
            r"mkdir C:\VAR\lib\kubelet\F: The system cannot find the path specified.",
            "{v}"
        );
        assert_eq!(
            proxy_client::ErrorKind::from_message(&not_found),
            proxy_client::ErrorKind::NotFound
        );
        // A directory above is no obstacle.
        f.mkdir(&p(r"d\e\f")).unwrap();
        assert!(f.path_exists(&p(r"d\e\f")).unwrap());
    }
}

#[test]
fn row_missing_parent_code() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        f.write_file(&p("F"), b"x").unwrap();
        let file = "The system cannot find the file specified.";
        let path = "The system cannot find the path specified.";
        assert!(host_err(f.rmdir(&p("gone"), false)).ends_with(file), "{v}");
        for missing in [p(r"gone\x"), p(r"F\x")] {
            assert_eq!(
                host_err(f.rmdir(&missing, false)),
                format!("remove {missing}: {path}"),
                "{v}"
            );
            assert!(
                host_err(f.is_symlink(&missing)).ends_with(&format!("{missing}: {path}")),
                "{v}"
            );
        }
        assert!(host_err(f.is_symlink(&p("gone"))).ends_with(file), "{v}");
        // Forced, a missing path is no error at all.
        f.rmdir(&p(r"gone\x"), true).unwrap();
    }
}

#[test]
fn row_lstat_missing_op() {
    for v in CsiProxyVersion::ALL {
        let f = host(v);
        let op = if v == Master {
            "GetFileAttributesEx"
        } else {
            "CreateFile"
        };
        assert_eq!(
            host_err(f.is_symlink(&p("missing"))),
            format!(
                "{op} {}: The system cannot find the file specified.",
                p("missing")
            ),
            "{v}"
        );
    }
}

#[test]
fn row_unc_errors() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let stage = p("s");
        map(&mut f, &format!(r"{SRV}\data"), &stage).unwrap();
        // Readlink gives `\\server\share\` for both link forms (the long one once resolved).
        let shown = r"\\fs1.corp.example\data\";
        // Bad credentials (the password changed on the server): 1326.
        f.set_smb_password("fs1.corp.example", "alice", secret("new-password-1"))
            .unwrap();
        assert_eq!(
            host_err(f.is_symlink(&stage)),
            format!("CreateFile {shown}: The user name or password is incorrect.")
        );
        // Disconnected (reboot): 5 by default, configurable.
        f.reboot().unwrap();
        assert_eq!(
            host_err(f.is_symlink(&stage)),
            format!("CreateFile {shown}: Access is denied.")
        );
        let mut b = *f.behaviour();
        b.unc_errors.disconnected = 1326;
        f.set_behaviour(b).unwrap();
        assert!(
            host_err(f.is_symlink(&stage)).ends_with("The user name or password is incorrect.")
        );
        b.unc_errors.disconnected = 53;
        f.set_behaviour(b).unwrap();
        assert!(!f.is_symlink(&stage).unwrap(), "53 means false");
        // No mapping at all: 5.
        f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
            .unwrap();
        assert!(
            host_err(f.is_symlink(&stage)).ends_with("Access is denied."),
            "{v}"
        );
        b.unc_errors.unmapped = 67;
        f.set_behaviour(b).unwrap();
        assert!(host_err(f.is_symlink(&stage)).ends_with("The network name cannot be found."));
    }
}

#[test]
fn row_create_symlink_kind() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let stage = p(r"plugins\pv\globalmount");
        let publish = p(r"pods\uid\mount");
        f.mkdir(&p(r"plugins\pv")).unwrap();
        f.mkdir(&p(r"pods\uid")).unwrap();
        map(&mut f, &format!(r"{SRV}\data"), &stage).unwrap();
        f.set_smb_reachable("fs1.corp.example", false).unwrap();
        // The source does not Stat as a directory: a file link.
        f.create_symlink(&stage, &publish).unwrap();
        f.set_smb_reachable("fs1.corp.example", true).unwrap();
        f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
            .unwrap();
        map(&mut f, &format!(r"{SRV}\data"), "").unwrap();
        assert!(
            f.is_symlink(&publish).unwrap(),
            "{v}: the link itself is fine"
        );
        assert_eq!(
            host_err(f.read_file(&format!(r"{publish}\hello.txt"))),
            format!(r"open {publish}\hello.txt: The directory name is invalid.")
        );
        assert!(f.read_file(&format!(r"{stage}\hello.txt")).is_ok());
        // Re-made while the source resolves: a directory link.
        f.rmdir(&publish, false).unwrap();
        f.create_symlink(&stage, &publish).unwrap();
        assert_eq!(
            f.read_file(&format!(r"{publish}\hello.txt")).unwrap(),
            b"hi"
        );
    }
}

#[test]
fn row_dangling_mount_point_volume_id() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let vol = data_volume(&mut f);
        let t = p("stage");
        let publish = p("publish");
        f.mkdir(&t).unwrap();
        f.mount_volume(&vol, &t).unwrap();
        f.create_symlink(&t, &publish).unwrap();
        assert_eq!(f.get_volume_id_from_target_path(&t).unwrap(), vol);
        assert_eq!(f.get_volume_id_from_target_path(&publish).unwrap(), vol);
        f.reboot().unwrap();
        let r = f.get_volume_id_from_target_path(&t);
        if ps(v) {
            assert_eq!(r.unwrap(), vol, "{v}: read from the reparse data");
            assert_eq!(f.get_volume_id_from_target_path(&publish).unwrap(), vol);
        } else {
            assert_eq!(
                host_err(r),
                "The system cannot find the file specified.",
                "{v}"
            );
        }
        // A plain directory is no mount point in any release.
        f.mkdir(&p("plain")).unwrap();
        let e = host_err(f.get_volume_id_from_target_path(&p("plain")));
        if ps(v) {
            assert!(
                e.starts_with(&format!("error getting the volume for the mount {}, internal error error getting volume from mount. cmd: (Get-Item -Path $Env:mountpath).Target, output: , error: <nil>", p("plain"))),
                "{e}"
            );
        } else {
            assert_eq!(e, "not a mounted folder");
        }
    }
}

#[test]
fn row_mkdir_dangling_mount_point() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let vol = data_volume(&mut f);
        let t = p("stage");
        f.mkdir(&t).unwrap();
        f.mount_volume(&vol, &t).unwrap();
        f.disconnect_target(PORTAL, 3260, DATA).unwrap();
        let r = f.mkdir(&t);
        if v == Master {
            r.unwrap();
        } else {
            assert_eq!(
                host_err(r),
                format!("mkdir {t}: Cannot create a file when that file already exists."),
                "{v}"
            );
        }
    }
}

#[test]
fn row_list_volumes_edge() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let n = attach(&mut f, EMPTY)[0];
        let unknown = f.list_volumes_on_disk(42, 0);
        let raw = f.list_volumes_on_disk(n, 0);
        if ps(v) {
            let e = host_err(unknown);
            assert!(
                e.starts_with("error list volumes on disk. cmd: (Get-Disk -Number 42 | Get-Partition | Get-Volume).UniqueId, output: Get-Disk : No MSFT_Disk objects found with property 'Number' equal to '42'."),
                "{e}"
            );
            assert!(host_err(raw).contains(&format!(
                "Get-Partition : No MSFT_Partition objects found with property 'DiskNumber' equal to '{n}'."
            )));
        } else {
            assert!(unknown.unwrap().is_empty(), "{v}");
            assert!(raw.unwrap().is_empty(), "{v}");
        }
        // Partitions without a volume (the reserved one): [""] in the PowerShell era.
        f.partition_disk(n).unwrap();
        let msr = f.list_volumes_on_disk(n, 1).unwrap();
        if ps(v) {
            assert_eq!(msr, vec![String::new()]);
        } else {
            assert!(msr.is_empty());
        }
    }
}

#[test]
fn row_not_found_texts() {
    let id = r"\\?\Volume{00000000-0000-0000-0000-000000000000}\";
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let stats = host_err(f.get_volume_stats(id));
        let disk = host_err(f.get_disk_stats(42));
        let resize = host_err(f.resize_volume(id, 0));
        let part = host_err(f.partition_disk(42));
        match v {
            V1_1_3 | V1_2_1 => {
                assert!(stats.contains(&format!(
                    "Get-Volume : No MSFT_Volume objects found with property 'UniqueId' equal to '{id}'."
                )), "{stats}");
                assert!(disk.starts_with("error getting size of disk. cmd: (Get-Disk -Number 42).Size, output: Get-Disk : No MSFT_Disk objects found with property 'Number' equal to '42'."), "{disk}");
                assert!(
                    resize.starts_with("error getting sizemin,sizemax from mount."),
                    "{resize}"
                );
                // `%v` of a []byte: decimal bytes.
                assert!(part.starts_with("error checking initialized status of disk 42: [71 101 116 45 68 105 115 107"), "{part}");
            }
            V1_3_0 => {
                assert_eq!(
                    stats,
                    format!(
                        "error getting capacity and used size of volume ({id}). error: Not Found"
                    )
                );
                assert_eq!(disk, "Not Found");
                assert_eq!(resize, "Not Found");
                assert_eq!(
                    part,
                    "error checking initialized status of disk 42: Not Found"
                );
            }
            Master => {
                assert_eq!(
                    stats,
                    format!(
                        "error querying volume ({id}). error: failed to query volume {id}: not found"
                    )
                );
                assert_eq!(disk, "failed to query disk 42. error: not found");
                assert_eq!(resize, format!("failed to query volume {id}: not found"));
                assert_eq!(
                    part,
                    "error checking initialized status of disk 42: failed to query disk 42. error: not found"
                );
            }
        }
        let portal = host_err(f.get_target_disks("198.51.100.9", 3260, DATA));
        match v {
            V1_1_3 | V1_2_1 => assert!(
                portal.contains("Get-IscsiTargetPortal : No MSFT_iSCSITargetPortal objects found"),
                "{portal}"
            ),
            V1_3_0 => assert!(portal.ends_with("err: Not Found"), "{portal}"),
            Master => assert!(
                portal.ends_with(
                    "failed to query iSCSI target portal at (198.51.100.9:3260). error: not found"
                ),
                "{portal}"
            ),
        }
    }
}

#[test]
fn row_discover_portal_missing() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        // The portal exists on the network but was never added (AddTargetPortal), and one that does not exist.
        for (address, port) in [(PORTAL, 3260), ("198.51.100.9", 3260)] {
            let e = host_err(f.discover_target_portal(address, port));
            match v {
                V1_1_3 | V1_2_1 => {
                    let cmd = "ConvertTo-Json -InputObject @(Get-IscsiTargetPortal -TargetPortalAddress \
                               ${Env:iscsi_tp_address} -TargetPortalPortNumber ${Env:iscsi_tp_port} | \
                               Get-IscsiTarget | Select-Object -ExpandProperty NodeAddress)";
                    let head = format!(
                        "error discovering target portal. cmd: {cmd}, output: Get-IscsiTargetPortal : No \
                         MSFT_iSCSITargetPortal objects found with property 'TargetPortalAddress' equal to \
                         '{address}'."
                    );
                    assert!(e.starts_with(&head), "{v}: {e}");
                    assert!(e.ends_with(", err: exit status 1"), "{v}: {e}");
                }
                V1_3_0 => assert_eq!(
                    e,
                    format!(
                        "error list targets by target portal at ({address}:{port}). err: Not Found"
                    )
                ),
                Master => assert_eq!(
                    e,
                    format!(
                        "error list targets by target portal at ({address}:{port}). err: failed to query iSCSI \
                         target portal at ({address}:{port}). error: not found"
                    )
                ),
            }
            assert_eq!(
                proxy_client::ErrorKind::from_message(&e),
                proxy_client::ErrorKind::NotFound,
                "{v}: {e}"
            );
        }
        // Once added, it answers.
        f.add_target_portal(PORTAL, 3260).unwrap();
        assert!(!f.discover_target_portal(PORTAL, 3260).unwrap().is_empty());
    }
}

#[test]
fn row_unmount_not_mounted() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let vol = data_volume(&mut f);
        let t = p("m");
        f.mkdir(&t).unwrap();
        let e = host_err(f.unmount_volume(&vol, &t));
        if ps(v) {
            assert!(
                e.starts_with("error getting driver letter to mount volume. cmd: Get-Volume -UniqueId \"$Env:volumeID\" | Get-Partition | Remove-PartitionAccessPath -AccessPath $Env:mountpath, output: Remove-PartitionAccessPath : The access path is not valid.")
                    && e.ends_with(",error: exit status 1"),
                "{e}"
            );
        } else {
            assert_eq!(
                e,
                format!(
                    "error umount volume ({vol}) from path {t}. error: The file or directory is not a reparse point."
                )
            );
        }
        f.mount_volume(&vol, &t).unwrap();
        f.unmount_volume(&vol, &t).unwrap();
        assert!(f.path_exists(&t).unwrap(), "the directory stays");
    }
}

#[tokio::test(start_paused = true)]
async fn row_disk_arrival() {
    use tokio::time::{Instant, advance};
    let ms = Duration::from_millis;
    let realistic = |sc: &mut Scenario| sc.host.behaviour.arrival = Arrival::default();
    for v in CsiProxyVersion::ALL {
        for rescan in [false, true] {
            let mut f = host_with(v, SCENARIO, realistic);
            // The slow LUN's own delays: its disk 1000 ms after the login, its volumes 500 ms after it is online.
            login(&mut f, SLOW).unwrap();
            let locations = f.list_disk_locations().len();
            advance(ms(999)).await;
            // Not arrived: neither the cache's lag nor a Rescan shows it.
            f.rescan().unwrap();
            f.tick(Instant::now()).unwrap();
            assert!(
                f.get_target_disks(PORTAL, 3260, SLOW).unwrap().is_empty(),
                "{v}"
            );
            advance(ms(1)).await;
            if rescan {
                // Arrived: a Rescan shows it at once.
                f.rescan().unwrap();
            } else {
                // Arrived: the cache shows it by itself 500 ms later.
                f.tick(Instant::now() + ms(499)).unwrap();
                assert!(f.get_target_disks(PORTAL, 3260, SLOW).unwrap().is_empty());
                advance(ms(500)).await;
                f.tick(Instant::now()).unwrap();
            }
            let n: u32 = f.get_target_disks(PORTAL, 3260, SLOW).unwrap()[0]
                .parse()
                .unwrap();
            assert_eq!(f.list_disk_locations().len(), locations + 1, "{v}");
            // It arrived offline (SAN policy); its volume arrives 500 ms after it comes online.
            f.set_disk_state(n, true).unwrap();
            advance(ms(499)).await;
            f.rescan().unwrap();
            let r = f.list_volumes_on_disk(n, 0);
            if ps(v) {
                // A partition without its volume: the pipeline's empty output split on CRLF.
                assert_eq!(r.unwrap(), vec![String::new()], "{v}");
            } else {
                assert!(r.unwrap().is_empty(), "{v}");
            }
            advance(ms(1)).await;
            if rescan {
                f.rescan().unwrap();
            } else {
                f.tick(Instant::now() + ms(499)).unwrap();
                assert!(
                    f.list_volumes_on_disk(n, 0)
                        .unwrap()
                        .iter()
                        .all(String::is_empty)
                );
                advance(ms(500)).await;
                f.tick(Instant::now()).unwrap();
            }
            let vols = f.list_volumes_on_disk(n, 0).unwrap();
            assert_eq!(vols.len(), 1, "{v}");
            assert!(f.is_volume_formatted(&vols[0]).unwrap());
        }
        // The host's defaults (500 ms each): a RAW LUN's disk, then the volume PartitionDisk makes.
        let mut f = host_with(v, SCENARIO, realistic);
        login(&mut f, EMPTY).unwrap();
        advance(ms(500)).await;
        f.rescan().unwrap();
        let n: u32 = f.get_target_disks(PORTAL, 3260, EMPTY).unwrap()[0]
            .parse()
            .unwrap();
        f.set_disk_state(n, true).unwrap();
        f.partition_disk(n).unwrap();
        f.rescan().unwrap();
        assert!(
            f.list_volumes_on_disk(n, 0)
                .unwrap()
                .iter()
                .all(String::is_empty),
            "{v}: the new partition's volume has not arrived"
        );
        assert_eq!(
            f.partition_disk(n).map_err(|e| e.to_string()),
            Ok(()),
            "{v}: the partition is there at once, so PartitionDisk is a no-op"
        );
        advance(ms(500)).await;
        f.rescan().unwrap();
        assert_eq!(f.list_volumes_on_disk(n, 0).unwrap().len(), 1, "{v}");
        // Offline and online again: the volume arrives again.
        f.set_disk_state(n, false).unwrap();
        f.set_disk_state(n, true).unwrap();
        f.rescan().unwrap();
        assert!(
            f.list_volumes_on_disk(n, 0)
                .unwrap()
                .iter()
                .all(String::is_empty)
        );
        // The instant model: everything at once.
        let mut f = host(v);
        let n = attach(&mut f, EMPTY)[0];
        f.partition_disk(n).unwrap();
        assert_eq!(f.list_volumes_on_disk(n, 0).unwrap().len(), 1, "{v}");
        // A LUN's delay can be changed at run time (before the login); `complete_arrivals` is a test's control.
        let mut f = host(v);
        f.set_lun_arrival_delay("empty", ms(10), Duration::ZERO)
            .unwrap();
        login(&mut f, EMPTY).unwrap();
        assert!(f.get_target_disks(PORTAL, 3260, EMPTY).unwrap().is_empty());
        f.complete_arrivals().unwrap();
        assert_eq!(f.get_target_disks(PORTAL, 3260, EMPTY).unwrap().len(), 1);
    }
}

#[test]
fn row_san_policy() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        login(&mut f, EMPTY).unwrap();
        let n: u32 = f.get_target_disks(PORTAL, 3260, EMPTY).unwrap()[0]
            .parse()
            .unwrap();
        assert!(!f.get_disk_state(n).unwrap(), "{v}: OfflineShared");
        assert!(
            f.partition_disk(n).is_err(),
            "an offline disk cannot be initialised"
        );
        let mut g = host_with(v, SCENARIO, |sc| {
            sc.host.san_policy = crate::scenario::SanPolicy::OnlineAll
        });
        login(&mut g, EMPTY).unwrap();
        let n: u32 = g.get_target_disks(PORTAL, 3260, EMPTY).unwrap()[0]
            .parse()
            .unwrap();
        assert!(g.get_disk_state(n).unwrap(), "{v}: OnlineAll");
        // A read-only LUN cannot be partitioned, online or not.
        let mut h = host_with(v, SCENARIO, |sc| {
            sc.iscsi.portals[0].targets[1].luns[0].disk.read_only = true;
        });
        let n = attach(&mut h, EMPTY)[0];
        let e = host_err(h.partition_disk(n));
        match v {
            V1_1_3 | V1_2_1 => assert!(
                e.contains("Initialize-Disk : The disk is read only."),
                "{e}"
            ),
            V1_3_0 => assert_eq!(
                e,
                format!("failed to initializing disk {n}: result 41002, error: <nil>")
            ),
            Master => assert!(e.ends_with("code=41002"), "{e}"),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn row_calls_outlive_clients() {
    for v in CsiProxyVersion::ALL {
        let dir = tempfile::tempdir().unwrap();
        let opts = HostOptions {
            csi_proxy_version: Some(v),
            ..HostOptions::default()
        };
        let mut sc = Scenario::from_json(SCENARIO).unwrap();
        sc.host.behaviour.arrival = Arrival::INSTANT;
        let h = crate::SimHost::new(&sc, dir.path(), opts).unwrap();
        let n = h.with_state_mut(|s| {
            s.add_target_portal(PORTAL, 3260).unwrap();
            s.connect_target(PORTAL, 3260, EMPTY, AuthType::None, "", &secret(""))
                .unwrap();
            let n: u32 = s.get_target_disks(PORTAL, 3260, EMPTY).unwrap()[0]
                .parse()
                .unwrap();
            s.set_disk_state(n, true).unwrap();
            s.partition_disk(n).unwrap();
            n
        });
        let vol = h.with_state(|s| s.list_volumes_on_disk(n, 2).unwrap()[0].clone());
        h.hang_nth("FormatVolume", 1).unwrap();
        let (h2, vol2) = (h.clone(), vol.clone());
        let client = tokio::spawn(async move {
            h2.call_detached("FormatVolume", serde_json::Value::Null, move |s| {
                s.format_volume(&vol2)
            })
            .await
        });
        h.wait_hung(1).await;
        // The client goes away (killed / deadline): the host keeps formatting.
        client.abort();
        assert!(client.await.unwrap_err().is_cancelled());
        assert!(!h.with_state(|s| s.is_volume_formatted(&vol).unwrap()));
        h.release_hangs();
        // current_thread runtime: once the hang is over, the detached call runs to its end before we resume.
        h.wait_unhung().await;
        assert!(
            h.with_state(|s| s.is_volume_formatted(&vol).unwrap()),
            "{v}"
        );
        assert_eq!(h.audit(0).last().unwrap().rpc, "FormatVolume");
    }
}

#[test]
fn session_recovery_reauthenticates_with_current_secrets() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let n = attach(&mut f, DATA)[0];
        let vol = f
            .list_volumes_on_disk(n, 0)
            .unwrap()
            .into_iter()
            .find(|v| !v.is_empty())
            .unwrap();
        let t = p("m");
        f.mkdir(&t).unwrap();
        f.mount_volume(&vol, &t).unwrap();
        // Same secrets: the session recovers.
        let r = f.recover_iscsi_sessions(None).unwrap();
        assert!(r[0].recovered, "{v}");
        // The array's CHAP secret is rotated: the next recovery fails and the disk vanishes.
        f.set_target_chap(
            DATA,
            TargetChap::OneWay {
                username: "initiator1".into(),
                secret: secret("chap-secret-34"),
            },
        )
        .unwrap();
        let r = f.recover_iscsi_sessions(Some(DATA)).unwrap();
        assert!(!r[0].recovered, "{v}");
        assert!(f.sessions().is_empty());
        assert!(!f.is_symlink(&t).unwrap(), "the mount point dangles");
        // Mutual CHAP: recovery uses the node's *current* mutual secret.
        let mut g = host_with(v, SCENARIO, |sc| {
            sc.iscsi.portals[0].targets[1].chap = TargetChap::Mutual {
                username: "initiator1".into(),
                secret: secret("chap-secret-12"),
                target_secret: secret("target-secret-1"),
            };
        });
        g.set_mutual_chap_secret(&secret("target-secret-1"))
            .unwrap();
        g.add_target_portal(PORTAL, 3260).unwrap();
        g.connect_target(
            PORTAL,
            3260,
            EMPTY,
            AuthType::MutualChap,
            "initiator1",
            &secret("chap-secret-12"),
        )
        .unwrap();
        g.set_mutual_chap_secret(&secret("target-secret-2"))
            .unwrap();
        assert!(!g.recover_iscsi_sessions(None).unwrap()[0].recovered, "{v}");
    }
}

/// A portal that stops answering (`State::set_portal_reachable`): the session stays, its disk vanishes and the mount
/// point on it dangles; a new login or portal through it fails with the initiator's "Connection Failed." in each
/// release's wrapping (a failure, never a not-found); once it answers again the disk comes back with its volume,
/// and the mount point resolves to the same data.
#[test]
fn a_portal_that_stops_answering_keeps_its_session_and_its_disk_comes_back() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let vol = data_volume(&mut f);
        let t = p("m");
        f.mkdir(&t).unwrap();
        f.mount_volume(&vol, &t).unwrap();
        f.write_file(&format!(r"{t}\hello.txt"), b"kept").unwrap();
        f.set_portal_reachable(PORTAL, false).unwrap();
        assert_eq!(f.sessions().len(), 1, "{v}: the session stays");
        assert!(
            f.get_target_disks(PORTAL, 3260, DATA).unwrap().is_empty(),
            "{v}: its disk is gone"
        );
        assert!(f.read_file(&format!(r"{t}\hello.txt")).is_err(), "{v}");
        let e = host_err(f.connect_target(PORTAL, 3260, EMPTY, AuthType::None, "", &secret("")));
        // master reports the method's ReturnValue: 4026466307 = 0xEFFF0003.
        assert!(
            e.contains("Connection Failed.") || e.contains("code=4026466307"),
            "{v}: {e}"
        );
        let kind = proxy_client::ErrorKind::from_message(&e);
        assert_eq!(kind, proxy_client::ErrorKind::Other, "{v}: {e}");
        f.set_portal_reachable(PORTAL, true).unwrap();
        assert_eq!(
            f.get_target_disks(PORTAL, 3260, DATA).unwrap().len(),
            1,
            "{v}: the disk is back"
        );
        assert_eq!(
            f.read_file(&format!(r"{t}\hello.txt")).unwrap(),
            b"kept",
            "{v}: the mount point resolves to the same data"
        );
        assert!(f.set_portal_reachable("198.51.100.99", false).is_err());
    }
}

#[test]
fn a_lun_can_be_replaced_behind_a_connected_target() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let n = attach(&mut f, EMPTY)[0];
        let before = f.list_disk_ids().unwrap()[&n].clone();
        let spec: crate::scenario::DiskSpec = serde_json::from_str(
            r#"{"size": 2147483648, "page83": "600140500000000000000000000000aa"}"#,
        )
        .unwrap();
        let id = f.replace_lun(EMPTY, 0, &spec).unwrap();
        assert_ne!(id, "empty");
        let disks: Vec<u32> = f
            .get_target_disks(PORTAL, 3260, EMPTY)
            .unwrap()
            .iter()
            .map(|d| d.parse().unwrap())
            .collect();
        assert_eq!(disks.len(), 1);
        let ids = f.list_disk_ids().unwrap();
        assert_eq!(ids[&disks[0]].0, "600140500000000000000000000000aa", "{v}");
        assert_ne!(ids[&disks[0]], before);
        assert!(
            !f.get_disk_state(disks[0]).unwrap(),
            "arrives per the SAN policy"
        );
        assert_eq!(f.get_disk_stats(disks[0]).unwrap(), 2147483648);
    }
}

/// proxy-client classifies every release's text the simulator sends for the failures the driver meets.
#[test]
fn every_release_text_is_classified_by_proxy_client() {
    use proxy_client::ErrorKind as K;
    let kind = |r: crate::Result<()>| K::from_message(&host_err(r));
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let gone = r"\\?\Volume{00000000-0000-0000-0000-000000000000}\";
        assert_eq!(
            kind(f.remove_smb_global_mapping(&format!(r"{SRV}\data"))),
            K::NotFound,
            "{v}"
        );
        assert_eq!(kind(f.write_volume_cache(gone)), K::NotFound, "{v}");
        assert_eq!(
            kind(f.is_volume_formatted(gone).map(|_| ())),
            K::NotFound,
            "{v}"
        );
        assert_eq!(
            kind(f.get_volume_stats(gone).map(|_| ())),
            K::NotFound,
            "{v}"
        );
        assert_eq!(kind(f.resize_volume(gone, 0)), K::NotFound, "{v}");
        assert_eq!(kind(f.get_disk_stats(42).map(|_| ())), K::NotFound, "{v}");
        assert_eq!(
            kind(f.get_volume_id_from_target_path(&p("nope")).map(|_| ())),
            K::NotFound,
            "{v}"
        );
        f.mkdir(&p("plain")).unwrap();
        assert_eq!(
            kind(f.get_volume_id_from_target_path(&p("plain")).map(|_| ())),
            K::NotFound,
            "{v}"
        );
        assert_eq!(
            kind(map(&mut f, r"\\nosuch\x", "")),
            K::NetworkPathNotFound,
            "{v}"
        );
        assert_eq!(
            kind(map(&mut f, &format!(r"{SRV}\nosuch"), "")),
            K::NetworkNameNotFound,
            "{v}"
        );
        assert_eq!(
            kind(f.new_smb_global_mapping(
                &format!(r"{SRV}\data"),
                "",
                r"CORP\alice",
                &secret("bad")
            )),
            K::LogonFailure,
            "{v}"
        );
        map(&mut f, &format!(r"{SRV}\data"), "").unwrap();
        assert_eq!(
            kind(f.new_smb_global_mapping(
                &format!(r"{SRV}\pub"),
                "",
                r"CORP\bob",
                &secret("bob-password-1")
            )),
            K::SmbMultipleConnections,
            "{v}"
        );
        f.reboot().unwrap();
        assert_eq!(
            kind(map(&mut f, &format!(r"{SRV}\data"), "")),
            K::SmbMultipleConnections,
            "{v}"
        );
        // iSCSI.
        let vol = data_volume(&mut f);
        let t = p("m");
        f.mkdir(&t).unwrap();
        assert_eq!(kind(f.unmount_volume(&vol, &t)), K::NotFound, "{v}");
        f.mount_volume(&vol, &t).unwrap();
        if ps(v) {
            assert_eq!(kind(f.mount_volume(&vol, &t)), K::AccessPathInUse);
            assert_eq!(kind(login(&mut f, DATA)), K::IscsiAlreadyLoggedIn);
            assert_eq!(
                kind(f.get_target_disks(PORTAL, 3260, EMPTY).map(|_| ())),
                K::NotFound
            );
            assert_eq!(kind(f.disconnect_target(PORTAL, 3260, EMPTY)), K::NotFound);
        }
        f.mkdir(&p(r"full\x")).unwrap();
        let full = kind(f.mount_volume(&vol, &p("full")));
        // PowerShell era: `Add-PartitionAccessPath : The access path is not valid.` is a failure, not a not-found
        // (proxy-client recognises only `Remove-PartitionAccessPath`'s, UnmountVolume of nothing mounted).
        assert!(
            matches!(full, K::DirectoryNotEmpty | K::Other),
            "{v}: {full:?}"
        );
        assert_eq!(
            kind(f.get_target_disks("198.51.100.9", 3260, DATA).map(|_| ())),
            K::NotFound,
            "{v}"
        );
        // A wrong CHAP secret (EMPTY has no session here).
        f.set_target_chap(
            EMPTY,
            TargetChap::OneWay {
                username: "initiator1".into(),
                secret: secret("chap-secret-12"),
            },
        )
        .unwrap();
        assert!(f.sessions().iter().all(|s| s.iqn != EMPTY));
        assert_eq!(
            kind(f.connect_target(
                PORTAL,
                3260,
                EMPTY,
                AuthType::OneWayChap,
                "initiator1",
                &secret("wrong-secret-12")
            )),
            K::LogonFailure,
            "{v}"
        );
        if v == Master {
            assert_eq!(kind(login(&mut f, &EMPTY.to_lowercase())), K::NotFound);
        }
        // Filesystem (Go texts, same in all releases).
        assert_eq!(kind(f.rmdir(&p("nope"), false)), K::NotFound);
        f.mkdir(&p(r"d\e")).unwrap();
        assert_eq!(kind(f.rmdir(&p("d"), false)), K::DirectoryNotEmpty);
        assert_eq!(
            kind(f.create_symlink(&p("d"), &p("plain"))),
            K::AlreadyExists
        );
    }
}

/// The array creates `NEW` behind the portal after it was added on the node: every release's DiscoverTargetPortal
/// reads the portal's cache (it is not listed, and the connect path cannot find it); re-adding the portal refreshes
/// it only in the PowerShell era and only with the unverified `portal_readd_refreshes`; RemoveTargetPortal +
/// AddTargetPortal always does.
#[test]
fn row_discovery_refresh() {
    const NEW: &str = "iqn.2026-01.io.wincsi:pvc-late";
    let spec: crate::scenario::TargetSpec = serde_json::from_value(serde_json::json!({
        "iqn": NEW, "luns": [ { "lun": 0, "id": "late", "size": 1073741824 } ]
    }))
    .unwrap();
    for readd_refreshes in [false, true] {
        for v in CsiProxyVersion::ALL {
            let mut f = host(v);
            let mut b = *f.behaviour();
            b.portal_readd_refreshes = readd_refreshes;
            f.set_behaviour(b).unwrap();
            f.add_target_portal(PORTAL, 3260).unwrap();
            let before = f.discover_target_portal(PORTAL, 3260).unwrap();
            assert_eq!(before, [DATA, EMPTY, SLOW], "{v}");
            assert_eq!(f.add_target(PORTAL, 3260, &spec).unwrap(), ["late"]);
            let listed = |f: &mut Fx| {
                f.discover_target_portal(PORTAL, 3260)
                    .unwrap()
                    .contains(&NEW.to_owned())
            };
            assert!(
                !listed(&mut f),
                "{v}: the cache is not refreshed by reading it"
            );
            assert!(!listed(&mut f), "{v}");
            // The connect path does not see it either (the lookup goes through the same cache).
            assert!(
                f.connect_target(PORTAL, 3260, NEW, AuthType::None, "", &secret(""))
                    .is_err(),
                "{v}"
            );
            f.add_target_portal(PORTAL, 3260).unwrap();
            assert_eq!(
                listed(&mut f),
                ps(v) && readd_refreshes,
                "{v}, portal_readd_refreshes = {readd_refreshes}"
            );
            f.remove_target_portal(PORTAL, 3260).unwrap();
            assert!(f.discover_target_portal(PORTAL, 3260).is_err(), "{v}");
            f.add_target_portal(PORTAL, 3260).unwrap();
            assert!(listed(&mut f), "{v}: a re-added portal runs SendTargets");
            f.connect_target(PORTAL, 3260, NEW, AuthType::None, "", &secret(""))
                .unwrap();
            assert_eq!(
                f.get_target_disks(PORTAL, 3260, NEW).unwrap().len(),
                1,
                "{v}"
            );
        }
    }
    // A target the storage network does not have, on a portal it does not have, is refused.
    let mut f = host(V1_1_3);
    assert!(f.add_target("192.0.2.99", 3260, &spec).is_err());
    f.add_target(PORTAL, 3260, &spec).unwrap();
    assert!(f.add_target(PORTAL, 3260, &spec).is_err(), "already there");
}

#[test]
fn row_host_processes() {
    use crate::state::Spawned;
    for v in CsiProxyVersion::ALL {
        let f = host(v);
        let started =
            |rpc: &str, args: serde_json::Value| f.process_plan(rpc, &args).settle(true, &f);
        let ps = u64::from(ps(v));
        assert_eq!(
            started("GetBIOSSerialNumber", serde_json::json!({})),
            Spawned {
                powershell: 0,
                wmic: ps
            },
            "{v}"
        );
        for rpc in ["PathExists", "Mkdir", "Rmdir", "CreateSymlink", "IsSymlink"] {
            assert!(
                started(rpc, serde_json::json!({ "path": p("x") })).is_zero(),
                "{v} {rpc}"
            );
        }
        for rpc in [
            "ListDiskLocations",
            "Rescan",
            "GetTargetDisks",
            "GetService",
            "RemoveSmbGlobalMapping",
        ] {
            let args = serde_json::json!({ "remote_path": r"\\s\d", "volume_id": "v" });
            assert_eq!(
                started(rpc, args),
                Spawned {
                    powershell: ps,
                    wmic: 0
                },
                "{v} {rpc}"
            );
        }
    }
}

#[test]
fn row_partition_disk_mbr() {
    let mbr = SCENARIO.replace(
        r#"{ "lun": 0, "id": "empty", "size": 1073741824 }"#,
        r#"{ "lun": 0, "id": "empty", "size": 1073741824, "partition_style": "mbr" }"#,
    );
    assert_ne!(mbr, SCENARIO);
    for v in CsiProxyVersion::ALL {
        let mut f = host_with(v, &mbr, |_| {});
        let n = attach(&mut f, EMPTY)[0];
        let r = f.partition_disk(n);
        let disk = |f: &Fx| f.disks().iter().find(|d| d.id == "empty").unwrap().clone();
        if ps(v) {
            r.unwrap();
            let d = disk(&f);
            assert_eq!(d.partitions.len(), 1, "{v}: an IFS partition");
            assert_eq!(f.list_volumes_on_disk(n, 0).unwrap().len(), 1, "{v}");
        } else {
            let e = host_err(r);
            assert!(e.contains("41010"), "{v}: {e}");
            assert!(
                e.starts_with(&format!("error creating partition on disk {n}.")),
                "{v}: {e}"
            );
            assert!(disk(&f).partitions.is_empty(), "{v}: nothing created");
        }
    }
}

#[test]
fn row_volume_id_match() {
    for v in CsiProxyVersion::ALL {
        let mut f = host(v);
        let id = data_volume(&mut f);
        let upper = id.to_ascii_uppercase();
        assert_ne!(id, upper);
        assert!(f.is_volume_formatted(&id).unwrap(), "{v}");
        let r = f.is_volume_formatted(&upper);
        if v == V1_3_0 {
            assert!(r.is_err(), "{v}: exact-case");
        } else {
            assert!(r.unwrap(), "{v}: case-insensitive");
        }
    }
}

#[test]
fn row_read_only_flush() {
    let ro = SCENARIO.replace(
        r#""id": "data", "size": 2147483648,"#,
        r#""id": "data", "size": 2147483648, "read_only": true,"#,
    );
    assert_ne!(ro, SCENARIO);
    for v in CsiProxyVersion::ALL {
        for fails in [true, false] {
            let mut f = host_with(v, &ro, |sc| sc.host.behaviour.read_only_flush_fails = fails);
            let id = data_volume(&mut f);
            let r = f.write_volume_cache(&id);
            if fails {
                let e = host_err(r);
                let want = if ps(v) {
                    "The media is write protected."
                } else {
                    "19"
                };
                assert!(e.contains(want), "{v}: {e}");
            } else {
                r.unwrap();
            }
        }
    }
}
