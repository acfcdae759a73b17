//! `perfbench run SCENARIO.toml`: a scenario file names a model (from the zoo, or defined by its
//! own config.pbtxt text), an offline and/or an online sweep, named profiles that override them,
//! and gate thresholds. One run writes one folder with an `offline/` and an `online/` results
//! folder; `--gate BASE` then compares them with a baseline run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use serde::Deserialize;

use crate::gate::thresholds::GateThresholds;
use crate::profile::CallArgs;
use crate::report::SweepKind;
use crate::sweep::{parse_concurrency, MeasureArgs, SweepPlan};

/// A scenario file. Unknown keys anywhere are an error naming the key.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub seed: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub model: ModelSection,
    #[serde(default)]
    pub offline: Option<Section>,
    #[serde(default)]
    pub online: Option<Section>,
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileOverride>,
    #[serde(default)]
    pub gate: GateThresholds,
}

/// `[model]`: a zoo model by name, or a model defined by config.pbtxt text.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    pub name: String,
    #[serde(default)]
    pub config: Option<String>,
}

/// `[offline]` / `[online]` and their profile overrides: every key is optional so a profile can
/// override a few; the sweep's defaults fill the rest.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    pub batch_sizes: Option<Vec<u64>>,
    pub batch: Option<u64>,
    pub concurrency: Option<String>,
    pub protocol: Option<String>,
    pub shapes: Option<Vec<String>>,
    pub shared_memory: Option<String>,
    pub input_data: Option<String>,
    pub measurement_mode: Option<String>,
    pub measurement_interval_ms: Option<u64>,
    pub measurement_request_count: Option<u64>,
    pub warmup_request_count: Option<u64>,
    pub stability_percentage: Option<f64>,
    pub max_trials: Option<usize>,
    pub headers: Option<Vec<String>>,
    pub streaming: Option<bool>,
    pub collect_metrics: Option<bool>,
}

/// `[profiles.<name>.offline]` / `[profiles.<name>.online]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileOverride {
    pub offline: Option<Section>,
    pub online: Option<Section>,
}

/// Why a scenario cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("scenario {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("scenario '{scenario}' has no profile '{profile}' (it has: {known})")]
    UnknownProfile { scenario: String, profile: String, known: String },
    #[error("scenario '{0}': {1}")]
    Invalid(String, String),
}

impl Section {
    /// `self` with every key `over` sets replaced.
    fn merged(&self, over: &Section) -> Section {
        macro_rules! pick {
            ($($f:ident),*) => { Section { $($f: over.$f.clone().or_else(|| self.$f.clone()),)* } };
        }
        pick!(
            batch_sizes,
            batch,
            concurrency,
            protocol,
            shapes,
            shared_memory,
            input_data,
            measurement_mode,
            measurement_interval_ms,
            measurement_request_count,
            warmup_request_count,
            stability_percentage,
            max_trials,
            headers,
            streaming,
            collect_metrics
        )
    }
}

