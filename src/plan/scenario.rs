//! Scenario files (`perfbench run SCENARIO.toml`): a model (from the zoo, or defined by its own
//! config.pbtxt text), an `[offline]` and/or an `[online]` sweep (each a [`Settings`]), a
//! `[search]` table for `perfbench search SCENARIO.toml` (a [`SearchSettings`], its points
//! measured with the `[online]` settings), named profiles that override them, and gate
//! thresholds. A scenario resolves into a [`Plan`] whose sweeps write `offline/` and `online/`
//! under one folder, or into the settings of a search.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::search::SearchSettings;
use super::settings::{resolve, Settings};
use super::{Model, Plan, PlanError, SweepKind, Target};
use crate::gate::thresholds::GateThresholds;

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
    pub offline: Option<Settings>,
    #[serde(default)]
    pub online: Option<Settings>,
    /// What `perfbench search FILE` searches; `perfbench run` runs the sweeps.
    #[serde(default)]
    pub search: Option<SearchSettings>,
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

/// `[profiles.<name>.offline]` / `[profiles.<name>.online]` / `[profiles.<name>.search]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileOverride {
    pub offline: Option<Settings>,
    pub online: Option<Settings>,
    pub search: Option<SearchSettings>,
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

impl Scenario {
    /// Parses scenario text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = toml::from_str(text)
            .map_err(|e| ScenarioError::Parse { path: path.to_path_buf(), message: e.message().replace('\n', " ") })?;
        if scenario.offline.is_none() && scenario.online.is_none() && scenario.search.is_none() {
            return Err(ScenarioError::Invalid(
                scenario.name,
                "needs an [offline] or an [online] section, or a [search] table".into(),
            ));
        }
        scenario.gate.validate().map_err(|e| ScenarioError::Invalid(scenario.name.clone(), e.to_string()))?;
        Ok(scenario)
    }

    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Read { path: path.to_path_buf(), source })?;
        Scenario::parse(&text, path)
    }

    fn profile(&self, profile: Option<&str>) -> Result<ProfileOverride, ScenarioError> {
        match profile {
            None => Ok(ProfileOverride::default()),
            Some(name) => self.profiles.get(name).cloned().ok_or_else(|| ScenarioError::UnknownProfile {
                scenario: self.name.clone(),
                profile: name.to_string(),
                known: self.profiles.keys().cloned().collect::<Vec<_>>().join(", "),
            }),
        }
    }

    /// The offline and online sections with `profile`'s overrides merged in.
    pub fn sections(&self, profile: Option<&str>) -> Result<(Option<Settings>, Option<Settings>), ScenarioError> {
        let over = self.profile(profile)?;
        let merge = |base: &Option<Settings>, over: &Option<Settings>| {
            base.as_ref().map(|b| b.merged(over.as_ref().unwrap_or(&Settings::default())))
        };
        Ok((merge(&self.offline, &over.offline), merge(&self.online, &over.online)))
    }

    /// What `perfbench search` takes from this scenario, `profile`'s overrides merged in: the
    /// `[search]` table, and the `[online]` settings every point is measured with (none: the
    /// online defaults). The flags go over both before the search resolves.
    pub fn search(&self, profile: Option<&str>) -> Result<(SearchSettings, Settings), ScenarioError> {
        let Some(search) = &self.search else {
            return Err(ScenarioError::Invalid(self.name.clone(), "has no [search] table to search with".into()));
        };
        let over = self.profile(profile)?;
        let search = search.merged(&over.search.unwrap_or_default());
        let online = self.sections(profile)?.1.unwrap_or_default();
        Ok((search, online))
    }

    /// The plan of a run of this scenario: its offline and online sweeps (with `profile`'s
    /// overrides merged in), each writing under `out/offline` or `out/online`.
    pub fn plan(&self, profile: Option<&str>, target: Target, out: &Path) -> Result<Plan, ScenarioError> {
        if self.offline.is_none() && self.online.is_none() {
            return Err(ScenarioError::Invalid(
                self.name.clone(),
                "has no [offline] or [online] sweep to run; its [search] table runs with `perfbench search FILE`"
                    .into(),
            ));
        }
        let (offline, online) = self.sections(profile)?;
        let invalid = |e: PlanError| ScenarioError::Invalid(self.name.clone(), e.to_string());
        let mut sweeps = Vec::new();
        for (kind, section) in [(SweepKind::Offline, offline), (SweepKind::Online, online)] {
            if let Some(mut settings) = section {
                settings.output.out = Some(out.join(kind.name()));
                sweeps.push(resolve(kind, &settings, &target).map_err(invalid)?);
            }
        }
        let plan = Plan {
            shard: None,
            resume: false,
            target,
            model: Model { name: self.model.name.clone(), version: String::new(), config: self.model.config.clone() },
            sweeps,
            gate: None,
        };
        plan.validate().map_err(invalid)?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::shm::SharedMemoryKind;
    use crate::plan::search::SearchPlan;
    use crate::plan::{Levels, Load};

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
        let embedded = Target::Embedded { model_repository: None };
        let plan = s.plan(Some("quick"), embedded.clone(), Path::new("/tmp/x")).unwrap();
        let (offline, online) = (&plan.sweeps[0], &plan.sweeps[1]);
        assert_eq!(offline.batch_sizes, Levels::one(1));
        assert_eq!(offline.measurement.request_count, 50);
        assert_eq!(offline.input.shared_memory, SharedMemoryKind::System);
        assert_eq!(online.batch_sizes, Levels::one(4));
        assert_eq!(online.load, Load::Concurrency { levels: "2..6:2".parse().unwrap() });
        assert_eq!(online.output.dir.as_deref(), Some(Path::new("/tmp/x/online")));
        assert_eq!(s.gate.max_throughput_drop, 20.0);
        let err = s.plan(Some("slow"), embedded, Path::new("/tmp/x")).unwrap_err();
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
                for profile in [None, Some("quick")] {
                    let target = Target::Embedded { model_repository: None };
                    if s.offline.is_some() || s.online.is_some() {
                        s.plan(profile, target.clone(), Path::new("/tmp/x"))
                            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    }
                    if s.search.is_some() {
                        let (search, online) = s.search(profile).unwrap();
                        let model = Model {
                            name: s.model.name.clone(),
                            version: String::new(),
                            config: s.model.config.clone(),
                        };
                        SearchPlan::resolve(target, model, &search, &online, "/tmp/x".into())
                            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    }
                }
            }
        }
    }
}
