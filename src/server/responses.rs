//! OpenAI's Responses API over the generative twin: `POST /v1/responses`, one response object or
//! Server-Sent Events named by their `type`, each with its `sequence_number`
//! (`response.created`, `response.in_progress`, `response.output_item.added`,
//! `response.content_part.added`, `response.output_text.delta`, `response.output_text.done`,
//! `response.content_part.done`, `response.output_item.done`, `response.completed`). A reasoning
//! model's reasoning is a `reasoning` output item first, streamed as vLLM streams it
//! (`response.reasoning_text.delta` and `.done`). Errors are OpenAI's, as on the other `/v1`
//! routes. Nothing is stored: `store` and `previous_response_id` are ignored.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::core::InferenceServer;
use super::error::ServerError;
use super::listen::ReceivedAt;
use super::llm::{Finish, FinishReason, GenerateError, GenerateParams, Refusal};
use super::llm_http::{collect, event_stream, named_event, random_id, unix_seconds, Step, StreamWriter};
use super::openai::{body_of, engine, parse, request_id, ApiError, ApiResult, Content};

/// The route, merged into the HTTP front end's router.
pub fn routes() -> Router<Arc<InferenceServer>> {
    Router::new().route("/v1/responses", post(responses))
}

/// The request fields the twin reads; others (`tools`, `reasoning`, `store`, ...) are ignored.
#[derive(Deserialize)]
struct ResponsesRequest {
    model: String,
    input: Input,
    instructions: Option<String>,
    max_output_tokens: Option<i64>,
    #[serde(default)]
    stream: bool,
    temperature: Option<f64>,
    /// vLLM's extension: generate exactly the maximum (a benchmark's fixed output length).
    #[serde(default)]
    ignore_eos: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Item>),
}

/// An input item: a message (`type` "message", or none with a `role`), or an earlier turn's
/// reasoning, which is left out of the prompt.
#[derive(Deserialize)]
struct Item {
    #[serde(rename = "type")]
    kind: Option<String>,
    content: Option<Content>,
}

/// The prompt: the instructions, then each input message's text, one per line.
fn prompt(r: &ResponsesRequest) -> ApiResult<String> {
    let mut texts: Vec<String> = r.instructions.iter().cloned().collect();
    let items = match &r.input {
        Input::Text(t) => {
            texts.push(t.clone());
            return Ok(texts.join("\n"));
        }
        Input::Items(items) if items.is_empty() => {
            return Err(ApiError::invalid_request(
                "Invalid 'input': empty array. Expected an array with minimum length 1.",
                Some("input"),
            ))
        }
        Input::Items(items) => items,
    };
    for (i, item) in items.iter().enumerate() {
        match (item.kind.as_deref().unwrap_or("message"), &item.content) {
            ("reasoning", _) => {}
            ("message", Some(Content::Text(t))) => texts.push(t.clone()),
            ("message", Some(Content::Parts(parts))) => {
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("input_text" | "output_text" | "text", Some(t)) => texts.push(t.clone()),
                        (kind, _) => {
                            let why = format!("Invalid 'input[{i}].content': parts of type '{kind}' are not supported by this server (text only)");
                            return Err(ApiError::invalid_request(why, Some("input")));
                        }
                    }
                }
            }
            ("message", None) => {
                return Err(ApiError::invalid_request(format!("Missing 'input[{i}].content'"), Some("input")))
            }
            (kind, _) => {
                let why = format!("Invalid 'input[{i}]': items of type '{kind}' are not supported by this server");
                return Err(ApiError::invalid_request(why, Some("input")));
            }
        }
    }
    Ok(texts.join("\n"))
}

fn max_output_tokens(r: &ResponsesRequest) -> ApiResult<Option<usize>> {
    if let Some(t) = r.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
        let why = format!("Invalid 'temperature': expected 0 to 2, got {t}");
        return Err(ApiError::invalid_request(why, Some("temperature")));
    }
    match r.max_output_tokens {
        Some(n) if n < 1 => Err(ApiError::invalid_request(
            format!(
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1, but got {n} instead."
            ),
            Some("max_output_tokens"),
        )),
        n => Ok(n.map(|n| n as usize)),
    }
}

async fn responses(State(core): State<Arc<InferenceServer>>, request: Request) -> Response {
    let arrival_ns = ReceivedAt::of(&request);
    run(&core, request, arrival_ns).await.unwrap_or_else(IntoResponse::into_response)
}

