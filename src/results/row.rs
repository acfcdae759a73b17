//! The one derived row type of a sweep. The perf_analyzer CSV, report.csv, report.md, the plots
//! and the gate all read [`ReportRow`]; the measurement code is the only writer.

use serde::{Deserialize, Serialize};

/// How the load was shaped for this row.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum LoadPoint {
    /// Closed loop: this many requests in flight.
    Concurrency(u64),
    /// Open loop: this many requests per second.
    RequestRate(f64),
}

impl LoadPoint {
    /// How much load: the concurrency, or the rate in requests/s.
    pub fn amount(&self) -> f64 {
        match *self {
            LoadPoint::Concurrency(c) => c as f64,
            LoadPoint::RequestRate(rate) => rate,
        }
    }
}

/// A 95% confidence interval. Bounds are NaN when not measured (a CSV without interval columns,
/// a row of one window); an upper bound is +∞ when the samples cannot bound it (a tail percentile
/// of too few requests).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

impl Interval {
    pub const UNKNOWN: Interval = Interval { low: f64::NAN, high: f64::NAN };

    pub fn new(low: f64, high: f64) -> Interval {
        Interval { low, high }
    }

    /// Both bounds measured (the upper may be +∞).
    pub fn is_known(&self) -> bool {
        !self.low.is_nan() && !self.high.is_nan()
    }

    /// The larger distance from `value` to a bound: the "±" of an interval that need not be
    /// symmetric. NaN when unknown.
    pub fn plus_minus(&self, value: f64) -> f64 {
        if !self.is_known() {
            return f64::NAN;
        }
        (value - self.low).max(self.high - value).max(0.0)
    }

    /// [`plus_minus`](Self::plus_minus) in percent of `value` (NaN when unknown or `value` ≤ 0).
    pub fn plus_minus_pct(&self, value: f64) -> f64 {
        if value > 0.0 {
            self.plus_minus(value) / value * 100.0
        } else {
            f64::NAN
        }
    }
}

impl Default for Interval {
    fn default() -> Self {
        Interval::UNKNOWN
    }
}

/// Requests a row needs before its `percentile` counts as measured: ten beyond it (p50: 20,
/// p90: 100, p95: 200, p99: 1,000). With fewer, the percentile rests on a handful of the slowest
/// requests, and one scheduling hiccup moves it by tens of percent.
pub fn min_requests_for(percentile: f64) -> u64 {
    const TAIL_SAMPLES: f64 = 10.0;
    let beyond = (1.0 - percentile / 100.0).max(1e-6);
    (TAIL_SAMPLES / beyond).round() as u64
}

/// The percentiles every row reports, with their report.csv names.
pub const PERCENTILES: [(f64, &str); 4] = [(50.0, "p50"), (90.0, "p90"), (95.0, "p95"), (99.0, "p99")];

/// One measured sweep point. Latencies are in microseconds; throughput in inferences/second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportRow {
    pub batch: u64,
    pub load: LoadPoint,
    pub throughput: f64,
    pub client_send_us: f64,
    /// avg latency − client send − client recv − queue − compute, floored at 0.
    pub network_us: f64,
    pub server_queue_us: f64,
    pub server_compute_input_us: f64,
    pub server_compute_infer_us: f64,
    pub server_compute_output_us: f64,
    pub client_recv_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub avg_us: f64,
    /// Requests completed in the merged windows (successful ones).
    pub requests: u64,
    /// Requests that failed (server error or timeout) in the merged windows.
    pub failed: u64,
    /// Open loop: requests sent later than their schedule, and requests never sent.
    pub late: u64,
    pub missed: u64,
    /// Sequence models: sequences that ended in the merged windows, and their average number
    /// of requests (0 otherwise).
    #[serde(default)]
    pub sequences: u64,
    #[serde(default)]
    pub avg_sequence_length: f64,
    /// Whether the stability criterion was met (an unstable row is reported, flagged).
    pub stable: bool,
    /// Spread across the merged windows, in percent of the mean: (max − min) / mean × 100.
    pub throughput_spread_pct: f64,
    pub p99_spread_pct: f64,
    pub avg_spread_pct: f64,
    /// Server-side average executed batch (Δinference_count / Δexecution_count), 0 if unknown.
    pub server_avg_batch: f64,
    /// 95% confidence intervals of throughput, p50 and p99 (see `measure::interval`).
    pub throughput_ci: Interval,
    pub p50_ci: Interval,
    pub p99_ci: Interval,
    /// The server queue time kept growing window over window: the load exceeds what the server
    /// sustains, and the row's latencies depend on how long it was measured.
    pub overloaded: bool,
    /// The connection to the server was lost during this point (a restart mid-sweep): the row
    /// holds only what was measured before, failures included, and is never stable.
    #[serde(default)]
    pub interrupted: bool,
    /// What the client achieved: held load, send lag, CPU (zero when read from a CSV).
    #[serde(default)]
    pub client: super::ClientLoad,
    /// A generative sweep's token figures (`None` in a tensor sweep's row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenFigures>,
}

