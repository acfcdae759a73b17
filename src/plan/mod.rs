//! The one input of a run: a [`Plan`], a plain typed value. `profile`, `offline`, `online` and
//! `run SCENARIO.toml` all resolve into one; `--print-plan` prints it as TOML, and
//! `perfbench run PLAN.toml` runs it back. Resolution is pure: it starts nothing and reads only
//! files named on the command line; every check happens here (see [`Plan::validate`]), so a bad
//! combination exits 2 before a server starts or a socket opens.

pub mod defaults;
pub mod generative;
pub mod layers;
pub mod levels;
pub mod scenario;
pub mod search;
pub mod search_resolve;
pub mod settings;
pub mod shape;
pub mod shard;
pub(crate) mod validate;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use levels::{Levels, LevelsError};
pub use settings::Settings;
pub use shard::Shard;

use crate::client::shm::SharedMemoryKind;
use crate::client::tls::TlsOptions;
use crate::client::RequestParameter;
use crate::gate::thresholds::GateThresholds;
use crate::input::{InputData, ShapeOverride};

/// Upper bound of an open-ended concurrency sweep (`--concurrency-range 4:0 -l 10`), so a
/// server that never exceeds the limit still ends the run.
pub const MAX_OPEN_CONCURRENCY: u64 = 4096;

/// The plan a sweep's results folder keeps beside its rows, for `run --resume DIR`.
pub const PLAN_FILE: &str = "plan.toml";

/// A whole run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Go on with an interrupted run (`run --resume DIR`): each sweep keeps the rows already in
    /// its folder's report.csv and measures only the points that are missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resume: bool,
    pub target: Target,
    pub model: Model,
    pub sweeps: Vec<Sweep>,
    /// Compare each sweep's report.csv with a baseline run and exit 1 on a regression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
    /// This process is one shard of a run spread over machines (`--shard K/N`, or MPI's or
    /// an Indexed Job's environment): each load point is split among the shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// Who is profiled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Target {
    /// The bundled server, started in this process on loopback ports (no `-u`).
    Embedded {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_repository: Option<PathBuf>,
    },
    /// A KServe v2 server at `url` (host:port).
    Remote { url: String },
    /// The bundled server, called directly without a network (`--service-kind inprocess`).
    InProcess {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_repository: Option<PathBuf>,
    },
}

/// The model, and for the embedded server optionally its config.pbtxt text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub name: String,
    /// Empty: the latest version.
    #[serde(default)]
    pub version: String,
    /// A model defined by its config.pbtxt text (scenarios), loaded into the embedded server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

/// The kind of sweep: what it prints and which defaults it starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SweepKind {
    /// perf_analyzer's run: its stdout report, `-f` CSV and profile export.
    Profile,
    /// Concurrency 1, a static batch per request, over batch sizes; a results folder.
    Offline,
    /// A fixed client batch over concurrencies, the server batching; a results folder.
    Online,
}

impl SweepKind {
    pub fn name(self) -> &'static str {
        match self {
            SweepKind::Profile => "profile",
            SweepKind::Offline => "offline",
            SweepKind::Online => "online",
        }
    }
}

/// The wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Grpc,
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Protocol, String> {
        // perf_analyzer reads the protocol case-insensitively and words the error this way.
        match s.to_ascii_lowercase().as_str() {
            "http" => Ok(Protocol::Http),
            "grpc" => Ok(Protocol::Grpc),
            _ => Err(format!("Failed to parse -i (protocol). The value should be either HTTP or gRPC, not '{s}'.")),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        })
    }
}

