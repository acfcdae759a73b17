//! One load point's measurement: windows of a running load until the point's stop rule is met
//! ([`measure_point`]), the server's statistics read around each window, the interval rule's
//! warm-up ([`settle`]), and the row derived from the windows.
//!
//! All durations come from tokio's clock, so tests can run a point on paused (virtual) time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::client::{within_stall_timeout, ClientError, InferClient};
use crate::load::{LoadMode, RunningLoad};
use crate::measure::recorder::WindowRecorder;
use crate::measure::stop::StopRule;
use crate::measure::{derive_point, window_requests, MeasureSettings, Window, WindowFigures, WindowMode};
use crate::results::{ComposingModel, ComposingStats, LoadPoint, PointResult, ServerStats};

/// Under the interval rule a window lasts at least this long, so the per-window work (swapping
/// and merging the recorders, reading the server's statistics) stays a few percent of the time.
pub const MIN_WINDOW_TIME: Duration = Duration::from_millis(50);
/// Warm-up (interval rule): windows until two in a row agree on throughput within this share.
pub const WARMUP_SETTLED_PCT: f64 = 10.0;
/// Warm-up (interval rule) gives up settling after this long.
pub const WARMUP_MAX: Duration = Duration::from_secs(5);

/// One window as the progress display sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowProgress {
    /// 0-based index of the window within its point.
    pub trial: usize,
    pub figures: WindowFigures,
    /// The point's rule is met after this window.
    pub stable: bool,
    /// Interval rule: the widest interval so far, ± percent (None until checked).
    pub widest_pct: Option<f64>,
    /// The window only settled the load after a change and is not part of the row.
    pub settling: bool,
    /// The client's mean and standard deviation of latency in this window (perf_analyzer's -v).
    pub avg_latency_us: f64,
    pub stdev_us: f64,
    /// The load asked for, and the load the client held in this window (requests sent per
    /// second, or in flight: see `results::ClientLoad`).
    pub load: LoadPoint,
    pub achieved: f64,
}

/// How a point ended: measured by its rule, or cut short by a lost connection.
#[derive(Debug)]
pub enum PointOutcome {
    Measured(PointResult),
    /// The server went away: the row of what was measured before (flagged `interrupted`), and
    /// the error that ended it.
    Interrupted {
        partial: PointResult,
        error: ClientError,
    },
}

impl PointOutcome {
    /// The measured row, or the error that interrupted the point.
    pub fn into_result(self) -> Result<PointResult, ClientError> {
        match self {
            PointOutcome::Measured(result) => Ok(result),
            PointOutcome::Interrupted { error, .. } => Err(error),
        }
    }
}

/// Where server statistics come from (`None` model: the server lacks the extension).
pub struct StatsSource<'a, C> {
    pub client: &'a C,
    pub model: Option<(&'a str, &'a str)>,
    /// An ensemble's composing models: then one call reads every model (as perf_analyzer does).
    pub composing: &'a [ComposingModel],
}

/// One reading: the model's counters and its composing models' (an ensemble's).
type Reading = (ServerStats, Vec<ComposingStats>);

impl<C: InferClient> StatsSource<'_, C> {
    /// Reads the model's counters. A broken connection is fatal, unless the server still answers
    /// (then the read is tried once more); any other failure only loses the server columns of
    /// this window.
    async fn read(&self) -> Result<Option<Reading>, ClientError> {
        let Some((model, version)) = self.model else {
            return Ok(None);
        };
        let (asked, asked_version) = if self.composing.is_empty() { (model, version) } else { ("", "") };
        let ask = || within_stall_timeout("the statistics request", self.client.statistics(asked, asked_version));
        let mut answer = ask().await;
        if matches!(&answer, Err(e) if e.is_connection_lost()) && crate::client::server_answers(self.client).await {
            // Its connection was reset on the way, and the server is up: ask again.
            answer = ask().await;
        }
        match answer {
            Ok(all) => Ok(ServerStats::from_response(&all, model, version)
                .map(|own| (own, ComposingStats::read(&all, self.composing)))),
            Err(e) if e.is_fatal() => Err(e),
            Err(e) => {
                tracing::warn!("statistics unavailable for this window: {e}");
                Ok(None)
            }
        }
    }
}

