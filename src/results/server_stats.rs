//! Server-side stage times: snapshots of the statistics extension taken at window boundaries, and
//! their differences (KSERVE_V2.md §9). perf_analyzer derives its server columns the same way.

use crate::proto::inference::{ModelStatistics, StatisticDuration};

/// A cumulative `{count, ns}` pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// The model's entry in a statistics answer. With an empty `version`, the numerically largest
/// version wins, as perf_analyzer does.
fn entry<'a>(stats: &'a [ModelStatistics], model: &str, version: &str) -> Option<&'a ModelStatistics> {
    let numeric = |s: &ModelStatistics| s.version.parse::<i64>().unwrap_or(-1);
    stats.iter().filter(|s| s.name == model && (version.is_empty() || s.version == version)).max_by_key(|s| numeric(s))
}

impl ServerStats {
    /// Picks the model's entry from a statistics answer ([`entry`]). `None` if the model is absent.
    pub fn from_response(stats: &[ModelStatistics], model: &str, version: &str) -> Option<ServerStats> {
        entry(stats, model, version).map(ServerStats::of)
    }

    fn of(entry: &ModelStatistics) -> ServerStats {
        let i = entry.inference_stats.as_ref();
        ServerStats {
            inference_count: entry.inference_count,
            execution_count: entry.execution_count,
            success: StageTotal::of(i.and_then(|i| i.success.as_ref())),
            fail: StageTotal::of(i.and_then(|i| i.fail.as_ref())),
            queue: StageTotal::of(i.and_then(|i| i.queue.as_ref())),
            compute_input: StageTotal::of(i.and_then(|i| i.compute_input.as_ref())),
            compute_infer: StageTotal::of(i.and_then(|i| i.compute_infer.as_ref())),
            compute_output: StageTotal::of(i.and_then(|i| i.compute_output.as_ref())),
        }
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

/// One model of an ensemble's tree, in perf_analyzer's order: a model's composing models follow
/// it one level deeper, sorted by (name, version) within each ensemble.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ComposingModel {
    pub name: String,
    /// As the step asks for it ("" = the latest) before a reading; the version read after.
    pub version: String,
    /// 1 for the target's own steps, 2 for a nested ensemble's, ...
    pub depth: usize,
    /// A nested ensemble: its stages are its composing models'.
    pub ensemble: bool,
}

/// A composing model's counters (a snapshot or a delta), as [`ServerStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ComposingStats {
    pub model: ComposingModel,
    pub stats: ServerStats,
}

/// An ensemble's queue and compute time as perf_analyzer's stdout block sums them: over the
/// leaf models below it, each model's own average (its Δns / its own Δcount, whole µs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnsembleTimes {
    pub queue_us: u64,
    pub compute_us: u64,
}

/// Whole µs per count, truncated as perf_analyzer does.
fn whole_us(ns: u64, count: u64) -> u64 {
    if count == 0 {
        0
    } else {
        ns / (count * 1000)
    }
}

impl ServerStats {
    /// Queue + compute per request of a leaf model, whole µs as perf_analyzer sums them: compute
    /// is (input + infer + output) ns over the compute count.
    fn ensemble_times(&self) -> EnsembleTimes {
        let compute_ns = self.compute_input.ns + self.compute_infer.ns + self.compute_output.ns;
        EnsembleTimes {
            queue_us: whole_us(self.queue.ns, self.queue.count),
            compute_us: whole_us(compute_ns, self.compute_input.count),
        }
    }

    /// Average request latency, whole µs (perf_analyzer's "Avg request latency").
    pub fn request_latency_us(&self) -> u64 {
        whole_us(self.success.ns, self.success.count)
    }

    /// perf_analyzer's "Avg request latency" line of a model that is no ensemble, in its whole-µs
    /// arithmetic: [latency, overhead, queue, compute input, compute infer, compute output].
    pub fn request_stages_us(&self) -> [u64; 6] {
        let latency = self.request_latency_us();
        let t = self.ensemble_times();
        [
            latency,
            latency.saturating_sub(t.queue_us + t.compute_us),
            t.queue_us,
            whole_us(self.compute_input.ns, self.compute_input.count),
            whole_us(self.compute_infer.ns, self.compute_infer.count),
            whole_us(self.compute_output.ns, self.compute_output.count),
        ]
    }
}

impl ComposingStats {
    /// Reads every model of `tree` from one statistics answer (all models). A model absent from
    /// the answer reads as zeros, so every reading has the tree's shape.
    pub fn read(all: &[ModelStatistics], tree: &[ComposingModel]) -> Vec<ComposingStats> {
        tree.iter()
            .map(|m| match entry(all, &m.name, &m.version) {
                Some(e) => ComposingStats {
                    model: ComposingModel { version: e.version.clone(), ..m.clone() },
                    stats: ServerStats::of(e),
                },
                None => ComposingStats { model: m.clone(), stats: ServerStats::default() },
            })
            .collect()
    }

