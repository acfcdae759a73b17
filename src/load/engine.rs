//! The engine: drives one [`InferClient`] at one load shape until stopped, recording every
//! request into per-worker [`WindowRecorder`]s that the measurement loop swaps out at window
//! boundaries.
//!
//! Closed loop: N tokio tasks, each sending its next request when the previous one returns.
//! Open loop: a dispatcher thread sleeps until each request's intended time (from the
//! [`Pacer`]) and spawns it on the runtime. Latency counts from the intended time, so a slow
//! server's backlog shows up in the numbers (no coordinated omission, as in wrk2). A request
//! that starts more than [`LATE_SLACK`] after its intended time is counted late; one that falls
//! due while [`LoadSpec::max_in_flight`] requests are outstanding is not sent and counted missed.
//!
//! Request times come from tokio's clock (the same as the OS's unless a test pauses it), so the
//! closed loop can run on virtual time in tests.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::sequence::{SequenceSpec, SequenceStep, SequenceTable};
use super::{LoadError, LoadMode, Pacer, DRAIN_TIMEOUT};
use crate::client::{ClientError, CorrelationId, InferClient, InferResult, STALL_TIMEOUT};
use crate::measure::recorder::WindowRecorder;
use crate::results::{RequestRecord, ResponseRecord};

/// How late a request may start before it counts as late. The dispatcher sleeps with the OS
/// timer (tens of µs of overshoot) and the spawned task then waits for a runtime thread; on a
/// busy 2-core box both add up to a few hundred µs, which is normal, not "late".
pub const LATE_SLACK: Duration = Duration::from_millis(1);

/// Recorders are sharded: workers beyond this count share them (a histogram is ~200 KB).
const MAX_SHARDS: usize = 16;
/// Longest single sleep of the dispatcher, so a stop request is seen promptly.
const DISPATCH_SLICE: Duration = Duration::from_millis(20);

/// Checks the answer to request `index` (of the prepared requests) against what it must hold
/// (`validation_data`, or with sequences the running sum of the sequence so far, when
/// [`SequenceSpec::sums`] is given). An error ends the load with that reason, as
/// perf_analyzer's thread error ends its run, unless [`LoadSpec::check_fatal`] is false: then
/// it counts as a failed request.
pub type ResponseCheck = Arc<dyn Fn(usize, Option<&[i64]>, &InferResult) -> Result<(), String> + Send + Sync>;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadSpec {
    pub mode: LoadMode,
    /// Send at most this many requests (`--request-count`, warmup); `None` runs until stopped.
    pub request_budget: Option<u64>,
    /// Open loop: outstanding requests allowed before due requests are skipped as missed.
    pub max_in_flight: u64,
    /// Keep every request's send/response wall-clock times (`--profile-export-file`).
    pub log_requests: bool,
    /// A sequence model: requests go out as steps of sequences.
    pub sequences: Option<SequenceSpec>,
    /// A failed check ends the load (true), or counts as a failed request (`--validate-outputs`).
    pub check_fatal: bool,
    /// Requests in flight with none answered for this long end the load (`--stall-timeout`).
    pub stall_limit: Duration,
    /// Closed loop: the workers start evenly over this long, the first at once
    /// (`--concurrency-ramp-duration`, [`super::shape::slot_opens_at`]).
    pub concurrency_ramp: Option<Duration>,
}

impl LoadSpec {
    pub fn new(mode: LoadMode) -> LoadSpec {
        LoadSpec {
            mode,
            request_budget: None,
            max_in_flight: 1024,
            log_requests: false,
            sequences: None,
            check_fatal: true,
            stall_limit: STALL_TIMEOUT,
            concurrency_ramp: None,
        }
    }
}

/// Maps monotonic instants to wall-clock nanoseconds since the epoch, for the profile export.
#[derive(Clone, Copy)]
struct WallClock {
    origin: Instant,
    origin_epoch_ns: u64,
}

impl WallClock {
    fn now() -> WallClock {
        let epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        WallClock { origin: Instant::now(), origin_epoch_ns: epoch.as_nanos() as u64 }
    }
    fn epoch_ns(&self, t: Instant) -> u64 {
        self.origin_epoch_ns + t.saturating_duration_since(self.origin).as_nanos() as u64
    }
}

