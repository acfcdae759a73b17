//! Everything a run of a sweep needs that the plan does not hold as the runtime's own types,
//! translated in one place: the clients' connect options, each point's measure settings and stop
//! rule, the load plan (the trace of `--request-intervals` read once per sweep), the time the
//! interval rule shares among the points, the bounds the outline and the clock grid use, and the
//! worker threads. Nothing else in `run` turns plan types into runtime types.

use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;

use super::grid::WarmUpBound;
use super::point::WARMUP_MAX;
use super::sweep::{LoadPlan, SweepPoints, TimeBank};
use super::RunError;
use crate::client::ConnectOptions;
use crate::load::{read_intervals, LoadMode, LoadSpec};
use crate::measure::{MeasureSettings, Stop, WindowMode};
use crate::plan::{Distribution, Levels, Load, StopWhen, Sweep, SweepKind, Target, TensorFormat, WindowKind};

/// How the wire clients of `sweep` connect: pool size, headers, tensor formats.
pub fn connect_options(sweep: &Sweep) -> ConnectOptions {
    ConnectOptions {
        concurrency: sweep.peak_concurrency() as usize,
        headers: sweep.call.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
        streaming: sweep.call.streaming,
        json_inputs: sweep.call.input_tensor_format == TensorFormat::Json,
        json_outputs: sweep.call.output_tensor_format == TensorFormat::Json,
        request_parameters: sweep.call.request_parameters.clone(),
    }
}

/// How each point of `sweep` is measured at `batch`.
pub fn measure_settings(sweep: &Sweep, batch: u64) -> MeasureSettings {
    let m = &sweep.measurement;
    MeasureSettings {
        window: window_mode(sweep),
        stop: stop_rule(sweep),
        stability_pct: m.stability_percentage,
        max_trials: m.max_trials,
        percentile: m.percentile,
        request_count: m.total_requests,
        batch,
        keep_windows: false,
        windows_on_offsets: false,
    }
}

/// The interval rule's time shared by every point of `sweep` (all its batch sizes), when it
/// bounds each point and the points are known in advance: the sweep then keeps to the bound its
/// outline prints, while a point that needs more than `max` may borrow ([`TimeBank`]).
pub(super) fn time_bank(sweep: &Sweep) -> Option<Arc<TimeBank>> {
    let StopWhen::Ci { max_ms, .. } = sweep.measurement.stop_when else {
        return None;
    };
    if sweep.measurement.total_requests.is_some() {
        return None;
    }
    let points = planned_points(sweep)?;
    Some(Arc::new(TimeBank::new(Duration::from_millis(max_ms), points)))
}

/// perf_analyzer's thread count when `--max-threads` is not given (its DEFAULT_MAX_THREADS).
const PA_DEFAULT_MAX_THREADS: u64 = 16;

/// A profile sweep's open concurrency range (`--concurrency-range 2:0`) as perf_analyzer 2.50
/// runs it, once the model is known. Synchronous calls take a thread each, so the range ends at
/// the thread count (`--max-threads`, 16 by default), which the settings block then prints as
/// the concurrency limit; asynchronously on a sequence model it is refused. `None`: unchanged.
pub(super) fn bound_open_range(sweep: &Sweep, model: ModelTraits) -> Result<Option<Sweep>, RunError> {
    let Load::Concurrency { levels: Levels::Range { start, end: None, step } } = &sweep.load else {
        return Ok(None);
    };
    if sweep.kind != SweepKind::Profile {
        return Ok(None);
    }
    if asynchronous(sweep, model) {
        if model.sequence {
            return Err(RunError::bad_input(anyhow!(
                "The 'end' concurrency can not be 0 for sequence models when using asynchronous API."
            )));
        }
        return Ok(None);
    }
    eprintln!("WARNING: The maximum attainable concurrency will be limited by max_threads specification.");
    // A start above the thread count is measured alone, as any range ending below its start.
    let end = sweep.call.max_threads.map_or(PA_DEFAULT_MAX_THREADS, |n| n as u64).max(*start);
    let levels = Levels::Range { start: *start, end: Some(end), step: *step };
    Ok(Some(Sweep { load: Load::Concurrency { levels }, ..sweep.clone() }))
}

