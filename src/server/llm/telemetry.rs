//! The twin's own counters, gauges and histograms, rendered in vLLM's Prometheus names so tools
//! that scrape vLLM read them unchanged.

use std::fmt::Write as _;

use parking_lot::Mutex;

// Bucket bounds in seconds, as vLLM's metrics define them.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];

struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    fn observe(&mut self, seconds: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| seconds <= b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, n) in self.bounds.iter().zip(&self.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound:?}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

struct Inner {
    running: usize,
    waiting: usize,
    kv_used: usize,
    kv_capacity: usize,
    prompt_tokens: u64,
    generation_tokens: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    preemptions: u64,
    /// Finished requests by reason: stop, length.
    successes: [u64; 2],
    ttft: Histogram,
    queue: Histogram,
    itl: Histogram,
    e2e: Histogram,
}

pub struct Telemetry {
    inner: Mutex<Inner>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            inner: Mutex::new(Inner {
                running: 0,
                waiting: 0,
                kv_used: 0,
                kv_capacity: 0,
                prompt_tokens: 0,
                generation_tokens: 0,
                prefix_queries: 0,
                prefix_hits: 0,
                preemptions: 0,
                successes: [0; 2],
                ttft: Histogram::new(TTFT_BUCKETS),
                queue: Histogram::new(E2E_BUCKETS),
                itl: Histogram::new(ITL_BUCKETS),
                e2e: Histogram::new(E2E_BUCKETS),
            }),
        }
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A point-in-time reading of the gauges, for tests and the engine's callers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gauges {
    pub running: usize,
    pub waiting: usize,
    pub kv_used: usize,
    pub kv_capacity: usize,
}

impl Telemetry {
    pub fn gauges(&self, running: usize, waiting: usize, kv_used: usize, kv_capacity: usize) {
        let mut s = self.inner.lock();
        (s.running, s.waiting, s.kv_used, s.kv_capacity) = (running, waiting, kv_used, kv_capacity);
    }

    pub fn read_gauges(&self) -> Gauges {
        let s = self.inner.lock();
        Gauges { running: s.running, waiting: s.waiting, kv_used: s.kv_used, kv_capacity: s.kv_capacity }
    }

    /// A prompt of `queried` tokens admitted and looked up in the prefix cache, `hits` found.
    pub fn prefix_lookup(&self, queried: usize, hits: usize) {
        let mut s = self.inner.lock();
        s.prompt_tokens += queried as u64;
        s.prefix_queries += queried as u64;
        s.prefix_hits += hits as u64;
    }

    /// A token left the model `since_arrival_ns` after its request arrived, `gap_ns` after the
    /// request's previous one (`None`: it is the first).
    pub fn token(&self, since_arrival_ns: u64, gap_ns: Option<u64>) {
        let mut s = self.inner.lock();
        s.generation_tokens += 1;
        match gap_ns {
            None => s.ttft.observe(seconds(since_arrival_ns)),
            Some(gap) => s.itl.observe(seconds(gap)),
        }
    }

    pub fn preempted(&self) {
        self.inner.lock().preemptions += 1;
    }

    /// A request finished (`length`: at max_tokens), `e2e_ns` after it arrived, of which it
    /// waited `queue_ns` for admission.
    pub fn finished(&self, length: bool, e2e_ns: u64, queue_ns: u64) {
        let mut s = self.inner.lock();
        s.successes[usize::from(length)] += 1;
        s.e2e.observe(seconds(e2e_ns));
        s.queue.observe(seconds(queue_ns));
    }
}

type Family = (&'static str, &'static str, &'static str, fn(&Inner) -> f64);

const SCALARS: &[Family] = &[
    ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", |s| s.running as f64),
    ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", |s| s.waiting as f64),
    ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", |s| {
        if s.kv_capacity == 0 {
            0.0
        } else {
            s.kv_used as f64 / s.kv_capacity as f64
        }
    }),
    ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", |s| s.prompt_tokens as f64),
    ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", |s| {
        s.generation_tokens as f64
    }),
    ("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in tokens.", |s| s.prefix_queries as f64),
    ("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in tokens.", |s| s.prefix_hits as f64),
    ("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.", |s| s.preemptions as f64),
];

type HistogramFamily = (&'static str, &'static str, fn(&Inner) -> &Histogram);

const HISTOGRAMS: &[HistogramFamily] = &[
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", |s| &s.ttft),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", |s| &s.itl),
    ("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", |s| &s.itl),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", |s| &s.e2e),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", |s| &s.queue),
];

/// Appends the vLLM families of these models (name, telemetry) to a Prometheus text page, each
/// family's HELP and TYPE once.
pub fn render(models: &[(&str, &Telemetry)], out: &mut String) {
    if models.is_empty() {
        return;
    }
    let locked: Vec<_> =
        models.iter().map(|(name, t)| (format!("model_name=\"{name}\",engine=\"0\""), t.inner.lock())).collect();
    for (name, kind, help, value) in SCALARS {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, s) in &locked {
            let _ = writeln!(out, "{name}{{{labels}}} {}", value(s));
        }
    }
    let name = "vllm:request_success_total";
    let _ = writeln!(out, "# HELP {name} Count of successfully processed requests.\n# TYPE {name} counter");
    for (labels, s) in &locked {
        for (reason, n) in ["stop", "length"].iter().zip(s.successes) {
            let _ = writeln!(out, "{name}{{{labels},finished_reason=\"{reason}\"}} {n}");
        }
    }
    for (name, help, histogram) in HISTOGRAMS {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (labels, s) in &locked {
            histogram(s).render(out, name, labels);
        }
    }
}
