//! The verdict: matches baseline and current rows and decides, metric by metric, whether a row
//! got worse by more than both the threshold and the noise perfbench recorded for it.
//!
//! # The rule
//!
//! For each matched row and each gated metric (throughput, p99 latency, avg latency; and where
//! both rows come from a generative sweep, TTFT p99, ITL p99 and output tokens/s):
//!
//! 1. `change = (current − baseline) / baseline × 100`, in percent;
//! 2. `worse` is the change in the bad direction: `−change` for throughput, `change` for latency;
//! 3. `noise`, in percent of the baseline value: when both rows carry a 95% confidence interval
//!    of the metric (throughput and p99 in a report.csv from perfbench with intervals), the 95%
//!    half-width of the difference, `sqrt(b² + c²)` of the two rows' half-widths (the wider side
//!    of each); an open interval (a low-sample p99) on either side makes it infinite, so such a
//!    p99 is never judged, also against a baseline without intervals. Otherwise (avg latency,
//!    older CSVs, perf_analyzer's CSV) the larger of the two rows' recorded spreads,
//!    (max − min) / mean × 100 across their windows (0 without a spread column);
//! 4. the metric **regresses** only when `worse > threshold` **and** `worse > noise`. When
//!    `worse > threshold` but `worse ≤ noise`, the verdict is *within noise* and the row passes.
//!
//! A row regresses when any of its metrics does; the gate fails when any row regresses.
//!
//! Worked example, with `max_p99_rise = 15`: baseline p99 = 1000 µs (spread 8%), current
//! p99 = 1200 µs (spread 25%). Then change = +20%, worse = 20 > 15, noise = max(8, 25) = 25 and
//! 20 ≤ 25: *within noise*, the row passes. Had the current run recorded a 12% spread, noise
//! would be 12 and 20 > 12: a regression. With intervals instead: baseline p99 1000 ± 60 µs,
//! current 1200 ± 80 µs give noise = sqrt(60² + 80²) / 1000 = 10%, and 20 > 10: a regression.

use std::collections::HashMap;
use std::fmt;

use super::{GateError, GateThresholds};
use crate::results::composing_csv::ComposingRow;
use crate::results::{LoadPoint, ReportRow};

/// The metrics the gate checks, each with its good direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Throughput,
    P99,
    Avg,
    /// A generative row's time to first token, p99.
    TtftP99,
    /// A generative row's inter-token latency, p99.
    ItlP99,
    /// A generative row's output tokens per second.
    TokenThroughput,
}

impl Metric {
    pub const ALL: [Metric; 6] =
        [Metric::Throughput, Metric::P99, Metric::Avg, Metric::TtftP99, Metric::ItlP99, Metric::TokenThroughput];

