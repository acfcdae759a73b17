//! A measured window (raw: what the client saw, how long, and the server's counters over the same
//! span) and the derivation of one sweep row from the windows it merges. The derivations follow
//! perf_analyzer exactly:
//!
//! - Inferences/Second = batch × successful requests / window length (merged windows: the sums of
//!   both);
//! - Client Send / Client Recv = average time spent serialising and writing the request / reading
//!   and decoding the response ([`RequestTiming`](crate::client::RequestTiming));
//! - Server Queue / Compute Input / Compute Infer / Compute Output = Δns / Δcount of that stage of
//!   the statistics extension over the span;
//! - Network+Server Send/Recv = avg latency − client send − client recv − queue − compute input −
//!   compute infer − compute output, floored at 0;
//! - server average batch = Δinference_count / Δexecution_count;
//! - "response wait" (verbose CSV) = average client exchange time − client send − client recv.
//!
//! Beyond perf_analyzer, each row gets 95% intervals of throughput, p50 and p99 from its windows
//! ([`super::interval`]), and is flagged overloaded when the server's queue time keeps growing
//! from window to window (an overloaded row is never stable).

use std::time::Duration;

use super::interval::{keeps_growing, ratio_interval, Quantiles};
use super::recorder::WindowRecorder;
use super::stability::{spread_pct, WindowFigures};
use crate::results::shard::{ShardWindow, WindowCounts};
use crate::results::{
    ClientLoad, ComposingStats, Interval, LoadPoint, PointDetail, PointResult, ReportRow, ServerStats,
};

/// One window, raw.
#[derive(Clone, Debug)]
pub struct Window {
    pub client: WindowRecorder,
    pub duration: Duration,
    /// Server counters over the window; `None` when the server has no statistics extension.
    pub server: Option<ServerStats>,
    /// An ensemble's composing models over the window (empty for any other model).
    pub composing: Vec<ComposingStats>,
    /// Wall-clock start and end, ns since the epoch (profile export `window_boundaries`).
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Window {
    /// Inferences per second: batch × successful requests / window length.
    pub fn throughput(&self, batch: u64) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs <= 0.0 {
            0.0
        } else {
            (batch * self.client.ok) as f64 / secs
        }
    }

    /// The latency stability and `-l` look at: the `percentile` one if given, else the average.
    pub fn latency_us(&self, percentile: Option<f64>) -> f64 {
        match percentile {
            Some(p) => self.client.percentile_us(p),
            None => self.client.avg_latency_us(),
        }
    }

    pub fn figures(&self, batch: u64, percentile: Option<f64>) -> WindowFigures {
        WindowFigures { throughput: self.throughput(batch), latency_us: self.latency_us(percentile) }
    }

    /// The window as a shard keeps it on disk (no per-request log).
    pub fn to_shard(&self) -> ShardWindow {
        let c = &self.client;
        let counts = WindowCounts {
            ok: c.ok,
            failed: c.failed,
            failures: c.failures,
            late: c.late,
            missed: c.missed,
            sequences: c.sequences,
            sequence_steps: c.sequence_steps,
            latency_ns_sum: c.latency_ns_sum,
            send_ns_sum: c.send_ns_sum,
            recv_ns_sum: c.recv_ns_sum,
            exchange_ns_sum: c.exchange_ns_sum,
            cpu_ns: c.cpu_ns,
            first_error: c.first_error.clone(),
            duration_ns: u64::try_from(self.duration.as_nanos()).unwrap_or(u64::MAX),
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            server: self.server,
            composing: self.composing.clone(),
        };
        ShardWindow { latency_us: c.latency_us.clone(), counts }
    }

