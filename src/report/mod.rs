//! How a run reads: perf_analyzer's CSV, the seeds' report CSV and Markdown, plots.
//!
//! A results folder holds `report.csv` (µs), its sidecar `report.toml` (sweep kind, layout,
//! configuration), `report.md` (the configuration and results tables as the seeds print them)
//! and `plots/`. The seed tables under `reference-results/seeds/` use the same CSV + sidecar
//! pair, so `perfbench report` renders both the same way.

pub mod command;
pub mod html;
pub mod overlay;
pub mod pa_export;
pub mod pa_summary;
pub mod plot;
pub mod seeds;
pub mod table;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::results::csv::Unit;
pub use table::Layout;

use crate::results::composing_csv::{self, ComposingRow};
use crate::results::csv::{self as results_csv, TableError};
use crate::results::{LoadPoint, ReportRow};

/// Which of the seeds' two sweeps a table comes from; it picks the plots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TableKind {
    /// Concurrency 1, a static batch per request, over batch sizes.
    Offline,
    /// A fixed client batch over concurrencies, the server batching.
    Online,
}

impl TableKind {
    pub fn title(self) -> &'static str {
        match self {
            TableKind::Offline => "Offline",
            TableKind::Online => "Online",
        }
    }

    /// For a CSV with no sidecar: offline when every row ran at concurrency 1.
    pub fn infer(rows: &[ReportRow]) -> TableKind {
        if rows.iter().all(|r| r.load == LoadPoint::Concurrency(1)) {
            TableKind::Offline
        } else {
            TableKind::Online
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
        self.parameters.iter().find(|[n, _]| n.eq_ignore_ascii_case(name)).map(|[_, v]| v.as_str())
    }

    /// The configuration table in the seeds' form.
    pub fn render_markdown(&self) -> String {
        let (names, values) = self.parameters.iter().map(|[n, v]| (n.clone(), v.clone())).unzip();
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
    pub kind: TableKind,
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
    pub fn for_run(kind: TableKind, config: RunConfig) -> Self {
        let device = config.get("GPU").or_else(|| config.get("Device"));
        let title = match (device, config.get("Backend"), config.get("Precision")) {
            (Some(d), Some(b), Some(p)) => format!("{}: {d}, {b} with {p}", kind.title()),
            (Some(d), _, _) => format!("{}: {d}", kind.title()),
            _ => format!("{} results", kind.title()),
        };
        TableMeta { kind, unit: Unit::Us, title, source: None, layout: Layout::default(), config }
    }
}

/// Why a results folder could not be written or a table not re-rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Plot(#[from] plot::PlotError),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: bad sidecar: {message}")]
    Sidecar { path: PathBuf, message: String },
    #[error("no rows to report")]
    NoRows,
    #[error("page template: {0}")]
    Template(String),
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
        let text =
            std::fs::read_to_string(&sidecar).map_err(|source| ReportError::Read { path: sidecar.clone(), source })?;
        Some(
            toml::from_str::<TableMeta>(&text)
                .map_err(|e| ReportError::Sidecar { path: sidecar.clone(), message: e.message().replace('\n', " ") })?,
        )
    } else {
        None
    };
    let unit = meta.as_ref().map_or(Unit::Us, |m| m.unit);
    let rows = results_csv::read_csv(csv, unit)?;
    let meta = meta.unwrap_or_else(|| TableMeta::for_run(TableKind::infer(&rows), RunConfig::default()));
    Ok((rows, meta))
}

/// Writes a sidecar.
pub fn write_sidecar(path: &Path, meta: &TableMeta) -> Result<(), ReportError> {
    let text =
        toml::to_string(meta).map_err(|e| ReportError::Sidecar { path: path.to_owned(), message: e.to_string() })?;
    std::fs::write(path, text).map_err(|source| ReportError::Write { path: path.to_owned(), source })
}

/// `report.md`: the title, the configuration table, links to the plots and the results table,
/// arranged as the seeds arrange them.
/// An ensemble's `composing` rows get their own table under the results table.
pub fn render_report(rows: &[ReportRow], meta: &TableMeta, plots: &[String], composing: &[ComposingRow]) -> String {
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
    let notes = table::render_notes(rows);
    if !notes.is_empty() {
        md.push('\n');
        md.push_str(&notes);
    }
    md.push_str("\n</details>\n");
    if !composing.is_empty() {
        md.push_str("\n<details>\n<summary>Composing Models</summary>\n\n");
        md.push_str(&table::render_composing(composing, &meta.layout));
        md.push_str("\n</details>\n");
    }
    md
}

/// The files one results folder received.
#[derive(Clone, Debug, Default)]
pub struct WrittenResults {
    pub report_csv: PathBuf,
    pub report_md: PathBuf,
    pub report_html: PathBuf,
    pub plots: Vec<PathBuf>,
}

