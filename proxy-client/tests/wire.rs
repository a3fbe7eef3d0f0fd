//! Wire tests over real Unix sockets: every RPC through the typed API against an in-test server,
//! reconnect after a server restart, deadlines, missing endpoints, old-csi-proxy UNIMPLEMENTED,
//! error classification from realistic csi-proxy texts, and secret redaction.

#![cfg(unix)]

mod support;

use std::path::Path;
use std::time::Duration;

use proxy_client::{
    ApiGroup, ChapAuth, Error, ErrorKind, ProxyClient, Secret, SmbCredentials, Transport, listen,
};
use support::*;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// One group served on its socket until `stop` is called.
struct Served {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Served {
    /// Serves `group` on `<dir>/csi-proxy-<group>-<version>.sock`. The socket is bound before
    /// this returns, so clients can connect at once.
    fn start(fake: &FakeProxy, dir: &Path, group: ApiGroup) -> Served {
        Self::start_router(fake.router(group), dir, group)
    }

    fn start_router(
        router: tonic::transport::server::Router,
        dir: &Path,
        group: ApiGroup,
    ) -> Served {
        let incoming = listen::unix_socket_for_group(dir, group).expect("bind socket");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            router
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
        });
        Served { stop, task }
    }

    /// Graceful stop, like csi-proxy being restarted by the service manager.
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("server task");
    }
}

fn serve_all(fake: &FakeProxy, dir: &Path) -> Vec<Served> {
    ApiGroup::ALL
        .iter()
        .map(|g| Served::start(fake, dir, *g))
        .collect()
}

#[tokio::test]
async fn every_rpc_of_every_group_round_trips_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let servers = serve_all(&fake, dir.path());
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));

    exercise_all(&proxy).await;

    let expected: std::collections::BTreeSet<_> = ALL_RPCS.into_iter().collect();
    assert_eq!(
        fake.calls(),
        expected,
        "every RPC must have arrived with intact fields"
    );
    for s in servers {
        s.stop().await;
    }
}

#[tokio::test]
async fn clones_share_the_client_and_groups_connect_independently() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    // Only the system group is up: other groups fail, system works.
    let system = Served::start(&fake, dir.path(), ApiGroup::System);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    let clone = proxy.clone();
    assert_eq!(clone.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    let err = proxy.disk().rescan().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PipeMissing, "{err}");
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    system.stop().await;
}

#[tokio::test]
async fn reconnects_after_the_proxy_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));

    let first = Served::start(&fake, dir.path(), ApiGroup::System);
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    first.stop().await;

    // Stopped: the socket file is left behind and nobody listens on it.
    let err = proxy.system().bios_serial().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProxyUnavailable, "{err}");
    assert!(err.is_transient());

    // Restarted on the same path (the stale socket is replaced).
    let second = Served::start(&fake, dir.path(), ApiGroup::System);
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    second.stop().await;

    // And once more without a failed call in between: the next call succeeds directly.
    let third = Served::start(&fake, dir.path(), ApiGroup::System);
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    third.stop().await;
    let fourth = Served::start(&fake, dir.path(), ApiGroup::System);
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    fourth.stop().await;
}

/// Serves `group` on a runtime of its own, so that dropping that runtime kills the server and all
/// its connections at once, like a csi-proxy crash.
fn start_crashable(fake: &FakeProxy, dir: &Path, group: ApiGroup) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let router = fake.router(group);
    let incoming = {
        let _guard = rt.enter();
        listen::unix_socket_for_group(dir, group).expect("bind socket")
    };
    rt.spawn(async move { router.serve_with_incoming(incoming).await.expect("serve") });
    rt
}

#[tokio::test]
async fn recovers_after_the_proxy_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));

    let crashed = start_crashable(&fake, dir.path(), ApiGroup::Disk);
    assert!(proxy.disk().is_online(DISK_B).await.unwrap());
    crashed.shutdown_background(); // connections vanish without GOAWAY

    let restarted = Served::start(&fake, dir.path(), ApiGroup::Disk);
    // The first call may still meet the dead connection; it must then fail as a transport error,
    // never hang, and the call after it must succeed on a fresh connection.
    match proxy.disk().is_online(DISK_B).await {
        Ok(online) => assert!(online),
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::ProxyUnavailable, "{err:?}");
            assert!(proxy.disk().is_online(DISK_B).await.unwrap());
        }
    }
    restarted.stop().await;
}

#[tokio::test]
async fn a_call_that_never_completes_hits_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let system = Served::start(&fake, dir.path(), ApiGroup::System);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()))
        .with_timeout(Duration::from_millis(300));

    let err = proxy.system().get_service(HANG_SERVICE).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DeadlineExceeded, "{err:?}");
    assert_eq!(err.method(), "GetService");
    assert!(err.to_string().contains("GetService"), "{err}");

    // The channel is still usable afterwards.
    assert_eq!(proxy.system().bios_serial().await.unwrap(), BIOS_SERIAL);
    system.stop().await;
}

