//! iSCSI portals, targets, sessions and the disks behind LUNs (the Iscsi API group).
//!
//! Repeat-call behaviour, IQN matching and error texts follow the release being played
//! ([`crate::profile::Profile`]): the PowerShell era (v1.1.3, v1.2.1) errors on a ConnectTarget to a connected
//! target and on GetTargetDisks/DisconnectTarget of an unconnected one and matches IQNs case-insensitively;
//! v1.3.0 checks the session first but matches IQNs exact-case and dies on a miss; master answers `not found`.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::State;
use super::disk::{DiskSource, build_disk};
use crate::error::{Error, Result};
use crate::profile::texts::{self, LoginFailure, PsTargetFailure, TargetOp};
use crate::profile::{Backend, IqnMatch, OnRepeat};
use crate::scenario::{DiskSpec, IscsiSpec, TargetChap, TargetSpec};
use crate::secret::Secret;

/// Login authentication type (csi-proxy's `AuthenticationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AuthType {
    /// NONE = 0
    None,
    /// ONE_WAY_CHAP = 1
    OneWayChap,
    /// MUTUAL_CHAP = 2
    MutualChap,
}

/// A target behind a portal.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// IQN, spelled as the array reports it (`MSFT_iSCSITarget.NodeAddress`).
    pub iqn: String,
    /// Login authentication (secrets never serialised).
    #[serde(skip)]
    pub chap: TargetChap,
    /// (LUN, disk id).
    pub luns: Vec<(u32, String)>,
}

/// A portal of the storage network.
#[derive(Debug, Clone, Serialize)]
pub struct Portal {
    /// Address.
    pub address: String,
    /// Port.
    pub port: u32,
    /// Whether discovery needs CHAP.
    pub discovery_chap: bool,
    /// The discovery CHAP credentials the portal accepts (never serialised).
    #[serde(skip)]
    pub discovery_credentials: Option<(String, Secret)>,
    /// Whether the portal is added on the host (`MSFT_iSCSITargetPortal` exists).
    pub added: bool,
    /// The discovery CHAP the initiator keeps for the portal, which its SendTargets (`Update`) presents: set when the
    /// portal is added (the administrator's for a preconfigured one); `New` on a portal already added leaves it
    /// (**unverified**, real-node check N31). Never serialised.
    #[serde(skip)]
    pub added_with: Option<(String, Secret)>,
    /// Windows' discovery cache of this portal: the IQNs (lower-cased) its last SendTargets reported. Filled when the
    /// portal is added; refreshed only by what row `discovery_refresh` lists (a target the array creates later,
    /// [`State::add_target`], is not in it until then).
    pub discovered: BTreeSet<String>,
    /// Targets.
    pub targets: Vec<Target>,
    /// Whether the portal answers on the storage network ([`State::set_portal_reachable`]).
    pub reachable: bool,
}

/// A connected session. It keeps the credentials it logged in with: session recovery re-authenticates with
/// them and the node's current mutual CHAP secret.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    /// Portal address.
    pub portal_address: String,
    /// Portal port.
    pub portal_port: u32,
    /// Target IQN (as the target reports it).
    pub iqn: String,
    /// SCSI target number assigned on the iSCSI adapter.
    pub target_number: u32,
    /// Authentication used at login.
    pub auth: AuthType,
    /// CHAP user name used at login.
    pub chap_username: String,
    /// CHAP secret used at login (never serialised).
    #[serde(skip)]
    pub chap_secret: Secret,
    /// Logged in with `IsPersistent` (only through the Windows view: csi-proxy never sets it); its persistent login
    /// record is in [`State::persistent_logins`] until `Unregister`.
    #[serde(default)]
    pub persistent: bool,
    /// `MSFT_iSCSISession.SessionIdentifier` (deterministic: boot and SCSI target number).
    pub session_identifier: String,
}

/// The outcome of one session's recovery ([`State::recover_iscsi_sessions`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SessionRecovery {
    /// Target IQN.
    pub iqn: String,
    /// Whether the session logged back in (false: it is gone and its disks vanished).
    pub recovered: bool,
    /// Why not.
    pub reason: Option<String>,
}

