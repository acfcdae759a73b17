//! `perfbench llm --slice-duration` and `--server-metrics` against the bundled twin: AIPerf's
//! timeslice files whose request counts add up to the run's, the twin's `vllm:` gauges in
//! server_metrics_export.json, and scrapes that fail mid-run counted and shown, never fatal.

use std::io::{Read, Write};
use std::net::TcpListener;

use crate::common::perfbench;

fn succeeds(args: &[&str]) -> String {
    let out = perfbench(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

const RUN: [&str; 13] = [
    "llm",
    "-m",
    "llm",
    "--streaming",
    "--concurrency",
    "4",
    "--request-count",
    "40",
    "--synthetic-input-tokens-mean",
    "32",
    "--output-tokens-mean",
    "16",
    "--artifact-dir",
];

#[test]
fn slices_add_up_and_the_twins_vllm_gauges_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("run");
    let mut args = RUN.to_vec();
    let path = artifacts.to_str().unwrap();
    args.extend([path, "--slice-duration", "0.05", "--server-metrics-interval", "0.02"]);
    let stdout = succeeds(&args);

    let csv = std::fs::read_to_string(artifacts.join("profile_export_aiperf_timeslices.csv")).unwrap();
    assert_eq!(csv.lines().next(), Some("Timeslice,Start_NS,End_NS,Metric,Unit,Stat,Value"));
    assert!(csv.contains(",Time to First Token,ms,p99,"), "{csv}");
    let json = read_json(&artifacts.join("profile_export_aiperf_timeslices.json"));
    let slices = json["timeslices"].as_array().expect("a list of slices");
    assert!(!slices.is_empty());
    let count: f64 = slices.iter().map(|s| s["request_count"]["avg"].as_f64().unwrap_or(0.0)).sum();
    assert_eq!(count, 40.0, "every request in one slice");
    for pair in slices.windows(2) {
        assert!(pair[0]["end_ns"].as_u64() <= pair[1]["start_ns"].as_u64(), "in time order, apart");
    }
    let csv_count: f64 = csv
        .lines()
        .filter(|l| l.contains(",Request Count,requests,avg,"))
        .map(|l| l.rsplit(',').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(csv_count, 40.0);

    let server = read_json(&artifacts.join("server_metrics_export.json"));
    for gauge in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"] {
        assert_eq!(server["metrics"][gauge]["type"], "gauge", "{gauge}: {}", server["metrics"]);
    }
    let prompt = &server["metrics"]["vllm:prompt_tokens_total"]["series"][0];
    assert!(prompt["stats"]["total"].as_f64().unwrap() > 0.0, "{prompt}");
    assert!(!prompt["timeslices"].as_array().unwrap().is_empty(), "counters per slice: {prompt}");
    assert_eq!(server["perfbench_series"]["running"][0], "vllm:num_requests_running");
    let ttft = &server["metrics"]["vllm:time_to_first_token_seconds"]["series"][0]["stats"];
    assert_eq!(ttft["count"].as_u64(), Some(40), "{ttft}");
    let csv = std::fs::read_to_string(artifacts.join("server_metrics_export.csv")).unwrap();
    assert!(csv.contains(",gauge,vllm:num_requests_running,"), "{csv}");
    assert!(stdout.contains("Server metrics: "), "{stdout}");
}

/// A metrics endpoint that answers once, then only 500s; each connection closed after one answer.
fn dying_metrics_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|k| k == 1) {
                head.push(byte[0]);
            }
            let (status, body) =
                if n == 0 { ("200 OK", "# TYPE up gauge\nup 1\n") } else { ("500 Internal Server Error", "down") };
            let answer =
                format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    url
}

#[test]
fn scrapes_that_fail_mid_run_are_counted_and_shown_not_fatal() {
    let dying = dying_metrics_endpoint();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let closed = format!("http://{closed}/metrics");
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("run");
    let mut args = RUN.to_vec();
    args.extend([
        artifacts.to_str().unwrap(),
        "--server-metrics",
        &dying,
        &closed,
        "--server-metrics-interval",
        "0.02",
    ]);
    let stdout = succeeds(&args);
    let line =
        |url: &str| stdout.lines().find(|l| l.starts_with("Server metrics:") && l.contains(url)).map(String::from);
    let dying_line = line(&dying).unwrap_or_else(|| panic!("a line for {dying}: {stdout}"));
    assert!(dying_line.contains("failed (last: HTTP 500"), "{dying_line}");
    let closed_line = line(&closed).unwrap_or_else(|| panic!("a line for {closed}: {stdout}"));
    assert!(closed_line.contains("failed"), "{closed_line}");

    let server = read_json(&artifacts.join("server_metrics_export.json"));
    let info = &server["summary"]["endpoint_info"];
    let dying_info = &info[dying.as_str()];
    assert!(dying_info["failed_fetches"].as_u64().unwrap() >= 1, "the last scrape at least: {dying_info}");
    assert_eq!(
        dying_info["failed_fetches"].as_u64().unwrap() + 1,
        dying_info["total_fetches"].as_u64().unwrap(),
        "all but the first"
    );
    assert_eq!(info[closed.as_str()]["failed_fetches"], info[closed.as_str()]["total_fetches"]);
    assert_eq!(server["metrics"]["up"]["type"], "gauge", "what the endpoint said before it died is kept");
    assert!(server["metrics"]["vllm:num_requests_running"].is_object(), "the twin's own endpoint still scraped");
}
