//! A candidate applied to the model's own config, and the two forms the config travels in:
//! Triton's config JSON (the repository `load` call's `config` parameter) and Triton's
//! `config.pbtxt` text (the winner, ready to drop into a repository).

use prost_reflect::text_format::FormatOptions;

use crate::plan::search::{Batching, Candidate, Space};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::{ModelConfig, ModelDynamicBatching, ModelInstanceGroup};

const MODEL_CONFIG: &str = "inference.ModelConfig";

/// Why a model cannot be searched: its scheduler is not one the search varies.
pub fn unsearchable(config: &ModelConfig) -> Option<String> {
    if config.platform == "ensemble" {
        return Some(format!("model '{}' is an ensemble: search its composing models instead", config.name));
    }
    if matches!(config.scheduling_choice, Some(SchedulingChoice::SequenceBatching(_))) {
        return Some(format!(
            "model '{}' has a sequence batcher: search varies the default and dynamic schedulers only",
            config.name
        ));
    }
    None
}

/// The space with each empty scheduler dimension set to the model's own value; refused when it
/// varies a parameter the model's config does not have (a misspelt name would vary nothing).
pub fn filled(space: &Space, original: &ModelConfig) -> Result<Space, String> {
    if let Some(p) = space.parameters.iter().find(|p| !original.parameters.contains_key(&p.name)) {
        let mut has: Vec<&str> = original.parameters.keys().map(String::as_str).collect();
        has.sort_unstable();
        return Err(format!(
            "model '{}' has no parameter '{}' to vary (its parameters: {})",
            original.name,
            p.name,
            if has.is_empty() { "none".to_string() } else { has.join(", ") }
        ));
    }
    let own = as_candidate(original, space);
    let mut space = space.clone();
    if space.instances.is_empty() {
        space.instances = vec![own.instances];
    }
    if space.max_batch_sizes.is_empty() {
        space.max_batch_sizes = vec![own.max_batch_size];
    }
    if space.batching.is_empty() {
        space.batching = vec![own.batching];
    }
    Ok(space)
}

/// `original` with the candidate's instance count, `max_batch_size`, dynamic batcher and
/// parameters; all else (inputs, other parameters, the first instance group's kind and
/// devices) as it was.
pub fn apply(original: &ModelConfig, candidate: &Candidate) -> ModelConfig {
    let mut config = original.clone();
    for (name, value) in &candidate.parameters {
        config.parameters.entry(name.clone()).or_default().string_value = value.clone();
    }
    config.max_batch_size = candidate.max_batch_size as i32;
    let mut group = original.instance_group.first().cloned().unwrap_or_default();
    group.count = candidate.instances as i32;
    config.instance_group = vec![ModelInstanceGroup { ..group }];
    config.scheduling_choice = match &candidate.batching {
        Batching::Off => None,
        Batching::Dynamic { queue_delay_us, preferred } => {
            // Keep the other batcher settings (priorities, ordering) the model had.
            let mut batcher = match &original.scheduling_choice {
                Some(SchedulingChoice::DynamicBatching(d)) => d.clone(),
                _ => ModelDynamicBatching::default(),
            };
            batcher.max_queue_delay_microseconds = *queue_delay_us;
            batcher.preferred_batch_size = preferred.iter().map(|&p| p as i32).collect();
            Some(SchedulingChoice::DynamicBatching(batcher))
        }
    };
    config
}

/// What the model's config is, as a candidate of `space` (the default configuration's row).
pub fn as_candidate(config: &ModelConfig, space: &Space) -> Candidate {
    Candidate {
        parameters: space
            .parameters
            .iter()
            .map(|p| {
                let value = crate::server::config::parameter(config, &p.name).unwrap_or_default();
                (p.name.clone(), value.to_string())
            })
            .collect(),
        instances: config.instance_group.iter().map(|g| g.count.max(1) as u32).sum::<u32>().max(1),
        max_batch_size: config.max_batch_size.max(0) as u32,
        batching: match &config.scheduling_choice {
            Some(SchedulingChoice::DynamicBatching(d)) => Batching::Dynamic {
                queue_delay_us: d.max_queue_delay_microseconds,
                preferred: d.preferred_batch_size.iter().map(|&p| p.max(0) as u32).collect(),
            },
            _ => Batching::Off,
        },
    }
}

/// Triton's config JSON, as the repository `load` call takes it.
pub fn to_json(config: &ModelConfig) -> String {
    crate::proto::to_json(config, MODEL_CONFIG).to_string()
}

/// Triton's `config.pbtxt`: the protobuf text format Triton reads, one field a line.
pub fn to_pbtxt(config: &ModelConfig) -> String {
    let message = crate::proto::to_dynamic(config, MODEL_CONFIG);
    let text = message.to_text_format_with_options(&FormatOptions::new().pretty(true));
    format!("# Written by perfbench search.\n{text}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;

    const DELAY: &str = r#"
        backend: "delay"
        max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
        instance_group [ { count: 1 kind: KIND_CPU } ]
        parameters { key: "delay_us" value { string_value: "2000" } }
    "#;

    #[test]
    fn a_candidate_changes_only_its_dimensions_and_the_pbtxt_reads_back() {
        let original = parse_pbtxt(DELAY, "delay").unwrap();
        let space = space(&["delay_us=500,2000"]);
        let own = as_candidate(&original, &space);
        assert_eq!(own.batching, Batching::Off);
        assert_eq!(own.parameters, [("delay_us".to_string(), "2000".to_string())]);
        let candidate = Candidate {
            instances: 3,
            max_batch_size: 32,
            batching: Batching::Dynamic { queue_delay_us: 100, preferred: vec![8, 16] },
            parameters: vec![("delay_us".into(), "500".into())],
        };
        let config = apply(&original, &candidate);
        assert_eq!(as_candidate(&config, &space), candidate);
        assert_eq!(crate::server::config::parameter(&config, "delay_us"), Some("500"));
        assert_eq!(config.input, original.input);
        let text = to_pbtxt(&config);
        let back = parse_pbtxt(&text, "delay").unwrap();
        assert_eq!(back, config, "{text}");
        // And the JSON the load call sends reads back the same.
        let json = crate::server::config::parse_json(&to_json(&config), "delay").unwrap();
        assert_eq!(json, config);
        // Batching off drops the batcher again.
        let off = apply(&config, &Candidate { batching: Batching::Off, ..candidate });
        assert!(off.scheduling_choice.is_none());
    }

    fn space(parameters: &[&str]) -> Space {
        Space {
            instances: vec![],
            max_batch_sizes: vec![],
            batching: vec![],
            parameters: parameters.iter().map(|p| p.parse().unwrap()).collect(),
            concurrency: vec![1],
        }
    }

    #[test]
    fn empty_dimensions_keep_the_models_own_and_an_unknown_parameter_is_refused() {
        let original = parse_pbtxt(DELAY, "delay").unwrap();
        let own = filled(&space(&["delay_us=1..4"]), &original).unwrap();
        assert_eq!((own.instances.as_slice(), own.max_batch_sizes.as_slice()), (&[1][..], &[0][..]));
        assert_eq!(own.batching, [Batching::Off]);
        assert_eq!(own.parameters[0].values, ["1", "2", "4"]);
        let given = Space { instances: vec![2, 4], ..space(&[]) };
        assert_eq!(filled(&given, &original).unwrap().instances, [2, 4], "a given dimension stays");
        let err = filled(&space(&["delay_ms=1,2"]), &original).unwrap_err();
        assert!(err.contains("no parameter 'delay_ms'") && err.contains("delay_us"), "{err}");
    }
}
