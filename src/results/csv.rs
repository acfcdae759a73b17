//! The one reader and the writer of results tables: perfbench's `report.csv`, perf_analyzer's
//! `-f` CSV (with or without `--verbose-csv`) and the seed CSVs, all read into [`ReportRow`]s by
//! column name. The reader is lenient (a missing column reads as NaN, "not measured"); a caller
//! that needs a column asks the [`Table`] whether it was there.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde::{Deserialize, Serialize};

use super::row::{Interval, LoadPoint, ReportRow};

/// The columns of `report.csv`, in order (latencies in µs).
pub const REPORT_COLUMNS: [&str; 15] = [
    "Batch",
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
    "avg latency",
];

/// `N` names of [`REPORT_COLUMNS`] from position `start`: the lists below stay in step with it.
const fn report_columns<const N: usize>(start: usize) -> [&'static str; N] {
    let mut names = [""; N];
    let mut i = 0;
    while i < N {
        names[i] = REPORT_COLUMNS[start + i];
        i += 1;
    }
    names
}

/// The seven latency stages, in the table's order.
pub const STAGE_NAMES: [&str; 7] = report_columns(3);

/// Every latency column: the stages, then p50, p90, p95, p99 and avg.
pub const LATENCY_COLUMNS: [&str; 12] = report_columns(3);

/// perfbench's own columns after [`REPORT_COLUMNS`]; the gate reads them by these names. A CSV
/// without the later ones (an older report.csv) reads as "not measured": 0 requests (not judged
/// low-sample), not overloaded, unknown intervals.
pub const EXTRA_COLUMNS: [&str; 16] = [
    "Failed",
    "Stable",
    "Throughput Spread (%)",
    "p99 Spread (%)",
    "avg Spread (%)",
    "Requests",
    "Overloaded",
    "Low-Sample Percentiles",
    CI_COLUMNS[0],
    CI_COLUMNS[1],
    CI_COLUMNS[2],
    CI_COLUMNS[3],
    CI_COLUMNS[4],
    CI_COLUMNS[5],
    SEQUENCE_COLUMNS[0],
    SEQUENCE_COLUMNS[1],
];

/// The client's own figures ([`crate::results::ClientLoad`]), last in report.csv; a CSV without
/// them reads as "not measured" (never client-limited).
pub const CLIENT_COLUMNS: [&str; 6] =
    ["Achieved Load", "Send Lag p50 (us)", "Send Lag p99 (us)", "Client CPU (%)", "Client Cores", "Held Load"];

/// Failed requests by kind ([`crate::results::FailureCounts`]), last in report.csv; their sum is
/// `Failed`. A CSV without them reads as zero of each.
pub const FAILURE_COLUMNS: [&str; 4] = ["Failed Reset", "Failed Timeout", "Failed Refused", "Failed Other"];

/// Whether the connection to the server was lost during the row's point (a restart mid-sweep),
/// last in report.csv; a CSV without it reads as not interrupted.
pub const INTERRUPTED_COLUMN: &str = "Interrupted";

/// Sequence models: the sequences that ended in the row's windows and their average number of
/// requests (0 for other models, and in an older report.csv without them).
pub const SEQUENCE_COLUMNS: [&str; 2] = ["Sequences", "Avg Sequence Length"];

/// The 95% interval bounds of throughput, p50 and p99 (latencies in µs), in report.csv and in
/// perf_analyzer's CSV with `--verbose-csv`.
pub const CI_COLUMNS: [&str; 6] = [
    "Inferences/Second CI Low",
    "Inferences/Second CI High",
    "p50 latency CI Low",
    "p50 latency CI High",
    "p99 latency CI Low",
    "p99 latency CI High",
];

/// A row's intervals in [`CI_COLUMNS`] order.
pub fn ci_bounds(row: &ReportRow) -> [f64; 6] {
    let [t, p50, p99] = [row.throughput_ci, row.p50_ci, row.p99_ci];
    [t.low, t.high, p50.low, p50.high, p99.low, p99.high]
}

/// A generative sweep's token columns in its report.csv (µs; tokens/s), after the request
/// latency columns ([`crate::results::TokenFigures`]); the gate reads them by these names.
pub const TOKEN_COLUMNS: [&str; 8] = [
    "TTFT avg",
    "TTFT p50",
    "TTFT p99",
    "ITL avg",
    "ITL p50",
    "ITL p99",
    "Output Tokens/Second",
    "Output Tokens/Second/User p50",
];

