//! The one table of defaults. Every command line and scenario key that is not given takes its
//! value from here, by the kind of sweep: `profile` follows perf_analyzer 2.50; `offline` and
//! `online` follow the seeds' runs, except that their points end on confidence intervals rather
//! than perf_analyzer's three-window rule, so a row carries its own error bars in bounded time.
//! docs/profiling-triton.md ("One plan, one set of defaults") prints this table; a test keeps the two in step.

use super::{SweepKind, WindowKind};

/// The model a sweep profiles when no `-m` is given: `wide_deep` is a real compute model (not an
/// echo) yet cheap enough on a 2-core CPU that `offline --batch-sizes 1,8,16` takes seconds.
pub const DEFAULT_MODEL: &str = "wide_deep";

/// Bytes reserved per output of unknown size with shared memory (perf_analyzer's default).
pub const OUTPUT_SHM_BYTES: u64 = 100 * 1024;

/// One column of the table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Defaults {
    pub batch_sizes: &'static str,
    pub concurrency: &'static str,
    pub shared_memory: &'static str,
    pub window: WindowKind,
    /// What ends a point (`--stop-when`; see [`super::StopWhen`]).
    pub stop_when: &'static str,
    pub measurement_interval_ms: u64,
    pub measurement_request_count: u64,
    pub warmup_request_count: u64,
    pub stability_percentage: f64,
    pub max_trials: usize,
    pub protocol: &'static str,
    pub input_data: &'static str,
    pub request_distribution: &'static str,
    pub seed: u64,
    pub metrics_interval_ms: u64,
    /// Sequence models (perf_analyzer's): base length, its ± variation in percent, the first
    /// sequence id, and the sequences an open loop keeps alive.
    pub sequence_length: u64,
    pub sequence_length_variation: f64,
    pub sequence_id_start: u64,
    pub num_of_sequences: u64,
}

/// Shared by all three; each kind differs where its column below says so.
const COMMON: Defaults = Defaults {
    batch_sizes: "1",
    concurrency: "1",
    shared_memory: "none",
    window: WindowKind::TimeWindows,
    stop_when: "stable",
    measurement_interval_ms: 5000,
    measurement_request_count: 50,
    warmup_request_count: 0,
    stability_percentage: 10.0,
    max_trials: 10,
    protocol: "http",
    input_data: "random",
    request_distribution: "constant",
    seed: 1,
    metrics_interval_ms: 1000,
    sequence_length: 20,
    sequence_length_variation: 20.0,
    sequence_id_start: 1,
    num_of_sequences: 4,
};

/// `perfbench profile`: perf_analyzer's own defaults.
pub const PROFILE: Defaults = COMMON;

/// `perfbench offline` and a scenario's `[offline]`: the seeds' static-batch sweep. Intervals
/// within ±10% or 15 s per point: `offline --batch-sizes 1,8,16` gives p99s from ≥ 1,000
/// requests within a minute on a 2-core CPU.
///
/// Why ±10% and not tighter: it is perf_analyzer's own band (`-s 10`), and on a shared 2-core
/// box the same point's throughput drifts by 5-10% over tens of seconds (the bundled server
/// shares the cores with the load), so a ±5% interval is mostly out of reach in bounded time.
/// `--stop-when ci=5%,max=60s` asks for more.
pub const OFFLINE: Defaults = Defaults {
    batch_sizes: "1,8,16",
    shared_memory: "system",
    window: WindowKind::CountWindows,
    stop_when: "ci=10%,max=15s",
    warmup_request_count: 10,
    ..COMMON
};

/// `perfbench online` and a scenario's `[online]`: the seeds' concurrency sweep. Intervals
/// within ±10% (as for offline) or at most 8 s per point keeps `online --concurrency 8..256`
/// (32 points) within 5 minutes.
pub const ONLINE: Defaults = Defaults {
    concurrency: "1..8",
    window: WindowKind::CountWindows,
    stop_when: "ci=10%,max=8s",
    warmup_request_count: 10,
    ..COMMON
};

/// The defaults of a kind of sweep.
pub fn of(kind: SweepKind) -> &'static Defaults {
    match kind {
        SweepKind::Profile => &PROFILE,
        SweepKind::Offline => &OFFLINE,
        SweepKind::Online => &ONLINE,
    }
}

/// The table as docs/profiling-triton.md prints it (Markdown).
pub fn markdown_table() -> String {
    let kinds = [SweepKind::Profile, SweepKind::Offline, SweepKind::Online];
    type Cell = fn(&Defaults) -> String;
    let rows: [(&str, Cell); 19] = [
        ("batch sizes (`-b`, `--batch-sizes`)", |d| format!("`{}`", d.batch_sizes)),
        ("concurrency (`--concurrency-range`, `--concurrency`)", |d| format!("`{}`", d.concurrency)),
        ("`--shared-memory`", |d| d.shared_memory.to_string()),
        ("`--measurement-mode`", |d| d.window.to_string()),
        ("`--stop-when`", |d| format!("`{}`", d.stop_when)),
        ("`-p` (ms)", |d| d.measurement_interval_ms.to_string()),
        ("`--measurement-request-count`", |d| d.measurement_request_count.to_string()),
        ("`--warmup-request-count`", |d| d.warmup_request_count.to_string()),
        ("`-s` (%)", |d| d.stability_percentage.to_string()),
        ("`-r`", |d| d.max_trials.to_string()),
        ("`-i`", |d| d.protocol.to_string()),
        ("`--input-data`", |d| d.input_data.to_string()),
        ("`--request-distribution`", |d| d.request_distribution.to_string()),
        ("`--seed`", |d| d.seed.to_string()),
        ("`--metrics-interval` (ms)", |d| d.metrics_interval_ms.to_string()),
        ("`--sequence-length`", |d| d.sequence_length.to_string()),
        ("`--sequence-length-variation` (%)", |d| d.sequence_length_variation.to_string()),
        ("`--sequence-id-range`", |d| format!("`{}` (no end)", d.sequence_id_start)),
        ("`--num-of-sequences` (open loop)", |d| d.num_of_sequences.to_string()),
    ];
    let mut out = String::from("| setting | profile | offline | online |\n|---|---|---|---|\n");
    for (name, value) in rows {
        let cells: Vec<String> = kinds.iter().map(|k| value(of(*k))).collect();
        out.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
    }
    out.push_str(&format!(
        "| model (`-m`) | required | `{DEFAULT_MODEL}` | `{DEFAULT_MODEL}` |\n| `--output-shared-memory-size` (bytes) | {OUTPUT_SHM_BYTES} | {OUTPUT_SHM_BYTES} | {OUTPUT_SHM_BYTES} |\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_default_stop_rule_parses() {
        for kind in [super::SweepKind::Profile, super::SweepKind::Offline, super::SweepKind::Online] {
            super::of(kind).stop_when.parse::<super::super::StopWhen>().unwrap();
        }
    }

    #[test]
    fn the_guide_prints_this_table() {
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/profiling-triton.md")).unwrap();
        let table = super::markdown_table();
        assert!(
            page.contains(&table),
            "docs/profiling-triton.md's defaults table differs from src/plan/defaults.rs:\n{table}"
        );
    }
}
