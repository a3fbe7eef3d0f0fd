//! Tests of the Secret reader: the inline flow against the simulated host, and the API access itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::fake_api;
use super::*;
use crate::host::HostOp::*;
use crate::lifecycle::inline::staging_path;
use crate::lifecycle::{AccessType, Capability, EPHEMERAL_KEY, PublishRequest, UnpublishRequest};
use crate::testing::{Env, d};

const PASSWORD: &str = "Eph-S3cret!";

/// Share `\\srv\share` (with `apps`) that only `CORP\bob` with [`PASSWORD`] may map, and the Kubernetes API
/// serving that credential as Secret `team/smb-creds`.
async fn setup() -> (Env, fake_api::FakeApiServer, tempfile::TempDir) {
    let mut env = Env::new(&serde_json::json!({"smb": {"servers": [{"name": "srv",
        "accounts": [{"user": "bob", "password": PASSWORD, "domain": "CORP"}],
        "shares": [{"name": "share", "files": {"apps/readme.txt": "hello"}}]}]}}));
    let secrets: BTreeMap<_, _> = [(
        ("team".to_owned(), "smb-creds".to_owned()),
        fake_api::secret_json(
            "team",
            "smb-creds",
            &[
                ("username", "bob"),
                ("password", PASSWORD),
                ("domain", "CORP"),
            ],
        ),
    )]
    .into();
    let api = fake_api::serve(secrets).await.expect("fake api");
    let (secrets, dir) = reader(&api);
    env.set_secret_source(Arc::new(secrets));
    (env, api, dir)
}

fn req(secret_name: &str) -> PublishRequest {
    let ctx: BTreeMap<String, String> = [
        (EPHEMERAL_KEY, "true"),
        ("source", r"\\srv\share\apps"),
        ("secretName", secret_name),
        ("csi.storage.k8s.io/pod.namespace", "team"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    PublishRequest {
        volume_id: "csi-eph-1".into(),
        target_path: r"c:\var\lib\kubelet\pods\u1\volumes\kubernetes.io~csi\data\mount".into(),
        capability: Some(Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: vec![],
            },
            access_mode: 1,
        }),
        volume_context: ctx,
        ..Default::default()
    }
}

#[tokio::test]
async fn ephemeral_publish_stages_privately_and_unpublish_cleans_up() {
    let (env, _api, _sa) = setup().await;
    let mgr = &env.mgr;
    env.publish(&req("smb-creds"), d()).await.expect("publish");
    assert_eq!(
        env.ops(),
        vec![Mkdir, Rmdir, NewSmbGlobalMapping, IsSymlink, CreateSymlink]
    );
    let private = staging_path(mgr, "csi-eph-1").expect("path");
    assert!(
        private
            .as_str()
            .starts_with(r"C:\var\lib\kubelet\plugins\wincsi.csi.io\ephemeral\")
    );
    assert!(env.resolves(r"c:\var\lib\kubelet\pods\u1\volumes\kubernetes.io~csi\data\mount"));
    let rec = mgr
        .store()
        .volume("csi-eph-1")
        .expect("read")
        .expect("record");
    assert!(rec.ephemeral);
    env.clear_calls();
    env.publish(&req("smb-creds"), d()).await.expect("repeat");
    // The private stage's `IsSymlink` (healthy), then the target's `PathExists` + `IsSymlink` (published).
    assert_eq!(env.ops(), vec![IsSymlink, PathExists, IsSymlink]);
    env.clear_calls();
    let un = UnpublishRequest {
        volume_id: "csi-eph-1".into(),
        target_path: req("x").target_path,
    };
    mgr.unpublish(&un, d()).await.expect("unpublish");
    assert_eq!(env.ops(), vec![Rmdir, Rmdir, RemoveSmbGlobalMapping]);
    env.assert_clean();
}

#[tokio::test]
async fn missing_secret_and_namespace() {
    let (env, _api, _sa) = setup().await;
    let mgr = &env.mgr;
    let err = mgr.publish(&req("nope"), d()).await.expect_err("missing");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains("team/nope")),
        "{err:?}"
    );
    let mut r = req("smb-creds");
    r.volume_context.remove("csi.storage.k8s.io/pod.namespace");
    assert!(matches!(
        mgr.publish(&r, d()).await,
        Err(Error::InvalidArgument(_))
    ));
    let mut r = req("smb-creds");
    r.volume_context
        .insert("secretNamespace".into(), "other".into());
    assert!(matches!(
        mgr.publish(&r, d()).await,
        Err(Error::FailedPrecondition(_))
    ));
    assert!(env.calls().is_empty());
}

