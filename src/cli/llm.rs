//! `perfbench llm`: generative profiling with AIPerf's main flags and their meanings.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::genai::runner::Schedule;
use crate::genai::{console, LlmConfig};
use crate::plan::generative::{self, EndpointType, Generative, GenerativeSettings};
use crate::plan::shape::Shape;
use crate::run::{EXIT_BAD_INPUT, EXIT_TARGET};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalPattern {
    Constant,
    Poisson,
}

#[derive(Args, Debug, Clone)]
pub struct LlmArgs {
    /// Model name (sent as `model`; the bundled server loads it without -u), or several, `a,b`:
    /// one load whose sessions --model-selection-strategy spreads over them, a row per model.
    #[arg(short = 'm', long = "model", visible_alias = "model-names", alias = "model-name")]
    pub model: String,
    /// Server address (host:port or a URL). Without it, the bundled server runs in-process.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    /// Stream the answers (SSE) and time every event: TTFT, ITL.
    #[arg(long = "streaming")]
    pub streaming: bool,
    /// Sessions in flight (closed loop). The default when no --request-rate is given: 1.
    /// Several (a list 1,8,32 or a range A..B:S) make a sweep: one run per level, then
    /// report.csv/md/html with one row each.
    #[arg(long = "concurrency")]
    pub concurrency: Option<String>,
    /// Requests per second (open loop: each leaves on schedule, whatever is in flight).
    #[arg(long = "request-rate", conflicts_with_all = ["concurrency", "request_rate_series"])]
    pub request_rate: Option<f64>,
    /// Spacing of --request-rate arrivals.
    #[arg(long = "arrival-pattern", visible_alias = "request-rate-mode", value_enum, default_value = "poisson")]
    pub arrival_pattern: ArrivalPattern,
    /// Requests to measure (default 10 without --benchmark-duration, as AIPerf).
    #[arg(long = "request-count", visible_alias = "num-requests")]
    pub request_count: Option<usize>,
    #[arg(long = "warmup-request-count", default_value_t = 0)]
    pub warmup_request_count: usize,
    /// The endpoint type (default chat), prompts and token lengths: the generative section of
    /// the settings, as `perfbench online --endpoint-type` takes it.
    #[command(flatten)]
    pub generative: GenerativeSettings,
    /// Ramps and a rate series, as `perfbench online` takes them.
    #[command(flatten)]
    pub shape: Shape,
    /// Where the files go (default artifacts/<model>-<endpoint type>-<load>).
    #[arg(long = "artifact-dir")]
    pub artifact_dir: Option<PathBuf>,
    /// A header for every request, `Name:Value`.
    #[arg(short = 'H', long = "header")]
    pub header: Vec<String>,
    /// The server's own Prometheus URL, scraped in place of the target's `/metrics` (a metrics
    /// port of its own, as Triton's 8002).
    #[arg(long = "server-metrics-url")]
    pub server_metrics_url: Option<String>,
    /// Receive the server's OpenTelemetry spans (OTLP/HTTP, POST /v1/traces) on HOST:PORT during
    /// the run and join each to its request by id: every record then carries the server's TTFT,
    /// latency, queue, prefill and decode times. Point the server's exporter here (vLLM's and
    /// perfbench serve's --otlp-traces-endpoint http://HOST:PORT); the bundled server does so
    /// by itself.
    #[arg(long = "otlp-listen", value_name = "HOST:PORT")]
    pub otlp_listen: Option<String>,
    /// Split the run into slices of this many seconds: profile_export_aiperf_timeslices.csv/json.
    #[arg(long = "slice-duration", value_name = "SECONDS")]
    pub slice_duration: Option<f64>,
    /// Scrape the server's Prometheus metrics during the run (on by default: the target's
    /// `/metrics`) and these endpoints too (host:port, host:port/path or URLs):
    /// server_metrics_export.json/csv.
    #[arg(long = "server-metrics", num_args = 0.., value_name = "URL")]
    pub server_metrics: Option<Vec<String>>,
    /// Seconds between scrapes (AIPerf's AIPERF_SERVER_METRICS_COLLECTION_INTERVAL).
    #[arg(long = "server-metrics-interval", value_name = "SECONDS", default_value_t = 0.333)]
    pub server_metrics_interval: f64,
    /// Scrape no server metrics.
    #[arg(long = "no-server-metrics", conflicts_with_all = ["server_metrics", "server_metrics_url"])]
    pub no_server_metrics: bool,
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

