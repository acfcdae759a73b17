//! A server's Prometheus metrics over a run (`--server-metrics`): each scrape's text parsed by
//! `prom_text_format_parser` (Prometheus text and OpenMetrics, names with colons), then every
//! series summed up as AIPerf 0.13 does in `server_metrics_export.json`: counters as totals and
//! rates (a value that goes down is a restart, counted from zero, never a negative rate),
//! gauges as statistics of their samples, histograms as deltas with percentiles estimated from
//! the buckets; each also per time slice. Pure: texts and instants in, summaries out.

use std::collections::BTreeMap;

use prom_text_format_parser::{Type, ValueType};
use serde::Serialize;

use super::slices::{slice_at, Slice};

/// A series' labels (a histogram's `le` left out), sorted.
pub type Labels = BTreeMap<String, String>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    /// Untyped series, kept as gauges (AIPerf's `unknown`).
    Unknown,
}

/// One series' value in one scrape.
#[derive(Clone, Debug, PartialEq)]
pub enum Point {
    Value(f64),
    /// Cumulative counts per upper bound (`le`, ascending, `+Inf` last), the sum and the count.
    Histogram {
        buckets: Vec<(f64, f64)>,
        sum: f64,
        count: f64,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub kind: Kind,
    pub help: String,
    pub series: BTreeMap<Labels, Point>,
}

/// One scrape's families by name.
pub type Scrape = BTreeMap<String, Family>;

/// Parses one `/metrics` answer. Summaries and OpenMetrics' `_created` series are left out; an
/// untyped `*_total` (an OpenMetrics counter whose TYPE line names its base) is a counter.
pub fn parse(text: &str) -> Result<Scrape, String> {
    let (metrics, error) = prom_text_format_parser::parse_scrape(text);
    if metrics.is_empty() {
        if let Some(error) = error {
            return Err(format!("not Prometheus text: {}", one_line(&format!("{error:?}"))));
        }
    }
    let mut scrape = Scrape::new();
    for metric in metrics {
        let kind = match metric.kind {
            Type::Counter => Kind::Counter,
            Type::Gauge => Kind::Gauge,
            Type::Histogram => Kind::Histogram,
            Type::Summary => continue,
            Type::Untyped if metric.name.ends_with("_created") => continue,
            Type::Untyped if metric.name.ends_with("_total") => Kind::Counter,
            Type::Untyped => Kind::Unknown,
        };
        let family = scrape.entry(metric.name.clone()).or_insert_with(|| Family {
            kind,
            help: metric.help_desc.clone().unwrap_or_default(),
            series: BTreeMap::new(),
        });
        for sample in &metric.samples {
            let value = sample.value.value.parse::<f64>().unwrap_or(f64::NAN);
            let mut labels: Labels = sample.labels.iter().map(|l| (l.key.clone(), l.value.clone())).collect();
            if kind != Kind::Histogram {
                family.series.insert(labels, Point::Value(value));
                continue;
            }
            let le = labels.remove("le");
            let point =
                family.series.entry(labels).or_insert(Point::Histogram { buckets: Vec::new(), sum: 0.0, count: 0.0 });
            let Point::Histogram { buckets, sum, count } = point else { continue };
            match (sample.value.value_type, le) {
                (ValueType::Sum, _) => *sum = value,
                (ValueType::Count, _) => *count = value,
                (ValueType::Sample, Some(le)) => buckets.push((le.parse().unwrap_or(f64::INFINITY), value)),
                (ValueType::Sample, None) => {}
            }
        }
    }
    for family in scrape.values_mut() {
        for point in family.series.values_mut() {
            if let Point::Histogram { buckets, .. } = point {
                buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
    }
    Ok(scrape)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(200).collect()
}

/// What a series of the run is good for in a report, from Triton's (`nv_*`), vLLM's (`vllm:*`)
/// and DCGM's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Queue,
    Running,
    KvCache,
    Batch,
    Gpu,
}

pub fn role(name: &str) -> Option<Role> {
    Some(match name {
        "vllm:num_requests_waiting" | "nv_inference_pending_request_count" => Role::Queue,
        "vllm:num_requests_running" | "nv_trt_llm_request_metrics" => Role::Running,
        "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" | "nv_trt_llm_kv_cache_block_metrics" => Role::KvCache,
        "vllm:iteration_tokens_total" | "nv_inference_exec_count" | "nv_trt_llm_inflight_batcher_metrics" => {
            Role::Batch
        }
        n if n.starts_with("nv_gpu_") || n.starts_with("DCGM_FI_DEV_") || n.starts_with("nv_energy") => Role::Gpu,
        _ => return None,
    })
}

/// The unit a metric's name ends with (Prometheus' naming rules), as AIPerf shows it.
pub fn unit(name: &str) -> Option<&'static str> {
    let base = name.strip_suffix("_total").unwrap_or(name);
    [
        ("_seconds", "seconds"),
        ("_milliseconds", "milliseconds"),
        ("_us", "microseconds"),
        ("_bytes", "bytes"),
        ("_tokens", "tokens"),
        ("_requests", "requests"),
        ("_perc", "ratio"),
        ("_percent", "percent"),
        ("_watts", "watts"),
        ("_joules", "joules"),
    ]
    .into_iter()
    .find(|(suffix, _)| base.ends_with(suffix))
    .map(|(_, unit)| unit)
}

/// One scrape of one endpoint: when it was answered and what it said.
#[derive(Clone, Debug)]
pub struct Scraped {
    pub at_ns: u64,
    pub latency_ns: u64,
    pub scrape: Result<Scrape, String>,
}

/// AIPerf's statistics of a gauge's samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GaugeStats {
    pub avg: f64,
    pub min: f64,
    pub max: f64,
    pub std: f64,
    pub p1: f64,
    pub p5: f64,
    pub p10: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CounterStats {
    /// Increase over the run (restarts counted from zero).
    pub total: f64,
    /// `total` per second of the run.
    pub rate: f64,
    pub rate_avg: f64,
    pub rate_min: f64,
    pub rate_max: f64,
    pub rate_std: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HistogramStats {
    pub count: u64,
    pub sum: f64,
    pub avg: f64,
    pub count_rate: f64,
    pub sum_rate: f64,
    pub p50_estimate: Option<f64>,
    pub p90_estimate: Option<f64>,
    pub p95_estimate: Option<f64>,
    pub p99_estimate: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Stats {
    Gauge(GaugeStats),
    Counter(CounterStats),
    Histogram(HistogramStats),
}

/// One series' figures within one time slice.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SliceFigures {
    pub start_ns: u64,
    pub end_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_complete: Option<bool>,
    #[serde(flatten)]
    pub figures: BTreeMap<&'static str, f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    pub endpoint_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    pub stats: Stats,
    /// A histogram's count per upper bound over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<BTreeMap<String, u64>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeslices: Vec<SliceFigures>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricSummary {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<&'static str>,
    pub series: Vec<Series>,
}

/// How one endpoint's scraping went.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EndpointInfo {
    pub total_fetches: usize,
    /// Fetches that failed (no answer, an error status, text that does not parse).
    pub failed_fetches: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub first_fetch_ns: u64,
    pub last_fetch_ns: u64,
    pub avg_fetch_latency_ms: f64,
}

/// An endpoint's metrics over the run, keyed by metric name.
pub struct EndpointSummary {
    pub url: String,
    pub info: EndpointInfo,
    pub metrics: BTreeMap<String, MetricSummary>,
}

/// Sums up one endpoint's scrapes (in time order) over the run, per slice when `slices` has any.
pub fn summarize(url: &str, scrapes: &[Scraped], slices: &[Slice]) -> EndpointSummary {
    let good: Vec<(u64, &Scrape)> =
        scrapes.iter().filter_map(|s| s.scrape.as_ref().ok().map(|x| (s.at_ns, x))).collect();
    let failed = scrapes.iter().filter(|s| s.scrape.is_err()).count();
    let info = EndpointInfo {
        total_fetches: scrapes.len(),
        failed_fetches: failed,
        last_error: scrapes.iter().rev().find_map(|s| s.scrape.as_ref().err().cloned()),
        first_fetch_ns: scrapes.first().map_or(0, |s| s.at_ns),
        last_fetch_ns: scrapes.last().map_or(0, |s| s.at_ns),
        avg_fetch_latency_ms: if scrapes.is_empty() {
            0.0
        } else {
            scrapes.iter().map(|s| s.latency_ns as f64).sum::<f64>() / scrapes.len() as f64 / 1e6
        },
    };
    let mut metrics: BTreeMap<String, MetricSummary> = BTreeMap::new();
    let mut keys: BTreeMap<(String, Labels), ()> = BTreeMap::new();
    for (_, scrape) in &good {
        for (name, family) in scrape.iter() {
            metrics.entry(name.clone()).or_insert_with(|| MetricSummary {
                kind: family.kind,
                description: family.help.clone(),
                unit: unit(name),
                series: Vec::new(),
            });
            for labels in family.series.keys() {
                keys.insert((name.clone(), labels.clone()), ());
            }
        }
    }
    for (name, labels) in keys.into_keys() {
        let points: Vec<(u64, &Point)> =
            good.iter().filter_map(|(at, s)| Some((*at, s.get(&name)?.series.get(&labels)?))).collect();
        let metric = metrics.get_mut(&name).expect("entered above");
        let series = match metric.kind {
            Kind::Counter => counter(&points, slices),
            Kind::Gauge | Kind::Unknown => gauge(&points, slices),
            Kind::Histogram => histogram(&points, slices),
        };
        if let Some((stats, buckets, timeslices)) = series {
            let labels = (!labels.is_empty()).then_some(labels);
            metric.series.push(Series { endpoint_url: url.to_string(), labels, stats, buckets, timeslices });
        }
    }
    metrics.retain(|_, m| !m.series.is_empty());
    EndpointSummary { url: url.to_string(), info, metrics }
}

type SeriesParts = (Stats, Option<BTreeMap<String, u64>>, Vec<SliceFigures>);

fn value(point: &Point) -> Option<f64> {
    match point {
        Point::Value(v) if v.is_finite() => Some(*v),
        _ => None,
    }
}

/// The increase from `before` to `after`: a value that went down is a restart, counted from 0.
pub fn increase(before: f64, after: f64) -> f64 {
    if after >= before {
        after - before
    } else {
        after.max(0.0)
    }
}

fn slice_figures(
    slices: &[Slice],
    mut figures: impl FnMut(&Slice) -> Option<BTreeMap<&'static str, f64>>,
) -> Vec<SliceFigures> {
    slices
        .iter()
        .filter_map(|s| {
            Some(SliceFigures {
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                is_complete: (!s.complete).then_some(false),
                figures: figures(s)?,
            })
        })
        .collect()
}

fn in_slice(slices: &[Slice], at_ns: u64, slice: &Slice) -> bool {
    slice_at(slices, at_ns).is_some_and(|i| slices[i].start_ns == slice.start_ns)
}

fn counter(points: &[(u64, &Point)], slices: &[Slice]) -> Option<SeriesParts> {
    let values: Vec<(u64, f64)> = points.iter().filter_map(|(at, p)| Some((*at, value(p)?))).collect();
    let (first, last) = (values.first()?.0, values.last()?.0);
    // Each step's increase, at the instant of its later scrape.
    let steps: Vec<(u64, f64, f64)> = values
        .windows(2)
        .map(|w| (w[1].0, increase(w[0].1, w[1].1), (w[1].0.saturating_sub(w[0].0)) as f64 / 1e9))
        .collect();
    let total: f64 = steps.iter().map(|s| s.1).sum();
    let seconds = (last - first) as f64 / 1e9;
    let rates: Vec<f64> = steps.iter().filter(|s| s.2 > 0.0).map(|s| s.1 / s.2).collect();
    let spread = GaugeStats::of(&rates).unwrap_or_default();
    let stats = CounterStats {
        total,
        rate: if seconds > 0.0 { total / seconds } else { 0.0 },
        rate_avg: spread.avg,
        rate_min: spread.min,
        rate_max: spread.max,
        rate_std: spread.std,
    };
    let timeslices = slice_figures(slices, |slice| {
        let total: f64 = steps.iter().filter(|s| in_slice(slices, s.0, slice)).map(|s| s.1).sum();
        let rate = if slice.seconds() > 0.0 { total / slice.seconds() } else { 0.0 };
        Some(BTreeMap::from([("total", total), ("rate", rate)]))
    });
    Some((Stats::Counter(stats), None, timeslices))
}

fn gauge(points: &[(u64, &Point)], slices: &[Slice]) -> Option<SeriesParts> {
    let values: Vec<(u64, f64)> = points.iter().filter_map(|(at, p)| Some((*at, value(p)?))).collect();
    let all: Vec<f64> = values.iter().map(|v| v.1).collect();
    let stats = GaugeStats::of(&all)?;
    let timeslices = slice_figures(slices, |slice| {
        let inside: Vec<f64> = values.iter().filter(|v| in_slice(slices, v.0, slice)).map(|v| v.1).collect();
        let s = GaugeStats::of(&inside)?;
        Some(BTreeMap::from([("avg", s.avg), ("min", s.min), ("max", s.max)]))
    });
    Some((Stats::Gauge(stats), None, timeslices))
}

/// A histogram's change up to one scrape: cumulative counts per bound, sum and count.
#[derive(Clone, Debug, Default)]
struct Change {
    at_ns: u64,
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

/// A histogram's change between two scrapes (a count that went down is a restart: the later
/// scrape counts from zero).
fn histogram_step(before: &Point, (at_ns, after): (u64, &Point)) -> Option<Change> {
    let (Point::Histogram { buckets: b0, sum: s0, count: c0 }, Point::Histogram { buckets: b1, sum: s1, count: c1 }) =
        (before, after)
    else {
        return None;
    };
    if c1 < c0 || b0.len() != b1.len() {
        return Some(Change { at_ns, buckets: b1.clone(), sum: *s1, count: *c1 });
    }
    let buckets = b0.iter().zip(b1).map(|(a, b)| (b.0, increase(a.1, b.1))).collect();
    Some(Change { at_ns, buckets, sum: s1 - s0, count: c1 - c0 })
}

/// The `q` quantile (0..1) of cumulative bucket counts, interpolated linearly within a bucket
/// (Prometheus' `histogram_quantile`); the highest finite bound for the `+Inf` bucket.
pub fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, cumulative) in buckets {
        if cumulative >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = cumulative - below;
            let fraction = if inside > 0.0 { (rank - below) / inside } else { 1.0 };
            return Some(lower + (le - lower) * fraction);
        }
        (lower, below) = (le, cumulative);
    }
    Some(lower)
}

