//! The seeds' Markdown results table, in their four layouts (`report.csv` itself is written and
//! read by [`crate::results::csv`]).
//!
//! The seeds printed their tables with Python's `tabulate` (`pipe` format): numbers right-aligned
//! on their decimal point, text left-aligned, every column at least two wider than its header.
//! [`pipe_table`] reproduces that byte for byte, so a seed's table can be rendered back exactly.
//!
//! perfbench's own rows add what the seeds' tables lack, in the cells themselves: throughput, p50
//! and p99 as `value ± half-width` of their 95% interval (the wider side of an asymmetric one),
//! and a percentile resting on too few requests ([`ReportRow::low_sample`]) as `value*` without
//! an interval. A row read from a CSV without intervals or request counts (a seed) prints plain.

use serde::{Deserialize, Serialize};

use crate::results::composing_csv::ComposingRow;
use crate::results::csv::{
    latencies_us, FAILURE_COLUMNS, INTERRUPTED_COLUMN, LATENCY_COLUMNS, REQUEST_RATE_COLUMN, SEQUENCE_COLUMNS,
    TOKEN_COLUMNS,
};
use crate::results::format::{fixed, format_e, format_g, round_decimal};
use crate::results::{Interval, LoadPoint, ReportRow};

/// A column repeated with one value on every row, as 002/004 print `Precision` and `Sequence Length`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConstColumn {
    pub header: String,
    pub value: String,
}

/// How a results table is printed: the seeds' four layouts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Layout {
    /// Seeds 000 and 001: `Batch | Concurrency | Inferences/Second | Client Send (ms) | …`, every
    /// value with `decimals` digits after the point (000 prints 1, 001 prints 2).
    Milliseconds { decimals: usize },
    /// Seed 003: a leading row index, the same 15 columns without units, µs as integers and
    /// Inferences/Second as `3.64e+05`.
    Microseconds,
    /// Seeds 002 and 004, offline: `[const columns] | Client Batch Size | Inferences/second |
    /// P90 … Avg Latency`, ms rounded to 3 decimals, throughput to 1, printed shortest (`%g`).
    OfflineSummary { leading: Vec<ConstColumn> },
    /// Seeds 002 and 004, online: `[const columns] | Concurrent client requests |
    /// Inferences/second | Client Send | … | Avg Latency`, numbers as in `OfflineSummary`.
    OnlineSummary { leading: Vec<ConstColumn> },
}

impl Default for Layout {
    /// perfbench's own default: the 15-column ms layout with 001's two decimals, which keeps
    /// sub-millisecond CPU latencies readable.
    fn default() -> Self {
        Layout::Milliseconds { decimals: 2 }
    }
}

// ---------------------------------------------------------------------------------------------
// Markdown

/// One column of a pipe table: its header and its cells as printed.
#[derive(Clone, Debug)]
pub struct PipeColumn {
    pub header: String,
    pub cells: Vec<String>,
}

impl PipeColumn {
    pub fn new(header: impl Into<String>, cells: Vec<String>) -> Self {
        PipeColumn { header: header.into(), cells }
    }
}

/// Whether tabulate would read the cell as a number (so the column aligns right). perfbench's
/// marked cells (`12.5 ± 0.3`, `12.5*`) count as numbers too: seeds never hold them.
fn is_number(cell: &str) -> bool {
    let parses = |t: &str| {
        let t = t.trim();
        !t.is_empty() && t.parse::<f64>().is_ok()
    };
    let c = cell.trim();
    let c = c.strip_suffix('*').unwrap_or(c);
    match c.split_once(" ± ") {
        Some((value, half)) => parses(value) && parses(half),
        None => parses(c),
    }
}

