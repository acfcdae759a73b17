//! The flags of a run spread over machines (`--shard K/N`, `--shards N`), read beside any
//! measuring command, and `perfbench merge`.

use std::path::PathBuf;

use clap::Args;

use crate::plan::{validate, Plan, PlanError, Shard};

/// Sharding flags; global, so they go before or after the subcommand.
#[derive(Args, Debug, Clone, Default)]
pub struct ShardArgs {
    /// Run as shard K of N (0-based): each load point is split so that the N shards together
    /// apply it. Without it, MPI's (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE) or a Kubernetes
    /// Indexed Job's (JOB_COMPLETION_INDEX) environment names the shard.
    #[arg(long = "shard", value_name = "K/N", global = true)]
    pub shard: Option<String>,
    /// The shard count beside JOB_COMPLETION_INDEX (default: $PERFBENCH_SHARDS).
    #[arg(long = "shards", value_name = "N", global = true)]
    pub shards: Option<u64>,
    /// Start every load point on a clock grid from this wall-clock time (ms since the epoch),
    /// the same on every shard; needs synchronised clocks. Point k starts at EPOCH_MS plus k
    /// slots; a shard that starts a point late says so.
    #[arg(long = "start-at", value_name = "EPOCH_MS", global = true)]
    pub start_at: Option<u64>,
    /// With --start-at: each point's slot in ms (default: the plan's bound on one point plus a
    /// margin; needed when nothing bounds a point: --request-count, or count windows with the
    /// stable rule).
    #[arg(long = "point-slot", value_name = "MS", global = true)]
    pub point_slot: Option<u64>,
}

impl ShardArgs {
    /// `plan` as this process's shard runs it (unchanged when it is not a shard).
    pub fn apply(&self, plan: Result<Plan, PlanError>) -> Result<Plan, PlanError> {
        let mut plan = plan?;
        // A plan that is already a shard (`run --resume` of a shard's folder, a printed plan)
        // stays one unless the flag or the engine names another.
        let resolved = Shard::resolve(self.shard.as_deref(), self.shards, |name| std::env::var(name).ok())?;
        plan.shard = resolved.or(plan.shard);
        match &mut plan.shard {
            Some(shard) => {
                shard.start_at_ms = self.start_at.or(shard.start_at_ms);
                shard.point_slot_ms = self.point_slot.or(shard.point_slot_ms);
                validate::check_shard_clock(true, shard.start_at_ms, shard.point_slot_ms)?;
            }
            None => validate::check_shard_clock(false, self.start_at, self.point_slot)?,
        }
        if let Some(shard) = plan.shard {
            validate::check_shard_plan(shard, shard.count, &plan)?;
        }
        Ok(plan)
    }

    /// Whether any sharding flag was given (only measuring commands take them).
    pub fn given(&self) -> bool {
        self.shard.is_some() || self.shards.is_some() || self.start_at.is_some() || self.point_slot.is_some()
    }
}

/// `perfbench merge SHARD_DIR... --out DIR`.
#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shards' results folders (one per shard, any order).
    #[arg(required = true, value_name = "SHARD_DIR")]
    pub dirs: Vec<PathBuf>,
    /// The merged results folder, written exactly as a single-machine run writes its own.
    #[arg(long = "out", value_name = "DIR")]
    pub out: PathBuf,
}
