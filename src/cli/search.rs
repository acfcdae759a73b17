//! `perfbench search`: its flags, laid over a scenario's `[search]` and `[online]` tables when a
//! FILE is given, resolve once into a [`SearchPlan`] (exit 2 on any bad input before anything
//! starts). A search plan file (`--print-plan`) runs as written.

use std::path::{Path, PathBuf};

use clap::Args;

use super::common::{target, CommonArgs};
use crate::plan::scenario::Scenario;
use crate::plan::search::{SearchPlan, SearchSettings};
use crate::plan::settings::{default_out, LoadSettings, OutputSettings, Settings};
use crate::plan::{validate, FileKind, Model, PlanError};

#[derive(Args, Debug, Clone)]
pub struct SearchArgs {
    /// A scenario with a [search] table (its [online] settings measure each point; flags
    /// override both), or a search plan written by --print-plan (run as written).
    #[arg(required_unless_present = "model")]
    pub file: Option<PathBuf>,
    /// Model whose configuration is searched (a scenario names its own).
    #[arg(short = 'm', long = "model-name", conflicts_with = "file")]
    pub model: Option<String>,
    /// A named profile of the scenario (e.g. quick), merged over its [search] and [online].
    #[arg(long = "profile", requires = "file")]
    pub profile: Option<String>,
    /// The latency a configuration must keep: STAT=TIME, STAT p50, p90, p95, p99 or avg (e.g. p99=20ms).
    #[arg(long = "latency-budget")]
    pub latency_budget: Option<String>,
    /// What ranks the configurations that meet the budget: throughput (default) or latency.
    #[arg(long = "objective")]
    pub objective: Option<String>,
    /// quick (default: climb one dimension at a time while it pays) or brute (the whole grid).
    #[arg(long = "mode")]
    pub mode: Option<String>,
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
    /// Results folder (default: results/<model or scenario>-search-<timestamp>/).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub flags: CommonArgs,
}

impl SearchArgs {
    /// The search flags given, as settings to lay over a file's.
    pub fn search_settings(&self) -> SearchSettings {
        SearchSettings {
            latency_budget: self.latency_budget.clone(),
            objective: self.objective.clone(),
            mode: self.mode.clone(),
            max_configs: self.max_configs,
            max_minutes: self.max_minutes,
            instances: self.instances.clone(),
            max_batch_size: self.max_batch_size.clone(),
            dynamic_batching: self.dynamic_batching.clone(),
            queue_delay_us: self.queue_delay_us.clone(),
            preferred_batch_sizes: (!self.preferred_batch_sizes.is_empty()).then(|| self.preferred_batch_sizes.clone()),
            concurrency: self.concurrency.clone(),
        }
    }

    /// The measuring flags given, as online settings to lay over a scenario's `[online]`.
    fn online_settings(&self) -> Settings {
        let load = LoadSettings { batch: self.batch, ..LoadSettings::default() };
        self.flags.settings(&load, &OutputSettings::default())
    }

    pub fn plan(&self) -> Result<SearchPlan, PlanError> {
        let Some(file) = &self.file else {
            let name = self.model.clone().expect("clap requires -m without FILE");
            let out = self.out.clone().unwrap_or_else(|| default_out(&format!("{name}-search")));
            let model = Model { name, version: String::new(), config: None };
            return self.resolve(model, &SearchSettings::default(), &Settings::default(), out);
        };
        let text = validate::read_named_file(file)?;
        match FileKind::of(&text) {
            FileKind::Plan => Err(validate::sweeps_given_to_search(file)),
            FileKind::SearchPlan => self.search_plan(file, &text),
            FileKind::Scenario => {
                let scenario = Scenario::parse(&text, file).map_err(validate::bad_scenario)?;
                let (search, online) = scenario.search(self.profile.as_deref()).map_err(validate::bad_scenario)?;
                let out = self.out.clone().unwrap_or_else(|| {
                    let profile = self.profile.as_deref().map(|p| format!("-{p}")).unwrap_or_default();
                    default_out(&format!("{}{profile}-search", scenario.name))
                });
                let model = Model {
                    name: scenario.model.name.clone(),
                    version: String::new(),
                    config: scenario.model.config.clone(),
                };
                self.resolve(model, &search, &online, out)
            }
        }
    }

    /// The flags over the file's settings, resolved once.
    fn resolve(
        &self,
        model: Model,
        search: &SearchSettings,
        online: &Settings,
        out: PathBuf,
    ) -> Result<SearchPlan, PlanError> {
        let target = target(&self.flags.url, "triton", &self.flags.model_repository)?;
        let search = search.merged(&self.search_settings());
        let online = online.merged(&self.online_settings());
        SearchPlan::resolve(target, model, &search, &online, out)
    }

    /// A plan file runs as written: a flag that would change it is refused.
    fn search_plan(&self, file: &Path, text: &str) -> Result<SearchPlan, PlanError> {
        let changes = self.search_settings() != SearchSettings::default()
            || self.online_settings() != Settings::default()
            || self.flags.url.is_some()
            || self.flags.model_repository.is_some()
            || self.profile.is_some()
            || self.out.is_some();
        validate::check_runs_as_written(file, "search plan", "flags other than --print-plan", changes)?;
        SearchPlan::from_toml(text).map_err(|e| validate::in_file("search plan", file, e))
    }
}