/// What a generative level measured of its tokens (AIPerf's definitions; latencies in µs). A
/// figure the run did not measure (an embeddings endpoint has no TTFT) is NaN.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenFigures {
    pub ttft_avg_us: f64,
    pub ttft_p50_us: f64,
    pub ttft_p99_us: f64,
    pub itl_avg_us: f64,
    pub itl_p50_us: f64,
    pub itl_p99_us: f64,
    /// Output tokens per second over the level, all requests together.
    pub output_tokens_per_s: f64,
    /// Median over requests of each one's output tokens per second.
    pub output_tokens_per_s_per_user_p50: f64,
}

impl TokenFigures {
    /// The figures in [`TOKEN_COLUMNS`](super::csv::TOKEN_COLUMNS) order.
    pub fn values(&self) -> [f64; 8] {
        [
            self.ttft_avg_us,
            self.ttft_p50_us,
            self.ttft_p99_us,
            self.itl_avg_us,
            self.itl_p50_us,
            self.itl_p99_us,
            self.output_tokens_per_s,
            self.output_tokens_per_s_per_user_p50,
        ]
    }

    /// The figures from [`values`](Self::values)' order.
    pub fn from_values(v: [f64; 8]) -> TokenFigures {
        TokenFigures {
            ttft_avg_us: v[0],
            ttft_p50_us: v[1],
            ttft_p99_us: v[2],
            itl_avg_us: v[3],
            itl_p50_us: v[4],
            itl_p99_us: v[5],
            output_tokens_per_s: v[6],
            output_tokens_per_s_per_user_p50: v[7],
        }
    }
}

impl ReportRow {
    /// Whether `percentile` of this row rests on fewer requests than [`min_requests_for`] asks.
    /// A row whose request count is unknown (0: a CSV without a `Requests` column) is not judged.
    pub fn low_sample(&self, percentile: f64) -> bool {
        self.requests > 0 && self.requests < min_requests_for(percentile)
    }

    /// The names of the row's low-sample percentiles, e.g. `["p95", "p99"]`.
    pub fn low_sample_names(&self) -> Vec<&'static str> {
        PERCENTILES.iter().filter(|(p, _)| self.low_sample(*p)).map(|(_, name)| *name).collect()
    }

    /// The latency that `-l` judges: the `--percentile` one when the row has it (p50, p90, p95,
    /// p99), the average without one, and 0 for a percentile the row does not hold, so that a
    /// sweep kept from disk goes on rather than stopping on a value it cannot see.
    pub fn judged_latency_us(&self, percentile: Option<f64>) -> f64 {
        let held = [self.p50_us, self.p90_us, self.p95_us, self.p99_us];
        match percentile {
            None => self.avg_us,
            Some(p) => PERCENTILES.iter().zip(held).find(|((q, _), _)| *q == p).map_or(0.0, |(_, v)| v),
        }
    }

    /// Whether this row measured `point` (request rates to a millionth).
    pub fn is_at(&self, batch: u64, point: LoadPoint) -> bool {
        self.batch == batch
            && match (self.load, point) {
                (LoadPoint::Concurrency(a), LoadPoint::Concurrency(b)) => a == b,
                (LoadPoint::RequestRate(a), LoadPoint::RequestRate(b)) => (a - b).abs() <= 1e-6 * a.abs().max(b.abs()),
                _ => false,
            }
    }
}

impl ReportRow {
    /// A stable batch-1 row at `load` with every measurement zero: tests, and the gate's rows of
    /// one composing model, set what they compare.
    pub(crate) fn zeroed(load: LoadPoint) -> ReportRow {
        ReportRow {
            batch: 1,
            load,
            throughput: 0.0,
            client_send_us: 0.0,
            network_us: 0.0,
            server_queue_us: 0.0,
            server_compute_input_us: 0.0,
            server_compute_infer_us: 0.0,
            server_compute_output_us: 0.0,
            client_recv_us: 0.0,
            p50_us: 0.0,
            p90_us: 0.0,
            p95_us: 0.0,
            p99_us: 0.0,
            avg_us: 0.0,
            requests: 0,
            failed: 0,
            late: 0,
            missed: 0,
            sequences: 0,
            avg_sequence_length: 0.0,
            stable: true,
            throughput_spread_pct: 0.0,
            p99_spread_pct: 0.0,
            avg_spread_pct: 0.0,
            server_avg_batch: 0.0,
            throughput_ci: Interval::UNKNOWN,
            p50_ci: Interval::UNKNOWN,
            p99_ci: Interval::UNKNOWN,
            overloaded: false,
            interrupted: false,
            client: super::ClientLoad::default(),
            tokens: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_need_ten_requests_beyond_them() {
        assert_eq!([50.0, 90.0, 95.0, 99.0].map(min_requests_for), [20, 100, 200, 1000]);
        let row = ReportRow { requests: 500, ..ReportRow::zeroed(LoadPoint::Concurrency(1)) };
        assert_eq!(row.low_sample_names(), ["p99"]);
        let unknown = ReportRow { requests: 0, ..row };
        assert!(unknown.low_sample_names().is_empty(), "an old CSV's rows are not judged");
    }

    #[test]
    fn plus_minus_is_the_wider_side() {
        let ci = Interval::new(90.0, 130.0);
        assert_eq!(ci.plus_minus(100.0), 30.0);
        assert_eq!(ci.plus_minus_pct(100.0), 30.0);
        assert!(Interval::UNKNOWN.plus_minus(1.0).is_nan());
        assert_eq!(Interval::new(1.0, f64::INFINITY).plus_minus(2.0), f64::INFINITY);
    }
}
