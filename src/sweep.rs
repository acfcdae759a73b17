//! `perfbench offline` and `perfbench online`: the seeds' two sweeps, each run point by point
//! through the profile engine, written to one results folder (perf_analyzer.csv row by row as
//! measured, then report.csv, report.md and the plots through the report module).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser};

use crate::client::{grpc::GrpcClient, http::HttpClient, ConnectOptions, InferClient};
use crate::profile::{CallArgs, ProfileArgs};
use crate::report::pa_csv::{CsvColumns, PaCsvWriter};
use crate::report::{ConfigBasics, Device, LoadPoint, ReportRow, RunConfig, SweepKind};
use crate::server::serve::{self, RunningServer, ServeConfig};
use crate::server::ServerOptions;

/// The model a sweep profiles when no `-m` is given: `wide_deep` is a real compute model (not an
/// echo) yet cheap enough on a 2-core CPU that `offline --batch-sizes 1,8,16` takes seconds.
pub const DEFAULT_MODEL: &str = "wide_deep";

/// Bad sweep syntax (`--concurrency`, `--batch-sizes`).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("bad {flag} '{text}': {why}")]
pub struct SyntaxError {
    pub flag: &'static str,
    pub text: String,
    pub why: String,
}

/// Parses a concurrency sweep: `A..B` steps by A (`8..256` = 8, 16, …, 256; `1..16` = 1…16),
/// `A..B:S` steps by S, `8,16,64` is a list, `8` is one point.
pub fn parse_concurrency(text: &str) -> Result<Vec<u64>, SyntaxError> {
    let err = |why: &str| SyntaxError { flag: "--concurrency", text: text.to_string(), why: why.to_string() };
    let num = |s: &str| -> Result<u64, SyntaxError> {
        match s.trim().parse::<u64>() {
            Ok(0) => Err(err("values must be at least 1")),
            Ok(n) => Ok(n),
            Err(_) => Err(err(&format!("'{}' is not a whole number", s.trim()))),
        }
    };
    if let Some((start, rest)) = text.split_once("..") {
        let start = num(start)?;
        let (end, step) = match rest.split_once(':') {
            Some((end, step)) => (num(end)?, num(step)?),
            None => (num(rest)?, start),
        };
        if end < start {
            return Err(err("the end is below the start"));
        }
        Ok((start..=end).step_by(step as usize).collect())
    } else {
        parse_list("--concurrency", text)
    }
}

