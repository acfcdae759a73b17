//! Generative profiling (`perfbench llm`): AIPerf's flags, metrics and output files over OpenAI
//! chat/completions/embeddings and Triton's generate extension, with every SSE event timed on
//! its own. See docs/generative.md for the metric definitions.
//!
//! `inputs` makes the conversations, `runner` sends them under a schedule and records each
//! request, `metrics` adds the records up as AIPerf does, `export` writes AIPerf's files and
//! `console` prints the table and report.html. Without `-u` the bundled server runs in-process.

pub mod by_model;
pub mod client_limit;
pub mod console;
pub mod endpoint;
pub mod export;
pub mod inputs;
pub mod kserve;
pub mod metrics;
pub mod pa_data;
pub mod pa_openai;
pub mod pacing;
pub mod runner;
pub mod session;
pub mod sse;
pub mod sweep;
pub mod watch;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use self::endpoint::{BodyOptions, EndpointType};
use self::inputs::{Conversation, Length, Synthetic, Tokenizer};
use self::metrics::{Slos, Summary};
use self::runner::{Amount, Runner, Schedule, Target};
use crate::plan::generative::{parse_extra_inputs, Generative, Sessions, TokenLength};
use crate::server::serve::{self, ServeConfig};
use crate::server::ServerOptions;

/// Where prompts come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompts {
    /// `--synthetic-input-tokens-mean/-stddev` from the bundled corpus, `count` distinct ones.
    Synthetic { input: Length, count: usize },
    /// `--input-file`: JSONL prompts or a mooncake trace.
    File(PathBuf),
    /// `--endpoint-type cohere-rankings`: `count` synthetic queries, each with its passages.
    Rankings { count: usize, query: Length, passages: Length, passage: Length },
}

/// One `perfbench llm` run, resolved from its flags.
#[derive(Clone, Debug)]
pub struct LlmConfig {
    /// `-m` as given: one model, or several (`a,b`) that [`LlmConfig::mix`] picks among.
    pub model: String,
    /// The models of the load and how each session picks one.
    pub mix: crate::load::Mix,
    /// `--over-saturation`: the stop of an open-loop level whose queue keeps growing.
    pub over_saturation: Option<crate::load::OverSaturation>,
    /// `None`: the bundled server, in-process.
    pub url: Option<String>,
    pub endpoint_type: EndpointType,
    /// `--endpoint`: a path in place of the endpoint type's.
    pub endpoint: Option<String>,
    pub streaming: bool,
    pub schedule: Schedule,
    pub amount: Amount,
    pub prompts: Prompts,
    /// Tokens per `hash_id` block of a mooncake trace.
    pub block_size: usize,
    pub output_tokens: Option<Length>,
    pub extra: serde_json::Map<String, serde_json::Value>,
    pub headers: Vec<(String, String)>,
    pub goodput: Option<Slos>,
    pub artifact_dir: PathBuf,
    pub seed: u64,
    /// How the load changes over time (ramps, a rate series): `load`'s, as a tensor run's.
    pub shape: crate::load::Shape,
    /// A Prometheus endpoint to read the server's counters from after the run (the bundled
    /// server's own without `-u`).
    pub server_metrics: Option<String>,
    /// Synthetic sessions (`--conversation-*`, shared system prompt, user context, prefix pool).
    pub sessions: Option<Sessions>,
    /// Test-only: each SSE event's handling blocks its thread this long (a throttled client).
    #[doc(hidden)]
    pub event_delay: std::time::Duration,
}

impl LlmConfig {
    /// The settings as AIPerf's JSON `input_config`.
    pub fn input_config(&self, tokenizer: &str) -> serde_json::Value {
        serde_json::json!({
            "model_names": self.mix.names(),
            "model_selection_strategy": self.mix.strategy().name(),
            "endpoint": {
                "type": self.endpoint_type.name(),
                "url": self.url,
                "custom_endpoint": self.endpoint,
                "streaming": self.streaming,
            },
            "load": format!("{:?}", self.schedule),
            "request_count": self.amount.requests,
            "benchmark_duration": self.amount.duration.map(|d| d.as_secs_f64()),
            "warmup_request_count": self.amount.warmup,
            "prompts": format!("{:?}", self.prompts),
            "output_tokens": self.output_tokens.map(|o| serde_json::json!({"mean": o.mean, "stddev": o.stddev})),
            "extra_inputs": self.extra,
            "tokenizer": tokenizer,
            "random_seed": self.seed,
            "goodput": self.goodput.as_ref().map(|s| s.0.clone()),
            "sessions": self.sessions,
        })
    }
}

