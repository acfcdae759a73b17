//! OpenAI-compatible routes over the generative twin: `GET /v1/models`, `POST
//! /v1/chat/completions`, `/v1/completions` (one JSON body, or Server-Sent Events ending with
//! `data: [DONE]`) and `/v1/embeddings`. Errors are OpenAI's `{"error": {message, type, param,
//! code}}`. Sampling fields (`temperature`, `top_p`, ...) are accepted and change nothing: the
//! twin's text is its corpus, seeded by `seed`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{HeaderValue, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use super::core::InferenceServer;
use super::error::{ErrorKind, ServerError};
use super::listen::ReceivedAt;
use super::llm::{Event, Events, Finish, GenerateError, GenerateParams, Generation, LlmEngine, Refusal};
use super::llm_http::{collect, read_body, unix_seconds};

type Core = State<Arc<InferenceServer>>;

/// The routes, merged into the HTTP front end's router.
pub fn routes() -> Router<Arc<InferenceServer>> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
}

/// An OpenAI error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    param: Option<&'static str>,
    code: Option<&'static str>,
}

impl ApiError {
    pub(super) fn invalid_request(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
        }
    }
}

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> Self {
        let (status, kind) = match e.kind {
            ErrorKind::InvalidArg | ErrorKind::AlreadyExists => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "invalid_request_error"),
            ErrorKind::Exhausted => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error"),
            ErrorKind::PermissionDenied => (StatusCode::FORBIDDEN, "permission_error"),
            _ => (e.http_status(), "server_error"),
        };
        ApiError { status, message: e.message, kind, param: None, code: None }
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        ApiError { code: r.code, param: Some(r.param), ..ApiError::invalid_request(r.message, None) }
    }
}

impl From<GenerateError> for ApiError {
    fn from(e: GenerateError) -> Self {
        match e {
            GenerateError::Refused(r) => r.into(),
            GenerateError::Server(e) => e.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": {
            "message": self.message, "type": self.kind, "param": self.param, "code": self.code,
        }});
        (self.status, Json(body)).into_response()
    }
}

pub(super) type ApiResult<T> = Result<T, ApiError>;

/// The generative model a request names; OpenAI's 404 when there is none.
pub(super) fn engine(core: &InferenceServer, model: &str) -> ApiResult<Arc<LlmEngine>> {
    core.llm(model, "").map_err(|e| match e.kind {
        ErrorKind::NotFound => ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist."),
            kind: "invalid_request_error",
            param: Some("model"),
            code: Some("model_not_found"),
        },
        _ => ApiError { param: Some("model"), ..ApiError::from(e) },
    })
}

async fn models(State(core): Core) -> Json<Value> {
    let created = unix_seconds();
    let data: Vec<Value> = core
        .llms()
        .iter()
        .map(|e| {
            json!({ "id": e.name, "object": "model", "created": created, "owned_by": "perfbench",
                    "root": e.name, "max_model_len": e.settings.max_model_len })
        })
        .collect();
    Json(json!({ "object": "list", "data": data }))
}

/// The fields chat and completions share. Unknown fields are ignored, as vLLM ignores them.
#[derive(Deserialize)]
struct Common {
    model: String,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    min_tokens: Option<i64>,
    #[serde(default)]
    ignore_eos: bool,
    n: Option<i64>,
    seed: Option<i64>,
    temperature: Option<f64>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct ChatRequest {
    messages: Vec<Message>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Deserialize)]
pub(super) struct Message {
    content: Option<Content>,
}

/// A message's content: a string or typed parts (chat's and Responses' input items alike).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
pub(super) struct Part {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) text: Option<String>,
}

#[derive(Deserialize)]
struct CompletionRequest {
    prompt: Prompt,
    #[serde(flatten)]
    common: Common,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    One(String),
    Many(Vec<String>),
}

/// Parses a JSON body with OpenAI's 400 for anything malformed.
pub(super) fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid_request(format!("We could not parse the JSON body of your request: {e}"), None))
}

pub(super) async fn body_of(core: &InferenceServer, request: Request) -> ApiResult<(HeaderMap, Bytes)> {
    read_body(core, request).await.map_err(|e| ApiError::invalid_request(e.message(), None))
}

