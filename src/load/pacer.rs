//! The pacer: a pure function from "how many requests were scheduled so far" to "when the next one
//! is due", as an offset from the start of the load. No clock inside, so schedules are testable
//! exactly; the open-loop dispatcher turns offsets into instants.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, Exp};

use super::shape::{RateCurve, Shape};
use super::LoadError;

/// How inter-arrival gaps are drawn for a request rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Evenly spaced: request k is due at k / rate.
    Constant,
    /// Exponential gaps (a Poisson process) drawn from a seeded generator, so runs repeat.
    Poisson { seed: u64 },
}

/// The intended send times of an open-loop load.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    Rate {
        per_second: f64,
        distribution: Distribution,
    },
    /// Gaps read from a file, used in order and cycled (`--request-intervals`).
    Trace(Arc<[Duration]>),
    /// A rate that changes over time (a ramp, a series: [`RateCurve`]): the x-th request is due
    /// when the curve's integral reaches x, x counting 0, 1, 2… (constant) or summing
    /// exponential gaps of mean 1 (Poisson: a Poisson process whose rate follows the curve).
    /// Shard `index` of `count` takes x = index, index + count… of a constant schedule, and
    /// its own Poisson process at 1/`count` of the curve.
    Curve {
        curve: Arc<RateCurve>,
        distribution: Distribution,
        index: u64,
        count: u64,
    },
    /// Another schedule, every request due `by` later (a shard's part of a constant rate or a
    /// trace: its requests fall between the other shards').
    Shifted {
        by: Duration,
        inner: Box<Schedule>,
    },
}

impl Schedule {
    /// The open-loop schedule of a level at `per_second`, shaped by `shape` (a ramp up to the
    /// rate, or a series in its place).
    pub fn shaped(per_second: f64, distribution: Distribution, shape: &Shape) -> Result<Schedule, LoadError> {
        let curve = match (&shape.rate_series, shape.rate_ramp) {
            (Some(series), _) => series.clone(),
            (None, Some(ramp)) => Arc::new(RateCurve::ramp(per_second, ramp)?),
            (None, None) => return Ok(Schedule::Rate { per_second, distribution }),
        };
        Ok(Schedule::Curve { curve, distribution, index: 0, count: 1 })
    }

    /// The long-run request rate of the schedule, in requests per second.
    pub fn mean_rate_per_s(&self) -> f64 {
        match self {
            Schedule::Rate { per_second, .. } => *per_second,
            Schedule::Trace(gaps) => {
                let total_s: f64 = gaps.iter().map(Duration::as_secs_f64).sum();
                if total_s > 0.0 {
                    gaps.len() as f64 / total_s
                } else {
                    f64::INFINITY
                }
            }
            Schedule::Shifted { inner, .. } => inner.mean_rate_per_s(),
            Schedule::Curve { curve, count, .. } => curve.nominal_per_s() / *count as f64,
        }
    }