impl LlmConfig {
    /// One level of a generative sweep `g`: `schedule` against `url` (`None`: the bundled
    /// server), its files in `artifact_dir`.
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        g: &Generative,
        model: &str,
        url: Option<String>,
        streaming: bool,
        schedule: Schedule,
        headers: Vec<(String, String)>,
        artifact_dir: PathBuf,
    ) -> Result<LlmConfig, String> {
        let requests = g.request_count.map(|n| n as usize);
        let warmup = g.warmup_request_count as usize;
        let length = |l: TokenLength| Length { mean: l.mean, stddev: l.stddev };
        let sessions = g.sessions.as_ref().and_then(|s| s.count);
        // As AIPerf: one distinct session per session run (warm-up included), else per request.
        let count = g.num_dataset_entries.unwrap_or(match sessions {
            Some(n) => n + warmup,
            None => requests.map_or(100, |n| n + warmup),
        });
        let prompts = match (&g.input_file, &g.rankings) {
            (Some(path), _) => Prompts::File(path.clone()),
            (None, Some(r)) => Prompts::Rankings {
                count,
                query: length(r.query_tokens),
                passages: length(r.passages),
                passage: length(r.passage_tokens),
            },
            (None, None) => Prompts::Synthetic { input: length(g.input_tokens), count },
        };
        let mix = crate::load::Mix::new(model, g.model_selection, g.model_weights.as_deref(), g.random_seed)
            .map_err(|e| e.to_string())?;
        if mix.is_mixed() && g.endpoint_type == EndpointType::Generate && g.endpoint.is_none() {
            return Err(format!("-m '{model}': the generate endpoint names its model in the path; one model per run"));
        }
        Ok(LlmConfig {
            model: model.to_string(),
            mix,
            over_saturation: g.over_saturation,
            url,
            endpoint_type: g.endpoint_type,
            endpoint: g.endpoint.clone(),
            streaming,
            schedule,
            amount: Amount {
                requests,
                duration: g.benchmark_duration_s.map(Duration::from_secs_f64),
                warmup,
                sessions,
            },
            prompts,
            block_size: g.block_size,
            output_tokens: g.output_tokens.map(length),
            extra: parse_extra_inputs(&g.extra_inputs)?,
            headers,
            goodput: g.goodput.as_deref().map(Slos::parse).transpose()?,
            artifact_dir,
            seed: g.random_seed,
            shape: crate::load::Shape::default(),
            server_metrics: None,
            sessions: g.sessions.clone(),
            event_delay: Duration::ZERO,
        })
    }
}

/// What a run leaves: its records, their summary and what the server's counters said.
pub struct Outcome {
    pub records: Vec<metrics::Record>,
    pub summary: Summary,
    /// `name value` lines of the server's Prometheus counters worth showing (prefix cache).
    pub server_counters: Vec<(String, f64)>,
    pub client_cpu_fraction: f64,
    /// What the client measured of itself: CPU, send lag, event-handling lag.
    pub client: client_limit::ClientLoad,
    /// The over-saturation stop's verdict on the level, when it watched it.
    pub saturation: Option<watch::Saturation>,
}

/// The conversations of the run.
pub fn conversations(config: &LlmConfig, tokenizer: &dyn Tokenizer) -> anyhow::Result<Vec<Conversation>> {
    let mut synthetic = Synthetic::new(tokenizer, inputs::CORPUS)?;
    synthetic.block_size = config.block_size;
    let mut conversations = match &config.prompts {
        Prompts::Synthetic { input, count } => match &config.sessions {
            Some(shape) => session::synthesize(&synthetic, *count, *input, config.output_tokens, shape, config.seed),
            None => synthetic.conversations(*count, *input, config.output_tokens, config.seed),
        },
        Prompts::File(path) => inputs::read_file(path, &synthetic)?,
        Prompts::Rankings { count, query, passages, passage } => {
            synthetic.rankings(*count, *query, *passages, *passage, config.seed)
        }
    };
    // `--output-tokens-mean` also sets turns that name no length of their own.
    if let (Some(output), Prompts::File(_)) = (config.output_tokens, &config.prompts) {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(config.seed);
        for turn in conversations.iter_mut().flat_map(|c| c.turns.iter_mut()) {
            turn.max_tokens = turn.max_tokens.or(Some(output.sample(&mut rng) as u32));
        }
    }
    Ok(conversations)
}

