//! `perfbench report FILE.csv [--out DIR]`: re-renders `report.md` and the plots from a results
//! CSV (a `report.csv`, a perf_analyzer CSV, or a seed CSV from `reference-results/seeds/`), and
//! `perfbench report --extract-seeds DIR` converts the seed reports into that reference data.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::plot::{self, Format};
use super::table::{ConstColumn, Layout};
use super::{read_table, seeds, TableKind};
use crate::results::{composing_csv, ReportRow};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A report.csv, a perf_analyzer CSV (`-f`, with or without `--verbose-csv`), or a seed CSV
    /// from reference-results/seeds/ (its `.toml` sidecar gives layout and configuration).
    #[arg(required_unless_present = "extract_seeds")]
    pub file: Option<PathBuf>,
    /// Folder to write into. Default: the CSV's folder for a `report.csv`, else a folder named
    /// after the CSV beside it.
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Table layout for report.md (default: the sidecar's, else `ms2`).
    #[arg(long, value_enum)]
    pub layout: Option<LayoutArg>,
    /// Sweep kind, which picks the plots (default: the sidecar's, else offline when every row
    /// ran at concurrency 1).
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,
    /// Batch size of every row, for a perf_analyzer CSV (which does not record it; default 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: Option<u64>,
    /// Write only the plots (into `--out`), e.g. to refresh plots/seeds/.
    #[arg(long)]
    pub plots_only: bool,
    /// Plot formats to write with `--plots-only` (a full re-render writes PNG and SVG).
    #[arg(long, value_enum, default_value = "both")]
    pub format: FormatArg,
    /// Write only `report.html` (into `--out`): the self-contained page, plots inline.
    #[arg(long, conflicts_with = "plots_only")]
    pub html: bool,
    /// Convert the seed reports (`*.txt`) in this folder into CSV + sidecar + original table,
    /// under `--out` (default `reference-results/seeds`).
    #[arg(long, conflicts_with_all = ["file", "layout", "kind", "batch", "plots_only"])]
    pub extract_seeds: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LayoutArg {
    /// 15 columns, ms with one decimal (seed 000).
    Ms1,
    /// 15 columns, ms with two decimals (seed 001; perfbench's default).
    Ms2,
    /// 15 columns, ms with three decimals.
    Ms3,
    /// Row index and µs integers (seed 003).
    Us,
    /// The short summary tables of seeds 002 and 004 (offline: percentiles only).
    Summary,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum KindArg {
    Offline,
    Online,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    Png,
    Svg,
    Both,
}

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    if let Some(seeds_dir) = &args.extract_seeds {
        let out = args.out.clone().unwrap_or_else(|| PathBuf::from("reference-results/seeds"));
        let summary = seeds::extract_dir(seeds_dir, &out)?;
        println!(
            "{} tables ({} offline, {} online) written under {}",
            summary.offline + summary.online,
            summary.offline,
            summary.online,
            out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let file = args.file.as_deref().context("no CSV file given")?;
    if !file.is_file() {
        anyhow::bail!("{}: no such file", file.display());
    }
    let (mut rows, mut meta) = read_table(file)?;
    if rows.is_empty() {
        anyhow::bail!("{}: the table has no rows", file.display());
    }
    if let Some(batch) = args.batch {
        rows.iter_mut().for_each(|r| r.batch = batch);
    }
    if let Some(kind) = args.kind {
        meta.kind = match kind {
            KindArg::Offline => TableKind::Offline,
            KindArg::Online => TableKind::Online,
        };
    }
    if let Some(layout) = args.layout {
        meta.layout = layout_for(layout, &meta);
    }
    sort_rows(&mut rows, meta.kind);
    let out = args.out.clone().unwrap_or_else(|| default_out(file));
    let source = composing_csv::for_table(file);
    let composing = super::read_composing(&source)?;
    if args.html {
        std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
        println!("{}", super::write_html(&out, &rows, &meta, &composing)?.display());
        return Ok(ExitCode::SUCCESS);
    }
    if args.plots_only {
        let formats: &[Format] = match args.format {
            FormatArg::Png => &[Format::Png],
            FormatArg::Svg => &[Format::Svg],
            FormatArg::Both => &[Format::Png, Format::Svg],
        };
        std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
        let written = plot::render_plots_as(&out, &rows, meta.kind, &meta.title, &composing, formats)?;
        for path in written {
            println!("{}", path.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let written = super::write_results_with(&out, &rows, &meta, &composing)?;
    let copy = out.join(composing_csv::COMPOSING_FILE);
    if !composing.is_empty() && !same_file(&source, &copy) {
        // The new folder keeps its composing rows, so it re-renders on its own.
        let _ = std::fs::remove_file(&copy);
        composing_csv::append(&copy, &composing)?;
    }
    println!("{}", written.report_csv.display());
    println!("{}", written.report_md.display());
    println!("{}", written.report_html.display());
    for path in written.plots {
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Sweep order for the plots' x-axis (perf_analyzer may write its rows in another order):
/// offline by batch, online by load point.
fn sort_rows(rows: &mut [ReportRow], kind: TableKind) {
    let load = |r: &ReportRow| r.load.amount();
    rows.sort_by(|a, b| {
        let (x, y) = match kind {
            TableKind::Offline => ((a.batch as f64, load(a)), (b.batch as f64, load(b))),
            TableKind::Online => ((load(a), a.batch as f64), (load(b), b.batch as f64)),
        };
        x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal)
    });
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn default_out(file: &Path) -> PathBuf {
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("report") | None => dir,
        Some(stem) => dir.join(stem),
    }
}

fn layout_for(arg: LayoutArg, meta: &super::TableMeta) -> Layout {
    match arg {
        LayoutArg::Ms1 => Layout::Milliseconds { decimals: 1 },
        LayoutArg::Ms2 => Layout::Milliseconds { decimals: 2 },
        LayoutArg::Ms3 => Layout::Milliseconds { decimals: 3 },
        LayoutArg::Us => Layout::Microseconds,
        LayoutArg::Summary => {
            let leading: Vec<ConstColumn> = meta
                .config
                .get("Precision")
                .map(|p| ConstColumn { header: "Precision".into(), value: p.to_owned() })
                .into_iter()
                .collect();
            match meta.kind {
                TableKind::Offline => Layout::OfflineSummary { leading },
                TableKind::Online => Layout::OnlineSummary { leading: vec![] },
            }
        }
    }
}