pub(crate) fn load(st: &mut State, spec: &IscsiSpec) -> Result<()> {
    for p in &spec.portals {
        let mut targets = Vec::new();
        for t in &p.targets {
            let mut luns = Vec::new();
            for l in &t.luns {
                let id = l
                    .disk
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("{}/lun{}", t.iqn, l.lun));
                if luns.iter().any(|(n, _)| *n == l.lun) {
                    return Err(Error::Scenario(format!(
                        "target {}: duplicate LUN {}",
                        t.iqn, l.lun
                    )));
                }
                let mut disk = lun_disk(st, &l.disk, id.clone(), &t.iqn, l.lun)?;
                disk.arrival_delay_ms = l.arrival_delay_ms;
                disk.volume_arrival_delay_ms = l.volume_arrival_delay_ms;
                st.disks.push(disk);
                luns.push((l.lun, id));
            }
            targets.push(Target {
                iqn: t.iqn.clone(),
                chap: t.chap.clone(),
                luns,
            });
        }
        let discovered = if p.preconfigured {
            targets.iter().map(|t| t.iqn.to_lowercase()).collect()
        } else {
            BTreeSet::new()
        };
        st.portals.push(Portal {
            address: p.address.clone(),
            port: p.port,
            discovery_chap: p.discovery_chap.is_some(),
            discovery_credentials: p
                .discovery_chap
                .as_ref()
                .map(|c| (c.username.clone(), c.secret.clone())),
            added: p.preconfigured,
            added_with: p
                .discovery_chap
                .as_ref()
                .filter(|_| p.preconfigured)
                .map(|c| (c.username.clone(), c.secret.clone())),
            discovered,
            targets,
            reachable: true,
        });
    }
    Ok(())
}

/// Builds the disk behind a LUN: it arrives online only if the LUN says so or the SAN policy brings shared-bus
/// disks online.
fn lun_disk(
    st: &mut State,
    spec: &DiskSpec,
    id: String,
    iqn: &str,
    lun: u32,
) -> Result<super::Disk> {
    if st.disks.iter().any(|d| d.id == id) {
        return Err(Error::Scenario(format!("duplicate disk id {id}")));
    }
    let mut disk = build_disk(
        st,
        spec,
        id,
        DiskSource::Iscsi {
            iqn: iqn.to_string(),
            lun,
        },
    )?;
    let online = spec
        .online
        .unwrap_or_else(|| st.cfg.san_policy.shared_disk_online());
    disk.online = online;
    disk.online_on_arrival = online;
    Ok(disk)
}

/// Removes a session's disks from the host (numbers freed, volumes invisible).
pub(crate) fn detach_session_disks(st: &mut State, s: &Session) {
    for d in st.disks.iter_mut() {
        if let DiskSource::Iscsi { iqn, .. } = &d.source
            && iqn.eq_ignore_ascii_case(&s.iqn)
        {
            d.number = None;
            d.clear_arrivals();
        }
    }
}

pub(crate) fn port_or_default(port: u32) -> u32 {
    if port == 0 { 3260 } else { port }
}

pub(crate) fn chap_secret_len_ok(s: &str) -> bool {
    (12..=16).contains(&s.len())
}

/// How a target lookup ended.
enum Lookup {
    Found(usize, usize),
    PortalMissing,
    TargetMissing,
}

impl State {
    fn portal_index(&self, address: &str, port: u32) -> Option<usize> {
        self.portals
            .iter()
            .position(|p| p.address.eq_ignore_ascii_case(address) && p.port == port)
    }

    fn portal_error(&self, what: &str, address: &str, port: u32) -> Error {
        match self.profile.backend {
            Backend::PowerShell => Error::host(format!(
                "{what}. cmd {}, output: {}, err: exit status 1",
                "Get-IscsiTargetPortal -TargetPortalAddress ${Env:iscsi_tp_address} -TargetPortalPortNumber ${Env:iscsi_tp_port}",
                texts::ps_not_found(
                    "Get-IscsiTargetPortal",
                    "MSFT_iSCSITargetPortal",
                    "TargetPortalAddress",
                    address,
                    "Get-IscsiTargetPortal -TargetPortalAddress ${Env:iscsi_tp_address} -TargetPortalPortNumber ${Env:iscsi_tp_port}",
                )
            )),
            Backend::MicrosoftWmi => Error::host(format!(
                "error query target portal at ({address}:{port}). err: {}",
                texts::WMI_NOT_FOUND
            )),
            Backend::GoOleWmi => Error::host(format!(
                "error query target portal at ({address}:{port}). err: failed to query iSCSI target portal at ({address}:{port}). error: {}",
                texts::GOOLE_NOT_FOUND
            )),
        }
    }

    /// SendTargets through portal `pi`: its discovery cache becomes the targets the array has now.
    pub(crate) fn send_targets(&mut self, pi: usize) {
        let p = &mut self.portals[pi];
        p.discovered = p.targets.iter().map(|t| t.iqn.to_lowercase()).collect();
    }

