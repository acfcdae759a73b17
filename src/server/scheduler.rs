//! The dynamic batcher: one queue per model and one thread per model instance.
//!
//! An instance takes the longest compatible run of requests at the head of the queue (same
//! per-item shapes, at most `max_batch_size` items). It executes at once when that run reaches a
//! preferred size or can grow no further; otherwise it waits until the oldest request has queued
//! for `max_queue_delay_microseconds`, then sends the largest preferred prefix, or all of it.
//! Stage times are taken here, where the work happens, with monotonic clocks:
//! queue = enqueue → dequeue; compute_input = gathering inputs into the batch buffers;
//! compute_infer = `Model::execute`; compute_output = scattering outputs into responses or regions.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use super::error::{ServerError, ServerResult};
use super::infer::{AdmittedRequest, InferResponse, InputBytes, OutputData, OutputTensor};
use super::models::{Model, ModelError};
use super::stats::{ComputeTimes, ModelStats};
use crate::proto::inference::{model_config::SchedulingChoice, ModelConfig};
use crate::tensor::{DataType, Tensor};

/// The longest `max_queue_delay_microseconds` honoured (an hour); longer values wait this long.
const MAX_QUEUE_DELAY: Duration = Duration::from_secs(3600);

/// How requests are grouped into executions.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchPolicy {
    /// 0: the model has no batch dimension, every request runs alone.
    pub max_batch_size: usize,
    /// Without `dynamic_batching` in the config every request runs alone too.
    pub dynamic: bool,
    pub preferred: Vec<usize>,
    pub max_queue_delay: Duration,
}

impl BatchPolicy {
    pub fn from_config(config: &ModelConfig) -> Self {
        let dynamic = match &config.scheduling_choice {
            Some(SchedulingChoice::DynamicBatching(d)) => Some(d),
            _ => None,
        };
        BatchPolicy {
            max_batch_size: config.max_batch_size.max(0) as usize,
            dynamic: dynamic.is_some() && config.max_batch_size > 0,
            preferred: dynamic
                .map(|d| d.preferred_batch_size.iter().filter(|&&p| p > 0).map(|&p| p as usize).collect())
                .unwrap_or_default(),
            // Capped, so that `oldest + delay` cannot overflow an Instant.
            max_queue_delay: Duration::from_micros(dynamic.map_or(0, |d| d.max_queue_delay_microseconds))
                .min(MAX_QUEUE_DELAY),
        }
    }
}

/// What an idle instance should do with the queue as it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take this many requests from the head of the queue.
    Execute(usize),
    /// Nothing is ready: wait for a new request or until this instant.
    WaitUntil(Instant),
}

/// The batching decision, a pure function of the queue's head. `sizes` are the batch sizes of
/// the compatible run at the head (non-empty); `can_grow` says whether a later arrival could
/// still join it.
pub fn decide(policy: &BatchPolicy, sizes: &[usize], can_grow: bool, oldest: Instant, now: Instant) -> Decision {
    if !policy.dynamic {
        return Decision::Execute(1);
    }
    let total: usize = sizes.iter().sum();
    if !can_grow || policy.preferred.contains(&total) {
        return Decision::Execute(sizes.len());
    }
    let deadline = oldest + policy.max_queue_delay;
    if now < deadline {
        return Decision::WaitUntil(deadline);
    }
    let mut cumulative = 0;
    let mut best = sizes.len();
    for (i, s) in sizes.iter().enumerate() {
        cumulative += s;
        if policy.preferred.contains(&cumulative) {
            best = i + 1;
        }
    }
    Decision::Execute(best)
}

struct Pending {
    request: AdmittedRequest,
    enqueued: Instant,
    reply: oneshot::Sender<ServerResult<InferResponse>>,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Pending>,
    stopped: bool,
}

struct Shared {
    name: String,
    config: ModelConfig,
    policy: BatchPolicy,
    model: Arc<dyn Model>,
    stats: Arc<ModelStats>,
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// A model's scheduler. Dropping it stops the instances; queued requests get an error.
pub struct Scheduler {
    shared: Arc<Shared>,
    instances: Vec<std::thread::JoinHandle<()>>,
}

impl Scheduler {
    pub fn start(config: ModelConfig, model: Arc<dyn Model>, stats: Arc<ModelStats>, instances: usize) -> Self {
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            policy: BatchPolicy::from_config(&config),
            config,
            model,
            stats,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        });
        let instances = (0..instances.max(1))
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("{}-{i}", shared.name))
                    .spawn(move || instance_loop(&shared))
                    .expect("spawn model instance thread")
            })
            .collect();
        Scheduler { shared, instances }
    }

    /// Queues an admitted request and waits for its response.
    pub async fn infer(&self, request: AdmittedRequest) -> ServerResult<InferResponse> {
        let (reply, rx) = oneshot::channel();
        {
            let mut q = self.shared.queue.lock();
            if q.stopped {
                return Err(ServerError::unavailable(format!("model '{}' is unloading", self.shared.name)));
            }
            q.items.push_back(Pending { request, enqueued: Instant::now(), reply });
        }
        self.shared.wake.notify_one();
        rx.await.map_err(|_| ServerError::unavailable(format!("model '{}' was unloaded", self.shared.name)))?
    }

    /// Requests waiting for an instance (for `nv_inference_pending_request_count`).
    pub fn pending(&self) -> usize {
        self.shared.queue.lock().items.len()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shared.queue.lock().stopped = true;
        self.shared.wake.notify_all();
        for handle in self.instances.drain(..) {
            let _ = handle.join();
        }
    }
}

