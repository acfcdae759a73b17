//! `perfbench profile`: perf_analyzer's command line. Its flags resolve into a one-sweep
//! [`Plan`]; defaults not given on the command line come from the one defaults table
//! ([`crate::plan::defaults`]), which follows perf_analyzer for `profile`.

use std::path::PathBuf;

use clap::Args;

use super::common::{pa_batch_size, pa_number, target, CommonArgs};
use crate::plan::settings::{resolve, Settings, TWO_LOAD_MODES};
use crate::plan::{invalid, Levels, Model, ModelRef, Periodic, Plan, PlanError, SweepKind, TraceSetting};

/// `perfbench profile`: a drop-in for `perf_analyzer` (same flag names). With no `-u`, the
/// bundled server is started in this process on ephemeral loopback ports and profiled over the
/// chosen protocol.
#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Model to profile (required; checked when the plan resolves, in perf_analyzer's words).
    #[arg(short = 'm', long = "model-name")]
    pub model: Option<String>,
    /// Model version (empty: the latest).
    #[arg(short = 'x', long = "model-version", default_value = "")]
    pub model_version: String,
    /// Batch size of each request.
    #[arg(short = 'b', long = "batch-size", allow_negative_numbers = true, value_parser = pa_batch_size)]
    pub batch_size: Option<u64>,
    /// Closed loop: start:end:step concurrencies (end 0 with -l: until the limit).
    #[arg(long = "concurrency-range")]
    pub concurrency_range: Option<String>,
    /// Open loop: start:end:step request rates, per second.
    #[arg(long = "request-rate-range")]
    pub request_rate_range: Option<String>,
    /// Open-loop gaps: constant or poisson.
    #[arg(long = "request-distribution")]
    pub request_distribution: Option<String>,
    /// Open loop from a trace: one interval in µs per line, cycled.
    #[arg(long = "request-intervals")]
    pub request_intervals: Option<PathBuf>,
    /// Same as --input-data zero.
    #[arg(short = 'z', long = "zero-input")]
    pub zero_input: bool,
    /// perf_analyzer's deprecated spelling of --input-data DIR.
    #[arg(long = "data-directory", hide = true)]
    pub data_directory: Option<String>,
    /// Bytes reserved per batch item for each output of unknown size with shared memory.
    #[arg(long = "output-shared-memory-size")]
    pub output_shared_memory_size: Option<u64>,
    /// Latency limit in ms: stop the sweep once exceeded (0: none).
    #[arg(short = 'l', long = "latency-threshold", value_parser = pa_number::<f64>("-l"))]
    pub latency_threshold_ms: Option<f64>,
    /// Search the range for the largest value under -l.
    #[arg(long = "binary-search")]
    pub binary_search: bool,
    /// Measure exactly this many requests per point (one window, no stability check).
    #[arg(long = "request-count", value_parser = pa_number::<u64>("--request-count"))]
    pub request_count: Option<u64>,
    /// TensorFlow Serving's signature name: accepted and ignored, as perf_analyzer ignores it
    /// for a Triton server.
    #[arg(long = "model-signature-name", hide = true)]
    pub model_signature_name: Option<String>,
    /// The OpenAI service kind's endpoint: accepted and ignored, as perf_analyzer ignores it for
    /// a Triton server (its routes are fixed).
    #[arg(long = "endpoint", hide = true)]
    pub endpoint: Option<String>,
    /// Asynchronous calls (the engine is always asynchronous; kept for perf_analyzer parity).
    #[arg(short = 'a', long = "async")]
    pub asynchronous: bool,
    /// Synchronous calls (perf_analyzer's default; same engine).
    #[arg(long = "sync")]
    pub sync: bool,
    #[command(flatten)]
    pub common: CommonArgs,
    /// CSV report (perf_analyzer's format).
    #[arg(short = 'f', long = "latency-report-file")]
    pub latency_report_file: Option<PathBuf>,
    /// Add Avg latency, request/response and response wait to the CSV.
    #[arg(long = "verbose-csv")]
    pub verbose_csv: bool,
    /// Scrape interval in ms.
    #[arg(long = "metrics-interval")]
    pub metrics_interval_ms: Option<u64>,
    /// Per-request timestamps as perf_analyzer's JSON.
    #[arg(long = "profile-export-file")]
    pub profile_export_file: Option<PathBuf>,
    /// triton (a KServe v2 server) or inprocess (the bundled server, called directly).
    /// perf_analyzer's other kinds (tfserving, torchserve, triton_c_api, openai) get its checks,
    /// then "not supported".
    #[arg(long = "service-kind", default_value = "triton")]
    pub service_kind: String,
    /// The Triton install of `--service-kind triton_c_api` (not supported).
    #[arg(long = "triton-server-directory", hide = true)]
    pub triton_server_directory: Option<String>,
    /// Print the version and exit, as perf_analyzer's `--version`.
    #[arg(long = "version")]
    pub version: bool,
    /// Seed of the Poisson schedule.
    #[arg(long = "seed")]
    pub seed: Option<u64>,
    /// Concurrency (perf_analyzer's older spelling of --concurrency-range N).
    #[arg(short = 't', value_name = "N")]
    pub concurrency: Option<u64>,
    /// perf_analyzer's deprecated dynamic concurrency: concurrency from -t (default 1) up to -c
    /// (default 0: no end, until -l is exceeded).
    #[arg(short = 'd', hide = true)]
    pub dynamic_concurrency: bool,
    /// The end of -d's range (perf_analyzer's deprecated -c, read as C's atoi; without -d it
    /// changes nothing, as in perf_analyzer).
    #[arg(short = 'c', hide = true, value_name = "N", allow_hyphen_values = true)]
    pub max_concurrency: Option<String>,
    /// Verbose: -v prints each measurement pass as perf_analyzer does.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Length of generated BYTES (string) elements.
    #[arg(long = "string-length")]
    pub string_length: Option<usize>,
    /// The value of every generated BYTES (string) element.
    #[arg(long = "string-data")]
    pub string_data: Option<String>,
    /// Server trace level (OFF, TIMESTAMPS, TENSORS), set through the trace extension.
    #[arg(long = "trace-level")]
    pub trace_level: Vec<String>,
    /// Server trace rate, set through the trace extension.
    #[arg(long = "trace-rate")]
    pub trace_rate: Option<String>,
    /// Server trace count, set through the trace extension.
    #[arg(long = "trace-count")]
    pub trace_count: Option<String>,
    /// Server trace log frequency, set through the trace extension.
    #[arg(long = "log-frequency")]
    pub log_frequency: Option<String>,
    /// perf_analyzer's periodic concurrency mode, start:end:step: `start` requests, then `step`
    /// more each time the latest ones have had --request-period responses, `end` in all (gRPC
    /// streaming and --profile-export-file only).
    #[arg(long = "periodic-concurrency-range", hide = true)]
    pub periodic_concurrency_range: Option<String>,
    /// Responses per request before the periodic concurrency grows (perf_analyzer ignores it
    /// without --periodic-concurrency-range, and so does perfbench).
    #[arg(long = "request-period", hide = true, allow_negative_numbers = true)]
    pub request_period: Option<String>,
    /// Models the (BLS) model calls, NAME[:VERSION],...: their server statistics are reported
    /// as an ensemble's composing models are.
    #[arg(long = "bls-composing-models", value_name = "model[:version],...")]
    pub bls_composing_models: Option<String>,
}

