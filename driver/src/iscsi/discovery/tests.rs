//! Targets the array creates after the node added their portal (one target per volume): every csi-proxy release and
//! the native backend, with the portal in use by another volume's session or not, and a refresh racing a stage.

use std::collections::BTreeMap;

use serde_json::json;
use sim::CsiProxyVersion;
use sim::wmi::TestBackend;

use crate::error::Error;
use crate::host::HostOp::{self, *};
use crate::lifecycle::{AccessType, Capability, Secrets, StageRequest, UnstageRequest};
use crate::testing::{self, Env, d};

const IQN: &str = "iqn.2024-01.io.example:pvc-1";
const LATE: &str = "iqn.2024-01.io.example:pvc-2";
const GIB: u64 = 1 << 30;
const MANUAL: &str =
    "Update-IscsiTargetPortal -TargetPortalAddress 10.0.0.5 -TargetPortalPortNumber 3260";

fn scenario() -> serde_json::Value {
    json!({
        "disks": [{"number": 0, "id": "os", "size": 100 * GIB, "partition_style": "gpt"}],
        "iscsi": {"portals": [{"address": "10.0.0.5", "targets": [
            {"iqn": IQN, "luns": [{"lun": 0, "id": "pvc-1", "size": 5 * GIB}]}
        ]}]}
    })
}

/// A host on `backend` (csi-proxy: playing `version`, with `portal_readd_refreshes` as given).
fn env_for(backend: TestBackend, version: Option<CsiProxyVersion>, readd_refreshes: bool) -> Env {
    let env = Env::on(backend, &scenario());
    if let Some(v) = version {
        env.sim.set_csi_proxy_version(v).expect("release");
    }
    env.script(|s| {
        let mut b = *s.behaviour();
        b.portal_readd_refreshes = readd_refreshes;
        s.set_behaviour(b)
    })
    .expect("behaviour");
    env
}

/// What to run on: the native backend, or csi-proxy playing every release (the suite's backend); with the PowerShell
/// era's unverified answer both ways when `both_readd_answers`.
fn cases(both_readd_answers: bool) -> Vec<(String, Env, bool)> {
    match TestBackend::from_env_or_panic() {
        TestBackend::Native => vec![(
            "native".to_owned(),
            env_for(TestBackend::Native, None, false),
            false,
        )],
        TestBackend::CsiProxy => {
            let mut out = Vec::new();
            for v in CsiProxyVersion::ALL {
                for readd in [false, true] {
                    if readd && !(both_readd_answers && v.is_powershell()) {
                        continue;
                    }
                    let label = format!("{v}, portal_readd_refreshes = {readd}");
                    out.push((label, env_for(TestBackend::CsiProxy, Some(v), readd), readd));
                }
            }
            out
        }
    }
}

/// [`cases`] with the default answer only.
fn hosts() -> Vec<(String, Env)> {
    cases(false).into_iter().map(|(l, e, _)| (l, e)).collect()
}

fn staging(id: &str) -> String {
    format!(r"c:\var\lib\kubelet\plugins\kubernetes.io\csi\wincsi.csi.io\{id}\globalmount")
}

fn stage_req(id: &str, iqn: &str) -> StageRequest {
    let c: BTreeMap<String, String> = [
        ("targetPortal", "10.0.0.5:3260"),
        ("iqn", iqn),
        ("lun", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    StageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        capability: Some(Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: vec![],
            },
            access_mode: 1,
        }),
        volume_context: c,
        secrets: Secrets::new(std::iter::empty::<(&str, &str)>()),
    }
}

fn unstage_req(id: &str) -> UnstageRequest {
    UnstageRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
    }
}

/// The array creates `iqn` (one LUN) behind the portal.
fn create_target(env: &Env, iqn: &str) {
    let spec = serde_json::from_value(json!({"iqn": iqn, "luns": [{"lun": 0, "size": 3 * GIB}]}))
        .expect("target");
    env.script(|s| s.add_target("10.0.0.5", 3260, &spec))
        .expect("add target");
}

fn ops(env: &Env) -> Vec<HostOp> {
    env.take_ops()
}

/// Whether `id`'s recorded volume is mounted at its staging path and its session is there.
fn still_staged(env: &Env, id: &str, iqn: &str) -> bool {
    let rec = env.mgr.store().volume(id).expect("read").expect("record");
    let vol = rec
        .details::<super::IscsiRecord>()
        .expect("decode")
        .and_then(|r| r.volume)
        .expect("volume");
    let mounted = env.state(|s| s.get_volume_id_from_target_path(&staging(id)).ok());
    let session = env.state(|s| s.sessions().iter().any(|x| x.iqn.eq_ignore_ascii_case(iqn)));
    mounted.as_deref() == Some(vol.as_str()) && session
}