    /// The generative section with `perfbench llm`'s default endpoint type (chat), resolved.
    pub fn generative(&self) -> Result<Generative, String> {
        let mut section = self.generative.clone();
        section.endpoint_type.get_or_insert(EndpointType::Chat);
        let count = self.request_count.map(|n| n as u64);
        let resolved = generative::resolve(&section, count, Some(self.warmup_request_count as u64));
        Ok(resolved.map_err(|e| e.to_string())?.expect("an endpoint type is set"))
    }

    pub fn config(&self) -> Result<LlmConfig, String> {
        let mut g = self.generative()?;
        let first = self.concurrency_levels()?.first().copied();
        let series = self.shape.request_rate_series.is_some();
        let open = self.request_rate.is_some() || series;
        if g.trace_timing.fixed_schedule && (open || first.is_some()) {
            return Err(bad("--fixed-schedule sends at the file's timestamps: no --concurrency or --request-rate"));
        }
        let closed = !open && (first.is_some() || !self.is_trace());
        crate::plan::validate::check_shape_of(&self.shape, open, closed).map_err(|e| e.to_string())?;
        let shape = crate::run::prepare::load_shape(&self.shape).map_err(|e| e.error.to_string())?;
        let poisson = self.arrival_pattern == ArrivalPattern::Poisson;
        let schedule = match (first, self.request_rate) {
            // The series' mean rate names the run; the series itself sets each instant.
            (None, None) if series => {
                let series = shape.rate_series.as_ref().expect("read with the shape");
                Schedule::Rate { per_second: series.nominal_per_s(), poisson }
            }
            (Some(0), _) => return Err(bad("--concurrency must be at least 1")),
            (Some(n), None) => Schedule::Concurrency(n),
            (None, Some(rate)) if !(rate.is_finite() && rate > 0.0) => {
                return Err(bad("--request-rate must be a positive number"))
            }
            (None, Some(rate)) => Schedule::Rate { per_second: rate, poisson },
            (None, None) if self.is_trace() => Schedule::Trace,
            (None, None) => Schedule::Concurrency(1),
            (Some(_), Some(_)) => unreachable!("clap: --concurrency conflicts with --request-rate"),
        };
        crate::plan::validate::check_over_saturation(
            g.over_saturation.is_some(),
            matches!(schedule, Schedule::Rate { .. }),
        )
        .map_err(|e| e.to_string())?;
        // A trace replays whole unless a count is given.
        if schedule == Schedule::Trace && self.request_count.is_none() {
            g.request_count = None;
        }
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
            PathBuf::from("artifacts").join(format!("{}-{}-{load}", self.model.replace('/', "_"), g.endpoint_type))
        });
        let mut config =
            LlmConfig::of(&g, &self.model, self.url.clone(), self.streaming, schedule, headers, artifact_dir)?;
        if let Schedule::Rate { per_second, poisson } = schedule {
            crate::genai::runner::open_schedule(per_second, poisson, config.seed, &shape).map_err(|e| e.to_string())?;
        }
        config.shape = shape;
        config.server_metrics = self.server_metrics_url.clone();
        config.otlp_listen = self.otlp_listen.clone();
        config.server_metrics = self.server_metrics_url.as_deref().map(crate::client::scrape::metrics_url);
        config.timeline = self.timeline()?;
        config.event_delay = Duration::from_micros(self.throttle_event_handler_us);
        Ok(config)
    }

    /// `--slice-duration` and the `--server-metrics` flags.
    fn timeline(&self) -> Result<crate::genai::Timeline, String> {
        let seconds = |flag: &str, s: f64| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| bad(format!("{flag} must be a positive number of seconds")))
        };
        Ok(crate::genai::Timeline {
            slice: self.slice_duration.map(|s| seconds("--slice-duration", s)).transpose()?,
            scrape: !self.no_server_metrics,
            extra_urls: self.server_metrics.clone().unwrap_or_default(),
            interval: seconds("--server-metrics-interval", self.server_metrics_interval)?,
        })
    }

    /// `--fixed-schedule`; and a mooncake trace replays at its own timestamps unless a load is
    /// given or its delays are ignored.
    fn is_trace(&self) -> bool {
        if self.generative.fixed_schedule == Some(true) {
            return true;
        }
        if self.generative.ignore_trace_delays == Some(true) {
            return false;
        }
        let Some(path) = &self.generative.input_file else { return false };
        let Ok(text) = std::fs::read_to_string(path) else { return false };
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(first)
            .ok()
            .is_some_and(|v| v.get("input_length").is_some() && v.get("timestamp").is_some())
    }
}

