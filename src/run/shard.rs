//! A shard's own files beside its usual CSVs: each point's window histograms as an HDR interval
//! log, and the sidecar (`shard.json`) rewritten after every point, so a shard whose target
//! dies keeps the points it finished.

use std::path::PathBuf;

use crate::plan::Shard;
use crate::report::RunConfig;
use crate::results::shard::{log_name, write_log, ShardPoint, Sidecar};
use crate::results::PointResult;

/// Who this shard is, as the run hands it to a sweep's recorder.
#[derive(Clone, Debug)]
pub struct ShardStart {
    pub shard: Shard,
    /// [`crate::plan::Plan::identity`] of the run.
    pub identity: String,
}

/// Most a shard may start after `--start-at` before it says its points are misaligned.
pub const START_TOLERANCE: std::time::Duration = std::time::Duration::from_millis(100);

/// Waits for `--start-at`; a shard that is already past it by more than [`START_TOLERANCE`]
/// says by how much (its windows then start later than the other shards').
pub async fn wait_for_start(shard: &Shard) {
    let Some(at_ms) = shard.start_at_ms else {
        return;
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let at = std::time::Duration::from_millis(at_ms);
    match at.checked_sub(now) {
        Some(wait) => tokio::time::sleep(wait).await,
        None if now - at > START_TOLERANCE => eprintln!(
            "shard {shard}: misaligned: started {} ms after --start-at {at_ms} (tolerance {} ms)",
            (now - at).as_millis(),
            START_TOLERANCE.as_millis()
        ),
        None => {}
    }
}

/// Writes one sweep's shard files into its results folder.
pub struct ShardLog {
    dir: PathBuf,
    sidecar: Sidecar,
}

impl ShardLog {
    pub fn new(dir: PathBuf, start: &ShardStart, config: &RunConfig) -> ShardLog {
        let sidecar = Sidecar {
            shard_index: start.shard.index,
            shard_count: start.shard.count,
            plan_identity: start.identity.clone(),
            config: config.parameters.clone(),
            points: Vec::new(),
        };
        ShardLog { dir, sidecar }
    }

    /// Keeps a measured point: its interval log, then the sidecar naming it.
    pub fn record(&mut self, result: &PointResult) -> std::io::Result<()> {
        let r = &result.row;
        let log = log_name(r.batch, r.load);
        write_log(&self.dir.join(&log), &result.detail.windows)?;
        self.sidecar.points.push(ShardPoint {
            batch: r.batch,
            load: r.load,
            stable: r.stable,
            log,
            windows: result.detail.windows.iter().map(|w| w.counts.clone()).collect(),
        });
        self.sidecar.write(&self.dir)
    }
}
