//! What a user said about one sweep, before defaults: every field optional. A scenario's
//! `[offline]` / `[online]` sections (and their profile overrides) are `Settings`, and so are the
//! `offline`, `online` and `profile` command lines once clap has parsed them. [`resolve`] fills the
//! rest from [`defaults`](super::defaults) and checks the result.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::generative::{self, GenerativeSettings};
use super::layers::overlay;
use super::{
    defaults, validate, Call, Distribution, Header, Input, Levels, Load, Measurement, Metrics, Output, Periodic,
    PlanError, Protocol, Sequences, StopWhen, Sweep, SweepKind, Target, TensorFormat, TraceSetting, WindowKind,
};
use crate::client::shm::SharedMemoryKind;
use crate::client::tls::TlsOptions;
use crate::input::{InputData, ShapeOverride};

/// One sweep's settings, in six sections; scenario keys are the sections' field names, side by
/// side (the sections are flattened). Unknown keys are an error. Each section is also a group of
/// command-line flags: a field's doc is its help, its `#[arg]` its flag and parser. Values are
/// typed where they are read (flag or TOML key), through the type's `FromStr`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "toml::Table")]
pub struct Settings {
    #[serde(flatten)]
    pub call: CallSettings,
    #[serde(flatten)]
    pub load: LoadSettings,
    #[serde(flatten)]
    pub input: InputSettings,
    #[serde(flatten)]
    pub measurement: MeasurementSettings,
    #[serde(flatten)]
    pub output: OutputSettings,
    #[serde(flatten)]
    pub generative: GenerativeSettings,
}

/// How requests are sent and what is scraped beside them.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallSettings {
    /// Protocol: http or grpc.
    #[arg(short = 'i', long = "protocol")]
    #[serde(default, with = "text")]
    pub protocol: Option<Protocol>,
    /// Extra HTTP header / gRPC metadata, "Name: value" (repeatable).
    #[arg(short = 'H')]
    pub headers: Option<Vec<String>>,
    /// gRPC: a request parameter sent with every inference request, NAME:VALUE:TYPE with TYPE
    /// int, bool or string (repeatable; a later one of the same name wins).
    #[arg(long = "request-parameter", value_name = "name:value:type")]
    pub request_parameters: Option<Vec<String>>,
    /// Seconds any call may wait for its answer; one that waits longer fails (counted as a
    /// timeout), and when nothing is answered for that long the run ends with exit 3.
    #[arg(long = "request-timeout", value_name = "SECS")]
    pub request_timeout: Option<f64>,
    /// Seconds the run waits on a silent server before it ends with exit 3: the start-up's
    /// calls (metadata, config, the first request) share this one deadline, and a load ends
    /// once its requests in flight have none answered for this long (default 120).
    #[arg(long = "stall-timeout", value_name = "SECS")]
    pub stall_timeout: Option<f64>,
    /// Send requests over gRPC `ModelStreamInfer` streams (needs `-i grpc`).
    #[arg(long = "streaming", num_args = 0, default_missing_value = "true")]
    pub streaming: Option<bool>,
    /// Asynchronous calls or not (perf_analyzer's `-a` / `--sync`, mapped in `cli::pa_compat`).
    #[arg(skip)]
    pub asynchronous: Option<bool>,
    /// Client worker threads, at most one per core (default: one per 16 concurrent requests
    /// against a remote server; every core with the bundled server).
    #[arg(long = "max-threads", value_parser = pa_number::<usize>("--max-threads"))]
    pub max_threads: Option<usize>,
    /// Scrape the server's GPU metrics during each point and add them to the CSV.
    #[arg(long = "collect-metrics", num_args = 0, default_missing_value = "true")]
    pub collect_metrics: Option<bool>,
    /// Metrics endpoint (default: localhost:8002/metrics, or the bundled server's).
    #[arg(long = "metrics-url")]
    pub metrics_url: Option<String>,
    /// Scrape interval in ms.
    #[arg(long = "metrics-interval")]
    pub metrics_interval_ms: Option<u64>,
    /// perf_analyzer's `--ssl-*` and `--grpc-compression-algorithm` (flags: `cli::tls`).
    #[arg(skip)]
    pub tls: Option<TlsOptions>,
    /// HTTP: send input tensors as binary data or JSON.
    #[arg(long = "input-tensor-format", value_name = "binary|json", value_parser = tensor_format("--input-tensor-format"))]
    #[serde(default, with = "text")]
    pub input_tensor_format: Option<TensorFormat>,
    /// HTTP: ask for output tensors as binary data or JSON.
    #[arg(long = "output-tensor-format", value_name = "binary|json", value_parser = tensor_format("--output-tensor-format"))]
    #[serde(default, with = "text")]
    pub output_tensor_format: Option<TensorFormat>,
    /// Server trace settings (perf_analyzer's `--trace-*` flags, mapped in `cli::pa_compat`).
    #[arg(skip)]
    pub trace: Option<Vec<TraceSetting>>,
    /// This section's settings used as given ([`Plain`]).
    #[command(flatten)]
    #[serde(flatten)]
    pub plain: PlainCall,
}