/// Writes `report.csv`, `report.toml`, `report.md` and `plots/` into `dir` (created if missing).
/// The sweeps call this at the end of a run; `perf_analyzer.csv` is theirs to write.
pub fn write_results(
    dir: &Path,
    rows: &[ReportRow],
    config: &RunConfig,
    kind: TableKind,
) -> Result<WrittenResults, ReportError> {
    let meta = TableMeta::for_run(kind, config.clone());
    // The sweep appended an ensemble's composing.csv into the same folder.
    let composing = read_composing(&dir.join(composing_csv::COMPOSING_FILE))?;
    write_results_with(dir, rows, &meta, &composing)
}

/// The rows of a `composing.csv`; none when there is no such file (no ensemble).
pub fn read_composing(path: &Path) -> Result<Vec<ComposingRow>, ReportError> {
    if path.is_file() {
        Ok(composing_csv::read(path)?)
    } else {
        Ok(Vec::new())
    }
}

/// [`write_results`] with an explicit sidecar (layout, title, configuration); `perfbench report`
/// passes the one it read, so a seed table re-renders in its own layout.
pub fn write_results_with(
    dir: &Path,
    rows: &[ReportRow],
    meta: &TableMeta,
    composing: &[ComposingRow],
) -> Result<WrittenResults, ReportError> {
    if rows.is_empty() {
        return Err(ReportError::NoRows);
    }
    let plots_dir = dir.join("plots");
    std::fs::create_dir_all(&plots_dir).map_err(|source| ReportError::Write { path: plots_dir.clone(), source })?;
    let mut written = WrittenResults { report_csv: dir.join("report.csv"), ..Default::default() };
    results_csv::write_report_csv(&written.report_csv, rows)?;
    // report.csv is µs whatever the source was; the source line stays with the seed's own sidecar.
    let run_meta = TableMeta { unit: Unit::Us, source: None, ..meta.clone() };
    write_sidecar(&dir.join("report.toml"), &run_meta)?;
    written.plots = plot::render_plots(&plots_dir, rows, meta.kind, &meta.title, composing)?;
    let png_names: Vec<String> = written
        .plots
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    written.report_md = dir.join("report.md");
    let md = render_report(rows, meta, &png_names, composing);
    std::fs::write(&written.report_md, md)
        .map_err(|source| ReportError::Write { path: written.report_md.clone(), source })?;
    written.report_html = write_html(dir, rows, meta, composing)?;
    Ok(written)
}