/// A reader of `api`'s Secrets through a service account directory written for it (kept alive by the caller).
fn reader(api: &fake_api::FakeApiServer) -> (KubeSecrets, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    api.write_service_account(dir.path())
        .expect("service account");
    (KubeSecrets::from_access(api.access(dir.path())), dir)
}

async fn one_secret() -> fake_api::FakeApiServer {
    let secrets: BTreeMap<_, _> = [(
        ("team".to_owned(), "creds".to_owned()),
        fake_api::secret_json(
            "team",
            "creds",
            &[("username", "bob"), ("password", PASSWORD)],
        ),
    )]
    .into();
    fake_api::serve(secrets).await.expect("fake api")
}

#[tokio::test]
async fn reads_a_secret_over_verified_tls_with_the_bearer_token() {
    let api = one_secret().await;
    let (secrets, _sa) = reader(&api);
    let s = secrets.read("team", "creds").await.expect("read");
    assert_eq!(s.get("username").map(|v| v.expose()), Some("bob"));
    assert_eq!(s.get("password").map(|v| v.expose()), Some(PASSWORD));
    assert_eq!(
        api.requests(),
        vec!["GET /api/v1/namespaces/team/secrets/creds HTTP/1.1 auth=true".to_owned()]
    );
}

#[tokio::test]
async fn a_rotated_token_is_read_again_for_the_next_request() {
    let api = one_secret().await;
    let (secrets, sa) = reader(&api);
    secrets.read("team", "creds").await.expect("first read");
    // kubelet rotates the projected token: the server takes only the new one, the file holds the new one.
    api.rotate_token("rotated-token");
    std::fs::write(sa.path().join("token"), "rotated-token\n").expect("rotate");
    secrets
        .read("team", "creds")
        .await
        .expect("read after rotation");
    // A token the server no longer takes is refused as the API refuses it, with its reason, never the token.
    api.rotate_token("third-token");
    let err = secrets
        .read("team", "creds")
        .await
        .expect_err("stale token");
    let text = err.to_string();
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    assert!(
        text.contains("401 Unauthorized") && !text.contains("rotated-token"),
        "{text}"
    );
    let auth: Vec<bool> = api
        .requests()
        .iter()
        .map(|r| r.ends_with("auth=true"))
        .collect();
    assert_eq!(auth, vec![true, true, false]);
    // The token is compared exactly (only the scheme is case-insensitive): another case of it is refused.
    api.rotate_token("Third-Token");
    std::fs::write(sa.path().join("token"), "third-token\n").expect("rotate");
    let err = secrets.read("team", "creds").await.expect_err("wrong case");
    assert!(err.to_string().contains("401"), "{err}");
}

/// Reads `team/creds` from `api` as `host` with `ca_pem` as the only root, expecting the handshake to fail: the
/// error, after checking that no request (and so no token) reached the server.
async fn refused_handshake(api: &fake_api::FakeApiServer, host: &str, ca_pem: &str) -> Error {
    let dir = tempfile::tempdir().expect("tempdir");
    api.write_service_account(dir.path())
        .expect("service account");
    let access = ApiAccess::new(host, api.port, ca_pem.as_bytes(), dir.path().join("token"))
        .expect("access");
    let err = KubeSecrets::from_access(access)
        .read("team", "creds")
        .await
        .expect_err("the handshake must fail");
    assert!(api.requests().is_empty(), "{:?}", api.requests());
    err
}

