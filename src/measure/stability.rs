//! When to stop measuring a sweep point: the last [`STABLE_WINDOWS`] windows must agree, as in
//! perf_analyzer, within `-s` percent on throughput and on latency (average, or the
//! `--percentile` one when given). "Agree" follows perf_analyzer: max ≤ min × (1 + s/100).

/// Consecutive windows that must agree.
pub const STABLE_WINDOWS: usize = 3;

/// The two figures of one window that stability looks at.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowFigures {
    pub throughput: f64,
    pub latency_us: f64,
}

/// True when the last [`STABLE_WINDOWS`] windows agree within `threshold_pct` on both figures.
/// A window with no completed request is never stable.
pub fn is_stable(windows: &[WindowFigures], threshold_pct: f64) -> bool {
    if windows.len() < STABLE_WINDOWS {
        return false;
    }
    let last = &windows[windows.len() - STABLE_WINDOWS..];
    let within = |values: &mut dyn Iterator<Item = f64>| {
        let (min, max) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        min > 0.0 && max <= min * (1.0 + threshold_pct / 100.0)
    };
    within(&mut last.iter().map(|w| w.throughput)) && within(&mut last.iter().map(|w| w.latency_us))
}

/// Spread of a set of values in percent of their mean: (max − min) / mean × 100 (0 if empty or
/// all zero). The CI gate reads it to judge how noisy a row was.
pub fn spread_pct(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if mean <= 0.0 {
        return 0.0;
    }
    let (min, max) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    (max - min) / mean * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(throughput: f64, latency_us: f64) -> WindowFigures {
        WindowFigures { throughput, latency_us }
    }

    #[test]
    fn three_agreeing_windows_are_stable() {
        let windows = [w(50.0, 9000.0), w(100.0, 1000.0), w(105.0, 1040.0), w(98.0, 1010.0)];
        assert!(is_stable(&windows, 10.0));
        assert!(!is_stable(&windows, 5.0), "105/98 is more than 5% apart");
        assert!(!is_stable(&windows[..3], 10.0), "the first window disagrees");
    }

    #[test]
    fn latency_must_agree_too_and_fewer_than_three_never_do() {
        assert!(!is_stable(&[w(100.0, 1000.0), w(100.0, 1000.0), w(100.0, 1200.0)], 10.0));
        assert!(!is_stable(&[w(100.0, 1000.0), w(100.0, 1000.0)], 10.0));
        assert!(!is_stable(&[w(0.0, 0.0), w(0.0, 0.0), w(0.0, 0.0)], 10.0));
    }

    #[test]
    fn spread_is_range_over_mean() {
        assert_eq!(spread_pct(&[90.0, 100.0, 110.0]), 20.0);
        assert_eq!(spread_pct(&[5.0]), 0.0);
        assert_eq!(spread_pct(&[]), 0.0);
        assert_eq!(spread_pct(&[0.0, 0.0]), 0.0);
    }
}
