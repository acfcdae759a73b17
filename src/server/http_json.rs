//! The HTTP inference body (KSERVE_V2.md §3.7): the JSON "inference header", JSON `data` tensors
//! (§2.3), the binary tensor-data extension (§3.7.2) and the response in JSON or JSON + binary.
//! Decoding yields a protocol-neutral [`InferRequest`] plus how each output should travel back.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::{ServerError, ServerResult};
use super::infer::{
    CorrelationId, InferRequest, InferResponse, InputData, InputTensor, OutputData, RequestedOutput, SequenceFlags,
    ShmRef,
};
use crate::proto::inference::ModelConfig;
use crate::tensor::json::{write_with_data, DataError, JsonData, TensorJson};
use crate::tensor::{DataType, JsonValuesError};

#[derive(Deserialize)]
struct RequestJson {
    #[serde(default)]
    id: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    inputs: Vec<TensorJson>,
    #[serde(default)]
    outputs: Option<Vec<OutputJson>>,
}

#[derive(Deserialize)]
struct OutputJson {
    name: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

/// How the client wants outputs back: binary (after the JSON) or as JSON `data`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutputFormats {
    /// Format of outputs the request did not list (`binary_data_output`).
    pub default_binary: bool,
    /// Per listed output: its own `binary_data` choice.
    pub binary: HashMap<String, bool>,
}

impl OutputFormats {
    pub fn is_binary(&self, output: &str) -> bool {
        self.binary.get(output).copied().unwrap_or(self.default_binary)
    }
}

/// A decoded HTTP inference request.
#[derive(Debug)]
pub struct DecodedRequest {
    pub request: InferRequest,
    pub formats: OutputFormats,
}

