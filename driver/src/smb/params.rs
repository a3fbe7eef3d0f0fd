//! SMB volume parameters: the csi-driver-smb-compatible `volume_context` keys and node-stage secrets.
//!
//! | Where | Key (matched case-insensitively) | Meaning |
//! | --- | --- | --- |
//! | volume_context | `source` | `\\server\share[\path]` or `//server/share[/path]` (required) |
//! | volume_context | `subDir` | appended to `source`; may use `${pvc.metadata.name}`, `${pvc.metadata.namespace}` and `${pv.metadata.name}`, filled from `csi.storage.k8s.io/pvc/name`, `…/pvc/namespace`, `…/pv/name`. Created on the share when missing |
//! | secrets | `username`, `password`, `domain` | the mapping's credential: `DOMAIN\user` when a domain is given and the user name has neither `\` nor `@`; a UPN `user@fqdn` or `DOMAIN\user` stays as written. No default domain is invented. No username and no password: the mapping is made without a credential (the node's own identity) |
//! | volume_context | `requirePrivacy`, `requireIntegrity`, `useWriteThrough`, `compressNetworkTraffic`, `blockNTLM` (`true`/`false`), `transportType` (`tcp`/`quic`) | SMB client options of the share's mapping (`smb/options.rs`; the native backend only: the stage refuses them on csiProxy mode). Unset `requirePrivacy` follows `--smb-require-privacy` |
//! | volume_context | `authentication` | `password` (default: the secrets above) or `machine`: the share is mapped as the node's computer account, with no credential at all (a domain-joined node; the native backend only: the stage refuses it on csiProxy mode). With `machine` the secret must carry no `username`, `password` or `domain` |
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
//! | capability `mount_flags` (the PV's `mountOptions`), then the node-stage secret's `mount_flags` | comma-separated flags, the later overriding the earlier (democratic-csi's order); the account is `username=` (or `user=`), `password=` (or `pass=`) and `domain=` (or `dom=`, `workgroup=`), keys in any case (`crate::lifecycle::democratic::SMB_ACCOUNT_FLAGS`); other flags (`vers=3.0`, …) are ignored on Windows, as democratic-csi's Windows code ignores them |
//! | node-stage secret | `username`, `password`, `domain` | used only when no mount flag names a user or password (democratic-csi never reads them; with mount flags they are ignored) |
//!
//! The account logs on as `server\username` (index.js:1766-1770: a local account of the file server), or as
//! `domain\username` with a domain flag (what mount.cifs does with it on democratic-csi's Linux nodes); a user name that
//! already names its domain (`DOMAIN\user`, `user@domain`) is kept as written (democratic-csi would send
//! `server\DOMAIN\user`). So democratic-csi's own example PV (`examples/node-manual-smb-pv.yaml`: `mountOptions:
//! [username=foo, password=bar]`, no `nodeStageSecretRef`) stages as it is: a PV's secret reference is immutable, and
//! re-creating every such PV is what a user of a production driver would not expect. Its password then sits in the
//! PersistentVolume for anyone who can read PVs: the driver warns once per volume (and process) and never prints it
//! (the capability's `Debug` shows flag keys only; errors name keys, never values). Which source wins: the last
//! occurrence of a key across `mountOptions` then the secret's `mount_flags` (so the Secret overrides the PV, as in
//! democratic-csi); the secret's bare `username`/`password`/`domain` only when no flag names a user or password.
//! Without any account the mapping is made with the node's own identity (democratic-csi refuses: "username and
//! password required"). Volumes that are not democratic-csi's keep the strict rule: a credential in mount options is
//! refused (`crate::lifecycle::check_mount_flags_for`). `source` and `subDir` do not mix with `server`/`share`.
//!
//! On csiProxy mode whether the mapping requires SMB encryption (`RequirePrivacy`) is decided by csi-proxy's
//! `-require-privacy` flag (default true), not per volume: csi-proxy v1's `NewSmbGlobalMapping` has no such field.

use std::collections::BTreeMap;

use crate::error::Error;
use crate::host::{Secret, SmbCredential, SmbMappingOptions, UncPath, check_component};
use crate::lifecycle::democratic::{self, AttachDriver, SMB_ACCOUNT_FLAGS};
use crate::lifecycle::{
    AccessType, Secrets, StageRequest, check_mount_flags, context_get, is_credential_key,
};

