//! Command-line flags (with environment fallbacks) and their validation.
//!
//! Flag names follow the kubernetes-csi drivers. Invalid values are rejected at parse time with
//! a one-line message naming the flag and the rule ([`one_line_error`]); the binary then exits
//! with status 2.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::error::{Error, Result};

/// Default CSI driver name (also the plugin directory name under the kubelet root).
pub const DEFAULT_DRIVER_NAME: &str = "wincsi.csi.io";

/// Default kubelet root directory on Windows nodes.
pub const DEFAULT_KUBELET_ROOT: &str = r"C:\var\lib\kubelet";

/// Default prefix of the csi-proxy named pipes.
pub const DEFAULT_CSI_PROXY_PIPE_PREFIX: &str = r"\\.\pipe\";

/// Maximum length of a CSI driver name.
pub const MAX_DRIVER_NAME_LEN: usize = 63;

/// Default of `--vol-stats-cache-expire-in-minutes`: half the peers' 10, so a volume's condition is at most a few
/// kubelet polls old (kubelet itself polls every 1–2 minutes).
pub const DEFAULT_VOL_STATS_CACHE_MINUTES: u64 = 5;

/// The largest `--vol-stats-cache-expire-in-minutes` accepted (a day).
pub const MAX_VOL_STATS_CACHE_MINUTES: u64 = 24 * 60;

/// Build information shown by `--version` and in the `GetPluginInfo` manifest.
pub mod build_info {
    /// Crate version.
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// Target triple the binary was built for.
    pub const TARGET: &str = env!("WINCSI_BUILD_TARGET");
    /// Cargo profile (`debug` or `release`).
    pub const PROFILE: &str = env!("WINCSI_BUILD_PROFILE");
    /// `rustc --version` of the compiler that built the binary.
    pub const RUSTC: &str = env!("WINCSI_BUILD_RUSTC");
}

const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (CSI spec ",
    "1.12.0",
    ", ",
    env!("WINCSI_BUILD_TARGET"),
    ", ",
    env!("WINCSI_BUILD_PROFILE"),
    ", ",
    env!("WINCSI_BUILD_RUSTC"),
    ")"
);

/// Validated configuration of the node plugin.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "wincsi-node",
    version,
    long_version = LONG_VERSION,
    about = "Kubernetes CSI node driver for Windows nodes (SMB and iSCSI through csi-proxy)",
    after_help = "Kubernetes API access is needed only by inline ephemeral SMB volumes that name a secretName: \
                  the pod's service account (KUBERNETES_SERVICE_HOST/_PORT; token and ca.crt under \
                  %CONTAINER_SANDBOX_MOUNT_POINT% in a HostProcess pod, else in \
                  /var/run/secrets/kubernetes.io/serviceaccount, or in the directory WINCSI_SERVICE_ACCOUNT_DIR names). No kubeconfig is read. It is resolved for each \
                  read, so the driver starts without it; such a volume then fails with FAILED_PRECONDITION.\n\n`wincsi-node check-node --help`: \
                  check a node's host backend on scratch objects (docs/real-node-checks.md)."
)]
pub struct Config {
    /// CSI endpoint to serve on: `unix:///path/csi.sock`,
    /// `unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock` or `tcp://127.0.0.1:PORT`.
    #[arg(long, env = "CSI_ENDPOINT", value_name = "URL", value_parser = parse_endpoint)]
    pub endpoint: Endpoint,

    /// Name of this node, reported by NodeGetInfo.
    #[arg(long, env = "KUBE_NODE_NAME", value_name = "NAME", value_parser = parse_node_id)]
    pub node_id: String,