/// Decodes an infer body. `header_len` is the `Inference-Header-Content-Length` value, if sent;
/// `config` is the target model's config, needed for the raw single-input mode (`header_len = 0`).
pub fn decode_request(
    config: &ModelConfig,
    model_version: &str,
    body: Bytes,
    header_len: Option<usize>,
) -> ServerResult<DecodedRequest> {
    let model = config.name.as_str();
    let (json, mut binary) = match header_len {
        None => (body, None),
        Some(0) => return decode_raw(config, model_version, body),
        Some(n) if n <= body.len() => (body.slice(..n), Some(body.slice(n..))),
        Some(n) => {
            return Err(ServerError::invalid_arg(format!(
                "inference header size should be in range (0, {}), got: {n}",
                body.len()
            )))
        }
    };
    let parsed: RequestJson = serde_json::from_slice(&json).map_err(bad_json)?;

    let parameters = parsed.parameters.unwrap_or_default();
    let default_binary = match parameters.get("binary_data_output") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| not_bool("binary_data_output"))?,
    };
    if let Some(key) = parameters.keys().find(|k| k.starts_with("triton_")) {
        return Err(ServerError::invalid_arg(format!("parameter keys starting with 'triton_' are reserved: '{key}'")));
    }
    let sequence = sequence_params(&parameters)?;

    let mut inputs = Vec::with_capacity(parsed.inputs.len());
    for input in parsed.inputs {
        let params = input.parameters.unwrap_or_default();
        let binary_size = uint_param(&params, "binary_data_size", &input.name)?;
        let shm = shm_param(&params, &input.name)?;
        let sources = [input.data.is_some(), binary_size.is_some(), shm.is_some()];
        if sources.iter().filter(|&&s| s).count() != 1 {
            return Err(ServerError::invalid_arg(format!(
                "Input '{}' must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'",
                input.name
            )));
        }
        let data = if let Some(r) = shm {
            InputData::Shm(r)
        } else if let Some(size) = binary_size {
            let Some(rest) = binary.as_mut() else {
                return Err(ServerError::invalid_arg(format!(
                    "input '{}' sets 'binary_data_size' but the request has no Inference-Header-Content-Length header",
                    input.name
                )));
            };
            let size = size as usize;
            if rest.len() < size {
                return Err(ServerError::invalid_arg(format!(
                    "unexpected size for input '{}', expecting {} additional bytes for model '{model}'",
                    input.name,
                    size - rest.len()
                )));
            }
            InputData::Raw(rest.split_to(size))
        } else {
            let dtype = DataType::parse(&input.datatype).ok_or_else(|| {
                ServerError::invalid_arg(format!("input '{}' has unknown datatype '{}'", input.name, input.datatype))
            })?;
            let data = input.data.expect("exactly one source is set");
            InputData::Raw(json_to_tensor_bytes(&input.name, dtype, &input.shape, data)?)
        };
        inputs.push(InputTensor { name: input.name, datatype: input.datatype, shape: input.shape, data });
    }
    if let Some(rest) = &binary {
        if !rest.is_empty() {
            return Err(ServerError::invalid_arg(format!(
                "unexpected additional input data for model '{model}': {} bytes follow the last binary input",
                rest.len()
            )));
        }
    }

    let mut formats = OutputFormats { default_binary, binary: HashMap::new() };
    let mut outputs = Vec::new();
    for output in parsed.outputs.unwrap_or_default() {
        let params = output.parameters.unwrap_or_default();
        let shm = shm_param(&params, &output.name)?;
        let wants_binary = match params.get("binary_data") {
            None => None,
            Some(v) => Some(v.as_bool().ok_or_else(|| not_bool("binary_data"))?),
        };
        if params.contains_key("classification") {
            return Err(ServerError::unsupported(format!(
                "output '{}': the classification extension is not supported by this server",
                output.name
            )));
        }
        if shm.is_some() && wants_binary == Some(true) {
            return Err(ServerError::invalid_arg(format!(
                "output '{}' can be written to shared memory or returned as binary data, not both",
                output.name
            )));
        }
        formats.binary.insert(output.name.clone(), wants_binary.unwrap_or(default_binary));
        outputs.push(RequestedOutput { name: output.name, shm });
    }

    let request = InferRequest {
        model_name: model.to_string(),
        model_version: model_version.to_string(),
        id: parsed.id,
        inputs,
        outputs,
        sequence,
    };
    Ok(DecodedRequest { request, formats })
}

/// `Inference-Header-Content-Length: 0`: the whole body is the data of the model's only input,
/// and every output comes back binary. The shape follows the config, the one variable dimension
/// taking what the byte count implies, with a batch of 1 for batching models (as Triton does).
fn decode_raw(config: &ModelConfig, model_version: &str, body: Bytes) -> ServerResult<DecodedRequest> {
    let model = &config.name;
    let [spec] = config.input.as_slice() else {
        return Err(ServerError::invalid_arg(format!(
            "a raw binary request (Inference-Header-Content-Length: 0) needs a model with exactly one input; '{model}' has {}",
            config.input.len()
        )));
    };
    let dtype = DataType::from_config_enum(spec.data_type).expect("config validated at load");
    let mut shape: Vec<i64> = Vec::with_capacity(spec.dims.len() + 1);
    if config.max_batch_size > 0 {
        shape.push(1);
    }
    let mut variable = None;
    let mut fixed_elements: i64 = 1;
    let too_large = || {
        ServerError::exhausted(format!("raw input '{}': the config's dims {:?} are too large", spec.name, spec.dims))
    };
    for &d in &spec.dims {
        if d == -1 {
            if variable.is_some() {
                return Err(ServerError::invalid_arg(format!(
                    "the shape of raw input '{}' cannot be deduced: it has more than one variable-sized dimension",
                    spec.name
                )));
            }
            variable = Some(shape.len());
        } else {
            fixed_elements = fixed_elements.checked_mul(d).ok_or_else(too_large)?;
        }
        shape.push(d);
    }
    if let Some(axis) = variable {
        let per_element = match dtype.element_size() {
            Some(size) => fixed_elements.checked_mul(size as i64).ok_or_else(too_large)?,
            // A BYTES tensor's byte count says nothing about its element count: take one element.
            None => 0,
        };
        shape[axis] = if per_element == 0 {
            1
        } else if body.len() as i64 % per_element == 0 {
            body.len() as i64 / per_element
        } else {
            return Err(ServerError::invalid_arg(format!(
                "raw input '{}': {} bytes is not a whole number of {dtype} elements of shape {:?}",
                spec.name,
                body.len(),
                spec.dims
            )));
        };
    }
    let request = InferRequest {
        model_name: model.clone(),
        model_version: model_version.to_string(),
        id: String::new(),
        inputs: vec![InputTensor {
            name: spec.name.clone(),
            datatype: dtype.as_str().into(),
            shape,
            data: InputData::Raw(body),
        }],
        outputs: vec![],
        sequence: None,
    };
    Ok(DecodedRequest { request, formats: OutputFormats { default_binary: true, binary: HashMap::new() } })
}