/// A parsed SMB volume: where it lives and how to map it.
#[derive(Clone, Debug)]
pub struct SmbVolume {
    /// `source` as given (root plus optional path).
    pub source: UncPath,
    /// The resolved subDir components (templates filled in), possibly empty.
    pub sub_dir: Vec<String>,
    /// The credential, if any.
    pub credential: Option<SmbCredential>,
    /// `authentication: machine`: mapped as the node's computer account (no credential; native backend only).
    pub machine: bool,
    /// The SMB client options asked of the share's mapping (`requirePrivacy`, …; native backend only).
    pub options: SmbMappingOptions,
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

/// Parse the SMB volume a NodeStageVolume (or an inline publish) asks for: [`parse_volume`], plus the capability's
/// mount flags, where a democratic-csi volume may carry its account (the lifecycle has refused them for every other
/// volume already).
pub fn parse_stage(req: &StageRequest) -> Result<SmbVolume, Error> {
    let flags = match req.capability.as_ref().map(|c| &c.access_type) {
        Some(AccessType::Mount { mount_flags, .. }) => mount_flags.as_slice(),
        _ => &[],
    };
    parse(&req.volume_context, &req.secrets, flags, &req.volume_id)
}

/// Parse an SMB volume from `volume_context` and the node-stage `secrets` (no mount flags).
pub fn parse_volume(
    context: &BTreeMap<String, String>,
    secrets: &Secrets,
) -> Result<SmbVolume, Error> {
    parse(context, secrets, &[], "")
}

fn parse(
    context: &BTreeMap<String, String>,
    secrets: &Secrets,
    mount_flags: &[String],
    volume_id: &str,
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
        Some(AttachDriver::Smb) => {
            return democratic_volume(context, secrets, mount_flags, volume_id);
        }
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
    let machine = machine_authentication(context, secrets)?;
    Ok(SmbVolume {
        source,
        sub_dir,
        credential: if machine { None } else { credential(secrets)? },
        machine,
        options: super::options::parse(context)?,
    })
}

/// The volume context's `authentication`: `password` (default) or `machine`, which takes no credential in the secret
/// (a volume that says `machine` and carries an account is ambiguous: refused, naming the keys, never their values).
fn machine_authentication(
    context: &BTreeMap<String, String>,
    secrets: &Secrets,
) -> Result<bool, Error> {
    let Some(raw) = context_get(context, "authentication") else {
        return Ok(false);
    };
    match raw.trim().to_ascii_lowercase().as_str() {
        "" | "password" => Ok(false),
        "machine" => {
            let given: Vec<&str> = ["username", "password", "domain"]
                .into_iter()
                .filter(|k| {
                    secrets
                        .get(k)
                        .is_some_and(|v| !v.expose().trim().is_empty())
                })
                .collect();
            if given.is_empty() {
                Ok(true)
            } else {
                Err(Error::InvalidArgument(format!(
                    "volume_context authentication is machine (the node's computer account) but the node-stage \
                     secret has {}; rule: a machine-account volume carries no credential: remove the \
                     nodeStageSecretRef or the authentication key",
                    given.join(", ")
                )))
            }
        }
        other => Err(Error::InvalidArgument(format!(
            "volume_context authentication {other:?} is not known; rule: password (the node-stage secret's \
             account, the default) or machine (the node's computer account, hostProcess mode)"
        ))),
    }
}

/// A democratic-csi SMB volume (`node_attach_driver: smb`): `server` + `share[/path]`, the account from the mount flags
/// (the capability's, then the node-stage secret's `mount_flags`), else from the secret's `username`/`password`/`domain`
/// (see the module docs).
fn democratic_volume(
    context: &BTreeMap<String, String>,
    secrets: &Secrets,
    capability_flags: &[String],
    volume_id: &str,
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
    let flags = democratic::mount_flags(capability_flags, &secrets);
    let [users, passwords, domains] = SMB_ACCOUNT_FLAGS else {
        unreachable!("user, password, domain")
    };
    let user_flag = democratic::last_flag(&flags, users);
    let password_flag = democratic::last_flag(&flags, passwords);
    let domain_flag = democratic::last_flag(&flags, domains);
    let ignored: Vec<&str> = flags
        .iter()
        .map(|f| f.key.as_str())
        .filter(|k| !democratic::is_smb_account_flag(k))
        .collect();
    if !ignored.is_empty() {
        tracing::debug!(flags = ?ignored, "mount flags other than the account are ignored on Windows");
    }
    if flags
        .iter()
        .any(|f| f.from_capability && passwords.iter().any(|k| f.key.eq_ignore_ascii_case(k)))
    {
        warn_password_in_pv(volume_id);
    }
    let value = |f: Option<&democratic::MountFlag>| {
        f.and_then(|f| f.value.as_ref())
            .map(|v| v.expose().trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let (user, password, domain) = if user_flag.is_some() || password_flag.is_some() {
        let bare: Vec<&str> = ["username", "password", "domain"]
            .into_iter()
            .filter(|k| secrets.get(k).is_some())
            .collect();
        if !bare.is_empty() {
            tracing::info!(keys = ?bare, "the node-stage secret's keys are ignored: the account in the mount flags \
                           wins, as democratic-csi reads only mount flags");
        }
        (
            value(user_flag),
            password_flag
                .and_then(|f| f.value.clone())
                .filter(|p| !p.expose().is_empty()),
            value(domain_flag),
        )
    } else {
        let get = |k: &str| {
            secrets
                .get(k)
                .map(|s| s.expose().trim().to_owned())
                .filter(|s| !s.is_empty())
        };
        (
            get("username"),
            secrets
                .get("password")
                .filter(|p| !p.expose().trim().is_empty())
                .map(|p| Secret::new(p.expose().trim())),
            value(domain_flag).or_else(|| get("domain")),
        )
    };
    let credential = match (user, password) {
        (None, None) => {
            if domain.is_some() {
                return Err(Error::InvalidArgument(
                    "a democratic-csi SMB volume has a domain but no username; rule: give username= and password= \
                     (mountOptions or the node-stage secret's mount_flags)"
                        .to_owned(),
                ));
            }
            None
        }
        (Some(_), None) => {
            return Err(Error::InvalidArgument(
                "a democratic-csi SMB volume has username= but no password= (mountOptions and the node-stage \
                 secret's mount_flags); rule: give both"
                    .to_owned(),
            ));
        }
        (None, Some(_)) => {
            return Err(Error::InvalidArgument(
                "a democratic-csi SMB volume has password= but no username= (mountOptions and the node-stage \
                 secret's mount_flags); rule: give both"
                    .to_owned(),
            ));
        }
        (Some(user), Some(password)) => {
            check_user(&user, "a democratic-csi SMB volume's username")?;
            let principal = if user.contains(['\\', '@']) {
                user
            } else if let Some(domain) = domain {
                check_user(&domain, "a democratic-csi SMB volume's domain")?;
                format!("{domain}\\{user}")
            } else {
                format!("{}\\{user}", source.server())
            };
            Some(SmbCredential::new(principal, password))
        }
    };
    Ok(SmbVolume {
        source,
        sub_dir: Vec::new(),
        credential,
        machine: false,
        // A democratic-csi StorageClass's parameters reach the volume context too.
        options: super::options::parse(context)?,
    })
}

/// Once per volume (and process): the password of this volume is in its PersistentVolume's `mountOptions`.
fn warn_password_in_pv(volume_id: &str) {
    static WARNED: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::LazyLock::new(Default::default);
    let first = WARNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(volume_id.to_owned());
    if first {
        tracing::warn!(
            volume_id,
            "the SMB password of this democratic-csi volume is in its PersistentVolume's mountOptions, readable by \
             anyone who can read PersistentVolumes; put it in the node-stage Secret's mount_flags key instead \
             (democratic-csi reads it there too)"
        );
    }
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
            (secrets(&[("username", "k8s")]), "no password="),
            (
                secrets(&[("mount_flags", "domain=CORP")]),
                "a domain but no username",
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

    /// A NodeStageVolume of a democratic-csi SMB volume whose PV has `mount_flags` as its `mountOptions`.
    fn stage(volume_id: &str, flags: &[&str], s: Secrets) -> Result<SmbVolume, Error> {
        let req = StageRequest {
            volume_id: volume_id.to_owned(),
            capability: Some(crate::lifecycle::Capability {
                access_type: AccessType::Mount {
                    fs_type: "cifs".to_owned(),
                    mount_flags: flags.iter().map(|f| (*f).to_owned()).collect(),
                },
                access_mode: 5,
            }),
            volume_context: ctx(&[
                ("node_attach_driver", "smb"),
                ("server", "truenas.example"),
                ("share", "someshare"),
                ("provisioner_driver", "node-manual"),
            ]),
            secrets: s,
            ..StageRequest::default()
        };
        parse_stage(&req)
    }

    fn password(v: &SmbVolume) -> String {
        v.credential
            .as_ref()
            .map(|c| c.password().expose().to_owned())
            .unwrap_or_default()
    }

    #[test]
    fn democratic_csi_s_example_pv_stages_with_its_account_in_mount_options() {
        // examples/node-manual-smb-pv.yaml: mountOptions [username=foo, password=bar], no nodeStageSecretRef.
        let v = stage(
            "unique-volumeid",
            &["username=foo", "password=bar"],
            Secrets::default(),
        )
        .expect("stages");
        assert_eq!(v.principal(), Some(r"truenas.example\foo"));
        assert_eq!(password(&v), "bar");
        assert_eq!(v.full_path().to_string(), r"\\truenas.example\someshare");
        // One comma-separated option, and mount.cifs's spellings, keys in any case.
        let v = stage(
            "v2",
            &["vers=3.0,User=foo,PASS=bar,workgroup=CORP"],
            Secrets::default(),
        )
        .expect("ok");
        assert_eq!(v.principal(), Some(r"CORP\foo"));
        assert_eq!(password(&v), "bar");
        let v = stage(
            "v3",
            &["username=foo", "password=bar", "dom=CORP"],
            Secrets::default(),
        )
        .expect("ok");
        assert_eq!(v.principal(), Some(r"CORP\foo"));
    }

    #[test]
    fn the_secret_s_mount_flags_override_the_pv_s_and_bare_keys_only_fill_in() {
        // democratic-csi's order: the capability's flags, then the secret's mount_flags; the last occurrence wins.
        let s = secrets(&[("mount_flags", "password=from-secret")]);
        let v = stage("v", &["username=foo", "password=from-pv"], s).expect("ok");
        assert_eq!(v.principal(), Some(r"truenas.example\foo"));
        assert_eq!(password(&v), "from-secret");
        // With an account in the flags, the secret's bare keys are ignored (democratic-csi never reads them).
        let s = secrets(&[
            ("username", "other"),
            ("password", "other-pw"),
            ("domain", "D"),
        ]);
        let v = stage("v", &["username=foo", "password=bar"], s).expect("ok");
        assert_eq!(v.principal(), Some(r"truenas.example\foo"));
        assert_eq!(password(&v), "bar");
        // Without one, they are the account (prefixed democratic-csi keys included).
        let s = secrets(&[
            ("democratic-csi.org/username", "svc"),
            ("password", "pw"),
            ("domain", "CORP"),
        ]);
        let v = stage("v", &["vers=3.0"], s).expect("ok");
        assert_eq!(v.principal(), Some(r"CORP\svc"));
        assert_eq!(password(&v), "pw");
        let v = stage(
            "v",
            &[],
            secrets(&[("username", "svc"), ("password", "pw")]),
        )
        .expect("ok");
        assert_eq!(v.principal(), Some(r"truenas.example\svc"));
    }

    #[test]
    fn credentials_in_mount_options_stay_refused_for_other_volumes() {
        use crate::lifecycle::check_mount_flags_for;
        let flags = vec!["username=foo".to_owned(), "password=s3cr3t-opt".to_owned()];
        let dcsi = ctx(&[
            ("node_attach_driver", "smb"),
            ("server", "s"),
            ("share", "x"),
        ]);
        assert_eq!(
            check_mount_flags_for(&flags, &dcsi).expect("democratic-csi SMB"),
            Vec::<String>::new()
        );
        for other in [
            ctx(&[("source", r"\\s\x")]),
            ctx(&[("node_attach_driver", "iscsi"), ("portal", "192.0.2.1")]),
        ] {
            match check_mount_flags_for(&flags, &other) {
                Err(Error::InvalidArgument(m)) => {
                    assert!(!m.contains("s3cr3t-opt") && m.contains("username"))
                }
                x => panic!("{other:?}: {x:?}"),
            }
        }
        // Not an account spelling: refused for democratic-csi volumes too.
        for flag in ["credentials=/etc/creds", "passwd=x", "pwd=x"] {
            assert!(
                check_mount_flags_for(&[flag.to_owned()], &dcsi).is_err(),
                "{flag}"
            );
        }
        assert_eq!(
            check_mount_flags_for(&["vers=3.0,username=u".to_owned()], &dcsi).expect("ok"),
            vec!["vers"]
        );
    }

    #[test]
    fn mount_flag_values_never_print() {
        let cap = AccessType::Mount {
            fs_type: "cifs".to_owned(),
            mount_flags: vec![
                "username=foo,password=s3cr3t-opt".to_owned(),
                "vers=3.0".to_owned(),
            ],
        };
        let text = format!("{cap:?}");
        assert!(
            !text.contains("s3cr3t-opt") && !text.contains("3.0"),
            "{text}"
        );
        assert!(text.contains("password") && text.contains("vers"), "{text}");
        let v = stage(
            "v",
            &["username=foo", "password=s3cr3t-opt"],
            Secrets::default(),
        )
        .expect("ok");
        assert!(!format!("{v:?}").contains("s3cr3t-opt"));
        match stage("v", &["password=s3cr3t-opt"], Secrets::default()) {
            Err(Error::InvalidArgument(m)) => assert!(!m.contains("s3cr3t-opt"), "{m}"),
            x => panic!("{x:?}"),
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
