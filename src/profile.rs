//! `perfbench profile`: perf_analyzer's command line over perfbench's engine. Flags are parsed
//! ([`ProfileArgs`]), then resolved into one validated [`ProfileConfig`] before any socket opens,
//! then run: connect (or start the bundled server), build the requests, sweep, and write
//! perf_analyzer's stdout report, `-f` CSV and `--profile-export-file`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::client::grpc::GrpcClient;
use crate::client::http::HttpClient;
use crate::client::inprocess::InProcessClient;
use crate::client::shm::{has_variable_outputs, output_byte_sizes, SharedMemoryKind, ShmSet, DEFAULT_OUTPUT_SHM_BYTES};
use crate::client::{ClientError, ConnectOptions, InferClient, InputSource};
use crate::input::{build_requests, InputData, InputOptions, ShapeOverride};
use crate::load::{read_intervals, Distribution, LoadMode};
use crate::measure::gpu_metrics::GpuCollector;
use crate::measure::sweep::{sweep, SweepError, SweepObserver, SweepPlan, SweepPoints, Target};
use crate::measure::{MeasureSettings, PointResult, WindowFigures, WindowMode};
use crate::report::pa_csv::{CsvColumns, PaCsvWriter};
use crate::report::pa_summary::{self, RunDescription, Wire};
use crate::report::{pa_export, LoadPoint};
use crate::server::serve::{self, ServeConfig};
use crate::server::{InferenceServer, ServerOptions};
use crate::tensor::Tensor;

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
}

/// perf_analyzer's flags that perfbench does not implement. Each is accepted by name, so the
/// user gets "not supported: --flag" instead of a parse error or silence.
#[derive(Args, Debug, Default, Clone)]
pub struct UnsupportedFlags {
    #[arg(long = "sequence-length", hide = true, num_args = 0..=1)]
    sequence_length: Option<Option<String>>,
    #[arg(long = "sequence-length-variation", hide = true, num_args = 0..=1)]
    sequence_length_variation: Option<Option<String>>,
    #[arg(long = "sequence-id-range", hide = true, num_args = 0..=1)]
    sequence_id_range: Option<Option<String>>,
    #[arg(long = "num-of-sequences", hide = true, num_args = 0..=1)]
    num_of_sequences: Option<Option<String>>,
    #[arg(long = "serial-sequences", hide = true, num_args = 0..=1)]
    serial_sequences: Option<Option<String>>,
    #[arg(long = "input-tensor-format", hide = true, num_args = 0..=1)]
    input_tensor_format: Option<Option<String>>,
    #[arg(long = "output-tensor-format", hide = true, num_args = 0..=1)]
    output_tensor_format: Option<Option<String>>,
    #[arg(long = "trace-level", hide = true, num_args = 0..=1)]
    trace_level: Option<Option<String>>,
    #[arg(long = "trace-rate", hide = true, num_args = 0..=1)]
    trace_rate: Option<Option<String>>,
    #[arg(long = "trace-count", hide = true, num_args = 0..=1)]
    trace_count: Option<Option<String>>,
    #[arg(long = "log-frequency", hide = true, num_args = 0..=1)]
    log_frequency: Option<Option<String>>,
    #[arg(long = "ssl-grpc-use-ssl", hide = true, num_args = 0..=1)]
    ssl_grpc_use_ssl: Option<Option<String>>,
    #[arg(long = "ssl-grpc-root-certifications-file", hide = true, num_args = 0..=1)]
    ssl_grpc_root_certifications_file: Option<Option<String>>,
    #[arg(long = "ssl-grpc-private-key-file", hide = true, num_args = 0..=1)]
    ssl_grpc_private_key_file: Option<Option<String>>,
    #[arg(long = "ssl-grpc-certificate-chain-file", hide = true, num_args = 0..=1)]
    ssl_grpc_certificate_chain_file: Option<Option<String>>,
    #[arg(long = "ssl-https-verify-peer", hide = true, num_args = 0..=1)]
    ssl_https_verify_peer: Option<Option<String>>,
    #[arg(long = "ssl-https-verify-host", hide = true, num_args = 0..=1)]
    ssl_https_verify_host: Option<Option<String>>,
    #[arg(long = "ssl-https-ca-certificates-file", hide = true, num_args = 0..=1)]
    ssl_https_ca_certificates_file: Option<Option<String>>,
    #[arg(long = "ssl-https-client-certificate-file", hide = true, num_args = 0..=1)]
    ssl_https_client_certificate_file: Option<Option<String>>,
    #[arg(long = "ssl-https-client-certificate-type", hide = true, num_args = 0..=1)]
    ssl_https_client_certificate_type: Option<Option<String>>,
    #[arg(long = "ssl-https-private-key-file", hide = true, num_args = 0..=1)]
    ssl_https_private_key_file: Option<Option<String>>,
    #[arg(long = "ssl-https-private-key-type", hide = true, num_args = 0..=1)]
    ssl_https_private_key_type: Option<Option<String>>,
    #[arg(long = "string-length", hide = true, num_args = 0..=1)]
    string_length: Option<Option<String>>,
    #[arg(long = "string-data", hide = true, num_args = 0..=1)]
    string_data: Option<Option<String>>,
    #[arg(long = "data-directory", hide = true, num_args = 0..=1)]
    data_directory: Option<Option<String>>,
    #[arg(long = "grpc-compression-algorithm", hide = true, num_args = 0..=1)]
    grpc_compression_algorithm: Option<Option<String>>,
    #[arg(long = "bls-composing-models", hide = true, num_args = 0..=1)]
    bls_composing_models: Option<Option<String>>,
    #[arg(long = "periodic-concurrency-range", hide = true, num_args = 0..=1)]
    periodic_concurrency_range: Option<Option<String>>,
    #[arg(long = "request-period", hide = true, num_args = 0..=1)]
    request_period: Option<Option<String>>,
    #[arg(long = "request-parameter", hide = true, num_args = 0..=1)]
    request_parameter: Option<Option<String>>,
    #[arg(long = "endpoint", hide = true, num_args = 0..=1)]
    endpoint: Option<Option<String>>,
    #[arg(long = "triton-server-directory", hide = true, num_args = 0..=1)]
    triton_server_directory: Option<Option<String>>,
    #[arg(short = 't', hide = true, num_args = 0..=1)]
    concurrency_old: Option<Option<String>>,
    #[arg(short = 'd', hide = true, num_args = 0..=1)]
    dynamic_concurrency: Option<Option<String>>,
    #[arg(short = 'v', hide = true, num_args = 0..=1)]
    verbose: Option<Option<String>>,
}

