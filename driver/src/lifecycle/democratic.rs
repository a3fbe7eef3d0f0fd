//! Volumes made by [democratic-csi](https://github.com/democratic-csi/democratic-csi)'s controllers (TrueNAS/ZFS
//! over iSCSI and SMB): what their volume contexts and node-stage secrets say, read the way democratic-csi's own node
//! reads them, so that wincsi can be the Windows node plugin of a democratic-csi release. The protocols use these
//! helpers (`crate::smb::params`, `crate::iscsi::params`); this module knows no protocol.
//!
//! Read from democratic-csi at tag `v1.9.4` (`src/driver/index.js`, "index.js" below):
//!
//! * A volume context with a `node_attach_driver` key is democratic-csi's: its controllers write it into every volume
//!   they create (`src/driver/freenas/api.js:659`, `:1363`; `src/driver/controller-zfs-generic/index.js:175`,
//!   `:315`; `src/driver/controller-smb-client/index.js:20`). Its Windows node accepts `smb`, `iscsi` and `hostpath`
//!   and refuses the rest with UNIMPLEMENTED (index.js:1698-1705); wincsi serves `smb` and `iscsi` and refuses
//!   every other value with INVALID_ARGUMENT before any host call ([`attach_driver`]).
//! * The node-stage secret's keys may carry a prefix naming the controller that wrote them: `democratic-csi.org/`,
//!   `democratic-csi.org/<provisioner_driver>/` or `democratic-csi.org/<provisioner_driver_instance_id>/`, stripped
//!   before use (`getNormalizedParameters`, index.js:74-105, called with the volume context's `provisioner_driver`
//!   and `provisioner_driver_instance_id` at index.js:717-721; the controllers add those keys at
//!   `src/driver/controller-zfs/index.js:1230-1233` and `src/driver/controller-client-common/index.js:811-814`). Its
//!   docstring (index.js:56-64) gives the order instance id, then driver, then the bare key; the code overwrites in
//!   the secret map's iteration order, so when two spellings of one key disagree the result depends on that order.
//!   [`normalized_secrets`] applies the documented order deterministically: instance id, driver,
//!   `democratic-csi.org/`, then the bare key.
//! * Mount flags are gathered from the capability's `mount_flags`, the node's own configuration
//!   (`node.mount.mount_flags`) and the secret's `mount_flags` key (comma-separated), in that order
//!   (index.js:731-744), and a flag's value is that of its last occurrence (`getMountFlagValue`, index.js:241-248).
//!   Its Windows node reads the SMB account there, as `username=` and `password=` (index.js:1721-1727, logged on as
//!   `server\username`: index.js:1766-1770); its Linux node hands every flag to `mount -t cifs -o` (index.js:1546-1547,
//!   1601-1604), so mount.cifs's own spellings work there too: `user=` for `username=`, `pass=` for `password=`,
//!   `domain=`, `dom=` or `workgroup=` for the domain (mount.cifs(8)). democratic-csi's example PV
//!   (`examples/node-manual-smb-pv.yaml`) puts the account in the PV's `mountOptions` with no `nodeStageSecretRef`,
//!   and a PV's secret reference is immutable, so wincsi reads a democratic-csi SMB volume's account where
//!   democratic-csi does: [`mount_flags`] merges the capability's flags (each split at commas, as `mount -o` joins
//!   them) and the secret's, in that order, [`last_flag_value`] takes the last occurrence of any spelling
//!   ([`SMB_ACCOUNT_FLAGS`]). Any other credential in mount flags, and every credential in the mount flags of a volume
//!   that is not a democratic-csi SMB volume, is refused by the lifecycle (`check_mount_flags_for`). wincsi has no
//!   node configuration file.
//!
//! The protocol keys (`server`/`share`, `portal`/`portals`/`iqn`/`lun`/`interface`, the CHAP keys under
//! `node-db.node.session.auth.*`) are each protocol's, in their `params` modules.

use std::collections::BTreeMap;

use super::request::{Secrets, context_get};
use crate::error::Error;
use crate::host::Secret;

/// The volume context key democratic-csi's controllers write into every volume.
pub const ATTACH_DRIVER_KEY: &str = "node_attach_driver";

/// The prefix of democratic-csi's namespaced secret keys.
const PREFIX: &str = "democratic-csi.org/";

