//! The dynamic batcher: one queue per model and one thread per model instance.
//!
//! An instance takes the longest compatible run of requests at the head of the queue (same
//! per-item shapes, at most `max_batch_size` items). It executes at once when that run reaches a
//! preferred size or can grow no further; otherwise it waits until the oldest request has queued
//! for `max_queue_delay_microseconds`, then sends the largest preferred prefix, or all of it.
//! Stage times are taken here, where the work happens, with monotonic clocks:
//! queue = enqueue → dequeue; compute_input = gathering inputs into the batch buffers;
//! compute_infer = `Model::execute_owned`; compute_output = scattering outputs into responses or
//! regions. A lone request that an idle instance would execute alone at once runs on the calling
//! thread instead (`Scheduler::try_inline`, for models that allow it), in the same way.
//! A decoupled model runs one request per execution and answers with a schedule of responses
//! (`Model::execute_decoupled`), which the front end plays out; the instance is free at once.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use super::batch::{execute, Pending, Queue, Shared};
use super::batch_policy::{decide, BatchPolicy, Decision, SequencePolicy};
use super::error::{ServerError, ServerResult};
use super::infer::{AdmittedRequest, Answer};
use super::models::Model;
use super::sequence::{self, Sequencer};
use super::stats::ModelStats;
use crate::proto::inference::ModelConfig;
use crate::tensor::DataType;

/// Gives an inline execution's instance back even if the execution unwinds.
struct InlineInstance<'a>(&'a Shared);

impl Drop for InlineInstance<'_> {
    fn drop(&mut self) {
        self.0.release_instance();
    }
}

/// What [`Scheduler::try_inline`] did with a request.
pub enum Inline {
    /// Ran on the calling thread: its answer.
    Answered(ServerResult<Answer>),
    /// Cannot run at once: the request, to be queued.
    Declined(AdmittedRequest),
}

/// A model's scheduler. Dropping it stops the instances; queued requests get an error.
pub struct Scheduler {
    shared: Arc<Shared>,
    instances: Vec<std::thread::JoinHandle<()>>,
    /// Set for a model with `sequence_batching`: it schedules instead of the queue above.
    sequencer: Option<Arc<Sequencer>>,
}

impl Scheduler {
    /// Starts the model's instances: the sequence batcher's for a model with
    /// `sequence_batching` (a config it cannot serve is refused), the dynamic batcher's otherwise.
    pub fn start(
        config: ModelConfig,
        model: Arc<dyn Model>,
        stats: Arc<ModelStats>,
        instances: usize,
    ) -> ServerResult<Self> {
        let count = instances.max(1);
        let sequence_policy = SequencePolicy::from_config(&config)?;
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            policy: BatchPolicy::from_config(&config),
            decoupled: config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled),
            config,
            inline: model.runs_inline(),
            model,
            stats,
            queue: Mutex::new(Queue { idle: count, ..Queue::default() }),
            wake: Condvar::new(),
        });
        if let Some(policy) = sequence_policy {
            let sequencer = Arc::new(Sequencer::new(policy, count));
            let instances = sequence::start_instances(&shared, &sequencer, count);
            return Ok(Scheduler { shared, instances, sequencer: Some(sequencer) });
        }
        let instances = (0..count)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("{}-{i}", shared.name))
                    .spawn(move || instance_loop(&shared))
                    .expect("spawn model instance thread")
            })
            .collect();
        Ok(Scheduler { shared, instances, sequencer: None })
    }

    /// Runs `request` on the calling thread when an idle instance may take it alone right now:
    /// the model allows it, nothing is queued, and `decide` would execute this request alone at
    /// once. That is the same batch of one an instance thread would run, without waking the
    /// thread and waiting for its reply. Otherwise the request is handed back, to queue.
    pub fn try_inline(&self, request: AdmittedRequest) -> Inline {
        let shared = &*self.shared;
        if !shared.inline || self.sequencer.is_some() {
            return Inline::Declined(request);
        }
        let now = Instant::now();
        let mut q = shared.queue.lock();
        if q.stopped || q.idle == 0 || !q.items.is_empty() || !runs_alone_now(&shared.policy, &request, now) {
            return Inline::Declined(request);
        }
        q.idle -= 1;
        drop(q);
        let _instance = InlineInstance(shared);
        // Never queued: enqueued and dequeued are the same instant.
        let mut pending = Pending { request, enqueued: now, reply: None, filler: false };
        let mut results = execute(shared, std::slice::from_mut(&mut pending), now);
        Inline::Answered(results.pop().expect("one result per request"))
    }

    /// Runs an admitted request: inline when [`try_inline`](Self::try_inline) can, else queued
    /// for an instance, waiting for its response.
    pub async fn infer(&self, request: AdmittedRequest) -> ServerResult<Answer> {
        match self.try_inline(request) {
            Inline::Answered(answer) => answer,
            Inline::Declined(request) => self.enqueue(request).await,
        }
    }

    /// Queues a request for the instances (or the sequence batcher) and waits for its response.
    pub async fn enqueue(&self, request: AdmittedRequest) -> ServerResult<Answer> {
        let shared = &*self.shared;
        if let Some(sequencer) = &self.sequencer {
            let rx = sequencer.enqueue(shared, request)?;
            return rx.await.map_err(|_| ServerError::unavailable(format!("model '{}' was unloaded", shared.name)))?;
        }
        let enqueued = Instant::now();
        let rx = {
            let mut q = shared.queue.lock();
            if q.stopped {
                return Err(ServerError::unavailable(format!("model '{}' is unloading", shared.name)));
            }
            let (reply, rx) = oneshot::channel();
            q.items.push_back(Pending { request, enqueued, reply: Some(reply), filler: false });
            rx
        };
        shared.wake.notify_one();
        rx.await.map_err(|_| ServerError::unavailable(format!("model '{}' was unloaded", shared.name)))?
    }

    /// Whether the model is decoupled: its answers carry zero or more responses, for a stream.
    pub fn decoupled(&self) -> bool {
        self.shared.decoupled
    }

    /// Requests waiting for an instance (for `nv_inference_pending_request_count`).
    pub fn pending(&self) -> usize {
        match &self.sequencer {
            Some(sequencer) => sequencer.pending(),
            None => self.shared.queue.lock().items.len(),
        }
    }
}