impl Scenario {
    /// Parses scenario text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = toml::from_str(text)
            .map_err(|e| ScenarioError::Parse { path: path.to_path_buf(), message: e.message().replace('\n', " ") })?;
        if scenario.offline.is_none() && scenario.online.is_none() {
            return Err(ScenarioError::Invalid(scenario.name, "needs an [offline] or an [online] section".into()));
        }
        scenario.gate.validate().map_err(|e| ScenarioError::Invalid(scenario.name.clone(), e.to_string()))?;
        Ok(scenario)
    }

    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Read { path: path.to_path_buf(), source })?;
        Scenario::parse(&text, path)
    }

    /// The offline and online sections with `profile`'s overrides merged in.
    pub fn sections(&self, profile: Option<&str>) -> Result<(Option<Section>, Option<Section>), ScenarioError> {
        let over = match profile {
            None => ProfileOverride::default(),
            Some(name) => self.profiles.get(name).cloned().ok_or_else(|| ScenarioError::UnknownProfile {
                scenario: self.name.clone(),
                profile: name.to_string(),
                known: self.profiles.keys().cloned().collect::<Vec<_>>().join(", "),
            })?,
        };
        let merge = |base: &Option<Section>, over: &Option<Section>| {
            base.as_ref().map(|b| b.merged(over.as_ref().unwrap_or(&Section::default())))
        };
        Ok((merge(&self.offline, &over.offline), merge(&self.online, &over.online)))
    }

    /// The sweeps of a run, each writing under `out/offline` or `out/online`.
    pub fn plans(&self, profile: Option<&str>, url: Option<&str>, out: &Path) -> Result<Vec<SweepPlan>, ScenarioError> {
        let (offline, online) = self.sections(profile)?;
        let invalid = |why: String| ScenarioError::Invalid(self.name.clone(), why);
        let mut plans = Vec::new();
        if let Some(s) = offline {
            let batches = s.batch_sizes.clone().ok_or_else(|| invalid("[offline] needs batch_sizes".into()))?;
            if batches.is_empty() || batches.contains(&0) {
                return Err(invalid("[offline] batch_sizes must be at least 1".into()));
            }
            let points = batches.into_iter().map(|b| (b, 1)).collect();
            plans.push(self.plan(SweepKind::Offline, &s, points, "system", url, out));
        }
        if let Some(s) = online {
            let batch = s.batch.unwrap_or(1);
            if batch == 0 {
                return Err(invalid("[online] batch must be at least 1".into()));
            }
            let text = s.concurrency.clone().unwrap_or_else(|| "1".into());
            let levels = parse_concurrency(&text).map_err(|e| invalid(e.to_string()))?;
            let points = levels.into_iter().map(|c| (batch, c)).collect();
            plans.push(self.plan(SweepKind::Online, &s, points, "none", url, out));
        }
        Ok(plans)
    }

    fn plan(
        &self,
        kind: SweepKind,
        s: &Section,
        points: Vec<(u64, u64)>,
        default_shm: &str,
        url: Option<&str>,
        out: &Path,
    ) -> SweepPlan {
        let sub = kind.title().to_lowercase();
        SweepPlan {
            kind,
            model: self.model.name.clone(),
            protocol: s.protocol.clone().unwrap_or_else(|| "http".into()),
            shared_memory: s.shared_memory.clone().unwrap_or_else(|| default_shm.into()),
            points,
            measure: MeasureArgs {
                model: Some(self.model.name.clone()),
                url: url.map(str::to_string),
                input_data: s.input_data.clone().unwrap_or_else(|| "random".into()),
                shapes: s.shapes.clone().unwrap_or_default(),
                measurement_mode: s.measurement_mode.clone().unwrap_or_else(|| "count_windows".into()),
                measurement_interval_ms: s.measurement_interval_ms.unwrap_or(5000),
                measurement_request_count: s.measurement_request_count.unwrap_or(50),
                warmup_request_count: s.warmup_request_count.unwrap_or(10),
                stability_percentage: s.stability_percentage.unwrap_or(10.0),
                max_trials: s.max_trials.unwrap_or(10),
                percentile: None,
                call: CallArgs {
                    headers: s.headers.clone().unwrap_or_default(),
                    streaming: s.streaming.unwrap_or(false),
                    collect_metrics: s.collect_metrics.unwrap_or(false),
                    metrics_url: None,
                },
                model_repository: None,
                out: Some(out.join(&sub)),
            },
            out: out.join(sub),
        }
    }
}

/// `perfbench run SCENARIO.toml`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The scenario file, e.g. scenarios/wide_deep.toml.
    pub scenario: PathBuf,
    /// A named profile of the scenario (e.g. quick), merged over its sections.
    #[arg(long = "profile")]
    pub profile: Option<String>,
    /// Results folder (default: results/<scenario>[-<profile>]-<timestamp>/).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    /// Gate the run against a baseline run folder (with offline/ and online/) or a report.csv,
    /// with the scenario's [gate] thresholds; exits 1 on a regression.
    #[arg(long = "gate", value_name = "BASELINE")]
    pub gate: Option<PathBuf>,
    /// Server address (host:port). Without it, the bundled server runs in-process.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
}

