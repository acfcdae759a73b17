//! Sends the conversations and records what came back, one [`Record`] per request.
//!
//! Each request is one reqwest call whose body is read as the network delivers it: every read
//! goes through the [`SseReader`] and is stamped once, so each event gets the instant its last
//! byte arrived. Text is only kept during the request; tokens are counted after its last byte,
//! off the timed path. Loads: a closed loop of N sessions in flight, or an open loop (constant
//! or Poisson arrivals, or a trace's timestamps) where every request leaves at its scheduled
//! instant whatever is still in flight (no coordinated omission), and how late it left is kept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

use super::agent;
use super::budget::RequestBudget;
use super::endpoint::{self, BodyOptions, EndpointType, Message, Piece, DOCUMENT_ROLE};
use super::inputs::{Conversation, Tokenizer};
use super::kserve;
use super::metrics::{Chunk, ErrorKind, Record, TokenSource};
use super::pacing::{self, Pacing};
use super::session;
use super::sse::{SseEvent, SseReader};
use super::watch;
use super::wire::Http;
use crate::client::grpc::GrpcClient;
use crate::client::RequestSpec;
use crate::load::{self, Pacer, Shape};

/// When requests go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    /// N sessions in flight, each sending its next request when the last one ends.
    Concurrency(usize),
    /// Requests per second, evenly spaced or Poisson.
    Rate { per_second: f64, poisson: bool },
    /// Each conversation at its own `at` (a trace).
    Trace,
}

/// How much to send.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Amount {
    pub requests: Option<usize>,
    pub duration: Option<Duration>,
    pub warmup: usize,
    /// Sessions to start (`--conversation-num`).
    pub sessions: Option<usize>,
}

/// Everything a request needs besides its messages.
pub struct Target {
    pub url: String,
    pub endpoint: EndpointType,
    /// The models of the load (each session's, in `body`'s place): one, or a mix.
    pub mix: load::Mix,
    pub body: BodyOptions,
    pub headers: Vec<(String, String)>,
    pub tokenizer: Arc<dyn Tokenizer>,
}

pub struct Runner {
    http: Http,
    /// `--endpoint-type kserve`: the gRPC client its streams go through.
    grpc: Option<GrpcClient>,
    target: Target,
    /// A test-only hook: every SSE event's handling also blocks its thread this long.
    event_delay: Duration,
    /// The open loop's schedule while one runs: each read launches what is due (see `pacing`).
    pacing: RwLock<Option<Arc<Pacing>>>,
    /// `--over-saturation`: watches the open loop's levels and keeps its verdict.
    pub watch: watch::Watcher,
}

impl Runner {
    pub fn new(target: Target, concurrency: usize) -> anyhow::Result<Runner> {
        crate::proto::install_crypto_provider();
        let mut headers = HeaderMap::new();
        for (name, value) in &target.headers {
            let bad = || anyhow::anyhow!("bad header '{name}: {value}'");
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?,
                HeaderValue::from_str(value).map_err(|_| bad())?,
            );
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in target.endpoint.default_headers() {
            if !headers.contains_key(*name) {
                headers.insert(*name, HeaderValue::from_static(value));
            }
        }
        let http = Http::new(&target.url, headers, concurrency.max(1))?;
        let grpc = match target.endpoint {
            EndpointType::Kserve => Some(kserve::client(&target.url, concurrency, &target.headers)?),
            _ => None,
        };
        let pacing = RwLock::new(None);
        Ok(Runner { http, grpc, target, event_delay: Duration::ZERO, pacing, watch: Default::default() })
    }

    /// Makes every event's handling block its worker thread for `delay`: a deliberately slow
    /// client, for the tests of the client-limited flag.
    #[doc(hidden)]
    pub fn throttle_events(&mut self, delay: Duration) {
        self.event_delay = delay;
    }

    /// An event read at `at` is handled: its wait for the client counts toward the record's lag.
    fn handled(&self, at: Instant, record: &mut Record) {
        if !self.event_delay.is_zero() {
            std::thread::sleep(self.event_delay);
        }
        record.handling_lag = record.handling_lag.max(at.elapsed());
    }

