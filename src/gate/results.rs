//! Reads a results CSV into [`ReportRow`]s: perf_analyzer's `-f` format or perfbench's
//! `report.csv`. Columns are recognised as `report::table` recognises them (by name, case and
//! surrounding spaces ignored), so their order and any extra columns do not matter. Values are
//! microseconds and inferences/second; a column named with a unit, like the seeds'
//! `p99 latency (ms)`, is converted to microseconds. Unlike the report's reader, the gate is
//! strict: the columns it compares must be there and every value a non-negative number.

use std::io::Cursor;
use std::path::Path;

use polars::prelude::{Column, CsvReadOptions, DataFrame, DataType, SerReader};

use super::GateError;
use crate::report::table::{column_scale_to_us, STAGE_NAMES};
use crate::report::{LoadPoint, ReportRow};

const BATCH: &str = "Batch";
const CONCURRENCY: &str = "Concurrency";
const REQUEST_RATE: &str = "Request Rate";
const THROUGHPUT: &str = "Inferences/Second";
const P50: &str = "p50 latency";
const P90: &str = "p90 latency";
const P95: &str = "p95 latency";
const P99: &str = "p99 latency";
const AVG: &str = "avg latency";
const FAILED: &str = "Failed";
const STABLE: &str = "Stable";
const THROUGHPUT_SPREAD: &str = "Throughput Spread (%)";
const P99_SPREAD: &str = "p99 Spread (%)";
const AVG_SPREAD: &str = "avg Spread (%)";

/// Reads the results CSV at `path`. `default_batch` is the batch size of files without a
/// `Batch` column (perf_analyzer's CSV does not record it).
pub fn read_results(path: &Path, default_batch: u64) -> Result<Vec<ReportRow>, GateError> {
    let bytes = std::fs::read(path).map_err(|source| GateError::Read { path: path.to_path_buf(), source })?;
    parse_results(&bytes, default_batch).map_err(|problem| GateError::Results { path: path.to_path_buf(), problem })
}

/// Parses results CSV text; the error says what is wrong without naming the file.
pub fn parse_results(bytes: &[u8], default_batch: u64) -> Result<Vec<ReportRow>, String> {
    let frame = CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(None)
        .into_reader_with_file_handle(Cursor::new(bytes))
        .finish()
        .map_err(|e| format!("not a readable CSV ({e})"))?;
    let table = Table { frame: &frame };
    table.check_columns()?;
    if frame.height() == 0 {
        return Err("has a header but no data rows".into());
    }
    (0..frame.height()).map(|row| table.row(row, default_batch)).collect()
}

/// A parsed CSV with lookups by column name.
struct Table<'a> {
    frame: &'a DataFrame,
}

