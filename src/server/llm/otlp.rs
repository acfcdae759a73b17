//! The twin's requests as OpenTelemetry spans (`perfbench serve --otlp-traces-endpoint URL`):
//! one `llm_request` span per finished request, named and measured as vLLM's (attributes in
//! seconds, `gen_ai.request.id` the request's X-Request-ID), POSTed as OTLP/HTTP protobuf in
//! batches from a thread of its own, so the batcher never waits on the collector.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span};
use prost::Message;
use rand::RngCore;

use super::record::{monotonic_ns, RequestRecord};

/// Spans waiting for the exporter thread; past this the newest are dropped (and counted) rather
/// than slow the batcher.
const QUEUE: usize = 65_536;
/// Spans per POST, and how long a partial batch waits.
const BATCH: usize = 512;
const FLUSH_EVERY: Duration = Duration::from_millis(200);
const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// vLLM's span name and attribute names (vllm/tracing.py, `SpanAttributes`).
pub const SPAN_NAME: &str = "llm_request";
pub mod attr {
    pub const REQUEST_ID: &str = "gen_ai.request.id";
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub const PROMPT_TOKENS: &str = "gen_ai.usage.prompt_tokens";
    pub const COMPLETION_TOKENS: &str = "gen_ai.usage.completion_tokens";
    pub const TIME_IN_QUEUE: &str = "gen_ai.latency.time_in_queue";
    pub const TIME_TO_FIRST_TOKEN: &str = "gen_ai.latency.time_to_first_token";
    pub const E2E: &str = "gen_ai.latency.e2e";
    pub const TIME_IN_MODEL_PREFILL: &str = "gen_ai.latency.time_in_model_prefill";
    pub const TIME_IN_MODEL_DECODE: &str = "gen_ai.latency.time_in_model_decode";
    pub const TIME_IN_MODEL_INFERENCE: &str = "gen_ai.latency.time_in_model_inference";
}

/// A running exporter: [`SpanExport::send`] queues a finished request's span.
pub struct SpanExport {
    queue: SyncSender<Span>,
    dropped: Arc<AtomicU64>,
    /// Unix-time ns minus CLOCK_MONOTONIC ns, read once: records carry the monotonic clock,
    /// spans Unix time.
    wall_offset_ns: u64,
}

impl SpanExport {
    /// Checks `endpoint` and starts the exporter thread. A URL with no path gets OTLP's
    /// `/v1/traces`; any other path is used as given (as OTLP exporters take a traces endpoint).
    pub fn start(endpoint: &str) -> Result<SpanExport, String> {
        let url = traces_url(endpoint)?;
        crate::proto::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(POST_TIMEOUT)
            .build()
            .map_err(|e| format!("--otlp-traces-endpoint: cannot make an HTTP client: {e}"))?;
        let (queue, spans) = sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || export_loop(spans, client, url))
            .map_err(|e| format!("--otlp-traces-endpoint: cannot start the exporter thread: {e}"))?;
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
        Ok(SpanExport { queue, dropped, wall_offset_ns: wall.saturating_sub(monotonic_ns()) })
    }

    /// Queues `record`'s span; never blocks.
    pub fn send(&self, record: &RequestRecord) {
        match self.queue.try_send(span(record, self.wall_offset_ns)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!("--otlp-traces-endpoint: the exporter is behind; spans are being dropped");
                }
            }
        }
    }
}

fn traces_url(endpoint: &str) -> Result<reqwest::Url, String> {
    let bad = |why: &str| format!("--otlp-traces-endpoint '{endpoint}': {why}");
    let mut url = reqwest::Url::parse(endpoint).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("OTLP/HTTP needs an http:// or https:// URL"));
    }
    if url.host_str().is_none() {
        return Err(bad("the URL names no host"));
    }
    if matches!(url.path(), "" | "/") {
        url.set_path("/v1/traces");
    }
    Ok(url)
}

/// One request's span, from its record (instants in CLOCK_MONOTONIC ns).
pub fn span(r: &RequestRecord, wall_offset_ns: u64) -> Span {
    let seconds = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e9;
    let admitted = r.admitted_ns.unwrap_or(r.finish_ns);
    // The client's first token is the one the front end read and wrote out.
    let first = r.first_read_ns.or(r.first_chunk_ns).unwrap_or(r.finish_ns);
    let first_model = r.first_chunk_ns.unwrap_or(r.finish_ns);
    let last_model = r.chunk_ns.last().copied().unwrap_or(r.finish_ns);
    let mut ids = [0u8; 24];
    rand::rng().fill_bytes(&mut ids);
    Span {
        trace_id: ids[..16].to_vec(),
        span_id: ids[16..].to_vec(),
        name: SPAN_NAME.into(),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: r.arrival_ns + wall_offset_ns,
        end_time_unix_nano: r.finish_ns + wall_offset_ns,
        attributes: vec![
            text(attr::REQUEST_ID, &r.id),
            text(attr::RESPONSE_MODEL, &r.model),
            int(attr::PROMPT_TOKENS, r.prompt_tokens),
            int(attr::COMPLETION_TOKENS, r.completion_tokens),
            float(attr::TIME_IN_QUEUE, seconds(r.arrival_ns, admitted)),
            float(attr::TIME_TO_FIRST_TOKEN, seconds(r.arrival_ns, first)),
            float(attr::E2E, seconds(r.arrival_ns, r.finish_ns)),
            float(attr::TIME_IN_MODEL_PREFILL, seconds(admitted, first_model)),
            float(attr::TIME_IN_MODEL_DECODE, seconds(first_model, last_model)),
            float(attr::TIME_IN_MODEL_INFERENCE, seconds(admitted, last_model)),
        ],
        ..Default::default()
    }
}