/// A generative sweep's reasoning columns (µs; tokens), after [`TOKEN_COLUMNS`], only when a
/// level's model reasoned: the time to the first answer token, the ITL within each phase and
/// the reasoning tokens per request. Tables read them as unknown columns (kept out of rows).
pub const REASONING_COLUMNS: [&str; 6] =
    ["TTFOT avg", "TTFOT p50", "TTFOT p99", "Reasoning ITL p50", "Output ITL p50", "Reasoning Tokens avg"];

/// The second column of `report.csv` when the sweep was open loop.
pub const REQUEST_RATE_COLUMN: &str = "Request Rate";

/// Why a table could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{origin}: not a readable CSV table: {source}")]
    Csv { origin: String, source: PolarsError },
    #[error("{origin}: no {what} column (expected a report.csv, a perf_analyzer CSV or a seed CSV)")]
    MissingColumn { origin: String, what: &'static str },
    #[error("{origin}: line {line}, column {column:?}: {value:?} is not a number")]
    BadNumber { origin: String, line: usize, column: String, value: String },
    #[error("{origin}: the table has no rows")]
    Empty { origin: String },
    #[error("rows mix closed-loop (concurrency) and open-loop (request rate) load points")]
    MixedLoad,
}

/// The unit of a latency column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Microseconds: perf_analyzer, `report.csv`, seed 003.
    Us,
    /// Milliseconds: seeds 000, 001 (with `(ms)` in the header), 002 and 004 (without).
    Ms,
}

