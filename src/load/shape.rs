//! Load that changes over time, written once for both engines: a rate curve (AIPerf's
//! `--request-rate-ramp-duration` and `--request-rate-series`) whose integral says when each
//! request is due, and the instants a concurrency ramp (`--concurrency-ramp-duration`) opens its
//! slots. Pure: no clock inside, so every instant is testable exactly.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::LoadError;

/// AIPerf's rate ramp updates its rate every 0.1 s and starts at `target * 0.1 / duration`
/// (`AIPERF_TIMING_RATE_RAMP_UPDATE_INTERVAL`), so a ramp never starts at zero.
pub const RATE_RAMP_UPDATE_S: f64 = 0.1;

/// A request rate over time: piecewise linear between its points, the last rate held after the
/// last point. The integral (requests due by `t`) and its inverse (when the x-th is due) are
/// what a schedule needs.
#[derive(Clone, Debug, PartialEq)]
pub struct RateCurve {
    /// (seconds from the start, requests per second); the first at 0, times increasing.
    points: Vec<(f64, f64)>,
    /// Requests due by each point: the integral from 0 to its time.
    due_by: Vec<f64>,
    /// The rate a report names the curve by: a ramp's target, a series' mean over its points
    /// (its rate when it has one point).
    nominal_per_s: f64,
}

impl RateCurve {
    /// A curve through `points`, checked: the first at time 0, times increasing, rates finite
    /// and not negative, the last one positive (a load that ends at rate 0 never ends).
    pub fn new(points: Vec<(f64, f64)>) -> Result<RateCurve, LoadError> {
        let bad = |why: String| Err(LoadError::BadShape(why));
        match points.first() {
            None => return bad("a rate curve needs at least one point".into()),
            Some(&(t, _)) if t != 0.0 => return bad(format!("the first point must be at time 0, not {t}")),
            _ => {}
        }
        if let Some(w) = points.windows(2).find(|w| w[1].0 <= w[0].0 || !w[1].0.is_finite()) {
            return bad(format!("times must increase: {} after {}", w[1].0, w[0].0));
        }
        if let Some(&(t, r)) = points.iter().find(|(_, r)| !(r.is_finite() && *r >= 0.0)) {
            return bad(format!("the rate at {t} s must be a number of requests per second, not {r}"));
        }
        if points.last().is_some_and(|&(_, r)| r <= 0.0) {
            return bad("the last rate must be above 0 (it holds until the load ends)".into());
        }
        let mut due_by = vec![0.0];
        for w in points.windows(2) {
            let ((t0, r0), (t1, r1)) = (w[0], w[1]);
            due_by.push(due_by.last().expect("one") + (r0 + r1) / 2.0 * (t1 - t0));
        }
        let (span, last) = (points[points.len() - 1].0, due_by[due_by.len() - 1]);
        let nominal_per_s = if span > 0.0 { last / span } else { points[0].1 };
        Ok(RateCurve { points, due_by, nominal_per_s })
    }

    /// AIPerf's `--request-rate-ramp-duration`: linear from `target * 0.1 / duration` to
    /// `target` over `duration`, then `target`.
    pub fn ramp(target_per_s: f64, duration: Duration) -> Result<RateCurve, LoadError> {
        let d = duration.as_secs_f64();
        if !(target_per_s.is_finite() && target_per_s > 0.0) {
            return Err(LoadError::BadRate(target_per_s));
        }
        if !(d.is_finite() && d > 0.0) {
            return Err(LoadError::BadShape(format!("a ramp needs a positive duration, not {d} s")));
        }
        let start = (target_per_s * RATE_RAMP_UPDATE_S / d).min(target_per_s);
        let curve = RateCurve::new(vec![(0.0, start), (d, target_per_s)])?;
        Ok(RateCurve { nominal_per_s: target_per_s, ..curve })
    }

    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// The rate at `t_s` seconds.
    pub fn rate_at(&self, t_s: f64) -> f64 {
        let i = self.points.partition_point(|&(t, _)| t <= t_s).saturating_sub(1);
        match self.points.get(i + 1) {
            None => self.points[i].1,
            Some(&(t1, r1)) => {
                let (t0, r0) = self.points[i];
                r0 + (r1 - r0) * (t_s - t0) / (t1 - t0)
            }
        }
    }

