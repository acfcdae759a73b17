//! `--slice-duration`: AIPerf 0.13's `profile_export_aiperf_timeslices.csv` (tidy rows:
//! `Timeslice,Start_NS,End_NS,Metric,Unit,Stat,Value`) and `.json` (`timeslices`: one object
//! per slice with `start_ns`, `end_ns`, `is_complete: false` on a cut-short last slice, and each
//! metric as in `profile_export_aiperf.json`). Requests fall in the slice of their start
//! (`measure::slices`); each slice is summed up as a whole run is, its throughputs over the
//! slice's own span.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::export::{self, RunInfo, STAT_KEYS};
use super::metrics::{summarize, Metric, MetricValue, Record, Slos, Summary};
use crate::measure::slices::{slice, Slice};

pub const CSV_FILE: &str = "profile_export_aiperf_timeslices.csv";
pub const JSON_FILE: &str = "profile_export_aiperf_timeslices.json";

/// The measured (not warm-up) records' slices; members index `records`.
pub fn slices_of(records: &[Record], run: &RunInfo, duration: Duration) -> Vec<Slice> {
    let measured: Vec<usize> = (0..records.len()).filter(|&i| !records[i].warmup).collect();
    let spans: Vec<(u64, u64)> =
        measured.iter().map(|&i| (run.unix_ns(records[i].start) as u64, run.unix_ns(records[i].end) as u64)).collect();
    let mut slices = slice(&spans, duration.as_nanos().max(1) as u64);
    for s in &mut slices {
        s.members = s.members.iter().map(|&k| measured[k]).collect();
    }
    slices
}

/// One slice summed up, its rates over the slice's span rather than its requests' own.
pub fn summarize_slice(records: &[Record], slice: &Slice, slos: Option<&Slos>, streaming: bool) -> Summary {
    let members: Vec<Record> = slice.members.iter().map(|&i| records[i].clone()).collect();
    let mut summary = summarize(&members, slos, streaming);
    let seconds = slice.seconds();
    let count = |tag: &str| match summary.get(tag) {
        Some(MetricValue::Single(v)) => *v,
        _ => 0.0,
    };
    let (requests, tokens, good) = (count("request_count"), count("total_osl"), count("good_request_count"));
    let per_second = |n: f64| if seconds > 0.0 { n / seconds } else { 0.0 };
    for metric in &mut summary.metrics {
        let value = match metric.tag {
            "request_throughput" => per_second(requests),
            "output_token_throughput" => per_second(tokens),
            "goodput" => per_second(good),
            "benchmark_duration" => seconds,
            _ => continue,
        };
        metric.value = MetricValue::Single(value);
    }
    summary
}

/// AIPerf's number format: integers plainly, other numbers with two decimals.
fn number(value: f64, integral: bool) -> String {
    if integral && value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value:.2}")
    }
}

fn sorted(summary: &Summary) -> Vec<&Metric> {
    let mut metrics: Vec<&Metric> = summary.metrics.iter().collect();
    metrics.sort_by_key(|m| m.tag);
    metrics
}

pub fn csv(slices: &[(Slice, Summary)]) -> String {
    let mut out = String::from("Timeslice,Start_NS,End_NS,Metric,Unit,Stat,Value\n");
    for (index, (slice, summary)) in slices.iter().enumerate() {
        for metric in sorted(summary) {
            let head = format!("{index},{},{},{},{}", slice.start_ns, slice.end_ns, metric.header, metric.unit);
            match &metric.value {
                MetricValue::Single(v) => out.push_str(&format!("{head},avg,{}\n", number(*v, true))),
                MetricValue::Distribution(stats) => {
                    for key in STAT_KEYS {
                        out.push_str(&format!("{head},{key},{}\n", number(export::stat(stats, key), false)));
                    }
                }
            }
        }
    }
    out
}

pub fn json(slices: &[(Slice, Summary)], run: &RunInfo) -> Value {
    let timeslices: Vec<Value> = slices
        .iter()
        .map(|(slice, summary)| {
            let mut object = Map::new();
            object.insert("start_ns".into(), slice.start_ns.into());
            object.insert("end_ns".into(), slice.end_ns.into());
            if !slice.complete {
                object.insert("is_complete".into(), false.into());
            }
            for metric in sorted(summary) {
                object.insert(metric.tag.into(), export::metric_json(metric));
            }
            Value::Object(object)
        })
        .collect();
    json!({"timeslices": timeslices, "input_config": run.input_config})
}

/// Writes both files into `dir`; returns the slices written.
pub fn write(
    dir: &Path,
    records: &[Record],
    run: &RunInfo,
    duration: Duration,
    slos: Option<&Slos>,
    streaming: bool,
) -> anyhow::Result<Vec<Slice>> {
    let slices: Vec<(Slice, Summary)> = slices_of(records, run, duration)
        .into_iter()
        .map(|s| {
            let summary = summarize_slice(records, &s, slos, streaming);
            (s, summary)
        })
        .collect();
    std::fs::write(dir.join(CSV_FILE), csv(&slices))?;
    std::fs::write(dir.join(JSON_FILE), serde_json::to_string_pretty(&json(&slices, run))? + "\n")?;
    Ok(slices.into_iter().map(|(s, _)| s).collect())
}

#[cfg(test)]
mod tests {
    use super::super::metrics::tests::record;
    use super::*;
    use std::time::Instant;

    #[test]
    fn slices_have_aiperfs_columns_and_their_counts_add_up() {
        let origin = Instant::now();
        let run = RunInfo { input_config: json!({"x": 1}), origin, origin_unix_ns: 1_000_000_000_000 };
        // Four requests starting at 0, 300, 1,100 and 2,500 ms, each 200 ms long; a warm-up one first.
        let mut records: Vec<Record> = [0, 0, 300, 1_100, 2_500]
            .iter()
            .map(|&at| record(origin, at, &[(at + 100, 1), (at + 200, 9)], 10))
            .collect();
        records[0].warmup = true;
        let slices = write_for_test(&records, &run, Duration::from_secs(1));
        assert_eq!(slices.len(), 3);
        let counts: Vec<f64> = slices
            .iter()
            .map(|(_, s)| match s.get("request_count") {
                Some(MetricValue::Single(n)) => *n,
                _ => 0.0,
            })
            .collect();
        assert_eq!(counts, vec![2.0, 1.0, 1.0], "the warm-up request is in no slice");
        let Some(MetricValue::Single(rate)) = slices[0].1.get("request_throughput") else { panic!() };
        assert_eq!(*rate, 2.0, "two requests over the slice's one second");
        let text = csv(&slices);
        assert!(text.starts_with("Timeslice,Start_NS,End_NS,Metric,Unit,Stat,Value\n"));
        assert!(text.contains("0,1000000000000,1001000000000,Request Count,requests,avg,2\n"), "{text}");
        assert!(text.contains(",Request Latency,ms,p99,"), "{text}");
        let json = json(&slices, &run);
        let list = json["timeslices"].as_array().unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[0]["request_latency"]["unit"], "ms");
        assert_eq!(list[2]["is_complete"], false, "the last slice ends with the run");
        assert!(list[0].get("is_complete").is_none());
        assert_eq!(json["input_config"]["x"], 1);
    }

    fn write_for_test(records: &[Record], run: &RunInfo, duration: Duration) -> Vec<(Slice, Summary)> {
        slices_of(records, run, duration)
            .into_iter()
            .map(|s| {
                let summary = summarize_slice(records, &s, None, true);
                (s, summary)
            })
            .collect()
    }
}
