//! The measuring loop of one batch size: warm up, then measure each load point in turn (a
//! linear range, or a binary search for the largest value under `-l`), handing every row to an
//! observer as soon as it is measured so it reaches disk before the next point starts. Each
//! point runs the load until its windows are stable or its intervals tight enough
//! ([`measure_point`]).
//!
//! All durations come from tokio's clock, so tests can run a sweep on paused (virtual) time.

use std::sync::Arc;
use std::time::Duration;

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::grid::{SweepSlots, START_TOLERANCE};
use crate::client::{within_stall_timeout, ClientError, InferClient};
use crate::load::{Distribution, LoadError, LoadMode, LoadSpec, ResponseCheck, RunningLoad, Schedule};
use crate::measure::recorder::WindowRecorder;
use crate::measure::window::overloaded;
use crate::measure::{
    derive_point, is_stable, window_requests, Batches, Intervals, MeasureSettings, Stop, Window, WindowFigures,
    WindowMode, STABLE_WINDOWS,
};
use crate::plan::MAX_OPEN_CONCURRENCY;
use crate::results::{
    min_requests_for, ComposingModel, ComposingStats, LoadPoint, PointResult, PointSlot, ServerStats,
};

/// The interval rule looks at a point only after this many windows (after the settling one):
/// batch means need about ten batches for Student's t to stand on, and checking earlier would
/// stop on a lucky streak.
pub const MIN_INTERVAL_WINDOWS: usize = 10;
/// Under the interval rule a window lasts at least this long, so the per-window work (swapping
/// and merging the recorders, reading the server's statistics) stays a few percent of the time.
pub const MIN_WINDOW_TIME: Duration = Duration::from_millis(50);
/// Warm-up (interval rule): windows until two in a row agree on throughput within this share.
pub const WARMUP_SETTLED_PCT: f64 = 10.0;
/// Warm-up (interval rule) gives up settling after this long.
pub const WARMUP_MAX: Duration = Duration::from_secs(5);

/// Under the interval rule, the time a point may borrow from later ones leaves each of them at
/// least this share of `max` ([`TimeBank`]).
pub const BANK_RESERVE_SHARE: f64 = 0.5;

/// The interval rule's time, shared by the points of a sweep whose point count is known: the
/// sweep takes at most `points × max` (what its outline prints), but one point may use more than
/// `max` when the others need less. Noise is not spread evenly: batch 1's tail (the first point
/// of an offline sweep) needs 15-20 s on a busy 2-core box, where batch 8 and 16 settle in a few
/// seconds. A point may use all that is left but [`BANK_RESERVE_SHARE`] × `max` for each point
/// after it, so no later point is starved, and time a point leaves unused goes to the next.
#[derive(Debug)]
pub struct TimeBank {
    max: Duration,
    /// Time left to the sweep and points not yet measured.
    state: parking_lot::Mutex<(Duration, usize)>,
}

impl TimeBank {
    pub fn new(max: Duration, points: usize) -> TimeBank {
        TimeBank { max, state: parking_lot::Mutex::new((max * points as u32, points)) }
    }

    fn reserve(&self) -> Duration {
        self.max.mul_f64(BANK_RESERVE_SHARE)
    }

    /// The longest the next point may take.
    pub fn allowance(&self) -> Duration {
        let (left, points) = *self.state.lock();
        if points == 0 {
            return self.max;
        }
        left.saturating_sub(self.reserve() * (points as u32 - 1)).max(self.reserve())
    }

    /// A point is done (measured in `took`, or kept from disk in no time).
    pub fn spend(&self, took: Duration) {
        let mut state = self.state.lock();
        state.0 = state.0.saturating_sub(took);
        state.1 = state.1.saturating_sub(1);
    }
}

impl PartialEq for TimeBank {
    fn eq(&self, other: &Self) -> bool {
        self.max == other.max && *self.state.lock() == *other.state.lock()
    }
}

/// The load points of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub enum SweepPoints {
    /// `--concurrency-range start:end:step`; `end: None` goes on until `-l` is exceeded.
    Concurrency { start: u64, end: Option<u64>, step: u64 },
    /// Closed loop at each of these concurrencies, in order (`--concurrency 8,16,64`).
    Concurrencies(Vec<u64>),
    /// `--request-rate-range start:end:step`, in requests per second.
    RequestRate { start: f64, end: f64, step: f64, distribution: Distribution },
    /// `--request-intervals`: one point, the trace as given.
    Trace(Arc<[Duration]>),
}

/// Everything about a sweep beyond how each point is measured.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadPlan {
    pub points: SweepPoints,
    /// `-l`, in µs: a linear sweep stops after the first point above it.
    pub latency_threshold_us: Option<f64>,
    /// `--binary-search`: bisect the range for the largest value under the threshold.
    pub binary_search: bool,
    /// `--warmup-request-count`: sent once, before the first point, and not measured.
    pub warmup_requests: u64,
    /// Open loop: outstanding requests allowed before due ones are counted missed.
    pub max_in_flight: u64,
    /// Keep per-request times for `--profile-export-file`.
    pub log_requests: bool,
    /// The interval rule's time shared by all the sweep's points (all batch sizes); `None`
    /// gives each point its own `max`.
    pub time_bank: Option<Arc<TimeBank>>,
    /// This process is shard `index` of `count`: it applies its part of each point's load
    /// ([`LoadMode::shard_part`]); the rows keep the level asked of all shards.
    pub shard: Option<(u64, u64)>,
    /// `--start-at`: each point starts on its slot of the run's clock grid.
    pub slots: Option<SweepSlots>,
}

/// What a sweep talks to.
pub struct Target<C: InferClient> {
    pub client: Arc<C>,
    /// Prepared requests, one per input data step, sent in turn.
    pub requests: Arc<[C::Prepared]>,
    pub model: String,
    pub version: String,
    /// Whether the server lists the `statistics` extension.
    pub server_stats: bool,
    /// An ensemble's composing models, read with it in every window (empty otherwise).
    pub composing: Vec<ComposingModel>,
    /// Checks every answer (`validation_data`); `None` sends without decoding answers.
    pub check: Option<ResponseCheck>,
    /// A failed check ends the sweep (true), or is a failed request (`--validate-outputs`).
    pub check_fatal: bool,
    /// A sequence model: how requests form sequences.
    pub sequences: Option<crate::load::SequenceSpec>,
}

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

