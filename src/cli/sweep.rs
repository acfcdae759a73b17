//! `perfbench offline` and `perfbench online`: the seeds' two sweeps. Their flags are
//! [`Settings`](crate::plan::settings::Settings), which resolve into a one-sweep [`Plan`] with the defaults of their kind.

use clap::Args;

use super::common::{target, CommonArgs, SweepSections};
use crate::plan::defaults::DEFAULT_MODEL;
use crate::plan::generative::GenerativeSettings;
use crate::plan::settings::{default_out, resolve};
use crate::plan::{Model, Plan, PlanError, SweepKind};

/// Flags both sweeps share (perf_analyzer's names where it has them): every section of the
/// settings.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// Model to profile (default: wide_deep from the bundled zoo; llm with --endpoint-type).
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

/// `perfbench online`: a fixed client batch over concurrencies, the server batching; with
/// `--endpoint-type`, a generative endpoint over concurrencies or request rates.
#[derive(Args, Debug, Clone)]
pub struct OnlineArgs {
    #[command(flatten)]
    pub common: SweepArgs,
    #[command(flatten)]
    pub generative: GenerativeSettings,
}

impl SweepArgs {
    fn plan(&self, kind: SweepKind, generative: &GenerativeSettings) -> Result<Plan, PlanError> {
        let target = target(&self.flags.url, "triton", &self.flags.model_repository)?;
        // A generative sweep's default model is the bundled server's generative twin.
        let default = if generative.endpoint_type.is_some() { "llm" } else { DEFAULT_MODEL };
        let model = self.model.clone().unwrap_or_else(|| default.into());
        let mut settings = self.flags.settings(&self.sections.load, &self.sections.output);
        settings.generative = generative.clone();
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
        self.common.plan(SweepKind::Offline, &GenerativeSettings::default())
    }
}

impl OnlineArgs {
    pub fn plan(&self) -> Result<Plan, PlanError> {
        self.common.plan(SweepKind::Online, &self.generative)
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
            "online --endpoint-type chat --streaming --concurrency 1,4 --isl 16 --osl 6 --extra-inputs a:1 --out o",
            "online -m m --endpoint-type kserve --request-rate-range 2:8:2 --goodput time_to_first_token:50 --out o",
            "run scenarios/llm_chat.toml --profile quick --out o",
        ] {
            let plan = plan(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let text = plan.to_toml();
            assert_eq!(Plan::from_toml(&text).unwrap(), plan, "{line}:\n{text}");
        }
    }

    #[test]
    fn a_generative_sweep_takes_the_twin_and_its_protocol() {
        let chat = plan("online --endpoint-type chat --streaming --out o").unwrap();
        assert_eq!(chat.model.name, "llm");
        let sweep = &chat.sweeps[0];
        assert_eq!(sweep.protocol, crate::plan::Protocol::Http);
        assert!(sweep.call.streaming, "streaming SSE needs no gRPC");
        let g = sweep.generative.as_ref().unwrap();
        assert_eq!((g.request_count, g.warmup_request_count), (Some(10), 0), "AIPerf's amounts");
        let kserve = plan("online --endpoint-type kserve --request-count 40 --out o").unwrap();
        assert_eq!(kserve.sweeps[0].protocol, crate::plan::Protocol::Grpc);
        assert_eq!(kserve.sweeps[0].generative.as_ref().unwrap().request_count, Some(40));
        assert!(plan("online --out o").unwrap().sweeps[0].generative.is_none());
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
            ("online --endpoint-type chat -b 4", "one prompt"),
            ("online --endpoint-type chat -i grpc", "sent over http: drop -i"),
            ("online --endpoint-type kserve -i http", "sent over grpc"),
            ("online --osl 8", "need --endpoint-type"),
            ("online --endpoint-type chat -l 5", "not supported: -l"),
            ("online --endpoint-type chat --input-data zero", "--input-file"),
            ("online --endpoint-type chat --service-kind inprocess", "unexpected argument"),
        ] {
            let err = plan(line).unwrap_err();
            assert!(err.contains(needle), "{line}: {err}");
        }
    }
}