/// State shared by the workers and the measurement loop.
struct Shared {
    recorders: Vec<Mutex<WindowRecorder>>,
    stop: AtomicBool,
    /// Requests that finished (well or not) since the load started.
    completed: AtomicU64,
    /// Count windows: wake the measurement loop once `completed` reaches this.
    wake_at: AtomicU64,
    progress: Notify,
    fatal: Mutex<Option<ClientError>>,
    budget: Option<AtomicU64>,
    in_flight: AtomicU64,
    /// Requests started so far; picks the data step of the next one (steps are cycled).
    started: AtomicU64,
    clock: WallClock,
    log_requests: bool,
    /// Validation: answers are decoded and checked (the hot path without it is unchanged).
    check: Option<ResponseCheck>,
    check_fatal: bool,
    /// Sequence models: the sequence slots (a closed-loop worker owns slot `worker`).
    sequences: Option<Mutex<SequenceTable>>,
    /// When the load started, and when (µs after) the server last answered a request, even
    /// with an error: a request timed out with no answer for as long ends the load.
    began: Instant,
    last_answer_us: AtomicU64,
    stall_limit: Duration,
}

impl Shared {
    /// Takes one request from the budget; false when it is spent.
    fn take_ticket(&self) -> bool {
        match &self.budget {
            None => true,
            Some(left) => left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok(),
        }
    }

    fn finish(&self) {
        let done = self.completed.fetch_add(1, Ordering::AcqRel) + 1;
        if done >= self.wake_at.load(Ordering::Acquire) {
            self.progress.notify_one();
        }
    }

    fn set_fatal(&self, error: ClientError) {
        self.fatal.lock().get_or_insert(error);
        self.stop.store(true, Ordering::Release);
        self.progress.notify_one();
    }

    /// Sends the next data step (or `sequence`'s step) and records it. `intended` is when it
    /// should have gone out.
    async fn send_one<C: InferClient>(
        &self,
        client: &C,
        steps: &[C::Prepared],
        shard: usize,
        intended: Instant,
        late: bool,
        sequence: Option<SequenceStep>,
    ) {
        let step = match &sequence {
            Some(s) => s.step,
            None => self.started.fetch_add(1, Ordering::Relaxed) as usize % steps.len(),
        };
        let request = &steps[step];
        let sent = Instant::now();
        // Outputs are decoded only for the profile export and validation, as perf_analyzer does.
        let keep = self.log_requests || self.check.is_some();
        let (mut result, timing) = client.infer_step(request, sequence.as_ref().map(|s| &s.flags), keep).await;
        let done = Instant::now();
        let mut failed_check = false;
        if let (Some(check), Ok(answer)) = (&self.check, &result) {
            if let Err(reason) = check(step, sequence.as_ref().and_then(|s| s.sum.as_deref()), answer) {
                result = Err(ClientError::Invalid(reason));
                failed_check = self.check_fatal;
            }
        }
        {
            let mut rec = self.recorders[shard].lock();
            rec.record_send_lag(sent.saturating_duration_since(intended));
            if late {
                rec.late += 1;
            }
            if let Some(length) = sequence.as_ref().and_then(|s| s.ends) {
                rec.sequences += 1;
                rec.sequence_steps += length;
            }
            match &result {
                Ok(_) => rec.record_ok(done - intended, timing),
                Err(e) => rec.record_failed(e.failure_kind(), e),
            }
            if self.log_requests {
                let responses = match &result {
                    Ok(r) if !r.responses.is_empty() => r
                        .responses
                        .iter()
                        .map(|(at, outputs)| ResponseRecord {
                            ns: self.clock.epoch_ns(tokio::time::Instant::from_std(*at)),
                            outputs: outputs.clone(),
                        })
                        .collect(),
                    _ => vec![ResponseRecord {
                        ns: self.clock.epoch_ns(done),
                        outputs: result.as_ref().map(|r| r.outputs.clone()).unwrap_or_default(),
                    }],
                };
                let sequence_id = sequence.as_ref().and_then(|s| match s.flags.id {
                    CorrelationId::Number(id) if id != 0 => Some(id),
                    _ => None,
                });
                rec.log.push(RequestRecord { send_ns: self.clock.epoch_ns(sent), step, sequence_id, responses });
            }
        }
        match &result {
            Err(ClientError::TimedOut { after }) => {
                let last_answer = Duration::from_micros(self.last_answer_us.load(Ordering::Acquire));
                if self.began.elapsed().saturating_sub(last_answer) >= *after {
                    self.set_fatal(ClientError::Stalled(format!(
                        "no request was answered within --request-timeout ({}s)",
                        after.as_secs_f64()
                    )));
                }
            }
            _ => {
                self.last_answer_us.fetch_max(self.began.elapsed().as_micros() as u64, Ordering::AcqRel);
            }
        }
        if let Err(e) = result {
            // A connection reset by a server that still answers is one failed request (counted
            // above as a reset), not a server gone away: the load goes on.
            let server_up = !failed_check && e.is_connection_lost() && crate::client::server_answers(client).await;
            if (failed_check || e.is_fatal()) && !server_up {
                self.set_fatal(e);
            }
        }
        self.finish();
    }

