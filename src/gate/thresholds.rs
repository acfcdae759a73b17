//! The gate's limits: how much worse a row may get before it counts as a regression. Read from
//! a scenario's `[gate]` table (this struct is what the scenario embeds) and overridden by flags.

use std::path::Path;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::GateError;

/// Per-metric limits, in percent of the baseline value.
///
/// In a scenario file:
///
/// ```toml
/// [gate]
/// max_throughput_drop = 10.0
/// max_p99_rise = 15.0
/// max_avg_rise = 15.0
/// # a generative sweep's rows also:
/// max_ttft_p99_rise = 15.0
/// max_itl_p99_rise = 15.0
/// max_token_throughput_drop = 10.0
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GateThresholds {
    /// Largest allowed throughput drop, percent of the baseline inferences/second.
    pub max_throughput_drop: f64,
    /// Largest allowed p99 latency rise, percent of the baseline p99.
    pub max_p99_rise: f64,
    /// Largest allowed average latency rise, percent of the baseline average.
    pub max_avg_rise: f64,
    /// Generative rows: largest allowed rise of the time to first token's p99, percent.
    pub max_ttft_p99_rise: f64,
    /// Generative rows: largest allowed rise of the inter-token latency's p99, percent.
    pub max_itl_p99_rise: f64,
    /// Generative rows: largest allowed drop of output tokens per second, percent.
    pub max_token_throughput_drop: f64,
}

impl Default for GateThresholds {
    fn default() -> Self {
        Self {
            max_throughput_drop: 10.0,
            max_p99_rise: 15.0,
            max_avg_rise: 15.0,
            max_ttft_p99_rise: 15.0,
            max_itl_p99_rise: 15.0,
            max_token_throughput_drop: 10.0,
        }
    }
}

/// Only the `[gate]` table of a scenario matters here; the other tables belong to the scenario.
#[derive(Deserialize)]
struct ScenarioGateTable {
    #[serde(default)]
    gate: GateThresholds,
}

impl GateThresholds {
    /// Every limit must be a finite, non-negative percentage.
    pub fn validate(&self) -> Result<(), GateError> {
        let limits = [
            ("max_throughput_drop", self.max_throughput_drop),
            ("max_p99_rise", self.max_p99_rise),
            ("max_avg_rise", self.max_avg_rise),
            ("max_ttft_p99_rise", self.max_ttft_p99_rise),
            ("max_itl_p99_rise", self.max_itl_p99_rise),
            ("max_token_throughput_drop", self.max_token_throughput_drop),
        ];
        for (name, pct) in limits {
            if !pct.is_finite() || pct < 0.0 {
                return Err(GateError::BadThreshold { name, value: pct });
            }
        }
        Ok(())
    }

    /// The `[gate]` table of a scenario TOML text (defaults where the table or a field is absent).
    pub fn from_scenario_toml(text: &str) -> Result<Self, toml::de::Error> {
        Ok(toml::from_str::<ScenarioGateTable>(text)?.gate)
    }

    /// The `[gate]` table of a scenario file.
    pub fn from_scenario_file(path: &Path) -> Result<Self, GateError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| GateError::Read { path: path.to_path_buf(), source })?;
        Self::from_scenario_toml(&text)
            .map_err(|source| GateError::Scenario { path: path.to_path_buf(), message: source.message().to_string() })
    }
}

/// The flags that override a threshold (`perfbench gate` and `perfbench compare`).
#[derive(Args, Debug, Clone, Default)]
pub struct ThresholdFlags {
    /// Largest allowed throughput drop, percent [default: 10].
    #[arg(long, value_name = "PCT")]
    pub max_throughput_drop: Option<f64>,
    /// Largest allowed p99 latency rise, percent [default: 15].
    #[arg(long, value_name = "PCT")]
    pub max_p99_rise: Option<f64>,
    /// Largest allowed average latency rise, percent [default: 15].
    #[arg(long, value_name = "PCT")]
    pub max_avg_rise: Option<f64>,
    /// Generative rows: largest allowed TTFT p99 rise, percent [default: 15].
    #[arg(long, value_name = "PCT")]
    pub max_ttft_p99_rise: Option<f64>,
    /// Generative rows: largest allowed ITL p99 rise, percent [default: 15].
    #[arg(long, value_name = "PCT")]
    pub max_itl_p99_rise: Option<f64>,
    /// Generative rows: largest allowed output tokens/s drop, percent [default: 10].
    #[arg(long, value_name = "PCT")]
    pub max_token_throughput_drop: Option<f64>,
}

impl ThresholdFlags {
    /// `base` with the flags given on top, checked.
    pub fn over(&self, mut base: GateThresholds) -> Result<GateThresholds, GateError> {
        let flags = [
            (&mut base.max_throughput_drop, self.max_throughput_drop),
            (&mut base.max_p99_rise, self.max_p99_rise),
            (&mut base.max_avg_rise, self.max_avg_rise),
            (&mut base.max_ttft_p99_rise, self.max_ttft_p99_rise),
            (&mut base.max_itl_p99_rise, self.max_itl_p99_rise),
            (&mut base.max_token_throughput_drop, self.max_token_throughput_drop),
        ];
        for (field, flag) in flags {
            if let Some(pct) = flag {
                *field = pct;
            }
        }
        base.validate()?;
        Ok(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_table_overrides_only_the_fields_it_names() {
        let text = "[run]\nmodel = \"identity\"\n\n[gate]\nmax_p99_rise = 40\n";
        let t = GateThresholds::from_scenario_toml(text).unwrap();
        assert_eq!(t, GateThresholds { max_p99_rise: 40.0, ..GateThresholds::default() });
    }

    #[test]
    fn scenario_without_gate_table_gets_defaults() {
        let t = GateThresholds::from_scenario_toml("[run]\nmodel = \"identity\"\n").unwrap();
        assert_eq!(t, GateThresholds::default());
    }

    #[test]
    fn misspelled_field_is_an_error() {
        let err = GateThresholds::from_scenario_toml("[gate]\nmax_p99 = 5\n").unwrap_err();
        assert!(err.to_string().contains("max_p99"), "{err}");
    }

    #[test]
    fn negative_limit_is_rejected() {
        let t = GateThresholds { max_avg_rise: -1.0, ..GateThresholds::default() };
        assert!(matches!(t.validate(), Err(GateError::BadThreshold { name: "max_avg_rise", .. })));
    }
}
