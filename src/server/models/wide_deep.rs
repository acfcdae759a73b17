//! `wide_deep`: a Wide & Deep click-through-rate model on the CPU, shaped like seed 001's model
//! (NVIDIA's Wide & Deep on the Outbrain data: a few numerical and categorical features per
//! item, very large batches).
//!
//! Inputs per item: `numerical_features` FP32 `[13]`, `categorical_features` INT64 `[16]` in the
//! zoo config (the counts follow the config dims). Output: `click_probability` FP32 `[1]`.
//!
//! Deep part: each categorical feature looks up its own `table_rows` × `embedding_dim` table;
//! the embeddings and the numerical features, concatenated, go through an MLP (`deep_mlp`
//! hidden sizes with ReLU, then 1). Wide part: a linear model, one learned weight per categorical
//! id (per-feature tables of `table_rows` × 1) plus a linear term over the numerical features.
//! The click probability is the sigmoid of the sum of both logits. Categorical ids are hashed
//! features: any INT64 id selects row `id mod table_rows` (negative ids wrap too). Weights come
//! from `seed`.

use super::nn::{sigmoid, sized, Embedding, Linear, Mlp, ScratchPool, WeightInit};
use super::signature::{sizes_param, CtrBinding};
use super::{check_floats, mlp_floats, param, sum_floats, Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::error::ServerResult;
use crate::tensor::Tensor;

const DEFAULT_SEED: u64 = 0x3D_EE9;
/// Items per pass: bounds the activation buffers however large the batch is.
const CHUNK_ITEMS: usize = 1024;

#[derive(Default)]
struct Scratch {
    deep_in: Vec<f32>,
    deep_a: Vec<f32>,
    deep_b: Vec<f32>,
    wide: Vec<f32>,
}

pub struct WideDeepModel {
    binding: CtrBinding,
    deep_tables: Vec<Embedding>,
    deep: Mlp,
    /// One weight per (feature, hashed id): the wide part's sparse linear term.
    wide_tables: Vec<Embedding>,
    wide_numerical: Linear,
    scratch: ScratchPool<Scratch>,
}

impl WideDeepModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let binding = CtrBinding::bind(config, 32)?;
        let (numerical, categorical, dim) = (binding.numerical, binding.categorical, binding.embedding_dim);
        let table_rows = binding.table_rows;
        let deep_in = categorical.checked_mul(dim).and_then(|n| n.checked_add(numerical));
        check_floats(config, "the deep layer's input", deep_in)?;
        let deep_sizes =
            [vec![deep_in.unwrap_or(0)], sizes_param(config, "deep_mlp", &[1024, 512, 256])?, vec![1]].concat();
        let tables = categorical.checked_mul(table_rows).and_then(|n| n.checked_mul(dim.checked_add(1)?));
        check_floats(config, "wide_deep's weights", sum_floats(&[tables, mlp_floats(&deep_sizes)]))?;

        let mut init = WeightInit::new(param(config, "seed", DEFAULT_SEED)?);
        let table_std = 1.0 / (dim as f32).sqrt();
        let deep_tables = (0..categorical).map(|_| Embedding::random(&mut init, table_rows, dim, table_std)).collect();
        let deep = Mlp::random(&mut init, &deep_sizes, false);
        let wide_tables = (0..categorical).map(|_| Embedding::random(&mut init, table_rows, 1, 0.1)).collect();
        let wide_numerical = Linear::random(&mut init, numerical, 1, 0.1);
        Ok(WideDeepModel { binding, deep_tables, deep, wide_tables, wide_numerical, scratch: ScratchPool::new() })
    }

    fn forward_chunk(&self, items: usize, numerical: &[f32], categorical: &[i64], s: &mut Scratch, out: &mut Vec<f32>) {
        let n_num = self.wide_numerical.in_dim;
        let n_cat = self.deep_tables.len();
        let width = self.deep.in_dim();
        let dim = self.binding.embedding_dim;

        // Wide logits: the numerical linear term, plus one weight per categorical id.
        let wide = sized(&mut s.wide, items);
        self.wide_numerical.forward(numerical, items, wide);
        let deep_in = sized(&mut s.deep_in, items * width);
        for (i, (row, wide_logit)) in deep_in.chunks_exact_mut(width).zip(wide.iter_mut()).enumerate() {
            let ids = &categorical[i * n_cat..(i + 1) * n_cat];
            let (embedded, numeric) = row.split_at_mut(width - n_num);
            let features = ids.iter().zip(&self.deep_tables).zip(&self.wide_tables);
            for (slot, ((&id, deep_table), wide_table)) in embedded.chunks_exact_mut(dim).zip(features) {
                slot.copy_from_slice(deep_table.hashed(id));
                *wide_logit += wide_table.hashed(id)[0];
            }
            numeric.copy_from_slice(&numerical[i * n_num..(i + 1) * n_num]);
        }
        let deep = self.deep.forward(deep_in, items, &mut s.deep_a, &mut s.deep_b);
        out.extend(deep.iter().zip(wide.iter()).map(|(d, w)| sigmoid(d + w)));
    }
}

