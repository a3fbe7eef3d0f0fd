//! The native backend over the simulated host's Windows view: its host-call sequences in WMI and Win32 terms (the
//! sim's audit of the facade), and each documented difference from the csi-proxy backend.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sim::state::MappingStatus;
use sim::wmi::WindowsView;
use sim::{HostOptions, Scenario, SimHost};
use winhost::probe::{Namespace, ProbeReport};

use super::{LEDGER_FILE, NativeHost};
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
                "accounts": [{"user": "bob", "password": PW, "domain": "CORP"}],
                "shares": [{"name": "data", "files": {"base/f.txt": "x"}}]}]},
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
            "SELECT MSFT_SmbGlobalMapping",
            "MSFT_SmbGlobalMapping.Create",
            "CreateSymbolicLinkW"
        ]
    );
    assert!(
        fx.state.path().join(LEDGER_FILE).exists(),
        "recorded before Create"
    );
    assert!(h.is_symlink(&stage, d()).await.expect("is"));
    assert_eq!(
        fx.calls(),
        [
            "FSCTL_GET_REPARSE_POINT",
            "SELECT MSFT_SmbGlobalMapping",
            "GetFileAttributesW"
        ]
    );
    // A second volume on the share reuses the working mapping.
    let stage2 = path(r"C:\var\lib\kubelet\plugins\v2");
    h.new_smb_global_mapping(&share(r"\\fs1\data"), Some(&stage2), Some(&bob()), d())
        .await
        .expect("reuse");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_SmbGlobalMapping",
            "GetFileAttributesW",
            "CreateSymbolicLinkW"
        ]
    );
    // After a reboot the mapping is Disconnected: the link does not resolve (false, not an error), and the next
    // NewSmbGlobalMapping removes and re-creates it directly (csi-proxy would hit 1219).
    fx.sim.reboot().expect("reboot");
    assert!(!h.is_symlink(&stage, d()).await.expect("is"));
    fx.calls();
    h.rmdir(&stage, false, d()).await.expect("rmdir");
    h.new_smb_global_mapping(&share(r"\\fs1\data\base"), Some(&stage), Some(&bob()), d())
        .await
        .expect("repair");
    assert_eq!(
        fx.calls(),
        [
            "RemoveDirectoryW",
            "SELECT MSFT_SmbGlobalMapping",
            "MSFT_SmbGlobalMapping.Remove",
            "MSFT_SmbGlobalMapping.Create",
            "CreateSymbolicLinkW"
        ]
    );
    assert!(
        h.is_symlink(&stage2, d()).await.expect("is"),
        "the other volume's link resolves again"
    );
    // Removal by a restarted driver: the ledger is durable.
    let restarted = Fx::native(&fx.sim, fx.state.path());
    for p in [&stage, &stage2] {
        restarted.rmdir(p, false, d()).await.expect("unlink");
    }
    fx.calls();
    restarted
        .remove_smb_global_mapping(&share(r"\\FS1\Data\base"), d())
        .await
        .expect("remove");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_SmbGlobalMapping",
            "MSFT_SmbGlobalMapping.Remove"
        ]
    );
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
            "MSFT_Disk.Refresh",
            "SELECT MSFT_Disk",
            "MSFT_Disk.SetAttributes"
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
            "MSFT_Disk.Initialize",
            "MSFT_Disk.Refresh",
            "SELECT MSFT_Partition",
            "MSFT_Disk.CreatePartition",
            "MSFT_Disk.Refresh",
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
    // Grow the LUN by 1 GiB: resize to the maximum (after csi-proxy's 100 MiB rule).
    fx.sim
        .with_state_mut(|s| s.set_disk_size("lun0", 11 * GIB))
        .expect("grow");
    h.resize_volume(v, 0, d()).await.expect("resize");
    assert_eq!(
        fx.calls(),
        [
            "SELECT MSFT_Volume",
            "ASSOCIATORS MSFT_PartitionToVolume->MSFT_Partition",
            "MSFT_Partition.GetSupportedSize",
            "MSFT_Partition.Resize"
        ]
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
