//! The KServe v2 HTTP body, as perf_analyzer's C++ client writes and reads it: a request's JSON
//! inference header with its inputs (binary after the header, in the header as JSON `data`, or in
//! shared memory) and outputs, a sequence step's header opening, and a 200 answer's outputs
//! (binary slices after the header, or JSON `data` re-encoded in binary layout) or an error's
//! message.

use bytes::Bytes;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use crate::client::{
    ClientError, ClientResult, CorrelationId, InferResult, InputSource, OutputTarget, RequestSpec, SequenceFlags,
};
use crate::tensor::json::{write_with_data, DataError, TensorJson};
use crate::tensor::{DataType, Tensor};

/// The opening of a JSON inference header that carries a sequence's parameters, as
/// perf_analyzer's client writes them; the prepared header follows without its own `{`.
pub(super) fn sequence_prefix(sequence: &SequenceFlags) -> Bytes {
    let id = match &sequence.id {
        CorrelationId::Number(n) => n.to_string(),
        CorrelationId::Text(t) => serde_json::Value::String(t.clone()).to_string(),
    };
    Bytes::from(format!(
        "{{\"parameters\":{{\"sequence_id\":{id},\"sequence_start\":{},\"sequence_end\":{}}},",
        sequence.start, sequence.end
    ))
}

/// The message of a KServe `{"error": ...}` body, or the status and raw body otherwise.
pub(super) fn error_from_body(status: StatusCode, body: &[u8]) -> ClientError {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => ClientError::Server(e.error),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            ClientError::Server(if text.is_empty() {
                format!("HTTP {status}")
            } else {
                format!("HTTP {status}: {text}")
            })
        }
    }
}

#[derive(Serialize)]
struct InputHeader<'a> {
    name: &'a str,
    shape: &'a [i64],
    datatype: &'static str,
    parameters: TensorParameters<'a>,
}

#[derive(Serialize)]
struct OutputHeader<'a> {
    name: &'a str,
    parameters: TensorParameters<'a>,
}

#[derive(Default, Serialize)]
struct TensorParameters<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    binary_data_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binary_data: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_memory_region: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_memory_byte_size: Option<u64>,
    /// Sent only when non-zero, as the Triton clients do.
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_memory_offset: Option<u64>,
}

fn shm_parameters(region: &str, offset: u64, byte_size: u64) -> TensorParameters<'_> {
    TensorParameters {
        shared_memory_region: Some(region),
        shared_memory_byte_size: Some(byte_size),
        shared_memory_offset: (offset != 0).then_some(offset),
        ..Default::default()
    }
}

/// Encodes a request body: the JSON header, then each inline input's bytes in input order
/// (none with `json_inputs`: the values are in the header, written straight from the tensor's
/// bytes). The header length is `None` when the body is all JSON, which perf_analyzer then sends
/// without `Inference-Header-Content-Length`.
pub(super) fn encode_request(
    spec: &RequestSpec,
    json_inputs: bool,
    json_outputs: bool,
) -> ClientResult<(Bytes, Option<usize>)> {
    let json_bytes: usize = match json_inputs {
        true => spec.inputs.iter().map(|(_, s)| if let InputSource::Inline(t) = s { t.data.len() } else { 0 }).sum(),
        false => 0,
    };
    let mut body = Vec::with_capacity(256 + json_bytes * 5);
    body.extend_from_slice(b"{\"id\":\"\",\"inputs\":[");
    for (i, (name, source)) in spec.inputs.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        let written = match source {
            InputSource::Inline(t) if json_inputs => {
                let head = InputHeader {
                    name,
                    shape: &t.shape,
                    datatype: t.dtype.as_str(),
                    parameters: TensorParameters::default(),
                };
                write_with_data(&head, t.dtype, &t.data, &mut body)
                    .map_err(|e| ClientError::Invalid(format!("input '{name}' cannot be sent as JSON: {e}")))?;
                continue;
            }
            InputSource::Inline(t) => serde_json::to_writer(
                &mut body,
                &InputHeader {
                    name,
                    shape: &t.shape,
                    datatype: t.dtype.as_str(),
                    parameters: TensorParameters { binary_data_size: Some(t.data.len() as u64), ..Default::default() },
                },
            ),
            InputSource::SystemShm { region, offset, byte_size, dtype, shape } => serde_json::to_writer(
                &mut body,
                &InputHeader {
                    name,
                    shape,
                    datatype: dtype.as_str(),
                    parameters: shm_parameters(region, *offset, *byte_size),
                },
            ),
        };
        written.map_err(|e| ClientError::Invalid(format!("cannot encode the request: {e}")))?;
    }
    let outputs: Vec<OutputHeader> = spec
        .outputs
        .iter()
        .map(|(name, target)| OutputHeader {
            name,
            parameters: match target {
                OutputTarget::Inline => TensorParameters { binary_data: Some(!json_outputs), ..Default::default() },
                OutputTarget::SystemShm { region, offset, byte_size } => shm_parameters(region, *offset, *byte_size),
            },
        })
        .collect();
    body.extend_from_slice(b"],\"outputs\":");
    serde_json::to_writer(&mut body, &outputs)
        .map_err(|e| ClientError::Invalid(format!("cannot encode the request: {e}")))?;
    body.push(b'}');
    let header_length = body.len();
    if json_inputs {
        return Ok((Bytes::from(body), None));
    }
    for (_, source) in &spec.inputs {
        if let InputSource::Inline(t) = source {
            body.extend_from_slice(&t.data);
        }
    }
    Ok((Bytes::from(body), Some(header_length)))
}

