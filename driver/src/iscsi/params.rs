//! Parsing and validation of iSCSI volume attributes and secrets (csi-driver-iscsi compatible, and democratic-csi's).
//!
//! # democratic-csi volumes
//!
//! A volume context with `node_attach_driver: iscsi` is democratic-csi's (`crate::lifecycle::democratic`; citations
//! of democratic-csi `v1.9.4`). Its controllers write `portal` (`host[:port]`, possibly empty), `portals`
//! (comma-separated, possibly empty), `interface`, `iqn` and `lun` (`src/driver/freenas/api.js:1362-1371`,
//! `src/driver/controller-zfs-generic/index.js:314-323`); its node merges `portal` and `portals`, adds `:3260` where
//! no port is given and drops duplicates (`src/driver/index.js:1799-1820`), which [`parse_volume_for`] does too
//! (duplicates compared by address without ASCII case and by port). `interface` (an open-iscsi interface name) is
//! accepted and not used: democratic-csi's node never reads it (no use in `src/driver/index.js` at `v1.9.4`), and a
//! Windows login goes through the initiator's default path.
//!
//! CHAP comes from the node-stage secret, its keys prefix-stripped like democratic-csi's
//! (`democratic::normalized_secrets`): `node-db.node.session.auth.authmethod` `CHAP` asks for CHAP with
//! `node-db.node.session.auth.username` / `.password` (one-way), and with `.password_in` too, mutual CHAP, whose
//! `.password_in` becomes the initiator's node-wide mutual secret (democratic-csi decides mutual only when
//! `.username_in` is also given and then never sets the initiator's secret, index.js:1866-1912; Windows has no
//! initiator-side CHAP name to set, so `.username_in` is not needed here). Without `authmethod` `CHAP` the login has no
//! CHAP, as democratic-csi's (and open-iscsi's default `None`), even when a user name is in the secret. Stricter
//! than democratic-csi, for a reason: `authmethod` `CHAP` without both user name and secret is refused (democratic-csi
//! silently logs in without CHAP), an `authmethod` other than `CHAP` or `None` is refused, and the CHAP secrets must
//! have 12 to 16 characters (Windows' rule, checked before any host call). Other `node-db.*` keys are open-iscsi node
//! settings with no Windows equivalent and are ignored. `targetPortal` and the csi-driver-iscsi CHAP switches do not
//! mix with `node_attach_driver`.

use std::collections::BTreeMap;

use crate::error::Error;
use crate::host::{HostCapabilities, IscsiAuth, Portal, Secret};
use crate::lifecycle::democratic::{self, is_democratic_iscsi};
use crate::lifecycle::{Secrets, context_get};

/// The highest LUN accepted. Windows addresses a disk through `SCSI_ADDRESS`, whose `Lun` field is a `UCHAR`: the
/// Microsoft iSCSI initiator (and `MSFT_Disk.Location`, which `ListDiskLocations` parses) cannot present a LUN above
/// 255, so a larger number could never be found and is refused up front.
pub const MAX_LUN: u32 = 255;

/// Windows' CHAP secret length rule (bytes) when IPsec is not used.
pub const CHAP_SECRET_LEN: std::ops::RangeInclusive<usize> = 12..=16;

/// A validated iSCSI volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IscsiVolume {
    /// The portals, de-duplicated, `targetPortal` first.
    pub portals: Vec<Portal>,
    /// Target IQN / EUI / NAA name as given.
    pub iqn: String,
    /// LUN.
    pub lun: u32,
    /// Login authentication.
    pub auth: IscsiAuth,
    /// The initiator's mutual CHAP secret (`node.session.auth.password_in`), set before a mutual login.
    pub mutual_secret: Option<Secret>,
    /// Identity hint: the disk's SCSI page 0x83 identifier.
    pub page83: Option<String>,
    /// Identity hint: the disk's serial number.
    pub serial: Option<String>,
    /// Discovery CHAP for the portals (`discoveryCHAPAuth` + `node.sendtargets.auth.*`; backends with
    /// `HostCapabilities::discovery_chap` only).
    pub discovery: IscsiAuth,
    /// Log in persistently (`persistentLogin: "true"`; backends with `HostCapabilities::persistent_logins` only).
    pub persistent: bool,
    /// The volume is staged for reading only (a reader-only access mode): the disk's read-only flag is kept.
    pub read_only: bool,
    /// Log in through every portal with Multipath I/O: several portals on a backend with
    /// `HostCapabilities::multipath` (native; `multipath.rs`). csi-proxy logs in once.
    pub multipath: bool,
}

