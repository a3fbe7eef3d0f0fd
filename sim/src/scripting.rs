//! Host changes that no csi-proxy call makes, for tests that script the host (directly through
//! [`SimHost::with_state_mut`](crate::SimHost::with_state_mut), or after a call with
//! [`InProcess::after`](crate::inproc::InProcess::after)): a LUN whose disk only appears at the next `Rescan`, a
//! LUN presented twice, a disk whose identity changed behind its LUN, a volume whose file system Windows no longer
//! reads; and read-only views tests assert on.
//!
//! Unverified as a model of any particular release: these are plausible host states the driver must survive, set up
//! deliberately by a test, never reached by the simulator on its own.

use crate::error::{Error, Result};
use crate::state::DiskSource;
use crate::state::{State, paths};

impl State {
    fn disk_mut(&mut self, disk_id: &str) -> Result<&mut crate::state::Disk> {
        self.disks
            .iter_mut()
            .find(|d| d.id == disk_id)
            .ok_or_else(|| Error::Scenario(format!("no disk with id {disk_id}")))
    }

    /// The disks of the connected target `iqn` vanish from the host while its session stays (as when the initiator
    /// logged in but Windows has not enumerated the LUNs yet); [`State::rescan_lun_disks`] brings them back.
    pub fn hide_target_disks(&mut self, iqn: &str) -> Result<()> {
        for d in self.disks.iter_mut() {
            if let DiskSource::Iscsi { iqn: of, .. } = &d.source
                && of.eq_ignore_ascii_case(iqn)
            {
                d.number = None;
            }
        }
        self.sync_links()
    }

    /// The missing disks of every connected target appear, numbered and located as a login makes them (the effect
    /// of a `Rescan` on a host that had not enumerated them yet).
    pub fn rescan_lun_disks(&mut self) -> Result<()> {
        let adapter = self.cfg.iscsi_adapter;
        let sessions = self.sessions.clone();
        for s in &sessions {
            let luns: Vec<(u32, String)> = self
                .portals
                .iter()
                .flat_map(|p| p.targets.iter())
                .filter(|t| t.iqn.eq_ignore_ascii_case(&s.iqn))
                .flat_map(|t| t.luns.iter().cloned())
                .collect();
            for (lun, disk_id) in luns {
                if self
                    .disks
                    .iter()
                    .any(|d| d.id == disk_id && d.number.is_some())
                {
                    continue;
                }
                let mut number = 0;
                while self.disks.iter().any(|d| d.number == Some(number)) {
                    number += 1;
                }
                if let Some(d) = self.disks.iter_mut().find(|d| d.id == disk_id) {
                    d.number = Some(number);
                    d.online = d.online_on_arrival;
                    d.location = format!(
                        "Integrated : Adapter {adapter} : Port 0 : Target {} : LUN {lun}",
                        s.target_number
                    );
                }
            }
        }
        self.sync_links()
    }

    /// Replace a disk's `MSFT_Disk.Location` (e.g. to present another LUN's number: the same LUN twice).
    pub fn set_disk_location(&mut self, disk_id: &str, location: &str) -> Result<()> {
        self.disk_mut(disk_id)?.location = location.to_owned();
        Ok(())
    }

    /// Replace a disk's identifiers (another disk now sits behind the LUN).
    pub fn set_disk_identity(&mut self, disk_id: &str, page83: &str, serial: &str) -> Result<()> {
        let d = self.disk_mut(disk_id)?;
        d.page83 = page83.to_owned();
        d.serial = serial.to_owned();
        Ok(())
    }

    /// The LUN behind disk `disk_id` is cleaned on the storage system (or `Clear-Disk -RemoveData` on the node): no
    /// partition table, no partitions, nothing written on the device.
    pub fn clean_disk(&mut self, disk_id: &str) -> Result<()> {
        let d = self.disk_mut(disk_id)?;
        d.partition_style = crate::scenario::PartitionStyle::Raw;
        d.partitions.clear();
        d.content.clear();
        d.foreign_data = false;
        self.sync_links()
    }

