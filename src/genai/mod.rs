//! Generative profiling (`perfbench llm`): AIPerf's flags, metrics and output files over OpenAI
//! chat/completions/embeddings and Triton's generate extension, with every SSE event timed on
//! its own. See docs/generative.md for the metric definitions.
//!
//! `inputs` makes the conversations, `runner` sends them under a schedule and records each
//! request, `metrics` adds the records up as AIPerf does, `export` writes AIPerf's files and
//! `console` prints the table and report.html. Without `-u` the bundled server runs in-process.

pub mod agent;
pub mod budget;
pub mod by_model;
pub mod client_limit;
pub mod console;
pub mod dag;
pub mod dataset;
pub mod endpoint;
pub mod export;
pub mod inputs;
pub mod kserve;
pub mod metrics;
pub mod pa_data;
pub mod pa_openai;
pub mod pacing;
pub mod runner;
pub mod server_export;
pub mod session;
pub mod span_join;
pub mod sse;
pub mod sweep;
pub mod timeslices;
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
use crate::plan::generative::{parse_extra_inputs, DatasetType, Generative, Sessions, TokenLength, TraceTiming};
use crate::server::serve::{self, ServeConfig};
use crate::server::ServerOptions;

/// Where prompts come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompts {
    /// `--synthetic-input-tokens-mean/-stddev` from the bundled corpus, `count` distinct ones.
    Synthetic { input: Length, count: usize },
    /// `--input-file`, read as `--custom-dataset-type` says (guessed without it), its
    /// timestamps and delays as `--fixed-schedule`, `--replay-speedup`, `--ignore-trace-delays` say.
    File { path: PathBuf, kind: Option<DatasetType>, timing: TraceTiming },
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
    /// The server's own Prometheus endpoint, in place of the target's `/metrics` (the bundled
    /// server's metrics port without `-u`, `--server-metrics-url`): the first one scraped, and
    /// the one whose counters (prefix cache) the table shows.
    pub server_metrics: Option<String>,
    /// Time slices and the server-metrics scrape (`--slice-duration`, `--server-metrics`).
    pub timeline: Timeline,
    /// Synthetic sessions (`--conversation-*`, shared system prompt, user context, prefix pool).
    pub sessions: Option<Sessions>,
    /// Where to receive the server's OTLP spans during the run (`--otlp-listen`): each record
    /// then carries its server timings. The bundled server exports to it by itself.
    pub otlp_listen: Option<String>,
    /// This process as shard `index` of `count`: it sends every `count`-th session of a file
    /// from `index`, each whole (`dataset::shard_part`).
    pub file_part: Option<(u64, u64)>,
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
            (Some(path), _) => Prompts::File { path: path.clone(), kind: g.dataset_type, timing: g.trace_timing },
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
            timeline: Timeline::default(),
            sessions: g.sessions.clone(),
            otlp_listen: None,
            file_part: None,
            event_delay: Duration::ZERO,
        })
    }
}

/// `--slice-duration` and `--server-metrics`, as AIPerf takes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub slice: Option<Duration>,
    /// Scrape the target's metrics (`--no-server-metrics` turns it off).
    pub scrape: bool,
    /// More endpoints to scrape (`--server-metrics URL...`).
    pub extra_urls: Vec<String>,
    /// `--server-metrics-interval`: AIPerf's `AIPERF_SERVER_METRICS_COLLECTION_INTERVAL`, 333 ms.
    pub interval: Duration,
}

impl Default for Timeline {
    fn default() -> Timeline {
        Timeline { slice: None, scrape: true, extra_urls: Vec::new(), interval: Duration::from_millis(333) }
    }
}

