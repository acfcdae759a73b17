//! What a user said about one sweep, before defaults: every field optional. A scenario's
//! `[offline]` / `[online]` sections (and their profile overrides) are `Settings`, and so are the
//! `offline`, `online` and `profile` command lines once clap has parsed them. [`resolve`] fills the
//! rest from [`defaults`](super::defaults) and checks the result.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::layers::overlay;
use super::{
    defaults, invalid, Call, Distribution, Header, Input, Levels, Load, Measurement, Metrics, Output, Periodic,
    PlanError, Protocol, Sequences, StopWhen, Sweep, SweepKind, Target, TensorFormat, TraceSetting, WindowKind,
};
use crate::client::shm::SharedMemoryKind;
use crate::client::tls::TlsOptions;
use crate::input::{InputData, ShapeOverride};

/// One sweep's settings; scenario keys are these names. Unknown keys are an error.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub batch_sizes: Option<Levels>,
    /// One batch size (`-b`); the same as `batch_sizes` with one value.
    pub batch: Option<u64>,
    pub concurrency: Option<Levels>,
    /// `start:end:step` requests per second.
    pub request_rate: Option<String>,
    pub request_distribution: Option<String>,
    pub seed: Option<u64>,
    pub request_intervals: Option<PathBuf>,
    pub latency_threshold_ms: Option<f64>,
    pub binary_search: Option<bool>,
    pub protocol: Option<String>,
    pub shapes: Option<Vec<String>>,
    pub shared_memory: Option<String>,
    pub output_shared_memory_size: Option<u64>,
    /// `--input-data`, repeatable; a scenario may give one string or a list.
    #[serde(default, with = "crate::input::one_or_many::option")]
    pub input_data: Option<Vec<String>>,
    pub measurement_mode: Option<String>,
    /// `stable` or `ci=P%[,max=T]` ([`StopWhen`]).
    pub stop_when: Option<String>,
    pub measurement_interval_ms: Option<u64>,
    pub measurement_request_count: Option<u64>,
    pub request_count: Option<u64>,
    pub warmup_request_count: Option<u64>,
    pub stability_percentage: Option<f64>,
    pub max_trials: Option<usize>,
    pub percentile: Option<f64>,
    pub headers: Option<Vec<String>>,
    /// `name:value:type`, repeatable (gRPC).
    pub request_parameters: Option<Vec<String>>,
    /// Seconds any call waits for its answer.
    pub request_timeout: Option<f64>,
    pub streaming: Option<bool>,
    pub asynchronous: Option<bool>,
    pub max_threads: Option<usize>,
    pub collect_metrics: Option<bool>,
    pub metrics_url: Option<String>,
    pub metrics_interval_ms: Option<u64>,
    pub latency_report_file: Option<PathBuf>,
    pub verbose_csv: Option<bool>,
    pub profile_export_file: Option<PathBuf>,
    /// The results folder.
    pub out: Option<PathBuf>,
    pub verbose: Option<u8>,
    pub string_length: Option<usize>,
    pub string_data: Option<String>,
    pub trace: Option<Vec<TraceSetting>>,
    /// perf_analyzer's `--ssl-*` and `--grpc-compression-algorithm`.
    pub tls: Option<TlsOptions>,
    /// `binary` or `json` (HTTP).
    pub input_tensor_format: Option<String>,
    pub output_tensor_format: Option<String>,
    /// Sequence models: `--sequence-length`, `--sequence-length-variation` (%),
    /// `--sequence-id-range start[:end]`, `--num-of-sequences`, `--serial-sequences`.
    pub sequence_length: Option<u64>,
    pub sequence_length_variation: Option<f64>,
    pub sequence_id_range: Option<String>,
    pub num_of_sequences: Option<u64>,
    pub serial_sequences: Option<bool>,
    /// `--validate-outputs`: check every answer, counting mismatches as failed requests.
    pub validate_outputs: Option<bool>,
    /// `--periodic-concurrency-range` with `--request-period` (checked by the command line).
    pub periodic_concurrency: Option<Periodic>,
}

impl Settings {
    /// `self` with every key `over` sets replaced ([`overlay`]).
    pub fn merged(&self, over: &Settings) -> Settings {
        overlay(self, over)
    }
}

/// perf_analyzer's load-mode conflict, in its words (its spelling included: scripts grep them).
pub const TWO_LOAD_MODES: &str = "Cannot specify more then one inference load mode. Please choose only one of the \
    following modes: --concurrency-range, --periodic-concurrency-range, --request-rate-range, or --request-intervals.";

/// Splits "start[:end[:step]]" of request rates; missing end = start, missing step = 1.
fn parse_rate_range(text: &str) -> Result<(f64, f64, f64), PlanError> {
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() > 3 {
        return Err(invalid(format!("bad --request-rate-range '{text}': expected start:end:step")));
    }
    let num = |s: &str| {
        s.trim()
            .parse::<f64>()
            .map_err(|_| invalid(format!("bad --request-rate-range '{text}': '{s}' is not a number")))
    };
    let start = num(parts[0])?;
    let end = parts.get(1).map(|s| num(s)).transpose()?.unwrap_or(start);
    let step = parts.get(2).map(|s| num(s)).transpose()?.unwrap_or(1.0);
    if start <= 0.0 {
        return Err(invalid("Failed to parse --request-rate-range. The start of the search range must be > 0."));
    }
    // perf_analyzer measures the start and steps on while at most the end: an end below the
    // start measures the start alone.
    Ok((start, end.max(start), step))
}

