//! Model configuration: Triton's `config.pbtxt` text format, parsed into the generated
//! `inference::ModelConfig` through prost-reflect, completed with Triton's defaults, and printed
//! as Triton's config JSON (KSERVE_V2.md §3.6).

use prost_reflect::DynamicMessage;

use super::error::{ServerError, ServerResult};
use crate::proto::descriptor_pool;
use crate::proto::inference::{
    model_instance_group, model_version_policy, ModelConfig, ModelInstanceGroup, ModelTransactionPolicy,
    ModelVersionPolicy,
};
use crate::tensor::DataType;

const MODEL_CONFIG: &str = "inference.ModelConfig";

/// Most instances (threads) one model may have.
pub const MAX_INSTANCES: usize = 64;

/// Parses a `config.pbtxt` body. `name` fills in a missing `name`, as Triton uses the directory name.
pub fn parse_pbtxt(text: &str, name: &str) -> ServerResult<ModelConfig> {
    let desc = descriptor_pool().get_message_by_name(MODEL_CONFIG).expect("ModelConfig descriptor");
    let dynamic = DynamicMessage::parse_text_format(desc, &normalize_list_colons(text))
        .map_err(|e| ServerError::invalid_arg(format!("model '{name}': bad config.pbtxt: {e}")))?;
    let mut config: ModelConfig = dynamic
        .transcode_to()
        .map_err(|e| ServerError::invalid_arg(format!("model '{name}': bad config.pbtxt: {e}")))?;
    if config.name.is_empty() {
        config.name = name.to_string();
    }
    complete(&mut config)?;
    Ok(config)
}

/// Triton writes repeated message fields as `input [ {..} ]`; the protobuf text format (and
/// prost-reflect) wants `input: [ {..} ]`. Adds the colon, outside strings and comments.
fn normalize_list_colons(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    let mut last_significant = ' ';
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == '\\' {
                        if let Some(e) = chars.next() {
                            out.push(e);
                        }
                    } else if d == c {
                        break;
                    }
                }
                last_significant = c;
            }
            '#' => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '[' => {
                if last_significant.is_ascii_alphanumeric() || last_significant == '_' {
                    out.push(':');
                }
                out.push(c);
                last_significant = c;
            }
            _ => {
                out.push(c);
                if !c.is_whitespace() {
                    last_significant = c;
                }
            }
        }
    }
    out
}

/// Parses a config given as JSON (the repository `load` API's `config` parameter).
pub fn parse_json(text: &str, name: &str) -> ServerResult<ModelConfig> {
    let desc = descriptor_pool().get_message_by_name(MODEL_CONFIG).expect("ModelConfig descriptor");
    let mut de = serde_json::Deserializer::from_str(text);
    let dynamic = DynamicMessage::deserialize(desc, &mut de)
        .map_err(|e| ServerError::invalid_arg(format!("model '{name}': bad config JSON: {e}")))?;
    let mut config: ModelConfig = dynamic
        .transcode_to()
        .map_err(|e| ServerError::invalid_arg(format!("model '{name}': bad config JSON: {e}")))?;
    if config.name.is_empty() {
        config.name = name.to_string();
    }
    complete(&mut config)?;
    Ok(config)
}

/// Fills in what Triton fills in, and rejects what cannot be served.
fn complete(config: &mut ModelConfig) -> ServerResult<()> {
    let name = config.name.clone();
    let ensemble = config.platform == "ensemble";
    if config.backend.is_empty() && !ensemble {
        return Err(ServerError::invalid_arg(format!("model '{name}': config needs a backend (the model kind)")));
    }
    if config.max_batch_size < 0 {
        return Err(ServerError::invalid_arg(format!("model '{name}': max_batch_size must be >= 0")));
    }
    for (what, dtype, dims) in config
        .input
        .iter()
        .map(|i| (&i.name, i.data_type, &i.dims))
        .chain(config.output.iter().map(|o| (&o.name, o.data_type, &o.dims)))
    {
        if DataType::from_config_enum(dtype).is_none() {
            return Err(ServerError::invalid_arg(format!("model '{name}': tensor '{what}' has no valid data_type")));
        }
        if dims.iter().any(|&d| d < -1 || d == 0) {
            return Err(ServerError::invalid_arg(format!("model '{name}': tensor '{what}' has bad dims {dims:?}")));
        }
    }
    if config.instance_group.iter().map(|g| g.count.max(1) as i64).sum::<i64>() > MAX_INSTANCES as i64 {
        return Err(ServerError::invalid_arg(format!(
            "model '{name}': more than {MAX_INSTANCES} instances in instance_group (one thread each)"
        )));
    }
    // An ensemble has no instances of its own, as in Triton.
    if config.instance_group.is_empty() && !ensemble {
        config.instance_group.push(ModelInstanceGroup { count: 1, ..Default::default() });
    }
    for (i, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{name}_{i}");
        }
        if group.count <= 0 {
            group.count = 1;
        }
        if group.kind == model_instance_group::Kind::Auto as i32 {
            group.kind = model_instance_group::Kind::Cpu as i32;
        }
    }
    if config.version_policy.is_none() {
        config.version_policy = Some(ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(model_version_policy::Latest {
                num_versions: 1,
            })),
        });
    }
    if config.model_transaction_policy.is_none() {
        config.model_transaction_policy = Some(ModelTransactionPolicy { decoupled: false });
    }
    Ok(())
}

