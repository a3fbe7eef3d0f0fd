//! SMB volume parameters: the csi-driver-smb-compatible `volume_context` keys and node-stage secrets.
//!
//! | Where | Key (matched case-insensitively) | Meaning |
//! | --- | --- | --- |
//! | volume_context | `source` | `\\server\share[\path]` or `//server/share[/path]` (required) |
//! | volume_context | `subDir` | appended to `source`; may use `${pvc.metadata.name}`, `${pvc.metadata.namespace}` and `${pv.metadata.name}`, filled from `csi.storage.k8s.io/pvc/name`, `…/pvc/namespace`, `…/pv/name`. Created on the share when missing |
//! | secrets | `username`, `password`, `domain` | the mapping's credential: `DOMAIN\user` when a domain is given and the user name has neither `\` nor `@`; a UPN `user@fqdn` or `DOMAIN\user` stays as written. No default domain is invented. No username and no password: the mapping is made without a credential (the node's own identity) |
//!
//! Credentials anywhere else — a `username`/`password`-like key in volume_context or a `password=`-like mount option
//! (csi-driver-smb's Linux habit) — are refused with InvalidArgument that names the key, never the value. Other mount
//! options are ignored on Windows, as csi-driver-smb does, and logged by key.
//!
//! # democratic-csi volumes
//!
//! A volume context with `node_attach_driver: smb` is democratic-csi's (`crate::lifecycle::democratic`; citations of
//! democratic-csi `v1.9.4`, `src/driver/index.js`):
//!
//! | Where | Key | Meaning |
//! | --- | --- | --- |
//! | volume_context | `server`, `share` | the share `\\server\share`; `share` may go on with a path (`share/sub/dir`, as `controller-smb-client` writes it), which becomes the volume's directory on the share (democratic-csi maps the root share and links to the full path: index.js:1721, `src/utils/windows.js:115-137`, `:160-176`) |
//! | volume_context | `provisioner_driver`, `provisioner_driver_instance_id` | which secret-key prefixes are stripped |
//! | node-stage secret | `mount_flags` | comma-separated flags; `username=…` and `password=…` are the account (the last of each wins); other flags (`vers=3.0`, …) are ignored on Windows, as democratic-csi's Windows code ignores them |
//!
//! The account logs on as `server\username` (index.js:1766-1770: a local account of the file server); a user name
//! that already names its domain (`DOMAIN\user`, `user@domain`) is kept as written (democratic-csi would send
//! `server\DOMAIN\user`). As everywhere, credentials come only from the node-stage secret: `username`/`password`
//! in the capability's mount flags (the PV's `mountOptions`, where democratic-csi also reads them) are refused by the
//! lifecycle, and for these volumes the csi-driver-smb secret keys (`username`, `password`, `domain`) are refused
//! too, so one account is never silently preferred over another. Without any account the mapping is made with the
//! node's own identity (democratic-csi refuses: "username and password required"). `source` and `subDir` do not mix
//! with `server`/`share`.
//!
//! Whether the mapping requires SMB encryption (`RequirePrivacy`) is decided by csi-proxy's `-require-privacy` flag
//! (default true), not per volume: csi-proxy v1's `NewSmbGlobalMapping` has no such field.

use std::collections::BTreeMap;

use crate::error::Error;
use crate::host::{Secret, SmbCredential, UncPath, check_component};
use crate::lifecycle::democratic::{self, AttachDriver};
use crate::lifecycle::{Secrets, check_mount_flags, context_get, is_credential_key};

/// A parsed SMB volume: where it lives and how to map it.
#[derive(Clone, Debug)]
pub struct SmbVolume {
    /// `source` as given (root plus optional path).
    pub source: UncPath,
    /// The resolved subDir components (templates filled in), possibly empty.
    pub sub_dir: Vec<String>,
    /// The credential, if any.
    pub credential: Option<SmbCredential>,
}