    /// Shard `index` of `count`'s part: every `count`-th request from the `index`-th, so the
    /// shards' schedules together are this one. A Poisson rate becomes `count` independent
    /// Poisson processes of rate/`count` (their union is one of the whole rate).
    pub fn shard_part(&self, index: u64, count: u64) -> Schedule {
        match self {
            Schedule::Rate { per_second, distribution: Distribution::Constant } => Schedule::Shifted {
                by: Duration::from_secs_f64(index as f64 / per_second),
                inner: Box::new(Schedule::Rate {
                    per_second: per_second / count as f64,
                    distribution: Distribution::Constant,
                }),
            },
            Schedule::Rate { per_second, distribution: Distribution::Poisson { seed } } => Schedule::Rate {
                per_second: per_second / count as f64,
                distribution: Distribution::Poisson {
                    seed: seed.wrapping_add(index.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                },
            },
            Schedule::Trace(gaps) => {
                // Due times over `count` cycles of the trace; this shard takes every count-th.
                let (n, index, count) = (gaps.len(), index as usize, count as usize);
                let mut due = Vec::with_capacity(n * count + index + 1);
                let mut t = Duration::ZERO;
                for k in 0..=n * count + index {
                    due.push(t);
                    t += gaps[k % n];
                }
                let own: Vec<Duration> = (0..=n).map(|j| due[index + j * count]).collect();
                let part: Vec<Duration> = own.windows(2).map(|w| w[1] - w[0]).collect();
                Schedule::Shifted { by: own[0], inner: Box::new(Schedule::Trace(part.into())) }
            }
            Schedule::Curve { curve, distribution, index: i, count: n } => {
                let distribution = match *distribution {
                    Distribution::Poisson { seed } => {
                        Distribution::Poisson { seed: seed.wrapping_add(index.wrapping_mul(0x9e37_79b9_7f4a_7c15)) }
                    }
                    constant => constant,
                };
                Schedule::Curve { curve: curve.clone(), distribution, index: i + index * n, count: n * count }
            }
            Schedule::Shifted { by, inner } => match inner.shard_part(index, count) {
                Schedule::Shifted { by: more, inner } => Schedule::Shifted { by: *by + more, inner },
                other => Schedule::Shifted { by: *by, inner: Box::new(other) },
            },
        }
    }
}

enum Gaps {
    Constant {
        per_second: f64,
    },
    Poisson {
        exp: Exp<f64>,
        rng: Box<ChaCha8Rng>,
        offset_s: f64,
    },
    Trace {
        gaps: Arc<[Duration]>,
        offset: Duration,
    },
    /// `x` is the next request's place on the curve's integral; `step` draws the next one.
    Curve {
        curve: Arc<RateCurve>,
        x: f64,
        step: CurveStep,
    },
}

enum CurveStep {
    /// x += count (from x = index).
    Even { count: f64 },
    /// x += count · Exp(1).
    Poisson { count: f64, rng: Box<ChaCha8Rng> },
}

/// Yields the intended offset of each request in turn. Request 0 is due at offset 0.
pub struct Pacer {
    gaps: Gaps,
    scheduled: u64,
    /// Added to every offset ([`Schedule::Shifted`]).
    shift: Duration,
}

impl Pacer {
    pub fn new(schedule: &Schedule) -> Result<Pacer, LoadError> {
        let gaps = match schedule {
            Schedule::Shifted { by, inner } => {
                let inner = Pacer::new(inner)?;
                return Ok(Pacer { shift: inner.shift + *by, ..inner });
            }
            Schedule::Rate { per_second, distribution } => {
                if !(per_second.is_finite() && *per_second > 0.0) {
                    return Err(LoadError::BadRate(*per_second));
                }
                match distribution {
                    Distribution::Constant => Gaps::Constant { per_second: *per_second },
                    Distribution::Poisson { seed } => Gaps::Poisson {
                        exp: Exp::new(*per_second).map_err(|_| LoadError::BadRate(*per_second))?,
                        rng: Box::new(ChaCha8Rng::seed_from_u64(*seed)),
                        offset_s: 0.0,
                    },
                }
            }
            Schedule::Trace(gaps) => {
                if gaps.is_empty() {
                    return Err(LoadError::EmptyTrace);
                }
                Gaps::Trace { gaps: gaps.clone(), offset: Duration::ZERO }
            }
            Schedule::Curve { curve, distribution, index, count } => {
                let count = (*count).max(1) as f64;
                let (x, step) = match distribution {
                    Distribution::Constant => (*index as f64, CurveStep::Even { count }),
                    Distribution::Poisson { seed } => {
                        (0.0, CurveStep::Poisson { count, rng: Box::new(ChaCha8Rng::seed_from_u64(*seed)) })
                    }
                };
                Gaps::Curve { curve: curve.clone(), x, step }
            }
        };
        Ok(Pacer { gaps, scheduled: 0, shift: Duration::ZERO })
    }

    /// Requests scheduled so far (the number of `next` calls).
    pub fn scheduled(&self) -> u64 {
        self.scheduled
    }

