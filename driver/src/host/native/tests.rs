//! The native backend over the simulated host's Windows view: its host-call sequences in WMI and Win32 terms (the
//! sim's audit of the facade), and each documented difference from the csi-proxy backend.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sim::state::MappingStatus;
use sim::wmi::WindowsView;
use sim::{HostOptions, Scenario, SimHost};
use winhost::probe::{Namespace, ProbeReport};

use super::{LEDGER_FILE, MAPPING_SETTLE_WAIT, NativeHost, degraded};
use crate::host::HostProbe;
use crate::host::{
    Host, HostErrorKind, HostPath, IscsiAuth, KubeletRoot, Portal, Secret, SmbCredential, UncPath,
};
use crate::locks::Deadline;

const K: &str = r"C:\var\lib\kubelet";
const PW: &str = "Bob-Sm8-S3cret!";
const CHAP: &str = "Chap-Secret-12";
const DISC: &str = "Discovery-Pw1";
const IQN: &str = "iqn.2026-01.io.wincsi:Store1";
const GIB: u64 = 1 << 30;

struct Fx {
    sim: SimHost,
    host: NativeHost,
    state: tempfile::TempDir,
    _sandbox: tempfile::TempDir,
}

fn scenario() -> Scenario {
    Scenario::from_json(
        &json!({
            "host": {"directories": [r"C:\var\lib\kubelet\plugins", r"C:\var\lib\kubelet\pods"]},
            "smb": {"servers": [{"name": "fs1",
                "accounts": [{"user": "bob", "password": PW, "domain": "CORP"},
                             {"user": "alice", "password": PW, "domain": "CORP"}],
                "shares": [{"name": "data", "files": {"base/f.txt": "x"}}, {"name": "apps"}]}]},
            "iscsi": {"portals": [
                {"address": "10.0.0.5", "targets": [
                    {"iqn": IQN, "chap": {"mode": "one_way", "username": "node", "secret": CHAP},
                     "luns": [{"lun": 0, "id": "lun0", "size": 10 * GIB, "partition_style": "raw",
                               "read_only": true, "arrival_delay_ms": 0, "volume_arrival_delay_ms": 30_000}]}]},
                {"address": "10.0.0.9", "discovery_chap": {"username": "disc", "secret": DISC},
                 "targets": [{"iqn": "iqn.2026-01.io.wincsi:hidden", "luns": [{"lun": 0, "size": GIB}]}]}
            ]}
        })
        .to_string(),
    )
    .expect("scenario")
}

impl Fx {
    fn new() -> Self {
        let sandbox = tempfile::tempdir().expect("tmp");
        let state = tempfile::tempdir().expect("tmp");
        let sim = SimHost::new(&scenario(), sandbox.path(), HostOptions::default()).expect("sim");
        let host = Self::native(&sim, state.path());
        Self {
            sim,
            host,
            state,
            _sandbox: sandbox,
        }
    }

    fn native(sim: &SimHost, state: &std::path::Path) -> NativeHost {
        NativeHost::new(Arc::new(WindowsView::new(sim.clone())), Some(state))
    }

    /// The facade calls since the last look, by name (then forgotten).
    fn calls(&self) -> Vec<String> {
        let calls = self.sim.audit(0).into_iter().map(|e| e.rpc).collect();
        self.sim.clear_audit();
        calls
    }
}

fn d() -> Deadline {
    Deadline::after(Duration::from_secs(60))
}

fn path(p: &str) -> HostPath {
    KubeletRoot::new(K)
        .expect("root")
        .host_path(p)
        .expect("path")
}

fn share(p: &str) -> UncPath {
    UncPath::parse(p, "test").expect("unc")
}

fn bob() -> SmbCredential {
    SmbCredential::new(r"CORP\bob", Secret::new(PW))
}

fn portal(a: &str) -> Portal {
    Portal {
        address: a.into(),
        port: 3260,
    }
}

fn chap() -> IscsiAuth {
    IscsiAuth::OneWay {
        username: "node".into(),
        secret: Secret::new(CHAP),
    }
}

/// The Windows view's audit names of the SMB mapping look-ups: by `RemotePath` (`SmbWmi::global_mappings_of`) and
/// the full listing (`SmbWmi::global_mappings`).
const BY_PATH: &str = "SELECT MSFT_SmbGlobalMapping WHERE RemotePath";
const ALL: &str = "SELECT MSFT_SmbGlobalMapping";

#[tokio::test]
async fn smb_sequences_and_the_mapping_ledger() {
    let fx = Fx::new();
    let h = &fx.host;
    let caps = h.capabilities();
    assert!(caps.list_smb_mappings && caps.clear_disk_read_only);
    assert!(caps.discovery_chap && caps.persistent_logins);
    let stage = path(r"C:\var\lib\kubelet\plugins\v1");
    h.new_smb_global_mapping(&share(r"\\fs1\data\base"), Some(&stage), Some(&bob()), d())
        .await
        .expect("map");
    assert_eq!(
        fx.calls(),
        [
            BY_PATH,
            ALL,
            "MSFT_SmbGlobalMapping.Create",
            "CreateSymbolicLinkW"
        ],
        "none of the share by its RemotePath, none in the full listing either: created"
    );
    assert!(
        fx.state.path().join(LEDGER_FILE).exists(),
        "recorded before Create"
    );
    assert!(h.is_symlink(&stage, d()).await.expect("is"));
    assert_eq!(
        fx.calls(),
        ["FSCTL_GET_REPARSE_POINT", BY_PATH, "GetFileAttributesW"]
    );
    // A second volume on the share reuses the working mapping.
    let stage2 = path(r"C:\var\lib\kubelet\plugins\v2");
    h.new_smb_global_mapping(&share(r"\\fs1\data"), Some(&stage2), Some(&bob()), d())
        .await
        .expect("reuse");
    assert_eq!(
        fx.calls(),
        [BY_PATH, "GetFileAttributesW", "CreateSymbolicLinkW"]
    );
    // After a reboot the mapping is Disconnected: the link does not resolve (false, not an error), and
    // NewSmbGlobalMapping says the mapping is stale instead of removing it (other volumes may hold it: the driver
    // repairs under the share's exclusive lock), naming it as wincsi's; the repair is Remove, then the mapping again.
    fx.sim.reboot().expect("reboot");
    assert!(!h.is_symlink(&stage, d()).await.expect("is"));
    fx.calls();
    h.rmdir(&stage, false, d()).await.expect("rmdir");
    let stale = h
        .new_smb_global_mapping(&share(r"\\fs1\data\base"), Some(&stage), Some(&bob()), d())
        .await
        .expect_err("stale");
    assert_eq!(stale.kind, HostErrorKind::StaleMapping);
    assert!(
        stale
            .message
            .contains("is Disconnected: it must be re-created"),
        "{}",
        stale.message
    );
    h.remove_smb_global_mapping(&share(r"\\fs1\data"), d())
        .await
        .expect("remove ours");
    h.new_smb_global_mapping(&share(r"\\fs1\data\base"), Some(&stage), Some(&bob()), d())
        .await
        .expect("map again");
    assert_eq!(
        fx.calls(),
        [
            "RemoveDirectoryW",
            BY_PATH,
            BY_PATH,
            "MSFT_SmbGlobalMapping.Remove",
            BY_PATH,
            ALL,
            "MSFT_SmbGlobalMapping.Create",
            "CreateSymbolicLinkW"
        ]
    );
    assert!(
        h.is_symlink(&stage2, d()).await.expect("is"),
        "the other volume's link resolves again"
    );
    // Removal by a restarted driver: the ledger is durable. Asked in another case than the mapping lists
    // (`\\fs1\data`), which the Windows view's RemotePath filter does not match: found in the full listing.
    let restarted = Fx::native(&fx.sim, fx.state.path());
    for p in [&stage, &stage2] {
        restarted.rmdir(p, false, d()).await.expect("unlink");
    }
    fx.calls();
    restarted
        .remove_smb_global_mapping(&share(r"\\FS1\Data\base"), d())
        .await
        .expect("remove");
    assert_eq!(fx.calls(), [BY_PATH, ALL, "MSFT_SmbGlobalMapping.Remove"]);
    let again = restarted
        .remove_smb_global_mapping(&share(r"\\fs1\data"), d())
        .await;
    assert_eq!(again.expect_err("gone").kind, HostErrorKind::NotFound);
    assert!(fx.sim.invariants().ok(), "{:?}", fx.sim.invariants());
}