/// Whether `context` describes an iSCSI volume: democratic-csi's `node_attach_driver: iscsi`, or (without a
/// `node_attach_driver`) csi-driver-iscsi's keys.
pub fn is_iscsi(context: &BTreeMap<String, String>) -> bool {
    if context_get(context, democratic::ATTACH_DRIVER_KEY).is_some() {
        return is_democratic_iscsi(context);
    }
    ["iqn", "targetPortal", "portals"]
        .iter()
        .any(|k| context_get(context, k).is_some())
}

/// Validate an iSCSI name (RFC 3720 / 3721): `iqn.yyyy-mm.reversed.domain[:anything]`, `eui.` + 16 hex digits or
/// `naa.` + 16 or 32 hex digits; at most 223 bytes.
pub fn check_iqn(iqn: &str) -> Result<(), Error> {
    let bad = |rule: &str| {
        Error::InvalidArgument(format!(
            "volume attribute iqn {iqn:?} is not a valid iSCSI name: {rule}"
        ))
    };
    if iqn.len() > 223 {
        return Err(bad("it is longer than 223 bytes"));
    }
    let lower = iqn.to_ascii_lowercase();
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    if let Some(rest) = lower.strip_prefix("iqn.") {
        // Compared byte-wise: slicing the text could split a multi-byte character and panic.
        let b = rest.as_bytes();
        let date_ok = b.len() > 8
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[5..7].iter().all(u8::is_ascii_digit)
            && b[7] == b'.';
        if !date_ok {
            return Err(bad(
                "an iqn. name continues with the date yyyy-mm. and a reversed domain name",
            ));
        }
        if !lower
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
        {
            return Err(bad("only letters, digits, '.', '-' and ':' are allowed"));
        }
        Ok(())
    } else if let Some(rest) = lower.strip_prefix("eui.") {
        if rest.len() == 16 && hex(rest) {
            Ok(())
        } else {
            Err(bad("an eui. name has exactly 16 hex digits"))
        }
    } else if let Some(rest) = lower.strip_prefix("naa.") {
        if (rest.len() == 16 || rest.len() == 32) && hex(rest) {
            Ok(())
        } else {
            Err(bad("a naa. name has 16 or 32 hex digits"))
        }
    } else {
        Err(bad("it must start with iqn., eui. or naa."))
    }
}

fn flag(context: &BTreeMap<String, String>, key: &str) -> Result<Option<bool>, Error> {
    match context_get(context, key).map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(v) => Err(Error::InvalidArgument(format!(
            "volume attribute {key} must be \"true\" or \"false\", not {v:?}"
        ))),
    }
}

/// Whether a volume_context key looks like it carries a credential (they belong in the secrets map only).
fn is_credential_key(key: &str) -> bool {
    let k = key.trim().to_ascii_lowercase();
    if k.starts_with("node.session.auth.") || k.starts_with("node.sendtargets.auth.") {
        return true;
    }
    let last = k.rsplit(['/', '.']).next().unwrap_or(&k);
    matches!(
        last,
        "secret"
            | "chapsecret"
            | "password"
            | "password_in"
            | "passwd"
            | "chap_secret"
            | "mutualchapsecret"
    )
}

fn check_secret(secret: &Secret, key: &str) -> Result<(), Error> {
    let n = secret.expose().len();
    if CHAP_SECRET_LEN.contains(&n) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "secret {key} has {n} characters; Windows requires a CHAP secret of 12 to 16 characters"
        )))
    }
}

/// Refuse a file system other than NTFS, saying which backend could provide it.
pub fn check_fs_type(fs_type: &str) -> Result<(), Error> {
    let fs = fs_type.trim();
    if fs.is_empty() || fs.eq_ignore_ascii_case("ntfs") {
        return Ok(());
    }
    let hint = if fs.eq_ignore_ascii_case("refs") {
        "ReFS needs a backend that can pass a file system to Format-Volume (a HostProcess backend); csi-proxy v1's \
         FormatVolume always formats NTFS"
    } else {
        "it is not a Windows file system; use a Linux node with csi-driver-iscsi for it"
    };
    Err(Error::InvalidArgument(format!(
        "fsType {fs:?} is not supported on this backend (csi-proxy formats NTFS only): {hint}"
    )))
}

