//! Runs a search: checks that the target takes config overrides, measures the model's own
//! configuration, then each candidate the strategy picks (applied through the repository
//! `load` call), and restores the original configuration at the end, on error and on Ctrl-C.
//! Every point is a real profile point: `run::sweep` with the sweep's windows and stop rule, or
//! (a generative sweep) one generative profile of that concurrency.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use std::io::IsTerminal;

use indicatif::{HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::config::{apply, as_candidate, filled, to_json, unsearchable};
use super::output::winner;
use super::strategy::{ramp_goes_on, Strategy};
use super::{delivered, delivered_unit, ConfigOutcome, Cut, Measured, SearchRow};
use crate::client::grpc::GrpcClient;
use crate::client::http::HttpClient;
use crate::client::{ClientResult, InferClient};
use crate::load::LoadMode;
use crate::plan::search::{Candidate, Mode, Search, SearchPlan};
use crate::plan::Protocol;
use crate::proto::inference::ModelConfig;
use crate::results::{PointResult, ReportRow};
use crate::run::generative::{measure_concurrency, Address};
use crate::run::interrupt::Interrupt;
use crate::run::session::Session;
use crate::run::sweep::{sweep as measure_sweep, SweepError, SweepObserver, SweepPoints, Target as SweepTarget};
use crate::run::{connect_options, load_plan, measure_settings, Failure, RunError};

/// Runs the search against `url` (the target's, or the bundled server's that `run` started);
/// `measured` holds whatever was measured even when it fails or is interrupted, so the results
/// are written either way.
pub async fn search(plan: &SearchPlan, url: &str, measured: &mut Measured) -> Result<(), RunError> {
    let interrupt = Interrupt::install();
    let connect = connect_options(&plan.sweep);
    let tls = plan.sweep.call.tls.clone();
    let server = Server { url, connect: || HttpClient::with_tls(url, &connect, &tls) };
    match plan.sweep.protocol {
        Protocol::Http => searching(plan, measured, &interrupt, &server).await,
        Protocol::Grpc => {
            let server = Server { url, connect: || GrpcClient::with_tls(url, &connect, &tls) };
            searching(plan, measured, &interrupt, &server).await
        }
    }
}

/// The server searched: its URL, and how to make a fresh client of one kind (one per
/// configuration).
struct Server<'a, F> {
    url: &'a str,
    connect: F,
}

impl<C: InferClient, F: Fn() -> ClientResult<C>> Server<'_, F> {
    fn client(&self) -> Result<C, RunError> {
        (self.connect)().map_err(RunError::client)
    }
}

