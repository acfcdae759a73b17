//! Anthropic's Messages API over the generative twin: `POST /v1/messages`, one message object or
//! Server-Sent Events named as Anthropic names them (`message_start`, `content_block_start`,
//! `ping`, `content_block_delta`, `content_block_stop`, `message_delta`, `message_stop`). A
//! reasoning model's reasoning is a `thinking` block (`thinking_delta`s) before the text block.
//! `x-api-key` and `anthropic-version` are accepted and not required; errors are Anthropic's
//! `{"type": "error", "error": {type, message}}`. `usage.input_tokens` is the whole prompt, as
//! vLLM's Messages route counts it, and `cache_read_input_tokens` the part of it the twin's
//! prefix cache held. `stop_sequences` are accepted; the twin's text never stops on one.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::core::InferenceServer;
use super::error::{ErrorKind, ServerError};
use super::listen::ReceivedAt;
use super::llm::{Finish, FinishReason, GenerateError, GenerateParams};
use super::llm_http::{collect, event_stream, named_event, random_id, read_body, Step, StreamWriter};
use super::openai::request_id;

/// The route, merged into the HTTP front end's router.
pub fn routes() -> Router<Arc<InferenceServer>> {
    Router::new().route("/v1/messages", post(messages))
}

/// An Anthropic error response.
#[derive(Debug)]
pub struct MessagesError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl MessagesError {
    fn invalid(message: impl Into<String>) -> MessagesError {
        MessagesError { status: StatusCode::BAD_REQUEST, kind: "invalid_request_error", message: message.into() }
    }
}

impl From<ServerError> for MessagesError {
    fn from(e: ServerError) -> Self {
        let (status, kind) = match e.kind {
            ErrorKind::InvalidArg | ErrorKind::AlreadyExists => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found_error"),
            ErrorKind::PermissionDenied => (StatusCode::FORBIDDEN, "permission_error"),
            ErrorKind::Exhausted => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error"),
            // Anthropic's "overloaded": the engine cannot take work now.
            ErrorKind::Unavailable => (StatusCode::from_u16(529).expect("a valid status"), "overloaded_error"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "api_error"),
        };
        MessagesError { status, kind, message: e.message }
    }
}

impl From<GenerateError> for MessagesError {
    fn from(e: GenerateError) -> Self {
        match e {
            GenerateError::Refused(r) => MessagesError::invalid(r.message),
            GenerateError::Server(e) => e.into(),
        }
    }
}

impl IntoResponse for MessagesError {
    fn into_response(self) -> Response {
        let body = json!({ "type": "error", "error": { "type": self.kind, "message": self.message } });
        (self.status, Json(body)).into_response()
    }
}

type MessagesResult<T> = Result<T, MessagesError>;

