//! perf_analyzer's `--service-kind openai`, as 2.50 runs it (and genai-perf drives it): every
//! request is `POST {url}/{endpoint}` with one `payload` of `--input-data` as its body, sent by
//! N workers per `--concurrency-range` level; a `text/event-stream` answer is a stream that
//! `data: [DONE]` or the end of the reply ends. The `--profile-export-file` is perf_analyzer's:
//! `service_kind`, `endpoint`, `version`, and per level the requests' `timestamp`,
//! `request_inputs.payload` (the body as a string), `response_timestamps` and
//! `response_outputs[].response`, with the window's boundaries. Where perf_analyzer records one
//! response per network read, each SSE event is one response here, with its own instant.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::endpoint::{BodyOptions, EndpointType};
use super::export::RunInfo;
use super::inputs::Tokenizer;
use super::metrics::{ErrorKind, Record};
use super::runner::{Runner, Target};

/// One resolved `perf_analyzer --service-kind openai` run.
#[derive(Clone, Debug)]
pub struct PaOpenAi {
    /// `-u` (host:port or a URL).
    pub url: String,
    /// `--endpoint`, e.g. `v1/chat/completions`.
    pub endpoint: String,
    pub input_data: PathBuf,
    pub levels: Vec<usize>,
    /// `--request-count`: exactly this many per level; else one `--measurement-interval` window.
    pub request_count: Option<u64>,
    pub measurement: Duration,
    pub warmup: u64,
    pub headers: Vec<(String, String)>,
    pub export: Option<PathBuf>,
}

/// perf_analyzer counts no tokens for this kind; the records' counts are unused.
struct NoTokens;

impl Tokenizer for NoTokens {
    fn count(&self, _: &str) -> usize {
        0
    }
    fn name(&self) -> String {
        "none".into()
    }
}

/// The payloads of `--input-data`: `{"data": [{"payload": [{...}]}, ...]}`, one body each.
pub fn read_payloads(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let steps = value.get("data").and_then(Value::as_array).ok_or_else(|| {
        anyhow!("{}: the OpenAI service kind reads a \"data\" array of {{\"payload\": [{{...}}]}}", path.display())
    })?;
    let mut out = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let payload = match step.get("payload") {
            Some(Value::Array(items)) if items.len() == 1 && items[0].is_object() => &items[0],
            Some(Value::Object(_)) => &step["payload"],
            // perf_analyzer reads a step without `payload` as tensors its model does not have.
            _ => {
                let name = step.as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_else(|| "payload".into());
                bail!(
                    "Failed to init manager inputs: The input or output '{name}' is not found in the model \
                     configuration ({}: data[{i}] has no \"payload\" object)",
                    path.display()
                )
            }
        };
        out.push(payload.to_string());
    }
    if out.is_empty() {
        bail!("{}: no payload in \"data\"", path.display());
    }
    Ok(out)
}

/// The endpoint type a path names, for reading its answers.
pub fn endpoint_type(endpoint: &str) -> EndpointType {
    if endpoint.contains("chat/completions") {
        EndpointType::Chat
    } else if endpoint.contains("completions") {
        EndpointType::Completions
    } else if endpoint.contains("embeddings") {
        EndpointType::Embeddings
    } else if endpoint.contains("generate") {
        EndpointType::Generate
    } else {
        EndpointType::Chat
    }
}

/// One request of a level, with what it sent and every event it got.
struct Sent {
    record: Record,
    payload: usize,
    raw: Vec<(Instant, String)>,
}

/// One level's requests and its window.
pub struct Level {
    pub concurrency: usize,
    sent: Vec<Sent>,
    window: (Instant, Instant),
}

impl Level {
    pub fn ok(&self) -> usize {
        self.sent.iter().filter(|s| s.record.ok()).count()
    }
    fn latencies_us(&self) -> Vec<f64> {
        self.sent
            .iter()
            .filter(|s| s.record.ok())
            .map(|s| s.record.end.duration_since(s.record.start).as_secs_f64() * 1e6)
            .collect()
    }
    /// The first failure, in perf_analyzer's words (it reports a failed connection as an HTTP
    /// 400 too: curl's code is 0 and its client falls back to 400).
    pub fn first_error(&self) -> Option<String> {
        self.sent.iter().find_map(|s| {
            s.record.error.as_ref().map(|(kind, message)| match kind {
                ErrorKind::Status(code) => format!("OpenAI response returns HTTP code {code} ({message})"),
                ErrorKind::Transport => format!("OpenAI response returns HTTP code 400 (no HTTP answer: {message})"),
                other => format!("OpenAI response unreadable ({other}: {message})"),
            })
        })
    }
}

