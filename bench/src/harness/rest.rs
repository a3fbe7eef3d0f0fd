//! What a node at rest costs its host: the host processes (csi-proxy's PowerShell and `wmic` children, counted by
//! the simulated host per release: `sim/src/state/processes.rs`) that the readiness check, the CSI `Probe` and
//! kubelet's volume stats polls make csi-proxy start.
//!
//! * Per release: a few CSI `Probe`s and `/readyz` checks (the readiness result is cached for a second, so checks
//!   are spaced by more than that, as kubelet's every 10 s are), and for comparison the call both made before issue
//!   29 (`GetBIOSSerialNumber`, from the harness).
//! * Stats polls: `volumes` SMB volumes on the share and as many iSCSI LUNs of one target, staged and published, then
//!   one NodeGetVolumeStats per volume (kubelet's question, on the pod's target path) in a round: with the driver's
//!   cache (its default expiry) a cold round and a warm one right after, then, with the driver restarted with
//!   `--vol-stats-cache-expire-in-minutes=0`, one round per release.
//!
//! Per hour is derived from kubelet's schedule, not timed (the cache's expiry is minutes): the chart's probes
//! (readiness every 10 s, liveness — the sidecar's `Probe` — every 30 s), and per pod volume one stats poll every 1 to
//! 2 minutes (`pkg/kubelet/server/stats/volume_stat_calculator.go`: `wait.JitterUntil(…, period, 1.0, …)` with the
//! default 1-minute `--volume-stats-agg-period`: 40 polls an hour on average). With an expiry of E seconds a volume's
//! answer is refreshed at the first poll at least E after the last refresh: on average every E + 46.7 s (the mean
//! wait from a random instant to the next poll of a process with gaps uniform on [60, 120) s: E\[g²\] / 2E\[g\] =
//! 8400 / 180 s).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use sim::CsiProxyVersion;
use sim::admin::AdminClient;
use wincsi_e2e::ProxyWiring;

use super::error::{Error, Result};
use super::node::BenchNode;
use super::volumes::{Allocator, BenchVolume, CallError, Protocol};

/// kubelet's readiness checks an hour at the chart's `periodSeconds: 10`.
pub(crate) const READINESS_PER_HOUR: f64 = 360.0;
/// The livenessprobe sidecar's `Probe`s an hour at the chart's liveness `periodSeconds: 30`.
pub(crate) const PROBES_PER_HOUR: f64 = 120.0;
/// kubelet's stats polls an hour per pod volume (mean gap 90 s).
pub(crate) const POLLS_PER_HOUR: f64 = 3600.0 / 90.0;
/// The mean wait from a refresh's expiry to the next poll (module docs), seconds.
const MEAN_WAIT_S: f64 = 8400.0 / 180.0;

/// Stats refreshes an hour per volume with answers kept `expiry_s` (0: every poll).
pub(crate) fn refreshes_per_hour(expiry_s: f64) -> f64 {
    if expiry_s <= 0.0 {
        POLLS_PER_HOUR
    } else {
        (3600.0 / (expiry_s + MEAN_WAIT_S)).min(POLLS_PER_HOUR)
    }
}

/// One release's probe costs, per check.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReleaseRest {
    /// The release the simulated host played.
    pub(crate) release: String,
    /// Host calls per CSI `Probe` and their names.
    pub(crate) probe_calls: f64,
    /// Host processes per CSI `Probe`.
    pub(crate) probe_processes: f64,
    /// Host calls per `/readyz` check.
    pub(crate) readiness_calls: f64,
    /// Host processes per `/readyz` check.
    pub(crate) readiness_processes: f64,
    /// What the probes asked: call names seen.
    pub(crate) probe_rpcs: Vec<String>,
    /// Host processes of one `GetBIOSSerialNumber` (the probes' call before issue 29).
    pub(crate) old_probe_processes: u64,
}

/// One round of stats polls of one protocol's volumes.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PollRound {
    /// Protocol of the volumes.
    pub(crate) protocol: Protocol,
    /// The release the simulated host played.
    pub(crate) release: String,
    /// `cache off`, `cache, cold` or `cache, warm`.
    pub(crate) round: &'static str,
    /// Volumes polled.
    pub(crate) volumes: usize,
    /// Host calls the round made.
    pub(crate) calls: u64,
    /// Host processes the round made.
    pub(crate) processes: u64,
    /// Volumes reported abnormal.
    pub(crate) abnormal: usize,
}

/// The section's result.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct AtRest {
    /// Per release.
    pub(crate) releases: Vec<ReleaseRest>,
    /// Stats poll rounds.
    pub(crate) polls: Vec<PollRound>,
    /// The driver's default cache expiry, seconds.
    pub(crate) cache_expiry_s: f64,
    /// Probes and readiness checks per release.
    pub(crate) checks: usize,
}

/// Host calls (by name) and processes since `cursor` (advanced).
async fn since(host: &AdminClient, cursor: &mut u64) -> Result<(BTreeMap<String, u64>, u64)> {
    let entries = host.audit(*cursor).await?;
    if let Some(last) = entries.last() {
        *cursor = last.seq;
    }
    let mut calls = BTreeMap::new();
    let mut processes = 0;
    for e in entries {
        processes += e.host_processes.total();
        *calls.entry(e.rpc).or_insert(0) += 1;
    }
    Ok((calls, processes))
}