async fn run(core: &InferenceServer, request: Request, arrival_ns: u64) -> ApiResult<Response> {
    let (headers, body) = body_of(core, request).await?;
    let r: ResponsesRequest = parse(&body)?;
    let max_tokens = max_output_tokens(&r)?;
    let prompt = prompt(&r)?;
    let engine = engine(core, &r.model)?;
    let shell = Shell {
        id: random_id("resp_"),
        model: r.model,
        created_at: unix_seconds(),
        instructions: r.instructions,
        max_output_tokens: max_tokens,
    };
    let params = GenerateParams {
        prompt,
        max_tokens,
        request_id: request_id(&headers).unwrap_or_else(|| shell.id.clone()),
        arrival_ns,
        ignore_eos: r.ignore_eos,
        ..Default::default()
    };
    // The context-length refusal names the chat's field; here the prompt is `input`.
    let generation = engine.generate(params, core.request_log.clone()).map_err(|e| match e {
        GenerateError::Refused(r) if r.param == "messages" => ApiError::from(Refusal { param: "input", ..r }),
        e => ApiError::from(e),
    })?;
    if r.stream {
        let writer = Stream { shell, sequence_number: 0, output: Vec::new(), open: None };
        return Ok(event_stream(engine, generation, writer));
    }
    let Some(answer) = collect(&engine, generation).await else {
        return Err(ServerError::unavailable("the batcher stopped before the request finished").into());
    };
    let finish = &answer.finish;
    let mut output = Vec::new();
    if finish.reasoning_tokens > 0 {
        output.push(ItemKind::Reasoning.done(&random_id("rs_"), &answer.reasoning));
    }
    if finish.completion_tokens > finish.reasoning_tokens || output.is_empty() {
        output.push(ItemKind::Message.done(&random_id("msg_"), &answer.text));
    }
    Ok(Json(shell.object(Some(finish), output)).into_response())
}

/// What every response object of a request holds.
struct Shell {
    id: String,
    model: String,
    created_at: u64,
    instructions: Option<String>,
    max_output_tokens: Option<usize>,
}

impl Shell {
    /// The response object: in progress until `finish`, then completed, or incomplete when
    /// the output reached `max_output_tokens`.
    fn object(&self, finish: Option<&Finish>, output: Vec<Value>) -> Value {
        let (status, incomplete) = match finish.map(|f| f.reason) {
            None => ("in_progress", Value::Null),
            Some(FinishReason::Length) => ("incomplete", json!({ "reason": "max_output_tokens" })),
            Some(_) => ("completed", Value::Null),
        };
        json!({
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "error": null, "incomplete_details": incomplete, "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens, "model": self.model, "output": output,
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "usage": finish.map(usage),
        })
    }
}

fn usage(f: &Finish) -> Value {
    json!({
        "input_tokens": f.prompt_tokens,
        "input_tokens_details": { "cached_tokens": f.cached_tokens },
        "output_tokens": f.completion_tokens,
        "output_tokens_details": { "reasoning_tokens": f.reasoning_tokens },
        "total_tokens": f.prompt_tokens + f.completion_tokens,
    })
}

/// An output item's kind.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Reasoning,
    Message,
}

impl ItemKind {
    /// The item as `response.output_item.added` announces it.
    fn added(self, id: &str) -> Value {
        match self {
            ItemKind::Reasoning => json!({ "id": id, "type": "reasoning", "summary": [], "status": "in_progress" }),
            ItemKind::Message => {
                json!({ "id": id, "type": "message", "role": "assistant", "status": "in_progress", "content": [] })
            }
        }
    }

    /// Its one content part, holding `text`.
    fn part(self, text: &str) -> Value {
        match self {
            ItemKind::Reasoning => json!({ "type": "reasoning_text", "text": text }),
            ItemKind::Message => json!({ "type": "output_text", "text": text, "annotations": [], "logprobs": [] }),
        }
    }

    /// The finished item.
    fn done(self, id: &str, text: &str) -> Value {
        match self {
            ItemKind::Reasoning => json!({ "id": id, "type": "reasoning", "summary": [], "status": "completed",
                                         "content": [self.part(text)] }),
            ItemKind::Message => json!({ "id": id, "type": "message", "role": "assistant", "status": "completed",
                                       "content": [self.part(text)] }),
        }
    }

    /// The names of its text's delta and done events.
    fn text_events(self) -> (&'static str, &'static str) {
        match self {
            ItemKind::Reasoning => ("response.reasoning_text.delta", "response.reasoning_text.done"),
            ItemKind::Message => ("response.output_text.delta", "response.output_text.done"),
        }
    }
}

/// The output item being streamed.
struct Open {
    kind: ItemKind,
    id: String,
    text: String,
}

