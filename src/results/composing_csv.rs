//! `composing.csv`: what perf_analyzer does not write for an ensemble, one row per load point and
//! composing model that did work (leaf models, each once), with that model's share of the row's
//! average latency. Appended point by point (polars writes each point's rows), so an
//! interrupted sweep keeps every row, and read back by `report` and `gate`.

use std::fs::OpenOptions;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use polars::prelude::*;

use super::csv::{TableError, REQUEST_RATE_COLUMN};
use super::{ComposingStats, LoadPoint, PointResult};

/// The file's name in a results folder.
pub const COMPOSING_FILE: &str = "composing.csv";

/// One composing model at one load point; times in µs per request of that model.
#[derive(Clone, Debug, PartialEq)]
pub struct ComposingRow {
    pub batch: u64,
    pub load: LoadPoint,
    pub model: String,
    pub inference_count: u64,
    pub execution_count: u64,
    pub queue_us: f64,
    pub compute_input_us: f64,
    pub compute_infer_us: f64,
    pub compute_output_us: f64,
    /// Queue + compute as a share of the row's average latency, %.
    pub share_pct: f64,
}

const COLUMNS: [&str; 8] = [
    "Model",
    "Inference Count",
    "Execution Count",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Share of Latency",
];

/// `FILE.csv` → `FILE.composing.csv` (beside a `profile -f` file).
pub fn beside(csv: &Path) -> PathBuf {
    let stem = csv.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    csv.with_file_name(format!("{stem}.{COMPOSING_FILE}"))
}

/// Where a results CSV's composing rows are: `composing.csv` beside a results folder's
/// `report.csv` or `perf_analyzer.csv`, else [`beside`] it (a `-f` file).
pub fn for_table(csv: &Path) -> PathBuf {
    match csv.file_stem().and_then(|s| s.to_str()) {
        Some("report" | "perf_analyzer") => csv.with_file_name(COMPOSING_FILE),
        _ => beside(csv),
    }
}

/// The composing rows of one measured point (none for a model that is no ensemble).
pub fn composing_rows(result: &PointResult) -> Vec<ComposingRow> {
    let row = &result.row;
    ComposingStats::leaves(&result.detail.composing)
        .into_iter()
        .map(|c| {
            let s = &c.stats;
            let (queue, input, infer, output) =
                (s.queue.avg_us(), s.compute_input.avg_us(), s.compute_infer.avg_us(), s.compute_output.avg_us());
            let busy = queue + input + infer + output;
            ComposingRow {
                batch: row.batch,
                load: row.load,
                model: c.model.name.clone(),
                inference_count: s.inference_count,
                execution_count: s.execution_count,
                queue_us: queue,
                compute_input_us: input,
                compute_infer_us: infer,
                compute_output_us: output,
                share_pct: if row.avg_us > 0.0 { 100.0 * busy / row.avg_us } else { 0.0 },
            }
        })
        .collect()
}

fn frame(rows: &[ComposingRow]) -> Result<DataFrame, TableError> {
    let open_loop = matches!(rows.first().map(|r| r.load), Some(LoadPoint::RequestRate(_)));
    let f64_column = |name: &str, f: &dyn Fn(&ComposingRow) -> f64| {
        Column::new(name.into(), rows.iter().map(|r| (f(r) * 1000.0).round() / 1000.0).collect::<Vec<f64>>())
    };
    let u64_column = |name: &str, f: &dyn Fn(&ComposingRow) -> u64| {
        Column::new(name.into(), rows.iter().map(f).collect::<Vec<u64>>())
    };
    let load = |r: &ComposingRow| r.load.amount();
    let columns = vec![
        u64_column("Batch", &|r| r.batch),
        if open_loop { f64_column(REQUEST_RATE_COLUMN, &load) } else { u64_column("Concurrency", &|r| load(r) as u64) },
        Column::new(COLUMNS[0].into(), rows.iter().map(|r| r.model.clone()).collect::<Vec<String>>()),
        u64_column(COLUMNS[1], &|r| r.inference_count),
        u64_column(COLUMNS[2], &|r| r.execution_count),
        f64_column(COLUMNS[3], &|r| r.queue_us),
        f64_column(COLUMNS[4], &|r| r.compute_input_us),
        f64_column(COLUMNS[5], &|r| r.compute_infer_us),
        f64_column(COLUMNS[6], &|r| r.compute_output_us),
        f64_column(COLUMNS[7], &|r| r.share_pct),
    ];
    DataFrame::new(rows.len(), columns).map_err(|source| TableError::Csv { origin: COMPOSING_FILE.into(), source })
}