impl SmbVolume {
    /// The full remote path: root + source path + subDir.
    pub fn full_path(&self) -> UncPath {
        self.source.join(&self.sub_dir)
    }

    /// The principal name, if a credential is given.
    pub fn principal(&self) -> Option<&str> {
        self.credential.as_ref().map(SmbCredential::principal)
    }
}

/// Parse an SMB volume from `volume_context` and the node-stage `secrets`.
pub fn parse_volume(
    context: &BTreeMap<String, String>,
    secrets: &Secrets,
) -> Result<SmbVolume, Error> {
    for key in context.keys() {
        if is_credential_key(key) {
            return Err(Error::InvalidArgument(format!(
                "volume_context key {key:?} carries a credential; rule: credentials belong in the node-stage secret \
                 (username, password, domain), never in volume attributes"
            )));
        }
    }
    if let Some(opts) = context_get(context, "mountOptions") {
        check_mount_flags(&[opts.to_owned()])?;
    }
    match democratic::attach_driver(context)? {
        Some(AttachDriver::Smb) => return democratic_volume(context, secrets),
        Some(AttachDriver::Iscsi) => {
            // The protocol set hands these to the iSCSI protocol; reaching here is a wiring error, refused plainly.
            return Err(Error::InvalidArgument(
                "volume_context node_attach_driver is iscsi: not an SMB volume".to_owned(),
            ));
        }
        None => {}
    }
    let source = context_get(context, "source").filter(|s| !s.trim().is_empty()).ok_or_else(|| {
        Error::InvalidArgument(
            "volume_context has no source; rule: SMB volumes need source=\\\\server\\share[\\path]".to_owned(),
        )
    })?;
    let source = UncPath::parse(source, "source")?;
    let sub_dir = match context_get(context, "subDir") {
        Some(raw) if !raw.trim().is_empty() => resolve_sub_dir(raw, context)?,
        _ => Vec::new(),
    };
    Ok(SmbVolume {
        source,
        sub_dir,
        credential: credential(secrets)?,
    })
}

/// A democratic-csi SMB volume (`node_attach_driver: smb`): `server` + `share[/path]`, the account from the node-stage
/// secret's `mount_flags` (see the module docs).
fn democratic_volume(
    context: &BTreeMap<String, String>,
    secrets: &Secrets,
) -> Result<SmbVolume, Error> {
    for key in ["source", "subDir"] {
        if context_get(context, key).is_some() {
            return Err(Error::InvalidArgument(format!(
                "volume_context has node_attach_driver smb and {key}; rule: a democratic-csi volume names its share \
                 with server and share only"
            )));
        }
    }
    let get = |key: &str| {
        context_get(context, key)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "volume_context has node_attach_driver smb but no {key}; rule: democratic-csi SMB volumes need \
                     server and share"
                ))
            })
    };
    let (server, share) = (get("server")?, get("share")?);
    if server.contains(['\\', '/']) {
        return Err(Error::InvalidArgument(format!(
            "volume_context server {} is not a host name; rule: the server is a host name or IPv4 address, the \
             share goes in share",
            crate::error::quote_short(server)
        )));
    }
    let share = share.replace('/', "\\");
    let source = UncPath::parse(
        &format!(r"\\{server}\{}", share.trim_start_matches('\\')),
        "server and share",
    )?;
    let secrets = democratic::normalized_secrets(secrets, context);
    for key in ["username", "password", "domain"] {
        if secrets.get(key).is_some() {
            return Err(Error::InvalidArgument(format!(
                "node-stage secret has {key} for a democratic-csi volume (node_attach_driver smb); rule: its account \
                 is read from the mount_flags key only (mount_flags: \"username=…,password=…\"), as democratic-csi \
                 reads it"
            )));
        }
    }
    let flags = democratic::secret_mount_flags(&secrets);
    let user = democratic::last_flag_value(&flags, "username")
        .map(|u| u.expose().trim().to_owned())
        .filter(|u| !u.is_empty());
    let password =
        democratic::last_flag_value(&flags, "password").filter(|p| !p.expose().is_empty());
    let ignored: Vec<&str> = flags
        .iter()
        .map(|f| f.key.as_str())
        .filter(|k| !k.eq_ignore_ascii_case("username") && !k.eq_ignore_ascii_case("password"))
        .collect();
    if !ignored.is_empty() {
        tracing::debug!(flags = ?ignored, "the node-stage secret's mount_flags other than the account are ignored on Windows");
    }
    let credential = match (user, password) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(Error::InvalidArgument(
                "node-stage secret mount_flags has username= but no password=; rule: give both"
                    .to_owned(),
            ));
        }
        (None, Some(_)) => {
            return Err(Error::InvalidArgument(
                "node-stage secret mount_flags has password= but no username=; rule: give both"
                    .to_owned(),
            ));
        }
        (Some(user), Some(password)) => {
            check_user(&user, "node-stage secret mount_flags username")?;
            let principal = if user.contains(['\\', '@']) {
                user
            } else {
                format!("{}\\{user}", source.server())
            };
            Some(SmbCredential::new(principal, password.clone()))
        }
    };
    Ok(SmbVolume {
        source,
        sub_dir: Vec::new(),
        credential,
    })
}

