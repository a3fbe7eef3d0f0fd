//! The block-storage part of the recording fake host ([`crate::host::fake::FakeHost`]): iSCSI portals, targets,
//! sessions, disks, partitions, volumes and mount points, with csi-proxy's semantics (idempotent AddTargetPortal /
//! ConnectTarget / DisconnectTarget / PartitionDisk / SetDiskState, MountVolume idempotent for the same volume,
//! UnmountVolume failing when nothing is mounted, ResizeVolume skipping growth under 100 MiB, FormatVolume
//! unguarded). Destroying data (initialising a disk that held data, formatting a volume that held data) is recorded
//! as a data-loss event that tests assert never happens.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::host::{
    DiskIds, DiskLocation, HostError, HostErrorKind, HostOp, HostResult, IscsiAuth, Portal,
};

/// One recorded block/iSCSI host call (never a secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockCall {
    /// A call without arguments worth recording beyond the operation.
    Plain(HostOp),
    /// A call about a disk number.
    Disk(HostOp, u32),
    /// A call about a volume id (and a path for mount/unmount).
    Volume(HostOp, String, Option<String>),
    /// A call about a path.
    Path(HostOp, String),
    /// A call about a portal and maybe a target.
    Iscsi(HostOp, String, Option<String>, Option<&'static str>),
}

impl BlockCall {
    /// The operation.
    pub fn op(&self) -> HostOp {
        match self {
            Self::Plain(op)
            | Self::Disk(op, _)
            | Self::Volume(op, ..)
            | Self::Path(op, _)
            | Self::Iscsi(op, ..) => *op,
        }
    }
}

impl fmt::Display for BlockCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plain(op) => write!(f, "{op}"),
            Self::Disk(op, n) => write!(f, "{op}(disk {n})"),
            Self::Volume(op, v, None) => write!(f, "{op}({v})"),
            Self::Volume(op, v, Some(p)) => write!(f, "{op}({v}, {p})"),
            Self::Path(op, p) => write!(f, "{op}({p})"),
            Self::Iscsi(op, p, iqn, auth) => {
                write!(f, "{op}({p}")?;
                if let Some(i) = iqn {
                    write!(f, ", {i}")?;
                }
                if let Some(a) = auth {
                    write!(f, ", {a}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Partition table style of a fake disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Not initialised.
    Raw,
    /// GPT.
    Gpt,
    /// MBR.
    Mbr,
}

/// A fake volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeVolume {
    /// `\\?\Volume{…}\`.
    pub id: String,
    /// Whether it has a file system Windows recognises.
    pub formatted: bool,
    /// Size in bytes.
    pub size: u64,
    /// Bytes used.
    pub used: u64,
    /// Whether it holds data (formatting it loses data).
    pub data: bool,
}

/// A fake partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakePartition {
    /// Microsoft reserved partition.
    pub reserved: bool,
    /// The volume (None: a partition Windows has no volume for, e.g. a Linux partition).
    pub volume: Option<FakeVolume>,
}

/// A fake disk (an iSCSI LUN or a local disk).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeDisk {
    /// Stable name for tests.
    pub name: String,
    /// The target it belongs to (lower-cased IQN), None for a local disk.
    pub iqn: Option<String>,
    /// LUN.
    pub lun: u32,
    /// Disk number while present.
    pub number: Option<u32>,
    /// Adapter number.
    pub adapter: u32,
    /// page83.
    pub page83: String,
    /// Serial.
    pub serial: String,
    /// Size in bytes.
    pub size: u64,
    /// Online.
    pub online: bool,
    /// Partition style.
    pub style: Style,
    /// Partitions.
    pub partitions: Vec<FakePartition>,
    /// Data on a RAW-looking disk.
    pub raw_data: bool,
}

#[derive(Clone, Debug, Default)]
struct Target {
    chap: Option<(String, String)>,
    mutual: Option<String>,
}

