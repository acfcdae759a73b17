//! What a sweep writes while it runs: every row reaches disk as soon as it is measured
//! (perf_analyzer's CSV appended and flushed, `report.csv` rewritten atomically), the console
//! shows perf_analyzer's blocks (`profile`) or a progress line, and `--collect-metrics` scrapes
//! GPU gauges beside each point. [`Recorder::finish`] writes what needs all rows: report.md,
//! the plots and the profile export.
//!
//! A results-folder sweep starts by printing what it will measure and how long it may take, and
//! its progress line counts points ("[k/N]") with an ETA from the points measured so far.

use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::grid::START_TOLERANCE;
use super::point::{WindowProgress, WARMUP_MAX};
use super::prepare::{asynchronous, planned_points, point_bound, window_mode, ModelTraits};
use super::sweep::SweepObserver;
use crate::load::LoadMode;
use crate::measure::gpu_metrics::GpuCollector;
use crate::measure::STABLE_WINDOWS;
use crate::plan::{Distribution, Levels, Load, StopWhen, Sweep, SweepKind, PLAN_FILE};
use crate::report::pa_summary::{self, RunDescription, Wire};
use crate::report::{pa_export, RunConfig, TableKind};
use crate::results::composing_csv;
use crate::results::csv::write_report_csv;
use crate::results::format::format_g;
use crate::results::pa_csv::{CsvColumns, PaCsvWriter};
use crate::results::{LoadPoint, PointDetail, PointResult, ReportRow};
use crate::tensor::Tensor;

/// `--profile-export-file`: where, the service kind it names, and each data step's inputs.
pub struct Export<'a> {
    pub path: &'a Path,
    pub service_kind: &'a str,
    pub step_inputs: &'a [Vec<(String, Tensor)>],
}

/// What a sweep's results folder starts from.
pub struct FolderStart {
    /// The run's plan as TOML, kept in the folder ([`PLAN_FILE`]) for `run --resume DIR`.
    pub plan: String,
    /// The rows an interrupted run left in the folder's report.csv (`run --resume`): they stay in
    /// the CSVs as written and their points are not measured again.
    pub kept: Vec<ReportRow>,
    /// A sharded run (`--shard K/N`): who this shard is; its recorder then keeps shard files.
    pub shard: Option<super::shard::ShardStart>,
}

/// Sees one sweep's points.
pub struct Recorder {
    kind: SweepKind,
    wire: Wire,
    /// `profile`: perf_analyzer's console blocks.
    description: Option<RunDescription>,
    pa_csv: Option<PaCsvWriter>,
    /// An ensemble's `composing.csv` (beside the `-f` file, or in the results folder).
    composing_csv: Option<std::path::PathBuf>,
    progress: ProgressBar,
    label: String,
    /// Points of the sweep (batch sizes × load levels), when known: "[k/N]".
    planned: Option<usize>,
    /// The longest a point may take, when the rule bounds it (the ETA before the first point).
    point_bound: Option<Duration>,
    started: Instant,
    /// The first `kept` results were on disk before this run (`run --resume`).
    kept: usize,
    pub results: Vec<PointResult>,
    gpu: Option<(reqwest::Client, String, Duration)>,
    collector: Option<GpuCollector>,
    out: Option<std::path::PathBuf>,
    /// `-v`: print each pass.
    verbose: u8,
    /// perf_analyzer's closing list is left out (`Output::no_closing_report`).
    no_closing_report: bool,
    /// A shard's interval logs and sidecar.
    shard_log: Option<super::shard::ShardLog>,
}

