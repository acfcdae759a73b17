//! AIPerf's output files, with its names and columns, so tools that read AIPerf's artifacts read
//! ours: `profile_export_aiperf.csv` (per-request metrics with `avg,min,max,sum,p1..p99,std`,
//! then run-level metrics as `Metric,Value`), `profile_export_aiperf.json` (one object per
//! metric tag, with `unit` and its statistics) and `profile_export.jsonl` (one line per request:
//! `metadata`, `metrics` as `{value, unit}`, `error`).

use std::io::Write;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{json, Map, Value};

use super::metrics::{display_value, Metric, MetricValue, Record, Stats, Summary};

pub const CSV_FILE: &str = "profile_export_aiperf.csv";
pub const JSON_FILE: &str = "profile_export_aiperf.json";
pub const JSONL_FILE: &str = "profile_export.jsonl";
/// A level's records, whole ([`write_records`]): what `run --resume` summarizes again and
/// `perfbench merge` joins across shards.
pub const RECORDS_FILE: &str = "records.json";

/// One request as [`RECORDS_FILE`] keeps it: its instants as Unix ns, so the shards of one run,
/// on machines whose clocks agree, line up when merged.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredRecord {
    index: usize,
    #[serde(default)]
    session: usize,
    conversation: usize,
    turn: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    branch: Option<String>,
    start_ns: u128,
    launched_ns: u128,
    intended_ns: Option<u128>,
    /// (arrival, tokens) of each content response.
    chunks: Vec<(u128, u32)>,
    end_ns: u128,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reasoning_tokens: Option<u64>,
    /// Which of `chunks` were reasoning events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    reasoning_chunks: Vec<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cached_tokens: Option<u64>,
    token_source: Option<super::metrics::TokenSource>,
    error: Option<(super::metrics::ErrorKind, String)>,
    request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    warmup: bool,
    handling_lag_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server: Option<super::metrics::ServerSpan>,
}

/// What a level keeps: its records and what the client measured of itself.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredLevel {
    client: super::client_limit::ClientLoad,
    records: Vec<StoredRecord>,
}

/// Writes `records` and the client's figures to `dir`/[`RECORDS_FILE`].
pub fn write_records(
    dir: &Path,
    records: &[Record],
    client: &super::client_limit::ClientLoad,
    run: &RunInfo,
) -> anyhow::Result<()> {
    let ns = |at| run.unix_ns(at);
    let stored = StoredLevel {
        client: *client,
        records: records
            .iter()
            .map(|r| StoredRecord {
                index: r.index,
                session: r.session,
                conversation: r.conversation,
                turn: r.turn,
                branch: r.branch.clone(),
                start_ns: ns(r.start),
                launched_ns: ns(r.launched),
                intended_ns: r.intended.map(ns),
                chunks: r.chunks.iter().map(|c| (ns(c.at), c.tokens)).collect(),
                end_ns: ns(r.end),
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                reasoning_tokens: r.reasoning_tokens,
                reasoning_chunks: r.chunks.iter().enumerate().filter(|(_, c)| c.reasoning).map(|(i, _)| i).collect(),
                cached_tokens: r.cached_tokens,
                token_source: r.token_source,
                error: r.error.clone(),
                request_id: r.request_id.clone(),
                model: r.model.clone(),
                warmup: r.warmup,
                handling_lag_ns: r.handling_lag.as_nanos() as u64,
                server: r.server,
            })
            .collect(),
    };
    std::fs::write(dir.join(RECORDS_FILE), serde_json::to_vec(&stored)?)
        .with_context(|| format!("cannot write {}", dir.join(RECORDS_FILE).display()))
}

/// Reads `dir`/[`RECORDS_FILE`] back, its instants placed by `run`'s clock pair.
pub fn read_records(dir: &Path, run: &RunInfo) -> anyhow::Result<(Vec<Record>, super::client_limit::ClientLoad)> {
    let path = dir.join(RECORDS_FILE);
    let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let stored: StoredLevel = serde_json::from_slice(&text).with_context(|| format!("{}", path.display()))?;
    let at = |ns: u128| run.instant(ns);
    let records = stored
        .records
        .into_iter()
        .map(|r| {
            let mut chunks: Vec<super::metrics::Chunk> = r
                .chunks
                .into_iter()
                .map(|(ns, tokens)| super::metrics::Chunk { at: at(ns), tokens, reasoning: false })
                .collect();
            for i in r.reasoning_chunks {
                if let Some(chunk) = chunks.get_mut(i) {
                    chunk.reasoning = true;
                }
            }
            Record {
                index: r.index,
                session: r.session,
                conversation: r.conversation,
                turn: r.turn,
                branch: r.branch,
                start: at(r.start_ns),
                launched: at(r.launched_ns),
                intended: r.intended_ns.map(at),
                chunks,
                end: at(r.end_ns),
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                reasoning_tokens: r.reasoning_tokens,
                cached_tokens: r.cached_tokens,
                token_source: r.token_source,
                error: r.error,
                request_id: r.request_id,
                model: r.model,
                warmup: r.warmup,
                handling_lag: std::time::Duration::from_nanos(r.handling_lag_ns),
                server: r.server,
            }
        })
        .collect();
    Ok((records, stored.client))
}

