//! One execution of a batch, shared by the dynamic batcher (`scheduler.rs`) and the sequence
//! batcher (`sequence.rs`): a queued request, the state a model's instances share, and running a
//! batch through the model with its stage times and statistics.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;
use tokio::sync::oneshot;

use super::batch_policy::BatchPolicy;
use super::error::{ServerError, ServerResult};
use super::infer::{
    AdmittedRequest, Answer, DecoupledResponses, InferResponse, InputBytes, OutputTensor, MODEL_VERSION,
};
use super::models::{Model, ModelError};
use super::stats::{ComputeTimes, ModelStats};
use crate::proto::inference::ModelConfig;
use crate::tensor::{DataType, Tensor};

pub(super) struct Pending {
    pub(super) request: AdmittedRequest,
    pub(super) enqueued: Instant,
    /// `None` for a request executed inline: its caller takes the result directly.
    pub(super) reply: Option<oneshot::Sender<ServerResult<Answer>>>,
    /// An empty slot of a sequence batch (`sequence::`): executed, never answered or counted.
    pub(super) filler: bool,
}

#[derive(Default)]
pub(super) struct Queue {
    pub(super) items: VecDeque<Pending>,
    pub(super) stopped: bool,
    /// Instances not executing: each execution, on an instance thread or inline, holds one, so
    /// no more batches run at once than the model has instances.
    pub(super) idle: usize,
}

pub(super) struct Shared {
    pub(super) name: String,
    pub(super) config: ModelConfig,
    pub(super) policy: BatchPolicy,
    /// `model_transaction_policy { decoupled: true }`: answers only over a stream.
    pub(super) decoupled: bool,
    pub(super) model: Arc<dyn Model>,
    /// The model allows inline execution (`Model::runs_inline`).
    pub(super) inline: bool,
    pub(super) stats: Arc<ModelStats>,
    pub(super) queue: Mutex<Queue>,
    pub(super) wake: Condvar,
}

impl Shared {
    /// Returns an instance taken by an execution, and wakes an instance thread for requests that
    /// queued meanwhile.
    pub(super) fn release_instance(&self) {
        let mut q = self.queue.lock();
        q.idle += 1;
        let waiting = !q.items.is_empty();
        drop(q);
        if waiting {
            self.wake.notify_one();
        }
    }
}

/// Each request's answer, in batch order. Most batches hold one request (always so when the
/// model does not batch), which needs no allocation.
pub(super) type Answers = SmallVec<[ServerResult<Answer>; 1]>;

/// Runs one batch and records its statistics; returns each request's answer, in order. The
/// requests' input tensors and the model's outputs are moved into the answers where they can be,
/// so the batch's requests are spent.
pub(super) fn execute(shared: &Shared, batch: &mut [Pending], dequeued: Instant) -> Answers {
    execute_batch(shared, batch, dequeued, &|| vec![])
}

