//! The generative twin's other APIs: Anthropic Messages (`/v1/messages`) and OpenAI Responses
//! (`/v1/responses`), whole and streamed, with their event orders, usage and errors; and a
//! reasoning model, whose reasoning tokens come first on every route. Each test serves a plain
//! `llm` and a reasoning `thinker` from its own repository, recording requests.

use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use perfbench::tokenize::Tokenizer;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Reasoning tokens of the `thinker` model.
const REASONING: usize = 5;

fn config(extra: &str) -> String {
    format!(
        r#"backend: "llm" max_batch_size: 0
           model_transaction_policy {{ decoupled: true }}
           input [ {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }} ]
           output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }} ]
           parameters {{ key: "step_us" value {{ string_value: "500" }} }}
           parameters {{ key: "decode_us_per_seq" value {{ string_value: "5" }} }}
           parameters {{ key: "prefill_us_per_token" value {{ string_value: "1" }} }}
           parameters {{ key: "max_model_len" value {{ string_value: "256" }} }}
           {extra}"#
    )
}

struct Twin {
    server: RunningServer,
    repo: tempfile::TempDir,
    http: reqwest::Client,
}

impl Twin {
    async fn start() -> Twin {
        let repo = tempfile::tempdir().unwrap();
        let reasoning = format!(r#"parameters {{ key: "reasoning_tokens" value {{ string_value: "{REASONING}" }} }}"#);
        for (name, extra) in [("llm", String::new()), ("thinker", reasoning)] {
            std::fs::create_dir(repo.path().join(name)).unwrap();
            std::fs::write(repo.path().join(name).join("config.pbtxt"), config(&extra)).unwrap();
        }
        let options = ServerOptions {
            model_repository: Some(repo.path().to_path_buf()),
            record_requests: Some(repo.path().join("requests.jsonl")),
            ..Default::default()
        };
        let server = serve::start(ServeConfig { options, ..Default::default() }).await.expect("server starts");
        Twin { server, repo, http: reqwest::Client::new() }
    }

    /// POSTs `body` (JSON text) with an `x-request-id`; the status and the body's text.
    async fn post_raw(&self, path: &str, id: &str, body: String) -> (StatusCode, String) {
        let response = self
            .http
            .post(format!("{}{path}", self.server.http_url()))
            .header("content-type", "application/json")
            .header("x-request-id", id)
            .header("x-api-key", "any")
            .header("anthropic-version", "2023-06-01")
            .body(body)
            .send()
            .await
            .expect("reaches the server");
        let status = response.status();
        (status, response.text().await.unwrap())
    }

    async fn post(&self, path: &str, id: &str, body: &Value) -> (StatusCode, Value) {
        let (status, text) = self.post_raw(path, id, body.to_string()).await;
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
    }

    /// A streamed answer's named events: (name, data).
    async fn events(&self, path: &str, id: &str, body: &Value) -> Vec<(String, Value)> {
        let (status, text) = self.post_raw(path, id, body.to_string()).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        named_events(&text)
    }

    /// The `--record-requests` line of this request id.
    fn record(&self, id: &str) -> Value {
        let text = std::fs::read_to_string(self.repo.path().join("requests.jsonl")).unwrap();
        let records: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        records.into_iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("no record {id} in:\n{text}"))
    }
}

fn named_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e.split_once('\n').unwrap_or_else(|| panic!("not a named event: {e:?}"));
            let name = name.strip_prefix("event: ").unwrap_or_else(|| panic!("no event name: {e:?}"));
            let data = data.strip_prefix("data: ").unwrap_or_else(|| panic!("no data: {e:?}"));
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

