//! The server's view of each request (`--otlp-listen ADDR`): an OTLP/HTTP receiver runs beside
//! the load, keeps each span's timings under its request id (`gen_ai.request.id`, which vLLM and
//! `perfbench serve` set to the X-Request-ID the client sent), and after the run each record
//! takes the span of its id.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use parking_lot::Mutex;
use prost::Message;

use super::metrics::Record;
pub use super::metrics::ServerSpan;

/// The request id and timings a span carries; `None` for a span that names no request.
pub fn read_span(span: &Span) -> Option<(String, ServerSpan)> {
    let mut id = None;
    let mut times = ServerSpan::default();
    for kv in &span.attributes {
        let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
        let seconds = match value {
            Some(Value::DoubleValue(v)) => Some(*v),
            Some(Value::IntValue(v)) => Some(*v as f64),
            _ => None,
        };
        match (kv.key.as_str(), value) {
            ("gen_ai.request.id", Some(Value::StringValue(s))) => id = Some(s.clone()),
            ("gen_ai.latency.time_to_first_token", _) => times.time_to_first_token = seconds,
            ("gen_ai.latency.e2e", _) => times.request_latency = seconds,
            ("gen_ai.latency.time_in_queue", _) => times.queue_time = seconds,
            ("gen_ai.latency.time_in_model_prefill", _) => times.prefill_time = seconds,
            ("gen_ai.latency.time_in_model_decode", _) => times.decode_time = seconds,
            _ => {}
        }
    }
    Some((id?, times))
}

/// A joined span may be longer than the client's own view of its request by this much before the
/// join is called implausible (the two clocks are read at different layers).
const SLACK_S: f64 = 0.001;

/// `record`'s server timings and the client's own part (client minus server), as
/// `profile_export.jsonl` metrics in ms; none for a record with no span.
pub fn metrics(record: &Record) -> Vec<(&'static str, f64)> {
    let Some(server) = record.server else { return Vec::new() };
    let ms = |s: f64| s * 1e3;
    let mut out: Vec<(&'static str, f64)> = [
        ("server_time_to_first_token", server.time_to_first_token),
        ("server_request_latency", server.request_latency),
        ("server_queue_time", server.queue_time),
        ("server_prefill_time", server.prefill_time),
        ("server_decode_time", server.decode_time),
    ]
    .into_iter()
    .filter_map(|(tag, s)| Some((tag, ms(s?))))
    .collect();
    if let (Some(client), Some(server)) = (client_ttft_s(record), server.time_to_first_token) {
        out.push(("client_time_to_first_token_share", ms(client - server)));
    }
    if let Some(server) = server.request_latency {
        out.push(("client_request_latency_share", ms(client_latency_s(record) - server)));
    }
    out
}

fn client_ttft_s(record: &Record) -> Option<f64> {
    record.chunks.first().map(|c| c.at.saturating_duration_since(record.start).as_secs_f64())
}

fn client_latency_s(record: &Record) -> f64 {
    record.end.saturating_duration_since(record.start).as_secs_f64()
}

/// A joined span the client's own view rules out: the server took longer than the client saw
/// (to the last byte, or to the first token). A span joined to the wrong request shows so.
pub fn implausible(record: &Record) -> bool {
    let Some(server) = record.server else { return false };
    let longer = |server: Option<f64>, client: Option<f64>| match (server, client) {
        (Some(s), Some(c)) => s > c + SLACK_S,
        _ => false,
    };
    longer(server.request_latency, Some(client_latency_s(record)))
        || longer(server.time_to_first_token, client_ttft_s(record))
}

/// The console's line on the join: how many requests have their span, how many are
/// implausible, and the client's own part of TTFT.
pub fn note(records: &[Record]) -> String {
    let measured: Vec<&Record> = records.iter().filter(|r| !r.warmup).collect();
    let joined: Vec<&Record> = measured.iter().copied().filter(|r| r.server.is_some()).collect();
    let mut share: Vec<f64> = joined
        .iter()
        .filter_map(|r| Some(client_ttft_s(r)? - r.server?.time_to_first_token?))
        .map(|s| s * 1e3)
        .collect();
    share.sort_by(f64::total_cmp);
    let at = |q: f64| share[((share.len() - 1) as f64 * q).round() as usize];
    let ttft = if share.is_empty() {
        String::new()
    } else {
        format!("; client TTFT minus server TTFT p50 {:.2} ms, p99 {:.2} ms", at(0.5), at(0.99))
    };
    let odd = joined.iter().filter(|r| implausible(r)).count();
    format!(
        "Server spans (OTLP): {} of {} requests joined by request id ({:.1}%){ttft}; {odd} implausible \
         (server time longer than the client's)",
        joined.len(),
        measured.len(),
        100.0 * joined.len() as f64 / measured.len().max(1) as f64
    )
}

