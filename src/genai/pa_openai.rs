//! perf_analyzer's `--service-kind openai`, as 2.50 runs it (and genai-perf drives it): every
//! request is `POST {url}/{endpoint}` with one body of `--input-data` (read by [`super::pa_data`]),
//! sent by N workers per `--concurrency-range` level, or as an open loop at each
//! `--request-rate-range` rate or on `--request-intervals`' gaps (every request leaves on time,
//! whatever is still in flight). A range is walked as perf_analyzer walks it: linearly while each
//! point meets `-l`, or by its binary search. A `text/event-stream` answer is a stream that `data: [DONE]` or
//! the end of the reply ends. The `--profile-export-file` is perf_analyzer's: `service_kind`,
//! `endpoint`, `version`, and per level the requests' `timestamp`, `request_inputs.payload` (the
//! body as a string), `response_timestamps` and `response_outputs[].response`, with the window's
//! boundaries; `-f` is its CSV. Where perf_analyzer records one response per network read, each
//! SSE event is one response here, with its own instant.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{json, Value};

use super::endpoint::{BodyOptions, EndpointType};
use super::export::RunInfo;
use super::inputs::Tokenizer;
use super::metrics::{ErrorKind, Record};
use super::pa_data::Payloads;
use super::runner::{open_schedule, paced, rate_offsets, Runner, Target};
use crate::results::format::format_g;

/// perf_analyzer's load modes for this kind.
#[derive(Clone, Debug, PartialEq)]
pub enum PaLoad {
    /// `--concurrency-range`: N requests in flight at each point.
    Concurrency(Walk),
    /// `--request-rate-range`: an open loop at each rate, evenly spaced or Poisson.
    Rate { walk: Walk, poisson: bool, seed: u64 },
    /// `--request-intervals`: an open loop whose gaps cycle through the file's.
    Intervals(Vec<Duration>),
}

/// The points of a load range, as perf_analyzer walks them.
#[derive(Clone, Debug, PartialEq)]
pub enum Walk {
    /// These, in turn, while each meets the latency limit.
    List(Vec<f64>),
    /// start, start + step, ... up to `end` (none: until a point misses the latency limit), or
    /// (`binary`) a binary search between start and end for the highest point within the limit.
    Range { start: f64, end: Option<f64>, step: f64, binary: bool },
}

/// `-l`: the latency a point may not exceed, judged on `--percentile` (else the average).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    pub latency_ms: f64,
    pub percentile: Option<f64>,
}

/// Points a walk with no end measures at most.
const MAX_POINTS: u32 = 1024;

/// One resolved `perf_analyzer --service-kind openai` run.
#[derive(Clone, Debug)]
pub struct PaOpenAi {
    /// `-u` (host:port or a URL).
    pub url: String,
    /// `--endpoint`, e.g. `v1/chat/completions`.
    pub endpoint: String,
    /// Every `--input-data`, in order.
    pub input_data: Vec<PathBuf>,
    pub load: PaLoad,
    pub limit: Option<Limit>,
    /// `--request-count`: exactly this many per level; else one `--measurement-interval` window.
    pub request_count: Option<u64>,
    pub measurement: Duration,
    pub warmup: u64,
    pub headers: Vec<(String, String)>,
    pub export: Option<PathBuf>,
    /// `-f`, and `--verbose-csv`.
    pub csv: Option<PathBuf>,
    pub verbose_csv: bool,
}

/// perf_analyzer counts no tokens for this kind; the records' counts are unused.
struct NoTokens;

impl Tokenizer for NoTokens {
    fn count(&self, _: &str) -> usize {
        0
    }
    fn name(&self) -> String {
        "none".into()
    }
}

/// The endpoint type a path names, for reading its answers.
pub fn endpoint_type(endpoint: &str) -> EndpointType {
    if endpoint.contains("chat/completions") {
        EndpointType::Chat
    } else if endpoint.contains("completions") {
        EndpointType::Completions
    } else if endpoint.contains("embeddings") {
        EndpointType::Embeddings
    } else if endpoint.contains("generate") {
        EndpointType::Generate
    } else {
        EndpointType::Chat
    }
}

/// One request of a level, with what it sent and every event it got.
struct Sent {
    record: Record,
    payload: usize,
    raw: Vec<(Instant, String)>,
}

/// What perf_analyzer names a measured level by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Point {
    Concurrency(usize),
    /// Requests per second (a `--request-intervals` run's: its requests over its gaps' sum).
    Rate(f64),
}

