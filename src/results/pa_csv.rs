//! perf_analyzer's `-f` CSV, byte for byte: the same header lines (default, `--verbose-csv`,
//! `--collect-metrics`), latencies as whole microseconds (truncated, as perf_analyzer's integer
//! division does) and Inferences/Second in C++ stream notation (6 significant digits).
//! Rows are written and flushed one at a time, so a run that dies keeps every measured row.
//! `--verbose-csv` adds perfbench's 95% intervals after all of perf_analyzer's columns (its own
//! columns stay a byte-identical prefix): throughput as a double, latencies in whole µs, an
//! unmeasured bound empty and an unbounded one `inf`.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::csv::{ci_bounds, CI_COLUMNS};
use super::format::format_g;
use super::{LoadPoint, PointResult};

/// The columns after the first one, as perf_analyzer 2.50 writes them.
const BASE_COLUMNS: &str = "Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency";
const VERBOSE_COLUMNS: &str = ",Avg latency,request/response,response wait";
/// `--verbose-csv` only, last: what the client achieved, and whether it limited the row.
const CLIENT_COLUMNS: &str = ",Achieved Load,Send Lag p50,Send Lag p99,Client CPU (%),Client Limited";
const METRICS_COLUMNS: &str = ",Avg GPU Utilization,Avg GPU Power Usage,Max GPU Memory Usage,Total GPU Memory";

/// Which optional column groups a CSV carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CsvColumns {
    pub verbose: bool,
    pub gpu_metrics: bool,
}

/// Whole microseconds, truncated toward zero like perf_analyzer's `ns / 1000`.
fn us(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value as u64
    } else {
        0
    }
}

/// The header line (without newline). A sweep over rates names its first column "Request Rate".
pub fn header(first: LoadPoint, columns: CsvColumns) -> String {
    let mut line = String::from(match first {
        LoadPoint::Concurrency(_) => "Concurrency,",
        LoadPoint::RequestRate(_) => "Request Rate,",
    });
    line.push_str(BASE_COLUMNS);
    if columns.verbose {
        line.push_str(VERBOSE_COLUMNS);
    }
    if columns.gpu_metrics {
        line.push_str(METRICS_COLUMNS);
    }
    if columns.verbose {
        for name in CI_COLUMNS {
            line.push(',');
            line.push_str(name);
        }
        line.push_str(CLIENT_COLUMNS);
    }
    line
}

/// One interval bound: throughput as a double, latency in whole µs.
fn bound(value: f64, latency: bool) -> String {
    if value.is_nan() {
        String::new()
    } else if value.is_infinite() {
        "inf".into()
    } else if latency {
        us(value).to_string()
    } else {
        format_g(value)
    }
}

fn per_gpu<T: std::fmt::Display>(values: &[(String, T)]) -> String {
    values.iter().map(|(uuid, v)| format!("{uuid}:{v};")).collect()
}

/// One data line (without newline).
pub fn row_line(result: &PointResult, columns: CsvColumns) -> String {
    let r = &result.row;
    let first = match r.load {
        LoadPoint::Concurrency(n) => n.to_string(),
        LoadPoint::RequestRate(rate) => format_g(rate),
    };
    let mut line = format!(
        "{first},{},{},{},{},{},{},{},{},{},{},{},{}",
        format_g(r.throughput),
        us(r.client_send_us),
        us(r.network_us),
        us(r.server_queue_us),
        us(r.server_compute_input_us),
        us(r.server_compute_infer_us),
        us(r.server_compute_output_us),
        us(r.client_recv_us),
        us(r.p50_us),
        us(r.p90_us),
        us(r.p95_us),
        us(r.p99_us),
    );
    if columns.verbose {
        let exchange = result.detail.exchange_us;
        let request_response = r.client_send_us + r.client_recv_us;
        line.push_str(&format!(",{},{},{}", us(r.avg_us), us(request_response), us(exchange - request_response)));
    }
    if columns.gpu_metrics {
        let g = result.detail.gpu.clone().unwrap_or_default();
        line.push_str(&format!(
            ",{},{},{},{}",
            per_gpu(&g.utilization),
            per_gpu(&g.power_w),
            per_gpu(&g.max_memory_bytes),
            per_gpu(&g.total_memory_bytes)
        ));
    }
    if columns.verbose {
        for (i, value) in ci_bounds(r).into_iter().enumerate() {
            line.push(',');
            line.push_str(&bound(value, i >= 2));
        }
        let c = &r.client;
        line.push_str(&format!(
            ",{},{},{},{:.1},{}",
            format_g((c.achieved * 100.0).round() / 100.0),
            us(c.send_lag_p50_us),
            us(c.send_lag_p99_us),
            c.cpu_pct,
            if r.client_limited() { 1 } else { 0 }
        ));
    }
    line
}