/// A user name Windows can take: no `: " | < >` or control characters.
fn check_user(user: &str, what: &str) -> Result<(), Error> {
    if user
        .chars()
        .any(|c| c.is_control() || matches!(c, ':' | '"' | '|' | '<' | '>'))
    {
        return Err(Error::InvalidArgument(format!(
            "{what} has a forbidden character; rule: no : \" | < > or control characters"
        )));
    }
    Ok(())
}

/// Fill the subDir templates and split it into validated components.
fn resolve_sub_dir(raw: &str, context: &BTreeMap<String, String>) -> Result<Vec<String>, Error> {
    let mut text = raw.to_owned();
    for (template, key) in [
        ("${pvc.metadata.name}", "csi.storage.k8s.io/pvc/name"),
        (
            "${pvc.metadata.namespace}",
            "csi.storage.k8s.io/pvc/namespace",
        ),
        ("${pv.metadata.name}", "csi.storage.k8s.io/pv/name"),
    ] {
        if text.contains(template) {
            let value = context_get(context, key).filter(|v| !v.is_empty()).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "subDir {raw:?} uses {template} but volume_context has no {key}; rule: templates need the \
                     provisioner's --extra-create-metadata keys"
                ))
            })?;
            text = text.replace(template, value);
        }
    }
    if text.contains("${") {
        return Err(Error::InvalidArgument(format!(
            "subDir {raw:?} uses an unknown template; rule: only ${{pvc.metadata.name}}, ${{pvc.metadata.namespace}} \
             and ${{pv.metadata.name}} are supported"
        )));
    }
    text.replace('/', "\\")
        .split('\\')
        .filter(|p| !p.is_empty())
        .map(|p| check_component(p, raw, "subDir"))
        .collect()
}

