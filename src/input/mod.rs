//! What to send: turns `--input-data`, `--shape` and `-b` plus a model's metadata and config into
//! transport-neutral [`RequestSpec`]s, following perf_analyzer's rules (and its error sentences).
//!
//! - Metadata gives each input's dtype and shape; for a batching model (`max_batch_size > 0`)
//!   its first dim is the batch dim and is replaced by `-b`.
//! - `--shape NAME:d1,d2` fills the `-1` dims (per item, without the batch dim).
//! - `zero` and `random` make one data step. Each `--input-data` path (the flag repeats) adds
//!   steps: a perf_analyzer JSON file one per entry of `"data"` (arrays inside `"data"` are
//!   streams, taken one after the other), a directory of raw files one step.
//! - With `-b B`, a request holds B consecutive steps (i, i+1, … wrapping), as perf_analyzer
//!   batches them; steps of one batch must agree on shapes and on which optional inputs they give.
//! - `validation_data` gives each step's expected outputs; [`Expected::check`] compares an answer.

mod generate;
mod options;
mod pa_data;
#[cfg(test)]
mod tests;

pub use options::{one_or_many, InputData, InputError, InputOptions, ShapeOverride, DEFAULT_STRING_LENGTH};

use bytes::Bytes;

use crate::client::{InferResult, InputSource, OutputTarget, RequestSpec};
use crate::proto::inference::{model_metadata_response::TensorMetadata, ModelConfig, ModelMetadataResponse};
use crate::tensor::{shape_matches, DataType, Tensor};
use pa_data::load_steps;

/// One model input as the request builder sees it.
struct InputSpec<'a> {
    meta: &'a TensorMetadata,
    dtype: DataType,
    /// Per-item dims after `--shape`; may still hold -1.
    dims: Vec<i64>,
    optional: bool,
}

/// One model output: what `validation_data` is checked against.
struct OutputSpec {
    name: String,
    dtype: DataType,
    /// Per-item dims (no batch dim); may hold -1.
    dims: Vec<i64>,
}

/// One data step: per-item input tensors (no batch dim) and the bytes each output must hold
/// for this item (`validation_data`).
#[derive(Clone, Debug, Default)]
struct Step {
    inputs: Vec<(String, Tensor)>,
    outputs: Vec<(String, Bytes)>,
}

/// The requests of one batch size, sent in turn, and what their answers must hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Requests {
    pub specs: Vec<RequestSpec>,
    /// The data streams of `--input-data` files, as ranges of `specs` (perf_analyzer's
    /// sequences: each stream is one sequence, its steps in order). Flat data is one stream;
    /// generated data, or `-b` > 1, has none.
    pub streams: Vec<std::ops::Range<usize>>,
    /// One per spec when the data has `validation_data`; `None` otherwise.
    pub expected: Option<Vec<Expected>>,
}

/// What one request's answer must hold: per output, the expected bytes of each batch item.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expected {
    pub outputs: Vec<(String, Vec<Bytes>)>,
}

impl Expected {
    /// Compares an answer as perf_analyzer 2.50 does: each expected batch item is compared with
    /// the start of the output, and the output must be exactly one item long. (perf_analyzer
    /// re-reads the output for every item, so with `-b` > 1 a validated run fails with "Output
    /// size doesn't match expected size"; we fail the same way rather than pass where it fails.)
    pub fn check(&self, answer: &InferResult) -> Result<(), String> {
        for (name, items) in &self.outputs {
            let data: &[u8] = answer.outputs.iter().find(|(n, _)| n == name).map_or(&[], |(_, t)| &t.data[..]);
            let mut left = data.len();
            for want in items {
                if data.len() < want.len() {
                    return Err(format!(
                        "Output size doesn't match expected size: output '{name}' holds {} bytes, validation_data {}",
                        data.len(),
                        want.len()
                    ));
                }
                if data[..want.len()] != want[..] {
                    return Err(format!(
                        "Output doesn't match expected output: output '{name}' differs from validation_data"
                    ));
                }
                left = data.len() - want.len();
            }
            if left != 0 {
                let want: usize = items.last().map_or(0, Bytes::len);
                return Err(format!(
                    "Output size doesn't match expected size: output '{name}' holds {} bytes, validation_data {want}",
                    data.len()
                ));
            }
        }
        Ok(())
    }
}

/// Builds the requests for `model_name` / `model_version`, one per batch of data steps.
pub fn build_requests(
    meta: &ModelMetadataResponse,
    config: &ModelConfig,
    options: &InputOptions,
    model_version: &str,
) -> Result<Vec<RequestSpec>, InputError> {
    build_request_set(meta, config, options, model_version).map(|r| r.specs)
}

