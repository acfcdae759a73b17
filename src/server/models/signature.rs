//! Binding a compute model to its config: where each named input and output sits in the config's
//! order, that its dtype is the one the model computes with, how many elements one batch item
//! holds, and reading a batch's tensors by that binding. Also list-valued model parameters, and
//! the binding the click-through-rate models share.

use super::{param, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::config;
use crate::server::error::{ServerError, ServerResult};
use crate::tensor::{element_count, DataType, Tensor};

/// A tensor the model needs: its name and dtype.
pub struct TensorSpec {
    pub name: &'static str,
    pub dtype: DataType,
}

/// Where one named tensor sits and its fixed per-item shape.
#[derive(Clone, Debug)]
pub struct Slot {
    pub name: &'static str,
    /// Position in the config's input (or output) list.
    pub index: usize,
    /// Per-item dims from the config (without the batch dimension).
    pub dims: Vec<i64>,
    /// Elements per batch item.
    pub item_len: usize,
}

/// The config's inputs and outputs, matched by name to what the model computes.
#[derive(Clone, Debug)]
pub struct Signature {
    pub inputs: Vec<Slot>,
    pub outputs: Vec<Slot>,
    /// Whether tensors carry a leading batch dimension (`max_batch_size > 0`).
    pub batching: bool,
}

/// A request's data the model cannot compute on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("input '{name}' has shape {shape:?}; expected {expected}")]
    Shape { name: &'static str, shape: Vec<i64>, expected: String },
    #[error("input '{name}' has dtype {got}; expected {expected}")]
    Dtype { name: &'static str, got: DataType, expected: DataType },
    #[error("input '{name}' is missing")]
    Missing { name: &'static str },
    #[error("inputs disagree on the batch size: '{name}' has {got}, expected {expected}")]
    BatchMismatch { name: &'static str, got: usize, expected: usize },
}

impl Signature {
    /// Matches the config against the model's tensors. Every config tensor must be one the model
    /// knows, with fixed dims, and every model tensor must be in the config.
    pub fn bind(config: &ModelConfig, inputs: &[TensorSpec], outputs: &[TensorSpec]) -> ServerResult<Self> {
        let config_inputs: Vec<_> = config.input.iter().map(|i| (&i.name, i.data_type, &i.dims)).collect();
        let config_outputs: Vec<_> = config.output.iter().map(|o| (&o.name, o.data_type, &o.dims)).collect();
        Ok(Signature {
            inputs: bind_list(config, "input", &config_inputs, inputs)?,
            outputs: bind_list(config, "output", &config_outputs, outputs)?,
            batching: config.max_batch_size > 0,
        })
    }

    /// The batch size shared by all inputs, checking each input's dtype and per-item shape.
    pub fn batch_size(&self, tensors: &[Tensor]) -> Result<usize, InputError> {
        let mut batch = None;
        for slot in &self.inputs {
            let tensor = tensors.get(slot.index).ok_or(InputError::Missing { name: slot.name })?;
            let n = self.items_in(slot, tensor)?;
            match batch {
                None => batch = Some(n),
                Some(b) if b != n => return Err(InputError::BatchMismatch { name: slot.name, got: n, expected: b }),
                Some(_) => {}
            }
        }
        Ok(batch.unwrap_or(1))
    }

    fn items_in(&self, slot: &Slot, tensor: &Tensor) -> Result<usize, InputError> {
        let shape_error = || InputError::Shape {
            name: slot.name,
            shape: tensor.shape.clone(),
            expected: if self.batching { format!("[batch, {}]", join(&slot.dims)) } else { format!("{:?}", slot.dims) },
        };
        let item_shape = if self.batching { tensor.shape.get(1..).ok_or_else(shape_error)? } else { &tensor.shape[..] };
        if item_shape != slot.dims.as_slice() {
            return Err(shape_error());
        }
        let items = if self.batching { usize::try_from(tensor.shape[0]).map_err(|_| shape_error())? } else { 1 };
        let elements = items.checked_mul(slot.item_len).ok_or_else(shape_error)?;
        let element_size = tensor.dtype.element_size().unwrap_or(0);
        if element_size == 0 || tensor.data.len() != elements * element_size {
            return Err(shape_error());
        }
        Ok(items)
    }

    /// Decodes input `i` (in the model's order) as i32 values, after checking its dtype.
    pub fn input_i32(&self, tensors: &[Tensor], i: usize) -> Result<Vec<i32>, InputError> {
        Ok(self.input(tensors, i, DataType::Int32)?.to_i32())
    }

    pub fn input_i64(&self, tensors: &[Tensor], i: usize) -> Result<Vec<i64>, InputError> {
        Ok(self.input(tensors, i, DataType::Int64)?.to_i64())
    }

    pub fn input_f32(&self, tensors: &[Tensor], i: usize) -> Result<Vec<f32>, InputError> {
        Ok(self.input(tensors, i, DataType::Fp32)?.to_f32())
    }

    fn input<'t>(&self, tensors: &'t [Tensor], i: usize, dtype: DataType) -> Result<&'t Tensor, InputError> {
        let slot = &self.inputs[i];
        let tensor = tensors.get(slot.index).ok_or(InputError::Missing { name: slot.name })?;
        if tensor.dtype != dtype {
            return Err(InputError::Dtype { name: slot.name, got: tensor.dtype, expected: dtype });
        }
        Ok(tensor)
    }

    /// Places FP32 outputs (given in the model's order) into the config's order, each shaped
    /// `[batch, dims…]` (or `dims` without batching).
    pub fn outputs_f32(&self, batch: usize, values: Vec<Vec<f32>>) -> Vec<Tensor> {
        let mut placed: Vec<Option<Tensor>> = vec![None; self.outputs.len()];
        for (slot, data) in self.outputs.iter().zip(values) {
            let mut shape = slot.dims.clone();
            if self.batching {
                shape.insert(0, batch as i64);
            }
            placed[slot.index] = Some(Tensor::from_f32(shape, &data));
        }
        placed.into_iter().map(|t| t.expect("bind covers every config output")).collect()
    }
}

fn bind_list(
    config: &ModelConfig,
    what: &str,
    config_tensors: &[(&String, i32, &Vec<i64>)],
    wanted: &[TensorSpec],
) -> ServerResult<Vec<Slot>> {
    let model = &config.name;
    let names = || wanted.iter().map(|w| w.name).collect::<Vec<_>>().join(", ");
    if let Some((extra, _, _)) = config_tensors.iter().find(|(n, _, _)| !wanted.iter().any(|w| w.name == n.as_str())) {
        return Err(ServerError::invalid_arg(format!(
            "model '{model}': unexpected {what} '{extra}' (the {} backend has {what}s: {})",
            config.backend,
            names()
        )));
    }
    wanted
        .iter()
        .map(|spec| {
            let (index, (_, dtype, dims)) =
                config_tensors.iter().enumerate().find(|(_, (n, _, _))| n.as_str() == spec.name).ok_or_else(|| {
                    ServerError::invalid_arg(format!(
                        "model '{model}': config lacks {what} '{}' (needs: {})",
                        spec.name,
                        names()
                    ))
                })?;
            if DataType::from_config_enum(*dtype) != Some(spec.dtype) {
                return Err(ServerError::invalid_arg(format!(
                    "model '{model}': {what} '{}' must be TYPE_{}",
                    spec.name,
                    config_dtype_name(spec.dtype)
                )));
            }
            let item_len = element_count(dims).filter(|&n| n > 0).ok_or_else(|| {
                ServerError::invalid_arg(format!(
                    "model '{model}': {what} '{}' needs fixed dims, got {dims:?}",
                    spec.name
                ))
            })?;
            Ok(Slot { name: spec.name, index, dims: dims.to_vec(), item_len })
        })
        .collect()
}

fn config_dtype_name(dtype: DataType) -> &'static str {
    match dtype {
        DataType::Bytes => "STRING",
        other => other.as_str(),
    }
}

fn join(dims: &[i64]) -> String {
    dims.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
}

/// A parameter listing layer sizes, such as `"1024,512,256"`; every size must be positive.
pub fn sizes_param(config: &ModelConfig, key: &str, default: &[usize]) -> ServerResult<Vec<usize>> {
    let Some(text) = config::parameter(config, key) else {
        return Ok(default.to_vec());
    };
    let sizes: Option<Vec<usize>> = text.split(',').map(|s| s.trim().parse().ok().filter(|&n| n > 0)).collect();
    sizes.filter(|s| !s.is_empty()).ok_or_else(|| {
        ServerError::invalid_arg(format!(
            "model '{}': parameter '{key}' = '{text}' is not a list of positive sizes like \"512,256\"",
            config.name
        ))
    })
}

/// The binding the click-through-rate models (`wide_deep`, `dlrm`) share: per item, FP32
/// `numerical_features` and INT64 `categorical_features` in, one FP32 `click_probability` out;
/// each categorical feature has its own hashed table of `table_rows` × `embedding_dim`.
pub struct CtrBinding {
    pub signature: Signature,
    /// Numerical features per item.
    pub numerical: usize,
    /// Categorical features per item.
    pub categorical: usize,
    pub table_rows: usize,
    pub embedding_dim: usize,
}

impl CtrBinding {
    pub fn bind(config: &ModelConfig, default_embedding_dim: usize) -> ServerResult<Self> {
        let signature = Signature::bind(
            config,
            &[
                TensorSpec { name: "numerical_features", dtype: DataType::Fp32 },
                TensorSpec { name: "categorical_features", dtype: DataType::Int64 },
            ],
            &[TensorSpec { name: "click_probability", dtype: DataType::Fp32 }],
        )?;
        if signature.outputs[0].item_len != 1 {
            return Err(ServerError::invalid_arg(format!(
                "model '{}': 'click_probability' must have dims [ 1 ]",
                config.name
            )));
        }
        let numerical = signature.inputs[0].item_len;
        let categorical = signature.inputs[1].item_len;
        let table_rows: usize = param(config, "table_rows", 1000)?;
        let embedding_dim: usize = param(config, "embedding_dim", default_embedding_dim)?;
        if table_rows == 0 || embedding_dim == 0 {
            return Err(ServerError::invalid_arg(format!(
                "model '{}': table_rows and embedding_dim must be positive",
                config.name
            )));
        }
        Ok(CtrBinding { signature, numerical, categorical, table_rows, embedding_dim })
    }

    /// Decodes a batch and computes it at most `chunk_items` items at a time, which bounds the
    /// activation buffers however large the batch is. `chunk` gets the chunk's item count and
    /// features and appends one probability per item.
    pub fn run_in_chunks(
        &self,
        inputs: &[Tensor],
        chunk_items: usize,
        mut chunk: impl FnMut(usize, &[f32], &[i64], &mut Vec<f32>),
    ) -> Result<Vec<Tensor>, ModelError> {
        let sig = &self.signature;
        let batch = sig.batch_size(inputs)?;
        let numerical = sig.input_f32(inputs, 0)?;
        let categorical = sig.input_i64(inputs, 1)?;
        let (n_num, n_cat) = (self.numerical, self.categorical);
        let mut probabilities = Vec::with_capacity(batch);
        for start in (0..batch).step_by(chunk_items) {
            let items = chunk_items.min(batch - start);
            let num = &numerical[start * n_num..(start + items) * n_num];
            let cat = &categorical[start * n_cat..(start + items) * n_cat];
            chunk(items, num, cat, &mut probabilities);
        }
        Ok(sig.outputs_f32(batch, vec![probabilities]))
    }
}

/// What the tests of the click-through-rate models share: their config, input batches and the
/// checks every such model must pass.
#[cfg(test)]
pub(crate) mod ctr_fixtures {
    use super::*;
    use crate::server::config::parse_pbtxt;
    use crate::server::models::Model;

    /// A `backend` config with `numerical` and `categorical` features per item and `params`.
    pub fn config(backend: &str, numerical: usize, categorical: usize, params: &[(&str, &str)]) -> ModelConfig {
        let mut text = format!(
            r#"backend: "{backend}" max_batch_size: 64
               input [ {{ name: "numerical_features" data_type: TYPE_FP32 dims: [ {numerical} ] }},
                       {{ name: "categorical_features" data_type: TYPE_INT64 dims: [ {categorical} ] }} ]
               output [ {{ name: "click_probability" data_type: TYPE_FP32 dims: [ 1 ] }} ]"#
        );
        for (k, v) in params {
            text.push_str(&format!(r#" parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}"#));
        }
        parse_pbtxt(&text, backend).unwrap()
    }

    /// A batch of varied features; `id_offset` shifts every categorical id.
    pub fn inputs(batch: usize, numerical: usize, categorical: usize, id_offset: i64) -> Vec<Tensor> {
        let num: Vec<f32> = (0..batch * numerical).map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0).collect();
        let cat: Vec<i64> = (0..batch * categorical).map(|i| (i as i64 * 7919) % 1_000_003 + id_offset).collect();
        vec![
            Tensor::from_f32(vec![batch as i64, numerical as i64], &num),
            Tensor::from_i64(vec![batch as i64, categorical as i64], &cat),
        ]
    }

    /// A batch of five items gives five probabilities in (0, 1), not all equal.
    pub fn assert_one_probability_per_item(model: &dyn Model, five_items: &[Tensor]) {
        let out = model.execute(five_items).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].shape, vec![5, 1]);
        let p = out[0].to_f32();
        assert!(p.iter().all(|&v| v > 0.0 && v < 1.0), "{p:?}");
        assert!(p.windows(2).any(|w| w[0] != w[1]), "items differ: {p:?}");
    }

    /// Two instances built alike answer alike, run after run.
    pub fn assert_deterministic<M: Model>(build: impl Fn() -> M, inputs: &[Tensor]) {
        let first = build().execute(inputs).unwrap();
        let m = build();
        assert_eq!(m.execute(inputs).unwrap(), first);
        assert_eq!(m.execute(inputs).unwrap(), first);
    }
}
