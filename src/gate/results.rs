//! The gate's view of a results CSV (perf_analyzer's `-f` format or perfbench's `report.csv`),
//! read by the one reader in [`crate::results::csv`]. The gate is stricter than the report: the
//! columns it compares must be there and every value it compares a non-negative number.

use std::path::Path;

use super::GateError;
use crate::results::csv::{parse_table, Table, Unit, STAGE_NAMES};
use crate::results::{LoadPoint, ReportRow};

const BATCH: &str = "Batch";
const CONCURRENCY: &str = "Concurrency";
const REQUEST_RATE: &str = "Request Rate";
const THROUGHPUT: &str = "Inferences/Second";
const P99: &str = "p99 latency";
const AVG: &str = "avg latency";

/// Reads the results CSV at `path`. `default_batch` is the batch size of files without a
/// `Batch` column (perf_analyzer's CSV does not record it).
pub fn read_results(path: &Path, default_batch: u64) -> Result<Vec<ReportRow>, GateError> {
    let bytes = std::fs::read(path).map_err(|source| GateError::Read { path: path.to_path_buf(), source })?;
    parse_results(&bytes, default_batch).map_err(|problem| GateError::Results { path: path.to_path_buf(), problem })
}

/// Parses results CSV text; the error says what is wrong without naming the file.
pub fn parse_results(bytes: &[u8], default_batch: u64) -> Result<Vec<ReportRow>, String> {
    let text = String::from_utf8_lossy(bytes);
    // The origin is left empty: the caller names the file.
    let table = parse_table(&text, Unit::Us, "").map_err(|e| e.to_string().trim_start_matches(": ").to_string())?;
    check_columns(&table)?;
    let has_batch = table.has(BATCH);
    table
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut row = row.clone();
            if !has_batch {
                row.batch = default_batch;
            }
            checked(row, i + 2)
        })
        .collect()
}

/// Every column the gate needs is present, or an error listing the missing ones.
fn check_columns(table: &Table) -> Result<(), String> {
    let mut missing: Vec<&str> = Vec::new();
    match (table.has(CONCURRENCY), table.has(REQUEST_RATE)) {
        (true, true) => return Err(format!("has both `{CONCURRENCY}` and `{REQUEST_RATE}` columns")),
        (false, false) => missing.push("Concurrency` or `Request Rate"),
        _ => {}
    }
    missing.extend([THROUGHPUT, P99].into_iter().filter(|name| !table.has(name)));
    // The stages sum to the average latency (the network stage is what is left of it), so they
    // stand in for a missing avg column.
    if !table.has(AVG) && !STAGE_NAMES.iter().all(|name| table.has(name)) {
        missing.push(AVG);
    }
    if missing.is_empty() {
        return Ok(());
    }
    let found = if table.headers.is_empty() { "none".to_string() } else { table.headers.join(", ") };
    Err(format!("lacks column(s) `{}` (found: {found})", missing.join("`, `")))
}

/// The compared values are non-negative numbers; the others read as 0 when not measured.
fn checked(mut row: ReportRow, line: usize) -> Result<ReportRow, String> {
    let require = |name: &str, value: f64| {
        if value.is_nan() {
            Err(format!("line {line}: `{name}` is empty or not a number"))
        } else if !value.is_finite() || value < 0.0 {
            Err(format!("line {line}: `{name}` is {value}, expected a non-negative number"))
        } else {
            Ok(value)
        }
    };
    if let LoadPoint::RequestRate(rate) = row.load {
        require(REQUEST_RATE, rate)?;
    }
    require(THROUGHPUT, row.throughput)?;
    require(P99, row.p99_us)?;
    require(AVG, row.avg_us)?;
    let zero_if_unmeasured = |v: &mut f64| {
        if v.is_nan() {
            *v = 0.0
        }
    };
    for v in [
        &mut row.client_send_us,
        &mut row.network_us,
        &mut row.server_queue_us,
        &mut row.server_compute_input_us,
        &mut row.server_compute_infer_us,
        &mut row.server_compute_output_us,
        &mut row.client_recv_us,
        &mut row.p50_us,
        &mut row.p90_us,
        &mut row.p95_us,
        // A spread cell may be empty (a row measured in one window): no recorded noise.
        &mut row.throughput_spread_pct,
        &mut row.p99_spread_pct,
        &mut row.avg_spread_pct,
    ] {
        zero_if_unmeasured(v);
        if *v < 0.0 {
            return Err(format!("line {line}: a value is {v}, expected a non-negative number"));
        }
    }
    Ok(row)
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
        assert!(parse_results(text.as_bytes(), 1).unwrap_err().contains("no rows"));
    }
}
