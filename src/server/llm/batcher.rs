//! The iteration-level (continuous) batcher, as vLLM's scheduler runs one: every step first
//! continues the running sequences (one decode token each, or their next prefill chunk), then
//! admits waiting requests in arrival order while the step's token budget, `max_num_seqs` and
//! the KV cache allow. A running sequence that needs a block when none is free preempts the
//! latest admitted one, which gives its blocks back and is recomputed later. Sequences whose
//! client went away are dropped at the start of the next step. Time is the caller's: `schedule`
//! says how long the step takes, `complete` ends it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use super::cost::CostModel;
use super::kv::{Holding, KvCache};
use super::record::RequestRecord;
use super::request_log::RequestLog;
use super::telemetry::Telemetry;
use super::{Event, Finish, FinishReason};
use crate::server::stats::{ComputeTimes, ModelStats};

/// A request as the engine thread receives it, checked and planned by the front of the engine.
pub struct Submission {
    pub request_id: String,
    /// The model's name, for `--record-requests`.
    pub model: String,
    pub prompt_len: usize,
    pub hashes: Vec<u64>,
    /// Tokens to generate (0: prefill only, as for embeddings).
    pub target: usize,
    pub reason: FinishReason,
    /// The first this many generated tokens are reasoning.
    pub reasoning_tokens: usize,
    pub arrival_ns: u64,
    pub events: UnboundedSender<Event>,
    /// When the front end read the first token (0: not yet); see [`super::Events`].
    pub first_read_ns: Arc<AtomicU64>,
    pub log: Option<Arc<RequestLog>>,
}

struct Seq {
    id: u64,
    sub: Submission,
    generated: usize,
    computed: usize,
    scheduled: usize,
    holding: Holding,
    /// Prompt blocks already offered to the prefix cache.
    published: usize,
    cached_tokens: usize,
    preemptions: u32,
    admitted_ns: Option<u64>,
    chunk_ns: Vec<u64>,
}

impl Seq {
    fn len(&self) -> usize {
        self.sub.prompt_len + self.generated
    }
}

/// The scheduler's limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
}

/// One step, as the step log keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepRecord {
    pub step: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Sequences that computed tokens in this step.
    pub batch: Vec<u64>,
    /// Sequences admitted into the running batch in this step.
    pub joined: Vec<u64>,
    /// Sequences that finished (or were dropped or preempted) in this step.
    pub left: Vec<u64>,
    pub preempted: Vec<u64>,
    pub prefill_tokens: usize,
    pub decode_seqs: usize,
    pub waiting: usize,
    pub kv_blocks_used: usize,
}

pub struct Batcher {
    limits: Limits,
    cost: CostModel,
    kv: KvCache,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    next_id: u64,
    steps: u64,
    current: StepRecord,
    stats: Arc<ModelStats>,
    telemetry: Arc<Telemetry>,
}

impl Batcher {
    pub fn new(
        limits: Limits,
        cost: CostModel,
        kv: KvCache,
        stats: Arc<ModelStats>,
        telemetry: Arc<Telemetry>,
    ) -> Batcher {
        Batcher {
            limits,
            cost,
            kv,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_id: 0,
            steps: 0,
            current: StepRecord::default(),
            stats,
            telemetry,
        }
    }

    pub fn idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    pub fn enqueue(&mut self, sub: Submission) {
        self.next_id += 1;
        self.waiting.push_back(Seq {
            id: self.next_id,
            sub,
            generated: 0,
            computed: 0,
            scheduled: 0,
            holding: Holding::default(),
            published: 0,
            cached_tokens: 0,
            preemptions: 0,
            admitted_ns: None,
            chunk_ns: Vec::new(),
        });
        self.publish_gauges();
    }

