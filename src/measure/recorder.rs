//! Raw client-side observations of one measurement window: an HDR latency histogram plus exact
//! sums and counters. Each load worker owns one recorder; at a window boundary the recorders are
//! swapped out and merged, so no sample is ever sorted or kept beyond its window (except the
//! optional per-request log for `--profile-export-file`).

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::client::RequestTiming;
use crate::results::{FailureCounts, FailureKind, RequestRecord};

/// Largest latency the histogram tracks (one hour, in µs); longer ones saturate.
const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Three significant digits: percentiles are within 0.1% of the exact value.
const SIGFIG: u8 = 3;

#[derive(Clone, Debug)]
pub struct WindowRecorder {
    /// Latency of successful requests, in µs.
    pub latency_us: Histogram<u64>,
    pub ok: u64,
    pub failed: u64,
    /// `failed`, by kind.
    pub failures: FailureCounts,
    /// Open loop: sent later than scheduled (by more than the engine's slack).
    pub late: u64,
    /// Open loop: never sent, because the in-flight cap was reached at their due time.
    pub missed: u64,
    /// Exact sums over successful requests, for averages without histogram rounding.
    pub latency_ns_sum: u64,
    pub send_ns_sum: u64,
    pub recv_ns_sum: u64,
    /// Sum of the client-side exchange time (start of send to end of recv).
    pub exchange_ns_sum: u64,
    /// The first failure's message, for the summary line.
    pub first_error: Option<String>,
    pub log: Vec<RequestRecord>,
    /// Sequence models: sequences whose last request completed, and their requests in all.
    pub sequences: u64,
    pub sequence_steps: u64,
    /// Actual send time − intended send time, in µs (meaningful in open loop: a closed-loop
    /// request is intended when it is sent).
    pub send_lag_us: Histogram<u64>,
    /// The process's CPU time over the window (set on the merged window by the sweep).
    pub cpu_ns: u64,
}

/// Largest send lag the histogram tracks (a minute, in µs); two significant digits suffice for
/// a flag, and keep each worker's histogram small.
const MAX_SEND_LAG_US: u64 = 60_000_000;

fn send_lag_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_SEND_LAG_US, 2).expect("static histogram bounds")
}

