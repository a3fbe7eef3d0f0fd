//! The run's resolved options: validated host paths, the SMB share and the iSCSI LUN with their credentials (read
//! from the environment or a file, never from the command line).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cli::{CHAP_SECRET_ENV, CheckNodeArgs, OutputFormat, Phase, SMB_PASSWORD_ENV};
use super::expect::Release;
use crate::config::Config;
use crate::host::{
    HostPath, IscsiAuth, KubeletRoot, Portal, Secret, SmbCredential, SmbMappingOptions, SmbOption,
    SmbTransport, UncPath,
};

/// The SMB share to check, with its credential.
#[derive(Clone, Debug)]
pub struct SmbTarget {
    /// `\\server\share[\dir]`.
    pub share: UncPath,
    /// The account that may map it.
    pub credential: SmbCredential,
    /// `--smb-options`, parsed (`None`: the default of the node's build, [`default_smb_options`]).
    pub options: Option<SmbMappingOptions>,
}

/// The options the `smb_options` check asks without `--smb-options`: every one of `requireIntegrity`,
/// `useWriteThrough`, `compressNetworkTraffic` and `transportType=tcp` that Windows build `build` takes
/// ([`SmbOption::first_build`]); on a build with none of them, `requirePrivacy=true`. `blockNTLM` is never a default (a
/// workgroup file server allows only NTLM), nor is QUIC (it needs the server's certificate mapping).
pub fn default_smb_options(build: u32) -> SmbMappingOptions {
    let has = |o: SmbOption| build >= o.first_build().0;
    let on = |o: SmbOption| has(o).then_some(true);
    let options = SmbMappingOptions {
        require_integrity: on(SmbOption::RequireIntegrity),
        use_write_through: on(SmbOption::UseWriteThrough),
        compress_network_traffic: on(SmbOption::CompressNetworkTraffic),
        transport_type: has(SmbOption::TransportType).then_some(SmbTransport::Tcp),
        ..SmbMappingOptions::default()
    };
    if options.is_empty() {
        SmbMappingOptions {
            require_privacy: Some(true),
            ..options
        }
    } else {
        options
    }
}

/// `--smb-options`: `key=value[,key=value…]`, each key one of the volume context's SMB client options (any case, as
/// there), the values checked by the driver's own parser (`smb/options.rs`). An unknown key is refused rather than
/// ignored (a typo would otherwise check nothing).
pub fn parse_smb_options(text: &str) -> Result<SmbMappingOptions, String> {
    let mut context = std::collections::BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--smb-options: {pair:?} is not key=value"))?;
        let key = key.trim();
        let Some(option) = SmbOption::ALL
            .into_iter()
            .find(|o| o.key().eq_ignore_ascii_case(key))
        else {
            let keys: Vec<&str> = SmbOption::ALL.iter().map(|o| o.key()).collect();
            return Err(format!(
                "--smb-options: unknown option {key:?}; the options are {}",
                keys.join(", ")
            ));
        };
        if context
            .insert(option.key().to_owned(), value.trim().to_owned())
            .is_some()
        {
            return Err(format!("--smb-options: {key} is given twice"));
        }
    }
    let options =
        crate::smb::options::parse(&context).map_err(|e| format!("--smb-options: {e}"))?;
    if options.is_empty() {
        return Err(
            "--smb-options names no option (leave the flag out for the default)".to_owned(),
        );
    }
    Ok(options)
}

/// The iSCSI LUN to check.
#[derive(Clone, Debug)]
pub struct IscsiTarget {
    /// The target portal.
    pub portal: Portal,
    /// The target's IQN, as the target spells it.
    pub iqn: String,
    /// The scratch LUN.
    pub lun: u32,
    /// How to log in.
    pub auth: IscsiAuth,
    /// A target created on the storage side after the node added the portal (`--iscsi-late-iqn`).
    pub late_iqn: Option<String>,
}