/// What a democratic-csi volume context asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachDriver {
    /// `node_attach_driver: smb` (`server`, `share`).
    Smb,
    /// `node_attach_driver: iscsi` (`portal`, `portals`, `iqn`, `lun`).
    Iscsi,
}

/// The volume's `node_attach_driver`: `None` when the context is not democratic-csi's (no such key), the protocol
/// for `smb` and `iscsi` (ASCII case ignored), INVALID_ARGUMENT naming the value for anything else (`nfs`,
/// `hostpath`, `nvmeof`, `lustre`, …: Windows nodes cannot attach those, and no host call is made).
pub fn attach_driver(context: &BTreeMap<String, String>) -> Result<Option<AttachDriver>, Error> {
    let Some(value) = context_get(context, ATTACH_DRIVER_KEY) else {
        return Ok(None);
    };
    let v = value.trim();
    if v.eq_ignore_ascii_case("smb") {
        Ok(Some(AttachDriver::Smb))
    } else if v.eq_ignore_ascii_case("iscsi") {
        Ok(Some(AttachDriver::Iscsi))
    } else {
        Err(Error::InvalidArgument(format!(
            "volume_context {ATTACH_DRIVER_KEY} is {}: a Windows node attaches only democratic-csi's smb and iscsi \
             volumes; schedule pods using this volume on Linux nodes (democratic-csi's own node plugin)",
            crate::error::quote_short(value)
        )))
    }
}

/// Whether the volume context names an iSCSI volume of democratic-csi (`node_attach_driver: iscsi`).
pub fn is_democratic_iscsi(context: &BTreeMap<String, String>) -> bool {
    matches!(attach_driver(context), Ok(Some(AttachDriver::Iscsi)))
}

/// The node-stage secrets with democratic-csi's key prefixes stripped (`getNormalizedParameters`): a key
/// `democratic-csi.org/<instance id>/K`, `democratic-csi.org/<driver>/K` or `democratic-csi.org/K` becomes `K`, the
/// instance id and driver being the context's `provisioner_driver_instance_id` and `provisioner_driver`. When
/// several spellings of one key are given, the first of that order wins, then the bare `K`. Keys compare without
/// ASCII case, like every secret key wincsi reads.
pub fn normalized_secrets(secrets: &Secrets, context: &BTreeMap<String, String>) -> Secrets {
    let nonempty = |k: &str| {
        context_get(context, k)
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    // Most specific first: a lower rank wins.
    let mut prefixes: Vec<String> = Vec::new();
    if let Some(id) = nonempty("provisioner_driver_instance_id") {
        prefixes.push(format!("{PREFIX}{id}/"));
    }
    if let Some(driver) = nonempty("provisioner_driver") {
        prefixes.push(format!("{PREFIX}{driver}/"));
    }
    prefixes.push(PREFIX.to_owned());
    let mut best: BTreeMap<String, (usize, String, Secret)> = BTreeMap::new();
    for (key, value) in secrets.iter() {
        let (rank, bare) = prefixes
            .iter()
            .enumerate()
            .find_map(|(rank, p)| strip_prefix_ignore_case(key, p).map(|rest| (rank, rest)))
            .unwrap_or((prefixes.len(), key));
        if bare.is_empty() {
            continue;
        }
        let slot = bare.to_ascii_lowercase();
        if best.get(&slot).is_none_or(|(r, ..)| rank < *r) {
            best.insert(slot, (rank, bare.to_owned(), value.clone()));
        }
    }
    Secrets::from_secrets(best.into_values().map(|(_, k, v)| (k, v)))
}

fn strip_prefix_ignore_case<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    let head = key.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &key[prefix.len()..])
}

/// The mount-flag spellings of a democratic-csi SMB volume's account: what its Windows node reads (`username`,
/// `password`) and what its Linux node's mount.cifs also takes (`user`, `pass`; `domain`, `dom`, `workgroup`).
pub const SMB_ACCOUNT_FLAGS: &[&[&str]] = &[
    &["username", "user"],
    &["password", "pass"],
    &["domain", "dom", "workgroup"],
];

/// Whether `key` (trimmed, any ASCII case) is one of [`SMB_ACCOUNT_FLAGS`].
pub fn is_smb_account_flag(key: &str) -> bool {
    let key = key.trim();
    SMB_ACCOUNT_FLAGS
        .iter()
        .flat_map(|spellings| spellings.iter())
        .any(|k| key.eq_ignore_ascii_case(k))
}