/// The `-f` file: header on creation, then one flushed line per measured row.
pub struct PaCsvWriter {
    out: BufWriter<File>,
    columns: CsvColumns,
}

impl PaCsvWriter {
    pub fn create(path: &Path, first: LoadPoint, columns: CsvColumns) -> io::Result<PaCsvWriter> {
        // perf_analyzer runs on when -f names a missing folder (it writes nothing there); the
        // folder is made instead, so the run keeps its verdict and the CSV is written.
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot create '{}': {e}", parent.display())))?;
        }
        let file = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot create '{}': {e}", path.display())))?;
        let mut writer = PaCsvWriter { out: BufWriter::new(file), columns };
        writeln!(writer.out, "{}", header(first, columns))?;
        writer.out.flush()?;
        Ok(writer)
    }

    /// Reopens a file this writer left, to append after its header and first `rows` rows. A
    /// line past them (the row being written when a kill came, perhaps cut short) is dropped;
    /// nothing before it is rewritten.
    pub fn resume(path: &Path, rows: usize, columns: CsvColumns) -> io::Result<PaCsvWriter> {
        let text = std::fs::read(path)?;
        let ends = text.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1);
        let Some(end) = ends.clone().nth(rows) else {
            let held = ends.count().saturating_sub(1);
            return Err(io::Error::other(format!("it holds {held} row(s) where report.csv holds {rows}")));
        };
        let file = OpenOptions::new().append(true).open(path)?;
        file.set_len(end as u64)?;
        Ok(PaCsvWriter { out: BufWriter::new(file), columns })
    }

    pub fn append(&mut self, result: &PointResult) -> io::Result<()> {
        writeln!(self.out, "{}", row_line(result, self.columns))?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{GpuFigures, Interval, PointDetail, ReportRow};

    #[test]
    fn headers_match_perf_analyzer_2_50_byte_for_byte() {
        assert_eq!(
            header(LoadPoint::Concurrency(1), CsvColumns::default()),
            "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
        );
        assert_eq!(
            header(LoadPoint::Concurrency(1), CsvColumns { verbose: true, gpu_metrics: false }),
            "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,request/response,response wait,\
Inferences/Second CI Low,Inferences/Second CI High,p50 latency CI Low,p50 latency CI High,p99 latency CI Low,p99 latency CI High,\
Achieved Load,Send Lag p50,Send Lag p99,Client CPU (%),Client Limited"
        );
        assert!(
            header(LoadPoint::RequestRate(10.0), CsvColumns::default()).starts_with("Request Rate,Inferences/Second,")
        );
        assert!(header(LoadPoint::Concurrency(1), CsvColumns { verbose: true, gpu_metrics: true })
            .contains(",response wait,Avg GPU Utilization,Avg GPU Power Usage,Max GPU Memory Usage,Total GPU Memory,"));
    }

    #[test]
    fn doubles_print_like_cpp_streams() {
        assert_eq!(format_g(248.518), "248.518");
        assert_eq!(format_g(353.46812), "353.468");
        assert_eq!(format_g(99.8794), "99.8794");
        assert_eq!(format_g(1000.0), "1000");
        assert_eq!(format_g(123456.7), "123457");
        assert_eq!(format_g(1234567.0), "1.23457e+06");
        assert_eq!(format_g(999999.7), "1e+06");
        assert_eq!(format_g(0.000123456), "0.000123456");
        assert_eq!(format_g(0.0000123), "1.23e-05");
        assert_eq!(format_g(0.0), "0");
        assert_eq!(format_g(2.5), "2.5");
    }

    fn result() -> PointResult {
        let row = ReportRow {
            batch: 1,
            load: LoadPoint::Concurrency(2),
            throughput: 353.468,
            client_send_us: 69.9,
            network_us: 373.2,
            server_queue_us: 2422.0,
            server_compute_input_us: 25.0,
            server_compute_infer_us: 2678.0,
            server_compute_output_us: 87.0,
            client_recv_us: 0.4,
            p50_us: 5346.0,
            p90_us: 6980.0,
            p95_us: 8056.0,
            p99_us: 13004.0,
            avg_us: 5657.0,
            requests: 1275,
            failed: 0,
            late: 0,
            missed: 0,
            sequences: 0,
            avg_sequence_length: 0.0,
            stable: true,
            throughput_spread_pct: 1.0,
            p99_spread_pct: 1.0,
            avg_spread_pct: 1.0,
            server_avg_batch: 1.0,
            throughput_ci: Interval::new(350.25, 356.5),
            p50_ci: Interval::new(5300.7, 5400.2),
            p99_ci: Interval::new(12000.0, f64::INFINITY),
            overloaded: false,
            interrupted: false,
            client: Default::default(),
            tokens: None,
        };
        PointResult { row, detail: PointDetail { exchange_us: 5640.5, ..Default::default() } }
    }

    #[test]
    fn a_resumed_file_keeps_its_rows_drops_a_torn_line_and_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf_analyzer.csv");
        let columns = CsvColumns::default();
        let mut writer = PaCsvWriter::create(&path, LoadPoint::Concurrency(2), columns).unwrap();
        writer.append(&result()).unwrap();
        drop(writer);
        let one_row = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{one_row}2,353.4")).unwrap(); // killed mid-line
        let mut writer = PaCsvWriter::resume(&path, 1, columns).unwrap();
        writer.append(&result()).unwrap();
        let line = row_line(&result(), columns);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{one_row}{line}\n"));
        let err = PaCsvWriter::resume(&path, 3, columns).err().unwrap();
        assert_eq!(err.to_string(), "it holds 2 row(s) where report.csv holds 3");
    }

    #[test]
    fn rows_carry_whole_microseconds() {
        let columns = CsvColumns { verbose: true, gpu_metrics: false };
        assert_eq!(
            row_line(&result(), columns),
            "2,353.468,69,373,2422,25,2678,87,0,5346,6980,8056,13004,5657,70,5570,350.25,356.5,5300,5400,12000,inf,0,0,0,0.0,0"
        );
        assert_eq!(
            row_line(&result(), CsvColumns::default()),
            "2,353.468,69,373,2422,25,2678,87,0,5346,6980,8056,13004"
        );
        let mut with_gpu = result();
        with_gpu.detail.gpu = Some(GpuFigures { utilization: vec![("GPU-1".into(), 0.5)], ..Default::default() });
        let line = row_line(&with_gpu, CsvColumns { verbose: true, gpu_metrics: true });
        assert!(line.ends_with(",GPU-1:0.5;,,,,350.25,356.5,5300,5400,12000,inf,0,0,0,0.0,0"), "{line}");
        // The verbose CSV reads back with its intervals.
        let text = format!("{}\n{}\n", header(LoadPoint::Concurrency(1), columns), row_line(&result(), columns));
        let rows = crate::results::csv::parse_csv(&text, crate::results::csv::Unit::Us, "pa.csv").unwrap();
        assert_eq!(rows[0].throughput_ci, Interval::new(350.25, 356.5));
        assert_eq!(rows[0].p99_ci, Interval::new(12000.0, f64::INFINITY));
    }

    #[test]
    fn writer_flushes_each_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pa.csv");
        let mut w = PaCsvWriter::create(&path, LoadPoint::Concurrency(1), CsvColumns::default()).unwrap();
        w.append(&result()).unwrap();
        // Read while the writer is still open: the row is already on disk.
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.lines().nth(1).unwrap().starts_with("2,353.468,69,"));
    }
}
