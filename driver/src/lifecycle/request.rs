//! The lifecycle's inputs and outputs, independent of CSI's generated types and of any protocol: the requests of
//! each Node RPC, access capabilities, usage and condition, the redacting [`Secrets`] map and the rules every
//! protocol shares (required fields, no block access, no credentials in mount options — but a democratic-csi SMB
//! volume's account, which democratic-csi reads there).

use std::collections::BTreeMap;
use std::fmt;

use crate::error::Error;
use crate::host::Secret;
use crate::state::AccessRecord;

/// The context key that marks an inline ephemeral volume.
pub const EPHEMERAL_KEY: &str = "csi.storage.k8s.io/ephemeral";

/// How a volume is accessed.
#[derive(Clone, PartialEq, Eq)]
pub enum AccessType {
    /// A filesystem mount (here: a directory link).
    Mount {
        /// `fs_type` (ignored for SMB).
        fs_type: String,
        /// Mount flags (credentials refused, except a democratic-csi SMB volume's account; the rest is ignored on
        /// Windows). `Debug` shows their keys only.
        mount_flags: Vec<String>,
    },
    /// A raw block device: refused, Windows containers have none.
    Block,
}

/// Mount flags by key only: a democratic-csi SMB volume's flags may carry its password (`password=…`), so no value
/// is ever printed.
impl fmt::Debug for AccessType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessType::Mount {
                fs_type,
                mount_flags,
            } => f
                .debug_struct("Mount")
                .field("fs_type", fs_type)
                .field("mount_flags", &flag_keys(mount_flags))
                .finish(),
            AccessType::Block => f.write_str("Block"),
        }
    }
}

/// The keys of mount flags (each flag may be a comma-separated list): `key` for `key=value`; values are dropped.
fn flag_keys(flags: &[String]) -> Vec<&str> {
    flags
        .iter()
        .flat_map(|f| f.split(','))
        .map(|f| f.split('=').next().unwrap_or_default().trim())
        .filter(|k| !k.is_empty())
        .collect()
}

/// A CSI volume capability: access type plus the access mode (`csi.v1` enum value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capability {
    /// Access type.
    pub access_type: AccessType,
    /// `VolumeCapability.AccessMode.Mode` as its wire value.
    pub access_mode: i32,
}

impl Capability {
    /// What the records keep of this capability.
    pub fn access(&self) -> AccessRecord {
        let (access_type, fs_type) = match &self.access_type {
            AccessType::Mount { fs_type, .. } => ("mount", fs_type.clone()),
            AccessType::Block => ("block", String::new()),
        };
        AccessRecord {
            access_mode: self.access_mode,
            access_type: access_type.to_owned(),
            fs_type,
        }
    }
}

/// The CSI name of an access mode's wire value.
pub(crate) fn access_mode_name(mode: i32) -> &'static str {
    match mode {
        1 => "SINGLE_NODE_WRITER",
        2 => "SINGLE_NODE_READER_ONLY",
        3 => "MULTI_NODE_READER_ONLY",
        4 => "MULTI_NODE_SINGLE_WRITER",
        5 => "MULTI_NODE_MULTI_WRITER",
        6 => "SINGLE_NODE_SINGLE_WRITER",
        7 => "SINGLE_NODE_MULTI_WRITER",
        _ => "UNKNOWN",
    }
}

impl AccessRecord {
    /// Whether a repeated call with `other` asks for the same thing (fs type names compare case-insensitively).
    pub fn same_as(&self, other: &AccessRecord) -> bool {
        self.access_mode == other.access_mode
            && self.access_type == other.access_type
            && self.fs_type.eq_ignore_ascii_case(&other.fs_type)
    }

    /// For messages: `access mode SINGLE_NODE_SINGLE_WRITER, mount (fs_type "ntfs")`.
    pub fn describe(&self) -> String {
        let fs = if self.fs_type.is_empty() {
            String::new()
        } else {
            format!(" (fs_type {:?})", self.fs_type)
        };
        format!(
            "access mode {}, {}{fs}",
            access_mode_name(self.access_mode),
            self.access_type
        )
    }
}

/// NodeStageVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct StageRequest {
    /// Volume id.
    pub volume_id: String,
    /// Staging path as kubelet sent it.
    pub staging_target_path: String,
    /// Capability (required).
    pub capability: Option<Capability>,
    /// Volume attributes.
    pub volume_context: BTreeMap<String, String>,
    /// Node-stage secrets (redacted in `Debug`).
    pub secrets: Secrets,
}

/// NodeUnstageVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct UnstageRequest {
    /// Volume id.
    pub volume_id: String,
    /// Staging path.
    pub staging_target_path: String,
}

/// NodePublishVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct PublishRequest {
    /// Volume id.
    pub volume_id: String,
    /// Staging path (required: the driver has STAGE_UNSTAGE_VOLUME), empty for inline ephemeral volumes.
    pub staging_target_path: String,
    /// Target path.
    pub target_path: String,
    /// Capability (required).
    pub capability: Option<Capability>,
    /// Read-only publish.
    pub readonly: bool,
    /// Volume attributes.
    pub volume_context: BTreeMap<String, String>,
    /// Node-publish secrets (redacted in `Debug`).
    pub secrets: Secrets,
}

/// NodeUnpublishVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct UnpublishRequest {
    /// Volume id.
    pub volume_id: String,
    /// Target path.
    pub target_path: String,
}

/// NodeGetVolumeStats's inputs.
#[derive(Clone, Debug, Default)]
pub struct StatsRequest {
    /// Volume id.
    pub volume_id: String,
    /// A path where the volume is published or staged.
    pub volume_path: String,
}

/// Byte usage (zeros when unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Total bytes.
    pub total: i64,
    /// Available bytes.
    pub available: i64,
    /// Used bytes.
    pub used: i64,
}

/// NodeGetVolumeStats's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeStats {
    /// Byte usage.
    pub usage: Usage,
    /// Whether the volume is abnormal (VOLUME_CONDITION).
    pub abnormal: bool,
    /// The condition message.
    pub message: String,
}

/// What startup reconciliation found and repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Volume records examined.
    pub checked: usize,
    /// Volumes whose staging link no longer resolved: link removed, marked for re-stage.
    pub restage: Vec<String>,
    /// Volumes whose staging object does not work now but may be in use (a file server that does not answer): left
    /// in place and checked again in the background until it works (`lifecycle/watch.rs`).
    pub unreachable: Vec<String>,
    /// Volumes whose stage never completed (left for kubelet's retry or unstage).
    pub incomplete: Vec<String>,
    /// Publish records whose target no longer exists (deleted).
    pub stale_publications: Vec<String>,
    /// Volumes without a record whose staging object a protocol adopted from what the host shows (found through a
    /// surviving publish record).
    pub adopted: Vec<String>,
    /// Volumes (or publish targets) whose check failed, with the error: each is left as it was and retried by the
    /// next stage; the others were checked regardless.
    pub failed: Vec<(String, String)>,
}

/// NodeExpandVolume's inputs.
#[derive(Clone, Debug, Default)]
pub struct ExpandRequest {
    /// Volume id.
    pub volume_id: String,
    /// A path where the volume is staged or published.
    pub volume_path: String,
    /// `capacity_range.required_bytes` (0 = not given).
    pub required_bytes: i64,
}

/// The CSI `secrets` map of a request: keys are shown by `Debug`, values never.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(BTreeMap<String, Secret>);

impl Secrets {
    /// Build from the request's map.
    pub fn new<I, K, V>(entries: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Self(
            entries
                .into_iter()
                .map(|(k, v)| (k.into(), Secret::new(v)))
                .collect(),
        )
    }

    /// Build from keys and already-wrapped values.
    pub fn from_secrets<I: IntoIterator<Item = (String, Secret)>>(entries: I) -> Self {
        Self(entries.into_iter().collect())
    }