    /// Element-wise `f` of two readings of the same tree; empty when their shapes differ (the
    /// ensemble changed between them).
    fn zip(
        a: &[ComposingStats],
        b: &[ComposingStats],
        f: impl Fn(&ServerStats, &ServerStats) -> ServerStats,
    ) -> Vec<ComposingStats> {
        if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x.model.name != y.model.name) {
            return Vec::new();
        }
        a.iter().zip(b).map(|(x, y)| ComposingStats { model: x.model.clone(), stats: f(&x.stats, &y.stats) }).collect()
    }

    /// What happened between `earlier` and `later` (see [`ServerStats::since`]).
    pub fn since(later: &[ComposingStats], earlier: &[ComposingStats]) -> Vec<ComposingStats> {
        Self::zip(later, earlier, ServerStats::since)
    }

    /// Two consecutive deltas joined (see [`ServerStats::plus`]).
    pub fn plus(a: &[ComposingStats], b: &[ComposingStats]) -> Vec<ComposingStats> {
        Self::zip(a, b, ServerStats::plus)
    }

    /// The models directly or indirectly under `tree[i]` (its subtree, without it).
    pub fn below(tree: &[ComposingStats], i: usize) -> &[ComposingStats] {
        let depth = tree[i].model.depth;
        let end = tree[i + 1..].iter().position(|c| c.model.depth <= depth).map_or(tree.len(), |n| i + 1 + n);
        &tree[i + 1..end]
    }

    /// Sums the leaf models of `models` (a whole tree or a subtree) as perf_analyzer does: a
    /// model used under two ensembles counts under each.
    pub fn ensemble_times(models: &[ComposingStats]) -> EnsembleTimes {
        models.iter().filter(|c| !c.model.ensemble).fold(EnsembleTimes::default(), |sum, c| {
            let t = c.stats.ensemble_times();
            EnsembleTimes { queue_us: sum.queue_us + t.queue_us, compute_us: sum.compute_us + t.compute_us }
        })
    }

    /// The leaf models, each (name, version) once: the models that did the work.
    pub fn leaves(models: &[ComposingStats]) -> Vec<&ComposingStats> {
        let mut seen = std::collections::HashSet::new();
        models.iter().filter(|c| !c.model.ensemble && seen.insert((&c.model.name, &c.model.version))).collect()
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
    fn named(name: &str, requests: u64, queue_ns: u64, infer_ns: u64) -> ModelStatistics {
        ModelStatistics { name: name.into(), ..stats("1", requests, requests, queue_ns, infer_ns) }
    }

    fn model(name: &str, depth: usize, ensemble: bool) -> ComposingModel {
        ComposingModel { name: name.into(), version: String::new(), depth, ensemble }
    }

    #[test]
    fn an_ensemble_sums_each_composing_models_own_averages() {
        // `a` runs twice per ensemble request: its average divides by its own count, not the
        // ensemble's, and both models' averages add up (perf_analyzer's stdout block).
        let tree = [model("a", 1, false), model("b", 1, false)];
        let earlier =
            [named("ens", 10, 0, 0), named("a", 20, 300_000, 1_000_000), named("b", 10, 2_000_000, 20_000_000)];
        let before = ComposingStats::read(&earlier, &tree);
        let after =
            [named("ens", 110, 0, 0), named("a", 220, 300_000, 1_000_000), named("b", 110, 2_000_000, 20_000_000)];
        let delta = ComposingStats::since(&ComposingStats::read(&after, &tree), &before);
        assert_eq!(delta.iter().map(|c| c.model.version.as_str()).collect::<Vec<_>>(), ["1", "1"]);
        assert_eq!(delta[0].stats.success.count, 200);
        // Per request of each: a 200 × (300 µs queue + 1000 µs infer); b 100 × (2 ms + 20 ms).
        assert_eq!(delta[0].stats.queue.ns, 200 * 300_000);
        assert_eq!(
            ComposingStats::ensemble_times(&delta),
            EnsembleTimes { queue_us: 300 + 2000, compute_us: 1000 + 20_000 }
        );
        assert_eq!(ComposingStats::leaves(&delta).len(), 2);
    }

    #[test]
    fn a_nested_ensemble_counts_its_leaves_and_each_use_of_a_model() {
        let tree = [model("inner", 1, true), model("a", 2, false), model("b", 2, false), model("a", 1, false)];
        let all =
            [named("inner", 10, 7_000_000, 7_000_000), named("a", 20, 100_000, 400_000), named("b", 10, 0, 5_000_000)];
        let read = ComposingStats::read(&all, &tree);
        // The nested ensemble's own counters are not summed: only leaves are.
        assert_eq!(
            ComposingStats::ensemble_times(&read),
            EnsembleTimes { queue_us: 200, compute_us: 400 + 5000 + 400 }
        );
        let inner = ComposingStats::below(&read, 0);
        assert_eq!(inner.iter().map(|c| c.model.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(ComposingStats::ensemble_times(inner), EnsembleTimes { queue_us: 100, compute_us: 5400 });
        assert!(ComposingStats::below(&read, 3).is_empty());
        // `a` is one model however often it is used.
        assert_eq!(ComposingStats::leaves(&read).iter().map(|c| c.model.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        // A model missing from the answer reads as zeros; a reading of another shape joins nothing.
        assert_eq!(ComposingStats::read(&all[..1], &tree)[1].stats, ServerStats::default());
        assert!(ComposingStats::plus(&read, &read[..2]).is_empty());
    }
}
