//! Adoption of staged LUNs whose records were lost (issue 15 item 11), on every csi-proxy release and on the native
//! backend (`WINCSI_TEST_HOST_BACKEND`): unstage without a record unmounts what the host proves is an iSCSI volume,
//! a target's session goes only when the host shows no other disk of it, reconciliation adopts through surviving
//! publish records, and a foreign mount point is left to the lifecycle's link removal.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sim::CsiProxyVersion;

use crate::error::Error;
use crate::host::HostOp::{self, *};
use crate::iscsi::{IscsiRecord, Secrets};
use crate::lifecycle::{
    AccessType, Capability, PublishRequest, StageRequest, UnpublishRequest, UnstageRequest,
};
use crate::state::Phase;
use crate::testing::{Env, d};

const IQN: &str = "iqn.2024-01.io.example:store1";
const IQN2: &str = "iqn.2024-01.io.example:store2";
const GIB: u64 = 1 << 30;

/// Target `IQN` with LUNs 0 and 1, target `IQN2` (spelled upper-case by the target) with LUN 0, and a local data disk
/// with an NTFS volume (not iSCSI).
fn scenario() -> Value {
    json!({
        "disks": [
            {"number": 0, "id": "os", "size": 100 * GIB, "partition_style": "gpt"},
            {"id": "data", "size": 10 * GIB, "partition_style": "gpt", "partitions": [
                {"kind": "basic", "size": 0, "volume": {"filesystem": "NTFS", "files": {"keep.txt": "local"}}}
            ]}
        ],
        "iscsi": {"portals": [{"address": "10.0.0.5", "targets": [
            {"iqn": IQN, "luns": [
                {"lun": 0, "id": "lun0", "size": 2 * GIB, "serial": "SN-lun0"},
                {"lun": 1, "id": "lun1", "size": 2 * GIB, "serial": "SN-lun1"}
            ]},
            {"iqn": IQN2.to_ascii_uppercase().replace("IQN.", "iqn."), "luns": [
                {"lun": 0, "id": "alone", "size": 2 * GIB, "serial": "SN-alone"}
            ]}
        ]}]}
    })
}

fn env_on(v: CsiProxyVersion) -> Env {
    let env = Env::new(&scenario());
    env.sim.set_csi_proxy_version(v).expect("release");
    env
}

fn staging(id: &str) -> String {
    format!(r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount")
}

fn target(pod: &str) -> String {
    format!(r"c:\var\lib\kubelet\pods\{pod}\volumes\kubernetes.io~csi\pv\mount")
}

fn cap() -> Option<Capability> {
    Some(Capability {
        access_type: AccessType::Mount {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: 1,
    })
}

fn context(iqn: &str, lun: u32) -> BTreeMap<String, String> {
    [
        ("targetPortal", "10.0.0.5:3260".to_owned()),
        ("iqn", iqn.to_owned()),
        ("lun", lun.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn stage_req(id: &str, iqn: &str, lun: u32) -> StageRequest {
    StageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        capability: cap(),
        volume_context: context(iqn, lun),
        secrets: Secrets::default(),
    }
}

fn unstage_req(id: &str) -> UnstageRequest {
    UnstageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
    }
}

/// Everything in the state directory, gone (the driver restarts on an empty one).
fn wipe_state(env: &mut Env) {
    for entry in std::fs::read_dir(env.dir.path()).expect("state dir") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).expect("wipe");
        } else {
            std::fs::remove_file(&p).expect("wipe");
        }
    }
    env.restart();
}

fn sessions(env: &Env) -> Vec<String> {
    env.state(|s| s.sessions().iter().map(|s| s.iqn.clone()).collect())
}

fn mounted(env: &Env, id: &str) -> Option<String> {
    env.state(|s| s.get_volume_id_from_target_path(&staging(id)).ok())
}

