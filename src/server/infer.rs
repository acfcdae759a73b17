//! Protocol-neutral inference requests and responses, and their admission checks. The HTTP and
//! gRPC front ends translate their wire formats into [`InferRequest`]; [`admit`] validates it
//! against the model config, with Triton's error texts, before it reaches the batcher.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::error::{ServerError, ServerResult};
use super::shm::{Region, SharedMemoryManager};
use super::stats::ModelStats;
use crate::proto::inference::ModelConfig;
use crate::tensor::{bytes_tensor_is_valid, element_count, shape_matches, DataType};

/// A reference into a registered shared-memory region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmRef {
    pub region: String,
    pub offset: u64,
    pub byte_size: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum InputData {
    Raw(Bytes),
    Shm(ShmRef),
}

#[derive(Clone, Debug, PartialEq)]
pub struct InputTensor {
    pub name: String,
    /// The protocol string as sent; checked against the config in [`admit`].
    pub datatype: String,
    pub shape: Vec<i64>,
    pub data: InputData,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestedOutput {
    pub name: String,
    pub shm: Option<ShmRef>,
}

/// A sequence's correlation id: Triton takes a uint64 or a string (`sequence_id`); 0 and ""
/// mean "not part of a sequence".
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    Number(u64),
    Text(String),
}

impl CorrelationId {
    /// False for 0 and "", which mean "no sequence".
    pub fn in_sequence(&self) -> bool {
        !matches!(self, CorrelationId::Number(0)) && !matches!(self, CorrelationId::Text(t) if t.is_empty())
    }
}

impl std::fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorrelationId::Number(n) => write!(f, "{n}"),
            CorrelationId::Text(t) => f.write_str(t),
        }
    }
}

impl SequenceFlags {
    /// The flags a request's parameters carry; `None` when `id` is absent, 0 or "" (Triton then
    /// ignores the start and end flags too).
    pub fn from_parts(id: Option<CorrelationId>, start: bool, end: bool) -> Option<SequenceFlags> {
        id.filter(CorrelationId::in_sequence).map(|id| SequenceFlags { id, start, end })
    }
}

/// A request's place in a stateful sequence: the `sequence_id`, `sequence_start` and
/// `sequence_end` request parameters, as HTTP and gRPC (unary and streaming) carry them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceFlags {
    pub id: CorrelationId,
    pub start: bool,
    pub end: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct InferRequest {
    pub model_name: String,
    /// Empty means the latest version.
    pub model_version: String,
    pub id: String,
    pub inputs: Vec<InputTensor>,
    /// Empty means every model output.
    pub outputs: Vec<RequestedOutput>,
    /// Set when the request belongs to a sequence (a non-zero `sequence_id`).
    pub sequence: Option<SequenceFlags>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum OutputData {
    Raw(Bytes),
    /// Written into the requested shared-memory region; only the shape travels back.
    InShm,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OutputTensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: OutputData,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    pub id: String,
    pub outputs: Vec<OutputTensor>,
}

/// What the server answers to one request: one response, or, from a decoupled model, a schedule
/// of zero or more responses and the final flag, which only a stream can carry.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Single(InferResponse),
    Decoupled(DecoupledResponses),
}

/// A decoupled model's answer to one request: each response is sent `.0` after the one before
/// it (or after the request, for the first); the final flag follows `final_after` the last one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecoupledResponses {
    pub model_name: String,
    pub model_version: String,
    pub id: String,
    pub responses: Vec<(Duration, InferResponse)>,
    pub final_after: Duration,
}

/// Where an admitted input's bytes live until the batcher gathers them.
pub enum InputBytes {
    Raw(Bytes),
    Shm { region: Arc<Region>, offset: u64, len: usize },
}