#[derive(Deserialize)]
struct ResponseHeader {
    #[serde(default)]
    outputs: Vec<TensorJson>,
}

/// Decodes a 200 infer response: the JSON header (its length from the header, else the whole
/// body), then binary outputs as consecutive slices in `outputs` order. JSON `data` outputs are
/// re-encoded in binary layout; shared-memory outputs come back with empty data.
pub(super) fn decode_response(
    body: Bytes,
    header_length: Option<usize>,
    keep_outputs: bool,
) -> ClientResult<InferResult> {
    let json_end = header_length.unwrap_or(body.len());
    if json_end > body.len() {
        return Err(ClientError::Protocol(format!(
            "inference header length {json_end} exceeds the {}-byte body",
            body.len()
        )));
    }
    // A 200 answer the caller does not keep is not parsed: the load loop only times the
    // exchange, and the run's first request is checked in full before the load starts.
    if !keep_outputs {
        return Ok(InferResult::default());
    }
    let header: ResponseHeader = serde_json::from_slice(&body[..json_end])
        .map_err(|e| ClientError::Protocol(format!("infer response JSON: {e}")))?;
    let mut pos = json_end;
    let mut outputs = Vec::with_capacity(header.outputs.len());
    for o in header.outputs {
        let dtype =
            DataType::parse(&o.datatype).or_else(|| (o.datatype == "STRING").then_some(DataType::Bytes)).ok_or_else(
                || ClientError::Protocol(format!("output '{}' has unknown datatype '{}'", o.name, o.datatype)),
            )?;
        let binary_size = o.parameters.as_ref().and_then(|p| p.get("binary_data_size")).and_then(|v| v.as_u64());
        let data = match binary_size {
            Some(size) => {
                let end = pos.checked_add(size as usize).filter(|&e| e <= body.len()).ok_or_else(|| {
                    ClientError::Protocol(format!("output '{}' declares {size} bytes past the end of the body", o.name))
                })?;
                let slice = body.slice(pos..end);
                pos = end;
                slice
            }
            None => match o.data {
                Some(values) => values.into_bytes(dtype, &o.shape).map_err(|e| output_data_error(&o.name, e))?.into(),
                None => Bytes::new(),
            },
        };
        outputs.push((o.name, Tensor { dtype, shape: o.shape, data }));
    }
    Ok(InferResult { outputs, ..Default::default() })
}

