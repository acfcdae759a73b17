//! Whether a row is client-limited, and why: the load the client held against the load it was
//! asked for (a shard's part when sharded), how late it sent, and how much CPU it burned.

use super::row::{LoadPoint, ReportRow};

/// A row is client-limited when it achieved less than this share of the requested load.
pub const ACHIEVED_SHORTFALL_PCT: f64 = 5.0;
/// ... or when its open-loop send lag p99 exceeds both this and the mean gap between two
/// scheduled requests: a sender that falls a whole gap behind sends in bunches, not on schedule,
/// while a lag shorter than the gap (a busy box's scheduler) does not change the load.
pub const SEND_LAG_P99_LIMIT_US: f64 = 2000.0;
/// ... or when the process used at least this share of the cores it may run on.
pub const CPU_LIMIT_PCT: f64 = 90.0;

/// `achieved/requested unit` of a load point, e.g. `912.3/1000 req/s` or `3.96/4 in flight`.
pub fn achieved_text(load: LoadPoint, achieved: f64) -> String {
    match load {
        LoadPoint::Concurrency(c) => format!("{achieved:.2}/{c} in flight"),
        LoadPoint::RequestRate(rate) => format!("{achieved:.1}/{} req/s", super::format::format_g(rate)),
    }
}

impl ReportRow {
    /// The requested load: the rate (requests/s) or the concurrency.
    pub fn requested_load(&self) -> f64 {
        self.load.amount()
    }

    /// The load this process was asked to hold: the row's, or a shard's part of it.
    fn held_load(&self) -> LoadPoint {
        let held = self.client.held;
        match self.load {
            _ if held <= 0.0 => self.load,
            LoadPoint::Concurrency(_) => LoadPoint::Concurrency(held.round() as u64),
            LoadPoint::RequestRate(_) => LoadPoint::RequestRate(held),
        }
    }

    /// `achieved/requested unit`, e.g. `912.3/1000 req/s` or `3.96/4 in flight` (a shard's part
    /// as the requested load).
    pub fn achieved_text(&self) -> String {
        achieved_text(self.held_load(), self.client.achieved)
    }

    /// Why this row is client-limited; empty when it is not (or nothing was measured).
    pub fn client_limits(&self) -> Vec<String> {
        let c = &self.client;
        if !c.is_known() {
            return Vec::new();
        }
        let mut reasons = Vec::new();
        let requested = self.held_load().amount();
        if requested > 0.0 && c.achieved < requested * (1.0 - ACHIEVED_SHORTFALL_PCT / 100.0) {
            let short = (1.0 - c.achieved / requested) * 100.0;
            reasons.push(format!("achieved {} ({short:.0}% short)", self.achieved_text()));
        }
        if let LoadPoint::RequestRate(rate) = self.load {
            let limit_us = SEND_LAG_P99_LIMIT_US.max(if rate > 0.0 { 1e6 / rate } else { 0.0 });
            if c.send_lag_p99_us > limit_us {
                reasons.push(format!(
                    "send lag p50 {:.0} µs, p99 {:.0} µs (over {limit_us:.0} µs)",
                    c.send_lag_p50_us, c.send_lag_p99_us
                ));
            }
        }
        if c.cpu_pct >= CPU_LIMIT_PCT {
            let cores = if c.cores > 0 { format!("{} core(s)", c.cores) } else { "its cores".into() };
            reasons.push(format!("client CPU {:.0}% of {cores}", c.cpu_pct));
        }
        reasons
    }

    pub fn client_limited(&self) -> bool {
        !self.client_limits().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::ClientLoad;

    fn at(load: LoadPoint, client: ClientLoad) -> ReportRow {
        ReportRow { client, ..ReportRow::zeroed(load) }
    }

    #[test]
    fn each_limit_flags_a_row_and_a_comfortable_row_is_not_flagged() {
        let ok = ClientLoad {
            achieved: 990.0,
            send_lag_p50_us: 20.0,
            send_lag_p99_us: 300.0,
            cpu_pct: 30.0,
            cores: 2,
            held: 0.0,
            ..Default::default()
        };
        let rate = LoadPoint::RequestRate(1000.0);
        assert!(at(rate, ok).client_limits().is_empty());
        let short = at(rate, ClientLoad { achieved: 900.0, ..ok }).client_limits();
        assert_eq!(short, ["achieved 900.0/1000 req/s (10% short)"]);
        assert!(at(rate, ClientLoad { send_lag_p99_us: 5000.0, ..ok }).client_limits()[0]
            .starts_with("send lag p50 20 µs, p99 5000 µs"));
        // At 100 req/s requests are 10 ms apart: a 5 ms lag does not bunch them.
        let slow = LoadPoint::RequestRate(100.0);
        assert!(at(slow, ClientLoad { achieved: 99.0, send_lag_p99_us: 5000.0, ..ok }).client_limits().is_empty());
        assert_eq!(at(rate, ClientLoad { cpu_pct: 97.0, ..ok }).client_limits(), ["client CPU 97% of 2 core(s)"]);
        let held = at(LoadPoint::Concurrency(4), ClientLoad { achieved: 3.5, ..ok });
        assert_eq!(held.client_limits(), ["achieved 3.50/4 in flight (12% short)"]);
        assert!(at(rate, ClientLoad::default()).client_limits().is_empty(), "unknown is not judged");
        // A shard of two holds 4 of the row's 8 in flight, and 250 of its 500 req/s.
        let shard = ClientLoad { achieved: 3.98, held: 4.0, ..ok };
        assert!(at(LoadPoint::Concurrency(8), shard).client_limits().is_empty());
        let short = at(LoadPoint::Concurrency(8), ClientLoad { achieved: 3.5, ..shard }).client_limits();
        assert_eq!(short, ["achieved 3.50/4 in flight (12% short)"]);
        let half = ClientLoad { achieved: 249.0, held: 250.0, ..ok };
        assert!(at(LoadPoint::RequestRate(500.0), half).client_limits().is_empty());
    }
}