/// [`build_requests`] with the expected answers of `validation_data`.
pub fn build_request_set(
    meta: &ModelMetadataResponse,
    config: &ModelConfig,
    options: &InputOptions,
    model_version: &str,
) -> Result<Requests, InputError> {
    let model = meta.name.clone();
    let batching = config.max_batch_size > 0;
    check_batch_size(&model, config.max_batch_size, options.batch_size)?;
    let inputs = resolve_inputs(meta, config, &options.shapes)?;
    let outputs = resolve_outputs(meta, config)?;
    let (steps, streams) = load_steps(options, &model, &inputs, &outputs)?;
    let batch = if batching { options.batch_size as usize } else { 1 };
    // With one step per request, request k is step k, so the streams' steps are requests.
    let streams = if batch == 1 { streams } else { Vec::new() };

    // Request k holds steps k·B, k·B+1, … (mod N): the distinct requests repeat after
    // N / gcd(N, B) of them, and sending those in turn gives perf_analyzer's order.
    let n = steps.len();
    let count = n / gcd(n, batch);
    let output_targets: Vec<(String, OutputTarget)> =
        meta.outputs.iter().map(|o| (o.name.clone(), OutputTarget::Inline)).collect();
    let validating = steps.iter().any(|s| !s.outputs.is_empty());
    let mut specs = Vec::with_capacity(count);
    let mut expected = Vec::new();
    for k in 0..count {
        let start = k * batch % n;
        let items: Vec<(usize, &Step)> = (0..batch).map(|i| ((start + i) % n, &steps[(start + i) % n])).collect();
        let mut tensors = Vec::with_capacity(inputs.len());
        for input in &inputs {
            let name = &input.meta.name;
            let given: Vec<(usize, Option<&Tensor>)> = items
                .iter()
                .map(|(index, step)| (*index, step.inputs.iter().find(|(n, _)| n == name).map(|(_, t)| t)))
                .collect();
            if given.iter().all(|(_, t)| t.is_none()) {
                continue;
            }
            if given.iter().any(|(_, t)| t.is_none()) {
                return Err(InputError::Data(format!(
                    "For batch sizes larger than 1, the same set of inputs must be specified for each batch. You \
                     cannot use different set of optional inputs for each individual batch. (model '{model}', \
                     input '{name}', -b {batch})"
                )));
            }
            let first = given[0].1.expect("checked above");
            for (index, t) in &given[1..] {
                let t = t.expect("checked above");
                if t.shape != first.shape {
                    return Err(InputError::Data(format!(
                        "can not batch tensors with different shapes together (input '{name}' expected shape {} \
                         and received {}) in data steps {} and {index} with -b {batch}",
                        shape_text(&first.shape),
                        shape_text(&t.shape),
                        given[0].0,
                    )));
                }
            }
            let tensor = if batching {
                let shape = std::iter::once(batch as i64).chain(first.shape.iter().copied()).collect();
                let data = if batch == 1 {
                    first.data.clone()
                } else {
                    let mut data = Vec::with_capacity(first.data.len() * batch);
                    for (_, t) in &given {
                        data.extend_from_slice(&t.expect("checked above").data);
                    }
                    Bytes::from(data)
                };
                Tensor { dtype: first.dtype, shape, data }
            } else {
                first.clone()
            };
            tensors.push((name.clone(), InputSource::Inline(tensor)));
        }
        specs.push(RequestSpec {
            model_name: model.clone(),
            model_version: model_version.to_string(),
            inputs: tensors,
            outputs: output_targets.clone(),
            decoupled: false,
        });
        if validating {
            expected.push(expected_of(&outputs, &items));
        }
    }
    Ok(Requests { specs, streams, expected: validating.then_some(expected) })
}

/// Per output, the expected items of one batch, up to the first step without any (as
/// perf_analyzer collects them).
fn expected_of(outputs: &[OutputSpec], items: &[(usize, &Step)]) -> Expected {
    let mut out = Vec::new();
    for output in outputs {
        let wanted: Vec<Bytes> = items
            .iter()
            .map_while(|(_, step)| step.outputs.iter().find(|(n, _)| *n == output.name).map(|(_, b)| b.clone()))
            .collect();
        if !wanted.is_empty() {
            out.push((output.name.clone(), wanted));
        }
    }
    Expected { outputs: out }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

/// perf_analyzer's way of printing a shape: `[2,3]`.
fn shape_text(dims: &[i64]) -> String {
    let dims: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(","))
}

