//! Property tests of every parser and validator fed by users or kubelet — the same properties the cargo-fuzz targets
//! in `fuzz/` assert, run on every `cargo test` so they never rot: never panic; never accept a path outside the
//! kubelet root or with traversal; the host-call argument equals what validation approved (normalisation is a fixed
//! point, portals and UNC paths re-parse to themselves); errors never contain a secret value.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proxy_client::ErrorKind;
use wincsi::host::{IscsiAuth, KubeletRoot, MAX_PATH_BYTES, Portal, UncPath};
use wincsi::iscsi::{self, MAX_LUN};
use wincsi::locks::Deadline;
use wincsi::smb::{self, Secrets};
use wincsi::state::file_key;

/// Prefixed to every generated secret value and absent from every other generated string.
const MARK: &str = "\u{1F511}";
/// Prefixed to generated passwords only (user names may be shown, passwords never).
const PW_MARK: &str = "\u{1F512}";

fn root() -> KubeletRoot {
    KubeletRoot::new(r"C:\var\lib\kubelet").expect("root")
}

/// Path segments that matter: traversal, dots, case variants of the root, forbidden characters, device names.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just(String::new()),
        Just("kubelet".to_owned()),
        Just("KUBELET".to_owned()),
        Just("kubeletX".to_owned()),
        Just("var".to_owned()),
        Just("lib".to_owned()),
        Just("pods".to_owned()),
        Just("a..".to_owned()),
        Just("..a".to_owned()),
        Just("a.".to_owned()),
        Just("a ".to_owned()),
        Just("C:".to_owned()),
        Just("a:b".to_owned()),
        Just("CON".to_owned()),
        Just("?".to_owned()),
        "[a-zA-Z0-9._ ~-]{1,12}",
        any::<String>(),
    ]
}

fn separator() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("\\"), Just("/"), Just("\\\\"), Just("//")]
}