    /// Plans the next step at `now_ns`; returns its duration in µs, or `None` when nothing runs.
    pub fn schedule(&mut self, now_ns: u64) -> Option<u64> {
        self.steps += 1;
        self.current = StepRecord { step: self.steps, start_ns: now_ns, ..Default::default() };
        self.drop_abandoned(now_ns);
        let mut budget = self.limits.max_num_batched_tokens;
        let mut preempted_any = false;
        let mut i = 0;
        while i < self.running.len() {
            let seq = &self.running[i];
            let n = (seq.len() - seq.computed).min(budget);
            let need = self.kv.blocks_for(seq.computed + n);
            if n == 0 {
                self.running[i].scheduled = 0;
                i += 1;
                continue;
            }
            // Make room by preempting the latest admitted sequences, this one last.
            let mut fits = self.kv.grow(&mut self.running[i].holding, need);
            while !fits && self.running.len() > i + 1 {
                let victim = self.running.pop().expect("more than i sequences run");
                self.preempt(victim);
                preempted_any = true;
                fits = self.kv.grow(&mut self.running[i].holding, need);
            }
            if !fits {
                let me = self.running.remove(i);
                self.preempt(me);
                preempted_any = true;
                break;
            }
            self.running[i].scheduled = n;
            budget -= n;
            i += 1;
        }
        // As vLLM, a step that had to preempt admits nobody.
        while !preempted_any && budget > 0 && self.running.len() < self.limits.max_num_seqs {
            let Some(seq) = self.waiting.front_mut() else { break };
            let Some(n) = admit(&mut self.kv, seq, budget) else { break };
            let mut seq = self.waiting.pop_front().expect("front exists");
            seq.scheduled = n;
            budget -= n;
            if seq.admitted_ns.is_none() {
                seq.admitted_ns = Some(now_ns);
                self.telemetry.prefix_lookup(seq.sub.prompt_len, seq.cached_tokens);
            }
            self.current.joined.push(seq.id);
            self.running.push(seq);
        }
        let mut prefill_tokens = 0;
        let mut decode_seqs = 0;
        for seq in self.running.iter().filter(|s| s.scheduled > 0) {
            self.current.batch.push(seq.id);
            if seq.scheduled == 1 && seq.generated > 0 {
                decode_seqs += 1;
            } else {
                prefill_tokens += seq.scheduled;
            }
        }
        self.current.prefill_tokens = prefill_tokens;
        self.current.decode_seqs = decode_seqs;
        self.current.waiting = self.waiting.len();
        self.current.kv_blocks_used = self.kv.used();
        self.publish_gauges();
        if self.current.batch.is_empty() {
            return None;
        }
        Some(self.cost.step_us(prefill_tokens, decode_seqs))
    }

    /// Ends the step planned last at `now_ns`: computed tokens are counted, each sequence whose
    /// whole context is computed emits its next token, and finished ones leave. Returns the step.
    pub fn complete(&mut self, now_ns: u64) -> StepRecord {
        let block = self.kv.block_size;
        let mut i = 0;
        while i < self.running.len() {
            let seq = &mut self.running[i];
            let n = std::mem::take(&mut seq.scheduled);
            seq.computed += n;
            let full_prompt_blocks = (seq.computed.min(seq.sub.prompt_len) / block).min(seq.sub.hashes.len());
            while seq.published < full_prompt_blocks {
                if seq.published == seq.holding.shared.len() {
                    self.kv.publish(&mut seq.holding, seq.sub.hashes[seq.published]);
                }
                seq.published += 1;
            }
            if n > 0 && seq.computed == seq.len() {
                if seq.generated < seq.sub.target {
                    let index = seq.generated;
                    seq.generated += 1;
                    let gap = seq.chunk_ns.last().map(|&last| now_ns.saturating_sub(last));
                    seq.chunk_ns.push(now_ns);
                    self.telemetry.token(now_ns.saturating_sub(seq.sub.arrival_ns), gap);
                    // A client gone since the step began is dropped at the next one.
                    let _ = seq.sub.events.send(Event::Token { index, last: seq.generated == seq.sub.target });
                }
                if seq.generated == seq.sub.target {
                    let seq = self.running.remove(i);
                    self.finish(seq, now_ns, false);
                    continue;
                }
            }
            i += 1;
        }
        self.current.end_ns = now_ns;
        self.current.kv_blocks_used = self.kv.used();
        self.publish_gauges();
        std::mem::take(&mut self.current)
    }

    fn preempt(&mut self, mut seq: Seq) {
        self.kv.release(&mut seq.holding);
        seq.computed = 0;
        seq.scheduled = 0;
        seq.published = 0;
        seq.preemptions += 1;
        self.current.preempted.push(seq.id);
        self.current.left.push(seq.id);
        self.telemetry.preempted();
        self.waiting.push_front(seq);
    }