/// The block model.
#[derive(Debug, Default)]
pub struct BlockModel {
    /// Disks.
    pub disks: Vec<FakeDisk>,
    portals: BTreeMap<String, BTreeSet<String>>,
    added: BTreeSet<String>,
    targets: BTreeMap<String, Target>,
    /// Connected targets (lower-cased IQNs).
    pub sessions: BTreeSet<String>,
    mutual_secret: Option<String>,
    /// Mount points: lower-cased path → volume id.
    pub mounts: BTreeMap<String, String>,
    /// Destructive calls that hit data.
    pub data_loss: Vec<String>,
    /// Whether disks only appear after a Rescan.
    pub need_rescan: bool,
    next_guid: u32,
}

fn err(op: HostOp, kind: HostErrorKind, msg: impl Into<String>) -> HostError {
    HostError::new(op, kind, msg)
}

const MIB: u64 = 1 << 20;
const MIN_GROWTH: u64 = 100 * MIB;

impl BlockModel {
    /// Declare a reachable portal exposing `iqn` (repeat for more targets).
    pub fn add_portal_target(&mut self, portal: &Portal, iqn: &str) {
        self.portals
            .entry(portal.to_string().to_ascii_lowercase())
            .or_default()
            .insert(iqn.to_ascii_lowercase());
        self.targets.entry(iqn.to_ascii_lowercase()).or_default();
    }

    /// Require one-way CHAP (and, with `mutual`, the initiator's mutual secret) for `iqn`.
    pub fn require_chap(&mut self, iqn: &str, user: &str, secret: &str, mutual: Option<&str>) {
        let t = self.targets.entry(iqn.to_ascii_lowercase()).or_default();
        t.chap = Some((user.to_owned(), secret.to_owned()));
        t.mutual = mutual.map(str::to_owned);
    }

    /// Add a LUN of `iqn` backed by a new disk (present once the target is connected).
    pub fn add_lun(&mut self, iqn: &str, lun: u32, name: &str, size: u64) -> &mut FakeDisk {
        self.disks.push(FakeDisk {
            name: name.to_owned(),
            iqn: Some(iqn.to_ascii_lowercase()),
            lun,
            number: None,
            adapter: 2,
            page83: format!("6001405{:025x}", self.disks.len() + 1),
            serial: format!("SN-{name}"),
            size,
            online: true,
            style: Style::Raw,
            partitions: Vec::new(),
            raw_data: false,
        });
        let last = self.disks.len() - 1;
        &mut self.disks[last]
    }

    /// A local disk (always present).
    pub fn add_local_disk(&mut self, number: u32, lun: u32, name: &str) {
        self.disks.push(FakeDisk {
            name: name.to_owned(),
            iqn: None,
            lun,
            number: Some(number),
            adapter: 0,
            page83: format!("local{number}"),
            serial: format!("LOCAL-{number}"),
            size: 100 << 30,
            online: true,
            style: Style::Gpt,
            partitions: Vec::new(),
            raw_data: false,
        });
    }

    /// A formatted volume holding data, as a pre-existing disk would have.
    pub fn volume_with_data(&mut self, size: u64) -> FakePartition {
        FakePartition {
            reserved: false,
            volume: Some(FakeVolume {
                id: self.guid(),
                formatted: true,
                size,
                used: 4096,
                data: true,
            }),
        }
    }

    /// The disk named `name`.
    pub fn disk(&mut self, name: &str) -> Option<&mut FakeDisk> {
        self.disks.iter_mut().find(|d| d.name == name)
    }

    fn guid(&mut self) -> String {
        self.next_guid += 1;
        format!(
            r"\\?\Volume{{00000000-0000-0000-0000-{:012x}}}\",
            self.next_guid
        )
    }

    /// Simulate a reboot: sessions drop, their disks vanish; mount points stay (dangling).
    pub fn reboot(&mut self) {
        self.sessions.clear();
        for d in self.disks.iter_mut().filter(|d| d.iqn.is_some()) {
            d.number = None;
        }
    }