/// The case the issue names: volume 1 is staged through the portal, the array then creates volume 2's target on the
/// same portal. Native: `RefreshTargetPortal` and volume 2 stages. csi-proxy: the portal carries volume 1's session, so
/// it is not re-added; the stage answers FAILED_PRECONDITION naming the manual refresh, and stages once an operator ran
/// it — unless the PowerShell era's `New-IscsiTargetPortal` refreshes (the unverified `portal_readd_refreshes`), when
/// it stages at once. Volume 1 is never disturbed.
#[tokio::test(start_paused = true)]
async fn a_target_created_after_the_first_login_stages_beside_the_volume_using_its_portal() {
    for (label, env, readd_refreshes) in cases(true) {
        env.mgr.stage(&stage_req("v1", IQN), d()).await.expect("v1");
        create_target(&env, LATE);
        ops(&env);
        let second = env.mgr.stage(&stage_req("v2", LATE), d()).await;
        let ops2 = ops(&env);
        match (env.backend, readd_refreshes) {
            (TestBackend::Native, _) => {
                second.unwrap_or_else(|e| panic!("{label}: {e}"));
                assert_eq!(
                    ops2[..5],
                    [
                        AddTargetPortal,
                        DiscoverTargetPortal,
                        RefreshTargetPortal,
                        DiscoverTargetPortal,
                        ConnectTarget
                    ],
                    "{label}"
                );
            }
            (TestBackend::CsiProxy, true) => {
                second.unwrap_or_else(|e| panic!("{label}: {e}"));
                assert_eq!(
                    ops2[..3],
                    [AddTargetPortal, DiscoverTargetPortal, ConnectTarget],
                    "{label}"
                );
            }
            (TestBackend::CsiProxy, false) => {
                let Err(Error::FailedPrecondition(m)) = &second else {
                    panic!("{label}: {second:?}");
                };
                assert!(
                    m.contains(LATE) && m.contains(MANUAL) && m.contains("\"v1\""),
                    "{label}: {m}"
                );
                assert_eq!(
                    ops2,
                    [AddTargetPortal, DiscoverTargetPortal, DiscoverTargetPortal],
                    "{label}: the portal in use is not removed"
                );
                assert!(
                    env.mgr.store().volume("v2").expect("read").is_none(),
                    "{label}"
                );
                // The operator refreshes the portal (Update-IscsiTargetPortal): kubelet's retry stages.
                env.script(|s| s.refresh_discovery("10.0.0.5", 3260))
                    .expect("refresh");
                env.mgr
                    .stage(&stage_req("v2", LATE), d())
                    .await
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
            }
        }
        assert!(!ops2.contains(&RemoveTargetPortal), "{label}: {ops2:?}");
        assert!(still_staged(&env, "v1", IQN), "{label}: v1 disturbed");
        assert!(still_staged(&env, "v2", LATE), "{label}");
        for id in ["v1", "v2"] {
            env.mgr
                .unstage(&unstage_req(id), d())
                .await
                .unwrap_or_else(|e| panic!("{label}: {e}"));
        }
        env.assert_clean();
    }
}

/// The first stage on a node whose portal no session uses (its volumes were unstaged; portals are never removed, so
/// the stale cache stays): csi-proxy removes and re-adds the portal, native updates it, and the new target stages.
#[tokio::test(start_paused = true)]
async fn a_portal_no_session_uses_is_rediscovered_before_the_stage_gives_up() {
    for (label, env) in hosts() {
        env.mgr.stage(&stage_req("v1", IQN), d()).await.expect("v1");
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage v1");
        create_target(&env, LATE);
        ops(&env);
        env.mgr
            .stage(&stage_req("v2", LATE), d())
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let refresh = env.per_backend(
            vec![
                DiscoverTargetPortal,
                GetTargetDisks,
                RemoveTargetPortal,
                AddTargetPortal,
            ],
            vec![RefreshTargetPortal],
        );
        let want: Vec<HostOp> = [AddTargetPortal, DiscoverTargetPortal]
            .into_iter()
            .chain(refresh)
            .chain([DiscoverTargetPortal, ConnectTarget])
            .collect();
        let got = ops(&env);
        assert_eq!(got[..want.len()], want[..], "{label}: {got:?}");
        assert!(still_staged(&env, "v2", LATE), "{label}");
        env.mgr
            .unstage(&unstage_req("v2"), d())
            .await
            .expect("unstage v2");
        env.assert_clean();
    }
}

/// A target that exists nowhere is still refused after the one refresh, before any call names it, with the manual
/// refresh in the message; nothing is left.
#[tokio::test]
async fn a_target_no_portal_has_is_refused_after_one_refresh() {
    for (label, env) in hosts() {
        let err = env
            .mgr
            .stage(&stage_req("v9", "iqn.2024-01.io.example:nowhere"), d())
            .await
            .expect_err("unknown target");
        let Error::FailedPrecondition(m) = &err else {
            panic!("{label}: {err:?}");
        };
        assert!(
            m.contains("even after a fresh discovery through 10.0.0.5:3260") && m.contains(MANUAL),
            "{label}: {m}"
        );
        let refresh = env.per_backend(
            vec![
                DiscoverTargetPortal,
                GetTargetDisks,
                RemoveTargetPortal,
                AddTargetPortal,
            ],
            vec![RefreshTargetPortal],
        );
        let want: Vec<HostOp> = [AddTargetPortal, DiscoverTargetPortal]
            .into_iter()
            .chain(refresh)
            .chain([DiscoverTargetPortal])
            .collect();
        assert_eq!(ops(&env), want, "{label}");
        env.assert_clean();
    }
}