/// Ready sockets the client's worker takes in per look: fewer than the tasks its own queue
/// holds, so a burst of events stays in the kernel until the worker gets to it.
const IO_EVENTS_PER_TICK: usize = 32;

/// Runs the profile and writes its files; the bundled server starts first when there is no URL.
pub fn profile(config: &LlmConfig, tokenizer: Arc<dyn Tokenizer>) -> anyhow::Result<Outcome> {
    let conversations = Arc::new(conversations(config, tokenizer.as_ref())?);
    let concurrency = match config.schedule {
        Schedule::Concurrency(n) => n,
        _ => 256,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // A worker takes in at most this many ready sockets per look (tokio's default is 1,024).
        // Its own queue holds 256 tasks; a burst of 1,000 streams' events spilled the rest into
        // the shared queue, first in first out, where a request the pacer thread had spawned
        // waited behind them all (send lag p99 3.7 ms from that wait alone at 500 requests/s).
        .max_io_events_per_tick(IO_EVENTS_PER_TICK)
        .thread_name("perfbench-llm")
        .build()
        .context("cannot start the client runtime")?;
    runtime.block_on(async {
        let mut server = None;
        let (base, server_metrics) = match &config.url {
            Some(url) => {
                let base = if url.contains("://") { url.clone() } else { format!("http://{url}") };
                (base, config.server_metrics.clone())
            }
            None => {
                let options = ServerOptions { models: config.mix.names().to_vec(), ..ServerOptions::default() };
                let running = serve::start(ServeConfig { options, ..ServeConfig::default() })
                    .await
                    .context("cannot start the bundled server")?;
                let base = match config.endpoint_type {
                    EndpointType::Kserve => running.grpc_url(),
                    _ => running.http_url(),
                };
                let metrics = format!("http://{}/metrics", running.metrics_addr);
                server = Some(running);
                (base, Some(metrics))
            }
        };
        let path = match &config.endpoint {
            Some(path) => format!("/{}", path.trim_start_matches('/')),
            None => config.endpoint_type.path(&config.mix.names()[0], config.streaming),
        };
        let target = Target {
            url: format!("{}{path}", base.trim_end_matches('/')),
            endpoint: config.endpoint_type,
            mix: config.mix.clone(),
            body: BodyOptions {
                model: config.mix.names()[0].clone(),
                streaming: config.streaming,
                max_tokens: None,
                extra: config.extra.clone(),
            },
            headers: config.headers.clone(),
            tokenizer: tokenizer.clone(),
        };
        let mut runner = Runner::new(target, concurrency)?;
        runner.throttle_events(config.event_delay);
        runner.watch = watch::Watcher::new(config.over_saturation);
        let runner = Arc::new(runner);
        let probe = client_limit::LagProbe::start();
        let cpu_before = crate::measure::cpu::process_cpu_ns();
        let wall = Instant::now();
        let run_info = export::RunInfo::now(config.input_config(&tokenizer.name()));
        let records =
            runner::run(runner.clone(), conversations, config.schedule, config.amount, config.seed, &config.shape)
                .await;
        let saturation = runner.watch.verdict();
        let cpu = (crate::measure::cpu::process_cpu_ns() - cpu_before) as f64 / 1e9;
        let cores = crate::measure::cpu::available_cores() as f64;
        let client_cpu_fraction = cpu / (wall.elapsed().as_secs_f64() * cores).max(1e-9);
        let wake_lag = probe.finish().await;
        let server_counters = match &server_metrics {
            Some(url) => read_counters(url).await.unwrap_or_default(),
            None => Vec::new(),
        };
        if let Some(server) = server {
            server.shutdown().await;
        }
        let summary = metrics::summarize(&records, config.goodput.as_ref(), config.streaming);
        export::write_all(&config.artifact_dir, &summary, &records, &run_info)?;
        let client = client_limit::ClientLoad {
            cpu_fraction: client_cpu_fraction,
            send_lag_p99_us: summary.send_lag_p99_us as f64,
            handling_lag_p99_us: summary.handling_lag_p99_us as f64,
            wake_lag_p99_us: wake_lag.value_at_quantile(0.99) as f64,
        };
        Ok(Outcome { records, summary, server_counters, client_cpu_fraction, client, saturation })
    })
}

/// The server's generative counters (vLLM's names) from its Prometheus text.
async fn read_counters(url: &str) -> anyhow::Result<Vec<(String, f64)>> {
    let text = reqwest::Client::builder().no_proxy().build()?.get(url).send().await?.text().await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("vllm:prefix_cache_") || l.starts_with("vllm:prompt_tokens_total"))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect())
}
