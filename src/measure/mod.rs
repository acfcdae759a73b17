//! What we saw: per-worker recorders merged per window, server statistics deltas, the stability
//! rule, the derivation of a row, and the loop that measures one sweep point ([`measure_point`])
//! and the whole sweep ([`sweep`]).

pub mod gpu_metrics;
pub mod recorder;
pub mod server_stats;
pub mod stability;
pub mod sweep;
pub mod window;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use server_stats::ServerStats;
pub use stability::{is_stable, WindowFigures, STABLE_WINDOWS};
pub use window::{derive_point, PointDetail, PointResult, Window};

use crate::client::{ClientError, InferClient};
use crate::load::RunningLoad;
use crate::report::LoadPoint;

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

/// Where server statistics come from (`None` model: the server lacks the extension).
pub struct StatsSource<'a, C> {
    pub client: &'a C,
    pub model: Option<(&'a str, &'a str)>,
}

impl<C: InferClient> StatsSource<'_, C> {
    /// Reads the model's counters. A broken connection is fatal; any other failure only loses
    /// the server columns of this window.
    async fn read(&self) -> Result<Option<ServerStats>, ClientError> {
        let Some((model, version)) = self.model else {
            return Ok(None);
        };
        match self.client.statistics(model, version).await {
            Ok(all) => Ok(ServerStats::from_response(&all, model, version)),
            Err(e) if e.is_fatal() => Err(e),
            Err(e) => {
                tracing::warn!("statistics unavailable for this window: {e}");
                Ok(None)
            }
        }
    }
}

fn epoch_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
}

/// Measures windows of a running load until the last [`STABLE_WINDOWS`] agree or `max_trials`
/// windows were taken, and derives the row from the last (up to) three. `on_window` sees each
/// window's figures as it ends (progress display).
pub async fn measure_point<C: InferClient>(
    load: &RunningLoad,
    stats: &StatsSource<'_, C>,
    settings: &MeasureSettings,
    point: LoadPoint,
    mut on_window: impl FnMut(usize, WindowFigures, bool),
) -> Result<PointResult, ClientError> {
    let mut before = stats.read().await?;
    if settings.request_count.is_none() {
        // Whatever finished before the first boundary belongs to no window. With a request
        // count every request belongs to the one window.
        drop(load.take_window());
    }
    let mut started = (Instant::now(), epoch_ns());
    let mut windows: Vec<Window> = Vec::new();
    let mut figures: Vec<WindowFigures> = Vec::new();
    let mut boundaries = vec![started.1];
    let trials = if settings.request_count.is_some() { 1 } else { settings.max_trials.max(1) };
    let mut stable = false;
    for trial in 0..trials {
        match (settings.request_count, settings.window) {
            (Some(n), _) => load.wait_completed(n).await?,
            (None, WindowMode::Time(span)) => load.wait_for(span).await?,
            (None, WindowMode::Count(n)) => load.wait_completed(load.completed() + n).await?,
        }
        let after = stats.read().await?;
        let client = load.take_window();
        let ended = (Instant::now(), epoch_ns());
        let server = match (&before, &after) {
            (Some(b), Some(a)) => Some(a.since(b)),
            _ => None,
        };
        windows.push(Window { client, duration: ended.0 - started.0, server, start_ns: started.1, end_ns: ended.1 });
        boundaries.push(ended.1);
        figures.push(windows[trial].figures(settings.batch, settings.percentile));
        stable = settings.request_count.is_some() || is_stable(&figures, settings.stability_pct);
        on_window(trial, figures[trial], stable);
        if stable {
            break;
        }
        before = after;
        started = ended;
    }
    let merged = &windows[windows.len().saturating_sub(STABLE_WINDOWS)..];
    let mut result = derive_point(merged, settings.batch, point, stable, settings.percentile);
    result.detail.trials = windows.len();
    result.detail.window_boundaries_ns = boundaries;
    Ok(result)
}