/// Everything a run needs to know.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// What to run.
    pub phase: Phase,
    /// Plan only.
    pub dry_run: bool,
    /// Report format.
    pub output: OutputFormat,
    /// `--kubelet-root`.
    pub kubelet_root: KubeletRoot,
    /// The scratch folder on the host.
    pub scratch: HostPath,
    /// The ledger file (local).
    pub ledger_path: PathBuf,
    /// `--csi-proxy-release`.
    pub claimed: Option<Release>,
    /// The SMB share, if any.
    pub smb: Option<SmbTarget>,
    /// `--smb-machine-share`: a share mapped as the node's computer account, if any.
    pub smb_machine: Option<UncPath>,
    /// The iSCSI LUN, if any.
    pub iscsi: Option<IscsiTarget>,
    /// Bound of one host call.
    pub call_timeout: Duration,
    /// Bound of a wait for a disk or volume to appear.
    pub arrival_timeout: Duration,
    /// How long a LUN's disk must keep showing no volume (looked at again with Rescans) before it counts as empty:
    /// the driver's `--disk-settle-time` (Windows shows an existing volume some time after the disk comes online).
    pub disk_settle: Duration,
}

/// Read a secret from `env` or from `file` (exactly one of them; a file's trailing line end is dropped).
fn secret(
    env: &str,
    file: Option<&Path>,
    what: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, String> {
    let from_env = lookup(env).filter(|v| !v.is_empty());
    match (from_env, file) {
        (Some(_), Some(_)) => Err(format!("{what}: give {env} or the file flag, not both")),
        (Some(v), None) => Ok(Some(Secret::new(v))),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("{what}: cannot read {}: {e}", f.display()))?;
            let value = text.trim_end_matches(['\r', '\n']);
            if value.is_empty() {
                return Err(format!("{what}: {} is empty", f.display()));
            }
            Ok(Some(Secret::new(value)))
        }
        (None, None) => Ok(None),
    }
}

/// `<state-dir>/../check-node`, with the state dir's own separator.
fn default_check_dir(state_dir: &Path) -> PathBuf {
    let text = state_dir.to_string_lossy();
    let trimmed = text.trim_end_matches(['/', '\\']);
    match trimmed.rfind(['/', '\\']) {
        Some(at) => PathBuf::from(format!("{}{}", &trimmed[..=at], "check-node")),
        None => PathBuf::from("check-node"),
    }
}