/// The load: batch sizes, and closed-loop concurrencies or an open-loop schedule.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSettings {
    /// Batch sizes: a list 1,8,16 or a range 1..64:8.
    #[arg(long = "batch-sizes", value_parser = levels("--batch-sizes"))]
    pub batch_sizes: Option<Levels>,
    /// Batch size of each request; the same as `batch_sizes` with one value.
    #[arg(short = 'b', long = "batch-size", allow_negative_numbers = true, value_parser = pa_batch_size)]
    pub batch: Option<u64>,
    /// Closed loop: concurrencies A..B (step A), A..B:S, or a list 8,16,64.
    #[arg(long = "concurrency", value_parser = levels("--concurrency"))]
    pub concurrency: Option<Levels>,
    /// Open loop: start:end:step request rates, per second.
    #[arg(long = "request-rate-range", value_name = "start:end:step")]
    #[serde(default, with = "text")]
    pub request_rate: Option<RateRange>,
    /// Open-loop gaps: constant or poisson.
    #[arg(long = "request-distribution")]
    #[serde(default, with = "text")]
    pub request_distribution: Option<Distribution>,
    /// Seed of the Poisson schedule.
    #[arg(long = "seed")]
    pub seed: Option<u64>,
    /// Open loop from a trace: one interval in µs per line, cycled.
    #[arg(long = "request-intervals")]
    pub request_intervals: Option<PathBuf>,
    /// Latency limit in ms: stop the sweep once exceeded (0: none).
    #[arg(short = 'l', long = "latency-threshold", value_parser = pa_number::<f64>("-l"))]
    pub latency_threshold_ms: Option<f64>,
    /// Search the range for the largest value under -l.
    #[arg(long = "binary-search", num_args = 0, default_missing_value = "true")]
    pub binary_search: Option<bool>,
    /// perf_analyzer's periodic concurrency (`--periodic-concurrency-range` with
    /// `--request-period`, mapped and checked in `cli::pa_compat`).
    #[arg(skip)]
    pub periodic_concurrency: Option<Periodic>,
    /// Ramps and rate series: how each level changes over time.
    #[command(flatten)]
    #[serde(flatten)]
    pub shape: super::shape::Shape,
    /// This section's settings used as given ([`Plain`]).
    #[command(flatten)]
    #[serde(flatten)]
    pub plain: PlainLoad,
}