/// One level's requests and its window.
pub struct Level {
    pub point: Point,
    sent: Vec<Sent>,
    window: (Instant, Instant),
    /// Within `-l`: perf_analyzer lists (and writes to its CSV) only such points.
    pub within_limit: bool,
}

/// A level's client-side numbers, as perf_analyzer reports them (µs).
struct Stats {
    count: usize,
    throughput: f64,
    avg: f64,
    std: f64,
    /// p50, p90, p95, p99.
    percentiles: [f64; 4],
    /// perf_analyzer's "Client Recv": from the first response byte to the last.
    recv: f64,
    /// Every latency, in order.
    sorted: Vec<f64>,
}

/// The `q` quantile of sorted values (nearest rank), 0 when there are none.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1]
}

impl Level {
    pub fn ok(&self) -> usize {
        self.sent.iter().filter(|s| s.record.ok()).count()
    }

    /// Whether the level is within `-l` (perf_analyzer's "meets threshold"): its average
    /// latency, or its `--percentile` one, in whole milliseconds below the limit.
    fn meets(&self, limit: Option<Limit>) -> bool {
        let Some(limit) = limit else { return true };
        let s = self.stats();
        let latency_us = match limit.percentile {
            Some(p) => percentile(&s.sorted, p / 100.0),
            None => s.avg,
        };
        ((latency_us / 1000.0).floor()) < limit.latency_ms
    }

    fn stats(&self) -> Stats {
        let ok: Vec<&Sent> = self.sent.iter().filter(|s| s.record.ok()).collect();
        let mut latencies: Vec<f64> =
            ok.iter().map(|s| s.record.end.duration_since(s.record.start).as_secs_f64() * 1e6).collect();
        latencies.sort_by(f64::total_cmp);
        let seconds = self.window.1.duration_since(self.window.0).as_secs_f64().max(1e-9);
        let n = latencies.len();
        let mean =
            |values: &[f64]| if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 };
        let avg = mean(&latencies);
        let std = (latencies.iter().map(|l| (l - avg).powi(2)).sum::<f64>() / n.max(1) as f64).sqrt();
        let p = |q: f64| percentile(&latencies, q);
        let recv: Vec<f64> = ok
            .iter()
            .filter_map(|s| Some(s.raw.last()?.0.duration_since(s.raw.first()?.0).as_secs_f64() * 1e6))
            .collect();
        Stats {
            count: n,
            throughput: n as f64 / seconds,
            avg,
            std,
            percentiles: [p(0.5), p(0.9), p(0.95), p(0.99)],
            recv: mean(&recv),
            sorted: latencies,
        }
    }

    /// The first failure, in perf_analyzer's words (it reports a failed connection as an HTTP
    /// 400 too: curl's code is 0 and its client falls back to 400).
    pub fn first_error(&self) -> Option<String> {
        self.sent.iter().find_map(|s| {
            s.record.error.as_ref().map(|(kind, message)| match kind {
                ErrorKind::Status(code) => format!("OpenAI response returns HTTP code {code} ({message})"),
                ErrorKind::Transport => format!("OpenAI response returns HTTP code 400 (no HTTP answer: {message})"),
                other => format!("OpenAI response unreadable ({other}: {message})"),
            })
        })
    }
}

/// What every level's requests share.
#[derive(Clone)]
struct Shared {
    runner: Arc<Runner>,
    bodies: Arc<Vec<Vec<u8>>>,
    /// The next body to send (each request takes the next, round the list).
    next: Arc<AtomicUsize>,
}