    fn disk_idx(&self, op: HostOp, n: u32) -> HostResult<usize> {
        self.disks
            .iter()
            .position(|d| d.number == Some(n))
            .ok_or_else(|| err(op, HostErrorKind::NotFound, format!("disk {n} not found")))
    }

    fn visible_volume(&self, op: HostOp, id: &str) -> HostResult<(usize, usize)> {
        for (di, d) in self.disks.iter().enumerate() {
            if d.number.is_none() || !d.online {
                continue;
            }
            for (pi, p) in d.partitions.iter().enumerate() {
                if p.volume
                    .as_ref()
                    .is_some_and(|v| v.id.eq_ignore_ascii_case(id))
                {
                    return Ok((di, pi));
                }
            }
        }
        Err(err(
            op,
            HostErrorKind::NotFound,
            format!("No MSFT_Volume objects found for {id}"),
        ))
    }

    fn vol(&mut self, op: HostOp, id: &str) -> HostResult<&mut FakeVolume> {
        let (di, pi) = self.visible_volume(op, id)?;
        self.disks[di].partitions[pi]
            .volume
            .as_mut()
            .ok_or_else(|| err(op, HostErrorKind::NotFound, "no volume"))
    }

    /// `ListDiskLocations`.
    pub fn list_disk_locations(&self) -> BTreeMap<u32, DiskLocation> {
        let mut targets: BTreeMap<&str, u32> = BTreeMap::new();
        for s in &self.sessions {
            let n = targets.len() as u32;
            targets.insert(s, n);
        }
        self.disks
            .iter()
            .filter_map(|d| {
                let n = d.number?;
                let target = d
                    .iqn
                    .as_deref()
                    .and_then(|i| targets.get(i))
                    .copied()
                    .unwrap_or(0);
                Some((
                    n,
                    DiskLocation {
                        adapter: d.adapter.to_string(),
                        target: target.to_string(),
                        lun: d.lun.to_string(),
                    },
                ))
            })
            .collect()
    }

    /// `ListDiskIDs`.
    pub fn list_disk_ids(&self) -> BTreeMap<u32, DiskIds> {
        self.disks
            .iter()
            .filter_map(|d| {
                Some((
                    d.number?,
                    DiskIds {
                        page83: d.page83.clone(),
                        serial: d.serial.clone(),
                    },
                ))
            })
            .collect()
    }

    /// `Rescan`: disks of connected targets appear.
    pub fn rescan(&mut self) {
        let sessions = self.sessions.clone();
        for i in 0..self.disks.len() {
            if self.disks[i].number.is_none()
                && self.disks[i]
                    .iqn
                    .as_ref()
                    .is_some_and(|q| sessions.contains(q))
            {
                let mut n = 0;
                while self.disks.iter().any(|d| d.number == Some(n)) {
                    n += 1;
                }
                self.disks[i].number = Some(n);
            }
        }
    }

    /// `PartitionDisk`.
    pub fn partition_disk(&mut self, n: u32) -> HostResult<()> {
        let op = HostOp::PartitionDisk;
        let di = self.disk_idx(op, n)?;
        let init = self.disks[di].style == Style::Raw;
        let part = !self.disks[di].partitions.iter().any(|p| !p.reserved);
        if !init && !part {
            return Ok(());
        }
        if !self.disks[di].online {
            return Err(err(op, HostErrorKind::Other, "The disk is offline."));
        }
        let guid = self.guid();
        let d = &mut self.disks[di];
        if init {
            if d.raw_data {
                self.data_loss
                    .push(format!("PartitionDisk initialised {} holding data", d.name));
            }
            d.style = Style::Gpt;
            d.partitions = vec![FakePartition {
                reserved: true,
                volume: None,
            }];
        }
        d.partitions.push(FakePartition {
            reserved: false,
            volume: Some(FakeVolume {
                id: guid,
                formatted: false,
                size: d.size - 18 * MIB,
                used: 0,
                data: false,
            }),
        });
        Ok(())
    }