/// What each request carries: tensor values and shapes, where they travel, and sequences.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InputSettings {
    /// Per-item shape of a variable-size input: NAME:d1,d2 (repeatable).
    #[arg(long = "shape")]
    pub shapes: Option<Vec<String>>,
    /// Input values: zero, random, a perf_analyzer JSON file or a directory of raw files
    /// (repeatable: the files' steps are sent in turn); a scenario may give one or a list.
    #[arg(long = "input-data")]
    #[serde(default, with = "crate::input::one_or_many::option")]
    pub input_data: Option<Vec<String>>,
    /// Where tensors travel: none, system or cuda shared memory.
    #[arg(long = "shared-memory")]
    pub shared_memory: Option<SharedMemoryKind>,
    /// Bytes reserved per batch item for each output of unknown size with shared memory.
    #[arg(long = "output-shared-memory-size")]
    pub output_shared_memory_size: Option<u64>,
    /// Length of generated BYTES (string) elements.
    #[arg(long = "string-length")]
    pub string_length: Option<usize>,
    /// The value of every generated BYTES (string) element.
    #[arg(long = "string-data")]
    pub string_data: Option<String>,
    /// Sequence models: the base number of requests of a sequence (default 20; with
    /// --input-data streams, a stream's length unless given).
    #[arg(long = "sequence-length")]
    pub sequence_length: Option<u64>,
    /// Sequence models: each sequence's length varies within ± this percent (default 20).
    #[arg(long = "sequence-length-variation")]
    pub sequence_length_variation: Option<f64>,
    /// Sequence models: sequence ids start[:end] (end excluded; default 1, no end).
    #[arg(long = "sequence-id-range", value_name = "start[:end]")]
    pub sequence_id_range: Option<String>,
    /// Sequence models, open loop: sequences kept alive at once (default 4).
    #[arg(long = "num-of-sequences")]
    pub num_of_sequences: Option<u64>,
    /// Sequence models, open loop: at most one request of a sequence in flight.
    #[arg(long = "serial-sequences", num_args = 0, default_missing_value = "true")]
    pub serial_sequences: Option<bool>,
    /// This section's settings used as given ([`Plain`]).
    #[command(flatten)]
    #[serde(flatten)]
    pub plain: PlainInput,
}

/// How each point is measured and when it ends.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeasurementSettings {
    /// time_windows or count_windows.
    #[arg(long = "measurement-mode")]
    #[serde(default, with = "text")]
    pub measurement_mode: Option<WindowKind>,
    /// When a point ends: `stable` (three windows within -s, perf_analyzer's rule) or
    /// `ci=P%[,max=T]` (95% intervals of throughput, p50 and p99 within ±P%, at most T).
    #[arg(long = "stop-when")]
    #[serde(default, with = "text")]
    pub stop_when: Option<StopWhen>,
    /// Window length in ms (time_windows).
    #[arg(short = 'p', long = "measurement-interval", value_parser = pa_number::<u64>("-p"))]
    pub measurement_interval_ms: Option<u64>,
    /// Requests per window (count_windows).
    #[arg(long = "measurement-request-count", value_parser = pa_number::<u64>("--measurement-request-count"))]
    pub measurement_request_count: Option<u64>,
    /// Measure exactly this many requests per point (one window, no stability check).
    #[arg(long = "request-count", value_parser = pa_number::<u64>("--request-count"))]
    pub request_count: Option<u64>,
    /// Requests sent before measuring, not counted.
    #[arg(long = "warmup-request-count")]
    pub warmup_request_count: Option<u64>,
    /// Windows agree when within this percentage.
    #[arg(short = 's', long = "stability-percentage", value_parser = pa_number::<f64>("-s"))]
    pub stability_percentage: Option<f64>,
    /// Most windows measured per point.
    #[arg(short = 'r', long = "max-trials", value_parser = pa_number::<usize>("-r"))]
    pub max_trials: Option<usize>,
    /// Stabilise and threshold on this latency percentile instead of the average (-1: the
    /// average, as perf_analyzer reads it).
    #[arg(long = "percentile", allow_negative_numbers = true)]
    pub percentile: Option<f64>,
    /// Check every answer (the `accumulate` model's running sum, or validation_data): a
    /// mismatch counts as a failed request and the run exits non-zero.
    #[arg(long = "validate-outputs", num_args = 0, default_missing_value = "true")]
    pub validate_outputs: Option<bool>,
    /// This section's settings used as given ([`Plain`]).
    #[command(flatten)]
    #[serde(flatten)]
    pub plain: PlainMeasurement,
}

