//! What the generative twin's HTTP front ends share (OpenAI's chat and completions, Anthropic
//! Messages, OpenAI Responses): a body read within the server's limit, the wall clock, named
//! Server-Sent Events, and a generation read as reasoning and answer pieces, whole or streamed.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{HeaderValue, CONTENT_TYPE};
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use super::core::InferenceServer;
use super::llm::{Event, Finish, Generation, LlmEngine};

/// A body over `--max-request-bytes`; each protocol words it its own way.
pub struct TooLarge {
    pub limit: usize,
}

impl TooLarge {
    pub fn message(&self) -> String {
        format!("the request body exceeds the server's limit of {} bytes", self.limit)
    }
}

/// The request's headers and whole body.
pub async fn read_body(core: &InferenceServer, request: Request) -> Result<(HeaderMap, Bytes), TooLarge> {
    let limit = core.options.max_request_bytes;
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| TooLarge { limit })?;
    Ok((parts.headers, bytes))
}

pub fn unix_seconds() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A random id with this prefix (`msg_`, `resp_`, ...).
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}{:032x}", rand::random::<u128>())
}

/// One named Server-Sent Event: `event: NAME`, then `value` as its data.
pub fn named_event(out: &mut Vec<u8>, name: &str, value: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    serde_json::to_writer(&mut *out, value).expect("JSON values serialize");
    out.extend_from_slice(b"\n\n");
}

/// A whole answer: its reasoning, its text and how it ended.
pub struct Answer {
    pub reasoning: String,
    pub text: String,
    pub finish: Finish,
}

/// Reads a generation to its end; `None` when the batcher stopped first.
pub async fn collect(engine: &LlmEngine, mut generation: Generation) -> Option<Answer> {
    let (mut reasoning, mut text) = (String::new(), String::new());
    while let Some(event) = generation.events.recv().await {
        match event {
            Event::Token { index, .. } => {
                let into = if generation.is_reasoning(index) { &mut reasoning } else { &mut text };
                into.push_str(engine.piece(generation.text_start, index));
            }
            Event::Done(finish) => return Some(Answer { reasoning, text, finish }),
        }
    }
    None
}

/// What a streamed answer's writer is told, in order.
pub enum Step<'a> {
    /// One generated token's text; `reasoning`: it belongs to the reasoning, not the answer.
    Token {
        reasoning: bool,
        text: &'a str,
    },
    Done(&'a Finish),
}

/// Turns a generation's steps into a protocol's event bytes.
pub trait StreamWriter: Send + 'static {
    /// What goes out before the first token (sent at once).
    fn start(&mut self) -> Vec<u8>;
    /// What one step writes.
    fn step(&mut self, step: Step<'_>) -> Vec<u8>;
}

/// Streams a generation through `writer` as `text/event-stream`. The stream ends after the
/// writer's last bytes, or when the batcher stops; dropping it (the client went away) drops the
/// generation, which the batcher then aborts.
pub fn event_stream<W: StreamWriter>(engine: Arc<LlmEngine>, generation: Generation, mut writer: W) -> Response {
    let head = Bytes::from(writer.start());
    let state = Some((engine, generation, writer));
    let rest = futures::stream::unfold(state, |state| async move {
        let (engine, mut generation, mut writer) = state?;
        match generation.events.recv().await? {
            Event::Token { index, .. } => {
                let text = engine.piece(generation.text_start, index);
                let bytes = writer.step(Step::Token { reasoning: generation.is_reasoning(index), text });
                Some((Ok::<_, Infallible>(Bytes::from(bytes)), Some((engine, generation, writer))))
            }
            Event::Done(finish) => Some((Ok(Bytes::from(writer.step(Step::Done(&finish)))), None)),
        }
    });
    let body = futures::stream::once(async move { Ok::<_, Infallible>(head) }).chain(rest);
    let mut response = Response::new(Body::from_stream(body.boxed()));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_event_is_its_name_then_its_data() {
        let mut out = Vec::new();
        named_event(&mut out, "ping", &serde_json::json!({"type": "ping"}));
        assert_eq!(out, b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
    }
}
