//! The Markdown of the at-rest and clients sections (§6, §7) and their target rows.

use std::fmt::Write as _;

use super::clients::Clients;
use super::report::{Results, ms};
use super::rest::{self, AtRest};
use super::volumes::Protocol;

/// Host processes an hour at rest on `release` with no volume: the chart's readiness checks and liveness Probes.
fn probes_per_hour(r: &rest::ReleaseRest) -> f64 {
    rest::READINESS_PER_HOUR * r.readiness_processes + rest::PROBES_PER_HOUR * r.probe_processes
}

/// Host processes per poll (one volume) of `protocol` on `release` without the cache.
fn per_poll(a: &AtRest, protocol: Protocol, release: &str) -> Option<f64> {
    a.polls
        .iter()
        .find(|p| p.protocol == protocol && p.release == release && p.round == "cache off")
        .map(|p| p.processes as f64 / p.volumes.max(1) as f64)
}

/// The clients' server CPU ratio (kubelet-like over tonic) on one connection: the median of the round pairs' ratios
/// (the ratio of the totals when there are none).
fn ping_ratio(c: &Clients) -> Option<f64> {
    if let Some(r) = c.ratios("one connection").filter(|r| !r.rounds.is_empty()) {
        return Some(r.median());
    }
    let t = c.row("tonic", "one connection")?;
    let k = c.row("kubelet-like", "one connection")?;
    Some(k.server_cpu_us / t.server_cpu_us)
}

/// The target rows of this round's sections (`row(target, measured, met)`).
pub(crate) fn targets(r: &Results, row: &mut dyn FnMut(&str, String, bool)) {
    let a = &r.at_rest;
    if !a.releases.is_empty() {
        let worst = a.releases.iter().map(probes_per_hour).fold(0.0, f64::max);
        row(
            "Host processes at rest, no volume (readiness + CSI Probe at the chart's periods), every csi-proxy release",
            format!(
                "{worst:.0} an hour at most ({}); native starts none (no child process in-process)",
                a.releases
                    .iter()
                    .map(|x| format!("{} {:.0}", x.release, probes_per_hour(x)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            worst == 0.0,
        );
    }
    if let Some(ratio) = ping_ratio(&r.clients) {
        row(
            "Server CPU per cheap RPC with the kubelet-like client (a PING after each response) ≤ 1.1 × tonic's",
            format!("{ratio:.2} ×"),
            ratio <= 1.1,
        );
    }
}

/// The table of the clients section (also printed by `--clients-only`).
pub(crate) fn clients_table(c: &Clients) -> String {
    let mut out = String::from(
        "| Client | Connection | Calls | PINGs answered | p50 | p99 | Driver CPU per call |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for x in &c.rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.1} µs |",
            x.client,
            x.connection,
            x.calls,
            x.pings,
            ms(x.latency.p50_us),
            ms(x.latency.p99_us),
            x.server_cpu_us
        );
    }
    if let Some(ratio) = ping_ratio(c) {
        let _ = writeln!(
            out,
            "\nOn one connection the kubelet-like client costs the driver {ratio:.2} × tonic's CPU per call (median of \
             the round pairs' ratios)."
        );
    }
    for r in c.ratios.iter().filter(|r| !r.rounds.is_empty()) {
        let (lo, hi) = r.range();
        let _ = writeln!(
            out,
            "- {}: median {:.2} ×, {} round pairs from {lo:.2} to {hi:.2} × ({})",
            r.connection,
            r.median(),
            r.rounds.len(),
            r.rounds
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}

/// §6 and §7.
pub(crate) fn sections(r: &Results, out: &mut String) {
    let a = &r.at_rest;
    let _ = writeln!(
        out,
        "\n### 6. At rest: host processes (simulated host's count per csi-proxy release)\n\n\
         What the readiness check and the CSI `Probe` cost the host, per check ({} of each per release; readiness \
         checks spaced past its 1 s cache), and an hour of them at the chart's periods (readiness every 10 s, liveness \
         every 30 s: {:.0} + {:.0} checks). Before issue 29 both made `GetBIOSSerialNumber` (last column: its processes \
         per call).\n\n\
         | Release | Host calls per Probe | per readiness check | Calls | Processes per Probe | per readiness check | \
         Processes an hour | Before: processes per check |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |",
        a.checks,
        rest::READINESS_PER_HOUR,
        rest::PROBES_PER_HOUR
    );
    for x in &a.releases {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {} |",
            x.release,
            x.probe_calls,
            x.readiness_calls,
            x.probe_rpcs.join(", "),
            x.probe_processes,
            x.readiness_processes,
            probes_per_hour(x),
            x.old_probe_processes
        );
    }
    let volumes = a.polls.first().map_or(0, |p| p.volumes);
    let hour_cached = rest::refreshes_per_hour(a.cache_expiry_s);
    let _ = writeln!(
        out,
        "\nkubelet's volume stats polls: {volumes} volumes of each protocol staged and published, one \
         NodeGetVolumeStats per volume in a round. With the driver's cache (default {:.0} min): a cold round, then a warm \
         one right after; without it (`--vol-stats-cache-expire-in-minutes=0`, a restarted driver): one round per \
         release. An hour: {:.0} polls per pod volume (every 1–2 min) without the cache, {hour_cached:.1} refreshes with \
         it (derived from kubelet's schedule and the expiry, see Method).\n\n\
         | Protocol | Release | Round | Host calls | Host processes | Processes per poll |\n\
         | --- | --- | --- | --- | --- | --- |",
        a.cache_expiry_s / 60.0,
        rest::POLLS_PER_HOUR
    );
    for p in &a.polls {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1} |",
            p.protocol.name(),
            p.release,
            p.round,
            p.calls,
            p.processes,
            p.processes as f64 / p.volumes.max(1) as f64
        );
    }
    let _ = writeln!(
        out,
        "\nHost processes an hour with {volumes} volumes of a protocol staged (stats polls only; add the probes above):\n\n\
         | Protocol | Release | Without the cache | With the cache ({:.0} min) |\n| --- | --- | --- | --- |",
        a.cache_expiry_s / 60.0
    );
    let mut releases: Vec<&str> = a.polls.iter().map(|p| p.release.as_str()).collect();
    releases.dedup();
    releases.retain(|rel| {
        a.polls
            .iter()
            .any(|p| p.release == *rel && p.round == "cache off")
    });
    for protocol in Protocol::ALL {
        for rel in &releases {
            if let Some(pp) = per_poll(a, protocol, rel) {
                let n = volumes as f64;
                let _ = writeln!(
                    out,
                    "| {} | {rel} | {:.0} | {:.0} |",
                    protocol.name(),
                    n * rest::POLLS_PER_HOUR * pp,
                    n * hour_cached * pp
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "\n### 7. Clients: tonic's and kubelet's (a PING after each response)\n\n\
         `NodeGetCapabilities` (no host call, no record), in {} interleaved rounds per client (which client goes first \
         alternates); the driver's CPU from its threads' `/proc/<pid>/task/*/schedstat` (ns). The kubelet-like client is the `h2` crate sending a PING whenever a response's DATA arrives \
         and no PING of its is unanswered, as grpc-go's BDP estimator does; \"a connection per call\" dials for every \
         call, as kubelet does.\n\n{}",
        r.clients.ratios.first().map_or(0, |x| x.rounds.len()),
        clients_table(&r.clients)
    );
}