fn check_batch_size(model: &str, max_batch_size: i32, batch_size: u64) -> Result<(), InputError> {
    if batch_size == 0 {
        return Err(InputError::BadFlag("Failed to parse -b (batch size). The value must be > 0.".into()));
    }
    if max_batch_size <= 0 && batch_size > 1 {
        return Err(InputError::Data(format!(
            "can not specify batch size > 1 as the model does not support batching (model '{model}' has \
             max_batch_size 0, -b {batch_size})"
        )));
    }
    if max_batch_size > 0 && batch_size > max_batch_size as u64 {
        return Err(InputError::Data(format!(
            "inference request batch-size must be <= {max_batch_size} for '{model}' (-b {batch_size})"
        )));
    }
    Ok(())
}

/// Pairs metadata inputs with config flags and applies `--shape`.
fn resolve_inputs<'a>(
    meta: &'a ModelMetadataResponse,
    config: &ModelConfig,
    shapes: &[ShapeOverride],
) -> Result<Vec<InputSpec<'a>>, InputError> {
    let model = &meta.name;
    for s in shapes {
        if !meta.inputs.iter().any(|i| i.name == s.name) {
            let inputs = meta.inputs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ");
            return Err(InputError::UnknownShapeInput { name: s.name.clone(), model: model.clone(), inputs });
        }
    }
    let mut out = Vec::with_capacity(meta.inputs.len());
    for input in &meta.inputs {
        let err = |reason: String| InputError::Input { model: model.clone(), input: input.name.clone(), reason };
        let dtype =
            DataType::parse(&input.datatype).ok_or_else(|| err(format!("unknown datatype '{}'", input.datatype)))?;
        let dims = item_dims(&input.shape, config).map_err(err)?;
        let dims = match shapes.iter().rev().find(|s| s.name == input.name) {
            None => dims,
            Some(s) if shape_matches(&dims, &s.dims) => s.dims.clone(),
            Some(s) => return Err(err(format!("--shape {:?} does not fit the model's shape {dims:?}", s.dims))),
        };
        let optional = config.input.iter().find(|c| c.name == input.name).is_some_and(|c| c.optional);
        out.push(InputSpec { meta: input, dtype, dims, optional });
    }
    Ok(out)
}

/// The model's outputs (only their names, dtypes and per-item dims matter here).
fn resolve_outputs(meta: &ModelMetadataResponse, config: &ModelConfig) -> Result<Vec<OutputSpec>, InputError> {
    meta.outputs
        .iter()
        .map(|o| {
            let err =
                |reason: String| InputError::Data(format!("output '{}' of model '{}': {reason}", o.name, meta.name));
            let dtype = DataType::parse(&o.datatype)
                .or_else(|| (o.datatype == "STRING").then_some(DataType::Bytes))
                .ok_or_else(|| err(format!("unknown datatype '{}'", o.datatype)))?;
            Ok(OutputSpec { name: o.name.clone(), dtype, dims: item_dims(&o.shape, config).map_err(err)? })
        })
        .collect()
}

/// A metadata shape without its batch dim when the model batches.
fn item_dims(shape: &[i64], config: &ModelConfig) -> Result<Vec<i64>, String> {
    if config.max_batch_size > 0 {
        match shape.split_first() {
            Some((_, rest)) => Ok(rest.to_vec()),
            None => Err("metadata shape [] has no batch dimension, but the model batches".into()),
        }
    } else {
        Ok(shape.to_vec())
    }
}

fn known_dims(dims: &[i64]) -> Option<Vec<i64>> {
    dims.iter().all(|&d| d >= 0).then(|| dims.to_vec())
}

/// perf_analyzer's sentence for generated data of an input whose shape is still open.
fn dynamic_shape(name: &str) -> InputError {
    InputError::Data(format!(
        "input {name} contains dynamic shape, provide shapes to send along with the request (give them with \
         --shape {name}:<dims>)"
    ))
}

/// perf_analyzer's sentence for a tensor of a data file whose shape stays open.
fn variable_sized(name: &str, model_dims: &[i64], place: &str) -> InputError {
    InputError::Data(format!(
        "The variable-sized tensor \"{name}\" with model shape {} needs to have its shape fully defined. See the \
         --shape option. ({place})",
        shape_text(model_dims)
    ))
}

/// perf_analyzer's sentence for data whose size does not fit its shape.
fn size_mismatch(name: &str, expected: usize, got: usize, place: &str) -> InputError {
    InputError::Data(format!(
        "mismatch in the data provided for {name}. Expected: {expected} bytes, Got: {got} bytes ({place})"
    ))
}
