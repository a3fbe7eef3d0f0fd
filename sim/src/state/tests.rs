//! Unit tests of the state model: one per csi-proxy quirk (§9 of the reference) and per simulated behaviour.

use super::iscsi::AuthType;
use super::*;
use crate::profile::CsiProxyVersion;
use crate::scenario::Scenario;
use crate::secret::Secret;

const EXAMPLE: &str = include_str!("../../scenarios/example.json");
const K: &str = r"C:\var\lib\kubelet";

struct Fx {
    st: State,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Fx {
    type Target = State;
    fn deref(&self) -> &State {
        &self.st
    }
}
impl std::ops::DerefMut for Fx {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.st
    }
}

/// Set to run this whole suite on emulated links (the fallback used under Wine): CI runs it both ways.
const EMULATE_ENV: &str = "WINCSI_SIM_TEST_EMULATED_LINKS";

/// A host from `json` with `opts`; the csi-proxy release is pinned (the chart default unless `opts` names one), so
/// `WINCSI_SIM_CSI_PROXY_VERSION` never changes what these tests see.
fn fx_with(json: &str, mut opts: HostOptions) -> Fx {
    opts.emulate_links |= std::env::var_os(EMULATE_ENV).is_some();
    opts.csi_proxy_version = opts.csi_proxy_version.or(Some(CsiProxyVersion::DEFAULT));
    let dir = tempfile::tempdir().unwrap();
    let mut sc = Scenario::from_json(json).unwrap();
    // These tests are about everything but arrival: they switch to the instant model unless they name one.
    if !json.contains("\"arrival\"") {
        sc.host.behaviour.arrival = crate::Arrival::INSTANT;
    }
    let st = State::new(&sc, dir.path(), &opts).unwrap();
    Fx { st, _dir: dir }
}

fn fx() -> Fx {
    fx_with(EXAMPLE, HostOptions::default())
}

/// The example host playing `v`.
fn fx_v(v: CsiProxyVersion) -> Fx {
    fx_with(
        EXAMPLE,
        HostOptions {
            csi_proxy_version: Some(v),
            ..HostOptions::default()
        },
    )
}

