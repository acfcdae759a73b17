//! vLLM's own routes beside the OpenAI ones on the API listener, so tools written for vLLM find
//! them where vLLM serves them: `GET /health` and `/ping` (200 with an empty body once ready),
//! `GET /version`, `GET /metrics` (the metrics port's text: AIPerf scrapes the inference URL by
//! default) and `POST /tokenize`, `/detokenize` with the model's own tokenizer. Rankings are in
//! [`super::rerank`], which uses this module's model lookup. Errors are the OpenAI routes' [`ApiError`].

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::core::{InferenceServer, SERVER_VERSION};
use super::error::ServerError;
use super::llm::LlmEngine;
use super::metrics::{self, MetricsState};
use super::openai::{body_of, chat_prompt, engine, parse, ApiError, ApiResult, Message};

type Core = State<Arc<InferenceServer>>;

/// The routes, merged into the HTTP front end's router beside [`super::openai::routes`].
pub fn routes(core: &Arc<InferenceServer>) -> Router<Arc<InferenceServer>> {
    let scrapes = MetricsState::new(core.clone());
    Router::new()
        .route("/health", get(health))
        .route("/ping", get(health).post(health))
        .route("/version", get(version))
        .route(
            "/metrics",
            get(move || {
                let scrapes = scrapes.clone();
                async move { metrics::scrape(&scrapes) }
            }),
        )
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
}

/// vLLM answers 200 with no body while its engine runs, 503 once it has died.
async fn health(State(core): Core) -> StatusCode {
    if core.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn version() -> Json<Value> {
    Json(json!({ "version": SERVER_VERSION }))
}

/// The generative model a vLLM request names; with none (vLLM's `model` is optional), the first
/// one served (by name, as `/v1/models` lists them).
pub(super) fn model_or_first(core: &InferenceServer, model: Option<&str>) -> ApiResult<Arc<LlmEngine>> {
    match model.filter(|m| !m.is_empty()) {
        Some(name) => engine(core, name),
        None => {
            core.llms().into_iter().next().ok_or_else(|| ServerError::not_found("no generative model is loaded").into())
        }
    }
}

/// vLLM's `TokenizeCompletionRequest` (`prompt`) or `TokenizeChatRequest` (`messages`).
#[derive(Deserialize)]
struct TokenizeRequest {
    model: Option<String>,
    prompt: Option<String>,
    messages: Option<Vec<Message>>,
    /// Accepted and moot: the twin counts a prompt without special tokens, as its `usage` does,
    /// so a count here is the `prompt_tokens` that chat or completions will report.
    #[serde(rename = "add_special_tokens")]
    _add_special_tokens: Option<bool>,
    return_token_strs: Option<bool>,
}

async fn tokenize(State(core): Core, request: Request) -> Response {
    count_tokens(&core, request).await.unwrap_or_else(IntoResponse::into_response)
}

/// The prompt's token ids as the model counts them. Like vLLM, a prompt over the context is
/// counted, not refused: `count` beside `max_model_len` tells the client.
async fn count_tokens(core: &InferenceServer, request: Request) -> ApiResult<Response> {
    let (_, body) = body_of(core, request).await?;
    let r: TokenizeRequest = parse(&body)?;
    let engine = model_or_first(core, r.model.as_deref())?;
    let prompt = match (r.prompt, r.messages) {
        (Some(prompt), None) => prompt,
        (None, Some(messages)) => chat_prompt(&messages)?,
        _ => return Err(ApiError::invalid_request("Either 'prompt' or 'messages' is required, not both", None)),
    };
    let tokenizer = engine.tokenizer();
    let tokens = tokenizer.encode(&prompt);
    let token_strs = r
        .return_token_strs
        .unwrap_or(false)
        .then(|| tokens.iter().map(|&id| tokenizer.token_str(id).unwrap_or_default()).collect::<Vec<String>>());
    let body = json!({ "count": tokens.len(), "max_model_len": engine.settings.max_model_len,
                       "tokens": tokens, "token_strs": token_strs });
    Ok(Json(body).into_response())
}

/// vLLM's `DetokenizeRequest`: token ids are non-negative, and here within `u32`.
#[derive(Deserialize)]
struct DetokenizeRequest {
    model: Option<String>,
    tokens: Vec<u32>,
}

async fn detokenize(State(core): Core, request: Request) -> Response {
    text_of(&core, request).await.unwrap_or_else(IntoResponse::into_response)
}

async fn text_of(core: &InferenceServer, request: Request) -> ApiResult<Response> {
    let (_, body) = body_of(core, request).await?;
    let r: DetokenizeRequest = parse(&body)?;
    let engine = model_or_first(core, r.model.as_deref())?;
    let prompt = engine.tokenizer().decode(&r.tokens).map_err(|id| {
        ApiError::invalid_request(format!("Invalid 'tokens': token id {id} is out of vocabulary"), Some("tokens"))
    })?;
    Ok(Json(json!({ "prompt": prompt })).into_response())
}