/// A session this driver has no record of (another driver, an administrator) uses the portal. csi-proxy, every
/// release: `GetTargetDisks` of the portal's targets finds its disks, so the portal is not removed (that would drop
/// the session's discovered target) and the stage answers FAILED_PRECONDITION naming the manual refresh. Native:
/// `Update` drops nothing; it refreshes and the stage goes on. The other session is untouched either way.
#[tokio::test]
async fn a_portal_carrying_a_session_this_driver_did_not_make_is_never_removed() {
    for (label, env) in hosts() {
        env.script(|s| {
            s.add_target_portal("10.0.0.5", 3260)?;
            s.connect_target(
                "10.0.0.5",
                3260,
                IQN,
                sim::state::AuthType::None,
                "",
                &sim::Secret::new(""),
            )?;
            s.complete_arrivals()
        })
        .expect("a session made outside the driver");
        create_target(&env, LATE);
        let second = env.mgr.stage(&stage_req("v2", LATE), d()).await;
        let got = ops(&env);
        match env.backend {
            TestBackend::CsiProxy => {
                let Err(Error::FailedPrecondition(m)) = &second else {
                    panic!("{label}: {second:?}");
                };
                assert!(
                    m.contains(MANUAL)
                        && m.contains(&format!("target {IQN}, which this driver did not make")),
                    "{label}: {m}"
                );
                assert!(got.contains(&GetTargetDisks), "{label}: {got:?}");
            }
            TestBackend::Native => {
                second.unwrap_or_else(|e| panic!("{label}: {e}"));
                env.mgr
                    .unstage(&unstage_req("v2"), d())
                    .await
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
            }
        }
        assert!(!got.contains(&RemoveTargetPortal), "{label}: {got:?}");
        assert!(
            env.state(|s| s.sessions().iter().any(|x| x.iqn.eq_ignore_ascii_case(IQN))),
            "{label}: the other session is gone"
        );
    }
}

/// csi-proxy: a stage that must re-add the portal waits while another stage uses it (here: between adding it and
/// logging in through it, held in its `DiscoverTargetPortal`, before its record names the portal), then sees that
/// stage's session on record and leaves the portal alone. Without the portal's lock it would remove the portal under
/// the other stage's login. Paused time: the probe's timeout fires only once every task is stuck, so it proves
/// "blocked", not "slow".
#[tokio::test(start_paused = true)]
async fn a_refresh_waits_for_a_stage_using_the_portal_and_spares_its_session() {
    let env = Env::on(TestBackend::CsiProxy, &scenario());
    env.hold_nth(DiscoverTargetPortal, 1);
    let first = stage_req("v1", IQN);
    let v1 = env.mgr.stage(&first, d());
    tokio::pin!(v1);
    tokio::select! {
        r = &mut v1 => panic!("finished while held: {r:?}"),
        () = env.hung() => {}
    }
    // The array creates the second volume's target after the portal was added; its stage reads the stale cache and
    // needs the portal alone.
    create_target(&env, LATE);
    let second = stage_req("v2", LATE);
    let v2 = env.mgr.stage(&second, d());
    tokio::pin!(v2);
    let probe = tokio::time::timeout(std::time::Duration::from_secs(10), &mut v2).await;
    assert!(probe.is_err(), "v2 ran while v1 used the portal: {probe:?}");
    assert!(!env.ops().contains(&RemoveTargetPortal), "{:?}", env.ops());
    env.release();
    v1.await.expect("v1");
    let err = v2.await.expect_err("the portal carries v1's session");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains(MANUAL) && m.contains("\"v1\"")),
        "{err:?}"
    );
    assert!(!env.ops().contains(&RemoveTargetPortal), "{:?}", env.ops());
    assert!(still_staged(&env, "v1", IQN));
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
    assert!(
        env.mgr.object_locks().is_empty(),
        "portal lock entries are dropped"
    );
}

#[test]
fn portal_keys_ignore_the_address_case() {
    let p = |a: &str| crate::host::Portal {
        address: a.into(),
        port: 3260,
    };
    assert_eq!(
        super::portal_key(&p("SAN.example")),
        super::portal_key(&p("san.EXAMPLE"))
    );
    assert_ne!(
        super::portal_key(&p("10.0.0.5")),
        super::portal_key(&p("10.0.0.6"))
    );
    let _ = testing::KUBELET;
}
