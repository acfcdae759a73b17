//! What one shard of a run spread over machines keeps beside its usual CSVs, so that
//! `perfbench merge` can rebuild every window exactly: per load point, the windows' latency
//! histograms as an HDR interval log (V2 serialisation, one log per point), and one JSON sidecar
//! (`shard.json`) with each window's counts, failures, send lag, client stage sums, times and
//! server counters, the shard's place and the identity of the plan it ran.

use std::io;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::serialization::interval_log::{IntervalLogIterator, IntervalLogWriterBuilder, LogEntry};
use hdrhistogram::serialization::{Deserializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{ComposingStats, LoadPoint, ServerStats};

/// The sidecar's file name in a shard's results folder.
pub const SIDECAR: &str = "shard.json";
/// The folder (inside a shard's results folder) of the per-point interval logs.
pub const HISTOGRAM_DIR: &str = "histograms";

/// One window's numbers besides its histogram (the recorder's exact sums and counters).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowCounts {
    pub ok: u64,
    pub failed: u64,
    /// `failed`, by kind (absent in an older shard: all zero).
    #[serde(default)]
    pub failures: super::FailureCounts,
    /// Open loop: sent later than scheduled (send lag beyond the engine's slack).
    pub late: u64,
    /// Open loop: never sent (the in-flight cap was reached at their due time).
    pub missed: u64,
    pub sequences: u64,
    pub sequence_steps: u64,
    pub latency_ns_sum: u64,
    pub send_ns_sum: u64,
    pub recv_ns_sum: u64,
    pub exchange_ns_sum: u64,
    /// The shard's process CPU time over the window.
    #[serde(default)]
    pub cpu_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    pub duration_ns: u64,
    /// Wall-clock start and end, ns since the epoch.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Server counters over the window (shard 0 only: the server is counted once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerStats>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub composing: Vec<ComposingStats>,
}

/// One window of a point as a shard keeps it: its latency histogram (µs) and its counts.
#[derive(Clone, Debug)]
pub struct ShardWindow {
    pub latency_us: Histogram<u64>,
    pub counts: WindowCounts,
}

/// One measured point of a shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardPoint {
    pub batch: u64,
    /// The level asked of all shards together (the shard applied its part of it).
    pub load: LoadPoint,
    pub stable: bool,
    /// The point's interval log, relative to the shard's folder.
    pub log: String,
    /// Every window the shard measured at the point (under the stable rule more than its row
    /// merges, so the merge can take the last ones all shards measured together).
    pub windows: Vec<WindowCounts>,
    /// When the shard's measuring of the point began and ended (ns since the epoch; a settling
    /// window included). 0 in a sidecar written before these were kept.
    #[serde(default)]
    pub started_ns: u64,
    #[serde(default)]
    pub ended_ns: u64,
    /// `--start-at`: the instant every shard was to start the point (ns since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_ns: Option<u64>,
    /// `--start-at`: how long after its slot this shard started the point (ms). Beyond the
    /// tolerance (100 ms) the point is misaligned with the other shards', and the shard said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_ms: Option<u64>,
}

/// `shard.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    pub shard_index: u64,
    pub shard_count: u64,
    /// [`crate::plan::Plan::identity`]: shards of one run share it.
    pub plan_identity: String,
    /// The configuration table of report.md (key, value).
    pub config: Vec<[String; 2]>,
    pub points: Vec<ShardPoint>,
}

impl Sidecar {
    pub fn read(dir: &Path) -> io::Result<Sidecar> {
        let path = dir.join(SIDECAR);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{} is not a shard folder: {e}", dir.display())))?;
        serde_json::from_str(&text).map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
    }

    /// Rewrites the sidecar whole (through a temporary file, so a reader never sees half of it).
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let tmp = dir.join(format!("{SIDECAR}.tmp"));
        std::fs::write(&tmp, serde_json::to_string_pretty(self).map_err(io::Error::other)?)?;
        std::fs::rename(tmp, dir.join(SIDECAR))
    }
}

/// The interval log's name of a point, relative to the shard's folder.
pub fn log_name(batch: u64, load: LoadPoint) -> String {
    let level = match load {
        LoadPoint::Concurrency(c) => format!("c{c}"),
        LoadPoint::RequestRate(r) => format!("r{r}"),
    };
    format!("{HISTOGRAM_DIR}/b{batch}-{level}.hlog")
}

/// Writes a point's window histograms as one HDR interval log.
pub fn write_log(path: &Path, windows: &[ShardWindow]) -> io::Result<()> {
    let mut text = Vec::new();
    let mut serializer = V2Serializer::new();
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment("perfbench shard: one interval per measured window, latency in µs")
        .begin_log_with(&mut text, &mut serializer)?;
    for w in windows {
        let start = Duration::from_nanos(w.counts.start_ns);
        let length = Duration::from_nanos(w.counts.duration_ns);
        log.write_histogram(&w.latency_us, start, length, None)
            .map_err(|e| io::Error::other(format!("writing an interval histogram: {e:?}")))?;
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

/// Reads the window histograms of an interval log, in order.
pub fn read_log(path: &Path) -> io::Result<Vec<Histogram<u64>>> {
    let text = std::fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let bad = |why: String| io::Error::other(format!("{}: {why}", path.display()));
    let mut deserializer = Deserializer::new();
    let mut out = Vec::new();
    for entry in IntervalLogIterator::new(&text) {
        if let LogEntry::Interval(interval) = entry.map_err(|e| bad(format!("{e:?}")))? {
            let bytes =
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, interval.encoded_histogram())
                    .map_err(|e| bad(e.to_string()))?;
            let histogram: Histogram<u64> =
                deserializer.deserialize(&mut bytes.as_slice()).map_err(|e| bad(format!("{e:?}")))?;
            out.push(histogram);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_logs_round_trip_every_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut windows = Vec::new();
        for w in 0..3u64 {
            let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
            for v in 1..=(100 * (w + 1)) {
                h.record(v * 37 + w).unwrap();
            }
            let counts =
                WindowCounts { start_ns: 1_700_000_000_000_000_000 + w, duration_ns: 1_000_000, ..Default::default() };
            windows.push(ShardWindow { latency_us: h, counts });
        }
        let path = dir.path().join(log_name(1, LoadPoint::Concurrency(8)));
        write_log(&path, &windows).unwrap();
        let back = read_log(&path).unwrap();
        assert_eq!(back.len(), 3);
        for (a, b) in back.iter().zip(&windows) {
            assert_eq!(a, &b.latency_us);
        }
    }
}