/// Why an output's JSON `data` is not a tensor of its datatype and shape.
pub(super) fn output_data_error(name: &str, e: DataError) -> ClientError {
    ClientError::Protocol(match e {
        DataError::BadShape => format!("output '{name}' has an invalid shape"),
        DataError::Count { found } => format!("output '{name}' data: {found} elements do not fill its shape"),
        DataError::Half => format!("output '{name}' data: FP16 and BF16 cannot travel as JSON"),
        DataError::Invalid { index, text } => format!("output '{name}' data: element {index} ({text}) is not valid"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RequestSpec {
        RequestSpec {
            model_name: "my model".into(),
            model_version: "".into(),
            inputs: vec![
                ("A".into(), InputSource::Inline(Tensor::from_f32(vec![1, 2], &[1.0, 2.0]))),
                (
                    "B".into(),
                    InputSource::SystemShm {
                        region: "B_0_0".into(),
                        offset: 0,
                        byte_size: 8,
                        dtype: DataType::Int32,
                        shape: vec![2],
                    },
                ),
            ],
            outputs: vec![
                ("X".into(), OutputTarget::Inline),
                ("Y".into(), OutputTarget::SystemShm { region: "Y".into(), offset: 16, byte_size: 64 }),
            ],
            decoupled: false,
        }
    }

    #[test]
    fn request_encoding_matches_perf_analyzer() {
        let (body, n) = encode_request(&spec(), false, false).unwrap();
        let n = n.expect("a binary body has a header length");
        let header: serde_json::Value = serde_json::from_slice(&body[..n]).unwrap();
        assert_eq!(header["id"], "");
        assert_eq!(header["inputs"][0]["parameters"], serde_json::json!({"binary_data_size": 8}));
        assert_eq!(header["inputs"][0]["shape"], serde_json::json!([1, 2]));
        assert_eq!(
            header["inputs"][1]["parameters"],
            serde_json::json!({"shared_memory_region": "B_0_0", "shared_memory_byte_size": 8})
        );
        assert_eq!(header["outputs"][0]["parameters"], serde_json::json!({"binary_data": true}));
        assert_eq!(header["outputs"][1]["parameters"]["shared_memory_offset"], 16);
        assert_eq!(&body[n..], &Tensor::from_f32(vec![2], &[1.0, 2.0]).data[..]);
    }

    #[test]
    fn a_sequence_step_opens_the_header_with_its_parameters() {
        let (body, n) = encode_request(&spec(), false, false).unwrap();
        let n = n.unwrap();
        let flags = SequenceFlags { id: CorrelationId::Number(42), start: true, end: false };
        let head = sequence_prefix(&flags);
        // The body sent: the new head, then the prepared body without its `{`.
        let mut sent = head.to_vec();
        sent.extend_from_slice(&body[1..]);
        let length = n + head.len() - 1;
        let header: serde_json::Value = serde_json::from_slice(&sent[..length]).unwrap();
        assert_eq!(
            header["parameters"],
            serde_json::json!({"sequence_id": 42, "sequence_start": true, "sequence_end": false})
        );
        assert_eq!(header["inputs"][0]["parameters"], serde_json::json!({"binary_data_size": 8}));
        assert_eq!(&sent[length..], &body[n..]);
        let text = SequenceFlags { id: CorrelationId::Text("a\"b".into()), start: false, end: true };
        let head = sequence_prefix(&text);
        let mut sent = head.to_vec();
        sent.extend_from_slice(&body[1..n]);
        let header: serde_json::Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(header["parameters"]["sequence_id"], "a\"b");
        assert_eq!(header["parameters"]["sequence_end"], true);
    }

    #[test]
    fn json_tensor_formats_put_values_in_the_header() {
        let (body, n) = encode_request(&spec(), true, true).unwrap();
        assert_eq!(n, None, "an all-JSON body has no header length");
        let header: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(header["inputs"][0]["data"], serde_json::json!([1.0, 2.0]));
        assert_eq!(header["inputs"][0]["parameters"], serde_json::json!({}));
        assert!(header["inputs"][1]["data"].is_null(), "shared-memory inputs stay in their region");
        assert_eq!(header["outputs"][0]["parameters"], serde_json::json!({"binary_data": false}));
    }

    #[test]
    fn response_decoding_binary_json_and_errors() {
        let json = br#"{"model_name":"m","model_version":"1","outputs":[{"name":"X","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}},{"name":"Y","datatype":"FP32","shape":[1],"data":[1.5]},{"name":"Z","datatype":"FP32","shape":[1]}]}"#;
        let mut body = json.to_vec();
        body.extend([1, 0, 0, 0, 2, 0, 0, 0]);
        let r = decode_response(Bytes::from(body.clone()), Some(json.len()), true).unwrap();
        assert_eq!(r.outputs[0].1.to_i32(), vec![1, 2]);
        assert_eq!(r.outputs[1].1.to_f32(), vec![1.5]);
        assert!(r.outputs[2].1.data.is_empty());
        assert!(decode_response(Bytes::from(body), Some(json.len() + 9), true).is_err());
        // Binary data announced but missing from the body.
        assert!(decode_response(Bytes::from_static(json), None, true).is_err());
        // No header length: the whole body is JSON.
        let plain = br#"{"outputs":[{"name":"Y","datatype":"FP32","shape":[1],"data":[2.5]}]}"#;
        assert_eq!(decode_response(Bytes::from_static(plain), None, true).unwrap().outputs[0].1.to_f32(), vec![2.5]);
        // Not kept: not parsed at all, only the header length is checked.
        assert!(decode_response(Bytes::from_static(b"not json"), None, false).unwrap().outputs.is_empty());
        assert!(decode_response(Bytes::from_static(plain), Some(plain.len() + 1), false).is_err());
        let e = error_from_body(StatusCode::NOT_FOUND, br#"{"error":"Request for unknown model: 'x' is not found"}"#);
        assert!(matches!(e, ClientError::Server(ref m) if m.starts_with("Request for unknown model")));
        assert!(error_from_body(StatusCode::BAD_GATEWAY, b"").to_string().contains("502"));
    }
}