fn p(rel: &str) -> String {
    format!(r"{K}\{rel}")
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

// ---------- scenario ----------

#[test]
fn example_scenario_loads_and_empty_scenario_is_valid() {
    let f = fx();
    assert_eq!(f.disks().iter().filter(|d| d.number.is_some()).count(), 2);
    let e = fx_with("{}", HostOptions::default());
    assert!(e.disks().is_empty());
    assert!(e.path_exists(K).unwrap());
}

#[test]
fn unknown_scenario_fields_are_rejected() {
    assert!(Scenario::from_json(r#"{"hosts": {}}"#).is_err());
}

// ---------- filesystem: validation ----------

#[test]
fn filesystem_calls_validate_paths() {
    let mut f = fx();
    let outside = r"C:\Windows\Temp\x";
    let want = format!("path: {outside} is not within the working directories: [{K}]");
    assert_eq!(host_err(f.path_exists(outside)), want);
    assert_eq!(host_err(f.mkdir(outside)), want);
    assert_eq!(host_err(f.rmdir(outside, true)), want);
    assert!(
        host_err(f.create_symlink(outside, &p("a")))
            .contains("is not within the working directories")
    );
    assert!(
        host_err(f.create_symlink(&p("a"), outside))
            .contains("is not within the working directories")
    );
    assert!(host_err(f.mkdir(&p(r"a\..\..\b"))).starts_with("path contains invalid characters"));
    assert!(
        host_err(f.mkdir(&format!(r"\\?\{K}\x"))).starts_with(r"invalid character \ at beginning")
    );
}

#[test]
fn working_dir_flag_extends_allowed_roots() {
    let opts = HostOptions {
        working_dirs: vec![r"C:\csi".into()],
        ..HostOptions::default()
    };
    let f = fx_with("{}", opts);
    f.mkdir(r"C:\csi\state").unwrap();
    assert!(f.path_exists(r"C:\csi\state").unwrap());
    assert!(f.mkdir(r"C:\other").is_err());
}

#[test]
fn kubelet_path_flag_changes_the_root() {
    let opts = HostOptions {
        kubelet_path: Some(r"D:\kubelet".into()),
        ..HostOptions::default()
    };
    let f = fx_with("{}", opts);
    f.mkdir(r"D:\kubelet\pods\x").unwrap();
    assert!(f.mkdir(&p("x")).is_err());
}

#[test]
fn paths_are_case_insensitive() {
    let f = fx();
    f.mkdir(&p(r"Pods\ABC")).unwrap();
    assert!(f.path_exists(r"c:\VAR\LIB\KUBELET\pods\abc").unwrap());
    f.mkdir(r"c:\var\lib\kubelet\PODS\abc\x").unwrap();
    assert!(f.path_exists(&p(r"pods\ABC\X")).unwrap());
}

// ---------- filesystem: semantics ----------

#[test]
fn mkdir_is_idempotent_and_creates_parents() {
    let f = fx();
    let d = p(r"plugins\kubernetes.io\csi\pv\pv1\globalmount");
    f.mkdir(&d).unwrap();
    f.mkdir(&d).unwrap();
    assert!(f.path_exists(&d).unwrap());
}

#[test]
fn mkdir_over_a_file_or_dangling_link_fails() {
    let mut f = fx();
    f.write_file(&p("file"), b"x").unwrap();
    assert_eq!(
        host_err(f.mkdir(&p("file"))),
        format!(
            r"mkdir {}: The system cannot find the path specified.",
            p("file")
        )
    );
    f.create_symlink(&p("nowhere"), &p("dangling")).unwrap();
    assert!(
        host_err(f.mkdir(&p("dangling")))
            .ends_with("Cannot create a file when that file already exists.")
    );
}

#[test]
fn rmdir_non_force_needs_an_existing_empty_dir() {
    let mut f = fx();
    let d = p("d");
    assert_eq!(
        host_err(f.rmdir(&d, false)),
        format!("remove {d}: The system cannot find the file specified.")
    );
    f.mkdir(&format!(r"{d}\child")).unwrap();
    assert_eq!(
        host_err(f.rmdir(&d, false)),
        format!("remove {d}: The directory is not empty.")
    );
    f.rmdir(&format!(r"{d}\child"), false).unwrap();
    f.rmdir(&d, false).unwrap();
    assert!(!f.path_exists(&d).unwrap());
}

#[test]
fn rmdir_force_is_idempotent_and_recursive() {
    let mut f = fx();
    let d = p("tree");
    f.rmdir(&d, true).unwrap();
    f.mkdir(&format!(r"{d}\a\b")).unwrap();
    f.write_file(&format!(r"{d}\a\b\f.txt"), b"x").unwrap();
    f.rmdir(&d, true).unwrap();
    assert!(!f.path_exists(&d).unwrap());
}

#[test]
fn rmdir_on_a_link_removes_the_link_not_the_target() {
    let mut f = fx();
    f.mkdir(&p("src")).unwrap();
    f.write_file(&p(r"src\keep.txt"), b"keep").unwrap();
    f.create_symlink(&p("src"), &p("l1")).unwrap();
    f.create_symlink(&p("src"), &p("l2")).unwrap();
    f.rmdir(&p("l1"), false).unwrap();
    f.rmdir(&p("l2"), true).unwrap();
    assert_eq!(f.read_file(&p(r"src\keep.txt")).unwrap(), b"keep");
}

#[test]
fn rmdir_force_on_a_dir_holding_links_keeps_link_targets() {
    let mut f = fx();
    f.mkdir(&p("src")).unwrap();
    f.write_file(&p(r"src\keep.txt"), b"keep").unwrap();
    f.mkdir(&p(r"pod\volumes")).unwrap();
    f.create_symlink(&p("src"), &p(r"pod\volumes\mount"))
        .unwrap();
    f.rmdir(&p("pod"), true).unwrap();
    assert_eq!(f.read_file(&p(r"src\keep.txt")).unwrap(), b"keep");
}

#[test]
fn create_symlink_makes_target_path_point_to_source_path() {
    let mut f = fx();
    let staging = p(r"plugins\x\globalmount");
    let publish = p(r"pods\uid\volumes\mount");
    f.mkdir(&staging).unwrap();
    f.mkdir(&p(r"pods\uid\volumes")).unwrap();
    f.create_symlink(&staging, &publish).unwrap();
    assert_eq!(
        f.read_link(&publish).unwrap().to_lowercase(),
        staging.to_lowercase()
    );
    f.write_file(&format!(r"{publish}\via-publish.txt"), b"1")
        .unwrap();
    assert_eq!(
        f.read_file(&format!(r"{staging}\via-publish.txt")).unwrap(),
        b"1"
    );
}

#[test]
fn create_symlink_fails_if_target_exists() {
    let mut f = fx();
    f.mkdir(&p("src")).unwrap();
    f.mkdir(&p("dst")).unwrap();
    assert_eq!(
        host_err(f.create_symlink(&p("src"), &p("dst"))),
        format!(
            "symlink {} {}: Cannot create a file when that file already exists.",
            p("src"),
            p("dst")
        )
    );
    f.rmdir(&p("dst"), false).unwrap();
    f.create_symlink(&p("src"), &p("dst")).unwrap();
}

#[test]
fn create_symlink_does_not_need_the_source_to_exist_but_needs_the_parent() {
    let mut f = fx();
    f.create_symlink(&p("missing"), &p("l")).unwrap();
    assert!(
        host_err(f.create_symlink(&p("missing"), &p(r"no\parent\l")))
            .ends_with("The system cannot find the path specified.")
    );
}

#[test]
fn path_exists_uses_lstat() {
    let mut f = fx();
    assert!(!f.path_exists(&p("l")).unwrap());
    f.create_symlink(&p("missing"), &p("l")).unwrap();
    assert!(f.path_exists(&p("l")).unwrap());
}

#[test]
fn is_symlink_quirks() {
    let mut f = fx();
    // No validation: a path outside the kubelet dir is answered (not rejected).
    assert!(!f.is_symlink(r"C:\").unwrap());
    // Missing path is an error.
    assert_eq!(
        host_err(f.is_symlink(&p("nope"))),
        format!(
            "CreateFile {}: The system cannot find the file specified.",
            p("nope")
        )
    );
    // Directory: false; live link: true; dangling link: false.
    f.mkdir(&p("dir")).unwrap();
    assert!(!f.is_symlink(&p("dir")).unwrap());
    f.create_symlink(&p("dir"), &p("live")).unwrap();
    assert!(f.is_symlink(&p("live")).unwrap());
    f.create_symlink(&p("gone"), &p("dangling")).unwrap();
    assert!(!f.is_symlink(&p("dangling")).unwrap());
}

// ---------- disks ----------

fn connect(f: &mut Fx, iqn: &str) -> Vec<u32> {
    f.add_target_portal("192.0.2.10", 3260).unwrap();
    let (auth, user, sec) = if iqn.ends_with("pvc-data") {
        (AuthType::OneWayChap, "initiator1", "chap-secret-12")
    } else {
        (AuthType::None, "", "")
    };
    f.connect_target("192.0.2.10", 3260, iqn, auth, user, &secret(sec))
        .unwrap();
    let disks: Vec<u32> = f
        .get_target_disks("192.0.2.10", 3260, iqn)
        .unwrap()
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    // The default SAN policy (OfflineShared) leaves iSCSI disks offline: bring them online as the driver does.
    for n in &disks {
        f.set_disk_state(*n, true).unwrap();
    }
    disks
}

#[test]
fn disk_locations_leave_bus_empty_and_skip_short_locations() {
    let json = r#"{"disks":[{"size":1073741824},{"size":1073741824,"location":"Adapter 0 : Target 0 : LUN 1"}]}"#;
    let f = fx_with(json, HostOptions::default());
    let locs = f.list_disk_locations();
    assert_eq!(locs.len(), 1);
    let l = &locs[&0];
    assert_eq!(
        (
            l.adapter.as_str(),
            l.bus.as_str(),
            l.target.as_str(),
            l.lun_id.as_str()
        ),
        ("0", "", "0", "0")
    );
}

#[test]
fn lun_numbers_collide_across_targets_and_adapters() {
    let mut f = fx();
    let a = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-empty");
    let b = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-data");
    assert_eq!(a.len(), 1);
    assert_eq!(b.len(), 2, "several LUNs per target");
    let locs = f.list_disk_locations();
    let la = &locs[&a[0]];
    let lb = &locs[&b[0]];
    assert_eq!(la.lun_id, "0");
    assert_eq!(lb.lun_id, "0");
    assert_eq!(la.adapter, "2");
    assert_ne!(la.target, lb.target);
    // The local OS disk is LUN 0 on adapter 0 as well.
    assert_eq!(locs[&0].lun_id, "0");
    assert_eq!(locs[&0].adapter, "0");
}

#[test]
fn disk_ids_page83_and_unopenable_disk_fails_the_whole_call() {
    let f = fx();
    let ids = f.list_disk_ids().unwrap();
    assert_eq!(ids[&0].0, "6000c29d6c5e4f2a8b7f1c2d3e4f5a6b");
    assert_eq!(ids[&1].1, "  TEMPDISK01  ");
    let f2 = fx_with(
        r#"{"disks":[{"size":1073741824},{"size":1073741824,"unopenable":true}]}"#,
        HostOptions::default(),
    );
    assert!(host_err(f2.list_disk_ids()).contains("Access is denied"));
}

#[test]
fn generated_page83_is_lowercase_hex() {
    let mut f = fx();
    let n = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-empty")[0];
    let id = &f.list_disk_ids().unwrap()[&n].0;
    assert_eq!(id.len(), 32);
    assert!(
        id.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
}

#[test]
fn disk_stats_is_the_disk_size() {
    let f = fx();
    assert_eq!(f.get_disk_stats(0).unwrap(), 137438953472);
    assert!(host_err(f.get_disk_stats(42)).contains("'Number' equal to '42'"));
}

#[test]
fn set_disk_state_is_idempotent_and_offline_hides_volumes() {
    let mut f = fx();
    let n = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-data")[0];
    let vols = f.list_volumes_on_disk(n, 0).unwrap();
    assert_eq!(vols.len(), 1);
    f.set_disk_state(n, false).unwrap();
    f.set_disk_state(n, false).unwrap();
    assert!(!f.get_disk_state(n).unwrap());
    // PowerShell era: the partitions are listed but have no volume, and stdout "" splits into [""].
    assert_eq!(f.list_volumes_on_disk(n, 0).unwrap(), vec![String::new()]);
    assert!(f.is_volume_formatted(&vols[0]).is_err());
    f.set_disk_state(n, true).unwrap();
    assert!(f.is_volume_formatted(&vols[0]).unwrap());
}

#[test]
fn iscsi_disk_can_arrive_offline() {
    let mut f = fx();
    f.set_mutual_chap_secret(&secret("target-secret-1"))
        .unwrap();
    f.add_target_portal("192.0.2.10", 0).unwrap();
    let iqn = "iqn.2026-01.io.wincsi:pvc-mutual";
    f.connect_target(
        "192.0.2.10",
        0,
        iqn,
        AuthType::MutualChap,
        "initiator1",
        &secret("chap-secret-12"),
    )
    .unwrap();
    let n: u32 = f.get_target_disks("192.0.2.10", 0, iqn).unwrap()[0]
        .parse()
        .unwrap();
    assert!(!f.get_disk_state(n).unwrap());
}

#[test]
fn partition_disk_initialises_raw_disks_and_is_a_noop_when_partitioned() {
    let mut f = fx();
    let n = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-empty")[0];
    // PowerShell era: `Get-Partition` on a RAW disk fails.
    assert!(host_err(f.list_volumes_on_disk(n, 0)).contains("No MSFT_Partition objects found"));
    f.partition_disk(n).unwrap();
    let d = f.disks().iter().find(|d| d.number == Some(n)).unwrap();
    assert_eq!(d.partition_style, crate::scenario::PartitionStyle::Gpt);
    assert_eq!(
        d.partitions[0].kind,
        crate::scenario::PartitionKind::Reserved
    );
    let vols = f.list_volumes_on_disk(n, 0).unwrap();
    assert_eq!(vols.len(), 1);
    assert_eq!(
        f.list_volumes_on_disk(n, 1).unwrap(),
        vec![String::new()],
        "the reserved partition has no volume"
    );
    assert_eq!(f.list_volumes_on_disk(n, 2).unwrap(), vols);
    f.partition_disk(n).unwrap();
    assert_eq!(
        f.list_volumes_on_disk(n, 0).unwrap(),
        vols,
        "second PartitionDisk is a no-op"
    );
    assert!(f.data_loss_events().is_empty());
}

#[test]
fn volume_ids_use_the_unique_id_form() {
    let f = fx();
    let v = &f.list_volumes_on_disk(0, 0).unwrap()[0];
    assert!(v.starts_with(r"\\?\Volume{") && v.ends_with(r"}\"), "{v}");
    // Exact form only: without the trailing backslash the volume is not found.
    assert!(f.is_volume_formatted(v.trim_end_matches('\\')).is_err());
    assert!(
        f.is_volume_formatted(&v.to_uppercase().replace("VOLUME", "Volume"))
            .unwrap()
    );
}

#[test]
fn partition_disk_on_a_disk_with_foreign_data_is_a_data_loss_event() {
    let mut f = fx();
    f.add_target_portal("192.0.2.10", 3260).unwrap();
    let iqn = "iqn.2026-01.io.wincsi:linux-ext4";
    f.connect_target("192.0.2.10", 3260, iqn, AuthType::None, "", &secret(""))
        .unwrap();
    let n: u32 = f.get_target_disks("192.0.2.10", 3260, iqn).unwrap()[0]
        .parse()
        .unwrap();
    f.set_disk_state(n, true).unwrap();
    f.partition_disk(n).unwrap();
    let ev = f.data_loss_events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].rpc, "PartitionDisk");
    assert_eq!(ev[0].disk_id, "linux-ext4");
}

/// A disk whose device holds another system's bytes (scenario `content`) holds data Windows cannot see: csi-proxy's
/// PartitionDisk, which cannot read sectors, initialises it and the loss is recorded; a disk whose content is only
/// zeros holds nothing.
#[test]
fn partition_disk_on_a_disk_with_content_is_a_data_loss_event() {
    let json = r#"{"disks":[{"size":1073741824,"content":[{"signature":"xfs"}]},
                            {"size":1073741824,"content":[{"offset":4096,"hex":"0000"}]}]}"#;
    let mut f = fx_with(json, HostOptions::default());
    assert!(f.disks()[0].foreign_data && !f.disks()[1].foreign_data);
    f.partition_disk(0).unwrap();
    f.partition_disk(1).unwrap();
    let ev = f.data_loss_events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].rpc.as_str(), ev[0].disk_number),
        ("PartitionDisk", 0)
    );
    assert!(
        f.disks()[0].content.is_empty(),
        "initialising drops the old bytes"
    );
    assert!(
        Scenario::from_json(r#"{"disks":[{"size":4096,"content":[{"signature":"nope"}]}]}"#)
            .and_then(|sc| {
                let dir = tempfile::tempdir().unwrap();
                State::new(&sc, dir.path(), &HostOptions::default()).map(|_| ())
            })
            .is_err()
    );
}

#[test]
fn partition_disk_refuses_read_only_and_offline_disks() {
    let json =
        r#"{"disks":[{"size":1073741824,"read_only":true},{"size":1073741824,"online":false}]}"#;
    let mut f = fx_with(json, HostOptions::default());
    assert!(host_err(f.partition_disk(0)).contains("The disk is read only."));
    assert!(host_err(f.partition_disk(1)).contains("The disk is offline."));
}

#[test]
fn format_volume_is_unguarded_and_records_data_loss() {
    let mut f = fx();
    let n = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-data")[0];
    let v = f.list_volumes_on_disk(n, 0).unwrap()[0].clone();
    assert!(f.is_volume_formatted(&v).unwrap());
    assert_eq!(f.get_volume_stats(&v).unwrap().1, 8);
    f.format_volume(&v).unwrap();
    assert!(f.is_volume_formatted(&v).unwrap());
    assert_eq!(f.get_volume_stats(&v).unwrap().1, 0, "data is gone");
    let ev = f.data_loss_events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].rpc, "FormatVolume");
    assert_eq!(ev[0].volume_id.as_deref(), Some(v.as_str()));
}

