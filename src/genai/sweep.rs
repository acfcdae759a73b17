//! A generative sweep (`perfbench llm --concurrency 1,8,32`, `perfbench online --endpoint-type
//! chat`): one profile per load level, each with its own AIPerf files in `concurrency<N>/` or
//! `request_rate<R>/`, then one row per level in report.csv, report.md and report.html, and the
//! token plots across the levels. The reports are written again after every level, so the rows
//! measured so far stay on disk when a later level fails.
//!
//! report.csv has perfbench's column names where a tensor sweep has the same quantity (the load,
//! `Inferences/Second` as requests per second, the request latency percentiles in µs), so
//! `report`, `compare` and `gate` read it as they read any report.csv, and the token columns
//! ([`TOKEN_COLUMNS`]) after them.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use super::console::{sessions, token_plots, token_point};
use super::inputs::Tokenizer;
use super::metrics::{MetricValue, Stats, Summary};
use super::runner::Schedule;
use super::{profile, LlmConfig, Outcome};
use crate::report::html::{render_page, HtmlTable, Page, REPORT_HTML};
use crate::results::csv::{
    MODEL_COLUMN, MODEL_TOTAL, REASONING_COLUMNS, REQUEST_RATE_COLUMN, SATURATED_COLUMN, SESSION_COLUMNS, TOKEN_COLUMNS,
};
use crate::results::TokenFigures;

/// The request columns before the token columns, after the load column.
const REQUEST_COLUMNS: [&str; 8] = [
    "Inferences/Second",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
    "avg latency",
    "Requests",
    "Failed",
];

/// The client's own columns, last.
const CLIENT_COLUMNS: [&str; 3] = ["Client CPU (%)", "Send Lag p99 (us)", "Client Limited"];

/// One level's outcome.
pub struct Level {
    pub schedule: Schedule,
    pub outcome: Outcome,
}

impl Level {
    /// The level's folder: `concurrency8`, `request_rate2.5`.
    pub fn folder(schedule: Schedule) -> String {
        match schedule {
            Schedule::Concurrency(n) => format!("concurrency{n}"),
            Schedule::Rate { per_second, .. } => format!("request_rate{per_second}"),
            Schedule::Trace => "trace".into(),
        }
    }

    /// The level in words: "concurrency 8", "request rate 2.5/s".
    pub fn label(&self) -> String {
        match self.schedule {
            Schedule::Concurrency(n) => format!("concurrency {n}"),
            Schedule::Rate { per_second, .. } => format!("request rate {per_second}/s"),
            Schedule::Trace => "trace".into(),
        }
    }

    /// The level on a plot: "c8", "2.5/s".
    fn short_label(&self) -> String {
        match self.schedule {
            Schedule::Concurrency(n) => format!("c{n}"),
            Schedule::Rate { per_second, .. } => format!("{per_second}/s"),
            Schedule::Trace => "trace".into(),
        }
    }

    fn load(&self) -> String {
        match self.schedule {
            Schedule::Concurrency(n) => n.to_string(),
            Schedule::Rate { per_second, .. } => per_second.to_string(),
            Schedule::Trace => String::new(),
        }
    }
}

/// This process's part of every level when a run is spread over `count` shards (`--shard`):
/// its share of the sessions or of the rate, and of the requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub index: u64,
    pub count: u64,
}

impl Part {
    /// This shard's share of `whole` things: the remainder goes to the first shards.
    pub fn share(&self, whole: u64) -> u64 {
        whole / self.count + u64::from(self.index < whole % self.count)
    }

    fn schedule(&self, whole: Schedule) -> Schedule {
        match whole {
            Schedule::Concurrency(n) => Schedule::Concurrency(self.share(n as u64) as usize),
            Schedule::Rate { per_second, poisson } => {
                Schedule::Rate { per_second: per_second / self.count as f64, poisson }
            }
            Schedule::Trace => Schedule::Trace,
        }
    }
}

