//! `dlrm`: a DLRM click-through-rate model on the CPU, shaped like seed 003's model (Criteo
//! layout: 13 numerical and 26 categorical features).
//!
//! Inputs per item: `numerical_features` FP32 `[13]`, `categorical_features` INT64 `[26]` (the
//! counts follow the config dims). Output: `click_probability` FP32 `[1]`.
//!
//! The numerical features go through the bottom MLP (`bottom_mlp` hidden sizes, then
//! `embedding_dim`, ReLU throughout); each categorical feature looks up its own table of
//! `table_rows` × `embedding_dim`. Categorical ids are hashed features: any INT64 id selects row
//! `id mod table_rows` (negative ids wrap too), so no id is out of range. The interaction takes
//! the dot products of every pair among the bottom output and the embeddings (the strictly lower
//! triangle of their Gram matrix) and appends them to the bottom output; the top MLP
//! (`top_mlp` hidden sizes, then 1) and a sigmoid give the probability. Defaults are those of
//! NVIDIA's DLRM example (bottom 512-256-128, top 1024-1024-512-256-1, dim 128) with small tables
//! (1000 rows). Weights come from `seed`.

use super::nn::{gemm, sigmoid, sized, Embedding, Mat, MatMut, Mlp, ScratchPool, WeightInit};
use super::signature::{sizes_param, CtrBinding, Signature, TensorSpec};
use super::{check_floats, mlp_floats, param, sum_floats, Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::error::{ServerError, ServerResult};
use crate::tensor::{DataType, Tensor};

const DEFAULT_SEED: u64 = 0xD1_2A;
const DEFAULT_EMBEDDING_DIM: usize = 128;
/// Items per pass: bounds the activation buffers however large the batch is.
const CHUNK_ITEMS: usize = 1024;

#[derive(Default)]
struct Scratch {
    bottom_a: Vec<f32>,
    bottom_b: Vec<f32>,
    /// One item's interaction rows: the bottom output, then one embedding per feature.
    features: Vec<f32>,
    gram: Vec<f32>,
    top_in: Vec<f32>,
    top_a: Vec<f32>,
    top_b: Vec<f32>,
}

/// DLRM after the embedding lookup: bottom MLP, dot interaction, top MLP and sigmoid. `dlrm`
/// feeds it from its own tables, `dlrm_dense` from the `embeddings` input.
struct Dense {
    bottom: Mlp,
    top: Mlp,
    categorical: usize,
    scratch: ScratchPool<Scratch>,
}

/// The MLP layer sizes for these feature counts, checked with `extra_floats` (the tables)
/// against the model size limit.
fn dense_sizes(
    config: &ModelConfig,
    numerical: usize,
    categorical: usize,
    dim: usize,
    extra_floats: Option<usize>,
) -> ServerResult<(Vec<usize>, Vec<usize>)> {
    let bottom = [vec![numerical], sizes_param(config, "bottom_mlp", &[512, 256])?, vec![dim]].concat();
    let interactions = (categorical + 1).checked_mul(categorical).map(|n| n / 2);
    let top_in = interactions.and_then(|n| n.checked_add(dim));
    check_floats(config, "the interaction layer", top_in)?;
    let top = [vec![top_in.unwrap_or(0)], sizes_param(config, "top_mlp", &[1024, 1024, 512, 256])?, vec![1]].concat();
    check_floats(config, "dlrm's weights", sum_floats(&[mlp_floats(&bottom), extra_floats, mlp_floats(&top)]))?;
    Ok((bottom, top))
}

impl Dense {
    fn new(bottom: Mlp, top: Mlp, categorical: usize) -> Self {
        Dense { bottom, top, categorical, scratch: ScratchPool::new() }
    }

    /// `embeddings(item, rows)` fills one item's `categorical` embedding rows.
    fn forward_chunk(
        &self,
        items: usize,
        numerical: &[f32],
        embeddings: impl Fn(usize, &mut [f32]),
        out: &mut Vec<f32>,
    ) {
        self.scratch.with(|s| {
            let dim = self.bottom.out_dim();
            let rows = self.categorical + 1;
            let top_width = self.top.in_dim();
            let bottom = self.bottom.forward(numerical, items, &mut s.bottom_a, &mut s.bottom_b);
            let features = sized(&mut s.features, rows * dim);
            let gram = sized(&mut s.gram, rows * rows);
            let top_in = sized(&mut s.top_in, items * top_width);
            for (i, top_row) in top_in.chunks_exact_mut(top_width).enumerate() {
                let dense = &bottom[i * dim..(i + 1) * dim];
                features[..dim].copy_from_slice(dense);
                embeddings(i, &mut features[dim..]);
                let t = Mat::new(features, rows, dim);
                gemm(1.0, t, t.t(), 0.0, MatMut::new(gram, rows, rows));
                top_row[..dim].copy_from_slice(dense);
                let pairs = (1..rows).flat_map(|r| (0..r).map(move |c| (r, c)));
                for (slot, (r, c)) in top_row[dim..].iter_mut().zip(pairs) {
                    *slot = gram[r * rows + c];
                }
            }
            let logits = self.top.forward(top_in, items, &mut s.top_a, &mut s.top_b);
            out.extend(logits.iter().map(|&l| sigmoid(l)));
        })
    }
}

pub struct DlrmModel {
    binding: CtrBinding,
    tables: Vec<Embedding>,
    dense: Dense,
}

impl DlrmModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let binding = CtrBinding::bind(config, DEFAULT_EMBEDDING_DIM)?;
        let (numerical, categorical, dim) = (binding.numerical, binding.categorical, binding.embedding_dim);
        let tables = categorical.checked_mul(binding.table_rows).and_then(|n| n.checked_mul(dim));
        let (bottom_sizes, top_sizes) = dense_sizes(config, numerical, categorical, dim, tables)?;

        let mut init = WeightInit::new(param(config, "seed", DEFAULT_SEED)?);
        let bottom = Mlp::random(&mut init, &bottom_sizes, true);
        let table_std = 1.0 / (dim as f32).sqrt();
        let tables =
            (0..categorical).map(|_| Embedding::random(&mut init, binding.table_rows, dim, table_std)).collect();
        let top = Mlp::random(&mut init, &top_sizes, false);
        Ok(DlrmModel { binding, tables, dense: Dense::new(bottom, top, categorical) })
    }
}

