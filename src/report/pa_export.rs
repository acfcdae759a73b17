//! perf_analyzer's `--profile-export-file` JSON: one experiment per sweep point, each with its
//! requests' send and response timestamps (ns since the epoch) and the window boundaries.
//! Tensor values (`request_inputs`, `response_outputs`) are not recorded: the load loop never
//! decodes outputs, so the timing it measures is not skewed by keeping them.

use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

use crate::measure::PointResult;
use crate::report::LoadPoint;

#[derive(Serialize)]
struct Export<'a> {
    experiments: Vec<Experiment>,
    version: &'a str,
    service_kind: &'a str,
    endpoint: &'a str,
}

#[derive(Serialize)]
struct Experiment {
    experiment: ExperimentId,
    requests: Vec<Request>,
    window_boundaries: Vec<u64>,
}

#[derive(Serialize)]
struct ExperimentId {
    mode: &'static str,
    value: serde_json::Value,
}

#[derive(Serialize)]
struct Request {
    timestamp: u64,
    response_timestamps: [u64; 1],
}

/// Writes the export for `results`; `service_kind` is "triton" or "inprocess".
pub fn write(path: &Path, results: &[PointResult], service_kind: &str) -> io::Result<()> {
    let experiments = results
        .iter()
        .map(|r| Experiment {
            experiment: match r.row.load {
                LoadPoint::Concurrency(n) => ExperimentId { mode: "concurrency", value: n.into() },
                LoadPoint::RequestRate(rate) => ExperimentId { mode: "request_rate", value: rate.into() },
            },
            requests: r
                .detail
                .requests
                .iter()
                .map(|q| Request { timestamp: q.send_ns, response_timestamps: [q.response_ns] })
                .collect(),
            window_boundaries: r.detail.window_boundaries_ns.clone(),
        })
        .collect();
    let export = Export { experiments, version: env!("CARGO_PKG_VERSION"), service_kind, endpoint: "" };
    let file = std::fs::File::create(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create '{}': {e}", path.display())))?;
    let mut out = io::BufWriter::new(file);
    serde_json::to_writer(&mut out, &export)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::recorder::RequestRecord;
    use crate::measure::window::derive_point;

    #[test]
    fn export_has_perf_analyzer_shape() {
        let mut result = derive_point(&[], 1, LoadPoint::Concurrency(4), true, None);
        result.detail.requests = vec![RequestRecord { send_ns: 10, response_ns: 25 }];
        result.detail.window_boundaries_ns = vec![5, 30];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("export.json");
        write(&path, &[result], "triton").unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let e = &v["experiments"][0];
        assert_eq!(e["experiment"], serde_json::json!({"mode": "concurrency", "value": 4}));
        assert_eq!(e["requests"][0], serde_json::json!({"timestamp": 10, "response_timestamps": [25]}));
        assert_eq!(e["window_boundaries"], serde_json::json!([5, 30]));
        assert_eq!(v["service_kind"], "triton");
    }
}
