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
//! Whether the mapping requires SMB encryption (`RequirePrivacy`) is decided by csi-proxy's `-require-privacy` flag
//! (default true), not per volume: csi-proxy v1's `NewSmbGlobalMapping` has no such field.

use std::collections::BTreeMap;

use crate::error::Error;
use crate::host::{Secret, SmbCredential, UncPath, check_component};
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
            if user
                .chars()
                .any(|c| c.is_control() || matches!(c, ':' | '"' | '|' | '<' | '>'))
            {
                return Err(Error::InvalidArgument(
                    "node-stage secret username has a forbidden character; rule: no : \" | < > or control \
                     characters"
                        .to_owned(),
                ));
            }
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
