//! The start-up probe: which WMI namespaces, classes and methods the host has, checked before any method is called.
//!
//! Why first: under Wine, `ExecMethod` on a class that does not exist crashes the process, and a query naming a
//! missing class answers zero rows without an error, so "not found" logic would pass silently (reference §4). The
//! probe connects to each namespace, fetches each class definition (`GetObject`) and each method signature
//! (`GetMethod`); neither executes anything. The Windows implementation refuses calls into whatever the probe did not
//! find, with [`crate::CallError::Unsupported`].

use std::fmt;

use crate::codes::{HResult, HResultCode};

/// A WMI namespace the facade uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub enum Namespace {
    /// `ROOT\Microsoft\Windows\Storage`: disks, partitions, volumes, storage settings, the iSCSI initiator.
    Storage,
    /// `ROOT\Microsoft\Windows\SMB`: global mappings.
    Smb,
}

impl Namespace {
    /// Both, in probe order.
    pub const ALL: [Self; 2] = [Self::Storage, Self::Smb];

    /// The namespace path.
    pub const fn path(self) -> &'static str {
        match self {
            Self::Storage => r"ROOT\Microsoft\Windows\Storage",
            Self::Smb => r"ROOT\Microsoft\Windows\SMB",
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

/// What a class is needed for (so a backend can run with part of the host, e.g. SMB only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "remote", derive(serde::Serialize, serde::Deserialize))]
pub enum Capability {
    /// Disks, partitions, volumes (block volumes).
    Disks,
    /// The iSCSI initiator.
    Iscsi,
    /// SMB global mappings.
    Smb,
}

impl Capability {
    /// Every capability, in probe order.
    pub const ALL: [Self; 3] = [Self::Disks, Self::Iscsi, Self::Smb];

    /// Its name in messages and metrics (`disks`, `iscsi`, `smb`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Disks => "disks",
            Self::Iscsi => "iscsi",
            Self::Smb => "smb",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Disks => "disks and volumes",
            Self::Iscsi => "the iSCSI initiator",
            Self::Smb => "SMB global mappings",
        })
    }
}

/// What the probe found for a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapabilityState {
    /// Every class and method it needs is there.
    Present,
    /// The host lacks something it needs (a namespace or class that does not exist, a missing method): it stays so.
    Absent,
    /// The probe could not tell (WMI answered something other than "no such namespace/class": restarting at boot,
    /// a timeout, access denied): check again.
    ProbeFailed,
}

/// Whether an HRESULT from `ConnectServer`/`GetObject` says the namespace or class does not exist (a fact of this
/// host), rather than that WMI could not answer (a moment of this host: `WBEM_E_SHUTTING_DOWN`,
/// `RPC_E_DISCONNECTED`, timeouts, …).
pub fn is_absence(h: HResult) -> bool {
    matches!(
        h.code(),
        HResultCode::WbemENotFound
            | HResultCode::WbemEInvalidClass
            | HResultCode::WbemEInvalidNamespace
            | HResultCode::WbemEInvalidMethod
    )
}

/// A class the facade calls, and the methods it calls on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassRequirement {
    /// Its namespace.
    pub namespace: Namespace,
    /// The class name.
    pub class: &'static str,
    /// The methods the facade executes on it (none for association classes and read-only classes).
    pub methods: &'static [&'static str],
    /// What it serves.
    pub capability: Capability,
}

const fn req(
    namespace: Namespace,
    class: &'static str,
    methods: &'static [&'static str],
    capability: Capability,
) -> ClassRequirement {
    ClassRequirement {
        namespace,
        class,
        methods,
        capability,
    }
}

