//! The floor for `perfbench serve`'s HTTP path (scripts/bench-hot-paths.sh): a bare axum server
//! that answers every POST with its own body, on the same runtime, listener and socket options
//! as `perfbench serve`. Whatever the real server spends beyond this is its own.
//! `POST /v1/completions` with `"stream": true` is the floor for streamed tokens: it answers
//! `max_tokens` Server-Sent Events shaped as the twin's completion chunks, then `data: [DONE]`,
//! each event its own body frame, with no scheduler and no tokenizer behind them.
//! With `--parse`, the infer route does the JSON exchange an identity model's server must do at
//! the least: the request parsed by serde_json into typed FP32 tensors, the answer written by
//! serde_json with the same text as perfbench serve and Triton write (FP32 widened to double).
//!
//! Usage: `cargo run --release --example echo_axum -- [PORT] [--parse]` (default 24200).

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header::{HeaderValue, CONTENT_TYPE};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;
use futures::StreamExt;

async fn echo(headers: HeaderMap, body: Bytes) -> (HeaderMap, Bytes) {
    // The answer keeps the request's content type and, for binary tensors, its
    // Inference-Header-Content-Length, as an identity model's answer would.
    let mut reply = HeaderMap::new();
    for name in [CONTENT_TYPE.as_str(), "inference-header-content-length"] {
        if let Some(value) = headers.get(name) {
            reply.insert(name, value.clone());
        }
    }
    (reply, body)
}

#[derive(serde::Deserialize)]
struct ParsedRequest {
    inputs: Vec<ParsedInput>,
}

#[derive(serde::Deserialize)]
struct ParsedInput {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    data: Vec<f32>,
}

#[derive(serde::Serialize)]
struct ParsedReply {
    model_name: &'static str,
    model_version: &'static str,
    outputs: Vec<ParsedOutput>,
}

#[derive(serde::Serialize)]
struct ParsedOutput {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    data: Vec<f64>,
}

/// The JSON floor: parse, then answer each `INPUTn` as `OUTPUTn` (JSON requests only).
async fn echo_parsed(body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<ParsedRequest>(&body) else {
        let mut bad = Response::new(Body::from("not a JSON FP32 request"));
        *bad.status_mut() = axum::http::StatusCode::BAD_REQUEST;
        return bad;
    };
    let outputs = request
        .inputs
        .into_iter()
        .map(|i| ParsedOutput {
            name: i.name.replace("INPUT", "OUTPUT"),
            datatype: i.datatype,
            shape: i.shape,
            data: i.data.into_iter().map(f64::from).collect(),
        })
        .collect();
    let reply = ParsedReply { model_name: "identity", model_version: "1", outputs };
    let mut response = Response::new(Body::from(serde_json::to_vec(&reply).expect("plain types serialize")));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The SSE floor: the request's `max_tokens`, then that many completion chunks, the chunk that
/// says why it ended and `data: [DONE]`, as the twin sends them, one event per poll.
async fn completions(body: Bytes) -> Response {
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let n = request.get("max_tokens").and_then(serde_json::Value::as_u64).unwrap_or(16);
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let id = format!("cmpl-{:032x}", created);
    let events = futures::stream::iter(0..=n + 1).then(move |i| {
        let id = id.clone();
        async move {
            // One event per poll, as tokens that come from a scheduler one step at a time.
            tokio::task::yield_now().await;
            if i == n + 1 {
                return Ok::<_, Infallible>(Bytes::from_static(b"data: [DONE]\n\n"));
            }
            let (text, finish) =
                if i == n { ("", serde_json::Value::from("length")) } else { (" word", serde_json::Value::Null) };
            let chunk = serde_json::json!({ "id": id, "object": "text_completion", "created": created, "model": "llm",
                "choices": [{ "index": 0, "text": text, "logprobs": null, "finish_reason": finish }] });
            let mut event = b"data: ".to_vec();
            serde_json::to_writer(&mut event, &chunk).expect("JSON values serialize");
            event.extend_from_slice(b"\n\n");
            Ok(Bytes::from(event))
        }
    });
    let mut response = Response::new(Body::from_stream(events));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    response
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse = args.iter().any(|a| a == "--parse");
    let port: u16 = args.iter().find(|a| !a.starts_with("--")).map_or(24200, |p| p.parse().expect("PORT is a number"));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let infer = if parse { post(echo_parsed) } else { post(echo) };
        let app = Router::new().route("/v2/models/{model}/infer", infer).route("/v1/completions", post(completions));
        eprintln!("echo_axum on 127.0.0.1:{port}{}", if parse { " (parsing JSON)" } else { "" });
        axum::serve(listener, app).await
    })
}