impl UnsupportedFlags {
    /// The first unsupported flag given, spelled as the user would have typed it.
    fn first_given(&self) -> Option<&'static str> {
        let given: &[(&'static str, bool)] = &[
            ("--sequence-length", self.sequence_length.is_some()),
            ("--sequence-length-variation", self.sequence_length_variation.is_some()),
            ("--sequence-id-range", self.sequence_id_range.is_some()),
            ("--num-of-sequences", self.num_of_sequences.is_some()),
            ("--serial-sequences", self.serial_sequences.is_some()),
            ("--input-tensor-format", self.input_tensor_format.is_some()),
            ("--output-tensor-format", self.output_tensor_format.is_some()),
            ("--trace-level", self.trace_level.is_some()),
            ("--trace-rate", self.trace_rate.is_some()),
            ("--trace-count", self.trace_count.is_some()),
            ("--log-frequency", self.log_frequency.is_some()),
            ("--ssl-grpc-use-ssl", self.ssl_grpc_use_ssl.is_some()),
            ("--ssl-grpc-root-certifications-file", self.ssl_grpc_root_certifications_file.is_some()),
            ("--ssl-grpc-private-key-file", self.ssl_grpc_private_key_file.is_some()),
            ("--ssl-grpc-certificate-chain-file", self.ssl_grpc_certificate_chain_file.is_some()),
            ("--ssl-https-verify-peer", self.ssl_https_verify_peer.is_some()),
            ("--ssl-https-verify-host", self.ssl_https_verify_host.is_some()),
            ("--ssl-https-ca-certificates-file", self.ssl_https_ca_certificates_file.is_some()),
            ("--ssl-https-client-certificate-file", self.ssl_https_client_certificate_file.is_some()),
            ("--ssl-https-client-certificate-type", self.ssl_https_client_certificate_type.is_some()),
            ("--ssl-https-private-key-file", self.ssl_https_private_key_file.is_some()),
            ("--ssl-https-private-key-type", self.ssl_https_private_key_type.is_some()),
            ("--string-length", self.string_length.is_some()),
            ("--string-data", self.string_data.is_some()),
            ("--data-directory", self.data_directory.is_some()),
            ("--grpc-compression-algorithm", self.grpc_compression_algorithm.is_some()),
            ("--bls-composing-models", self.bls_composing_models.is_some()),
            ("--periodic-concurrency-range", self.periodic_concurrency_range.is_some()),
            ("--request-period", self.request_period.is_some()),
            ("--request-parameter", self.request_parameter.is_some()),
            ("--endpoint", self.endpoint.is_some()),
            ("--triton-server-directory", self.triton_server_directory.is_some()),
            ("-t (use --concurrency-range)", self.concurrency_old.is_some()),
            ("-d (use --concurrency-range with -l)", self.dynamic_concurrency.is_some()),
            ("-v", self.verbose.is_some()),
        ];
        given.iter().find(|(_, set)| *set).map(|(name, _)| *name)
    }
}

