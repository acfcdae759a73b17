//! `perfbench gate`: decides whether a run regressed against a baseline, so CI can fail a
//! deployment that got slower without failing on noise. The rule lives in [`verdict`]; this module
//! owns the command line, the errors and the exit codes (0 pass, 1 regression, 2 bad input).

pub mod junit;
pub mod markdown;
pub mod results;
pub mod thresholds;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::results::composing_csv::{self, ComposingRow};

pub use markdown::Sources;
pub use results::read_results;
pub use thresholds::{GateThresholds, ThresholdFlags};
pub use verdict::{compare, compare_composing, GateOutcome, Metric, MetricCheck, RowCheck, RowKey, Verdict};

/// Exit code when at least one row regressed (bad input exits with `cli::EXIT_BAD_INPUT`, 2).
pub const EXIT_REGRESSION: u8 = 1;

/// Compare a run with a baseline; exit 0 on pass, 1 on regression, 2 on bad input.
#[derive(Args, Debug, Clone)]
pub struct GateArgs {
    /// Results of the reference run: a perf_analyzer CSV or a perfbench report.csv.
    #[arg(long, value_name = "BASE.csv")]
    pub baseline: PathBuf,
    /// Results of the run under test, in either format.
    #[arg(long, value_name = "CUR.csv")]
    pub current: PathBuf,
    /// Take thresholds from this scenario's `[gate]` table; the flags below override it.
    #[arg(long, value_name = "SCENARIO.toml")]
    pub scenario: Option<PathBuf>,
    #[command(flatten)]
    pub thresholds: ThresholdFlags,
    /// Also gate this composing model of an ensemble (repeatable): its average server time per
    /// point, from the `composing.csv` beside each results file, under --max-avg-rise.
    #[arg(long = "composing-model", value_name = "MODEL")]
    pub composing_models: Vec<String>,
    /// Batch size of the rows of a CSV without a `Batch` column (perf_analyzer's format).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub batch: u64,
    /// Also write the Markdown summary to this file.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write JUnit XML (one testcase per row) to this file, for CI test reporters.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// Everything that makes the gate's input unusable; each maps to exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The file is missing or unreadable: check the path. (The cause is the error's source, so
    /// the CLI's one-line chain shows it once.)
    #[error("cannot read {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// The CSV is not a results table (wrong columns, a bad cell, no rows).
    #[error("{}: {problem}", path.display())]
    Results { path: PathBuf, problem: String },
    /// The scenario's `[gate]` table has an unknown field or a value of the wrong type.
    #[error("{}: bad [gate] table: {message}", path.display())]
    Scenario { path: PathBuf, message: String },
    /// A threshold is negative or not a number.
    #[error("threshold {name} = {value}: expected a percentage >= 0")]
    BadThreshold { name: &'static str, value: f64 },
    /// One file has two rows for the same point, so matching would be ambiguous.
    #[error("the {side} results have two rows for {key}")]
    DuplicateRow { side: &'static str, key: String },
    /// The two runs swept different points (batch, concurrency or request rate).
    #[error("no row of the current results matches a baseline row (only in baseline: {baseline}; only in current: {current})")]
    NoMatchingRows { baseline: String, current: String },
    /// The summary or JUnit file could not be written.
    #[error("cannot write {}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

impl GateArgs {
    /// The scenario's `[gate]` table (or the defaults), with the flags given on top.
    pub fn thresholds(&self) -> Result<GateThresholds, GateError> {
        let base = match &self.scenario {
            Some(path) => GateThresholds::from_scenario_file(path)?,
            None => GateThresholds::default(),
        };
        self.thresholds.over(base)
    }
}

/// Where the gate's reports go besides stdout.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outputs<'a> {
    pub markdown: Option<&'a Path>,
    pub junit: Option<&'a Path>,
}

/// `perfbench gate`: parse and validate everything first, then compare and report.
pub fn run(args: &GateArgs) -> Result<ExitCode, GateError> {
    let thresholds = args.thresholds()?;
    let baseline = read_results(&args.baseline, args.batch)?;
    let current = read_results(&args.current, args.batch)?;
    let mut outcome = compare(&baseline, &current, &thresholds)?;
    if !args.composing_models.is_empty() {
        let baseline_composing = read_composing(&args.baseline)?;
        let current_composing = read_composing(&args.current)?;
        for model in &args.composing_models {
            for (side, rows, path) in
                [("baseline", &baseline_composing, &args.baseline), ("current", &current_composing, &args.current)]
            {
                if !rows.iter().any(|r| &r.model == model) {
                    return Err(GateError::Results {
                        path: composing_csv::for_table(path),
                        problem: format!("the {side} results have no rows for composing model {model}"),
                    });
                }
            }
            outcome.rows.extend(compare_composing(model, &baseline_composing, &current_composing, &thresholds)?);
        }
    }
    let (baseline_name, current_name) = (args.baseline.display().to_string(), args.current.display().to_string());
    let sources = Sources { baseline: &baseline_name, current: &current_name };
    let outputs = Outputs { markdown: args.markdown.as_deref(), junit: args.junit.as_deref() };
    report(&outcome, &sources, outputs)
}

/// Prints the Markdown summary, writes the requested files, says the verdict in one line on
/// stderr and returns the exit code. `perfbench run --gate` ends the same way.
pub fn report(outcome: &GateOutcome, sources: &Sources<'_>, outputs: Outputs<'_>) -> Result<ExitCode, GateError> {
    let summary = markdown::render(outcome, sources);
    print!("{summary}");
    if let Some(path) = outputs.markdown {
        write_file(path, &summary)?;
    }
    if let Some(path) = outputs.junit {
        write_file(path, &junit::render(outcome))?;
    }
    for line in client_limited_warnings(outcome) {
        eprintln!("{line}");
    }
    eprintln!("{}", verdict_line(outcome));
    Ok(if outcome.passed() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_REGRESSION) })
}

