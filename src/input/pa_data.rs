//! perf_analyzer's input data formats: `--input-data` JSON files (`"data"` entries, streams,
//! `validation_data`, `content`/`shape`/`b64` values) and directories of raw files, read into
//! data steps with perf_analyzer's error sentences.

use std::path::Path;

use base64::Engine;
use bytes::Bytes;
use serde_json::Value;

use super::generate::{bytes_elements, generated_step};
use super::options::unsupported_input_data;
use super::{
    dynamic_shape, known_dims, shape_text, size_mismatch, variable_sized, InputData, InputError, InputOptions,
    InputSpec, OutputSpec, Step,
};
use crate::tensor::{element_count, encode_json_values, shape_matches, DataType, Tensor};

/// The data steps of every `--input-data`, in order (generated data is one step), and the
/// streams they form (none for generated data).
pub(super) fn load_steps(
    options: &InputOptions,
    model: &str,
    inputs: &[InputSpec<'_>],
    outputs: &[OutputSpec],
) -> Result<(Vec<Step>, Vec<std::ops::Range<usize>>), InputError> {
    let paths: Vec<&Path> = options
        .data
        .iter()
        .filter_map(|d| match d {
            InputData::File(path) => Some(path.as_path()),
            _ => None,
        })
        .collect();
    if paths.is_empty() {
        return Ok((vec![generated_step(options, inputs)?], Vec::new()));
    }
    let mut reader =
        DataReader { model, inputs, outputs, nested: None, steps: Vec::new(), streams: 0, bounds: Vec::new() };
    for path in paths {
        if path.is_dir() {
            reader.read_dir(path)?;
        } else if path.is_file() {
            reader.read_json(path)?;
        } else {
            return Err(InputError::BadFlag(unsupported_input_data(&path.display().to_string())));
        }
    }
    let streams =
        if reader.bounds.is_empty() { std::iter::once(0..reader.steps.len()).collect() } else { reader.bounds };
    Ok((reader.steps, streams))
}

/// Reads `--input-data` paths into steps, as perf_analyzer's data loader does.
struct DataReader<'a, 'm> {
    model: &'a str,
    inputs: &'a [InputSpec<'m>],
    outputs: &'a [OutputSpec],
    /// Whether the JSON files hold streams (arrays inside `"data"`); set by the first file.
    nested: Option<bool>,
    steps: Vec<Step>,
    /// Streams read so far (for messages).
    streams: usize,
    /// The steps of each stream of nested files.
    bounds: Vec<std::ops::Range<usize>>,
}

/// Where a tensor of a data file is, for messages (perf_analyzer's location, then the file).
fn location(file: &str, stream: usize, step: usize) -> String {
    format!("( Location stream id: {stream}, step id: {step}) in {file}")
}

impl DataReader<'_, '_> {
    /// A directory: one raw file per input, named after it; raw little-endian values, or for
    /// BYTES one string per line. A file may also be named after an output.
    fn read_dir(&mut self, dir: &Path) -> Result<(), InputError> {
        let shown = dir.display().to_string();
        let entries =
            std::fs::read_dir(dir).map_err(|e| InputError::Data(format!("failed to open directory '{shown}': {e}")))?;
        for entry in entries {
            let entry = entry.map_err(|e| InputError::Data(format!("failed to read directory '{shown}': {e}")))?;
            let name = entry.file_name().to_string_lossy().to_string();
            if !self.inputs.iter().any(|i| i.meta.name == name) && !self.outputs.iter().any(|o| o.name == name) {
                return Err(InputError::Data(format!(
                    "Provided data file '{name}' does not correspond to a valid model input or output. (in {shown}; \
                     model '{}' has inputs {})",
                    self.model,
                    self.inputs.iter().map(|i| i.meta.name.as_str()).collect::<Vec<_>>().join(", ")
                )));
            }
        }
        let mut step = Step::default();
        for input in self.inputs {
            let name = &input.meta.name;
            let path = dir.join(name);
            if input.optional && !path.exists() {
                continue;
            }
            let (data, count) = read_raw(&path, input.dtype)?;
            let dims = known_dims(&input.dims).ok_or_else(|| dynamic_shape(name))?;
            let expected = element_count(&dims).unwrap_or(usize::MAX);
            match input.dtype.element_size() {
                Some(size) if data.len() != expected.saturating_mul(size) => {
                    return Err(InputError::Data(format!(
                        "provided data for input {name} has byte size {}, expect {} ({})",
                        data.len(),
                        expected.saturating_mul(size),
                        path.display()
                    )))
                }
                None if count != expected => {
                    return Err(InputError::Data(format!(
                        "provided data for input {name} has {count} elements, expect {expected} ({})",
                        path.display()
                    )))
                }
                _ => {}
            }
            step.inputs.push((name.clone(), Tensor { dtype: input.dtype, shape: dims, data: data.into() }));
        }
        // A file named after an output is allowed but, as in perf_analyzer 2.50 (which reads it
        // and never compares it), not checked: expected outputs come from validation_data.
        self.steps.push(step);
        self.streams += 1;
        Ok(())
    }

