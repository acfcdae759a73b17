//! The HTTP inference body (KSERVE_V2.md §3.7): the JSON "inference header", JSON `data` tensors
//! (§2.3), the binary tensor-data extension (§3.7.2) and the response in JSON or JSON + binary.
//! Decoding yields a protocol-neutral [`InferRequest`] plus how each output should travel back.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::{ServerError, ServerResult};
use super::infer::{
    CorrelationId, InferRequest, InferResponse, InputData, InputTensor, OutputData, RequestedOutput, SequenceFlags,
    ShmRef,
};
use crate::proto::inference::ModelConfig;
use crate::tensor::{byte_size, element_count, DataType, JsonValuesError};

#[derive(Deserialize)]
struct RequestJson {
    #[serde(default)]
    id: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    inputs: Vec<InputJson>,
    #[serde(default)]
    outputs: Option<Vec<OutputJson>>,
}

struct InputJson {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    parameters: Option<Map<String, Value>>,
    data: Option<JsonData>,
}

/// An input's JSON `data`. Clients write `datatype` before `data`, so the elements are usually
/// converted as they are parsed, with no `Value` per element; otherwise the value is kept and
/// converted once the datatype is known.
enum JsonData {
    Converted(TensorSink),
    Value(Value),
}

impl<'de> Deserialize<'de> for InputJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(InputVisitor)
    }
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum InputField {
    Name,
    Datatype,
    Shape,
    Parameters,
    Data,
    #[serde(other)]
    Other,
}

struct InputVisitor;