/// Every class the facade queries or calls, with the methods it executes (the facade's traits, one to one).
pub const REQUIRED_CLASSES: &[ClassRequirement] = {
    use Capability::{Disks, Iscsi, Smb};
    use Namespace::{Smb as SmbNs, Storage};
    &[
        req(
            Storage,
            "MSFT_Disk",
            &[
                "Online",
                "Offline",
                "Initialize",
                "CreatePartition",
                "SetAttributes",
                "Refresh",
            ],
            Disks,
        ),
        req(
            Storage,
            "MSFT_Partition",
            &["Online", "GetSupportedSize", "Resize"],
            Disks,
        ),
        req(Storage, "MSFT_Volume", &["Format", "Flush"], Disks),
        req(Storage, "MSFT_PartitionToVolume", &[], Disks),
        req(
            Storage,
            "MSFT_StorageSetting",
            &["Get", "UpdateHostStorageCache"],
            Disks,
        ),
        req(Storage, "MSFT_iSCSITargetPortal", &["New", "Update"], Iscsi),
        req(
            Storage,
            "MSFT_iSCSITarget",
            &["Connect", "Disconnect"],
            Iscsi,
        ),
        req(
            Storage,
            "MSFT_iSCSISession",
            &["Register", "Unregister", "SetCHAPSecret"],
            Iscsi,
        ),
        req(Storage, "MSFT_iSCSIConnection", &[], Iscsi),
        req(Storage, "MSFT_InitiatorPort", &[], Iscsi),
        req(Storage, "MSFT_iSCSITargetToiSCSITargetPortal", &[], Iscsi),
        req(Storage, "MSFT_iSCSITargetToiSCSISession", &[], Iscsi),
        req(Storage, "MSFT_iSCSITargetToiSCSIConnection", &[], Iscsi),
        req(Storage, "MSFT_iSCSIConnectionToDisk", &[], Iscsi),
        req(Storage, "MSFT_iSCSISessionToDisk", &[], Iscsi),
        req(SmbNs, "MSFT_SmbGlobalMapping", &["Create", "Remove"], Smb),
    ]
};

/// What the probe found for one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassStatus {
    /// The class exists; the listed methods do not.
    Present {
        /// Methods `GetMethod` did not find.
        missing_methods: Vec<&'static str>,
    },
    /// `GetObject` of the class says it does not exist (Wine: `WBEM_E_NOT_FOUND`; [`is_absence`]).
    Missing(HResult),
    /// `GetObject` of the class failed otherwise: the probe could not tell (see [`CapabilityState::ProbeFailed`]).
    Failed(HResult),
    /// Not checked: the namespace could not be opened.
    NamespaceUnavailable,
}

/// The probe's findings for one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceProbe {
    /// The namespace.
    pub namespace: Namespace,
    /// Why it could not be opened (`ConnectServer`), if it could not (Wine: `WBEM_E_INVALID_NAMESPACE` for SMB).
    pub connect_error: Option<HResult>,
    /// Each required class of the namespace, in [`REQUIRED_CLASSES`] order.
    pub classes: Vec<(&'static str, ClassStatus)>,
}

/// The probe's findings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    /// One entry per namespace, in [`Namespace::ALL`] order.
    pub namespaces: Vec<NamespaceProbe>,
}

impl ProbeReport {
    /// A report saying everything required is present (what a complete simulated host reports).
    pub fn complete() -> Self {
        Self::from_lookup(|_| None, |_, _| Ok(Vec::new()))
    }

    /// Build a report from answers: `connect(ns)` is the namespace's connect error (if any); `class(ns, class)` is
    /// `Err(hresult)` when the class is missing, or the missing methods.
    pub fn from_lookup(
        mut connect: impl FnMut(Namespace) -> Option<HResult>,
        mut class: impl FnMut(Namespace, &ClassRequirement) -> Result<Vec<&'static str>, HResult>,
    ) -> Self {
        let namespaces = Namespace::ALL
            .iter()
            .map(|&ns| {
                let connect_error = connect(ns);
                let classes = REQUIRED_CLASSES
                    .iter()
                    .filter(|r| r.namespace == ns)
                    .map(|r| {
                        let status = if connect_error.is_some() {
                            ClassStatus::NamespaceUnavailable
                        } else {
                            match class(ns, r) {
                                Ok(missing_methods) => ClassStatus::Present { missing_methods },
                                Err(h) if is_absence(h) => ClassStatus::Missing(h),
                                Err(h) => ClassStatus::Failed(h),
                            }
                        };
                        (r.class, status)
                    })
                    .collect();
                NamespaceProbe {
                    namespace: ns,
                    connect_error,
                    classes,
                }
            })
            .collect();
        Self { namespaces }
    }