/// What is written, and where.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputSettings {
    /// Results folder (offline and online: results/<model>-<kind>-<timestamp>/ unless given).
    #[arg(long = "out", alias = "artifact-dir")]
    pub out: Option<PathBuf>,
    /// CSV report (perf_analyzer's format).
    #[arg(short = 'f', long = "latency-report-file")]
    pub latency_report_file: Option<PathBuf>,
    /// Add Avg latency, request/response and response wait to the CSV.
    #[arg(long = "verbose-csv", num_args = 0, default_missing_value = "true")]
    pub verbose_csv: Option<bool>,
    /// Per-request timestamps as perf_analyzer's JSON.
    #[arg(long = "profile-export-file")]
    pub profile_export_file: Option<PathBuf>,
    /// How much is printed (perf_analyzer's `-v`, mapped in `cli::pa_compat`).
    #[arg(skip)]
    pub verbose: Option<u8>,
    /// This section's settings used as given ([`Plain`]).
    #[command(flatten)]
    #[serde(flatten)]
    pub plain: PlainOutput,
}

/// The settings a sweep uses as given, section by section: no default but the one its use
/// applies (named in its doc), no check but its parser's. Each section flattens its part (flags
/// and scenario keys beside the section's own), and the plan carries the parts as they are
/// (`Sweep::plain`), so such a setting is its field here and the code that reads it, nothing
/// else. A setting that needs a kind's default or a check across settings is a field of its
/// section, resolved in [`resolve`] instead.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plain {
    #[serde(default, deserialize_with = "strict", skip_serializing_if = "is_unset")]
    pub call: PlainCall,
    #[serde(default, deserialize_with = "strict", skip_serializing_if = "is_unset")]
    pub load: PlainLoad,
    #[serde(default, deserialize_with = "strict", skip_serializing_if = "is_unset")]
    pub input: PlainInput,
    #[serde(default, deserialize_with = "strict", skip_serializing_if = "is_unset")]
    pub measurement: PlainMeasurement,
    #[serde(default, deserialize_with = "strict", skip_serializing_if = "is_unset")]
    pub output: PlainOutput,
}

impl Plain {
    /// The plain parts of `s`'s sections.
    fn of(s: &Settings) -> Plain {
        Plain {
            call: s.call.plain.clone(),
            load: s.load.plain.clone(),
            input: s.input.plain.clone(),
            measurement: s.measurement.plain.clone(),
            output: s.output.plain.clone(),
        }
    }

    pub fn is_empty(&self) -> bool {
        is_unset(self)
    }
}

/// The call settings used as given.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlainCall {}

/// The load settings used as given.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlainLoad {}

/// The input settings used as given.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlainInput {}

/// The measurement settings used as given.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlainMeasurement {}

/// The output settings used as given.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlainOutput {
    /// A row NAME=VALUE of report.md's configuration table (and report.toml's), saying what was
    /// measured, e.g. commit=4f2a1c (repeatable; default: none).
    #[arg(long = "label", value_name = "NAME=VALUE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<Label>>,
}

/// `--label NAME=VALUE` (in a file, that text).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Label {
    pub name: String,
    pub value: String,
}

impl std::str::FromStr for Label {
    type Err = String;
    fn from_str(text: &str) -> Result<Label, String> {
        let bad = || format!("bad --label '{text}': expected NAME=VALUE, e.g. commit=4f2a1c");
        let (name, value) = super::named_value(text, '=').ok_or_else(bad)?;
        Ok(Label { name, value })
    }
}

impl From<Label> for String {
    fn from(label: Label) -> String {
        format!("{}={}", label.name, label.value)
    }
}

