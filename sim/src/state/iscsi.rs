//! iSCSI portals, targets, sessions and the disks behind LUNs (the Iscsi API group).

use std::collections::BTreeSet;

use serde::Serialize;

use super::State;
use super::disk::{DiskSource, build_disk};
use crate::error::{Error, Result};
use crate::scenario::{IscsiSpec, TargetChap};
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
    /// IQN.
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
    /// Whether the portal is added on the host (`MSFT_iSCSITargetPortal` exists).
    pub added: bool,
    /// IQNs the host has discovered through this portal.
    pub discovered: BTreeSet<String>,
    /// Targets.
    pub targets: Vec<Target>,
}

/// A connected session.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    /// Portal address.
    pub portal_address: String,
    /// Portal port.
    pub portal_port: u32,
    /// Target IQN (as declared).
    pub iqn: String,
    /// SCSI target number assigned on the iSCSI adapter.
    pub target_number: u32,
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
                if st.disks.iter().any(|d| d.id == id) {
                    return Err(Error::Scenario(format!("duplicate disk id {id}")));
                }
                if luns.iter().any(|(n, _)| *n == l.lun) {
                    return Err(Error::Scenario(format!(
                        "target {}: duplicate LUN {}",
                        t.iqn, l.lun
                    )));
                }
                let disk = build_disk(
                    st,
                    &l.disk,
                    id.clone(),
                    DiskSource::Iscsi {
                        iqn: t.iqn.clone(),
                        lun: l.lun,
                    },
                )?;
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
            added: p.preconfigured,
            discovered,
            targets,
        });
    }
    Ok(())
}

/// Removes a session's disks from the host (numbers freed, volumes invisible).
pub(crate) fn detach_session_disks(st: &mut State, s: &Session) {
    for d in st.disks.iter_mut() {
        if let DiskSource::Iscsi { iqn, .. } = &d.source
            && iqn.eq_ignore_ascii_case(&s.iqn)
        {
            d.number = None;
        }
    }
}

fn port_or_default(port: u32) -> u32 {
    if port == 0 { 3260 } else { port }
}

fn portal_not_found(address: &str, port: u32) -> Error {
    Error::host(format!(
        "No MSFT_iSCSITargetPortal objects found with property 'TargetPortalAddress' equal to '{address}' and 'TargetPortalPortNumber' equal to '{port}'.  Verify the value of the property and retry."
    ))
}

fn chap_secret_len_ok(s: &str) -> bool {
    (12..=16).contains(&s.len())
}

const TEXT_BAD_CHAP_SECRET: &str = "The CHAP secret given is invalid. Maximum size of CHAP secret is 16 bytes. Minimum size is 12 bytes if IPSec is not used.";

impl State {
    fn portal_index(&self, address: &str, port: u32) -> Option<usize> {
        self.portals
            .iter()
            .position(|p| p.address.eq_ignore_ascii_case(address) && p.port == port)
    }

    /// `AddTargetPortal`: no-op if added; otherwise contacts the portal and discovers its targets.
    pub fn add_target_portal(&mut self, address: &str, port: u32) -> Result<()> {
        let port = port_or_default(port);
        let fail = |text: &str| {
            Error::host(format!(
                "error adding target portal at ({address}:{port}). err: {text}"
            ))
        };
        let Some(pi) = self.portal_index(address, port) else {
            return Err(fail("Connection Failed."));
        };
        let p = &mut self.portals[pi];
        if p.added {
            return Ok(());
        }
        if p.discovery_chap {
            return Err(fail("Authentication Failure."));
        }
        p.added = true;
        p.discovered = p.targets.iter().map(|t| t.iqn.to_lowercase()).collect();
        Ok(())
    }

    /// `DiscoverTargetPortal`: the IQNs of the portal's targets (refreshes discovery).
    pub fn discover_target_portal(&mut self, address: &str, port: u32) -> Result<Vec<String>> {
        let port = port_or_default(port);
        let pi = self
            .portal_index(address, port)
            .filter(|&i| self.portals[i].added);
        let Some(pi) = pi else {
            return Err(portal_not_found(address, port));
        };
        let p = &mut self.portals[pi];
        p.discovered = p.targets.iter().map(|t| t.iqn.to_lowercase()).collect();
        Ok(p.targets.iter().map(|t| t.iqn.clone()).collect())
    }

