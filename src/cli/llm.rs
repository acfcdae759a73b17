//! `perfbench llm`: generative profiling with AIPerf's main flags and their meanings.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::genai::endpoint::EndpointType;
use crate::genai::inputs::Length;
use crate::genai::metrics::Slos;
use crate::genai::runner::{Amount, Schedule};
use crate::genai::{console, LlmConfig, Prompts};
use crate::run::{EXIT_BAD_INPUT, EXIT_TARGET};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalPattern {
    Constant,
    Poisson,
}

#[derive(Args, Debug, Clone)]
pub struct LlmArgs {
    /// Model name (sent as `model`; the bundled server loads it without -u).
    #[arg(short = 'm', long = "model", visible_alias = "model-names", alias = "model-name")]
    pub model: String,
    /// Server address (host:port or a URL). Without it, the bundled server runs in-process.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    #[arg(long = "endpoint-type", value_enum, default_value = "chat")]
    pub endpoint_type: EndpointType,
    /// A path in place of the endpoint type's (e.g. v1/chat/completions).
    #[arg(long = "endpoint", visible_alias = "custom-endpoint")]
    pub endpoint: Option<String>,
    /// Stream the answers (SSE) and time every event: TTFT, ITL.
    #[arg(long = "streaming")]
    pub streaming: bool,
    /// Sessions in flight (closed loop). The default when no --request-rate is given: 1.
    /// Several (a list 1,8,32 or a range A..B:S) make a sweep: one run per level, then
    /// report.csv/md/html with one row each.
    #[arg(long = "concurrency")]
    pub concurrency: Option<String>,
    /// Requests per second (open loop: each leaves on schedule, whatever is in flight).
    #[arg(long = "request-rate", conflicts_with = "concurrency")]
    pub request_rate: Option<f64>,
    /// Spacing of --request-rate arrivals.
    #[arg(long = "arrival-pattern", visible_alias = "request-rate-mode", value_enum, default_value = "poisson")]
    pub arrival_pattern: ArrivalPattern,
    /// Requests to measure (default 10 without --benchmark-duration, as AIPerf).
    #[arg(long = "request-count", visible_alias = "num-requests")]
    pub request_count: Option<usize>,
    /// Seconds to send requests for.
    #[arg(long = "benchmark-duration")]
    pub benchmark_duration: Option<f64>,
    #[arg(long = "warmup-request-count", default_value_t = 0)]
    pub warmup_request_count: usize,
    #[arg(long = "synthetic-input-tokens-mean", visible_alias = "isl", default_value_t = 550.0)]
    pub input_tokens_mean: f64,
    #[arg(long = "synthetic-input-tokens-stddev", visible_alias = "isl-stddev", default_value_t = 0.0)]
    pub input_tokens_stddev: f64,
    /// Output length asked for (`max_tokens`, with `ignore_eos`); unset: the server decides.
    #[arg(long = "output-tokens-mean", visible_alias = "osl")]
    pub output_tokens_mean: Option<f64>,
    #[arg(long = "output-tokens-stddev", visible_alias = "osl-stddev", default_value_t = 0.0)]
    pub output_tokens_stddev: f64,
    /// Distinct synthetic prompts (default, as AIPerf 0.13: one per request, warm-up included,
    /// so no prompt is sent twice; 100 with --benchmark-duration).
    #[arg(long = "num-dataset-entries", visible_alias = "num-prompts")]
    pub num_dataset_entries: Option<usize>,
    /// Extra body fields, `key:value` (a JSON value, else a string), or one JSON object.
    #[arg(long = "extra-inputs")]
    pub extra_inputs: Vec<String>,
    /// JSONL prompts (single- or multi-turn, ShareGPT-like) or a mooncake trace (`timestamp`,
    /// `input_length`, `output_length`, `hash_ids`), replayed at its timestamps.
    #[arg(long = "input-file")]
    pub input_file: Option<PathBuf>,
    /// Tokens per `hash_id` block of a mooncake trace.
    #[arg(long = "prompt-input-tokens-block-size", visible_alias = "isl-block-size", default_value_t = 512)]
    pub block_size: usize,
    /// Client tokenizer: cl100k_base or o200k_base (bundled), or a tokenizer.json or its directory.
    #[arg(long = "tokenizer", default_value = crate::tokenize::DEFAULT_TOKENIZER)]
    pub tokenizer: String,
    /// SLOs, e.g. "time_to_first_token:100 inter_token_latency:10" (ms; tokens/sec/user).
    #[arg(long = "goodput")]
    pub goodput: Option<String>,
    /// Where the files go (default artifacts/<model>-<endpoint type>-<load>).
    #[arg(long = "artifact-dir")]
    pub artifact_dir: Option<PathBuf>,
    /// A header for every request, `Name:Value`.
    #[arg(short = 'H', long = "header")]
    pub header: Vec<String>,
    #[arg(long = "random-seed", default_value_t = 0)]
    pub random_seed: u64,
    /// Prometheus URL to read the server's vLLM counters from after the run (with -u).
    #[arg(long = "server-metrics-url")]
    pub server_metrics_url: Option<String>,
    /// Test-only: block each SSE event's handling this many µs (a throttled client).
    #[arg(long = "throttle-event-handler-us", hide = true, default_value_t = 0)]
    pub throttle_event_handler_us: u64,
}