/// A streamed response between two events.
struct Stream {
    shell: Shell,
    sequence_number: u64,
    /// The finished output items.
    output: Vec<Value>,
    open: Option<Open>,
}

impl Stream {
    /// Writes one event: `fields` with its `type` and `sequence_number`.
    fn event(&mut self, out: &mut Vec<u8>, name: &str, mut fields: Value) {
        fields["type"] = json!(name);
        fields["sequence_number"] = json!(self.sequence_number);
        self.sequence_number += 1;
        named_event(out, name, &fields);
    }

    fn open(&mut self, out: &mut Vec<u8>, kind: ItemKind) {
        let (id, index) = (random_id(if kind == ItemKind::Reasoning { "rs_" } else { "msg_" }), self.output.len());
        self.event(out, "response.output_item.added", json!({ "output_index": index, "item": kind.added(&id) }));
        let part = json!({ "item_id": id, "output_index": index, "content_index": 0, "part": kind.part("") });
        self.event(out, "response.content_part.added", part);
        self.open = Some(Open { kind, id, text: String::new() });
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        let Some(Open { kind, id, text }) = self.open.take() else { return };
        let index = self.output.len();
        let place = json!({ "item_id": id, "output_index": index, "content_index": 0 });
        let mut done = place.clone();
        done["text"] = json!(text);
        if kind == ItemKind::Message {
            done["logprobs"] = json!([]);
        }
        self.event(out, kind.text_events().1, done);
        let mut part = place;
        part["part"] = kind.part(&text);
        self.event(out, "response.content_part.done", part);
        let item = kind.done(&id, &text);
        self.event(out, "response.output_item.done", json!({ "output_index": index, "item": item }));
        self.output.push(item);
    }
}

impl StreamWriter for Stream {
    fn start(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let response = self.shell.object(None, Vec::new());
        self.event(&mut out, "response.created", json!({ "response": response }));
        self.event(&mut out, "response.in_progress", json!({ "response": response }));
        out
    }

    fn step(&mut self, step: Step<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        match step {
            Step::Token { reasoning, text } => {
                let kind = if reasoning { ItemKind::Reasoning } else { ItemKind::Message };
                if self.open.as_ref().map(|o| o.kind) != Some(kind) {
                    self.close(&mut out);
                    self.open(&mut out, kind);
                }
                let open = self.open.as_mut().expect("an item is open");
                open.text.push_str(text);
                let mut delta = json!({ "item_id": open.id, "output_index": self.output.len(), "content_index": 0,
                                        "delta": text });
                if kind == ItemKind::Message {
                    delta["logprobs"] = json!([]);
                }
                self.event(&mut out, kind.text_events().0, delta);
            }
            Step::Done(finish) => {
                self.close(&mut out);
                let response = self.shell.object(Some(finish), std::mem::take(&mut self.output));
                self.event(&mut out, "response.completed", json!({ "response": response }));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reasoning_item_precedes_the_message_and_sequence_numbers_count_up() {
        let shell = Shell {
            id: "resp_1".into(),
            model: "m".into(),
            created_at: 1,
            instructions: None,
            max_output_tokens: None,
        };
        let mut s = Stream { shell, sequence_number: 0, output: Vec::new(), open: None };
        let mut out = s.start();
        out.extend(s.step(Step::Token { reasoning: true, text: " a" }));
        out.extend(s.step(Step::Token { reasoning: false, text: " b" }));
        let finish = Finish {
            reason: FinishReason::Stop,
            prompt_tokens: 3,
            completion_tokens: 2,
            cached_tokens: 1,
            reasoning_tokens: 1,
        };
        out.extend(s.step(Step::Done(&finish)));
        let text = String::from_utf8(out).unwrap();
        let events: Vec<(String, Value)> = text
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                (
                    name.strip_prefix("event: ").unwrap().to_string(),
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
                )
            })
            .collect();
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (name, data)) in events.iter().enumerate() {
            assert_eq!((&data["type"], &data["sequence_number"]), (&json!(name), &json!(i)));
        }
        let completed = &events.last().unwrap().1["response"];
        assert_eq!(completed["status"], "completed");
        assert_eq!(completed["output"][0]["content"][0]["text"], " a");
        assert_eq!(completed["output"][1]["content"][0]["text"], " b");
        assert_eq!(completed["usage"]["output_tokens_details"]["reasoning_tokens"], 1);
        assert_eq!(completed["usage"]["input_tokens_details"]["cached_tokens"], 1);
        assert_eq!(events[10].1["output_index"], 1);
    }
}