/// Triton's config JSON: proto field names, scalar defaults printed, enums by name, 64-bit
/// integers as numbers (Triton converts the dims and delays back to numbers; clients accept both).
pub fn to_json(config: &ModelConfig) -> serde_json::Value {
    crate::proto::to_json(config, MODEL_CONFIG)
}

/// A string parameter from `parameters { key: ... value { string_value: ... } }`.
pub fn parameter<'a>(config: &'a ModelConfig, key: &str) -> Option<&'a str> {
    config.parameters.get(key).map(|p| p.string_value.as_str())
}

/// A numeric parameter with a default; a value that does not parse is an error naming the key.
pub fn parameter_or<T: std::str::FromStr>(config: &ModelConfig, key: &str, default: T) -> ServerResult<T> {
    match parameter(config, key) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| {
            ServerError::invalid_arg(format!("model '{}': parameter '{key}' = '{v}' is not valid", config.name))
        }),
    }
}

/// Total instance count over all instance groups.
pub fn instance_count(config: &ModelConfig) -> usize {
    config.instance_group.iter().map(|g| g.count.max(1) as usize).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PBTXT: &str = r#"
        backend: "identity"
        max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
        instance_group [ { count: 2 kind: KIND_CPU } ]
        parameters { key: "delay_us" value { string_value: "250" } }
    "#;

    #[test]
    fn parses_pbtxt_and_completes_defaults() {
        let c = parse_pbtxt(PBTXT, "ident").unwrap();
        assert_eq!(c.name, "ident");
        assert_eq!(c.max_batch_size, 8);
        assert_eq!(instance_count(&c), 2);
        assert_eq!(c.instance_group[0].name, "ident_0");
        assert_eq!(parameter_or(&c, "delay_us", 0u64).unwrap(), 250);
        assert!(parameter_or(&c, "missing", 7u32).unwrap() == 7);
    }

    #[test]
    fn json_looks_like_tritons() {
        let c = parse_pbtxt(PBTXT, "ident").unwrap();
        let j = to_json(&c);
        assert_eq!(j["max_batch_size"], 8);
        assert_eq!(j["input"][0]["data_type"], "TYPE_FP32");
        assert_eq!(j["input"][0]["dims"][0], -1);
        assert_eq!(j["input"][0]["is_shape_tensor"], false);
        assert_eq!(j["dynamic_batching"]["max_queue_delay_microseconds"], 100);
        assert_eq!(j["model_transaction_policy"]["decoupled"], false);
        assert_eq!(j["instance_group"][0]["kind"], "KIND_CPU");
        // JSON parses back to the same config.
        let back = parse_json(&j.to_string(), "ident").unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn list_colons_are_added_outside_strings_and_comments() {
        let t = "input [ { dims: [ -1 ] } ] # a [ b\nname: \"x [\"";
        assert_eq!(normalize_list_colons(t), "input :[ { dims: [ -1 ] } ] \nname: \"x [\"");
    }

    #[test]
    fn rejects_bad_config() {
        assert!(parse_pbtxt("max_batch_size: 1", "x").unwrap_err().message.contains("backend"));
        assert!(parse_pbtxt("backend: \"identity\" bogus: 1", "x").is_err());
    }
}
