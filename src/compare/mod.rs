//! `perfbench compare RUN_DIR... [--out DIR] [--baseline RUN_DIR]`: several runs side by side.
//!
//! Each input is a run folder (with `offline/` and/or `online/`), a results folder (with
//! `report.csv`) or a results CSV (a seed table included). Sweeps of the same kind are drawn over
//! each other ([`report::overlay`]) and every run is judged against the baseline by the gate's
//! own rule ([`gate::compare`]), so `compare` and `gate` never disagree. It writes
//! `compare.md`, `compare.html` and `plots/`, and exits as the gate does: 0, 1 on a regression,
//! 2 on bad input.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;

use crate::gate::{self, GateOutcome, GateThresholds, MetricCheck, ThresholdFlags};
use crate::report::html::{self, HtmlTable, InlinePlot, Page};
use crate::report::overlay::{self, RunRows};
use crate::report::table::{pipe_table, PipeColumn};
use crate::report::{read_table, TableMeta};
use crate::results::ReportRow;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Run folders (with offline/ and online/), results folders (with report.csv) or results CSVs
    /// (perf_analyzer's, report.csv, or a seed table from reference-results/seeds/).
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// The run the others are judged against [default: the first RUN_DIR].
    #[arg(long, value_name = "RUN_DIR")]
    pub baseline: Option<PathBuf>,
    /// Folder for compare.md, compare.html and plots/.
    #[arg(long, short = 'o', default_value = "compare")]
    pub out: PathBuf,
    #[command(flatten)]
    pub thresholds: ThresholdFlags,
}

/// One sweep of one input: its name (`offline`, `online`), rows and sidecar.
struct Sweep {
    name: String,
    rows: Vec<ReportRow>,
    meta: TableMeta,
}

/// One input, read.
struct Run {
    path: PathBuf,
    sweeps: Vec<Sweep>,
}

impl Run {
    fn sweep(&self, name: &str) -> Option<&Sweep> {
        self.sweeps.iter().find(|s| s.name == name)
    }
}

/// One sweep kind across the runs: the baseline's and each other run's verdict.
struct Section {
    name: String,
    title: String,
    plots: Vec<InlinePlot>,
    plot_files: Vec<String>,
    delta: Vec<PipeColumn>,
    failing: Vec<bool>,
    outcomes: Vec<(usize, GateOutcome)>,
}