/// The load levels of `sweep`, as the measuring loop takes them.
pub fn load_plan(sweep: &Sweep) -> Result<LoadPlan, RunError> {
    let points = match &sweep.load {
        Load::Concurrency { levels: Levels::List(values) } => SweepPoints::Concurrencies(values.clone()),
        Load::Concurrency { levels: Levels::Range { start, end, step } } => {
            SweepPoints::Concurrency { start: *start, end: *end, step: *step }
        }
        Load::RequestRate { start, end, step, distribution, seed } => SweepPoints::RequestRate {
            start: *start,
            end: *end,
            step: *step,
            distribution: match distribution {
                Distribution::Constant => crate::load::Distribution::Constant,
                Distribution::Poisson => crate::load::Distribution::Poisson { seed: *seed },
            },
        },
        Load::Trace { intervals } => SweepPoints::Trace(read_intervals(intervals).map_err(RunError::bad_input)?),
        Load::Periodic(_) => return Err(RunError::bad_input(anyhow!("a periodic load has no sweep points"))),
    };
    Ok(LoadPlan {
        points,
        latency_threshold_us: sweep.latency_limit_ms.map(|ms| ms * 1000.0),
        binary_search: sweep.binary_search,
        warmup_requests: sweep.measurement.warmup_requests,
        max_in_flight: LoadSpec::new(LoadMode::Concurrency(1)).max_in_flight,
        log_requests: sweep.output.profile_export_file.is_some(),
        time_bank: None,
        shard: None,
        slots: None,
        stall_limit: sweep.call.stall_timeout(),
        shape: load_shape(&sweep.shape)?,
    })
}

/// A sweep's shape as the load takes it, its rate series read (checked durations: see
/// `plan::validate::check_ramp_durations`).
pub fn load_shape(shape: &crate::plan::shape::Shape) -> Result<crate::load::Shape, RunError> {
    let seconds = |s: Option<f64>| s.map(Duration::from_secs_f64);
    let series = shape.request_rate_series.as_deref().map(crate::load::read_rate_series);
    Ok(crate::load::Shape {
        rate_ramp: seconds(shape.request_rate_ramp_duration),
        rate_series: series.transpose().map_err(RunError::bad_input)?.map(Arc::new),
        concurrency_ramp: seconds(shape.concurrency_ramp_duration),
    })
}

/// Worker threads of the runtime that drives the load: `max_threads` when given, else one per
/// 16 concurrent requests for a remote server (one thread keeps many requests in flight and
/// costs the least CPU per request: no cross-thread wake-ups), and every core when the bundled
/// server shares the runtime. Never more than the cores.
pub fn worker_threads(sweep: &Sweep, target: &Target) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let wanted = match (sweep.call.max_threads, target) {
        (Some(n), _) => n,
        (None, Target::Remote { .. }) => (sweep.peak_concurrency() as usize).div_ceil(16),
        (None, Target::Embedded { .. } | Target::InProcess { .. }) => cores,
    };
    wanted.clamp(1, cores)
}

/// What perf_analyzer's settings block says about the model.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModelTraits {
    pub sequence: bool,
    pub decoupled: bool,
}

/// Whether perf_analyzer would call asynchronously: streaming always does, a sequence model
/// does unless `--sync`, others only with `-a`.
pub fn asynchronous(sweep: &Sweep, model: ModelTraits) -> bool {
    sweep.call.streaming || sweep.call.asynchronous.unwrap_or(model.sequence)
}

/// What ends a point of this sweep.
pub fn stop_rule(sweep: &Sweep) -> Stop {
    match sweep.measurement.stop_when {
        StopWhen::Stable => Stop::Stable,
        StopWhen::Ci { half_width_pct, max_ms } => {
            Stop::Intervals { half_width_pct, max: Duration::from_millis(max_ms) }
        }
    }
}

