//! The host processes each release starts, through the host's call path (planned, run, settled, audited).

use serde_json::{Value, json};

use crate::host::SimHost;
use crate::profile::CsiProxyVersion;
use crate::scenario::Scenario;
use crate::secret::Secret;
use crate::state::{AuthType, HostOptions, Spawned, State};

const EXAMPLE: &str = include_str!("../../../scenarios/example.json");
const K: &str = r"C:\var\lib\kubelet";
const PORTAL: &str = "192.0.2.10";

fn host(v: CsiProxyVersion) -> (SimHost, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let opts = HostOptions {
        csi_proxy_version: Some(v),
        ..HostOptions::default()
    };
    let h = SimHost::new(&Scenario::from_json(EXAMPLE).unwrap(), dir.path(), opts).unwrap();
    (h, dir)
}

/// Runs `f` as the host call `rpc` with `args` and returns what it started (and whether it succeeded).
async fn spawned<T: Send + 'static>(
    h: &SimHost,
    rpc: &'static str,
    args: Value,
    f: impl FnOnce(&mut State) -> crate::Result<T> + Send + 'static,
) -> (Spawned, bool) {
    let ok = h.call(rpc, args, f).await.is_ok();
    let last = h.audit(0).pop().expect("audited");
    assert_eq!(last.rpc, rpc);
    (last.host_processes, ok)
}

fn ps(n: u64) -> Spawned {
    Spawned {
        powershell: n,
        wmic: 0,
    }
}

const NONE: Spawned = Spawned {
    powershell: 0,
    wmic: 0,
};

fn powershell_era(v: CsiProxyVersion) -> bool {
    matches!(v, CsiProxyVersion::V1_1_3 | CsiProxyVersion::V1_2_1)
}

/// The iSCSI disk of `iqn` (connected, online), as the driver's stage brings it.
fn lun_disk(s: &mut State, iqn: &str) -> u32 {
    s.add_target_portal(PORTAL, 3260).unwrap();
    s.connect_target(PORTAL, 3260, iqn, AuthType::None, "", &Secret::new(""))
        .unwrap();
    // As a stage that waited for them: the disk, then its volumes, have arrived (arrival is asynchronous).
    s.complete_arrivals().unwrap();
    let n = s.get_target_disks(PORTAL, 3260, iqn).unwrap()[0]
        .parse()
        .unwrap();
    s.set_disk_state(n, true).unwrap();
    s.complete_arrivals().unwrap();
    n
}

#[tokio::test]
async fn readiness_calls_per_release_wmic_for_the_bios_serial_none_for_the_filesystem() {
    for v in CsiProxyVersion::ALL {
        let (h, _d) = host(v);
        let (bios, ok) = spawned(&h, "GetBIOSSerialNumber", json!({}), |s| {
            Ok(s.bios_serial_number())
        })
        .await;
        assert!(ok);
        let wmic = Spawned {
            powershell: 0,
            wmic: u64::from(powershell_era(v)),
        };
        assert_eq!(bios, wmic, "{v}: GetBIOSSerialNumber");
        let plugins = format!(r"{K}\plugins");
        for rpc in ["PathExists", "IsSymlink"] {
            let p = plugins.clone();
            let (fs, _) = spawned(&h, rpc, json!({ "path": p }), move |s| s.path_exists(&p)).await;
            assert_eq!(fs, NONE, "{v}: {rpc} is a Go os call on every release");
        }
        let (locations, _) = spawned(&h, "ListDiskLocations", json!({}), |s| {
            Ok(s.list_disk_locations())
        })
        .await;
        assert_eq!(locations, ps(u64::from(powershell_era(v))), "{v}");
        let (service, _) = spawned(&h, "GetService", json!({ "name": "MSiSCSI" }), |s| {
            s.get_service("MSiSCSI")
        })
        .await;
        assert_eq!(service, ps(u64::from(powershell_era(v))), "{v}");
        let counted = h.host_processes();
        if powershell_era(v) {
            assert_eq!(counted["GetBIOSSerialNumber"], wmic);
            assert_eq!(counted["ListDiskLocations"], ps(1));
            assert!(!counted.contains_key("PathExists"), "{counted:?}");
        } else {
            assert!(counted.is_empty(), "{v}: {counted:?}");
        }
    }
}

