//! The release profiles over real sockets, as the driver meets them through proxy-client: the csi-proxy process
//! dying on a v1.3.0 IQN miss (every endpoint gone until restarted), a call that outlives its client, and how the
//! binary picks the release (flag, scenario, `WINCSI_SIM_CSI_PROXY_VERSION`, default).

#![cfg(unix)]

mod common;

use std::time::Duration;

use common::{SimProcess, example_scenario, unix_channel};
use proxy_client::proto::iscsi_v1alpha2::{self as iscsi, iscsi_client::IscsiClient};
use proxy_client::{ApiGroup, ChapAuth, ErrorKind, Portal, ProxyClient, Transport};
use sim::{CsiProxyVersion, HostOptions, Scenario, SimHost};

/// The instant arrival model: these tests are about the csi-proxy process, not about when disks appear.
const SCENARIO: &str = r#"{
  "host": { "behaviour": { "arrival": { "model": "instant" } } },
  "iscsi": { "portals": [ { "address": "192.0.2.10", "targets": [
    { "iqn": "iqn.2026-01.io.wincsi:Vol1", "luns": [ { "lun": 0, "id": "vol1", "size": 1073741824 } ] }
  ] } ] }
}"#;

struct Served {
    host: SimHost,
    client: ProxyClient,
    dir: tempfile::TempDir,
    handle: sim::ServeHandle,
}

fn serve(version: CsiProxyVersion) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let opts = HostOptions {
        csi_proxy_version: Some(version),
        ..HostOptions::default()
    };
    let host = SimHost::new(
        &Scenario::from_json(SCENARIO).unwrap(),
        &dir.path().join("root"),
        opts,
    )
    .unwrap();
    let sock = dir.path().join("sock");
    let handle = sim::serve_unix(host.clone(), &sock).unwrap();
    let client = ProxyClient::new(Transport::unix_sockets(&sock));
    Served {
        host,
        client,
        dir,
        handle,
    }
}

fn portal() -> Portal {
    Portal::new("192.0.2.10", 3260)
}

