//! The metrics, defined as AIPerf 0.13 defines them, from one [`Record`] per request:
//!
//! - TTFT = first content response − request start; request latency = last content response −
//!   request start (a content response is an event that carries generated text);
//! - ITL = (request latency − TTFT) / (output tokens − 1), for requests of ≥ 2 output tokens;
//!   output token throughput per user = 1 / ITL;
//! - benchmark duration = last response − first request start; output token throughput = all
//!   output tokens / duration; request throughput = valid requests / duration;
//! - goodput = requests within every `--goodput` SLO / duration; good request fraction = good /
//!   (valid + errors).
//!
//! A reasoning model streams reasoning tokens before its answer. OSL counts both (AIPerf's);
//! a run where any request reasoned also gets AIPerf's `time_to_first_output_token` (TTFOT:
//! to the first answer event, where TTFT is to the first event of either kind),
//! `reasoning_token_count` and `output_token_count` (answer tokens = OSL − reasoning), and,
//! beyond AIPerf, the ITL within each phase: `reasoning_inter_token_latency` = (last reasoning
//! event − first) / (reasoning tokens − 1), `output_inter_token_latency` likewise over the
//! answer events and tokens. The reasoning tokens are the server's
//! (`completion_tokens_details.reasoning_tokens`) when it says, else the client tokenizer's.
//!
//! Statistics are exact over the per-request values (numpy's linear percentiles, population
//! standard deviation). Beyond AIPerf, every gap between events is also kept in HDR histograms,
//! once per gap and once per token (a gap after an event of k tokens counts k times, gap/k each),
//! so a server that packs tokens into chunks does not look faster per token than it is.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Where a request's token counts came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage`.
    ServerUsage,
    /// The client tokenizer on the text received.
    ClientTokenizer,
}

impl TokenSource {
    pub fn describe(self) -> &'static str {
        match self {
            TokenSource::ServerUsage => "server usage",
            TokenSource::ClientTokenizer => "client tokenizer",
        }
    }
}

/// One content response: when its event arrived and the tokens its text holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Chunk {
    pub at: Instant,
    pub tokens: u32,
    /// It carried reasoning and no answer text (a reasoning-phase event).
    pub reasoning: bool,
}

/// One request as the server timed it, in seconds (vLLM's span attributes; see `span_join`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServerSpan {
    pub time_to_first_token: Option<f64>,
    pub request_latency: Option<f64>,
    pub queue_time: Option<f64>,
    pub prefill_time: Option<f64>,
    pub decode_time: Option<f64>,
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// The connection or send failed.
    Transport,
    /// An HTTP status other than 2xx.
    Status(u16),
    /// An error object in the body or stream.
    Server,
    /// The answer could not be read (no content, bad JSON).
    Protocol,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorKind::Transport => f.write_str("transport"),
            ErrorKind::Status(code) => write!(f, "HTTP {code}"),
            ErrorKind::Server => f.write_str("server error"),
            ErrorKind::Protocol => f.write_str("unreadable answer"),
        }
    }
}

/// One request as the client saw it.
#[derive(Clone, Debug)]
pub struct Record {
    /// Its place in the run, by start.
    pub index: usize,
    /// The session it belongs to, numbered as sessions started (AIPerf's `session_num`).
    pub session: usize,
    /// The conversation of the inputs the session sends (AIPerf's `conversation_id`).
    pub conversation: usize,
    pub turn: usize,
    /// The session of an agent's graph it belongs to (`dag_jsonl`'s `session_id`), which
    /// `turn` counts within; `None` outside a graph.
    pub branch: Option<String>,
    /// When the request was sent (just before its bytes were written): TTFT and latency count
    /// from here.
    pub start: Instant,
    /// When the client launched it (before its hand-off to a connection): send lag counts to here.
    pub launched: Instant,
    /// When an open-loop schedule meant it to go (`None`: closed loop).
    pub intended: Option<Instant>,
    /// Content responses, in order.
    pub chunks: Vec<Chunk>,
    /// The end of the reply (the last byte, or the error).
    pub end: Instant,
    pub input_tokens: Option<u64>,
    /// All generated tokens, reasoning included (AIPerf's OSL).
    pub output_tokens: Option<u64>,
    /// The reasoning tokens among them (`None`: the answer had no reasoning to count).
    pub reasoning_tokens: Option<u64>,
    /// Prompt tokens the server found in its prefix cache (`prompt_tokens_details.cached_tokens`).
    pub cached_tokens: Option<u64>,
    pub token_source: Option<TokenSource>,
    pub error: Option<(ErrorKind, String)>,
    pub request_id: String,
    /// The model it was sent to, when the load had several (`-m a,b`).
    pub model: Option<String>,
    pub warmup: bool,
    /// The longest any of its events waited for the client once its bytes were read (see
    /// `client_limit`).
    pub handling_lag: Duration,
    /// The server's own timings of it, from its span (`--otlp-listen`).
    pub server: Option<ServerSpan>,
}

