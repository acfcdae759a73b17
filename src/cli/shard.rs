//! The flags of a run spread over machines (`--shard K/N`, `--shards N`), read beside any
//! measuring command, and `perfbench merge`.

use std::path::PathBuf;

use clap::Args;

use crate::plan::{Plan, PlanError, Shard, Target};

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
    /// Start the load at this wall-clock time (ms since the epoch), the same on every shard;
    /// needs synchronised clocks. A shard that starts later than that says so.
    #[arg(long = "start-at", value_name = "EPOCH_MS", global = true)]
    pub start_at: Option<u64>,
}

impl ShardArgs {
    /// `plan` as this process's shard runs it (unchanged when it is not a shard).
    pub fn apply(&self, plan: Result<Plan, PlanError>) -> Result<Plan, PlanError> {
        let mut plan = plan?;
        plan.shard = Shard::resolve(self.shard.as_deref(), self.shards, |name| std::env::var(name).ok())?;
        match (&mut plan.shard, self.start_at) {
            (Some(shard), at) => shard.start_at_ms = at,
            (None, Some(_)) => return Err(PlanError::Invalid("--start-at lines up shards: give --shard K/N".into())),
            (None, None) => {}
        }
        if let (Some(shard), false) = (plan.shard, matches!(plan.target, Target::Remote { .. })) {
            return Err(PlanError::Invalid(format!(
                "--shard {shard}: give the server's address (-u): each shard would start a bundled server of its own"
            )));
        }
        if let Some(shard) = plan.shard {
            for sweep in &plan.sweeps {
                shard.check_sweep(sweep)?;
            }
        }
        Ok(plan)
    }

    /// Whether any sharding flag was given (only measuring commands take them).
    pub fn given(&self) -> bool {
        self.shard.is_some() || self.shards.is_some() || self.start_at.is_some()
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
