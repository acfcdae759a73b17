//! perf_analyzer's stdout report, in its shape: the "Measurement Settings" block, one block per
//! sweep point (client and server sections), and the closing "Inferences/Second vs. Client
//! Average Batch Latency" list. perfbench adds one line per point for failed / late / missed
//! requests and flags unstable points, which perf_analyzer would have dropped.

use std::fmt::Write as _;

use crate::measure::WindowMode;
use crate::results::format::format_g;
use crate::results::LoadPoint;
use crate::results::PointResult;
use crate::results::{ComposingStats, ServerStats};

/// How the client talked to the server, for the "Avg HTTP time" line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Http,
    Grpc,
    InProcess,
}

/// The settings the header block echoes.
#[derive(Clone, Debug, PartialEq)]
pub struct RunDescription {
    pub batch: u64,
    /// "TRITON" or "INPROCESS".
    pub service_kind: &'static str,
    pub warmup_requests: u64,
    pub window: WindowMode,
    pub request_count: Option<u64>,
    pub percentile: Option<f64>,
    /// perf_analyzer prints these only for a range with an end: "Latency limit: 0 msec", then
    /// e.g. "Concurrency limit: 8 concurrent requests".
    pub limit_lines: Vec<String>,
    /// e.g. "Using uniform distribution on request generation".
    pub distribution_line: Option<String>,
    pub binary_search: bool,
    /// As perf_analyzer decides it: `-a`, `--streaming`, or a sequence model without `--sync`.
    pub asynchronous: bool,
    pub decoupled: bool,
    pub stability_pct: f64,
    pub max_trials: usize,
}

fn us(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v as u64
    } else {
        0
    }
}

fn plural(n: u64) -> &'static str {
    if n > 1 {
        "s"
    } else {
        ""
    }
}

/// perf_analyzer 2.50's "Measurement Settings" block, line for line (scripts grep it).
pub fn settings_block(d: &RunDescription) -> String {
    let mut s = String::from("*** Measurement Settings ***\n");
    let _ = writeln!(s, "  Batch size: {}", d.batch);
    let _ = writeln!(s, "  Service Kind: {}", d.service_kind);
    if d.warmup_requests > 0 {
        let _ = writeln!(s, "  Sending {} warmup request{}", d.warmup_requests, plural(d.warmup_requests));
    }
    match (d.request_count, d.window) {
        (Some(n), _) => {
            let _ = writeln!(s, "  Sending {n} benchmark request{}", plural(n));
        }
        (None, WindowMode::Time(span)) => {
            let _ = writeln!(s, "  Using \"time_windows\" mode for stabilization");
            let _ = writeln!(s, "  {}", stabilizing(d.percentile, d.asynchronous));
            let _ = writeln!(s, "  Measurement window: {} msec", span.as_millis());
        }
        (None, WindowMode::Count(n)) => {
            let _ = writeln!(s, "  Using \"count_windows\" mode for stabilization");
            let _ = writeln!(s, "  {}", stabilizing(d.percentile, d.asynchronous));
            let _ = writeln!(s, "  Minimum number of samples in each window: {n}");
        }
    }
    for line in d.limit_lines.iter().chain(&d.distribution_line) {
        let _ = writeln!(s, "  {line}");
    }
    if d.binary_search {
        let _ = writeln!(s, "  Using Binary Search algorithm");
    }
    let calls = if d.asynchronous { "asynchronous" } else { "synchronous" };
    let _ = writeln!(s, "  Using {calls} calls for inference");
    if d.decoupled {
        let _ = writeln!(s, "  Detected decoupled model, using the first response for measuring latency");
    }
    s
}

/// perf_analyzer's wording, including its missing space after a percentile ("p95latency").
fn stabilizing(percentile: Option<f64>, asynchronous: bool) -> String {
    let metric = if asynchronous { "throughput" } else { "latency and throughput" };
    match percentile {
        Some(p) => format!("Stabilizing using p{}{metric}", format_g(p)),
        None => format!("Stabilizing using average {metric}"),
    }
}

fn point_title(load: LoadPoint) -> String {
    match load {
        LoadPoint::Concurrency(n) => format!("Request concurrency: {n}"),
        LoadPoint::RequestRate(r) => format!("Request Rate: {} inference requests per seconds", format_g(r)),
    }
}