    fn status(&self, namespace: Namespace, class: &str) -> Option<&ClassStatus> {
        self.namespaces
            .iter()
            .find(|n| n.namespace == namespace)?
            .classes
            .iter()
            .find(|(c, _)| *c == class)
            .map(|(_, s)| s)
    }

    /// Whether the class exists (its methods may still be missing).
    pub fn has_class(&self, namespace: Namespace, class: &str) -> bool {
        matches!(
            self.status(namespace, class),
            Some(ClassStatus::Present { .. })
        )
    }

    /// Whether the class and its method exist.
    pub fn has_method(&self, namespace: Namespace, class: &str, method: &str) -> bool {
        matches!(
            self.status(namespace, class),
            Some(ClassStatus::Present { missing_methods }) if !missing_methods.contains(&method)
        )
    }

    /// Whether every class and method a capability needs exists.
    pub fn supports(&self, capability: Capability) -> bool {
        REQUIRED_CLASSES
            .iter()
            .filter(|r| r.capability == capability)
            .all(|r| {
                r.methods
                    .iter()
                    .all(|m| self.has_method(r.namespace, r.class, m))
                    && self.has_class(r.namespace, r.class)
            })
    }

    /// Whether everything required exists.
    pub fn is_complete(&self) -> bool {
        self.missing_message().is_none()
    }

    /// What the probe found for `capability`: absent when the host lacks something it needs for good, failed when
    /// the probe could not tell (and nothing it needs is known to be absent), present otherwise.
    pub fn state(&self, capability: Capability) -> CapabilityState {
        if self.supports(capability) {
            return CapabilityState::Present;
        }
        let mut failed = false;
        for r in REQUIRED_CLASSES
            .iter()
            .filter(|r| r.capability == capability)
        {
            let ns = self.namespaces.iter().find(|n| n.namespace == r.namespace);
            if let Some(h) = ns.and_then(|n| n.connect_error) {
                if is_absence(h) {
                    return CapabilityState::Absent;
                }
                failed = true;
                continue;
            }
            match self.status(r.namespace, r.class) {
                Some(ClassStatus::Missing(_)) | None => return CapabilityState::Absent,
                Some(ClassStatus::Present { missing_methods })
                    if r.methods.iter().any(|m| missing_methods.contains(m)) =>
                {
                    return CapabilityState::Absent;
                }
                Some(ClassStatus::Failed(_) | ClassStatus::NamespaceUnavailable) => failed = true,
                Some(ClassStatus::Present { .. }) => {}
            }
        }
        if failed {
            CapabilityState::ProbeFailed
        } else {
            CapabilityState::Absent
        }
    }

    /// Whether the probe's answer is final: no capability's probe failed (what is absent stays absent).
    pub fn is_settled(&self) -> bool {
        Capability::ALL
            .iter()
            .all(|&c| self.state(c) != CapabilityState::ProbeFailed)
    }

    /// One message naming each capability whose probe failed and why, or `None` when none did: the readiness
    /// reason while the backend checks again.
    pub fn failure_message(&self) -> Option<String> {
        let mut parts = Vec::new();
        for cap in Capability::ALL {
            if self.state(cap) != CapabilityState::ProbeFailed {
                continue;
            }
            let mut why = Vec::new();
            for ns in &self.namespaces {
                let needed = REQUIRED_CLASSES
                    .iter()
                    .any(|r| r.capability == cap && r.namespace == ns.namespace);
                if !needed {
                    continue;
                }
                if let Some(h) = ns.connect_error {
                    why.push(format!("namespace {} ({})", ns.namespace, short(h)));
                    continue;
                }
                for (class, status) in &ns.classes {
                    let of_cap = REQUIRED_CLASSES
                        .iter()
                        .any(|r| r.capability == cap && r.class == *class);
                    if let (true, ClassStatus::Failed(h)) = (of_cap, status) {
                        why.push(format!("{class} ({})", short(*h)));
                    }
                }
            }
            parts.push(format!("{cap}: {}", why.join(", ")));
        }
        (!parts.is_empty()).then(|| {
            format!(
                "the native backend's check of the Windows WMI providers failed, so these are unavailable until it \
                 succeeds (checked again with backoff): {}",
                parts.join("; ")
            )
        })
    }