/// `perfbench profile`: a drop-in for `perf_analyzer` (same flag names). With no `-u`, the
/// bundled server is started in this process on ephemeral loopback ports and profiled over the
/// chosen protocol.
#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Model to profile.
    #[arg(short = 'm', long = "model-name")]
    pub model: String,
    /// Model version (empty: the latest).
    #[arg(short = 'x', long = "model-version", default_value = "")]
    pub model_version: String,
    /// Server address (host:port). Without it, the bundled server runs in-process.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    /// Protocol: http or grpc.
    #[arg(short = 'i', long = "protocol", default_value = "http")]
    pub protocol: String,
    /// Batch size of each request.
    #[arg(short = 'b', long = "batch-size", default_value_t = 1)]
    pub batch_size: u64,
    /// Closed loop: start:end:step concurrencies (end 0 with -l: until the limit).
    #[arg(long = "concurrency-range")]
    pub concurrency_range: Option<String>,
    /// Open loop: start:end:step request rates, per second.
    #[arg(long = "request-rate-range")]
    pub request_rate_range: Option<String>,
    /// Open-loop gaps: constant or poisson.
    #[arg(long = "request-distribution", default_value = "constant")]
    pub request_distribution: String,
    /// Open loop from a trace: one interval in µs per line, cycled.
    #[arg(long = "request-intervals")]
    pub request_intervals: Option<PathBuf>,
    /// Per-item shape of a variable-size input: NAME:d1,d2 (repeatable).
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    /// Input values: zero, random, or a perf_analyzer JSON file.
    #[arg(long = "input-data", default_value = "random")]
    pub input_data: String,
    /// Same as --input-data zero.
    #[arg(short = 'z', long = "zero-input")]
    pub zero_input: bool,
    /// Where tensors travel: none, system or cuda shared memory.
    #[arg(long = "shared-memory", default_value = "none")]
    pub shared_memory: String,
    /// Bytes reserved per output of unknown size with shared memory.
    #[arg(long = "output-shared-memory-size", default_value_t = DEFAULT_OUTPUT_SHM_BYTES)]
    pub output_shared_memory_size: u64,
    /// Window length in ms (time_windows).
    #[arg(short = 'p', long = "measurement-interval", default_value_t = 5000)]
    pub measurement_interval_ms: u64,
    /// time_windows or count_windows.
    #[arg(long = "measurement-mode", default_value = "time_windows")]
    pub measurement_mode: String,
    /// Requests per window (count_windows).
    #[arg(long = "measurement-request-count", default_value_t = 50)]
    pub measurement_request_count: u64,
    /// Windows agree when within this percentage.
    #[arg(short = 's', long = "stability-percentage", default_value_t = 10.0)]
    pub stability_percentage: f64,
    /// Most windows measured per point.
    #[arg(short = 'r', long = "max-trials", default_value_t = 10)]
    pub max_trials: usize,
    /// Stabilise and threshold on this latency percentile instead of the average.
    #[arg(long = "percentile")]
    pub percentile: Option<f64>,
    /// Latency limit in ms: stop the sweep once exceeded (0: none).
    #[arg(short = 'l', long = "latency-threshold", default_value_t = 0.0)]
    pub latency_threshold_ms: f64,
    /// Search the range for the largest value under -l.
    #[arg(long = "binary-search")]
    pub binary_search: bool,
    /// Measure exactly this many requests per point (one window, no stability check).
    #[arg(long = "request-count", default_value_t = 0)]
    pub request_count: u64,
    /// Requests sent before measuring, not counted.
    #[arg(long = "warmup-request-count", default_value_t = 0)]
    pub warmup_request_count: u64,
    /// Asynchronous calls (the engine is always asynchronous; kept for perf_analyzer parity).
    #[arg(short = 'a', long = "async", conflicts_with = "sync")]
    pub asynchronous: bool,
    /// Synchronous calls (perf_analyzer's default; same engine).
    #[arg(long = "sync")]
    pub sync: bool,
    /// Client worker threads, at most one per core (default: one per 16 concurrent requests
    /// against a remote server; every core with the bundled server).
    #[arg(long = "max-threads")]
    pub max_threads: Option<usize>,
    #[command(flatten)]
    pub call: CallArgs,
    /// CSV report (perf_analyzer's format).
    #[arg(short = 'f', long = "latency-report-file")]
    pub latency_report_file: Option<PathBuf>,
    /// Add Avg latency, request/response and response wait to the CSV.
    #[arg(long = "verbose-csv")]
    pub verbose_csv: bool,
    /// Scrape interval in ms.
    #[arg(long = "metrics-interval", default_value_t = 1000)]
    pub metrics_interval_ms: u64,
    /// Per-request timestamps as perf_analyzer's JSON.
    #[arg(long = "profile-export-file")]
    pub profile_export_file: Option<PathBuf>,
    /// triton (a KServe v2 server) or inprocess (the bundled server, called directly).
    #[arg(long = "service-kind", default_value = "triton")]
    pub service_kind: String,
    /// Model repository of the bundled server (default: its model zoo).
    #[arg(long = "model-repository")]
    pub model_repository: Option<PathBuf>,
    /// Seed of the Poisson schedule.
    #[arg(long = "seed", default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub unsupported: UnsupportedFlags,
}

/// The wire protocol of a network client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Grpc,
}

/// Who is profiled, and how we reach it.
#[derive(Clone, Debug, PartialEq)]
pub enum Service {
    /// A KServe v2 server at `url`.
    Remote { url: String, protocol: Protocol },
    /// The bundled server, started in this process on loopback ports, over the network.
    Bundled { protocol: Protocol, repository: Option<PathBuf> },
    /// The bundled server, called directly (no network).
    InProcess { repository: Option<PathBuf> },
}