    /// CSI driver name reported by GetPluginInfo.
    #[arg(
        long,
        env = "DRIVER_NAME",
        value_name = "NAME",
        default_value = DEFAULT_DRIVER_NAME,
        value_parser = parse_driver_name
    )]
    pub driver_name: String,

    /// Kubelet root directory.
    #[arg(long, env = "KUBELET_ROOT", value_name = "DIR", default_value = DEFAULT_KUBELET_ROOT)]
    pub kubelet_root: PathBuf,

    /// Host backend that performs the privileged operations.
    #[arg(long, value_enum, default_value_t = HostBackend::CsiProxy)]
    pub host_backend: HostBackend,

    /// Prefix of the csi-proxy named pipes.
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = DEFAULT_CSI_PROXY_PIPE_PREFIX,
        value_parser = parse_pipe_prefix
    )]
    pub csi_proxy_pipe_prefix: String,

    /// Reach csi-proxy (or the simulated host) over Unix sockets
    /// `<DIR>/csi-proxy-<group>-<version>.sock` instead of named pipes.
    #[arg(long, env = "CSI_PROXY_SOCKET_DIR", value_name = "DIR")]
    pub csi_proxy_socket_dir: Option<PathBuf>,

    /// Directory for the driver's own state; defaults to
    /// `<kubelet-root>\plugins\<driver-name>\state`.
    #[arg(long, env = "STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Maximum number of volumes on this node reported by NodeGetInfo; 0 means no limit.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = parse_max_volumes
    )]
    pub max_volumes_per_node: i64,

    /// Topology segment reported by NodeGetInfo (repeatable).
    #[arg(long = "topology", value_name = "KEY=VALUE", value_parser = parse_topology)]
    pub topology: Vec<TopologySegment>,

    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// Log level.
    #[arg(long, env = "LOG_LEVEL", value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// Serve Prometheus metrics at http://ADDR/metrics: `:PORT` (every interface) or `IP:PORT`. Off when unset.
    #[arg(long, value_name = "ADDR", value_parser = parse_http_address)]
    pub metrics_address: Option<HttpAddress>,

    /// Keep each NodeGetVolumeStats answer this many minutes, per volume and path (every stage, unstage, publish,
    /// unpublish and expansion of the volume drops its answers); 0 turns the cache off. On csi-proxy v1.1.3/v1.2.1
    /// an iSCSI volume's answer costs two PowerShell processes, asked by kubelet every 1-2 minutes per pod volume.
    #[arg(
        long,
        env = "VOL_STATS_CACHE_EXPIRE_IN_MINUTES",
        value_name = "MINUTES",
        default_value_t = DEFAULT_VOL_STATS_CACHE_MINUTES,
        value_parser = parse_cache_minutes
    )]
    pub vol_stats_cache_expire_in_minutes: u64,

    /// Serve /readyz (200 while the host backend answers, else 503 with the reason) and /livez (200 while the CSI
    /// server runs) at http://ADDR: `:PORT` or `IP:PORT`; may equal --metrics-address (one listener). Off when
    /// unset.
    #[arg(long, value_name = "ADDR", value_parser = parse_http_address)]
    pub health_address: Option<HttpAddress>,

    /// Require SMB encryption (`RequirePrivacy`) on the SMB global mappings the native backend creates: true
    /// (default, as csi-proxy's `-require-privacy`) or false for servers without SMB 3 encryption. With
    /// --host-backend csi-proxy, csi-proxy's own `-require-privacy` flag decides (v1.2.0 and later).
    #[arg(
        long,
        env = "SMB_REQUIRE_PRIVACY",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub smb_require_privacy: bool,

    /// TEST BUILD ONLY (feature `test-windows-socket`): with --host-backend native, drive the simulated host's
    /// Windows view served at ADDR (`unix:PATH` or `tcp:127.0.0.1:PORT`, `wincsi-sim --windows-socket`) instead of
    /// this machine.
    #[cfg(feature = "test-windows-socket")]
    #[arg(long, value_name = "ADDR")]
    pub test_windows_socket: Option<String>,
    /// How long an iSCSI LUN's disk must show no volume (online, looked at again with Rescans) before the csi-proxy
    /// backend takes it for empty and partitions it, and how long a new partition's volume is waited for: Windows'
    /// volumes arrive some time after a disk comes online or is partitioned, and csi-proxy cannot list partitions.
    /// Too short risks formatting another system's partition whose volume arrived late. The native backend reads
    /// partition tables instead. `<N>ms`, `<N>s` or `<N>m`.
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_DISK_SETTLE, value_parser = parse_duration)]
    pub disk_settle_time: std::time::Duration,

    /// Report a staged volume that no pod references and no kubelet call has named for this many minutes: kubelet
    /// will never unstage it (it skipped NodeUnstageVolume, or its pod directory went with a reboot), so its SMB
    /// mapping or iSCSI session stays. Checked every 5 minutes with one PathExists per publish record (no host
    /// process); 0 turns the scan off; otherwise at least 10.
    #[arg(
        long,
        env = "UNREFERENCED_VOLUME_MINUTES",
        value_name = "MINUTES",
        default_value_t = DEFAULT_UNREFERENCED_VOLUME_MINUTES,
        value_parser = parse_unreferenced_minutes
    )]
    pub unreferenced_volume_minutes: u64,

    /// Unstage such a volume as kubelet would have (off: only reported), when none of its publish targets nor their
    /// pod directories exist and no state record is quarantined.
    #[arg(
        long,
        env = "RELEASE_UNREFERENCED_VOLUMES",
        value_name = "BOOL",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub release_unreferenced_volumes: bool,
}