    /// Sends the end of a sequence cut short by the end of the load, unrecorded, so the server
    /// releases the sequence before the next point.
    async fn end_sequence<C: InferClient>(&self, client: &C, steps: &[C::Prepared], last: SequenceStep) {
        if self.fatal.lock().is_some() {
            return;
        }
        let _ = client.infer_step(&steps[last.step], Some(&last.flags), false).await;
    }
}

/// A load in progress. Dropping it stops the workers (without waiting); prefer [`stop`](Self::stop).
pub struct RunningLoad {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    dispatcher: Option<std::thread::JoinHandle<()>>,
}

impl RunningLoad {
    /// Starts the load on the current tokio runtime. `steps` are the prepared requests (one per
    /// input data step), sent in turn.
    pub fn start<C: InferClient>(
        client: Arc<C>,
        steps: Arc<[C::Prepared]>,
        spec: &LoadSpec,
    ) -> Result<RunningLoad, LoadError> {
        Self::start_checked(client, steps, spec, None)
    }

    /// [`start`](Self::start), checking every answer with `check` when given.
    pub fn start_checked<C: InferClient>(
        client: Arc<C>,
        steps: Arc<[C::Prepared]>,
        spec: &LoadSpec,
        check: Option<ResponseCheck>,
    ) -> Result<RunningLoad, LoadError> {
        if steps.is_empty() {
            return Err(LoadError::NoRequests);
        }
        let shards = match &spec.mode {
            LoadMode::Concurrency(0) => return Err(LoadError::ZeroConcurrency),
            LoadMode::Concurrency(n) => (*n as usize).min(MAX_SHARDS),
            LoadMode::Schedule(_) => MAX_SHARDS,
        };
        let sequences = spec.sequences.clone().map(|seq| {
            let slots = match &spec.mode {
                LoadMode::Concurrency(n) => *n as usize,
                LoadMode::Schedule(_) => seq.count.max(1) as usize,
            };
            Mutex::new(SequenceTable::new(seq, slots, steps.len()))
        });
        let shared = Arc::new(Shared {
            recorders: (0..shards).map(|_| Mutex::new(WindowRecorder::default())).collect(),
            stop: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            wake_at: AtomicU64::new(u64::MAX),
            progress: Notify::new(),
            fatal: Mutex::new(None),
            budget: spec.request_budget.map(AtomicU64::new),
            in_flight: AtomicU64::new(0),
            started: AtomicU64::new(0),
            clock: WallClock::now(),
            log_requests: spec.log_requests,
            check,
            check_fatal: spec.check_fatal,
            sequences,
            began: Instant::now(),
            last_answer_us: AtomicU64::new(0),
            stall_limit: spec.stall_limit,
        });
        let mut load = RunningLoad { shared: shared.clone(), workers: Vec::new(), dispatcher: None };
        match &spec.mode {
            LoadMode::Concurrency(n) => {
                for worker in 0..*n as usize {
                    let (shared, client, steps) = (shared.clone(), client.clone(), steps.clone());
                    let ramp = spec.concurrency_ramp.map(|r| super::shape::slot_opens_at(worker as u64, *n, r));
                    load.workers.push(tokio::spawn(async move {
                        if let Some(opens) = ramp {
                            tokio::time::sleep_until(shared.began + opens).await;
                        }
                        // With sequences, this worker walks slot `worker`'s sequences: each
                        // step goes out once the previous one is answered.
                        let table = shared.sequences.as_ref();
                        while !shared.stop.load(Ordering::Acquire) && shared.take_ticket() {
                            shared.in_flight.fetch_add(1, Ordering::AcqRel);
                            let now = Instant::now();
                            let step = table.map(|t| t.lock().next(worker));
                            shared.send_one(&*client, &steps, worker % shards, now, false, step).await;
                            shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                        }
                        let last = table.and_then(|t| t.lock().finish(worker));
                        if let Some(last) = last {
                            shared.in_flight.fetch_add(1, Ordering::AcqRel);
                            shared.end_sequence(&*client, &steps, last).await;
                            shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                        }
                    }));
                }
            }
            LoadMode::Schedule(schedule) => {
                let pacer = Pacer::new(schedule)?;
                let runtime = tokio::runtime::Handle::current();
                let max_in_flight = spec.max_in_flight;
                load.dispatcher = Some(
                    std::thread::Builder::new()
                        .name("perfbench-dispatch".into())
                        .spawn(move || {
                            dispatch(&shared, &client, &steps, pacer, &runtime, max_in_flight);
                            end_sequences(&shared, &client, &steps, &runtime);
                        })
                        .expect("spawning the dispatcher thread"),
                );
            }
        }
        Ok(load)
    }