/// A validated run: everything `profile` needs, decided before any socket opens.
#[derive(Clone, Debug)]
pub struct ProfileConfig {
    pub model: String,
    pub version: String,
    pub service: Service,
    pub input: InputOptions,
    pub shared_memory: SharedMemoryKind,
    pub output_shm_bytes: u64,
    pub headers: Vec<(String, String)>,
    /// `--streaming`: gRPC requests go over `ModelStreamInfer`.
    pub streaming: bool,
    pub measure: MeasureSettings,
    pub plan: SweepPlan,
    pub csv: Option<PathBuf>,
    pub csv_columns: CsvColumns,
    pub export: Option<PathBuf>,
    pub asynchronous: bool,
    /// `--max-threads`: how many client worker threads (capped at the cores).
    pub max_threads: Option<usize>,
    /// `--collect-metrics`: the explicit `--metrics-url` if any, and the scrape interval.
    pub gpu_metrics: Option<(Option<String>, Duration)>,
}

/// Bad input, found while resolving flags.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("not supported: {0}")]
    NotSupported(String),
    #[error("{0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

/// Parses `-H 'Name: value'` flags into (name, value) pairs.
pub fn parse_headers(flags: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    flags
        .iter()
        .map(|h| match h.split_once(':') {
            Some((name, value)) if !name.trim().is_empty() => Ok((name.trim().to_string(), value.trim().to_string())),
            _ => Err(invalid(format!("bad -H '{h}': expected 'Name: value'"))),
        })
        .collect()
}

/// Splits "start[:end[:step]]"; missing end = start, missing step = 1.
fn parse_range<T: std::str::FromStr + Copy>(flag: &str, text: &str, one: T) -> Result<(T, T, T), ConfigError> {
    let parts: Vec<&str> = text.split(':').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(invalid(format!("bad {flag} '{text}': expected start:end:step")));
    }
    let num =
        |s: &str| s.trim().parse::<T>().map_err(|_| invalid(format!("bad {flag} '{text}': '{s}' is not a number")));
    let start = num(parts[0])?;
    let end = match parts.get(1) {
        Some(s) => num(s)?,
        None => start,
    };
    let step = match parts.get(2) {
        Some(s) => num(s)?,
        None => one,
    };
    Ok((start, end, step))
}

