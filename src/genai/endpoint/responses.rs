//! OpenAI Responses (`POST /v1/responses`), as AIPerf 0.13 sends it and openai-python reads
//! it: `input` is a list of message items, `stream` is always said, the length is
//! `max_output_tokens`. A stream is named events whose JSON `type` repeats the name: each
//! `response.output_text.delta` is an answer token event, each `response.reasoning_text.delta`
//! (vLLM's and openai-python's reasoning event; `response.reasoning_summary_text.delta` too) a
//! reasoning one, and `response.completed` carries the usage and ends the answer.

use serde_json::{json, Value};

use super::{text_at, BodyOptions, Message, Piece, Usage};

pub fn body<'a>(model: &str, messages: impl Iterator<Item = &'a Message>, options: &BodyOptions) -> Value {
    let input: Vec<Value> =
        messages.map(|m| json!({"type": "message", "role": m.role, "content": m.content})).collect();
    let mut body = json!({"model": model, "input": input, "stream": options.streaming});
    if let Some(n) = options.max_tokens {
        body["max_output_tokens"] = n.into();
        body["ignore_eos"] = true.into();
    }
    body
}

/// One event (`kind` is its type) or a whole `object: response` answer.
pub fn parse(kind: Option<&str>, value: &Value) -> Piece {
    let delta = || text_at(Some(value), "delta");
    match kind {
        Some("response.output_text.delta") => Piece { text: delta(), ..Piece::default() },
        Some("response.reasoning_text.delta" | "response.reasoning_summary_text.delta") => {
            Piece { reasoning: delta(), ..Piece::default() }
        }
        Some("response.completed" | "response.incomplete") => {
            let usage = value.get("response").and_then(|r| r.get("usage")).filter(|u| u.is_object());
            Piece { usage: usage.map(Usage::of), done: true, ..Piece::default() }
        }
        Some("response.failed") => {
            let error = value.get("response").and_then(|r| r.get("error"));
            let message = text_at(error, "message").unwrap_or_else(|| "response.failed".into());
            Piece { error: Some(message), ..Piece::default() }
        }
        Some("error") => Piece {
            error: Some(text_at(Some(value), "message").unwrap_or_else(|| value.to_string())),
            ..Piece::default()
        },
        // No type: a whole answer.
        None if value.get("object").and_then(Value::as_str) == Some("response") => whole(value),
        // response.created, in_progress, output_item.*, content_part.*, output_text.done, ...
        _ => Piece::default(),
    }
}

