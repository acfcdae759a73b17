//! The measuring loop of one batch size: warm up, then measure each load point in turn (a
//! linear range, or a binary search for the largest value under `-l`), handing every row to an
//! observer as soon as it is measured so it reaches disk before the next point starts. Each
//! point runs the load until its windows are stable ([`measure_point`]).

use std::sync::Arc;
use std::time::Duration;

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::client::{ClientError, InferClient};
use crate::load::{Distribution, LoadError, LoadMode, LoadSpec, RunningLoad, Schedule};
use crate::measure::{derive_point, is_stable, MeasureSettings, Window, WindowFigures, WindowMode, STABLE_WINDOWS};
use crate::plan::MAX_OPEN_CONCURRENCY;
use crate::results::{LoadPoint, PointResult, ServerStats};

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
}

/// Sees the sweep as it goes: the progress display and the row writers.
pub trait SweepObserver {
    fn point_started(&mut self, _mode: &LoadMode) {}
    fn window_done(&mut self, _trial: usize, _window: &Window, _figures: WindowFigures, _stable: bool) {}
    /// A row is measured; writers persist it here. An error ends the sweep.
    fn point_done(&mut self, result: &PointResult) -> std::io::Result<()>;
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The server went away; `measured` rows were already handed to the observer.
    #[error("{error} (after {measured} measured rows)")]
    Unreachable { error: ClientError, measured: usize },
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
}

impl<C: InferClient, O: SweepObserver> Sweeper<'_, C, O> {
    fn spec(&self, mode: LoadMode) -> LoadSpec {
        LoadSpec {
            mode,
            request_budget: None,
            max_in_flight: self.plan.max_in_flight,
            log_requests: self.plan.log_requests,
        }
    }

    async fn warm_up(&mut self, mode: LoadMode) -> Result<(), SweepError> {
        if self.plan.warmup_requests == 0 {
            return Ok(());
        }
        let spec = LoadSpec { request_budget: Some(self.plan.warmup_requests), log_requests: false, ..self.spec(mode) };
        let load = RunningLoad::start(self.target.client.clone(), self.target.requests.clone(), &spec)?;
        let outcome = load.wait_completed(self.plan.warmup_requests).await;
        load.stop().await;
        outcome.map_err(|error| SweepError::Unreachable { error, measured: 0 })
    }

    /// Measures one point and hands it to the observer; returns whether it stayed under `-l`.
    async fn measure(&mut self, mode: LoadMode) -> Result<bool, SweepError> {
        self.observer.point_started(&mode);
        let spec = LoadSpec { request_budget: self.settings.request_count, ..self.spec(mode.clone()) };
        let load = RunningLoad::start(self.target.client.clone(), self.target.requests.clone(), &spec)?;
        let stats = StatsSource {
            client: &*self.target.client,
            model: self.target.server_stats.then_some((self.target.model.as_str(), self.target.version.as_str())),
        };
        let observer = &mut *self.observer;
        let measured = measure_point(&load, &stats, self.settings, mode.point(), |trial, window, figures, stable| {
            observer.window_done(trial, window, figures, stable)
        })
        .await;
        load.stop().await;
        let result = measured.map_err(|error| SweepError::Unreachable { error, measured: self.results.len() })?;
        self.observer.point_done(&result)?;
        let under = self.plan.latency_threshold_us.is_none_or(|limit| result.detail.threshold_latency_us <= limit);
        self.results.push(result);
        Ok(under)
    }

    async fn run(&mut self) -> Result<(), SweepError> {
        match self.plan.points.clone() {
            SweepPoints::Trace(gaps) => {
                let mode = LoadMode::Schedule(Schedule::Trace(gaps));
                self.warm_up(mode.clone()).await?;
                self.measure(mode).await?;
            }
            SweepPoints::Concurrencies(levels) => {
                self.warm_up(LoadMode::Concurrency(levels.first().copied().unwrap_or(1))).await?;
                for c in levels {
                    if !self.measure(LoadMode::Concurrency(c)).await? {
                        break;
                    }
                }
            }
            SweepPoints::Concurrency { start, end, step } => {
                self.warm_up(LoadMode::Concurrency(start)).await?;
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
                self.warm_up(probe(start)).await?;
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

/// Runs the sweep. On `Unreachable`, every row measured before the failure has already been
/// passed to `observer`.
pub async fn sweep<C: InferClient, O: SweepObserver>(
    target: &Target<C>,
    plan: &LoadPlan,
    settings: &MeasureSettings,
    observer: &mut O,
) -> Result<Vec<PointResult>, SweepError> {
    let mut sweeper = Sweeper { target, plan, settings, observer, results: Vec::new() };
    sweeper.run().await?;
    Ok(sweeper.results)
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
    mut on_window: impl FnMut(usize, &Window, WindowFigures, bool),
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
        on_window(trial, &windows[trial], figures[trial], stable);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::fake::FakeClient;

    #[derive(Default)]
    struct Collect {
        rows: Vec<PointResult>,
        windows: usize,
    }

    impl SweepObserver for Collect {
        fn window_done(&mut self, _: usize, _: &Window, _: WindowFigures, _: bool) {
            self.windows += 1;
        }
        fn point_done(&mut self, result: &PointResult) -> std::io::Result<()> {
            self.rows.push(result.clone());
            Ok(())
        }
    }

    fn target(fake: FakeClient) -> Target<FakeClient> {
        Target {
            client: Arc::new(fake),
            requests: vec![()].into(),
            model: "m".into(),
            version: String::new(),
            server_stats: true,
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_server_ends_the_sweep_after_the_measured_rows() {
        let t =
            target(FakeClient { unreachable_after: Some(150), ..FakeClient::with_latency(Duration::from_micros(500)) });
        let p = plan(SweepPoints::Concurrency { start: 1, end: Some(8), step: 1 });
        let mut seen = Collect::default();
        let settings = MeasureSettings {
            window: WindowMode::Count(20),
            stability_pct: 100.0,
            max_trials: 3,
            ..Default::default()
        };
        let err = sweep(&t, &p, &settings, &mut seen).await.unwrap_err();
        match err {
            SweepError::Unreachable { measured, .. } => {
                assert!(measured >= 1);
                assert_eq!(measured, seen.rows.len());
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