pub fn run(config: &PaOpenAi, payloads: &Payloads) -> anyhow::Result<(Vec<Level>, RunInfo)> {
    let base = if config.url.contains("://") { config.url.clone() } else { format!("http://{}", config.url) };
    let url = format!("{}/{}", base.trim_end_matches('/'), config.endpoint.trim_start_matches('/'));
    // Connections kept for reuse: a concurrency's worth, or plenty for an open loop.
    let pool = match &config.load {
        PaLoad::Concurrency(Walk::List(points)) => points.iter().copied().fold(1.0, f64::max) as usize,
        PaLoad::Concurrency(Walk::Range { start, end: Some(end), .. }) => start.max(*end) as usize,
        _ => 64,
    };
    let target = Target {
        url,
        endpoint: endpoint_type(&config.endpoint),
        mix: crate::load::Mix::single(""),
        body: BodyOptions::default(),
        headers: config.headers.clone(),
        tokenizer: Arc::new(NoTokens),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let info = RunInfo::now(Value::Null);
    let levels = runtime.block_on(async {
        let shared = Shared {
            runner: Arc::new(Runner::new(target, pool)?),
            bodies: Arc::new(payloads.bodies.iter().map(|p| p.as_bytes().to_vec()).collect()),
            next: Arc::new(AtomicUsize::new(0)),
        };
        let mut levels = Vec::new();
        match &config.load {
            PaLoad::Concurrency(walk) => {
                walk_points(walk, true, config.limit, &mut levels, |n| {
                    measure(&shared, config, Point::Concurrency(n as usize))
                })
                .await
            }
            PaLoad::Rate { walk, .. } => {
                walk_points(walk, false, config.limit, &mut levels, |rate| measure(&shared, config, Point::Rate(rate)))
                    .await
            }
            PaLoad::Intervals(gaps) => {
                let total = gaps.iter().sum::<Duration>().as_secs_f64().max(1e-9);
                levels.push(measure(&shared, config, Point::Rate(gaps.len() as f64 / total)).await);
            }
        }
        anyhow::Ok(levels)
    })?;
    Ok((levels, info))
}

/// Measures each point `walk` reaches, into `levels`, as perf_analyzer's linear and binary
/// searches do (`whole`: the points are concurrencies, halved down to a whole number).
async fn walk_points<F, Fut>(walk: &Walk, whole: bool, limit: Option<Limit>, levels: &mut Vec<Level>, mut measure: F)
where
    F: FnMut(f64) -> Fut,
    Fut: std::future::Future<Output = Level>,
{
    let at = |levels: &mut Vec<Level>, mut level: Level| {
        level.within_limit = level.meets(limit);
        let meets = level.within_limit;
        levels.push(level);
        meets
    };
    match walk {
        Walk::List(points) => {
            for &point in points {
                if !at(levels, measure(point).await) {
                    break;
                }
            }
        }
        Walk::Range { start, end, step, binary: false } => {
            // A do-while: the start is measured even past the end.
            for k in 0..MAX_POINTS {
                let point = start + f64::from(k) * step;
                if k > 0 && (*step <= 0.0 || end.is_some_and(|end| point > end * (1.0 + 1e-9))) {
                    break;
                }
                if !at(levels, measure(point).await) {
                    break;
                }
            }
        }
        Walk::Range { start, end, step, binary: true } => {
            let end = end.unwrap_or(*start);
            if !at(levels, measure(*start).await) || at(levels, measure(end).await) {
                return;
            }
            let (mut low, mut high) = (*start, end);
            while high - low > *step {
                let mid = if whole { ((high + low) / 2.0).floor() } else { (high + low) / 2.0 };
                if at(levels, measure(mid).await) {
                    low = mid;
                } else {
                    high = mid;
                }
            }
        }
    }
}

/// One point: the warm-up (if any), then the measured requests.
async fn measure(shared: &Shared, config: &PaOpenAi, point: Point) -> Level {
    let (count, window, warmup) = (config.request_count, Some(config.measurement), Some(config.warmup));
    let run = |count, window| async move {
        match (point, &config.load) {
            (Point::Concurrency(n), _) => closed_level(shared, n, count, window).await,
            (Point::Rate(rate), PaLoad::Rate { poisson, seed, .. }) => {
                let schedule = open_schedule(rate, *poisson, *seed, &crate::load::Shape::default());
                let offsets = schedule.and_then(|s| rate_offsets(&s)).expect("a positive rate, checked with the flags");
                open_level(shared, offsets, count, window).await
            }
            (Point::Rate(_), PaLoad::Intervals(gaps)) => open_level(shared, cycled(gaps.clone()), count, window).await,
            (Point::Rate(_), PaLoad::Concurrency(_)) => unreachable!("a concurrency walk measures concurrencies"),
        }
    };
    if config.warmup > 0 {
        run(warmup, None).await;
    }
    let (sent, window) = run(count, window).await;
    Level { point, sent, window, within_limit: true }
}

/// The offsets of gaps taken in turn, for ever: the first request leaves after the first gap.
fn cycled(gaps: Vec<Duration>) -> impl Iterator<Item = Duration> + Send {
    let mut at = Duration::ZERO;
    gaps.into_iter().cycle().map(move |gap| {
        at += gap;
        at
    })
}

/// One request with the next body; its record joins `out`.
async fn send_next(shared: &Shared, intended: Option<Instant>, out: &Mutex<Vec<Sent>>) {
    let k = shared.next.fetch_add(1, Ordering::Relaxed) % shared.bodies.len();
    let mut raw = Vec::new();
    let (record, _) = shared.runner.send_body(shared.bodies[k].clone(), intended, || 0, Some(&mut raw)).await;
    out.lock().push(Sent { record, payload: k, raw });
}

/// Whether another request may start: `count` requests in all, or until the window is over.
struct Budget {
    left: AtomicUsize,
    until: Option<Instant>,
}

impl Budget {
    fn new(start: Instant, count: Option<u64>, window: Option<Duration>) -> Arc<Budget> {
        let until = if count.is_some() { None } else { window.map(|w| start + w) };
        Arc::new(Budget { left: AtomicUsize::new(count.map_or(usize::MAX, |c| c as usize)), until })
    }
    fn take(&self) -> bool {
        self.until.is_none_or(|u| Instant::now() < u)
            && self.left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
    }
}

fn sorted(out: &Mutex<Vec<Sent>>) -> Vec<Sent> {
    let mut sent = std::mem::take(&mut *out.lock());
    sent.sort_by_key(|s| s.record.start);
    sent
}

/// N workers until `count` requests are done (or, without a count, until `window` is over).
async fn closed_level(
    shared: &Shared,
    concurrency: usize,
    count: Option<u64>,
    window: Option<Duration>,
) -> (Vec<Sent>, (Instant, Instant)) {
    let start = Instant::now();
    let budget = Budget::new(start, count, window);
    let out = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (budget, out, shared) = (budget.clone(), out.clone(), shared.clone());
        tasks.push(tokio::spawn(async move {
            while budget.take() {
                send_next(&shared, None, &out).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    (sorted(&out), (start, Instant::now()))
}

/// An open loop on `offsets` until `count` requests have left (or the window is over); its
/// window ends when the schedule does, so a rate's throughput is the rate it kept.
async fn open_level(
    shared: &Shared,
    offsets: impl Iterator<Item = Duration> + Send + 'static,
    count: Option<u64>,
    window: Option<Duration>,
) -> (Vec<Sent>, (Instant, Instant)) {
    let start = Instant::now();
    let budget = Budget::new(start, count, window);
    let out = Arc::new(Mutex::new(Vec::new()));
    let tasks = Arc::new(Mutex::new(Vec::new()));
    let launch: super::pacing::Launch = {
        let (out, tasks, handle) = (out.clone(), tasks.clone(), tokio::runtime::Handle::current());
        let shared = Arc::new(shared.clone());
        Box::new(move |intended| {
            if !budget.take() {
                return false;
            }
            let (shared, out) = (shared.clone(), out.clone());
            tasks.lock().push(handle.spawn(async move { send_next(&shared, Some(intended), &out).await }));
            true
        })
    };
    paced(&shared.runner, start, offsets, launch).await;
    let end = Instant::now();
    let tasks = std::mem::take(&mut *tasks.lock());
    for task in tasks {
        let _ = task.await;
    }
    (sorted(&out), (start, end))
}

/// perf_analyzer's export for this kind.
pub fn export(config: &PaOpenAi, levels: &[Level], info: &RunInfo, payloads: &Payloads, streamed: bool) -> Value {
    let ns = |at: Instant| info.unix_ns(at) as u64;
    let experiments: Vec<Value> = levels
        .iter()
        .map(|level| {
            let requests: Vec<Value> = level
                .sent
                .iter()
                .map(|s| {
                    let outputs: Vec<Value> = s
                        .raw
                        .iter()
                        .map(|(_, data)| {
                            let response = if streamed { format!("data: {data}\n\n") } else { data.clone() };
                            json!({"response": response})
                        })
                        .collect();
                    json!({
                        "timestamp": ns(s.record.start),
                        "request_inputs": {"payload": payloads.bodies[s.payload]},
                        "response_timestamps": s.raw.iter().map(|(at, _)| ns(*at)).collect::<Vec<_>>(),
                        "response_outputs": outputs,
                    })
                })
                .collect();
            let experiment = match level.point {
                Point::Concurrency(n) => json!({"mode": "concurrency", "value": n}),
                Point::Rate(rate) => json!({"mode": "request_rate", "value": rate}),
            };
            json!({
                "experiment": experiment,
                "requests": requests,
                "window_boundaries": [ns(level.window.0), ns(level.window.1)],
            })
        })
        .collect();
    json!({"experiments": experiments, "version": "", "service_kind": "openai", "endpoint": config.endpoint})
}

/// perf_analyzer's name of a level at the head of its block ("Request concurrency: 2",
/// "Request Rate: 5 inference requests per seconds").
fn heading(point: Point) -> String {
    match point {
        Point::Concurrency(n) => format!("Request concurrency: {n}"),
        Point::Rate(rate) => format!("Request Rate: {} inference requests per seconds", format_g(rate)),
    }
}

/// Whole microseconds, as perf_analyzer prints them (its nanoseconds divided by 1000).
fn us(value: f64) -> u64 {
    value.max(0.0) as u64
}

/// perf_analyzer's "*** Measurement Settings ***" block, for what this run does: one window per
/// point (no stabilising trials), or exactly `--request-count` requests.
pub fn settings(config: &PaOpenAi) -> String {
    let mut out = String::from("*** Measurement Settings ***\n  Service Kind: OPENAI\n");
    let plural = |n: u64| if n > 1 { "s" } else { "" };
    if config.warmup > 0 {
        out += &format!("  Sending {} warmup request{}\n", config.warmup, plural(config.warmup));
    }
    match config.request_count {
        Some(n) => out += &format!("  Sending {n} benchmark request{}\n", plural(n)),
        None => out += &format!("  Measurement window: {} msec\n", config.measurement.as_millis()),
    }
    if let Some(limit) = config.limit {
        out += &format!("  Latency limit: {} msec\n", format_g(limit.latency_ms));
    }
    if let PaLoad::Rate { poisson, .. } = config.load {
        out += &format!("  Using {} distribution on request generation\n", if poisson { "poisson" } else { "uniform" });
    }
    out += "  Using asynchronous calls for inference\n";
    out
}

/// perf_analyzer's summary of a level. perfbench does not time a body's write apart from its
/// request: the HTTP time's send/recv is the receive alone.
pub fn summary(level: &Level) -> String {
    let s = level.stats();
    let [p50, p90, p95, p99] = s.percentiles.map(us);
    format!(
        "{}\n  Client: \n    Request count: {}\n    Throughput: {} infer/sec\n    \
         Avg latency: {} usec (standard deviation {} usec)\n    p50 latency: {p50} usec\n    \
         p90 latency: {p90} usec\n    p95 latency: {p95} usec\n    p99 latency: {p99} usec\n    \
         Avg HTTP time: {} usec (send/recv {} usec + response wait {} usec)\n",
        heading(level.point),
        s.count,
        format_g(s.throughput),
        us(s.avg),
        us(s.std),
        us(s.avg),
        us(s.recv),
        us(s.avg - s.recv),
    )
}

/// perf_analyzer's closing list ("Inferences/Second vs. Client Average Batch Latency").
pub fn closing(levels: &[Level]) -> String {
    let mut out = String::from("Inferences/Second vs. Client Average Batch Latency\n");
    for level in levels.iter().filter(|l| l.within_limit) {
        let s = level.stats();
        let name = match level.point {
            Point::Concurrency(n) => format!("Concurrency: {n}"),
            Point::Rate(rate) => format!("Request Rate: {}", format_g(rate)),
        };
        out += &format!("{name}, throughput: {} infer/sec, latency {} usec\n", format_g(s.throughput), us(s.avg));
    }
    out
}

/// perf_analyzer's `-f` CSV for this kind (no server columns), rows by throughput. perfbench
/// does not time a body's write apart from its request: Client Send is 0.
pub fn csv(levels: &[Level], verbose: bool) -> String {
    let rate = levels.first().is_some_and(|l| matches!(l.point, Point::Rate(_)));
    let mut out = String::from(if rate { "Request Rate," } else { "Concurrency," });
    out += "Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency";
    if verbose {
        out += ",Avg latency,request/response,response wait";
    }
    out.push('\n');
    let mut rows: Vec<(Point, Stats)> =
        levels.iter().filter(|l| l.within_limit).map(|l| (l.point, l.stats())).collect();
    rows.sort_by(|a, b| a.1.throughput.total_cmp(&b.1.throughput));
    for (point, s) in rows {
        let cell = |v: f64| us(v).to_string();
        let mut cells = vec![
            match point {
                Point::Concurrency(n) => n.to_string(),
                Point::Rate(rate) => format_g(rate),
            },
            format_g(s.throughput),
            "0".into(),
            cell(s.recv),
        ];
        cells.extend(s.percentiles.iter().map(|&p| cell(p)));
        if verbose {
            cells.extend([cell(s.avg), cell(s.recv), cell(s.avg - s.recv)]);
        }
        out += &cells.join(",");
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_name_their_answers() {
        assert_eq!(endpoint_type("v1/chat/completions"), EndpointType::Chat);
        assert_eq!(endpoint_type("v1/completions"), EndpointType::Completions);
    }

    /// A level whose one request took `latency_ms`.
    fn level_of(point: Point, latency_ms: f64) -> Level {
        let at = Instant::now();
        let mut record = Record::started(at, None);
        record.end = at + Duration::from_secs_f64(latency_ms / 1000.0);
        let sent = vec![Sent { record, payload: 0, raw: Vec::new() }];
        Level { point, sent, window: (at, at + Duration::from_secs(1)), within_limit: true }
    }

    /// The points a walk measures when a point of value v takes v ms, under `-l limit_ms`.
    fn walked(walk: Walk, limit_ms: f64) -> Vec<(f64, bool)> {
        let limit = Some(Limit { latency_ms: limit_ms, percentile: None });
        let mut levels = Vec::new();
        let measure = |v: f64| async move { level_of(Point::Rate(v), v) };
        futures::executor::block_on(walk_points(&walk, true, limit, &mut levels, measure));
        levels.iter().map(|l| (if let Point::Rate(v) = l.point { v } else { 0.0 }, l.within_limit)).collect()
    }

    #[test]
    fn ranges_are_walked_as_perf_analyzer_walks_them() {
        // Linear: up to the first point over the limit (whole ms, at the limit is over).
        let linear = Walk::Range { start: 2.0, end: Some(10.0), step: 2.0, binary: false };
        assert_eq!(walked(linear, 6.0), [(2.0, true), (4.0, true), (6.0, false)]);
        // No end: on until the limit.
        let open = Walk::Range { start: 1.0, end: None, step: 1.0, binary: false };
        assert_eq!(walked(open, 3.0).len(), 3);
        // Binary: the start, the end, then halves (whole numbers) while the gap is over a step.
        let binary = Walk::Range { start: 1.0, end: Some(16.0), step: 1.0, binary: true };
        let points: Vec<f64> = walked(binary, 6.0).into_iter().map(|(v, _)| v).collect();
        assert_eq!(points, [1.0, 16.0, 8.0, 4.0, 6.0, 5.0]);
        assert_eq!(walked(Walk::List(vec![3.0, 9.0, 1.0]), 5.0), [(3.0, true), (9.0, false)]);
    }

    #[test]
    fn intervals_cycle_from_the_first_gap() {
        let ms = Duration::from_millis;
        let got: Vec<Duration> = cycled(vec![ms(10), ms(30)]).take(4).collect();
        assert_eq!(got, [ms(10), ms(40), ms(50), ms(80)]);
    }

    #[test]
    fn levels_are_named_and_listed_as_perf_analyzer_names_them() {
        let at = Instant::now();
        let level =
            |point| Level { point, sent: Vec::new(), window: (at, at + Duration::from_secs(1)), within_limit: true };
        let levels = [level(Point::Rate(10.0)), level(Point::Rate(2.5))];
        assert!(summary(&levels[1]).starts_with("Request Rate: 2.5 inference requests per seconds\n  Client: \n"));
        assert_eq!(
            closing(&levels),
            "Inferences/Second vs. Client Average Batch Latency\nRequest Rate: 10, throughput: 0 infer/sec, latency 0 \
             usec\nRequest Rate: 2.5, throughput: 0 infer/sec, latency 0 usec\n"
        );
        let text = csv(&levels, false);
        assert!(text.starts_with("Request Rate,Inferences/Second,Client Send,Client Recv,p50 latency"), "{text}");
        assert_eq!(text.lines().count(), 3);
        assert!(csv(&[level(Point::Concurrency(2))], true).starts_with("Concurrency,"));
        assert!(summary(&level(Point::Concurrency(2))).starts_with("Request concurrency: 2\n"));
    }
}