/// A non-streamed answer: the `output_text` parts of its message items and the reasoning
/// text of its reasoning items (vLLM's `content` of `reasoning_text`, OpenAI's `summary`).
fn whole(value: &Value) -> Piece {
    let items = value.get("output").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let parts = |item_type: &str, list: &str, part_type: &str| -> Option<String> {
        let text: String = items
            .iter()
            .filter(|i| i.get("type").and_then(Value::as_str) == Some(item_type))
            .filter_map(|i| i.get(list).and_then(Value::as_array))
            .flatten()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some(part_type))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        Some(text).filter(|t| !t.is_empty())
    };
    Piece {
        text: parts("message", "content", "output_text"),
        reasoning: parts("reasoning", "content", "reasoning_text")
            .or_else(|| parts("reasoning", "summary", "summary_text")),
        usage: value.get("usage").filter(|u| u.is_object()).map(Usage::of),
        ..Piece::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{body as any_body, parse as any_parse, EndpointType};
    use super::*;
    use crate::genai::sse::SseReader;

    /// A streamed answer with reasoning first, in openai-python's event shapes.
    const REASONING_STREAM: &str = "event: response.created\n\
data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n\
event: response.in_progress\n\
data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n\
event: response.output_item.added\n\
data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[],\"content\":[]}}\n\n\
event: response.reasoning_text.delta\n\
data: {\"type\":\"response.reasoning_text.delta\",\"sequence_number\":3,\"item_id\":\"rs_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Think\"}\n\n\
event: response.reasoning_text.done\n\
data: {\"type\":\"response.reasoning_text.done\",\"sequence_number\":4,\"item_id\":\"rs_1\",\"output_index\":0,\"content_index\":0,\"text\":\"Think\"}\n\n\
event: response.output_item.added\n\
data: {\"type\":\"response.output_item.added\",\"sequence_number\":5,\"output_index\":1,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"status\":\"in_progress\",\"content\":[]}}\n\n\
event: response.content_part.added\n\
data: {\"type\":\"response.content_part.added\",\"sequence_number\":6,\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}\n\n\
event: response.output_text.delta\n\
data: {\"type\":\"response.output_text.delta\",\"sequence_number\":7,\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"delta\":\"Hi\",\"logprobs\":[]}\n\n\
event: response.output_text.delta\n\
data: {\"type\":\"response.output_text.delta\",\"sequence_number\":8,\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"delta\":\" you\",\"logprobs\":[]}\n\n\
event: response.output_text.done\n\
data: {\"type\":\"response.output_text.done\",\"sequence_number\":9,\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"text\":\"Hi you\",\"logprobs\":[]}\n\n\
event: response.content_part.done\n\
data: {\"type\":\"response.content_part.done\",\"sequence_number\":10,\"item_id\":\"msg_1\",\"output_index\":1,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"Hi you\",\"annotations\":[]}}\n\n\
event: response.output_item.done\n\
data: {\"type\":\"response.output_item.done\",\"sequence_number\":11,\"output_index\":1,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi you\",\"annotations\":[]}]}}\n\n\
event: response.completed\n\
data: {\"type\":\"response.completed\",\"sequence_number\":12,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"usage\":{\"input_tokens\":9,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":3,\"output_tokens_details\":{\"reasoning_tokens\":1},\"total_tokens\":12}}}\n\n";

    #[test]
    fn the_body_is_aiperfs_input_items_with_stream_always_said() {
        let messages = [
            Message { role: "user", content: "q1".into() },
            Message { role: "assistant", content: "a1".into() },
            Message { role: "user", content: "q2".into() },
        ];
        let options = BodyOptions { model: "llm".into(), max_tokens: Some(8), ..Default::default() };
        assert_eq!(
            any_body(EndpointType::Responses, &messages, &options),
            json!({"model": "llm", "stream": false, "max_output_tokens": 8, "ignore_eos": true, "input": [
                {"type": "message", "role": "user", "content": "q1"},
                {"type": "message", "role": "assistant", "content": "a1"},
                {"type": "message", "role": "user", "content": "q2"}]})
        );
        let streamed = BodyOptions { model: "llm".into(), streaming: true, ..Default::default() };
        let body = any_body(EndpointType::Responses, &messages[..1], &streamed);
        assert_eq!(body["stream"], true);
        assert!(body.get("stream_options").is_none() && body.get("max_output_tokens").is_none(), "{body}");
    }

    #[test]
    fn only_text_and_reasoning_deltas_are_token_events_and_completed_ends_with_usage() {
        let mut reader = SseReader::new();
        let mut events = Vec::new();
        reader.feed(REASONING_STREAM.as_bytes(), std::time::Instant::now(), &mut events);
        assert_eq!(events.len(), 13);
        assert_eq!(events[3].event.as_deref(), Some("response.reasoning_text.delta"), "the event's name is kept");
        let pieces: Vec<Piece> =
            events.iter().map(|e| any_parse(EndpointType::Responses, e.event.as_deref(), &e.data)).collect();
        let timed: Vec<(Option<&str>, Option<&str>)> =
            pieces.iter().filter(|p| p.has_text()).map(|p| (p.reasoning.as_deref(), p.text.as_deref())).collect();
        assert_eq!(timed, vec![(Some("Think"), None), (None, Some("Hi")), (None, Some(" you"))]);
        let last = pieces.last().unwrap();
        assert!(last.done);
        assert_eq!(
            last.usage,
            Some(Usage {
                prompt_tokens: Some(9),
                completion_tokens: Some(3),
                reasoning_tokens: Some(1),
                cached_tokens: Some(0)
            })
        );
        assert!(pieces.iter().all(|p| p.error.is_none()));
    }

    #[test]
    fn a_whole_response_and_failures_are_read() {
        let whole = r#"{"id":"resp_1","object":"response","status":"completed","error":null,"output":[
            {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hm"}]},
            {"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Yes","annotations":[]}]}],
            "usage":{"input_tokens":4,"output_tokens":2,"output_tokens_details":{"reasoning_tokens":1},"total_tokens":6}}"#;
        let piece = any_parse(EndpointType::Responses, None, whole);
        assert_eq!((piece.text.as_deref(), piece.reasoning.as_deref()), (Some("Yes"), Some("hm")));
        assert_eq!(piece.usage.unwrap().prompt_tokens, Some(4));
        let failed = r#"{"type":"response.failed","response":{"id":"r","object":"response","status":"failed",
            "error":{"code":"server_error","message":"boom"}}}"#;
        assert_eq!(any_parse(EndpointType::Responses, None, failed).error.as_deref(), Some("boom"));
        let error = r#"{"type":"error","code":"invalid_request_error","message":"too long","param":null}"#;
        assert_eq!(any_parse(EndpointType::Responses, Some("error"), error).error.as_deref(), Some("too long"));
        let bad = r#"{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","code":404}}"#;
        assert_eq!(
            any_parse(EndpointType::Responses, None, bad).error.as_deref(),
            Some("The model `x` does not exist.")
        );
    }
}