impl TryFrom<String> for Label {
    type Error = String;
    fn try_from(text: String) -> Result<Label, String> {
        text.parse()
    }
}

fn is_unset<T: Default + PartialEq>(part: &T) -> bool {
    *part == T::default()
}

/// A plain part of a plan file, whose keys are all its own: a part is flattened into its
/// section, so it cannot refuse other keys itself; here, a key it does not write back is unknown.
fn strict<'de, D, T>(input: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Serialize + serde::de::DeserializeOwned,
{
    use serde::de::Error;
    let keys = toml::Table::deserialize(input)?;
    let part: T = toml::Value::Table(keys.clone()).try_into().map_err(D::Error::custom)?;
    let known = match toml::Value::try_from(&part) {
        Ok(toml::Value::Table(known)) => known,
        other => return Err(D::Error::custom(format!("settings are not a table: {other:?}"))),
    };
    match keys.keys().find(|key| !known.contains_key(*key)) {
        Some(key) => Err(D::Error::custom(format!("unknown field `{key}`"))),
        None => Ok(part),
    }
}

impl Settings {
    /// `self` with every key `over` sets replaced ([`overlay`]).
    pub fn merged(&self, over: &Settings) -> Settings {
        overlay(self, over)
    }
}

/// The sections of a table of keys; a key no section knows is an error naming it.
impl TryFrom<toml::Table> for Settings {
    type Error = String;
    fn try_from(keys: toml::Table) -> Result<Settings, String> {
        fn section<T: serde::de::DeserializeOwned>(keys: &toml::Table) -> Result<T, String> {
            toml::Value::Table(keys.clone()).try_into().map_err(|e: toml::de::Error| e.message().to_string())
        }
        let settings = Settings {
            call: section(&keys)?,
            load: section(&keys)?,
            input: section(&keys)?,
            measurement: section(&keys)?,
            output: section(&keys)?,
            generative: section(&keys)?,
        };
        // Every key a section took comes back when the settings are written out again.
        let known = match toml::Value::try_from(&settings) {
            Ok(toml::Value::Table(known)) => known,
            other => return Err(format!("settings are not a table: {other:?}")),
        };
        match keys.keys().find(|key| !known.contains_key(*key)) {
            Some(key) => Err(format!("unknown field `{key}`")),
            None => Ok(settings),
        }
    }
}

/// serde through a type's text (`Display` / `FromStr`), so a scenario key is read as its flag is.
mod text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: Display, S: Serializer>(value: &Option<T>, out: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => out.collect_str(value),
            None => out.serialize_none(),
        }
    }

    pub fn deserialize<'de, T, D>(input: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let text = Option::<String>::deserialize(input)?;
        text.map(|t| t.parse().map_err(serde::de::Error::custom)).transpose()
    }
}

/// A clap parser for a perf_analyzer number: a value that does not parse is refused in
/// perf_analyzer's words ("Failed to parse -p. Invalid value provided: abc").
pub fn pa_number<T: std::str::FromStr + Clone + Send + Sync + 'static>(
    flag: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |text| text.trim().parse().map_err(|_| format!("Failed to parse {flag}. Invalid value provided: {text}"))
}

/// `-b`: a negative batch size reads as 0, which the plan refuses in perf_analyzer's words
/// ("The value must be > 0"), as it refuses 0.
pub fn pa_batch_size(text: &str) -> Result<u64, String> {
    match text.trim().parse::<i64>() {
        Ok(n) => Ok(n.max(0) as u64),
        Err(_) => Err(format!("Failed to parse -b. Invalid value provided: {text}")),
    }
}

/// A clap parser for concurrencies or batch sizes, naming the flag.
fn levels(flag: &'static str) -> impl Fn(&str) -> Result<Levels, String> + Clone + Send + Sync {
    move |text| text.parse().map_err(|e| format!("bad {flag} {e}"))
}

