//! How a run reads: perf_analyzer's CSV, the seeds' report CSV and Markdown, plots.
//!
//! A results folder holds `report.csv` (µs), its sidecar `report.toml` (sweep kind, layout,
//! configuration), `report.md` (the configuration and results tables as the seeds print them)
//! and `plots/`. The seed tables under `reference-results/seeds/` use the same CSV + sidecar
//! pair, so `perfbench report` renders both the same way.

pub mod command;
pub mod plot;
pub mod row;
pub mod seeds;
pub mod table;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use row::{LoadPoint, ReportRow};
pub use table::{Layout, Unit};

/// Which of the seeds' two sweeps a table comes from; it picks the plots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SweepKind {
    /// Concurrency 1, a static batch per request, over batch sizes.
    Offline,
    /// A fixed client batch over concurrencies, the server batching.
    Online,
}

impl SweepKind {
    pub fn title(self) -> &'static str {
        match self {
            SweepKind::Offline => "Offline",
            SweepKind::Online => "Online",
        }
    }

    /// For a CSV with no sidecar: offline when every row ran at concurrency 1.
    pub fn infer(rows: &[ReportRow]) -> SweepKind {
        if rows.iter().all(|r| r.load == LoadPoint::Concurrency(1)) {
            SweepKind::Offline
        } else {
            SweepKind::Online
        }
    }
}

/// Where the run executed, as the configuration table's first row names it.
#[derive(Clone, Debug, PartialEq)]
pub enum Device {
    /// Printed as `GPU | <name>`, as the seeds do.
    Gpu(String),
    /// Printed as `Device | <name>` (e.g. a CPU-only run of the bundled server).
    Cpu(String),
}

/// The five parameters every seed configuration table starts with.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigBasics {
    pub device: Device,
    pub backend: String,
    pub precision: String,
    pub max_batch_size: u64,
    pub instances: u64,
}

/// A run's configuration table: ordered `Parameter Name | Parameter Value` pairs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub parameters: Vec<[String; 2]>,
}

impl From<ConfigBasics> for RunConfig {
    fn from(b: ConfigBasics) -> Self {
        let (key, name) = match b.device {
            Device::Gpu(name) => ("GPU", name),
            Device::Cpu(name) => ("Device", name),
        };
        RunConfig::default()
            .with(key, name)
            .with("Backend", b.backend)
            .with("Precision", b.precision)
            .with("Max batch size", b.max_batch_size.to_string())
            .with("Number of model instances", b.instances.to_string())
    }
}

impl RunConfig {
    /// Appends one parameter (e.g. `Max Seq Length`, `Shared memory`).
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.parameters.push([name.into(), value.into()]);
        self
    }

    /// The first parameter of that name, ignoring case.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.parameters
            .iter()
            .find(|[n, _]| n.eq_ignore_ascii_case(name))
            .map(|[_, v]| v.as_str())
    }

    /// The configuration table in the seeds' form.
    pub fn render_markdown(&self) -> String {
        let (names, values) = self
            .parameters
            .iter()
            .map(|[n, v]| (n.clone(), v.clone()))
            .unzip();
        table::pipe_table(&[
            table::PipeColumn::new("Parameter Name", names),
            table::PipeColumn::new("Parameter Value", values),
        ])
    }
}

/// Where a seed table was printed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedSource {
    /// The seed report's file name, e.g. `000_0e3f950e04427afa.txt`.
    pub file: String,
    /// 1-based line of the table's header row in that file.
    pub line: usize,
}

/// The sidecar of a results CSV (`<stem>.toml` beside `<stem>.csv`): what the CSV alone cannot say.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableMeta {
    pub kind: SweepKind,
    /// The unit of latency columns whose header names none (`(ms)` in a header wins).
    pub unit: Unit,
    /// The section title, e.g. `Offline: NVIDIA A30, ONNX Runtime with FP16`.
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SeedSource>,
    pub layout: Layout,
    #[serde(default)]
    pub config: RunConfig,
}

impl TableMeta {
    /// The sidecar perfbench writes for its own run: µs CSV, the default ms layout, and a title
    /// in the seeds' style (`Offline: <device>, <backend> with <precision>`).
    pub fn for_run(kind: SweepKind, config: RunConfig) -> Self {
        let device = config.get("GPU").or_else(|| config.get("Device"));
        let title = match (device, config.get("Backend"), config.get("Precision")) {
            (Some(d), Some(b), Some(p)) => format!("{}: {d}, {b} with {p}", kind.title()),
            (Some(d), _, _) => format!("{}: {d}", kind.title()),
            _ => format!("{} results", kind.title()),
        };
        TableMeta {
            kind,
            unit: Unit::Us,
            title,
            source: None,
            layout: Layout::default(),
            config,
        }
    }
}

