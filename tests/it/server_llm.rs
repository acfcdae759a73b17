//! The generative twin behind `perfbench serve`: the OpenAI routes (whole and SSE), Triton's
//! generate extension, gRPC ModelStreamInfer, the continuous batcher's behaviour (batching, a
//! full KV cache, a disconnect, the prefix cache), the ground-truth records and the vLLM-named
//! metrics. Each test serves a small `llm` model from its own repository on loopback ports.

use std::path::Path;
use std::time::{Duration, Instant};

use perfbench::proto::inference as pb;
use perfbench::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use perfbench::proto::inference::infer_parameter::ParameterChoice;
use perfbench::proto::inference::model_infer_request::InferInputTensor;
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use perfbench::tokenize::Tokenizer;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// An `llm` model config with these extra parameters (`key=value` pairs).
pub(crate) fn llm_config(params: &[(&str, &str)]) -> String {
    let mut text = String::from(
        r#"backend: "llm" max_batch_size: 0
           model_transaction_policy { decoupled: true }
           input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
                   { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
                   { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
                   { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true } ]
           output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
        "#,
    );
    for (k, v) in params {
        text.push_str(&format!("parameters {{ key: \"{k}\" value {{ string_value: \"{v}\" }} }}\n"));
    }
    text
}

/// A `perfbench serve` with one `llm` model and `--record-requests`; `llm_client` starts it too.
pub(crate) struct Llm {
    pub(crate) server: RunningServer,
    _repo: tempfile::TempDir,
    pub(crate) record: std::path::PathBuf,
    http: reqwest::Client,
}

impl Llm {
    pub(crate) async fn start(params: &[(&str, &str)]) -> Llm {
        Llm::with_config(&llm_config(params)).await
    }

    /// The twin with this whole `config.pbtxt`.
    pub(crate) async fn with_config(config: &str) -> Llm {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir(repo.path().join("llm")).unwrap();
        std::fs::write(repo.path().join("llm/config.pbtxt"), config).unwrap();
        let record = repo.path().join("requests.jsonl");
        let options = ServerOptions {
            model_repository: Some(repo.path().to_path_buf()),
            record_requests: Some(record.clone()),
            ..Default::default()
        };
        let server = serve::start(ServeConfig { options, ..Default::default() }).await.expect("server starts");
        Llm { server, _repo: repo, record, http: reqwest::Client::new() }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.http_url())
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, String) {
        let response = send_json(&self.http, self.url(path), body).await;
        let status = response.status();
        (status, response.text().await.expect("a body"))
    }

    async fn post_json(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let (status, text) = self.post(path, body).await;
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
    }

    async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.server.metrics_addr);
        self.http.get(url).send().await.unwrap().text().await.unwrap()
    }

    fn records(&self) -> Vec<Value> {
        read_records(&self.record)
    }
}

fn read_records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A metric's value for the model (`name{model_name="llm",...} v`), summed over its other labels.
fn metric(page: &str, name: &str) -> f64 {
    let lines: Vec<&str> =
        page.lines().filter(|l| l.starts_with(&format!("{name}{{")) && l.contains("model_name=\"llm\"")).collect();
    assert!(!lines.is_empty(), "{name} missing from:\n{page}");
    lines.iter().map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap()).sum()
}

/// The `data:` payloads of an SSE body, in order.
/// POSTs `body` as JSON; the server must answer (any status).
async fn send_json(http: &reqwest::Client, url: String, body: &Value) -> reqwest::Response {
    http.post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("reaches the server")
}

fn sse_events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap_or_else(|| panic!("not an SSE data event: {e:?}")).to_string())
        .collect()
}

fn cl100k() -> Tokenizer {
    Tokenizer::open("cl100k_base").unwrap()
}