    /// `AddTargetPortal`: PowerShell `New-IscsiTargetPortal` (idempotent per democratic-csi; it re-runs discovery
    /// only with `portal_readd_refreshes`, unverified) / WMI no-op when present; otherwise contacts the portal and
    /// discovers its targets (row `discovery_refresh`).
    pub fn add_target_portal(&mut self, address: &str, port: u32) -> Result<()> {
        let port = port_or_default(port);
        let backend = self.profile.backend;
        let fail = |text: &str| {
            Error::host(match backend {
                Backend::PowerShell => format!(
                    "error adding target portal. cmd New-IscsiTargetPortal -TargetPortalAddress ${{Env:iscsi_tp_address}} -TargetPortalPortNumber ${{Env:iscsi_tp_port}}, output: {}, err: exit status 1",
                    texts::ps_cim_error(
                        "New-IscsiTargetPortal",
                        text,
                        "New-IscsiTargetPortal -TargetPortalAddress ${Env:iscsi_tp_address} -TargetPortalPortNumber ${Env:iscsi_tp_port}",
                        "MSFT_iSCSITargetPortal",
                        "HRESULT 0xefff0003",
                    )
                ),
                Backend::MicrosoftWmi => format!(
                    "error adding target portal at ({address}:{port}). err: failed to create iSCSI target portal. result: -1, error: {}",
                    texts::ole_exception(text)
                ),
                Backend::GoOleWmi => format!(
                    "error adding target portal at ({address}:{port}). err: {}",
                    texts::ole_exception(text)
                ),
            })
        };
        let Some(pi) = self.portal_index(address, port) else {
            return Err(fail("Connection Failed."));
        };
        if self.portals[pi].added {
            if backend == Backend::PowerShell
                && self.behaviour.portal_readd_refreshes
                && self.portals[pi].reachable
            {
                self.send_targets(pi);
            }
            return Ok(());
        }
        if !self.portals[pi].reachable {
            return Err(fail("Connection Failed."));
        }
        if self.portals[pi].discovery_chap {
            return Err(fail("Authentication Failure."));
        }
        self.portals[pi].added = true;
        self.send_targets(pi);
        Ok(())
    }

    /// `DiscoverTargetPortal`: the IQNs of the portal's cached targets, in the array's spelling. Every release only
    /// reads the cache (`Get-IscsiTargetPortal … | Get-IscsiTarget`; the `MSFT_iSCSITargetToiSCSITargetPortal`
    /// association): a target the array created after the portal was added is not listed (row `discovery_refresh`).
    pub fn discover_target_portal(&mut self, address: &str, port: u32) -> Result<Vec<String>> {
        let port = port_or_default(port);
        let pi = self
            .portal_index(address, port)
            .filter(|&i| self.portals[i].added);
        let Some(pi) = pi else {
            return Err(texts::discover_failed(&self.profile, address, port));
        };
        let p = &self.portals[pi];
        Ok(p.targets
            .iter()
            .filter(|t| p.discovered.contains(&t.iqn.to_lowercase()))
            .map(|t| t.iqn.clone())
            .collect())
    }

    /// `RemoveTargetPortal`: fails when absent; forgets every target discovered through it.
    pub fn remove_target_portal(&mut self, address: &str, port: u32) -> Result<()> {
        let port = port_or_default(port);
        let pi = self
            .portal_index(address, port)
            .filter(|&i| self.portals[i].added);
        let Some(pi) = pi else {
            return Err(self.portal_error("error removing target portal", address, port));
        };
        let p = &mut self.portals[pi];
        p.added = false;
        p.added_with = None;
        p.discovered.clear();
        Ok(())
    }

    /// An administrator changes the portal's discovery CHAP on the array (`None`: discovery without CHAP). The
    /// host keeps what it added the portal with, so its next SendTargets is refused until the portal is added again
    /// with the new credentials.
    pub fn set_discovery_chap(
        &mut self,
        address: &str,
        port: u32,
        credentials: Option<(String, Secret)>,
    ) -> Result<()> {
        let port = port_or_default(port);
        let pi = self.portal_index(address, port).ok_or_else(|| {
            self.portal_error("no such portal on the storage network", address, port)
        })?;
        let p = &mut self.portals[pi];
        p.discovery_chap = credentials.is_some();
        p.discovery_credentials = credentials;
        Ok(())
    }

    /// `ListTargetPortals`.
    pub fn list_target_portals(&self) -> Vec<(String, u32)> {
        self.portals
            .iter()
            .filter(|p| p.added)
            .map(|p| (p.address.clone(), p.port))
            .collect()
    }