impl<'de> Visitor<'de> for InputVisitor {
    type Value = InputJson;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an input tensor object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputJson, A::Error> {
        use serde::de::Error;
        let (mut name, mut datatype, mut shape, mut parameters, mut data) = (None, None, None, None, None);
        fn once<T, E: Error>(slot: &mut Option<T>, field: &'static str, value: T) -> Result<(), E> {
            match slot.replace(value) {
                Some(_) => Err(E::duplicate_field(field)),
                None => Ok(()),
            }
        }
        while let Some(field) = map.next_key::<InputField>()? {
            match field {
                InputField::Name => once(&mut name, "name", map.next_value::<String>()?)?,
                InputField::Datatype => once(&mut datatype, "datatype", map.next_value::<String>()?)?,
                InputField::Shape => once(&mut shape, "shape", map.next_value::<Vec<i64>>()?)?,
                InputField::Parameters => once(&mut parameters, "parameters", map.next_value()?)?,
                InputField::Data => {
                    let value = match datatype.as_deref().and_then(DataType::parse) {
                        Some(dtype) => {
                            let hint = shape.as_deref().and_then(|s| byte_size(dtype, s)).unwrap_or(0);
                            map.next_value_seed(OptionalData(TensorSink::new(dtype, hint)))?.map(JsonData::Converted)
                        }
                        None => map.next_value::<Option<Value>>()?.map(JsonData::Value),
                    };
                    once(&mut data, "data", value)?;
                }
                InputField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(InputJson {
            name: name.ok_or_else(|| Error::missing_field("name"))?,
            datatype: datatype.ok_or_else(|| Error::missing_field("datatype"))?,
            shape: shape.ok_or_else(|| Error::missing_field("shape"))?,
            parameters: parameters.flatten(),
            data: data.flatten(),
        })
    }
}

/// JSON `data` elements in the raw little-endian layout of §2.2, nested arrays flattened in
/// row-major order. Elements are counted, and the first one that is not a valid value of the
/// datatype is kept for the error message, so errors come out in the same order as when the
/// whole value is parsed first.
struct TensorSink {
    dtype: DataType,
    bytes: Vec<u8>,
    count: usize,
    /// Index and JSON text of the first invalid element.
    bad: Option<(usize, String)>,
}

impl TensorSink {
    fn new(dtype: DataType, capacity_hint: usize) -> Self {
        // The hint comes from the client's shape: trust it only so far.
        TensorSink { dtype, bytes: Vec::with_capacity(capacity_hint.min(1 << 20)), count: 0, bad: None }
    }

    fn invalid(&mut self, value: impl FnOnce() -> Value) {
        if self.bad.is_none() {
            self.bad = Some((self.count, value().to_string()));
        }
        self.count += 1;
    }

    fn integer(&mut self, v: i128) {
        macro_rules! int {
            ($t:ty) => {
                match <$t>::try_from(v) {
                    Ok(x) => self.bytes.extend_from_slice(&x.to_le_bytes()),
                    Err(_) => return self.invalid(|| if v < 0 { Value::from(v as i64) } else { Value::from(v as u64) }),
                }
            };
        }
        match self.dtype {
            DataType::Uint8 => int!(u8),
            DataType::Uint16 => int!(u16),
            DataType::Uint32 => int!(u32),
            DataType::Uint64 => int!(u64),
            DataType::Int8 => int!(i8),
            DataType::Int16 => int!(i16),
            DataType::Int32 => int!(i32),
            DataType::Int64 => int!(i64),
            DataType::Fp32 => self.bytes.extend_from_slice(&(v as f64 as f32).to_le_bytes()),
            DataType::Fp64 => self.bytes.extend_from_slice(&(v as f64).to_le_bytes()),
            DataType::Fp16 | DataType::Bf16 => {}
            DataType::Bool | DataType::Bytes => {
                return self.invalid(|| if v < 0 { Value::from(v as i64) } else { Value::from(v as u64) })
            }
        }
        self.count += 1;
    }

    fn float(&mut self, v: f64) {
        match self.dtype {
            DataType::Fp32 => self.bytes.extend_from_slice(&(v as f32).to_le_bytes()),
            DataType::Fp64 => self.bytes.extend_from_slice(&v.to_le_bytes()),
            DataType::Fp16 | DataType::Bf16 => {}
            _ => return self.invalid(|| Value::from(v)),
        }
        self.count += 1;
    }
}

/// `data` that may be `null` (no data).
struct OptionalData(TensorSink);

impl<'de> DeserializeSeed<'de> for OptionalData {
    type Value = Option<TensorSink>;
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for OptionalData {
    type Value = Option<TensorSink>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("tensor data")
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: serde::Deserializer<'de>>(mut self, deserializer: D) -> Result<Self::Value, D::Error> {
        Elements(&mut self.0).deserialize(deserializer)?;
        Ok(Some(self.0))
    }
}

/// One JSON value of `data`: an array (flattened) or one element.
struct Elements<'a>(&'a mut TensorSink);

impl<'de> DeserializeSeed<'de> for Elements<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Elements<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("tensor data")
    }
    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        while seq.next_element_seed(Elements(&mut *self.0))?.is_some() {}
        Ok(())
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        match self.0.dtype {
            DataType::Bool => {
                self.0.bytes.push(v as u8);
                self.0.count += 1;
            }
            _ => self.0.invalid(|| Value::Bool(v)),
        }
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.0.integer(v.into());
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.0.integer(v.into());
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.0.float(v);
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        match self.0.dtype {
            DataType::Bytes => {
                self.0.bytes.extend_from_slice(&(v.len() as u32).to_le_bytes());
                self.0.bytes.extend_from_slice(v.as_bytes());
                self.0.count += 1;
            }
            _ => self.0.invalid(|| Value::from(v)),
        }
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.invalid(|| Value::Null);
        Ok(())
    }
    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<(), M::Error> {
        let value = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        self.0.invalid(|| value);
        Ok(())
    }
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
            return Err(ServerError::invalid(format!(
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
        return Err(ServerError::invalid(format!("parameter keys starting with 'triton_' are reserved: '{key}'")));
    }
    let sequence = sequence_params(&parameters)?;

    let mut inputs = Vec::with_capacity(parsed.inputs.len());
    for input in parsed.inputs {
        let params = input.parameters.unwrap_or_default();
        let binary_size = uint_param(&params, "binary_data_size", &input.name)?;
        let shm = shm_param(&params, &input.name)?;
        let sources = [input.data.is_some(), binary_size.is_some(), shm.is_some()];
        if sources.iter().filter(|&&s| s).count() != 1 {
            return Err(ServerError::invalid(format!(
                "Input '{}' must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'",
                input.name
            )));
        }
        let data = if let Some(r) = shm {
            InputData::Shm(r)
        } else if let Some(size) = binary_size {
            let Some(rest) = binary.as_mut() else {
                return Err(ServerError::invalid(format!(
                    "input '{}' sets 'binary_data_size' but the request has no Inference-Header-Content-Length header",
                    input.name
                )));
            };
            let size = size as usize;
            if rest.len() < size {
                return Err(ServerError::invalid(format!(
                    "unexpected size for input '{}', expecting {} additional bytes for model '{model}'",
                    input.name,
                    size - rest.len()
                )));
            }
            InputData::Raw(rest.split_to(size))
        } else {
            let dtype = DataType::parse(&input.datatype).ok_or_else(|| {
                ServerError::invalid(format!("input '{}' has unknown datatype '{}'", input.name, input.datatype))
            })?;
            let data = input.data.expect("exactly one source is set");
            InputData::Raw(json_to_tensor_bytes(&input.name, dtype, &input.shape, data)?)
        };
        inputs.push(InputTensor { name: input.name, datatype: input.datatype, shape: input.shape, data });
    }
    if let Some(rest) = &binary {
        if !rest.is_empty() {
            return Err(ServerError::invalid(format!(
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
            return Err(ServerError::invalid(format!(
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
        return Err(ServerError::invalid(format!(
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
                return Err(ServerError::invalid(format!(
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
            return Err(ServerError::invalid(format!(
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
    ServerError::invalid(format!("failed to parse the request JSON buffer: {e}"))
}

/// The sequence parameters of the request header, as Triton reads them: `sequence_id` an unsigned
/// integer or a string, `sequence_start` and `sequence_end` booleans.
fn sequence_params(params: &Map<String, Value>) -> ServerResult<Option<SequenceFlags>> {
    let id = match params.get("sequence_id") {
        None => None,
        Some(Value::String(s)) => Some(CorrelationId::Text(s.clone())),
        Some(v) => Some(CorrelationId::Number(v.as_u64().ok_or_else(|| {
            ServerError::invalid(format!(
                "Unable to parse 'sequence_id': expected an unsigned integer or a string, got {v}"
            ))
        })?)),
    };
    let flag = |key: &str| match params.get(key) {
        None => Ok(false),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| ServerError::invalid(format!("Unable to parse '{key}': expected a boolean, got {v}"))),
    };
    let (start, end) = (flag("sequence_start")?, flag("sequence_end")?);
    Ok(SequenceFlags::from_parts(id, start, end))
}

fn not_bool(key: &str) -> ServerError {
    ServerError::invalid(format!("parameter '{key}' must be a boolean"))
}

fn uint_param(params: &Map<String, Value>, key: &str, tensor: &str) -> ServerResult<Option<u64>> {
    match params.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ServerError::invalid(format!("tensor '{tensor}': parameter '{key}' must be an unsigned integer, got {v}"))
        }),
    }
}

/// The shared-memory parameters of an input or requested output, if any.
fn shm_param(params: &Map<String, Value>, tensor: &str) -> ServerResult<Option<ShmRef>> {
    let region = match params.get("shared_memory_region") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(ServerError::invalid(format!(
                "tensor '{tensor}': parameter 'shared_memory_region' must be a string, got {v}"
            )))
        }
    };
    let byte_size = uint_param(params, "shared_memory_byte_size", tensor)?;
    let offset = uint_param(params, "shared_memory_offset", tensor)?;
    match (region, byte_size) {
        (None, None) if offset.is_none() => Ok(None),
        (Some(region), Some(byte_size)) => Ok(Some(ShmRef { region, offset: offset.unwrap_or(0), byte_size })),
        _ => Err(ServerError::invalid(format!(
            "tensor '{tensor}': 'shared_memory_region' and 'shared_memory_byte_size' must be given together"
        ))),
    }
}

/// JSON `data` (flat or nested) to the raw little-endian layout of §2.2.
fn json_to_tensor_bytes(name: &str, dtype: DataType, shape: &[i64], data: JsonData) -> ServerResult<Bytes> {
    let sink = match data {
        JsonData::Converted(sink) if sink.dtype == dtype => sink,
        JsonData::Converted(_) => unreachable!("converted with the input's own datatype"),
        JsonData::Value(value) => {
            let mut sink = TensorSink::new(dtype, 0);
            Elements(&mut sink).deserialize(&value).expect("a JSON value holds only JSON types");
            sink
        }
    };
    let expected = element_count(shape)
        .ok_or_else(|| ServerError::invalid(format!("input '{name}' has an invalid shape {shape:?}")))?;
    if sink.count != expected {
        return Err(ServerError::invalid(format!(
            "Unable to parse 'data' of input '{name}': Shape does not match true shape of 'data' field ({} elements for shape {shape:?})",
            sink.count
        )));
    }
    if matches!(dtype, DataType::Fp16 | DataType::Bf16) {
        return Err(ServerError::invalid(format!(
            "input '{name}': sending {dtype} data via JSON is not supported, use binary data"
        )));
    }
    if let Some((i, v)) = sink.bad {
        return Err(ServerError::invalid(format!("input '{name}': element {i} ({v}) is not a valid {dtype} value")));
    }
    Ok(sink.bytes.into())
}

/// Can this output travel as JSON `data`? The errors [`JsonOutputData`] cannot raise while it writes.
fn check_json_output(name: &str, dtype: DataType, data: &[u8]) -> ServerResult<()> {
    if matches!(dtype, DataType::Fp16 | DataType::Bf16) {
        return Err(json_half_error(name, dtype));
    }
    if dtype == DataType::Bytes {
        for element in bytes_elements(data) {
            match element {
                // Outputs echo what a client sent (identity, or BYTES left in its shared memory).
                Err(JsonValuesError::MalformedBytes) => {
                    return Err(ServerError::invalid(format!(
                        "output '{name}' holds malformed BYTES data (length prefixes that overrun it); request it with binary_data"
                    )))
                }
                Err(JsonValuesError::NotUtf8) => {
                    return Err(ServerError::invalid(format!(
                        "output '{name}' holds BYTES that are not UTF-8 and cannot travel as JSON; request it with binary_data"
                    )))
                }
                Ok(_) => {}
            }
        }
    }
    Ok(())
}

/// The elements of BYTES data (4-byte little-endian length, then the bytes), as text. Trailing
/// bytes too short for a length are ignored, as [`crate::tensor::json_values`] does.
fn bytes_elements(data: &[u8]) -> impl Iterator<Item = Result<&str, JsonValuesError>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let len = u32::from_le_bytes(data.get(pos..pos + 4)?.try_into().expect("4 bytes")) as usize;
        let Some(element) = data.get(pos + 4..pos + 4 + len) else {
            pos = data.len();
            return Some(Err(JsonValuesError::MalformedBytes));
        };
        pos += 4 + len;
        Some(std::str::from_utf8(element).map_err(|_| JsonValuesError::NotUtf8))
    })
}

/// An output's JSON `data`, written straight from its bytes (no `Value` per element), exactly
/// as [`crate::tensor::json_values`] would print: floats widened to f64, NaN and infinities as
/// `null`. Checked first by [`check_json_output`].
struct JsonOutputData<'a> {
    dtype: DataType,
    bytes: &'a [u8],
}

impl Serialize for JsonOutputData<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        macro_rules! each {
            ($t:ty, $to:expr) => {
                s.collect_seq(
                    self.bytes
                        .chunks_exact(std::mem::size_of::<$t>())
                        .map(|c| $to(<$t>::from_le_bytes(c.try_into().expect("chunk of the element size")))),
                )
            };
        }
        match self.dtype {
            DataType::Bool => s.collect_seq(self.bytes.iter().map(|&b| b != 0)),
            DataType::Uint8 => s.collect_seq(self.bytes),
            DataType::Uint16 => each!(u16, |x| x),
            DataType::Uint32 => each!(u32, |x| x),
            DataType::Uint64 => each!(u64, |x| x),
            DataType::Int8 => each!(i8, |x| x),
            DataType::Int16 => each!(i16, |x| x),
            DataType::Int32 => each!(i32, |x| x),
            DataType::Int64 => each!(i64, |x| x),
            DataType::Fp32 => each!(f32, |x: f32| x as f64),
            DataType::Fp64 => each!(f64, |x: f64| x),
            DataType::Bytes => s.collect_seq(bytes_elements(self.bytes).map(|e| e.unwrap_or_default())),
            DataType::Fp16 | DataType::Bf16 => Err(serde::ser::Error::custom("half floats cannot travel as JSON")),
        }
    }
}

fn json_half_error(name: &str, dtype: DataType) -> ServerError {
    ServerError::invalid(format!(
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

#[derive(Serialize)]
struct ResponseJson<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    model_name: &'a str,
    model_version: &'a str,
    outputs: Vec<OutputJsonOut<'a>>,
}

#[derive(Serialize)]
struct OutputJsonOut<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [i64],
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<BinaryParams>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<JsonOutputData<'a>>,
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

pub fn encode_response(response: &InferResponse, formats: &OutputFormats) -> ServerResult<EncodedResponse> {
    let mut binary: Vec<&Bytes> = Vec::new();
    let mut outputs = Vec::with_capacity(response.outputs.len());
    for output in &response.outputs {
        let (parameters, data) = match &output.data {
            OutputData::InShm => (None, None),
            OutputData::Raw(bytes) if formats.is_binary(&output.name) => {
                binary.push(bytes);
                (Some(BinaryParams { binary_data_size: bytes.len() }), None)
            }
            OutputData::Raw(bytes) => {
                check_json_output(&output.name, output.datatype, bytes)?;
                (None, Some(JsonOutputData { dtype: output.datatype, bytes }))
            }
        };
        outputs.push(OutputJsonOut {
            name: &output.name,
            datatype: output.datatype.as_str(),
            shape: &output.shape,
            parameters,
            data,
        });
    }
    let any_binary = outputs.iter().any(|o| o.parameters.is_some());
    // Sized up front (a printed element takes up to ~5 characters per byte of its binary form),
    // so a large tensor's text is not copied again each time the buffer grows.
    let data_bytes: usize = outputs.iter().filter_map(|o| o.data.as_ref()).map(|d| d.bytes.len()).sum();
    let mut json = Vec::with_capacity(256 + data_bytes * 5);
    let header = ResponseJson {
        id: &response.id,
        model_name: &response.model_name,
        model_version: &response.model_version,
        outputs,
    };
    serde_json::to_writer(&mut json, &header)
        .map_err(|e| ServerError::internal(format!("cannot encode the response JSON: {e}")))?;
    if !any_binary {
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
        let back = serde_json::to_value(JsonOutputData { dtype: DataType::Bytes, bytes }).unwrap();
        assert_eq!(back, serde_json::json!(["ab", ""]));
    }

    #[test]
    fn json_data_prints_what_json_values_prints() {
        let f32s: Vec<u8> =
            [1.1f32, -0.0, f32::NAN, f32::INFINITY, 3e-42].iter().flat_map(|x| x.to_le_bytes()).collect();
        let i16s: Vec<u8> = [-2i16, 300].iter().flat_map(|x| x.to_le_bytes()).collect();
        let u64s: Vec<u8> = [u64::MAX].iter().flat_map(|x| x.to_le_bytes()).collect();
        for (dtype, bytes) in [
            (DataType::Fp32, &f32s[..]),
            (DataType::Fp64, &f32s[..16]),
            (DataType::Int16, &i16s[..]),
            (DataType::Uint64, &u64s[..]),
            (DataType::Uint8, &[0u8, 255][..]),
            (DataType::Bool, &[0u8, 1][..]),
        ] {
            let direct = serde_json::to_string(&JsonOutputData { dtype, bytes }).unwrap();
            let values = serde_json::to_string(&crate::tensor::json_values(dtype, bytes).unwrap()).unwrap();
            assert_eq!(direct, values, "{dtype}");
        }
        let not_utf8 = [1u8, 0, 0, 0, 0xff];
        assert!(check_json_output("o", DataType::Bytes, &not_utf8).unwrap_err().message.contains("not UTF-8"));
        assert!(check_json_output("o", DataType::Bytes, &[9u8, 0, 0, 0, b'a']).is_err());
        assert!(check_json_output("o", DataType::Fp16, &[0u8, 0]).is_err());
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