const FAST: &[(&str, &str)] = &[("step_us", "500"), ("decode_us_per_seq", "5"), ("prefill_us_per_token", "1")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_answers_whole_and_streamed_with_exact_usage() {
    let llm = Llm::start(FAST).await;
    let (status, models) = llm
        .post_json("/v1/chat/completions", &json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{models}");
    let listed =
        llm.http.get(llm.url("/v1/models")).send().await.unwrap().text().await.unwrap().parse::<Value>().unwrap();
    assert_eq!(listed["data"][0]["id"], "llm");
    assert_eq!(listed["object"], "list");

    let prompt = "Tell me about the night train to the coast.";
    let chat = json!({"model": "llm", "messages": [{"role": "user", "content": prompt}], "max_tokens": 12, "ignore_eos": true, "seed": 3});
    let (status, body) = llm.post_json("/v1/chat/completions", &chat).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["object"], "chat.completion");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(cl100k().count(content), 12, "{content}");
    assert_eq!(body["usage"]["completion_tokens"], 12);
    assert_eq!(body["usage"]["prompt_tokens"], cl100k().count(prompt));
    assert_eq!(body["usage"]["total_tokens"], 12 + cl100k().count(prompt));
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    // The same seed, the same text.
    let (_, again) = llm.post_json("/v1/chat/completions", &chat).await;
    assert_eq!(again["choices"][0]["message"]["content"], content);

    // Streamed completions with the usage chunk.
    let completion = json!({"model": "llm", "prompt": prompt, "max_tokens": 9, "ignore_eos": true, "stream": true,
                            "stream_options": {"include_usage": true}});
    let (status, text) = llm.post("/v1/completions", &completion).await;
    assert_eq!(status, StatusCode::OK);
    let events = sse_events(&text);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let texts: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .filter_map(|c| c["text"].as_str())
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(texts.len(), 9, "one chunk per token: {text}");
    assert_eq!(cl100k().count(&texts.concat()), 9);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 9);
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));

    // Streamed chat: the role comes with the first content; without ignore_eos the length is
    // seeded and capped by max_tokens, and at least min_tokens.
    let chat = json!({"model": "llm", "messages": [{"role": "user", "content": prompt}], "max_tokens": 40,
                      "min_tokens": 5, "stream": true, "seed": 11});
    let (_, text) = llm.post("/v1/chat/completions", &chat).await;
    let events = sse_events(&text);
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let n = chunks.iter().filter(|c| c["choices"][0]["delta"]["content"].is_string()).count();
    assert!((5..=40).contains(&n), "{n} tokens");
    let reason = chunks.last().unwrap()["choices"][0]["finish_reason"].as_str().unwrap().to_string();
    assert_eq!(reason == "length", n == 40, "{reason} after {n}");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c.get("usage").is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_openai_errors_and_the_server_keeps_serving() {
    let llm = Llm::start(&[("step_us", "500"), ("max_model_len", "64")]).await;
    let long = "word ".repeat(100);
    let cases: Vec<(&str, Value, StatusCode, Option<&str>)> = vec![
        (
            "/v1/chat/completions",
            json!({"model": "x", "messages": [{"role": "user", "content": "hi"}]}),
            StatusCode::NOT_FOUND,
            Some("model_not_found"),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}),
            StatusCode::BAD_REQUEST,
            Some("integer_below_min_value"),
        ),
        (
            "/v1/completions",
            json!({"model": "llm", "prompt": long}),
            StatusCode::BAD_REQUEST,
            Some("context_length_exceeded"),
        ),
        (
            "/v1/completions",
            json!({"model": "llm", "prompt": "hi", "max_tokens": 64}),
            StatusCode::BAD_REQUEST,
            Some("context_length_exceeded"),
        ),
        ("/v1/completions", json!({"model": "llm", "prompt": 5}), StatusCode::BAD_REQUEST, None),
        ("/v1/completions", json!({"model": "llm", "prompt": "hi", "n": 2}), StatusCode::BAD_REQUEST, None),
        ("/v1/chat/completions", json!({"model": "llm", "messages": []}), StatusCode::BAD_REQUEST, None),
        ("/v1/embeddings", json!({"model": "llm", "input": []}), StatusCode::BAD_REQUEST, None),
        ("/v1/embeddings", json!({"model": "llm"}), StatusCode::BAD_REQUEST, None),
    ];
    for (path, body, want, code) in cases {
        let (status, reply) = llm.post_json(path, &body).await;
        assert_eq!(status, want, "{path} {body}: {reply}");
        let error = &reply["error"];
        let message = error["message"].as_str().unwrap();
        assert!(!message.is_empty() && !message.contains('\n'), "{message}");
        assert!(error["type"].is_string() && error.get("param").is_some(), "{reply}");
        if let Some(code) = code {
            assert_eq!(error["code"], code, "{reply}");
        }
    }
    let malformed = llm.http.post(llm.url("/v1/chat/completions")).body("{not json").send().await.unwrap();
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    for path in ["/v2/models/llm/generate", "/v2/models/llm/generate_stream"] {
        let malformed = llm.http.post(llm.url(path)).body("{not json").send().await.unwrap();
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST, "{path}");
        let reply: Value = serde_json::from_slice(&malformed.bytes().await.unwrap()).unwrap();
        assert!(reply["error"].is_string(), "{path}: {reply}");
    }
    for (path, body) in [
        ("/v2/models/llm/generate", json!({"parameters": {}})),
        ("/v2/models/llm/generate_stream", json!({"text_input": "a", "max_tokens": -1})),
    ] {
        let (status, reply) = llm.post_json(path, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
        assert!(reply["error"].is_string(), "{reply}");
    }
    let (status, _) = llm.post_json("/v1/completions", &json!({"model": "llm", "prompt": "hi", "max_tokens": 3})).await;
    assert_eq!(status, StatusCode::OK);
}

