//! The model repository: where configs come from (a directory of `<model>/config.pbtxt`, or the
//! bundled zoo), which models are loaded, and the repository extension's index/load/unload.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use super::bls::{self, Bls};
use super::config;
use super::ensemble::{self, Ensemble};
use super::error::{ServerError, ServerResult};
use super::llm::{self, LlmEngine};
use super::models;
use super::scheduler::Scheduler;
use super::stats::ModelStats;
use crate::proto::inference::ModelConfig;

/// The bundled model zoo: name and `config.pbtxt` text.
pub const ZOO: &[(&str, &str)] = &[
    ("identity", include_str!("zoo/identity.pbtxt")),
    ("identity_bytes", include_str!("zoo/identity_bytes.pbtxt")),
    ("identity_fp16", include_str!("zoo/identity_fp16.pbtxt")),
    ("identity_nobatch", include_str!("zoo/identity_nobatch.pbtxt")),
    ("var_shape", include_str!("zoo/var_shape.pbtxt")),
    ("add_sub", include_str!("zoo/add_sub.pbtxt")),
    ("optional", include_str!("zoo/optional.pbtxt")),
    ("repeat", include_str!("zoo/repeat.pbtxt")),
    ("llm", include_str!("zoo/llm.pbtxt")),
    ("llm_reasoning", include_str!("zoo/llm_reasoning.pbtxt")),
    ("accumulate", include_str!("zoo/accumulate.pbtxt")),
    ("delay", include_str!("zoo/delay.pbtxt")),
    ("bert", include_str!("zoo/bert.pbtxt")),
    ("wide_deep", include_str!("zoo/wide_deep.pbtxt")),
    ("dlrm", include_str!("zoo/dlrm.pbtxt")),
    ("embedding_lookup", include_str!("zoo/embedding_lookup.pbtxt")),
    ("dlrm_dense", include_str!("zoo/dlrm_dense.pbtxt")),
    ("dlrm_hps", include_str!("zoo/dlrm_hps.pbtxt")),
    ("ensemble", include_str!("zoo/ensemble.pbtxt")),
    ("bls", include_str!("zoo/bls.pbtxt")),
];

/// Why a model cannot be a step of an ensemble or the call of a BLS model: steps run on a
/// scheduler, and these models have none.
fn nesting(config: &ModelConfig) -> Option<&'static str> {
    if ensemble::is_ensemble(config) {
        Some("is an ensemble; nested ensembles are not supported")
    } else if bls::is_bls(config) {
        Some("is a BLS model; a step must be a model that executes")
    } else if llm::is_llm(config) {
        Some("is a generative model; it only streams")
    } else {
        None
    }
}

pub use super::infer::MODEL_VERSION;

/// A loaded, ready model.
pub struct LoadedModel {
    pub config: ModelConfig,
    pub stats: Arc<ModelStats>,
    pub runner: Runner,
}

/// What runs a model's requests.
pub enum Runner {
    /// A bundled model behind its batcher and instances.
    Scheduler(Scheduler),
    /// An ensemble: its steps run on the composing models' own runners.
    Ensemble(Ensemble),
    /// A BLS model: each request calls another model on that model's runner.
    Bls(Bls),
    /// A generative model: its own continuous batcher, streamed token by token.
    Llm(Arc<LlmEngine>),
}

impl LoadedModel {
    /// Whether the model is decoupled (only a stream carries its answers).
    pub fn decoupled(&self) -> bool {
        match &self.runner {
            Runner::Scheduler(s) => s.decoupled(),
            Runner::Llm(_) => true,
            Runner::Ensemble(_) | Runner::Bls(_) => false,
        }
    }

    /// Requests waiting for an instance; an ensemble's wait in its composing models.
    pub fn pending(&self) -> usize {
        match &self.runner {
            Runner::Scheduler(s) => s.pending(),
            Runner::Ensemble(_) => 0,
            Runner::Bls(b) => b.pending(),
            Runner::Llm(engine) => engine.gauges().waiting,
        }
    }
}

/// One entry of the repository index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub version: String,
    pub state: String,
    pub reason: String,
}

pub struct ModelRepository {
    dir: Option<PathBuf>,
    models: RwLock<BTreeMap<String, Arc<LoadedModel>>>,
}

impl ModelRepository {
    /// Opens the repository and loads `only` (or every model it holds when empty).
    pub fn open(dir: Option<PathBuf>, only: &[String]) -> ServerResult<Self> {
        let repo = ModelRepository { dir, models: RwLock::new(BTreeMap::new()) };
        let available = repo.available()?;
        for name in only {
            if !available.contains(name) {
                return Err(ServerError::not_found(format!(
                    "model '{name}' is not in the repository (it has: {})",
                    available.join(", ")
                )));
            }
        }
        let names = if only.is_empty() { available } else { only.to_vec() };
        for name in names {
            // An ensemble loaded earlier may have loaded this one as its dependency.
            if repo.models.read().contains_key(&name) {
                continue;
            }
            repo.load(&name, None)?;
        }
        Ok(repo)
    }