/// Parse and validate an iSCSI volume from `volume_context` and the node-stage `secrets`.
pub fn parse_volume(
    context: &BTreeMap<String, String>,
    secrets: &Secrets,
) -> Result<IscsiVolume, Error> {
    parse_volume_for(context, secrets, HostCapabilities::default())
}

/// [`parse_volume`] for a host backend that can do what `caps` says (discovery CHAP, persistent logins); what it
/// cannot do is refused as before (FailedPrecondition naming the backend that can).
pub fn parse_volume_for(
    context: &BTreeMap<String, String>,
    secrets: &Secrets,
    caps: HostCapabilities,
) -> Result<IscsiVolume, Error> {
    for key in context.keys() {
        if is_credential_key(key) {
            return Err(Error::InvalidArgument(format!(
                "volume attribute {key:?} carries a credential; rule: CHAP user names and secrets go in the \
                 node-stage secret (node.session.auth.*), never in volume attributes"
            )));
        }
    }
    if let Some(fs) = context_get(context, "fsType") {
        check_fs_type(fs)?;
    }
    let democratic = is_democratic_iscsi(context);
    if democratic {
        for key in ["targetPortal", "sessionCHAPAuth", "discoveryCHAPAuth"] {
            if context_get(context, key).is_some() {
                return Err(Error::InvalidArgument(format!(
                    "volume attribute {key} does not go with node_attach_driver iscsi; rule: a democratic-csi volume \
                     names its portals with portal and portals, and its CHAP in the node-stage secret \
                     (node-db.node.session.auth.*)"
                )));
            }
        }
    }
    let iqn = context_get(context, "iqn").map(str::trim).unwrap_or("");
    if iqn.is_empty() {
        return Err(Error::InvalidArgument(
            "volume attribute iqn is required for an iSCSI volume".to_owned(),
        ));
    }
    check_iqn(iqn)?;
    let lun_text = context_get(context, "lun").map(str::trim).unwrap_or("");
    if lun_text.is_empty() {
        return Err(Error::InvalidArgument(
            "volume attribute lun is required for an iSCSI volume".to_owned(),
        ));
    }
    let lun = match lun_text.parse::<u32>() {
        Ok(n) if n <= MAX_LUN => n,
        _ => {
            return Err(Error::InvalidArgument(format!(
                "volume attribute lun {lun_text:?} must be a number from 0 to {MAX_LUN} (Windows addresses LUNs \
                 with one byte)"
            )));
        }
    };
    let mut portals: Vec<Portal> = Vec::new();
    let mut push = |p: Portal| {
        if !portals
            .iter()
            .any(|q| q.address.eq_ignore_ascii_case(&p.address) && q.port == p.port)
        {
            portals.push(p);
        }
    };
    if democratic {
        if let Some(p) = context_get(context, "portal").filter(|v| !v.trim().is_empty()) {
            push(Portal::parse(p, "portal")?);
        }
        for item in context_get(context, "portals")
            .unwrap_or_default()
            .split(',')
            .filter(|i| !i.trim().is_empty())
        {
            push(Portal::parse(item, "portals")?);
        }
    } else if let Some(tp) = context_get(context, "targetPortal").filter(|v| !v.trim().is_empty()) {
        push(Portal::parse(tp, "targetPortal")?);
    }
    if let Some(list) = context_get(context, "portals")
        .map(str::trim)
        .filter(|v| !democratic && !v.is_empty())
    {
        let items: Vec<String> = if list.starts_with("[\"") || list == "[]" {
            serde_json::from_str(list).map_err(|e| {
                Error::InvalidArgument(format!(
                    "volume attribute portals is not a JSON array of strings: {e}"
                ))
            })?
        } else {
            list.split(',').map(str::to_owned).collect()
        };
        for item in items.iter().filter(|i| !i.trim().is_empty()) {
            push(Portal::parse(item, "portals")?);
        }
    }
    if portals.is_empty() {
        return Err(Error::InvalidArgument(if democratic {
            "volume attribute portal (or portals) is required for a democratic-csi iSCSI volume"
                .to_owned()
        } else {
            "volume attribute targetPortal (or portals) is required for an iSCSI volume".to_owned()
        }));
    }
    if democratic {
        let persistent = flag(context, "persistentLogin")? == Some(true);
        if persistent && !caps.persistent_logins {
            return Err(persistent_refused());
        }
        let (auth, mutual_secret) =
            democratic_auth(&democratic::normalized_secrets(secrets, context))?;
        let multipath = portals.len() > 1 && caps.multipath;
        return Ok(IscsiVolume {
            portals,
            iqn: iqn.to_owned(),
            lun,
            auth,
            mutual_secret,
            page83: None,
            serial: None,
            discovery: IscsiAuth::None,
            multipath,
            persistent,
            read_only: false,
        });
    }
    let discovery_keys = ["username", "password", "username_in", "password_in"]
        .iter()
        .any(|k| secrets.get(&format!("node.sendtargets.auth.{k}")).is_some());
    let discovery = if flag(context, "discoveryCHAPAuth")? == Some(true) || discovery_keys {
        if !caps.discovery_chap {
            return Err(Error::FailedPrecondition(
                "discovery CHAP (discoveryCHAPAuth / node.sendtargets.auth.*) cannot be used: csi-proxy's \
                 AddTargetPortal carries no credentials. Use the native backend (--host-backend native, chart \
                 mode hostProcess), or add the portal on the node with its discovery credentials \
                 (New-IscsiTargetPortal -AuthenticationType ONEWAYCHAP ...) and set discoveryCHAPAuth to false"
                    .to_owned(),
            ));
        }
        discovery_auth(secrets)?
    } else {
        IscsiAuth::None
    };
    let persistent = flag(context, "persistentLogin")? == Some(true);
    if persistent && !caps.persistent_logins {
        return Err(persistent_refused());
    }
    let user = secrets
        .get("node.session.auth.username")
        .map(|s| s.expose().trim().to_owned())
        .filter(|s| !s.is_empty());
    let pass = secrets.get("node.session.auth.password").cloned();
    let pass_in = secrets.get("node.session.auth.password_in").cloned();
    let session_chap = flag(context, "sessionCHAPAuth")?;
    let want_chap = session_chap.unwrap_or(user.is_some() || pass.is_some());
    let (auth, mutual_secret) = if want_chap {
        let (Some(username), Some(secret)) = (user, pass) else {
            return Err(Error::InvalidArgument(
                "session CHAP needs the node-stage secret keys node.session.auth.username and \
                 node.session.auth.password"
                    .to_owned(),
            ));
        };
        check_secret(&secret, "node.session.auth.password")?;
        match pass_in {
            Some(mutual) => {
                check_secret(&mutual, "node.session.auth.password_in")?;
                (IscsiAuth::Mutual { username, secret }, Some(mutual))
            }
            None => (IscsiAuth::OneWay { username, secret }, None),
        }
    } else {
        if pass_in.is_some() {
            return Err(Error::InvalidArgument(
                "node.session.auth.password_in (mutual CHAP) needs session CHAP: set sessionCHAPAuth to true and \
                 give node.session.auth.username and node.session.auth.password"
                    .to_owned(),
            ));
        }
        (IscsiAuth::None, None)
    };
    let hint = |k: &str| {
        context_get(context, k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let multipath = portals.len() > 1 && caps.multipath;
    Ok(IscsiVolume {
        portals,
        iqn: iqn.to_owned(),
        lun,
        auth,
        mutual_secret,
        page83: hint("page83"),
        serial: hint("serial"),
        discovery,
        multipath,
        persistent,
        read_only: false,
    })
}

fn persistent_refused() -> Error {
    Error::FailedPrecondition(
        "persistentLogin: csi-proxy always logs in non-persistently; persistent iSCSI logins need the native backend \
         (--host-backend native, chart mode hostProcess)"
            .to_owned(),
    )
}

/// Session CHAP of a democratic-csi volume from its (normalised) node-stage secret (see the module docs).
fn democratic_auth(secrets: &Secrets) -> Result<(IscsiAuth, Option<Secret>), Error> {
    const AUTH: &str = "node-db.node.session.auth.";
    let get = |k: &str| secrets.get(&format!("{AUTH}{k}"));
    let method = get("authmethod").map(|m| m.expose().trim().to_owned());
    match method.as_deref() {
        None | Some("") => {}
        Some(m) if m.eq_ignore_ascii_case("none") => {}
        Some(m) if m.eq_ignore_ascii_case("chap") => {
            let username = get("username")
                .map(|s| s.expose().trim().to_owned())
                .filter(|s| !s.is_empty());
            let (Some(username), Some(secret)) = (username, get("password").cloned()) else {
                return Err(Error::InvalidArgument(
                    "node-stage secret has node-db.node.session.auth.authmethod CHAP but not both \
                     node-db.node.session.auth.username and node-db.node.session.auth.password"
                        .to_owned(),
                ));
            };
            check_secret(&secret, "node-db.node.session.auth.password")?;
            return match get("password_in").cloned() {
                Some(mutual) => {
                    check_secret(&mutual, "node-db.node.session.auth.password_in")?;
                    Ok((IscsiAuth::Mutual { username, secret }, Some(mutual)))
                }
                None => Ok((IscsiAuth::OneWay { username, secret }, None)),
            };
        }
        Some(m) => {
            return Err(Error::InvalidArgument(format!(
                "node-stage secret node-db.node.session.auth.authmethod is {}; rule: CHAP or None",
                crate::error::quote_short(m)
            )));
        }
    }
    if ["username", "password", "username_in", "password_in"]
        .iter()
        .any(|k| get(k).is_some())
    {
        tracing::info!(
            "the node-stage secret has node-db.node.session.auth credentials but no authmethod CHAP: logging in \
             without CHAP, as democratic-csi does"
        );
    }
    Ok((IscsiAuth::None, None))
}

/// One-way discovery CHAP from `node.sendtargets.auth.username` / `.password` (Windows has no mutual discovery
/// CHAP through `MSFT_iSCSITargetPortal.New`).
fn discovery_auth(secrets: &Secrets) -> Result<IscsiAuth, Error> {
    if secrets.get("node.sendtargets.auth.password_in").is_some() {
        return Err(Error::InvalidArgument(
            "node.sendtargets.auth.password_in: mutual discovery CHAP is not supported on Windows; give \
             node.sendtargets.auth.username and node.sendtargets.auth.password only"
                .to_owned(),
        ));
    }
    let username = secrets
        .get("node.sendtargets.auth.username")
        .map(|s| s.expose().trim().to_owned())
        .filter(|s| !s.is_empty());
    let (Some(username), Some(secret)) = (
        username,
        secrets.get("node.sendtargets.auth.password").cloned(),
    ) else {
        return Err(Error::InvalidArgument(
            "discovery CHAP needs the node-stage secret keys node.sendtargets.auth.username and \
             node.sendtargets.auth.password"
                .to_owned(),
        ));
    };
    check_secret(&secret, "node.sendtargets.auth.password")?;
    Ok(IscsiAuth::OneWay { username, secret })
}

#[cfg(test)]
mod democratic_tests {
    use super::*;

    fn ctx(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// A volume as democratic-csi's iSCSI controllers write it (`freenas/api.js:1362-1371`: `lun` is the number 0,
    /// a string in the CSI map), with the keys the controller adds.
    fn volume(portal: &str, portals: &str) -> BTreeMap<String, String> {
        ctx(&[
            ("node_attach_driver", "iscsi"),
            ("portal", portal),
            ("portals", portals),
            ("interface", ""),
            ("iqn", "iqn.2005-10.org.freenas.ctl:pvc-1"),
            ("lun", "0"),
            ("provisioner_driver", "freenas-api-iscsi"),
            ("provisioner_driver_instance_id", "nas-1"),
        ])
    }

    fn parse(c: &BTreeMap<String, String>, s: &[(&str, &str)]) -> Result<IscsiVolume, Error> {
        parse_volume(c, &Secrets::new(s.iter().copied()))
    }

    fn invalid(r: Result<IscsiVolume, Error>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    const USER: &str = "node-db.node.session.auth.username";
    const PASS: &str = "node-db.node.session.auth.password";
    const METHOD: &str = "node-db.node.session.auth.authmethod";

    #[test]
    fn portals_merge_with_the_default_port_and_without_duplicates() {
        assert!(is_iscsi(&volume("10.0.0.5:3260", "")));
        // Served by iSCSI even without any csi-driver-iscsi key, and never for another node_attach_driver.
        assert!(is_iscsi(&ctx(&[("node_attach_driver", "ISCSI")])));
        assert!(!is_iscsi(&ctx(&[
            ("node_attach_driver", "smb"),
            ("iqn", "iqn.2005-10.x:y")
        ])));
        let v = parse(
            &volume(
                "10.0.0.5",
                "10.0.0.5:3260, 10.0.0.6,TrueNAS.example:3261,truenas.EXAMPLE:3261",
            ),
            &[],
        )
        .expect("ok");
        let got: Vec<String> = v
            .portals
            .iter()
            .map(|p| format!("{}:{}", p.address, p.port))
            .collect();
        assert_eq!(
            got,
            ["10.0.0.5:3260", "10.0.0.6:3260", "TrueNAS.example:3261"]
        );
        assert_eq!(
            (v.iqn.as_str(), v.lun),
            ("iqn.2005-10.org.freenas.ctl:pvc-1", 0)
        );
        assert_eq!(v.auth, IscsiAuth::None);
        // portal alone, portals alone.
        assert_eq!(
            parse(&volume("", "10.0.0.7"), &[])
                .expect("ok")
                .portals
                .len(),
            1
        );
        assert_eq!(
            parse(&volume("10.0.0.7:3260", ""), &[])
                .expect("ok")
                .portals
                .len(),
            1
        );
        assert!(invalid(parse(&volume("", ""), &[])).contains("portal (or portals)"));
        assert!(invalid(parse(&volume("10.0.0.5:x", ""), &[])).contains("port"));
        let mut c = volume("10.0.0.5", "");
        c.insert("targetPortal".into(), "10.0.0.5".into());
        assert!(invalid(parse(&c, &[])).contains("targetPortal"));
        c.remove("targetPortal");
        c.insert("lun".into(), "256".into());
        assert!(invalid(parse(&c, &[])).contains("lun"));
    }

    #[test]
    fn chap_from_the_prefixed_node_db_keys() {
        let c = volume("10.0.0.5", "");
        let v = parse(
            &c,
            &[
                (
                    "democratic-csi.org/nas-1/node-db.node.session.auth.authmethod",
                    "CHAP",
                ),
                (
                    "democratic-csi.org/freenas-api-iscsi/node-db.node.session.auth.username",
                    "initiator",
                ),
                (
                    "democratic-csi.org/node-db.node.session.auth.password",
                    "twelve-chars",
                ),
            ],
        )
        .expect("ok");
        match &v.auth {
            IscsiAuth::OneWay { username, secret } => {
                assert_eq!(
                    (username.as_str(), secret.expose()),
                    ("initiator", "twelve-chars")
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(v.mutual_secret.is_none());
        let v = parse(
            &c,
            &[
                (METHOD, "chap"),
                (USER, "initiator"),
                (PASS, "twelve-chars"),
                ("node-db.node.session.auth.username_in", "target"),
                ("node-db.node.session.auth.password_in", "mutual-secret"),
            ],
        )
        .expect("ok");
        assert!(matches!(v.auth, IscsiAuth::Mutual { .. }), "{:?}", v.auth);
        assert_eq!(
            v.mutual_secret.as_ref().map(Secret::expose),
            Some("mutual-secret")
        );
        // No authmethod CHAP: no CHAP, as democratic-csi logs in.
        let v = parse(&c, &[(USER, "initiator"), (PASS, "twelve-chars")]).expect("ok");
        assert_eq!(v.auth, IscsiAuth::None);
        let v = parse(
            &c,
            &[
                (METHOD, "None"),
                (USER, "initiator"),
                (PASS, "twelve-chars"),
            ],
        )
        .expect("ok");
        assert_eq!(v.auth, IscsiAuth::None);
    }

    #[test]
    fn chap_rules_stricter_than_democratic_csi_and_never_echo_a_secret() {
        let c = volume("10.0.0.5", "");
        for (s, want) in [
            (vec![(METHOD, "CHAP"), (USER, "initiator")], "not both"),
            (vec![(METHOD, "CHAP"), (PASS, "twelve-chars")], "not both"),
            (
                vec![(METHOD, "Kerberos"), (USER, "u"), (PASS, "twelve-chars")],
                "CHAP or None",
            ),
            (
                vec![(METHOD, "CHAP"), (USER, "u"), (PASS, "short-pw")],
                "12 to 16",
            ),
            (
                vec![
                    (METHOD, "CHAP"),
                    (USER, "u"),
                    (PASS, "twelve-chars"),
                    ("node-db.node.session.auth.password_in", "tiny"),
                ],
                "12 to 16",
            ),
        ] {
            let m = invalid(parse(&c, &s));
            assert!(m.contains(want), "{m}");
            for (key, value) in &s {
                if key.contains("password") {
                    assert!(!m.contains(value), "{m}");
                }
            }
        }
        // CHAP material in the volume context is refused, whatever its spelling.
        let mut c = volume("10.0.0.5", "");
        c.insert(PASS.into(), "twelve-chars".into());
        assert!(invalid(parse(&c, &[])).contains("carries a credential"));
    }
}
