//! Load from many machines: this process as shard K of N (`--shard K/N`, or the engine's
//! environment), and how a sweep's load divides among the shards so that together they apply
//! the load asked for. Pure: the caller hands in the environment it read.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{validate, PlanError, Sweep};

/// `PERFBENCH_SHARDS`: the shard count beside Kubernetes' `JOB_COMPLETION_INDEX` when
/// `--shards` is not given (an Indexed Job's `completions`).
pub const SHARDS_ENV: &str = "PERFBENCH_SHARDS";

/// Shard `index` of `count` (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
    /// `--start-at`: the shards start their points on slots from this wall-clock time (ms since
    /// the epoch; `run::grid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_ms: Option<u64>,
    /// `--point-slot`: each point's slot under `--start-at`, in ms (default: the plan's bound on
    /// one point, plus a margin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_slot_ms: Option<u64>,
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = |why: &str| format!("bad --shard '{text}': {why}");
        let (k, n) = text.split_once('/').ok_or_else(|| bad("expected K/N, e.g. 0/2"))?;
        let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad("K and N must be whole numbers"));
        let shard = Shard::new(num(k)?, num(n)?);
        shard.check().map_err(|why| bad(&why))?;
        Ok(shard)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// Shard `index` of `count`, not lined up by the clock.
    pub fn new(index: u64, count: u64) -> Shard {
        Shard { index, count, start_at_ms: None, point_slot_ms: None }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        if self.count == 0 {
            return Err("N must be at least 1".into());
        }
        if self.index >= self.count {
            return Err(format!("shard K must be below N (0..{})", self.count - 1));
        }
        Ok(())
    }

    /// The shard from `--shard`, else from the engine's environment (`env` looks a variable
    /// up): MPI (`OMPI_COMM_WORLD_RANK`/`SIZE`, `PMI_RANK`/`SIZE`), or a Kubernetes Indexed
    /// Job (`JOB_COMPLETION_INDEX` with `--shards N` or [`SHARDS_ENV`]). `None`: one process.
    pub fn resolve(
        flag: Option<&str>,
        shards: Option<u64>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Shard>, PlanError> {
        if let Some(text) = flag {
            return text.parse().map(Some).map_err(validate::unparsed);
        }
        let num = |name: &str| -> Result<Option<u64>, PlanError> {
            env(name).map(|v| validate::env_whole_number(name, &v)).transpose()
        };
        let pairs = [("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")];
        for (rank, size) in pairs {
            if let (Some(index), Some(count)) = (num(rank)?, num(size)?) {
                let shard = Shard::new(index, count);
                validate::check_env_shard(shard.check(), &format!("{rank}/{size}"))?;
                return Ok((count > 1).then_some(shard));
            }
        }
        if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let count = match shards {
                Some(n) => n,
                None => validate::job_shard_count(num(SHARDS_ENV)?, SHARDS_ENV)?,
            };
            let shard = Shard::new(index, count);
            validate::check_env_shard(shard.check(), &format!("JOB_COMPLETION_INDEX {index} of {count}"))?;
            return Ok(Some(shard));
        }
        Ok(None)
    }

    /// This shard's part of `total` things (requests in flight, a request count): total/N each,
    /// the remainder to the lowest shards, so the parts add up to `total`.
    pub fn part(&self, total: u64) -> u64 {
        total / self.count + u64::from(self.index < total % self.count)
    }

    /// Where this shard's part of `0..total` starts (the parts are consecutive and disjoint).
    pub fn part_start(&self, total: u64) -> u64 {
        let (each, rest) = (total / self.count, total % self.count);
        self.index * each + self.index.min(rest)
    }

    /// The sweep as this shard runs it: request counts (`--request-count`, the warm-up) and the
    /// sequence-id range split into disjoint parts; only shard 0 scrapes metrics. Load levels
    /// are split per point by the run (the rows keep the level asked for), and only shard 0
    /// reads server statistics.
    pub fn sweep_part(&self, sweep: &Sweep) -> Sweep {
        let mut part = sweep.clone();
        let m = &mut part.measurement;
        m.total_requests = m.total_requests.map(|n| self.part(n).max(1));
        m.warmup_requests = self.part(m.warmup_requests);
        let s = &mut part.sequences;
        let ids = s.id_range();
        let start = s.id_start + self.part_start(ids);
        s.id_end = Some(start + self.part(ids).max(1));
        s.id_start = start;
        s.count = self.part(s.count).max(1);
        if self.index != 0 {
            // Only shard 0 scrapes the server's metrics, as only it reads its statistics.
            part.call.metrics = None;
        }
        part
    }
}

