//! `wincsi-node check-node`: its flags, parsed together with every flag of the driver ([`Config`]) so that the
//! backend, the pipes or sockets, the kubelet root and the driver name are given exactly as to the driver.
//!
//! Secrets never travel on the command line: the SMB password comes from `WINCSI_CHECK_SMB_PASSWORD` or
//! `--smb-password-file`, the iSCSI CHAP secret from `WINCSI_CHECK_ISCSI_CHAP_SECRET` or `--iscsi-chap-secret-file`.

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, ValueEnum};

use super::expect::Release;
use crate::config::Config;

/// The subcommand's name (the first argument).
pub const SUBCOMMAND: &str = "check-node";

/// Environment variable holding the SMB password.
pub const SMB_PASSWORD_ENV: &str = "WINCSI_CHECK_SMB_PASSWORD";
/// Environment variable holding the iSCSI CHAP secret.
pub const CHAP_SECRET_ENV: &str = "WINCSI_CHECK_ISCSI_CHAP_SECRET";

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Phase {
    /// Every check that needs no reboot; everything created is removed at the end.
    Full,
    /// Every check of `full`, then the reboot fixtures are created and kept (an SMB mapping with its link, a
    /// logged-in LUN mounted in the scratch folder); reboot the node and run `after-reboot`.
    BeforeReboot,
    /// The checks that need a reboot, on the fixtures `before-reboot` kept; then everything is removed.
    AfterReboot,
    /// Only remove what an interrupted run left (from its ledger).
    Cleanup,
}

impl Phase {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Full => "full",
            Phase::BeforeReboot => "before-reboot",
            Phase::AfterReboot => "after-reboot",
            Phase::Cleanup => "cleanup",
        }
    }
}

/// Report format on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Text for a terminal.
    Text,
    /// One JSON document (schema: `--print-schema`).
    Json,
}

/// The flags of `check-node` (besides the driver's own).
#[derive(Clone, Debug, Args)]
pub struct CheckNodeArgs {
    /// What to run: full, before-reboot, after-reboot or cleanup.
    #[arg(long, value_enum, default_value_t = Phase::Full)]
    pub phase: Phase,

    /// Print the plan (every host object it would create or touch) and do nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Report format on stdout (progress goes to stderr).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// Print the JSON Schema of the JSON report and exit.
    #[arg(long)]
    pub print_schema: bool,

    /// The scratch folder on the host (inside --kubelet-root; must not exist, or be this tool's own from an
    /// earlier phase). Default: `<kubelet-root>\plugins\<driver-name>\check-node\scratch`.
    #[arg(long, value_name = "HOST_PATH")]
    pub scratch_dir: Option<String>,

    /// Local directory for the ledger of created objects (kept across phases and after an interruption).
    /// Default: the `check-node` directory beside --state-dir.
    #[arg(long, value_name = "DIR")]
    pub check_dir: Option<PathBuf>,

    /// The csi-proxy release the node is believed to run: findings are judged against it (and the run says
    /// whether the node's answers agree). Default: judged against the releases the answers identify.
    #[arg(long, value_enum, value_name = "RELEASE")]
    pub csi_proxy_release: Option<Release>,

    /// An SMB share for the SMB checks, `\\server\share[\dir]` (the folder must exist). Use one nothing else on
    /// the node maps: the run refuses it if a mapping of it already exists, and removes its own mapping at the end.
    #[arg(long, value_name = "UNC")]
    pub smb_share: Option<String>,

    /// The SMB user (`DOMAIN\user`, `user@domain` or `user`). The password comes from WINCSI_CHECK_SMB_PASSWORD or
    /// --smb-password-file.
    #[arg(long, env = "WINCSI_CHECK_SMB_USERNAME", value_name = "USER")]
    pub smb_username: Option<String>,

    /// A file holding the SMB password (one line).
    #[arg(long, value_name = "FILE")]
    pub smb_password_file: Option<PathBuf>,

    /// The SMB client options the `smb_options` check maps the share with (native backend), as a StorageClass gives
    /// them: `key=value` pairs separated by commas, keys `requirePrivacy`, `requireIntegrity`, `useWriteThrough`,
    /// `compressNetworkTraffic`, `transportType` (`tcp`, `quic`) and `blockNTLM`, parsed by the driver's own volume
    /// context parser. Default: every option of `requireIntegrity`, `useWriteThrough`, `compressNetworkTraffic` and
    /// `transportType=tcp` the node's Windows build takes (on a build with none of them, `requirePrivacy=true`).
    #[arg(long, value_name = "KEY=VALUE,...", requires = "smb_share")]
    pub smb_options: Option<String>,

    /// Opt-in (issue 40 item 1, native item N46): a share the node maps as its own computer account, with no
    /// credential (`authentication: machine`), `\\server\share[\dir]` (the folder must exist). Needs a domain-joined
    /// node and a share whose share and NTFS permissions grant the computer account (`DOMAIN\NODE$`); the run refuses
    /// it when a mapping of it already exists, maps it as the node, writes a directory through it and removes its own
    /// mapping. On csiProxy mode the driver's refusal is recorded.
    #[arg(long, value_name = "UNC")]
    pub smb_machine_share: Option<String>,

    /// An iSCSI target portal for the iSCSI checks, `host[:port]`. The LUN must be a scratch LUN: the run refuses a
    /// disk with any volume, then initialises (GPT) and formats (NTFS) it, and cannot undo that.
    #[arg(long, value_name = "HOST[:PORT]", requires = "iscsi_iqn")]
    pub iscsi_portal: Option<String>,

    /// The target's IQN, spelled exactly as the target reports it (csi-proxy v1.3.0 crashes on another case).
    #[arg(long, value_name = "IQN", requires = "iscsi_portal")]
    pub iscsi_iqn: Option<String>,