fn prefix() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just(r"C:\var\lib\kubelet\"),
        Just(r"c:/var/lib/kubelet/"),
        Just(r"\var\lib\kubelet\"),
        Just("/var/lib/kubelet/"),
        Just(r"C:\VAR\LIB\KUBELET\"),
        Just(r"D:\var\lib\kubelet\"),
        Just(r"\\?\C:\var\lib\kubelet\"),
        Just(r"\\server\share\var\lib\kubelet\"),
        Just(r"C:\var\lib\kubeletX\"),
        Just("C:"),
        Just(""),
    ]
}

fn kubelet_path() -> impl Strategy<Value = String> {
    (
        prefix(),
        prop::collection::vec((segment(), separator()), 0..8),
    )
        .prop_map(|(p, parts)| {
            let mut s = p.to_owned();
            for (seg, sep) in parts {
                s.push_str(&seg);
                s.push_str(sep);
            }
            s
        })
}

fn check_accepted_path(raw: &str) -> Result<(), TestCaseError> {
    let root = root();
    let Ok(p) = root.check(raw, "target_path") else {
        return Ok(());
    };
    let text = p.as_str();
    let prefix = r"C:\var\lib\kubelet\";
    prop_assert!(
        text.len() > prefix.len() && text[..prefix.len()].eq_ignore_ascii_case(prefix),
        "{raw:?} accepted as {text:?}"
    );
    prop_assert!(text.len() <= MAX_PATH_BYTES);
    for c in text[3..].split('\\') {
        prop_assert!(
            c != "." && c != ".." && !c.is_empty(),
            "{raw:?} -> {text:?}"
        );
        prop_assert!(!c.contains([':', '*', '?', '"', '<', '>', '|', '/']));
    }
    let again = root.check(text, "again").expect("fixed point");
    prop_assert_eq!(again.as_str(), text);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn kubelet_paths_stay_inside_the_root(raw in kubelet_path()) {
        check_accepted_path(&raw)?;
    }

    #[test]
    fn any_string_as_a_kubelet_path(raw in any::<String>()) {
        check_accepted_path(&raw)?;
        check_accepted_path(&format!(r"C:\var\lib\kubelet\{raw}"))?;
    }

    #[test]
    fn traversal_is_always_refused(
        before in prop::collection::vec("[a-z]{1,6}", 0..4),
        after in prop::collection::vec("[a-z]{1,6}", 0..4),
        dots in prop_oneof![Just(".."), Just(".")],
        sep in separator(),
    ) {
        let mut parts = vec![r"C:\var\lib\kubelet".to_owned()];
        parts.extend(before);
        parts.push(dots.to_owned());
        parts.extend(after);
        let raw = parts.join(sep);
        prop_assert!(root().check(&raw, "p").is_err(), "{raw:?} accepted");
    }

    #[test]
    fn valid_paths_are_accepted_in_every_spelling(
        parts in prop::collection::vec("[a-zA-Z0-9_~-]{1,10}", 1..6),
        p in prop_oneof![
            Just(r"C:\var\lib\kubelet\"), Just(r"c:/var/lib/kubelet/"), Just(r"\var\lib\kubelet\"),
            Just("/var/lib/kubelet/"), Just(r"C:\\var\lib\\kubelet\\"),
        ],
        trailing in prop_oneof![Just(""), Just("\\"), Just("/")],
    ) {
        let raw = format!("{p}{}{trailing}", parts.join("\\"));
        let got = root().check(&raw, "p").expect("valid path");
        prop_assert_eq!(got.as_str(), format!(r"C:\var\lib\kubelet\{}", parts.join("\\")));
    }

    #[test]
    fn unc_sources_round_trip(
        lead in prop_oneof![Just(r"\\"), Just("//"), Just(r"\\\"), Just(r"\\?\"), Just(r"\\.\"), Just("")],
        server in prop_oneof![Just("fs1".to_owned()), Just("..".to_owned()), "[a-zA-Z0-9._-]{0,8}", any::<String>()],
        rest in prop::collection::vec((segment(), separator()), 0..5),
    ) {
        let mut raw = format!("{lead}{server}");
        for (seg, sep) in rest {
            raw.push_str(sep);
            raw.push_str(&seg);
        }
        if let Ok(p) = UncPath::parse(&raw, "source") {
            let text = p.to_string();
            prop_assert!(text.starts_with(r"\\"));
            for c in text[2..].split('\\') {
                prop_assert!(c != "." && c != ".." && !c.is_empty(), "{raw:?} -> {text:?}");
            }
            let again = UncPath::parse(&text, "again").expect("host-call text valid");
            prop_assert_eq!(again, p);
        }
    }

    #[test]
    fn smb_volumes_never_echo_secrets_and_sub_dirs_never_traverse(
        source in prop_oneof![Just(r"\\fs1\data".to_owned()), Just("//fs1/data/x".to_owned()), any::<String>()],
        sub_dir in prop_oneof![
            Just("${pvc.metadata.name}".to_owned()),
            Just("${pvc.metadata.namespace}/${pv.metadata.name}".to_owned()),
            Just("a/../b".to_owned()),
            Just("${unknown}".to_owned()),
            prop::collection::vec(segment(), 0..4).prop_map(|v| v.join("/")),
        ],
        pvc in prop_oneof![Just("..".to_owned()), Just("a/..".to_owned()), "[a-z0-9.-]{0,10}", any::<String>()],
        user in prop_oneof![Just("bob".to_owned()), Just(r"CORP\bob".to_owned()), Just("a:b".to_owned()), any::<String>()],
        password in any::<String>(),
        domain in prop::option::of("[A-Z]{0,5}"),
        options in prop::option::of(prop_oneof![Just("password=x".to_owned()), Just("vers=3,user=bob".to_owned()), any::<String>()]),
    ) {
        let strip = |s: String| s.replace(MARK, "").replace(PW_MARK, "");
        let mut ctx: BTreeMap<String, String> = BTreeMap::new();
        ctx.insert("source".into(), strip(source));
        ctx.insert("subDir".into(), strip(sub_dir));
        ctx.insert("csi.storage.k8s.io/pvc/name".into(), strip(pvc.clone()));
        ctx.insert("csi.storage.k8s.io/pvc/namespace".into(), strip(pvc));
        ctx.insert("csi.storage.k8s.io/pv/name".into(), "pv-1".into());
        if let Some(o) = options {
            ctx.insert("mountOptions".into(), strip(o));
        }
        let mut secrets = vec![
            ("username", format!("{MARK}{user}")),
            ("password", format!("{MARK}{PW_MARK}{password}")),
        ];
        if let Some(d) = domain {
            secrets.push(("domain", format!("{MARK}{d}")));
        }
        let secrets = Secrets::new(secrets);
        let shown = format!("{secrets:?}");
        prop_assert!(!shown.contains(MARK));
        match smb::parse_volume(&ctx, &secrets) {
            Err(e) => {
                prop_assert!(!e.to_string().contains(MARK), "error shows a secret: {e}");
                let shown = format!("{e:?}");
                prop_assert!(!shown.contains(MARK));
            }
            Ok(vol) => {
                for c in &vol.sub_dir {
                    prop_assert!(c != "." && c != ".." && !c.is_empty() && !c.contains(['/', '\\']), "{c:?}");
                }
                let full = vol.full_path();
                prop_assert_eq!(UncPath::parse(&full.to_string(), "again").expect("valid"), full);
                prop_assert!(vol.credential.is_some());
                let shown = format!("{vol:?}");
                prop_assert!(!shown.contains(PW_MARK), "Debug shows the password: {shown}");
            }
        }
        let e = wincsi::lifecycle::check_mount_flags(&[format!("vers=3,password={MARK}x")]).expect_err("refused");
        prop_assert!(!e.to_string().contains(MARK));
    }

    #[test]
    fn iscsi_volumes_never_echo_secrets_and_approve_what_the_host_gets(
        portal in prop_oneof![
            Just("10.0.0.5".to_owned()), Just("10.0.0.5:3261".to_owned()), Just("[fd00::5]:3260".to_owned()),
            Just("fd00::5".to_owned()), Just("host:0".to_owned()), Just("[::1".to_owned()), any::<String>(),
        ],
        portals in prop_oneof![
            Just(String::new()), Just(r#"["10.0.0.6:3260","10.0.0.6"]"#.to_owned()), Just("a,b:1,,".to_owned()),
            Just("[\"".to_owned()), any::<String>(),
        ],
        iqn in prop_oneof![
            Just("iqn.2024-01.io.example:t".to_owned()), Just("eui.0123456789ABCDEF".to_owned()),
            Just("naa.0123456789abcdef".to_owned()), Just("iqn.2024-1".to_owned()), "iqn\\.[0-9-]{0,8}\\.[a-z:]{0,6}",
            "iqn\\.[0-9\u{e9}\u{1F511}-]{0,9}\\.[a-z]{0,4}",
            any::<String>(),
        ],
        lun in prop_oneof![Just("0".to_owned()), Just("255".to_owned()), Just("256".to_owned()), Just("-1".to_owned()), any::<String>()],
        user in prop::option::of(any::<String>()),
        secret in prop::option::of(prop_oneof!["[a-zA-Z0-9]{10,18}", any::<String>()]),
        secret_in in prop::option::of("[a-zA-Z0-9]{10,18}"),
        chap in prop::option::of(prop_oneof![Just("true"), Just("false"), Just("yes")]),
    ) {
        let strip = |s: String| s.replace(MARK, "").replace(PW_MARK, "");
        let mut ctx: BTreeMap<String, String> = BTreeMap::new();
        ctx.insert("targetPortal".into(), strip(portal));
        ctx.insert("portals".into(), strip(portals));
        ctx.insert("iqn".into(), strip(iqn));
        ctx.insert("lun".into(), strip(lun));
        if let Some(c) = chap {
            ctx.insert("sessionCHAPAuth".into(), c.into());
        }
        let mut pairs = Vec::new();
        if let Some(u) = user {
            pairs.push(("node.session.auth.username", format!("{MARK}{u}")));
        }
        if let Some(s) = secret {
            pairs.push(("node.session.auth.password", format!("{MARK}{s}")));
        }
        if let Some(s) = secret_in {
            pairs.push(("node.session.auth.password_in", format!("{MARK}{s}")));
        }
        match iscsi::parse_volume(&ctx, &Secrets::new(pairs)) {
            Err(e) => {
                prop_assert!(!e.to_string().contains(MARK), "error shows a secret: {e}");
                let shown = format!("{e:?}");
                prop_assert!(!shown.contains(MARK));
            }
            Ok(vol) => {
                prop_assert!(vol.lun <= MAX_LUN);
                iscsi::check_iqn(&vol.iqn).expect("valid IQN");
                for p in &vol.portals {
                    prop_assert_eq!(&Portal::parse(&p.to_string(), "again").expect("valid"), p);
                }
                let dbg = format!("{vol:?}");
                if let IscsiAuth::OneWay { secret, .. } | IscsiAuth::Mutual { secret, .. } = &vol.auth {
                    prop_assert!(!dbg.contains(secret.expose()));
                }
            }
        }
    }

    #[test]
    fn volume_ids_name_distinct_safe_files(a in any::<String>(), b in any::<String>()) {
        let (ka, kb) = (file_key(&a), file_key(&b));
        prop_assert_eq!(ka.len(), 64);
        prop_assert!(ka.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        prop_assert_eq!(a == b, ka == kb);
    }

    #[test]
    fn csi_proxy_error_texts_classify_without_panicking(
        text in prop_oneof![
            any::<String>(),
            "(rpc error: )?[A-Za-z ]{0,20}(error|failed)[^\n]{0,20}(0x[0-9A-Fa-f]{1,9}|[0-9]{1,12})?",
        ],
    ) {
        prop_assert_eq!(ErrorKind::from_message(&text), ErrorKind::from_message(&text));
    }

    #[test]
    fn grpc_timeout_headers_never_panic(
        text in prop_oneof![any::<String>(), "[0-9]{0,20}[HMSmun\u{e9}\u{1F511}]?"],
    ) {
        let _ = Deadline::from_grpc_timeout(Some(&text));
    }
}

#[test]
fn the_secret_scan_would_see_a_leak() {
    // The marker survives Display and Debug, so the scans above can fail.
    let e = wincsi::Error::InvalidArgument(format!("x {MARK}y"));
    assert!(e.to_string().contains(MARK) && format!("{e:?}").contains(MARK));
}

/// Regression: a non-ASCII `grpc-timeout` value made the parser split inside a character and panic (found by the
/// `grpc_timeout` property above and the fuzz target of the same name).
#[test]
fn grpc_timeout_with_a_multibyte_last_character_is_ignored_not_a_panic() {
    let d = Deadline::from_grpc_timeout(Some("10\u{e9}"));
    assert!(
        d.remaining() > std::time::Duration::from_secs(60),
        "default budget"
    );
    let _ = Deadline::from_grpc_timeout(Some("\u{1F511}"));
}

/// Regression: a `grpc-timeout` of more than the spec's 8 digits (`18446744073709551615H`) overflowed the deadline
/// instant and panicked the request handler.
#[test]
fn grpc_timeout_beyond_eight_digits_is_ignored_not_a_panic() {
    for v in ["18446744073709551615H", "999999999999S", "123456789M"] {
        let d = Deadline::from_grpc_timeout(Some(v));
        assert!(d.remaining() <= Deadline::DEFAULT_BUDGET, "{v}");
    }
    let d = Deadline::from_grpc_timeout(Some("99999999H"));
    assert!(d.remaining() > Deadline::DEFAULT_BUDGET);
}

/// Regression: a UNC server name of dots (`\\..\share`) was accepted; Windows path normalisers may treat it as
/// traversal, and it is no host name anyway.
#[test]
fn unc_server_names_of_dots_are_refused() {
    for raw in [
        r"\\..\share",
        r"\\..\share\x",
        "//../share",
        r"\\...\share",
        r"\\.x\share",
    ] {
        assert!(UncPath::parse(raw, "source").is_err(), "{raw} accepted");
    }
    assert!(UncPath::parse(r"\\fs1.corp.\share", "source").is_ok());
}

/// Regression (fuzz target `smb_source`): a share name ending in spaces or a dot (`\\d\.  `) was accepted, but
/// Windows strips those characters, so the host would have been handed another share than the validated one.
#[test]
fn share_names_ending_in_a_space_or_dot_are_refused() {
    for raw in [r"\\d\.  ", r"\\d\.  \x", r"\\d\data.", r"\\d\data \x"] {
        assert!(UncPath::parse(raw, "source").is_err(), "{raw:?} accepted");
    }
    assert!(UncPath::parse(r"\\d\data$", "source").is_ok());
}

/// Regression (fuzz targets `iscsi_names`, `iscsi_volume`): an IQN with a multi-byte character inside its date
/// (`iqn.202\u{e9}-01.x`) made the validator slice inside the character and panic.
#[test]
fn iqn_with_a_multibyte_character_in_the_date_is_refused_not_a_panic() {
    for iqn in [
        "iqn.2024-0\u{fffd}.io.example:t",
        "iqn.202\u{e9}-01.x",
        "iqn.\u{1F511}\u{1F511}-.abc",
    ] {
        assert!(iscsi::check_iqn(iqn).is_err(), "{iqn}");
    }
    iscsi::check_iqn("iqn.2024-01.io.example:t").expect("valid");
}