/// `--bls-composing-models a:3,b` read as perf_analyzer reads it: spaces dropped, one model per
/// comma, an optional version after a colon. An empty name (`a,`) is refused here; perf_analyzer
/// asks the server for it and fails. So is the model under test itself, on which perf_analyzer
/// crashes.
fn bls_composing_models(text: &str, model: &str) -> Result<Vec<ModelRef>, PlanError> {
    let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    text.split(',')
        .map(|item| {
            let (name, version) = item.split_once(':').unwrap_or((item, ""));
            if name.is_empty() {
                // The server's answer to perf_analyzer, then why.
                return Err(invalid(format!("--bls-composing-models '{text}': model '' Not Found (a name is empty)")));
            }
            if name == model {
                return Err(invalid(format!(
                    "--bls-composing-models: '{name}' is the model under test, not one of its composing models"
                )));
            }
            Ok(ModelRef { name: name.to_string(), version: version.to_string() })
        })
        .collect()
}

/// `--request-period`: perf_analyzer reads it even without a periodic range, and refuses one
/// that is not above 0.
fn request_period(text: &str) -> Result<u64, PlanError> {
    match text.trim().parse::<i64>() {
        Ok(n) if n > 0 => Ok(n as u64),
        _ => Err(invalid("Failed to parse --request-period. The value must be > 0")),
    }
}

/// `--periodic-concurrency-range start:end:step` and `--request-period`, checked in perf_analyzer
/// 2.50's order and words.
fn check_periodic(range: &str, period: Option<&str>) -> Result<Periodic, PlanError> {
    let bad = |why: &str| invalid(format!("Failed to parse --periodic-concurrency-range. {why}"));
    let parts: Vec<&str> = range.split(':').collect();
    if parts.len() < 2 {
        return Err(bad("Both <start> and <end> values must be provided."));
    }
    if parts.len() > 3 {
        return Err(bad("The value does not match <start:end:step>."));
    }
    let values = parts
        .iter()
        .map(|p| p.trim().parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad(&format!("Invalid value provided: {range}")))?;
    let (start, end, step) = (values[0], values[1], values.get(2).copied().unwrap_or(1));
    if step == 0 {
        return Err(bad("The <step> value must be > 0."));
    }
    if start > end {
        return Err(bad("The <start> must be <= <end>."));
    }
    if (end - start) % step != 0 {
        return Err(bad("The <step> value must be a factor of the range size (<end> - <start>)."));
    }
    let request_period = match period {
        Some(text) => request_period(text)?,
        None => DEFAULT_REQUEST_PERIOD,
    };
    Ok(Periodic { start, end, step, request_period })
}

/// C's `atoi`, as perf_analyzer reads `-c`: leading digits after optional blanks and sign, 0 when
/// there are none (a negative value counts as 0, no end).
fn atoi(text: &str) -> u64 {
    let text = text.trim_start();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let digits: String = digits.chars().take_while(|c| c.is_ascii_digit()).collect();
    if negative {
        return 0;
    }
    digits.parse().unwrap_or(0)
}