impl ProfileArgs {
    /// Turns flags into a validated configuration. No file is created and no socket opened,
    /// except reading the `--request-intervals` trace.
    pub fn resolve(&self) -> Result<ProfileConfig, ConfigError> {
        if let Some(flag) = self.unsupported.first_given() {
            return Err(ConfigError::NotSupported(flag.to_string()));
        }
        let protocol = match self.protocol.as_str() {
            "http" => Protocol::Http,
            "grpc" => Protocol::Grpc,
            other => return Err(invalid(format!("bad -i '{other}': expected http or grpc"))),
        };
        if self.call.streaming && protocol != Protocol::Grpc {
            return Err(invalid("--streaming needs -i grpc: HTTP has no streaming inference"));
        }
        let service = match (self.service_kind.as_str(), &self.url) {
            ("triton", Some(url)) => {
                if self.model_repository.is_some() {
                    return Err(invalid("--model-repository is for the bundled server: drop -u to use it"));
                }
                Service::Remote { url: url.clone(), protocol }
            }
            ("triton", None) => Service::Bundled { protocol, repository: self.model_repository.clone() },
            ("inprocess", None) => Service::InProcess { repository: self.model_repository.clone() },
            ("inprocess", Some(_)) => return Err(invalid("-u has no meaning with --service-kind inprocess")),
            (other, _) => return Err(ConfigError::NotSupported(format!("--service-kind {other}"))),
        };
        if self.model.trim().is_empty() {
            return Err(invalid("-m needs a model name"));
        }
        if self.batch_size == 0 {
            return Err(invalid("-b must be at least 1"));
        }
        let distribution = match self.request_distribution.as_str() {
            "constant" => Distribution::Constant,
            "poisson" => Distribution::Poisson { seed: self.seed },
            other => {
                return Err(invalid(format!("bad --request-distribution '{other}': expected constant or poisson")))
            }
        };
        let latency_threshold_us = (self.latency_threshold_ms > 0.0).then_some(self.latency_threshold_ms * 1000.0);
        if self.latency_threshold_ms.is_nan() || self.latency_threshold_ms < 0.0 {
            return Err(invalid("-l must be a number of milliseconds >= 0"));
        }
        let points = match (&self.concurrency_range, &self.request_rate_range, &self.request_intervals) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
                return Err(invalid("choose one of --concurrency-range, --request-rate-range and --request-intervals"))
            }
            (_, Some(range), None) => {
                let (start, end, step) = parse_range::<f64>("--request-rate-range", range, 1.0)?;
                let valid = start > 0.0 && end >= start && step > 0.0 && end.is_finite();
                if !valid {
                    return Err(invalid(format!(
                        "bad --request-rate-range '{range}': need 0 < start <= end and step > 0"
                    )));
                }
                SweepPoints::RequestRate { start, end, step, distribution }
            }
            (None, None, Some(path)) => {
                let gaps = read_intervals(path).map_err(|e| invalid(e.to_string()))?;
                SweepPoints::Trace(gaps)
            }
            (range, None, None) => {
                let text = range.as_deref().unwrap_or("1");
                let (start, end, step) = parse_range::<u64>("--concurrency-range", text, 1)?;
                if start == 0 || step == 0 {
                    return Err(invalid(format!(
                        "bad --concurrency-range '{text}': start and step must be at least 1"
                    )));
                }
                let end = match end {
                    0 if latency_threshold_us.is_some() && !self.binary_search => None,
                    0 => return Err(invalid(format!("bad --concurrency-range '{text}': end 0 (no limit) needs -l"))),
                    e if e < start => {
                        return Err(invalid(format!("bad --concurrency-range '{text}': end is below start")))
                    }
                    e => Some(e),
                };
                SweepPoints::Concurrency { start, end, step }
            }
        };
        if self.call.metrics_url.is_some() && !self.call.collect_metrics {
            return Err(invalid("--metrics-url needs --collect-metrics"));
        }
        if self.binary_search && latency_threshold_us.is_none() {
            return Err(invalid("--binary-search needs -l (the latency limit to search for)"));
        }
        if let Some(p) = self.percentile {
            if p.is_nan() || p <= 0.0 || p >= 100.0 {
                return Err(invalid(format!("bad --percentile {p}: expected a number between 0 and 100")));
            }
        }
        if self.stability_percentage.is_nan() || self.stability_percentage <= 0.0 {
            return Err(invalid("-s must be a positive percentage"));
        }
        if self.max_trials == 0 {
            return Err(invalid("-r must be at least 1"));
        }
        let window = match self.measurement_mode.as_str() {
            "time_windows" if self.measurement_interval_ms > 0 => {
                WindowMode::Time(Duration::from_millis(self.measurement_interval_ms))
            }
            "time_windows" => return Err(invalid("-p must be at least 1 ms")),
            "count_windows" if self.measurement_request_count > 0 => WindowMode::Count(self.measurement_request_count),
            "count_windows" => return Err(invalid("--measurement-request-count must be at least 1")),
            other => {
                return Err(invalid(format!(
                    "bad --measurement-mode '{other}': expected time_windows or count_windows"
                )))
            }
        };
        let shared_memory: SharedMemoryKind =
            self.shared_memory.parse().map_err(|e: ClientError| invalid(e.to_string()))?;
        if shared_memory != SharedMemoryKind::None && matches!(service, Service::InProcess { .. }) {
            return Err(invalid(
                "--shared-memory needs a server over the network; --service-kind inprocess shares memory already",
            ));
        }
        let data = if self.zero_input {
            InputData::Zero
        } else {
            self.input_data.parse().map_err(|e| invalid(format!("{e}")))?
        };
        let shapes = self
            .shapes
            .iter()
            .map(|s| s.parse::<ShapeOverride>().map_err(|e| invalid(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let headers = parse_headers(&self.call.headers)?;
        if self.max_threads == Some(0) {
            return Err(invalid("--max-threads must be at least 1"));
        }
        Ok(ProfileConfig {
            model: self.model.clone(),
            version: self.model_version.clone(),
            service,
            input: InputOptions { data, shapes, batch_size: self.batch_size, ..InputOptions::default() },
            shared_memory,
            output_shm_bytes: self.output_shared_memory_size,
            headers,
            streaming: self.call.streaming,
            measure: MeasureSettings {
                window,
                stability_pct: self.stability_percentage,
                max_trials: self.max_trials,
                percentile: self.percentile,
                request_count: (self.request_count > 0).then_some(self.request_count),
                batch: self.batch_size,
            },
            plan: SweepPlan {
                points,
                latency_threshold_us,
                binary_search: self.binary_search,
                warmup_requests: self.warmup_request_count,
                max_in_flight: crate::load::LoadSpec::new(LoadMode::Concurrency(1)).max_in_flight,
                log_requests: self.profile_export_file.is_some(),
            },
            csv: self.latency_report_file.clone(),
            csv_columns: CsvColumns { verbose: self.verbose_csv, gpu_metrics: self.call.collect_metrics },
            export: self.profile_export_file.clone(),
            asynchronous: self.asynchronous,
            max_threads: self.max_threads,
            gpu_metrics: self
                .call
                .collect_metrics
                .then(|| (self.call.metrics_url.clone(), Duration::from_millis(self.metrics_interval_ms.max(1)))),
        })
    }
}

impl ProfileConfig {
    /// Worker threads of the runtime that drives the load: `--max-threads` when given, else
    /// one per 16 concurrent requests for a remote server (one thread keeps many requests in
    /// flight and costs the least CPU per request: no cross-thread wake-ups), and every core
    /// when the bundled server shares the runtime. Never more than the cores.
    pub fn worker_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let wanted = match (self.max_threads, &self.service) {
            (Some(n), _) => n,
            (None, Service::Remote { .. }) => self.peak_concurrency().div_ceil(16),
            (None, Service::Bundled { .. } | Service::InProcess { .. }) => cores,
        };
        wanted.clamp(1, cores)
    }

    fn first_point(&self) -> LoadPoint {
        match &self.plan.points {
            SweepPoints::Concurrency { start, .. } => LoadPoint::Concurrency(*start),
            SweepPoints::RequestRate { start, .. } => LoadPoint::RequestRate(*start),
            SweepPoints::Trace(_) => LoadPoint::RequestRate(0.0),
        }
    }

    /// Requests in flight at most, to size connection pools.
    fn peak_concurrency(&self) -> usize {
        match &self.plan.points {
            SweepPoints::Concurrency { end: Some(end), .. } => *end as usize,
            SweepPoints::Concurrency { end: None, .. } => 64,
            _ => 64,
        }
    }

    fn description(&self, service_kind: &'static str) -> RunDescription {
        let (limit_line, distribution_line) = match &self.plan.points {
            SweepPoints::Concurrency { end, .. } => {
                (end.map(|e| format!("Concurrency limit: {e} concurrent requests")), None)
            }
            SweepPoints::RequestRate { end, distribution, .. } => (
                Some(format!("Request Rate limit: {} requests per seconds", crate::report::pa_csv::cpp_double(*end))),
                Some(match distribution {
                    Distribution::Constant => "Using uniform distribution on request generation".to_string(),
                    Distribution::Poisson { .. } => "Using poisson distribution on request generation".to_string(),
                }),
            ),
            SweepPoints::Trace(_) => (None, Some("Using the --request-intervals trace for request generation".into())),
        };
        RunDescription {
            batch: self.measure.batch,
            service_kind,
            window: self.measure.window,
            request_count: self.measure.request_count,
            percentile: self.measure.percentile,
            latency_limit_ms: self.plan.latency_threshold_us.unwrap_or(0.0) / 1000.0,
            limit_line,
            distribution_line,
            asynchronous: self.asynchronous,
            stability_pct: self.measure.stability_pct,
            max_trials: self.measure.max_trials,
        }
    }
}

