//! The HTTP/REST front end (KSERVE_V2.md §3): an axum router over [`InferenceServer`]. It only
//! translates between the wire and the core; every decision is the core's. Request bodies may be
//! gzip/deflate compressed, responses honour `Accept-Encoding`, and every error is a KServe
//! `{"error": "..."}` body.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, HttpBody};
use axum::extract::{Path, Request, State};
use axum::http::header::{HeaderName, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::{Bytes, BytesMut};
use futures::future::Either;
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tower::{Service, ServiceExt};
use tower_http::compression::CompressionLayer;
use tower_http::decompression::RequestDecompressionLayer;

use super::body_budget::HeldBody;
use super::core::{InferenceServer, EXTENSIONS, SERVER_NAME, SERVER_VERSION};
use super::error::{ServerError, ServerResult};
use super::http_json::{bad_json, check_json_outputs, decode_request, encode_response};
use super::stats;

/// Names the length of the JSON part of a body that carries binary tensors (§3.7.2).
pub const INFERENCE_HEADER_CONTENT_LENGTH: &str = "inference-header-content-length";

/// Bytes of an oversized body we still read and discard, so the client gets our 400 instead of a
/// reset connection; beyond this we stop reading.
const OVERSIZE_DRAIN_BYTES: usize = 64 << 20;

type Core = State<Arc<InferenceServer>>;

/// Every route of §3.1 that perfbench serves. A request that neither sends a compressed body
/// nor accepts a compressed answer skips the (de)compression layers, which would only wrap and
/// box both bodies of every inference call.
/// Inference calls, the hot route, also skip the router: it would match the path against every
/// route, collect its parameters and box the handler's future, all of which costs about as much
/// as the rest of a 16-float JSON exchange beyond parsing (issue 33).
pub fn service(
    core: Arc<InferenceServer>,
) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send> + Clone + Send + Sync + 'static {
    let plain = routes(core.clone());
    let coded = plain
        .clone()
        .layer(RequestDecompressionLayer::new())
        .layer(axum::middleware::map_response(explain_unsupported_encoding))
        .layer(CompressionLayer::new());
    tower::service_fn(move |request: Request| {
        let coding = needs_coding(request.headers());
        match infer_target(&request) {
            Some((model, version)) if !coding => {
                let core = core.clone();
                Either::Left(async move { Ok(answer_infer(&core, &model, &version, request).await) })
            }
            _ => Either::Right((if coding { coded.clone() } else { plain.clone() }).oneshot(request)),
        }
    })
}

/// The model and version (empty: the model's own) of a `POST /v2/models/{m}[/versions/{v}]/infer`,
/// as the router would take them. A path with a percent-escape goes through the router, which
/// decodes it.
fn infer_target(request: &Request) -> Option<(String, String)> {
    if request.method() != axum::http::Method::POST {
        return None;
    }
    let path = request.uri().path();
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    if rest.contains('%') {
        return None;
    }
    let mut segments = rest.split('/');
    match (segments.next(), segments.next(), segments.next(), segments.next()) {
        (Some(m), None, _, _) if !m.is_empty() => Some((m.to_string(), String::new())),
        (Some(m), Some("versions"), Some(v), None) if !m.is_empty() && !v.is_empty() => {
            Some((m.to_string(), v.to_string()))
        }
        _ => None,
    }
}

/// Does the request carry a `Content-Encoding`, or accept any encoding but identity?
fn needs_coding(headers: &HeaderMap) -> bool {
    let coded = |value: &HeaderValue| {
        value.to_str().map_or(true, |list| {
            list.split(',').any(|e| {
                let e = e.split(';').next().unwrap_or_default().trim();
                !e.is_empty() && !e.eq_ignore_ascii_case("identity")
            })
        })
    };
    headers.contains_key(CONTENT_ENCODING) || headers.get_all(ACCEPT_ENCODING).iter().any(coded)
}

