//! Latency summaries.

use std::time::Duration;

use serde::Serialize;

/// A latency distribution, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Stats {
    /// Samples.
    pub(crate) n: usize,
    /// Median (nearest rank).
    pub(crate) p50_us: f64,
    /// 99th percentile (nearest rank).
    pub(crate) p99_us: f64,
    /// Mean.
    pub(crate) mean_us: f64,
    /// Fastest.
    pub(crate) min_us: f64,
    /// Slowest.
    pub(crate) max_us: f64,
}

/// The nearest-rank percentile `p` (0–1) of sorted `v`.
fn rank(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

impl Stats {
    /// Summarises `samples`.
    pub(crate) fn of(samples: &[Duration]) -> Stats {
        let mut v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Stats {
            n,
            p50_us: rank(&v, 0.5),
            p99_us: rank(&v, 0.99),
            mean_us: if n == 0 {
                0.0
            } else {
                v.iter().sum::<f64>() / n as f64
            },
            min_us: v.first().copied().unwrap_or(0.0),
            max_us: v.last().copied().unwrap_or(0.0),
        }
    }
}

/// The median of counts (the middle element; 0 when empty).
pub(crate) fn median(v: &[usize]) -> usize {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let s = Stats::of(&d);
        assert_eq!(s.n, 100);
        assert_eq!(s.p50_us, 50.0);
        assert_eq!(s.p99_us, 99.0);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.max_us, 100.0);
        assert_eq!(Stats::of(&[]).p50_us, 0.0);
        assert_eq!(median(&[3, 1, 2]), 2);
    }
}
