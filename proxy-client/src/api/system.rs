use crate::proto::system_v1alpha1::{self as pb, system_client::SystemClient as Raw};
use crate::{ApiGroup, Error, ProxyClient};

/// How a Windows service starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StartType {
    /// Boot (also what csi-proxy reports for start modes it does not recognise).
    Boot,
    /// System.
    System,
    /// Automatic.
    Automatic,
    /// Manual.
    Manual,
    /// Disabled.
    Disabled,
}

/// The state of a Windows service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceStatus {
    /// Unknown (or a value this client does not know).
    Unknown,
    /// Stopped.
    Stopped,
    /// Start pending.
    StartPending,
    /// Stop pending.
    StopPending,
    /// Running.
    Running,
    /// Continue pending.
    ContinuePending,
    /// Pause pending.
    PausePending,
    /// Paused.
    Paused,
}

/// A Windows service as reported by `GetService`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceInfo {
    /// Display name.
    pub display_name: String,
    /// Start type.
    pub start_type: StartType,
    /// Current status.
    pub status: ServiceStatus,
}

/// The system v1alpha1 API (`\\.\pipe\csi-proxy-system-v1alpha1`).
#[derive(Debug, Clone)]
pub struct SystemClient {
    client: ProxyClient,
}

impl SystemClient {
    pub(crate) fn new(client: ProxyClient) -> Self {
        SystemClient { client }
    }

    /// `GetBIOSSerialNumber`: the BIOS serial number.
    pub async fn bios_serial(&self) -> Result<String, Error> {
        let response = self
            .client
            .unary(
                ApiGroup::System,
                "GetBIOSSerialNumber",
                pb::GetBiosSerialNumberRequest {},
                |ch, req| async move { Raw::new(ch).get_bios_serial_number(req).await },
            )
            .await?;
        Ok(response.serial_number)
    }

    /// `GetService`: display name, start type and status of the service `name`.
    pub async fn get_service(&self, name: &str) -> Result<ServiceInfo, Error> {
        const METHOD: &str = "GetService";
        let response = self
            .client
            .unary(
                ApiGroup::System,
                METHOD,
                pb::GetServiceRequest {
                    name: name.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).get_service(req).await },
            )
            .await?;
        let start_type = match pb::StartType::try_from(response.start_type) {
            Ok(pb::StartType::Boot) => StartType::Boot,
            Ok(pb::StartType::System) => StartType::System,
            Ok(pb::StartType::Automatic) => StartType::Automatic,
            Ok(pb::StartType::Manual) => StartType::Manual,
            Ok(pb::StartType::Disabled) => StartType::Disabled,
            Err(_) => {
                return Err(Error::InvalidResponse {
                    method: METHOD,
                    message: format!("unknown start_type {}", response.start_type),
                });
            }
        };
        let status = match pb::ServiceStatus::try_from(response.status) {
            Ok(pb::ServiceStatus::Stopped) => ServiceStatus::Stopped,
            Ok(pb::ServiceStatus::StartPending) => ServiceStatus::StartPending,
            Ok(pb::ServiceStatus::StopPending) => ServiceStatus::StopPending,
            Ok(pb::ServiceStatus::Running) => ServiceStatus::Running,
            Ok(pb::ServiceStatus::ContinuePending) => ServiceStatus::ContinuePending,
            Ok(pb::ServiceStatus::PausePending) => ServiceStatus::PausePending,
            Ok(pb::ServiceStatus::Paused) => ServiceStatus::Paused,
            Ok(pb::ServiceStatus::Unknown) | Err(_) => ServiceStatus::Unknown,
        };
        Ok(ServiceInfo {
            display_name: response.display_name,
            start_type,
            status,
        })
    }

    /// `StartService`: starts the service and waits (server-side, up to 30 s) until it runs.
    pub async fn start_service(&self, name: &str) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::System,
                "StartService",
                pb::StartServiceRequest {
                    name: name.to_owned(),
                },
                |ch, req| async move { Raw::new(ch).start_service(req).await },
            )
            .await?;
        Ok(())
    }

    /// `StopService`: stops the service; with `force`, also its running dependents.
    pub async fn stop_service(&self, name: &str, force: bool) -> Result<(), Error> {
        self.client
            .unary(
                ApiGroup::System,
                "StopService",
                pb::StopServiceRequest {
                    name: name.to_owned(),
                    force,
                },
                |ch, req| async move { Raw::new(ch).stop_service(req).await },
            )
            .await?;
        Ok(())
    }
}