impl Model for DlrmModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        let (n_cat, dim) = (self.tables.len(), self.binding.embedding_dim);
        self.binding.run_in_chunks(inputs, CHUNK_ITEMS, |items, numerical, categorical, out| {
            let lookup = |item: usize, rows: &mut [f32]| {
                let ids = &categorical[item * n_cat..(item + 1) * n_cat];
                for ((table, &id), row) in self.tables.iter().zip(ids).zip(rows.chunks_exact_mut(dim)) {
                    row.copy_from_slice(table.hashed(id));
                }
            };
            self.dense.forward_chunk(items, numerical, lookup, out)
        })
    }
}

/// `dlrm_dense`: the dense half of `dlrm`, for an ensemble whose embeddings come from another
/// model (seed 003's HPS layout). Inputs per item: `numerical_features` FP32 `[13]` and
/// `embeddings` FP32 `[26, dim]` (counts from the config dims); output `click_probability`.
pub struct DlrmDenseModel {
    signature: Signature,
    numerical: usize,
    dense: Dense,
}

impl DlrmDenseModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let signature = Signature::bind(
            config,
            &[
                TensorSpec { name: "numerical_features", dtype: DataType::Fp32 },
                TensorSpec { name: "embeddings", dtype: DataType::Fp32 },
            ],
            &[TensorSpec { name: "click_probability", dtype: DataType::Fp32 }],
        )?;
        let &[categorical, dim] = signature.inputs[1].dims.as_slice() else {
            return Err(ServerError::invalid_arg(format!(
                "model '{}': 'embeddings' must have dims [ features, embedding_dim ]",
                config.name
            )));
        };
        let (categorical, dim) = (categorical as usize, dim as usize);
        let numerical = signature.inputs[0].item_len;
        if signature.outputs[0].item_len != 1 {
            return Err(ServerError::invalid_arg(format!(
                "model '{}': 'click_probability' must have dims [ 1 ]",
                config.name
            )));
        }
        let (bottom_sizes, top_sizes) = dense_sizes(config, numerical, categorical, dim, Some(0))?;
        let mut init = WeightInit::new(param(config, "seed", DEFAULT_SEED)?);
        let bottom = Mlp::random(&mut init, &bottom_sizes, true);
        let top = Mlp::random(&mut init, &top_sizes, false);
        Ok(DlrmDenseModel { signature, numerical, dense: Dense::new(bottom, top, categorical) })
    }
}

