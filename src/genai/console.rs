//! What a person reads: the metrics table on stdout (AIPerf's rows and columns) with the token
//! source and the client's own limits, and report.html with the same table and the run's settings.

use std::fmt::Write as _;
use std::path::Path;

use super::metrics::{MetricValue, Stats, Summary};
use super::session::{self, SessionSummary};
use super::Outcome;
use crate::report::html::{render_page, HtmlTable, InlinePlot, Page, REPORT_HTML};
use crate::report::plot::tokens::{render_token_plots, token_svgs, TokenPoint};

/// Rows of the table, in AIPerf's console order (a reasoning run's rows beside their kin; a
/// row the run lacks is left out).
const ORDER: [&str; 12] = [
    "time_to_first_token",
    "time_to_first_output_token",
    "request_latency",
    "inter_token_latency",
    "reasoning_inter_token_latency",
    "output_inter_token_latency",
    "output_token_throughput_per_user",
    "output_sequence_length",
    "reasoning_token_count",
    "output_token_count",
    "input_sequence_length",
    "usage_prompt_cache_read_tokens",
];

/// A run's point on the token plots; `None` when no request produced tokens.
pub fn token_point(label: &str, summary: &Summary) -> Option<TokenPoint> {
    let stats = |tag| match summary.get(tag) {
        Some(MetricValue::Distribution(s)) => Some(s),
        _ => None,
    };
    let Some(MetricValue::Single(total)) = summary.get("output_token_throughput") else { return None };
    let osl = stats("output_sequence_length")?;
    // Not streamed: one user's rate is its answer's length over its latency.
    let user = match (stats("output_token_throughput_per_user"), stats("request_latency")) {
        (Some(per_user), _) => per_user.p50,
        (None, Some(latency)) if latency.p50 > 0.0 => osl.p50 / (latency.p50 / 1000.0),
        _ => 0.0,
    };
    let three = |s: &super::metrics::Stats| [s.p50, s.p90, s.p99];
    Some(TokenPoint {
        label: label.to_string(),
        total_tokens_per_s: *total,
        user_tokens_per_s: user,
        ttft_ms: stats("time_to_first_token").map(three),
        ttfot_ms: stats("time_to_first_output_token").map(three),
        itl_ms: stats("inter_token_latency").map(three),
    })
}

/// The token plots of these points: PNG and SVG files in `dir`, and inline for report.html.
pub fn token_plots(dir: &Path, points: &[TokenPoint], title: &str) -> anyhow::Result<Vec<InlinePlot>> {
    render_token_plots(dir, points, title)?;
    Ok(token_svgs(points, title)?.into_iter().map(|(name, svg)| InlinePlot { name, svg }).collect())
}

const COLUMNS: [&str; 7] = ["avg", "min", "max", "p99", "p90", "p50", "std"];

/// A distribution's row: its name, then [`COLUMNS`].
fn stats_row(name: String, s: &Stats) -> Vec<String> {
    let mut row = vec![name];
    row.extend([s.avg, s.min, s.max, s.p99, s.p90, s.p50, s.std].iter().map(|v| format!("{v:.2}")));
    row
}

/// A single figure's row: its name, the value, then N/A.
fn single_row(name: String, value: f64) -> Vec<String> {
    let mut row = vec![name, format!("{value:.2}")];
    row.extend(std::iter::repeat_n("N/A".to_string(), COLUMNS.len() - 1));
    row
}

/// A multi-turn run's rows: the latency of each turn index, then the sessions'.
fn session_rows(sessions: &SessionSummary) -> Vec<Vec<String>> {
    let header = match sessions.latency_tag {
        "time_to_first_token" => "Time to First Token",
        _ => "Request Latency",
    };
    let mut rows: Vec<Vec<String>> =
        sessions.by_turn.iter().map(|t| stats_row(format!("{header}, {} (ms)", t.label), &t.stats)).collect();
    rows.push(stats_row("Session Duration (ms)".into(), &sessions.duration_ms));
    rows.push(stats_row("Turns Per Session (turns)".into(), &sessions.turns));
    rows.push(stats_row("Input Tokens Per Session (tokens)".into(), &sessions.input_tokens));
    rows.push(stats_row("Output Tokens Per Session (tokens)".into(), &sessions.output_tokens));
    rows.push(single_row("Session Throughput (sessions/sec)".into(), sessions.sessions_per_s));
    rows.push(single_row("Session Count (sessions)".into(), sessions.sessions as f64));
    rows
}

/// The run's sessions, when some had later turns.
pub fn sessions(outcome: &Outcome, streaming: bool) -> Option<SessionSummary> {
    session::summarize(&outcome.records, streaming, outcome.summary.duration.as_secs_f64())
}