/// One sweep: batch sizes × load levels, measured and written the same way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    pub kind: SweepKind,
    pub protocol: Protocol,
    pub call: Call,
    pub batch_sizes: Levels,
    pub load: Load,
    /// `-l`: a linear sweep stops after the first point above it; the binary search's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_limit_ms: Option<f64>,
    #[serde(default)]
    pub binary_search: bool,
    pub input: Input,
    pub measurement: Measurement,
    pub output: Output,
    /// Server trace settings set through the trace extension before the sweep (`--trace-*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<TraceSetting>,
    /// How sequences are formed, used when the model has `sequence_batching`.
    #[serde(default)]
    pub sequences: Sequences,
    /// `--validate-outputs`: check each answer (the `accumulate` model's running sum, or
    /// `validation_data`); a mismatch is a failed request and the run exits non-zero.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub validate_outputs: bool,
    /// `--bls-composing-models`: models the (BLS) model calls itself; their server statistics
    /// are read and reported as an ensemble's composing models are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bls_composing_models: Vec<ModelRef>,
    /// The settings used as given, by section ([`settings::Plain`]).
    #[serde(default, skip_serializing_if = "settings::Plain::is_empty")]
    pub plain: settings::Plain,
    /// A generative sweep (`--endpoint-type`): each load level profiles an OpenAI, generate or
    /// KServe streaming endpoint ([`crate::genai`]) instead of sending tensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generative: Option<generative::Generative>,
    /// How each load level changes over time (a ramp, a rate series); empty: steady.
    #[serde(default, skip_serializing_if = "shape::Shape::is_empty")]
    pub shape: shape::Shape,
}

/// A model by name and version ("" = the latest), as `--bls-composing-models` lists them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
}

/// perf_analyzer's sequence settings, for models with a sequence batcher.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sequences {
    /// `--sequence-length`: the base number of requests of a sequence.
    pub length: u64,
    /// The length was given: with `--input-data` streams it then wins over a stream's length.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub length_given: bool,
    /// `--sequence-length-variation`: each sequence's length is drawn within ± this percent.
    pub length_variation_pct: f64,
    /// `--sequence-id-range start[:end]`: ids from `id_start`, below `id_end` when given.
    pub id_start: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_end: Option<u64>,
    /// `--num-of-sequences`: the sequences an open loop keeps alive at once.
    pub count: u64,
    /// `--serial-sequences`: in an open loop, at most one request of a sequence in flight.
    #[serde(default)]
    pub serial: bool,
}

impl Default for Sequences {
    fn default() -> Sequences {
        let d = &defaults::PROFILE;
        Sequences {
            length: d.sequence_length,
            length_given: false,
            length_variation_pct: d.sequence_length_variation,
            id_start: d.sequence_id_start,
            id_end: None,
            count: d.num_of_sequences,
            serial: false,
        }
    }
}

impl Sequences {
    /// How many ids the range holds (perf_analyzer's `UINT32_MAX` when it has no end).
    pub fn id_range(&self) -> u64 {
        self.id_end.map_or(u32::MAX as u64, |end| end - self.id_start)
    }
}

/// One trace setting, as the trace extension takes it: a key and its values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSetting {
    pub key: String,
    pub values: Vec<String>,
}

/// How requests are sent, and what is scraped beside them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// Extra HTTP headers / gRPC metadata.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<Header>,
    /// gRPC `ModelStreamInfer` streams.
    #[serde(default)]
    pub streaming: bool,
    /// perf_analyzer's `-a` (true) or `--sync` (false); unset, its default: asynchronous for
    /// streaming and sequence models. The engine is always asynchronous; this is what the
    /// settings block prints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asynchronous: Option<bool>,
    /// Client worker threads (default: see `run::worker_threads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<usize>,
    /// `--collect-metrics`: scrape GPU gauges while each point runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    /// HTTPS (for `https://` URLs) and gRPC TLS and compression.
    #[serde(default, skip_serializing_if = "TlsOptions::is_default")]
    pub tls: TlsOptions,
    /// HTTP tensors as binary data (perf_analyzer's default) or JSON (`--input-tensor-format`,
    /// `--output-tensor-format`).
    #[serde(default, skip_serializing_if = "TensorFormat::is_binary")]
    pub input_tensor_format: TensorFormat,
    #[serde(default, skip_serializing_if = "TensorFormat::is_binary")]
    pub output_tensor_format: TensorFormat,
    /// gRPC: `--request-parameter`s sent with every inference request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_parameters: Vec<RequestParameter>,
    /// `--request-timeout`: seconds any call waits for its answer (none: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_s: Option<f64>,
    /// `--stall-timeout`: seconds a silent server is waited on (none: [`STALL_TIMEOUT`]).
    ///
    /// [`STALL_TIMEOUT`]: crate::client::STALL_TIMEOUT
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_timeout_s: Option<f64>,
}