    pub fn label(self) -> &'static str {
        match self {
            Metric::Throughput => "throughput (infer/s)",
            Metric::P99 => "p99 latency (µs)",
            Metric::Avg => "avg latency (µs)",
            Metric::TtftP99 => "TTFT p99 (µs)",
            Metric::ItlP99 => "ITL p99 (µs)",
            Metric::TokenThroughput => "output tokens/s",
        }
    }

    fn higher_is_better(self) -> bool {
        matches!(self, Metric::Throughput | Metric::TokenThroughput)
    }

    fn value(self, row: &ReportRow) -> f64 {
        let token = |pick: fn(&crate::results::TokenFigures) -> f64| row.tokens.as_ref().map_or(f64::NAN, pick);
        match self {
            Metric::Throughput => row.throughput,
            Metric::P99 => row.p99_us,
            Metric::Avg => row.avg_us,
            Metric::TtftP99 => token(|t| t.ttft_p99_us),
            Metric::ItlP99 => token(|t| t.itl_p99_us),
            Metric::TokenThroughput => token(|t| t.output_tokens_per_s),
        }
    }

    /// Whether the pair is judged on this metric: the request metrics always, a token metric
    /// where both rows measured it (a tensor sweep's rows, an embeddings endpoint's TTFT, do not).
    fn applies(self, baseline: &ReportRow, current: &ReportRow) -> bool {
        match self {
            Metric::Throughput | Metric::P99 | Metric::Avg => true,
            _ => self.value(baseline).is_finite() && self.value(current).is_finite(),
        }
    }

    /// The ± of the row's 95% interval of this metric (absolute), if it has one.
    fn plus_minus(self, row: &ReportRow) -> Option<f64> {
        let pm = match self {
            Metric::Throughput => row.throughput_ci.plus_minus(row.throughput),
            Metric::P99 => row.p99_ci.plus_minus(row.p99_us),
            _ => f64::NAN,
        };
        (!pm.is_nan()).then_some(pm)
    }

    /// The noise of a baseline/current pair, percent of the baseline (see the module docs).
    fn noise_pct(self, baseline: &ReportRow, current: &ReportRow) -> f64 {
        let base = self.value(baseline);
        let (b, c) = (self.plus_minus(baseline), self.plus_minus(current));
        // A low-sample percentile (open interval) on either side is never judged, also against
        // an older baseline that has no intervals.
        if b.is_some_and(f64::is_infinite) || c.is_some_and(f64::is_infinite) {
            return f64::INFINITY;
        }
        match (b, c) {
            (Some(b), Some(c)) if base > 0.0 => (b * b + c * c).sqrt() / base * 100.0,
            _ => self.spread_pct(baseline).max(self.spread_pct(current)),
        }
    }

    fn spread_pct(self, row: &ReportRow) -> f64 {
        match self {
            Metric::Throughput => row.throughput_spread_pct,
            Metric::P99 => row.p99_spread_pct,
            Metric::Avg => row.avg_spread_pct,
            // A generative level is one measurement: no spread across windows.
            _ => 0.0,
        }
    }

    fn limit_pct(self, thresholds: &GateThresholds) -> f64 {
        match self {
            Metric::Throughput => thresholds.max_throughput_drop,
            Metric::P99 => thresholds.max_p99_rise,
            Metric::Avg => thresholds.max_avg_rise,
            Metric::TtftP99 => thresholds.max_ttft_p99_rise,
            Metric::ItlP99 => thresholds.max_itl_p99_rise,
            Metric::TokenThroughput => thresholds.max_token_throughput_drop,
        }
    }

    /// "drop" or "rise": the bad direction, for messages.
    pub fn worse_word(self) -> &'static str {
        if self.higher_is_better() {
            "drop"
        } else {
            "rise"
        }
    }
}

/// What the rule decided for one metric of one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within the threshold.
    Ok,
    /// Better than the baseline by more than the threshold.
    Improved,
    /// Worse by more than the threshold, but not by more than the recorded noise.
    WithinNoise,
    /// Worse by more than both the threshold and the noise.
    Regressed,
    /// The baseline value is 0, so a relative change means nothing.
    NotCompared,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Improved => "improved",
            Verdict::WithinNoise => "within noise",
            Verdict::Regressed => "REGRESSION",
            Verdict::NotCompared => "not compared (baseline is 0)",
        }
    }
}

/// One metric of one matched row.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricCheck {
    pub metric: Metric,
    pub baseline: f64,
    pub current: f64,
    /// (current − baseline) / baseline × 100; `None` when the baseline is 0.
    pub change_pct: Option<f64>,
    pub noise_pct: f64,
    pub limit_pct: f64,
    pub verdict: Verdict,
}