    /// A window rebuilt from a shard's files.
    pub fn from_shard(w: ShardWindow) -> Window {
        let c = w.counts;
        let client = WindowRecorder {
            latency_us: w.latency_us,
            ok: c.ok,
            failed: c.failed,
            failures: c.failures,
            late: c.late,
            missed: c.missed,
            latency_ns_sum: c.latency_ns_sum,
            send_ns_sum: c.send_ns_sum,
            recv_ns_sum: c.recv_ns_sum,
            exchange_ns_sum: c.exchange_ns_sum,
            first_error: c.first_error,
            log: Vec::new(),
            sequences: c.sequences,
            sequence_steps: c.sequence_steps,
            // Each shard's CPU was its own machine's (kept in shard.json), and send lag is not
            // kept: a merged row reports neither, so it is never flagged client-limited by them.
            ..WindowRecorder::default()
        };
        Window {
            client,
            duration: Duration::from_nanos(c.duration_ns),
            server: c.server,
            composing: c.composing,
            start_ns: c.start_ns,
            end_ns: c.end_ns,
        }
    }

    /// Appends the next window: one longer window over both spans.
    pub fn absorb(&mut self, next: &Window) {
        self.client.merge(&next.client);
        self.duration += next.duration;
        self.server = match (self.server, next.server) {
            (Some(a), Some(b)) => Some(a.plus(&b)),
            _ => None,
        };
        self.composing = ComposingStats::plus(&self.composing, &next.composing);
        self.end_ns = next.end_ns;
    }
}

/// The 95% intervals of a set of windows: throughput (inferences/s), p50 and p99 (µs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Intervals {
    pub throughput: Interval,
    pub p50: Interval,
    pub p99: Interval,
    /// The point values the intervals are about.
    pub values: [f64; 3],
    /// Successful requests in all windows.
    pub requests: u64,
}

impl Intervals {
    pub fn of<'a>(windows: impl IntoIterator<Item = &'a Window>, batch: u64) -> Intervals {
        let windows: Vec<&Window> = windows.into_iter().collect();
        let units: Vec<(f64, f64)> =
            windows.iter().map(|w| ((batch * w.client.ok) as f64, w.duration.as_secs_f64())).collect();
        let quantiles = Quantiles::new(windows.iter().map(|w| &w.client.latency_us));
        let [p50, p99] = quantiles.intervals(&[0.5, 0.99])[..] else { unreachable!("two quantiles asked") };
        let (ok, secs) = units.iter().fold((0.0, 0.0), |(y, d), u| (y + u.0, d + u.1));
        let throughput = if secs > 0.0 { ok / secs } else { 0.0 };
        Intervals {
            throughput: ratio_interval(&units),
            p50,
            p99,
            values: [throughput, quantiles.quantile(0.5), quantiles.quantile(0.99)],
            requests: quantiles.count(),
        }
    }

    /// The widest of the three intervals, in ± percent of its value (∞ when one is unknown).
    pub fn widest_pct(&self) -> f64 {
        [self.throughput, self.p50, self.p99]
            .iter()
            .zip(self.values)
            .map(|(ci, v)| {
                let pct = ci.plus_minus_pct(v);
                if pct.is_nan() {
                    f64::INFINITY
                } else {
                    pct
                }
            })
            .fold(0.0, f64::max)
    }
}

/// Whether the server's average queue time grows from window to window (see
/// [`keeps_growing`]); false without server statistics.
pub fn overloaded<'a>(windows: impl IntoIterator<Item = &'a Window>) -> bool {
    let queue: Option<Vec<f64>> = windows.into_iter().map(|w| w.server.map(|s| s.queue.avg_us())).collect();
    queue.is_some_and(|q| keeps_growing(&q))
}

/// Most batches the interval rule keeps: at 32, neighbours merge into 16 batches of twice as
/// many windows, so checking a point costs the same however long it runs, and batches grow
/// longer (more independent) as it does.
pub const MAX_BATCHES: usize = 32;

/// The windows of a point under the interval rule, grouped into batches of equally many
/// consecutive windows (the last one may be partial).
#[derive(Debug, Default)]
pub struct Batches {
    done: Vec<Window>,
    open: Option<Window>,
    open_windows: usize,
    per_batch: usize,
    windows: usize,
}