/// Why a results folder could not be written or a table not re-rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Table(#[from] table::TableError),
    #[error(transparent)]
    Plot(#[from] plot::PlotError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: bad sidecar: {message}")]
    Sidecar { path: PathBuf, message: String },
    #[error("no rows to report")]
    NoRows,
}

/// The sidecar path of a CSV: same stem, `.toml`.
pub fn sidecar_path(csv: &Path) -> PathBuf {
    csv.with_extension("toml")
}

/// Reads a results CSV and its sidecar; with no sidecar, the CSV is µs (perf_analyzer or
/// `report.csv`) and the sweep kind is inferred from its rows.
pub fn read_table(csv: &Path) -> Result<(Vec<ReportRow>, TableMeta), ReportError> {
    let sidecar = sidecar_path(csv);
    let meta = if sidecar.is_file() {
        let text = std::fs::read_to_string(&sidecar).map_err(|source| ReportError::Read {
            path: sidecar.clone(),
            source,
        })?;
        Some(
            toml::from_str::<TableMeta>(&text).map_err(|e| ReportError::Sidecar {
                path: sidecar.clone(),
                message: e.message().replace('\n', " "),
            })?,
        )
    } else {
        None
    };
    let unit = meta.as_ref().map_or(Unit::Us, |m| m.unit);
    let rows = table::read_csv(csv, unit)?;
    let meta =
        meta.unwrap_or_else(|| TableMeta::for_run(SweepKind::infer(&rows), RunConfig::default()));
    Ok((rows, meta))
}

/// Writes a sidecar.
pub fn write_sidecar(path: &Path, meta: &TableMeta) -> Result<(), ReportError> {
    let text = toml::to_string(meta).map_err(|e| ReportError::Sidecar {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    std::fs::write(path, text).map_err(|source| ReportError::Write {
        path: path.to_owned(),
        source,
    })
}

/// `report.md`: the title, the configuration table, links to the plots and the results table,
/// arranged as the seeds arrange them.
pub fn render_report(rows: &[ReportRow], meta: &TableMeta, plots: &[String]) -> String {
    let mut md = format!("#### {}\n\n", meta.title);
    if !meta.config.parameters.is_empty() {
        md.push_str("Our results were obtained using the following configuration:\n\n");
        md.push_str(&meta.config.render_markdown());
        md.push('\n');
    }
    if !plots.is_empty() {
        md.push_str("<table>\n<tbody>\n  <tr>\n");
        for plot in plots {
            md.push_str(&format!("    <td><img src=\"./plots/{plot}\"></td>\n"));
        }
        md.push_str("  </tr>\n</tbody>\n</table>\n\n");
    }
    md.push_str("<details>\n<summary>Results Table</summary>\n\n");
    md.push_str(&table::render_results(rows, &meta.layout));
    md.push_str("\n</details>\n");
    md
}

/// The files one results folder received.
#[derive(Clone, Debug, Default)]
pub struct WrittenResults {
    pub report_csv: PathBuf,
    pub report_md: PathBuf,
    pub plots: Vec<PathBuf>,
}

/// Writes `report.csv`, `report.toml`, `report.md` and `plots/` into `dir` (created if missing).
/// The sweeps call this at the end of a run; `perf_analyzer.csv` is theirs to write.
pub fn write_results(
    dir: &Path,
    rows: &[ReportRow],
    config: &RunConfig,
    kind: SweepKind,
) -> Result<WrittenResults, ReportError> {
    let meta = TableMeta::for_run(kind, config.clone());
    write_results_with(dir, rows, &meta)
}

/// [`write_results`] with an explicit sidecar (layout, title, configuration); `perfbench report`
/// passes the one it read, so a seed table re-renders in its own layout.
pub fn write_results_with(
    dir: &Path,
    rows: &[ReportRow],
    meta: &TableMeta,
) -> Result<WrittenResults, ReportError> {
    if rows.is_empty() {
        return Err(ReportError::NoRows);
    }
    let plots_dir = dir.join("plots");
    std::fs::create_dir_all(&plots_dir).map_err(|source| ReportError::Write {
        path: plots_dir.clone(),
        source,
    })?;
    let mut written = WrittenResults {
        report_csv: dir.join("report.csv"),
        ..Default::default()
    };
    table::write_report_csv(&written.report_csv, rows)?;
    // report.csv is µs whatever the source was; the source line stays with the seed's own sidecar.
    let run_meta = TableMeta {
        unit: Unit::Us,
        source: None,
        ..meta.clone()
    };
    write_sidecar(&dir.join("report.toml"), &run_meta)?;
    written.plots = plot::render_plots(&plots_dir, rows, meta.kind, &meta.title)?;
    let png_names: Vec<String> = written
        .plots
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    written.report_md = dir.join("report.md");
    let md = render_report(rows, meta, &png_names);
    std::fs::write(&written.report_md, md).map_err(|source| ReportError::Write {
        path: written.report_md.clone(),
        source,
    })?;
    Ok(written)
}
