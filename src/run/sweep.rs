//! The measuring loop of one batch size: warm up, then measure each load point in turn (a
//! linear range, or a binary search for the largest value under `-l`), handing every row to an
//! observer as soon as it is measured so it reaches disk before the next point starts. Each
//! point runs the load until its windows are stable or its intervals tight enough
//! ([`measure_point`]).
//!
//! All durations come from tokio's clock, so tests can run a sweep on paused (virtual) time.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::grid::{SweepSlots, START_TOLERANCE};
use super::point::{epoch_ns, measure_point, settle, PointOutcome, StatsSource, WindowProgress};
use crate::client::shm::ShmRegistration;
use crate::client::{ClientError, InferClient};
use crate::load::{Distribution, LoadError, LoadMode, LoadSpec, ResponseCheck, RunningLoad, Schedule, Shape};
use crate::measure::{MeasureSettings, Stop};
use crate::plan::MAX_OPEN_CONCURRENCY;
use crate::results::{ComposingModel, LoadPoint, PointResult, PointSlot};

#[cfg(test)]
mod tests;

/// How long a sweep whose server went away waits for it to answer again (a restart) before it
/// ends, with the rows measured so far. A restart of `perfbench serve` or Triton with its
/// models loaded takes seconds; a server that is gone for good costs this much at the end.
pub const RECONNECT_WAIT: Duration = Duration::from_secs(10);
/// How often the server is asked, while the sweep waits for it.
const RECONNECT_POLL: Duration = Duration::from_millis(200);

/// Under the interval rule, the time a point may borrow from later ones leaves each of them at
/// least this share of `max` ([`TimeBank`]).
pub const BANK_RESERVE_SHARE: f64 = 0.5;

/// The interval rule's time, shared by the points of a sweep whose point count is known: the
/// sweep takes at most `points × max` (what its outline prints), but one point may use more than
/// `max` when the others need less. Noise is not spread evenly: batch 1's tail (the first point
/// of an offline sweep) needs 15-20 s on a busy 2-core box, where batch 8 and 16 settle in a few
/// seconds. A point may use all that is left but [`BANK_RESERVE_SHARE`] × `max` for each point
/// after it, so no later point is starved, and time a point leaves unused goes to the next.
#[derive(Debug)]
pub struct TimeBank {
    max: Duration,
    /// Time left to the sweep and points not yet measured.
    state: parking_lot::Mutex<(Duration, usize)>,
}

impl TimeBank {
    pub fn new(max: Duration, points: usize) -> TimeBank {
        TimeBank { max, state: parking_lot::Mutex::new((max * points as u32, points)) }
    }

    fn reserve(&self) -> Duration {
        self.max.mul_f64(BANK_RESERVE_SHARE)
    }

    /// The longest the next point may take.
    pub fn allowance(&self) -> Duration {
        let (left, points) = *self.state.lock();
        if points == 0 {
            return self.max;
        }
        left.saturating_sub(self.reserve() * (points as u32 - 1)).max(self.reserve())
    }

    /// A point is done (measured in `took`, or kept from disk in no time).
    pub fn spend(&self, took: Duration) {
        let mut state = self.state.lock();
        state.0 = state.0.saturating_sub(took);
        state.1 = state.1.saturating_sub(1);
    }
}

impl PartialEq for TimeBank {
    fn eq(&self, other: &Self) -> bool {
        self.max == other.max && *self.state.lock() == *other.state.lock()
    }
}

/// The load points of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub enum SweepPoints {
    /// `--concurrency-range start:end:step`; `end: None` goes on until `-l` is exceeded.
    Concurrency { start: u64, end: Option<u64>, step: u64 },
    /// Closed loop at each of these concurrencies, in order (`--concurrency 8,16,64`).
    Concurrencies(Vec<u64>),
    /// `--request-rate-range start:end:step`, in requests per second.
    RequestRate { start: f64, end: f64, step: f64, distribution: Distribution },
    /// `--request-intervals`: one point, the trace as given.
    Trace(Arc<[Duration]>),
}

/// Everything about a sweep beyond how each point is measured.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadPlan {
    pub points: SweepPoints,
    /// `-l`, in µs: a linear sweep stops after the first point above it.
    pub latency_threshold_us: Option<f64>,
    /// `--binary-search`: bisect the range for the largest value under the threshold.
    pub binary_search: bool,
    /// `--warmup-request-count`: sent once, before the first point, and not measured.
    pub warmup_requests: u64,
    /// Open loop: outstanding requests allowed before due ones are counted missed.
    pub max_in_flight: u64,
    /// Keep per-request times for `--profile-export-file`.
    pub log_requests: bool,
    /// The interval rule's time shared by all the sweep's points (all batch sizes); `None`
    /// gives each point its own `max`.
    pub time_bank: Option<Arc<TimeBank>>,
    /// This process is shard `index` of `count`: it applies its part of each point's load
    /// ([`LoadMode::shard_part`]); the rows keep the level asked of all shards.
    pub shard: Option<(u64, u64)>,
    /// `--start-at`: each point starts on its slot of the run's clock grid.
    pub slots: Option<SweepSlots>,
    /// `--stall-timeout`: a load whose requests in flight have none answered this long ends.
    pub stall_limit: Duration,
    /// How each point's load changes over time (ramps), as `load` shapes it.
    pub shape: Shape,
}