impl Record {
    /// A finished request of `id` that took `latency` (tests of what is joined to it).
    #[cfg(test)]
    pub fn for_test(id: &str, latency: Duration) -> Record {
        let start = Instant::now();
        Record { request_id: id.into(), end: start + latency, ..Record::started(start, None) }
    }

    /// A request that left at `start`, nothing back yet.
    pub fn started(start: Instant, intended: Option<Instant>) -> Record {
        Record {
            index: 0,
            session: 0,
            conversation: 0,
            turn: 0,
            branch: None,
            start,
            launched: start,
            intended,
            chunks: Vec::new(),
            end: start,
            input_tokens: None,
            output_tokens: None,
            reasoning_tokens: None,
            cached_tokens: None,
            token_source: None,
            error: None,
            request_id: String::new(),
            model: None,
            warmup: false,
            handling_lag: Duration::ZERO,
            server: None,
        }
    }

    /// Whether the model reasoned before answering (reasoning events, or reasoning tokens the
    /// server counted).
    pub fn reasoned(&self) -> bool {
        self.reasoning_tokens.is_some_and(|n| n > 0) || self.chunks.iter().any(|c| c.reasoning)
    }
    /// TTFOT in ns: to the first answer event.
    pub fn ttfot(&self) -> Option<f64> {
        self.chunks.iter().find(|c| !c.reasoning).map(|c| self.since_start(c.at))
    }
    /// Answer tokens: OSL less the reasoning tokens.
    pub fn answer_tokens(&self) -> Option<u64> {
        Some(self.output_tokens?.saturating_sub(self.reasoning_tokens.unwrap_or(0)))
    }
    /// ITL within one phase in ns: its events' span over its tokens less one.
    fn phase_itl(&self, reasoning: bool, tokens: Option<u64>) -> Option<f64> {
        let tokens = tokens?;
        let mut phase = self.chunks.iter().filter(|c| c.reasoning == reasoning);
        let first = phase.next()?;
        let last = phase.next_back().unwrap_or(first);
        (tokens >= 2).then(|| last.at.saturating_duration_since(first.at).as_nanos() as f64 / (tokens - 1) as f64)
    }
    /// ITL over the reasoning events, in ns.
    pub fn reasoning_itl(&self) -> Option<f64> {
        self.phase_itl(true, self.reasoning_tokens)
    }
    /// ITL over the answer events, in ns.
    pub fn output_itl(&self) -> Option<f64> {
        self.phase_itl(false, self.answer_tokens())
    }

    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
    fn since_start(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_nanos() as f64
    }
    /// TTFT in ns.
    pub fn ttft(&self) -> Option<f64> {
        self.chunks.first().map(|c| self.since_start(c.at))
    }
    /// Request latency in ns (to the last content response).
    pub fn latency(&self) -> Option<f64> {
        self.chunks.last().map(|c| self.since_start(c.at))
    }
    /// ITL in ns.
    pub fn itl(&self) -> Option<f64> {
        let osl = self.output_tokens?;
        if osl < 2 {
            return None;
        }
        Some((self.latency()? - self.ttft()?) / (osl - 1) as f64)
    }
    /// Gaps between consecutive content responses, in ns.
    pub fn inter_chunk(&self) -> impl Iterator<Item = f64> + '_ {
        self.chunks.windows(2).map(|w| w[1].at.saturating_duration_since(w[0].at).as_nanos() as f64)
    }
    /// How late an open-loop request left (0 in a closed loop).
    pub fn send_lag(&self) -> Duration {
        self.intended.map_or(Duration::ZERO, |i| self.launched.saturating_duration_since(i))
    }
}

