//! `llm`: the generative twin. A real iteration-level batcher ([`batcher`]) runs on its own
//! thread and sleeps each step for the time the cost model ([`cost`]) gives it; the text is a
//! bundled corpus ([`text`]), counted exactly by the model's tokenizer ([`crate::tokenize`]).
//! The front ends (OpenAI routes, Triton's generate extension, gRPC streaming) submit requests
//! here and read each one's tokens from a channel.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::SeedableRng;
use rand_distr::Distribution;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::config;
use super::error::{ServerError, ServerResult};
use super::stats::ModelStats;
use crate::proto::inference::ModelConfig;
use crate::tokenize::{Tokenizer, DEFAULT_TOKENIZER};

pub mod batcher;
pub mod cost;
pub mod kv;
pub mod otlp;
pub mod record;
pub mod request_log;
pub mod telemetry;
pub mod text;

pub use batcher::StepRecord;
pub use record::monotonic_ns;
pub use request_log::RequestLog;
pub use telemetry::Gauges;

/// The `backend` of a generative model.
pub const BACKEND: &str = "llm";

/// Steps the step log keeps (the latest).
const STEP_LOG_LEN: usize = 4096;

pub fn is_llm(config: &ModelConfig) -> bool {
    config.backend == BACKEND
}

/// Why a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It reached its (seeded) natural end.
    Stop,
    /// It reached `max_tokens`.
    Length,
    /// Its client went away.
    Abort,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

/// What a request's channel carries.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The `index`th generated token left the model; `last`: no more follow.
    Token {
        index: usize,
        last: bool,
    },
    Done(Finish),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finish {
    pub reason: FinishReason,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
    /// How many of `completion_tokens` were reasoning (the first ones; 0 for a plain model).
    pub reasoning_tokens: usize,
}

/// The config's `parameters`, checked.
#[derive(Clone, Debug)]
pub struct LlmSettings {
    pub cost: cost::CostModel,
    pub limits: batcher::Limits,
    pub block_size: usize,
    pub num_blocks: usize,
    pub max_model_len: usize,
    pub mean_output_tokens: f64,
    pub embedding_dim: usize,
    pub tokenizer: String,
    /// Tokens a reasoning model thinks before it answers: the first this many generated tokens
    /// of every request are reasoning (0: a plain model).
    pub reasoning_tokens: usize,
}

impl LlmSettings {
    pub fn from_config(c: &ModelConfig) -> ServerResult<LlmSettings> {
        let d = cost::CostModel::default();
        let settings = LlmSettings {
            cost: cost::CostModel {
                step_us: config::parameter_or(c, "step_us", d.step_us)?,
                decode_us_per_seq: config::parameter_or(c, "decode_us_per_seq", d.decode_us_per_seq)?,
                prefill_us_per_token: config::parameter_or(c, "prefill_us_per_token", d.prefill_us_per_token)?,
            },
            limits: batcher::Limits {
                max_num_seqs: config::parameter_or(c, "max_num_seqs", 256)?,
                max_num_batched_tokens: config::parameter_or(c, "max_num_batched_tokens", 8192)?,
            },
            block_size: config::parameter_or(c, "kv_block_size", 16)?,
            num_blocks: config::parameter_or(c, "num_kv_blocks", 25_000)?,
            max_model_len: config::parameter_or(c, "max_model_len", 8192)?,
            mean_output_tokens: config::parameter_or(c, "mean_output_tokens", 128.0)?,
            embedding_dim: config::parameter_or(c, "embedding_dim", 384)?,
            tokenizer: config::parameter(c, "tokenizer").unwrap_or(DEFAULT_TOKENIZER).to_string(),
            reasoning_tokens: config::parameter_or(c, "reasoning_tokens", 0)?,
        };
        let name = &c.name;
        let costs = [settings.cost.step_us, settings.cost.decode_us_per_seq, settings.cost.prefill_us_per_token];
        if costs.iter().any(|v| !(v.is_finite() && (0.0..=10_000_000.0).contains(v))) {
            return Err(ServerError::invalid_arg(format!("model '{name}': step costs must be 0 to 10 s in µs")));
        }
        let counts = [
            ("max_num_seqs", settings.limits.max_num_seqs),
            ("max_num_batched_tokens", settings.limits.max_num_batched_tokens),
            ("kv_block_size", settings.block_size),
            ("num_kv_blocks", settings.num_blocks),
            ("max_model_len", settings.max_model_len),
            ("embedding_dim", settings.embedding_dim),
        ];
        if let Some((key, _)) = counts.iter().find(|(_, v)| !(1..=100_000_000).contains(v)) {
            return Err(ServerError::invalid_arg(format!("model '{name}': parameter '{key}' must be 1 to 100000000")));
        }
        if settings.reasoning_tokens > 100_000_000 {
            return Err(ServerError::invalid_arg(format!("model '{name}': reasoning_tokens must be 0 to 100000000")));
        }
        if !(settings.mean_output_tokens.is_finite() && settings.mean_output_tokens >= 1.0) {
            return Err(ServerError::invalid_arg(format!("model '{name}': mean_output_tokens must be at least 1")));
        }
        Ok(settings)
    }
}