/// Would `decide`, looking at a queue that holds only this request, execute it at once?
fn runs_alone_now(policy: &BatchPolicy, request: &AdmittedRequest, now: Instant) -> bool {
    let n = request.batch_size;
    let can_grow = n < policy.max_batch_size.max(1);
    decide(policy, &[n], can_grow, now, now) == Decision::Execute(1)
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shared.queue.lock().stopped = true;
        self.shared.wake.notify_all();
        if let Some(sequencer) = &self.sequencer {
            sequencer.stop();
        }
        for handle in self.instances.drain(..) {
            let _ = handle.join();
        }
    }
}

fn instance_loop(shared: &Shared) {
    loop {
        let (mut batch, dequeued) = {
            let mut q = shared.queue.lock();
            loop {
                if q.stopped {
                    for p in q.items.drain(..) {
                        if let Some(reply) = p.reply {
                            let _ = reply
                                .send(Err(ServerError::unavailable(format!("model '{}' is unloading", shared.name))));
                        }
                    }
                    return;
                }
                // Nothing to do, or every instance busy (some inline): wait for a release.
                if q.idle == 0 {
                    shared.wake.wait(&mut q);
                    continue;
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
                    if total + n > limit || p.request.batch_key() != key || !sizes.is_empty() && !mergeable(shared) {
                        blocked = true;
                        break;
                    }
                    total += n;
                    sizes.push(n);
                }
                let can_grow = !blocked && total < limit;
                let now = Instant::now();
                match decide(&shared.policy, &sizes, can_grow, oldest, now) {
                    Decision::Execute(n) => {
                        q.idle -= 1;
                        break (q.items.drain(..n).collect::<Vec<_>>(), now);
                    }
                    Decision::WaitUntil(deadline) => {
                        shared.wake.wait_until(&mut q, deadline);
                    }
                }
            }
        };
        // Let another idle instance look at what is left.
        shared.wake.notify_one();
        let results = execute(shared, &mut batch, dequeued);
        shared.release_instance();
        // Statistics are recorded by now, replies go second: a client that reads statistics
        // right after its response sees its own request counted.
        for (p, result) in batch.into_iter().zip(results) {
            if let Some(reply) = p.reply {
                let _ = reply.send(result);
            }
        }
    }
}