/// perf_analyzer 2.50's `--request-period` when none is given.
const DEFAULT_REQUEST_PERIOD: u64 = 10;

/// `--concurrency-range start[:end[:step]]`, its malformed values refused in perf_analyzer's words.
pub(super) fn concurrency_range(text: &str) -> Result<Levels, PlanError> {
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() > 3 {
        return Err(invalid("Failed to parse --concurrency-range. The value does not match <start:end:step>."));
    }
    if parts.iter().any(|p| p.trim().parse::<u64>().is_err()) {
        return Err(invalid(format!("Failed to parse --concurrency-range. Invalid value provided: {text}")));
    }
    Levels::parse_colon(text).map_err(|e| invalid(format!("bad --concurrency-range {e}")))
}

/// perf_analyzer's binary search refuses a range whose end (other than 0, refused on its own
/// when the plan is checked) is below its start; a plain sweep measures the start alone.
fn check_binary_search_range(text: Option<&str>) -> Result<(), PlanError> {
    let values: Vec<f64> = text.unwrap_or("").split(':').map(|p| p.trim().parse().unwrap_or(f64::NAN)).collect();
    match values.as_slice() {
        [start, end, ..] if *end != 0.0 && end < start => {
            Err(invalid("The end of the range can not be less than start of the range for binary search mode."))
        }
        _ => Ok(()),
    }
}

impl ProfileArgs {
    /// perf_analyzer 2.50's deprecated `-t`, `-c` and `-d` as a concurrency range: `-t` is the
    /// start, and with `-d` the range goes up to `-c` (0 or absent: no end). Without `-d`, `-c`
    /// is ignored and only the start is measured. They mix with no other load mode.
    fn deprecated_concurrency(&self) -> Result<Option<Levels>, PlanError> {
        if self.concurrency.is_none() && self.max_concurrency.is_none() && !self.dynamic_concurrency {
            return Ok(None);
        }
        if self.concurrency_range.is_some() {
            return Err(invalid("Cannot use deprecated options with --concurrency-range."));
        }
        if self.request_rate_range.is_some() {
            return Err(invalid("Cannot use concurrency options with --request-rate-range."));
        }
        if self.request_intervals.is_some() {
            return Err(invalid("Cannot use deprecated options with --request-intervals."));
        }
        let start = self.concurrency.unwrap_or(1);
        let end = match self.dynamic_concurrency {
            true => self.max_concurrency.as_deref().map_or(0, atoi),
            false => 1,
        };
        let levels = Levels::parse_colon(&format!("{start}:{end}")).map_err(|e| invalid(format!("bad -t {e}")))?;
        Ok(Some(levels))
    }

    /// `--input-data` values, then `--data-directory` (perf_analyzer's older spelling).
    pub(super) fn input_data(&self) -> Vec<String> {
        self.common.input_data.iter().chain(&self.data_directory).cloned().collect()
    }

    /// perf_analyzer 2.50's checks of `--request-count` against the load range, in its words.
    fn check_request_count(&self) -> Result<(), PlanError> {
        let Some(count) = self.request_count.filter(|&n| n > 0) else {
            return Ok(());
        };
        let bounds = |text: &str| -> (f64, f64) {
            let mut parts = text.split(':').map(|p| p.trim().parse::<f64>().unwrap_or(0.0));
            let start = parts.next().unwrap_or(1.0);
            (start, parts.next().unwrap_or(1.0))
        };
        for (text, what) in [(&self.concurrency_range, "concurrency"), (&self.request_rate_range, "request-rate")] {
            let Some((start, end)) = text.as_deref().map(bounds) else {
                continue;
            };
            if (count as f64) < start.trunc() {
                return Err(invalid(format!("request-count can not be less than {what}")));
            }
            if start < end {
                return Err(invalid(format!("request-count not supported with multiple {what} values in one run")));
            }
        }
        Ok(())
    }