    /// Requests due by `t_s` seconds: the integral of the rate from 0.
    pub fn due_by(&self, t_s: f64) -> f64 {
        let i = self.points.partition_point(|&(t, _)| t <= t_s).saturating_sub(1);
        let (t0, r0) = self.points[i];
        let dt = (t_s - t0).max(0.0);
        (self.due_by[i] + (r0 + self.rate_at(t_s)) / 2.0 * dt).max(0.0)
    }

    /// The first instant (seconds) by which `x` requests are due: the inverse of [`due_by`].
    pub fn instant_of(&self, x: f64) -> f64 {
        // The first point with as many due at it, or the segment before it.
        let next = self.due_by.partition_point(|&d| d < x);
        if next < self.due_by.len() && self.due_by[next] == x {
            return self.points[next].0;
        }
        let i = next.saturating_sub(1);
        let (t0, r0) = self.points[i];
        let rest = x - self.due_by[i];
        let slope = match self.points.get(i + 1) {
            Some(&(t1, r1)) => (r1 - r0) / (t1 - t0),
            None => 0.0,
        };
        // rest = r0·dt + slope·dt²/2, solved in the form that keeps its precision near slope 0.
        let root = (r0 * r0 + 2.0 * slope * rest).max(0.0).sqrt();
        t0 + 2.0 * rest / (r0 + root)
    }

    /// The rate a report names this curve by: a ramp's target, a series' mean over its points.
    pub fn nominal_per_s(&self) -> f64 {
        self.nominal_per_s
    }
}

/// AIPerf's `--request-rate-series` file: `{"points": [{"time_s": 0, "qps": 5}, ...]}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeriesFile {
    points: Vec<SeriesPoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeriesPoint {
    time_s: f64,
    qps: f64,
}

/// Reads a `--request-rate-series` file into its curve.
pub fn read_rate_series(path: &Path) -> Result<RateCurve, LoadError> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::BadShape(format!("cannot read '{name}': {e}")))?;
    let file: SeriesFile = serde_json::from_str(&text).map_err(|e| {
        LoadError::BadShape(format!("'{name}': {e} (expected {{\"points\": [{{\"time_s\": 0, \"qps\": 5}}, ...]}})"))
    })?;
    RateCurve::new(file.points.iter().map(|p| (p.time_s, p.qps)).collect())
        .map_err(|e| LoadError::BadShape(format!("'{name}': {e}")))
}

/// How one load level changes over time; the default is a steady load.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shape {
    /// An open loop's rate ramps up to the level's over this long.
    pub rate_ramp: Option<Duration>,
    /// An open loop follows this curve in place of the level's rate.
    pub rate_series: Option<Arc<RateCurve>>,
    /// A closed loop's slots open evenly over this long, the first at once.
    pub concurrency_ramp: Option<Duration>,
}

impl Shape {
    /// When slot `slot` of `slots` opens, from the start of the load.
    pub fn slot_opens_at(&self, slot: u64, slots: u64) -> Duration {
        self.concurrency_ramp.map_or(Duration::ZERO, |ramp| slot_opens_at(slot, slots, ramp))
    }
}