    /// Sends one request and reads its whole answer; returns it with the text it generated.
    pub async fn send(
        &self,
        messages: &[Message],
        max_tokens: Option<u32>,
        intended: Option<Instant>,
    ) -> (Record, String) {
        self.send_with(&self.target.body.model, messages, max_tokens, &serde_json::Map::new(), intended).await
    }

    /// [`Runner::send`] to `model` (one of a mix's), with body fields of the request's own merged
    /// over `--extra-inputs`.
    async fn send_with(
        &self,
        model: &str,
        messages: &[Message],
        max_tokens: Option<u32>,
        extra: &serde_json::Map<String, serde_json::Value>,
        intended: Option<Instant>,
    ) -> (Record, String) {
        let mut options = BodyOptions {
            model: model.to_string(),
            max_tokens: max_tokens.or(self.target.body.max_tokens),
            ..self.target.body.clone()
        };
        options.extra.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        let body = serde_json::to_vec(&endpoint::body(self.target.endpoint, messages, &options)).expect("JSON");
        let tokenizer = &self.target.tokenizer;
        let prompt_tokens = || messages.iter().map(|m| tokenizer.count(&m.content) as u64).sum::<u64>();
        if let Some(grpc) = &self.grpc {
            let last = messages.last().map(|m| m.content.as_str()).unwrap_or_default();
            return self.send_tensors(grpc, &kserve::request(last, &options), intended, prompt_tokens).await;
        }
        self.send_body(body, intended, prompt_tokens, None).await
    }

    /// Sends one `ModelStreamInfer` request (`--endpoint-type kserve`): each response is an event.
    async fn send_tensors(
        &self,
        grpc: &GrpcClient,
        spec: &RequestSpec,
        intended: Option<Instant>,
        prompt_tokens: impl FnOnce() -> u64,
    ) -> (Record, String) {
        let mut record = Record::started(Instant::now(), intended);
        record.request_id = new_request_id();
        let mut texts = Vec::new();
        let outcome = kserve::exchange(grpc, spec, &record.request_id).await;
        record.end = Instant::now();
        match outcome {
            Ok(events) => {
                for (at, text) in events {
                    record.chunks.push(Chunk { at, tokens: 0, reasoning: false });
                    texts.push(ChunkText { answer: text, reasoning: String::new() });
                }
                if record.chunks.is_empty() {
                    record.error = Some((ErrorKind::Protocol, "the answer carried no generated text".into()));
                }
            }
            Err(error) => record.error = Some(error),
        }
        self.count_tokens(record, texts, None, prompt_tokens)
    }

    /// Sends a body as it is (perf_analyzer's `--service-kind openai` payloads); `raw` receives
    /// every event's `data` (or the whole body) with its instant.
    pub async fn send_body(
        &self,
        body: Vec<u8>,
        intended: Option<Instant>,
        prompt_tokens: impl FnOnce() -> u64,
        mut raw: Option<&mut Vec<(Instant, String)>>,
    ) -> (Record, String) {
        let endpoint = self.target.endpoint;
        let mut record = Record::started(Instant::now(), intended);
        record.request_id = new_request_id();
        let mut texts: Vec<ChunkText> = Vec::new();
        let mut usage = None;
        let outcome = self.exchange(body, endpoint, &mut record, &mut texts, &mut usage, &mut raw).await;
        record.end = Instant::now();
        if let Err(error) = outcome {
            record.error = Some(error);
        } else if record.chunks.is_empty() {
            let what = if endpoint.produces_tokens() { "generated text" } else { "results" };
            record.error = Some((ErrorKind::Protocol, format!("the answer carried no {what}")));
        }
        self.count_tokens(record, texts, usage, prompt_tokens)
    }