/// A warning per compared row that the load generator limited (on either side): its numbers
/// measure the client as much as the server.
pub fn client_limited_warnings(outcome: &GateOutcome) -> Vec<String> {
    let mut lines = Vec::new();
    for row in &outcome.rows {
        for (side, r) in [("baseline", &row.baseline), ("current", &row.current)] {
            let limits = r.client_limits();
            if !limits.is_empty() {
                lines.push(format!("gate: warning: {} ({side}) is client-limited: {}", row.label(), limits.join("; ")));
            }
        }
    }
    lines
}

/// The verdict in one line, naming the first regressions.
pub fn verdict_line(outcome: &GateOutcome) -> String {
    let matched = outcome.rows.len();
    let unmatched = outcome.only_in_baseline.len() + outcome.only_in_current.len();
    let regressed: Vec<String> = outcome
        .regressed_rows()
        .map(|row| {
            let metrics: Vec<String> =
                row.regressions().map(|m| format!("{} {}", m.metric.label(), markdown::change_text(m))).collect();
            format!("{} ({})", row.label(), metrics.join(", "))
        })
        .collect();
    if regressed.is_empty() {
        format!("gate: pass ({matched} rows matched, {unmatched} unmatched)")
    } else {
        format!("gate: REGRESSION in {} of {matched} rows: {}", regressed.len(), regressed.join("; "))
    }
}

/// The composing rows beside a results file (`composing.csv` in its folder, or `X.composing.csv`).
fn read_composing(results: &Path) -> Result<Vec<ComposingRow>, GateError> {
    let path = composing_csv::for_table(results);
    composing_csv::read(&path).map_err(|e| GateError::Results { path, problem: e.to_string() })
}

fn write_file(path: &Path, text: &str) -> Result<(), GateError> {
    std::fs::write(path, text).map_err(|source| GateError::Write { path: path.to_path_buf(), source })
}
