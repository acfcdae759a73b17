//! How a search as given (`perfbench search` flags laid over a scenario's `[search]` and
//! `[online]`) resolves once into a checked [`SearchPlan`]: defaults filled in, values parsed,
//! then `plan/validate.rs`'s checks. Apart from `search.rs`, which holds the types, so that
//! `validate.rs` may check those types without this resolution calling back into a file it
//! depends on.

use std::path::PathBuf;

use super::search::{values, Batching, Budget, Mode, Objective, Search, SearchPlan, SearchSettings, Space};
use super::search::{DEFAULT_CONCURRENCY, DEFAULT_INSTANCES, DEFAULT_MAX_BATCH_SIZES, IMPROVEMENT_PCT};
use super::settings::{resolve, LoadSettings, Settings};
use super::validate::{self, unparsed};
use super::{Levels, Model, PlanError, SweepKind, Target};

impl SearchSettings {
    /// These settings with the defaults filled in, checked.
    pub fn resolve(&self) -> Result<Search, PlanError> {
        let budget: Budget = validate::budget_given(self.latency_budget.as_deref())?.parse().map_err(unparsed)?;
        let search = Search {
            budget,
            objective: self.objective.as_deref().map_or(Ok(Objective::default()), str::parse).map_err(unparsed)?,
            mode: self.mode.as_deref().map_or(Ok(Mode::default()), str::parse).map_err(unparsed)?,
            max_configs: self.max_configs,
            max_minutes: self.max_minutes,
            improvement_pct: IMPROVEMENT_PCT,
            space: self.space().map_err(unparsed)?,
        };
        search.validate()?;
        Ok(search)
    }

    fn space(&self) -> Result<Space, String> {
        let instances = values("--instances", self.instances.as_deref().unwrap_or(DEFAULT_INSTANCES), 1)?;
        let max_batch_sizes =
            values("--max-batch-size", self.max_batch_size.as_deref().unwrap_or(DEFAULT_MAX_BATCH_SIZES), 0)?;
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
        let concurrency = values("--concurrency", self.concurrency.as_deref().unwrap_or(DEFAULT_CONCURRENCY), 1)?;
        Ok(Space {
            instances: instances.into_iter().map(|v| v as u32).collect(),
            max_batch_sizes: max_batch_sizes.into_iter().map(|v| v as u32).collect(),
            batching,
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
        let search = search.resolve()?;
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
        if sweep.generative.is_some() {
            return Err(PlanError::NotSupported("a search over a generative sweep (--endpoint-type)".into()));
        }
        let plan = SearchPlan { target, model, search, sweep };
        plan.validate()?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::search::Statistic;
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
    fn the_space_crosses_switches_delays_and_preferred_sets() {
        let s = SearchSettings {
            dynamic_batching: Some("off,on".into()),
            queue_delay_us: Some("0,100".into()),
            preferred_batch_sizes: Some(vec!["none".into(), "4,8".into()]),
            ..SearchSettings::default()
        }
        .space()
        .unwrap();
        assert_eq!(s.batching.len(), 5);
        assert_eq!(s.batching[4], Batching::Off);
        assert_eq!(s.instances, [1, 2, 4]);
        assert_eq!(s.concurrency.last(), Some(&256));
        assert!(!Batching::Dynamic { queue_delay_us: 0, preferred: vec![4, 8] }.fits(4));
        assert!(!Batching::Dynamic { queue_delay_us: 0, preferred: vec![] }.fits(0));
    }
}