/// A JSON body that does not parse: a client error, named as Triton names it.
pub fn bad_json(e: serde_json::Error) -> ServerError {
    ServerError::invalid_arg(format!("failed to parse the request JSON buffer: {e}"))
}

/// The sequence parameters of the request header, as Triton reads them: `sequence_id` an unsigned
/// integer or a string, `sequence_start` and `sequence_end` booleans.
fn sequence_params(params: &Map<String, Value>) -> ServerResult<Option<SequenceFlags>> {
    let id = match params.get("sequence_id") {
        None => None,
        Some(Value::String(s)) => Some(CorrelationId::Text(s.clone())),
        Some(v) => Some(CorrelationId::Number(v.as_u64().ok_or_else(|| {
            ServerError::invalid_arg(format!(
                "Unable to parse 'sequence_id': expected an unsigned integer or a string, got {v}"
            ))
        })?)),
    };
    let flag = |key: &str| match params.get(key) {
        None => Ok(false),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| ServerError::invalid_arg(format!("Unable to parse '{key}': expected a boolean, got {v}"))),
    };
    let (start, end) = (flag("sequence_start")?, flag("sequence_end")?);
    Ok(SequenceFlags::from_parts(id, start, end))
}

fn not_bool(key: &str) -> ServerError {
    ServerError::invalid_arg(format!("parameter '{key}' must be a boolean"))
}

fn uint_param(params: &Map<String, Value>, key: &str, tensor: &str) -> ServerResult<Option<u64>> {
    match params.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ServerError::invalid_arg(format!(
                "tensor '{tensor}': parameter '{key}' must be an unsigned integer, got {v}"
            ))
        }),
    }
}

/// The shared-memory parameters of an input or requested output, if any.
fn shm_param(params: &Map<String, Value>, tensor: &str) -> ServerResult<Option<ShmRef>> {
    let region = match params.get("shared_memory_region") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(ServerError::invalid_arg(format!(
                "tensor '{tensor}': parameter 'shared_memory_region' must be a string, got {v}"
            )))
        }
    };
    let byte_size = uint_param(params, "shared_memory_byte_size", tensor)?;
    let offset = uint_param(params, "shared_memory_offset", tensor)?;
    match (region, byte_size) {
        (None, None) if offset.is_none() => Ok(None),
        (Some(region), Some(byte_size)) => Ok(Some(ShmRef { region, offset: offset.unwrap_or(0), byte_size })),
        _ => Err(ServerError::invalid_arg(format!(
            "tensor '{tensor}': 'shared_memory_region' and 'shared_memory_byte_size' must be given together"
        ))),
    }
}