/// [`execute`] with extra model inputs after the config's (a sequence batch's control tensors),
/// built during compute_input. Fillers are executed but neither answered nor counted.
pub(super) fn execute_batch(
    shared: &Shared,
    batch: &mut [Pending],
    dequeued: Instant,
    extra_inputs: &dyn Fn() -> Vec<Tensor>,
) -> Answers {
    if shared.decoupled {
        // One request per execution: a filler has nothing to answer.
        return batch
            .iter_mut()
            .map(|p| match p.filler {
                true => Err(ServerError::internal("an empty sequence slot has no answer")),
                false => execute_decoupled(shared, p, dequeued),
            })
            .collect();
    }
    let total: usize = batch.iter().map(|p| p.request.batch_size).sum();
    let batching = shared.policy.max_batch_size > 0;

    let t_input = Instant::now();
    let gathered = gather_inputs(&shared.config, batch, total, batching).map(|mut inputs| {
        inputs.extend(extra_inputs());
        inputs
    });
    let t_infer = Instant::now();
    let outputs = gathered.and_then(|inputs| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| shared.model.execute_owned(inputs))) {
            Ok(Ok(outputs)) => check_output_count(shared, outputs),
            Ok(Err(e)) => Err(model_error(shared, e)),
            Err(_) => Err(ServerError::internal(format!("model '{}' panicked during execution", shared.name))),
        }
    });
    let t_output = Instant::now();

    let mut outputs = match outputs {
        Ok(outputs) => outputs,
        Err(e) => {
            let done = Instant::now();
            for p in batch.iter().filter(|p| !p.filler) {
                shared.stats.record_failure(done - p.request.received);
            }
            return batch.iter().map(|_| Err(e.clone())).collect();
        }
    };

    let mut offset = 0;
    let sole = batch.len() == 1;
    let results: Answers = batch
        .iter_mut()
        .map(|p| {
            let n = p.request.batch_size;
            let part = match (batching && total > 1, sole) {
                (true, _) => Part::Items { offset, n, total },
                (false, true) => Part::Sole,
                (false, false) => Part::Shared,
            };
            offset += n;
            scatter(shared, &mut p.request, &mut outputs, part).map(Answer::Single)
        })
        .collect();
    let done = Instant::now();

    let compute = ComputeTimes { input: t_infer - t_input, infer: t_output - t_infer, output: done - t_output };
    let mut succeeded = 0u64;
    for (p, response) in batch.iter().zip(&results).filter(|(p, _)| !p.filler) {
        let request_time = done - p.request.received;
        match response {
            Ok(_) => {
                succeeded += p.request.batch_size as u64;
                record_success(shared, &p.request, request_time, dequeued - p.enqueued, compute);
            }
            Err(_) => shared.stats.record_failure(request_time),
        }
    }
    if succeeded > 0 {
        let real: usize = batch.iter().filter(|p| !p.filler).map(|p| p.request.batch_size).sum();
        shared.stats.record_padded_execution(total as u64, real as u64, compute);
    }
    results
}

/// A request's success, in its model's statistics and, for an ensemble's step, its context's.
fn record_success(shared: &Shared, request: &AdmittedRequest, total: Duration, queue: Duration, compute: ComputeTimes) {
    shared.stats.record_success(total, queue, compute);
    if let Some(context) = &request.also_record {
        context.record_success(total, queue, compute);
    }
}

fn check_output_count<T>(shared: &Shared, outputs: Vec<T>) -> ServerResult<Vec<T>> {
    if outputs.len() == shared.config.output.len() {
        return Ok(outputs);
    }
    Err(ServerError::internal(format!(
        "model '{}' returned {} outputs, expected {}",
        shared.name,
        outputs.len(),
        shared.config.output.len()
    )))
}

/// A model's error as the client sees it: bad input is the client's mistake, the rest is ours.
fn model_error(shared: &Shared, e: ModelError) -> ServerError {
    match e {
        ModelError::BadInput(message) => {
            ServerError::invalid_arg(format!("model '{}' cannot compute on the request: {message}", shared.name))
        }
        ModelError::Failed(message) => ServerError::internal(format!("model '{}' failed: {message}", shared.name)),
    }
}

/// One request of a decoupled model: its outputs are computed now, each response scattered like
/// a batch of one, and the schedule goes back to the front end.
fn execute_decoupled(shared: &Shared, p: &mut Pending, dequeued: Instant) -> ServerResult<Answer> {
    let n = p.request.batch_size;
    let batching = shared.policy.max_batch_size > 0;
    let t_input = Instant::now();
    let gathered = gather_inputs(&shared.config, std::slice::from_mut(p), n, batching);
    let t_infer = Instant::now();
    let planned = gathered.and_then(|inputs| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| shared.model.execute_decoupled(&inputs))) {
            Ok(Ok(plan)) => Ok(plan),
            Ok(Err(e)) => Err(model_error(shared, e)),
            Err(_) => Err(ServerError::internal(format!("model '{}' panicked during execution", shared.name))),
        }
    });
    let t_output = Instant::now();
    let answer = planned.and_then(|plan| {
        let mut responses = Vec::with_capacity(plan.responses.len());
        for r in plan.responses {
            let mut outputs = check_output_count(shared, r.outputs)?;
            responses.push((r.after, scatter(shared, &mut p.request, &mut outputs, Part::Shared)?));
        }
        Ok(DecoupledResponses {
            model_name: shared.name.clone(),
            model_version: MODEL_VERSION.to_string(),
            id: p.request.id.clone(),
            responses,
            final_after: plan.final_after,
        })
    });
    let done = Instant::now();
    let compute = ComputeTimes { input: t_infer - t_input, infer: t_output - t_infer, output: done - t_output };
    match &answer {
        Ok(_) => {
            record_success(shared, &p.request, done - p.request.received, dequeued - p.enqueued, compute);
            shared.stats.record_execution(n as u64, compute);
        }
        Err(_) => shared.stats.record_failure(done - p.request.received),
    }
    answer.map(Answer::Decoupled)
}

