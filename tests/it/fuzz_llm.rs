//! Property-based fuzzing of the generative routes (the OpenAI routes and Triton's generate
//! extension) with the generators and verdicts of `fuzz_server`: generated bodies (well-formed
//! requests with wrong field values, any JSON, junk bytes) to every route. Every request gets an
//! answer in time: a success whose body is read to its end, or a 4xx with the route's error
//! shape (OpenAI's `{"error": {"message": ...}}` under /v1, `{"error": "..."}` under /v2) and a
//! one-line message; never a 5xx, a hang or a dropped connection.

use std::time::Duration;

use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Map, Value};
use tokio::runtime::Runtime;

use crate::fuzz_server::{answered_in_time, check, json_leaf, json_value, pick, runner};

/// Fast steps and a short context, so that a generated request that happens to be valid ends
/// quickly even when it asks for every token the context allows.
const LLM: &str = r#"backend: "llm" max_batch_size: 0
    model_transaction_policy { decoupled: true }
    input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
    parameters { key: "step_us" value { string_value: "50" } }
    parameters { key: "max_model_len" value { string_value: "256" } }
    parameters { key: "num_kv_blocks" value { string_value: "64" } }"#;

const ROUTES: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/models",
    "/v2/models/llm/generate",
    "/v2/models/llm/generate_stream",
    "/v2/models/llm/versions/1/generate_stream",
    "/v2/models/nope/generate",
];

const FIELDS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "input",
    "text_input",
    "parameters",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "ignore_eos",
    "stream",
    "stream_options",
    "n",
    "seed",
    "temperature",
    "sampling_parameters",
    "exclude_input_in_output",
    "encoding_format",
];

fn text() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::from("the night train")),
        Just(Value::from("")),
        "\\PC{0,40}".prop_map(Value::from),
        Just(Value::from("word ".repeat(300))),
    ]
}

/// A field's value: a plausible one or anything.
fn field_value(field: &'static str) -> BoxedStrategy<Value> {
    let plausible: BoxedStrategy<Value> = match field {
        "model" => pick(&["llm", "nope", ""]).prop_map(Value::from).boxed(),
        "messages" => prop::collection::vec(
            (pick(&["user", "system", "assistant"]), prop_oneof![text(), json_value()])
                .prop_map(|(role, content)| json!({"role": role, "content": content})),
            0..3,
        )
        .prop_map(Value::Array)
        .boxed(),
        "prompt" | "input" | "text_input" => {
            prop_oneof![text(), prop::collection::vec(text(), 0..3).prop_map(Value::Array)].boxed()
        }
        "max_tokens" | "max_completion_tokens" | "min_tokens" | "n" => (-2i64..40).prop_map(Value::from).boxed(),
        "stream_options" => any::<bool>().prop_map(|b| json!({"include_usage": b})).boxed(),
        "sampling_parameters" => (-2i64..40, any::<bool>())
            .prop_map(|(n, eos)| Value::from(json!({"max_tokens": n, "ignore_eos": eos}).to_string()))
            .boxed(),
        "parameters" => prop::collection::vec((pick(FIELDS), json_leaf()), 0..4)
            .prop_map(|kv| Value::Object(kv.into_iter().collect()))
            .boxed(),
        _ => json_leaf().boxed(),
    };
    prop_oneof![4 => plausible, 1 => json_value()].boxed()
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let fields = prop::sample::subsequence(FIELDS, 0..=FIELDS.len()).prop_flat_map(|names| {
        names.into_iter().map(|n| field_value(n).prop_map(move |v| (n.to_string(), v))).collect::<Vec<_>>()
    });
    prop_oneof![
        6 => fields.prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()).to_string().into_bytes()),
        1 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..48),
    ]
}

/// An answer in time, never a 5xx, and an error in the route's shape.
async fn answer(http: &reqwest::Client, url: String, body: Vec<u8>, openai: bool) -> Result<(), TestCaseError> {
    let (status, body) = answered_in_time(http.post(url).body(body)).await?;
    let text = String::from_utf8_lossy(&body);
    if status.is_server_error() {
        return Err(TestCaseError::fail(format!("server error {status}: {text}")));
    }
    if status.is_success() || status == 405 {
        return Ok(());
    }
    let parsed: Value =
        serde_json::from_slice(&body).map_err(|_| TestCaseError::fail(format!("{status}: not JSON: {text}")))?;
    let message = if openai { &parsed["error"]["message"] } else { &parsed["error"] };
    match message.as_str() {
        Some(m) if !m.is_empty() && !m.contains('\n') => Ok(()),
        _ => Err(TestCaseError::fail(format!("{status} without a one-line error in the route's shape: {text}"))),
    }
}

fn start(rt: &Runtime) -> (RunningServer, tempfile::TempDir) {
    let repository = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repository.path().join("llm")).unwrap();
    std::fs::write(repository.path().join("llm/config.pbtxt"), LLM).unwrap();
    let options = ServerOptions {
        model_repository: Some(repository.path().to_path_buf()),
        max_request_bytes: 1 << 16,
        request_timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let server = rt.block_on(serve::start(ServeConfig { options, ..Default::default() })).expect("server starts");
    (server, repository)
}

#[test]
fn generative_routes() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (server, _repository) = start(&rt);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    check(runner(2000), (prop::sample::select(ROUTES), body()), |(route, body)| {
        let url = format!("{}{route}", server.http_url());
        rt.block_on(answer(&http, url, body, route.starts_with("/v1")))
    });
    // Still serving: a good request is answered in full.
    let good = json!({"model": "llm", "prompt": "hello", "max_tokens": 3, "ignore_eos": true});
    let url = format!("{}/v1/completions", server.http_url());
    let reply: Value = rt.block_on(async {
        http.post(url)
            .header("content-type", "application/json")
            .body(good.to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
            .parse()
            .unwrap()
    });
    assert_eq!(reply["usage"]["completion_tokens"], 3);
}