impl MetricCheck {
    fn new(metric: Metric, baseline: &ReportRow, current: &ReportRow, thresholds: &GateThresholds) -> Self {
        let (base, cur) = (metric.value(baseline), metric.value(current));
        let noise_pct = metric.noise_pct(baseline, current);
        let limit_pct = metric.limit_pct(thresholds);
        // Multiplying first keeps round numbers exact (a 10% drop is exactly −10, not −10.000…02).
        let change_pct = (base > 0.0).then(|| (cur - base) * 100.0 / base);
        let verdict = match change_pct {
            None => Verdict::NotCompared,
            Some(change) => {
                let worse_pct = if metric.higher_is_better() { -change } else { change };
                if worse_pct > limit_pct && worse_pct > noise_pct {
                    Verdict::Regressed
                } else if worse_pct > limit_pct {
                    Verdict::WithinNoise
                } else if -worse_pct > limit_pct {
                    Verdict::Improved
                } else {
                    Verdict::Ok
                }
            }
        };
        Self { metric, baseline: base, current: cur, change_pct, noise_pct, limit_pct, verdict }
    }
}

/// Where a row sits in a sweep; rows of the two files are matched on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    pub batch: u64,
    pub load: LoadKey,
}

/// The load of a row; a request rate is keyed in milli-requests/second so that `100` and
/// `100.0` match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LoadKey {
    Concurrency(u64),
    RequestRateMilli(u64),
}

impl RowKey {
    pub fn of(row: &ReportRow) -> Self {
        let load = match row.load {
            LoadPoint::Concurrency(c) => LoadKey::Concurrency(c),
            LoadPoint::RequestRate(rate) => LoadKey::RequestRateMilli((rate * 1000.0).round() as u64),
        };
        Self { batch: row.batch, load }
    }
}

impl fmt::Display for RowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.load {
            LoadKey::Concurrency(c) => write!(f, "batch {}, concurrency {c}", self.batch),
            LoadKey::RequestRateMilli(milli) => {
                write!(f, "batch {}, request rate {}/s", self.batch, milli as f64 / 1000.0)
            }
        }
    }
}

/// One matched row and its per-metric checks.
#[derive(Clone, Debug, PartialEq)]
pub struct RowCheck {
    pub key: RowKey,
    /// The ensemble's composing model this row gates ([`compare_composing`]); `None` for a row
    /// of the results table itself.
    pub model: Option<String>,
    pub baseline: ReportRow,
    pub current: ReportRow,
    pub metrics: Vec<MetricCheck>,
}

impl RowCheck {
    /// The row's name in reports: its point, and its composing model if it has one.
    pub fn label(&self) -> String {
        match &self.model {
            Some(model) => format!("composing model {model}, {}", self.key),
            None => self.key.to_string(),
        }
    }

    pub fn regressed(&self) -> bool {
        self.regressions().next().is_some()
    }

    pub fn regressions(&self) -> impl Iterator<Item = &MetricCheck> {
        self.metrics.iter().filter(|m| m.verdict == Verdict::Regressed)
    }
}

/// Everything the gate found: the matched rows (in baseline order) and the unmatched ones.
#[derive(Clone, Debug, PartialEq)]
pub struct GateOutcome {
    pub thresholds: GateThresholds,
    pub rows: Vec<RowCheck>,
    pub only_in_baseline: Vec<RowKey>,
    pub only_in_current: Vec<RowKey>,
}

impl GateOutcome {
    pub fn passed(&self) -> bool {
        !self.rows.iter().any(RowCheck::regressed)
    }

    pub fn regressed_rows(&self) -> impl Iterator<Item = &RowCheck> {
        self.rows.iter().filter(|r| r.regressed())
    }
}