/// AIPerf's statistic columns, in its order.
pub const STAT_KEYS: [&str; 14] =
    ["avg", "min", "max", "sum", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "std"];

pub fn stat(stats: &Stats, key: &str) -> f64 {
    match key {
        "avg" => stats.avg,
        "min" => stats.min,
        "max" => stats.max,
        "sum" => stats.sum,
        "p1" => stats.p1,
        "p5" => stats.p5,
        "p10" => stats.p10,
        "p25" => stats.p25,
        "p50" => stats.p50,
        "p75" => stats.p75,
        "p90" => stats.p90,
        "p95" => stats.p95,
        "p99" => stats.p99,
        "std" => stats.std,
        _ => unreachable!("a statistic of STAT_KEYS"),
    }
}

/// `Header (unit)`, as AIPerf names a CSV row (no unit for counts of requests).
fn row_name(header: &str, unit: &str) -> String {
    if unit.is_empty() || unit == "requests" || unit == "count" {
        header.to_string()
    } else {
        format!("{header} ({unit})")
    }
}

pub fn csv(summary: &Summary) -> String {
    let mut out = String::new();
    let mut distributions: Vec<_> = summary
        .metrics
        .iter()
        .filter_map(|m| match &m.value {
            MetricValue::Distribution(s) => Some((m, s)),
            MetricValue::Single(_) => None,
        })
        .collect();
    distributions.sort_by_key(|(m, _)| m.tag);
    let mut singles: Vec<_> = summary
        .metrics
        .iter()
        .filter_map(|m| match m.value {
            MetricValue::Single(v) => Some((m, v)),
            MetricValue::Distribution(_) => None,
        })
        .collect();
    singles.sort_by_key(|(m, _)| m.tag);
    if !distributions.is_empty() {
        out.push_str(&format!("Metric,{}\n", STAT_KEYS.join(",")));
        for (metric, stats) in distributions {
            out.push_str(&quote(&row_name(metric.header, metric.unit)));
            for key in STAT_KEYS {
                out.push_str(&format!(",{:.2}", stat(stats, key)));
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str("Metric,Value\n");
    for (metric, value) in singles {
        out.push_str(&format!("{},{value:.2}\n", quote(&row_name(metric.header, metric.unit))));
    }
    out
}

fn quote(cell: &str) -> String {
    if cell.contains([',', '"', '\n']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell.to_string()
    }
}

/// The run's settings as the JSON's `input_config` and the records' time base.
pub struct RunInfo {
    pub input_config: Value,
    /// The wall-clock time of `origin`, to write instants as Unix ns.
    pub origin: Instant,
    pub origin_unix_ns: u128,
}

impl RunInfo {
    pub fn now(input_config: Value) -> RunInfo {
        let origin_unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        RunInfo { input_config, origin: Instant::now(), origin_unix_ns }
    }

    pub fn unix_ns(&self, at: Instant) -> u128 {
        match at.checked_duration_since(self.origin) {
            Some(after) => self.origin_unix_ns + after.as_nanos(),
            None => self.origin_unix_ns - self.origin.duration_since(at).as_nanos(),
        }
    }

    /// The instant of Unix time `ns` (the inverse of [`unix_ns`](Self::unix_ns)).
    pub fn instant(&self, ns: u128) -> Instant {
        use std::time::Duration;
        if ns >= self.origin_unix_ns {
            self.origin + Duration::from_nanos((ns - self.origin_unix_ns) as u64)
        } else {
            let before = Duration::from_nanos((self.origin_unix_ns - ns) as u64);
            self.origin.checked_sub(before).unwrap_or(self.origin)
        }
    }
}

pub fn json(summary: &Summary, run: &RunInfo, start: Instant, end: Instant) -> Value {
    let mut out = Map::new();
    out.insert("schema_version".into(), "1.4".into());
    out.insert("perfbench_version".into(), env!("CARGO_PKG_VERSION").into());
    out.insert("input_config".into(), run.input_config.clone());
    for metric in &summary.metrics {
        out.insert(metric.tag.into(), metric_json(metric));
    }
    let errors: Vec<Value> =
        summary.errors.iter().map(|(kind, count)| json!({"error_details": {"type": kind}, "count": count})).collect();
    out.insert("error_summary".into(), errors.into());
    let time = |at: Instant| chrono::DateTime::from_timestamp_nanos(run.unix_ns(at) as i64).to_rfc3339();
    out.insert("start_time".into(), time(start).into());
    out.insert("end_time".into(), time(end).into());
    out.insert("was_cancelled".into(), false.into());
    Value::Object(out)
}

/// One metric as the JSON files hold it: its unit and statistics (`avg` alone for a run-level one).
pub fn metric_json(metric: &Metric) -> Value {
    match &metric.value {
        MetricValue::Distribution(stats) => {
            let mut v = serde_json::to_value(stats).expect("plain numbers");
            v["unit"] = metric.unit.into();
            v
        }
        MetricValue::Single(avg) => json!({"unit": metric.unit, "avg": avg}),
    }
}

/// One line of `profile_export.jsonl`.
pub fn record_line(record: &Record, run: &RunInfo) -> Value {
    let mut metrics = Map::new();
    for (tag, unit) in [
        ("time_to_first_token", "ms"),
        ("request_latency", "ms"),
        ("inter_token_latency", "ms"),
        ("output_token_throughput_per_user", "tokens/sec/user"),
        ("output_sequence_length", "tokens"),
        ("input_sequence_length", "tokens"),
        ("reasoning_token_count", "tokens"),
        ("output_token_count", "tokens"),
        ("reasoning_inter_token_latency", "ms"),
        ("output_inter_token_latency", "ms"),
        ("usage_prompt_cache_read_tokens", "tokens"),
    ] {
        if let Some(value) = display_value(record, tag) {
            metrics.insert(tag.into(), json!({"value": value, "unit": unit}));
        }
    }
    // A reasoning answer's first answer token (the same instant as TTFT for any other).
    if record.reasoned() {
        if let Some(value) = display_value(record, "time_to_first_output_token") {
            metrics.insert("time_to_first_output_token".into(), json!({"value": value, "unit": "ms"}));
        }
    }
    for (tag, value) in super::span_join::metrics(record) {
        metrics.insert(tag.into(), json!({"value": value, "unit": "ms"}));
    }
    let icl: Vec<f64> = record.inter_chunk().map(|ns| ns / 1e6).collect();
    if !icl.is_empty() {
        metrics.insert("inter_chunk_latency".into(), json!({"value": icl, "unit": "ms"}));
    }
    let error = record.error.as_ref().map(|(kind, message)| {
        let code = match kind {
            super::metrics::ErrorKind::Status(code) => json!(code),
            _ => Value::Null,
        };
        json!({"code": code, "type": kind.to_string(), "message": message})
    });
    let mut line = json!({
        "metadata": {
            // AIPerf's: the session's number in the run; its conversation of the inputs.
            "session_num": record.session,
            "x_request_id": record.request_id,
            // A graph's request names its session, as AIPerf's DAG records do.
            "conversation_id": record.branch.clone().unwrap_or_else(|| record.conversation.to_string()),
            "turn_index": record.turn,
            "request_start_ns": run.unix_ns(record.start) as u64,
            "request_end_ns": run.unix_ns(record.end) as u64,
            "send_lag_ns": record.send_lag().as_nanos() as u64,
            "token_source": record.token_source,
            "benchmark_phase": if record.warmup { "warmup" } else { "profiling" },
        },
        "metrics": metrics,
        "error": error,
    });
    // A mix's records name their model (AIPerf's `model_name`); a one-model run's stay as they were.
    if let Some(model) = &record.model {
        line["metadata"]["model_name"] = json!(model);
    }
    line
}

/// Writes the three files into `dir`.
pub fn write_all(dir: &Path, summary: &Summary, records: &[Record], run: &RunInfo) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let start = records.iter().map(|r| r.start).min().unwrap_or(run.origin);
    let end = records.iter().map(|r| r.end).max().unwrap_or(run.origin);
    std::fs::write(dir.join(CSV_FILE), csv(summary))?;
    let json = serde_json::to_string_pretty(&json(summary, run, start, end))?;
    std::fs::write(dir.join(JSON_FILE), json + "\n")?;
    let mut lines = std::io::BufWriter::new(std::fs::File::create(dir.join(JSONL_FILE))?);
    for record in records.iter().filter(|r| !r.warmup) {
        serde_json::to_writer(&mut lines, &record_line(record, run))?;
        lines.write_all(b"\n")?;
    }
    lines.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::metrics::{summarize, tests::record};
    use super::*;

    #[test]
    fn csv_has_aiperfs_two_sections_and_names() {
        let t0 = Instant::now();
        let records = vec![record(t0, 0, &[(10, 1), (20, 1)], 2), record(t0, 0, &[(20, 1), (40, 1)], 2)];
        let text = csv(&summarize(&records, None, true));
        let mut sections = text.split("\n\n");
        let per_request = sections.next().unwrap();
        let header = per_request.lines().next().unwrap();
        assert_eq!(header, "Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std");
        let ttft = per_request.lines().find(|l| l.starts_with("Time to First Token (ms),")).unwrap();
        assert!(ttft.starts_with("Time to First Token (ms),15.00,10.00,20.00,30.00,"), "{ttft}");
        assert!(per_request.contains("\nOutput Token Throughput Per User (tokens/sec/user),"));
        let system = sections.next().unwrap();
        assert!(system.starts_with("Metric,Value\n"));
        assert!(system.contains("\nRequest Count,2.00\n"), "{system}");
        assert!(system.contains("\nOutput Token Throughput (tokens/sec),100.00\n"), "{system}");
    }

    #[test]
    fn a_reasoning_answer_has_aiperfs_reasoning_names_in_every_file_and_keeps_its_phases() {
        use super::super::metrics::tests::reasoning_record;
        let t0 = Instant::now();
        let records = vec![reasoning_record(t0, &[10, 12, 14], &[20, 25, 30], 3)];
        let summary = summarize(&records, None, true);
        let text = csv(&summary);
        assert!(text.contains("\nTime to First Output Token (ms),20.00,"), "{text}");
        assert!(text.contains("\nReasoning Token Count (tokens),3.00,"), "{text}");
        assert!(text.contains("\nOutput Inter Token Latency (ms),5.00,"), "{text}");
        assert!(text.contains("\nTotal Reasoning Tokens (tokens),3.00\n"), "{text}");
        let run = RunInfo::now(json!({}));
        let whole = json(&summary, &run, t0, t0);
        assert_eq!(whole["time_to_first_output_token"]["avg"], json!(20.0));
        assert_eq!(whole["reasoning_token_count"]["unit"], "tokens");
        let line = record_line(&records[0], &run);
        assert_eq!(line["metrics"]["time_to_first_output_token"], json!({"value": 20.0, "unit": "ms"}));
        assert_eq!(line["metrics"]["reasoning_inter_token_latency"], json!({"value": 2.0, "unit": "ms"}));
        assert_eq!(line["metrics"]["output_token_count"]["value"], json!(3.0));
        // records.json keeps which events were reasoning, so a resumed run sums the same.
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), &records, &Default::default(), &run).unwrap();
        let (back, _) = read_records(dir.path(), &run).unwrap();
        assert_eq!(back[0].reasoning_tokens, Some(3));
        let phases: Vec<bool> = back[0].chunks.iter().map(|c| c.reasoning).collect();
        assert_eq!(phases, vec![true, true, true, false, false, false]);
        // An answer without reasoning writes none of these.
        let plain = record_line(&record(t0, 0, &[(10, 1), (20, 1)], 2), &run);
        assert!(plain["metrics"].get("time_to_first_output_token").is_none(), "{plain}");
        assert!(plain["metrics"].get("reasoning_token_count").is_none(), "{plain}");
    }

    #[test]
    fn files_are_written_with_one_line_per_measured_request() {
        let t0 = Instant::now();
        let mut warm = record(t0, 0, &[(1, 1)], 1);
        warm.warmup = true;
        let records = vec![warm, record(t0, 5, &[(10, 1), (20, 1)], 2)];
        let dir = tempfile::tempdir().unwrap();
        let run = RunInfo::now(json!({"endpoint_type": "chat"}));
        write_all(dir.path(), &summarize(&records, None, true), &records, &run).unwrap();
        let lines = std::fs::read_to_string(dir.path().join(JSONL_FILE)).unwrap();
        assert_eq!(lines.lines().count(), 1);
        let line: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
        assert_eq!(line["metrics"]["time_to_first_token"], json!({"value": 5.0, "unit": "ms"}));
        assert_eq!(line["metrics"]["inter_chunk_latency"]["value"], json!([10.0]));
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(JSON_FILE)).unwrap()).unwrap();
        assert_eq!(summary["request_latency"]["unit"], "ms");
        assert_eq!(summary["request_latency"]["p50"], json!(15.0));
        assert_eq!(summary["request_count"]["avg"], json!(1.0));
        assert!(dir.path().join(CSV_FILE).exists());
    }
}
