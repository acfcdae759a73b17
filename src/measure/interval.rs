//! 95% confidence intervals of a row, from the windows it merges.
//!
//! # Why these methods
//!
//! Requests of one run are not independent: a slow spell (a GC pause, a noisy neighbour, the
//! batcher's phase) delays many requests in a row, so formulas that treat every request as an
//! independent sample give intervals far too narrow. Windows are the unit instead: each spans
//! many turnovers of the requests in flight (see [`super::WINDOW_LOAD_FACTOR`]), so consecutive
//! windows are close to independent.
//!
//! - **Throughput: batch means.** Each window is one batch: its inferences `y` over its length
//!   `d`. The row's throughput is the ratio `R = Σy / Σd`; its standard error is the ratio
//!   estimator's, `sqrt(Σ(y − R·d)² / (n − 1) / n) / mean(d)`, and the interval is `R ± t(n−1)·se`
//!   with Student's t. This is exact batch means when windows are equally long, and it needs
//!   nothing but the windows' counts and lengths.
//! - **Percentiles: a bootstrap over windows of the merged HDR data, with Student's t**, joined
//!   with the distribution-free interval of the quantile. A mean of per-window p99s would
//!   estimate the wrong thing (the p99 of 50 requests is roughly their maximum), so the bootstrap
//!   resamples whole windows (which keeps their internal correlation), merges their histograms
//!   and takes the percentile of the merged data, 1,000 times. The spread of those estimates is
//!   the percentile's standard error as seen from `n` windows; like batch means it rests on
//!   `n − 1` degrees of freedom, so the interval is `q ± t(n−1)·se` (with three windows the
//!   spread itself is a guess, and t(2) = 4.3 says so). The bootstrap cannot see that the tail
//!   of a small sample is itself uncertain, so the interval also covers the order-statistic
//!   interval: ranks `n·q ± 1.96·sqrt(n·q·(1−q))` of the merged samples, which is exact for
//!   independent requests. When those ranks run past the data, the bound is open (0 below, +∞
//!   above): the percentile is not bounded at all.
//!
//! The bootstrap works on each window's cumulative counts over the union of recorded values, so
//! one resample costs a binary search (≈ log₂(distinct values) × windows), not a merge.

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::results::Interval;

/// The standard normal's 0.975 quantile.
pub const Z_975: f64 = 1.959_963_984_540_054;

/// Resamples of the percentile bootstrap.
const RESAMPLES: usize = 1000;

/// Student's t 0.975 quantiles for 1 to 30 degrees of freedom.
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
    2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/// Student's t 0.975 quantile with `df` degrees of freedom (a table to 30, then the
/// Cornish-Fisher expansion, within 0.001 of the exact value).
pub fn t_975(df: usize) -> f64 {
    match df {
        0 => f64::INFINITY,
        1..=30 => T_975[df - 1],
        _ => {
            let (z, n) = (Z_975, df as f64);
            z + (z.powi(3) + z) / (4.0 * n) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * n * n)
        }
    }
}

/// The batch-means interval of a ratio `Σy / Σd` over batches `(y, d)` (inferences and seconds
/// of each window). Unknown with fewer than two batches.
pub fn ratio_interval(batches: &[(f64, f64)]) -> Interval {
    let n = batches.len();
    let (sum_y, sum_d) = batches.iter().fold((0.0, 0.0), |(y, d), b| (y + b.0, d + b.1));
    if n < 2 || sum_d <= 0.0 {
        return Interval::UNKNOWN;
    }
    let ratio = sum_y / sum_d;
    let residual: f64 = batches.iter().map(|(y, d)| (y - ratio * d).powi(2)).sum();
    let se = (residual / (n - 1) as f64 / n as f64).sqrt() / (sum_d / n as f64);
    let half = t_975(n - 1) * se;
    Interval::new((ratio - half).max(0.0), ratio + half)
}

/// Percentiles of merged windows and their intervals; see the module docs.
pub struct Quantiles {
    /// Every distinct recorded value (µs, HDR's highest equivalent), ascending.
    values: Vec<u64>,
    /// Per window: how many of its samples are ≤ `values[j]`.
    cumulative: Vec<Vec<u64>>,
}

