//! An ensemble's composing models, found from the model configs: every step's config is read,
//! and a step that is itself an ensemble is walked in turn (as perf_analyzer does). The tree
//! tells [`super::point::StatsSource`] which statistics to read in each window. Models named by
//! `--bls-composing-models` join the target's own steps, as perf_analyzer adds them: a BLS model
//! is then reported as an ensemble of them.

use std::future::Future;

use crate::client::{ClientError, ClientResult};
use crate::plan::ModelRef;
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::ModelConfig;
use crate::results::ComposingModel;

/// Deeper nesting than this is taken for a cycle of ensembles.
const MAX_DEPTH: usize = 16;

/// The steps of an ensemble config, each (name, version) once, sorted; none for other models.
fn steps(config: &ModelConfig, depth: usize) -> Vec<ComposingModel> {
    let Some(SchedulingChoice::EnsembleScheduling(ensemble)) = &config.scheduling_choice else {
        return Vec::new();
    };
    let mut steps: Vec<ComposingModel> = ensemble
        .step
        .iter()
        .map(|s| ComposingModel {
            name: s.model_name.clone(),
            // -1 (or any negative) asks for the latest version.
            version: if s.model_version < 0 { String::new() } else { s.model_version.to_string() },
            depth,
            ensemble: false,
        })
        .collect();
    steps.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    steps.dedup();
    steps
}

/// The composing models under `config` and the `bls` models, in pre-order (see
/// [`ComposingModel`]); empty when `config` is not an ensemble and `bls` is empty.
/// `config_of(name, version)` reads a composing model's config.
pub async fn composing_models<F, Fut>(
    config: &ModelConfig,
    bls: &[ModelRef],
    mut config_of: F,
) -> ClientResult<Vec<ComposingModel>>
where
    F: FnMut(String, String) -> Fut,
    Fut: Future<Output = ClientResult<ModelConfig>>,
{
    let mut tree = Vec::new();
    let mut top = steps(config, 1);
    top.extend(bls.iter().map(|m| ComposingModel {
        name: m.name.clone(),
        version: m.version.clone(),
        depth: 1,
        ensemble: false,
    }));
    top.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    top.dedup();
    let mut pending: Vec<ComposingModel> = top.into_iter().rev().collect();
    while let Some(mut model) = pending.pop() {
        if model.depth > MAX_DEPTH {
            return Err(ClientError::Protocol(format!(
                "ensembles nest deeper than {MAX_DEPTH} levels at '{}' (a cycle?)",
                model.name
            )));
        }
        let below = steps(&config_of(model.name.clone(), model.version.clone()).await?, model.depth + 1);
        model.ensemble = !below.is_empty();
        tree.push(model);
        pending.extend(below.into_iter().rev());
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::model_ensembling::Step;
    use crate::proto::inference::ModelEnsembling;
    use std::collections::HashMap;

    fn ensemble(steps: &[(&str, i64)]) -> ModelConfig {
        ModelConfig {
            platform: "ensemble".into(),
            scheduling_choice: Some(SchedulingChoice::EnsembleScheduling(ModelEnsembling {
                step: steps
                    .iter()
                    .map(|(name, version)| Step {
                        model_name: name.to_string(),
                        model_version: *version,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    async fn walk(
        top: &ModelConfig,
        configs: &HashMap<&str, ModelConfig>,
    ) -> ClientResult<Vec<(String, String, usize, bool)>> {
        walk_with(top, &[], configs).await
    }

    async fn walk_with(
        top: &ModelConfig,
        bls: &[ModelRef],
        configs: &HashMap<&str, ModelConfig>,
    ) -> ClientResult<Vec<(String, String, usize, bool)>> {
        let tree = composing_models(top, bls, |name, _| {
            let found = configs.get(name.as_str()).cloned();
            async move { found.ok_or(ClientError::Protocol(format!("no model {name}"))) }
        })
        .await?;
        Ok(tree.into_iter().map(|m| (m.name, m.version, m.depth, m.ensemble)).collect())
    }

    fn t(name: &str, version: &str, depth: usize, ensemble: bool) -> (String, String, usize, bool) {
        (name.into(), version.into(), depth, ensemble)
    }

    #[tokio::test]
    async fn nested_ensembles_are_walked_in_perf_analyzer_order() {
        let configs = HashMap::from([
            ("pre", ModelConfig::default()),
            ("sleep", ModelConfig::default()),
            ("inner", ensemble(&[("sleep", -1), ("pre", 2)])),
        ]);
        // "pre" twice in one ensemble counts once; the nested ensemble's steps follow it.
        let top = ensemble(&[("pre", 2), ("inner", -1), ("pre", 2)]);
        let tree = walk(&top, &configs).await.unwrap();
        assert_eq!(
            tree,
            [t("inner", "", 1, true), t("pre", "2", 2, false), t("sleep", "", 2, false), t("pre", "2", 1, false)]
        );
        assert!(walk(&ModelConfig::default(), &configs).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn bls_composing_models_join_the_steps_and_an_ensemble_among_them_is_walked() {
        let configs = HashMap::from([
            ("pre", ModelConfig::default()),
            ("sleep", ModelConfig::default()),
            ("inner", ensemble(&[("sleep", -1)])),
        ]);
        let bls = |name: &str, version: &str| ModelRef { name: name.into(), version: version.into() };
        // A BLS model (no ensemble): its listed models, sorted, each once.
        let listed = [bls("sleep", ""), bls("inner", ""), bls("pre", "2"), bls("sleep", "")];
        let tree = walk_with(&ModelConfig::default(), &listed, &configs).await.unwrap();
        assert_eq!(
            tree,
            [t("inner", "", 1, true), t("sleep", "", 2, false), t("pre", "2", 1, false), t("sleep", "", 1, false)]
        );
        // With an ensemble's own steps, one sorted set, as perf_analyzer keeps them.
        let tree = walk_with(&ensemble(&[("sleep", -1)]), &[bls("pre", "")], &configs).await.unwrap();
        assert_eq!(tree, [t("pre", "", 1, false), t("sleep", "", 1, false)]);
        // A listed model the server does not know fails the walk.
        assert!(walk_with(&ModelConfig::default(), &[bls("nosuch", "")], &configs).await.is_err());
    }

    #[tokio::test]
    async fn a_cycle_of_ensembles_is_an_error() {
        let configs = HashMap::from([("a", ensemble(&[("b", -1)])), ("b", ensemble(&[("a", -1)]))]);
        let err = walk(&ensemble(&[("a", -1)]), &configs).await.unwrap_err();
        assert!(err.to_string().contains("a cycle?"), "{err}");
    }
}