/// JSON `data` (flat or nested) to the raw little-endian layout of §2.2.
fn json_to_tensor_bytes(name: &str, dtype: DataType, shape: &[i64], data: JsonData) -> ServerResult<Bytes> {
    match data.into_bytes(dtype, shape) {
        Ok(bytes) => Ok(bytes.into()),
        Err(DataError::BadShape) => Err(ServerError::invalid_arg(format!("input '{name}' has an invalid shape {shape:?}"))),
        Err(DataError::Count { found }) => Err(ServerError::invalid_arg(format!(
            "Unable to parse 'data' of input '{name}': Shape does not match true shape of 'data' field ({found} elements for shape {shape:?})"
        ))),
        Err(DataError::Half) => Err(ServerError::invalid_arg(format!(
            "input '{name}': sending {dtype} data via JSON is not supported, use binary data"
        ))),
        Err(DataError::Invalid { index, text }) => Err(ServerError::invalid_arg(format!(
            "input '{name}': element {index} ({text}) is not a valid {dtype} value"
        ))),
    }
}

fn json_half_error(name: &str, dtype: DataType) -> ServerError {
    ServerError::invalid_arg(format!(
        "output '{name}': sending {dtype} data via JSON is not supported, request it with binary_data"
    ))
}

/// Rejects, before inference, outputs that would have to travel as JSON but cannot (FP16/BF16).
pub fn check_json_outputs(config: &ModelConfig, request: &InferRequest, formats: &OutputFormats) -> ServerResult<()> {
    for spec in &config.output {
        let listed = request.outputs.iter().find(|o| o.name == spec.name);
        let returned = request.outputs.is_empty() || listed.is_some();
        let as_json = returned && listed.is_none_or(|o| o.shm.is_none()) && !formats.is_binary(&spec.name);
        let dtype = DataType::from_config_enum(spec.data_type);
        if let Some(dtype @ (DataType::Fp16 | DataType::Bf16)) = dtype {
            if as_json {
                return Err(json_half_error(&spec.name, dtype));
            }
        }
    }
    Ok(())
}

/// An output tensor object without its data (written after it by [`write_with_data`]).
#[derive(Serialize)]
struct OutputHead<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [i64],
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<BinaryParams>,
}

#[derive(Serialize)]
struct BinaryParams {
    binary_data_size: usize,
}

/// An encoded response body: the JSON, and (when some output is binary) the bytes after it.
pub struct EncodedResponse {
    pub body: Bytes,
    /// `Some(json length)` when binary data follows the JSON.
    pub header_len: Option<usize>,
}

/// The response JSON (`id` when set, `model_name`, `model_version`, `outputs`), with JSON `data`
/// written straight from each output's bytes, then the binary outputs.
pub fn encode_response(response: &InferResponse, formats: &OutputFormats) -> ServerResult<EncodedResponse> {
    fn string(out: &mut Vec<u8>, s: &str) {
        serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
    }
    let as_json = |name: &str, data: &OutputData| match data {
        OutputData::Raw(bytes) if !formats.is_binary(name) => Some(bytes.len()),
        _ => None,
    };
    // Sized up front (a printed element takes up to ~5 characters per byte of its binary form),
    // so a large tensor's text is not copied again each time the buffer grows.
    let data_bytes: usize = response.outputs.iter().filter_map(|o| as_json(&o.name, &o.data)).sum();
    let mut json = Vec::with_capacity(256 + data_bytes * 5);
    json.push(b'{');
    if !response.id.is_empty() {
        json.extend_from_slice(b"\"id\":");
        string(&mut json, &response.id);
        json.push(b',');
    }
    json.extend_from_slice(b"\"model_name\":");
    string(&mut json, &response.model_name);
    json.extend_from_slice(b",\"model_version\":");
    string(&mut json, &response.model_version);
    json.extend_from_slice(b",\"outputs\":[");
    let mut binary: Vec<&Bytes> = Vec::new();
    for (i, output) in response.outputs.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        let mut head = OutputHead {
            name: &output.name,
            datatype: output.datatype.as_str(),
            shape: &output.shape,
            parameters: None,
        };
        match &output.data {
            OutputData::Raw(bytes) if as_json(&output.name, &output.data).is_some() => {
                if matches!(output.datatype, DataType::Fp16 | DataType::Bf16) {
                    return Err(json_half_error(&output.name, output.datatype));
                }
                write_with_data(&head, output.datatype, bytes, &mut json)
                    .map_err(|e| unprintable_bytes(&output.name, e))?;
            }
            OutputData::Raw(bytes) => {
                binary.push(bytes);
                head.parameters = Some(BinaryParams { binary_data_size: bytes.len() });
                serde_json::to_writer(&mut json, &head).expect("writing to a Vec cannot fail");
            }
            OutputData::InShm => serde_json::to_writer(&mut json, &head).expect("writing to a Vec cannot fail"),
        }
    }
    json.extend_from_slice(b"]}");
    if binary.is_empty() {
        return Ok(EncodedResponse { body: json.into(), header_len: None });
    }
    let header_len = json.len();
    let mut body = BytesMut::with_capacity(header_len + binary.iter().map(|b| b.len()).sum::<usize>());
    body.extend_from_slice(&json);
    for chunk in binary {
        body.extend_from_slice(chunk);
    }
    Ok(EncodedResponse { body: body.freeze(), header_len: Some(header_len) })
}