/// What a sweep talks to.
pub struct Target<C: InferClient> {
    pub client: Arc<C>,
    /// Prepared requests, one per input data step, sent in turn.
    pub requests: Arc<[C::Prepared]>,
    pub model: String,
    pub version: String,
    /// Whether the server lists the `statistics` extension.
    pub server_stats: bool,
    /// An ensemble's composing models, read with it in every window (empty otherwise).
    pub composing: Vec<ComposingModel>,
    /// Checks every answer (`validation_data`); `None` sends without decoding answers.
    pub check: Option<ResponseCheck>,
    /// A failed check ends the sweep (true), or is a failed request (`--validate-outputs`).
    pub check_fatal: bool,
    /// A sequence model: how requests form sequences.
    pub sequences: Option<crate::load::SequenceSpec>,
    /// The shared-memory regions `requests` use, registered again after a reconnect.
    pub shm_regions: Vec<ShmRegistration>,
}

/// Sees the sweep as it goes: the progress display and the row writers.
pub trait SweepObserver {
    fn warm_up_started(&mut self, _mode: &LoadMode) {}
    fn point_started(&mut self, _mode: &LoadMode) {}
    /// The point starts past its `--start-at` slot by more than [`super::grid::START_TOLERANCE`].
    fn point_late(&mut self, _mode: &LoadMode, _late: Duration) {}
    fn window_done(&mut self, _window: &WindowProgress) {}
    /// A row is measured; writers persist it here. An error ends the sweep.
    fn point_done(&mut self, result: &PointResult) -> std::io::Result<()>;
    /// A row of this point already on disk (a resumed run), to keep instead of measuring it.
    fn measured_before(&self, _batch: u64, _point: LoadPoint) -> Option<PointResult> {
        None
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A fatal client error ended the sweep: the server went away or stopped answering, or an
    /// answer failed its `validation_data`. `measured` rows were already handed to the observer.
    #[error("{error} (after {measured} measured rows)")]
    Stopped { error: ClientError, measured: usize },
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("writing results: {0}")]
    Output(#[from] std::io::Error),
}

struct Sweeper<'a, C: InferClient, O> {
    target: &'a Target<C>,
    plan: &'a LoadPlan,
    settings: &'a MeasureSettings,
    observer: &'a mut O,
    results: Vec<PointResult>,
    /// The warm-up ran: it comes before the first point that is measured, not kept from disk.
    warmed: bool,
    /// A point was visited (measured or kept): the first one's slot holds the warm-up part.
    visited: bool,
}

