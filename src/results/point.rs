//! A measured point as every output reads it: the [`ReportRow`](super::ReportRow) plus what
//! perf_analyzer prints beside it (server counters, per-request times, GPU gauges).

use std::time::Duration;

use super::row::ReportRow;
use super::server_stats::{ComposingStats, ServerStats};
use crate::tensor::Tensor;

/// One request of the profile export: its send wall-clock time, which input data step it sent,
/// and each of its responses.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    pub send_ns: u64,
    pub step: usize,
    /// The sequence the request belongs to (a sequence model's numeric correlation id).
    pub sequence_id: Option<u64>,
    /// One per response: one for a plain request, every response of a decoupled model's
    /// streamed request (its empty final one included, as perf_analyzer lists them).
    pub responses: Vec<ResponseRecord>,
}

/// One response of a [`RequestRecord`]: its wall-clock arrival and the outputs it carried
/// (those that came inline, not through shared memory).
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseRecord {
    pub ns: u64,
    pub outputs: Vec<(String, Tensor)>,
}

/// Per-GPU figures of one point (`--collect-metrics`), keyed by GPU UUID.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuFigures {
    pub utilization: Vec<(String, f64)>,
    pub power_w: Vec<(String, f64)>,
    pub max_memory_bytes: Vec<(String, u64)>,
    pub total_memory_bytes: Vec<(String, u64)>,
}

/// What perf_analyzer prints about a point beyond the [`ReportRow`].
#[derive(Clone, Debug, Default)]
pub struct PointDetail {
    /// Total length of the merged windows.
    pub duration: Duration,
    pub stdev_us: f64,
    /// Average client exchange time (start of send to end of recv), µs.
    pub exchange_us: f64,
    /// Server counters over the merged windows.
    pub server: Option<ServerStats>,
    /// An ensemble's composing models over the same windows (empty for any other model).
    pub composing: Vec<ComposingStats>,
    pub first_error: Option<String>,
    /// Windows measured for this point, including those not merged.
    pub trials: usize,
    /// The latency `-l` and `--percentile` refer to, µs.
    pub threshold_latency_us: f64,
    /// Wall-clock window boundaries (ns since the epoch) of every window of the point.
    pub window_boundaries_ns: Vec<u64>,
    /// Per-request send/response times of the merged windows (`--profile-export-file` only).
    pub requests: Vec<RequestRecord>,
    /// GPU gauges scraped while the point ran (`--collect-metrics`).
    pub gpu: Option<GpuFigures>,
    /// The point's windows, raw, for a shard's interval log and sidecar (a sharded run only;
    /// shared, not copied, and dropped once written).
    pub windows: std::sync::Arc<[super::shard::ShardWindow]>,
    /// `--start-at`: the slot the point started on.
    pub slot: Option<PointSlot>,
}

/// When a point of a run lined up by `--start-at` was due, and how late it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointSlot {
    /// The instant every shard starts the point (ns since the epoch).
    pub start_ns: u64,
    /// How long after it this shard started the point's load.
    pub late: Duration,
}

/// One measured sweep point: the row every report reads, and the extra detail.
#[derive(Clone, Debug)]
pub struct PointResult {
    pub row: ReportRow,
    pub detail: PointDetail,
}
