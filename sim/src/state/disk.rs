//! Disks, partitions and volumes (the Disk and Volume API groups).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::{DataLossEvent, State, arrival, dir_usage, wipe_dir, write_files};
use crate::error::{Error, Result};
use crate::profile::texts::{self, DiskOp, PartitionFailure, VolumeOp};
use crate::profile::{Backend, CsiProxyVersion, ResizeSkip};
use crate::scenario::{DiskSpec, PartitionKind, PartitionSpec, PartitionStyle};

pub(crate) const MIB: u64 = 1024 * 1024;
/// GPT/MBR alignment and metadata overhead (1 MiB in front, 1 MiB for the backup table).
pub(crate) const TABLE_OVERHEAD: u64 = 2 * MIB;
/// Size of the Microsoft reserved partition `Initialize-Disk -PartitionStyle GPT` creates.
pub(crate) const MSR_SIZE: u64 = 16 * MIB;
/// csi-proxy v1.2.0+ skips resizes that grow a partition by less than this.
const MIN_RESIZE_GROWTH: i64 = 100 * 1024 * 1024;
/// `Resize-Partition` refuses extents below this ("The size of the extent is less than the minimum of 1MB.").
const MIN_EXTENT: i64 = 1024 * 1024;

/// Where a disk comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DiskSource {
    /// Attached locally; always present.
    Local,
    /// Backing disk of an iSCSI LUN; present while its target is connected.
    Iscsi {
        /// Target IQN.
        iqn: String,
        /// LUN number.
        lun: u32,
    },
}

/// A volume on a basic partition.
#[derive(Debug, Clone, Serialize)]
pub struct Volume {
    /// GUID (lower-case, no braces).
    pub guid: String,
    /// File system type; `None` = unformatted (FileSystemType Unknown).
    pub filesystem: Option<String>,
    /// Drive letter (informational).
    pub drive_letter: Option<char>,
    /// Data Windows cannot read (formatting it is a data-loss event).
    pub foreign_data: bool,
    /// When the volume arrives (`None` = it has; see `arrival.rs`).
    #[serde(skip)]
    pub arrives_at: Option<Instant>,
}

impl Volume {
    /// The `MSFT_Volume.UniqueId` form: `\\?\Volume{GUID}\`.
    pub fn id(&self) -> String {
        format!(r"\\?\Volume{{{}}}\", self.guid)
    }

    /// A new, unformatted volume that arrives at `arrives_at` (`None`: at once).
    pub(crate) fn new(guid: String, arrives_at: Option<Instant>) -> Self {
        Volume {
            guid,
            filesystem: None,
            drive_letter: None,
            foreign_data: false,
            arrives_at,
        }
    }
}

/// A partition.
#[derive(Debug, Clone, Serialize)]
pub struct Partition {
    /// Partition number (1-based).
    pub number: u32,
    /// Kind.
    pub kind: PartitionKind,
    /// Size in bytes.
    pub size: u64,
    /// Volume (basic partitions).
    pub volume: Option<Volume>,
}

/// A disk.
#[derive(Debug, Clone, Serialize)]
pub struct Disk {
    /// Stable identifier (scenario `id`, or generated).
    pub id: String,
    /// Disk number while present.
    pub number: Option<u32>,
    /// Source (local or iSCSI LUN).
    pub source: DiskSource,
    /// `MSFT_Disk.Location`.
    pub location: String,
    /// page83 identifier as csi-proxy returns it.
    pub page83: String,
    /// Serial number.
    pub serial: String,
    /// Size in bytes.
    pub size: u64,
    /// Online state.
    pub online: bool,
    /// Whether the disk comes online when it appears (iSCSI SAN policy).
    pub online_on_arrival: bool,
    /// Read-only flag.
    pub read_only: bool,
    /// Partition style.
    pub partition_style: PartitionStyle,
    /// Partitions.
    pub partitions: Vec<Partition>,
    /// Data Windows cannot see (foreign partitioning or filesystem).
    pub foreign_data: bool,
    /// `ListDiskIDs` cannot open this disk.
    pub unopenable: bool,
    /// Bytes on the device outside any partition (scenario `content`, read raw through the Windows view;
    /// `content.rs`).
    #[serde(skip)]
    pub content: super::content::DiskContent,
    /// The LUN's own delay between a login and the disk's arrival (`None`: the host's, [`crate::Arrival::disk_ms`]).
    pub arrival_delay_ms: Option<u64>,
    /// The LUN's own delay between the disk coming online and its volumes' arrival (`None`: the host's,
    /// [`crate::Arrival::volumes_after_online_ms`]).
    pub volume_arrival_delay_ms: Option<u64>,
    /// When the disk arrives (`None` = it has; see `arrival.rs`).
    #[serde(skip)]
    pub arrives_at: Option<Instant>,
    /// The session (`SessionIdentifier`) this disk shows through when MPIO does not claim it; `None`: every session of
    /// its target shows it (one session, or an MPIO disk with a path per session). `mpio.rs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via_session: Option<String>,
    /// For the LUN's disk as a further session shows it without MPIO: the id of the LUN's own disk. `mpio.rs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_of: Option<String>,
}

impl Disk {
    pub(crate) fn free_space(&self, except: Option<u32>) -> u64 {
        let used: u64 = self
            .partitions
            .iter()
            .filter(|p| Some(p.number) != except)
            .map(|p| p.size)
            .sum();
        self.size
            .saturating_sub(TABLE_OVERHEAD)
            .saturating_sub(used)
    }