impl Call {
    /// `--request-timeout` as a duration.
    pub fn request_timeout(&self) -> Option<std::time::Duration> {
        self.request_timeout_s.map(std::time::Duration::from_secs_f64)
    }

    /// `--stall-timeout` as a duration, [`STALL_TIMEOUT`](crate::client::STALL_TIMEOUT) unless given.
    pub fn stall_timeout(&self) -> std::time::Duration {
        self.stall_timeout_s.map_or(crate::client::STALL_TIMEOUT, std::time::Duration::from_secs_f64)
    }
}

/// How HTTP requests carry tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TensorFormat {
    #[default]
    Binary,
    Json,
}

impl TensorFormat {
    pub fn is_binary(&self) -> bool {
        *self == TensorFormat::Binary
    }
}

impl FromStr for TensorFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<TensorFormat, String> {
        match s.to_ascii_lowercase().as_str() {
            "binary" => Ok(TensorFormat::Binary),
            "json" => Ok(TensorFormat::Json),
            _ => Err(format!("Unsupported type provided: '{s}'. The available options are 'binary' or 'json'.")),
        }
    }
}

impl fmt::Display for TensorFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TensorFormat::Binary => "binary",
            TensorFormat::Json => "json",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub name: String,
    pub value: String,
}

impl FromStr for Header {
    type Err = String;
    /// `-H 'Name: value'`.
    fn from_str(h: &str) -> Result<Header, String> {
        let (name, value) = named_value(h, ':').ok_or_else(|| format!("bad -H '{h}': expected 'Name: value'"))?;
        Ok(Header { name, value })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    /// The metrics endpoint; default: the embedded server's, or localhost:8002/metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub interval_ms: u64,
}

/// The load levels of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Load {
    /// Closed loop at each concurrency.
    Concurrency { levels: Levels },
    /// Open loop at start, start+step, … end requests per second.
    RequestRate { start: f64, end: f64, step: f64, distribution: Distribution, seed: u64 },
    /// Open loop from a trace of intervals in µs, one per line, cycled.
    Trace { intervals: PathBuf },
    /// perf_analyzer's periodic concurrency: `start` requests, then `step` more each time every
    /// request of the latest batch has had `request_period` responses, `end` in all.
    Periodic(Periodic),
}

/// `--periodic-concurrency-range start:end:step` with `--request-period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Periodic {
    pub start: u64,
    pub end: u64,
    pub step: u64,
    pub request_period: u64,
}

/// Open-loop gaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    Constant,
    Poisson,
}

/// What each request carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Each `--input-data`, in order; a plan may write one as a plain string.
    #[serde(with = "crate::input::one_or_many")]
    pub data: Vec<InputData>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<ShapeOverride>,
    pub shared_memory: SharedMemoryKind,
    /// Bytes per output of unknown size. Unset: at least the default, grown to the size of the
    /// first answer; set: exactly this, as perf_analyzer does (so a too-small value fails there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_shared_memory_size: Option<u64>,
    /// Length of generated BYTES elements.
    pub string_length: usize,
    /// The value of every generated BYTES element (`--string-data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_data: Option<String>,
}

/// What ends a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    TimeWindows,
    CountWindows,
}

impl fmt::Display for WindowKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WindowKind::TimeWindows => "time_windows",
            WindowKind::CountWindows => "count_windows",
        })
    }
}

impl FromStr for WindowKind {
    type Err = String;
    fn from_str(s: &str) -> Result<WindowKind, String> {
        match s {
            "time_windows" => Ok(WindowKind::TimeWindows),
            "count_windows" => Ok(WindowKind::CountWindows),
            other => Err(format!(
                "Failed to parse --measurement-mode. Unsupported type provided: '{other}'. \
                 The available options are 'time_windows' or 'count_windows'."
            )),
        }
    }
}