/// The block printed after each measured point.
pub fn point_block(result: &PointResult, wire: Wire, d: &RunDescription) -> String {
    let r = &result.row;
    let detail = &result.detail;
    let mut s = String::new();
    let _ = writeln!(s, "{}", point_title(r.load));
    let _ = writeln!(s, "  Client: ");
    let _ = writeln!(s, "    Request count: {}", r.requests);
    let _ = writeln!(s, "    Throughput: {} infer/sec", format_g(r.throughput));
    let _ = writeln!(s, "    Avg latency: {} usec (standard deviation {} usec)", us(r.avg_us), us(detail.stdev_us));
    for (p, v) in [(50, r.p50_us), (90, r.p90_us), (95, r.p95_us), (99, r.p99_us)] {
        let _ = writeln!(s, "    p{p} latency: {} usec", us(v));
    }
    let send_recv = r.client_send_us + r.client_recv_us;
    let wait = us(detail.exchange_us - send_recv);
    match wire {
        Wire::Http => {
            let _ = writeln!(
                s,
                "    Avg HTTP time: {} usec (send/recv {} usec + response wait {wait} usec)",
                us(detail.exchange_us),
                us(send_recv)
            );
        }
        Wire::Grpc => {
            let _ = writeln!(
                s,
                "    Avg gRPC time: {} usec ((un)marshal request/response {} usec + response wait {wait} usec)",
                us(detail.exchange_us),
                us(send_recv)
            );
        }
        Wire::InProcess => {}
    }
    if let Some(server) = &detail.server {
        let _ = writeln!(s, "  Server: ");
        server_lines(&mut s, server, &detail.composing, 1);
    }
    let _ = write!(s, "  perfbench: {} failed, {} late, {} missed requests", r.failed, r.late, r.missed);
    if let Some(error) = &detail.first_error {
        let _ = write!(s, " (first failure: {error})");
    }
    s.push('\n');
    if r.client.is_known() {
        let c = &r.client;
        let _ = write!(s, "  perfbench client: achieved {}", r.achieved_text());
        if matches!(r.load, crate::results::LoadPoint::RequestRate(_)) {
            let _ = write!(s, ", send lag p50 {:.0} usec p99 {:.0} usec", c.send_lag_p50_us, c.send_lag_p99_us);
        }
        let _ = writeln!(s, ", CPU {:.0}% of {} core(s)", c.cpu_pct, c.cores);
        let limits = r.client_limits();
        if !limits.is_empty() {
            let _ = writeln!(s, "  CLIENT-LIMITED: {}", limits.join("; "));
        }
    }
    if r.sequences > 0 {
        let _ = writeln!(s, "  Sequences: {} ended, average length {:.1} requests", r.sequences, r.avg_sequence_length);
    }
    if !r.stable {
        let _ = writeln!(
            s,
            "  UNSTABLE: the last {} windows did not agree within {}% after {} windows (spread: throughput {:.1}%, avg latency {:.1}%)",
            detail.trials.min(3),
            format_g(d.stability_pct),
            detail.trials,
            r.throughput_spread_pct,
            r.avg_spread_pct
        );
    }
    s
}

/// perf_analyzer's server section of one model at nesting `level` (1: the profiled model). An
/// ensemble shows its composing models' summed queue and compute, then each of them in turn.
fn server_lines(s: &mut String, server: &ServerStats, below: &[ComposingStats], level: usize) {
    let ident = " ".repeat(2 * level);
    if level > 1 && server.success.count == 0 {
        let _ = writeln!(s, "{ident}  Request count: 0");
        return;
    }
    let _ = writeln!(s, "{ident}  Inference count: {}", server.inference_count);
    let _ = writeln!(s, "{ident}  Execution count: {}", server.execution_count);
    let _ = writeln!(s, "{ident}  Successful request count: {}", server.success.count);
    let latency = server.request_latency_us();
    if below.is_empty() {
        let [latency, overhead, queue, input, infer, output] = server.request_stages_us();
        let _ = writeln!(
            s,
            "{ident}  Avg request latency: {latency} usec (overhead {overhead} usec + queue {queue} usec + compute input {input} usec + compute infer {infer} usec + compute output {output} usec)",
        );
        if level > 1 {
            s.push('\n');
        }
        return;
    }
    let t = ComposingStats::ensemble_times(below);
    let overhead = latency.saturating_sub(t.queue_us + t.compute_us);
    let _ = writeln!(
        s,
        "{ident}  Avg request latency: {latency} usec (overhead {overhead} usec + queue {} usec + compute {} usec)\n",
        t.queue_us, t.compute_us
    );
    let _ = writeln!(s, "{ident}Composing models: ");
    let depth = below[0].model.depth;
    for (i, model) in below.iter().enumerate().filter(|(_, c)| c.model.depth == depth) {
        let _ = writeln!(s, "{ident}{}, version: {}", model.model.name, model.model.version);
        server_lines(s, &model.stats, ComposingStats::below(below, i), level + 1);
    }
}

