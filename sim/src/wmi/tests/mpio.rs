//! Multipath I/O through the Windows view (`state/mpio.rs`): a target reached through two portals, a session through
//! each with `IsMultipathEnabled`, one MPIO disk when the MSDSM claims iSCSI disks and one disk per session when it
//! does not, the MSDSM hardware list, a path's loss, and the initiator's session limit.

use super::*;
use crate::scenario::MpioSpec;

const MP_IQN: &str = "iqn.2026-01.io.wincsi:mp";

fn mp_scenario(mpio: MpioSpec) -> Scenario {
    Scenario::from_json(
        &json!({
            "host": {"csi_proxy_version": "v1.3.0", "mpio": mpio, "san_policy": "online_all",
                     "behaviour": {"arrival": {"disk_ms": 0, "volumes_after_online_ms": 0,
                                               "volume_after_partition_ms": 0, "cache_lag_ms": 0}}},
            "iscsi": {"portals": [
                {"address": "10.0.1.1", "targets": [
                    {"iqn": MP_IQN, "luns": [{"lun": 0, "id": "mp0", "size": 1_073_741_824u64}]}]},
                {"address": "10.0.1.2", "targets": [{"iqn": MP_IQN}]}
            ]}
        })
        .to_string(),
    )
    .expect("scenario")
}

fn add_portal(f: &Fixture, portal: &str) {
    let new = NewTargetPortal {
        target_portal_address: portal,
        target_portal_port_number: 3260,
        initiator_portal_address: None,
        authentication_type: None,
        chap: None,
    };
    assert!(f.view.target_portal_new(&ctx(), &new).unwrap().is_success());
}

fn connect(
    f: &Fixture,
    portal: &str,
    multipath: bool,
) -> winhost::facade::IscsiOutcome<Option<winhost::model::MsftIscsiSession>> {
    let c = ctx();
    add_portal(f, portal);
    f.view
        .target_connect(
            &c,
            &ConnectTarget {
                node_address: MP_IQN,
                target_portal_address: Some(portal),
                target_portal_port_number: Some(3260),
                initiator_portal_address: None,
                authentication_type: AuthenticationType::None,
                chap: None,
                is_persistent: None,
                is_multipath_enabled: multipath.then_some(true),
            },
        )
        .unwrap()
}

fn disks(f: &Fixture) -> Vec<winhost::model::MsftDisk> {
    f.view
        .disks(&ctx(), None)
        .unwrap()
        .into_iter()
        .filter(|d| d.bus_type == Some(winhost::codes::BusType::Iscsi))
        .collect()
}

/// Per connection of the target: its portal and the disks it shows.
fn paths(f: &Fixture) -> Vec<(String, Vec<u32>)> {
    let c = ctx();
    let target = f
        .view
        .targets(&c)
        .unwrap()
        .into_iter()
        .find(|t| t.node_address == MP_IQN)
        .expect("target");
    f.view
        .target_connections(&c, &target.path)
        .unwrap()
        .into_iter()
        .map(|conn| {
            let disks = f
                .view
                .connection_disks(&c, &conn.path)
                .unwrap()
                .into_iter()
                .map(|d| d.number)
                .collect();
            (conn.target_address.unwrap_or_default(), disks)
        })
        .collect()
}