#[tokio::test]
async fn a_server_the_ca_did_not_sign_gets_no_request() {
    let api = one_secret().await;
    let other = one_secret().await;
    // The CA of another cluster: the handshake fails before any request (and any token) is sent.
    let err = refused_handshake(&api, &api.host, &other.ca_pem).await;
    assert!(
        matches!(&err, Error::Unavailable(m) if m.contains("TLS")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_certificate_of_the_trusted_ca_for_another_name_gets_no_request() {
    // The cluster's own CA signed it, but for 127.0.0.1 only: a client that checked the chain and not the name
    // would send the token to any server holding some certificate of that CA.
    let api = one_secret().await;
    let err = refused_handshake(&api, "localhost", &api.ca_pem).await;
    assert!(
        matches!(&err, Error::Unavailable(m) if m.contains("TLS") && m.contains("localhost")),
        "{err:?}"
    );
}

#[tokio::test]
async fn names_kubernetes_would_refuse_never_reach_the_request_path() {
    let api = one_secret().await;
    let (secrets, _sa) = reader(&api);
    for (ns, name) in [
        ("team", "../../namespaces/kube-system/secrets/x"),
        ("team", "creds?watch=1"),
        ("team", "Creds"),
        ("team", ""),
        ("team", "a..b"),
        ("Team", "creds"),
        ("te/am", "creds"),
        ("-team", "creds"),
        ("team", &"a".repeat(254)),
        ("team", "-creds"),
        ("team", "creds."),
        ("team", "a_b"),
        (&"a".repeat(64), "creds"),
        ("te.am", "creds"),
    ] {
        let err = secrets.read(ns, name).await.expect_err("refused");
        assert!(
            matches!(err, Error::InvalidArgument(_)),
            "{ns}/{name}: {err:?}"
        );
    }
    assert!(api.requests().is_empty());
    secrets.read("team", "creds").await.expect("a valid name");
    // apimachinery's IsDNS1123Subdomain caps only the whole name (253): one long label is a valid Secret name.
    assert!(
        is_dns_subdomain("smb-creds.v2")
            && is_dns_subdomain(&"a".repeat(70))
            && is_dns_subdomain(&format!("{}.{}", "a".repeat(120), "b".repeat(132)))
            && !is_dns_subdomain(&"a".repeat(254))
            && is_dns_label(&"a".repeat(63))
            && !is_dns_label(&"a".repeat(64))
    );
    let long = "a".repeat(70);
    let err = secrets
        .read("team", &long)
        .await
        .expect_err("no such Secret");
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    assert!(
        api.requests()
            .iter()
            .any(|r| r.contains(&format!("/secrets/{long} "))),
        "{:?}",
        api.requests()
    );
}

#[tokio::test]
async fn an_answer_that_is_not_a_secret_is_not_quoted() {
    let leaked = "do-not-echo-this-value";
    let secrets: BTreeMap<_, _> = [
        (
            ("team".to_owned(), "broken".to_owned()),
            format!("{{\"kind\": \"Secret\", \"data\": {{\"password\": \"{leaked}\"}}"),
        ),
        (
            ("team".to_owned(), "not-base64".to_owned()),
            format!("{{\"kind\": \"Secret\", \"data\": {{\"password\": \"{leaked}!\"}}}}"),
        ),
        // serde_json quotes a string of the wrong type ("invalid type: string \"…\", expected a map"): these are
        // the answers whose decoding error would carry the value if it were passed on.
        (
            ("team".to_owned(), "data-not-a-map".to_owned()),
            format!("{{\"kind\": \"Secret\", \"data\": \"{leaked}\"}}"),
        ),
        (
            ("team".to_owned(), "immutable-not-bool".to_owned()),
            format!("{{\"kind\": \"Secret\", \"immutable\": \"{leaked}\"}}"),
        ),
    ]
    .into();
    for payload in ["data-not-a-map", "immutable-not-bool"] {
        let raw = &secrets[&("team".to_owned(), payload.to_owned())];
        let decoded = serde_json::from_str::<k8s_openapi::api::core::v1::Secret>(raw)
            .expect_err("not a Secret");
        assert!(
            decoded.to_string().contains(leaked),
            "the payload must be one serde quotes: {decoded}"
        );
    }
    let api = fake_api::serve(secrets).await.expect("fake api");
    let (reader, _sa) = reader(&api);
    for name in [
        "broken",
        "not-base64",
        "data-not-a-map",
        "immutable-not-bool",
    ] {
        let err = reader.read("team", name).await.expect_err("not a Secret");
        assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
        assert!(!err.to_string().contains(leaked), "{err}");
    }
}

#[test]
fn in_cluster_access_comes_from_the_service_env_and_account_directory() {
    let api_ca = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async { one_secret().await.ca_pem.clone() })
    };
    let sandbox = tempfile::tempdir().expect("tempdir");
    let sa = sandbox
        .path()
        .join("var/run/secrets/kubernetes.io/serviceaccount");
    std::fs::create_dir_all(&sa).expect("mkdir");
    let env = |pairs: &[(&str, String)]| {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        move |k: &str| map.get(k).map(std::ffi::OsString::from)
    };
    let svc = [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1".to_owned()),
        ("KUBERNETES_SERVICE_PORT", "443".to_owned()),
    ];

    // Not in a cluster: both variables are named.
    let e = ApiAccess::in_cluster(&env(&svc[..1])).expect_err("no port");
    assert!(
        e.contains("KUBERNETES_SERVICE_HOST") && e.contains("KUBERNETES_SERVICE_PORT"),
        "{e}"
    );
    let e = ApiAccess::in_cluster(&env(&[
        svc[0].clone(),
        ("KUBERNETES_SERVICE_PORT", "https".into()),
    ]))
    .expect_err("bad port");
    assert!(e.contains("not a port"), "{e}");

    // No token anywhere: every directory tried is named (the sandbox's too, on a HostProcess pod), the sandbox's
    // first: the plain path of a containerd 1.6 HostProcess pod is a host directory anyone may have written to.
    let sandbox_env = (
        "CONTAINER_SANDBOX_MOUNT_POINT",
        sandbox.path().display().to_string(),
    );
    let e = ApiAccess::in_cluster(&env(&[svc[0].clone(), svc[1].clone(), sandbox_env.clone()]))
        .expect_err("no token");
    let (in_sandbox, plain) = (
        e.find(&sa.display().to_string()),
        e.find(SERVICE_ACCOUNT_DIR),
    );
    assert!(
        in_sandbox.is_some() && plain.is_some() && in_sandbox < plain,
        "{e}"
    );

    // A HostProcess pod on containerd 1.6: the token is under the sandbox mount point.
    std::fs::write(sa.join("token"), "t").expect("token");
    let e = ApiAccess::in_cluster(&env(&[svc[0].clone(), svc[1].clone(), sandbox_env.clone()]))
        .expect_err("no CA yet");
    assert!(e.contains("ca.crt"), "{e}");
    std::fs::write(sa.join("ca.crt"), &api_ca).expect("ca");
    let a = ApiAccess::in_cluster(&env(&[svc[0].clone(), svc[1].clone(), sandbox_env.clone()]))
        .expect("sandbox");
    assert_eq!(a.token_file, sa.join("token"));
    assert_eq!(a.authority(), "10.96.0.1:443");

    // WINCSI_SERVICE_ACCOUNT_DIR names the only directory tried.
    let other = tempfile::tempdir().expect("tempdir");
    let e = ApiAccess::in_cluster(&env(&[
        svc[0].clone(),
        svc[1].clone(),
        sandbox_env,
        (SERVICE_ACCOUNT_DIR_ENV, other.path().display().to_string()),
    ]))
    .expect_err("override without a token");
    assert!(!e.contains(SERVICE_ACCOUNT_DIR), "{e}");

    // An IPv6 service address goes in brackets in the Host header; a CA file without a certificate is refused.
    let a = ApiAccess::in_cluster(&env(&[
        ("KUBERNETES_SERVICE_HOST", "fd00:10:96::1".into()),
        svc[1].clone(),
        (SERVICE_ACCOUNT_DIR_ENV, sa.display().to_string()),
    ]))
    .expect("ipv6");
    assert_eq!(a.authority(), "[fd00:10:96::1]:443");
    std::fs::write(sa.join("ca.crt"), "not a certificate").expect("ca");
    let e = ApiAccess::in_cluster(&env(&[
        svc[0].clone(),
        svc[1].clone(),
        (SERVICE_ACCOUNT_DIR_ENV, sa.display().to_string()),
    ]))
    .expect_err("empty CA");
    assert!(e.contains("no certificate"), "{e}");
}

#[tokio::test]
async fn in_cluster_access_is_read_again_for_each_secret_so_a_rotated_ca_needs_no_restart() {
    // The API server now presents a certificate of a new CA; the pod's ca.crt still holds the old one.
    let old_ca = one_secret().await.ca_pem.clone();
    let api = one_secret().await;
    let sa = tempfile::tempdir().expect("tempdir");
    api.write_service_account(sa.path())
        .expect("service account");
    std::fs::write(sa.path().join("ca.crt"), &old_ca).expect("old CA");
    let vars: BTreeMap<String, String> = [
        ("KUBERNETES_SERVICE_HOST", api.host.clone()),
        ("KUBERNETES_SERVICE_PORT", api.port.to_string()),
        (SERVICE_ACCOUNT_DIR_ENV, sa.path().display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let secrets = KubeSecrets::in_cluster_with(move |k| vars.get(k).map(std::ffi::OsString::from));
    let err = secrets.read("team", "creds").await.expect_err("old CA");
    assert!(
        matches!(&err, Error::Unavailable(m) if m.contains("TLS")),
        "{err:?}"
    );
    assert!(api.requests().is_empty());
    // kubelet updates the projected ca.crt: the next read uses it, same reader, no restart.
    std::fs::write(sa.path().join("ca.crt"), &api.ca_pem).expect("new CA");
    let s = secrets
        .read("team", "creds")
        .await
        .expect("read with the new CA");
    assert_eq!(s.get("username").map(|v| v.expose()), Some("bob"));
    // Without the service env the same reader fails as "no access", not as a transport error.
    let none = KubeSecrets::in_cluster_with(|_| None);
    let err = none.read("team", "creds").await.expect_err("no env");
    assert!(
        matches!(&err, Error::FailedPrecondition(m) if m.contains("KUBERNETES_SERVICE_HOST")),
        "{err:?}"
    );
}

#[test]
fn api_statuses_map_to_codes_a_kubelet_retry_makes_sense_of() {
    let err = |code: u16, body: &str| {
        status_error(
            "team",
            "creds",
            http::StatusCode::from_u16(code).expect("status"),
            body.as_bytes(),
        )
    };
    let forbidden = err(
        403,
        r#"{"kind":"Status","status":"Failure","reason":"Forbidden","message":"secrets \"creds\" is forbidden: User \"x\""}"#,
    );
    assert!(
        matches!(&forbidden, Error::FailedPrecondition(m) if m.contains("403 Forbidden") && m.contains("RBAC") && !m.contains("User")),
        "{forbidden:?}"
    );
    assert!(matches!(err(404, ""), Error::FailedPrecondition(m) if m.contains("does not exist")));
    for code in [408, 429, 500, 503] {
        assert!(matches!(err(code, ""), Error::Unavailable(_)), "{code}");
    }
    let redirect = err(302, "");
    assert!(
        matches!(&redirect, Error::FailedPrecondition(m) if m.contains("redirect") && !m.contains("RBAC")),
        "{redirect:?}"
    );
    assert!(matches!(err(400, ""), Error::FailedPrecondition(m) if !m.contains("RBAC")));
}