/// Checks the shared fields into the engine's parameters.
fn params(common: &Common, prompt: String, request_id: String, arrival_ns: u64) -> ApiResult<GenerateParams> {
    let positive = |value: Option<i64>, param: &'static str| -> ApiResult<Option<usize>> {
        match value {
            Some(v) if v < 1 => Err(ApiError {
                code: Some("integer_below_min_value"),
                ..ApiError::invalid_request(
                    format!(
                        "Invalid '{param}': integer below minimum value. Expected a value >= 1, but got {v} instead."
                    ),
                    Some(param),
                )
            }),
            v => Ok(v.map(|v| v as usize)),
        }
    };
    let max_tokens = match common.max_completion_tokens {
        Some(v) => positive(Some(v), "max_completion_tokens")?,
        None => positive(common.max_tokens, "max_tokens")?,
    };
    if let Some(n) = common.n.filter(|&n| n != 1) {
        return Err(ApiError::invalid_request(format!("Invalid 'n': the twin answers n = 1 only, got {n}"), Some("n")));
    }
    if let Some(t) = common.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
        return Err(ApiError::invalid_request(
            format!("Invalid 'temperature': expected 0 to 2, got {t}"),
            Some("temperature"),
        ));
    }
    let min_tokens = match common.min_tokens {
        Some(v) if v < 0 => {
            return Err(ApiError::invalid_request(
                format!("Invalid 'min_tokens': expected a value >= 0, got {v}"),
                Some("min_tokens"),
            ))
        }
        v => v.unwrap_or(0) as usize,
    };
    Ok(GenerateParams {
        prompt,
        max_tokens,
        min_tokens,
        ignore_eos: common.ignore_eos,
        seed: common.seed.map(|s| s as u64),
        request_id,
        arrival_ns,
    })
}

/// What a chat or completion answer looks like on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Chat,
    Completion,
}

impl Flavor {
    fn id_prefix(self) -> &'static str {
        match self {
            Flavor::Chat => "chatcmpl",
            Flavor::Completion => "cmpl",
        }
    }
}

/// One request's identity on the wire.
struct Reply {
    flavor: Flavor,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
}

