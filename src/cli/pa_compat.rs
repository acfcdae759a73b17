//! perf_analyzer's quirk flags, the ones that are not a setting of their own: deprecated or
//! older spellings (`-t`, `-c`, `-d`, `-z`, `--data-directory`, `--concurrency-range`), `-a` /
//! `--sync`, `-v`, the `--trace-*` flags, the periodic concurrency mode, the service kinds, and
//! flags it ignores for a Triton server. [`PaCompat::apply`] checks them in perf_analyzer's order
//! and words and maps them onto the sections of [`Settings`]; every other `profile` flag is a
//! section field already.

use clap::Args;

use crate::client::shm::SharedMemoryKind;
use crate::plan::settings::Settings;
use crate::plan::validate::{self, invalid};
use crate::plan::{Levels, ModelRef, Periodic, PlanError, Protocol, Sweep, TraceSetting};

/// The quirk flags of `perfbench profile`.
#[derive(Args, Debug, Clone)]
pub struct PaCompat {
    /// Closed loop: start:end:step concurrencies (end 0 with -l: until the limit).
    #[arg(long = "concurrency-range", conflicts_with = "concurrency")]
    pub concurrency_range: Option<String>,
    /// Same as --input-data zero.
    #[arg(short = 'z', long = "zero-input")]
    pub zero_input: bool,
    /// perf_analyzer's deprecated spelling of --input-data DIR.
    #[arg(long = "data-directory", hide = true)]
    pub data_directory: Option<String>,
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
    /// Concurrency (perf_analyzer's older spelling of --concurrency-range N).
    #[arg(short = 't', value_name = "N")]
    pub start_concurrency: Option<u64>,
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

impl PaCompat {
    /// perf_analyzer 2.50's deprecated `-t`, `-c` and `-d` as a concurrency range: `-t` is the
    /// start, and with `-d` the range goes up to `-c` (0 or absent: no end). Without `-d`, `-c`
    /// is ignored and only the start is measured. They mix with no other load mode.
    fn deprecated_concurrency(&self, s: &Settings) -> Result<Option<Levels>, PlanError> {
        if self.start_concurrency.is_none() && self.max_concurrency.is_none() && !self.dynamic_concurrency {
            return Ok(None);
        }
        if self.concurrency_range.is_some() {
            return Err(invalid("Cannot use deprecated options with --concurrency-range."));
        }
        if s.load.request_rate.is_some() {
            return Err(invalid("Cannot use concurrency options with --request-rate-range."));
        }
        if s.load.request_intervals.is_some() {
            return Err(invalid("Cannot use deprecated options with --request-intervals."));
        }
        let start = self.start_concurrency.unwrap_or(1);
        let end = match self.dynamic_concurrency {
            true => self.max_concurrency.as_deref().map_or(0, atoi),
            false => 1,
        };
        let levels = Levels::parse_colon(&format!("{start}:{end}")).map_err(|e| invalid(format!("bad -t {e}")))?;
        Ok(Some(levels))
    }

    /// `--input-data` values, then `--data-directory` (perf_analyzer's older spelling).
    pub fn input_data(&self, s: &Settings) -> Vec<String> {
        s.input.input_data.iter().flatten().chain(&self.data_directory).cloned().collect()
    }

