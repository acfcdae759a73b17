//! The gate's human summary: Markdown with one table per matched row (baseline, current, change,
//! noise, allowed change, verdict) and a list of the rows only one side has.

use std::fmt::Write as _;

use super::verdict::{GateOutcome, MetricCheck, RowCheck, Verdict};

/// Labels for the two inputs, shown in the heading (usually their file paths).
#[derive(Clone, Debug)]
pub struct Sources<'a> {
    pub baseline: &'a str,
    pub current: &'a str,
}

/// The whole summary.
pub fn render(outcome: &GateOutcome, sources: &Sources<'_>) -> String {
    let mut out = String::new();
    let regressed = outcome.regressed_rows().count();
    let status = if outcome.passed() { "PASS" } else { "FAIL" };
    let t = &outcome.thresholds;
    let _ = writeln!(out, "# perfbench gate: {status}\n");
    let _ = writeln!(out, "- baseline: `{}`\n- current: `{}`", sources.baseline, sources.current);
    let _ = writeln!(
        out,
        "- allowed: throughput drop ≤ {}%, p99 rise ≤ {}%, avg rise ≤ {}%; a change counts only \
         beyond both its allowance and the noise (the 95% interval of the difference when both rows \
         carry intervals, else the larger recorded spread of the two rows)",
        t.max_throughput_drop, t.max_p99_rise, t.max_avg_rise
    );
    let _ = writeln!(
        out,
        "- rows: {} matched, {regressed} regressed, {} only in baseline, {} only in current",
        outcome.rows.len(),
        outcome.only_in_baseline.len(),
        outcome.only_in_current.len()
    );
    for row in &outcome.rows {
        render_row(&mut out, row);
    }
    if !outcome.only_in_baseline.is_empty() || !outcome.only_in_current.is_empty() {
        let _ = writeln!(out, "\n## Unmatched rows (not gated)\n");
        for key in &outcome.only_in_baseline {
            let _ = writeln!(out, "- only in baseline: {key}");
        }
        for key in &outcome.only_in_current {
            let _ = writeln!(out, "- only in current: {key}");
        }
    }
    out
}

fn render_row(out: &mut String, row: &RowCheck) {
    let status = if row.regressed() { "REGRESSION" } else { "pass" };
    let _ = writeln!(out, "\n## {}: {status}\n", row.label());
    let _ = writeln!(out, "| metric | baseline | current | change | noise | allowed | verdict |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---|");
    for check in &row.metrics {
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.1} | {} | {} | {} ≤ {}% | {} |",
            check.metric.label(),
            check.baseline,
            check.current,
            change_text(check),
            noise_text(check.noise_pct),
            check.metric.worse_word(),
            check.limit_pct,
            verdict_text(check.verdict),
        );
    }
    let notes = row_notes(row);
    if !notes.is_empty() {
        let _ = writeln!(out, "\nNote: {}.", notes.join("; "));
    }
}

/// The signed change, e.g. `+20.0%`, or `n/a` when the baseline is 0.
pub fn change_text(check: &MetricCheck) -> String {
    check.change_pct.map_or_else(|| "n/a".to_string(), |c| format!("{c:+.1}%"))
}

fn verdict_text(verdict: Verdict) -> String {
    match verdict {
        Verdict::Regressed => format!("**{}**", verdict.label()),
        other => other.label().to_string(),
    }
}

/// Facts about a row that do not change its verdict but that a reader should see.
fn row_notes(row: &RowCheck) -> Vec<String> {
    let mut notes = Vec::new();
    for (side, r) in [("baseline", &row.baseline), ("current", &row.current)] {
        if !r.stable {
            notes.push(format!("the {side} row did not reach stability"));
        }
        if r.failed > 0 {
            notes.push(format!("the {side} row had {} failed requests", r.failed));
        }
    }
    notes
}

/// `±3.2%`, or `low sample` for a percentile that rests on too few requests to be judged.
fn noise_text(noise_pct: f64) -> String {
    if noise_pct.is_infinite() {
        "low sample".to_string()
    } else {
        format!("±{noise_pct:.1}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::verdict::{compare, tests::row};
    use crate::gate::GateThresholds;
    use crate::results::ReportRow;

    #[test]
    fn summary_has_a_table_per_row_and_lists_unmatched_rows() {
        let base = [row(1, 1000.0, 900.0, 800.0), row(2, 1000.0, 900.0, 800.0)];
        let cur = [ReportRow { stable: false, ..row(1, 700.0, 900.0, 800.0) }, row(3, 1000.0, 900.0, 800.0)];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        let text = render(&outcome, &Sources { baseline: "base.csv", current: "cur.csv" });
        assert!(text.starts_with("# perfbench gate: FAIL"), "{text}");
        assert!(text.contains("## batch 1, concurrency 1: REGRESSION"), "{text}");
        assert!(
            text.contains("| throughput (infer/s) | 1000.0 | 700.0 | -30.0% | ±0.0% | drop ≤ 10% | **REGRESSION** |"),
            "{text}"
        );
        assert!(text.contains("- only in baseline: batch 1, concurrency 2"), "{text}");
        assert!(text.contains("- only in current: batch 1, concurrency 3"), "{text}");
        assert!(text.contains("the current row did not reach stability"), "{text}");
    }
}