/// Writes `report.html` into `dir`: the self-contained page of [`html::report_page`].
pub fn write_html(
    dir: &Path,
    rows: &[ReportRow],
    meta: &TableMeta,
    composing: &[ComposingRow],
) -> Result<PathBuf, ReportError> {
    if rows.is_empty() {
        return Err(ReportError::NoRows);
    }
    let path = dir.join(html::REPORT_HTML);
    let page = html::render_page(&html::report_page(rows, meta, composing)?)?;
    std::fs::write(&path, page).map_err(|source| ReportError::Write { path: path.clone(), source })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(batch: u64, avg_us: f64) -> ReportRow {
        ReportRow {
            batch,
            load: LoadPoint::Concurrency(1),
            throughput: batch as f64 * 1e6 / avg_us,
            client_send_us: 10.0,
            network_us: avg_us * 0.1,
            server_queue_us: 5.0,
            server_compute_input_us: 20.0,
            server_compute_infer_us: avg_us * 0.9 - 45.0,
            server_compute_output_us: 5.0,
            client_recv_us: 5.0,
            p50_us: avg_us,
            p90_us: avg_us * 1.1,
            p95_us: avg_us * 1.2,
            p99_us: avg_us * 1.5,
            avg_us,
            requests: 100,
            failed: 0,
            late: 0,
            missed: 0,
            sequences: 0,
            avg_sequence_length: 0.0,
            stable: true,
            throughput_spread_pct: 2.0,
            p99_spread_pct: 5.0,
            avg_spread_pct: 1.0,
            server_avg_batch: batch as f64,
            throughput_ci: crate::results::Interval::UNKNOWN,
            p50_ci: crate::results::Interval::UNKNOWN,
            p99_ci: crate::results::Interval::UNKNOWN,
            overloaded: false,
            interrupted: false,
            client: Default::default(),
            tokens: None,
        }
    }

    fn config() -> RunConfig {
        RunConfig::from(ConfigBasics {
            device: Device::Cpu("2-core x86_64".into()),
            backend: "perfbench identity".into(),
            precision: "FP32".into(),
            max_batch_size: 16,
            instances: 1,
        })
    }

    #[test]
    fn write_results_writes_a_complete_folder_that_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![row(1, 800.0), row(8, 1500.0), row(16, 2600.0)];
        let written = write_results(dir.path(), &rows, &config(), TableKind::Offline).unwrap();
        for name in ["report.csv", "report.toml", "report.md", "report.html"] {
            assert!(dir.path().join(name).is_file(), "{name}");
        }
        let names: Vec<String> =
            written.plots.iter().map(|p| p.file_name().unwrap().to_string_lossy().into()).collect();
        for plot in ["throughput_vs_batch", "latency_vs_batch", "throughput_vs_latency"] {
            for ext in ["png", "svg"] {
                let name = format!("{plot}.{ext}");
                assert!(names.contains(&name), "{name}");
                assert!(std::fs::metadata(dir.path().join("plots").join(&name)).unwrap().len() > 1000);
            }
        }
        let md = std::fs::read_to_string(&written.report_md).unwrap();
        assert!(md.starts_with("#### Offline: 2-core x86_64, perfbench identity with FP32\n"), "{md}");
        assert!(md.contains("| Device                    | 2-core x86_64      |"), "{md}");
        assert!(md.contains("|   Batch |   Concurrency |   Inferences/Second |   Client Send (ms) |"));
        assert!(md.contains("|      16 |             1 |             6153.85 |               0.01 |"), "{md}");
        let (back, meta) = read_table(&written.report_csv).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(meta.kind, TableKind::Offline);
        assert_eq!(meta.config, config());
        assert_eq!(back[2].avg_us, 2600.0);
    }

    #[test]
    fn online_results_get_the_concurrency_plot() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<ReportRow> =
            (1..=4).map(|c| ReportRow { load: LoadPoint::Concurrency(c * 8), ..row(2, 1000.0 * c as f64) }).collect();
        let written = write_results(dir.path(), &rows, &config(), TableKind::Online).unwrap();
        assert_eq!(written.plots.len(), 2);
        assert!(dir.path().join("plots/latency_vs_concurrency.png").is_file());
    }

    #[test]
    fn a_folder_with_composing_csv_gets_the_composing_table_and_one_without_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![row(1, 800.0), row(8, 1500.0)];
        let plain = write_results(dir.path(), &rows, &config(), TableKind::Offline).unwrap();
        let before = std::fs::read_to_string(&plain.report_md).unwrap();
        assert!(!before.contains("Composing"), "{before}");
        assert!(!plain.plots.iter().any(|p| p.to_string_lossy().contains("latency_by_model")));
        let composing = |batch, model: &str| ComposingRow {
            batch,
            load: LoadPoint::Concurrency(1),
            model: model.into(),
            inference_count: 10,
            execution_count: 10,
            queue_us: 50.0,
            compute_input_us: 10.0,
            compute_infer_us: 600.0,
            compute_output_us: 10.0,
            share_pct: 50.0,
        };
        let path = dir.path().join(composing_csv::COMPOSING_FILE);
        composing_csv::append(&path, &[composing(1, "pre"), composing(1, "sleep"), composing(8, "pre")]).unwrap();
        let with = write_results(dir.path(), &rows, &config(), TableKind::Offline).unwrap();
        let after = std::fs::read_to_string(&with.report_md).unwrap();
        // The report without composing models stays as it was, but for the new plot's link; the
        // new table follows it.
        let link = "    <td><img src=\"./plots/latency_by_model.png\"></td>\n";
        let unlinked = after.replacen(link, "", 1);
        let extra = unlinked.strip_prefix(before.as_str()).unwrap_or_else(|| panic!("{after}"));
        assert!(extra.starts_with("\n<details>\n<summary>Composing Models</summary>\n\n|   Batch |"), "{extra}");
        assert!(extra.contains("|       8 |             1 | pre     |"), "{extra}");
        assert_eq!(extra.matches("| pre ").count() + extra.matches("| sleep ").count(), 3, "{extra}");
        // The composing plot is written beside the others, and linked.
        let png = dir.path().join("plots/latency_by_model.png");
        let svg = dir.path().join("plots/latency_by_model.svg");
        assert!(with.plots.contains(&png) && with.plots.contains(&svg), "{:?}", with.plots);
        let png_bytes = std::fs::read(&png).unwrap();
        assert!(png_bytes.starts_with(b"\x89PNG\r\n\x1a\n") && png_bytes.len() > 5000, "{}", png_bytes.len());
        let svg_text = std::fs::read_to_string(&svg).unwrap();
        assert!(svg_text.contains("<svg") && svg_text.contains("\nsleep\n</text>"), "{svg_text}");
        assert!(after.contains("<img src=\"./plots/latency_by_model.png\">"), "{after}");
    }

    #[test]
    fn no_rows_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(write_results(dir.path(), &[], &config(), TableKind::Online), Err(ReportError::NoRows)));
    }
}
