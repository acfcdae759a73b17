//! What the load generator itself achieved in a row, so a row can say when the client, not the
//! server, was the bottleneck ("client-limited"): the load it actually held against the load it
//! was asked for, how late it sent (open loop) and how much CPU it burned.

use serde::{Deserialize, Serialize};

/// The client's side of a row; all zero when unknown (a row read back from a CSV).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientLoad {
    /// Open loop: requests sent per second. Closed loop: requests in flight on average
    /// (completed requests/s × average latency, Little's law).
    pub achieved: f64,
    /// Open loop: actual send time − scheduled send time, p50 and p99 in µs (0 closed loop).
    pub send_lag_p50_us: f64,
    pub send_lag_p99_us: f64,
    /// The process's CPU time over the window, in percent of the cores it may use. With the
    /// embedded server this includes the server's threads.
    pub cpu_pct: f64,
    /// Cores the process may run on (its affinity mask).
    pub cores: usize,
    /// The load this process was asked to hold when it held only a part of the row's: a shard's
    /// share (requests in flight, or per second). 0: it held the row's whole load.
    #[serde(default)]
    pub held: f64,
    /// The row's failed requests by kind (reset, timeout, refused, other).
    #[serde(default)]
    pub failures: super::FailureCounts,
}

impl ClientLoad {
    /// Whether anything was measured.
    pub fn is_known(&self) -> bool {
        self.achieved > 0.0 || self.cores > 0
    }
}