/// compute_input: one tensor per config input holding the whole batch. A lone request's inline
/// inputs are moved into the batch, not copied.
fn gather_inputs(
    config: &ModelConfig,
    batch: &mut [Pending],
    total: usize,
    batching: bool,
) -> ServerResult<Vec<Tensor>> {
    let sole = batch.len() == 1;
    let mut tensors = Vec::with_capacity(config.input.len());
    for (i, spec) in config.input.iter().enumerate() {
        let dtype = DataType::from_config_enum(spec.data_type).expect("config validated at load");
        let first = &mut batch[0].request.inputs[i];
        let mut shape = if sole { std::mem::take(&mut first.shape) } else { first.shape.clone() };
        if batching {
            shape[0] = total as i64;
        }
        let data = match (&mut first.bytes, sole) {
            (InputBytes::Raw(b), true) => std::mem::take(b),
            _ => {
                let mut buf = Vec::with_capacity(batch.iter().map(|p| p.request.inputs[i].bytes.len()).sum());
                for p in batch.iter() {
                    p.request.inputs[i].bytes.gather_into(&mut buf)?;
                }
                Bytes::from(buf)
            }
        };
        tensors.push(Tensor { dtype, shape, data });
    }
    Ok(tensors)
}

/// Which part of a batch's outputs one response takes.
#[derive(Clone, Copy)]
enum Part {
    /// `n` items from `offset`, of a batch of `total` items.
    Items { offset: usize, n: usize, total: usize },
    /// All of it, for the batch's only response: moved into the response.
    Sole,
    /// All of it, shared with other responses (each of a decoupled model's): copied.
    Shared,
}

/// compute_output for one request: its part of each requested output, as bytes or into shm.
/// A response that is its request's only one takes the request's names and id; a sole response
/// also takes the outputs it is the last to name.
fn scatter(
    shared: &Shared,
    request: &mut AdmittedRequest,
    outputs: &mut [Tensor],
    part: Part,
) -> ServerResult<InferResponse> {
    let only_response = !matches!(part, Part::Shared);
    let mut result = Vec::with_capacity(request.outputs.len());
    for i in 0..request.outputs.len() {
        let config_index = request.outputs[i].config_index;
        let spec = &shared.config.output[config_index];
        let tensor = &mut outputs[config_index];
        let dtype = tensor.dtype;
        let (shape, data) = match part {
            Part::Items { offset, n, total } => {
                let per_item = tensor.data.len() / total;
                let mut shape = tensor.shape.clone();
                if let Some(first) = shape.first_mut() {
                    *first = n as i64;
                }
                (shape, tensor.data.slice(offset * per_item..(offset + n) * per_item))
            }
            // The last plan to name this output takes it; an earlier one copies.
            Part::Sole if request.outputs[i + 1..].iter().all(|p| p.config_index != config_index) => {
                (std::mem::take(&mut tensor.shape), std::mem::take(&mut tensor.data))
            }
            Part::Sole | Part::Shared => (tensor.shape.clone(), tensor.data.clone()),
        };
        let plan = &mut request.outputs[i];
        let data = plan.place(&spec.name, data)?;
        let name = only_response.then(|| plan.name.take()).flatten().unwrap_or_else(|| spec.name.clone());
        result.push(OutputTensor { name, datatype: dtype, shape, data });
    }
    let (model_name, id) = match only_response {
        true => (std::mem::take(&mut request.model_name), std::mem::take(&mut request.id)),
        false => (shared.name.clone(), request.id.clone()),
    };
    Ok(InferResponse { model_name, model_version: MODEL_VERSION.to_string(), id, outputs: result })
}