pub fn run(args: CompareArgs) -> anyhow::Result<ExitCode> {
    let thresholds = args.thresholds.over(GateThresholds::default())?;
    let mut paths: Vec<PathBuf> = Vec::new();
    if let Some(base) = &args.baseline {
        paths.push(base.clone());
    }
    for p in &args.runs {
        if !paths.iter().any(|q| same_path(p, q)) {
            paths.push(p.clone());
        }
    }
    if paths.len() < 2 {
        bail!("compare needs at least two different runs");
    }
    let runs: Vec<Run> = paths.iter().map(|p| read_run(p)).collect::<anyhow::Result<_>>()?;
    let names: Vec<String> = runs.iter().enumerate().map(|(k, r)| run_name(k, &r.path)).collect();
    let plots_dir = args.out.join("plots");
    std::fs::create_dir_all(&plots_dir).with_context(|| format!("cannot create {}", plots_dir.display()))?;
    let mut sections = Vec::new();
    for base in &runs[0].sweeps {
        let others: Vec<usize> = (1..runs.len()).filter(|&k| runs[k].sweep(&base.name).is_some()).collect();
        if others.is_empty() {
            continue;
        }
        let mut outcomes = Vec::new();
        for &k in &others {
            let current = runs[k].sweep(&base.name).expect("filtered above");
            let outcome = gate::compare(&base.rows, &current.rows, &thresholds)
                .with_context(|| format!("{} vs {}: {}", names[0], names[k], base.name))?;
            eprintln!("{} vs baseline, {}: {}", names[k], base.name, gate::verdict_line(&outcome));
            outcomes.push((k, outcome));
        }
        let members: Vec<RunRows> = std::iter::once(0)
            .chain(others.iter().copied())
            .map(|k| RunRows { name: names[k].clone(), rows: runs[k].sweep(&base.name).expect("member").rows.clone() })
            .collect();
        let (files, inline) =
            overlay::write_overlays(&plots_dir, &base.name, &members, base.meta.kind, &base.meta.title)?;
        let (delta, failing) = delta_columns(&outcomes, &names);
        sections.push(Section {
            name: base.name.clone(),
            title: base.meta.title.clone(),
            plots: inline,
            plot_files: files
                .iter()
                .filter(|f| f.extension().is_some_and(|e| e == "png"))
                .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect(),
            delta,
            failing,
            outcomes,
        });
    }
    if sections.is_empty() {
        bail!("no sweep of the baseline ({}) appears in another run", runs[0].path.display());
    }
    let md_path = args.out.join("compare.md");
    std::fs::write(&md_path, render_markdown(&runs, &names, &sections))
        .with_context(|| format!("cannot write {}", md_path.display()))?;
    let html_path = args.out.join("compare.html");
    std::fs::write(&html_path, html::render_page(&page(&runs, &names, &sections))?)
        .with_context(|| format!("cannot write {}", html_path.display()))?;
    println!("{}", md_path.display());
    println!("{}", html_path.display());
    let passed = sections.iter().all(|s| s.outcomes.iter().all(|(_, o)| o.passed()));
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::from(gate::EXIT_REGRESSION) })
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// `1: name`, the name being the input's last path component (its folder for a report.csv).
fn run_name(k: usize, path: &Path) -> String {
    let named = if path.file_name().is_some_and(|n| n == "report.csv") { path.parent().unwrap_or(path) } else { path };
    let name = named.file_name().map_or_else(|| named.display().to_string(), |n| n.to_string_lossy().into_owned());
    format!("{}: {name}", k + 1)
}

/// Reads one input: a CSV, a results folder, or a run folder with offline/ and online/.
fn read_run(path: &Path) -> anyhow::Result<Run> {
    let sweep_of = |csv: &Path, name: Option<&str>| -> anyhow::Result<Sweep> {
        let (rows, meta) = read_table(csv).with_context(|| format!("cannot read {}", csv.display()))?;
        if rows.is_empty() {
            bail!("{}: the table has no rows", csv.display());
        }
        let name = name.map_or_else(|| meta.kind.title().to_lowercase(), str::to_owned);
        Ok(Sweep { name, rows, meta })
    };
    let sweeps = if path.is_file() {
        vec![sweep_of(path, None)?]
    } else if path.join("report.csv").is_file() {
        vec![sweep_of(&path.join("report.csv"), None)?]
    } else if path.is_dir() {
        let subs: Vec<Sweep> = ["offline", "online"]
            .into_iter()
            .filter(|s| path.join(s).join("report.csv").is_file())
            .map(|s| sweep_of(&path.join(s).join("report.csv"), Some(s)))
            .collect::<anyhow::Result<_>>()?;
        if subs.is_empty() {
            bail!("{}: no report.csv, offline/report.csv or online/report.csv", path.display());
        }
        subs
    } else {
        bail!("{}: no such file or folder", path.display());
    };
    Ok(Run { path: path.to_owned(), sweeps })
}

/// One metric as a cell: the current value, its change and the gate's verdict on it.
fn metric_cell(m: &MetricCheck) -> String {
    format!("{:.1} → {:.1} ({}, {})", m.baseline, m.current, gate::markdown::change_text(m), m.verdict.label())
}

