//! Issue 41 item 1: a volume naming several portals. Natively, with MPIO claiming iSCSI disks, a session through each
//! portal (`IsMultipathEnabled`), one MPIO disk with a path per session, the volume kept while any path lives, every
//! session logged out at unstage; without the claim, refused before any host change. Through csi-proxy: one session.

use sim::MpioSpec;

use super::*;

/// [`scenario`] with the target reached through a second portal, 10.0.0.6, on a node whose MPIO is `mpio`.
fn env(mpio: MpioSpec) -> Env {
    Env::with(|sc| {
        sc["host"] = json!({"mpio": mpio});
        sc["iscsi"]["portals"]
            .as_array_mut()
            .expect("portals")
            .push(json!({"address": "10.0.0.6", "targets": [{"iqn": IQN}]}));
    })
}

const CLAIMED: MpioSpec = MpioSpec {
    installed: true,
    claim_iscsi: true,
};

fn two_portals(id: &str, lun: u32) -> StageRequest {
    stage_req(id, lun, &[("portals", "10.0.0.6:3260")], &[])
}

/// The portals of the node's sessions to `IQN`.
fn session_portals(env: &Env) -> Vec<String> {
    let mut p: Vec<String> = env.state(|s| {
        s.sessions()
            .iter()
            .filter(|x| x.iqn == IQN)
            .map(|x| x.portal_address.clone())
            .collect()
    });
    p.sort();
    p
}

fn publish_req(id: &str, pod: &str) -> PublishRequest {
    PublishRequest {
        volume_id: id.into(),
        staging_target_path: staging(id),
        target_path: target(pod),
        capability: cap(""),
        ..Default::default()
    }
}

async fn stats(env: &Env, id: &str) -> crate::lifecycle::VolumeStats {
    env.mgr
        .stats(
            &StatsRequest {
                volume_id: id.into(),
                volume_path: staging(id),
            },
            d(),
        )
        .await
        .expect("stats")
}

