//! Per-model statistics, accumulated exactly as Triton's statistics extension defines them
//! (KSERVE_V2.md §9): request-level counts per request, compute times per batch execution.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::proto::inference::{InferBatchStatistics, InferStatistics, ModelStatistics, StatisticDuration};

/// Durations of one batch execution's three compute stages.
#[derive(Clone, Copy, Debug, Default)]
pub struct ComputeTimes {
    pub input: Duration,
    pub infer: Duration,
    pub output: Duration,
}

#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    count: u64,
    ns: u64,
}

impl Acc {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ns += d.as_nanos() as u64;
    }
    fn proto(self) -> Option<StatisticDuration> {
        Some(StatisticDuration { count: self.count, ns: self.ns })
    }
}

#[derive(Default)]
struct Inner {
    last_inference_ms: u64,
    inference_count: u64,
    execution_count: u64,
    success: Acc,
    fail: Acc,
    queue: Acc,
    compute_input: Acc,
    compute_infer: Acc,
    compute_output: Acc,
    batches: BTreeMap<u64, [Acc; 3]>,
}

/// Statistics of one model version. Cheap to update from many instance threads.
#[derive(Default)]
pub struct ModelStats {
    inner: Mutex<Inner>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl ModelStats {
    /// One request finished well. Like Triton, a request batched with others records the whole
    /// batch's compute times, so queue + compute adds up to that request's time in the server.
    pub fn record_success(&self, request: Duration, queue: Duration, compute: ComputeTimes) {
        let mut s = self.inner.lock();
        s.last_inference_ms = now_ms();
        s.success.add(request);
        s.queue.add(queue);
        s.compute_input.add(compute.input);
        s.compute_infer.add(compute.infer);
        s.compute_output.add(compute.output);
    }

    /// One request failed after it was admitted (a model error, or an output that did not fit).
    pub fn record_failure(&self, request: Duration) {
        let mut s = self.inner.lock();
        s.last_inference_ms = now_ms();
        s.fail.add(request);
    }

    /// One successful batch execution of `batch_size` inferences.
    pub fn record_execution(&self, batch_size: u64, compute: ComputeTimes) {
        self.record_padded_execution(batch_size, batch_size, compute);
    }

    /// One successful execution of `batch_size` items of which `inferences` are requests' (a
    /// sequence batch pads empty slots): as in Triton, `inference_count` counts the requests'
    /// items and `batch_stats` the executed batch size.
    pub fn record_padded_execution(&self, batch_size: u64, inferences: u64, compute: ComputeTimes) {
        let mut s = self.inner.lock();
        s.inference_count += inferences;
        s.execution_count += 1;
        let entry = s.batches.entry(batch_size).or_default();
        entry[0].add(compute.input);
        entry[1].add(compute.infer);
        entry[2].add(compute.output);
    }

    /// The compute times of every successful request so far, summed (an ensemble request's
    /// context adds up its steps').
    pub fn compute_totals(&self) -> ComputeTimes {
        let s = self.inner.lock();
        ComputeTimes {
            input: Duration::from_nanos(s.compute_input.ns),
            infer: Duration::from_nanos(s.compute_infer.ns),
            output: Duration::from_nanos(s.compute_output.ns),
        }
    }

    /// A snapshot in the protocol's shape. Every `inference_stats` member is present, as
    /// perf_analyzer requires.
    pub fn snapshot(&self, name: &str, version: &str) -> ModelStatistics {
        let s = self.inner.lock();
        ModelStatistics {
            name: name.to_string(),
            version: version.to_string(),
            last_inference: s.last_inference_ms,
            inference_count: s.inference_count,
            execution_count: s.execution_count,
            inference_stats: Some(InferStatistics {
                success: s.success.proto(),
                fail: s.fail.proto(),
                queue: s.queue.proto(),
                compute_input: s.compute_input.proto(),
                compute_infer: s.compute_infer.proto(),
                compute_output: s.compute_output.proto(),
                cache_hit: Acc::default().proto(),
                cache_miss: Acc::default().proto(),
            }),
            batch_stats: s
                .batches
                .iter()
                .map(|(&batch_size, [i, f, o])| InferBatchStatistics {
                    batch_size,
                    compute_input: i.proto(),
                    compute_infer: f.proto(),
                    compute_output: o.proto(),
                })
                .collect(),
            memory_usage: vec![],
            response_stats: Default::default(),
        }
    }
}

/// The statistics extension's JSON for a list of model statistics (`{"model_stats": [...]}`).
pub fn to_json(stats: &[ModelStatistics]) -> serde_json::Value {
    let list: Vec<serde_json::Value> =
        stats.iter().map(|m| crate::proto::to_json(m, "inference.ModelStatistics")).collect();
    serde_json::json!({ "model_stats": list })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn counts_requests_and_executions_like_triton() {
        let stats = ModelStats::default();
        let compute = ComputeTimes { input: ms(1), infer: ms(10), output: ms(1) };
        // Two batch-1 requests merged into one execution of batch 2.
        stats.record_success(ms(15), ms(2), compute);
        stats.record_success(ms(14), ms(1), compute);
        stats.record_execution(2, compute);
        stats.record_failure(ms(3));
        let snap = stats.snapshot("m", "1");
        assert_eq!(snap.inference_count, 2);
        assert_eq!(snap.execution_count, 1);
        let inf = snap.inference_stats.unwrap();
        assert_eq!(inf.success.unwrap().count, 2);
        assert_eq!(inf.fail.unwrap().count, 1);
        assert_eq!(inf.queue.unwrap().ns, 3_000_000);
        assert_eq!(inf.compute_infer.unwrap().ns, 20_000_000);
        assert_eq!(snap.batch_stats.len(), 1);
        assert_eq!(snap.batch_stats[0].batch_size, 2);
        assert_eq!(snap.batch_stats[0].compute_infer.unwrap().count, 1);
    }

    #[test]
    fn json_has_every_key_perf_analyzer_reads() {
        let stats = ModelStats::default();
        let j = to_json(&[stats.snapshot("m", "1")]);
        let m = &j["model_stats"][0];
        assert_eq!(m["version"], "1");
        assert!(m["inference_count"].is_u64());
        for k in
            ["success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"]
        {
            assert!(m["inference_stats"][k]["count"].is_u64(), "{k}");
            assert!(m["inference_stats"][k]["ns"].is_u64(), "{k}");
        }
        assert!(m["batch_stats"].is_array());
    }
}