    /// Swaps out every worker's recorder and returns their merged observations.
    pub fn take_window(&self) -> WindowRecorder {
        self.take_window_into(WindowRecorder::default())
    }

    /// [`take_window`](Self::take_window), merged into `spare` (emptied first): the recorder of
    /// a window the caller no longer needs. A long point that recycles its dropped windows
    /// allocates no histograms (about 208 KB a window) once it holds all it keeps.
    pub fn take_window_into(&self, mut merged: WindowRecorder) -> WindowRecorder {
        merged.clear();
        for shard in &self.shared.recorders {
            // Merged and emptied in place (the workers wait that long), rather than swapped for a
            // fresh recorder, which allocated a new histogram per shard per window.
            let mut shard = shard.lock();
            merged.merge(&shard);
            shard.clear();
        }
        merged
    }

    /// Requests finished (successfully or not) since the load started.
    pub fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::Acquire)
    }

    /// The error that ended the load, if the server became unreachable.
    pub fn fatal(&self) -> Option<ClientError> {
        self.shared.fatal.lock().clone()
    }

    /// True once the request budget is spent and nothing is outstanding.
    pub fn finished(&self) -> bool {
        let spent = self.shared.budget.as_ref().is_some_and(|b| b.load(Ordering::Acquire) == 0);
        (spent || self.shared.stop.load(Ordering::Acquire)) && self.shared.in_flight.load(Ordering::Acquire) == 0
    }

    /// Waits until `target` requests have finished in total, the load ends, or it fails.
    /// Requests in flight with none answered for the stall limit ([`STALL_TIMEOUT`] unless
    /// [`LoadSpec::stall_limit`] says otherwise) end the load with
    /// [`ClientError::Stalled`].
    pub async fn wait_completed(&self, target: u64) -> Result<(), ClientError> {
        self.shared.wake_at.store(target, Ordering::Release);
        let (mut seen, mut since) = (self.completed(), Instant::now());
        loop {
            if let Some(e) = self.fatal() {
                return Err(e);
            }
            let completed = self.completed();
            if completed >= target || self.finished() {
                return Ok(());
            }
            if completed != seen || self.shared.in_flight.load(Ordering::Acquire) == 0 {
                (seen, since) = (completed, Instant::now());
            } else if since.elapsed() >= self.shared.stall_limit {
                let in_flight = self.shared.in_flight.load(Ordering::Acquire);
                let error = ClientError::Stalled(format!(
                    "none of the {in_flight} requests in flight was answered in {}s (--stall-timeout)",
                    self.shared.stall_limit.as_secs_f64()
                ));
                self.shared.set_fatal(error.clone());
                return Err(error);
            }
            // The timeout covers a budget that ran out with fewer completions than asked for.
            let _ = tokio::time::timeout(Duration::from_millis(50), self.shared.progress.notified()).await;
        }
    }

    /// Waits for `span`, returning early with the error if the server becomes unreachable.
    pub async fn wait_for(&self, span: Duration) -> Result<(), ClientError> {
        let deadline = tokio::time::Instant::now() + span;
        loop {
            if let Some(e) = self.fatal() {
                return Err(e);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
            let _ = tokio::time::timeout_at(deadline, self.shared.progress.notified()).await;
        }
    }

    /// Stops sending, waits up to [`DRAIN_TIMEOUT`] for outstanding requests, then abandons them.
    /// Returns the error that ended the load, if any, including one found while draining: a
    /// request whose connection was lost asks whether the server still answers, and that answer
    /// may come after the point's last window.
    pub async fn stop(mut self) -> Option<ClientError> {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(dispatcher) = self.dispatcher.take() {
            let _ = tokio::task::spawn_blocking(move || dispatcher.join()).await;
        }
        // A load ended by a dead or silent server has nothing worth waiting for.
        let drain = if self.fatal().is_some() { Duration::ZERO } else { DRAIN_TIMEOUT };
        let deadline = tokio::time::Instant::now() + drain;
        tracing::debug!(in_flight = self.shared.in_flight.load(Ordering::Acquire), "draining the load");
        while self.shared.in_flight.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for worker in self.workers.drain(..) {
            worker.abort();
        }
        self.fatal()
    }
}