    /// Tokens, after the last byte: the server's usage when it sent one, else ours. Returns
    /// the record and its answer (the reasoning left out: the next turn's history).
    fn count_tokens(
        &self,
        mut record: Record,
        texts: Vec<ChunkText>,
        usage: Option<endpoint::Usage>,
        prompt_tokens: impl FnOnce() -> u64,
    ) -> (Record, String) {
        let endpoint = self.target.endpoint;
        let tokenizer = &self.target.tokenizer;
        let counts: Vec<(u64, u64)> =
            texts.iter().map(|t| (tokenizer.count(&t.answer) as u64, tokenizer.count(&t.reasoning) as u64)).collect();
        for (chunk, (answer, reasoning)) in record.chunks.iter_mut().zip(&counts) {
            chunk.tokens = (answer + reasoning).max(1) as u32;
        }
        let client_reasoning =
            texts.iter().any(|t| !t.reasoning.is_empty()).then(|| counts.iter().map(|c| c.1).sum::<u64>());
        match usage {
            Some(endpoint::Usage { prompt_tokens: p, completion_tokens: Some(c), reasoning_tokens, .. }) => {
                record.output_tokens = Some(c);
                record.reasoning_tokens = reasoning_tokens.or(client_reasoning);
                record.input_tokens = Some(p.unwrap_or_else(prompt_tokens));
                record.token_source = Some(TokenSource::ServerUsage);
            }
            Some(endpoint::Usage { prompt_tokens: Some(p), completion_tokens: None, .. })
                if !endpoint.produces_tokens() =>
            {
                record.input_tokens = Some(p);
                record.token_source = Some(TokenSource::ServerUsage);
            }
            _ => {
                record.input_tokens = Some(prompt_tokens());
                if endpoint.produces_tokens() {
                    record.output_tokens = Some(counts.iter().map(|(a, r)| a + r).sum());
                    record.reasoning_tokens = client_reasoning;
                }
                record.token_source = Some(TokenSource::ClientTokenizer);
            }
        }
        record.cached_tokens = usage.and_then(|u| u.cached_tokens);
        (record, texts.into_iter().map(|t| t.answer).collect())
    }

