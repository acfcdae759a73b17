//! A mix's breakdown (`-m a,b`): one summary per model beside the level's total, all on the
//! level's one clock, so each model's requests/s and tokens/s are its share of the total's and
//! the rows add up to it.

use super::metrics::{self, MetricValue, Record, Slos, Summary};

/// One model's part of a level.
pub struct ModelPart {
    pub model: String,
    pub summary: Summary,
}

/// The models the records were sent to, by name (none: not a mix).
pub fn models(records: &[Record]) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = records.iter().filter_map(|r| r.model.as_ref()).collect();
    names.into_iter().cloned().collect()
}

/// Each model's summary, its rates over the total's duration (not its own requests' span).
pub fn split(records: &[Record], total: &Summary, slos: Option<&Slos>, streaming: bool) -> Vec<ModelPart> {
    let seconds = total.duration.as_secs_f64();
    models(records)
        .into_iter()
        .map(|model| {
            let own: Vec<Record> = records.iter().filter(|r| r.model.as_ref() == Some(&model)).cloned().collect();
            let mut summary = metrics::summarize(&own, slos, streaming);
            let single = |s: &Summary, tag| match s.get(tag) {
                Some(MetricValue::Single(v)) => *v,
                _ => 0.0,
            };
            let per_second = |n: f64| if seconds > 0.0 { n / seconds } else { 0.0 };
            let rates = [
                ("request_throughput", per_second(single(&summary, "request_count"))),
                ("output_token_throughput", per_second(single(&summary, "total_osl"))),
                ("goodput", per_second(single(&summary, "good_request_count"))),
                ("benchmark_duration", seconds),
            ];
            for metric in summary.metrics.iter_mut() {
                if let Some((_, value)) = rates.iter().find(|(tag, _)| *tag == metric.tag) {
                    metric.value = MetricValue::Single(*value);
                }
            }
            summary.duration = total.duration;
            ModelPart { model, summary }
        })
        .collect()
}

/// The figures that must add up over the models to the total's.
pub const ADDITIVE: [&str; 5] =
    ["request_count", "error_request_count", "total_osl", "request_throughput", "output_token_throughput"];

/// Whether the parts add up to the total (counts exactly, rates within rounding); the first
/// figure that does not, otherwise.
pub fn check_sums(parts: &[ModelPart], total: &Summary) -> Result<(), String> {
    if parts.is_empty() {
        return Ok(()); // not a mix: the total is the only row
    }
    let value = |s: &Summary, tag| match s.get(tag) {
        Some(MetricValue::Single(v)) => *v,
        _ => 0.0,
    };
    for tag in ADDITIVE {
        let sum: f64 = parts.iter().map(|p| value(&p.summary, tag)).sum();
        let whole = value(total, tag);
        if (sum - whole).abs() > 1e-9 * whole.abs().max(1.0) {
            return Err(format!("the models' {tag} add up to {sum}, the total is {whole}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::genai::metrics::{Chunk, ErrorKind};
    use std::time::{Duration, Instant};

    fn record(t0: Instant, model: &str, start_ms: u64, end_ms: u64, tokens: u64, failed: bool) -> Record {
        let mut r = Record::started(t0 + Duration::from_millis(start_ms), None);
        r.model = Some(model.into());
        r.end = t0 + Duration::from_millis(end_ms);
        r.chunks.push(Chunk { at: r.end, tokens: tokens as u32, reasoning: false });
        r.output_tokens = Some(tokens);
        r.input_tokens = Some(10);
        if failed {
            r.error = Some((ErrorKind::Status(500), "boom".into()));
        }
        r
    }

    fn mixed() -> Vec<Record> {
        let t0 = Instant::now();
        vec![
            record(t0, "a", 0, 100, 8, false),
            record(t0, "b", 50, 900, 30, false),
            record(t0, "a", 200, 300, 8, false),
            record(t0, "a", 400, 450, 0, true),
            record(t0, "b", 500, 2000, 40, false),
        ]
    }

    #[test]
    fn each_model_has_its_rows_and_they_add_up_to_the_total() {
        let records = mixed();
        let total = metrics::summarize(&records, None, false);
        let parts = split(&records, &total, None, false);
        assert_eq!(parts.iter().map(|p| p.model.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        let count = |s: &Summary, tag| match s.get(tag) {
            Some(MetricValue::Single(v)) => *v,
            _ => f64::NAN,
        };
        assert_eq!(count(&parts[0].summary, "request_count"), 2.0);
        assert_eq!(count(&parts[0].summary, "error_request_count"), 1.0);
        assert_eq!(count(&parts[1].summary, "request_count"), 2.0);
        // One clock: b's rate is its 2 requests over the level's 2 s, not over its own span.
        assert!((count(&parts[1].summary, "request_throughput") - 1.0).abs() < 1e-9);
        check_sums(&parts, &total).unwrap();
    }

    #[test]
    fn rows_that_do_not_add_up_are_caught() {
        let records = mixed();
        let total = metrics::summarize(&records, None, false);
        // Each model over its own span (the mistake this module exists to avoid) overstates b.
        let own_clock: Vec<ModelPart> = models(&records)
            .into_iter()
            .map(|m| {
                let own: Vec<Record> =
                    records.iter().filter(|r| r.model.as_deref() == Some(m.as_str())).cloned().collect();
                ModelPart { model: m, summary: metrics::summarize(&own, None, false) }
            })
            .collect();
        let err = check_sums(&own_clock, &total).unwrap_err();
        assert!(err.contains("request_throughput"), "{err}");
        // A request lost from one model's rows is caught too.
        let mut parts = split(&records, &total, None, false);
        parts.pop();
        assert!(check_sums(&parts, &total).unwrap_err().contains("request_count"));
    }
}