#[tokio::test]
async fn partition_disk_starts_a_process_per_step_it_takes() {
    for v in CsiProxyVersion::ALL {
        let (h, _d) = host(v);
        let iqn = "iqn.2026-01.io.wincsi:pvc-empty";
        let n = h.with_state_mut(|s| lun_disk(s, iqn));
        let args = json!({ "disk_number": n });
        // RAW: IsDiskInitialized, InitializeDisk, BasicPartitionsExist, CreateBasicPartition.
        let (first, ok) = spawned(&h, "PartitionDisk", args.clone(), move |s| {
            s.partition_disk(n)
        })
        .await;
        assert!(ok);
        // Partitioned: the two checks only.
        let (again, _) = spawned(&h, "PartitionDisk", args, move |s| s.partition_disk(n)).await;
        let (missing, ok) = spawned(&h, "PartitionDisk", json!({ "disk_number": 77 }), |s| {
            s.partition_disk(77)
        })
        .await;
        assert!(!ok);
        if powershell_era(v) {
            assert_eq!((first, again, missing), (ps(4), ps(2), ps(1)), "{v}");
        } else {
            assert_eq!((first, again, missing), (NONE, NONE, NONE), "{v}");
        }
    }
}

#[tokio::test]
async fn a_failed_call_counts_its_steps_up_to_the_first_that_changes_the_host() {
    let (h, _d) = host(CsiProxyVersion::V1_1_3);
    let n = h.with_state_mut(|s| {
        let n = lun_disk(s, "iqn.2026-01.io.wincsi:pvc-empty");
        s.set_disk_state(n, false).unwrap();
        n
    });
    // Offline and RAW: IsDiskInitialized runs, Initialize-Disk fails; the partition steps never run.
    let (offline, ok) = spawned(&h, "PartitionDisk", json!({ "disk_number": n }), move |s| {
        s.partition_disk(n)
    })
    .await;
    assert!(!ok);
    assert_eq!(offline, ps(2));
}

#[tokio::test]
async fn volume_calls_follow_the_mount_point() {
    let (h, _d) = host(CsiProxyVersion::V1_2_1);
    let staging = format!(r"{K}\plugins\x\globalmount");
    let target = format!(r"{K}\pods\p\volumes\x\mount");
    let volume = h.with_state_mut(|s| {
        let n = lun_disk(s, "iqn.2026-01.io.wincsi:pvc-empty");
        s.partition_disk(n).unwrap();
        s.complete_arrivals().unwrap();
        let v = s.list_volumes_on_disk(n, 0).unwrap()[0].clone();
        s.mkdir(&staging).unwrap();
        s.mount_volume(&v, &staging).unwrap();
        s.mkdir(&format!(r"{K}\pods\p\volumes\x")).unwrap();
        s.create_symlink(&staging, &target).unwrap();
        v
    });
    let at = |p: &str| {
        let p = p.to_owned();
        move |s: &mut State| s.get_volume_id_from_target_path(&p)
    };
    let (mount_point, ok) = spawned(
        &h,
        "GetVolumeIDFromTargetPath",
        json!({ "target_path": staging }),
        at(&staging),
    )
    .await;
    assert!(ok);
    assert_eq!(mount_point, ps(1), "one (Get-Item).Target");
    let (through_link, _) = spawned(
        &h,
        "GetVolumeIDFromTargetPath",
        json!({ "target_path": target }),
        at(&target),
    )
    .await;
    assert_eq!(through_link, ps(2), "the pod's link, then the mount point");
    let v = volume.clone();
    let (stats, _) = spawned(
        &h,
        "GetVolumeStats",
        json!({ "volume_id": volume }),
        move |s| s.get_volume_stats(&v),
    )
    .await;
    assert_eq!(stats, ps(1));
    let (empty, _) = spawned(&h, "GetVolumeStats", json!({ "volume_id": "" }), |s| {
        s.get_volume_stats("")
    })
    .await;
    assert_eq!(empty, NONE, "refused before the host");
    let unmount = |v: &str, p: &str| {
        let (v, p) = (v.to_owned(), p.to_owned());
        move |s: &mut State| s.unmount_volume(&v, &p)
    };
    let args = json!({ "volume_id": volume, "target_path": staging });
    let (mounted, ok) = spawned(
        &h,
        "UnmountVolume",
        args.clone(),
        unmount(&volume, &staging),
    )
    .await;
    assert!(ok);
    assert_eq!(
        mounted,
        ps(2),
        "Write-VolumeCache, Remove-PartitionAccessPath"
    );
    let (not_mounted, ok) = spawned(&h, "UnmountVolume", args, unmount(&volume, &staging)).await;
    assert!(!ok);
    assert_eq!(not_mounted, ps(2), "the removal fails");
    let gone = r"\\?\Volume{00000000-0000-0000-0000-000000000000}\";
    let (missing, ok) = spawned(
        &h,
        "UnmountVolume",
        json!({ "volume_id": gone, "target_path": staging }),
        unmount(gone, &staging),
    )
    .await;
    assert!(!ok);
    assert_eq!(missing, ps(1), "the flush fails");
}

