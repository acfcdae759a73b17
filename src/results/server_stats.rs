//! Server-side stage times: snapshots of the statistics extension taken at window boundaries, and
//! their differences (KSERVE_V2.md §9). perf_analyzer derives its server columns the same way.

use crate::proto::inference::{ModelStatistics, StatisticDuration};

/// A cumulative `{count, ns}` pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageTotal {
    pub count: u64,
    pub ns: u64,
}

impl StageTotal {
    fn of(d: Option<&StatisticDuration>) -> Self {
        d.map(|d| StageTotal { count: d.count, ns: d.ns }).unwrap_or_default()
    }
    fn plus(self, other: StageTotal) -> StageTotal {
        StageTotal { count: self.count + other.count, ns: self.ns + other.ns }
    }
    fn minus(self, earlier: StageTotal) -> StageTotal {
        StageTotal { count: self.count.saturating_sub(earlier.count), ns: self.ns.saturating_sub(earlier.ns) }
    }
    /// Average time per counted request, in µs (0 when nothing was counted).
    pub fn avg_us(self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.ns as f64 / self.count as f64 / 1000.0
        }
    }
}

/// The counters of one model version, cumulative (a snapshot) or over a span (a delta).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub inference_count: u64,
    pub execution_count: u64,
    pub success: StageTotal,
    pub fail: StageTotal,
    pub queue: StageTotal,
    pub compute_input: StageTotal,
    pub compute_infer: StageTotal,
    pub compute_output: StageTotal,
}

impl ServerStats {
    /// Picks the model's entry from a statistics answer. With an empty `version`, the
    /// numerically largest version wins, as perf_analyzer does. `None` if the model is absent.
    pub fn from_response(stats: &[ModelStatistics], model: &str, version: &str) -> Option<ServerStats> {
        let numeric = |s: &ModelStatistics| s.version.parse::<i64>().unwrap_or(-1);
        let entry = stats
            .iter()
            .filter(|s| s.name == model && (version.is_empty() || s.version == version))
            .max_by_key(|s| numeric(s))?;
        let i = entry.inference_stats.as_ref();
        Some(ServerStats {
            inference_count: entry.inference_count,
            execution_count: entry.execution_count,
            success: StageTotal::of(i.and_then(|i| i.success.as_ref())),
            fail: StageTotal::of(i.and_then(|i| i.fail.as_ref())),
            queue: StageTotal::of(i.and_then(|i| i.queue.as_ref())),
            compute_input: StageTotal::of(i.and_then(|i| i.compute_input.as_ref())),
            compute_infer: StageTotal::of(i.and_then(|i| i.compute_infer.as_ref())),
            compute_output: StageTotal::of(i.and_then(|i| i.compute_output.as_ref())),
        })
    }

    /// What happened between `earlier` and this snapshot. Saturates at 0 if the server restarted.
    pub fn since(&self, earlier: &ServerStats) -> ServerStats {
        ServerStats {
            inference_count: self.inference_count.saturating_sub(earlier.inference_count),
            execution_count: self.execution_count.saturating_sub(earlier.execution_count),
            success: self.success.minus(earlier.success),
            fail: self.fail.minus(earlier.fail),
            queue: self.queue.minus(earlier.queue),
            compute_input: self.compute_input.minus(earlier.compute_input),
            compute_infer: self.compute_infer.minus(earlier.compute_infer),
            compute_output: self.compute_output.minus(earlier.compute_output),
        }
    }

    /// Two consecutive deltas joined into one over both spans.
    pub fn plus(&self, other: &ServerStats) -> ServerStats {
        ServerStats {
            inference_count: self.inference_count + other.inference_count,
            execution_count: self.execution_count + other.execution_count,
            success: self.success.plus(other.success),
            fail: self.fail.plus(other.fail),
            queue: self.queue.plus(other.queue),
            compute_input: self.compute_input.plus(other.compute_input),
            compute_infer: self.compute_infer.plus(other.compute_infer),
            compute_output: self.compute_output.plus(other.compute_output),
        }
    }

    /// Average executed batch: Δinference_count / Δexecution_count (0 when nothing executed).
    pub fn avg_batch(&self) -> f64 {
        if self.execution_count == 0 {
            0.0
        } else {
            self.inference_count as f64 / self.execution_count as f64
        }
    }

    /// Average server time not spent queued or computing (perf_analyzer's "overhead"), in µs:
    /// success − queue − compute_input − compute_infer − compute_output, floored at 0.
    pub fn overhead_us(&self) -> f64 {
        let staged = self.queue.avg_us()
            + self.compute_input.avg_us()
            + self.compute_infer.avg_us()
            + self.compute_output.avg_us();
        (self.success.avg_us() - staged).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::InferStatistics;

    fn d(count: u64, ns: u64) -> Option<StatisticDuration> {
        Some(StatisticDuration { count, ns })
    }

    fn stats(version: &str, requests: u64, executions: u64, queue_ns: u64, infer_ns: u64) -> ModelStatistics {
        ModelStatistics {
            name: "m".into(),
            version: version.into(),
            inference_count: requests,
            execution_count: executions,
            inference_stats: Some(InferStatistics {
                success: d(requests, requests * (queue_ns + infer_ns) + requests * 1000),
                queue: d(requests, requests * queue_ns),
                compute_input: d(requests, 0),
                compute_infer: d(requests, requests * infer_ns),
                compute_output: d(requests, 0),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn deltas_give_per_request_stage_averages() {
        let before = ServerStats::from_response(&[stats("1", 10, 10, 500_000, 1_000_000)], "m", "").unwrap();
        let after_raw = ModelStatistics {
            inference_count: 110,
            execution_count: 35,
            inference_stats: Some(InferStatistics {
                success: d(110, 10 * 1_501_000 + 100 * 3_000_000),
                queue: d(110, 10 * 500_000 + 100 * 2_000_000),
                compute_input: d(110, 0),
                compute_infer: d(110, 10 * 1_000_000 + 100 * 900_000),
                compute_output: d(110, 0),
                ..Default::default()
            }),
            ..stats("1", 0, 0, 0, 0)
        };
        let after = ServerStats::from_response(&[after_raw], "m", "1").unwrap();
        let delta = after.since(&before);
        assert_eq!(delta.success.count, 100);
        assert_eq!(delta.queue.avg_us(), 2000.0);
        assert_eq!(delta.compute_infer.avg_us(), 900.0);
        assert_eq!(delta.avg_batch(), 100.0 / 25.0);
        assert_eq!(delta.overhead_us(), 100.0);
    }

    #[test]
    fn latest_version_is_picked_and_missing_models_are_none() {
        let all = [stats("2", 5, 5, 0, 0), stats("10", 7, 7, 0, 0), stats("1", 3, 3, 0, 0)];
        assert_eq!(ServerStats::from_response(&all, "m", "").unwrap().inference_count, 7);
        assert_eq!(ServerStats::from_response(&all, "m", "2").unwrap().inference_count, 5);
        assert!(ServerStats::from_response(&all, "other", "").is_none());
    }
}