#[tokio::test]
async fn a_mapping_wincsi_did_not_create_is_reused_but_never_removed_or_repaired() {
    let fx = Fx::new();
    let h = &fx.host;
    // Another component mapped the share (here through csi-proxy's view of the same host).
    fx.sim
        .with_state_mut(|s| {
            s.new_smb_global_mapping(r"\\fs1\data", "", r"CORP\bob", &sim::Secret::new(PW))
        })
        .expect("foreign mapping");
    let stage = path(r"C:\var\lib\kubelet\plugins\v1");
    h.new_smb_global_mapping(&share(r"\\fs1\data"), Some(&stage), Some(&bob()), d())
        .await
        .expect("reuse");
    h.rmdir(&stage, false, d()).await.expect("unlink");
    h.remove_smb_global_mapping(&share(r"\\fs1\data"), d())
        .await
        .expect("left in place");
    assert_eq!(
        fx.sim.with_state(|s| s.mappings().len()),
        1,
        "the foreign mapping stays"
    );
    // Broken (Disconnected) and not ours: refused with a message, never removed.
    fx.sim.reboot().expect("reboot");
    let err = h
        .new_smb_global_mapping(&share(r"\\fs1\data"), Some(&stage), Some(&bob()), d())
        .await
        .expect_err("not ours");
    assert_eq!(err.kind, HostErrorKind::StaleMapping);
    assert!(
        err.message.contains("not created by wincsi"),
        "{}",
        err.message
    );
    let m = fx
        .sim
        .with_state(|s| s.mappings().values().next().map(|m| m.status));
    assert_eq!(m, Some(MappingStatus::Disconnected));
}

// ---- issue 30: one share's mapping is looked up by its RemotePath, not by listing every mapping ----

/// On a node with many other SMB mappings, the share's own look-ups (a second stage on the share, publish, kubelet's
/// NodeGetVolumeStats poll, unstage of one of its volumes) ask only for the share's `RemotePath`: no full listing
/// once the share is mapped. (Before: every one listed every `MSFT_SmbGlobalMapping` on the node.)
#[tokio::test]
async fn an_smb_volume_on_a_node_with_many_mappings_looks_up_only_its_share() {
    use crate::lifecycle::{PublishRequest, StatsRequest, UnstageRequest};
    use crate::testing::Env;
    const OTHERS: usize = 30;
    let shares: Vec<serde_json::Value> = std::iter::once(json!({"name": "data"}))
        .chain((0..OTHERS).map(|i| json!({ "name": format!("s{i:02}") })))
        .collect();
    let env = Env::on(
        sim::wmi::TestBackend::Native,
        &json!({"smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": PW, "domain": "CORP"}],
            "shares": shares}]}}),
    );
    for i in 0..OTHERS {
        env.sim
            .with_state_mut(|s| {
                s.new_smb_global_mapping(
                    &format!(r"\\fs1\s{i:02}"),
                    "",
                    r"CORP\bob",
                    &sim::Secret::new(PW),
                )
            })
            .expect("another mapping");
    }
    env.stage(&smb_stage("v1"), crate::testing::d())
        .await
        .expect("first stage");
    let lookups = |env: &Env| -> Vec<(String, serde_json::Value)> {
        let calls = env
            .sim
            .audit(0)
            .into_iter()
            .filter(|e| e.rpc.starts_with("SELECT MSFT_SmbGlobalMapping"))
            .map(|e| (e.rpc, e.args))
            .collect();
        env.sim.clear_audit();
        calls
    };
    // The first stage made the mapping: nothing by its RemotePath, so the full listing proved there was none.
    assert_eq!(
        lookups(&env)
            .iter()
            .map(|(c, _)| c.as_str())
            .collect::<Vec<_>>(),
        [BY_PATH, ALL, BY_PATH],
        "lookup, fallback listing, Create, then IsSymlink's lookup"
    );
    env.stage(&smb_stage("v2"), crate::testing::d())
        .await
        .expect("second stage");
    let target = format!(r"{K}\pods\p1\volumes\kubernetes.io~csi\pv\mount");
    env.mkdir_parent(&target);
    let stage1 = smb_stage("v1");
    env.publish(
        &PublishRequest {
            volume_id: "v1".into(),
            staging_target_path: stage1.staging_target_path.clone(),
            target_path: target.clone(),
            capability: stage1.capability.clone(),
            ..Default::default()
        },
        crate::testing::d(),
    )
    .await
    .expect("publish");
    for path in [&target, &stage1.staging_target_path] {
        let stats = env
            .mgr
            .stats(
                &StatsRequest {
                    volume_id: "v1".into(),
                    volume_path: path.clone(),
                },
                crate::testing::d(),
            )
            .await
            .expect("stats");
        assert!(!stats.abnormal, "{}", stats.message);
    }
    env.mgr
        .unstage(
            &UnstageRequest {
                volume_id: "v2".into(),
                staging_target_path: smb_stage("v2").staging_target_path,
            },
            crate::testing::d(),
        )
        .await
        .expect("unstage v2 (v1 keeps the mapping)");
    let seen = lookups(&env);
    assert!(seen.len() >= 4, "{seen:?}");
    for (call, args) in &seen {
        assert_eq!(call, BY_PATH, "{seen:?}");
        assert_eq!(args["remote_path"], r"\\fs1\data", "{seen:?}");
    }
    assert_eq!(
        env.sim.with_state(|s| s.mappings().len()),
        OTHERS + 1,
        "one mapping of the share, the others untouched"
    );
}

/// A mapping someone else made of the share, found only under another case than the volume's `source` spells it
/// (the Windows view's `RemotePath` filter compares exactly, as the provider may): the full listing finds it, so
/// stage reuses it while it works and refuses it once broken — never a second `Create`, never a `Remove`.
#[tokio::test]
async fn a_mapping_of_the_share_in_another_case_is_found_through_the_full_listing() {
    let fx = Fx::new();
    let h = &fx.host;
    fx.sim
        .with_state_mut(|s| {
            s.new_smb_global_mapping(r"\\fs1\data", "", r"CORP\bob", &sim::Secret::new(PW))
        })
        .expect("someone else's mapping");
    fx.calls();
    let stage = path(r"C:\var\lib\kubelet\plugins\v1");
    h.new_smb_global_mapping(&share(r"\\FS1\DATA\base"), Some(&stage), Some(&bob()), d())
        .await
        .expect("reused");
    assert_eq!(
        fx.calls(),
        [BY_PATH, ALL, "GetFileAttributesW", "CreateSymbolicLinkW"],
        "not found by RemotePath, found in the listing, reused"
    );
    // (The view reads the link's target back lower-cased, so its look-up finds the mapping by RemotePath.)
    assert!(h.is_symlink(&stage, d()).await.expect("is"));
    fx.calls();
    // Broken (after a reboot) and not wincsi's: refused as before, neither removed nor mapped again.
    fx.sim.reboot().expect("reboot");
    assert!(!h.is_symlink(&stage, d()).await.expect("is"));
    let stage2 = path(r"C:\var\lib\kubelet\plugins\v2");
    let err = h
        .new_smb_global_mapping(&share(r"\\FS1\DATA"), Some(&stage2), Some(&bob()), d())
        .await
        .expect_err("not ours");
    assert_eq!(err.kind, HostErrorKind::StaleMapping);
    assert!(
        err.message.contains("not created by wincsi"),
        "{}",
        err.message
    );
    h.remove_smb_global_mapping(&share(r"\\FS1\DATA"), d())
        .await
        .expect("found, and left in place");
    let calls = fx.calls();
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("MSFT_SmbGlobalMapping.")),
        "{calls:?}"
    );
    assert_eq!(
        fx.sim.with_state(|s| s
            .mappings()
            .values()
            .map(|m| (m.remote_path.clone(), m.status))
            .collect::<Vec<_>>()),
        [(r"\\fs1\data".to_owned(), MappingStatus::Disconnected)]
    );
}