    /// Whether the disk is visible to the host (attached and arrived in the storage cache).
    pub fn present(&self) -> bool {
        self.number.is_some() && self.arrives_at.is_none()
    }

    /// Whether its partition table is visible: with the disk (Windows reads it when the disk arrives, offline or
    /// not).
    pub fn layout_visible(&self) -> bool {
        self.present()
    }

    /// Whether volumes of this disk can be visible (present and online; each still has to arrive).
    pub fn volumes_visible(&self) -> bool {
        self.present() && self.online
    }

    /// The volume of partition `pi`, if it is visible (the disk present and online, the volume arrived).
    pub fn visible_volume(&self, pi: usize) -> Option<&Volume> {
        self.partitions[pi]
            .volume
            .as_ref()
            .filter(|v| self.volumes_visible() && v.arrives_at.is_none())
    }
}

pub(crate) fn build_disk(
    st: &mut State,
    spec: &DiskSpec,
    id: String,
    source: DiskSource,
) -> Result<Disk> {
    if spec.size == 0 {
        return Err(Error::Scenario(format!("disk {id}: size must be > 0")));
    }
    let h = simple_hash(&id);
    let content = super::content::resolve(&spec.content, spec.size, &id)?;
    let mut disk = Disk {
        id: id.clone(),
        number: None,
        source,
        location: spec.location.clone().unwrap_or_default(),
        page83: spec
            .page83
            .clone()
            .unwrap_or_else(|| format!("6001405{:025x}", h as u128 * 0x9e37)),
        serial: spec
            .serial
            .clone()
            .unwrap_or_else(|| format!("SIM{:012X}", h & 0xffff_ffff_ffff)),
        size: spec.size,
        online: spec.online.unwrap_or(true),
        online_on_arrival: spec.online.unwrap_or(true),
        read_only: spec.read_only,
        partition_style: spec.partition_style,
        partitions: Vec::new(),
        foreign_data: spec.foreign_data || super::content::holds_data(&content),
        unopenable: spec.unopenable,
        content,
        arrival_delay_ms: None,
        volume_arrival_delay_ms: None,
        arrives_at: None,
        via_session: None,
        path_of: None,
    };
    if spec.partition_style == PartitionStyle::Raw && !spec.partitions.is_empty() {
        return Err(Error::Scenario(format!(
            "disk {id}: a RAW disk cannot have partitions"
        )));
    }
    for (i, p) in spec.partitions.iter().enumerate() {
        add_partition(st, &mut disk, i as u32 + 1, p)?;
    }
    Ok(disk)
}

fn add_partition(st: &mut State, disk: &mut Disk, number: u32, p: &PartitionSpec) -> Result<()> {
    let free = disk.free_space(None);
    let size = if p.size == 0 { free } else { p.size };
    if size > free || size == 0 {
        return Err(Error::Scenario(format!(
            "disk {}: partition {number} does not fit",
            disk.id
        )));
    }
    let volume = match (&p.volume, p.kind) {
        (Some(v), PartitionKind::Basic | PartitionKind::System) => {
            let guid = match &v.guid {
                Some(g) => g.trim_matches(['{', '}']).to_lowercase(),
                None => st.new_guid(),
            };
            write_files(&st.layout.volume_store(&guid), &v.files)?;
            Some(Volume {
                guid,
                filesystem: v.filesystem.clone(),
                drive_letter: v.drive_letter.map(|c| c.to_ascii_uppercase()),
                foreign_data: v.foreign_data,
                arrives_at: None,
            })
        }
        (Some(_), PartitionKind::Reserved) => {
            return Err(Error::Scenario(format!(
                "disk {}: a reserved partition has no volume",
                disk.id
            )));
        }
        (None, _) => None,
    };
    disk.partitions.push(Partition {
        number,
        kind: p.kind,
        size,
        volume,
    });
    Ok(())
}

fn simple_hash(s: &str) -> u64 {
    // FNV-1a: deterministic identifiers derived from stable ids.
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(crate) fn load_local(st: &mut State, specs: &[DiskSpec]) -> Result<()> {
    let mut used: Vec<u32> = specs.iter().filter_map(|d| d.number).collect();
    used.sort_unstable();
    if used.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::Scenario(
            "two local disks have the same number".into(),
        ));
    }
    let mut next = 0u32;
    for (i, spec) in specs.iter().enumerate() {
        let number = match spec.number {
            Some(n) => n,
            None => {
                while used.contains(&next) {
                    next += 1;
                }
                used.push(next);
                next
            }
        };
        let id = spec.id.clone().unwrap_or_else(|| format!("disk{number}"));
        if st.disks.iter().any(|d| d.id == id) {
            return Err(Error::Scenario(format!("duplicate disk id {id}")));
        }
        let mut disk = build_disk(st, spec, id, DiskSource::Local)?;
        if disk.location.is_empty() {
            disk.location = format!(
                "PCI Slot {} : Adapter 0 : Port 0 : Target 0 : LUN {i}",
                3 + i
            );
        }
        disk.number = Some(number);
        st.disks.push(disk);
    }
    Ok(())
}