/// The default `--unreferenced-volume-minutes`.
pub const DEFAULT_UNREFERENCED_VOLUME_MINUTES: u64 = 60;

/// The shortest non-zero `--unreferenced-volume-minutes`: kubelet names a volume a pod wants at least every 2 min 2 s
/// (its longest retry backoff) or 1-2 min (stats of a mounted volume), so a shorter bound could report a pod that is
/// still being set up.
pub const MIN_UNREFERENCED_VOLUME_MINUTES: u64 = 10;

/// The longest `--unreferenced-volume-minutes`: a week.
pub const MAX_UNREFERENCED_VOLUME_MINUTES: u64 = 7 * 24 * 60;

/// The default `--disk-settle-time`.
pub const DEFAULT_DISK_SETTLE: &str = "15s";

impl Config {
    /// Parses and validates flags (first item is the program name).
    ///
    /// On error, `--help` or `--version` the returned [`clap::Error`] says what to print and
    /// with which exit status; see [`one_line_error`].
    pub fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let config = Self::try_parse_from(args)?;
        config.validate().map_err(|e| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n"))
        })?;
        Ok(config)
    }

    /// Cross-flag checks that a per-value parser cannot do.
    pub fn validate(&self) -> Result<()> {
        let mut seen = BTreeMap::new();
        for seg in &self.topology {
            if seen.insert(seg.key.as_str(), ()).is_some() {
                return Err(Error::Config {
                    flag: "--topology",
                    rule: format!("key {:?} given more than once", seg.key),
                });
            }
        }
        Ok(())
    }

    /// The state directory: `--state-dir`, or `<kubelet-root>\plugins\<driver-name>\state`
    /// (with `/` when the kubelet root is a Unix path).
    pub fn state_dir(&self) -> PathBuf {
        if let Some(dir) = &self.state_dir {
            return dir.clone();
        }
        let root = self.kubelet_root.to_string_lossy();
        let sep = if root.starts_with('/') { '/' } else { '\\' };
        let root = root.trim_end_matches(['/', '\\']);
        PathBuf::from(format!(
            "{root}{sep}plugins{sep}{}{sep}state",
            self.driver_name
        ))
    }

    /// `--unreferenced-volume-minutes` as a duration (`None`: no scan).
    pub fn unreferenced_volume_age(&self) -> Option<std::time::Duration> {
        (self.unreferenced_volume_minutes > 0)
            .then(|| std::time::Duration::from_secs(60 * self.unreferenced_volume_minutes))
    }

    /// How long NodeGetVolumeStats answers are cached (`None`: off).
    pub fn vol_stats_cache_expiry(&self) -> Option<std::time::Duration> {
        (self.vol_stats_cache_expire_in_minutes > 0)
            .then(|| std::time::Duration::from_secs(60 * self.vol_stats_cache_expire_in_minutes))
    }

    /// Topology segments as a map (keys are unique after validation).
    pub fn topology_segments(&self) -> BTreeMap<String, String> {
        self.topology
            .iter()
            .map(|s| (s.key.clone(), s.value.clone()))
            .collect()
    }
}

