//! `perfbench merge SHARD_DIR... --out DIR`: the shards of one run (`--shard K/N`) merged into
//! one results folder, written by the same recorder a single-machine run writes through. Each
//! point's windows are rebuilt from the shards' interval logs and sidecars, merged
//! ([`crate::measure::shards`]: histograms added, never percentiles averaged) and derived into
//! a row by [`derive_point`], as any run's.
//!
//! Shards that do not belong together are refused with one line: a different plan, a shard
//! given twice or missing, windows that never overlapped. A point some shard lacks (its target
//! died after the points it finished) is named with the shard and left out; the points all
//! shards have are merged, over the time every shard measured them.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _};

use super::observe::{FolderStart, Recorder};
use super::prepare::ModelTraits;
use super::sweep::SweepObserver;
use crate::measure::shards::merge_shards;
use crate::measure::window::derive_point;
use crate::measure::Window;
use crate::measure::STABLE_WINDOWS;
use crate::plan::{Plan, Protocol, StopWhen, Sweep, Target, PLAN_FILE};
use crate::report::pa_summary::Wire;
use crate::report::RunConfig;
use crate::results::shard::{read_log, ShardWindow, Sidecar, SIDECAR};
use crate::results::LoadPoint;

/// Shards whose first windows of a point start further apart than this are reported.
const ALIGN_TOLERANCE_MS: u64 = 500;

/// One shard's folder, read.
struct ShardDir {
    dir: PathBuf,
    sidecar: Sidecar,
}

/// Merges the shard folders `dirs` into `out`. A run's top folder (a scenario's `offline/` and
/// `online/` under it) merges sub-folder by sub-folder.
pub fn merge(dirs: &[PathBuf], out: &Path) -> anyhow::Result<()> {
    let first = dirs.first().ok_or_else(|| anyhow!("give the shards' results folders"))?;
    if !first.join(SIDECAR).exists() && !super::generative::is_generative(first) {
        let subs = sweep_folders(first)?;
        if subs.is_empty() {
            bail!("{} is not a shard folder: it has no {SIDECAR}", first.display());
        }
        for sub in subs {
            let parts: Vec<PathBuf> = dirs.iter().map(|d| d.join(&sub)).collect();
            merge_sweep(&parts, &out.join(&sub))?;
        }
        return Ok(());
    }
    merge_sweep(dirs, out)
}

/// The sub-folders of `dir` that hold a shard's sidecar.
fn sweep_folders(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut subs = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        if entry.path().join(SIDECAR).exists() || super::generative::is_generative(&entry.path()) {
            subs.push(PathBuf::from(entry.file_name()));
        }
    }
    subs.sort();
    Ok(subs)
}

/// Reads the shards and checks they are the whole of one run, ordered by shard.
fn read_shards(dirs: &[PathBuf]) -> anyhow::Result<Vec<ShardDir>> {
    let mut shards = Vec::new();
    for dir in dirs {
        let sidecar = Sidecar::read(dir)?;
        shards.push(ShardDir { dir: dir.clone(), sidecar });
    }
    let first = &shards[0];
    for s in &shards[1..] {
        if s.sidecar.plan_identity != first.sidecar.plan_identity || s.sidecar.shard_count != first.sidecar.shard_count
        {
            bail!(
                "mixed plans: {} ran plan {} as one of {} shards, {} ran plan {} as one of {}",
                first.dir.display(),
                first.sidecar.plan_identity,
                first.sidecar.shard_count,
                s.dir.display(),
                s.sidecar.plan_identity,
                s.sidecar.shard_count
            );
        }
    }
    shards.sort_by_key(|s| s.sidecar.shard_index);
    for pair in shards.windows(2) {
        if pair[0].sidecar.shard_index == pair[1].sidecar.shard_index {
            bail!(
                "shard {} given twice ({} and {})",
                pair[0].sidecar.shard_index,
                pair[0].dir.display(),
                pair[1].dir.display()
            );
        }
    }
    let count = shards[0].sidecar.shard_count;
    let present: Vec<u64> = shards.iter().map(|s| s.sidecar.shard_index).collect();
    let missing: Vec<String> = (0..count).filter(|k| !present.contains(k)).map(|k| k.to_string()).collect();
    if !missing.is_empty() {
        bail!("missing shard(s) {} of {count}: give every shard's results folder", missing.join(", "));
    }
    Ok(shards)
}

/// The sweep of `plan` that wrote the shard folder `dir`.
fn sweep_of<'a>(plan: &'a Plan, dir: &Path) -> anyhow::Result<&'a Sweep> {
    if let [only] = plan.sweeps.as_slice() {
        return Ok(only);
    }
    let name = dir.file_name();
    plan.sweeps
        .iter()
        .find(|s| s.output.dir.as_deref().is_some_and(|d| d == dir || d.file_name() == name))
        .ok_or_else(|| anyhow!("{}: no sweep of its {PLAN_FILE} wrote this folder", dir.display()))
}

fn describe(batch: u64, load: LoadPoint) -> String {
    match load {
        LoadPoint::Concurrency(c) => format!("batch {batch} concurrency {c}"),
        LoadPoint::RequestRate(r) => format!("batch {batch} request rate {r}"),
    }
}