fn instance_loop(shared: &Shared) {
    loop {
        let (batch, dequeued) = {
            let mut q = shared.queue.lock();
            loop {
                if q.stopped {
                    for p in q.items.drain(..) {
                        let _ = p
                            .reply
                            .send(Err(ServerError::unavailable(format!("model '{}' is unloading", shared.name))));
                    }
                    return;
                }
                let Some(head) = q.items.front() else {
                    shared.wake.wait(&mut q);
                    continue;
                };
                let key = head.request.batch_key();
                let oldest = head.enqueued;
                let limit = shared.policy.max_batch_size.max(1);
                let mut sizes = Vec::new();
                let mut total = 0;
                let mut blocked = false;
                for p in q.items.iter() {
                    let n = p.request.batch_size;
                    if total + n > limit
                        || p.request.batch_key() != key
                        || !sizes.is_empty() && !mergeable(&shared.config)
                    {
                        blocked = true;
                        break;
                    }
                    total += n;
                    sizes.push(n);
                }
                let can_grow = !blocked && total < limit;
                let now = Instant::now();
                match decide(&shared.policy, &sizes, can_grow, oldest, now) {
                    Decision::Execute(n) => break (q.items.drain(..n).collect::<Vec<_>>(), now),
                    Decision::WaitUntil(deadline) => {
                        shared.wake.wait_until(&mut q, deadline);
                    }
                }
            }
        };
        // Let another idle instance look at what is left.
        shared.wake.notify_one();
        execute(shared, batch, dequeued);
    }
}

/// BYTES outputs have no fixed per-item size, so their requests are never merged.
fn mergeable(config: &ModelConfig) -> bool {
    config.output.iter().all(|o| DataType::from_config_enum(o.data_type) != Some(DataType::Bytes))
}

fn execute(shared: &Shared, batch: Vec<Pending>, dequeued: Instant) {
    let total: usize = batch.iter().map(|p| p.request.batch_size).sum();
    let batching = shared.policy.max_batch_size > 0;

    let t_input = Instant::now();
    let gathered = gather_inputs(&shared.config, &batch, total, batching);
    let t_infer = Instant::now();
    let outputs = gathered.and_then(|inputs| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| shared.model.execute(&inputs))) {
            Ok(Ok(outputs)) if outputs.len() == shared.config.output.len() => Ok(outputs),
            Ok(Ok(outputs)) => Err(ServerError::internal(format!(
                "model '{}' returned {} outputs, expected {}",
                shared.name,
                outputs.len(),
                shared.config.output.len()
            ))),
            Ok(Err(ModelError::BadInput(message))) => {
                Err(ServerError::invalid(format!("model '{}' cannot compute on the request: {message}", shared.name)))
            }
            Ok(Err(ModelError::Failed(message))) => {
                Err(ServerError::internal(format!("model '{}' failed: {message}", shared.name)))
            }
            Err(_) => Err(ServerError::internal(format!("model '{}' panicked during execution", shared.name))),
        }
    });
    let t_output = Instant::now();

    let outputs = match outputs {
        Ok(outputs) => outputs,
        Err(e) => {
            let done = Instant::now();
            for p in &batch {
                shared.stats.record_failure(done - p.request.received);
            }
            for p in batch {
                let _ = p.reply.send(Err(e.clone()));
            }
            return;
        }
    };

    let mut offset = 0;
    let replies: Vec<_> = batch
        .into_iter()
        .map(|p| {
            let n = p.request.batch_size;
            let response = scatter(shared, &p.request, &outputs, offset, n, total, batching);
            offset += n;
            (p, response)
        })
        .collect();
    let done = Instant::now();

    let compute = ComputeTimes { input: t_infer - t_input, infer: t_output - t_infer, output: done - t_output };
    let mut succeeded = 0u64;
    for (p, response) in &replies {
        let request_time = done - p.request.received;
        match response {
            Ok(_) => {
                succeeded += p.request.batch_size as u64;
                shared.stats.record_success(request_time, dequeued - p.enqueued, compute);
            }
            Err(_) => shared.stats.record_failure(request_time),
        }
    }
    if succeeded > 0 {
        shared.stats.record_execution(total as u64, compute);
    }
    // Statistics first, replies second: a client that reads statistics right after its response
    // sees its own request counted.
    for (p, response) in replies {
        let _ = p.reply.send(response);
    }
}

