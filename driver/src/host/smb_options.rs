//! Per-volume SMB client options of a global mapping (`MSFT_SmbGlobalMapping.Create`'s parameters), each with the
//! first Windows build whose `New-SmbGlobalMapping` has it, and what makes an existing mapping weaker than asked.
//!
//! | Option (volume-context key) | `Create` parameter | First build (cited) |
//! | --- | --- | --- |
//! | `requirePrivacy` | `RequirePrivacy` | 17763, Windows Server 2019: csi-proxy passes it on every node it supports (`kubernetes-csi/csi-proxy@v1.1.3 pkg/os/smb/api.go:68`, always `-RequirePrivacy $true`), Windows Server 2019 the oldest |
//! | `requireIntegrity` | `RequireIntegrity` | 20348, Windows Server 2022: Microsoft's `New-SmbGlobalMapping` page in the `winserver2022-ps` docset (MicrosoftDocs/windows-powershell-docs, ms.date 09/14/2021); the 2019 docset has no page for the cmdlet, so 17763 is **unverified** |
//! | `useWriteThrough` | `UseWriteThrough` | 20348 (same page) |
//! | `compressNetworkTraffic` | `CompressNetworkTraffic` | 26100, Windows Server 2025: the `winserver2025-ps` docset's page (ms.date 02/22/2024) is the first to list it; earlier builds **unverified** |
//! | `transportType` (`tcp`, `quic`) | `TransportType` (`TCP`, `QUIC`) | 26100 (same page) |
//! | `blockNTLM` | `BlockNTLM` | 26100 (same page) |
//!
//! **Weaker** (a mapping of the share that exists already, judged by what its `MSFT_SmbGlobalMapping` instance
//! reports): for each boolean option asked `true`, a mapping that does not report it `true` (or does not report it at
//! all: it cannot be shown to hold) is weaker; an option asked `false` is satisfied by any mapping (one that encrypts,
//! signs, writes through, compresses or refuses NTLM when the volume did not ask is at least as protective, and is
//! reused). `transportType: quic` is satisfied only by a mapping reporting QUIC; `tcp` by any mapping (QUIC carries SMB
//! inside TLS 1.3, so a QUIC mapping is not weaker). `compressNetworkTraffic` is no protection, but a volume that asks
//! for it is told, rather than silently served without it, by the same rule.

use serde::{Deserialize, Serialize};

/// The transport a volume asks its mapping to use (`TransportType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmbTransport {
    /// `TCP` (port 445).
    Tcp,
    /// `QUIC` (SMB over QUIC: UDP 443 inside TLS 1.3).
    Quic,
}

impl SmbTransport {
    /// The volume-context value (`tcp`, `quic`).
    pub const fn key(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Quic => "quic",
        }
    }
}

/// One client option, for messages and the build check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmbOption {
    /// `requirePrivacy`.
    RequirePrivacy,
    /// `requireIntegrity`.
    RequireIntegrity,
    /// `useWriteThrough`.
    UseWriteThrough,
    /// `compressNetworkTraffic`.
    CompressNetworkTraffic,
    /// `transportType`.
    TransportType,
    /// `blockNTLM`.
    BlockNtlm,
}

/// Windows Server 2019's build.
pub const BUILD_2019: u32 = 17763;
/// Windows Server 2022's build.
pub const BUILD_2022: u32 = 20348;
/// Windows Server 2025's build.
pub const BUILD_2025: u32 = 26100;

impl SmbOption {
    /// Every option, in the volume context's documented order.
    pub const ALL: [Self; 6] = [
        Self::RequirePrivacy,
        Self::RequireIntegrity,
        Self::UseWriteThrough,
        Self::CompressNetworkTraffic,
        Self::TransportType,
        Self::BlockNtlm,
    ];