impl Batches {
    /// Adds the next window; returns its recorder when it was absorbed into the open batch, for
    /// the next window to reuse.
    pub fn push(&mut self, window: Window) -> Option<WindowRecorder> {
        self.windows += 1;
        self.open_windows += 1;
        let spent = match &mut self.open {
            Some(open) => {
                open.absorb(&window);
                Some(window.client)
            }
            None => {
                self.open = Some(window);
                None
            }
        };
        if self.open_windows >= self.per_batch.max(1) {
            self.done.extend(self.open.take());
            self.open_windows = 0;
            if self.done.len() >= MAX_BATCHES {
                let done = std::mem::take(&mut self.done);
                let mut pairs = done.into_iter();
                while let Some(mut first) = pairs.next() {
                    if let Some(second) = pairs.next() {
                        first.absorb(&second);
                    }
                    self.done.push(first);
                }
                self.per_batch = self.per_batch.max(1) * 2;
            }
        }
        spent
    }

    /// Windows pushed so far.
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// The batches, the partial one last.
    pub fn iter(&self) -> impl Iterator<Item = &Window> + Clone {
        self.done.iter().chain(self.open.iter())
    }

    pub fn into_windows(self) -> Vec<Window> {
        self.done.into_iter().chain(self.open).collect()
    }
}

/// What the client achieved over the merged windows (see [`ClientLoad`]).
pub fn client_load(client: &WindowRecorder, load: LoadPoint, secs: f64) -> ClientLoad {
    if secs <= 0.0 {
        return ClientLoad { failures: client.failures, ..ClientLoad::default() };
    }
    let cores = crate::measure::cpu::available_cores();
    let cpu_pct = client.cpu_ns as f64 / 1e9 / secs / cores as f64 * 100.0;
    match load {
        LoadPoint::RequestRate(_) => ClientLoad {
            achieved: (client.ok + client.failed) as f64 / secs,
            send_lag_p50_us: client.send_lag_percentile_us(50.0),
            send_lag_p99_us: client.send_lag_percentile_us(99.0),
            cpu_pct,
            cores,
            held: 0.0,
            failures: client.failures,
        },
        // Little's law: requests in flight = completed requests/s × time each spent in flight.
        LoadPoint::Concurrency(_) => ClientLoad {
            achieved: client.ok as f64 / secs * client.avg_latency_us() / 1e6,
            send_lag_p50_us: 0.0,
            send_lag_p99_us: 0.0,
            cpu_pct,
            cores,
            held: 0.0,
            failures: client.failures,
        },
    }
}