#[test]
fn claimed_sessions_through_two_portals_show_one_disk_with_a_path_each_until_the_last_path_goes() {
    let f = fixture_of(&mp_scenario(MpioSpec {
        installed: true,
        claim_iscsi: true,
    }));
    let hw = f
        .view
        .msdsm_supported_hw(&ctx())
        .unwrap()
        .expect("MPIO installed");
    assert!(hw.iter().any(|r| r.claims_iscsi()), "{hw:?}");
    assert!(connect(&f, "10.0.1.1", false).is_success());
    // A second session of the target without IsMultipathEnabled: TARGET_ALREADY_LOGGED_IN (raised by default).
    add_portal(&f, "10.0.1.2");
    let c = ctx();
    let refused = f.view.target_connect(
        &c,
        &ConnectTarget {
            node_address: MP_IQN,
            target_portal_address: Some("10.0.1.2"),
            target_portal_port_number: Some(3260),
            initiator_portal_address: None,
            authentication_type: AuthenticationType::None,
            chap: None,
            is_persistent: None,
            is_multipath_enabled: None,
        },
    );
    assert_eq!(
        refused.expect_err("raised").iscsi_status(),
        Some(IscsiStatus::TargetAlreadyLoggedIn)
    );
    assert!(connect(&f, "10.0.1.2", true).is_success());
    let d = disks(&f);
    assert_eq!(d.len(), 1, "one MPIO disk: {d:?}");
    let n = d[0].number;
    assert_eq!(
        paths(&f),
        [
            ("10.0.1.1".to_owned(), vec![n]),
            ("10.0.1.2".to_owned(), vec![n])
        ]
    );
    // A path's loss: the disk stays on the other.
    assert_eq!(
        f.host
            .with_state_mut(|s| s.drop_iscsi_path(MP_IQN, "10.0.1.1"))
            .unwrap(),
        1
    );
    assert_eq!(disks(&f).len(), 1);
    assert_eq!(paths(&f), [("10.0.1.2".to_owned(), vec![n])]);
    // The last one: the disk goes.
    f.host
        .with_state_mut(|s| s.drop_iscsi_path(MP_IQN, "10.0.1.2"))
        .unwrap();
    assert!(disks(&f).is_empty());
}

#[test]
fn without_the_claim_each_further_session_shows_the_lun_as_a_disk_of_its_own() {
    for mpio in [
        MpioSpec::default(),
        MpioSpec {
            installed: true,
            claim_iscsi: false,
        },
    ] {
        let f = fixture_of(&mp_scenario(mpio));
        let hw = f.view.msdsm_supported_hw(&ctx()).unwrap();
        assert_eq!(hw.is_some(), mpio.installed, "{mpio:?}");
        assert!(!hw.unwrap_or_default().iter().any(|r| r.claims_iscsi()));
        assert!(connect(&f, "10.0.1.1", true).is_success());
        assert!(connect(&f, "10.0.1.2", true).is_success());
        let d = disks(&f);
        assert_eq!(d.len(), 2, "{mpio:?}: one disk per session: {d:?}");
        assert_eq!(d[0].unique_id, d[1].unique_id, "one LUN");
        let p = paths(&f);
        assert_eq!(p.len(), 2);
        assert_ne!(p[0].1, p[1].1, "each session shows its own disk: {p:?}");
        // The second session's disk goes with it; the first's stays.
        f.host
            .with_state_mut(|s| s.drop_iscsi_path(MP_IQN, "10.0.1.2"))
            .unwrap();
        assert_eq!(disks(&f).len(), 1);
        f.host
            .with_state_mut(|s| s.drop_iscsi_path(MP_IQN, "10.0.1.1"))
            .unwrap();
        assert!(disks(&f).is_empty());
        assert!(f.host.with_state(|s| s.leftovers()).is_empty());
    }
}

#[test]
fn a_login_past_the_initiators_session_limit_answers_too_many_sessions() {
    let f = fixture_of(&mp_scenario(MpioSpec {
        installed: true,
        claim_iscsi: true,
    }));
    f.host
        .with_state_mut(|s| {
            let mut b = *s.behaviour();
            b.iscsi_session_limit = 1;
            s.set_behaviour(b)
        })
        .unwrap();
    assert!(connect(&f, "10.0.1.1", true).is_success());
    add_portal(&f, "10.0.1.2");
    let c = ctx();
    let refused = f.view.target_connect(
        &c,
        &ConnectTarget {
            node_address: MP_IQN,
            target_portal_address: Some("10.0.1.2"),
            target_portal_port_number: Some(3260),
            initiator_portal_address: None,
            authentication_type: AuthenticationType::None,
            chap: None,
            is_persistent: None,
            is_multipath_enabled: Some(true),
        },
    );
    assert_eq!(
        refused.expect_err("raised").iscsi_status(),
        Some(IscsiStatus::TooManySessions)
    );
}