#[tokio::test]
async fn smb_mapping_steps_depend_on_the_mapping_before_the_call() {
    let (h, _d) = host(CsiProxyVersion::V1_1_3);
    let map = |remote: &str, local: &str, password: &str| {
        let (r, l, p) = (remote.to_owned(), local.to_owned(), Secret::new(password));
        let args = json!({ "remote_path": r, "local_path": l, "username": "CORP\\alice", "password": "<redacted>" });
        (args, move |s: &mut State| {
            s.new_smb_global_mapping(&r, &l, "CORP\\alice", &p)
        })
    };
    let share = r"\\fileserver.corp.example\data";
    h.with_state_mut(|s| s.mkdir(&format!(r"{K}\plugins\a")).unwrap());
    // Not mapped: Get-SmbGlobalMapping, New-SmbGlobalMapping, New-Item.
    let (args, f) = map(
        share,
        &format!(r"{K}\plugins\a\globalmount"),
        "alice-password-1",
    );
    let (first, ok) = spawned(&h, "NewSmbGlobalMapping", args, f).await;
    assert!(ok);
    assert_eq!(first, ps(3));
    // Mapped and valid: Get-SmbGlobalMapping, Test-Path, New-Item.
    let (args, f) = map(share, &format!(r"{K}\plugins\a\second"), "alice-password-1");
    let (second, ok) = spawned(&h, "NewSmbGlobalMapping", args, f).await;
    assert!(ok);
    assert_eq!(second, ps(3));
    // The link fails (something is at the path): all three ran.
    let (args, f) = map(share, &format!(r"{K}\plugins\a\second"), "alice-password-1");
    let (link_failed, ok) = spawned(&h, "NewSmbGlobalMapping", args, f).await;
    assert!(!ok);
    assert_eq!(link_failed, ps(3));
    // The mapping fails (bad password on another share's root): no link step.
    let (args, f) = map(
        r"\\fileserver.corp.example\team",
        &format!(r"{K}\plugins\a\third"),
        "wrong",
    );
    let (refused, ok) = spawned(&h, "NewSmbGlobalMapping", args, f).await;
    assert!(!ok);
    assert_eq!(refused, ps(2));
    // A remote path without a share: refused before PowerShell.
    let (args, f) = map(r"\\fileserver.corp.example", "", "x");
    let (invalid, ok) = spawned(&h, "NewSmbGlobalMapping", args, f).await;
    assert!(!ok);
    assert_eq!(invalid, NONE);
    let r = share.to_owned();
    let (removed, ok) = spawned(
        &h,
        "RemoveSmbGlobalMapping",
        json!({ "remote_path": share }),
        move |s| s.remove_smb_global_mapping(&r),
    )
    .await;
    assert!(ok);
    assert_eq!(removed, ps(1));
    assert_eq!(h.host_processes()["NewSmbGlobalMapping"], ps(11));
}

#[tokio::test]
async fn injected_faults_start_nothing() {
    let (h, _d) = host(CsiProxyVersion::V1_1_3);
    h.fail_nth("GetBIOSSerialNumber", 1, "boom").unwrap();
    let (injected, ok) = spawned(&h, "GetBIOSSerialNumber", json!({}), |s| {
        Ok(s.bios_serial_number())
    })
    .await;
    assert!(!ok);
    assert_eq!(injected, NONE);
    assert!(h.host_processes().is_empty());
}