impl Default for WindowRecorder {
    fn default() -> Self {
        let latency_us = Histogram::new_with_bounds(1, MAX_LATENCY_US, SIGFIG).expect("static histogram bounds");
        WindowRecorder::around(latency_us, send_lag_histogram(), Vec::new())
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl WindowRecorder {
    /// Zero counters around an (empty) histogram and log.
    fn around(latency_us: Histogram<u64>, send_lag_us: Histogram<u64>, log: Vec<RequestRecord>) -> Self {
        WindowRecorder {
            latency_us,
            ok: 0,
            failed: 0,
            failures: FailureCounts::default(),
            late: 0,
            missed: 0,
            latency_ns_sum: 0,
            send_ns_sum: 0,
            recv_ns_sum: 0,
            exchange_ns_sum: 0,
            first_error: None,
            log,
            sequences: 0,
            sequence_steps: 0,
            send_lag_us,
            cpu_ns: 0,
        }
    }

    /// Empties the recorder for the next window, keeping the memory of its histogram (about
    /// 188 KB) and log, so a window boundary allocates no histogram per worker.
    pub fn clear(&mut self) {
        // A one-digit auto-sized histogram holds the place for a moment (a few hundred bytes).
        let placeholder = Histogram::new(1).expect("one significant digit");
        let mut latency_us = std::mem::replace(&mut self.latency_us, placeholder);
        latency_us.reset();
        let mut send_lag_us = std::mem::replace(&mut self.send_lag_us, Histogram::new(1).expect("one digit"));
        send_lag_us.reset();
        let mut log = std::mem::take(&mut self.log);
        log.clear();
        *self = WindowRecorder::around(latency_us, send_lag_us, log);
    }

    pub fn record_ok(&mut self, latency: Duration, timing: RequestTiming) {
        self.ok += 1;
        // Sub-µs latencies record as 1 µs: the histogram's lowest value.
        self.latency_us.saturating_record((ns(latency) / 1000).max(1));
        self.latency_ns_sum = self.latency_ns_sum.saturating_add(ns(latency));
        self.send_ns_sum = self.send_ns_sum.saturating_add(ns(timing.send));
        self.recv_ns_sum = self.recv_ns_sum.saturating_add(ns(timing.recv));
        self.exchange_ns_sum = self.exchange_ns_sum.saturating_add(ns(timing.total));
    }

    /// How long after its intended time a request went out.
    pub fn record_send_lag(&mut self, lag: Duration) {
        self.send_lag_us.saturating_record(ns(lag) / 1000);
    }

    /// The send lag at `percentile`, in µs (0 with no requests).
    pub fn send_lag_percentile_us(&self, percentile: f64) -> f64 {
        if self.send_lag_us.is_empty() {
            0.0
        } else {
            self.send_lag_us.value_at_quantile(percentile / 100.0) as f64
        }
    }

    pub fn record_failed(&mut self, kind: FailureKind, error: &dyn std::fmt::Display) {
        self.failed += 1;
        self.failures.add(kind);
        if self.first_error.is_none() {
            self.first_error = Some(error.to_string());
        }
    }

    /// Adds another recorder's observations into this one.
    pub fn merge(&mut self, other: &WindowRecorder) {
        // Both histograms share bounds, so adding cannot fail.
        let _ = self.latency_us.add(&other.latency_us);
        let _ = self.send_lag_us.add(&other.send_lag_us);
        self.cpu_ns = self.cpu_ns.saturating_add(other.cpu_ns);
        self.ok += other.ok;
        self.failed += other.failed;
        self.failures.merge(&other.failures);
        self.late += other.late;
        self.missed += other.missed;
        self.sequences += other.sequences;
        self.sequence_steps += other.sequence_steps;
        self.latency_ns_sum = self.latency_ns_sum.saturating_add(other.latency_ns_sum);
        self.send_ns_sum = self.send_ns_sum.saturating_add(other.send_ns_sum);
        self.recv_ns_sum = self.recv_ns_sum.saturating_add(other.recv_ns_sum);
        self.exchange_ns_sum = self.exchange_ns_sum.saturating_add(other.exchange_ns_sum);
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        self.log.extend_from_slice(&other.log);
    }

    fn avg_us(&self, sum_ns: u64) -> f64 {
        if self.ok == 0 {
            0.0
        } else {
            sum_ns as f64 / self.ok as f64 / 1000.0
        }
    }

    pub fn avg_latency_us(&self) -> f64 {
        self.avg_us(self.latency_ns_sum)
    }
    pub fn avg_send_us(&self) -> f64 {
        self.avg_us(self.send_ns_sum)
    }
    pub fn avg_recv_us(&self) -> f64 {
        self.avg_us(self.recv_ns_sum)
    }
    pub fn avg_exchange_us(&self) -> f64 {
        self.avg_us(self.exchange_ns_sum)
    }

    /// Latency at `percentile` (0–100), in µs; 0 when nothing completed.
    pub fn percentile_us(&self, percentile: f64) -> f64 {
        if self.ok == 0 {
            0.0
        } else {
            self.latency_us.value_at_percentile(percentile) as f64
        }
    }

    pub fn stdev_us(&self) -> f64 {
        if self.ok == 0 {
            0.0
        } else {
            self.latency_us.stdev()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cleared_recorder_is_empty_and_keeps_recording() {
        let mut r = WindowRecorder::default();
        let timing = crate::client::RequestTiming::default();
        r.record_ok(std::time::Duration::from_millis(3), timing);
        r.record_failed(FailureKind::Other, &"boom");
        r.sequences = 2;
        r.clear();
        assert_eq!((r.ok, r.failed, r.sequences, r.latency_us.len()), (0, 0, 0, 0));
        assert!(r.first_error.is_none() && r.log.is_empty());
        r.record_ok(std::time::Duration::from_millis(5), timing);
        assert_eq!((r.ok, r.latency_us.len()), (1, 1));
    }

    use super::*;

    fn timing(send_us: u64, recv_us: u64, total_us: u64) -> RequestTiming {
        RequestTiming {
            send: Duration::from_micros(send_us),
            recv: Duration::from_micros(recv_us),
            total: Duration::from_micros(total_us),
        }
    }

    #[test]
    fn merged_recorders_give_exact_averages_and_close_percentiles() {
        let mut a = WindowRecorder::default();
        let mut b = WindowRecorder::default();
        for us in 1..=100u64 {
            let r = if us % 2 == 0 { &mut a } else { &mut b };
            r.record_ok(Duration::from_micros(us * 100), timing(10, 20, us * 100 - 5));
        }
        b.record_failed(FailureKind::Reset, &"boom");
        b.missed = 2;
        a.merge(&b);
        assert_eq!((a.ok, a.failed, a.missed), (100, 1, 2));
        assert_eq!(a.avg_latency_us(), 5050.0);
        assert_eq!(a.avg_send_us(), 10.0);
        assert_eq!(a.avg_recv_us(), 20.0);
        assert_eq!(a.avg_exchange_us(), 5045.0);
        let p50 = a.percentile_us(50.0);
        let p99 = a.percentile_us(99.0);
        assert!((p50 - 5000.0).abs() <= 5.0, "p50 {p50}");
        assert!((p99 - 9900.0).abs() <= 10.0, "p99 {p99}");
        assert_eq!(a.first_error.as_deref(), Some("boom"));
    }

    #[test]
    fn an_empty_recorder_reports_zeros() {
        let r = WindowRecorder::default();
        assert_eq!((r.avg_latency_us(), r.percentile_us(99.0), r.stdev_us()), (0.0, 0.0, 0.0));
    }
}