/// A BYTES output that cannot travel as JSON. Outputs echo what a client sent (identity, or
/// BYTES left in its shared memory), so this is the client's doing.
fn unprintable_bytes(name: &str, e: JsonValuesError) -> ServerError {
    ServerError::invalid_arg(match e {
        JsonValuesError::MalformedBytes => format!(
            "output '{name}' holds malformed BYTES data (length prefixes that overrun it); request it with binary_data"
        ),
        JsonValuesError::NotUtf8 => {
            format!(
                "output '{name}' holds BYTES that are not UTF-8 and cannot travel as JSON; request it with binary_data"
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;
    use crate::tensor::DataType;

    fn identity() -> ModelConfig {
        parse_pbtxt(
            r#"backend: "identity" max_batch_size: 8
               input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
               output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]"#,
            "identity",
        )
        .unwrap()
    }

    fn raw(data: &InputData) -> &Bytes {
        match data {
            InputData::Raw(b) => b,
            InputData::Shm(_) => panic!("expected raw data"),
        }
    }

    #[test]
    fn nested_json_data_flattens_row_major() {
        let body = r#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2,2],"data":[[1,2],[3.5,4]]}]}"#;
        let d = decode_request(&identity(), "", Bytes::from(body), None).unwrap();
        let bytes = raw(&d.request.inputs[0].data);
        let t = crate::tensor::Tensor { dtype: DataType::Fp32, shape: vec![4], data: bytes.clone() };
        assert_eq!(t.to_f32(), vec![1.0, 2.0, 3.5, 4.0]);
        assert!(!d.formats.default_binary);
    }

    #[test]
    fn element_count_must_match_the_shape() {
        let body = r#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,3],"data":[1,2]}]}"#;
        let e = decode_request(&identity(), "", Bytes::from(body), None).unwrap_err();
        assert!(e.message.contains("Shape does not match"), "{e}");
    }

    #[test]
    fn binary_inputs_follow_the_header_in_order() {
        let json = r#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"parameters":{"binary_data_size":8}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}"#;
        let mut body = json.as_bytes().to_vec();
        body.extend_from_slice(&[0u8; 8]);
        let d = decode_request(&identity(), "", Bytes::from(body.clone()), Some(json.len())).unwrap();
        assert_eq!(raw(&d.request.inputs[0].data).len(), 8);
        assert!(d.formats.is_binary("OUTPUT0"));
        let short = decode_request(&identity(), "", Bytes::from(body[..body.len() - 3].to_vec()), Some(json.len()));
        assert!(short.unwrap_err().message.contains("expecting 3 additional bytes"));
        let mut long = body.clone();
        long.push(1);
        let extra = decode_request(&identity(), "", Bytes::from(long), Some(json.len()));
        assert!(extra.unwrap_err().message.contains("unexpected additional input data"));
    }

    #[test]
    fn raw_mode_deduces_the_shape() {
        let d = decode_request(&identity(), "", Bytes::from(vec![0u8; 12]), Some(0)).unwrap();
        assert_eq!(d.request.inputs[0].shape, vec![1, 3]);
        assert!(d.formats.default_binary);
        let e = decode_request(&identity(), "", Bytes::from(vec![0u8; 5]), Some(0)).unwrap_err();
        assert!(e.message.contains("not a whole number"), "{e}");
    }

    #[test]
    fn fp16_cannot_travel_as_json() {
        let body = r#"{"inputs":[{"name":"INPUT0","datatype":"FP16","shape":[1],"data":[1.0]}]}"#;
        let e = decode_request(&identity(), "", Bytes::from(body), None).unwrap_err();
        assert!(e.message.contains("FP16"), "{e}");
    }

    #[test]
    fn bytes_json_round_trip() {
        let body = r#"{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[2],"data":["ab",""]}]}"#;
        let d = decode_request(&identity(), "", Bytes::from(body), None).unwrap();
        let bytes = raw(&d.request.inputs[0].data);
        assert_eq!(&bytes[..], &[2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0]);
        let mut back = Vec::new();
        crate::tensor::json::write_data(DataType::Bytes, bytes, &mut back).unwrap();
        assert_eq!(back, br#"["ab",""]"#);
    }

    #[test]
    fn outputs_that_cannot_travel_as_json_are_refused() {
        use crate::server::infer::OutputTensor;
        let response = |datatype, bytes: &'static [u8]| InferResponse {
            model_name: "m".into(),
            model_version: "1".into(),
            id: String::new(),
            outputs: vec![OutputTensor {
                name: "o".into(),
                datatype,
                shape: vec![1],
                data: OutputData::Raw(Bytes::from_static(bytes)),
            }],
        };
        let json = OutputFormats::default();
        let e = |r| encode_response(&r, &json).err().expect("refused").message;
        assert!(e(response(DataType::Bytes, &[1, 0, 0, 0, 0xff])).contains("not UTF-8"));
        assert!(e(response(DataType::Bytes, &[9, 0, 0, 0, b'a'])).contains("malformed BYTES"));
        assert!(e(response(DataType::Fp16, &[0, 0])).contains("FP16"));
        let binary = OutputFormats { default_binary: true, ..Default::default() };
        assert!(encode_response(&response(DataType::Fp16, &[0, 0]), &binary).is_ok());
    }

    #[test]
    fn response_has_no_parameters_on_json_outputs_and_echoes_id() {
        use crate::server::infer::OutputTensor;
        let response = InferResponse {
            model_name: "identity".into(),
            model_version: "1".into(),
            id: "7".into(),
            outputs: vec![OutputTensor {
                name: "OUTPUT0".into(),
                datatype: DataType::Fp32,
                shape: vec![1, 1],
                data: OutputData::Raw(Bytes::from(1.1f32.to_le_bytes().to_vec())),
            }],
        };
        let json = encode_response(&response, &OutputFormats::default()).unwrap();
        assert_eq!(json.header_len, None);
        let v: Value = serde_json::from_slice(&json.body).unwrap();
        assert_eq!(v["id"], "7");
        assert_eq!(v["model_version"], "1");
        assert!(v["outputs"][0].get("parameters").is_none());
        assert_eq!(v["outputs"][0]["data"][0], 1.100000023841858);
        let bin = encode_response(&response, &OutputFormats { default_binary: true, ..Default::default() }).unwrap();
        let n = bin.header_len.unwrap();
        assert_eq!(bin.body.len(), n + 4);
        let v: Value = serde_json::from_slice(&bin.body[..n]).unwrap();
        assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 4);
    }
}