/// Hands the allocator's free pages back to the system once per window. glibc keeps each
/// thread arena at its high-water mark, so without this a long run's RSS climbs with the worst
/// burst of requests in flight so far rather than following the memory actually in use.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory held by the allocator; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// perf_analyzer's rule for a composing model asked for without a version: its version is the
/// one whose queue count grew in the window, and when none did (the model was never called,
/// typically a `--bls-composing-models` entry the BLS model does not call) the run fails.
pub(super) fn check_composing_versions(
    tree: &[ComposingModel],
    own: &ServerStats,
    window: &[ComposingStats],
) -> Result<(), ClientError> {
    if own.success.count == 0 {
        return Ok(());
    }
    match tree.iter().zip(window).find(|(asked, read)| asked.version.is_empty() && read.stats.queue.count == 0) {
        Some((asked, _)) => Err(ClientError::Invalid(format!(
            "failed to find the requested model version: composing model '{}' (no version given) was not called \
             in a measurement window",
            asked.name
        ))),
        None => Ok(()),
    }
}

/// Nanoseconds since the epoch, as window boundaries are kept.
pub(super) fn epoch_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
}

/// When a time window of a point lined up by `--start-at` ends, its measuring having begun at
/// `origin`: on a multiple of `step` from `origin`, so windows keep fixed offsets from the
/// point's start (and line up across shards) however long each end's reading took. A window
/// that would last less than half a step (the reading overran) ends on the offset after.
pub(super) fn window_end(origin: Instant, step: Duration, trial: usize, now: Instant) -> Instant {
    if step.is_zero() {
        return now;
    }
    let ahead = now.saturating_duration_since(origin) + step / 2;
    let offsets = (trial as u32 + 1).max((ahead.as_nanos() / step.as_nanos()) as u32 + 1);
    origin + step * offsets
}

/// Warm-up under the interval rule: at least `min_requests`, then windows (sized as the
/// point's will be) until two in a row agree on throughput within [`WARMUP_SETTLED_PCT`], or
/// [`WARMUP_MAX`] has passed.
pub(super) async fn settle(
    load: &RunningLoad,
    settings: &MeasureSettings,
    mode: &LoadMode,
    min_requests: u64,
) -> Result<(), ClientError> {
    let deadline = Instant::now() + WARMUP_MAX;
    // Past the deadline the warm-up simply ends.
    tokio::time::timeout_at(deadline, load.wait_completed(min_requests)).await.unwrap_or(Ok(()))?;
    let base = match settings.window {
        WindowMode::Count(n) => n,
        WindowMode::Time(_) => 1,
    };
    let in_flight = match mode {
        LoadMode::Concurrency(c) => *c as f64,
        LoadMode::Schedule(_) => f64::NAN,
    };
    let mut window = load.take_window();
    let mut previous: Option<f64> = None;
    let mut started = Instant::now();
    while Instant::now() < deadline {
        let goal = load.completed() + window_requests(base, in_flight);
        tokio::time::timeout_at(deadline, load.wait_completed(goal)).await.unwrap_or(Ok(()))?;
        let span = started.elapsed();
        if span < MIN_WINDOW_TIME {
            load.wait_for(MIN_WINDOW_TIME - span).await?;
        }
        window = load.take_window_into(window);
        let ended = Instant::now();
        let throughput = window.ok as f64 / (ended - started).as_secs_f64().max(1e-9);
        started = ended;
        if let Some(before) = previous {
            if before > 0.0 && (throughput - before).abs() <= before * WARMUP_SETTLED_PCT / 100.0 {
                break;
            }
        }
        previous = Some(throughput);
    }
    Ok(())
}

