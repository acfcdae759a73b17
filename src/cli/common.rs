//! The flags `profile`, `offline`, `online` and `search` share: how requests are sent
//! ([`CallArgs`]), where to connect, what to send and how to measure ([`CommonArgs`]), and the
//! target they name.

use std::path::PathBuf;

use clap::Args;

use super::tls::TlsArgs;
use crate::plan::settings::Settings;
use crate::plan::{invalid, PlanError, Target};

/// How requests are sent and what is scraped beside them: the flags `profile` shares with the
/// `offline` and `online` sweeps, which hand them to every point unchanged.
#[derive(Args, Debug, Default, Clone)]
pub struct CallArgs {
    /// Extra HTTP header / gRPC metadata, "Name: value" (repeatable).
    #[arg(short = 'H')]
    pub headers: Vec<String>,
    /// Send requests over gRPC `ModelStreamInfer` streams (needs `-i grpc`).
    #[arg(long)]
    pub streaming: bool,
    /// Scrape the server's GPU metrics during each point and add them to the CSV.
    #[arg(long = "collect-metrics")]
    pub collect_metrics: bool,
    /// Metrics endpoint (default: localhost:8002/metrics, or the bundled server's).
    #[arg(long = "metrics-url")]
    pub metrics_url: Option<String>,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// gRPC: a request parameter sent with every inference request, NAME:VALUE:TYPE with TYPE
    /// int, bool or string (repeatable; a later one of the same name wins).
    #[arg(long = "request-parameter", value_name = "name:value:type")]
    pub request_parameters: Vec<String>,
    /// Seconds any call may wait for its answer; one that waits longer fails (counted as a
    /// timeout), and when nothing is answered for that long the run ends with exit 3.
    #[arg(long = "request-timeout", value_name = "SECS")]
    pub request_timeout: Option<f64>,
    /// HTTP: send input tensors as binary data or JSON.
    #[arg(long = "input-tensor-format", value_name = "binary|json")]
    pub input_tensor_format: Option<String>,
    /// HTTP: ask for output tensors as binary data or JSON.
    #[arg(long = "output-tensor-format", value_name = "binary|json")]
    pub output_tensor_format: Option<String>,
}

/// The flags `profile`, `offline` and `online` share: where to connect, what to send, how to
/// measure, and `--print-plan`.
#[derive(Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// Server address (host:port). Without it, the bundled server runs in-process.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    /// Protocol: http or grpc.
    #[arg(short = 'i', long = "protocol")]
    pub protocol: Option<String>,
    /// Per-item shape of a variable-size input: NAME:d1,d2 (repeatable).
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    /// Input values: zero, random, a perf_analyzer JSON file or a directory of raw files
    /// (repeatable: the files' steps are sent in turn).
    #[arg(long = "input-data")]
    pub input_data: Vec<String>,
    /// Where tensors travel: none, system or cuda shared memory.
    #[arg(long = "shared-memory")]
    pub shared_memory: Option<String>,
    /// Window length in ms (time_windows).
    #[arg(short = 'p', long = "measurement-interval", value_parser = pa_number::<u64>("-p"))]
    pub measurement_interval_ms: Option<u64>,
    /// time_windows or count_windows.
    #[arg(long = "measurement-mode")]
    pub measurement_mode: Option<String>,
    /// Requests per window (count_windows).
    #[arg(long = "measurement-request-count", value_parser = pa_number::<u64>("--measurement-request-count"))]
    pub measurement_request_count: Option<u64>,
    /// When a point ends: `stable` (three windows within -s, perf_analyzer's rule) or
    /// `ci=P%[,max=T]` (95% intervals of throughput, p50 and p99 within ±P%, at most T).
    #[arg(long = "stop-when")]
    pub stop_when: Option<String>,
    /// Windows agree when within this percentage.
    #[arg(short = 's', long = "stability-percentage", value_parser = pa_number::<f64>("-s"))]
    pub stability_percentage: Option<f64>,
    /// Most windows measured per point.
    #[arg(short = 'r', long = "max-trials", value_parser = pa_number::<usize>("-r"))]
    pub max_trials: Option<usize>,
    /// Stabilise and threshold on this latency percentile instead of the average.
    #[arg(long = "percentile", allow_negative_numbers = true)]
    pub percentile: Option<f64>,
    /// Requests sent before measuring, not counted.
    #[arg(long = "warmup-request-count")]
    pub warmup_request_count: Option<u64>,
    /// Client worker threads, at most one per core (default: one per 16 concurrent requests
    /// against a remote server; every core with the bundled server).
    #[arg(long = "max-threads", value_parser = pa_number::<usize>("--max-threads"))]
    pub max_threads: Option<usize>,
    /// Model repository of the bundled server (default: its model zoo).
    #[arg(long = "model-repository")]
    pub model_repository: Option<PathBuf>,
    /// Print the resolved plan as TOML and exit without running it.
    #[arg(long = "print-plan")]
    pub print_plan: bool,
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
    #[arg(long = "serial-sequences")]
    pub serial_sequences: bool,
    /// Check every answer (the `accumulate` model's running sum, or validation_data): a
    /// mismatch counts as a failed request and the run exits non-zero.
    #[arg(long = "validate-outputs")]
    pub validate_outputs: bool,
    #[command(flatten)]
    pub call: CallArgs,
}