fn table(outcome: &Outcome) -> (Vec<String>, Vec<Vec<String>>) {
    let summary = &outcome.summary;
    let mut headers = vec!["Metric".to_string()];
    headers.extend(COLUMNS.iter().map(|c| c.to_string()));
    let mut rows = Vec::new();
    for tag in ORDER {
        let Some(metric) = summary.metrics.iter().find(|m| m.tag == tag) else { continue };
        let MetricValue::Distribution(s) = &metric.value else { continue };
        rows.push(stats_row(format!("{} ({})", metric.header, metric.unit), s));
    }
    let streaming = summary.get("time_to_first_token").is_some();
    if let Some(sessions) = sessions(outcome, streaming) {
        rows.extend(session_rows(&sessions));
    }
    for tag in [
        "output_token_throughput",
        "request_throughput",
        "request_count",
        "error_request_count",
        "goodput",
        "good_request_fraction",
        "total_usage_prompt_cache_read_tokens",
    ] {
        let Some(metric) = summary.metrics.iter().find(|m| m.tag == tag) else { continue };
        let MetricValue::Single(v) = metric.value else { continue };
        rows.push(single_row(format!("{} ({})", metric.header, metric.unit), v));
    }
    (headers, rows)
}

/// Notes under the table: where token counts came from, errors, the client's limits.
pub fn notes(outcome: &Outcome, tokenizer: &str) -> Vec<String> {
    let summary = &outcome.summary;
    let mut notes = Vec::new();
    let sources: Vec<String> =
        summary.token_sources.iter().map(|(source, n)| format!("{} ({n} requests)", source.describe())).collect();
    notes.push(format!(
        "Token counts: {} (client tokenizer: {tokenizer})",
        if sources.is_empty() { "none".to_string() } else { sources.join(", ") }
    ));
    if !summary.errors.is_empty() {
        let kinds: Vec<String> = summary.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        notes.push(format!("Errors: {}", kinds.join(", ")));
        if let Some((kind, message)) = outcome.records.iter().find_map(|r| r.error.as_ref()) {
            notes.push(format!("First error: {kind}: {message}"));
        }
    }
    if let Some(cache) = cache_note(&outcome.records) {
        notes.push(cache);
    }
    if outcome.spans_received {
        notes.push(super::span_join::note(&outcome.records));
    }
    notes.extend(outcome.server_notes.iter().cloned());
    let gaps = &summary.gaps;
    if !gaps.per_chunk.is_empty() {
        notes.push(format!(
            "Gaps between events (HDR, µs): p50 {} p99 {} p99.9 {} max {}; per token p50 {} p99 {}",
            gaps.per_chunk.value_at_quantile(0.5),
            gaps.per_chunk.value_at_quantile(0.99),
            gaps.per_chunk.value_at_quantile(0.999),
            gaps.per_chunk.max(),
            gaps.per_token.value_at_quantile(0.5),
            gaps.per_token.value_at_quantile(0.99),
        ));
    }
    let client = &outcome.client;
    notes.push(format!(
        "Client: {:.0}% of this process's CPU budget used (server included when in-process), send lag p99 {:.0} µs, \
         event-handling lag p99 {:.0} µs (handler), {:.0} µs (wake-up)",
        client.cpu_fraction * 100.0,
        client.send_lag_p99_us,
        client.handling_lag_p99_us,
        client.wake_lag_p99_us
    ));
    let reasons = client.reasons();
    if !reasons.is_empty() {
        notes.push(format!(
            "CLIENT-LIMITED: the client acted late ({}); TTFT and ITL include that delay",
            reasons.join("; ")
        ));
    }
    for (name, value) in &outcome.server_counters {
        notes.push(format!("Server: {name} {value}"));
    }
    notes.extend(saturation_note(outcome));
    notes
}

/// The share of prompt tokens, and of requests, the server's prefix cache served, when it said.
fn cache_note(records: &[super::metrics::Record]) -> Option<String> {
    let told: Vec<_> = records.iter().filter(|r| !r.warmup && r.ok() && r.cached_tokens.is_some()).collect();
    if told.is_empty() {
        return None;
    }
    let cached: u64 = told.iter().filter_map(|r| r.cached_tokens).sum();
    let prompt: u64 = told.iter().filter_map(|r| r.input_tokens).sum();
    let hits = told.iter().filter(|r| r.cached_tokens.is_some_and(|n| n > 0)).count();
    Some(format!(
        "Prefix cache (server usage): {cached} of {prompt} prompt tokens cached ({:.1}%); {hits} of {} requests hit",
        100.0 * cached as f64 / prompt.max(1) as f64,
        told.len()
    ))
}