fn key_value(key: &str, value: Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(value) }) }
}

fn text(key: &str, value: &str) -> KeyValue {
    key_value(key, Value::StringValue(value.into()))
}

fn int(key: &str, value: usize) -> KeyValue {
    key_value(key, Value::IntValue(value as i64))
}

fn float(key: &str, value: f64) -> KeyValue {
    key_value(key, Value::DoubleValue(value))
}

/// Spans wrapped as one export request: the resource names the service, the scope the twin.
pub fn export_request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![text("service.name", "perfbench serve")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "perfbench.server.llm".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Gathers spans into batches and POSTs them until every sender is gone, then sends the rest.
fn export_loop(spans: Receiver<Span>, client: reqwest::Client, url: reqwest::Url) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return tracing::warn!("--otlp-traces-endpoint: cannot start the exporter's runtime: {e}"),
    };
    let mut failures = 0u64;
    loop {
        let mut batch = Vec::new();
        let open = loop {
            match spans.recv_timeout(FLUSH_EVERY) {
                Ok(span) => {
                    batch.push(span);
                    if batch.len() == BATCH {
                        break true;
                    }
                }
                Err(RecvTimeoutError::Timeout) => break true,
                Err(RecvTimeoutError::Disconnected) => break false,
            }
        };
        if !batch.is_empty() {
            let body = export_request(batch).encode_to_vec();
            let post = client.post(url.clone()).header("content-type", "application/x-protobuf").body(body);
            // `send` starts its timeout's timer: it must run inside the runtime.
            let outcome = runtime.block_on(async { post.send().await?.error_for_status() });
            if let Err(e) = outcome {
                failures += 1;
                // The first failure says why; later ones only count, so a dead collector
                // does not flood the server's log.
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(
                        "--otlp-traces-endpoint {url}: a batch of spans was not delivered ({failures} so far): {e}"
                    );
                }
            }
        }
        if !open {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RequestRecord {
        RequestRecord {
            id: "req-7".into(),
            model: "llm".into(),
            arrival_ns: 1_000_000_000,
            admitted_ns: Some(1_002_000_000),
            first_chunk_ns: Some(1_010_000_000),
            first_read_ns: Some(1_010_500_000),
            chunk_ns: vec![1_010_000_000, 1_020_000_000, 1_030_000_000],
            finish_ns: 1_030_100_000,
            prompt_tokens: 12,
            completion_tokens: 3,
            reasoning_tokens: 0,
            cached_tokens: 0,
            preemptions: 0,
            finish_reason: "length",
        }
    }

    fn attribute<'a>(span: &'a Span, key: &str) -> &'a Value {
        let kv = span.attributes.iter().find(|kv| kv.key == key).unwrap_or_else(|| panic!("no {key}"));
        kv.value.as_ref().and_then(|v| v.value.as_ref()).unwrap()
    }

    fn seconds(span: &Span, key: &str) -> f64 {
        match attribute(span, key) {
            Value::DoubleValue(v) => *v,
            other => panic!("{key} is {other:?}"),
        }
    }

    #[test]
    fn a_record_becomes_vllms_span_in_seconds_and_unix_time() {
        let s = span(&record(), 5_000);
        assert_eq!(s.name, "llm_request");
        assert_eq!(s.kind, SpanKind::Server as i32);
        assert_eq!((s.trace_id.len(), s.span_id.len()), (16, 8));
        assert_eq!((s.start_time_unix_nano, s.end_time_unix_nano), (1_000_005_000, 1_030_105_000));
        assert_eq!(attribute(&s, attr::REQUEST_ID), &Value::StringValue("req-7".into()));
        assert_eq!(attribute(&s, attr::RESPONSE_MODEL), &Value::StringValue("llm".into()));
        assert_eq!(attribute(&s, attr::PROMPT_TOKENS), &Value::IntValue(12));
        assert_eq!(attribute(&s, attr::COMPLETION_TOKENS), &Value::IntValue(3));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(seconds(&s, attr::TIME_IN_QUEUE), 0.002));
        assert!(close(seconds(&s, attr::TIME_TO_FIRST_TOKEN), 0.0105), "the front end's read, as the client sees it");
        assert!(close(seconds(&s, attr::E2E), 0.0301));
        assert!(close(seconds(&s, attr::TIME_IN_MODEL_PREFILL), 0.008));
        assert!(close(seconds(&s, attr::TIME_IN_MODEL_DECODE), 0.020));
        assert!(close(seconds(&s, attr::TIME_IN_MODEL_INFERENCE), 0.028));
    }

    #[test]
    fn two_spans_never_share_an_id() {
        let (a, b) = (span(&record(), 0), span(&record(), 0));
        assert_ne!(a.span_id, b.span_id);
        assert_ne!(a.trace_id, b.trace_id);
    }

    #[test]
    fn endpoints_get_otlps_path_and_bad_ones_a_reason() {
        assert_eq!(traces_url("http://127.0.0.1:4318").unwrap().as_str(), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/custom/path").unwrap().path(), "/custom/path");
        assert!(traces_url("grpc://c:4317").unwrap_err().contains("http:// or https://"));
        assert!(traces_url("not a url").unwrap_err().starts_with("--otlp-traces-endpoint 'not a url'"));
    }

    #[test]
    fn the_export_request_decodes_back() {
        let bytes = export_request(vec![span(&record(), 0)]).encode_to_vec();
        let back = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        let spans = &back.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 1);
        assert_eq!(attribute(&spans[0], attr::REQUEST_ID), &Value::StringValue("req-7".into()));
    }
}