pub fn run(args: &LlmArgs) -> ExitCode {
    let config = match args.config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let tokenizer_name = args.generative.tokenizer.as_deref().unwrap_or(crate::tokenize::DEFAULT_TOKENIZER);
    let tokenizer = match crate::tokenize::Tokenizer::open(tokenizer_name) {
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

/// One run per `--concurrency` level, each with its table, then the sweep's reports (written
/// again after each level, so the levels measured stay on disk).
fn sweep(
    config: &LlmConfig,
    levels: &[usize],
    tokenizer: Arc<dyn crate::genai::inputs::Tokenizer>,
    name: &str,
) -> ExitCode {
    let what = format!("{} {}", config.endpoint_type, if config.streaming { "streaming" } else { "" });
    let title = format!("perfbench llm | {} | {what} | concurrency {levels:?}", config.model);
    let schedules: Vec<Schedule> = levels.iter().map(|&n| Schedule::Concurrency(n)).collect();
    let write = |done: &[crate::genai::sweep::Level]| {
        let level = done.last().expect("called after a level");
        let heading = format!("perfbench llm | {} | {what} | {}", config.model, level.label());
        print!("{}", console::print(&level.outcome, &heading, name));
        println!();
        crate::genai::sweep::write_reports(&config.artifact_dir, done, &title)
    };
    if let Err(e) = crate::genai::sweep::run(config, &schedules, tokenizer, None, Vec::new(), write) {
        eprintln!("error: {}", super::one_line(&e));
        return ExitCode::from(EXIT_TARGET);
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
        assert_eq!(c.output_tokens, Some(crate::genai::inputs::Length { mean: 64.0, stddev: 0.0 }));
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
    fn shapes_are_the_load_modules_and_checked_against_the_loop() {
        let ramp = config(&["-m", "x", "--request-rate", "5", "--request-rate-ramp-duration", "4"]).unwrap();
        assert_eq!(ramp.shape.rate_ramp, Some(Duration::from_secs(4)));
        let slots = config(&["-m", "x", "--concurrency", "8", "--concurrency-ramp-duration", "2"]).unwrap();
        assert_eq!(slots.shape.slot_opens_at(7, 8), Duration::from_secs(2));
        let closed = config(&["-m", "x", "--concurrency", "8", "--request-rate-ramp-duration", "2"]).unwrap_err();
        assert!(closed.contains("open loop"), "{closed}");
        let open = config(&["-m", "x", "--request-rate", "5", "--concurrency-ramp-duration", "2"]).unwrap_err();
        assert!(open.contains("closed loop"), "{open}");
        assert!(config(&["-m", "x", "--request-rate", "5", "--request-rate-ramp-duration", "0"]).is_err());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("series.json");
        std::fs::write(&path, r#"{"points": [{"time_s": 0, "qps": 2}, {"time_s": 2, "qps": 6}]}"#).unwrap();
        let series = config(&["-m", "x", "--request-rate-series", path.to_str().unwrap()]).unwrap();
        assert_eq!(series.schedule, Schedule::Rate { per_second: 4.0, poisson: true }, "named by its mean");
        assert!(series.shape.rate_series.is_some());
        assert!(config(&["-m", "x", "--request-rate", "5", "--request-rate-series", path.to_str().unwrap()]).is_err());
        std::fs::write(&path, r#"{"points": []}"#).unwrap();
        let empty = config(&["-m", "x", "--request-rate-series", path.to_str().unwrap()]).unwrap_err();
        assert!(empty.contains("series.json") && empty.contains("at least one"), "{empty}");
    }

    #[test]
    fn aiperfs_session_flags_reach_the_plan() {
        let c = config(&[
            "-m",
            "llm",
            "--conversation-num",
            "6",
            "--conversation-turn-mean",
            "3",
            "--conversation-turn-stddev",
            "1",
            "--conversation-turn-delay-mean",
            "500",
            "--conversation-turn-delay-stddev",
            "50",
            "--conversation-turn-delay-ratio",
            "0.5",
            "--shared-system-prompt-length",
            "256",
            "--user-context-prompt-length",
            "32",
        ])
        .unwrap();
        let s = c.sessions.clone().expect("sessions");
        assert_eq!(s.count, Some(6));
        assert_eq!((s.turns.mean, s.turns.stddev), (3.0, 1.0));
        assert_eq!((s.delay_ms.mean, s.delay_ms.stddev, s.delay_ratio), (500.0, 50.0, 0.5));
        assert_eq!((s.shared_system_prompt_tokens, s.user_context_prompt_tokens), (Some(256), Some(32)));
        assert_eq!(c.amount.sessions, Some(6));
        assert_eq!(c.amount.requests, None, "the sessions end the run, not AIPerf's 10 requests");
        assert!(matches!(c.prompts, crate::genai::Prompts::Synthetic { count: 6, .. }), "one prompt set per session");
        let pool = config(&["-m", "x", "--prompt-prefix-pool-size", "4", "--prompt-prefix-length", "100"]).unwrap();
        let s = pool.sessions.expect("sessions");
        assert_eq!((s.prefix_pool_size, s.prefix_tokens, s.count), (4, 100, None));
        assert_eq!(pool.amount.requests, Some(10));
        assert!(config(&["-m", "x"]).unwrap().sessions.is_none());
        for (argv, needle) in [
            (&["--conversation-num", "0"][..], "at least 1"),
            (&["--prompt-prefix-pool-size", "4"], "go together"),
            (
                &[
                    "--prompt-prefix-pool-size",
                    "2",
                    "--prompt-prefix-length",
                    "8",
                    "--shared-system-prompt-length",
                    "9",
                ],
                "mutually exclusive",
            ),
            (&["--endpoint-type", "completions", "--conversation-turn-mean", "2"], "no history"),
            (&["--endpoint-type", "embeddings", "--conversation-num", "2"], "no sessions"),
            (&["--conversation-turn-delay-ratio=-1"], "0 or more"),
        ] {
            let mut full = vec!["-m", "x"];
            full.extend_from_slice(argv);
            let err = config(&full).unwrap_err();
            assert!(err.contains(needle), "{argv:?}: {err}");
        }
    }

    #[test]
    fn aiperfs_timeline_flags_resolve() {
        let c = config(&["-m", "x", "--slice-duration", "0.5", "--server-metrics", "node1:8081", "h:9/m"]).unwrap();
        assert_eq!(c.timeline.slice, Some(Duration::from_millis(500)));
        assert!(c.timeline.scrape, "on by default");
        assert_eq!(c.timeline.extra_urls, vec!["node1:8081".to_string(), "h:9/m".to_string()]);
        assert_eq!(c.timeline.interval, Duration::from_millis(333));
        let bare = config(&["-m", "x", "--server-metrics"]).unwrap();
        assert!(bare.timeline.scrape && bare.timeline.extra_urls.is_empty());
        let off = config(&["-m", "x", "--no-server-metrics"]).unwrap();
        assert!(!off.timeline.scrape);
        let own = config(&["-m", "x", "--server-metrics-url", "127.0.0.1:8002"]).unwrap();
        assert_eq!(own.server_metrics.as_deref(), Some("http://127.0.0.1:8002/metrics"));
        assert!(config(&["-m", "x", "--slice-duration", "0"]).unwrap_err().contains("--slice-duration"));
        assert!(config(&["-m", "x", "--server-metrics-interval=-1"])
            .unwrap_err()
            .contains("--server-metrics-interval"));
        assert!(config(&["-m", "x", "--no-server-metrics", "--server-metrics", "a:1"]).is_err());
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
