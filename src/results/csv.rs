//! The one reader and the writer of results tables: perfbench's `report.csv`, perf_analyzer's
//! `-f` CSV (with or without `--verbose-csv`) and the seed CSVs, all read into [`ReportRow`]s by
//! column name. The reader is lenient (a missing column reads as NaN, "not measured"); a caller
//! that needs a column asks the [`Table`] whether it was there.
//!
//! Here: the columns and the errors both sides share; `reader` reads tables, `writer` writes
//! `report.csv`.

mod reader;
mod writer;

use std::path::PathBuf;

use polars::prelude::PolarsError;
use serde::{Deserialize, Serialize};

use super::row::ReportRow;
pub use reader::{parse_csv, parse_table, read_csv, read_table, Field, Table};
pub use writer::{latencies_us, report_csv, report_frame, stages_us, write_report_csv};

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

/// A generative sweep's session columns (µs; counts), after the reasoning columns, only when a
/// level's sessions had later turns: TTFT of first against later turns (what a prefix cache
/// saves), the sessions' length and rate, and the share of prompt tokens the server's prefix
/// cache served (%). Tables read them as unknown columns (kept out of rows).
pub const SESSION_COLUMNS: [&str; 9] = [
    "TTFT p50 Turn 0",
    "TTFT p99 Turn 0",
    "TTFT p50 Later Turns",
    "TTFT p99 Later Turns",
    "Session Duration p50",
    "Turns/Session avg",
    "Tokens/Session avg",
    "Sessions/Second",
    "Cached Prompt Tokens (%)",
];

/// A generative sweep's column naming the model of a row when a level sent to several (`-m
/// a,b`): [`MODEL_TOTAL`] on the level's own row, a model's name on its part. Readers keep only
/// the level's rows (a model's part is a breakdown, not a load point).
pub const MODEL_COLUMN: &str = "Model";
pub const MODEL_TOTAL: &str = "all";

/// A generative sweep's column when the over-saturation stop watched its levels: yes or no.
/// Tables read it as an unknown column (kept out of rows).
pub const SATURATED_COLUMN: &str = "Saturated";

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::results::row::{Interval, LoadPoint};

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
