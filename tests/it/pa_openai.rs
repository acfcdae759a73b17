//! `perfbench profile --service-kind openai` (perf_analyzer 2.50's OpenAI kind) against the
//! bundled llm twin: every load mode it runs (a request-rate range and request intervals, as open
//! loops), and its refusals in perf_analyzer's words.

use std::path::Path;

use serde_json::Value;

use crate::common::{assert_fails, perfbench};
use crate::server_llm::Llm;

/// Runs `perfbench profile` off the async runtime (the twin serves on it); its output.
async fn profile(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = std::iter::once("profile").chain(args.iter().map(String::as_str)).collect();
        perfbench(&args)
    })
    .await
    .unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Two completions bodies of `max_tokens` tokens each.
fn bodies(dir: &Path, max_tokens: u32) -> String {
    let step = |prompt: &str| {
        format!(r#"{{"payload": [{{"model": "llm", "prompt": "{prompt}", "max_tokens": {max_tokens}}}]}}"#)
    };
    write(dir, "inputs.json", &format!(r#"{{"data": [{}, {}]}}"#, step("one"), step("two")))
}

fn line(llm: &Llm, inputs: &str, rest: &[&str]) -> Vec<String> {
    let url = llm.server.http_url().trim_start_matches("http://").to_string();
    let head = ["-m", "llm", "-u", &url, "--service-kind", "openai", "--endpoint", "v1/completions", "-a"];
    head.iter().chain(&["--input-data", inputs]).chain(rest).map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_rate_range_runs_as_an_open_loop_as_perf_analyzer_runs_it() {
    // 4 tokens of 100 ms each: every request takes at least 400 ms.
    let llm = Llm::start(&[("step_us", "100000"), ("decode_us_per_seq", "0"), ("prefill_us_per_token", "0")]).await;
    let dir = tempfile::tempdir().unwrap();
    let inputs = bodies(dir.path(), 4);
    let export = dir.path().join("export.json").display().to_string();
    let csv = dir.path().join("rate.csv").display().to_string();
    let rest = ["--request-rate-range", "40", "--request-count", "40", "--profile-export-file", &export, "-f", &csv];
    let out = profile(line(&llm, &inputs, &rest)).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(" Successfully read data for 1 stream/streams with 2 step/steps."), "{stdout}");
    assert!(stdout.contains("Request Rate: 40 inference requests per seconds\n  Client: \n    Request count: 40\n"));
    assert!(stdout.contains("Inferences/Second vs. Client Average Batch Latency\nRequest Rate: 40, throughput: "));
    let export: Value = serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    let experiment = &export["experiments"][0];
    assert_eq!(experiment["experiment"], serde_json::json!({"mode": "request_rate", "value": 40.0}));
    let requests = experiment["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 40);
    // An open loop: the second request left before the first had its answer (a closed loop of
    // one would have waited its 400 ms).
    let first_answer = requests[0]["response_timestamps"][0].as_u64().unwrap();
    assert!(requests[1]["timestamp"].as_u64().unwrap() < first_answer, "{}", requests[1]);
    // The bodies go in turn.
    let payloads: Vec<&str> =
        requests.iter().take(2).map(|r| r["request_inputs"]["payload"].as_str().unwrap()).collect();
    assert!(payloads[0].contains("\"one\"") && payloads[1].contains("\"two\""), "{payloads:?}");
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(csv.starts_with("Request Rate,Inferences/Second,Client Send,Client Recv,p50 latency"), "{csv}");
    assert!(csv.lines().nth(1).unwrap().starts_with("40,"), "{csv}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_intervals_and_a_rate_range_measure_each_point() {
    let llm = Llm::start(&[("step_us", "500"), ("decode_us_per_seq", "5"), ("prefill_us_per_token", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let inputs = bodies(dir.path(), 2);
    // 10 ms then 30 ms: 50 requests per second.
    let intervals = write(dir.path(), "intervals.txt", "10000\n30000\n");
    let out = profile(line(&llm, &inputs, &["--request-intervals", &intervals, "--request-count", "6"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Request Rate: 50 inference requests per seconds\n  Client: \n    Request count: 6\n"));
    let out = profile(line(&llm, &inputs, &["--request-rate-range", "20:40:20", "-p", "200"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("\nRequest Rate: 20, throughput: ") && stdout.contains("\nRequest Rate: 40, throughput: "));
}

#[test]
fn refusals_are_perf_analyzers() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = bodies(dir.path(), 2);
    let two = write(dir.path(), "two.json", r#"{"data": [{"payload": [{"model": "llm"}, {"model": "llm"}]}]}"#);
    let object = write(dir.path(), "object.json", r#"{"data": [{"payload": {"model": "llm"}}]}"#);
    let head =
        ["profile", "-m", "llm", "-u", "127.0.0.1:1", "--service-kind", "openai", "--endpoint", "v1/completions"];
    let refused = |rest: &[&str], needle: &str| {
        let args: Vec<&str> = head.iter().chain(rest).copied().collect();
        assert_fails(&args, 2, needle);
    };
    // Streaming over HTTP is refused before the kind's own checks (here: no -a).
    refused(
        &["--input-data", &inputs, "--streaming"],
        "Streaming is only allowed with gRPC protocol and Triton C API.",
    );
    refused(
        &["-a", "--input-data", &inputs, "-i", "grpc", "--streaming"],
        "perf_analyzer does not support gRPC protocol with OpenAI endpoints",
    );
    refused(
        &["-a", "--input-data", &inputs, "--periodic-concurrency-range", "1:2"],
        "The --periodic-concurrency-range option requires bi-directional gRPC streaming.",
    );
    refused(
        &["-a", "--input-data", &two],
        "Failed to init manager inputs: JSON format does not yet support multiple json objects in the input",
    );
    refused(&["-a", "--input-data", &object], "missing content field. ( Location stream id: 0, step id: 0)");
    refused(
        &["-a", "--input-data", &inputs, "--request-rate-range", "5:10:5", "--request-count", "10"],
        "request-count not supported with multiple request-rate values in one run",
    );
}
