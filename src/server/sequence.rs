//! The sequence batcher, for models whose config has `sequence_batching` (stateful models).
//!
//! Each instance has batch slots (`direct`: `max_batch_size` of them, one sequence each;
//! `oldest`: `max_candidate_sequences`). A request with START binds its sequence (its
//! correlation id) to a free slot, the lowest slot number first, or to the backlog when every
//! slot is taken; the sequence keeps that instance and slot until its END request runs, or until
//! it has been idle for `max_sequence_idle_microseconds` (Triton's 1 s when 0), after which a
//! request without START for it is refused like one for an unknown sequence. An instance runs at
//! most one request per sequence per batch, so a sequence's requests execute in order:
//! - `direct`: one batch position per slot, up to the highest ready slot; positions of slots with
//!   nothing ready are filled (zeros, READY false), and the model must ignore them;
//! - `oldest`: the oldest ready requests of the instance's sequences, batched as the dynamic
//!   batcher does (`preferred_batch_size`, `max_queue_delay_microseconds`).
//!
//! The control inputs (`control_input`: START, END, READY, CORRID) reach the model as extra
//! input tensors after the config's inputs, in `control_input` order, each of per-item shape [1].
//! Triton's error texts are kept. Statistics are recorded by the shared execution path, as
//! Triton records them for a sequence model: `inference_count` and the request statistics count
//! requests only, `batch_stats` the executed batch size, empty slots included; queue time runs
//! from arrival to execution, backlog included.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use super::batch::{execute_batch, Pending, Shared};
use super::batch_policy::{decide, ControlKind, Decision, SequencePolicy};
use super::error::{ServerError, ServerResult};
use super::infer::{AdmittedInput, AdmittedRequest, Answer, CorrelationId, InputBytes, SequenceFlags};
use crate::tensor::{DataType, Tensor};

/// One sequence with a slot, or waiting in the backlog for one.
struct Seq {
    id: CorrelationId,
    /// (instance, slot); `None` while in the backlog.
    place: Option<(usize, usize)>,
    queue: VecDeque<Pending>,
    /// The latest request's arrival, or the latest execution's end.
    last: Instant,
    /// A request of it is executing.
    running: bool,
    /// Its END request has arrived: it takes no more requests, and frees its slot once empty.
    ended: bool,
}

#[derive(Default)]
struct State {
    next_handle: u64,
    /// Sequences still taking requests, by correlation id.
    ids: HashMap<CorrelationId, u64>,
    seqs: HashMap<u64, Seq>,
    /// [instance][slot]: the sequence holding it.
    slots: Vec<Vec<Option<u64>>>,
    backlog: VecDeque<u64>,
    stopped: bool,
}

impl State {
    /// Gives a slot back: to the oldest backlogged sequence, or free.
    fn free_slot(&mut self, instance: usize, slot: usize) {
        self.slots[instance][slot] = None;
        while let Some(h) = self.backlog.pop_front() {
            if let Some(seq) = self.seqs.get_mut(&h) {
                seq.place = Some((instance, slot));
                self.slots[instance][slot] = Some(h);
                return;
            }
        }
    }

    /// Forgets a sequence whose queue is empty and frees its slot.
    fn remove(&mut self, handle: u64) {
        let Some(seq) = self.seqs.remove(&handle) else { return };
        if self.ids.get(&seq.id) == Some(&handle) {
            self.ids.remove(&seq.id);
        }
        if let Some((instance, slot)) = seq.place {
            self.free_slot(instance, slot);
        }
    }

    /// A free slot, the lowest slot number first and spread over instances.
    fn free_place(&self) -> Option<(usize, usize)> {
        let slots = self.slots.first().map_or(0, |s| s.len());
        (0..slots).find_map(|s| (0..self.slots.len()).find(|&i| self.slots[i][s].is_none()).map(|i| (i, s)))
    }
}

/// The sequence batcher's shared state: every instance thread and every caller locks it.
pub struct Sequencer {
    policy: SequencePolicy,
    state: Mutex<State>,
    wake: Condvar,
}

impl Sequencer {
    pub fn new(policy: SequencePolicy, instances: usize) -> Self {
        let state = State { slots: vec![vec![None; policy.slots]; instances.max(1)], ..State::default() };
        Sequencer { policy, state: Mutex::new(state), wake: Condvar::new() }
    }