/// Build the credential from the secrets: `username`, `password`, `domain` (trimmed).
fn credential(secrets: &Secrets) -> Result<Option<SmbCredential>, Error> {
    let get = |k: &str| {
        secrets
            .get(k)
            .map(|s| s.expose().trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let (user, password, domain) = (get("username"), get("password"), get("domain"));
    match (user, password) {
        (None, None) => {
            if domain.is_some() {
                return Err(Error::InvalidArgument(
                    "node-stage secret has a domain but no username; rule: give username and password".to_owned(),
                ));
            }
            Ok(None)
        }
        (Some(_), None) => Err(Error::InvalidArgument(
            "node-stage secret has a username but no password; rule: give both".to_owned(),
        )),
        (None, Some(_)) => Err(Error::InvalidArgument(
            "node-stage secret has a password but no username; rule: give both".to_owned(),
        )),
        (Some(user), Some(password)) => {
            check_user(&user, "node-stage secret username")?;
            let principal = match domain {
                Some(domain) if !user.contains(['\\', '@']) => format!("{domain}\\{user}"),
                _ => user,
            };
            Ok(Some(SmbCredential::new(principal, Secret::new(password))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn secrets(pairs: &[(&str, &str)]) -> Secrets {
        Secrets::new(pairs.iter().map(|(k, v)| (*k, *v)))
    }

    fn invalid(r: Result<SmbVolume, Error>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn unc_spellings() {
        for raw in [
            r"\\srv\share\a\b",
            "//srv/share/a/b",
            r"\\srv\share\\a\b\",
            "//srv//share/a/b/",
        ] {
            let p = UncPath::parse(raw, "source").expect(raw);
            assert_eq!(p.to_string(), r"\\srv\share\a\b");
            assert_eq!(p.root().to_string(), r"\\srv\share");
        }
        let p = UncPath::parse(r"\\Srv.Example.COM\Data$", "source").expect("ok");
        assert_eq!(p.root_key(), r"\\srv.example.com\data$");
        assert_eq!(p.server_key(), "srv.example.com");
        for raw in [
            "srv/share",
            r"\\",
            r"\\srv",
            r"\\srv\",
            r"\\\srv\share",
            r"\\?\C:\x",
            r"\\.\pipe\x",
            r"\\srv\share\..\x",
            r"\\srv\share\a\.\b",
            r"\\srv\sh:are",
            r"\\srv\share\a*b",
            r"\\s rv\share",
            "C:\\share",
        ] {
            assert!(
                matches!(
                    UncPath::parse(raw, "source"),
                    Err(Error::InvalidArgument(_))
                ),
                "{raw}"
            );
        }
    }

    #[test]
    fn sub_dir_templates() {
        let c = ctx(&[
            ("source", "//srv/share/base"),
            (
                "subDir",
                "${pvc.metadata.namespace}/${pvc.metadata.name}-${pv.metadata.name}",
            ),
            ("csi.storage.k8s.io/pvc/name", "data"),
            ("csi.storage.k8s.io/pvc/namespace", "team-a"),
            ("csi.storage.k8s.io/pv/name", "pv-1"),
        ]);
        let v = parse_volume(&c, &Secrets::default()).expect("ok");
        assert_eq!(
            v.full_path().to_string(),
            r"\\srv\share\base\team-a\data-pv-1"
        );
        assert_eq!(v.sub_dir, vec!["team-a".to_owned(), "data-pv-1".to_owned()]);
        // Keys are case-insensitive like csi-driver-smb.
        let v = parse_volume(
            &ctx(&[("Source", r"\\srv\share"), ("SUBDIR", "x")]),
            &Secrets::default(),
        )
        .expect("ok");
        assert_eq!(v.full_path().to_string(), r"\\srv\share\x");
    }

    #[test]
    fn sub_dir_rules() {
        let m = invalid(parse_volume(
            &ctx(&[("source", r"\\s\x"), ("subDir", "a/../../b")]),
            &Secrets::default(),
        ));
        assert!(m.contains(".."), "{m}");
        let m = invalid(parse_volume(
            &ctx(&[("source", r"\\s\x"), ("subDir", "${pvc.metadata.name}")]),
            &Secrets::default(),
        ));
        assert!(m.contains("csi.storage.k8s.io/pvc/name"), "{m}");
        let m = invalid(parse_volume(
            &ctx(&[("source", r"\\s\x"), ("subDir", "${foo}")]),
            &Secrets::default(),
        ));
        assert!(m.contains("unknown template"), "{m}");
        // A template value cannot smuggle a traversal either.
        let c = ctx(&[
            ("source", r"\\s\x"),
            ("subDir", "${pvc.metadata.name}"),
            ("csi.storage.k8s.io/pvc/name", ".."),
        ]);
        assert!(invalid(parse_volume(&c, &Secrets::default())).contains(".."));
        assert!(invalid(parse_volume(&ctx(&[]), &Secrets::default())).contains("no source"));
    }

    #[test]
    fn credentials() {
        let c = ctx(&[("source", r"\\s\x")]);
        let p = |s: &[(&str, &str)]| {
            parse_volume(&c, &secrets(s)).map(|v| v.principal().map(str::to_owned))
        };
        assert_eq!(
            p(&[("username", " bob "), ("password", "pw")])
                .expect("ok")
                .as_deref(),
            Some("bob")
        );
        assert_eq!(
            p(&[("username", "bob"), ("password", "pw"), ("domain", "CORP")])
                .expect("ok")
                .as_deref(),
            Some(r"CORP\bob")
        );
        assert_eq!(
            p(&[
                ("username", "bob@corp.example"),
                ("password", "pw"),
                ("domain", "CORP")
            ])
            .expect("ok")
            .as_deref(),
            Some("bob@corp.example")
        );
        assert_eq!(
            p(&[
                ("username", r"OTHER\bob"),
                ("password", "pw"),
                ("domain", "CORP")
            ])
            .expect("ok")
            .as_deref(),
            Some(r"OTHER\bob")
        );
        assert_eq!(p(&[]).expect("ok"), None);
        assert!(p(&[("username", "bob")]).is_err());
        assert!(p(&[("password", "pw")]).is_err());
        assert!(p(&[("domain", "CORP")]).is_err());
    }

    #[test]
    fn credentials_elsewhere_are_refused_without_echo() {
        let secret = "hunter2-value";
        for c in [
            ctx(&[("source", r"\\s\x"), ("password", secret)]),
            ctx(&[("source", r"\\s\x"), ("Username", secret)]),
            ctx(&[
                ("source", r"\\s\x"),
                ("mountOptions", &format!("dir_mode=0777,password={secret}")),
            ]),
        ] {
            let m = invalid(parse_volume(&c, &Secrets::default()));
            assert!(!m.contains(secret), "{m}");
        }
        let flags = vec![
            "vers=3.0,dir_mode=0777".to_owned(),
            format!("pass={secret}"),
        ];
        match check_mount_flags(&flags) {
            Err(Error::InvalidArgument(m)) => assert!(!m.contains(secret) && m.contains("pass")),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            check_mount_flags(&["vers=3.0,dir_mode=0777".to_owned()]).expect("ok"),
            vec!["vers", "dir_mode"]
        );
    }

    /// A volume as democratic-csi's SMB controllers write it (`freenas/api.js:658-662`: server + share), with the
    /// keys the controller adds (`controller-zfs/index.js:1230-1233`).
    fn democratic(share: &str) -> BTreeMap<String, String> {
        ctx(&[
            ("node_attach_driver", "smb"),
            ("server", "truenas.example"),
            ("share", share),
            ("provisioner_driver", "freenas-api-smb"),
            ("provisioner_driver_instance_id", "nas-1"),
        ])
    }

    #[test]
    fn democratic_csi_volumes_map_the_share_and_log_on_at_the_server() {
        let s = secrets(&[("mount_flags", "vers=3.0,username=k8s,password=s3cr3t=pw")]);
        let v = parse_volume(&democratic("pvc-1"), &s).expect("ok");
        assert_eq!(v.full_path().to_string(), r"\\truenas.example\pvc-1");
        assert_eq!(v.principal(), Some(r"truenas.example\k8s"));
        assert_eq!(
            v.credential
                .as_ref()
                .map(|c| c.password().expose().to_owned())
                .as_deref(),
            Some("s3cr3t=pw")
        );
        // controller-smb-client's share is a path inside the share: the root is mapped, the path is the volume.
        let v = parse_volume(&democratic("data/k8s/pvc-2"), &s).expect("ok");
        assert_eq!(v.source.root().to_string(), r"\\truenas.example\data");
        assert_eq!(
            v.full_path().to_string(),
            r"\\truenas.example\data\k8s\pvc-2"
        );
        // Prefixed keys, the most specific first; the last username= wins.
        let s = secrets(&[
            (
                "democratic-csi.org/mount_flags",
                "username=base,password=base-pw",
            ),
            (
                "democratic-csi.org/nas-1/mount_flags",
                "username=old,username=inst,password=inst-pw",
            ),
        ]);
        let v = parse_volume(&democratic("pvc-1"), &s).expect("ok");
        assert_eq!(v.principal(), Some(r"truenas.example\inst"));
        // A domain account stays as written.
        let s = secrets(&[("mount_flags", r"username=CORP\svc,password=pw")]);
        assert_eq!(
            parse_volume(&democratic("pvc-1"), &s)
                .expect("ok")
                .principal(),
            Some(r"CORP\svc")
        );
        // No account: the node's own identity.
        assert_eq!(
            parse_volume(&democratic("pvc-1"), &Secrets::default())
                .expect("ok")
                .principal(),
            None
        );
    }

    #[test]
    fn democratic_csi_rules() {
        let ok = secrets(&[("mount_flags", "username=k8s,password=pw")]);
        for (context, want) in [
            (
                ctx(&[
                    ("node_attach_driver", "nfs"),
                    ("server", "s"),
                    ("share", "x"),
                ]),
                "smb and iscsi",
            ),
            (ctx(&[("node_attach_driver", "hostpath")]), "smb and iscsi"),
            (
                ctx(&[("node_attach_driver", "smb"), ("share", "x")]),
                "no server",
            ),
            (
                ctx(&[("node_attach_driver", "smb"), ("server", "s")]),
                "no share",
            ),
            (
                ctx(&[
                    ("node_attach_driver", "smb"),
                    ("server", r"s\x"),
                    ("share", "y"),
                ]),
                "not a host name",
            ),
            (
                ctx(&[
                    ("node_attach_driver", "smb"),
                    ("server", "s"),
                    ("share", "../x"),
                ]),
                "UNC",
            ),
            (
                ctx(&[
                    ("node_attach_driver", "smb"),
                    ("server", "s"),
                    ("share", "x"),
                    ("source", r"\\s\x"),
                ]),
                "source",
            ),
            (
                ctx(&[
                    ("node_attach_driver", "smb"),
                    ("server", "s"),
                    ("share", "x"),
                    ("subDir", "y"),
                ]),
                "subDir",
            ),
        ] {
            let m = invalid(parse_volume(&context, &ok));
            assert!(m.contains(want), "{context:?}: {m}");
        }
        let c = democratic("pvc-1");
        for (s, want) in [
            (secrets(&[("mount_flags", "username=k8s")]), "no password="),
            (secrets(&[("mount_flags", "password=pw")]), "no username="),
            (
                secrets(&[
                    ("mount_flags", "username=k8s,password=pw"),
                    ("password", "pw"),
                ]),
                "mount_flags key only",
            ),
            (
                secrets(&[
                    ("mount_flags", "username=k8s,password=pw"),
                    ("democratic-csi.org/domain", "D"),
                ]),
                "mount_flags key only",
            ),
            (
                secrets(&[("mount_flags", "username=a|b,password=pw")]),
                "forbidden character",
            ),
        ] {
            let m = invalid(parse_volume(&c, &s));
            assert!(m.contains(want) && !m.contains("pw"), "{m}");
        }
    }

    #[test]
    fn debug_is_redacted() {
        let s = secrets(&[("username", "bob"), ("password", "s3cr3t-pw")]);
        let v = parse_volume(&ctx(&[("source", r"\\s\x")]), &s).expect("ok");
        for text in [
            format!("{s:?}"),
            format!("{v:?}"),
            format!("{:?}", v.credential),
            Secret::new("s3cr3t-pw").to_string(),
        ] {
            assert!(!text.contains("s3cr3t-pw"), "{text}");
        }
        assert!(format!("{v:?}").contains("bob"));
    }
}