impl Timeline {
    /// The URLs to scrape: the server's own (or the target's `/metrics` over HTTP), then the
    /// extra ones, each once.
    fn urls(&self, own: Option<&str>, base: &str) -> Vec<String> {
        if !self.scrape {
            return Vec::new();
        }
        let target = own
            .map(String::from)
            .or_else(|| base.starts_with("http").then(|| format!("{}/metrics", base.trim_end_matches('/'))));
        let mut urls: Vec<String> = target.into_iter().collect();
        for url in &self.extra_urls {
            let url = crate::client::scrape::metrics_url(url);
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
        urls
    }
}

/// What a run leaves: its records, their summary and what the server's counters said.
pub struct Outcome {
    pub records: Vec<metrics::Record>,
    pub summary: Summary,
    /// `name value` lines of the server's Prometheus counters worth showing (prefix cache).
    pub server_counters: Vec<(String, f64)>,
    /// One line per scraped endpoint: scrapes, failures and the last failure's reason.
    pub server_notes: Vec<String>,
    pub client_cpu_fraction: f64,
    /// What the client measured of itself: CPU, send lag, event-handling lag.
    pub client: client_limit::ClientLoad,
    /// Whether the server's spans were received (`--otlp-listen`), so the join is reported.
    pub spans_received: bool,
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
        Prompts::File { path, kind, timing } => {
            let all = dataset::read(path, *kind, &synthetic, *timing)?;
            match config.file_part {
                Some((index, count)) => dataset::shard_part(all, index, count),
                None => all,
            }
        }
        Prompts::Rankings { count, query, passages, passage } => {
            synthetic.rankings(*count, *query, *passages, *passage, config.seed)
        }
    };
    // `--output-tokens-mean` also sets turns that name no length of their own.
    if let (Some(output), Prompts::File { .. }) = (config.output_tokens, &config.prompts) {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(config.seed);
        for c in &mut conversations {
            for turn in &mut c.turns {
                turn.max_tokens = turn.max_tokens.or(Some(output.sample(&mut rng) as u32));
            }
            if let Some(graph) = &mut c.graph {
                for node in &mut Arc::make_mut(graph).nodes {
                    node.max_tokens = node.max_tokens.or(Some(output.sample(&mut rng) as u32));
                }
            }
        }
    }
    if conversations.is_empty() {
        anyhow::bail!("this shard's part of the input file is empty: fewer sessions than shards");
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
        let spans = match &config.otlp_listen {
            Some(addr) => Some(span_join::SpanReceiver::start(addr).await?),
            None => None,
        };
        let mut server = None;
        let (base, server_metrics) = match &config.url {
            Some(url) => {
                let base = if url.contains("://") { url.clone() } else { format!("http://{url}") };
                (base, config.server_metrics.clone())
            }
            None => {
                let options = ServerOptions {
                    models: config.mix.names().to_vec(),
                    otlp_traces_endpoint: spans.as_ref().map(|s| s.url()),
                    ..ServerOptions::default()
                };
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
        let scraper = crate::client::scrape::Scraper::start(
            &config.timeline.urls(server_metrics.as_deref(), &base),
            config.timeline.interval,
        );
        let mut records =
            runner::run(runner.clone(), conversations, config.schedule, config.amount, config.seed, &config.shape)
                .await;
        let saturation = runner.watch.verdict();
        let fetches = scraper.finish().await;
        let spans_received = spans.is_some();
        if let Some(spans) = spans {
            spans.join(&mut records).await;
        }
        let cpu = (crate::measure::cpu::process_cpu_ns() - cpu_before) as f64 / 1e9;
        let cores = crate::measure::cpu::available_cores() as f64;
        let client_cpu_fraction = cpu / (wall.elapsed().as_secs_f64() * cores).max(1e-9);
        let wake_lag = probe.finish().await;
        let server_counters = match (&server_metrics, fetches.first()) {
            (Some(url), Some(own)) if &own.url == url => last_counters(own),
            (Some(url), _) => read_counters(url).await.unwrap_or_default(),
            (None, _) => Vec::new(),
        };
        if let Some(server) = server {
            server.shutdown().await;
        }
        let summary = metrics::summarize(&records, config.goodput.as_ref(), config.streaming);
        export::write_all(&config.artifact_dir, &summary, &records, &run_info)?;
        let slices = match config.timeline.slice {
            Some(duration) => timeslices::write(
                &config.artifact_dir,
                &records,
                &run_info,
                duration,
                config.goodput.as_ref(),
                config.streaming,
            )?,
            None => Vec::new(),
        };
        let mut server_notes = Vec::new();
        if !fetches.is_empty() {
            let endpoints = server_export::summarize(&fetches, &run_info, &slices);
            let measured = records.iter().filter(|r| !r.warmup);
            let start = measured.clone().map(|r| r.start).min().unwrap_or(run_info.origin);
            let end = measured.map(|r| r.end).max().unwrap_or(start);
            let span = (run_info.unix_ns(start) as u64, run_info.unix_ns(end) as u64);
            server_export::write(&config.artifact_dir, &endpoints, &run_info, span)?;
            server_notes = server_export::notes(&endpoints);
        }
        let client = client_limit::ClientLoad {
            cpu_fraction: client_cpu_fraction,
            send_lag_p99_us: summary.send_lag_p99_us as f64,
            handling_lag_p99_us: summary.handling_lag_p99_us as f64,
            wake_lag_p99_us: wake_lag.value_at_quantile(0.99) as f64,
        };
        Ok(Outcome {
            records,
            summary,
            server_counters,
            server_notes,
            client_cpu_fraction,
            client,
            spans_received,
            saturation,
        })
    })
}

/// The server's generative counters (vLLM's names) from its Prometheus text.
async fn read_counters(url: &str) -> anyhow::Result<Vec<(String, f64)>> {
    let text = reqwest::Client::builder().no_proxy().build()?.get(url).send().await?.text().await?;
    Ok(counters(&text))
}

/// The counters of the last scrape that answered.
fn last_counters(scraped: &crate::client::scrape::Fetches) -> Vec<(String, f64)> {
    scraped.fetches.iter().rev().find_map(|f| f.body.as_ref().ok()).map(|text| counters(text)).unwrap_or_default()
}

fn counters(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| l.starts_with("vllm:prefix_cache_") || l.starts_with("vllm:prompt_tokens_total"))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}
