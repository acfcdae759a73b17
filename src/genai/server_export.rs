//! `--server-metrics`: what the server's Prometheus endpoints said during the run, written as
//! AIPerf 0.13's `server_metrics_export.json` (`summary` with each endpoint's fetch counts,
//! `metrics` keyed by name, each with its `type`, `description`, `unit` and `series`, every
//! series with its `stats` and, with `--slice-duration`, its `timeslices`) and
//! `server_metrics_export.csv` (a section per type: `Endpoint,Type,Metric,Unit`, the type's
//! statistics, one column per label, `Description`). perfbench adds `failed_fetches` and
//! `last_error` to each endpoint's info and `perfbench_series`: the series a report can draw
//! as queue, running, KV-cache, batch and GPU.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{json, Value};

use super::export::RunInfo;
use crate::client::scrape::Fetches;
use crate::measure::server_metrics::{self, EndpointSummary, Kind, MetricSummary, Scraped};
use crate::measure::slices::Slice;

pub const JSON_FILE: &str = "server_metrics_export.json";
pub const CSV_FILE: &str = "server_metrics_export.csv";

const GAUGE_STATS: [&str; 13] =
    ["avg", "min", "max", "std", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99"];
const COUNTER_STATS: [&str; 6] = ["total", "rate", "rate_avg", "rate_min", "rate_max", "rate_std"];
const HISTOGRAM_STATS: [&str; 14] = [
    "count",
    "count_rate",
    "sum",
    "sum_rate",
    "avg",
    "p1_estimate",
    "p5_estimate",
    "p10_estimate",
    "p25_estimate",
    "p50_estimate",
    "p75_estimate",
    "p90_estimate",
    "p95_estimate",
    "p99_estimate",
];

/// Each endpoint's fetches parsed and summed up over the run (per slice when there are slices).
pub fn summarize(fetches: &[Fetches], run: &RunInfo, slices: &[Slice]) -> Vec<EndpointSummary> {
    fetches
        .iter()
        .map(|endpoint| {
            let scrapes: Vec<Scraped> = endpoint
                .fetches
                .iter()
                .map(|f| Scraped {
                    at_ns: run.unix_ns(f.at) as u64,
                    latency_ns: f.latency.as_nanos() as u64,
                    scrape: f.body.as_deref().map_err(|e| e.to_string()).and_then(server_metrics::parse),
                })
                .collect();
            server_metrics::summarize(&endpoint.url, &scrapes, slices)
        })
        .collect()
}

/// The metrics of every endpoint by name, each series tagged with its endpoint.
fn merged(endpoints: &[EndpointSummary]) -> BTreeMap<String, MetricSummary> {
    let mut metrics: BTreeMap<String, MetricSummary> = BTreeMap::new();
    for endpoint in endpoints {
        for (name, metric) in &endpoint.metrics {
            match metrics.get_mut(name) {
                Some(m) => m.series.extend(metric.series.iter().cloned()),
                None => {
                    metrics.insert(name.clone(), metric.clone());
                }
            }
        }
    }
    metrics
}

pub fn json(endpoints: &[EndpointSummary], run: &RunInfo, start_ns: u64, end_ns: u64) -> Value {
    let metrics = merged(endpoints);
    let mut roles: BTreeMap<server_metrics::Role, Vec<&str>> = BTreeMap::new();
    for name in metrics.keys() {
        if let Some(role) = server_metrics::role(name) {
            roles.entry(role).or_default().push(name);
        }
    }
    let time = |ns: u64| chrono::DateTime::from_timestamp_nanos(ns as i64).to_rfc3339();
    let info: BTreeMap<&str, _> = endpoints.iter().map(|e| (e.url.as_str(), &e.info)).collect();
    json!({
        "schema_version": "1.1",
        "perfbench_version": env!("CARGO_PKG_VERSION"),
        "summary": {
            "endpoints_configured": endpoints.iter().map(|e| &e.url).collect::<Vec<_>>(),
            "endpoints_successful": endpoints.iter().filter(|e| e.info.failed_fetches < e.info.total_fetches).map(|e| &e.url).collect::<Vec<_>>(),
            "start_time": time(start_ns),
            "end_time": time(end_ns),
            "endpoint_info": info,
            "phase_time_ranges": {"profiling": {"start_ns": start_ns, "end_ns": end_ns}},
        },
        "metrics_phase": "profiling",
        "metrics": metrics,
        "perfbench_series": roles,
        "input_config": run.input_config,
    })
}

fn cell(value: Option<&Value>) -> String {
    match value.and_then(Value::as_f64) {
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{}", v as i64),
        Some(v) => format!("{v:.6}").trim_end_matches('0').trim_end_matches('.').to_string(),
        None => String::new(),
    }
}

fn quote(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

pub fn csv(endpoints: &[EndpointSummary]) -> String {
    let mut out = String::from("# perfbench server metrics export (AIPerf's CSV layout)\n");
    out.push_str(&format!("# perfbench_version: {}\n# schema_version: 1.0\n#\n", env!("CARGO_PKG_VERSION")));
    let sections: [(&[Kind], &str, &[&str]); 4] = [
        (&[Kind::Gauge], "gauge", &GAUGE_STATS),
        (&[Kind::Counter], "counter", &COUNTER_STATS),
        (&[Kind::Histogram], "histogram", &HISTOGRAM_STATS),
        (&[Kind::Unknown], "unknown", &GAUGE_STATS),
    ];
    let mut first = true;
    for (kinds, name, stats) in sections {
        let rows: Vec<(&EndpointSummary, &String, &MetricSummary)> = endpoints
            .iter()
            .flat_map(|e| e.metrics.iter().map(move |(n, m)| (e, n, m)))
            .filter(|(_, _, m)| kinds.contains(&m.kind))
            .collect();
        if rows.is_empty() {
            continue;
        }
        if !first {
            out.push('\n');
        }
        first = false;
        let label_keys: BTreeSet<&String> = rows
            .iter()
            .flat_map(|(_, _, m)| m.series.iter().flat_map(|s| s.labels.iter().flat_map(|l| l.keys())))
            .collect();
        let mut header: Vec<String> = ["Endpoint", "Type", "Metric", "Unit"].map(String::from).to_vec();
        header.extend(stats.iter().map(|s| s.to_string()));
        header.extend(label_keys.iter().map(|k| k.to_string()));
        header.push("Description".into());
        if name == "histogram" {
            header.push("buckets".into());
        }
        out.push_str(&header.iter().map(|h| quote(h)).collect::<Vec<_>>().join(","));
        out.push('\n');
        for (endpoint, metric_name, metric) in rows {
            for series in &metric.series {
                let values = serde_json::to_value(&series.stats).expect("plain numbers");
                let mut row =
                    vec![endpoint.url.clone(), name.to_string(), metric_name.clone(), metric.unit.unwrap_or("").into()];
                row.extend(stats.iter().map(|s| cell(values.get(*s))));
                row.extend(
                    label_keys
                        .iter()
                        .map(|k| series.labels.as_ref().and_then(|l| l.get(*k)).cloned().unwrap_or_default()),
                );
                row.push(metric.description.clone());
                if name == "histogram" {
                    let buckets = series.buckets.iter().flatten().map(|(le, n)| format!("{le}={n}"));
                    row.push(buckets.collect::<Vec<_>>().join(";"));
                }
                out.push_str(&row.iter().map(|c| quote(c)).collect::<Vec<_>>().join(","));
                out.push('\n');
            }
        }
    }
    out
}

/// Writes both files into `dir`.
pub fn write(dir: &Path, endpoints: &[EndpointSummary], run: &RunInfo, span_ns: (u64, u64)) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(&json(endpoints, run, span_ns.0, span_ns.1))?;
    std::fs::write(dir.join(JSON_FILE), text + "\n")?;
    std::fs::write(dir.join(CSV_FILE), csv(endpoints))?;
    Ok(())
}

/// One console line per endpoint: how many scrapes, how many failed and why.
pub fn notes(endpoints: &[EndpointSummary]) -> Vec<String> {
    endpoints
        .iter()
        .map(|e| {
            let failed = match (&e.info.last_error, e.info.failed_fetches) {
                (Some(error), n) if n > 0 => format!(", {n} failed (last: {error})"),
                _ => String::new(),
            };
            format!(
                "Server metrics: {} scrapes of {}{failed}; {} metrics",
                e.info.total_fetches,
                e.url,
                e.metrics.len()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::scrape::Fetch;
    use std::time::{Duration, Instant};

    #[test]
    fn files_have_aiperfs_shape_and_failures_show() {
        let origin = Instant::now();
        let run = RunInfo { input_config: json!({}), origin, origin_unix_ns: 5_000_000_000 };
        let text = |v: u32| {
            format!("# HELP vllm:num_requests_waiting Waiting.\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"m\"}} {v}\n")
        };
        let fetch = |ms: u64, body: Result<String, String>| Fetch {
            at: origin + Duration::from_millis(ms),
            latency: Duration::from_millis(1),
            body,
        };
        let fetches = vec![Fetches {
            url: "http://127.0.0.1:1/metrics".into(),
            fetches: vec![
                fetch(0, Ok(text(1))),
                fetch(300, Err("HTTP 500 Internal Server Error".into())),
                fetch(600, Ok(text(3))),
            ],
        }];
        let endpoints = summarize(&fetches, &run, &[]);
        let json = json(&endpoints, &run, 5_000_000_000, 5_600_000_000);
        let info = &json["summary"]["endpoint_info"]["http://127.0.0.1:1/metrics"];
        assert_eq!((info["total_fetches"].as_u64(), info["failed_fetches"].as_u64()), (Some(3), Some(1)));
        let waiting = &json["metrics"]["vllm:num_requests_waiting"];
        assert_eq!(waiting["type"], "gauge");
        assert_eq!(waiting["series"][0]["stats"]["avg"], 2.0);
        assert_eq!(waiting["series"][0]["labels"]["model_name"], "m");
        assert_eq!(json["perfbench_series"]["queue"][0], "vllm:num_requests_waiting");
        let csv = csv(&endpoints);
        assert!(csv.contains("Endpoint,Type,Metric,Unit,avg,min,max,std,p1,"), "{csv}");
        assert!(csv.contains("http://127.0.0.1:1/metrics,gauge,vllm:num_requests_waiting,,2,1,3,"), "{csv}");
        let notes = notes(&endpoints);
        assert!(
            notes[0].contains("3 scrapes") && notes[0].contains("1 failed") && notes[0].contains("HTTP 500"),
            "{notes:?}"
        );
    }
}