impl Drop for RunningLoad {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for worker in &self.workers {
            worker.abort();
        }
    }
}

/// The open-loop dispatcher: one OS thread, so its sleeps are not rounded to the runtime's 1 ms
/// timer tick.
fn dispatch<C: InferClient>(
    shared: &Arc<Shared>,
    client: &Arc<C>,
    steps: &Arc<[C::Prepared]>,
    mut pacer: Pacer,
    runtime: &tokio::runtime::Handle,
    max_in_flight: u64,
) {
    let start = std::time::Instant::now();
    loop {
        let intended = start + pacer.next_offset();
        loop {
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            let now = std::time::Instant::now();
            if now >= intended {
                break;
            }
            std::thread::sleep((intended - now).min(DISPATCH_SLICE));
        }
        if !shared.take_ticket() {
            return;
        }
        let shard = (pacer.scheduled() as usize) % shared.recorders.len();
        if shared.in_flight.load(Ordering::Acquire) >= max_in_flight {
            shared.recorders[shard].lock().missed += 1;
            continue;
        }
        // A sequence model: the request is the next step of a sequence. With
        // --serial-sequences it waits (and goes out late) while every sequence has one in
        // flight, as perf_analyzer's worker waits for a free context.
        let sequence = match &shared.sequences {
            None => None,
            Some(table) => loop {
                let mut table = table.lock();
                if let Some(slot) = table.pick() {
                    break Some((slot, table.next(slot)));
                }
                drop(table);
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(Duration::from_micros(100));
            },
        };
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        let (shared, client, steps) = (shared.clone(), client.clone(), steps.clone());
        let intended = Instant::from_std(intended);
        runtime.spawn(async move {
            let late = Instant::now().saturating_duration_since(intended) > LATE_SLACK;
            let (slot, step) = sequence.map_or((None, None), |(slot, step)| (Some(slot), Some(step)));
            shared.send_one(&*client, &steps, shard, intended, late, step).await;
            if let (Some(slot), Some(table)) = (slot, &shared.sequences) {
                table.lock().release(slot);
            }
            shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Open loop, when the dispatcher ends: the end of every sequence cut short, so the server
/// releases them (perf_analyzer's CompleteOngoingSequences).
fn end_sequences<C: InferClient>(
    shared: &Arc<Shared>,
    client: &Arc<C>,
    steps: &Arc<[C::Prepared]>,
    runtime: &tokio::runtime::Handle,
) {
    let Some(table) = &shared.sequences else { return };
    // A serial sequence with a request in flight ends once that request is answered.
    let deadline = std::time::Instant::now() + DRAIN_TIMEOUT;
    loop {
        let (last, waiting) = {
            let mut table = table.lock();
            let ready = table.unfinished();
            let last: Vec<SequenceStep> = ready.into_iter().filter_map(|slot| table.finish(slot)).collect();
            (last, table.unfinished_in_flight())
        };
        for last in last {
            shared.in_flight.fetch_add(1, Ordering::AcqRel);
            let (shared, client, steps) = (shared.clone(), client.clone(), steps.clone());
            runtime.spawn(async move {
                shared.end_sequence(&*client, &steps, last).await;
                shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            });
        }
        if waiting == 0 || std::time::Instant::now() >= deadline || shared.fatal.lock().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::RequestTiming;
    use crate::load::fake::FakeClient;

    /// A recycled recorder comes back holding the new window's requests and nothing of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recycled_recorder_holds_only_the_new_window() {
        let client = Arc::new(FakeClient::with_latency(Duration::from_millis(1)));
        let spec = LoadSpec { request_budget: Some(20), ..LoadSpec::new(LoadMode::Concurrency(2)) };
        let load = RunningLoad::start(client, vec![(); 1].into(), &spec).unwrap();
        load.wait_completed(20).await.unwrap();
        let mut spare = WindowRecorder::default();
        spare.record_ok(Duration::from_secs(9), RequestTiming::default());
        spare.record_failed(crate::results::FailureKind::Other, &"an earlier window's failure");
        let window = load.take_window_into(spare);
        load.stop().await;
        assert_eq!((window.ok, window.failed, window.latency_us.len()), (20, 0, 20));
        assert!(window.first_error.is_none());
        assert!(window.latency_us.max() < 9_000_000, "the spare's 9 s request is gone");
    }
}