/// Renders a clap error as one line (`error: ...`) without usage text.
///
/// Clap's messages already name the flag and, for our value parsers, the rule; this only folds
/// multi-line messages (e.g. missing required flags) onto one line and drops the
/// `Usage:`/`--help` hints.
pub fn one_line_error(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let body = rendered
        .split("\n\nUsage:")
        .next()
        .unwrap_or_default()
        .split("\n\nFor more information")
        .next()
        .unwrap_or_default();
    let line = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if line.starts_with("error:") {
        line
    } else {
        format!("error: {line}")
    }
}

/// Where the CSI gRPC server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// An AF_UNIX socket path (Unix or Windows form).
    Unix(PathBuf),
    /// A loopback TCP address (tests; Wine has no AF_UNIX).
    Tcp(SocketAddr),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "unix://{}", path.display()),
            Self::Tcp(addr) => write!(f, "tcp://{addr}"),
        }
    }
}

/// Parses `unix:///abs/path`, `unix://C:\abs\path` or `tcp://127.0.0.1:PORT`.
pub fn parse_endpoint(s: &str) -> Result<Endpoint, String> {
    const RULE: &str =
        "expected unix:///absolute/path, unix://C:\\absolute\\path or tcp://127.0.0.1:PORT";
    if let Some(path) = s.strip_prefix("unix://") {
        if is_absolute_any_os(path) {
            Ok(Endpoint::Unix(PathBuf::from(path)))
        } else {
            Err(format!("{RULE} (the socket path must be absolute)"))
        }
    } else if let Some(addr) = s.strip_prefix("tcp://") {
        let addr: SocketAddr = addr
            .parse()
            .map_err(|_| format!("{RULE} (bad TCP address)"))?;
        if addr.ip().is_loopback() {
            Ok(Endpoint::Tcp(addr))
        } else {
            Err(format!(
                "{RULE} (TCP is for tests and must use a loopback address)"
            ))
        }
    } else {
        Err(RULE.to_owned())
    }
}

/// `/x` on any OS, or a Windows drive path `C:\x` / `C:/x`.
fn is_absolute_any_os(path: &str) -> bool {
    let b = path.as_bytes();
    let drive =
        b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && matches!(b[2], b'\\' | b'/');
    (path.starts_with('/') && path.len() > 1) || (drive && b.len() > 3)
}

/// Where an HTTP endpoint (`--metrics-address`, `--health-address`) listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpAddress {
    /// `:PORT`: every interface (IPv6 and IPv4 where the host has both), as Go's `net.Listen(":PORT")`.
    AnyInterface(u16),
    /// `IP:PORT` or `[IPv6]:PORT`.
    Ip(SocketAddr),
}

impl fmt::Display for HttpAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AnyInterface(port) => write!(f, ":{port}"),
            Self::Ip(addr) => write!(f, "{addr}"),
        }
    }
}

/// Parses `:PORT`, `IP:PORT` or `[IPv6]:PORT` (port 0: one the OS picks, for tests).
pub fn parse_http_address(s: &str) -> Result<HttpAddress, String> {
    const RULE: &str = "expected :PORT (every interface), IP:PORT or [IPv6]:PORT";
    if let Some(port) = s.strip_prefix(':') {
        return port
            .parse()
            .map(HttpAddress::AnyInterface)
            .map_err(|_| format!("{RULE} (bad port)"));
    }
    s.parse().map(HttpAddress::Ip).map_err(|_| RULE.to_owned())
}