    /// Names of every model the source holds, loaded or not.
    pub fn available(&self) -> ServerResult<Vec<String>> {
        match &self.dir {
            None => Ok(ZOO.iter().map(|(n, _)| n.to_string()).collect()),
            Some(dir) => {
                let entries = std::fs::read_dir(dir).map_err(|e| {
                    ServerError::invalid_arg(format!("cannot read model repository '{}': {e}", dir.display()))
                })?;
                let mut names: Vec<String> = entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.path().join("config.pbtxt").is_file())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect();
                names.sort();
                Ok(names)
            }
        }
    }

    fn config_text(&self, name: &str) -> ServerResult<String> {
        match &self.dir {
            None => ZOO
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, text)| text.to_string())
                .ok_or_else(|| ServerError::not_found(format!("failed to load '{name}', no version is available"))),
            Some(dir) => {
                let path = dir.join(name).join("config.pbtxt");
                std::fs::read_to_string(&path)
                    .map_err(|_| ServerError::not_found(format!("failed to load '{name}', no version is available")))
            }
        }
    }

    /// Loads (or reloads) a model, from its source or from a JSON config override.
    pub fn load(&self, name: &str, config_json: Option<&str>) -> ServerResult<()> {
        let config = match config_json {
            Some(json) => config::parse_json(json, name)?,
            None => config::parse_pbtxt(&self.config_text(name)?, name)?,
        };
        if config.name != name {
            return Err(ServerError::invalid_arg(format!("model '{name}': config names the model '{}'", config.name)));
        }
        let stats = Arc::new(ModelStats::default());
        let runner = if ensemble::is_ensemble(&config) {
            let ensemble = Ensemble::new(&config)?;
            self.load_composing(&ensemble)?;
            Runner::Ensemble(ensemble)
        } else if bls::is_bls(&config) {
            let bls = Bls::new(&config)?;
            self.load_composing(bls.graph())?;
            Runner::Bls(bls)
        } else if llm::is_llm(&config) {
            Runner::Llm(Arc::new(LlmEngine::new(&config, stats.clone())?))
        } else {
            let model = models::build(&config)?;
            Runner::Scheduler(Scheduler::start(config.clone(), model, stats.clone(), config::instance_count(&config))?)
        };
        let loaded = Arc::new(LoadedModel { config, stats, runner });
        tracing::info!(model = name, "loaded");
        self.models.write().insert(name.to_string(), loaded);
        Ok(())
    }

    /// Checks the composing models of an ensemble (or the model a BLS model calls), loading those
    /// that the source holds but are not loaded yet (as Triton loads an ensemble's dependencies).
    fn load_composing(&self, graph: &Ensemble) -> ServerResult<()> {
        let owner = graph.label();
        for model in graph.composing_models() {
            let loaded = self.models.read().get(model).cloned();
            let loaded = match loaded {
                Some(m) => m,
                None => {
                    if !self.available()?.iter().any(|n| n == model) {
                        return Err(ServerError::invalid_arg(format!(
                            "{owner}: composing model '{model}' is not in the repository"
                        )));
                    }
                    if let Some(why) = nesting(&config::parse_pbtxt(&self.config_text(model)?, model)?) {
                        return Err(ServerError::invalid_arg(format!("{owner}: composing model '{model}' {why}")));
                    }
                    self.load(model, None).map_err(|e| {
                        ServerError::invalid_arg(format!(
                            "{owner}: composing model '{model}' failed to load: {}",
                            e.message
                        ))
                    })?;
                    self.get(model, "")?
                }
            };
            if let Some(why) = nesting(&loaded.config) {
                return Err(ServerError::invalid_arg(format!("{owner}: composing model '{model}' {why}")));
            }
            graph.check_composing(&loaded.config)?;
        }
        Ok(())
    }

    /// Loads (or reloads) a model defined by config.pbtxt text that is not in the source, e.g.
    /// a scenario's own `[model] config`.
    pub fn load_pbtxt(&self, name: &str, pbtxt: &str) -> ServerResult<()> {
        let config = config::parse_pbtxt(pbtxt, name)?;
        self.load(name, Some(&config::to_json(&config).to_string()))
    }

    pub fn unload(&self, name: &str) -> ServerResult<()> {
        match self.models.write().remove(name) {
            Some(_) => {
                tracing::info!(model = name, "unloaded");
                Ok(())
            }
            None => Err(ServerError::invalid_arg(format!("failed to unload '{name}', model is not loaded"))),
        }
    }

    /// A ready model. `version` may be empty (latest) or "1".
    pub fn get(&self, name: &str, version: &str) -> ServerResult<Arc<LoadedModel>> {
        let model = self.models.read().get(name).cloned();
        match model {
            Some(m) if version.is_empty() || version == MODEL_VERSION => Ok(m),
            Some(_) => Err(ServerError::not_found(format!(
                "Request for unknown model: '{name}' version {version} is not found"
            ))),
            None => Err(ServerError::not_found(format!("Request for unknown model: '{name}' is not found"))),
        }
    }

    pub fn loaded(&self) -> Vec<Arc<LoadedModel>> {
        self.models.read().values().cloned().collect()
    }

    pub fn index(&self, ready_only: bool) -> ServerResult<Vec<IndexEntry>> {
        let loaded = self.models.read();
        let mut entries = Vec::new();
        for name in self.available()? {
            let ready = loaded.contains_key(&name);
            if ready_only && !ready {
                continue;
            }
            entries.push(IndexEntry {
                name,
                version: MODEL_VERSION.into(),
                state: if ready { "READY" } else { "UNAVAILABLE" }.into(),
                reason: if ready { "" } else { "unloaded" }.into(),
            });
        }
        Ok(entries)
    }
}