/// A request for the engine. `max_tokens` `None`: up to the context length.
#[derive(Clone, Debug, Default)]
pub struct GenerateParams {
    pub prompt: String,
    pub max_tokens: Option<usize>,
    pub min_tokens: usize,
    pub ignore_eos: bool,
    pub seed: Option<u64>,
    pub request_id: String,
    pub arrival_ns: u64,
}

/// A request the engine refused, with the OpenAI field it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub param: &'static str,
    pub code: Option<&'static str>,
}

/// Why [`LlmEngine::generate`] failed: the request, or the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GenerateError {
    Refused(Refusal),
    Server(ServerError),
}

impl From<GenerateError> for ServerError {
    fn from(e: GenerateError) -> Self {
        match e {
            GenerateError::Refused(r) => ServerError::invalid_arg(r.message),
            GenerateError::Server(e) => e,
        }
    }
}

/// A submitted request: its token count, where its text starts, and its events.
pub struct Generation {
    pub prompt_tokens: usize,
    pub text_start: usize,
    /// The generated tokens below this index are reasoning, the rest the answer.
    pub reasoning_tokens: usize,
    pub events: Events,
}

impl Generation {
    /// Whether the `index`th generated token is reasoning rather than answer.
    pub fn is_reasoning(&self, index: usize) -> bool {
        index < self.reasoning_tokens
    }
}

/// A request's events as its front end reads them. Reading the first token stamps the time
/// (CLOCK_MONOTONIC ns) for the request's record: the front end writes a token out as soon as it
/// has read it, so this is when the answer began to leave, after the hand-over from the batcher's
/// thread, which the model's own stamp (`first_chunk_ns`) is before.
pub struct Events {
    receiver: UnboundedReceiver<Event>,
    first_read_ns: Arc<AtomicU64>,
}

impl Events {
    pub async fn recv(&mut self) -> Option<Event> {
        let event = self.receiver.recv().await;
        if matches!(event, Some(Event::Token { .. })) && self.first_read_ns.load(Ordering::Relaxed) == 0 {
            self.first_read_ns.store(monotonic_ns(), Ordering::Relaxed);
        }
        event
    }
}

struct Started {
    tokenizer: Tokenizer,
    text: text::TextSource,
    submit: mpsc::Sender<batcher::Submission>,
}

pub struct LlmEngine {
    pub name: String,
    pub settings: LlmSettings,
    telemetry: Arc<telemetry::Telemetry>,
    steps: Arc<Mutex<VecDeque<StepRecord>>>,
    /// The tokenizer, the text and the batcher thread, made when the model loads: the first
    /// request must not pay for parsing a vocabulary (150-350 ms), and a bad tokenizer fails the
    /// load rather than every request.
    started: Started,
}

impl LlmEngine {
    pub fn new(config: &ModelConfig, stats: Arc<ModelStats>) -> ServerResult<LlmEngine> {
        let name = &config.name;
        let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        if !decoupled || config.max_batch_size != 0 {
            return Err(ServerError::invalid_arg(format!(
                "model '{name}': backend 'llm' needs model_transaction_policy {{ decoupled: true }} and max_batch_size 0"
            )));
        }
        let settings = LlmSettings::from_config(config)?;
        let telemetry: Arc<telemetry::Telemetry> = Default::default();
        let steps: Arc<Mutex<VecDeque<StepRecord>>> = Default::default();
        let started = start(name, &settings, stats, &telemetry, &steps)?;
        Ok(LlmEngine { name: name.clone(), settings, telemetry, steps, started })
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.started.tokenizer
    }

    /// The `index`th generated piece of a text that starts at `start`.
    pub fn piece(&self, start: usize, index: usize) -> &str {
        self.started.text.piece(start, index)
    }