    async fn exchange(
        &self,
        body: Vec<u8>,
        endpoint: EndpointType,
        record: &mut Record,
        texts: &mut Vec<ChunkText>,
        usage: &mut Option<endpoint::Usage>,
        raw: &mut Option<&mut Vec<(Instant, String)>>,
    ) -> Result<(), (ErrorKind, String)> {
        let mut response =
            self.http.post(&self.target.url, &record.request_id, body).await.map_err(|e| (ErrorKind::Transport, e))?;
        // The request counts from its bytes' write, as `Record::start` says, not from the hand-off
        // to the connection's task before it.
        if let Some(sent) = response.sent.filter(|s| *s >= record.start) {
            record.start = sent;
        }
        if let Some(id) = response.headers.get("x-request-id").and_then(|v| v.to_str().ok()) {
            record.request_id = id.to_string();
        }
        let status = response.status;
        let streamed = response
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let mut reader = SseReader::new();
        let mut events: Vec<SseEvent> = Vec::new();
        let mut whole = Vec::new();
        let mut take = |event: Option<&str>, data: &str, at: Instant, record: &mut Record| {
            let piece: Piece = endpoint::parse(endpoint, event, data);
            if let Some(message) = piece.error {
                return Err((ErrorKind::Server, message));
            }
            if let Some(later) = piece.usage {
                *usage = Some(usage.unwrap_or_default().merged(later));
            }
            if piece.has_text() || piece.untimed_answer {
                let reasoning = piece.text.is_none() && piece.reasoning.is_some();
                record.chunks.push(Chunk { at, tokens: 0, reasoning });
                let (answer, reasoning) = (piece.text.unwrap_or_default(), piece.reasoning.unwrap_or_default());
                texts.push(ChunkText { answer, reasoning });
            }
            Ok(piece.done)
        };
        // When the bytes read last arrived: the socket's stamp, else the read.
        let mut arrived = None;
        loop {
            let read = response.chunk().await.map_err(|e| (ErrorKind::Transport, e))?;
            let read_at = Instant::now();
            if let Some(pacing) = &*self.pacing.read() {
                pacing.launch_due_from_handler(read_at);
            }
            let Some((bytes, stamp)) = read else { break };
            // A stamp is of the latest read, never after this one's end.
            let at = stamp.filter(|s| *s <= read_at).unwrap_or(read_at);
            arrived = Some(at);
            if !status.is_success() || !streamed {
                whole.extend_from_slice(&bytes);
                continue;
            }
            reader.feed(&bytes, at, &mut events);
            let mut done = false;
            for event in events.drain(..) {
                if let Some(raw) = raw.as_deref_mut() {
                    raw.push((event.at, event.data.clone()));
                }
                let finished = take(event.event.as_deref(), &event.data, event.at, record)?;
                // The handler's own lag counts from the read: the wait before it is the wake-up.
                self.handled(read_at, record);
                if finished {
                    done = true;
                    break;
                }
            }
            if done {
                // Read the body to its end: a response dropped unread closes its connection, and
                // the next request would pay a new one (connect and accept) inside its TTFT.
                let rest = async { while let Ok(Some(_)) = response.chunk().await {} };
                let _ = tokio::time::timeout(Duration::from_secs(1), rest).await;
                return Ok(());
            }
        }
        let at = arrived.unwrap_or_else(Instant::now);
        if !status.is_success() {
            let text = String::from_utf8_lossy(&whole);
            let message = match endpoint::parse(endpoint, None, &text).error {
                Some(message) => message,
                None => text.chars().take(200).collect(),
            };
            return Err((ErrorKind::Status(status.as_u16()), message));
        }
        if streamed {
            reader.finish(at, &mut events);
            for event in events.drain(..) {
                if let Some(raw) = raw.as_deref_mut() {
                    raw.push((event.at, event.data.clone()));
                }
                let done = take(event.event.as_deref(), &event.data, event.at, record)?;
                self.handled(Instant::now(), record);
                if done {
                    break;
                }
            }
        } else {
            let text = String::from_utf8_lossy(&whole);
            if let Some(raw) = raw.as_deref_mut() {
                raw.push((at, text.to_string()));
            }
            take(None, &text, at, record)?;
        }
        Ok(())
    }

    /// Session `index` (conversation `index` of `conversations`, wrapped), turn after turn:
    /// each later turn waits its think time, holding the session's slot, then carries the
    /// opening messages, every earlier user turn and the answers the server returned.
    async fn converse(
        &self,
        index: usize,
        conversations: &[Conversation],
        first_intended: Option<Instant>,
        count: &RequestBudget,
        warmup: bool,
        out: &Mutex<Vec<Record>>,
    ) {
        let conversation = &conversations[index % conversations.len()];
        if !count.start_session() {
            return;
        }
        let label = |record: &mut Record, turn: usize| {
            record.session = index;
            record.conversation = index % conversations.len();
            record.turn = turn;
            record.warmup = warmup;
        };
        // A session stays with its model: its history is that model's answers.
        let model = self.target.mix.model(index as u64);
        if let Some(graph) = &conversation.graph {
            let origin = first_intended.unwrap_or_else(Instant::now);
            let send = |node: usize, messages: Vec<Message>, intended| async move {
                let step = &graph.nodes[node];
                if !count.take() {
                    return None;
                }
                Some(self.send_with(model, &messages, step.max_tokens, &step.extra, intended).await)
            };
            for (node, mut record) in agent::run(graph, origin, first_intended, send).await {
                label(&mut record, graph.nodes[node].turn);
                record.branch = Some(graph.nodes[node].session.clone());
                record.model = self.target.mix.is_mixed().then(|| model.to_string());
                out.lock().push(record);
            }
            return;
        }
        let mut messages: Vec<Message> = session::opening(conversation);
        let mut intended = first_intended;
        for (turn, step) in conversation.turns.iter().enumerate() {
            if turn > 0 {
                intended = session::wait_for_turn(conversation, step, first_intended).await;
            }
            if !count.take() {
                return;
            }
            messages.push(Message { role: "user", content: step.text.clone() });
            // A rankings query's passages (none for the other endpoints).
            messages.extend(step.passages.iter().map(|p| Message { role: DOCUMENT_ROLE, content: p.clone() }));
            let (mut record, reply) = self.send_with(model, &messages, step.max_tokens, &step.extra, intended).await;
            label(&mut record, turn);
            record.model = self.target.mix.is_mixed().then(|| model.to_string());
            let failed = !record.ok();
            out.lock().push(record);
            if failed {
                return;
            }
            messages.push(Message { role: "assistant", content: reply });
        }
    }
}