/// AIPerf's concurrency ramp: one slot at once, then one more at even steps, the last at `ramp`.
pub fn slot_opens_at(slot: u64, slots: u64, ramp: Duration) -> Duration {
    if slots <= 1 {
        return Duration::ZERO;
    }
    ramp.mul_f64(slot.min(slots - 1) as f64 / (slots - 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ramp_starts_where_aiperf_starts_and_reaches_its_target() {
        let ramp = RateCurve::ramp(100.0, Duration::from_secs(60)).unwrap();
        assert!((ramp.rate_at(0.0) - 100.0 * 0.1 / 60.0).abs() < 1e-12, "~0.17/s, as AIPerf logs");
        assert!((ramp.rate_at(30.0) - (100.0 * 0.1 / 60.0 + 100.0) / 2.0).abs() < 1e-9, "half way");
        assert_eq!(ramp.rate_at(60.0), 100.0);
        assert_eq!(ramp.rate_at(600.0), 100.0, "held after the ramp");
        assert_eq!(ramp.nominal_per_s(), 100.0);
    }

    #[test]
    fn due_by_is_the_integral_and_instant_of_its_inverse() {
        let curve =
            RateCurve::new(vec![(0.0, 0.0), (2.0, 10.0), (4.0, 10.0), (5.0, 0.0), (6.0, 0.0), (7.0, 4.0)]).unwrap();
        // 0→10 over 2 s: 10 due; 2 s at 10: 20 more; 10→0 over 1 s: 5; 1 s at 0; 0→4 over 1 s: 2.
        for (t, due) in [(1.0, 2.5), (2.0, 10.0), (4.0, 30.0), (5.0, 35.0), (6.0, 35.0), (7.0, 37.0), (9.0, 45.0)] {
            assert!((curve.due_by(t) - due).abs() < 1e-9, "due by {t}: {} not {due}", curve.due_by(t));
        }
        for x in [0.0, 0.5, 2.5, 10.0, 17.0, 33.0, 35.0, 35.5, 37.0, 44.0] {
            let t = curve.instant_of(x);
            assert!((curve.due_by(t) - x).abs() < 1e-9, "instant of {x}: {t}");
        }
        assert_eq!(curve.instant_of(35.0), 5.0, "the first instant, not the end of the pause");
        // 0→4 over a second from 6 s: 2·dt² = 0.5 at dt = 0.5.
        assert!((curve.instant_of(35.5) - 6.5).abs() < 1e-9);
    }

    #[test]
    fn bad_curves_are_refused_with_their_reason() {
        let err = |points: Vec<(f64, f64)>| RateCurve::new(points).unwrap_err().to_string();
        assert!(err(vec![]).contains("at least one"));
        assert!(err(vec![(1.0, 5.0)]).contains("time 0"));
        assert!(err(vec![(0.0, 5.0), (2.0, 5.0), (2.0, 6.0)]).contains("increase"));
        assert!(err(vec![(0.0, -1.0), (1.0, 5.0)]).contains("requests per second"));
        assert!(err(vec![(0.0, 5.0), (1.0, 0.0)]).contains("last rate"));
        assert!(RateCurve::ramp(10.0, Duration::ZERO).is_err());
    }

    #[test]
    fn a_series_file_reads_as_aiperf_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("series.json");
        std::fs::write(&path, r#"{"points":[{"time_s":0,"qps":5},{"time_s":60,"qps":10}]}"#).unwrap();
        let curve = read_rate_series(&path).unwrap();
        assert_eq!(curve.points(), &[(0.0, 5.0), (60.0, 10.0)]);
        std::fs::write(&path, r#"{"points":[{"time":0,"qps":5}]}"#).unwrap();
        let err = read_rate_series(&path).unwrap_err().to_string();
        assert!(err.contains("series.json") && err.contains("time_s"), "{err}");
    }

    #[test]
    fn a_concurrency_ramp_opens_its_slots_evenly() {
        let ramp = Duration::from_secs(30);
        let opens: Vec<Duration> = (0..4).map(|s| slot_opens_at(s, 4, ramp)).collect();
        assert_eq!(opens, [0, 10, 20, 30].map(Duration::from_secs));
        assert_eq!(slot_opens_at(0, 1, ramp), Duration::ZERO, "one slot opens at once");
        assert_eq!(Shape::default().slot_opens_at(3, 4), Duration::ZERO, "no ramp: all at once");
    }
}
