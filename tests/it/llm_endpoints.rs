//! `perfbench llm`'s newer endpoint types and reasoning models: Anthropic Messages, OpenAI
//! Responses and Cohere-shaped rankings, each first against a stub that writes the protocol's
//! exact stream in timed pieces (what the client times, counts and sends), then against the
//! bundled twin (`--endpoint-type messages|responses|cohere-rankings`, the `llm_reasoning`
//! model) with its `--record-requests` truth.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use parking_lot::Mutex;
use serde_json::{json, Value};

use perfbench::genai::endpoint::{BodyOptions, EndpointType, Message};
use perfbench::genai::metrics::{Record, TokenSource};
use perfbench::genai::runner::{Runner, Target};
use perfbench::tokenize::Tokenizer;

use crate::common::perfbench;

/// What the stub saw of the last request: its headers and its JSON body.
type Seen = Arc<Mutex<Option<(HeaderMap, Value)>>>;

/// A stub answering `path` with `writes` (each after its delay in ms), as `content_type`.
async fn stub(path: &str, content_type: &'static str, writes: Vec<(u64, String)>) -> (String, Seen) {
    let seen: Seen = Arc::new(Mutex::new(None));
    let keep = seen.clone();
    let app = axum::Router::new().route(
        path,
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (writes, keep) = (writes.clone(), keep.clone());
            async move {
                *keep.lock() = Some((headers, serde_json::from_slice(&body).unwrap()));
                let stream = futures::stream::unfold(writes.into_iter(), |mut rest| async move {
                    let (delay, text) = rest.next()?;
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    Some((Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text)), rest))
                });
                axum::response::Response::builder()
                    .header("content-type", content_type)
                    .body(Body::from_stream(stream))
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}{path}"), seen)
}

fn tokenizer() -> Arc<Tokenizer> {
    Arc::new(Tokenizer::open("cl100k_base").unwrap())
}

fn runner(url: String, endpoint: EndpointType, streaming: bool) -> Runner {
    let body = BodyOptions { model: "llm".into(), streaming, ..Default::default() };
    let mix = perfbench::load::Mix::single(&body.model);
    Runner::new(Target { url, endpoint, mix, body, headers: Vec::new(), tokenizer: tokenizer() }, 2).unwrap()
}

fn ask(text: &str) -> Vec<Message> {
    vec![Message { role: "user", content: text.into() }]
}