/// A clap parser for `--input-tensor-format` / `--output-tensor-format`, refusing in
/// perf_analyzer's words.
fn tensor_format(flag: &'static str) -> impl Fn(&str) -> Result<TensorFormat, String> + Clone + Send + Sync {
    move |text| text.parse().map_err(|e| format!("Failed to parse {flag}. {e}"))
}

/// `--request-rate-range start[:end[:step]]` requests per second, as given: [`resolve`] reads a
/// missing end as the start and a missing step as 1, and measures the start alone when the end
/// is below it (perf_analyzer's own checks read a missing end as 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateRange {
    pub start: f64,
    pub end: Option<f64>,
    pub step: Option<f64>,
}

impl std::str::FromStr for RateRange {
    type Err = String;
    fn from_str(text: &str) -> Result<RateRange, String> {
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() > 3 {
            return Err(format!("bad --request-rate-range '{text}': expected start:end:step"));
        }
        let num = |s: &str| {
            s.trim().parse::<f64>().map_err(|_| format!("bad --request-rate-range '{text}': '{s}' is not a number"))
        };
        let start = num(parts[0])?;
        let end = parts.get(1).map(|s| num(s)).transpose()?;
        let step = parts.get(2).map(|s| num(s)).transpose()?;
        if start <= 0.0 {
            return Err("Failed to parse --request-rate-range. The start of the search range must be > 0.".into());
        }
        Ok(RateRange { start, end, step })
    }
}

impl std::fmt::Display for RateRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.start)?;
        for part in [self.end, self.step].into_iter().flatten() {
            write!(f, ":{part}")?;
        }
        Ok(())
    }
}

/// `--request-distribution`, read as perf_analyzer reads it.
impl std::str::FromStr for Distribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Distribution, String> {
        match s {
            "constant" => Ok(Distribution::Constant),
            "poisson" => Ok(Distribution::Poisson),
            // perf_analyzer's words, its spelling included.
            other => Err(format!(
                "Failed to parse --request-distribution. Unsupported type provided: '{other}'. Choices are 'posson' or 'constant'."
            )),
        }
    }
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Distribution::Constant => "constant",
            Distribution::Poisson => "poisson",
        })
    }
}

/// The sequence settings of a sweep, checked.
fn sequences(s: &Settings, d: &defaults::Defaults) -> Result<Sequences, PlanError> {
    validate::check_sequence_length(s.input.sequence_length)?;
    let length = s.input.sequence_length.unwrap_or(d.sequence_length);
    let variation = s.input.sequence_length_variation.unwrap_or(d.sequence_length_variation);
    validate::check_sequence_length_variation(variation)?;
    let (id_start, id_end) = match &s.input.sequence_id_range {
        Some(text) => validate::parse_id_range(text)?,
        None => (d.sequence_id_start, None),
    };
    validate::check_id_range_holds(id_start, id_end)?;
    validate::check_num_of_sequences(s.input.num_of_sequences)?;
    let count = s.input.num_of_sequences.unwrap_or(d.num_of_sequences);
    Ok(Sequences {
        length,
        length_given: s.input.sequence_length.is_some(),
        length_variation_pct: variation,
        // perf_analyzer takes sequence id 0 (no sequence) as its default start, 1.
        id_start: id_start.max(1),
        id_end,
        count,
        serial: s.input.serial_sequences.unwrap_or(false),
    })
}