/// When a point ends (`--stop-when`, scenario key `stop_when`).
///
/// - `stable`: perf_analyzer's rule, three windows in a row within `-s` percent, at most `-r`
///   windows.
/// - `ci=P%[,max=T]`: once the 95% confidence intervals of throughput, p50 and p99 are each
///   within ±P% of their value (and p99 rests on ≥ 1,000 requests), or after T (default 10 s;
///   `500ms`, `20s`, `2m`). A point that runs out of time is flagged unstable. When the sweep's
///   points are known in advance they share `points × T` (`run::sweep::TimeBank`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum StopWhen {
    Stable,
    Ci { half_width_pct: f64, max_ms: u64 },
}

impl StopWhen {
    /// The time limit of `ci=` when it names none.
    pub const DEFAULT_MAX_MS: u64 = 10_000;
}

impl fmt::Display for StopWhen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopWhen::Stable => f.write_str("stable"),
            StopWhen::Ci { half_width_pct, max_ms } if max_ms % 1000 == 0 => {
                write!(f, "ci={half_width_pct}%,max={}s", max_ms / 1000)
            }
            StopWhen::Ci { half_width_pct, max_ms } => write!(f, "ci={half_width_pct}%,max={max_ms}ms"),
        }
    }
}

impl FromStr for StopWhen {
    type Err = String;
    fn from_str(text: &str) -> Result<StopWhen, String> {
        let bad = |why: &str| format!("bad --stop-when '{text}': {why}");
        let t = text.trim();
        if t == "stable" {
            return Ok(StopWhen::Stable);
        }
        let mut parts = t.split(',').map(str::trim);
        let Some(pct) = parts.next().and_then(|p| p.strip_prefix("ci=")) else {
            return Err(bad("expected 'stable' or 'ci=P%[,max=T]', e.g. ci=2% or ci=5%,max=30s"));
        };
        let half_width_pct: f64 = match pct.trim_end_matches('%').trim().parse() {
            Ok(p) if p > 0.0 && p < 100.0 => p,
            _ => return Err(bad("the interval width must be a percentage between 0 and 100")),
        };
        let mut max_ms = StopWhen::DEFAULT_MAX_MS;
        for part in parts {
            let Some(duration) = part.strip_prefix("max=") else {
                return Err(bad(&format!("unknown part '{part}' (expected max=T)")));
            };
            max_ms = parse_duration_ms(duration).ok_or_else(|| bad("max must be a time such as 500ms, 20s or 2m"))?;
        }
        Ok(StopWhen::Ci { half_width_pct, max_ms })
    }
}

/// `500ms`, `20s`, `1.5m` → milliseconds (> 0).
fn parse_duration_ms(text: &str) -> Option<u64> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        return None;
    };
    let ms = number.trim().parse::<f64>().ok()? * scale;
    (ms.is_finite() && ms >= 1.0).then(|| ms.round() as u64)
}

impl From<StopWhen> for String {
    fn from(s: StopWhen) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for StopWhen {
    type Error = String;
    fn try_from(s: String) -> Result<StopWhen, String> {
        s.parse()
    }
}

/// How each point is measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    pub mode: WindowKind,
    /// What ends a point; a plan without it uses perf_analyzer's rule.
    #[serde(default = "stable")]
    pub stop_when: StopWhen,
    pub interval_ms: u64,
    pub request_count: u64,
    pub stability_percentage: f64,
    pub max_trials: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentile: Option<f64>,
    /// `--request-count`: one window of exactly this many requests per point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_requests: Option<u64>,
    /// Sent once per batch size before its first point, not measured.
    pub warmup_requests: u64,
}

fn stable() -> StopWhen {
    StopWhen::Stable
}

