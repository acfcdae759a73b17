//! What a sweep writes while it runs: every row reaches disk as soon as it is measured
//! (perf_analyzer's CSV appended and flushed, `report.csv` rewritten atomically), the console
//! shows perf_analyzer's blocks (`profile`) or a progress line, and `--collect-metrics` scrapes
//! GPU gauges beside each point. [`Recorder::finish`] writes what needs all rows: report.md,
//! the plots and the profile export.

use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::sweep::SweepObserver;
use crate::load::LoadMode;
use crate::measure::gpu_metrics::GpuCollector;
use crate::measure::{Window, WindowFigures, WindowMode};
use crate::plan::{Distribution, Load, Sweep, SweepKind, WindowKind};
use crate::report::pa_summary::{self, RunDescription, Wire};
use crate::report::{pa_export, RunConfig, TableKind};
use crate::results::csv::write_report_csv;
use crate::results::format::format_g;
use crate::results::pa_csv::{CsvColumns, PaCsvWriter};
use crate::results::{LoadPoint, PointResult, ReportRow};
use crate::tensor::Tensor;

/// `--profile-export-file`: where, the service kind it names, and each data step's inputs.
pub struct Export<'a> {
    pub path: &'a Path,
    pub service_kind: &'a str,
    pub step_inputs: &'a [Vec<(String, Tensor)>],
}

/// Sees one sweep's points.
pub struct Recorder {
    kind: SweepKind,
    wire: Wire,
    /// `profile`: perf_analyzer's console blocks.
    description: Option<RunDescription>,
    pa_csv: Option<PaCsvWriter>,
    progress: ProgressBar,
    label: String,
    /// Points of the sweep (batch sizes × load levels), when known: "[k/N]".
    planned: Option<usize>,
    pub results: Vec<PointResult>,
    gpu: Option<(reqwest::Client, String, Duration)>,
    collector: Option<GpuCollector>,
    out: Option<std::path::PathBuf>,
    /// `-v`: print each pass.
    verbose: u8,
}

impl Recorder {
    /// Opens the sweep's outputs. `metrics_url`: where `--collect-metrics` scrapes when the plan
    /// names no URL.
    pub fn create(
        sweep: &Sweep,
        wire: Wire,
        service_kind: &'static str,
        metrics_url: &str,
    ) -> std::io::Result<Recorder> {
        let first_batch = sweep.batch_sizes.first();
        let first = match &sweep.load {
            Load::Concurrency { levels } => LoadPoint::Concurrency(levels.first()),
            Load::RequestRate { start, .. } => LoadPoint::RequestRate(*start),
            Load::Trace { .. } => LoadPoint::RequestRate(0.0),
        };
        let columns = CsvColumns { verbose: sweep.output.verbose_csv, gpu_metrics: sweep.call.metrics.is_some() };
        let csv_path = match (&sweep.output.latency_report_file, &sweep.output.dir) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(dir)) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
                Some(dir.join("perf_analyzer.csv"))
            }
            (None, None) => None,
        };
        let pa_csv = match csv_path {
            Some(path) => Some(
                PaCsvWriter::create(&path, first, columns)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))?,
            ),
            None => None,
        };
        let description = (sweep.kind == SweepKind::Profile).then(|| describe(sweep, first_batch, service_kind));
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
        let planned = match &sweep.load {
            Load::Concurrency { levels } if !sweep.binary_search => {
                levels.max().map(|_| levels.values(0).len() * sweep.batch_sizes.values(0).len())
            }
            _ => None,
        };
        Ok(Recorder {
            kind: sweep.kind,
            wire,
            description,
            pa_csv,
            progress,
            label: String::new(),
            planned,
            results: Vec::new(),
            gpu,
            collector: None,
            out: sweep.output.dir.clone(),
            verbose: sweep.output.verbose,
        })
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
        if self.kind == SweepKind::Profile && !self.results.is_empty() {
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

impl SweepObserver for Recorder {
    fn point_started(&mut self, mode: &LoadMode) {
        self.label = match mode.point() {
            LoadPoint::Concurrency(c) => format!("concurrency {c}"),
            LoadPoint::RequestRate(r) => format!("{} req/s", format_g(r)),
        };
        if let Some(n) = self.planned {
            self.label = format!("[{}/{n}] {}", self.results.len() + 1, self.label);
        }
        self.progress.set_message(format!("{}: measuring", self.label));
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

    fn window_done(&mut self, trial: usize, window: &Window, figures: WindowFigures, stable: bool) {
        if self.verbose > 0 {
            // perf_analyzer's -v line, which scripts parse.
            let line = format!(
                "  Pass [{}] throughput: {} infer/sec. Avg latency: {} usec (std {} usec). ",
                trial + 1,
                format_g(figures.throughput),
                window.client.avg_latency_us() as u64,
                window.client.stdev_us() as u64
            );
            self.progress.suspend(|| println!("{line}"));
        }
        self.progress.set_message(format!(
            "{}: window {} · {:.1} infer/s · {:.0} µs · {}",
            self.label,
            trial + 1,
            figures.throughput,
            figures.latency_us,
            if stable { "stable" } else { "not yet stable" }
        ));
    }

    fn point_done(&mut self, result: &PointResult) -> std::io::Result<()> {
        let mut result = result.clone();
        result.detail.gpu = self.collector.take().map(GpuCollector::finish);
        if let Some(csv) = &mut self.pa_csv {
            csv.append(&result)?;
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
            let line = format!(
                "batch {:>5} · {:<16} {:>10.1} infer/s · p99 {:>9.0} µs{}",
                r.batch,
                self.label,
                r.throughput,
                r.p99_us,
                if r.stable { "" } else { " (unstable)" }
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
}

/// perf_analyzer's settings block of a profile sweep.
fn describe(sweep: &Sweep, batch: u64, service_kind: &'static str) -> RunDescription {
    let (limit_line, distribution_line) = match &sweep.load {
        Load::Concurrency { levels } => {
            (levels.max().map(|e| format!("Concurrency limit: {e} concurrent requests")), None)
        }
        Load::RequestRate { end, distribution, .. } => (
            Some(format!("Request Rate limit: {} requests per seconds", format_g(*end))),
            Some(match distribution {
                Distribution::Constant => "Using uniform distribution on request generation".to_string(),
                Distribution::Poisson => "Using poisson distribution on request generation".to_string(),
            }),
        ),
        Load::Trace { .. } => (None, Some("Using the --request-intervals trace for request generation".into())),
    };
    let m = &sweep.measurement;
    RunDescription {
        batch,
        service_kind,
        window: window_mode(sweep),
        request_count: m.total_requests,
        percentile: m.percentile,
        latency_limit_ms: sweep.latency_limit_ms.unwrap_or(0.0),
        limit_line,
        distribution_line,
        asynchronous: sweep.call.asynchronous,
        stability_pct: m.stability_percentage,
        max_trials: m.max_trials,
    }
}

/// What ends a window of this sweep.
pub fn window_mode(sweep: &Sweep) -> WindowMode {
    let m = &sweep.measurement;
    match m.mode {
        WindowKind::TimeWindows => WindowMode::Time(Duration::from_millis(m.interval_ms)),
        WindowKind::CountWindows => WindowMode::Count(m.request_count),
    }
}
