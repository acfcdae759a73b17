//! Stateful sequences, as perf_analyzer's sequence manager forms them: a fixed table of
//! sequence slots (one per closed-loop worker, or `--num-of-sequences` in an open loop), each
//! walking one sequence at a time. A new sequence takes the next id of the range (wrapping; an
//! id still in use by another slot is not taken), a length of `--sequence-length` ±
//! `--sequence-length-variation` % drawn from a seeded generator, or with `--input-data`
//! streams a stream drawn at random and its length. The first request carries the start flag,
//! the last the end flag.
//!
//! Memory is bounded by the slot count: a slot holds its id, counters and, when answers are
//! validated, one running sum of the summed input's values.

use std::ops::Range;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::client::{CorrelationId, SequenceFlags};

/// How the load forms sequences.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceSpec {
    /// Base length of a sequence.
    pub length: u64,
    /// The length was given: it wins over a data stream's length.
    pub length_given: bool,
    /// Each length is drawn within ± this percent of `length`.
    pub variation_pct: f64,
    /// Ids `id_start .. id_start + id_range`, wrapping.
    pub id_start: u64,
    pub id_range: u64,
    /// Open loop: sequences kept alive at once.
    pub count: u64,
    /// Open loop: at most one request of a sequence in flight.
    pub serial: bool,
    pub seed: u64,
    /// The prepared requests of each data stream (indices into the load's steps). Empty: all
    /// steps form one stream, cycled, and lengths come from `length`.
    pub streams: Arc<[Range<usize>]>,
    /// Validation: per step, the values the model sums over a sequence (`accumulate`); the
    /// check then gets each sequence's running sum.
    pub sums: Option<Arc<[Vec<i64>]>>,
}

impl SequenceSpec {
    /// perf_analyzer's defaults over `steps` prepared requests, one stream.
    pub fn new(seed: u64) -> SequenceSpec {
        SequenceSpec {
            length: 20,
            length_given: false,
            variation_pct: 20.0,
            id_start: 1,
            id_range: u32::MAX as u64,
            count: 4,
            serial: false,
            seed,
            streams: Arc::from(Vec::new()),
            sums: None,
        }
    }
}

/// One step of a sequence, as the engine sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceStep {
    /// Which prepared request.
    pub step: usize,
    pub flags: SequenceFlags,
    /// The sequence's running sum including this step (validation only).
    pub sum: Option<Vec<i64>>,
    /// This step ends a sequence of `length` steps.
    pub ends: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct Slot {
    /// 0: never used.
    id: u64,
    remaining: u64,
    length: u64,
    stream: usize,
    busy: bool,
    sum: Vec<i64>,
}

/// The slots and the id and length generators.
pub struct SequenceTable {
    spec: SequenceSpec,
    slots: Vec<Slot>,
    next_id: u64,
    rng: ChaCha8Rng,
    /// Serial open loop: slots free to take their next step, oldest first.
    free: std::collections::VecDeque<usize>,
    steps: usize,
}

impl SequenceTable {
    /// A table of `slots` sequences over `steps` prepared requests.
    pub fn new(spec: SequenceSpec, slots: usize, steps: usize) -> SequenceTable {
        let rng = ChaCha8Rng::seed_from_u64(spec.seed);
        SequenceTable { spec, slots: vec![Slot::default(); slots], next_id: 0, rng, free: (0..slots).collect(), steps }
    }

    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// perf_analyzer's id allocation: the next id of the range, or this slot's previous id if
    /// the next is still in use by another slot.
    fn next_id(&mut self, slot: usize) -> u64 {
        let id = self.next_id % self.spec.id_range.max(1) + self.spec.id_start;
        self.next_id += 1;
        if self.slots.iter().enumerate().any(|(i, s)| i != slot && s.id == id && s.remaining > 0) {
            self.slots[slot].id
        } else {
            id
        }
    }