    /// Every key with its (redacted) value.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Secret)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Look a key up case-insensitively.
    pub fn get(&self, key: &str) -> Option<&Secret> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every value (for tests that assert no secret leaks).
    pub fn values(&self) -> impl Iterator<Item = &Secret> {
        self.0.values()
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

/// Keys that smell of credentials; refused outside the secrets map.
const CREDENTIAL_KEYS: &[&str] = &[
    "username",
    "user",
    "password",
    "pass",
    "passwd",
    "pwd",
    "credentials",
    "cred",
];

pub(crate) fn is_credential_key(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    let last = key.rsplit(['/', '.']).next().unwrap_or(&key);
    CREDENTIAL_KEYS.contains(&last)
}

/// Look a volume_context key up case-insensitively.
pub fn context_get<'a>(context: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    context
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_str())
}

/// [`check_mount_flags`] for a volume with `context`: a democratic-csi SMB volume (`node_attach_driver: smb`) may
/// carry its account in the mount flags, as democratic-csi reads it (`super::democratic::SMB_ACCOUNT_FLAGS`), which
/// the SMB protocol then reads; every other credential-like flag is refused as for any volume. Returns the other
/// option keys (for a log line).
pub fn check_mount_flags_for(
    flags: &[String],
    context: &BTreeMap<String, String>,
) -> Result<Vec<String>, Error> {
    if !matches!(
        super::democratic::attach_driver(context),
        Ok(Some(super::democratic::AttachDriver::Smb))
    ) {
        return check_mount_flags(flags);
    }
    let mut ignored = Vec::new();
    for flag in flags.iter().flat_map(|f| f.split(',')) {
        let key = flag.split('=').next().unwrap_or_default().trim();
        if key.is_empty() || super::democratic::is_smb_account_flag(key) {
            continue;
        }
        if is_credential_key(key) {
            return Err(Error::InvalidArgument(format!(
                "mount option {key:?} carries a credential that is not an account flag; rule: a democratic-csi SMB \
                 volume's account is username= (or user=), password= (or pass=) and domain= (or dom=, workgroup=) \
                 in mountOptions or in the node-stage secret's mount_flags key"
            )));
        }
        ignored.push(key.to_owned());
    }
    Ok(ignored)
}

/// Refuse credentials in mount options (each option may itself be a comma-separated list). Returns the other option
/// keys, which Windows ignores (for a log line). A volume's own rules: [`check_mount_flags_for`].
pub fn check_mount_flags(flags: &[String]) -> Result<Vec<String>, Error> {
    let mut ignored = Vec::new();
    for flag in flags.iter().flat_map(|f| f.split(',')) {
        let key = flag.split('=').next().unwrap_or_default().trim();
        if key.is_empty() {
            continue;
        }
        if is_credential_key(key) {
            return Err(Error::InvalidArgument(format!(
                "mount option {key:?} carries a credential; rule: credentials go in the node-stage secret (keys \
                 username, password, domain; for a democratic-csi volume its mount_flags key, e.g. mount_flags: \
                 \"username=…,password=…\"), never in mountOptions, where every reader of the PV sees them: move \
                 them from the StorageClass's mountOptions into the Secret its \
                 csi.storage.k8s.io/node-stage-secret-name names"
            )));
        }
        ignored.push(key.to_owned());
    }
    Ok(ignored)
}

pub(crate) fn required(value: &str, name: &str) -> Result<(), Error> {
    if value.trim().is_empty() {
        return Err(Error::InvalidArgument(format!("{name} is required")));
    }
    Ok(())
}

/// Validate the capability: present, and not block.
pub(crate) fn mount_capability(cap: Option<&Capability>) -> Result<&[String], Error> {
    match cap {
        None => Err(Error::InvalidArgument("volume_capability is required".to_owned())),
        Some(Capability { access_type: AccessType::Block, .. }) => Err(Error::InvalidArgument(
            "block access type is not supported: Windows containers cannot use raw block devices; use a mount volume"
                .to_owned(),
        )),
        Some(Capability { access_type: AccessType::Mount { mount_flags, .. }, .. }) => Ok(mount_flags),
    }
}
