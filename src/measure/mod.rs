//! What we saw: per-worker recorders merged per window, the two rules that end a point
//! (perf_analyzer's stability, or intervals tight enough), the intervals themselves, and the
//! derivation of a row from its windows. (The loop that drives a load and closes windows is
//! `run::sweep`.)

pub mod cpu;
pub mod gpu_metrics;
pub mod interval;
pub mod recorder;
pub mod server_metrics;
pub mod shards;
pub mod slices;
pub mod stability;
pub mod stop;
pub mod window;

use std::time::Duration;

pub use stability::{is_stable, WindowFigures, STABLE_WINDOWS};
pub use window::{derive_point, Batches, Intervals, Window};

#[cfg(test)]
mod tests {
    #[test]
    fn count_windows_scale_with_the_load() {
        assert_eq!(super::window_requests(50, 1.0), 50);
        assert_eq!(super::window_requests(50, 256.0), 2560);
        assert_eq!(super::window_requests(50, f64::NAN), 50);
    }
}

/// What ends a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WindowMode {
    /// A fixed length of time (`-p`, `--measurement-mode time_windows`).
    Time(Duration),
    /// A number of finished requests (`--measurement-request-count`, `count_windows`).
    Count(u64),
}

/// A count window holds at least this many requests per request in flight
/// (`max(--measurement-request-count, k × in flight)`, k = 10). A window then sees every
/// in-flight slot turn over ten times: the at most one partial request per slot at each edge is
/// a tenth of it at worst, a server batch of all in-flight requests completes many times within
/// it, and consecutive windows are nearly independent, which the intervals' batch means need.
/// (A fixed 50 at concurrency 256 ended windows before one round of requests had come back.)
pub const WINDOW_LOAD_FACTOR: u64 = 10;

/// Requests in a count window at `in_flight` requests in flight (see [`WINDOW_LOAD_FACTOR`]).
pub fn window_requests(base: u64, in_flight: f64) -> u64 {
    let scaled =
        if in_flight.is_finite() && in_flight > 0.0 { (in_flight * WINDOW_LOAD_FACTOR as f64).ceil() } else { 0.0 };
    base.max(scaled as u64).max(1)
}

/// What ends a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stop {
    /// perf_analyzer's rule: the last three windows agree within `-s`, at most `-r` windows.
    Stable,
    /// Once the 95% intervals of throughput, p50 and p99 are each within ±`half_width_pct` of
    /// their value and the p99 rests on enough requests ([`crate::results::min_requests_for`]),
    /// or when `max` has passed (the row is then flagged unstable).
    Intervals { half_width_pct: f64, max: Duration },
}

/// How each sweep point is measured.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasureSettings {
    pub window: WindowMode,
    pub stop: Stop,
    /// `-s`: windows agree when max ≤ min × (1 + pct/100).
    pub stability_pct: f64,
    /// `-r`: windows measured at most per point.
    pub max_trials: usize,
    /// `--percentile`: stabilise and threshold on this percentile instead of the average.
    pub percentile: Option<f64>,
    /// `--request-count`: one window of exactly this many requests per point, no stability.
    pub request_count: Option<u64>,
    /// `-b`: inferences per request.
    pub batch: u64,
    /// Hand the merged windows out with the row (`PointDetail::windows`), for a shard's files.
    pub keep_windows: bool,
    /// Time windows end on fixed offsets from the point's start (`--start-at`: they line up
    /// across shards), rather than a window's length after the previous one's reading.
    pub windows_on_offsets: bool,
}

impl Default for MeasureSettings {
    fn default() -> Self {
        MeasureSettings {
            window: WindowMode::Time(Duration::from_millis(5000)),
            stop: Stop::Stable,
            stability_pct: 10.0,
            max_trials: 10,
            percentile: None,
            request_count: None,
            batch: 1,
            keep_windows: false,
            windows_on_offsets: false,
        }
    }
}