impl CheckOptions {
    /// Resolve the flags; `lookup` reads the environment (a parameter so tests need not mutate it).
    pub fn resolve(
        config: &Config,
        args: &CheckNodeArgs,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<CheckOptions, String> {
        let kubelet_root =
            KubeletRoot::new(&config.kubelet_root.to_string_lossy()).map_err(|e| e.to_string())?;
        let scratch_raw = args.scratch_dir.clone().unwrap_or_else(|| {
            format!(
                r"{}\plugins\{}\check-node\scratch",
                kubelet_root.as_str(),
                config.driver_name
            )
        });
        let scratch = kubelet_root
            .check(&scratch_raw, "--scratch-dir")
            .map_err(|e| e.to_string())?;
        let check_dir = args
            .check_dir
            .clone()
            .unwrap_or_else(|| default_check_dir(&config.state_dir()));
        let smb = match &args.smb_share {
            None => None,
            Some(share) => {
                let share = UncPath::parse(share, "--smb-share").map_err(|e| e.to_string())?;
                let user = args
                    .smb_username
                    .clone()
                    .filter(|u| !u.trim().is_empty())
                    .ok_or("--smb-share needs --smb-username (or WINCSI_CHECK_SMB_USERNAME)")?;
                let password = secret(
                    SMB_PASSWORD_ENV,
                    args.smb_password_file.as_deref(),
                    "the SMB password",
                    lookup,
                )?
                .ok_or_else(|| {
                    format!(
                        "--smb-share needs a password in {SMB_PASSWORD_ENV} or --smb-password-file"
                    )
                })?;
                let options = args
                    .smb_options
                    .as_deref()
                    .map(parse_smb_options)
                    .transpose()?;
                Some(SmbTarget {
                    share,
                    credential: SmbCredential::new(user, password),
                    options,
                })
            }
        };
        let iscsi = match (&args.iscsi_portal, &args.iscsi_iqn) {
            (Some(portal), Some(iqn)) => {
                let portal = Portal::parse(portal, "--iscsi-portal").map_err(|e| e.to_string())?;
                let iqn = iqn.trim().to_owned();
                if !(iqn.starts_with("iqn.") || iqn.starts_with("eui.") || iqn.starts_with("naa."))
                    || iqn.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(format!(
                        "--iscsi-iqn {iqn:?} is not an iSCSI name (iqn.…, eui.… or naa.…)"
                    ));
                }
                let secret = secret(
                    CHAP_SECRET_ENV,
                    args.iscsi_chap_secret_file.as_deref(),
                    "the CHAP secret",
                    lookup,
                )?;
                let auth = match (&args.iscsi_chap_username, secret) {
                    (None, None) => IscsiAuth::None,
                    (Some(username), Some(secret)) => {
                        let n = secret.expose().chars().count();
                        if !(12..=16).contains(&n) {
                            return Err(format!(
                                "the CHAP secret has {n} characters; Windows requires 12 to 16"
                            ));
                        }
                        IscsiAuth::OneWay {
                            username: username.clone(),
                            secret,
                        }
                    }
                    _ => {
                        return Err(format!(
                            "CHAP needs both --iscsi-chap-username and a secret ({CHAP_SECRET_ENV} or \
                             --iscsi-chap-secret-file)"
                        ));
                    }
                };
                let late_iqn = args.iscsi_late_iqn.as_deref().map(str::trim);
                if let Some(late) = late_iqn
                    && (!late.starts_with("iqn.") || late.chars().any(|c| c.is_whitespace()))
                {
                    return Err(format!("--iscsi-late-iqn {late:?} is not an iqn. name"));
                }
                Some(IscsiTarget {
                    portal,
                    iqn,
                    lun: args.iscsi_lun,
                    auth,
                    late_iqn: late_iqn.map(str::to_owned),
                })
            }
            _ => None,
        };
        Ok(CheckOptions {
            phase: args.phase,
            dry_run: args.dry_run,
            output: args.output,
            kubelet_root,
            scratch,
            ledger_path: check_dir.join("ledger.json"),
            claimed: args.csi_proxy_release,
            smb,
            smb_machine: args
                .smb_machine_share
                .as_deref()
                .map(|s| UncPath::parse(s, "--smb-machine-share"))
                .transpose()
                .map_err(|e| e.to_string())?,
            iscsi,
            call_timeout: Duration::from_secs(args.call_timeout_secs.max(1)),
            arrival_timeout: Duration::from_secs(args.arrival_timeout_secs),
            disk_settle: config.disk_settle_time,
        })
    }

