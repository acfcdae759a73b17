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
        // `Bytes` clones share the buffer: the output is the input, with no copy.
        Ok(inputs[..self.0.min(inputs.len())].to_vec())
    }

    fn runs_inline(&self) -> bool {
        true
    }
}