    /// perf_analyzer's checks for the service kinds perfbench does not speak, in its words, so
    /// a line that perf_analyzer refuses is refused for the same reason; one that passes them
    /// is "not supported" here.
    fn check_service_kind(&self, user_data: bool) -> Result<(), PlanError> {
        let grpc = self.common.protocol.as_deref().is_some_and(|p| p.eq_ignore_ascii_case("grpc"));
        let streaming = self.common.call.streaming;
        let why = match self.service_kind.as_str() {
            "triton" | "inprocess" => None,
            "tfserving" if !grpc => Some("perf_analyzer supports only grpc protocol for TensorFlow Serving."),
            "tfserving" if streaming => Some("perf_analyzer does not support streaming for TensorFlow Serving."),
            "tfserving" if self.asynchronous => {
                Some("perf_analyzer does not support async API for TensorFlow Serving.")
            }
            "torchserve" if !user_data => {
                Some("--input-data should be provided with a json file with input data for torchserve.")
            }
            "triton_c_api" if self.common.model_repository.is_none() => {
                Some("--model-repository should not be empty when using service-kind=triton_c_api.")
            }
            "triton_c_api"
                if self.asynchronous
                    && streaming
                    && self.common.shared_memory.as_deref().is_some_and(|m| m != "none") =>
            {
                Some(
                    "Cannot use --shared-memory=system or --shared-memory=cuda with --service-kind=triton_c_api and \
                     --async and --streaming.",
                )
            }
            "openai" if !user_data => Some("Must supply --input-data for OpenAI service kind."),
            "openai" if self.endpoint.is_none() => {
                Some("Must supply --endpoint for OpenAI service kind. For example, \"v1/chat/completions\".")
            }
            "openai" if !self.asynchronous => Some("Only async mode is currently supported for OpenAI service-kind"),
            "openai" if self.batch_size.is_some_and(|b| b != 1) => {
                Some("Batching is not currently supported with OpenAI service-kind")
            }
            "tfserving" | "torchserve" | "triton_c_api" | "openai" if self.common.call.collect_metrics => {
                Some("Server-side metric collection is only supported with Triton client backend.")
            }
            "tfserving" | "torchserve" | "triton_c_api" | "openai" => None,
            other => {
                return Err(invalid(format!(
                    "Failed to parse --service-kind. Unsupported type provided: '{other}'. The available options are \
                     'triton', 'tfserving', 'torchserve', or 'triton_c_api' (and perfbench's 'inprocess')."
                )))
            }
        };
        match why {
            Some(why) => Err(invalid(why)),
            None => Ok(()),
        }
    }

    /// Resolves the flags into a one-sweep plan. No file is created and no socket opened,
    /// except reading the `--request-intervals` trace.
    pub fn plan(&self) -> Result<Plan, PlanError> {
        let Some(model) = self.model.clone() else {
            return Err(invalid("Failed to parse -m (model name). The value must be specified."));
        };
        let input_data = self.input_data();
        // perf_analyzer's "user data": files and folders, as opposed to zero or random.
        let user_data = input_data.iter().any(|d| d != "zero" && d != "random");
        if (self.zero_input || input_data.iter().any(|d| d == "zero")) && user_data {
            return Err(invalid("The -z flag cannot be set when --data-directory is provided."));
        }
        if self.asynchronous && self.sync {
            return Err(invalid("Cannot specify --async and --sync simultaneously."));
        }
        self.check_request_count()?;
        if self.binary_search {
            check_binary_search_range(self.concurrency_range.as_deref())?;
            check_binary_search_range(self.request_rate_range.as_deref())?;
        }
        self.check_service_kind(user_data)?;
        if self.metrics_interval_ms.is_some() && !self.common.call.collect_metrics {
            return Err(invalid("Must specify --collect-metrics when using the --metrics-interval option."));
        }
        if self.common.call.streaming && self.sync {
            return Err(invalid("can not use streaming with synchronous API"));
        }
        let periodic = match &self.periodic_concurrency_range {
            Some(range) => Some(check_periodic(range, self.request_period.as_deref())?),
            None => None,
        };
        if let (None, Some(text)) = (&periodic, &self.request_period) {
            request_period(text)?;
        }
        let deprecated = self.deprecated_concurrency()?;
        let other_modes =
            [self.concurrency_range.is_some(), self.request_rate_range.is_some(), self.request_intervals.is_some()];
        if self.periodic_concurrency_range.is_some() && other_modes.contains(&true) {
            return Err(invalid(TWO_LOAD_MODES));
        }
        // perf_analyzer 2.50 lets the deprecated -t/-c/-d win over --periodic-concurrency-range:
        // the run is their concurrency sweep, though the periodic range's own checks still hold.
        let periodic = periodic.filter(|_| deprecated.is_none());
        let target = target(&self.common.url, &self.service_kind, &self.common.model_repository)?;
        let concurrency = match (deprecated, &self.concurrency_range) {
            (Some(levels), _) => Some(levels),
            (None, Some(text)) => Some(concurrency_range(text)?),
            (None, None) => None,
        };
        let mut trace = Vec::new();
        if !self.trace_level.is_empty() {
            trace.push(TraceSetting { key: "trace_level".into(), values: self.trace_level.clone() });
        }
        for (key, value) in [
            ("trace_rate", &self.trace_rate),
            ("trace_count", &self.trace_count),
            ("log_frequency", &self.log_frequency),
        ] {
            if let Some(v) = value {
                trace.push(TraceSetting { key: key.into(), values: vec![v.clone()] });
            }
        }
        let common = self.common.settings();
        let settings = Settings {
            batch: self.batch_size,
            concurrency,
            request_rate: self.request_rate_range.clone(),
            request_distribution: self.request_distribution.clone(),
            seed: self.seed,
            request_intervals: self.request_intervals.clone(),
            latency_threshold_ms: self.latency_threshold_ms,
            binary_search: Some(self.binary_search),
            output_shared_memory_size: self.output_shared_memory_size,
            input_data: if self.zero_input {
                Some(vec!["zero".into()])
            } else {
                (!input_data.is_empty()).then_some(input_data)
            },
            request_count: self.request_count,
            asynchronous: if self.sync { Some(false) } else { self.asynchronous.then_some(true) },
            metrics_interval_ms: self.metrics_interval_ms,
            latency_report_file: self.latency_report_file.clone(),
            verbose_csv: Some(self.verbose_csv),
            profile_export_file: self.profile_export_file.clone(),
            verbose: Some(self.verbose),
            string_length: self.string_length,
            string_data: self.string_data.clone(),
            trace: (!trace.is_empty()).then_some(trace),
            periodic_concurrency: periodic,
            ..common
        };
        let mut sweep = resolve(SweepKind::Profile, &settings, &target)?;
        if let Some(text) = &self.bls_composing_models {
            sweep.bls_composing_models = bls_composing_models(text, &model)?;
        }
        if self.periodic_concurrency_range.is_some() {
            sweep.output.no_closing_report = true;
            if !sweep.call.streaming {
                return Err(invalid("The --periodic-concurrency-range option requires bi-directional gRPC streaming."));
            }
            if sweep.output.profile_export_file.is_none() {
                return Err(invalid(
                    "Must provide --profile-export-file when using the --periodic-concurrency-range option.",
                ));
            }
        }
        let plan = Plan {
            shard: None,
            resume: false,
            target,
            model: Model { name: model, version: self.model_version.clone(), config: None },
            sweeps: vec![sweep],
            gate: None,
        };
        plan.validate()?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::shm::SharedMemoryKind;
    use crate::plan::Target;
    use crate::plan::{Distribution, Load, Protocol, WindowKind};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProfileArgs,
    }