    /// Queues a request on its sequence, or refuses it as Triton does.
    pub(super) fn enqueue(
        &self,
        shared: &Shared,
        request: AdmittedRequest,
    ) -> ServerResult<oneshot::Receiver<ServerResult<Answer>>> {
        let model = &shared.name;
        let Some(SequenceFlags { id, start, end }) = request.sequence.clone() else {
            return Err(ServerError::invalid_arg(format!(
                "inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            )));
        };
        if request.batch_size > 1 {
            return Err(ServerError::invalid_arg(format!(
                "inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
            )));
        }
        let now = Instant::now();
        let mut st = self.state.lock();
        if st.stopped {
            return Err(ServerError::unavailable(format!("model '{model}' is unloading")));
        }
        self.reap(&mut st, now);
        let handle = match st.ids.get(&id) {
            Some(&h) => h,
            None if !start => {
                return Err(ServerError::invalid_arg(format!(
                    "inference request for sequence {id} to model '{model}' must specify the START flag on the first request of the sequence"
                )));
            }
            None => {
                self.check_corrid_type(model, &id)?;
                let h = st.next_handle;
                st.next_handle += 1;
                let place = st.free_place();
                match place {
                    Some((instance, slot)) => st.slots[instance][slot] = Some(h),
                    None => st.backlog.push_back(h),
                }
                let seq =
                    Seq { id: id.clone(), place, queue: VecDeque::new(), last: now, running: false, ended: false };
                st.seqs.insert(h, seq);
                st.ids.insert(id.clone(), h);
                h
            }
        };
        let (reply, rx) = oneshot::channel();
        let seq = st.seqs.get_mut(&handle).expect("a known sequence is tracked");
        seq.queue.push_back(Pending { request, enqueued: now, reply: Some(reply), filler: false });
        seq.last = now;
        if end {
            seq.ended = true;
            st.ids.remove(&id);
        }
        drop(st);
        self.wake.notify_all();
        Ok(rx)
    }

    /// A string id cannot travel in a numeric CORRID control (a number becomes a string one).
    fn check_corrid_type(&self, model: &str, id: &CorrelationId) -> ServerResult<()> {
        let CorrelationId::Text(text) = id else { return Ok(()) };
        match self.policy.controls.iter().find(|c| c.kind == ControlKind::CorrId && c.dtype != DataType::Bytes) {
            None => Ok(()),
            Some(c) => Err(ServerError::invalid_arg(format!(
                "sequence batching control '{}' of model '{model}' is {}, so it cannot carry the string correlation ID '{text}'",
                c.name, c.dtype
            ))),
        }
    }

    /// Releases sequences idle for `idle`: nothing queued or executing since.
    fn reap(&self, st: &mut State, now: Instant) {
        let idle: Vec<u64> = st
            .seqs
            .iter()
            .filter(|(_, s)| s.place.is_some() && !s.running && s.queue.is_empty() && now >= s.last + self.policy.idle)
            .map(|(&h, _)| h)
            .collect();
        for h in idle {
            tracing::debug!(sequence = %st.seqs[&h].id, "idle sequence released");
            st.remove(h);
        }
    }

    /// When the next idle sequence would be released.
    fn next_reap(&self, st: &State) -> Option<Instant> {
        st.seqs
            .values()
            .filter(|s| s.place.is_some() && !s.running && s.queue.is_empty())
            .map(|s| s.last + self.policy.idle)
            .min()
    }

    /// Requests queued and not executing.
    pub fn pending(&self) -> usize {
        self.state.lock().seqs.values().map(|s| s.queue.len()).sum()
    }

    /// Stops the instances; queued requests get an error.
    pub fn stop(&self) {
        self.state.lock().stopped = true;
        self.wake.notify_all();
    }

    /// The batch instance `instance` should run now, as (slot, sequence) pairs in batch order
    /// (`direct`: by slot), or when to look again.
    fn plan(&self, st: &State, instance: usize, now: Instant) -> Result<Vec<(usize, u64)>, Option<Instant>> {
        let mut ready: Vec<(usize, u64, Instant)> = Vec::new();
        let mut occupied = 0;
        for (slot, h) in st.slots[instance].iter().enumerate() {
            let Some(h) = h else { continue };
            occupied += 1;
            let seq = &st.seqs[h];
            if let (false, Some(head)) = (seq.running, seq.queue.front()) {
                ready.push((slot, *h, head.enqueued));
            }
        }
        if ready.is_empty() {
            return Err(None);
        }
        ready.sort_by_key(|r| r.2);
        // Requests batch only when their per-item shapes agree: the oldest's kind goes first.
        let key = st.seqs[&ready[0].1].queue[0].request.batch_key();
        ready.retain(|r| st.seqs[&r.1].queue[0].request.batch_key() == key);
        ready.truncate(self.policy.max_batch);
        let sizes = vec![1; ready.len()];
        let can_grow = ready.len() < self.policy.max_batch && ready.len() < occupied;
        match decide(&self.policy.batch, &sizes, can_grow, ready[0].2, now) {
            Decision::Execute(n) => {
                let mut chosen: Vec<(usize, u64)> = ready[..n.max(1)].iter().map(|r| (r.0, r.1)).collect();
                if self.policy.direct {
                    chosen.sort_by_key(|c| c.0);
                }
                Ok(chosen)
            }
            Decision::WaitUntil(deadline) => Err(Some(deadline)),
        }
    }

    /// The control tensors of one execution: per batch position (start, end, ready, id).
    fn control_tensors(&self, items: &[(bool, bool, bool, Option<CorrelationId>)], batching: bool) -> Vec<Tensor> {
        self.policy
            .controls
            .iter()
            .map(|c| {
                let mut data = Vec::new();
                for (start, end, ready, id) in items {
                    let flag = match c.kind {
                        ControlKind::Start => *start,
                        ControlKind::End => *end,
                        ControlKind::Ready => *ready,
                        ControlKind::CorrId => false,
                    };
                    c.value(flag, id.as_ref(), &mut data);
                }
                let shape = if batching { vec![items.len() as i64, 1] } else { vec![1] };
                Tensor { dtype: c.dtype, shape, data: Bytes::from(data) }
            })
            .collect()
    }
}

/// Starts one thread per instance.
pub(super) fn start_instances(
    shared: &Arc<Shared>,
    sequencer: &Arc<Sequencer>,
    count: usize,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..count)
        .map(|i| {
            let (shared, sequencer) = (shared.clone(), sequencer.clone());
            std::thread::Builder::new()
                .name(format!("{}-{i}", shared.name))
                .spawn(move || instance_loop(&shared, &sequencer, i))
                .expect("spawn model instance thread")
        })
        .collect()
}

/// An empty batch position of a `direct` batch: inputs shaped like `template`'s, zeros (BYTES:
/// a copy of the template's elements, so the tensor stays well-formed).
fn filler(shared: &Shared, template: &AdmittedRequest, now: Instant) -> Pending {
    let inputs = template
        .inputs
        .iter()
        .zip(&shared.config.input)
        .map(|(input, spec)| {
            let bytes = if DataType::from_config_enum(spec.data_type) == Some(DataType::Bytes) {
                let mut copy = Vec::with_capacity(input.bytes.len());
                match input.bytes.gather_into(&mut copy) {
                    Ok(()) => Bytes::from(copy),
                    Err(_) => Bytes::new(),
                }
            } else {
                Bytes::from(vec![0u8; input.bytes.len()])
            };
            AdmittedInput { shape: input.shape.clone(), bytes: InputBytes::Raw(bytes) }
        })
        .collect();
    let request = AdmittedRequest {
        model_name: shared.name.clone(),
        id: String::new(),
        batch_size: 1,
        inputs,
        outputs: vec![],
        received: now,
        sequence: None,
        also_record: None,
    };
    Pending { request, enqueued: now, reply: None, filler: true }
}

fn instance_loop(shared: &Shared, sequencer: &Sequencer, instance: usize) {
    let batching = shared.config.max_batch_size > 0;
    loop {
        let (mut batch, items, handles, dequeued) = {
            let mut st = sequencer.state.lock();
            let chosen = loop {
                if st.stopped {
                    for seq in st.seqs.values_mut() {
                        for p in seq.queue.drain(..) {
                            if let Some(reply) = p.reply {
                                let _ = reply.send(Err(ServerError::unavailable(format!(
                                    "model '{}' is unloading",
                                    shared.name
                                ))));
                            }
                        }
                    }
                    return;
                }
                let now = Instant::now();
                sequencer.reap(&mut st, now);
                match sequencer.plan(&st, instance, now) {
                    Ok(chosen) => break chosen,
                    Err(deadline) => {
                        let wake = match (deadline, sequencer.next_reap(&st)) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        match wake {
                            Some(at) => {
                                sequencer.wake.wait_until(&mut st, at);
                            }
                            None => sequencer.wake.wait(&mut st),
                        }
                    }
                }
            };
            let dequeued = Instant::now();
            let mut taken: Vec<(usize, Pending)> = Vec::with_capacity(chosen.len());
            let mut handles = Vec::with_capacity(chosen.len());
            for &(slot, h) in &chosen {
                let seq = st.seqs.get_mut(&h).expect("a planned sequence is tracked");
                let p = seq.queue.pop_front().expect("a planned sequence has a request");
                seq.running = true;
                taken.push((slot, p));
                handles.push(h);
            }
            // Positions: direct batches hold one per slot up to the highest taken slot.
            let mut batch = Vec::new();
            let mut items = Vec::new();
            let direct = sequencer.policy.direct && batching;
            // `taken` is in slot order here: a gap below the highest slot needs fillers.
            let gaps = direct && taken.last().is_some_and(|(slot, _)| slot + 1 > taken.len());
            let template = gaps.then(|| filler(shared, &taken[0].1.request, dequeued));
            let mut next_slot = 0;
            for (slot, p) in taken {
                if let (true, Some(template)) = (direct, &template) {
                    while next_slot < slot {
                        batch.push(filler(shared, &template.request, dequeued));
                        items.push((false, false, false, None));
                        next_slot += 1;
                    }
                    next_slot = slot + 1;
                }
                let flags = p.request.sequence.clone().expect("sequence requests carry flags");
                items.push((flags.start, flags.end, true, Some(flags.id)));
                batch.push(p);
            }
            (batch, items, handles, dequeued)
        };
        sequencer.wake.notify_all();
        let extra = || sequencer.control_tensors(&items, batching);
        let results = execute_batch(shared, &mut batch, dequeued, &extra);
        {
            let mut st = sequencer.state.lock();
            let now = Instant::now();
            for h in handles {
                let Some(seq) = st.seqs.get_mut(&h) else { continue };
                seq.running = false;
                seq.last = now;
                if seq.ended && seq.queue.is_empty() {
                    st.remove(h);
                }
            }
        }
        sequencer.wake.notify_all();
        for (p, result) in batch.into_iter().zip(results) {
            if let Some(reply) = p.reply {
                let _ = reply.send(result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::proto::inference::ModelConfig;
    use crate::server::batch_policy::DEFAULT_IDLE;
    use crate::server::infer::OutputPlan;
    use crate::server::models::{Model, ModelError};
    use crate::server::scheduler::Scheduler;
    use crate::server::stats::ModelStats;

    /// Records every batch it sees; its first execution waits for the test's signal.
    struct Gated {
        seen: parking_lot::Mutex<Vec<Vec<Tensor>>>,
        gate: parking_lot::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    }

    impl Model for Gated {
        fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
            self.seen.lock().push(inputs.to_vec());
            if let Some(gate) = self.gate.lock().take() {
                gate.recv().unwrap();
            }
            Ok(vec![inputs[0].clone()])
        }
    }

    fn config(strategy: &str) -> ModelConfig {
        crate::server::config::parse_pbtxt(
            &format!(
                r#"backend: "identity" max_batch_size: 4
                   input [ {{ name: "I" data_type: TYPE_INT32 dims: [ 1 ] }} ]
                   output [ {{ name: "O" data_type: TYPE_INT32 dims: [ 1 ] }} ]
                   sequence_batching {{ {strategy}
                     control_input [
                       {{ name: "S" control [ {{ kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] }} ] }},
                       {{ name: "E" control [ {{ kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] }} ] }},
                       {{ name: "R" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 5, 9 ] }} ] }},
                       {{ name: "C" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT32 }} ] }},
                       {{ name: "T" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }} ] }}
                     ] }}"#
            ),
            "m",
        )
        .unwrap()
    }

    fn request(id: u64, start: bool, end: bool, x: i32) -> AdmittedRequest {
        AdmittedRequest {
            model_name: String::new(),
            id: format!("{id}"),
            batch_size: 1,
            inputs: vec![AdmittedInput {
                shape: vec![1, 1],
                bytes: InputBytes::Raw(Bytes::from(x.to_le_bytes().to_vec())),
            }],
            outputs: vec![OutputPlan { config_index: 0, name: None, shm: None }],
            received: Instant::now(),
            sequence: Some(SequenceFlags { id: CorrelationId::Number(id), start, end }),
            also_record: None,
        }
    }

    fn wait_for(what: impl Fn() -> bool) {
        while !what() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn direct_batches_sequences_by_slot_with_controls_and_empty_slots() {
        let (release, gate) = std::sync::mpsc::channel();
        let model = Arc::new(Gated { seen: Default::default(), gate: parking_lot::Mutex::new(Some(gate)) });
        let stats = Arc::new(ModelStats::default());
        let s = Arc::new(Scheduler::start(config(""), model.clone(), stats.clone(), 1).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        let spawn = |r: AdmittedRequest| {
            let s = s.clone();
            rt.spawn(async move { s.infer(r).await })
        };
        // Sequence 1 (START and END at once) takes slot 0 and holds the instance at the gate.
        let a = spawn(request(1, true, true, 10));
        wait_for(|| model.seen.lock().len() == 1);
        // 2 and 3 take slots 1 and 2; slot 0 frees when 1 has run.
        let b = spawn(request(2, true, false, 20));
        wait_for(|| s.pending() == 1);
        let c = spawn(request(3, true, false, 30));
        wait_for(|| s.pending() == 2);
        release.send(()).unwrap();
        for call in [a, b, c] {
            rt.block_on(call).unwrap().unwrap();
        }
        let seen = model.seen.lock();
        assert_eq!(seen.len(), 2);
        let first = &seen[0];
        assert_eq!(first.len(), 6, "the input and five controls");
        assert_eq!((first[1].to_f32(), first[2].data.to_vec(), first[3].to_i32()), (vec![1.0], vec![1], vec![9]));
        // Slot 0 is empty: READY false, zeros, CORRID 0 / "".
        let batch = &seen[1];
        assert_eq!(batch[0].shape, [3, 1]);
        assert_eq!(batch[0].to_i32(), [0, 20, 30]);
        assert_eq!(batch[1].to_f32(), [0.0, 1.0, 1.0]);
        assert_eq!(batch[2].data.to_vec(), [0, 0, 0]);
        assert_eq!(batch[3].to_i32(), [5, 9, 9]);
        assert_eq!(batch[4].to_i32(), [0, 2, 3]);
        assert_eq!(batch[4].shape, [3, 1]);
        assert_eq!(&batch[5].data[..], b"\x00\x00\x00\x00\x01\x00\x00\x002\x01\x00\x00\x003");
        // As in Triton: only requests count as inferences, batch_stats key the executed size.
        let snap = stats.snapshot("m", "1");
        assert_eq!((snap.inference_count, snap.execution_count), (3, 2));
        let sizes: Vec<u64> = snap.batch_stats.iter().map(|b| b.batch_size).collect();
        assert_eq!(sizes, [1, 3]);
        assert_eq!(snap.inference_stats.unwrap().success.unwrap().count, 3);
    }

    #[test]
    fn oldest_takes_one_request_per_sequence_in_order() {
        let (release, gate) = std::sync::mpsc::channel();
        let model = Arc::new(Gated { seen: Default::default(), gate: parking_lot::Mutex::new(Some(gate)) });
        let stats = Arc::new(ModelStats::default());
        let oldest = "oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 0 }";
        let s = Arc::new(Scheduler::start(config(oldest), model.clone(), stats, 1).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
        let spawn = |r: AdmittedRequest| {
            let s = s.clone();
            rt.spawn(async move { s.infer(r).await })
        };
        let a = spawn(request(1, true, false, 1));
        wait_for(|| model.seen.lock().len() == 1);
        // While the instance is busy: two more of sequence 1 and one of sequence 2 queue.
        let mut calls = vec![a];
        for (n, r) in [request(1, false, false, 2), request(2, true, false, 100), request(1, false, true, 3)]
            .into_iter()
            .enumerate()
        {
            calls.push(spawn(r));
            wait_for(|| s.pending() == n + 1);
        }
        release.send(()).unwrap();
        for call in calls {
            rt.block_on(call).unwrap().unwrap();
        }
        let seen = model.seen.lock();
        let inputs: Vec<Vec<i32>> = seen.iter().map(|b| b[0].to_i32()).collect();
        let ids: Vec<Vec<i32>> = seen.iter().map(|b| b[4].to_i32()).collect();
        assert_eq!(inputs, [vec![1], vec![2, 100], vec![3]]);
        assert_eq!(ids, [vec![1], vec![1, 2], vec![1]]);
        assert_eq!(seen[1][3].to_i32(), [9, 9], "no empty slots in an oldest batch");
    }

    #[test]
    fn bad_sequence_configs_are_refused() {
        for bad in [
            r#"control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] } ]"#,
            r#"control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ]"#,
            r#"control_input [ { name: "I" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ]"#,
            r#"oldest { preferred_batch_size: [ 16 ] }"#,
        ] {
            let text = format!(
                r#"backend: "identity" max_batch_size: 4
                   input [ {{ name: "I" data_type: TYPE_INT32 dims: [ 1 ] }} ]
                   output [ {{ name: "O" data_type: TYPE_INT32 dims: [ 1 ] }} ]
                   sequence_batching {{ {bad} }}"#
            );
            let config = crate::server::config::parse_pbtxt(&text, "m").unwrap();
            assert!(SequencePolicy::from_config(&config).is_err(), "{bad}");
        }
        let policy = SequencePolicy::from_config(&config("")).unwrap().unwrap();
        assert!(policy.direct && policy.slots == 4 && policy.idle == DEFAULT_IDLE);
    }
}