    /// Windows stops reading the file system of volume `id` (`\\?\Volume{…}\`, visible or not), which keeps its data:
    /// `FileSystemType` Unknown through csi-proxy (`IsVolumeFormatted` false) and `MSFT_Volume`, and the Windows
    /// view's `GetVolumeInformationW` / `GetDiskFreeSpaceExW` on it fail with 1005 — as an NTFS damaged by an unclean
    /// iSCSI drop, or a locked BitLocker volume, shows. Formatting it is a data-loss event. Unverified: that both show
    /// exactly so (`docs/real-node-checks.md`, "Volumes Windows no longer reads").
    pub fn make_volume_unreadable(&mut self, id: &str) -> Result<()> {
        let v = self.volume_mut(id)?;
        v.filesystem = None;
        v.foreign_data = true;
        Ok(())
    }

    /// Windows reads volume `id`'s NTFS again (a `chkdsk` repaired it, or BitLocker unlocked it): the reverse of
    /// [`State::make_volume_unreadable`], its data as they were.
    pub fn make_volume_readable(&mut self, id: &str) -> Result<()> {
        let v = self.volume_mut(id)?;
        v.filesystem = Some("NTFS".to_owned());
        v.foreign_data = false;
        Ok(())
    }

    /// The LUN holding volume `id` was re-partitioned by another system: in its place a volume with GUID `guid`
    /// (lower case, no braces), with no file system Windows reads and another system's data on it.
    pub fn replace_volume(&mut self, id: &str, guid: &str) -> Result<()> {
        let v = self.volume_mut(id)?;
        v.guid = guid.to_owned();
        v.filesystem = None;
        v.foreign_data = true;
        self.sync_links()
    }

    fn volume_mut(&mut self, id: &str) -> Result<&mut crate::state::Volume> {
        self.disks
            .iter_mut()
            .flat_map(|d| d.partitions.iter_mut())
            .filter_map(|p| p.volume.as_mut())
            .find(|v| v.id().eq_ignore_ascii_case(id.trim()))
            .ok_or_else(|| Error::Scenario(format!("no volume {id}")))
    }

    /// Whether `path` (any Windows path the host can reach) resolves, following links and mount points.
    pub fn path_resolves(&self, path: &str) -> bool {
        self.real_path(path)
            .is_some_and(|real| self.layout.links().resolve(&real).exists())
    }

    /// Whether a directory exists on a share's storage (`rel` relative to the share root, `\` or `/` separated),
    /// whether or not the share is mapped.
    pub fn share_has_dir(&self, server: &str, share: &str, rel: &str) -> bool {
        let Some(rel) = paths::safe_relative(rel) else {
            return false;
        };
        self.layout
            .share_store(&server.to_lowercase(), &share.to_lowercase())
            .join(rel)
            .is_dir()
    }
}

#[cfg(test)]
mod tests {
    use crate::{HostOptions, Scenario, State};

    fn state(json: &str) -> (State, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let mut sc = Scenario::from_json(json).unwrap();
        sc.host.behaviour.arrival = crate::Arrival::INSTANT;
        (
            State::new(&sc, dir.path(), &HostOptions::default()).unwrap(),
            dir,
        )
    }

    const IQN: &str = "iqn.2024-01.io.example:t";