/// Whether bigger values of a metric are better (its SLO is a floor, not a ceiling).
fn larger_is_better(tag: &str) -> bool {
    matches!(tag, "output_token_throughput_per_user")
}

/// `--goodput "time_to_first_token:100 inter_token_latency:10"`: SLOs in the metrics' display
/// units (ms, tokens/sec/user).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slos(pub Vec<(String, f64)>);

pub use crate::plan::generative::SLO_METRICS;

impl Slos {
    pub fn parse(text: &str) -> Result<Slos, String> {
        crate::plan::generative::parse_goodput(text).map(Slos)
    }

    /// Whether a successful request met every SLO (a metric it lacks fails it).
    pub fn good(&self, record: &Record) -> bool {
        record.ok()
            && self.0.iter().all(|(tag, limit)| match display_value(record, tag) {
                Some(v) if larger_is_better(tag) => v >= *limit,
                Some(v) => v <= *limit,
                None => false,
            })
    }
}

/// A per-request metric in its display unit.
pub fn display_value(record: &Record, tag: &str) -> Option<f64> {
    let ms = |ns: f64| ns / 1e6;
    match tag {
        "time_to_first_token" => record.ttft().map(ms),
        "request_latency" => record.latency().map(ms),
        "inter_token_latency" => record.itl().map(ms),
        "output_token_throughput_per_user" => record.itl().filter(|v| *v > 0.0).map(|ns| 1e9 / ns),
        "output_sequence_length" => record.output_tokens.map(|n| n as f64),
        "input_sequence_length" => record.input_tokens.map(|n| n as f64),
        "usage_prompt_cache_read_tokens" => record.cached_tokens.map(|n| n as f64),
        "time_to_first_output_token" => record.ttfot().map(ms),
        // The reasoning metrics, for a request that reasoned.
        "reasoning_token_count" if record.reasoned() => record.reasoning_tokens.map(|n| n as f64),
        "output_token_count" if record.reasoned() => record.answer_tokens().map(|n| n as f64),
        "reasoning_inter_token_latency" if record.reasoned() => record.reasoning_itl().map(ms),
        "output_inter_token_latency" if record.reasoned() => record.output_itl().map(ms),
        _ => None,
    }
}

/// The statistics of one metric, in its display unit.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Stats {
    pub avg: f64,
    pub min: f64,
    pub max: f64,
    pub sum: f64,
    pub p1: f64,
    pub p5: f64,
    pub p10: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub std: f64,
    pub count: usize,
}

/// numpy's default (linear) percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

impl Stats {
    pub fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len() as f64;
        let sum: f64 = sorted.iter().sum();
        let avg = sum / n;
        let std = (sorted.iter().map(|v| (v - avg).powi(2)).sum::<f64>() / n).sqrt();
        let p = |q| percentile(&sorted, q);
        Some(Stats {
            avg,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            sum,
            p1: p(1.0),
            p5: p(5.0),
            p10: p(10.0),
            p25: p(25.0),
            p50: p(50.0),
            p75: p(75.0),
            p90: p(90.0),
            p95: p(95.0),
            p99: p(99.0),
            std,
            count: sorted.len(),
        })
    }
}

/// One metric of the run, as AIPerf names it.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub tag: &'static str,
    pub header: &'static str,
    pub unit: &'static str,
    pub value: MetricValue,
}

#[derive(Clone, Debug, PartialEq)]
pub enum MetricValue {
    /// A per-request metric's distribution.
    Distribution(Stats),
    /// A run-level figure.
    Single(f64),
}

/// Gaps between events, in µs, as HDR histograms (3 significant digits).
#[derive(Clone)]
pub struct GapHistograms {
    /// One count per gap between content responses.
    pub per_chunk: Histogram<u64>,
    /// Each gap counted once per token of the event it ends, at gap / tokens.
    pub per_token: Histogram<u64>,
}