#[test]
fn formatting_an_empty_volume_is_not_data_loss() {
    let mut f = fx();
    let n = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-empty")[0];
    f.partition_disk(n).unwrap();
    let v = f.list_volumes_on_disk(n, 0).unwrap()[0].clone();
    assert!(!f.is_volume_formatted(&v).unwrap());
    f.format_volume(&v).unwrap();
    f.format_volume(&v).unwrap();
    assert!(f.is_volume_formatted(&v).unwrap());
    assert!(f.data_loss_events().is_empty());
}

#[test]
fn resize_skips_small_growth_and_shrinks_and_grows_otherwise() {
    // The 100 MiB rule (v1.2.0+); v1.1.3's rule is a profile row.
    let mut f = fx_v(CsiProxyVersion::V1_3_0);
    let n = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-empty")[0];
    f.partition_disk(n).unwrap();
    let v = f.list_volumes_on_disk(n, 0).unwrap()[0].clone();
    let (before, _) = f.get_volume_stats(&v).unwrap();
    f.resize_volume(&v, 0).unwrap();
    assert_eq!(f.get_volume_stats(&v).unwrap().0, before, "already at max");
    f.resize_volume(&v, before - 500 * 1024 * 1024).unwrap();
    assert_eq!(f.get_volume_stats(&v).unwrap().0, before, "never shrinks");
    f.set_disk_size("pvc-empty", 1024 * 1024 * 1024 + 50 * 1024 * 1024)
        .unwrap();
    f.resize_volume(&v, 0).unwrap();
    assert_eq!(
        f.get_volume_stats(&v).unwrap().0,
        before,
        "growth < 100 MiB is skipped"
    );
    f.set_disk_size("pvc-empty", 2 * 1024 * 1024 * 1024)
        .unwrap();
    // v1.3.0 reports a non-zero ReturnValue with a nil error (`pkg/os/volume/api.go:233-236`).
    assert!(
        host_err(f.resize_volume(&v, 4 * 1024 * 1024 * 1024))
            .ends_with("finalSize 4294967296, error: <nil>")
    );
    f.resize_volume(&v, 0).unwrap();
    let (after, _) = f.get_volume_stats(&v).unwrap();
    assert_eq!(after as u64, 2 * 1024 * 1024 * 1024 - 18 * 1024 * 1024);
    assert_eq!(f.get_disk_stats(n).unwrap(), 2 * 1024 * 1024 * 1024);
}