/// compute_input: one tensor per config input holding the whole batch.
fn gather_inputs(config: &ModelConfig, batch: &[Pending], total: usize, batching: bool) -> ServerResult<Vec<Tensor>> {
    let mut tensors = Vec::with_capacity(config.input.len());
    for (i, spec) in config.input.iter().enumerate() {
        let dtype = DataType::from_config_enum(spec.data_type).expect("config validated at load");
        let first = &batch[0].request.inputs[i];
        let mut shape = first.shape.clone();
        if batching {
            shape[0] = total as i64;
        }
        let data = match (&first.bytes, batch.len()) {
            (InputBytes::Raw(b), 1) => b.clone(),
            _ => {
                let mut buf = Vec::with_capacity(batch.iter().map(|p| p.request.inputs[i].bytes.len()).sum());
                for p in batch {
                    p.request.inputs[i].bytes.gather_into(&mut buf)?;
                }
                Bytes::from(buf)
            }
        };
        tensors.push(Tensor { dtype, shape, data });
    }
    Ok(tensors)
}

/// compute_output for one request: its slice of each requested output, as bytes or into shm.
fn scatter(
    shared: &Shared,
    request: &AdmittedRequest,
    outputs: &[Tensor],
    offset: usize,
    n: usize,
    total: usize,
    batching: bool,
) -> ServerResult<InferResponse> {
    let mut result = Vec::with_capacity(request.outputs.len());
    for plan in &request.outputs {
        let spec = &shared.config.output[plan.config_index];
        let tensor = &outputs[plan.config_index];
        let (shape, data) = if batching && total > 1 {
            let per_item = tensor.data.len() / total;
            let mut shape = tensor.shape.clone();
            if let Some(first) = shape.first_mut() {
                *first = n as i64;
            }
            (shape, tensor.data.slice(offset * per_item..(offset + n) * per_item))
        } else {
            (tensor.shape.clone(), tensor.data.clone())
        };
        let data = match &plan.shm {
            None => OutputData::Raw(data),
            Some((region, region_offset, byte_size)) => {
                if data.len() as u64 > *byte_size {
                    // The client sized the region: its mistake, as Triton reports it (INVALID_ARG).
                    return Err(ServerError::invalid(format!(
                        "shared memory size specified with the request for output '{}' ({byte_size} bytes) should be at least {} bytes to hold the results",
                        spec.name,
                        data.len()
                    )));
                }
                region.write(*region_offset, &data)?;
                OutputData::InShm
            }
        };
        result.push(OutputTensor { name: spec.name.clone(), datatype: tensor.dtype, shape, data });
    }
    Ok(InferResponse {
        model_name: shared.name.clone(),
        model_version: request.model_version.clone(),
        id: request.id.clone(),
        outputs: result,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(preferred: &[usize], delay_us: u64) -> BatchPolicy {
        BatchPolicy {
            max_batch_size: 8,
            dynamic: true,
            preferred: preferred.to_vec(),
            max_queue_delay: Duration::from_micros(delay_us),
        }
    }

    #[test]
    fn no_dynamic_batching_runs_one_request() {
        let p = BatchPolicy { dynamic: false, ..policy(&[], 0) };
        let now = Instant::now();
        assert_eq!(decide(&p, &[1, 1, 1], true, now, now), Decision::Execute(1));
    }

    #[test]
    fn zero_delay_takes_what_is_queued() {
        let now = Instant::now();
        assert_eq!(decide(&policy(&[], 0), &[1, 1, 1], true, now, now), Decision::Execute(3));
    }

    #[test]
    fn waits_for_the_delay_then_sends_largest_preferred_prefix() {
        let p = policy(&[2, 4], 500);
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_micros(500);
        assert_eq!(decide(&p, &[1, 1, 1], true, t0, t0), Decision::WaitUntil(deadline));
        assert_eq!(decide(&p, &[1, 1, 1], true, t0, deadline), Decision::Execute(2));
        assert_eq!(decide(&p, &[1], true, t0, deadline), Decision::Execute(1));
    }

    #[test]
    fn preferred_or_full_batches_go_at_once() {
        let p = policy(&[4], 10_000);
        let t0 = Instant::now();
        assert_eq!(decide(&p, &[2, 2], true, t0, t0), Decision::Execute(2));
        assert_eq!(decide(&p, &[1, 1, 1], false, t0, t0), Decision::Execute(3));
    }
}
