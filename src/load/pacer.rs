//! The pacer: a pure function from "how many requests were scheduled so far" to "when the next one
//! is due", as an offset from the start of the load. No clock inside, so schedules are testable
//! exactly; the open-loop dispatcher turns offsets into instants.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, Exp};

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
}

impl Schedule {
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
        }
    }
}

enum Gaps {
    Constant { per_second: f64 },
    Poisson { exp: Exp<f64>, rng: Box<ChaCha8Rng>, offset_s: f64 },
    Trace { gaps: Arc<[Duration]>, offset: Duration },
}

/// Yields the intended offset of each request in turn. Request 0 is due at offset 0.
pub struct Pacer {
    gaps: Gaps,
    scheduled: u64,
}

impl Pacer {
    pub fn new(schedule: &Schedule) -> Result<Pacer, LoadError> {
        let gaps = match schedule {
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
        };
        Ok(Pacer { gaps, scheduled: 0 })
    }

    /// Requests scheduled so far (the number of `next` calls).
    pub fn scheduled(&self) -> u64 {
        self.scheduled
    }

    /// When the next request is due, relative to the start of the load.
    pub fn next_offset(&mut self) -> Duration {
        let k = self.scheduled;
        self.scheduled += 1;
        match &mut self.gaps {
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
        }
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