/// `name` repeated `n` times.
fn times(name: &'static str, n: usize) -> Vec<&'static str> {
    vec![name; n]
}

fn count(text: &str) -> usize {
    Tokenizer::open("cl100k_base").unwrap().count(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_whole_and_streamed_in_anthropics_shapes() {
    let twin = Twin::start().await;
    let system = "You answer briefly.";
    let question = "the quick brown fox jumps over the lazy dog ".repeat(6);
    let body = json!({
        "model": "llm", "max_tokens": 6, "ignore_eos": true, "system": system,
        "messages": [{"role": "user", "content": [{"type": "text", "text": question}]}],
        "metadata": {"user_id": "u1"}, "stop_sequences": ["never"],
    });
    let (status, whole) = twin.post("/v1/messages", "m-whole", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    assert!(whole["id"].as_str().unwrap().starts_with("msg_"), "{whole}");
    assert_eq!(
        (&whole["type"], &whole["role"], &whole["model"]),
        (&json!("message"), &json!("assistant"), &json!("llm"))
    );
    assert_eq!(whole["content"].as_array().unwrap().len(), 1, "{whole}");
    assert_eq!(whole["content"][0]["type"], "text");
    assert_eq!(whole["stop_reason"], "max_tokens");
    let usage = &whole["usage"];
    assert_eq!(usage["input_tokens"], count(&format!("{system}\n{question}")));
    assert_eq!(usage["output_tokens"], 6);
    let record = twin.record("m-whole");
    assert_eq!((&record["prompt_tokens"], &record["completion_tokens"]), (&usage["input_tokens"], &json!(6)));
    assert!(record.get("reasoning_tokens").is_none(), "a plain model's record has none: {record}");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = twin.events("/v1/messages", "m-stream", &streamed).await;
    let mut expected = vec!["message_start", "content_block_start", "ping"];
    expected.extend(times("content_block_delta", 6));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names(&events), expected);
    for (name, data) in &events {
        assert_eq!(&data["type"], name, "{data}");
    }
    assert_eq!(events[0].1["message"]["usage"]["input_tokens"], usage["input_tokens"]);
    assert_eq!(events[1].1["content_block"], json!({"type": "text", "text": ""}));
    let deltas: Vec<&Value> = events.iter().filter(|(n, _)| n == "content_block_delta").map(|(_, d)| d).collect();
    assert!(deltas.iter().all(|d| d["index"] == 0 && d["delta"]["type"] == "text_delta"));
    let end = &events[events.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], "max_tokens");
    assert_eq!(end["usage"]["output_tokens"], 6);
    // The same prompt again: its leading blocks come from the prefix cache.
    assert!(end["usage"]["cache_read_input_tokens"].as_u64().unwrap() > 0, "{end}");
    let record = twin.record("m-stream");
    assert_eq!(end["usage"]["cache_read_input_tokens"], record["cached_tokens"]);
    assert_eq!(record["chunk_ns"].as_array().unwrap().len(), 6);
    assert!(record["first_read_ns"].as_u64().is_some(), "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_whole_and_streamed_in_openais_shapes() {
    let twin = Twin::start().await;
    let body = json!({
        "model": "llm", "max_output_tokens": 5, "ignore_eos": true, "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "name three colours"}]},
                  {"type": "message", "role": "assistant", "content": "red"},
                  {"role": "user", "content": "more"}],
    });
    let (status, whole) = twin.post("/v1/responses", "r-whole", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    assert!(whole["id"].as_str().unwrap().starts_with("resp_"), "{whole}");
    assert_eq!((&whole["object"], &whole["status"]), (&json!("response"), &json!("incomplete")));
    assert_eq!(whole["incomplete_details"]["reason"], "max_output_tokens");
    let output = whole["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "{whole}");
    assert_eq!((&output[0]["type"], &output[0]["content"][0]["type"]), (&json!("message"), &json!("output_text")));
    let usage = &whole["usage"];
    let input_tokens = count("Be brief.\nname three colours\nred\nmore");
    assert_eq!(usage["input_tokens"], input_tokens);
    assert_eq!(usage["output_tokens"], 5);
    assert_eq!(usage["total_tokens"], input_tokens + 5);
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 0);
    assert!(usage["input_tokens_details"]["cached_tokens"].is_u64());
    assert_eq!(twin.record("r-whole")["completion_tokens"], 5);

    let streamed =
        json!({"model": "llm", "input": "just a string", "max_output_tokens": 4, "ignore_eos": true, "stream": true});
    let events = twin.events("/v1/responses", "r-stream", &streamed).await;
    let mut expected =
        vec!["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
    expected.extend(times("response.output_text.delta", 4));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names(&events), expected);
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!((&data["type"], &data["sequence_number"]), (&json!(name), &json!(i)), "{data}");
    }
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(events[8].1["text"], text);
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], text);
    assert_eq!(done["usage"]["input_tokens"], count("just a string"));
    assert_eq!(done["usage"]["output_tokens"], 4);
    let record = twin.record("r-stream");
    assert_eq!(record["chunk_ns"].as_array().unwrap().len(), 4);
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], record["cached_tokens"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reasoning_model_reasons_first_on_every_route() {
    let twin = Twin::start().await;
    const TOKENS: usize = REASONING + 4;
    let messages = json!([{"role": "user", "content": "think about it"}]);

    let chat = json!({"model": "thinker", "messages": messages, "max_tokens": TOKENS, "ignore_eos": true,
                      "stream": true, "stream_options": {"include_usage": true}});
    let (status, text) = twin.post_raw("/v1/chat/completions", "chat", chat.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let deltas: Vec<&Value> =
        chunks.iter().filter_map(|c| c["choices"].get(0)).map(|c| &c["delta"]).filter(|d| d != &&json!({})).collect();
    assert_eq!(deltas.len(), TOKENS);
    for (i, d) in deltas.iter().enumerate() {
        let reasoning = i < REASONING;
        assert_eq!(d["reasoning"].is_string(), reasoning, "{i}: {d}");
        assert_eq!(d["reasoning_content"], d["reasoning"], "{d}");
        assert_eq!(d["content"].is_string(), !reasoning, "{i}: {d}");
        assert_eq!(d.get("role").is_some(), i == 0, "{i}: {d}");
    }
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(
        (&usage["completion_tokens"], &usage["completion_tokens_details"]["reasoning_tokens"]),
        (&json!(TOKENS), &json!(REASONING))
    );
    assert_eq!(twin.record("chat")["reasoning_tokens"], REASONING);

    let (status, whole) = twin
        .post(
            "/v1/chat/completions",
            "chat-whole",
            &json!({"model": "thinker", "messages": messages, "max_tokens": TOKENS, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let message = &whole["choices"][0]["message"];
    assert!(message["reasoning"].as_str().is_some_and(|r| !r.is_empty()) && message["content"].is_string(), "{whole}");
    assert_eq!(whole["usage"]["completion_tokens_details"]["reasoning_tokens"], REASONING);

    let body =
        json!({"model": "thinker", "messages": messages, "max_tokens": TOKENS, "ignore_eos": true, "stream": true});
    let events = twin.events("/v1/messages", "messages", &body).await;
    let mut expected = vec!["message_start", "content_block_start", "ping"];
    expected.extend(times("content_block_delta", REASONING + 1)); // the thinking, then its signature
    expected.extend(["content_block_stop", "content_block_start"]);
    expected.extend(times("content_block_delta", TOKENS - REASONING));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names(&events), expected);
    assert_eq!(events[1].1["content_block"]["type"], "thinking");
    let kinds: Vec<(u64, &str)> = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| (d["index"].as_u64().unwrap(), d["delta"]["type"].as_str().unwrap()))
        .collect();
    let mut want = vec![(0, "thinking_delta"); REASONING];
    want.push((0, "signature_delta"));
    want.extend(vec![(1, "text_delta"); TOKENS - REASONING]);
    assert_eq!(kinds, want);
    assert_eq!(events[events.len() - 2].1["usage"]["output_tokens"], TOKENS);

    let body =
        json!({"model": "thinker", "input": "think", "max_output_tokens": TOKENS, "ignore_eos": true, "stream": true});
    let events = twin.events("/v1/responses", "responses", &body).await;
    let mut expected =
        vec!["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
    expected.extend(times("response.reasoning_text.delta", REASONING));
    expected.extend([
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
    ]);
    expected.extend(times("response.output_text.delta", TOKENS - REASONING));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names(&events), expected);
    assert_eq!(events[2].1["item"]["type"], "reasoning");
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["type"], "reasoning");
    assert_eq!(done["output"][1]["type"], "message");
    assert_eq!(done["usage"]["output_tokens_details"]["reasoning_tokens"], REASONING);
    assert_eq!(done["usage"]["output_tokens"], TOKENS);
    for id in ["messages", "responses"] {
        let record = twin.record(id);
        assert_eq!((&record["reasoning_tokens"], &record["completion_tokens"]), (&json!(REASONING), &json!(TOKENS)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_each_protocols_error_and_the_server_keeps_serving() {
    let twin = Twin::start().await;
    let long = "word ".repeat(300);
    let user = |text: &str| json!([{"role": "user", "content": text}]);
    let messages: Vec<(&str, String, StatusCode, &str)> = vec![
        ("malformed", "{not json".into(), StatusCode::BAD_REQUEST, "invalid_request_error"),
        (
            "unknown model",
            json!({"model": "nope", "max_tokens": 4, "messages": user("hi")}).to_string(),
            StatusCode::NOT_FOUND,
            "not_found_error",
        ),
        (
            "too long",
            json!({"model": "llm", "max_tokens": 4, "messages": user(&long)}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
        ),
        (
            "no max_tokens",
            json!({"model": "llm", "messages": user("hi")}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
        ),
        (
            "image block",
            json!({"model": "llm", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]})
                .to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
        ),
    ];
    for (case, body, want, kind) in messages {
        let (status, text) = twin.post_raw("/v1/messages", case, body).await;
        let reply: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{case}: not JSON ({e}): {text}"));
        assert_eq!(
            (status, &reply["type"], &reply["error"]["type"]),
            (want, &json!("error"), &json!(kind)),
            "{case}: {reply}"
        );
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(!message.is_empty() && !message.contains('\n'), "{case}: {message}");
    }
    let responses: Vec<(&str, String, StatusCode, Option<&str>)> = vec![
        ("malformed", "{not json".into(), StatusCode::BAD_REQUEST, None),
        (
            "unknown model",
            json!({"model": "nope", "input": "hi"}).to_string(),
            StatusCode::NOT_FOUND,
            Some("model_not_found"),
        ),
        (
            "too long",
            json!({"model": "llm", "input": long, "max_output_tokens": 4}).to_string(),
            StatusCode::BAD_REQUEST,
            Some("context_length_exceeded"),
        ),
        ("empty input", json!({"model": "llm", "input": []}).to_string(), StatusCode::BAD_REQUEST, None),
        (
            "tool item",
            json!({"model": "llm", "input": [{"type": "function_call_output", "output": "x"}]}).to_string(),
            StatusCode::BAD_REQUEST,
            None,
        ),
    ];
    for (case, body, want, code) in responses {
        let (status, text) = twin.post_raw("/v1/responses", case, body).await;
        let reply: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{case}: not JSON ({e}): {text}"));
        assert_eq!(status, want, "{case}: {reply}");
        let error = &reply["error"];
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty() && !m.contains('\n')), "{case}: {reply}");
        assert_eq!(error["type"], "invalid_request_error", "{case}: {reply}");
        if let Some(code) = code {
            assert_eq!(error["code"], code, "{case}: {reply}");
            assert_eq!(error["param"], if code == "model_not_found" { "model" } else { "input" }, "{case}: {reply}");
        }
    }
    let (status, reply) =
        twin.post("/v1/messages", "good-m", &json!({"model": "llm", "max_tokens": 3, "messages": user("hi")})).await;
    assert_eq!((status, &reply["type"]), (StatusCode::OK, &json!("message")), "{reply}");
    let (status, reply) =
        twin.post("/v1/responses", "good-r", &json!({"model": "llm", "input": "hi", "max_output_tokens": 3})).await;
    assert_eq!((status, &reply["object"]), (StatusCode::OK, &json!("response")), "{reply}");
}