    /// When the next request is due, relative to the start of the load.
    pub fn next_offset(&mut self) -> Duration {
        let k = self.scheduled;
        self.scheduled += 1;
        let due = match &mut self.gaps {
            // Computed from k, not accumulated, so rounding never drifts.
            Gaps::Constant { per_second } => Duration::from_secs_f64(k as f64 / *per_second),
            Gaps::Poisson { exp, rng, offset_s } => {
                let due = *offset_s;
                *offset_s += exp.sample(rng);
                Duration::from_secs_f64(due)
            }
            Gaps::Trace { gaps, offset } => {
                let due = *offset;
                *offset += gaps[(k % gaps.len() as u64) as usize];
                due
            }
            Gaps::Curve { curve, x, step } => {
                let due = Duration::from_secs_f64(curve.instant_of(*x));
                *x += match step {
                    CurveStep::Even { count } => *count,
                    CurveStep::Poisson { count, rng } => *count * Exp::new(1.0).expect("rate 1").sample(&mut **rng),
                };
                due
            }
        };
        self.shift + due
    }
}

/// Reads a `--request-intervals` file: one gap in microseconds per line (blank lines skipped).
pub fn read_intervals(path: &Path) -> Result<Arc<[Duration]>, LoadError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LoadError::Intervals(format!("cannot read '{}': {e}", path.display())))?;
    let mut gaps = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let us: u64 = line.parse().map_err(|_| {
            LoadError::Intervals(format!(
                "'{}' line {}: '{line}' is not a whole number of microseconds",
                path.display(),
                n + 1
            ))
        })?;
        gaps.push(Duration::from_micros(us));
    }
    if gaps.is_empty() || gaps.iter().all(|g| g.is_zero()) {
        return Err(LoadError::Intervals(format!("'{}' holds no non-zero interval", path.display())));
    }
    Ok(gaps.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shards' offsets together, sorted, as one process's schedule would have them.
    fn union_of_parts(schedule: &Schedule, count: u64, each: usize) -> Vec<Duration> {
        let mut all: Vec<Duration> = (0..count).flat_map(|k| offsets(schedule.shard_part(k, count), each)).collect();
        all.sort();
        all
    }

    #[test]
    fn shard_parts_of_a_constant_rate_or_a_trace_make_up_the_whole() {
        let constant = Schedule::Rate { per_second: 300.0, distribution: Distribution::Constant };
        let whole = offsets(constant.clone(), 30);
        let union = union_of_parts(&constant, 3, 10);
        for (a, b) in union.iter().zip(&whole) {
            assert!(a.abs_diff(*b) < Duration::from_nanos(10), "{a:?} vs {b:?}");
        }
        let gaps: Arc<[Duration]> = [1u64, 5, 2, 9, 3].iter().map(|&ms| Duration::from_millis(ms)).collect();
        let trace = Schedule::Trace(gaps);
        assert_eq!(union_of_parts(&trace, 2, 10), offsets(trace.clone(), 20));
        assert_eq!(union_of_parts(&trace, 3, 10), offsets(trace, 30));
    }

    #[test]
    fn poisson_shards_draw_independent_gaps_at_their_share_of_the_rate() {
        let poisson = Schedule::Rate { per_second: 1000.0, distribution: Distribution::Poisson { seed: 7 } };
        let (a, b) = (poisson.shard_part(0, 2), poisson.shard_part(1, 2));
        assert_eq!(a.mean_rate_per_s(), 500.0);
        assert_ne!(offsets(a, 5), offsets(b, 5));
    }

    fn offsets(schedule: Schedule, n: usize) -> Vec<Duration> {
        let mut p = Pacer::new(&schedule).unwrap();
        (0..n).map(|_| p.next_offset()).collect()
    }

    #[test]
    fn constant_rate_spaces_requests_evenly() {
        let got = offsets(Schedule::Rate { per_second: 200.0, distribution: Distribution::Constant }, 4);
        let ms = |m| Duration::from_millis(m);
        assert_eq!(got, vec![ms(0), ms(5), ms(10), ms(15)]);
        // No drift after many requests.
        let mut p = Pacer::new(&Schedule::Rate { per_second: 3.0, distribution: Distribution::Constant }).unwrap();
        let last = (0..=3000).map(|_| p.next_offset()).last().unwrap();
        assert_eq!(last, Duration::from_secs(1000));
    }

    #[test]
    fn poisson_has_the_requested_mean_and_repeats_with_its_seed() {
        let schedule = Schedule::Rate { per_second: 1000.0, distribution: Distribution::Poisson { seed: 7 } };
        let a = offsets(schedule.clone(), 20_001);
        assert_eq!(a, offsets(schedule, 20_001));
        let mean_gap_us = a.last().unwrap().as_secs_f64() * 1e6 / 20_000.0;
        assert!((mean_gap_us - 1000.0).abs() < 30.0, "mean gap {mean_gap_us} µs");
        // Gaps vary, unlike a constant schedule.
        assert!(a.windows(2).any(|w| w[1] - w[0] > Duration::from_micros(2000)));
        let other = offsets(Schedule::Rate { per_second: 1000.0, distribution: Distribution::Poisson { seed: 8 } }, 10);
        assert_ne!(a[..10], other[..]);
    }

    #[test]
    fn trace_cycles_its_intervals() {
        let us = |u| Duration::from_micros(u);
        let gaps: Arc<[Duration]> = vec![us(100), us(300)].into();
        let got = offsets(Schedule::Trace(gaps.clone()), 5);
        assert_eq!(got, vec![us(0), us(100), us(400), us(500), us(800)]);
        assert_eq!(Schedule::Trace(gaps).mean_rate_per_s(), 5000.0);
    }

    /// How many of `offsets` are due by `t_s` seconds.
    fn due_by(offsets: &[Duration], t_s: f64) -> f64 {
        offsets.partition_point(|o| o.as_secs_f64() <= t_s) as f64
    }

    fn ramp(distribution: Distribution) -> Schedule {
        let shape = Shape { rate_ramp: Some(Duration::from_secs(10)), ..Shape::default() };
        Schedule::shaped(200.0, distribution, &shape).unwrap()
    }

    #[test]
    fn a_constant_ramp_sends_what_its_curve_integrates_to_by_any_time() {
        let curve = RateCurve::ramp(200.0, Duration::from_secs(10)).unwrap();
        let got = offsets(ramp(Distribution::Constant), 4000);
        assert_eq!(ramp(Distribution::Constant).mean_rate_per_s(), 200.0, "a ramp is named by its target");
        for tenth in 1..=150 {
            let t = tenth as f64 / 10.0;
            let (sent, integral) = (due_by(&got, t), curve.due_by(t));
            // Request 0 is due at 0, so floor(integral) + 1 are due by t (the float's rounding aside).
            assert!((sent - integral).abs() <= 1.0 + 1e-6, "by {t} s: {sent} sent, the ramp integrates to {integral}");
        }
        // A steady 200/s from the start would have sent 1,000 by 5 s; the ramp sends ~a quarter.
        assert!(due_by(&got, 5.0) < 260.0);
    }

    #[test]
    fn a_poisson_ramp_follows_its_curve_within_the_noise_of_its_counts() {
        let curve = RateCurve::ramp(200.0, Duration::from_secs(10)).unwrap();
        for seed in [1, 2, 3] {
            let got = offsets(ramp(Distribution::Poisson { seed }), 4000);
            assert_eq!(got, offsets(ramp(Distribution::Poisson { seed }), 4000), "it repeats with its seed");
            for t in [1.0, 2.5, 5.0, 7.5, 10.0, 15.0] {
                // A Poisson count of mean m has standard deviation √m: 5 of them bound it.
                let (sent, mean) = (due_by(&got, t), curve.due_by(t));
                assert!((sent - mean).abs() <= 5.0 * mean.sqrt() + 1.0, "seed {seed}, by {t} s: {sent} vs {mean}");
            }
            let gaps: Vec<f64> = got.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
            assert!(gaps.iter().any(|g| *g > 2.0 / 200.0), "gaps vary, unlike a constant ramp's");
        }
    }

    #[test]
    fn shard_parts_of_a_curve_make_up_the_whole() {
        let whole = offsets(ramp(Distribution::Constant), 300);
        let union = union_of_parts(&ramp(Distribution::Constant), 3, 100);
        for (a, b) in union.iter().zip(&whole) {
            assert!(a.abs_diff(*b) < Duration::from_nanos(10), "{a:?} vs {b:?}");
        }
        let poisson = ramp(Distribution::Poisson { seed: 7 });
        let (a, b) = (poisson.shard_part(0, 2), poisson.shard_part(1, 2));
        assert_eq!(a.mean_rate_per_s(), 100.0);
        assert_ne!(offsets(a, 5), offsets(b, 5));
    }

    #[test]
    fn a_series_replaces_the_rate() {
        let series = Arc::new(RateCurve::new(vec![(0.0, 10.0), (1.0, 10.0), (1.0 + 1e-9, 100.0)]).unwrap());
        let shape = Shape { rate_series: Some(series), ..Shape::default() };
        let got = offsets(Schedule::shaped(1.0, Distribution::Constant, &shape).unwrap(), 20);
        assert_eq!(due_by(&got, 0.95), 10.0, "10/s for the first second");
        assert_eq!(due_by(&got, 1.095), 20.0, "then 100/s");
    }

    #[test]
    fn bad_schedules_are_errors() {
        assert!(Pacer::new(&Schedule::Rate { per_second: 0.0, distribution: Distribution::Constant }).is_err());
        assert!(Pacer::new(&Schedule::Rate { per_second: f64::NAN, distribution: Distribution::Constant }).is_err());
        assert!(Pacer::new(&Schedule::Trace(Vec::new().into())).is_err());
    }

    #[test]
    fn intervals_file_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.txt");
        std::fs::write(&good, "100\n\n250\n").unwrap();
        let gaps = read_intervals(&good).unwrap();
        assert_eq!(&gaps[..], &[Duration::from_micros(100), Duration::from_micros(250)]);
        let bad = dir.path().join("bad.txt");
        std::fs::write(&bad, "100\nabc\n").unwrap();
        let err = read_intervals(&bad).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(read_intervals(&dir.path().join("missing")).is_err());
    }
}