    /// `GetDiskStats`.
    pub fn disk_size(&self, n: u32) -> HostResult<u64> {
        Ok(self.disks[self.disk_idx(HostOp::GetDiskStats, n)?].size)
    }

    /// `SetDiskState`.
    pub fn set_online(&mut self, n: u32, online: bool) -> HostResult<()> {
        let di = self.disk_idx(HostOp::SetDiskState, n)?;
        self.disks[di].online = online;
        Ok(())
    }

    /// `GetDiskState`.
    pub fn is_online(&self, n: u32) -> HostResult<bool> {
        Ok(self.disks[self.disk_idx(HostOp::GetDiskState, n)?].online)
    }

    /// `ListVolumesOnDisk`.
    pub fn list_volumes(&self, n: u32) -> HostResult<Vec<String>> {
        let d = &self.disks[self.disk_idx(HostOp::ListVolumesOnDisk, n)?];
        if !d.online {
            return Ok(Vec::new());
        }
        Ok(d.partitions
            .iter()
            .filter_map(|p| p.volume.as_ref().map(|v| v.id.clone()))
            .collect())
    }

    /// `MountVolume` at `path` (lower-cased key); `empty_dir` says whether an empty directory is there.
    pub fn mount(&mut self, id: &str, path: &str, empty_dir: bool) -> HostResult<()> {
        let op = HostOp::MountVolume;
        self.visible_volume(op, id)?;
        match self.mounts.get(path) {
            Some(v) if v.eq_ignore_ascii_case(id) => Ok(()),
            Some(_) => Err(err(
                op,
                HostErrorKind::NotEmpty,
                "The directory is not empty.",
            )),
            None if !empty_dir => Err(err(
                op,
                HostErrorKind::NotEmpty,
                "the target is not an empty directory",
            )),
            None => {
                self.mounts.insert(path.to_owned(), id.to_owned());
                Ok(())
            }
        }
    }

    /// `UnmountVolume`.
    pub fn unmount(&mut self, id: &str, path: &str) -> HostResult<()> {
        let op = HostOp::UnmountVolume;
        self.visible_volume(op, id)?;
        match self.mounts.remove(path) {
            Some(_) => Ok(()),
            None => Err(err(
                op,
                HostErrorKind::Other,
                "The file or directory is not a reparse point.",
            )),
        }
    }

    /// `IsVolumeFormatted`.
    pub fn is_formatted(&mut self, id: &str) -> HostResult<bool> {
        Ok(self.vol(HostOp::IsVolumeFormatted, id)?.formatted)
    }

    /// `FormatVolume`.
    pub fn format(&mut self, id: &str) -> HostResult<()> {
        let v = self.vol(HostOp::FormatVolume, id)?;
        let lost = v.data;
        v.formatted = true;
        v.data = false;
        v.used = 0;
        if lost {
            self.data_loss
                .push(format!("FormatVolume destroyed the data on {id}"));
        }
        Ok(())
    }

    /// `ResizeVolume(0)`: grow to the disk's size unless the growth is under 100 MiB.
    pub fn resize(&mut self, id: &str) -> HostResult<()> {
        let (di, pi) = self.visible_volume(HostOp::ResizeVolume, id)?;
        let max = self.disks[di].size - 18 * MIB;
        if let Some(v) = self.disks[di].partitions[pi].volume.as_mut()
            && max >= v.size + MIN_GROWTH
        {
            v.size = max;
        }
        Ok(())
    }

    /// `GetVolumeStats`.
    pub fn stats(&mut self, id: &str) -> HostResult<(u64, u64)> {
        let v = self.vol(HostOp::GetVolumeStats, id)?;
        Ok((v.size, v.used))
    }