/// Prints each point as perf_analyzer does, appends it to the CSV, and drives the progress bar.
struct Reporter {
    csv: Option<PaCsvWriter>,
    wire: Wire,
    description: RunDescription,
    progress: ProgressBar,
    point: String,
    results: Vec<PointResult>,
    /// `--collect-metrics`: where to scrape, and the collector of the point being measured.
    gpu: Option<(reqwest::Client, String, Duration)>,
    collector: Option<GpuCollector>,
}

impl SweepObserver for Reporter {
    fn point_started(&mut self, mode: &LoadMode) {
        self.point = match mode.point() {
            LoadPoint::Concurrency(c) => format!("concurrency {c}"),
            LoadPoint::RequestRate(r) => format!("{} req/s", crate::report::pa_csv::cpp_double(r)),
        };
        self.progress.set_message(format!("{}: measuring", self.point));
        if let Some((http, url, interval)) = &self.gpu {
            self.collector = Some(GpuCollector::start(http.clone(), url.clone(), *interval));
        }
    }

    fn window_done(&mut self, trial: usize, figures: WindowFigures, stable: bool) {
        self.progress.set_message(format!(
            "{}: window {} · {:.1} infer/s · {:.0} µs · {}",
            self.point,
            trial + 1,
            figures.throughput,
            figures.latency_us,
            if stable { "stable" } else { "not yet stable" }
        ));
    }

    fn point_done(&mut self, result: &PointResult) -> std::io::Result<()> {
        let mut result = result.clone();
        result.detail.gpu = self.collector.take().map(GpuCollector::finish);
        if let Some(csv) = &mut self.csv {
            csv.append(&result)?;
        }
        self.progress.suspend(|| println!("{}", pa_summary::point_block(&result, self.wire, &self.description)));
        self.results.push(result);
        Ok(())
    }
}

/// Entry point of `perfbench profile`.
pub fn run(args: ProfileArgs) -> anyhow::Result<ExitCode> {
    let config = args.resolve()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads())
        .enable_all()
        .thread_name("perfbench-load")
        .build()?;
    runtime.block_on(run_config(config))?;
    Ok(ExitCode::SUCCESS)
}

/// Runs a resolved configuration against the service it names.
pub async fn run_config(config: ProfileConfig) -> anyhow::Result<Vec<PointResult>> {
    let connect = ConnectOptions {
        concurrency: config.peak_concurrency(),
        headers: config.headers.clone(),
        streaming: config.streaming,
    };
    let server_options = |repository: &Option<PathBuf>| ServerOptions {
        model_repository: repository.clone(),
        models: vec![config.model.clone()],
        ..ServerOptions::default()
    };
    match &config.service {
        Service::Remote { url, protocol: Protocol::Http } => {
            let run =
                Run { config: &config, wire: Wire::Http, kind: "TRITON", metrics_url: "localhost:8002/metrics".into() };
            profile_with(HttpClient::new(url, &connect)?, run).await
        }
        Service::Remote { url, protocol: Protocol::Grpc } => {
            let run =
                Run { config: &config, wire: Wire::Grpc, kind: "TRITON", metrics_url: "localhost:8002/metrics".into() };
            profile_with(GrpcClient::new(url, &connect)?, run).await
        }
        Service::InProcess { repository } => {
            let options = server_options(repository);
            let core = tokio::task::spawn_blocking(move || InferenceServer::new(options))
                .await?
                .map_err(|e| anyhow!("{}", e.message))?;
            let run = Run { config: &config, wire: Wire::InProcess, kind: "INPROCESS", metrics_url: String::new() };
            profile_with(InProcessClient::new(core), run).await
        }
        Service::Bundled { protocol, repository } => {
            let server = serve::start(ServeConfig {
                host: "127.0.0.1".into(),
                http_port: 0,
                grpc_port: 0,
                metrics_port: 0,
                options: server_options(repository),
            })
            .await?;
            let metrics_url = format!("{}/metrics", server.metrics_addr);
            let outcome = match protocol {
                Protocol::Http => {
                    let run = Run { config: &config, wire: Wire::Http, kind: "TRITON", metrics_url };
                    profile_with(HttpClient::new(&server.http_url(), &connect)?, run).await
                }
                Protocol::Grpc => {
                    let run = Run { config: &config, wire: Wire::Grpc, kind: "TRITON", metrics_url };
                    profile_with(GrpcClient::new(&server.grpc_url(), &connect)?, run).await
                }
            };
            server.shutdown().await;
            outcome
        }
    }
}