/// Appends one point's rows to `path`, with the header when the file is new or empty.
pub fn append(path: &Path, rows: &[ComposingRow]) -> Result<(), TableError> {
    if rows.is_empty() {
        return Ok(());
    }
    let write_error = |source| TableError::Write { path: path.to_owned(), source };
    let mut file = OpenOptions::new().create(true).append(true).open(path).map_err(write_error)?;
    let fresh = file.metadata().map_err(write_error)?.len() == 0;
    CsvWriter::new(&mut file)
        .include_header(fresh)
        .finish(&mut frame(rows)?)
        .map_err(|source| TableError::Csv { origin: path.display().to_string(), source })?;
    file.sync_data().map_err(write_error)
}

/// Reads a `composing.csv` back (`report`, `gate`).
pub fn read(path: &Path) -> Result<Vec<ComposingRow>, TableError> {
    let text = std::fs::read(path).map_err(|source| TableError::Read { path: path.to_owned(), source })?;
    let origin = path.display().to_string();
    let csv_error = |source| TableError::Csv { origin: origin.clone(), source };
    let df = CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(Some(0))
        .into_reader_with_file_handle(Cursor::new(text))
        .finish()
        .map_err(csv_error)?;
    let open_loop = df.column(REQUEST_RATE_COLUMN).is_ok();
    let text_of = |name: &str| -> Result<Vec<String>, TableError> {
        let column = df
            .column(name)
            .map_err(|_| TableError::MissingColumn { origin: origin.clone(), what: "composing model" })?;
        Ok(column.str().map_err(csv_error)?.iter().map(|v| v.unwrap_or("").trim().to_owned()).collect())
    };
    let number = |name: &str| -> Result<Vec<f64>, TableError> {
        text_of(name)?
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                v.parse::<f64>().map_err(|_| TableError::BadNumber {
                    origin: origin.clone(),
                    line: i + 2,
                    column: name.to_owned(),
                    value: v,
                })
            })
            .collect()
    };
    let load = number(if open_loop { REQUEST_RATE_COLUMN } else { "Concurrency" })?;
    let (batch, models) = (number("Batch")?, text_of(COLUMNS[0])?);
    let figures: Vec<Vec<f64>> = COLUMNS[1..].iter().map(|c| number(c)).collect::<Result<_, _>>()?;
    Ok((0..df.height())
        .map(|i| ComposingRow {
            batch: batch[i] as u64,
            load: if open_loop { LoadPoint::RequestRate(load[i]) } else { LoadPoint::Concurrency(load[i] as u64) },
            model: models[i].clone(),
            inference_count: figures[0][i] as u64,
            execution_count: figures[1][i] as u64,
            queue_us: figures[2][i],
            compute_input_us: figures[3][i],
            compute_infer_us: figures[4][i],
            compute_output_us: figures[5][i],
            share_pct: figures[6][i],
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{ComposingModel, PointDetail, ReportRow, ServerStats, StageTotal};

    fn point(concurrency: u64) -> PointResult {
        let leaf = |name: &str, depth, infer_us: u64| ComposingStats {
            model: ComposingModel { name: name.into(), version: "1".into(), depth, ensemble: false },
            stats: ServerStats {
                inference_count: 10,
                execution_count: 5,
                queue: StageTotal { count: 10, ns: 10 * 100_000 },
                compute_infer: StageTotal { count: 10, ns: 10 * infer_us * 1000 },
                ..Default::default()
            },
        };
        let inner = ComposingStats {
            model: ComposingModel { name: "inner".into(), version: "1".into(), depth: 1, ensemble: true },
            stats: ServerStats::default(),
        };
        let composing = vec![inner, leaf("pre", 2, 300), leaf("sleep", 2, 1900), leaf("pre", 1, 300)];
        let row = ReportRow { avg_us: 4000.0, ..ReportRow::zeroed(LoadPoint::Concurrency(concurrency)) };
        PointResult { row, detail: PointDetail { composing, ..Default::default() } }
    }

    #[test]
    fn leaves_are_appended_per_point_and_read_back() {
        let rows = composing_rows(&point(1));
        // The nested ensemble is no row, and `pre` (used twice) is one.
        assert_eq!(rows.iter().map(|r| r.model.as_str()).collect::<Vec<_>>(), ["pre", "sleep"]);
        assert_eq!(rows[1].share_pct, 100.0 * (100.0 + 1900.0) / 4000.0);
        let dir = tempfile::tempdir().unwrap();
        let path = beside(&dir.path().join("pa.csv"));
        assert_eq!(path.file_name().unwrap(), "pa.composing.csv");
        append(&path, &rows).unwrap();
        append(&path, &composing_rows(&point(4))).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("Batch,Concurrency,Model,Inference Count,Execution Count,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Share of Latency\n"), "{text}");
        assert_eq!(text.matches("Batch").count(), 1, "one header: {text}");
        let back = read(&path).unwrap();
        assert_eq!(back.len(), 4);
        assert_eq!(back[0], rows[0]);
        assert_eq!(back[3].load, LoadPoint::Concurrency(4));
        assert!(composing_rows(&PointResult {
            row: ReportRow::zeroed(LoadPoint::Concurrency(1)),
            detail: PointDetail::default()
        })
        .is_empty());
    }
}