/// The client tokenizer of `--tokenizer`: the one the bundled server counts `usage` with.
impl crate::genai::inputs::Tokenizer for crate::tokenize::Tokenizer {
    fn count(&self, text: &str) -> usize {
        crate::tokenize::Tokenizer::count(self, text)
    }
    fn name(&self) -> String {
        crate::tokenize::Tokenizer::name(self).to_string()
    }
}

fn bad(message: impl Into<String>) -> String {
    message.into()
}

impl LlmArgs {
    /// The `--concurrency` levels (one without the flag or for a single value).
    pub fn concurrency_levels(&self) -> Result<Vec<usize>, String> {
        let Some(text) = &self.concurrency else { return Ok(Vec::new()) };
        let levels: crate::plan::Levels = text.parse().map_err(|e| format!("bad --concurrency {e}"))?;
        let values = levels.values(levels.first());
        if values.is_empty() || values.contains(&0) {
            return Err(bad("--concurrency must be at least 1"));
        }
        if values.len() > 64 {
            return Err(bad(format!("--concurrency '{text}' makes {} levels; at most 64", values.len())));
        }
        Ok(values.into_iter().map(|v| v as usize).collect())
    }

    pub fn config(&self) -> Result<LlmConfig, String> {
        let first = self.concurrency_levels()?.first().copied();
        let schedule = match (first, self.request_rate) {
            (Some(0), _) => return Err(bad("--concurrency must be at least 1")),
            (Some(n), None) => Schedule::Concurrency(n),
            (None, Some(rate)) if !(rate.is_finite() && rate > 0.0) => {
                return Err(bad("--request-rate must be a positive number"))
            }
            (None, Some(rate)) => {
                Schedule::Rate { per_second: rate, poisson: self.arrival_pattern == ArrivalPattern::Poisson }
            }
            (None, None) if self.is_trace() => Schedule::Trace,
            (None, None) => Schedule::Concurrency(1),
            (Some(_), Some(_)) => unreachable!("clap: --concurrency conflicts with --request-rate"),
        };
        let duration = match self.benchmark_duration {
            Some(s) if !(s.is_finite() && s > 0.0) => return Err(bad("--benchmark-duration must be positive")),
            other => other.map(Duration::from_secs_f64),
        };
        let requests = match (self.request_count, duration, schedule) {
            (Some(0), _, _) => return Err(bad("--request-count must be at least 1")),
            (Some(n), _, _) => Some(n),
            (None, None, Schedule::Trace) => None,
            (None, None, _) => Some(10),
            (None, Some(_), _) => None,
        };
        if self.input_tokens_mean < 1.0 || self.input_tokens_stddev < 0.0 {
            return Err(bad("--synthetic-input-tokens-mean must be at least 1 and its stddev at least 0"));
        }
        let output_tokens = match self.output_tokens_mean {
            Some(mean) if mean < 1.0 || self.output_tokens_stddev < 0.0 => {
                return Err(bad("--output-tokens-mean must be at least 1 and its stddev at least 0"))
            }
            Some(mean) => Some(Length { mean, stddev: self.output_tokens_stddev }),
            None => None,
        };
        let entries = self.num_dataset_entries.unwrap_or(requests.map_or(100, |n| n + self.warmup_request_count));
        if entries == 0 || self.block_size == 0 {
            return Err(bad("--num-dataset-entries and --prompt-input-tokens-block-size must be at least 1"));
        }
        let prompts = match &self.input_file {
            Some(path) => Prompts::File(path.clone()),
            None => Prompts::Synthetic {
                input: Length { mean: self.input_tokens_mean, stddev: self.input_tokens_stddev },
                count: entries,
            },
        };
        if self.endpoint.is_some() && self.endpoint_type == EndpointType::Kserve {
            return Err(bad("--endpoint names an HTTP path; --endpoint-type kserve is gRPC ModelStreamInfer"));
        }
        let goodput = self.goodput.as_deref().map(Slos::parse).transpose()?;
        let headers = self
            .header
            .iter()
            .map(|h| {
                h.split_once(':')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .ok_or_else(|| bad(format!("-H '{h}': expected Name:Value")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let levels = self.concurrency_levels()?;
        let load = match schedule {
            Schedule::Concurrency(_) if levels.len() > 1 => "concurrency_sweep".into(),
            Schedule::Concurrency(n) => format!("concurrency{n}"),
            Schedule::Rate { per_second, .. } => format!("request_rate{per_second}"),
            Schedule::Trace => "trace".into(),
        };
        let artifact_dir = self.artifact_dir.clone().unwrap_or_else(|| {
            PathBuf::from("artifacts").join(format!("{}-{}-{load}", self.model.replace('/', "_"), self.endpoint_type))
        });
        Ok(LlmConfig {
            model: self.model.clone(),
            url: self.url.clone(),
            endpoint_type: self.endpoint_type,
            endpoint: self.endpoint.clone(),
            streaming: self.streaming,
            schedule,
            amount: Amount { requests, duration, warmup: self.warmup_request_count },
            prompts,
            block_size: self.block_size,
            output_tokens,
            extra: extra_inputs(&self.extra_inputs)?,
            headers,
            goodput,
            artifact_dir,
            seed: self.random_seed,
            server_metrics: self.server_metrics_url.clone(),
            event_delay: Duration::from_micros(self.throttle_event_handler_us),
        })
    }

    /// A mooncake trace replays at its own timestamps unless a load is given.
    fn is_trace(&self) -> bool {
        let Some(path) = &self.input_file else { return false };
        let Ok(text) = std::fs::read_to_string(path) else { return false };
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(first)
            .ok()
            .is_some_and(|v| v.get("input_length").is_some() && v.get("timestamp").is_some())
    }
}

/// `--extra-inputs key:value` (value parsed as JSON when it is JSON) or a whole JSON object.
fn extra_inputs(items: &[String]) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut out = serde_json::Map::new();
    for item in items {
        if item.trim_start().starts_with('{') {
            let object: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(item).map_err(|e| format!("--extra-inputs '{item}': {e}"))?;
            out.extend(object);
            continue;
        }
        let (key, value) = item
            .split_once(':')
            .ok_or_else(|| format!("--extra-inputs '{item}': expected key:value or a JSON object"))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
        out.insert(key.to_string(), value);
    }
    Ok(out)
}

pub fn run(args: &LlmArgs) -> ExitCode {
    let config = match args.config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let tokenizer = match crate::tokenize::Tokenizer::open(&args.tokenizer) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: --tokenizer: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let name = tokenizer.name().to_string();
    let levels = match args.concurrency_levels() {
        Ok(levels) => levels,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if levels.len() > 1 {
        return sweep(&config, &levels, Arc::new(tokenizer), &name);
    }
    let outcome = match crate::genai::profile(&config, Arc::new(tokenizer)) {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("error: {}", super::one_line(&e));
            return ExitCode::from(EXIT_TARGET);
        }
    };
    let title = format!(
        "perfbench llm | {} | {} {} | {:?}",
        config.model,
        config.endpoint_type,
        if config.streaming { "streaming" } else { "" },
        config.schedule
    );
    print!("{}", console::print(&outcome, &title, &name));
    let input_config = config.input_config(&name);
    if let Err(e) = console::write_html(&config.artifact_dir, &outcome, &title, &input_config, &name) {
        eprintln!("error: report.html: {}", super::one_line(&e));
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    println!("Files: {}", config.artifact_dir.display());
    if outcome.summary.get("request_count").is_some_and(|v| v == &crate::genai::metrics::MetricValue::Single(0.0)) {
        eprintln!("error: no request succeeded");
        return ExitCode::from(EXIT_TARGET);
    }
    ExitCode::SUCCESS
}

/// One run per `--concurrency` level, each with its table, then the sweep's reports.
fn sweep(
    config: &LlmConfig,
    levels: &[usize],
    tokenizer: Arc<dyn crate::genai::inputs::Tokenizer>,
    name: &str,
) -> ExitCode {
    let done = match crate::genai::sweep::run(config, levels, tokenizer) {
        Ok(done) => done,
        Err(e) => {
            eprintln!("error: {}", super::one_line(&e));
            return ExitCode::from(EXIT_TARGET);
        }
    };
    let what = format!("{} {}", config.endpoint_type, if config.streaming { "streaming" } else { "" });
    for level in &done {
        let title = format!("perfbench llm | {} | {what} | concurrency {}", config.model, level.concurrency);
        print!("{}", console::print(&level.outcome, &title, name));
        println!();
    }
    let title = format!("perfbench llm | {} | {what} | concurrency {levels:?}", config.model);
    if let Err(e) = crate::genai::sweep::write_reports(&config.artifact_dir, &done, &title) {
        eprintln!("error: reports: {}", super::one_line(&e));
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    println!("Files: {}", config.artifact_dir.display());
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: LlmArgs,
    }

    fn config(argv: &[&str]) -> Result<LlmConfig, String> {
        let mut full = vec!["llm"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).map_err(|e| e.to_string())?.args.config()
    }

    #[test]
    fn aiperf_flags_resolve() {
        let c = config(&[
            "-m",
            "llm",
            "--endpoint-type",
            "chat",
            "--streaming",
            "--concurrency",
            "32",
            "--request-count",
            "500",
            "--output-tokens-mean",
            "64",
            "--extra-inputs",
            "temperature:0.5",
            "--extra-inputs",
            "{\"seed\": 3}",
            "--goodput",
            "time_to_first_token:50",
            "-H",
            "X-Test: 1",
        ])
        .unwrap();
        assert_eq!(c.schedule, Schedule::Concurrency(32));
        assert_eq!(c.amount.requests, Some(500));
        assert_eq!(c.output_tokens, Some(Length { mean: 64.0, stddev: 0.0 }));
        assert_eq!(c.extra["temperature"], serde_json::json!(0.5));
        assert_eq!(c.extra["seed"], serde_json::json!(3));
        assert_eq!(c.headers, vec![("X-Test".to_string(), "1".to_string())]);
        assert_eq!(c.artifact_dir, PathBuf::from("artifacts/llm-chat-concurrency32"));
        let rate = config(&["-m", "x", "--request-rate", "5", "--arrival-pattern", "constant"]).unwrap();
        assert_eq!(rate.schedule, Schedule::Rate { per_second: 5.0, poisson: false });
        assert_eq!(rate.amount.requests, Some(10), "AIPerf's default request count");
        let sweep = config(&["-m", "llm", "--concurrency", "1,8,32"]).unwrap();
        assert_eq!(sweep.schedule, Schedule::Concurrency(1));
        assert_eq!(sweep.artifact_dir, PathBuf::from("artifacts/llm-chat-concurrency_sweep"));
        assert!(config(&["-m", "x", "--concurrency", "1,0"]).unwrap_err().contains("at least 1"));
    }

    #[test]
    fn bad_flags_get_one_line_reasons() {
        assert!(config(&["-m", "x", "--concurrency", "0"]).unwrap_err().contains("--concurrency"));
        assert!(config(&["-m", "x", "--request-rate", "0"]).unwrap_err().contains("--request-rate"));
        assert!(config(&["-m", "x", "--goodput", "nope:1"]).unwrap_err().contains("unknown metric"));
        assert!(config(&["-m", "x", "--extra-inputs", "novalue"]).unwrap_err().contains("key:value"));
        assert!(config(&["-m", "x", "--concurrency", "2", "--request-rate", "3"]).is_err());
        let kserve_path = config(&["-m", "x", "--endpoint-type", "kserve", "--endpoint", "v1/x"]).unwrap_err();
        assert!(kserve_path.contains("gRPC"), "{kserve_path}");
    }
}
