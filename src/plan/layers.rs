//! One rule for layered settings: a later layer's keys replace an earlier one's (a profile's
//! over its scenario section, flags over both), for any settings struct whose unset keys are
//! `None`. It is written once, over serde, so a new setting needs no merge code.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// `base` with every key `over` sets replaced. Each layer goes through TOML, as the plan file
/// does, so whatever a plan can hold merges, and an unset key is simply absent.
pub fn overlay<T: Serialize + DeserializeOwned>(base: &T, over: &T) -> T {
    let keys = |layer: &T| match toml::Value::try_from(layer).expect("settings are representable as TOML") {
        toml::Value::Table(keys) => keys,
        other => panic!("settings are a table, not {other}"),
    };
    let mut merged = keys(base);
    merged.extend(keys(over));
    toml::Value::Table(merged).try_into().expect("keys of two valid settings make valid settings")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::search::SearchSettings;
    use crate::plan::{Levels, Settings};

    #[test]
    fn a_later_layer_wins_key_by_key_and_unset_keys_fall_through() {
        let base = Settings {
            batch_sizes: Some(Levels::List(vec![1, 8])),
            protocol: Some("grpc".into()),
            input_data: Some(vec!["a.json".into(), "b.json".into()]),
            streaming: Some(true),
            ..Settings::default()
        };
        let over = Settings {
            batch_sizes: Some(Levels::one(4)),
            input_data: Some(vec!["c.json".into()]),
            streaming: Some(false),
            max_trials: Some(3),
            ..Settings::default()
        };
        let merged = overlay(&base, &over);
        assert_eq!(
            merged,
            Settings {
                batch_sizes: Some(Levels::one(4)),
                protocol: Some("grpc".into()),
                input_data: Some(vec!["c.json".into()]),
                streaming: Some(false),
                max_trials: Some(3),
                ..Settings::default()
            }
        );
        assert_eq!(overlay(&base, &Settings::default()), base);
        assert_eq!(overlay(&Settings::default(), &base), base);
        let search = SearchSettings { max_configs: Some(5), ..SearchSettings::default() };
        let over = SearchSettings { objective: Some("throughput".into()), ..SearchSettings::default() };
        assert_eq!(overlay(&search, &over), SearchSettings { objective: Some("throughput".into()), ..search });
    }
}