impl Quantiles {
    /// From the windows' latency histograms.
    pub fn new<'a>(windows: impl IntoIterator<Item = &'a Histogram<u64>>) -> Quantiles {
        let sparse: Vec<Vec<(u64, u64)>> = windows
            .into_iter()
            .map(|h| {
                h.iter_recorded().map(|v| (h.highest_equivalent(v.value_iterated_to()), v.count_at_value())).collect()
            })
            .collect();
        let mut values: Vec<u64> = sparse.iter().flatten().map(|(v, _)| *v).collect();
        values.sort_unstable();
        values.dedup();
        let cumulative = sparse
            .iter()
            .map(|window| {
                let mut counts = vec![0u64; values.len()];
                for (v, c) in window {
                    let j = values.binary_search(v).expect("every value was collected");
                    counts[j] += c;
                }
                let mut running = 0;
                for c in &mut counts {
                    running += *c;
                    *c = running;
                }
                counts
            })
            .collect();
        Quantiles { values, cumulative }
    }

    /// Samples of each window.
    fn totals(&self) -> impl Iterator<Item = u64> + '_ {
        self.cumulative.iter().map(|c| c.last().copied().unwrap_or(0))
    }

    /// All samples.
    pub fn count(&self) -> u64 {
        self.totals().sum()
    }

    /// The value at 1-based `rank` of the windows merged with multiplicities `weights`.
    fn at_rank(&self, weights: &[u64], rank: u64) -> u64 {
        let below = |j: usize| -> u64 { self.cumulative.iter().zip(weights).map(|(c, w)| c[j] * w).sum() };
        let (mut lo, mut hi) = (0usize, self.values.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if below(mid) >= rank {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        self.values[lo]
    }

    /// The `q` quantile (0–1) of the merged windows with multiplicities `weights`, as HDR counts
    /// ranks: the value at rank ⌈q·n⌉.
    fn quantile_weighted(&self, weights: &[u64], q: f64) -> Option<u64> {
        let n: u64 = self.totals().zip(weights).map(|(t, w)| t * w).sum();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        Some(self.at_rank(weights, rank))
    }

    /// The `q` quantile of all windows merged, µs (0 when empty).
    pub fn quantile(&self, q: f64) -> f64 {
        self.quantile_weighted(&vec![1; self.cumulative.len()], q).unwrap_or(0) as f64
    }

    /// 95% intervals of the quantiles `qs` (0–1), in µs; see the module docs. Deterministic: the
    /// bootstrap draws from a fixed seed.
    pub fn intervals(&self, qs: &[f64]) -> Vec<Interval> {
        let n = self.count();
        if n == 0 {
            return vec![Interval::UNKNOWN; qs.len()];
        }
        let ones = vec![1u64; self.cumulative.len()];
        let mut out: Vec<Interval> = qs
            .iter()
            .map(|&q| {
                // Distribution-free: the ranks between which the q quantile lies with 95%.
                let spread = Z_975 * (n as f64 * q * (1.0 - q)).sqrt();
                let low_rank = (n as f64 * q - spread).floor();
                let high_rank = (n as f64 * q + spread).ceil() + 1.0;
                let low = if low_rank < 1.0 { 0.0 } else { self.at_rank(&ones, low_rank as u64) as f64 };
                let high =
                    if high_rank > n as f64 { f64::INFINITY } else { self.at_rank(&ones, high_rank as u64) as f64 };
                Interval::new(low, high)
            })
            .collect();
        let windows = self.cumulative.len();
        if windows < 2 {
            return out;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(0x5eed_ba7c);
        let mut estimates: Vec<Vec<u64>> = vec![Vec::with_capacity(RESAMPLES); qs.len()];
        let mut weights = vec![0u64; windows];
        for _ in 0..RESAMPLES {
            weights.iter_mut().for_each(|w| *w = 0);
            for _ in 0..windows {
                weights[rng.random_range(0..windows)] += 1;
            }
            for (i, &q) in qs.iter().enumerate() {
                if let Some(v) = self.quantile_weighted(&weights, q) {
                    estimates[i].push(v);
                }
            }
        }
        let t = t_975(windows - 1);
        for ((interval, e), &q) in out.iter_mut().zip(estimates).zip(qs) {
            if e.len() < 2 {
                continue;
            }
            let mean = e.iter().sum::<u64>() as f64 / e.len() as f64;
            let var = e.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / (e.len() - 1) as f64;
            let (value, half) = (self.quantile(q), t * var.sqrt());
            *interval = Interval::new(interval.low.min((value - half).max(0.0)), interval.high.max(value + half));
        }
        out
    }
}

/// Whether a per-window series (the server's average queue time, µs) keeps growing: over at
/// least three windows, at least two thirds of the steps go up and the last third's mean is above
/// the first third's by more than a quarter (and by more than 20 µs, below which queue times are
/// timer noise).
pub fn keeps_growing(values: &[f64]) -> bool {
    let n = values.len();
    if n < 3 || values.iter().any(|v| !v.is_finite()) {
        return false;
    }
    let rises = values.windows(2).filter(|w| w[1] > w[0]).count();
    let third = (n / 3).max(1);
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&values[..third]), mean(&values[n - third..]));
    3 * rises >= 2 * (n - 1) && last > first * 1.25 && last - first > 20.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for v in values {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn t_quantiles_follow_the_table_and_approach_the_normal() {
        assert_eq!(t_975(1), 12.706);
        assert_eq!(t_975(30), 2.042);
        assert!((t_975(40) - 2.021).abs() < 0.001, "{}", t_975(40));
        assert!((t_975(120) - 1.980).abs() < 0.001, "{}", t_975(120));
        assert!(t_975(100_000) - Z_975 < 1e-4);
    }

    #[test]
    fn ratio_interval_is_batch_means() {
        // Equal lengths: batch means of 90, 100, 110 per second.
        let ci = ratio_interval(&[(90.0, 1.0), (100.0, 1.0), (110.0, 1.0)]);
        let half = 4.303 * 10.0 / 3f64.sqrt();
        assert!((ci.low - (100.0 - half)).abs() < 1e-9 && (ci.high - (100.0 + half)).abs() < 1e-9, "{ci:?}");
        // Identical windows: no spread, a zero-width interval.
        assert_eq!(ratio_interval(&[(50.0, 0.5), (50.0, 0.5)]), Interval::new(100.0, 100.0));
        assert!(!ratio_interval(&[(50.0, 0.5)]).is_known());
    }

    #[test]
    fn merged_quantiles_match_hdr() {
        let a = histogram(1..=500);
        let b = histogram(501..=1000);
        let q = Quantiles::new([&a, &b]);
        let mut all = a.clone();
        all.add(&b).unwrap();
        for p in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(q.quantile(p), all.value_at_quantile(p) as f64, "q {p}");
        }
        assert_eq!(q.count(), 1000);
    }

    #[test]
    fn the_tail_of_few_samples_is_open_above() {
        let windows: Vec<_> = (0..5).map(|w| histogram((1..=20).map(|i| 1000 + 10 * i + w))).collect();
        let q = Quantiles::new(&windows);
        let [p50, p99] = q.intervals(&[0.5, 0.99])[..] else { panic!() };
        assert!(p50.low < q.quantile(0.5) && q.quantile(0.5) < p50.high && p50.high.is_finite(), "{p50:?}");
        assert_eq!(p99.high, f64::INFINITY, "100 samples cannot bound their p99: {p99:?}");
    }

    #[test]
    fn many_alike_windows_give_tight_percentile_intervals() {
        // 20 windows of the same uniform 1000..2000 µs: both intervals within a few percent.
        let windows: Vec<_> = (0..20).map(|w| histogram((0..500).map(|i| 1000 + (i * 2 + w) % 1000))).collect();
        let q = Quantiles::new(&windows);
        for (p, ci) in [0.5, 0.99].iter().zip(q.intervals(&[0.5, 0.99])) {
            let value = q.quantile(*p);
            assert!(ci.low <= value && value <= ci.high, "{p}: {ci:?} around {value}");
            assert!(ci.plus_minus_pct(value) < 3.0, "{p}: {ci:?} around {value}");
        }
        // Deterministic.
        assert_eq!(q.intervals(&[0.99]), q.intervals(&[0.99]));
    }

    #[test]
    fn windows_that_disagree_widen_the_interval() {
        let calm: Vec<_> = (0..10).map(|_| histogram((0..200).map(|i| 1000 + i))).collect();
        let mut mixed = calm.clone();
        for w in mixed.iter_mut().step_by(2) {
            *w = histogram((0..200).map(|i| 2000 + i));
        }
        let width = |ws: &[Histogram<u64>]| {
            let q = Quantiles::new(ws);
            q.intervals(&[0.5])[0].plus_minus_pct(q.quantile(0.5))
        };
        assert!(width(&mixed) > 5.0 * width(&calm), "{} vs {}", width(&mixed), width(&calm));
    }

    #[test]
    fn a_growing_queue_is_recognised() {
        assert!(keeps_growing(&[100.0, 180.0, 260.0, 340.0, 420.0]));
        assert!(keeps_growing(&[100.0, 150.0, 140.0, 220.0, 300.0, 380.0]), "one dip is allowed");
        assert!(!keeps_growing(&[100.0, 104.0, 98.0, 103.0, 101.0]), "steady");
        assert!(!keeps_growing(&[2.0, 4.0, 8.0, 16.0]), "a few µs is noise");
        assert!(!keeps_growing(&[100.0, 200.0]), "two windows are no trend");
    }
}