#[test]
fn disk_number_from_volume_id() {
    let mut f = fx();
    let n = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-data")[0];
    let v = f.list_volumes_on_disk(n, 0).unwrap()[0].clone();
    assert_eq!(f.get_disk_number_from_volume_id(&v).unwrap(), n);
    f.write_volume_cache(&v).unwrap();
    assert!(
        f.write_volume_cache(r"\\?\Volume{00000000-0000-0000-0000-000000000000}\")
            .is_err()
    );
}

// ---------- mount points ----------

fn data_volume(f: &mut Fx) -> String {
    let n = connect(f, "iqn.2026-01.io.wincsi:pvc-data")[0];
    f.list_volumes_on_disk(n, 0).unwrap()[0].clone()
}

#[test]
fn mount_volume_needs_an_existing_empty_dir_and_is_idempotent() {
    // WMI era texts and the idempotent re-mount; the PowerShell era is a profile row.
    let mut f = fx_v(CsiProxyVersion::V1_3_0);
    let v = data_volume(&mut f);
    let t = p(r"plugins\pv\globalmount");
    assert!(
        host_err(f.mount_volume(&v, &t)).ends_with("The system cannot find the file specified.")
    );
    f.mkdir(&format!(r"{t}\x")).unwrap();
    assert!(host_err(f.mount_volume(&v, &t)).ends_with("error: not a mounted folder"));
    f.rmdir(&format!(r"{t}\x"), false).unwrap();
    f.mount_volume(&v, &t).unwrap();
    f.mount_volume(&v, &t).unwrap();
    assert_eq!(
        f.read_file(&format!(r"{t}\db\data.bin")).unwrap(),
        b"precious"
    );
    assert!(
        f.is_symlink(&t).unwrap(),
        "mounted folders count as links (v1.3.0)"
    );
    assert!(f.path_exists(&t).unwrap());
    assert_eq!(f.get_volume_id_from_target_path(&t).unwrap(), v);
    assert_eq!(
        host_err(f.mount_volume(&v, "")),
        "MountVolumeRequest.TargetPath is empty"
    );
    assert_eq!(
        host_err(f.mount_volume("", &t)),
        "MountVolumeRequest.VolumeId is empty"
    );
}

#[test]
fn mounting_another_volume_on_a_mount_point_fails() {
    let mut f = fx_v(CsiProxyVersion::V1_3_0);
    let v = data_volume(&mut f);
    let n = connect(&mut f, "iqn.2026-01.io.wincsi:pvc-empty")[0];
    f.partition_disk(n).unwrap();
    let other = f.list_volumes_on_disk(n, 0).unwrap()[0].clone();
    let t = p("m");
    f.mkdir(&t).unwrap();
    f.mount_volume(&v, &t).unwrap();
    assert!(host_err(f.mount_volume(&other, &t)).ends_with("The directory is not empty."));
}

#[test]
fn unmount_of_nothing_fails_and_unmount_keeps_the_directory() {
    let mut f = fx_v(CsiProxyVersion::V1_3_0);
    let v = data_volume(&mut f);
    let t = p("m");
    f.mkdir(&t).unwrap();
    assert!(
        host_err(f.unmount_volume(&v, &t))
            .ends_with("The file or directory is not a reparse point.")
    );
    f.mount_volume(&v, &t).unwrap();
    f.unmount_volume(&v, &t).unwrap();
    assert!(f.path_exists(&t).unwrap());
    assert!(!f.is_symlink(&t).unwrap());
    assert!(f.unmount_volume(&v, &t).is_err());
    assert_eq!(
        host_err(f.get_volume_id_from_target_path(&t)),
        "not a mounted folder"
    );
}

#[test]
fn mount_point_dangles_when_the_disk_goes_away() {
    let mut f = fx();
    let v = data_volume(&mut f);
    let t = p("m");
    f.mkdir(&t).unwrap();
    f.mount_volume(&v, &t).unwrap();
    f.disconnect_target("192.0.2.10", 3260, "iqn.2026-01.io.wincsi:pvc-data")
        .unwrap();
    assert!(f.path_exists(&t).unwrap());
    assert!(!f.is_symlink(&t).unwrap());
    // UnmountVolume flushes first, so it fails once the volume is gone; Rmdir cleans up.
    assert!(f.unmount_volume(&v, &t).is_err());
    f.rmdir(&t, false).unwrap();
    // Data survives on the target: reconnecting brings it back.
    connect(&mut f, "iqn.2026-01.io.wincsi:pvc-data");
    f.mkdir(&t).unwrap();
    f.mount_volume(&v, &t).unwrap();
    assert_eq!(
        f.read_file(&format!(r"{t}\db\data.bin")).unwrap(),
        b"precious"
    );
}

#[test]
fn rmdir_of_a_mount_point_keeps_the_volume_data() {
    let mut f = fx();
    let v = data_volume(&mut f);
    let t = p("m");
    f.mkdir(&t).unwrap();
    f.mount_volume(&v, &t).unwrap();
    f.rmdir(&t, true).unwrap();
    assert!(!f.path_exists(&t).unwrap());
    assert_eq!(f.get_volume_stats(&v).unwrap().1, 8);
}

// ---------- SMB ----------

const SRV: &str = r"\\fileserver.corp.example";

#[test]
fn smb_mapping_and_link_make_one_share_visible_through_every_path() {
    let mut f = fx();
    let l1 = p(r"plugins\smb\pv1\globalmount");
    let l2 = p(r"plugins\smb\pv2\globalmount");
    f.mkdir(&p(r"plugins\smb\pv1")).unwrap();
    f.mkdir(&p(r"plugins\smb\pv2")).unwrap();
    f.new_smb_global_mapping(
        &format!("{}/data", SRV.replace('\\', "/")),
        &l2,
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    // pv1 is a subdirectory the share does not have yet: the PowerShell era (the default release) refuses a link to
    // it (profile row `smb_link_target`); once it exists on the share, the link is made.
    let refused = f.new_smb_global_mapping(
        &format!(r"{SRV}\data\pv1"),
        &l1,
        r"CORP\alice",
        &secret("x"),
    );
    assert!(refused.is_err(), "{refused:?}");
    f.write_file(&format!(r"{l2}\pv1\a.txt"), b"A").unwrap();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data\pv1"),
        &l1,
        r"CORP\alice",
        &secret("x"),
    )
    .unwrap();
    assert_eq!(f.mappings().len(), 1);
    assert!(f.mappings().contains_key(r"\\fileserver.corp.example\data"));
    assert_eq!(
        f.read_link(&l1).unwrap(),
        r"\\fileserver.corp.example\data\pv1\"
    );
    assert!(
        f.read_link(&l2).unwrap().ends_with('\\'),
        "link target keeps a trailing backslash"
    );
    assert!(f.is_symlink(&l1).unwrap());
    assert_eq!(f.read_file(&format!(r"{l1}\a.txt")).unwrap(), b"A");
    assert_eq!(
        f.read_file(&format!(r"{SRV}\data\pv1\a.txt")).unwrap(),
        b"A"
    );
    assert_eq!(
        f.read_share_file("FileServer.corp.example", "DATA", "pv1/a.txt")
            .unwrap(),
        b"A"
    );
    assert_eq!(
        f.read_file(&format!(r"{l2}\hello.txt")).unwrap(),
        b"hello from the file server\n"
    );
}

#[test]
fn smb_mapping_key_is_the_lowercased_root_and_reuse_ignores_credentials() {
    let mut f = fx();
    f.new_smb_global_mapping(
        r"\\FileServer.Corp.Example\Data\x",
        "",
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    // Credentials of a later request for the same root are silently ignored.
    f.new_smb_global_mapping(
        r"\\fileserver.corp.example\data",
        "",
        r"CORP\bob",
        &secret("wrong"),
    )
    .unwrap();
    let m = &f.mappings()[r"\\fileserver.corp.example\data"];
    assert_eq!(m.principal, r"CORP\alice");
    assert!(m.require_privacy);
}

#[test]
fn smb_error_1219_for_another_principal_on_the_same_server() {
    let mut f = fx();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        "",
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    let e = host_err(f.new_smb_global_mapping(
        &format!(r"{SRV}\team"),
        "",
        r"CORP\bob",
        &secret("bob-password-1"),
    ));
    assert!(
        e.starts_with(
            "NewSmbGlobalMapping failed. output: \"New-SmbGlobalMapping : Multiple connections"
        ),
        "{e}"
    );
    assert!(e.contains("Windows System Error 1219"));
    assert!(e.ends_with(", err: exit status 1"));
    // Same principal on another share of that server is fine.
    f.new_smb_global_mapping(
        &format!(r"{SRV}\team"),
        "",
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
}

#[test]
fn smb_errors_53_67_1326_and_access_denied() {
    let mut f = fx();
    let pw = secret("alice-password-1");
    assert!(
        host_err(f.new_smb_global_mapping(r"\\nosuch\data", "", r"CORP\alice", &pw))
            .contains("Windows System Error 53")
    );
    assert!(
        host_err(f.new_smb_global_mapping(r"\\offline-nas\x", "", r"CORP\alice", &pw))
            .contains("The network path was not found.")
    );
    assert!(
        host_err(f.new_smb_global_mapping(&format!(r"{SRV}\nosuch"), "", r"CORP\alice", &pw))
            .contains("Windows System Error 67")
    );
    let e = host_err(f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        "",
        r"CORP\alice",
        &secret("bad"),
    ));
    assert!(e.contains("The user name or password is incorrect.") && e.contains("1326"));
    assert!(!e.contains("bad\""), "the password never appears in errors");
    assert!(
        host_err(f.new_smb_global_mapping(
            &format!(r"{SRV}\team"),
            "",
            r"CORP\bob",
            &secret("bob-password-1")
        ))
        .contains("Access is denied.")
    );
    assert!(host_err(f.new_smb_global_mapping("", "", "", &pw)) == "remote path is empty");
    assert!(f.mappings().is_empty());
}

#[test]
fn smb_username_forms() {
    let mut f = fx();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        "",
        "alice@CORP",
        &secret("alice-password-1"),
    )
    .unwrap();
    f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
        .unwrap();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        "",
        "localsvc",
        &secret("local-password-1"),
    )
    .unwrap();
    f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
        .unwrap();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        "",
        r"fileserver.corp.example\localsvc",
        &secret("local-password-1"),
    )
    .unwrap();
    f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
        .unwrap();
    // A domain account needs its domain.
    assert!(
        f.new_smb_global_mapping(
            &format!(r"{SRV}\data"),
            "",
            "alice",
            &secret("alice-password-1")
        )
        .is_err()
    );
}