/// One mount flag of a democratic-csi volume: from the capability (a PV's or StorageClass's `mountOptions`) or from
/// the node-stage secret's `mount_flags` key.
#[derive(Clone)]
pub struct MountFlag {
    /// The flag's name (before the first `=`), trimmed.
    pub key: String,
    /// Everything after the first `=` (democratic-csi's `split("=", 2)` would cut a value at a second `=`; wincsi
    /// keeps the whole value), `None` for a flag without `=`.
    pub value: Option<Secret>,
    /// It came from the capability's `mount_flags`, i.e. it sits in the PersistentVolume for anyone who reads PVs.
    pub from_capability: bool,
}

impl std::fmt::Debug for MountFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountFlag")
            .field("key", &self.key)
            .field("from_capability", &self.from_capability)
            .finish_non_exhaustive()
    }
}

fn split_flags(raw: &str, from_capability: bool) -> impl Iterator<Item = MountFlag> + '_ {
    raw.split(',')
        .filter(|f| !f.trim().is_empty())
        .map(move |f| match f.split_once('=') {
            Some((k, v)) => MountFlag {
                key: k.trim().to_owned(),
                value: Some(Secret::new(v)),
                from_capability,
            },
            None => MountFlag {
                key: f.trim().to_owned(),
                value: None,
                from_capability,
            },
        })
}

/// The flags of the (normalised) node-stage secret's `mount_flags` key, in order; empty entries are skipped.
pub fn secret_mount_flags(secrets: &Secrets) -> Vec<MountFlag> {
    match secrets.get("mount_flags") {
        Some(raw) => split_flags(raw.expose(), false).collect(),
        None => Vec::new(),
    }
}

/// Every mount flag of a democratic-csi volume in democratic-csi's order: the capability's (each entry split at
/// commas), then the (normalised) node-stage secret's `mount_flags`; a later flag overrides an earlier one.
pub fn mount_flags(capability_flags: &[String], secrets: &Secrets) -> Vec<MountFlag> {
    let mut flags: Vec<MountFlag> = capability_flags
        .iter()
        .flat_map(|f| split_flags(f, true))
        .collect();
    flags.extend(secret_mount_flags(secrets));
    flags
}

/// The last flag among `flags` spelt as one of `keys` (`getMountFlagValue`: the last occurrence wins), with its value.
pub fn last_flag<'a>(flags: &'a [MountFlag], keys: &[&str]) -> Option<&'a MountFlag> {
    flags
        .iter()
        .rev()
        .find(|f| keys.iter().any(|k| f.key.eq_ignore_ascii_case(k)) && f.value.is_some())
}