impl Reply {
    fn choice(&self, text: Option<&str>, first: bool, finish: Option<&str>) -> Value {
        match self.flavor {
            Flavor::Chat => {
                let delta = match (text, first) {
                    (Some(t), true) => json!({ "role": "assistant", "content": t }),
                    (Some(t), false) => json!({ "content": t }),
                    (None, _) => json!({}),
                };
                json!({ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish })
            }
            Flavor::Completion => {
                json!({ "index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish })
            }
        }
    }

    /// A reasoning token's choice, as vLLM's reasoning parsers stream it: the text in
    /// `reasoning`, and again in `reasoning_content`, the name vLLM keeps for older clients.
    fn reasoning_choice(&self, text: &str, first: bool) -> Value {
        let delta = match first {
            true => json!({ "role": "assistant", "reasoning": text, "reasoning_content": text }),
            false => json!({ "reasoning": text, "reasoning_content": text }),
        };
        json!({ "index": 0, "delta": delta, "logprobs": null, "finish_reason": null })
    }

    fn chunk(&self, choices: Vec<Value>, usage: Option<Value>) -> Bytes {
        let object = match self.flavor {
            Flavor::Chat => "chat.completion.chunk",
            Flavor::Completion => "text_completion",
        };
        let mut chunk = json!({ "id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices });
        if self.include_usage {
            chunk["usage"] = usage.unwrap_or(Value::Null);
        }
        sse(&chunk)
    }
}

/// One Server-Sent Event carrying `value`.
pub fn sse(value: &Value) -> Bytes {
    let mut event = b"data: ".to_vec();
    serde_json::to_writer(&mut event, value).expect("JSON values serialize");
    event.extend_from_slice(b"\n\n");
    event.into()
}

fn usage(finish: &Finish) -> Value {
    let mut usage = json!({
        "prompt_tokens": finish.prompt_tokens,
        "completion_tokens": finish.completion_tokens,
        "total_tokens": finish.prompt_tokens + finish.completion_tokens,
        // What vLLM answers with `--enable-prompt-tokens-details`: the prefix cache's hits.
        "prompt_tokens_details": { "cached_tokens": finish.cached_tokens },
    });
    if finish.reasoning_tokens > 0 {
        usage["completion_tokens_details"] = json!({ "reasoning_tokens": finish.reasoning_tokens });
    }
    usage
}

/// A fresh response id.
fn response_id(flavor: Flavor) -> String {
    format!("{}-{:032x}", flavor.id_prefix(), rand::random::<u128>())
}

/// The client's `x-request-id`, when it sent a usable one.
pub fn request_id(headers: &HeaderMap) -> Option<String> {
    headers.get("x-request-id").and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()).map(str::to_string)
}

async fn chat(State(core): Core, request: Request) -> Response {
    let arrival_ns = ReceivedAt::of(&request);
    run(&core, request, Flavor::Chat, arrival_ns).await.unwrap_or_else(IntoResponse::into_response)
}

async fn completions(State(core): Core, request: Request) -> Response {
    let arrival_ns = ReceivedAt::of(&request);
    run(&core, request, Flavor::Completion, arrival_ns).await.unwrap_or_else(IntoResponse::into_response)
}

async fn run(core: &InferenceServer, request: Request, flavor: Flavor, arrival_ns: u64) -> ApiResult<Response> {
    let (headers, body) = body_of(core, request).await?;
    let (common, prompt) = match flavor {
        Flavor::Chat => {
            let r: ChatRequest = parse(&body)?;
            let prompt = chat_prompt(&r.messages)?;
            (r.common, prompt)
        }
        Flavor::Completion => {
            let r: CompletionRequest = parse(&body)?;
            let prompt = match r.prompt {
                Prompt::One(p) => p,
                Prompt::Many(mut list) if list.len() == 1 => list.remove(0),
                Prompt::Many(list) => {
                    let why = format!("Invalid 'prompt': the twin answers one prompt per request, got {}", list.len());
                    return Err(ApiError::invalid_request(why, Some("prompt")));
                }
            };
            (r.common, prompt)
        }
    };
    let engine = engine(core, &common.model)?;
    let id = response_id(flavor);
    let record_id = request_id(&headers).unwrap_or_else(|| id.clone());
    let params = params(&common, prompt, record_id, arrival_ns)?;
    let generation = engine.generate(params, core.request_log.clone()).map_err(|e| match (e, flavor) {
        (GenerateError::Refused(r), Flavor::Completion) if r.param == "messages" => {
            ApiError::from(Refusal { param: "prompt", ..r })
        }
        (e, _) => ApiError::from(e),
    })?;
    let reply = Reply {
        flavor,
        id,
        model: common.model.clone(),
        created: unix_seconds(),
        include_usage: common.stream_options.as_ref().is_some_and(|o| o.include_usage),
    };
    if common.stream {
        return Ok(stream(engine, generation, reply));
    }
    whole(engine, generation, reply).await
}

/// The prompt of a chat: the messages' text, one per line (the twin applies no chat template).
pub(super) fn chat_prompt(messages: &[Message]) -> ApiResult<String> {
    if messages.is_empty() {
        return Err(ApiError::invalid_request(
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            Some("messages"),
        ));
    }
    let mut texts = Vec::with_capacity(messages.len());
    for m in messages {
        match &m.content {
            None => {}
            Some(Content::Text(t)) => texts.push(t.clone()),
            Some(Content::Parts(parts)) => {
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => texts.push(t.clone()),
                        (kind, _) => {
                            return Err(ApiError::invalid_request(
                                format!("Invalid content part of type '{kind}': the twin reads text parts only"),
                                Some("messages"),
                            ))
                        }
                    }
                }
            }
        }
    }
    Ok(texts.join("\n"))
}

/// Collects the whole answer into one body. A chat puts a reasoning model's reasoning in the
/// message's `reasoning` (and `reasoning_content`); a completion's text holds both.
async fn whole(engine: Arc<LlmEngine>, generation: Generation, reply: Reply) -> ApiResult<Response> {
    let Some(answer) = collect(&engine, generation).await else {
        return Err(ServerError::unavailable("the batcher stopped before the request finished").into());
    };
    let finish = &answer.finish;
    let (object, choice) = match reply.flavor {
        Flavor::Chat => {
            let mut message = json!({ "role": "assistant", "content": answer.text });
            if finish.reasoning_tokens > 0 {
                message["reasoning"] = json!(answer.reasoning);
                message["reasoning_content"] = json!(answer.reasoning);
            }
            let choice = json!({ "index": 0, "message": message, "logprobs": null,
                                 "finish_reason": finish.reason.as_str() });
            ("chat.completion", choice)
        }
        Flavor::Completion => {
            let text = answer.reasoning + &answer.text;
            let choice = json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish.reason.as_str() });
            ("text_completion", choice)
        }
    };
    let body = json!({ "id": reply.id, "object": object, "created": reply.created, "model": reply.model,
                       "choices": [choice], "usage": usage(finish) });
    Ok(Json(body).into_response())
}