    /// `GetVolumeIDFromTargetPath` (`exists`: whether the path exists at all).
    pub fn volume_at(&self, path: &str, exists: bool) -> HostResult<String> {
        let op = HostOp::GetVolumeIDFromTargetPath;
        match self.mounts.get(path) {
            Some(v) if exists && self.visible_volume(op, v).is_ok() => Ok(v.clone()),
            Some(_) if exists => Err(err(
                op,
                HostErrorKind::NotFound,
                "GetVolumePathName: cannot find the file",
            )),
            _ if !exists => Err(err(
                op,
                HostErrorKind::NotFound,
                "The system cannot find the file specified.",
            )),
            _ => Err(err(op, HostErrorKind::Other, "not a mounted folder")),
        }
    }

    /// `WriteVolumeCache`.
    pub fn flush(&mut self, id: &str) -> HostResult<()> {
        self.vol(HostOp::WriteVolumeCache, id).map(|_| ())
    }

    /// `AddTargetPortal`.
    pub fn add_portal(&mut self, p: &Portal) -> HostResult<()> {
        let key = p.to_string().to_ascii_lowercase();
        if !self.portals.contains_key(&key) {
            return Err(err(
                HostOp::AddTargetPortal,
                HostErrorKind::Other,
                "Connection Failed.",
            ));
        }
        self.added.insert(key);
        Ok(())
    }

    /// Portals added on the host.
    pub fn added_portals(&self) -> Vec<String> {
        self.added.iter().cloned().collect()
    }

    fn find_target(&self, op: HostOp, p: &Portal, iqn: &str) -> HostResult<String> {
        let key = p.to_string().to_ascii_lowercase();
        let iqn = iqn.to_ascii_lowercase();
        if self.added.contains(&key) && self.portals.get(&key).is_some_and(|t| t.contains(&iqn)) {
            Ok(iqn)
        } else {
            Err(err(
                op,
                HostErrorKind::NotFound,
                "No MSFT_iSCSITarget objects found",
            ))
        }
    }

    /// `ConnectTarget`.
    pub fn connect(&mut self, p: &Portal, iqn: &str, auth: &IscsiAuth) -> HostResult<()> {
        let op = HostOp::ConnectTarget;
        let iqn = self.find_target(op, p, iqn)?;
        if self.sessions.contains(&iqn) {
            return Ok(());
        }
        let t = self.targets.get(&iqn).cloned().unwrap_or_default();
        let fail = || err(op, HostErrorKind::LogonFailure, "Authentication Failure.");
        let given = match auth {
            IscsiAuth::None => None,
            IscsiAuth::OneWay { username, secret } | IscsiAuth::Mutual { username, secret } => {
                Some((username.clone(), secret.expose().to_owned()))
            }
        };
        if let Some(want) = &t.chap
            && given.as_ref() != Some(want)
        {
            return Err(fail());
        }
        if let Some(m) = &t.mutual
            && (!matches!(auth, IscsiAuth::Mutual { .. }) || self.mutual_secret.as_ref() != Some(m))
        {
            return Err(fail());
        }
        self.sessions.insert(iqn.clone());
        if !self.need_rescan {
            self.rescan();
        }
        Ok(())
    }

    /// `DisconnectTarget`.
    pub fn disconnect(&mut self, p: &Portal, iqn: &str) -> HostResult<()> {
        let iqn = self.find_target(HostOp::DisconnectTarget, p, iqn)?;
        if self.sessions.remove(&iqn) {
            for d in self
                .disks
                .iter_mut()
                .filter(|d| d.iqn.as_deref() == Some(&iqn))
            {
                d.number = None;
            }
        }
        Ok(())
    }

    /// `GetTargetDisks`.
    pub fn target_disks(&self, p: &Portal, iqn: &str) -> HostResult<Vec<u32>> {
        let iqn = self.find_target(HostOp::GetTargetDisks, p, iqn)?;
        if !self.sessions.contains(&iqn) {
            return Ok(Vec::new());
        }
        Ok(self
            .disks
            .iter()
            .filter(|d| d.iqn.as_deref() == Some(&iqn))
            .filter_map(|d| d.number)
            .collect())
    }

    /// `SetMutualChapSecret`.
    pub fn set_mutual(&mut self, secret: &str) {
        self.mutual_secret = Some(secret.to_owned());
    }
}