#[test]
fn require_privacy_fails_on_servers_without_encryption() {
    let mut f = fx();
    let guest = secret("guest-password");
    assert!(
        host_err(f.new_smb_global_mapping(r"\\legacy-nas\public", "", "guest", &guest))
            .contains("Access is denied.")
    );
    // v1.1.3 has no -require-privacy flag (it would not start); v1.2.0+ honour it.
    let opts = HostOptions {
        require_privacy: Some(false),
        csi_proxy_version: Some(CsiProxyVersion::V1_1_3),
        ..HostOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let e = State::new(&Scenario::from_json(EXAMPLE).unwrap(), dir.path(), &opts).unwrap_err();
    assert!(
        e.to_string()
            .contains("flag provided but not defined: -require-privacy"),
        "{e}"
    );
    let opts = HostOptions {
        require_privacy: Some(false),
        csi_proxy_version: Some(CsiProxyVersion::V1_2_1),
        ..HostOptions::default()
    };
    let mut g = fx_with(EXAMPLE, opts);
    g.new_smb_global_mapping(r"\\legacy-nas\public", "", "guest", &guest)
        .unwrap();
    assert!(!g.mappings()[r"\\legacy-nas\public"].require_privacy);
    let _ = &mut f;
}

#[test]
fn remove_smb_mapping_fails_when_absent_and_leaves_the_link() {
    let mut f = fx();
    let e = host_err(f.remove_smb_global_mapping(&format!(r"{SRV}\data")));
    assert!(e.starts_with("UnmountSmbShare failed. output: \"Remove-SmbGlobalMapping : No MSFT_SmbGlobalMapping objects found"), "{e}");
    let l = p("g");
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        &l,
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    assert!(f.is_symlink(&l).unwrap());
    f.remove_smb_global_mapping(&format!(r"{SRV}\DATA\sub\dir"))
        .unwrap();
    assert!(f.path_exists(&l).unwrap(), "the link stays");
    // IsSymlink's one-hop Lstat of \\server\share\ without a mapping: access denied (configurable).
    assert_eq!(
        host_err(f.is_symlink(&l)),
        r"CreateFile \\fileserver.corp.example\data\: Access is denied."
    );
    assert!(f.read_file(&format!(r"{l}\hello.txt")).is_err());
}

#[test]
fn smb_local_path_is_validated_and_must_not_exist() {
    let mut f = fx();
    let pw = secret("alice-password-1");
    let e = host_err(f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        r"C:\elsewhere",
        r"CORP\alice",
        &pw,
    ));
    assert!(e.contains("is not within the working directories"));
    assert_eq!(
        f.mappings().len(),
        1,
        "the mapping step ran before the link was validated"
    );
    f.mkdir(&p("exists")).unwrap();
    let e = host_err(f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        &p("exists"),
        r"CORP\alice",
        &pw,
    ));
    assert!(
        e.starts_with(&format!(
            r"creating link {} to {SRV}\data failed with error:",
            p("exists")
        )),
        "{e}"
    );
    assert!(e.contains("already exists"));
}