/// The closing list, exactly as perf_analyzer prints it (unstable points are flagged in their
/// own block above, so scripts that parse this list keep working).
pub fn closing_list(results: &[PointResult]) -> String {
    let mut s = String::from("Inferences/Second vs. Client Average Batch Latency\n");
    for result in results {
        let r = &result.row;
        let label = match r.load {
            LoadPoint::Concurrency(n) => format!("Concurrency: {n}"),
            LoadPoint::RequestRate(rate) => format!("Request Rate: {}", format_g(rate)),
        };
        let _ = writeln!(s, "{label}, throughput: {} infer/sec, latency {} usec", format_g(r.throughput), us(r.avg_us));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::ReportRow;
    use crate::results::{PointDetail, ServerStats};
    use std::time::Duration;

    fn description() -> RunDescription {
        RunDescription {
            batch: 1,
            service_kind: "TRITON",
            warmup_requests: 0,
            window: WindowMode::Time(Duration::from_millis(1000)),
            request_count: None,
            percentile: None,
            limit_lines: vec!["Latency limit: 0 msec".into(), "Concurrency limit: 2 concurrent requests".into()],
            distribution_line: None,
            binary_search: false,
            asynchronous: false,
            decoupled: false,
            stability_pct: 10.0,
            max_trials: 10,
        }
    }

    #[test]
    fn settings_block_has_perf_analyzer_lines() {
        let text = settings_block(&description());
        assert!(text.starts_with("*** Measurement Settings ***\n  Batch size: 1\n  Service Kind: TRITON\n"));
        assert!(text.contains("  Using \"time_windows\" mode for stabilization\n  Stabilizing using average latency and throughput\n  Measurement window: 1000 msec\n  Latency limit: 0 msec\n  Concurrency limit: 2 concurrent requests\n"));
        assert!(text.ends_with("  Using synchronous calls for inference\n"));
    }

    /// Each block as perf_analyzer 2.50 printed it for the same options (run side by side).
    #[test]
    fn settings_block_follows_perf_analyzer_options() {
        let d = RunDescription {
            percentile: Some(95.0),
            limit_lines: Vec::new(),
            window: WindowMode::Time(Duration::from_millis(200)),
            ..description()
        };
        assert_eq!(
            settings_block(&d),
            "*** Measurement Settings ***\n  Batch size: 1\n  Service Kind: TRITON\n  Using \"time_windows\" mode for stabilization\n  Stabilizing using p95latency and throughput\n  Measurement window: 200 msec\n  Using synchronous calls for inference\n"
        );
        let d = RunDescription {
            limit_lines: vec!["Latency limit: 50 msec".into(), "Concurrency limit: 4 concurrent requests".into()],
            binary_search: true,
            asynchronous: true,
            window: WindowMode::Time(Duration::from_millis(200)),
            ..description()
        };
        assert_eq!(
            settings_block(&d),
            "*** Measurement Settings ***\n  Batch size: 1\n  Service Kind: TRITON\n  Using \"time_windows\" mode for stabilization\n  Stabilizing using average throughput\n  Measurement window: 200 msec\n  Latency limit: 50 msec\n  Concurrency limit: 4 concurrent requests\n  Using Binary Search algorithm\n  Using asynchronous calls for inference\n"
        );
        let d = RunDescription {
            warmup_requests: 1,
            request_count: Some(20),
            decoupled: true,
            asynchronous: true,
            limit_lines: Vec::new(),
            ..description()
        };
        assert_eq!(
            settings_block(&d),
            "*** Measurement Settings ***\n  Batch size: 1\n  Service Kind: TRITON\n  Sending 1 warmup request\n  Sending 20 benchmark requests\n  Using asynchronous calls for inference\n  Detected decoupled model, using the first response for measuring latency\n"
        );
    }

    #[test]
    fn point_block_has_client_server_and_perfbench_lines() {
        let row = ReportRow {
            throughput: 248.518,
            client_send_us: 83.0,
            p50_us: 3742.0,
            p90_us: 5477.0,
            p95_us: 5989.0,
            p99_us: 7979.0,
            avg_us: 4013.0,
            requests: 896,
            failed: 3,
            stable: false,
            throughput_spread_pct: 12.0,
            avg_spread_pct: 1.0,
            server_avg_batch: 1.0,
            ..ReportRow::zeroed(LoadPoint::Concurrency(1))
        };
        let detail = PointDetail {
            exchange_us: 3994.0,
            stdev_us: 1148.0,
            trials: 10,
            server: Some(ServerStats::default()),
            ..Default::default()
        };
        let text = point_block(&PointResult { row, detail }, Wire::Http, &description());
        assert!(text.starts_with("Request concurrency: 1\n  Client: \n    Request count: 896\n    Throughput: 248.518 infer/sec\n    Avg latency: 4013 usec (standard deviation 1148 usec)\n    p50 latency: 3742 usec\n"));
        assert!(text.contains("    Avg HTTP time: 3994 usec (send/recv 83 usec + response wait 3911 usec)\n  Server: \n    Inference count: 0\n"));
        assert!(text.contains("  perfbench: 3 failed, 0 late, 0 missed requests\n"));
        assert!(text.contains("  UNSTABLE: "));
    }
    #[test]
    fn an_ensemble_lists_its_composing_models_as_perf_analyzer_does() {
        use crate::results::{ComposingModel, ComposingStats, StageTotal};
        let stats = |requests: u64, queue_us: u64, infer_us: u64| ServerStats {
            inference_count: requests,
            execution_count: requests,
            success: StageTotal { count: requests, ns: requests * (queue_us + infer_us + 10) * 1000 },
            queue: StageTotal { count: requests, ns: requests * queue_us * 1000 },
            compute_input: StageTotal { count: requests, ns: 0 },
            compute_infer: StageTotal { count: requests, ns: requests * infer_us * 1000 },
            compute_output: StageTotal { count: requests, ns: 0 },
            ..Default::default()
        };
        let model =
            |name: &str, depth, ensemble| ComposingModel { name: name.into(), version: "1".into(), depth, ensemble };
        let composing = vec![
            ComposingStats { model: model("inner", 1, true), stats: stats(4, 1, 2) },
            ComposingStats { model: model("a", 2, false), stats: stats(8, 5, 50) },
            ComposingStats { model: model("b", 1, false), stats: stats(0, 0, 0) },
        ];
        let detail = PointDetail { server: Some(stats(4, 0, 100)), composing, ..Default::default() };
        let row = ReportRow::zeroed(LoadPoint::Concurrency(1));
        let text = point_block(&PointResult { row, detail }, Wire::Http, &description());
        let expected = "  Server: \n    Inference count: 4\n    Execution count: 4\n    Successful request count: 4\n    Avg request latency: 110 usec (overhead 55 usec + queue 5 usec + compute 50 usec)\n\n  Composing models: \n  inner, version: 1\n      Inference count: 4\n      Execution count: 4\n      Successful request count: 4\n      Avg request latency: 13 usec (overhead 0 usec + queue 5 usec + compute 50 usec)\n\n    Composing models: \n    a, version: 1\n        Inference count: 8\n        Execution count: 8\n        Successful request count: 8\n        Avg request latency: 65 usec (overhead 10 usec + queue 5 usec + compute input 0 usec + compute infer 50 usec + compute output 0 usec)\n\n  b, version: 1\n      Request count: 0\n  perfbench: ";
        assert!(text.contains(expected), "{text}");
    }
}