#[tokio::test]
async fn a_lun_is_logged_in_cleared_partitioned_formatted_and_mounted_in_wmi_terms() {
    let fx = Fx::new();
    let h = &fx.host;
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    h.connect_target(&portal("10.0.0.5"), &IQN.to_lowercase(), &chap(), d())
        .await
        .expect("login (IQN case ignored)");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_iSCSITargetPortal",
            "MSFT_iSCSITargetPortal.New",
            "SELECT MSFT_iSCSITargetPortal",
            "ASSOCIATORS MSFT_iSCSITargetToiSCSITargetPortal->MSFT_iSCSITarget",
            "MSFT_iSCSITarget.Connect"
        ]
    );
    let disks = h
        .get_target_disks(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("disks");
    assert_eq!(disks.len(), 1);
    let n = disks[0];
    let locs = h.list_disk_locations(d()).await.expect("locations");
    assert_eq!(locs[&n].lun, "0");
    let ids = h.list_disk_ids(d()).await.expect("ids");
    let want = fx.sim.with_state(|s| {
        s.disks()
            .iter()
            .find(|x| x.id == "lun0")
            .map(|x| x.page83.clone())
    });
    assert_eq!(Some(ids[&n].page83.clone()), want);
    fx.calls();
    // The LUN arrives offline and read-only (SAN policy): a writable stage clears the flag after Online.
    h.set_disk_online_writable(n, d()).await.expect("online");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_Disk",
            "MSFT_Disk.Online",
            "SELECT MSFT_Disk",
            "MSFT_Disk.SetAttributes",
            "MSFT_Disk.Refresh"
        ]
    );
    assert!(
        h.list_volumes_on_disk(n, d())
            .await
            .expect("vols")
            .is_empty()
    );
    fx.calls();
    h.partition_disk(n, d()).await.expect("partition");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_Disk",
            "ReadFile",
            "MSFT_Disk.Initialize",
            "MSFT_Disk.Refresh",
            "SELECT MSFT_Partition",
            "MSFT_Disk.CreatePartition",
            "MSFT_Disk.Refresh",
            "SELECT MSFT_Partition",
            "MSFT_Partition.Online"
        ]
    );
    // A partitioned disk is refused, never a silent no-op: its volume, arriving later, must not be taken for one this
    // call made.
    let again = h
        .partition_disk(n, d())
        .await
        .expect_err("already partitioned");
    assert_eq!(
        again.kind,
        HostErrorKind::AlreadyExists,
        "{}",
        again.message
    );
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_Disk",
            "MSFT_Disk.Refresh",
            "SELECT MSFT_Partition"
        ]
    );
    // The partition table is read directly, before the new partition's volume has arrived.
    let layout = h.disk_layout(n, d()).await.expect("layout");
    assert_eq!(layout.style, crate::host::PartitionStyle::Gpt);
    assert_eq!(
        layout
            .partitions
            .iter()
            .map(|p| p.kind.clone())
            .collect::<Vec<_>>(),
        [
            crate::host::PartitionKind::Reserved,
            crate::host::PartitionKind::Basic
        ]
    );
    assert_eq!(fx.calls(), ["SELECT MSFT_Disk", "SELECT MSFT_Partition"]);
    assert!(
        h.list_volumes_on_disk(n, d())
            .await
            .expect("vols")
            .is_empty()
    );
    // Time passes: the volume arrives.
    fx.sim
        .with_state_mut(|s| s.complete_arrivals())
        .expect("arrive");
    let vols = h.list_volumes_on_disk(n, d()).await.expect("vols");
    assert_eq!(vols.len(), 1);
    let v = &vols[0];
    assert!(!h.is_volume_formatted(v, d()).await.expect("formatted?"));
    h.format_volume(v, d()).await.expect("format");
    let stage = path(r"C:\var\lib\kubelet\plugins\lun");
    h.mkdir(&stage, d()).await.expect("mkdir");
    fx.calls();
    h.mount_volume(v, &stage, d()).await.expect("mount");
    h.mount_volume(v, &stage, d())
        .await
        .expect("mount again: same volume");
    assert_eq!(
        fx.calls(),
        [
            "SetVolumeMountPointW",
            "SetVolumeMountPointW",
            "GetVolumeNameForVolumeMountPointW"
        ]
    );
    // Through a publish link: hop by hop to the mount point.
    let publish = path(r"C:\var\lib\kubelet\pods\p1");
    h.create_symlink(&publish, &stage, d())
        .await
        .expect("publish");
    fx.calls();
    assert_eq!(
        &h.volume_id_from_target_path(&publish, d())
            .await
            .expect("id"),
        v
    );
    assert_eq!(
        fx.calls(),
        [
            "FSCTL_GET_REPARSE_POINT",
            "FSCTL_GET_REPARSE_POINT",
            "GetVolumeNameForVolumeMountPointW",
            "GetVolumeInformationW"
        ]
    );
    fx.sim
        .with_state(|s| s.write_file(&format!(r"{}\f.txt", publish.as_str()), &[7u8; 4096]))
        .expect("write");
    let (total, used) = h.volume_stats(v, d()).await.expect("stats");
    assert!(total > 9 * GIB && used >= 4096);
    assert_eq!(fx.calls(), ["GetDiskFreeSpaceExW"]);
    // Grow the LUN by 1 GiB: resize to the maximum the layout allows (after csi-proxy's 100 MiB rule), computed
    // from the disk and its partitions, never asked of GetSupportedSize (which needs defragsvc).
    fx.sim
        .with_state_mut(|s| s.set_disk_size("lun0", 11 * GIB))
        .expect("grow");
    h.resize_volume(v, 0, d()).await.expect("resize");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_Volume",
            "ASSOCIATORS MSFT_PartitionToVolume->MSFT_Partition",
            "SELECT MSFT_Disk",
            "SELECT MSFT_Partition",
            "MSFT_Partition.Resize"
        ]
    );
    let (size, size_max) = fx
        .sim
        .with_state(|s| s.partition_sizes(v))
        .expect("the partition");
    assert_eq!(
        size, size_max,
        "grown to Windows' SizeMax (a MiB multiple here)"
    );
    // Teardown in the driver's order: unmount (flush first), unlink, logout.
    h.rmdir(&publish, false, d()).await.expect("unpublish");
    h.unmount_volume(v, &stage, d()).await.expect("unmount");
    let not_mounted = h
        .unmount_volume(v, &stage, d())
        .await
        .expect_err("nothing mounted");
    assert_eq!(not_mounted.kind, HostErrorKind::NotFound);
    h.rmdir(&stage, false, d()).await.expect("rmdir");
    fx.calls();
    h.disconnect_target(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("logout");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_iSCSITarget",
            "ASSOCIATORS MSFT_iSCSITargetToiSCSISession->MSFT_iSCSISession",
            "MSFT_iSCSITarget.Disconnect"
        ]
    );
    h.disconnect_target(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("again: no-op");
    assert!(fx.sim.invariants().ok(), "{:?}", fx.sim.invariants());
}