/// Merges one sweep's shard folders into `out`.
fn merge_sweep(dirs: &[PathBuf], out: &Path) -> anyhow::Result<()> {
    if super::generative::is_generative(&dirs[0]) {
        return super::generative::merge(dirs, out);
    }
    let shards = read_shards(dirs)?;
    let lead = &shards[0];
    let plan = Plan::load(&lead.dir.join(PLAN_FILE))?;
    let mut sweep = sweep_of(&plan, &lead.dir)?.clone();
    sweep.output.dir = Some(out.to_path_buf());
    sweep.output.latency_report_file = None;
    sweep.output.profile_export_file = None;
    let merged_plan = Plan { shard: None, resume: false, sweeps: vec![sweep.clone()], ..plan.clone() };
    let (wire, service_kind) = match (&plan.target, sweep.protocol) {
        (Target::InProcess { .. }, _) => (Wire::InProcess, "INPROCESS"),
        (_, Protocol::Http) => (Wire::Http, "TRITON"),
        (_, Protocol::Grpc) => (Wire::Grpc, "TRITON"),
    };
    // Points in the order the lead shard measured them, then any only others have.
    let mut points: Vec<(u64, LoadPoint)> = Vec::new();
    for s in &shards {
        for p in &s.sidecar.points {
            if !points.iter().any(|&(b, l)| b == p.batch && l == p.load) {
                points.push((p.batch, p.load));
            }
        }
    }
    let mut complete = Vec::new();
    for &(batch, load) in &points {
        let lacking: Vec<&ShardDir> =
            shards.iter().filter(|s| !s.sidecar.points.iter().any(|p| p.batch == batch && p.load == load)).collect();
        for s in &lacking {
            eprintln!(
                "merge: shard {} ({}) has no point {}: left out of the merged folder",
                s.sidecar.shard_index,
                s.dir.display(),
                describe(batch, load)
            );
        }
        if lacking.is_empty() {
            complete.push((batch, load));
        }
    }
    if complete.is_empty() {
        bail!("the shards have no point in common: nothing to merge");
    }
    let stable_rule =
        sweep.measurement.total_requests.is_none() && matches!(sweep.measurement.stop_when, StopWhen::Stable);
    let folder = FolderStart { plan: merged_plan.to_toml(), kept: Vec::new(), shard: None };
    let mut recorder = Recorder::create(&sweep, wire, service_kind, ModelTraits::default(), "", folder)?;
    for (batch, load) in complete {
        let mut per_shard = Vec::new();
        let mut starts = Vec::new();
        let mut stable = true;
        for s in &shards {
            let point = s.sidecar.points.iter().find(|p| p.batch == batch && p.load == load).expect("complete");
            let histograms = read_log(&s.dir.join(&point.log))?;
            if histograms.len() != point.windows.len() {
                bail!(
                    "{}: {} holds {} windows, {SIDECAR} names {}",
                    s.dir.display(),
                    point.log,
                    histograms.len(),
                    point.windows.len()
                );
            }
            stable &= point.stable;
            // When the shard started the point (older sidecars: its first kept window).
            starts.push(if point.started_ns > 0 {
                point.started_ns
            } else {
                point.windows.first().map_or(0, |w| w.start_ns)
            });
            let windows = histograms
                .into_iter()
                .zip(&point.windows)
                .map(|(latency_us, counts)| Window::from_shard(ShardWindow { latency_us, counts: counts.clone() }))
                .collect();
            per_shard.push(windows);
        }
        let apart_ms = (starts.iter().max().unwrap_or(&0) - starts.iter().min().unwrap_or(&0)) / 1_000_000;
        if apart_ms > ALIGN_TOLERANCE_MS {
            eprintln!(
                "merge: point {}: misaligned: the shards started it up to {apart_ms} ms apart (tolerance \
                 {ALIGN_TOLERANCE_MS} ms; line them up with --start-at or mpirun)",
                describe(batch, load)
            );
        }
        let merged = merge_shards(per_shard).map_err(|e| anyhow!("point {}: {e}", describe(batch, load)))?;
        if merged.left_out > 0 {
            eprintln!(
                "merge: point {}: {} window(s) outside the time every shard measured left out",
                describe(batch, load),
                merged.left_out
            );
        }
        let mut windows = merged.windows;
        if stable_rule {
            // As one process's row: the last windows, here the last all shards measured.
            windows = windows.split_off(windows.len().saturating_sub(STABLE_WINDOWS));
        }
        let mut result = derive_point(&windows, batch, load, stable, sweep.measurement.percentile);
        result.detail.window_boundaries_ns =
            windows.first().map(|w| w.start_ns).into_iter().chain(windows.iter().map(|w| w.end_ns)).collect();
        recorder.point_done(&result)?;
    }
    let config = RunConfig { parameters: lead.sidecar.config.clone() };
    recorder.finish(&config, None)?;
    eprintln!("merged {} shards into {}", shards.len(), out.display());
    Ok(())
}