    /// Finds a discovered target through an added portal, matching the IQN as the release does.
    fn lookup(&self, address: &str, port: u32, iqn: &str) -> Lookup {
        let Some(pi) = self
            .portal_index(address, port)
            .filter(|&i| self.portals[i].added)
        else {
            return Lookup::PortalMissing;
        };
        let p = &self.portals[pi];
        let exact = self.profile.iqn_match != IqnMatch::CaseInsensitive;
        let ti = p.targets.iter().position(|t| {
            p.discovered.contains(&t.iqn.to_lowercase())
                && if exact {
                    t.iqn == iqn
                } else {
                    t.iqn.eq_ignore_ascii_case(iqn)
                }
        });
        match ti {
            Some(ti) => Lookup::Found(pi, ti),
            None => Lookup::TargetMissing,
        }
    }

    /// The WMI-era answer to a lookup that failed: `not found`, or (v1.3.0, target miss) the nil dereference
    /// that kills csi-proxy.
    fn wmi_lookup_failed(&mut self, lookup: &Lookup, address: &str, port: u32, iqn: &str) -> Error {
        match lookup {
            Lookup::TargetMissing if self.profile.iqn_match == IqnMatch::ExactOrCrash => {
                self.crash(texts::NIL_DEREF)
            }
            _ => texts::wmi_target_not_found(
                &self.profile,
                iqn,
                address,
                port,
                matches!(lookup, Lookup::PortalMissing),
            ),
        }
    }

    fn session_index(&self, iqn: &str) -> Option<usize> {
        self.sessions
            .iter()
            .position(|s| s.iqn.eq_ignore_ascii_case(iqn))
    }

    /// Checks a login's credentials against a target and the node's current mutual CHAP secret.
    pub(crate) fn check_login(
        &self,
        target: &Target,
        auth: AuthType,
        chap_username: &str,
        chap_secret: &Secret,
    ) -> std::result::Result<(), LoginFailure> {
        if auth != AuthType::None && !chap_secret_len_ok(chap_secret.expose()) {
            return Err(LoginFailure::BadChapSecret);
        }
        let creds_match =
            |u: &str, s: &Secret| u == chap_username && s.expose() == chap_secret.expose();
        match &target.chap {
            TargetChap::None => Ok(()),
            TargetChap::OneWay { username, secret } => {
                if auth == AuthType::None || !creds_match(username, secret) {
                    return Err(LoginFailure::Authentication);
                }
                Ok(())
            }
            TargetChap::Mutual {
                username,
                secret,
                target_secret,
            } => {
                if auth != AuthType::MutualChap || !creds_match(username, secret) {
                    return Err(LoginFailure::Authentication);
                }
                if self.mutual_chap_secret.as_ref().map(Secret::expose)
                    != Some(target_secret.expose())
                {
                    return Err(LoginFailure::Authentication);
                }
                Ok(())
            }
        }
    }

    /// `ConnectTarget`: logs in (checking CHAP) and the LUNs' disks appear (after their arrival delay). A target
    /// that already has a session: an error in the PowerShell era, a no-op from v1.3.0.
    pub fn connect_target(
        &mut self,
        address: &str,
        port: u32,
        iqn: &str,
        auth: AuthType,
        chap_username: &str,
        chap_secret: &Secret,
    ) -> Result<()> {
        let port = port_or_default(port);
        let report = texts::wmi_report(&self.profile, self.behaviour.wmi_failures);
        let login_err = |st: &State, why| {
            texts::login_failed(
                &st.profile,
                report,
                address,
                port,
                !chap_username.is_empty(),
                !chap_secret.is_empty(),
                why,
            )
        };
        let lookup = self.lookup(address, port, iqn);
        let (pi, ti) = match lookup {
            Lookup::Found(pi, ti) => (pi, ti),
            _ if self.profile.backend == Backend::PowerShell => {
                // Connect-IscsiTarget does not look the portal up: it fails to find the target.
                return Err(login_err(self, LoginFailure::TargetNotFound)
                    .unwrap_or_else(|| Error::host("unreachable")));
            }
            ref l => return Err(self.wmi_lookup_failed(l, address, port, iqn)),
        };
        if self.session_index(iqn).is_some() {
            return match self.profile.connect_target_when_connected {
                OnRepeat::NoOp => Ok(()),
                OnRepeat::Fails => match login_err(self, LoginFailure::AlreadyLoggedIn) {
                    Some(e) => Err(e),
                    None => Ok(()),
                },
            };
        }
        if !self.portals[pi].reachable {
            return Err(login_err(self, LoginFailure::ConnectionFailed)
                .unwrap_or_else(|| Error::host("unreachable")));
        }
        let target = self.portals[pi].targets[ti].clone();
        if let Err(why) = self.check_login(&target, auth, chap_username, chap_secret) {
            return match login_err(self, why) {
                Some(e) => Err(e),
                // v1.3.0 ignores a non-zero ReturnValue: "success" without a session.
                None => Ok(()),
            };
        }
        self.log_in(pi, ti, port, auth, chap_username, chap_secret, false);
        self.sync_links()
    }