/// Streams the answer as Server-Sent Events, one chunk per token, then `data: [DONE]`.
fn stream(engine: Arc<LlmEngine>, generation: Generation, reply: Reply) -> Response {
    let Generation { text_start, reasoning_tokens, events, .. } = generation;
    let state = Streaming {
        first: Template::new(&reply, true),
        rest: Template::new(&reply, false),
        reasoning_first: Template::cut(&reply.chunk(vec![reply.reasoning_choice(MARKER, true)], None)),
        reasoning_rest: Template::cut(&reply.chunk(vec![reply.reasoning_choice(MARKER, false)], None)),
        reasoning_tokens: if reply.flavor == Flavor::Chat { reasoning_tokens } else { 0 },
        events,
        reply,
        engine,
        text_start,
        sent_any: false,
    };
    let body = futures::stream::unfold(Some(state), |state| async move {
        let mut s = state?;
        let bytes = match s.events.recv().await {
            Some(Event::Token { index, .. }) => {
                let template = match (index < s.reasoning_tokens, s.sent_any) {
                    (true, false) => &s.reasoning_first,
                    (true, true) => &s.reasoning_rest,
                    (false, false) => &s.first,
                    (false, true) => &s.rest,
                };
                s.sent_any = true;
                template.render(s.engine.piece(s.text_start, index))
            }
            Some(Event::Done(finish)) => {
                let reply = &s.reply;
                let mut out = reply.chunk(vec![reply.choice(None, false, Some(finish.reason.as_str()))], None).to_vec();
                if reply.include_usage {
                    out.extend_from_slice(&reply.chunk(vec![], Some(usage(&finish))));
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                return Some((Ok::<_, Infallible>(Bytes::from(out)), None));
            }
            None => return None,
        };
        Some((Ok(bytes), Some(s)))
    });
    let mut response = Response::new(Body::from_stream(body.boxed()));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

/// A streamed answer between two events.
struct Streaming {
    events: Events,
    reply: Reply,
    engine: Arc<LlmEngine>,
    text_start: usize,
    /// The token chunks, rendered once per request (no JSON tree per token).
    first: Template,
    rest: Template,
    /// A reasoning model's reasoning chunks, and how many tokens of a chat are reasoning.
    reasoning_first: Template,
    reasoning_rest: Template,
    reasoning_tokens: usize,
    sent_any: bool,
}

/// A token chunk's event around its text: the bytes between the places the text's JSON string
/// goes, cut from the chunk [`Reply::chunk`] renders with a marker for the text, so a filled
/// template is the same bytes.
struct Template {
    parts: Vec<Vec<u8>>,
}

/// Stands for the text while a template is rendered (corpus words hold no control character).
const MARKER: &str = "\u{1}text\u{1}";

impl Template {
    fn new(reply: &Reply, first: bool) -> Template {
        Template::cut(&reply.chunk(vec![reply.choice(Some(MARKER), first, None)], None))
    }

    /// Cuts an event rendered with [`MARKER`] for the text at each marker.
    fn cut(event: &[u8]) -> Template {
        let marker = serde_json::to_vec(MARKER).expect("a string serializes");
        let mut parts = Vec::new();
        let mut rest = event;
        while let Some(at) = rest.windows(marker.len()).position(|w| w == marker) {
            parts.push(rest[..at].to_vec());
            rest = &rest[at + marker.len()..];
        }
        assert!(!parts.is_empty(), "the chunk holds the marker");
        parts.push(rest.to_vec());
        Template { parts }
    }

    fn render(&self, text: &str) -> Bytes {
        let holes = self.parts.len() - 1;
        let mut out = Vec::with_capacity(self.parts.iter().map(Vec::len).sum::<usize>() + holes * (text.len() + 2));
        out.extend_from_slice(&self.parts[0]);
        let start = out.len();
        serde_json::to_writer(&mut out, text).expect("a string serializes");
        let quoted = start..out.len();
        for (i, part) in self.parts[1..].iter().enumerate() {
            if i > 0 {
                out.extend_from_within(quoted.clone());
            }
            out.extend_from_slice(part);
        }
        out.into()
    }
}

#[derive(Deserialize)]
struct EmbeddingRequest {
    model: String,
    input: Prompt,
    encoding_format: Option<String>,
}

async fn embeddings(State(core): Core, request: Request) -> Response {
    let arrival_ns = ReceivedAt::of(&request);
    embed(&core, request, arrival_ns).await.unwrap_or_else(IntoResponse::into_response)
}

/// Embeddings: each input is a prefill-only request through the batcher; the vector is a
/// deterministic function of its tokens.
async fn embed(core: &InferenceServer, request: Request, arrival_ns: u64) -> ApiResult<Response> {
    let (headers, body) = body_of(core, request).await?;
    let r: EmbeddingRequest = parse(&body)?;
    if let Some(f) = r.encoding_format.as_deref().filter(|f| *f != "float") {
        return Err(ApiError::invalid_request(
            format!("Invalid 'encoding_format': the twin answers 'float' only, got '{f}'"),
            Some("encoding_format"),
        ));
    }
    let engine = engine(core, &r.model)?;
    let inputs = match r.input {
        Prompt::One(p) => vec![p],
        Prompt::Many(list) if list.is_empty() => {
            return Err(ApiError::invalid_request(
                "Invalid 'input': empty array. Expected an array with minimum length 1.",
                Some("input"),
            ))
        }
        Prompt::Many(list) => list,
    };
    let id = request_id(&headers).unwrap_or_else(|| format!("embd-{:032x}", rand::random::<u128>()));
    let mut running = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let params = GenerateParams {
            prompt: input.clone(),
            max_tokens: Some(0),
            request_id: if inputs.len() == 1 { id.clone() } else { format!("{id}-{i}") },
            arrival_ns,
            ..Default::default()
        };
        let generation = engine.generate(params, core.request_log.clone());
        running.push(generation.map_err(|e| ApiError { param: Some("input"), ..e.into() })?);
    }
    let mut data = Vec::with_capacity(inputs.len());
    let mut prompt_tokens = 0;
    for (i, (mut generation, input)) in running.into_iter().zip(&inputs).enumerate() {
        while let Some(event) = generation.events.recv().await {
            if let Event::Done(finish) = event {
                prompt_tokens += finish.prompt_tokens;
            }
        }
        data.push(json!({ "object": "embedding", "index": i, "embedding": engine.embedding(input) }));
    }
    let body = json!({ "object": "list", "data": data, "model": r.model,
                       "usage": { "prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens } });
    Ok(Json(body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_template_is_the_chunk_reply_renders() {
        for flavor in [Flavor::Chat, Flavor::Completion] {
            for include_usage in [false, true] {
                let reply = Reply { flavor, id: "cmpl-1".into(), model: "llm".into(), created: 7, include_usage };
                for first in [true, false] {
                    let template = Template::new(&reply, first);
                    for text in [" word", " \"quoted\" \\ \u{e9}\n", ""] {
                        let expected = reply.chunk(vec![reply.choice(Some(text), first, None)], None);
                        assert_eq!(template.render(text), expected, "{text:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_filled_reasoning_template_carries_the_text_in_both_fields() {
        let reply =
            Reply { flavor: Flavor::Chat, id: "c-1".into(), model: "m".into(), created: 7, include_usage: true };
        for first in [true, false] {
            let template = Template::cut(&reply.chunk(vec![reply.reasoning_choice(MARKER, first)], None));
            for text in [" word", " \"quoted\" \\ \u{e9}\n"] {
                let expected = reply.chunk(vec![reply.reasoning_choice(text, first)], None);
                assert_eq!(template.render(text), expected, "{text:?}");
                let event: Value = serde_json::from_slice(&expected[6..]).unwrap();
                let delta = &event["choices"][0]["delta"];
                assert_eq!((&delta["reasoning"], &delta["reasoning_content"]), (&json!(text), &json!(text)));
                assert_eq!(delta.get("role").is_some(), first);
            }
        }
    }
}
