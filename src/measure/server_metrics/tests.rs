use super::*;
use crate::measure::slices::slice;

const S: u64 = 1_000_000_000;

const VLLM: &str = "# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name=\"llm\"} 3
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name=\"llm\"} 120
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le=\"0.1\",model_name=\"llm\"} 2
vllm:e2e_request_latency_seconds_bucket{le=\"1.0\",model_name=\"llm\"} 6
vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"llm\"} 8
vllm:e2e_request_latency_seconds_sum{model_name=\"llm\"} 5.5
vllm:e2e_request_latency_seconds_count{model_name=\"llm\"} 8
";

fn labels() -> Labels {
    Labels::from([("model_name".to_string(), "llm".to_string())])
}

fn counter_text(value: f64) -> String {
    format!("# TYPE requests_total counter\nrequests_total {value}\n")
}

fn scraped(at_ns: u64, text: &str) -> Scraped {
    Scraped { at_ns, latency_ns: 1_000_000, scrape: parse(text) }
}

#[test]
fn vllm_names_with_colons_histograms_and_kinds_parse() {
    let scrape = parse(VLLM).unwrap();
    assert_eq!(scrape["vllm:num_requests_running"].kind, Kind::Gauge);
    assert_eq!(scrape["vllm:num_requests_running"].series[&labels()], Point::Value(3.0));
    assert_eq!(scrape["vllm:prompt_tokens_total"].kind, Kind::Counter);
    let Point::Histogram { buckets, sum, count } = &scrape["vllm:e2e_request_latency_seconds"].series[&labels()] else {
        panic!("a histogram");
    };
    assert_eq!(buckets, &vec![(0.1, 2.0), (1.0, 6.0), (f64::INFINITY, 8.0)]);
    assert_eq!((*sum, *count), (5.5, 8.0));
    assert_eq!(role("vllm:num_requests_waiting"), Some(Role::Queue));
    assert_eq!(role("nv_inference_pending_request_count"), Some(Role::Queue));
    assert_eq!(role("nv_gpu_utilization"), Some(Role::Gpu));
    assert_eq!(role("vllm:kv_cache_usage_perc"), Some(Role::KvCache));
    assert_eq!(unit("vllm:e2e_request_latency_seconds"), Some("seconds"));
    assert_eq!(unit("vllm:prompt_tokens_total"), Some("tokens"));
}

#[test]
fn openmetrics_counters_and_garbage() {
    let text = "# TYPE jobs counter\n# HELP jobs Jobs done.\njobs_total 4\njobs_created 1.7e9\n# EOF\n";
    let scrape = parse(text).unwrap();
    assert_eq!(scrape.get("jobs_total").map(|f| f.kind), Some(Kind::Counter), "{scrape:?}");
    assert!(!scrape.contains_key("jobs_created"));
    assert!(parse("<html>500 Internal Server Error</html>").is_err());
}

#[test]
fn a_counter_reset_gives_no_negative_rate() {
    // 100 → 150 → (server restarts) 20 → 50, one second apart.
    let scrapes: Vec<Scraped> =
        [100.0, 150.0, 20.0, 50.0].iter().enumerate().map(|(i, v)| scraped(i as u64 * S, &counter_text(*v))).collect();
    let summary = summarize("http://x/metrics", &scrapes, &[]);
    let series = &summary.metrics["requests_total"].series[0];
    let Stats::Counter(stats) = &series.stats else { panic!("a counter") };
    assert_eq!(stats.total, 50.0 + 20.0 + 30.0, "the restart counts from zero");
    assert!(stats.rate_min >= 0.0, "{stats:?}");
    assert_eq!(stats.rate_min, 20.0);
    assert!((stats.rate - 100.0 / 3.0).abs() < 1e-9);
    assert_eq!(increase(150.0, 20.0), 20.0);
    assert_eq!(increase(150.0, 160.0), 10.0);
}

#[test]
fn counters_rate_per_slice_gauges_per_slice_and_failures_counted() {
    // Requests over [0, 3 s): three one-second slices.
    let slices = slice(&[(0, S), (S, 2 * S), (2 * S, 3 * S)], S);
    assert_eq!(slices.len(), 3);
    let gauge = |v: f64| format!("# TYPE queue gauge\nqueue {v}\n{}", counter_text(v * 10.0));
    let scrapes = vec![
        scraped(0, &gauge(1.0)),
        scraped(S / 2, &gauge(3.0)),
        Scraped { at_ns: S + S / 2, latency_ns: 0, scrape: Err("connection refused".into()) },
        scraped(2 * S + S / 2, &gauge(5.0)),
        scraped(3 * S, &gauge(0.0)),
    ];
    let summary = summarize("u", &scrapes, &slices);
    assert_eq!((summary.info.total_fetches, summary.info.failed_fetches), (5, 1));
    assert_eq!(summary.info.last_error.as_deref(), Some("connection refused"));
    let queue = &summary.metrics["queue"].series[0];
    assert_eq!(queue.timeslices.len(), 2, "slice 1 had no good scrape: {:?}", queue.timeslices);
    assert_eq!(queue.timeslices[0].figures["avg"], 2.0);
    assert_eq!(queue.timeslices[1].figures["max"], 5.0);
    let counter = &summary.metrics["requests_total"].series[0];
    let totals: Vec<f64> = counter.timeslices.iter().map(|t| t.figures["total"]).collect();
    // +20 in slice 0, +20 in slice 2, then 50 → 0 is a restart: +0 at the run's last instant.
    assert_eq!(totals, vec![20.0, 0.0, 20.0]);
    assert!(counter.timeslices.iter().all(|t| t.figures["rate"] >= 0.0));
}

#[test]
fn histogram_deltas_and_percentiles() {
    let before = parse(VLLM).unwrap();
    let after_text =
        VLLM.replace("} 2\n", "} 4\n").replace("} 6\n", "} 16\n").replace("} 8\n", "} 18\n").replace("5.5", "9.5");
    let after = parse(&after_text).unwrap();
    let scrapes = vec![
        Scraped { at_ns: 0, latency_ns: 0, scrape: Ok(before) },
        Scraped { at_ns: 2 * S, latency_ns: 0, scrape: Ok(after) },
    ];
    let summary = summarize("u", &scrapes, &[]);
    let series = &summary.metrics["vllm:e2e_request_latency_seconds"].series[0];
    let Stats::Histogram(stats) = &series.stats else { panic!("a histogram") };
    assert_eq!((stats.count, stats.sum), (10, 4.0));
    assert_eq!(stats.count_rate, 5.0);
    // Deltas: 2 under 0.1 s, 8 in (0.1, 1], 0 above: the median is in the second bucket.
    let p50 = stats.p50_estimate.unwrap();
    assert!((p50 - (0.1 + 0.9 * 3.0 / 8.0)).abs() < 1e-9, "{p50}");
    assert_eq!(series.buckets.as_ref().unwrap()["+Inf"], 10);
    assert_eq!(
        bucket_quantile(&[(1.0, 0.0), (f64::INFINITY, 4.0)], 0.5),
        Some(1.0),
        "the +Inf bucket: its lower bound"
    );
}
