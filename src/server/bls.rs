//! BLS models (`backend: "bls"`): business logic that calls another model for every request, as
//! a Triton python model does with `pb_utils.InferenceRequest(...).exec()`. The parameter
//! `bls_model` names the called model; inputs and outputs pass to it by name. Like a python model
//! without `dynamic_batching`, each request executes alone, at most `instance_group` count of them
//! at once; the others wait, and that wait is their queue time. Statistics are those of a model
//! that executes: the BLS model's compute infer is the whole call, and the called model keeps its
//! own entry, which perf_analyzer's `--bls-composing-models` reports.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;

use super::config;
use super::ensemble::Ensemble;
use super::error::{ServerError, ServerResult};
use super::infer::{AdmittedRequest, InferRequest, InferResponse};
use super::stats::{ComputeTimes, ModelStats};
use crate::proto::inference::ModelConfig;

/// The `backend` of a BLS config.
pub const BACKEND: &str = "bls";
/// The parameter naming the model a BLS model calls.
pub const CALLED_MODEL: &str = "bls_model";

/// Whether a config describes a BLS model.
pub fn is_bls(config: &ModelConfig) -> bool {
    config.backend == BACKEND
}

/// A BLS model: the call it makes, as a one-step graph, and its instances.
pub struct Bls {
    call: Ensemble,
    /// One permit per instance: an execution holds one for the whole call.
    instances: Semaphore,
    /// Requests waiting for an instance (for `nv_inference_pending_request_count`).
    waiting: AtomicUsize,
}

impl Bls {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        match config::parameter(config, CALLED_MODEL) {
            Some(called) if !called.is_empty() && called != config.name => Ok(Bls {
                call: Ensemble::forwarding(config, called),
                instances: Semaphore::new(config::instance_count(config).max(1)),
                waiting: AtomicUsize::new(0),
            }),
            _ => Err(ServerError::invalid_arg(format!(
                "BLS model '{}': parameter '{CALLED_MODEL}' must name another model",
                config.name
            ))),
        }
    }

    /// The call, for the repository's checks of the called model.
    pub fn graph(&self) -> &Ensemble {
        &self.call
    }

    /// Requests waiting for an instance.
    pub fn pending(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Answers one request by calling the model once an instance is free; `call` runs it on that
    /// model's scheduler.
    pub async fn run<F, Fut>(
        &self,
        request: AdmittedRequest,
        stats: &ModelStats,
        call: F,
    ) -> ServerResult<InferResponse>
    where
        F: Fn(InferRequest, Arc<ModelStats>) -> Fut,
        Fut: Future<Output = ServerResult<InferResponse>>,
    {
        let received = request.received;
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let instance = self.instances.acquire().await;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        let _instance = instance.expect("the semaphore is never closed");
        let started = Instant::now();
        let result = self.call.execute(&request, &Arc::new(ModelStats::default()), call).await;
        let done = Instant::now();
        match &result {
            Ok(_) => {
                let compute = ComputeTimes { infer: done - started, ..Default::default() };
                stats.record_success(done - received, started - received, compute);
                stats.record_execution(request.batch_size as u64, compute);
            }
            Err(_) => stats.record_failure(done - received),
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;

    fn bls(parameters: &str) -> ServerResult<Bls> {
        let text = format!(
            r#"backend: "bls" max_batch_size: 8
               input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
               output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
               {parameters}"#
        );
        Bls::new(&parse_pbtxt(&text, "b").unwrap())
    }

    #[test]
    fn the_called_model_is_its_one_composing_model() {
        let b = bls(r#"parameters { key: "bls_model" value { string_value: "identity" } }"#).unwrap();
        assert_eq!(b.graph().composing_models(), vec!["identity"]);
        assert_eq!(b.graph().label(), "BLS model 'b'");
    }

    #[test]
    fn a_missing_or_self_called_model_is_refused() {
        for parameters in ["", r#"parameters { key: "bls_model" value { string_value: "b" } }"#] {
            let err = bls(parameters).err().expect("refused");
            assert!(err.message.contains("parameter 'bls_model' must name another model"), "{}", err.message);
        }
    }
}