impl Unit {
    fn to_us(self, value: f64) -> f64 {
        match self {
            Unit::Us => value,
            Unit::Ms => value * 1000.0,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// The quantity a CSV column holds, whatever the file calls it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Batch,
    Concurrency,
    RequestRate,
    Throughput,
    Stage(usize),
    Percentile(usize),
    Avg,
    Failed,
    Stable,
    ThroughputSpread,
    P99Spread,
    AvgSpread,
    Requests,
    Overloaded,
    Interrupted,
    /// One of [`CI_COLUMNS`].
    Ci(usize),
    Sequences,
    AvgSequenceLength,
    /// One of [`CLIENT_COLUMNS`].
    Client(usize),
    /// One of [`FAILURE_COLUMNS`].
    FailedKind(usize),
    /// One of [`TOKEN_COLUMNS`].
    Token(usize),
}

/// Names the column, and the unit its header states if it states one.
fn classify(header: &str) -> Option<(Field, Option<Unit>)> {
    let trimmed = header.trim();
    let (name, unit) = if let Some(n) = trimmed.strip_suffix("(ms)") {
        (n.trim_end(), Some(Unit::Ms))
    } else if let Some(n) = trimmed.strip_suffix("(us)").or_else(|| trimmed.strip_suffix("(µs)")) {
        (n.trim_end(), Some(Unit::Us))
    } else {
        (trimmed, None)
    };
    let field = match name.to_ascii_lowercase().as_str() {
        "batch" | "client batch size" | "batch size" => Field::Batch,
        "concurrency" | "concurrent client requests" => Field::Concurrency,
        "request rate" => Field::RequestRate,
        "inferences/second" => Field::Throughput,
        "client send" => Field::Stage(0),
        "network+server send/recv" => Field::Stage(1),
        "server queue" => Field::Stage(2),
        "server compute input" => Field::Stage(3),
        "server compute infer" => Field::Stage(4),
        "server compute output" => Field::Stage(5),
        "client recv" => Field::Stage(6),
        "p50 latency" => Field::Percentile(0),
        "p90 latency" => Field::Percentile(1),
        "p95 latency" => Field::Percentile(2),
        "p99 latency" => Field::Percentile(3),
        "avg latency" => Field::Avg,
        "failed" => Field::Failed,
        "failed reset" => Field::FailedKind(0),
        "failed timeout" => Field::FailedKind(1),
        "failed refused" => Field::FailedKind(2),
        "failed other" => Field::FailedKind(3),
        "stable" => Field::Stable,
        "throughput spread (%)" => Field::ThroughputSpread,
        "p99 spread (%)" => Field::P99Spread,
        "avg spread (%)" => Field::AvgSpread,
        "requests" => Field::Requests,
        "overloaded" => Field::Overloaded,
        "interrupted" => Field::Interrupted,
        "sequences" => Field::Sequences,
        "avg sequence length" => Field::AvgSequenceLength,
        "achieved load" => Field::Client(0),
        "send lag p50" => Field::Client(1),
        "send lag p99" => Field::Client(2),
        "client cpu (%)" => Field::Client(3),
        "client cores" => Field::Client(4),
        "held load" => Field::Client(5),
        other => {
            let named = |columns: &[&str]| columns.iter().position(|c| c.eq_ignore_ascii_case(other));
            return named(&CI_COLUMNS)
                .map(Field::Ci)
                .or_else(|| named(&TOKEN_COLUMNS).map(Field::Token))
                .map(|field| (field, unit));
        }
    };
    Some((field, unit))
}

/// A parsed results CSV: its rows, and which quantities its header held (a caller that needs a
/// column, like the gate, checks here; the rows read a missing column as NaN).
#[derive(Clone, Debug)]
pub struct Table {
    pub rows: Vec<ReportRow>,
    /// The headers of the first block, as written.
    pub headers: Vec<String>,
    fields: Vec<Field>,
}

impl Table {
    /// The rows, if the table has what every report needs: a throughput and a load column.
    fn into_report_rows(self, origin: &str) -> Result<Vec<ReportRow>, TableError> {
        let missing = |what| TableError::MissingColumn { origin: origin.to_owned(), what };
        if !self.fields.contains(&Field::Throughput) {
            return Err(missing("Inferences/Second"));
        }
        // An offline summary (002/004) prints only the batch: one request at a time.
        if ![Field::Concurrency, Field::RequestRate, Field::Batch].iter().any(|f| self.fields.contains(f)) {
            return Err(missing("Concurrency, Request Rate or Batch"));
        }
        Ok(self.rows)
    }

    /// Whether the file has a column holding the quantity of the `report.csv` column `name`
    /// (recognised as the reader recognises columns: aliases, case, a stated unit).
    pub fn has(&self, name: &str) -> bool {
        classify(name).is_some_and(|(wanted, _)| self.fields.contains(&wanted))
    }
}

/// Reads a CSV file into rows. `default_unit` applies to latency headers that name no unit
/// (µs for perf_analyzer and `report.csv`; a seed's sidecar says which for its CSV).
pub fn read_csv(path: &Path, default_unit: Unit) -> Result<Vec<ReportRow>, TableError> {
    read_table(path, default_unit)?.into_report_rows(&path.display().to_string())
}

/// Reads a CSV file into a [`Table`].
pub fn read_table(path: &Path, default_unit: Unit) -> Result<Table, TableError> {
    let text = std::fs::read_to_string(path).map_err(|source| TableError::Read { path: path.to_owned(), source })?;
    parse_table(&text, default_unit, &path.display().to_string())
}

/// Parses CSV text into rows; see [`parse_table`].
pub fn parse_csv(text: &str, default_unit: Unit, origin: &str) -> Result<Vec<ReportRow>, TableError> {
    parse_table(text, default_unit, origin)?.into_report_rows(origin)
}

/// Parses CSV text into a [`Table`]; `origin` names the source in errors.
///
/// perf_analyzer may append further blocks after a blank line (server-side metrics); only the
/// first block is the table. Columns perfbench does not know are ignored. A missing `avg latency`
/// (perf_analyzer without `--verbose-csv`) is the sum of the seven stages, as perf_analyzer
/// derives the network stage from it. Other missing columns read as NaN ("not measured"), a
/// missing batch as 1 (perf_analyzer does not write it; 002/004 online sent batch 1).
pub fn parse_table(text: &str, default_unit: Unit, origin: &str) -> Result<Table, TableError> {
    let first_block: String = text
        .trim_start_matches('\u{feff}')
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    if first_block.is_empty() {
        return Err(TableError::Empty { origin: origin.to_owned() });
    }
    let csv_error = |source| TableError::Csv { origin: origin.to_owned(), source };
    // Every column as text: the values are parsed here, with errors that name row and column.
    let df = CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(Some(0))
        .into_reader_with_file_handle(Cursor::new(first_block.into_bytes()))
        .finish()
        .map_err(csv_error)?;
    if df.height() == 0 {
        return Err(TableError::Empty { origin: origin.to_owned() });
    }

    let mut rows: Vec<RowBuilder> = vec![RowBuilder::default(); df.height()];
    let mut seen = Vec::new();
    for column in df.columns() {
        let Some((field, unit)) = classify(column.name()) else {
            continue;
        };
        seen.push(field);
        let values = column.str().map_err(csv_error)?;
        for (i, value) in values.iter().enumerate() {
            let value = value.unwrap_or("").trim();
            rows[i].set(field, unit.unwrap_or(default_unit), value).map_err(|()| TableError::BadNumber {
                origin: origin.to_owned(),
                line: i + 2,
                column: column.name().to_string(),
                value: value.to_owned(),
            })?;
        }
    }
    let has_concurrency = seen.contains(&Field::Concurrency);
    let has_rate = seen.contains(&Field::RequestRate);
    let headers = df.columns().iter().map(|c| c.name().to_string()).collect();
    let rows = rows.into_iter().map(|r| r.finish(has_rate && !has_concurrency)).collect();
    Ok(Table { rows, headers, fields: seen })
}

/// One row while its columns arrive; NaN until a column sets it.
#[derive(Clone, Debug)]
struct RowBuilder {
    batch: Option<u64>,
    concurrency: f64,
    rate: f64,
    throughput: f64,
    stages_us: [f64; 7],
    percentiles_us: [f64; 4],
    avg_us: f64,
    failed: u64,
    stable: bool,
    spreads_pct: [f64; 3],
    requests: u64,
    overloaded: bool,
    interrupted: bool,
    ci: [f64; 6],
    sequences: u64,
    avg_sequence_length: f64,
    client: crate::results::ClientLoad,
    tokens: Option<[f64; 8]>,
}

impl Default for RowBuilder {
    fn default() -> Self {
        RowBuilder {
            batch: None,
            concurrency: f64::NAN,
            rate: f64::NAN,
            throughput: f64::NAN,
            stages_us: [f64::NAN; 7],
            percentiles_us: [f64::NAN; 4],
            avg_us: f64::NAN,
            failed: 0,
            stable: true,
            spreads_pct: [f64::NAN; 3],
            requests: 0,
            overloaded: false,
            interrupted: false,
            ci: [f64::NAN; 6],
            sequences: 0,
            avg_sequence_length: 0.0,
            client: Default::default(),
            tokens: None,
        }
    }
}

impl RowBuilder {
    fn set(&mut self, field: Field, unit: Unit, value: &str) -> Result<(), ()> {
        let number = || -> Result<f64, ()> {
            match value {
                "" | "-" => Ok(f64::NAN),
                v => v.parse::<f64>().map_err(|_| ()),
            }
        };
        match field {
            Field::Batch => {
                let b = number()?;
                if !(b >= 1.0 && b.fract() == 0.0) {
                    return Err(());
                }
                self.batch = Some(b as u64);
            }
            Field::Concurrency => self.concurrency = number()?,
            Field::RequestRate => self.rate = number()?,
            Field::Throughput => self.throughput = number()?,
            Field::Stage(i) => self.stages_us[i] = unit.to_us(number()?),
            Field::Percentile(i) => self.percentiles_us[i] = unit.to_us(number()?),
            Field::Avg => self.avg_us = unit.to_us(number()?),
            Field::Failed => {
                let f = number()?;
                self.failed = if f.is_nan() { 0 } else { f as u64 };
            }
            Field::FailedKind(i) => {
                let n = number()?;
                self.client.failures.set(i, if n.is_nan() { 0 } else { n as u64 });
            }
            Field::Stable => self.stable = flag(value, true)?,
            Field::Overloaded => self.overloaded = flag(value, false)?,
            Field::Interrupted => self.interrupted = flag(value, false)?,
            Field::Client(i) => {
                let v = number()?;
                let v = if v.is_nan() { 0.0 } else { v };
                match i {
                    0 => self.client.achieved = v,
                    1 => self.client.send_lag_p50_us = unit.to_us(v),
                    2 => self.client.send_lag_p99_us = unit.to_us(v),
                    3 => self.client.cpu_pct = v,
                    4 => self.client.cores = v as usize,
                    _ => self.client.held = v,
                }
            }
            Field::Requests => {
                let n = number()?;
                self.requests = if n.is_nan() { 0 } else { n as u64 };
            }
            // Throughput bounds (0, 1) are per second; latency bounds take the column's unit.
            Field::Ci(i) if i < 2 => self.ci[i] = number()?,
            Field::Ci(i) => self.ci[i] = unit.to_us(number()?),
            Field::ThroughputSpread => self.spreads_pct[0] = number()?,
            Field::P99Spread => self.spreads_pct[1] = number()?,
            Field::AvgSpread => self.spreads_pct[2] = number()?,
            Field::Sequences => {
                let n = number()?;
                self.sequences = if n.is_nan() { 0 } else { n as u64 };
            }
            Field::AvgSequenceLength => {
                let n = number()?;
                self.avg_sequence_length = if n.is_nan() { 0.0 } else { n };
            }
            // The rates (the last two) are per second; the latencies take the column's unit.
            Field::Token(i) => {
                let n = number()?;
                self.tokens.get_or_insert([f64::NAN; 8])[i] = if i < 6 { unit.to_us(n) } else { n };
            }
        }
        Ok(())
    }

    fn finish(self, open_loop: bool) -> ReportRow {
        let ci = |i: usize| Interval::new(self.ci[i], self.ci[i + 1]);
        let [client_send_us, network_us, server_queue_us, compute_input_us, compute_infer_us, compute_output_us, client_recv_us] =
            self.stages_us;
        let avg_us = if self.avg_us.is_nan() { self.stages_us.iter().sum() } else { self.avg_us };
        let load = if open_loop {
            LoadPoint::RequestRate(self.rate)
        } else {
            LoadPoint::Concurrency(if self.concurrency.is_nan() { 1 } else { self.concurrency as u64 })
        };
        ReportRow {
            batch: self.batch.unwrap_or(1),
            load,
            throughput: self.throughput,
            client_send_us,
            network_us,
            server_queue_us,
            server_compute_input_us: compute_input_us,
            server_compute_infer_us: compute_infer_us,
            server_compute_output_us: compute_output_us,
            client_recv_us,
            p50_us: self.percentiles_us[0],
            p90_us: self.percentiles_us[1],
            p95_us: self.percentiles_us[2],
            p99_us: self.percentiles_us[3],
            avg_us,
            requests: self.requests,
            failed: self.failed,
            late: 0,
            missed: 0,
            stable: self.stable,
            throughput_spread_pct: self.spreads_pct[0],
            p99_spread_pct: self.spreads_pct[1],
            avg_spread_pct: self.spreads_pct[2],
            server_avg_batch: 0.0,
            throughput_ci: ci(0),
            p50_ci: ci(2),
            p99_ci: ci(4),
            overloaded: self.overloaded,
            interrupted: self.interrupted,
            client: self.client,
            sequences: self.sequences,
            avg_sequence_length: self.avg_sequence_length,
            tokens: self.tokens.map(crate::results::TokenFigures::from_values),
        }
    }
}

/// A true/false cell; empty reads as `empty`.
fn flag(value: &str, empty: bool) -> Result<bool, ()> {
    match value.to_ascii_lowercase().as_str() {
        "" => Ok(empty),
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Writing report.csv

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn reads_perf_analyzer_csv_without_avg_and_sums_the_stages() {
        let csv = "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,\
Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,\
p95 latency,p99 latency\n1,1000.5,10,100,20,5,800,5,10,940,960,980,1000\n2,1800,11,120,300,5,800,5,10,1240,1300,1350,1400\n";
        let rows = parse_csv(csv, Unit::Us, "pa.csv").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].load, LoadPoint::Concurrency(1));
        assert_eq!(rows[0].batch, 1);
        assert_eq!(rows[0].throughput, 1000.5);
        assert_eq!(rows[0].avg_us, 950.0);
        assert_eq!(rows[1].p99_us, 1400.0);
        assert_eq!(rows[1].server_queue_us, 300.0);
    }

    #[test]
    fn reads_verbose_request_rate_csv_and_ignores_trailing_blocks() {
        let csv = "Request Rate,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,\
Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,\
p95 latency,p99 latency,Avg latency,request/response,response wait\n\
50,49.9,10,100,20,5,800,5,10,940,960,980,1000,951,50,900\n\
\nServer-side metrics\nGPU,Util\nx,y\n";
        let rows = parse_csv(csv, Unit::Us, "pa.csv").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].load, LoadPoint::RequestRate(50.0));
        assert_eq!(rows[0].avg_us, 951.0);
    }

    /// Written by NVIDIA perf_analyzer 2.50 (`-f`, then `--verbose-csv`) against a real Triton.
    const REAL_PA_CSV: &str = "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,\
Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,\
p90 latency,p95 latency,p99 latency
2,193.471,162,1140,3345,49,5404,229,0,10156,13746,15289,18039
1,200.304,52,482,400,26,3917,99,0,4576,6327,7428,15745
";
    const REAL_PA_VERBOSE_CSV: &str = "Request Rate,Inferences/Second,Client Send,\
Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,\
Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,\
request/response,response wait
50,49.9251,134,951,673,59,6963,159,0,8070,12290,13891,17256,8941,134,8778
";

    #[test]
    fn reads_real_perf_analyzer_output() {
        let rows = parse_csv(REAL_PA_CSV, Unit::Us, "pa.csv").unwrap();
        assert_eq!(rows[0].load, LoadPoint::Concurrency(2));
        assert_eq!(rows[1].throughput, 200.304);
        assert_eq!(rows[1].avg_us, 52.0 + 482.0 + 400.0 + 26.0 + 3917.0 + 99.0);
        let rows = parse_csv(REAL_PA_VERBOSE_CSV, Unit::Us, "pa.csv").unwrap();
        assert_eq!(rows[0].load, LoadPoint::RequestRate(50.0));
        assert_eq!(rows[0].avg_us, 8941.0);
        assert_eq!(rows[0].p99_us, 17256.0);
    }

    #[test]
    fn request_rate_rows_write_a_request_rate_column() {
        let rows = parse_csv(REAL_PA_VERBOSE_CSV, Unit::Us, "pa.csv").unwrap();
        let text = report_csv(&rows).unwrap();
        assert!(text.starts_with("Batch,Request Rate,Inferences/Second,"), "{text}");
        let back = parse_csv(&text, Unit::Us, "report.csv").unwrap();
        assert_eq!(back[0].load, LoadPoint::RequestRate(50.0));
        let mut mixed = rows.clone();
        mixed.push(sample_row(1, 1));
        assert!(matches!(report_csv(&mixed), Err(TableError::MixedLoad)));
    }

    #[test]
    fn reads_millisecond_headers_as_milliseconds() {
        let csv = "Batch,Concurrency,Inferences/Second,Client Send (ms),avg latency (ms)\n8,1,2053.9,0.5,3.9\n";
        let rows = parse_csv(csv, Unit::Us, "seed.csv").unwrap();
        assert_eq!(rows[0].batch, 8);
        assert_eq!(rows[0].client_send_us, 500.0);
        assert_eq!(rows[0].avg_us, 3900.0);
        assert!(rows[0].p50_us.is_nan());
    }

    #[test]
    fn bad_csvs_give_one_line_errors() {
        let err = parse_csv("Batch,Concurrency\n1,1\n", Unit::Us, "x.csv").unwrap_err().to_string();
        assert!(err.contains("no Inferences/Second column"), "{err}");
        let err = parse_csv("Concurrency,Inferences/Second\n1,fast\n", Unit::Us, "x.csv").unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("\"fast\""), "{err}");
        assert!(parse_csv("", Unit::Us, "x.csv").is_err());
        assert!(!err.contains('\n'));
    }

    pub(crate) fn sample_row(batch: u64, concurrency: u64) -> ReportRow {
        ReportRow {
            batch,
            load: LoadPoint::Concurrency(concurrency),
            throughput: 2053.9,
            client_send_us: 12.4,
            network_us: 150.0,
            server_queue_us: 20.0,
            server_compute_input_us: 60.0,
            server_compute_infer_us: 3600.0,
            server_compute_output_us: 7.0,
            client_recv_us: 4.0,
            p50_us: 3850.0,
            p90_us: 3900.0,
            p95_us: 3950.0,
            p99_us: 4100.0,
            avg_us: 3853.5,
            requests: 100,
            failed: 2,
            late: 0,
            missed: 0,
            sequences: 0,
            avg_sequence_length: 0.0,
            stable: false,
            throughput_spread_pct: 3.25,
            p99_spread_pct: 4.5,
            avg_spread_pct: 1.0,
            server_avg_batch: 8.0,
            throughput_ci: Interval::new(2000.0, 2100.5),
            p50_ci: Interval::new(3800.0, 3900.0),
            p99_ci: Interval::new(4000.0, f64::INFINITY),
            overloaded: true,
            interrupted: false,
            client: Default::default(),
            tokens: None,
        }
    }

    #[test]
    fn a_generative_report_csv_reads_its_token_columns_and_leaves_the_stages_unmeasured() {
        let text = "Concurrency,Inferences/Second,p99 latency,avg latency,TTFT p99,ITL p50 (ms),Output Tokens/Second\n\
            8,20.5,50000,45000,9000,7.5,450.25\n";
        let rows = parse_csv(text, Unit::Us, "report.csv").unwrap();
        let t = rows[0].tokens.expect("token columns read");
        assert_eq!((t.ttft_p99_us, t.itl_p50_us, t.output_tokens_per_s), (9000.0, 7500.0, 450.25));
        assert!(t.ttft_avg_us.is_nan(), "a token column the file lacks is not measured");
        assert!(rows[0].server_compute_infer_us.is_nan());
        let tensor = parse_csv("Concurrency,Inferences/Second,p99 latency\n1,5,9\n", Unit::Us, "x").unwrap();
        assert_eq!(tensor[0].tokens, None);
    }

    #[test]
    fn report_csv_round_trips() {
        let rows = vec![sample_row(1, 1), ReportRow { interrupted: true, ..sample_row(8, 1) }];
        let text = report_csv(&rows).unwrap();
        let header = text.lines().next().unwrap();
        let expected: Vec<&str> = REPORT_COLUMNS
            .iter()
            .chain(&EXTRA_COLUMNS)
            .chain(&CLIENT_COLUMNS)
            .chain(&FAILURE_COLUMNS)
            .chain(&[INTERRUPTED_COLUMN])
            .copied()
            .collect();
        assert_eq!(header, expected.join(","));
        let back = parse_csv(&text, Unit::Us, "report.csv").unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].batch, 8);
        assert_eq!(back[1].client_send_us, 12.4);
        assert_eq!(back[1].avg_us, 3853.5);
        assert_eq!(back[1].failed, 2);
        assert!(!back[1].stable);
        assert_eq!(back[1].throughput_spread_pct, 3.25);
        assert_eq!(back[1].requests, 100);
        assert!(back[1].overloaded);
        assert!(back[1].interrupted && !back[0].interrupted);
        assert_eq!(back[1].throughput_ci, Interval::new(2000.0, 2100.5));
        assert_eq!(back[1].p99_ci, Interval::new(4000.0, f64::INFINITY), "an open bound survives");
        assert!(text.lines().nth(1).unwrap().contains(",p95;p99,"), "{text}");
        // A sequence model's row keeps its sequence count and average length.
        let seq = ReportRow { sequences: 40, avg_sequence_length: 5.25, ..sample_row(1, 4) };
        let back = parse_csv(&report_csv(&[seq]).unwrap(), Unit::Us, "report.csv").unwrap();
        assert_eq!((back[0].sequences, back[0].avg_sequence_length), (40, 5.25));
        // A shard's row keeps the client's figures and the part of the load it held.
        let client = crate::results::ClientLoad {
            achieved: 3.5,
            send_lag_p50_us: 0.0,
            send_lag_p99_us: 0.0,
            cpu_pct: 41.5,
            cores: 2,
            held: 4.0,
            failures: crate::results::FailureCounts { reset: 3, timeout: 2, refused: 1, other: 0 },
        };
        let shard = ReportRow { client, ..sample_row(1, 8) };
        let back = parse_csv(&report_csv(&[shard]).unwrap(), Unit::Us, "report.csv").unwrap();
        assert_eq!(back[0].client, client, "failure kinds too");
    }

    #[test]
    fn an_older_report_csv_reads_with_unknown_intervals() {
        let old = "Batch,Concurrency,Inferences/Second,p99 latency,avg latency,Failed,Stable\n1,4,100,900,800,0,true\n";
        let rows = parse_csv(old, Unit::Us, "old.csv").unwrap();
        assert_eq!(rows[0].requests, 0);
        assert!(!rows[0].overloaded);
        assert!(!rows[0].throughput_ci.is_known() && !rows[0].p99_ci.is_known());
        assert!(rows[0].low_sample_names().is_empty());
        assert_eq!((rows[0].sequences, rows[0].avg_sequence_length), (0, 0.0), "no sequence columns: none");
    }
}