async fn cursor(host: &AdminClient) -> Result<u64> {
    Ok(host.audit(0).await?.last().map_or(0, |e| e.seq))
}

/// The probes per release (`checks` of each kind).
async fn probes(node: &BenchNode, checks: usize) -> Result<Vec<ReleaseRest>> {
    let host = node.host();
    let mut out = Vec::new();
    for v in CsiProxyVersion::ALL {
        host.set_csi_proxy_version(v).await?;
        let mut at = cursor(host).await?;
        for _ in 0..checks {
            node.csi()
                .identity()
                .probe(csi::v1::ProbeRequest {})
                .await
                .map_err(|s| Error::Setup(format!("Probe: {s}")))?;
        }
        let (probe, probe_p) = since(host, &mut at).await?;
        for _ in 0..checks {
            // Past the readiness cache (1 s), as kubelet's checks every 10 s are.
            tokio::time::sleep(Duration::from_millis(1100)).await;
            if !node.ready().await? {
                return Err(Error::Setup(format!("{v}: /readyz not ready")));
            }
        }
        let (ready, ready_p) = since(host, &mut at).await?;
        let ProxyWiring::UnixSockets(dir) = node.proxy_wiring() else {
            return Err(Error::Setup(
                "the at-rest section needs Unix sockets".into(),
            ));
        };
        let old = proxy_client::ProxyClient::new(proxy_client::Transport::UnixSockets {
            dir: dir.clone(),
        });
        old.system()
            .bios_serial()
            .await
            .map_err(|e| Error::Setup(format!("GetBIOSSerialNumber: {e}")))?;
        let (_, old_p) = since(host, &mut at).await?;
        let n = checks as f64;
        let rpcs: std::collections::BTreeSet<String> =
            probe.keys().chain(ready.keys()).cloned().collect();
        out.push(ReleaseRest {
            release: v.to_string(),
            probe_calls: probe.values().sum::<u64>() as f64 / n,
            probe_processes: probe_p as f64 / n,
            readiness_calls: ready.values().sum::<u64>() as f64 / n,
            readiness_processes: ready_p as f64 / n,
            probe_rpcs: rpcs.into_iter().collect(),
            old_probe_processes: old_p,
        });
    }
    host.set_csi_proxy_version(CsiProxyVersion::DEFAULT).await?;
    Ok(out)
}

/// One stats poll of every volume in `vols` (one protocol's); the round's calls, processes and abnormal answers.
async fn poll(
    node: &BenchNode,
    vols: &[BenchVolume],
    errors: &mut Vec<CallError>,
) -> Result<(u64, u64, usize)> {
    let host = node.host();
    let mut at = cursor(host).await?;
    let mut abnormal = 0;
    for v in vols {
        match v.stats(node.csi()).await {
            Ok(true) => {}
            Ok(false) => abnormal += 1,
            Err(e) => errors.push(e),
        }
    }
    let (calls, processes) = since(host, &mut at).await?;
    Ok((calls.values().sum(), processes, abnormal))
}

/// The whole section: probes per release, then `volumes` volumes of each protocol polled with and without the cache.
/// Leaves the driver restarted with its default flags and the volumes gone.
pub(crate) async fn at_rest(
    node: &mut BenchNode,
    alloc: &Allocator,
    volumes: usize,
    checks: usize,
    errors: &mut Vec<CallError>,
) -> Result<AtRest> {
    let releases = probes(node, checks).await?;
    let mut groups = Vec::new();
    for p in Protocol::ALL {
        let vols = alloc.fresh_group(p, volumes)?;
        for v in &vols {
            v.prepare(node.host()).await?;
            if let Err(e) = v.up(node.csi()).await {
                errors.push(e);
            }
        }
        groups.push((p, vols));
    }
    let mut polls = Vec::new();
    let default = CsiProxyVersion::DEFAULT.to_string();
    let mut record = |protocol, release: &str, round, (calls, processes, abnormal)| {
        polls.push(PollRound {
            protocol,
            release: release.to_owned(),
            round,
            volumes,
            calls,
            processes,
            abnormal,
        });
    };
    for (p, vols) in &groups {
        let cold = poll(node, vols, errors).await?;
        let warm = poll(node, vols, errors).await?;
        record(*p, &default, "cache, cold", cold);
        record(*p, &default, "cache, warm", warm);
    }
    node.restart_driver_with(&["--vol-stats-cache-expire-in-minutes=0"])
        .await?;
    for v in CsiProxyVersion::ALL {
        node.host().set_csi_proxy_version(v).await?;
        for (p, vols) in &groups {
            let off = poll(node, vols, errors).await?;
            record(*p, v.as_str(), "cache off", off);
        }
    }
    node.host()
        .set_csi_proxy_version(CsiProxyVersion::DEFAULT)
        .await?;
    node.restart_driver_with(&[]).await?;
    for (_, vols) in &groups {
        for v in vols {
            errors.extend(v.down(node.csi()).await);
        }
    }
    Ok(AtRest {
        releases,
        polls,
        cache_expiry_s: 60.0 * wincsi::config::DEFAULT_VOL_STATS_CACHE_MINUTES as f64,
        checks,
    })
}
