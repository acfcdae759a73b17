//! One sweep through one client, in three steps: [`open`](OpenSweep::open) (the session, the
//! sweep as this process runs it, the recorder), [`each_batch`](OpenSweep::each_batch) (the
//! batch sizes, each measured over the load plan built once), and
//! [`finish`](OpenSweep::finish) (the session closed, report and export written, the outcome
//! with its exit code). perf_analyzer's periodic concurrency is a one-shot in place of the
//! batches.

use anyhow::anyhow;

use super::interrupt::Interrupt;
use super::mpi;
use super::observe::{Export, FolderStart, Recorder};
use super::prepare::{bound_open_range, load_plan, measure_settings, time_bank, ModelTraits};
use super::session::Session;
use super::shard::{ShardLog, ShardStart};
use super::sweep::{sweep as measure_sweep, LoadPlan, SweepError, Target as SweepTarget};
use super::{Failure, RunError, SweepOutcome};
use crate::client::InferClient;
use crate::load::PeriodicSpec;
use crate::measure::window::derive_point;
use crate::measure::MeasureSettings;
use crate::plan::{Load, Model, Periodic, Sweep, MAX_OPEN_CONCURRENCY};
use crate::report::pa_summary::Wire;
use crate::report::{ConfigBasics, Device, RunConfig};
use crate::results::LoadPoint;
use crate::tensor::Tensor;

/// How a sweep's endpoint describes itself in the outputs.
pub(super) struct Context<'a> {
    pub wire: Wire,
    /// "TRITON" or "INPROCESS", as perf_analyzer's settings block prints it.
    pub service_kind: &'static str,
    /// The metrics endpoint when the plan names none.
    pub metrics: &'a str,
    pub device: &'a str,
}

/// Runs one sweep through `client`: open, each batch (or the periodic one-shot), finish.
pub(super) async fn drive<C: InferClient>(
    client: C,
    model: &Model,
    sweep: &Sweep,
    folder: FolderStart,
    context: Context<'_>,
    interrupt: &Interrupt,
) -> Result<SweepOutcome, RunError> {
    let mut open = OpenSweep::open(client, model, sweep, folder, &context).await?;
    let measured = tokio::select! {
        outcome = open.run(&context) => outcome,
        _ = interrupt.cancelled() => Err(RunError { failure: Failure::Interrupted, error: anyhow!("interrupted") }),
    };
    open.finish(measured, &context).await
}

/// A sweep ready to measure: its session, the sweep as this process runs it, its recorder.
struct OpenSweep<C: InferClient> {
    session: Session<C>,
    /// This shard's part of the sweep, its open range bounded by the model.
    sweep: Sweep,
    config: RunConfig,
    recorder: Recorder,
    shard: Option<ShardStart>,
    /// Only shard 0 reads the server's counters, so they count once.
    reads_server: bool,
    /// The step inputs of the last batch, for the profile export.
    step_inputs: Vec<Vec<(String, Tensor)>>,
}

impl<C: InferClient> OpenSweep<C> {
    async fn open(
        client: C,
        model: &Model,
        sweep: &Sweep,
        folder: FolderStart,
        context: &Context<'_>,
    ) -> Result<OpenSweep<C>, RunError> {
        let bls = &sweep.bls_composing_models;
        let session = Session::open(client, model, sweep.call.streaming, bls, sweep.call.stall_timeout()).await?;
        let config = run_config(&session, sweep, context.device);
        // A shard runs its part of the sweep's request counts and sequence ids (load levels are
        // split per point).
        let shard = folder.shard.clone();
        let sweep = shard.as_ref().map_or_else(|| sweep.clone(), |s| s.shard.sweep_part(sweep));
        let reads_server = shard.as_ref().is_none_or(|s| s.shard.index == 0);
        let traits = ModelTraits { sequence: session.sequence, decoupled: session.decoupled };
        let sweep = match bound_open_range(&sweep, traits) {
            Ok(bounded) => bounded.unwrap_or(sweep),
            Err(e) => {
                session.close().await;
                return Err(e);
            }
        };
        let mut recorder =
            Recorder::create(&sweep, context.wire, context.service_kind, traits, context.metrics, folder)
                .map_err(RunError::bad_input)?;
        if let (Some(start), Some(dir)) = (&shard, &sweep.output.dir) {
            let log = ShardLog::open(dir.clone(), start, &config, &recorder.rows()).map_err(RunError::bad_input)?;
            recorder.log_shard(log);
        }
        Ok(OpenSweep { session, sweep, config, recorder, shard, reads_server, step_inputs: Vec::new() })
    }

