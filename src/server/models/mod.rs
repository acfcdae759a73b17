//! The bundled models, behind one interface. The batcher hands a model the gathered inputs of a
//! whole batch and gets the batch's outputs back; the model never sees requests or protocols.

use std::sync::Arc;

use super::config;
use super::error::{ServerError, ServerResult};
use crate::proto::inference::ModelConfig;
use crate::tensor::Tensor;

mod bert;
mod delay;
mod dlrm;
mod identity;
mod nn;
mod signature;
mod wide_deep;

pub use bert::BertModel;
pub use delay::DelayModel;
pub use dlrm::DlrmModel;
pub use identity::IdentityModel;
pub use wide_deep::WideDeepModel;

/// A loaded model instance's compute. One value is shared by all instances of the model, so
/// `execute` takes `&self` and runs concurrently.
pub trait Model: Send + Sync {
    /// Runs one batch. `inputs` follow the config's input order; each carries the batch
    /// dimension first when the model batches. Returns outputs in the config's output order.
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, String>;
}

/// Builds the model named by the config's `backend`.
pub fn build(config: &ModelConfig) -> ServerResult<Arc<dyn Model>> {
    let model: Arc<dyn Model> = match config.backend.as_str() {
        "identity" => Arc::new(IdentityModel::new(config)?),
        "delay" => Arc::new(DelayModel::new(config)?),
        "bert" => Arc::new(BertModel::new(config)?),
        "wide_deep" => Arc::new(WideDeepModel::new(config)?),
        "dlrm" => Arc::new(DlrmModel::new(config)?),
        other => {
            return Err(ServerError::invalid(format!(
                "model '{}': unknown backend '{other}' (bundled kinds: identity, delay, bert, wide_deep, dlrm)",
                config.name
            )))
        }
    };
    Ok(model)
}

/// Reads a numeric model parameter (`parameters { key: .. value { string_value: .. } }`).
pub(crate) fn param<T: std::str::FromStr>(config: &ModelConfig, key: &str, default: T) -> ServerResult<T> {
    config::parameter_or(config, key, default)
}