/// The request fields the twin reads; others (`top_k`, `thinking`, `tools`, ...) are ignored.
#[derive(Deserialize)]
struct MessagesRequest {
    model: String,
    messages: Vec<Message>,
    system: Option<Content>,
    max_tokens: Option<i64>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stop_sequences: Vec<String>,
    metadata: Option<Value>,
    temperature: Option<f64>,
    /// vLLM's extension: generate exactly the maximum (a benchmark's fixed output length).
    #[serde(default)]
    ignore_eos: bool,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    content: Content,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

impl Content {
    /// The text blocks' text; earlier turns' thinking is left out, as Anthropic leaves it out of
    /// the context.
    fn push_text(&self, field: &str, texts: &mut Vec<String>) -> MessagesResult<()> {
        match self {
            Content::Text(t) => texts.push(t.clone()),
            Content::Blocks(blocks) => {
                for b in blocks {
                    match (b.kind.as_str(), &b.text) {
                        ("text", Some(t)) => texts.push(t.clone()),
                        ("thinking" | "redacted_thinking", _) => {}
                        (kind, _) => {
                            let why = format!(
                                "{field}: content blocks of type '{kind}' are not supported by this server (text only)"
                            );
                            return Err(MessagesError::invalid(why));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The prompt: the system text, then each message's text, one per line.
fn prompt(r: &MessagesRequest) -> MessagesResult<String> {
    if r.messages.is_empty() {
        return Err(MessagesError::invalid("messages: at least one message is required"));
    }
    let mut texts = Vec::with_capacity(r.messages.len() + 1);
    if let Some(system) = &r.system {
        system.push_text("system", &mut texts)?;
    }
    for (i, m) in r.messages.iter().enumerate() {
        if m.role != "user" && m.role != "assistant" {
            return Err(MessagesError::invalid(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant', got '{}'",
                m.role
            )));
        }
        m.content.push_text(&format!("messages.{i}.content"), &mut texts)?;
    }
    Ok(texts.join("\n"))
}

/// Checks the fields Anthropic checks; `max_tokens` is required.
fn max_tokens(r: &MessagesRequest) -> MessagesResult<usize> {
    if let Some(t) = r.temperature.filter(|t| !(0.0..=1.0).contains(t)) {
        return Err(MessagesError::invalid(format!("temperature: Input should be between 0 and 1, got {t}")));
    }
    if r.stop_sequences.iter().any(|s| s.trim().is_empty()) {
        return Err(MessagesError::invalid("stop_sequences: each stop sequence must contain non-whitespace"));
    }
    if r.metadata.as_ref().is_some_and(|m| !m.is_object()) {
        return Err(MessagesError::invalid("metadata: Input should be an object"));
    }
    match r.max_tokens {
        None => Err(MessagesError::invalid("max_tokens: Field required")),
        Some(n) if n < 1 => {
            Err(MessagesError::invalid(format!("max_tokens: Input should be greater than or equal to 1, got {n}")))
        }
        Some(n) => Ok(n as usize),
    }
}

async fn messages(State(core): State<Arc<InferenceServer>>, request: Request) -> Response {
    let arrival_ns = ReceivedAt::of(&request);
    run(&core, request, arrival_ns).await.unwrap_or_else(IntoResponse::into_response)
}

async fn run(core: &InferenceServer, request: Request, arrival_ns: u64) -> MessagesResult<Response> {
    let (headers, body) = read_body(core, request).await.map_err(|e| MessagesError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        kind: "request_too_large",
        message: e.message(),
    })?;
    let r: MessagesRequest = serde_json::from_slice(&body)
        .map_err(|e| MessagesError::invalid(format!("the request body is not valid JSON for Messages: {e}")))?;
    let max_tokens = max_tokens(&r)?;
    let prompt = prompt(&r)?;
    let engine = core.llm(&r.model, "").map_err(|e| match e.kind {
        ErrorKind::NotFound => MessagesError {
            status: StatusCode::NOT_FOUND,
            kind: "not_found_error",
            message: format!("model: {}", r.model),
        },
        _ => e.into(),
    })?;
    let id = random_id("msg_");
    let params = GenerateParams {
        prompt,
        max_tokens: Some(max_tokens),
        request_id: request_id(&headers).unwrap_or_else(|| id.clone()),
        arrival_ns,
        ignore_eos: r.ignore_eos,
        ..Default::default()
    };
    let generation = engine.generate(params, core.request_log.clone())?;
    let reply = Reply { id, model: r.model, prompt_tokens: generation.prompt_tokens };
    if r.stream {
        let thinks_first = generation.reasoning_tokens > 0;
        return Ok(event_stream(engine, generation, Stream { reply, thinks_first, open: None, blocks: 0 }));
    }
    let Some(answer) = collect(&engine, generation).await else {
        return Err(ServerError::unavailable("the batcher stopped before the request finished").into());
    };
    let finish = &answer.finish;
    let mut content = Vec::new();
    if finish.reasoning_tokens > 0 {
        content.push(json!({ "type": "thinking", "thinking": answer.reasoning, "signature": SIGNATURE }));
    }
    if finish.completion_tokens > finish.reasoning_tokens || content.is_empty() {
        content.push(json!({ "type": "text", "text": answer.text }));
    }
    let mut message = reply.message(Some(finish));
    message["content"] = Value::Array(content);
    Ok(Json(message).into_response())
}

/// The thinking blocks' signature: opaque, as Anthropic's, and the same for every block.
const SIGNATURE: &str = "perfbench-twin";

/// One request's identity on the wire.
struct Reply {
    id: String,
    model: String,
    prompt_tokens: usize,
}

impl Reply {
    /// The message object, empty and unfinished until `finish`.
    fn message(&self, finish: Option<&Finish>) -> Value {
        let stop_reason = finish.map(|f| stop_reason(f.reason));
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": stop_reason, "stop_sequence": null, "usage": self.usage(finish),
        })
    }

    fn usage(&self, finish: Option<&Finish>) -> Value {
        json!({
            "input_tokens": self.prompt_tokens,
            "output_tokens": finish.map_or(0, |f| f.completion_tokens),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": finish.map_or(0, |f| f.cached_tokens),
        })
    }
}

fn stop_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "max_tokens",
        FinishReason::Stop | FinishReason::Abort => "end_turn",
    }
}

/// A content block of the stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Thinking,
    Text,
}

/// A streamed message between two events.
struct Stream {
    reply: Reply,
    /// A reasoning model's message opens with its thinking block.
    thinks_first: bool,
    open: Option<BlockKind>,
    /// Blocks opened so far (the next block's index).
    blocks: usize,
}

impl Stream {
    fn open(&mut self, out: &mut Vec<u8>, block: BlockKind) {
        let content_block = match block {
            BlockKind::Thinking => json!({ "type": "thinking", "thinking": "", "signature": "" }),
            BlockKind::Text => json!({ "type": "text", "text": "" }),
        };
        let event = json!({ "type": "content_block_start", "index": self.blocks, "content_block": content_block });
        named_event(out, "content_block_start", &event);
        if self.blocks == 0 {
            named_event(out, "ping", &json!({ "type": "ping" }));
        }
        self.open = Some(block);
        self.blocks += 1;
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        let index = self.blocks - 1;
        if self.open.take() == Some(BlockKind::Thinking) {
            let delta = json!({ "type": "signature_delta", "signature": SIGNATURE });
            named_event(
                out,
                "content_block_delta",
                &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
            );
        }
        named_event(out, "content_block_stop", &json!({ "type": "content_block_stop", "index": index }));
    }
}

impl StreamWriter for Stream {
    fn start(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        named_event(
            &mut out,
            "message_start",
            &json!({ "type": "message_start", "message": self.reply.message(None) }),
        );
        let first = if self.thinks_first { BlockKind::Thinking } else { BlockKind::Text };
        self.open(&mut out, first);
        out
    }

