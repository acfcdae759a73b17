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
    use crate::plan::{Levels, Protocol, Settings};

    fn settings(text: &str) -> Settings {
        toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_later_layer_wins_key_by_key_and_unset_keys_fall_through() {
        let base = settings(
            "batch_sizes = [1, 8]\nprotocol = \"grpc\"\ninput_data = [\"a.json\", \"b.json\"]\nstreaming = true",
        );
        assert_eq!(base.call.protocol, Some(Protocol::Grpc));
        assert_eq!(base.load.batch_sizes, Some(Levels::List(vec![1, 8])));
        let over = settings("batch_sizes = [4]\ninput_data = \"c.json\"\nstreaming = false\nmax_trials = 3");
        let merged = overlay(&base, &over);
        let want =
            "batch_sizes = [4]\nprotocol = \"grpc\"\ninput_data = [\"c.json\"]\nstreaming = false\nmax_trials = 3";
        assert_eq!(merged, settings(want));
        assert_eq!(overlay(&base, &Settings::default()), base);
        assert_eq!(overlay(&Settings::default(), &base), base);
        let search = SearchSettings { max_configs: Some(5), ..SearchSettings::default() };
        let over = SearchSettings { objective: Some("throughput".into()), ..SearchSettings::default() };
        assert_eq!(overlay(&search, &over), SearchSettings { objective: Some("throughput".into()), ..search });
    }
}

#[cfg(test)]
mod keys {
    use crate::plan::Settings;

    #[test]
    fn a_key_no_section_knows_or_a_value_its_type_refuses_is_named() {
        let err = |text: &str| toml::from_str::<Settings>(text).unwrap_err().message().to_string();
        assert!(err("batch = 4\nbacth = 4").contains("unknown field `bacth`"), "{}", err("bacth = 4"));
        assert!(err("protocol = \"udp\"").contains("Failed to parse -i (protocol)"), "{}", err("protocol = \"udp\""));
        assert!(err("request_rate = \"0\"").contains("must be > 0"), "{}", err("request_rate = \"0\""));
    }
}