impl Table<'_> {
    fn find(&self, name: &str) -> Option<&Column> {
        self.find_scaled(name).map(|(column, _)| column)
    }

    /// The column holding the `report.csv` column `name`, with the factor that turns its values
    /// into microseconds.
    fn find_scaled(&self, name: &str) -> Option<(&Column, f64)> {
        self.frame
            .columns()
            .iter()
            .find_map(|column| column_scale_to_us(column.name(), name).map(|scale| (column, scale)))
    }

    /// Every column the gate needs is present, or an error listing the missing ones.
    fn check_columns(&self) -> Result<(), String> {
        let mut missing: Vec<&str> = Vec::new();
        match (self.find(CONCURRENCY).is_some(), self.find(REQUEST_RATE).is_some()) {
            (true, true) => return Err(format!("has both `{CONCURRENCY}` and `{REQUEST_RATE}` columns")),
            (false, false) => missing.push("Concurrency` or `Request Rate"),
            _ => {}
        }
        missing.extend([THROUGHPUT, P99].into_iter().filter(|name| self.find(name).is_none()));
        if self.find(AVG).is_none() {
            // The stages sum to the average latency (the network stage is defined as what is left
            // of it), so they stand in for a missing avg column.
            let absent: Vec<&str> = STAGE_NAMES.into_iter().filter(|name| self.find(name).is_none()).collect();
            if !absent.is_empty() {
                missing.push(AVG);
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let found: Vec<&str> = self.frame.columns().iter().map(|c| c.name().as_str()).collect();
        Err(format!(
            "lacks column(s) `{}` (found: {})",
            missing.join("`, `"),
            if found.is_empty() { "none".to_string() } else { found.join(", ") }
        ))
    }

    /// The number in `name` at `row`; an error names the line and the column.
    fn number(&self, name: &str, row: usize) -> Result<Option<f64>, String> {
        let Some((column, scale)) = self.find_scaled(name) else {
            return Ok(None);
        };
        let bad = |why: &str| format!("line {}: `{}` {why}", row + 2, column.name());
        let value = column
            .cast(&DataType::Float64)
            .ok()
            .and_then(|c| c.f64().ok().and_then(|values| values.get(row)))
            .ok_or_else(|| bad("is empty or not a number"))?;
        if !value.is_finite() || value < 0.0 {
            return Err(bad(&format!("is {value}, expected a non-negative number")));
        }
        Ok(Some(value * scale))
    }

    fn required(&self, name: &str, row: usize) -> Result<f64, String> {
        self.number(name, row)?.ok_or_else(|| format!("lacks column `{name}`"))
    }

    /// Counts (batch, concurrency, failures) are whole numbers.
    fn count(&self, name: &str, row: usize) -> Result<Option<u64>, String> {
        match self.number(name, row)? {
            Some(v) if v.fract() != 0.0 => Err(format!("line {}: `{name}` is {v}, expected a whole number", row + 2)),
            other => Ok(other.map(|v| v as u64)),
        }
    }

    /// A spread cell may be empty (a row measured in one window): no recorded noise.
    fn spread(&self, name: &str, row: usize) -> Result<f64, String> {
        let Some(column) = self.find(name) else {
            return Ok(0.0);
        };
        if column.get(row).map(|v| v.is_null()).unwrap_or(true) {
            return Ok(0.0);
        }
        Ok(self.number(name, row)?.unwrap_or(0.0))
    }

    fn stable(&self, row: usize) -> Result<bool, String> {
        let Some(column) = self.find(STABLE) else {
            return Ok(true);
        };
        let text = column
            .cast(&DataType::String)
            .ok()
            .and_then(|c| c.str().ok().and_then(|values| values.get(row).map(str::to_ascii_lowercase)));
        match text.as_deref().map(str::trim) {
            Some("true" | "yes" | "1") => Ok(true),
            Some("false" | "no" | "0") => Ok(false),
            _ => Err(format!("line {}: `{STABLE}` is not true/false", row + 2)),
        }
    }

    fn row(&self, row: usize, default_batch: u64) -> Result<ReportRow, String> {
        let batch = self.count(BATCH, row)?.unwrap_or(default_batch);
        let load = match self.count(CONCURRENCY, row)? {
            Some(concurrency) => LoadPoint::Concurrency(concurrency),
            None => LoadPoint::RequestRate(self.required(REQUEST_RATE, row)?),
        };
        let mut components = [0.0; STAGE_NAMES.len()];
        for (slot, name) in components.iter_mut().zip(STAGE_NAMES) {
            *slot = self.number(name, row)?.unwrap_or(0.0);
        }
        let avg_us = match self.number(AVG, row)? {
            Some(avg) => avg,
            None => components.iter().sum(),
        };
        let [client_send_us, network_us, server_queue_us, server_compute_input_us, server_compute_infer_us, server_compute_output_us, client_recv_us] =
            components;
        Ok(ReportRow {
            batch,
            load,
            throughput: self.required(THROUGHPUT, row)?,
            client_send_us,
            network_us,
            server_queue_us,
            server_compute_input_us,
            server_compute_infer_us,
            server_compute_output_us,
            client_recv_us,
            p50_us: self.number(P50, row)?.unwrap_or(0.0),
            p90_us: self.number(P90, row)?.unwrap_or(0.0),
            p95_us: self.number(P95, row)?.unwrap_or(0.0),
            p99_us: self.required(P99, row)?,
            avg_us,
            requests: 0,
            failed: self.count(FAILED, row)?.unwrap_or(0),
            late: 0,
            missed: 0,
            stable: self.stable(row)?,
            throughput_spread_pct: self.spread(THROUGHPUT_SPREAD, row)?,
            p99_spread_pct: self.spread(P99_SPREAD, row)?,
            avg_spread_pct: self.spread(AVG_SPREAD, row)?,
            server_avg_batch: 0.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PA_CSV: &str = "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n\
        1,1200.5,10,300,20,5,400,5,10,700,800,850,900\n\
        2,2000,12,310,40,5,410,5,11,900,1000,1100,1300\n";

    #[test]
    fn perf_analyzer_csv_derives_avg_from_the_breakdown() {
        let rows = parse_results(PA_CSV.as_bytes(), 1).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].load, LoadPoint::Concurrency(1));
        assert_eq!(rows[0].batch, 1);
        assert_eq!(rows[0].throughput, 1200.5);
        assert_eq!(rows[0].avg_us, 750.0);
        assert_eq!(rows[1].p99_us, 1300.0);
        assert_eq!(rows[1].throughput_spread_pct, 0.0);
    }

    #[test]
    fn report_csv_read_by_name_in_any_order() {
        let text = "p99 Spread (%),avg latency,Stable,p99 latency,Inferences/Second,Request Rate,Batch,Extra\n\
            7.5,800,false,1000,99.5,100,4,x\n";
        let rows = parse_results(text.as_bytes(), 1).unwrap();
        assert_eq!(rows[0].batch, 4);
        assert_eq!(rows[0].load, LoadPoint::RequestRate(100.0));
        assert_eq!(rows[0].avg_us, 800.0);
        assert_eq!(rows[0].p99_spread_pct, 7.5);
        assert!(!rows[0].stable);
    }

    #[test]
    fn millisecond_columns_become_microseconds() {
        let text = "Batch,Concurrency,Inferences/Second,p99 latency (ms),avg latency (ms),Throughput Spread (%)\n\
            8,1,2053.9,3.9,3.5,4\n";
        let rows = parse_results(text.as_bytes(), 1).unwrap();
        assert_eq!((rows[0].p99_us, rows[0].avg_us), (3900.0, 3500.0));
        assert_eq!(rows[0].throughput_spread_pct, 4.0);
    }

    #[test]
    fn wrong_columns_are_named() {
        let err = parse_results(b"a,b,c\n1,2,3\n", 1).unwrap_err();
        assert!(err.contains("Concurrency` or `Request Rate"), "{err}");
        assert!(err.contains("Inferences/Second"), "{err}");
        assert!(err.contains("found: a, b, c"), "{err}");
    }

    #[test]
    fn non_numeric_cell_names_line_and_column() {
        let text = "Concurrency,Inferences/Second,p99 latency,avg latency\n1,fast,10,5\n";
        let err = parse_results(text.as_bytes(), 1).unwrap_err();
        assert!(err.contains("line 2") && err.contains("Inferences/Second"), "{err}");
    }

    #[test]
    fn header_without_rows_is_an_error() {
        let text = "Concurrency,Inferences/Second,p99 latency,avg latency\n";
        assert!(parse_results(text.as_bytes(), 1).unwrap_err().contains("no data rows"));
    }
}
