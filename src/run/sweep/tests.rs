//! The sweep and one point's measurement, on paused time against a fake client.

use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use super::*;
use crate::load::fake::FakeClient;
use crate::measure::WindowMode;
use crate::results::{ComposingStats, PointDetail, ReportRow, ServerStats};
use crate::run::point::{check_composing_versions, measure_point, window_end, PointOutcome, StatsSource};

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
        shm_regions: Vec::new(),
        sequences: None,
    }
}

fn plan(points: SweepPoints) -> LoadPlan {
    LoadPlan {
        stall_limit: crate::client::STALL_TIMEOUT,
        shape: crate::load::Shape::default(),
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

/// A server gone for good: the sweep waits [`RECONNECT_WAIT`] for it, then ends with the rows
/// measured before (none for the interrupted point).
#[test]
fn an_unreachable_server_ends_the_sweep_after_the_measured_rows() {
    let t = target(FakeClient { unreachable_after: Some(150), ..FakeClient::with_latency(Duration::from_micros(500)) });
    let p = plan(SweepPoints::Concurrency { start: 1, end: Some(8), step: 1 });
    let mut seen = Collect::default();
    let settings = windows_of_20();
    let (err, waited) = on_virtual_time(async {
        let start = Instant::now();
        (sweep(&t, &p, &settings, &mut seen).await.unwrap_err(), start.elapsed())
    });
    match err {
        SweepError::Stopped { measured, error } => {
            assert!(measured >= 1);
            assert_eq!(measured, seen.rows.len());
            assert!(error.is_connection_lost(), "{error}");
            assert!(seen.rows.iter().all(|r| !r.row.interrupted));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(waited >= RECONNECT_WAIT && waited < RECONNECT_WAIT * 2, "{waited:?}");
}

/// A server restarted mid-sweep: the point it broke is written with what was measured before,
/// flagged interrupted and unstable; the sweep drops its connections, waits for the server,
/// registers the shared-memory regions again and measures every remaining point.
#[test]
fn a_restarted_server_interrupts_one_row_and_the_sweep_goes_on() {
    let fake = FakeClient { restart_after: Some(150), ..FakeClient::with_latency(Duration::from_micros(500)) };
    let region = ShmRegistration { name: "r".into(), key: "/r".into(), byte_size: 16 };
    let t = Target { shm_regions: vec![region], ..target(fake) };
    let p = plan(SweepPoints::Concurrency { start: 1, end: Some(4), step: 1 });
    let mut seen = Collect::default();
    let settings = windows_of_20();
    let rows = on_virtual_time(sweep(&t, &p, &settings, &mut seen)).expect("the sweep goes on after the restart");
    let loads: Vec<u64> = rows.iter().map(|r| r.row.load.amount() as u64).collect();
    assert_eq!(loads, [1, 2, 3, 4], "every point measured once");
    let interrupted: Vec<&PointResult> = rows.iter().filter(|r| r.row.interrupted).collect();
    assert_eq!(interrupted.len(), 1, "one row interrupted");
    let broken = interrupted[0];
    assert!(!broken.row.stable && broken.row.client.failures.as_array()[2] > 0, "{:?}", broken.row);
    assert!(broken.detail.first_error.as_deref().is_some_and(|e| e.contains("unreachable")));
    assert!(rows.iter().filter(|r| !r.row.interrupted).all(|r| r.row.failed == 0 && r.row.stable));
    assert!(t.client.connections_dropped.load(Ordering::Acquire) >= 2, "one drop per poll");
    assert_eq!(*t.client.registered.lock(), ["r"], "the region registered again, once");
    assert_eq!(seen.rows.len(), 4, "the interrupted row reached the observer too");
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
        ..plan(SweepPoints::RequestRate { start: 200.0, end: 200.0, step: 1.0, distribution: Distribution::Constant })
    };
    let settings =
        MeasureSettings { window: WindowMode::Count(10), stability_pct: 100.0, max_trials: 3, ..Default::default() };
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
    let result =
        measure_point(&load, &stats, settings, point, |_| {}).await.and_then(PointOutcome::into_result).unwrap();
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
            .and_then(PointOutcome::into_result)
            .unwrap();
        load.stop().await;
        assert_eq!((per_window.len(), result.detail.trials, result.row.stable), (8, 8, false));
        let last_three: f64 = per_window[5..].iter().sum();
        assert_eq!(result.row.requests as f64, last_three, "windows {per_window:?}");
    });
}

fn widest_pct(r: &PointResult) -> f64 {
    let r = &r.row;
    [r.throughput_ci.plus_minus_pct(r.throughput), r.p50_ci.plus_minus_pct(r.p50_us), r.p99_ci.plus_minus_pct(r.p99_us)]
        .into_iter()
        .fold(0.0, f64::max)
}

#[test]
fn early_stopping_reaches_the_fixed_windows_width_in_half_the_time() {
    // Fixed windows, perf_analyzer's way: three windows of 1,000 requests (stable at once on
    // a steady model); their intervals rest on 2 degrees of freedom. The width they give, on
    // average over seeds, is the width the interval rule is then asked for.
    let fixed =
        MeasureSettings { window: WindowMode::Count(1000), stability_pct: 100.0, max_trials: 3, ..Default::default() };
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
    let p = LoadPlan { time_bank: Some(bank.clone()), ..plan(SweepPoints::Concurrencies(vec![STEADY_CONCURRENCY; 3])) };
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
    let p =
        plan(SweepPoints::RequestRate { start: 400.0, end: 400.0, step: 1.0, distribution: Distribution::Constant });
    let settings = MeasureSettings { request_count: Some(60), ..count_windows(60) };
    let rows = runtime.block_on(sweep(&t, &p, &settings, &mut Collect::default())).unwrap();
    let r = &rows[0].row;
    assert_eq!(r.requests, 60);
    assert!(r.late > 30, "late {}", r.late);
    // Each request alone takes 5 ms; from the schedule, the last ones waited ~150 ms.
    assert!(r.p99_us > 50_000.0, "p99 {} µs", r.p99_us);
}