/// `--sequence-id-range start[:end]` (end excluded), as perf_analyzer reads it.
fn parse_id_range(text: &str) -> Result<(u64, Option<u64>), PlanError> {
    let bad = |why: &str| invalid(format!("Failed to parse --sequence-id-range. {why} (got '{text}')"));
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() > 2 {
        return Err(bad("The value does not match <start:end>."));
    }
    let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad("The range values must be >= 0."));
    let start = num(parts[0])?;
    let end = parts.get(1).map(|s| num(s)).transpose()?;
    if end.is_some_and(|end| start > end) {
        return Err(bad("The 'end' value must be greater than 'start' value."));
    }
    Ok((start, end))
}

/// The sequence settings of a sweep, checked.
fn sequences(s: &Settings, d: &defaults::Defaults) -> Result<Sequences, PlanError> {
    let length = match s.sequence_length {
        Some(0) => return Err(invalid("Failed to parse --sequence-length. The value must be > 0.")),
        Some(n) => n,
        None => d.sequence_length,
    };
    let variation = s.sequence_length_variation.unwrap_or(d.sequence_length_variation);
    if !(variation.is_finite() && variation >= 0.0) {
        return Err(invalid("Failed to parse --sequence-length-variation. The value must be >= 0.0."));
    }
    let (id_start, id_end) = match &s.sequence_id_range {
        Some(text) => parse_id_range(text)?,
        None => (d.sequence_id_start, None),
    };
    if id_end == Some(id_start) {
        return Err(invalid("Failed to parse --sequence-id-range. The range holds no sequence id."));
    }
    let count = match s.num_of_sequences {
        Some(0) => return Err(invalid("Failed to parse --num-of-sequences. The value must be > 0.")),
        Some(n) => n,
        None => d.num_of_sequences,
    };
    Ok(Sequences {
        length,
        length_given: s.sequence_length.is_some(),
        length_variation_pct: variation,
        // perf_analyzer takes sequence id 0 (no sequence) as its default start, 1.
        id_start: id_start.max(1),
        id_end,
        count,
        serial: s.serial_sequences.unwrap_or(false),
    })
}