#[test]
fn rotated_password_makes_the_mapping_invalid_and_it_is_recreated() {
    let mut f = fx();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        "",
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    f.set_smb_password(
        "fileserver.corp.example",
        "alice",
        secret("alice-password-2"),
    )
    .unwrap();
    // Old credentials: the invalid mapping is removed, re-creation fails with logon failure.
    assert!(
        f.new_smb_global_mapping(
            &format!(r"{SRV}\data"),
            "",
            r"CORP\alice",
            &secret("alice-password-1")
        )
        .is_err()
    );
    assert!(f.mappings().is_empty());
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        "",
        r"CORP\alice",
        &secret("alice-password-2"),
    )
    .unwrap();
    assert_eq!(f.mappings().len(), 1);
}

// ---------- iSCSI ----------

#[test]
fn add_target_portal_is_idempotent_and_remove_fails_when_absent() {
    let mut f = fx();
    assert_eq!(
        f.list_target_portals(),
        vec![("192.0.2.20".to_string(), 3260)],
        "preconfigured portal"
    );
    f.add_target_portal("192.0.2.10", 0).unwrap();
    f.add_target_portal("192.0.2.10", 3260).unwrap();
    assert_eq!(f.list_target_portals().len(), 2);
    f.remove_target_portal("192.0.2.10", 3260).unwrap();
    assert!(
        host_err(f.remove_target_portal("192.0.2.10", 3260))
            .contains("No MSFT_iSCSITargetPortal objects found")
    );
    assert!(
        host_err(f.add_target_portal("198.51.100.1", 3260))
            .starts_with("error adding target portal. cmd New-IscsiTargetPortal")
    );
}

#[test]
fn discovery_chap_portals_cannot_be_added_through_csi_proxy() {
    let json = r#"{"iscsi":{"portals":[{"address":"a","discovery_chap":{"username":"u","secret":"s"},"targets":[]}]}}"#;
    let mut f = fx_with(json, HostOptions::default());
    assert!(host_err(f.add_target_portal("a", 3260)).contains("Authentication Failure"));
    // The example's preconfigured discovery-CHAP portal works.
    let mut g = fx();
    assert_eq!(
        g.discover_target_portal("192.0.2.20", 3260).unwrap(),
        vec!["iqn.2026-01.io.wincsi:secure"]
    );
}

#[test]
fn connect_needs_a_discovered_target_and_is_idempotent() {
    // Idempotent from v1.3.0; the PowerShell era's error is a profile row.
    let mut f = fx_v(CsiProxyVersion::V1_3_0);
    let iqn = "iqn.2026-01.io.wincsi:pvc-empty";
    assert!(
        f.connect_target("192.0.2.10", 3260, iqn, AuthType::None, "", &secret(""))
            .is_err()
    );
    f.add_target_portal("192.0.2.10", 3260).unwrap();
    assert_eq!(
        f.discover_target_portal("192.0.2.10", 3260).unwrap().len(),
        4
    );
    f.connect_target("192.0.2.10", 3260, iqn, AuthType::None, "", &secret(""))
        .unwrap();
    let disks = f.get_target_disks("192.0.2.10", 3260, iqn).unwrap();
    f.connect_target("192.0.2.10", 3260, iqn, AuthType::None, "", &secret(""))
        .unwrap();
    assert_eq!(f.get_target_disks("192.0.2.10", 3260, iqn).unwrap(), disks);
    assert_eq!(f.sessions().len(), 1);
}

#[test]
fn disks_appear_on_connect_and_vanish_on_disconnect() {
    let mut f = fx_v(CsiProxyVersion::V1_3_0);
    let iqn = "iqn.2026-01.io.wincsi:pvc-data";
    let before = f.list_disk_locations().len();
    let disks = connect(&mut f, iqn);
    assert_eq!(disks, vec![2, 3]);
    assert_eq!(f.list_disk_locations().len(), before + 2);
    f.disconnect_target("192.0.2.10", 3260, iqn).unwrap();
    f.disconnect_target("192.0.2.10", 3260, iqn).unwrap();
    assert_eq!(f.list_disk_locations().len(), before);
    assert!(
        f.get_target_disks("192.0.2.10", 3260, iqn)
            .unwrap()
            .is_empty()
    );
    assert!(f.get_disk_stats(2).is_err());
}

#[test]
fn chap_one_way_and_mutual() {
    let mut f = fx();
    f.add_target_portal("192.0.2.10", 3260).unwrap();
    let one = "iqn.2026-01.io.wincsi:pvc-data";
    assert!(
        host_err(f.connect_target("192.0.2.10", 3260, one, AuthType::None, "", &secret("")))
            .contains("Authentication Failure")
    );
    assert!(
        host_err(f.connect_target(
            "192.0.2.10",
            3260,
            one,
            AuthType::OneWayChap,
            "initiator1",
            &secret("short")
        ))
        .contains("CHAP secret given is invalid")
    );
    assert!(
        f.connect_target(
            "192.0.2.10",
            3260,
            one,
            AuthType::OneWayChap,
            "initiator1",
            &secret("wrong-secret-1")
        )
        .is_err()
    );
    f.connect_target(
        "192.0.2.10",
        3260,
        one,
        AuthType::OneWayChap,
        "initiator1",
        &secret("chap-secret-12"),
    )
    .unwrap();
    let mutual = "iqn.2026-01.io.wincsi:pvc-mutual";
    let s = secret("chap-secret-12");
    assert!(
        f.connect_target(
            "192.0.2.10",
            3260,
            mutual,
            AuthType::OneWayChap,
            "initiator1",
            &s
        )
        .is_err()
    );
    assert!(
        f.connect_target(
            "192.0.2.10",
            3260,
            mutual,
            AuthType::MutualChap,
            "initiator1",
            &s
        )
        .is_err(),
        "no initiator secret yet"
    );
    assert!(f.set_mutual_chap_secret(&secret("tiny")).is_err());
    f.set_mutual_chap_secret(&secret("target-secret-1"))
        .unwrap();
    f.connect_target(
        "192.0.2.10",
        3260,
        mutual,
        AuthType::MutualChap,
        "initiator1",
        &s,
    )
    .unwrap();
}

#[test]
fn removing_a_portal_forgets_its_targets() {
    let mut f = fx();
    let iqn = "iqn.2026-01.io.wincsi:pvc-empty";
    connect(&mut f, iqn);
    f.remove_target_portal("192.0.2.10", 3260).unwrap();
    assert!(f.get_target_disks("192.0.2.10", 3260, iqn).is_err());
    assert_eq!(f.sessions().len(), 1, "the session itself stays");
}

// ---------- system ----------

#[test]
fn system_bios_and_services() {
    let mut f = fx();
    assert_eq!(f.bios_serial_number(), "VMware-56 4d 2a 1b 9c 3e 5f 01");
    let s = f.get_service("DefragSvc").unwrap();
    assert_eq!(s.display_name, "Optimize drives");
    f.start_service("defragsvc").unwrap();
    f.start_service("defragsvc").unwrap();
    f.stop_service("defragsvc", false).unwrap();
    f.stop_service("defragsvc", false).unwrap();
    assert_eq!(
        host_err(f.get_service("nope")),
        "Cannot find any service with service name 'nope'."
    );
}

