//! Element-wise arithmetic, so a client's `validation_data` can be right or wrong:
//! - `add_sub` (Triton's `simple`): OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1;
//! - `add_optional`: OUTPUT0 = INPUT0 + INPUT1 when the request carries the optional INPUT1, else
//!   INPUT0 (a left-out optional input reaches the model as an empty tensor).
//!
//! INT32 (wrapping, as Triton's example does) or FP32; both inputs of one dtype and shape.

use super::{Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::error::{ServerError, ServerResult};
use crate::tensor::{DataType, Tensor};

fn check(config: &ModelConfig, inputs: usize, outputs: usize) -> ServerResult<DataType> {
    let name = &config.name;
    if config.input.len() != inputs || config.output.len() != outputs {
        return Err(ServerError::invalid_arg(format!(
            "model '{name}': backend '{}' needs {inputs} inputs and {outputs} outputs",
            config.backend
        )));
    }
    let dtype = DataType::from_config_enum(config.input[0].data_type).expect("config validated at load");
    let all = config.input.iter().map(|i| i.data_type).chain(config.output.iter().map(|o| o.data_type));
    if !matches!(dtype, DataType::Int32 | DataType::Fp32) || all.into_iter().any(|d| d != config.input[0].data_type) {
        return Err(ServerError::invalid_arg(format!(
            "model '{name}': backend '{}' needs every tensor INT32 or every tensor FP32",
            config.backend
        )));
    }
    Ok(dtype)
}

/// `a + sign * b`, element-wise, in the tensors' dtype; `a`'s shape.
fn combine(a: &Tensor, b: &Tensor, sign: i32) -> Result<Tensor, ModelError> {
    if a.data.len() != b.data.len() {
        return Err(ModelError::BadInput(format!("input shapes {:?} and {:?} differ", a.shape, b.shape)));
    }
    Ok(match a.dtype {
        DataType::Int32 => {
            let v: Vec<i32> =
                a.to_i32().iter().zip(b.to_i32()).map(|(x, y)| x.wrapping_add(y.wrapping_mul(sign))).collect();
            Tensor::from_i32(a.shape.clone(), &v)
        }
        _ => {
            let v: Vec<f32> = a.to_f32().iter().zip(b.to_f32()).map(|(x, y)| x + y * sign as f32).collect();
            Tensor::from_f32(a.shape.clone(), &v)
        }
    })
}

pub struct AddSubModel;

impl AddSubModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        check(config, 2, 2)?;
        Ok(AddSubModel)
    }
}

impl Model for AddSubModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        Ok(vec![combine(&inputs[0], &inputs[1], 1)?, combine(&inputs[0], &inputs[1], -1)?])
    }
}

pub struct AddOptionalModel;

impl AddOptionalModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        check(config, 2, 1)?;
        if config.input[0].optional || !config.input[1].optional {
            return Err(ServerError::invalid_arg(format!(
                "model '{}': backend 'add_optional' needs a required first input and an optional second",
                config.name
            )));
        }
        Ok(AddOptionalModel)
    }
}

impl Model for AddOptionalModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        let (a, b) = (&inputs[0], &inputs[1]);
        if b.data.is_empty() {
            return Ok(vec![a.clone()]);
        }
        Ok(vec![combine(a, b, 1)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;

    #[test]
    fn add_sub_wraps_int32() {
        let config = parse_pbtxt(
            r#"backend: "add_sub" max_batch_size: 8
               input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 2 ] } ]
               output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 2 ] } ]"#,
            "a",
        )
        .unwrap();
        let m = AddSubModel::new(&config).unwrap();
        let out =
            m.execute(&[Tensor::from_i32(vec![1, 2], &[i32::MAX, 5]), Tensor::from_i32(vec![1, 2], &[1, 7])]).unwrap();
        assert_eq!(out[0].to_i32(), [i32::MIN, 12]);
        assert_eq!(out[1].to_i32(), [i32::MAX - 1, -2]);
    }

    #[test]
    fn add_optional_without_the_optional_input_is_identity() {
        let config = parse_pbtxt(
            r#"backend: "add_optional" max_batch_size: 8
               input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "B" data_type: TYPE_FP32 dims: [ -1 ] optional: true } ]
               output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]"#,
            "o",
        )
        .unwrap();
        let m = AddOptionalModel::new(&config).unwrap();
        let a = Tensor::from_f32(vec![1, 2], &[1.0, 2.0]);
        let absent = Tensor::from_f32(vec![1, 0], &[]);
        assert_eq!(m.execute(&[a.clone(), absent]).unwrap()[0], a);
        let b = Tensor::from_f32(vec![1, 2], &[0.5, 0.5]);
        assert_eq!(m.execute(&[a, b]).unwrap()[0].to_f32(), [1.5, 2.5]);
    }
}