impl Model for WideDeepModel {
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
        ctr_fixtures::config("wide_deep", numerical, categorical, params)
    }

    const SMALL: &[(&str, &str)] = &[("table_rows", "10"), ("embedding_dim", "4"), ("deep_mlp", "32,16")];

    fn small() -> WideDeepModel {
        WideDeepModel::new(&config(13, 16, SMALL)).unwrap()
    }

    fn inputs(batch: usize, id_offset: i64) -> Vec<Tensor> {
        ctr_fixtures::inputs(batch, 13, 16, id_offset)
    }

    fn item(x: &[Tensor], i: usize) -> Vec<Tensor> {
        vec![
            Tensor::from_f32(vec![1, 13], &x[0].to_f32()[i * 13..(i + 1) * 13]),
            Tensor::from_i64(vec![1, 16], &x[1].to_i64()[i * 16..(i + 1) * 16]),
        ]
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
    fn a_batch_matches_its_items_one_by_one() {
        let m = small();
        let batch = CHUNK_ITEMS + 2;
        let x = inputs(batch, 0);
        let all = m.execute(&x).unwrap()[0].to_f32();
        for i in [0, 1, batch - 1] {
            let one = m.execute(&item(&x, i)).unwrap()[0].to_f32();
            assert!((one[0] - all[i]).abs() < 1e-5, "item {i}: {} vs {}", one[0], all[i]);
        }
    }

    #[test]
    fn every_input_counts() {
        let m = small();
        let x = inputs(1, 0);
        let base = m.execute(&x).unwrap();
        assert_eq!(m.execute(&inputs(1, 10)).unwrap(), base, "id + table_rows selects the same rows");
        assert_eq!(m.execute(&inputs(1, -1_000_010)).unwrap(), base, "negative ids wrap");
        assert_ne!(m.execute(&inputs(1, 1)).unwrap(), base, "categorical ids matter");
        let mut num = x[0].to_f32();
        num[12] += 1.0;
        let moved = m.execute(&[Tensor::from_f32(vec![1, 13], &num), x[1].clone()]).unwrap();
        assert_ne!(moved, base, "the last numerical feature matters");
    }

    #[test]
    fn wrong_inputs_and_configs_are_errors() {
        let m = small();
        let mut x = inputs(2, 0);
        x[1] = Tensor::from_i64(vec![2, 15], &[0; 30]);
        assert!(m.execute(&x).unwrap_err().to_string().contains("input 'categorical_features' has shape [2, 15]"));
        let err = WideDeepModel::new(&config(13, 16, &[("embedding_dim", "0")])).err().unwrap();
        assert!(err.message.contains("must be positive"), "{}", err.message);
        let text = r#"backend: "wide_deep" max_batch_size: 4
            input [ { name: "numerical_features" data_type: TYPE_FP32 dims: [ 13 ] } ]
            output [ { name: "click_probability" data_type: TYPE_FP32 dims: [ 1 ] } ]"#;
        let err = WideDeepModel::new(&parse_pbtxt(text, "w").unwrap()).err().unwrap();
        assert!(err.message.contains("lacks input 'categorical_features'"), "{}", err.message);
    }

    #[test]
    fn the_zoo_model_runs() {
        let zoo = parse_pbtxt(include_str!("../zoo/wide_deep.pbtxt"), "wide_deep").unwrap();
        let m = WideDeepModel::new(&zoo).unwrap();
        let out = m.execute(&inputs(4, 5)).unwrap();
        assert_eq!(out[0].shape, vec![4, 1]);
    }
}