impl Recorder {
    /// Opens the sweep's outputs. `metrics_url`: where `--collect-metrics` scrapes when the plan
    /// names no URL.
    pub fn create(
        sweep: &Sweep,
        wire: Wire,
        service_kind: &'static str,
        model: ModelTraits,
        metrics_url: &str,
        folder: FolderStart,
    ) -> std::io::Result<Recorder> {
        let FolderStart { plan, kept, .. } = folder;
        let first_batch = sweep.batch_sizes.first();
        let first = match &sweep.load {
            Load::Concurrency { levels } => LoadPoint::Concurrency(levels.first()),
            Load::RequestRate { start, .. } => LoadPoint::RequestRate(*start),
            Load::Trace { .. } => LoadPoint::RequestRate(0.0),
            Load::Periodic(_) => LoadPoint::Concurrency(1),
        };
        let columns = CsvColumns { verbose: sweep.output.verbose_csv, gpu_metrics: sweep.call.metrics.is_some() };
        if let Some(dir) = &sweep.output.dir {
            std::fs::create_dir_all(dir)
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
            let file = dir.join(PLAN_FILE);
            std::fs::write(&file, plan)
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", file.display())))?;
        }
        let report_file = sweep.output.latency_report_file.as_ref().filter(|_| !sweep.output.no_closing_report);
        let csv_path = match (report_file, &sweep.output.dir) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(dir)) => Some(dir.join("perf_analyzer.csv")),
            (None, None) => None,
        };
        let composing_csv = csv_path.as_deref().map(|path| match report_file {
            Some(_) => composing_csv::beside(path),
            None => path.with_file_name(composing_csv::COMPOSING_FILE),
        });
        if let (Some(path), true) = (&composing_csv, kept.is_empty()) {
            // A fresh run appends to no earlier run's rows.
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let pa_csv = match csv_path {
            Some(path) => Some(
                match kept.len() {
                    0 => PaCsvWriter::create(&path, first, columns),
                    rows => PaCsvWriter::resume(&path, rows, columns),
                }
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))?,
            ),
            None => None,
        };
        let description = (sweep.kind == SweepKind::Profile).then(|| describe(sweep, first_batch, service_kind, model));
        if let Some(d) = &description {
            println!("{}", pa_summary::settings_block(d));
        }
        let progress = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        progress.set_style(ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").expect("static template"));
        progress.enable_steady_tick(Duration::from_millis(200));
        let gpu = match &sweep.call.metrics {
            None => None,
            Some(m) => {
                let url = crate::client::base_url(m.url.as_deref().unwrap_or(metrics_url));
                let http = reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                Some((http, url, Duration::from_millis(m.interval_ms)))
            }
        };
        let planned = planned_points(sweep);
        let point_bound = point_bound(sweep);
        if sweep.kind != SweepKind::Profile {
            eprintln!("{}", sweep_outline(sweep, planned, point_bound));
        }
        if !kept.is_empty() {
            eprintln!("resuming: {} measured row(s) kept from the results folder", kept.len());
        }
        let percentile = sweep.measurement.percentile;
        let results: Vec<PointResult> = kept
            .into_iter()
            .map(|row| {
                let threshold_latency_us = row.judged_latency_us(percentile);
                PointResult { row, detail: PointDetail { threshold_latency_us, ..PointDetail::default() } }
            })
            .collect();
        Ok(Recorder {
            kind: sweep.kind,
            wire,
            description,
            pa_csv,
            composing_csv,
            progress,
            label: String::new(),
            planned,
            point_bound,
            started: Instant::now(),
            kept: results.len(),
            results,
            gpu,
            collector: None,
            out: sweep.output.dir.clone(),
            verbose: sweep.output.verbose,
            no_closing_report: sweep.output.no_closing_report,
            shard_log: None,
        })
    }

    /// Keeps each point's windows as a shard's files too (a sharded run).
    pub fn log_shard(&mut self, log: super::shard::ShardLog) {
        self.shard_log = Some(log);
    }

    pub fn rows(&self) -> Vec<ReportRow> {
        self.results.iter().map(|r| r.row.clone()).collect()
    }

    /// Writes what needs every row: report.md and plots (folder sweeps), the profile export and
    /// perf_analyzer's closing list (profile). Called on success, failure and interruption alike.
    pub fn finish(&mut self, config: &RunConfig, export: Option<Export<'_>>) -> anyhow::Result<()> {
        self.progress.finish_and_clear();
        if let Some(e) = export {
            pa_export::write(e.path, &self.results, e.service_kind, e.step_inputs)?;
        }
        if self.kind == SweepKind::Profile && !self.results.is_empty() && !self.no_closing_report {
            println!("{}", pa_summary::closing_list(&self.results));
        }
        if let (Some(dir), false) = (&self.out, self.results.is_empty()) {
            let rows = self.rows();
            let table = match self.kind {
                SweepKind::Offline => TableKind::Offline,
                SweepKind::Online => TableKind::Online,
                SweepKind::Profile => TableKind::infer(&rows),
            };
            crate::report::write_results(dir, &rows, config, table)?;
        }
        Ok(())
    }
}