    /// One message naming everything missing, or `None` when nothing is. This is what the backend reports at start-up
    /// on a host without the Storage/SMB providers (and what the Wine test asserts).
    pub fn missing_message(&self) -> Option<String> {
        let mut parts = Vec::new();
        for ns in &self.namespaces {
            if let Some(h) = ns.connect_error {
                parts.push(format!(
                    "namespace {} cannot be opened ({})",
                    ns.namespace,
                    short(h)
                ));
                continue;
            }
            let missing: Vec<&str> = ns
                .classes
                .iter()
                .filter(|(_, s)| matches!(s, ClassStatus::Missing(_)))
                .map(|(c, _)| *c)
                .collect();
            if !missing.is_empty() {
                parts.push(format!(
                    "{} has no class {}",
                    ns.namespace,
                    missing.join(", ")
                ));
            }
            let failed: Vec<String> = ns
                .classes
                .iter()
                .filter_map(|(c, s)| match s {
                    ClassStatus::Failed(h) => Some(format!("{c} ({})", short(*h))),
                    _ => None,
                })
                .collect();
            if !failed.is_empty() {
                parts.push(format!(
                    "{} could not be checked for {}",
                    ns.namespace,
                    failed.join(", ")
                ));
            }
            let methods: Vec<String> = ns
                .classes
                .iter()
                .flat_map(|(c, s)| match s {
                    ClassStatus::Present { missing_methods } => {
                        missing_methods.iter().map(|m| format!("{c}.{m}")).collect()
                    }
                    _ => Vec::new(),
                })
                .collect();
            if !methods.is_empty() {
                parts.push(format!(
                    "{} has no method {}",
                    ns.namespace,
                    methods.join(", ")
                ));
            }
        }
        (!parts.is_empty()).then(|| {
            format!(
                "this host lacks the Windows storage management WMI providers the native backend calls \
                 (Windows Server 2019 and later have them): {}",
                parts.join("; ")
            )
        })
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.missing_message() {
            Some(m) => f.write_str(&m),
            None => f.write_str(
                "every WMI namespace, class and method the native backend calls is present",
            ),
        }
    }
}

