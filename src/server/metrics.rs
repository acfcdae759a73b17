//! Prometheus metrics (KSERVE_V2.md §11, §15) on their own listener: `GET /metrics` in the text
//! exposition format with Triton's family names and six-decimal values. Per-model numbers come
//! from the same statistics the statistics extension reports; host numbers from `/proc`.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use parking_lot::Mutex;

use super::core::InferenceServer;
use super::error::ServerError;
use super::repository::{LoadedModel, MODEL_VERSION};
use crate::proto::inference::{ModelStatistics, StatisticDuration};

/// CPU time counters from the first line of `/proc/stat`, in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTicks {
    pub busy: u64,
    pub total: u64,
}

impl CpuTicks {
    /// Parses `cpu  user nice system idle iowait irq softirq steal ...`.
    pub fn parse(proc_stat: &str) -> Option<CpuTicks> {
        let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
        // Guest time is already counted in user/nice: sum the first eight fields only.
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
        Some(CpuTicks { busy: total.saturating_sub(idle), total })
    }

    /// Busy fraction between two samples, 0.0 to 1.0.
    pub fn utilization_since(self, earlier: CpuTicks) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        (self.busy.saturating_sub(earlier.busy) as f64 / total as f64).clamp(0.0, 1.0)
    }
}

/// `(total, used)` bytes from `/proc/meminfo`; used = MemTotal − MemAvailable.
pub fn parse_meminfo(meminfo: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    Some((total, total.saturating_sub(available)))
}

/// What the metrics endpoint needs: the core, and the previous CPU sample, so utilization covers
/// the time between two scrapes (the first scrape covers the time since boot).
pub struct MetricsState {
    core: Arc<InferenceServer>,
    last_cpu: Mutex<Option<CpuTicks>>,
}

impl MetricsState {
    /// One per listener that serves `/metrics`, so each one's CPU figure spans its own scrapes.
    pub fn new(core: Arc<InferenceServer>) -> Arc<MetricsState> {
        Arc::new(MetricsState { core, last_cpu: Mutex::new(None) })
    }
}

/// The metrics router (`GET /metrics`).
pub fn router(core: Arc<InferenceServer>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(|| async { ServerError::not_found("Not Found") })
        .with_state(MetricsState::new(core))
}

async fn metrics(State(state): State<Arc<MetricsState>>) -> Response {
    scrape(&state)
}

/// A `GET /metrics` answer: the exposition text, on the metrics port and the API port alike.
pub fn scrape(state: &MetricsState) -> Response {
    ([(CONTENT_TYPE, "text/plain; charset=utf-8")], render(state)).into_response()
}

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
}

const fn family(name: &'static str, help: &'static str, kind: &'static str) -> Family {
    Family { name, help, kind }
}

fn header(out: &mut String, f: &Family) {
    let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
}

fn us(d: &Option<StatisticDuration>) -> f64 {
    d.as_ref().map_or(0.0, |d| d.ns as f64 / 1000.0)
}

fn count(d: &Option<StatisticDuration>) -> f64 {
    d.as_ref().map_or(0.0, |d| d.count as f64)
}