/// Validates a CSI driver name: at most 63 characters, starting and ending with a letter, with
/// only letters, digits, `-`, `.` and `_` in between.
pub fn parse_driver_name(s: &str) -> Result<String, String> {
    const RULE: &str = "must be at most 63 characters, start and end with a letter, and contain only letters, digits, '-', '.' and '_'";
    let ok = !s.is_empty()
        && s.len() <= MAX_DRIVER_NAME_LEN
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.ends_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(RULE.to_owned())
    }
}

fn parse_node_id(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else if s.len() > 256 {
        Err("must be at most 256 bytes".to_owned())
    } else {
        Ok(s.to_owned())
    }
}

fn parse_pipe_prefix(s: &str) -> Result<String, String> {
    if s.starts_with(r"\\") && s.ends_with('\\') {
        Ok(s.to_owned())
    } else {
        Err(
            r"must be a pipe path prefix starting with '\\' and ending with '\', e.g. \\.\pipe\"
                .to_owned(),
        )
    }
}

fn parse_cache_minutes(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n <= MAX_VOL_STATS_CACHE_MINUTES => Ok(n),
        _ => Err(format!(
            "must be a whole number of minutes from 0 (no cache) to {MAX_VOL_STATS_CACHE_MINUTES}"
        )),
    }
}

fn parse_unreferenced_minutes(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Ok(0),
        Ok(n)
            if (MIN_UNREFERENCED_VOLUME_MINUTES..=MAX_UNREFERENCED_VOLUME_MINUTES).contains(&n) =>
        {
            Ok(n)
        }
        _ => Err(format!(
            "must be 0 (no scan) or a whole number of minutes from {MIN_UNREFERENCED_VOLUME_MINUTES} to \
             {MAX_UNREFERENCED_VOLUME_MINUTES}"
        )),
    }
}

/// A duration `<N>ms`, `<N>s` or `<N>m`, more than zero and at most an hour.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    const RULE: &str = "must be a duration like 1500ms, 15s or 2m (more than zero, at most 60m)";
    let t = s.trim();
    let (n, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => return Err(RULE.to_owned()),
    };
    let n: u64 = n.parse().map_err(|_| RULE.to_owned())?;
    let d = match unit {
        "ms" => std::time::Duration::from_millis(n),
        "s" => std::time::Duration::from_secs(n),
        "m" => std::time::Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(RULE.to_owned()),
    };
    if d.is_zero() || d > std::time::Duration::from_secs(3600) {
        return Err(RULE.to_owned());
    }
    Ok(d)
}

fn parse_max_volumes(s: &str) -> Result<i64, String> {
    match s.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err("must be a non-negative integer (0 means no limit)".to_owned()),
    }
}

/// One `--topology KEY=VALUE` segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologySegment {
    /// Segment key, e.g. `topology.kubernetes.io/zone`.
    pub key: String,
    /// Segment value, e.g. `zone-a`.
    pub value: String,
}

/// Parses `KEY=VALUE` with a non-empty key and value made of label characters.
pub fn parse_topology(s: &str) -> Result<TopologySegment, String> {
    const RULE: &str = "expected KEY=VALUE with a non-empty key and value made of letters, digits, '-', '.', '_' (and '/' in the key)";
    let (key, value) = s.split_once('=').ok_or_else(|| RULE.to_owned())?;
    let key_ok = !key.is_empty()
        && key.len() <= 316
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '/'));
    let value_ok = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if key_ok && value_ok {
        Ok(TopologySegment {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    } else {
        Err(RULE.to_owned())
    }
}

/// Which host backend performs privileged operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostBackend {
    /// The Windows csi-proxy (named pipes, or Unix sockets with `--csi-proxy-socket-dir`).
    CsiProxy,
    /// Win32 and WMI in-process (Windows only: a HostProcess container; no csi-proxy).
    Native,
}

