//! `perfbench offline` and `perfbench online`: the seeds' two sweeps. Their flags are
//! [`Settings`](crate::plan::settings::Settings), which resolve into a one-sweep [`Plan`] with the defaults of their kind.

use clap::Args;

use super::common::{target, CommonArgs, SweepSections};
use crate::plan::defaults::DEFAULT_MODEL;
use crate::plan::settings::{default_out, resolve};
use crate::plan::{Model, Plan, PlanError, SweepKind};

/// Flags both sweeps share (perf_analyzer's names where it has them): every section of the
/// settings.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// Model to profile (default: wide_deep from the bundled zoo).
    #[arg(short = 'm', long = "model-name")]
    pub model: Option<String>,
    #[command(flatten)]
    pub flags: CommonArgs,
    #[command(flatten)]
    pub sections: SweepSections,
}

/// `perfbench offline`: concurrency 1, one static batch per request, over batch sizes.
#[derive(Args, Debug, Clone)]
pub struct OfflineArgs {
    #[command(flatten)]
    pub common: SweepArgs,
}

/// `perfbench online`: a fixed client batch over concurrencies, the server batching.
#[derive(Args, Debug, Clone)]
pub struct OnlineArgs {
    #[command(flatten)]
    pub common: SweepArgs,
}

impl SweepArgs {
    fn plan(&self, kind: SweepKind) -> Result<Plan, PlanError> {
        let target = target(&self.flags.url, "triton", &self.flags.model_repository)?;
        let model = self.model.clone().unwrap_or_else(|| DEFAULT_MODEL.into());
        let mut settings = self.flags.settings(&self.sections.load, &self.sections.output);
        settings.output.out.get_or_insert_with(|| default_out(&format!("{model}-{}", kind.name())));
        let sweep = resolve(kind, &settings, &target)?;
        let plan = Plan {
            shard: None,
            resume: false,
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
        self.common.plan(SweepKind::Offline)
    }
}

impl OnlineArgs {
    pub fn plan(&self) -> Result<Plan, PlanError> {
        self.common.plan(SweepKind::Online)
    }
}

#[cfg(test)]
mod tests {
    use crate::cli::parse_plan;
    use crate::plan::Plan;

    fn plan(line: &str) -> Result<Plan, String> {
        parse_plan(["perfbench"].into_iter().chain(line.split_whitespace()))
    }

    #[test]
    fn flags_plan_toml_plan_is_identity() {
        for line in [
            "offline --out o",
            "offline -m identity --shape INPUT0:16 --batch-sizes 1,8 --out o",
            "offline -m bert --batch-sizes 1..16:4 -i grpc --input-data zero --shared-memory none --out o",
            "online --concurrency 8..256 --out o",
            "online -m delay --concurrency 1,4,8 -b 2 -u h:1 -H X:1 --streaming -i grpc -p 100 --out o",
            "run scenarios/fastpitch.toml --profile quick --out o",
            "run scenarios/nnunet.toml --out o --gate base",
        ] {
            let plan = plan(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let text = plan.to_toml();
            assert_eq!(Plan::from_toml(&text).unwrap(), plan, "{line}:\n{text}");
        }
    }

    #[test]
    fn bad_sweeps_are_refused_with_the_reason() {
        for (line, needle) in [
            ("online --concurrency 8..2", "descending"),
            ("online --concurrency 0..8", "must be > 0"),
            ("offline --batch-sizes 1,0", "at least 1"),
            ("online -b 0", "Failed to parse -b (batch size)"),
            ("online -i udp", "either HTTP or gRPC"),
            ("online --streaming", "Streaming is only allowed with gRPC"),
            ("offline -u h:1 --model-repository r", "--model-repository"),
        ] {
            let err = plan(line).unwrap_err();
            assert!(err.contains(needle), "{line}: {err}");
        }
    }
}
