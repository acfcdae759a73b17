//! How a search as given (`perfbench search` flags laid over a scenario's `[search]` and
//! `[online]`) resolves once into a checked [`SearchPlan`]: defaults filled in, values parsed,
//! then `plan/validate.rs`'s checks. Apart from `search.rs`, which holds the types, so that
//! `validate.rs` may check those types without this resolution calling back into a file it
//! depends on.

use std::path::PathBuf;

use super::search::{values, Batching, Budget, Mode, Objective, Parameter, Search, SearchPlan, SearchSettings, Space};
use super::search::{
    DEFAULT_CONCURRENCY, DEFAULT_GENERATIVE_PARAMETER, DEFAULT_INSTANCES, DEFAULT_MAX_BATCH_SIZES, IMPROVEMENT_PCT,
};
use super::settings::{resolve, LoadSettings, Settings};
use super::validate::{self, unparsed};
use super::{Levels, Model, PlanError, SweepKind, Target};

impl SearchSettings {
    /// These settings with a tensor search's defaults filled in, checked.
    pub fn resolve(&self) -> Result<Search, PlanError> {
        self.resolve_for(false)
    }

    /// These settings with the defaults filled in, checked. A `generative` search keeps the
    /// model's own scheduler where no flag varies it, searches the continuous batcher's
    /// [`DEFAULT_GENERATIVE_PARAMETER`] where no `--parameter` is given, and ranks by output
    /// tokens per second unless told otherwise.
    pub fn resolve_for(&self, generative: bool) -> Result<Search, PlanError> {
        let budget: Budget = validate::budget_given(self.latency_budget.as_deref())?.parse().map_err(unparsed)?;
        let default_objective = if generative { Objective::Tokens } else { Objective::default() };
        let search = Search {
            budget,
            objective: self.objective.as_deref().map_or(Ok(default_objective), str::parse).map_err(unparsed)?,
            mode: self.mode.as_deref().map_or(Ok(Mode::default()), str::parse).map_err(unparsed)?,
            max_configs: self.max_configs,
            max_minutes: self.max_minutes,
            improvement_pct: IMPROVEMENT_PCT,
            space: self.space(generative).map_err(unparsed)?,
        };
        search.validate()?;
        Ok(search)
    }