    fn resolve(line: &str) -> Result<Plan, PlanError> {
        let argv = std::iter::once("profile").chain(line.split_whitespace());
        Cli::try_parse_from(argv).expect("parses").args.plan()
    }

    #[test]
    fn defaults_follow_perf_analyzer() {
        let plan = resolve("-m identity").unwrap();
        assert_eq!(plan.target, Target::Embedded { model_repository: None });
        let s = &plan.sweeps[0];
        assert_eq!(s.protocol, Protocol::Http);
        assert_eq!(s.load, Load::Concurrency { levels: Levels::one(1) });
        assert_eq!((s.measurement.mode, s.measurement.interval_ms), (WindowKind::TimeWindows, 5000));
        assert_eq!((s.measurement.stability_percentage, s.measurement.max_trials), (10.0, 10));
        assert_eq!(s.measurement.total_requests, None);
        assert_eq!(s.measurement.warmup_requests, 0);
        assert_eq!(s.input.shared_memory, SharedMemoryKind::None);
    }

    #[test]
    fn sequence_flags_resolve_with_perf_analyzers_defaults() {
        let s = resolve("-m m").unwrap().sweeps[0].sequences.clone();
        assert_eq!((s.length, s.length_given, s.length_variation_pct), (20, false, 20.0));
        assert_eq!((s.id_start, s.id_end, s.count, s.serial), (1, None, 4, false));
        assert_eq!(s.id_range(), u32::MAX as u64);
        let plan = resolve("-m m --sequence-length 5 --sequence-id-range 7:15 --num-of-sequences 2 --serial-sequences --request-rate-range 10 --validate-outputs").unwrap();
        let s = &plan.sweeps[0].sequences;
        assert_eq!(
            (s.length, s.length_given, s.id_start, s.id_end, s.count, s.serial),
            (5, true, 7, Some(15), 2, true)
        );
        assert!(plan.sweeps[0].validate_outputs);
        // Sequence id 0 means "no sequence": perf_analyzer starts at 1 instead.
        assert_eq!(resolve("-m m --sequence-id-range 0").unwrap().sweeps[0].sequences.id_start, 1);
    }