/// Parses a comma-separated list of positive whole numbers, e.g. `--batch-sizes 1,8,16`.
pub fn parse_list(flag: &'static str, text: &str) -> Result<Vec<u64>, SyntaxError> {
    let err = |why: String| SyntaxError { flag, text: text.to_string(), why };
    let values = text
        .split(',')
        .map(|s| match s.trim().parse::<u64>() {
            Ok(0) => Err(err("values must be at least 1".into())),
            Ok(n) => Ok(n),
            Err(_) => Err(err(format!("'{}' is not a whole number", s.trim()))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if values.is_empty() {
        return Err(err("no values".into()));
    }
    Ok(values)
}

/// Measurement flags shared by both sweeps; each is passed on to the profile engine under
/// perf_analyzer's name, so it is validated exactly as `perfbench profile` validates it.
#[derive(Args, Debug, Clone)]
pub struct MeasureArgs {
    /// Model to profile (default: wide_deep from the bundled zoo).
    #[arg(short = 'm', long = "model-name")]
    pub model: Option<String>,
    /// Server address (host:port). Without it, the bundled server runs in-process.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    /// Input values: random, zero, or a JSON file.
    #[arg(long = "input-data", default_value = "random")]
    pub input_data: String,
    /// Shape of a variable-size input, NAME:D1,D2 (repeatable).
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    /// time_windows or count_windows.
    #[arg(long = "measurement-mode", default_value = "count_windows")]
    pub measurement_mode: String,
    /// Time window length in ms (time_windows).
    #[arg(short = 'p', long = "measurement-interval", default_value_t = 5000)]
    pub measurement_interval_ms: u64,
    /// Requests per window (count_windows).
    #[arg(long = "measurement-request-count", default_value_t = 50)]
    pub measurement_request_count: u64,
    /// Requests sent and discarded before each point is measured.
    #[arg(long = "warmup-request-count", default_value_t = 10)]
    pub warmup_request_count: u64,
    /// Stability threshold in percent.
    #[arg(short = 's', long = "stability-percentage", default_value_t = 10.0)]
    pub stability_percentage: f64,
    /// Most windows per point before giving up on stability.
    #[arg(short = 'r', long = "max-trials", default_value_t = 10)]
    pub max_trials: usize,
    /// Report this latency percentile instead of the average for stability.
    #[arg(long = "percentile")]
    pub percentile: Option<f64>,
    #[command(flatten)]
    pub call: CallArgs,
    /// Serve models from this repository instead of the bundled zoo (no -u).
    #[arg(long = "model-repository")]
    pub model_repository: Option<PathBuf>,
    /// Results folder (default: results/<model>-<offline|online>-<timestamp>/).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
}

/// `perfbench offline`: concurrency 1, one static batch per request, over batch sizes.
#[derive(Args, Debug, Clone)]
pub struct OfflineArgs {
    /// Batch sizes, comma separated.
    #[arg(long = "batch-sizes", default_value = "1,8,16")]
    pub batch_sizes: String,
    /// Protocol: http or grpc.
    #[arg(short = 'i', long = "protocol", default_value = "http")]
    pub protocol: String,
    /// Tensors through shared memory: none, system or cuda.
    #[arg(long = "shared-memory", default_value = "system")]
    pub shared_memory: String,
    #[command(flatten)]
    pub measure: MeasureArgs,
}

/// `perfbench online`: a fixed client batch over concurrencies, the server batching.
#[derive(Args, Debug, Clone)]
pub struct OnlineArgs {
    /// Client batch size of each request.
    #[arg(short = 'b', long = "batch-size", default_value_t = 1)]
    pub batch: u64,
    /// Concurrencies: A..B (step A), A..B:S, or a list 8,16,64.
    #[arg(long = "concurrency", default_value = "1..8")]
    pub concurrency: String,
    /// Protocol: http or grpc.
    #[arg(short = 'i', long = "protocol", default_value = "http")]
    pub protocol: String,
    /// Tensors through shared memory: none, system or cuda.
    #[arg(long = "shared-memory", default_value = "none")]
    pub shared_memory: String,
    #[command(flatten)]
    pub measure: MeasureArgs,
}

/// One sweep, decided before any socket opens.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    pub kind: SweepKind,
    pub model: String,
    pub protocol: String,
    pub shared_memory: String,
    /// (batch, concurrency) per point, in order.
    pub points: Vec<(u64, u64)>,
    pub measure: MeasureArgs,
    pub out: PathBuf,
}

impl OfflineArgs {
    pub fn plan(&self) -> Result<SweepPlan, SyntaxError> {
        let batches = parse_list("--batch-sizes", &self.batch_sizes)?;
        Ok(plan(
            SweepKind::Offline,
            &self.measure,
            &self.protocol,
            &self.shared_memory,
            batches.into_iter().map(|b| (b, 1)).collect(),
        ))
    }
}

impl OnlineArgs {
    pub fn plan(&self) -> Result<SweepPlan, SyntaxError> {
        let levels = parse_concurrency(&self.concurrency)?;
        if self.batch == 0 {
            return Err(SyntaxError { flag: "-b", text: "0".into(), why: "the batch must be at least 1".into() });
        }
        Ok(plan(
            SweepKind::Online,
            &self.measure,
            &self.protocol,
            &self.shared_memory,
            levels.into_iter().map(|c| (self.batch, c)).collect(),
        ))
    }
}

fn plan(
    kind: SweepKind,
    measure: &MeasureArgs,
    protocol: &str,
    shared_memory: &str,
    points: Vec<(u64, u64)>,
) -> SweepPlan {
    let model = measure.model.clone().unwrap_or_else(|| DEFAULT_MODEL.into());
    let out = measure.out.clone().unwrap_or_else(|| {
        let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
        PathBuf::from("results").join(format!("{model}-{}-{stamp}", kind.title().to_lowercase()))
    });
    SweepPlan {
        kind,
        model,
        protocol: protocol.to_string(),
        shared_memory: shared_memory.to_string(),
        points,
        measure: measure.clone(),
        out,
    }
}

/// Parses profile flags as `perfbench profile` would, so every check is the engine's own.
#[derive(Parser)]
struct ProfileArgv {
    #[command(flatten)]
    args: ProfileArgs,
}

impl SweepPlan {
    /// The profile run of one point against `url`.
    fn point_args(&self, url: &str, batch: u64, concurrency: u64) -> anyhow::Result<ProfileArgs> {
        let m = &self.measure;
        let mut argv: Vec<String> = vec!["profile".into()];
        let mut flag = |name: &str, value: String| {
            argv.push(name.into());
            argv.push(value);
        };
        flag("-m", self.model.clone());
        flag("-u", url.into());
        flag("-i", self.protocol.clone());
        flag("-b", batch.to_string());
        flag("--concurrency-range", concurrency.to_string());
        flag("--shared-memory", self.shared_memory.clone());
        flag("--input-data", m.input_data.clone());
        flag("--measurement-mode", m.measurement_mode.clone());
        flag("-p", m.measurement_interval_ms.to_string());
        flag("--measurement-request-count", m.measurement_request_count.to_string());
        flag("--warmup-request-count", m.warmup_request_count.to_string());
        flag("-s", m.stability_percentage.to_string());
        flag("-r", m.max_trials.to_string());
        if let Some(p) = m.percentile {
            flag("--percentile", p.to_string());
        }
        for shape in &m.shapes {
            flag("--shape", shape.clone());
        }
        let mut args = ProfileArgv::try_parse_from(&argv)
            .map_err(|e| anyhow!("{}", e.to_string().lines().next().unwrap_or("bad flags").trim()))?
            .args;
        args.call = m.call.clone();
        Ok(args)
    }
}

/// What a finished sweep wrote.
#[derive(Debug)]
pub struct SweepOutcome {
    pub rows: Vec<ReportRow>,
    pub dir: PathBuf,
}

/// The bundled server, when a sweep runs without `-u`.
pub async fn start_embedded(
    model: &str,
    repository: Option<PathBuf>,
    extra_pbtxt: Option<&str>,
) -> anyhow::Result<RunningServer> {
    // A model defined by pbtxt text is not in the zoo: load a trivial zoo model, then it.
    let models = match extra_pbtxt {
        Some(_) => vec!["identity".to_string()],
        None => vec![model.to_string()],
    };
    let server = serve::start(ServeConfig {
        options: ServerOptions {
            model_repository: if extra_pbtxt.is_some() { None } else { repository },
            models,
            ..ServerOptions::default()
        },
        ..ServeConfig::default()
    })
    .await?;
    if let Some(text) = extra_pbtxt {
        server.core.repository.load_pbtxt(model, text).map_err(|e| anyhow!("model '{model}': {}", e.message))?;
    }
    Ok(server)
}

/// Runs every point of `plan` against `url`, writing the results folder.
pub async fn run_plan(plan: &SweepPlan, url: &str) -> anyhow::Result<SweepOutcome> {
    // Every point's flags are checked before the first one runs.
    let configs = plan
        .points
        .iter()
        .map(|&(batch, concurrency)| Ok(plan.point_args(url, batch, concurrency)?.resolve()?))
        .collect::<anyhow::Result<Vec<_>>>()?;
    std::fs::create_dir_all(&plan.out).with_context(|| format!("cannot create {}", plan.out.display()))?;
    let config = run_config_table(plan, url).await?;
    let csv_path = plan.out.join("perf_analyzer.csv");
    let first = LoadPoint::Concurrency(plan.points.first().map_or(1, |p| p.1));
    let columns = CsvColumns { verbose: false, gpu_metrics: plan.measure.call.collect_metrics };
    let mut csv = PaCsvWriter::create(&csv_path, first, columns)
        .with_context(|| format!("cannot write {}", csv_path.display()))?;
    let mut rows = Vec::new();
    for (i, (&(batch, concurrency), resolved)) in plan.points.iter().zip(configs).enumerate() {
        eprintln!(
            "[{}/{}] {} {}: batch {batch}, concurrency {concurrency}",
            i + 1,
            plan.points.len(),
            plan.model,
            plan.kind.title().to_lowercase()
        );
        let results = match crate::profile::run_config(resolved).await {
            Ok(results) => results,
            // The points measured so far still get their report and plots.
            Err(e) if !rows.is_empty() => {
                crate::report::write_results(&plan.out, &rows, &config, plan.kind)?;
                let dir = plan.out.display();
                return Err(e.context(format!("the sweep stopped after {} point(s), reported in {dir}", rows.len())));
            }
            Err(e) => return Err(e),
        };
        for result in &results {
            csv.append(result)?;
            rows.push(result.row.clone());
        }
    }
    crate::report::write_results(&plan.out, &rows, &config, plan.kind)?;
    Ok(SweepOutcome { rows, dir: plan.out.clone() })
}

/// The configuration table of report.md, from the model config the server reports.
async fn run_config_table(plan: &SweepPlan, url: &str) -> anyhow::Result<RunConfig> {
    let headers = crate::profile::parse_headers(&plan.measure.call.headers)?;
    let connect = ConnectOptions { headers, ..ConnectOptions::default() };
    let config = match plan.protocol.as_str() {
        "grpc" => GrpcClient::new(url, &connect)?
            .model_config(&plan.model, "")
            .await
            .with_context(|| format!("model '{}'", plan.model))?,
        _ => HttpClient::new(url, &connect)?
            .model_config(&plan.model, "")
            .await
            .with_context(|| format!("model '{}'", plan.model))?,
    };
    let precision = config
        .input
        .first()
        .and_then(|i| crate::proto::inference::DataType::try_from(i.data_type).ok())
        .map(|t| t.as_str_name().trim_start_matches("TYPE_").to_string())
        .unwrap_or_else(|| "unknown".into());
    let backend = if config.backend.is_empty() { config.platform.clone() } else { config.backend.clone() };
    let device = match &plan.measure.url {
        None => Device::Cpu(format!(
            "CPU, bundled perfbench server ({} cores)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        )),
        Some(u) => Device::Cpu(format!("server at {u}")),
    };
    let basics = ConfigBasics {
        device,
        backend,
        precision,
        max_batch_size: config.max_batch_size.max(0) as u64,
        instances: crate::server::config::instance_count(&config) as u64,
    };
    Ok(RunConfig::from(basics)
        .with("Model", plan.model.clone())
        .with("Protocol", plan.protocol.clone())
        .with("Shared memory", plan.shared_memory.clone()))
}

/// Runs a sweep against `-u` or the embedded server; returns the rows written.
pub async fn run_sweep(plan: &SweepPlan, extra_pbtxt: Option<&str>) -> anyhow::Result<SweepOutcome> {
    match &plan.measure.url {
        Some(url) => run_plan(plan, url).await,
        None => {
            let server = start_embedded(&plan.model, plan.measure.model_repository.clone(), extra_pbtxt).await?;
            let url = match plan.protocol.as_str() {
                "grpc" => server.grpc_url(),
                _ => server.http_url(),
            };
            let mut plan = plan.clone();
            if plan.measure.call.collect_metrics && plan.measure.call.metrics_url.is_none() {
                plan.measure.call.metrics_url = Some(format!("{}/metrics", server.metrics_addr));
            }
            let outcome = run_plan(&plan, &url).await;
            server.shutdown().await;
            outcome
        }
    }
}

/// The summary table printed at the end of a sweep.
pub fn summary(rows: &[ReportRow]) -> String {
    crate::report::table::render_results(rows, &crate::report::Layout::default())
}

fn run_blocking(plan: SweepPlan) -> anyhow::Result<ExitCode> {
    if !matches!(plan.protocol.as_str(), "http" | "grpc") {
        bail!("bad -i '{}': expected http or grpc", plan.protocol);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("perfbench-sweep").build()?;
    let outcome = runtime.block_on(run_sweep(&plan, None))?;
    println!("{}", summary(&outcome.rows));
    println!("Results: {}", outcome.dir.display());
    Ok(ExitCode::SUCCESS)
}

/// Entry point of `perfbench offline`.
pub fn run_offline(args: OfflineArgs) -> anyhow::Result<ExitCode> {
    run_blocking(args.plan()?)
}

/// Entry point of `perfbench online`.
pub fn run_online(args: OnlineArgs) -> anyhow::Result<ExitCode> {
    run_blocking(args.plan()?)
}

/// Whether a results folder holds everything a sweep writes.
pub fn is_complete(dir: &Path) -> bool {
    ["perf_analyzer.csv", "report.csv", "report.md"].iter().all(|f| dir.join(f).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_syntax() {
        assert_eq!(parse_concurrency("8..32").unwrap(), vec![8, 16, 24, 32]);
        assert_eq!(parse_concurrency("1..4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(parse_concurrency("8..256").unwrap().len(), 32);
        assert_eq!(parse_concurrency("2..9:3").unwrap(), vec![2, 5, 8]);
        assert_eq!(parse_concurrency("8,16,64").unwrap(), vec![8, 16, 64]);
        assert_eq!(parse_concurrency("4").unwrap(), vec![4]);
        for bad in ["", "0..8", "8..4", "a..b", "1..8:0", "8,,16", "1..", "x"] {
            let e = parse_concurrency(bad).unwrap_err();
            assert!(e.to_string().starts_with("bad --concurrency"), "{bad}: {e}");
        }
    }

    #[test]
    fn batch_list_syntax() {
        assert_eq!(parse_list("--batch-sizes", "1, 8,16").unwrap(), vec![1, 8, 16]);
        assert!(parse_list("--batch-sizes", "1,0").is_err());
        assert!(parse_list("--batch-sizes", "one").is_err());
    }
}