    /// perf_analyzer 2.50's checks of `--request-count` against the load range, in its words.
    fn check_request_count(&self, s: &Settings) -> Result<(), PlanError> {
        let Some(count) = s.measurement.request_count.filter(|&n| n > 0) else {
            return Ok(());
        };
        let concurrency = self.concurrency_range.as_deref().map(|text| {
            let mut parts = text.split(':').map(|p| p.trim().parse::<f64>().unwrap_or(0.0));
            let start = parts.next().unwrap_or(1.0);
            (start, parts.next().unwrap_or(1.0))
        });
        // perf_analyzer's range keeps its default end, 1, when none is given.
        let rate = s.load.request_rate.map(|r| (r.start, r.end.unwrap_or(1.0)));
        for (bounds, what) in [(concurrency, "concurrency"), (rate, "request-rate")] {
            let Some((start, end)) = bounds else {
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
    fn check_service_kind(&self, s: &Settings, user_data: bool, model_repository: bool) -> Result<(), PlanError> {
        let grpc = s.call.protocol == Some(Protocol::Grpc);
        let streaming = s.call.streaming == Some(true);
        let collect_metrics = s.call.collect_metrics == Some(true);
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
            "triton_c_api" if !model_repository => {
                Some("--model-repository should not be empty when using service-kind=triton_c_api.")
            }
            "triton_c_api"
                if self.asynchronous
                    && streaming
                    && s.input.shared_memory.is_some_and(|m| m != SharedMemoryKind::None) =>
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
            "openai" if s.load.batch.is_some_and(|b| b != 1) => {
                Some("Batching is not currently supported with OpenAI service-kind")
            }
            "tfserving" | "torchserve" | "triton_c_api" | "openai" if collect_metrics => {
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

    /// What perf_analyzer 2.50 checks first of an OpenAI line's load, in its order and words:
    /// the intervals file exists, streaming is refused over HTTP (this kind speaks nothing else; a payload asks for a
    /// stream with `"stream": true`), and the periodic concurrency mode needs streaming and an
    /// export file, so it never runs with this kind.
    fn check_openai_load(&self, s: &Settings) -> Result<(), PlanError> {
        if s.load.request_intervals.as_ref().is_some_and(|path| !path.is_file()) {
            return Err(invalid("Failed to parse --request-intervals. The value must be a valid file path"));
        }
        let streaming = s.call.streaming == Some(true);
        if streaming && s.call.protocol != Some(Protocol::Grpc) {
            return Err(invalid(
                "Streaming is only allowed with gRPC protocol and Triton C API. (The OpenAI service kind streams \
                 when a payload asks for it: \"stream\": true.)",
            ));
        }
        if let Some(range) = &self.periodic_concurrency_range {
            check_periodic(range, self.request_period.as_deref())?;
            if !streaming {
                return Err(invalid("The --periodic-concurrency-range option requires bi-directional gRPC streaming."));
            }
            if s.output.profile_export_file.is_none() {
                return Err(invalid(
                    "Must provide --profile-export-file when using the --periodic-concurrency-range option.",
                ));
            }
        }
        Ok(())
    }

    /// perf_analyzer 2.50's checks of the flags, in its order and words, then these flags mapped
    /// onto `s` (the sections as the command line gave them). `model_repository`: whether
    /// `--model-repository` was given.
    pub fn apply(&self, s: &mut Settings, model_repository: bool) -> Result<(), PlanError> {
        if self.service_kind == "openai" {
            self.check_openai_load(s)?;
        }
        let input_data = self.input_data(s);
        // perf_analyzer's "user data": files and folders, as opposed to zero or random.
        let user_data = input_data.iter().any(|d| d != "zero" && d != "random");
        if (self.zero_input || input_data.iter().any(|d| d == "zero")) && user_data {
            return Err(invalid("The -z flag cannot be set when --data-directory is provided."));
        }
        if self.asynchronous && self.sync {
            return Err(invalid("Cannot specify --async and --sync simultaneously."));
        }
        self.check_request_count(s)?;
        if s.load.binary_search == Some(true) {
            check_binary_search_range(self.concurrency_range.as_deref())?;
            if let Some(rate) = s.load.request_rate {
                check_binary_search_range(Some(&rate.to_string()))?;
            }
        }
        self.check_service_kind(s, user_data, model_repository)?;
        let collect_metrics = s.call.collect_metrics == Some(true);
        if s.call.metrics_interval_ms.is_some() && !collect_metrics {
            return Err(invalid("Must specify --collect-metrics when using the --metrics-interval option."));
        }
        if s.call.streaming == Some(true) && self.sync {
            return Err(invalid("can not use streaming with synchronous API"));
        }
        let periodic = match &self.periodic_concurrency_range {
            Some(range) => Some(check_periodic(range, self.request_period.as_deref())?),
            None => None,
        };
        if let (None, Some(text)) = (&periodic, &self.request_period) {
            request_period(text)?;
        }
        let deprecated = self.deprecated_concurrency(s)?;
        let other_modes =
            [self.concurrency_range.is_some(), s.load.request_rate.is_some(), s.load.request_intervals.is_some()];
        validate::check_one_load_mode(&[self.periodic_concurrency_range.is_some(), other_modes.contains(&true)])?;
        // perf_analyzer 2.50 lets the deprecated -t/-c/-d win over --periodic-concurrency-range:
        // the run is their concurrency sweep, though the periodic range's own checks still hold.
        s.load.periodic_concurrency = periodic.filter(|_| deprecated.is_none());
        match (deprecated, &self.concurrency_range) {
            (Some(levels), _) => s.load.concurrency = Some(levels),
            (None, Some(text)) => s.load.concurrency = Some(concurrency_range(text)?),
            (None, None) => {}
        }
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
        s.call.trace = (!trace.is_empty()).then_some(trace);
        s.input.input_data =
            if self.zero_input { Some(vec!["zero".into()]) } else { (!input_data.is_empty()).then_some(input_data) };
        s.call.asynchronous = if self.sync { Some(false) } else { self.asynchronous.then_some(true) };
        s.output.verbose = Some(self.verbose);
        Ok(())
    }

    /// What perf_analyzer decides once the sweep is resolved: the BLS model's composing models,
    /// and the periodic mode's needs.
    pub fn finish(&self, sweep: &mut Sweep, model: &str) -> Result<(), PlanError> {
        if let Some(text) = &self.bls_composing_models {
            sweep.bls_composing_models = bls_composing_models(text, model)?;
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::atoi;

    #[test]
    fn c_is_read_as_cs_atoi() {
        assert_eq!((atoi(" 12ab"), atoi("-3"), atoi("+7"), atoi("")), (12, 0, 7, 0));
    }
}