/// Where results go.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// The results folder: perf_analyzer.csv and report.csv (a row appended per point),
    /// report.md and plots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// `-f`: perf_analyzer's CSV.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_report_file: Option<PathBuf>,
    #[serde(default)]
    pub verbose_csv: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_export_file: Option<PathBuf>,
    /// `-v`: print each measurement pass.
    #[serde(default)]
    pub verbose: u8,
    /// perf_analyzer's closing list and `-f` CSV are left out: perf_analyzer skips both whenever
    /// `--periodic-concurrency-range` is given, also when `-t` turns the run into a concurrency
    /// sweep.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_closing_report: bool,
}

/// `--gate BASELINE`: a baseline run folder (with one subfolder per sweep) or a report.csv.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub baseline: PathBuf,
    #[serde(default)]
    pub thresholds: GateThresholds,
}

/// What a TOML file given to `run` or `search` holds, told by its top-level keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A plan of sweeps (`sweeps`), as `--print-plan` of a sweep writes it.
    Plan,
    /// A search plan (`search` and `sweep`), as `search --print-plan` writes it.
    SearchPlan,
    /// Anything else is read as a scenario, whose parser names what is wrong.
    Scenario,
}

impl FileKind {
    pub fn of(text: &str) -> FileKind {
        match toml::from_str::<toml::Table>(text) {
            Ok(t) if t.contains_key("sweeps") => FileKind::Plan,
            Ok(t) if t.contains_key("sweep") && t.contains_key("search") => FileKind::SearchPlan,
            _ => FileKind::Scenario,
        }
    }
}

/// `NAME<sep>VALUE`, both trimmed, the name not empty.
pub(crate) fn named_value(text: &str, sep: char) -> Option<(String, String)> {
    let (name, value) = text.split_once(sep)?;
    (!name.trim().is_empty()).then(|| (name.trim().to_string(), value.trim().to_string()))
}

/// Bad input found while resolving or checking a plan: exit 2, nothing started.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("not supported: {0}")]
    NotSupported(String),
    #[error("{0}")]
    Invalid(String),
}

impl Plan {
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a plan is always representable as TOML")
    }

    /// What every shard of one run shares: the plan without its shard, results folders, resume
    /// flag or server address (each machine may reach the server by a name of its own), hashed
    /// ([`shard::identity`]). `merge` refuses shards whose identities differ.
    pub fn identity(&self) -> String {
        let mut same = Plan { shard: None, resume: false, gate: None, ..self.clone() };
        if let Target::Remote { url } = &mut same.target {
            url.clear();
        }
        for sweep in &mut same.sweeps {
            sweep.output.dir = None;
            sweep.output.latency_report_file = None;
            sweep.output.profile_export_file = None;
        }
        shard::identity(&same.to_toml())
    }

    /// This plan with every relative path joined to `base`, so that a copy kept in a results
    /// folder ([`PLAN_FILE`]) runs the same from any working directory.
    pub fn anchored(&self, base: &Path) -> Plan {
        let anchor = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        let mut plan = self.clone();
        if let Target::Embedded { model_repository: Some(p) } | Target::InProcess { model_repository: Some(p) } =
            &mut plan.target
        {
            anchor(p);
        }
        for output in plan.sweeps.iter_mut().map(|s| &mut s.output) {
            for path in [&mut output.dir, &mut output.latency_report_file, &mut output.profile_export_file] {
                path.iter_mut().for_each(anchor);
            }
        }
        if let Some(gate) = &mut plan.gate {
            anchor(&mut gate.baseline);
        }
        plan
    }
}

