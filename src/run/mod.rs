//! Runs a [`Plan`]: starts the embedded server when the plan has no URL, opens one
//! [`Session`](session::Session) per sweep (the only place a wire client is chosen), measures
//! each batch size × load level through it, writes every row as it is measured, and gates the
//! result. Errors carry the exit code they end the process with.

pub mod composing;
pub mod grid;
pub mod interrupt;
pub mod merge;
pub mod mpi;
pub mod observe;
pub mod point;
pub mod prepare;
pub mod session;
pub mod shard;
pub mod sweep;
pub mod trace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;

use self::interrupt::Interrupt;
use self::observe::{Export, FolderStart, Recorder};
use self::prepare::{bound_open_range, time_bank, ModelTraits};
use self::session::Session;
use self::sweep::{sweep as measure_sweep, LoadPlan, SweepError, Target as SweepTarget};
use crate::client::deadline::Deadline;
use crate::client::grpc::GrpcClient;
use crate::client::http::HttpClient;
use crate::client::inprocess::InProcessClient;
use crate::client::{ClientError, InferClient};
use crate::load::PeriodicSpec;
use crate::measure::window::derive_point;
use crate::measure::MeasureSettings;
use crate::plan::{Load, Model, Periodic, Plan, Protocol, Shard, Sweep, SweepKind, Target, MAX_OPEN_CONCURRENCY};
use crate::report::pa_summary::Wire;
use crate::report::{ConfigBasics, Device, RunConfig};
use crate::results::csv::{read_csv, Unit};
use crate::results::{LoadPoint, ReportRow};
use crate::server::serve::{self, RunningServer, ServeConfig};
use crate::server::{InferenceServer, ServerOptions};

pub use interrupt::EXIT_INTERRUPTED;
// What `search` measures with, as a run does.
pub use prepare::{connect_options, load_plan, measure_settings, worker_threads};

pub use crate::gate::EXIT_REGRESSION;
/// Exit code of bad input: a bad flag or plan, a missing file, data the server refuses.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code of a failed target: unreachable, died, or broke the protocol.
pub const EXIT_TARGET: u8 = 3;

/// Why a run ended early, which decides its exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    BadInput,
    Target,
    Interrupted,
}

/// A run's error: a one-line reason and its exit code.
#[derive(Debug)]
pub struct RunError {
    pub failure: Failure,
    pub error: anyhow::Error,
}

impl RunError {
    pub fn bad_input(e: impl Into<anyhow::Error>) -> RunError {
        RunError { failure: Failure::BadInput, error: e.into() }
    }

    pub fn target(e: impl Into<anyhow::Error>) -> RunError {
        RunError { failure: Failure::Target, error: e.into() }
    }

    /// A client error: the server gone or speaking nonsense is the target's failure; a request
    /// it refused (bad shape, unknown model) is the input's.
    pub fn client(e: ClientError) -> RunError {
        match e {
            ClientError::Unreachable { .. }
            | ClientError::Protocol(_)
            | ClientError::Stalled(_)
            | ClientError::TimedOut { .. } => RunError::target(e),
            ClientError::Server(_) | ClientError::Invalid(_) => RunError::bad_input(e),
        }
    }

    pub fn context(self, context: impl std::fmt::Display + Send + Sync + 'static) -> RunError {
        RunError { failure: self.failure, error: self.error.context(context) }
    }