impl CommonArgs {
    /// These flags as sweep settings.
    pub fn settings(&self) -> Settings {
        Settings {
            protocol: self.protocol.clone(),
            shapes: (!self.shapes.is_empty()).then(|| self.shapes.clone()),
            input_data: (!self.input_data.is_empty()).then(|| self.input_data.clone()),
            shared_memory: self.shared_memory.clone(),
            measurement_interval_ms: self.measurement_interval_ms,
            measurement_mode: self.measurement_mode.clone(),
            measurement_request_count: self.measurement_request_count,
            stop_when: self.stop_when.clone(),
            stability_percentage: self.stability_percentage,
            max_trials: self.max_trials,
            // perf_analyzer's -1: no percentile (stabilise on the average).
            percentile: self.percentile.filter(|&p| p != -1.0),
            warmup_request_count: self.warmup_request_count,
            max_threads: self.max_threads,
            headers: (!self.call.headers.is_empty()).then(|| self.call.headers.clone()),
            request_parameters: (!self.call.request_parameters.is_empty())
                .then(|| self.call.request_parameters.clone()),
            request_timeout: self.call.request_timeout,
            streaming: self.call.streaming.then_some(true),
            collect_metrics: self.call.collect_metrics.then_some(true),
            metrics_url: self.call.metrics_url.clone(),
            tls: self.call.tls.options(),
            input_tensor_format: self.call.input_tensor_format.clone(),
            output_tensor_format: self.call.output_tensor_format.clone(),
            sequence_length: self.sequence_length,
            sequence_length_variation: self.sequence_length_variation,
            sequence_id_range: self.sequence_id_range.clone(),
            num_of_sequences: self.num_of_sequences,
            serial_sequences: self.serial_sequences.then_some(true),
            validate_outputs: self.validate_outputs.then_some(true),
            ..Settings::default()
        }
    }
}

/// A clap parser for a perf_analyzer number: a value that does not parse is refused in
/// perf_analyzer's words ("Failed to parse -p. Invalid value provided: abc").
pub(super) fn pa_number<T: std::str::FromStr + Clone + Send + Sync + 'static>(
    flag: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |text| text.trim().parse().map_err(|_| format!("Failed to parse {flag}. Invalid value provided: {text}"))
}

/// `-b`: a negative batch size reads as 0, which the plan refuses in perf_analyzer's words
/// ("The value must be > 0"), as it refuses 0.
pub(super) fn pa_batch_size(text: &str) -> Result<u64, String> {
    match text.trim().parse::<i64>() {
        Ok(n) => Ok(n.max(0) as u64),
        Err(_) => Err(format!("Failed to parse -b. Invalid value provided: {text}")),
    }
}

/// `-u`, `--service-kind` and `--model-repository` as a target.
pub fn target(url: &Option<String>, service_kind: &str, repository: &Option<PathBuf>) -> Result<Target, PlanError> {
    match (service_kind, url) {
        ("triton", Some(_)) if repository.is_some() => {
            Err(invalid("--model-repository is for the bundled server: drop -u to use it"))
        }
        ("triton", Some(url)) => Ok(Target::Remote { url: url.clone() }),
        ("triton", None) => Ok(Target::Embedded { model_repository: repository.clone() }),
        ("inprocess", None) => Ok(Target::InProcess { model_repository: repository.clone() }),
        ("inprocess", Some(_)) => Err(invalid("-u has no meaning with --service-kind inprocess")),
        (other, _) => Err(PlanError::NotSupported(format!("--service-kind {other}"))),
    }
}
