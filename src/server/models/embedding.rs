//! `embedding_lookup`: the embedding half of a DLRM served apart from its dense half, like
//! seed 003's HugeCTR HPS model. Input per item: `categorical_features` INT64 `[26]`; output:
//! `embeddings` FP32 `[26, embedding_dim]`, one vector per key slot gathered from that slot's
//! table. Each slot has its own table of `table_rows` rows (one count for every slot, or a
//! comma list with one per slot) × `embedding_dim`; any INT64 key selects row `key mod rows`.
//! The work is the gathers themselves: memory-bound, from real tables of `seed`-derived weights.

use super::nn::{Embedding, WeightInit};
use super::signature::{sizes_param, Signature, TensorSpec};
use super::{check_floats, param, Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::error::{ServerError, ServerResult};
use crate::tensor::{DataType, Tensor};

const DEFAULT_SEED: u64 = 0xE3_B0;

pub struct EmbeddingLookupModel {
    signature: Signature,
    tables: Vec<Embedding>,
    dim: usize,
}

impl EmbeddingLookupModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let signature = Signature::bind(
            config,
            &[TensorSpec { name: "categorical_features", dtype: DataType::Int64 }],
            &[TensorSpec { name: "embeddings", dtype: DataType::Fp32 }],
        )?;
        let slots = signature.inputs[0].item_len;
        let dim: usize = param(config, "embedding_dim", 128)?;
        if signature.outputs[0].dims != [slots as i64, dim as i64] {
            return Err(ServerError::invalid_arg(format!(
                "model '{}': 'embeddings' must have dims [ {slots}, {dim} ] (key slots, embedding_dim)",
                config.name
            )));
        }
        let rows = sizes_param(config, "table_rows", &[1000])?;
        let rows = match rows.len() {
            1 => vec![rows[0]; slots],
            n if n == slots => rows,
            n => {
                return Err(ServerError::invalid_arg(format!(
                    "model '{}': parameter 'table_rows' lists {n} tables for {slots} key slots",
                    config.name
                )))
            }
        };
        let floats = rows.iter().try_fold(0usize, |acc, &r| acc.checked_add(r.checked_mul(dim)?));
        check_floats(config, "the embedding tables", floats)?;
        let mut init = WeightInit::new(param(config, "seed", DEFAULT_SEED)?);
        let std = 1.0 / (dim as f32).sqrt();
        let tables = rows.iter().map(|&r| Embedding::random(&mut init, r, dim, std)).collect();
        Ok(EmbeddingLookupModel { signature, tables, dim })
    }
}

impl Model for EmbeddingLookupModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        let batch = self.signature.batch_size(inputs)?;
        let keys = self.signature.input_i64(inputs, 0)?;
        let slots = self.tables.len();
        let mut out = vec![0f32; keys.len() * self.dim];
        for (item_keys, item_out) in keys.chunks_exact(slots).zip(out.chunks_exact_mut(slots * self.dim)) {
            for ((table, &key), row) in self.tables.iter().zip(item_keys).zip(item_out.chunks_exact_mut(self.dim)) {
                row.copy_from_slice(table.hashed(key));
            }
        }
        Ok(self.signature.outputs_f32(batch, vec![out]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;

    fn config(rows: &str) -> ModelConfig {
        parse_pbtxt(
            &format!(
                r#"backend: "embedding_lookup" max_batch_size: 8
                   input [ {{ name: "categorical_features" data_type: TYPE_INT64 dims: [ 3 ] }} ]
                   output [ {{ name: "embeddings" data_type: TYPE_FP32 dims: [ 3, 4 ] }} ]
                   parameters {{ key: "embedding_dim" value {{ string_value: "4" }} }}
                   parameters {{ key: "table_rows" value {{ string_value: "{rows}" }} }}"#
            ),
            "e",
        )
        .unwrap()
    }

    #[test]
    fn gathers_each_slots_row_from_its_own_table() {
        let m = EmbeddingLookupModel::new(&config("5,7,11")).unwrap();
        let keys = [0i64, 1, 2, 5, 8, -1];
        let out = m.execute(&[Tensor::from_i64(vec![2, 3], &keys)]).unwrap();
        assert_eq!(out[0].shape, vec![2, 3, 4]);
        let v = out[0].to_f32();
        for (i, &key) in keys.iter().enumerate() {
            assert_eq!(&v[i * 4..(i + 1) * 4], m.tables[i % 3].hashed(key), "key {i}");
        }
        // Keys wrap by their own table's size: 5 in a 5-row table is row 0, -1 in 11 rows is 10.
        assert_eq!(m.tables[0].hashed(5), m.tables[0].hashed(0));
        assert_ne!(&v[0..4], &v[4..8], "slots use different tables");
    }

    #[test]
    fn bad_table_lists_and_shapes_are_refused() {
        let err = EmbeddingLookupModel::new(&config("5,7")).err().unwrap();
        assert!(err.message.contains("lists 2 tables for 3 key slots"), "{}", err.message);
        let mut c = config("5");
        c.output[0].dims = vec![3, 5];
        assert!(EmbeddingLookupModel::new(&c).err().unwrap().message.contains("[ 3, 4 ]"));
    }

    #[test]
    fn the_zoo_model_loads() {
        let zoo = parse_pbtxt(include_str!("../zoo/embedding_lookup.pbtxt"), "embedding_lookup").unwrap();
        let m = EmbeddingLookupModel::new(&zoo).unwrap();
        assert_eq!(m.tables.len(), 26);
        let out = m.execute(&[Tensor::from_i64(vec![2, 26], &[3; 52])]).unwrap();
        assert_eq!(out[0].shape, vec![2, 26, 128]);
    }
}