#[test]
fn stop_service_with_running_dependents_needs_force() {
    let json = r#"{"host":{"services":[{"name":"a","status":"running"},{"name":"b","status":"running","depends_on":["a"]}]}}"#;
    let mut f = fx_with(json, HostOptions::default());
    assert!(f.stop_service("a", false).is_err());
    f.stop_service("a", true).unwrap();
    assert_eq!(
        f.get_service("b").unwrap().status,
        crate::scenario::ServiceStatus::Stopped
    );
    assert!(f.start_service("b").is_err(), "dependency stopped");
}

// ---------- reboot and invariants ----------

#[test]
fn reboot_disconnects_mappings_drops_sessions_and_keeps_links() {
    let mut f = fx();
    let g = p("smbmount");
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        &g,
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    let v = data_volume(&mut f);
    let m = p("blockmount");
    f.mkdir(&m).unwrap();
    f.mount_volume(&v, &m).unwrap();
    f.start_service("defragsvc").unwrap();
    f.reboot().unwrap();
    assert_eq!(f.boots(), 2);
    assert_eq!(
        f.mappings()[r"\\fileserver.corp.example\data"].status,
        MappingStatus::Disconnected
    );
    assert!(f.sessions().is_empty());
    // PowerShell era: GetTargetDisks of a target without a session fails.
    assert!(
        host_err(f.get_target_disks("192.0.2.10", 3260, "iqn.2026-01.io.wincsi:pvc-data"))
            .contains("No matching MSFT_iSCSIConnection objects found")
    );
    for l in [&g, &m] {
        assert!(f.path_exists(l).unwrap(), "{l} stays on disk");
    }
    // The mount point no longer resolves; the SMB link's one-hop Lstat of the Disconnected share is an error.
    assert!(!f.is_symlink(&m).unwrap());
    assert_eq!(
        host_err(f.is_symlink(&g)),
        r"CreateFile \\fileserver.corp.example\data\: Access is denied."
    );
    assert_eq!(
        f.get_service("defragsvc").unwrap().status,
        crate::scenario::ServiceStatus::Stopped
    );
    assert_eq!(f.list_target_portals().len(), 2, "portals are persistent");
    // The Disconnected mapping blocks re-creation with 1219 (public reports) until removed.
    let pw = secret("alice-password-1");
    assert!(
        host_err(f.new_smb_global_mapping(&format!(r"{SRV}\data"), "", r"CORP\alice", &pw))
            .contains("Windows System Error 1219")
    );
    // Another principal hits 1219 because of the stale mapping.
    assert!(
        host_err(f.new_smb_global_mapping(
            &format!(r"{SRV}\team"),
            "",
            r"CORP\bob",
            &secret("bob-password-1")
        ))
        .contains("1219")
    );
    f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
        .unwrap();
    f.new_smb_global_mapping(&format!(r"{SRV}\data"), "", r"CORP\alice", &pw)
        .unwrap();
    assert!(
        f.is_symlink(&g).unwrap(),
        "the old link works again once mapped"
    );
}

#[test]
fn disconnected_mapping_can_be_configured_to_be_replaced() {
    let json = EXAMPLE.replace(
        r#""disconnected_mapping_blocks_create": true"#,
        r#""disconnected_mapping_blocks_create": false"#,
    );
    let mut f = fx_with(&json, HostOptions::default());
    let pw = secret("alice-password-1");
    f.new_smb_global_mapping(&format!(r"{SRV}\data"), "", r"CORP\alice", &pw)
        .unwrap();
    f.reboot().unwrap();
    f.new_smb_global_mapping(&format!(r"{SRV}\data"), "", r"CORP\alice", &pw)
        .unwrap();
    assert_eq!(
        f.mappings()[r"\\fileserver.corp.example\data"].status,
        MappingStatus::Ok
    );
}

#[test]
fn unreachable_server_disconnects_its_mappings() {
    let mut f = fx();
    let g = p("s");
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        &g,
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    f.set_smb_reachable("fileserver.corp.example", false)
        .unwrap();
    assert!(!f.is_symlink(&g).unwrap());
    assert_eq!(
        f.mappings()[r"\\fileserver.corp.example\data"].status,
        MappingStatus::Disconnected
    );
}

#[test]
fn leftovers_list_everything_until_cleaned_up() {
    let mut f = fx();
    assert!(f.leftovers().is_empty());
    let g = p(r"plugins\smb\globalmount");
    f.mkdir(&p(r"plugins\smb")).unwrap();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        &g,
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    let v = data_volume(&mut f);
    let m = p(r"plugins\blk\globalmount");
    f.mkdir(&m).unwrap();
    f.mount_volume(&v, &m).unwrap();
    let pubp = p(r"pods\u\mount");
    f.mkdir(&p(r"pods\u")).unwrap();
    f.create_symlink(&m, &pubp).unwrap();
    let left = f.leftovers();
    assert_eq!(left.len(), 5, "{left:#?}");
    assert!(left.iter().any(|l| l.starts_with("mount point")));
    assert!(left.iter().any(|l| l.starts_with("SMB global mapping")));
    assert!(left.iter().any(|l| l.starts_with("iSCSI session")));
    f.rmdir(&pubp, false).unwrap();
    f.unmount_volume(&v, &m).unwrap();
    f.rmdir(&m, false).unwrap();
    f.disconnect_target("192.0.2.10", 3260, "iqn.2026-01.io.wincsi:pvc-data")
        .unwrap();
    f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
        .unwrap();
    f.rmdir(&g, false).unwrap();
    assert!(f.leftovers().is_empty(), "{:#?}", f.leftovers());
    assert!(f.data_loss_events().is_empty());
}

#[test]
fn debug_output_of_state_holds_no_secrets() {
    let mut f = fx();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        "",
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    f.set_mutual_chap_secret(&secret("target-secret-1"))
        .unwrap();
    let dbg = format!("{:?}", f.st);
    for s in [
        "alice-password-1",
        "chap-secret-12",
        "target-secret-1",
        "discovery-secret",
    ] {
        assert!(!dbg.contains(s), "{s} leaked into Debug");
    }
}

#[test]
fn volume_id_from_a_symlink_resolves_the_volume_holding_its_target() {
    // WMI era (the reparse-tag quirk); the PowerShell era follows `.Target` (profile row).
    let mut f = fx_v(CsiProxyVersion::V1_3_0);
    let v = data_volume(&mut f);
    let staging = p("staging");
    f.mkdir(&staging).unwrap();
    f.mount_volume(&v, &staging).unwrap();
    f.create_symlink(&staging, &p("publish")).unwrap();
    assert_eq!(f.get_volume_id_from_target_path(&p("publish")).unwrap(), v);
    // A link to a plain directory on C: gives C:'s volume (quirk of the reparse-tag check).
    f.mkdir(&p("plain")).unwrap();
    f.create_symlink(&p("plain"), &p("plain-link")).unwrap();
    let c_volume = f.list_volumes_on_disk(0, 3).unwrap()[0].clone();
    assert_eq!(
        f.get_volume_id_from_target_path(&p("plain-link")).unwrap(),
        c_volume
    );
    // A dangling link fails.
    f.create_symlink(&p("gone"), &p("dangling")).unwrap();
    assert!(f.get_volume_id_from_target_path(&p("dangling")).is_err());
    // Without a C: volume in the scenario there is nothing to return.
    let mut g = fx_with(
        "{}",
        HostOptions {
            csi_proxy_version: Some(CsiProxyVersion::V1_3_0),
            ..HostOptions::default()
        },
    );
    g.mkdir(&p("plain")).unwrap();
    g.create_symlink(&p("plain"), &p("l")).unwrap();
    assert!(g.get_volume_id_from_target_path(&p("l")).is_err());
}