    /// Checks a request, plans its output and queues it for the batcher.
    pub fn generate(&self, params: GenerateParams, log: Option<Arc<RequestLog>>) -> Result<Generation, GenerateError> {
        let started = &self.started;
        let tokens = started.tokenizer.encode(&params.prompt);
        let plan = self.plan(&params, tokens.len()).map_err(GenerateError::Refused)?;
        let mut rng = match params.seed {
            Some(seed) => rand_chacha::ChaCha8Rng::seed_from_u64(seed),
            None => rand_chacha::ChaCha8Rng::from_rng(&mut rand::rng()),
        };
        let text_start = started.text.start(&mut rng);
        let (target, reason) = match plan {
            Plan::Embed => (0, FinishReason::Stop),
            Plan::Generate { max_tokens } if params.ignore_eos => (max_tokens, FinishReason::Length),
            Plan::Generate { max_tokens } => {
                // A reasoning model thinks first, then answers at its usual length.
                let natural = rand_distr::Exp::new(1.0 / self.settings.mean_output_tokens)
                    .map(|d| self.settings.reasoning_tokens + 1 + d.sample(&mut rng) as usize)
                    .unwrap_or(max_tokens)
                    .max(params.min_tokens);
                if natural >= max_tokens {
                    (max_tokens, FinishReason::Length)
                } else {
                    (natural, FinishReason::Stop)
                }
            }
        };
        let (events, receiver) = unbounded_channel();
        let first_read_ns = Arc::new(AtomicU64::new(0));
        let submission = batcher::Submission {
            request_id: params.request_id,
            model: self.name.clone(),
            prompt_len: tokens.len(),
            hashes: kv::block_hashes(&tokens, self.settings.block_size),
            target,
            reason,
            reasoning_tokens: self.settings.reasoning_tokens,
            arrival_ns: params.arrival_ns,
            events,
            first_read_ns: first_read_ns.clone(),
            log,
        };
        let stopped = |_| GenerateError::Server(ServerError::unavailable("the batcher has stopped"));
        started.submit.send(submission).map_err(stopped)?;
        Ok(Generation {
            prompt_tokens: tokens.len(),
            text_start,
            reasoning_tokens: self.settings.reasoning_tokens,
            events: Events { receiver, first_read_ns },
        })
    }

    /// Checks lengths against the context and the cache. `max_tokens` 0 means an embedding.
    fn plan(&self, p: &GenerateParams, prompt: usize) -> Result<Plan, Refusal> {
        let s = &self.settings;
        let refuse = |message: String, param, code| Err(Refusal { message, param, code });
        if prompt == 0 {
            return refuse("the prompt is empty: at least one token is needed".into(), "prompt", None);
        }
        if p.max_tokens == Some(0) {
            return self.fits(prompt, 0).map(|_| Plan::Embed);
        }
        let max_tokens = p.max_tokens.unwrap_or(s.max_model_len.saturating_sub(prompt).max(1));
        if p.min_tokens > max_tokens {
            let message =
                format!("min_tokens ({}) must be less than or equal to max_tokens ({max_tokens})", p.min_tokens);
            return refuse(message, "min_tokens", None);
        }
        self.fits(prompt, max_tokens)?;
        Ok(Plan::Generate { max_tokens })
    }

    fn fits(&self, prompt: usize, max_tokens: usize) -> Result<(), Refusal> {
        let s = &self.settings;
        if prompt + max_tokens > s.max_model_len {
            let message = format!(
                "This model's maximum context length is {} tokens. However, you requested {} tokens ({prompt} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion.",
                s.max_model_len,
                prompt + max_tokens
            );
            return Err(Refusal { message, param: "messages", code: Some("context_length_exceeded") });
        }
        let blocks = (prompt + max_tokens).div_ceil(s.block_size);
        if blocks > s.num_blocks {
            let message = format!(
                "the request needs {blocks} KV-cache blocks of {} tokens, more than the whole cache ({})",
                s.block_size, s.num_blocks
            );
            return Err(Refusal { message, param: "max_tokens", code: None });
        }
        Ok(())
    }