/// Sees the sweep as it goes: the progress display and the row writers.
pub trait SweepObserver {
    fn warm_up_started(&mut self, _mode: &LoadMode) {}
    fn point_started(&mut self, _mode: &LoadMode) {}
    /// The point starts past its `--start-at` slot by more than [`super::grid::START_TOLERANCE`].
    fn point_late(&mut self, _mode: &LoadMode, _late: Duration) {}
    fn window_done(&mut self, _window: &WindowProgress) {}
    /// A row is measured; writers persist it here. An error ends the sweep.
    fn point_done(&mut self, result: &PointResult) -> std::io::Result<()>;
    /// A row of this point already on disk (a resumed run), to keep instead of measuring it.
    fn measured_before(&self, _batch: u64, _point: LoadPoint) -> Option<PointResult> {
        None
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A fatal client error ended the sweep: the server went away or stopped answering, or an
    /// answer failed its `validation_data`. `measured` rows were already handed to the observer.
    #[error("{error} (after {measured} measured rows)")]
    Stopped { error: ClientError, measured: usize },
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("writing results: {0}")]
    Output(#[from] std::io::Error),
}

struct Sweeper<'a, C: InferClient, O> {
    target: &'a Target<C>,
    plan: &'a LoadPlan,
    settings: &'a MeasureSettings,
    observer: &'a mut O,
    results: Vec<PointResult>,
    /// The warm-up ran: it comes before the first point that is measured, not kept from disk.
    warmed: bool,
    /// A point was visited (measured or kept): the first one's slot holds the warm-up part.
    visited: bool,
}