    fn space(&self, generative: bool) -> Result<Space, String> {
        // A dimension without a flag: the tensor default, or (generative) the model's own.
        let given = |flag: &str, text: Option<&str>, default: &str, min: u64| match (text, generative) {
            (None, true) => Ok(Vec::new()),
            (text, _) => values(flag, text.unwrap_or(default), min),
        };
        let instances = given("--instances", self.instances.as_deref(), DEFAULT_INSTANCES, 1)?;
        let max_batch_sizes = given("--max-batch-size", self.max_batch_size.as_deref(), DEFAULT_MAX_BATCH_SIZES, 0)?;
        let parameters = match &self.parameter {
            Some(given) => given.iter().map(|p| p.parse()).collect::<Result<Vec<Parameter>, _>>()?,
            None if generative => vec![DEFAULT_GENERATIVE_PARAMETER.parse()?],
            None => Vec::new(),
        };
        let scheduling_given =
            self.dynamic_batching.is_some() || self.queue_delay_us.is_some() || self.preferred_batch_sizes.is_some();
        let delays = values("--queue-delay-us", self.queue_delay_us.as_deref().unwrap_or("0"), 0)?;
        let preferred: Vec<Vec<u32>> = match &self.preferred_batch_sizes {
            None => vec![Vec::new()],
            Some(sets) => {
                sets.iter()
                    .map(|s| match s.trim() {
                        "none" | "" => Ok(Vec::new()),
                        list => values("--preferred-batch-sizes", list, 1)
                            .map(|v| v.into_iter().map(|x| x as u32).collect()),
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        // The batcher's settings first, off last: a climb starts with the batcher on, or
        // growing max_batch_size would never pay.
        let mut batching = Vec::new();
        let mut off = false;
        for switch in self.dynamic_batching.as_deref().unwrap_or("on").split(',') {
            match switch.trim() {
                "off" => off = true,
                "on" => {
                    for &queue_delay_us in &delays {
                        for p in &preferred {
                            batching.push(Batching::Dynamic { queue_delay_us, preferred: p.clone() });
                        }
                    }
                }
                other => return Err(format!("bad --dynamic-batching '{other}': on, off or on,off")),
            }
        }
        batching.dedup();
        if off {
            batching.push(Batching::Off);
        }
        if generative && !scheduling_given {
            batching.clear();
        }
        let concurrency = values("--concurrency", self.concurrency.as_deref().unwrap_or(DEFAULT_CONCURRENCY), 1)?;
        Ok(Space {
            instances: instances.into_iter().map(|v| v as u32).collect(),
            max_batch_sizes: max_batch_sizes.into_iter().map(|v| v as u32).collect(),
            batching,
            parameters,
            concurrency,
        })
    }
}

impl SearchPlan {
    /// The one resolution of a search: `search` and the online settings every point is
    /// measured with (`online`; flags already laid over a file's) into a checked plan that
    /// writes to `out`. The ramp is the search's: `online`'s own load keys are its sweep's,
    /// for `perfbench run`, and are set aside here.
    pub fn resolve(
        target: Target,
        model: Model,
        search: &SearchSettings,
        online: &Settings,
        out: PathBuf,
    ) -> Result<SearchPlan, PlanError> {
        let search = search.resolve_for(online.generative.endpoint_type.is_some())?;
        validate::check_search_batch(online.load.batch_sizes.as_ref())?;
        let mut settings = online.clone();
        settings.load = LoadSettings {
            concurrency: Some(Levels::List(search.space.concurrency.clone())),
            request_rate: None,
            request_intervals: None,
            periodic_concurrency: None,
            latency_threshold_ms: None,
            binary_search: None,
            ..online.load.clone()
        };
        settings.output.out = Some(out);
        let sweep = resolve(SweepKind::Online, &settings, &target)?;
        let plan = SearchPlan { target, model, search, sweep };
        plan.validate()?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::search::{Objective, Statistic};
    use crate::plan::{FileKind, Load};

    fn resolved(search: &SearchSettings, online: &Settings) -> Result<SearchPlan, PlanError> {
        let model = Model { name: "delay".into(), version: String::new(), config: None };
        SearchPlan::resolve(Target::Embedded { model_repository: None }, model, search, online, "out".into())
    }

    #[test]
    fn a_search_table_takes_lists_or_text_and_flags_go_over_it() {
        let file: SearchSettings = toml::from_str(
            r#"
            latency_budget = "p95=5ms"
            mode = "brute"
            instances = [1, 2]
            max_batch_size = "1..16"
            preferred_batch_sizes = [[4, 8], "none"]
            concurrency = [1, 8]
            max_configs = 3
            "#,
        )
        .unwrap();
        let flags = SearchSettings { instances: Some("4".into()), max_configs: Some(2), ..SearchSettings::default() };
        let search = file.merged(&flags).resolve().unwrap();
        assert_eq!(search.budget, Budget { statistic: Statistic::P95, limit_us: 5000.0 });
        assert_eq!(search.mode, Mode::Brute);
        assert_eq!(search.space.instances, [4], "the flag wins");
        assert_eq!(search.max_configs, Some(2), "the flag wins");
        assert_eq!(search.space.max_batch_sizes, [1, 2, 4, 8, 16], "the file's where no flag is given");
        assert_eq!(search.space.concurrency, [1, 8]);
        assert_eq!(
            search.space.batching,
            [
                Batching::Dynamic { queue_delay_us: 0, preferred: vec![4, 8] },
                Batching::Dynamic { queue_delay_us: 0, preferred: vec![] }
            ]
        );
    }

    #[test]
    fn bad_search_settings_say_which_key() {
        let err = toml::from_str::<SearchSettings>("instancs = [1]").unwrap_err().to_string();
        assert!(err.contains("instancs"), "{err}");
        let err = SearchSettings::default().resolve().unwrap_err().to_string();
        assert!(err.contains("latency budget"), "{err}");
        let budget = || Some("p99=1ms".to_string());
        for (bad, needle) in [
            (SearchSettings { latency_budget: budget(), mode: Some("fast".into()), ..Default::default() }, "--mode"),
            (SearchSettings { latency_budget: budget(), max_configs: Some(0), ..Default::default() }, "--max-configs"),
            (
                SearchSettings { latency_budget: budget(), max_minutes: Some(-1.0), ..Default::default() },
                "--max-minutes",
            ),
            (
                SearchSettings { latency_budget: budget(), instances: Some("0".into()), ..Default::default() },
                "--instances",
            ),
            (
                SearchSettings { latency_budget: budget(), instances: Some("65".into()), ..Default::default() },
                "--instances",
            ),
        ] {
            let err = bad.resolve().unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn a_search_plan_round_trips_through_toml_and_sets_its_ramp() {
        let search = SearchSettings {
            latency_budget: Some("p99=2.5ms".into()),
            dynamic_batching: Some("on,off".into()),
            preferred_batch_sizes: Some(vec!["4,8".into()]),
            concurrency: Some("2..16".into()),
            max_minutes: Some(1.5),
            ..SearchSettings::default()
        };
        // The online section's own load is its sweep's; the search ramps its own concurrency.
        let mut online = Settings::default();
        online.load.concurrency = Some("1..8".parse().unwrap());
        online.load.batch = Some(4);
        online.measurement.measurement_request_count = Some(40);
        let plan = resolved(&search, &online).unwrap();
        assert_eq!(plan.sweep.load, Load::Concurrency { levels: Levels::List(vec![2, 4, 8, 16]) });
        assert_eq!(plan.sweep.batch_sizes, Levels::one(4));
        assert_eq!(plan.sweep.measurement.request_count, 40);
        assert_eq!(plan.out(), Path::new("out"));
        let text = plan.to_toml();
        assert!(text.contains("[search]") && text.contains("budget = \"p99=2500us\""), "{text}");
        assert_eq!(SearchPlan::from_toml(&text).unwrap(), plan, "{text}");
        assert_eq!(FileKind::of(&text), FileKind::SearchPlan);
        // A plan file is checked as it is read.
        let edited = text.replace("improvement_pct = 5.0", "improvement_pct = -1.0");
        assert!(SearchPlan::from_toml(&edited).unwrap_err().to_string().contains("improvement_pct"), "{edited}");
        let mut many = Settings::default();
        many.load.batch_sizes = Some("1,8".parse().unwrap());
        assert!(resolved(&search, &many).unwrap_err().to_string().contains("one client batch size"));
    }

    #[test]
    fn a_generative_search_keeps_the_models_scheduler_varies_its_batcher_and_ranks_by_tokens() {
        let mut online = Settings::default();
        online.generative.endpoint_type = Some(crate::plan::generative::EndpointType::Chat);
        let search = SearchSettings { latency_budget: Some("ttft_p99=300ms".into()), ..SearchSettings::default() };
        let plan = resolved(&search, &online).unwrap();
        let space = &plan.search.space;
        assert!(space.instances.is_empty() && space.max_batch_sizes.is_empty() && space.batching.is_empty());
        assert_eq!(space.parameters[0].name, "max_num_seqs");
        assert_eq!(space.parameters[0].values, ["8", "16", "32", "64", "128", "256"]);
        assert_eq!(plan.search.objective, Objective::Tokens);
        assert_eq!(plan.search.budget, Budget { statistic: Statistic::TtftP99, limit_us: 300_000.0 });
        assert!(plan.sweep.generative.is_some());
        // The plan file reads back as the same plan, parameters and all.
        assert_eq!(SearchPlan::from_toml(&plan.to_toml()).unwrap(), plan);
        // Flags that vary the scheduler or name parameters are taken as given.
        let given = SearchSettings {
            instances: Some("1,2".into()),
            parameter: Some(vec!["max_num_batched_tokens=512,2048".into(), "kv=fp8,auto".into()]),
            objective: Some("throughput".into()),
            ..search.clone()
        };
        let plan = resolved(&given, &online).unwrap();
        assert_eq!(plan.search.space.instances, [1, 2]);
        let values: Vec<_> = plan.search.space.parameters.iter().map(|p| p.values.clone()).collect();
        assert_eq!(values, [vec!["512", "2048"], vec!["fp8", "auto"]]);
        assert_eq!(plan.search.objective, Objective::Throughput);
        // A tensor search keeps its defaults and refuses what only tokens measure.
        let tensor = resolved(
            &SearchSettings { latency_budget: Some("p99=1ms".into()), ..search.clone() },
            &Settings::default(),
        );
        assert_eq!(tensor.unwrap().search.space.instances, [1, 2, 4]);
        for bad in [
            SearchSettings { latency_budget: Some("itl_p99=10ms".into()), ..SearchSettings::default() },
            SearchSettings {
                latency_budget: Some("p99=10ms".into()),
                objective: Some("tokens".into()),
                ..SearchSettings::default()
            },
        ] {
            let err = resolved(&bad, &Settings::default()).unwrap_err().to_string();
            assert!(err.contains("needs a generative sweep"), "{err}");
        }
        for (bad, needle) in [
            ("max_num_seqs", "no '='"),
            ("=1,2", "no parameter name"),
            ("x=1..y", "whole numbers"),
            ("x=a,,b", "empty value"),
        ] {
            let err = bad.parse::<crate::plan::search::Parameter>().unwrap_err();
            assert!(err.contains(needle) && err.contains("--parameter"), "{bad}: {err}");
        }
        let twice = SearchSettings { parameter: Some(vec!["a=1".into(), "a=2".into()]), ..search };
        assert!(resolved(&twice, &online).unwrap_err().to_string().contains("each parameter once"));
    }

    #[test]
    fn the_space_crosses_switches_delays_and_preferred_sets() {
        let s = SearchSettings {
            dynamic_batching: Some("off,on".into()),
            queue_delay_us: Some("0,100".into()),
            preferred_batch_sizes: Some(vec!["none".into(), "4,8".into()]),
            ..SearchSettings::default()
        }
        .space(false)
        .unwrap();
        assert_eq!(s.batching.len(), 5);
        assert_eq!(s.batching[4], Batching::Off);
        assert_eq!(s.instances, [1, 2, 4]);
        assert_eq!(s.concurrency.last(), Some(&256));
        assert!(!Batching::Dynamic { queue_delay_us: 0, preferred: vec![4, 8] }.fits(4));
        assert!(!Batching::Dynamic { queue_delay_us: 0, preferred: vec![] }.fits(0));
    }
}
