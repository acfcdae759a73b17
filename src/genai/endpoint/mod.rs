//! What each generative endpoint is sent and what its answers mean: OpenAI chat, completions
//! and embeddings, Triton's generate extension, Anthropic Messages ([`anthropic`]), OpenAI
//! Responses ([`responses`]) and Cohere-shaped rerank. A request body is built once per request
//! from the prompt (and, in a multi-turn conversation, the turns before it); every SSE event or
//! whole body is read into a [`Piece`]: the answer text and the reasoning text it carries, the
//! server's `usage`, an error.

mod anthropic;
mod responses;

use serde_json::{json, Map, Value};

pub use crate::plan::generative::EndpointType;

impl EndpointType {
    /// The path requests go to (`--endpoint` overrides it).
    pub fn path(self, model: &str, streaming: bool) -> String {
        match self {
            EndpointType::Chat => "/v1/chat/completions".into(),
            EndpointType::Completions => "/v1/completions".into(),
            EndpointType::Embeddings => "/v1/embeddings".into(),
            EndpointType::Generate if streaming => format!("/v2/models/{model}/generate_stream"),
            EndpointType::Generate => format!("/v2/models/{model}/generate"),
            // gRPC: the service path is fixed; the URL is the server's gRPC address.
            EndpointType::Kserve => String::new(),
            EndpointType::Messages => "/v1/messages".into(),
            EndpointType::Responses => "/v1/responses".into(),
            EndpointType::CohereRankings => "/v2/rerank".into(),
        }
    }

    /// Whether the endpoint produces tokens (embeddings and rankings do not: no TTFT, ITL or
    /// OSL, one answer).
    pub fn produces_tokens(self) -> bool {
        !matches!(self, EndpointType::Embeddings | EndpointType::CohereRankings)
    }

    /// Headers the endpoint's protocol asks for, unless the user sent their own (`-H`).
    pub fn default_headers(self) -> &'static [(&'static str, &'static str)] {
        match self {
            // AIPerf's and the Anthropic SDK's API version.
            EndpointType::Messages => &[("anthropic-version", anthropic::API_VERSION)],
            _ => &[],
        }
    }
}

/// The role of a rankings request's passages among its messages (the query is the `user` one).
pub const DOCUMENT_ROLE: &str = "document";

/// One message of a conversation so far (chat sends them all; the others send the last).
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

/// Everything a request body is made of besides the messages.
#[derive(Clone, Debug, Default)]
pub struct BodyOptions {
    pub model: String,
    pub streaming: bool,
    /// `max_tokens` (with `ignore_eos`, so the server makes exactly that many).
    pub max_tokens: Option<u32>,
    /// `--extra-inputs`: merged into the body last, so they win.
    pub extra: Map<String, Value>,
}

/// The JSON body of one request.
pub fn body(endpoint: EndpointType, messages: &[Message], options: &BodyOptions) -> Value {
    let last = messages.last().map(|m| m.content.as_str()).unwrap_or_default();
    let history = || messages.iter().filter(|m| m.role != DOCUMENT_ROLE);
    let mut body = match endpoint {
        EndpointType::Chat => {
            let messages: Vec<Value> = history().map(|m| json!({"role": m.role, "content": m.content})).collect();
            json!({"model": options.model, "messages": messages})
        }
        EndpointType::Completions => json!({"model": options.model, "prompt": last}),
        EndpointType::Embeddings => json!({"model": options.model, "input": [last]}),
        // Kserve sends tensors (see `kserve::request`); this JSON is what they say.
        EndpointType::Generate | EndpointType::Kserve => json!({"text_input": last, "parameters": {}}),
        EndpointType::Messages => anthropic::body(&options.model, history(), options),
        EndpointType::Responses => responses::body(&options.model, history(), options),
        EndpointType::CohereRankings => {
            let query = messages.iter().find(|m| m.role != DOCUMENT_ROLE).map_or("", |m| m.content.as_str());
            let documents: Vec<&str> =
                messages.iter().filter(|m| m.role == DOCUMENT_ROLE).map(|m| m.content.as_str()).collect();
            json!({"model": options.model, "query": query, "documents": documents})
        }
    };
    let map = body.as_object_mut().expect("a JSON object");
    let target = match endpoint {
        EndpointType::Generate | EndpointType::Kserve => {
            map.get_mut("parameters").and_then(Value::as_object_mut).expect("parameters")
        }
        _ => map,
    };
    if matches!(
        endpoint,
        EndpointType::Chat | EndpointType::Completions | EndpointType::Generate | EndpointType::Kserve
    ) {
        if options.streaming {
            target.insert("stream".into(), Value::Bool(true));
            if !matches!(endpoint, EndpointType::Generate | EndpointType::Kserve) {
                target.insert("stream_options".into(), json!({"include_usage": true}));
            }
        }
        // Triton's vLLM backend repeats the prompt before a non-streamed answer unless told
        // not to; the output tokens are counted from the text.
        if endpoint == EndpointType::Generate {
            target.insert("exclude_input_in_output".into(), Value::Bool(true));
        }
        if let Some(n) = options.max_tokens {
            target.insert("max_tokens".into(), n.into());
            target.insert("ignore_eos".into(), Value::Bool(true));
        }
    }
    for (key, value) in &options.extra {
        target.insert(key.clone(), value.clone());
    }
    body
}

