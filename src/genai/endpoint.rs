//! What each generative endpoint is sent and what its answers mean: OpenAI chat, completions
//! and embeddings, and Triton's generate extension. A request body is built once per request
//! from the prompt (and, in a multi-turn conversation, the turns before it); every SSE event or
//! whole body is read into a [`Piece`]: the text it carries, the server's `usage`, an error.

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
        }
    }

    /// Whether the endpoint produces tokens (embeddings do not: no TTFT, ITL or OSL).
    pub fn produces_tokens(self) -> bool {
        self != EndpointType::Embeddings
    }
}

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
    let mut body = match endpoint {
        EndpointType::Chat => {
            let messages: Vec<Value> = messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
            json!({"model": options.model, "messages": messages})
        }
        EndpointType::Completions => json!({"model": options.model, "prompt": last}),
        EndpointType::Embeddings => json!({"model": options.model, "input": [last]}),
        // Kserve sends tensors (see `kserve::request`); this JSON is what they say.
        EndpointType::Generate | EndpointType::Kserve => json!({"text_input": last, "parameters": {}}),
    };
    let map = body.as_object_mut().expect("a JSON object");
    let target = match endpoint {
        EndpointType::Generate | EndpointType::Kserve => {
            map.get_mut("parameters").and_then(Value::as_object_mut).expect("parameters")
        }
        _ => map,
    };
    if endpoint.produces_tokens() {
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

/// The server's own token counts (OpenAI `usage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
}

/// What one event (or a whole non-streamed body) carried.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Piece {
    /// Generated text; `None` when the event had none (a role-only first chunk, a usage chunk).
    pub text: Option<String>,
    pub usage: Option<Usage>,
    /// `data: [DONE]`: the stream is over.
    pub done: bool,
    /// An error the server put in the stream or body.
    pub error: Option<String>,
    /// An embeddings answer (a response with content but no text).
    pub embedding: bool,
}

/// Reads one SSE `data` or one whole JSON body.
pub fn parse(endpoint: EndpointType, data: &str) -> Piece {
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
    let usage = value.get("usage").filter(|u| u.is_object()).map(|u| Usage {
        prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64),
        completion_tokens: u.get("completion_tokens").and_then(Value::as_u64),
    });
    let first_choice = value.get("choices").and_then(|c| c.get(0));
    let text = match endpoint {
        EndpointType::Chat => first_choice.and_then(|c| {
            let message = c.get("delta").or_else(|| c.get("message"))?;
            ["content", "reasoning_content"].iter().find_map(|k| message.get(*k).and_then(Value::as_str))
        }),
        EndpointType::Completions => first_choice.and_then(|c| c.get("text")).and_then(Value::as_str),
        EndpointType::Generate | EndpointType::Kserve => value.get("text_output").and_then(Value::as_str),
        EndpointType::Embeddings => None,
    };
    let embedding = endpoint == EndpointType::Embeddings && value.get("data").is_some_and(Value::is_array);
    Piece { text: text.filter(|t| !t.is_empty()).map(str::to_string), usage, done: false, error: None, embedding }
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
        let role = parse(EndpointType::Chat, r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#);
        assert_eq!(role.text, None);
        let content = parse(EndpointType::Chat, r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#);
        assert_eq!(content.text.as_deref(), Some("Hel"));
        let usage = parse(
            EndpointType::Chat,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
        );
        assert_eq!(usage.usage, Some(Usage { prompt_tokens: Some(7), completion_tokens: Some(3) }));
        assert_eq!(usage.text, None);
        assert!(parse(EndpointType::Chat, "[DONE]").done);
        let whole = parse(EndpointType::Chat, r#"{"choices":[{"message":{"content":"ok"}}],"usage":null}"#);
        assert_eq!((whole.text.as_deref(), whole.usage), (Some("ok"), None));
    }

    #[test]
    fn errors_in_a_stream_or_body_are_read() {
        let openai = parse(EndpointType::Completions, r#"{"error":{"message":"model 'x' not found","type":"x"}}"#);
        assert_eq!(openai.error.as_deref(), Some("model 'x' not found"));
        let triton = parse(EndpointType::Generate, r#"{"error":"boom"}"#);
        assert_eq!(triton.error.as_deref(), Some("boom"));
        assert!(parse(EndpointType::Generate, "{oops").error.is_some());
        assert_eq!(parse(EndpointType::Generate, r#"{"text_output":"t","model_name":"m"}"#).text.as_deref(), Some("t"));
    }
}
