//! A generative sweep (`perfbench llm --concurrency 1,8,32`): one profile per concurrency, each
//! with its own AIPerf files in `concurrency<N>/`, then one row per level in report.csv,
//! report.md and report.html, and the token plots across the levels.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use super::console::{token_plots, token_point};
use super::inputs::Tokenizer;
use super::metrics::{MetricValue, Summary};
use super::runner::Schedule;
use super::{profile, LlmConfig, Outcome};
use crate::report::html::{render_page, HtmlTable, Page, REPORT_HTML};

/// The report's columns.
const HEADERS: [&str; 12] = [
    "concurrency",
    "requests",
    "errors",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "request_latency_p50_ms",
    "output_tokens_per_s",
    "tokens_per_s_per_user_p50",
    "requests_per_s",
    "client_limited",
];

/// One level's outcome.
pub struct Level {
    pub concurrency: usize,
    pub outcome: Outcome,
}

/// Profiles every level in turn, each into `<artifact dir>/concurrency<N>`.
pub fn run(config: &LlmConfig, levels: &[usize], tokenizer: Arc<dyn Tokenizer>) -> anyhow::Result<Vec<Level>> {
    let mut done = Vec::with_capacity(levels.len());
    for &concurrency in levels {
        let mut level = config.clone();
        level.schedule = Schedule::Concurrency(concurrency);
        level.artifact_dir = config.artifact_dir.join(format!("concurrency{concurrency}"));
        std::fs::create_dir_all(&level.artifact_dir)?;
        let outcome = profile(&level, tokenizer.clone())?;
        done.push(Level { concurrency, outcome });
    }
    Ok(done)
}

fn cells(level: &Level) -> Vec<String> {
    let summary: &Summary = &level.outcome.summary;
    let single = |tag| match summary.get(tag) {
        Some(MetricValue::Single(v)) => format!("{v:.2}"),
        _ => String::new(),
    };
    let stat = |tag, pick: fn(&super::metrics::Stats) -> f64| match summary.get(tag) {
        Some(MetricValue::Distribution(s)) => format!("{:.3}", pick(s)),
        _ => String::new(),
    };
    let limits = level.outcome.client.reasons();
    vec![
        level.concurrency.to_string(),
        single("request_count").trim_end_matches(".00").to_string(),
        single("error_request_count").trim_end_matches(".00").to_string(),
        stat("time_to_first_token", |s| s.p50),
        stat("time_to_first_token", |s| s.p99),
        stat("inter_token_latency", |s| s.p50),
        stat("inter_token_latency", |s| s.p99),
        stat("request_latency", |s| s.p50),
        single("output_token_throughput"),
        stat("output_token_throughput_per_user", |s| s.p50),
        single("request_throughput"),
        if limits.is_empty() { "no".into() } else { "yes".into() },
    ]
}

fn notes(levels: &[Level]) -> Vec<String> {
    let mut notes = Vec::new();
    for level in levels {
        let limits = level.outcome.client.reasons();
        if !limits.is_empty() {
            notes.push(format!("CLIENT-LIMITED at concurrency {}: {}", level.concurrency, limits.join("; ")));
        }
        for (kind, n) in &level.outcome.summary.errors {
            notes.push(format!("Errors at concurrency {}: {kind}: {n}", level.concurrency));
        }
    }
    notes
}

/// Writes report.csv, report.md and report.html (with the token plots, also as PNG and SVG).
pub fn write_reports(dir: &Path, levels: &[Level], title: &str) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = levels.iter().map(cells).collect();
    let mut csv = HEADERS.join(",");
    csv.push('\n');
    for row in &rows {
        csv.push_str(&row.join(","));
        csv.push('\n');
    }
    std::fs::write(dir.join("report.csv"), csv)?;

    let notes = notes(levels);
    let mut md = format!("# {title}\n\n| {} |\n|{}\n", HEADERS.join(" | "), "---|".repeat(HEADERS.len()));
    for row in &rows {
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
    for note in &notes {
        let _ = write!(md, "\n{note}\n");
    }
    std::fs::write(dir.join("report.md"), md)?;

    let points: Vec<_> =
        levels.iter().filter_map(|l| token_point(&format!("c{}", l.concurrency), &l.outcome.summary)).collect();
    let plots = if points.is_empty() { Vec::new() } else { token_plots(dir, &points, title)? };
    let n = rows.len();
    let page = Page {
        title: title.to_string(),
        subtitle: format!("perfbench {} llm sweep", env!("CARGO_PKG_VERSION")),
        config: Vec::new(),
        warnings: notes.iter().filter(|n| n.starts_with("CLIENT-LIMITED")).cloned().collect(),
        plots,
        tables: vec![HtmlTable {
            id: "llm-sweep".into(),
            caption: "One row per concurrency (AIPerf's metric definitions)".into(),
            headers: HEADERS.iter().map(|h| h.to_string()).collect(),
            rows,
            numeric: HEADERS.iter().map(|h| *h != "client_limited").collect(),
            sortable: true,
            row_classes: vec![String::new(); n],
        }],
        notes,
    };
    std::fs::write(dir.join(REPORT_HTML), render_page(&page)?)?;
    Ok(())
}