    /// `length` ± `variation_pct`, at least 1 (perf_analyzer's draw, from a seeded generator).
    fn random_length(&mut self) -> u64 {
        let base = self.spec.length as f64;
        let offset = (self.rng.random_range(-1.0..=1.0) * self.spec.variation_pct / 100.0 * base) as i64;
        (self.spec.length as i64 + offset).max(1) as u64
    }

    fn start_sequence(&mut self, slot: usize) {
        let id = self.next_id(slot);
        let streams = self.spec.streams.len();
        let stream = if streams > 1 { self.rng.random_range(0..streams) } else { 0 };
        let length = match self.spec.streams.get(stream) {
            Some(range) if !self.spec.length_given => range.len().max(1) as u64,
            _ => self.random_length(),
        };
        let s = &mut self.slots[slot];
        s.id = id;
        s.stream = stream;
        s.length = length;
        s.remaining = length;
        s.sum.clear();
    }

    /// The next step of `slot`'s sequence, starting a new sequence when the last one ended.
    pub fn next(&mut self, slot: usize) -> SequenceStep {
        if self.slots[slot].remaining == 0 {
            self.start_sequence(slot);
        }
        let s = &self.slots[slot];
        let position = (s.length - s.remaining) as usize;
        let step = match self.spec.streams.get(s.stream) {
            Some(range) if !range.is_empty() => range.start + position % range.len(),
            _ => position % self.steps.max(1),
        };
        let flags =
            SequenceFlags { id: CorrelationId::Number(s.id), start: s.remaining == s.length, end: s.remaining == 1 };
        let ends = flags.end.then_some(s.length);
        let sum = self.spec.sums.clone().map(|sums| {
            let values = &sums[step % sums.len()];
            let s = &mut self.slots[slot];
            if s.sum.len() != values.len() {
                s.sum = vec![0; values.len()];
            }
            s.sum.iter_mut().zip(values).for_each(|(acc, v)| *acc = acc.wrapping_add(*v));
            s.sum.clone()
        });
        self.slots[slot].remaining -= 1;
        SequenceStep { step, flags, sum, ends }
    }

    /// The final step of a sequence cut short (the load stops): its end flag, sent so the
    /// server frees the sequence (perf_analyzer's CompleteOngoingSequences). `None` when the
    /// slot has no unfinished sequence.
    pub fn finish(&mut self, slot: usize) -> Option<SequenceStep> {
        if self.slots[slot].remaining == 0 {
            return None;
        }
        self.slots[slot].remaining = 1;
        Some(self.next(slot))
    }

    /// Open loop: the slot of the next request. Without `serial`, any slot at random (requests
    /// of one sequence may overlap, as in perf_analyzer); with it, the oldest free slot, or
    /// `None` when every sequence has a request in flight.
    pub fn pick(&mut self) -> Option<usize> {
        if !self.spec.serial {
            return Some(self.rng.random_range(0..self.slots.len()));
        }
        let slot = self.free.pop_front()?;
        self.slots[slot].busy = true;
        Some(slot)
    }

    /// Open loop, serial: `slot`'s request was answered.
    pub fn release(&mut self, slot: usize) {
        if self.spec.serial && self.slots[slot].busy {
            self.slots[slot].busy = false;
            self.free.push_back(slot);
        }
    }

    /// Slots with an unfinished sequence and no request in flight.
    pub fn unfinished(&self) -> Vec<usize> {
        (0..self.slots.len()).filter(|&i| self.slots[i].remaining > 0 && !self.slots[i].busy).collect()
    }

