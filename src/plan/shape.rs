//! How each load level changes over time: AIPerf's `--request-rate-ramp-duration`,
//! `--concurrency-ramp-duration` and `--request-rate-series`, as one section of flags
//! (flattened into the load settings of `profile`/`offline`/`online` and into `perfbench llm`),
//! a scenario's keys, and a sweep's field, checked in `validate::check_shape`. The schedule they
//! make is `load::shape`'s, the same for the tensor and the generative engine.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

/// Flattened into the load settings, so no `deny_unknown_fields`: the other keys pass through.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Open loop: each level's rate ramps linearly up to it over this many seconds, from
    /// AIPerf's start (rate × 0.1 / SECONDS), then holds. Each request's intended instant comes
    /// from the ramp.
    #[arg(long = "request-rate-ramp-duration", value_name = "SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_rate_ramp_duration: Option<f64>,
    /// Closed loop: one session slot opens at once, the others evenly over this many seconds.
    #[arg(long = "concurrency-ramp-duration", value_name = "SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_ramp_duration: Option<f64>,
    /// Open loop at a rate that follows a JSON file of AIPerf's form,
    /// {"points": [{"time_s": 0, "qps": 5}, {"time_s": 60, "qps": 10}]}: linear between the
    /// points, the last rate held after them (perfbench llm).
    #[arg(long = "request-rate-series", value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_rate_series: Option<PathBuf>,
}

impl Shape {
    pub fn is_empty(&self) -> bool {
        *self == Shape::default()
    }
}