/// What one content response said: its answer text and its reasoning text (either may be
/// empty), kept until the tokens are counted after the last byte.
struct ChunkText {
    answer: String,
    reasoning: String,
}

/// AIPerf's habit: every request names itself (`x-request-id`, or `ModelInferRequest.id` over
/// gRPC), so a server's log joins with our records.
fn new_request_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Runs the warm-up, then the measured load; returns every record (warm-up ones marked).
/// `shape` ramps the load (or replaces the rate by its series), as it does a tensor run's.
pub async fn run(
    runner: Arc<Runner>,
    conversations: Arc<Vec<Conversation>>,
    schedule: Schedule,
    amount: Amount,
    seed: u64,
    shape: &Shape,
) -> Vec<Record> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let workers = match schedule {
        Schedule::Concurrency(n) => n,
        _ => 1,
    };
    let next = Arc::new(AtomicUsize::new(0));
    if amount.warmup > 0 {
        let budget = Arc::new(RequestBudget::new(Some(amount.warmup), None));
        closed_loop(&runner, &conversations, workers.max(1), &budget, &next, true, &Shape::default(), &out).await;
    }
    let until = amount.duration.map(|d| Instant::now() + d);
    let budget = Arc::new(RequestBudget::new(amount.requests, until).with_sessions(amount.sessions));
    match schedule {
        Schedule::Concurrency(n) => closed_loop(&runner, &conversations, n, &budget, &next, false, shape, &out).await,
        Schedule::Rate { per_second, poisson } => {
            let times = open_schedule(per_second, poisson, seed, shape).and_then(|s| rate_offsets(&s));
            let times = times.expect("the rate and its shape were checked with the config");
            let stop = budget.clone();
            let watching = runner.watch.start(next.clone(), out.clone(), Box::new(move || stop.stop()));
            open_loop(&runner, &conversations, times, &budget, &next, &out).await;
            runner.watch.finish(watching).await;
        }
        Schedule::Trace => {
            let times: Vec<Duration> = conversations.iter().map(|c| c.at.unwrap_or_default()).collect();
            open_loop(&runner, &conversations, times.into_iter(), &budget, &next, &out).await
        }
    }
    let mut records = std::mem::take(&mut *out.lock());
    records.sort_by_key(|r| r.start);
    for (i, r) in records.iter_mut().enumerate() {
        r.index = i;
    }
    records
}

/// The open loop of a rate level: `load`'s schedule, the tensor engine's too, at `per_second`
/// evenly spaced or Poisson (seeded), shaped by `shape` (a ramp, or a series in its place).
pub fn open_schedule(
    per_second: f64,
    poisson: bool,
    seed: u64,
    shape: &Shape,
) -> Result<load::Schedule, load::LoadError> {
    let distribution = if poisson { load::Distribution::Poisson { seed } } else { load::Distribution::Constant };
    load::Schedule::shaped(per_second, distribution, shape)
}

/// A schedule's intended offsets from the start of the load, from `load`'s pacer.
pub(super) fn rate_offsets(
    schedule: &load::Schedule,
) -> Result<impl Iterator<Item = Duration> + Send + 'static, load::LoadError> {
    let mut pacer = Pacer::new(schedule)?;
    Ok(std::iter::from_fn(move || Some(pacer.next_offset())))
}

/// Longest sleep of a session waiting for its slot to open (`--concurrency-ramp-duration`).
const RAMP_WAIT_SLICE: Duration = Duration::from_millis(50);

