//! `repeat`: a decoupled model (the interface of Triton's repeat_int32 example). For each element
//! i of IN it answers OUT = [IN[i]], IDX = [i] after DELAY[i] ms (each delay counted from the
//! previous response), then sends the final flag WAIT ms later. An empty IN gets only the flag.
//! Inputs IN INT32 [-1], DELAY UINT32 [-1], WAIT UINT32 [1]; outputs OUT INT32 [1], IDX UINT32 [1];
//! no batching. A request whose DELAYs and WAIT add up to more than 60 s is refused.

use std::time::Duration;

use super::{Model, ModelError, Responses, TimedResponse};
use crate::proto::inference::ModelConfig;
use crate::server::error::{ServerError, ServerResult};
use crate::tensor::{DataType, Tensor};

pub struct RepeatModel;

/// The longest schedule one request may ask for: a stream is not held open for days.
const MAX_SCHEDULE_MS: u64 = 60_000;

impl RepeatModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let name = &config.name;
        let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        if !decoupled {
            return Err(ServerError::invalid_arg(format!(
                "model '{name}': backend 'repeat' needs model_transaction_policy {{ decoupled: true }}"
            )));
        }
        if config.max_batch_size != 0 {
            return Err(ServerError::invalid_arg(format!("model '{name}': backend 'repeat' needs max_batch_size 0")));
        }
        let want_in = [("IN", DataType::Int32), ("DELAY", DataType::Uint32), ("WAIT", DataType::Uint32)];
        let want_out = [("OUT", DataType::Int32), ("IDX", DataType::Uint32)];
        let got_in: Vec<_> =
            config.input.iter().map(|i| (i.name.as_str(), DataType::from_config_enum(i.data_type))).collect();
        let got_out: Vec<_> =
            config.output.iter().map(|o| (o.name.as_str(), DataType::from_config_enum(o.data_type))).collect();
        let same = |got: &[(&str, Option<DataType>)], want: &[(&str, DataType)]| {
            got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g.0 == w.0 && g.1 == Some(w.1))
        };
        if !same(&got_in, &want_in) || !same(&got_out, &want_out) {
            return Err(ServerError::invalid_arg(format!(
                "model '{name}': backend 'repeat' needs inputs IN (INT32), DELAY (UINT32), WAIT (UINT32) and outputs OUT (INT32), IDX (UINT32), in that order"
            )));
        }
        Ok(RepeatModel)
    }
}

impl Model for RepeatModel {
    fn execute(&self, _inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        Err(ModelError::Failed("repeat is a decoupled model: its responses are only streamed".into()))
    }

    fn execute_decoupled(&self, inputs: &[Tensor]) -> Result<Responses, ModelError> {
        let (values, delays, wait) = (&inputs[0], &inputs[1], &inputs[2]);
        if values.shape != delays.shape {
            let why = format!("expected IN and DELAY shape to match, got {:?} and {:?}", values.shape, delays.shape);
            return Err(ModelError::BadInput(why));
        }
        let total_ms: u64 = delays.to_u32().iter().chain(&wait.to_u32()).map(|&d| u64::from(d)).sum();
        if total_ms > MAX_SCHEDULE_MS {
            return Err(ModelError::BadInput(format!(
                "DELAY and WAIT add up to {total_ms} ms, more than the {MAX_SCHEDULE_MS} ms one request may take"
            )));
        }
        let ms = |v: u32| Duration::from_millis(v.into());
        let responses = values
            .to_i32()
            .into_iter()
            .zip(delays.to_u32())
            .enumerate()
            .map(|(i, (v, d))| TimedResponse {
                after: ms(d),
                outputs: vec![Tensor::from_i32(vec![1], &[v]), Tensor::from_u32(vec![1], &[i as u32])],
            })
            .collect();
        let final_after = ms(wait.to_u32().first().copied().unwrap_or(0));
        Ok(Responses { responses, final_after })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;
    use crate::server::repository::ZOO;

    fn zoo_config() -> ModelConfig {
        let text = ZOO.iter().find(|(n, _)| *n == "repeat").unwrap().1;
        parse_pbtxt(text, "repeat").unwrap()
    }

    #[test]
    fn one_response_per_element_then_the_final_flag() {
        let m = RepeatModel::new(&zoo_config()).unwrap();
        let plan = m
            .execute_decoupled(&[
                Tensor::from_i32(vec![3], &[7, 8, 9]),
                Tensor::from_u32(vec![3], &[1, 0, 5]),
                Tensor::from_u32(vec![1], &[2]),
            ])
            .unwrap();
        let afters: Vec<_> = plan.responses.iter().map(|r| r.after.as_millis()).collect();
        assert_eq!(afters, [1, 0, 5]);
        assert_eq!(plan.responses[2].outputs[0].to_i32(), [9]);
        assert_eq!(plan.responses[2].outputs[1].to_u32(), [2]);
        assert_eq!(plan.final_after, Duration::from_millis(2));
    }

    #[test]
    fn empty_input_gets_only_the_final_flag_and_mismatch_is_refused() {
        let m = RepeatModel::new(&zoo_config()).unwrap();
        let empty = Tensor::from_i32(vec![0], &[]);
        let plan = m
            .execute_decoupled(&[empty.clone(), Tensor::from_u32(vec![0], &[]), Tensor::from_u32(vec![1], &[0])])
            .unwrap();
        assert!(plan.responses.is_empty());
        let e = m
            .execute_decoupled(&[empty, Tensor::from_u32(vec![1], &[1]), Tensor::from_u32(vec![1], &[0])])
            .unwrap_err();
        assert!(e.to_string().contains("IN and DELAY shape"), "{e}");
        let one = Tensor::from_i32(vec![1], &[1]);
        let e = m
            .execute_decoupled(&[one, Tensor::from_u32(vec![1], &[59_000]), Tensor::from_u32(vec![1], &[2_000])])
            .unwrap_err();
        assert!(e.to_string().contains("61000 ms"), "{e}");
    }

    #[test]
    fn needs_a_decoupled_config() {
        let mut config = zoo_config();
        config.model_transaction_policy.as_mut().unwrap().decoupled = false;
        assert!(RepeatModel::new(&config).is_err());
    }
}