    /// The scratch LUN.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub iscsi_lun: u32,

    /// A target the storage side created after this node added --iscsi-portal (`setup-windows.ps1 -Iscsi` makes
    /// one): the discovery check asks whether the node lists it before and after a refresh of the portal (csi-proxy:
    /// the portal is removed and added again, and the check skipped when a target it lists has a session here).
    #[arg(long, value_name = "IQN", requires = "iscsi_portal")]
    pub iscsi_late_iqn: Option<String>,

    /// One-way CHAP user name (the secret comes from WINCSI_CHECK_ISCSI_CHAP_SECRET or --iscsi-chap-secret-file).
    #[arg(long, env = "WINCSI_CHECK_ISCSI_CHAP_USERNAME", value_name = "USER")]
    pub iscsi_chap_username: Option<String>,

    /// A file holding the CHAP secret (one line, 12 to 16 characters).
    #[arg(long, value_name = "FILE")]
    pub iscsi_chap_secret_file: Option<PathBuf>,

    /// Upper bound of each host call, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub call_timeout_secs: u64,

    /// How long to wait for a LUN's disk and volume to appear, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub arrival_timeout_secs: u64,
}

/// Whether `args` (program name first) ask for `check-node`.
pub fn is_check_node(args: &[std::ffi::OsString]) -> bool {
    args.get(1).is_some_and(|a| a == SUBCOMMAND)
}

/// Parse `wincsi-node check-node …` (program name first, then `check-node`): the driver's flags (those that only
/// concern serving CSI are optional and hidden) and the check's own.
pub fn parse(args: &[std::ffi::OsString]) -> Result<(Config, CheckNodeArgs), clap::Error> {
    let rest = args.iter().skip(2).cloned();
    let argv = std::iter::once(std::ffi::OsString::from("wincsi-node check-node")).chain(rest);
    let command = CheckNodeArgs::augment_args(
        Config::command()
            .name(SUBCOMMAND)
            .bin_name("wincsi-node check-node")
            .about(
                "Exercise the host backend on scratch objects it creates and removes itself, and report which \
                 csi-proxy release-profile rows and real-node checks the node's answers confirm or contradict",
            )
            .after_help(
                "Safe by construction: it touches only what it creates (scratch folder, links, its own SMB \
                 mapping, its own iSCSI login), refuses a share that is already mapped and a disk that has a \
                 volume, prints its plan first (--dry-run prints only the plan), and removes what it created even \
                 when a check fails or on Ctrl-C. See docs/real-node-checks.md.",
            )
            .mut_arg("endpoint", |a| {
                a.required(false)
                    .default_value("tcp://127.0.0.1:1")
                    .hide(true)
            })
            .mut_arg("node_id", |a| {
                a.required(false).default_value("check-node").hide(true)
            })
            .mut_arg("max_volumes_per_node", |a| a.hide(true))
            .mut_arg("topology", |a| a.hide(true)),
    );
    let matches = command.try_get_matches_from(argv)?;
    let config = Config::from_arg_matches(&matches)?;
    config
        .validate()
        .map_err(|e| clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n")))?;
    let check = CheckNodeArgs::from_arg_matches(&matches)?;
    Ok((config, check))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Vec<std::ffi::OsString> {
        ["wincsi-node", "check-node"]
            .iter()
            .chain(extra)
            .map(std::ffi::OsString::from)
            .collect()
    }

    #[test]
    fn parses_without_the_serving_flags_and_keeps_the_drivers_flags() {
        let (config, check) = parse(&args(&[
            "--kubelet-root",
            r"D:\k",
            "--csi-proxy-pipe-prefix",
            r"\\.\pipe\x\",
            "--phase",
            "before-reboot",
            "--output",
            "json",
            "--csi-proxy-release",
            "v1.3.0",
            "--iscsi-portal",
            "10.0.0.5",
            "--iscsi-iqn",
            "iqn.2026-01.io.example:t",
        ]))
        .expect("parse");
        assert_eq!(config.kubelet_root, PathBuf::from(r"D:\k"));
        assert_eq!(config.csi_proxy_pipe_prefix, r"\\.\pipe\x\");
        assert_eq!(check.phase, Phase::BeforeReboot);
        assert_eq!(check.output, OutputFormat::Json);
        assert_eq!(check.csi_proxy_release, Some(Release::V1_3_0));
        assert_eq!(check.iscsi_lun, 0);
        assert!(is_check_node(&args(&[])));
        assert!(!is_check_node(&args(&[])[..1]));
    }

    #[test]
    fn bad_values_and_half_targets_are_refused() {
        assert!(parse(&args(&["--phase", "reboot"])).is_err());
        assert!(parse(&args(&["--csi-proxy-release", "v9"])).is_err());
        assert!(
            parse(&args(&["--iscsi-portal", "10.0.0.5"])).is_err(),
            "a portal needs an IQN"
        );
        assert!(
            parse(&args(&["--smb-password", "x"])).is_err(),
            "no secret flag exists"
        );
    }

    #[test]
    fn help_names_the_subcommand_and_hides_serving_flags() {
        let err = parse(&args(&["--help"])).expect_err("help");
        let text = err.render().to_string();
        assert!(text.contains("wincsi-node check-node"), "{text}");
        assert!(
            text.contains("--smb-share") && text.contains("--dry-run"),
            "{text}"
        );
        assert!(
            !text.contains("--endpoint") && !text.contains("--node-id"),
            "{text}"
        );
        assert!(
            text.contains("--kubelet-root") && text.contains("--host-backend"),
            "{text}"
        );
    }
}