    /// A deterministic unit vector for a text's tokens (the twin has no weights to embed with).
    pub fn embedding(&self, text: &str) -> Vec<f32> {
        let tokens = self.tokenizer().encode(text);
        let mut v = vec![0f32; self.settings.embedding_dim];
        for (i, t) in tokens.iter().enumerate() {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(u64::from(*t) ^ ((i as u64) << 32));
            for x in v.iter_mut() {
                let noise: f32 = rand_distr::StandardNormal.sample(&mut rng);
                *x += noise;
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
        v.into_iter().map(|x| x / norm).collect()
    }

    pub fn gauges(&self) -> Gauges {
        self.telemetry.read_gauges()
    }

    /// The latest steps, oldest first.
    pub fn step_log(&self) -> Vec<StepRecord> {
        self.steps.lock().iter().cloned().collect()
    }

    /// The counters behind this model's vLLM-named metrics.
    pub fn telemetry(&self) -> &telemetry::Telemetry {
        &self.telemetry
    }
}

/// Opens the tokenizer, checks the corpus against it and starts the batcher thread, which ends
/// once the engine (the only sender) is dropped and its last sequence is done.
fn start(
    name: &str,
    settings: &LlmSettings,
    stats: Arc<ModelStats>,
    telemetry: &Arc<telemetry::Telemetry>,
    steps: &Arc<Mutex<VecDeque<StepRecord>>>,
) -> ServerResult<Started> {
    let tokenizer =
        Tokenizer::open(&settings.tokenizer).map_err(|e| ServerError::invalid_arg(format!("model '{name}': {e}")))?;
    let text = text::TextSource::new(&tokenizer)
        .map_err(|e| ServerError::invalid_arg(format!("model '{name}': {}", e.message)))?;
    let (submit, arrivals) = mpsc::channel();
    let batcher = batcher::Batcher::new(
        settings.limits,
        settings.cost,
        kv::KvCache::new(settings.block_size, settings.num_blocks),
        stats,
        telemetry.clone(),
    );
    let steps = steps.clone();
    std::thread::Builder::new()
        .name(format!("llm-{name}"))
        .spawn(move || run(batcher, arrivals, steps))
        .map_err(|e| ServerError::internal(format!("cannot start the batcher thread: {e}")))?;
    Ok(Started { tokenizer, text, submit })
}

enum Plan {
    Embed,
    Generate { max_tokens: usize },
}

/// The batcher thread: take arrivals, plan a step, sleep its duration, end it. It ends when
/// the engine is gone and nothing is left to run.
fn run(
    mut batcher: batcher::Batcher,
    arrivals: mpsc::Receiver<batcher::Submission>,
    steps: Arc<Mutex<VecDeque<StepRecord>>>,
) {
    loop {
        let mut closed = false;
        loop {
            match arrivals.try_recv() {
                Ok(sub) => batcher.enqueue(sub),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        if batcher.idle() {
            if closed {
                return;
            }
            match arrivals.recv() {
                Ok(sub) => batcher.enqueue(sub),
                Err(_) => return,
            }
            continue;
        }
        let start = Instant::now();
        let Some(us) = batcher.schedule(monotonic_ns()) else {
            // Everything left was dropped, or waits on blocks nobody holds: look again shortly.
            std::thread::sleep(Duration::from_micros(200));
            continue;
        };
        let end = start + Duration::from_micros(us);
        if let Some(left) = end.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        let step = batcher.complete(monotonic_ns());
        let mut log = steps.lock();
        if log.len() == STEP_LOG_LEN {
            log.pop_front();
        }
        log.push_back(step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first token read is stamped once; what comes before or after it is not.
    #[tokio::test]
    async fn reading_the_first_token_stamps_it_once() {
        let (sender, receiver) = unbounded_channel();
        let first_read_ns = Arc::new(AtomicU64::new(0));
        let mut events = Events { receiver, first_read_ns: first_read_ns.clone() };
        sender.send(Event::Token { index: 0, last: false }).unwrap();
        sender.send(Event::Token { index: 1, last: true }).unwrap();
        let before = monotonic_ns();
        assert!(matches!(events.recv().await, Some(Event::Token { index: 0, .. })));
        let stamped = first_read_ns.load(Ordering::Relaxed);
        assert!(stamped >= before && stamped <= monotonic_ns());
        assert!(matches!(events.recv().await, Some(Event::Token { index: 1, .. })));
        assert_eq!(first_read_ns.load(Ordering::Relaxed), stamped, "only the first token is stamped");
        drop(sender);
        assert!(events.recv().await.is_none());
        assert_eq!(first_read_ns.load(Ordering::Relaxed), stamped);
    }
}