/// Matches the rows of the two runs and applies the rule to each pair. Unmatched rows are
/// reported in the outcome; it is an error only when no row matches, or when one file holds two
/// rows for the same (batch, load).
pub fn compare(
    baseline: &[ReportRow],
    current: &[ReportRow],
    thresholds: &GateThresholds,
) -> Result<GateOutcome, GateError> {
    thresholds.validate()?;
    let current_by_key = index_rows("current", current)?;
    let baseline_by_key = index_rows("baseline", baseline)?;
    let mut rows = Vec::new();
    let mut only_in_baseline = Vec::new();
    for base in baseline {
        let key = RowKey::of(base);
        match current_by_key.get(&key) {
            Some(cur) => rows.push(RowCheck {
                key,
                model: None,
                baseline: base.clone(),
                current: (*cur).clone(),
                metrics: Metric::ALL
                    .iter()
                    .filter(|m| m.applies(base, cur))
                    .map(|&m| MetricCheck::new(m, base, cur, thresholds))
                    .collect(),
            }),
            None => only_in_baseline.push(key),
        }
    }
    let only_in_current: Vec<RowKey> =
        current.iter().map(RowKey::of).filter(|key| !baseline_by_key.contains_key(key)).collect();
    if rows.is_empty() {
        return Err(GateError::NoMatchingRows {
            baseline: key_list(&only_in_baseline),
            current: key_list(&only_in_current),
        });
    }
    Ok(GateOutcome { thresholds: *thresholds, rows, only_in_baseline, only_in_current })
}

/// Gates one composing model of an ensemble: per matched point, its average time in the server
/// (queue + compute, from `composing.csv`) under the average-latency threshold. The rows are the
/// model's own, so a regression hidden in the ensemble's total is named.
pub fn compare_composing(
    model: &str,
    baseline: &[ComposingRow],
    current: &[ComposingRow],
    thresholds: &GateThresholds,
) -> Result<Vec<RowCheck>, GateError> {
    let as_rows = |side: &[ComposingRow]| -> Vec<ReportRow> {
        side.iter()
            .filter(|r| r.model == model)
            .map(|r| ReportRow {
                batch: r.batch,
                avg_us: r.queue_us + r.compute_input_us + r.compute_infer_us + r.compute_output_us,
                ..ReportRow::zeroed(r.load)
            })
            .collect()
    };
    let outcome = compare(&as_rows(baseline), &as_rows(current), thresholds)?;
    Ok(outcome
        .rows
        .into_iter()
        .map(|mut row| {
            row.model = Some(model.to_string());
            row.metrics.retain(|m| m.metric == Metric::Avg);
            row
        })
        .collect())
}

fn index_rows<'a>(side: &'static str, rows: &'a [ReportRow]) -> Result<HashMap<RowKey, &'a ReportRow>, GateError> {
    let mut by_key = HashMap::with_capacity(rows.len());
    for row in rows {
        let key = RowKey::of(row);
        if by_key.insert(key, row).is_some() {
            return Err(GateError::DuplicateRow { side, key: key.to_string() });
        }
    }
    Ok(by_key)
}