impl Recorder {
    /// "ETA 1m 20s" from the points measured so far (or the bound per point before the first).
    fn eta(&self) -> String {
        let Some(planned) = self.planned else {
            return String::new();
        };
        let left = planned.saturating_sub(self.results.len());
        let measured = self.results.len() - self.kept;
        let per_point = if measured > 0 { Some(self.started.elapsed() / measured as u32) } else { self.point_bound };
        match per_point {
            Some(p) if left > 0 => format!(" · ETA {}", human(p * left as u32)),
            _ => String::new(),
        }
    }
}

impl SweepObserver for Recorder {
    fn warm_up_started(&mut self, mode: &LoadMode) {
        self.progress.set_message(format!("warming up at {}{}", point_label(mode), self.eta()));
    }

    fn point_late(&mut self, mode: &LoadMode, late: Duration) {
        let shard = self.shard_log.as_ref().map(|log| format!("shard {}: ", log.shard())).unwrap_or_default();
        let line = format!(
            "{shard}{}: misaligned: started {} ms after its --start-at slot (tolerance {} ms)",
            point_label(mode),
            late.as_millis(),
            START_TOLERANCE.as_millis()
        );
        self.progress.suspend(|| eprintln!("{line}"));
    }

    fn point_started(&mut self, mode: &LoadMode) {
        self.label = point_label(mode);
        if let Some(n) = self.planned {
            self.label = format!("[{}/{n}] {}", self.results.len() + 1, self.label);
        }
        self.progress.set_message(format!("{}: measuring{}", self.label, self.eta()));
        if self.verbose > 0 && self.description.is_some() {
            let load = match mode.point() {
                LoadPoint::Concurrency(c) => format!("Request concurrency: {c}"),
                LoadPoint::RequestRate(r) => format!("Request Rate: {} inference requests per seconds", format_g(r)),
            };
            self.progress.suspend(|| println!("{load}"));
        }
        if let Some((http, url, interval)) = &self.gpu {
            self.collector = Some(GpuCollector::start(http.clone(), url.clone(), *interval));
        }
    }

    fn window_done(&mut self, w: &WindowProgress) {
        if self.verbose > 0 {
            // perf_analyzer's -v line, which scripts parse.
            let line = format!(
                "  Pass [{}] throughput: {} infer/sec. Avg latency: {} usec (std {} usec). ",
                w.trial + 1,
                format_g(w.figures.throughput),
                w.avg_latency_us as u64,
                w.stdev_us as u64
            );
            self.progress.suspend(|| println!("{line}"));
        }
        let state = match (w.settling, w.widest_pct, w.stable) {
            (true, _, _) => "settling".to_string(),
            (_, _, true) => "done".to_string(),
            (_, Some(pct), false) if pct.is_finite() => format!("intervals ±{pct:.1}%"),
            (_, Some(_), false) => "intervals open".to_string(),
            (_, None, false) => "not yet stable".to_string(),
        };
        self.progress.set_message(format!(
            "{}: window {} · {:.1} infer/s · {:.0} µs · {} · {state}{}",
            self.label,
            w.trial + 1,
            w.figures.throughput,
            w.figures.latency_us,
            crate::results::client_limit::achieved_text(w.load, w.achieved),
            self.eta()
        ));
    }