impl<C: InferClient, O: SweepObserver> Sweeper<'_, C, O> {
    fn spec(&self, mode: LoadMode) -> LoadSpec {
        let mode = match self.plan.shard {
            Some((index, count)) => mode.shard_part(index, count),
            None => mode,
        };
        LoadSpec {
            mode,
            request_budget: None,
            max_in_flight: self.plan.max_in_flight,
            log_requests: self.plan.log_requests,
            sequences: self.target.sequences.clone(),
            check_fatal: self.target.check_fatal,
            stall_limit: self.plan.stall_limit,
            concurrency_ramp: self.plan.shape.concurrency_ramp,
        }
    }

    /// Sends `--warmup-request-count` requests at the load of the first point measured; under
    /// the interval rule it goes on until throughput settles ([`settle`]), at most
    /// [`WARMUP_MAX`](super::point::WARMUP_MAX).
    async fn warm_up(&mut self, mode: LoadMode) -> Result<(), SweepError> {
        let settling = matches!(self.settings.stop, Stop::Intervals { .. });
        if self.plan.warmup_requests == 0 && !settling {
            return Ok(());
        }
        self.observer.warm_up_started(&mode);
        let budget = (!settling).then_some(self.plan.warmup_requests);
        let spec = LoadSpec { request_budget: budget, log_requests: false, ..self.spec(mode.clone()) };
        let load = RunningLoad::start_checked(
            self.target.client.clone(),
            self.target.requests.clone(),
            &spec,
            self.target.check.clone(),
        )?;
        tracing::debug!(?mode, "warm-up started");
        let outcome = if settling {
            settle(&load, self.settings, &mode, self.plan.warmup_requests).await
        } else {
            load.wait_completed(self.plan.warmup_requests).await
        };
        tracing::debug!(completed = load.completed(), "warm-up done, stopping its load");
        let ended_by = load.stop().await;
        outcome
            .and(ended_by.map_or(Ok(()), Err))
            .map_err(|error| SweepError::Stopped { error, measured: self.results.len() })
    }

    /// Measures one point and hands it to the observer (or keeps the observer's row of it from
    /// an earlier run); returns whether it stayed under `-l`.
    async fn measure(&mut self, mode: LoadMode) -> Result<bool, SweepError> {
        // A kept point takes its slot too, so every shard's point k keeps slot k.
        let slot = self.plan.slots.as_ref().map(|s| s.grid.next(s.parts, !self.visited));
        self.visited = true;
        if let Some(kept) = self.observer.measured_before(self.settings.batch, mode.point()) {
            tracing::debug!(?mode, "point kept from an earlier run");
            if let Some(bank) = &self.plan.time_bank {
                bank.spend(Duration::ZERO);
            }
            return Ok(self.keep(kept));
        }
        if !self.warmed {
            self.warmed = true;
            if let Some(slot) = &slot {
                sleep_until_epoch(slot.warm_up_ns).await;
            }
            self.warm_up(mode.clone()).await?;
        }
        let point_slot = match &slot {
            Some(slot) => {
                let late = Duration::from_nanos(sleep_until_epoch(slot.start_ns).await.saturating_sub(slot.start_ns));
                if late > START_TOLERANCE {
                    self.observer.point_late(&mode, late);
                }
                Some(PointSlot { start_ns: slot.start_ns, late })
            }
            None => None,
        };
        self.observer.point_started(&mode);
        let spec = LoadSpec { request_budget: self.settings.request_count, ..self.spec(mode.clone()) };
        let load = RunningLoad::start_checked(
            self.target.client.clone(),
            self.target.requests.clone(),
            &spec,
            self.target.check.clone(),
        )?;
        let stats = StatsSource {
            client: &*self.target.client,
            model: self.target.server_stats.then_some((self.target.model.as_str(), self.target.version.as_str())),
            composing: &self.target.composing,
        };
        let observer = &mut *self.observer;
        let mut settings = self.settings.clone();
        if let (Some(bank), Stop::Intervals { max, .. }) = (&self.plan.time_bank, &mut settings.stop) {
            *max = bank.allowance();
        }
        tracing::debug!(?mode, stop = ?settings.stop, "point started");
        let begun = Instant::now();
        let measured =
            measure_point(&load, &stats, &settings, mode.point(), |window| observer.window_done(window)).await;
        if let Some(bank) = &self.plan.time_bank {
            bank.spend(begun.elapsed());
        }
        tracing::debug!(completed = load.completed(), "point measured, stopping its load");
        let ended_by = load.stop().await;
        // A server found gone while the load drained (a lost connection's probe said so after
        // the last window) ends the point as surely as one found gone during it.
        let measured = match (measured, ended_by) {
            (Ok(PointOutcome::Measured(partial)), Some(error)) => Ok(PointOutcome::Interrupted { partial, error }),
            (measured, _) => measured,
        };
        let stopped = |error| SweepError::Stopped { error, measured: self.results.len() };
        let (mut result, interrupted) = match measured.map_err(stopped)? {
            PointOutcome::Measured(result) => (result, false),
            PointOutcome::Interrupted { partial, error } => {
                // A sharded or clock-lined sweep cannot wait: the other shards go on.
                if self.plan.shard.is_some() || self.plan.slots.is_some() {
                    return Err(stopped(error));
                }
                self.reconnect().await.map_err(|_| stopped(error))?;
                (partial, true)
            }
        };
        result.detail.slot = point_slot;
        if let Some((index, count)) = self.plan.shard {
            // A shard held only its part of the row's load: its client is judged against that.
            result.row.client.held = mode.shard_part(index, count).point().amount();
        }
        self.observer.point_done(&result)?;
        result.detail.windows = Default::default();
        // What was measured before the break says nothing about `-l`: the sweep goes on.
        Ok(self.keep(result) || interrupted)
    }

    /// The server went away mid-point: waits up to [`RECONNECT_WAIT`] for it to serve the model
    /// again, with every pooled connection and stream dropped, then registers the sweep's
    /// shared-memory regions again. The last error when it does not come back.
    async fn reconnect(&self) -> Result<(), ClientError> {
        let client = &*self.target.client;
        let deadline = Instant::now() + RECONNECT_WAIT;
        tracing::info!("the connection to the server was lost; waiting up to {}s for it", RECONNECT_WAIT.as_secs());
        loop {
            client.drop_connections();
            let asked = client.model_metadata(&self.target.model, &self.target.version);
            let answer = match tokio::time::timeout(RECONNECT_POLL * 5, asked).await {
                Ok(Ok(_)) => ShmRegistration::register_all(client, &self.target.shm_regions).await,
                Ok(Err(e)) => Err(e),
                Err(_) => Err(ClientError::Stalled("no answer to the model metadata request".into())),
            };
            match answer {
                Ok(()) => {
                    tracing::info!("reconnected; the interrupted point's row is marked as such");
                    return Ok(());
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(e) => tracing::debug!("the server is not back yet: {e}"),
            }
            tokio::time::sleep(RECONNECT_POLL).await;
        }
    }

    /// Adds a row to the sweep's; whether it stayed under `-l`.
    fn keep(&mut self, result: PointResult) -> bool {
        let under = self.plan.latency_threshold_us.is_none_or(|limit| result.detail.threshold_latency_us <= limit);
        self.results.push(result);
        under
    }

    async fn run(&mut self) -> Result<(), SweepError> {
        match self.plan.points.clone() {
            SweepPoints::Trace(gaps) => {
                self.measure(LoadMode::Schedule(Schedule::Trace(gaps))).await?;
            }
            SweepPoints::Concurrencies(levels) => {
                for c in levels {
                    if !self.measure(LoadMode::Concurrency(c)).await? {
                        break;
                    }
                }
            }
            SweepPoints::Concurrency { start, end, step } => {
                let end = end.unwrap_or(MAX_OPEN_CONCURRENCY);
                if self.plan.binary_search {
                    let mut probe = |c: f64| LoadMode::Concurrency(c as u64);
                    self.bisect(start as f64, end as f64, step as f64, &mut probe).await?;
                } else {
                    let mut c = start;
                    while c <= end && self.measure(LoadMode::Concurrency(c)).await? {
                        c += step;
                    }
                }
            }
            SweepPoints::RequestRate { start, end, step, distribution } => {
                // A bad rate or ramp is the pacer's to report, when the point starts.
                let shape = self.plan.shape.clone();
                let mut probe = |r: f64| {
                    let steady = Schedule::Rate { per_second: r, distribution };
                    LoadMode::Schedule(Schedule::shaped(r, distribution, &shape).unwrap_or(steady))
                };
                if self.plan.binary_search {
                    self.bisect(start, end, step, &mut probe).await?;
                } else {
                    // Index-based, so float steps never accumulate error.
                    let mut k = 0u64;
                    loop {
                        let rate = start + k as f64 * step;
                        if rate > end * (1.0 + 1e-9) || !self.measure(probe(rate)).await? {
                            break;
                        }
                        k += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Largest value in [lo, hi] (on the step grid from lo) whose latency stays under `-l`.
    async fn bisect(
        &mut self,
        lo: f64,
        hi: f64,
        step: f64,
        probe: &mut dyn FnMut(f64) -> LoadMode,
    ) -> Result<(), SweepError> {
        if !self.measure(probe(lo)).await? || hi <= lo || self.plan.latency_threshold_us.is_none() {
            return Ok(());
        }
        if self.measure(probe(hi)).await? {
            return Ok(());
        }
        // Invariant: lo is under the threshold, hi is over it.
        let (mut lo_k, mut hi_k) = (0u64, ((hi - lo) / step).ceil() as u64);
        while hi_k - lo_k > 1 {
            let mid_k = lo_k + (hi_k - lo_k) / 2;
            if self.measure(probe(lo + mid_k as f64 * step)).await? {
                lo_k = mid_k;
            } else {
                hi_k = mid_k;
            }
        }
        Ok(())
    }
}

/// Runs the sweep. On `Stopped`, every row measured before the failure has already been
/// passed to `observer`.
pub async fn sweep<C: InferClient, O: SweepObserver>(
    target: &Target<C>,
    plan: &LoadPlan,
    settings: &MeasureSettings,
    observer: &mut O,
) -> Result<Vec<PointResult>, SweepError> {
    let mut sweeper = Sweeper { target, plan, settings, observer, results: Vec::new(), warmed: false, visited: false };
    sweeper.run().await?;
    Ok(sweeper.results)
}

/// Sleeps until the wall clock reads `at_ns` (ns since the epoch); returns the time it woke.
async fn sleep_until_epoch(at_ns: u64) -> u64 {
    let now = epoch_ns();
    if at_ns > now {
        tokio::time::sleep(Duration::from_nanos(at_ns - now)).await;
    }
    epoch_ns()
}
