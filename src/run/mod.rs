//! Runs a [`Plan`]: starts the embedded server when the plan has no URL, opens one
//! [`Session`](session::Session) per sweep (the only place a wire client is chosen), measures
//! each batch size × load level through it, writes every row as it is measured, and gates the
//! result. Errors carry the exit code they end the process with.

pub mod composing;
mod drive;
pub(crate) mod generative;
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

use self::drive::{drive, Context};
use self::interrupt::Interrupt;
use self::observe::FolderStart;
use crate::client::deadline::Deadline;
use crate::client::grpc::GrpcClient;
use crate::client::http::HttpClient;
use crate::client::inprocess::InProcessClient;
use crate::client::ClientError;
use crate::plan::{Model, Plan, Protocol, Shard, Sweep, SweepKind, Target};
use crate::report::pa_summary::Wire;
use crate::results::csv::{read_csv, Unit};
use crate::results::ReportRow;
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
    /// The table printed at the end in place of the rows' (a generative sweep's report.md).
    pub table: Option<String>,
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
            match &outcome.table {
                Some(table) => println!("{table}"),
                None => println!(
                    "{}",
                    crate::report::table::render_results(&outcome.rows, &crate::report::Layout::default())
                ),
            }
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
        /// The bundled server's: its metrics endpoint is known to be there.
        embedded: bool,
    },
    InProcess(Arc<InferenceServer>),
}

impl Endpoint {
    /// Where a generative sweep reaches the server (only over the network).
    fn address<'a>(&'a self, sweep: &'a Sweep) -> Result<generative::Address<'a>, RunError> {
        match self {
            Endpoint::Network { http, grpc, metrics, embedded, .. } => {
                // A remote server's counters only where the plan names its metrics URL.
                let named = sweep.call.metrics.as_ref().and_then(|m| m.url.as_deref());
                let metrics = if *embedded { Some(metrics.as_str()) } else { named };
                Ok(generative::Address { http, grpc, metrics })
            }
            Endpoint::InProcess(_) => {
                Err(RunError::bad_input(anyhow!("a generative sweep needs a server: drop --service-kind inprocess")))
            }
        }
    }
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
            embedded: false,
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
                embedded: true,
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
        let sweep_run = async {
            match &sweep.generative {
                Some(g) => {
                    let address = endpoint.address(sweep)?;
                    generative::run(&plan.model, sweep, g, address, &folder_plan, plan.shard, plan.resume).await
                }
                None => run_sweep(&plan.model, sweep, folder, &endpoint, &interrupt).await,
            }
        };
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
        // A generative mix (`-m a,b`) loads each of its models.
        None => model.name.split(',').map(|name| name.trim().to_string()).collect(),
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
