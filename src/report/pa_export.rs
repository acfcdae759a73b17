//! perf_analyzer's `--profile-export-file` JSON: one experiment per sweep point, each with its
//! requests' send and response timestamps (ns since the epoch), the input values each request
//! sent and the output values it got back, and the window boundaries. Outputs read through
//! shared memory are left out: the load loop does not copy them out of their regions.

use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::results::LoadPoint;
use crate::results::PointResult;
use crate::tensor::{element_count, json_values, Tensor};

#[derive(Serialize)]
struct Export<'a> {
    experiments: Vec<Experiment<'a>>,
    version: &'a str,
    service_kind: &'a str,
    endpoint: &'a str,
}

#[derive(Serialize)]
struct Experiment<'a> {
    experiment: ExperimentId,
    requests: Vec<Request<'a>>,
    window_boundaries: Vec<u64>,
}

#[derive(Serialize)]
struct ExperimentId {
    mode: &'static str,
    value: Value,
}

/// Field order as perf_analyzer 2.50 writes it.
#[derive(Serialize)]
struct Request<'a> {
    timestamp: u64,
    /// A sequence model's requests only.
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence_id: Option<u64>,
    /// Shared by every request of the same data step: rendered once, referenced here.
    request_inputs: &'a Value,
    response_timestamps: Vec<u64>,
    response_outputs: Vec<Value>,
}

/// `{name: values}` for the tensors whose values are known, as perf_analyzer 2.50 writes them:
/// one element as a scalar, several as an array, none as `""`.
fn tensor_map<'a>(tensors: impl IntoIterator<Item = (&'a String, &'a Tensor)>) -> Value {
    let mut map = Map::new();
    for (name, tensor) in tensors {
        let expected_empty = element_count(&tensor.shape) == Some(0);
        if tensor.data.is_empty() && !expected_empty {
            continue; // travelled through shared memory
        }
        if let Ok(mut values) = json_values(tensor.dtype, &tensor.data) {
            let value = match values.len() {
                0 => Value::String(String::new()),
                1 => values.remove(0),
                _ => Value::Array(values),
            };
            map.insert(name.clone(), value);
        }
    }
    Value::Object(map)
}

/// The `version` perf_analyzer 2.50's release binary writes: empty (it was built without one).
const PA_EXPORT_VERSION: &str = "";

/// Writes the export for `results`. `step_inputs` are the input tensors of each data step, in the
/// order the engine cycles them; `service_kind` is "triton" or "inprocess".
pub fn write(
    path: &Path,
    results: &[PointResult],
    service_kind: &str,
    step_inputs: &[Vec<(String, Tensor)>],
) -> io::Result<()> {
    let inputs: Vec<Value> = step_inputs.iter().map(|step| tensor_map(step.iter().map(|(n, t)| (n, t)))).collect();
    let no_inputs = Value::Object(Map::new());
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
                .map(|q| Request {
                    timestamp: q.send_ns,
                    sequence_id: q.sequence_id,
                    request_inputs: inputs.get(q.step).unwrap_or(&no_inputs),
                    response_timestamps: q.responses.iter().map(|r| r.ns).collect(),
                    response_outputs: q
                        .responses
                        .iter()
                        .map(|r| tensor_map(r.outputs.iter().map(|(n, t)| (n, t))))
                        .collect(),
                })
                .collect(),
            window_boundaries: r.detail.window_boundaries_ns.clone(),
        })
        .collect();
    let export = Export { experiments, version: PA_EXPORT_VERSION, service_kind, endpoint: "" };
    let file = std::fs::File::create(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create '{}': {e}", path.display())))?;
    let mut out = io::BufWriter::new(file);
    serde_json::to_writer(&mut out, &export)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::window::derive_point;
    use crate::results::{RequestRecord, ResponseRecord};
    use crate::tensor::DataType;

    #[test]
    fn export_has_perf_analyzer_shape() {
        let mut result = derive_point(&[], 1, LoadPoint::Concurrency(4), true, None);
        let output = Tensor::from_f32(vec![1, 2], &[1.5, -2.0]);
        // A shared-memory output carries no data and is left out.
        let in_shm = Tensor { dtype: DataType::Fp32, shape: vec![1, 2], data: Default::default() };
        result.detail.requests = vec![
            RequestRecord {
                send_ns: 10,
                step: 1,
                sequence_id: None,
                responses: vec![ResponseRecord {
                    ns: 25,
                    outputs: vec![("OUTPUT0".into(), output), ("OUTPUT1".into(), in_shm)],
                }],
            },
            // A decoupled request: two responses, then the empty final one.
            RequestRecord {
                send_ns: 30,
                step: 0,
                sequence_id: Some(3),
                responses: [(31, Some(1)), (32, Some(2)), (33, None)]
                    .map(|(ns, out)| ResponseRecord {
                        ns,
                        outputs: out
                            .map(|v| ("OUT".to_string(), Tensor::from_i32(vec![1], &[v])))
                            .into_iter()
                            .collect(),
                    })
                    .to_vec(),
            },
        ];
        result.detail.window_boundaries_ns = vec![5, 30];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("export.json");
        let steps = vec![
            vec![("INPUT0".to_string(), Tensor::from_i32(vec![1], &[7]))],
            vec![("INPUT0".to_string(), Tensor::from_i32(vec![1], &[8]))],
        ];
        write(&path, &[result], "triton", &steps).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        // perf_analyzer's field order: a sequence request's id right after its timestamp.
        assert!(text.contains(r#"{"timestamp":30,"sequence_id":3,"request_inputs":"#), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let e = &v["experiments"][0];
        assert_eq!(e["experiment"], serde_json::json!({"mode": "concurrency", "value": 4}));
        assert_eq!(
            e["requests"][0],
            serde_json::json!({
                "timestamp": 10,
                "request_inputs": {"INPUT0": 8},
                "response_timestamps": [25],
                "response_outputs": [{"OUTPUT0": [1.5, -2.0]}]
            })
        );
        assert_eq!(
            e["requests"][1],
            serde_json::json!({
                "timestamp": 30,
                "sequence_id": 3,
                "request_inputs": {"INPUT0": 7},
                "response_timestamps": [31, 32, 33],
                "response_outputs": [{"OUT": 1}, {"OUT": 2}, {}]
            })
        );
        assert_eq!(e["window_boundaries"], serde_json::json!([5, 30]));
        assert_eq!(v["service_kind"], "triton");
        assert_eq!((&v["version"], &v["endpoint"]), (&serde_json::json!(""), &serde_json::json!("")));
    }
}