#[tokio::test]
async fn a_missing_socket_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    let err = proxy
        .smb()
        .remove_global_mapping(SMB_REMOTE)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PipeMissing, "{err:?}");
    let text = err.to_string();
    let socket = dir.path().join("csi-proxy-smb-v1.sock");
    assert!(text.contains(&socket.display().to_string()), "{text}");
    assert!(text.contains("RemoveSmbGlobalMapping"), "{text}");
    assert!(matches!(err, Error::PipeMissing { .. }));
}

#[tokio::test]
async fn named_pipes_are_unsupported_off_windows() {
    let proxy = ProxyClient::new(Transport::default());
    let err = proxy.disk().rescan().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err:?}");
    assert!(
        err.to_string().contains(r"\\.\pipe\csi-proxy-disk-v1"),
        "{err}"
    );
}

#[tokio::test]
async fn an_older_proxy_without_the_method_is_unimplemented() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    // Something that is not the iSCSI v1alpha2 service answers on the iSCSI socket, as an old
    // csi-proxy would for a method it lacks.
    let wrong = Served::start_router(fake.router(ApiGroup::System), dir.path(), ApiGroup::Iscsi);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    let err = proxy
        .iscsi()
        .set_mutual_chap_secret(&Secret::new(MUTUAL_SECRET))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unimplemented, "{err:?}");
    assert!(!format!("{err} {err:?}").contains(MUTUAL_SECRET));
    wrong.stop().await;
}

#[tokio::test]
async fn proxy_errors_keep_method_and_text_and_are_classified() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProxy::default();
    let smb = Served::start(&fake, dir.path(), ApiGroup::Smb);
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    let creds = SmbCredentials::new(SMB_USER, SMB_PASSWORD);
    let err = proxy
        .smb()
        .new_global_mapping(SMB_REMOTE_CONFLICT, None, &creds)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SmbMultipleConnections);
    assert_eq!(err.method(), "NewSmbGlobalMapping");
    assert_eq!(err.message(), SMB_1219_TEXT);
    assert_eq!(err.windows_error_code(), Some(1219));
    assert!(!err.is_transient());
    assert!(matches!(err, Error::Proxy { code: 2, .. }), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(SMB_PASSWORD), "{shown}");
    smb.stop().await;
}

#[tokio::test]
async fn arguments_that_do_not_fit_the_wire_are_rejected_locally() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyClient::new(Transport::unix_sockets(dir.path()));
    let err = proxy
        .volume()
        .resize(VOLUME_ID, u64::MAX)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err:?}");
}

// ---- classification of realistic csi-proxy texts ----

fn kind(text: &str) -> ErrorKind {
    ErrorKind::from_message(text)
}

#[test]
fn classifies_1219_multiple_connections() {
    assert_eq!(kind(SMB_1219_TEXT), ErrorKind::SmbMultipleConnections);
    // Text only (no number), wrapped by PowerShell's console width.
    assert_eq!(
        kind(
            "New-SmbGlobalMapping : Multiple connections to a server or shared resource by the \
              same\r\n user, using more than one user name, are not allowed."
        ),
        ErrorKind::SmbMultipleConnections
    );
    // Number only, HRESULT form.
    assert_eq!(
        kind("MSFT_SmbGlobalMapping.Create failed: 0x800704C3"),
        ErrorKind::SmbMultipleConnections
    );
}

#[test]
fn classifies_53_network_path_not_found() {
    let text = r#"NewSmbGlobalMapping failed. output: "New-SmbGlobalMapping : The network path was not found. \r\nAt line:1 char:190\r\n    + CategoryInfo          : NotSpecified: (MSFT_SmbGlobalMapping:ROOT/Microsoft/...mbGlobalMapping) [New-SmbGlobalMapping], CimException\r\n    + FullyQualifiedErrorId : Windows System Error 53,New-SmbGlobalMapping\r\n \r\n", err: exit status 1"#;
    assert_eq!(kind(text), ErrorKind::NetworkPathNotFound);
    assert_eq!(
        kind("System error 53 has occurred."),
        ErrorKind::NetworkPathNotFound
    );
    assert_eq!(kind("error 0x80070035"), ErrorKind::NetworkPathNotFound);
}

#[test]
fn classifies_1326_and_86_logon_failures() {
    let text = r#"NewSmbGlobalMapping failed. output: "New-SmbGlobalMapping : The user name or password is incorrect. \r\nAt line:1 char:190\r\n+ ... ser, $PWord;New-SmbGlobalMapping -RemotePath $Env:smbremotepath -Cred ...\r\n    + CategoryInfo          : AuthenticationError: (MSFT_SmbGlobalMapping:ROOT/Microsoft/...mbGlobalMapping) [New-SmbG \r\n   lobalMapping], CimException\r\n    + FullyQualifiedErrorId : Windows System Error 1326,New-SmbGlobalMapping\r\n \r\n", err: exit status 1"#;
    assert_eq!(kind(text), ErrorKind::LogonFailure);
    assert_eq!(
        kind(
            "New-SmbGlobalMapping : The specified network password is not correct. FullyQualifiedErrorId : Windows System Error 86,New-SmbGlobalMapping"
        ),
        ErrorKind::LogonFailure
    );
    assert_eq!(
        kind("The user name or password is incorrect."),
        ErrorKind::LogonFailure
    );
}

