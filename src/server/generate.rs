//! Triton's generate extension over the generative twin: `POST
//! /v2/models/{m}[/versions/{v}]/generate` and `.../generate_stream`. The request is
//! `{"text_input", "parameters"}` plus, as Triton maps them, top-level fields named like the
//! model's inputs (`stream`, `max_tokens`, `sampling_parameters`, `exclude_input_in_output`).
//! As Triton's vLLM backend: `stream` true sends one response per token (deltas), otherwise one
//! response with the whole text, which repeats the prompt unless `exclude_input_in_output`.
//! `generate` answers one JSON object; `generate_stream` sends SSE `data: {...}` events and ends
//! with the HTTP reply (no `[DONE]`); an error after the stream began is a `data: {"error"}` event.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::header::{HeaderValue, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{json, Map, Value};

use super::core::InferenceServer;
use super::error::{ServerError, ServerResult};
use super::listen::ReceivedAt;
use super::llm::{Event, GenerateParams, Generation, LlmEngine};
use super::openai::{request_id, sse};
use super::repository::MODEL_VERSION;

type Core = State<Arc<InferenceServer>>;

pub fn routes() -> Router<Arc<InferenceServer>> {
    Router::new()
        .route("/v2/models/{m}/generate", post(generate))
        .route("/v2/models/{m}/versions/{v}/generate", post(generate_v))
        .route("/v2/models/{m}/generate_stream", post(generate_stream))
        .route("/v2/models/{m}/versions/{v}/generate_stream", post(generate_stream_v))
}

/// What a generation request asks, whichever protocol carried it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TextRequest {
    pub text_input: String,
    pub stream: bool,
    pub exclude_input_in_output: bool,
    pub max_tokens: Option<usize>,
    pub min_tokens: usize,
    pub ignore_eos: bool,
    pub seed: Option<u64>,
}

impl TextRequest {
    /// Reads the sampling fields of one JSON object (`parameters`, the `sampling_parameters`
    /// string, or the request's top level), later calls overriding earlier ones.
    pub fn read_sampling(&mut self, fields: &Map<String, Value>) -> ServerResult<()> {
        for (key, value) in fields {
            match key.as_str() {
                "stream" => self.stream = boolean(key, value)?,
                "exclude_input_in_output" => self.exclude_input_in_output = boolean(key, value)?,
                "ignore_eos" => self.ignore_eos = boolean(key, value)?,
                "max_tokens" => {
                    let n = count(key, value)?;
                    if n < 1 {
                        return Err(ServerError::invalid_arg(format!("max_tokens must be at least 1, got {n}")));
                    }
                    self.max_tokens = Some(n as usize);
                }
                "min_tokens" => self.min_tokens = count(key, value)? as usize,
                "seed" => self.seed = Some(count(key, value)?),
                "sampling_parameters" => {
                    let text = value.as_str().ok_or_else(|| {
                        ServerError::invalid_arg("sampling_parameters must be a JSON object in a string")
                    })?;
                    self.read_sampling_json(text)?;
                }
                // Sampling knobs the twin accepts and ignores (its text is its corpus).
                _ => {}
            }
        }
        Ok(())
    }

    /// Reads vLLM's `sampling_parameters` JSON text.
    pub fn read_sampling_json(&mut self, text: &str) -> ServerResult<()> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ServerError::invalid_arg(format!("sampling_parameters is not JSON: {e}")))?;
        let Value::Object(fields) = value else {
            return Err(ServerError::invalid_arg("sampling_parameters must be a JSON object"));
        };
        self.read_sampling(&fields)
    }

    pub fn params(&self, request_id: String, arrival_ns: u64) -> GenerateParams {
        GenerateParams {
            prompt: self.text_input.clone(),
            max_tokens: self.max_tokens,
            min_tokens: self.min_tokens,
            ignore_eos: self.ignore_eos,
            seed: self.seed,
            request_id,
            arrival_ns,
        }
    }
}

