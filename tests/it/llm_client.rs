//! `perfbench llm`'s client against the bundled generative twin: `--endpoint-type kserve` (gRPC
//! `ModelStreamInfer`, one event per response, the client tokenizer counting), a refused
//! request, a stream cut in the middle, and the whole command.

use std::sync::Arc;
use std::time::Duration;

use perfbench::genai::endpoint::{BodyOptions, EndpointType, Message};
use perfbench::genai::metrics::{ErrorKind, TokenSource};
use perfbench::genai::runner::{Runner, Target};
use perfbench::tokenize::Tokenizer;

use crate::common::perfbench;
use crate::proxy::{Cut, CutKind, Direction, Fault, Proxy};
use crate::server_llm::Llm;

const LLM: &str = r#"backend: "llm" max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
        { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
        { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
parameters { key: "step_us" value { string_value: "2000" } }
parameters { key: "max_model_len" value { string_value: "256" } }
"#;

/// Runs perfbench, which must exit 0; its stdout.
fn succeeds(args: &[&str]) -> String {
    let out = perfbench(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

pub(crate) async fn twin() -> Llm {
    Llm::with_config(LLM).await
}

fn kserve_runner(url: String, streaming: bool) -> Runner {
    let tokenizer = Arc::new(Tokenizer::open("cl100k_base").unwrap());
    let body = BodyOptions { model: "llm".into(), streaming, ..Default::default() };
    let mix = perfbench::load::Mix::single(&body.model);
    let target = Target { url, endpoint: EndpointType::Kserve, mix, body, headers: Vec::new(), tokenizer };
    Runner::new(target, 4).unwrap()
}

fn ask(text: &str) -> Vec<Message> {
    vec![Message { role: "user", content: text.into() }]
}

/// The twin writes a request's record after its last token leaves: wait for `n` of them.
pub(crate) async fn server_records(twin: &Llm, n: usize) -> Vec<serde_json::Value> {
    for _ in 0..500 {
        let text = std::fs::read_to_string(&twin.record).unwrap_or_default();
        let records: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if records.len() >= n {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the server wrote fewer than {n} records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kserve_times_each_streamed_response_and_counts_with_the_client_tokenizer() {
    let twin = twin().await;
    let runner = kserve_runner(twin.server.grpc_url(), true);
    let (record, reply) = runner.send(&ask("Tell me a story about the sea"), Some(12), None).await;
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!(record.chunks.len(), 12, "one event per response; the final flag ends the request");
    assert!(record.chunks.windows(2).all(|w| w[0].at <= w[1].at));
    // Responses leave a batcher step (2 ms) apart, so the events are not one read.
    assert!(record.chunks[11].at - record.chunks[0].at >= Duration::from_millis(11 * 2));
    assert_eq!(record.token_source, Some(TokenSource::ClientTokenizer), "no usage on this path");
    let tokenizer = Tokenizer::open("cl100k_base").unwrap();
    assert_eq!(record.output_tokens, Some(12), "each response holds one of the twin's tokens");
    assert_eq!(record.input_tokens, Some(tokenizer.count("Tell me a story about the sea") as u64));
    assert!(!reply.is_empty());
    let served = server_records(&twin, 1).await;
    assert_eq!(served[0]["completion_tokens"], 12, "max_tokens and ignore_eos reached the server");
    assert_eq!(record.request_id.len(), 32, "{}", record.request_id);
    assert_eq!(served[0]["id"], record.request_id.as_str(), "the server logs the id the client sent");

    // Not streamed: one response holding the whole answer, without the prompt.
    let whole = kserve_runner(twin.server.grpc_url(), false);
    let (record, reply) = whole.send(&ask("Tell me a story about the sea"), Some(12), None).await;
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!(record.chunks.len(), 1);
    assert!(!reply.starts_with("Tell me a story"), "exclude_input_in_output was sent: {reply}");
    let served = server_records(&twin, 2).await;
    assert_eq!(served[1]["completion_tokens"], 12);
    assert_eq!(served[1]["id"], record.request_id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_kserve_request_is_a_server_error_and_the_next_one_is_served() {
    let twin = twin().await;
    let runner = kserve_runner(twin.server.grpc_url(), true);
    // 300 tokens do not fit the model's 256-token context: refused before any token.
    let (record, _) = runner.send(&ask("hello"), Some(300), None).await;
    let (kind, message) = record.error.clone().expect("refused");
    assert_eq!(kind, ErrorKind::Server);
    assert!(message.contains("maximum context length"), "{message}");
    assert!(record.chunks.is_empty());
    let (record, _) = runner.send(&ask("hello"), Some(3), None).await;
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!(record.chunks.len(), 3);
    // A model the server does not have: refused by name.
    let tokenizer = Arc::new(Tokenizer::open("cl100k_base").unwrap());
    let body = BodyOptions { model: "nope".into(), streaming: true, ..Default::default() };
    let target = Target {
        url: twin.server.grpc_url(),
        endpoint: EndpointType::Kserve,
        mix: perfbench::load::Mix::single(&body.model),
        body,
        headers: Vec::new(),
        tokenizer,
    };
    let (record, _) = Runner::new(target, 1).unwrap().send(&ask("hello"), Some(3), None).await;
    assert_eq!(record.error.map(|e| e.0), Some(ErrorKind::Server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kserve_stream_cut_midway_is_a_transport_error() {
    let twin = twin().await;
    // Reset once 2 KiB have come back: past the HTTP/2 preface and the first responses
    // (about 60 bytes each), long before 200 of them.
    let cut = Cut { direction: Direction::Down, after_bytes: 2048, kind: CutKind::Reset };
    let proxy = Proxy::start(twin.server.grpc_addr, Fault { cut: Some(cut), ..Default::default() }).await;
    let runner = kserve_runner(proxy.url(), true);
    let (record, _) = runner.send(&ask("a long answer please"), Some(200), None).await;
    let (kind, message) = record.error.expect("the stream broke");
    assert_eq!(kind, ErrorKind::Transport, "{message}");
    assert!(record.end - record.start >= Duration::from_millis(2), "it failed after responses had started");
    assert_eq!(proxy.counters().cut.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn perfbench_llm_kserve_against_the_bundled_server_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("run");
    let stdout = succeeds(&[
        "llm",
        "-m",
        "llm",
        "--endpoint-type",
        "kserve",
        "--streaming",
        "--concurrency",
        "4",
        "--request-count",
        "20",
        "--synthetic-input-tokens-mean",
        "32",
        "--output-tokens-mean",
        "8",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ]);
    assert!(stdout.contains("Time to First Token"), "{stdout}");
    assert!(stdout.contains("client tokenizer (20 requests)"), "{stdout}");
    let lines = std::fs::read_to_string(artifacts.join("profile_export.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 20);
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    let osl = first["metrics"]["output_sequence_length"]["value"].as_f64();
    assert_eq!(osl, Some(8.0), "{first}");
    let id = |line: &str| serde_json::from_str::<serde_json::Value>(line).unwrap()["metadata"]["x_request_id"].clone();
    let ids: std::collections::HashSet<String> = lines.lines().map(|l| id(l).as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), 20, "every record carries its own request id: {first}");
    assert!(!ids.contains(""), "{first}");
    assert!(artifacts.join("report.html").exists());
}

/// The handler's lag in the CLIENT-LIMITED note, in µs.
fn handler_lag_us(stdout: &str) -> Option<f64> {
    let line = stdout.lines().find(|l| l.starts_with("CLIENT-LIMITED"))?;
    let after = line.split("(handler ").nth(1)?;
    after.split(' ').next()?.parse().ok()
}

#[test]
fn a_throttled_streaming_client_is_flagged_client_limited() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("run");
    // Every event's handling blocks its thread for 5 ms (the test-only hook).
    let stdout = succeeds(&[
        "llm",
        "-m",
        "llm",
        "--streaming",
        "--concurrency",
        "2",
        "--request-count",
        "4",
        "--synthetic-input-tokens-mean",
        "16",
        "--output-tokens-mean",
        "5",
        "--throttle-event-handler-us",
        "5000",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ]);
    assert!(stdout.contains("CLIENT-LIMITED"), "{stdout}");
    assert!(stdout.contains("event-handling lag p99"), "{stdout}");
    let lag = handler_lag_us(&stdout).expect("the note names the handler's lag");
    assert!(lag >= 5000.0, "each event waited at least the 5 ms the handler blocked: {lag} µs");
    let html = std::fs::read_to_string(artifacts.join("report.html")).unwrap();
    assert!(html.contains("CLIENT-LIMITED"), "report.html warns too");
}

#[test]
fn an_online_generative_sweep_writes_one_row_per_level_and_the_token_plots() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("sweep");
    succeeds(&[
        "online",
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        "1,4",
        "--request-count",
        "8",
        "--synthetic-input-tokens-mean",
        "16",
        "--output-tokens-mean",
        "6",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ]);
    let csv = std::fs::read_to_string(artifacts.join("report.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(header[..3], ["Concurrency", "Inferences/Second", "p50 latency"], "{csv}");
    assert_eq!(lines.len(), 3, "{csv}");
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("{name}: {csv}"));
    for (line, level) in lines[1..].iter().zip(["1", "4"]) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells[0], level);
        assert_eq!(cells[column("Requests")], "8", "every level measured its 8 requests: {line}");
        assert_eq!(cells[column("Failed")], "0", "{line}");
        for name in ["Inferences/Second", "p99 latency", "TTFT p50", "TTFT p99", "ITL p50", "Output Tokens/Second"] {
            assert!(cells[column(name)].parse::<f64>().is_ok_and(|v| v > 0.0), "{name}: {line}");
        }
    }
    assert!(artifacts.join("concurrency4/profile_export.jsonl").exists());
    assert!(artifacts.join("plan.toml").exists(), "the plan is kept beside the rows");
    assert!(std::fs::read_to_string(artifacts.join("report.md")).unwrap().contains("| concurrency 4 | 8 |"));
    let html = std::fs::read_to_string(artifacts.join("report.html")).unwrap();
    assert!(html.contains("c1: ") && html.contains("c4: "), "both levels are on the plots");
    for stem in ["ttft_itl_vs_token_throughput", "tokens_per_user_vs_token_throughput"] {
        assert!(artifacts.join(format!("{stem}.png")).exists());
        assert!(artifacts.join(format!("{stem}.svg")).exists());
    }
}

/// Divides one column of a report.csv's rows by `by` (a faster baseline, made up).
fn scaled(csv: &str, name: &str, by: f64) -> String {
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    let at = header.split(',').position(|h| h == name).unwrap();
    let mut out = format!("{header}\n");
    for line in lines {
        let mut cells: Vec<String> = line.split(',').map(String::from).collect();
        cells[at] = (cells[at].parse::<f64>().unwrap() / by).to_string();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

#[test]
fn a_generative_scenario_runs_from_its_plan_and_is_gated_on_its_token_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/llm_chat.toml");
    let stdout = succeeds(&["run", scenario, "--profile", "quick", "--out", out.to_str().unwrap()]);
    assert!(stdout.contains("| concurrency 4 | 24 | 0 |"), "{stdout}");
    let current = out.join("online/report.csv");
    let csv = std::fs::read_to_string(&current).unwrap();

    // The same rows gate clean; a baseline whose first token came twice as fast fails on TTFT.
    let gate = |baseline: &std::path::Path| {
        perfbench(&[
            "gate",
            "--baseline",
            baseline.to_str().unwrap(),
            "--current",
            current.to_str().unwrap(),
            "--scenario",
            scenario,
        ])
    };
    assert!(gate(&current).status.success());
    let faster = dir.path().join("faster.csv");
    std::fs::write(&faster, scaled(&csv, "TTFT p99", 2.0)).unwrap();
    let verdict = gate(&faster);
    let stderr = String::from_utf8_lossy(&verdict.stderr);
    assert_eq!(verdict.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("REGRESSION") && stderr.contains("TTFT p99"), "{stderr}");
    assert!(!stderr.contains("ITL p99") && !stderr.contains("output tokens/s"), "{stderr}");

    // The kept plan runs again as written.
    let again = dir.path().join("again");
    let plan = std::fs::read_to_string(out.join("online/plan.toml"))
        .unwrap()
        .replace(out.join("online").to_str().unwrap(), again.to_str().unwrap());
    let plan_file = dir.path().join("plan.toml");
    std::fs::write(&plan_file, plan).unwrap();
    succeeds(&["run", plan_file.to_str().unwrap()]);
    let rows = std::fs::read_to_string(again.join("report.csv")).unwrap();
    assert_eq!(rows.lines().count(), 3, "{rows}");
}