fn is_int(cell: &str) -> bool {
    let c = cell.trim();
    let digits = c.strip_prefix('-').unwrap_or(c);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Digits after the decimal point (or after the exponent mark), −1 for an integer: the measure
/// by which tabulate lines up a column's decimal points.
fn digits_after_point(cell: &str) -> isize {
    if is_int(cell) || !is_number(cell) {
        return -1;
    }
    let lower = cell.to_ascii_lowercase();
    match lower.rfind('.').or_else(|| lower.rfind('e')) {
        Some(pos) => (cell.len() - pos - 1) as isize,
        None => -1,
    }
}

/// Renders a Markdown pipe table as the seeds print theirs (tabulate's `pipe` format with
/// decimal alignment): numeric columns right-aligned on the decimal point, text left-aligned.
pub fn pipe_table(columns: &[PipeColumn]) -> String {
    struct Laid {
        width: usize,
        numeric: bool,
        header: String,
        cells: Vec<String>,
    }
    let laid: Vec<Laid> = columns
        .iter()
        .map(|c| {
            let numeric = !c.cells.is_empty() && c.cells.iter().all(|s| is_number(s));
            let cells: Vec<String> = if numeric {
                let max_after = c.cells.iter().map(|s| digits_after_point(s)).max().unwrap_or(-1);
                c.cells
                    .iter()
                    .map(|s| format!("{s}{}", " ".repeat((max_after - digits_after_point(s)) as usize)))
                    .collect()
            } else {
                c.cells.clone()
            };
            let width = cells
                .iter()
                .map(|s| s.chars().count())
                .chain(std::iter::once(c.header.chars().count() + 2))
                .max()
                .unwrap_or(0);
            Laid { width, numeric, header: c.header.clone(), cells }
        })
        .collect();
    let pad = |text: &str, width: usize, right: bool| {
        let fill = " ".repeat(width.saturating_sub(text.chars().count()));
        if right {
            format!("{fill}{text}")
        } else {
            format!("{text}{fill}")
        }
    };
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    let mut out = line(laid.iter().map(|c| pad(&c.header, c.width, c.numeric)).collect());
    out.push('|');
    for c in &laid {
        let rule =
            if c.numeric { format!("{}:", "-".repeat(c.width + 1)) } else { format!(":{}", "-".repeat(c.width + 1)) };
        out.push_str(&rule);
        out.push('|');
    }
    out.push('\n');
    let rows = laid.iter().map(|c| c.cells.len()).max().unwrap_or(0);
    for i in 0..rows {
        out.push_str(&line(
            laid.iter().map(|c| pad(c.cells.get(i).map(String::as_str).unwrap_or(""), c.width, c.numeric)).collect(),
        ));
    }
    out
}

/// The load column's header and cells: concurrency as integers, request rates as printed.
fn load_cells(loads: &[LoadPoint], rate_fmt: &dyn Fn(f64) -> String) -> (bool, Vec<String>) {
    let open_loop = loads.iter().any(|l| matches!(l, LoadPoint::RequestRate(_)));
    let cells = loads
        .iter()
        .map(|l| match *l {
            LoadPoint::Concurrency(c) => c.to_string(),
            LoadPoint::RequestRate(rate) => rate_fmt(rate),
        })
        .collect();
    (open_loop, cells)
}

/// Which measured quantity a cell shows, for its interval and low-sample mark.
#[derive(Clone, Copy)]
enum Quantity {
    Throughput,
    /// A percentile (50, 90, 95, 99).
    Percentile(u32),
    Other,
}

impl Quantity {
    /// The quantity of latency column `i` of [`LATENCY_COLUMNS`].
    fn of_latency(i: usize) -> Quantity {
        match i {
            7 => Quantity::Percentile(50),
            8 => Quantity::Percentile(90),
            9 => Quantity::Percentile(95),
            10 => Quantity::Percentile(99),
            _ => Quantity::Other,
        }
    }
}

/// A cell with its interval or low-sample mark; `format` prints both the value and the ±.
fn marked(row: &ReportRow, quantity: Quantity, value: f64, format: &dyn Fn(f64) -> String) -> String {
    let (ci, low): (Interval, bool) = match quantity {
        Quantity::Throughput => (row.throughput_ci, false),
        Quantity::Percentile(p) if row.low_sample(p as f64) => (Interval::UNKNOWN, true),
        Quantity::Percentile(50) => (row.p50_ci, false),
        Quantity::Percentile(99) => (row.p99_ci, false),
        _ => (Interval::UNKNOWN, false),
    };
    // The interval is about the row's own value; `value` may be that value in other units.
    let reference = match quantity {
        Quantity::Throughput => row.throughput,
        Quantity::Percentile(50) => row.p50_us,
        Quantity::Percentile(99) => row.p99_us,
        _ => value,
    };
    let pm = ci.plus_minus(reference) * if reference != 0.0 { value / reference } else { 1.0 };
    let cell = format(value);
    if low {
        format!("{cell}*")
    } else if pm.is_finite() {
        format!("{cell} ± {}", format(pm))
    } else {
        cell
    }
}

/// Notes under a results table for what its cells mark: the intervals, low-sample percentiles
/// and overloaded rows. Empty for rows without any (a seed's).
pub fn render_notes(rows: &[ReportRow]) -> String {
    let mut notes = Vec::new();
    let any_ci = rows.iter().any(|r| {
        r.throughput_ci.plus_minus(r.throughput).is_finite()
            || r.p50_ci.plus_minus(r.p50_us).is_finite()
            || r.p99_ci.plus_minus(r.p99_us).is_finite()
    });
    if any_ci {
        notes.push(
            "± is the half-width of the 95% confidence interval (the wider side): throughput from batch \
             means over the row's windows, p50 and p99 from a bootstrap over its windows."
                .to_string(),
        );
    }
    if rows.iter().any(|r| !r.low_sample_names().is_empty()) {
        notes.push(
            "\\* low-sample: the row holds fewer requests than the percentile needs (p50 20, p90 100, \
             p95 200, p99 1,000), so the value is shown for reference only."
                .to_string(),
        );
    }
    // The rows a flag marks, named by batch and load.
    let rows_where = |flag: fn(&ReportRow) -> bool| -> Vec<String> {
        rows.iter()
            .filter(|r| flag(r))
            .map(|r| match r.load {
                LoadPoint::Concurrency(c) => format!("batch {} at concurrency {c}", r.batch),
                LoadPoint::RequestRate(rate) => format!("batch {} at {} req/s", r.batch, format_g(rate)),
            })
            .collect()
    };
    let overloaded = rows_where(|r| r.overloaded);
    if !overloaded.is_empty() {
        notes.push(format!(
            "Overloaded (the server queue grew window after window; latencies depend on how long it ran): {}.",
            overloaded.join(", ")
        ));
    }
    let interrupted = rows_where(|r| r.interrupted);
    if !interrupted.is_empty() {
        notes.push(format!(
            "Interrupted (the connection to the server was lost during the point; the row holds only what was \
             measured before, and the sweep went on once the server answered again): {}.",
            interrupted.join(", ")
        ));
    }
    let limited: Vec<String> = rows
        .iter()
        .filter(|r| r.client_limited())
        .map(|r| format!("batch {} at {}: {}", r.batch, load_label(r.load), r.client_limits().join("; ")))
        .collect();
    if !limited.is_empty() {
        notes.push(format!(
            "Client-limited (the load generator, not the server, set these rows' pace): {}.",
            limited.join(", ")
        ));
    }
    notes.iter().map(|n| format!("{n}\n")).collect::<Vec<_>>().join("\n")
}

fn load_label(load: LoadPoint) -> String {
    match load {
        LoadPoint::Concurrency(c) => format!("concurrency {c}"),
        LoadPoint::RequestRate(rate) => format!("{} req/s", format_g(rate)),
    }
}

fn loads_of(rows: &[ReportRow]) -> Vec<LoadPoint> {
    rows.iter().map(|r| r.load).collect()
}

/// The composing models' table (one row per load point and model), its times and load column
/// printed as `layout` prints the results table's.
pub fn render_composing(rows: &[ComposingRow], layout: &Layout) -> String {
    pipe_table(&composing_columns(rows, layout))
}

/// The composing models' table as columns, cells as printed.
pub fn composing_columns(rows: &[ComposingRow], layout: &Layout) -> Vec<PipeColumn> {
    let ms = |us: f64| us / 1000.0;
    // (unit suffix of time headers, time cell from µs, request rate cell) per layout.
    type Cell = Box<dyn Fn(f64) -> String>;
    let (unit, time, rate): (&str, Cell, Cell) = match layout {
        Layout::Milliseconds { decimals } => {
            let d = *decimals;
            (" (ms)", Box::new(move |us| fixed(ms(us), d)), Box::new(move |r| fixed(r, d)))
        }
        Layout::Microseconds => ("", Box::new(|us| fixed(us, 0)), Box::new(format_g)),
        Layout::OfflineSummary { .. } | Layout::OnlineSummary { .. } => (
            " (ms)",
            Box::new(move |us| format_g(round_decimal(ms(us), 3))),
            Box::new(|r| format_g(round_decimal(r, 1))),
        ),
    };
    let (open_loop, load) = load_cells(&rows.iter().map(|r| r.load).collect::<Vec<_>>(), &rate);
    let count = |f: fn(&ComposingRow) -> u64| rows.iter().map(|r| f(r).to_string()).collect();
    let times = |f: fn(&ComposingRow) -> f64| rows.iter().map(|r| time(f(r))).collect();
    vec![
        PipeColumn::new("Batch", count(|r| r.batch)),
        PipeColumn::new(if open_loop { REQUEST_RATE_COLUMN } else { "Concurrency" }, load),
        PipeColumn::new("Model", rows.iter().map(|r| r.model.clone()).collect()),
        PipeColumn::new("Inference Count", count(|r| r.inference_count)),
        PipeColumn::new("Execution Count", count(|r| r.execution_count)),
        PipeColumn::new(format!("Server Queue{unit}"), times(|r| r.queue_us)),
        PipeColumn::new(format!("Server Compute Input{unit}"), times(|r| r.compute_input_us)),
        PipeColumn::new(format!("Server Compute Infer{unit}"), times(|r| r.compute_infer_us)),
        PipeColumn::new(format!("Server Compute Output{unit}"), times(|r| r.compute_output_us)),
        PipeColumn::new("Share of Latency (%)", rows.iter().map(|r| fixed(r.share_pct, 1)).collect()),
    ]
}

/// The results table of `rows` in `layout`, as Markdown (ends with a newline).
pub fn render_results(rows: &[ReportRow], layout: &Layout) -> String {
    pipe_table(&results_columns(rows, layout))
}

/// The results table's columns in `layout`, cells as printed (report.md and report.html).
pub fn results_columns(rows: &[ReportRow], layout: &Layout) -> Vec<PipeColumn> {
    let ms = |us: f64| us / 1000.0;
    let mut columns = Vec::new();
    match layout {
        Layout::Milliseconds { .. } | Layout::Microseconds => {
            let micro = matches!(layout, Layout::Microseconds);
            let d = if let Layout::Milliseconds { decimals } = layout { *decimals } else { 0 };
            if micro {
                columns.push(PipeColumn::new("", (0..rows.len()).map(|i| i.to_string()).collect()));
            }
            columns.push(PipeColumn::new("Batch", rows.iter().map(|r| r.batch.to_string()).collect()));
            let (open_loop, load) = load_cells(&loads_of(rows), &|rate| {
                if micro {
                    format_g(rate)
                } else {
                    fixed(rate, d)
                }
            });
            columns.push(PipeColumn::new(if open_loop { REQUEST_RATE_COLUMN } else { "Concurrency" }, load));
            let throughput = |t: f64| if micro { format_e(t, 2) } else { fixed(t, d) };
            columns.push(PipeColumn::new(
                "Inferences/Second",
                rows.iter().map(|r| marked(r, Quantity::Throughput, r.throughput, &throughput)).collect(),
            ));
            for (i, name) in LATENCY_COLUMNS.iter().enumerate() {
                // A stage no row measured (a generative sweep has none) gets no column.
                if rows.iter().all(|r| latencies_us(r)[i].is_nan()) {
                    continue;
                }
                let q = Quantity::of_latency(i);
                let (header, cells) = if micro {
                    (
                        name.to_string(),
                        rows.iter().map(|r| marked(r, q, latencies_us(r)[i], &|v| fixed(v, 0))).collect(),
                    )
                } else {
                    (
                        format!("{name} (ms)"),
                        rows.iter().map(|r| marked(r, q, ms(latencies_us(r)[i]), &|v| fixed(v, d))).collect(),
                    )
                };
                columns.push(PipeColumn::new(header, cells));
            }
            // A generative sweep's token figures: latencies as the table's, rates as they are.
            if rows.iter().any(|r| r.tokens.is_some()) {
                for (i, name) in TOKEN_COLUMNS.iter().enumerate() {
                    let latency = i < 6;
                    let header = if latency && !micro { format!("{name} (ms)") } else { name.to_string() };
                    let cell = |r: &ReportRow| {
                        let v = r.tokens.map_or(f64::NAN, |t| t.values()[i]);
                        match (latency, micro) {
                            (true, false) => fixed(ms(v), d),
                            (_, true) => fixed(v, 0),
                            (false, false) => fixed(v, d),
                        }
                    };
                    columns.push(PipeColumn::new(header, rows.iter().map(cell).collect()));
                }
            }
        }
        Layout::OfflineSummary { leading } | Layout::OnlineSummary { leading } => {
            let online = matches!(layout, Layout::OnlineSummary { .. });
            for c in leading {
                columns.push(PipeColumn::new(c.header.clone(), vec![c.value.clone(); rows.len()]));
            }
            let g_ms = |us: f64| format_g(round_decimal(ms(us), 3));
            if online {
                let (open_loop, load) = load_cells(&loads_of(rows), &|rate| format_g(round_decimal(rate, 1)));
                columns.push(PipeColumn::new(
                    if open_loop { "Client request rate" } else { "Concurrent client requests" },
                    load,
                ));
            } else {
                columns.push(PipeColumn::new("Client Batch Size", rows.iter().map(|r| r.batch.to_string()).collect()));
            }
            let g1 = |t: f64| format_g(round_decimal(t, 1));
            columns.push(PipeColumn::new(
                "Inferences/second",
                rows.iter().map(|r| marked(r, Quantity::Throughput, r.throughput, &g1)).collect(),
            ));
            let names: &[(&str, usize)] = if online {
                &[
                    ("Client Send", 0),
                    ("Network+server Send/recv", 1),
                    ("Server Queue", 2),
                    ("Server Compute Input", 3),
                    ("Server Compute Infer", 4),
                    ("Server Compute Output", 5),
                    ("Client Recv", 6),
                    ("P50 Latency", 7),
                    ("P90 Latency", 8),
                    ("P95 Latency", 9),
                    ("P99 Latency", 10),
                    ("Avg Latency", 11),
                ]
            } else {
                &[("P90 Latency", 8), ("P95 Latency", 9), ("P99 Latency", 10), ("Avg Latency", 11)]
            };
            for (header, i) in names {
                let q = Quantity::of_latency(*i);
                columns.push(PipeColumn::new(
                    *header,
                    rows.iter().map(|r| marked(r, q, ms(latencies_us(r)[*i]), &|v| g_ms(v * 1000.0))).collect(),
                ));
            }
        }
    }
    // A sequence model's rows say how many sequences ended and how long they were on average.
    if rows.iter().any(|r| r.sequences > 0) {
        columns.push(PipeColumn::new(SEQUENCE_COLUMNS[0], rows.iter().map(|r| r.sequences.to_string()).collect()));
        columns
            .push(PipeColumn::new(SEQUENCE_COLUMNS[1], rows.iter().map(|r| fixed(r.avg_sequence_length, 1)).collect()));
    }
    // Rows with failed requests say how many failed and why (the CSV's failure columns).
    if rows.iter().any(|r| r.failed > 0) {
        columns.push(PipeColumn::new("Failed", rows.iter().map(|r| r.failed.to_string()).collect()));
        for (i, name) in FAILURE_COLUMNS.iter().enumerate() {
            let cells = rows.iter().map(|r| r.client.failures.as_array()[i].to_string()).collect();
            columns.push(PipeColumn::new(*name, cells));
        }
    }
    // A row whose point lost its server (a restart mid-sweep) says so in its own column.
    if rows.iter().any(|r| r.interrupted) {
        let cells = rows.iter().map(|r| if r.interrupted { "yes".to_string() } else { String::new() }).collect();
        columns.push(PipeColumn::new(INTERRUPTED_COLUMN, cells));
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::csv::tests::sample_row;

    #[test]
    fn pipe_table_aligns_decimal_points_like_tabulate() {
        let table = pipe_table(&[
            PipeColumn::new("Precision", vec!["FP16".into(), "FP16".into()]),
            PipeColumn::new("Inferences/second", vec!["81.8".into(), "164".into()]),
            PipeColumn::new("", vec!["0".into(), "1".into()]),
        ]);
        let expected = "\
| Precision   |   Inferences/second |    |
|:------------|--------------------:|---:|
| FP16        |                81.8 |  0 |
| FP16        |               164   |  1 |
";
        assert_eq!(table, expected);
    }

    #[test]
    fn renders_the_millisecond_layout() {
        let row = ReportRow {
            requests: 0,
            failed: 0,
            throughput_ci: Interval::UNKNOWN,
            p50_ci: Interval::UNKNOWN,
            ..sample_row(8, 1)
        };
        let md = render_results(&[row], &Layout::Milliseconds { decimals: 1 });
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines[0].starts_with("|   Batch |   Concurrency |   Inferences/Second |   Client Send (ms) |"));
        assert!(lines[1].starts_with("|--------:|--------------:|--------------------:|-------------------:|"));
        assert!(lines[2].starts_with("|       8 |             1 |              2053.9 |                0.0 |"));
        assert!(lines[2].ends_with("|                3.9 |"));
    }

    #[test]
    fn rows_with_failures_show_them_by_kind() {
        let mut row = sample_row(8, 1);
        row.failed = 3;
        row.client.failures = crate::results::FailureCounts { reset: 2, timeout: 1, refused: 0, other: 0 };
        let md = render_results(&[row], &Layout::Milliseconds { decimals: 1 });
        let cells = |line: &str| line.split('|').map(|c| c.trim().to_string()).collect::<Vec<String>>();
        let lines: Vec<&str> = md.lines().collect();
        let (header, values) = (cells(lines[0]), cells(lines[2]));
        let at = |name: &str| values[header.iter().position(|h| h == name).expect(name)].clone();
        let by_kind =
            [at("Failed"), at("Failed Reset"), at("Failed Timeout"), at("Failed Refused"), at("Failed Other")];
        assert_eq!(by_kind, ["3", "2", "1", "0", "0"].map(String::from), "{md}");
        let clean = ReportRow { failed: 0, ..sample_row(8, 1) };
        assert!(
            !render_results(&[clean], &Layout::Microseconds).contains("Failed"),
            "no failure columns without failures"
        );
    }

    #[test]
    fn rows_with_intervals_print_them_and_mark_low_sample_percentiles() {
        // sample_row: 100 requests, throughput 2053.9 in [2000, 2100.5], p50 3850 µs in
        // [3800, 3900]; p90, p95 and p99 need more than 100 requests.
        let md = render_results(&[ReportRow { failed: 0, ..sample_row(8, 1) }], &Layout::Milliseconds { decimals: 2 });
        let row = md.lines().nth(2).unwrap();
        assert!(row.contains(" 2053.90 ± 53.90 |"), "{row}");
        assert!(row.contains(" 3.85 ± 0.05 |"), "{row}");
        assert!(row.contains(" 3.90 | ") && row.contains(" 3.95* | ") && row.contains(" 4.10* | "), "{row}");
        assert_eq!(md.lines().nth(1).unwrap().matches(":|").count(), 15, "marked cells align right: {md}");
        let notes = render_notes(&[sample_row(8, 1)]);
        assert!(notes.contains("95% confidence interval") && notes.contains("low-sample"), "{notes}");
        assert!(notes.contains("Overloaded") && notes.contains("batch 8 at concurrency 1"), "{notes}");
        let cut = ReportRow { overloaded: false, interrupted: true, ..sample_row(4, 2) };
        let notes = render_notes(&[cut]);
        assert!(notes.contains("Interrupted") && notes.contains("batch 4 at concurrency 2"), "{notes}");
        assert!(!notes.contains("Overloaded"), "{notes}");
        let plain = ReportRow {
            requests: 0,
            throughput_ci: Interval::UNKNOWN,
            p50_ci: Interval::UNKNOWN,
            p99_ci: Interval::UNKNOWN,
            overloaded: false,
            interrupted: false,
            client: Default::default(),
            ..sample_row(8, 1)
        };
        assert_eq!(render_notes(std::slice::from_ref(&plain)), "");
        assert!(!render_results(&[plain], &Layout::Microseconds).contains(['±', '*']));
    }

    #[test]
    fn renders_the_composing_table_in_the_results_layout() {
        let row = |load, model: &str, infer_us| ComposingRow {
            batch: 1,
            load,
            model: model.into(),
            inference_count: 40,
            execution_count: 20,
            queue_us: 100.0,
            compute_input_us: 5.0,
            compute_infer_us: infer_us,
            compute_output_us: 2.5,
            share_pct: 48.26,
        };
        let rows = [
            row(LoadPoint::Concurrency(1), "pre", 300.0),
            row(LoadPoint::Concurrency(1), "sleep", 20_150.0),
            row(LoadPoint::Concurrency(4), "pre", 310.0),
        ];
        let md = render_composing(&rows, &Layout::Milliseconds { decimals: 2 });
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 5, "{md}");
        assert!(lines[0].starts_with("|   Batch |   Concurrency | Model   |   Inference Count |"), "{md}");
        assert!(
            lines[0].contains("|   Server Compute Infer (ms) |") && lines[0].ends_with("|   Share of Latency (%) |")
        );
        assert!(lines[3].starts_with("|       1 |             1 | sleep   |                40 |"), "{md}");
        assert!(
            lines[3].contains("|                       20.15 |") && lines[3].ends_with("|                   48.3 |")
        );
        assert!(lines[4].contains("|             4 | pre     |"), "{md}");
        let micro = render_composing(&rows[..1], &Layout::Microseconds);
        assert!(micro.contains("|   Server Queue |") && micro.contains("|            100 |"), "{micro}");
        let open = ComposingRow { load: LoadPoint::RequestRate(250.0), ..rows[0].clone() };
        assert!(render_composing(&[open], &Layout::default()).starts_with("|   Batch |   Request Rate |"));
    }

    #[test]
    fn renders_the_microsecond_layout() {
        let row = ReportRow { requests: 0, throughput_ci: Interval::UNKNOWN, ..sample_row(256, 1) };
        let md = render_results(&[row], &Layout::Microseconds);
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines[0].starts_with("|    |   Batch |"));
        assert!(
            lines[2].starts_with("|  0 |     256 |             1 |            2.05e+03 |            12 |"),
            "{}",
            lines[2]
        );
    }
}