impl Sweep {
    /// The requests in flight at most, to size connection pools and worker threads.
    pub fn peak_concurrency(&self) -> u64 {
        match &self.load {
            Load::Concurrency { levels } => levels.max().unwrap_or(64),
            Load::Periodic(p) => p.end,
            _ => 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_through_toml() {
        let plan = example_plan();
        let text = plan.to_toml();
        assert!(text.contains("stop_when = \"ci=2.5%,max=1500ms\""), "{text}");
        assert!(text.starts_with("resume = true\n"), "{text}");
        assert_eq!(Plan::from_toml(&text).unwrap(), plan, "{text}");
    }

    #[test]
    fn an_anchored_plan_names_every_path_absolutely() {
        let mut plan = example_plan();
        plan.sweeps[0].output.latency_report_file = Some("/abs/pa.csv".into());
        let anchored = plan.anchored(Path::new("/work/here"));
        let output = &anchored.sweeps[0].output;
        assert_eq!(output.dir.as_deref(), Some(Path::new("/work/here/out")));
        assert_eq!(output.latency_report_file.as_deref(), Some(Path::new("/abs/pa.csv")));
        assert_eq!(anchored.gate.unwrap().baseline, Path::new("/work/here/base"));
    }

    fn example_plan() -> Plan {
        Plan {
            shard: None,
            resume: true,
            target: Target::Embedded { model_repository: None },
            model: Model { name: "identity".into(), version: String::new(), config: None },
            sweeps: vec![Sweep {
                kind: SweepKind::Online,
                protocol: Protocol::Grpc,
                call: Call {
                    headers: vec!["X-Key: v".parse().unwrap()],
                    streaming: true,
                    metrics: Some(Metrics { url: None, interval_ms: 1000 }),
                    ..Call::default()
                },
                batch_sizes: Levels::one(4),
                load: Load::Concurrency { levels: "8..64".parse().unwrap() },
                latency_limit_ms: None,
                binary_search: false,
                input: Input {
                    data: vec![InputData::Zero],
                    shapes: vec!["INPUT0:16".parse().unwrap()],
                    shared_memory: SharedMemoryKind::System,
                    output_shared_memory_size: Some(1024),
                    string_length: 8,
                    string_data: Some("abc".into()),
                },
                measurement: Measurement {
                    mode: WindowKind::CountWindows,
                    stop_when: StopWhen::Ci { half_width_pct: 2.5, max_ms: 1500 },
                    interval_ms: 5000,
                    request_count: 50,
                    stability_percentage: 10.0,
                    max_trials: 10,
                    percentile: Some(99.0),
                    total_requests: None,
                    warmup_requests: 10,
                },
                output: Output { dir: Some("out".into()), ..Output::default() },
                trace: vec![TraceSetting { key: "trace_level".into(), values: vec!["TIMESTAMPS".into()] }],
                sequences: Sequences {
                    length: 7,
                    length_given: true,
                    length_variation_pct: 0.0,
                    id_start: 100,
                    id_end: Some(200),
                    count: 9,
                    serial: true,
                },
                validate_outputs: true,
                bls_composing_models: Vec::new(),
                plain: Default::default(),
                generative: None,
                shape: shape::Shape { concurrency_ramp_duration: Some(4.0), ..Default::default() },
            }],
            gate: Some(Gate { baseline: "base".into(), thresholds: GateThresholds::default() }),
        }
    }

    #[test]
    fn stop_rules_parse_and_print_back() {
        for (text, rule) in [
            ("stable", StopWhen::Stable),
            ("ci=2%", StopWhen::Ci { half_width_pct: 2.0, max_ms: StopWhen::DEFAULT_MAX_MS }),
            ("ci=5%,max=30s", StopWhen::Ci { half_width_pct: 5.0, max_ms: 30_000 }),
            ("ci=0.5%, max=2m", StopWhen::Ci { half_width_pct: 0.5, max_ms: 120_000 }),
            ("ci=1,max=750ms", StopWhen::Ci { half_width_pct: 1.0, max_ms: 750 }),
        ] {
            assert_eq!(text.parse::<StopWhen>().unwrap(), rule, "{text}");
            assert_eq!(rule.to_string().parse::<StopWhen>().unwrap(), rule);
        }
        for bad in ["ci", "ci=0%", "ci=x", "ci=2%,max=5", "ci=2%,min=5s", "stabel"] {
            let err = bad.parse::<StopWhen>().unwrap_err();
            assert!(err.starts_with("bad --stop-when"), "{bad}: {err}");
        }
    }
}
