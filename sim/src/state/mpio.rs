//! Multipath I/O: several sessions of one target, and what they show (scenario `host.mpio`, [`MpioSpec`]).
//!
//! * **The claim.** With the Multipath-IO feature installed and the Microsoft DSM claiming iSCSI disks
//!   (`Enable-MSDSMAutomaticClaim -BusType iSCSI`), a LUN reached through several sessions is one disk — an MPIO disk
//!   with one path per session — so its number, layout and volumes stay while any session lives. Without the claim,
//!   each session after the first shows the LUN again as a disk of its own (Microsoft's "MPIO on Nano Server": until
//!   MPIO is configured to claim them, disks are exposed redundantly, one per path). Such a second disk of the same
//!   LUN is modelled with the LUN's identity (page83, serial, size, the LUN in its location) but not its layout: it
//!   arrives under the SAN policy like any LUN disk, and writing to it is a data-loss event (whether Windows keeps it
//!   offline for a signature collision, `OfflineReason` 4, is **unverified**).
//! * **Several sessions of one target.** A login to a target that already has a session answers
//!   `TARGET_ALREADY_LOGGED_IN` unless it asks for multipath (`IsMultipathEnabled`): VDS's `VDS_ILF_MULTIPATH_ENABLED`
//!   "the login is allowed to proceed and create a new login session even if there is already a login session to the
//!   target" (its note: multipathing software must be present, else data corruption may occur).
//! * **A path's loss.** [`State::drop_iscsi_path`]: the sessions through one portal end (a network failure the
//!   initiator does not recover from); an MPIO disk stays while another path lives, and goes with the last
//!   (its `PDORemovePeriod` after the last path is not modelled: at once).
//! * **The hardware list.** `MSFT_MSDSMSupportedHW` does not exist without the feature; with it, the list holds the
//!   MSDSM's sample entry (`Vendor 8` / `Product 16`, the default `DsmSupportedDeviceList`: **unverified**) and, when
//!   iSCSI is claimed, `MSFT2005` / `iSCSIBusType_0x9`.

use tokio::time::Instant;

use super::iscsi::Session;
use super::{DiskSource, State};
use crate::error::{Error, Result};
use crate::scenario::MpioSpec;

impl State {
    /// Multipath I/O on the node.
    pub fn mpio(&self) -> MpioSpec {
        self.cfg.mpio
    }

    /// An administrator installs or removes Multipath I/O or its claim of iSCSI disks (and reboots: disks already
    /// attached keep what they are until their sessions end).
    pub fn set_mpio(&mut self, mpio: MpioSpec) {
        self.cfg.mpio = mpio;
    }

    /// Whether the Microsoft DSM claims iSCSI disks.
    pub fn mpio_claims_iscsi(&self) -> bool {
        self.cfg.mpio.installed && self.cfg.mpio.claim_iscsi
    }

    /// `MSFT_MSDSMSupportedHW` as (VendorId, ProductId); `None` without the Multipath-IO feature.
    pub(crate) fn msdsm_supported_hw(&self) -> Option<Vec<(String, String)>> {
        if !self.cfg.mpio.installed {
            return None;
        }
        let mut rows = vec![("Vendor 8".to_owned(), "Product 16".to_owned())];
        if self.cfg.mpio.claim_iscsi {
            rows.push(("MSFT2005".to_owned(), "iSCSIBusType_0x9".to_owned()));
        }
        Some(rows)
    }

    /// Whether disk `di` shows through session `s` (of the disk's target).
    pub(crate) fn shows_through(&self, di: usize, s: &Session) -> bool {
        let d = &self.disks[di];
        matches!(&d.source, DiskSource::Iscsi { iqn, .. } if iqn.eq_ignore_ascii_case(&s.iqn))
            && d.via_session
                .as_deref()
                .is_none_or(|v| v == s.session_identifier)
    }

    /// A new session `s` reaches the LUN `lun` whose disk is `disk_id`: the disk arrives (its first session), or a
    /// claimed MPIO disk gains a path (nothing changes on the host), or — not claimed — the LUN's disk shows again
    /// through this session as a disk of its own (module docs).
    pub(crate) fn attach_session_lun(
        &mut self,
        disk_id: &str,
        s: &Session,
        lun: u32,
        now: Instant,
    ) {
        let claimed = self.mpio_claims_iscsi();
        let Some(di) = self.disks.iter().position(|d| d.id == disk_id) else {
            return;
        };
        if self.disks[di].number.is_none() {
            self.attach_lun_disk(disk_id, s.target_number, lun, now);
            self.disks[di].via_session = (!claimed).then(|| s.session_identifier.clone());
            return;
        }
        if claimed && self.disks[di].via_session.is_none() {
            return;
        }
        let mut path = self.disks[di].clone();
        path.id = format!("{disk_id}~{}", s.session_identifier);
        path.path_of = Some(disk_id.to_owned());
        path.number = None;
        path.partitions.clear();
        path.content.clear();
        path.foreign_data = true;
        path.via_session = None;
        let id = path.id.clone();
        self.disks.push(path);
        self.attach_lun_disk(&id, s.target_number, lun, now);
        if let Some(d) = self.disks.iter_mut().find(|d| d.id == id) {
            d.via_session = Some(s.session_identifier.clone());
        }
    }

    /// Session `s` ended (already taken out of the session list): what showed only through it vanishes — its own
    /// disk of a LUN when MPIO does not claim it, an MPIO disk with its last path.
    pub(crate) fn detach_session(&mut self, s: &Session) {
        let remaining = self
            .sessions
            .iter()
            .any(|o| o.iqn.eq_ignore_ascii_case(&s.iqn));
        self.disks.retain(|d| {
            !(d.path_of.is_some() && d.via_session.as_deref() == Some(&s.session_identifier))
        });
        for d in self.disks.iter_mut() {
            let of_target = matches!(&d.source, DiskSource::Iscsi { iqn, .. } if iqn.eq_ignore_ascii_case(&s.iqn));
            if !of_target || d.path_of.is_some() {
                continue;
            }
            let gone = match d.via_session.as_deref() {
                Some(v) => v == s.session_identifier,
                None => !remaining,
            };
            if gone {
                d.number = None;
                d.via_session = None;
                d.clear_arrivals();
            }
        }
    }

    /// A path's loss: the sessions of target `iqn` through portal `address` end as after a network failure the
    /// initiator does not recover from (module docs). Returns how many ended.
    pub fn drop_iscsi_path(&mut self, iqn: &str, address: &str) -> Result<usize> {
        let (gone, kept): (Vec<Session>, Vec<Session>) = std::mem::take(&mut self.sessions)
            .into_iter()
            .partition(|s| {
                s.iqn.eq_ignore_ascii_case(iqn) && s.portal_address.eq_ignore_ascii_case(address)
            });
        self.sessions = kept;
        if gone.is_empty() {
            return Err(Error::Scenario(format!(
                "no session of {iqn} through {address}"
            )));
        }
        for s in &gone {
            self.detach_session(s);
        }
        self.sync_links()?;
        Ok(gone.len())
    }

    /// Whether the initiator refuses another session (`behaviour.iscsi_session_limit`).
    pub(crate) fn sessions_exhausted(&self) -> bool {
        self.sessions.len() >= self.behaviour.iscsi_session_limit as usize
    }
}
