//! Adoption of staging links into shares whose records were lost (issue 15 item 11): the native backend reads the
//! link and adopts it; csi-proxy cannot, so only the link goes. An adopted record's mapping is kept.

use std::collections::BTreeMap;

use sim::wmi::TestBackend;

use super::super::SmbRecord;
use crate::host::HostOp::{self, *};
use crate::host::name_key;
use crate::lifecycle::{
    AccessType, Capability, PublishRequest, Secrets, StageRequest, UnpublishRequest, UnstageRequest,
};
use crate::state::Phase;
use crate::testing::{Env, d};

const SHARE: &str = r"\\srv\share";

fn env(backend: TestBackend) -> Env {
    let account =
        |user: &str| serde_json::json!({"user": user, "password": "pw-1", "domain": "CORP"});
    Env::on(
        backend,
        &serde_json::json!({
            "smb": {"servers": [{"name": "srv", "accounts": [account("bob"), account("alice")],
                                 "shares": [{"name": "share", "files": {"keep.txt": "keep"}}]}]}
        }),
    )
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
        access_mode: 5,
    })
}

fn stage_req(id: &str, user: &str) -> StageRequest {
    StageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        capability: cap(),
        volume_context: BTreeMap::from([("source".to_owned(), SHARE.to_owned())]),
        secrets: Secrets::new([("username", user), ("password", "pw-1"), ("domain", "CORP")]),
    }
}

fn unstage_req(id: &str) -> UnstageRequest {
    UnstageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
    }
}

fn mappings(env: &Env) -> usize {
    env.state(|s| s.mappings().len())
}

fn wipe_volume_records(env: &mut Env) {
    std::fs::remove_dir_all(env.dir.path().join("volumes")).expect("wipe");
    env.restart();
}

#[tokio::test]
async fn csi_proxy_cannot_read_the_link_so_only_the_link_goes() {
    let mut env = env(TestBackend::CsiProxy);
    env.stage(&stage_req("v1", "bob"), d())
        .await
        .expect("stage");
    wipe_volume_records(&mut env);
    env.clear_calls();
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    let ops = env.take_ops();
    assert!(!ops.contains(&ReadLink), "{ops:?}");
    assert_eq!(ops.last(), Some(&Rmdir), "{ops:?}");
    assert!(!ops.contains(&PathExists), "{ops:?}");
    assert!(!env.exists(&staging("v1")));
    assert_eq!(mappings(&env), 1, "the documented leak of csi-proxy mode");
}

#[tokio::test]
async fn native_adopts_the_link_and_a_mapping_its_lost_ledger_no_longer_owns_stays() {
    let mut env = env(TestBackend::Native);
    env.stage(&stage_req("v1", "bob"), d())
        .await
        .expect("stage");
    env.stage(&stage_req("v2", "bob"), d())
        .await
        .expect("stage");
    // The whole state directory is lost (also the native backend's ledger of the mappings it created).
    for entry in std::fs::read_dir(env.dir.path()).expect("dir") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).expect("wipe");
        } else {
            std::fs::remove_file(&p).expect("wipe");
        }
    }
    env.restart();
    env.clear_calls();
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage v1");
    let ops = env.take_ops();
    assert!(ops.contains(&ReadLink), "{ops:?}");
    assert!(!env.exists(&staging("v1")));
    assert!(env.mgr.store().volumes().expect("list").is_empty());
    // No record or visible link names the share, so the adopted unstage asks to remove the mapping; the native
    // backend's ledger went with the state directory, so it is not known as wincsi's and stays: v2, whose record was
    // lost too, still reaches the share.
    assert_eq!(mappings(&env), 1);
    assert!(env.resolves(&format!(r"{}\keep.txt", staging("v2"))));
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .expect("unstage v2");
    assert!(!env.exists(&staging("v2")));
    assert!(env.data_loss().is_empty());
}

