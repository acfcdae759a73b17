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
    /// Whether the stability criterion was met (an unstable row is reported, flagged).
    pub stable: bool,
    /// Spread across the merged windows, in percent of the mean: (max − min) / mean × 100.
    pub throughput_spread_pct: f64,
    pub p99_spread_pct: f64,
    pub avg_spread_pct: f64,
    /// Server-side average executed batch (Δinference_count / Δexecution_count), 0 if unknown.
    pub server_avg_batch: f64,
}

#[cfg(test)]
impl ReportRow {
    /// A stable batch-1 row at `load` with every measurement zero: tests set what they check.
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
            stable: true,
            throughput_spread_pct: 0.0,
            p99_spread_pct: 0.0,
            avg_spread_pct: 0.0,
            server_avg_batch: 0.0,
        }
    }
}