/// `0x8004100E WBEM_E_INVALID_NAMESPACE`: the constant name without its sentence.
fn short(h: HResult) -> String {
    match h.code().meaning() {
        Some(m) => format!("0x{:08X} {}", h.0, m.split(':').next().unwrap_or(m)),
        None => format!("0x{:08X}", h.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Wine 8 answers (reference §4): the Storage namespace opens but has no MSFT_* class; the SMB namespace
    /// does not exist.
    pub(crate) fn wine_like() -> ProbeReport {
        ProbeReport::from_lookup(
            |ns| (ns == Namespace::Smb).then_some(HResult(0x8004_100E)),
            |_, _| Err(HResult(0x8004_1002)),
        )
    }

    #[test]
    fn a_complete_host_has_no_message() {
        let r = ProbeReport::complete();
        assert!(r.is_complete());
        assert_eq!(r.missing_message(), None);
        for cap in [Capability::Disks, Capability::Iscsi, Capability::Smb] {
            assert!(r.supports(cap));
        }
        assert!(r.has_method(Namespace::Storage, "MSFT_Disk", "Online"));
        assert!(!r.has_class(Namespace::Storage, "MSFT_Nothing"));
        assert!(r.to_string().starts_with("every WMI namespace"));
    }

    #[test]
    fn the_message_names_every_missing_namespace_and_class() {
        let r = wine_like();
        assert!(!r.is_complete());
        assert!(!r.supports(Capability::Disks) && !r.supports(Capability::Smb));
        assert_eq!(
            r.missing_message().unwrap(),
            "this host lacks the Windows storage management WMI providers the native backend calls (Windows Server \
             2019 and later have them): ROOT\\Microsoft\\Windows\\Storage has no class MSFT_Disk, MSFT_Partition, \
             MSFT_Volume, MSFT_PartitionToVolume, MSFT_StorageSetting, MSFT_iSCSITargetPortal, MSFT_iSCSITarget, \
             MSFT_iSCSISession, MSFT_iSCSIConnection, MSFT_InitiatorPort, MSFT_iSCSITargetToiSCSITargetPortal, \
             MSFT_iSCSITargetToiSCSISession, MSFT_iSCSITargetToiSCSIConnection, MSFT_iSCSIConnectionToDisk, \
             MSFT_iSCSISessionToDisk; namespace ROOT\\Microsoft\\Windows\\SMB cannot be opened (0x8004100E \
             WBEM_E_INVALID_NAMESPACE)"
        );
        assert_eq!(
            r.namespaces[1].classes,
            vec![("MSFT_SmbGlobalMapping", ClassStatus::NamespaceUnavailable)]
        );
    }

    #[test]
    fn missing_methods_are_named_and_limit_capabilities() {
        let r = ProbeReport::from_lookup(
            |_| None,
            |_, c| {
                Ok(if c.class == "MSFT_Volume" {
                    vec!["Flush"]
                } else {
                    vec![]
                })
            },
        );
        assert_eq!(
            r.missing_message().unwrap(),
            "this host lacks the Windows storage management WMI providers the native backend calls (Windows Server \
             2019 and later have them): ROOT\\Microsoft\\Windows\\Storage has no method MSFT_Volume.Flush"
        );
        assert!(r.has_class(Namespace::Storage, "MSFT_Volume"));
        assert!(!r.has_method(Namespace::Storage, "MSFT_Volume", "Flush"));
        assert!(r.has_method(Namespace::Storage, "MSFT_Volume", "Format"));
        assert!(!r.supports(Capability::Disks));
        assert!(r.supports(Capability::Iscsi) && r.supports(Capability::Smb));
    }

    /// At boot WMI can answer "shutting down" or time out: that is not a missing provider, and the report says so.
    #[test]
    fn a_failed_probe_is_told_from_an_absent_class() {
        let r = ProbeReport::from_lookup(
            |ns| (ns == Namespace::Smb).then_some(HResult(0x8004_1033)),
            |_, c| {
                if c.class == "MSFT_iSCSITarget" {
                    Err(HResult(0x8004_1069))
                } else {
                    Ok(vec![])
                }
            },
        );
        assert_eq!(r.state(Capability::Disks), CapabilityState::Present);
        assert_eq!(r.state(Capability::Iscsi), CapabilityState::ProbeFailed);
        assert_eq!(r.state(Capability::Smb), CapabilityState::ProbeFailed);
        assert!(!r.is_settled());
        let msg = r.failure_message().expect("failed");
        assert!(
            msg.contains(
                "the iSCSI initiator: MSFT_iSCSITarget (0x80041069 WBEM_E_TIMED_OUT); SMB global mappings: namespace \
                 ROOT\\Microsoft\\Windows\\SMB (0x80041033 WBEM_E_SHUTTING_DOWN)"
            ),
            "{msg}"
        );
        assert!(
            r.missing_message().expect("incomplete").contains(
                "could not be checked for MSFT_iSCSITarget (0x80041069 WBEM_E_TIMED_OUT)"
            )
        );
        // What Wine answers is a fact of the host: settled, absent, no failure to report.
        let w = wine_like();
        assert!(w.is_settled() && w.failure_message().is_none());
        assert_eq!(w.state(Capability::Smb), CapabilityState::Absent);
        assert_eq!(w.state(Capability::Disks), CapabilityState::Absent);
        assert!(ProbeReport::complete().is_settled());
        // A missing method is absence too.
        let no_register = ProbeReport::from_lookup(
            |_| None,
            |_, c| {
                Ok(if c.class == "MSFT_iSCSISession" {
                    vec!["Register"]
                } else {
                    vec![]
                })
            },
        );
        assert_eq!(
            no_register.state(Capability::Iscsi),
            CapabilityState::Absent
        );
    }

    #[test]
    fn requirements_name_valid_identifiers_once() {
        let mut seen = std::collections::HashSet::new();
        for r in REQUIRED_CLASSES {
            assert!(
                seen.insert((r.namespace, r.class)),
                "{} listed twice",
                r.class
            );
            assert!(
                r.class
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            );
        }
    }
}