/// Measures windows of a running load until the point's rule ([`Stop`](crate::measure::Stop),
/// judged by [`StopRule`])
/// is met, and derives the row. `on_window` sees each window as it ends (progress display).
///
/// - `--request-count`: one window of exactly that many requests.
/// - `Stop::Stable`: windows until the last three agree or `max_trials` were
///   taken; the row merges the last (up to) three.
/// - `Stop::Intervals`: a first window lets the load settle and is dropped; then windows until
///   the intervals of throughput, p50 and p99 are tight enough, p99 has its requests and the
///   queue is not growing, or the time is up. The row merges every window after the first.
///
/// Count windows hold at least `k ×` the requests in flight ([`window_requests`]): the
/// concurrency, or for an open loop the previous window's throughput × latency (Little's law).
///
/// A connection lost on the way ([`ClientError::is_connection_lost`]: the server went away)
/// ends the point as [`PointOutcome::Interrupted`], its row made of the windows so far and the
/// unfinished one (failures included), flagged `interrupted` and never stable.
pub async fn measure_point<C: InferClient>(
    load: &RunningLoad,
    stats: &StatsSource<'_, C>,
    settings: &MeasureSettings,
    point: LoadPoint,
    mut on_window: impl FnMut(&WindowProgress),
) -> Result<PointOutcome, ClientError> {
    let begun = Instant::now();
    let mut rule = StopRule::new(settings);
    let mut boundaries = vec![epoch_ns()];
    // What was measured when the connection was lost: the windows so far and the open one.
    let interrupted = |rule: StopRule, boundaries: Vec<u64>, since: (Instant, u64), error: ClientError| {
        let open = load.take_window();
        let (mut windows, _) = rule.into_windows();
        let end_ns = epoch_ns();
        let duration = since.0.elapsed();
        windows.push(Window { client: open, duration, server: None, composing: Vec::new(), start_ns: since.1, end_ns });
        let mut partial = derive_point(&windows, settings.batch, point, false, settings.percentile);
        partial.row.interrupted = true;
        partial.detail.first_error = Some(error.to_string());
        partial.detail.trials = windows.len();
        partial.detail.window_boundaries_ns = boundaries.into_iter().chain([end_ns]).collect();
        Ok(PointOutcome::Interrupted { partial, error })
    };
    let mut before = match stats.read().await {
        Ok(reading) => reading,
        Err(e) if e.is_connection_lost() => return interrupted(rule, boundaries, (begun, epoch_ns()), e),
        Err(e) => return Err(e),
    };
    // Recorders of windows no longer needed, each merged into again by a later window, so a
    // long point allocates no histograms (about 208 KB a window) as it goes.
    let mut spares: Vec<WindowRecorder> = (0..rule.recorders_needed()).map(|_| WindowRecorder::default()).collect();
    if settings.request_count.is_none() {
        // Whatever finished before the first boundary belongs to no window. With a request
        // count every request belongs to the one window.
        let unwanted = load.take_window_into(spares.pop().unwrap_or_default());
        spares.push(unwanted);
    }
    let window_cap = rule.window_cap();
    let mut in_flight = match point {
        LoadPoint::Concurrency(c) => c as f64,
        LoadPoint::RequestRate(_) => f64::NAN,
    };
    let mut started = (Instant::now(), epoch_ns());
    let origin = started.0;
    let mut cpu_started_ns = crate::measure::cpu::process_cpu_ns();
    boundaries[0] = started.1;
    loop {
        let trial = rule.trials();
        let waited = wait_window_end(load, settings, window_cap, origin, started.0, trial, in_flight).await;
        tracing::debug!(trial, completed = load.completed(), "window ends: reading server statistics");
        let after = match waited {
            Ok(()) => stats.read().await,
            Err(e) => Err(e),
        };
        let after = match after {
            Ok(reading) => reading,
            Err(e) if e.is_connection_lost() => return interrupted(rule, boundaries, started, e),
            Err(e) => return Err(e),
        };
        let mut client = load.take_window_into(spares.pop().unwrap_or_default());
        let ended = (Instant::now(), epoch_ns());
        let cpu_ended_ns = crate::measure::cpu::process_cpu_ns();
        client.cpu_ns = cpu_ended_ns.saturating_sub(cpu_started_ns);
        let (server, composing) = match (&before, &after) {
            (Some(b), Some(a)) => (Some(a.0.since(&b.0)), ComposingStats::since(&a.1, &b.1)),
            _ => (None, Vec::new()),
        };
        if let Some(server) = &server {
            check_composing_versions(stats.composing, server, &composing)?;
        }
        let duration = ended.0 - started.0;
        let window = Window { client, duration, server, composing, start_ns: started.1, end_ns: ended.1 };
        boundaries.push(ended.1);
        let window_figures = window.figures(settings.batch, settings.percentile);
        if matches!(point, LoadPoint::RequestRate(_)) {
            // Little's law: requests in flight = request throughput × latency.
            let requests_per_s = window_figures.throughput / settings.batch.max(1) as f64;
            in_flight = requests_per_s * window.client.avg_latency_us() / 1e6;
        }
        let mut progress = WindowProgress {
            trial,
            figures: window_figures,
            stable: false,
            widest_pct: None,
            settling: false,
            avg_latency_us: window.client.avg_latency_us(),
            stdev_us: window.client.stdev_us(),
            load: point,
            achieved: crate::measure::window::client_load(&window.client, point, duration.as_secs_f64()).achieved,
        };
        let verdict = rule.observe(window, window_figures, begun.elapsed(), &mut spares);
        progress.stable = verdict.stable;
        progress.widest_pct = verdict.widest_pct;
        progress.settling = verdict.settling;
        // After the window let go, so its pages are among those handed back.
        return_freed_memory();
        on_window(&progress);
        if verdict.done {
            break;
        }
        before = after;
        started = ended;
        cpu_started_ns = cpu_ended_ns;
    }
    let (trial, stable) = (rule.trials(), rule.stable());
    let (all, merged) = rule.into_windows();
    let mut result = derive_point(&all[all.len() - merged..], settings.batch, point, stable, settings.percentile);
    if settings.keep_windows {
        result.detail.windows = all.iter().map(Window::to_shard).collect();
    }
    result.detail.trials = trial;
    result.detail.window_boundaries_ns = boundaries;
    Ok(PointOutcome::Measured(result))
}