    /// A new session to target `ti` of portal `pi`: the lowest free SCSI target number, the LUNs' disks scheduled
    /// to arrive. `persistent` records the login for the next boot ([`State::persistent_logins`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn log_in(
        &mut self,
        pi: usize,
        ti: usize,
        port: u32,
        auth: AuthType,
        chap_username: &str,
        chap_secret: &Secret,
        persistent: bool,
    ) -> Session {
        let target = self.portals[pi].targets[ti].clone();
        let mut target_number = 0;
        while self
            .sessions
            .iter()
            .any(|s| s.target_number == target_number)
        {
            target_number += 1;
        }
        let session = Session {
            portal_address: self.portals[pi].address.clone(),
            portal_port: port,
            iqn: target.iqn.clone(),
            target_number,
            auth,
            chap_username: chap_username.to_string(),
            chap_secret: chap_secret.clone(),
            persistent,
            session_identifier: format!(
                "ffffe00{:09x}-{:016x}",
                self.boots,
                0x4000_0137_0000_0000u64 + u64::from(target_number)
            ),
        };
        self.sessions.push(session.clone());
        if persistent {
            self.persistent_logins
                .retain(|p| !p.iqn.eq_ignore_ascii_case(&session.iqn));
            self.persistent_logins.push(session.clone());
        }
        let now = Instant::now();
        for (lun, disk_id) in &target.luns {
            self.attach_lun_disk(disk_id, target_number, *lun, now);
        }
        session
    }

    /// The MSiSCSI service at boot: every persistent login record logs in again with the credentials it was made
    /// with and the node's current mutual CHAP secret (Microsoft's `Connect-IscsiTarget -IsPersistent` page: "the
    /// session is re-established after a restart"); a login that fails leaves its record for the next boot.
    pub(crate) fn restore_persistent_logins(&mut self) {
        let records = self.persistent_logins.clone();
        for r in records {
            let found = self.portals.iter().enumerate().find_map(|(pi, p)| {
                p.targets
                    .iter()
                    .position(|t| t.iqn.eq_ignore_ascii_case(&r.iqn))
                    .filter(|_| p.added && p.address.eq_ignore_ascii_case(&r.portal_address))
                    .map(|ti| (pi, ti))
            });
            let Some((pi, ti)) = found else {
                tracing::info!(iqn = %r.iqn, "persistent login: the target is no longer discovered");
                continue;
            };
            let target = self.portals[pi].targets[ti].clone();
            match self.check_login(&target, r.auth, &r.chap_username, &r.chap_secret) {
                Ok(()) => {
                    self.log_in(
                        pi,
                        ti,
                        r.portal_port,
                        r.auth,
                        &r.chap_username,
                        &r.chap_secret,
                        true,
                    );
                }
                Err(why) => {
                    tracing::info!(iqn = %r.iqn, ?why, "persistent login failed at boot");
                }
            }
        }
    }

    /// Makes a LUN's disk appear: the lowest free disk number, the session's SCSI address, online per its SAN
    /// policy, visible after its arrival delay.
    pub(crate) fn attach_lun_disk(
        &mut self,
        disk_id: &str,
        target_number: u32,
        lun: u32,
        now: Instant,
    ) {
        let adapter = self.cfg.iscsi_adapter;
        let arrival = self.behaviour.arrival;
        let mut number = 0;
        while self.disks.iter().any(|d| d.number == Some(number)) {
            number += 1;
        }
        if let Some(d) = self.disks.iter_mut().find(|d| d.id == disk_id) {
            d.number = Some(number);
            d.online = d.online_on_arrival;
            d.location = format!(
                "Integrated : Adapter {adapter} : Port 0 : Target {target_number} : LUN {lun}"
            );
            d.schedule_arrival(now, &arrival);
        }
    }

    /// `DisconnectTarget`: the LUNs' disks vanish. A target without a session: a no-op from v1.3.0; in the
    /// PowerShell era `Disconnect-IscsiTarget` fails (configurable: `ps_disconnect_unconnected`).
    pub fn disconnect_target(&mut self, address: &str, port: u32, iqn: &str) -> Result<()> {
        let port = port_or_default(port);
        let lookup = self.lookup(address, port, iqn);
        let ps = self.profile.backend == Backend::PowerShell;
        match lookup {
            Lookup::Found(..) => {}
            Lookup::PortalMissing if ps => {
                return Err(texts::ps_target_call_failed(
                    TargetOp::Disconnect,
                    address,
                    PsTargetFailure::PortalMissing,
                ));
            }
            Lookup::TargetMissing if ps => {
                return Err(texts::ps_target_call_failed(
                    TargetOp::Disconnect,
                    address,
                    PsTargetFailure::TargetMissing,
                ));
            }
            ref l => return Err(self.wmi_lookup_failed(l, address, port, iqn)),
        }
        match self.session_index(iqn) {
            Some(si) => {
                let s = self.sessions.remove(si);
                detach_session_disks(self, &s);
                self.sync_links()
            }
            None => {
                let policy = if ps {
                    self.behaviour.ps_disconnect_unconnected
                } else {
                    self.profile.disconnect_target_when_not_connected
                };
                match policy {
                    OnRepeat::NoOp => Ok(()),
                    OnRepeat::Fails => Err(texts::ps_target_call_failed(
                        TargetOp::Disconnect,
                        address,
                        PsTargetFailure::NotConnected,
                    )),
                }
            }
        }
    }

    /// `GetTargetDisks`: disk numbers (decimal strings) of the session's visible disks. A target without a
    /// session: an error in the PowerShell era, empty from v1.3.0.
    pub fn get_target_disks(&mut self, address: &str, port: u32, iqn: &str) -> Result<Vec<String>> {
        let port = port_or_default(port);
        let lookup = self.lookup(address, port, iqn);
        let ps = self.profile.backend == Backend::PowerShell;
        let (pi, ti) = match lookup {
            Lookup::Found(pi, ti) => (pi, ti),
            Lookup::PortalMissing if ps => {
                return Err(texts::ps_target_call_failed(
                    TargetOp::GetDisks,
                    address,
                    PsTargetFailure::PortalMissing,
                ));
            }
            Lookup::TargetMissing if ps => {
                return Err(texts::ps_target_call_failed(
                    TargetOp::GetDisks,
                    address,
                    PsTargetFailure::TargetMissing,
                ));
            }
            ref l => return Err(self.wmi_lookup_failed(l, address, port, iqn)),
        };
        if self.session_index(iqn).is_none() {
            return match self.profile.get_target_disks_when_not_connected {
                OnRepeat::NoOp => Ok(Vec::new()),
                OnRepeat::Fails => Err(texts::ps_target_call_failed(
                    TargetOp::GetDisks,
                    address,
                    PsTargetFailure::NotConnected,
                )),
            };
        }
        let t = &self.portals[pi].targets[ti];
        Ok(t.luns
            .iter()
            .filter_map(|(_, id)| {
                self.disks
                    .iter()
                    .find(|d| &d.id == id)
                    .filter(|d| d.present())
                    .and_then(|d| d.number)
            })
            .map(|n| n.to_string())
            .collect())
    }

    /// `SetMutualChapSecret`: node-global.
    pub fn set_mutual_chap_secret(&mut self, secret: &Secret) -> Result<()> {
        if !secret.is_empty() && !chap_secret_len_ok(secret.expose()) {
            let msg = "The CHAP secret given is invalid. Maximum size of CHAP secret is 16 bytes. Minimum size is 12 bytes if IPSec is not used.";
            return Err(Error::host(match self.profile.backend {
                Backend::PowerShell => format!(
                    "error setting mutual chap secret. cmd Set-IscsiChapSecret -ChapSecret ${{Env:iscsi_mutual_chap_secret}}, output: {}, err: exit status 1",
                    texts::ps_cim_error(
                        "Set-IscsiChapSecret",
                        msg,
                        "Set-IscsiChapSecret -ChapSecret ${Env:iscsi_mutual_chap_secret}",
                        "MSFT_iSCSISession",
                        "HRESULT 0xefff0067",
                    )
                ),
                Backend::MicrosoftWmi => format!(
                    "error setting mutual chap secret. result: -1, err: {}",
                    texts::ole_exception(msg)
                ),
                Backend::GoOleWmi => format!(
                    "error setting mutual chap secret. err: {}",
                    texts::ole_exception(msg)
                ),
            }));
        }
        self.mutual_chap_secret = (!secret.is_empty()).then(|| secret.clone());
        Ok(())
    }

    // ---- control (admin / tests) ----

    /// Changes what a target requires for login (e.g. the array's CHAP secret was rotated). Existing sessions
    /// stay until they recover ([`State::recover_iscsi_sessions`]).
    pub fn set_target_chap(&mut self, iqn: &str, chap: TargetChap) -> Result<()> {
        let t = self
            .portals
            .iter_mut()
            .flat_map(|p| p.targets.iter_mut())
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
            .ok_or_else(|| Error::Scenario(format!("no target {iqn}")))?;
        t.chap = chap;
        Ok(())
    }

    /// Session recovery (the connection to the target dropped and the initiator logs in again): each session
    /// (of `iqn`, or all) re-authenticates with the credentials it logged in with and the node's *current* mutual
    /// CHAP secret. A session that fails is gone: its disks vanish and mount points on them dangle.
    pub fn recover_iscsi_sessions(&mut self, iqn: Option<&str>) -> Result<Vec<SessionRecovery>> {
        let mut out = Vec::new();
        let mut failed = Vec::new();
        for (si, s) in self.sessions.iter().enumerate() {
            if iqn.is_some_and(|i| !s.iqn.eq_ignore_ascii_case(i)) {
                continue;
            }
            let target = self
                .portals
                .iter()
                .flat_map(|p| p.targets.iter())
                .find(|t| t.iqn.eq_ignore_ascii_case(&s.iqn));
            let outcome = match target {
                None => Err("the target is gone".to_string()),
                Some(t) => self
                    .check_login(t, s.auth, &s.chap_username, &s.chap_secret)
                    .map_err(|why| format!("{why:?}")),
            };
            if let Err(reason) = &outcome {
                failed.push(si);
                tracing::info!(iqn = %s.iqn, %reason, "iSCSI session recovery failed");
            }
            out.push(SessionRecovery {
                iqn: s.iqn.clone(),
                recovered: outcome.is_ok(),
                reason: outcome.err(),
            });
        }
        for si in failed.into_iter().rev() {
            let s = self.sessions.remove(si);
            detach_session_disks(self, &s);
        }
        self.sync_links()?;
        Ok(out)
    }

    /// Makes the portal at `address` (every port) stop or start answering on the storage network: a switch, a
    /// cable, the array's controller. While it does not answer, the Microsoft initiator keeps each session through
    /// it and retries the connection every `DelayBetweenReconnect` (5 s) without limit (`MaxConnectionRetries`),
    /// holds I/O for `MaxRequestHoldTime` (60 s) and then reports the session's disks removed (NetApp KB "What are
    /// the parameters that control how MS iSCSI survives lost TCP connections", which quotes the initiator's
    /// defaults); this model is that end state at once (the unkind side): the sessions stay, their disks vanish and
    /// mount points on them dangle, and a new login, a portal `New`/`Update` through it fail with
    /// ISDSC_CONNECTION_FAILED ("Connection Failed.", 0xEFFF0003: the text a portal not on the network gives). When
    /// it answers again every session through it reconnects and its disks arrive again (after their arrival delay;
    /// lowest free disk numbers, which may differ; online if they were: the SAN policy is for newly discovered
    /// disks), their volumes and mount points as they were. **Unverified**:
    /// how Windows shows a reconnecting session's disks and mount points meanwhile (`docs/real-node-checks.md`).
    pub fn set_portal_reachable(&mut self, address: &str, reachable: bool) -> Result<()> {
        let mut found = false;
        for p in self
            .portals
            .iter_mut()
            .filter(|p| p.address.eq_ignore_ascii_case(address))
        {
            p.reachable = reachable;
            found = true;
        }
        if !found {
            return Err(Error::Scenario(format!("no iSCSI portal {address}")));
        }
        let through: Vec<Session> = self
            .sessions
            .iter()
            .filter(|s| s.portal_address.eq_ignore_ascii_case(address))
            .cloned()
            .collect();
        let now = Instant::now();
        for s in &through {
            if reachable {
                let luns = self
                    .portals
                    .iter()
                    .flat_map(|p| p.targets.iter())
                    .find(|t| t.iqn.eq_ignore_ascii_case(&s.iqn))
                    .map(|t| t.luns.clone())
                    .unwrap_or_default();
                for (lun, disk_id) in luns {
                    let Some(was_online) = self
                        .disks
                        .iter()
                        .find(|d| d.id == disk_id && d.number.is_none())
                        .map(|d| d.online)
                    else {
                        continue;
                    };
                    self.attach_lun_disk(&disk_id, s.target_number, lun, now);
                    // A disk Windows saw before keeps its state: the SAN policy applies to newly discovered disks
                    // (`diskpart` `san`: "Determines the SAN policy … for newly discovered disks").
                    if let Some(d) = self.disks.iter_mut().find(|d| d.id == disk_id) {
                        d.online = was_online;
                    }
                }
            } else {
                detach_session_disks(self, s);
            }
        }
        self.sync_links()
    }

    /// An operator's `Update-IscsiTargetPortal` on the node: SendTargets through the added portal `address:port`.
    pub fn refresh_discovery(&mut self, address: &str, port: u32) -> Result<()> {
        let port = port_or_default(port);
        let pi = self
            .portal_index(address, port)
            .filter(|&i| self.portals[i].added)
            .ok_or_else(|| Error::Scenario(format!("portal {address}:{port} is not added")))?;
        self.send_targets(pi);
        Ok(())
    }

    /// The array creates a target behind an existing portal (one target per volume: democratic-csi's TrueNAS and
    /// zfs-generic iSCSI drivers), with its LUNs' disks. Windows' discovery cache of the portal does not list it
    /// until something refreshes it (row `discovery_refresh`). Returns the new LUN disks' ids.
    pub fn add_target(
        &mut self,
        address: &str,
        port: u32,
        spec: &TargetSpec,
    ) -> Result<Vec<String>> {
        let port = port_or_default(port);
        let pi = self
            .portal_index(address, port)
            .ok_or_else(|| Error::Scenario(format!("no portal {address}:{port}")))?;
        if self.portals[pi]
            .targets
            .iter()
            .any(|t| t.iqn.eq_ignore_ascii_case(&spec.iqn))
        {
            return Err(Error::Scenario(format!(
                "portal {address}:{port} already has target {}",
                spec.iqn
            )));
        }
        let mut luns = Vec::new();
        let mut disks = Vec::new();
        for l in &spec.luns {
            let id = l
                .disk
                .id
                .clone()
                .unwrap_or_else(|| format!("{}/lun{}", spec.iqn, l.lun));
            if luns.iter().any(|(n, i)| *n == l.lun || *i == id) {
                return Err(Error::Scenario(format!(
                    "target {}: duplicate LUN {} or disk id {id}",
                    spec.iqn, l.lun
                )));
            }
            let mut disk = lun_disk(self, &l.disk, id.clone(), &spec.iqn, l.lun)?;
            disk.arrival_delay_ms = l.arrival_delay_ms;
            disk.volume_arrival_delay_ms = l.volume_arrival_delay_ms;
            disks.push(disk);
            luns.push((l.lun, id));
        }
        let ids = luns.iter().map(|(_, id)| id.clone()).collect();
        self.disks.extend(disks);
        self.portals[pi].targets.push(Target {
            iqn: spec.iqn.clone(),
            chap: spec.chap.clone(),
            luns,
        });
        Ok(ids)
    }

    /// Replaces the disk behind a target's LUN (the array now serves another volume there) without resetting
    /// the host. A connected target sees the old disk vanish and the new one arrive. Returns the new disk id.
    pub fn replace_lun(&mut self, iqn: &str, lun: u32, spec: &DiskSpec) -> Result<String> {
        let (pi, ti) = self
            .portals
            .iter()
            .enumerate()
            .find_map(|(pi, p)| {
                p.targets
                    .iter()
                    .position(|t| t.iqn.eq_ignore_ascii_case(iqn))
                    .map(|ti| (pi, ti))
            })
            .ok_or_else(|| Error::Scenario(format!("no target {iqn}")))?;
        let target_iqn = self.portals[pi].targets[ti].iqn.clone();
        let li = self.portals[pi].targets[ti]
            .luns
            .iter()
            .position(|(n, _)| *n == lun)
            .ok_or_else(|| Error::Scenario(format!("target {iqn} has no LUN {lun}")))?;
        let old_id = self.portals[pi].targets[ti].luns[li].1.clone();
        let mut id = spec
            .id
            .clone()
            .unwrap_or_else(|| format!("{target_iqn}/lun{lun}"));
        let mut k = 2;
        while id == old_id || self.disks.iter().any(|d| d.id == id) {
            if spec.id.is_some() {
                return Err(Error::Scenario(format!("duplicate disk id {id}")));
            }
            id = format!("{target_iqn}/lun{lun}#{k}");
            k += 1;
        }
        let (delay, vdelay) = self
            .disks
            .iter()
            .find(|d| d.id == old_id)
            .map(|d| (d.arrival_delay_ms, d.volume_arrival_delay_ms))
            .unwrap_or_default();
        self.disks.retain(|d| d.id != old_id);
        let mut disk = lun_disk(self, spec, id.clone(), &target_iqn, lun)?;
        disk.arrival_delay_ms = delay;
        disk.volume_arrival_delay_ms = vdelay;
        self.disks.push(disk);
        self.portals[pi].targets[ti].luns[li].1 = id.clone();
        if let Some(si) = self.session_index(&target_iqn) {
            let tn = self.sessions[si].target_number;
            self.attach_lun_disk(&id, tn, lun, Instant::now());
        }
        self.sync_links()?;
        Ok(id)
    }

    /// Sets a LUN disk's arrival delays ([`State::set_arrival_delay`] with the current time).
    pub fn set_lun_arrival_delay(
        &mut self,
        disk_id: &str,
        delay: Duration,
        volume_delay: Duration,
    ) -> Result<()> {
        self.set_arrival_delay(disk_id, delay, volume_delay, Instant::now())
    }
}