#[test]
fn classifies_67_network_name_not_found() {
    let text = r#"NewSmbGlobalMapping failed. output: "New-SmbGlobalMapping : The network name cannot be found. \r\n    + FullyQualifiedErrorId : Windows System Error 67,New-SmbGlobalMapping\r\n", err: exit status 1"#;
    assert_eq!(kind(text), ErrorKind::NetworkNameNotFound);
    assert_eq!(
        kind("The network name cannot be found."),
        ErrorKind::NetworkNameNotFound
    );
}

#[test]
fn other_failures_stay_other() {
    // Error 87 (bad parameter) from csi-driver-smb issue #453 must not be mistaken for 86 or 67.
    let text = r#"NewSmbGlobalMapping failed. output: "New-SmbGlobalMapping : The parameter is incorrect. \r\n    + CategoryInfo          : InvalidArgument: (MSFT_SmbGlobalMapping:ROOT/Microsoft/...mbGlobalMapping) [New-SmbGloba \r\n   lMapping], CimException\r\n    + FullyQualifiedErrorId : Windows System Error 87,New-SmbGlobalMapping\r\n \r\n", err: exit status 1"#;
    assert_eq!(kind(text), ErrorKind::Other);
    // "not a mounted folder" and "No MSFT_… objects found" are ErrorKind::NotFound (tests/release_texts.rs).
    assert_eq!(
        kind("Initialize-Disk : The disk is offline."),
        ErrorKind::Other
    );
    assert_eq!(
        kind("ListDiskIDs requires CSI-Proxy API version v1beta1 or greater"),
        ErrorKind::Other
    );
    assert_eq!(kind(""), ErrorKind::Other);
}

// ---- redaction ----

#[test]
fn secrets_never_show_in_debug_or_display() {
    use proxy_client::proto::{iscsi_v1alpha2, smb_v1};

    let secret = Secret::new("s3cr3t-value");
    assert!(!format!("{secret:?}{secret}{secret:#?}").contains("s3cr3t"));
    assert_eq!(secret.expose(), "s3cr3t-value");

    let creds = SmbCredentials::new(SMB_USER, SMB_PASSWORD);
    let shown = format!("{creds:?}{creds:#?}");
    assert!(shown.contains("svc-k8s"), "{shown}");
    assert!(!shown.contains(SMB_PASSWORD), "{shown}");

    for auth in [
        ChapAuth::OneWay {
            username: CHAP_USER.into(),
            secret: Secret::new(CHAP_SECRET),
        },
        ChapAuth::Mutual {
            username: CHAP_USER.into(),
            secret: Secret::new(CHAP_SECRET),
        },
    ] {
        let shown = format!("{auth:?}{auth:#?}");
        assert!(
            shown.contains(CHAP_USER) && !shown.contains(CHAP_SECRET),
            "{shown}"
        );
    }

    // The generated wire messages that carry secrets redact them too.
    let smb = smb_v1::NewSmbGlobalMappingRequest {
        remote_path: SMB_REMOTE.into(),
        local_path: POD_PATH.into(),
        username: SMB_USER.into(),
        password: SMB_PASSWORD.into(),
    };
    let shown = format!("{smb:?}{smb:#?}");
    assert!(
        shown.contains("fs1.contoso.local") && !shown.contains(SMB_PASSWORD),
        "{shown}"
    );
    let connect = iscsi_v1alpha2::ConnectTargetRequest {
        target_portal: None,
        iqn: IQN.into(),
        auth_type: 1,
        chap_username: CHAP_USER.into(),
        chap_secret: CHAP_SECRET.into(),
    };
    let shown = format!("{connect:?}");
    assert!(
        shown.contains(IQN) && !shown.contains(CHAP_SECRET),
        "{shown}"
    );
    let mutual = iscsi_v1alpha2::SetMutualChapSecretRequest {
        mutual_chap_secret: MUTUAL_SECRET.into(),
    };
    assert!(!format!("{mutual:?}").contains(MUTUAL_SECRET));
}

#[test]
fn groups_and_addresses() {
    let names: Vec<_> = ApiGroup::ALL.iter().map(|g| g.endpoint_name()).collect();
    assert_eq!(
        names,
        [
            "csi-proxy-disk-v1",
            "csi-proxy-volume-v1",
            "csi-proxy-filesystem-v1",
            "csi-proxy-smb-v1",
            "csi-proxy-iscsi-v1alpha2",
            "csi-proxy-system-v1alpha1",
        ]
    );
    assert_eq!(
        Transport::default().address(ApiGroup::Smb),
        r"\\.\pipe\csi-proxy-smb-v1"
    );
    assert_eq!(
        Transport::unix_sockets("/run/sim").address(ApiGroup::Iscsi),
        "/run/sim/csi-proxy-iscsi-v1alpha2.sock"
    );
    assert_eq!(ApiGroup::Iscsi.service_name(), "v1alpha2.Iscsi");
}
