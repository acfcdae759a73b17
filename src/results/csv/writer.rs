//! Writing `report.csv`: [`REPORT_COLUMNS`](super::REPORT_COLUMNS) then
//! [`EXTRA_COLUMNS`](super::EXTRA_COLUMNS), written atomically.

use std::path::Path;

use polars::prelude::*;

use super::{
    ci_bounds, TableError, CI_COLUMNS, CLIENT_COLUMNS, FAILURE_COLUMNS, INTERRUPTED_COLUMN, LATENCY_COLUMNS,
    REQUEST_RATE_COLUMN, SEQUENCE_COLUMNS, TOKEN_COLUMNS,
};
use crate::results::row::{LoadPoint, ReportRow};

/// The seven latency stages of a row, in the table's order (µs).
pub fn stages_us(row: &ReportRow) -> [f64; 7] {
    [
        row.client_send_us,
        row.network_us,
        row.server_queue_us,
        row.server_compute_input_us,
        row.server_compute_infer_us,
        row.server_compute_output_us,
        row.client_recv_us,
    ]
}

/// A row's values under [`LATENCY_COLUMNS`] (µs).
pub fn latencies_us(row: &ReportRow) -> [f64; 12] {
    let [s0, s1, s2, s3, s4, s5, s6] = stages_us(row);
    [s0, s1, s2, s3, s4, s5, s6, row.p50_us, row.p90_us, row.p95_us, row.p99_us, row.avg_us]
}

/// Rounds to nanoseconds in µs (three decimals) so the CSV stays readable and loses nothing
/// the clocks could tell apart.
fn ns_precision(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Builds the `report.csv` frame: [`REPORT_COLUMNS`] then [`EXTRA_COLUMNS`].
pub fn report_frame(rows: &[ReportRow]) -> Result<DataFrame, TableError> {
    let open_loop = matches!(rows.first().map(|r| r.load), Some(LoadPoint::RequestRate(_)));
    if rows.iter().any(|r| matches!(r.load, LoadPoint::RequestRate(_)) != open_loop) {
        return Err(TableError::MixedLoad);
    }
    let f64_column = |name: &str, f: &dyn Fn(&ReportRow) -> f64| {
        Column::new(name.into(), rows.iter().map(|r| ns_precision(f(r))).collect::<Vec<f64>>())
    };
    let mut columns = vec![Column::new("Batch".into(), rows.iter().map(|r| r.batch).collect::<Vec<u64>>())];
    columns.push(if open_loop {
        f64_column(REQUEST_RATE_COLUMN, &|r| r.load.amount())
    } else {
        Column::new(
            "Concurrency".into(),
            rows.iter()
                .map(|r| match r.load {
                    LoadPoint::Concurrency(c) => c,
                    LoadPoint::RequestRate(rate) => rate as u64,
                })
                .collect::<Vec<u64>>(),
        )
    });
    columns.push(f64_column("Inferences/Second", &|r| r.throughput));
    for (i, name) in LATENCY_COLUMNS.iter().enumerate() {
        columns.push(f64_column(name, &|r| latencies_us(r)[i]));
    }
    columns.push(Column::new("Failed".into(), rows.iter().map(|r| r.failed).collect::<Vec<u64>>()));
    columns.push(Column::new("Stable".into(), rows.iter().map(|r| r.stable).collect::<Vec<bool>>()));
    columns.push(f64_column("Throughput Spread (%)", &|r| r.throughput_spread_pct));
    columns.push(f64_column("p99 Spread (%)", &|r| r.p99_spread_pct));
    columns.push(f64_column("avg Spread (%)", &|r| r.avg_spread_pct));
    columns.push(Column::new("Requests".into(), rows.iter().map(|r| r.requests).collect::<Vec<u64>>()));
    columns.push(Column::new("Overloaded".into(), rows.iter().map(|r| r.overloaded).collect::<Vec<bool>>()));
    columns.push(Column::new(
        "Low-Sample Percentiles".into(),
        rows.iter().map(|r| r.low_sample_names().join(";")).collect::<Vec<String>>(),
    ));
    for (i, name) in CI_COLUMNS.iter().enumerate() {
        columns.push(f64_column(name, &|r| ci_bounds(r)[i]));
    }
    columns.push(Column::new(SEQUENCE_COLUMNS[0].into(), rows.iter().map(|r| r.sequences).collect::<Vec<u64>>()));
    columns.push(f64_column(SEQUENCE_COLUMNS[1], &|r| r.avg_sequence_length));
    columns.push(f64_column(CLIENT_COLUMNS[0], &|r| r.client.achieved));
    columns.push(f64_column(CLIENT_COLUMNS[1], &|r| r.client.send_lag_p50_us));
    columns.push(f64_column(CLIENT_COLUMNS[2], &|r| r.client.send_lag_p99_us));
    columns.push(f64_column(CLIENT_COLUMNS[3], &|r| r.client.cpu_pct));
    columns
        .push(Column::new(CLIENT_COLUMNS[4].into(), rows.iter().map(|r| r.client.cores as u64).collect::<Vec<u64>>()));
    columns.push(f64_column(CLIENT_COLUMNS[5], &|r| r.client.held));
    for (i, name) in FAILURE_COLUMNS.iter().enumerate() {
        let counts = rows.iter().map(|r| r.client.failures.as_array()[i]).collect::<Vec<u64>>();
        columns.push(Column::new((*name).into(), counts));
    }
    columns.push(Column::new(INTERRUPTED_COLUMN.into(), rows.iter().map(|r| r.interrupted).collect::<Vec<bool>>()));
    // A generative level's token figures, where any row has them (a generative search's rows).
    if rows.iter().any(|r| r.tokens.is_some()) {
        for (i, name) in TOKEN_COLUMNS.iter().enumerate() {
            columns.push(f64_column(name, &|r| r.tokens.map_or(f64::NAN, |t| t.values()[i])));
        }
    }
    DataFrame::new(rows.len(), columns).map_err(|source| TableError::Csv { origin: "report.csv".into(), source })
}

/// `report.csv` as text.
pub fn report_csv(rows: &[ReportRow]) -> Result<String, TableError> {
    let mut df = report_frame(rows)?;
    let mut out = Vec::new();
    CsvWriter::new(&mut out)
        .include_header(true)
        .finish(&mut df)
        .map_err(|source| TableError::Csv { origin: "report.csv".into(), source })?;
    Ok(String::from_utf8(out).expect("polars writes UTF-8"))
}

/// Writes `report.csv` to `path`.
/// Writes `report.csv` to `path` atomically (a temporary file renamed over it), so a process
/// killed while writing leaves the previous complete file.
pub fn write_report_csv(path: &Path, rows: &[ReportRow]) -> Result<(), TableError> {
    let text = report_csv(rows)?;
    let write = |path: &Path| std::fs::write(path, &text);
    let partial = path.with_extension("csv.partial");
    write(&partial)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|source| TableError::Write { path: path.to_owned(), source })
}