    fn step(&mut self, step: Step<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        match step {
            Step::Token { reasoning, text } => {
                let block = if reasoning { BlockKind::Thinking } else { BlockKind::Text };
                if self.open != Some(block) {
                    if self.open.is_some() {
                        self.close(&mut out);
                    }
                    self.open(&mut out, block);
                }
                let delta = match block {
                    BlockKind::Thinking => json!({ "type": "thinking_delta", "thinking": text }),
                    BlockKind::Text => json!({ "type": "text_delta", "text": text }),
                };
                let event = json!({ "type": "content_block_delta", "index": self.blocks - 1, "delta": delta });
                named_event(&mut out, "content_block_delta", &event);
            }
            Step::Done(finish) => {
                if self.open.is_some() {
                    self.close(&mut out);
                }
                let delta = json!({ "stop_reason": stop_reason(finish.reason), "stop_sequence": null });
                let event = json!({ "type": "message_delta", "delta": delta, "usage": self.reply.usage(Some(finish)) });
                named_event(&mut out, "message_delta", &event);
                named_event(&mut out, "message_stop", &json!({ "type": "message_stop" }));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(bytes: &[u8]) -> Vec<String> {
        let text = std::str::from_utf8(bytes).unwrap();
        text.lines().filter_map(|l| l.strip_prefix("event: ")).map(str::to_string).collect()
    }

    fn finish(completion_tokens: usize, reasoning_tokens: usize) -> Finish {
        Finish { reason: FinishReason::Length, prompt_tokens: 3, completion_tokens, cached_tokens: 0, reasoning_tokens }
    }

    #[test]
    fn thinking_opens_the_message_and_the_text_block_follows_it() {
        let reply = Reply { id: "msg_1".into(), model: "m".into(), prompt_tokens: 3 };
        let mut s = Stream { reply, thinks_first: true, open: None, blocks: 0 };
        let mut out = s.start();
        out.extend(s.step(Step::Token { reasoning: true, text: " a" }));
        out.extend(s.step(Step::Token { reasoning: false, text: " b" }));
        out.extend(s.step(Step::Done(&finish(2, 1))));
        let expected = [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ];
        assert_eq!(names(&out), expected);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""delta":{"thinking":" a","type":"thinking_delta"}"#), "{text}");
        assert!(text.contains(r#""content_block":{"text":"","type":"text"},"index":1"#), "{text}");
        assert!(text.contains(r#""stop_reason":"max_tokens""#), "{text}");
    }

    #[test]
    fn missing_max_tokens_is_anthropics_400() {
        let r: MessagesRequest = serde_json::from_value(json!({"model": "m", "messages": []})).unwrap();
        let e = max_tokens(&r).unwrap_err();
        assert_eq!(
            (e.status, e.kind, e.message.as_str()),
            (StatusCode::BAD_REQUEST, "invalid_request_error", "max_tokens: Field required")
        );
    }
}