    /// The volume-context key.
    pub const fn key(self) -> &'static str {
        match self {
            Self::RequirePrivacy => "requirePrivacy",
            Self::RequireIntegrity => "requireIntegrity",
            Self::UseWriteThrough => "useWriteThrough",
            Self::CompressNetworkTraffic => "compressNetworkTraffic",
            Self::TransportType => "transportType",
            Self::BlockNtlm => "blockNTLM",
        }
    }

    /// The `MSFT_SmbGlobalMapping.Create` parameter.
    pub const fn parameter(self) -> &'static str {
        match self {
            Self::RequirePrivacy => "RequirePrivacy",
            Self::RequireIntegrity => "RequireIntegrity",
            Self::UseWriteThrough => "UseWriteThrough",
            Self::CompressNetworkTraffic => "CompressNetworkTraffic",
            Self::TransportType => "TransportType",
            Self::BlockNtlm => "BlockNTLM",
        }
    }

    /// The first Windows build whose `New-SmbGlobalMapping` has it (module docs), and that release's name.
    pub const fn first_build(self) -> (u32, &'static str) {
        match self {
            Self::RequirePrivacy => (BUILD_2019, "Windows Server 2019"),
            Self::RequireIntegrity | Self::UseWriteThrough => (BUILD_2022, "Windows Server 2022"),
            Self::CompressNetworkTraffic | Self::TransportType | Self::BlockNtlm => {
                (BUILD_2025, "Windows Server 2025")
            }
        }
    }
}

/// The client options a volume asks of its share's global mapping; `None`: not asked (the backend's default: for
/// `RequirePrivacy` the driver's `--smb-require-privacy`, for the others Windows' own, off). Persisted in the SMB
/// volume record (absent in records written before these options existed: all `None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmbMappingOptions {
    /// `RequirePrivacy` (SMB encryption required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_privacy: Option<bool>,
    /// `RequireIntegrity` (SMB signing required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_integrity: Option<bool>,
    /// `UseWriteThrough` (forced unit access: writes bypass the caches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_write_through: Option<bool>,
    /// `CompressNetworkTraffic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress_network_traffic: Option<bool>,
    /// `TransportType`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_type: Option<SmbTransport>,
    /// `BlockNTLM` (Kerberos only).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "blockNTLM")]
    pub block_ntlm: Option<bool>,
}

/// What an existing mapping reports of the options (`None`: the instance does not list the property).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportedOptions {
    /// `RequirePrivacy`.
    pub require_privacy: Option<bool>,
    /// `RequireIntegrity`.
    pub require_integrity: Option<bool>,
    /// `UseWriteThrough`.
    pub use_write_through: Option<bool>,
    /// `CompressNetworkTraffic`.
    pub compress_network_traffic: Option<bool>,
    /// `TransportType` (`None` also for `None`, the client's choice).
    pub transport_type: Option<SmbTransport>,
    /// `BlockNTLM`.
    pub block_ntlm: Option<bool>,
}

impl SmbMappingOptions {
    /// No option asked.
    pub fn is_empty(&self) -> bool {
        self.asked().is_empty()
    }

    /// The options asked, in [`SmbOption::ALL`] order.
    pub fn asked(&self) -> Vec<SmbOption> {
        SmbOption::ALL
            .into_iter()
            .filter(|o| match o {
                SmbOption::RequirePrivacy => self.require_privacy.is_some(),
                SmbOption::RequireIntegrity => self.require_integrity.is_some(),
                SmbOption::UseWriteThrough => self.use_write_through.is_some(),
                SmbOption::CompressNetworkTraffic => self.compress_network_traffic.is_some(),
                SmbOption::TransportType => self.transport_type.is_some(),
                SmbOption::BlockNtlm => self.block_ntlm.is_some(),
            })
            .collect()
    }

    /// The asked options a node of Windows build `build` lacks (module docs' table).
    pub fn missing_on(&self, build: u32) -> Vec<SmbOption> {
        self.asked()
            .into_iter()
            .filter(|o| build < o.first_build().0)
            .collect()
    }