#[tokio::test]
async fn a_v1_3_0_iqn_miss_kills_csi_proxy_until_it_is_restarted() {
    let s = serve(CsiProxyVersion::V1_3_0);
    let iscsi = s.client.iscsi();
    iscsi.add_target_portal(&portal()).await.unwrap();
    // The array reports "…:Vol1"; asking for "…:vol1" dereferences nil in csi-proxy.
    let err = iscsi
        .connect_target(&portal(), "iqn.2026-01.io.wincsi:vol1", &ChapAuth::None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::ProxyUnavailable | ErrorKind::PipeMissing
        ),
        "the connection drops with the process: {err:?}"
    );
    assert!(!s.host.csi_proxy_running());
    s.host.wait_endpoints().await;
    for g in ApiGroup::ALL {
        assert!(
            !proxy_client::socket_path(&s.dir.path().join("sock"), g).exists(),
            "{g}: every pipe is gone"
        );
    }
    let err = s.client.system().bios_serial().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PipeMissing, "{err:?}");
    let status = s.host.csi_proxy_status();
    assert_eq!(status.crashes, 1);
    assert!(
        status
            .last_crash
            .unwrap()
            .contains("nil pointer dereference")
    );

    s.host.restart_csi_proxy();
    s.host.wait_endpoints().await;
    // The exact spelling works after the restart; host state (the portal) survived the crash.
    iscsi
        .connect_target(&portal(), "iqn.2026-01.io.wincsi:Vol1", &ChapAuth::None)
        .await
        .unwrap();
    assert_eq!(
        iscsi
            .get_target_disks(&portal(), "iqn.2026-01.io.wincsi:Vol1")
            .await
            .unwrap()
            .len(),
        1
    );
    s.handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_other_releases_answer_an_iqn_miss() {
    for v in [
        CsiProxyVersion::V1_1_3,
        CsiProxyVersion::V1_2_1,
        CsiProxyVersion::Master,
    ] {
        let s = serve(v);
        let iscsi = s.client.iscsi();
        iscsi.add_target_portal(&portal()).await.unwrap();
        let r = iscsi
            .connect_target(&portal(), "iqn.2026-01.io.wincsi:vol1", &ChapAuth::None)
            .await;
        if v == CsiProxyVersion::Master {
            assert_eq!(r.unwrap_err().kind(), ErrorKind::NotFound, "{v}");
        } else {
            r.unwrap();
        }
        assert!(s.host.csi_proxy_running(), "{v}");
        s.handle.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn a_request_without_target_portal_kills_csi_proxy_in_every_release() {
    for v in CsiProxyVersion::ALL {
        let s = serve(v);
        let sock = proxy_client::socket_path(&s.dir.path().join("sock"), ApiGroup::Iscsi);
        let mut raw = IscsiClient::new(unix_channel(sock).await);
        let r = raw
            .add_target_portal(iscsi::AddTargetPortalRequest {
                target_portal: None,
            })
            .await;
        assert!(r.is_err(), "{v}");
        assert!(!s.host.csi_proxy_running(), "{v}");
        s.host.restart_csi_proxy();
        s.host.wait_endpoints().await;
        s.client.iscsi().add_target_portal(&portal()).await.unwrap();
        s.handle.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_format_finishes_after_its_client_gave_up() {
    let s = serve(CsiProxyVersion::V1_1_3);
    let vol = s.host.with_state_mut(|st| {
        st.add_target_portal("192.0.2.10", 3260).unwrap();
        st.connect_target(
            "192.0.2.10",
            3260,
            "iqn.2026-01.io.wincsi:Vol1",
            sim::state::AuthType::None,
            "",
            &sim::Secret::new(""),
        )
        .unwrap();
        let n: u32 = st
            .get_target_disks("192.0.2.10", 3260, "iqn.2026-01.io.wincsi:Vol1")
            .unwrap()[0]
            .parse()
            .unwrap();
        st.set_disk_state(n, true).unwrap();
        st.partition_disk(n).unwrap();
        st.list_volumes_on_disk(n, 2).unwrap()[0].clone()
    });
    s.host.hang_nth("FormatVolume", 1).unwrap();
    // The client gives up once the call reached csi-proxy (waiting for that, not for a short timeout that a loaded
    // machine could let pass before the request even arrived: seen in CI).
    let impatient = s.client.clone().with_timeout(Duration::from_secs(3600));
    let target = vol.clone();
    let call = tokio::spawn(async move { impatient.volume().format(&target).await });
    s.host.wait_hung(1).await;
    call.abort();
    assert!(
        call.await.is_err_and(|e| e.is_cancelled()),
        "the client gave up"
    );
    assert_eq!(s.host.hung_calls(), 1, "csi-proxy is still formatting");
    s.host.release_hangs();
    s.host.wait_unhung().await;
    assert!(
        s.client.volume().is_formatted(&vol).await.unwrap(),
        "the format completed anyway"
    );
    s.handle.shutdown().await.unwrap();
}

async fn version_of(env: Option<&str>, args: &[&str]) -> CsiProxyVersion {
    let extra: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let p = SimProcess::start_with_env(&[(sim::CSI_PROXY_VERSION_ENV, env)], move |dir| {
        let mut a = vec![
            "--socket-dir".to_string(),
            dir.join("sock").display().to_string(),
        ];
        a.extend(extra);
        a
    })
    .await;
    p.admin().await.csi_proxy_status().await.unwrap().version
}

#[tokio::test]
async fn the_binary_picks_the_release_flag_then_scenario_then_env_then_default() {
    assert_eq!(version_of(None, &[]).await, CsiProxyVersion::V1_1_3);
    assert_eq!(
        version_of(Some("v1.3.0"), &[]).await,
        CsiProxyVersion::V1_3_0
    );
    assert_eq!(
        version_of(Some("v1.3.0"), &["--csi-proxy-version", "master"]).await,
        CsiProxyVersion::Master
    );
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("sc.json");
    std::fs::write(&sc, r#"{"host":{"csi_proxy_version":"v1.2.1"}}"#).unwrap();
    let sc = sc.display().to_string();
    assert_eq!(
        version_of(Some("v1.3.0"), &["--scenario", &sc]).await,
        CsiProxyVersion::V1_2_1
    );
    let _ = example_scenario();
}

#[tokio::test]
async fn the_admin_interface_switches_release_and_kills_and_restarts_csi_proxy() {
    let p = SimProcess::start(|dir| {
        vec![
            "--scenario".into(),
            example_scenario(),
            "--socket-dir".into(),
            dir.join("sock").display().to_string(),
            "--csi-proxy-version".into(),
            "v1.1.3".into(),
        ]
    })
    .await;
    let admin = p.admin().await;
    let client = ProxyClient::new(Transport::unix_sockets(p.dir.path().join("sock")));
    admin
        .set_csi_proxy_version(CsiProxyVersion::Master)
        .await
        .unwrap();
    let err = client
        .volume()
        .is_formatted(r"\\?\Volume{1}\")
        .await
        .unwrap_err();
    assert!(err.message().ends_with(": not found"), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    admin.crash_csi_proxy("test").await.unwrap();
    let err = client.system().bios_serial().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PipeMissing, "{err:?}");
    let st = admin.csi_proxy_status().await.unwrap();
    assert!(!st.process.running);
    assert_eq!(st.version, CsiProxyVersion::Master);
    admin.restart_csi_proxy().await.unwrap();
    client.system().bios_serial().await.unwrap();
    // Arrival delays and a LUN replacement at run time.
    admin
        .set_arrival_delay("pvc-empty", Duration::from_secs(3600), Duration::ZERO)
        .await
        .unwrap();
    let iqn = "iqn.2026-01.io.wincsi:pvc-empty";
    let tp = Portal::new("192.0.2.10", 3260);
    client.iscsi().add_target_portal(&tp).await.unwrap();
    client
        .iscsi()
        .connect_target(&tp, iqn, &ChapAuth::None)
        .await
        .unwrap();
    assert!(
        client
            .iscsi()
            .get_target_disks(&tp, iqn)
            .await
            .unwrap()
            .is_empty(),
        "not arrived"
    );
    // A Rescan does not hurry a disk that has not arrived; the admin interface moves time on.
    client.disk().rescan().await.unwrap();
    assert!(
        client
            .iscsi()
            .get_target_disks(&tp, iqn)
            .await
            .unwrap()
            .is_empty(),
        "still not arrived"
    );
    admin.complete_arrivals().await.unwrap();
    assert_eq!(
        client
            .iscsi()
            .get_target_disks(&tp, iqn)
            .await
            .unwrap()
            .len(),
        1
    );
    let spec: sim::DiskSpec = serde_json::from_str(r#"{"size": 2147483648}"#).unwrap();
    let id = admin.replace_lun(iqn, 0, &spec).await.unwrap();
    assert_ne!(id, "pvc-empty");
    let outcome = admin.recover_iscsi_sessions(None).await.unwrap();
    assert!(outcome.iter().all(|o| o.recovered));
}
