//! `identity`: each output is the input of the same position, bytes and shape unchanged.
//! Any dtype and any shape the config allows.

use super::{Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::error::{ServerError, ServerResult};
use crate::tensor::Tensor;

/// Holds its output count: a sequence model's control inputs follow the config's inputs.
pub struct IdentityModel(usize);

impl IdentityModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        if config.input.len() != config.output.len() {
            return Err(ServerError::invalid_arg(format!(
                "model '{}': identity needs as many outputs as inputs",
                config.name
            )));
        }
        for (i, o) in config.input.iter().zip(&config.output) {
            if i.data_type != o.data_type {
                return Err(ServerError::invalid_arg(format!(
                    "model '{}': identity output '{}' must have the dtype of input '{}'",
                    config.name, o.name, i.name
                )));
            }
        }
        Ok(IdentityModel(config.output.len()))
    }
}

impl Model for IdentityModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        self.execute_owned(inputs.to_vec())
    }

    /// The outputs are the inputs themselves: same vector, shapes and buffers, nothing copied.
    fn execute_owned(&self, mut inputs: Vec<Tensor>) -> Result<Vec<Tensor>, ModelError> {
        inputs.truncate(self.0);
        Ok(inputs)
    }

    fn runs_inline(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_the_inputs_buffers_and_extra_inputs_are_dropped() {
        let config = crate::server::config::parse_pbtxt(
            r#"backend: "identity" max_batch_size: 4
               input [ { name: "I" data_type: TYPE_FP32 dims: [ 2 ] } ]
               output [ { name: "O" data_type: TYPE_FP32 dims: [ 2 ] } ]"#,
            "id",
        )
        .unwrap();
        let model = IdentityModel::new(&config).unwrap();
        // A sequence model's control input follows the config's inputs: not an output.
        let inputs = vec![Tensor::from_f32(vec![1, 2], &[1.0, 2.0]), Tensor::from_i32(vec![1, 1], &[1])];
        let buffer = inputs[0].data.as_ptr();
        let borrowed = model.execute(&inputs).unwrap();
        let owned = model.execute_owned(inputs).unwrap();
        assert_eq!(borrowed, owned);
        assert_eq!(owned.len(), 1);
        assert_eq!((owned[0].shape.as_slice(), owned[0].to_f32()), (&[1i64, 2][..], vec![1.0, 2.0]));
        assert_eq!(owned[0].data.as_ptr(), buffer, "no copy");
    }
}