/// Makes `<root>/volumes/<guid>` exist exactly for visible volumes.
pub(crate) fn sync_volume_links(st: &mut State) -> Result<()> {
    let dir = st.layout.volumes_dir();
    let mut visible = BTreeMap::new();
    for d in &st.disks {
        for (pi, p) in d.partitions.iter().enumerate() {
            if let Some(v) = &p.volume {
                visible.insert(v.guid.clone(), d.visible_volume(pi).is_some());
            }
        }
    }
    // What the directory holds: the set this function left (a failure below leaves it unknown, so the next call
    // reads the directory again).
    let present = match st.volume_links.take() {
        Some(present) => present,
        None => std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default(),
    };
    let mut now = std::collections::BTreeSet::new();
    for name in present {
        if visible.get(&name) == Some(&true) {
            now.insert(name);
        } else {
            let path = dir.join(&name);
            super::fs::remove_link(&path).map_err(|err| Error::io(&path, err))?;
        }
    }
    for (guid, vis) in visible {
        if vis && !now.contains(&guid) {
            let link = st.layout.volume_link(&guid);
            let store = st.layout.volume_store(&guid);
            std::fs::create_dir_all(&store).map_err(|e| Error::io(&store, e))?;
            st.layout
                .links()
                .create(&store, &link)
                .map_err(|e| Error::io(&link, e))?;
            now.insert(guid);
        }
    }
    st.volume_links = Some(now);
    Ok(())
}