    /// Drops sequences whose client stopped listening, freeing their blocks.
    fn drop_abandoned(&mut self, now_ns: u64) {
        let (gone, kept): (Vec<Seq>, Vec<Seq>) = self.running.drain(..).partition(|s| s.sub.events.is_closed());
        self.running = kept;
        let (gone_waiting, kept): (Vec<Seq>, Vec<Seq>) = self.waiting.drain(..).partition(|s| s.sub.events.is_closed());
        self.waiting = kept.into();
        for seq in gone.into_iter().chain(gone_waiting) {
            self.finish(seq, now_ns, true);
        }
    }

    /// A sequence leaves: its blocks go back, its client hears why, and its record and
    /// statistics are written. `abandoned`: its client went away.
    fn finish(&mut self, mut seq: Seq, now_ns: u64, abandoned: bool) {
        self.kv.release(&mut seq.holding);
        self.current.left.push(seq.id);
        let reason = if abandoned { FinishReason::Abort } else { seq.sub.reason };
        let admitted = seq.admitted_ns.unwrap_or(now_ns);
        let arrival = seq.sub.arrival_ns;
        let ns = |d: u64| std::time::Duration::from_nanos(d);
        // Triton counts a decoupled request a success once its model took it, whatever
        // becomes of its responses, so one whose client left is a success too.
        let compute = ComputeTimes { infer: ns(now_ns.saturating_sub(admitted)), ..Default::default() };
        self.stats.record_success(ns(now_ns.saturating_sub(arrival)), ns(admitted.saturating_sub(arrival)), compute);
        self.stats.record_execution(1, compute);
        if reason != FinishReason::Abort {
            self.telemetry.finished(
                reason == FinishReason::Length,
                now_ns.saturating_sub(arrival),
                admitted.saturating_sub(arrival),
            );
        }
        // The record first: a client that reads it after its answer finds it.
        if let Some(log) = &seq.sub.log {
            log.write(&RequestRecord {
                id: std::mem::take(&mut seq.sub.request_id),
                model: std::mem::take(&mut seq.sub.model),
                arrival_ns: arrival,
                admitted_ns: seq.admitted_ns,
                first_chunk_ns: seq.chunk_ns.first().copied(),
                first_read_ns: Some(seq.sub.first_read_ns.load(Ordering::Relaxed)).filter(|&ns| ns != 0),
                finish_ns: now_ns,
                chunk_ns: std::mem::take(&mut seq.chunk_ns),
                prompt_tokens: seq.sub.prompt_len,
                completion_tokens: seq.generated,
                reasoning_tokens: seq.generated.min(seq.sub.reasoning_tokens),
                cached_tokens: seq.cached_tokens,
                preemptions: seq.preemptions,
                finish_reason: reason.as_str(),
            });
        }
        let _ = seq.sub.events.send(Event::Done(Finish {
            reason,
            prompt_tokens: seq.sub.prompt_len,
            completion_tokens: seq.generated,
            cached_tokens: seq.cached_tokens,
            reasoning_tokens: seq.generated.min(seq.sub.reasoning_tokens),
        }));
    }

    fn publish_gauges(&self) {
        self.telemetry.gauges(self.running.len(), self.waiting.len(), self.kv.used(), self.kv.capacity);
    }
}