/// The search over one kind of client.
async fn searching<C: InferClient, F: Fn() -> ClientResult<C>>(
    plan: &SearchPlan,
    measured: &mut Measured,
    interrupt: &Interrupt,
    server: &Server<'_, F>,
) -> Result<(), RunError> {
    let control = server.client()?;
    let original = check_target(&control, plan).await?;
    // The space as the model has it where the plan leaves a dimension to the model.
    let space = filled(&plan.search.space, &original).map_err(|e| RunError::bad_input(anyhow!(e)))?;
    let plan = &SearchPlan { search: Search { space, ..plan.search.clone() }, ..plan.clone() };
    let original_json = to_json(&original);
    measured.original = Some(original.clone());
    let walked = tokio::select! {
        outcome = async {
            walk(plan, &original, &mut measured.configs, &mut measured.cut, server, &control).await?;
            confirm(plan, &original, measured, server, &control).await
        } => outcome,
        _ = interrupt.cancelled() => Err(RunError { failure: Failure::Interrupted, error: anyhow!("interrupted") }),
    };
    let restored = control.repository_load(&plan.model.name, Some(&original_json)).await;
    match (walked, restored) {
        (Err(e), Ok(())) => Err(e),
        (Err(e), Err(r)) => Err(e.context(format!("and restoring the original config failed: {r}"))),
        (Ok(()), Err(r)) => {
            Err(RunError::target(anyhow!("restoring the original config of '{}': {r}", plan.model.name)))
        }
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// The target must take config overrides, checked before anything changes: it lists the
/// repository extension, the model has a scheduler the search varies, and loading the model
/// with its own config is accepted (a no-op that Triton refuses outside explicit mode).
async fn check_target<C: InferClient>(control: &C, plan: &SearchPlan) -> Result<ModelConfig, RunError> {
    let name = &plan.model.name;
    let info = control.server_metadata().await.map_err(RunError::client)?;
    if !info.extensions.iter().any(|e| e == "model_repository") {
        return Err(RunError::bad_input(anyhow!(
            "the server does not list the model_repository extension: search applies configurations through it"
        )));
    }
    let original = control
        .model_config(name, &plan.model.version)
        .await
        .map_err(|e| RunError::client(e).context(format!("model '{name}'")))?;
    if let Some(why) = unsearchable(&original) {
        return Err(RunError::bad_input(anyhow!(why)));
    }
    match control.repository_load(name, Some(&to_json(&original))).await {
        Ok(()) => Ok(original),
        Err(e) if e.is_fatal() => Err(RunError::client(e)),
        Err(e) => Err(RunError::bad_input(anyhow!(
            "the server refuses to load '{name}' with a config ({e}); search needs loads allowed (Triton: \
             --model-control-mode=explicit)"
        ))),
    }
}

/// The default configuration, then the strategy's candidates, within --max-configs and
/// --max-minutes (checked between configurations; `cut` says which one ended the walk).
/// Outcomes go to `configs` as they are measured, so an interrupted walk (its future dropped)
/// leaves them there.
async fn walk<C: InferClient, F: Fn() -> ClientResult<C>>(
    plan: &SearchPlan,
    original: &ModelConfig,
    configs: &mut Vec<ConfigOutcome>,
    cut: &mut Option<Cut>,
    server: &Server<'_, F>,
    control: &C,
) -> Result<(), RunError> {
    let search = &plan.search;
    let deadline = search.max_minutes.map(|m| Instant::now() + Duration::from_secs_f64(m * 60.0));
    let bound = Strategy::bound(search.mode, &search.space);
    let planned = search.max_configs.map_or(bound, |max| bound.min(max));
    let progress = Progress::new(planned + 1);
    let measure = |candidate: Candidate, config: ModelConfig, index: usize| {
        let progress = &progress;
        async move {
            progress.started(&candidate);
            let outcome = measure_config(plan, control, server, candidate, &config, index).await;
            if let Ok(outcome) = &outcome {
                progress.done(plan, outcome);
            }
            outcome
        }
    };
    let first = measure(as_candidate(original, &search.space), original.clone(), 0).await?;
    let default_error = first.error.clone();
    configs.push(first);
    if let Some(e) = default_error {
        return Err(RunError::bad_input(anyhow!("the model's own configuration could not be measured: {e}")));
    }
    let mut strategy = Strategy::new(search.mode, &search.space, search.improvement_pct);
    let mut tried = 0;
    while let Some(candidate) = strategy.propose() {
        *cut = match (search.max_configs, deadline) {
            (Some(max), _) if tried >= max => Some(Cut::MaxConfigs(max)),
            (_, Some(deadline)) if Instant::now() >= deadline => search.max_minutes.map(Cut::MaxMinutes),
            _ => None,
        };
        if cut.is_some() {
            break;
        }
        let outcome = measure(candidate.clone(), apply(original, &candidate), configs.len()).await?;
        strategy.score(outcome.score(plan));
        configs.push(outcome);
        tried += 1;
    }
    progress.finish();
    Ok(())
}

/// The winner measured again before it is written: its configuration applied anew, and its
/// winning concurrency profiled on a new connection, after the sweep's warm-up, in fresh
/// windows. The walk's figure is the best of many points measured in noisy windows, so it leans
/// high (the winner's curse); this one is measured once, chosen by nothing, with its interval.
async fn confirm<C: InferClient, F: Fn() -> ClientResult<C>>(
    plan: &SearchPlan,
    original: &ModelConfig,
    measured: &mut Measured,
    server: &Server<'_, F>,
    control: &C,
) -> Result<(), RunError> {
    let Some((config, row)) = winner(plan, &measured.configs) else { return Ok(()) };
    let (candidate, level) = (config.candidate.clone(), row.row.load.amount());
    let config = if config.default { original.clone() } else { apply(original, &candidate) };
    control.repository_load(&plan.model.name, Some(&to_json(&config))).await.map_err(RunError::client)?;
    let point = match Points::open(plan, server, plan.out().join("winner")).await {
        Ok(points) => {
            let point = points.measure(plan, level as u64).await;
            points.close().await;
            point
        }
        Err(e) => Err(e),
    };
    match point {
        Ok(row) => measured.confirmed = row.map(|row| SearchRow { met: plan.search.budget.met_by(&row), row }),
        Err(e) if e.failure == Failure::Target => return Err(e),
        // The walk's figures stand; the folder says nothing it did not measure.
        Err(e) => tracing::warn!("the winner could not be measured again: {e}"),
    }
    Ok(())
}

/// The bar over configurations, with an ETA: indicatif's on a terminal; elsewhere (a CI log, a
/// pipe) one plain line on stderr per configuration measured, from the same bar's counts.
struct Progress {
    bar: ProgressBar,
    plain: bool,
}

impl Progress {
    fn new(planned: usize) -> Progress {
        let plain = !std::io::stderr().is_terminal();
        let bar = if plain {
            ProgressBar::with_draw_target(Some(planned as u64), ProgressDrawTarget::hidden())
        } else {
            ProgressBar::new(planned as u64)
        };
        let style = ProgressStyle::with_template("{bar:30} {pos}/{len} configurations, ETA {eta} | {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Progress { bar, plain }
    }

    fn started(&self, candidate: &Candidate) {
        self.bar.set_message(candidate.to_string());
    }

    fn done(&self, plan: &SearchPlan, outcome: &ConfigOutcome) {
        self.bar.inc(1);
        if self.plain {
            let (done, planned) = (self.bar.position(), self.bar.length().unwrap_or_default());
            let eta = if done < planned { format!(", ETA {}", HumanDuration(self.bar.eta())) } else { String::new() };
            let result = match (&outcome.error, outcome.best(plan)) {
                (Some(e), _) => format!("failed: {e}"),
                (None, Some(best)) => {
                    format!("best {:.1} {} within the budget", delivered(plan, &best.row), delivered_unit(plan))
                }
                (None, None) => "no point within the budget".into(),
            };
            eprintln!("search: {done}/{planned} configurations{eta} | {}: {result}", outcome.candidate);
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Applies one configuration and ramps the client concurrency over it. A configuration the
/// server refuses, or whose requests fail, is an outcome with its error; a server that is gone
/// ends the search. `index` names its folder of points where they leave files.
async fn measure_config<C: InferClient, F: Fn() -> ClientResult<C>>(
    plan: &SearchPlan,
    control: &C,
    server: &Server<'_, F>,
    candidate: Candidate,
    config: &ModelConfig,
    index: usize,
) -> Result<ConfigOutcome, RunError> {
    let mut outcome = ConfigOutcome { candidate, default: index == 0, rows: Vec::new(), error: None };
    if let Err(e) = control.repository_load(&plan.model.name, Some(&to_json(config))).await {
        if e.is_fatal() {
            return Err(RunError::client(e));
        }
        outcome.error = Some(format!("load refused: {e}"));
        return Ok(outcome);
    }
    let measured = match Points::open(plan, server, plan.out().join("points").join(format!("config{index}"))).await {
        Ok(points) => {
            let measured = ramp(plan, &points, &mut outcome).await;
            points.close().await;
            measured
        }
        Err(e) => Err(e),
    };
    match measured {
        Ok(()) => Ok(outcome),
        Err(e) if e.failure == Failure::Target => Err(e),
        Err(e) => {
            outcome.error = Some(e.to_string());
            Ok(outcome)
        }
    }
}

/// The concurrency ramp over one applied configuration, one profile point per level.
async fn ramp<C: InferClient>(
    plan: &SearchPlan,
    points: &Points<C>,
    outcome: &mut ConfigOutcome,
) -> Result<(), RunError> {
    let mut best: Option<f64> = None;
    for &level in &plan.search.space.concurrency {
        let Some(row) = points.measure(plan, level).await? else { break };
        let met = plan.search.budget.met_by(&row);
        let rate = delivered(plan, &row);
        outcome.rows.push(SearchRow { row, met });
        if !ramp_goes_on(plan.search.mode == Mode::Quick, met, rate, best, plan.search.improvement_pct) {
            break;
        }
        best = Some(best.map_or(rate, |b| b.max(rate)));
    }
    Ok(())
}

/// How one configuration's points are measured.
enum Points<C: InferClient> {
    /// A tensor model: the sweep's measuring loop, on a session of its own.
    Tensor { session: Box<Session<C>>, target: Box<SweepTarget<C>> },
    /// A generative sweep: one profile per level against `url`, each level's files under `dir`.
    Generative { url: String, dir: PathBuf },
}

impl<C: InferClient> Points<C> {
    async fn open<F: Fn() -> ClientResult<C>>(
        plan: &SearchPlan,
        server: &Server<'_, F>,
        dir: PathBuf,
    ) -> Result<Points<C>, RunError> {
        if plan.sweep.generative.is_some() {
            return Ok(Points::Generative { url: server.url.to_string(), dir });
        }
        let client = server.client()?;
        let call = &plan.sweep.call;
        let bls = &plan.sweep.bls_composing_models;
        let mut session = Session::open(client, &plan.model, call.streaming, bls, call.stall_timeout()).await?;
        match target(plan, &mut session).await {
            Ok(target) => Ok(Points::Tensor { session: Box::new(session), target: Box::new(target) }),
            Err(e) => {
                session.close().await;
                Err(e)
            }
        }
    }

    /// One profile point at `level` clients, with the sweep's warm-up, windows and stop rule
    /// (a generative sweep's: its request count or duration).
    async fn measure(&self, plan: &SearchPlan, level: u64) -> Result<Option<ReportRow>, RunError> {
        match self {
            Points::Tensor { target, .. } => measure_level(plan, target, level).await,
            Points::Generative { url, dir } => {
                let address = Address { http: url, grpc: url, metrics: None };
                let dir = dir.join(format!("c{level}"));
                Ok(Some(measure_concurrency(&plan.model, &plan.sweep, address, &dir, level).await?))
            }
        }
    }

    async fn close(self) {
        if let Points::Tensor { session, .. } = self {
            session.close().await;
        }
    }
}

/// What the sweep sends to the applied configuration: the first batch size's requests.
async fn target<C: InferClient>(plan: &SearchPlan, session: &mut Session<C>) -> Result<SweepTarget<C>, RunError> {
    let batch = plan.sweep.batch_sizes.first();
    let requests = session.requests(&plan.sweep, batch).await?;
    Ok(SweepTarget {
        client: session.client.clone(),
        requests: requests.prepared,
        model: session.model.clone(),
        version: session.version.clone(),
        server_stats: session.server_stats,
        composing: session.composing.clone(),
        check: requests.check,
        check_fatal: !plan.sweep.validate_outputs,
        sequences: requests.sequences,
        shm_regions: requests.shm_regions,
    })
}

/// One tensor profile point at `level` clients.
async fn measure_level<C: InferClient>(
    plan: &SearchPlan,
    target: &SweepTarget<C>,
    level: u64,
) -> Result<Option<ReportRow>, RunError> {
    let settings = measure_settings(&plan.sweep, plan.sweep.batch_sizes.first());
    let points = SweepPoints::Concurrencies(vec![level]);
    let load = crate::run::sweep::LoadPlan { points, latency_threshold_us: None, ..load_plan(&plan.sweep)? };
    let results = measure_sweep(target, &load, &settings, &mut Quiet).await.map_err(|e| match e {
        SweepError::Stopped { error, .. } => RunError::client(error),
        SweepError::Load(e) => RunError::bad_input(e),
        SweepError::Output(e) => RunError::bad_input(e),
    })?;
    Ok(results.into_iter().next().map(|p| p.row))
}

/// The search writes its own rows; the sweep's observer only has to accept them.
struct Quiet;

impl SweepObserver for Quiet {
    fn point_started(&mut self, mode: &LoadMode) {
        tracing::debug!(?mode, "search point started");
    }

    fn point_done(&mut self, _result: &PointResult) -> std::io::Result<()> {
        Ok(())
    }
}

impl ConfigOutcome {
    /// The climb's score: the best objective over the points that met the budget.
    pub fn score(&self, plan: &SearchPlan) -> Option<f64> {
        self.best(plan).map(|r| plan.search.objective.score(&r.row, &plan.search.budget))
    }
}