#[tokio::test]
async fn a_read_only_volume_keeps_its_disk_read_only() {
    let fx = Fx::new();
    let h = &fx.host;
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("login");
    let n = h
        .get_target_disks(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("disks")[0];
    h.set_disk_online(n, true, d()).await.expect("online");
    assert!(fx.sim.with_state(|s| {
        s.disks()
            .iter()
            .any(|x| x.id == "lun0" && x.read_only && x.online)
    }));
    // Partitioning a read-only disk fails with Windows' answer, classified.
    let err = h.partition_disk(n, d()).await.expect_err("read-only");
    assert!(
        err.message.contains("MSFT_Disk.Initialize"),
        "{}",
        err.message
    );
    h.disconnect_target(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("logout");
}

#[tokio::test]
async fn discovery_chap_and_persistent_logins_that_are_unregistered_on_logout() {
    let fx = Fx::new();
    let h = &fx.host;
    let hidden = portal("10.0.0.9");
    let none = h
        .add_target_portal(&hidden, d())
        .await
        .expect_err("needs discovery CHAP");
    assert_eq!(none.kind, HostErrorKind::LogonFailure);
    let disc = IscsiAuth::OneWay {
        username: "disc".into(),
        secret: Secret::new(DISC),
    };
    h.add_target_portal_with_chap(&hidden, &disc, d())
        .await
        .expect("discovery CHAP");
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    h.connect_target_persistent(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("persistent login");
    // The initiator logs it back in at boot: its disk is there again without a stage.
    fx.sim.reboot().expect("reboot");
    assert_eq!(fx.sim.with_state(|s| s.sessions().len()), 1);
    fx.calls();
    h.disconnect_target(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("logout");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_iSCSITarget",
            "ASSOCIATORS MSFT_iSCSITargetToiSCSISession->MSFT_iSCSISession",
            "MSFT_iSCSISession.Unregister",
            "MSFT_iSCSITarget.Disconnect"
        ]
    );
    fx.sim.reboot().expect("reboot");
    assert!(
        fx.sim.invariants().ok(),
        "no session and no persistent record: {:?}",
        fx.sim.invariants()
    );
    let audit = serde_json::to_string(&fx.sim.audit(0)).expect("audit");
    assert!(!audit.contains(CHAP) && !audit.contains(DISC));
}

#[tokio::test]
async fn windows_answers_are_classified() {
    let fx = Fx::new();
    let h = &fx.host;
    fx.sim
        .fail_nth(
            "MSFT_StorageSetting.UpdateHostStorageCache",
            1,
            "return:40001",
        )
        .expect("fault");
    assert_eq!(
        h.rescan(d()).await.expect_err("denied").kind,
        HostErrorKind::AccessDenied
    );
    fx.sim
        .fail_nth("GetFileAttributesW", 1, "hresult:0x800706BA")
        .expect("fault");
    let e = h
        .path_exists(&path(r"C:\var\lib\kubelet\x"), d())
        .await
        .expect_err("rpc");
    assert_eq!(e.kind, HostErrorKind::Unavailable);
    assert!(
        !h.path_exists(&path(r"C:\var\lib\kubelet\x"), d())
            .await
            .expect("absent")
    );
    let e = h
        .new_smb_global_mapping(&share(r"\\nowhere\x"), None, None, d())
        .await
        .expect_err("53");
    assert_eq!(e.kind, HostErrorKind::NetworkPathNotFound);
    assert!(
        !fx.state.path().join(LEDGER_FILE).exists() || {
            let text = std::fs::read_to_string(fx.state.path().join(LEDGER_FILE)).expect("ledger");
            !text.contains("nowhere")
        },
        "a definite failure leaves nothing in the ledger"
    );
    let e = h
        .new_smb_global_mapping(
            &share(r"\\fs1\data"),
            None,
            Some(&SmbCredential::new(r"CORP\bob", Secret::new("wrong"))),
            d(),
        )
        .await
        .expect_err("1326");
    assert_eq!(e.kind, HostErrorKind::LogonFailure);
    assert!(!e.message.contains("wrong"));
    let e = h.mkdir(&path(r"C:\var\lib\kubelet\a\b\c"), d()).await;
    e.expect("parents are created");
}

#[tokio::test(start_paused = true)]
async fn a_hung_call_ends_at_the_deadline_and_holds_only_its_thread() {
    let fx = Fx::new();
    let h = NativeHost::with_pool_size(Arc::new(WindowsView::new(fx.sim.clone())), None, 1);
    fx.sim.hang_nth("SELECT MSFT_Disk", 1).expect("hang");
    let hung = h.disk_size(0, Deadline::after(Duration::from_secs(5)));
    tokio::pin!(hung);
    tokio::select! {
        r = &mut hung => panic!("answered despite the hang: {r:?}"),
        () = fx.sim.wait_hung(1) => {}
    }
    // Virtual time past the deadline (a blocking thread holds tokio's auto-advance, so by hand).
    tokio::time::advance(Duration::from_secs(6)).await;
    let e = hung.await.expect_err("deadline");
    assert_eq!(e.kind, HostErrorKind::DeadlineExceeded);
    assert!(e.message.contains("outcome unknown"), "{}", e.message);
    // The only thread is held: the next operation waits for it and ends unstarted at its deadline.
    let x = path(r"C:\var\lib\kubelet\x");
    let next = h.path_exists(&x, Deadline::after(Duration::from_secs(1)));
    tokio::pin!(next);
    assert!(futures::poll!(&mut next).is_pending());
    tokio::time::advance(Duration::from_secs(2)).await;
    let e = next.await.expect_err("no thread");
    assert!(e.message.contains("not started"), "{}", e.message);
    // The provider answers late (its result is dropped); then calls run again.
    fx.sim.release_hangs();
    fx.sim.wait_unhung().await;
    assert!(
        h.path_exists(&path(r"C:\var\lib\kubelet\plugins"), d())
            .await
            .expect("runs")
    );
}

#[tokio::test]
async fn a_host_without_the_smb_provider_advertises_less() {
    let fx = Fx::new();
    let report = ProbeReport::from_lookup(
        |ns| (ns == Namespace::Smb).then_some(winhost::codes::HResult(0x8004_100E)),
        |_, _| Ok(Vec::new()),
    );
    let view = WindowsView::new(fx.sim.clone()).with_probe(report);
    let h = NativeHost::new(Arc::new(view), None);
    let caps = h.capabilities();
    assert!(!caps.list_smb_mappings && caps.clear_disk_read_only && caps.persistent_logins);
    let e = h
        .new_smb_global_mapping(&share(r"\\fs1\data"), None, Some(&bob()), d())
        .await
        .expect_err("no SMB provider");
    assert_eq!(e.kind, HostErrorKind::Unavailable);
    assert!(
        e.message
            .contains(r"ROOT\Microsoft\Windows\SMB MSFT_SmbGlobalMapping"),
        "{}",
        e.message
    );
}

// ---- review M3: a mapping others use is never removed inside NewSmbGlobalMapping ----

/// NodeStageVolume of SMB volume `id` on `\\fs1\data` as `CORP\bob`.
fn smb_stage(id: &str) -> crate::lifecycle::StageRequest {
    use crate::lifecycle::{AccessType, Capability as Cap, Secrets, StageRequest};
    StageRequest {
        volume_id: id.into(),
        staging_target_path: format!(
            r"{K}\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount"
        ),
        capability: Some(Cap {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: Vec::new(),
            },
            access_mode: 1,
        }),
        volume_context: [("source".to_owned(), r"\\fs1\data".to_owned())].into(),
        secrets: Secrets::new([("username", "bob"), ("domain", "CORP"), ("password", PW)]),
    }
}

fn removes(sim: &SimHost) -> usize {
    sim.audit(0)
        .iter()
        .filter(|e| e.rpc == "MSFT_SmbGlobalMapping.Remove")
        .count()
}

/// A mapping the SMB client is re-establishing (`Reconnecting` after a blip, SMB 3 transparent failover) is waited
/// for, with backoff, and reused once it is OK again — never removed; one that stays so is left in place and the
/// call answers Unavailable after [`MAPPING_SETTLE_WAIT`]. (Before: `Remove(Force)` and `Create` at once, under the
/// shared lock, while the other volumes' pods held files open on it.)
#[tokio::test(start_paused = true)]
async fn a_mapping_the_smb_client_is_reestablishing_is_waited_for_and_never_removed() {
    let fx = Fx::new();
    let h = &fx.host;
    let v1 = path(r"C:\var\lib\kubelet\plugins\v1");
    h.new_smb_global_mapping(&share(r"\\fs1\data"), Some(&v1), Some(&bob()), d())
        .await
        .expect("map");
    fx.sim
        .with_state_mut(|s| {
            s.set_mapping_status(
                r"\\fs1\data",
                MappingStatus::Reconnecting,
                Some((Duration::from_secs(3), MappingStatus::Ok)),
            )
        })
        .expect("reconnecting");
    fx.calls();
    let v2 = path(r"C:\var\lib\kubelet\plugins\v2");
    h.new_smb_global_mapping(&share(r"\\fs1\data"), Some(&v2), Some(&bob()), d())
        .await
        .expect("reused once reconnected");
    let calls = fx.calls();
    assert!(
        calls.iter().filter(|c| *c == BY_PATH).count() >= 2,
        "{calls:?}"
    );
    assert_eq!(
        calls[calls.len() - 2..],
        ["GetFileAttributesW", "CreateSymbolicLinkW"],
        "{calls:?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("MSFT_SmbGlobalMapping."))
    );
    assert!(
        h.is_symlink(&v1, d()).await.expect("is"),
        "v1 kept its mapping"
    );
    // Still reconnecting after the bounded wait: Unavailable, the mapping untouched.
    fx.sim
        .with_state_mut(|s| s.set_mapping_status(r"\\fs1\data", MappingStatus::Reconnecting, None))
        .expect("reconnecting");
    let started = tokio::time::Instant::now();
    let v3 = path(r"C:\var\lib\kubelet\plugins\v3");
    let e = h
        .new_smb_global_mapping(&share(r"\\fs1\data"), Some(&v3), Some(&bob()), d())
        .await
        .expect_err("still reconnecting");
    assert_eq!(e.kind, HostErrorKind::Unavailable);
    assert!(e.message.contains("still Reconnecting"), "{}", e.message);
    assert!(started.elapsed() <= MAPPING_SETTLE_WAIT, "bounded");
    assert_eq!(removes(&fx.sim), 0);
    assert_eq!(fx.sim.with_state(|s| s.mappings().len()), 1);
}

/// An OK mapping whose share does not answer (a server blip: 64) is left in place — re-creating it cannot reach
/// the server, and removing it cuts its users; one whose share refuses its credentials (a rotated password) is
/// stale, for the driver's repair under the exclusive lock. Neither is removed inside the call.
#[tokio::test]
async fn an_ok_mapping_is_never_removed_inside_the_call_whatever_its_share_answers() {
    let fx = Fx::new();
    let h = &fx.host;
    let v1 = path(r"C:\var\lib\kubelet\plugins\v1");
    h.new_smb_global_mapping(&share(r"\\fs1\data"), Some(&v1), Some(&bob()), d())
        .await
        .expect("map");
    fx.sim
        .fail_nth("GetFileAttributesW", 1, "win32:64")
        .expect("fault");
    let v2 = path(r"C:\var\lib\kubelet\plugins\v2");
    let e = h
        .new_smb_global_mapping(&share(r"\\fs1\data"), Some(&v2), Some(&bob()), d())
        .await
        .expect_err("the share does not answer");
    assert_eq!(e.kind, HostErrorKind::Unavailable);
    assert!(e.message.contains("left in place"), "{}", e.message);
    fx.sim
        .with_state_mut(|s| s.set_smb_password("fs1", "bob", sim::Secret::new("Rotated-Pw-9")))
        .expect("rotate");
    let e = h
        .new_smb_global_mapping(&share(r"\\fs1\data"), Some(&v2), Some(&bob()), d())
        .await
        .expect_err("credentials refused");
    assert_eq!(e.kind, HostErrorKind::StaleMapping);
    assert_eq!(removes(&fx.sim), 0);
    assert_eq!(fx.sim.with_state(|s| s.mappings().len()), 1);
}

/// The driver's repair of a mapping its other staged volumes use happens only under the share's exclusive lock, and
/// the same way on both backends: the stage that finds the mapping Disconnected after a reboot upgrades, removes and
/// maps again; the others' links resolve afterwards.
#[tokio::test]
async fn a_disconnected_mapping_is_repaired_only_by_the_drivers_exclusive_repair() {
    use crate::testing::Env;
    let mut env = Env::on(
        sim::wmi::TestBackend::Native,
        &json!({"smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": PW, "domain": "CORP"}],
            "shares": [{"name": "data"}]}]}}),
    );
    let req = smb_stage;
    for id in ["v1", "v2"] {
        env.stage(&req(id), crate::testing::d())
            .await
            .expect("stage");
    }
    env.sim.reboot().expect("reboot");
    env.restart();
    env.sim.clear_audit();
    env.clear_calls();
    env.stage(&req("v3"), crate::testing::d())
        .await
        .expect("v3 repairs the mapping");
    let wmi: Vec<String> = env
        .sim
        .audit(0)
        .into_iter()
        .map(|e| e.rpc)
        .filter(|r| r.starts_with("MSFT_SmbGlobalMapping."))
        .collect();
    assert_eq!(
        wmi,
        [
            "MSFT_SmbGlobalMapping.Remove",
            "MSFT_SmbGlobalMapping.Create"
        ]
    );
    assert_eq!(
        env.sim
            .with_state(|s| s.mappings().values().next().map(|m| m.status)),
        Some(MappingStatus::Ok)
    );
    // The plain call (shared side) reports the mapping stale; the repair runs afresh after the upgrade, once neither
    // other volume reaches the share through the mapping (issue 37 item 8).
    use crate::host::HostOp::{IsSymlink, NewSmbGlobalMapping, RemoveSmbGlobalMapping, Rmdir};
    assert_eq!(
        env.take_ops(),
        [
            Rmdir,
            NewSmbGlobalMapping,
            NewSmbGlobalMapping,
            IsSymlink,
            IsSymlink,
            RemoveSmbGlobalMapping,
            NewSmbGlobalMapping,
            IsSymlink
        ]
    );
}