    #[test]
    fn client_threads_follow_concurrency_cores_and_max_threads() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = |line: &str| {
            let plan = resolve(line).unwrap();
            crate::run::worker_threads(&plan.sweeps[0], &plan.target)
        };
        assert_eq!(threads("-m m -u h:1 --concurrency-range 1:16"), 1);
        assert_eq!(threads("-m m -u h:1 --concurrency-range 64"), cores.min(4));
        assert_eq!(threads("-m m -u h:1 --concurrency-range 64 --max-threads 1"), 1);
        assert_eq!(threads("-m m -u h:1 --concurrency-range 1 --max-threads 64"), cores);
        // The bundled server runs on the same runtime: it keeps every core.
        assert_eq!(threads("-m m --concurrency-range 1"), cores);
        assert_eq!(threads("-m m --concurrency-range 1 --max-threads 1"), 1);
    }

    #[test]
    fn periodic_concurrency_resolves_with_perf_analyzers_default_period() {
        let line = "-m repeat -i grpc --streaming --periodic-concurrency-range 2:6:2 --profile-export-file x.json";
        let plan = resolve(line).unwrap();
        let want = Periodic { start: 2, end: 6, step: 2, request_period: 10 };
        assert_eq!(plan.sweeps[0].load, Load::Periodic(want));
        let plan = resolve(&format!("{line} --request-period 3")).unwrap();
        assert_eq!(plan.sweeps[0].load, Load::Periodic(Periodic { request_period: 3, ..want }));
        // A range without a step grows by one.
        let plan =
            resolve("-m r -i grpc --streaming --periodic-concurrency-range 1:3 --profile-export-file x").unwrap();
        assert_eq!(plan.sweeps[0].load, Load::Periodic(Periodic { start: 1, end: 3, step: 1, request_period: 10 }));
        assert!(plan.sweeps[0].output.no_closing_report);
    }

    #[test]
    fn deprecated_t_overrides_the_periodic_range_as_in_perf_analyzer() {
        let line = "-m r -i grpc --streaming --periodic-concurrency-range 1:4 --profile-export-file x -f p.csv -t 3";
        let sweep = &resolve(line).unwrap().sweeps[0];
        assert_eq!(sweep.load, Load::Concurrency { levels: Levels::parse_colon("3:1").unwrap() });
        // perf_analyzer still writes no closing list or CSV for such a line.
        assert!(sweep.output.no_closing_report);
        assert!(!resolve("-m r --concurrency-range 2 -f p.csv").unwrap().sweeps[0].output.no_closing_report);
    }

    #[test]
    fn ranges_modes_and_services_resolve() {
        let plan = resolve("-m m -u localhost:8001 -i grpc --concurrency-range 2:8:2 --measurement-mode count_windows --measurement-request-count 30 -l 5 --percentile 95").unwrap();
        assert_eq!(plan.target, Target::Remote { url: "localhost:8001".into() });
        let s = &plan.sweeps[0];
        assert_eq!(s.load, Load::Concurrency { levels: "2:8:2".parse().unwrap() });
        assert_eq!((s.measurement.mode, s.measurement.request_count), (WindowKind::CountWindows, 30));
        assert_eq!(s.latency_limit_ms, Some(5.0));
        assert_eq!(s.measurement.percentile, Some(95.0));
        let plan =
            resolve("-m m --request-rate-range 100:200:50 --request-distribution poisson --service-kind inprocess")
                .unwrap();
        assert_eq!(
            plan.sweeps[0].load,
            Load::RequestRate { start: 100.0, end: 200.0, step: 50.0, distribution: Distribution::Poisson, seed: 1 }
        );
        assert_eq!(plan.target, Target::InProcess { model_repository: None });
    }

    #[test]
    fn deprecated_t_c_d_resolve_as_perf_analyzer_2_50_reads_them() {
        let levels = |line: &str| match resolve(line).map(|p| p.sweeps[0].load.clone()) {
            Ok(Load::Concurrency { levels }) => Ok(levels.to_string()),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
        let range = |text: &str| Ok(Levels::parse_colon(text).unwrap().to_string());
        assert_eq!(levels("-m m -t 3"), range("3"));
        // -c is -d's end: alone it changes nothing.
        assert_eq!(levels("-m m -c 3"), range("1"));
        assert_eq!(levels("-m m -t 2 -c 4"), range("2"));
        assert_eq!(levels("-m m -d -c3"), range("1:3"));
        assert_eq!(levels("-m m -d -t 2 -c 4"), range("2:4"));
        // A start above the end is measured alone, as perf_analyzer's do-while does.
        assert_eq!(levels("-m m -d -t 4 -c 2"), range("4"));
        // No end: up to the latency limit, which it then needs.
        assert_eq!(levels("-m m -d -l 5"), range("1:0"));
        assert_eq!(levels("-m m -d -c x -l 5"), range("1:0"));
        let e = levels("-m m -d").unwrap_err();
        assert!(e.starts_with("The end of the search range and the latency limit can not be both 0"), "{e}");
        for (line, want) in [
            ("-m m -t 2 --concurrency-range 4", "Cannot use deprecated options with --concurrency-range."),
            ("-m m --request-rate-range 5 -d", "Cannot use concurrency options with --request-rate-range."),
            ("-m m -c 2 --request-intervals f", "Cannot use deprecated options with --request-intervals."),
        ] {
            assert_eq!(levels(line).unwrap_err(), invalid(want).to_string(), "{line}");
        }
        assert_eq!((atoi(" 12ab"), atoi("-3"), atoi("+7"), atoi("")), (12, 0, 7, 0));
    }

    #[test]
    fn bls_composing_models_are_read_as_perf_analyzer_reads_them() {
        let refs = |line: &str| resolve(line).map(|p| p.sweeps[0].bls_composing_models.clone());
        let r = |name: &str, version: &str| ModelRef { name: name.into(), version: version.into() };
        assert_eq!(refs("-m bls").unwrap(), []);
        assert_eq!(refs("-m bls --bls-composing-models a:3,b").unwrap(), [r("a", "3"), r("b", "")]);
        // Spaces are dropped wherever they are.
        let plan = Cli::try_parse_from(["profile", "-m", "bls", "--bls-composing-models", " a , b:1"]).unwrap();
        assert_eq!(plan.args.plan().unwrap().sweeps[0].bls_composing_models, [r("a", ""), r("b", "1")]);
        let e = refs("-m bls --bls-composing-models=a,").unwrap_err().to_string();
        assert!(e.contains("Not Found (a name is empty)"), "{e}");
        let e = refs("-m bls --bls-composing-models a,bls:1").unwrap_err().to_string();
        assert!(e.contains("'bls' is the model under test"), "{e}");
    }

    #[test]
    fn unsupported_flags_are_named() {
        assert_eq!(resolve("-m m --max-threads 0").unwrap_err(), invalid("--max-threads must be at least 1"));
        let e = resolve("-m m -i grpc --ssl-grpc-use-ssl").unwrap_err().to_string();
        assert!(e.contains("needs -u"), "{e}");
        let plan = resolve("-m m -u h:1 -i grpc --ssl-grpc-use-ssl --grpc-compression-algorithm gzip").unwrap();
        assert!(plan.sweeps[0].call.tls.grpc.use_ssl);
        let e = resolve("-m m -u h:1 --ssl-https-private-key-file k.pem").unwrap_err().to_string();
        assert!(e.contains("go together"), "{e}");
        // A line that passes perf_analyzer's checks of another service kind is not supported.
        for line in [
            "-m m --service-kind openai --input-data d.json --endpoint v1/chat/completions -a",
            "-m m --service-kind tfserving -i grpc -u h:1",
            "-m m --service-kind triton_c_api --triton-server-directory /opt/tritonserver --model-repository r",
        ] {
            let kind = line.split_whitespace().nth(3).unwrap();
            assert_eq!(resolve(line).unwrap_err().to_string(), format!("not supported: --service-kind {kind}"));
        }
        assert!(resolve("-m m --streaming")
            .unwrap_err()
            .to_string()
            .starts_with("Streaming is only allowed with gRPC"));
        assert!(resolve("-m m -i grpc --streaming").unwrap().sweeps[0].call.streaming);
    }

    #[test]
    fn request_parameters_resolve_typed_and_a_later_name_wins() {
        use crate::client::{ParameterValue, RequestParameter};
        let plan = resolve("-m m -i grpc --request-parameter n:1:int --request-parameter b:false:Bool --request-parameter s:hi:string --request-parameter n:-3:INT").unwrap();
        let p = |name: &str, value| RequestParameter { name: name.into(), value };
        assert_eq!(
            plan.sweeps[0].call.request_parameters,
            vec![
                p("b", ParameterValue::Bool(false)),
                p("s", ParameterValue::String("hi".into())),
                p("n", ParameterValue::Int(-3))
            ]
        );
    }

    #[test]
    fn flags_perf_analyzer_ignores_for_triton_are_accepted() {
        let plan = resolve("-m m --model-signature-name serving_default --endpoint v1/x --percentile -1").unwrap();
        assert_eq!(plan.sweeps[0].measurement.percentile, None);
    }

    #[test]
    fn a_descending_range_measures_its_start_as_perf_analyzer_does() {
        let plan = resolve("-m m --concurrency-range 4:2").unwrap();
        let Load::Concurrency { levels } = &plan.sweeps[0].load else { panic!("{:?}", plan.sweeps[0].load) };
        assert_eq!(levels.values(0), vec![4]);
        let plan = resolve("-m m --request-rate-range 100:50:10").unwrap();
        let Load::RequestRate { start, end, .. } = plan.sweeps[0].load else { panic!("{:?}", plan.sweeps[0].load) };
        assert_eq!((start, end), (100.0, 100.0));
    }

    #[test]
    fn bad_values_are_one_line_errors() {
        for (line, needle) in [
            ("-m m --concurrency-range 0:4", "The start of the search range must be > 0"),
            ("-m m --concurrency-range a:2", "Failed to parse --concurrency-range. Invalid value provided: a:2"),
            ("-m m --concurrency-range 1:2:3:4", "The value does not match <start:end:step>."),
            ("-m m -b -1", "Failed to parse -b (batch size). The value must be > 0."),
            ("-m m -z --input-data d.json", "The -z flag cannot be set when --data-directory is provided."),
            ("-m m --input-data zero --data-directory d", "The -z flag cannot be set when --data-directory"),
            ("-m m --request-count 10 --concurrency-range 1:2", "not supported with multiple concurrency values"),
            ("-m m --request-count 1 --concurrency-range 2", "request-count can not be less than concurrency"),
            ("-m m --request-count 5 --request-rate-range 10", "request-count can not be less than request-rate"),
            ("-m m --binary-search --concurrency-range 4:1 -l 5", "can not be less than start of the range"),
            ("-m m -i grpc --streaming --sync", "can not use streaming with synchronous API"),
            ("-m m --metrics-interval 100", "Must specify --collect-metrics when using the --metrics-interval"),
            ("-m m --metrics-url h:1", "Must specify --collect-metrics when using the --metrics-url option."),
            ("-m m --service-kind tfserving", "perf_analyzer supports only grpc protocol for TensorFlow Serving."),
            ("-m m --service-kind tfserving -i grpc -a", "does not support async API for TensorFlow Serving."),
            ("-m m --service-kind torchserve", "--input-data should be provided with a json file"),
            ("-m m --service-kind triton_c_api", "--model-repository should not be empty"),
            ("-m m --service-kind openai --input-data d.json", "Must supply --endpoint for OpenAI service kind."),
            ("-m m --service-kind bogus", "Failed to parse --service-kind. Unsupported type provided: 'bogus'."),
            ("-m m --concurrency-range 4:0", "needs -l"),
            ("-m m -i udp", "Failed to parse -i (protocol)"),
            ("-m m --measurement-mode both", "Failed to parse --measurement-mode"),
            ("-m m --concurrency-range 1:2 --request-rate-range 5", "Cannot specify more then one inference load mode"),
            ("-m m --shape INPUT0:x", "--shape"),
            ("-m m --percentile 100", "Failed to parse --percentile"),
            ("-m m -r 0", "Failed to parse --max-trials (-r)"),
            ("-m m -p 0", "Failed to parse --measurement-interval (-p)"),
            (
                "-m m --measurement-mode count_windows --measurement-request-count 0",
                "Failed to parse --measurement-request-count",
            ),
            ("-m m --request-rate-range 0", "Failed to parse --request-rate-range"),
            ("-m m --request-rate-range 10 --request-distribution uniform", "Failed to parse --request-distribution"),
            (
                "-m m --binary-search --concurrency-range 1:8",
                "The --latency-threshold cannot be 0 for binary search mode",
            ),
            ("-m m --service-kind inprocess -u h:1", "-u"),
            ("-m m --shared-memory gpu", "--shared-memory"),
            ("-m m -b 0", "Failed to parse -b (batch size)"),
            ("-m m --sync --async", "Cannot specify --async and --sync simultaneously"),
            (
                "-m m --grpc-compression-algorithm gzip",
                "Using compression algorithm is only allowed with gRPC protocol",
            ),
            ("-m m --shape INPUT0:-3", "Failed to parse --shape. The dimensions of input tensor must be > 0"),
            ("-m m --sequence-length 0", "Failed to parse --sequence-length"),
            ("-m m --sequence-length-variation=-1", "Failed to parse --sequence-length-variation"),
            ("-m m --sequence-id-range 5:2", "Failed to parse --sequence-id-range"),
            ("-m m --sequence-id-range 1:2:3", "Failed to parse --sequence-id-range"),
            ("-m m --sequence-id-range 1:3 -t 4", "sequence id collision"),
            ("-m m --num-of-sequences 0", "Failed to parse --num-of-sequences"),
            ("-m m --periodic-concurrency-range 1", "Both <start> and <end> values must be provided."),
            ("-m m --periodic-concurrency-range 1:2:3:4", "The value does not match <start:end:step>."),
            ("-m m --periodic-concurrency-range a:2", "Invalid value provided: a:2"),
            ("-m m --periodic-concurrency-range 1:2:0", "The <step> value must be > 0."),
            ("-m m --periodic-concurrency-range 3:2", "The <start> must be <= <end>."),
            ("-m m --periodic-concurrency-range 1:4:2", "The <step> value must be a factor of the range size"),
            ("-m m --request-period 0", "Failed to parse --request-period. The value must be > 0"),
            (
                "-m m --periodic-concurrency-range 1:2 --concurrency-range 2",
                "--periodic-concurrency-range, --request-rate-range",
            ),
            ("-m m --periodic-concurrency-range 1:2 -t 2", "requires bi-directional gRPC streaming."),
            ("-m m --periodic-concurrency-range 1:2", "requires bi-directional gRPC streaming."),
            ("-m m -i grpc --streaming --periodic-concurrency-range 1:2", "Must provide --profile-export-file"),
            (
                "-m m --request-parameter a:1:int",
                "The --request-parameter option is currently only supported by gRPC protocol.",
            ),
            (
                "-m m -i grpc --request-parameter a:1",
                "Failed to parse --request-parameter. The value does not match <name:value:type>.",
            ),
            ("-m m -i grpc --request-parameter a:x:int", "is not an int"),
            ("-m m -i grpc --request-parameter a:yes:bool", "is not a bool"),
            ("-m m -i grpc --request-parameter a:1.5:float", "Unsupported type provided: 'float'"),
            ("-m m -i grpc --service-kind inprocess --request-parameter a:1:int", "--service-kind inprocess"),
        ] {
            let err = resolve(line).unwrap_err().to_string();
            assert!(err.contains(needle), "{line}: {err}");
            assert!(!err.contains('\n'), "{line}: {err}");
        }
    }

    #[test]
    fn flags_plan_toml_plan_is_identity() {
        for line in [
            "-m identity",
            "-m m -u localhost:8001 -i grpc --concurrency-range 2:8:2 -l 5 --percentile 95 -H X:1 --streaming",
            "-m m --request-rate-range 100:200:50 --request-distribution poisson --shared-memory system -b 4",
            "-m m --concurrency-range 4:0 -l 10 --collect-metrics --metrics-url h:1 -f x.csv --verbose-csv",
            "-m identity --shape INPUT0:16 --input-data zero --request-count 10 --max-threads 2",
            "-m accumulate --sequence-length 5 --sequence-length-variation 0 --sequence-id-range 10:20 -t 4",
            "-m accumulate --request-rate-range 50 --num-of-sequences 8 --serial-sequences --validate-outputs",
            "-m m -i grpc --request-parameter n:5:int --request-parameter b:true:bool --request-parameter s:5:string",
            "-m repeat -i grpc --streaming --periodic-concurrency-range 2:6:2 --request-period 3 --profile-export-file x.json",
        ] {
            let plan = resolve(line).unwrap();
            let text = plan.to_toml();
            assert_eq!(Plan::from_toml(&text).unwrap(), plan, "{line}:\n{text}");
        }
    }
}
