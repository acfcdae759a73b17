//! The bundled models, behind one interface. The batcher hands a model the gathered inputs of a
//! whole batch and gets the batch's outputs back; the model never sees requests or protocols.

use std::sync::Arc;
use std::time::Duration;

use super::config;
use super::error::{ServerError, ServerResult};
use crate::proto::inference::ModelConfig;
use crate::tensor::Tensor;

mod accumulate;
mod arith;
mod bert;
mod delay;
mod dlrm;
mod embedding;
mod identity;
mod nn;
mod repeat;
mod signature;
mod wide_deep;

pub use accumulate::AccumulateModel;
pub use arith::{AddOptionalModel, AddSubModel};
pub use bert::BertModel;
pub use delay::DelayModel;
pub use dlrm::{DlrmDenseModel, DlrmModel};
pub use embedding::EmbeddingLookupModel;
pub use identity::IdentityModel;
pub use repeat::RepeatModel;
pub use wide_deep::WideDeepModel;

/// What a decoupled model answers to one request: zero or more responses, each sent `after` the
/// one before it, then the final flag `final_after` the last response.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Responses {
    pub responses: Vec<TimedResponse>,
    pub final_after: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TimedResponse {
    pub after: Duration,
    /// Outputs in the config's output order.
    pub outputs: Vec<Tensor>,
}

/// Why a model could not compute a batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The request's data is not something this model computes on (an id out of range, a shape
    /// it cannot take): the client's mistake, answered as INVALID_ARG.
    #[error("{0}")]
    BadInput(String),
    /// The model failed on data it accepts: answered as INTERNAL.
    #[error("{0}")]
    Failed(String),
}

impl From<signature::InputError> for ModelError {
    fn from(e: signature::InputError) -> Self {
        ModelError::BadInput(e.to_string())
    }
}

impl From<nn::NnError> for ModelError {
    fn from(e: nn::NnError) -> Self {
        ModelError::BadInput(e.to_string())
    }
}

/// A loaded model instance's compute. One value is shared by all instances of the model, so
/// `execute` takes `&self` and runs concurrently.
pub trait Model: Send + Sync {
    /// Runs one batch. `inputs` follow the config's input order; each carries the batch
    /// dimension first when the model batches. Returns outputs in the config's output order.
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError>;

    /// [`execute`](Self::execute) on inputs the batcher gives away. A model whose outputs can
    /// reuse its inputs' buffers overrides it; the batcher always calls this one.
    fn execute_owned(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, ModelError> {
        self.execute(&inputs)
    }

    /// True when `execute` takes a few µs at most and never blocks, so an idle instance may run
    /// a lone request on the thread that received it instead of waking its instance thread.
    /// Heavy or sleeping models keep the default: they must not stall the network threads.
    fn runs_inline(&self) -> bool {
        false
    }

    /// Runs one request of a decoupled model (`model_transaction_policy { decoupled: true }`).
    /// The schedule is computed here and played out by the front end, so a model that answers
    /// late holds no instance thread while it waits. The default answers once, at once.
    fn execute_decoupled(&self, inputs: &[Tensor]) -> Result<Responses, ModelError> {
        let outputs = self.execute(inputs)?;
        Ok(Responses { responses: vec![TimedResponse { after: Duration::ZERO, outputs }], final_after: Duration::ZERO })
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
    DlrmDense,
    EmbeddingLookup,
    AddSub,
    AddOptional,
    Repeat,
    Accumulate,
}

impl ModelKind {
    pub const ALL: [ModelKind; 11] = [
        ModelKind::Identity,
        ModelKind::Delay,
        ModelKind::Bert,
        ModelKind::WideDeep,
        ModelKind::Dlrm,
        ModelKind::DlrmDense,
        ModelKind::EmbeddingLookup,
        ModelKind::AddSub,
        ModelKind::AddOptional,
        ModelKind::Repeat,
        ModelKind::Accumulate,
    ];

    /// The `backend` string of the config.
    pub fn backend(self) -> &'static str {
        match self {
            ModelKind::Identity => "identity",
            ModelKind::Delay => "delay",
            ModelKind::Bert => "bert",
            ModelKind::WideDeep => "wide_deep",
            ModelKind::Dlrm => "dlrm",
            ModelKind::DlrmDense => "dlrm_dense",
            ModelKind::EmbeddingLookup => "embedding_lookup",
            ModelKind::AddSub => "add_sub",
            ModelKind::AddOptional => "add_optional",
            ModelKind::Repeat => "repeat",
            ModelKind::Accumulate => "accumulate",
        }
    }

    pub fn of(config: &ModelConfig) -> ServerResult<ModelKind> {
        ModelKind::ALL.into_iter().find(|k| k.backend() == config.backend).ok_or_else(|| {
            let known: Vec<&str> = ModelKind::ALL.iter().map(|k| k.backend()).collect();
            ServerError::invalid_arg(format!(
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
        ModelKind::DlrmDense => Arc::new(DlrmDenseModel::new(config)?),
        ModelKind::EmbeddingLookup => Arc::new(EmbeddingLookupModel::new(config)?),
        ModelKind::AddSub => Arc::new(AddSubModel::new(config)?),
        ModelKind::AddOptional => Arc::new(AddOptionalModel::new(config)?),
        ModelKind::Repeat => Arc::new(RepeatModel::new(config)?),
        ModelKind::Accumulate => Arc::new(AccumulateModel::new(config)?),
    };
    Ok(model)
}

/// Most floats a model may hold in weights, or in one execution's activations. A config (a
/// file, or the repository API's `config` parameter) cannot make the server allocate more.
pub const MAX_MODEL_FLOATS: usize = 1 << 28;

/// Checks a float count computed with checked arithmetic (`None`: it overflowed).
pub(crate) fn check_floats(config: &ModelConfig, what: &str, floats: Option<usize>) -> ServerResult<()> {
    match floats {
        Some(n) if n <= MAX_MODEL_FLOATS => Ok(()),
        _ => Err(ServerError::invalid_arg(format!(
            "model '{}': {what} would take more than {MAX_MODEL_FLOATS} floats; use smaller sizes",
            config.name
        ))),
    }
}

/// Weights and biases of an MLP with these layer sizes; `None` on overflow.
pub(crate) fn mlp_floats(sizes: &[usize]) -> Option<usize> {
    sizes.windows(2).try_fold(0usize, |acc, w| acc.checked_add(w[0].checked_mul(w[1])?.checked_add(w[1])?))
}

/// The sum of counts that may each have overflowed.
pub(crate) fn sum_floats(counts: &[Option<usize>]) -> Option<usize> {
    counts.iter().try_fold(0usize, |acc, n| acc.checked_add((*n)?))
}

/// Reads a numeric model parameter (`parameters { key: .. value { string_value: .. } }`).
pub(crate) fn param<T: std::str::FromStr>(config: &ModelConfig, key: &str, default: T) -> ServerResult<T> {
    config::parameter_or(config, key, default)
}