fn routes(core: Arc<InferenceServer>) -> Router {
    Router::new()
        .route("/v2", get(server_metadata))
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/models/{m}", get(model_metadata))
        .route("/v2/models/{m}/versions/{v}", get(model_metadata_v))
        .route("/v2/models/{m}/ready", get(model_ready))
        .route("/v2/models/{m}/versions/{v}/ready", get(model_ready_v))
        .route("/v2/models/{m}/config", get(model_config))
        .route("/v2/models/{m}/versions/{v}/config", get(model_config_v))
        .route("/v2/models/{m}/stats", get(model_stats))
        .route("/v2/models/{m}/versions/{v}/stats", get(model_stats_v))
        .route("/v2/models/{m}/infer", post(infer))
        .route("/v2/models/{m}/versions/{v}/infer", post(infer_v))
        .route("/v2/models/{m}/trace/setting", get(model_trace_setting).post(change_model_trace_setting))
        .route("/v2/trace/setting", get(trace_setting).post(change_trace_setting))
        .route("/v2/logging", get(log_settings).post(change_log_settings))
        .route("/v2/repository/index", post(repository_index))
        .route("/v2/repository/{repo}/index", post(repository_index_named))
        .route("/v2/repository/models/{m}/load", post(load))
        .route("/v2/repository/{repo}/models/{m}/load", post(load_named))
        .route("/v2/repository/models/{m}/unload", post(unload))
        .route("/v2/repository/{repo}/models/{m}/unload", post(unload_named))
        .route("/v2/systemsharedmemory/status", get(system_shm_status_all))
        .route("/v2/systemsharedmemory/region/{r}/status", get(system_shm_status))
        .route("/v2/systemsharedmemory/region/{r}/register", post(system_shm_register))
        .route("/v2/systemsharedmemory/unregister", post(system_shm_unregister_all))
        .route("/v2/systemsharedmemory/region/{r}/unregister", post(system_shm_unregister))
        .route("/v2/cudasharedmemory/status", get(cuda_shm_status_all))
        .route("/v2/cudasharedmemory/region/{r}/status", get(cuda_shm_status))
        .route("/v2/cudasharedmemory/region/{r}/register", post(cuda_shm_register))
        .route("/v2/cudasharedmemory/unregister", post(ok))
        .route("/v2/cudasharedmemory/region/{r}/unregister", post(ok))
        .merge(super::openai::routes())
        .merge(super::vllm::routes(&core))
        .merge(super::rerank::routes())
        .merge(super::anthropic::routes())
        .merge(super::responses::routes())
        .merge(super::generate::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(core)
}

async fn not_found() -> ServerError {
    ServerError::not_found("Not Found")
}

async fn method_not_allowed() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, Json(json!({ "error": "Method Not Allowed" }))).into_response()
}

/// The decompression layer answers an unknown `Content-Encoding` with a bare 415; give it the
/// KServe error body.
async fn explain_unsupported_encoding<B>(response: axum::http::Response<B>) -> Response
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    if response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response.into_response();
    }
    let (parts, _) = response.into_parts();
    let mut fixed = (
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Json(json!({ "error": "Unsupported compression type: use gzip, deflate or identity" })),
    )
        .into_response();
    for (name, value) in parts.headers.iter().filter(|(n, _)| *n != CONTENT_TYPE) {
        fixed.headers_mut().insert(name.clone(), value.clone());
    }
    fixed
}

async fn ok() -> StatusCode {
    StatusCode::OK
}

/// Reads a whole request body up to `limit` bytes. An oversized body is still drained (up to a
/// bound) so the client reads a 400 that names the limit, not a reset. A body that arrives in
/// one frame (the usual case) is returned as it is, without a copy.
async fn read_body(mut body: Body, limit: usize) -> ServerResult<Bytes> {
    // Content-Length, when sent: a body in many frames is gathered into one buffer of that size.
    let expected = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX).min(limit);
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ServerError::invalid_arg(format!("failed to read the request body: {e}")))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(chunk.len());
        if total <= limit {
            match &first {
                None => first = Some(chunk),
                Some(head) => {
                    if rest.is_empty() {
                        rest.reserve(expected.max(head.len() + chunk.len()));
                        rest.extend_from_slice(head);
                    }
                    rest.extend_from_slice(&chunk);
                }
            }
        } else if total > limit.saturating_add(OVERSIZE_DRAIN_BYTES) {
            break;
        }
    }
    if total > limit {
        return Err(ServerError::invalid_arg(format!(
            "request body of {total} bytes or more exceeds the server's limit of {limit} bytes (--max-request-bytes)"
        )));
    }
    Ok(if rest.is_empty() { first.unwrap_or_default() } else { rest.freeze() })
}

/// Parses an optional JSON body: empty means `T::default()`.
async fn read_json<T: for<'de> Deserialize<'de> + Default>(core: &InferenceServer, body: Body) -> ServerResult<T> {
    let bytes = read_body(body, core.options.max_request_bytes).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes).map_err(bad_json)
}

