//! Reading results tables: each column recognised by name (aliases, case, a stated unit) and
//! parsed into [`ReportRow`]s, with errors that name the line and the column.

use std::io::Cursor;
use std::path::Path;

use polars::prelude::*;

use super::{TableError, Unit, CI_COLUMNS, TOKEN_COLUMNS};
use crate::results::row::{Interval, LoadPoint, ReportRow};

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
    /// [`MODEL_COLUMN`](super::MODEL_COLUMN): a row of one model's part is left out.
    Model,
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
        "model" => Field::Model,
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
    let rows = rows.into_iter().filter(|r| !r.model_part).map(|r| r.finish(has_rate && !has_concurrency)).collect();
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
    /// One model's part of a level (a mix's breakdown), not a level of its own.
    model_part: bool,
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
            model_part: false,
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
            Field::Model => self.model_part = !(value.is_empty() || value.eq_ignore_ascii_case(super::MODEL_TOTAL)),
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