/// How one run reports, beside its configuration.
struct Run<'a> {
    config: &'a ProfileConfig,
    wire: Wire,
    /// "TRITON" or "INPROCESS", as the settings block prints it.
    kind: &'static str,
    /// The service's metrics endpoint when `--metrics-url` is not given.
    metrics_url: String,
}

/// Everything after the client exists: discover the model, build and prepare the requests,
/// set up shared memory, sweep, report, clean up.
async fn profile_with<C: InferClient>(client: C, run: Run<'_>) -> anyhow::Result<Vec<PointResult>> {
    let config = run.config;
    let client = Arc::new(client);
    let (model, version) = (config.model.as_str(), config.version.as_str());
    let info = client.server_metadata().await?;
    let meta = client.model_metadata(model, version).await.with_context(|| format!("model '{model}'"))?;
    let model_config = client.model_config(model, version).await.with_context(|| format!("model '{model}'"))?;
    let mut specs = build_requests(&meta, &model_config, &config.input, version)?;
    // The export lists each request's input values: keep them before shm replaces them.
    let step_inputs: Vec<Vec<(String, Tensor)>> = match config.export {
        Some(_) => specs.iter().map(inline_inputs).collect(),
        None => Vec::new(),
    };

    let mut shm = None;
    if config.shared_memory != SharedMemoryKind::None {
        config.shared_memory.check_available()?;
        // Outputs whose size the config leaves open are sized from one inline request's answer,
        // so a large --shape works without guessing --output-shared-memory-size.
        let probe = if has_variable_outputs(&meta, &model_config) {
            let (answer, _) = client.infer(&client.prepare(&specs[0])?, true).await;
            Some(answer.context("the server rejected the first request")?)
        } else {
            None
        };
        let sizes =
            output_byte_sizes(&meta, &model_config, config.input.batch_size, config.output_shm_bytes, probe.as_ref());
        let prefix = format!("perfbench_{}_", std::process::id());
        let (set, rewritten) = ShmSet::setup(&*client, &specs, &sizes, &prefix).await?;
        shm = Some(set);
        specs = rewritten;
    }

    let server_stats = info.extensions.iter().any(|e| e == "statistics");
    let outcome = sweep_and_report(client.clone(), &specs, &step_inputs, &run, server_stats).await;
    if let Some(set) = shm {
        if let Err(e) = set.release(&*client).await {
            tracing::warn!("releasing shared memory: {e}");
        }
    }
    outcome
}

fn inline_inputs(spec: &crate::client::RequestSpec) -> Vec<(String, Tensor)> {
    spec.inputs
        .iter()
        .filter_map(|(name, source)| match source {
            InputSource::Inline(tensor) => Some((name.clone(), tensor.clone())),
            InputSource::SystemShm { .. } => None,
        })
        .collect()
}