/// Parsed csi-proxy `DiskLocation` (Bus is never filled).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Location {
    /// Adapter number.
    pub adapter: String,
    /// Always empty, like the real server.
    pub bus: String,
    /// Target number.
    pub target: String,
    /// LUN.
    pub lun_id: String,
}

/// csi-proxy's Location parser: ≥ 5 colon-separated parts, `Adapter`/`Target`/`LUN` taken, others ignored.
pub(crate) fn parse_location(loc: &str) -> Option<Location> {
    let parts: Vec<&str> = loc.split(':').collect();
    if parts.len() < 5 {
        return None;
    }
    let mut out = Location::default();
    let mut found = false;
    for item in parts {
        let fields: Vec<&str> = item.trim().split(' ').collect();
        if fields.len() == 2 {
            found = true;
            match fields[0].trim() {
                "Adapter" => out.adapter = fields[1].trim().to_string(),
                "Target" => out.target = fields[1].trim().to_string(),
                "LUN" => out.lun_id = fields[1].trim().to_string(),
                _ => {}
            }
        }
    }
    found.then_some(out)
}

/// The server's check for an empty volume id (`pkg/server/volume/server.go`, every volume RPC but MountVolume).
fn require_volume_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::host("volume id empty"));
    }
    Ok(())
}

/// Why ListVolumesOnDisk has nothing to list.
enum Nothing {
    /// No disk with that number.
    Disk,
    /// The disk has no (visible) partitions.
    Partitions,
    /// Partitions, but no volume behind them (offline disk, reserved partition only).
    Volumes,
}

impl State {
    pub(crate) fn disk_by_number(&self, n: u32, op: DiskOp) -> Result<usize> {
        self.disks
            .iter()
            .position(|d| d.number == Some(n) && d.present())
            .ok_or_else(|| texts::disk_not_found(&self.profile, op, n))
    }

    /// Finds a visible volume by its exact `\\?\Volume{GUID}\` id (case-insensitive, as WQL `=` compares).
    pub(crate) fn find_volume(&self, id: &str) -> Option<(usize, usize)> {
        self.find_volume_by(id, false)
    }

    /// The volume a csi-proxy volume call names: case-insensitive as WQL `=` compares (the PowerShell era's
    /// `Get-Volume -UniqueId`, master `pkg/wmi/volume.go:53-56`), case-sensitive on v1.3.0, which enumerates
    /// `MSFT_Volume` and compares `UniqueId == volumeID` in Go (v1.3.0 `pkg/cim/volume.go:38-65`, `:59`).
    pub(crate) fn find_rpc_volume(&self, id: &str) -> Option<(usize, usize)> {
        self.find_volume_by(id, self.profile.version == CsiProxyVersion::V1_3_0)
    }

    fn find_volume_by(&self, id: &str, exact: bool) -> Option<(usize, usize)> {
        for (di, d) in self.disks.iter().enumerate() {
            for pi in 0..d.partitions.len() {
                if let Some(v) = d.visible_volume(pi)
                    && (if exact {
                        v.id() == id
                    } else {
                        v.id().eq_ignore_ascii_case(id)
                    })
                {
                    return Some((di, pi));
                }
            }
        }
        None
    }

    fn volume_or(&self, id: &str, op: VolumeOp) -> Result<(usize, usize)> {
        self.find_rpc_volume(id)
            .ok_or_else(|| texts::volume_not_found(&self.profile, op, id))
    }

