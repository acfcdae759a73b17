//! A shard's own files beside its usual CSVs: each point's window histograms as an HDR interval
//! log, and the sidecar (`shard.json`) rewritten after every point, so a shard whose target
//! dies keeps the points it finished, and `run --resume` of its folder keeps them too.

use std::path::PathBuf;

use anyhow::bail;

use super::grid::SweepSlots;
use crate::plan::Shard;
use crate::report::RunConfig;
use crate::results::shard::{log_name, write_log, ShardPoint, Sidecar, SIDECAR};
use crate::results::{PointResult, ReportRow};

/// Who this shard is, as the run hands it to a sweep's recorder.
#[derive(Clone, Debug)]
pub struct ShardStart {
    pub shard: Shard,
    /// [`crate::plan::Plan::identity`] of the run.
    pub identity: String,
    /// `--start-at`: the sweep's slots on the run's clock grid.
    pub slots: Option<SweepSlots>,
}

/// Writes one sweep's shard files into its results folder.
pub struct ShardLog {
    dir: PathBuf,
    sidecar: Sidecar,
}

impl ShardLog {
    /// The sweep's shard files; `kept`: the rows a resumed run keeps from the folder's
    /// report.csv, whose points the folder's sidecar keeps too.
    pub fn open(dir: PathBuf, start: &ShardStart, config: &RunConfig, kept: &[ReportRow]) -> anyhow::Result<ShardLog> {
        let mut sidecar = Sidecar {
            shard_index: start.shard.index,
            shard_count: start.shard.count,
            plan_identity: start.identity.clone(),
            config: config.parameters.clone(),
            points: Vec::new(),
        };
        if !kept.is_empty() && dir.join(SIDECAR).exists() {
            let before = Sidecar::read(&dir)?;
            if (before.shard_index, before.shard_count, &before.plan_identity)
                != (sidecar.shard_index, sidecar.shard_count, &sidecar.plan_identity)
            {
                bail!(
                    "cannot resume {} as shard {}: its {SIDECAR} is shard {}/{} of plan {} (this run: plan {})",
                    dir.display(),
                    start.shard,
                    before.shard_index,
                    before.shard_count,
                    before.plan_identity,
                    sidecar.plan_identity
                );
            }
            sidecar.points =
                before.points.into_iter().filter(|p| kept.iter().any(|row| row.is_at(p.batch, p.load))).collect();
        }
        Ok(ShardLog { dir, sidecar })
    }

    /// The shard, as `K/N`.
    pub fn shard(&self) -> String {
        format!("{}/{}", self.sidecar.shard_index, self.sidecar.shard_count)
    }

    /// Keeps a measured point: its interval log, then the sidecar naming it.
    pub fn record(&mut self, result: &PointResult) -> std::io::Result<()> {
        let r = &result.row;
        let d = &result.detail;
        let log = log_name(r.batch, r.load);
        write_log(&self.dir.join(&log), &d.windows)?;
        self.sidecar.points.retain(|p| !r.is_at(p.batch, p.load));
        self.sidecar.points.push(ShardPoint {
            batch: r.batch,
            load: r.load,
            stable: r.stable,
            log,
            windows: d.windows.iter().map(|w| w.counts.clone()).collect(),
            started_ns: d.window_boundaries_ns.first().copied().unwrap_or_default(),
            ended_ns: d.window_boundaries_ns.last().copied().unwrap_or_default(),
            slot_ns: d.slot.map(|s| s.start_ns),
            late_ms: d.slot.map(|s| u64::try_from(s.late.as_millis()).unwrap_or(u64::MAX)),
        });
        self.sidecar.write(&self.dir)
    }
}