async fn sweep_and_report<C: InferClient>(
    client: Arc<C>,
    specs: &[crate::client::RequestSpec],
    step_inputs: &[Vec<(String, Tensor)>],
    run: &Run<'_>,
    server_stats: bool,
) -> anyhow::Result<Vec<PointResult>> {
    let (config, wire, kind) = (run.config, run.wire, run.kind);
    let prepared = specs.iter().map(|s| client.prepare(s)).collect::<Result<Vec<_>, _>>()?;
    // One request with its answer checked first: a wrong shape or input fails here with the
    // server's reason, instead of as a sweep of failed requests.
    let (probe, _) = client.infer(&prepared[0], true).await;
    probe.context("the server rejected the first request")?;

    let description = config.description(kind);
    let csv = match &config.csv {
        Some(path) => Some(PaCsvWriter::create(path, config.first_point(), config.csv_columns)?),
        None => None,
    };
    let progress = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    progress.set_style(ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").expect("static template"));
    progress.enable_steady_tick(Duration::from_millis(200));
    println!("{}", pa_summary::settings_block(&description));
    let gpu = match &config.gpu_metrics {
        None => None,
        Some((url, interval)) => {
            let url = url.clone().unwrap_or_else(|| run.metrics_url.clone());
            if url.is_empty() {
                bail!("--collect-metrics needs --metrics-url with --service-kind inprocess");
            }
            let url = crate::client::base_url(&url);
            let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
            Some((http, url, *interval))
        }
    };
    let mut reporter =
        Reporter { csv, wire, description, progress, point: String::new(), results: Vec::new(), gpu, collector: None };
    let target = Target {
        client: client.clone(),
        requests: prepared.into(),
        model: config.model.clone(),
        version: config.version.clone(),
        server_stats,
    };

    let outcome = tokio::select! {
        outcome = sweep(&target, &config.plan, &config.measure, &mut reporter) => outcome.map(|_| ()),
        _ = tokio::signal::ctrl_c() => Err(SweepError::Output(std::io::Error::other("interrupted (Ctrl-C)"))),
    };
    reporter.progress.finish_and_clear();
    if let Some(path) = &config.export {
        pa_export::write(path, &reporter.results, &kind.to_lowercase(), step_inputs)?;
    }
    if !reporter.results.is_empty() {
        println!("{}", pa_summary::closing_list(&reporter.results));
    }
    match outcome {
        Ok(()) => Ok(reporter.results),
        Err(SweepError::Unreachable { error, measured }) => {
            bail!("{error}; the run ended after {measured} measured row(s), which were written")
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProfileArgs,
    }

    fn resolve(line: &str) -> Result<ProfileConfig, ConfigError> {
        let argv = std::iter::once("profile").chain(line.split_whitespace());
        Cli::try_parse_from(argv).expect("parses").args.resolve()
    }

    #[test]
    fn defaults_follow_perf_analyzer() {
        let c = resolve("-m identity").unwrap();
        assert_eq!(c.service, Service::Bundled { protocol: Protocol::Http, repository: None });
        assert_eq!(c.plan.points, SweepPoints::Concurrency { start: 1, end: Some(1), step: 1 });
        assert_eq!(c.measure.window, WindowMode::Time(Duration::from_millis(5000)));
        assert_eq!((c.measure.stability_pct, c.measure.max_trials), (10.0, 10));
        assert_eq!(c.measure.request_count, None);
    }

    #[test]
    fn client_threads_follow_concurrency_cores_and_max_threads() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = |line: &str| resolve(line).unwrap().worker_threads();
        assert_eq!(threads("-m m -u h:1 --concurrency-range 1:16"), 1);
        assert_eq!(threads("-m m -u h:1 --concurrency-range 64"), cores.min(4));
        assert_eq!(threads("-m m -u h:1 --concurrency-range 64 --max-threads 1"), 1);
        assert_eq!(threads("-m m -u h:1 --concurrency-range 1 --max-threads 64"), cores);
        // The bundled server runs on the same runtime: it keeps every core.
        assert_eq!(threads("-m m --concurrency-range 1"), cores);
        assert_eq!(threads("-m m --concurrency-range 1 --max-threads 1"), 1);
    }

    #[test]
    fn ranges_modes_and_services_resolve() {
        let c = resolve("-m m -u localhost:8001 -i grpc --concurrency-range 2:8:2 --measurement-mode count_windows --measurement-request-count 30 -l 5 --percentile 95").unwrap();
        assert_eq!(c.service, Service::Remote { url: "localhost:8001".into(), protocol: Protocol::Grpc });
        assert_eq!(c.plan.points, SweepPoints::Concurrency { start: 2, end: Some(8), step: 2 });
        assert_eq!(c.measure.window, WindowMode::Count(30));
        assert_eq!(c.plan.latency_threshold_us, Some(5000.0));
        assert_eq!(c.measure.percentile, Some(95.0));
        let c = resolve("-m m --request-rate-range 100:200:50 --request-distribution poisson --service-kind inprocess")
            .unwrap();
        assert_eq!(
            c.plan.points,
            SweepPoints::RequestRate {
                start: 100.0,
                end: 200.0,
                step: 50.0,
                distribution: Distribution::Poisson { seed: 1 }
            }
        );
        assert_eq!(c.service, Service::InProcess { repository: None });
    }

    #[test]
    fn unsupported_flags_are_named() {
        assert_eq!(resolve("-m m --max-threads 0").unwrap_err(), invalid("--max-threads must be at least 1"));
        assert_eq!(resolve("-m m --ssl-grpc-use-ssl").unwrap_err().to_string(), "not supported: --ssl-grpc-use-ssl");
        assert_eq!(
            resolve("-m m --service-kind openai").unwrap_err().to_string(),
            "not supported: --service-kind openai"
        );
        assert!(resolve("-m m --streaming").unwrap_err().to_string().starts_with("--streaming needs -i grpc"));
        assert!(resolve("-m m -i grpc --streaming").unwrap().streaming);
    }

    #[test]
    fn bad_values_are_one_line_errors() {
        for (line, needle) in [
            ("-m m --concurrency-range 0:4", "start and step"),
            ("-m m --concurrency-range 4:2", "below start"),
            ("-m m --concurrency-range a:2", "not a number"),
            ("-m m --binary-search --concurrency-range 1:8", "needs -l"),
            ("-m m -i udp", "expected http or grpc"),
            ("-m m --measurement-mode both", "time_windows or count_windows"),
            ("-m m --concurrency-range 1:2 --request-rate-range 5", "choose one"),
            ("-m m --shape INPUT0:x", "--shape"),
            ("-m m --percentile 100", "--percentile"),
            ("-m m --service-kind inprocess -u h:1", "-u"),
            ("-m m --shared-memory gpu", "--shared-memory"),
        ] {
            let err = resolve(line).unwrap_err().to_string();
            assert!(err.contains(needle), "{line}: {err}");
            assert!(!err.contains('\n'), "{line}: {err}");
        }
    }
}