    /// Slots with an unfinished sequence whose request is still in flight (serial open loop).
    pub fn unfinished_in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.remaining > 0 && s.busy).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(length: u64, variation_pct: f64) -> SequenceSpec {
        SequenceSpec { length, variation_pct, ..SequenceSpec::new(3) }
    }

    #[test]
    fn a_slot_walks_one_sequence_with_start_and_end_flags() {
        let mut t = SequenceTable::new(spec(3, 0.0), 1, 1);
        let steps: Vec<SequenceStep> = (0..6).map(|_| t.next(0)).collect();
        let flags: Vec<(u64, bool, bool)> = steps
            .iter()
            .map(|s| match s.flags.id {
                CorrelationId::Number(id) => (id, s.flags.start, s.flags.end),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            flags,
            vec![
                (1, true, false),
                (1, false, false),
                (1, false, true),
                (2, true, false),
                (2, false, false),
                (2, false, true)
            ]
        );
        assert_eq!(steps[2].ends, Some(3));
        assert_eq!(steps[1].ends, None);
    }

    #[test]
    fn ids_wrap_within_the_range_and_skip_ids_in_use() {
        let mut t = SequenceTable::new(SequenceSpec { id_start: 10, id_range: 3, ..spec(1, 0.0) }, 1, 1);
        let ids: Vec<CorrelationId> = (0..5).map(|_| t.next(0).flags.id).collect();
        let n = CorrelationId::Number;
        assert_eq!(ids, vec![n(10), n(11), n(12), n(10), n(11)]);
        // Two slots, range 2: slot 1's next id (10) is held by slot 0, so it keeps its own.
        let mut t = SequenceTable::new(SequenceSpec { id_start: 10, id_range: 2, ..spec(2, 0.0) }, 2, 1);
        assert_eq!(t.next(0).flags.id, n(10));
        assert_eq!(t.next(1).flags.id, n(11));
        t.next(1);
        assert_eq!(t.next(1).flags.id, n(11), "10 is still slot 0's");
    }

    #[test]
    fn lengths_vary_within_the_percentage_and_repeat_with_the_seed() {
        let lengths = |seed| {
            let mut t = SequenceTable::new(SequenceSpec { seed, ..spec(20, 20.0) }, 1, 1);
            (0..200).filter_map(|_| t.next(0).ends).collect::<Vec<u64>>()
        };
        let a = lengths(1);
        assert!(a.iter().all(|&l| (16..=24).contains(&l)), "{a:?}");
        assert!(a.iter().any(|&l| l != 20), "lengths vary");
        assert_eq!(a, lengths(1));
        assert_eq!(SequenceTable::new(spec(1, 300.0), 1, 1).random_length().max(1), 1);
    }

    #[test]
    fn streams_are_sequences_of_their_own_length_and_steps() {
        let streams: Arc<[Range<usize>]> = vec![0..2, 2..5].into();
        let mut t = SequenceTable::new(SequenceSpec { streams: streams.clone(), ..spec(20, 20.0) }, 1, 5);
        for _ in 0..20 {
            let first = t.next(0);
            assert!(first.flags.start);
            let range = streams.iter().find(|r| r.start == first.step).expect("a sequence starts a stream").clone();
            let mut steps = vec![first.step];
            for _ in 1..range.len() {
                steps.push(t.next(0).step);
            }
            assert_eq!(steps, range.collect::<Vec<_>>());
        }
        // A given length wins; the stream's steps are cycled.
        let mut t = SequenceTable::new(
            SequenceSpec { streams: std::iter::once(0..2).collect(), length_given: true, ..spec(3, 0.0) },
            1,
            2,
        );
        let steps: Vec<usize> = (0..3).map(|_| t.next(0).step).collect();
        assert_eq!(steps, vec![0, 1, 0]);
    }

    #[test]
    fn running_sums_restart_with_each_sequence() {
        let sums: Arc<[Vec<i64>]> = vec![vec![2], vec![5]].into();
        let mut t = SequenceTable::new(SequenceSpec { sums: Some(sums), ..spec(2, 0.0) }, 1, 2);
        let got: Vec<Vec<i64>> = (0..4).map(|_| t.next(0).sum.unwrap()).collect();
        assert_eq!(got, vec![vec![2], vec![7], vec![2], vec![7]]);
    }

    #[test]
    fn serial_picks_only_free_slots_and_finish_ends_the_sequence() {
        let mut t = SequenceTable::new(SequenceSpec { serial: true, count: 2, ..spec(5, 0.0) }, 2, 1);
        let (a, b) = (t.pick().unwrap(), t.pick().unwrap());
        assert_ne!(a, b);
        assert_eq!(t.pick(), None);
        t.next(a);
        t.release(a);
        assert_eq!(t.pick(), Some(a));
        t.release(a);
        assert_eq!(t.unfinished(), vec![a]);
        let last = t.finish(a).unwrap();
        assert!(last.flags.end && !last.flags.start);
        assert_eq!(t.finish(a), None);
    }

    // The engine driving sequences through the FakeClient.

    use std::collections::HashMap;
    use std::time::Duration;

    use crate::load::fake::FakeClient;
    use crate::load::{LoadMode, LoadSpec, ResponseCheck, RunningLoad};

    fn on_virtual_time<F: std::future::Future>(body: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(body)
    }

    /// Sends `budget` requests at `mode` and returns the client and the merged window.
    async fn drive(
        mode: LoadMode,
        sequences: SequenceSpec,
        budget: u64,
        steps: usize,
        check: Option<ResponseCheck>,
    ) -> (Arc<FakeClient>, crate::measure::recorder::WindowRecorder) {
        let client = Arc::new(FakeClient::with_latency(Duration::from_millis(5)));
        let spec = LoadSpec { request_budget: Some(budget), sequences: Some(sequences), ..LoadSpec::new(mode) };
        let load = RunningLoad::start_checked(client.clone(), vec![(); steps].into(), &spec, check).unwrap();
        load.wait_completed(budget).await.unwrap();
        let window = load.take_window();
        load.stop().await;
        (client, window)
    }

    /// The log split into sequences: id → the (start, end) flags of its requests in order.
    fn by_sequence(log: &[(u64, bool, bool)]) -> Vec<(u64, Vec<(bool, bool)>)> {
        let mut out: Vec<(u64, Vec<(bool, bool)>)> = Vec::new();
        let mut open: HashMap<u64, usize> = HashMap::new();
        for &(id, start, end) in log {
            let at = match open.get(&id) {
                Some(&i) if !start => i,
                _ => {
                    out.push((id, Vec::new()));
                    out.len() - 1
                }
            };
            out[at].1.push((start, end));
            if end {
                open.remove(&id);
            } else {
                open.insert(id, at);
            }
        }
        out
    }

    #[test]
    fn closed_loop_slots_walk_whole_sequences_in_order_one_request_at_a_time() {
        on_virtual_time(async {
            let spec = SequenceSpec { length: 4, variation_pct: 0.0, ..SequenceSpec::new(1) };
            let (client, window) = drive(LoadMode::Concurrency(3), spec, 60, 1, None).await;
            assert_eq!(client.sequence_overlaps.load(std::sync::atomic::Ordering::Acquire), 0);
            let log = client.sequence_log.lock().clone();
            let sequences = by_sequence(&log);
            // 60 requests are 15 whole sequences; nothing was cut short, so nothing more was sent.
            assert_eq!(log.len(), 60);
            assert_eq!(sequences.len(), 15);
            for (id, flags) in &sequences {
                assert_eq!(flags, &vec![(true, false), (false, false), (false, false), (false, true)], "sequence {id}");
            }
            // perf_analyzer's allocation: ids 1, 2, 3, … in the order sequences start.
            let mut ids: Vec<u64> = sequences.iter().map(|(id, _)| *id).collect();
            ids.sort_unstable();
            assert_eq!(ids, (1..=15).collect::<Vec<u64>>());
            assert_eq!((window.sequences, window.sequence_steps), (15, 60));
        });
    }

    #[test]
    fn a_stopped_load_ends_its_unfinished_sequences() {
        on_virtual_time(async {
            let spec =
                SequenceSpec { length: 10, variation_pct: 0.0, id_start: 5, id_range: 4, ..SequenceSpec::new(1) };
            let (client, window) = drive(LoadMode::Concurrency(2), spec, 6, 1, None).await;
            let log = client.sequence_log.lock().clone();
            // Two sequences of 3 requests each, then each gets its end flag (unrecorded).
            assert_eq!(log.len(), 8);
            let sequences = by_sequence(&log);
            assert_eq!(sequences.len(), 2);
            for (id, flags) in &sequences {
                assert!((5..9).contains(id), "ids stay in the range: {id}");
                assert_eq!(flags.first(), Some(&(true, false)));
                assert_eq!(flags.last(), Some(&(false, true)));
                assert_eq!(flags.len(), 4);
            }
            assert_eq!(window.sequences, 0, "cut-short sequences are not counted");
        });
    }

    #[test]
    fn the_check_gets_each_sequences_running_sum() {
        on_virtual_time(async {
            let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let record = seen.clone();
            let check: ResponseCheck = Arc::new(move |step, sum: Option<&[i64]>, _: &crate::client::InferResult| {
                record.lock().push((step, sum.map(<[i64]>::to_vec)));
                Ok(())
            });
            let sums: Arc<[Vec<i64>]> = vec![vec![1], vec![10], vec![100]].into();
            let spec = SequenceSpec {
                length: 3,
                variation_pct: 0.0,
                streams: std::iter::once(0..3).collect(),
                length_given: true,
                sums: Some(sums),
                ..SequenceSpec::new(1)
            };
            drive(LoadMode::Concurrency(1), spec, 6, 3, Some(check)).await;
            let got = seen.lock().clone();
            let want: Vec<(usize, Option<Vec<i64>>)> = [(0, 1), (1, 11), (2, 111), (0, 1), (1, 11), (2, 111)]
                .iter()
                .map(|&(s, v)| (s, Some(vec![v])))
                .collect();
            assert_eq!(got, want);
        });
    }

    #[test]
    fn a_failed_check_with_validate_outputs_is_a_failed_request_not_the_end() {
        on_virtual_time(async {
            let check: ResponseCheck =
                Arc::new(
                    |step, _: Option<&[i64]>, _: &crate::client::InferResult| {
                        if step == 1 {
                            Err("Output doesn't match expected output".into())
                        } else {
                            Ok(())
                        }
                    },
                );
            let client = Arc::new(FakeClient::with_latency(Duration::from_millis(2)));
            let spec = LoadSpec {
                request_budget: Some(20),
                check_fatal: false,
                sequences: Some(SequenceSpec { length: 2, variation_pct: 0.0, ..SequenceSpec::new(1) }),
                ..LoadSpec::new(LoadMode::Concurrency(2))
            };
            let load = RunningLoad::start_checked(client, vec![(); 2].into(), &spec, Some(check)).unwrap();
            load.wait_completed(20).await.unwrap();
            let window = load.take_window();
            assert!(load.fatal().is_none());
            load.stop().await;
            assert_eq!((window.ok, window.failed), (10, 10));
        });
    }

    #[test]
    fn open_loop_keeps_its_sequences_alive_and_serial_ones_never_overlap() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let schedule =
                crate::load::Schedule::Rate { per_second: 2000.0, distribution: crate::load::Distribution::Constant };
            let spec = SequenceSpec { length: 5, variation_pct: 0.0, count: 3, serial: true, ..SequenceSpec::new(1) };
            let (client, _) = drive(LoadMode::Schedule(schedule), spec, 100, 1, None).await;
            assert_eq!(client.sequence_overlaps.load(std::sync::atomic::Ordering::Acquire), 0);
            let log = client.sequence_log.lock().clone();
            let sequences = by_sequence(&log);
            for (id, flags) in &sequences {
                assert_eq!(flags.first().map(|f| f.0), Some(true), "sequence {id} starts with the start flag");
                assert_eq!(flags.last().map(|f| f.1), Some(true), "sequence {id} ends with the end flag");
                assert!(flags.len() <= 5);
            }
            // Three sequences at a time: the first three ids start together (in the log in
            // whichever order their tasks ran).
            let mut firsts: Vec<u64> = sequences.iter().take(3).map(|(id, _)| *id).collect();
            firsts.sort_unstable();
            assert_eq!(firsts, vec![1, 2, 3]);
        });
    }
}