async fn live(State(core): Core) -> StatusCode {
    if core.is_live() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

async fn ready(State(core): Core) -> StatusCode {
    if core.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

async fn server_metadata() -> Json<Value> {
    Json(json!({ "name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS }))
}

fn metadata_json(core: &InferenceServer, name: &str, version: &str) -> ServerResult<Json<Value>> {
    let m = core.model_metadata(name, version)?;
    let tensors = |list: &[crate::proto::inference::model_metadata_response::TensorMetadata]| -> Vec<Value> {
        list.iter().map(|t| json!({ "name": t.name, "datatype": t.datatype, "shape": t.shape })).collect()
    };
    Ok(Json(json!({
        "name": m.name,
        "versions": m.versions,
        "platform": m.platform,
        "inputs": tensors(&m.inputs),
        "outputs": tensors(&m.outputs),
    })))
}

async fn model_metadata(State(core): Core, Path(m): Path<String>) -> ServerResult<Json<Value>> {
    metadata_json(&core, &m, "")
}

async fn model_metadata_v(State(core): Core, Path((m, v)): Path<(String, String)>) -> ServerResult<Json<Value>> {
    metadata_json(&core, &m, &v)
}

fn ready_status(core: &InferenceServer, name: &str, version: &str) -> Response {
    if core.model_ready(name, version) {
        StatusCode::OK.into_response()
    } else {
        ServerError::invalid_arg("Model version not ready").into_response()
    }
}

async fn model_ready(State(core): Core, Path(m): Path<String>) -> Response {
    ready_status(&core, &m, "")
}

async fn model_ready_v(State(core): Core, Path((m, v)): Path<(String, String)>) -> Response {
    ready_status(&core, &m, &v)
}

async fn model_config(State(core): Core, Path(m): Path<String>) -> ServerResult<Json<Value>> {
    core.model_config_json(&m, "").map(Json)
}

async fn model_config_v(State(core): Core, Path((m, v)): Path<(String, String)>) -> ServerResult<Json<Value>> {
    core.model_config_json(&m, &v).map(Json)
}

async fn all_stats(State(core): Core) -> ServerResult<Json<Value>> {
    Ok(Json(stats::to_json(&core.statistics("", "")?)))
}

async fn model_stats(State(core): Core, Path(m): Path<String>) -> ServerResult<Json<Value>> {
    Ok(Json(stats::to_json(&core.statistics(&m, "")?)))
}

async fn model_stats_v(State(core): Core, Path((m, v)): Path<(String, String)>) -> ServerResult<Json<Value>> {
    Ok(Json(stats::to_json(&core.statistics(&m, &v)?)))
}

// The request is taken whole (not as `HeaderMap` + `Body`): extracting a `HeaderMap` clones it.
async fn infer(State(core): Core, Path(m): Path<String>, request: Request) -> Response {
    answer_infer(&core, &m, "", request).await
}

async fn infer_v(State(core): Core, Path((m, v)): Path<(String, String)>, request: Request) -> Response {
    answer_infer(&core, &m, &v, request).await
}

/// One inference call's answer, from the direct route or from the router's two infer routes.
async fn answer_infer(core: &InferenceServer, model: &str, version: &str, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    run_infer(core, model, version, &parts.headers, body).await.unwrap_or_else(IntoResponse::into_response)
}

async fn run_infer(
    core: &InferenceServer,
    name: &str,
    version: &str,
    headers: &HeaderMap,
    body: Body,
) -> ServerResult<Response> {
    // The body's share of --max-body-bytes-in-flight, held until the answer is built: a body
    // without Content-Length takes the most one may hold.
    let length = body.size_hint().exact().unwrap_or(core.options.max_request_bytes as u64);
    let share = core.body_budget.reserve(length.min(core.options.max_request_bytes as u64)).await;
    // Read the body before anything can fail, so every error reaches the client intact.
    let body = read_body(body, core.options.max_request_bytes).await?;
    let header_len = match headers.get(INFERENCE_HEADER_CONTENT_LENGTH) {
        None => None,
        Some(v) => Some(v.to_str().ok().and_then(|s| s.trim().parse::<usize>().ok()).ok_or_else(|| {
            ServerError::invalid_arg(format!("Inference-Header-Content-Length must be a byte count, got {v:?}"))
        })?),
    };
    let model = core.repository.get(name, version)?;
    if model.decoupled() {
        return Err(ServerError::unsupported(crate::server::core::DECOUPLED_HTTP));
    }
    let decoded = decode_request(&model.config, version, body, header_len)?;
    check_json_outputs(&model.config, &decoded.request, &decoded.formats)?;
    let response = core.infer_on(&model, decoded.request).await?;
    let encoded = encode_response(&response, &decoded.formats)?;
    let mut http = Response::new(Body::new(HeldBody::new(encoded.body, share)));
    let content_type = match encoded.header_len {
        Some(n) => {
            http.headers_mut().insert(HeaderName::from_static(INFERENCE_HEADER_CONTENT_LENGTH), HeaderValue::from(n));
            "application/octet-stream"
        }
        None => "application/json",
    };
    http.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(http)
}

/// Trace settings as Triton prints them: `trace_level` a list, the others one string each.
fn trace_json(settings: &crate::server::trace::Settings) -> Value {
    let map = settings
        .iter()
        .map(|(k, v)| {
            let value = if k == "trace_level" { json!(v) } else { json!(v.first().cloned().unwrap_or_default()) };
            (k.clone(), value)
        })
        .collect();
    Value::Object(map)
}

async fn trace_setting(State(core): Core) -> Json<Value> {
    Json(trace_json(&core.trace.get("")))
}

async fn model_trace_setting(State(core): Core, Path(m): Path<String>) -> ServerResult<Json<Value>> {
    core.repository.get(&m, "")?;
    Ok(Json(trace_json(&core.trace.get(&m))))
}

/// Changes trace settings: each value a string, a list of strings, or null (clears it).
async fn update_trace(core: &InferenceServer, model: &str, body: Body) -> ServerResult<Json<Value>> {
    let update: serde_json::Map<String, Value> = read_json(core, body).await?;
    let mut updates = Vec::with_capacity(update.len());
    for (key, value) in update {
        let values = match value {
            Value::Null => None,
            Value::String(s) => Some(vec![s]),
            Value::Array(items) => Some(
                items
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s),
                        other => Err(ServerError::invalid_arg(format!(
                            "trace setting '{key}': expected strings, got {other}"
                        ))),
                    })
                    .collect::<ServerResult<Vec<_>>>()?,
            ),
            other => {
                return Err(ServerError::invalid_arg(format!(
                    "trace setting '{key}': expected a string, a list of strings or null, got {other}"
                )))
            }
        };
        updates.push((key, values));
    }
    Ok(Json(trace_json(&core.trace.update(model, updates)?)))
}

async fn change_trace_setting(State(core): Core, body: Body) -> ServerResult<Json<Value>> {
    update_trace(&core, "", body).await
}

async fn change_model_trace_setting(State(core): Core, Path(m): Path<String>, body: Body) -> ServerResult<Json<Value>> {
    core.repository.get(&m, "")?;
    update_trace(&core, &m, body).await
}

fn log_defaults() -> Value {
    json!({
        "log_file": "",
        "log_info": true,
        "log_warning": true,
        "log_error": true,
        "log_verbose_level": 0,
        "log_format": "default",
    })
}

async fn log_settings() -> Json<Value> {
    Json(log_defaults())
}

async fn change_log_settings(State(core): Core, body: Body) -> ServerResult<Json<Value>> {
    let update: serde_json::Map<String, Value> = read_json(&core, body).await?;
    if update.is_empty() {
        return Ok(Json(log_defaults()));
    }
    Err(ServerError::unsupported("log settings cannot be changed over the network; use --log when starting perfbench"))
}

#[derive(Deserialize, Default)]
struct IndexBody {
    #[serde(default)]
    ready: bool,
}

async fn repository_index(State(core): Core, body: Body) -> ServerResult<Json<Value>> {
    let request: IndexBody = read_json(&core, body).await?;
    let entries = core.repository_index(request.ready)?;
    let list: Vec<Value> = entries
        .into_iter()
        .map(|e| json!({ "name": e.name, "version": e.version, "state": e.state, "reason": e.reason }))
        .collect();
    Ok(Json(Value::Array(list)))
}

async fn repository_index_named(core: Core, Path(_repo): Path<String>, body: Body) -> ServerResult<Json<Value>> {
    repository_index(core, body).await
}

#[derive(Deserialize, Default)]
struct LoadBody {
    #[serde(default)]
    parameters: serde_json::Map<String, Value>,
}

/// Load and unload take no repository name: perfbench serves one repository.
pub(crate) fn no_repository_name(repo: &str) -> ServerResult<()> {
    if repo.is_empty() {
        Ok(())
    } else {
        Err(ServerError::unsupported(format!(
            "'repository_name' specification is not supported (got '{repo}'): perfbench serves one repository"
        )))
    }
}

async fn load_model(core: Arc<InferenceServer>, repo: &str, name: &str, body: Body) -> ServerResult<StatusCode> {
    no_repository_name(repo)?;
    let request: LoadBody = read_json(&core, body).await?;
    if let Some(key) = request.parameters.keys().find(|k| k.starts_with("file:")) {
        return Err(ServerError::unsupported(format!(
            "load parameter '{key}': model file overrides are not supported; models are built from their config"
        )));
    }
    let config = match request.parameters.get("config") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    };
    // Loading builds the model (weights, instance threads): keep it off the async workers.
    let name = name.to_string();
    blocking(move || core.load_model(&name, config.as_deref())).await?;
    Ok(StatusCode::OK)
}

async fn load(State(core): Core, Path(m): Path<String>, body: Body) -> ServerResult<StatusCode> {
    load_model(core, "", &m, body).await
}

async fn load_named(
    State(core): Core,
    Path((repo, m)): Path<(String, String)>,
    body: Body,
) -> ServerResult<StatusCode> {
    load_model(core, &repo, &m, body).await
}

async fn unload_model(core: Arc<InferenceServer>, repo: &str, name: &str, body: Body) -> ServerResult<StatusCode> {
    no_repository_name(repo)?;
    let _: LoadBody = read_json(&core, body).await?;
    // Unloading joins the instance threads once their queued work is done.
    let name = name.to_string();
    blocking(move || core.unload_model(&name)).await?;
    Ok(StatusCode::OK)
}

/// Runs repository work on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> ServerResult<T> + Send + 'static,
) -> ServerResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ServerError::internal(format!("repository task failed: {e}")))?
}