    /// `RemoveTargetPortal`: fails when absent; forgets every target discovered through it.
    pub fn remove_target_portal(&mut self, address: &str, port: u32) -> Result<()> {
        let port = port_or_default(port);
        let pi = self
            .portal_index(address, port)
            .filter(|&i| self.portals[i].added);
        let Some(pi) = pi else {
            return Err(portal_not_found(address, port));
        };
        let p = &mut self.portals[pi];
        p.added = false;
        p.discovered.clear();
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

    fn find_target(&self, address: &str, port: u32, iqn: &str) -> Result<(usize, usize)> {
        let not_found = || {
            Error::host(format!(
                "No MSFT_iSCSITarget objects found with property 'NodeAddress' equal to '{iqn}' on target portal ({address}:{port}).  Verify the value of the property and retry."
            ))
        };
        let pi = self
            .portal_index(address, port)
            .filter(|&i| self.portals[i].added)
            .ok_or_else(not_found)?;
        let p = &self.portals[pi];
        if !p.discovered.contains(&iqn.to_lowercase()) {
            return Err(not_found());
        }
        let ti = p
            .targets
            .iter()
            .position(|t| t.iqn.eq_ignore_ascii_case(iqn))
            .ok_or_else(not_found)?;
        Ok((pi, ti))
    }

    fn session_index(&self, iqn: &str) -> Option<usize> {
        self.sessions
            .iter()
            .position(|s| s.iqn.eq_ignore_ascii_case(iqn))
    }

    /// `ConnectTarget`: no-op when connected; otherwise logs in (checking CHAP) and the LUNs' disks appear.
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
        let (pi, ti) = self.find_target(address, port, iqn)?;
        if self.session_index(iqn).is_some() {
            return Ok(());
        }
        let fail = |text: &str| {
            Error::host(format!(
                "error connecting to target portal. result: 1, err: {text}"
            ))
        };
        if auth != AuthType::None && !chap_secret_len_ok(chap_secret.expose()) {
            return Err(fail(TEXT_BAD_CHAP_SECRET));
        }
        let auth_failure = || fail("Authentication Failure.");
        let creds_match =
            |u: &str, s: &Secret| u == chap_username && s.expose() == chap_secret.expose();
        match &self.portals[pi].targets[ti].chap {
            TargetChap::None => {}
            TargetChap::OneWay { username, secret } => {
                if auth == AuthType::None || !creds_match(username, secret) {
                    return Err(auth_failure());
                }
            }
            TargetChap::Mutual {
                username,
                secret,
                target_secret,
            } => {
                if auth != AuthType::MutualChap || !creds_match(username, secret) {
                    return Err(auth_failure());
                }
                if self.mutual_chap_secret.as_ref().map(Secret::expose)
                    != Some(target_secret.expose())
                {
                    return Err(auth_failure());
                }
            }
        }
        let adapter = self.cfg.iscsi_adapter;
        let mut target_number = 0;
        while self
            .sessions
            .iter()
            .any(|s| s.target_number == target_number)
        {
            target_number += 1;
        }
        let target = self.portals[pi].targets[ti].clone();
        self.sessions.push(Session {
            portal_address: self.portals[pi].address.clone(),
            portal_port: port,
            iqn: target.iqn.clone(),
            target_number,
        });
        for (lun, disk_id) in &target.luns {
            let mut number = 0;
            while self.disks.iter().any(|d| d.number == Some(number)) {
                number += 1;
            }
            if let Some(d) = self.disks.iter_mut().find(|d| &d.id == disk_id) {
                d.number = Some(number);
                d.online = d.online_on_arrival;
                d.location = format!(
                    "Integrated : Adapter {adapter} : Port 0 : Target {target_number} : LUN {lun}"
                );
            }
        }
        self.sync_links()
    }

    /// `DisconnectTarget`: no-op when not connected; otherwise the LUNs' disks vanish.
    pub fn disconnect_target(&mut self, address: &str, port: u32, iqn: &str) -> Result<()> {
        let port = port_or_default(port);
        self.find_target(address, port, iqn)?;
        if let Some(si) = self.session_index(iqn) {
            let s = self.sessions.remove(si);
            detach_session_disks(self, &s);
            self.sync_links()?;
        }
        Ok(())
    }

    /// `GetTargetDisks`: disk numbers (decimal strings) when connected, else empty.
    pub fn get_target_disks(&self, address: &str, port: u32, iqn: &str) -> Result<Vec<String>> {
        let port = port_or_default(port);
        let (pi, ti) = self.find_target(address, port, iqn)?;
        if self.session_index(iqn).is_none() {
            return Ok(Vec::new());
        }
        let t = &self.portals[pi].targets[ti];
        Ok(t.luns
            .iter()
            .filter_map(|(_, id)| {
                self.disks
                    .iter()
                    .find(|d| &d.id == id)
                    .and_then(|d| d.number)
            })
            .map(|n| n.to_string())
            .collect())
    }

    /// `SetMutualChapSecret`: node-global.
    pub fn set_mutual_chap_secret(&mut self, secret: &Secret) -> Result<()> {
        if !secret.is_empty() && !chap_secret_len_ok(secret.expose()) {
            return Err(Error::host(format!(
                "error setting mutual chap secret. result: 1, err: {TEXT_BAD_CHAP_SECRET}"
            )));
        }
        self.mutual_chap_secret = (!secret.is_empty()).then(|| secret.clone());
        Ok(())
    }
}
