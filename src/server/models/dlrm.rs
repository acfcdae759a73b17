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
use super::signature::{sizes_param, CtrBinding};
use super::{check_floats, mlp_floats, param, sum_floats, Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::error::ServerResult;
use crate::tensor::Tensor;

const DEFAULT_SEED: u64 = 0xD1_2A;
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

pub struct DlrmModel {
    binding: CtrBinding,
    bottom: Mlp,
    tables: Vec<Embedding>,
    top: Mlp,
    scratch: ScratchPool<Scratch>,
}

impl DlrmModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let binding = CtrBinding::bind(config, 128)?;
        let (numerical, categorical, dim) = (binding.numerical, binding.categorical, binding.embedding_dim);
        let bottom_sizes = [vec![numerical], sizes_param(config, "bottom_mlp", &[512, 256])?, vec![dim]].concat();
        let interactions = (categorical + 1).checked_mul(categorical).map(|n| n / 2);
        let top_in = interactions.and_then(|n| n.checked_add(dim));
        check_floats(config, "the interaction layer", top_in)?;
        let top_sizes =
            [vec![top_in.unwrap_or(0)], sizes_param(config, "top_mlp", &[1024, 1024, 512, 256])?, vec![1]].concat();
        let tables = categorical.checked_mul(binding.table_rows).and_then(|n| n.checked_mul(dim));
        check_floats(
            config,
            "dlrm's weights",
            sum_floats(&[mlp_floats(&bottom_sizes), tables, mlp_floats(&top_sizes)]),
        )?;

        let mut init = WeightInit::new(param(config, "seed", DEFAULT_SEED)?);
        let bottom = Mlp::random(&mut init, &bottom_sizes, true);
        let table_std = 1.0 / (dim as f32).sqrt();
        let tables =
            (0..categorical).map(|_| Embedding::random(&mut init, binding.table_rows, dim, table_std)).collect();
        let top = Mlp::random(&mut init, &top_sizes, false);
        Ok(DlrmModel { binding, bottom, tables, top, scratch: ScratchPool::new() })
    }

    fn forward_chunk(&self, items: usize, numerical: &[f32], categorical: &[i64], s: &mut Scratch, out: &mut Vec<f32>) {
        let dim = self.bottom.out_dim();
        let n_cat = self.tables.len();
        let rows = n_cat + 1;
        let top_width = self.top.in_dim();
        let bottom = self.bottom.forward(numerical, items, &mut s.bottom_a, &mut s.bottom_b);
        let features = sized(&mut s.features, rows * dim);
        let gram = sized(&mut s.gram, rows * rows);
        let top_in = sized(&mut s.top_in, items * top_width);
        for (i, top_row) in top_in.chunks_exact_mut(top_width).enumerate() {
            let dense = &bottom[i * dim..(i + 1) * dim];
            features[..dim].copy_from_slice(dense);
            for (f, (table, &id)) in self.tables.iter().zip(&categorical[i * n_cat..(i + 1) * n_cat]).enumerate() {
                features[(f + 1) * dim..(f + 2) * dim].copy_from_slice(table.hashed(id));
            }
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
    }
}

impl Model for DlrmModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        self.binding.run_in_chunks(inputs, CHUNK_ITEMS, |items, numerical, categorical, out| {
            self.scratch.with(|s| self.forward_chunk(items, numerical, categorical, s, out))
        })
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
    fn the_zoo_model_runs() {
        let zoo = parse_pbtxt(include_str!("../zoo/dlrm.pbtxt"), "dlrm").unwrap();
        let m = DlrmModel::new(&zoo).unwrap();
        assert_eq!(m.tables.len(), 26);
        assert_eq!(m.top.in_dim(), 128 + 351);
        let out = m.execute(&inputs(4, 123)).unwrap();
        assert_eq!(out[0].shape, vec![4, 1]);
    }
}