// ---- review M4: the driver's records say which shares it mapped ----

/// A node moved from csiProxy to hostProcess mode: the mapping its volume was staged with was made through
/// csi-proxy, so it is in no native ledger; after a reboot it is Disconnected. The native backend counts it as
/// wincsi's because the records say so, and the restage repairs it. (Before: "not created by wincsi", forever.)
#[tokio::test]
async fn a_share_mapped_through_csi_proxy_is_repaired_after_the_node_moves_to_native() {
    use crate::testing::Env;
    let mut env = Env::on(
        sim::wmi::TestBackend::CsiProxy,
        &json!({"smb": {"servers": [{"name": "fs1",
            "accounts": [{"user": "bob", "password": PW, "domain": "CORP"}],
            "shares": [{"name": "data"}]}]}}),
    );
    let req = smb_stage("v1");
    env.stage(&req, crate::testing::d())
        .await
        .expect("stage through csi-proxy");
    env.sim.reboot().expect("reboot");
    env.switch_backend(sim::wmi::TestBackend::Native);
    assert_eq!(
        crate::backend::recorded_shares(env.mgr.store()),
        [r"\\fs1\data".to_owned()]
    );
    env.mgr
        .reconcile(crate::testing::d())
        .await
        .expect("reconcile");
    env.stage(&req, crate::testing::d())
        .await
        .expect("the restage repairs the csi-proxy-era mapping");
    assert_eq!(
        env.sim
            .with_state(|s| s.mappings().values().next().map(|m| m.status)),
        Some(MappingStatus::Ok)
    );
    let ledger = std::fs::read_to_string(env.dir.path().join(LEDGER_FILE)).expect("ledger");
    assert!(ledger.contains(r"\\\\fs1\\data"), "{ledger}");
}

// ---- review M1: the error object of a failed call ----