/// Fills `s` from the defaults of `kind` into a checked sweep against `target`.
pub fn resolve(kind: SweepKind, s: &Settings, target: &Target) -> Result<Sweep, PlanError> {
    let d = defaults::of(kind);
    let protocol: Protocol = s.protocol.as_deref().unwrap_or(d.protocol).parse().map_err(PlanError::Invalid)?;
    let batch_sizes = match (&s.batch_sizes, s.batch) {
        (Some(_), Some(_)) => return Err(invalid("give batch sizes or one batch, not both")),
        (Some(levels), None) => levels.clone(),
        (None, Some(0)) => return Err(invalid("Failed to parse -b (batch size). The value must be > 0.")),
        (None, Some(b)) => Levels::one(b),
        (None, None) => d.batch_sizes.parse().expect("default batch sizes parse"),
    };
    let other_mode = s.concurrency.is_some() || s.request_rate.is_some() || s.request_intervals.is_some();
    let load = match (&s.concurrency, &s.request_rate, &s.request_intervals) {
        _ if s.periodic_concurrency.is_some() && other_mode => return Err(invalid(TWO_LOAD_MODES)),
        _ if s.periodic_concurrency.is_some() => Load::Periodic(s.periodic_concurrency.expect("checked above")),
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            return Err(invalid(TWO_LOAD_MODES));
        }
        (_, Some(range), None) => {
            let (start, end, step) = parse_rate_range(range)?;
            let distribution = match s.request_distribution.as_deref().unwrap_or(d.request_distribution) {
                "constant" => Distribution::Constant,
                "poisson" => Distribution::Poisson,
                other => {
                    return Err(invalid(format!(
                        "Failed to parse --request-distribution. Unsupported type provided: '{other}'. Choices are 'posson' or 'constant'."
                    )))
                }
            };
            Load::RequestRate { start, end, step, distribution, seed: s.seed.unwrap_or(d.seed) }
        }
        (None, None, Some(path)) => Load::Trace { intervals: path.clone() },
        (levels, None, None) => Load::Concurrency {
            levels: levels.clone().unwrap_or_else(|| d.concurrency.parse().expect("default concurrency parses")),
        },
    };
    if kind == SweepKind::Offline && !matches!(&load, Load::Concurrency { levels } if *levels == Levels::one(1)) {
        return Err(invalid("an offline sweep runs at concurrency 1: use an online sweep for other loads"));
    }
    let latency_limit_ms = match s.latency_threshold_ms {
        Some(l) if l.is_nan() || l < 0.0 => return Err(invalid("-l must be a number of milliseconds >= 0")),
        Some(l) if l > 0.0 => Some(l),
        _ => None,
    };
    let shared_memory: SharedMemoryKind =
        s.shared_memory.as_deref().unwrap_or(d.shared_memory).parse().map_err(|e| invalid(format!("{e}")))?;
    let data = match s.input_data.as_deref() {
        Some(texts) if !texts.is_empty() => texts.iter().map(String::as_str).collect(),
        _ => vec![d.input_data],
    }
    .into_iter()
    .map(|t| t.parse::<InputData>().map_err(|e| invalid(format!("{e}"))))
    .collect::<Result<Vec<_>, _>>()?;
    let shapes = s
        .shapes
        .iter()
        .flatten()
        .map(|t| t.parse::<ShapeOverride>().map_err(|e| invalid(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let headers = s
        .headers
        .iter()
        .flatten()
        .map(|h| h.parse::<Header>().map_err(PlanError::Invalid))
        .collect::<Result<Vec<_>, _>>()?;
    let request_parameters =
        crate::client::parse_request_parameters(s.request_parameters.as_deref().unwrap_or_default())
            .map_err(PlanError::Invalid)?;
    let format = |flag: &str, text: &Option<String>| -> Result<TensorFormat, PlanError> {
        text.as_deref()
            .map(|t| t.parse().map_err(|e| invalid(format!("Failed to parse {flag}. {e}"))))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let input_tensor_format = format("--input-tensor-format", &s.input_tensor_format)?;
    let output_tensor_format = format("--output-tensor-format", &s.output_tensor_format)?;
    let tls = s.tls.clone().unwrap_or_default();
    tls.check().map_err(PlanError::Invalid)?;
    if let Some(t) = s.request_timeout.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(invalid(format!("--request-timeout must be a number of seconds > 0, got {t}")));
    }
    let collect = s.collect_metrics.unwrap_or(false);
    if s.metrics_url.is_some() && !collect {
        return Err(invalid("Must specify --collect-metrics when using the --metrics-url option."));
    }
    if collect && s.metrics_url.is_none() && matches!(target, Target::InProcess { .. }) {
        return Err(invalid("--collect-metrics needs --metrics-url with --service-kind inprocess"));
    }
    let mode: WindowKind = match &s.measurement_mode {
        Some(text) => text.parse().map_err(PlanError::Invalid)?,
        None => d.window,
    };
    let stop_when: StopWhen = s.stop_when.as_deref().unwrap_or(d.stop_when).parse().map_err(PlanError::Invalid)?;
    let out = match (kind, &s.out) {
        (SweepKind::Profile, out) => out.clone(),
        (_, Some(out)) => Some(out.clone()),
        (_, None) => None,
    };
    let sweep = Sweep {
        kind,
        protocol,
        call: Call {
            headers,
            streaming: s.streaming.unwrap_or(false),
            asynchronous: s.asynchronous,
            max_threads: s.max_threads,
            tls,
            input_tensor_format,
            output_tensor_format,
            request_parameters,
            request_timeout_s: s.request_timeout,
            metrics: collect.then(|| Metrics {
                url: s.metrics_url.clone(),
                interval_ms: s.metrics_interval_ms.unwrap_or(d.metrics_interval_ms).max(1),
            }),
        },
        batch_sizes,
        load,
        latency_limit_ms,
        binary_search: s.binary_search.unwrap_or(false),
        input: Input {
            data,
            shapes,
            shared_memory,
            output_shared_memory_size: s.output_shared_memory_size,
            string_length: s.string_length.unwrap_or(crate::input::DEFAULT_STRING_LENGTH),
            string_data: s.string_data.clone(),
        },
        measurement: Measurement {
            mode,
            stop_when,
            interval_ms: s.measurement_interval_ms.unwrap_or(d.measurement_interval_ms),
            request_count: s.measurement_request_count.unwrap_or(d.measurement_request_count),
            stability_percentage: s.stability_percentage.unwrap_or(d.stability_percentage),
            max_trials: s.max_trials.unwrap_or(d.max_trials),
            percentile: s.percentile,
            total_requests: s.request_count.filter(|&n| n > 0),
            warmup_requests: s.warmup_request_count.unwrap_or(d.warmup_request_count),
        },
        output: Output {
            dir: out,
            latency_report_file: s.latency_report_file.clone(),
            verbose_csv: s.verbose_csv.unwrap_or(false),
            profile_export_file: s.profile_export_file.clone(),
            verbose: s.verbose.unwrap_or(0),
            no_closing_report: false,
        },
        trace: s.trace.clone().unwrap_or_default(),
        sequences: sequences(s, d)?,
        validate_outputs: s.validate_outputs.unwrap_or(false),
        bls_composing_models: Vec::new(),
    };
    sweep.validate(target)?;
    Ok(sweep)
}

/// The default results folder of a sweep: results/<name>-<timestamp>/.
pub fn default_out(name: &str) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    PathBuf::from("results").join(format!("{name}-{stamp}"))
}