pub fn run(config: &PaOpenAi) -> anyhow::Result<(Vec<Level>, RunInfo, Vec<String>)> {
    let payloads = read_payloads(&config.input_data)?;
    let base = if config.url.contains("://") { config.url.clone() } else { format!("http://{}", config.url) };
    let url = format!("{}/{}", base.trim_end_matches('/'), config.endpoint.trim_start_matches('/'));
    let top = config.levels.iter().copied().max().unwrap_or(1);
    let target = Target {
        url,
        endpoint: endpoint_type(&config.endpoint),
        body: BodyOptions::default(),
        headers: config.headers.clone(),
        tokenizer: Arc::new(NoTokens),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let info = RunInfo::now(Value::Null);
    let levels = runtime.block_on(async {
        let runner = Arc::new(Runner::new(target, top)?);
        let payloads = Arc::new(payloads.iter().map(|p| p.as_bytes().to_vec()).collect::<Vec<_>>());
        let next = Arc::new(AtomicUsize::new(0));
        let mut levels = Vec::new();
        for &concurrency in &config.levels {
            if config.warmup > 0 {
                level(&runner, &payloads, &next, concurrency, Some(config.warmup), None).await;
            }
            let (sent, window) =
                level(&runner, &payloads, &next, concurrency, config.request_count, Some(config.measurement)).await;
            levels.push(Level { concurrency, sent, window });
        }
        anyhow::Ok(levels)
    })?;
    Ok((levels, info, payloads))
}

/// N workers until `count` requests are done (or, without a count, until `window` is over).
async fn level(
    runner: &Arc<Runner>,
    payloads: &Arc<Vec<Vec<u8>>>,
    next: &Arc<AtomicUsize>,
    concurrency: usize,
    count: Option<u64>,
    window: Option<Duration>,
) -> (Vec<Sent>, (Instant, Instant)) {
    let start = Instant::now();
    let until = match count {
        Some(_) => None,
        None => window.map(|w| start + w),
    };
    let left = Arc::new(AtomicUsize::new(count.map_or(usize::MAX, |c| c as usize)));
    let out = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (runner, payloads, next, left, out) =
            (runner.clone(), payloads.clone(), next.clone(), left.clone(), out.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                if until.is_some_and(|u| Instant::now() >= u) {
                    break;
                }
                if left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_err() {
                    break;
                }
                let k = next.fetch_add(1, Ordering::Relaxed) % payloads.len();
                let mut raw = Vec::new();
                let (record, _) = runner.send_body(payloads[k].clone(), None, || 0, Some(&mut raw)).await;
                out.lock().push(Sent { record, payload: k, raw });
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let mut sent = std::mem::take(&mut *out.lock());
    sent.sort_by_key(|s| s.record.start);
    (sent, (start, Instant::now()))
}

/// perf_analyzer's export for this kind.
pub fn export(config: &PaOpenAi, levels: &[Level], info: &RunInfo, payloads: &[String], streamed: bool) -> Value {
    let ns = |at: Instant| info.unix_ns(at) as u64;
    let experiments: Vec<Value> = levels
        .iter()
        .map(|level| {
            let requests: Vec<Value> = level
                .sent
                .iter()
                .map(|s| {
                    let outputs: Vec<Value> = s
                        .raw
                        .iter()
                        .map(|(_, data)| {
                            let response = if streamed { format!("data: {data}\n\n") } else { data.clone() };
                            json!({"response": response})
                        })
                        .collect();
                    json!({
                        "timestamp": ns(s.record.start),
                        "request_inputs": {"payload": payloads[s.payload]},
                        "response_timestamps": s.raw.iter().map(|(at, _)| ns(*at)).collect::<Vec<_>>(),
                        "response_outputs": outputs,
                    })
                })
                .collect();
            json!({
                "experiment": {"mode": "concurrency", "value": level.concurrency},
                "requests": requests,
                "window_boundaries": [ns(level.window.0), ns(level.window.1)],
            })
        })
        .collect();
    json!({"experiments": experiments, "version": "", "service_kind": "openai", "endpoint": config.endpoint})
}

/// perf_analyzer's summary of a level.
pub fn summary(level: &Level) -> String {
    let mut latencies = level.latencies_us();
    latencies.sort_by(f64::total_cmp);
    let seconds = level.window.1.duration_since(level.window.0).as_secs_f64().max(1e-9);
    let n = latencies.len();
    let avg = if n == 0 { 0.0 } else { latencies.iter().sum::<f64>() / n as f64 };
    let std = if n == 0 { 0.0 } else { (latencies.iter().map(|l| (l - avg).powi(2)).sum::<f64>() / n as f64).sqrt() };
    let p = |q: f64| if n == 0 { 0.0 } else { latencies[((q * n as f64).ceil() as usize).clamp(1, n) - 1] };
    format!(
        "Request concurrency: {}\n  Client: \n    Request count: {n}\n    Throughput: {:.4} infer/sec\n    \
         Avg latency: {:.0} usec (standard deviation {:.0} usec)\n    p50 latency: {:.0} usec\n    \
         p90 latency: {:.0} usec\n    p95 latency: {:.0} usec\n    p99 latency: {:.0} usec\n",
        level.concurrency,
        n as f64 / seconds,
        avg,
        std,
        p(0.5),
        p(0.9),
        p(0.95),
        p(0.99),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_read_as_perf_analyzer_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inputs.json");
        std::fs::write(&path, r#"{"data": [{"payload": [{"model": "m", "messages": [], "stream": true}]}]}"#).unwrap();
        let got = read_payloads(&path).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&got[0]).unwrap()["model"], "m");
        std::fs::write(&path, r#"{"data": [{"text_input": ["x"]}]}"#).unwrap();
        assert!(read_payloads(&path).unwrap_err().to_string().contains("payload"));
        assert_eq!(endpoint_type("v1/chat/completions"), EndpointType::Chat);
        assert_eq!(endpoint_type("v1/completions"), EndpointType::Completions);
    }
}