/// BYTES outputs have no fixed per-item size, so their requests are never merged.
fn mergeable(shared: &Shared) -> bool {
    !shared.decoupled
        && shared.config.output.iter().all(|o| DataType::from_config_enum(o.data_type) != Some(DataType::Bytes))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::server::infer::InputBytes;
    use crate::server::models::ModelError;
    use crate::tensor::Tensor;

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

    /// Notes which thread executed each batch and how many executions overlapped, so tests see
    /// where a request ran.
    struct WhereModel {
        inline: bool,
        threads: parking_lot::Mutex<Vec<std::thread::ThreadId>>,
        running: std::sync::atomic::AtomicUsize,
        most_running: std::sync::atomic::AtomicUsize,
    }

    impl Model for WhereModel {
        fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.running.fetch_add(1, SeqCst) + 1;
            self.most_running.fetch_max(now, SeqCst);
            self.threads.lock().push(std::thread::current().id());
            // Long enough for overlapping executions to show.
            std::thread::sleep(Duration::from_millis(1));
            self.running.fetch_sub(1, SeqCst);
            Ok(inputs.to_vec())
        }
        fn runs_inline(&self) -> bool {
            self.inline
        }
    }

    fn scheduler(inline: bool, batching: &str) -> (Scheduler, Arc<WhereModel>, Arc<ModelStats>) {
        let config = crate::server::config::parse_pbtxt(
            &format!(
                r#"backend: "identity" max_batch_size: 8
                   input [ {{ name: "I" data_type: TYPE_FP32 dims: [ 1 ] }} ]
                   output [ {{ name: "O" data_type: TYPE_FP32 dims: [ 1 ] }} ]
                   {batching}"#
            ),
            "m",
        )
        .unwrap();
        let model = Arc::new(WhereModel {
            inline,
            threads: Default::default(),
            running: Default::default(),
            most_running: Default::default(),
        });
        let stats = Arc::new(ModelStats::default());
        (Scheduler::start(config, model.clone(), stats.clone(), 1).unwrap(), model, stats)
    }

    fn request() -> AdmittedRequest {
        use crate::server::infer::{AdmittedInput, OutputPlan};
        AdmittedRequest {
            model_name: String::new(),
            id: "r".into(),
            batch_size: 1,
            inputs: vec![AdmittedInput { shape: vec![1, 1], bytes: InputBytes::Raw(Bytes::from(vec![0u8; 4])) }],
            outputs: vec![OutputPlan { config_index: 0, name: None, shm: None }],
            received: Instant::now(),
            sequence: None,
            also_record: None,
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    #[test]
    fn an_idle_instance_runs_a_lone_request_on_the_callers_thread() {
        let (s, model, stats) = scheduler(true, "dynamic_batching { max_queue_delay_microseconds: 0 }");
        let Answer::Single(response) = block_on(s.infer(request())).unwrap() else { panic!("one response") };
        assert_eq!((response.id.as_str(), response.outputs[0].shape.as_slice()), ("r", &[1i64, 1][..]));
        assert_eq!(*model.threads.lock(), vec![std::thread::current().id()]);
        let snap = stats.snapshot("m", "1");
        assert_eq!((snap.inference_count, snap.execution_count), (1, 1));
        assert_eq!(snap.inference_stats.unwrap().queue.unwrap().count, 1);
    }

    #[test]
    fn a_lone_answer_takes_its_requests_names_and_buffers_and_answers_an_output_named_twice_twice() {
        use crate::server::infer::{OutputData, OutputPlan};
        let (s, _, _) = scheduler(true, "dynamic_batching { max_queue_delay_microseconds: 0 }");
        let mut r = request();
        r.model_name = "m".into();
        let input = Bytes::from(7.5f32.to_le_bytes().to_vec());
        r.inputs[0].bytes = InputBytes::Raw(input.clone());
        let named = |name: &str| OutputPlan { config_index: 0, name: Some(name.into()), shm: None };
        r.outputs = vec![named("O"), named("O")];
        let Answer::Single(response) = block_on(s.infer(r)).unwrap() else { panic!("one response") };
        assert_eq!((response.model_name.as_str(), response.model_version.as_str()), ("m", "1"));
        assert_eq!(response.outputs.len(), 2);
        for output in &response.outputs {
            assert_eq!((output.name.as_str(), output.shape.as_slice()), ("O", &[1i64, 1][..]));
            let OutputData::Raw(data) = &output.data else { panic!("inline bytes") };
            assert_eq!(
                (data.as_ref(), data.as_ptr()),
                (input.as_ref(), input.as_ptr()),
                "the input's buffer, not a copy"
            );
        }
    }

    #[test]
    fn requests_that_may_wait_for_a_batch_or_models_that_block_go_to_the_instance() {
        let delayed =
            scheduler(true, "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 100 }");
        let blocking = scheduler(false, "dynamic_batching { max_queue_delay_microseconds: 0 }");
        for (s, model, _) in [delayed, blocking] {
            block_on(s.infer(request())).unwrap();
            assert_ne!(model.threads.lock()[0], std::thread::current().id());
        }
    }

    #[test]
    fn concurrent_requests_still_form_batches_behind_a_busy_instance() {
        // Requests arrive together: the first may run inline, the rest queue behind it and run
        // in the batches `decide` forms, never more executions at once than instances (one).
        let (s, model, stats) = scheduler(true, "dynamic_batching { max_queue_delay_microseconds: 0 }");
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        let s = Arc::new(s);
        runtime.block_on(async {
            let calls: Vec<_> = (0..8)
                .map(|_| {
                    let s = s.clone();
                    tokio::spawn(async move { s.infer(request()).await })
                })
                .collect();
            for call in calls {
                call.await.unwrap().unwrap();
            }
        });
        let snap = stats.snapshot("m", "1");
        assert_eq!(snap.inference_count, 8);
        assert_eq!(snap.execution_count as usize, model.threads.lock().len());
        assert_eq!(model.most_running.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