    #[test]
    fn hidden_lun_disks_come_back_with_a_rescan() {
        let (mut s, _d) = state(&format!(
            r#"{{"iscsi":{{"portals":[{{"address":"10.0.0.5","targets":[{{"iqn":"{IQN}","luns":[{{"lun":3,"size":1073741824,"id":"l3"}}]}}]}}]}}}}"#
        ));
        s.add_target_portal("10.0.0.5", 3260).unwrap();
        s.connect_target(
            "10.0.0.5",
            3260,
            IQN,
            crate::state::AuthType::None,
            "",
            &Default::default(),
        )
        .unwrap();
        let before = s.get_target_disks("10.0.0.5", 3260, IQN).unwrap();
        assert_eq!(before.len(), 1);
        s.hide_target_disks(IQN).unwrap();
        assert!(
            s.get_target_disks("10.0.0.5", 3260, IQN)
                .unwrap()
                .is_empty()
        );
        s.rescan_lun_disks().unwrap();
        assert_eq!(s.get_target_disks("10.0.0.5", 3260, IQN).unwrap(), before);
        let loc = &s.list_disk_locations()[&before[0].parse::<u32>().unwrap()];
        assert_eq!(loc.lun_id, "3");
        s.set_disk_location("l3", "Integrated : Adapter 2 : Port 0 : Target 0 : LUN 9")
            .unwrap();
        assert_eq!(s.list_disk_locations().values().next().unwrap().lun_id, "9");
        s.set_disk_identity("l3", "p83", "sn").unwrap();
        assert_eq!(s.list_disk_ids().unwrap().values().next().unwrap().0, "p83");
        assert!(s.set_disk_identity("nope", "", "").is_err());
    }

    #[test]
    fn volumes_windows_no_longer_reads_keep_their_data() {
        let (mut s, _d) = state(&format!(
            r#"{{"iscsi":{{"portals":[{{"address":"10.0.0.5","targets":[{{"iqn":"{IQN}","luns":[{{"lun":0,
            "size":1073741824,"id":"l0","partition_style":"gpt","partitions":[{{"size":0,"volume":{{
            "filesystem":"NTFS","guid":"11111111-2222-4333-8444-555555555555","files":{{"a.txt":"kept"}}}}}}]}}]}}]}}]}}}}"#
        ));
        s.add_target_portal("10.0.0.5", 3260).unwrap();
        s.connect_target(
            "10.0.0.5",
            3260,
            IQN,
            crate::state::AuthType::None,
            "",
            &Default::default(),
        )
        .unwrap();
        let n = s.disks().iter().find(|d| d.id == "l0").unwrap().number;
        s.set_disk_state(n.unwrap(), true).unwrap();
        let id = r"\\?\Volume{11111111-2222-4333-8444-555555555555}\";
        assert!(s.is_volume_formatted(id).unwrap());
        s.make_volume_unreadable(id).unwrap();
        // Unknown, still listed, its stats answered; its data kept.
        assert!(!s.is_volume_formatted(id).unwrap());
        assert!(s.get_volume_stats(id).is_ok());
        s.make_volume_readable(id).unwrap();
        assert!(s.is_volume_formatted(id).unwrap());
        assert_eq!(s.get_volume_stats(id).unwrap().1, 4);
        // Formatting an unreadable volume destroys data, even with nothing Windows can list on it.
        s.make_volume_unreadable(id).unwrap();
        s.format_volume(id).unwrap();
        assert_eq!(s.data_loss_events().len(), 1);
        // Re-partitioned elsewhere: another GUID with foreign data; cleaned: RAW.
        let other = "0badc0de-0000-4000-8000-000000000001";
        s.replace_volume(id, other).unwrap();
        assert!(s.is_volume_formatted(id).is_err());
        assert!(
            !s.is_volume_formatted(&format!(r"\\?\Volume{{{other}}}\"))
                .unwrap()
        );
        s.clean_disk("l0").unwrap();
        let d = s.disks().iter().find(|d| d.id == "l0").unwrap();
        assert!(d.partitions.is_empty());
        assert_eq!(d.partition_style, crate::scenario::PartitionStyle::Raw);
        assert!(s.make_volume_unreadable(id).is_err());
    }

    #[test]
    fn share_dirs_and_resolution() {
        let (s, _d) = state(
            r#"{"smb":{"servers":[{"name":"srv","shares":[{"name":"data","guest":true,"files":{"a/b/f.txt":"x"}}]}]}}"#,
        );
        assert!(s.share_has_dir("SRV", "Data", r"a\b"));
        assert!(!s.share_has_dir("srv", "data", "nope"));
        assert!(!s.share_has_dir("srv", "data", ".."));
        assert!(s.path_resolves(r"C:\var\lib\kubelet"));
        assert!(!s.path_resolves(r"C:\var\lib\kubelet\missing"));
    }
}
