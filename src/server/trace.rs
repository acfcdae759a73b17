//! The trace extension's settings. perfbench serve records no traces, but it keeps the settings
//! clients set (globally and per model) and reports them back as Triton does, so clients that set
//! them (perf_analyzer's `--trace-level`, `--trace-rate`, `--trace-count`, `--log-frequency`) work.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

use super::error::{ServerError, ServerResult};

/// Setting name -> values (only `trace_level` may hold several).
pub type Settings = BTreeMap<String, Vec<String>>;

const LEVELS: &[&str] = &["OFF", "TIMESTAMPS", "TENSORS"];

fn defaults() -> Settings {
    [
        ("trace_level", vec!["OFF"]),
        ("trace_rate", vec!["1000"]),
        ("trace_count", vec!["-1"]),
        ("log_frequency", vec!["0"]),
        ("trace_file", vec![]),
        ("trace_mode", vec!["triton"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect()
}

#[derive(Default)]
pub struct TraceSettings {
    global: Mutex<Settings>,
    models: Mutex<HashMap<String, Settings>>,
}

/// One update: a value list, or `None` to clear the setting (a model's falls back to the global
/// one, the global one to the default).
pub type Update = (String, Option<Vec<String>>);

fn check(key: &str, values: &[String]) -> ServerResult<()> {
    let bad = |why: &str| Err(ServerError::invalid_arg(format!("trace setting '{key}': {why}, got {values:?}")));
    let number = |min: i64| values.len() == 1 && values[0].trim().parse::<i64>().is_ok_and(|v| v >= min);
    match key {
        "trace_level" if values.is_empty() || values.iter().any(|v| !LEVELS.contains(&v.as_str())) => {
            bad("each value must be OFF, TIMESTAMPS or TENSORS")
        }
        "trace_rate" | "log_frequency" if !number(0) => bad("must be one non-negative integer"),
        "trace_count" if !number(-1) => bad("must be one integer >= -1"),
        "trace_mode" | "trace_file" => Err(ServerError::invalid_arg(format!(
            "trace setting '{key}' cannot be changed: perfbench serve writes no trace"
        ))),
        "trace_level" | "trace_rate" | "log_frequency" | "trace_count" => Ok(()),
        _ => Err(ServerError::invalid_arg(format!("unknown trace setting '{key}'"))),
    }
}

impl TraceSettings {
    /// The settings in force for `model` ("" for the global ones).
    pub fn get(&self, model: &str) -> Settings {
        let mut settings = defaults();
        settings.extend(self.global.lock().clone());
        if !model.is_empty() {
            if let Some(own) = self.models.lock().get(model) {
                settings.extend(own.clone());
            }
        }
        settings
    }

    /// Applies `updates` to `model`'s settings ("" for the global ones), all or none, and returns
    /// the settings now in force.
    pub fn update(&self, model: &str, updates: Vec<Update>) -> ServerResult<Settings> {
        for (key, values) in &updates {
            if let Some(values) = values {
                check(key, values)?;
            } else if !defaults().contains_key(key) {
                return Err(ServerError::invalid_arg(format!("unknown trace setting '{key}'")));
            }
        }
        {
            let mut models = self.models.lock();
            let mut global = self.global.lock();
            let target = if model.is_empty() { &mut *global } else { models.entry(model.to_string()).or_default() };
            for (key, values) in updates {
                match values {
                    Some(v) => target.insert(key, v),
                    None => target.remove(&key),
                };
            }
        }
        Ok(self.get(model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, v: &[&str]) -> Update {
        (key.to_string(), Some(v.iter().map(|s| s.to_string()).collect()))
    }

    #[test]
    fn model_settings_override_global_ones_until_cleared() {
        let t = TraceSettings::default();
        assert_eq!(t.get("")["trace_level"], ["OFF"]);
        t.update("", vec![set("trace_rate", &["100"])]).unwrap();
        let m = t.update("m", vec![set("trace_level", &["TIMESTAMPS"]), set("trace_count", &["20"])]).unwrap();
        assert_eq!(
            (m["trace_level"].clone(), m["trace_rate"].clone()),
            (vec!["TIMESTAMPS".into()], vec!["100".into()])
        );
        assert_eq!(t.get("")["trace_level"], ["OFF"]);
        let m = t.update("m", vec![("trace_level".into(), None)]).unwrap();
        assert_eq!(m["trace_level"], ["OFF"]);
    }

    #[test]
    fn bad_values_change_nothing() {
        let t = TraceSettings::default();
        let e = t.update("", vec![set("trace_rate", &["5"]), set("trace_level", &["LOUD"])]).unwrap_err();
        assert!(e.message.contains("trace_level"), "{e}");
        assert_eq!(t.get("")["trace_rate"], ["1000"]);
        assert!(t.update("", vec![set("trace_count", &["-2"])]).is_err());
        assert!(t.update("", vec![set("bogus", &["1"])]).is_err());
    }
}