/// A mix's table (`-m a,b`): a row per model, then the total, rates over the run's duration.
pub fn model_table(outcome: &Outcome) -> Option<(Vec<String>, Vec<Vec<String>>)> {
    let summary = &outcome.summary;
    let streaming = summary.get("time_to_first_token").is_some();
    let parts = super::by_model::split(&outcome.records, summary, None, streaming);
    if parts.is_empty() {
        return None;
    }
    let headers = [
        "Model",
        "Requests",
        "Errors",
        "Share (%)",
        "Requests/s",
        "Output tokens/s",
        "Latency p50 (ms)",
        "Latency p99 (ms)",
        "TTFT p50 (ms)",
    ];
    let total = single(summary, "request_count");
    let row = |name: &str, s: &Summary| {
        let stat = |tag, pick: fn(&Stats) -> f64| match s.get(tag) {
            Some(MetricValue::Distribution(d)) => format!("{:.2}", pick(d)),
            _ => "N/A".into(),
        };
        let requests = single(s, "request_count");
        vec![
            name.to_string(),
            format!("{requests:.0}"),
            format!("{:.0}", single(s, "error_request_count")),
            format!("{:.1}", if total > 0.0 { 100.0 * requests / total } else { 0.0 }),
            format!("{:.2}", single(s, "request_throughput")),
            format!("{:.2}", single(s, "output_token_throughput")),
            stat("request_latency", |d| d.p50),
            stat("request_latency", |d| d.p99),
            stat("time_to_first_token", |d| d.p50),
        ]
    };
    let mut rows: Vec<Vec<String>> = parts.iter().map(|p| row(&p.model, &p.summary)).collect();
    rows.push(row("all", summary));
    Some((headers.iter().map(|h| h.to_string()).collect(), rows))
}

fn single(summary: &Summary, tag: &str) -> f64 {
    match summary.get(tag) {
        Some(MetricValue::Single(v)) => *v,
        _ => 0.0,
    }
}

/// The over-saturation stop's line, when it watched the run.
pub fn saturation_note(outcome: &Outcome) -> Option<String> {
    let s = outcome.saturation?;
    let slopes = match (s.last.in_flight, s.last.latency) {
        (Some(f), Some(l)) => format!(" (in flight {:+.2}/s, latency {:+.3} s/s)", f.slope, l.slope),
        (Some(f), None) => format!(" (in flight {:+.2}/s)", f.slope),
        _ => String::new(),
    };
    Some(match s.at_s {
        Some(at) => format!("SATURATED: in-flight requests and latency kept rising; marked at {at:.1} s{slopes}"),
        None => format!("Over-saturation: not marked over {} windows{slopes}", s.windows),
    })
}

/// `rows` under `headers`, each column as wide as its widest cell.
fn aligned(headers: &[String], rows: &[Vec<String>], out: &mut String) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String], out: &mut String| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(text, "{cell:<w$}");
            } else {
                let _ = write!(text, "  {cell:>w$}");
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(headers, out);
    for row in rows {
        line(row, out);
    }
}

pub fn print(outcome: &Outcome, title: &str, tokenizer: &str) -> String {
    let (headers, rows) = table(outcome);
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    aligned(&headers, &rows, &mut out);
    if let Some((headers, rows)) = model_table(outcome) {
        let _ = writeln!(out, "Per model (rates over the run's duration):");
        aligned(&headers, &rows, &mut out);
    }
    for note in notes(outcome, tokenizer) {
        let _ = writeln!(out, "{note}");
    }
    out
}

pub fn write_html(
    dir: &Path,
    outcome: &Outcome,
    title: &str,
    config: &serde_json::Value,
    tokenizer: &str,
) -> anyhow::Result<()> {
    let (headers, rows) = table(outcome);
    let numeric = headers.iter().enumerate().map(|(i, _)| i > 0).collect();
    let n = rows.len();
    let mut config_rows = Vec::new();
    if let Some(object) = config.as_object() {
        for (key, value) in object {
            config_rows.push([key.clone(), value.to_string()]);
        }
    }
    let label = config.get("load").and_then(serde_json::Value::as_str).unwrap_or("this run");
    let plots = match token_point(label, &outcome.summary) {
        Some(point) => token_plots(dir, &[point], title)?,
        None => Vec::new(),
    };
    let page = Page {
        title: title.to_string(),
        subtitle: format!("perfbench {} llm", env!("CARGO_PKG_VERSION")),
        config: config_rows,
        warnings: notes(outcome, tokenizer)
            .into_iter()
            .filter(|n| n.starts_with("CLIENT-LIMITED") || n.starts_with("Errors"))
            .collect(),
        plots,
        tables: vec![HtmlTable {
            id: "llm-metrics".into(),
            caption: "LLM metrics (AIPerf's definitions)".into(),
            headers,
            rows,
            numeric,
            sortable: false,
            row_classes: vec![String::new(); n],
        }],
        notes: notes(outcome, tokenizer),
    };
    let mut page = page;
    if let Some((headers, rows)) = model_table(outcome) {
        let n = rows.len();
        page.tables.push(HtmlTable {
            id: "llm-models".into(),
            caption: "Per model (rates over the run's duration)".into(),
            numeric: headers.iter().enumerate().map(|(i, _)| i > 0).collect(),
            headers,
            rows,
            sortable: false,
            row_classes: vec![String::new(); n],
        });
    }
    std::fs::write(dir.join(REPORT_HTML), render_page(&page)?)?;
    Ok(())
}