    pub(crate) fn record_loss(
        &mut self,
        rpc: &str,
        di: usize,
        volume_id: Option<String>,
        detail: String,
    ) {
        let d = &self.disks[di];
        tracing::warn!(rpc, disk = %d.id, %detail, "data-loss event");
        self.data_loss.push(DataLossEvent {
            rpc: rpc.to_string(),
            disk_id: d.id.clone(),
            disk_number: d.number.unwrap_or(u32::MAX),
            volume_id,
            detail,
        });
    }

    // ---- Disk group ----

    /// `ListDiskLocations`: visible disks only (a disk still arriving is not in the storage cache).
    pub fn list_disk_locations(&self) -> BTreeMap<u32, Location> {
        let mut out = BTreeMap::new();
        for d in &self.disks {
            if let Some(n) = d.number
                && d.present()
                && let Some(loc) = parse_location(&d.location)
            {
                out.insert(n, loc);
            }
        }
        out
    }

    /// `PartitionDisk`: initialise GPT if RAW, then create a max-size basic partition if there is no
    /// non-reserved partition; a no-op on a partitioned disk. The new partition ends
    /// [`crate::profile::HostBehaviour::partition_slack_bytes`] below `SizeMax`, as real ones do (csi-proxy#195).
    pub fn partition_disk(&mut self, n: u32) -> Result<()> {
        let di = self.disk_by_number(n, DiskOp::Partition)?;
        let d = &self.disks[di];
        let needs_init = d.partition_style == PartitionStyle::Raw;
        let needs_part = !d
            .partitions
            .iter()
            .any(|p| p.kind != PartitionKind::Reserved);
        if !needs_init && !needs_part {
            return Ok(());
        }
        let fail = |why| texts::partition_failed(&self.profile, n, needs_init, why);
        if !d.online {
            return Err(fail(PartitionFailure::Offline));
        }
        if d.read_only {
            return Err(fail(PartitionFailure::ReadOnly));
        }
        if needs_init {
            if d.foreign_data {
                let detail = format!(
                    "PartitionDisk initialised disk {n} ({}) that held foreign data",
                    d.id
                );
                self.record_loss("PartitionDisk", di, None, detail);
            }
            let d = &mut self.disks[di];
            d.foreign_data = false;
            d.content.clear();
            d.partition_style = PartitionStyle::Gpt;
            d.partitions.clear();
            let msr = MSR_SIZE.min(d.free_space(None));
            d.partitions.push(Partition {
                number: 1,
                kind: PartitionKind::Reserved,
                size: msr,
                volume: None,
            });
        }
        let guid = self.new_guid();
        let slack = self.behaviour.partition_slack_bytes;
        // The partition is listed at once (the call returns it); its volume arrives later.
        let arrives_at = arrival::due(
            Instant::now(),
            self.behaviour.arrival.volume_after_partition(),
        );
        let d = &mut self.disks[di];
        if d.partitions
            .iter()
            .any(|p| p.kind != PartitionKind::Reserved)
        {
            return Ok(());
        }
        // v1.3.0 and master always pass a GPT basic-data `GptType` (v1.3.0 `pkg/os/disk/api.go:184-199`, `:193`;
        // master `pkg/os/disk/api.go:192-204`, `:201`), which an MBR disk refuses (the code is unverified);
        // PowerShell's `New-Partition -UseMaximumSize` makes an IFS partition there (v1.1.3 `:166-173`).
        if d.partition_style == PartitionStyle::Mbr && self.profile.backend != Backend::PowerShell {
            return Err(texts::partition_failed(
                &self.profile,
                n,
                false,
                PartitionFailure::GptTypeOnMbr,
            ));
        }
        let free = d.free_space(None);
        if free < MIB {
            return Err(texts::partition_failed(
                &self.profile,
                n,
                false,
                PartitionFailure::NoSpace,
            ));
        }
        let size = if free > slack + MIB {
            free - slack
        } else {
            free
        };
        let number = d.partitions.iter().map(|p| p.number).max().unwrap_or(0) + 1;
        d.partitions.push(Partition {
            number,
            kind: PartitionKind::Basic,
            size,
            volume: Some(Volume::new(guid.clone(), arrives_at)),
        });
        wipe_dir(&self.layout.volume_store(&guid))?;
        self.sync_links()
    }