impl GapHistograms {
    pub fn of(records: &[&Record]) -> GapHistograms {
        let mut per_chunk = Histogram::new(3).expect("3 significant digits");
        let mut per_token = Histogram::new(3).expect("3 significant digits");
        for record in records {
            for w in record.chunks.windows(2) {
                let gap_us = w[1].at.saturating_duration_since(w[0].at).as_micros() as u64;
                per_chunk.record(gap_us).expect("auto-resizing histogram");
                let tokens = u64::from(w[1].tokens.max(1));
                per_token.record_n(gap_us / tokens, tokens).expect("auto-resizing histogram");
            }
        }
        GapHistograms { per_chunk, per_token }
    }
}

/// Everything a run's records add up to (warm-up records left out).
#[derive(Clone)]
pub struct Summary {
    pub metrics: Vec<Metric>,
    pub duration: Duration,
    pub errors: BTreeMap<String, usize>,
    /// Which token sources the requests used, with how many requests each.
    pub token_sources: BTreeMap<TokenSource, usize>,
    pub gaps: GapHistograms,
    pub send_lag_p99_us: u64,
    /// p99 over requests of each one's [`Record::handling_lag`], in µs.
    pub handling_lag_p99_us: u64,
}

impl Summary {
    pub fn get(&self, tag: &str) -> Option<&MetricValue> {
        self.metrics.iter().find(|m| m.tag == tag).map(|m| &m.value)
    }
}