/// The delta table: one row per matched point per run, each metric with its verdict; and which
/// rows regressed.
fn delta_columns(outcomes: &[(usize, GateOutcome)], names: &[String]) -> (Vec<PipeColumn>, Vec<bool>) {
    let mut run = Vec::new();
    let mut point = Vec::new();
    let mut metrics: Vec<Vec<String>> = vec![Vec::new(); gate::Metric::ALL.len()];
    let mut verdict = Vec::new();
    let mut failing = Vec::new();
    for (k, outcome) in outcomes {
        for row in &outcome.rows {
            run.push(names[*k].clone());
            point.push(row.label());
            for (i, metric) in gate::Metric::ALL.iter().enumerate() {
                let cell = row.metrics.iter().find(|m| m.metric == *metric).map_or_else(String::new, metric_cell);
                metrics[i].push(cell);
            }
            verdict.push(if row.regressed() { "FAIL".to_string() } else { "pass".to_string() });
            failing.push(row.regressed());
        }
    }
    let mut columns = vec![PipeColumn::new("Run", run), PipeColumn::new("Point", point)];
    // A metric no row was judged on (the token metrics of tensor runs) gets no column.
    for (metric, cells) in gate::Metric::ALL.iter().zip(metrics) {
        if cells.iter().any(|c| !c.is_empty()) {
            columns.push(PipeColumn::new(metric.label(), cells));
        }
    }
    columns.push(PipeColumn::new("Verdict", verdict));
    (columns, failing)
}

fn render_markdown(runs: &[Run], names: &[String], sections: &[Section]) -> String {
    let mut md = String::from("# perfbench compare\n\n");
    for (k, run) in runs.iter().enumerate() {
        let role = if k == 0 { " (baseline)" } else { "" };
        md.push_str(&format!("- {}{role}: `{}`\n", names[k], run.path.display()));
    }
    for s in sections {
        let status = if s.outcomes.iter().all(|(_, o)| o.passed()) { "pass" } else { "FAIL" };
        md.push_str(&format!("\n## {}: {} ({status})\n\n", s.name, s.title));
        md.push_str("<table>\n<tbody>\n  <tr>\n");
        for f in &s.plot_files {
            md.push_str(&format!("    <td><img src=\"./plots/{f}\"></td>\n"));
        }
        md.push_str("  </tr>\n</tbody>\n</table>\n\n");
        md.push_str("Change against the baseline; a change fails only beyond both its allowance and the noise (the gate's rule).\n\n");
        md.push_str(&pipe_table(&s.delta));
        for (k, o) in &s.outcomes {
            for key in &o.only_in_baseline {
                md.push_str(&format!("\n- {}: not measured at {key} (only in the baseline)", names[*k]));
            }
            for key in &o.only_in_current {
                md.push_str(&format!("\n- {}: {key} has no baseline row", names[*k]));
            }
        }
        md.push('\n');
    }
    md
}

fn page(runs: &[Run], names: &[String], sections: &[Section]) -> Page {
    let passed = sections.iter().all(|s| s.outcomes.iter().all(|(_, o)| o.passed()));
    let mut page = Page {
        title: format!("perfbench compare: {}", if passed { "pass" } else { "REGRESSION" }),
        subtitle: format!("{} runs, judged against {} by the gate's noise-aware rule", runs.len(), names[0]),
        ..Page::default()
    };
    for (k, run) in runs.iter().enumerate() {
        let titles: Vec<&str> = run.sweeps.iter().map(|s| s.meta.title.as_str()).collect();
        let role = if k == 0 { " (baseline)" } else { "" };
        page.config.push([format!("{}{role}", names[k]), format!("{} — {}", run.path.display(), titles.join("; "))]);
        for sweep in &run.sweeps {
            page.warnings
                .extend(html::warnings(&sweep.rows).into_iter().map(|w| format!("{}, {}: {w}", names[k], sweep.name)));
        }
    }
    for s in sections {
        page.plots.extend(s.plots.iter().cloned());
        let mut table = HtmlTable::from_columns(
            &format!("delta-{}", s.name),
            &format!("{}: change against the baseline", s.title),
            &s.delta,
        );
        table.row_classes = s.failing.iter().map(|&f| if f { "fail".into() } else { "pass".into() }).collect();
        page.tables.push(table);
        for (k, o) in &s.outcomes {
            page.warnings.extend(
                o.only_in_baseline.iter().map(|key| format!("{}, {}: not measured at {key}", names[*k], s.name)),
            );
        }
    }
    page.notes.push(
        "Each metric shows baseline → current (change, verdict). A row fails only when a metric is worse \
         than its allowance and than the noise recorded for it (the 95% interval of the difference, or the \
         larger window spread): the gate's rule."
            .into(),
    );
    page
}
