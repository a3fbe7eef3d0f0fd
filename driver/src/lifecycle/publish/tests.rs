//! A failed publish leaves nothing that blocks the volume's unstage (issue 29 item 2): a target path csi-proxy would
//! refuse is refused by the driver before any host call or record, and a publish whose link was not made keeps no
//! record.

use crate::error::Error;
use crate::host::HostOp::{self, *};
use crate::lifecycle::{
    AccessType, Capability, PublishRequest, Secrets, StageRequest, UnpublishRequest, UnstageRequest,
};
use crate::testing::{Env, KUBELET, d};

const SHARE: &str = r"\\srv\share";

fn env() -> Env {
    Env::new(&serde_json::json!({
        "smb": {"servers": [
            {"name": "srv",
             "accounts": [{"user": "bob", "password": "pw-1", "domain": "CORP"}],
             "shares": [{"name": "share"}]}
        ]}
    }))
}

fn staging(id: &str) -> String {
    format!(r"{KUBELET}\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount")
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

async fn staged(env: &Env, id: &str) {
    env.stage(
        &StageRequest {
            volume_id: id.into(),
            staging_target_path: staging(id),
            capability: cap(),
            volume_context: [("source".to_owned(), SHARE.to_owned())].into(),
            secrets: Secrets::new([
                ("username", "bob"),
                ("password", "pw-1"),
                ("domain", "CORP"),
            ]),
        },
        d(),
    )
    .await
    .expect("stage");
}

fn publish_req(id: &str, target: &str) -> PublishRequest {
    PublishRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        target_path: target.to_owned(),
        capability: cap(),
        ..Default::default()
    }
}

async fn unstage(env: &Env, id: &str) -> Result<(), Error> {
    env.mgr
        .unstage(
            &UnstageRequest {
                volume_id: id.into(),
                staging_target_path: staging(id),
            },
            d(),
        )
        .await
}

#[tokio::test]
async fn a_target_csi_proxy_refuses_is_refused_before_any_host_call_or_record() {
    let env = env();
    staged(&env, "v1").await;
    let pod = format!(r"{KUBELET}\pods\p1\volumes\kubernetes.io~csi");
    // `..` written with look-alike separators: one segment for Windows and csi-proxy, which refuses any `..`; the same
    // with dots inside a name; the kubelet root spelt with a dotless ı (Windows' `I`, not Go's lower-case `i`).
    let targets = [
        format!("{pod}\\..\u{2215}..\u{2215}..\u{2215}Windows\\mount"),
        format!("{pod}\\..\u{ff3c}..\u{ff3c}x\\mount"),
        format!(r"{pod}\pv..1\mount"),
        "C:\\var\\l\u{131}b\\kubelet\\pods\\p1\\volumes\\kubernetes.io~csi\\pv\\mount".to_owned(),
    ];
    for target in &targets {
        env.mkdir_parent(target);
        env.clear_calls();
        let err = env
            .mgr
            .publish(&publish_req("v1", target), d())
            .await
            .expect_err("refused");
        assert!(
            matches!(err, Error::InvalidArgument(_)),
            "{target}: {err:?}"
        );
        assert_eq!(env.ops(), Vec::<HostOp>::new(), "{target}: no host call");
        assert!(
            env.mgr.store().publications().expect("list").is_empty(),
            "{target}: no publish record"
        );
    }
    // Nothing blocks the unstage.
    unstage(&env, "v1").await.expect("unstage");
    env.assert_clean();
}

#[tokio::test]
async fn a_publish_whose_link_was_not_made_keeps_no_record_that_blocks_unstage() {
    let env = env();
    staged(&env, "v1").await;
    let target = format!(r"{KUBELET}\pods\p1\volumes\kubernetes.io~csi\pv\mount");
    // kubelet's empty directory is at the target: the first `CreateSymlink` fails, and the check of what is there
    // (`IsSymlink` of the target; the first `IsSymlink` is publish's readiness check of the staging link) fails.
    env.mkdir(&target);
    env.fail_nth(
        IsSymlink,
        2,
        r"Lstat C:\var\lib\kubelet\pods\p1: Access is denied.",
    );
    let err = env
        .publish(&publish_req("v1", &target), d())
        .await
        .expect_err("publish");
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    assert!(
        env.mgr.store().publications().expect("list").is_empty(),
        "no record of a link that was not made"
    );
    // The second `CreateSymlink` fails (after kubelet's directory was removed): no record either.
    env.fail_nth(
        CreateSymlink,
        2,
        r"symlink C:\var\lib\kubelet\x: Access is denied.",
    );
    let err = env
        .publish(&publish_req("v1", &target), d())
        .await
        .expect_err("publish");
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    assert!(env.mgr.store().publications().expect("list").is_empty());
    // kubelet's directory, still there, is not the driver's: the volume unstages (nothing of it is published).
    env.mkdir(&target);
    unstage(&env, "v1").await.expect("unstage");
    // A publish that finally works is unpublished and the volume unstaged again.
    staged(&env, "v1").await;
    env.publish(&publish_req("v1", &target), d())
        .await
        .expect("publish");
    env.mgr
        .unpublish(
            &UnpublishRequest {
                volume_id: "v1".into(),
                target_path: target.clone(),
            },
            d(),
        )
        .await
        .expect("unpublish");
    unstage(&env, "v1").await.expect("unstage");
    env.assert_clean();
}
