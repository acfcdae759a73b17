//! `perfbench search`: its flags, laid over a scenario's `[search]` and `[online]` tables when a
//! FILE is given, resolve once into a [`SearchPlan`] (exit 2 on any bad input before anything
//! starts). A search plan file (`--print-plan`) runs as written.

use std::path::{Path, PathBuf};

use clap::Args;

use super::common::{target, CommonArgs};
use crate::plan::generative::GenerativeSettings;
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
    #[command(flatten)]
    pub search: SearchSettings,
    /// `--endpoint-type` and its flags: each point is a generative profile.
    #[command(flatten)]
    pub generative: GenerativeSettings,
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
    /// The measuring flags given, as online settings to lay over a scenario's `[online]`.
    fn online_settings(&self) -> Settings {
        let load = LoadSettings { batch: self.batch, ..LoadSettings::default() };
        Settings { generative: self.generative.clone(), ..self.flags.settings(&load, &OutputSettings::default()) }
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
        let search = search.merged(&self.search);
        let online = online.merged(&self.online_settings());
        SearchPlan::resolve(target, model, &search, &online, out)
    }

    /// A plan file runs as written: a flag that would change it is refused.
    fn search_plan(&self, file: &Path, text: &str) -> Result<SearchPlan, PlanError> {
        let changes = self.search != SearchSettings::default()
            || self.online_settings() != Settings::default()
            || self.flags.url.is_some()
            || self.flags.model_repository.is_some()
            || self.profile.is_some()
            || self.out.is_some();
        validate::check_runs_as_written(file, "search plan", "flags other than --print-plan", changes)?;
        SearchPlan::from_toml(text).map_err(|e| validate::in_file("search plan", file, e))
    }
}