/// Profiles every level in turn, each into `<artifact dir>/<level folder>`, and calls `measured`
/// with the levels so far, `kept` (levels measured before: `run --resume`) first, after each one
/// (to write the reports). Each level keeps its records (for `run --resume`, and a shard's for
/// `perfbench merge`). A shard (`part`) runs its share of each level, with prompts of its own.
pub fn run(
    config: &LlmConfig,
    schedules: &[Schedule],
    tokenizer: Arc<dyn Tokenizer>,
    part: Option<Part>,
    kept: Vec<Level>,
    mut measured: impl FnMut(&[Level]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Level>> {
    let mut done = kept;
    for &schedule in schedules {
        let mut level = config.clone();
        level.schedule = schedule;
        level.artifact_dir = config.artifact_dir.join(Level::folder(schedule));
        if let Some(part) = part {
            level.schedule = part.schedule(schedule);
            level.amount.requests = level.amount.requests.map(|n| part.share(n as u64) as usize);
            // A session stays whole, within one shard.
            level.amount.sessions = level.amount.sessions.map(|n| part.share(n as u64) as usize);
            // A file's sessions (turns, an agent's graph) go whole to one shard each.
            level.file_part = Some((part.index, part.count));
            level.seed = config.seed.wrapping_add(part.index);
        }
        std::fs::create_dir_all(&level.artifact_dir)?;
        let outcome = profile(&level, tokenizer.clone())?;
        let clock = super::export::RunInfo::now(serde_json::Value::Null);
        super::export::write_records(&level.artifact_dir, &outcome.records, &outcome.client, &clock)?;
        done.push(Level { schedule, outcome });
        measured(&done)?;
    }
    Ok(done)
}

/// A level's numbers as report.csv holds them (latencies in µs; NaN where not measured).
struct Figures {
    requests_per_s: f64,
    /// Request latency p50, p90, p95, p99 and avg, [`REQUEST_COLUMNS`]' order.
    latency_us: [f64; 5],
    requests: f64,
    failed: f64,
    tokens: TokenFigures,
    /// [`REASONING_COLUMNS`]' figures: NaN for a level whose model did not reason.
    reasoning: [f64; 6],
    cpu_pct: f64,
    send_lag_p99_us: f64,
    /// [`SESSION_COLUMNS`]' figures: NaN for a level without later turns.
    sessions: [f64; 9],
}

impl Figures {
    /// The figures of `summary`: the level's own, or one model's part of it.
    fn of(level: &Level, summary: &Summary) -> Figures {
        let single = |tag| match summary.get(tag) {
            Some(MetricValue::Single(v)) => *v,
            _ => f64::NAN,
        };
        let stat = |tag, pick: fn(&Stats) -> f64| match summary.get(tag) {
            Some(MetricValue::Distribution(s)) => pick(s),
            _ => f64::NAN,
        };
        let us = |tag, pick: fn(&Stats) -> f64| stat(tag, pick) * 1000.0;
        let count = |tag| if single(tag).is_nan() { 0.0 } else { single(tag) };
        let latency = "request_latency";
        Figures {
            requests_per_s: single("request_throughput"),
            latency_us: [
                us(latency, |s| s.p50),
                us(latency, |s| s.p90),
                us(latency, |s| s.p95),
                us(latency, |s| s.p99),
                us(latency, |s| s.avg),
            ],
            requests: count("request_count"),
            failed: count("error_request_count"),
            tokens: TokenFigures {
                ttft_avg_us: us("time_to_first_token", |s| s.avg),
                ttft_p50_us: us("time_to_first_token", |s| s.p50),
                ttft_p99_us: us("time_to_first_token", |s| s.p99),
                itl_avg_us: us("inter_token_latency", |s| s.avg),
                itl_p50_us: us("inter_token_latency", |s| s.p50),
                itl_p99_us: us("inter_token_latency", |s| s.p99),
                output_tokens_per_s: single("output_token_throughput"),
                output_tokens_per_s_per_user_p50: stat("output_token_throughput_per_user", |s| s.p50),
            },
            reasoning: [
                us("time_to_first_output_token", |s| s.avg),
                us("time_to_first_output_token", |s| s.p50),
                us("time_to_first_output_token", |s| s.p99),
                us("reasoning_inter_token_latency", |s| s.p50),
                us("output_inter_token_latency", |s| s.p50),
                stat("reasoning_token_count", |s| s.avg),
            ],
            cpu_pct: level.outcome.client.cpu_fraction * 100.0,
            send_lag_p99_us: level.outcome.client.send_lag_p99_us,
            sessions: session_figures(&level.outcome),
        }
    }
}

/// A level's [`SESSION_COLUMNS`] figures (latencies in µs).
fn session_figures(outcome: &Outcome) -> [f64; 9] {
    let streaming = outcome.summary.get("time_to_first_token").is_some();
    let Some(s) = sessions(outcome, streaming) else { return [f64::NAN; 9] };
    let us = |stats: Option<&Stats>, pick: fn(&Stats) -> f64| stats.map_or(f64::NAN, |s| pick(s) * 1000.0);
    let told: Vec<_> = outcome.records.iter().filter(|r| !r.warmup && r.ok() && r.cached_tokens.is_some()).collect();
    let cached: u64 = told.iter().filter_map(|r| r.cached_tokens).sum();
    let prompt: u64 = told.iter().filter_map(|r| r.input_tokens).sum();
    let cached_pct = if prompt == 0 { f64::NAN } else { 100.0 * cached as f64 / prompt as f64 };
    [
        us(s.first_turn.as_ref(), |s| s.p50),
        us(s.first_turn.as_ref(), |s| s.p99),
        us(s.later_turns.as_ref(), |s| s.p50),
        us(s.later_turns.as_ref(), |s| s.p99),
        s.duration_ms.p50 * 1000.0,
        s.turns.avg,
        s.input_tokens.avg + s.output_tokens.avg,
        s.sessions_per_s,
        cached_pct,
    ]
}

/// Whether any level had sessions with later turns.
fn multi_turn(levels: &[Level]) -> bool {
    levels.iter().any(|l| l.outcome.records.iter().any(|r| !r.warmup && r.turn > 0))
}

/// A number for a table cell: empty when not measured.
fn cell(value: f64, decimals: usize) -> String {
    if value.is_nan() {
        String::new()
    } else {
        format!("{value:.decimals$}")
    }
}

fn limited(level: &Level) -> &'static str {
    if level.outcome.client.reasons().is_empty() {
        "no"
    } else {
        "yes"
    }
}

fn load_column(levels: &[Level]) -> &'static str {
    match levels.first().map(|l| l.schedule) {
        Some(Schedule::Rate { .. }) => REQUEST_RATE_COLUMN,
        _ => "Concurrency",
    }
}

