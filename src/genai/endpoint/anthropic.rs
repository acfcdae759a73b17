//! Anthropic Messages (`POST /v1/messages`), as AIPerf 0.13 sends it and the Anthropic SDK
//! reads it: `max_tokens` is required (1,024 when no length is asked for), `stream` only when
//! streaming, and an answer streamed as named events where each `text_delta` (answer) and
//! `thinking_delta` (reasoning) is a token event. `message_start` carries the input tokens and
//! `message_delta` the final output tokens; `ping`, the block starts and stops carry nothing.

use serde_json::{json, Value};

use super::{text_at, BodyOptions, Message, Piece, Usage};

/// The `anthropic-version` header AIPerf and the SDK send.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` when none is asked for (AIPerf's; the API refuses a request without one).
const DEFAULT_MAX_TOKENS: u32 = 1024;

pub fn body<'a>(model: &str, messages: impl Iterator<Item = &'a Message>, options: &BodyOptions) -> Value {
    // The API takes a system prompt beside the messages, not as one of them.
    let (system, messages): (Vec<&Message>, Vec<&Message>) = messages.partition(|m| m.role == "system");
    let messages: Vec<Value> = messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
    let mut body = json!({
        "model": model,
        "messages": messages,
        "max_tokens": options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
    });
    if !system.is_empty() {
        body["system"] = system.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n").into();
    }
    if options.streaming {
        body["stream"] = true.into();
    }
    // An asked-for length is exact, as for chat (vLLM's and the twin's `ignore_eos`).
    if options.max_tokens.is_some() {
        body["ignore_eos"] = true.into();
    }
    body
}

/// One event (`kind` is its type) or a whole `type: message` answer.
pub fn parse(kind: Option<&str>, value: &Value) -> Piece {
    match kind {
        Some("message") => {
            let blocks = value.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            let joined = |block_type: &str, key: &str| {
                let text: String = blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some(block_type))
                    .filter_map(|b| b.get(key).and_then(Value::as_str))
                    .collect();
                Some(text).filter(|t| !t.is_empty())
            };
            Piece {
                text: joined("text", "text"),
                reasoning: joined("thinking", "thinking"),
                usage: value.get("usage").map(Usage::of),
                ..Piece::default()
            }
        }
        Some("content_block_delta") => {
            let delta = value.get("delta");
            match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                Some("text_delta") => Piece { text: text_at(delta, "text"), ..Piece::default() },
                Some("thinking_delta") => Piece { reasoning: text_at(delta, "thinking"), ..Piece::default() },
                // signature_delta, input_json_delta: no text of the answer.
                _ => Piece::default(),
            }
        }
        Some("message_start") => {
            // Its `output_tokens` is a placeholder (1) until `message_delta` gives the count.
            let usage = value.get("message").and_then(|m| m.get("usage")).map(Usage::of);
            Piece { usage: usage.map(|u| Usage { completion_tokens: None, ..u }), ..Piece::default() }
        }
        Some("message_delta") => Piece { usage: value.get("usage").map(Usage::of), ..Piece::default() },
        Some("message_stop") => Piece { done: true, ..Piece::default() },
        // ping, content_block_start, content_block_stop, and what a newer API adds.
        _ => Piece::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{body as any_body, parse as any_parse, EndpointType};
    use super::*;
    use crate::genai::sse::{SseEvent, SseReader};

    /// A streamed answer with a thinking block first, as the API writes it (the SDK's event
    /// shapes: `RawMessageStartEvent`, `RawContentBlockDeltaEvent` with `ThinkingDelta`,
    /// `SignatureDelta` and `TextDelta`, `RawMessageDeltaEvent` with `MessageDeltaUsage`).
    const THINKING_STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"llm\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

    fn events(stream: &str) -> Vec<SseEvent> {
        let mut reader = SseReader::new();
        let mut out = Vec::new();
        let now = std::time::Instant::now();
        reader.feed(stream.as_bytes(), now, &mut out);
        reader.finish(now, &mut out);
        out
    }

    #[test]
    fn the_body_is_aiperfs_with_max_tokens_always_and_stream_only_when_streaming() {
        let user = [Message { role: "user", content: "hi".into() }];
        let plain = BodyOptions { model: "llm".into(), ..Default::default() };
        assert_eq!(
            any_body(EndpointType::Messages, &user, &plain),
            json!({"model": "llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1024})
        );
        let streamed = BodyOptions { streaming: true, max_tokens: Some(16), ..plain };
        assert_eq!(
            any_body(EndpointType::Messages, &user, &streamed),
            json!({"model": "llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16,
                   "stream": true, "ignore_eos": true})
        );
        assert_eq!(EndpointType::Messages.path("llm", true), "/v1/messages");
        assert_eq!(EndpointType::Messages.default_headers(), &[("anthropic-version", "2023-06-01")]);
    }

    #[test]
    fn only_text_and_thinking_deltas_are_token_events_and_usage_is_split_over_two_events() {
        let pieces: Vec<Piece> = events(THINKING_STREAM)
            .iter()
            .map(|e| any_parse(EndpointType::Messages, e.event.as_deref(), &e.data))
            .collect();
        assert_eq!(pieces.len(), 12, "every event is read, ping included");
        let timed: Vec<(Option<&str>, Option<&str>)> =
            pieces.iter().filter(|p| p.has_text()).map(|p| (p.reasoning.as_deref(), p.text.as_deref())).collect();
        assert_eq!(timed, vec![(Some("Let me"), None), (None, Some("Hello")), (None, Some(" there"))]);
        let usage = pieces.iter().filter_map(|p| p.usage).fold(Usage::default(), Usage::merged);
        assert_eq!(usage, Usage { prompt_tokens: Some(25), completion_tokens: Some(15), ..Usage::default() });
        assert!(pieces.last().unwrap().done, "message_stop ends the stream");
        assert_eq!(pieces.iter().filter(|p| p.done).count(), 1);
    }

    #[test]
    fn a_whole_message_and_an_error_event_are_read() {
        let whole = r#"{"id":"msg_1","type":"message","role":"assistant","model":"llm",
            "content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"text","text":"Hi"}],
            "stop_reason":"max_tokens","usage":{"input_tokens":3,"output_tokens":4,
            "output_tokens_details":{"thinking_tokens":2}}}"#;
        let piece = any_parse(EndpointType::Messages, None, whole);
        assert_eq!((piece.text.as_deref(), piece.reasoning.as_deref()), (Some("Hi"), Some("hmm")));
        assert_eq!(
            piece.usage,
            Some(Usage {
                prompt_tokens: Some(3),
                completion_tokens: Some(4),
                reasoning_tokens: Some(2),
                ..Usage::default()
            })
        );
        let error = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(any_parse(EndpointType::Messages, Some("error"), error).error.as_deref(), Some("Overloaded"));
    }
}