/// Waits until the window that began at `started` ends, as the point's settings say (see
/// [`measure_point`]); an error is the load's end (the server gone or silent).
async fn wait_window_end(
    load: &RunningLoad,
    settings: &MeasureSettings,
    window_cap: Option<Duration>,
    origin: Instant,
    started: Instant,
    trial: usize,
    in_flight: f64,
) -> Result<(), ClientError> {
    match (settings.request_count, settings.window, window_cap) {
        (Some(n), _, _) => load.wait_completed(n).await,
        (None, WindowMode::Time(span), cap) => {
            let span = cap.map_or(span, |cap| span.min(cap));
            if settings.windows_on_offsets {
                let now = Instant::now();
                load.wait_for(window_end(origin, span, trial, now) - now).await
            } else {
                load.wait_for(span).await
            }
        }
        (None, WindowMode::Count(n), None) => {
            load.wait_completed(load.completed() + window_requests(n, in_flight)).await
        }
        (None, WindowMode::Count(n), Some(cap)) => {
            let goal = load.completed() + window_requests(n, in_flight);
            tokio::time::timeout_at(started + cap, load.wait_completed(goal)).await.unwrap_or(Ok(()))?;
            let span = started.elapsed();
            if span < MIN_WINDOW_TIME {
                load.wait_for(MIN_WINDOW_TIME - span).await?;
            }
            Ok(())
        }
    }
}