#[tokio::test(start_paused = true)]
async fn a_session_through_each_portal_one_mpio_disk_kept_while_a_path_lives_all_logged_out_at_unstage()
 {
    let env = env(CLAIMED);
    env.mgr
        .stage(&two_portals("v1", 0), d())
        .await
        .expect("stage");
    let native = env.backend == sim::wmi::TestBackend::Native;
    let rec = env.record("v1");
    if native {
        assert_eq!(session_portals(&env), ["10.0.0.5", "10.0.0.6"]);
        assert_eq!(
            rec.session_portals,
            vec![portal(), Portal::parse("10.0.0.6", "test").expect("portal")]
        );
        assert!(
            env.calls_text().contains("\"multipath\":true"),
            "{}",
            env.calls_text()
        );
    } else {
        // csi-proxy's ConnectTarget has no multipath flag: one session.
        assert_eq!(session_portals(&env), ["10.0.0.5"]);
        assert!(rec.session_portals.is_empty());
    }
    // One disk for the LUN, whatever the number of paths.
    let disk = env.disk("lun0");
    assert_eq!(rec.disk_number, disk.number);
    let iscsi_disks = env.state(|s| {
        s.disks()
            .iter()
            .filter(|d| d.present() && d.page83 == disk.page83)
            .count()
    });
    assert_eq!(iscsi_disks, 1);
    env.publish(&publish_req("v1", "pod1"), d())
        .await
        .expect("publish");
    let file = format!(r"{}\row.txt", target("pod1"));
    env.script(|s| s.write_file(&file, b"on every path"))
        .expect("write");
    if native {
        // The portal the volume's later calls go through goes down: the MPIO disk stays on the other path.
        env.script(|s| s.drop_iscsi_path(IQN, "10.0.0.5"))
            .expect("a path's loss");
        assert_eq!(session_portals(&env), ["10.0.0.6"]);
        let s = stats(&env, "v1").await;
        assert!(!s.abnormal, "{s:?}");
        assert_eq!(
            env.state(|s| s.read_file(&file)).expect("read"),
            b"on every path"
        );
        // kubelet's re-stage (a restarted kubelet) finds it staged.
        env.mgr
            .stage(&two_portals("v1", 0), d())
            .await
            .expect("already staged");
    }
    env.mgr
        .unpublish(
            &UnpublishRequest {
                volume_id: "v1".into(),
                target_path: target("pod1"),
            },
            d(),
        )
        .await
        .expect("unpublish");
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    assert!(session_portals(&env).is_empty(), "every session logged out");
    env.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn another_lun_of_the_target_joins_the_multipath_sessions() {
    let env = env(CLAIMED);
    for (id, lun) in [("v1", 0), ("v2", 1)] {
        env.mgr
            .stage(&two_portals(id, lun), d())
            .await
            .expect("stage");
    }
    let want = env.per_backend(vec!["10.0.0.5"], vec!["10.0.0.5", "10.0.0.6"]);
    assert_eq!(session_portals(&env), want);
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage v1");
    assert_eq!(session_portals(&env), want, "v2 still uses them");
    env.mgr
        .unstage(&unstage_req("v2"), d())
        .await
        .expect("unstage v2");
    assert!(session_portals(&env).is_empty());
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

#[tokio::test(start_paused = true)]
async fn several_portals_without_mpio_claiming_iscsi_are_refused_before_anything_is_done() {
    for (mpio, why) in [
        (
            MpioSpec::default(),
            "the Multipath-IO feature is not installed",
        ),
        (
            MpioSpec {
                installed: true,
                claim_iscsi: false,
            },
            "does not claim iSCSI disks",
        ),
    ] {
        let env = env(mpio);
        let r = env.mgr.stage(&two_portals("v1", 0), d()).await;
        if env.backend == sim::wmi::TestBackend::CsiProxy {
            // csi-proxy: one session, as before.
            r.expect("stage");
            assert_eq!(session_portals(&env), ["10.0.0.5"]);
            env.mgr
                .unstage(&unstage_req("v1"), d())
                .await
                .expect("unstage");
            continue;
        }
        let err = r.expect_err("refused");
        assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
        let text = err.to_string();
        for want in [
            why,
            "Install-WindowsFeature Multipath-IO",
            "Enable-MSDSMAutomaticClaim -BusType iSCSI",
            "name one portal",
        ] {
            assert!(text.contains(want), "{mpio:?}: {want:?} not in {text}");
        }
        assert_eq!(env.ops(), [MultipathClaim], "nothing done on the host");
        assert!(env.mgr.store().volume("v1").expect("read").is_none());
        // One portal: one session, without MPIO.
        env.mgr
            .stage(&stage_req("v1", 0, &[], &[]), d())
            .await
            .expect("one portal");
        assert_eq!(session_portals(&env), ["10.0.0.5"]);
        env.mgr
            .unstage(&unstage_req("v1"), d())
            .await
            .expect("unstage");
        env.assert_clean();
    }
}

#[tokio::test(start_paused = true)]
async fn a_portal_that_does_not_answer_at_stage_leaves_the_volume_on_the_other_path() {
    let env = env(CLAIMED);
    if env.backend != sim::wmi::TestBackend::Native {
        return;
    }
    // The login through the second portal fails (its path is down).
    env.fail_nth(ConnectTarget, 2, "Connection Failed.");
    env.mgr
        .stage(&two_portals("v1", 0), d())
        .await
        .expect("staged on one path");
    assert_eq!(session_portals(&env), ["10.0.0.5"]);
    assert_eq!(env.record("v1").session_portals, vec![portal()]);
    env.mgr
        .unstage(&unstage_req("v1"), d())
        .await
        .expect("unstage");
    env.assert_clean();
}

// Issue 37: a multipath login that outlives its stage.
mod giveup;