    fn point_done(&mut self, result: &PointResult) -> std::io::Result<()> {
        if let Some(log) = &mut self.shard_log {
            log.record(result)?;
        }
        let mut result = result.clone();
        result.detail.windows = Default::default();
        result.detail.gpu = self.collector.take().map(GpuCollector::finish);
        if let Some(csv) = &mut self.pa_csv {
            csv.append(&result)?;
        }
        if let Some(path) = &self.composing_csv {
            composing_csv::append(path, &composing_csv::composing_rows(&result))
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        if let Some(d) = &self.description {
            let block = pa_summary::point_block(&result, self.wire, d);
            // With -v the block's first line (the load) was printed before the passes.
            let block = match (self.verbose, block.split_once('\n')) {
                (1.., Some((_, rest))) => rest.to_string(),
                _ => block,
            };
            self.progress.suspend(|| println!("{block}"));
        } else {
            let r = &result.row;
            let pm = |pct: f64| if pct.is_finite() { format!(" ±{pct:>4.1}%") } else { "       ".into() };
            let mut flags = Vec::new();
            if r.low_sample(99.0) {
                flags.push(format!("p99 from {} requests", r.requests));
            }
            if r.overloaded {
                flags.push("overloaded".into());
            }
            if r.interrupted {
                flags.push("INTERRUPTED: the server went away during this point".into());
            }
            if !r.stable {
                flags.push("unstable".into());
            }
            let limits = r.client_limits();
            if !limits.is_empty() {
                flags.push(format!("CLIENT-LIMITED: {}", limits.join("; ")));
            }
            let line = format!(
                "batch {:>5} · {:<22} {:>10.1} infer/s{} · p99 {:>9.0} µs{} · {}{}",
                r.batch,
                self.label,
                r.throughput,
                pm(r.throughput_ci.plus_minus_pct(r.throughput)),
                r.p99_us,
                pm(r.p99_ci.plus_minus_pct(r.p99_us)),
                r.achieved_text(),
                if flags.is_empty() { String::new() } else { format!(" ({})", flags.join(", ")) }
            );
            self.progress.suspend(|| eprintln!("{line}"));
        }
        self.results.push(result);
        if let Some(dir) = &self.out {
            write_report_csv(&dir.join("report.csv"), &self.rows())
                .map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        Ok(())
    }

    fn measured_before(&self, batch: u64, point: LoadPoint) -> Option<PointResult> {
        self.results[..self.kept].iter().find(|r| r.row.is_at(batch, point)).cloned()
    }
}

/// perf_analyzer's settings block of a profile sweep, with its rules for what it prints.
fn describe(sweep: &Sweep, batch: u64, service_kind: &'static str, model: ModelTraits) -> RunDescription {
    let latency_limit = || format!("Latency limit: {} msec", format_g(sweep.latency_limit_ms.unwrap_or(0.0)));
    // perf_analyzer prints the limits only when the range was given an end (a single value
    // leaves its default end of 1): `start:end` here.
    let (limit_lines, distribution_line) = match &sweep.load {
        Load::Concurrency { levels: Levels::Range { start, end, .. } } => match end {
            Some(end) if end == start => (Vec::new(), None),
            Some(end) => (vec![latency_limit(), format!("Concurrency limit: {end} concurrent requests")], None),
            None => (vec![latency_limit()], None),
        },
        Load::Concurrency { levels: Levels::List(values) } => match values.iter().max() {
            Some(max) if values.len() > 1 => {
                (vec![latency_limit(), format!("Concurrency limit: {max} concurrent requests")], None)
            }
            _ => (Vec::new(), None),
        },
        Load::RequestRate { start, end, distribution, .. } => (
            if end == start {
                Vec::new()
            } else {
                vec![latency_limit(), format!("Request Rate limit: {} requests per seconds", format_g(*end))]
            },
            Some(match distribution {
                Distribution::Constant => "Using uniform distribution on request generation".to_string(),
                Distribution::Poisson => "Using poisson distribution on request generation".to_string(),
            }),
        ),
        Load::Trace { .. } | Load::Periodic(_) => (Vec::new(), None),
    };
    let m = &sweep.measurement;
    RunDescription {
        batch,
        service_kind,
        warmup_requests: m.warmup_requests,
        window: window_mode(sweep),
        request_count: m.total_requests,
        percentile: m.percentile,
        limit_lines,
        distribution_line,
        binary_search: sweep.binary_search,
        asynchronous: asynchronous(sweep, model),
        decoupled: model.decoupled,
        stability_pct: m.stability_percentage,
        max_trials: m.max_trials,
    }
}

fn point_label(mode: &LoadMode) -> String {
    match mode.point() {
        LoadPoint::Concurrency(c) => format!("concurrency {c}"),
        LoadPoint::RequestRate(r) => format!("{} req/s", format_g(r)),
    }
}

/// The line a results-folder sweep starts with: its points, their rule and the time it may take.
fn sweep_outline(sweep: &Sweep, planned: Option<usize>, bound: Option<Duration>) -> String {
    let batches = sweep.batch_sizes.values(0).len();
    let points = match planned {
        Some(n) => format!(
            "{n} points ({batches} batch size{} × {} load{})",
            plural(batches),
            n / batches.max(1),
            plural(n / batches.max(1))
        ),
        None => "points until the latency limit".to_string(),
    };
    let m = &sweep.measurement;
    let rule = match (m.total_requests, m.stop_when) {
        (Some(n), _) => format!("{n} requests each"),
        // With the point count known the points share their time (run::sweep::TimeBank).
        (None, StopWhen::Ci { half_width_pct, max_ms }) => format!(
            "each until its 95% intervals are within ±{half_width_pct}% ({} {})",
            if planned.is_some() { "on average" } else { "at most" },
            human(Duration::from_millis(max_ms))
        ),
        (None, StopWhen::Stable) => {
            format!(
                "each until {STABLE_WINDOWS} windows agree within {}% (at most {} windows)",
                m.stability_percentage, m.max_trials
            )
        }
    };
    let total = match (planned, bound) {
        (Some(n), Some(b)) => {
            let warm_up =
                if matches!(m.stop_when, StopWhen::Ci { .. }) { WARMUP_MAX * batches as u32 } else { Duration::ZERO };
            format!("; expected to take at most {}", human(b * n as u32 + warm_up))
        }
        _ => String::new(),
    };
    format!("{}: {points}, {rule}{total}", sweep.kind.name())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// "45s", "3m 20s", "1h 05m".
fn human(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_plan;

    fn sweep(line: &str) -> Sweep {
        let plan = parse_plan(["perfbench"].into_iter().chain(line.split_whitespace())).unwrap();
        plan.sweeps[0].clone()
    }

    #[test]
    fn a_sweep_announces_its_points_and_longest_time() {
        let s = sweep("online --concurrency 8..256 --out o");
        let outline = sweep_outline(&s, planned_points(&s), point_bound(&s));
        assert_eq!(
            outline,
            "online: 32 points (1 batch size × 32 loads), each until its 95% intervals are within ±10% (on average 8s); \
             expected to take at most 4m 21s"
        );
        let s = sweep("offline --batch-sizes 1,8,16 --stop-when stable --out o");
        let outline = sweep_outline(&s, planned_points(&s), point_bound(&s));
        assert_eq!(
            outline,
            "offline: 3 points (3 batch sizes × 1 load), each until 3 windows agree within 10% (at most 10 windows)"
        );
        assert_eq!(human(Duration::from_secs(3725)), "1h 02m");
    }
}