impl HostBackend {
    /// The flag value, also the `backend` label of the host-call metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::CsiProxy => "csi-proxy",
            Self::Native => "native",
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// Log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Informational messages (default).
    Info,
    /// Debugging detail.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The matching tracing level.
    pub fn as_tracing(self) -> tracing::Level {
        match self {
            Self::Error => tracing::Level::ERROR,
            Self::Warn => tracing::Level::WARN,
            Self::Info => tracing::Level::INFO,
            Self::Debug => tracing::Level::DEBUG,
            Self::Trace => tracing::Level::TRACE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Result<Config, clap::Error> {
        let mut args = vec![
            "wincsi-node",
            "--endpoint",
            "unix:///tmp/csi.sock",
            "--node-id",
            "n1",
        ];
        args.extend_from_slice(extra);
        Config::try_parse_args(args)
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).expect("parse");
        assert_eq!(c.driver_name, "wincsi.csi.io");
        assert_eq!(c.kubelet_root, PathBuf::from(r"C:\var\lib\kubelet"));
        assert_eq!(c.csi_proxy_pipe_prefix, r"\\.\pipe\");
        assert_eq!(c.max_volumes_per_node, 0);
        assert_eq!(c.log_format, LogFormat::Plain);
        assert_eq!(c.log_level, LogLevel::Info);
        assert_eq!(c.host_backend, HostBackend::CsiProxy);
        assert!(c.csi_proxy_socket_dir.is_none());
        assert!(c.metrics_address.is_none() && c.health_address.is_none());
        assert_eq!(
            c.vol_stats_cache_expiry(),
            Some(std::time::Duration::from_secs(300))
        );
        assert_eq!(
            parse(&["--vol-stats-cache-expire-in-minutes", "0"])
                .expect("off")
                .vol_stats_cache_expiry(),
            None
        );
        for bad in ["-1", "1441", "2.5", "x"] {
            let arg = format!("--vol-stats-cache-expire-in-minutes={bad}");
            let err = parse(&[arg.as_str()]).expect_err(bad);
            assert!(
                one_line_error(&err).contains("--vol-stats-cache-expire-in-minutes"),
                "{bad}"
            );
        }
        assert_eq!(
            c.state_dir(),
            PathBuf::from(r"C:\var\lib\kubelet\plugins\wincsi.csi.io\state")
        );
    }

    #[test]
    fn unreferenced_volume_flags() {
        let c = parse(&[]).expect("parse");
        assert_eq!(
            c.unreferenced_volume_age(),
            Some(std::time::Duration::from_secs(3600))
        );
        assert!(!c.release_unreferenced_volumes);
        let c = parse(&[
            "--unreferenced-volume-minutes",
            "0",
            "--release-unreferenced-volumes",
            "true",
        ])
        .expect("parse");
        assert_eq!(c.unreferenced_volume_age(), None);
        assert!(c.release_unreferenced_volumes);
        for bad in ["9", "10081", "-1", "x"] {
            let arg = format!("--unreferenced-volume-minutes={bad}");
            let err = parse(&[arg.as_str()]).expect_err(bad);
            assert!(
                one_line_error(&err).contains("--unreferenced-volume-minutes"),
                "{bad}"
            );
        }
    }

    #[test]
    fn state_dir_follows_unix_kubelet_root_and_override() {
        let c = parse(&[
            "--kubelet-root",
            "/var/lib/kubelet/",
            "--driver-name",
            "x.y",
        ])
        .expect("parse");
        assert_eq!(
            c.state_dir(),
            PathBuf::from("/var/lib/kubelet/plugins/x.y/state")
        );
        let c = parse(&["--state-dir", r"D:\state"]).expect("parse");
        assert_eq!(c.state_dir(), PathBuf::from(r"D:\state"));
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("unix:///var/lib/kubelet/plugins/x/csi.sock"),
            Ok(Endpoint::Unix("/var/lib/kubelet/plugins/x/csi.sock".into()))
        );
        assert_eq!(
            parse_endpoint(r"unix://C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock"),
            Ok(Endpoint::Unix(
                r"C:\var\lib\kubelet\plugins\wincsi.csi.io\csi.sock".into()
            ))
        );
        assert_eq!(
            parse_endpoint("tcp://127.0.0.1:10000"),
            Ok(Endpoint::Tcp("127.0.0.1:10000".parse().expect("addr")))
        );
        assert!(parse_endpoint("tcp://[::1]:0").is_ok());
        for bad in [
            "",
            "/tmp/csi.sock",
            "unix://",
            "unix://relative/csi.sock",
            "unix://C:",
            "tcp://0.0.0.0:10000",
            "tcp://10.0.0.1:10000",
            "tcp://localhost",
            "npipe://./pipe/csi",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn http_addresses() {
        let c = parse(&[
            "--metrics-address",
            ":9808",
            "--health-address",
            "127.0.0.1:29667",
        ])
        .expect("parse");
        assert_eq!(c.metrics_address, Some(HttpAddress::AnyInterface(9808)));
        assert_eq!(
            c.health_address,
            Some(HttpAddress::Ip("127.0.0.1:29667".parse().expect("addr")))
        );
        for s in [":29667", "0.0.0.0:1", "[::1]:0", "[::]:9808", ":0"] {
            assert_eq!(parse_http_address(s).expect(s).to_string(), s);
        }
        for bad in [
            "",
            ":",
            "9808",
            ":http",
            ":70000",
            "localhost:1",
            "http://:1",
            "1.2.3.4",
        ] {
            assert!(parse_http_address(bad).is_err(), "{bad:?} accepted");
        }
        let err = parse(&["--health-address", "29667"]).expect_err("no colon");
        let line = one_line_error(&err);
        assert!(
            line.contains("--health-address") && line.contains(":PORT"),
            "{line}"
        );
    }

    #[test]
    fn endpoint_display_round_trips() {
        for s in [
            r"unix://C:\k\csi.sock",
            "unix:///tmp/csi.sock",
            "tcp://127.0.0.1:5",
        ] {
            assert_eq!(parse_endpoint(s).expect("parse").to_string(), s);
        }
    }

    #[test]
    fn driver_names() {
        for good in ["wincsi.csi.io", "a", "smb_driver-v.b", &"a".repeat(63)] {
            assert!(parse_driver_name(good).is_ok(), "{good:?} rejected");
        }
        for bad in [
            "",
            &"a".repeat(64),
            "1wincsi.io",
            "wincsi.io1",
            "-a",
            "a.",
            "win csi",
            "wincsi/io",
            "wïncsi",
        ] {
            assert!(parse_driver_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn topology() {
        let c = parse(&[
            "--topology",
            "topology.kubernetes.io/zone=zone-a",
            "--topology",
            "rack=r1",
        ])
        .expect("parse");
        assert_eq!(
            c.topology_segments(),
            BTreeMap::from([
                ("rack".to_owned(), "r1".to_owned()),
                (
                    "topology.kubernetes.io/zone".to_owned(),
                    "zone-a".to_owned()
                ),
            ])
        );
        for bad in ["nokey", "=v", "k=", "k=a b", "k=a/b"] {
            assert!(parse_topology(bad).is_err(), "{bad:?} accepted");
        }
        let err = parse(&["--topology", "a=b", "--topology", "a=c"]).expect_err("duplicate");
        let line = one_line_error(&err);
        assert!(
            line.contains("--topology") && line.contains("more than once"),
            "{line}"
        );
    }

    #[test]
    fn errors_are_one_line_and_name_the_flag() {
        let err = parse(&["--driver-name", "bad!"]).expect_err("bad name");
        let line = one_line_error(&err);
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with("error:"), "{line}");
        assert!(line.contains("--driver-name"), "{line}");
        assert!(line.contains("at most 63 characters"), "{line}");

        let err = Config::try_parse_args(["wincsi-node", "--endpoint", "unix:///x"])
            .expect_err("no node id");
        let line = one_line_error(&err);
        assert!(!line.contains('\n') && line.contains("--node-id"), "{line}");

        let err = parse(&["--max-volumes-per-node", "-1"]).expect_err("negative");
        assert!(one_line_error(&err).contains("--max-volumes-per-node"));
    }
}