#[test]
fn a_foreign_non_empty_directory_is_never_used_as_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("c")).unwrap();
    std::fs::write(dir.path().join("c").join("precious"), "x").unwrap();
    let e = State::new(&Scenario::default(), dir.path(), &HostOptions::default()).unwrap_err();
    assert!(e.to_string().contains("not created by wincsi-sim"), "{e}");
    assert!(dir.path().join("c").join("precious").exists());
    // A sandbox of ours is reused (and reset).
    let sb = dir.path().join("sb");
    let st = State::new(&Scenario::default(), &sb, &HostOptions::default()).unwrap();
    st.mkdir(&p("x")).unwrap();
    let st = State::new(&Scenario::default(), &sb, &HostOptions::default()).unwrap();
    assert!(!st.path_exists(&p("x")).unwrap());
}

#[test]
fn no_windows_path_resolves_outside_the_sandbox() {
    let f = fx();
    let root = f.root().to_path_buf();
    for p in [
        r"C:\..\..\..\etc\passwd",
        r"C:/../../etc",
        r"\\?\C:\..\..\x",
        r"\\?\Volume{../../../x}\",
        r"\\?\Volume{5ee00001-5eed-4000-8000-000000000001}\..\..\..\x",
        r"\\srv\share\..\..\..\..\x",
        r"\\..\..\x",
        r"Z:\..",
    ] {
        if let Some(real) = f.sandbox_path(p) {
            assert!(real.starts_with(&root), "{p} -> {}", real.display());
            assert!(
                !real
                    .components()
                    .any(|c| c == std::path::Component::ParentDir),
                "{p}"
            );
        }
    }
    // Unvalidated RPCs stay inside too.
    assert!(f.is_symlink(r"C:\..\..\..\..\..\..\etc\passwd").is_err());
    assert!(
        f.mount_volume(r"\\?\Volume{x}\", r"C:\..\..\..\tmp")
            .is_err()
    );
}

#[test]
fn scenarios_round_trip_through_json() {
    let sc = Scenario::from_json(EXAMPLE).unwrap();
    let text = serde_json::to_string_pretty(&sc).unwrap();
    let again = Scenario::from_json(&text).unwrap();
    assert_eq!(
        serde_json::to_value(&again).unwrap(),
        serde_json::to_value(&sc).unwrap()
    );
    // Secrets survive the round trip (scenarios are fixtures) but never show in Debug.
    assert!(text.contains("alice-password-1"));
    assert!(!format!("{sc:?}").contains("alice-password-1"));
    let dir = tempfile::tempdir().unwrap();
    State::new(&again, dir.path(), &HostOptions::default()).unwrap();
}

// ---------- emulated links (the fallback where the OS makes no directory symlinks, e.g. Wine 8) ----------

fn os_symlinks_under(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.path().symlink_metadata().unwrap();
        if m.file_type().is_symlink() {
            out.push(e.path());
        } else if m.is_dir() {
            os_symlinks_under(&e.path(), out);
        }
    }
}

#[test]
fn emulated_links_give_the_same_host_view_without_any_os_symlink() {
    for v in CsiProxyVersion::ALL {
        emulated_links_for(v);
    }
}

fn emulated_links_for(version: CsiProxyVersion) {
    let opts = HostOptions {
        emulate_links: true,
        csi_proxy_version: Some(version),
        ..HostOptions::default()
    };
    let mut f = fx_with(EXAMPLE, opts);
    assert_eq!(f.layout.links(), LinkMode::Emulated);
    // SMB: staging link into the share, publish link to the staging link, data through both.
    let stage = p(r"plugins\smb\pv\globalmount");
    let publish = p(r"pods\uid\volumes\pv\mount");
    f.mkdir(&p(r"plugins\smb\pv")).unwrap();
    f.mkdir(&p(r"pods\uid\volumes\pv")).unwrap();
    f.new_smb_global_mapping(
        &format!(r"{SRV}\data"),
        &stage,
        r"CORP\alice",
        &secret("alice-password-1"),
    )
    .unwrap();
    assert!(f.is_symlink(&stage).unwrap());
    f.create_symlink(&stage, &publish).unwrap();
    assert!(f.path_exists(&publish).unwrap());
    assert!(f.is_symlink(&publish).unwrap());
    assert_eq!(
        f.read_link(&publish).unwrap().to_lowercase(),
        stage.to_lowercase()
    );
    f.write_file(&format!(r"{publish}\Sub\pod.txt"), b"pod")
        .unwrap();
    assert!(f.path_exists(&format!(r"{publish}\sub\POD.txt")).unwrap());
    assert_eq!(
        f.read_share_file("fileserver.corp.example", "data", "Sub/pod.txt")
            .unwrap(),
        b"pod"
    );
    assert_eq!(
        f.read_file(&format!(r"{SRV}\data\Sub\pod.txt")).unwrap(),
        b"pod"
    );
    // Mount point: a volume reached through its mount point and through a link to it.
    let v = data_volume(&mut f);
    let m = p(r"plugins\blk\globalmount");
    f.mkdir(&m).unwrap();
    f.mount_volume(&v, &m).unwrap();
    assert_eq!(
        f.mount_volume(&v, &m).is_ok(),
        f.profile().mount_volume_again == crate::profile::OnRepeat::NoOp,
        "{version}"
    );
    assert_eq!(f.get_volume_id_from_target_path(&m).unwrap(), v);
    let blk_pub = p(r"pods\uid\volumes\blk");
    f.create_symlink(&m, &blk_pub).unwrap();
    assert_eq!(f.get_volume_id_from_target_path(&blk_pub).unwrap(), v);
    f.write_file(&format!(r"{blk_pub}\d.txt"), b"blk").unwrap();
    assert_eq!(f.read_file(&format!(r"{m}\d.txt")).unwrap(), b"blk");
    assert_eq!(f.leftovers().len(), 6, "{:#?}", f.leftovers());

    let mut real = Vec::new();
    os_symlinks_under(f.root(), &mut real);
    assert!(real.is_empty(), "no OS symlinks in emulated mode: {real:?}");

    // Teardown removes links, never their targets.
    f.rmdir(&publish, false).unwrap();
    f.rmdir(&blk_pub, true).unwrap();
    f.unmount_volume(&v, &m).unwrap();
    assert!(f.path_exists(&m).unwrap());
    f.rmdir(&m, false).unwrap();
    f.disconnect_target("192.0.2.10", 3260, "iqn.2026-01.io.wincsi:pvc-data")
        .unwrap();
    f.remove_smb_global_mapping(&format!(r"{SRV}\data"))
        .unwrap();
    assert!(
        host_err(f.is_symlink(&stage)).ends_with("Access is denied."),
        "staging link dangles: one-hop Lstat of the unmapped share"
    );
    f.rmdir(&stage, false).unwrap();
    assert!(f.leftovers().is_empty(), "{:#?}", f.leftovers());
    assert!(f.data_loss_events().is_empty());
    assert_eq!(
        f.read_share_file("fileserver.corp.example", "data", "Sub/pod.txt")
            .unwrap(),
        b"pod"
    );
}