    /// A path below the scratch folder.
    pub fn scratch_path(&self, relative: &str) -> HostPath {
        self.scratch
            .join(relative, &self.kubelet_root)
            .unwrap_or_else(|_| self.scratch.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::cli;

    fn resolve(extra: &[&str], env: &[(&str, &str)]) -> Result<CheckOptions, String> {
        let argv: Vec<std::ffi::OsString> = ["wincsi-node", "check-node"]
            .iter()
            .chain(extra)
            .map(std::ffi::OsString::from)
            .collect();
        let (config, args) = cli::parse(&argv).map_err(|e| e.to_string())?;
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        CheckOptions::resolve(&config, &args, &|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn defaults_put_the_scratch_folder_under_the_drivers_plugin_dir() {
        let o = resolve(&[], &[]).expect("resolve");
        assert_eq!(
            o.scratch.as_str(),
            r"C:\var\lib\kubelet\plugins\wincsi.csi.io\check-node\scratch"
        );
        assert_eq!(
            o.ledger_path,
            PathBuf::from(r"C:\var\lib\kubelet\plugins\wincsi.csi.io\check-node")
                .join("ledger.json")
        );
        assert!(o.smb.is_none() && o.iscsi.is_none());
        let o = resolve(&["--state-dir", "/tmp/x/state/"], &[]).expect("resolve");
        assert_eq!(
            o.ledger_path,
            PathBuf::from("/tmp/x/check-node/ledger.json")
        );
    }

    #[test]
    fn scratch_outside_the_kubelet_root_is_refused() {
        let e = resolve(&["--scratch-dir", r"C:\Windows\Temp\x"], &[]).expect_err("outside");
        assert!(
            e.contains("--scratch-dir") && e.contains("kubelet root"),
            "{e}"
        );
    }

    #[test]
    fn smb_secrets_come_from_the_environment_or_a_file_only() {
        let share = ["--smb-share", r"\\fs1\data", "--smb-username", r"CORP\bob"];
        let e = resolve(&share, &[]).expect_err("no password");
        assert!(e.contains(SMB_PASSWORD_ENV), "{e}");
        let o = resolve(&share, &[(SMB_PASSWORD_ENV, "pw-123456")]).expect("env");
        let smb = o.smb.expect("smb");
        assert_eq!(smb.credential.principal(), r"CORP\bob");
        assert_eq!(smb.credential.password().expose(), "pw-123456");
        assert!(!format!("{smb:?}").contains("pw-123456"), "Debug redacts");

        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\r\n").expect("write");
        let mut args = share.to_vec();
        let f = file.display().to_string();
        args.extend(["--smb-password-file", &f]);
        let o = resolve(&args, &[]).expect("file");
        assert_eq!(
            o.smb.expect("smb").credential.password().expose(),
            "from-file"
        );
        assert!(resolve(&args, &[(SMB_PASSWORD_ENV, "x")]).is_err(), "both");
    }

    #[test]
    fn smb_options_are_parsed_by_the_volume_context_rules() {
        let share = [
            "--smb-share",
            r"\\fs1\data",
            "--smb-username",
            "bob",
            "--smb-options",
        ];
        let env = [(SMB_PASSWORD_ENV, "pw-123456")];
        let with = |v: &str| {
            let mut a = share.to_vec();
            a.push(v);
            resolve(&a, &env)
        };
        let o = with("requireintegrity=TRUE, transportType=quic,blockNTLM=false")
            .expect("parse")
            .smb
            .expect("smb");
        assert_eq!(
            o.options.expect("options").describe(),
            "requireIntegrity=true, transportType=quic, blockNTLM=false"
        );
        for (bad, says) in [
            ("requireIntegrity=yes", "requireIntegrity"),
            ("transportType=rdma", "transportType"),
            ("encrypt=true", "unknown option"),
            ("requireIntegrity", "key=value"),
            ("useWriteThrough=true,usewritethrough=false", "twice"),
            (",", "names no option"),
        ] {
            let e = with(bad).expect_err(bad);
            assert!(
                e.contains("--smb-options") && e.contains(says),
                "{bad}: {e}"
            );
        }
        assert!(
            resolve(&["--smb-options", "requirePrivacy=true"], &[]).is_err(),
            "the flag needs --smb-share"
        );
        let o = resolve(&share[..4], &env).expect("no flag");
        assert!(o.smb.expect("smb").options.is_none(), "the build's default");
    }

    #[test]
    fn iscsi_target_and_chap_rules() {
        let t = [
            "--iscsi-portal",
            "10.0.0.5:3261",
            "--iscsi-iqn",
            "iqn.2026-01.io.x:t",
            "--iscsi-lun",
            "2",
        ];
        let o = resolve(&t, &[]).expect("no chap");
        let i = o.iscsi.expect("iscsi");
        assert_eq!((i.portal.port, i.lun, i.auth.mode()), (3261, 2, "none"));
        let mut chap = t.to_vec();
        chap.extend(["--iscsi-chap-username", "u"]);
        assert!(resolve(&chap, &[]).is_err(), "user without secret");
        assert!(
            resolve(&chap, &[(CHAP_SECRET_ENV, "short")]).is_err(),
            "length"
        );
        let o = resolve(&chap, &[(CHAP_SECRET_ENV, "twelve-chars")]).expect("chap");
        assert_eq!(o.iscsi.expect("iscsi").auth.mode(), "one-way CHAP");
        let bad = ["--iscsi-portal", "10.0.0.5", "--iscsi-iqn", "not an iqn"];
        assert!(resolve(&bad, &[]).is_err());
    }
}
