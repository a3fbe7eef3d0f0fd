//! Parsing and validation of iSCSI volume attributes and secrets (csi-driver-iscsi compatible).

use std::collections::BTreeMap;

use crate::error::Error;
use crate::host::{HostCapabilities, IscsiAuth, Portal, Secret};
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
}

/// Whether `context` describes an iSCSI volume (csi-driver-iscsi's keys).
pub fn is_iscsi(context: &BTreeMap<String, String>) -> bool {
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
    if let Some(tp) = context_get(context, "targetPortal").filter(|v| !v.trim().is_empty()) {
        push(Portal::parse(tp, "targetPortal")?);
    }
    if let Some(list) = context_get(context, "portals")
        .map(str::trim)
        .filter(|v| !v.is_empty())
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
        return Err(Error::InvalidArgument(
            "volume attribute targetPortal (or portals) is required for an iSCSI volume".to_owned(),
        ));
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
        return Err(Error::FailedPrecondition(
            "persistentLogin: csi-proxy always logs in non-persistently; persistent iSCSI logins need the native \
             backend (--host-backend native, chart mode hostProcess)"
                .to_owned(),
        ));
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
    Ok(IscsiVolume {
        portals,
        iqn: iqn.to_owned(),
        lun,
        auth,
        mutual_secret,
        page83: hint("page83"),
        serial: hint("serial"),
        discovery,
        persistent,
        read_only: false,
    })
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