/// The server's own token counts (OpenAI `usage`, or Anthropic's and Responses' names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    /// All generated tokens, reasoning included (as vLLM and OpenAI count them).
    pub completion_tokens: Option<u64>,
    /// `completion_tokens_details.reasoning_tokens` (`output_tokens_details` in Responses).
    pub reasoning_tokens: Option<u64>,
    /// Prompt tokens read from the server's prefix cache: `prompt_tokens_details.cached_tokens`
    /// (`input_tokens_details` in Responses, `cache_read_input_tokens` in Messages).
    pub cached_tokens: Option<u64>,
}

impl Usage {
    /// Reads a `usage` object: `prompt_tokens` or `input_tokens`, `completion_tokens` or
    /// `output_tokens`, and the reasoning tokens of their details.
    pub fn of(usage: &Value) -> Usage {
        let first = |keys: &[&str]| keys.iter().find_map(|k| usage.get(*k).and_then(Value::as_u64));
        // Anthropic's details name them `thinking_tokens`.
        let reasoning = [
            ("completion_tokens_details", "reasoning_tokens"),
            ("output_tokens_details", "reasoning_tokens"),
            ("output_tokens_details", "thinking_tokens"),
        ]
        .iter()
        .find_map(|(details, key)| usage.get(*details).and_then(|d| d.get(*key)).and_then(Value::as_u64));
        let cached = [("prompt_tokens_details", "cached_tokens"), ("input_tokens_details", "cached_tokens")]
            .iter()
            .find_map(|(details, key)| usage.get(*details).and_then(|d| d.get(*key)).and_then(Value::as_u64))
            .or_else(|| first(&["cache_read_input_tokens"]));
        Usage {
            prompt_tokens: first(&["prompt_tokens", "input_tokens"]),
            completion_tokens: first(&["completion_tokens", "output_tokens"]),
            reasoning_tokens: reasoning,
            cached_tokens: cached,
        }
    }

    /// This usage with a later event's counts laid over it (Anthropic splits its usage over
    /// `message_start` and `message_delta`).
    pub fn merged(self, later: Usage) -> Usage {
        Usage {
            prompt_tokens: later.prompt_tokens.or(self.prompt_tokens),
            completion_tokens: later.completion_tokens.or(self.completion_tokens),
            reasoning_tokens: later.reasoning_tokens.or(self.reasoning_tokens),
            cached_tokens: later.cached_tokens.or(self.cached_tokens),
        }
    }
}

/// What one event (or a whole non-streamed body) carried.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Piece {
    /// Answer text; `None` when the event had none (a role-only first chunk, a usage chunk).
    pub text: Option<String>,
    /// Reasoning text (chat `reasoning`/`reasoning_content`, a Messages `thinking_delta`, a
    /// Responses reasoning delta): tokens before the answer.
    pub reasoning: Option<String>,
    pub usage: Option<Usage>,
    /// `data: [DONE]`, `message_stop`, `response.completed`: the stream is over.
    pub done: bool,
    /// An error the server put in the stream or body.
    pub error: Option<String>,
    /// A whole answer with content but no text (embeddings' vectors, rankings' results).
    pub untimed_answer: bool,
}

impl Piece {
    /// Whether the event carries generated text of either kind.
    pub fn has_text(&self) -> bool {
        self.text.is_some() || self.reasoning.is_some()
    }
}

/// A non-empty string field of `value`.
fn text_at(value: Option<&Value>, key: &str) -> Option<String> {
    value.and_then(|v| v.get(key)).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string)
}