impl<C: InferClient, O: SweepObserver> Sweeper<'_, C, O> {
    fn spec(&self, mode: LoadMode) -> LoadSpec {
        let mode = match self.plan.shard {
            Some((index, count)) => mode.shard_part(index, count),
            None => mode,
        };
        LoadSpec {
            mode,
            request_budget: None,
            max_in_flight: self.plan.max_in_flight,
            log_requests: self.plan.log_requests,
            sequences: self.target.sequences.clone(),
            check_fatal: self.target.check_fatal,
        }
    }

    /// Sends `--warmup-request-count` requests at the load of the first point measured; under
    /// the interval rule it goes on until throughput settles ([`settle`]), at most
    /// [`WARMUP_MAX`].
    async fn warm_up(&mut self, mode: LoadMode) -> Result<(), SweepError> {
        let settling = matches!(self.settings.stop, Stop::Intervals { .. });
        if self.plan.warmup_requests == 0 && !settling {
            return Ok(());
        }
        self.observer.warm_up_started(&mode);
        let budget = (!settling).then_some(self.plan.warmup_requests);
        let spec = LoadSpec { request_budget: budget, log_requests: false, ..self.spec(mode.clone()) };
        let load = RunningLoad::start_checked(
            self.target.client.clone(),
            self.target.requests.clone(),
            &spec,
            self.target.check.clone(),
        )?;
        tracing::debug!(?mode, "warm-up started");
        let outcome = if settling {
            settle(&load, self.settings, &mode, self.plan.warmup_requests).await
        } else {
            load.wait_completed(self.plan.warmup_requests).await
        };
        tracing::debug!(completed = load.completed(), "warm-up done, stopping its load");
        load.stop().await;
        outcome.map_err(|error| SweepError::Stopped { error, measured: self.results.len() })
    }

    /// Measures one point and hands it to the observer (or keeps the observer's row of it from
    /// an earlier run); returns whether it stayed under `-l`.
    async fn measure(&mut self, mode: LoadMode) -> Result<bool, SweepError> {
        // A kept point takes its slot too, so every shard's point k keeps slot k.
        let slot = self.plan.slots.as_ref().map(|s| s.grid.next(s.parts, !self.visited));
        self.visited = true;
        if let Some(kept) = self.observer.measured_before(self.settings.batch, mode.point()) {
            tracing::debug!(?mode, "point kept from an earlier run");
            if let Some(bank) = &self.plan.time_bank {
                bank.spend(Duration::ZERO);
            }
            return Ok(self.keep(kept));
        }
        if !self.warmed {
            self.warmed = true;
            if let Some(slot) = &slot {
                sleep_until_epoch(slot.warm_up_ns).await;
            }
            self.warm_up(mode.clone()).await?;
        }
        let point_slot = match &slot {
            Some(slot) => {
                let late = Duration::from_nanos(sleep_until_epoch(slot.start_ns).await.saturating_sub(slot.start_ns));
                if late > START_TOLERANCE {
                    self.observer.point_late(&mode, late);
                }
                Some(PointSlot { start_ns: slot.start_ns, late })
            }
            None => None,
        };
        self.observer.point_started(&mode);
        let spec = LoadSpec { request_budget: self.settings.request_count, ..self.spec(mode.clone()) };
        let load = RunningLoad::start_checked(
            self.target.client.clone(),
            self.target.requests.clone(),
            &spec,
            self.target.check.clone(),
        )?;
        let stats = StatsSource {
            client: &*self.target.client,
            model: self.target.server_stats.then_some((self.target.model.as_str(), self.target.version.as_str())),
            composing: &self.target.composing,
        };
        let observer = &mut *self.observer;
        let mut settings = self.settings.clone();
        if let (Some(bank), Stop::Intervals { max, .. }) = (&self.plan.time_bank, &mut settings.stop) {
            *max = bank.allowance();
        }
        tracing::debug!(?mode, stop = ?settings.stop, "point started");
        let begun = Instant::now();
        let measured =
            measure_point(&load, &stats, &settings, mode.point(), |window| observer.window_done(window)).await;
        if let Some(bank) = &self.plan.time_bank {
            bank.spend(begun.elapsed());
        }
        tracing::debug!(completed = load.completed(), "point measured, stopping its load");
        load.stop().await;
        let mut result = measured.map_err(|error| SweepError::Stopped { error, measured: self.results.len() })?;
        result.detail.slot = point_slot;
        if let Some((index, count)) = self.plan.shard {
            // A shard held only its part of the row's load: its client is judged against that.
            result.row.client.held = mode.shard_part(index, count).point().amount();
        }
        self.observer.point_done(&result)?;
        result.detail.windows = Default::default();
        Ok(self.keep(result))
    }

    /// Adds a row to the sweep's; whether it stayed under `-l`.
    fn keep(&mut self, result: PointResult) -> bool {
        let under = self.plan.latency_threshold_us.is_none_or(|limit| result.detail.threshold_latency_us <= limit);
        self.results.push(result);
        under
    }

    async fn run(&mut self) -> Result<(), SweepError> {
        match self.plan.points.clone() {
            SweepPoints::Trace(gaps) => {
                self.measure(LoadMode::Schedule(Schedule::Trace(gaps))).await?;
            }
            SweepPoints::Concurrencies(levels) => {
                for c in levels {
                    if !self.measure(LoadMode::Concurrency(c)).await? {
                        break;
                    }
                }
            }
            SweepPoints::Concurrency { start, end, step } => {
                let end = end.unwrap_or(MAX_OPEN_CONCURRENCY);
                if self.plan.binary_search {
                    let mut probe = |c: f64| LoadMode::Concurrency(c as u64);
                    self.bisect(start as f64, end as f64, step as f64, &mut probe).await?;
                } else {
                    let mut c = start;
                    while c <= end && self.measure(LoadMode::Concurrency(c)).await? {
                        c += step;
                    }
                }
            }
            SweepPoints::RequestRate { start, end, step, distribution } => {
                let mut probe = |r: f64| LoadMode::request_rate(r, distribution);
                if self.plan.binary_search {
                    self.bisect(start, end, step, &mut probe).await?;
                } else {
                    // Index-based, so float steps never accumulate error.
                    let mut k = 0u64;
                    loop {
                        let rate = start + k as f64 * step;
                        if rate > end * (1.0 + 1e-9) || !self.measure(probe(rate)).await? {
                            break;
                        }
                        k += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Largest value in [lo, hi] (on the step grid from lo) whose latency stays under `-l`.
    async fn bisect(
        &mut self,
        lo: f64,
        hi: f64,
        step: f64,
        probe: &mut dyn FnMut(f64) -> LoadMode,
    ) -> Result<(), SweepError> {
        if !self.measure(probe(lo)).await? || hi <= lo || self.plan.latency_threshold_us.is_none() {
            return Ok(());
        }
        if self.measure(probe(hi)).await? {
            return Ok(());
        }
        // Invariant: lo is under the threshold, hi is over it.
        let (mut lo_k, mut hi_k) = (0u64, ((hi - lo) / step).ceil() as u64);
        while hi_k - lo_k > 1 {
            let mid_k = lo_k + (hi_k - lo_k) / 2;
            if self.measure(probe(lo + mid_k as f64 * step)).await? {
                lo_k = mid_k;
            } else {
                hi_k = mid_k;
            }
        }
        Ok(())
    }
}

/// Runs the sweep. On `Stopped`, every row measured before the failure has already been
/// passed to `observer`.
pub async fn sweep<C: InferClient, O: SweepObserver>(
    target: &Target<C>,
    plan: &LoadPlan,
    settings: &MeasureSettings,
    observer: &mut O,
) -> Result<Vec<PointResult>, SweepError> {
    let mut sweeper = Sweeper { target, plan, settings, observer, results: Vec::new(), warmed: false, visited: false };
    sweeper.run().await?;
    Ok(sweeper.results)
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
    /// Reads the model's counters. A broken connection is fatal; any other failure only loses
    /// the server columns of this window.
    async fn read(&self) -> Result<Option<Reading>, ClientError> {
        let Some((model, version)) = self.model else {
            return Ok(None);
        };
        let (asked, asked_version) = if self.composing.is_empty() { (model, version) } else { ("", "") };
        match within_stall_timeout("the statistics request", self.client.statistics(asked, asked_version)).await {
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
fn check_composing_versions(
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

fn epoch_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
}

/// Sleeps until the wall clock reads `at_ns` (ns since the epoch); returns the time it woke.
async fn sleep_until_epoch(at_ns: u64) -> u64 {
    let now = epoch_ns();
    if at_ns > now {
        tokio::time::sleep(Duration::from_nanos(at_ns - now)).await;
    }
    epoch_ns()
}

/// When a time window of a point lined up by `--start-at` ends, its measuring having begun at
/// `origin`: on a multiple of `step` from `origin`, so windows keep fixed offsets from the
/// point's start (and line up across shards) however long each end's reading took. A window
/// that would last less than half a step (the reading overran) ends on the offset after.
fn window_end(origin: Instant, step: Duration, trial: usize, now: Instant) -> Instant {
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
async fn settle(
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

/// Measures windows of a running load until the point's rule ([`Stop`]) is met, and derives the
/// row. `on_window` sees each window as it ends (progress display).
///
/// - `--request-count`: one window of exactly that many requests.
/// - [`Stop::Stable`]: windows until the last [`STABLE_WINDOWS`] agree or `max_trials` were
///   taken; the row merges the last (up to) three.
/// - [`Stop::Intervals`]: a first window lets the load settle and is dropped; then windows until
///   the intervals of throughput, p50 and p99 are tight enough, p99 has its requests and the
///   queue is not growing, or the time is up. The row merges every window after the first.
///
/// Count windows hold at least `k ×` the requests in flight ([`window_requests`]): the
/// concurrency, or for an open loop the previous window's throughput × latency (Little's law).
pub async fn measure_point<C: InferClient>(
    load: &RunningLoad,
    stats: &StatsSource<'_, C>,
    settings: &MeasureSettings,
    point: LoadPoint,
    mut on_window: impl FnMut(&WindowProgress),
) -> Result<PointResult, ClientError> {
    let begun = Instant::now();
    let mut before = stats.read().await?;
    let (deadline, target_pct) = match settings.stop {
        Stop::Intervals { half_width_pct, max } if settings.request_count.is_none() => {
            (Some(begun + max), Some(half_width_pct))
        }
        _ => (None, None),
    };
    let trials = match (settings.request_count, target_pct) {
        (Some(_), _) => 1,
        (None, Some(_)) => usize::MAX,
        (None, None) => settings.max_trials.max(1),
    };
    // Recorders of windows no longer needed, each merged into again by a later window, so a
    // long point allocates no histograms (about 208 KB a window) as it goes. Under the stable
    // rule a point holds at most STABLE_WINDOWS windows plus the one being taken: all of them
    // are made here, and its memory is flat from its first window on.
    let mut spares: Vec<WindowRecorder> = match target_pct {
        None => (0..trials.min(STABLE_WINDOWS + 1)).map(|_| WindowRecorder::default()).collect(),
        Some(_) => Vec::new(),
    };
    if settings.request_count.is_none() {
        // Whatever finished before the first boundary belongs to no window. With a request
        // count every request belongs to the one window.
        let unwanted = load.take_window_into(spares.pop().unwrap_or_default());
        spares.push(unwanted);
    }
    // Under the interval rule no window outlasts a share of the time allowed, so even a slow
    // model gets the windows its intervals need before the deadline.
    let window_cap = deadline.map(|d| (d - begun) / (MIN_INTERVAL_WINDOWS as u32 + 2));
    let mut in_flight = match point {
        LoadPoint::Concurrency(c) => c as f64,
        LoadPoint::RequestRate(_) => f64::NAN,
    };
    let mut started = (Instant::now(), epoch_ns());
    let origin = started.0;
    let mut cpu_started_ns = crate::measure::cpu::process_cpu_ns();
    let mut boundaries = vec![started.1];
    let mut windows: Vec<Window> = Vec::new();
    let mut batches = Batches::default();
    let mut figures: Vec<WindowFigures> = Vec::new();
    let mut stable = false;
    let mut trial = 0;
    while trial < trials {
        match (settings.request_count, settings.window, window_cap) {
            (Some(n), _, _) => load.wait_completed(n).await?,
            (None, WindowMode::Time(span), cap) => {
                let span = cap.map_or(span, |cap| span.min(cap));
                if settings.windows_on_offsets {
                    let now = Instant::now();
                    load.wait_for(window_end(origin, span, trial, now) - now).await?
                } else {
                    load.wait_for(span).await?
                }
            }
            (None, WindowMode::Count(n), None) => {
                load.wait_completed(load.completed() + window_requests(n, in_flight)).await?
            }
            (None, WindowMode::Count(n), Some(cap)) => {
                let goal = load.completed() + window_requests(n, in_flight);
                tokio::time::timeout_at(started.0 + cap, load.wait_completed(goal)).await.unwrap_or(Ok(()))?;
                let span = started.0.elapsed();
                if span < MIN_WINDOW_TIME {
                    load.wait_for(MIN_WINDOW_TIME - span).await?;
                }
            }
        }
        tracing::debug!(trial, completed = load.completed(), "window ends: reading server statistics");
        let after = stats.read().await?;
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
        match target_pct {
            None => {
                windows.push(window);
                // The row merges the last STABLE_WINDOWS: a long point holds no more than those
                // (each keeps a latency histogram of about 188 KB), and the next window reuses
                // the one it lets go. A shard keeps them all, so the merge can take the last
                // ones every shard measured together.
                if windows.len() > STABLE_WINDOWS && !settings.keep_windows {
                    spares.push(windows.remove(0).client);
                }
                figures.push(window_figures);
                stable = settings.request_count.is_some() || is_stable(&figures, settings.stability_pct);
                progress.stable = stable;
            }
            Some(_) if trial == 0 => {
                progress.settling = true;
                spares.push(window.client);
            }
            Some(target) => {
                let ok: u64 = batches.iter().map(|w| w.client.ok).sum::<u64>() + window.client.ok;
                spares.extend(batches.push(window));
                if batches.windows() >= MIN_INTERVAL_WINDOWS && ok >= min_requests_for(99.0) {
                    let widest = Intervals::of(batches.iter(), settings.batch).widest_pct();
                    progress.widest_pct = Some(widest);
                    stable = widest <= target && !overloaded(batches.iter());
                    progress.stable = stable;
                }
            }
        }
        // After the window let go, so its pages are among those handed back.
        return_freed_memory();
        on_window(&progress);
        trial += 1;
        let out_of_time = deadline.is_some_and(|d| Instant::now() >= d) && batches.windows() > 0;
        if stable || out_of_time {
            break;
        }
        before = after;
        started = ended;
        cpu_started_ns = cpu_ended_ns;
    }
    let all = match target_pct {
        None => windows,
        Some(_) => batches.into_windows(),
    };
    let merged = match target_pct {
        None => &all[all.len().saturating_sub(STABLE_WINDOWS)..],
        Some(_) => &all[..],
    };
    let mut result = derive_point(merged, settings.batch, point, stable, settings.percentile);
    if settings.keep_windows {
        result.detail.windows = all.iter().map(Window::to_shard).collect();
    }
    result.detail.trials = trial;
    result.detail.window_boundaries_ns = boundaries;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::fake::FakeClient;
    use crate::results::{PointDetail, ReportRow};

    #[test]
    fn a_composing_model_without_version_that_was_not_called_fails_as_in_perf_analyzer() {
        use crate::results::StageTotal;
        let model = |name: &str, version: &str| ComposingModel {
            name: name.into(),
            version: version.into(),
            depth: 1,
            ensemble: false,
        };
        let read = |name: &str, queued: u64| ComposingStats {
            model: model(name, "1"),
            stats: ServerStats { queue: StageTotal { count: queued, ns: 1000 * queued }, ..ServerStats::default() },
        };
        let called = ServerStats { success: StageTotal { count: 5, ns: 5000 }, ..ServerStats::default() };
        let tree = [model("a", ""), model("b", "1")];
        // "b" was asked with its version: idle, it reads as zeros.
        assert!(check_composing_versions(&tree, &called, &[read("a", 5), read("b", 0)]).is_ok());
        let e = check_composing_versions(&tree, &called, &[read("a", 0), read("b", 5)]).unwrap_err();
        assert!(e.to_string().starts_with("failed to find the requested model version: composing model 'a'"), "{e}");
        // A window in which the model itself answered nothing proves nothing.
        assert!(check_composing_versions(&tree, &ServerStats::default(), &[read("a", 0), read("b", 0)]).is_ok());
    }

    #[derive(Default)]
    struct Collect {
        rows: Vec<PointResult>,
        windows: usize,
        /// Rows "on disk" from an earlier run.
        kept: Vec<PointResult>,
        warm_ups: Vec<LoadMode>,
    }

    impl SweepObserver for Collect {
        fn warm_up_started(&mut self, mode: &LoadMode) {
            self.warm_ups.push(mode.clone());
        }
        fn window_done(&mut self, _: &WindowProgress) {
            self.windows += 1;
        }
        fn point_done(&mut self, result: &PointResult) -> std::io::Result<()> {
            self.rows.push(result.clone());
            Ok(())
        }
        fn measured_before(&self, batch: u64, point: LoadPoint) -> Option<PointResult> {
            self.kept.iter().find(|r| r.row.is_at(batch, point)).cloned()
        }
    }

    #[test]
    fn time_windows_end_on_fixed_offsets_from_the_point_start() {
        let origin = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(window_end(origin, ms(250), 0, origin + ms(3)), origin + ms(250));
        // Reading the server's counters after a window does not push the next one later.
        assert_eq!(window_end(origin, ms(250), 1, origin + ms(260)), origin + ms(500));
        // A reading that overran: the next window ends on an offset at least half a step ahead.
        assert_eq!(window_end(origin, ms(250), 1, origin + ms(400)), origin + ms(750));
        assert_eq!(window_end(origin, ms(250), 1, origin + ms(520)), origin + ms(750));
        assert_eq!(window_end(origin, ms(250), 1, origin + ms(500)), origin + ms(750));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_grid_each_point_starts_on_its_slot_and_a_kept_point_keeps_its_own() {
        use crate::run::grid::{PointGrid, SlotParts};
        let t = target(FakeClient::with_latency(Duration::from_millis(1)));
        let start_at_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 + 200;
        let parts = SlotParts { warm_up: Duration::ZERO, point: Duration::from_millis(400) };
        let slots = SweepSlots { grid: Arc::new(PointGrid::new(start_at_ms)), parts };
        let p = LoadPlan { slots: Some(slots), ..plan(SweepPoints::Concurrencies(vec![1, 2, 3])) };
        let kept = PointResult { row: ReportRow::zeroed(LoadPoint::Concurrency(2)), detail: PointDetail::default() };
        let mut seen = Collect { kept: vec![kept], ..Collect::default() };
        sweep(&t, &p, &count_windows(20), &mut seen).await.unwrap();
        let slot_ms: Vec<u64> =
            seen.rows.iter().map(|r| r.detail.slot.expect("on a slot").start_ns / 1_000_000 - start_at_ms).collect();
        assert_eq!(slot_ms, [0, 800], "concurrency 2 was kept in slot 1");
        for r in &seen.rows {
            let slot = r.detail.slot.unwrap();
            assert!(r.detail.window_boundaries_ns[0] >= slot.start_ns, "no point starts before its slot");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kept_points_are_not_measured_and_the_warm_up_comes_before_the_first_measured() {
        let t = target(FakeClient::with_latency(Duration::from_millis(1)));
        let mut p = plan(SweepPoints::Concurrencies(vec![1, 2, 3, 4]));
        p.warmup_requests = 5;
        p.latency_threshold_us = Some(10_000.0);
        let kept = |c: u64, latency_us: f64| PointResult {
            row: ReportRow::zeroed(LoadPoint::Concurrency(c)),
            detail: PointDetail { threshold_latency_us: latency_us, ..PointDetail::default() },
        };
        let settings = MeasureSettings { batch: 1, ..count_windows(20) };
        let mut seen = Collect { kept: vec![kept(1, 1.0), kept(2, 1.0)], ..Collect::default() };
        let rows = sweep(&t, &p, &settings, &mut seen).await.unwrap();
        let loads = |rows: &[PointResult]| rows.iter().map(|r| r.row.load).collect::<Vec<_>>();
        assert_eq!(loads(&rows), (1..=4).map(LoadPoint::Concurrency).collect::<Vec<_>>());
        assert_eq!(loads(&seen.rows), vec![LoadPoint::Concurrency(3), LoadPoint::Concurrency(4)]);
        assert_eq!(seen.warm_ups, vec![LoadMode::Concurrency(3)]);

        // A kept row over -l ends the sweep as a measured one would.
        let mut seen = Collect { kept: vec![kept(1, 1.0), kept(2, 20_000.0)], ..Collect::default() };
        let rows = sweep(&t, &p, &settings, &mut seen).await.unwrap();
        assert_eq!(rows.len(), 2);
        assert!(seen.rows.is_empty() && seen.warm_ups.is_empty(), "nothing was sent");
    }

    fn target(fake: FakeClient) -> Target<FakeClient> {
        Target {
            client: Arc::new(fake),
            requests: vec![()].into(),
            model: "m".into(),
            version: String::new(),
            server_stats: true,
            composing: Vec::new(),
            check: None,
            check_fatal: true,
            sequences: None,
        }
    }

    fn plan(points: SweepPoints) -> LoadPlan {
        LoadPlan {
            points,
            latency_threshold_us: None,
            binary_search: false,
            warmup_requests: 0,
            max_in_flight: 1024,
            log_requests: false,
            time_bank: None,
            shard: None,
            slots: None,
        }
    }

    fn count_windows(n: u64) -> MeasureSettings {
        MeasureSettings { window: WindowMode::Count(n), stability_pct: 50.0, max_trials: 6, ..Default::default() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closed_loop_rows_carry_client_and_server_figures() {
        let t = target(FakeClient::with_latency(Duration::from_millis(2)));
        let p = plan(SweepPoints::Concurrency { start: 1, end: Some(2), step: 1 });
        let mut seen = Collect::default();
        let rows = sweep(&t, &p, &count_windows(20), &mut seen).await.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(seen.rows.len(), 2);
        assert!(seen.windows >= 6, "at least 3 windows per point");
        let c1 = &rows[0].row;
        assert_eq!(c1.load, crate::results::LoadPoint::Concurrency(1));
        // 2 ms per request at concurrency 1: at most 500/s, and well above 100/s even on a busy box.
        assert!(c1.throughput > 100.0 && c1.throughput < 520.0, "throughput {}", c1.throughput);
        assert!(c1.requests >= 3 * 20 && c1.failed == 0);
        assert!((c1.server_compute_infer_us - 2000.0).abs() < 500.0, "infer {}", c1.server_compute_infer_us);
        assert_eq!((c1.client_send_us, c1.client_recv_us), (10.0, 5.0));
        assert!(c1.p50_us >= 2000.0);
        assert!(rows[1].row.throughput > c1.throughput * 1.2, "concurrency 2 overlaps requests");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failures_are_counted_and_the_run_goes_on() {
        let t = target(FakeClient { fail_every: 4, ..FakeClient::with_latency(Duration::from_millis(1)) });
        let p = plan(SweepPoints::Concurrency { start: 2, end: Some(2), step: 1 });
        let rows = sweep(&t, &p, &count_windows(40), &mut Collect::default()).await.unwrap();
        let r = &rows[0].row;
        let share = r.failed as f64 / (r.failed + r.requests) as f64;
        assert!((share - 0.25).abs() < 0.05, "failed {} of {}", r.failed, r.failed + r.requests);
        assert!(rows[0].detail.first_error.as_deref().unwrap().contains("injected failure"));
    }

    /// Count windows of 20 requests, stable at once, at most 3 per point.
    fn windows_of_20() -> MeasureSettings {
        MeasureSettings { window: WindowMode::Count(20), stability_pct: 100.0, max_trials: 3, ..Default::default() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_server_ends_the_sweep_after_the_measured_rows() {
        let t =
            target(FakeClient { unreachable_after: Some(150), ..FakeClient::with_latency(Duration::from_micros(500)) });
        let p = plan(SweepPoints::Concurrency { start: 1, end: Some(8), step: 1 });
        let mut seen = Collect::default();
        let settings = windows_of_20();
        let err = sweep(&t, &p, &settings, &mut seen).await.unwrap_err();
        match err {
            SweepError::Stopped { measured, .. } => {
                assert!(measured >= 1);
                assert_eq!(measured, seen.rows.len());
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn a_server_that_stops_answering_ends_the_sweep_after_the_measured_rows() {
        let t = target(FakeClient { hang_after: Some(150), ..FakeClient::with_latency(Duration::from_millis(5)) });
        let p = plan(SweepPoints::Concurrency { start: 1, end: Some(8), step: 1 });
        let mut seen = Collect::default();
        let (err, waited) = on_virtual_time(async {
            let start = Instant::now();
            let err = sweep(&t, &p, &windows_of_20(), &mut seen).await.unwrap_err();
            (err, start.elapsed())
        });
        match err {
            SweepError::Stopped { measured, error: ClientError::Stalled(reason) } => {
                assert!(measured >= 1);
                assert_eq!(measured, seen.rows.len());
                assert!(reason.contains("in flight was answered in 120s"), "{reason}");
            }
            other => panic!("unexpected {other}"),
        }
        // Given up once the stall lasted STALL_TIMEOUT, not before and not much later.
        assert!(waited >= crate::client::STALL_TIMEOUT, "{waited:?}");
        assert!(waited < crate::client::STALL_TIMEOUT + Duration::from_secs(15), "{waited:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_validation_ends_the_sweep_after_the_measured_rows() {
        let checked = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = checked.clone();
        let check: ResponseCheck =
            Arc::new(move |_, _, _| match counter.fetch_add(1, std::sync::atomic::Ordering::AcqRel) {
                n if n < 150 => Ok(()),
                _ => Err("Output doesn't match expected output".into()),
            });
        let t = Target { check: Some(check), ..target(FakeClient::with_latency(Duration::from_micros(500))) };
        let p = plan(SweepPoints::Concurrency { start: 1, end: Some(8), step: 1 });
        let mut seen = Collect::default();
        let settings = windows_of_20();
        match sweep(&t, &p, &settings, &mut seen).await.unwrap_err() {
            SweepError::Stopped { measured, error } => {
                assert!(measured >= 1);
                assert_eq!(measured, seen.rows.len());
                assert!(
                    matches!(&error, ClientError::Invalid(r) if r == "Output doesn't match expected output"),
                    "{error}"
                );
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn request_count_sends_exactly_that_many() {
        let t = target(FakeClient::with_latency(Duration::from_micros(200)));
        let p = LoadPlan { warmup_requests: 7, ..plan(SweepPoints::Concurrency { start: 3, end: Some(3), step: 1 }) };
        let settings = MeasureSettings { request_count: Some(50), ..count_windows(10) };
        let rows = sweep(&t, &p, &settings, &mut Collect::default()).await.unwrap();
        assert_eq!(rows[0].row.requests, 50);
        assert!(rows[0].row.stable);
        assert_eq!(t.client.sent.load(std::sync::atomic::Ordering::Acquire), 57, "warmup + measured");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn latency_threshold_stops_and_binary_search_finds_the_knee() {
        // Latency = 20 ms × requests in flight, so concurrency c has latency ≈ 20c ms; the limit sits
        // 10 ms from both 3 and 4, far more than timer slop on a busy machine.
        let fake = || FakeClient { scale_with_in_flight: true, ..FakeClient::with_latency(Duration::from_millis(20)) };
        let settings =
            MeasureSettings { window: WindowMode::Count(6), stability_pct: 100.0, max_trials: 3, ..Default::default() };
        let linear = LoadPlan {
            latency_threshold_us: Some(70_000.0),
            ..plan(SweepPoints::Concurrency { start: 1, end: Some(10), step: 1 })
        };
        let rows = sweep(&target(fake()), &linear, &settings, &mut Collect::default()).await.unwrap();
        let seen: Vec<_> = rows.iter().map(|r| r.row.load).collect();
        assert_eq!(
            seen.last(),
            Some(&crate::results::LoadPoint::Concurrency(4)),
            "stops after the first point over: {seen:?}"
        );

        let search = LoadPlan { binary_search: true, ..linear.clone() };
        let rows = sweep(&target(fake()), &search, &settings, &mut Collect::default()).await.unwrap();
        let best = rows
            .iter()
            .filter(|r| r.detail.threshold_latency_us <= 70_000.0)
            .map(|r| match r.row.load {
                crate::results::LoadPoint::Concurrency(c) => c,
                _ => 0,
            })
            .max();
        assert_eq!(best, Some(3));
        assert!(rows.len() < 10, "bisects rather than walking: {} points", rows.len());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_loop_counts_missed_requests_at_the_in_flight_cap() {
        let t = target(FakeClient::with_latency(Duration::from_millis(50)));
        let p = LoadPlan {
            max_in_flight: 2,
            ..plan(SweepPoints::RequestRate {
                start: 200.0,
                end: 200.0,
                step: 1.0,
                distribution: Distribution::Constant,
            })
        };
        let settings = MeasureSettings {
            window: WindowMode::Count(10),
            stability_pct: 100.0,
            max_trials: 3,
            ..Default::default()
        };
        let rows = sweep(&t, &p, &settings, &mut Collect::default()).await.unwrap();
        let r = &rows[0].row;
        assert_eq!(r.load, crate::results::LoadPoint::RequestRate(200.0));
        // 2 in flight × 50 ms → 40/s sent; the other ~160/s are missed.
        assert!(r.missed > r.requests, "missed {} vs sent {}", r.missed, r.requests);
    }

    /// Runs `body` on a current-thread runtime with tokio's clock paused: every sleep advances
    /// virtual time at once, so the statistics below do not depend on machine speed and the same
    /// seed gives the same run.
    fn on_virtual_time<F: std::future::Future>(body: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(body)
    }

    /// A steady model: latency uniform over 100..=300 ms in whole ms (mean 200 ms, fine enough
    /// for percentiles within 1%), so 8 in flight give exactly 40 requests/s in the long run.
    fn steady(seed: u64) -> Target<FakeClient> {
        target(FakeClient {
            jitter: Duration::from_millis(100),
            seed,
            ..FakeClient::with_latency(Duration::from_millis(200))
        })
    }
    const STEADY_CONCURRENCY: u64 = 8;
    const STEADY_THROUGHPUT: f64 = 40.0;

    /// The online defaults: count windows of 50 (scaled with the load), intervals within ±5%,
    /// at most 8 s per point.
    fn interval_rule(half_width_pct: f64, max: Duration) -> MeasureSettings {
        MeasureSettings {
            window: WindowMode::Count(50),
            stop: Stop::Intervals { half_width_pct, max },
            ..Default::default()
        }
    }

    #[test]
    fn the_throughput_interval_covers_the_configured_value() {
        let settings = interval_rule(5.0, Duration::from_secs(300));
        let p = LoadPlan {
            warmup_requests: 10,
            ..plan(SweepPoints::Concurrency { start: STEADY_CONCURRENCY, end: Some(STEADY_CONCURRENCY), step: 1 })
        };
        let mut covered = 0;
        let mut report = Vec::new();
        for seed in 0..20 {
            let rows = on_virtual_time(sweep(&steady(seed), &p, &settings, &mut Collect::default())).unwrap();
            let r = &rows[0].row;
            let ci = r.throughput_ci;
            assert!(ci.is_known(), "{ci:?}");
            assert!(r.stable && r.requests >= 1000, "seed {seed}: {r:?}");
            covered += usize::from(ci.low <= STEADY_THROUGHPUT && STEADY_THROUGHPUT <= ci.high);
            report.push(format!("{:.1} ± {:.1}", r.throughput, ci.plus_minus(r.throughput)));
        }
        eprintln!("coverage: {covered}/20 intervals hold {STEADY_THROUGHPUT}/s: {}", report.join(", "));
        assert!(covered >= 18, "{covered}/20: {report:?}");
    }

    /// Measures one point of the steady model; returns the row and the point's virtual time.
    async fn timed_point(seed: u64, settings: &MeasureSettings) -> (PointResult, Duration) {
        let t = steady(seed);
        let spec = LoadSpec::new(LoadMode::Concurrency(STEADY_CONCURRENCY));
        let load = RunningLoad::start(t.client.clone(), t.requests.clone(), &spec).unwrap();
        // Past the start-up transient, as after a warm-up.
        load.wait_completed(100).await.unwrap();
        let stats = StatsSource { client: &*t.client, model: Some(("m", "")), composing: &[] };
        let started = Instant::now();
        let point = LoadPoint::Concurrency(STEADY_CONCURRENCY);
        let result = measure_point(&load, &stats, settings, point, |_| {}).await.unwrap();
        let took = started.elapsed();
        load.stop().await;
        (result, took)
    }

    /// A long point recycles the recorders of the windows it lets go: its row still holds
    /// exactly its last three windows, nothing of the earlier ones.
    #[test]
    fn a_long_point_merges_only_its_last_three_windows() {
        let settings = MeasureSettings {
            window: WindowMode::Time(Duration::from_secs(1)),
            stability_pct: 0.0,
            max_trials: 8,
            ..Default::default()
        };
        on_virtual_time(async {
            let t = steady(3);
            let spec = LoadSpec::new(LoadMode::Concurrency(STEADY_CONCURRENCY));
            let load = RunningLoad::start(t.client.clone(), t.requests.clone(), &spec).unwrap();
            load.wait_completed(100).await.unwrap();
            let stats = StatsSource { client: &*t.client, model: Some(("m", "")), composing: &[] };
            let point = LoadPoint::Concurrency(STEADY_CONCURRENCY);
            // Windows of exactly 1 s of virtual time: throughput is the window's request count.
            let mut per_window = Vec::new();
            let result = measure_point(&load, &stats, &settings, point, |w| per_window.push(w.figures.throughput))
                .await
                .unwrap();
            load.stop().await;
            assert_eq!((per_window.len(), result.detail.trials, result.row.stable), (8, 8, false));
            let last_three: f64 = per_window[5..].iter().sum();
            assert_eq!(result.row.requests as f64, last_three, "windows {per_window:?}");
        });
    }

    fn widest_pct(r: &PointResult) -> f64 {
        let r = &r.row;
        [
            r.throughput_ci.plus_minus_pct(r.throughput),
            r.p50_ci.plus_minus_pct(r.p50_us),
            r.p99_ci.plus_minus_pct(r.p99_us),
        ]
        .into_iter()
        .fold(0.0, f64::max)
    }

    #[test]
    fn early_stopping_reaches_the_fixed_windows_width_in_half_the_time() {
        // Fixed windows, perf_analyzer's way: three windows of 1,000 requests (stable at once on
        // a steady model); their intervals rest on 2 degrees of freedom. The width they give, on
        // average over seeds, is the width the interval rule is then asked for.
        let fixed = MeasureSettings {
            window: WindowMode::Count(1000),
            stability_pct: 100.0,
            max_trials: 3,
            ..Default::default()
        };
        let seeds = 0..8;
        let runs: Vec<(f64, Duration)> = seeds
            .clone()
            .map(|seed| {
                let (row, took) = on_virtual_time(timed_point(seed, &fixed));
                assert_eq!(row.detail.trials, 3);
                (widest_pct(&row), took)
            })
            .collect();
        let width = runs.iter().map(|r| r.0).sum::<f64>() / runs.len() as f64;
        let fixed_time: Duration = runs.iter().map(|r| r.1).sum();
        let mut early_time = Duration::ZERO;
        for seed in seeds {
            let (row, took) = on_virtual_time(timed_point(seed, &interval_rule(width, Duration::from_secs(300))));
            assert!(row.row.stable && widest_pct(&row) <= width, "seed {seed}");
            early_time += took;
        }
        let n = runs.len() as f64;
        let ratio = early_time.as_secs_f64() / fixed_time.as_secs_f64();
        eprintln!(
            "to ±{width:.2}% (throughput, p50, p99): fixed windows {:.1} s, early stopping {:.1} s per point: {ratio:.2}",
            fixed_time.as_secs_f64() / n,
            early_time.as_secs_f64() / n
        );
        assert!(ratio <= 0.5, "{ratio:.2}");
    }

    /// Times each point on the runtime's (virtual) clock.
    #[derive(Default)]
    struct PointTimes {
        started: Option<Instant>,
        took: Vec<Duration>,
    }

    impl SweepObserver for PointTimes {
        fn point_started(&mut self, _: &LoadMode) {
            self.started = Some(Instant::now());
        }
        fn point_done(&mut self, _: &PointResult) -> std::io::Result<()> {
            self.took.push(self.started.take().expect("started").elapsed());
            Ok(())
        }
    }

    #[test]
    fn a_point_may_borrow_time_the_later_points_of_its_sweep_do_not_need() {
        // ±0.1% is out of reach: every point runs to what it is allowed. Three points of at most
        // 10 s each: the first may take all but half of 10 s for each of the two after it.
        let max = Duration::from_secs(10);
        let bank = Arc::new(TimeBank::new(max, 3));
        let p =
            LoadPlan { time_bank: Some(bank.clone()), ..plan(SweepPoints::Concurrencies(vec![STEADY_CONCURRENCY; 3])) };
        let mut times = PointTimes::default();
        let rows = on_virtual_time(sweep(&steady(1), &p, &interval_rule(0.1, max), &mut times)).unwrap();
        assert_eq!(rows.len(), 3);
        let secs: Vec<f64> = times.took.iter().map(Duration::as_secs_f64).collect();
        // A point ends at the first window boundary past its allowance (windows are short here).
        assert!((20.0..21.0).contains(&secs[0]), "{secs:?}");
        assert!((5.0..6.0).contains(&secs[1]) && (5.0..6.0).contains(&secs[2]), "{secs:?}");
        assert!(secs.iter().sum::<f64>() < 32.0, "the sweep keeps to about 3 × max: {secs:?}");
    }

    #[test]
    fn time_a_point_leaves_unused_goes_to_the_next() {
        let bank = TimeBank::new(Duration::from_secs(10), 3);
        assert_eq!(bank.allowance(), Duration::from_secs(20));
        bank.spend(Duration::from_secs(4));
        assert_eq!(bank.allowance(), Duration::from_secs(21));
        bank.spend(Duration::from_secs(25));
        assert_eq!(bank.allowance(), Duration::from_secs(5), "never less than the reserve");
        bank.spend(Duration::from_secs(5));
        assert_eq!(bank.allowance(), Duration::from_secs(10), "past the plan: max");
    }

    #[test]
    fn a_point_out_of_time_is_unstable_and_bounded() {
        // ±0.1% is out of reach in 10 s: the row comes back flagged, after about 10 s.
        let (row, took) = on_virtual_time(timed_point(1, &interval_rule(0.1, Duration::from_secs(10))));
        assert!(!row.row.stable);
        assert!(took >= Duration::from_secs(10) && took < Duration::from_secs(11), "{took:?}");
        assert!(row.row.low_sample(99.0), "400 requests: {}", row.row.requests);
    }

    #[test]
    fn open_loop_latency_counts_from_the_intended_send_time() {
        // One runtime thread and a client that blocks it for 5 ms per request, at one request
        // every 2.5 ms: sends fall further and further behind their schedule.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let t = target(FakeClient { blocking: true, ..FakeClient::with_latency(Duration::from_millis(5)) });
        let p = plan(SweepPoints::RequestRate {
            start: 400.0,
            end: 400.0,
            step: 1.0,
            distribution: Distribution::Constant,
        });
        let settings = MeasureSettings { request_count: Some(60), ..count_windows(60) };
        let rows = runtime.block_on(sweep(&t, &p, &settings, &mut Collect::default())).unwrap();
        let r = &rows[0].row;
        assert_eq!(r.requests, 60);
        assert!(r.late > 30, "late {}", r.late);
        // Each request alone takes 5 ms; from the schedule, the last ones waited ~150 ms.
        assert!(r.p99_us > 50_000.0, "p99 {} µs", r.p99_us);
    }
}