#[tokio::test]
async fn reconciliation_adopts_a_share_whose_record_then_protects_the_mapping() {
    let mut env = env(TestBackend::Native);
    env.stage(&stage_req("v1", "bob"), d())
        .await
        .expect("stage");
    env.publish(
        &PublishRequest {
            volume_id: "v1".into(),
            staging_target_path: staging("v1"),
            target_path: target("p1"),
            capability: cap(),
            ..Default::default()
        },
        d(),
    )
    .await
    .expect("publish");
    wipe_volume_records(&mut env);
    let report = env.mgr.reconcile(d()).await.expect("reconcile");
    assert_eq!(report.adopted, ["v1"], "{report:?}");
    let rec = env.mgr.store().volume("v1").expect("read").expect("record");
    assert!(rec.adopted && rec.phase == Phase::Staged, "{rec:?}");
    let facts = rec.details::<SmbRecord>().expect("decode").expect("smb");
    assert_eq!(
        facts,
        SmbRecord {
            root: name_key(SHARE),
            remote_path: SHARE.to_owned(),
            principal: None,
            mapped: false,
            removing: None,
            options: Default::default(),
            unledgered: false,
            credential: None,
            creating: None,
        }
    );
    // The one-account rule skips the adopted record's unknown principal (neither refuses nor matches: Windows decides
    // with 1219 where it can).
    let other = env.stage(&stage_req("v3", "alice"), d()).await;
    if let Err(e) = &other {
        assert!(
            !e.to_string()
                .contains("already mapped on this node under principal"),
            "{e}"
        );
    }
    if other.is_ok() {
        env.mgr
            .unstage(&unstage_req("v3"), d())
            .await
            .expect("unstage v3");
    }
    // A recorded volume of the share: its unstage keeps the mapping the adopted volume uses.
    env.stage(&stage_req("v2", "bob"), d())
        .await
        .expect("stage v2");
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .expect("unstage v2");
    assert_eq!(mappings(&env), 1);
    assert!(env.resolves(&format!(r"{}\keep.txt", target("p1"))));
    // kubelet's teardown of the adopted volume: its links go, the mapping is kept (documented).
    env.mgr
        .unpublish(
            &UnpublishRequest {
                volume_id: "v1".into(),
                target_path: target("p1"),
            },
            d(),
        )
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage v1");
    // No other record or visible link: the mapping (in the surviving ledger) goes.
    env.assert_clean();
    let _ = HostOp::ReadLink;
}

#[tokio::test]
async fn a_link_the_host_shows_for_another_unrecorded_volume_keeps_the_mapping() {
    let mut env = env(TestBackend::Native);
    for id in ["v1", "v2"] {
        env.stage(&stage_req(id, "bob"), d()).await.expect("stage");
    }
    env.publish(
        &PublishRequest {
            volume_id: "v2".into(),
            staging_target_path: staging("v2"),
            target_path: target("p2"),
            capability: cap(),
            ..Default::default()
        },
        d(),
    )
    .await
    .expect("publish");
    wipe_volume_records(&mut env);
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage v1");
    assert!(!env.exists(&staging("v1")));
    assert_eq!(
        mappings(&env),
        1,
        "v2's staging link (its publish record survived) uses the share"
    );
    assert!(env.resolves(&format!(r"{}\keep.txt", target("p2"))));
    env.mgr
        .unpublish(
            &UnpublishRequest {
                volume_id: "v2".into(),
                target_path: target("p2"),
            },
            d(),
        )
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .expect("unstage v2");
    env.assert_clean();
}

#[test]
fn share_records_compare_the_windows_way() {
    let a = SmbRecord {
        root: name_key(r"\\fs1\Ärzte"),
        remote_path: r"\\fs1\Ärzte\Befunde".into(),
        principal: None,
        mapped: false,
        removing: None,
        options: Default::default(),
        unledgered: false,
        credential: None,
        creating: None,
    };
    let b = SmbRecord {
        root: r"\\fs1\ärzte".into(),
        remote_path: r"\\FS1\ÄRZTE\befunde".into(),
        principal: Some("bob".into()),
        mapped: true,
        removing: None,
        options: Default::default(),
        unledgered: false,
        credential: None,
        creating: None,
    };
    assert!(a.same_volume(&b));
    let c = SmbRecord {
        remote_path: r"\\fs1\Ärzte\Straße".into(),
        ..a.clone()
    };
    let d = SmbRecord {
        remote_path: r"\\fs1\Ärzte\STRASSE".into(),
        ..a.clone()
    };
    assert!(!c.same_volume(&d), "no full case folding");
}