    pub fn exit_code(&self) -> u8 {
        match self.failure {
            Failure::BadInput => EXIT_BAD_INPUT,
            Failure::Target => EXIT_TARGET,
            Failure::Interrupted => EXIT_INTERRUPTED,
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chain: Vec<String> = self.error.chain().map(|c| c.to_string()).collect();
        f.write_str(&chain.join(": ").replace('\n', " "))
    }
}

/// What one sweep measured.
#[derive(Debug)]
pub struct SweepOutcome {
    pub kind: SweepKind,
    pub rows: Vec<crate::results::ReportRow>,
    pub dir: Option<PathBuf>,
}

/// Runs `plan` to the end; the exit code is 0, or 1 when its gate finds a regression.
pub fn execute(plan: &Plan) -> Result<ExitCode, RunError> {
    // Under mpirun each rank is a shard: MPI lines the points up, the ranks' folders go under
    // the results folder, and rank 0 merges them into it at the end.
    let under_mpi = plan.shard.is_some() && mpi::launched();
    let ranked;
    let (merged, plan) = if under_mpi {
        mpi::join().map_err(|e| RunError::bad_input(anyhow!(e)))?;
        ranked = shard_folders(plan);
        (Some(plan), &ranked)
    } else {
        (None, plan)
    };
    let baselines = match &plan.gate {
        Some(gate) => Some(baseline_files(&gate.baseline, plan).map_err(RunError::bad_input)?),
        None => None,
    };
    let threads = plan.sweeps.iter().map(|s| worker_threads(s, &plan.target)).max().unwrap_or(1);
    let runtime = client_runtime(threads)?;
    let outcomes = runtime.block_on(execute_async(plan));
    if let (Some(whole), Some(mpi)) = (merged, mpi::world()) {
        // Every rank reaches this barrier, its sweep finished or failed, before rank 0 merges.
        mpi.barrier();
        mpi.finalize();
        if plan.shard.is_some_and(|s| s.index == 0) {
            merge_shard_folders(whole).map_err(RunError::bad_input)?;
        }
    }
    let outcomes = outcomes?;
    for outcome in &outcomes {
        if let Some(dir) = &outcome.dir {
            println!("{} {}:", plan.model.name, outcome.kind.name());
            println!("{}", crate::report::table::render_results(&outcome.rows, &crate::report::Layout::default()));
            println!("Results: {}", dir.display());
        }
    }
    match (baselines, &plan.gate) {
        (Some(pairs), Some(gate)) => gate_run(&pairs, &gate.thresholds).map_err(RunError::bad_input),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// `plan` with each sweep's results folder moved to `shard-K` under it (MPI ranks).
fn shard_folders(plan: &Plan) -> Plan {
    let mut ranked = plan.clone();
    let index = plan.shard.map_or(0, |s| s.index);
    for sweep in &mut ranked.sweeps {
        sweep.output.dir = sweep.output.dir.take().map(|d| d.join(format!("shard-{index}")));
    }
    ranked
}

/// Rank 0: merges the ranks' `shard-K` folders into each sweep's results folder.
fn merge_shard_folders(plan: &Plan) -> anyhow::Result<()> {
    let count = plan.shard.map_or(1, |s| s.count);
    for dir in plan.sweeps.iter().filter_map(|s| s.output.dir.as_ref()) {
        let shards: Vec<PathBuf> = (0..count).map(|k| dir.join(format!("shard-{k}"))).collect();
        merge::merge(&shards, dir)?;
    }
    Ok(())
}

/// Where the sweeps reach the model.
enum Endpoint {
    /// Over the network: `url` for -u, or the embedded server's two front ends.
    Network {
        http: String,
        grpc: String,
        metrics: String,
        device: String,
    },
    InProcess(Arc<InferenceServer>),
}

/// Runs every sweep of `plan`; each sweep's rows are on disk even when a later one fails.
pub async fn execute_async(plan: &Plan) -> Result<Vec<SweepOutcome>, RunError> {
    // The plan each results folder keeps, its paths absolute so `run --resume` works anywhere.
    let here = std::env::current_dir().map_err(RunError::bad_input)?;
    // `--start-at` belongs to this run only: a resumed shard is lined up anew, or not at all.
    let shard = plan.shard.map(|shard| Shard { start_at_ms: None, ..shard });
    let folder_plan = Plan { resume: false, shard, ..plan.anchored(&here) }.to_toml();
    // Every sweep's slots on one clock grid, checked before anything starts.
    let grid = plan.shard.and_then(|s| s.start_at_ms).map(|at| Arc::new(grid::PointGrid::new(at)));
    let mut slots = Vec::new();
    for sweep in &plan.sweeps {
        slots.push(match &grid {
            Some(grid) => Some(sweep_slots(sweep, grid, plan.shard).map_err(RunError::bad_input)?),
            None => None,
        });
    }
    // Read before anything starts: a folder that cannot be resumed costs no server start.
    let mut kept = Vec::new();
    for sweep in &plan.sweeps {
        kept.push(if plan.resume { kept_rows(sweep).map_err(RunError::bad_input)? } else { Vec::new() });
    }
    let interrupt = Interrupt::install();
    let mut server = None;
    let endpoint = match &plan.target {
        Target::Remote { url } => Endpoint::Network {
            http: url.clone(),
            grpc: url.clone(),
            metrics: "localhost:8002/metrics".into(),
            device: format!("server at {url}"),
        },
        Target::Embedded { model_repository } => {
            let running = start_embedded(&plan.model, model_repository.clone(), &bls_models(plan))
                .await
                .map_err(RunError::bad_input)?;
            let endpoint = Endpoint::Network {
                http: running.http_url(),
                grpc: running.grpc_url(),
                metrics: format!("{}/metrics", running.metrics_addr),
                device: format!(
                    "CPU, bundled perfbench server ({} cores)",
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                ),
            };
            server = Some(running);
            endpoint
        }
        Target::InProcess { model_repository } => {
            let options = server_options(&plan.model, model_repository.clone(), &bls_models(plan));
            let core = tokio::task::spawn_blocking(move || InferenceServer::new(options))
                .await
                .map_err(RunError::target)?
                .map_err(|e| RunError::bad_input(anyhow!("{}", e.message)))?;
            Endpoint::InProcess(core)
        }
    };
    let mut outcomes = Vec::new();
    let mut failure = None;
    for ((sweep, kept), slots) in plan.sweeps.iter().zip(kept).zip(slots) {
        let shard = plan.shard.map(|shard| shard::ShardStart { shard, identity: plan.identity(), slots });
        let folder = FolderStart { plan: folder_plan.clone(), kept, shard };
        let sweep_run = run_sweep(&plan.model, sweep, folder, &endpoint, &interrupt);
        let interrupted = || RunError { failure: Failure::Interrupted, error: anyhow!("interrupted") };
        match interrupt.bounded(sweep_run, || Err(interrupted())).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if let Some(server) = server {
        server.shutdown().await;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(outcomes),
    }
}

/// A sweep's slots on the run's `--start-at` grid: from the plan's bounds on one point and on
/// its warm-up, or `--point-slot`.
fn sweep_slots(sweep: &Sweep, grid: &Arc<grid::PointGrid>, shard: Option<Shard>) -> anyhow::Result<grid::SweepSlots> {
    let point_slot = shard.and_then(|s| s.point_slot_ms).map(Duration::from_millis);
    let parts = grid::SlotParts::new(prepare::point_bound(sweep), prepare::warm_up_bound(sweep), point_slot)
        .ok_or_else(|| {
            anyhow!(
                "--start-at: nothing bounds how long a point of {} takes (--request-count, or count windows under \
                 the stable rule): give each point's slot with --point-slot MS",
                sweep.kind.name()
            )
        })?;
    Ok(grid::SweepSlots { grid: grid.clone(), parts })
}

/// The rows an interrupted run left in `sweep`'s report.csv (none when it had not started).
fn kept_rows(sweep: &Sweep) -> anyhow::Result<Vec<ReportRow>> {
    let Some(path) = sweep.output.dir.as_ref().map(|d| d.join("report.csv")).filter(|p| p.exists()) else {
        return Ok(Vec::new());
    };
    Ok(read_csv(&path, Unit::Us)?)
}

/// The `--bls-composing-models` of every sweep: the bundled server loads them beside the model.
fn bls_models(plan: &Plan) -> Vec<String> {
    let mut names: Vec<String> =
        plan.sweeps.iter().flat_map(|s| s.bls_composing_models.iter().map(|m| m.name.clone())).collect();
    names.sort();
    names.dedup();
    names
}

fn server_options(model: &Model, repository: Option<PathBuf>, also: &[String]) -> ServerOptions {
    // A model defined by pbtxt text is not in the zoo: load a trivial zoo model, then it.
    let mut models = match model.config {
        Some(_) => vec!["identity".to_string()],
        None => vec![model.name.clone()],
    };
    models.extend(also.iter().filter(|name| **name != model.name).cloned());
    ServerOptions { model_repository: repository, models, ..ServerOptions::default() }
}

/// The client's async runtime, on `threads` workers.
pub fn client_runtime(threads: usize) -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .thread_name("perfbench")
        .build()
        .map_err(RunError::target)
}

/// The bundled server on ephemeral loopback ports, with the plan's model loaded, and the `also`
/// models (a BLS model's composing models).
pub async fn start_embedded(
    model: &Model,
    repository: Option<PathBuf>,
    also: &[String],
) -> anyhow::Result<RunningServer> {
    let server =
        serve::start(ServeConfig { options: server_options(model, repository, also), ..ServeConfig::default() })
            .await?;
    if let Some(text) = &model.config {
        if let Err(e) = server.core.repository.load_pbtxt(&model.name, text) {
            server.shutdown().await;
            return Err(anyhow!("model '{}': {}", model.name, e.message));
        }
    }
    Ok(server)
}

/// One sweep over the endpoint: the one place a wire client is chosen.
async fn run_sweep(
    model: &Model,
    sweep: &Sweep,
    folder: FolderStart,
    endpoint: &Endpoint,
    interrupt: &Interrupt,
) -> Result<SweepOutcome, RunError> {
    let connect = connect_options(sweep);
    match (endpoint, sweep.protocol) {
        (Endpoint::InProcess(core), _) => {
            let client = InProcessClient::new(core.clone());
            let context =
                Context { wire: Wire::InProcess, service_kind: "INPROCESS", metrics: "", device: "in process" };
            drive(client, model, sweep, folder, context, interrupt).await
        }
        (Endpoint::Network { http, metrics, device, .. }, Protocol::Http) => {
            let client = HttpClient::with_tls(http, &connect, &sweep.call.tls).map_err(RunError::client)?;
            let client = Deadline::new(client, sweep.call.request_timeout());
            trace::apply(&client, &model.name, &sweep.trace).await?;
            let context = Context { wire: Wire::Http, service_kind: "TRITON", metrics, device };
            drive(client, model, sweep, folder, context, interrupt).await
        }
        (Endpoint::Network { grpc, metrics, device, .. }, Protocol::Grpc) => {
            let client = GrpcClient::with_tls(grpc, &connect, &sweep.call.tls).map_err(RunError::client)?;
            let client = Deadline::new(client, sweep.call.request_timeout());
            trace::apply(&client, &model.name, &sweep.trace).await?;
            let context = Context { wire: Wire::Grpc, service_kind: "TRITON", metrics, device };
            drive(client, model, sweep, folder, context, interrupt).await
        }
    }
}

/// How a sweep's endpoint describes itself in the outputs.
struct Context<'a> {
    wire: Wire,
    /// "TRITON" or "INPROCESS", as perf_analyzer's settings block prints it.
    service_kind: &'static str,
    /// The metrics endpoint when the plan names none.
    metrics: &'a str,
    device: &'a str,
}

async fn drive<C: InferClient>(
    client: C,
    model: &Model,
    sweep: &Sweep,
    folder: FolderStart,
    context: Context<'_>,
    interrupt: &Interrupt,
) -> Result<SweepOutcome, RunError> {
    let mut session = Session::open(client, model, sweep.call.streaming, &sweep.bls_composing_models).await?;
    let config = run_config(&session, sweep, context.device);
    // A shard runs its part of the sweep's request counts and sequence ids (load levels are
    // split per point), and only shard 0 reads the server's counters, so they count once.
    let shard = folder.shard.clone();
    let sweep_part = shard.as_ref().map(|s| s.shard.sweep_part(sweep));
    let sweep = sweep_part.as_ref().unwrap_or(sweep);
    let reads_server = shard.as_ref().is_none_or(|s| s.shard.index == 0);
    let traits = ModelTraits { sequence: session.sequence, decoupled: session.decoupled };
    let bounded = match bound_open_range(sweep, traits) {
        Ok(bounded) => bounded,
        Err(e) => {
            session.close().await;
            return Err(e);
        }
    };
    let sweep = bounded.as_ref().unwrap_or(sweep);
    let mut recorder = Recorder::create(sweep, context.wire, context.service_kind, traits, context.metrics, folder)
        .map_err(RunError::bad_input)?;
    if let (Some(start), Some(dir)) = (&shard, &sweep.output.dir) {
        let log = shard::ShardLog::open(dir.clone(), start, &config, &recorder.rows()).map_err(RunError::bad_input)?;
        recorder.log_shard(log);
    }
    if let Load::Periodic(periodic) = &sweep.load {
        let outcome = tokio::select! {
            outcome = drive_periodic(&mut session, sweep, *periodic, &context) => outcome,
            _ = interrupt.cancelled() => Err(RunError { failure: Failure::Interrupted, error: anyhow!("interrupted") }),
        };
        session.close().await;
        return outcome.map(|()| SweepOutcome { kind: sweep.kind, rows: Vec::new(), dir: sweep.output.dir.clone() });
    }
    let slots = shard.as_ref().and_then(|s| s.slots.clone());
    let mut step_inputs = Vec::new();
    // On a clock grid a point keeps to its slot: none borrows time from the next.
    let time_bank = if slots.is_some() { None } else { time_bank(sweep) };
    let measured = {
        let batches = async {
            // Built once for every batch size (the trace of --request-intervals is read here).
            let plan = LoadPlan {
                time_bank,
                shard: shard.as_ref().map(|s| (s.shard.index, s.shard.count)),
                slots: slots.clone(),
                ..load_plan(sweep)?
            };
            for batch in sweep.batch_sizes.values(MAX_OPEN_CONCURRENCY) {
                let requests = session.requests(sweep, batch).await?;
                step_inputs = requests.step_inputs;
                let target = SweepTarget {
                    client: session.client.clone(),
                    requests: requests.prepared,
                    model: session.model.clone(),
                    version: session.version.clone(),
                    server_stats: session.server_stats && reads_server,
                    composing: if reads_server { session.composing.clone() } else { Vec::new() },
                    check: requests.check,
                    check_fatal: !sweep.validate_outputs,
                    sequences: requests.sequences,
                    shm_regions: requests.shm_regions,
                };
                let settings = MeasureSettings {
                    keep_windows: shard.is_some(),
                    windows_on_offsets: slots.is_some(),
                    ..measure_settings(sweep, batch)
                };
                let measured = match mpi::world().filter(|_| shard.is_some()) {
                    Some(mpi) => {
                        let mut lined_up = mpi::LinedUp { inner: &mut recorder, mpi };
                        measure_sweep(&target, &plan, &settings, &mut lined_up).await
                    }
                    None => measure_sweep(&target, &plan, &settings, &mut recorder).await,
                };
                measured.map_err(sweep_error)?;
            }
            Ok::<(), RunError>(())
        };
        tokio::select! {
            outcome = batches => outcome,
            _ = interrupt.cancelled() => Err(RunError {
                failure: Failure::Interrupted,
                error: anyhow!("interrupted"),
            }),
        }
    };
    let session_mismatches = session.mismatches.clone();
    session.close().await;
    let kind = context.service_kind.to_lowercase();
    let export = sweep.output.profile_export_file.as_deref().map(|path| Export {
        path,
        service_kind: kind.as_str(),
        step_inputs: step_inputs.as_slice(),
    });
    let finished = recorder.finish(&config, export);
    let rows = recorder.rows();
    let mismatches = session_mismatches.load(std::sync::atomic::Ordering::Relaxed);
    match measured {
        Ok(()) if mismatches > 0 => {
            finished.map_err(RunError::bad_input)?;
            Err(RunError::target(anyhow!(
                "--validate-outputs: {mismatches} answer(s) did not match the expected output (counted as failed \
                 requests in the rows)"
            )))
        }
        Ok(()) => {
            finished.map_err(RunError::bad_input)?;
            Ok(SweepOutcome { kind: sweep.kind, rows, dir: sweep.output.dir.clone() })
        }
        Err(e) => {
            if let Err(write) = finished {
                tracing::warn!("writing the report of the measured rows: {write}");
            }
            if rows.is_empty() {
                return Err(e);
            }
            let place = match &sweep.output.dir {
                Some(dir) => format!(", written to {}", dir.display()),
                None => String::new(),
            };
            Err(e.context(format!("the sweep stopped after {} measured row(s){place}", rows.len())))
        }
    }
}

/// perf_analyzer's periodic concurrency: one run of `periodic` at the first batch size, written
/// to the profile export as its one experiment (concurrency 1, window `[0, u64::MAX]`, as
/// perf_analyzer 2.50 writes it); no rows, no summary.
async fn drive_periodic<C: InferClient>(
    session: &mut Session<C>,
    sweep: &Sweep,
    periodic: Periodic,
    context: &Context<'_>,
) -> Result<(), RunError> {
    let batch = sweep.batch_sizes.first();
    let requests = session.requests(sweep, batch).await?;
    if requests.sequences.is_some() {
        return Err(RunError::bad_input(anyhow!(
            "--periodic-concurrency-range with a sequence model is not supported"
        )));
    }
    let spec = PeriodicSpec {
        start: periodic.start,
        end: periodic.end,
        step: periodic.step,
        request_period: periodic.request_period,
    };
    let records = crate::load::periodic::run(session.client.clone(), requests.prepared, spec, requests.check)
        .await
        .map_err(RunError::client)?;
    let mut result = derive_point(&[], batch, LoadPoint::Concurrency(1), true, None);
    result.detail.requests = records;
    result.detail.window_boundaries_ns = vec![0, u64::MAX];
    let path = sweep.output.profile_export_file.as_deref().expect("the plan checks periodic runs have an export");
    let kind = context.service_kind.to_lowercase();
    crate::report::pa_export::write(path, &[result], &kind, &requests.step_inputs)
        .map_err(|e| RunError::bad_input(anyhow!("writing results: {e}")))
}

fn sweep_error(e: SweepError) -> RunError {
    match e {
        SweepError::Stopped { error, .. } => RunError::client(error),
        SweepError::Load(e) => RunError::bad_input(e),
        SweepError::Output(e) => RunError::bad_input(anyhow!("writing results: {e}")),
    }
}

/// The configuration table of report.md, from the model config the server reports.
fn run_config<C: InferClient>(session: &Session<C>, sweep: &Sweep, device: &str) -> RunConfig {
    let config = &session.config;
    let precision = config
        .input
        .first()
        .and_then(|i| crate::proto::inference::DataType::try_from(i.data_type).ok())
        .map(|t| t.as_str_name().trim_start_matches("TYPE_").to_string())
        .unwrap_or_else(|| "unknown".into());
    let backend = if config.backend.is_empty() { config.platform.clone() } else { config.backend.clone() };
    let basics = ConfigBasics {
        device: Device::Cpu(device.to_string()),
        backend,
        precision,
        max_batch_size: config.max_batch_size.max(0) as u64,
        instances: crate::server::config::instance_count(config) as u64,
    };
    RunConfig::from(basics)
        .with("Model", session.model.clone())
        .with("Protocol", sweep.protocol.to_string())
        .with("Shared memory", format!("{:?}", sweep.input.shared_memory).to_lowercase())
}

/// (baseline report.csv, current report.csv) per sweep of the run.
fn baseline_files(base: &Path, plan: &Plan) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let dirs: Vec<(&Sweep, &PathBuf)> =
        plan.sweeps.iter().filter_map(|s| s.output.dir.as_ref().map(|d| (s, d))).collect();
    if base.is_dir() {
        dirs.iter()
            .map(|(sweep, dir)| {
                let sub = sweep.kind.name();
                let nested = base.join(sub).join("report.csv");
                let file = if nested.is_file() { nested } else { base.join("report.csv") };
                if !file.is_file() {
                    anyhow::bail!("baseline {} has no {sub}/report.csv", base.display());
                }
                Ok((file, dir.join("report.csv")))
            })
            .collect()
    } else if base.is_file() {
        if dirs.len() != 1 {
            anyhow::bail!(
                "this plan runs {} sweeps: give --gate a baseline run folder (with offline/ and online/)",
                dirs.len()
            );
        }
        Ok(vec![(base.to_path_buf(), dirs[0].1.join("report.csv"))])
    } else {
        anyhow::bail!("baseline {} does not exist", base.display())
    }
}

fn gate_run(
    pairs: &[(PathBuf, PathBuf)],
    thresholds: &crate::gate::thresholds::GateThresholds,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    let mut passed = true;
    for (base, current) in pairs {
        let baseline_rows =
            crate::gate::results::read_results(base, 1).with_context(|| format!("baseline {}", base.display()))?;
        let current_rows = crate::gate::results::read_results(current, 1)?;
        let outcome = crate::gate::verdict::compare(&baseline_rows, &current_rows, thresholds)?;
        let (b, c) = (base.display().to_string(), current.display().to_string());
        let sources = crate::gate::markdown::Sources { baseline: &b, current: &c };
        let code = crate::gate::report(&outcome, &sources, Default::default())?;
        passed &= code == ExitCode::SUCCESS;
    }
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::from(EXIT_REGRESSION) })
}