/// `event: NAME` and `data: JSON` of one named SSE event.
fn named(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// ms between two instants of a record.
fn ms(record: &Record, a: usize, b: usize) -> Duration {
    record.chunks[b].at - record.chunks[a].at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_time_each_text_and_thinking_delta_and_skip_the_envelopes() {
    let delta = |index: u32, delta: Value| {
        named("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta}))
    };
    let writes = vec![
        (
            0,
            named(
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "llm", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 25, "output_tokens": 1}}}),
            ),
        ),
        (
            0,
            named(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ),
        ),
        (0, named("ping", json!({"type": "ping"}))),
        (0, delta(0, json!({"type": "thinking_delta", "thinking": "Let me think"}))),
        (0, delta(0, json!({"type": "signature_delta", "signature": "EqQB"}))),
        (0, named("content_block_stop", json!({"type": "content_block_stop", "index": 0}))),
        (
            30,
            named(
                "content_block_start",
                json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
            ),
        ),
        (0, delta(1, json!({"type": "text_delta", "text": "Hello"}))),
        (30, delta(1, json!({"type": "text_delta", "text": " there"}))),
        (0, named("content_block_stop", json!({"type": "content_block_stop", "index": 1}))),
        (
            0,
            named(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
            "stop_sequence": null}, "usage": {"output_tokens": 5}}),
            ),
        ),
        (0, named("message_stop", json!({"type": "message_stop"}))),
    ];
    let (url, seen) = stub("/v1/messages", "text/event-stream", writes).await;
    let runner = runner(url, EndpointType::Messages, true);
    let (record, reply) = runner.send(&ask("hi"), Some(5), None).await;
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!(reply, "Hello there", "the answer, without the thinking, is the next turn's history");
    let phases: Vec<bool> = record.chunks.iter().map(|c| c.reasoning).collect();
    assert_eq!(phases, vec![true, false, false], "ping, envelopes and the signature are not token events");
    assert!(ms(&record, 0, 1) >= Duration::from_millis(30), "the answer started 30 ms after the thinking");
    assert!(record.ttfot().unwrap() - record.ttft().unwrap() >= 30e6);
    // Usage split over message_start (input) and message_delta (output); the reasoning tokens
    // counted by the client tokenizer (Anthropic's usage has none here).
    assert_eq!((record.input_tokens, record.output_tokens), (Some(25), Some(5)));
    assert_eq!(record.token_source, Some(TokenSource::ServerUsage));
    assert_eq!(record.reasoning_tokens, Some(tokenizer().count("Let me think") as u64));
    let (headers, body) = seen.lock().clone().unwrap();
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        body,
        json!({"model": "llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
        "stream": true, "ignore_eos": true})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_time_output_and_reasoning_deltas_and_read_usage_at_completion() {
    let event = |name: &str, mut data: Value| {
        data["type"] = name.into();
        named(name, data)
    };
    let text = |delta: &str| {
        event(
            "response.output_text.delta",
            json!({"item_id": "msg_1", "output_index": 1,
        "content_index": 0, "delta": delta, "logprobs": []}),
        )
    };
    let writes = vec![
        (
            0,
            event(
                "response.created",
                json!({"response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}}),
            ),
        ),
        (
            0,
            event(
                "response.output_item.added",
                json!({"output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
            ),
        ),
        (
            0,
            event(
                "response.reasoning_text.delta",
                json!({"item_id": "rs_1", "output_index": 0, "content_index": 0, "delta": "Hmm"}),
            ),
        ),
        (
            20,
            event(
                "response.reasoning_text.delta",
                json!({"item_id": "rs_1", "output_index": 0, "content_index": 0, "delta": " so"}),
            ),
        ),
        (
            0,
            event(
                "response.output_item.added",
                json!({"output_index": 1, "item": {"id": "msg_1", "type": "message", "content": []}}),
            ),
        ),
        (30, text("Yes")),
        (0, text(" indeed")),
        (
            0,
            event(
                "response.output_text.done",
                json!({"item_id": "msg_1", "output_index": 1, "content_index": 0, "text": "Yes indeed"}),
            ),
        ),
        (
            0,
            event(
                "response.completed",
                json!({"response": {"id": "resp_1", "object": "response", "status": "completed",
            "usage": {"input_tokens": 7, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 11}}}),
            ),
        ),
    ];
    let (url, seen) = stub("/v1/responses", "text/event-stream", writes).await;
    let (record, reply) = runner(url, EndpointType::Responses, true).send(&ask("q"), None, None).await;
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!(reply, "Yes indeed", "output_text.done repeats the text: not counted twice");
    let phases: Vec<bool> = record.chunks.iter().map(|c| c.reasoning).collect();
    assert_eq!(phases, vec![true, true, false, false]);
    assert!(ms(&record, 1, 2) >= Duration::from_millis(30));
    assert_eq!((record.input_tokens, record.output_tokens, record.reasoning_tokens), (Some(7), Some(4), Some(2)));
    assert_eq!(record.answer_tokens(), Some(2));
    let (_, body) = seen.lock().clone().unwrap();
    assert_eq!(
        body,
        json!({"model": "llm", "stream": true, "input": [{"type": "message", "role": "user", "content": "q"}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_reasoning_is_read_from_either_field_and_left_out_of_the_history() {
    let chunk = |delta: Value| format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": delta}]}));
    let writes = vec![
        (0, chunk(json!({"role": "assistant", "reasoning_content": "First"}))),
        (0, chunk(json!({"reasoning": " then"}))),
        (30, chunk(json!({"content": "Done"}))),
        (
            0,
            format!(
                "data: {}\n\n",
                json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3,
            "completion_tokens_details": {"reasoning_tokens": 2}}})
            ),
        ),
        (0, "data: [DONE]\n\n".to_string()),
    ];
    let (url, _) = stub("/v1/chat/completions", "text/event-stream", writes).await;
    let (record, reply) = runner(url, EndpointType::Chat, true).send(&ask("q"), None, None).await;
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!(reply, "Done");
    assert_eq!(record.chunks.iter().map(|c| c.reasoning).collect::<Vec<_>>(), vec![true, true, false]);
    assert_eq!((record.output_tokens, record.reasoning_tokens, record.answer_tokens()), (Some(3), Some(2), Some(1)));
    assert!(record.ttfot().unwrap() - record.ttft().unwrap() >= 30e6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rankings_send_the_query_and_passages_and_count_one_untimed_answer() {
    let answer = json!({"id": "rerank-1", "model": "llm", "usage": {"total_tokens": 42}, "results": [
        {"index": 1, "relevance_score": 0.9, "document": {"text": "b"}},
        {"index": 0, "relevance_score": 0.1, "document": {"text": "a"}}]});
    let (url, seen) = stub("/v2/rerank", "application/json", vec![(0, answer.to_string())]).await;
    let runner = runner(url, EndpointType::CohereRankings, true);
    let messages = [
        Message { role: "user", content: "which?".into() },
        Message { role: perfbench::genai::endpoint::DOCUMENT_ROLE, content: "a".into() },
        Message { role: perfbench::genai::endpoint::DOCUMENT_ROLE, content: "b".into() },
    ];
    let (record, _) = runner.send(&messages, None, None).await;
    assert!(record.ok(), "{:?}", record.error);
    assert_eq!(record.chunks.len(), 1, "one answer, no tokens out");
    assert_eq!((record.input_tokens, record.output_tokens), (Some(42), None), "vLLM's total_tokens is the input");
    let (_, body) = seen.lock().clone().unwrap();
    assert_eq!(body, json!({"model": "llm", "query": "which?", "documents": ["a", "b"]}));
    // An answer without results is unreadable, not a success.
    let (url, _) = stub("/v2/rerank", "application/json", vec![(0, json!({"id": "x"}).to_string())]).await;
    let (record, _) = runner_at(url).send(&messages, None, None).await;
    assert!(record.error.is_some());
}

fn runner_at(url: String) -> Runner {
    runner(url, EndpointType::CohereRankings, false)
}

// ---- Against the bundled twin: these need the server's routes (u-msgs: /v1/messages,
// /v1/responses, `llm_reasoning`; u-vllm: /v2/rerank). ----

/// Runs `perfbench llm ARGS` into a fresh artifact folder: its stdout and JSONL lines.
fn llm_run(args: &[&str]) -> (String, Vec<Value>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("run");
    let mut all = vec!["llm", "--artifact-dir", artifacts.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = perfbench(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{all:?}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines = std::fs::read_to_string(artifacts.join("profile_export.jsonl")).unwrap();
    let lines = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (stdout, lines, dir)
}

fn metric(line: &Value, tag: &str) -> Option<f64> {
    line["metrics"][tag]["value"].as_f64()
}

#[test]
fn perfbench_llm_profiles_messages_and_responses_on_the_twin() {
    for endpoint in ["messages", "responses"] {
        let args = [
            "-m",
            "llm",
            "--endpoint-type",
            endpoint,
            "--streaming",
            "--concurrency",
            "2",
            "--request-count",
            "8",
            "--synthetic-input-tokens-mean",
            "32",
            "--output-tokens-mean",
            "6",
        ];
        let (stdout, lines, _dir) = llm_run(&args);
        assert!(stdout.contains("Time to First Token"), "{endpoint}: {stdout}");
        assert!(stdout.contains("server usage (8 requests)"), "{endpoint}: {stdout}");
        assert!(!stdout.contains("Time to First Output Token"), "{endpoint}: no reasoning on `llm`: {stdout}");
        assert_eq!(lines.len(), 8);
        for line in &lines {
            assert_eq!(metric(line, "output_sequence_length"), Some(6.0), "{endpoint}: {line}");
            assert!(line["error"].is_null(), "{endpoint}: {line}");
        }
    }
}

#[test]
fn perfbench_llm_profiles_cohere_rankings_on_the_twin() {
    let args = [
        "-m",
        "llm",
        "--endpoint-type",
        "cohere-rankings",
        "--request-count",
        "6",
        "--rankings-passages-mean",
        "3",
        "--rankings-passages-prompt-token-mean",
        "20",
        "--rankings-query-prompt-token-mean",
        "8",
    ];
    let (stdout, lines, _dir) = llm_run(&args);
    assert!(stdout.contains("Request Latency"), "{stdout}");
    assert!(!stdout.contains("Time to First Token"), "one answer, no token timing: {stdout}");
    assert_eq!(lines.len(), 6);
    for line in &lines {
        assert!(line["error"].is_null(), "{line}");
        // The twin counts each (query, passage) pair it scores.
        assert!(metric(line, "input_sequence_length").unwrap() >= 3.0 * 20.0, "{line}");
        assert!(metric(line, "output_sequence_length").is_none(), "{line}");
    }
}

#[test]
fn perfbench_llm_reports_a_reasoning_models_first_output_token_and_phases() {
    for endpoint in ["chat", "messages", "responses"] {
        let args = [
            "-m",
            "llm_reasoning",
            "--endpoint-type",
            endpoint,
            "--streaming",
            "--concurrency",
            "2",
            "--request-count",
            "4",
            "--synthetic-input-tokens-mean",
            "32",
            "--output-tokens-mean",
            "80",
        ];
        let (stdout, lines, dir) = llm_run(&args);
        for row in
            ["Time to First Output Token (ms)", "Reasoning Token Count (tokens)", "Output Inter Token Latency (ms)"]
        {
            assert!(stdout.contains(row), "{endpoint}: {row}: {stdout}");
        }
        for line in &lines {
            let (ttft, ttfot) =
                (metric(line, "time_to_first_token").unwrap(), metric(line, "time_to_first_output_token").unwrap());
            assert!(ttfot > ttft, "{endpoint}: the answer follows the reasoning: {line}");
            let reasoning = metric(line, "reasoning_token_count").unwrap();
            let answer = metric(line, "output_token_count").unwrap();
            // The twin reasons for 64 tokens, counted toward the 80 asked for; Messages' usage
            // has no reasoning count, so the client tokenizer counts its thinking text there.
            if endpoint != "messages" {
                assert_eq!((reasoning, answer), (64.0, 16.0), "{endpoint}: {line}");
            }
            assert!(reasoning >= 1.0 && answer >= 1.0, "{endpoint}: {line}");
            assert_eq!(reasoning + answer, metric(line, "output_sequence_length").unwrap(), "{endpoint}: {line}");
        }
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/profile_export_aiperf.json")).unwrap())
                .unwrap();
        assert_eq!(summary["time_to_first_output_token"]["unit"], "ms", "{endpoint}");
        assert!(summary["total_reasoning_tokens"]["avg"].as_f64().unwrap() >= 4.0, "{endpoint}");
    }
}

/// The twin's per-request truth (`--record-requests`) against the client's TTFT, on each new
/// streaming endpoint: a client cannot see a first token before the server made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ttft_is_never_before_the_twins_first_token_on_the_new_endpoints() {
    let twin = crate::llm_client::twin().await;
    let mut sent = Vec::new();
    for (endpoint, path) in [(EndpointType::Messages, "/v1/messages"), (EndpointType::Responses, "/v1/responses")] {
        let runner = runner(format!("{}{path}", twin.server.http_url()), endpoint, true);
        for i in 0..3 {
            let (record, _) = runner.send(&ask(&format!("tell me about ships, part {i}")), Some(8), None).await;
            assert!(record.ok(), "{endpoint}: {:?}", record.error);
            assert_eq!(record.output_tokens, Some(8), "{endpoint}");
            sent.push((endpoint, record));
        }
    }
    let truth = crate::llm_client::server_records(&twin, sent.len()).await;
    for (endpoint, record) in &sent {
        let line = truth.iter().find(|t| t["id"] == record.request_id.as_str()).unwrap_or_else(|| {
            panic!("{endpoint}: the twin recorded no request {}", record.request_id);
        });
        let server_ttft_ns = line["first_chunk_ns"].as_u64().unwrap() - line["arrival_ns"].as_u64().unwrap();
        let client_ttft_ns = record.ttft().unwrap();
        // 0.1 ms for the two reads of one monotonic clock.
        assert!(
            client_ttft_ns + 1e5 >= server_ttft_ns as f64,
            "{endpoint}: client {client_ttft_ns} ns, server {server_ttft_ns} ns"
        );
        assert_eq!(line["completion_tokens"], 8, "{endpoint}: {line}");
    }
}