/// A label value with the exposition format's escapes (backslash, quote, newline).
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The whole exposition text.
pub fn render(state: &MetricsState) -> String {
    let mut out = String::new();
    let models: Vec<_> = state
        .core
        .repository
        .loaded()
        .into_iter()
        .map(|m| {
            let snapshot = m.stats.snapshot(&m.config.name, MODEL_VERSION);
            (m, snapshot)
        })
        .collect();

    type Value = fn(&LoadedModel, &ModelStatistics) -> f64;
    let per_model: [(Family, Value); 9] = [
        (
            family(
                "nv_inference_request_success",
                "Number of successful inference requests, all batch sizes",
                "counter",
            ),
            |_, s| count(&s.inference_stats.as_ref().and_then(|i| i.success)),
        ),
        (
            family(
                "nv_inference_count",
                "Number of inferences performed (does not include cached requests)",
                "counter",
            ),
            |_, s| s.inference_count as f64,
        ),
        (
            family(
                "nv_inference_exec_count",
                "Number of model executions performed (does not include cached requests)",
                "counter",
            ),
            |_, s| s.execution_count as f64,
        ),
        (
            family(
                "nv_inference_request_duration_us",
                "Cumulative inference request duration in microseconds (includes cached requests)",
                "counter",
            ),
            |_, s| us(&s.inference_stats.as_ref().and_then(|i| i.success)),
        ),
        (
            family(
                "nv_inference_queue_duration_us",
                "Cumulative inference queuing duration in microseconds (includes cached requests)",
                "counter",
            ),
            |_, s| us(&s.inference_stats.as_ref().and_then(|i| i.queue)),
        ),
        (
            family(
                "nv_inference_compute_input_duration_us",
                "Cumulative compute input duration in microseconds (does not include cached requests)",
                "counter",
            ),
            |_, s| us(&s.inference_stats.as_ref().and_then(|i| i.compute_input)),
        ),
        (
            family(
                "nv_inference_compute_infer_duration_us",
                "Cumulative compute inference duration in microseconds (does not include cached requests)",
                "counter",
            ),
            |_, s| us(&s.inference_stats.as_ref().and_then(|i| i.compute_infer)),
        ),
        (
            family(
                "nv_inference_compute_output_duration_us",
                "Cumulative inference compute output duration in microseconds (does not include cached requests)",
                "counter",
            ),
            |_, s| us(&s.inference_stats.as_ref().and_then(|i| i.compute_output)),
        ),
        (
            family(
                "nv_inference_pending_request_count",
                "Instantaneous number of pending requests awaiting execution per-model.",
                "gauge",
            ),
            |m, _| m.pending() as f64,
        ),
    ];
    for (f, value) in &per_model {
        header(&mut out, f);
        for (model, snapshot) in &models {
            let v = value(model, snapshot);
            let (name, version) = (label(&snapshot.name), label(&snapshot.version));
            let _ = writeln!(out, "{}{{model=\"{name}\",version=\"{version}\"}} {v:.6}", f.name);
        }
    }

    // Failures recorded in statistics happen after admission, while the model runs: BACKEND.
    header(
        &mut out,
        &family("nv_inference_request_failure", "Number of failed inference requests, all batch sizes", "counter"),
    );
    for (_, snapshot) in &models {
        let failed = count(&snapshot.inference_stats.as_ref().and_then(|i| i.fail));
        for (reason, v) in [("BACKEND", failed), ("CANCELED", 0.0), ("OTHER", 0.0), ("REJECTED", 0.0)] {
            let _ = writeln!(
                out,
                "nv_inference_request_failure{{model=\"{}\",reason=\"{reason}\",version=\"{}\"}} {v:.6}",
                label(&snapshot.name),
                label(&snapshot.version)
            );
        }
    }

    let engines = state.core.llms();
    let named: Vec<_> = engines.iter().map(|e| (e.name.as_str(), e.telemetry())).collect();
    crate::server::llm::telemetry::render(&named, &mut out);

    if let Some(now) = std::fs::read_to_string("/proc/stat").ok().as_deref().and_then(CpuTicks::parse) {
        let earlier = state.last_cpu.lock().replace(now).unwrap_or_default();
        header(&mut out, &family("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge"));
        let _ = writeln!(out, "nv_cpu_utilization {:.6}", now.utilization_since(earlier));
    }
    if let Some((total, used)) = std::fs::read_to_string("/proc/meminfo").ok().as_deref().and_then(parse_meminfo) {
        header(&mut out, &family("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "gauge"));
        let _ = writeln!(out, "nv_cpu_memory_total_bytes {:.6}", total as f64);
        header(&mut out, &family("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "gauge"));
        let _ = writeln!(out, "nv_cpu_memory_used_bytes {:.6}", used as f64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_and_utilization() {
        let a = CpuTicks::parse("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n").unwrap();
        assert_eq!(a, CpuTicks { busy: 200, total: 1000 });
        let b = CpuTicks { busy: 250, total: 1100 };
        assert!((b.utilization_since(a) - 0.5).abs() < 1e-9);
        assert_eq!(a.utilization_since(a), 0.0);
        assert!(CpuTicks::parse("intr 1 2").is_none());
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
        assert_eq!(label("identity"), "identity");
    }

    #[test]
    fn meminfo_total_and_used() {
        let text = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n";
        assert_eq!(parse_meminfo(text), Some((1_024_000, 614_400)));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
    }
}
