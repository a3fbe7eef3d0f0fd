//! BIOS serial and Windows services (the System API group).

use serde::Serialize;

use super::State;
use crate::error::{Error, Result};
use crate::scenario::{ServiceSpec, ServiceStatus, StartType};

/// A Windows service.
#[derive(Debug, Clone, Serialize)]
pub struct Service {
    /// Name as declared.
    pub name: String,
    /// Display name.
    pub display_name: String,
    /// Start type.
    pub start_type: StartType,
    /// Status.
    pub status: ServiceStatus,
    /// Services it depends on (lower-cased names).
    pub depends_on: Vec<String>,
}

pub(crate) fn load(st: &mut State, specs: &[ServiceSpec]) -> Result<()> {
    for s in specs {
        let key = s.name.to_lowercase();
        if st.services.contains_key(&key) {
            return Err(Error::Scenario(format!("duplicate service {}", s.name)));
        }
        st.services.insert(
            key,
            Service {
                name: s.name.clone(),
                display_name: if s.display_name.is_empty() {
                    s.name.clone()
                } else {
                    s.display_name.clone()
                },
                start_type: s.start_type,
                status: s.status,
                depends_on: s.depends_on.iter().map(|d| d.to_lowercase()).collect(),
            },
        );
    }
    Ok(())
}

pub(crate) fn reboot(st: &mut State) {
    for s in st.services.values_mut() {
        s.status = if matches!(
            s.start_type,
            StartType::Automatic | StartType::Boot | StartType::System
        ) {
            ServiceStatus::Running
        } else {
            ServiceStatus::Stopped
        };
    }
}

fn not_found(name: &str) -> Error {
    Error::host(format!(
        "Cannot find any service with service name '{name}'."
    ))
}

impl State {
    /// `GetBIOSSerialNumber`.
    pub fn bios_serial_number(&self) -> String {
        self.bios_serial.clone()
    }

    /// `GetService`: (display name, start type, status).
    pub fn get_service(&self, name: &str) -> Result<Service> {
        self.services
            .get(&name.to_lowercase())
            .cloned()
            .ok_or_else(|| not_found(name))
    }

    /// `StartService`: already running is fine; a disabled service or a stopped dependency fails.
    pub fn start_service(&mut self, name: &str) -> Result<()> {
        let key = name.to_lowercase();
        let svc = self.services.get(&key).ok_or_else(|| not_found(name))?;
        if svc.status == ServiceStatus::Running {
            return Ok(());
        }
        if svc.start_type == StartType::Disabled {
            return Err(Error::host(format!(
                "Failed to start service {name}. result: 2, error: The service cannot be started, either because it is disabled or because it has no enabled devices associated with it."
            )));
        }
        for dep in svc.depends_on.clone() {
            let running = self
                .services
                .get(&dep)
                .is_some_and(|d| d.status == ServiceStatus::Running);
            if !running {
                return Err(Error::host(format!(
                    "Failed to start service {name}. result: 3, error: The dependency service or group failed to start."
                )));
            }
        }
        if let Some(s) = self.services.get_mut(&key) {
            s.status = ServiceStatus::Running;
        }
        Ok(())
    }

    /// Whether the Optimize Drives service (`defragsvc`) can serve `MSFT_Partition.GetSupportedSize`, which needs it
    /// (kubernetes-sigs/aws-ebs-csi-driver#2877: StorageWMI 4 "Failed" while it is disabled, reproduced on Windows
    /// Server 2025; fixed at once by enabling it). Windows installs it with start type Manual and starts it on demand,
    /// so a stopped service still serves; only one a scenario (or [`State::set_service`]) declares `disabled` does not.
    /// Its being busy with a volume (the other cause) is not modelled.
    pub fn defrag_available(&self) -> bool {
        self.services
            .get("defragsvc")
            .is_none_or(|s| s.start_type != StartType::Disabled)
    }

    /// An administrator sets service `name`'s start type and status (`Set-Service`), declaring it when the scenario did
    /// not.
    pub fn set_service(&mut self, name: &str, start_type: StartType, status: ServiceStatus) {
        let s = self
            .services
            .entry(name.to_lowercase())
            .or_insert_with(|| Service {
                name: name.to_owned(),
                display_name: name.to_owned(),
                start_type,
                status,
                depends_on: Vec::new(),
            });
        s.start_type = start_type;
        s.status = status;
    }

    /// `StopService`: stopped is fine; running dependents block the stop unless `force` (then they stop too).
    pub fn stop_service(&mut self, name: &str, force: bool) -> Result<()> {
        let key = name.to_lowercase();
        if !self.services.contains_key(&key) {
            return Err(not_found(name));
        }
        let dependents: Vec<String> = self
            .services
            .iter()
            .filter(|(_, s)| s.depends_on.contains(&key) && s.status == ServiceStatus::Running)
            .map(|(k, _)| k.clone())
            .collect();
        if !dependents.is_empty() {
            if !force {
                return Err(Error::host(format!(
                    "Failed to stop service {name}. result: 3, error: A stop control has been sent to a service that other running services are dependent on."
                )));
            }
            for d in dependents {
                self.stop_service(&d, true)?;
            }
        }
        if let Some(s) = self.services.get_mut(&key) {
            s.status = ServiceStatus::Stopped;
        }
        Ok(())
    }
}