    /// The sweep's measuring: each batch size, or perf_analyzer's periodic one-shot.
    async fn run(&mut self, context: &Context<'_>) -> Result<(), RunError> {
        match self.sweep.load {
            Load::Periodic(periodic) => self.periodic(periodic, context).await,
            _ => self.each_batch().await,
        }
    }

    /// Every batch size over the one load plan (the trace of --request-intervals is read once).
    async fn each_batch(&mut self) -> Result<(), RunError> {
        let shard = self.shard.as_ref();
        let slots = shard.and_then(|s| s.slots.clone());
        let plan = LoadPlan {
            // On a clock grid a point keeps to its slot: none borrows time from the next.
            time_bank: if slots.is_some() { None } else { time_bank(&self.sweep) },
            shard: shard.map(|s| (s.shard.index, s.shard.count)),
            slots: slots.clone(),
            ..load_plan(&self.sweep)?
        };
        for batch in self.sweep.batch_sizes.values(MAX_OPEN_CONCURRENCY) {
            let session = &mut self.session;
            let requests = session.requests(&self.sweep, batch).await?;
            self.step_inputs = requests.step_inputs;
            let target = SweepTarget {
                client: session.client.clone(),
                requests: requests.prepared,
                model: session.model.clone(),
                version: session.version.clone(),
                server_stats: session.server_stats && self.reads_server,
                composing: if self.reads_server { session.composing.clone() } else { Vec::new() },
                check: requests.check,
                check_fatal: !self.sweep.validate_outputs,
                sequences: requests.sequences,
                shm_regions: requests.shm_regions,
            };
            let settings = MeasureSettings {
                keep_windows: shard.is_some(),
                windows_on_offsets: slots.is_some(),
                ..measure_settings(&self.sweep, batch)
            };
            let measured = match mpi::world().filter(|_| shard.is_some()) {
                Some(mpi) => {
                    let mut lined_up = mpi::LinedUp { inner: &mut self.recorder, mpi };
                    measure_sweep(&target, &plan, &settings, &mut lined_up).await
                }
                None => measure_sweep(&target, &plan, &settings, &mut self.recorder).await,
            };
            measured.map_err(sweep_error)?;
        }
        Ok(())
    }

    /// perf_analyzer's periodic concurrency: one run of `periodic` at the first batch size,
    /// written to the profile export as its one experiment (concurrency 1, window
    /// `[0, u64::MAX]`, as perf_analyzer 2.50 writes it); no rows, no summary.
    async fn periodic(&mut self, periodic: Periodic, context: &Context<'_>) -> Result<(), RunError> {
        let sweep = &self.sweep;
        let batch = sweep.batch_sizes.first();
        let requests = self.session.requests(sweep, batch).await?;
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
        let records = crate::load::periodic::run(self.session.client.clone(), requests.prepared, spec, requests.check)
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

    /// Closes the session and writes what needs every row (on success, failure and interruption
    /// alike); the outcome keeps the rows measured before a failure.
    async fn finish(mut self, measured: Result<(), RunError>, context: &Context<'_>) -> Result<SweepOutcome, RunError> {
        let sweep = &self.sweep;
        let mismatches = self.session.mismatches.clone();
        self.session.close().await;
        if let Load::Periodic(_) = sweep.load {
            // The one-shot wrote its export itself: no rows, no report.
            return measured.map(|()| SweepOutcome {
                kind: sweep.kind,
                rows: Vec::new(),
                dir: sweep.output.dir.clone(),
                table: None,
            });
        }
        let kind = context.service_kind.to_lowercase();
        let export = sweep.output.profile_export_file.as_deref().map(|path| Export {
            path,
            service_kind: kind.as_str(),
            step_inputs: self.step_inputs.as_slice(),
        });
        let finished = self.recorder.finish(&self.config, export);
        let rows = self.recorder.rows();
        let mismatches = mismatches.load(std::sync::atomic::Ordering::Relaxed);
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
                Ok(SweepOutcome { kind: sweep.kind, rows, dir: sweep.output.dir.clone(), table: None })
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
    let config = RunConfig::from(basics)
        .with("Model", session.model.clone())
        .with("Protocol", sweep.protocol.to_string())
        .with("Shared memory", format!("{:?}", sweep.input.shared_memory).to_lowercase());
    let labels = sweep.plain.output.labels.iter().flatten();
    labels.fold(config, |config, label| config.with(&label.name, &label.value))
}