    /// `Rescan` (`Update-HostStorageCache`): the storage cache is refreshed, so every disk and volume that has
    /// arrived shows; nothing that has not arrived does (see `arrival.rs`).
    pub fn rescan(&mut self) -> Result<()> {
        if arrival::complete(self, Instant::now(), Duration::ZERO, None) {
            self.sync_links()?;
        }
        Ok(())
    }

    /// `ListDiskIDs`: page83 and serial by disk number; one unopenable disk fails the whole call.
    pub fn list_disk_ids(&self) -> Result<BTreeMap<u32, (String, String)>> {
        let mut out = BTreeMap::new();
        for d in &self.disks {
            if let Some(n) = d.number
                && d.present()
            {
                if d.unopenable {
                    return Err(texts::disk_unopenable());
                }
                out.insert(n, (d.page83.clone(), d.serial.clone()));
            }
        }
        Ok(out)
    }

    /// `GetDiskStats`: the disk size (not the volume size).
    pub fn get_disk_stats(&self, n: u32) -> Result<i64> {
        let di = self.disk_by_number(n, DiskOp::Stats)?;
        Ok(self.disks[di].size as i64)
    }

    /// `SetDiskState`: `Set-Disk -IsOffline` / `Online()`/`Offline()`; a no-op when already in that state (the
    /// WMI code checks first; PowerShell's idempotency is unverified and chosen the same).
    pub fn set_disk_state(&mut self, n: u32, online: bool) -> Result<()> {
        let di = self.disk_by_number(n, DiskOp::SetState(online))?;
        if self.disks[di].online != online {
            self.disks[di].online = online;
            if online {
                let arrival = self.behaviour.arrival;
                self.disks[di].schedule_volumes(Instant::now(), &arrival);
            }
            self.sync_links()?;
        }
        Ok(())
    }

    /// `GetDiskState`.
    pub fn get_disk_state(&self, n: u32) -> Result<bool> {
        let di = self.disk_by_number(n, DiskOp::GetState)?;
        Ok(self.disks[di].online)
    }

    // ---- Volume group ----