/// Whether any level sent to several models (`-m a,b`): a row per model beside the total.
fn mixed(levels: &[Level]) -> bool {
    levels.iter().any(|l| l.outcome.records.iter().any(|r| r.model.is_some()))
}

/// Whether the over-saturation stop watched any level: a `Saturated` column.
fn watched(levels: &[Level]) -> bool {
    levels.iter().any(|l| l.outcome.saturation.is_some())
}

fn saturated(level: &Level) -> &'static str {
    match level.outcome.saturation {
        Some(s) if s.saturated => "yes",
        Some(_) => "no",
        None => "",
    }
}

/// A level's summaries: its own (`all`), then each model's when it had several.
fn parts(level: &Level) -> Vec<(String, Summary)> {
    let outcome = &level.outcome;
    let streaming = outcome.summary.get("time_to_first_token").is_some();
    let split = super::by_model::split(&outcome.records, &outcome.summary, None, streaming);
    debug_assert_eq!(super::by_model::check_sums(&split, &outcome.summary), Ok(()), "split on one clock");
    let mut all = vec![(MODEL_TOTAL.to_string(), outcome.summary.clone())];
    all.extend(split.into_iter().map(|p| (p.model, p.summary)));
    all
}

/// Whether any level's model reasoned (its summary has reasoning counts).
fn reasoned(levels: &[Level]) -> bool {
    levels.iter().any(|l| l.outcome.summary.get("reasoning_token_count").is_some())
}