/// Total generated tokens per second of `streams` concurrent streams, the i-th of `tokens + i`
/// tokens (so they leave the batch at different steps), started 1 ms apart (so later ones join
/// a running batch).
async fn tokens_per_second(llm: &Llm, streams: usize, tokens: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..streams {
        let http = llm.http.clone();
        let url = llm.url("/v1/completions");
        let body = json!({"model": "llm", "prompt": format!("stream {i} of the test"), "max_tokens": tokens + i,
                          "ignore_eos": true, "stream": true});
        tasks.push(tokio::spawn(async move { send_json(&http, url, &body).await.text().await.unwrap() }));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut total = 0;
    for t in tasks {
        let body = t.await.unwrap();
        total += sse_events(&body).iter().filter(|e| e.contains("\"text\":\" ")).count();
    }
    assert_eq!(total, (0..streams).map(|i| tokens + i).sum::<usize>());
    total as f64 / start.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuous_batching_serves_32_streams_far_faster_than_one() {
    // 2 ms per step plus 20 µs per decoding sequence.
    let llm = Llm::start(&[("step_us", "2000"), ("decode_us_per_seq", "20"), ("prefill_us_per_token", "1")]).await;
    // A warm-up stream: the first connection is not part of a measurement.
    tokens_per_second(&llm, 1, 1).await;
    let one = tokens_per_second(&llm, 1, 30).await;
    let many = tokens_per_second(&llm, 32, 30).await;
    eprintln!("tokens/s: 1 stream {one:.0}, 32 streams {many:.0} ({:.1}x)", many / one);
    assert!(many > 8.0 * one, "1 stream {one:.0} tokens/s, 32 streams {many:.0}");
    let Ok(engine) = llm.server.core.llm("llm", "") else { panic!("llm is loaded") };
    let steps = engine.step_log();
    // Some step admitted a sequence into a batch that was already running others, and some
    // sequence left while others went on.
    assert!(
        steps.iter().any(|s| !s.joined.is_empty() && s.batch.len() > s.joined.len()),
        "nobody joined a running batch"
    );
    assert!(steps.iter().any(|s| !s.left.is_empty() && s.batch.len() > s.left.len()), "nobody left a running batch");
    assert!(steps.iter().map(|s| s.batch.len()).max().unwrap() > 16, "batches never grew");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_kv_cache_queues_requests_and_loses_none() {
    // 12 blocks of 16 tokens; each request needs 3 for its ~35-token prompt and 3 more for its 40 tokens.
    let llm = Llm::start(&[
        ("step_us", "4000"),
        ("kv_block_size", "16"),
        ("num_kv_blocks", "12"),
        ("prefill_us_per_token", "1"),
    ])
    .await;
    // Prompts differ from their first token, so no prefix is shared: each needs its own blocks.
    let sentence = "the night train left the valley a little after nine and for the first hour nobody spoke";
    let mut tasks = Vec::new();
    for i in 0..10 {
        let http = llm.http.clone();
        let url = llm.url("/v1/completions");
        let prompt = format!("{i} {sentence} {sentence}");
        let body = json!({"model": "llm", "prompt": prompt, "max_tokens": 40, "ignore_eos": true});
        tasks.push(tokio::spawn(async move {
            send_json(&http, url, &body).await.text().await.unwrap().parse::<Value>().unwrap()
        }));
    }
    let mut saw_waiting = 0.0f64;
    let mut saw_usage = 0.0f64;
    while !tasks.iter().all(|t| t.is_finished()) {
        let page = llm.metrics().await;
        saw_waiting = saw_waiting.max(metric(&page, "vllm:num_requests_waiting"));
        saw_usage = saw_usage.max(metric(&page, "vllm:kv_cache_usage_perc"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        assert_eq!(t.await.unwrap()["usage"]["completion_tokens"], 40);
    }
    assert!(saw_waiting >= 1.0, "the metrics never showed a waiting request");
    assert!(saw_usage > 0.5, "KV usage peaked at {saw_usage}");
    let records = llm.records();
    assert_eq!(records.len(), 10);
    // The server's own instants: the requests admitted later waited for blocks, at least 10
    // steps of 4 ms (the first ones run 40 steps before they free theirs).
    let ttft = |r: &Value| r["first_chunk_ns"].as_u64().unwrap() - r["arrival_ns"].as_u64().unwrap();
    let mut ttfts: Vec<u64> = records.iter().map(ttft).collect();
    ttfts.sort();
    assert!(ttfts[9] > ttfts[0] + 10 * 4_000_000, "TTFTs {ttfts:?}");
    let page = llm.metrics().await;
    assert_eq!(metric(&page, "vllm:kv_cache_usage_perc"), 0.0);
    assert_eq!(metric(&page, "vllm:generation_tokens_total"), 400.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_frees_its_blocks() {
    let llm = Llm::start(&[("step_us", "3000")]).await;
    let body = json!({"model": "llm", "prompt": "a long story please", "max_tokens": 6000, "ignore_eos": true, "stream": true});
    // 6,000 steps of 3 ms outlast the 10 s wait below: only a freed sequence passes it.
    let mut response = send_json(&llm.http, llm.url("/v1/completions"), &body).await;
    for _ in 0..3 {
        response.chunk().await.unwrap().expect("a chunk");
    }
    let page = llm.metrics().await;
    assert!(metric(&page, "vllm:kv_cache_usage_perc") > 0.0);
    assert_eq!(metric(&page, "vllm:num_requests_running"), 1.0);
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = llm.metrics().await;
        if metric(&page, "vllm:kv_cache_usage_perc") == 0.0 && metric(&page, "vllm:num_requests_running") == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "blocks still held:\n{page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let records = llm.records();
    assert_eq!(records[0]["finish_reason"], "abort");
    assert!(records[0]["completion_tokens"].as_u64().unwrap() < 6000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_prompt_prefix_skips_its_prefill() {
    let llm = Llm::start(FAST).await;
    let shared = "the river kept pace with the rails wide and slow and silver under a low moon ".repeat(4);
    for tail in ["first question", "second question"] {
        let body = json!({"model": "llm", "prompt": format!("{shared}{tail}"), "max_tokens": 2});
        let (status, _) = llm.post_json("/v1/completions", &body).await;
        assert_eq!(status, StatusCode::OK);
    }
    let records = llm.records();
    assert_eq!(records[0]["cached_tokens"], 0);
    let cached = records[1]["cached_tokens"].as_u64().unwrap();
    let shared_tokens = cl100k().count(&shared) as u64;
    assert!(cached >= 16 && cached <= shared_tokens, "{cached} cached of {shared_tokens} shared");
    let page = llm.metrics().await;
    assert_eq!(metric(&page, "vllm:prefix_cache_hits_total"), cached as f64);
    assert!(metric(&page, "vllm:prefix_cache_queries_total") > cached as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_tokenizer_fails_the_model_load_with_its_reason() {
    // The tokenizer is opened when the model loads, not on the first request: a path that holds
    // no tokenizer.json fails the load, naming the model and the path.
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir(repo.path().join("llm")).unwrap();
    let missing = repo.path().join("no-tokenizer-here");
    let config = llm_config(&[("tokenizer", missing.to_str().unwrap())]);
    std::fs::write(repo.path().join("llm/config.pbtxt"), config).unwrap();
    let options = ServerOptions { model_repository: Some(repo.path().to_path_buf()), ..Default::default() };
    let Err(e) = serve::start(ServeConfig { options, ..Default::default() }).await else {
        panic!("a model whose tokenizer does not exist loaded");
    };
    let message = format!("{e:#}");
    assert!(message.contains("model 'llm'") && message.contains(missing.to_str().unwrap()), "{message}");
    assert!(!message.contains('\n'), "not one line: {message}");

    // A served twin already holds its tokenizer: a load through the repository API with a bad
    // tokenizer is refused with the reason, and the loaded model keeps serving.
    let llm = Llm::start(&[]).await;
    let override_config = json!({"parameters": {"config": json!({
        "name": "llm", "backend": "llm", "max_batch_size": 0,
        "model_transaction_policy": {"decoupled": true},
        "input": [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}],
        "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}],
        "parameters": {"tokenizer": {"string_value": missing.to_str().unwrap()}},
    }).to_string()}});
    let (status, body) = llm.post("/v2/repository/models/llm/load", &override_config).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains(missing.to_str().unwrap()), "{body}");
    let (status, body) = llm
        .post_json(
            "/v1/completions",
            &json!({"model": "llm", "prompt": "still here", "max_tokens": 3, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_go_through_the_batcher() {
    let llm = Llm::start(FAST).await;
    let (status, body) = llm.post_json("/v1/embeddings", &json!({"model": "llm", "input": ["one two", "three"]})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    let v: Vec<f64> = body["data"][1]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert_eq!(v.len(), 384);
    assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-3);
    let tokens = cl100k().count("one two") + cl100k().count("three");
    assert_eq!(body["usage"]["prompt_tokens"], tokens);
    assert_eq!(llm.records().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_generate_and_generate_stream() {
    let llm = Llm::start(FAST).await;
    let (status, body) = llm
        .post_json(
            "/v2/models/llm/generate",
            &json!({"text_input": "Hello", "parameters": {"max_tokens": 5, "ignore_eos": true}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["model_name"], "llm");
    assert_eq!(body["model_version"], "1");
    let text = body["text_output"].as_str().unwrap();
    assert!(text.starts_with("Hello"), "the prompt comes first, as the vLLM backend answers: {text}");
    assert_eq!(cl100k().count(&text["Hello".len()..]), 5);

    let request = json!({"text_input": "Hello", "stream": true, "sampling_parameters": "{\"max_tokens\": 7, \"ignore_eos\": true}"});
    let response = send_json(&llm.http, llm.url("/v2/models/llm/versions/1/generate_stream"), &request).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream; charset=utf-8");
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(events.len(), 7, "{events:?}");
    for e in &events {
        let v: Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["model_name"], "llm");
        assert!(v["text_output"].as_str().unwrap().starts_with(' '));
    }
    // Without `stream`, generate_stream sends the whole text once.
    let request = json!({"text_input": "Hello", "max_tokens": 3, "ignore_eos": true, "exclude_input_in_output": true});
    let (_, text) = llm.post("/v2/models/llm/generate_stream", &request).await;
    let events = sse_events(&text);
    assert_eq!(events.len(), 1);
    let v: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(cl100k().count(v["text_output"].as_str().unwrap()), 3);
}

fn bytes_tensor(text: &str) -> Vec<u8> {
    let mut raw = (text.len() as u32).to_le_bytes().to_vec();
    raw.extend_from_slice(text.as_bytes());
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_streams_each_token_and_flags_the_last() {
    let llm = Llm::start(FAST).await;
    let mut client = GrpcInferenceServiceClient::connect(format!("http://{}", llm.server.grpc_addr)).await.unwrap();
    let input = |name: &str, datatype: &str| InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: vec![1],
        ..Default::default()
    };
    let request = pb::ModelInferRequest {
        model_name: "llm".into(),
        id: "req-7".into(),
        // ignore_eos: without it the twin may stop early by chance (its natural length is random).
        inputs: vec![
            input("text_input", "BYTES"),
            input("stream", "BOOL"),
            input("max_tokens", "INT32"),
            input("sampling_parameters", "BYTES"),
        ],
        raw_input_contents: vec![
            bytes_tensor("Hello there").into(),
            vec![1u8].into(),
            6i32.to_le_bytes().to_vec().into(),
            bytes_tensor(r#"{"ignore_eos": true}"#).into(),
        ],
        ..Default::default()
    };
    let unary = client.model_infer(request.clone()).await.unwrap_err();
    assert_eq!(unary.message(), perfbench::server::core::DECOUPLED_UNARY);
    let mut responses = client.model_stream_infer(futures::stream::iter([request])).await.unwrap().into_inner();
    let mut got = Vec::new();
    while let Some(r) = responses.message().await.unwrap() {
        assert!(r.error_message.is_empty(), "{}", r.error_message);
        let r = r.infer_response.unwrap();
        let last =
            matches!(r.parameters["triton_final_response"].parameter_choice, Some(ParameterChoice::BoolParam(true)));
        assert_eq!(r.id, "req-7");
        assert_eq!(r.outputs[0].name, "text_output");
        got.push((String::from_utf8(r.raw_output_contents[0][4..].to_vec()).unwrap(), last));
        if last {
            break;
        }
    }
    assert_eq!(got.len(), 6);
    assert!(got[..5].iter().all(|(_, last)| !last) && got[5].1);
    // The last token leaves before the request's record is written: wait for it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while llm.records().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let records = llm.records();
    assert_eq!(records[0]["id"], "req-7");
    assert_eq!(records[0]["completion_tokens"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_and_statistics_agree_with_what_was_served() {
    let llm = Llm::start(FAST).await;
    for i in 0..3 {
        let response = llm
            .http
            .post(llm.url("/v1/completions"))
            .header("x-request-id", format!("mine-{i}"))
            .header("content-type", "application/json")
            .body(
                json!({"model": "llm", "prompt": "count the steps", "max_tokens": 4 + i, "ignore_eos": true})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let records = llm.records();
    assert_eq!(records.len(), 3);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r["id"], format!("mine-{i}"));
        let at = |k: &str| r[k].as_u64().unwrap();
        assert!(at("arrival_ns") <= at("admitted_ns") && at("admitted_ns") <= at("first_chunk_ns"));
        assert!(at("first_chunk_ns") <= at("finish_ns"));
        // The front end's reading, when it came before the finish, follows the model's chunk.
        if let Some(read) = r["first_read_ns"].as_u64() {
            assert!(at("first_chunk_ns") <= read, "{r}");
        }
        let chunks = r["chunk_ns"].as_array().unwrap();
        assert_eq!(chunks.len(), 4 + i);
        assert!(chunks.windows(2).all(|w| w[0].as_u64() <= w[1].as_u64()));
        assert_eq!(r["prompt_tokens"], cl100k().count("count the steps"));
    }
    let stats = llm
        .http
        .get(llm.url("/v2/models/llm/stats"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .parse::<Value>()
        .unwrap();
    let m = &stats["model_stats"][0];
    assert_eq!(m["inference_count"], 3);
    assert_eq!(m["execution_count"], 3);
    assert_eq!(m["inference_stats"]["success"]["count"], 3);
    let page = llm.metrics().await;
    assert_eq!(metric(&page, "vllm:generation_tokens_total"), 15.0);
    assert_eq!(metric(&page, "vllm:request_success_total"), 3.0);
    assert!(page.contains("vllm:time_to_first_token_seconds_count{model_name=\"llm\",engine=\"0\"} 3"), "{page}");
    assert!(page.contains("nv_inference_request_success{model=\"llm\",version=\"1\"} 3"), "{page}");
}

/// 1,000 concurrent streams on a `perfbench serve` pinned to one core: every stream gets all its
/// tokens, and the server's peak RSS stays under 256 MiB. A measurement (it prints the figures):
/// `cargo test --test it -- --ignored server_llm::a_thousand_streams --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn a_thousand_streams_on_one_core() {
    const STREAMS: usize = 1000;
    const TOKENS: usize = 50;
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir(repo.path().join("llm")).unwrap();
    let config = llm_config(&[("step_us", "20000"), ("decode_us_per_seq", "5"), ("max_num_seqs", "1024")]);
    std::fs::write(repo.path().join("llm/config.pbtxt"), config).unwrap();
    let repo_arg = repo.path().to_str().unwrap();
    let server = crate::common::ServeProcess::start(&["--model-repository", repo_arg, "--max-connections", "4096"]);
    let pinned = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", "0", &server.pid().to_string()])
        .output()
        .expect("taskset runs");
    assert!(pinned.status.success(), "{}", String::from_utf8_lossy(&pinned.stderr));
    // No in-process server here to install rustls' crypto provider, which reqwest needs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().pool_max_idle_per_host(STREAMS).build().unwrap();
    let url = format!("http://{}/v1/completions", server.http);
    let start = Instant::now();
    let tasks: Vec<_> = (0..STREAMS)
        .map(|i| {
            let (http, url) = (http.clone(), url.clone());
            let body = json!({"model": "llm", "prompt": format!("stream {i}"), "max_tokens": TOKENS,
                              "ignore_eos": true, "stream": true});
            tokio::spawn(async move { send_json(&http, url, &body).await.text().await.unwrap() })
        })
        .collect();
    let mut tokens = 0;
    for t in tasks {
        tokens += sse_events(&t.await.unwrap()).iter().filter(|e| e.contains("\"text\":\" ")).count();
    }
    let took = start.elapsed();
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let kib = |key: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let (peak, now) = (kib("VmHWM:"), kib("VmRSS:"));
    eprintln!(
        "{STREAMS} streams x {TOKENS} tokens on one core in {took:?} ({:.0} tokens/s); server RSS peak {} MiB, now {} MiB",
        tokens as f64 / took.as_secs_f64(),
        peak / 1024,
        now / 1024
    );
    assert_eq!(tokens, STREAMS * TOKENS);
    assert!(peak < 256 * 1024, "peak RSS {peak} KiB");
}
