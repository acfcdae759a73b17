//! `accumulate`: a stateful sequence model. OUTPUT0 = the running sum of INPUT0 (INT32 [1],
//! wrapping) over the requests of one sequence: START resets it, END drops it, CORRID keys it.
//! The sequence batcher (`server::sequence`) passes the controls as extra inputs after INPUT0;
//! items with READY false (empty slots of a direct batch) are ignored and answer 0. A request of
//! a sequence whose START never reached the model is refused, so a routing mistake cannot pass
//! for a fresh sum.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::{Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::batch_policy::{ControlKind, SequencePolicy};
use crate::server::error::{ServerError, ServerResult};
use crate::tensor::{DataType, Tensor};

pub struct AccumulateModel {
    start: usize,
    ready: usize,
    corrid: usize,
    end: Option<usize>,
    /// Running sum per correlation id (the CORRID element's bytes).
    sums: Mutex<HashMap<Vec<u8>, i32>>,
}

impl AccumulateModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let name = &config.name;
        let int32 = DataType::Int32.config_enum();
        let one = |dims: &[i64]| dims == [1];
        let tensors_ok = matches!(config.input.as_slice(), [i] if i.data_type == int32 && one(&i.dims))
            && matches!(config.output.as_slice(), [o] if o.data_type == int32 && one(&o.dims));
        if !tensors_ok {
            return Err(ServerError::invalid_arg(format!(
                "model '{name}': backend 'accumulate' needs one INT32 input and one INT32 output, dims [1]"
            )));
        }
        let control = |kind| SequencePolicy::control_index(config, kind);
        let (Some(start), Some(ready), Some(corrid)) =
            (control(ControlKind::Start), control(ControlKind::Ready), control(ControlKind::CorrId))
        else {
            return Err(ServerError::invalid_arg(format!(
                "model '{name}': backend 'accumulate' needs sequence_batching with START, READY and CORRID control inputs"
            )));
        };
        Ok(AccumulateModel { start, ready, corrid, end: control(ControlKind::End), sums: Mutex::new(HashMap::new()) })
    }
}

/// Item `i` of a control flag (INT32, FP32 or BOOL): true unless zero.
fn flag(t: &Tensor, i: usize) -> bool {
    let size = t.dtype.element_size().unwrap_or(1);
    t.data.get(i * size..(i + 1) * size).is_some_and(|b| b.iter().any(|&x| x != 0))
}

/// The elements of a CORRID tensor as keys: fixed-size numbers, or BYTES elements.
fn ids(t: &Tensor, n: usize) -> Vec<Vec<u8>> {
    match t.dtype.element_size() {
        Some(size) => t.data.chunks_exact(size).take(n).map(<[u8]>::to_vec).collect(),
        None => {
            let mut out = Vec::with_capacity(n);
            let mut rest = &t.data[..];
            while rest.len() >= 4 && out.len() < n {
                let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                let end = (4 + len).min(rest.len());
                out.push(rest[4..end].to_vec());
                rest = &rest[end..];
            }
            out
        }
    }
}

impl Model for AccumulateModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        let x = inputs[0].to_i32();
        let n = x.len();
        let (start, ready, corrid) = (&inputs[self.start], &inputs[self.ready], &inputs[self.corrid]);
        let keys = ids(corrid, n);
        if keys.len() != n {
            return Err(ModelError::BadInput(format!("CORRID holds {} ids for {n} items", keys.len())));
        }
        let mut sums = self.sums.lock();
        let mut out = Vec::with_capacity(n);
        for (i, (&v, key)) in x.iter().zip(keys).enumerate() {
            if !flag(ready, i) {
                out.push(0);
                continue;
            }
            let total = if flag(start, i) {
                v
            } else {
                match sums.get(&key) {
                    Some(sum) => sum.wrapping_add(v),
                    None => {
                        return Err(ModelError::BadInput(format!(
                            "sequence {key:?} has no running sum: its START never reached this model"
                        )))
                    }
                }
            };
            if self.end.is_some_and(|e| flag(&inputs[e], i)) {
                sums.remove(&key);
            } else {
                sums.insert(key, total);
            }
            out.push(total);
        }
        Ok(vec![Tensor::from_i32(inputs[0].shape.clone(), &out)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::repository::ZOO;

    fn model() -> AccumulateModel {
        let text = ZOO.iter().find(|(n, _)| *n == "accumulate").unwrap().1;
        AccumulateModel::new(&crate::server::config::parse_pbtxt(text, "accumulate").unwrap()).unwrap()
    }

    fn i32s(v: &[i32]) -> Tensor {
        Tensor::from_i32(vec![v.len() as i64, 1], v)
    }

    #[test]
    fn sums_per_sequence_ignores_empty_slots_and_forgets_at_end() {
        let m = model();
        let ids = |v: &[u64]| Tensor {
            dtype: DataType::Uint64,
            shape: vec![v.len() as i64, 1],
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into(),
        };
        // INPUT0, START, END, READY, CORRID: slot 1 is empty.
        let out = m
            .execute(&[i32s(&[1, 99, 10]), i32s(&[1, 0, 1]), i32s(&[0, 0, 0]), i32s(&[1, 0, 1]), ids(&[7, 0, 8])])
            .unwrap();
        assert_eq!(out[0].to_i32(), [1, 0, 10]);
        let out = m.execute(&[i32s(&[2, 20]), i32s(&[0, 0]), i32s(&[1, 0]), i32s(&[1, 1]), ids(&[7, 8])]).unwrap();
        assert_eq!(out[0].to_i32(), [3, 30]);
        // Sequence 7 ended: without START it has no sum.
        let err = m.execute(&[i32s(&[1]), i32s(&[0]), i32s(&[0]), i32s(&[1]), ids(&[7])]).unwrap_err();
        assert!(err.to_string().contains("START never reached"), "{err}");
    }
}