/// A stable identity of what was asked (FNV-1a of text): shards of one run carry the same one.
pub fn identity(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn parts_add_up_with_the_remainder_on_the_lowest_shards() {
        let parts: Vec<u64> = (0..3).map(|k| Shard::new(k, 3).part(8)).collect();
        assert_eq!(parts, [3, 3, 2]);
        let starts: Vec<u64> = (0..3).map(|k| Shard::new(k, 3).part_start(8)).collect();
        assert_eq!(starts, [0, 3, 6]);
    }

    #[test]
    fn the_flag_wins_and_bad_shards_are_refused() {
        assert_eq!(Shard::resolve(Some("1/2"), None, env(&[])).unwrap(), Some(Shard::new(1, 2)));
        let e = Shard::resolve(Some("3/2"), None, env(&[])).unwrap_err().to_string();
        assert!(e.contains("bad --shard '3/2'") && !e.contains('\n'), "{e}");
        assert!("0/0".parse::<Shard>().is_err() && "1".parse::<Shard>().is_err());
    }

    #[test]
    fn a_sweep_part_splits_counts_and_sequence_ids_into_disjoint_parts() {
        use crate::plan::settings::{resolve, Settings};
        use crate::plan::{SweepKind, Target};
        let mut settings = Settings::default();
        (settings.measurement.request_count, settings.measurement.warmup_request_count) = (Some(9), Some(5));
        settings.input.sequence_id_range = Some("10:20".into());
        settings.input.num_of_sequences = Some(5);
        settings.output.out = Some("out".into());
        let sweep = resolve(SweepKind::Online, &settings, &Target::Remote { url: "localhost:1".into() }).unwrap();
        let parts: Vec<Sweep> = (0..2).map(|index| Shard::new(index, 2).sweep_part(&sweep)).collect();
        let of = |f: &dyn Fn(&Sweep) -> u64| parts.iter().map(f).collect::<Vec<_>>();
        assert_eq!(of(&|p| p.measurement.total_requests.unwrap()), [5, 4]);
        assert_eq!(of(&|p| p.measurement.warmup_requests), [3, 2]);
        assert_eq!(of(&|p| p.sequences.count), [3, 2]);
        let ids: Vec<(u64, Option<u64>)> = parts.iter().map(|p| (p.sequences.id_start, p.sequences.id_end)).collect();
        assert_eq!(ids, [(10, Some(15)), (15, Some(20))]);
    }

    #[test]
    fn engines_name_the_shard_through_the_environment() {
        let mpi = env(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "4")]);
        assert_eq!(Shard::resolve(None, None, mpi).unwrap(), Some(Shard::new(1, 4)));
        let pmi = env(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]);
        assert_eq!(Shard::resolve(None, None, pmi).unwrap(), Some(Shard::new(0, 2)));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "2"), (SHARDS_ENV, "3")]);
        assert_eq!(Shard::resolve(None, None, k8s).unwrap(), Some(Shard::new(2, 3)));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "2")]);
        assert_eq!(Shard::resolve(None, Some(4), &k8s).unwrap(), Some(Shard::new(2, 4)));
        assert!(Shard::resolve(None, None, &k8s).is_err(), "an index without a count");
        assert_eq!(Shard::resolve(None, None, env(&[])).unwrap(), None);
    }
}
