//! `perfbench offline` and `perfbench online`: the seeds' two sweeps. Their flags become
//! [`Settings`], which resolve into a one-sweep [`Plan`] with the defaults of their kind.

use std::path::PathBuf;

use clap::Args;

use super::profile::{target, CommonArgs};
use crate::plan::defaults::DEFAULT_MODEL;
use crate::plan::settings::{default_out, resolve, Settings};
use crate::plan::{invalid, Levels, Model, Plan, PlanError, SweepKind};

/// Flags both sweeps share (perf_analyzer's names where it has them).
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// Model to profile (default: wide_deep from the bundled zoo).
    #[arg(short = 'm', long = "model-name")]
    pub model: Option<String>,
    /// Results folder (default: results/<model>-<offline|online>-<timestamp>/).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub flags: CommonArgs,
}

/// `perfbench offline`: concurrency 1, one static batch per request, over batch sizes.
#[derive(Args, Debug, Clone)]
pub struct OfflineArgs {
    /// Batch sizes: a list 1,8,16 or a range 1..64:8.
    #[arg(long = "batch-sizes")]
    pub batch_sizes: Option<String>,
    #[command(flatten)]
    pub common: SweepArgs,
}

/// `perfbench online`: a fixed client batch over concurrencies, the server batching.
#[derive(Args, Debug, Clone)]
pub struct OnlineArgs {
    /// Client batch size of each request.
    #[arg(short = 'b', long = "batch-size")]
    pub batch: Option<u64>,
    /// Concurrencies: A..B (step A), A..B:S, or a list 8,16,64.
    #[arg(long = "concurrency")]
    pub concurrency: Option<String>,
    #[command(flatten)]
    pub common: SweepArgs,
}

fn levels(flag: &str, text: &Option<String>) -> Result<Option<Levels>, PlanError> {
    text.as_deref().map(|t| t.parse::<Levels>().map_err(|e| invalid(format!("bad {flag} {e}")))).transpose()
}

impl SweepArgs {
    fn settings(&self) -> Settings {
        self.flags.settings()
    }

    fn plan(&self, kind: SweepKind, mut settings: Settings) -> Result<Plan, PlanError> {
        let target = target(&self.flags.url, "triton", &self.flags.model_repository)?;
        let model = self.model.clone().unwrap_or_else(|| DEFAULT_MODEL.into());
        settings.out = Some(self.out.clone().unwrap_or_else(|| default_out(&format!("{model}-{}", kind.name()))));
        let sweep = resolve(kind, &settings, &target)?;
        let plan = Plan {
            target,
            model: Model { name: model, version: String::new(), config: None },
            sweeps: vec![sweep],
            gate: None,
        };
        plan.validate()?;
        Ok(plan)
    }
}

impl OfflineArgs {
    pub fn plan(&self) -> Result<Plan, PlanError> {
        let settings = Settings { batch_sizes: levels("--batch-sizes", &self.batch_sizes)?, ..self.common.settings() };
        self.common.plan(SweepKind::Offline, settings)
    }
}

impl OnlineArgs {
    pub fn plan(&self) -> Result<Plan, PlanError> {
        let settings = Settings {
            batch: self.batch,
            concurrency: levels("--concurrency", &self.concurrency)?,
            ..self.common.settings()
        };
        self.common.plan(SweepKind::Online, settings)
    }
}
