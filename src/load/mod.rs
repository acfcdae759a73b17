//! When to send: the load shapes (closed loop at a fixed concurrency, open loop on a schedule),
//! the pure [`Pacer`] behind open-loop schedules, and the engine that drives any
//! [`InferClient`](crate::client::InferClient) and feeds the measurement recorders.

pub mod engine;
#[cfg(test)]
pub mod fake;
pub mod mix;
pub mod pacer;
pub mod periodic;
pub mod saturation;
pub mod sequence;
pub mod shape;

use std::time::Duration;

pub use engine::{LoadSpec, ResponseCheck, RunningLoad, LATE_SLACK};
pub use mix::{Mix, Strategy as ModelSelection};
pub use pacer::{read_intervals, Distribution, Pacer, Schedule};
pub use periodic::PeriodicSpec;
pub use saturation::OverSaturation;
pub use sequence::SequenceSpec;
pub use shape::{read_rate_series, RateCurve, Shape};

use crate::results::LoadPoint;

/// How the load is shaped at one sweep point.
#[derive(Clone, Debug, PartialEq)]
pub enum LoadMode {
    /// Closed loop: exactly this many requests in flight, each sent when the previous returns.
    Concurrency(u64),
    /// Open loop: requests issued on a schedule, whether or not earlier ones have returned.
    Schedule(Schedule),
}

impl LoadMode {
    /// A request rate with the given gap distribution.
    pub fn request_rate(per_second: f64, distribution: Distribution) -> LoadMode {
        LoadMode::Schedule(Schedule::Rate { per_second, distribution })
    }

    /// Shard `index` of `count`'s part of this load: C/N requests in flight (the remainder to
    /// the lowest shards), or its share of the schedule ([`Schedule::shard_part`]).
    pub fn shard_part(&self, index: u64, count: u64) -> LoadMode {
        match self {
            LoadMode::Concurrency(c) => LoadMode::Concurrency(c / count + u64::from(index < c % count)),
            LoadMode::Schedule(s) => LoadMode::Schedule(s.shard_part(index, count)),
        }
    }

    /// The report's name for this point (a trace reports its mean rate).
    pub fn point(&self) -> LoadPoint {
        match self {
            LoadMode::Concurrency(n) => LoadPoint::Concurrency(*n),
            LoadMode::Schedule(s) => LoadPoint::RequestRate(s.mean_rate_per_s()),
        }
    }
}

/// Why a load could not start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    #[error("request rate must be a positive number, got {0}")]
    BadRate(f64),
    #[error("no request to send")]
    NoRequests,
    #[error("concurrency must be at least 1")]
    ZeroConcurrency,
    #[error("the request intervals trace is empty")]
    EmptyTrace,
    #[error("request intervals: {0}")]
    Intervals(String),
    #[error("load shape: {0}")]
    BadShape(String),
}

/// Time allowed for in-flight requests to return when a load stops, before they are abandoned.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