fn boolean(key: &str, value: &Value) -> ServerResult<bool> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s == "true" || s == "false" => Ok(s == "true"),
        other => Err(ServerError::invalid_arg(format!("{key} must be a boolean, got {other}"))),
    }
}

fn count(key: &str, value: &Value) -> ServerResult<u64> {
    let n = match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    match n {
        Some(n) if n >= 0 => Ok(n as u64),
        _ => Err(ServerError::invalid_arg(format!("{key} must be a non-negative integer, got {value}"))),
    }
}

/// Parses a generate request body.
fn parse_body(body: &[u8]) -> ServerResult<TextRequest> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ServerError::invalid_arg(format!("failed to parse the request JSON buffer: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(ServerError::invalid_arg("the generate request must be a JSON object"));
    };
    let text_input = match fields.remove("text_input") {
        Some(Value::String(s)) => s,
        Some(other) => return Err(ServerError::invalid_arg(format!("text_input must be a string, got {other}"))),
        None => return Err(ServerError::invalid_arg("generate request has no 'text_input'")),
    };
    let mut request = TextRequest { text_input, ..Default::default() };
    let parameters = match fields.remove("parameters") {
        None => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(ServerError::invalid_arg(
                "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
            ))
        }
    };
    // Triton's words: a request parameter is an int, a bool or a string (a float passes too).
    if let Some((key, _)) =
        parameters.iter().find(|(_, v)| matches!(v, Value::Null | Value::Array(_) | Value::Object(_)))
    {
        return Err(ServerError::invalid_arg(format!(
            "Converting keyword: 'parameters': parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )));
    }
    request.read_sampling(&parameters)?;
    request.read_sampling(&fields)?;
    Ok(request)
}

async fn generate(core: Core, Path(m): Path<String>, request: Request) -> Response {
    run(core, m, String::new(), request, false).await
}

async fn generate_v(core: Core, Path((m, v)): Path<(String, String)>, request: Request) -> Response {
    run(core, m, v, request, false).await
}

async fn generate_stream(core: Core, Path(m): Path<String>, request: Request) -> Response {
    run(core, m, String::new(), request, true).await
}

async fn generate_stream_v(core: Core, Path((m, v)): Path<(String, String)>, request: Request) -> Response {
    run(core, m, v, request, true).await
}

async fn run(State(core): Core, model: String, version: String, request: Request, sse_reply: bool) -> Response {
    let arrival_ns = ReceivedAt::of(&request);
    start(&core, &model, &version, request, arrival_ns, sse_reply).await.unwrap_or_else(IntoResponse::into_response)
}

async fn start(
    core: &InferenceServer,
    model: &str,
    version: &str,
    request: Request,
    arrival_ns: u64,
    sse_reply: bool,
) -> ServerResult<Response> {
    let (parts, body) = request.into_parts();
    let limit = core.options.max_request_bytes;
    let body = axum::body::to_bytes(body, limit).await.map_err(|_| {
        ServerError::invalid_arg(format!(
            "request body exceeds the server's limit of {limit} bytes (--max-request-bytes)"
        ))
    })?;
    let engine = core.llm(model, version)?;
    let text = parse_body(&body)?;
    let id = request_id(&parts.headers).unwrap_or_else(|| format!("gen-{:032x}", rand::random::<u128>()));
    let generation = engine.generate(text.params(id, arrival_ns), core.request_log.clone())?;
    let mut pieces = Pieces { engine, text, generation, done: false };
    if sse_reply {
        return Ok(pieces.into_sse());
    }
    // As Triton: `generate` takes exactly one response, so a streamed request fails unless its
    // first token is its last (Triton answers 200 with this error; a 4xx here, by our rule).
    match pieces.next().await? {
        Some((text, true)) => Ok(Json(output(model, &text)).into_response()),
        Some((_, false)) => Err(ServerError::invalid_arg(ONE_RESPONSE)),
        None => Err(ServerError::unavailable("the batcher stopped before the request finished")),
    }
}

/// Triton's reply when `generate` meets a model that sends more than one response.
pub const ONE_RESPONSE: &str = "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses";

fn output(model: &str, text: &str) -> Value {
    json!({ "model_name": model, "model_version": MODEL_VERSION, "text_output": text })
}

/// A request's generated text, read from its events.
pub struct Pieces {
    pub engine: Arc<LlmEngine>,
    pub text: TextRequest,
    pub generation: Generation,
    pub done: bool,
}

impl Pieces {
    /// The next piece of text to send and whether it is the last (`Ok(None)`: the request is
    /// done), token by token when streaming, else the whole text at once.
    pub async fn next(&mut self) -> ServerResult<Option<(String, bool)>> {
        if self.done {
            return Ok(None);
        }
        if !self.text.stream {
            let mut all = String::new();
            self.whole(&mut all).await?;
            self.done = true;
            return Ok(Some((all, true)));
        }
        match self.generation.events.recv().await {
            Some(Event::Token { index, last }) => {
                Ok(Some((self.engine.piece(self.generation.text_start, index).to_string(), last)))
            }
            Some(Event::Done(_)) => {
                self.done = true;
                Ok(None)
            }
            None => Err(ServerError::unavailable("the batcher stopped before the request finished")),
        }
    }

    /// Gathers the whole text (with the prompt first unless excluded).
    async fn whole(&mut self, out: &mut String) -> ServerResult<()> {
        if !self.text.exclude_input_in_output {
            out.push_str(&self.text.text_input);
        }
        while let Some(event) = self.generation.events.recv().await {
            match event {
                Event::Token { index, .. } => out.push_str(self.engine.piece(self.generation.text_start, index)),
                Event::Done(_) => return Ok(()),
            }
        }
        Err(ServerError::unavailable("the batcher stopped before the request finished"))
    }

    fn into_sse(self) -> Response {
        let model = self.engine.name.clone();
        let body = futures::stream::unfold(Some(self), move |state| {
            let model = model.clone();
            async move {
                let mut pieces = state?;
                match pieces.next().await {
                    Ok(Some((text, _))) => Some((Ok::<_, Infallible>(sse(&output(&model, &text))), Some(pieces))),
                    Ok(None) => None,
                    Err(e) => Some((Ok(error_event(&e.message)), None)),
                }
            }
        });
        let mut response = Response::new(Body::from_stream(body.boxed()));
        let content_type = HeaderValue::from_static("text/event-stream; charset=utf-8");
        response.headers_mut().insert(CONTENT_TYPE, content_type);
        response
    }
}

/// An error after the stream began, framed as Triton frames it.
fn error_event(message: &str) -> bytes::Bytes {
    sse(&json!({ "error": message }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes real Triton 2.51 sends when a decoupled model fails after its first response
    /// (tests/interop/test_triton_generate.py checks Triton still sends exactly these).
    #[test]
    fn an_error_mid_stream_is_framed_as_tritons() {
        assert_eq!(&error_event("failed on purpose")[..], b"data: {\"error\":\"failed on purpose\"}\n\n");
    }

    #[test]
    fn parameters_take_tritons_types_only() {
        let e = parse_body(br#"{"text_input": "a", "parameters": {"n": [1]}}"#).unwrap_err();
        assert_eq!(
            e.message,
            "Converting keyword: 'parameters': parameter 'n' has invalid type. It should be either 'int', 'bool', or 'string'."
        );
        assert!(parse_body(br#"{"text_input": "a", "parameters": {"temperature": 0.5, "seed": 3}}"#).is_ok());
        let e = parse_body(b"{").unwrap_err();
        assert!(e.message.starts_with("failed to parse the request JSON buffer: "), "{}", e.message);
    }
}
