//! What we saw: per-worker recorders merged per window, the stability rule, and the derivation of
//! a row from its windows. (The loop that drives a load and closes windows is `run::sweep`.)

pub mod gpu_metrics;
pub mod recorder;
pub mod stability;
pub mod window;

use std::time::Duration;

pub use stability::{is_stable, WindowFigures, STABLE_WINDOWS};
pub use window::{derive_point, Window};

/// What ends a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WindowMode {
    /// A fixed length of time (`-p`, `--measurement-mode time_windows`).
    Time(Duration),
    /// A number of finished requests (`--measurement-request-count`, `count_windows`).
    Count(u64),
}

/// How each sweep point is measured.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasureSettings {
    pub window: WindowMode,
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
}

impl Default for MeasureSettings {
    fn default() -> Self {
        MeasureSettings {
            window: WindowMode::Time(Duration::from_millis(5000)),
            stability_pct: 10.0,
            max_trials: 10,
            percentile: None,
            request_count: None,
            batch: 1,
        }
    }
}