fn adopted_record(env: &Env, id: &str) -> IscsiRecord {
    let rec = env.mgr.store().volume(id).expect("read").expect("record");
    assert!(rec.adopted && rec.phase == Phase::Staged, "{rec:?}");
    rec.details::<IscsiRecord>()
        .expect("decode")
        .expect("an iSCSI record")
}

#[tokio::test(start_paused = true)]
async fn a_wiped_state_directory_is_unstaged_lun_by_lun_and_a_shared_session_is_kept() {
    for v in CsiProxyVersion::ALL {
        let mut env = env_on(v);
        for (id, iqn, lun) in [("v1", IQN, 0), ("v2", IQN, 1), ("v3", IQN2, 0)] {
            env.stage(&stage_req(id, iqn, lun), d())
                .await
                .unwrap_or_else(|e| panic!("{v}: stage {id}: {e}"));
        }
        env.script(|s| s.write_file(&format!(r"{}\data.txt", staging("v1")), b"kept"))
            .expect("write");
        assert_eq!(sessions(&env).len(), 2, "{v}");
        wipe_state(&mut env);
        env.clear_calls();

        // v1: LUN 0 of the shared target. Proven from the host, unmounted; the session serves LUN 1 too: kept.
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: unstage v1: {e}"));
        let ops = env.take_ops();
        assert_eq!(
            ops,
            [
                GetVolumeIDFromTargetPath,
                GetVolumeStats,
                GetDiskNumberFromVolumeID,
                ListTargetPortals,
                DiscoverTargetPortal,
                GetTargetDisks,
                GetTargetDisks,
                ListDiskLocations,
                ListDiskIDs,
                GetVolumeIDFromTargetPath,
                UnmountVolume,
                Rmdir,
                GetTargetDisks,
            ],
            "{v}"
        );
        assert_eq!(mounted(&env, "v1"), None, "{v}");
        assert!(!env.exists(&staging("v1")), "{v}");
        assert_eq!(sessions(&env).len(), 2, "{v}: the shared session must stay");
        assert!(env.mgr.store().volume("v1").expect("read").is_none(), "{v}");

        // v3: the only LUN of its target: unmounted and logged out (the target's spelling is sent).
        env.mgr
            .unstage(&unstage_req("v3"), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: unstage v3: {e}"));
        let calls = env.calls_text();
        let spelling = IQN2.to_ascii_uppercase().replace("IQN.", "iqn.");
        assert!(calls.contains("DisconnectTarget"), "{v}: {calls}");
        assert!(calls.contains(&spelling), "{v}: {calls}");
        assert_eq!(sessions(&env), [IQN], "{v}");
        assert!(env.sim.csi_proxy_running(), "{v}: csi-proxy died");

        // v2: LUN 1 of the shared target: unmounted; the host still shows LUN 0's disk behind the session, which
        // csi-proxy cannot prove unused, so the session stays (ended by a reboot).
        env.clear_calls();
        env.mgr
            .unstage(&unstage_req("v2"), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: unstage v2: {e}"));
        assert!(!env.ops().contains(&DisconnectTarget), "{v}");
        assert_eq!(mounted(&env, "v2"), None, "{v}");
        assert_eq!(sessions(&env), [IQN], "{v}");
        assert!(env.mgr.store().volumes().expect("list").is_empty(), "{v}");
        assert!(env.data_loss().is_empty(), "{v}: {:?}", env.data_loss());
        let leftovers = env.leftovers();
        assert_eq!(leftovers.len(), 1, "{v}: {leftovers:?}");
        assert!(
            leftovers[0].starts_with("iSCSI session to"),
            "{v}: {leftovers:?}"
        );

        // Kubelet's retry of an unstage that completed: nothing left to do, nothing touched.
        env.clear_calls();
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("repeat");
        assert!(!env.ops().contains(&DisconnectTarget), "{v}");

        // The data survived: staging LUN 0 again mounts it without formatting.
        env.stage(&stage_req("v1", IQN, 0), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: re-stage: {e}"));
        assert!(!env.ops().contains(&FormatVolume), "{v}");
        assert_eq!(
            env.state(|s| s.read_file(&format!(r"{}\data.txt", staging("v1"))))
                .expect("data"),
            b"kept",
            "{v}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_adopted_lun_keeps_a_session_a_recorded_volume_uses() {
    let mut env = Env::new(&scenario());
    env.stage(&stage_req("v1", IQN, 0), d())
        .await
        .expect("stage v1");
    wipe_state(&mut env);
    // A volume of the same target staged after the wipe has a record: a user the adopted unstage must respect.
    env.stage(&stage_req("v2", IQN, 1), d())
        .await
        .expect("stage v2");
    env.clear_calls();
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage v1");
    let ops = env.take_ops();
    assert!(ops.contains(&UnmountVolume), "{ops:?}");
    assert!(!ops.contains(&DisconnectTarget), "{ops:?}");
    assert_eq!(sessions(&env), [IQN]);
    // The recorded volume is the last user the records know: its unstage ends the session as before — through
    // csi-proxy. The native backend found that session there when v2 logged in, with its ledger wiped along with the
    // records: for all it can tell, someone else's, which it never logs out (`host/native/iscsi.rs`). A session kept
    // for an operator beats one cut under another user's I/O.
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .expect("unstage v2");
    if env.backend == sim::wmi::TestBackend::Native {
        assert_eq!(sessions(&env), [IQN]);
        let leftovers = env.leftovers();
        assert!(
            leftovers.len() == 1 && leftovers[0].starts_with("iSCSI session to"),
            "{leftovers:?}"
        );
    } else {
        assert!(sessions(&env).is_empty());
        assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    }
}

#[tokio::test(start_paused = true)]
async fn reconciliation_adopts_through_a_surviving_publish_record_and_marks_it() {
    let mut env = Env::new(&scenario());
    env.stage(&stage_req("v3", IQN2, 0), d())
        .await
        .expect("stage");
    env.publish(
        &PublishRequest {
            volume_id: "v3".into(),
            staging_target_path: staging("v3"),
            target_path: target("p1"),
            capability: cap(),
            readonly: false,
            volume_context: context(IQN2, 0),
            secrets: Secrets::default(),
        },
        d(),
    )
    .await
    .expect("publish");
    let disk = env
        .state(|s| s.disks().iter().find(|d| d.id == "alone").cloned())
        .expect("disk")
        .number;
    std::fs::remove_dir_all(env.dir.path().join("volumes")).expect("lose the volume records");
    env.restart();
    let report = env.mgr.reconcile(d()).await.expect("reconcile");
    assert_eq!(report.adopted, ["v3"], "{report:?}");
    let r = adopted_record(&env, "v3");
    let target_spelling = IQN2.to_ascii_uppercase().replace("IQN.", "iqn.");
    assert_eq!(
        (
            r.iqn.as_str(),
            r.target_iqn.as_deref(),
            r.lun,
            r.disk_number
        ),
        (
            target_spelling.as_str(),
            Some(target_spelling.as_str()),
            0,
            disk
        )
    );
    assert_eq!(r.volume, mounted(&env, "v3"));
    assert_eq!(r.serial.as_deref(), Some("SN-alone"));
    assert!(!r.partitioned && !r.partitioning && r.mutual_chap.is_none());
    // kubelet re-stages the volume with its attributes (the given spelling): the adopted record is the same LUN.
    env.clear_calls();
    env.stage(&stage_req("v3", IQN2, 0), d())
        .await
        .expect("re-stage of an adopted volume");
    assert_eq!(env.ops(), [GetVolumeIDFromTargetPath, GetVolumeStats]);
    // kubelet's teardown cleans up everything.
    env.mgr
        .unpublish(
            &UnpublishRequest {
                volume_id: "v3".into(),
                target_path: target("p1"),
            },
            d(),
        )
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("v3"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_foreign_mount_point_is_not_adopted_and_only_its_link_goes() {
    for v in CsiProxyVersion::ALL {
        let mut env = env_on(v);
        env.stage(&stage_req("v1", IQN, 0), d())
            .await
            .expect("stage");
        // A local (not iSCSI) volume mounted at another volume's staging path by someone else.
        let n = env
            .state(|s| s.disks().iter().find(|d| d.id == "data").cloned())
            .expect("disk")
            .number
            .expect("numbered");
        let vid = env
            .state(|s| s.list_volumes_on_disk(n, 0))
            .expect("volumes")
            .remove(0);
        env.mkdir_parent(&staging("foreign"));
        env.mkdir(&staging("foreign"));
        env.state(|s| s.mount_volume(&vid, &staging("foreign")))
            .expect("mount");
        wipe_state(&mut env);
        env.clear_calls();
        env.mgr
            .unstage(&unstage_req("foreign"), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: {e}"));
        let ops = env.take_ops();
        for op in [
            WriteVolumeCache,
            UnmountVolume,
            DisconnectTarget,
            ListDiskLocations,
        ] {
            assert!(!ops.contains(&op), "{v}: {op} in {ops:?}");
        }
        assert_eq!(ops.last(), Some(&Rmdir), "{v}: {ops:?}");
        assert!(env.mgr.store().volumes().expect("list").is_empty(), "{v}");
        // The volume is untouched (still formatted, no data loss); the iSCSI volume staged elsewhere too.
        assert_eq!(
            env.state(|s| s.is_volume_formatted(&vid)).ok(),
            Some(true),
            "{v}"
        );
        assert!(env.data_loss().is_empty(), "{v}");
        assert_eq!(sessions(&env), [IQN], "{v}");
        assert!(mounted(&env, "v1").is_some(), "{v}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_mount_point_whose_volume_is_gone_is_not_adopted() {
    // After a reboot the sessions are gone: nothing provable, the lifecycle removes the dangling mount point.
    for v in CsiProxyVersion::ALL {
        let mut env = env_on(v);
        env.stage(&stage_req("v1", IQN, 0), d())
            .await
            .expect("stage");
        env.sim.reboot().expect("reboot");
        wipe_state(&mut env);
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .unwrap_or_else(|e| panic!("{v}: {e}"));
        assert!(!env.ops().contains(&UnmountVolume), "{v}");
        env.assert_clean();
    }
}

#[tokio::test(start_paused = true)]
async fn an_uncertain_answer_fails_the_unstage_and_removes_nothing() {
    let mut env = Env::new(&scenario());
    env.stage(&stage_req("v1", IQN, 0), d())
        .await
        .expect("stage");
    wipe_state(&mut env);
    env.unavailable_nth(ListTargetPortals, 1);
    let err = env
        .mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect_err("uncertain");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(mounted(&env, "v1").is_some(), "nothing removed");
    assert!(env.mgr.store().volumes().expect("list").is_empty());
    // kubelet's retry converges.
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("retry");
    assert_eq!(mounted(&env, "v1"), None);
}

#[test]
fn target_names_compare_the_windows_way() {
    use crate::iscsi::{same_name, target_key};
    assert!(same_name(IQN, &IQN.to_ascii_uppercase()));
    assert!(same_name(
        "iqn.2024-01.io.example:Ärzte",
        "IQN.2024-01.IO.EXAMPLE:ärzte"
    ));
    assert!(!same_name(
        "iqn.2024-01.io.example:straße",
        "iqn.2024-01.io.example:STRASSE"
    ));
    assert_eq!(
        target_key("iqn.2024-01.io.example:ÄRZTE"),
        target_key("iqn.2024-01.io.example:ärzte")
    );
    // ASCII keys keep their historical (lower-cased) form.
    assert_eq!(
        target_key(&IQN.to_ascii_uppercase()),
        format!("iscsi-target:{IQN}")
    );
    let _ = HostOp::ListTargetPortals;
}