/// Points the sweep measures (batch sizes × load levels), when known in advance: not for a
/// binary search or an open-ended range (a linear sweep under `-l` may stop before the last).
pub fn planned_points(sweep: &Sweep) -> Option<usize> {
    let levels = match &sweep.load {
        _ if sweep.binary_search => return None,
        Load::Concurrency { levels: Levels::Range { end: None, .. } } => return None,
        Load::Concurrency { levels } => levels.values(0).len(),
        Load::RequestRate { start, end, step, .. } => ((end - start) / step + 1e-9).floor() as usize + 1,
        Load::Trace { .. } | Load::Periodic(_) => 1,
    };
    Some(levels * sweep.batch_sizes.values(0).len())
}

/// How long a sweep's warm-up may take (`--start-at` leaves it a part of the slots).
pub fn warm_up_bound(sweep: &Sweep) -> WarmUpBound {
    match (stop_rule(sweep), sweep.measurement.warmup_requests) {
        // Settling gives up after WARMUP_MAX, its first requests included (run::point::settle).
        (Stop::Intervals { .. }, _) => WarmUpBound::AtMost(WARMUP_MAX),
        (Stop::Stable, 0) => WarmUpBound::None,
        (Stop::Stable, _) => WarmUpBound::Requests,
    }
}

/// The longest one point may take, when the rule bounds it.
pub fn point_bound(sweep: &Sweep) -> Option<Duration> {
    let m = &sweep.measurement;
    if m.total_requests.is_some() {
        return None;
    }
    match (stop_rule(sweep), m.mode) {
        (Stop::Intervals { max, .. }, _) => Some(max),
        (Stop::Stable, WindowKind::TimeWindows) => Some(Duration::from_millis(m.interval_ms) * m.max_trials as u32),
        (Stop::Stable, WindowKind::CountWindows) => None,
    }
}

/// What ends a window of this sweep.
pub fn window_mode(sweep: &Sweep) -> WindowMode {
    let m = &sweep.measurement;
    match m.mode {
        WindowKind::TimeWindows => WindowMode::Time(Duration::from_millis(m.interval_ms)),
        WindowKind::CountWindows => WindowMode::Count(m.request_count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::settings::{resolve, Settings};

    fn profile(concurrency: &str, asynchronous: Option<bool>, max_threads: Option<usize>) -> Sweep {
        let mut settings = Settings::default();
        settings.load.concurrency = Some(Levels::parse_colon(concurrency).unwrap());
        settings.load.latency_threshold_ms = Some(100.0);
        (settings.call.asynchronous, settings.call.max_threads) = (asynchronous, max_threads);
        resolve(SweepKind::Profile, &settings, &Target::Embedded { model_repository: None }).unwrap()
    }

    fn range(sweep: &Sweep) -> Levels {
        match &sweep.load {
            Load::Concurrency { levels } => levels.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_synchronous_open_range_ends_at_perf_analyzers_thread_count() {
        let plain = ModelTraits::default();
        let bounded = bound_open_range(&profile("2:0", None, None), plain).unwrap().unwrap();
        assert_eq!(range(&bounded), Levels::Range { start: 2, end: Some(16), step: 1 });
        let bounded = bound_open_range(&profile("2:0:3", None, Some(5)), plain).unwrap().unwrap();
        assert_eq!(range(&bounded), Levels::Range { start: 2, end: Some(5), step: 3 });
        // A start above the thread count is measured alone.
        let bounded = bound_open_range(&profile("20:0", None, None), plain).unwrap().unwrap();
        assert_eq!(range(&bounded), Levels::Range { start: 20, end: Some(20), step: 1 });
        // Asynchronous or closed ranges are left alone.
        assert!(bound_open_range(&profile("2:0", Some(true), None), plain).unwrap().is_none());
        assert!(bound_open_range(&profile("2:4", None, None), plain).unwrap().is_none());
        // A sequence model is asynchronous unless --sync, and then its open range is refused.
        let sequence = ModelTraits { sequence: true, decoupled: false };
        let err = bound_open_range(&profile("2:0", None, None), sequence).unwrap_err();
        assert!(err.error.to_string().contains("can not be 0 for sequence models"), "{}", err.error);
        assert!(bound_open_range(&profile("2:0", Some(false), None), sequence).unwrap().is_some());
    }
}