/// Entry point of `perfbench run`.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let scenario = Scenario::load(&args.scenario)?;
    let out = args.out.clone().unwrap_or_else(|| {
        let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
        let profile = args.profile.as_deref().map(|p| format!("-{p}")).unwrap_or_default();
        PathBuf::from("results").join(format!("{}{profile}-{stamp}", scenario.name))
    });
    let plans = scenario.plans(args.profile.as_deref(), args.url.as_deref(), &out)?;
    // Check the baseline before spending minutes measuring.
    let baselines = match &args.gate {
        Some(base) => Some(baseline_files(base, &plans)?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("perfbench-run").build()?;
    for plan in &plans {
        let outcome = runtime.block_on(crate::sweep::run_sweep(plan, scenario.model.config.as_deref()))?;
        println!("{} {}:\n{}", scenario.name, plan.kind.title().to_lowercase(), crate::sweep::summary(&outcome.rows));
    }
    println!("Results: {}", out.display());
    match baselines {
        None => Ok(ExitCode::SUCCESS),
        Some(pairs) => gate_run(&scenario, &pairs),
    }
}

/// (baseline report.csv, current report.csv) per sweep of the run.
fn baseline_files(base: &Path, plans: &[SweepPlan]) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    if base.is_dir() {
        plans
            .iter()
            .map(|p| {
                let sub = p.kind.title().to_lowercase();
                let file = base.join(&sub).join("report.csv");
                if !file.is_file() {
                    bail!("baseline {} has no {sub}/report.csv", base.display());
                }
                Ok((file, p.out.join("report.csv")))
            })
            .collect()
    } else if base.is_file() {
        if plans.len() != 1 {
            bail!(
                "this scenario runs {} sweeps: give --gate a baseline run folder (with offline/ and online/)",
                plans.len()
            );
        }
        Ok(vec![(base.to_path_buf(), plans[0].out.join("report.csv"))])
    } else {
        bail!("baseline {} does not exist", base.display())
    }
}

fn gate_run(scenario: &Scenario, pairs: &[(PathBuf, PathBuf)]) -> anyhow::Result<ExitCode> {
    let mut passed = true;
    for (base, current) in pairs {
        let baseline_rows =
            crate::gate::results::read_results(base, 1).with_context(|| format!("baseline {}", base.display()))?;
        let current_rows = crate::gate::results::read_results(current, 1)?;
        let outcome = crate::gate::verdict::compare(&baseline_rows, &current_rows, &scenario.gate)?;
        let (b, c) = (base.display().to_string(), current.display().to_string());
        let sources = crate::gate::markdown::Sources { baseline: &b, current: &c };
        let code = crate::gate::report(&outcome, &sources, Default::default())?;
        passed &= code == ExitCode::SUCCESS;
    }
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::from(crate::gate::EXIT_REGRESSION) })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
name = "t"
[model]
name = "identity"
[offline]
batch_sizes = [1, 8]
measurement_request_count = 50
[online]
batch = 4
concurrency = "2..6:2"
[profiles.quick.offline]
batch_sizes = [1]
[gate]
max_throughput_drop = 20.0
"#;

    #[test]
    fn profiles_merge_over_sections() {
        let s = Scenario::parse(TEXT, Path::new("t.toml")).unwrap();
        let plans = s.plans(Some("quick"), None, Path::new("/tmp/x")).unwrap();
        assert_eq!(plans[0].points, vec![(1, 1)]);
        assert_eq!(plans[0].measure.measurement_request_count, 50);
        assert_eq!(plans[0].shared_memory, "system");
        assert_eq!(plans[1].points, vec![(4, 2), (4, 4), (4, 6)]);
        assert_eq!(plans[1].out, Path::new("/tmp/x/online"));
        assert_eq!(s.gate.max_throughput_drop, 20.0);
        let err = s.plans(Some("slow"), None, Path::new("/tmp/x")).unwrap_err();
        assert!(err.to_string().contains("no profile 'slow'"), "{err}");
    }

    #[test]
    fn unknown_keys_are_named() {
        for (bad, key) in [
            (TEXT.replace("batch = 4", "bacth = 4"), "bacth"),
            (TEXT.replace("name = \"t\"", "name = \"t\"\ncolour = 1"), "colour"),
            (TEXT.replace("max_throughput_drop", "max_tput_drop"), "max_tput_drop"),
        ] {
            let err = Scenario::parse(&bad, Path::new("t.toml")).unwrap_err();
            assert!(err.to_string().contains(key), "{err}");
        }
    }

    #[test]
    fn every_bundled_scenario_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let s = Scenario::load(&path).unwrap();
                s.plans(Some("quick"), None, Path::new("/tmp/x")).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
    }
}
