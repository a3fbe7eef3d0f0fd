//! The block-storage and iSCSI vocabulary of the host port: disk locations and identifiers, target portals and
//! login authentication. Parsing of user input into these types (volume attributes) is the iSCSI protocol's job
//! (`crate::iscsi`); [`Portal::parse`] is here because a portal's text form is part of the type.

use std::fmt;

use super::Secret;
use crate::error::Error;

/// Where a disk sits on its adapter (`ListDiskLocations`; csi-proxy never fills the bus).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskLocation {
    /// Adapter number (text).
    pub adapter: String,
    /// SCSI target number (text).
    pub target: String,
    /// LUN (text).
    pub lun: String,
}

/// A disk's identifiers (`ListDiskIDs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskIds {
    /// SCSI VPD page 0x83 identifier (hex for binary ids).
    pub page83: String,
    /// Serial number (may be blank or space-padded).
    pub serial: String,
}

/// A disk's partition table as the host reports it ([`super::Host::disk_layout`]: `MSFT_Disk.PartitionStyle` and
/// the disk's `MSFT_Partition`s; csi-proxy v1 has no call that answers it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskLayout {
    /// The partition table.
    pub style: PartitionStyle,
    /// The partitions, in order.
    pub partitions: Vec<PartitionInfo>,
}

impl DiskLayout {
    /// The partitions other than Microsoft Reserved: what makes a disk not empty.
    pub fn data_partitions(&self) -> impl Iterator<Item = &PartitionInfo> {
        self.partitions
            .iter()
            .filter(|p| p.kind != PartitionKind::Reserved)
    }
}

/// A disk's partition table style (`MSFT_Disk.PartitionStyle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionStyle {
    /// No partition table (RAW).
    Raw,
    /// Master boot record.
    Mbr,
    /// GUID partition table.
    Gpt,
}

/// One partition of a [`DiskLayout`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    /// `PartitionNumber`.
    pub number: u32,
    /// What Windows makes of it.
    pub kind: PartitionKind,
    /// Size in bytes.
    pub size: u64,
}

/// What a partition is to Windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionKind {
    /// Microsoft Reserved (GPT): never a volume; `PartitionDisk` ignores it.
    Reserved,
    /// A partition Windows gives a volume: GPT basic data, or an MBR type Windows mounts (IFS 0x07, FAT 0x01, 0x04,
    /// 0x06, 0x0B, 0x0C, 0x0E).
    Basic,
    /// Any other type (an EFI system partition, a Linux or LVM partition, an unknown MBR type): no volume Windows
    /// can use, and never this driver's. The text names the type.
    Other(String),
}

/// Whether Multipath I/O's Microsoft DSM claims the node's iSCSI disks ([`super::Host::mpio_claim`]): only then do
/// the sessions of one target through several portals show one disk per LUN (an MPIO disk with one path per
/// session); otherwise each session shows the LUN as a disk of its own ("MPIO on Nano Server", Windows Server docs:
/// until MPIO is configured to claim them, disks are exposed redundantly, one per path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpioClaim {
    /// The Multipath-IO feature is not installed (`MSFT_MSDSMSupportedHW` does not exist).
    NotInstalled,
    /// MPIO is installed but the MSDSM does not claim iSCSI disks (no `MSFT2005`/`iSCSIBusType_0x9` hardware id:
    /// `Enable-MSDSMAutomaticClaim -BusType iSCSI` was not run).
    NotClaimingIscsi,
    /// The MSDSM claims iSCSI disks.
    ClaimsIscsi,
}

/// One path of an iSCSI target ([`super::Host::target_paths`]): a session's connection, the portal it goes to and the
/// disks it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetPath {
    /// The portal of the connection (`TargetAddress`, `TargetPortNumber`), when Windows reports it.
    pub portal: Option<Portal>,
    /// The disks the session shows (with MPIO: the MPIO disk, shared by every path).
    pub disks: Vec<u32>,
}

/// The iSCSI default port.
pub const DEFAULT_PORT: u16 = 3260;

/// An iSCSI target portal.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Portal {
    /// Host name or IP address (IPv6 without brackets).
    pub address: String,
    /// TCP port.
    pub port: u16,
}

impl fmt::Display for Portal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.address.contains(':') {
            write!(f, "[{}]:{}", self.address, self.port)
        } else {
            write!(f, "{}:{}", self.address, self.port)
        }
    }
}

impl Portal {
    /// Parse `host[:port]`, `[v6]:port` or a bare IPv6 address; the port defaults to 3260.
    pub fn parse(text: &str, key: &str) -> Result<Self, Error> {
        let bad = |rule: &str| {
            Error::InvalidArgument(format!(
                "volume attribute {key}: portal {text:?} is invalid: {rule} (expected host[:port], e.g. \
                 10.0.0.5:3260 or [fd00::5]:3260)"
            ))
        };
        let t = text.trim();
        if t.is_empty() {
            return Err(bad("it is empty"));
        }
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad("missing ']'"))?;
            match after {
                "" => (h, None),
                p => (
                    h,
                    Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ']'"))?),
                ),
            }
        } else if t.matches(':').count() > 1 {
            (t, None)
        } else if let Some((h, p)) = t.split_once(':') {
            (h, Some(p))
        } else {
            (t, None)
        };
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(bad("the port must be a number from 1 to 65535")),
            },
        };
        let v6 = host.contains(':');
        let ok_char =
            |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '-' || (v6 && c == ':');
        if host.is_empty() || !host.chars().all(ok_char) || host.starts_with(['-', '.']) {
            return Err(bad("the host must be a DNS name or an IP address"));
        }
        Ok(Self {
            address: host.to_owned(),
            port,
        })
    }
}

/// How the initiator logs in. `Debug` never shows the secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum IscsiAuth {
    /// No CHAP.
    #[default]
    None,
    /// One-way CHAP.
    OneWay {
        /// CHAP user name.
        username: String,
        /// CHAP secret.
        secret: Secret,
    },
    /// Mutual CHAP (the initiator's node-wide secret must be set first).
    Mutual {
        /// CHAP user name.
        username: String,
        /// CHAP secret.
        secret: Secret,
    },
}

impl IscsiAuth {
    /// The name of the mode, for logs.
    pub fn mode(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::OneWay { .. } => "one-way CHAP",
            Self::Mutual { .. } => "mutual CHAP",
        }
    }
}