/// A short list of keys for an error message.
fn key_list(keys: &[RowKey]) -> String {
    const SHOWN: usize = 4;
    let mut text = keys.iter().take(SHOWN).map(|k| k.to_string()).collect::<Vec<_>>().join("; ");
    if keys.len() > SHOWN {
        text.push_str(&format!("; and {} more", keys.len() - SHOWN));
    }
    if text.is_empty() {
        text.push_str("none");
    }
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn token_metrics_are_judged_only_where_both_rows_have_them() {
        use crate::results::TokenFigures;
        let tokens = |ttft_p99: f64, rate: f64| {
            Some(TokenFigures::from_values([f64::NAN, f64::NAN, ttft_p99, f64::NAN, f64::NAN, 7000.0, rate, 100.0]))
        };
        let base = [ReportRow { tokens: tokens(10_000.0, 400.0), ..row(8, 20.0, 50_000.0, 45_000.0) }];
        let slower_first_token = [ReportRow { tokens: tokens(13_000.0, 395.0), ..base[0].clone() }];
        let outcome = compare(&base, &slower_first_token, &GateThresholds::default()).unwrap();
        let judged: Vec<Metric> = outcome.rows[0].metrics.iter().map(|m| m.metric).collect();
        assert_eq!(judged, Metric::ALL, "ITL p99 and tokens/s are measured on both sides");
        let regressed: Vec<Metric> = outcome.rows[0].regressions().map(|m| m.metric).collect();
        assert_eq!(regressed, [Metric::TtftP99], "+30% TTFT p99 over 15%; -1.25% tokens/s within 10%");
        let looser = GateThresholds { max_ttft_p99_rise: 40.0, ..GateThresholds::default() };
        assert!(compare(&base, &slower_first_token, &looser).unwrap().passed());
        let tensor = [row(8, 20.0, 50_000.0, 45_000.0)];
        let outcome = compare(&tensor, &slower_first_token, &GateThresholds::default()).unwrap();
        assert_eq!(outcome.rows[0].metrics.len(), 3, "a tensor row has no token metrics to compare");
    }

    /// A row with the gated metrics set and everything else neutral.
    pub(crate) fn row(concurrency: u64, throughput: f64, p99_us: f64, avg_us: f64) -> ReportRow {
        ReportRow { throughput, p99_us, avg_us, ..ReportRow::zeroed(LoadPoint::Concurrency(concurrency)) }
    }

    fn verdicts(outcome: &GateOutcome) -> Vec<Verdict> {
        outcome.rows[0].metrics.iter().map(|m| m.verdict).collect()
    }

    #[test]
    fn identical_rows_pass() {
        let rows = vec![row(1, 1000.0, 900.0, 800.0), row(2, 1800.0, 1200.0, 1000.0)];
        let outcome = compare(&rows, &rows, &GateThresholds::default()).unwrap();
        assert!(outcome.passed());
        assert_eq!(outcome.rows.len(), 2);
        assert!(outcome.rows.iter().flat_map(|r| &r.metrics).all(|m| m.verdict == Verdict::Ok));
    }

    #[test]
    fn throughput_drop_beyond_threshold_regresses() {
        let base = [row(1, 1000.0, 900.0, 800.0)];
        let cur = [row(1, 700.0, 900.0, 800.0)];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        assert!(!outcome.passed());
        let check = &outcome.rows[0].metrics[0];
        assert_eq!(check.verdict, Verdict::Regressed);
        assert!((check.change_pct.unwrap() + 30.0).abs() < 1e-9);
    }

    #[test]
    fn worked_example_from_the_module_doc() {
        let base = [ReportRow { p99_spread_pct: 8.0, ..row(1, 1000.0, 1000.0, 800.0) }];
        let noisy = [ReportRow { p99_spread_pct: 25.0, ..row(1, 1000.0, 1200.0, 800.0) }];
        let outcome = compare(&base, &noisy, &GateThresholds::default()).unwrap();
        assert_eq!(verdicts(&outcome), [Verdict::Ok, Verdict::WithinNoise, Verdict::Ok]);
        assert!(outcome.passed());

        let calmer = [ReportRow { p99_spread_pct: 12.0, ..noisy[0].clone() }];
        let outcome = compare(&base, &calmer, &GateThresholds::default()).unwrap();
        assert_eq!(verdicts(&outcome), [Verdict::Ok, Verdict::Regressed, Verdict::Ok]);
    }

    #[test]
    fn intervals_replace_spreads_when_both_rows_have_them() {
        use crate::results::Interval;
        let with = |r: ReportRow, tp: (f64, f64), p99: (f64, f64)| ReportRow {
            throughput_ci: Interval::new(tp.0, tp.1),
            p99_ci: Interval::new(p99.0, p99.1),
            p99_spread_pct: 50.0,
            throughput_spread_pct: 50.0,
            ..r
        };
        // The worked example with intervals: noise sqrt(60² + 80²) / 1000 = 10% < a 20% rise.
        let base = [with(row(1, 1000.0, 1000.0, 800.0), (990.0, 1010.0), (940.0, 1060.0))];
        let cur = [with(row(1, 1000.0, 1200.0, 800.0), (990.0, 1010.0), (1120.0, 1280.0))];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        assert!((outcome.rows[0].metrics[1].noise_pct - 10.0).abs() < 1e-9);
        assert_eq!(
            verdicts(&outcome),
            [Verdict::Ok, Verdict::Regressed, Verdict::Ok],
            "spreads of 50% no longer hide it"
        );
        // A low-sample p99 (open above) is never judged.
        let open = [with(row(1, 1000.0, 1200.0, 800.0), (990.0, 1010.0), (1100.0, f64::INFINITY))];
        let outcome = compare(&base, &open, &GateThresholds::default()).unwrap();
        assert_eq!(outcome.rows[0].metrics[1].verdict, Verdict::WithinNoise);
        // Nor against an older baseline without intervals, whose spread is small.
        let old = [ReportRow { p99_spread_pct: 1.0, ..row(1, 1000.0, 1000.0, 800.0) }];
        let outcome = compare(&old, &open, &GateThresholds::default()).unwrap();
        assert_eq!(outcome.rows[0].metrics[1].verdict, Verdict::WithinNoise);
        assert!(outcome.passed());
    }

    #[test]
    fn improvement_beyond_threshold_is_not_a_regression() {
        let base = [row(1, 1000.0, 1000.0, 800.0)];
        let cur = [row(1, 1500.0, 500.0, 800.0)];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        assert_eq!(verdicts(&outcome), [Verdict::Improved, Verdict::Improved, Verdict::Ok]);
        assert!(outcome.passed());
    }

    #[test]
    fn change_exactly_at_threshold_passes() {
        let base = [row(1, 1000.0, 1000.0, 1000.0)];
        let cur = [row(1, 900.0, 1150.0, 1150.0)];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        assert!(outcome.passed(), "{:?}", verdicts(&outcome));
    }

    #[test]
    fn unmatched_rows_are_listed_on_both_sides() {
        let base = [row(1, 1000.0, 900.0, 800.0), row(2, 1000.0, 900.0, 800.0)];
        let cur = [row(1, 1000.0, 900.0, 800.0), row(4, 1000.0, 900.0, 800.0)];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        assert_eq!(outcome.rows.len(), 1);
        assert_eq!(outcome.only_in_baseline[0].to_string(), "batch 1, concurrency 2");
        assert_eq!(outcome.only_in_current[0].to_string(), "batch 1, concurrency 4");
    }

    #[test]
    fn no_matching_row_is_an_error() {
        let base = [row(1, 1000.0, 900.0, 800.0)];
        let cur = [ReportRow { batch: 8, ..base[0].clone() }];
        let err = compare(&base, &cur, &GateThresholds::default()).unwrap_err();
        assert!(matches!(err, GateError::NoMatchingRows { .. }));
        assert!(err.to_string().contains("batch 8, concurrency 1"), "{err}");
    }

    #[test]
    fn request_rates_match_regardless_of_float_spelling() {
        let base = [ReportRow { load: LoadPoint::RequestRate(100.0), ..row(1, 100.0, 900.0, 800.0) }];
        let cur = [ReportRow { load: LoadPoint::RequestRate(100.0000001), ..base[0].clone() }];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        assert_eq!(outcome.rows[0].key.to_string(), "batch 1, request rate 100/s");
    }

    #[test]
    fn duplicate_rows_are_rejected() {
        let rows = [row(1, 1000.0, 900.0, 800.0), row(1, 1000.0, 900.0, 800.0)];
        let err = compare(&rows, &rows[..1], &GateThresholds::default()).unwrap_err();
        assert!(matches!(err, GateError::DuplicateRow { side: "baseline", .. }), "{err}");
    }

    #[test]
    fn zero_baseline_is_not_compared() {
        let base = [row(1, 0.0, 900.0, 800.0)];
        let cur = [row(1, 10.0, 900.0, 800.0)];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        assert_eq!(outcome.rows[0].metrics[0].verdict, Verdict::NotCompared);
    }
}