    /// `ListVolumesOnDisk` (partition 0 = all partitions). PowerShell era: an unknown disk or a disk without
    /// partitions is an error, and partitions without volumes give `[""]` (stdout split on CRLF); WMI era: `[]`.
    pub fn list_volumes_on_disk(&self, n: u32, partition: u32) -> Result<Vec<String>> {
        let di = self
            .disks
            .iter()
            .position(|d| d.number == Some(n) && d.present());
        let ids: std::result::Result<Vec<String>, Nothing> = match di {
            None => Err(Nothing::Disk),
            Some(di) => {
                let d = &self.disks[di];
                let parts: Vec<&Partition> = if d.layout_visible() {
                    d.partitions
                        .iter()
                        .filter(|p| partition == 0 || p.number == partition)
                        .collect()
                } else {
                    Vec::new()
                };
                if parts.is_empty() {
                    Err(Nothing::Partitions)
                } else if !d.online {
                    Err(Nothing::Volumes)
                } else {
                    let v: Vec<String> = d
                        .partitions
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| partition == 0 || p.number == partition)
                        .filter_map(|(pi, _)| d.visible_volume(pi).map(Volume::id))
                        .collect();
                    if v.is_empty() {
                        Err(Nothing::Volumes)
                    } else {
                        Ok(v)
                    }
                }
            }
        };
        match (ids, self.profile.backend) {
            (Ok(v), _) => Ok(v),
            (Err(Nothing::Disk), Backend::PowerShell)
                if self.profile.list_volumes_unknown_disk_fails =>
            {
                Err(texts::ps_list_volumes_failed(n, partition, true))
            }
            (Err(Nothing::Partitions), Backend::PowerShell)
                if self.profile.list_volumes_without_partitions_fails =>
            {
                Err(texts::ps_list_volumes_failed(n, partition, false))
            }
            (Err(_), Backend::PowerShell) => Ok(vec![String::new()]),
            (Err(_), _) => Ok(Vec::new()),
        }
    }

    /// `IsVolumeFormatted`: FileSystemType != Unknown.
    pub fn is_volume_formatted(&self, id: &str) -> Result<bool> {
        require_volume_id(id)?;
        let (di, pi) = self.volume_or(id, VolumeOp::IsFormatted)?;
        Ok(self.disks[di].partitions[pi]
            .volume
            .as_ref()
            .is_some_and(|v| v.filesystem.is_some()))
    }

    /// `FormatVolume`: quick NTFS format, unguarded. Formatting a volume that holds data records a data-loss
    /// event (and the data is gone).
    pub fn format_volume(&mut self, id: &str) -> Result<()> {
        require_volume_id(id)?;
        let (di, pi) = self.volume_or(id, VolumeOp::Format)?;
        if self.disks[di].read_only {
            return Err(texts::format_write_protected(&self.profile, id));
        }
        let Some(v) = self.disks[di].partitions[pi].volume.clone() else {
            return Err(texts::volume_not_found(&self.profile, VolumeOp::Format, id));
        };
        let store = self.layout.volume_store(&v.guid);
        let usage = dir_usage(&store);
        if usage.entries > 0 || v.foreign_data {
            let detail = format!(
                "FormatVolume on {} (disk {}) destroyed {} file(s), {} byte(s){}",
                v.id(),
                self.disks[di].id,
                usage.files,
                usage.bytes,
                if v.foreign_data {
                    " and foreign data"
                } else {
                    ""
                }
            );
            self.record_loss("FormatVolume", di, Some(v.id()), detail);
        }
        wipe_dir(&store)?;
        if let Some(vol) = self.disks[di].partitions[pi].volume.as_mut() {
            vol.filesystem = Some("NTFS".to_string());
            vol.foreign_data = false;
        }
        Ok(())
    }

    /// `ResizeVolume` (0 = `SizeMax`), with the release's skip rule ([`crate::profile::Profile::resize_skip`]):
    /// v1.1.3 skips only when the partition is already at least the target, so sub-MiB slack reaches
    /// `Resize-Partition` and fails; v1.2.0+ skip any growth under 100 MiB. Never shrinks.
    pub fn resize_volume(&mut self, id: &str, size: i64) -> Result<()> {
        require_volume_id(id)?;
        let op = if size == 0 {
            VolumeOp::ResizeToMax
        } else {
            VolumeOp::Resize
        };
        let (di, pi) = self.volume_or(id, op)?;
        if self.profile.backend == Backend::GoOleWmi && size < 0 {
            return Err(Error::host(format!(
                "invalid negative size {size} for volume ({id})"
            )));
        }
        if size == 0 && !self.defrag_available() {
            // `Get-PartitionSupportedSize` / `MSFT_Partition.GetSupportedSize` fails while defragsvc is disabled.
            return Err(texts::supported_size_failed(&self.profile, id));
        }
        let d = &self.disks[di];
        let part = &d.partitions[pi];
        let max = (d.free_space(Some(part.number)) as i64).max(part.size as i64);
        let final_size = if size == 0 { max } else { size };
        let current = part.size as i64;
        let skip = match self.profile.resize_skip {
            ResizeSkip::CurrentAtLeastFinal => current >= final_size,
            ResizeSkip::GrowthUnder100MiB => {
                final_size - current < MIN_RESIZE_GROWTH || current >= final_size
            }
        };
        if skip {
            return Ok(());
        }
        if final_size > max || final_size - current < MIN_EXTENT {
            return Err(texts::resize_not_supported(
                &self.profile,
                id,
                size,
                final_size,
                final_size - current < MIN_EXTENT,
            ));
        }
        if d.read_only {
            return Err(texts::format_write_protected(&self.profile, id));
        }
        self.disks[di].partitions[pi].size = final_size as u64;
        Ok(())
    }

    /// The partition size and `SizeMax` of a volume (what `Get-PartitionSupportedSize` answers), for tests.
    pub fn partition_sizes(&self, id: &str) -> Option<(u64, u64)> {
        let (di, pi) = self.find_volume(id)?;
        let d = &self.disks[di];
        let p = &d.partitions[pi];
        Some((p.size, d.free_space(Some(p.number)).max(p.size)))
    }

    /// `GetVolumeStats`: (total, used) bytes.
    pub fn get_volume_stats(&self, id: &str) -> Result<(i64, i64)> {
        require_volume_id(id)?;
        let (di, pi) = self.volume_or(id, VolumeOp::Stats)?;
        let p = &self.disks[di].partitions[pi];
        let guid = p
            .volume
            .as_ref()
            .map(|v| v.guid.clone())
            .unwrap_or_default();
        let used = dir_usage(&self.layout.volume_store(&guid)).bytes;
        Ok((p.size as i64, used.min(p.size) as i64))
    }

    /// `GetDiskNumberFromVolumeID`.
    pub fn get_disk_number_from_volume_id(&self, id: &str) -> Result<u32> {
        require_volume_id(id)?;
        let (di, _) = self.volume_or(id, VolumeOp::DiskNumber)?;
        Ok(self.disks[di].number.unwrap_or_default())
    }

    /// `WriteVolumeCache` (also the first step of `UnmountVolume`): on a read-only disk it fails (chosen,
    /// **unverified**: `behaviour.read_only_flush_fails`).
    pub fn write_volume_cache(&self, id: &str) -> Result<()> {
        require_volume_id(id)?;
        let (di, _) = self.volume_or(id, VolumeOp::WriteCache)?;
        if self.disks[di].read_only && self.behaviour.read_only_flush_fails {
            return Err(texts::flush_write_protected(&self.profile, id));
        }
        Ok(())
    }

    /// Changes the size of a disk (e.g. the storage backend expanded a LUN). Partitions are untouched.
    pub fn set_disk_size(&mut self, disk_id: &str, size: u64) -> Result<()> {
        let d = self
            .disks
            .iter_mut()
            .find(|d| d.id == disk_id)
            .ok_or_else(|| Error::Scenario(format!("no disk with id {disk_id}")))?;
        let used: u64 = d.partitions.iter().map(|p| p.size).sum();
        if size < used + TABLE_OVERHEAD {
            return Err(Error::Scenario(format!(
                "disk {disk_id}: cannot shrink below its partitions"
            )));
        }
        d.size = size;
        Ok(())
    }

    /// Sets how long a disk takes to appear after a login, and its partitions and volumes after that (applies
    /// from the next login; a disk arriving now is rescheduled from now).
    pub fn set_arrival_delay(
        &mut self,
        disk_id: &str,
        delay: Duration,
        volume_delay: Duration,
        now: Instant,
    ) -> Result<()> {
        let arrival = self.behaviour.arrival;
        let d = self
            .disks
            .iter_mut()
            .find(|d| d.id == disk_id)
            .ok_or_else(|| Error::Scenario(format!("no disk with id {disk_id}")))?;
        d.arrival_delay_ms = Some(delay.as_millis() as u64);
        d.volume_arrival_delay_ms = Some(volume_delay.as_millis() as u64);
        if d.arriving() {
            d.schedule_arrival(now, &arrival);
        }
        Ok(())
    }
}