/// report.csv: perfbench's names, latencies in µs.
fn csv(levels: &[Level]) -> String {
    let reasoning: &[&str] = if reasoned(levels) { &REASONING_COLUMNS } else { &[] };
    let sessions: &[&str] = if multi_turn(levels) { &SESSION_COLUMNS } else { &[] };
    let mut headers = vec![load_column(levels)];
    headers
        .extend(REQUEST_COLUMNS.iter().chain(&TOKEN_COLUMNS).chain(reasoning).chain(sessions).chain(&CLIENT_COLUMNS));
    let (mixed, watched) = (mixed(levels), watched(levels));
    if mixed {
        headers.push(MODEL_COLUMN);
    }
    if watched {
        headers.push(SATURATED_COLUMN);
    }
    let mut out = headers.join(",");
    out.push('\n');
    for (level, (model, summary)) in levels.iter().flat_map(|l| parts(l).into_iter().map(move |p| (l, p))) {
        let f = Figures::of(level, &summary);
        let mut cells = vec![level.load(), cell(f.requests_per_s, 3)];
        cells.extend(f.latency_us.iter().map(|v| cell(*v, 3)));
        cells.extend([cell(f.requests, 0), cell(f.failed, 0)]);
        cells.extend(f.tokens.values().iter().map(|v| cell(*v, 3)));
        if !reasoning.is_empty() {
            cells.extend(f.reasoning.iter().map(|v| cell(*v, 3)));
        }
        if !sessions.is_empty() {
            cells.extend(f.sessions.iter().map(|v| cell(*v, 3)));
        }
        cells.extend([cell(f.cpu_pct, 3), cell(f.send_lag_p99_us, 3)]);
        cells.push(limited(level).into());
        if mixed {
            cells.push(model);
        }
        if watched {
            cells.push(saturated(level).into());
        }
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// The tables' columns (report.md and report.html): the latencies in ms.
const TABLE_HEADERS: [&str; 12] = [
    "load",
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

/// The tables' reasoning columns, after `ttft_p99_ms`, when a level's model reasoned.
const REASONING_TABLE_HEADERS: [&str; 2] = ["ttfot_p50_ms", "ttfot_p99_ms"];

/// The tables' session columns, last but one, when a level's sessions had later turns.
const SESSION_TABLE_HEADERS: [&str; 4] =
    ["ttft_p50_turn0_ms", "ttft_p50_later_turns_ms", "sessions_per_s", "cached_prompt_tokens_pct"];

fn table_headers(reasoning: bool, sessions: bool) -> Vec<&'static str> {
    let mut headers = TABLE_HEADERS.to_vec();
    if reasoning {
        let at = headers.iter().position(|h| *h == "ttft_p99_ms").expect("a TTFT column") + 1;
        headers.splice(at..at, REASONING_TABLE_HEADERS);
    }
    if sessions {
        let at = headers.len() - 1;
        headers.splice(at..at, SESSION_TABLE_HEADERS);
    }
    headers
}

fn table_row(level: &Level, part: &(String, Summary), reasoning: bool, sessions: bool) -> Vec<String> {
    let f = Figures::of(level, &part.1);
    let ms = |us: f64| cell(us / 1000.0, 3);
    let label = match (part.0.as_str(), saturated(level)) {
        (MODEL_TOTAL, "yes") => format!("{} (saturated)", level.label()),
        (MODEL_TOTAL, _) => level.label(),
        (model, _) => format!("{} · {model}", level.label()),
    };
    let mut row = vec![
        label,
        cell(f.requests, 0),
        cell(f.failed, 0),
        ms(f.tokens.ttft_p50_us),
        ms(f.tokens.ttft_p99_us),
        ms(f.tokens.itl_p50_us),
        ms(f.tokens.itl_p99_us),
        ms(f.latency_us[0]),
        cell(f.tokens.output_tokens_per_s, 2),
        cell(f.tokens.output_tokens_per_s_per_user_p50, 2),
        cell(f.requests_per_s, 2),
        limited(level).into(),
    ];
    if reasoning {
        row.splice(5..5, [ms(f.reasoning[1]), ms(f.reasoning[2])]);
    }
    if sessions {
        let at = row.len() - 1;
        let s = &f.sessions;
        row.splice(at..at, [ms(s[0]), ms(s[2]), cell(s[7], 2), cell(s[8], 1)]);
    }
    row
}

fn notes(levels: &[Level]) -> Vec<String> {
    let mut notes = Vec::new();
    for level in levels {
        let limits = level.outcome.client.reasons();
        if !limits.is_empty() {
            notes.push(format!("CLIENT-LIMITED at {}: {}", level.label(), limits.join("; ")));
        }
        for (kind, n) in &level.outcome.summary.errors {
            notes.push(format!("Errors at {}: {kind}: {n}", level.label()));
        }
        if let Some(note) = super::console::saturation_note(&level.outcome) {
            notes.push(format!("{}: {note}", level.label()));
        }
    }
    notes
}

/// Writes report.csv, report.md and report.html (with the token plots, also as PNG and SVG).
pub fn write_reports(dir: &Path, levels: &[Level], title: &str) -> anyhow::Result<()> {
    std::fs::write(dir.join("report.csv"), csv(levels))?;
    let (reasoning, sessions) = (reasoned(levels), multi_turn(levels));
    let headers = table_headers(reasoning, sessions);
    let rows: Vec<Vec<String>> =
        levels.iter().flat_map(|l| parts(l).into_iter().map(move |p| table_row(l, &p, reasoning, sessions))).collect();
    let notes = notes(levels);
    let mut md = format!("# {title}\n\n| {} |\n|{}\n", headers.join(" | "), "---|".repeat(headers.len()));
    for row in &rows {
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
    for note in &notes {
        let _ = write!(md, "\n{note}\n");
    }
    std::fs::write(dir.join("report.md"), md)?;

    let points: Vec<_> = levels.iter().filter_map(|l| token_point(&l.short_label(), &l.outcome.summary)).collect();
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
            caption: "One row per load level (AIPerf's metric definitions)".into(),
            numeric: headers.iter().map(|h| *h != "client_limited" && *h != "load").collect(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows,
            sortable: true,
            row_classes: vec![String::new(); n],
        }],
        notes,
    };
    std::fs::write(dir.join(REPORT_HTML), render_page(&page)?)?;
    Ok(())
}