/// The value of the last `key=` flag among `flags` (`getMountFlagValue`: the last occurrence wins).
pub fn last_flag_value<'a>(flags: &'a [MountFlag], key: &str) -> Option<&'a Secret> {
    last_flag(flags, &[key]).and_then(|f| f.value.as_ref())
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

    fn exposed(s: &Secrets, key: &str) -> Option<String> {
        s.get(key).map(|v| v.expose().to_owned())
    }

    #[test]
    fn attach_driver_values() {
        assert_eq!(
            attach_driver(&ctx(&[("source", r"\\s\x")])).expect("ok"),
            None
        );
        assert_eq!(
            attach_driver(&ctx(&[("node_attach_driver", "smb")])).expect("ok"),
            Some(AttachDriver::Smb)
        );
        assert_eq!(
            attach_driver(&ctx(&[("node_attach_driver", " ISCSI ")])).expect("ok"),
            Some(AttachDriver::Iscsi)
        );
        for other in ["nfs", "hostpath", "nvmeof", "lustre", "", "zfs-local"] {
            match attach_driver(&ctx(&[("node_attach_driver", other)])) {
                Err(Error::InvalidArgument(m)) => {
                    assert!(
                        m.contains("node_attach_driver") && m.contains("smb and iscsi"),
                        "{m}"
                    )
                }
                x => panic!("{other}: {x:?}"),
            }
        }
    }

    #[test]
    fn prefixes_are_stripped_most_specific_first() {
        let context = ctx(&[
            ("provisioner_driver", "freenas-api-iscsi"),
            ("provisioner_driver_instance_id", "site-b"),
        ]);
        let secrets = Secrets::new([
            ("node-db.node.session.auth.username", "plain"),
            (
                "democratic-csi.org/node-db.node.session.auth.username",
                "base",
            ),
            (
                "democratic-csi.org/freenas-api-iscsi/node-db.node.session.auth.username",
                "driver",
            ),
            (
                "democratic-csi.org/site-b/node-db.node.session.auth.username",
                "instance",
            ),
            (
                "democratic-csi.org/freenas-api-iscsi/node-db.node.session.auth.password",
                "driver-pw",
            ),
            (
                "Democratic-CSI.org/node-db.node.session.auth.authmethod",
                "CHAP",
            ),
            // Another instance's key is not this volume's: it keeps its instance part.
            ("democratic-csi.org/site-a/mount_flags", "username=a"),
            ("mount_flags", "username=b"),
        ]);
        let n = normalized_secrets(&secrets, &context);
        assert_eq!(
            exposed(&n, "node-db.node.session.auth.username").as_deref(),
            Some("instance")
        );
        assert_eq!(
            exposed(&n, "node-db.node.session.auth.password").as_deref(),
            Some("driver-pw")
        );
        assert_eq!(
            exposed(&n, "node-db.node.session.auth.authmethod").as_deref(),
            Some("CHAP")
        );
        assert_eq!(exposed(&n, "mount_flags").as_deref(), Some("username=b"));
        assert_eq!(
            exposed(&n, "site-a/mount_flags").as_deref(),
            Some("username=a")
        );
        // Without the context's ids only the bare prefix is stripped, and it beats the bare key.
        let n = normalized_secrets(&secrets, &BTreeMap::new());
        assert_eq!(
            exposed(&n, "node-db.node.session.auth.username").as_deref(),
            Some("base")
        );
        assert_eq!(
            exposed(&n, "freenas-api-iscsi/node-db.node.session.auth.password").as_deref(),
            Some("driver-pw")
        );
        // The result keeps every value redacted.
        assert!(!format!("{n:?}").contains("driver-pw"));
    }

    #[test]
    fn mount_flags_of_the_secret() {
        let s = Secrets::new([(
            "mount_flags",
            "vers=3.0,username=first, username=alice,,password=p=w,x,guest",
        )]);
        let flags = secret_mount_flags(&s);
        assert_eq!(
            flags.iter().map(|f| f.key.as_str()).collect::<Vec<_>>(),
            ["vers", "username", "username", "password", "x", "guest"]
        );
        assert_eq!(
            last_flag_value(&flags, "username").map(Secret::expose),
            Some("alice")
        );
        // The whole value after the first '=': democratic-csi would have cut it to "p".
        assert_eq!(
            last_flag_value(&flags, "password").map(Secret::expose),
            Some("p=w")
        );
        assert!(last_flag_value(&flags, "guest").is_none());
        assert!(!format!("{flags:?}").contains("p=w"));
        assert!(secret_mount_flags(&Secrets::default()).is_empty());
    }

    #[test]
    fn capability_flags_come_first_and_the_secret_s_override_them() {
        let s = Secrets::new([("mount_flags", "pass=from-secret")]);
        let flags = mount_flags(
            &[
                "username=alice".to_owned(),
                "password=from-pv,vers=3.0".to_owned(),
                "dom=CORP".to_owned(),
            ],
            &s,
        );
        let pw = last_flag(&flags, SMB_ACCOUNT_FLAGS[1]).expect("password");
        assert_eq!(pw.value.as_ref().map(Secret::expose), Some("from-secret"));
        assert!(!pw.from_capability);
        let user = last_flag(&flags, SMB_ACCOUNT_FLAGS[0]).expect("user");
        assert!(user.from_capability);
        assert_eq!(
            last_flag(&flags, SMB_ACCOUNT_FLAGS[2])
                .and_then(|f| f.value.as_ref())
                .map(Secret::expose),
            Some("CORP")
        );
        assert!(
            flags
                .iter()
                .any(|f| f.from_capability && f.key == "password")
        );
        assert!(!format!("{flags:?}").contains("from-"));
        for k in ["username", "USER", " pass ", "Workgroup", "dom"] {
            assert!(is_smb_account_flag(k), "{k}");
        }
        for k in ["credentials", "passwd", "pwd", "vers", "cred"] {
            assert!(!is_smb_account_flag(k), "{k}");
        }
    }
}