type Spans = Arc<Mutex<HashMap<String, ServerSpan>>>;

/// A running receiver; [`SpanReceiver::join`] stops it.
pub struct SpanReceiver {
    addr: SocketAddr,
    spans: Spans,
    stop: tokio::sync::oneshot::Sender<()>,
}

/// How long after the last answer spans may still arrive (exporters batch: ours every 200 ms,
/// OpenTelemetry's BatchSpanProcessor every 5 s by default).
const GRACE: Duration = Duration::from_secs(6);
/// Once every record has its span, or nothing new came for this long, the wait ends.
const QUIET: Duration = Duration::from_millis(600);

impl SpanReceiver {
    /// Listens on `addr` (host:port; port 0 picks one) for `POST /v1/traces`.
    pub async fn start(addr: &str) -> anyhow::Result<SpanReceiver> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--otlp-listen {addr}: cannot listen there"))?;
        let addr = listener.local_addr()?;
        let spans: Spans = Default::default();
        let app = axum::Router::new().route("/v1/traces", axum::routing::post(receive)).with_state(spans.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(SpanReceiver { addr, spans, stop })
    }

    /// The URL a server's `--otlp-traces-endpoint` should name.
    pub fn url(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// Waits for the spans of `records` (see [`GRACE`]), stops, and gives each record the span
    /// of its request id. Returns how many were joined.
    pub async fn join(self, records: &mut [Record]) -> usize {
        let wanted = records.iter().filter(|r| !r.warmup).count();
        let deadline = tokio::time::Instant::now() + GRACE;
        let mut last = (0, tokio::time::Instant::now());
        loop {
            let (have, all) = {
                let spans = self.spans.lock();
                let have = spans.len();
                (have, records.iter().filter(|r| !r.warmup).all(|r| spans.contains_key(&r.request_id)))
            };
            let now = tokio::time::Instant::now();
            if have != last.0 {
                last = (have, now);
            }
            if all || wanted == 0 || now >= deadline || now - last.1 >= QUIET {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.stop.send(());
        let spans = std::mem::take(&mut *self.spans.lock());
        attach(records, spans)
    }
}

/// Gives each record the span of its request id; returns how many found one.
pub fn attach(records: &mut [Record], mut spans: HashMap<String, ServerSpan>) -> usize {
    let mut joined = 0;
    for record in records.iter_mut() {
        record.server = spans.remove(&record.request_id);
        joined += record.server.is_some() as usize;
    }
    joined
}

async fn receive(State(spans): State<Spans>, body: Bytes) -> (StatusCode, Vec<u8>) {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, b"not an OTLP ExportTraceServiceRequest (protobuf)".to_vec());
    };
    let mut kept = spans.lock();
    for span in request.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans) {
        if let Some((id, times)) = read_span(span) {
            kept.insert(id, times);
        }
    }
    (StatusCode::OK, ExportTraceServiceResponse::default().encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::llm::otlp;

    const MS_50: Duration = Duration::from_millis(50);

    fn chunk(at: std::time::Instant) -> super::super::metrics::Chunk {
        super::super::metrics::Chunk { at, tokens: 1, reasoning: false }
    }
    use crate::server::llm::record::RequestRecord;

    fn span_of(id: &str, first_read_ms: u64) -> Span {
        let record = RequestRecord {
            id: id.into(),
            model: "llm".into(),
            arrival_ns: 0,
            admitted_ns: Some(1_000_000),
            first_chunk_ns: Some(first_read_ms * 1_000_000),
            first_read_ns: Some(first_read_ms * 1_000_000),
            chunk_ns: vec![first_read_ms * 1_000_000, 40_000_000],
            finish_ns: 41_000_000,
            prompt_tokens: 4,
            completion_tokens: 2,
            reasoning_tokens: 0,
            cached_tokens: 0,
            preemptions: 0,
            finish_reason: "length",
        };
        otlp::span(&record, 0)
    }

    #[test]
    fn the_twins_span_reads_back_as_its_timings() {
        let (id, times) = read_span(&span_of("a", 10)).unwrap();
        assert_eq!(id, "a");
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-12;
        assert!(close(times.time_to_first_token, 0.010));
        assert!(close(times.request_latency, 0.041));
        assert!(close(times.queue_time, 0.001));
        assert!(close(times.prefill_time, 0.009));
        assert!(close(times.decode_time, 0.030));
        assert!(read_span(&Span::default()).is_none(), "a span with no request id joins nothing");
    }

    #[tokio::test]
    async fn spans_posted_to_the_receiver_join_their_own_records_only() {
        crate::proto::install_crypto_provider();
        let receiver = SpanReceiver::start("127.0.0.1:0").await.unwrap();
        let body = otlp::export_request(vec![span_of("a", 10), span_of("b", 20)]).encode_to_vec();
        let reply = reqwest::Client::new().post(receiver.url()).body(body).send().await.unwrap();
        assert_eq!(reply.status(), 200);
        let garbage = reqwest::Client::new().post(receiver.url()).body("no").send().await.unwrap();
        assert_eq!(garbage.status(), 400);
        let mut records =
            vec![Record::for_test("b", MS_50), Record::for_test("a", MS_50), Record::for_test("c", MS_50)];
        assert_eq!(receiver.join(&mut records).await, 2);
        let ttft = |r: &Record| r.server.and_then(|s| s.time_to_first_token);
        // Each record has its own id's span: a join by position would swap a and b.
        assert!((ttft(&records[0]).unwrap() - 0.020).abs() < 1e-12);
        assert!((ttft(&records[1]).unwrap() - 0.010).abs() < 1e-12);
        assert_eq!(records[2].server, None);
    }

    #[test]
    fn a_span_joined_to_the_wrong_request_is_caught() {
        // Two requests: a short one (5 ms at the client) and a long one (60 ms). Their spans'
        // ids shuffled on purpose: the short request gets the long one's span (41 ms at the
        // server), which the client's own view rules out.
        let mut short = Record::for_test("short", Duration::from_millis(5));
        short.chunks.push(chunk(short.start + Duration::from_millis(4)));
        let mut long = Record::for_test("long", Duration::from_millis(60));
        long.chunks.push(chunk(long.start + Duration::from_millis(15)));
        let server_long =
            ServerSpan { time_to_first_token: Some(0.012), request_latency: Some(0.041), ..Default::default() };
        let server_short =
            ServerSpan { time_to_first_token: Some(0.003), request_latency: Some(0.004), ..Default::default() };
        let mut records = vec![short, long];

        let right = HashMap::from([("short".to_string(), server_short), ("long".to_string(), server_long)]);
        assert_eq!(attach(&mut records, right), 2);
        assert!(!records.iter().any(implausible));
        assert!(note(&records).contains("0 implausible"), "{:?}", note(&records));

        let shuffled = HashMap::from([("short".to_string(), server_long), ("long".to_string(), server_short)]);
        attach(&mut records, shuffled);
        assert!(implausible(&records[0]), "41 ms at the server inside 5 ms at the client");
        assert!(note(&records).contains("1 implausible"), "{:?}", note(&records));
    }

    #[test]
    fn the_export_carries_the_server_times_and_the_clients_share() {
        let mut r = Record::for_test("a", Duration::from_millis(50));
        r.chunks.push(chunk(r.start + Duration::from_millis(12)));
        r.server =
            Some(ServerSpan { time_to_first_token: Some(0.010), request_latency: Some(0.045), ..Default::default() });
        let m: HashMap<_, _> = metrics(&r).into_iter().collect();
        let close = |tag: &str, v: f64| (m[tag] - v).abs() < 1e-6;
        assert!(close("server_time_to_first_token", 10.0));
        assert!(close("server_request_latency", 45.0));
        assert!(close("client_time_to_first_token_share", 2.0));
        assert!(close("client_request_latency_share", 5.0));
        assert!(!m.contains_key("server_queue_time"), "only what the span said");
        assert!(metrics(&Record::for_test("b", Duration::from_millis(5))).is_empty());
    }
}