#[allow(clippy::too_many_arguments)]
async fn closed_loop(
    runner: &Arc<Runner>,
    conversations: &Arc<Vec<Conversation>>,
    workers: usize,
    budget: &Arc<RequestBudget>,
    next: &Arc<AtomicUsize>,
    warmup: bool,
    shape: &Shape,
    out: &Arc<Mutex<Vec<Record>>>,
) {
    let mut tasks = Vec::new();
    let start = tokio::time::Instant::now();
    for slot in 0..workers {
        let (runner, conversations, budget, next, out) =
            (runner.clone(), conversations.clone(), budget.clone(), next.clone(), out.clone());
        // A concurrency ramp opens this session's slot at its instant.
        let opens = start + shape.slot_opens_at(slot as u64, workers as u64);
        tasks.push(tokio::spawn(async move {
            // In slices, so a budget spent before the slot opens ends the wait.
            while tokio::time::Instant::now() < opens && !budget.exhausted() {
                tokio::time::sleep_until(opens.min(tokio::time::Instant::now() + RAMP_WAIT_SLICE)).await;
            }
            while !budget.exhausted() {
                let k = next.fetch_add(1, Ordering::Relaxed);
                runner.converse(k, &conversations, None, &budget, warmup, &out).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn open_loop(
    runner: &Arc<Runner>,
    conversations: &Arc<Vec<Conversation>>,
    times: impl Iterator<Item = Duration> + Send + 'static,
    budget: &Arc<RequestBudget>,
    next: &Arc<AtomicUsize>,
    out: &Arc<Mutex<Vec<Record>>>,
) {
    // Each request is launched by the pacer thread or by a stream's handler, whichever sees it
    // due first (see `pacing`).
    let handle = tokio::runtime::Handle::current();
    let tasks = Arc::new(Mutex::new(Vec::new()));
    let launch: pacing::Launch = {
        let (runner, conversations, budget, next, out, tasks) =
            (runner.clone(), conversations.clone(), budget.clone(), next.clone(), out.clone(), tasks.clone());
        Box::new(move |intended| {
            if budget.exhausted() {
                return false;
            }
            let (runner, conversations, budget, out) =
                (runner.clone(), conversations.clone(), budget.clone(), out.clone());
            let k = next.fetch_add(1, Ordering::Relaxed);
            tasks.lock().push(handle.spawn(async move {
                runner.converse(k, &conversations, Some(intended), &budget, false, &out).await;
            }));
            true
        })
    };
    paced(runner, Instant::now(), times, launch).await;
    let tasks = std::mem::take(&mut *tasks.lock());
    for task in tasks {
        if budget.stopped() {
            task.abort();
        }
        let _ = task.await;
    }
}

/// Runs an open loop's schedule (offsets from `origin`) to its end: each request is launched by
/// a pacer thread or by a stream's event handler, whichever sees it due first (see `pacing`).
/// Returns once `launch` has refused one or the offsets are spent; the requests may still run.
pub(super) async fn paced(
    runner: &Runner,
    origin: Instant,
    times: impl Iterator<Item = Duration> + Send + 'static,
    launch: pacing::Launch,
) {
    let pacing = Arc::new(Pacing::new(origin, times, launch));
    *runner.pacing.write() = Some(pacing.clone());
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("perfbench-pacer".into())
        .spawn(move || {
            pacing::precise_sleeps();
            while let Some(due) = pacing.launch_due_from_pacer(Instant::now()) {
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            let _ = done_tx.send(());
        })
        .expect("a thread for the open loop's schedule");
    let _ = done_rx.await;
    // Nothing is left to launch: the handlers stop looking (and the runner stops holding the
    // launcher, which holds the runner).
    *runner.pacing.write() = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::genai::inputs::Turn;

    struct Words;
    impl Tokenizer for Words {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
        fn name(&self) -> String {
            "words".into()
        }
    }

    /// A server whose stream is written in known pieces: a role chunk, a content event, then
    /// 30 ms later two content events in one write and one event split over two writes.
    async fn sse_server(usage: bool) -> String {
        use axum::body::Body;
        use axum::routing::post;
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            post(move || async move {
                let mut writes: Vec<(u64, String)> = vec![
                    (0, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n".into()),
                    (0, "data: {\"choices\":[{\"delta\":{\"content\":\" one\"}}]}\n\n".into()),
                    (
                        30,
                        "data: {\"choices\":[{\"delta\":{\"content\":\" two\"}}]}\n\n\
                         data: {\"choices\":[{\"delta\":{\"content\":\" three four\"}}]}\n\n"
                            .into(),
                    ),
                    (0, "data: {\"choices\":[{\"delta\":{\"cont".into()),
                    (30, "ent\":\" five\"}}]}\n\n".into()),
                ];
                if usage {
                    let text = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":6}}\n\n";
                    writes.push((0, text.into()));
                }
                writes.push((0, "data: [DONE]\n\n".into()));
                let stream = futures::stream::unfold(writes.into_iter(), |mut rest| async move {
                    let (delay, text) = rest.next()?;
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    Some((Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text)), rest))
                });
                axum::response::Response::builder()
                    .header("content-type", "text/event-stream")
                    .header("x-request-id", "req-1")
                    .body(Body::from_stream(stream))
                    .unwrap()
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/v1/chat/completions")
    }

    fn runner(url: String) -> Runner {
        let body = BodyOptions { model: "m".into(), streaming: true, ..Default::default() };
        let mix = load::Mix::single("m");
        let target =
            Target { url, endpoint: EndpointType::Chat, mix, body, headers: Vec::new(), tokenizer: Arc::new(Words) };
        Runner::new(target, 1).unwrap()
    }

    #[tokio::test]
    async fn each_event_gets_its_own_instant_and_usage_counts_tokens() {
        let runner = runner(sse_server(true).await);
        let (record, reply) = runner.send(&[Message { role: "user", content: "a b c".into() }], None, None).await;
        assert!(record.ok(), "{:?}", record.error);
        assert_eq!(reply, " one two three four five");
        assert_eq!(record.request_id, "req-1", "the server's name for the request wins");
        let c = &record.chunks;
        assert_eq!(c.len(), 4, "the role chunk and the usage chunk are not content responses");
        assert!(c[1].at - c[0].at >= Duration::from_millis(30), "the second event waited 30 ms");
        assert_eq!(c[1].at, c[2].at, "two events in one write arrive together");
        assert!(c[3].at - c[2].at >= Duration::from_millis(30), "a split event arrives with its last byte");
        assert_eq!(c.iter().map(|c| c.tokens).collect::<Vec<_>>(), vec![1, 1, 2, 1]);
        assert_eq!((record.input_tokens, record.output_tokens), (Some(9), Some(6)));
        assert_eq!(record.token_source, Some(TokenSource::ServerUsage));
    }

    #[tokio::test]
    async fn without_usage_the_client_tokenizer_counts() {
        let runner = runner(sse_server(false).await);
        let (record, _) = runner.send(&[Message { role: "user", content: "a b c".into() }], None, None).await;
        assert_eq!((record.input_tokens, record.output_tokens), (Some(3), Some(5)));
        assert_eq!(record.token_source, Some(TokenSource::ClientTokenizer));
    }

    #[tokio::test]
    async fn closed_loop_sends_the_count_and_multi_turn_sessions_carry_history() {
        let runner = Arc::new(runner(sse_server(true).await));
        let turns = vec![Turn::new("q1", Some(4)), Turn::new("q2", None)];
        let conversations = Arc::new(vec![Conversation { turns, ..Conversation::default() }]);
        let amount = Amount { requests: Some(5), duration: None, warmup: 2, sessions: None };
        let records = run(runner, conversations, Schedule::Concurrency(2), amount, 1, &Shape::default()).await;
        assert_eq!(records.iter().filter(|r| r.warmup).count(), 2);
        assert_eq!(records.iter().filter(|r| !r.warmup).count(), 5);
        assert!(records.iter().all(Record::ok));
        assert!(records.iter().any(|r| r.turn == 1), "second turns were sent");
    }

    #[tokio::test]
    async fn open_loop_keeps_its_schedule_and_each_request_its_intended_instant() {
        let runner = Arc::new(runner(sse_server(true).await));
        let turns = vec![Turn::new("q", None)];
        let conversations = Arc::new(vec![Conversation { turns, ..Conversation::default() }]);
        let amount = Amount { requests: Some(6), duration: None, warmup: 0, sessions: None };
        let schedule = Schedule::Rate { per_second: 100.0, poisson: false };
        let records = run(runner, conversations, schedule, amount, 1, &Shape::default()).await;
        assert_eq!(records.len(), 6);
        let intended: Vec<Instant> = records.iter().map(|r| r.intended.expect("open loop")).collect();
        for pair in intended.windows(2) {
            // Each request takes 60 ms; they still leave 10 ms apart, not one after another.
            let gap = pair[1] - pair[0];
            assert!(gap.abs_diff(Duration::from_millis(10)) < Duration::from_micros(1), "{gap:?}");
        }
        assert!(records.iter().all(|r| r.start >= r.intended.unwrap()));
    }

    #[tokio::test]
    async fn the_open_loop_leaves_at_the_shared_schedules_instants() {
        let runner = Arc::new(runner(sse_server(false).await));
        let conversations =
            Arc::new(vec![Conversation { turns: vec![Turn::new("q", None)], ..Conversation::default() }]);
        let amount = Amount { requests: Some(8), duration: None, warmup: 0, sessions: None };
        let shape = Shape { rate_ramp: Some(Duration::from_millis(200)), ..Shape::default() };
        let schedule = Schedule::Rate { per_second: 100.0, poisson: true };
        let records = run(runner, conversations, schedule, amount, 5, &shape).await;
        let mut intended: Vec<Instant> = records.iter().map(|r| r.intended.expect("open loop")).collect();
        intended.sort();
        let got: Vec<Duration> = intended.iter().map(|i| *i - intended[0]).collect();
        // The tensor engine's pacer, on the same schedule: request 0 is due at the origin.
        let mut pacer = Pacer::new(&open_schedule(100.0, true, 5, &shape).unwrap()).unwrap();
        let want: Vec<Duration> = (0..8).map(|_| pacer.next_offset()).collect();
        for (g, w) in got.iter().zip(&want) {
            assert!(g.abs_diff(*w) < Duration::from_micros(1), "intended {g:?}, the pacer says {w:?}");
        }
        assert_eq!(got.len(), 8);
    }

    #[tokio::test]
    async fn a_stream_read_launches_the_open_loop_request_it_finds_due() {
        let runner = runner(sse_server(true).await);
        let launched = Arc::new(Mutex::new(Vec::new()));
        let seen = launched.clone();
        let origin = Instant::now();
        let offsets = vec![Duration::ZERO, Duration::from_secs(3600)];
        let launch: pacing::Launch = Box::new(move |due| {
            seen.lock().push(due);
            true
        });
        *runner.pacing.write() = Some(Arc::new(Pacing::new(origin, offsets.into_iter(), launch)));
        let (record, _) = runner.send(&[Message { role: "user", content: "a".into() }], None, None).await;
        assert!(record.ok(), "{:?}", record.error);
        assert_eq!(*launched.lock(), vec![origin], "the first read found it due; the next is an hour away");
    }

    #[tokio::test]
    async fn a_refused_request_is_an_error_of_its_status() {
        let runner = runner("http://127.0.0.1:9/nothing".into());
        let (record, _) = runner.send(&[Message { role: "user", content: "x".into() }], None, None).await;
        assert_eq!(record.error.map(|e| e.0), Some(ErrorKind::Transport));
        let runner2 = {
            let url = sse_server(true).await.replace("/v1/chat/completions", "/v1/missing");
            super::tests::runner(url)
        };
        let (record, _) = runner2.send(&[Message { role: "user", content: "x".into() }], None, None).await;
        assert_eq!(record.error.map(|e| e.0), Some(ErrorKind::Status(404)));
    }
}