impl InputBytes {
    pub fn len(&self) -> usize {
        match self {
            InputBytes::Raw(b) => b.len(),
            InputBytes::Shm { len, .. } => *len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends the bytes to `dst` (the batch buffer).
    pub fn gather_into(&self, dst: &mut Vec<u8>) -> ServerResult<()> {
        match self {
            InputBytes::Raw(b) => dst.extend_from_slice(b),
            InputBytes::Shm { region, offset, len } => {
                let start = dst.len();
                dst.resize(start + len, 0);
                region.read_into(*offset, &mut dst[start..])?;
            }
        }
        Ok(())
    }
}

/// An admitted input, in model-config order. An optional input the request left out is admitted
/// as an empty tensor (a zero-sized last dimension), so requests with and without it never batch
/// together and the model sees that it is absent.
pub struct AdmittedInput {
    pub shape: Vec<i64>,
    pub bytes: InputBytes,
}

/// An output to return, in the order the client asked for them.
pub struct OutputPlan {
    pub config_index: usize,
    /// The output's name as the client sent it, for the response to reuse; `None` when the
    /// client named no outputs.
    pub name: Option<String>,
    pub shm: Option<(Arc<Region>, u64, u64)>,
}

impl OutputPlan {
    /// compute_output's last stage: the output's bytes for the response, or written into the
    /// requested shared-memory region.
    pub fn place(&self, name: &str, data: Bytes) -> ServerResult<OutputData> {
        let Some((region, region_offset, byte_size)) = &self.shm else {
            return Ok(OutputData::Raw(data));
        };
        if data.len() as u64 > *byte_size {
            // The client sized the region: its mistake, as Triton reports it (INVALID_ARG).
            return Err(ServerError::invalid_arg(format!(
                "shared memory size specified with the request for output '{name}' ({byte_size} bytes) should be at least {} bytes to hold the results",
                data.len()
            )));
        }
        region.write(*region_offset, &data)?;
        Ok(OutputData::InShm)
    }
}

/// Every model is served as version "1".
pub const MODEL_VERSION: &str = "1";

/// A request that passed every check and is ready to queue (for [`MODEL_VERSION`] of its model).
pub struct AdmittedRequest {
    /// The model's name as the client sent it, for the response to reuse.
    pub model_name: String,
    pub id: String,
    /// Batch dimension of this request (1 when the model does not batch).
    pub batch_size: usize,
    pub inputs: Vec<AdmittedInput>,
    pub outputs: Vec<OutputPlan>,
    /// When the server took the request in; `success.ns` counts from here.
    pub received: Instant,
    /// The request's place in a sequence, for a model with `sequence_batching`.
    pub sequence: Option<SequenceFlags>,
    /// A step of an ensemble: its statistics are also recorded here, the ensemble request's
    /// context (Triton's secondary statistics aggregator).
    pub also_record: Option<Arc<ModelStats>>,
}

impl AdmittedRequest {
    /// Requests can share a batch only when their per-item shapes agree. BYTES outputs cannot be
    /// split back per request by size, so such models never merge requests.
    pub fn batch_key(&self) -> Vec<i64> {
        let mut key = Vec::new();
        for input in &self.inputs {
            key.push(input.shape.len() as i64);
            key.extend_from_slice(input.shape.get(1..).unwrap_or(&[]));
        }
        key
    }
}

/// Server limits that admission enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most elements one input tensor may have.
    pub max_tensor_elements: usize,
}

/// Checks a request against `config` and the server's limits, and resolves its shared-memory
/// references.
pub fn admit(
    config: &ModelConfig,
    request: InferRequest,
    shm: &SharedMemoryManager,
    limits: &Limits,
    received: Instant,
) -> ServerResult<AdmittedRequest> {
    let model = &config.name;
    let batching = config.max_batch_size > 0;
    // One slot per config input, filled in request order; collected in place below.
    let mut slots: Vec<Option<AdmittedInput>> = config.input.iter().map(|_| None).collect();
    let mut batch_size: Option<usize> = None;

    for input in request.inputs {
        let Some(index) = config.input.iter().position(|c| c.name == input.name) else {
            return Err(ServerError::invalid_arg(format!(
                "unexpected inference input '{}' for model '{model}'",
                input.name
            )));
        };
        if slots[index].is_some() {
            return Err(ServerError::invalid_arg(format!(
                "input '{}' appears more than once in the request",
                input.name
            )));
        }
        let spec = &config.input[index];
        let expected = DataType::from_config_enum(spec.data_type).expect("config validated at load");
        if input.datatype != expected.as_str() {
            return Err(ServerError::invalid_arg(format!(
                "inference input '{}' data-type is '{}', but model '{model}' expects '{expected}'",
                input.name, input.datatype
            )));
        }
        if input.shape.iter().any(|&d| d < 0) {
            return Err(ServerError::invalid_arg(format!(
                "input '{}' has a negative dimension in shape {:?}",
                input.name, input.shape
            )));
        }
        let item_shape = if batching {
            let Some((&b, rest)) = input.shape.split_first() else {
                return Err(ServerError::invalid_arg(format!(
                    "input '{}' has shape [] but model '{model}' batches: the first dimension is the batch size",
                    input.name
                )));
            };
            if b < 1 || b > config.max_batch_size as i64 {
                return Err(ServerError::invalid_arg(format!(
                    "inference request batch-size must be <= {} for '{model}'",
                    config.max_batch_size
                )));
            }
            match batch_size {
                None => batch_size = Some(b as usize),
                Some(prev) if prev != b as usize => {
                    return Err(ServerError::invalid_arg(format!(
                        "input '{}' has batch size {b}, but another input has {prev}",
                        input.name
                    )))
                }
                _ => {}
            }
            rest
        } else {
            &input.shape[..]
        };
        if !shape_matches(&spec.dims, item_shape) {
            let full: Vec<i64> = if batching {
                std::iter::once(-1).chain(spec.dims.iter().copied()).collect()
            } else {
                spec.dims.clone()
            };
            return Err(ServerError::invalid_arg(format!(
                "unexpected shape for input '{}' for model '{model}'. Expected {full:?}, got {:?}",
                input.name, input.shape
            )));
        }
        let elements = element_count(&input.shape).filter(|&n| n <= limits.max_tensor_elements);
        let Some(elements) = elements else {
            return Err(ServerError::exhausted(format!(
                "input '{}' with shape {:?} has more than the server's limit of {} elements per tensor (--max-tensor-elements)",
                input.name, input.shape, limits.max_tensor_elements
            )));
        };
        let expected_bytes = match expected.element_size() {
            None => None,
            Some(size) => Some(elements.checked_mul(size).ok_or_else(|| {
                ServerError::exhausted(format!("input '{}' with shape {:?} is too large", input.name, input.shape))
            })?),
        };
        let bytes = match input.data {
            InputData::Raw(data) => {
                let ok = match expected_bytes {
                    Some(n) => data.len() == n,
                    None => bytes_tensor_is_valid(&data, elements),
                };
                if !ok {
                    return Err(ServerError::invalid_arg(match expected_bytes {
                        Some(n) => format!(
                            "unexpected size for input '{}', expecting {n} bytes but got {} bytes for model '{model}'",
                            input.name,
                            data.len()
                        ),
                        None => format!(
                            "input '{}': BYTES data does not hold {:?} length-prefixed elements",
                            input.name, input.shape
                        ),
                    }));
                }
                InputBytes::Raw(data)
            }
            InputData::Shm(r) => {
                if let Some(n) = expected_bytes {
                    if r.byte_size as usize != n {
                        return Err(ServerError::invalid_arg(format!(
                            "unexpected shared memory byte size for input '{}': expecting {n} bytes but got {} bytes for model '{model}'",
                            input.name, r.byte_size
                        )));
                    }
                }
                let region = shm.get(&r.region)?;
                region.check(r.offset, r.byte_size)?;
                InputBytes::Shm { region, offset: r.offset, len: r.byte_size as usize }
            }
        };
        slots[index] = Some(AdmittedInput { shape: input.shape, bytes });
    }

    let mut specs = config.input.iter();
    let inputs = slots
        .into_iter()
        .map(|slot| {
            let spec = specs.next().expect("one slot per config input");
            match slot {
                Some(i) => Ok(i),
                None if spec.optional => {
                    let shape = if batching { vec![batch_size.unwrap_or(1) as i64, 0] } else { vec![0] };
                    Ok(AdmittedInput { shape, bytes: InputBytes::Raw(Bytes::new()) })
                }
                None => Err(ServerError::invalid_arg(format!(
                    "expected {} inputs but got fewer for model '{model}': input '{}' is missing",
                    config.input.len(),
                    spec.name
                ))),
            }
        })
        .collect::<ServerResult<Vec<_>>>()?;

    let mut outputs = Vec::new();
    if request.outputs.is_empty() {
        outputs.extend((0..config.output.len()).map(|config_index| OutputPlan { config_index, name: None, shm: None }));
    }
    for wanted in request.outputs {
        let Some(config_index) = config.output.iter().position(|o| o.name == wanted.name) else {
            return Err(ServerError::invalid_arg(format!(
                "unexpected inference output '{}' for model '{model}'",
                wanted.name
            )));
        };
        let shm = match wanted.shm {
            None => None,
            Some(r) => {
                let region = shm.get(&r.region)?;
                region.check(r.offset, r.byte_size)?;
                Some((region, r.offset, r.byte_size))
            }
        };
        outputs.push(OutputPlan { config_index, name: Some(wanted.name), shm });
    }

    Ok(AdmittedRequest {
        model_name: request.model_name,
        id: request.id,
        batch_size: batch_size.unwrap_or(1),
        inputs,
        outputs,
        received,
        sequence: request.sequence,
        also_record: None,
    })
}