/// Fills `s` from the defaults of `kind` into a checked sweep against `target`.
pub fn resolve(kind: SweepKind, s: &Settings, target: &Target) -> Result<Sweep, PlanError> {
    let d = defaults::of(kind);
    let generative =
        generative::resolve(&s.generative, s.measurement.request_count, s.measurement.warmup_request_count)?;
    if let Some(g) = &generative {
        let one_prompt =
            s.load.batch_sizes.as_ref().is_none_or(|b| b.values(1) == [1]) && s.load.batch.is_none_or(|b| b == 1);
        let tensor_settings = [
            (s.load.periodic_concurrency.is_some(), "--periodic-concurrency-range"),
            (s.load.request_intervals.is_some(), "--request-intervals (replay a mooncake trace with --input-file)"),
            (s.load.latency_threshold_ms.is_some_and(|l| l > 0.0), "-l"),
            (s.load.binary_search == Some(true), "--binary-search"),
            (s.input.input_data.is_some(), "--input-data (prompts come from --input-file)"),
            (s.input.shared_memory.is_some_and(|m| m != SharedMemoryKind::None), "--shared-memory"),
        ];
        validate::check_generative(kind, g.endpoint_type, s.call.protocol, one_prompt, &tensor_settings)?;
        let open = s.load.request_rate.is_some() || s.load.shape.request_rate_series.is_some();
        validate::check_over_saturation(g.over_saturation.is_some(), open)?;
    }
    let protocol: Protocol = match (s.call.protocol, &generative) {
        (Some(protocol), _) => protocol,
        (None, Some(g)) if g.endpoint_type == generative::EndpointType::Kserve => Protocol::Grpc,
        (None, Some(_)) => Protocol::Http,
        (None, None) => d.protocol.parse().expect("the default protocol parses"),
    };
    validate::check_batch(s.load.batch_sizes.is_some(), s.load.batch)?;
    let batch_sizes = match (&s.load.batch_sizes, s.load.batch) {
        (Some(levels), _) => levels.clone(),
        (None, Some(b)) => Levels::one(b),
        (None, None) => d.batch_sizes.parse().expect("default batch sizes parse"),
    };
    validate::check_one_load_mode(&[
        s.load.periodic_concurrency.is_some(),
        s.load.concurrency.is_some(),
        s.load.request_rate.is_some(),
        s.load.request_intervals.is_some(),
    ])?;
    let load = match (&s.load.concurrency, &s.load.request_rate, &s.load.request_intervals) {
        _ if s.load.periodic_concurrency.is_some() => {
            Load::Periodic(s.load.periodic_concurrency.expect("checked above"))
        }
        (_, Some(range), _) => {
            let RateRange { start, end, step } = *range;
            let (end, step) = (end.unwrap_or(start), step.unwrap_or(1.0));
            let distribution = match s.load.request_distribution {
                Some(distribution) => distribution,
                None => d.request_distribution.parse().map_err(validate::unparsed)?,
            };
            // perf_analyzer measures the start and steps on while at most the end: an end below
            // the start measures the start alone.
            Load::RequestRate { start, end: end.max(start), step, distribution, seed: s.load.seed.unwrap_or(d.seed) }
        }
        (_, _, Some(path)) => Load::Trace { intervals: path.clone() },
        (levels, _, _) => Load::Concurrency {
            levels: levels.clone().unwrap_or_else(|| d.concurrency.parse().expect("default concurrency parses")),
        },
    };
    validate::check_offline_load(kind, &load)?;
    validate::check_shape(&s.load.shape, &load)?;
    validate::check_latency_threshold(s.load.latency_threshold_ms)?;
    let latency_limit_ms = s.load.latency_threshold_ms.filter(|l| *l > 0.0);
    let shared_memory: SharedMemoryKind = match s.input.shared_memory {
        Some(kind) => kind,
        None => d.shared_memory.parse().map_err(validate::unparsed)?,
    };
    let data = match s.input.input_data.as_deref() {
        Some(texts) if !texts.is_empty() => texts.iter().map(String::as_str).collect(),
        _ => vec![d.input_data],
    }
    .into_iter()
    .map(|t| t.parse::<InputData>().map_err(validate::unparsed))
    .collect::<Result<Vec<_>, _>>()?;
    let shapes = s
        .input
        .shapes
        .iter()
        .flatten()
        .map(|t| t.parse::<ShapeOverride>().map_err(validate::unparsed))
        .collect::<Result<Vec<_>, _>>()?;
    let headers = s
        .call
        .headers
        .iter()
        .flatten()
        .map(|h| h.parse::<Header>().map_err(validate::unparsed))
        .collect::<Result<Vec<_>, _>>()?;
    let request_parameters =
        crate::client::parse_request_parameters(s.call.request_parameters.as_deref().unwrap_or_default())
            .map_err(validate::unparsed)?;
    let tls = s.call.tls.clone().unwrap_or_default();
    validate::check_tls(&tls)?;
    validate::check_request_timeout(s.call.request_timeout)?;
    validate::check_stall_timeout(s.call.stall_timeout)?;
    let collect = s.call.collect_metrics.unwrap_or(false);
    validate::check_metrics(s.call.metrics_url.is_some(), collect, target)?;
    let mode: WindowKind = s.measurement.measurement_mode.unwrap_or(d.window);
    let stop_when: StopWhen = match s.measurement.stop_when {
        Some(stop_when) => stop_when,
        None => d.stop_when.parse().map_err(validate::unparsed)?,
    };
    let out = match (kind, &s.output.out) {
        (SweepKind::Profile, out) => out.clone(),
        (_, Some(out)) => Some(out.clone()),
        (_, None) => None,
    };
    let sweep = Sweep {
        kind,
        protocol,
        call: Call {
            headers,
            streaming: s.call.streaming.unwrap_or(false),
            asynchronous: s.call.asynchronous,
            max_threads: s.call.max_threads,
            tls,
            input_tensor_format: s.call.input_tensor_format.unwrap_or_default(),
            output_tensor_format: s.call.output_tensor_format.unwrap_or_default(),
            request_parameters,
            request_timeout_s: s.call.request_timeout,
            stall_timeout_s: s.call.stall_timeout,
            metrics: collect.then(|| Metrics {
                url: s.call.metrics_url.clone(),
                interval_ms: s.call.metrics_interval_ms.unwrap_or(d.metrics_interval_ms).max(1),
            }),
        },
        batch_sizes,
        load,
        latency_limit_ms,
        binary_search: s.load.binary_search.unwrap_or(false),
        input: Input {
            data,
            shapes,
            shared_memory,
            output_shared_memory_size: s.input.output_shared_memory_size,
            string_length: s.input.string_length.unwrap_or(crate::input::DEFAULT_STRING_LENGTH),
            string_data: s.input.string_data.clone(),
        },
        measurement: Measurement {
            mode,
            stop_when,
            interval_ms: s.measurement.measurement_interval_ms.unwrap_or(d.measurement_interval_ms),
            request_count: s.measurement.measurement_request_count.unwrap_or(d.measurement_request_count),
            stability_percentage: s.measurement.stability_percentage.unwrap_or(d.stability_percentage),
            max_trials: s.measurement.max_trials.unwrap_or(d.max_trials),
            // perf_analyzer's -1: no percentile (stabilise on the average).
            percentile: s.measurement.percentile.filter(|&p| p != -1.0),
            total_requests: s.measurement.request_count.filter(|&n| n > 0),
            warmup_requests: s.measurement.warmup_request_count.unwrap_or(d.warmup_request_count),
        },
        output: Output {
            dir: out,
            latency_report_file: s.output.latency_report_file.clone(),
            verbose_csv: s.output.verbose_csv.unwrap_or(false),
            profile_export_file: s.output.profile_export_file.clone(),
            verbose: s.output.verbose.unwrap_or(0),
            no_closing_report: false,
        },
        trace: s.call.trace.clone().unwrap_or_default(),
        sequences: sequences(s, d)?,
        validate_outputs: s.measurement.validate_outputs.unwrap_or(false),
        bls_composing_models: Vec::new(),
        plain: Plain::of(s),
        generative,
        shape: s.load.shape.clone(),
    };
    sweep.validate(target)?;
    Ok(sweep)
}

/// The default results folder of a sweep: results/<name>-<timestamp>/.
pub fn default_out(name: &str) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    PathBuf::from("results").join(format!("{name}-{stamp}"))
}