/// Reads one SSE event (its `event:` name, when it had one, and its `data`) or one whole JSON
/// body (no name).
pub fn parse(endpoint: EndpointType, event: Option<&str>, data: &str) -> Piece {
    let data = data.trim();
    if data == "[DONE]" {
        return Piece { done: true, ..Piece::default() };
    }
    let value: Value = match serde_json::from_str(data) {
        Ok(value) => value,
        Err(e) => return Piece { error: Some(format!("not JSON ({e})")), ..Piece::default() },
    };
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        let message = error.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| match error {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        return Piece { error: Some(message), ..Piece::default() };
    }
    // The event's kind: its JSON `type` (Anthropic and Responses repeat the event name there),
    // else the SSE `event:` name.
    let kind = value.get("type").and_then(Value::as_str).or(event);
    match endpoint {
        EndpointType::Messages => return anthropic::parse(kind, &value),
        EndpointType::Responses => return responses::parse(kind, &value),
        _ => {}
    }
    let usage = value.get("usage").filter(|u| u.is_object()).map(Usage::of);
    let first_choice = value.get("choices").and_then(|c| c.get(0));
    let (text, reasoning) = match endpoint {
        EndpointType::Chat => {
            let message = first_choice.and_then(|c| c.get("delta").or_else(|| c.get("message")));
            // vLLM's field is `reasoning` now and `reasoning_content` before; read both.
            let reasoning = text_at(message, "reasoning_content").or_else(|| text_at(message, "reasoning"));
            (text_at(message, "content"), reasoning)
        }
        EndpointType::Completions => (text_at(first_choice, "text"), None),
        EndpointType::Generate | EndpointType::Kserve => (text_at(Some(&value), "text_output"), None),
        _ => (None, None),
    };
    let untimed_answer = match endpoint {
        EndpointType::Embeddings => value.get("data").is_some_and(Value::is_array),
        EndpointType::CohereRankings => value.get("results").is_some_and(Value::is_array),
        _ => false,
    };
    let usage = match (endpoint, usage) {
        // vLLM's rerank counts what it read as `total_tokens`: the prompt of a rankings request.
        (EndpointType::CohereRankings, Some(u)) if u.prompt_tokens.is_none() => {
            let total = value["usage"].get("total_tokens").and_then(Value::as_u64);
            Some(Usage { prompt_tokens: total, ..u })
        }
        (_, usage) => usage,
    };
    Piece { text, reasoning, usage, done: false, error: None, untimed_answer }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Vec<Message> {
        vec![Message { role: "user", content: text.into() }]
    }

    #[test]
    fn chat_streaming_body_asks_for_usage_and_exact_length() {
        let options = BodyOptions { model: "llm".into(), streaming: true, max_tokens: Some(64), ..Default::default() };
        let body = body(EndpointType::Chat, &user("hi"), &options);
        assert_eq!(
            body,
            json!({"model": "llm", "messages": [{"role": "user", "content": "hi"}], "stream": true,
                   "stream_options": {"include_usage": true}, "max_tokens": 64, "ignore_eos": true})
        );
    }

    #[test]
    fn generate_puts_options_in_parameters_and_extra_inputs_win() {
        let mut extra = Map::new();
        extra.insert("max_tokens".into(), 5.into());
        extra.insert("temperature".into(), json!(0.5));
        let options = BodyOptions { model: "m".into(), streaming: true, max_tokens: Some(64), extra };
        let body = body(EndpointType::Generate, &user("x"), &options);
        assert_eq!(
            body,
            json!({"text_input": "x", "parameters": {"stream": true, "exclude_input_in_output": true,
                   "max_tokens": 5, "ignore_eos": true, "temperature": 0.5}})
        );
        assert_eq!(EndpointType::Generate.path("m", true), "/v2/models/m/generate_stream");
    }

    #[test]
    fn embeddings_send_input_only() {
        let options = BodyOptions { model: "e".into(), streaming: true, max_tokens: Some(3), ..Default::default() };
        assert_eq!(body(EndpointType::Embeddings, &user("a"), &options), json!({"model": "e", "input": ["a"]}));
    }

    #[test]
    fn chat_chunks_role_content_usage_and_done() {
        let role = parse(EndpointType::Chat, None, r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#);
        assert_eq!(role.text, None);
        let content = parse(EndpointType::Chat, None, r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#);
        assert_eq!(content.text.as_deref(), Some("Hel"));
        let usage = parse(
            EndpointType::Chat,
            None,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
        );
        assert_eq!(usage.usage, Some(Usage { prompt_tokens: Some(7), completion_tokens: Some(3), ..Usage::default() }));
        assert_eq!(usage.text, None);
        assert!(parse(EndpointType::Chat, None, "[DONE]").done);
        let whole = parse(EndpointType::Chat, None, r#"{"choices":[{"message":{"content":"ok"}}],"usage":null}"#);
        assert_eq!((whole.text.as_deref(), whole.usage), (Some("ok"), None));
    }

    #[test]
    fn errors_in_a_stream_or_body_are_read() {
        let openai =
            parse(EndpointType::Completions, None, r#"{"error":{"message":"model 'x' not found","type":"x"}}"#);
        assert_eq!(openai.error.as_deref(), Some("model 'x' not found"));
        let triton = parse(EndpointType::Generate, None, r#"{"error":"boom"}"#);
        assert_eq!(triton.error.as_deref(), Some("boom"));
        assert!(parse(EndpointType::Generate, None, "{oops").error.is_some());
        assert_eq!(
            parse(EndpointType::Generate, None, r#"{"text_output":"t","model_name":"m"}"#).text.as_deref(),
            Some("t")
        );
    }
}
