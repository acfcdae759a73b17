//! `perfbench search`: its flags resolve into a [`SearchPlan`] (exit 2 on any bad input before
//! anything starts): the space, the budget, and an online sweep whose measurement settings
//! every point of the search uses.

use std::path::PathBuf;

use clap::Args;

use super::profile::{target, CommonArgs};
use crate::plan::search::{Budget, Mode, Objective, SearchPlan, SpaceSettings, IMPROVEMENT_PCT};
use crate::plan::settings::{default_out, resolve};
use crate::plan::{invalid, Levels, Model, PlanError, SweepKind};

#[derive(Args, Debug, Clone)]
pub struct SearchArgs {
    /// Model whose configuration is searched.
    #[arg(short = 'm', long = "model-name")]
    pub model: String,
    /// The latency a configuration must keep: STAT=TIME, STAT p50, p90, p95, p99 or avg (e.g. p99=20ms).
    #[arg(long = "latency-budget")]
    pub latency_budget: String,
    /// What ranks the configurations that meet the budget: throughput or latency.
    #[arg(long = "objective", default_value = "throughput")]
    pub objective: String,
    /// quick (climb one dimension at a time while it pays) or brute (the whole grid).
    #[arg(long = "mode", default_value = "quick")]
    pub mode: String,
    /// Most configurations tried (beside the model's own).
    #[arg(long = "max-configs")]
    pub max_configs: Option<usize>,
    /// No new configuration is started after this many minutes.
    #[arg(long = "max-minutes")]
    pub max_minutes: Option<f64>,
    /// Instance counts: a list 1,2,4 or a doubling range 1..8.
    #[arg(long = "instances")]
    pub instances: Option<String>,
    /// max_batch_size values: a list 1,8,32,128 or a doubling range 1..128.
    #[arg(long = "max-batch-size")]
    pub max_batch_size: Option<String>,
    /// Dynamic batching: on, off, or on,off.
    #[arg(long = "dynamic-batching")]
    pub dynamic_batching: Option<String>,
    /// The dynamic batcher's max_queue_delay_microseconds values (list or range).
    #[arg(long = "queue-delay-us")]
    pub queue_delay_us: Option<String>,
    /// One set of preferred batch sizes, e.g. 4,8, or none (repeatable: each set is tried).
    #[arg(long = "preferred-batch-sizes")]
    pub preferred_batch_sizes: Vec<String>,
    /// Client concurrencies tried on each configuration, in order; a ramp stops once the budget breaks.
    #[arg(long = "concurrency")]
    pub concurrency: Option<String>,
    /// Client batch size of each request.
    #[arg(short = 'b', long = "batch-size")]
    pub batch: Option<u64>,
    /// Results folder (default: results/<model>-search-<timestamp>/).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub flags: CommonArgs,
}

impl SearchArgs {
    pub fn space(&self) -> SpaceSettings {
        SpaceSettings {
            instances: self.instances.clone(),
            max_batch_size: self.max_batch_size.clone(),
            dynamic_batching: self.dynamic_batching.clone(),
            queue_delay_us: self.queue_delay_us.clone(),
            preferred_batch_sizes: (!self.preferred_batch_sizes.is_empty()).then(|| self.preferred_batch_sizes.clone()),
            concurrency: self.concurrency.clone(),
        }
    }

    pub fn plan(&self) -> Result<SearchPlan, PlanError> {
        let budget: Budget = self.latency_budget.parse()?;
        let objective: Objective = self.objective.parse()?;
        let mode: Mode = self.mode.parse()?;
        if self.max_configs == Some(0) {
            return Err(invalid("--max-configs must be at least 1"));
        }
        if self.max_minutes.is_some_and(|m| m.is_nan() || m <= 0.0) {
            return Err(invalid("--max-minutes must be > 0"));
        }
        let space = self.space().resolve()?;
        let target = target(&self.flags.url, "triton", &self.flags.model_repository)?;
        let out = self.out.clone().unwrap_or_else(|| default_out(&format!("{}-search", self.model)));
        let mut settings = self.flags.settings();
        settings.batch = self.batch;
        settings.concurrency = Some(Levels::List(space.concurrency.clone()));
        settings.out = Some(out.clone());
        let sweep = resolve(SweepKind::Online, &settings, &target)?;
        Ok(SearchPlan {
            target,
            model: Model { name: self.model.clone(), version: String::new(), config: None },
            sweep,
            budget,
            objective,
            mode,
            space,
            max_configs: self.max_configs,
            max_minutes: self.max_minutes,
            improvement_pct: IMPROVEMENT_PCT,
            out,
        })
    }
}
