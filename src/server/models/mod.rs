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

    /// True when `execute` takes a few µs at most and never blocks, so an idle instance may run
    /// a lone request on the thread that received it instead of waking its instance thread.
    /// Heavy or sleeping models keep the default: they must not stall the network threads.
    fn runs_inline(&self) -> bool {
        false
    }
}

/// The bundled model kinds; a config names one in its `backend` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    Identity,
    Delay,
    Bert,
    WideDeep,
    Dlrm,
}

impl ModelKind {
    pub const ALL: [ModelKind; 5] =
        [ModelKind::Identity, ModelKind::Delay, ModelKind::Bert, ModelKind::WideDeep, ModelKind::Dlrm];

    /// The `backend` string of the config.
    pub fn backend(self) -> &'static str {
        match self {
            ModelKind::Identity => "identity",
            ModelKind::Delay => "delay",
            ModelKind::Bert => "bert",
            ModelKind::WideDeep => "wide_deep",
            ModelKind::Dlrm => "dlrm",
        }
    }

    pub fn of(config: &ModelConfig) -> ServerResult<ModelKind> {
        ModelKind::ALL.into_iter().find(|k| k.backend() == config.backend).ok_or_else(|| {
            let known: Vec<&str> = ModelKind::ALL.iter().map(|k| k.backend()).collect();
            ServerError::invalid(format!(
                "model '{}': unknown backend '{}' (bundled kinds: {})",
                config.name,
                config.backend,
                known.join(", ")
            ))
        })
    }
}

/// Builds the model of the kind the config's `backend` names.
pub fn build(config: &ModelConfig) -> ServerResult<Arc<dyn Model>> {
    let model: Arc<dyn Model> = match ModelKind::of(config)? {
        ModelKind::Identity => Arc::new(IdentityModel::new(config)?),
        ModelKind::Delay => Arc::new(DelayModel::new(config)?),
        ModelKind::Bert => Arc::new(BertModel::new(config)?),
        ModelKind::WideDeep => Arc::new(WideDeepModel::new(config)?),
        ModelKind::Dlrm => Arc::new(DlrmModel::new(config)?),
    };
    Ok(model)
}

/// Reads a numeric model parameter (`parameters { key: .. value { string_value: .. } }`).
pub(crate) fn param<T: std::str::FromStr>(config: &ModelConfig, key: &str, default: T) -> ServerResult<T> {
    config::parameter_or(config, key, default)
}