/// Derives a row from the windows it merges (see the module docs for the formulas).
pub fn derive_point(
    windows: &[Window],
    batch: u64,
    load: LoadPoint,
    stable: bool,
    percentile: Option<f64>,
) -> PointResult {
    let mut client = WindowRecorder::default();
    let mut duration = Duration::ZERO;
    let mut server: Option<ServerStats> = windows.first().and_then(|w| w.server).map(|_| ServerStats::default());
    let mut composing = windows.first().map(|w| w.composing.clone()).unwrap_or_default();
    for (i, w) in windows.iter().enumerate() {
        if i > 0 {
            composing = ComposingStats::plus(&composing, &w.composing);
        }
        client.merge(&w.client);
        duration += w.duration;
        server = match (server, w.server) {
            (Some(total), Some(delta)) => Some(total.plus(&delta)),
            _ => None,
        };
    }
    let secs = duration.as_secs_f64();
    let throughput = if secs > 0.0 { (batch * client.ok) as f64 / secs } else { 0.0 };
    let s = server.unwrap_or_default();
    let (queue, input, infer, output) =
        (s.queue.avg_us(), s.compute_input.avg_us(), s.compute_infer.avg_us(), s.compute_output.avg_us());
    let (avg, send, recv) = (client.avg_latency_us(), client.avg_send_us(), client.avg_recv_us());
    let per_window = |f: &dyn Fn(&Window) -> f64| spread_pct(&windows.iter().map(f).collect::<Vec<_>>());
    let intervals = Intervals::of(windows, batch);
    let overloaded = overloaded(windows);
    let row = ReportRow {
        batch,
        load,
        throughput,
        client_send_us: send,
        network_us: (avg - send - recv - queue - input - infer - output).max(0.0),
        server_queue_us: queue,
        server_compute_input_us: input,
        server_compute_infer_us: infer,
        server_compute_output_us: output,
        client_recv_us: recv,
        p50_us: client.percentile_us(50.0),
        p90_us: client.percentile_us(90.0),
        p95_us: client.percentile_us(95.0),
        p99_us: client.percentile_us(99.0),
        avg_us: avg,
        requests: client.ok,
        failed: client.failed,
        late: client.late,
        missed: client.missed,
        sequences: client.sequences,
        avg_sequence_length: if client.sequences > 0 {
            client.sequence_steps as f64 / client.sequences as f64
        } else {
            0.0
        },
        stable: stable && !overloaded,
        throughput_spread_pct: per_window(&|w| w.throughput(batch)),
        p99_spread_pct: per_window(&|w| w.client.percentile_us(99.0)),
        avg_spread_pct: per_window(&|w| w.client.avg_latency_us()),
        server_avg_batch: s.avg_batch(),
        throughput_ci: intervals.throughput,
        p50_ci: intervals.p50,
        p99_ci: intervals.p99,
        overloaded,
        interrupted: false,
        client: client_load(&client, load, secs),
        tokens: None,
    };
    let threshold_latency_us = match percentile {
        Some(p) => client.percentile_us(p),
        None => avg,
    };
    let detail = PointDetail {
        duration,
        stdev_us: client.stdev_us(),
        exchange_us: client.avg_exchange_us(),
        server,
        composing,
        first_error: client.first_error.take(),
        trials: windows.len(),
        threshold_latency_us,
        window_boundaries_ns: Vec::new(),
        requests: std::mem::take(&mut client.log),
        gpu: None,
        windows: Default::default(),
        slot: None,
    };
    PointResult { row, detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::RequestTiming;
    use crate::results::server_stats::StageTotal;

    fn window(latency_us: u64, ok: u64, failed: u64, secs: f64) -> Window {
        queued_window(latency_us, ok, failed, secs, 200)
    }

    fn queued_window(latency_us: u64, ok: u64, failed: u64, secs: f64, queue_us: u64) -> Window {
        let mut client = WindowRecorder::default();
        let timing = RequestTiming {
            send: Duration::from_micros(20),
            recv: Duration::from_micros(10),
            total: Duration::from_micros(latency_us - 5),
        };
        for _ in 0..ok {
            client.record_ok(Duration::from_micros(latency_us), timing);
        }
        for _ in 0..failed {
            client.record_failed(crate::results::FailureKind::Timeout, &"injected");
        }
        let stage = |us: u64| StageTotal { count: ok, ns: ok * us * 1000 };
        let server = ServerStats {
            inference_count: ok * 2,
            execution_count: ok,
            success: stage(latency_us - 100),
            queue: stage(queue_us),
            compute_input: stage(50),
            compute_infer: stage(600),
            compute_output: stage(50),
            ..Default::default()
        };
        Window {
            client,
            duration: Duration::from_secs_f64(secs),
            server: Some(server),
            composing: Vec::new(),
            start_ns: 0,
            end_ns: 0,
        }
    }

    #[test]
    fn row_follows_perf_analyzer_derivations() {
        let windows = [window(1000, 100, 0, 1.0), window(1000, 100, 2, 1.0), window(1000, 100, 0, 1.0)];
        let r = derive_point(&windows, 2, LoadPoint::Concurrency(1), true, None).row;
        assert_eq!(r.throughput, 200.0, "batch 2 × 300 requests / 3 s");
        assert_eq!((r.client_send_us, r.client_recv_us), (20.0, 10.0));
        assert_eq!(
            (r.server_queue_us, r.server_compute_input_us, r.server_compute_infer_us, r.server_compute_output_us),
            (200.0, 50.0, 600.0, 50.0)
        );
        // 1000 − 20 − 10 − 200 − 50 − 600 − 50
        assert_eq!(r.network_us, 70.0);
        assert_eq!((r.requests, r.failed), (300, 2));
        assert_eq!(r.server_avg_batch, 2.0);
        assert_eq!(r.throughput_spread_pct, 0.0);
        assert!((r.p50_us - 1000.0).abs() <= 1.0);
    }

    #[test]
    fn network_time_is_floored_at_zero_and_spread_is_recorded() {
        let windows = [window(900, 100, 0, 1.0), window(900, 80, 0, 1.0), window(900, 120, 0, 1.0)];
        let result = derive_point(&windows, 1, LoadPoint::RequestRate(100.0), false, Some(99.0));
        // 900 − 30 − 900 of server stages < 0
        assert_eq!(result.row.network_us, 0.0);
        assert!((result.row.throughput_spread_pct - 40.0).abs() < 1e-9);
        assert!(!result.row.stable);
        assert_eq!(result.detail.exchange_us, 895.0);
        assert_eq!(result.detail.first_error, None);
    }

    #[test]
    fn rows_carry_intervals_and_requests() {
        let windows = [window(1000, 100, 0, 1.0), window(1000, 90, 0, 1.0), window(1000, 110, 0, 1.0)];
        let r = derive_point(&windows, 1, LoadPoint::Concurrency(1), true, None).row;
        assert_eq!(r.requests, 300);
        assert!(r.throughput_ci.low < 100.0 && r.throughput_ci.high > 100.0, "{:?}", r.throughput_ci);
        assert!(r.p50_ci.low <= r.p50_us && r.p50_us <= r.p50_ci.high, "{:?}", r.p50_ci);
        assert_eq!(r.p99_ci.high, f64::INFINITY, "300 requests do not bound a p99");
        assert_eq!(r.low_sample_names(), ["p99"]);
        assert!(r.stable && !r.overloaded);
    }

    #[test]
    fn a_growing_server_queue_flags_the_row_overloaded_and_unstable() {
        let windows: Vec<Window> = (0..4).map(|i| queued_window(5000, 100, 0, 1.0, 200 + 400 * i)).collect();
        let r = derive_point(&windows, 1, LoadPoint::RequestRate(100.0), true, None).row;
        assert!(r.overloaded && !r.stable);
    }

    #[test]
    fn batches_stay_few_and_equal() {
        let mut batches = Batches::default();
        let mut spent = 0;
        for _ in 0..70 {
            spent += usize::from(batches.push(window(1000, 10, 0, 0.1)).is_some());
        }
        assert_eq!(batches.windows(), 70);
        // A window absorbed into an open batch hands its recorder back; the 50 that opened a
        // batch (32 of 1, 16 of 2, 2 of 4) are kept.
        assert_eq!(spent, 20);
        // 32 → 16 batches of 2 at window 32; 32 again at window 64 → 16 of 4; then 6 more windows:
        // one full batch of 4 and a partial one of 2.
        let sizes: Vec<u64> = batches.iter().map(|w| w.client.ok).collect();
        assert_eq!(sizes.len(), 18, "{sizes:?}");
        assert!(sizes[..17].iter().all(|&n| n == 40) && sizes[17] == 20, "{sizes:?}");
        assert_eq!(batches.into_windows().iter().map(|w| w.client.ok).sum::<u64>(), 700);
    }

    #[test]
    fn absorbed_windows_add_up() {
        let mut a = window(1000, 100, 0, 1.0);
        a.absorb(&window(1000, 50, 1, 0.5));
        assert_eq!((a.client.ok, a.client.failed), (150, 1));
        assert_eq!(a.duration, Duration::from_secs_f64(1.5));
        assert_eq!(a.server.unwrap().execution_count, 150);
    }
}