    /// Why a mapping reporting `reported` is weaker than asked (module docs), one `key: asked …, the mapping …` per
    /// option; empty when it may be reused. An unasked `requirePrivacy` is never a refusal (the driver's
    /// `--smb-require-privacy` default keeps its reuse-with-a-warning rule).
    pub fn weaker_in(&self, reported: &ReportedOptions) -> Vec<String> {
        fn shows(v: Option<bool>) -> &'static str {
            match v {
                Some(true) => "true",
                Some(false) => "false",
                None => "not shown",
            }
        }
        let mut why = Vec::new();
        let mut flag = |o: SmbOption, asked: Option<bool>, has: Option<bool>| {
            if asked == Some(true) && has != Some(true) {
                why.push(format!(
                    "{}: asked true, the mapping's {} is {}",
                    o.key(),
                    o.parameter(),
                    shows(has)
                ));
            }
        };
        flag(
            SmbOption::RequirePrivacy,
            self.require_privacy,
            reported.require_privacy,
        );
        flag(
            SmbOption::RequireIntegrity,
            self.require_integrity,
            reported.require_integrity,
        );
        flag(
            SmbOption::UseWriteThrough,
            self.use_write_through,
            reported.use_write_through,
        );
        flag(
            SmbOption::CompressNetworkTraffic,
            self.compress_network_traffic,
            reported.compress_network_traffic,
        );
        flag(SmbOption::BlockNtlm, self.block_ntlm, reported.block_ntlm);
        if self.transport_type == Some(SmbTransport::Quic)
            && reported.transport_type != Some(SmbTransport::Quic)
        {
            why.push(format!(
                "transportType: asked quic, the mapping's TransportType is {}",
                reported
                    .transport_type
                    .map_or("not QUIC", SmbTransport::key)
            ));
        }
        why
    }

    /// `key=value` of each asked option, for messages and logs (no secret here).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let mut b = |o: SmbOption, v: Option<bool>| {
            if let Some(v) = v {
                parts.push(format!("{}={v}", o.key()));
            }
        };
        b(SmbOption::RequirePrivacy, self.require_privacy);
        b(SmbOption::RequireIntegrity, self.require_integrity);
        b(SmbOption::UseWriteThrough, self.use_write_through);
        b(
            SmbOption::CompressNetworkTraffic,
            self.compress_network_traffic,
        );
        if let Some(t) = self.transport_type {
            parts.push(format!("transportType={}", t.key()));
        }
        if let Some(v) = self.block_ntlm {
            parts.push(format!("blockNTLM={v}"));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_option_names_its_first_build() {
        let all = SmbMappingOptions {
            require_privacy: Some(true),
            require_integrity: Some(false),
            use_write_through: Some(true),
            compress_network_traffic: Some(true),
            transport_type: Some(SmbTransport::Quic),
            block_ntlm: Some(true),
        };
        assert_eq!(all.asked().len(), 6);
        assert!(all.missing_on(BUILD_2025).is_empty());
        assert_eq!(
            all.missing_on(BUILD_2022),
            [
                SmbOption::CompressNetworkTraffic,
                SmbOption::TransportType,
                SmbOption::BlockNtlm
            ]
        );
        assert_eq!(all.missing_on(BUILD_2019).len(), 5);
        assert!(SmbMappingOptions::default().is_empty());
    }

    #[test]
    fn weaker_is_an_asked_true_the_mapping_does_not_show() {
        let asked = SmbMappingOptions {
            require_privacy: Some(true),
            use_write_through: Some(false),
            transport_type: Some(SmbTransport::Quic),
            ..Default::default()
        };
        let strong = ReportedOptions {
            require_privacy: Some(true),
            use_write_through: Some(true),
            transport_type: Some(SmbTransport::Quic),
            ..Default::default()
        };
        assert!(asked.weaker_in(&strong).is_empty());
        let weak = ReportedOptions {
            require_privacy: Some(false),
            ..Default::default()
        };
        let why = asked.weaker_in(&weak);
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].starts_with("requirePrivacy"), "{why:?}");
        assert!(why[1].starts_with("transportType"), "{why:?}");
        // Not shown is not proof.
        let silent = ReportedOptions::default();
        assert_eq!(asked.weaker_in(&silent).len(), 2);
        // Asked tcp: any transport will do.
        let tcp = SmbMappingOptions {
            transport_type: Some(SmbTransport::Tcp),
            ..Default::default()
        };
        assert!(tcp.weaker_in(&strong).is_empty());
    }

    #[test]
    fn records_without_options_still_load_and_empty_options_write_nothing() {
        let empty: SmbMappingOptions = serde_json::from_str("{}").unwrap();
        assert!(empty.is_empty());
        assert_eq!(serde_json::to_string(&empty).unwrap(), "{}");
        let o = SmbMappingOptions {
            block_ntlm: Some(true),
            transport_type: Some(SmbTransport::Quic),
            ..Default::default()
        };
        let text = serde_json::to_string(&o).unwrap();
        assert_eq!(text, r#"{"transportType":"quic","blockNTLM":true}"#);
        assert_eq!(serde_json::from_str::<SmbMappingOptions>(&text).unwrap(), o);
    }
}