pub fn summarize(records: &[Record], slos: Option<&Slos>, streaming: bool) -> Summary {
    let measured: Vec<&Record> = records.iter().filter(|r| !r.warmup).collect();
    let valid: Vec<&Record> = measured.iter().copied().filter(|r| r.ok()).collect();
    let mut metrics = Vec::new();
    let mut distribution = |tag: &'static str, header: &'static str, unit: &'static str, values: Vec<f64>| {
        if let Some(stats) = Stats::of(&values) {
            metrics.push(Metric { tag, header, unit, value: MetricValue::Distribution(stats) });
        }
    };
    let each = |tag: &str| -> Vec<f64> { valid.iter().filter_map(|r| display_value(r, tag)).collect() };
    if streaming {
        distribution("time_to_first_token", "Time to First Token", "ms", each("time_to_first_token"));
    }
    distribution("request_latency", "Request Latency", "ms", each("request_latency"));
    if streaming {
        distribution("inter_token_latency", "Inter Token Latency", "ms", each("inter_token_latency"));
        distribution(
            "output_token_throughput_per_user",
            "Output Token Throughput Per User",
            "tokens/sec/user",
            each("output_token_throughput_per_user"),
        );
        let icl: Vec<f64> = valid.iter().flat_map(|r| r.inter_chunk().map(|ns| ns / 1e6)).collect();
        distribution("inter_chunk_latency", "Inter Chunk Latency", "ms", icl);
    }
    distribution("output_sequence_length", "Output Sequence Length", "tokens", each("output_sequence_length"));
    distribution("input_sequence_length", "Input Sequence Length", "tokens", each("input_sequence_length"));
    // A reasoning model's phases, only when a request reasoned (other runs' files stay as they were).
    let reasoned = valid.iter().any(|r| r.reasoned());
    if reasoned && streaming {
        for (tag, header) in [
            ("time_to_first_output_token", "Time to First Output Token"),
            ("reasoning_inter_token_latency", "Reasoning Inter Token Latency"),
            ("output_inter_token_latency", "Output Inter Token Latency"),
        ] {
            distribution(tag, header, "ms", each(tag));
        }
    }
    // AIPerf's cache-read tokens, when the server said (`prompt_tokens_details.cached_tokens`).
    let cached = each("usage_prompt_cache_read_tokens");
    let total_cached: f64 = cached.iter().sum();
    let cache_reported = !cached.is_empty();
    distribution("usage_prompt_cache_read_tokens", "Usage Prompt Cache Read Tokens", "tokens", cached);
    if reasoned {
        distribution("reasoning_token_count", "Reasoning Token Count", "tokens", each("reasoning_token_count"));
        distribution("output_token_count", "Output Token Count", "tokens", each("output_token_count"));
    }

    let first_start = measured.iter().map(|r| r.start).min();
    let last_response = valid.iter().filter_map(|r| r.chunks.last().map(|c| c.at)).max();
    let duration = match (first_start, last_response) {
        (Some(a), Some(b)) => b.saturating_duration_since(a),
        _ => Duration::ZERO,
    };
    let seconds = duration.as_secs_f64();
    let per_second = |n: f64| if seconds > 0.0 { n / seconds } else { 0.0 };
    let total_osl: u64 = valid.iter().filter_map(|r| r.output_tokens).sum();
    let total_isl: u64 = valid.iter().filter_map(|r| r.input_tokens).sum();
    let errors = measured.len() - valid.len();
    let mut single =
        |tag, header, unit, value| metrics.push(Metric { tag, header, unit, value: MetricValue::Single(value) });
    single("request_throughput", "Request Throughput", "requests/sec", per_second(valid.len() as f64));
    single("output_token_throughput", "Output Token Throughput", "tokens/sec", per_second(total_osl as f64));
    single("request_count", "Request Count", "requests", valid.len() as f64);
    single("error_request_count", "Error Request Count", "requests", errors as f64);
    single("benchmark_duration", "Benchmark Duration", "sec", seconds);
    single("total_osl", "Total Output Sequence Length", "tokens", total_osl as f64);
    single("total_isl", "Total Input Sequence Length", "tokens", total_isl as f64);
    if cache_reported {
        let tag = "total_usage_prompt_cache_read_tokens";
        single(tag, "Total Usage Prompt Cache Read Tokens", "tokens", total_cached);
    }
    if reasoned {
        let total: u64 = valid.iter().filter_map(|r| r.reasoning_tokens).sum();
        single("total_reasoning_tokens", "Total Reasoning Tokens", "tokens", total as f64);
    }
    if let Some(slos) = slos {
        let good = valid.iter().filter(|r| slos.good(r)).count();
        single("good_request_count", "Good Request Count", "requests", good as f64);
        single("goodput", "Goodput", "requests/sec", per_second(good as f64));
        let attempted = measured.len();
        let fraction = if attempted == 0 { 0.0 } else { good as f64 / attempted as f64 };
        single("good_request_fraction", "GoodRequestFraction", "ratio", fraction);
    }
    let mut by_kind = BTreeMap::new();
    for record in &measured {
        if let Some((kind, _)) = &record.error {
            *by_kind.entry(kind.to_string()).or_insert(0) += 1;
        }
    }
    let mut token_sources = BTreeMap::new();
    for record in &valid {
        if let Some(source) = record.token_source {
            *token_sources.entry(source).or_insert(0) += 1;
        }
    }
    let mut lag = Histogram::<u64>::new(3).expect("3 significant digits");
    for record in &measured {
        lag.record(record.send_lag().as_micros() as u64).expect("auto-resizing histogram");
    }
    let mut handling = Histogram::<u64>::new(3).expect("3 significant digits");
    for record in &measured {
        handling.record(record.handling_lag.as_micros() as u64).expect("auto-resizing histogram");
    }
    Summary {
        handling_lag_p99_us: handling.value_at_quantile(0.99),
        metrics,
        duration,
        errors: by_kind,
        token_sources,
        gaps: GapHistograms::of(&valid),
        send_lag_p99_us: lag.value_at_quantile(0.99),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request started at `t0 + start_ms`, with content responses at the given ms.
    pub fn record(t0: Instant, start_ms: u64, chunks_ms: &[(u64, u32)], osl: u64) -> Record {
        let at = |ms| t0 + Duration::from_millis(ms);
        Record {
            index: 0,
            session: 0,
            conversation: 0,
            turn: 0,
            branch: None,
            start: at(start_ms),
            launched: at(start_ms),
            intended: None,
            chunks: chunks_ms.iter().map(|&(ms, tokens)| Chunk { at: at(ms), tokens, reasoning: false }).collect(),
            end: at(chunks_ms.last().map_or(start_ms, |c| c.0)),
            input_tokens: Some(100),
            output_tokens: Some(osl),
            reasoning_tokens: None,
            cached_tokens: None,
            token_source: Some(TokenSource::ServerUsage),
            error: None,
            request_id: String::new(),
            model: None,
            warmup: false,
            handling_lag: Duration::ZERO,
            server: None,
        }
    }

    fn dist(summary: &Summary, tag: &str) -> Stats {
        match summary.get(tag) {
            Some(MetricValue::Distribution(s)) => s.clone(),
            other => panic!("{tag}: {other:?}"),
        }
    }

    fn single(summary: &Summary, tag: &str) -> f64 {
        match summary.get(tag) {
            Some(MetricValue::Single(v)) => *v,
            other => panic!("{tag}: {other:?}"),
        }
    }

    #[test]
    fn aiperf_definitions_on_two_requests() {
        let t0 = Instant::now();
        // 10 ms to the first token, then 4 more events 5 ms apart: 5 tokens.
        let a = record(t0, 0, &[(10, 1), (15, 1), (20, 1), (25, 1), (30, 1)], 5);
        // Started at 10 ms; 20 ms TTFT; the second event carries 3 tokens 30 ms later.
        let b = record(t0, 10, &[(30, 1), (60, 3)], 4);
        let mut failed = record(t0, 5, &[], 0);
        failed.error = Some((ErrorKind::Status(500), "boom".into()));
        let slos = Slos::parse("time_to_first_token:15 inter_token_latency:20").unwrap();
        let summary = summarize(&[a, b, failed], Some(&slos), true);
        assert_eq!(dist(&summary, "time_to_first_token").avg, 15.0);
        assert_eq!(dist(&summary, "request_latency").max, 50.0);
        // ITL: a (30-10)/4 = 5 ms; b (50-20)/3 = 10 ms.
        let itl = dist(&summary, "inter_token_latency");
        assert_eq!((itl.min, itl.max, itl.p50), (5.0, 10.0, 7.5));
        assert_eq!(dist(&summary, "output_token_throughput_per_user").max, 200.0);
        assert_eq!(single(&summary, "benchmark_duration"), 0.06);
        assert!((single(&summary, "output_token_throughput") - 9.0 / 0.06).abs() < 1e-9);
        assert_eq!(single(&summary, "request_count"), 2.0);
        assert_eq!(single(&summary, "error_request_count"), 1.0);
        assert_eq!(single(&summary, "good_request_count"), 1.0, "only a meets TTFT <= 15 ms");
        assert!((single(&summary, "good_request_fraction") - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(summary.errors.get("HTTP 500"), Some(&1));
        // Gaps: 4 × 5 ms and one of 30 ms (counted 3 times at 10 ms per token).
        assert_eq!(summary.gaps.per_chunk.len(), 5);
        assert_eq!(summary.gaps.per_token.len(), 7);
        assert_eq!(summary.gaps.per_token.max(), summary.gaps.per_token.highest_equivalent(10_000));
    }

    /// A reasoning answer: reasoning events at `reasoning_ms`, answer events at `answer_ms`, one
    /// token each, the reasoning tokens as the server counted them.
    pub fn reasoning_record(t0: Instant, reasoning_ms: &[u64], answer_ms: &[u64], reasoning_tokens: u64) -> Record {
        let mut chunks: Vec<(u64, u32)> = reasoning_ms.iter().chain(answer_ms).map(|&ms| (ms, 1)).collect();
        chunks.sort();
        let osl = reasoning_tokens + answer_ms.len() as u64;
        let mut r = record(t0, 0, &chunks, osl);
        for chunk in &mut r.chunks {
            chunk.reasoning = reasoning_ms.iter().any(|&ms| chunk.at == t0 + Duration::from_millis(ms));
        }
        r.reasoning_tokens = Some(reasoning_tokens);
        r
    }

    #[test]
    fn a_reasoning_answer_gets_ttfot_its_counts_and_the_itl_of_each_phase() {
        let t0 = Instant::now();
        // Three reasoning tokens 2 ms apart from 10 ms, then three answer tokens 5 ms apart from 20 ms.
        let r = reasoning_record(t0, &[10, 12, 14], &[20, 25, 30], 3);
        let summary = summarize(&[r], None, true);
        assert_eq!(dist(&summary, "time_to_first_token").avg, 10.0, "TTFT: the first event of either kind");
        assert_eq!(dist(&summary, "time_to_first_output_token").avg, 20.0, "TTFOT: the first answer event");
        assert_eq!(dist(&summary, "reasoning_inter_token_latency").avg, 2.0);
        assert_eq!(dist(&summary, "output_inter_token_latency").avg, 5.0);
        assert_eq!(dist(&summary, "inter_token_latency").avg, 4.0, "(30 − 10) / (6 − 1) over both phases");
        assert_eq!(dist(&summary, "output_sequence_length").avg, 6.0, "OSL counts both phases");
        assert_eq!(dist(&summary, "reasoning_token_count").avg, 3.0);
        assert_eq!(dist(&summary, "output_token_count").avg, 3.0);
        assert_eq!(single(&summary, "total_reasoning_tokens"), 3.0);
        // The server may count more reasoning tokens than it sent events: its count is the ITL's.
        let mut packed = reasoning_record(t0, &[10, 14], &[20, 30], 5);
        packed.chunks[1].tokens = 4;
        let summary = summarize(&[packed], None, true);
        assert_eq!(dist(&summary, "reasoning_inter_token_latency").avg, 1.0, "(14 − 10) / (5 − 1)");
        assert_eq!(dist(&summary, "output_inter_token_latency").avg, 10.0);
    }

    #[test]
    fn a_run_without_reasoning_has_no_reasoning_metrics() {
        let t0 = Instant::now();
        let mut plain = record(t0, 0, &[(10, 1), (20, 1)], 2);
        plain.reasoning_tokens = Some(0);
        let summary = summarize(&[plain.clone()], None, true);
        for tag in [
            "time_to_first_output_token",
            "reasoning_token_count",
            "output_token_count",
            "reasoning_inter_token_latency",
            "output_inter_token_latency",
            "total_reasoning_tokens",
        ] {
            assert_eq!(summary.get(tag), None, "{tag}");
        }
        // Beside one that reasoned, it is an answer whose first token is its first output token.
        let summary = summarize(&[plain, reasoning_record(t0, &[5], &[30, 40], 1)], None, true);
        let ttfot = dist(&summary, "time_to_first_output_token");
        assert_eq!((ttfot.min, ttfot.max), (10.0, 30.0));
        assert_eq!(dist(&summary, "reasoning_token_count").count, 1, "counted for the one that reasoned");
        // Not streamed: counts, but no event timing.
        let summary = summarize(&[reasoning_record(t0, &[5], &[30, 40], 1)], None, false);
        assert_eq!(summary.get("time_to_first_output_token"), None);
        assert_eq!(dist(&summary, "reasoning_token_count").avg, 1.0);
    }

    #[test]
    fn percentiles_and_std_are_numpys() {
        let s = Stats::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.p50, s.p25), (2.5, 1.75));
        assert!((s.p99 - 3.97).abs() < 1e-12, "numpy: 3 + 0.97 × (4 − 3)");
        assert!((s.std - 1.25f64.sqrt()).abs() < 1e-12);
        assert_eq!(Stats::of(&[]), None);
    }

    #[test]
    fn goodput_slos_are_checked() {
        assert_eq!(Slos::parse("time_to_first_token:100 output_token_throughput_per_user:50").unwrap().0.len(), 2);
        assert!(Slos::parse("ttft:1").unwrap_err().contains("unknown metric 'ttft'"));
        assert!(Slos::parse("request_latency:x").is_err());
        assert!(Slos::parse("  ").is_err());
        let t0 = Instant::now();
        let slow = record(t0, 0, &[(10, 1), (110, 1)], 2); // 10 tokens/s per user
        let floor = Slos::parse("output_token_throughput_per_user:50").unwrap();
        assert!(!floor.good(&slow));
        assert!(Slos::parse("output_token_throughput_per_user:5").unwrap().good(&slow));
    }
}