/// The SMB and iSCSI providers raise their failures (`WBEM_E_FAILED` here) with an `MSFT_WmiError` naming the code
/// (`Windows System Error 1219`, `HRESULT 0xefff003f`): the kind comes from it, and the tolerated codes are tolerated
/// raised as returned. (Before: only the HRESULT was read, so 1219 was "Other" and "already logged in" an error.)
#[tokio::test]
async fn raised_provider_errors_are_read_from_their_error_object() {
    let fx = Fx::new();
    let h = &fx.host;
    h.new_smb_global_mapping(&share(r"\\fs1\data"), None, Some(&bob()), d())
        .await
        .expect("bob maps");
    let alice = SmbCredential::new(r"CORP\alice", Secret::new(PW));
    let e = h
        .new_smb_global_mapping(&share(r"\\FS1\apps"), None, Some(&alice), d())
        .await
        .expect_err("1219");
    assert_eq!(e.kind, HostErrorKind::MultipleConnections, "{}", e.message);
    assert!(e.message.contains("Windows System Error"), "{}", e.message);
    fx.sim
        .fail_nth("MSFT_SmbGlobalMapping.Create", 1, "raise:1312")
        .expect("fault");
    let e = h
        .new_smb_global_mapping(&share(r"\\fs1\apps"), None, Some(&bob()), d())
        .await
        .expect_err("1312");
    assert_eq!(e.kind, HostErrorKind::LogonFailure, "{}", e.message);
    // iSCSI: a portal that exists, a login that exists and a session already gone are not failures.
    for (call, code) in [
        ("MSFT_iSCSITargetPortal.New", "raise:0xEFFF0032"),
        ("MSFT_iSCSITarget.Connect", "raise:0xEFFF003F"),
    ] {
        fx.sim.fail_nth(call, 1, code).expect("fault");
    }
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal: already exists (another stage added it meanwhile)");
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("already logged in");
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("logged in");
    h.disconnect_target(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("logout");
    assert_eq!(fx.sim.with_state(|s| s.sessions().len()), 0);
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("logged in again");
    fx.sim
        .fail_nth("MSFT_iSCSITarget.Disconnect", 1, "raise:0xEFFF000B")
        .expect("fault");
    h.disconnect_target(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("session gone already (another logout meanwhile)");
    // The session the fault kept is not the driver's any more (it took the logout as done): someone else's now.
    fx.sim
        .with_state_mut(|s| s.disconnect_target("10.0.0.5", 3260, IQN))
        .expect("logout outside the driver");
    // An untolerated raised status keeps its kind.
    fx.sim
        .fail_nth("MSFT_iSCSITarget.Connect", 1, "raise:0xEFFF0009")
        .expect("fault");
    let e = h
        .connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect_err("authentication failure");
    assert_eq!(e.kind, HostErrorKind::LogonFailure, "{}", e.message);
    assert!(e.message.contains("HRESULT 0xefff0009"), "{}", e.message);
}

// ---- review L3: persistentLogin on a target that already has a session ----

#[tokio::test]
async fn a_persistent_login_asked_for_a_target_with_a_session_registers_it() {
    let fx = Fx::new();
    let h = &fx.host;
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("login");
    fx.calls();
    h.connect_target_persistent(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("persistent");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_iSCSITargetPortal",
            "ASSOCIATORS MSFT_iSCSITargetToiSCSITargetPortal->MSFT_iSCSITarget",
            "ASSOCIATORS MSFT_iSCSITargetToiSCSISession->MSFT_iSCSISession",
            "MSFT_iSCSISession.Register"
        ]
    );
    h.connect_target_persistent(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("already persistent: nothing more");
    assert!(
        !fx.calls()
            .contains(&"MSFT_iSCSISession.Register".to_owned())
    );
    // The initiator logs it back in at boot, with the login's CHAP credentials.
    fx.sim.reboot().expect("reboot");
    assert_eq!(fx.sim.with_state(|s| s.sessions().len()), 1);
    let audit = serde_json::to_string(&fx.sim.audit(0)).expect("audit");
    assert!(!audit.contains(CHAP));
}

/// Someone else logs in between the backend's look (no session yet) and its `Connect`, which answers "already logged
/// in": that session is someone else's, joined as if the look had found it, so `DisconnectTarget` leaves it in place.
/// (Before: the session ledger was cleared but the join not recorded, so the logout cut the other user's session.)
#[tokio::test]
async fn a_session_made_between_the_look_and_connect_is_joined_and_left_in_place() {
    let fx = Fx::new();
    let h = &fx.host;
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    fx.sim
        .hang_nth("MSFT_iSCSITarget.Connect", 1)
        .expect("hang");
    let (p, auth) = (portal("10.0.0.5"), chap());
    let login = h.connect_target(&p, IQN, &auth, d());
    tokio::pin!(login);
    tokio::select! {
        r = &mut login => panic!("answered despite the hang: {r:?}"),
        () = fx.sim.wait_hung(1) => {}
    }
    fx.sim
        .with_state_mut(|s| {
            s.connect_target(
                "10.0.0.5",
                3260,
                IQN,
                sim::state::AuthType::OneWayChap,
                "node",
                &sim::Secret::new(CHAP),
            )
        })
        .expect("an administrator's login meanwhile");
    fx.sim.release_hangs();
    login.await.expect("already logged in counts as logged in");
    h.disconnect_target(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("the unstage's logout");
    assert_eq!(
        fx.sim.with_state(|s| s.sessions().len()),
        1,
        "the administrator's session is left in place"
    );
    // Once that session is gone, the backend's own login is its own to end.
    fx.sim
        .with_state_mut(|s| s.disconnect_target("10.0.0.5", 3260, IQN))
        .expect("the administrator logs out");
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("login");
    h.disconnect_target(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("logout");
    assert_eq!(fx.sim.with_state(|s| s.sessions().len()), 0);
}

// ---- review L4: the new partition is found by listing ----

#[tokio::test]
async fn the_new_partition_is_onlined_though_its_out_parameter_does_not_decode() {
    let fx = Fx::new();
    let h = &fx.host;
    fx.sim
        .with_state_mut(|s| {
            let mut b = *s.behaviour();
            b.created_partition_returned = false;
            s.set_behaviour(b)
        })
        .expect("behaviour");
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("login");
    let n = h
        .get_target_disks(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("disks")[0];
    h.set_disk_online_writable(n, d()).await.expect("online");
    fx.calls();
    h.partition_disk(n, d()).await.expect("partition");
    let calls = fx.calls();
    assert_eq!(
        calls[calls.len() - 2..],
        ["SELECT MSFT_Partition", "MSFT_Partition.Online"],
        "{calls:?}"
    );
}

// ---- review M5: a capability whose start-up check failed is checked again ----

/// At boot WMI answered "shutting down" for the SMB namespace: the backend starts without SMB, says so on readiness,
/// and checks again with backoff (a second failure included) until SMB is found; then SMB volumes work and readiness
/// is green. (Before: the start-up report was kept for the process's life, readiness green, SMB refused.)
#[tokio::test(start_paused = true)]
async fn a_capability_whose_check_failed_at_start_is_checked_again_until_found() {
    let fx = Fx::new();
    let at_boot = ProbeReport::from_lookup(
        |ns| (ns == Namespace::Smb).then_some(winhost::codes::HResult(0x8004_1033)),
        |_, _| Ok(Vec::new()),
    );
    let view = Arc::new(WindowsView::new(fx.sim.clone()).with_probe(at_boot));
    let h = NativeHost::new(view.clone(), None);
    assert!(
        h.capabilities().list_smb_mappings,
        "not absent: only unchecked"
    );
    let why = degraded(&*view).expect("degraded");
    assert!(
        why.contains("SMB global mappings: namespace ROOT\\Microsoft\\Windows\\SMB (0x80041033 WBEM_E_SHUTTING_DOWN)"),
        "{why}"
    );
    let probe = super::NativeProbe::new(h.clone(), K);
    assert_eq!(probe.check().await.expect_err("not ready"), why);
    let e = h
        .new_smb_global_mapping(&share(r"\\fs1\data"), None, Some(&bob()), d())
        .await
        .expect_err("unavailable meanwhile");
    assert_eq!(e.kind, HostErrorKind::Unavailable);
    // The first check again fails too; the second finds it.
    fx.sim
        .fail_nth(
            "ConnectServer ROOT\\Microsoft\\Windows\\SMB",
            1,
            "hresult:0x80041033",
        )
        .expect("fault");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    h.clone()
        .recheck_capabilities(move |r| {
            s.lock()
                .expect("lock")
                .push(r.supports(winhost::probe::Capability::Smb));
        })
        .await;
    assert_eq!(*seen.lock().expect("lock"), [false, false, true]);
    assert_eq!(
        fx.sim
            .audit(0)
            .iter()
            .filter(|e| e.rpc == "ConnectServer ROOT\\Microsoft\\Windows\\SMB")
            .count(),
        2
    );
    assert_eq!(degraded(&*view), None);
    probe.check().await.expect("ready");
    h.new_smb_global_mapping(&share(r"\\fs1\data"), None, Some(&bob()), d())
        .await
        .expect("SMB works");
    // A host that lacks SMB for good is settled at once: nothing to check again, nothing degraded.
    let absent = ProbeReport::from_lookup(
        |ns| (ns == Namespace::Smb).then_some(winhost::codes::HResult(0x8004_100E)),
        |_, _| Ok(Vec::new()),
    );
    let view = Arc::new(WindowsView::new(fx.sim.clone()).with_probe(absent));
    assert_eq!(degraded(&*view), None);
}

// ---- review L6: a reused mapping made without encryption is warned about ----

/// Someone else mapped the share without `RequirePrivacy`: wincsi, which would have required it, reuses it (it
/// works, and removing it is not wincsi's to do) and says so at `warn`; with `--smb-require-privacy=false` it does
/// not. Each such reuse is counted in `wincsi_smb_unencrypted_mapping_reuses_total`. (Before: silently reused, then
/// only warned about.)
#[test]
fn a_reused_mapping_without_encryption_is_warned_about() {
    use std::io::Write;
    use std::sync::Mutex;
    use winhost::model::SmbGlobalMappingCreate;
    use winhost::{CallContext, SmbWmi};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sandbox = tempfile::tempdir().expect("tmp");
    let sim = SimHost::new(&scenario(), sandbox.path(), HostOptions::default()).expect("sim");
    let view = WindowsView::with_handle(sim.clone(), rt.handle().clone());
    let ctx = CallContext::after(Duration::from_secs(60));
    view.global_mapping_create(
        &ctx,
        &SmbGlobalMappingCreate {
            remote_path: r"\\fs1\data",
            local_path: None,
            user_name: Some(r"CORP\bob"),
            password: PW,
            persistent: None,
            require_privacy: Some(false),
            require_integrity: None,
            use_write_through: None,
            compress_network_traffic: None,
            transport_type: None,
            block_ntlm: None,
        },
    )
    .expect("someone else's mapping");
    let ledger = super::Ledger::open(None, super::LEDGER_FILE, "SMB mapping");
    let sessions = super::Ledger::open(None, super::SESSION_LEDGER_FILE, "iSCSI session");
    let joined = super::Ledger::open(None, super::JOINED_LEDGER_FILE, "joined iSCSI session");
    let reuse = |privacy: bool| -> String {
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(sub);
        let ops = super::Ops {
            w: &view,
            c: &ctx,
            op: crate::host::HostOp::NewSmbGlobalMapping,
            ledger: &ledger,
            sessions: &sessions,
            joined: &joined,
            smb_privacy: privacy,
            calls: &super::inflight::InFlightCalls::open(None),
        };
        let pass = super::smb::new_mapping(
            &ops,
            &share(r"\\fs1\data"),
            None,
            Some(&(r"CORP\bob".to_owned(), Secret::new(PW))),
            &crate::host::SmbMappingOptions::default(),
        )
        .expect("reused");
        assert_eq!(pass, super::smb::MapPass::Done);
        String::from_utf8_lossy(&buf.0.lock().expect("lock")).into_owned()
    };
    // Counted too, for an alert (`wincsi_smb_unencrypted_mapping_reuses_total`). The registry is the process's, which
    // other tests may also move: at least this reuse is counted.
    let metrics = crate::metrics::install();
    let before = metrics.unencrypted_mapping_reuses();
    let warned = reuse(true);
    assert!(
        metrics.unencrypted_mapping_reuses() > before,
        "the reuse is counted"
    );
    assert!(
        warned.contains("WARN") && warned.contains("does not require encryption"),
        "{warned}"
    );
    assert!(!warned.contains(PW));
    assert!(!reuse(false).contains("does not require encryption"));
    assert_eq!(
        sim.with_state(|s| s.mappings().len()),
        1,
        "reused, not replaced"
    );
}

/// Logs in to the 10.0.0.5 target and brings its LUN online and writable; its disk number.
async fn attach_lun(fx: &Fx) -> u32 {
    let h = &fx.host;
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("login");
    let n = h
        .get_target_disks(&portal("10.0.0.5"), IQN, d())
        .await
        .expect("disks")[0];
    h.set_disk_online_writable(n, d()).await.expect("online");
    fx.calls();
    n
}

/// The LUN holds `content` (scenario `content` entries): another system's bytes on the whole device.
fn lun_with(fx: &Fx, content: serde_json::Value) {
    fx.sim
        .with_state_mut(|s| {
            s.replace_lun(
                IQN,
                0,
                &serde_json::from_value(
                    json!({"id": "lun0b", "size": 10 * GIB, "content": content}),
                )
                .expect("disk"),
            )
        })
        .expect("replace");
}

/// A RAW LUN carrying another system's data (a whole-disk file system, an LVM or ZFS member, encryption, swap, a
/// partition table Windows did not take, or bytes no signature explains) is refused before `Initialize`, naming what is
/// where; nothing is written and no data is lost. A blank one is initialised (the first test's sequence).
#[tokio::test]
async fn partition_disk_refuses_a_raw_disk_whose_sectors_are_not_blank() {
    let cases: &[(serde_json::Value, &str)] = &[
        (
            json!([{"signature": "ext4"}]),
            "ext2/ext3/ext4 superblock at byte 1080",
        ),
        (json!([{"signature": "xfs"}]), "XFS superblock at byte 0"),
        (
            json!([{"signature": "lvm2"}]),
            "LVM2 physical volume label at byte 536",
        ),
        (json!([{"signature": "luks2"}]), "LUKS header at byte 0"),
        (
            json!([{"signature": "btrfs"}]),
            "Btrfs superblock at byte 65600",
        ),
        (json!([{"signature": "zfs"}]), "ZFS label at byte 16384"),
        (json!([{"signature": "ntfs"}]), "NTFS boot sector at byte 3"),
        (
            json!([{"signature": "fat32"}]),
            "FAT32 boot sector at byte 82",
        ),
        (
            json!([{"signature": "swap"}]),
            "Linux swap signature at byte 4086",
        ),
        (
            json!([{"signature": "linux_raid"}]),
            "Linux MD RAID superblock at byte 4096",
        ),
        (json!([{"signature": "gpt"}]), "GPT header at byte 512"),
        (
            json!([{"offset": 8, "from_end": true, "hex": "01"}]),
            "non-zero data (no known signature) at byte 10737418232",
        ),
    ];
    for (content, what) in cases {
        let fx = Fx::new();
        lun_with(&fx, content.clone());
        let n = attach_lun(&fx).await;
        let err = fx.host.partition_disk(n, d()).await.expect_err("not blank");
        assert_eq!(err.kind, HostErrorKind::MayHoldData, "{content}: {err:?}");
        assert!(
            err.message.contains(what) && err.message.contains("is not initialised"),
            "{content}: {}",
            err.message
        );
        assert_eq!(fx.calls(), ["SELECT MSFT_Disk", "ReadFile"], "{content}");
        assert!(fx.sim.data_loss_events().is_empty(), "{content}");
        assert!(
            fx.sim.with_state(|s| s
                .disks()
                .iter()
                .any(|x| x.id == "lun0b" && x.partitions.is_empty() && !x.content.is_empty())),
            "{content}: untouched"
        );
    }
}

/// A disk whose raw read fails cannot be proven blank: refused the same way, never initialised.
#[tokio::test]
async fn partition_disk_refuses_a_raw_disk_it_cannot_read() {
    let fx = Fx::new();
    let n = attach_lun(&fx).await;
    fx.sim.fail_nth("ReadFile", 1, "win32:5").expect("fault");
    let err = fx.host.partition_disk(n, d()).await.expect_err("unread");
    assert_eq!(err.kind, HostErrorKind::MayHoldData);
    assert!(
        err.message.contains("could not be read to prove it blank"),
        "{}",
        err.message
    );
    assert_eq!(fx.calls(), ["SELECT MSFT_Disk", "ReadFile"]);
    h_partition_ok(&fx, n).await;
}

async fn h_partition_ok(fx: &Fx, n: u32) {
    fx.host
        .partition_disk(n, d())
        .await
        .expect("blank: partitioned");
    let calls = fx.calls();
    assert_eq!(
        calls[..3],
        ["SELECT MSFT_Disk", "ReadFile", "MSFT_Disk.Initialize"],
        "{calls:?}"
    );
}

/// Only RAW calls for `Initialize`; a NULL or undocumented `PartitionStyle` proves nothing (review H1).
#[test]
fn partition_style_null_or_undocumented_is_refused() {
    use winhost::codes::PartitionStyle;
    assert_eq!(
        super::blank::needs_initialize(Some(PartitionStyle::Raw)),
        Ok(true)
    );
    assert_eq!(
        super::blank::needs_initialize(Some(PartitionStyle::Gpt)),
        Ok(false)
    );
    assert_eq!(
        super::blank::needs_initialize(Some(PartitionStyle::Mbr)),
        Ok(false)
    );
    assert!(
        super::blank::needs_initialize(None)
            .unwrap_err()
            .contains("no partition style")
    );
    assert!(
        super::blank::needs_initialize(Some(PartitionStyle::Unknown(7)))
            .unwrap_err()
            .contains("undocumented value 7")
    );
}

/// `DiscoverTargetPortal` reads the portal's cache and never refreshes it on its own; `RefreshTargetPortal` is
/// `Update` with the portal's own address and port, after which a target the array created later is listed.
#[tokio::test]
async fn discovery_reads_the_cache_and_refresh_updates_with_the_portals_parameters() {
    const LATE: &str = "iqn.2026-01.io.wincsi:pvc-late";
    let fx = Fx::new();
    let h = &fx.host;
    let p = portal("10.0.0.5");
    h.add_target_portal(&p, d()).await.expect("portal");
    let spec = serde_json::from_value(json!({"iqn": LATE, "luns": [{"lun": 0, "size": GIB}]}))
        .expect("target");
    fx.sim
        .with_state_mut(|s| s.add_target("10.0.0.5", 3260, &spec))
        .expect("add target");
    fx.calls();
    assert_eq!(
        h.discover_target_portal(&p, d()).await.expect("discover"),
        [IQN]
    );
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_iSCSITargetPortal",
            "ASSOCIATORS MSFT_iSCSITargetToiSCSITargetPortal->MSFT_iSCSITarget"
        ]
    );
    assert!(h.capabilities().refresh_discovery);
    h.refresh_target_portal(&p, d()).await.expect("refresh");
    let audit = fx.sim.audit(0);
    let update = audit.last().expect("Update");
    assert_eq!(update.rpc, "MSFT_iSCSITargetPortal.Update");
    assert_eq!(update.args["target_portal_address"], "10.0.0.5");
    assert_eq!(update.args["target_portal_port_number"], 3260);
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_iSCSITargetPortal",
            "MSFT_iSCSITargetPortal.Update"
        ]
    );
    assert_eq!(
        h.discover_target_portal(&p, d()).await.expect("discover"),
        [IQN, LATE]
    );
    let err = h
        .refresh_target_portal(&portal("10.0.0.77"), d())
        .await
        .expect_err("not added");
    assert_eq!(err.kind, HostErrorKind::NotFound);
}

// ---- review L3: discovery CHAP given for a portal already added ----

/// The array's discovery CHAP changes after the portal was added (or an administrator added it with other
/// credentials): Windows keeps what the portal was added with, so its SendTargets is refused and a target the array
/// creates later never shows. A volume that gives discovery CHAP for that portal, while no target through it is
/// connected, tries its discovery (`Update`), and on the refusal removes the portal and adds it with the volume's
/// CHAP. A portal whose discovery works keeps its credentials (one `Update`), and a portal sessions use is not touched.
/// (Before: `AddTargetPortal` did nothing for a portal that was there, whatever CHAP the volume gave.)
#[tokio::test]
async fn discovery_chap_given_for_an_added_portal_is_applied_when_its_own_is_refused() {
    let fx = Fx::new();
    let h = &fx.host;
    let hidden = portal("10.0.0.9");
    let disc = |s: &str| IscsiAuth::OneWay {
        username: "disc".into(),
        secret: Secret::new(s),
    };
    h.add_target_portal_with_chap(&hidden, &disc(DISC), d())
        .await
        .expect("discovery CHAP");
    assert_eq!(
        h.discover_target_portal(&hidden, d())
            .await
            .expect("targets")
            .len(),
        1
    );
    fx.calls();
    // Its discovery works: kept, one Update.
    h.add_target_portal_with_chap(&hidden, &disc(DISC), d())
        .await
        .expect("the same CHAP");
    let calls = fx.calls();
    assert!(
        calls.contains(&"MSFT_iSCSITargetPortal.Update".to_owned()),
        "{calls:?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| c == "MSFT_iSCSITargetPortal.Remove" || c == "MSFT_iSCSITargetPortal.New"),
        "{calls:?}"
    );
    // The array's administrator rotates the discovery secret and creates a target.
    const ROTATED: &str = "Discovery-Pw2";
    fx.sim
        .with_state_mut(|s| {
            s.set_discovery_chap(
                "10.0.0.9",
                3260,
                Some(("disc".into(), sim::Secret::new(ROTATED))),
            )
        })
        .expect("rotate");
    h.refresh_target_portal(&hidden, d())
        .await
        .expect_err("the portal's own CHAP is refused now");
    fx.calls();
    h.add_target_portal_with_chap(&hidden, &disc(ROTATED), d())
        .await
        .expect("applied");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_iSCSITargetPortal",
            "ASSOCIATORS MSFT_iSCSITargetToiSCSITargetPortal->MSFT_iSCSITarget",
            "MSFT_iSCSITargetPortal.Update",
            "MSFT_iSCSITargetPortal.Remove",
            "MSFT_iSCSITargetPortal.New",
        ]
    );
    h.refresh_target_portal(&hidden, d())
        .await
        .expect("its discovery works again");
    // A portal whose target has a session is left as it is, whatever CHAP a volume gives.
    h.add_target_portal(&portal("10.0.0.5"), d())
        .await
        .expect("portal");
    h.connect_target(&portal("10.0.0.5"), IQN, &chap(), d())
        .await
        .expect("login");
    fx.calls();
    h.add_target_portal_with_chap(&portal("10.0.0.5"), &disc("Other-Secret-1"), d())
        .await
        .expect("left as it is");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_iSCSITargetPortal",
            "ASSOCIATORS MSFT_iSCSITargetToiSCSITargetPortal->MSFT_iSCSITarget",
        ]
    );
    assert_eq!(fx.sim.with_state(|s| s.sessions().len()), 1);
}