/// Admits `seq` if its first chunk fits: leading prompt blocks found in the prefix cache are
/// shared (always leaving one token to compute), the rest of the chunk gets new blocks. Returns
/// the chunk's token count.
fn admit(kv: &mut KvCache, seq: &mut Seq, budget: usize) -> Option<usize> {
    let len = seq.len();
    let hits = kv.leading_hits(&seq.sub.hashes).min((len - 1) / kv.block_size);
    kv.share(&mut seq.holding, &seq.sub.hashes, hits);
    let computed = hits * kv.block_size;
    let n = (len - computed).min(budget);
    if !kv.grow(&mut seq.holding, kv.blocks_for(computed + n)) {
        kv.release(&mut seq.holding);
        return None;
    }
    seq.computed = computed;
    seq.published = hits;
    if seq.admitted_ns.is_none() {
        seq.cached_tokens = computed;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    fn batcher(max_num_seqs: usize, budget: usize, blocks: usize) -> Batcher {
        let limits = Limits { max_num_seqs, max_num_batched_tokens: budget };
        let cost = CostModel { step_us: 1000.0, decode_us_per_seq: 10.0, prefill_us_per_token: 1.0 };
        Batcher::new(limits, cost, KvCache::new(4, blocks), Default::default(), Default::default())
    }

    fn submit(b: &mut Batcher, prompt_len: usize, target: usize) -> UnboundedReceiver<Event> {
        let (events, rx) = unbounded_channel();
        b.enqueue(Submission {
            request_id: String::new(),
            model: String::new(),
            prompt_len,
            hashes: vec![],
            target,
            reason: FinishReason::Length,
            reasoning_tokens: 2,
            arrival_ns: 0,
            events,
            first_read_ns: Default::default(),
            log: None,
        });
        rx
    }

    /// Runs steps until idle (at most `limit`), one µs apart; returns the steps.
    fn run(b: &mut Batcher, limit: usize) -> Vec<StepRecord> {
        let mut steps = Vec::new();
        let mut now = 0;
        while !b.idle() && steps.len() < limit {
            if b.schedule(now).is_some() {
                now += 1;
                steps.push(b.complete(now));
            }
        }
        steps
    }

    fn tokens(rx: &mut UnboundedReceiver<Event>) -> (usize, Option<Finish>) {
        let mut n = 0;
        let mut done = None;
        while let Ok(e) = rx.try_recv() {
            match e {
                Event::Token { .. } => n += 1,
                Event::Done(f) => done = Some(f),
            }
        }
        (n, done)
    }

    #[test]
    fn a_long_prompt_is_prefilled_in_chunks_while_others_decode() {
        let mut b = batcher(8, 16, 100);
        let mut short = submit(&mut b, 4, 20);
        let first = run(&mut b, 2);
        assert_eq!(first[0].prefill_tokens, 4);
        let mut long = submit(&mut b, 40, 3);
        let steps = run(&mut b, 100);
        // The decoding sequence takes 1 token of each 16-token budget; the prompt takes 15.
        assert_eq!(steps[0].prefill_tokens, 15);
        assert_eq!(steps[0].decode_seqs, 1);
        assert_eq!(tokens(&mut short).0, 20);
        assert_eq!(
            tokens(&mut long),
            (
                3,
                Some(Finish {
                    reason: FinishReason::Length,
                    prompt_tokens: 40,
                    completion_tokens: 3,
                    cached_tokens: 0,
                    reasoning_tokens: 2,
                })
            )
        );
    }

    #[test]
    fn a_full_cache_preempts_the_latest_sequence_and_recomputes_it() {
        // 4 blocks of 4 tokens; each sequence grows to 3 blocks, so both cannot finish together.
        let mut b = batcher(8, 64, 4);
        let mut a = submit(&mut b, 4, 8);
        let mut c = submit(&mut b, 4, 8);
        let steps = run(&mut b, 200);
        assert!(steps.iter().any(|s| !s.preempted.is_empty()), "nothing was preempted");
        assert_eq!(tokens(&mut a).0, 8);
        assert_eq!(tokens(&mut c).0, 8);
        assert!(b.idle());
        assert_eq!(b.kv.used(), 0);
    }

    #[test]
    fn max_num_seqs_bounds_the_batch_and_queued_sequences_join_as_others_leave() {
        let mut b = batcher(2, 64, 100);
        let mut rxs: Vec<_> = (0..5).map(|i| submit(&mut b, 4, 3 + i)).collect();
        let steps = run(&mut b, 100);
        assert!(steps.iter().all(|s| s.batch.len() <= 2));
        assert!(steps.iter().skip(1).any(|s| !s.joined.is_empty()), "queued sequences never joined");
        assert!(
            steps.iter().any(|s| !s.left.is_empty() && s.batch.len() > s.left.len()),
            "nobody left a running batch"
        );
        for (i, rx) in rxs.iter_mut().enumerate() {
            assert_eq!(tokens(rx).0, 3 + i);
        }
    }

    #[test]
    fn a_dropped_receiver_frees_its_blocks_at_the_next_step() {
        let mut b = batcher(8, 64, 100);
        let rx = submit(&mut b, 20, 1000);
        run(&mut b, 3);
        assert!(b.kv.used() > 0);
        drop(rx);
        b.schedule(10);
        assert_eq!(b.kv.used(), 0);
        assert!(b.idle());
    }
}