    /// A perf_analyzer JSON file: `"data"` holds steps, or arrays of steps (streams), and
    /// `"validation_data"` the same layout of expected outputs.
    fn read_json(&mut self, path: &Path) -> Result<(), InputError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| InputError::Data(format!("failed to open file for reading provided data ({shown}: {e})")))?;
        let root: Value = serde_json::from_str(&text).map_err(|e| {
            InputError::Data(format!(
                "failed to parse the specified json file for reading provided data ({shown}: {e})"
            ))
        })?;
        let data = root
            .get("data")
            .ok_or_else(|| InputError::Data(format!("The json file doesn't contain data field ({shown})")))?;
        let streams = data.as_array().ok_or_else(|| InputError::File {
            path: shown.clone(),
            reason: "expected an object with a \"data\" array".into(),
        })?;
        if streams.is_empty() {
            return Err(InputError::File { path: shown, reason: "\"data\" is empty".into() });
        }
        let misaligned = || {
            InputError::Data(format!(
                "The 'validation_data' field doesn't align with 'data' field in the json file ({shown})"
            ))
        };
        let validation = match root.get("validation_data") {
            None => None,
            Some(v) => Some(v.as_array().filter(|v| v.len() == streams.len()).ok_or_else(misaligned)?),
        };
        let nested = streams[0].is_array();
        if self.nested.is_some_and(|n| n != nested) || streams.iter().any(|s| s.is_array() != nested) {
            return Err(InputError::Data(format!(
                "Inconsistency in input-data provided. Can not have a combination of objects and arrays inside of \
                 the Data array ({shown})"
            )));
        }
        self.nested = Some(nested);
        // A stream is a list of steps; flat data is one stream (perf_analyzer appends it to
        // stream 0, which for a model without sequences is the same thing).
        let mut groups: Vec<(&[Value], Option<&[Value]>)> = Vec::new();
        if nested {
            for (i, stream) in streams.iter().enumerate() {
                let steps = stream.as_array().expect("checked nested").as_slice();
                let expected = match validation {
                    None => None,
                    Some(v) => {
                        Some(v[i].as_array().filter(|e| e.len() == steps.len()).ok_or_else(misaligned)?.as_slice())
                    }
                };
                groups.push((steps, expected));
            }
        } else {
            groups.push((streams.as_slice(), validation.map(Vec::as_slice)));
        }
        for (steps, expected) in groups {
            let stream = if nested { self.streams } else { 0 };
            let first = if nested { 0 } else { self.steps.len() };
            let mut read = Vec::with_capacity(steps.len());
            for (k, step) in steps.iter().enumerate() {
                read.push(Step {
                    inputs: self.json_inputs(step, &location(&shown, stream, first + k))?,
                    outputs: vec![],
                });
            }
            if let Some(expected) = expected {
                for (k, step) in expected.iter().enumerate() {
                    read[k].outputs = self.json_outputs(step, &location(&shown, stream, first + k))?;
                }
            }
            let start = self.steps.len();
            self.steps.extend(read);
            if nested {
                self.streams += 1;
                self.bounds.push(start..self.steps.len());
            }
        }
        if !nested && self.streams == 0 {
            self.streams = 1;
        }
        Ok(())
    }

    /// One step's inputs.
    fn json_inputs(&self, step: &Value, place: &str) -> Result<Vec<(String, Tensor)>, InputError> {
        let obj = step.as_object().ok_or_else(|| {
            InputError::Data(format!("Input data file is malformed. (a step is not an object {place})"))
        })?;
        self.check_names(obj, self.inputs.iter().map(|i| i.meta.name.as_str()), place)?;
        let mut tensors = Vec::new();
        for input in self.inputs {
            let name = &input.meta.name;
            let Some(entry) = obj.get(name) else {
                if input.optional {
                    continue;
                }
                return Err(InputError::Data(format!("missing tensor {name} {place}")));
            };
            let (shape, data, _) =
                tensor_value(input.dtype, entry, place).map_err(|e| self.value_error(e, name, place))?;
            let shape = match shape {
                Some(s) => {
                    if s.iter().any(|&d| d < 0) {
                        return Err(variable_sized(name, &input.dims, place));
                    }
                    if !shape_matches(&input.dims, &s) {
                        return Err(InputError::Data(format!(
                            "The supplied shape of {} for input \"{name}\" is incompatible with the model's input shape \
                             of {} ({place})",
                            shape_text(&s),
                            shape_text(&input.dims)
                        )));
                    }
                    s
                }
                // As in perf_analyzer, data without a shape takes the model's (with --shape).
                None => known_dims(&input.dims).ok_or_else(|| variable_sized(name, &input.dims, place))?,
            };
            let expected = element_count(&shape).unwrap_or(usize::MAX);
            match input.dtype.element_size() {
                Some(size) if data.len() != expected.saturating_mul(size) => {
                    return Err(size_mismatch(name, expected.saturating_mul(size), data.len(), place))
                }
                None if !crate::tensor::bytes_tensor_is_valid(&data, expected) => {
                    return Err(self.value_error(
                        format!("the data does not hold {expected} BYTES elements for shape {}", shape_text(&shape)),
                        name,
                        place,
                    ))
                }
                _ => {}
            }
            tensors.push((name.clone(), Tensor { dtype: input.dtype, shape, data: data.into() }));
        }
        Ok(tensors)
    }

    /// One step's expected outputs. As in perf_analyzer, an output's size comes from the
    /// model's shape, so an output of variable size cannot be validated.
    fn json_outputs(&self, step: &Value, place: &str) -> Result<Vec<(String, Bytes)>, InputError> {
        let obj = step.as_object().ok_or_else(|| {
            InputError::Data(format!("Input data file is malformed. (a validation step is not an object {place})"))
        })?;
        self.check_names(obj, self.outputs.iter().map(|o| o.name.as_str()), place)?;
        let mut expected = Vec::new();
        for output in self.outputs {
            let name = &output.name;
            let Some(entry) = obj.get(name) else {
                return Err(InputError::Data(format!("missing tensor {name} {place}")));
            };
            let (_, data, _) =
                tensor_value(output.dtype, entry, place).map_err(|e| self.value_error(e, name, place))?;
            let dims = known_dims(&output.dims).ok_or_else(|| variable_sized(name, &output.dims, place))?;
            if let Some(size) = output.dtype.element_size() {
                let want = element_count(&dims).unwrap_or(usize::MAX).saturating_mul(size);
                if data.len() != want {
                    return Err(size_mismatch(name, want, data.len(), place));
                }
            }
            expected.push((name.clone(), Bytes::from(data)));
        }
        Ok(expected)
    }

    /// Every key of a step must name one of `names` (or be perf_analyzer's `model`).
    fn check_names<'n>(
        &self,
        step: &serde_json::Map<String, Value>,
        names: impl Iterator<Item = &'n str> + Clone,
        place: &str,
    ) -> Result<(), InputError> {
        for key in step.keys() {
            if key != "model" && !names.clone().any(|n| n == key) {
                let known: Vec<&str> = names.clone().collect();
                return Err(InputError::Data(format!(
                    "The input or output '{key}' is not found in the model configuration (model '{}' has {}) {place}",
                    self.model,
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }

    fn value_error(&self, reason: String, name: &str, place: &str) -> InputError {
        InputError::Input { model: self.model.into(), input: name.into(), reason: format!("{reason} {place}") }
    }
}

/// A data file's tensor: the shape it gives, its bytes and, for arrays, its element count.
type TensorValue = (Option<Vec<i64>>, Vec<u8>, Option<usize>);

/// A raw file of a data directory: its bytes (BYTES: one element per line, length-prefixed)
/// and, for BYTES, the element count.
fn read_raw(path: &Path, dtype: DataType) -> Result<(Vec<u8>, usize), InputError> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| InputError::Data(format!("failed to open file '{shown}' ({e})")))?;
    if bytes.is_empty() {
        return Err(InputError::Data(format!("file '{shown}' is empty")));
    }
    if dtype != DataType::Bytes {
        return Ok((bytes, 0));
    }
    let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    let lines: Vec<Vec<u8>> = text.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    let count = lines.len();
    Ok((bytes_elements(lines), count))
}

/// One tensor of a data file: a bare array, `{"content": [..], "shape": [..]}` or
/// `{"b64": "..", "shape": [..]}` (raw little-endian bytes). Returns the shape it gives, the
/// bytes and, for arrays, the element count.
fn tensor_value(dtype: DataType, entry: &Value, place: &str) -> Result<TensorValue, String> {
    match entry {
        Value::Array(_) => {
            let (data, count) = encode_json_values(dtype, entry)?;
            Ok((None, data, Some(count)))
        }
        Value::Object(obj) => {
            let shape = match obj.get("shape") {
                None => None,
                Some(s) => {
                    Some(serde_json::from_value::<Vec<i64>>(s.clone()).map_err(|_| "shape values must be integers.")?)
                }
            };
            if let Some(b64) = obj.get("b64") {
                let text =
                    b64.as_str().ok_or_else(|| format!("the value of b64 field should be of type string {place}"))?;
                let data =
                    base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| format!("bad \"b64\": {e}"))?;
                Ok((shape, data, None))
            } else if let Some(content) = obj.get("content") {
                if !content.is_array() {
                    return Err("The tensor values are not supported. Expected an array or b64 string".into());
                }
                let (data, count) = encode_json_values(dtype, content)?;
                Ok((shape, data, Some(count)))
            } else {
                Err("missing content field.".into())
            }
        }
        _ => Err("Input data file is malformed.".into()),
    }
}