/// Issue 37 (note item 8): a driver killed while its `MSFT_SmbGlobalMapping.Create` is in flight (the share written
/// to the mapping ledger before it was issued); the restarted driver reads the ledger, looks (no mapping yet) and
/// issues its own `Create`; the dead driver's lands first, so the restarted one's fails on the name taken. That
/// failure made nothing, but the mapping there is wincsi's: the restarted driver must keep counting it and remove it at
/// the share's last unstage (before: the key was dropped, and the mapping was left for ever as "not created by
/// wincsi").
#[tokio::test]
async fn a_killed_drivers_create_landing_before_the_restarted_drivers_own_keeps_the_mapping_wincsis()
 {
    let fx = Fx::new();
    let stage = path(r"C:\var\lib\kubelet\plugins\v1");
    // The first process: its Create is held on the host when it dies (its Windows view is killed: it issues nothing
    // more; its stage is dropped).
    fx.sim
        .hang_nth("MSFT_SmbGlobalMapping.Create", 1)
        .expect("hang");
    let view = WindowsView::new(fx.sim.clone());
    let first = NativeHost::new(Arc::new(view.clone()), Some(fx.state.path()));
    let (s, st) = (share(r"\\fs1\data\base"), stage.clone());
    let dying = tokio::spawn(async move {
        first
            .new_smb_global_mapping(&s, Some(&st), Some(&bob()), d())
            .await
    });
    fx.sim.wait_hung(1).await;
    view.kill();
    dying.abort();
    // The restarted process, over the state directory as the dead one left it (a copy: nothing the dead one's thread
    // does from now on is seen).
    let state = tempfile::tempdir().expect("tmp");
    std::fs::copy(
        fx.state.path().join(LEDGER_FILE),
        state.path().join(LEDGER_FILE),
    )
    .expect("the share is in the ledger before Create");
    let restarted = Fx::native(&fx.sim, state.path());
    // The dead process's held call is let go (the test lands its mapping below, at the moment it matters).
    fx.sim.fail_hangs();
    fx.sim.wait_unhung().await;
    // kubelet's retry: the restarted driver looks (no mapping) and issues its own Create, held.
    fx.sim
        .hang_nth("MSFT_SmbGlobalMapping.Create", 1)
        .expect("hang");
    fx.calls();
    let retry = {
        let (h, s, st) = (restarted.clone(), share(r"\\fs1\data\base"), stage.clone());
        tokio::spawn(async move {
            h.new_smb_global_mapping(&s, Some(&st), Some(&bob()), d())
                .await
        })
    };
    fx.sim.wait_hangs_begun(2).await;
    // The dead driver's Create lands now (a slow provider finishing the method of a caller that died).
    fx.sim
        .with_state_mut(|s| {
            s.new_smb_global_mapping(r"\\fs1\data", "", r"CORP\bob", &sim::Secret::new(PW))
        })
        .expect("the late mapping");
    fx.sim.release_hangs();
    let failed = retry.await.expect("task").expect_err("the name is taken");
    // It looked (no mapping of the share), then issued its own Create. (The dead driver's held Create, let go with a
    // failure, may be audited late: it is the injected one.)
    let calls: Vec<String> = fx
        .sim
        .audit(0)
        .into_iter()
        .filter(|e| !e.injected)
        .map(|e| e.rpc)
        .collect();
    assert_eq!(
        calls[..3],
        [BY_PATH, ALL, "MSFT_SmbGlobalMapping.Create"],
        "{failed:?}"
    );
    fx.sim.clear_audit();
    // kubelet's next retry reuses the mapping; the unstage removes it: it is wincsi's.
    restarted
        .new_smb_global_mapping(&share(r"\\fs1\data\base"), Some(&stage), Some(&bob()), d())
        .await
        .expect("reuse");
    restarted.rmdir(&stage, false, d()).await.expect("unlink");
    restarted
        .remove_smb_global_mapping(&share(r"\\fs1\data"), d())
        .await
        .expect("remove");
    assert!(
        fx.sim.with_state(|s| s.mappings().is_empty()),
        "the mapping the dead driver made is left behind"
    );
    assert!(fx.sim.invariants().ok(), "{:?}", fx.sim.invariants());
}
