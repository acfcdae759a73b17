//! Rankings as vLLM serves them: `POST /rerank`, `/v1/rerank` and `/v2/rerank` (Cohere's shape;
//! AIPerf's `cohere-rankings` posts to `/v2/rerank`). Each (query, document) pair is a
//! prefill-only request through the twin's batcher, as a cross-encoder runs one forward pass
//! per pair, so its compute, metrics and `--record-requests` line are real; the score is a
//! deterministic function of the tokens (the twin has no weights).

use std::collections::HashSet;
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
use super::llm::{Event, GenerateError, GenerateParams, Refusal};
use super::openai::{body_of, parse, request_id, ApiError, ApiResult};
use super::vllm::model_or_first;

type Core = State<Arc<InferenceServer>>;

/// The routes, merged into the HTTP front end's router.
pub fn routes() -> Router<Arc<InferenceServer>> {
    Router::new().route("/rerank", post(rerank)).route("/v1/rerank", post(rerank)).route("/v2/rerank", post(rerank))
}

/// vLLM's `RerankRequest` with Cohere's `return_documents` (vLLM always returns them).
#[derive(Deserialize)]
struct RerankRequest {
    model: Option<String>,
    query: String,
    documents: Vec<Document>,
    /// The best `top_n` results; 0 or less (vLLM's default 0), or none: all of them.
    top_n: Option<i64>,
    return_documents: Option<bool>,
}

/// A document as a string, or Cohere's `{"text": ...}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Document {
    Text(String),
    Object { text: String },
}

impl Document {
    fn text(&self) -> &str {
        match self {
            Document::Text(t) | Document::Object { text: t } => t,
        }
    }
}

async fn rerank(State(core): Core, request: Request) -> Response {
    let arrival_ns = ReceivedAt::of(&request);
    rank(&core, request, arrival_ns).await.unwrap_or_else(IntoResponse::into_response)
}

async fn rank(core: &InferenceServer, request: Request, arrival_ns: u64) -> ApiResult<Response> {
    let (headers, body) = body_of(core, request).await?;
    let r: RerankRequest = parse(&body)?;
    let engine = model_or_first(core, r.model.as_deref())?;
    let id = format!("rerank-{:032x}", rand::random::<u128>());
    let record_id = request_id(&headers).unwrap_or_else(|| id.clone());
    let n = r.documents.len();
    // Every pair is queued before any is awaited, so they batch together as vLLM's would.
    let mut running = Vec::with_capacity(n);
    for (i, document) in r.documents.iter().enumerate() {
        let params = GenerateParams {
            prompt: format!("{}\n{}", r.query, document.text()),
            max_tokens: Some(0),
            request_id: if n == 1 { record_id.clone() } else { format!("{record_id}-{i}") },
            arrival_ns,
            ..Default::default()
        };
        let generation = engine.generate(params, core.request_log.clone()).map_err(|e| match e {
            GenerateError::Refused(refusal) => ApiError::from(Refusal { param: "documents", ..refusal }),
            e => ApiError::from(e),
        })?;
        running.push(generation);
    }
    let tokenizer = engine.tokenizer();
    let query = tokenizer.encode(&r.query);
    let mut results = Vec::with_capacity(n);
    let mut prompt_tokens = 0;
    for (index, (mut generation, document)) in running.into_iter().zip(&r.documents).enumerate() {
        let mut done = false;
        while let Some(event) = generation.events.recv().await {
            if let Event::Done(finish) = event {
                prompt_tokens += finish.prompt_tokens;
                done = true;
            }
        }
        if !done {
            return Err(ServerError::unavailable("the batcher stopped before the request finished").into());
        }
        let score = relevance(&query, &tokenizer.encode(document.text()));
        results.push((index, score));
    }
    // Highest first; equal scores keep the documents' order.
    results.sort_by(|a, b| b.1.total_cmp(&a.1));
    if let Some(top_n) = r.top_n.filter(|&t| t > 0) {
        results.truncate(usize::try_from(top_n).unwrap_or(usize::MAX));
    }
    let with_documents = r.return_documents.unwrap_or(true);
    let results: Vec<Value> = results
        .into_iter()
        .map(|(index, score)| {
            let mut result = json!({ "index": index, "relevance_score": score });
            if with_documents {
                result["document"] = json!({ "text": r.documents[index].text(), "multi_modal": null });
            }
            result
        })
        .collect();
    let body = json!({ "id": id, "model": engine.name, "results": results,
                       "usage": { "prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens } });
    Ok(Json(body).into_response())
}

/// A relevance in [0, 1): mostly the share of the query's distinct tokens found in the
/// document, so a document that holds the query's words ranks first; a tenth is a hash of the
/// document's tokens, so unrelated documents still differ and their order is fixed.
pub fn relevance(query: &[u32], document: &[u32]) -> f64 {
    let query: HashSet<u32> = query.iter().copied().collect();
    let held: HashSet<u32> = document.iter().copied().collect();
    let shared = if query.is_empty() { 0.0 } else { query.intersection(&held).count() as f64 / query.len() as f64 };
    let hash = document.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, &t| splitmix(h ^ u64::from(t)));
    // The top 53 bits as a fraction in [0, 1).
    let jitter = (hash >> 11) as f64 / (1u64 << 53) as f64;
    0.9 * shared + 0.1 * jitter
}

/// SplitMix64's finalizer: a fixed, well-mixed hash step (no per-process seed).
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_holding_the_query_ranks_above_one_that_does_not() {
        let query = [1, 2, 3];
        let all = relevance(&query, &[9, 1, 2, 3, 8]);
        let some = relevance(&query, &[1, 7]);
        let none = relevance(&query, &[4, 5, 6]);
        assert!(all > some && some > none, "{all} {some} {none}");
        for score in [all, some, none] {
            assert!((0.0..1.0).contains(&score), "{score}");
        }
        assert_eq!(relevance(&query, &[4, 5, 6]), none, "deterministic");
        assert_ne!(relevance(&query, &[4, 5, 7]), none, "unrelated documents still differ");
        assert!(relevance(&[], &[1]) < 0.1);
    }

    #[test]
    fn documents_are_strings_or_text_objects() {
        let r: RerankRequest =
            serde_json::from_str(r#"{"query": "q", "documents": ["a", {"text": "b", "title": "t"}], "top_n": null}"#)
                .unwrap();
        let texts: Vec<&str> = r.documents.iter().map(Document::text).collect();
        assert_eq!(texts, ["a", "b"]);
        assert!(r.model.is_none() && r.top_n.is_none());
        assert!(serde_json::from_str::<RerankRequest>(r#"{"query": "q", "documents": [3]}"#).is_err());
    }
}