impl Model for DlrmDenseModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        let sig = &self.signature;
        let batch = sig.batch_size(inputs)?;
        let numerical = sig.input_f32(inputs, 0)?;
        let embeddings = sig.input_f32(inputs, 1)?;
        let (n_num, per_item) = (self.numerical, sig.inputs[1].item_len);
        let mut probabilities = Vec::with_capacity(batch);
        for start in (0..batch).step_by(CHUNK_ITEMS) {
            let items = CHUNK_ITEMS.min(batch - start);
            let num = &numerical[start * n_num..(start + items) * n_num];
            let emb = &embeddings[start * per_item..(start + items) * per_item];
            let given =
                |item: usize, rows: &mut [f32]| rows.copy_from_slice(&emb[item * per_item..(item + 1) * per_item]);
            self.dense.forward_chunk(items, num, given, &mut probabilities);
        }
        Ok(sig.outputs_f32(batch, vec![probabilities]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;
    use crate::server::models::signature::ctr_fixtures;

    fn config(numerical: usize, categorical: usize, params: &[(&str, &str)]) -> ModelConfig {
        ctr_fixtures::config("dlrm", numerical, categorical, params)
    }

    const SMALL: &[(&str, &str)] =
        &[("table_rows", "10"), ("embedding_dim", "8"), ("bottom_mlp", "16"), ("top_mlp", "32,16")];

    fn small() -> DlrmModel {
        DlrmModel::new(&config(13, 26, SMALL)).unwrap()
    }

    fn inputs(batch: usize, id_offset: i64) -> Vec<Tensor> {
        ctr_fixtures::inputs(batch, 13, 26, id_offset)
    }

    #[test]
    fn outputs_one_probability_per_item() {
        ctr_fixtures::assert_one_probability_per_item(&small(), &inputs(5, 0));
    }

    #[test]
    fn deterministic_across_runs_and_instances() {
        ctr_fixtures::assert_deterministic(small, &inputs(3, 0));
    }

    #[test]
    fn a_batch_of_two_matches_two_batches_of_one() {
        let m = small();
        let both = m.execute(&inputs(2, 0)).unwrap()[0].to_f32();
        let x = inputs(2, 0);
        for (item, expected) in both.iter().enumerate() {
            let num = &x[0].to_f32()[item * 13..(item + 1) * 13];
            let cat = &x[1].to_i64()[item * 26..(item + 1) * 26];
            let one = m.execute(&[Tensor::from_f32(vec![1, 13], num), Tensor::from_i64(vec![1, 26], cat)]).unwrap()[0]
                .to_f32();
            assert!((one[0] - expected).abs() < 1e-5);
        }
    }

    #[test]
    fn batches_larger_than_a_chunk_match_item_by_item() {
        let m = small();
        let batch = CHUNK_ITEMS + 3;
        let all = m.execute(&inputs(batch, 0)).unwrap()[0].to_f32();
        let x = inputs(batch, 0);
        let last = batch - 1;
        let one = m
            .execute(&[
                Tensor::from_f32(vec![1, 13], &x[0].to_f32()[last * 13..]),
                Tensor::from_i64(vec![1, 26], &x[1].to_i64()[last * 26..]),
            ])
            .unwrap()[0]
            .to_f32();
        assert!((one[0] - all[last]).abs() < 1e-5);
    }

    #[test]
    fn categorical_ids_are_hashed_modulo_the_table_size() {
        let m = small();
        let base = m.execute(&inputs(2, 0)).unwrap();
        assert_eq!(m.execute(&inputs(2, 10)).unwrap(), base, "id + table_rows selects the same rows");
        assert_eq!(m.execute(&inputs(2, -1_000_010)).unwrap(), base, "negative ids wrap");
        assert_ne!(m.execute(&inputs(2, 1)).unwrap(), base);
    }

    #[test]
    fn wrong_inputs_and_configs_are_errors() {
        let m = small();
        let mut x = inputs(2, 0);
        x[0] = Tensor::from_f32(vec![2, 12], &[0.0; 24]);
        assert!(m.execute(&x).unwrap_err().to_string().contains("input 'numerical_features' has shape [2, 12]"));
        let mut x = inputs(2, 0);
        x[1] = Tensor::from_i32(vec![2, 26], &[0; 52]);
        assert!(m.execute(&x).unwrap_err().to_string().contains("dtype INT32"));
        let err = DlrmModel::new(&config(13, 26, &[("top_mlp", "64,,8")])).err().unwrap();
        assert!(err.message.contains("'top_mlp'"), "{}", err.message);
    }

    #[test]
    fn dlrm_dense_fed_dlrms_own_embeddings_computes_dlrm() {
        let m = small();
        let x = inputs(3, 5);
        let expected = m.execute(&x).unwrap();
        let embeddings: Vec<f32> = x[1]
            .to_i64()
            .chunks(26)
            .flat_map(|ids| ids.iter().zip(&m.tables).flat_map(|(&id, t)| t.hashed(id).to_vec()))
            .collect();
        let dense_config = parse_pbtxt(
            &format!(
                r#"backend: "dlrm_dense" max_batch_size: 64
                   input [ {{ name: "numerical_features" data_type: TYPE_FP32 dims: [ 13 ] }},
                           {{ name: "embeddings" data_type: TYPE_FP32 dims: [ 26, 8 ] }} ]
                   output [ {{ name: "click_probability" data_type: TYPE_FP32 dims: [ 1 ] }} ]
                   {}"#,
                SMALL
                    .iter()
                    .map(|(k, v)| format!(r#"parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}"#))
                    .collect::<String>()
            ),
            "dense",
        )
        .unwrap();
        // Same shapes, so a fresh dlrm_dense takes dlrm's dense weights.
        let mut dense = DlrmDenseModel::new(&dense_config).unwrap();
        dense.dense = m.dense;
        let got = dense.execute(&[x[0].clone(), Tensor::from_f32(vec![3, 26, 8], &embeddings)]).unwrap();
        assert_eq!(got, expected);
        let err =
            dense.execute(&[x[0].clone(), Tensor::from_f32(vec![3, 26, 7], &embeddings[..3 * 26 * 7])]).unwrap_err();
        assert!(err.to_string().contains("input 'embeddings' has shape [3, 26, 7]"), "{err}");
    }

    #[test]
    fn the_zoo_dense_half_runs() {
        let zoo = parse_pbtxt(include_str!("../zoo/dlrm_dense.pbtxt"), "dlrm_dense").unwrap();
        let m = DlrmDenseModel::new(&zoo).unwrap();
        let out = m
            .execute(&[
                Tensor::from_f32(vec![2, 13], &[0.5; 26]),
                Tensor::from_f32(vec![2, 26, 128], &[0.01; 2 * 26 * 128]),
            ])
            .unwrap();
        assert_eq!(out[0].shape, vec![2, 1]);
    }

    #[test]
    fn the_zoo_model_runs() {
        let zoo = parse_pbtxt(include_str!("../zoo/dlrm.pbtxt"), "dlrm").unwrap();
        let m = DlrmModel::new(&zoo).unwrap();
        assert_eq!(m.tables.len(), 26);
        assert_eq!(m.dense.top.in_dim(), 128 + 351);
        let out = m.execute(&inputs(4, 123)).unwrap();
        assert_eq!(out[0].shape, vec![4, 1]);
    }
}