async fn unload(State(core): Core, Path(m): Path<String>, body: Body) -> ServerResult<StatusCode> {
    unload_model(core, "", &m, body).await
}

async fn unload_named(
    State(core): Core,
    Path((repo, m)): Path<(String, String)>,
    body: Body,
) -> ServerResult<StatusCode> {
    unload_model(core, &repo, &m, body).await
}

fn system_shm_json(core: &InferenceServer, name: &str) -> ServerResult<Json<Value>> {
    let list: Vec<Value> = core
        .shm
        .status(name)?
        .iter()
        .map(|r| json!({ "name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size }))
        .collect();
    Ok(Json(Value::Array(list)))
}

async fn system_shm_status_all(State(core): Core) -> ServerResult<Json<Value>> {
    system_shm_json(&core, "")
}

async fn system_shm_status(State(core): Core, Path(r): Path<String>) -> ServerResult<Json<Value>> {
    system_shm_json(&core, &r)
}

#[derive(Deserialize, Default)]
struct RegisterBody {
    key: String,
    #[serde(default)]
    offset: u64,
    byte_size: u64,
}

async fn system_shm_register(State(core): Core, Path(r): Path<String>, body: Body) -> ServerResult<StatusCode> {
    let bytes = read_body(body, core.options.max_request_bytes).await?;
    let request: RegisterBody = serde_json::from_slice(&bytes).map_err(bad_json)?;
    core.shm.register(&r, &request.key, request.offset, request.byte_size)?;
    Ok(StatusCode::OK)
}

async fn system_shm_unregister_all(State(core): Core) -> StatusCode {
    core.shm.unregister("");
    StatusCode::OK
}

async fn system_shm_unregister(State(core): Core, Path(r): Path<String>) -> StatusCode {
    core.shm.unregister(&r);
    StatusCode::OK
}

async fn cuda_shm_status_all() -> Json<Value> {
    Json(json!([]))
}

async fn cuda_shm_status(Path(r): Path<String>) -> ServerError {
    ServerError::invalid_arg(format!("Unable to find cuda shared memory region: '{r}'"))
}

async fn cuda_shm_register() -> ServerError {
    ServerError::invalid_arg("CUDA shared memory is not available: no GPU")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(method: &str, path: &str) -> Option<(String, String)> {
        infer_target(&Request::builder().method(method).uri(path).body(Body::empty()).unwrap())
    }

    /// The direct route takes exactly the paths the router's two infer routes take, and leaves
    /// the rest (other methods, other shapes, escapes to decode) to the router.
    #[test]
    fn only_infer_posts_skip_the_router() {
        let some = |m: &str, v: &str| Some((m.to_string(), v.to_string()));
        assert_eq!(target("POST", "/v2/models/identity/infer"), some("identity", ""));
        assert_eq!(target("POST", "/v2/models/identity/versions/3/infer"), some("identity", "3"));
        assert_eq!(target("POST", "/v2/models/versions/infer"), some("versions", ""));
        assert_eq!(target("POST", "/v2/models/identity/infer?x=1"), some("identity", ""));
        for path in [
            "/v2/models//infer",
            "/v2/models/identity/infer/",
            "/v2/models/identity/versions//infer",
            "/v2/models/identity/versions/infer",
            "/v2/models/a/b/infer",
            "/v2/models/my%20model/infer",
            "/v2/models/identity/ready",
            "/v2//models/identity/infer",
        ] {
            assert_eq!(target("POST", path), None, "{path}");
        }
        assert_eq!(target("GET", "/v2/models/identity/infer"), None);
    }
}