fn add_steps(steps: &[&Change]) -> Option<Change> {
    let mut total =
        Change { buckets: steps.first()?.buckets.iter().map(|b| (b.0, 0.0)).collect(), ..Change::default() };
    for step in steps {
        if step.buckets.len() == total.buckets.len() {
            for (b, s) in total.buckets.iter_mut().zip(&step.buckets) {
                b.1 += s.1;
            }
        }
        total.sum += step.sum;
        total.count += step.count;
    }
    Some(total)
}

fn histogram(points: &[(u64, &Point)], slices: &[Slice]) -> Option<SeriesParts> {
    let (first, last) = (points.first()?.0, points.last()?.0);
    let steps: Vec<Change> = points.windows(2).filter_map(|w| histogram_step(w[0].1, w[1])).collect();
    let seconds = (last - first) as f64 / 1e9;
    let per_second = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
    let Change { buckets, sum, count, .. } = add_steps(&steps.iter().collect::<Vec<_>>()).unwrap_or_default();
    let stats = HistogramStats {
        count: count as u64,
        sum,
        avg: if count > 0.0 { sum / count } else { 0.0 },
        count_rate: per_second(count),
        sum_rate: per_second(sum),
        p50_estimate: bucket_quantile(&buckets, 0.50),
        p90_estimate: bucket_quantile(&buckets, 0.90),
        p95_estimate: bucket_quantile(&buckets, 0.95),
        p99_estimate: bucket_quantile(&buckets, 0.99),
    };
    let by_bound = buckets.iter().map(|(le, n)| (bound_name(*le), *n as u64)).collect();
    let timeslices = slice_figures(slices, |slice| {
        let inside: Vec<&Change> = steps.iter().filter(|s| in_slice(slices, s.at_ns, slice)).collect();
        let Change { buckets, sum, count, .. } = add_steps(&inside)?;
        let mut figures =
            BTreeMap::from([("count", count), ("sum", sum), ("avg", if count > 0.0 { sum / count } else { 0.0 })]);
        for (name, q) in [("p50_estimate", 0.5), ("p90_estimate", 0.9), ("p99_estimate", 0.99)] {
            if let Some(v) = bucket_quantile(&buckets, q) {
                figures.insert(name, v);
            }
        }
        Some(figures)
    });
    Some((Stats::Histogram(stats), Some(by_bound), timeslices))
}

fn bound_name(le: f64) -> String {
    if le.is_infinite() {
        "+Inf".into()
    } else {
        le.to_string()
    }
}

impl GaugeStats {
    pub fn of(values: &[f64]) -> Option<GaugeStats> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len() as f64;
        let avg = sorted.iter().sum::<f64>() / n;
        let std = (sorted.iter().map(|v| (v - avg).powi(2)).sum::<f64>() / n).sqrt();
        let p = |q: f64| {
            let rank = q / 100.0 * (sorted.len() - 1) as f64;
            let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        };
        Some(GaugeStats {
            avg,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            std,
            p1: p(1.0),
            p5: p(5.0),
            p10: p(10.0),
            p25: p(25.0),
            p50: p(50.0),
            p75: p(75.0),
            p90: p(90.0),
            p95: p(95.0),
            p99: p(99.0),
        })
    }
}

#[cfg(test)]
mod tests;
