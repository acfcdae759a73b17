//! `perfbench search`: the model configuration (instances, `max_batch_size`, dynamic batching,
//! model parameters) that gives the most throughput (inferences/s, or a generative model's
//! output tokens/s) or the lowest latency under a latency budget. The space and
//! the budget come from `plan::search`; `strategy` picks configurations (pure), `execute`
//! applies and measures them through the repository API and `run`'s measuring loop, and
//! `output` writes the results folder.

pub mod config;
pub mod execute;
pub mod output;
pub mod strategy;

use std::process::ExitCode;

use crate::plan::search::{Candidate, SearchPlan};
use crate::proto::inference::ModelConfig;
use crate::results::ReportRow;
use anyhow::anyhow;

use crate::plan::{Protocol, Target};
use crate::run::{start_embedded, worker_threads, RunError};

/// One measured point of a configuration.
#[derive(Clone, Debug)]
pub struct SearchRow {
    pub row: ReportRow,
    /// The point met the latency budget.
    pub met: bool,
}

/// One configuration: its points in ramp order, or why it has none.
#[derive(Clone, Debug)]
pub struct ConfigOutcome {
    pub candidate: Candidate,
    /// The model's own configuration, measured first for comparison.
    pub default: bool,
    pub rows: Vec<SearchRow>,
    pub error: Option<String>,
}

impl ConfigOutcome {
    /// Its best point under the budget by the objective.
    pub fn best(&self, plan: &SearchPlan) -> Option<&SearchRow> {
        let key = |r: &SearchRow| plan.search.objective.score(&r.row, &plan.search.budget);
        self.rows.iter().filter(|r| r.met && !key(r).is_nan()).max_by(|a, b| key(a).total_cmp(&key(b)))
    }
}

/// What a point delivers, the search's throughput: inferences per second, or (a generative
/// sweep) output tokens per second.
pub fn delivered(plan: &SearchPlan, row: &ReportRow) -> f64 {
    match plan.sweep.generative {
        Some(_) => row.tokens.as_ref().map_or(f64::NAN, |t| t.output_tokens_per_s),
        None => row.throughput,
    }
}

/// [`delivered`]'s unit.
pub fn delivered_unit(plan: &SearchPlan) -> &'static str {
    match plan.sweep.generative {
        Some(_) => "output tokens/s",
        None => "infer/s",
    }
}

/// What cut a search short while its strategy still had configurations to try.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cut {
    /// `--max-configs N`: N configurations were tried beside the model's own.
    MaxConfigs(usize),
    /// `--max-minutes M` had passed when the next configuration was due.
    MaxMinutes(f64),
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::MaxConfigs(n) => write!(
                f,
                "Stopped early: --max-configs {n} reached after {n} configurations beside the default, with more left to try."
            ),
            Cut::MaxMinutes(m) => write!(
                f,
                "Stopped early: --max-minutes {m} had passed, so no further configuration was started."
            ),
        }
    }
}

/// What a search measured: the model's original config, every configuration's outcome, and
/// what cut it short, if anything did.
#[derive(Default)]
pub struct Measured {
    pub original: Option<ModelConfig>,
    pub configs: Vec<ConfigOutcome>,
    pub cut: Option<Cut>,
    /// The winner measured again in fresh windows before it is written (`winner.csv`).
    pub confirmed: Option<SearchRow>,
}

/// Runs the search, writes its folder, and returns the exit code: 0, 130 when interrupted (the
/// folder holds what was measured), or the failure's own.
///
/// Without `-u` the bundled server runs on a runtime of its own, with the threads `perfbench
/// serve` would have, and the client on the threads it has against a remote server: the winner
/// is then measured as it will be served by `perfbench serve`, not on workers shared with the
/// client (where the two competed for the same threads and the figure did not reproduce).
pub fn run(plan: &SearchPlan) -> Result<ExitCode, RunError> {
    let remote = Target::Remote { url: String::new() };
    let runtime = crate::run::client_runtime(worker_threads(&plan.sweep, &remote))?;
    let mut measured = Measured::default();
    let (server, url) = match &plan.target {
        Target::Remote { url } => (None, url.clone()),
        Target::Embedded { model_repository } => {
            let serving = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("perfbench-serve")
                .build()
                .map_err(RunError::target)?;
            let running = serving
                .block_on(start_embedded(&plan.model, model_repository.clone(), &[]))
                .map_err(RunError::bad_input)?;
            let url = match plan.sweep.protocol {
                Protocol::Http => running.http_url(),
                Protocol::Grpc => running.grpc_url(),
            };
            (Some((serving, running)), url)
        }
        Target::InProcess { .. } => {
            return Err(RunError::bad_input(anyhow!("search needs a server: drop --service-kind inprocess")))
        }
    };
    let outcome = runtime.block_on(execute::search(plan, &url, &mut measured));
    if let Some((serving, running)) = server {
        serving.block_on(running.shutdown());
    }
    // Nothing was changed when the target was refused before the first configuration.
    if measured.original.is_some() && !measured.configs.is_empty() {
        let summary = output::write(plan, &measured).map_err(RunError::bad_input)?;
        println!("{summary}");
        println!("Results: {}", plan.out().display());
    }
    outcome.map(|()| ExitCode::SUCCESS)
}
